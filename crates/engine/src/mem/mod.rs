//! The in-memory database kinds: `*` ([`MemHash`], a concurrent hash) and `+` ([`MemTree`], a
//! concurrent ordered tree). Nothing is persisted; `copy_to` writes a consistent snapshot as an
//! on-disk hash database (`.kh`).
//!
//! # Parameters
//!
//! Both kinds accept `capnum` (maximum number of records), `capsiz` (maximum bytes, counted as
//! key + value + a fixed per-record overhead, with k/m/g/t suffixes) and `bnum` (initial capacity
//! hint, used for at most [`MAX_PRESIZE`] records so that no name or remote `optimize` can make
//! the server reserve unbounded memory; the tree accepts and ignores it). A `capnum` or `capsiz` of 0 (the default) means
//! unbounded. With a bound the database is a cache: writes that push it over the bound evict
//! records, and a single record larger than `capsiz` is refused with [`Error::TooLarge`].
//! `optimize` accepts the same three parameters to retune a live database.
//!
//! # Records and per-record memory
//!
//! Both kinds store a record as one 40-byte `Rec`: a single heap allocation holding key and
//! value back to back (`Box<[u8]>`, 16 bytes), the key length packed with the CLOCK reference bit
//! (4), the flags (4), the expiration time (8) and the version (8). One allocation instead of two
//! saves an allocator header and a pointer per record.
//!
//! * **Hash (`*`)**: 64 shards, each a `parking_lot::RwLock` over an index-map-like pair: a dense
//!   `Vec<Rec>` and a `hashbrown::HashTable<u32>` of positions into it, plus the low 32 bits of
//!   each key's hash in a `Vec<u32>` beside the slots. A record costs its key and value plus
//!   about 68 bytes: the 40-byte slot, a 4-byte index entry and 1 control byte per bucket (at
//!   hashbrown's 44–88 % load, 6–11 bytes), the 4-byte hash, and ~16 bytes of allocator header
//!   and rounding for the key‖value block (more transiently while a `Vec` or table has spare
//!   capacity after doubling). A `HashMap<Box<[u8]>, Entry>` would cost ~100 bytes and two
//!   allocations. `capsiz` and [`Store::size`] charge exactly `key + value + 68` per record. The
//!   shard is chosen by bits 32..38 of the key's xxh3 hash, the table bucket by the low 32 bits,
//!   which the shard keeps: growing a table reads no record. Readers take one shard's read lock;
//!   writers on different shards never contend, and share no counter: versions come from a
//!   sequence per shard (with the shard in their low 6 bits), record and byte totals from
//!   per-thread slots (`crate::counter`).
//! * **Tree (`+`)**: one `parking_lot::RwLock<BTreeSet<Rec>>` (records ordered by key, looked up by
//!   `&[u8]` through `Borrow`). A record costs its key and value plus about 80 bytes: the 40-byte
//!   element in B-tree nodes that are typically 55–75 % full, the internal nodes, and the
//!   allocator header of the key‖value block; `capsiz` and `size` charge `key + value + 80`. One
//!   lock rather than ordered shards: range sharding needs the key distribution in advance (or
//!   rebalancing), and cursors, `range` and `fwmkeys` would have to stitch shards together; with a
//!   single `RwLock` reads run in parallel, and a write holds the lock only for one O(log n)
//!   B-tree operation. Use the hash when write concurrency matters more than order.
//!
//! # Eviction (cache mode)
//!
//! CLOCK (second chance). Every record has a reference bit; a successful `get` sets it (readers
//! only need an atomic, not the write lock) and a record enters unreferenced. To evict, a hand
//! sweeps the records: a referenced record has its bit cleared and is passed over, the first
//! unreferenced (or expired) record is removed. The record just written by the evicting call is
//! never its own victim.
//!
//! * Hash: each shard has its own hand over its dense slot vector. A write that leaves the
//!   database over a bound evicts first from its own shard, under the lock it already holds (no
//!   cross-shard contention); removal moves the shard's last slot (usually the record just
//!   inserted) into the victim's place and the hand steps past it, so a new record gets a full
//!   revolution, as in textbook CLOCK. When the own shard has nothing to give (or the bound is
//!   exceeded by more than one record), further victims are taken round-robin from the other
//!   shards, one shard lock at a time. Recency is therefore approximated per shard; with more
//!   than a few dozen records per shard this is close to a global CLOCK.
//! * Tree: one hand, moving in key order (it is kept as the last victim's key). A new record that
//!   lands just ahead of the hand may be examined soon after it was written.
//!
//! Bounds are checked with global atomic counters, so concurrent writers may overshoot a bound by
//! a record or two each until their own eviction runs; after a write returns (with no other
//! writer running) the database is within its bounds. Counters: `evictions` (records removed to
//! respect a bound) and `expired_reclaimed` (expired records freed).
//!
//! # Expiration and reclamation
//!
//! An expired record is invisible at once (reads, cursors, `accept` visitors see it as absent).
//! Its memory is reclaimed without background threads:
//! * by any write to its key (or a `Keep` visit of it) under the write lock;
//! * amortised: each write also advances a second "reaper" hand over a few records of the shard
//!   (or tree) it wrote, freeing expired ones; this only runs while the shard holds records with an
//!   expiration time, so databases that never expire anything pay nothing;
//! * the eviction hand takes expired records first;
//! * `optimize` frees every expired record (and shrinks the tables).
//!
//! Expired records not yet reclaimed are still included in [`Store::count`] and [`Store::size`].

