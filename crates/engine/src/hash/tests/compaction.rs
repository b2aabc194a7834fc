//! Compaction, optimize, checkpoints and damage found on disk.

use super::*;

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

/// Run `f` on a new thread whose lane (of two) is not `lane`.
fn on_other_lane(lane: usize, f: impl Fn() + Sync) {
    // Thread numbers are handed out in turn: the second thread at the latest.
    std::thread::scope(|s| {
        while !s
            .spawn(|| {
                let other = crate::counter::thread_number() % 2 != lane;
                if other {
                    f();
                }
                other
            })
            .join()
            .unwrap()
        {}
    })
}

/// Compaction copies a live record, keeping its seq, to the lane of the thread that compacts,
/// which a crash cuts apart from the record's own lane. A crash after the copy was written
/// back (that lane's segment on disk whole) but before anything else was synced must not find
/// a writer's later write (the copy) without its earlier ones: the log is synced before the
/// first copy is written.
#[test]
fn a_compaction_copy_never_outlives_the_writes_before_its_original() {
    let fs = SimVfs::new();
    let params = "sync=none#segsiz=64k#bufsiz=4k#lanes=2#compact=1#ckptsiz=1g";
    let db = sim_open(&fs, params);
    let inner = &db.inner;
    // Held throughout: no background compaction (nor its checkpoint).
    let _m = inner.maint.lock();
    let mine = crate::counter::thread_number() % 2;
    // Seal this thread's active segment: its id.
    let seal = || {
        let mut tail = inner.log.tails[mine].0.lock();
        let id = tail.seg.id;
        inner.log.roll(&mut tail).unwrap();
        id
    };
    // The compacting lane has a segment whose name a sync made durable.
    on_other_lane(mine, || {
        db.put(b"c", b"the other lane's").unwrap();
    });
    inner.log.sync_now().unwrap();
    // This thread's writes: w0 in one segment, w1 in the next (sealed), w2 in the active
    // one; none of them synced.
    db.put(b"w0", b"0").unwrap();
    let s0 = seal();
    db.put(b"w1", b"1").unwrap();
    let s1 = seal();
    db.put(b"w2", b"2").unwrap();
    assert!(s0 < s1);
    let copies = std::sync::Mutex::new(None);
    on_other_lane(mine, || {
        let moved = inner.relocate_segment(s1, false, None).unwrap();
        assert!(moved.is_some_and(|m| m > 0), "w1 copied: {moved:?}");
        let tail = inner.log.tails[1 - mine].0.lock();
        *copies.lock().unwrap() = Some(tail.seg.path.clone());
    });
    inner.log.flush_all().unwrap();
    let copies = copies.into_inner().unwrap().unwrap();
    // A crash now, with the compacting lane's segment written back whole and nothing else.
    let mut image = fs.crash_image(CrashMode::DropUnsynced);
    assert!(
        image.contains_key(&copies),
        "the copies' segment name is durable"
    );
    image.insert(copies.clone(), fs.image()[&copies].clone());
    let after = sim_open(&SimVfs::from_image(&image), params);
    let got = |k: &[u8]| after.get(k).unwrap().map(|r| r.value);
    assert_eq!(got(b"w1").as_deref(), Some(&b"1"[..]), "the copy survived");
    assert_eq!(
        got(b"w0").as_deref(),
        Some(&b"0"[..]),
        "this thread's write 1 survived (its copy) without its write 0"
    );
    assert!(after.check().unwrap().healthy());
}
