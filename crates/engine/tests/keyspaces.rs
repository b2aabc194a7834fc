//! Keyspaces and batches across them (`Store::keyspace`, `Store::write_across`): a keyspace is
//! apart from the database and from every other keyspace (records, counts, cursors, export,
//! vanish), keeps its own order, survives a reopen and a crash; a batch across keyspaces is
//! applied whole or not at all after a power loss at any write (a model test over three
//! keyspaces), damage inside one is refused, and a SIGKILL loses no acknowledged batch.
//! Databases written before records carried a keyspace (`tests/fixtures/before-v3.*`) open,
//! read and write unchanged. The conformance suite (conformance/) also runs on a keyspace
//! of each kind that has them. The tests named `kh_…` run the same on the on-disk hash, with
//! compaction, `optimize` and `repair` besides.

use kura_engine::hash::DiskHash;
mod common;

use kura_engine::io::{CrashMode, SimVfs};
use kura_engine::tree::DiskTree;
use kura_engine::{BatchOp, Error, OpenMode, Params, Store};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

fn put(key: &str, value: &str) -> BatchOp {
    BatchOp::Put {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        flags: 0,
        expires: 0,
    }
}

fn remove(key: &str) -> BatchOp {
    BatchOp::Remove {
        key: key.as_bytes().to_vec(),
    }
}

/// Every record of `s` through a cursor, in its order.
fn records(s: &dyn Store) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut c = s.cursor().unwrap();
    while let Some((k, r)) = c.next().unwrap() {
        out.push((
            String::from_utf8(k).unwrap(),
            String::from_utf8(r.value).unwrap(),
        ));
    }
    out
}

/// Every record of `s` as `for_each_record` (what `kura db export` uses) shows them.
fn exported(s: &dyn Store) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    s.for_each_record(&mut |k, v, _| {
        out.insert(
            String::from_utf8(k.to_vec()).unwrap(),
            String::from_utf8(v.to_vec()).unwrap(),
        );
        Ok(true)
    })
    .unwrap();
    out
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// On each kind with keyspaces, the database and two keyspaces hold the same keys with
/// different values: each shows only its own (get, count, cursor, export), a batch across
/// them changes each, a vanish empties one only, a keyspace's keyspace and an unknown
/// keyspace in a batch are refused.
#[test]
fn keyspaces_are_apart_from_each_other_and_from_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let kb = dir.path().join("apart.kb");
    let kh = dir.path().join("apart.kh");
    for (name, params) in [
        ("*", ""),
        ("+", ""),
        (kb.to_str().unwrap(), "cmp=lex"),
        (kh.to_str().unwrap(), ""),
    ] {
        let db = kura_engine::open_as(name, OpenMode::Create).unwrap().store;
        let a = db.keyspace("a", params).unwrap();
        let b = db.keyspace("b", params).unwrap();
        for k in ["k1", "k2", "k3"] {
            db.put(k.as_bytes(), b"db").unwrap();
            a.put(k.as_bytes(), b"a").unwrap();
        }
        b.put(b"k2", b"b").unwrap();
        db.write_across(&[
            ("", remove("k1")),
            ("a", put("k4", "a")),
            ("b", put("k1", "b")),
            ("b", put("k9", "b")),
            ("b", remove("k9")),
        ])
        .unwrap();
        assert_eq!(db.count(), 2, "{name}");
        assert_eq!(a.count(), 4, "{name}");
        assert_eq!(b.count(), 2, "{name}");
        let mut got = records(&*db);
        got.sort(); // a hash's cursor follows no key order
        assert_eq!(got, pairs(&[("k2", "db"), ("k3", "db")]), "{name}");
        let want_a: BTreeMap<String, String> = ["k1", "k2", "k3", "k4"]
            .iter()
            .map(|k| (k.to_string(), "a".to_string()))
            .collect();
        assert_eq!(exported(&*a), want_a, "{name}");
        assert_eq!(exported(&*b).len(), 2, "{name}");
        assert_eq!(b.get(b"k1").unwrap().unwrap().value, b"b", "{name}");
        // The same keyspace again is the same records.
        let a2 = db.keyspace("a", "").unwrap();
        assert_eq!(a2.count(), 4, "{name}");
        a.vanish().unwrap();
        assert_eq!((db.count(), a.count(), b.count()), (2, 0, 2), "{name}");
        assert!(matches!(
            db.write_across(&[("nope", put("k", "v"))]),
            Err(Error::NotFound(_))
        ));
        assert!(
            a.keyspace("x", params).is_err(),
            "{name}: a keyspace's keyspace"
        );
        assert!(db.keyspace("", params).is_err(), "{name}: the empty name");
        // A refused operation fails the whole batch.
        let big = vec![b'k'; kura_engine::store::MAX_KEY_LEN + 1];
        let r = db.write_across(&[
            ("b", put("k7", "b")),
            ("", BatchOp::Remove { key: big.clone() }),
        ]);
        assert!(r.is_err(), "{name}");
        assert!(
            b.get(b"k7").unwrap().is_none(),
            "{name}: half a refused batch"
        );
        db.close().unwrap();
    }
}

