//! The conformance suite: every database kind against one model.
//!
//! Random sequences of every `Store` operation run against a `BTreeMap` model that follows
//! the trait's documentation (crates/engine/src/store/), on every entry of [`KINDS`]: the
//! memory hash and tree, and the on-disk hash on real files and on the simulated file system,
//! closed and reopened, or crashed under `sync=always` (where every acknowledged write must
//! survive). The on-disk hash runs with tiny tuning (64 KiB segments, 4 KiB write buffers,
//! 1 MiB checkpoints, three lanes) so that segment rolls, checkpoints, compaction and the
//! ordering of lanes happen in small databases; some rounds write from several threads at
//! once, each on keys of its own.
//!
//! What the model holds a kind to, per operation:
//! - reads (`get`, `view`, `view_shared`, `vsiz`, `get_multi`, an `accept` that keeps) show
//!   exactly the live record, value and metadata; a record written with an expiry already past
//!   reads as absent (expiry times are either far in the future or long past, so no test
//!   depends on the clock);
//! - every write returns the metadata it stored: the flags and expiry given (or kept), a version
//!   that is never 0 and differs from the one it replaced; a touch keeps the version;
//! - conditional writes (putkeep, replace, cas, out_if, incr with a cas) succeed or fail by the
//!   model's record, and a failure changes nothing; numeric operations fail with `NotNumeric`
//!   on values not of their form, and change nothing then;
//! - a batch applies its operations in order (a later one on the same key wins), or none of
//!   them when one is refused;
//! - a cursor shows every live record exactly once, in key order on ordered kinds, and an
//!   unmodified record exactly once even while others are written; `fwmkeys` and `range` agree;
//! - `count` lies between the live records and those plus the ones written already expired
//!   (which a kind may count until it reclaims them); `check` is healthy; a copy holds the live
//!   records; a restart (or a crash under `sync=always`) loses nothing; `vanish` empties.
//!
//! Keys are the kind's: byte strings (`k12`, binary ones, a thread's prefix), or for kinds
//! whose keys are record ids (the fixed-length database) decimal ids, ordered as numbers, each
//! thread on a range of its own, and `fwmkeys` taking an interval (`[3,10]`, `(min,7]`). The
//! model orders keys as `Bytes` does: canonical decimal numbers by value, anything else by
//! its bytes (no byte-keyed round makes a key of digits only).
//!
//! A new kind joins by one entry in [`KINDS`]. Two drivers: `fixed_seeds` runs the same seeds on
//! every kind (a failure prints its seed, the last operations, and the command that reruns it:
//! `KURA_CONFORMANCE_SEED=N` runs one seed, `KURA_CONFORMANCE_KIND=LABEL` one kind), and
//! `proptest_sequences` lets proptest draw sequences and shrink a failing one.

use kura_engine::fixed::FixedDb;
use kura_engine::hash::DiskHash;
use kura_engine::io::{CrashMode, SimVfs};
use kura_engine::store::{now_secs, MAX_KEY_LEN};
use kura_engine::tree::DiskTree;
use kura_engine::MemcachedOps;
use kura_engine::TokyoOps;
use kura_engine::{
    BatchOp, Counted, Decision, Error, Meta, OpenMode, Outcome, Params, Record, Store,
};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

// ------------------------------------------------------------------------------------ the kinds

/// One kind under test: how to open it and what a restart means.
struct KindUnderTest {
    /// Shown on failure; `KURA_CONFORMANCE_KIND` selects by it.
    label: &'static str,
    open: Opener,
    restart: Restart,
    /// What `optimize` is called with (one drawn each time).
    retune: &'static [&'static str],
    /// The suffix a copy written by `copy_to` is opened by (the memory kinds copy to an
    /// on-disk hash).
    copy_as: &'static str,
    /// Keys are record ids (decimal numbers) and values at most this long (the width).
    ids: Option<usize>,
}

impl KindUnderTest {
    /// The keys of a round of `n` keys on this kind.
    fn keys(&self, n: usize) -> Keys {
        let mut k = Keys::new("", n, self.ids.is_some());
        k.value_cap = self.ids;
        k
    }
}

