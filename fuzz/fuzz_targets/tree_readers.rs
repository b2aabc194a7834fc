#![no_main]
//! The B+ tree's file readers on arbitrary bytes: a leaf image and a checkpoint (`tree.ki`)
//! decode or are refused, never panic, and whatever decodes round-trips. The checkpoint
//! reader is also given the input sealed with a correct checksum (so its body parser runs),
//! and a real format-2 `tree.ki` — a tree with keyspaces of several orders — patched by the
//! input and resealed (so the keyspace list is reached).
use kura_engine::io::SimVfs;
use kura_engine::tree::{fuzzing, DiskTree};
use kura_engine::{BatchOp, OpenMode, Params, Store};
use libfuzzer_sys::fuzz_target;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// The `tree.ki` of a tree with three keyspaces besides its own, records in each.
fn real_checkpoint() -> &'static [u8] {
    static CKPT: OnceLock<Vec<u8>> = OnceLock::new();
    CKPT.get_or_init(|| {
        let fs = SimVfs::new();
        let p = Params::parse("sync=none#leafsiz=256#segsiz=64k").expect("params");
        let dir = Path::new("/f/db.kb");
        let db =
            DiskTree::open_mode(dir, &p, Arc::new(fs.clone()), OpenMode::Create).expect("open");
        let a = db.keyspace("a", "").expect("a");
        let b = db.keyspace("by-num", "cmp=int64").expect("b");
        let c = db.keyspace("c", "cmp=dec").expect("c");
        for i in 0..60u64 {
            db.put(format!("k{i:02}").as_bytes(), b"own").expect("put");
            a.put(format!("a{i:02}").as_bytes(), &[i as u8; 9])
                .expect("put a");
            b.put(&i.to_be_bytes(), b"n").expect("put b");
            db.write_across(&[
                (
                    "c",
                    BatchOp::Put {
                        key: format!("{}", i * 7).into_bytes(),
                        value: b"c".to_vec(),
                        flags: 0,
                        expires: 0,
                    },
                ),
                (
                    "a",
                    BatchOp::Remove {
                        key: format!("a{:02}", i / 2).into_bytes(),
                    },
                ),
            ])
            .expect("across");
        }
        db.checkpoint().expect("checkpoint");
        drop((a, b, c));
        db.close().expect("close");
        let img = fs.image();
        img.get(Path::new("/f/db.kb/tree.ki"))
            .expect("tree.ki is written")
            .clone()
    })
}

fn sealed(body: &[u8]) -> Vec<u8> {
    let mut v = body.to_vec();
    v.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
    v
}

fuzz_target!(|data: &[u8]| {
    fuzzing::image(data);
    fuzzing::checkpoint(data);
    fuzzing::checkpoint(&sealed(data));
    // The real checkpoint with the input's patches: [offset u16][len u8][bytes], then resealed.
    let real = real_checkpoint();
    let mut body = real[..real.len() - 4].to_vec();
    let mut rest = data;
    while rest.len() >= 3 && !body.is_empty() {
        let off = u16::from_le_bytes([rest[0], rest[1]]) as usize % body.len();
        let n = (rest[2] as usize % 8).min(rest.len() - 3);
        match rest[2] >> 6 {
            0 | 1 => {
                let end = (off + n).min(body.len());
                body[off..end].copy_from_slice(&rest[3..3 + (end - off)]);
            }
            2 => body.truncate(off),
            _ => {
                body.splice(off..off, rest[3..3 + n].iter().copied());
            }
        }
        rest = &rest[3 + n..];
    }
    fuzzing::checkpoint(&sealed(&body));
});
