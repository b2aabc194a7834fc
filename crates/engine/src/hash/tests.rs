//! Tests of the on-disk hash: operations, persistence, recovery after simulated crashes, injected
//! I/O faults, compaction. The model test against a `BTreeMap` is the conformance suite's
//! (`crates/engine/tests/conformance/`).

use super::shard::{read_spinning, write_spinning, EXCL_SPIN};
use super::*;
use crate::io::{CrashMode, Fault, SimVfs};
use crate::log::format::SEG_DATA;
use crate::store::Outcome;
use crate::{MemcachedOps, TokyoOps};
use std::collections::BTreeMap;
use std::path::PathBuf;

fn sim_open(fs: &SimVfs, params: &str) -> DiskHash {
    DiskHash::open_with(
        Path::new("/sim/db.kh"),
        &Params::parse(params).unwrap(),
        Arc::new(fs.clone()),
        false,
    )
    .unwrap()
}

fn dump(db: &dyn Store) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut c = db.cursor().unwrap();
    while let Some((k, r)) = c.next().unwrap() {
        assert!(
            out.insert(k, r.value).is_none(),
            "cursor returned a key twice"
        );
    }
    out
}

#[test]
fn basic_operations_on_real_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.kh");
    let db = DiskHash::open(&path, &Params::default()).unwrap();
    assert_eq!(db.get(b"a").unwrap(), None);
    let m1 = db.put(b"a", b"1").unwrap();
    assert_eq!(db.get(b"a").unwrap().unwrap().value, b"1");
    let m2 = db.put(b"a", b"22").unwrap();
    assert_ne!(
        m1.version, m2.version,
        "version must change on modification"
    );
    assert_eq!(db.putkeep(b"a", b"x", 0, 0).unwrap(), Outcome::Exists);
    assert!(matches!(
        db.putkeep(b"b", b"x", 5, 0).unwrap(),
        Outcome::Stored(_)
    ));
    assert_eq!(db.get(b"b").unwrap().unwrap().meta.flags, 5);
    db.putcat(b"a", b"33").unwrap();
    db.prepend(b"a", b"0").unwrap();
    assert_eq!(db.get(b"a").unwrap().unwrap().value, b"02233");
    db.putshl(b"a", b"45", 4).unwrap();
    assert_eq!(db.get(b"a").unwrap().unwrap().value, b"3345");
    let v = db.get(b"a").unwrap().unwrap().meta.version;
    assert_eq!(
        db.cas(b"a", v + 1, b"no", 0, 0).unwrap(),
        Outcome::VersionMismatch
    );
    assert!(matches!(
        db.cas(b"a", v, b"yes", 0, 0).unwrap(),
        Outcome::Stored(_)
    ));
    assert_eq!(db.vsiz(b"a").unwrap(), Some(3));
    assert_eq!(db.addint(b"n", 3).unwrap(), 3);
    assert_eq!(db.addint(b"n", -5).unwrap(), -2);
    assert!(matches!(db.addint(b"a", 1), Err(Error::NotNumeric)));
    assert_eq!(db.adddouble(b"d", 1.5).unwrap(), 1.5);
    assert_eq!(db.adddouble(b"d", 1.25).unwrap(), 2.75);
    db.put(b"c", b"18446744073709551615").unwrap();
    assert_eq!(db.incr_decimal(b"c", 2, false).unwrap().unwrap().0, 1);
    assert_eq!(db.incr_decimal(b"c", 9, true).unwrap().unwrap().0, 0);
    assert!(db.out(b"c").unwrap());
    assert!(!db.out(b"c").unwrap());
    // Expiration: a record that expired is absent, and touch revives nothing.
    db.put_with(b"old", b"v", 0, 1).unwrap();
    assert_eq!(db.get(b"old").unwrap(), None);
    assert_eq!(db.touch(b"old", 0).unwrap(), None);
    let before = db.put_with(b"t", b"v", 0, now_secs() + 1000).unwrap();
    // A touch changes the expiry and keeps the version (memcached keeps the cas), so a cas
    // with the version read before the touch still succeeds; the version survives a reopen
    // (below) and the record's move by `optimize`.
    let touched = db.touch(b"t", 0).unwrap().unwrap();
    assert_eq!((touched.version, touched.expires), (before.version, 0));
    assert_eq!(db.get(b"t").unwrap().unwrap().meta, touched);
    db.put(b"t2", b"v").unwrap();
    db.touch(b"t2", now_secs() + 5000).unwrap();
    let t2 = db.get(b"t2").unwrap().unwrap().meta;
    assert!(matches!(
        db.cas(b"t2", t2.version, b"w", 0, 0).unwrap(),
        Outcome::Stored(m) if m.version > t2.version
    ));
    db.touch(b"t", now_secs() + 3000).unwrap();
    let keys = db.fwmkeys(b"", 100).unwrap();
    assert_eq!(
        keys.len() as u64,
        db.count() - 1,
        "expired record not listed"
    );
    assert!(db.check().unwrap().healthy());
    db.close().unwrap();
    assert!(matches!(db.get(b"a"), Err(Error::Closed)));

    let db = DiskHash::open(&path, &Params::default()).unwrap();
    let t = db.get(b"t").unwrap().unwrap().meta;
    assert_eq!((t.version, t.flags), (before.version, 0));
    assert!(t.expires > now_secs());
    // Moved as it is, then rewritten compressed (`relocate`'s two paths).
    db.optimize("").unwrap();
    assert_eq!(db.get(b"t").unwrap().unwrap().meta, t);
    db.optimize("compress=zstd").unwrap();
    assert_eq!(db.get(b"t").unwrap().unwrap().meta, t);
    assert_eq!(db.get(b"a").unwrap().unwrap().value, b"yes");
    assert_eq!(db.get(b"d").unwrap().unwrap().value, 2.75f64.to_le_bytes());
    assert!(db.check().unwrap().healthy());
}

#[test]
fn second_open_is_refused_and_lock_dies_with_handle() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.kh");
    let db = DiskHash::open(&path, &Params::default()).unwrap();
    match DiskHash::open(&path, &Params::default()) {
        Err(Error::Locked { .. }) => {}
        other => panic!("expected Locked, got {:?}", other.err()),
    }
    drop(db);
    DiskHash::open(&path, &Params::default()).unwrap();
}

#[test]
fn unknown_and_bad_params_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    for p in [
        "nosuch=1",
        "segsiz=1",
        "sync=sometimes",
        "compress=bzip",
        "compact=3",
    ] {
        let e = DiskHash::open(&dir.path().join("p.kh"), &Params::parse(p).unwrap());
        assert!(e.is_err(), "{p} accepted");
    }
}

#[test]
fn large_values_and_compression_round_trip() {
    for comp in ["none", "lz4", "zstd", "deflate"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.kh");
        let params = Params::parse(&format!("compress={comp}#bufsiz=64k")).unwrap();
        let db = DiskHash::open(&path, &params).unwrap();
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        db.put(b"big", &big).unwrap();
        db.put(b"small", b"s").unwrap();
        assert_eq!(db.get(b"big").unwrap().unwrap().value, big);
        db.close().unwrap();
        let db = DiskHash::open(&path, &params).unwrap();
        assert_eq!(db.get(b"big").unwrap().unwrap().value, big, "{comp}");
        assert_eq!(db.get(b"small").unwrap().unwrap().value, b"s");
        if comp != "none" {
            assert!(
                db.size() < 1_000_000,
                "{comp} did not compress: {}",
                db.size()
            );
        }
        assert!(db.check().unwrap().healthy());
    }
}

#[test]
fn batch_is_atomic_and_validated_first() {
    let fs = SimVfs::new();
    let db = sim_open(&fs, "sync=none");
    db.put(b"x", b"old").unwrap();
    let too_big = vec![0u8; crate::store::MAX_KEY_LEN + 1];
    let bad = [
        BatchOp::Put {
            key: b"a".to_vec(),
            value: b"1".to_vec(),
            flags: 0,
            expires: 0,
        },
        BatchOp::Remove { key: too_big },
    ];
    assert!(db.write_batch(&bad).is_err());
    assert_eq!(
        db.get(b"a").unwrap(),
        None,
        "nothing of a failed batch applies"
    );
    let ops: Vec<BatchOp> = (0..100)
        .map(|i| BatchOp::Put {
            key: format!("k{i}").into_bytes(),
            value: format!("v{i}").into_bytes(),
            flags: 0,
            expires: 0,
        })
        .chain([BatchOp::Remove { key: b"x".to_vec() }])
        .collect();
    db.sync().unwrap();
    db.write_batch(&ops).unwrap();
    assert_eq!(db.count(), 100);
    // Crash with the batch written but not synced, torn anywhere: all or nothing survives.
    for seed in 1..20u64 {
        let fs2 = SimVfs::new();
        let db2 = sim_open(&fs2, "sync=none");
        db2.put(b"x", b"old").unwrap();
        db2.sync().unwrap();
        db2.write_batch(&ops).unwrap();
        for t in db2.inner.log.tails.iter() {
            db2.inner.log.flush(&mut t.0.lock()).unwrap();
        }
        db2.abandon();
        fs2.crash(CrashMode::Torn { seed });
        let db3 = sim_open(&fs2, "sync=none");
        let n = db3.count();
        let x = db3.get(b"x").unwrap();
        assert!(
            (n == 100 && x.is_none()) || (n == 1 && x.is_some()),
            "seed {seed}: half a batch survived: count {n}"
        );
        assert!(db3.check().unwrap().healthy());
    }
}

/// Under sync=always every thread writes to lane 0 (one fdatasync per group commit); records of
/// the same keys written earlier in other lanes (sync=none, several threads) must still lose to
/// the newer ones after a crash, in either order of lanes.
#[test]
fn sync_always_writes_one_lane_and_orders_with_the_others() {
    let fs = SimVfs::new();
    let db = Arc::new(sim_open(&fs, "sync=none#lanes=4"));
    let ts: Vec<_> = (0..4u8)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                for k in 0..100 {
                    db.put(format!("k{k}").as_bytes(), &[t]).unwrap();
                }
            })
        })
        .collect();
    for t in ts {
        t.join().unwrap();
    }
    Arc::try_unwrap(db).ok().unwrap().close().unwrap();
    let db = Arc::new(sim_open(&fs, "sync=always#lanes=4"));
    let sizes = |db: &DiskHash| -> BTreeMap<u32, (usize, u64)> {
        let segs = db.inner.log.segs.load();
        segs.segs
            .values()
            .map(|s| (s.id, (s.lane, s.flushed())))
            .collect()
    };
    let before = sizes(&db);
    let ts: Vec<_> = (0..3u8)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                for k in (t as usize..100).step_by(3) {
                    db.put(format!("k{k}").as_bytes(), b"new").unwrap();
                }
            })
        })
        .collect();
    for t in ts {
        t.join().unwrap();
    }
    // Only lane 0's segments grew (or appeared) since the reopen.
    let written: Vec<usize> = sizes(&db)
        .into_iter()
        .filter(|(id, (_, len))| before.get(id).is_none_or(|b| b.1 < *len))
        .map(|(_, (lane, _))| lane)
        .collect();
    assert!(
        written.iter().all(|&l| l == 0),
        "lanes written: {written:?}"
    );
    Arc::try_unwrap(db).ok().unwrap().abandon();
    fs.crash(CrashMode::DropUnsynced);
    let db = sim_open(&fs, "");
    assert_eq!(db.count(), 100);
    for k in 0..100 {
        assert_eq!(
            db.get(format!("k{k}").as_bytes()).unwrap().unwrap().value,
            b"new"
        );
    }
}