enum Opener {
    /// `kura_engine::open_as` with this name; `{dir}` stands for the round's own temporary
    /// directory.
    Name(&'static str),
    /// `DiskHash::open_with` on a `SimVfs` (kept across restarts) with these parameters.
    SimDiskHash(&'static str),
    /// `DiskTree::open_mode` on a `SimVfs` likewise.
    SimDiskTree(&'static str),
    /// `FixedDb::open_mode` on a `SimVfs` (kept across restarts) with these parameters.
    SimFixed(&'static str),
    /// The keyspace `ks` (made with these parameters) of the database `kura_engine::open_as`
    /// opens by this name. The database itself and a second keyspace hold records of their
    /// own with the round's keys (written at the first open), which the keyspace must not show.
    Keyspace(&'static str, &'static str),
    /// The same on `DiskTree::open_mode` on a `SimVfs` with these parameters (kept across
    /// restarts, so a crash restart can tear its unsynced writes).
    SimKeyspace(&'static str, &'static str),
    /// As `SimKeyspace`, of a `.kh` on the simulated file system.
    SimHashKeyspace(&'static str, &'static str),
}

enum Restart {
    /// Nothing outlives the handle: a restart is a no-op.
    None,
    /// Close, then open the same database again (`OpenMode::Existing`).
    Reopen,
    /// Stop as a killed process would (`DiskHash::abandon`: no flush, no sync), crash the
    /// simulated file system (torn unsynced writes), open again. Only for `sync=always`,
    /// where every acknowledged write must survive.
    Crash,
}

/// Every kind, and every way of running the on-disk ones. A new kind is one more line.
#[rustfmt::skip]
const KINDS: &[KindUnderTest] = &[
    KindUnderTest { label: "*", open: Opener::Name("*"), restart: Restart::None, retune: &["", "bnum=1000"], copy_as: ".kh", ids: None },
    KindUnderTest { label: "+", open: Opener::Name("+"), restart: Restart::None, retune: &[""], copy_as: ".kh", ids: None },
    KindUnderTest { label: ".kh", open: Opener::Name("{dir}/db.kh#segsiz=64k#bufsiz=4k#ckptsiz=1m#lanes=3#sync=none"), restart: Restart::Reopen, retune: KH_RETUNE, copy_as: ".kh", ids: None },
    KindUnderTest { label: ".kh sim", open: Opener::SimDiskHash("segsiz=64k#bufsiz=4k#ckptsiz=1m#lanes=3#sync=none"), restart: Restart::Reopen, retune: KH_RETUNE, copy_as: ".kh", ids: None },
    KindUnderTest { label: ".kh sim crash", open: Opener::SimDiskHash("segsiz=64k#bufsiz=4k#ckptsiz=1m#lanes=3#sync=always"), restart: Restart::Crash, retune: KH_RETUNE, copy_as: ".kh", ids: None },
    KindUnderTest { label: ".kb", open: Opener::Name("{dir}/db.kb#segsiz=64k#bufsiz=4k#ckptsiz=1m#leafsiz=512#cache=1m#sync=none"), restart: Restart::Reopen, retune: &["", "compress=zstd", "compress=none"], copy_as: ".kb", ids: None },
    KindUnderTest { label: ".kb sim", open: Opener::SimDiskTree("segsiz=64k#bufsiz=4k#ckptsiz=1m#leafsiz=300#cache=1m#sync=none"), restart: Restart::Reopen, retune: &[""], copy_as: ".kb", ids: None },
    KindUnderTest { label: ".kb sim crash", open: Opener::SimDiskTree("segsiz=64k#bufsiz=4k#ckptsiz=1m#leafsiz=400#compress=lz4#sync=always"), restart: Restart::Crash, retune: &["", "compress=none"], copy_as: ".kb", ids: None },
    KindUnderTest { label: "* keyspace", open: Opener::Keyspace("*", ""), restart: Restart::None, retune: &["", "bnum=1000"], copy_as: ".kh", ids: None },
    KindUnderTest { label: "+ keyspace", open: Opener::Keyspace("+", ""), restart: Restart::None, retune: &[""], copy_as: ".kh", ids: None },
    KindUnderTest { label: ".kb keyspace sim crash", open: Opener::SimKeyspace("segsiz=64k#bufsiz=4k#ckptsiz=1m#leafsiz=400#compress=lz4#sync=always", "cmp=lex"), restart: Restart::Crash, retune: &[""], copy_as: ".kb", ids: None },
    KindUnderTest { label: ".kb keyspace", open: Opener::Keyspace("{dir}/db.kb#segsiz=64k#bufsiz=4k#ckptsiz=1m#leafsiz=512#cache=1m#sync=none", "cmp=lex"), restart: Restart::Reopen, retune: &[""], copy_as: ".kb", ids: None },
    KindUnderTest { label: ".kh keyspace sim crash", open: Opener::SimHashKeyspace("segsiz=64k#bufsiz=4k#ckptsiz=1m#compress=lz4#lanes=4#sync=always", ""), restart: Restart::Crash, retune: &[""], copy_as: ".kh", ids: None },
    KindUnderTest { label: ".kh keyspace", open: Opener::Keyspace("{dir}/db.kh#segsiz=64k#bufsiz=4k#ckptsiz=1m#compact=0.2#sync=none", ""), restart: Restart::Reopen, retune: &[""], copy_as: ".kh", ids: None },
    KindUnderTest { label: ".kf", open: Opener::Name("{dir}/db.kf#width=300000#limsiz=2t#segsiz=64k#bufsiz=4k#ckptsiz=1m#sync=none"), restart: Restart::Reopen, retune: KF_RETUNE, copy_as: ".kf", ids: Some(KF_WIDTH) },
    KindUnderTest { label: ".kf sim", open: Opener::SimFixed("width=300#limsiz=2t#segsiz=64k#bufsiz=4k#ckptsiz=1m#sync=none"), restart: Restart::Reopen, retune: KF_SIM_RETUNE, copy_as: ".kf", ids: Some(KF_SIM_WIDTH) },
    KindUnderTest { label: ".kf sim crash", open: Opener::SimFixed("width=300#limsiz=2t#segsiz=64k#bufsiz=4k#ckptsiz=1m#sync=always"), restart: Restart::Crash, retune: KF_SIM_RETUNE, copy_as: ".kf", ids: Some(KF_SIM_WIDTH) },
];

/// The width of the fixed-length kinds: every value the rounds make fits (the longest is
/// 300,000 bytes); a concatenation past it is refused, as the model expects.
const KF_WIDTH: usize = 300_000;

const KF_RETUNE: &[&str] = &["", "", "width=300000"];
/// The width of the `.kf` kinds on `SimVfs`: a fixed-length database is an array of slots of
/// the width, as long as its largest id, and `SimVfs` holds every file whole in memory.
const KF_SIM_WIDTH: usize = 300;
const KF_SIM_RETUNE: &[&str] = &["", "", "width=300"];

const KH_RETUNE: &[&str] = &["", "", "compress=lz4", "compress=none", "bnum=64"];

const SIM_PATH: &str = "/sim/db.kh";
const SIM_TREE_PATH: &str = "/sim/db.kb";
const SIM_FIXED_PATH: &str = "/sim/db.kf";

/// The kinds this run tests (`KURA_CONFORMANCE_KIND` picks one by label).
fn kinds() -> Vec<&'static KindUnderTest> {
    let only = std::env::var("KURA_CONFORMANCE_KIND").ok();
    let picked: Vec<_> = KINDS
        .iter()
        .filter(|k| only.as_deref().is_none_or(|l| l == k.label))
        .collect();
    assert!(
        !picked.is_empty(),
        "KURA_CONFORMANCE_KIND={only:?} names no kind (labels: {:?})",
        KINDS.iter().map(|k| k.label).collect::<Vec<_>>()
    );
    picked
}

/// Records a keyspace under test must not show, written when its database is made: in the
/// database itself and in a sibling keyspace, some by one batch across both.
fn write_beside(db: &dyn Store, params: &str) {
    let other = db.keyspace("other", params).unwrap();
    for k in ["k1", "k2", "k12", "t0-k1", "zz"] {
        db.put(k.as_bytes(), b"the database's").unwrap();
        other.put(k.as_bytes(), b"another keyspace's").unwrap();
    }
    let put = |key: &[u8]| BatchOp::Put {
        key: key.to_vec(),
        value: b"across".to_vec(),
        flags: 0,
        expires: 0,
    };
    db.write_across(&[("", put(b"k3")), ("other", put(b"k3"))])
        .unwrap();
}

/// Whether the records `write_beside` wrote are there, untouched.
fn check_beside(db: &dyn Store) {
    assert_eq!(db.get(b"k3").unwrap().unwrap().value, b"across");
    let other = db.keyspace("other", "").unwrap();
    assert_eq!(other.count(), 6, "the other keyspace's records");
    assert_eq!(
        other.get(b"zz").unwrap().unwrap().value,
        b"another keyspace's"
    );
    assert_eq!(other.get(b"k3").unwrap().unwrap().value, b"across");
}

/// An open database of one kind, with what it needs to restart.
struct Db {
    kind: &'static KindUnderTest,
    dir: tempfile::TempDir,
    fs: SimVfs,
    /// `None` only while restarting.
    handle: Option<Handle>,
    copies: u32,
}

enum Handle {
    Named(Arc<dyn Store>),
    /// A keyspace, and the database it belongs to (kept open).
    Keyspace(Arc<dyn Store>, Arc<dyn Store>),
    SimKeyspace(Arc<dyn Store>, Arc<DiskTree>),
    SimHashKeyspace(Arc<dyn Store>, Arc<DiskHash>),
    Sim(Arc<DiskHash>),
    SimTree(Arc<DiskTree>),
    SimFixed(Arc<FixedDb>),
}

impl Db {
    fn open(kind: &'static KindUnderTest) -> Db {
        let dir = tempfile::tempdir().unwrap();
        let fs = SimVfs::new();
        let handle = Self::open_handle(kind, dir.path(), &fs, OpenMode::Create);
        Db {
            kind,
            dir,
            fs,
            handle: Some(handle),
            copies: 0,
        }
    }

    fn open_handle(kind: &KindUnderTest, dir: &Path, fs: &SimVfs, mode: OpenMode) -> Handle {
        match kind.open {
            Opener::Name(name) => {
                let name = name.replace("{dir}", dir.to_str().unwrap());
                Handle::Named(kura_engine::open_as(&name, mode).unwrap().store)
            }
            Opener::SimDiskHash(params) => Handle::Sim(Arc::new(
                DiskHash::open_with(
                    Path::new(SIM_PATH),
                    &Params::parse(params).unwrap(),
                    Arc::new(fs.clone()),
                    false,
                )
                .unwrap(),
            )),
            Opener::SimDiskTree(params) => Handle::SimTree(Arc::new(
                DiskTree::open_mode(
                    Path::new(SIM_TREE_PATH),
                    &Params::parse(params).unwrap(),
                    Arc::new(fs.clone()),
                    mode,
                )
                .unwrap(),
            )),
            Opener::Keyspace(name, params) => {
                let name = name.replace("{dir}", dir.to_str().unwrap());
                let mode = if name.starts_with(['*', '+']) {
                    OpenMode::Create
                } else {
                    mode
                };
                let db = kura_engine::open_as(&name, mode).unwrap().store;
                let ks = db.keyspace("ks", params).unwrap();
                if mode == OpenMode::Create {
                    write_beside(&*db, params);
                }
                Handle::Keyspace(ks, db)
            }
            Opener::SimKeyspace(db_params, params) => {
                let db = Arc::new(
                    DiskTree::open_mode(
                        Path::new(SIM_TREE_PATH),
                        &Params::parse(db_params).unwrap(),
                        Arc::new(fs.clone()),
                        mode,
                    )
                    .unwrap(),
                );
                let ks = db.keyspace("ks", params).unwrap();
                if mode == OpenMode::Create {
                    write_beside(&*db, params);
                }
                Handle::SimKeyspace(ks, db)
            }
            Opener::SimHashKeyspace(db_params, params) => {
                let db = Arc::new(
                    DiskHash::open_mode(
                        Path::new(SIM_PATH),
                        &Params::parse(db_params).unwrap(),
                        Arc::new(fs.clone()),
                        mode,
                    )
                    .unwrap(),
                );
                let ks = db.keyspace("ks", params).unwrap();
                if mode == OpenMode::Create {
                    write_beside(&*db, params);
                }
                Handle::SimHashKeyspace(ks, db)
            }
            Opener::SimFixed(params) => Handle::SimFixed(Arc::new(
                FixedDb::open_mode(
                    Path::new(SIM_FIXED_PATH),
                    &Params::parse(params).unwrap(),
                    Arc::new(fs.clone()),
                    mode,
                )
                .unwrap(),
            )),
        }
    }

    fn store(&self) -> Arc<dyn Store> {
        match self.handle.as_ref().expect("open") {
            Handle::Named(s) => s.clone(),
            Handle::Keyspace(s, _) | Handle::SimKeyspace(s, _) | Handle::SimHashKeyspace(s, _) => {
                s.clone()
            }
            Handle::Sim(d) => d.clone(),
            Handle::SimTree(d) => d.clone(),
            Handle::SimFixed(d) => d.clone(),
        }
    }

    /// Restart as the kind defines it; `seed` picks how a crash tears unsynced writes.
    fn restart(&mut self, seed: u64) {
        let old = self.handle.take().expect("open");
        match (&self.kind.restart, old) {
            (Restart::None, old) => {
                self.handle = Some(old);
                return;
            }
            (Restart::Reopen, Handle::Named(s)) => s.close().unwrap(),
            (Restart::Reopen, Handle::Keyspace(s, db)) => {
                s.close().unwrap();
                // The database and its other keyspace kept their own records.
                db.close().unwrap();
                drop(db);
                let db = kura_engine::open_as(
                    &match self.kind.open {
                        Opener::Keyspace(name, _) => {
                            name.replace("{dir}", self.dir.path().to_str().unwrap())
                        }
                        _ => unreachable!(),
                    },
                    OpenMode::Existing,
                )
                .unwrap()
                .store;
                check_beside(&*db);
                db.close().unwrap();
            }
            (Restart::Crash, Handle::SimKeyspace(s, db)) => {
                drop(s);
                Arc::into_inner(db)
                    .expect("no other handle at a crash")
                    .abandon();
                self.fs.crash(CrashMode::Torn { seed });
                let handle =
                    Self::open_handle(self.kind, self.dir.path(), &self.fs, OpenMode::Existing);
                if let Handle::SimKeyspace(_, db) = &handle {
                    check_beside(&**db);
                }
                self.handle = Some(handle);
                return;
            }
            (Restart::Crash, Handle::SimHashKeyspace(s, db)) => {
                drop(s);
                Arc::into_inner(db)
                    .expect("no other handle at a crash")
                    .abandon();
                self.fs.crash(CrashMode::Torn { seed });
                let handle =
                    Self::open_handle(self.kind, self.dir.path(), &self.fs, OpenMode::Existing);
                if let Handle::SimHashKeyspace(_, db) = &handle {
                    check_beside(&**db);
                }
                self.handle = Some(handle);
                return;
            }
            (Restart::Reopen, Handle::SimKeyspace(..) | Handle::SimHashKeyspace(..)) => {
                panic!("a keyspace on SimVfs restarts by a crash")
            }
            (Restart::Reopen, Handle::Sim(d)) => d.close().unwrap(),
            (Restart::Reopen, Handle::SimTree(d)) => d.close().unwrap(),
            (Restart::Crash, Handle::SimTree(d)) => {
                Arc::into_inner(d)
                    .expect("no other handle at a crash")
                    .abandon();
                self.fs.crash(CrashMode::Torn { seed });
            }
            (Restart::Reopen, Handle::SimFixed(d)) => d.close().unwrap(),
            (Restart::Crash, Handle::Sim(d)) => {
                Arc::into_inner(d)
                    .expect("no other handle at a crash")
                    .abandon();
                self.fs.crash(CrashMode::Torn { seed });
            }
            (Restart::Crash, Handle::SimFixed(d)) => {
                Arc::into_inner(d)
                    .expect("no other handle at a crash")
                    .abandon();
                self.fs.crash(CrashMode::Torn { seed });
            }
            (Restart::Crash, Handle::Named(_) | Handle::Keyspace(..)) => {
                panic!("a crash restart needs a SimDiskHash opener")
            }
        }
        let handle = Self::open_handle(self.kind, self.dir.path(), &self.fs, OpenMode::Existing);
        self.handle = Some(handle);
    }
}

// ------------------------------------------------------------------------------ randomness

/// splitmix64: one seed, one sequence, on every platform.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn upto(&mut self, n: usize) -> usize {
        self.below(n as u64 + 1) as usize
    }
    fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }
    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len() as u64) as usize]
    }
}

