#![no_main]
//! The on-disk hash against a BTreeMap model, on the simulated file system, with restarts and
//! crashes: after a crash that drops unsynced writes, every key holds a value it had at or after
//! the last sync (background checkpoints and compaction may have made later writes durable).
use kura_engine::hash::DiskHash;
use kura_engine::io::{CrashMode, SimVfs};
use kura_engine::{BatchOp, Params, Store, TokyoOps};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

fn open(fs: &SimVfs) -> DiskHash {
    let p = Params::parse("sync=none#segsiz=64k#bufsiz=4k#lanes=3").expect("params");
    DiskHash::open_with(Path::new("/f/db.kh"), &p, Arc::new(fs.clone()), false).expect("open")
}

fn dump(db: &dyn Store) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    let mut c = db.cursor().expect("cursor");
    while let Some((k, r)) = c.next().expect("next") {
        m.insert(k, r.value);
    }
    m
}

fuzz_target!(|data: &[u8]| {
    let fs = SimVfs::new();
    let mut db = open(&fs);
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    // Per key: the values it may have after a crash (None = absent).
    let mut allowed: BTreeMap<Vec<u8>, Vec<Option<Vec<u8>>>> = BTreeMap::new();
    let note = |allowed: &mut BTreeMap<Vec<u8>, Vec<Option<Vec<u8>>>>,
                model: &BTreeMap<Vec<u8>, Vec<u8>>,
                key: &[u8]| {
        allowed
            .entry(key.to_vec())
            .or_default()
            .push(model.get(key).cloned());
    };
    for op in data.chunks(3) {
        let (code, k, n) = (
            op[0],
            *op.get(1).unwrap_or(&0) % 32,
            *op.get(2).unwrap_or(&0),
        );
        let key = format!("k{k}").into_bytes();
        let val = vec![n; (n as usize % 64) * 7];
        match code % 8 {
            0 | 1 => {
                note(&mut allowed, &model, &key);
                db.put(&key, &val).expect("put");
                model.insert(key.clone(), val);
                note(&mut allowed, &model, &key);
            }
            2 => {
                note(&mut allowed, &model, &key);
                assert_eq!(db.out(&key).expect("out"), model.remove(&key).is_some());
                note(&mut allowed, &model, &key);
            }
            3 => {
                note(&mut allowed, &model, &key);
                db.putcat(&key, &val).expect("putcat");
                model
                    .entry(key.clone())
                    .or_default()
                    .extend_from_slice(&val);
                note(&mut allowed, &model, &key);
            }
            4 => {
                let key2 = format!("k{}", (k + 1) % 32).into_bytes();
                let ops = vec![
                    BatchOp::Put {
                        key: key.clone(),
                        value: val.clone(),
                        flags: 0,
                        expires: 0,
                    },
                    BatchOp::Remove { key: key2.clone() },
                ];
                note(&mut allowed, &model, &key);
                note(&mut allowed, &model, &key2);
                db.write_batch(&ops).expect("batch");
                model.insert(key.clone(), val);
                model.remove(&key2);
                note(&mut allowed, &model, &key);
                note(&mut allowed, &model, &key2);
            }
            5 => {
                db.sync().expect("sync");
                allowed.clear();
            }
            6 => {
                db.close().expect("close");
                drop(db);
                db = open(&fs);
                allowed.clear();
            }
            _ => {
                // Crash: what was not synced may be lost.
                db.abandon();
                fs.crash(CrashMode::DropUnsynced);
                db = open(&fs);
                let got = dump(&db);
                for (k, hist) in &allowed {
                    assert!(
                        hist.contains(&got.get(k).cloned()),
                        "key {k:?} holds a value it never had"
                    );
                }
                for (k, v) in &got {
                    if !allowed.contains_key(k) {
                        assert_eq!(model.get(k), Some(v), "untouched key {k:?} changed");
                    }
                }
                for k in model.keys() {
                    if !allowed.contains_key(k) {
                        assert!(got.contains_key(k), "synced key {k:?} lost");
                    }
                }
                model = got;
                allowed.clear();
                assert!(db.check().expect("check").healthy());
            }
        }
        assert_eq!(
            db.get(b"k0").expect("get").map(|r| r.value),
            model.get(&b"k0"[..]).cloned()
        );
    }
    assert_eq!(dump(&db), model);
    assert!(db.check().expect("check").healthy());
});