/// Every record written and acknowledged under sync=always survives a crash that drops every
/// unsynced byte.
#[test]
fn sync_always_loses_nothing_acknowledged() {
    let fs = SimVfs::new();
    fs.set_sync_delay(Duration::from_millis(2));
    let db = Arc::new(sim_open(&fs, "sync=always"));
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in 0..200 {
                    db.put(format!("{t}-{i}").as_bytes(), &[t; 10]).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let syncs = db.inner.log.counters.syncs.load(Ordering::Relaxed);
    assert!(
        syncs < 600,
        "group commit shared too few syncs: {syncs} for 800 writes"
    );
    Arc::try_unwrap(db).ok().unwrap().abandon();
    fs.crash(CrashMode::DropUnsynced);
    let db = sim_open(&fs, "sync=always");
    assert_eq!(db.count(), 800);
    for t in 0..4u8 {
        for i in 0..200 {
            assert_eq!(
                db.get(format!("{t}-{i}").as_bytes())
                    .unwrap()
                    .unwrap()
                    .value,
                [t; 10]
            );
        }
    }
}

/// Eight writers under sync=always on a disk whose fdatasync takes 3 ms, and crashes while they
/// write (images of what each would leave, taken at one instant): every put acknowledged before
/// an image is in the database reopened from it.
#[test]
fn sync_always_crash_in_the_middle_of_group_commits_loses_nothing_acknowledged() {
    let fs = SimVfs::new();
    fs.set_sync_delay(Duration::from_millis(3));
    let db = Arc::new(sim_open(&fs, "sync=always#segsiz=64k#bufsiz=4k"));
    let acked = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..8u64)
        .map(|t| {
            let (db, acked, stop) = (db.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || {
                for i in 0u64.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    db.put(format!("{t}-{i}").as_bytes(), &[t as u8; 100])
                        .unwrap();
                    acked.lock().push((t, i));
                    // Out of step with each other, so that writes arrive while syncs run.
                    std::thread::sleep(Duration::from_micros((t * 131 + i * 7919) % 2000));
                }
            })
        })
        .collect();
    let mut images = Vec::new();
    for n in 0..8u64 {
        std::thread::sleep(Duration::from_millis(15 + n * 7 % 10));
        let before = acked.lock().len();
        let mode = if n % 2 == 0 {
            CrashMode::DropUnsynced
        } else {
            CrashMode::Torn { seed: n }
        };
        images.push((before, fs.crash_image(mode)));
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    Arc::try_unwrap(db).ok().unwrap().abandon();
    let acked = acked.lock();
    for (n, (before, image)) in images.iter().enumerate() {
        assert!(*before > 0, "crash {n}: nothing acknowledged yet");
        let db = sim_open(&SimVfs::from_image(image), "");
        for (t, i) in &acked[..*before] {
            assert_eq!(
                db.get(format!("{t}-{i}").as_bytes())
                    .unwrap()
                    .map(|r| r.value),
                Some(vec![*t as u8; 100]),
                "crash {n}: {t}-{i} lost"
            );
        }
        assert!(db.check().unwrap().healthy(), "crash {n}");
    }
}

#[test]
fn acknowledged_writes_in_new_segments_survive_losing_unsynced_names() {
    // Segments roll every few writes. A new segment's name is made durable by the next sync,
    // not when it is created: a crash that loses every directory change not synced must still
    // keep every write `sync=always` acknowledged, and with the default mode every write
    // before an explicit `sync`.
    for params in ["sync=always#segsiz=64k", "segsiz=64k"] {
        let fs = SimVfs::new();
        let db = sim_open(&fs, params);
        let value = [7u8; 3000];
        for i in 0..200u32 {
            db.put(&i.to_be_bytes(), &value).unwrap();
        }
        db.sync().unwrap();
        let segs = seg_lens(&fs).len();
        assert!(segs > 5, "{params}: expected many segments, got {segs}");
        db.abandon();
        fs.crash(CrashMode::DropUnsynced);
        let db = sim_open(&fs, params);
        assert_eq!(db.count(), 200, "{params}");
        for i in 0..200u32 {
            assert_eq!(db.get(&i.to_be_bytes()).unwrap().unwrap().value, value);
        }
    }
}

fn seg_lens(fs: &SimVfs) -> Vec<(PathBuf, u64)> {
    fs.paths()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "kd"))
        .map(|p| (p.clone(), fs.open_len(&p)))
        .collect()
}

fn counter(db: &DiskHash, name: &str) -> u64 {
    db.counters().into_iter().find(|c| c.0 == name).unwrap().1
}

