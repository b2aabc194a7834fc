//! Threads: concurrent writers and readers, shard locks, checkpoints encoded by two threads.

use super::*;

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
