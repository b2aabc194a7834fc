#![no_main]
//! A damaged B+ tree: a database whose log, node segments or checkpoint were overwritten,
//! zeroed or cut by the input opens read-only and is read, checked and repaired, and opens
//! for writing or is refused with an error — never a panic. The repaired copy passes `check`.
use kura_engine::io::SimVfs;
use kura_engine::tree::DiskTree;
use kura_engine::{OpenMode, Params, Store};
use libfuzzer_sys::fuzz_target;
use std::path::Path;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let fs = SimVfs::new();
    let p = Params::parse("sync=none#leafsiz=256#segsiz=64k").expect("params");
    let dir = Path::new("/f/db.kb");
    {
        let db =
            DiskTree::open_mode(dir, &p, Arc::new(fs.clone()), OpenMode::Create).expect("open");
        for i in 0..120u32 {
            db.put(
                format!("key{i:03}").as_bytes(),
                &i.to_le_bytes().repeat(i as usize % 7),
            )
            .expect("put");
            if i % 40 == 39 {
                db.checkpoint().expect("checkpoint");
            }
        }
        db.put_dup(b"key005", b"second", false).expect("putdup");
        db.out(b"key003").expect("out");
        db.close().expect("close");
    }
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
        let _ = db.check();
        for i in 0..120u32 {
            let _ = db.get(format!("key{i:03}").as_bytes());
        }
        if let Ok(mut c) = db.cursor() {
            while let Ok(Some(_)) = c.next() {}
        }
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
        let _ = db.close();
    }
    if let Ok(db) = DiskTree::open_mode(dir, &p, vfs(), OpenMode::Create) {
        let _ = db.check();
        for i in 0..120u32 {
            let _ = db.get(format!("key{i:03}").as_bytes());
        }
        let _ = db.close();
    }
});