/// With `sync=always` the filler writes zeros ahead of the records (so a sync has no file size
/// or block allocation to record); they are cut off when a segment is sealed or the database
/// closed, and after a crash they are neither records nor counted as a torn tail. Writers race
/// with the filler across several segments and lose nothing.
#[test]
fn zeros_written_ahead_are_cut_back_and_not_torn() {
    let fs = SimVfs::new();
    let params = "sync=always#segsiz=256k";
    let db = sim_open(&fs, params);
    for i in 0..100 {
        db.put(format!("k{i}").as_bytes(), &[1; 100]).unwrap();
    }
    let data = db.inner.log.data_size();
    let deadline = Instant::now() + Duration::from_secs(5);
    while seg_lens(&fs)[0].1 <= data {
        assert!(Instant::now() < deadline, "the filler never wrote ahead");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Whole pages of zeros, never past the segment size (a lane that outran its zeros gets a
    // shorter fill first, so how far they reach depends on the timing).
    let len = seg_lens(&fs)[0].1;
    assert!(
        len <= 256 << 10 && len.is_multiple_of(4096),
        "{len} bytes of segment"
    );
    db.abandon();
    fs.crash(CrashMode::DropUnsynced);
    let db = Arc::new(sim_open(&fs, params));
    assert_eq!(db.count(), 100);
    assert_eq!(counter(&db, "recovery_truncated_bytes"), 0);
    let data = db.inner.log.data_size();
    assert_eq!(seg_lens(&fs).iter().map(|l| l.1).sum::<u64>(), data);
    // Four writers, several segments: each sealed one is cut back to its records.
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in 0..1500 {
                    db.put(format!("{t}-{i}").as_bytes(), &[t; 150]).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let lens = seg_lens(&fs);
    assert!(lens.len() >= 4, "{lens:?}");
    let segs = db.inner.log.segs.load_full();
    for (p, len) in &lens[..lens.len() - 1] {
        let name = p.file_name().unwrap().to_str().unwrap();
        let id = segment::parse_seg_file_name(name).unwrap();
        assert_eq!(*len, segs.get(id).unwrap().flushed(), "{p:?}");
    }
    let db = Arc::try_unwrap(db).ok().unwrap();
    db.abandon();
    fs.crash(CrashMode::DropUnsynced);
    let db = sim_open(&fs, params);
    assert_eq!(counter(&db, "recovery_truncated_bytes"), 0);
    assert!(db.check().unwrap().healthy());
    assert_eq!(db.count(), 6100);
    for t in 0..4u8 {
        for i in 0..1500 {
            let got = db.get(format!("{t}-{i}").as_bytes()).unwrap();
            assert_eq!(got.unwrap().value, [t; 150], "{t}-{i}");
        }
    }
    db.close().unwrap();
    let data: u64 = seg_lens(&fs).iter().map(|l| l.1).sum();
    let db = sim_open(&fs, params);
    assert_eq!(
        data,
        db.inner.log.data_size(),
        "close cuts the active segment"
    );
    assert!(db.check().unwrap().healthy());
}

/// Randomized crash points: operations with occasional syncs, then a crash that keeps a random
/// prefix of the unsynced writes and tears the next one. After reopening, every key holds a value
/// it had at or after its last sync, and the database is healthy.
#[test]
fn randomized_crashes_recover_consistently() {
    for seed in 0..60u64 {
        let fs = SimVfs::new();
        let params = "sync=none#segsiz=64k#bufsiz=4k";
        let db = sim_open(&fs, params);
        let mut rng = seed.wrapping_mul(6364136223846793005) | 1;
        let mut rand = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        // For each key: the values it may have after the crash (None = absent).
        let mut allowed: BTreeMap<Vec<u8>, Vec<Option<Vec<u8>>>> = BTreeMap::new();
        let mut current: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let nops = 200 + rand(800);
        for _ in 0..nops {
            let k = format!("key{}", rand(50)).into_bytes();
            let hist = allowed
                .entry(k.clone())
                .or_insert_with(|| vec![current.get(&k).cloned()]);
            match rand(10) {
                0..=5 => {
                    let v = vec![b'a' + rand(26) as u8; 1 + rand(300) as usize];
                    db.put(&k, &v).unwrap();
                    current.insert(k.clone(), v.clone());
                    hist.push(Some(v));
                }
                6 => {
                    db.out(&k).unwrap();
                    current.remove(&k);
                    hist.push(None);
                }
                7 => {
                    db.putcat(&k, b"+").unwrap();
                    let v = current.entry(k.clone()).or_default();
                    v.push(b'+');
                    hist.push(Some(v.clone()));
                }
                8 => {
                    db.sync().unwrap();
                    allowed = current
                        .iter()
                        .map(|(k, v)| (k.clone(), vec![Some(v.clone())]))
                        .collect();
                }
                _ => {
                    if rand(4) == 0 {
                        let _m = db.inner.maint.lock();
                        db.inner.checkpoint().unwrap();
                        allowed = current
                            .iter()
                            .map(|(k, v)| (k.clone(), vec![Some(v.clone())]))
                            .collect();
                    }
                }
            }
        }
        db.abandon();
        fs.crash(CrashMode::Torn { seed });
        let db = sim_open(&fs, params);
        let rep = db.check().unwrap();
        assert!(rep.healthy(), "seed {seed}: {:?}", rep.problems);
        let got = dump(&db);
        for (k, hist) in &allowed {
            let v = got.get(k).cloned();
            assert!(
                hist.contains(&v),
                "seed {seed}: key {:?} has {:?}, allowed {:?}",
                String::from_utf8_lossy(k),
                v.as_ref().map(|v| v.len()),
                hist.iter()
                    .map(|h| h.as_ref().map(|v| v.len()))
                    .collect::<Vec<_>>()
            );
        }
        for k in got.keys() {
            assert!(allowed.contains_key(k) || current.contains_key(k));
        }
        // Recovery is repeatable: a second reopen sees the same data, still healthy.
        db.close().unwrap();
        let db = sim_open(&fs, params);
        assert_eq!(dump(&db), got, "seed {seed}");
        let rep = db.check().unwrap();
        assert!(
            rep.healthy(),
            "seed {seed}, second open: {:?}",
            rep.problems
        );
    }
}

/// After an injected write or sync failure the handle refuses writes (it never pretends), and a
/// reopen finds a consistent database holding at least everything synced before the fault.
/// Regression: a full rebuild (no checkpoint after a crash) once chose a new key-hash seed, so a
/// key's next write went to another lane than its older records, and after the next crash the
/// older value could win. Every synced overwrite must survive crash after crash.
#[test]
fn synced_overwrites_survive_repeated_crashes_without_checkpoints() {
    let fs = SimVfs::new();
    let params = "sync=none#lanes=3";
    for round in 0..6u8 {
        let db = sim_open(&fs, params);
        for k in 0..40 {
            if round > 0 {
                let want = vec![round - 1; 10 + k];
                let got = db.get(format!("k{k}").as_bytes()).unwrap().map(|r| r.value);
                assert_eq!(got, Some(want), "round {round} key {k}");
            }
            if k % 2 == 0 {
                db.put(format!("k{k}").as_bytes(), &vec![round; 10 + k])
                    .unwrap();
            } else {
                db.write_batch(&[BatchOp::Put {
                    key: format!("k{k}").into_bytes(),
                    value: vec![round; 10 + k],
                    flags: 0,
                    expires: 0,
                }])
                .unwrap();
            }
        }
        db.sync().unwrap();
        db.abandon();
        fs.crash(CrashMode::DropUnsynced);
        fs.remove_file(Path::new("/sim/db.kh/index.ki"));
    }
}

/// Writes of one key made by different threads land in different lanes; recovery must still
/// apply them in the order they were made (by shard seq), deletes included, with or without a
/// checkpoint.
#[test]
fn overwrites_from_different_threads_recover_in_order() {
    for drop_checkpoint in [false, true] {
        let fs = SimVfs::new();
        let params = "sync=none#lanes=4";
        let db = Arc::new(sim_open(&fs, params));
        // One thread per step, one after the other: a writes every key, b overwrites every
        // key, c deletes the even ones, d rewrites every third.
        for step in ["a", "b", "c", "d"] {
            let db = db.clone();
            std::thread::spawn(move || {
                for k in 0..200 {
                    let key = format!("k{k}");
                    match step {
                        "c" if k % 2 == 0 => {
                            db.out(key.as_bytes()).unwrap();
                        }
                        "a" | "b" => {
                            db.put(key.as_bytes(), format!("{step}{k}").as_bytes())
                                .unwrap();
                        }
                        "d" if k % 3 == 0 => {
                            db.put(key.as_bytes(), format!("{step}{k}").as_bytes())
                                .unwrap();
                        }
                        _ => {}
                    }
                }
            })
            .join()
            .unwrap();
        }
        db.sync().unwrap();
        Arc::try_unwrap(db).ok().unwrap().abandon();
        fs.crash(CrashMode::DropUnsynced);
        if drop_checkpoint {
            fs.remove_file(Path::new("/sim/db.kh/index.ki"));
        }
        let db = sim_open(&fs, params);
        for k in 0..200 {
            let want = if k % 3 == 0 {
                Some(format!("d{k}"))
            } else if k % 2 == 0 {
                None
            } else {
                Some(format!("b{k}"))
            };
            let got = db
                .get(format!("k{k}").as_bytes())
                .unwrap()
                .map(|r| String::from_utf8(r.value).unwrap());
            assert_eq!(got, want, "key {k} (checkpoint dropped: {drop_checkpoint})");
        }
        assert!(db.check().unwrap().healthy());
    }
}

/// A large put is written without its shard's lock; a write of the same key that starts while
/// it is in flight wins, whichever finishes first, and readers of other keys are not blocked.
#[test]
fn large_puts_race_with_small_writes_of_the_same_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(
        DiskHash::open(
            &dir.path().join("l.kh"),
            &Params::parse("sync=none").unwrap(),
        )
        .unwrap(),
    );
    let big = vec![7u8; LARGE_VALUE * 8];
    for round in 0..20 {
        let key = format!("k{round}");
        let (d1, d2, k1, k2, b) = (
            db.clone(),
            db.clone(),
            key.clone(),
            key.clone(),
            big.clone(),
        );
        let t1 = std::thread::spawn(move || d1.put(k1.as_bytes(), &b).unwrap().version);
        let t2 = std::thread::spawn(move || d2.put(k2.as_bytes(), b"small").unwrap().version);
        let (v1, v2) = (t1.join().unwrap(), t2.join().unwrap());
        let got = db.get(key.as_bytes()).unwrap().unwrap();
        // The write with the later seq wins.
        if v2 > v1 {
            assert_eq!(got.value, b"small", "round {round}");
        } else {
            assert_eq!(got.value.len(), big.len(), "round {round}");
        }
        assert_eq!(got.meta.version, v1.max(v2));
    }
    assert!(db.check().unwrap().healthy());
    let db = Arc::try_unwrap(db).ok().unwrap();
    let expect: Vec<_> = (0..20)
        .map(|r| db.get(format!("k{r}").as_bytes()).unwrap())
        .collect();
    db.close().unwrap();
    let db = DiskHash::open(&dir.path().join("l.kh"), &Params::default()).unwrap();
    for (r, e) in expect.iter().enumerate() {
        assert_eq!(
            &db.get(format!("k{r}").as_bytes()).unwrap(),
            e,
            "after reopen, round {r}"
        );
    }
}

/// Regression: the background thread held the `cfg` lock while taking the lane locks, and a
/// writer rolling a segment holds its lane lock and then takes `cfg`: a deadlock once a roll
/// met the maintenance tick. Writers rolling tiny segments across several ticks must finish.
#[test]
fn rolling_writers_and_maintenance_do_not_deadlock() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(
        DiskHash::open(
            &dir.path().join("r.kh"),
            &Params::parse("segsiz=64k#sync=none#bufsiz=4k").unwrap(),
        )
        .unwrap(),
    );
    let progress = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_millis(3500);
    let writers: Vec<_> = (0..2)
        .map(|t| {
            let (db, progress) = (db.clone(), progress.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while Instant::now() < deadline {
                    db.put(format!("{t}-{}", i % 5000).as_bytes(), &[7u8; 300])
                        .unwrap();
                    progress.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            })
        })
        .collect();
    // A watchdog instead of a hang: progress must not stop for 5 s.
    let mut last = 0;
    let mut still = Instant::now();
    while writers.iter().any(|w| !w.is_finished()) {
        std::thread::sleep(Duration::from_millis(100));
        let p = progress.load(Ordering::Relaxed);
        if p != last {
            last = p;
            still = Instant::now();
        }
        assert!(
            still.elapsed() < Duration::from_secs(5),
            "writers stopped: deadlock"
        );
    }
    for w in writers {
        w.join().unwrap();
    }
    assert!(db.check().unwrap().healthy());
}

#[test]
fn io_faults_poison_then_reopen_is_consistent() {
    for (n, fault) in [
        (0u64, Fault::Eio),
        (3, Fault::NoSpace),
        (10, Fault::Eio),
        (25, Fault::NoSpace),
    ] {
        let fs = SimVfs::new();
        let db = sim_open(&fs, "sync=always#bufsiz=4k");
        for i in 0..20 {
            db.put(format!("pre{i}").as_bytes(), b"v").unwrap();
        }
        fs.fail_after(n, fault);
        let mut failed = false;
        for i in 0..200 {
            if db.put(format!("k{i}").as_bytes(), &[7u8; 100]).is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed, "fault {n} never surfaced");
        assert!(
            db.put(b"after", b"x").is_err(),
            "writes must be refused after a fault"
        );
        db.abandon();
        fs.heal();
        fs.crash(CrashMode::DropUnsynced);
        let db = sim_open(&fs, "sync=always");
        for i in 0..20 {
            assert!(db.get(format!("pre{i}").as_bytes()).unwrap().is_some());
        }
        assert!(db.check().unwrap().healthy());
        db.put(b"after", b"x").unwrap();
    }
}

#[test]
fn compaction_reclaims_space_and_keeps_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.kh");
    let params = Params::parse("segsiz=256k#sync=none#lanes=2").unwrap();
    let db = DiskHash::open(&path, &params).unwrap();
    for round in 0..20 {
        for i in 0..500 {
            db.put(
                format!("k{i}").as_bytes(),
                format!("{round:0100}").as_bytes(),
            )
            .unwrap();
        }
    }
    let before = db.size();
    db.optimize("").unwrap();
    let after = db.size();
    assert!(
        after * 5 < before,
        "optimize did not shrink: {before} -> {after}"
    );
    for i in 0..500 {
        assert_eq!(
            db.get(format!("k{i}").as_bytes()).unwrap().unwrap().value,
            format!("{:0100}", 19).as_bytes()
        );
    }
    // Background compaction alone also reclaims sealed dead segments.
    for round in 0..10 {
        for i in 0..500 {
            db.put(
                format!("k{i}").as_bytes(),
                format!("{round:0200}").as_bytes(),
            )
            .unwrap();
        }
    }
    let grown = db.size();
    let deadline = Instant::now() + Duration::from_secs(20);
    while db.size() * 2 > grown && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(db.size() * 2 <= grown, "background compaction did not run");
    assert!(db.check().unwrap().healthy());
    db.close().unwrap();
    let db = DiskHash::open(&path, &params).unwrap();
    assert_eq!(db.count(), 500);
    assert!(db.check().unwrap().healthy());
}

#[test]
fn optimize_changes_compression() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("o.kh");
    let db = DiskHash::open(&path, &Params::default()).unwrap();
    for i in 0..200 {
        db.put(format!("k{i}").as_bytes(), &[b'z'; 4000]).unwrap();
    }
    let before = db.size();
    db.optimize("compress=zstd").unwrap();
    assert!(db.size() * 4 < before);
    assert!(db.optimize("sync=always").is_err());
    assert!(db.optimize("nosuch=1").is_err());
    db.close().unwrap();
    let db = DiskHash::open(&path, &Params::parse("compress=zstd").unwrap()).unwrap();
    assert_eq!(db.get(b"k7").unwrap().unwrap().value, vec![b'z'; 4000]);
}

