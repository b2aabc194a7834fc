//! The on-disk hash database (`PATH.kh`): a log-structured hash.
//!
//! A database is a directory of append-only segment files of checksummed records plus an index
//! checkpoint. The index lives in memory: 64 shards, each a `RwLock` over its write sequence and
//! an ordered linear-probing table of 12-byte slots (32-bit hash tag, segment id, offset) — no
//! key bytes in memory — in 128-byte buckets, each with its own lock and seq (`Brl`: in a fast
//! shard, one key's reads and writes lock only that key's buckets). A read checks the candidate
//! records on disk (memory-mapped). A write takes a seq, appends its record to the writing
//! thread's lane (its own log and buffer: a short critical section, one memcpy) and points the
//! slot at it. Writers on different shards run in parallel and share no
//! log; the seq orders a key's records across lanes. Nothing slow happens under a shard lock:
//! a full lane buffer is written to the file, and a table's next array is made, after the lock
//! is released (`Inner::after_write`, `DiskHash::unlock`).
//!
//! Durability: see docs/ARCHITECTURE.md. In short: records reach the file through a per-lane
//! write buffer flushed every 50 ms (and whenever it fills); `sync=always` makes each write wait
//! for a group-committed fdatasync; `sync=interval:MS` syncs in the background; a checkpoint of
//! the index (written atomically) bounds recovery to the log written after it; recovery stops a
//! segment at its first record whose checksum fails and truncates the torn tail.

mod arena;
mod check;
pub mod ckpt;
mod export;
pub mod format;
pub mod index;
mod recover;
mod repair;
mod scan;
pub mod segment;
pub mod stored;

use self::format::{
    Header, HeaderBuf, PutFields, MAX_HEADER_LEN, SEG_HEADER_LEN, T_BATCH, T_DELETE, T_PUT,
};
use self::index::{Slot, Table};
use self::scan::Bytes;
use self::segment::{corrupt_at, seg_file_name, Retired, SegTable, Segment};
use crate::compress;
use crate::error::{Error, Result};
use crate::io::{OsVfs, VFile, Vfs};
use crate::name::{Compression, OpenMode, Params, SyncMode};
use crate::store::{
    check_sizes, is_expired, now_secs, BatchOp, CheckReport, Current, Cursor, Decision, Kind, Meta,
    Pinned, Record, Shown, Store,
};
use arc_swap::ArcSwap;
use parking_lot::{Condvar, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// log2 of the number of index shards.
const SHARD_BITS: u32 = 6;
const NSHARDS: usize = 1 << SHARD_BITS;
const CKPT_NAME: &str = "index.ki";
const CKPT_TMP: &str = "index.ki.tmp";
const CKPT_MAGIC: &[u8; 8] = b"KURAIDX1";
/// Version 1 wrote each shard's slots sorted by location as varints; a version-1 checkpoint is
/// ignored (the log is replayed once, and the next checkpoint is version 2).
const CKPT_VERSION: u32 = 2;
/// Old positions a growing writer moves per hold of the shard lock (`Inner::grow_to`): about
/// 10 µs of work.
const MOVE_BATCH: usize = 2048;
/// How often the background thread hands the write buffer to the OS.
const FLUSH_TICK: Duration = Duration::from_millis(50);
/// How often the compaction thread looks for segments to compact.
const COMPACT_TICK: Duration = Duration::from_millis(100);
/// How long one round of background compaction may hold the maintenance lock.
const COMPACT_BUDGET: Duration = Duration::from_millis(500);
/// Segments waiting for compaction beyond which the compaction thread stops yielding the CPU.
const COMPACT_BACKLOG: usize = 8;
/// Background compaction copies live records at most this fast (bytes per second).
const COMPACT_RATE: u64 = 64 << 20;

const PARAMS: &[&str] = &[
    "bnum", "sync", "compress", "segsiz", "bufsiz", "msiz", "compact", "ckptsiz", "lanes",
];
/// Logs written in parallel when the database is created without `lanes=`.
const DEFAULT_LANES: usize = 16;
const MAX_LANES: usize = 64;
/// The most a batch's records may take (headers counted at their longest): as much as the
/// largest single record. A batch is one record (a frame of records), and reading any record
/// back — a read, recovery, `check`, `repair` — holds it whole in memory to verify its
/// checksum, so a larger batch would raise what those need. Its inner records keep checksums of
/// their own, so damage to a large batch costs only the records it touches (`scan`).
const MAX_BATCH_BYTES: usize = crate::store::MAX_VALUE_LEN + crate::store::MAX_KEY_LEN + (1 << 20);
/// Values at least this large are written without holding their shard's lock.
const LARGE_VALUE: usize = 256 << 10;
/// `bnum` pre-sizes the index for at most this many records (about 1.3 GB of index); beyond,
/// the index grows online as records arrive.
const MAX_PRESIZE: u64 = 1 << 26;

/// Tuning of a hash database (all from `#key=value` parameters).
#[derive(Clone, Debug)]
struct Config {
    bnum: u64,
    sync: SyncMode,
    segsiz: u64,
    bufsiz: usize,
    msiz: u64,
    /// Compact a sealed segment once this fraction of it is dead.
    compact: f64,
    /// Write a checkpoint once this many bytes were appended since the last one.
    ckptsiz: u64,
    /// Lanes asked for (fixed when the database is created).
    lanes: Option<usize>,
}

impl Config {
    fn from_params(params: &Params, base: Option<&Config>) -> Result<Config> {
        params.allow_only("the hash database (.kh)", PARAMS)?;
        let d = base.cloned().unwrap_or(Config {
            bnum: 0,
            sync: SyncMode::DEFAULT,
            segsiz: 64 << 20,
            bufsiz: 1 << 20,
            msiz: 64 << 20,
            compact: 0.5,
            ckptsiz: 256 << 20,
            lanes: None,
        });
        let lanes = params.size("lanes")?.map(|n| n as usize);
        if lanes.is_some_and(|n| !(1..=MAX_LANES).contains(&n)) {
            return Err(Error::InvalidParam(format!(
                "`lanes`: expected 1 to {MAX_LANES}"
            )));
        }
        let segsiz = params.size("segsiz")?.unwrap_or(d.segsiz);
        if !(64 << 10..=2 << 30).contains(&segsiz) {
            return Err(Error::InvalidParam(format!(
                "`segsiz={segsiz}`: expected 64k to 2g"
            )));
        }
        let bufsiz = params.size("bufsiz")?.unwrap_or(d.bufsiz as u64);
        if !(4 << 10..=64 << 20).contains(&bufsiz) {
            return Err(Error::InvalidParam(format!(
                "`bufsiz={bufsiz}`: expected 4k to 64m"
            )));
        }
        Ok(Config {
            bnum: params.size("bnum")?.unwrap_or(d.bnum),
            sync: params.sync()?.unwrap_or(d.sync),
            segsiz,
            bufsiz: bufsiz as usize,
            msiz: params.size("msiz")?.unwrap_or(d.msiz),
            compact: params.ratio("compact", 0.05, 1.0)?.unwrap_or(d.compact),
            ckptsiz: params.size("ckptsiz")?.unwrap_or(d.ckptsiz).max(1 << 20),
            lanes: lanes.or(d.lanes),
        })
    }
}

#[inline]
fn loc_of(seg: u32, off: u64) -> u64 {
    ((seg as u64) << 32) | off
}

/// One shard of the index: its table and its write sequence. `repr(C)`, with `seq` and the
/// table's hot fields first: right behind the lock word, in its cache line (`Table`). Two
/// writer threads hand a shard's lines back and forth on about every other write; before, the
/// fields a write touches spanned both of the shard's lines.
#[derive(Default)]
#[repr(C)]
struct ShardState {
    /// The seq of the shard's latest write; the next write takes `seq + 1`.
    seq: u64,
    table: Table,
    /// Large puts being written without the shard lock (see `DiskHash::put_large`).
    inflight: Vec<Inflight>,
}

/// A large put between its two halves (`DiskHash::large_put_begin`, `large_put_end`).
struct LargePut {
    shard: usize,
    tag: u32,
    lane: usize,
    seq: u64,
    /// Where its record was written (segment, offset, length).
    written: Result<(u32, u64, usize)>,
}

/// A large put in flight: its key, its seq, and whether a later write of the key came first.
struct Inflight {
    key: Box<[u8]>,
    seq: u64,
    superseded: bool,
}

impl std::ops::Deref for ShardState {
    type Target = Table;
    fn deref(&self) -> &Table {
        &self.table
    }
}

impl std::ops::DerefMut for ShardState {
    fn deref_mut(&mut self) -> &mut Table {
        &mut self.table
    }
}

impl ShardState {
    /// Take the next seq of this shard for a write of `key` (the caller holds the shard's write
    /// lock). A large put of the key still in flight is thereby superseded.
    fn next_seq(&mut self, key: &[u8]) -> u64 {
        for f in &mut self.inflight {
            if *f.key == *key {
                f.superseded = true;
            }
        }
        self.seq += 1;
        self.seq
    }
}

#[repr(align(128))]
struct Shard(RwLock<ShardState>);

/// Stripes of `Brl` counters: each thread counts itself in stripe `thread_number % STRIPES`.
const BRL_STRIPES: usize = 16;

/// One stripe's counters for one shard (`Brl`).
#[derive(Default)]
#[repr(C, align(32))]
struct BrlCount {
    /// Threads of this stripe now inside the shard (`Inner::enter`).
    inside: AtomicU64,
    /// Slots they inserted less slots they removed, not yet in the shard's table count.
    delta: std::sync::atomic::AtomicI64,
    /// The largest seq they gave out there since the shard was last made exclusive.
    maxseq: AtomicU64,
}

/// A stripe's counters for every shard: a thread writes only the lines of its own stripe.
#[repr(align(64))]
struct BrlStripe([BrlCount; NSHARDS]);

/// Every shard's mode flag, in lines of their own (read by every write, written rarely).
#[repr(align(64))]
struct BrlFlags([AtomicBool; NSHARDS]);

/// A "big-reader" lock over each shard, so that single-key reads and writes of different keys
/// share no written cache line (see docs/ARCHITECTURE.md, "Index (memory)").
///
/// A shard is in one of two modes:
/// - fast: the operations of one key (`get`, `put`, `out`, `accept`, compaction's `relocate`)
///   count themselves in their thread's stripe (`inside`), then lock only the buckets of their
///   key's run in the table (`Table::lock_run`). The bucket's word, in the slots' own cache
///   line, also holds the largest seq given out to a key whose home is in it; a write's seq
///   is above it, above `ShardState::seq` and above the thread's own last seq (`CLOCK`), so
///   a key's seqs rise whichever thread writes it. Inserts and removes are counted in the
///   stripe (`delta`), the seqs given out too (`maxseq`), and the table's count and the
///   shard's seq are brought up to date when the shard next becomes exclusive.
/// - slow (`slow` set): everything goes through the shard's `RwLock`, as it always has.
///
/// `Inner::excl` takes the `RwLock` for writing, sets `slow`, waits until no thread is inside
/// (a thread sets its count, then reads the flag; the exclusive side sets the flag, then reads
/// the counts: both sequentially consistent, so one of them sees the other), and folds the
/// counts in. Its guard sets the shard fast again when dropped, unless the table is growing
/// or a large put is in flight (those keep the shard slow until they finish).
struct Brl {
    stripes: Box<[BrlStripe]>,
    slow: BrlFlags,
}

impl Brl {
    fn new() -> Brl {
        Brl {
            stripes: (0..BRL_STRIPES)
                .map(|_| BrlStripe(std::array::from_fn(|_| BrlCount::default())))
                .collect(),
            slow: BrlFlags(std::array::from_fn(|_| AtomicBool::new(false))),
        }
    }

    /// This thread's counters for `shard`, and whether the stripe is this thread's alone.
    #[inline]
    fn mine(&self, shard: usize) -> (&BrlCount, bool) {
        let (stripe, own) = STRIPE.with(|c| (c.0, c.1));
        (&self.stripes[stripe].0[shard], own)
    }

    /// Slots inserted less slots removed in `shard` by fast writers, not yet folded in.
    fn delta(&self, shard: usize) -> i64 {
        self.stripes
            .iter()
            .map(|s| s.0[shard].delta.load(Ordering::Relaxed))
            .sum()
    }
}

/// The `Brl` stripe of a thread: one of its own while there are enough (`true`), given back
/// when the thread ends; else the last stripe, which such threads share (`false`). A thread's
/// own stripe is written with plain stores, a shared one with atomic read-modify-writes.
struct StripeClaim(usize, bool);

/// Stripes no thread holds (all but the shared last one, at first).
static FREE_STRIPES: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static STRIPES_MADE: AtomicBool = AtomicBool::new(false);

impl StripeClaim {
    fn claim() -> StripeClaim {
        let mut free = FREE_STRIPES.lock();
        if !STRIPES_MADE.swap(true, Ordering::Relaxed) {
            free.extend((0..BRL_STRIPES - 1).rev());
        }
        match free.pop() {
            Some(i) => StripeClaim(i, true),
            None => StripeClaim(BRL_STRIPES - 1, false),
        }
    }
}

impl Drop for StripeClaim {
    fn drop(&mut self) {
        if self.1 {
            FREE_STRIPES.lock().push(self.0);
        }
    }
}

impl BrlCount {
    /// Count this thread in, sequentially consistent with the reading of the shard's flag.
    #[inline]
    fn enter(&self, own: bool) {
        if own {
            let v = self.inside.load(Ordering::Relaxed);
            self.inside.store(v + 1, Ordering::SeqCst);
        } else {
            self.inside.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Count this thread out: what it did before is seen by `excl` once it sees the count.
    #[inline]
    fn exit(&self, own: bool) {
        if own {
            let v = self.inside.load(Ordering::Relaxed);
            self.inside.store(v - 1, Ordering::Release);
        } else {
            self.inside.fetch_sub(1, Ordering::Release);
        }
    }

    /// Add `d` to the slot count; returns the new value.
    #[inline]
    fn add_delta(&self, own: bool, d: i64) -> i64 {
        if own {
            let v = self.delta.load(Ordering::Relaxed) + d;
            self.delta.store(v, Ordering::Relaxed);
            v
        } else {
            self.delta.fetch_add(d, Ordering::Relaxed) + d
        }
    }

    /// Raise `maxseq` to `seq`.
    #[inline]
    fn note_seq(&self, own: bool, seq: u64) {
        if seq > self.maxseq.load(Ordering::Relaxed) {
            if own {
                self.maxseq.store(seq, Ordering::Relaxed);
            } else {
                self.maxseq.fetch_max(seq, Ordering::Relaxed);
            }
        }
    }
}

/// Read-only access to the candidates of a tag: a shard's state (under its `RwLock`) or a
/// locked run (`Fast`).
trait Cands {
    /// The slots whose tag is `tag`.
    fn cands(&self, tag: u32) -> impl Iterator<Item = Slot> + '_;
    /// Whether the table fits in the cache (`put_replacing`).
    fn small(&self) -> bool;
}

/// What a write of one key does to the index: take a seq, change the key's slot.
trait KeyIndex: Cands {
    /// The seq `next_seq` will give.
    fn peek_seq(&self) -> u64;
    /// Take the next seq for a write of `key`.
    fn next_seq(&mut self, key: &[u8]) -> u64;
    fn insert(&mut self, slot: Slot);
    fn replace(&mut self, old: &Slot, new: Slot) -> bool;
    fn remove(&mut self, slot: &Slot) -> bool;
}

impl Cands for Table {
    #[inline]
    fn cands(&self, tag: u32) -> impl Iterator<Item = Slot> + '_ {
        self.candidates(tag)
    }
    #[inline]
    fn small(&self) -> bool {
        self.memory() <= SMALL_TABLE
    }
}

impl Cands for ShardState {
    #[inline]
    fn cands(&self, tag: u32) -> impl Iterator<Item = Slot> + '_ {
        self.table.candidates(tag)
    }
    #[inline]
    fn small(&self) -> bool {
        self.table.small()
    }
}

impl KeyIndex for ShardState {
    #[inline]
    fn peek_seq(&self) -> u64 {
        self.seq + 1
    }
    #[inline]
    fn next_seq(&mut self, key: &[u8]) -> u64 {
        ShardState::next_seq(self, key)
    }
    #[inline]
    fn insert(&mut self, slot: Slot) {
        self.table.insert(slot)
    }
    #[inline]
    fn replace(&mut self, old: &Slot, new: Slot) -> bool {
        self.table.replace(old, new)
    }
    #[inline]
    fn remove(&mut self, slot: &Slot) -> bool {
        self.table.remove(slot)
    }
}

/// A shard entered in fast mode (`Inner::enter`), and a key's run in it once locked
/// (`Inner::fast`). Dropping it releases the buckets, counts what it did, leaves the shard
/// and, when the table is past its load limit, grows it.
struct Fast<'a> {
    inner: &'a Inner,
    shard: usize,
    run: Option<index::Run<'a>>,
    table: &'a Table,
    /// The shard's seq, which stays as it is while the shard is fast.
    base: u64,
    count: &'a BrlCount,
    /// Whether `count` is in this thread's own stripe.
    own: bool,
    /// The largest seq given out (0: none).
    maxseq: u64,
    delta: i64,
}

impl Fast<'_> {
    /// The next seq for a key of the locked run: above the run's bucket, the shard and this
    /// thread's last one.
    #[inline]
    fn seq_after(&self, floor: u64) -> u64 {
        let run = self.run.as_ref().map_or(0, |r| r.seq());
        self.base.max(run).max(floor).max(CLOCK.get()) + 1
    }

    /// Note that `seq` was given out (and is in the log).
    #[inline]
    fn gave(&mut self, seq: u64) {
        self.maxseq = self.maxseq.max(seq);
        CLOCK.set(CLOCK.get().max(seq));
    }
}

impl Cands for Fast<'_> {
    #[inline]
    fn cands(&self, tag: u32) -> impl Iterator<Item = Slot> + '_ {
        let run = self.run.as_ref().expect("held until dropped");
        debug_assert_eq!(tag, run.tag());
        run.candidates()
    }
    #[inline]
    fn small(&self) -> bool {
        self.table.small()
    }
}

impl KeyIndex for Fast<'_> {
    #[inline]
    fn peek_seq(&self) -> u64 {
        self.seq_after(0)
    }
    #[inline]
    fn next_seq(&mut self, _key: &[u8]) -> u64 {
        // No large put is in flight while the shard is fast: nothing to supersede.
        let seq = self.peek_seq();
        self.run.as_mut().expect("held").set_seq(seq);
        self.gave(seq);
        seq
    }
    #[inline]
    fn insert(&mut self, slot: Slot) {
        self.run.as_mut().expect("held").insert(slot);
        self.delta += 1;
    }
    #[inline]
    fn replace(&mut self, old: &Slot, new: Slot) -> bool {
        self.run.as_mut().expect("held").replace(old, new)
    }
    #[inline]
    fn remove(&mut self, slot: &Slot) -> bool {
        let removed = self.run.as_mut().expect("held").remove(slot);
        self.delta -= i64::from(removed);
        removed
    }
}

impl Drop for Fast<'_> {
    #[inline]
    fn drop(&mut self) {
        drop(self.run.take());
        let mut grow = false;
        if self.delta != 0 {
            let d = self.count.add_delta(self.own, self.delta);
            // Checked while still inside (the table's fields may change once out).
            grow = self.delta > 0
                && d % 32 == 0
                && self.inner.fast_wants_growth(self.shard, self.table);
        }
        self.count.note_seq(self.own, self.maxseq);
        // Release: `excl` sees the counts and the slots written before.
        self.count.exit(self.own);
        if grow {
            self.inner.grow(self.shard);
        }
    }
}

/// A shard held exclusively (`Inner::excl`): its `RwLock` for writing, and no thread inside
/// it in fast mode. Dropping it makes the shard fast again when it can be.
struct Excl<'a> {
    g: RwLockWriteGuard<'a, ShardState>,
    slow: &'a AtomicBool,
}

impl std::ops::Deref for Excl<'_> {
    type Target = ShardState;
    fn deref(&self) -> &ShardState {
        &self.g
    }
}

impl std::ops::DerefMut for Excl<'_> {
    fn deref_mut(&mut self) -> &mut ShardState {
        &mut self.g
    }
}

impl Drop for Excl<'_> {
    fn drop(&mut self) {
        if !self.g.table.is_moving() && self.g.inflight.is_empty() {
            // Still under the write lock: fast threads see everything done under it.
            self.slow.store(false, Ordering::Release);
        }
    }
}

impl Cands for Excl<'_> {
    #[inline]
    fn cands(&self, tag: u32) -> impl Iterator<Item = Slot> + '_ {
        Cands::cands(&*self.g, tag)
    }
    #[inline]
    fn small(&self) -> bool {
        Cands::small(&*self.g)
    }
}

