//! The B+ tree's comparators end to end: keys written in a scrambled order come back from a
//! cursor in the order of the comparator chosen at creation, before and after a reopen (the
//! comparator is stored in the database), through many leaf splits.

use kura_engine::Store;
use std::sync::Arc;

/// Keys of one comparator and the number each stands for (the order to expect).
fn keys(cmp: &str) -> Vec<(Vec<u8>, i64)> {
    let nums: Vec<i64> = (0..3000i64).map(|i| (i * 7919) % 3001 - 1500).collect();
    nums.iter()
        .map(|&n| {
            let key = match cmp.trim_end_matches("desc") {
                "lex" => format!("{:08}", n + 1500).into_bytes(),
                "dec" => n.to_string().into_bytes(),
                "int32" => (n as i32).to_le_bytes().to_vec(),
                "int64" => (n * 1_000_000_007).to_le_bytes().to_vec(),
                other => panic!("{other}"),
            };
            (key, n)
        })
        .collect()
}

fn walk(db: &Arc<dyn Store>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut cur = db.cursor().unwrap();
    if cur.first().unwrap() {
        while let Some((k, _)) = cur.get().unwrap() {
            out.push(k);
            if !cur.step().unwrap() {
                break;
            }
        }
    }
    out
}

#[test]
fn cursors_follow_the_comparator_chosen_at_creation() {
    let dir = tempfile::tempdir().unwrap();
    for cmp in [
        "lex",
        "lexdesc",
        "dec",
        "decdesc",
        "int32",
        "int32desc",
        "int64",
        "int64desc",
    ] {
        let path = dir.path().join(format!("{cmp}.kb"));
        let ks = keys(cmp);
        let mut expect = ks.clone();
        expect.sort_by_key(|(_, n)| *n);
        if cmp.ends_with("desc") {
            expect.reverse();
        }
        let expect: Vec<Vec<u8>> = expect.into_iter().map(|(k, _)| k).collect();
        {
            let db = kura_engine::open(&format!("{}#cmp={cmp}#leafsiz=256", path.display()))
                .unwrap_or_else(|e| panic!("{cmp}: {e}"));
            for (k, n) in &ks {
                db.put(k, n.to_string().as_bytes()).unwrap();
            }
            assert_eq!(walk(&db), expect, "{cmp}");
            db.close().unwrap();
        }
        // Reopened without naming the comparator: the stored one applies.
        let db = kura_engine::open(&path.display().to_string()).unwrap();
        assert_eq!(walk(&db), expect, "{cmp} after a reopen");
        for (k, n) in &ks {
            assert_eq!(
                db.get(k).unwrap().map(|r| r.value),
                Some(n.to_string().into_bytes())
            );
        }
        let described = format!("{:?}", db.describe());
        assert!(described.contains(cmp), "{cmp}: {described}");
        db.close().unwrap();
        // A different comparator named at a reopen is refused, not silently used.
        let other = if cmp == "lex" { "dec" } else { "lex" };
        assert!(
            kura_engine::open(&format!("{}#cmp={other}", path.display())).is_err(),
            "{cmp} reopened as {other}"
        );
    }
}

