//! Power loss under a database with an update log (`Logged` over a `.kh`, the log's files on
//! the same `SimVfs`, as `kura serve --ulog` builds it): writers run while crash images are
//! taken at many instants, each image is opened again (the log first, then `Logged`'s redo),
//! and then:
//! - the log's files verify: a torn tail is cut, never reported as damage;
//! - under `sync=always`, every write acknowledged before the image is in the log and in the
//!   database;
//! - the log holds no change the database lacks after the redo (the database may be ahead of
//!   the log by writes whose records were not yet durable: `Logged`'s rule is log, then apply,
//!   and the database's own writes can reach the disk before the log's);
//! - a point-in-time restore from the image's log, up to any of its records, is exactly the
//!   log's records up to it.
//!
//! And with the update log as the commit point (`run_commit_point`: a `.kh` and a `.kb` whose
//! own log is not synced for a write, and a `sync=always` `.kh` whose syncs `Logged` defers):
//! the log is a prefix of the writes, every acknowledged write is in it, the database after the
//! redo equals that prefix but for keys a later, unacknowledged write reached by itself, and
//! the database was synced a handful of times, not once a write.

use kura_engine::hash::DiskHash;
use kura_engine::io::{CrashMode, SimVfs, Vfs};
use kura_engine::store::{BatchOp, Store};
use kura_engine::ulog::logged::Logged;
use kura_engine::ulog::record::{batch_ops, Op};
use kura_engine::ulog::{self, Ulog};
use kura_engine::{Params, SyncMode};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const DB: &str = "/sim/d.kh";
const LOG: &str = "/sim/ulog";
const THREADS: u64 = 4;
/// Keys per writer thread.
const KEYS: u64 = 24;

fn open(fs: &SimVfs, always: bool) -> (Arc<Logged>, u64) {
    let params = if always {
        "sync=always#segsiz=64k#bufsiz=4k"
    } else {
        "segsiz=64k#bufsiz=4k"
    };
    let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
    let db = DiskHash::open_with(
        Path::new(DB),
        &Params::parse(params).unwrap(),
        vfs.clone(),
        false,
    )
    .unwrap();
    let mut cfg = ulog::Config::new(LOG, 7);
    cfg.sync = if always {
        SyncMode::Always
    } else {
        SyncMode::DEFAULT
    };
    // Small files, so that the writers start new ones (sealing the old) while images are
    // taken.
    cfg.file_size = 48 << 10;
    cfg.limit = 0;
    cfg.vfs = vfs;
    let log = Ulog::open(cfg).unwrap_or_else(|e| panic!("the update log does not open: {e}"));
    let torn = log.torn_tail;
    (Logged::new(Arc::new(db), log).unwrap(), torn)
}

fn key(t: u64, k: u64) -> Vec<u8> {
    format!("k{t}-{k:02}").into_bytes()
}

/// A value names its write: thread, key and the thread's write number, padded so that
/// records span pages.
fn value(t: u64, k: u64, n: u64) -> Vec<u8> {
    let mut v = format!("v{t}-{k:02}-{n:08}-").into_bytes();
    v.resize(40 + (n % 7) as usize * 37, b'x');
    v
}

/// The write number a stored value names.
fn number(v: &[u8]) -> u64 {
    let s = std::str::from_utf8(&v[..v.len().min(17)]).unwrap();
    s.split('-').nth(2).unwrap().parse().unwrap()
}

/// Each key's newest write number in the log's records up to `until`, read as a restore
/// reads them (an error for damage).
fn logged_numbers(fs: &SimVfs, until: u64) -> kura_engine::Result<BTreeMap<Vec<u8>, u64>> {
    let mut m = BTreeMap::new();
    let mut put = |op: &Op<'_>| match op {
        Op::Put { key, value, .. } => {
            m.insert(key.to_vec(), number(value));
        }
        other => panic!("unexpected record {other:?}"),
    };
    ulog::read_dir_in(fs, Path::new(LOG), 0, until, &mut |r| {
        match &r.op {
            Op::Batch { body, .. } => {
                for op in batch_ops(body) {
                    put(&op?);
                }
            }
            op => put(op),
        }
        Ok(())
    })?;
    Ok(m)
}