impl KeyIndex for Excl<'_> {
    #[inline]
    fn peek_seq(&self) -> u64 {
        KeyIndex::peek_seq(&*self.g)
    }
    #[inline]
    fn next_seq(&mut self, key: &[u8]) -> u64 {
        KeyIndex::next_seq(&mut *self.g, key)
    }
    #[inline]
    fn insert(&mut self, slot: Slot) {
        KeyIndex::insert(&mut *self.g, slot)
    }
    #[inline]
    fn replace(&mut self, old: &Slot, new: Slot) -> bool {
        KeyIndex::replace(&mut *self.g, old, new)
    }
    #[inline]
    fn remove(&mut self, slot: &Slot) -> bool {
        KeyIndex::remove(&mut *self.g, slot)
    }
}

/// A fast shard entered, and the candidates of a tag in it read without locking
/// (`Table::snapshot`). The records they point at stay readable while the thread is inside
/// the shard, but one may have moved and its segment left the segment table since: a read
/// through a snapshot that fails is tried again under the run's locks (`with_reader!`).
struct Snap<'a> {
    /// Counted into the shard (no run locked).
    inside: Fast<'a>,
    cands: index::Snapshot,
}

impl Cands for Snap<'_> {
    #[inline]
    fn cands(&self, _tag: u32) -> impl Iterator<Item = Slot> + '_ {
        self.cands.candidates()
    }
    #[inline]
    fn small(&self) -> bool {
        self.inside.table.small()
    }
}

/// A key's place in a shard for a reader: its candidates read optimistically, a locked run,
/// or the shard's `RwLock`.
enum Reader<'a> {
    Snap(Snap<'a>),
    Fast(Fast<'a>),
    Shared(parking_lot::RwLockReadGuard<'a, ShardState>),
    Excl(Excl<'a>),
}

/// A key's place in a shard for a writer: a locked run, or the shard held exclusively.
enum Writer<'a> {
    Fast(Fast<'a>),
    Excl(Excl<'a>),
}

/// Run `$body` with `$k` bound to a `Writer`'s index view (`&mut impl KeyIndex`); a shard
/// held exclusively is released through `$db.unlock` (which grows its table when due).
macro_rules! with_writer {
    ($db:expr, $shard:expr, $w:expr, $k:ident => $body:expr) => {
        match $w {
            Writer::Fast(mut f) => {
                let $k = &mut f;
                let r = $body;
                drop(f);
                r
            }
            Writer::Excl(mut g) => {
                let $k: &mut ShardState = &mut g;
                let r = $body;
                $db.unlock($shard, g);
                r
            }
        }
    };
}

/// Run `$body` (a `Result`) with `$k` bound to the index view (`&impl Cands`) of a reader of
/// `$tag` in `$shard` (`Inner::reader`). A body that fails on an optimistic view is run again
/// on a locked one: its error may come of a record that moved meanwhile (`Snap`).
macro_rules! with_reader {
    ($db:expr, $shard:expr, $tag:expr, $k:ident => $body:expr) => {{
        let mut optimistic = true;
        loop {
            let r = match $db.reader($shard, $tag, optimistic) {
                Reader::Snap(s) => {
                    let $k = &s;
                    let r = $body;
                    if r.is_err() {
                        optimistic = false;
                        continue;
                    }
                    r
                }
                Reader::Fast(f) => {
                    let $k = &f;
                    $body
                }
                Reader::Shared(g) => {
                    let $k: &ShardState = &g;
                    $body
                }
                Reader::Excl(g) => {
                    let $k: &ShardState = &g;
                    $body
                }
            };
            break r;
        }
    }};
}

/// Where a shard's table array was at its last write (`Table::home_array`), read without the
/// shard's lock to prefetch a key's home position while the lock is being taken
/// (`Inner::locate`). Apart from the shards, and written only when an array is replaced, so
/// its cache line stays shared by every core.
#[derive(Default)]
struct TableHint {
    base: AtomicUsize,
    cap: AtomicUsize,
}

/// Every shard's `TableHint`, aligned to whole cache lines so that no other data, written more
/// often, shares a line with them.
#[repr(align(64))]
struct TableHints([TableHint; NSHARDS]);

/// The load at which shard `i`'s table doubles: spread over 0.70..0.85 so that the shards,
/// which fill at the same rate, do not all double within the same few writes.
fn shard_max_load(i: usize) -> f64 {
    0.70 + 0.15 * (i as f64 / NSHARDS as f64)
}

thread_local! {
    /// This thread's buffer for records read outside the maps (still in a lane's buffer, or in
    /// an unmapped segment), kept between reads so that they allocate nothing.
    static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
    /// Set in the database's own background threads (`Inner::background`, `Inner::compactor`).
    static BACKGROUND: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The last seq this thread gave out in a fast shard, of any database (`Brl`).
    static CLOCK: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// This thread's `Brl` stripe.
    static STRIPE: StripeClaim = StripeClaim::claim();
}
/// How many bytes a read of a record from a segment's file (not mapped: see `msiz`) asks for
/// first. Reading only the header first took a second system call for every record; this
/// much holds the header, the key and a small value in one (a few hundred bytes more to copy
/// cost far less than a system call).
const FIRST_READ: usize = 2048;
const _: () = assert!(FIRST_READ >= MAX_HEADER_LEN);
/// The largest `SCRATCH` buffer a thread keeps after a read.
const SCRATCH_KEEP: usize = 64 << 10;

/// Segments whose live-byte changes a lane collects before adding them to the counters.
const LIVE_PENDING: usize = 8;

/// With `sync=always`, how many bytes of zeros the filler writes ahead of a lane's records at a
/// time (`Inner::fill_lane`), and how close the records may come to the end of them before it
/// writes more.
const FILL_STEP: u64 = 8 << 20;
const FILL_LOW: u64 = 4 << 20;
/// `Tail::fill_from` when no fill is under way.
const NO_FILL: u64 = u64::MAX;

/// The end of one lane's log: the active segment and the bytes not yet handed to the OS.
struct Tail {
    seg: Arc<Segment>,
    /// Below this offset the active segment's file already has its blocks (records, or zeros
    /// written and synced ahead of them by the filler): writes there change no metadata.
    alloc: u64,
    /// Where the filler's zeros under way start (`NO_FILL`: none). Records must not reach it
    /// until the fill is settled (`Inner::settle_fill`).
    fill_from: u64,
    /// The filler was woken for this lane and has not looked yet.
    fill_asked: bool,
    /// Bytes after `seg.flushed`.
    buf: Vec<u8>,
    /// Bytes appended to this lane since the last checkpoint.
    appended: u64,
    /// The lane's log ends with a marker (`format::marker`): nothing was appended since.
    marked: bool,
    /// Live-byte changes made by this lane's puts and deletes, not yet added to the segments'
    /// counters: (segment id, delta) for up to `LIVE_PENDING` segments. Adding them on every
    /// write moved the counters' cache lines between the writing cores (a put that
    /// overwrites a record changes the counter of the segment the other thread appends to);
    /// collected here, they are added when the lane flushes (at least every `FLUSH_TICK`),
    /// when a ninth segment comes up, and before a checkpoint records them.
    live: [(u32, i64); LIVE_PENDING],
    nlive: usize,
    /// (segment, offset) of the records of large puts written to this lane whose slots are not
    /// installed yet (`DiskHash::put_large`): a checkpoint's replay of this lane must start no
    /// later than the first (`Inner::lane_positions`), since its snapshot may not have them.
    large: Vec<(u32, u64)>,
}

impl Tail {
    fn new(seg: Arc<Segment>) -> Tail {
        Tail {
            alloc: seg.flushed(),
            fill_from: NO_FILL,
            fill_asked: false,
            seg,
            buf: Vec::new(),
            appended: 0,
            marked: false,
            live: [(0, 0); LIVE_PENDING],
            nlive: 0,
            large: Vec::new(),
        }
    }

    fn end(&self) -> u64 {
        self.seg.flushed() + self.buf.len() as u64
    }

    /// The header and bytes of the record at `off` of the active segment, which lies in the
    /// buffer (`off` at or past the flushed end).
    fn buffered(&self, off: u64) -> Result<(Header, &[u8])> {
        let bad = |what| corrupt_at(self.seg.id, off, what);
        let avail = self
            .buf
            .get((off - self.seg.flushed()) as usize..)
            .ok_or_else(|| bad("read past the end of the log"))?;
        let h = format::parse_header(&avail[..avail.len().min(MAX_HEADER_LEN)])
            .ok_or_else(|| bad("bad record header"))?;
        let rec = avail
            .get(..h.len)
            .ok_or_else(|| bad("record runs past the end"))?;
        Ok((h, rec))
    }

    /// Take the result of the fill under way, if `done` is it (else a writer already did).
    fn apply_fill(&mut self, done: &Fill) {
        if self.fill_from == done.from && self.seg.id == done.seg {
            self.fill_from = NO_FILL;
            self.alloc = self.alloc.max(done.to);
        }
    }

    /// Make `seg` the lane's active segment (its file is as long as its records; no fill is
    /// under way; no marker known at its end).
    fn set_seg(&mut self, seg: Arc<Segment>) {
        debug_assert_eq!(self.fill_from, NO_FILL);
        self.alloc = seg.flushed();
        self.seg = seg;
        self.marked = false;
    }

    /// Note a live-byte change of segment `seg`; false when the list is full.
    #[inline]
    fn note_live(&mut self, seg: u32, delta: i64) -> bool {
        for e in &mut self.live[..self.nlive] {
            if e.0 == seg {
                e.1 += delta;
                return true;
            }
        }
        if self.nlive == LIVE_PENDING {
            return false;
        }
        self.live[self.nlive] = (seg, delta);
        self.nlive += 1;
        true
    }
}

/// A value as it is stored: compressed with the database's codec when that made it smaller.
struct Stored<'a> {
    bytes: std::borrow::Cow<'a, [u8]>,
    /// Codec code (0 = stored raw).
    code: u8,
    /// Uncompressed length when compressed, else 0.
    raw_len: u64,
}

/// Who accounts the live bytes of a record written by `write_put` / `write_delete`.
#[derive(Clone, Copy)]
enum Acct {
    /// The lane, lazily: the new record (a put) becomes live and `old` (segment, length), the
    /// record it replaces, dies. For writers that point the index at the record right away.
    Lane { old: Option<(u32, usize)> },
    /// The caller, through `set_slot` / `remove_slot`.
    Caller,
    /// The caller, as `Caller`, for a large put that points the index at its record only
    /// later: the lane lists the record (`Tail::large`) until `large_put_done`.
    Large,
}

/// One lane: an independent log with its own active segment and buffer. Each thread writes to
/// its own lane (see `Inner::my_lane`), so writers on different threads share no log lock and
/// no buffer; the records of one key may be in several lanes, ordered by their shard seq.
///
/// The flag says that the buffer has reached `bufsiz`: a writer then flushes it after it has
/// released the shard lock (`Inner::after_write`), so that the other writers never wait
/// behind a `bufsiz` write to the file. `append` flushes by itself only at twice `bufsiz`.
#[repr(align(128))]
struct Lane(Mutex<Tail>, AtomicBool);

/// The last fill of a lane's active segment (`Inner::fill_lane`): zeros from `from` to `to` of
/// segment `seg` (`to` 0 when it failed).
#[derive(Clone, Copy, Default)]
struct Fill {
    seg: u32,
    from: u64,
    to: u64,
}

#[derive(Default)]
struct CommitState {
    started: u64,
    finished: u64,
    running: bool,
}

#[derive(Default)]
struct Counters {
    compactions: AtomicU64,
    relocated_bytes: AtomicU64,
    checkpoints: AtomicU64,
    expired_reclaimed: AtomicU64,
    truncated_bytes: AtomicU64,
    syncs: AtomicU64,
}

struct Inner {
    dir: PathBuf,
    vfs: Arc<dyn Vfs>,
    readonly: bool,
    /// Recovery ignores the checkpoint's index (`Mode::Salvage`).
    full_replay: bool,
    /// The damage a read-only open found (a writable open refuses instead).
    findings: Mutex<Vec<crate::store::Damaged>>,
    cfg: Mutex<Config>,
    /// Copies of hot configuration (read on every write without taking `cfg`).
    sync: SyncMode,
    segsiz: AtomicU64,
    bufsiz: AtomicU64,
    compression: AtomicU8,
    /// Seeds the key hash: the database's salt, fixed at creation. It decides each key's shard
    /// and so its lane: it must never change, or a key's records would spread over lanes.
    hash_seed: AtomicU64,
    /// Seeds every record checksum (the same for every segment of a database).
    salt: u64,
    shards: Box<[Shard]>,
    /// The fast mode of the shards (`Brl`).
    brl: Brl,
    /// One per shard (`TableHint`).
    hints: Box<TableHints>,
    /// The segment table. Replaced only through `set_segs`, which keeps `segs_raw` pointing
    /// at the same table for `segs_locked`.
    segs: ArcSwap<SegTable>,
    segs_raw: std::sync::atomic::AtomicPtr<SegTable>,
    segs_update: Mutex<()>,
    /// Segment tables and maps replaced while a reader inside a shard may still be
    /// looking at them through a plain pointer (`segs_locked`, `Published::peek`); freed by
    /// `reclaim`.
    retired: Retired,
    lanes: usize,
    tails: Box<[Lane]>,
    next_seg: AtomicU32,
    appended: AtomicU64,
    expiring: AtomicU64,
    poisoned: Mutex<Option<String>>,
    is_poisoned: AtomicBool,
    closed: AtomicBool,
    commit: Mutex<CommitState>,
    /// Sealed segments that compaction found a damaged record in (it leaves them be).
    damaged: Mutex<Vec<u32>>,
    /// Held for the whole of `sync_now`.
    sync_one: Mutex<()>,
    /// A segment was created since the directory was last synced.
    dir_dirty: AtomicBool,
    commit_cv: Condvar,
    /// Where recovery replays each lane from (set by a valid checkpoint).
    replay_from: Mutex<Option<Vec<(u32, u64)>>>,
    /// Serialises checkpoints, compaction, vanish, optimize and copy.
    maint: Mutex<()>,
    stop: Mutex<bool>,
    stop_cv: Condvar,
    /// Per lane, the fill lock and the last fill's result (`fill_lane`).
    fills: Box<[Mutex<Fill>]>,
    /// Wakes the filler thread (`sync=always` only); `fill_wake` keeps a wake-up that came
    /// while it was busy.
    fill_cv: Condvar,
    fill_wake: AtomicBool,
    /// A fill failed: no more are tried.
    fill_failed: AtomicBool,
    counters: Counters,
    lock: Mutex<Option<Box<dyn std::any::Any + Send + Sync>>>,
}

/// An on-disk hash database. See the module documentation.
pub struct DiskHash {
    inner: Arc<Inner>,
    bg: Mutex<Vec<JoinHandle<()>>>,
    /// What the database stores about itself (`stored`); written by a writable open when it
    /// was missing, and by `optimize`. `None` only in a read-only open of a database made
    /// before descriptors.
    stored: Mutex<Option<stored::Stored>>,
    /// This open made the database.
    created: bool,
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most `b.len()` bytes into the valid buffer `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    let mut v = u64::from_le_bytes(b);
    if n != 8 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        v ^= xxhash_rust::xxh3::xxh3_64(&(t ^ std::process::id() as u64).to_le_bytes());
    }
    v | 1
}

impl DiskHash {
    /// How many shards the index has (`shard_of` is below it).
    pub const SHARDS: usize = NSHARDS;

    /// The index shard `key` belongs to, in `0..DiskHash::SHARDS`; the same for the life of
    /// this open database (the hash seed is the database's own).
    ///
    /// Each shard has one lock, and two threads writing keys of the same shards hand that
    /// lock's cache line back and forth. A bulk loader that splits its keys between threads
    /// by shard (thread `t` of `T` taking the keys with `shard_of(key) * T / SHARDS == t`)
    /// avoids that: see `kura-bench write --by-shard` and docs/BENCHMARKS.md.
    pub fn shard_of(&self, key: &[u8]) -> usize {
        self.inner.hash(key).0
    }

    /// Open (creating when missing) the database directory at `path` on the real file system.
    pub fn open(path: &Path, params: &Params) -> Result<DiskHash> {
        Self::open_with(path, params, Arc::new(OsVfs), false)
    }

    /// Open on any file system: `readonly` is [`OpenMode::ReadOnly`], else
    /// [`OpenMode::Create`].
    pub fn open_with(
        path: &Path,
        params: &Params,
        vfs: Arc<dyn Vfs>,
        readonly: bool,
    ) -> Result<DiskHash> {
        let mode = if readonly {
            OpenMode::ReadOnly
        } else {
            OpenMode::Create
        };
        Self::open_mode(path, params, vfs, mode)
    }

    /// Open on any file system under `mode` (the rules: `stored`). A read-only open writes
    /// nothing but the lock file, not even recovery's truncation of a torn tail.
    pub fn open_mode(
        path: &Path,
        params: &Params,
        vfs: Arc<dyn Vfs>,
        mode: OpenMode,
    ) -> Result<DiskHash> {
        Self::open_full(path, params, vfs, mode, false, None)
    }

    /// `open_mode`; `salvage` (read-only only): rebuild the index from the log alone
    /// (`Mode::Salvage`); `held`: the caller holds the database's lock, and this is what to
    /// keep in its place.
    fn open_full(
        path: &Path,
        params: &Params,
        vfs: Arc<dyn Vfs>,
        mode: OpenMode,
        salvage: bool,
        held: Option<Box<dyn std::any::Any + Send + Sync>>,
    ) -> Result<DiskHash> {
        let readonly = mode == OpenMode::ReadOnly;
        let mut cfg = Config::from_params(params, None)?;
        let found = stored::prepare(&*vfs, path, mode)?;
        let lock = match held {
            Some(l) => l,
            None => crate::lock::take(&*vfs, path)?,
        };
        // Read under the lock: what the database stores decides what this open did not. A
        // damaged descriptor refuses a writable open; a read-only one goes on without it (its
        // stored parameters unknown) and reports it.
        let (desc, bad_meta) = match crate::meta::read(&*vfs, path) {
            Err(Error::Corrupt(m)) if readonly => (None, Some(m)),
            r => (r?, None),
        };
        let had = match &desc {
            Some(d) => Some(stored::Stored::from_descriptor(d, path, MAX_LANES)?),
            None => None,
        };
        if let Some(had) = had {
            if cfg.lanes.is_some_and(|want| want != had.lanes) {
                return Err(Error::InvalidParam(format!(
                    "`lanes={}`: this database was created with {} lanes, fixed at creation",
                    cfg.lanes.unwrap_or_default(),
                    had.lanes
                )));
            }
            cfg.lanes = Some(had.lanes);
            if params.size("bnum")?.is_none() {
                cfg.bnum = had.bnum;
            }
        }
        let compression = match params.compression()? {
            Some(c) => c,
            None => had.map_or(Compression::None, |h| h.compress),
        };
        let bnum = cfg.bnum;
        let how = match (readonly, salvage) {
            (false, _) => Mode::Write,
            (true, false) => Mode::Read,
            (true, true) => Mode::Salvage,
        };
        let inner = open_inner(path, cfg, compression, vfs, how, lock)?;
        if let Some(m) = bad_meta {
            inner
                .findings
                .lock()
                .push(meta_damage(&*inner.vfs, path, m));
        }
        // A new database, or one made before descriptors, stores this open's choices.
        let stored = match had {
            None if !readonly => {
                let s = stored::Stored {
                    lanes: inner.lanes,
                    compress: compression,
                    bnum,
                };
                crate::meta::write(&*inner.vfs, path, &s.descriptor())?;
                Some(s)
            }
            had => had,
        };
        inner.note_tables();
        let db = DiskHash {
            inner: Arc::new(inner),
            bg: Mutex::new(Vec::new()),
            stored: Mutex::new(stored),
            created: found.created,
        };
        let mut threads: Vec<(&str, BgThread)> = Vec::new();
        if !readonly {
            threads.push(("kura-kh-bg", Inner::background));
            threads.push(("kura-kh-gc", Inner::compactor));
            if db.inner.sync == SyncMode::Always {
                threads.push(("kura-kh-fill", Inner::filler));
            }
        }
        for (name, run) in threads {
            let w = db.inner.clone();
            let h = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || run(w))
                .map_err(Error::Io)?; // dropping `db` stops the threads already started
            db.bg.lock().push(h);
        }
        Ok(db)
    }

    /// Whether this open made the database.
    pub fn created(&self) -> bool {
        self.created
    }

    /// What the database stores about itself (see `stored`); `None` only in a read-only open
    /// of a database made before descriptors.
    pub fn stored(&self) -> Option<stored::Stored> {
        *self.stored.lock()
    }
}

/// Tables up to this many bytes are taken to be in the cache (`Inner::put_replacing`). Tests
/// use a small bound, so that both orders are exercised by their small databases.
const SMALL_TABLE: usize = if cfg!(test) { 2 << 10 } else { 128 << 10 };

/// Ask the CPU to fetch the cache line at `addr`: a hint that never faults and changes
/// nothing, whatever the address.
#[inline]
fn prefetch(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 only hints the cache; it does not access memory in the program's sense
    // and ignores addresses that are not mapped.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(addr as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// How long `write_spinning` and `read_spinning` spin for a shard's lock before they sleep.
const EXCL_SPIN: Duration = Duration::from_micros(50);

/// Take `lock` for writing, spinning up to `EXCL_SPIN` while another thread holds it before
/// sleeping in the lock's queue. A shard is held exclusively for microseconds at a time (a
/// write in slow mode, one batch of a growing table's move), while a sleep and a wake-up cost
/// tens of microseconds here (waking a thread whose core went idle, in a virtual machine):
/// sleeping there made two writers into one growing index put each other to sleep about 600
/// times per million puts.
fn write_spinning<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    spinning(|| lock.try_write(), || !lock.is_locked(), || lock.write())
}

/// `write_spinning` for a reader of a slow shard (one that is growing, say).
fn read_spinning<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    spinning(
        || lock.try_read(),
        || !lock.is_locked_exclusive(),
        || lock.read(),
    )
}

/// `attempt` until it succeeds, trying again each time `free` says it may, for up to
/// `EXCL_SPIN`; then `block`. After the first few microseconds the thread yields between
/// rounds of spinning, so that when there are more threads than cores (a server's workers
/// beside its clients, say) the holder, or other work, gets the core meanwhile.
#[inline]
fn spinning<G>(
    mut attempt: impl FnMut() -> Option<G>,
    free: impl Fn() -> bool,
    block: impl FnOnce() -> G,
) -> G {
    if let Some(g) = attempt() {
        return g;
    }
    let start = Instant::now();
    let mut rounds = 0u32;
    loop {
        for _ in 0..64 {
            std::hint::spin_loop();
            if free() {
                if let Some(g) = attempt() {
                    return g;
                }
            }
        }
        rounds += 1;
        if start.elapsed() >= EXCL_SPIN {
            return block();
        }
        if rounds >= 2 {
            std::thread::yield_now();
        }
    }
}

/// A background thread's body.
type BgThread = fn(Arc<Inner>);

/// The share of a segment's bytes that no record in the index needs.
fn dead_share(s: &Segment) -> f64 {
    let total = s.flushed().saturating_sub(SEG_HEADER_LEN as u64).max(1);
    1.0 - (s.live.load(Ordering::Relaxed) as f64 / total as f64)
}

/// Keep a compaction that has copied `moved` bytes since `started` at `rate` bytes a second
/// (sleeping at most 100 ms at a time); `paced` is what the last call saw.
fn pace(rate: Option<u64>, moved: u64, paced: &mut u64, started: Instant) {
    if let Some(rate) = rate.filter(|_| moved != *paced) {
        *paced = moved;
        let due = Duration::from_secs_f64(moved as f64 / rate as f64);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            std::thread::sleep(wait.min(Duration::from_millis(100)));
        }
    }
}

/// Set the calling thread's nice value, best effort (Linux: per thread).
fn set_thread_nice(nice: i32) {
    #[cfg(target_os = "linux")]
    // SAFETY: plain system calls on the calling thread, no memory passed.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, nice);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

/// How many bytes of a segment a scan reads at a time (in tests, little: so that records
/// straddle chunk ends and outgrow chunks often).
#[cfg(not(test))]
const SCAN_CHUNK: usize = 1 << 20;
#[cfg(test)]
const SCAN_CHUNK: usize = 4096;

/// Reads records of one segment at increasing offsets below `end` through a buffer of up to
/// `SCAN_CHUNK` bytes: one read per chunk instead of one per record. Scans (`scan_segment`:
/// recovery, compaction, checks) read every record this way, and compaction then the live
/// ones again.
struct ChunkReader<'a> {
    inner: &'a Inner,
    seg: &'a Segment,
    end: u64,
    buf: Vec<u8>,
    /// The segment offset of `buf[0]`.
    start: u64,
}

impl<'a> ChunkReader<'a> {
    fn new(inner: &'a Inner, seg: &'a Segment, end: u64) -> ChunkReader<'a> {
        ChunkReader {
            inner,
            seg,
            end,
            buf: Vec::new(),
            start: 0,
        }
    }

    /// The record at `off` (below `end`), its checksum verified; `None` when no valid record
    /// starts there (a header that does not parse, a record running past `end`, a checksum
    /// that fails). Errors are read errors.
    fn valid(&mut self, off: u64) -> Result<Option<(Header, &[u8])>> {
        let held = self.start + self.buf.len() as u64;
        let header_held = off + format::MAX_HEADER_LEN as u64 <= held || held == self.end;
        if off < self.start || off >= held || !header_held {
            let want = ((self.end - off) as usize).min(SCAN_CHUNK);
            self.inner.read_range(self.seg, off, want, &mut self.buf)?;
            self.start = off;
        }
        let rel = (off - self.start) as usize;
        let Some(h) = format::parse_header(&self.buf[rel..]) else {
            return Ok(None);
        };
        if h.len as u64 > self.end - off {
            return Ok(None); // runs past the end: torn or damaged
        }
        let rel = if rel + h.len > self.buf.len() {
            self.inner.read_range(self.seg, off, h.len, &mut self.buf)?;
            self.start = off;
            0
        } else {
            rel
        };
        let rec = &self.buf[rel..rel + h.len];
        Ok(format::verify(rec, self.seg.seed).then_some((h, rec)))
    }

    /// The record at `off`, its checksum verified; an error when there is none.
    fn record(&mut self, off: u64) -> Result<(Header, &[u8])> {
        let (id, end) = (self.seg.id, self.end);
        if off >= end {
            return Err(corrupt_at(id, off, "read past the end of the log"));
        }
        self.valid(off)?
            .ok_or_else(|| corrupt_at(id, off, "damaged record"))
    }
}

/// Where the bytes of `file` between `from` and `len` stop being non-zero: `from` when they are
/// all zeros (read backwards, a chunk at a time).
fn data_end(file: &dyn crate::io::VFile, from: u64, len: u64) -> Result<u64> {
    const CHUNK: u64 = 64 << 10;
    let mut buf = vec![0u8; CHUNK as usize];
    let mut hi = len;
    while hi > from {
        let lo = hi.saturating_sub(CHUNK).max(from);
        let b = &mut buf[..(hi - lo) as usize];
        file.read_at(b, lo)?;
        if let Some(i) = b.iter().rposition(|&x| x != 0) {
            return Ok(lo + i as u64 + 1);
        }
        hi = lo;
    }
    Ok(from)
}

/// Walk the sub-records of a batch frame: `f(offset_in_frame, header, record)`.
fn for_each_sub(
    frame: &[u8],
    h: &Header,
    mut f: impl FnMut(usize, &Header, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut pos = h.key_off;
    for _ in 0..h.count {
        let sub = frame
            .get(pos..)
            .and_then(format::parse_header)
            .filter(|s| s.typ == T_PUT || s.typ == T_DELETE)
            .ok_or_else(|| Error::Corrupt("malformed batch frame".into()))?;
        let rec = frame
            .get(pos..pos + sub.len)
            .ok_or_else(|| Error::Corrupt("batch frame shorter than its records".into()))?;
        f(pos, &sub, rec)?;
        pos += sub.len;
    }
    Ok(())
}

fn open_inner(
    dir: &Path,
    cfg: Config,
    compression: Compression,
    vfs: Arc<dyn Vfs>,
    mode: Mode,
    lock: Box<dyn std::any::Any + Send + Sync>,
) -> Result<Inner> {
    let readonly = mode != Mode::Write;
    // Find the segments; those whose header is not one of this database's go to recovery.
    let mut probes = recover::probe_segments(&*vfs, dir)?;
    let settled = recover::settle_probes(&mut probes);
    let mut table = SegTable::default();
    let mut bad = Vec::new();
    for p in probes {
        match p.header {
            Ok(info) => {
                let seg = Segment::new(p.id, info.lane as usize, info.salt, p.path, p.file, p.len);
                table.segs.insert(p.id, Arc::new(seg));
            }
            Err(_) => bad.push(p),
        }
    }
    // With no segment header to go by, the checkpoint's (the same salt seeds the key hash).
    let (salt, lanes) = match settled {
        Some((salt, lanes)) => (Some(salt), Some(lanes)),
        None if !bad.is_empty() => match recover::peek_checkpoint(&*vfs, dir) {
            Some((salt, lanes)) => (Some(salt), Some(lanes)),
            None => (None, None),
        },
        None => (None, None),
    };
    let salt = salt.unwrap_or_else(random_u64);
    let lanes = match (lanes, cfg.lanes) {
        (Some(have), Some(want)) if have != want => {
            return Err(Error::InvalidParam(format!(
                "`lanes={want}`: this database was created with {have} lanes, fixed at creation"
            )))
        }
        (Some(have), _) => have,
        (None, want) => want.unwrap_or(DEFAULT_LANES),
    };
    let shards: Box<[Shard]> = (0..NSHARDS)
        .map(|i| {
            let mut table = Table::with_capacity((cfg.bnum.min(MAX_PRESIZE) as usize) / NSHARDS);
            table.set_max_load(shard_max_load(i));
            Shard(RwLock::new(ShardState {
                table,
                seq: 0,
                inflight: Vec::new(),
            }))
        })
        .collect();
    // Placeholder tails until recovery knows each lane's active segment.
    let tails: Box<[Lane]> = (0..lanes)
        .map(|lane| {
            Lane(
                Mutex::new(Tail::new(Arc::new(Segment::new(
                    0,
                    lane,
                    salt,
                    dir.join("none"),
                    Arc::new(NullFile),
                    SEG_HEADER_LEN as u64,
                )))),
                AtomicBool::new(false),
            )
        })
        .collect();
    let next_seg = table.segs.keys().next_back().map_or(1, |&id| id + 1);
    let table = Arc::new(table);
    let inner = Inner {
        dir: dir.to_path_buf(),
        vfs,
        readonly,
        full_replay: mode == Mode::Salvage,
        findings: Mutex::new(Vec::new()),
        sync: cfg.sync,
        segsiz: AtomicU64::new(cfg.segsiz),
        bufsiz: AtomicU64::new(cfg.bufsiz as u64),
        cfg: Mutex::new(cfg),
        compression: AtomicU8::new(compression as u8),
        hash_seed: AtomicU64::new(salt),
        salt,
        shards,
        brl: Brl::new(),
        hints: Box::new(TableHints(std::array::from_fn(|_| TableHint::default()))),
        segs_raw: std::sync::atomic::AtomicPtr::new(Arc::as_ptr(&table) as *mut SegTable),
        segs: ArcSwap::new(table),
        segs_update: Mutex::new(()),
        retired: Retired::default(),
        lanes,
        tails,
        next_seg: AtomicU32::new(next_seg),
        appended: AtomicU64::new(0),
        expiring: AtomicU64::new(0),
        poisoned: Mutex::new(None),
        is_poisoned: AtomicBool::new(false),
        closed: AtomicBool::new(false),
        commit: Mutex::new(CommitState::default()),
        sync_one: Mutex::new(()),
        damaged: Mutex::new(Vec::new()),
        dir_dirty: AtomicBool::new(false),
        commit_cv: Condvar::new(),
        replay_from: Mutex::new(None),
        maint: Mutex::new(()),
        stop: Mutex::new(false),
        stop_cv: Condvar::new(),
        fills: (0..lanes).map(|_| Mutex::new(Fill::default())).collect(),
        fill_cv: Condvar::new(),
        fill_wake: AtomicBool::new(false),
        fill_failed: AtomicBool::new(false),
        counters: Counters::default(),
        lock: Mutex::new(Some(lock)),
    };
    inner.recover(bad)?;
    Ok(inner)
}

/// The finding of a database descriptor that fails its checks (`why`): no record is lost, but
/// what the database stores about itself (its compression, its bnum hint) is unknown.
fn meta_damage(vfs: &dyn Vfs, dir: &Path, why: String) -> crate::store::Damaged {
    let name = crate::meta::META_NAME;
    let len = vfs
        .open(&dir.join(name), false)
        .and_then(|f| f.len())
        .unwrap_or(0);
    crate::store::Damaged {
        file: name.into(),
        off: 0,
        len,
        lost: 0,
        what: format!(
            "the database descriptor is damaged ({why}): its stored parameters (compression, \
             bnum) are unknown; `repair` writes a new one (give `#compress=` to the new \
             database if it was compressed)"
        ),
    }
}