/// Duplicates against a model (every key's values, first to last): Tokyo Cabinet's `putdup`
/// (after the others), `putdupback` (before them: it becomes the value `get` returns), `put`
/// replacing the first value, `out` removing the first, `remove_all`, batches, cursors both
/// ways over every value, across reopens (log replay) and checkpoints, through leaf splits.
#[test]
fn duplicates_follow_the_model() {
    use std::collections::{BTreeMap, VecDeque};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dup.kb");
    let name = format!("{}#leafsiz=256#ckptsiz=1m", path.display());
    let mut db = kura_engine::open(&name).unwrap();
    assert!(db.allows_dups());
    let mut model: BTreeMap<Vec<u8>, VecDeque<Vec<u8>>> = BTreeMap::new();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for step in 0..6000u64 {
        let key = format!("k{:03}", rnd(60)).into_bytes();
        let value = format!("v{step}").into_bytes();
        match rnd(10) {
            0..=2 => {
                db.put_dup(&key, &value, false).unwrap();
                model.entry(key).or_default().push_back(value);
            }
            3 => {
                db.put_dup(&key, &value, true).unwrap();
                model.entry(key).or_default().push_front(value);
            }
            4 => {
                db.put(&key, &value).unwrap();
                let vs = model.entry(key).or_default();
                match vs.front_mut() {
                    Some(v) => *v = value,
                    None => vs.push_back(value),
                }
            }
            5 => {
                let had = db.out(&key).unwrap();
                let vs = model.entry(key.clone()).or_default();
                assert_eq!(had, vs.pop_front().is_some(), "{step}");
                if vs.is_empty() {
                    model.remove(&key);
                }
            }
            6 if rnd(4) == 0 => {
                let n = db.remove_all(&key).unwrap();
                assert_eq!(
                    n,
                    model.remove(&key).map_or(0, |v| v.len() as u64),
                    "{step}"
                );
            }
            7 => {
                // A batch: a put and a removal of the same key, applied in order.
                db.write_batch(&[
                    kura_engine::BatchOp::Put {
                        key: key.clone(),
                        value: value.clone(),
                        flags: 0,
                        expires: 0,
                    },
                    kura_engine::BatchOp::Remove { key: key.clone() },
                ])
                .unwrap();
                let vs = model.entry(key.clone()).or_default();
                match vs.front_mut() {
                    Some(v) => *v = value,
                    None => vs.push_back(value),
                }
                vs.pop_front();
                if vs.is_empty() {
                    model.remove(&key);
                }
            }
            _ => {
                let want: Vec<Vec<u8>> = model
                    .get(&key)
                    .map_or(vec![], |v| v.iter().cloned().collect());
                assert_eq!(db.get_all(&key).unwrap(), want, "{step}");
                assert_eq!(db.value_count(&key).unwrap(), want.len() as u64);
                assert_eq!(
                    db.get(&key).unwrap().map(|r| r.value),
                    want.first().cloned()
                );
            }
        }
        if step % 1500 == 1499 {
            if step % 3000 == 2999 {
                db.optimize("").unwrap();
            }
            db.close().unwrap();
            db = kura_engine::open(&name).unwrap();
        }
    }
    let flat: Vec<(Vec<u8>, Vec<u8>)> = model
        .iter()
        .flat_map(|(k, vs)| vs.iter().map(move |v| (k.clone(), v.clone())))
        .collect();
    assert_eq!(db.count(), flat.len() as u64);
    // Forward over every value.
    let mut cur = db.cursor().unwrap();
    let mut got = Vec::new();
    if cur.first().unwrap() {
        while let Some(kv) = cur.get().unwrap() {
            got.push((kv.0, kv.1.value));
            if !cur.step().unwrap() {
                break;
            }
        }
    }
    assert_eq!(got, flat);
    // Backward.
    let mut got = Vec::new();
    if cur.last().unwrap() {
        while let Some(kv) = cur.get().unwrap() {
            got.push((kv.0, kv.1.value));
            if !cur.step_back().unwrap() {
                break;
            }
        }
    }
    got.reverse();
    assert_eq!(got, flat);
    drop(cur);
    let report = db.check().unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    db.close().unwrap();
}

/// Kinds without duplicates refuse `put_dup` with a clear error and keep the one-value
/// meaning of the other calls.
#[test]
fn kinds_without_duplicates_refuse_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = kura_engine::open(&dir.path().join("h.kh").display().to_string()).unwrap();
    assert!(!db.allows_dups());
    let e = db.put_dup(b"a", b"1", false).unwrap_err();
    assert!(e.to_string().contains("duplicate"), "{e}");
    db.put(b"a", b"1").unwrap();
    assert_eq!(db.get_all(b"a").unwrap(), vec![b"1".to_vec()]);
    assert_eq!(db.value_count(b"a").unwrap(), 1);
    assert_eq!(db.remove_all(b"a").unwrap(), 1);
    assert_eq!(db.value_count(b"a").unwrap(), 0);
    db.close().unwrap();
}