/// Bytes that print short: keys and values in the operation log. Ordered as keys are: a
/// canonical decimal number (digits, no leading zero) by its value, before anything else,
/// which is ordered by its bytes (the order of an ordered kind's keys, record ids included).
#[derive(Clone, PartialEq, Eq)]
struct Bytes(Vec<u8>);

impl Bytes {
    /// The value of a canonical decimal number.
    fn number(&self) -> Option<u64> {
        let b = &self.0;
        let digits = !b.is_empty() && b.iter().all(u8::is_ascii_digit);
        if !digits || (b.len() > 1 && b[0] == b'0') || b.len() > 19 {
            return None;
        }
        std::str::from_utf8(b).ok()?.parse().ok()
    }
}

impl Ord for Bytes {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (self.number(), other.number()) {
            (Some(a), Some(b)) => a.cmp(&b),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => self.0.cmp(&other.0),
        }
    }
}

impl PartialOrd for Bytes {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown: String = self
            .0
            .iter()
            .take(24)
            .flat_map(|&b| std::ascii::escape_default(b))
            .map(char::from)
            .collect();
        if self.0.len() > 24 {
            write!(f, "b\"{shown}\"…({} bytes)", self.0.len())
        } else {
            write!(f, "b\"{shown}\"")
        }
    }
}

/// The keys of a round (or of one thread's part of it): `prefix` alone, then `prefix` + `k1`,
/// `k2`, … (so that prefixes nest: `k1` is one of `k10`'s), every seventh one binary. With
/// `ids`, record ids instead: from 1 (a thread's from `THREAD_IDS` times its number plus one).
/// Ids each thread of a round on a fixed-length database has to itself (thread `t` from
/// `THREAD_IDS × (t + 1)`): few, since the database is an array as long as its largest id.
const THREAD_IDS: u64 = 10_000;

#[derive(Clone, Debug)]
struct Keys {
    prefix: Vec<u8>,
    n: usize,
    /// The id before the first (`None`: byte keys).
    ids: Option<u64>,
    /// The longest value generated (a fixed-length database's width).
    value_cap: Option<usize>,
}

impl Keys {
    fn new(prefix: &str, n: usize, ids: bool) -> Keys {
        Keys {
            prefix: prefix.as_bytes().to_vec(),
            n,
            ids: ids.then_some(0),
            value_cap: None,
        }
    }
    /// The keys of thread `t` (disjoint from the round's and every other thread's).
    fn thread(&self, t: u8, n: usize) -> Keys {
        Keys {
            prefix: format!("t{t}/").into_bytes(),
            n,
            ids: self.ids.map(|_| THREAD_IDS * (u64::from(t) + 1)),
            value_cap: self.value_cap,
        }
    }
    /// Whether `k` is one of these keys (a thread's part of the model).
    fn owns(&self, k: &Bytes) -> bool {
        match (self.ids, k.number()) {
            (Some(base), Some(n)) => n > base && n <= base + THREAD_IDS,
            (Some(_), None) => false,
            (None, _) => k.starts_with(&self.prefix),
        }
    }
    fn key(&self, i: usize) -> Bytes {
        if let Some(base) = self.ids {
            return Bytes((base + i as u64 + 1).to_string().into_bytes());
        }
        let mut k = self.prefix.clone();
        match i {
            0 => {}
            i if i % 7 == 3 => k.extend_from_slice(&[0xff, 0, i as u8, (i >> 8) as u8]),
            i => k.extend_from_slice(format!("k{i}").as_bytes()),
        }
        Bytes(k)
    }
    /// Half the time one of the first 16 keys, so that even a large key space sees
    /// overwrites.
    fn pick(&self, rng: &mut Rng) -> Bytes {
        let n = if rng.chance(1, 2) {
            self.n.min(16)
        } else {
            self.n
        };
        self.key(rng.below(n as u64) as usize)
    }
    /// A prefix of a key, or a key (for `fwmkeys`, `range`, `jump`); with ids, an id (0 and
    /// ids past the last key included).
    fn probe(&self, rng: &mut Rng) -> Bytes {
        if let Some(base) = self.ids {
            let n = base + rng.below(self.n as u64 + 3);
            return Bytes(n.to_string().into_bytes());
        }
        let k = self.pick(rng);
        let cut = rng.upto(k.len() + 1).min(k.len());
        Bytes(k[..cut].to_vec())
    }
    /// What `fwmkeys` takes: a prefix (`probe`), or with ids an interval of them (`[3,10]`,
    /// `(min,7]`, `[5,max)`).
    fn fwm(&self, rng: &mut Rng) -> Bytes {
        if self.ids.is_none() {
            return self.probe(rng);
        }
        let bound = |rng: &mut Rng| match rng.below(6) {
            0 => b"min".to_vec(),
            1 => b"max".to_vec(),
            _ => self.probe(rng).0,
        };
        let lo = bound(rng);
        let hi = bound(rng);
        let open = if rng.chance(1, 2) { b'[' } else { b'(' };
        let close = if rng.chance(1, 2) { b']' } else { b')' };
        let mut s = vec![open];
        s.extend_from_slice(&lo);
        s.push(b',');
        s.extend_from_slice(&hi);
        s.push(close);
        Bytes(s)
    }
}

/// An expiry time: never, far in the future, or long past — never near now, so that what
/// is expired does not depend on when the test runs.
#[derive(Clone, Copy, Debug)]
enum Exp {
    Never,
    Future(u8),
    Past(u8),
}

/// The time the suite started, from which expiry times are set.
fn start() -> u64 {
    static START: OnceLock<u64> = OnceLock::new();
    *START.get_or_init(now_secs)
}

impl Exp {
    fn at(self) -> u64 {
        const YEAR: u64 = 365 * 86_400;
        match self {
            Exp::Never => 0,
            Exp::Future(i) => start() + 10 * YEAR + u64::from(i),
            Exp::Past(i) if i % 2 == 0 => 1 + u64::from(i),
            Exp::Past(i) => start() - 3_600 - u64::from(i),
        }
    }
    fn gen(rng: &mut Rng) -> Exp {
        match rng.below(10) {
            0 | 1 => Exp::Future(rng.below(4) as u8),
            2 => Exp::Past(rng.below(4) as u8),
            _ => Exp::Never,
        }
    }
}

/// Whether an expiry time (as `Exp::at` makes them) is past.
fn expired(expires: u64) -> bool {
    expires != 0 && expires < start()
}

/// A version to compare with: 0, the record's own, or one it does not have.
#[derive(Clone, Copy, Debug)]
enum Ver {
    Zero,
    Current,
    Stale(u8),
}

impl Ver {
    fn gen(rng: &mut Rng) -> Ver {
        match rng.below(5) {
            0 => Ver::Zero,
            1 | 2 => Ver::Current,
            _ => Ver::Stale(1 + rng.below(3) as u8),
        }
    }
    fn resolve(self, cur: Option<&Rec>) -> u64 {
        match (self, cur) {
            (Ver::Zero, _) => 0,
            (Ver::Current, Some(c)) => c.version,
            (Ver::Current, None) => 1,
            (Ver::Stale(d), Some(c)) => c.version.wrapping_add(u64::from(d)),
            (Ver::Stale(d), None) => u64::from(d),
        }
    }
}

/// A value of at most `cap` bytes (`gen_any_value` cut short).
fn gen_value(rng: &mut Rng, cap: Option<usize>) -> Bytes {
    let mut v = gen_any_value(rng);
    if let Some(c) = cap {
        v.0.truncate(c);
    }
    v
}

fn gen_any_value(rng: &mut Rng) -> Bytes {
    let random = |rng: &mut Rng, n: usize| {
        let mut v: Vec<u8> = (0..n.div_ceil(8))
            .flat_map(|_| rng.next().to_le_bytes())
            .collect();
        v.truncate(n);
        v
    };
    Bytes(match rng.below(200) {
        0..=59 => {
            let n = rng.upto(12);
            random(rng, n)
        }
        60..=79 => random(rng, 4),
        80..=94 => random(rng, 8),
        95..=104 => ((rng.below(2000) as f64 - 1000.0) / 4.0)
            .to_le_bytes()
            .to_vec(),
        105..=139 => {
            let n = match rng.below(4) {
                0 => rng.below(100),
                1 => rng.next(),
                2 => u64::MAX - rng.below(3),
                _ => rng.below(1 << 20),
            };
            let mut v = n.to_string().into_bytes();
            match rng.below(8) {
                0 => v.extend_from_slice(b"  "),
                1 => v.insert(0, b' '),
                2 => v.push(b'x'),
                3 => v.extend_from_slice(b"9999999999999999999999"),
                _ => {}
            }
            v
        }
        140..=179 => {
            let n = 100 + rng.upto(3000);
            random(rng, n)
        }
        180..=198 => {
            let n = 5_000 + rng.upto(65_000);
            random(rng, n)
        }
        // Past the on-disk hash's large-value path (256 KiB).
        _ => {
            let n = 260_000 + rng.upto(40_000);
            random(rng, n)
        }
    })
}

// ---------------------------------------------------------------------------------- operations

/// One step of a round. The operations on keys (`Get` to `TooLarge`) also run in threads;
/// the others act on the whole database.
#[derive(Clone, Debug)]
enum Op {
    /// `get` and `vsiz`.
    Get(Bytes),
    /// `view`, and `view_shared` with `min`.
    View {
        key: Bytes,
        min: usize,
    },
    /// `put_with`, or `put` when `plain`.
    Put {
        key: Bytes,
        value: Bytes,
        flags: u32,
        exp: Exp,
        plain: bool,
    },
    PutKeep {
        key: Bytes,
        value: Bytes,
        flags: u32,
        exp: Exp,
    },
    Replace {
        key: Bytes,
        value: Bytes,
        flags: u32,
        exp: Exp,
    },
    Cas {
        key: Bytes,
        ver: Ver,
        value: Bytes,
        flags: u32,
        exp: Exp,
    },
    /// `putcat` or `prepend` (`front`) when `create`, else `concat` of an existing record.
    Cat {
        key: Bytes,
        value: Bytes,
        front: bool,
        create: bool,
    },
    /// `putshl`.
    Shl {
        key: Bytes,
        value: Bytes,
        width: usize,
    },
    Out(Bytes),
    OutIf {
        key: Bytes,
        ver: Ver,
    },
    Touch {
        key: Bytes,
        exp: Exp,
    },
    AddInt {
        key: Bytes,
        delta: i32,
    },
    AddDouble {
        key: Bytes,
        delta: f64,
    },
    /// `incr_decimal` when `plain`, else `incr_decimal_if` with the version `ver`.
    Incr {
        key: Bytes,
        delta: u64,
        decr: bool,
        ver: Ver,
        plain: bool,
    },
    GetMulti(Vec<Bytes>),
    /// `write_batch` of puts and removes (`None`); with `poison`, a put of a key too long
    /// is inserted there, and the batch must change nothing.
    Batch {
        items: Vec<(Bytes, Option<Put>)>,
        poison: Option<usize>,
    },
    /// `accept` with a visitor that keeps, touches or removes whatever it is shown.
    Accept {
        key: Bytes,
        decide: Decide,
    },
    /// A write with a key longer than every kind accepts.
    TooLarge(u8),
    // Whole-database operations (never in a thread).
    /// `check_cursor`.
    Cursor {
        writes: bool,
        seed: u64,
    },
    Fwm {
        prefix: Bytes,
        max: usize,
    },
    /// `range` (refused by unordered kinds).
    Range {
        from: Bytes,
        to: Option<Bytes>,
        max: usize,
    },
    Count,
    Sync,
    Check,
    /// `optimize` with one of the kind's `retune` parameters.
    Optimize(u8),
    Vanish,
    CopyTo,
    /// What the kind's `Restart` says; the number seeds a crash's torn writes.
    Restart(u64),
    /// `put` of `n` keys from the `from`-th on: grows the index.
    Fill {
        from: usize,
        n: usize,
        seed: u64,
    },
    /// `threads` threads run `ops` operations each on keys of their own.
    Threads {
        threads: u8,
        ops: u16,
        seed: u64,
    },
}

