#![no_main]
//! Keyspaces and batches across them against a model (per keyspace a BTreeMap), on the on-disk
//! B+ tree and the on-disk hash (simulated file system, restarts and crashes) and on a memory
//! kind. Puts and removes
//! go through a keyspace's handle or through `write_across` on the database, several keyspaces
//! at once. After a crash that drops unsynced writes the database equals the model at some
//! point since the last sync: a prefix of the acknowledged operations, every batch across
//! keyspaces wholly in or wholly out.
use kura_engine::hash::DiskHash;
use kura_engine::io::{CrashMode, SimVfs};
use kura_engine::tree::DiskTree;
use kura_engine::{BatchOp, OpenMode, Params, Store};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// The keyspaces: "" is the database itself.
const SPACES: [&str; 4] = ["", "a", "b", "c"];
type State = Vec<BTreeMap<Vec<u8>, Vec<u8>>>;
/// The database and its keyspace handles.
type Open = (Arc<dyn Store>, Vec<Arc<dyn Store>>);
/// Reopens the database given its handles (after a crash when the flag says so).
type Restart<'a> = dyn FnMut(Arc<dyn Store>, Vec<Arc<dyn Store>>, bool) -> Open + 'a;

fn open_tree(fs: &SimVfs) -> DiskTree {
    let p = Params::parse("sync=none#leafsiz=256#segsiz=64k").expect("params");
    DiskTree::open_mode(
        Path::new("/f/db.kb"),
        &p,
        Arc::new(fs.clone()),
        OpenMode::Create,
    )
    .expect("open")
}

fn open_hash(fs: &SimVfs) -> DiskHash {
    let p = Params::parse("sync=none#segsiz=64k#bufsiz=4k#lanes=3").expect("params");
    DiskHash::open_with(Path::new("/f/db.kh"), &p, Arc::new(fs.clone()), false).expect("open")
}

/// Handles on the keyspaces "a", "b", "c" (made on the first open; orders differ).
fn handles(db: &dyn Store, tree: bool) -> Vec<Arc<dyn Store>> {
    let params: [&str; 3] = if tree {
        ["", "cmp=lexdesc", "cmp=lex"]
    } else {
        ["", "", ""]
    };
    SPACES[1..]
        .iter()
        .zip(params)
        .map(|(n, p)| db.keyspace(n, p).expect("keyspace"))
        .collect()
}

fn dump_one(s: &dyn Store) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    let mut c = s.cursor().expect("cursor");
    while let Some((k, r)) = c.next().expect("next") {
        assert!(m.insert(k, r.value).is_none(), "a key listed twice");
    }
    assert_eq!(s.count(), m.len() as u64, "count disagrees with the cursor");
    m
}

fn dump(db: &dyn Store, hs: &[Arc<dyn Store>]) -> State {
    let mut v = vec![dump_one(db)];
    v.extend(hs.iter().map(|h| dump_one(&**h)));
    v
}

/// The store of keyspace `s` (0: the database itself).
fn handle(db: &Arc<dyn Store>, hs: &[Arc<dyn Store>], s: usize) -> Arc<dyn Store> {
    if s == 0 {
        db.clone()
    } else {
        hs[s - 1].clone()
    }
}