/// A client that rewrites every record it visits (iterate-and-update, as Tyrant clients do with
/// iterinit / iternext) iterated forever: each new version is appended ahead of the cursor.
/// A cursor now returns only versions older than itself, and every key once.
#[test]
fn rewriting_each_visited_record_ends_the_iteration() {
    let dir = tempfile::tempdir().unwrap();
    let db = DiskHash::open(
        &dir.path().join("r.kh"),
        &Params::parse("segsiz=64k").unwrap(),
    )
    .unwrap();
    for i in 0..3000 {
        db.put(format!("k{i:05}").as_bytes(), b"v").unwrap();
    }
    let mut seen = BTreeMap::new();
    let mut c = db.cursor().unwrap();
    while let Some((k, r)) = c.next().unwrap() {
        assert!(seen.len() < 3000 || !seen.contains_key(&k), "endless");
        db.putcat(&k, b"+").unwrap();
        db.put(format!("new-{}", seen.len()).as_bytes(), b"x")
            .unwrap();
        assert!(seen.insert(k, r.value).is_none(), "a key returned twice");
    }
    assert_eq!(seen.len(), 3000);
    assert!(seen.values().all(|v| v == b"v"));
    assert_eq!(db.get(b"k00042").unwrap().unwrap().value, b"v+");
}

/// `view` shows exactly what `get` returns, borrowed in place: flushed or still in the lane
/// buffer, compressed or not; nothing for expired or absent keys.
#[test]
fn view_matches_get() {
    for params in ["segsiz=64k", "compress=zstd#bufsiz=1m"] {
        let dir = tempfile::tempdir().unwrap();
        let db = DiskHash::open(&dir.path().join("w.kh"), &Params::parse(params).unwrap()).unwrap();
        for i in 0..3000u32 {
            let v = format!("value-{i}-").repeat(1 + i as usize % 7);
            db.put_with(format!("k{i}").as_bytes(), v.as_bytes(), i, 0)
                .unwrap();
        }
        db.put_with(b"gone", b"x", 0, 1).unwrap(); // expired long ago
        for key in ["k0", "k1234", "k2999", "gone", "absent"] {
            let want = db.get(key.as_bytes()).unwrap();
            let mut seen = None;
            let found = db
                .view(key.as_bytes(), &mut |v, m| seen = Some((v.to_vec(), m)))
                .unwrap();
            assert_eq!(found, want.is_some(), "{params} {key}");
            assert_eq!(seen, want.map(|r| (r.value, r.meta)), "{params} {key}");
        }
    }
}

#[test]
fn vanish_copy_and_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.kh");
    let db = DiskHash::open(&path, &Params::parse("segsiz=64k").unwrap()).unwrap();
    for i in 0..2000 {
        db.put(format!("k{i:05}").as_bytes(), format!("v{i}").as_bytes())
            .unwrap();
    }
    for i in (0..2000).step_by(3) {
        db.out(format!("k{i:05}").as_bytes()).unwrap();
    }
    let model = dump(&db);
    assert_eq!(model.len() as u64, db.count());
    assert_eq!(db.fwmkeys(b"k001", 1000).unwrap().len(), 67);
    // Copy while another thread writes.
    let copy = dir.path().join("copy.kh");
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..2000 {
                db.put(format!("w{i}").as_bytes(), b"x").unwrap();
            }
        });
        db.copy_to(&copy).unwrap();
    });
    let c = DiskHash::open(&copy, &Params::default()).unwrap();
    assert!(c.check().unwrap().healthy());
    let copied = dump(&c);
    for (k, v) in &model {
        assert_eq!(copied.get(k), Some(v));
    }
    assert!(
        db.copy_to(&copy).is_err(),
        "copy over a non-empty destination"
    );
    db.vanish().unwrap();
    assert_eq!(db.count(), 0);
    assert!(dump(&db).is_empty());
    db.put(b"fresh", b"1").unwrap();
    db.close().unwrap();
    let db = DiskHash::open(&path, &Params::default()).unwrap();
    assert_eq!(db.count(), 1);
    assert!(db.check().unwrap().healthy());
}

/// A batch written across lanes stays whole after the segment holding one of its parts is
/// compacted away, even when recovery must rebuild the index from the logs alone.
#[test]
fn compacted_batch_parts_survive_a_full_rebuild() {
    let fs = SimVfs::new();
    let params = "sync=none#segsiz=64k#lanes=4";
    let db = sim_open(&fs, params);
    let ops: Vec<BatchOp> = (0..64)
        .map(|i| BatchOp::Put {
            key: format!("b{i}").into_bytes(),
            value: vec![b'v'; 50],
            flags: 0,
            expires: 0,
        })
        .collect();
    db.write_batch(&ops).unwrap();
    // Overwrite keys so that the segments holding the parts become mostly dead, then compact.
    for round in 0..30 {
        for i in 0..200 {
            db.put(
                format!("x{i}").as_bytes(),
                format!("{round:060}").as_bytes(),
            )
            .unwrap();
        }
    }
    db.optimize("").unwrap();
    db.close().unwrap();
    fs.remove_file(Path::new("/sim/db.kh/index.ki"));
    let db = sim_open(&fs, params);
    for i in 0..64 {
        assert_eq!(
            db.get(format!("b{i}").as_bytes()).unwrap().unwrap().value,
            vec![b'v'; 50],
            "b{i}"
        );
    }
    assert_eq!(db.count(), 264);
    assert!(db.check().unwrap().healthy());
}

#[test]
fn lanes_are_fixed_at_creation() {
    let fs = SimVfs::new();
    let db = sim_open(&fs, "lanes=2");
    db.put(b"k", b"v").unwrap();
    db.close().unwrap();
    let e = DiskHash::open_with(
        Path::new("/sim/db.kh"),
        &Params::parse("lanes=3").unwrap(),
        Arc::new(fs.clone()),
        false,
    );
    assert!(matches!(e, Err(Error::InvalidParam(_))));
    let db = sim_open(&fs, "");
    assert_eq!(db.get(b"k").unwrap().unwrap().value, b"v");
    assert!(db
        .describe()
        .iter()
        .any(|(k, v)| k == "stored.lanes" && v == "2"));
}

#[test]
fn corruption_is_detected_by_check() {
    let fs = SimVfs::new();
    let db = sim_open(&fs, "sync=none");
    for i in 0..100 {
        db.put(format!("k{i}").as_bytes(), b"value").unwrap();
    }
    db.close().unwrap();
    let seg = fs
        .paths()
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".kd"))
        .max_by_key(|p| fs.open(p, false).unwrap().len().unwrap())
        .unwrap();
    assert!(fs.corrupt(&seg, SEG_DATA as u64 + 8, b"\xff\xff"));
    // The checkpoint still points at every record; reading the damaged one is an error, never
    // wrong data, and check reports it.
    let db = DiskHash::open_with(
        Path::new("/sim/db.kh"),
        &Params::default(),
        Arc::new(fs.clone()),
        true,
    )
    .unwrap();
    let rep = db.check().unwrap();
    assert!(!rep.healthy());
    let mut errors = 0;
    for i in 0..100 {
        match db.get(format!("k{i}").as_bytes()) {
            Ok(Some(r)) => assert_eq!(r.value, b"value"),
            Ok(None) => panic!("record lost without an error"),
            Err(_) => errors += 1,
        }
    }
    assert!(errors >= 1);
    assert!(
        db.put(b"x", b"y").is_err(),
        "read-only handle accepted a write"
    );
}

#[test]
fn background_compaction_keeps_up_with_overwrites() {
    // A small set of keys overwritten at full speed leaves dozens of dead segments; the
    // compaction thread must reclaim them within a few seconds, not one a second.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("o.kh");
    let params = Params::parse("segsiz=64k#sync=none#lanes=1").unwrap();
    let db = DiskHash::open(&path, &params).unwrap();
    let segments = || {
        std::fs::read_dir(&path)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "kd")
            })
            .count()
    };
    for round in 0..100u32 {
        for i in 0..100u32 {
            let mut v = [0u8; 500];
            v[..4].copy_from_slice(&round.to_le_bytes());
            db.put(&i.to_le_bytes(), &v).unwrap();
        }
    }
    // Segments made so far (ids are never reused): compaction may already have removed some.
    let written = db.inner.log.next_seg.load(Ordering::Relaxed) as usize - 1;
    assert!(written > 40, "expected many segments, got {written}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while segments() > 5 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = segments();
    assert!(left <= 5, "{written} segments, still {left} after 5 s");
    for i in 0..100u32 {
        let v = db.get(&i.to_le_bytes()).unwrap().unwrap().value;
        assert_eq!(v[..4], 99u32.to_le_bytes());
    }
    assert!(db.check().unwrap().healthy());
    assert!(counter(&db, "compactions") >= (written - left) as u64);
}

/// Compaction scans a segment, then reads its live records again, a chunk (`SCAN_CHUNK`: 4 KiB
/// in tests) at a time: records that straddle a chunk's end, and records larger than a chunk,
/// must come out whole. The overwrites and deletes of records longer than `FIRST_READ` read
/// only their header and key (`key_header`; the simulated file system maps nothing).
#[test]
fn compaction_copies_records_across_read_chunks() {
    let fs = SimVfs::new();
    let params = "sync=none#lanes=1#segsiz=256k";
    let db = sim_open(&fs, params);
    let n = 300;
    let dies = |i: usize| i % 5 == 3 && !i.is_multiple_of(3);
    let deleted = |i: usize| i % 5 == 2 && i.is_multiple_of(4);
    let size = |i: usize| [10, 3000, 9000, 40_000, 500][i % 5] + i;
    let value = |i: usize| vec![i as u8; size(i)];
    for i in 0..n {
        db.put(format!("k{i}").as_bytes(), &value(i)).unwrap();
    }
    // Kill most of the bytes (two in three of the largest records), keep the rest live.
    for i in (0..n).filter(|&i| dies(i)) {
        db.put(format!("k{i}").as_bytes(), b"small").unwrap();
    }
    for i in (0..n).filter(|&i| deleted(i)) {
        assert!(db.out(format!("k{i}").as_bytes()).unwrap(), "k{i}");
    }
    let left = (0..n).filter(|&i| !deleted(i)).count() as u64;
    assert_eq!(db.count(), left);
    let before = db.size();
    db.optimize("").unwrap();
    assert!(db.size() < before, "optimize did not shrink");
    assert!(counter(&db, "compactions") > 0);
    let check = |db: &DiskHash| {
        for i in 0..n {
            let got = db.get(format!("k{i}").as_bytes()).unwrap();
            if deleted(i) {
                assert!(got.is_none(), "k{i}");
                continue;
            }
            let got = got.unwrap().value;
            if dies(i) {
                assert_eq!(got, b"small", "k{i}");
            } else {
                assert_eq!(got, value(i), "k{i}");
            }
        }
    };
    check(&db);
    assert!(db.check().unwrap().healthy());
    db.close().unwrap();
    let db = sim_open(&fs, params);
    assert_eq!(db.count(), left);
    check(&db);
}