/// A `.kf` (an array) has no keyspaces: asking for one is a clear `Unsupported`, and so is a
/// batch naming one; a batch of the database's own records still works through
/// `write_across`.
#[test]
fn kinds_without_keyspaces_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.kf");
    let db = kura_engine::open_as(path.to_str().unwrap(), OpenMode::Create)
        .unwrap()
        .store;
    let e = db.keyspace("a", "").err().expect("refused");
    assert!(
        matches!(e, Error::Unsupported(_))
            && e.to_string().contains("keyspaces")
            && e.to_string().contains(".kf"),
        "{e}"
    );
    assert!(matches!(
        db.write_across(&[("a", put("1", "v"))]),
        Err(Error::Unsupported(_))
    ));
    db.write_across(&[("", put("1", "v")), ("", put("2", "w"))])
        .unwrap();
    assert_eq!(db.count(), 2);
    db.close().unwrap();
}

fn sim_open(fs: &SimVfs, params: &str, mode: OpenMode) -> kura_engine::Result<DiskTree> {
    DiskTree::open_mode(
        Path::new("/sim/t.kb"),
        &Params::parse(params).unwrap(),
        Arc::new(fs.clone()),
        mode,
    )
}

/// A keyspace keeps its order (`cmp=dec`: 9 before 10), its records and its name across a
/// clean close (from the checkpoint), a crash before any checkpoint (from the catalog record
/// in the write-ahead log) and a crash after one; asking for it with another order is refused.
#[test]
fn a_keyspace_and_its_order_survive_a_reopen_and_a_crash() {
    let fs = SimVfs::new();
    let numbers = ["100", "9", "10", "1", "20"];
    let dec = pairs(&[
        ("1", "n"),
        ("9", "n"),
        ("10", "n"),
        ("20", "n"),
        ("100", "n"),
    ]);
    let lex = pairs(&[
        ("1", "l"),
        ("10", "l"),
        ("100", "l"),
        ("20", "l"),
        ("9", "l"),
    ]);
    {
        let db = sim_open(&fs, "sync=always#leafsiz=256", OpenMode::Create).unwrap();
        let n = db.keyspace("n", "cmp=dec").unwrap();
        let l = db.keyspace("l", "").unwrap();
        for k in numbers {
            n.put(k.as_bytes(), b"n").unwrap();
            l.put(k.as_bytes(), b"l").unwrap();
        }
        assert_eq!(records(&*n), dec);
        assert_eq!(records(&*l), lex);
        drop((n, l));
        db.abandon();
    }
    fs.crash(CrashMode::Torn { seed: 1 });
    for round in 0..3 {
        let db = sim_open(&fs, "sync=always#leafsiz=256", OpenMode::Existing).unwrap();
        let n = db.keyspace("n", "").unwrap();
        assert_eq!(records(&*n), dec, "round {round}");
        assert_eq!(
            records(&*db.keyspace("l", "").unwrap()),
            lex,
            "round {round}"
        );
        assert_eq!(db.count(), 0, "round {round}");
        assert!(matches!(
            db.keyspace("n", "cmp=lex"),
            Err(Error::InvalidParam(_))
        ));
        assert!(db.check().unwrap().healthy(), "round {round}");
        let d = db.describe();
        assert!(
            d.iter().any(|(k, v)| k == "keyspaces" && v == "n,l"),
            "{d:?}"
        );
        match round {
            0 => db.close().unwrap(),
            _ => {
                db.checkpoint().unwrap();
                drop(n);
                db.abandon();
                fs.crash(CrashMode::DropUnsynced);
            }
        }
    }
}

/// `repair` copies every keyspace into the new database, each with its name and order (a
/// repaired database that dropped them would lose records without saying so).
#[test]
fn repair_keeps_every_keyspace() {
    let fs = SimVfs::new();
    {
        let db = sim_open(&fs, "", OpenMode::Create).unwrap();
        let n = db.keyspace("n", "cmp=dec").unwrap();
        for k in ["10", "9", "100"] {
            n.put(k.as_bytes(), b"n").unwrap();
        }
        n.put_dup(b"9", b"second", false).unwrap();
        db.put(b"r", b"root").unwrap();
        drop(n);
        db.close().unwrap();
    }
    let rep = DiskTree::repair_with(
        Path::new("/sim/t.kb"),
        Path::new("/sim/r.kb"),
        &Params::default(),
        Arc::new(fs.clone()),
    )
    .unwrap();
    assert_eq!(rep.kept, 5, "{rep:?}");
    let db = DiskTree::open_mode(
        Path::new("/sim/r.kb"),
        &Params::default(),
        Arc::new(fs.clone()),
        OpenMode::Existing,
    )
    .unwrap();
    assert_eq!(records(&db), pairs(&[("r", "root")]));
    let n = db.keyspace("n", "").unwrap();
    assert_eq!(
        records(&*n),
        pairs(&[("9", "n"), ("9", "second"), ("10", "n"), ("100", "n")])
    );
    assert!(matches!(
        db.keyspace("n", "cmp=lex"),
        Err(Error::InvalidParam(_))
    ));
}