use crate::config::{OpenMode, Params};
use crate::counter::Counter;
use crate::cursor::{Found, KindCursor, Walk};
use crate::error::{Error, Result};
use crate::store::{
    check_sizes, is_expired, now_secs, BatchOp, CheckReport, Current, Cursor, Decision, Kind, Meta,
    Pinned, Record, Shown, Store,
};
use hashbrown::HashTable;
use parking_lot::{RwLock, RwLockWriteGuard};
use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::ops::Bound::{self, Excluded, Included, Unbounded};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
use std::sync::Arc;
use xxhash_rust::xxh3::xxh3_64;

/// Number of shards of the hash (a power of two).
const SHARDS: usize = 64;
/// Bytes charged per record of the hash on top of key and value (see the module doc).
pub const HASH_RECORD_OVERHEAD: u64 = 68;
/// Bytes charged per record of the tree on top of key and value (see the module doc).
pub const TREE_RECORD_OVERHEAD: u64 = 80;
/// Records examined by the reaper hand on each write.
const REAP_STEPS: usize = 4;
/// Positions in a shard are `u32`.
const MAX_SHARD_RECORDS: usize = u32::MAX as usize;
/// The parameters both kinds accept.
pub const PARAMS: &[&str] = &["capnum", "capsiz", "bnum"];
/// `bnum` reserves room for at most this many records up front (about 1 GB); beyond, the
/// hash grows as records arrive.
pub const MAX_PRESIZE: u64 = 1 << 24;

// ------------------------------------------------------------------------------------------------
// Records
// ------------------------------------------------------------------------------------------------

/// Reference bit of the CLOCK, packed into the key length.
const REF_BIT: u32 = 1 << 31;
/// Set in the key length word when the record's block is an `Arc<[u8]>`, not a `Box<[u8]>`.
const SHARED_BIT: u32 = 1 << 30;
/// The key length bits of that word (keys are at most 64 KiB).
const KLEN_MASK: u32 = !(REF_BIT | SHARED_BIT);
/// Values at least this large are stored in a shared block, which `view_shared` hands out
/// (for a server to write to the socket) without copying the value.
pub const SHARE_MIN: usize = 16 << 10;

/// One stored record: 40 bytes plus one heap block holding key and value.
///
/// The atomics are written only under the owning lock held for writing, except the reference
/// bit, which readers set under a read lock.
struct Rec {
    /// Key followed by value: a block from `Box::into_raw`, or with [`SHARED_BIT`] one
    /// reference to a block from `Arc::into_raw` (the same 16-byte pointer either way).
    data: NonNull<[u8]>,
    /// Key length (low 30 bits), [`SHARED_BIT`] and the CLOCK reference bit ([`REF_BIT`]).
    klen_ref: AtomicU32,
    flags: u32,
    expires: AtomicU64,
    version: AtomicU64,
}

