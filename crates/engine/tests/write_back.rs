//! Power loss with a write-back out of file order, on every on-disk kind (`.kh`, `.kb`, `.kf`).
//!
//! A kernel need not write a file's dirty pages back in file order: a power loss can leave a
//! hole (zeros) in a segment before records that reached the disk, none of them covered by a
//! finished sync. The segment header records the length each sync covered (format version 4),
//! so recovery cuts the log at the first bad record past it — a torn tail, whatever verifies
//! after it — and still refuses a bad record before it as damage.
//!
//! `every_kind_survives_a_write_back_out_of_order`: writer threads run while crash images are
//! taken at many instants, each keeping every unsynced write or not independently
//! (`CrashMode::Scattered`; some images keep a prefix instead, `CrashMode::Torn`). Each image
//! opens (never refused as damaged), checks healthy, and holds for each writer the state after
//! some prefix of its writes; with `sync=always`, a prefix that includes every write
//! acknowledged before the image.
//!
//! `damage_before_the_synced_length_is_refused`: a zeroed stretch at the end of what the header
//! records as synced, with nothing valid after it, is damage (without the synced length it
//! would be taken for a torn tail and cut); the same stretch past the synced length, with intact
//! records after it, is a torn tail.

use kura_engine::fixed::FixedDb;
use kura_engine::hash::DiskHash;
use kura_engine::io::{CrashMode, SimVfs, Vfs};
use kura_engine::log::format;
use kura_engine::store::{BatchOp, Store};
use kura_engine::tree::DiskTree;
use kura_engine::{Error, OpenMode, Params};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const THREADS: u64 = 3;
/// Keys per writer thread.
const KEYS: u64 = 256;
/// Small segments and buffers: many writes between syncs, and segments sealed while images
/// are taken.
const TUNING: &str = "segsiz=64k#bufsiz=4k";

#[derive(Clone, Copy, Debug)]
enum Kind {
    Kh,
    Kb,
    Kf,
}

impl Kind {
    fn path(self) -> &'static Path {
        Path::new(match self {
            Kind::Kh => "/sim/d.kh",
            Kind::Kb => "/sim/d.kb",
            Kind::Kf => "/sim/d.kf",
        })
    }

    fn open(
        self,
        fs: &SimVfs,
        params: &str,
        mode: OpenMode,
    ) -> kura_engine::Result<Arc<dyn Store>> {
        let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
        Ok(match self {
            Kind::Kh => {
                let p = Params::parse(params).unwrap();
                Arc::new(DiskHash::open_mode(self.path(), &p, vfs, mode)?)
            }
            Kind::Kb => {
                let p = Params::parse(params).unwrap();
                Arc::new(DiskTree::open_mode(self.path(), &p, vfs, mode)?)
            }
            Kind::Kf => {
                let p = Params::parse(&format!("width=5100#{params}")).unwrap();
                Arc::new(FixedDb::open_mode(self.path(), &p, vfs, mode)?)
            }
        })
    }
}

/// Thread `t`'s key `k`: a decimal id (what every kind takes, the fixed-length one included).
fn key(t: u64, k: u64) -> Vec<u8> {
    (t * KEYS + k + 1).to_string().into_bytes()
}

/// The value write `n` of thread `t` gives its keys: now and then longer than the log's
/// buffer, so that its record goes to the file in parts of its own, and a sync covers several
/// writes even under `sync=always`.
fn value(t: u64, n: u64) -> Vec<u8> {
    let pad = if n.is_multiple_of(13) {
        5000
    } else {
        (n % 23) as usize
    };
    format!("{t}:{n}:{}", "v".repeat(pad)).into_bytes()
}

/// The write number a value holds.
fn number(v: &[u8]) -> u64 {
    let s = std::str::from_utf8(v).unwrap();
    s.split(':').nth(1).unwrap().parse().unwrap()
}

/// The keys write `n` of thread `t` sets (every fifth is a batch of three).
fn keys_of(t: u64, n: u64) -> Vec<u64> {
    let k = (n * 7 + t) % KEYS;
    if n % 5 == 4 {
        vec![k, (k + 1) % KEYS, (k + 5) % KEYS]
    } else {
        vec![k]
    }
}