/// Four threads writing batches across keyspaces (each thread its own keys, so the end state
/// is known), one making keyspaces and one checkpointing meanwhile, with a cache small enough
/// that leaves are evicted: no deadlock, every batch whole, the same after a reopen.
#[test]
fn concurrent_batches_across_keyspaces_with_checkpoints_and_evictions() {
    let fs = SimVfs::new();
    let db = Arc::new(sim_open(&fs, "leafsiz=256#cache=1m", OpenMode::Create).unwrap());
    for name in ["a", "b", "c"] {
        db.keyspace(name, "").unwrap();
    }
    const PER: usize = 400;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..4usize)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(t as u64 + 100);
                for i in 0..PER {
                    let value = format!("{t}-{i}-{}", "v".repeat(600));
                    let key = format!("t{t}-{:04}", rng.below(300));
                    let ops: Vec<(&str, BatchOp)> = ["", "a", "b", "c"]
                        .iter()
                        .filter(|_| rng.below(3) != 0)
                        .map(|s| (*s, put(&key, &value)))
                        .chain([("c", put(&format!("t{t}-last"), &value))])
                        .collect();
                    db.write_across(&ops).unwrap();
                }
            })
        })
        .collect();
    let side = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                db.checkpoint().unwrap();
                db.keyspace(&format!("made-{n}"), "cmp=dec").unwrap();
                n += 1;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            n
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let made = side.join().unwrap();
    let snapshot = |db: &DiskTree| -> Vec<Vec<(String, String)>> {
        let mut out = vec![records(db)];
        for name in ["a", "b", "c"] {
            out.push(records(&*db.keyspace(name, "").unwrap()));
        }
        out
    };
    let before = snapshot(&db);
    let c = &before[3];
    for t in 0..4 {
        let last = c.iter().find(|(k, _)| *k == format!("t{t}-last")).unwrap();
        assert!(last.1.starts_with(&format!("{t}-{}-", PER - 1)), "{last:?}");
    }
    assert!(db.check().unwrap().healthy());
    let evictions = db
        .counters()
        .iter()
        .find(|c| c.0 == "leaf_evictions")
        .map_or(0, |c| c.1);
    assert!(evictions > 0, "no leaf was evicted");
    Arc::into_inner(db).unwrap().close().unwrap();
    let db = sim_open(&fs, "", OpenMode::Existing).unwrap();
    assert!(snapshot(&db) == before, "the same after a reopen");
    for n in 0..made {
        assert_eq!(db.keyspace(&format!("made-{n}"), "").unwrap().count(), 0);
    }
    assert!(db.check().unwrap().healthy());
}

// ------------------------------------------------------------------------- the model test

/// The keyspaces of the model test: the database itself, one in byte order, one in decimal.
const SPACES: [(&str, &str); 3] = [("", ""), ("a", "cmp=lex"), ("n", "cmp=dec")];

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

type Batch = Vec<(usize, BatchOp)>;
/// Each keyspace's records.
type State = [BTreeMap<Vec<u8>, Vec<u8>>; 3];

/// Random batches of one to six puts and removes over the three keyspaces, keys 0 to 29
/// (decimal strings: byte order and decimal order differ on them).
fn batches(seed: u64, n: usize) -> Vec<Batch> {
    let mut rng = Rng(seed);
    (0..n)
        .map(|b| {
            let len = 1 + rng.below(6) as usize;
            (0..len)
                .map(|i| {
                    let space = rng.below(3) as usize;
                    let key = rng.below(30).to_string();
                    let op = if rng.below(4) == 0 {
                        remove(&key)
                    } else {
                        let pad = "x".repeat(rng.below(40) as usize);
                        put(&key, &format!("b{b}-{i}-{pad}"))
                    };
                    (space, op)
                })
                .collect()
        })
        .collect()
}

/// The state after each prefix of `batches` (0 to all of them).
fn prefixes(batches: &[Batch]) -> Vec<State> {
    let mut s: State = Default::default();
    let mut out = vec![s.clone()];
    for b in batches {
        for (space, op) in b {
            match op {
                BatchOp::Put { key, value, .. } => {
                    s[*space].insert(key.clone(), value.clone());
                }
                BatchOp::Remove { key } => {
                    s[*space].remove(key);
                }
            }
        }
        out.push(s.clone());
    }
    out
}

const MODEL_PARAMS: &str = "sync=always#segsiz=64k#bufsiz=4k#leafsiz=256";