/// A large put writes its record without holding its shard's lock and points the index at it
/// afterwards. A compaction that came in between (the record's segment sealed and mostly dead
/// meanwhile) must not take the record for dead and remove its segment.
#[test]
fn compaction_leaves_a_segment_with_a_large_put_in_flight() {
    let fs = SimVfs::new();
    let db = sim_open(&fs, "sync=none#lanes=1#segsiz=1m");
    let big = vec![7u8; LARGE_VALUE];
    let begun = db.large_put_begin(b"big", &big, 0, 0);
    let seg = begun.written.as_ref().unwrap().0;
    // Fill the record's segment with records that die at once, so that it is sealed and
    // mostly dead.
    for round in 0..3u8 {
        for i in 0..1000 {
            db.put(format!("k{i}").as_bytes(), &[round; 600]).unwrap();
        }
    }
    let segs = || db.inner.log.segs.load();
    assert!(segs().get(seg).unwrap().sealed.load(Ordering::Acquire));
    db.optimize("").unwrap();
    db.large_put_end(b"big", begun).unwrap();
    assert_eq!(db.get(b"big").unwrap().unwrap().value, big);
    // Once the put is done, its segment can go.
    db.optimize("").unwrap();
    assert!(segs().get(seg).is_none());
    assert_eq!(db.get(b"big").unwrap().unwrap().value, big);
    assert!(db.check().unwrap().healthy());
}

/// A checkpoint between the two halves of a large put: its snapshot does not have the put's
/// slot yet, so recovery must replay the put's record (the replay must not start after it).
#[test]
fn checkpoint_during_a_large_put_still_recovers_it() {
    let fs = SimVfs::new();
    let params = "sync=none#lanes=1#segsiz=1m";
    let db = sim_open(&fs, params);
    db.put(b"small", b"x").unwrap();
    let big = vec![7u8; LARGE_VALUE];
    let begun = db.large_put_begin(b"big", &big, 0, 0);
    let seg = begun.written.as_ref().unwrap().0;
    // Enough after it that the lane moves on to another segment.
    for i in 0..3000 {
        db.put(format!("k{i}").as_bytes(), &[1; 600]).unwrap();
    }
    assert!(db.inner.log.tails[0].0.lock().seg.id > seg);
    db.inner.checkpoint().unwrap();
    db.large_put_end(b"big", begun).unwrap();
    db.sync().unwrap();
    db.abandon();
    fs.crash(CrashMode::DropUnsynced);
    let db = sim_open(&fs, params);
    assert_eq!(db.get(b"big").unwrap().unwrap().value, big);
    assert_eq!(db.get(b"k2999").unwrap().unwrap().value, [1; 600]);
    assert_eq!(db.count(), 3002);
    // Once the put is done, checkpoints move on past it.
    db.inner.checkpoint().unwrap();
    db.close().unwrap();
    let db = sim_open(&fs, params);
    assert_eq!(db.get(b"big").unwrap().unwrap().value, big);
    assert_eq!(db.count(), 3002);
    assert!(db.check().unwrap().healthy());
}

/// A `vanish` between the two halves of a large put removes the segment of its record: the put
/// then counts as one that came before the clear.
#[test]
fn vanish_during_a_large_put_leaves_no_dangling_slot() {
    let fs = SimVfs::new();
    let db = sim_open(&fs, "sync=none#lanes=1#segsiz=1m");
    db.put(b"small", b"x").unwrap();
    let begun = db.large_put_begin(b"big", &vec![7u8; LARGE_VALUE], 0, 0);
    db.vanish().unwrap();
    db.large_put_end(b"big", begun).unwrap();
    assert_eq!(db.get(b"big").unwrap(), None);
    assert_eq!(db.count(), 0);
    assert!(db.check().unwrap().healthy());
    db.put(b"big", b"after").unwrap();
    assert_eq!(db.get(b"big").unwrap().unwrap().value, b"after");
}

#[test]
fn compaction_keeps_a_segment_with_a_damaged_record() {
    let fs = SimVfs::new();
    let params = "sync=none#lanes=1#segsiz=64k";
    let db = sim_open(&fs, params);
    for i in 0..100 {
        db.put(format!("k{i}").as_bytes(), &[1u8; 400]).unwrap();
    }
    db.close().unwrap();
    let first = fs
        .paths()
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".kd"))
        .min()
        .unwrap();
    // The first record's checksum: every record after it is sound but cannot be reached by a
    // scan of the segment.
    assert!(fs.corrupt(&first, SEG_DATA as u64, b"\xff\xff\xff\xff"));
    let db = sim_open(&fs, params);
    // Make the damaged segment mostly garbage, then rewrite everything.
    for i in 1..60 {
        db.put(format!("k{i}").as_bytes(), &[2u8; 400]).unwrap();
    }
    assert!(db.optimize("").is_err());
    // No record after the damaged one was lost: the segment stayed.
    for i in 1..100 {
        let want = if i < 60 { 2u8 } else { 1 };
        let got = db.get(format!("k{i}").as_bytes()).unwrap().unwrap();
        assert_eq!(got.value, [want; 400], "k{i}");
    }
    assert!(!db.check().unwrap().healthy());
}

/// Regression: a damaged record header (here claiming a batch body of 2^63 bytes, which once
/// made recovery's bounds arithmetic overflow) with intact records after it is damage, not a
/// torn tail: recovery used to drop every record after it, and `check` called the result
/// healthy. A writable open now refuses and changes nothing; a read-only one serves the
/// records that verify, and `check` reports the damage.
#[test]
fn a_damaged_header_before_intact_records_is_damage_not_a_torn_tail() {
    let fs = SimVfs::new();
    let db = sim_open(&fs, "sync=none#lanes=1");
    let v = [b'v'; 20]; // each record longer than the damage below
    for i in 0..10 {
        db.put(format!("k{i}").as_bytes(), &v).unwrap();
    }
    db.close().unwrap();
    fs.remove_file(Path::new("/sim/db.kh/index.ki"));
    let seg = fs
        .paths()
        .into_iter()
        .find(|p| p.to_string_lossy().ends_with(".kd"))
        .unwrap();
    // The first record becomes a batch frame whose body length is 2^63.
    let mut bogus = vec![0u8, 0, 0, 0, format::T_BATCH];
    format::put_varint(&mut bogus, 1 << 63);
    format::put_varint(&mut bogus, 1);
    assert!(fs.corrupt(&seg, SEG_DATA as u64, &bogus));
    let before = fs.open_len(&seg);
    let params = Params::parse("sync=none#lanes=1").unwrap();
    let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
    let Err(Error::Corrupt(m)) =
        DiskHash::open_with(Path::new("/sim/db.kh"), &params, vfs.clone(), false)
    else {
        panic!("a writable open of a damaged database must fail with Corrupt");
    };
    assert!(m.contains("seg-00000001.kd at offset 64"), "{m}");
    assert!(m.contains("kura db repair"), "{m}");
    assert_eq!(
        fs.open_len(&seg),
        before,
        "a refused open changed the segment"
    );
    let db = DiskHash::open_with(Path::new("/sim/db.kh"), &params, vfs, true).unwrap();
    assert_eq!(db.count(), 9, "every record after the damage is served");
    for i in 1..10 {
        assert_eq!(
            db.get(format!("k{i}").as_bytes()).unwrap().unwrap().value,
            v
        );
    }
    let rep = db.check().unwrap();
    assert!(!rep.healthy());
    assert_eq!(rep.damage.len(), 1, "{:?}", rep.damage);
    assert_eq!((rep.damage[0].off, rep.lost()), (SEG_DATA as u64, 1));
}

#[test]
fn corrupt_checkpoint_falls_back_to_full_rebuild() {
    let fs = SimVfs::new();
    let db = sim_open(&fs, "sync=none");
    for i in 0..300 {
        db.put(format!("k{i}").as_bytes(), format!("v{i}").as_bytes())
            .unwrap();
    }
    db.out(b"k5").unwrap();
    db.close().unwrap();
    assert!(fs.corrupt(Path::new("/sim/db.kh/index.ki"), 40, b"\x00\x01\x02"));
    let db = sim_open(&fs, "sync=none");
    assert_eq!(db.count(), 299);
    assert_eq!(db.get(b"k7").unwrap().unwrap().value, b"v7");
    assert!(db.get(b"k5").unwrap().is_none());
}

/// Four writers, each with its own keys, put, overwrite and delete while reading back: enough
/// records that every shard's table grows while it is written (the slots move a few at a time
/// with later writes) and, with a small `bufsiz`, that lanes are flushed after the writes
/// leave the shard lock. Every key ends as its writer left it, after a reopen too.
#[test]
fn concurrent_writers_and_readers() {
    const PER: u32 = 40_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.kh");
    let params = Params::parse("segsiz=1m#bufsiz=16k#sync=none").unwrap();
    let db = Arc::new(DiskHash::open(&path, &params).unwrap());
    let expect = |i: u32| -> Option<Vec<u8>> {
        match i % 10 {
            0 => None,
            1..=3 => Some(format!("again {i}").into_bytes()),
            _ => Some(i.to_le_bytes().to_vec()),
        }
    };
    let hs: Vec<_> = (0..4u32)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                // Go back to an earlier key of this thread: overwrite or delete it.
                let revisit = |j: u32| {
                    let kj = format!("{t}:{j}");
                    match j % 10 {
                        0 => assert!(db.out(kj.as_bytes()).unwrap()),
                        1..=3 => {
                            db.put(kj.as_bytes(), format!("again {j}").as_bytes())
                                .unwrap();
                        }
                        _ => {}
                    }
                };
                for i in 0..PER {
                    let k = format!("{t}:{i}");
                    db.put(k.as_bytes(), &i.to_le_bytes()).unwrap();
                    if i % 7 == 0 {
                        assert_eq!(
                            db.get(k.as_bytes()).unwrap().unwrap().value,
                            i.to_le_bytes()
                        );
                    }
                    if i >= 100 {
                        revisit(i - 100);
                    }
                }
                (PER - 100..PER).for_each(revisit);
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let verify = |db: &DiskHash| {
        assert_eq!(db.count(), 4 * PER as u64 * 9 / 10);
        for t in 0..4 {
            for i in 0..PER {
                let got = db
                    .get(format!("{t}:{i}").as_bytes())
                    .unwrap()
                    .map(|r| r.value);
                assert_eq!(got, expect(i), "key {t}:{i}");
            }
        }
        assert!(db.check().unwrap().healthy());
    };
    verify(&db);
    Arc::into_inner(db).unwrap().close().unwrap();
    let db = DiskHash::open(&path, &params).unwrap();
    verify(&db);
}