/// Key → write number of thread `t`'s keys in `db`.
fn numbers_of(db: &dyn Store, t: u64) -> BTreeMap<u64, u64> {
    (0..KEYS)
        .filter_map(|k| db.get(&key(t, k)).unwrap().map(|r| (k, number(&r.value))))
        .collect()
}

/// The state of thread `t`'s keys after its first `j` writes.
fn after(t: u64, j: u64) -> BTreeMap<u64, u64> {
    let mut s = BTreeMap::new();
    for n in 0..j {
        for k in keys_of(t, n) {
            s.insert(k, n);
        }
    }
    s
}

/// Write `n` of thread `t`.
fn write(db: &dyn Store, t: u64, n: u64) {
    let ks = keys_of(t, n);
    if ks.len() > 1 {
        let ops: Vec<BatchOp> = ks
            .iter()
            .map(|&k| BatchOp::Put {
                key: key(t, k),
                value: value(t, n),
                flags: 0,
                expires: 0,
            })
            .collect();
        db.write_batch(&ops).unwrap();
    } else {
        db.put(&key(t, ks[0]), &value(t, n)).unwrap();
    }
}

fn run(kind: Kind, always: bool) {
    let params = if always {
        format!("sync=always#{TUNING}")
    } else {
        format!("sync=none#{TUNING}")
    };
    let fs = SimVfs::new();
    fs.set_sync_delay(Duration::from_micros(500));
    let db = kind.open(&fs, &params, OpenMode::Create).unwrap();
    // Per thread: how many of its writes were acknowledged.
    let acked: Arc<Vec<Mutex<u64>>> = Arc::new((0..THREADS).map(|_| Mutex::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (db, acked, stop) = (db.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || {
                for n in 0u64.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    write(&*db, t, n);
                    *acked[t as usize].lock().unwrap() = n + 1;
                    if n.is_multiple_of(32) {
                        std::thread::sleep(Duration::from_micros((t * 311 + n * 17) % 700));
                    }
                }
            })
        })
        .collect();
    let mut images = Vec::new();
    for i in 0..12u64 {
        std::thread::sleep(Duration::from_millis(40 + (i * 37) % 90));
        let before: Vec<u64> = acked.iter().map(|a| *a.lock().unwrap()).collect();
        let seed = (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mode = if i % 4 == 3 {
            CrashMode::Torn { seed }
        } else {
            CrashMode::Scattered { seed }
        };
        images.push((before, mode, fs.crash_image(mode)));
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let written: Vec<u64> = acked.iter().map(|a| *a.lock().unwrap()).collect();
    drop(db);
    for (i, (before, mode, image)) in images.iter().enumerate() {
        let ctx = format!("{kind:?} always={always} image {i} ({mode:?}, acknowledged {before:?})");
        let fs = SimVfs::from_image(image);
        let db = kind
            .open(&fs, &params, OpenMode::Existing)
            .unwrap_or_else(|e| panic!("{ctx}: does not open: {e}"));
        for t in 0..THREADS {
            let got = numbers_of(&*db, t);
            // The prefix it ends with: up to its newest write found (a write not acknowledged
            // yet may be there, one past the acknowledged ones).
            let j = got.values().max().map_or(0, |&n| n + 1);
            assert!(
                j <= written[t as usize] + 1,
                "{ctx}: thread {t} has write {} of {}",
                j - 1,
                written[t as usize]
            );
            assert_eq!(
                got,
                after(t, j),
                "{ctx}: thread {t}'s keys are not the state after its first {j} writes"
            );
            if always {
                assert!(
                    j >= before[t as usize],
                    "{ctx}: thread {t}: {} writes acknowledged, only {j} recovered",
                    before[t as usize]
                );
            }
        }
        let rep = db.check().unwrap();
        assert!(rep.healthy(), "{ctx}: {rep:?}");
        db.close().unwrap();
    }
}

#[test]
fn every_kind_survives_a_write_back_out_of_order() {
    for kind in [Kind::Kh, Kind::Kb, Kind::Kf] {
        for always in [true, false] {
            run(kind, always);
        }
    }
}

/// The segment files on `fs`, with their bytes.
fn segments(fs: &SimVfs) -> Vec<(PathBuf, Vec<u8>)> {
    fs.image()
        .into_iter()
        .filter(|(p, _)| p.to_string_lossy().ends_with(".kd"))
        .collect()
}

/// The lane's segment holding the records written last (the one whose synced length is the
/// largest past its header), with its synced length and file length.
fn last_synced(fs: &SimVfs) -> (PathBuf, u64, u64) {
    segments(fs)
        .into_iter()
        .filter_map(|(p, data)| {
            let l = format::seg_layout(&data);
            let synced = l.synced?;
            (synced > l.data).then_some((p, synced, data.len() as u64))
        })
        .max_by_key(|s| s.1)
        .expect("a segment with records synced")
}

/// A database of `kind` with 60 puts made durable one by one (`sync=always`, no checkpoint
/// after its creation), left as a power loss leaves it once every write reached the disk.
fn synced_database(kind: Kind) -> SimVfs {
    let fs = SimVfs::new();
    let db = kind
        .open(
            &fs,
            &format!("sync=always#ckptsiz=1g#{TUNING}"),
            OpenMode::Create,
        )
        .unwrap();
    for n in 0..60 {
        write(&*db, 0, n);
    }
    let image = fs.crash_image(CrashMode::DropUnsynced);
    drop(db);
    SimVfs::from_image(&image)
}

/// Where the records of segment `data` end (the first offset past its header where no record
/// header parses or zeros start).
fn records_end(data: &[u8]) -> usize {
    let mut off = format::seg_layout(data).data as usize;
    while off + 8 <= data.len() && data[off..off + 8] != [0u8; 8] {
        match format::parse_header(&data[off..]) {
            Some(h) if off + h.len <= data.len() => off += h.len,
            _ => break,
        }
    }
    off
}

#[test]
fn damage_before_the_synced_length_is_refused() {
    for kind in [Kind::Kh, Kind::Kb, Kind::Kf] {
        // Zeros over the last records the header records as synced, nothing after them: damage
        // (with no synced length, a torn tail).
        let fs = synced_database(kind);
        let (seg, synced, _) = last_synced(&fs);
        assert!(synced > 200, "{kind:?}: synced {synced}");
        let file = fs.open(&seg, false).unwrap();
        file.set_len(synced).unwrap();
        file.write_at(&[0u8; 100], synced - 100).unwrap();
        drop(file);
        match kind.open(&fs, "", OpenMode::Existing) {
            Err(Error::Corrupt(msg)) => assert!(msg.contains("damaged"), "{kind:?}: {msg}"),
            Err(e) => panic!("{kind:?}: {e}"),
            Ok(_) => panic!("{kind:?}: opened with synced records zeroed"),
        }
        // A hole past the synced length, then a copy of a record that verifies (a record's
        // checksum covers its bytes, not its place): a torn tail, cut there; every record
        // before it stays.
        let fs = synced_database(kind);
        let (seg, synced, _) = last_synced(&fs);
        let data = fs.image()[&seg].clone();
        let end = records_end(&data);
        assert!(
            end as u64 >= synced,
            "{kind:?}: records end at {end}, synced {synced}"
        );
        let first = format::seg_layout(&data).data as usize;
        let len = format::parse_header(&data[first..]).unwrap().len;
        let rec = data[first..first + len].to_vec();
        let file = fs.open(&seg, false).unwrap();
        file.write_at(&rec, end as u64 + 300).unwrap();
        drop(file);
        let db = kind
            .open(&fs, "", OpenMode::Existing)
            .unwrap_or_else(|e| panic!("{kind:?}: a hole past the synced length refused: {e}"));
        // (The fixed-length kind moves the log's records into its array at the open and drops
        // the segment; the copy would have put write 0's value back.)
        if let Ok(f) = fs.open(&seg, false) {
            let len = f.len().unwrap() as usize;
            assert!(
                len < end + 300,
                "{kind:?}: the torn tail was not cut ({len})"
            );
        }
        assert_eq!(numbers_of(&*db, 0), after(0, 60), "{kind:?}");
        let rep = db.check().unwrap();
        assert!(rep.healthy(), "{kind:?}: {rep:?}");
        db.close().unwrap();
    }
}