/// Open, make the keyspaces, write the batches (a checkpoint before those in `ckpts`) until
/// one fails; how many were acknowledged. The database is then left as a killed process
/// leaves it.
fn write_batches(fs: &SimVfs, batches: &[Batch], ckpts: &[usize]) -> usize {
    let Ok(db) = sim_open(fs, MODEL_PARAMS, OpenMode::Create) else {
        return 0;
    };
    let mut acked = 0;
    let made: kura_engine::Result<Vec<_>> = SPACES[1..]
        .iter()
        .map(|(name, params)| db.keyspace(name, params))
        .collect();
    if made.is_ok() {
        for (i, b) in batches.iter().enumerate() {
            if ckpts.contains(&i) && db.checkpoint().is_err() {
                break;
            }
            let ops: Vec<(&str, BatchOp)> = b
                .iter()
                .map(|(space, op)| (SPACES[*space].0, op.clone()))
                .collect();
            if db.write_across(&ops).is_err() {
                break;
            }
            acked += 1;
        }
    }
    drop(made);
    db.abandon();
    acked
}

/// What the database at `fs` holds (`None`: no database), each keyspace's records checked to
/// come in its order; the database is checked healthy and closed.
fn read_state(fs: &SimVfs, what: &str) -> Option<State> {
    let db = common::reopened(sim_open(fs, "", OpenMode::Existing), what)?;
    let mut s: State = Default::default();
    for (i, (name, params)) in SPACES.iter().enumerate() {
        let handle;
        let h: &dyn Store = if name.is_empty() {
            &db
        } else {
            handle = db.keyspace(name, params).unwrap();
            &*handle
        };
        let mut c = h.cursor().unwrap();
        let mut prev: Option<Vec<u8>> = None;
        while let Some((k, r)) = c.next().unwrap() {
            if let Some(p) = &prev {
                let ordered = if *name == "n" {
                    let num = |b: &[u8]| std::str::from_utf8(b).unwrap().parse::<u64>().unwrap();
                    num(p) < num(&k)
                } else {
                    *p < k
                };
                assert!(ordered, "{what}: keyspace `{name}` out of order");
            }
            prev = Some(k.clone());
            s[i].insert(k, r.value);
        }
    }
    let rep = db.check().unwrap();
    assert!(rep.healthy(), "{what}: {rep:?}");
    db.close().unwrap();
    Some(s)
}

/// The model test the issue asks for: random batches over three keyspaces of a `.kb`
/// (`sync=always`, checkpoints among them), a power loss at every write (each write of the
/// simulated file system in turn fails, and what a crash then leaves is reopened: unsynced
/// writes dropped, torn at a random byte, or each kept or lost on its own). The state after
/// recovery equals the state after some prefix of the batches, never one that ends before the
/// last acknowledged batch: a batch across keyspaces is there whole or not at all.
#[test]
fn batches_across_keyspaces_survive_a_power_loss_at_every_write_whole_or_not_at_all() {
    const N: usize = 40;
    let ckpts = [13, 27];
    for seed in [1u64, 2] {
        let batches = batches(seed, N);
        common::power_loss_at_every_write(
            &format!("seed {seed}"),
            &prefixes(&batches),
            100,
            |fs| write_batches(fs, &batches, &ckpts),
            read_state,
        );
    }
}

/// Three batches across the database and keyspaces `a` and `n` (made with `n_params`); the
/// middle one's value in `a` is `DAMAGED-A`, for [`damage_the_middle_batch`].
fn write_three_batches(db: &dyn Store, n_params: &str) {
    let _a = db.keyspace("a", "").unwrap();
    let _n = db.keyspace("n", n_params).unwrap();
    db.write_across(&[("", put("r1", "before")), ("a", put("x", "before"))])
        .unwrap();
    db.write_across(&[
        ("", put("r2", "DAMAGED-ROOT")),
        ("a", put("y", "DAMAGED-A")),
        ("n", put("5", "DAMAGED-N")),
    ])
    .unwrap();
    db.write_across(&[("", put("r3", "after")), ("n", put("6", "after"))])
        .unwrap();
}

/// Flip a byte of the value `DAMAGED-A` in the log files directly in `dir`.
fn damage_the_middle_batch(fs: &SimVfs, dir: &str) {
    let image = fs.image();
    let (path, off) = image
        .iter()
        .filter(|(p, _)| p.parent() == Some(Path::new(dir)))
        .find_map(|(p, b)| {
            b.windows(9)
                .position(|w| w == b"DAMAGED-A")
                .map(|o| (p.clone(), o as u64))
        })
        .expect("the batch is in the log");
    assert!(fs.corrupt(&path, off + 2, b"X"));
}