impl Rec {
    /// The caller has checked the key length with [`check_sizes`] (so it fits in 30 bits).
    fn new(key: &[u8], value: &[u8], flags: u32, expires: u64, version: u64) -> Rec {
        let len = key.len() + value.len();
        let klen = key.len() as u32 & KLEN_MASK;
        let (data, klen_ref) = if value.len() >= SHARE_MIN {
            let mut block = Arc::<[u8]>::new_uninit_slice(len);
            let dst = Arc::get_mut(&mut block).expect("a new Arc is unique");
            dst[..key.len()].write_copy_of_slice(key);
            dst[key.len()..].write_copy_of_slice(value);
            // SAFETY: every byte was just written.
            let block = unsafe { block.assume_init() };
            (Arc::into_raw(block).cast_mut(), klen | SHARED_BIT)
        } else {
            let mut block = Vec::with_capacity(len);
            block.extend_from_slice(key);
            block.extend_from_slice(value);
            (Box::into_raw(block.into_boxed_slice()), klen)
        };
        Rec {
            data: NonNull::new(data).expect("Box and Arc pointers are never null"),
            klen_ref: AtomicU32::new(klen_ref),
            flags,
            expires: AtomicU64::new(expires),
            version: AtomicU64::new(version),
        }
    }

    #[inline]
    fn data(&self) -> &[u8] {
        // SAFETY: `data` is a live block this record owns (or holds a reference to) until it is
        // dropped, and no one writes to it.
        unsafe { self.data.as_ref() }
    }

    #[inline]
    fn is_shared(&self) -> bool {
        self.klen_ref.load(Relaxed) & SHARED_BIT != 0
    }

    /// Another reference to the record's block, when it is shared.
    fn share(&self) -> Option<Arc<[u8]>> {
        self.is_shared().then(|| {
            let p = self.data.as_ptr().cast_const();
            // SAFETY: with SHARED_BIT, `data` came from `Arc::into_raw` and this record still
            // holds that reference, so the count is at least 1; the new reference is owned by
            // the returned `Arc`.
            unsafe {
                Arc::increment_strong_count(p);
                Arc::from_raw(p)
            }
        })
    }

    #[inline]
    fn klen(&self) -> usize {
        ((self.klen_ref.load(Relaxed) & KLEN_MASK) as usize).min(self.data().len())
    }

    #[inline]
    fn key(&self) -> &[u8] {
        &self.data()[..self.klen()]
    }

    #[inline]
    fn value(&self) -> &[u8] {
        &self.data()[self.klen()..]
    }

    /// The value for `view_shared`: pinned when it is at least `min` bytes and shared.
    fn shown(&self, min: usize) -> Shown<'_> {
        let value = self.value();
        if value.len() >= min {
            if let Some(p) = self
                .share()
                .and_then(|b| Pinned::of_bytes(b, self.klen(), value.len()))
            {
                return Shown::Pinned(p);
            }
        }
        Shown::Bytes(value)
    }

    #[inline]
    fn expires(&self) -> u64 {
        self.expires.load(Relaxed)
    }

    fn meta(&self) -> Meta {
        Meta {
            flags: self.flags,
            expires: self.expires(),
            version: self.version.load(Relaxed),
        }
    }

    fn current(&self) -> Current<'_> {
        Current {
            value: self.value(),
            meta: self.meta(),
        }
    }

    fn record(&self) -> Record {
        Record {
            value: self.value().to_vec(),
            meta: self.meta(),
        }
    }

    #[inline]
    fn is_expired(&self, now: u64) -> bool {
        is_expired(self.expires(), now)
    }

    /// Live now; reads the clock only for records that can expire.
    #[inline]
    fn is_live_now(&self) -> bool {
        let e = self.expires();
        e == 0 || !is_expired(e, now_secs())
    }

    /// Set the CLOCK reference bit (a read of the record). Avoids writing the cache line when
    /// the bit is already set.
    #[inline]
    fn mark_used(&self) {
        if self.klen_ref.load(Relaxed) & REF_BIT == 0 {
            self.klen_ref.fetch_or(REF_BIT, Relaxed);
        }
    }

    /// Clear the reference bit; whether it was set.
    #[inline]
    fn take_used(&self) -> bool {
        if self.klen_ref.load(Relaxed) & REF_BIT != 0 {
            self.klen_ref.fetch_and(!REF_BIT, Relaxed);
            true
        } else {
            false
        }
    }
}