/// Append (`front`: prepend) to an existing record only, as memcached does: the new metadata,
/// `None` when the record is absent.
fn concat_existing(
    db: &dyn Store,
    k: &[u8],
    v: &[u8],
    front: bool,
) -> kura_engine::Result<Option<Meta>> {
    Ok(match db.concat_if(k, v, front, 0, &|_, _| true)? {
        Outcome::Stored(m) => Some(m),
        Outcome::NotFound => None,
        other => panic!("concat_if without cas or limit: {other:?}"),
    })
}

/// A put in a batch: value, flags, expiry.
type Put = (Bytes, u32, Exp);

#[derive(Clone, Copy, Debug)]
enum Decide {
    Keep,
    Touch(Exp),
    Remove,
}

fn gen_flags(rng: &mut Rng) -> u32 {
    if rng.chance(1, 2) {
        0
    } else {
        rng.next() as u32
    }
}

/// One operation on the keys of `keys`; `whole` allows whole-database operations too.
fn gen_op(rng: &mut Rng, keys: &Keys, whole: bool) -> Op {
    let top = if whole { 1000 } else { 900 };
    let k = keys.pick(rng);
    match rng.below(top) {
        0..=79 => Op::Get(k),
        80..=109 => Op::View {
            key: k,
            min: rng.pick(&[0, 1, 64, 1 << 20]),
        },
        110..=219 => Op::Put {
            key: k,
            value: gen_value(rng, keys.value_cap),
            flags: gen_flags(rng),
            exp: Exp::gen(rng),
            plain: rng.chance(1, 4),
        },
        220..=259 => Op::PutKeep {
            key: k,
            value: gen_value(rng, keys.value_cap),
            flags: gen_flags(rng),
            exp: Exp::gen(rng),
        },
        260..=289 => Op::Replace {
            key: k,
            value: gen_value(rng, keys.value_cap),
            flags: gen_flags(rng),
            exp: Exp::gen(rng),
        },
        290..=339 => Op::Cas {
            key: k,
            ver: Ver::gen(rng),
            value: gen_value(rng, keys.value_cap),
            flags: gen_flags(rng),
            exp: Exp::gen(rng),
        },
        340..=399 => Op::Cat {
            key: k,
            value: gen_value(rng, keys.value_cap),
            front: rng.chance(1, 3),
            create: rng.chance(3, 4),
        },
        400..=419 => Op::Shl {
            key: k,
            value: gen_value(rng, keys.value_cap),
            width: rng
                .pick(&[0, 1, 3, 8, 100, 5000])
                .min(keys.value_cap.unwrap_or(usize::MAX)),
        },
        420..=479 => Op::Out(k),
        480..=509 => Op::OutIf {
            key: k,
            ver: Ver::gen(rng),
        },
        510..=549 => Op::Touch {
            key: k,
            exp: Exp::gen(rng),
        },
        550..=589 => Op::AddInt {
            key: k,
            delta: match rng.below(4) {
                0 => i32::MAX,
                1 => i32::MIN,
                _ => rng.below(200) as i32 - 100,
            },
        },
        590..=629 => Op::AddDouble {
            key: k,
            delta: match rng.below(8) {
                0 => f64::MAX,
                1 => f64::INFINITY,
                2 => f64::NAN,
                _ => (rng.below(400) as f64 - 200.0) / 8.0,
            },
        },
        630..=689 => Op::Incr {
            key: k,
            delta: match rng.below(4) {
                0 => u64::MAX - rng.below(3),
                1 => rng.next(),
                _ => rng.below(50),
            },
            decr: rng.chance(1, 3),
            ver: Ver::gen(rng),
            plain: rng.chance(1, 2),
        },
        690..=719 => Op::GetMulti((0..rng.upto(6)).map(|_| keys.pick(rng)).collect()),
        720..=789 => {
            let items = (0..rng.upto(8))
                .map(|_| {
                    let k = keys.pick(rng);
                    let v = rng.chance(2, 3).then(|| {
                        (
                            gen_value(rng, keys.value_cap),
                            gen_flags(rng),
                            Exp::gen(rng),
                        )
                    });
                    (k, v)
                })
                .collect::<Vec<_>>();
            let poison = rng.chance(1, 8).then(|| rng.upto(items.len()));
            Op::Batch { items, poison }
        }
        790..=869 => Op::Accept {
            key: k,
            decide: match rng.below(3) {
                0 => Decide::Keep,
                1 => Decide::Touch(Exp::gen(rng)),
                _ => Decide::Remove,
            },
        },
        870..=899 => Op::TooLarge(rng.below(6) as u8),
        // Whole-database operations.
        900..=914 => Op::Cursor {
            writes: rng.chance(1, 2),
            seed: rng.next(),
        },
        915..=931 => Op::Fwm {
            prefix: keys.fwm(rng),
            max: rng.pick(&[0, 1, 2, 5, 1000]),
        },
        932..=948 => Op::Range {
            from: keys.probe(rng),
            to: rng.chance(2, 3).then(|| keys.probe(rng)),
            max: rng.pick(&[0, 1, 3, 1000]),
        },
        949..=953 => Op::Count,
        954..=958 => Op::Sync,
        959..=962 => Op::Check,
        963..=966 => Op::Optimize(rng.next() as u8),
        967..=968 => Op::Vanish,
        969..=970 => Op::CopyTo,
        971..=980 => Op::Restart(rng.next()),
        981..=989 => Op::Fill {
            from: rng.upto(keys.n),
            n: rng.upto(keys.n.min(600)),
            seed: rng.next(),
        },
        _ => Op::Threads {
            threads: 2 + rng.below(2) as u8,
            ops: 20 + rng.below(80) as u16,
            seed: rng.next(),
        },
    }
}

// ---------------------------------------------------------------------------------- the model

/// A record as the model knows it.
#[derive(Clone, Debug, PartialEq)]
struct Rec {
    value: Vec<u8>,
    flags: u32,
    expires: u64,
    version: u64,
}

impl Rec {
    fn of(value: &[u8], meta: Meta) -> Rec {
        Rec {
            value: value.to_vec(),
            flags: meta.flags,
            expires: meta.expires,
            version: meta.version,
        }
    }
    fn meta(&self) -> Meta {
        Meta {
            flags: self.flags,
            expires: self.expires,
            version: self.version,
        }
    }
}

/// What a store must hold.
#[derive(Default)]
struct Model {
    live: BTreeMap<Bytes, Rec>,
    /// Keys whose newest record was stored already expired (written or touched into the
    /// past): they read as absent, but a kind may count them until it reclaims them.
    expired: BTreeSet<Bytes>,
    /// The longest value the kind stores (a fixed-length database's width): a write of a
    /// longer one is refused with `TooLarge` and changes nothing.
    width: Option<usize>,
}

impl Model {
    fn get(&self, key: &[u8]) -> Option<&Rec> {
        self.live.get(&Bytes(key.to_vec()))
    }

    /// The newest record of `key` is `rec` (live, or already expired).
    fn set(&mut self, key: &[u8], rec: Rec) {
        let key = Bytes(key.to_vec());
        if expired(rec.expires) {
            self.live.remove(&key);
            self.expired.insert(key);
        } else {
            self.expired.remove(&key);
            self.live.insert(key, rec);
        }
    }

    fn remove(&mut self, key: &[u8]) -> Option<Rec> {
        self.live.remove(&Bytes(key.to_vec()))
    }

    /// A write of `value`, `flags`, `expires` to `key` returned `meta`: check it and take it.
    fn wrote(&mut self, key: &[u8], value: Vec<u8>, flags: u32, expires: u64, meta: Meta) {
        let k = Bytes(key.to_vec());
        assert_eq!(
            (meta.flags, meta.expires),
            (flags, expires),
            "{k:?}: the metadata a write returned"
        );
        self.versioned(key, meta.version);
        self.set(
            key,
            Rec {
                value,
                flags,
                expires,
                version: meta.version,
            },
        );
    }

    /// Check a new version of `key`: never 0, not the one it replaced.
    fn versioned(&self, key: &[u8], version: u64) {
        assert_ne!(
            version,
            0,
            "{:?}: a stored record has version 0",
            Bytes(key.to_vec())
        );
        if let Some(old) = self.get(key) {
            assert_ne!(
                version,
                old.version,
                "{:?}: a write kept the version of the record it replaced",
                Bytes(key.to_vec())
            );
        }
    }

    /// After a write that returns no metadata: read `key` back, expect `value`, `flags`,
    /// `expires` under a new version, and take it.
    fn learn(&mut self, db: &dyn Store, key: &[u8], value: Vec<u8>, flags: u32, expires: u64) {
        let got = db.get(key).unwrap();
        if expired(expires) {
            assert_eq!(
                got,
                None,
                "{:?}: written already expired",
                Bytes(key.to_vec())
            );
            self.set(
                key,
                Rec {
                    value,
                    flags,
                    expires,
                    version: 1,
                },
            );
            return;
        }
        let got = got.unwrap_or_else(|| panic!("{:?}: written, then absent", Bytes(key.to_vec())));
        assert_eq!(
            (&got.value, got.meta.flags, got.meta.expires),
            (&value, flags, expires),
            "{:?}: read back after a write",
            Bytes(key.to_vec())
        );
        self.versioned(key, got.meta.version);
        self.set(
            key,
            Rec {
                value,
                flags,
                expires,
                version: got.meta.version,
            },
        );
    }