/// `view_shared` pins large values that lie in a segment's mapping; the pinned bytes stay as
/// they were while the key is overwritten and its old segment compacted away. Small values,
/// compressed values and values still in the lane buffer are shown borrowed.
#[test]
fn view_shared_pins_mapped_values_that_outlive_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let db = DiskHash::open(
        &dir.path().join("p.kh"),
        &Params::parse("segsiz=1m#bufsiz=64k").unwrap(),
    )
    .unwrap();
    let big: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    db.put(b"big", &big).unwrap(); // larger than the buffer: straight to the file
    db.put(b"small", b"tiny").unwrap();
    let mut pinned = None;
    let mut show = |key: &[u8], min| {
        let mut kind = "";
        let hit = db
            .view_shared(key, min, &mut |v, _| {
                kind = match v {
                    Shown::Bytes(_) => "bytes",
                    Shown::Pinned(p) => {
                        pinned = Some(p);
                        "pinned"
                    }
                };
            })
            .unwrap();
        assert!(hit);
        kind
    };
    assert_eq!(show(b"small", 1), "bytes", "in the lane buffer");
    assert_eq!(show(b"big", 200_000), "bytes", "under the minimum");
    assert_eq!(show(b"big", 1024), "pinned");
    let p = pinned.take().unwrap();
    assert!(p.bytes() == &big[..]);
    // Overwrite it until its segment is sealed, then compact everything: the pinned bytes
    // still read the same.
    for i in 0..30u8 {
        db.put(b"big", &vec![i; 100_000]).unwrap();
    }
    db.optimize("").unwrap();
    let first = dir.path().join("p.kh").join(segment::seg_file_name(1));
    assert!(!first.exists(), "the pinned record's segment was removed");
    assert!(
        p.bytes() == &big[..],
        "pinned bytes changed under compaction"
    );
    assert_eq!(db.get(b"big").unwrap().unwrap().value, vec![29u8; 100_000]);
    drop(db);
    let z = DiskHash::open(
        &dir.path().join("z.kh"),
        &Params::parse("compress=zstd").unwrap(),
    )
    .unwrap();
    z.put(b"big", &big).unwrap();
    z.sync().unwrap();
    let mut kind = "";
    z.view_shared(b"big", 1, &mut |v, _| {
        kind = if matches!(v, Shown::Bytes(_)) {
            "bytes"
        } else {
            "pinned"
        };
    })
    .unwrap();
    assert_eq!(kind, "bytes", "a compressed value is decoded, not pinned");
}

