//! The update log and keyspaces: a keyspace's change is a record `In` it, a batch across
//! keyspaces one `Batch` record, and every reader of the log (a follower, redo, a restore)
//! applies them whole; a plain change of a `.kb` is one record.

use super::logged::Logged;
use super::record::{self, Op};
use super::*;
use crate::store::{BatchOp, Store};
use std::collections::BTreeMap;

fn cfg(dir: &Path, sid: u32) -> Config {
    let mut c = Config::new(dir.join("ulog"), sid);
    c.sync = SyncMode::None;
    c
}

type Digest = BTreeMap<Vec<u8>, (Vec<u8>, u32, u64)>;

fn digest(s: &dyn Store) -> Digest {
    let mut d = BTreeMap::new();
    s.for_each_record(&mut |k, v, m| {
        d.insert(k.to_vec(), (v.to_vec(), m.flags, m.expires));
        Ok(true)
    })
    .unwrap();
    d
}

/// The keys of a keyspace in its order.
fn keys(s: &dyn Store) -> Vec<Vec<u8>> {
    let mut c = s.cursor().unwrap();
    let mut out = Vec::new();
    if c.first().unwrap() {
        while let Some((k, _)) = c.next().unwrap() {
            out.push(k);
        }
    }
    out
}

/// Every record after `after`, in order.
fn records(log: &Arc<Ulog>, after: u64) -> Vec<Vec<u8>> {
    let Start::Reader(mut r) = log.reader(after).unwrap() else {
        panic!("behind")
    };
    let mut out = Vec::new();
    while let Some(b) = r.next(Duration::from_millis(50)).unwrap() {
        out.push(b.to_vec());
    }
    out
}

fn put(key: &[u8], value: &[u8]) -> BatchOp {
    BatchOp::Put {
        key: key.to_vec(),
        value: value.to_vec(),
        flags: 0,
        expires: 0,
    }
}

/// Writes of every kind in keyspace `idx` (ordered by `cmp=decimal` where the kind takes it)
/// and batches across it and the database's own keyspace.
fn keyspace_writes(db: &Logged, params: &str) {
    db.put(b"own", b"0").unwrap();
    let idx = db.keyspace("idx", params).unwrap();
    idx.put(b"10", b"ten").unwrap();
    idx.put(b"9", b"nine").unwrap();
    idx.put_with(b"2", b"two", 3, 0).unwrap();
    idx.out(b"9").unwrap();
    {
        let mut c = idx.cursor().unwrap();
        c.jump(b"2").unwrap();
        c.set_value(b"TWO", None).unwrap();
    }
    idx.write_batch(&[
        put(b"30", b"x"),
        BatchOp::Remove {
            key: b"10".to_vec(),
        },
    ])
    .unwrap();
    db.write_across(&[
        ("", put(b"row", b"r1")),
        ("idx", put(b"7", b"row")),
        (
            "idx",
            BatchOp::Remove {
                key: b"30".to_vec(),
            },
        ),
    ])
    .unwrap();
    db.write_across(&[("idx", put(b"100", b"big")), ("", put(b"row2", b"r2"))])
        .unwrap();
}

const KINDS: [&str; 2] = ["*", "x.kb"];

fn open_kind(dir: &Path, name: &str, file: &str) -> Arc<dyn Store> {
    if name.starts_with('x') {
        crate::open(&dir.join(file).display().to_string()).unwrap()
    } else {
        crate::open(name).unwrap()
    }
}

fn params_of(name: &str) -> &'static str {
    if name.ends_with(".kb") {
        "cmp=decimal"
    } else {
        ""
    }
}

#[test]
fn a_batch_across_keyspaces_is_one_record_of_its_keyspaces() {
    let dir = tempfile::tempdir().unwrap();
    let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
    let db = Logged::new(crate::open("*").unwrap(), log.clone()).unwrap();
    db.keyspace("idx", "").unwrap();
    let before = log.last_ts();
    db.write_across(&[("", put(b"a", b"1")), ("idx", put(b"b", b"2"))])
        .unwrap();
    let recs = records(&log, before);
    assert_eq!(recs.len(), 1);
    let record::Next::Record(rec, _) = record::decode(&recs[0]).unwrap() else {
        panic!()
    };
    let Op::Batch { count: 2, body } = rec.op else {
        panic!("{:?}", rec.op)
    };
    let ops: Vec<Op<'_>> = record::batch_ops(body).collect::<Result<_>>().unwrap();
    assert_eq!(ops[0].space().0, None);
    let (space, op) = ops[1].space();
    assert_eq!(space.unwrap().name, b"idx");
    assert_eq!(op.key(), Some(&b"b"[..]));
    // A keyspace not opened through the database is refused, and nothing is logged.
    let last = log.last_ts();
    assert!(db.write_across(&[("nope", put(b"c", b"3"))]).is_err());
    assert_eq!(log.last_ts(), last);
    // A keyspace's own handle takes no batch across keyspaces, nor a keyspace.
    let idx = db.keyspace("idx", "").unwrap();
    assert!(idx.write_across(&[("", put(b"c", b"3"))]).is_err());
    assert!(idx.keyspace("deeper", "").is_err());
}

