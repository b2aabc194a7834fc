//! The fixed-length database through its own interface: ids and key words, the width, the
//! limit, the order, restarts (checkpointed, replayed, crashed), compaction, optimize, vanish,
//! copy, check and repair.

use super::*;
use crate::config::OpenMode;
use crate::io::Vfs;
use crate::io::{CrashMode, SimVfs};
use crate::store::{BatchOp, KeyRange, Outcome, Store};
use crate::{MemcachedOps, TokyoOps};
use std::path::Path;

const SIM: &str = "/sim/db.kf";

fn sim(fs: &SimVfs, params: &str, mode: OpenMode) -> Result<FixedDb> {
    FixedDb::open_mode(
        Path::new(SIM),
        &Params::parse(params).unwrap(),
        Arc::new(fs.clone()),
        mode,
    )
}

fn val(db: &FixedDb, key: &[u8]) -> Option<Vec<u8>> {
    db.get(key).unwrap().map(|r| r.value)
}

fn keys(db: &FixedDb) -> Vec<String> {
    let mut v = Vec::new();
    db.for_each_record(&mut |k, _, _| {
        v.push(String::from_utf8(k.to_vec()).unwrap());
        Ok(true)
    })
    .unwrap();
    v
}

#[test]
fn ids_key_words_and_the_width() {
    let fs = SimVfs::new();
    let db = sim(&fs, "width=8#limsiz=4096", OpenMode::Create).unwrap();
    assert_eq!(db.width(), 8);
    assert_eq!(db.limid(), (4096 - 256) / 9);
    assert!(db.created());
    // Key words on an empty database: only `next` names an id (1).
    for k in [&b"min"[..], b"max", b"prev"] {
        assert!(
            matches!(db.put(k, b"x"), Err(Error::InvalidKey(_))),
            "{k:?}"
        );
    }
    assert_eq!(db.get(b"min").unwrap(), None);
    assert_eq!(db.get(b"max").unwrap(), None);
    assert!(matches!(db.get(b"prev"), Err(Error::InvalidKey(_))));
    db.put(b"next", b"one").unwrap();
    assert_eq!(val(&db, b"1").unwrap(), b"one");
    db.put(b"00000005", b"five").unwrap();
    assert_eq!(val(&db, b"5").unwrap(), b"five");
    db.put(b"next", b"six").unwrap();
    assert_eq!(val(&db, b"6").unwrap(), b"six");
    assert_eq!(val(&db, b"max").unwrap(), b"six");
    assert_eq!(val(&db, b"min").unwrap(), b"one");
    assert!(matches!(
        db.put(b"prev", b"zero"),
        Err(Error::InvalidKey(_))
    ));
    db.put(b"max", b"SIX").unwrap();
    assert_eq!(val(&db, b"6").unwrap(), b"SIX");
    assert!(matches!(db.get(b"next"), Err(Error::InvalidKey(_))));
    assert!(matches!(db.out(b"prev"), Err(Error::InvalidKey(_))));
    // Not ids: refused, never a silent 0.
    for k in [
        &b"abc"[..],
        b"1a",
        b"",
        b"0",
        b"-1",
        b"99999999999999999999",
    ] {
        assert!(matches!(db.get(k), Err(Error::InvalidKey(_))), "{k:?}");
        assert!(
            matches!(db.put(k, b"v"), Err(Error::InvalidKey(_))),
            "{k:?}"
        );
    }
    let lim = db.limid().to_string();
    db.put(lim.as_bytes(), b"last").unwrap();
    let past = (db.limid() + 1).to_string();
    assert!(matches!(
        db.put(past.as_bytes(), b"v"),
        Err(Error::InvalidKey(_))
    ));
    assert!(matches!(db.put(b"next", b"v"), Err(Error::InvalidKey(m)) if m.contains("full")));
    // The width: refused, never cut.
    assert!(matches!(
        db.put(b"2", b"123456789"),
        Err(Error::TooLarge(_))
    ));
    db.put(b"2", b"12345678").unwrap();
    assert!(matches!(db.putcat(b"2", b"9"), Err(Error::TooLarge(_))));
    assert_eq!(val(&db, b"2").unwrap(), b"12345678");
    assert_eq!(db.count(), 5);
    assert_eq!(keys(&db), ["1", "2", "5", "6", &lim]);
    assert!(db.out(b"max").unwrap());
    assert_eq!(db.bounds(), (1, 6));
    assert!(db.out(b"min").unwrap());
    assert_eq!(db.bounds(), (2, 6));
    db.put(b"prev", b"one again").unwrap_err();
    db.put(b"prev", b"1").unwrap();
    assert_eq!(db.bounds(), (1, 6));
    // Batches take ids, not key words; a value too wide refuses the whole batch.
    let put = |k: &str, v: &str| BatchOp::Put {
        key: k.into(),
        value: v.into(),
        flags: 0,
        expires: 0,
    };
    assert!(matches!(
        db.write_batch(&[put("7", "a"), put("next", "b")]),
        Err(Error::InvalidKey(_))
    ));
    assert!(matches!(
        db.write_batch(&[put("7", "a"), put("8", "123456789")]),
        Err(Error::TooLarge(_))
    ));
    assert_eq!(db.get(b"7").unwrap(), None);
    db.write_batch(&[
        put("7", "a"),
        put("8", "b"),
        BatchOp::Remove { key: "7".into() },
    ])
    .unwrap();
    assert_eq!(keys(&db), ["1", "2", "5", "6", "8"]);
    db.close().unwrap();
}