/// How a database is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// For reading and writing: damage refuses the open.
    Write,
    /// For inspection: nothing is written; what verifies is served.
    Read,
    /// As `Read`, rebuilding the index from the log alone (ignoring the checkpoint's index,
    /// which may point at a damaged newest version): for `repair`.
    Salvage,
}

/// A file that is never read or written (the tail's placeholder before the first segment).
struct NullFile;

impl VFile for NullFile {
    fn read_at(&self, _buf: &mut [u8], _off: u64) -> std::io::Result<()> {
        Err(std::io::Error::other("no segment"))
    }
    fn write_at(&self, _buf: &[u8], _off: u64) -> std::io::Result<()> {
        Err(std::io::Error::other("no segment"))
    }
    fn sync(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn len(&self) -> std::io::Result<u64> {
        Ok(0)
    }
    fn set_len(&self, _len: u64) -> std::io::Result<()> {
        Ok(())
    }
}

/// What a lookup (`Inner::find`) needs of the record it finds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Want {
    /// Its slot and length: to replace or remove it. Its checksum is not verified (its value
    /// is never used), and its metadata comes from an unverified header: a record whose value
    /// was damaged can still be overwritten or deleted.
    Slot,
    /// Its verified metadata and decoded value.
    Value,
}

/// What a lookup found for a key.
struct Found {
    slot: Slot,
    len: usize,
    /// The record's seq (its place among the writes of its key).
    seq: u64,
    meta: Meta,
    value: Option<Vec<u8>>,
}

impl Found {
    /// The record `h` at `slot`, with its decoded value when the lookup wants it.
    fn new(slot: &Slot, h: &Header, value: Option<Vec<u8>>) -> Found {
        Found {
            slot: *slot,
            len: h.len,
            seq: h.fields.seq,
            meta: meta_of(h),
            value,
        }
    }
}

impl Inner {
    // ------------------------------------------------------------------ hashing and reading

    #[inline]
    fn hash(&self, key: &[u8]) -> (usize, u32) {
        let h = xxhash_rust::xxh3::xxh3_64_with_seed(key, self.hash_seed.load(Ordering::Relaxed));
        ((h >> (64 - SHARD_BITS)) as usize, h as u32)
    }

    /// `hash`, and start fetching the key's home position in its shard's table into the
    /// cache. A lookup in a large index is a cache miss; started here, it overlaps with taking
    /// the shard lock, whose cache line comes from the other core about every other time when
    /// two threads write.
    #[inline]
    fn locate(&self, key: &[u8]) -> (usize, u32) {
        let (shard, tag) = self.hash(key);
        let hint = &self.hints.0[shard];
        let base = hint.base.load(Ordering::Relaxed);
        if base != 0 {
            let (bucket, addr) = index::home_addr(base, hint.cap.load(Ordering::Relaxed), tag);
            prefetch(bucket);
            if addr >= bucket + 64 {
                prefetch(addr);
            }
        }
        (shard, tag)
    }

    /// Record where shard `i`'s table array is (`TableHint`); called with the shard locked.
    #[inline]
    fn note_table(&self, i: usize, tbl: &Table) {
        let (base, cap) = tbl.home_array();
        let hint = &self.hints.0[i];
        if hint.base.load(Ordering::Relaxed) != base || hint.cap.load(Ordering::Relaxed) != cap {
            hint.cap.store(cap, Ordering::Relaxed);
            hint.base.store(base, Ordering::Relaxed);
        }
    }

    // ------------------------------------------------------------------ shard modes (`Brl`)