/// A memory database's keyspaces name the parameters they were made with (`keyspaces`, what a
/// snapshot for a replica makes them with, `repl::feed`), so a replica's are alike: here a
/// `capnum` that keeps at most two records.
#[test]
fn a_memory_keyspace_names_its_parameters() {
    for name in ["*", "+"] {
        let dir = tempfile::tempdir().unwrap();
        let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
        let db = Logged::new(crate::open(name).unwrap(), log).unwrap();
        db.keyspace("idx", "capnum=2").unwrap();
        db.keyspace("idx", "").unwrap();
        let named = vec![("idx".to_string(), "capnum=2".to_string())];
        assert_eq!(db.keyspaces(), named, "{name}");
        let replica = crate::open(name).unwrap();
        for (ks, params) in db.keyspaces() {
            let theirs = replica.keyspace(&ks, &params).unwrap();
            for i in 0..5u8 {
                theirs.put(&[i], b"v").unwrap();
            }
            assert_eq!(theirs.count(), 2, "{name}");
        }
        db.close().unwrap();
    }
}

#[test]
fn followers_end_equal_with_keyspaces() {
    for name in KINDS {
        let dir = tempfile::tempdir().unwrap();
        let params = params_of(name);
        let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
        let db = Logged::new(open_kind(dir.path(), name, "m.kb"), log.clone()).unwrap();
        keyspace_writes(&db, params);
        // A follower applying records (as a restore does) and one relogging them (a Kura
        // replica, `apply_remote`), both starting without the keyspace.
        let plain = open_kind(dir.path(), name, "p.kb");
        for b in records(&log, 0) {
            let record::Next::Record(rec, _) = record::decode(&b).unwrap() else {
                panic!()
            };
            apply::apply(&*plain, &rec.op).unwrap();
        }
        let rdir = dir.path().join("r");
        let rlog = Ulog::open(cfg(&rdir, 2)).unwrap();
        let replica = Logged::new(open_kind(dir.path(), name, "r.kb"), rlog.clone()).unwrap();
        for b in records(&log, 0) {
            let record::Next::Record(rec, _) = record::decode(&b).unwrap() else {
                panic!()
            };
            assert!(replica.apply_remote(&rec).unwrap());
        }
        let idx = db.keyspace("idx", params).unwrap();
        for other in [&*plain, &*replica as &dyn Store] {
            assert_eq!(digest(&*db), digest(other), "{name}");
            let theirs = other.keyspace("idx", "").unwrap();
            assert_eq!(digest(&*idx), digest(&*theirs), "{name}");
            // The keyspace was made with the parameters it has on the master.
            assert_eq!(keys(&*idx), keys(&*theirs), "{name}");
        }
        if name.ends_with(".kb") {
            assert_eq!(
                keys(&*idx),
                [&b"2"[..], b"7", b"100"].map(<[u8]>::to_vec),
                "decimal order"
            );
        }
        // The replica's own log, read by a third server, ends equal too (chained replicas).
        let third = open_kind(dir.path(), name, "t.kb");
        for b in records(&rlog, 0) {
            let record::Next::Record(rec, _) = record::decode(&b).unwrap() else {
                panic!()
            };
            apply::apply(&*third, &rec.op).unwrap();
        }
        assert_eq!(
            digest(&*idx),
            digest(&*third.keyspace("idx", "").unwrap()),
            "{name} chained"
        );
        // Records that came back from the replica are loops: skipped.
        for b in records(&rlog, 0) {
            let record::Next::Record(rec, _) = record::decode(&b).unwrap() else {
                panic!()
            };
            assert!(!db.apply_remote(&rec).unwrap());
        }
        db.close().unwrap();
        replica.close().unwrap();
    }
}