/// A flipped byte inside a batch across three keyspaces, with records after it: a writable
/// open refuses the database (damage, not a torn tail), naming it; a read-only open serves
/// every record that verifies, with none of the damaged batch in any keyspace, and reports it.
#[test]
fn a_damaged_batch_across_keyspaces_is_refused_not_taken_for_a_tail() {
    let fs = SimVfs::new();
    {
        let db = sim_open(&fs, "sync=always", OpenMode::Create).unwrap();
        write_three_batches(&db, "cmp=dec");
        db.abandon();
    }
    damage_the_middle_batch(&fs, "/sim/t.kb");
    let e = sim_open(&fs, "", OpenMode::Existing)
        .err()
        .expect("a writable open refuses damage");
    assert!(matches!(e, Error::Corrupt(_)), "{e}");
    let db = sim_open(&fs, "", OpenMode::ReadOnly).unwrap();
    assert!(!db.damage_found().is_empty());
    let a = db.keyspace("a", "").unwrap();
    let n = db.keyspace("n", "").unwrap();
    assert_eq!(records(&db), pairs(&[("r1", "before"), ("r3", "after")]));
    assert_eq!(records(&*a), pairs(&[("x", "before")]));
    assert_eq!(records(&*n), pairs(&[("6", "after")]));
    assert!(!db.check().unwrap().healthy());
}

// ------------------------------------------------------------------- files of older builds

/// Copy a fixture to a temporary directory.
fn fixture(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join(name);
    let mut todo = vec![(src, dst.clone())];
    while let Some((from, to)) = todo.pop() {
        std::fs::create_dir_all(&to).unwrap();
        for e in std::fs::read_dir(&from).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                todo.push((e.path(), to.join(e.file_name())));
            } else {
                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            }
        }
    }
    (dir, dst)
}

/// `before-v3.kh` and `before-v3.kb` were written by the build before records carried a
/// keyspace (segment format 2, checkpoint format 1), by `kura db import --create NAME in.tsv`
/// of `key0001<TAB>value-1` to `key0300<TAB>value-300`, then `kura db out NAME key0007`, and on
/// the `.kb` `kura db put --dup NAME dupkey one` (`two`, `three`). Each opens unchanged, shows
/// every record, takes writes (on the `.kb` a keyspace and a batch across it too) and
/// reopens with all of them.
#[test]
fn databases_written_before_keyspaces_open_read_write_and_reopen() {
    for name in ["before-v3.kh", "before-v3.kb"] {
        let (_dir, path) = fixture(name);
        let path = path.to_str().unwrap().to_string();
        let kb = name.ends_with(".kb");
        let check_old = |db: &dyn Store| {
            for i in 1..=300 {
                let got = db.get(format!("key{i:04}").as_bytes()).unwrap();
                if i == 7 {
                    assert!(got.is_none(), "{name}: key0007 was removed");
                } else {
                    assert_eq!(
                        got.map(|r| r.value),
                        Some(format!("value-{i}").into_bytes()),
                        "{name}: key{i:04}"
                    );
                }
            }
            if kb {
                assert_eq!(
                    db.get_all(b"dupkey").unwrap(),
                    vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]
                );
            }
        };
        {
            let db = kura_engine::open_as(&path, OpenMode::Existing)
                .unwrap()
                .store;
            assert_eq!(db.count(), if kb { 302 } else { 299 }, "{name}");
            check_old(&*db);
            assert!(db.check().unwrap().healthy(), "{name}");
            db.put(b"new", b"after the upgrade").unwrap();
            db.out(b"key0008").unwrap();
            if kb {
                let ks = db.keyspace("idx", "cmp=dec").unwrap();
                db.write_across(&[
                    ("", put("key0009", "changed")),
                    ("idx", put("9", "key0009")),
                ])
                .unwrap();
                assert_eq!(ks.count(), 1);
            }
            db.close().unwrap();
        }
        // A tree's segments an older build wrote take no record of the newer format (which
        // a keyspace's records and images are): their bytes are as they were, but those a
        // checkpoint since removed. (A hash's records are the same in both.)
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        for sub in ["", "nodes"].into_iter().filter(|_| kb) {
            let Ok(files) = std::fs::read_dir(Path::new(&path).join(sub)) else {
                continue;
            };
            for f in files {
                let f = f.unwrap();
                let seg = f.file_name().into_string().unwrap();
                if !seg.starts_with("seg-") {
                    continue;
                }
                let bytes = std::fs::read(f.path()).unwrap();
                if u32::from_le_bytes(bytes[8..12].try_into().unwrap()) < 3 {
                    let old = std::fs::read(src.join(sub).join(&seg)).unwrap();
                    assert!(bytes == old, "{name}: {seg} of format 2 was written to");
                }
            }
        }
        let db = kura_engine::open_as(&path, OpenMode::Existing)
            .unwrap()
            .store;
        assert_eq!(db.get(b"new").unwrap().unwrap().value, b"after the upgrade");
        assert!(db.get(b"key0008").unwrap().is_none());
        assert_eq!(db.get(b"key0010").unwrap().unwrap().value, b"value-10");
        if kb {
            assert_eq!(db.get(b"key0009").unwrap().unwrap().value, b"changed");
            let ks = db.keyspace("idx", "").unwrap();
            assert_eq!(records(&*ks), pairs(&[("9", "key0009")]));
        }
        assert!(db.check().unwrap().healthy(), "{name}");
        db.close().unwrap();
    }
}