/// Readers find records through plain pointers to the segment table and the segment maps
/// (`segs_locked`, `Published::peek`), which are freed only after every shard lock has been
/// taken once. Race them against everything that replaces those: segments rolled every few
/// hundred writes, old ones unmapped (a tiny `msiz`), compacted away in the background and by
/// `optimize`. Every value read must be whole and no older than one the reader saw before.
#[test]
fn readers_race_segment_removal_and_unmapping() {
    const KEYS: u32 = 500;
    let dir = tempfile::tempdir().unwrap();
    let params = Params::parse("segsiz=64k#msiz=1#compact=0.1#sync=none").unwrap();
    let db = Arc::new(DiskHash::open(&dir.path().join("r.kh"), &params).unwrap());
    let value = |k: u32, v: u32| format!("{k}:{v}:{}", "x".repeat(40 + (k % 50) as usize));
    for k in 0..KEYS {
        db.put(&k.to_le_bytes(), value(k, 0).as_bytes()).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut v = 1;
            while !stop.load(Ordering::Relaxed) {
                for k in 0..KEYS {
                    db.put(&k.to_le_bytes(), value(k, v).as_bytes()).unwrap();
                }
                v += 1;
            }
            v
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (db, stop) = (db.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut seen = vec![0u32; KEYS as usize];
                let mut reads = 0u64;
                let mut k = r * 7;
                while !stop.load(Ordering::Relaxed) {
                    k = (k + 13) % KEYS;
                    let got = db.get(&k.to_le_bytes()).unwrap().expect("present");
                    let text = String::from_utf8(got.value).unwrap();
                    let mut parts = text.split(':');
                    assert_eq!(parts.next(), Some(k.to_string().as_str()), "{text}");
                    let v: u32 = parts.next().unwrap().parse().unwrap();
                    assert_eq!(text, value(k, v), "torn value");
                    assert!(
                        v >= seen[k as usize],
                        "key {k} went back from {}",
                        seen[k as usize]
                    );
                    seen[k as usize] = v;
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    let until = Instant::now() + Duration::from_millis(1500);
    let mut optimized = 0;
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(200));
        db.optimize("").unwrap();
        optimized += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = writer.join().unwrap();
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    assert!(
        rounds > 2 && optimized > 0,
        "rounds {rounds}, optimized {optimized}"
    );
    assert!(counter(&db, "compactions") > 0);
    assert!(db.check().unwrap().healthy());
}

#[test]
fn a_shards_hot_fields_share_the_lock_words_cache_line() {
    // Two writing cores pass a shard's lines back and forth; what every write touches (the
    // lock word, the seq and the table's array, capacity, length and bound) must be one line.
    let sh = Shard(RwLock::new(ShardState::default()));
    let base = &sh as *const Shard as usize;
    let state = sh.0.data_ptr() as usize - base;
    assert_eq!(base % 64, 0, "a shard must start a cache line");
    let seq_end = state + std::mem::offset_of!(ShardState, seq) + 8;
    let table = state + std::mem::offset_of!(ShardState, table);
    let mut ends = vec![seq_end];
    ends.extend(Table::hot_field_ends().iter().map(|e| table + e));
    for end in ends {
        assert!(end <= 64, "a hot field ends at byte {end} of the shard");
    }
}

/// A checkpoint large enough to be encoded by two threads (`PARALLEL_CKPT`) holds exactly the
/// index: every shard's seq and slots, in the shards' order.
#[test]
fn a_checkpoint_encoded_by_two_threads_holds_the_whole_index() {
    let fs = SimVfs::new();
    let db = sim_open(&fs, "sync=none");
    let n = PARALLEL_CKPT as u32 * 5 / 4;
    for i in 0..n {
        db.put(&i.to_be_bytes(), b"v").unwrap();
    }
    for i in (0..n).step_by(7) {
        db.out(&i.to_be_bytes()).unwrap();
    }
    let _m = db.inner.maint.lock();
    db.inner.checkpoint().unwrap();
    let live = db.inner.snapshot_shards();
    let known: Vec<u32> = db.inner.log.segs.load().segs.keys().copied().collect();
    let shards = db
        .inner
        .read_checkpoint(&known)
        .and_then(|c| c.shards)
        .expect("a valid checkpoint");
    assert_eq!(shards.len(), NSHARDS);
    let mut total = 0;
    for (i, ((seq, mut want), (cseq, table))) in live.into_iter().zip(shards).enumerate() {
        assert_eq!(cseq, seq, "shard {i}: seq");
        let mut got: Vec<Slot> = table.iter().collect();
        got.sort_by_key(|s| (s.tag, s.loc()));
        want.sort_by_key(|s| (s.tag, s.loc()));
        assert_eq!(got, want, "shard {i}: slots");
        total += got.len();
    }
    assert_eq!(total as u64, db.count());
    assert!(
        total >= PARALLEL_CKPT,
        "the checkpoint must take the two-thread path"
    );
}

/// A checkpoint's shard sections are found by the shard numbers that lead them, in whatever
/// order the two encoding threads wrote their chunks; a shard given twice voids it.
#[test]
fn checkpoint_sections_load_in_any_order_and_each_shard_once() {
    let fs = SimVfs::new();
    let db = sim_open(&fs, "sync=none");
    for i in 0..5000u32 {
        db.put(&i.to_be_bytes(), b"v").unwrap();
    }
    let _m = db.inner.maint.lock();
    db.inner.checkpoint().unwrap();
    let known: Vec<u32> = db.inner.log.segs.load().segs.keys().copied().collect();
    let tables = |c: recover::Checkpoint| -> Vec<(u64, Vec<Slot>)> {
        c.shards
            .into_iter()
            .flatten()
            .map(|(seq, t)| (seq, t.iter().collect()))
            .collect()
    };
    let want = tables(db.inner.read_checkpoint(&known).expect("valid"));
    assert_eq!(want.iter().map(|s| s.1.len()).sum::<usize>(), 5000);

    let f = fs
        .open(&Path::new("/sim/db.kh").join(CKPT_NAME), false)
        .unwrap();
    let mut b = vec![0; f.len().unwrap() as usize];
    f.read_at(&mut b, 0).unwrap();
    let lanes = ckpt::le_u32(&b, 24).unwrap() as usize;
    let mut pos = 28 + 8 * lanes;
    pos += 4 + 24 * ckpt::le_u32(&b, pos).unwrap() as usize;
    let head = b[..pos].to_vec();
    let mut secs = Vec::new();
    while pos < b.len() - 4 {
        let (end, _) = ckpt::section_end(&b, pos + 4).unwrap();
        secs.push(b[pos..end].to_vec());
        pos = end;
    }
    assert_eq!(secs.len(), NSHARDS);
    let rewrite = |secs: &[Vec<u8>]| {
        let mut nb = head.clone();
        for s in secs {
            nb.extend_from_slice(s);
        }
        let crc = crc32c::crc32c(&nb);
        nb.extend_from_slice(&crc.to_le_bytes());
        f.set_len(0).unwrap();
        f.write_at(&nb, 0).unwrap();
    };
    secs.reverse();
    rewrite(&secs);
    let got = tables(
        db.inner
            .read_checkpoint(&known)
            .expect("reversed: still valid"),
    );
    assert_eq!(got, want);
    secs[1] = secs[0].clone();
    rewrite(&secs);
    assert!(db.inner.read_checkpoint(&known).is_none(), "a shard twice");
    secs.pop();
    secs.remove(1);
    rewrite(&secs);
    assert!(
        db.inner.read_checkpoint(&known).is_none(),
        "a shard missing"
    );
}

/// A writer that grows a table also moves its slots over (in batches, `Inner::grow_to`): once
/// its put returns, no table is still growing and every shard is back in fast mode.
#[test]
fn a_growing_writer_finishes_the_move() {
    let fs = SimVfs::new();
    let db = sim_open(&fs, "sync=none");
    let mut grew = 0;
    let mut caps: Vec<usize> = db
        .inner
        .shards
        .iter()
        .map(|s| s.0.read().table.capacity())
        .collect();
    for i in 0..120_000u32 {
        db.put(&i.to_le_bytes(), b"v").unwrap();
        if i % 1000 == 999 {
            for (n, s) in db.inner.shards.iter().enumerate() {
                let g = s.0.read();
                assert!(!g.table.is_moving(), "shard {n} still moving after put {i}");
                assert!(
                    !db.inner.brl.slow.0[n].load(Ordering::SeqCst),
                    "shard {n} slow"
                );
                if g.table.capacity() > caps[n] {
                    grew += 1;
                    caps[n] = g.table.capacity();
                }
            }
        }
    }
    assert!(
        grew >= 64,
        "tables of 1024 home positions and more grew {grew} times"
    );
    for n in 0..NSHARDS {
        // Held exclusively: the threads' slot counts are folded into the table's.
        db.inner.excl(n).table.verify().unwrap();
    }
    assert_eq!(db.count(), 120_000);
}

/// A checkpoint written by two threads (chunks at offsets handed out in turn) that fails at
/// any of its first operations, followed by a power loss, leaves a database that opens with
/// every record synced before it and passes `check`.
#[test]
fn a_two_thread_checkpoint_cut_anywhere_loses_nothing_synced() {
    let n = PARALLEL_CKPT as u32 * 5 / 4;
    for (round, step) in [0u64, 1, 2, 3, 4, 6, 9, 14].into_iter().enumerate() {
        let fs = SimVfs::new();
        let db = sim_open(&fs, "sync=none");
        for i in 0..n {
            db.put(&i.to_be_bytes(), &i.to_le_bytes()).unwrap();
        }
        db.sync().unwrap();
        let before = fs.op_count();
        fs.fail_after(step, Fault::Eio);
        let closed = db.close();
        let ops = fs.op_count() - before;
        drop(db);
        fs.heal();
        fs.crash(CrashMode::Torn {
            seed: round as u64 + 1,
        });
        assert!(
            closed.is_err() || ops <= step,
            "step {step}: the fault never came"
        );
        let db = sim_open(&fs, "sync=none");
        assert_eq!(db.count(), n as u64, "step {step}");
        let rep = db.check().unwrap();
        assert!(rep.healthy(), "step {step}: {:?}", rep.problems);
        for i in (0..n).step_by(997) {
            let r = db.get(&i.to_be_bytes()).unwrap().expect("synced record");
            assert_eq!(r.value, i.to_le_bytes(), "step {step}");
        }
    }
}

/// The prefetch hints (`TableHint`) follow every shard's table as it grows, and after vanish.
#[test]
fn table_hints_follow_the_tables() {
    let fs = SimVfs::new();
    let db = sim_open(&fs, "sync=none");
    let check = |db: &DiskHash| {
        for (i, s) in db.inner.shards.iter().enumerate() {
            let (base, cap) = s.0.read().home_array();
            let hint = &db.inner.hints.0[i];
            assert_eq!(hint.base.load(Ordering::Relaxed), base, "shard {i}: base");
            assert_eq!(hint.cap.load(Ordering::Relaxed), cap, "shard {i}: cap");
        }
    };
    check(&db);
    for i in 0..50_000u32 {
        db.put(&i.to_le_bytes(), b"v").unwrap();
    }
    check(&db);
    db.vanish().unwrap();
    check(&db);
}

/// A record whose value was damaged on disk is an error to read, but a put of its key replaces
/// it and a delete removes it: neither needs the old value, so neither verifies it (`Want`).
#[test]
fn a_damaged_value_can_be_overwritten_and_deleted() {
    let fs = SimVfs::new();
    let db = sim_open(&fs, "sync=none");
    let value = |tag: u8| vec![tag; 300];
    for k in [b"keep".as_slice(), b"over", b"gone"] {
        db.put(k, &value(k[0])).unwrap();
    }
    db.close().unwrap();
    // Damage the middle of the values of `over` and `gone`.
    let seg = fs
        .paths()
        .into_iter()
        .find(|p| p.to_string_lossy().ends_with(".kd"))
        .unwrap();
    let f = fs.open(&seg, false).unwrap();
    let mut bytes = vec![0u8; f.len().unwrap() as usize];
    f.read_at(&mut bytes, 0).unwrap();
    for tag in [b'o', b'g'] {
        let at = bytes.windows(300).position(|w| w == value(tag)).unwrap();
        assert!(fs.corrupt(&seg, (at + 150) as u64, &[!tag]));
    }
    let db = sim_open(&fs, "sync=none");
    assert!(db.get(b"over").is_err(), "a damaged value was read");
    assert!(db.get(b"gone").is_err(), "a damaged value was read");
    db.put(b"over", b"new").unwrap();
    assert_eq!(db.get(b"over").unwrap().unwrap().value, b"new");
    assert!(db.out(b"gone").unwrap());
    assert_eq!(db.get(b"gone").unwrap(), None);
    assert_eq!(db.get(b"keep").unwrap().unwrap().value, value(b'k'));
    assert_eq!(db.count(), 2);
    // Reopened, the same.
    db.close().unwrap();
    let db = sim_open(&fs, "sync=none");
    assert_eq!(db.get(b"over").unwrap().unwrap().value, b"new");
    assert_eq!(db.get(b"gone").unwrap(), None);
    assert_eq!(db.count(), 2);
}

/// Puts into small tables look at the candidates before appending, into large ones after
/// (`Inner::put_replacing`): both orders keep every key's newest value, replace rather than
/// duplicate its slot, and survive a reopen.
#[test]
fn overwrites_into_small_and_large_tables_keep_the_newest_value() {
    let fs = SimVfs::new();
    let db = sim_open(&fs, "sync=none");
    // 40 keys: tables well under `SMALL_TABLE`; 20,000: over it.
    for n in [40u32, 20_000] {
        let key = |i: u32| format!("{n}-{i}").into_bytes();
        for round in 0..3u32 {
            for i in 0..n {
                db.put(&key(i), &round.to_le_bytes()).unwrap();
            }
        }
        for i in (0..n).step_by(3) {
            assert!(db.out(&key(i)).unwrap());
        }
        for i in 0..n {
            let want = (i % 3 != 0).then(|| 2u32.to_le_bytes().to_vec());
            assert_eq!(db.get(&key(i)).unwrap().map(|r| r.value), want, "{n}-{i}");
        }
    }
    let live = |n: u32| u64::from(n - n.div_ceil(3));
    assert_eq!(db.count(), live(40) + live(20_000));
    assert!(db
        .inner
        .shards
        .iter()
        .any(|s| s.0.read().memory() > SMALL_TABLE));
    db.close().unwrap();
    let db = sim_open(&fs, "sync=none");
    assert_eq!(db.count(), live(40) + live(20_000));
    assert_eq!(
        db.get(b"20000-1").unwrap().unwrap().value,
        2u32.to_le_bytes()
    );
}

/// A delete appends its record before it looks for the key (`delete_appending_first`): a
/// record still in the thread's own lane buffer is found there (not by taking the lane's lock
/// again), and a delete of a key that has no record leaves nothing in the log.
#[test]
fn deletes_find_records_in_their_own_buffer_and_leave_nothing_for_absent_keys() {
    finishes_within(Duration::from_secs(60), || {
        let fs = SimVfs::new();
        let db = sim_open(&fs, "sync=none");
        let key = |i: u32| format!("k{i}").into_bytes();
        for i in 0..100 {
            db.put(&key(i), b"value").unwrap();
        }
        let lane = db.inner.log.my_lane();
        let logged = |db: &DiskHash| {
            let t = db.inner.log.tails[lane].0.lock();
            (t.buf.len(), t.appended)
        };
        let before = logged(&db);
        assert!(before.0 > 0, "the puts are still in the lane's buffer");
        for i in 1000..1100 {
            assert!(!db.out(&key(i)).unwrap());
        }
        assert_eq!(
            logged(&db),
            before,
            "deletes of absent keys appended nothing"
        );
        for i in 0..50 {
            assert!(db.out(&key(i)).unwrap(), "{i}");
            assert!(!db.out(&key(i)).unwrap(), "{i} again");
        }
        let after = logged(&db);
        let one = HeaderBuf::delete(2, 1).as_slice().len() + 2;
        assert!(
            after.0 >= before.0 + 50 * one,
            "one delete record per deleted key"
        );
        assert_eq!(after.1 - before.1, (after.0 - before.0) as u64);
        let check = |db: &DiskHash| {
            for i in 0..100 {
                let want = (i >= 50).then(|| b"value".to_vec());
                assert_eq!(db.get(&key(i)).unwrap().map(|r| r.value), want, "{i}");
            }
            assert_eq!(db.count(), 50);
        };
        check(&db);
        db.close().unwrap();
        drop(db);
        let db = sim_open(&fs, "sync=none");
        check(&db);
        assert!(db.check().unwrap().healthy());
    });
}

/// Two threads (so two lanes), flat out, each deleting the key the other keeps writing, whose
/// record is then usually still in the other's lane buffer. A delete that held its own lane
/// while it locked the other's (to read the record there) would sooner or later wait for the
/// other thread while that one waits for it.
#[test]
fn threads_deleting_each_others_buffered_keys_do_not_deadlock() {
    const ROUNDS: u32 = 200_000;
    finishes_within(Duration::from_secs(120), || {
        let fs = SimVfs::new();
        let db = Arc::new(sim_open(&fs, "sync=none"));
        let workers: Vec<_> = [(b"a", b"b"), (b"b", b"a")]
            .into_iter()
            .map(|(mine, theirs)| {
                let db = Arc::clone(&db);
                std::thread::spawn(move || {
                    let mut deleted = 0u32;
                    for _ in 0..ROUNDS {
                        db.put(mine, b"v").unwrap();
                        deleted += u32::from(db.out(theirs).unwrap());
                    }
                    (db.inner.log.my_lane(), deleted)
                })
            })
            .collect();
        let res: Vec<(usize, u32)> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        assert_ne!(
            res[0].0, res[1].0,
            "the two threads write to different lanes"
        );
        assert!(
            res.iter().all(|r| r.1 > 0),
            "each thread deleted the other's key: {res:?}"
        );
    });
}

/// Run `f` on a thread of its own and fail unless it returns within `limit`: a test of a
/// deadlock then fails instead of hanging. (A panic in `f` fails it too.)
fn finishes_within(limit: Duration, f: impl FnOnce() + Send + 'static) {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        f();
        done.send(()).unwrap();
    });
    finished
        .recv_timeout(limit)
        .expect("finished in time, without a failure (a deadlock never finishes)");
}