/// Run the operations on `db` (with its keyspace handles `hs`), checking against the model.
/// `restart(crash)` reopens (after a crash when `crash`); `None` for a memory kind.
fn run(
    data: &[u8],
    mut db: Arc<dyn Store>,
    mut hs: Vec<Arc<dyn Store>>,
    mut restart: Option<&mut Restart<'_>>,
) {
    let mut model: State = vec![BTreeMap::new(); SPACES.len()];
    // The states since the last sync (a crash may leave any of them).
    let mut since_sync: Vec<State> = vec![model.clone()];
    for op in data.chunks(3) {
        let (code, k, n) = (op[0], *op.get(1).unwrap_or(&0), *op.get(2).unwrap_or(&0));
        let space = (k >> 4) as usize % SPACES.len();
        let key = format!("k{}", k % 16).into_bytes();
        let val = vec![n; (n as usize % 40) * 3];
        match code % 8 {
            0 | 1 => {
                handle(&db, &hs, space).put(&key, &val).expect("put");
                model[space].insert(key, val);
            }
            2 => {
                let had = model[space].remove(&key).is_some();
                assert_eq!(handle(&db, &hs, space).out(&key).expect("out"), had);
            }
            3 | 4 => {
                let mut ops = Vec::new();
                for i in 0..(n as usize % 5 + 1) {
                    let s = (space + i * (1 + (k as usize & 1))) % SPACES.len();
                    let key =
                        format!("k{}", (n as usize * 7 + i * 13 + k as usize) % 16).into_bytes();
                    if (n >> (i % 8)) & 1 == 0 {
                        let value = vec![n ^ i as u8; i * 5];
                        model[s].insert(key.clone(), value.clone());
                        ops.push((
                            SPACES[s],
                            BatchOp::Put {
                                key,
                                value,
                                flags: 0,
                                expires: 0,
                            },
                        ));
                    } else {
                        model[s].remove(&key);
                        ops.push((SPACES[s], BatchOp::Remove { key }));
                    }
                }
                db.write_across(&ops).expect("write_across");
            }
            5 => {
                db.sync().expect("sync");
                since_sync.clear();
            }
            _ => {
                if let Some(r) = restart.as_mut() {
                    let crash = code % 8 == 7;
                    (db, hs) = r(db, hs, crash);
                    let got = dump(&*db, &hs);
                    if crash {
                        since_sync.push(model.clone());
                        assert!(
                            since_sync.contains(&got),
                            "after a crash the keyspaces hold no prefix of the acknowledged \
                             operations: {got:?}"
                        );
                        model = got;
                    } else {
                        assert_eq!(got, model, "a clean restart lost or changed records");
                    }
                    since_sync.clear();
                    assert!(db.check().expect("check").healthy());
                }
            }
        }
        since_sync.push(model.clone());
        assert_eq!(
            handle(&db, &hs, space)
                .get(b"k0")
                .expect("get")
                .map(|r| r.value),
            model[space].get(&b"k0"[..]).cloned()
        );
    }
    assert_eq!(dump(&*db, &hs), model);
    let mut names: Vec<String> = db.keyspaces().into_iter().map(|(n, _)| n).collect();
    names.sort();
    assert_eq!(names, ["a", "b", "c"]);
    assert!(db.check().expect("check").healthy());
}

/// Run the operations on an on-disk kind: `open` opens (or makes) it on `fs`, `abandon` stops
/// it as a killed process would; `tree`: its keyspaces take orders.
fn on_disk<D: Store + 'static>(
    data: &[u8],
    fs: &SimVfs,
    open: impl Fn(&SimVfs) -> D,
    abandon: impl Fn(D),
    tree: bool,
) {
    let mut disk = Some(Arc::new(open(fs)));
    let db: Arc<dyn Store> = disk.clone().expect("database");
    let hs = handles(&*db, tree);
    db.sync().expect("sync");
    let mut restart = |db: Arc<dyn Store>, hs: Vec<Arc<dyn Store>>, crash: bool| {
        drop(hs);
        drop(db);
        let old = Arc::try_unwrap(disk.take().expect("database"))
            .ok()
            .expect("the only handle on the database");
        if crash {
            abandon(old);
            fs.crash(CrashMode::DropUnsynced);
        } else {
            old.close().expect("close");
        }
        let d = Arc::new(open(fs));
        disk = Some(d.clone());
        let db: Arc<dyn Store> = d;
        let hs = handles(&*db, tree);
        (db, hs)
    };
    run(data, db, hs, Some(&mut restart));
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, data)) = data.split_first() else {
        return;
    };
    let fs = SimVfs::new();
    match kind % 4 {
        0 => on_disk(data, &fs, open_tree, DiskTree::abandon, true),
        1 => on_disk(data, &fs, open_hash, DiskHash::abandon, false),
        k => {
            let name = if k == 2 { "+" } else { "*" };
            let db = kura_engine::open(name).expect("open memory");
            let hs = handles(&*db, false);
            run(data, db, hs, None);
        }
    }
});