// ------------------------------------------------------------------------------- SIGKILL

const CHILD_ENV: &str = "KURA_KEYSPACES_KILL9_CHILD";

/// Not a test on its own: the writer `a_sigkill_loses_no_acknowledged_batch_and_splits_none`
/// starts (this binary again, with `KURA_KEYSPACES_KILL9_CHILD=PATH|START`) and kills. Batch
/// `i` puts one record in each of three keyspaces; `ack i` is printed once it returned.
#[test]
#[ignore]
fn kill9_child_batches() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (path, start) = spec.rsplit_once('|').expect("spec");
    let start: u64 = start.parse().expect("start");
    let (params, n_params) = if path.ends_with(".kh") {
        ("#sync=always", "")
    } else {
        ("#sync=always#leafsiz=512", "cmp=dec")
    };
    let db = kura_engine::open_as(&format!("{path}{params}"), OpenMode::Create)
        .expect("child open")
        .store;
    let _a = db.keyspace("a", "").expect("keyspace a");
    let _n = db.keyspace("n", n_params).expect("keyspace n");
    let mut out = std::io::stdout();
    for i in start.. {
        db.write_across(&kill9_batch(i)).expect("batch");
        use std::io::Write;
        writeln!(out, "ack {i}").expect("stdout");
        out.flush().expect("flush");
    }
}

fn kill9_batch(i: u64) -> Vec<(&'static str, BatchOp)> {
    vec![
        ("", put(&format!("r{i:08}"), &format!("root {i}"))),
        (
            "a",
            put(&format!("a{i:08}"), &"a".repeat((i % 50) as usize)),
        ),
        ("n", put(&i.to_string(), &format!("n {i}"))),
    ]
}

/// A process writing batches across three keyspaces of a `.kb` (`sync=always`) is killed with
/// SIGKILL, three times: after each kill every acknowledged batch is there, and every batch is
/// there whole or not at all (the three keyspaces hold the same batches).
#[test]
fn a_sigkill_loses_no_acknowledged_batch_and_splits_none() {
    sigkill_batches("kb");
}

/// `a_sigkill_loses_no_acknowledged_batch_and_splits_none` on a `.kh`.
#[test]
fn kh_a_sigkill_loses_no_acknowledged_batch_and_splits_none() {
    sigkill_batches("kh");
}

fn sigkill_batches(ext: &str) {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let name = format!("k.{ext}");
    let path = dir.path().join(&name);
    let path = path.to_str().unwrap();
    let mut start = 0u64;
    for round in 0..3u64 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "kill9_child_batches",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, format!("{path}|{start}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut last = None;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = line.strip_prefix("ack ") {
                    last = n.trim().parse::<u64>().ok();
                }
            }
            last
        });
        // Until some batches are acknowledged (a bounded wait), then a little more.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::time::Instant::now() < deadline && !reader.is_finished() {
            let n = std::fs::read_dir(dir.path().join(&name))
                .map(|d| d.count())
                .unwrap_or(0);
            if n > 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        std::thread::sleep(std::time::Duration::from_millis(300 + round * 150));
        child.kill().unwrap();
        child.wait().unwrap();
        let acked = reader.join().unwrap();
        let db = kura_engine::open_as(path, OpenMode::Existing)
            .unwrap()
            .store;
        assert!(db.check().unwrap().healthy(), "round {round}");
        let a = db.keyspace("a", "").unwrap();
        let n = db.keyspace("n", "").unwrap();
        let have = db.count();
        assert_eq!(
            (a.count(), n.count()),
            (have, have),
            "round {round}: a batch split"
        );
        if let Some(last) = acked {
            assert!(
                have > last,
                "round {round}: acked up to {last}, {have} batches there"
            );
        }
        for i in 0..have {
            for (space, op) in kill9_batch(i) {
                let BatchOp::Put { key, value, .. } = op else {
                    unreachable!()
                };
                let s: &dyn Store = match space {
                    "" => &*db,
                    "a" => &*a,
                    _ => &*n,
                };
                assert_eq!(
                    s.get(&key).unwrap().map(|r| r.value),
                    Some(value),
                    "round {round}: batch {i} in `{space}`"
                );
            }
        }
        db.close().unwrap();
        start = have;
    }
    assert!(start > 0, "no batch was written");
}