    /// Hold shard `i` exclusively: its `RwLock` for writing, and (when the shard was fast) no
    /// thread inside it any more, their counts folded into the shard's state.
    fn excl(&self, i: usize) -> Excl<'_> {
        let mut g = write_spinning(&self.shards[i].0);
        let slow = &self.brl.slow.0[i];
        // Only a holder of the write lock changes the flag.
        if !slow.load(Ordering::Relaxed) {
            slow.store(true, Ordering::SeqCst);
            let mut maxseq = 0u64;
            let mut delta = 0i64;
            for stripe in self.brl.stripes.iter() {
                let c = &stripe.0[i];
                let mut spins = 0u32;
                while c.inside.load(Ordering::SeqCst) != 0 {
                    index::back_off(&mut spins);
                }
                maxseq = maxseq.max(c.maxseq.swap(0, Ordering::AcqRel));
                delta += c.delta.swap(0, Ordering::AcqRel);
            }
            // The shard's seq stays at least every seq given out, so that the next ones (in
            // either mode) come after them all.
            g.seq = g.seq.max(maxseq);
            g.table.add_len(delta);
        }
        Excl { g, slow }
    }

    /// Enter shard `shard` in fast mode and lock the run of `tag`. `Err(false)` when the shard
    /// is slow, `Err(true)` when the run reaches the end of the table (the caller then takes
    /// the shard exclusively: an insert there grows the table).
    #[inline]
    fn fast(&self, shard: usize, tag: u32) -> std::result::Result<Fast<'_>, bool> {
        let f = self.enter(shard).ok_or(false)?;
        Self::lock_run_in(f, tag).ok_or(true)
    }

    /// Lock the run of `tag` in a shard entered in fast mode (`enter`); `None` (the shard
    /// left) when the run reaches the end of the table.
    #[inline]
    fn lock_run_in(mut f: Fast<'_>, tag: u32) -> Option<Fast<'_>> {
        let table = f.table;
        // SAFETY: while the shard is fast, every thread uses its table through `lock_run` or
        // `snapshot`, or reads only its count, size and array (`count`, `note_table`); a fast
        // shard's table is never growing (`Excl` keeps a growing shard slow).
        f.run = Some(unsafe { table.lock_run(tag) }?);
        Some(f)
    }

    /// Enter shard `shard` in fast mode (no run locked yet); `None` when it is slow.
    #[inline]
    fn enter(&self, shard: usize) -> Option<Fast<'_>> {
        let (count, own) = self.brl.mine(shard);
        count.enter(own);
        if self.brl.slow.0[shard].load(Ordering::SeqCst) {
            count.exit(own);
            return None;
        }
        // SAFETY: the shard is fast and this thread is counted inside it: nothing changes the
        // shard's state until it leaves (`excl` waits for that; holders of the read lock only
        // read it; `Excl` guards that set the shard fast had finished their changes).
        let st = unsafe { &*self.shards[shard].0.data_ptr() };
        Some(Fast {
            inner: self,
            shard,
            run: None,
            table: &st.table,
            base: st.seq,
            count,
            own,
            maxseq: 0,
            delta: 0,
        })
    }

    /// A plain put in fast mode: the record is appended first, with a seq from this thread's
    /// clock, while the key's bucket (prefetched by `locate`) is fetched; then the run is
    /// locked and the slot pointed at the record. When the bucket shows a later seq (a key of
    /// it was written meanwhile by a thread whose clock ran ahead), the record is written
    /// again with a seq past it and the first copy is dead: no key's seqs ever go down.
    /// `None` when the shard is slow, or the run reaches the end of the table (after an
    /// append, which is then dead): the caller holds the shard exclusively instead.
    #[allow(clippy::too_many_arguments)]
    fn put_fast(
        &self,
        shard: usize,
        tag: u32,
        key: &[u8],
        stored: &Stored<'_>,
        flags: u32,
        expires: u64,
    ) -> Option<Result<Meta>> {
        let mut f = self.enter(shard)?;
        let lane = self.my_lane();
        let acct = Acct::Lane { old: None };
        let mut seq = f.seq_after(0);
        let (mut seg, mut off, len) =
            match self.write_put(lane, key, stored, flags, expires, (seq, 0), acct) {
                Ok(w) => w,
                Err(e) => return Some(Err(e)),
            };
        f.gave(seq);
        // SAFETY: as in `lock_run_in`.
        let Some(run) = (unsafe { f.table.lock_run(tag) }) else {
            self.dead_record(lane, seg, len);
            return None;
        };
        let behind = run.seq() >= seq;
        f.run = Some(run);
        if behind {
            self.dead_record(lane, seg, len);
            seq = f.seq_after(0);
            match self.write_put(lane, key, stored, flags, expires, (seq, 0), acct) {
                Ok(w) => (seg, off, _) = w,
                Err(e) => return Some(Err(e)),
            }
            f.gave(seq);
        }
        f.run.as_mut().expect("locked").set_seq(seq);
        let candidates = f.cands(tag).next().is_some();
        let found = self.point_appended(&mut f, tag, key, lane, (seg, off), candidates);
        Some(found.map(|_| Meta {
            flags,
            expires,
            version: seq,
        }))
    }

    /// A delete in fast mode, appending first like `put_fast`: its delete record (seq from
    /// the thread's clock) goes into the lane buffer while the key's bucket is fetched; then
    /// the run is locked and the key looked for. Found: the slot is removed (after writing the
    /// record again with a later seq if the bucket shows one at least as large). Not found:
    /// the record is taken back out of the buffer if nothing came after it, else it stays, a
    /// delete of an absent key, older than the bucket's seq it leaves: harmless on replay.
    /// `None` when the shard is slow, the record would not stay in the buffer, or the run
    /// reaches the end of the table: the caller then deletes through `writer`.
    fn out_fast(&self, shard: usize, tag: u32, key: &[u8]) -> Option<Result<Option<Found>>> {
        let mut f = self.enter(shard)?;
        let lane = self.my_lane();
        let mut seq = f.seq_after(0);
        let hdr = HeaderBuf::delete(key.len(), seq);
        let len = hdr.as_slice().len() + key.len();
        let (seg_id, mark, appended) = {
            let mut tail = self.tails[lane].0.lock();
            if !self.stays_in_buffer(&tail, len) {
                return None;
            }
            let (mark, seg_id) = (tail.buf.len(), tail.seg.id);
            if let Err(e) = self.append(&mut tail, &[hdr.as_slice(), key], true) {
                return Some(Err(e));
            }
            (seg_id, mark, tail.appended)
        };
        f.gave(seq);
        // SAFETY: as in `lock_run_in`.
        let run = unsafe { f.table.lock_run(tag) }?;
        let behind = run.seq() >= seq;
        let floor = run.seq().max(seq);
        f.run = Some(run);
        let found = match self.find(&f, tag, key, Want::Slot) {
            Ok(found) => found,
            Err(e) => {
                f.run.as_mut().expect("locked").set_seq(floor);
                return Some(Err(e));
            }
        };
        let Some(found) = found else {
            f.run.as_mut().expect("locked").set_seq(floor);
            let mut tail = self.tails[lane].0.lock();
            if tail.seg.id == seg_id && tail.buf.len() == mark + len && tail.appended == appended {
                tail.buf.truncate(mark);
                tail.appended -= len as u64;
            }
            return Some(Ok(None));
        };
        if behind {
            seq = f.seq_after(0);
            if let Err(e) = self.write_delete(lane, key, seq, Acct::Caller) {
                return Some(Err(e));
            }
            f.gave(seq);
        }
        f.run.as_mut().expect("locked").set_seq(seq);
        {
            let mut tail = self.tails[lane].0.lock();
            self.note_full(lane, &tail);
            self.note_live(&mut tail, found.slot.seg, -(found.len as i64));
        }
        f.remove(&found.slot);
        Some(Ok(Some(found)))
    }

    /// A record counted live (by `write_put` to lane `lane`, or long ago) is dead: note it in
    /// the lane.
    fn dead_record(&self, lane: usize, seg: u32, len: usize) {
        let mut tail = self.tails[lane].0.lock();
        self.note_live(&mut tail, seg, -(len as i64));
    }

    /// A reader's view of the run of `tag` in `shard`: read without locks when `optimistic`
    /// and the shard is fast (unless writers keep changing it), else locked.
    #[inline]
    fn reader(&self, shard: usize, tag: u32, optimistic: bool) -> Reader<'_> {
        loop {
            if let Some(f) = self.enter(shard) {
                if optimistic {
                    // SAFETY: as in `lock_run_in`.
                    if let Some(cands) = unsafe { f.table.snapshot(tag) } {
                        // The record is the next miss: start it now, so that it overlaps
                        // with the way back to the lookup.
                        if let Some(slot) = cands.candidates().next() {
                            self.prefetch_record(&slot);
                        }
                        return Reader::Snap(Snap { inside: f, cands });
                    }
                }
                // Still inside: the run is locked without counting in again.
                return match Self::lock_run_in(f, tag) {
                    Some(f) => Reader::Fast(f),
                    None => Reader::Excl(self.excl(shard)),
                };
            }
            let g = read_spinning(&self.shards[shard].0);
            // Made fast again before the read lock was ours: try again.
            if self.brl.slow.0[shard].load(Ordering::Acquire) {
                return Reader::Shared(g);
            }
        }
    }

    /// A writer's view of the run of `tag` in `shard`.
    #[inline]
    fn writer(&self, shard: usize, tag: u32) -> Writer<'_> {
        match self.fast(shard, tag) {
            Ok(f) => Writer::Fast(f),
            Err(_) => Writer::Excl(self.excl(shard)),
        }
    }

    /// Whether shard `shard`, whose table is `table`, is past its load limit by the counts of
    /// every stripe (called inside the shard in fast mode, where the table's own count lags).
    fn fast_wants_growth(&self, shard: usize, table: &Table) -> bool {
        let n = table.len() as i64 + self.brl.delta(shard);
        n as f64 > table.capacity() as f64 * table.max_load()
    }

    /// Grow shard `i`'s table if it is past its load limit: the new array is made without
    /// any lock, then installed (the slots move with the shard's next writes).
    fn grow(&self, i: usize) {
        let nb = {
            let g = self.excl(i);
            if !g.table.wants_growth() {
                return;
            }
            g.table.grow_cap()
        };
        self.grow_to(i, nb);
    }

    /// Make an array of `nb` buckets without any lock and install it as shard `i`'s next
    /// (unless another writer grew the table first).
    fn grow_to(&self, i: usize, nb: usize) {
        let spare = index::Spare::new(nb);
        let mut g = self.excl(i);
        let unused = g.table.grow_into(spare);
        self.note_table(i, &g.table);
        drop(g);
        drop(unused);
        // Then move the slots over in batches, the lock released between them, so that the
        // shard is back in fast mode soon instead of after its next few hundred writes.
        loop {
            let mut g = self.excl(i);
            if !g.table.is_moving() {
                break;
            }
            g.table.move_some(MOVE_BATCH);
            let retired = g.table.take_retired();
            drop(g);
            if retired.is_none() {
                // A moment with the lock free, so that a writer spinning for it
                // (`write_spinning`) gets it between two batches instead of after the move.
                for _ in 0..16 {
                    std::hint::spin_loop();
                }
            }
            drop(retired);
        }
    }

    /// Release a shard held exclusively after a write that may have inserted or removed.
    /// When the shard's table asks to grow, make the new memory (faulting its pages in)
    /// without the lock and install it under the lock (the slots move over with later
    /// writes); memory the table no longer needs is freed after the lock is released. So the
    /// shard's other writers never wait for the kernel or for a whole table to be copied.
    #[inline]
    fn unlock(&self, i: usize, mut tbl: Excl<'_>) {
        let retired = tbl.table.take_retired();
        let grow = tbl.table.wants_growth().then(|| tbl.table.grow_cap());
        self.note_table(i, &tbl.table);
        drop(tbl);
        drop(retired);
        if let Some(nb) = grow {
            self.grow_to(i, nb);
        }
    }

    /// Start fetching the header and key of the record `slot` points at (the caller is inside
    /// the shard: holding a lock, or counted in).
    #[inline]
    fn prefetch_record(&self, slot: &Slot) {
        // SAFETY: the caller is inside a shard (see `segs_locked`).
        let segs = unsafe { self.segs_locked() };
        if let Some(seg) = segs.get(slot.seg) {
            // SAFETY: as above.
            if let Some(m) = unsafe { seg.map.peek() } {
                let b = m.as_slice();
                if (slot.off as usize) < b.len() {
                    let a = b.as_ptr() as usize + slot.off as usize;
                    prefetch(a);
                    prefetch(a + 64);
                }
            }
        }
    }

    /// `note_table` for every shard (after open, vanish and optimize replace the tables).
    fn note_tables(&self) {
        for (i, s) in self.shards.iter().enumerate() {
            self.note_table(i, &s.0.read());
        }
    }

    /// The lane this thread writes to: threads are spread over the lanes, so writers on
    /// different threads share no log buffer and no lock. Under `sync=always` every thread
    /// writes to lane 0 instead: each group commit then fdatasyncs one file, not one per
    /// writing thread, and on a journaling file system each fdatasync costs a journal commit
    /// of its own (two files take twice as long as one); the writers wait for the disk
    /// anyway, so sharing the lane's lock costs nothing. Records of one key may sit in
    /// several lanes (ordered by seq), so where a thread writes can change at any open.
    #[inline]
    fn my_lane(&self) -> usize {
        if self.sync == SyncMode::Always {
            return 0;
        }
        crate::counter::thread_number() % self.lanes
    }

    /// Where a segment's records end now (including bytes still in its lane's buffer).
    fn seg_end(&self, seg: &Segment) -> u64 {
        let tail = self.tails[seg.lane].0.lock();
        if tail.seg.id == seg.id {
            tail.end()
        } else {
            seg.flushed()
        }
    }

    /// The ids of every lane's active segment.
    fn active_ids(&self) -> Vec<u32> {
        self.tails.iter().map(|t| t.0.lock().seg.id).collect()
    }

    /// Read `len` bytes of a segment at `off`, wherever they are (file or write buffer).
    fn read_range(&self, seg: &Segment, off: u64, len: usize, out: &mut Vec<u8>) -> Result<()> {
        let end = off + len as u64;
        if end <= seg.flushed() {
            return seg.read_file(off, out, len);
        }
        let tail = self.tails[seg.lane].0.lock();
        let flushed = tail.seg.flushed();
        if tail.seg.id == seg.id && end > flushed {
            if off < flushed {
                // Straddles file and buffer: read the file part after releasing nothing — the
                // buffer cannot be flushed while we hold the tail lock.
                seg.read_file(off, out, (flushed - off) as usize)?;
            } else {
                out.clear();
            }
            let from = off.max(flushed) - flushed;
            let b = tail
                .buf
                .get(from as usize..(end - flushed) as usize)
                .ok_or_else(|| corrupt_at(seg.id, off, "read past the end of the log"))?;
            out.extend_from_slice(b);
            return Ok(());
        }
        drop(tail);
        seg.read_file(off, out, len)
    }

    /// The segment table, by a plain pointer load (no `ArcSwap` guard: this is on every read).
    ///
    /// # Safety
    /// The caller is inside a shard while it uses the table (its lock held, or counted in
    /// while it is fast: `Brl`), or no other thread can be reclaiming (see `Published::peek`
    /// and `reclaim`).
    #[inline]
    unsafe fn segs_locked(&self) -> &SegTable {
        // SAFETY: `segs_raw` always points at the table `segs` holds or at a replaced one in
        // `retired`, which `reclaim` frees only after holding every shard exclusively once.
        unsafe { &*self.segs_raw.load(Ordering::Acquire) }
    }

    /// Replace the segment table with `f` of it (serialised; the old one is retired).
    fn set_segs(&self, f: impl FnOnce(&SegTable) -> SegTable) {
        let _g = self.segs_update.lock();
        let old = self.segs.load_full();
        let new = Arc::new(f(&old));
        self.segs_raw
            .store(Arc::as_ptr(&new) as *mut SegTable, Ordering::Release);
        self.segs.store(new);
        self.retired.push(Box::new(old));
    }

    /// Free what was retired before this call once no reader can be looking at it: a reader
    /// peeks only inside a shard (its lock held, or counted in while it is fast), so after
    /// every shard has been held exclusively once (`excl`, which waits for the threads
    /// inside), each reader that saw a retired pointer has finished. Must be called with no
    /// shard or lane lock held.
    fn reclaim(&self) {
        if self.retired.is_empty() {
            return;
        }
        let batch = self.retired.take();
        for i in 0..NSHARDS {
            drop(self.excl(i));
        }
        drop(batch);
    }

    /// Call `f` with the segment and the complete record at (`seg_id`, `off`): its header
    /// parsed and within it, its checksum not verified (`with_record`, `with_key_record`).
    /// From the map when it is there (no copy), else copied into the thread's buffer. The
    /// caller is inside a shard.
    fn with_raw_record<R>(
        &self,
        seg_id: u32,
        off: u64,
        whole: bool,
        f: impl FnOnce(&Segment, &Header, &[u8]) -> Result<R>,
    ) -> Result<R> {
        // SAFETY: every caller is inside a shard (this reads the records a shard's table
        // points at).
        let segs = unsafe { self.segs_locked() };
        let seg = segs
            .get(seg_id)
            .ok_or_else(|| Error::Corrupt(format!("index points into missing segment {seg_id}")))?;
        let mut f = Some(f);
        if off < seg.flushed() {
            // SAFETY: as above.
            if let Some(r) = unsafe {
                seg.with_mapped(off, |res| {
                    res.and_then(|(h, rec)| (f.take().expect("called once"))(seg, &h, rec))
                })
            } {
                return r;
            }
        }
        let f = f.take().expect("not yet called");
        // Taken out of the thread's slot, so a nested read (none today) would just allocate.
        let mut buf = SCRATCH.with(std::cell::Cell::take);
        let res = self
            .read_record(seg, off, whole, &mut buf)
            .and_then(|h| f(seg, &h, &buf[..h.len.min(buf.len())]));
        if buf.capacity() <= SCRATCH_KEEP {
            SCRATCH.with(|c| c.set(buf));
        }
        res
    }

    /// Call `f` with the complete verified record at (`seg`, `off`). The caller holds a shard
    /// lock.
    fn with_record<R>(
        &self,
        seg_id: u32,
        off: u64,
        f: impl FnOnce(&Header, &[u8]) -> R,
    ) -> Result<R> {
        self.with_raw_record(seg_id, off, true, |seg, h, rec| {
            if format::verify(rec, seg.seed) {
                Ok(f(h, rec))
            } else {
                Err(corrupt_at(seg_id, off, "checksum mismatch"))
            }
        })
    }

    /// Call `f` with the complete verified record at (`seg_id`, `off`) if it is a put of
    /// `key`; `Ok(None)` if it is another key's (or not a put). Another key's record (a rare
    /// tag collision) is verified too, so that damaged key bytes are an error, never a key
    /// silently not found. Called with a shard lock held.
    fn with_key_record<R>(
        &self,
        seg_id: u32,
        off: u64,
        key: &[u8],
        f: impl FnOnce(&Header, &[u8]) -> R,
    ) -> Result<Option<R>> {
        self.with_raw_record(seg_id, off, true, |seg, h, rec| {
            Ok(key_record_is(seg, off, h, rec, key, true)?.then(|| f(h, rec)))
        })
    }

    /// The header of the record at (`seg_id`, `off`) if it is a put of `key`, not verified;
    /// `Ok(None)` if it is another key's (or not a put). For a lookup that uses nothing but
    /// the record's length and key (a put or a delete replacing it): of a record read from
    /// the file, only the first `FIRST_READ` bytes are read when they hold the key. Another
    /// key's record (a rare tag collision) is read whole and verified, as in
    /// `with_key_record`. Called with a shard lock held.
    fn key_header(&self, seg_id: u32, off: u64, key: &[u8]) -> Result<Option<Header>> {
        let ours = self.with_raw_record(seg_id, off, false, |_, h, part| {
            Ok(format::is_put_of(h, part, key).then_some(*h))
        })?;
        if ours.is_some() {
            return Ok(ours);
        }
        self.with_raw_record(seg_id, off, true, |seg, h, rec| {
            Ok(key_record_is(seg, off, h, rec, key, false)?.then_some(*h))
        })
    }

    /// Copy the record at `off` of `seg` into `out` and return its header, from the file or
    /// from the lane's buffer, taking the tail lock at most once. Records never straddle the
    /// flushed end (a flush writes the whole buffer), so one source always holds all of it.
    /// Without `whole`, a record read from the file may stop after its key: `out` then holds
    /// the first `FIRST_READ` bytes (or more, up to the end of the key). The caller verifies
    /// the checksum.
    fn read_record(
        &self,
        seg: &Segment,
        off: u64,
        whole: bool,
        out: &mut Vec<u8>,
    ) -> Result<Header> {
        out.clear();
        let bad = |what| corrupt_at(seg.id, off, what);
        if off >= seg.flushed() {
            let tail = self.tails[seg.lane].0.lock();
            let flushed = tail.seg.flushed();
            if tail.seg.id == seg.id && off >= flushed {
                let (h, rec) = tail.buffered(off)?;
                out.extend_from_slice(rec);
                return Ok(h);
            }
            // Flushed since the first look: the file has it now.
        }
        let avail = seg.flushed().saturating_sub(off) as usize;
        // One read for the header and, usually, the rest of the record (`FIRST_READ`).
        seg.read_file(off, out, avail.min(FIRST_READ))?;
        let h = format::parse_header(out).ok_or_else(|| bad("bad record header"))?;
        if h.len > avail {
            return Err(bad("record runs past the end"));
        }
        let key_end = h.key_off + h.klen;
        if h.len > out.len() && (whole || key_end > out.len()) {
            seg.read_file(off, out, if whole { h.len } else { key_end })?;
        }
        Ok(h)
    }

    /// Show the record of `key` in a shard table to `f`: candidate records are read in place
    /// (from the map when flushed) to compare keys; `f` sees the matching one's slot, header
    /// and bytes, its checksum verified (`with_key_record`). `None` when the key has no record.
    fn find_with<R>(
        &self,
        tbl: &impl Cands,
        tag: u32,
        key: &[u8],
        mut f: impl FnMut(&Slot, &Header, &[u8]) -> Result<R>,
    ) -> Result<Option<R>> {
        for slot in tbl.cands(tag) {
            let r =
                self.with_key_record(slot.seg, slot.off as u64, key, |h, rec| f(&slot, h, rec))?;
            if let Some(r) = r {
                return r.map(Some);
            }
        }
        Ok(None)
    }

    /// `bytes` (read from segment `seg`) as a `Pinned` holding the segment's mapping, when
    /// they lie in it (not when they were read into a buffer, or are still in a lane's).
    fn pin(&self, seg: u32, bytes: &[u8]) -> Option<Pinned> {
        let map = self.segs.load().get(seg)?.map.load_full()?;
        let off = (bytes.as_ptr() as usize).checked_sub(map.as_slice().as_ptr() as usize)?;
        Pinned::new(map, off, bytes.len())
    }

    /// Find the slot of `key` in a shard table, and what `want` asks for of its record.
    fn find(&self, tbl: &impl Cands, tag: u32, key: &[u8], want: Want) -> Result<Option<Found>> {
        if want == Want::Slot {
            for slot in tbl.cands(tag) {
                if let Some(h) = self.key_header(slot.seg, slot.off as u64, key)? {
                    return Ok(Some(Found::new(&slot, &h, None)));
                }
            }
            return Ok(None);
        }
        self.find_with(tbl, tag, key, |slot, h, rec| {
            Ok(Found::new(slot, h, Some(decode_value(h, rec)?)))
        })
    }

    /// `find(.., Want::Slot)` for a caller that holds the tail lock of its lane `tail`: a
    /// candidate record still in that lane's buffer is read from it (`read_record` would take
    /// the lock again). `None` when a candidate lies in another lane's buffer: reading it
    /// would lock that lane while holding this one, and two threads deleting each other's
    /// newest keys would then wait for each other forever. Other records are read from files,
    /// which takes no lane lock.
    fn find_holding(
        &self,
        tbl: &impl Cands,
        tag: u32,
        key: &[u8],
        tail: &Tail,
    ) -> Result<Option<Option<Found>>> {
        let own = &tail.seg;
        let flushed = own.flushed();
        // SAFETY: the caller is inside a shard (see `segs_locked`).
        let segs = unsafe { self.segs_locked() };
        for slot in tbl.cands(tag) {
            let off = slot.off as u64;
            if slot.seg == own.id && off >= flushed {
                let (h, rec) = tail.buffered(off)?;
                if key_record_is(own, off, &h, rec, key, false)? {
                    return Ok(Some(Some(Found::new(&slot, &h, None))));
                }
                continue;
            }
            // A flushed end only grows: a record below it now is read without a lane lock.
            if segs.get(slot.seg).is_some_and(|s| off >= s.flushed()) {
                return Ok(None);
            }
            if let Some(h) = self.key_header(slot.seg, off, key)? {
                return Ok(Some(Some(Found::new(&slot, &h, None))));
            }
        }
        Ok(Some(None))
    }

    /// Whether `append` of a `len`-byte record to `tail` only adds it to the buffer: it starts
    /// no new segment, writes nothing to the file and flushes nothing (see `append`,
    /// `ensure_room`).
    fn stays_in_buffer(&self, tail: &Tail, len: usize) -> bool {
        let bufsiz = self.bufsiz.load(Ordering::Relaxed) as usize;
        let end = tail.end() + len as u64;
        tail.seg.id != 0
            && end <= self.segsiz.load(Ordering::Relaxed)
            && end <= u32::MAX as u64
            && len < bufsiz
            && tail.buf.len() + len < 2 * bufsiz
    }

    /// A delete under the shard's write lock (`tbl`) that appends its delete record before it
    /// looks for the key's record, so that the miss on the key's home position (prefetched by
    /// `locate`) is fetched during the append (1M deletes: about 10 % faster). The lane stays
    /// locked until the lookup is done; when the key has no record, the delete record is
    /// taken back out of the buffer, which nothing can have flushed meanwhile. `None` (nothing
    /// written) when the record would not stay in the buffer, or a candidate record is in
    /// another lane's buffer (`find_holding`): the caller looks first instead.
    fn delete_appending_first(
        &self,
        tbl: &mut impl KeyIndex,
        tag: u32,
        key: &[u8],
    ) -> Result<Option<Option<Found>>> {
        let seq = tbl.peek_seq(); // taken (`next_seq`) only if the key has a record
        let hdr = HeaderBuf::delete(key.len(), seq);
        let len = hdr.as_slice().len() + key.len();
        let lane = self.my_lane();
        let mut tail = self.tails[lane].0.lock();
        if !self.stays_in_buffer(&tail, len) {
            return Ok(None);
        }
        let (mark, appended, seg_id) = (tail.buf.len(), tail.appended, tail.seg.id);
        self.append(&mut tail, &[hdr.as_slice(), key], true)?;
        debug_assert!(tail.seg.id == seg_id && tail.buf.len() == mark + len);
        let found = self.find_holding(tbl, tag, key, &tail);
        match &found {
            Ok(Some(Some(f))) => {
                let taken = tbl.next_seq(key);
                debug_assert_eq!(taken, seq);
                self.note_full(lane, &tail);
                self.note_live(&mut tail, f.slot.seg, -(f.len as i64));
            }
            _ => {
                tail.buf.truncate(mark);
                tail.appended = appended;
            }
        }
        found
    }

    // ------------------------------------------------------------------ writing

    fn check_writable(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if self.readonly {
            return Err(Error::Unsupported("writing to a database opened read-only"));
        }
        if self.is_poisoned.load(Ordering::Acquire) {
            let msg = self.poisoned.lock().clone().unwrap_or_default();
            return Err(Error::Poisoned(msg));
        }
        Ok(())
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    fn poison(&self, e: &std::io::Error) -> Error {
        let msg = e.to_string();
        self.poisoned.lock().get_or_insert(msg);
        self.is_poisoned.store(true, Ordering::Release);
        Error::Io(std::io::Error::new(e.kind(), e.to_string()))
    }

    /// Add the lane's pending live-byte changes to the segments' counters.
    fn flush_live(&self, tail: &mut Tail) {
        if tail.nlive == 0 {
            return;
        }
        let segs = self.segs.load();
        for &(id, delta) in &tail.live[..tail.nlive] {
            if let Some(s) = segs.get(id) {
                s.add_live(delta);
            }
        }
        tail.nlive = 0;
    }

    /// Note a live-byte change in the lane (see `Tail::live`).
    #[inline]
    fn note_live(&self, tail: &mut Tail, seg: u32, delta: i64) {
        if !tail.note_live(seg, delta) {
            self.flush_live(tail);
            tail.note_live(seg, delta);
        }
    }

    /// Hand every lane's buffer to the OS (a read-only open has none): every record the index
    /// points at is then in its file.
    fn flush_all(&self) -> Result<()> {
        if !self.readonly {
            for t in self.tails.iter() {
                self.flush(&mut t.0.lock())?;
            }
        }
        Ok(())
    }

    /// Hand the buffer to the OS (and the pending live-byte changes to the counters). Called
    /// with the tail lock held.
    fn flush(&self, tail: &mut Tail) -> Result<()> {
        self.flush_live(tail);
        if tail.buf.is_empty() {
            return Ok(());
        }
        let at = tail.seg.flushed();
        self.reserve(tail, at + tail.buf.len() as u64);
        if let Err(e) = tail.seg.file.write_at(&tail.buf, at) {
            return Err(self.poison(&e));
        }
        tail.seg
            .flushed
            .store(at + tail.buf.len() as u64, Ordering::Release);
        tail.seg.dirty.store(true, Ordering::Release);
        tail.buf.clear();
        Ok(())
    }

    /// Before records up to `end` are written to the active segment: wait for a fill under way
    /// that they would reach, and with `sync=always` wake the filler when they come near the
    /// end of the zeros. Called with the tail lock held.
    #[inline]
    fn reserve(&self, tail: &mut Tail, end: u64) {
        if end > tail.fill_from {
            self.settle_fill(tail);
        }
        if self.sync == SyncMode::Always && end + FILL_LOW > tail.alloc && !tail.fill_asked {
            tail.fill_asked = true;
            self.fill_wake.store(true, Ordering::Release);
            self.fill_cv.notify_one();
        }
    }

    /// Wait for the lane's fill under way (if any) and take its result. Called with the tail
    /// lock held (the filler takes the fill lock only while holding the tail lock, or after
    /// dropping it: the order is tail, then fill).
    fn settle_fill(&self, tail: &mut Tail) {
        if tail.fill_from == NO_FILL {
            return;
        }
        let done = self.fills[tail.seg.lane].lock();
        tail.apply_fill(&done);
    }

    /// With `sync=always`, write zeros ahead of the lane's records when they come within
    /// `FILL_LOW` of the end of the last zeros (see `VFile::zero_fill`). Runs on the filler
    /// thread; the lane's writers go on meanwhile, below the zeros being written.
    fn fill_lane(&self, lane: usize) {
        let lane_lock = &self.tails[lane].0;
        let (seg, from, to, mut done) = {
            let mut tail = lane_lock.lock();
            if !std::mem::take(&mut tail.fill_asked) {
                return; // a lane nobody writes needs no zeros
            }
            let end = tail.end();
            let segsiz = self.segsiz.load(Ordering::Relaxed);
            if tail.seg.id == 0 || tail.fill_from != NO_FILL || end + FILL_LOW <= tail.alloc {
                return;
            }
            // Whole pages past the records, up to the segment size. A lane that outran its
            // zeros (a new segment, a burst) gets a gap to write into meanwhile and a shorter
            // fill, done sooner.
            let (gap, step) = if end > tail.alloc {
                ((FILL_LOW / 4).min(segsiz / 8), FILL_STEP / 4)
            } else {
                (0, FILL_STEP)
            };
            let from = tail.alloc.max(end + gap).next_multiple_of(4096);
            let to = (from + step).min(segsiz.next_multiple_of(4096));
            if from >= to {
                return;
            }
            tail.fill_from = from;
            // Taken before the tail lock is dropped, so a writer that must settle the fill
            // waits for it rather than finding the previous result.
            let done = self.fills[lane].lock();
            (tail.seg.clone(), from, to, done)
        };
        let ok = seg.file.zero_fill(from, to - from).is_ok();
        if !ok {
            // Out of space, say: records are written as before, without zeros ahead. (The
            // zeros written so far are cut off with the rest at the segment's seal.)
            self.fill_failed.store(true, Ordering::Relaxed);
        }
        *done = Fill {
            seg: seg.id,
            from,
            to: if ok { to } else { 0 },
        };
        let result = *done;
        drop(done);
        lane_lock.lock().apply_fill(&result);
    }

    /// Cut the active segment's file back to its records (the zeros written ahead of them).
    /// Called with the tail lock held, before the segment is sealed or the database closed.
    /// The next sync makes the cut durable, and every checkpoint syncs first, so a segment that
    /// recovery does not scan never ends in zeros; one that it scans may (a crash before that
    /// sync), and the scan stops there.
    fn trim_tail(&self, tail: &mut Tail) -> Result<()> {
        self.flush(tail)?;
        self.settle_fill(tail);
        let end = tail.seg.flushed();
        if tail.alloc > end || tail.seg.file.len().map_err(|e| self.poison(&e))? > end {
            tail.seg.file.set_len(end).map_err(|e| self.poison(&e))?;
            tail.seg.dirty.store(true, Ordering::Release);
            tail.alloc = end;
        }
        Ok(())
    }

    /// Start a new segment after the active one. Called with the tail lock held.
    fn roll(&self, tail: &mut Tail) -> Result<()> {
        self.mark(tail);
        self.trim_tail(tail)?;
        let id = self.next_seg.fetch_add(1, Ordering::Relaxed);
        let seg = self.create_segment(id, tail.seg.lane)?;
        tail.seg
            .horizon
            .store(self.next_seg.load(Ordering::Relaxed), Ordering::Release);
        tail.seg.sealed.store(true, Ordering::Release);
        tail.set_seg(seg);
        self.trim_maps();
        Ok(())
    }

    /// End the lane's log with a marker, unless it already ends with one or holds nothing: a
    /// record that verifies after the last real one, so that damage to that record is told
    /// from a torn tail (`scan`). Written when a segment is sealed, before a checkpoint reads
    /// the lanes' positions and at close. Called with the tail lock held.
    fn mark(&self, tail: &mut Tail) {
        if tail.marked || tail.seg.id == 0 || tail.end() <= SEG_HEADER_LEN as u64 {
            return;
        }
        tail.buf.extend_from_slice(&format::marker(tail.seg.seed));
        tail.marked = true;
    }

    fn create_segment(&self, id: u32, lane: usize) -> Result<Arc<Segment>> {
        let path = self.dir.join(seg_file_name(id));
        let file = self.vfs.open(&path, true).map_err(|e| self.poison(&e))?;
        file.set_len(0).map_err(|e| self.poison(&e))?;
        let info = format::SegInfo {
            id,
            salt: self.salt,
            lane: lane as u16,
            lanes: self.lanes as u16,
        };
        file.write_at(&format::seg_header(&info), 0)
            .map_err(|e| self.poison(&e))?;
        let seg = Segment::new(
            id,
            lane,
            self.salt,
            path.clone(),
            file,
            SEG_HEADER_LEN as u64,
        );
        seg.dirty.store(true, Ordering::Release);
        let segsiz = self.cfg.lock().segsiz;
        if let Some(m) = self.vfs.map(&path, segsiz as usize) {
            seg.map.store(Some(Arc::new(m)), &self.retired);
        }
        let seg = Arc::new(seg);
        self.set_segs(|t| {
            let mut t = SegTable::clone(t);
            t.segs.insert(id, seg.clone());
            t
        });
        // Its name becomes durable with the next sync, before any of its records can be
        // reported durable (an fsync of the directory here, under the shard and lane locks,
        // was most of a roll's time, and up to 11 ms).
        self.dir_dirty.store(true, Ordering::Release);
        Ok(seg)
    }

    /// Keep the memory-mapped part of the segments near `msiz` bytes (newest first): older
    /// sealed segments are unmapped (read with positioned reads), and when the active segments
    /// alone exceed it, the pages touched through their maps are released from the resident
    /// set (they stay in the OS page cache). Called at every roll and every second.
    fn trim_maps(&self) {
        let msiz = self.cfg.lock().msiz;
        let mut mapped = 0u64;
        let mut active = Vec::new();
        for seg in self.segs.load().segs.values().rev() {
            let Some(m) = seg.map.load_full() else {
                continue;
            };
            mapped += seg.flushed();
            if !seg.sealed.load(Ordering::Acquire) {
                active.push(m);
            } else if mapped > msiz {
                seg.map.store(None, &self.retired);
            }
        }
        if mapped > msiz {
            for m in active {
                m.release();
            }
        }
    }

    /// Roll the lane to a new segment unless a record of `len` bytes fits in the active one (a
    /// record larger than a segment gets a fresh segment of its own).
    fn ensure_room(&self, tail: &mut Tail, len: usize) -> Result<()> {
        let segsiz = self.segsiz.load(Ordering::Relaxed);
        if tail.seg.id == 0
            || (tail.end() + len as u64 > segsiz && tail.end() > SEG_HEADER_LEN as u64)
        {
            self.roll(tail)?;
        }
        Ok(())
    }

    /// Append one record made of `parts` (already sealed, or sealed here when `seal`).
    /// Returns its location. Called with the tail lock held.
    fn append(&self, tail: &mut Tail, parts: &[&[u8]], seal: bool) -> Result<(u32, u64)> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let bufsiz = self.bufsiz.load(Ordering::Relaxed) as usize;
        self.ensure_room(tail, len)?;
        let off = tail.end();
        if off + len as u64 > u32::MAX as u64 {
            return Err(Error::TooLarge(format!("record of {len} bytes")));
        }
        let seed = tail.seg.seed;
        if len >= bufsiz {
            // Large record: straight to the file.
            self.flush(tail)?;
            let mut crc = crc32c::crc32c_append(seed, &parts[0][4..]);
            for p in &parts[1..] {
                crc = crc32c::crc32c_append(crc, p);
            }
            let mut first = parts[0].to_vec();
            if seal {
                first[0..4].copy_from_slice(&crc.to_le_bytes());
            }
            self.reserve(tail, off + len as u64);
            let mut at = off;
            for p in std::iter::once(first.as_slice()).chain(parts[1..].iter().copied()) {
                tail.seg.file.write_at(p, at).map_err(|e| self.poison(&e))?;
                at += p.len() as u64;
            }
            tail.seg.flushed.store(at, Ordering::Release);
            tail.seg.dirty.store(true, Ordering::Release);
        } else {
            let start = tail.buf.len();
            for p in parts {
                tail.buf.extend_from_slice(p);
            }
            if seal {
                format::seal(&mut tail.buf[start..], seed);
            }
            // Writers flush a full buffer once they have left the shard lock (`Lane`,
            // `note_full`); this bounds the buffer when nobody does.
            if tail.buf.len() >= 2 * bufsiz {
                self.flush(tail)?;
            }
        }
        tail.appended += len as u64;
        tail.marked = false;
        Ok((tail.seg.id, off))
    }

    /// A value as stored: compressed with the configured codec when that makes it smaller.
    fn stored_form<'a>(&self, value: &'a [u8]) -> Stored<'a> {
        let comp = Compression::from_code(self.compression.load(Ordering::Relaxed))
            .unwrap_or(Compression::None);
        match compress::compress(comp, value) {
            Some(z) => Stored {
                bytes: z.into(),
                code: comp as u8,
                raw_len: value.len() as u64,
            },
            None => Stored {
                bytes: value.into(),
                code: 0,
                raw_len: 0,
            },
        }
    }

    /// Encode and append a put record of a value already in its stored form. Returns
    /// (segment, offset, length).
    #[allow(clippy::too_many_arguments)]
    fn write_put(
        &self,
        lane: usize,
        key: &[u8],
        stored: &Stored<'_>,
        flags: u32,
        expires: u64,
        (seq, version): (u64, u64),
        acct: Acct,
    ) -> Result<(u32, u64, usize)> {
        let fields = PutFields {
            flags,
            expires,
            seq,
            compression: stored.code,
            raw_len: stored.raw_len,
            version,
        };
        let hdr = HeaderBuf::put(key.len(), stored.bytes.len(), &fields);
        if expires != 0 {
            self.expiring.fetch_add(1, Ordering::Relaxed);
        }
        let len = hdr.as_slice().len() + key.len() + stored.bytes.len();
        let mut tail = self.tails[lane].0.lock();
        let (seg, off) = self.append(&mut tail, &[hdr.as_slice(), key, &stored.bytes], true)?;
        self.note_full(lane, &tail);
        if let Acct::Large = acct {
            // Under the lane lock, which a checkpoint takes to read the lane's positions and
            // compaction to look for pending records (`large_pending`).
            tail.large.push((seg, off));
        }
        if let Acct::Lane { old } = acct {
            self.note_live(&mut tail, seg, len as i64);
            if let Some((oseg, olen)) = old {
                self.note_live(&mut tail, oseg, -(olen as i64));
            }
        }
        Ok((seg, off, len))
    }

    /// A large put written with `Acct::Large` to lane `lane`, its record at (`seg`, `off`),
    /// has pointed the index at it (or found that a later write of its key came first): the
    /// segment may be compacted again, and checkpoints need not replay the record.
    fn large_put_done(&self, lane: usize, seg: u32, off: u64) {
        let mut tail = self.tails[lane].0.lock();
        if let Some(i) = tail.large.iter().position(|&p| p == (seg, off)) {
            tail.large.swap_remove(i);
        }
    }

    /// Whether a large put's record in `seg` is not in the index yet (`Tail::large` of the
    /// segment's lane). Compaction would take it for dead. A sealed segment gets no new
    /// records, so once this is false it stays false, and every such record is indexed (the
    /// lane lock orders the check after `large_put_done`, which follows the slot).
    fn large_pending(&self, seg: &Segment) -> bool {
        self.tails[seg.lane]
            .0
            .lock()
            .large
            .iter()
            .any(|p| p.0 == seg.id)
    }

    fn write_delete(&self, lane: usize, key: &[u8], seq: u64, acct: Acct) -> Result<()> {
        let hdr = HeaderBuf::delete(key.len(), seq);
        let mut tail = self.tails[lane].0.lock();
        self.append(&mut tail, &[hdr.as_slice(), key], true)?;
        self.note_full(lane, &tail);
        if let Acct::Lane {
            old: Some((oseg, olen)),
        } = acct
        {
            self.note_live(&mut tail, oseg, -(olen as i64));
        }
        Ok(())
    }

    /// Write a new record of `key` and point the index at it, under the shard's write lock
    /// (`tbl`); `old` is the key's current slot and record length. The lane accounts the live
    /// bytes. Returns the new record's metadata.
    #[allow(clippy::too_many_arguments)]
    fn put_locked(
        &self,
        tbl: &mut impl KeyIndex,
        tag: u32,
        key: &[u8],
        old: Option<(Slot, usize)>,
        stored: &Stored<'_>,
        flags: u32,
        expires: u64,
        keep_version: Option<u64>,
    ) -> Result<Meta> {
        let seq = tbl.next_seq(key);
        let acct = Acct::Lane {
            old: old.map(|(o, l)| (o.seg, l)),
        };
        // A version kept (a touch) is written into the record unless it equals the new seq.
        let version = keep_version.filter(|&v| v != seq).unwrap_or(0);
        let lane = self.my_lane();
        let (s, o, _) = self.write_put(lane, key, stored, flags, expires, (seq, version), acct)?;
        self.point(tbl, tag, old.map(|o| o.0), s, o);
        Ok(Meta {
            flags,
            expires,
            version: keep_version.unwrap_or(seq),
        })
    }

    /// A plain put under the shard's write lock (`tbl`): the new record is appended before the
    /// record it replaces is looked for, so that a memory miss is fetched during the append.
    /// With a small table, that miss is the old record's header and key (written long enough
    /// ago to have left the cache; sets over a small key space: 8–9 % more of them a second);
    /// with a large one, the key's home position in the table (1M new keys: 12 % faster). See
    /// docs/BENCHMARKS.md. If the old record cannot be read (a damaged header), the new record,
    /// already in the log, is indexed all the same (so that the index agrees with the log) and
    /// the error is returned.
    fn put_replacing(
        &self,
        tbl: &mut impl KeyIndex,
        tag: u32,
        key: &[u8],
        stored: &Stored<'_>,
        flags: u32,
        expires: u64,
    ) -> Result<Meta> {
        // A small table is in the cache: look at the candidates first and fetch their records
        // while appending. A large one is not: append first, while the key's home position
        // (prefetched by `locate`) is fetched.
        let small = tbl.small();
        let mut candidates = false;
        if small {
            for c in tbl.cands(tag) {
                self.prefetch_record(&c);
                candidates = true;
            }
        }
        let seq = tbl.next_seq(key);
        let lane = self.my_lane();
        let acct = Acct::Lane { old: None };
        let (seg, off, _) = self.write_put(lane, key, stored, flags, expires, (seq, 0), acct)?;
        if !small {
            candidates = tbl.cands(tag).next().is_some();
        }
        let found = self.point_appended(tbl, tag, key, lane, (seg, off), candidates);
        found.map(|_| Meta {
            flags,
            expires,
            version: seq,
        })
    }

    /// The end of a put that appended its record (at `at`, in lane `lane`) before looking:
    /// find the record it replaces (only when some slot has its tag: `candidates`), count that
    /// one dead, and point the key at the new record. The key is pointed at it even when the
    /// old record cannot be read (the error is returned), so that the index agrees with the
    /// log.
    #[allow(clippy::too_many_arguments)]
    fn point_appended(
        &self,
        tbl: &mut impl KeyIndex,
        tag: u32,
        key: &[u8],
        lane: usize,
        at: (u32, u64),
        candidates: bool,
    ) -> Result<Option<Found>> {
        let found = if candidates {
            self.find(tbl, tag, key, Want::Slot)
        } else {
            Ok(None) // a new key: no record with its tag
        };
        let old = match &found {
            Ok(Some(f)) => Some((f.slot, f.len)),
            _ => None,
        };
        if let Some((o, len)) = old {
            self.dead_record(lane, o.seg, len);
        }
        self.point(tbl, tag, old.map(|o| o.0), at.0, at.1);
        found
    }

    /// Point `key` (whose old slot, if any, is `old`) at the record at (`seg`, `off`), without
    /// live-byte accounting (the lane did it: `Acct::Lane`).
    #[inline]
    fn point(&self, tbl: &mut impl KeyIndex, tag: u32, old: Option<Slot>, seg: u32, off: u64) {
        let new = Slot {
            tag,
            seg,
            off: off as u32,
        };
        match old {
            Some(o) => {
                tbl.replace(&o, new);
            }
            None => tbl.insert(new),
        }
    }

    /// Point `key` (whose old slot, if any, is `old`) at a new record, accounting the live
    /// bytes at once.
    fn set_slot(
        &self,
        tbl: &mut impl KeyIndex,
        tag: u32,
        old: Option<(Slot, usize)>,
        seg: u32,
        off: u64,
        len: usize,
    ) {
        self.point(tbl, tag, old.map(|(o, _)| o), seg, off);
        self.add_live(seg, len as i64);
        if let Some((o, olen)) = old {
            self.add_live(o.seg, -(olen as i64));
        }
    }

    fn remove_slot(&self, tbl: &mut impl KeyIndex, old: Slot, len: usize) {
        if tbl.remove(&old) {
            self.add_live(old.seg, -(len as i64));
        }
    }

    fn add_live(&self, seg: u32, delta: i64) {
        if let Some(s) = self.segs.load().get(seg) {
            s.add_live(delta);
        }
    }

    /// Raise the lane's flag when its buffer is full (see `Lane`). Called by the writes that
    /// end with `after_write`, which flushes it.
    #[inline]
    fn note_full(&self, lane: usize, tail: &Tail) {
        if tail.buf.len() >= self.bufsiz.load(Ordering::Relaxed) as usize {
            self.tails[lane].1.store(true, Ordering::Relaxed);
        }
    }

    /// After a write, once the shard lock is released: flush this thread's lane if its buffer
    /// is full, and with `sync=always` wait until the write is durable.
    fn after_write(&self) -> Result<()> {
        if self.sync != SyncMode::Always {
            let lane = &self.tails[self.my_lane()];
            if lane.1.load(Ordering::Relaxed) {
                lane.1.store(false, Ordering::Relaxed);
                let mut tail = lane.0.lock();
                if tail.buf.len() >= self.bufsiz.load(Ordering::Relaxed) as usize {
                    self.flush(&mut tail)?;
                }
            }
            return Ok(());
        }
        if crate::durability::deferred() {
            crate::durability::note_pending();
            return Ok(());
        }
        self.group_commit()
    }

    // ------------------------------------------------------------------ durability

    /// Wait until everything appended before this call is durable, sharing the fdatasync with
    /// every writer that arrives while one is running (group commit).
    fn group_commit(&self) -> Result<()> {
        let mut st = self.commit.lock();
        // A sync that starts after this point covers our write.
        let need = st.started + 1;
        loop {
            if st.finished >= need {
                return match self.poisoned.lock().as_ref() {
                    Some(p) => Err(Error::Poisoned(p.clone())),
                    None => Ok(()),
                };
            }
            if !st.running {
                st.running = true;
                st.started += 1;
                let mine = st.started;
                drop(st);
                let r = self.sync_now();
                st = self.commit.lock();
                st.running = false;
                st.finished = mine;
                self.commit_cv.notify_all();
                if mine >= need {
                    return r;
                }
            } else {
                self.commit_cv.wait(&mut st);
            }
        }
    }

    /// Flush the buffer and fdatasync every segment written since its last sync.
    ///
    /// Syncs run one at a time: a sync that found a segment clean because another had just
    /// taken its dirty flag must not return before that other one's fdatasync has finished
    /// (a checkpoint's sync could otherwise let a group commit acknowledge writes early).
    /// The directory is synced after the segments, so the name of every segment whose records
    /// this sync made durable is durable too.
    fn sync_now(&self) -> Result<()> {
        let _one = self.sync_one.lock();
        for t in self.tails.iter() {
            let mut tail = t.0.lock();
            self.flush(&mut tail)?;
        }
        let segs = self.segs.load();
        for seg in segs.segs.values() {
            if seg.dirty.swap(false, Ordering::AcqRel) {
                if let Err(e) = seg.file.sync() {
                    seg.dirty.store(true, Ordering::Release);
                    return Err(self.poison(&e));
                }
            }
        }
        if self.dir_dirty.swap(false, Ordering::AcqRel) {
            if let Err(e) = self.vfs.sync_dir(&self.dir) {
                self.dir_dirty.store(true, Ordering::Release);
                return Err(self.poison(&e));
            }
        }
        self.counters.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    // ------------------------------------------------------------------ checkpoints

    /// Ask the OS to start writing back what the lanes handed it since the last tick, without
    /// waiting (`VFile::start_writeback`): the next sync (an interval's, a checkpoint's,
    /// close's) then finds little left to write, instead of everything since the last one.
    /// Done here, not by the writers: the request builds and queues the I/O in the calling
    /// thread, which takes a fraction of a millisecond for a MiB.
    fn start_writebacks(&self) {
        if self.sync == SyncMode::Always {
            return; // every write is synced anyway
        }
        let segs = self.segs.load();
        for seg in segs.segs.values() {
            if !seg.dirty.load(Ordering::Acquire) {
                continue;
            }
            let end = seg.flushed();
            let from = seg.written_back.load(Ordering::Relaxed);
            if end > from {
                seg.file.start_writeback(from, end - from);
                seg.written_back.store(end, Ordering::Relaxed);
            }
        }
    }

    /// Write an index checkpoint so that recovery replays only what follows it.
    /// Called with the `maint` lock held.
    fn checkpoint(&self) -> Result<()> {
        if self.readonly {
            return Ok(());
        }
        for t in self.tails.iter() {
            self.mark(&mut t.0.lock());
        }
        let replay = self.lane_positions(true);
        let segs = self.seg_infos();
        // Each shard is snapshotted and encoded in turn, straight to the file: memory holds
        // one shard at a time. Everything the snapshots point at is synced before the
        // checkpoint replaces the old one.
        let res = write_checkpoint(
            &*self.vfs,
            &self.dir,
            self.hash_seed.load(Ordering::Relaxed),
            &replay,
            &segs,
            // Not in the background: a second encoding thread there would take the core the
            // writers have (the maintenance thread itself runs at nice 10).
            self.count() as usize >= PARALLEL_CKPT && !BACKGROUND.with(std::cell::Cell::get),
            |i, v| self.snapshot_into(i, v),
            || {
                self.sync_now()
                    .map_err(|e| std::io::Error::other(e.to_string()))
            },
        );
        res.map_err(|e| self.poison(&e))?;
        self.appended.store(0, Ordering::Relaxed);
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Where every lane's log ends, read at one instant (all tails locked together): a batch
    /// holds the tails of all its lanes while it writes its parts, so none straddles these
    /// positions. Every record before them is reflected in a shard snapshot taken afterwards.
    fn lane_positions(&self, reset_appended: bool) -> Vec<(u32, u64)> {
        let mut guards: Vec<_> = self.tails.iter().map(|t| t.0.lock()).collect();
        guards
            .iter_mut()
            .map(|t| {
                if reset_appended {
                    t.appended = 0;
                }
                self.flush_live(t);
                // Segment ids grow along a lane, so the smallest pair comes first in the log.
                let end = (t.seg.id, t.end());
                t.large.iter().copied().min().map_or(end, |p| p.min(end))
            })
            .collect()
    }

    /// Copy of every shard's slots (each shard consistent in itself).
    fn snapshot_shard(&self, i: usize) -> (u64, Vec<Slot>) {
        let mut v = Vec::new();
        (self.snapshot_into(i, &mut v), v)
    }

    /// Append shard `i`'s slots to `v`; returns the shard's seq.
    fn snapshot_into(&self, i: usize, v: &mut Vec<Slot>) -> u64 {
        let g = self.excl(i);
        g.copy_into(v);
        g.seq
    }

    fn snapshot_shards(&self) -> Vec<(u64, Vec<Slot>)> {
        (0..NSHARDS).map(|i| self.snapshot_shard(i)).collect()
    }

    /// (id, valid length, live bytes, horizon) of every segment, for a checkpoint.
    fn seg_infos(&self) -> Vec<(u32, u64, u64, u32)> {
        self.segs
            .load()
            .segs
            .values()
            .map(|s| {
                (
                    s.id,
                    s.flushed(),
                    s.live.load(Ordering::Relaxed),
                    s.horizon.load(Ordering::Relaxed),
                )
            })
            .collect()
    }

    /// Bytes appended since the last checkpoint (or recovery work not yet checkpointed).
    fn appended_total(&self) -> u64 {
        self.appended.load(Ordering::Relaxed)
            + self.tails.iter().map(|t| t.0.lock().appended).sum::<u64>()
    }

    fn drop_segments(&self, ids: &[u32]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        self.set_segs(|t| {
            let mut t = SegTable::clone(t);
            for id in ids {
                t.segs.remove(id);
            }
            t
        });
        for &id in ids {
            let _ = self.vfs.remove(&self.dir.join(seg_file_name(id)));
        }
        self.vfs.sync_dir(&self.dir).map_err(|e| self.poison(&e))?;
        // Close the removed segments' files and maps now (every caller holds no shard or lane
        // lock here).
        self.reclaim();
        Ok(())
    }

    // ------------------------------------------------------------------ compaction

    /// Copy the live records of sealed segment `id` to the end of the log, then remove it.
    /// `recode` re-encodes values with the current compression. Called with `maint` held.
    /// Returns false when it stopped early (close requested) or could not compact.
    fn compact_segment(&self, id: u32, recode: bool, rate: Option<u64>) -> Result<bool> {
        if self.segs.load().get(id).is_none() {
            return Ok(true);
        }
        let Some(moved) = self.relocate_segment(id, recode, rate)? else {
            return Ok(false);
        };
        self.drop_compacted(&[id], moved)?;
        Ok(true)
    }

    /// Compact sealed segments, the most garbage first, until none is past the threshold or
    /// `budget` is spent; then one checkpoint for all of them, and they are removed. Keeps up
    /// with writers that overwrite a small set of keys at disk speed (one segment at a time,
    /// each with its own checkpoint, did not). Called with `maint` held. Returns how many.
    fn compact_some(&self, budget: Duration) -> Result<usize> {
        let started = Instant::now();
        let mut done = Vec::new();
        let mut moved = 0;
        while started.elapsed() < budget {
            let Some(id) = self.compaction_candidate(&done) else {
                break;
            };
            match self.relocate_segment(id, false, Some(COMPACT_RATE)) {
                Ok(Some(m)) => {
                    done.push(id);
                    moved += m;
                }
                Ok(None) => break,
                Err(e) => {
                    // What was copied so far is still worth its checkpoint.
                    self.drop_compacted(&done, moved)?;
                    return Err(e);
                }
            }
        }
        self.drop_compacted(&done, moved)?;
        Ok(done.len())
    }

    /// After the live records of segments `ids` were copied (`moved` bytes in all): make the
    /// copies durable and save the index (the originals must not disappear before), then remove
    /// the segments.
    fn drop_compacted(&self, ids: &[u32], moved: u64) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        self.checkpoint()?;
        self.drop_segments(ids)?;
        self.counters
            .compactions
            .fetch_add(ids.len() as u64, Ordering::Relaxed);
        self.counters
            .relocated_bytes
            .fetch_add(moved, Ordering::Relaxed);
        Ok(())
    }

    /// Copy the live records of sealed segment `id` to the end of the log. Returns the bytes
    /// written, or `None` when it stopped early (close requested, a clear that must wait) or
    /// the segment is not sealed. A segment that is gone has nothing to copy.
    ///
    /// Puts (plain or in a batch) are only noted during the scan (shard, tag, offset) and
    /// checked against the index afterwards, one read lock per shard; only the live ones are
    /// read again and copied. A segment worth compacting is mostly dead records, and a lock per
    /// record moved the shards' lock lines between the compacting core and the writers'.
    /// (`recode` rewrites every value, so then each record goes to `relocate` as it is met.)
    fn relocate_segment(&self, id: u32, recode: bool, rate: Option<u64>) -> Result<Option<u64>> {
        let Some(seg) = self.segs.load().get(id).cloned() else {
            return Ok(Some(0));
        };
        if !seg.sealed.load(Ordering::Acquire) {
            return Ok(None);
        }
        if self.large_pending(&seg) {
            return Ok(None);
        }
        let has_older = self.may_hide(&seg);
        let started = Instant::now();
        let mut moved = 0u64;
        let mut paced = 0u64;
        let mut seen = 0u32;
        let mut aborted = false;
        let end = seg.flushed();
        let mut puts: Vec<(u32, u32, u32)> = Vec::new();
        let mut one = |off: u64, h: &Header, rec: &[u8], moved: &mut u64| -> Result<()> {
            if h.typ == T_PUT && !recode {
                let (shard, tag) = self.hash(&rec[h.key_off..h.key_off + h.klen]);
                puts.push((shard as u32, tag, off as u32));
            } else {
                *moved += self.relocate(&seg, off, h, rec, has_older, recode)?;
            }
            Ok(())
        };
        let mut bytes = recover::SegBytes {
            inner: self,
            seg: &seg,
        };
        let scanned = scan::scan(
            &mut bytes,
            seg.seed,
            SEG_HEADER_LEN as u64,
            end,
            |off, h, rec, _| {
                seen = seen.wrapping_add(1);
                if seen.is_multiple_of(256) {
                    if *self.stop.lock() {
                        aborted = true;
                        return Ok(false);
                    }
                    // Every 256 records (a few tens of microseconds of scanning), let a waiting
                    // thread have the core: otherwise a worker that this thread preempted waits
                    // out the rest of its time slice, which showed in the workers' p99 latency.
                    std::thread::yield_now();
                }
                match h.typ {
                    T_PUT | T_DELETE => one(off, h, rec, &mut moved)?,
                    T_BATCH => {
                        for_each_sub(rec, h, |pos, sh, srec| {
                            one(off + pos as u64, sh, srec, &mut moved)
                        })?;
                    }
                    _ => {
                        if has_older {
                            // Older segments still hold records this clear hides: not yet.
                            aborted = true;
                            return Ok(false);
                        }
                    }
                }
                pace(rate, moved, &mut paced, started);
                Ok(true)
            },
        )?;
        if aborted {
            return Ok(None);
        }
        let damage = scanned.damage.first().map(|d| d.off);
        if let Some(off) = damage.or(scanned.tail.as_ref().map(|t| t.off)) {
            // A damaged record in a sealed segment: the segment must stay, with the damaged
            // bytes (`check` reports them, `repair` salvages around them). Background
            // compaction leaves it alone from now on.
            self.damaged.lock().push(id);
            return Err(corrupt_at(
                id,
                off,
                "damaged record; the segment was not compacted",
            ));
        }
        puts.sort_unstable_by_key(|p| p.0);
        let mut live: Vec<u32> = Vec::new();
        for group in puts.chunk_by(|a, b| a.0 == b.0) {
            let tbl = self.excl(group[0].0 as usize);
            live.extend(
                group
                    .iter()
                    .filter(|&&(_, tag, off)| tbl.contains(&Slot { tag, seg: id, off }))
                    .map(|p| p.2),
            );
        }
        // Read again in the order they lie in the file, a chunk at a time. The segment is
        // sealed (its bytes never change) and cannot be removed while this thread holds the
        // maintenance lock, so no shard lock is needed to read it; `relocate` checks under the
        // shard's lock that each record is still live.
        live.sort_unstable();
        let mut reader = ChunkReader::new(self, &seg, end);
        for (i, &off) in live.iter().enumerate() {
            if i % 256 == 255 && *self.stop.lock() {
                return Ok(None);
            }
            let (h, rec) = reader.record(off as u64)?;
            moved += self.relocate(&seg, off as u64, &h, rec, has_older, recode)?;
            pace(rate, moved, &mut paced, started);
        }
        Ok(Some(moved))
    }

    /// Whether a segment that existed while `seg` was written still exists: then a delete or
    /// clear record of `seg` may still be hiding records in it.
    fn may_hide(&self, seg: &Segment) -> bool {
        let horizon = seg.horizon.load(Ordering::Acquire);
        self.segs
            .load()
            .segs
            .values()
            .any(|s| s.id != seg.id && s.id < horizon)
    }

    /// Relocate one record of a segment being compacted, if it is still needed. Returns the
    /// bytes written.
    fn relocate(
        &self,
        seg: &Segment,
        off: u64,
        h: &Header,
        rec: &[u8],
        has_older: bool,
        recode: bool,
    ) -> Result<u64> {
        let key = &rec[h.key_off..h.key_off + h.klen];
        let (shard, tag) = self.hash(key);
        with_writer!(self, shard, self.writer(shard, tag), tbl => {
            self.relocate_in(tbl, tag, seg, off, h, rec, has_older, recode)
        })
    }

    /// `relocate` with the key's run held.
    #[allow(clippy::too_many_arguments)]
    fn relocate_in(
        &self,
        tbl: &mut impl KeyIndex,
        tag: u32,
        seg: &Segment,
        off: u64,
        h: &Header,
        rec: &[u8],
        has_older: bool,
        recode: bool,
    ) -> Result<u64> {
        let key = &rec[h.key_off..h.key_off + h.klen];
        let lane = self.my_lane();
        let here = Slot {
            tag,
            seg: seg.id,
            off: off as u32,
        };
        if h.typ == T_DELETE {
            // Needed only to hide an older put in an older segment, and only while the key
            // has no newer live record.
            if !has_older || self.find(tbl, tag, key, Want::Slot)?.is_some() {
                return Ok(0);
            }
            self.write_delete(lane, key, h.fields.seq, Acct::Caller)?;
            return Ok(key.len() as u64 + 8);
        }
        if !tbl.cands(tag).any(|s| s == here) {
            return Ok(0); // dead
        }
        if is_expired(h.fields.expires, now_secs()) {
            self.remove_slot(tbl, here, h.len);
            self.counters
                .expired_reclaimed
                .fetch_add(1, Ordering::Relaxed);
            if has_older {
                let seq = tbl.next_seq(key);
                self.write_delete(lane, key, seq, Acct::Caller)?;
            }
            return Ok(0);
        }
        let value;
        let (stored, fields) = if recode
            && (h.fields.compression != 0 || self.compression.load(Ordering::Relaxed) != 0)
        {
            value = decode_value(h, rec)?;
            let (s, o, len) = self.write_put(
                lane,
                key,
                &self.stored_form(&value),
                h.fields.flags,
                h.fields.expires,
                (h.fields.seq, h.fields.version),
                Acct::Caller,
            )?;
            self.set_slot(tbl, tag, Some((here, h.len)), s, o, len);
            return Ok(len as u64);
        } else {
            (&rec[h.value_off()..h.len], h.fields)
        };
        let mut hdr = Vec::with_capacity(32);
        format::encode_put_header(&mut hdr, key.len(), stored.len(), &fields);
        let (s, o) = {
            let mut tail = self.tails[lane].0.lock();
            self.append(&mut tail, &[&hdr, key, stored], true)?
        };
        let len = hdr.len() + key.len() + stored.len();
        self.set_slot(tbl, tag, Some((here, h.len)), s, o, len);
        Ok(len as u64)
    }

    /// The sealed segments past the compaction threshold (and not found damaged), with the
    /// share of each that is dead.
    fn compactable(&self) -> Vec<(u32, f64)> {
        let threshold = self.cfg.lock().compact;
        let damaged = self.damaged.lock();
        self.segs
            .load()
            .segs
            .values()
            .filter(|s| s.sealed.load(Ordering::Acquire) && !damaged.contains(&s.id))
            .filter_map(|s| {
                let dead = dead_share(s);
                (dead >= threshold && !self.large_pending(s)).then_some((s.id, dead))
            })
            .collect()
    }

    /// The sealed segment most worth compacting, not in `skip`, if any is past the threshold.
    fn compaction_candidate(&self, skip: &[u32]) -> Option<u32> {
        self.compactable()
            .into_iter()
            .filter(|(id, _)| !skip.contains(id))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(id, _)| id)
    }

    /// Drop expired records from the index (the space is reclaimed by compaction).
    fn sweep_expired(&self) -> Result<()> {
        if self.expiring.load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        let now = now_secs();
        let mut any_left = false;
        for i in 0..NSHARDS {
            let mut tbl = self.excl(i);
            let slots: Vec<Slot> = tbl.iter().collect();
            for s in slots {
                let exp = self.with_record(s.seg, s.off as u64, |h, _| h.fields.expires)?;
                if is_expired(exp, now) {
                    let len = self.with_record(s.seg, s.off as u64, |h, _| h.len)?;
                    self.remove_slot(&mut tbl, s, len);
                    self.counters
                        .expired_reclaimed
                        .fetch_add(1, Ordering::Relaxed);
                } else if exp != 0 {
                    any_left = true;
                }
            }
        }
        if !any_left {
            self.expiring.store(0, Ordering::Relaxed);
        }
        Ok(())
    }

    // ------------------------------------------------------------------ background

    /// The filler thread (`sync=always`): zeros ahead of each lane's records (`fill_lane`),
    /// when a writer asks and at every tick.
    fn filler(self: Arc<Self>) {
        loop {
            {
                let mut stop = self.stop.lock();
                if !*stop && !self.fill_wake.swap(false, Ordering::AcqRel) {
                    self.fill_cv.wait_for(&mut stop, FLUSH_TICK);
                }
                if *stop {
                    return;
                }
            }
            if self.is_poisoned.load(Ordering::Acquire) || self.fill_failed.load(Ordering::Relaxed)
            {
                continue;
            }
            for lane in 0..self.lanes {
                self.fill_lane(lane);
            }
        }
    }

    /// Wait `tick` for a background thread's next round; false once the database is closing.
    fn pause(&self, tick: Duration) -> bool {
        let mut stop = self.stop.lock();
        if !*stop {
            self.stop_cv.wait_for(&mut stop, tick);
        }
        !*stop
    }

    fn background(self: Arc<Self>) {
        BACKGROUND.with(|b| b.set(true));
        let mut last_sync = Instant::now();
        let mut last_maint = Instant::now();
        while self.pause(FLUSH_TICK) {
            if self.is_poisoned.load(Ordering::Acquire) {
                continue;
            }
            for t in self.tails.iter() {
                let mut tail = t.0.lock();
                let _ = self.flush(&mut tail);
            }
            self.start_writebacks();
            if let SyncMode::Interval(d) = self.sync {
                if last_sync.elapsed() >= d {
                    let _ = self.sync_now();
                    last_sync = Instant::now();
                }
            }
            if last_maint.elapsed() >= Duration::from_secs(1) {
                last_maint = Instant::now();
                self.trim_maps();
                self.reclaim();
            }
        }
    }

    /// The compaction thread: every `COMPACT_TICK`, compacts what is past the threshold (for
    /// up to `COMPACT_BUDGET` at a time), checkpoints when enough was appended, and every 10
    /// seconds drops expired records. Its own thread, so the flushes and interval syncs of
    /// `background` never wait behind it.
    fn compactor(self: Arc<Self>) {
        BACKGROUND.with(|b| b.set(true));
        let mut nice = 0;
        let mut last_sweep = Instant::now();
        let mut last_ckpt_look = Instant::now();
        while self.pause(COMPACT_TICK) {
            if self.is_poisoned.load(Ordering::Acquire) {
                continue;
            }
            let Some(_m) = self.maint.try_lock() else {
                continue;
            };
            // At nice 10 compaction takes a small share of a busy CPU instead of preempting
            // the threads that serve requests (and all of an idle one); when it falls behind
            // it competes as an equal, so the dead space it leaves stays bounded.
            let want = if self.compactable().len() > COMPACT_BACKLOG {
                0
            } else {
                10
            };
            if want != nice {
                nice = want;
                set_thread_nice(nice);
            }
            let _ = self.compact_some(COMPACT_BUDGET);
            if last_ckpt_look.elapsed() >= Duration::from_secs(1) {
                last_ckpt_look = Instant::now();
                // Two statements: the `cfg` guard must be gone before `data_size` takes the lane
                // locks (a writer rolling a segment holds its lane lock and then takes `cfg`).
                let ckptsiz = self.cfg.lock().ckptsiz;
                let total = self.data_size();
                if self.appended_total() >= ckptsiz.max(total / 4) {
                    let _ = self.checkpoint();
                }
            }
            if last_sweep.elapsed() >= Duration::from_secs(10) {
                last_sweep = Instant::now();
                let _ = self.sweep_expired();
            }
        }
    }

    fn count(&self) -> u64 {
        // The table's count plus what fast writers counted in their stripes (read under the
        // read lock, so that no `excl` moves counts from one to the other meanwhile).
        (0..NSHARDS)
            .map(|i| {
                let g = self.shards[i].0.read();
                (g.len() as i64 + self.brl.delta(i)).max(0) as u64
            })
            .sum()
    }

    fn data_size(&self) -> u64 {
        let tail_extra: u64 = self.tails.iter().map(|t| t.0.lock().buf.len() as u64).sum();
        self.segs
            .load()
            .segs
            .values()
            .map(|s| s.flushed())
            .sum::<u64>()
            + tail_extra
    }
}