    /// `got` is what the store read for `key`: the model's live record, or nothing.
    fn expect(&self, key: &[u8], got: Option<Rec>, what: &str) {
        assert_eq!(
            got.as_ref(),
            self.get(key),
            "{what} {:?}",
            Bytes(key.to_vec())
        );
    }

    /// The lowest and highest `count` allowed.
    fn bounds(&self) -> (u64, u64) {
        let live = self.live.len() as u64;
        (live, live + self.expired.len() as u64)
    }

    /// Take out the records of `owned` keys (one thread's part).
    fn take_part(&mut self, owned: &Keys) -> Model {
        let mut part = Model {
            width: self.width,
            ..Model::default()
        };
        let keys: Vec<Bytes> = self
            .live
            .keys()
            .filter(|k| owned.owns(k))
            .cloned()
            .collect();
        for k in keys {
            let r = self.live.remove(&k).unwrap();
            part.live.insert(k, r);
        }
        let keys: Vec<Bytes> = self
            .expired
            .iter()
            .filter(|k| owned.owns(k))
            .cloned()
            .collect();
        for k in keys {
            self.expired.remove(&k);
            part.expired.insert(k);
        }
        part
    }

    fn absorb(&mut self, part: Model) {
        self.live.extend(part.live);
        self.expired.extend(part.expired);
    }
}

fn check_count(db: &dyn Store, m: &Model) {
    let (lo, hi) = m.bounds();
    let n = db.count();
    assert!(
        (lo..=hi).contains(&n),
        "count {n}: {lo} live records, {} written already expired",
        hi - lo
    );
}

fn too_large(r: kura_engine::Result<impl std::fmt::Debug>, what: &str) {
    assert!(
        matches!(r, Err(Error::TooLarge(_))),
        "{what} with a key of {} bytes: {r:?}",
        MAX_KEY_LEN + 1
    );
}

fn too_large_value(r: kura_engine::Result<()>, what: &str) {
    assert!(matches!(r, Err(Error::TooLarge(_))), "{what}: {r:?}");
}

/// The ids `fwmkeys` with the interval `s` covers (inclusive; empty when `lo > hi`) in a
/// database whose ids with records are `ids` (ascending), as Tokyo Cabinet's `tcfdbrange4`
/// reads an interval and Kura cuts it to the ids there are.
fn model_interval(s: &[u8], ids: &[u64]) -> (u64, u64) {
    let (min, max) = (
        ids.first().copied().unwrap_or(0),
        ids.last().copied().unwrap_or(0),
    );
    let s = std::str::from_utf8(s).expect("intervals the suite makes are text");
    let (lo, hi) = s[1..s.len() - 1].split_once(',').expect("an interval");
    let val = |b: &str| -> i128 {
        match b {
            "min" => i128::from(min),
            "max" => i128::from(max),
            n => n.parse().expect("an id"),
        }
    };
    let lo = val(lo) + i128::from(s.starts_with('('));
    let hi = val(hi) - i128::from(s.ends_with(')'));
    if max == 0 {
        return (1, 0);
    }
    let lo = lo.max(i128::from(min)).max(1);
    let hi = hi.min(i128::from(max));
    if lo > hi {
        (1, 0)
    } else {
        (lo as u64, hi as u64)
    }
}

/// memcached's decimal counter form, written from the trait's documentation: digits (1 to 20,
/// no overflow), then optionally spaces.
fn model_decimal(v: &[u8]) -> Option<u64> {
    // memcached reads a counter with `strtoull` (on the value and its "\r\n"): white space,
    // a sign, digits, then the end or white space; a result that reads as negative is not a
    // number ("-0" is 0).
    let space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let mut i = v.iter().take_while(|&&b| space(b)).count();
    let neg = match v.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let start = i;
    let mut n = 0u64;
    while let Some(&d) = v.get(i).filter(|b| b.is_ascii_digit()) {
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        i += 1;
    }
    if i == start || v.get(i).is_some_and(|&b| !space(b)) {
        return None;
    }
    if !neg {
        return Some(n);
    }
    let n = n.wrapping_neg();
    ((n as i64) >= 0).then_some(n)
}

/// What memcached stores for a counter `n` over `old_len` bytes: padded with spaces.
fn model_counter(n: u64, old_len: usize) -> Vec<u8> {
    let mut v = n.to_string().into_bytes();
    if v.len() < old_len {
        v.resize(old_len, b' ');
    }
    v
}