/// `optimize` with another compression rewrites every leaf image with it and stores the
/// choice: the files shrink, every record reads back, and a reopen keeps the compression.
#[test]
fn optimize_changes_the_compression_of_every_image() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("z.kb");
    let name = format!("{}#cache=1m#leafsiz=2k", path.display());
    let db = kura_engine::open(&name).unwrap();
    let value = |i: u32| format!("{i:08} {}", "compressible text ".repeat(8)).into_bytes();
    for i in 0..20_000u32 {
        db.put(format!("{i:08}").as_bytes(), &value(i)).unwrap();
    }
    db.optimize("").unwrap();
    let plain = db.size();
    db.optimize("compress=zstd").unwrap();
    let packed = db.size();
    assert!(
        packed * 3 < plain,
        "{packed} bytes compressed, {plain} plain"
    );
    db.close().unwrap();
    let db = kura_engine::open(&path.display().to_string()).unwrap();
    assert!(format!("{:?}", db.describe()).contains("zstd"));
    for i in (0..20_000u32).step_by(7) {
        assert_eq!(
            db.get(format!("{i:08}").as_bytes())
                .unwrap()
                .map(|r| r.value),
            Some(value(i))
        );
    }
    assert!(db.check().unwrap().healthy());
    db.close().unwrap();
}

/// The logs ask for checkpoints as they grow: with `ckptsiz=1m`, writing several megabytes
/// leaves only the write-ahead segments since the last checkpoint, not all of them.
#[test]
fn checkpoints_follow_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.kb");
    let db = kura_engine::open(&format!(
        "{}#ckptsiz=1m#segsiz=64k#sync=none",
        path.display()
    ))
    .unwrap();
    let value = vec![b'v'; 200];
    for i in 0..40_000u32 {
        db.put(format!("{:08}", (i * 7919) % 40_000).as_bytes(), &value)
            .unwrap();
    }
    let wal_segments = || {
        std::fs::read_dir(&path)
            .unwrap()
            .filter(|e| {
                let n = e.as_ref().unwrap().file_name();
                n.to_string_lossy().starts_with("seg-")
            })
            .count()
    };
    // About 9 MB of log: 140 segments of 64 KiB without checkpoints.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while wal_segments() > 40 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        wal_segments() <= 40,
        "{} write-ahead segments",
        wal_segments()
    );
    assert!(path.join("tree.ki").exists());
    db.close().unwrap();
}

