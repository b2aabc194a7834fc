//! Operations on real and simulated files: the basic calls, parameters, large values, batches.

use super::*;

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