/// Apply one operation on keys (the ones threads run too) to `db` and to the model, checking
/// what the store answers. Whole-database operations are `Runner::apply`'s.
fn apply_key_op(db: &dyn Store, m: &mut Model, op: &Op) {
    match op {
        Op::Get(k) => {
            let got = db.get(k).unwrap();
            m.expect(k, got.map(|r| Rec::of(&r.value, r.meta)), "get");
            assert_eq!(
                db.vsiz(k).unwrap(),
                m.get(k).map(|r| r.value.len()),
                "vsiz {k:?}"
            );
        }
        Op::View { key: k, min } => {
            let mut seen = None;
            let found = db
                .view(k, &mut |v, meta| seen = Some(Rec::of(v, meta)))
                .unwrap();
            assert_eq!(
                found,
                seen.is_some(),
                "view {k:?}: found without a call, or a call not found"
            );
            m.expect(k, seen, "view");
            let mut seen = None;
            let found = db
                .view_shared(k, *min, &mut |v, meta| {
                    seen = Some(Rec::of(v.bytes(), meta))
                })
                .unwrap();
            assert_eq!(found, seen.is_some(), "view_shared {k:?}");
            m.expect(k, seen, "view_shared");
        }
        Op::Put {
            key: k,
            value: v,
            flags,
            exp,
            plain,
        } => {
            let (flags, expires) = if *plain { (0, 0) } else { (*flags, exp.at()) };
            let meta = if *plain {
                db.put(k, v)
            } else {
                db.put_with(k, v, flags, expires)
            }
            .unwrap();
            m.wrote(k, v.to_vec(), flags, expires, meta);
        }
        Op::PutKeep {
            key: k,
            value: v,
            flags,
            exp,
        } => {
            let r = db.putkeep(k, v, *flags, exp.at()).unwrap();
            match (m.get(k), r) {
                (Some(_), Outcome::Exists) => {}
                (None, Outcome::Stored(meta)) => m.wrote(k, v.to_vec(), *flags, exp.at(), meta),
                (cur, r) => panic!("putkeep {k:?} over {cur:?}: {r:?}"),
            }
        }
        Op::Replace {
            key: k,
            value: v,
            flags,
            exp,
        } => {
            let r = db.replace(k, v, *flags, exp.at()).unwrap();
            match (m.get(k), r) {
                (None, Outcome::NotFound) => {}
                (Some(_), Outcome::Stored(meta)) => m.wrote(k, v.to_vec(), *flags, exp.at(), meta),
                (cur, r) => panic!("replace {k:?} over {cur:?}: {r:?}"),
            }
        }
        Op::Cas {
            key: k,
            ver,
            value: v,
            flags,
            exp,
        } => {
            let version = ver.resolve(m.get(k));
            let r = db.cas(k, version, v, *flags, exp.at()).unwrap();
            match (m.get(k), r) {
                (None, Outcome::NotFound) => {}
                (Some(c), Outcome::VersionMismatch) if c.version != version => {}
                (Some(c), Outcome::Stored(meta)) if c.version == version => {
                    m.wrote(k, v.to_vec(), *flags, exp.at(), meta)
                }
                (cur, r) => panic!("cas {k:?} version {version} over {cur:?}: {r:?}"),
            }
        }
        Op::Cat {
            key: k,
            value: v,
            front,
            create,
        } => {
            let joined = m.get(k).map_or(v.len(), |c| c.value.len() + v.len());
            if m.width.is_some_and(|w| joined > w) && (m.get(k).is_some() || *create) {
                let r = match (*front, *create) {
                    (false, true) => db.putcat(k, v).map(|_| ()),
                    (true, true) => db.prepend(k, v).map(|_| ()),
                    (front, false) => concat_existing(db, k, v, front).map(|_| ()),
                };
                too_large_value(r, "a concatenation past the width");
                let got = db.get(k).unwrap().map(|r| Rec::of(&r.value, r.meta));
                m.expect(k, got, "after a refused concatenation");
                return;
            }
            let r = match (*front, *create) {
                (false, true) => Some(db.putcat(k, v).unwrap()),
                (true, true) => Some(db.prepend(k, v).unwrap()),
                (front, false) => concat_existing(db, k, v, front).unwrap(),
            };
            match (m.get(k).cloned(), r) {
                (Some(c), Some(meta)) => {
                    let joined = if *front {
                        [&v[..], &c.value].concat()
                    } else {
                        [&c.value, &v[..]].concat()
                    };
                    m.wrote(k, joined, c.flags, c.expires, meta);
                }
                (None, Some(meta)) if *create => m.wrote(k, v.to_vec(), 0, 0, meta),
                (None, None) if !*create => {}
                (cur, r) => {
                    panic!("concat {k:?} (front {front}, create {create}) over {cur:?}: {r:?}")
                }
            }
        }
        Op::Shl {
            key: k,
            value: v,
            width,
        } => {
            let meta = db.putshl(k, v, *width).unwrap();
            // Tyrant's: an absent record gets the whole value; an existing one the last
            // `width` bytes of the two joined.
            match m.get(k).cloned() {
                None => m.wrote(k, v.to_vec(), 0, 0, meta),
                Some(c) => {
                    let mut joined = c.value.clone();
                    joined.extend_from_slice(v);
                    let cut = joined.len().saturating_sub(*width);
                    m.wrote(k, joined[cut..].to_vec(), c.flags, c.expires, meta);
                }
            }
        }
        Op::Out(k) => {
            let had = m.remove(k).is_some();
            assert_eq!(db.out(k).unwrap(), had, "out {k:?}");
        }
        Op::OutIf { key: k, ver } => {
            let version = ver.resolve(m.get(k));
            let r = db.out_if(k, version).unwrap();
            match (m.get(k), r) {
                (None, Outcome::NotFound) => {}
                (Some(c), Outcome::VersionMismatch) if version != 0 && c.version != version => {}
                (Some(c), Outcome::Deleted) if version == 0 || c.version == version => {
                    m.remove(k);
                }
                (cur, r) => panic!("out_if {k:?} version {version} over {cur:?}: {r:?}"),
            }
        }
        Op::Touch { key: k, exp } => {
            let r = db.touch(k, exp.at()).unwrap();
            match m.get(k).cloned() {
                None => assert_eq!(r, None, "touch of absent {k:?}"),
                Some(c) => {
                    let touched = Rec {
                        expires: exp.at(),
                        ..c
                    };
                    assert_eq!(
                        r,
                        Some(touched.meta()),
                        "touch {k:?}: the version stays, the expiry changes"
                    );
                    m.set(k, touched);
                }
            }
        }
        Op::AddInt { key: k, delta } => {
            let r = db.addint(k, *delta);
            let cur = m.get(k).cloned();
            match cur.as_ref().map(|c| (<[u8; 4]>::try_from(&c.value[..]), c)) {
                None => {
                    assert_eq!(r.unwrap(), *delta, "addint on absent {k:?}");
                    m.learn(db, k, delta.to_le_bytes().to_vec(), 0, 0);
                }
                Some((Ok(b), c)) => {
                    let n = i32::from_le_bytes(b).wrapping_add(*delta);
                    assert_eq!(r.unwrap(), n, "addint {k:?}");
                    m.learn(db, k, n.to_le_bytes().to_vec(), c.flags, c.expires);
                }
                Some((Err(_), _)) => {
                    assert!(
                        matches!(r, Err(Error::NotNumeric)),
                        "addint on a value of {} bytes: {r:?}",
                        cur.unwrap().value.len()
                    );
                    let got = db.get(k).unwrap().map(|r| Rec::of(&r.value, r.meta));
                    m.expect(k, got, "after a failed addint");
                }
            }
        }
        Op::AddDouble { key: k, delta } => {
            let r = db.adddouble(k, *delta);
            let cur = m.get(k).cloned();
            // Tokyo Cabinet's: an absent record becomes `delta` itself; any sum is stored,
            // an infinity or NaN included.
            let next = match &cur {
                None => Some((*delta, 0, 0)),
                Some(c) => <[u8; 8]>::try_from(&c.value[..])
                    .ok()
                    .map(|b| (f64::from_le_bytes(b) + delta, c.flags, c.expires)),
            };
            match next {
                Some((n, flags, expires)) => {
                    assert_eq!(r.unwrap().to_bits(), n.to_bits(), "adddouble {k:?}");
                    m.learn(db, k, n.to_le_bytes().to_vec(), flags, expires);
                }
                _ => {
                    assert!(
                        matches!(r, Err(Error::NotNumeric)),
                        "adddouble {k:?} over {cur:?}: {r:?}"
                    );
                    let got = db.get(k).unwrap().map(|r| Rec::of(&r.value, r.meta));
                    m.expect(k, got, "after a failed adddouble");
                }
            }
        }
        Op::Incr {
            key: k,
            delta,
            decr,
            ver,
            plain,
        } => {
            let cas = if *plain { 0 } else { ver.resolve(m.get(k)) };
            let r = if *plain {
                db.incr_decimal(k, *delta, *decr).map(|r| match r {
                    Some((n, meta)) => Counted::Done(n, meta),
                    None => Counted::NotFound,
                })
            } else {
                db.incr_decimal_if(k, *delta, *decr, cas)
            };
            let cur = m.get(k).cloned();
            match (&cur, r) {
                (None, Ok(Counted::NotFound)) => {}
                (Some(c), Ok(Counted::VersionMismatch)) if cas != 0 && cas != c.version => {}
                (Some(c), r) if cas == 0 || cas == c.version => {
                    match (model_decimal(&c.value), r) {
                        (None, Err(Error::NotNumeric)) => {
                            let got = db.get(k).unwrap().map(|r| Rec::of(&r.value, r.meta));
                            m.expect(k, got, "after a failed incr");
                        }
                        (Some(n), Ok(Counted::Done(got, meta))) => {
                            let n = if *decr {
                                n.saturating_sub(*delta)
                            } else {
                                n.wrapping_add(*delta)
                            };
                            assert_eq!(got, n, "incr {k:?} of {:?}", Bytes(c.value.clone()));
                            let stored = model_counter(n, c.value.len());
                            m.wrote(k, stored, c.flags, c.expires, meta);
                        }
                        (n, r) => panic!(
                            "incr {k:?} of {:?} (decimal {n:?}): {r:?}",
                            Bytes(c.value.clone())
                        ),
                    }
                }
                (cur, r) => panic!("incr {k:?} with cas {cas} over {cur:?}: {r:?}"),
            }
        }
        Op::GetMulti(keys) => {
            let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
            let got = db.get_multi(&refs).unwrap();
            assert_eq!(got.len(), keys.len(), "get_multi answers once per key");
            for (k, r) in keys.iter().zip(got) {
                m.expect(k, r.map(|r| Rec::of(&r.value, r.meta)), "get_multi");
            }
        }
        Op::Batch { items, poison } => {
            let mut ops: Vec<BatchOp> = items
                .iter()
                .map(|(k, v)| match v {
                    Some((v, flags, exp)) => BatchOp::Put {
                        key: k.to_vec(),
                        value: v.to_vec(),
                        flags: *flags,
                        expires: exp.at(),
                    },
                    None => BatchOp::Remove { key: k.to_vec() },
                })
                .collect();
            if let Some(at) = poison {
                let huge = BatchOp::Put {
                    key: vec![b'x'; MAX_KEY_LEN + 1],
                    value: Vec::new(),
                    flags: 0,
                    expires: 0,
                };
                ops.insert((*at).min(ops.len()), huge);
                too_large(db.write_batch(&ops), "a batch");
                for (k, _) in items {
                    let got = db.get(k).unwrap().map(|r| Rec::of(&r.value, r.meta));
                    m.expect(k, got, "after a refused batch");
                }
                return;
            }
            db.write_batch(&ops).unwrap();
            // In order: the last operation on a key decides.
            let mut last: BTreeMap<&Bytes, &Option<Put>> = BTreeMap::new();
            for (k, v) in items {
                last.insert(k, v);
            }
            for (k, v) in last {
                match v {
                    Some((v, flags, exp)) => m.learn(db, k, v.to_vec(), *flags, exp.at()),
                    None => {
                        m.remove(k);
                        assert_eq!(db.get(k).unwrap(), None, "{k:?} removed by a batch");
                    }
                }
            }
        }
        Op::Accept { key: k, decide } => {
            let cur = m.get(k).cloned();
            let mut calls = 0;
            let mut seen = Vec::new();
            let r = db
                .accept(k, &mut |c| {
                    calls += 1;
                    seen.push(c.map(|c| Rec::of(c.value, c.meta)));
                    match decide {
                        Decide::Keep => Decision::Keep,
                        Decide::Touch(e) => Decision::Touch { expires: e.at() },
                        Decide::Remove => Decision::Remove,
                    }
                })
                .unwrap();
            assert!(calls >= 1, "accept {k:?} never called its visitor");
            for s in seen {
                assert_eq!(s, cur, "accept {k:?}: what the visitor was shown");
            }
            match (decide, cur) {
                (Decide::Keep, cur) => assert_eq!(r, cur.map(|c| c.meta()), "accept {k:?} keeping"),
                (Decide::Touch(_), None) | (Decide::Remove, None) => {
                    assert_eq!(r, None, "accept {k:?} on an absent record")
                }
                (Decide::Touch(e), Some(c)) => {
                    let touched = Rec {
                        expires: e.at(),
                        ..c
                    };
                    assert_eq!(r, Some(touched.meta()), "accept {k:?} touching");
                    m.set(k, touched);
                }
                (Decide::Remove, Some(_)) => {
                    assert_eq!(r, None, "accept {k:?} removing");
                    m.remove(k);
                }
            }
        }
        Op::TooLarge(which) => {
            let k = vec![b'k'; MAX_KEY_LEN + 1];
            match which {
                0 => too_large(db.put_with(&k, b"v", 1, 0), "put_with"),
                1 => too_large(db.putkeep(&k, b"v", 0, 0), "putkeep"),
                2 => too_large(db.replace(&k, b"v", 0, 0), "replace"),
                3 => too_large(db.cas(&k, 1, b"v", 0, 0), "cas"),
                4 => too_large(db.putshl(&k, b"v", 10), "putshl"),
                _ => too_large(db.putcat(&k, b"v"), "putcat"),
            }
        }
        other => panic!("{other:?} is not an operation on keys"),
    }
}

// ---------------------------------------------------------------------------------- the cursor