/// Whether the record at `off` of `seg` (header `h`, bytes `rec`) is a put of `key`, with the
/// checks of `Inner::with_key_record`: its checksum verified when `verify`, and always when it
/// is another key's record.
fn key_record_is(
    seg: &Segment,
    off: u64,
    h: &Header,
    rec: &[u8],
    key: &[u8],
    verify: bool,
) -> Result<bool> {
    let ours = format::is_put_of(h, rec, key);
    if (verify || !ours) && !format::verify(rec, seg.seed) {
        return Err(corrupt_at(seg.id, off, "checksum mismatch"));
    }
    Ok(ours)
}

/// The locked shard `shard` among a batch's guards.
fn guard_of<'a, 'g>(
    guards: &'a mut [(usize, Excl<'g>)],
    shard: usize,
) -> Result<&'a mut ShardState> {
    guards
        .iter_mut()
        .find(|(s, _)| *s == shard)
        .map(|(_, g)| &mut **g)
        .ok_or_else(|| Error::Corrupt("batch shard not locked".into()))
}

/// Write an index checkpoint (layout in docs/ARCHITECTURE.md) to `dir` atomically: stream it
/// to a temporary file shard by shard (`shard(i, v)` snapshots shard i into `v` and returns its
/// seq), call `before_commit` (which makes the data the snapshots point at durable), sync the
/// file, rename it over the old checkpoint, sync the directory.
///
/// With `parallel` (and two cores), a helper thread encodes shards beside this one, each
/// taking the next shard not yet taken. Each writes its sections to the file in chunks of about
/// 1 MiB from one buffer of its own, at offsets handed out in turn, so that neither holds more
/// than a chunk (fresh memory costs about a millisecond a megabyte on a virtual machine); the
/// checksum is combined from the chunks' own in file order.
#[allow(clippy::too_many_arguments)]
fn write_checkpoint(
    vfs: &dyn Vfs,
    dir: &Path,
    hash_seed: u64,
    replay: &[(u32, u64)],
    segs: &[(u32, u64, u64, u32)],
    parallel: bool,
    shard: impl Fn(usize, &mut Vec<Slot>) -> u64 + Sync,
    before_commit: impl FnOnce() -> std::io::Result<()>,
) -> std::io::Result<()> {
    let tmp = dir.join(CKPT_TMP);
    let file = vfs.open(&tmp, true)?;
    let f = &*file;
    f.set_len(0)?;
    let mut head = Vec::new();
    head.extend_from_slice(CKPT_MAGIC);
    head.extend_from_slice(&CKPT_VERSION.to_le_bytes());
    head.extend_from_slice(&(NSHARDS as u32).to_le_bytes());
    head.extend_from_slice(&hash_seed.to_le_bytes());
    head.extend_from_slice(&(replay.len() as u32).to_le_bytes());
    for &(seg, off) in replay {
        head.extend_from_slice(&seg.to_le_bytes());
        head.extend_from_slice(&(off as u32).to_le_bytes());
    }
    head.extend_from_slice(&(segs.len() as u32).to_le_bytes());
    for &(id, len, live, horizon) in segs {
        head.extend_from_slice(&id.to_le_bytes());
        head.extend_from_slice(&len.to_le_bytes());
        head.extend_from_slice(&live.to_le_bytes());
        head.extend_from_slice(&horizon.to_le_bytes());
    }
    // (offset, length, crc32c) of every chunk written; the next chunk goes at `end`.
    let chunks = Mutex::new((0u64, Vec::<(u64, usize, u32)>::new()));
    let write = |buf: &[u8]| -> std::io::Result<()> {
        let crc = crc32c::crc32c(buf);
        let at = {
            let mut c = chunks.lock();
            let at = c.0;
            c.0 += buf.len() as u64;
            c.1.push((at, buf.len(), crc));
            at
        };
        f.write_at(buf, at)?;
        // Written back while the rest is encoded, so that the final sync is short.
        f.start_writeback(at, buf.len() as u64);
        Ok(())
    };
    write(&head)?;
    // Each thread takes the next shard not yet taken (shards differ in size: their load
    // limits differ), encodes it, and writes a chunk whenever a megabyte is ready; the slot
    // and scratch buffers are reused from shard to shard.
    let next = AtomicUsize::new(0);
    let encode = || -> std::io::Result<()> {
        let (mut v, mut scratch) = (Vec::new(), ckpt::Scratch::default());
        let mut out = Vec::with_capacity(CKPT_CHUNK + (CKPT_CHUNK >> 2));
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= NSHARDS {
                break;
            }
            v.clear();
            let seq = shard(i, &mut v);
            out.extend_from_slice(&(i as u32).to_le_bytes());
            ckpt::encode(seq, &mut v, &mut scratch, &mut out);
            if out.len() >= CKPT_CHUNK {
                write(&out)?;
                out.clear();
            }
        }
        if !out.is_empty() {
            write(&out)?;
        }
        Ok(())
    };
    let (mine, theirs) = side_by_side(parallel, encode);
    mine?;
    if let Some(theirs) = theirs {
        theirs.map_err(|_| std::io::Error::other("checkpoint encoder thread panicked"))??;
    }
    let (end, mut list) = chunks.into_inner();
    list.sort_unstable_by_key(|c| c.0);
    let crc = list.iter().fold(0u32, |crc, &(_, len, c)| {
        crc32c::crc32c_combine(crc, c, len)
    });
    before_commit()?;
    f.write_at(&crc.to_le_bytes(), end)?;
    f.sync()?;
    drop(file);
    vfs.rename(&tmp, &dir.join(CKPT_NAME))?;
    vfs.sync_dir(dir)
}

