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
//! the index (written atomically) bounds recovery to the log written after it; recovery tells a
//! torn tail (dropped) from damage (refused, or served around by a read-only open).
//!
//! This file holds the types every part shares (`Inner`, the shard and lane types, `Config`);
//! the parts: `open` (opening a directory), `shard` (the shards' modes and growth), `read`
//! (finding and reading records), `write` (lanes, segments, durability), `checkpoint`, `recover`
//! (with `scan`, which tells damage from a torn tail), `compact`, `background`, `api` (the
//! `Store` implementation), `cursor`, `export` (the fast whole-database read), `check`,
//! `repair`, `stored` (the descriptor's parameters), `space` (keyspaces: an index each on the
//! one log); on-disk layouts in `format`, `segment`
//! and `ckpt`, the in-memory table in `index`, its memory in `arena`.

mod arena;
mod check;
pub mod ckpt;
mod export;
pub use crate::log::format;
pub mod index;
mod recover;
mod repair;
use crate::log::scan;
pub use crate::log::segment;
use crate::log::tail::Tail;
use crate::log::{Log, FLUSH_TICK};
pub mod stored;

use self::format::{
    Header, HeaderBuf, PutFields, MAX_HEADER_LEN, SEG_HEADER_LEN, T_BATCH, T_DELETE, T_PUT,
};
use self::index::{Slot, Table};
use self::segment::{corrupt_at, seg_file_name, SegTable, Segment};
use crate::compress;
use crate::config::{Compression, OpenMode, Params, SyncMode};
use crate::error::{Error, Result};
use crate::io::{OsVfs, Vfs};
use crate::store::{
    check_sizes, is_expired, now_secs, BatchOp, CheckReport, Current, Cursor, Decision, Kind, Meta,
    Pinned, Record, Shown, Store,
};
use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
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
/// A checkpoint of a database with keyspaces: version 2 followed by each keyspace's index.
/// A database without keyspaces writes version 2, which builds before keyspaces read.
const CKPT_VERSION_SPACES: u32 = 3;
/// A keyspace's index as a checkpoint takes it: (keyspace id, each shard's seq and slots).
type SpaceSnapshot = (u64, Vec<(u64, Vec<Slot>)>);
/// Old positions a growing writer moves per hold of the shard lock (`Inner::grow_to`): about
/// 10 µs of work.
const MOVE_BATCH: usize = 2048;
/// How often the compaction thread looks for segments to compact.
const COMPACT_TICK: Duration = Duration::from_millis(100);
/// How long one round of background compaction may hold the maintenance lock.
const COMPACT_BUDGET: Duration = Duration::from_millis(500);
/// Segments waiting for compaction beyond which the compaction thread stops yielding the CPU.
const COMPACT_BACKLOG: usize = 8;
/// Background compaction copies live records at most this fast (bytes per second).
const COMPACT_RATE: u64 = 64 << 20;

/// The parameters a `.kh` name takes (the registry lists them).
pub(crate) const PARAMS: &[&str] = &[
    "bnum", "sync", "compress", "segsiz", "bufsiz", "msiz", "compact", "ckptsiz", "lanes",
];
/// Logs written in parallel when the database is created without `lanes=`.
const DEFAULT_LANES: usize = 16;
const MAX_LANES: usize = 64;
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
/// share no written cache line (see docs/architecture/hash.md, "Index (memory)").
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

/// A shard held exclusively (`Inner::excl`): its `RwLock` for writing, and no thread inside
/// it in fast mode. Dropping it makes the shard fast again when it can be.
struct Excl<'a> {
    g: RwLockWriteGuard<'a, ShardState>,
    slow: &'a AtomicBool,
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

#[derive(Default)]
struct Counters {
    compactions: AtomicU64,
    relocated_bytes: AtomicU64,
    checkpoints: AtomicU64,
    expired_reclaimed: AtomicU64,
}

struct Inner {
    /// The durable log: segments, lanes and their buffers, durability (one for every
    /// keyspace of the database).
    log: Arc<Log>,
    /// The keyspace this index holds (0: the database itself; see `space`).
    ks: u64,
    /// Every keyspace of the database but 0, shared by all of them.
    spaces: Arc<space::Spaces>,
    /// Recovery ignores the checkpoint's index (`Mode::Salvage`).
    full_replay: bool,
    /// The damage a read-only open found (a writable open refuses instead).
    findings: Mutex<Vec<crate::store::Damaged>>,
    cfg: Mutex<Config>,
    compression: AtomicU8,
    /// Seeds the key hash: the database's salt, fixed at creation. It decides each key's shard
    /// and so its lane: it must never change, or a key's records would spread over lanes.
    hash_seed: AtomicU64,
    shards: Box<[Shard]>,
    /// The fast mode of the shards (`Brl`).
    brl: Brl,
    /// One per shard (`TableHint`).
    hints: Box<TableHints>,
    appended: AtomicU64,
    expiring: AtomicU64,
    /// Sealed segments that compaction found a damaged record in (it leaves them be).
    damaged: Mutex<Vec<u32>>,
    /// Serialises checkpoints, compaction, vanish, optimize and copy (the database's, shared
    /// by its keyspaces).
    maint: Arc<Mutex<()>>,
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

/// A background thread's body.
type BgThread = fn(Arc<Inner>);

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

mod api;
mod background;
mod checkpoint;
mod compact;
mod cursor;
mod open;
pub(crate) use open::random_u64 as random_salt;
mod read;
mod shard;
mod space;
mod write;

use self::checkpoint::{decode_ckpt_shard, side_by_side, write_checkpoint, PARALLEL_CKPT};
use self::cursor::HashCursor;
use self::open::{meta_damage, random_u64};
use self::read::{decode_value, meta_of, ChunkReader};
use self::shard::StripeClaim;
use self::write::guard_of;
use crate::log::for_each_sub;

#[cfg(test)]
mod tests;