#[test]
fn order_ranges_and_intervals_are_numeric() {
    let fs = SimVfs::new();
    let db = sim(&fs, "", OpenMode::Create).unwrap();
    for i in [1u64, 2, 9, 10, 11, 100, 4096, 4097, 70000] {
        db.put(i.to_string().as_bytes(), format!("v{i}").as_bytes())
            .unwrap();
    }
    assert_eq!(
        keys(&db),
        ["1", "2", "9", "10", "11", "100", "4096", "4097", "70000"]
    );
    assert_eq!(
        db.range(b"9", Some(b"100"), 100).unwrap(),
        [&b"9"[..], b"10", b"11"]
    );
    let desc = KeyRange {
        desc: true,
        max: 3,
        ..KeyRange::new(b"2", Some(b"4097"))
    };
    let mut got = Vec::new();
    db.for_each_in_range(&desc, &mut |k, _, _| {
        got.push(k.to_vec());
        Ok(true)
    })
    .unwrap();
    assert_eq!(got, [&b"4096"[..], b"100", b"11"]);
    assert_eq!(
        db.fwmkeys(b"[10,100]", 10).unwrap(),
        [&b"10"[..], b"11", b"100"]
    );
    assert_eq!(db.fwmkeys(b"(10,max]", 2).unwrap(), [&b"11"[..], b"100"]);
    assert_eq!(db.fwmkeys(b"[min,3)", 10).unwrap(), [&b"1"[..], b"2"]);
    assert!(matches!(db.fwmkeys(b"10", 10), Err(Error::InvalidKey(_))));
    let mut cur = db.cursor().unwrap();
    assert!(cur.jump(b"12").unwrap());
    assert_eq!(cur.get().unwrap().unwrap().0, b"100");
    assert!(cur.step_back().unwrap());
    assert_eq!(cur.get().unwrap().unwrap().0, b"11");
    assert!(cur.last().unwrap());
    assert_eq!(cur.get().unwrap().unwrap().0, b"70000");
    assert!(cur.jump_back(b"4095").unwrap());
    assert_eq!(cur.get().unwrap().unwrap().0, b"100");
}