/// Checkpoint chunk size: each encoding thread writes when it has this much.
const CKPT_CHUNK: usize = 1 << 20;

/// Decode the checkpoint section of one shard, which starts at `at` of `body` (checked to
/// lie within it), and build the shard's table. `None` when it is damaged or points into a
/// segment not in `known` (sorted).
fn decode_ckpt_shard(body: &[u8], at: usize, known: &[u32]) -> Option<(u64, Table)> {
    let (seq, n, mut slots) = ckpt::decode(body, at, known)?;
    // Built straight from the decoder; a table from a damaged section is thrown away.
    let t = Table::from_sorted(n, &mut slots);
    slots.intact().then_some((seq, t))
}

/// Checkpoints of at least this many slots are encoded, and loaded, by two threads
/// (`write_checkpoint`, `Inner::read_checkpoint`).
const PARALLEL_CKPT: usize = 1 << 16;

/// Whether a second thread can run beside this one (two-thread checkpoints).
fn more_than_one_core() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() > 1)
}

/// Run `work` on this thread and, when `parallel` and there is a second core, on a helper
/// thread at the same time (`work` shares the job out itself, e.g. through a counter). Returns
/// this thread's result and the helper's (`Err` if it panicked). One hand-off: every wait for
/// the other thread costs a wake-up (a quarter of a millisecond on a virtual machine).
fn side_by_side<T: Send>(
    parallel: bool,
    work: impl Fn() -> T + Sync,
) -> (T, Option<std::thread::Result<T>>) {
    if !(parallel && more_than_one_core()) {
        return (work(), None);
    }
    std::thread::scope(|s| {
        let helper = s.spawn(&work);
        let mine = work();
        (mine, Some(helper.join()))
    })
}

