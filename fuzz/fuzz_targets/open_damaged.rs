#![no_main]
//! Damaged files: a database whose segment or checkpoint bytes were overwritten by the input
//! opens (or is refused with an error), and every read and `check` return without panicking.
use kura_engine::hash::DiskHash;
use kura_engine::io::SimVfs;
use kura_engine::{Params, Store};
use libfuzzer_sys::fuzz_target;
use std::path::Path;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let fs = SimVfs::new();
    let p = Params::parse("sync=none#lanes=2").expect("params");
    let dir = Path::new("/f/db.kh");
    {
        let db = DiskHash::open_with(dir, &p, Arc::new(fs.clone()), false).expect("open");
        for i in 0..40u32 {
            db.put(
                format!("key{i}").as_bytes(),
                &i.to_le_bytes().repeat(i as usize % 9),
            )
            .expect("put");
        }
        db.out(b"key3").expect("out");
        db.close().expect("close");
    }
    let files = fs.paths();
    let target = &files[data[0] as usize % files.len()];
    let off = u16::from_le_bytes([data[1], data[2]]) as u64;
    let len = fs.open_len(target);
    if len > 0 {
        let off = off % len;
        let n = (data.len() - 3).min((len - off) as usize);
        fs.corrupt(target, off, &data[3..3 + n]);
    }
    for readonly in [true, false] {
        if let Ok(db) = DiskHash::open_with(dir, &p, Arc::new(fs.clone()), readonly) {
            let _ = db.check();
            for i in 0..40u32 {
                let _ = db.get(format!("key{i}").as_bytes());
            }
            if let Ok(mut c) = db.cursor() {
                while let Ok(Some(_)) = c.next() {}
            }
            let _ = db.close();
        }
    }
});