/// Checkpoints taken while writers split leaves, then a crash: the reopened tree (the last
/// checkpoint and the log after it) holds exactly what was written, each key once. A
/// checkpoint that paired a leaf's image from before a split with the leaf split off it
/// brought removed keys back in a cursor walk.
#[test]
fn checkpoints_beside_splitting_writers_survive_a_crash() {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, Ordering};
    for round in 0..4u64 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.kb");
        let params = kura_engine::Params::parse("leafsiz=256#sync=none").unwrap();
        let db = std::sync::Arc::new(kura_engine::tree::DiskTree::open(&path, &params).unwrap());
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        // Checkpoints only while the writers run (the last one too), so that what the reopen
        // starts from was taken beside them; and hot copies (a checkpoint each, copied), each
        // one more state taken beside them to check.
        let copies = dir.path().to_path_buf();
        let checkpointer = {
            let (db, stop) = (db.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) && n < 40 {
                    if n % 4 == 0 {
                        db.copy_to(&copies.join(format!("copy{n}.kb"))).unwrap();
                    } else {
                        db.checkpoint().unwrap();
                    }
                    n += 1;
                }
                n
            })
        };
        let writers: Vec<_> = (0..3u64)
            .map(|t| {
                let db = db.clone();
                std::thread::spawn(move || {
                    let mut model = BTreeMap::new();
                    let mut x = (round + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (t + 1);
                    for i in 0..30_000u64 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let key = format!("t{t}/k{:04}", x % 700).into_bytes();
                        if x % 3 == 0 {
                            db.out(&key).unwrap();
                            model.remove(&key);
                        } else {
                            let v = format!("{i}").into_bytes();
                            db.put(&key, &v).unwrap();
                            model.insert(key, v);
                        }
                    }
                    model
                })
            })
            .collect();
        let taken = checkpointer.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        let mut model = BTreeMap::new();
        for w in writers {
            model.extend(w.join().unwrap());
        }
        db.sync().unwrap();
        let db = std::sync::Arc::try_unwrap(db)
            .ok()
            .expect("the only handle");
        db.abandon();
        let db = kura_engine::open(&path.display().to_string()).unwrap();
        let mut got = BTreeMap::new();
        let mut cur = db.cursor().unwrap();
        if cur.first().unwrap() {
            while let Some((k, r)) = cur.get().unwrap() {
                assert!(
                    got.insert(k.clone(), r.value).is_none(),
                    "round {round}: {} twice",
                    String::from_utf8_lossy(&k)
                );
                if !cur.step().unwrap() {
                    break;
                }
            }
        }
        drop(cur);
        assert!(
            got == model,
            "round {round}: the tree differs from what was written"
        );
        for n in (0..taken).step_by(4) {
            let copy =
                kura_engine::open(&dir.path().join(format!("copy{n}.kb")).display().to_string())
                    .unwrap();
            let rep = copy.check().unwrap();
            assert!(rep.healthy(), "round {round}, copy {n}: {:?}", rep.problems);
            let mut seen = std::collections::BTreeSet::new();
            let mut cur = copy.cursor().unwrap();
            if cur.first().unwrap() {
                while let Some((k, _)) = cur.get().unwrap() {
                    assert!(seen.insert(k), "round {round}, copy {n}: a key twice");
                    if !cur.step().unwrap() {
                        break;
                    }
                }
            }
            drop(cur);
            assert_eq!(copy.count(), seen.len() as u64, "round {round}, copy {n}");
            copy.close().unwrap();
        }
        assert_eq!(db.count(), model.len() as u64);
        assert!(db.check().unwrap().healthy());
        db.close().unwrap();
    }
}