/// The metadata a put record carries.
fn meta_of(h: &Header) -> Meta {
    Meta {
        flags: h.fields.flags,
        expires: h.fields.expires,
        version: h.fields.version(),
    }
}

fn decode_value(h: &Header, rec: &[u8]) -> Result<Vec<u8>> {
    let stored = &rec[h.value_off()..h.len];
    if h.fields.compression == 0 {
        return Ok(stored.to_vec());
    }
    let raw = usize::try_from(h.fields.raw_len)
        .ok()
        .filter(|&n| n <= crate::store::MAX_VALUE_LEN)
        .ok_or_else(|| Error::Corrupt("compressed length out of range".into()))?;
    compress::decompress(format::codec(h)?, stored, raw)
}

// ---------------------------------------------------------------------------------------------

impl DiskHash {
    fn unlock(&self, i: usize, tbl: Excl<'_>) {
        self.inner.unlock(i, tbl)
    }

    fn stop_background(&self) {
        *self.inner.stop.lock() = true;
        self.inner.stop_cv.notify_all();
        self.inner.fill_cv.notify_all();
        for h in std::mem::take(&mut *self.bg.lock()) {
            let _ = h.join();
        }
    }

    /// `view` and `view_shared`: values of `min` bytes or more that lie in a segment's mapping
    /// are shown pinned.
    #[inline]
    fn view_with(
        &self,
        key: &[u8],
        min: usize,
        mut f: impl FnMut(Shown<'_>, Meta),
    ) -> Result<bool> {
        let inner = &self.inner;
        inner.check_open()?;
        let (shard, tag) = inner.locate(key);
        // Read in place under the shard lock, so compaction cannot move the record meanwhile.
        let seen = with_reader!(inner, shard, tag, tbl => inner.find_with(tbl, tag, key, |slot, h, rec| {
            let meta = meta_of(h);
            if meta.expires != 0 && is_expired(meta.expires, now_secs()) {
                return Ok(false);
            }
            if h.fields.compression != 0 {
                f(Shown::Bytes(&decode_value(h, rec)?), meta);
                return Ok(true);
            }
            let value = &rec[h.value_off()..h.len];
            match (value.len() >= min).then(|| inner.pin(slot.seg, value)) {
                Some(Some(p)) => f(Shown::Pinned(p), meta),
                _ => f(Shown::Bytes(value), meta),
            }
            Ok(true)
        }))?;
        Ok(seen == Some(true))
    }

    /// A put of a large value: the record is written without holding the shard lock, so
    /// readers and writers of the shard's other keys never wait behind a long write. The seq is
    /// taken first (that fixes the put's place in the key's history); the slot is installed
    /// afterwards unless a later write of the key came first, which the in-flight entry records.
    fn put_large(&self, key: &[u8], value: &[u8], flags: u32, expires: u64) -> Result<Meta> {
        let begun = self.large_put_begin(key, value, flags, expires);
        let seq = begun.seq;
        self.large_put_end(key, begun)?;
        self.inner.after_write()?;
        Ok(Meta {
            flags,
            expires,
            version: seq,
        })
    }

    /// The first half of `put_large`: take the key's next seq (noting the put as in flight in
    /// its shard) and write the record, with no lock held meanwhile.
    fn large_put_begin(&self, key: &[u8], value: &[u8], flags: u32, expires: u64) -> LargePut {
        let inner = &self.inner;
        let (shard, tag) = inner.hash(key);
        let seq = {
            let mut tbl = self.inner.excl(shard);
            let seq = tbl.next_seq(key);
            tbl.inflight.push(Inflight {
                key: key.into(),
                seq,
                superseded: false,
            });
            seq
        };
        let stored = inner.stored_form(value);
        let lane = inner.my_lane();
        let written = inner.write_put(lane, key, &stored, flags, expires, (seq, 0), Acct::Large);
        LargePut {
            shard,
            tag,
            lane,
            seq,
            written,
        }
    }

    /// The second half of `put_large`: point the index at the record, unless a later write of
    /// the key (or a `vanish`) came first.
    fn large_put_end(&self, key: &[u8], p: LargePut) -> Result<()> {
        let inner = &self.inner;
        let mut tbl = inner.excl(p.shard);
        let pos = tbl.inflight.iter().position(|f| f.seq == p.seq);
        let superseded = pos.is_some_and(|i| tbl.inflight.swap_remove(i).superseded);
        let (s, o, len) = p.written?;
        let installed = if superseded {
            Ok(())
        } else {
            inner.find(&tbl, p.tag, key, Want::Slot).map(|found| {
                let old = found.map(|f| (f.slot, f.len));
                inner.set_slot(&mut tbl, p.tag, old, s, o, len);
            })
        };
        // After the slot (its segment may be compacted from now on), and also when it could
        // not be installed.
        inner.large_put_done(p.lane, s, o);
        installed?;
        self.unlock(p.shard, tbl);
        Ok(())
    }

    /// `accept` with the key's run held: (what it returns, whether it wrote).
    fn accept_in<'v>(
        &self,
        tbl: &mut impl KeyIndex,
        tag: u32,
        key: &[u8],
        visitor: &mut dyn FnMut(Option<Current<'_>>) -> Decision<'v>,
    ) -> Result<(Option<Meta>, bool)> {
        let inner = &self.inner;
        let found = inner.find(tbl, tag, key, Want::Value)?;
        let now = now_secs();
        let live = found.as_ref().filter(|f| !is_expired(f.meta.expires, now));
        let cur = live.map(|f| Current {
            value: f.value.as_deref().unwrap_or_default(),
            meta: f.meta,
        });
        let decision = visitor(cur);
        let old = found.as_ref().map(|f| (f.slot, f.len));
        let result = match decision {
            Decision::Keep => return Ok((live.map(|f| f.meta), false)),
            Decision::Put {
                value,
                flags,
                expires,
            } => {
                check_sizes(key, value.len())?;
                let stored = inner.stored_form(&value);
                Some(inner.put_locked(tbl, tag, key, old, &stored, flags, expires, None)?)
            }
            // A touch rewrites the record with the new expiry and keeps its version (as
            // memcached keeps the cas).
            Decision::Touch { expires } => match live {
                None => return Ok((None, false)),
                Some(f) => {
                    let stored = inner.stored_form(f.value.as_deref().unwrap_or_default());
                    let (flags, version) = (f.meta.flags, Some(f.meta.version));
                    let meta =
                        inner.put_locked(tbl, tag, key, old, &stored, flags, expires, version);
                    Some(meta?)
                }
            },
            Decision::Remove => {
                if let Some((o, len)) = old {
                    let seq = tbl.next_seq(key);
                    let acct = Acct::Lane {
                        old: Some((o.seg, len)),
                    };
                    inner.write_delete(inner.my_lane(), key, seq, acct)?;
                    tbl.remove(&o);
                }
                None
            }
        };
        Ok((result, true))
    }

    /// `out` with the key's run held: the removed record's slot and metadata, if it had one.
    fn out_in(&self, tbl: &mut impl KeyIndex, tag: u32, key: &[u8]) -> Result<Option<Found>> {
        let inner = &self.inner;
        let f = match inner.delete_appending_first(tbl, tag, key)? {
            Some(Some(f)) => f,
            Some(None) => return Ok(None),
            None => {
                let Some(f) = inner.find(tbl, tag, key, Want::Slot)? else {
                    return Ok(None);
                };
                let seq = tbl.next_seq(key);
                let acct = Acct::Lane {
                    old: Some((f.slot.seg, f.len)),
                };
                inner.write_delete(inner.my_lane(), key, seq, acct)?;
                f
            }
        };
        tbl.remove(&f.slot);
        Ok(Some(f))
    }

    /// Stop as a killed process would: no flush, no sync, no checkpoint. For crash tests (the
    /// simulated file system then decides what reached the disk).
    #[doc(hidden)]
    pub fn abandon(self) {
        self.stop_background();
        self.inner.closed.store(true, Ordering::Release);
        self.inner.lock.lock().take();
    }

    /// Roll to a new segment and compact every older one (used by `optimize`).
    fn rewrite_all(&self, recode: bool) -> Result<()> {
        let inner = &self.inner;
        let _m = inner.maint.lock();
        for t in inner.tails.iter() {
            let mut tail = t.0.lock();
            if tail.seg.id != 0 {
                inner.roll(&mut tail)?;
            }
        }
        let ids: Vec<u32> = inner
            .segs
            .load()
            .segs
            .values()
            .filter(|s| s.sealed.load(Ordering::Acquire))
            .map(|s| s.id)
            .collect();
        for id in ids {
            inner.compact_segment(id, recode, None)?;
        }
        inner.checkpoint()
    }
}

impl Drop for DiskHash {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

impl Store for DiskHash {
    fn get(&self, key: &[u8]) -> Result<Option<Record>> {
        self.inner.check_open()?;
        let inner = &self.inner;
        let (shard, tag) = inner.locate(key);
        // The record is made in the lookup's closure: nothing else is built or moved.
        let found = with_reader!(inner, shard, tag, tbl => inner.find_with(tbl, tag, key, |_, h, rec| {
            let meta = meta_of(h);
            if meta.expires != 0 && is_expired(meta.expires, now_secs()) {
                return Ok(None);
            }
            Ok(Some(Record {
                value: decode_value(h, rec)?,
                meta,
            }))
        }))?;
        Ok(found.flatten())
    }