/// Every write survives a restart: from the checkpoint written at close, from the log alone
/// (checkpoint removed), and after a crash with `sync=always` (nothing acknowledged lost).
#[test]
fn restarts_keep_every_record() {
    let fs = SimVfs::new();
    // Created and closed empty first (`kura db create`).
    sim(&fs, "segsiz=64k#bufsiz=4k", OpenMode::Create)
        .unwrap()
        .close()
        .unwrap();
    let db = sim(&fs, "segsiz=64k#bufsiz=4k", OpenMode::Existing).unwrap();
    for i in 1..=3000u64 {
        db.put(i.to_string().as_bytes(), &i.to_le_bytes()).unwrap();
    }
    for i in (1..=3000u64).step_by(3) {
        assert!(db.out(i.to_string().as_bytes()).unwrap());
    }
    for i in (2..=3000u64).step_by(3) {
        db.put_with(i.to_string().as_bytes(), b"again", 7, 0)
            .unwrap();
    }
    let want = keys(&db);
    assert_eq!(want.len(), 2000);
    db.close().unwrap();
    let db = sim(&fs, "", OpenMode::Existing).unwrap();
    assert!(
        db.inner.slots.load().pages_known(),
        "the pages holding records are known"
    );
    assert_eq!(keys(&db), want);
    assert_eq!(db.get(b"5").unwrap().unwrap().meta.flags, 7);
    assert_eq!(db.count(), 2000);
    assert_eq!(db.bounds(), (2, 3000));
    db.close().unwrap();
    // The records are in the slot file; the log holds nothing since the close.
    assert!(fs.exists(&Path::new(SIM).join(super::slots::DATA_NAME)));
    assert!(!fs.exists(&Path::new(SIM).join(CKPT_NAME)));
    // Written with sync=always and crashed before any checkpoint: the log replay.
    let db = sim(&fs, "sync=always", OpenMode::Existing).unwrap();
    db.put(b"3001", b"x").unwrap();
    db.abandon();
    fs.crash(CrashMode::DropUnsynced);
    let db = sim(&fs, "", OpenMode::Existing).unwrap();
    assert_eq!(keys(&db).len(), 2001);
    db.close().unwrap();
    // Crashed with sync=always.
    let db = sim(&fs, "sync=always", OpenMode::Existing).unwrap();
    for i in 4000..4100u64 {
        db.put(i.to_string().as_bytes(), b"durable").unwrap();
    }
    db.abandon();
    fs.crash(CrashMode::Torn { seed: 3 });
    let db = sim(&fs, "", OpenMode::Existing).unwrap();
    for i in 4000..4100u64 {
        assert_eq!(val(&db, i.to_string().as_bytes()).unwrap(), b"durable");
    }
    assert_eq!(db.count(), 2101);
    assert!(db.check().unwrap().healthy());
}

#[test]
fn compaction_vanish_optimize_and_copy() {
    let fs = SimVfs::new();
    let db = sim(&fs, "segsiz=64k#bufsiz=4k#width=100", OpenMode::Create).unwrap();
    for round in 0..20u64 {
        for i in 1..=500u64 {
            db.put(i.to_string().as_bytes(), format!("r{round}-{i}").as_bytes())
                .unwrap();
        }
    }
    let before = db.inner.log.data_size();
    db.optimize("").unwrap();
    assert!(db.inner.log.data_size() < before / 5, "the log was cut");
    assert_eq!(val(&db, b"17").unwrap(), b"r19-17");
    assert!(db.check().unwrap().healthy());
    // Optimize changes width and limsiz only when every record fits.
    assert!(matches!(
        db.optimize("width=4"),
        Err(Error::InvalidParam(_))
    ));
    assert!(matches!(
        db.optimize("limsiz=4096"),
        Err(Error::InvalidParam(_))
    ));
    assert!(matches!(
        db.optimize("sync=always"),
        Err(Error::InvalidParam(_))
    ));
    db.optimize("width=10").unwrap();
    assert_eq!(db.width(), 10);
    assert!(matches!(
        db.put(b"1", b"12345678901"),
        Err(Error::TooLarge(_))
    ));
    db.close().unwrap();
    match sim(&fs, "width=100", OpenMode::Existing) {
        Err(Error::InvalidParam(m)) => assert!(m.contains("width 10"), "{m}"),
        other => panic!("{:?}", other.err()),
    }
    let db = sim(&fs, "width=10", OpenMode::Existing).unwrap();
    assert_eq!(db.stored().unwrap().width, 10);
    assert_eq!(db.count(), 500);
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("copy.kf");
    db.copy_to(&dest).unwrap();
    db.vanish().unwrap();
    assert_eq!(db.count(), 0);
    assert_eq!(keys(&db), Vec::<String>::new());
    db.put(b"next", b"fresh").unwrap();
    db.close().unwrap();
    let db = sim(&fs, "", OpenMode::Existing).unwrap();
    assert_eq!(keys(&db), ["1"]);
    assert_eq!(val(&db, b"1").unwrap(), b"fresh");
    let copy = crate::open_existing(dest.to_str().unwrap()).unwrap();
    assert_eq!(copy.count(), 500);
    assert_eq!(copy.get(b"17").unwrap().unwrap().value, b"r19-17");
    assert!(copy.check().unwrap().healthy());
}