#[test]
fn two_masters_order_writes_per_keyspace() {
    let dir = tempfile::tempdir().unwrap();
    let la = Ulog::open(cfg(&dir.path().join("a"), 1)).unwrap();
    let lb = Ulog::open(cfg(&dir.path().join("b"), 2)).unwrap();
    let a = Logged::new(crate::open("*").unwrap(), la.clone()).unwrap();
    let b = Logged::new(crate::open("*").unwrap(), lb.clone()).unwrap();
    a.set_lww(true);
    b.set_lww(true);
    // B's write of `k` in `idx` is newer than A's of `k` in its own keyspace: different keys.
    a.put(b"k", b"a-own").unwrap();
    b.keyspace("idx", "").unwrap().put(b"k", b"b-idx").unwrap();
    for (from, to) in [(&la, &b), (&lb, &a)] {
        for rec in records(from, 0) {
            let record::Next::Record(rec, _) = record::decode(&rec).unwrap() else {
                panic!()
            };
            to.apply_remote(&rec).unwrap();
        }
    }
    for db in [&a, &b] {
        assert_eq!(db.get(b"k").unwrap().unwrap().value, b"a-own");
        let idx = db.keyspace("idx", "").unwrap();
        assert_eq!(idx.get(b"k").unwrap().unwrap().value, b"b-idx");
    }
}

#[test]
fn a_batch_across_keyspaces_logged_but_not_applied_is_redone_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.kb").display().to_string();
    {
        let db = Logged::new(
            crate::open(&path).unwrap(),
            Ulog::open(cfg(dir.path(), 1)).unwrap(),
        )
        .unwrap();
        db.keyspace("idx", "cmp=decimal")
            .unwrap()
            .put(b"1", b"kept")
            .unwrap();
        db.close().unwrap();
    }
    {
        // As if the process died between logging the batch and applying it.
        let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
        let mut body = Vec::new();
        record::push_batch_op(
            &mut body,
            &Op::Put {
                key: b"row",
                value: b"r",
                flags: 0,
                expires: 0,
            },
        );
        for (key, value) in [(&b"20"[..], &b"new"[..]), (b"3", b"made")] {
            record::push_batch_op(
                &mut body,
                &Op::In {
                    name: b"idx",
                    params: b"cmp=decimal",
                    op: Box::new(Op::Put {
                        key,
                        value,
                        flags: 0,
                        expires: 0,
                    }),
                },
            );
        }
        record::push_batch_op(
            &mut body,
            &Op::In {
                name: b"other",
                params: b"",
                op: Box::new(Op::Remove { key: b"none" }),
            },
        );
        log.append(&Op::Batch {
            count: 4,
            body: &body,
        })
        .unwrap();
        log.close().unwrap();
    }
    let db = Logged::new(
        crate::open(&path).unwrap(),
        Ulog::open(cfg(dir.path(), 1)).unwrap(),
    )
    .unwrap();
    assert_eq!(db.redone, 1);
    assert_eq!(db.get(b"row").unwrap().unwrap().value, b"r");
    let idx = db.keyspace("idx", "").unwrap();
    assert_eq!(
        keys(&*idx),
        [&b"1"[..], b"3", b"20"].map(<[u8]>::to_vec),
        "in the keyspace's decimal order"
    );
    db.close().unwrap();
}

#[test]
fn a_restore_until_a_time_stamp_is_exact_with_keyspaces() {
    let dir = tempfile::tempdir().unwrap();
    let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
    let db = Logged::new(crate::open("*").unwrap(), log.clone()).unwrap();
    db.keyspace("idx", "").unwrap();
    let mut marks = Vec::new();
    for i in 0..20u32 {
        let k = i.to_be_bytes();
        db.write_across(&[
            ("", put(&k, b"row")),
            ("idx", put(&k, b"entry")),
            (
                "idx",
                BatchOp::Remove {
                    key: (i.wrapping_sub(3)).to_be_bytes().to_vec(),
                },
            ),
        ])
        .unwrap();
        let idx = db.keyspace("idx", "").unwrap();
        marks.push((log.last_ts(), digest(&*db), digest(&*idx)));
    }
    log.sync().unwrap();
    for (ts, own, idx) in marks.iter().step_by(3) {
        let target = crate::open("*").unwrap();
        let (n, last) = apply::replay(&*target, &log.config().dir, 0, *ts).unwrap();
        assert_eq!(last, *ts);
        assert!(n > 0);
        assert_eq!(digest(&*target), *own);
        assert_eq!(digest(&*target.keyspace("idx", "").unwrap()), *idx);
    }
}