/// `before-v3-wal.kb` holds only a write-ahead log of the build before records carried a
/// keyspace (segment format 2, never checkpointed: the process was killed): made by that build's
/// `kura serve 'wal.kb#sync=always'`, memcached `set k01 … k40` (values `v1` … `v40`), `delete
/// k05`, Tyrant `misc putdup dk one`, `putdup dk two`, `putdupback dk zero`, then SIGKILL, the
/// segment cut to 700 bytes (its records and some of the zeros written ahead). Its records,
/// those of duplicates with bit 7 and a bare dup varint among them, replay as they were written.
#[test]
fn a_write_ahead_log_of_format_2_replays() {
    let (_dir, path) = fixture("before-v3-wal.kb");
    let path = path.to_str().unwrap().to_string();
    for round in 0..2 {
        let db = kura_engine::open_as(&path, OpenMode::Existing)
            .unwrap()
            .store;
        assert_eq!(db.count(), 42 + round, "round {round}");
        for i in 1..=40 {
            let got = db
                .get(format!("k{i:02}").as_bytes())
                .unwrap()
                .map(|r| r.value);
            let want = (i != 5).then(|| format!("v{i}").into_bytes());
            assert_eq!(got, want, "round {round}: k{i:02}");
        }
        assert_eq!(
            db.get_all(b"dk").unwrap(),
            vec![b"zero".to_vec(), b"one".to_vec(), b"two".to_vec()],
            "round {round}"
        );
        assert!(db.check().unwrap().healthy(), "round {round}");
        if round == 0 {
            let ks = db.keyspace("dup-index", "").unwrap();
            db.write_across(&[("", put("k41", "v41")), ("dup-index", put("dk", "3"))])
                .unwrap();
            assert_eq!(ks.count(), 1);
        }
        db.close().unwrap();
    }
}

// ----- the on-disk hash (`.kh`) -----

fn kh_open(fs: &SimVfs, params: &str, mode: OpenMode) -> kura_engine::Result<DiskHash> {
    DiskHash::open_mode(
        Path::new("/sim/h.kh"),
        &Params::parse(params).unwrap(),
        Arc::new(fs.clone()),
        mode,
    )
}

/// Each keyspace's records, sorted (a hash's cursor follows no key order).
fn kh_state(db: &dyn Store) -> [BTreeMap<String, String>; 3] {
    let mut s: [BTreeMap<String, String>; 3] = Default::default();
    for (i, name) in ["", "a", "b"].iter().enumerate() {
        let handle;
        let h: &dyn Store = if name.is_empty() {
            db
        } else {
            handle = db.keyspace(name, "").unwrap();
            &*handle
        };
        s[i] = exported(h);
        assert_eq!(h.count() as usize, s[i].len(), "keyspace `{name}`'s count");
    }
    s
}

/// A `.kh` with two keyspaces: each keeps its records across a crash before any checkpoint
/// (the catalog and the records replayed), a clean close (from an `index.ki` of version 3), a
/// crash after a checkpoint, compaction that moves every record (each keeps its keyspace),
/// `optimize` and `repair` (every keyspace copied under its name); `check` is healthy.
#[test]
fn kh_keyspaces_survive_crash_reopen_compaction_and_repair() {
    let fs = SimVfs::new();
    let params = "sync=always#segsiz=64k#bufsiz=4k#lanes=2#compact=0.2";
    let mut want: [BTreeMap<String, String>; 3] = Default::default();
    {
        let db = kh_open(&fs, params, OpenMode::Create).unwrap();
        let a = db.keyspace("a", "").unwrap();
        let b = db.keyspace("b", "").unwrap();
        for i in 0..50 {
            let k = format!("k{i}");
            db.put(k.as_bytes(), b"db").unwrap();
            a.put(k.as_bytes(), b"a").unwrap();
            want[0].insert(k.clone(), "db".into());
            want[1].insert(k.clone(), "a".into());
        }
        db.write_across(&[
            ("", remove("k1")),
            ("a", put("k1", "a2")),
            ("b", put("k1", "b")),
        ])
        .unwrap();
        want[0].remove("k1");
        want[1].insert("k1".into(), "a2".into());
        want[2].insert("k1".into(), "b".into());
        assert_eq!(kh_state(&db), want);
        drop((a, b));
        db.abandon();
    }
    fs.crash(CrashMode::DropUnsynced);
    for round in 0..2 {
        let db = kh_open(&fs, params, OpenMode::Existing).unwrap();
        assert_eq!(kh_state(&db), want, "round {round}");
        assert!(db.check().unwrap().healthy(), "round {round}");
        let d = db.describe();
        assert!(
            d.iter().any(|(k, v)| k == "keyspaces" && v == "a,b"),
            "{d:?}"
        );
        db.close().unwrap(); // round 0 writes a checkpoint with both keyspaces
    }
    // Overwrite every record many times: compaction copies the live ones, each naming its
    // keyspace, and drops the dead segments.
    {
        let db = kh_open(&fs, params, OpenMode::Existing).unwrap();
        let a = db.keyspace("a", "").unwrap();
        let b = db.keyspace("b", "").unwrap();
        let pad = "p".repeat(200);
        for round in 0..20 {
            for i in 0..50 {
                let k = format!("k{i}");
                let v = format!("{round}-{pad}");
                a.put(k.as_bytes(), v.as_bytes()).unwrap();
                want[1].insert(k.clone(), v);
            }
        }
        b.put(b"late", b"b").unwrap();
        want[2].insert("late".into(), "b".into());
        db.optimize("").unwrap();
        let c: std::collections::HashMap<_, _> = db.counters().into_iter().collect();
        assert!(c["compactions"] > 0 || c["relocated_bytes"] > 0, "{c:?}");
        assert_eq!(kh_state(&db), want, "after compaction");
        assert!(db.check().unwrap().healthy());
        drop((a, b));
        db.abandon();
    }
    fs.crash(CrashMode::DropUnsynced);
    let db = kh_open(&fs, params, OpenMode::Existing).unwrap();
    assert_eq!(kh_state(&db), want, "after compaction and a crash");
    db.close().unwrap();
    let rep = DiskHash::repair_with(
        Path::new("/sim/h.kh"),
        Path::new("/sim/r.kh"),
        &Params::default(),
        Arc::new(fs.clone()),
    )
    .unwrap();
    assert_eq!(
        rep.kept as usize,
        want.iter().map(|m| m.len()).sum::<usize>(),
        "{rep:?}"
    );
    let r = DiskHash::open_mode(
        Path::new("/sim/r.kh"),
        &Params::default(),
        Arc::new(fs.clone()),
        OpenMode::Existing,
    )
    .unwrap();
    assert_eq!(kh_state(&r), want, "repaired");
    // A keyspace's vanish empties it alone.
    r.keyspace("a", "").unwrap().vanish().unwrap();
    want[1].clear();
    assert_eq!(kh_state(&r), want, "after a keyspace's vanish");
    r.close().unwrap();
}