/// Threads writing the same keys through the shards' fast mode (`Brl`), while other threads
/// take the shards exclusively (checkpoints, compaction, cursors, a growing table): the
/// index stays consistent, counts add up, and a crash after a sync recovers exactly the
/// state the threads left, each key's newest write by seq, with or without the checkpoint.
#[test]
fn fast_writers_racing_exclusive_holders_recover_exactly() {
    for drop_checkpoint in [false, true] {
        let fs = SimVfs::new();
        let params = "sync=none#lanes=3#segsiz=65536";
        let db = Arc::new(sim_open(&fs, params));
        let stop = Arc::new(AtomicBool::new(false));
        let maint = {
            let (db, stop) = (db.clone(), stop.clone());
            std::thread::spawn(move || {
                let (mut rounds, mut compactions) = (0, 0);
                // At least 3 rounds, and (bounded) until something was compacted: on a loaded
                // machine the writers may finish before a segment with dead records is sealed.
                while !stop.load(Ordering::Relaxed)
                    || rounds < 3
                    || (compactions == 0 && rounds < 500)
                {
                    let m = db.inner.maint.lock();
                    if stop.load(Ordering::Relaxed) && compactions == 0 && rounds >= 3 {
                        // The writers are done and nothing sealed was worth compacting yet
                        // (their dead records may all sit in the active segments): seal those.
                        for t in db.inner.log.tails.iter() {
                            let mut tail = t.0.lock();
                            if tail.seg.id != 0 {
                                db.inner.log.roll(&mut tail).unwrap();
                            }
                        }
                    }
                    db.inner.checkpoint().unwrap();
                    compactions += db.inner.compact_some(Duration::from_millis(50)).unwrap();
                    drop(m);
                    let mut c = db.cursor().unwrap();
                    for _ in 0..50 {
                        if c.next().unwrap().is_none() {
                            break;
                        }
                    }
                    assert!(db.count() <= 4 * 3000);
                    rounds += 1;
                }
                compactions
            })
        };
        let writers: Vec<_> = (0..4u32)
            .map(|t| {
                let db = db.clone();
                std::thread::spawn(move || {
                    let mut x = 0x9e37_79b9u32.wrapping_mul(t + 1);
                    for i in 0..3000u32 {
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        // 300 keys shared by every thread, and 3000 of each thread's own (so
                        // that tables grow meanwhile).
                        let key = if x.is_multiple_of(3) {
                            format!("own{t}-{i}")
                        } else {
                            format!("k{}", x % 300)
                        };
                        match x % 7 {
                            0 => {
                                db.out(key.as_bytes()).unwrap();
                            }
                            1 => {
                                db.accept(key.as_bytes(), &mut |cur| Decision::Put {
                                    value: [cur.map_or(&b""[..], |c| c.value), b"+"]
                                        .concat()
                                        .into(),
                                    flags: t,
                                    expires: 0,
                                })
                                .unwrap();
                            }
                            _ => {
                                db.put(key.as_bytes(), format!("{t}:{i}").as_bytes())
                                    .unwrap();
                            }
                        }
                        if i % 500 == 0 {
                            assert!(db.get(key.as_bytes()).is_ok());
                        }
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        assert!(maint.join().unwrap() > 0, "no segment was compacted");
        let want = dump(&*db);
        assert_eq!(db.count(), want.len() as u64);
        for i in 0..NSHARDS {
            db.inner.excl(i).table.verify().unwrap();
        }
        db.sync().unwrap();
        Arc::try_unwrap(db).ok().unwrap().abandon();
        fs.crash(CrashMode::DropUnsynced);
        if drop_checkpoint {
            fs.remove_file(Path::new("/sim/db.kh/index.ki"));
        }
        let db = sim_open(&fs, params);
        let got = dump(&db);
        assert_eq!(
            got.len(),
            want.len(),
            "checkpoint dropped: {drop_checkpoint}"
        );
        assert!(
            got == want,
            "recovered state differs (checkpoint dropped: {drop_checkpoint})"
        );
        assert_eq!(db.count(), want.len() as u64);
        assert!(db.check().unwrap().healthy());
    }
}

/// `write_spinning` gives the lock to one thread at a time, whether the wait ends while it
/// spins (a holder of a few microseconds) or after it has gone to sleep (a holder of far
/// longer than `EXCL_SPIN`).
#[test]
fn write_spinning_excludes_short_and_long_holders() {
    let lock = RwLock::new((0u64, false));
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let lock = &lock;
            s.spawn(move || {
                for i in 0..3000u64 {
                    let mut g = write_spinning(lock);
                    assert!(!g.1, "two holders at once");
                    g.1 = true;
                    let v = g.0;
                    if (i + t) % 1000 == 0 {
                        // Past the spin: the others sleep in the lock's queue.
                        std::thread::sleep(EXCL_SPIN * 4);
                    } else {
                        for _ in 0..50 {
                            std::hint::spin_loop();
                        }
                    }
                    g.0 = v + 1;
                    g.1 = false;
                }
            });
        }
    });
    assert_eq!(lock.read().0, 12_000);
}

/// `read_spinning` never reads while a writer is in the middle of a change, and readers get
/// in between writers whether they spin or sleep.
#[test]
fn read_spinning_sees_whole_writes() {
    let lock = RwLock::new((0u64, 0u64));
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let lock = &lock;
            s.spawn(move || {
                for i in 0..2000u64 {
                    let mut g = write_spinning(lock);
                    g.0 += 1;
                    if (i + t) % 500 == 0 {
                        std::thread::sleep(EXCL_SPIN * 4);
                    }
                    g.1 += 1;
                }
            });
        }
        for _ in 0..2 {
            let lock = &lock;
            s.spawn(move || {
                let mut last = 0;
                for _ in 0..4000 {
                    let g = read_spinning(lock);
                    assert_eq!(g.0, g.1, "a read inside a write");
                    assert!(g.0 >= last, "went back");
                    last = g.0;
                }
            });
        }
    });
    assert_eq!(*lock.read(), (4000, 4000));
}

/// A batch is one record on disk and is read back whole to verify its checksum: it may hold
/// no more than the largest single record, and a larger one is refused before anything is
/// written. (The values are never touched: `vec!` of zeros maps no memory until written.)
#[test]
fn a_batch_larger_than_the_largest_record_is_refused() {
    let fs = SimVfs::new();
    let db = sim_open(&fs, "sync=none");
    let half = crate::store::MAX_VALUE_LEN / 2 + 1;
    let ops: Vec<BatchOp> = (0..3u8)
        .map(|i| BatchOp::Put {
            key: vec![i],
            value: vec![0u8; half],
            flags: 0,
            expires: 0,
        })
        .collect();
    assert!(matches!(db.write_batch(&ops), Err(Error::TooLarge(_))));
    assert_eq!(db.count(), 0);
    db.write_batch(&ops[..0]).unwrap();
}

/// A lane's log ends with a marker at close, so that damage to its last record is told from a
/// torn tail even with no checkpoint to say the record was durable; an idle open and close
/// adds no second marker.
#[test]
fn a_marker_ends_each_lane_so_damage_to_the_last_record_shows() {
    let fs = SimVfs::new();
    let db = sim_open(&fs, "sync=none#lanes=1");
    for i in 0..10 {
        db.put(format!("k{i}").as_bytes(), &[b'v'; 20]).unwrap();
    }
    db.close().unwrap();
    let seg = fs
        .paths()
        .into_iter()
        .find(|p| p.to_string_lossy().ends_with(".kd"))
        .unwrap();
    let bytes = |fs: &SimVfs| fs.image()[&seg].clone();
    let img = bytes(&fs);
    let salt = format::parse_seg_header(&img).unwrap().salt;
    let m = format::marker(format::seed(salt));
    assert!(img.ends_with(&m), "no marker at the end of the lane");
    sim_open(&fs, "sync=none#lanes=1").close().unwrap();
    assert_eq!(bytes(&fs), img, "an idle open and close changed the log");
    // The last record damaged, the checkpoint gone: the marker after it makes it damage.
    let last = img.len() - m.len() - 3;
    assert!(fs.corrupt(&seg, last as u64, b"\xff"));
    fs.remove_file(Path::new("/sim/db.kh/index.ki"));
    let params = Params::parse("sync=none#lanes=1").unwrap();
    let r = DiskHash::open_with(
        Path::new("/sim/db.kh"),
        &params,
        Arc::new(fs.clone()),
        false,
    );
    assert!(
        matches!(r, Err(Error::Corrupt(_))),
        "damage taken for a torn tail"
    );
}

/// A database without keyspaces writes `index.ki` version 2 (what builds before keyspaces
/// read); one with keyspaces writes version 3, whose keyspace indexes load as written (the
/// open uses them: no replay of the log before the checkpoint), the catalog among them.
#[test]
fn a_checkpoint_holds_every_keyspace_and_stays_version_2_without_them() {
    let fs = SimVfs::new();
    let version = |fs: &SimVfs| {
        let img = fs.image();
        let b = &img[Path::new("/sim/db.kh/index.ki")];
        u32::from_le_bytes(b[8..12].try_into().unwrap())
    };
    {
        let db = sim_open(&fs, "lanes=2");
        db.put(b"root", b"r").unwrap();
        db.close().unwrap();
    }
    assert_eq!(version(&fs), CKPT_VERSION);
    {
        let db = sim_open(&fs, "");
        let a = db.keyspace("a", "").unwrap();
        for i in 0u32..300 {
            a.put(&i.to_be_bytes(), b"a").unwrap();
        }
        db.keyspace("b", "").unwrap().put(b"root", b"b").unwrap();
        drop(a);
        db.close().unwrap();
    }
    assert_eq!(version(&fs), CKPT_VERSION_SPACES);
    let db = sim_open(&fs, "");
    let known: Vec<u32> = db.inner.log.segs.load().segs.keys().copied().collect();
    let c = db
        .inner
        .read_checkpoint(&known)
        .expect("a usable checkpoint");
    let ids: Vec<u64> = c.spaces.iter().map(|s| s.0).collect();
    assert_eq!(ids, vec![1, 2, 3], "the catalog and both keyspaces");
    let counts: Vec<usize> = c
        .spaces
        .iter()
        .map(|s| s.1.iter().map(|(_, t)| t.iter().count()).sum())
        .collect();
    assert_eq!(counts, vec![2, 300, 1]);
    assert_eq!(db.keyspace("a", "").unwrap().count(), 300);
    assert_eq!(
        db.keyspace("b", "")
            .unwrap()
            .get(b"root")
            .unwrap()
            .unwrap()
            .value,
        b"b"
    );
    assert_eq!(db.get(b"root").unwrap().unwrap().value, b"r");
    assert_eq!(db.count(), 1);
}