impl Drop for Rec {
    fn drop(&mut self) {
        let p = self.data.as_ptr();
        // SAFETY: `data` came from `Arc::into_raw` (with SHARED_BIT) or `Box::into_raw` in
        // `Rec::new`, and is given back exactly once, here.
        unsafe {
            if self.is_shared() {
                drop(Arc::from_raw(p.cast_const()));
            } else {
                drop(Box::from_raw(p));
            }
        }
    }
}

// SAFETY: a `Rec` owns its block like a `Box<[u8]>` or holds a reference to it like an
// `Arc<[u8]>` (both Send and Sync), never writes to it, and its other fields are atomics or
// plain data.
unsafe impl Send for Rec {}
unsafe impl Sync for Rec {}

// Ordered by key, for the tree's `BTreeSet`.
impl PartialEq for Rec {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Rec {}
impl PartialOrd for Rec {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Rec {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(other.key())
    }
}
impl Borrow<[u8]> for Rec {
    fn borrow(&self) -> &[u8] {
        self.key()
    }
}

// ------------------------------------------------------------------------------------------------
// State shared by both kinds
// ------------------------------------------------------------------------------------------------

/// Parsed `capnum` / `capsiz` / `bnum`.
struct Tuning {
    capnum: Option<u64>,
    capsiz: Option<u64>,
    bnum: Option<u64>,
}

impl Tuning {
    fn parse(params: &Params, kind: &str) -> Result<Tuning> {
        params.allow_only(kind, PARAMS)?;
        Ok(Tuning {
            capnum: params.size("capnum")?,
            capsiz: params.size("capsiz")?,
            bnum: params.size("bnum")?,
        })
    }
}

/// Counters, bounds and the open flag.
struct Common {
    path: &'static str,
    kind_label: &'static str,
    /// Bytes charged per record besides key and value.
    overhead: u64,
    closed: AtomicBool,
    next_version: AtomicU64,
    /// 0 = unbounded.
    capnum: AtomicU64,
    /// 0 = unbounded.
    capsiz: AtomicU64,
    /// 0 = not given.
    bnum: AtomicU64,
    /// Records and charged bytes: changed by every write of every thread, so per-thread
    /// slots (`Counter`) rather than one shared cache line.
    count: Counter,
    bytes: Counter,
    evictions: AtomicU64,
    expired_reclaimed: AtomicU64,
}

impl Common {
    fn new(path: &'static str, kind_label: &'static str, overhead: u64, t: &Tuning) -> Common {
        Common {
            path,
            kind_label,
            overhead,
            closed: AtomicBool::new(false),
            next_version: AtomicU64::new(1),
            capnum: AtomicU64::new(t.capnum.unwrap_or(0)),
            capsiz: AtomicU64::new(t.capsiz.unwrap_or(0)),
            bnum: AtomicU64::new(t.bnum.unwrap_or(0)),
            count: Counter::new(),
            bytes: Counter::new(),
            evictions: AtomicU64::new(0),
            expired_reclaimed: AtomicU64::new(0),
        }
    }

    fn apply(&self, t: &Tuning) {
        if let Some(n) = t.capnum {
            self.capnum.store(n, Relaxed);
        }
        if let Some(n) = t.capsiz {
            self.capsiz.store(n, Relaxed);
        }
        if let Some(n) = t.bnum {
            self.bnum.store(n, Relaxed);
        }
    }

