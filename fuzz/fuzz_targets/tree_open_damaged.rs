#![no_main]
//! A damaged B+ tree: a database whose log, node segments or checkpoint were overwritten,
//! zeroed or cut by the input opens read-only and is read, checked and repaired, and opens
//! for writing or is refused with an error — never a panic. The repaired copy passes `check`.
//! The database has keyspaces (a `tree.ki` of format 2 with its keyspace list, catalog records
//! in the log, records and batches across keyspaces before and after the checkpoint), and
//! every keyspace it lists is read.
use kura_engine::io::SimVfs;
use kura_engine::tree::DiskTree;
use kura_engine::{BatchOp, OpenMode, Params, Store};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

fn params() -> Params {
    Params::parse("sync=none#leafsiz=256#segsiz=64k").expect("params")
}

/// The files of the undamaged database, made once.
fn image() -> &'static BTreeMap<PathBuf, Vec<u8>> {
    static IMAGE: OnceLock<BTreeMap<PathBuf, Vec<u8>>> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let fs = SimVfs::new();
        let db = DiskTree::open_mode(
            Path::new("/f/db.kb"),
            &params(),
            Arc::new(fs.clone()),
            OpenMode::Create,
        )
        .expect("open");
        let idx = db.keyspace("idx", "cmp=dec").expect("idx");
        for i in 0..120u32 {
            db.put(
                format!("key{i:03}").as_bytes(),
                &i.to_le_bytes().repeat(i as usize % 7),
            )
            .expect("put");
            if i % 3 == 0 {
                let put = |k: String, v: &[u8]| BatchOp::Put {
                    key: k.into_bytes(),
                    value: v.to_vec(),
                    flags: 0,
                    expires: 0,
                };
                db.write_across(&[
                    ("idx", put(format!("{}", i * 11), b"key")),
                    ("", put(format!("key{i:03}"), b"again")),
                ])
                .expect("across");
            }
            if i == 50 {
                // A keyspace made after the first checkpoint: only the log names it.
                let late = db.keyspace("late", "").expect("late");
                late.put(b"l", b"v").expect("put late");
            }
            if i % 40 == 39 {
                db.checkpoint().expect("checkpoint");
            }
        }
        db.write_across(&[
            ("late", BatchOp::Remove { key: b"l".to_vec() }),
            (
                "idx",
                BatchOp::Remove {
                    key: b"33".to_vec(),
                },
            ),
        ])
        .expect("across");
        db.put_dup(b"key005", b"second", false).expect("putdup");
        db.out(b"key003").expect("out");
        idx.put(b"7", b"after").expect("put idx");
        drop(idx);
        db.close().expect("close");
        fs.image()
    })
}

/// Read everything: the database's records, and every keyspace it lists.
fn read_all(db: &DiskTree) {
    let _ = db.check();
    for i in 0..120u32 {
        let _ = db.get(format!("key{i:03}").as_bytes());
    }
    if let Ok(mut c) = db.cursor() {
        while let Ok(Some(_)) = c.next() {}
    }
    for (name, p) in db.keyspaces() {
        if let Ok(s) = db.keyspace(&name, &p) {
            let _ = s.count();
            let _ = s.get(b"7");
            if let Ok(mut c) = s.cursor() {
                while let Ok(Some(_)) = c.next() {}
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let fs = SimVfs::from_image(image());
    let dir = Path::new("/f/db.kb");
    let files = fs.paths();
    let mut rest = data;
    while rest.len() >= 4 {
        let target = &files[rest[0] as usize % files.len()];
        let kind = rest[1] % 3;
        let len = fs.open_len(target);
        let off = u16::from_le_bytes([rest[2], rest[3]]) as u64 % len.max(1);
        rest = &rest[4..];
        match kind {
            0 => {
                let n = (rest.len().min(32)).min((len - off.min(len)) as usize);
                fs.corrupt(target, off, &rest[..n]);
                rest = &rest[n..];
            }
            1 => {
                let n = (4096u64).min(len - off.min(len)) as usize;
                fs.corrupt(target, off, &vec![0u8; n]);
            }
            _ => {
                fs.cut(target, off);
            }
        }
    }
    let vfs = || -> Arc<dyn kura_engine::io::Vfs> { Arc::new(fs.clone()) };
    if let Ok(db) = DiskTree::open_mode(dir, &Params::default(), vfs(), OpenMode::ReadOnly) {
        read_all(&db);
        // Reading makes no keyspace.
        assert!(db.keyspace("never-made", "").is_err());
        let _ = db.close();
    }
    let fixed = Path::new("/f/fixed.kb");
    if DiskTree::repair_with(dir, fixed, &Params::default(), vfs()).is_ok() {
        let db = DiskTree::open_mode(fixed, &Params::default(), vfs(), OpenMode::ReadOnly)
            .expect("the repaired database opens");
        assert!(
            db.check().expect("check").healthy(),
            "the repaired database is damaged"
        );
        read_all(&db);
        let _ = db.close();
    }
    if let Ok(db) = DiskTree::open_mode(dir, &params(), vfs(), OpenMode::Create) {
        read_all(&db);
        let _ = db.close();
    }
});