fn stored_numbers(db: &dyn Store) -> BTreeMap<Vec<u8>, u64> {
    let mut m = BTreeMap::new();
    db.for_each_record(&mut |k, v, _| {
        m.insert(k.to_vec(), number(v));
        Ok(true)
    })
    .unwrap();
    m
}

/// The time stamps of every record of the log.
fn stamps(fs: &SimVfs) -> Vec<u64> {
    let mut v = Vec::new();
    ulog::read_dir_in(fs, Path::new(LOG), 0, u64::MAX, &mut |r| {
        v.push(r.ts);
        Ok(())
    })
    .unwrap();
    v
}

/// Which files a crash image writes back out of file order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scatter {
    /// None: every image keeps a prefix of each file's unsynced writes.
    No,
    /// The update log's files.
    Log,
    /// Every file.
    All,
}

/// `scattered`: every third image keeps each unsynced write of those files or not,
/// independently (a write-back out of file order) rather than a prefix of them.
fn run(always: bool, scattered: Scatter) {
    let fs = SimVfs::new();
    fs.set_sync_delay(Duration::from_micros(700));
    let (db, _) = open(&fs, always);
    // (thread, key, number) of every acknowledged write, in acknowledgement order.
    let acked = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (db, acked, stop) = (db.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || {
                for n in 0u64.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let k = (n * 7 + t) % KEYS;
                    if n % 5 == 4 {
                        // A batch of three keys of this thread.
                        let ks = [k, (k + 1) % KEYS, (k + 5) % KEYS];
                        let ops: Vec<BatchOp> = ks
                            .iter()
                            .map(|&k| BatchOp::Put {
                                key: key(t, k),
                                value: value(t, k, n),
                                flags: 0,
                                expires: 0,
                            })
                            .collect();
                        db.write_batch(&ops).unwrap();
                        let mut a = acked.lock().unwrap();
                        a.extend(ks.iter().map(|&k| (t, k, n)));
                    } else {
                        db.put(&key(t, k), &value(t, k, n)).unwrap();
                        acked.lock().unwrap().push((t, k, n));
                    }
                    if n % 16 == 0 {
                        std::thread::sleep(Duration::from_micros((t * 311 + n * 17) % 900));
                    }
                }
            })
        })
        .collect();
    // Spread over more than the 2 s `Logged` saves its `applied` mark at, and the 1 s the
    // default mode syncs at.
    let mut images = Vec::new();
    for i in 0..14u64 {
        std::thread::sleep(Duration::from_millis(90 + (i * 37) % 150));
        let before = acked.lock().unwrap().len();
        let seed = (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let (mode, image) = if i % 3 == 2 && scattered == Scatter::Log {
            let mode = CrashMode::Scattered { seed };
            let rest = CrashMode::Torn { seed };
            (mode, fs.crash_image_under(rest, mode, Path::new(LOG)))
        } else {
            let mode = if i % 3 == 2 && scattered == Scatter::All {
                CrashMode::Scattered { seed }
            } else if i % 2 == 0 {
                CrashMode::Torn { seed }
            } else {
                CrashMode::DropUnsynced
            };
            (mode, fs.crash_image(mode))
        };
        images.push((before, mode, image));
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    drop(db);
    let acked = acked.lock().unwrap();
    let mut torn_seen = 0;
    for (i, (before, mode, image)) in images.iter().enumerate() {
        let ctx = format!("always={always} image {i} ({mode:?}, {before} acknowledged)");
        assert!(*before > 0, "{ctx}: nothing acknowledged yet");
        let fs = SimVfs::from_image(image);
        let (db, torn) = open(&fs, always);
        torn_seen += u64::from(torn > 0);
        let db_n = stored_numbers(&*db);
        let log_n = logged_numbers(&fs, u64::MAX)
            .unwrap_or_else(|e| panic!("{ctx}: the log does not read back: {e}"));
        // The log holds no change the database lacks.
        for (k, n) in &log_n {
            let have = db_n.get(k).copied();
            assert!(
                have.is_some_and(|d| d >= *n),
                "{ctx}: {} logged at write {n}, the database has {have:?}",
                String::from_utf8_lossy(k)
            );
        }
        if always {
            // Every acknowledged write is in both.
            for (t, k, n) in &acked[..*before] {
                let kk = key(*t, *k);
                for (what, m) in [("log", &log_n), ("database", &db_n)] {
                    let have = m.get(&kk).copied();
                    assert!(
                        have.is_some_and(|h| h >= *n),
                        "{ctx}: acknowledged write {n} of {} lost from the {what} (has {have:?})",
                        String::from_utf8_lossy(&kk)
                    );
                }
            }
        }
        // A point-in-time restore up to a record: exactly the log's records up to it.
        let ts = stamps(&fs);
        for until in [ts.get(ts.len() / 3), ts.get(ts.len() * 2 / 3), ts.last()]
            .into_iter()
            .flatten()
        {
            let to = SimVfs::new();
            let restored = DiskHash::open_with(
                Path::new("/r/r.kh"),
                &Params::parse("").unwrap(),
                Arc::new(to),
                false,
            )
            .unwrap();
            let (_, last) =
                ulog::apply::replay_in(&restored, &fs, Path::new(LOG), 0, *until).unwrap();
            assert_eq!(last, *until, "{ctx}: restore up to {until}");
            assert_eq!(
                stored_numbers(&restored),
                logged_numbers(&fs, *until).unwrap(),
                "{ctx}: restore up to {until}"
            );
        }
        assert!(db.check().unwrap().healthy(), "{ctx}: check");
        db.close().unwrap();
        // Reopened after a clean close: the log verifies and nothing is left to redo.
        let (db, torn) = open(&fs, always);
        assert_eq!(torn, 0, "{ctx}: torn tail after a clean close");
        assert_eq!(db.redone, 0, "{ctx}: redo after a clean close");
        assert_eq!(stored_numbers(&*db), db_n, "{ctx}: after a clean close");
        db.close().unwrap();
    }
    eprintln!(
        "always={always}: {torn_seen} of {} images had a torn tail",
        images.len()
    );
}

#[test]
fn power_loss_with_update_log_sync_always() {
    run(true, Scatter::No);
}

#[test]
fn power_loss_with_update_log_default_sync() {
    run(false, Scatter::No);
}

/// A write-back out of file order (which a kernel may do) leaves a hole before intact records
/// in the update log's newest file: past the synced length its header records, that is a torn
/// tail, cut there (the `.kh`'s files are crashed with a prefix of their writes kept, as
/// `power_loss_with_write_back_out_of_order_in_the_database` describes).
#[test]
fn power_loss_with_write_back_out_of_order() {
    run(true, Scatter::Log);
    run(false, Scatter::Log);
}

/// The same hole in a `.kh` segment: past the synced length its header records, a torn tail
/// too, cut there (`tests/write_back.rs` has the same on every kind).
#[test]
fn power_loss_with_write_back_out_of_order_in_the_database() {
    run(true, Scatter::All);
    run(false, Scatter::All);
}

/// The database under a `Logged` in the power-loss tests of the update log as the commit point.
#[derive(Clone, Copy, Debug)]
enum Under {
    /// A `.kh` opened with `sync=none`, as `kura serve --ulog` opens it.
    Hash,
    /// A `.kb` opened with `sync=none`.
    Tree,
    /// A `.kh` opened with `sync=always`: `Logged` keeps its writes from syncing.
    HashAlways,
}

/// A database of `under` and its update log (`sync=always`: the commit point) on `fs`, with
/// `Logged`'s redo done.
fn open_commit(fs: &SimVfs, under: Under) -> Arc<Logged> {
    let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
    let db: Arc<dyn Store> = match under {
        Under::Hash | Under::HashAlways => {
            let p = match under {
                Under::Hash => "sync=none#segsiz=64k#bufsiz=4k",
                _ => "sync=always#segsiz=64k#bufsiz=4k",
            };
            Arc::new(
                DiskHash::open_with(
                    Path::new("/sim/c.kh"),
                    &Params::parse(p).unwrap(),
                    vfs.clone(),
                    false,
                )
                .unwrap(),
            )
        }
        Under::Tree => Arc::new(
            kura_engine::tree::DiskTree::open_mode(
                Path::new("/sim/c.kb"),
                &Params::parse("sync=none#segsiz=64k#bufsiz=4k").unwrap(),
                vfs.clone(),
                kura_engine::OpenMode::Create,
            )
            .unwrap(),
        ),
    };
    let mut cfg = ulog::Config::new(LOG, 7);
    cfg.sync = SyncMode::Always;
    cfg.file_size = 48 << 10;
    cfg.limit = 0;
    cfg.vfs = vfs;
    let log = Ulog::open(cfg).unwrap_or_else(|e| panic!("the update log does not open: {e}"));
    Logged::new(db, log).unwrap()
}

/// Write `n` of one writer, numbered from 1: a put of one key, a batch of puts of three, or a
/// remove; `(key, Some(n))` for a put, `(key, None)` for a remove.
fn commit_write(n: u64) -> Vec<(Vec<u8>, Option<u64>)> {
    let k = |i: u64| format!("c{:02}", i % 40).into_bytes();
    match n % 7 {
        3 => vec![(k(n), Some(n)), (k(n + 11), Some(n)), (k(n + 23), Some(n))],
        5 => vec![(k(n * 3), None)],
        _ => vec![(k(n), Some(n))],
    }
}

fn commit_value(n: u64) -> Vec<u8> {
    let mut v = format!("v-0-{n:08}-").into_bytes();
    v.resize(40 + (n % 5) as usize * 61, b'y');
    v
}

/// The records of the log as writes: each a list of `(key, Some(n) | None)`. A record that
/// states what the key already holds (`Logged`'s record of a key's actual state after a change
/// of a kind that allows duplicates) is left out: every write of `commit_write` changes it.
fn logged_writes(fs: &SimVfs) -> Vec<Vec<(Vec<u8>, Option<u64>)>> {
    let mut out: Vec<Vec<(Vec<u8>, Option<u64>)>> = Vec::new();
    let mut state: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    let one = |op: &Op<'_>| match op {
        Op::Put { key, value, .. } => (key.to_vec(), Some(number(value))),
        Op::Remove { key } => (key.to_vec(), None),
        other => panic!("unexpected record {other:?}"),
    };
    ulog::read_dir_in(fs, Path::new(LOG), 0, u64::MAX, &mut |r| {
        let w: Vec<_> = match &r.op {
            Op::Batch { body, .. } => batch_ops(body).map(|o| one(&o.unwrap())).collect(),
            op => vec![one(op)],
        };
        if let [(k, v)] = &w[..] {
            if state.get(k).copied() == *v {
                return Ok(());
            }
        }
        for (k, v) in &w {
            match v {
                Some(n) => state.insert(k.clone(), *n),
                None => state.remove(k),
            };
        }
        out.push(w);
        Ok(())
    })
    .unwrap();
    out
}