    #[inline]
    fn check_open(&self) -> Result<()> {
        if self.closed.load(Relaxed) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    /// A fresh version (never 0).
    #[inline]
    fn version(&self) -> u64 {
        self.next_version.fetch_add(1, Relaxed)
    }

    #[inline]
    fn charge_of(&self, data_len: usize) -> u64 {
        data_len as u64 + self.overhead
    }

    #[inline]
    fn charge(&self, rec: &Rec) -> u64 {
        self.charge_of(rec.data().len())
    }

    /// The size limits of every kind, plus `capsiz` for a single record.
    fn check_fits(&self, key: &[u8], value_len: usize) -> Result<()> {
        check_sizes(key, value_len)?;
        let capsiz = self.capsiz.load(Relaxed);
        let need = self.charge_of(key.len() + value_len);
        if capsiz != 0 && need > capsiz {
            return Err(Error::TooLarge(format!(
                "record of {need} bytes (key + value + {} overhead) exceeds capsiz={capsiz}",
                self.overhead
            )));
        }
        Ok(())
    }

    #[inline]
    fn over_cap(&self) -> bool {
        let capnum = self.capnum.load(Relaxed);
        let capsiz = self.capsiz.load(Relaxed);
        (capnum != 0 && self.count.get() > capnum) || (capsiz != 0 && self.bytes.get() > capsiz)
    }

    fn added(&self, rec: &Rec) {
        self.count.add(1);
        self.bytes.add(self.charge(rec));
    }

    fn removed(&self, rec: &Rec) {
        self.count.sub(1);
        self.bytes.sub(self.charge(rec));
    }

    fn replaced(&self, old: &Rec, new: &Rec) {
        self.bytes
            .add(self.charge(new).wrapping_sub(self.charge(old)));
    }

    /// Count a removal done to respect a bound (`expired` says the victim had expired).
    fn evicted(&self, expired: bool) {
        if expired {
            self.expired_reclaimed.fetch_add(1, Relaxed);
        } else {
            self.evictions.fetch_add(1, Relaxed);
        }
    }

    fn reclaimed(&self, n: u64) {
        if n != 0 {
            self.expired_reclaimed.fetch_add(n, Relaxed);
        }
    }

    fn describe(&self) -> Vec<(String, String)> {
        let mut out = vec![("path".to_string(), self.path.to_string())];
        for (name, v) in [
            ("capnum", &self.capnum),
            ("capsiz", &self.capsiz),
            ("bnum", &self.bnum),
        ] {
            let v = v.load(Relaxed);
            if v != 0 {
                out.push((name.to_string(), v.to_string()));
            }
        }
        out
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("evictions", self.evictions.load(Relaxed)),
            ("expired_reclaimed", self.expired_reclaimed.load(Relaxed)),
        ]
    }

    /// Mark closed; `Err(Closed)` when it already was.
    fn close(&self) -> Result<()> {
        if self.closed.swap(true, Relaxed) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    /// Compare the counters with what a full scan found.
    fn check_totals(&self, records: u64, bytes: u64, problems: &mut Vec<String>) {
        let count = self.count.get();
        if count != records {
            problems.push(format!("record counter says {count}, found {records}"));
        }
        let b = self.bytes.get();
        if b != bytes {
            problems.push(format!("byte counter says {b}, found {bytes}"));
        }
    }
}

// ------------------------------------------------------------------------------------------------
// MemHash
// ------------------------------------------------------------------------------------------------

/// The live records as batch operations (for `copy_to`).
fn snapshot<'a>(recs: impl Iterator<Item = &'a Rec>, now: u64) -> Vec<BatchOp> {
    recs.filter(|r| !r.is_expired(now))
        .map(|r| BatchOp::Put {
            key: r.key().to_vec(),
            value: r.value().to_vec(),
            flags: r.flags,
            expires: r.expires(),
        })
        .collect()
}

/// Write a snapshot as a new database at `dest`, of the persistent kind the registry picks for
/// it (`registry::copy_kind`: today the on-disk hash): the copy of a memory database can be
/// opened (and served) like any other.
fn write_copy(dest: &Path, ops: Vec<BatchOp>) -> Result<()> {
    if dest.exists() {
        return Err(Error::InvalidParam(format!(
            "{}: destination already exists",
            dest.display()
        )));
    }
    let params = Params::parse("sync=none")?;
    let kind = crate::registry::copy_kind(dest)?;
    let db = (kind.open)(dest, &params, OpenMode::Create)?.store;
    for chunk in ops.chunks(1024) {
        db.write_batch(chunk)?;
    }
    db.close()
}

/// The keyspaces of a memory database: each a database of the same kind with its own
/// parameters, apart from the others. A batch across them validates every operation against
/// its keyspace's limits first, then takes the write locks of every keyspace it writes (the
/// tree's lock, the hash's shards) before applying any part, so no reader sees part of it;
/// one batch across keyspaces of a database runs at a time (which orders their locks).
pub(crate) struct Spaces<S> {
    /// Each keyspace and the parameters it was made with.
    map: parking_lot::Mutex<std::collections::HashMap<String, (Arc<S>, String)>>,
    across: parking_lot::Mutex<()>,
    /// This database is itself a keyspace (which has none of its own).
    is_space: AtomicBool,
}

impl<S> Default for Spaces<S> {
    fn default() -> Self {
        Spaces {
            map: parking_lot::Mutex::new(std::collections::HashMap::new()),
            across: parking_lot::Mutex::new(()),
            is_space: AtomicBool::new(false),
        }
    }
}

/// What the keyspaces of both memory kinds need of them.
trait MemKind: Store + Sized + 'static {
    fn common(&self) -> &Common;
    fn spaces(&self) -> &Spaces<Self>;
    fn open_space(params: &Params) -> Result<Self>;
    /// Apply each group's operations to its database, every group's locks held together.
    fn write_locked(groups: &[(&Self, &[BatchOp])]) -> Result<()>;
}

