#![no_main]
//! Damaged files of a fixed-length database (`.kf`): a database whose log segments, slot file
//! (`data.kfd`: header copies and pages), double-write file, side file or descriptor were
//! overwritten, zeroed or cut by the input opens read-only and is checked and
//! repaired, and opens for writing or is refused with an error — never a panic. The repaired
//! copy always passes `check`.
use kura_engine::fixed::FixedDb;
use kura_engine::io::SimVfs;
use kura_engine::{BatchOp, OpenMode, Params, Store};
use libfuzzer_sys::fuzz_target;
use std::path::Path;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let fs = SimVfs::new();
    let p = Params::parse("sync=none#segsiz=64k#width=64").expect("params");
    let dir = Path::new("/f/db.kf");
    let open = |mode| FixedDb::open_mode(dir, &p, Arc::new(fs.clone()), mode);
    {
        let db = open(OpenMode::Create).expect("open");
        for i in 1..=40u32 {
            db.put(
                i.to_string().as_bytes(),
                &i.to_le_bytes().repeat(i as usize % 9),
            )
            .expect("put");
        }
        db.close().expect("close");
    }
    {
        // A second open: records after the checkpoint the first one's close wrote.
        let db = open(OpenMode::Existing).expect("reopen");
        let ops: Vec<BatchOp> = (0..6u32)
            .map(|i| BatchOp::Put {
                key: (100 + i).to_string().into_bytes(),
                value: vec![i as u8; 3 * i as usize],
                flags: i,
                expires: 0,
            })
            .collect();
        db.write_batch(&ops).expect("batch");
        db.out(b"3").expect("out");
        db.put(b"next", b"last").expect("put next");
        db.close().expect("close");
    }
    // Damage: commands of (file, kind, offset, length/bytes) read from the input.
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
    if let Ok(db) = open(OpenMode::ReadOnly) {
        let _ = db.check();
        for i in 1..=110u32 {
            let _ = db.get(i.to_string().as_bytes());
        }
        let _ = db.fwmkeys(b"[min,max]", 1000);
        if let Ok(mut c) = db.cursor() {
            while let Ok(Some(_)) = c.next() {}
        }
        let _ = db.close();
    }
    let fixed = Path::new("/f/fixed.kf");
    if FixedDb::repair_with(dir, fixed, &Params::default(), Arc::new(fs.clone())).is_ok() {
        let db = FixedDb::open_mode(
            fixed,
            &Params::default(),
            Arc::new(fs.clone()),
            OpenMode::ReadOnly,
        )
        .expect("the repaired database opens");
        assert!(
            db.check().expect("check").healthy(),
            "the repaired database is damaged"
        );
    }
    if let Ok(db) = open(OpenMode::Existing) {
        let _ = db.check();
        for i in 1..=110u32 {
            let _ = db.get(i.to_string().as_bytes());
        }
        let _ = db.put(b"7", b"again");
        let _ = db.close();
    }
});