/// Power loss with the update log as the commit point: one writer's puts, batches and removes
/// acknowledged under `sync=always` through `Logged`, over a database whose own log is not
/// synced for a write; crash images at many instants (every unsynced write lost, or a torn
/// prefix of them), each reopened with the redo. Then: the log's records are exactly the
/// first writes, in order (a prefix); every write acknowledged before the image is among them;
/// the database equals the state after that prefix, but for keys a later write (never
/// acknowledged before the image) reached the database's files by itself; and the database
/// was synced a handful of times, not once a write.
fn run_commit_point(under: Under) {
    let fs = SimVfs::new();
    fs.set_sync_delay(Duration::from_micros(300));
    let db = open_commit(&fs, under);
    let acked = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (db, acked, stop) = (db.clone(), acked.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let w = commit_write(n);
                if w.len() > 1 {
                    let ops: Vec<BatchOp> = w
                        .iter()
                        .map(|(k, _)| BatchOp::Put {
                            key: k.clone(),
                            value: commit_value(n),
                            flags: 0,
                            expires: 0,
                        })
                        .collect();
                    db.write_batch(&ops).unwrap();
                } else if w[0].1.is_some() {
                    db.put(&w[0].0, &commit_value(n)).unwrap();
                } else {
                    db.out(&w[0].0).unwrap();
                }
                acked.store(n, Ordering::Release);
            }
            n
        })
    };
    let counter = |db: &Logged, name: &str| {
        db.counters()
            .iter()
            .find(|c| c.0 == name)
            .map_or(0, |c| c.1)
    };
    let db_syncs0 = counter(&db, "syncs");
    // Past the 2 s at which `Logged` syncs the database and saves its `applied` mark.
    let mut images = Vec::new();
    for i in 0..16u64 {
        std::thread::sleep(Duration::from_millis(60 + (i * 53) % 190));
        let before = acked.load(Ordering::Acquire);
        let mode = if i % 2 == 0 {
            CrashMode::Torn {
                seed: (i + 7).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            }
        } else {
            CrashMode::DropUnsynced
        };
        images.push((before, mode, fs.crash_image(mode)));
    }
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap();
    let db_syncs = counter(&db, "syncs") - db_syncs0;
    let ulog_syncs = counter(&db, "ulog_syncs");
    assert!(written > 200, "{under:?}: only {written} writes");
    assert!(
        db_syncs * 20 <= written,
        "{under:?}: the database synced {db_syncs} times for {written} writes"
    );
    assert!(
        ulog_syncs * 2 >= written,
        "{under:?}: {ulog_syncs} log syncs for {written} acknowledged writes"
    );
    db.close().unwrap();
    drop(db);
    // The writes that were logged, in order, with their numbers: a remove of a key that is not
    // there changes nothing and is not logged.
    let mut expected = Vec::new();
    let mut live = std::collections::BTreeSet::new();
    for n in 1..=written {
        let w = commit_write(n);
        if w.len() == 1 && w[0].1.is_none() && !live.remove(&w[0].0) {
            continue;
        }
        for (k, v) in &w {
            if v.is_some() {
                live.insert(k.clone());
            }
        }
        expected.push((n, w));
    }
    for (i, (before, mode, image)) in images.iter().enumerate() {
        let ctx = format!("{under:?} image {i} ({mode:?}, {before} acknowledged)");
        let fs = SimVfs::from_image(image);
        let db = open_commit(&fs, under);
        let log = logged_writes(&fs);
        for (j, w) in log.iter().enumerate() {
            assert_eq!(
                Some(w),
                expected.get(j).map(|e| &e.1),
                "{ctx}: log record {j}"
            );
        }
        // The number of the log's last write.
        let m = log.len().checked_sub(1).map_or(0, |j| expected[j].0);
        let acked_logged = expected.iter().take_while(|e| e.0 <= *before).count();
        assert!(
            log.len() >= acked_logged,
            "{ctx}: the log holds {} writes of {acked_logged} acknowledged",
            log.len()
        );
        // The state after the log's writes, and every later write of each key.
        let mut want: BTreeMap<Vec<u8>, Option<u64>> = BTreeMap::new();
        for w in &log {
            for (k, v) in w {
                want.insert(k.clone(), *v);
            }
        }
        let mut later: BTreeMap<Vec<u8>, Vec<Option<u64>>> = BTreeMap::new();
        for n in m + 1..=written {
            for (k, v) in commit_write(n) {
                later.entry(k).or_default().push(v);
            }
        }
        let mut have: BTreeMap<Vec<u8>, Option<u64>> = BTreeMap::new();
        db.for_each_record(&mut |k, v, _| {
            have.insert(k.to_vec(), Some(number(v)));
            Ok(true)
        })
        .unwrap();
        let keys: std::collections::BTreeSet<_> = want.keys().chain(have.keys()).collect();
        for k in keys {
            let (w, h) = (
                want.get(k).copied().flatten(),
                have.get(k).copied().flatten(),
            );
            let ahead = later.get(k).is_some_and(|l| l.contains(&h));
            assert!(
                w == h || ahead,
                "{ctx}: {} holds {h:?}, the log's writes leave {w:?}",
                String::from_utf8_lossy(k)
            );
        }
        assert!(db.check().unwrap().healthy(), "{ctx}: check");
        db.close().unwrap();
    }
}

#[test]
fn power_loss_with_the_update_log_as_commit_point_kh() {
    run_commit_point(Under::Hash);
}

#[test]
fn power_loss_with_the_update_log_as_commit_point_kb() {
    run_commit_point(Under::Tree);
}

#[test]
fn power_loss_with_the_update_log_as_commit_point_kh_sync_always() {
    run_commit_point(Under::HashAlways);
}