/// Threads write to lanes of their own: a key written from one thread, then another, then the
/// first again (its last record in a segment older than the second thread's) is replayed in
/// the order it was written, puts, deletes and batches alike.
#[test]
fn a_key_written_from_several_threads_replays_in_the_order_written() {
    use kura_engine::BatchOp;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.kb");
    let params = kura_engine::Params::parse("sync=none").unwrap();
    let db = Arc::new(kura_engine::tree::DiskTree::open(&path, &params).unwrap());
    // A writer on each of two threads, kept alive, so each keeps its lane.
    type Job = Box<dyn FnOnce(&kura_engine::tree::DiskTree) + Send>;
    let mut chans = Vec::new();
    let mut joins = Vec::new();
    for _ in 0..2 {
        let (tx, rx) = std::sync::mpsc::channel::<(Job, std::sync::mpsc::Sender<()>)>();
        let db = db.clone();
        joins.push(std::thread::spawn(move || {
            for (job, done) in rx {
                job(&db);
                done.send(()).unwrap();
            }
        }));
        chans.push(tx);
    }
    let run = |t: usize, job: Job| {
        let (dtx, drx) = std::sync::mpsc::channel();
        chans[t].send((job, dtx)).unwrap();
        drx.recv().unwrap();
    };
    let mut model = std::collections::BTreeMap::new();
    for round in 0..200u32 {
        for (t, v) in [(0usize, "a"), (1, "b"), (0, "c")] {
            let key = format!("k{:03}", round % 50);
            let val = format!("{v}{round}");
            let (k2, v2) = (key.clone(), val.clone());
            match round % 4 {
                0 | 1 => run(
                    t,
                    Box::new(move |db| {
                        db.put(k2.as_bytes(), v2.as_bytes()).unwrap();
                    }),
                ),
                2 => run(
                    t,
                    Box::new(move |db| {
                        db.write_batch(&[
                            BatchOp::Put {
                                key: k2.clone().into_bytes(),
                                value: v2.clone().into_bytes(),
                                flags: 0,
                                expires: 0,
                            },
                            BatchOp::Remove {
                                key: b"gone".to_vec(),
                            },
                        ])
                        .unwrap()
                    }),
                ),
                _ => {
                    if v == "c" {
                        run(
                            t,
                            Box::new(move |db| {
                                db.out(k2.as_bytes()).unwrap();
                            }),
                        );
                        model.remove(&key);
                        continue;
                    }
                    run(
                        t,
                        Box::new(move |db| {
                            db.put(k2.as_bytes(), v2.as_bytes()).unwrap();
                        }),
                    )
                }
            }
            model.insert(key, val);
        }
    }
    drop(chans);
    for j in joins {
        j.join().unwrap();
    }
    db.sync().unwrap();
    let db = Arc::try_unwrap(db).ok().expect("the only handle");
    db.abandon();
    let db = kura_engine::open(&path.display().to_string()).unwrap();
    let mut got = std::collections::BTreeMap::new();
    let mut cur = db.cursor().unwrap();
    if cur.first().unwrap() {
        while let Some((k, r)) = cur.get().unwrap() {
            got.insert(
                String::from_utf8(k).unwrap(),
                String::from_utf8(r.value).unwrap(),
            );
            if !cur.step().unwrap() {
                break;
            }
        }
    }
    drop(cur);
    assert_eq!(got, model);
    db.close().unwrap();
}

/// Eight writers under sync=always on a disk whose fdatasync takes 3 ms, and crashes while they
/// write (images of what each would leave, taken at one instant): every put acknowledged before
/// an image is in the tree reopened from it. The tree writes through the hash's log and its
/// group commit.
#[test]
fn acknowledged_writes_survive_a_crash_in_the_middle_of_group_commits() {
    use kura_engine::io::{CrashMode, SimVfs};
    use kura_engine::tree::DiskTree;
    use kura_engine::{OpenMode, Params};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;
    use std::time::Duration;
    let path = std::path::Path::new("/sim/t.kb");
    let open = |fs: &SimVfs, params: &str| {
        DiskTree::open_mode(
            path,
            &Params::parse(params).unwrap(),
            Arc::new(fs.clone()),
            OpenMode::Create,
        )
        .unwrap()
    };
    let fs = SimVfs::new();
    fs.set_sync_delay(Duration::from_millis(3));
    let db = Arc::new(open(&fs, "sync=always#segsiz=64k#bufsiz=4k#leafsiz=1k"));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..8u64)
        .map(|t| {
            let (db, acked, stop) = (db.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || {
                for i in 0u64.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    db.put(format!("{i:05}-{t}").as_bytes(), &[t as u8; 100])
                        .unwrap();
                    acked.lock().unwrap().push((t, i));
                    // Out of step with each other, so that writes arrive while syncs run.
                    std::thread::sleep(Duration::from_micros((t * 131 + i * 7919) % 2000));
                }
            })
        })
        .collect();
    // (The first writes wait for the first segment's header to be synced too.)
    while acked.lock().unwrap().is_empty() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut images = Vec::new();
    for n in 0..8u64 {
        std::thread::sleep(Duration::from_millis(15 + n * 7 % 10));
        let before = acked.lock().unwrap().len();
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
    let acked = acked.lock().unwrap();
    for (n, (before, image)) in images.iter().enumerate() {
        assert!(*before > 0, "crash {n}: nothing acknowledged yet");
        let db = open(&SimVfs::from_image(image), "");
        for (t, i) in &acked[..*before] {
            assert_eq!(
                db.get(format!("{i:05}-{t}").as_bytes())
                    .unwrap()
                    .map(|r| r.value),
                Some(vec![*t as u8; 100]),
                "crash {n}: {i:05}-{t} lost"
            );
        }
        assert!(db.check().unwrap().healthy(), "crash {n}");
    }
}