fn keyspace_of<S: MemKind>(db: &S, name: &str, params: &str) -> Result<Arc<dyn Store>> {
    db.common().check_open()?;
    crate::store::check_keyspace_name(name)?;
    if db.spaces().is_space.load(Relaxed) {
        return Err(Error::Unsupported("a keyspace of a keyspace"));
    }
    let mut map = db.spaces().map.lock();
    if let Some((s, _)) = map.get(name) {
        return Ok(s.clone());
    }
    let s = S::open_space(&Params::parse(params)?)?;
    s.spaces().is_space.store(true, Relaxed);
    let s = Arc::new(s);
    map.insert(name.to_string(), (s.clone(), params.to_string()));
    Ok(s)
}

/// `Store::keyspace_rules` of a memory database: a keyspace's limits are its own parameters'.
fn keyspace_rules_of<S: MemKind>(db: &S, params: &str) -> Result<Option<Arc<dyn Store>>> {
    db.common().check_open()?;
    Ok(Some(Arc::new(S::open_space(&Params::parse(params)?)?)))
}

/// `Store::keyspaces` of a memory database: the names and the parameters each was made with
/// (what a replica's snapshot makes it again with).
fn keyspaces_of<S: MemKind>(db: &S) -> Vec<(String, String)> {
    if db.spaces().is_space.load(Relaxed) {
        return Vec::new();
    }
    let mut out: Vec<(String, String)> = db
        .spaces()
        .map
        .lock()
        .iter()
        .map(|(n, (_, p))| (n.clone(), p.clone()))
        .collect();
    out.sort();
    out
}

fn write_across_of<S: MemKind>(db: &S, ops: &[(&str, BatchOp)]) -> Result<()> {
    db.common().check_open()?;
    // Each keyspace's operations, in their order.
    let mut groups: Vec<(Option<Arc<S>>, Vec<BatchOp>)> = Vec::new();
    {
        let map = db.spaces().map.lock();
        let mut at: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for (name, op) in ops {
            let g = match at.get(name) {
                Some(&g) => g,
                None => {
                    let space = if name.is_empty() {
                        None
                    } else {
                        Some(map.get(*name).map(|(s, _)| s.clone()).ok_or_else(|| {
                            Error::NotFound(format!(
                                "no keyspace `{name}` (Store::keyspace makes one)"
                            ))
                        })?)
                    };
                    groups.push((space, Vec::new()));
                    at.insert(name, groups.len() - 1);
                    groups.len() - 1
                }
            };
            groups[g].1.push(op.clone());
        }
    }
    for (space, ops) in &groups {
        let c = space.as_deref().map_or(db.common(), |s| s.common());
        c.check_open()?;
        for op in ops {
            match op {
                BatchOp::Put { key, value, .. } => c.check_fits(key, value.len())?,
                BatchOp::Remove { key } => check_sizes(key, 0)?,
            }
        }
    }
    let refs: Vec<(&S, &[BatchOp])> = groups
        .iter()
        .filter(|(_, ops)| !ops.is_empty())
        .map(|(space, ops)| (space.as_deref().unwrap_or(db), &ops[..]))
        .collect();
    let _one = db.spaces().across.lock();
    S::write_locked(&refs)
}

/// Close every keyspace of a memory database closing.
fn close_spaces<S: MemKind>(db: &S) {
    for (s, _) in db.spaces().map.lock().values() {
        let _ = s.close();
    }
}

mod hash;
mod tree;

pub use self::hash::MemHash;
pub use self::tree::MemTree;

#[cfg(test)]
mod tests;