/// Damage to a page of the slot file is met by the reads that reach it and by `check`;
/// damage in the log makes a writable open refuse, a read-only one serve what verifies;
/// `repair` keeps every other record.
#[test]
fn damage_is_refused_reported_and_repaired() {
    let fs = SimVfs::new();
    let db = sim(&fs, "segsiz=64k", OpenMode::Create).unwrap();
    for i in 1..=200u64 {
        db.put(i.to_string().as_bytes(), format!("value {i}").as_bytes())
            .unwrap();
    }
    db.close().unwrap();
    // Width 255: slots of 257 bytes, 15 a page; page 6 holds ids 91 to 105.
    let data = Path::new(SIM).join(super::slots::DATA_NAME);
    assert!(fs.corrupt(&data, super::slots::HEAD_LEN + 6 * 4096 + 100, b"\xff\xff"));
    let db = sim(&fs, "", OpenMode::Existing).unwrap();
    let errors: Vec<u64> = (1..=200u64)
        .filter(|i| matches!(db.get(i.to_string().as_bytes()), Err(Error::Corrupt(_))))
        .collect();
    assert_eq!(errors, (91..=105).collect::<Vec<_>>());
    let rep = db.check().unwrap();
    assert!(!rep.healthy());
    assert_eq!(rep.damage.len(), 1, "{rep:?}");
    // Records in the log (synced, never checkpointed), one of them damaged.
    for i in 201..=300u64 {
        db.put(i.to_string().as_bytes(), format!("value {i}").as_bytes())
            .unwrap();
    }
    db.sync().unwrap();
    db.abandon();
    let seg = fs
        .list(Path::new(SIM))
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".kd"))
        .max()
        .unwrap();
    let seg = Path::new(SIM).join(seg);
    // Records are 32 bytes after a 32-byte header.
    assert!(fs.corrupt(&seg, 32 + 32 * 50 + 12, b"\xff\xff"));
    match sim(&fs, "", OpenMode::Existing) {
        Err(Error::Corrupt(m)) => assert!(m.contains("kura db check"), "{m}"),
        other => panic!("{:?}", other.err()),
    }
    let ro = sim(&fs, "", OpenMode::ReadOnly).unwrap();
    let rep = ro.check().unwrap();
    assert!(!rep.healthy());
    let served = keys(&ro).len();
    assert!(served >= 284, "{served}");
    drop(ro);
    let fixed = Path::new("/sim/fixed.kf");
    let report = FixedDb::repair_with(
        Path::new(SIM),
        fixed,
        &Params::default(),
        Arc::new(fs.clone()),
    )
    .unwrap();
    assert!(report.kept >= 284, "{}", report.kept);
    let db = FixedDb::open_mode(
        fixed,
        &Params::default(),
        Arc::new(fs.clone()),
        OpenMode::Existing,
    )
    .unwrap();
    assert_eq!(db.count(), report.kept);
    assert!(db.check().unwrap().healthy());
}

#[test]
fn conditional_writes_and_versions() {
    let fs = SimVfs::new();
    let db = sim(&fs, "", OpenMode::Create).unwrap();
    let Outcome::Stored(m) = db.putkeep(b"3", b"a", 0, 0).unwrap() else {
        panic!()
    };
    assert_eq!(db.putkeep(b"3", b"b", 0, 0).unwrap(), Outcome::Exists);
    let Outcome::Stored(m2) = db.cas(b"3", m.version, b"c", 0, 0).unwrap() else {
        panic!()
    };
    assert_ne!(m.version, m2.version);
    let t = db.touch(b"3", 99_999_999_999).unwrap().unwrap();
    assert_eq!(t.version, m2.version, "a touch keeps the version");
    assert_eq!(db.addint(b"4", 5).unwrap(), 5);
    assert_eq!(db.addint(b"4", 5).unwrap(), 10);
    db.close().unwrap();
    let db = sim(&fs, "", OpenMode::Existing).unwrap();
    assert_eq!(db.get(b"3").unwrap().unwrap().meta.version, m2.version);
    let Outcome::Stored(m3) = db.replace(b"3", b"d", 0, 0).unwrap() else {
        panic!()
    };
    assert_ne!(
        m3.version, m2.version,
        "a write changes the version across opens"
    );
}

/// `check_put` answers what `write_batch` would: the width, ids within the limit, no key
/// words; it writes nothing.
#[test]
fn check_put_applies_the_batch_rules() {
    let fs = SimVfs::new();
    let db = sim(&fs, "width=4#limsiz=4096", OpenMode::Create).unwrap();
    assert!(db.check_put(b"1", 4).is_ok());
    assert!(db.check_put(b"0007", 0).is_ok());
    assert!(matches!(db.check_put(b"1", 5), Err(Error::TooLarge(_))));
    for k in [&b"x"[..], b"max", b"next", b"0", b"99999999"] {
        assert!(
            matches!(db.check_put(k, 1), Err(Error::InvalidKey(_))),
            "{k:?}"
        );
        let op = BatchOp::Put {
            key: k.to_vec(),
            value: b"v".to_vec(),
            flags: 0,
            expires: 0,
        };
        assert!(db.write_batch(&[op]).is_err(), "{k:?}");
    }
    assert_eq!(db.count(), 0);
}