/// A creation killed after taking the lock and before writing `kura.meta` leaves a directory
/// holding only `LOCK`: the next open makes the database (a read-only one says there is none),
/// while a directory with files of the kind and no descriptor is still refused.
#[test]
fn a_creation_cut_short_before_its_descriptor_is_made_again() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("cut.kb");
    std::fs::create_dir(&p).unwrap();
    std::fs::write(p.join("LOCK"), b"12345").unwrap();
    let name = p.display().to_string();
    let ro = kura_engine::open_readonly(&name);
    assert!(
        matches!(&ro, Err(e) if e.to_string().contains("cut short")),
        "{:?}",
        ro.as_ref().err()
    );
    let db = kura_engine::open(&name).unwrap();
    db.put(b"k", b"v").unwrap();
    db.close().unwrap();
    let db = kura_engine::open(&name).unwrap();
    assert_eq!(db.get(b"k").unwrap().map(|r| r.value), Some(b"v".to_vec()));
    db.close().unwrap();
    let q = dir.path().join("unmarked.kb");
    std::fs::create_dir(&q).unwrap();
    std::fs::write(q.join("LOCK"), b"").unwrap();
    std::fs::write(q.join("tree.ki"), b"x").unwrap();
    assert!(kura_engine::open(&q.display().to_string()).is_err());
}

/// The value written as the `n`th of `key`: its key, `n`, and `n % 97` filler bytes that
/// depend on `n` (lengths change, so leaves move their entries), ended by a mark.
fn versioned_value(key: &[u8], n: u64) -> Vec<u8> {
    let mut v = key.to_vec();
    v.extend_from_slice(format!("|{n}|").as_bytes());
    v.extend(std::iter::repeat_n(
        b'a' + (n % 26) as u8,
        (n % 97) as usize,
    ));
    v.extend_from_slice(b"|end");
    v
}

/// `n` of a value read for `key`, after checking that it is whole (`versioned_value`).
fn check_versioned(key: &[u8], v: &[u8]) -> u64 {
    let text = String::from_utf8(v.to_vec()).expect("a value of ASCII bytes");
    let parts: Vec<&str> = text.split('|').collect();
    assert_eq!(parts.len(), 4, "a torn value for {key:?}: {text:?}");
    assert_eq!(parts[0].as_bytes(), key, "another key's value: {text:?}");
    let n: u64 = parts[1].parse().expect("a number");
    let fill = parts[2].as_bytes();
    assert_eq!(fill.len() as u64, n % 97, "a torn value: {text:?}");
    assert!(
        fill.iter().all(|&b| b == b'a' + (n % 26) as u8),
        "a torn value: {text:?}"
    );
    assert_eq!(parts[3], "end", "a torn value: {text:?}");
    n
}