    fn view(&self, key: &[u8], f: &mut dyn FnMut(&[u8], Meta)) -> Result<bool> {
        self.view_with(key, usize::MAX, |v, m| f(v.bytes(), m))
    }

    fn view_shared(
        &self,
        key: &[u8],
        min: usize,
        f: &mut dyn FnMut(Shown<'_>, Meta),
    ) -> Result<bool> {
        self.view_with(key, min, f)
    }

    fn accept<'v>(
        &self,
        key: &[u8],
        visitor: &mut dyn FnMut(Option<Current<'_>>) -> Decision<'v>,
    ) -> Result<Option<Meta>> {
        let inner = &self.inner;
        inner.check_writable()?;
        check_sizes(key, 0)?;
        let (shard, tag) = inner.locate(key);
        let (result, wrote) = with_writer!(self, shard, inner.writer(shard, tag), tbl => {
            self.accept_in(tbl, tag, key, visitor)
        })?;
        if wrote {
            inner.after_write()?;
        }
        Ok(result)
    }

    fn put_with(&self, key: &[u8], value: &[u8], flags: u32, expires: u64) -> Result<Meta> {
        let inner = &self.inner;
        inner.check_writable()?;
        check_sizes(key, value.len())?;
        if value.len() >= LARGE_VALUE {
            return self.put_large(key, value, flags, expires);
        }
        // Compressed (when configured) before the shard is locked.
        let stored = inner.stored_form(value);
        let (shard, tag) = inner.locate(key);
        let meta = match inner.put_fast(shard, tag, key, &stored, flags, expires) {
            Some(meta) => meta,
            None => {
                let mut tbl = inner.excl(shard);
                let meta = inner.put_replacing(&mut tbl, tag, key, &stored, flags, expires);
                self.unlock(shard, tbl);
                meta
            }
        };
        let meta = meta?;
        inner.after_write()?;
        Ok(meta)
    }

    fn out(&self, key: &[u8]) -> Result<bool> {
        let inner = &self.inner;
        inner.check_writable()?;
        check_sizes(key, 0)?;
        let (shard, tag) = inner.locate(key);
        let f = match inner.out_fast(shard, tag, key) {
            Some(f) => f,
            None => with_writer!(self, shard, inner.writer(shard, tag), tbl => {
                self.out_in(tbl, tag, key)
            }),
        }?;
        let Some(f) = f else {
            return Ok(false);
        };
        inner.after_write()?;
        Ok(f.meta.expires == 0 || !is_expired(f.meta.expires, now_secs()))
    }
    fn write_batch(&self, ops: &[BatchOp]) -> Result<()> {
        let inner = &self.inner;
        inner.check_writable()?;
        if ops.is_empty() {
            return Ok(());
        }
        let mut frame = 0usize;
        for op in ops {
            let vlen = match op {
                BatchOp::Put { value, .. } => value.len(),
                BatchOp::Remove { .. } => 0,
            };
            check_sizes(op.key(), vlen)?;
            frame = frame.saturating_add(MAX_HEADER_LEN + op.key().len() + vlen);
        }
        if frame > MAX_BATCH_BYTES {
            return Err(Error::TooLarge(format!(
                "a batch of {frame} bytes of records (limit {MAX_BATCH_BYTES}, as large as \
                 the largest single record: split it)"
            )));
        }
        let hashed: Vec<(usize, u32)> = ops.iter().map(|op| inner.hash(op.key())).collect();
        let mut ids: Vec<usize> = hashed.iter().map(|h| h.0).collect();
        ids.sort_unstable();
        ids.dedup();
        // Lock every shard involved, in ascending order (the global lock order).
        let mut guards: Vec<(usize, Excl<'_>)> = ids.iter().map(|&i| (i, inner.excl(i))).collect();
        // One frame holding every record; each takes the next seq of its shard.
        let mut body = Vec::new();
        let mut offs = Vec::with_capacity(ops.len()); // (start, len) in the body
        for (i, op) in ops.iter().enumerate() {
            let g = guard_of(&mut guards, hashed[i].0)?;
            let seq = g.next_seq(op.key());
            let start = body.len();
            match op {
                BatchOp::Put {
                    key,
                    value,
                    flags,
                    expires,
                } => {
                    let stored = inner.stored_form(value);
                    if *expires != 0 {
                        inner.expiring.fetch_add(1, Ordering::Relaxed);
                    }
                    let fields = PutFields {
                        flags: *flags,
                        expires: *expires,
                        seq,
                        compression: stored.code,
                        raw_len: stored.raw_len,
                        version: 0,
                    };
                    format::encode_put(&mut body, key, &stored.bytes, &fields);
                }
                BatchOp::Remove { key } => {
                    format::encode_delete(&mut body, key, seq);
                }
            }
            format::seal(&mut body[start..], format::seed(inner.salt));
            offs.push((start, body.len() - start));
        }
        let mut hdr = Vec::with_capacity(16);
        format::encode_batch_header(&mut hdr, body.len(), ops.len());
        let (seg, off) = {
            let lane = inner.my_lane();
            let mut tail = inner.tails[lane].0.lock();
            let at = inner.append(&mut tail, &[&hdr, &body], true)?;
            inner.note_full(lane, &tail);
            at
        };
        let base = off + hdr.len() as u64;
        for (i, op) in ops.iter().enumerate() {
            let (shard, tag) = hashed[i];
            let g = guard_of(&mut guards, shard)?;
            let old = inner
                .find(g, tag, op.key(), Want::Slot)?
                .map(|f| (f.slot, f.len));
            let (start, len) = offs[i];
            match op {
                BatchOp::Put { .. } => inner.set_slot(g, tag, old, seg, base + start as u64, len),
                BatchOp::Remove { .. } => {
                    if let Some((o, len)) = old {
                        inner.remove_slot(g, o, len);
                    }
                }
            }
        }
        drop(guards);
        inner.after_write()
    }

    fn cursor(&self) -> Result<Box<dyn Cursor + '_>> {
        self.inner.check_open()?;
        let first = self.inner.segs.load().oldest().unwrap_or(0);
        let seqs = (0..NSHARDS).map(|i| self.inner.excl(i).seq).collect();
        Ok(Box::new(HashCursor {
            db: self,
            seqs,
            seg: first,
            off: SEG_HEADER_LEN as u64,
            pending: std::collections::VecDeque::new(),
            done: false,
            damaged: 0,
        }))
    }

    fn count(&self) -> u64 {
        self.inner.count()
    }

    fn size(&self) -> u64 {
        let ckpt = self
            .inner
            .vfs
            .open(&self.inner.dir.join(CKPT_NAME), false)
            .and_then(|f| f.len())
            .unwrap_or(0);
        self.inner.data_size() + ckpt
    }

    fn sync(&self) -> Result<()> {
        self.inner.check_writable()?;
        self.inner.group_commit()
    }

    fn optimize(&self, params: &str) -> Result<()> {
        self.inner.check_writable()?;
        let p = Params::parse(params)?;
        p.allow_only("the hash database (.kh)", PARAMS)?;
        // Only what optimize applies to the database is taken (README: nothing is ignored).
        for (k, _) in p.items() {
            match k.as_str() {
                "compress" | "bnum" => {}
                "lanes" => {
                    return Err(Error::InvalidParam(
                        "`lanes` cannot be changed by optimize: it is fixed when the database is \
                         created (export the records and import them into a new database \
                         created with the lanes wanted)"
                            .into(),
                    ))
                }
                other => {
                    return Err(Error::InvalidParam(format!(
                        "`{other}` cannot be changed by optimize: it tunes one open, not the \
                         database; give it when opening (`PATH.kh#{other}=…`)"
                    )))
                }
            }
        }
        let newcfg = Config::from_params(&p, Some(&self.inner.cfg.lock()))?;
        let comp = p.compression()?;
        // The choice is stored first: it holds for later writes and opens, whatever the
        // rewrite below finds.
        {
            let mut st = self.stored.lock();
            if let Some(mut s) = *st {
                s.compress = comp.unwrap_or(s.compress);
                if p.size("bnum")?.is_some() {
                    s.bnum = newcfg.bnum;
                }
                if Some(s) != *st {
                    crate::meta::write(&*self.inner.vfs, &self.inner.dir, &s.descriptor())?;
                    *st = Some(s);
                }
            }
        }
        let recode = match comp {
            Some(c) => {
                let changed = c as u8 != self.inner.compression.load(Ordering::Relaxed);
                self.inner.compression.store(c as u8, Ordering::Relaxed);
                changed
            }
            None => false,
        };
        let bnum = newcfg.bnum;
        *self.inner.cfg.lock() = newcfg;
        if bnum > 0 {
            for i in 0..NSHARDS {
                let mut t = self.inner.excl(i);
                let want = (bnum.min(MAX_PRESIZE) as usize / NSHARDS).saturating_sub(t.len());
                t.reserve(want);
            }
        }
        self.inner.note_tables();
        self.rewrite_all(recode)
    }

    fn vanish(&self) -> Result<()> {
        let inner = &self.inner;
        inner.check_writable()?;
        let _m = inner.maint.lock();
        let mut guards: Vec<_> = (0..NSHARDS).map(|i| inner.excl(i)).collect();
        // Each lane that has a log starts a new segment with a clear record: recovery forgets
        // everything of a lane before its clear (once it finds the clears of every lane), so
        // the old segments can go in any order.
        {
            // All lanes at once, so that no checkpoint position falls between the clears.
            let mut tails: Vec<_> = inner.tails.iter().map(|t| t.0.lock()).collect();
            let used = tails.iter().filter(|t| t.seg.id != 0).count();
            let id = random_u64();
            for tail in tails.iter_mut() {
                // Large puts in flight now come before the clear (see below).
                tail.large.clear();
            }
            for tail in tails.iter_mut().filter(|t| t.seg.id != 0) {
                inner.roll(tail)?;
                let mut c = Vec::new();
                format::encode_clear(&mut c, id, used);
                inner.append(tail, &[&c], true)?;
            }
        }
        for (i, g) in guards.iter_mut().enumerate() {
            g.clear();
            // A large put in flight wrote its record in a segment about to go: it comes before
            // the clear, and must not point the index at its record afterwards.
            for f in &mut g.inflight {
                f.superseded = true;
            }
            inner.note_table(i, g);
        }
        inner.expiring.store(0, Ordering::Relaxed);
        inner.sync_now()?;
        let old: Vec<u32> = inner
            .segs
            .load()
            .segs
            .values()
            .filter(|s| s.sealed.load(Ordering::Acquire))
            .map(|s| s.id)
            .collect();
        drop(guards);
        inner.checkpoint()?;
        inner.drop_segments(&old)
    }

    fn copy_to(&self, dest: &Path) -> Result<()> {
        let inner = &self.inner;
        inner.check_open()?;
        let _m = inner.maint.lock();
        if dest.exists() && std::fs::read_dir(dest).map(|mut d| d.next().is_some())? {
            return Err(Error::InvalidParam(format!(
                "{}: destination exists and is not empty",
                dest.display()
            )));
        }
        match std::fs::create_dir(dest) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e.into()),
            _ => {}
        }
        // The copy is the same database: the same stored parameters (written last).
        let stored = self.stored.lock().unwrap_or(stored::Stored {
            lanes: inner.lanes,
            compress: Compression::from_code(inner.compression.load(Ordering::Relaxed))
                .unwrap_or(Compression::None),
            bnum: inner.cfg.lock().bnum,
        });
        // Where each lane ends, then the index: the copy replays its logs from these positions.
        let replay = inner.lane_positions(false);
        let shards = inner.snapshot_shards();
        let ends: Vec<(u32, u64)> = inner
            .tails
            .iter()
            .map(|t| {
                let mut t = t.0.lock();
                inner.flush(&mut t).map(|_| (t.seg.id, t.seg.flushed()))
            })
            .collect::<Result<_>>()?;
        // Segments up to each lane's end are immutable up to these lengths: copy them.
        let segs = inner.segs.load_full();
        let mut buf = Vec::new();
        for (id, seg) in segs.segs.iter() {
            let (end_seg, end_off) = ends[seg.lane];
            if *id > end_seg {
                continue; // started after the copy began
            }
            let len = if *id == end_seg {
                end_off
            } else {
                seg.flushed()
            };
            let out = OsVfs.open(&dest.join(seg_file_name(*id)), true)?;
            let mut at = 0u64;
            while at < len {
                let n = ((len - at) as usize).min(4 << 20);
                seg.read_file(at, &mut buf, n)?;
                out.write_at(&buf, at)?;
                at += n as u64;
            }
            out.sync()?;
        }
        // The copy's checkpoint: the snapshot and where replay starts. It lists no segment
        // lengths: the copy's segments are exactly what was copied.
        write_checkpoint(
            &OsVfs,
            dest,
            inner.hash_seed.load(Ordering::Relaxed),
            &replay,
            &[],
            shards.iter().map(|s| s.1.len()).sum::<usize>() >= PARALLEL_CKPT,
            |i, v| {
                let (seq, slots) = &shards[i];
                v.extend_from_slice(slots);
                *seq
            },
            || Ok(()),
        )?;
        // Last: a copy cut short is never marked as a database.
        crate::meta::write(&OsVfs, dest, &stored.descriptor())
    }

    fn check(&self) -> Result<CheckReport> {
        let inner = &self.inner;
        inner.check_open()?;
        let _m = inner.maint.lock();
        inner.flush_all()?;
        inner.audit()
    }

    fn kind(&self) -> Kind {
        Kind::DiskHash
    }

    fn for_each_record(&self, f: &mut crate::store::RecordVisitor<'_>) -> Result<u64> {
        self.each_live(f)
    }

    /// The path; what the database stores (`stored.*`, see `stored`); what this open chose
    /// (`open.*`: its parameters, or the stored value it took, or the default); `segments`.
    fn describe(&self) -> Vec<(String, String)> {
        let c = self.inner.cfg.lock().clone();
        let comp = Compression::from_code(self.inner.compression.load(Ordering::Relaxed))
            .unwrap_or(Compression::None);
        let mut v: Vec<(String, String)> =
            vec![("path".into(), self.inner.dir.display().to_string())];
        match *self.stored.lock() {
            Some(s) => v.extend([
                ("stored.lanes".into(), s.lanes.to_string()),
                ("stored.compress".into(), s.compress.name().into()),
                ("stored.bnum".into(), s.bnum.to_string()),
            ]),
            None => v.push((
                "stored".into(),
                format!(
                    "none (a database made before {}; written at its next writable open)",
                    crate::meta::META_NAME
                ),
            )),
        }
        v.extend([
            ("open.sync".into(), c.sync.describe()),
            ("open.compress".into(), comp.name().into()),
            ("open.bnum".into(), c.bnum.to_string()),
            ("open.segsiz".into(), c.segsiz.to_string()),
            ("open.bufsiz".into(), c.bufsiz.to_string()),
            ("open.msiz".into(), c.msiz.to_string()),
            ("open.compact".into(), c.compact.to_string()),
            ("open.ckptsiz".into(), c.ckptsiz.to_string()),
            (
                "segments".into(),
                self.inner.segs.load().segs.len().to_string(),
            ),
        ]);
        v
    }

    fn close(&self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        self.stop_background();
        let inner = &self.inner;
        let unchanged = inner.appended_total() == 0 && inner.vfs.exists(&inner.dir.join(CKPT_NAME));
        let res = if inner.readonly || inner.poisoned.lock().is_some() {
            Ok(())
        } else {
            let _m = inner.maint.lock();
            // The files end where their records do (the cut is synced by the checkpoint).
            let trimmed = inner.tails.iter().try_for_each(|t| {
                let mut t = t.0.lock();
                inner.mark(&mut t);
                inner.trim_tail(&mut t)
            });
            match trimmed {
                Err(e) => Err(e),
                Ok(()) if unchanged => inner.sync_now(),
                Ok(()) => inner.checkpoint(),
            }
        };
        inner.closed.store(true, Ordering::Release);
        inner.reclaim();
        inner.lock.lock().take();
        res
    }

    fn damage_found(&self) -> Vec<crate::store::Damaged> {
        self.inner.findings.lock().clone()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = &self.inner.counters;
        vec![
            ("compactions", c.compactions.load(Ordering::Relaxed)),
            ("relocated_bytes", c.relocated_bytes.load(Ordering::Relaxed)),
            ("checkpoints", c.checkpoints.load(Ordering::Relaxed)),
            (
                "expired_reclaimed",
                c.expired_reclaimed.load(Ordering::Relaxed),
            ),
            (
                "recovery_truncated_bytes",
                c.truncated_bytes.load(Ordering::Relaxed),
            ),
            ("syncs", c.syncs.load(Ordering::Relaxed)),
        ]
    }
}

/// Iterates the log in order and yields each record the index still points at.
struct HashCursor<'a> {
    db: &'a DiskHash,
    /// Every shard's seq when the cursor was made: a record version written later is not
    /// returned. Without this bound a client that rewrites each record it visits (append-only
    /// log: the new version lands ahead of the cursor) would iterate forever. Compaction keeps
    /// a record's seq when it relocates it, so unmodified records are still found.
    seqs: Box<[u64]>,
    seg: u32,
    off: u64,
    pending: std::collections::VecDeque<(Vec<u8>, Record)>,
    done: bool,
    /// Damaged regions passed over.
    damaged: u64,
}

impl HashCursor<'_> {
    /// Scan forward from the position until some live records are collected or the log ends.
    fn fill(&mut self) -> Result<()> {
        let inner = &self.db.inner;
        while self.pending.is_empty() && !self.done {
            let segs = inner.segs.load_full();
            let Some((&id, seg)) = segs.segs.range(self.seg..).next() else {
                self.done = true;
                return Ok(());
            };
            if id != self.seg {
                self.seg = id;
                self.off = SEG_HEADER_LEN as u64;
            }
            let end = inner.seg_end(seg);
            let now = now_secs();
            let mut collected = Vec::new();
            let mut full = false;
            let seqs = &self.seqs;
            let visit = |loc_off: u64,
                         h: &Header,
                         rec: &[u8],
                         collected: &mut Vec<(Vec<u8>, Record)>|
             -> Result<()> {
                if h.typ != T_PUT || is_expired(h.fields.expires, now) {
                    return Ok(());
                }
                let key = &rec[h.key_off..h.key_off + h.klen];
                let (shard, tag) = inner.hash(key);
                if h.fields.seq > seqs[shard] {
                    return Ok(()); // written after the cursor was made
                }
                let here = Slot {
                    tag,
                    seg: id,
                    off: loc_off as u32,
                };
                let live = with_reader!(inner, shard, tag, k => {
                    Ok::<_, Error>(k.cands(tag).any(|s| s == here))
                })?;
                if live {
                    collected.push((
                        key.to_vec(),
                        Record {
                            value: decode_value(h, rec)?,
                            meta: meta_of(h),
                        },
                    ));
                }
                Ok(())
            };
            let mut bytes = recover::SegBytes { inner, seg };
            let scanned = scan::scan(&mut bytes, seg.seed, self.off, end, |off, h, rec, _| {
                if h.typ == T_BATCH {
                    for_each_sub(rec, h, |pos, sh, srec| {
                        visit(off + pos as u64, sh, srec, &mut collected)
                    })?;
                } else {
                    visit(off, h, rec, &mut collected)?;
                }
                full = collected.len() >= 256;
                Ok(!full)
            })?;
            // Damage in what a read-only open serves (a writable one refuses damage): skipped,
            // counted. A damaged tail's salvaged records may be live (recovery applied them).
            let mut damaged = scanned.damage.len() as u64;
            if let Some(t) = &scanned.tail {
                damaged += 1;
                let mut buf = Vec::new();
                for &at in &t.salvaged {
                    let n = MAX_HEADER_LEN.min((end - at) as usize);
                    bytes.read(at, n, &mut buf)?;
                    if let Some(h) = format::parse_header(&buf) {
                        bytes.read(at, h.len, &mut buf)?;
                        visit(at, &h, &buf, &mut collected)?;
                    }
                }
            }
            self.damaged += damaged;
            let stop = scanned.stopped.unwrap_or(end);
            self.off = stop;
            self.pending.extend(collected);
            if stop >= end || !full {
                // End of this segment: move on if a later one exists, else the log ends here.
                match segs.segs.range(id + 1..).next() {
                    Some((&next, _)) => {
                        self.seg = next;
                        self.off = SEG_HEADER_LEN as u64;
                    }
                    None => {
                        if self.pending.is_empty() {
                            self.done = true;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

impl Cursor for HashCursor<'_> {
    fn next(&mut self) -> Result<Option<(Vec<u8>, Record)>> {
        self.db.inner.check_open()?;
        self.fill()?;
        Ok(self.pending.pop_front())
    }

    fn damage_skipped(&self) -> u64 {
        self.damaged
    }
}

#[cfg(test)]
mod tests;