/// The cursor part of the suite, in one place so that new cursor operations join here.
///
/// A walk shows every live record exactly once with its value and metadata, in strictly
/// increasing key order on ordered kinds. With `writes`, records are written and removed
/// while it runs: those may or may not be seen, every other one still exactly once.
/// `for_each_record` shows the same records and stops when asked. `jump` on an ordered
/// kind goes to the first key at or after its argument (forward and back); an unordered
/// kind refuses it.
fn check_cursor(db: &dyn Store, m: &mut Model, keys: &Keys, writes: bool, seed: u64) {
    let mut rng = Rng::new(seed);
    let ordered = db.kind().ordered();
    let before: BTreeMap<Bytes, Rec> = m.live.clone();
    let mut touched = BTreeSet::new();
    let mut seen: BTreeMap<Bytes, (usize, Record)> = BTreeMap::new();
    let mut last: Option<Vec<u8>> = None;
    // A third of the walks with writes also see an optimize.
    let optimize_at = (writes && rng.chance(1, 3)).then(|| rng.upto(m.live.len()));
    let mut step = 0;

    let mut cur = db.cursor().unwrap();
    while let Some((k, r)) = cur.next().unwrap() {
        if ordered {
            assert!(
                last.as_ref()
                    .is_none_or(|l| Bytes(l.clone()) < Bytes(k.clone())),
                "cursor out of key order: {:?} after {:?}",
                Bytes(k.clone()),
                last.clone().map(Bytes)
            );
            last = Some(k.clone());
        }
        seen.entry(Bytes(k)).or_insert((0, r)).0 += 1;
        step += 1;
        if optimize_at == Some(step) {
            // Maintenance changes no record: every one is still shown once.
            db.optimize("").unwrap();
        }
        if writes && rng.chance(1, 3) {
            let w = keys.pick(&mut rng);
            if rng.chance(1, 2) {
                let v = gen_value(&mut rng, keys.value_cap);
                let meta = db.put_with(&w, &v, 7, 0).unwrap();
                m.wrote(&w, v.to_vec(), 7, 0, meta);
            } else {
                let had = m.remove(&w).is_some();
                assert_eq!(db.out(&w).unwrap(), had, "out {w:?} during a walk");
            }
            touched.insert(w);
        }
    }
    assert_eq!(
        cur.damage_skipped(),
        0,
        "a healthy database has no damage to skip"
    );
    drop(cur);
    for (k, (n, r)) in &seen {
        if touched.contains(k) {
            continue;
        }
        assert_eq!(*n, 1, "cursor showed {k:?} {n} times");
        m.expect(k, Some(Rec::of(&r.value, r.meta)), "cursor");
    }
    for k in before.keys().filter(|k| !touched.contains(*k)) {
        assert!(seen.contains_key(k), "cursor missed {k:?}");
    }

    let mut all = BTreeMap::new();
    let skipped = db
        .for_each_record(&mut |k, v, meta| {
            assert!(
                all.insert(Bytes(k.to_vec()), Rec::of(v, meta)).is_none(),
                "for_each_record showed {:?} twice",
                Bytes(k.to_vec())
            );
            Ok(true)
        })
        .unwrap();
    assert_eq!(skipped, 0);
    assert_eq!(all, m.live, "for_each_record");
    let mut calls = 0;
    db.for_each_record(&mut |_, _, _| {
        calls += 1;
        Ok(false)
    })
    .unwrap();
    assert_eq!(
        calls,
        usize::from(!m.live.is_empty()),
        "for_each_record goes on after false"
    );

    let mut cur = db.cursor().unwrap();
    for _ in 0..3 {
        let at = keys.probe(&mut rng);
        if !ordered {
            // An unordered kind jumps to the key's own record, and walks only forward.
            let live = m.live.get(&at).cloned();
            assert_eq!(cur.jump(&at).unwrap(), live.is_some(), "jump {at:?}");
            match live {
                Some(_) => {
                    let (k, r) = cur.get().unwrap().expect("on the record jumped to");
                    assert_eq!(Bytes(k), at, "jump on an unordered kind");
                    m.expect(&at, Some(Rec::of(&r.value, r.meta)), "cursor after a jump");
                }
                None => assert!(cur.get().unwrap().is_none(), "jump {at:?} to a missing key"),
            }
            for refused in [cur.last(), cur.jump_back(&at), cur.step_back()] {
                assert!(
                    matches!(refused, Err(Error::Unsupported(_))),
                    "a backward move on an unordered kind"
                );
            }
            continue;
        }
        cur.jump(&at).unwrap();
        let want: Vec<Bytes> = m
            .live
            .range(at.clone()..)
            .map(|(k, _)| k.clone())
            .take(3)
            .collect();
        for w in &want {
            let (k, r) = cur
                .next()
                .unwrap()
                .unwrap_or_else(|| panic!("jump {at:?}: ended before {w:?}"));
            assert_eq!(&Bytes(k), w, "jump {at:?}");
            m.expect(w, Some(Rec::of(&r.value, r.meta)), "cursor after a jump");
        }
        if want.len() < 3 {
            assert!(
                cur.next().unwrap().is_none(),
                "jump {at:?}: records past the last"
            );
        }
    }
}

// ---------------------------------------------------------------------------------- the runner

/// The last operations run, shown when one fails.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<VecDeque<String>>>);

impl Log {
    const KEEP: usize = 40;
    fn push(&self, mut line: String) {
        if line.len() > 240 {
            let mut cut = 240;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            line.truncate(cut);
            line.push('…');
        }
        let mut l = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if l.len() == Self::KEEP {
            l.pop_front();
        }
        l.push_back(line);
    }
    fn tail(&self) -> String {
        let l = self.0.lock().unwrap_or_else(|e| e.into_inner());
        l.iter().map(|s| format!("  {s}\n")).collect()
    }
}

struct Runner {
    db: Db,
    m: Model,
    keys: Keys,
    log: Log,
}

impl Runner {
    fn apply(&mut self, op: &Op) {
        if let Op::Restart(seed) = op {
            // No handle may be held across a restart.
            self.db.restart(*seed);
            return self.verify_all();
        }
        let db = self.db.store();
        let db = &*db;
        match op {
            Op::Cursor { writes, seed } => {
                check_cursor(db, &mut self.m, &self.keys, *writes, *seed)
            }
            Op::Fwm { prefix, max } => {
                let got = db.fwmkeys(prefix, *max).unwrap();
                let want: Vec<&Bytes> = match self.db.kind.ids {
                    Some(_) => {
                        let ids: Vec<u64> = self.m.live.keys().filter_map(Bytes::number).collect();
                        let (lo, hi) = model_interval(prefix, &ids);
                        self.m
                            .live
                            .keys()
                            .filter(|k| k.number().is_some_and(|n| lo <= n && n <= hi))
                            .collect()
                    }
                    None => self
                        .m
                        .live
                        .keys()
                        .filter(|k| k.starts_with(prefix))
                        .collect(),
                };
                if db.kind().ordered() {
                    let want: Vec<&[u8]> = want.iter().take(*max).map(|k| &k[..]).collect();
                    let got: Vec<&[u8]> = got.iter().map(|k| &k[..]).collect();
                    assert_eq!(got, want, "fwmkeys {prefix:?} max {max}");
                } else {
                    let set: BTreeSet<&[u8]> = got.iter().map(|k| &k[..]).collect();
                    assert_eq!(set.len(), got.len(), "fwmkeys {prefix:?}: a key twice");
                    assert_eq!(
                        got.len(),
                        want.len().min(*max),
                        "fwmkeys {prefix:?} max {max}"
                    );
                    for k in &got {
                        assert!(
                            want.iter().any(|w| w[..] == k[..]),
                            "fwmkeys {prefix:?}: {:?} is not a live key with it",
                            Bytes(k.clone())
                        );
                    }
                    // The first matches in the kind's own order (that of `for_each_record`,
                    // which `kura db list` shows), as Tokyo Cabinet's hash answers them.
                    let mut first: Vec<Vec<u8>> = Vec::new();
                    db.for_each_record(&mut |k, _, _| {
                        if first.len() >= *max {
                            return Ok(false);
                        }
                        if k.starts_with(prefix) && !first.iter().any(|f| f[..] == *k) {
                            first.push(k.to_vec());
                        }
                        Ok(true)
                    })
                    .unwrap();
                    assert_eq!(
                        got.iter().map(|k| Bytes(k.clone())).collect::<Vec<_>>(),
                        first.into_iter().map(Bytes).collect::<Vec<_>>(),
                        "fwmkeys {prefix:?} max {max}: not the first matches in the kind's order"
                    );
                }
            }
            Op::Range { from, to, max } => {
                let r = db.range(from, to.as_deref(), *max);
                if db.kind().ordered() {
                    let want: Vec<Vec<u8>> = self
                        .m
                        .live
                        .keys()
                        .filter(|k| *k >= from && to.as_ref().is_none_or(|t| *k < t))
                        .take(*max)
                        .map(|k| k.to_vec())
                        .collect();
                    assert_eq!(r.unwrap(), want, "range {from:?}..{to:?} max {max}");
                } else {
                    assert!(
                        matches!(r, Err(Error::Unsupported(_))),
                        "range on an unordered kind: {r:?}"
                    );
                }
            }
            Op::Count => {
                check_count(db, &self.m);
                if !self.m.live.is_empty() {
                    assert!(db.size() > 0, "size 0 with {} records", self.m.live.len());
                }
            }
            Op::Sync => db.sync().unwrap(),
            Op::Check => healthy(db, &self.m),
            Op::Optimize(i) => {
                let retune = self.db.kind.retune;
                db.optimize(retune[usize::from(*i) % retune.len()]).unwrap();
            }
            Op::Vanish => {
                db.vanish().unwrap();
                self.m = Model {
                    width: self.m.width,
                    ..Model::default()
                };
                assert_eq!(db.count(), 0, "count after vanish");
            }
            Op::CopyTo => self.copy_to(db),
            Op::Fill { from, n, seed } => {
                let mut rng = Rng::new(*seed);
                for i in *from..(*from + *n).min(self.keys.n) {
                    let k = self.keys.key(i);
                    let v = Bytes((0..rng.upto(40)).map(|_| rng.next() as u8).collect());
                    let meta = db.put(&k, &v).unwrap();
                    self.m.wrote(&k, v.to_vec(), 0, 0, meta);
                }
            }
            Op::Threads { threads, ops, seed } => self.threads(*threads, *ops, *seed),
            key_op => apply_key_op(db, &mut self.m, key_op),
        }
        check_count(db, &self.m);
    }

    /// Threads write at once, each on keys of its own (`t0/…`, `t1/…`) with a model of its own.
    fn threads(&mut self, threads: u8, ops: u16, seed: u64) {
        let db = self.db.store();
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let keys = self.keys.thread(t, 12);
                let mut part = self.m.take_part(&keys);
                let db = db.clone();
                let log = self.log.clone();
                std::thread::spawn(move || {
                    let mut rng =
                        Rng::new(seed ^ u64::from(t + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
                    for i in 0..ops {
                        let op = gen_op(&mut rng, &keys, false);
                        log.push(format!("thread {t} #{i}: {op:?}"));
                        apply_key_op(&*db, &mut part, &op);
                    }
                    part
                })
            })
            .collect();
        let mut failed = None;
        for h in handles {
            match h.join() {
                Ok(part) => self.m.absorb(part),
                Err(p) => failed = failed.or(Some(p)),
            }
        }
        if let Some(p) = failed {
            resume_unwind(p);
        }
    }

    fn copy_to(&mut self, db: &dyn Store) {
        self.db.copies += 1;
        let dest = self
            .db
            .dir
            .path()
            .join(format!("copy{}{}", self.db.copies, self.db.kind.copy_as));
        db.copy_to(&dest).unwrap();
        let copy = kura_engine::open_as(dest.to_str().unwrap(), OpenMode::Existing)
            .unwrap()
            .store;
        let mut got = BTreeMap::new();
        let mut cur = copy.cursor().unwrap();
        while let Some((k, r)) = cur.next().unwrap() {
            let k = Bytes(k);
            assert!(!got.contains_key(&k), "the copy shows {k:?} twice");
            got.insert(k, (r.value, r.meta.flags, r.meta.expires));
        }
        drop(cur);
        // Versions are the copy's own.
        let want: BTreeMap<Bytes, (Vec<u8>, u32, u64)> = self
            .m
            .live
            .iter()
            .map(|(k, r)| (k.clone(), (r.value.clone(), r.flags, r.expires)))
            .collect();
        assert_eq!(got, want, "the copy's records");
        check_count(&*copy, &self.m);
        let rep = copy.check().unwrap();
        assert!(rep.healthy(), "the copy: {rep:?}");
        copy.close().unwrap();
        drop(copy);
        std::fs::remove_dir_all(&dest).unwrap_or_else(|_| std::fs::remove_file(&dest).unwrap());
    }