/// A database written by the build before the slot file (checked in: tests/fixtures,
/// `before-slots.kf`, made at 814a6f5 by `kura db create 'old.kf#width=32'`, `kura db import`
/// of ids 1 to 120 valued `value-ID`, `kura db out` of 5, 6, 7, `kura db put` of 200 and 3):
/// a read-only open reads it as it is, the first writable open converts it (its log into the
/// slot file, `index.kfi` removed), and a power loss at any point of the conversion leaves a
/// database that opens with every record.
#[test]
fn the_fixture_from_before_the_slot_file_opens_and_is_converted() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/before-slots.kf");
    let mut want: Vec<(String, Vec<u8>)> = (1..=120u64)
        .filter(|i| !(5..=7).contains(i))
        .map(|i| (i.to_string(), format!("value-{i}").into_bytes()))
        .collect();
    want[2].1 = b"rewritten".to_vec();
    want.push(("200".into(), b"after the import".to_vec()));
    let records = |db: &FixedDb| {
        let mut v = Vec::new();
        db.for_each_record(&mut |k, val, _| {
            v.push((String::from_utf8(k.to_vec()).unwrap(), val.to_vec()));
            Ok(true)
        })
        .unwrap();
        v
    };
    let fs = SimVfs::new();
    let dir = Path::new("/sim/old.kf");
    fs.create_dir_all(dir).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        let f = fs.open(&dir.join(e.file_name()), true).unwrap();
        f.write_at(&std::fs::read(e.path()).unwrap(), 0).unwrap();
        f.sync().unwrap();
    }
    fs.sync_dir(dir).unwrap();
    let open =
        |fs: &SimVfs, mode| FixedDb::open_mode(dir, &Params::default(), Arc::new(fs.clone()), mode);
    let image = |fs: &SimVfs| {
        let mut i = fs.image();
        i.retain(|p, _| !p.ends_with("LOCK"));
        i
    };
    let before = image(&fs);
    let db = open(&fs, OpenMode::ReadOnly).unwrap();
    assert_eq!(records(&db), want);
    assert_eq!((db.count(), db.bounds(), db.width()), (118, (1, 200), 32));
    db.close().unwrap();
    assert!(image(&fs) == before, "a read-only open changes nothing");
    // A power loss at every step of the conversion.
    let steps = {
        let fs = SimVfs::from_image(&before);
        let n = fs.op_count();
        open(&fs, OpenMode::Existing).unwrap().close().unwrap();
        fs.op_count() - n
    };
    for step in 0..steps {
        let fs = SimVfs::from_image(&before);
        fs.fail_after(step, crate::io::Fault::Eio);
        if let Ok(db) = open(&fs, OpenMode::Existing) {
            db.abandon();
        }
        let img = fs.crash_image(CrashMode::Torn { seed: step });
        let fs = SimVfs::from_image(&img);
        let db = open(&fs, OpenMode::Existing).unwrap_or_else(|e| panic!("step {step}: {e}"));
        assert_eq!(records(&db), want, "step {step}");
        assert_eq!(db.count(), 118, "step {step}");
    }
    let db = open(&fs, OpenMode::Existing).unwrap();
    assert!(fs.exists(&dir.join(super::slots::DATA_NAME)));
    assert!(!fs.exists(&dir.join(CKPT_NAME)), "converted");
    db.put(b"121", b"new").unwrap();
    db.close().unwrap();
    let db = open(&fs, OpenMode::Existing).unwrap();
    assert_eq!(records(&db).len(), 119);
    assert_eq!(db.get(b"3").unwrap().unwrap().value, b"rewritten");
    assert!(db.check().unwrap().healthy());
    assert!(
        !fs.list(dir).unwrap().iter().any(|n| n == "seg-00000001.kd"),
        "the old log is cut"
    );
}

