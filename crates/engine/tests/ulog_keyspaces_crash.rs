//! Power loss under a `.kb` with an update log as the commit point (`Logged`, the log's files
//! and the tree's on one `SimVfs`), with batches across three keyspaces: each batch writes (or
//! removes) one slot in all three at once. Crash images are taken while one writer runs; each
//! is opened again (the tree's recovery, then `Logged`'s redo from the update log), and then:
//! - every slot holds the same write in all three keyspaces (a batch is applied whole or not
//!   at all, by the tree and by the redo alike);
//! - every batch acknowledged before the image is there (or a later write of its slot);
//! - the log's records are the first batches, in order, each one record;
//! - a point-in-time restore up to a record holds exactly the batches up to it.

use kura_engine::io::{CrashMode, SimVfs, Vfs};
use kura_engine::store::{BatchOp, Store};
use kura_engine::tree::DiskTree;
use kura_engine::ulog::logged::Logged;
use kura_engine::ulog::record::{batch_ops, Op};
use kura_engine::ulog::{self, Ulog};
use kura_engine::{OpenMode, Params, SyncMode};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const LOG: &str = "/sim/ulog";
const SLOTS: u64 = 30;
/// The keyspaces every batch writes: the database's own and two more.
const SPACES: [&str; 3] = ["", "idx", "meta"];

fn open(fs: &SimVfs) -> Arc<Logged> {
    let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
    let db = DiskTree::open_mode(
        Path::new("/sim/d.kb"),
        &Params::parse("sync=none#segsiz=64k#bufsiz=4k").unwrap(),
        vfs.clone(),
        OpenMode::Create,
    )
    .unwrap();
    let mut cfg = ulog::Config::new(LOG, 7);
    cfg.sync = SyncMode::Always;
    cfg.file_size = 48 << 10;
    cfg.limit = 0;
    cfg.vfs = vfs;
    let log = Ulog::open(cfg).unwrap_or_else(|e| panic!("the update log does not open: {e}"));
    let db = Logged::new(Arc::new(db), log).unwrap();
    db.keyspace("idx", "cmp=decimal").unwrap();
    db.keyspace("meta", "").unwrap();
    db
}

/// Batch `n` (from 1): its slot and whether it removes the slot.
fn batch(n: u64) -> (u64, bool) {
    ((n * 7) % SLOTS, n % 6 == 5)
}

fn slot_key(space: &str, s: u64) -> Vec<u8> {
    match space {
        "" => format!("row{s:02}"),
        "idx" => s.to_string(),
        _ => format!("m{s}"),
    }
    .into_bytes()
}

fn value(n: u64) -> Vec<u8> {
    let mut v = format!("{n:08}-").into_bytes();
    v.resize(30 + (n % 5) as usize * 41, b'z');
    v
}

fn number(v: &[u8]) -> u64 {
    std::str::from_utf8(&v[..8]).unwrap().parse().unwrap()
}

fn ops_of(n: u64) -> Vec<(&'static str, BatchOp)> {
    let (s, remove) = batch(n);
    SPACES
        .iter()
        .map(|&sp| {
            let key = slot_key(sp, s);
            let op = if remove {
                BatchOp::Remove { key }
            } else {
                BatchOp::Put {
                    key,
                    value: value(n),
                    flags: 0,
                    expires: 0,
                }
            };
            (sp, op)
        })
        .collect()
}

/// What each slot holds in each keyspace: slot → [number or None; 3].
type State = BTreeMap<u64, [Option<u64>; 3]>;

fn state(db: &dyn Store) -> State {
    let mut out = State::new();
    for (i, sp) in SPACES.iter().enumerate() {
        let store = if sp.is_empty() {
            None
        } else {
            Some(db.keyspace(sp, "").unwrap())
        };
        let store: &dyn Store = store.as_deref().unwrap_or(db);
        for s in 0..SLOTS {
            let got = store
                .get(&slot_key(sp, s))
                .unwrap()
                .map(|r| number(&r.value));
            out.entry(s).or_insert([None; 3])[i] = got;
        }
    }
    out
}

/// The state after the first `n` batches.
fn model(n: u64) -> State {
    let mut out: State = (0..SLOTS).map(|s| (s, [None; 3])).collect();
    for b in 1..=n {
        let (s, remove) = batch(b);
        out.insert(s, [if remove { None } else { Some(b) }; 3]);
    }
    out
}