/// `tests/fixtures/before-keyspaces.ulog` was written by `kura serve db.kb --sid 7 --ulog`
/// of the build before records named keyspaces (and a `.kb`'s change was two records): `set
/// a 1`, `set b 22` (flags 5), `set c 3`, `delete c`, `incr b 5`, `append a xx`.
#[test]
fn a_log_written_before_keyspaces_still_replays() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/before-keyspaces.ulog");
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("ulog");
    std::fs::create_dir(&copy).unwrap();
    for f in std::fs::read_dir(&fixture).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), copy.join(f.file_name())).unwrap();
    }
    let want: Digest = [
        (b"a".to_vec(), (b"1xx".to_vec(), 0, 0)),
        (b"b".to_vec(), (b"27".to_vec(), 5, 0)),
    ]
    .into_iter()
    .collect();
    // A restore.
    let target = crate::open(&dir.path().join("t.kb").display().to_string()).unwrap();
    let (n, _) = apply::replay(&*target, &copy, 0, u64::MAX).unwrap();
    assert_eq!(n, 12);
    assert_eq!(digest(&*target), want);
    // A replica relogging them, and the log opened for writing again (redo, then new
    // records after the old).
    let replica = Logged::new(
        crate::open("+").unwrap(),
        Ulog::open(cfg(&dir.path().join("r"), 2)).unwrap(),
    )
    .unwrap();
    read_dir(&copy, 0, u64::MAX, &mut |rec| {
        replica.apply_remote(rec).map(|_| ())
    })
    .unwrap();
    assert_eq!(digest(&*replica), want);
    let log = Ulog::open(Config {
        sync: SyncMode::None,
        ..Config::new(&copy, 7)
    })
    .unwrap();
    let db = Logged::new(crate::open("*").unwrap(), log.clone()).unwrap();
    db.keyspace("idx", "").unwrap().put(b"i", b"1").unwrap();
    let target = crate::open("*").unwrap();
    apply::replay(&*target, &copy, 0, u64::MAX).unwrap();
    assert_eq!(
        digest(&*target),
        BTreeMap::new(),
        "the memory database's vanish"
    );
    assert_eq!(
        target
            .keyspace("idx", "")
            .unwrap()
            .get(b"i")
            .unwrap()
            .unwrap()
            .value,
        b"1"
    );
}

#[test]
fn a_change_of_a_kb_is_one_record_and_duplicates_stay_exact() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.kb").display().to_string();
    let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
    let db = Logged::new(crate::open(&path).unwrap(), log.clone()).unwrap();
    let count = |from: u64| records(&log, from).len();
    let mut at = log.last_ts();
    for step in 0..6 {
        match step {
            0 => {
                db.put(b"a", b"1").unwrap();
            }
            1 => {
                db.put(b"a", b"2").unwrap();
            }
            2 => {
                crate::TokyoOps::putcat(&*db, b"a", b"x").unwrap();
            }
            3 => {
                let mut c = db.cursor().unwrap();
                c.jump(b"a").unwrap();
                c.set_value(b"3", None).unwrap();
            }
            4 => {
                db.out(b"a").unwrap();
            }
            _ => {
                db.put_dup(b"d", b"1", false).unwrap();
            }
        }
        assert_eq!(count(at), 1, "step {step}");
        at = log.last_ts();
    }
    // A key with several values: a change of one of them is followed by all of them.
    db.put_dup(b"d", b"2", false).unwrap();
    at = log.last_ts();
    db.put(b"d", b"9").unwrap();
    assert_eq!(count(at), 2);
    at = log.last_ts();
    db.remove_all(b"d").unwrap();
    assert_eq!(count(at), 1);
    db.put_dup(b"e", b"1", false).unwrap();
    db.put_dup(b"e", b"2", false).unwrap();
    db.put_dup(b"e", b"3", false).unwrap();
    db.out(b"e").unwrap();
    db.put(b"e", b"0").unwrap();
    let replica = crate::open(&dir.path().join("r.kb").display().to_string()).unwrap();
    for round in 0..2 {
        // Twice: replaying from the start again changes nothing.
        for b in records(&log, 0) {
            let record::Next::Record(rec, _) = record::decode(&b).unwrap() else {
                panic!()
            };
            apply::apply(&*replica, &rec.op).unwrap();
        }
        for k in [&b"a"[..], b"d", b"e"] {
            assert_eq!(
                db.get_all(k).unwrap(),
                replica.get_all(k).unwrap(),
                "round {round}"
            );
        }
    }
}