/// A power loss at every step of a checkpoint that rewrites pages holding records (torn
/// writes included): every record written before it, acknowledged with `sync=always`, is
/// there after recovery, and the records it did not change are intact (the double-write
/// file mends a torn page).
#[test]
fn a_checkpoint_cut_short_at_any_step_loses_nothing() {
    let fs = SimVfs::new();
    let db = sim(&fs, "width=16#sync=always", OpenMode::Create).unwrap();
    for i in 1..=1000u64 {
        db.put(i.to_string().as_bytes(), format!("old {i}").as_bytes())
            .unwrap();
    }
    db.put_with(b"7", b"flagged", 9, 0).unwrap();
    db.close().unwrap();
    let db = sim(&fs, "sync=always", OpenMode::Existing).unwrap();
    for i in (3..=1200u64).step_by(7) {
        db.put(i.to_string().as_bytes(), format!("new {i}").as_bytes())
            .unwrap();
    }
    for i in (5..=1000u64).step_by(50) {
        db.out(i.to_string().as_bytes()).unwrap();
    }
    let want = |i: u64| -> Option<Vec<u8>> {
        if i % 50 == 5 && i <= 1000 {
            None
        } else if i % 7 == 3 {
            Some(format!("new {i}").into_bytes())
        } else if i <= 1000 {
            Some(if i == 7 {
                b"flagged".to_vec()
            } else {
                format!("old {i}").into_bytes()
            })
        } else {
            None
        }
    };
    db.abandon();
    let before = fs.image();
    let steps = {
        let fs = SimVfs::from_image(&before);
        let n = fs.op_count();
        sim(&fs, "", OpenMode::Existing).unwrap().close().unwrap();
        fs.op_count() - n
    };
    assert!(steps > 10, "{steps}");
    for step in 0..steps {
        let fs = SimVfs::from_image(&before);
        fs.fail_after(step, crate::io::Fault::Eio);
        if let Ok(db) = sim(&fs, "", OpenMode::Existing) {
            let _ = db.close();
        }
        let img = fs.crash_image(CrashMode::Torn { seed: step });
        let fs = SimVfs::from_image(&img);
        let db = sim(&fs, "", OpenMode::Existing).unwrap_or_else(|e| panic!("step {step}: {e}"));
        for i in 1..=1200u64 {
            assert_eq!(
                val(&db, i.to_string().as_bytes()),
                want(i),
                "step {step}, id {i}"
            );
        }
        let n = (1..=1200u64).filter(|&i| want(i).is_some()).count() as u64;
        assert_eq!(db.count(), n, "step {step}");
        assert_eq!(db.get(b"10").unwrap().unwrap().meta.flags, 0);
        if want(7).is_some_and(|v| v == b"flagged") {
            assert_eq!(db.get(b"7").unwrap().unwrap().meta.flags, 9, "step {step}");
        }
        assert!(db.check().unwrap().healthy(), "step {step}");
    }
}

/// A power loss at every step of the first checkpoint of a new database (every page it writes
/// held no record): the records acknowledged with `sync=always` are all there after recovery.
/// `dw.kfd` is made with the database, so this checkpoint does not sync the directory for it;
/// a torn page must still be found in it and emptied, for the log to write its records again.
#[test]
fn the_first_checkpoint_of_a_new_database_cut_short_at_any_step_loses_nothing() {
    let fs = SimVfs::new();
    let db = sim(&fs, "width=16#sync=always", OpenMode::Create).unwrap();
    assert!(fs.exists(&Path::new(SIM).join(super::slots::DW_NAME)));
    for i in (1..=3000u64).step_by(3) {
        db.put(i.to_string().as_bytes(), format!("v {i}").as_bytes())
            .unwrap();
    }
    db.abandon();
    let before = fs.image();
    let steps = {
        let fs = SimVfs::from_image(&before);
        let n = fs.op_count();
        sim(&fs, "", OpenMode::Existing).unwrap().close().unwrap();
        fs.op_count() - n
    };
    assert!(steps > 10, "{steps}");
    for step in 0..steps {
        let fs = SimVfs::from_image(&before);
        fs.fail_after(step, crate::io::Fault::Eio);
        if let Ok(db) = sim(&fs, "", OpenMode::Existing) {
            let _ = db.close();
        }
        let img = fs.crash_image(CrashMode::Torn { seed: step });
        let fs = SimVfs::from_image(&img);
        let db = sim(&fs, "", OpenMode::Existing).unwrap_or_else(|e| panic!("step {step}: {e}"));
        for i in 1..=3000u64 {
            let want = (i % 3 == 1).then(|| format!("v {i}").into_bytes());
            assert_eq!(
                val(&db, i.to_string().as_bytes()),
                want,
                "step {step}, id {i}"
            );
        }
        assert_eq!(db.count(), 1000, "step {step}");
        assert!(db.check().unwrap().healthy(), "step {step}");
        db.close().unwrap();
    }
}
