//! A `.kh` with keyspaces (made through the embedded API; `kura db --keyspace` is tested in
//! cli_db_keyspace.rs) through the real binary: `kura db check`, `export`, `put`,
//! `optimize compress=zstd` and `repair` work on it and keep every keyspace; `export` and `check`'s count show the database
//! itself (keyspace 0), as `Store::count` does. A `.kh` written by the build before keyspaces
//! (`before-v3.kh`, format-2 segments) takes keyspaces and stays readable by the binary.

mod common;

use common::{kura_db as run, ok_stdout as ok};
use kura_engine::{OpenMode, Store};
use std::collections::BTreeMap;
use std::path::Path;

/// Every record of a store, as text.
fn all(s: &dyn Store) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut c = s.cursor().unwrap();
    while let Some((k, r)) = c.next().unwrap() {
        m.insert(
            String::from_utf8(k).unwrap(),
            String::from_utf8(r.value).unwrap(),
        );
    }
    m
}

/// The records of the database and of its keyspaces `a` and `b`.
fn state(path: &Path) -> [BTreeMap<String, String>; 3] {
    let db = kura_engine::open_as(path.to_str().unwrap(), OpenMode::Existing)
        .unwrap()
        .store;
    let a = db.keyspace("a", "").unwrap();
    let b = db.keyspace("b", "").unwrap();
    let s = [all(&*db), all(&*a), all(&*b)];
    drop((a, b));
    db.close().unwrap();
    s
}

#[test]
fn a_kh_with_keyspaces_through_kura_db() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let path = d.join("ks.kh");
    let mut want: [BTreeMap<String, String>; 3] = Default::default();
    {
        let db = kura_engine::open_as(path.to_str().unwrap(), OpenMode::Create)
            .unwrap()
            .store;
        let a = db.keyspace("a", "").unwrap();
        let b = db.keyspace("b", "").unwrap();
        for i in 0..200 {
            let k = format!("k{i:03}");
            db.put(k.as_bytes(), b"root").unwrap();
            a.put(k.as_bytes(), format!("a{i}").as_bytes()).unwrap();
            want[0].insert(k.clone(), "root".into());
            want[1].insert(k.clone(), format!("a{i}"));
        }
        b.put(b"only-b", b"b").unwrap();
        want[2].insert("only-b".into(), "b".into());
        drop((a, b));
        db.close().unwrap();
    }
    let check = ok(run(d, &["check", "ks.kh"]));
    assert!(check.contains("records: 200"), "{check}");
    let export = ok(run(d, &["export", "ks.kh"]));
    assert_eq!(export.lines().count(), 200, "keyspace 0 only");
    assert!(export.lines().all(|l| l.ends_with("\troot")), "{export}");
    ok(run(d, &["put", "ks.kh", "added", "by the binary"]));
    want[0].insert("added".into(), "by the binary".into());
    assert_eq!(state(&path), want);

    ok(run(d, &["optimize", "ks.kh", "compress=zstd"]));
    ok(run(d, &["check", "ks.kh"]));
    assert_eq!(state(&path), want, "after optimize");

    let out = ok(run(d, &["repair", "ks.kh", "fixed.kh"]));
    assert!(out.contains("kept: 402"), "{out}");
    ok(run(d, &["check", "fixed.kh"]));
    assert_eq!(state(&d.join("fixed.kh")), want, "repaired");
}

#[test]
fn a_kh_of_the_build_before_keyspaces_takes_keyspaces() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/tests/fixtures/before-v3.kh");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let path = d.join("old.kh");
    std::fs::create_dir(&path).unwrap();
    for e in std::fs::read_dir(&fixture).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), path.join(e.file_name())).unwrap();
    }
    {
        let db = kura_engine::open_as(path.to_str().unwrap(), OpenMode::Existing)
            .unwrap()
            .store;
        let a = db.keyspace("a", "").unwrap();
        a.put(b"key0001", b"in a").unwrap();
        db.write_across(&[
            (
                "",
                kura_engine::BatchOp::Remove {
                    key: b"key0002".to_vec(),
                },
            ),
            (
                "a",
                kura_engine::BatchOp::Put {
                    key: b"key0002".to_vec(),
                    value: b"moved".to_vec(),
                    flags: 0,
                    expires: 0,
                },
            ),
        ])
        .unwrap();
        drop(a);
        db.close().unwrap();
    }
    ok(run(d, &["check", "old.kh"]));
    let export = ok(run(d, &["export", "old.kh"]));
    assert_eq!(export.lines().count(), 298, "{export}");
    assert!(export.lines().any(|l| l == "key0001\tvalue-1"));
    assert_eq!(ok(run(d, &["get", "old.kh", "key0042"])), "value-42");
    let s = state(&path);
    assert_eq!(s[1].get("key0001").map(String::as_str), Some("in a"));
    assert_eq!(s[1].get("key0002").map(String::as_str), Some("moved"));
    assert!(!s[0].contains_key("key0002"));
}