    /// Everything the store holds, against the model.
    fn verify_all(&mut self) {
        let db = self.db.store();
        let db = &*db;
        check_cursor(db, &mut self.m, &self.keys, false, 0);
        for (k, r) in &self.m.live {
            let got = db.get(k).unwrap().map(|r| Rec::of(&r.value, r.meta));
            assert_eq!(got.as_ref(), Some(r), "get {k:?}");
        }
        for k in &self.m.expired {
            assert_eq!(
                db.get(k).unwrap(),
                None,
                "{k:?} was written already expired"
            );
        }
        check_count(db, &self.m);
        if !self.m.live.is_empty() {
            assert!(db.size() > 0, "size 0 with {} records", self.m.live.len());
        }
        healthy(db, &self.m);
    }

    /// Close, after which every call fails with `Closed`.
    fn close(self) {
        let db = self.db.store();
        db.close().unwrap();
        assert!(
            matches!(db.get(b"k1"), Err(Error::Closed)),
            "get after close"
        );
        assert!(
            matches!(db.put(b"k1", b"v"), Err(Error::Closed)),
            "put after close"
        );
        assert!(
            matches!(
                db.write_batch(&[BatchOp::Remove {
                    key: b"k1".to_vec()
                }]),
                Err(Error::Closed)
            ),
            "write_batch after close"
        );
        assert!(
            matches!(db.cursor().map(|_| ()), Err(Error::Closed)),
            "cursor after close"
        );
    }
}

fn healthy(db: &dyn Store, m: &Model) {
    let rep = db.check().unwrap();
    assert!(rep.healthy(), "check: {rep:?}");
    let (lo, hi) = m.bounds();
    assert!(
        (lo..=hi).contains(&rep.records),
        "check counted {} records: {lo} live, {} written already expired",
        rep.records,
        hi - lo
    );
}

/// Run `ops` on a new database of `kind`; on failure, what failed and the operations before it.
fn run(kind: &'static KindUnderTest, keys: &Keys, ops: &[Op]) -> Result<(), String> {
    let log = Log::default();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut r = Runner {
            db: Db::open(kind),
            m: Model {
                width: kind.ids,
                ..Model::default()
            },
            keys: keys.clone(),
            log: log.clone(),
        };
        for (i, op) in ops.iter().enumerate() {
            log.push(format!("#{i}: {op:?}"));
            r.apply(op);
        }
        log.push("at the end: verify, close".into());
        r.verify_all();
        r.close();
    }));
    outcome.map_err(|p| {
        let why = panic_message(&*p);
        format!(
            "{why}\nthe last operations ({} in all, keys {keys:?}):\n{}",
            ops.len(),
            log.tail()
        )
    })
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Run `test` on every kind; fail naming each kind it failed on.
fn every_kind(test: impl Fn(&'static KindUnderTest)) {
    let failed: Vec<String> = kinds()
        .into_iter()
        .filter_map(|kind| {
            let outcome = catch_unwind(AssertUnwindSafe(|| test(kind)));
            outcome
                .err()
                .map(|p| format!("kind {:?}: {}", kind.label, panic_message(&*p)))
        })
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

// ---------------------------------------------------------------------------------- the drivers

/// Rounds of `fixed_seeds` (seeds 0 to ROUNDS - 1) and operations in each.
const ROUNDS: u64 = 16;
const OPS: usize = 300;

/// The keys and operations of the round `seed`: the same on every kind (but for the form of
/// the keys).
fn round(seed: u64, kind: &KindUnderTest) -> (Keys, Vec<Op>) {
    let mut rng = Rng::new(seed);
    let keys = kind.keys(rng.pick(&[8, 24, 24, 64, 2000]));
    let ops = (0..OPS).map(|_| gen_op(&mut rng, &keys, true)).collect();
    (keys, ops)
}

/// Every kind runs the same rounds; a kind stops at its first failing round, and every
/// failing kind is reported.
#[test]
fn fixed_seeds() {
    let seeds: Vec<u64> = match std::env::var("KURA_CONFORMANCE_SEED") {
        Ok(s) => vec![s.parse().expect("KURA_CONFORMANCE_SEED is a number")],
        Err(_) => (0..std::env::var("KURA_CONFORMANCE_ROUNDS").map_or(ROUNDS, |n| {
            n.parse().expect("KURA_CONFORMANCE_ROUNDS is a number")
        }))
            .collect(),
    };
    let mut failed = Vec::new();
    for kind in kinds() {
        let t = std::time::Instant::now();
        let failure = seeds.iter().find_map(|&seed| {
            let (keys, ops) = round(seed, kind);
            run(kind, &keys, &ops).err().map(|e| (seed, e))
        });
        match failure {
            None => eprintln!(
                "kind {:?}: {} rounds in {:.1?}",
                kind.label,
                seeds.len(),
                t.elapsed()
            ),
            Some((seed, e)) => failed.push(format!(
                "kind {:?}, seed {seed}: {e}rerun: KURA_CONFORMANCE_SEED={seed} KURA_CONFORMANCE_KIND='{}' \
                 cargo test -p kura-engine --test conformance fixed_seeds\n",
                kind.label, kind.label
            )),
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Each number seeds one operation: proptest shrinks a failing sequence by dropping
    /// operations and simplifying the ones left.
    #[test]
    fn proptest_sequences(keyspace in prop::sample::select(vec![6usize, 24]), seeds in prop::collection::vec(any::<u64>(), 1..120)) {
        for kind in kinds() {
            let keys = kind.keys(keyspace);
            let ops: Vec<Op> = seeds.iter().map(|&s| gen_op(&mut Rng::new(s), &keys, true)).collect();
            if let Err(e) = run(kind, &keys, &ops) {
                return Err(TestCaseError::fail(format!("kind {:?}: {e}", kind.label)));
            }
        }
    }
}

// ---------------------------------------------------------------------------------- regressions

/// Sequences that once failed, as they were shrunk, replayed on every kind.
#[test]
fn saved_sequences() {
    let saved = |keys: &Keys| -> Vec<Vec<Op>> {
        vec![
            // The on-disk hash's model test (before this suite) shrank a failure to this.
            vec![
                Op::Restart(0),
                Op::Cat {
                    key: keys.key(0),
                    value: Bytes(vec![25, 40, 226, 168, 95, 73, 126, 157]),
                    front: false,
                    create: true,
                },
                Op::Restart(0),
            ],
        ]
    };
    every_kind(|kind| {
        let keys = kind.keys(40);
        for ops in &saved(&keys) {
            if let Err(e) = run(kind, &keys, ops) {
                panic!("{e}");
            }
        }
    });
}

/// The on-disk hash's cursor walks the segments in id order while compaction moves records,
/// keeping their seq, into newer segments: a walk that goes on across an `optimize` shows
/// again the records it has already shown (64 of 100 here), and background compaction can
/// move a record into a lane's segment behind the walk, which then misses it (the random
/// rounds see both). A record that exists for the whole walk and is not modified must be
/// shown exactly once. Open: fails on the `.kh` kinds until the cursor is fixed.
#[test]
fn a_walk_shows_each_record_once_while_optimize_moves_them() {
    every_kind(|kind| {
        let db = Db::open(kind);
        let s = db.store();
        let keys = kind.keys(100);
        let value = vec![1; kind.ids.unwrap_or(1000).min(1000)];
        for i in 0..100 {
            s.put(&keys.key(i), &value).unwrap();
        }
        let mut seen = BTreeMap::<Vec<u8>, u32>::new();
        let mut cur = s.cursor().unwrap();
        *seen.entry(cur.next().unwrap().unwrap().0).or_default() += 1;
        s.optimize("").unwrap();
        while let Some((k, _)) = cur.next().unwrap() {
            *seen.entry(k).or_default() += 1;
        }
        let again = seen.values().filter(|&&n| n > 1).count();
        assert_eq!(
            (seen.len(), again),
            (100, 0),
            "(keys shown, keys shown more than once)"
        );
    });
}

/// A batch is written as one frame, never split between segments, so a segment can grow past
/// `segsiz`. On real files, a record of a batch whose header lies across the `segsiz` mark
/// (with 64 KiB segments: a 10-byte record after one of 65,479 bytes) cannot be read: `get`
/// and `check` report "bad record header" at offset 65,531, after a sync and a reopen too,
/// while a cursor shows the record (`SimVfs` reads it). Every record of an acknowledged batch
/// must read back. Open: fails on `.kh` (real files) until the read is fixed.
#[test]
fn a_batch_record_across_the_segment_size_reads_back() {
    every_kind(|kind| {
        // Record lengths that put the second record's header across 64 KiB in one of them
        // (values a `.kf` on `SimVfs`, of width 300, does not take: the `.kf` on real files
        // holds them).
        let lens = 65_440..65_536usize;
        if kind.ids.is_some_and(|w| w < lens.end) {
            return;
        }
        let mut db = Db::open(kind);
        for len in lens.clone() {
            let (a, b) = keys_ab(kind, len);
            let ops = [
                BatchOp::Put {
                    key: a,
                    value: vec![1; len],
                    flags: 0,
                    expires: 0,
                },
                BatchOp::Put {
                    key: b,
                    value: vec![2; 10],
                    flags: 0,
                    expires: 0,
                },
            ];
            db.store().write_batch(&ops).unwrap();
        }
        for round in ["written", "restarted"] {
            let s = db.store();
            for len in lens.clone() {
                let got = s.get(&keys_ab(kind, len).1);
                assert!(
                    matches!(&got, Ok(Some(r)) if r.value == [2; 10]),
                    "{round}: b{len} after a{len} of {len} bytes: {got:?}"
                );
            }
            let rep = s.check().unwrap();
            assert!(rep.healthy(), "{round}: {rep:?}");
            drop(s);
            db.restart(1);
        }
    });
}

/// The keys `a{len}` and `b{len}` of the batch regression, as the kind's keys.
fn keys_ab(kind: &KindUnderTest, len: usize) -> (Vec<u8>, Vec<u8>) {
    match kind.ids {
        Some(_) => (
            len.to_string().into_bytes(),
            (100_000 + len).to_string().into_bytes(),
        ),
        None => (
            format!("a{len}").into_bytes(),
            format!("b{len}").into_bytes(),
        ),
    }
}