/// Open a `.kh`, make keyspaces `a` and `b`, write the batches until one fails; how many
/// were acknowledged. Left as a killed process leaves it.
fn kh_write_batches(fs: &SimVfs, batches: &[Batch]) -> usize {
    let Ok(db) = kh_open(
        fs,
        "sync=always#segsiz=64k#bufsiz=4k#lanes=2",
        OpenMode::Create,
    ) else {
        return 0;
    };
    let mut acked = 0;
    if db.keyspace("a", "").is_ok() && db.keyspace("b", "").is_ok() {
        for b in batches {
            let ops: Vec<(&str, BatchOp)> = b
                .iter()
                .map(|(space, op)| (["", "a", "b"][*space], op.clone()))
                .collect();
            if db.write_across(&ops).is_err() {
                break;
            }
            acked += 1;
        }
    }
    db.abandon();
    acked
}

/// The model test on a `.kh`: random batches over the database and two keyspaces, a power
/// loss at every write; the state after recovery is that after some prefix of the batches,
/// never one before the last acknowledged one.
#[test]
fn kh_batches_across_keyspaces_survive_a_power_loss_at_every_write_whole_or_not_at_all() {
    const N: usize = 30;
    let batches = batches(3, N);
    let states: Vec<[BTreeMap<String, String>; 3]> = prefixes(&batches)
        .into_iter()
        .map(|s| {
            s.map(|m| {
                m.into_iter()
                    .map(|(k, v)| (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap()))
                    .collect()
            })
        })
        .collect();
    assert_eq!(states.len(), N + 1);
    common::power_loss_at_every_write(
        "seed 3",
        &states,
        60,
        |fs| kh_write_batches(fs, &batches),
        |fs, what| {
            let db = common::reopened(kh_open(fs, "", OpenMode::Existing), what)?;
            let got = kh_state(&db);
            assert!(db.check().unwrap().healthy(), "{what}");
            db.close().unwrap();
            Some(got)
        },
    );
}

/// A flipped byte inside a batch across three keyspaces of a `.kh`, with records after it: a
/// writable open refuses the database (damage, not a torn tail); a read-only open reports it,
/// serves every record after it and none of the damaged record.
#[test]
fn kh_a_damaged_batch_across_keyspaces_is_refused_not_taken_for_a_tail() {
    let fs = SimVfs::new();
    {
        let db = kh_open(&fs, "sync=always#lanes=1", OpenMode::Create).unwrap();
        write_three_batches(&db, "");
        db.abandon();
    }
    damage_the_middle_batch(&fs, "/sim/h.kh");
    let e = kh_open(&fs, "", OpenMode::Existing)
        .err()
        .expect("a writable open refuses damage");
    assert!(matches!(e, Error::Corrupt(_)), "{e}");
    let db = kh_open(&fs, "", OpenMode::ReadOnly).unwrap();
    assert!(!db.damage_found().is_empty());
    let a = db.keyspace("a", "").unwrap();
    let n = db.keyspace("n", "").unwrap();
    assert!(a.get(b"y").unwrap().is_none(), "the damaged record");
    assert_eq!(a.get(b"x").unwrap().unwrap().value, b"before");
    assert_eq!(db.get(b"r3").unwrap().unwrap().value, b"after");
    assert_eq!(n.get(b"6").unwrap().unwrap().value, b"after");
    assert!(!db.check().unwrap().healthy());
}