/// The log's records as batch numbers, in order (each checked to be a whole batch of its
/// three keyspaces), up to `until`.
fn logged_batches(fs: &SimVfs, until: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    ulog::read_dir_in(fs, Path::new(LOG), 0, until, &mut |r| {
        let Op::Batch { count: 3, body } = &r.op else {
            panic!("unexpected record {:?}", r.op)
        };
        let mut names = Vec::new();
        let mut n = None;
        for op in batch_ops(body) {
            let op = op?;
            let (space, inner) = op.space();
            names.push(space.map(|s| s.name.to_vec()).unwrap_or_default());
            if let Op::Put { value, .. } = inner {
                n = Some(number(value));
            }
        }
        assert_eq!(names, [&b""[..], b"idx", b"meta"].map(<[u8]>::to_vec));
        out.push((r.ts, n.unwrap_or(0)));
        Ok(())
    })
    .unwrap();
    out
}

#[test]
fn batches_across_keyspaces_survive_power_loss_with_redo() {
    let fs = SimVfs::new();
    fs.set_sync_delay(Duration::from_micros(300));
    let db = open(&fs);
    let acked = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (db, acked, stop) = (db.clone(), acked.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                db.write_across(&ops_of(n)).unwrap();
                acked.store(n, Ordering::Release);
            }
            n
        })
    };
    let mut images = Vec::new();
    for i in 0..10u64 {
        std::thread::sleep(Duration::from_millis(60 + (i * 53) % 170));
        let before = acked.load(Ordering::Acquire);
        let mode = if i % 2 == 0 {
            CrashMode::Torn {
                seed: (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            }
        } else {
            CrashMode::DropUnsynced
        };
        images.push((before, mode, fs.crash_image(mode)));
    }
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap();
    db.close().unwrap();
    drop(db);
    let mut redone = 0;
    for (i, (before, mode, image)) in images.iter().enumerate() {
        let ctx = format!("image {i} ({mode:?}, {before} acknowledged of {written})");
        assert!(*before > 0, "{ctx}: nothing acknowledged yet");
        let fs = SimVfs::from_image(image);
        let db = open(&fs);
        redone += db.redone;
        let got = state(&*db);
        for (s, v) in &got {
            assert!(
                v.iter().all(|x| x == &v[0]),
                "{ctx}: slot {s} differs between keyspaces: {v:?}"
            );
        }
        // Every acknowledged batch is there, or a later write of its slot.
        let after = model(*before);
        for (s, v) in &got {
            let last_acked = (1..=*before).rev().find(|&b| batch(b).0 == *s);
            let Some(la) = last_acked else { continue };
            let allowed: Vec<Option<u64>> = (la..=written)
                .filter(|&b| batch(b).0 == *s)
                .map(|b| if batch(b).1 { None } else { Some(b) })
                .collect();
            assert!(
                allowed.contains(&v[0]),
                "{ctx}: slot {s} holds {:?}; acknowledged: {:?}",
                v[0],
                after[s][0]
            );
        }
        // The log: the first batches, in order, one record each.
        let logged = logged_batches(&fs, u64::MAX);
        assert!(
            logged.len() as u64 >= *before,
            "{ctx}: acknowledged batches not logged"
        );
        for (j, (_, n)) in logged.iter().enumerate() {
            let b = j as u64 + 1;
            assert_eq!(*n, if batch(b).1 { 0 } else { b }, "{ctx}: record {j}");
        }
        // A point-in-time restore up to a record: exactly the batches up to it.
        for (ts, _) in [logged.get(logged.len() / 2), logged.last()]
            .into_iter()
            .flatten()
        {
            let to = SimVfs::new();
            let restored = DiskTree::open_mode(
                Path::new("/r/r.kb"),
                &Params::parse("").unwrap(),
                Arc::new(to),
                OpenMode::Create,
            )
            .unwrap();
            ulog::apply::replay_in(&restored, &fs, Path::new(LOG), 0, *ts).unwrap();
            let upto = logged.iter().filter(|(t, _)| t <= ts).count() as u64;
            assert_eq!(state(&restored), model(upto), "{ctx}: restore up to {ts}");
            // The restored keyspace was made with the master's order.
            let idx = restored.keyspace("idx", "").unwrap();
            let mut c = idx.cursor().unwrap();
            let mut keys = Vec::new();
            if c.first().unwrap() {
                while let Some((k, _)) = c.next().unwrap() {
                    keys.push(String::from_utf8(k).unwrap().parse::<u64>().unwrap());
                }
            }
            assert!(keys.windows(2).all(|w| w[0] < w[1]), "{ctx}: decimal order");
        }
        db.close().unwrap();
    }
    eprintln!("{redone} records redone over {} images", images.len());
    // The tree's own log is not synced for a write: the images need the redo.
    assert!(redone > 0, "no image needed the redo");
}