/// Readers beside writers on the same leaves (values changing length, leaves splitting under
/// a churn of other keys, checkpoints latching every leaf): every value read is whole and the
/// key's own, and a reader never sees a key's values go back in time, through `get` (which
/// reads published leaves without their latch) and `get_all` (which reads under it too).
#[test]
fn readers_beside_writers_see_whole_values_in_order() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.kb");
    let params = kura_engine::Params::parse("leafsiz=512#sync=none").unwrap();
    let db = Arc::new(kura_engine::tree::DiskTree::open(&path, &params).unwrap());
    let key = |t: u64, k: u64| format!("w{t}/{k:03}").into_bytes();
    for t in 0..2 {
        for k in 0..40 {
            db.put(&key(t, k), &versioned_value(&key(t, k), 0)).unwrap();
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2u64)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                for n in 1..=6_000u64 {
                    let k = (n * 7) % 40;
                    let kk = key(t, k);
                    // A key's values only grow in `n`: every write to it is a new `n`.
                    db.put(&kk, &versioned_value(&kk, n)).unwrap();
                    if n % 3 == 0 {
                        // Churn between the writers' keys: inserts split leaves, removes
                        // shrink them.
                        let c = format!("w{t}/{:03}x{}", n % 40, n % 5).into_bytes();
                        if n % 2 == 0 {
                            db.put(&c, b"churn").unwrap();
                        } else {
                            db.out(&c).unwrap();
                        }
                    }
                    if t == 0 && n % 1500 == 0 {
                        db.checkpoint().unwrap();
                    }
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2u64)
        .map(|r| {
            let (db, stop) = (db.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut seen = std::collections::HashMap::new();
                let mut reads = 0u64;
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ r;
                while !stop.load(Ordering::Relaxed) || reads < 10_000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let (t, k) = (x % 2, (x >> 8) % 40);
                    let kk = key(t, k);
                    let v = if x.is_multiple_of(8) {
                        let all = db.get_all(&kk).unwrap();
                        assert_eq!(all.len(), 1, "one value of {kk:?}");
                        all.into_iter().next().unwrap()
                    } else {
                        db.get(&kk).unwrap().expect("a key written before").value
                    };
                    let n = check_versioned(&kk, &v);
                    let last = seen.entry(kk.clone()).or_insert(0);
                    assert!(n >= *last, "{kk:?} went back from {last} to {n}");
                    *last = n;
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() >= 10_000);
    }
    for t in 0..2 {
        for k in 0..40 {
            let kk = key(t, k);
            let v = db.get(&kk).unwrap().unwrap().value;
            // The last write to key k of writer t: the largest n ≤ 6000 with n * 7 % 40 == k.
            let last = (1..=6_000u64).rev().find(|n| (n * 7) % 40 == k).unwrap();
            assert_eq!(check_versioned(&kk, &v), last);
        }
    }
}

/// With the cache full, a get of a leaf not cached and not used lately is answered from the
/// leaf's image without caching it (`leaf_image_lookups`); the values are right either way,
/// with the images written in either format of the node log.
#[test]
fn gets_past_a_full_cache_read_images_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.kb");
    let params = kura_engine::Params::parse("cache=1m#sync=none").unwrap();
    let n = 30_000u64;
    let value = |i: u64| format!("{i:08}:{}", "v".repeat((i % 90) as usize)).into_bytes();
    {
        let db = kura_engine::tree::DiskTree::open(&path, &params).unwrap();
        for i in 0..n {
            db.put(format!("{i:08}").as_bytes(), &value(i)).unwrap();
        }
        db.close().unwrap();
    }
    let db = kura_engine::tree::DiskTree::open(&path, &params).unwrap();
    let counter = |db: &kura_engine::tree::DiskTree, name: &str| {
        db.counters().into_iter().find(|c| c.0 == name).unwrap().1
    };
    let mut x = 7u64;
    for _ in 0..20_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let i = (x >> 33) % (n + 100);
        let got = db.get(format!("{i:08}").as_bytes()).unwrap();
        if i < n {
            assert_eq!(got.unwrap().value, value(i), "{i}");
        } else {
            assert!(got.is_none());
        }
    }
    assert!(
        counter(&db, "leaf_image_lookups") > 0,
        "no get was answered from an image"
    );
    assert!(db.cached_bytes() <= (1 << 20) + (64 << 10));
}
