//! The one interface every database kind implements.
//!
//! The required core is small: [`Store::get`], [`Store::accept`] (look at the current record of
//! one key and decide what to write, atomically), [`Store::write_batch`], [`Store::cursor`] and
//! the whole-database operations. Every record-level operation (putkeep, putcat, cas, addint, …)
//! is a provided method built on `accept`, so every kind behaves the same; a kind overrides one
//! only to be faster, never to differ.
//!
//! Each operation has one meaning, the one of the system it comes from, named in its doc:
//! Tokyo Cabinet / Tyrant (`putcat`, `putshl`, `addint`, `adddouble`), memcached
//! (`incr_decimal_if`, `concat_if`, `cas`, `out_if`, `touch`), Kyoto Cabinet / Tycoon
//! (`append_with`, `increment`, `increment_double`, `cas_value`, `seize`). The servers map
//! their wire forms onto these; an embedder calls the same ones.

use crate::error::{Error, Result};
use std::path::Path;

/// Metadata kept with every record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// Opaque 32-bit client flags (memcached's flags).
    pub flags: u32,
    /// Absolute expiration time in unix seconds; 0 = never expires.
    pub expires: u64,
    /// Changes on every write of the record's value or flags (not on a touch, which changes
    /// only the expiry: memcached keeps the cas there too); never 0 for a stored record.
    pub version: u64,
}

/// A record as returned by reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub value: Vec<u8>,
    pub meta: Meta,
}

/// A stored value held by shared ownership of the memory it lies in (a segment file's mapping,
/// or an in-memory record's block), so it can outlive the call that found it: a server writes
/// it to a socket straight from that memory, with no copy ([`Store::view_shared`]). The bytes
/// never change while it is held (a log is only appended to, and a segment's file is removed,
/// never cut below its records, while it runs; an in-memory record's block is never written
/// after it is made).
#[derive(Clone)]
pub struct Pinned {
    owner: Owner,
    off: usize,
    len: usize,
}

#[derive(Clone)]
enum Owner {
    Dyn(std::sync::Arc<dyn AsRef<[u8]> + Send + Sync>),
    Bytes(std::sync::Arc<[u8]>),
}

impl Owner {
    fn bytes(&self) -> &[u8] {
        match self {
            Owner::Dyn(o) => (**o).as_ref(),
            Owner::Bytes(b) => b,
        }
    }
}

impl Pinned {
    /// `len` bytes at `off` of what `owner` holds; `None` when they are not all there.
    pub fn new(
        owner: std::sync::Arc<dyn AsRef<[u8]> + Send + Sync>,
        off: usize,
        len: usize,
    ) -> Option<Pinned> {
        Pinned::of(Owner::Dyn(owner), off, len)
    }

    /// `len` bytes at `off` of a shared block.
    pub fn of_bytes(block: std::sync::Arc<[u8]>, off: usize, len: usize) -> Option<Pinned> {
        Pinned::of(Owner::Bytes(block), off, len)
    }

    fn of(owner: Owner, off: usize, len: usize) -> Option<Pinned> {
        let end = off.checked_add(len)?;
        (owner.bytes().len() >= end).then_some(Pinned { owner, off, len })
    }

    pub fn bytes(&self) -> &[u8] {
        &self.owner.bytes()[self.off..self.off + self.len]
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::fmt::Debug for Pinned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pinned({} bytes)", self.len)
    }
}

/// A value shown by [`Store::view_shared`].
pub enum Shown<'a> {
    /// Borrowed for the call only.
    Bytes(&'a [u8]),
    /// Kept as long as wanted.
    Pinned(Pinned),
}

impl Shown<'_> {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Shown::Bytes(b) => b,
            Shown::Pinned(p) => p.bytes(),
        }
    }
}

/// The current record of a key, as shown to an [`Store::accept`] visitor.
#[derive(Clone, Copy, Debug)]
pub struct Current<'a> {
    pub value: &'a [u8],
    pub meta: Meta,
}

/// The value of a [`Decision::Put`]: lent by the caller (a put's own argument: no copy before
/// the store's), made by the visitor (an append), or, when short, held inline (a counter):
/// only the second allocates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value<'v> {
    Lent(&'v [u8]),
    Made(Vec<u8>),
    Short { len: u8, bytes: [u8; SHORT_VALUE] },
}

/// Bytes a [`Value::Short`] holds: a 64-bit number in decimal (20 digits) and then some.
pub const SHORT_VALUE: usize = 22;

impl Value<'_> {
    /// `b` inline when it is short enough, else copied into a new buffer.
    pub fn copied(b: &[u8]) -> Value<'static> {
        if b.len() <= SHORT_VALUE {
            let mut bytes = [0u8; SHORT_VALUE];
            bytes[..b.len()].copy_from_slice(b);
            Value::Short {
                len: b.len() as u8,
                bytes,
            }
        } else {
            Value::Made(b.to_vec())
        }
    }

    /// `n` in decimal ASCII (memcached's counters), inline.
    pub fn decimal(n: u64) -> Value<'static> {
        use std::io::Write;
        let mut bytes = [0u8; SHORT_VALUE];
        let mut rest = &mut bytes[..];
        // 20 digits at most: always fits.
        let _ = write!(rest, "{n}");
        let len = (SHORT_VALUE - rest.len()) as u8;
        Value::Short { len, bytes }
    }
}

impl std::ops::Deref for Value<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Value::Lent(b) => b,
            Value::Made(v) => v,
            Value::Short { len, bytes } => &bytes[..usize::from(*len)],
        }
    }
}

impl<'v> From<&'v [u8]> for Value<'v> {
    fn from(b: &'v [u8]) -> Self {
        Value::Lent(b)
    }
}

impl From<Vec<u8>> for Value<'_> {
    fn from(v: Vec<u8>) -> Self {
        Value::Made(v)
    }
}

/// What an [`Store::accept`] visitor decides to do with a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision<'v> {
    /// Leave the record as it is (or absent).
    Keep,
    /// Store this value and metadata (the version is assigned by the store). The value may
    /// borrow from the caller (a put's own argument: no copy before the store's) or be a new
    /// one (an append, a counter).
    Put {
        value: Value<'v>,
        flags: u32,
        expires: u64,
    },
    /// Change only the expiration time of an existing record.
    Touch { expires: u64 },
    /// Delete the record.
    Remove,
}

/// The neutral result of a conditional write; each protocol maps it to its own wire form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Written; the new metadata.
    Stored(Meta),
    /// The condition failed because the key exists (putkeep / add).
    Exists,
    /// The condition failed because the key is absent (replace, cas, append on memcached).
    NotFound,
    /// Compare-and-swap failed: the record changed since the version was read.
    VersionMismatch,
    /// The record was deleted.
    Deleted,
    /// The result would be over a size limit the caller set (memcached's item size).
    TooLarge,
}

/// One operation of an atomic [`Store::write_batch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchOp {
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
        flags: u32,
        expires: u64,
    },
    Remove {
        key: Vec<u8>,
    },
}

impl BatchOp {
    pub fn key(&self) -> &[u8] {
        match self {
            BatchOp::Put { key, .. } | BatchOp::Remove { key } => key,
        }
    }
}

/// Which database kind a handle is. What a kind is and can do is its descriptor in the
/// registry ([`Kind::info`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `*`: concurrent in-memory hash.
    MemHash,
    /// `+`: concurrent in-memory ordered tree.
    MemTree,
    /// `.kh`: on-disk hash.
    DiskHash,
    /// `.kb`: on-disk B+ tree.
    DiskTree,
    /// `.kf`: fixed-length database (records by integer id).
    Fixed,
}

/// A cursor over the records of a store (see docs/ARCHITECTURE.md, "Cursors").
///
/// A cursor is *on* a record (after `first`, `last`, `jump`, `jump_back`, `step`,
/// `step_back`), or nowhere (when made, after running off an end or a jump that found
/// nothing). Ordered kinds walk in key order, both ways; unordered kinds in their storage
/// order, forward only: `last`, `jump_back` and `step_back` fail there with
/// [`Error::Unsupported`], and `jump(k)` goes to the record of `k` itself.
///
/// Others may write meanwhile. The record a cursor is on is read again at each use: a read
/// shows its current value, and when it was removed (by anyone) the cursor is on the next
/// record, as Kyoto Cabinet's cursors are. A forward walk (from `first` or a `jump`) returns
/// every record that is live for the whole walk exactly once and no key twice; a record
/// written or removed during the walk may or may not be returned (each kind says which in
/// docs/ARCHITECTURE.md).
pub trait Cursor: Send {
    /// Go to the first record; false when there is none.
    fn first(&mut self) -> Result<bool>;
    /// Go to the last record (ordered kinds); false when there is none.
    fn last(&mut self) -> Result<bool> {
        Err(Error::Unsupported(
            "a backward walk on an unordered database",
        ))
    }
    /// Go to the first record whose key is >= `key` (ordered kinds), or to the record of
    /// `key` itself (unordered kinds); false when there is none.
    fn jump(&mut self, key: &[u8]) -> Result<bool>;
    /// Go to the last record whose key is <= `key` (ordered kinds); false when there is none.
    fn jump_back(&mut self, _key: &[u8]) -> Result<bool> {
        Err(Error::Unsupported(
            "a backward walk on an unordered database",
        ))
    }
    /// Go to the next record; false (and nowhere) past the last one or when nowhere.
    fn step(&mut self) -> Result<bool>;
    /// Go to the previous record (ordered kinds); false (and nowhere) before the first one or
    /// when nowhere.
    fn step_back(&mut self) -> Result<bool> {
        Err(Error::Unsupported(
            "a backward walk on an unordered database",
        ))
    }
    /// The record the cursor is on (read now); `None` when nowhere.
    fn get(&mut self) -> Result<Option<(Vec<u8>, Record)>>;
    /// Replace the value of the record the cursor is on, keeping its flags; its expiration
    /// becomes `expires` when given. False when nowhere.
    fn set_value(&mut self, value: &[u8], expires: Option<u64>) -> Result<bool>;
    /// Remove the record the cursor is on; the cursor is then on the next one (the previous
    /// one when it goes [`Cursor::backward`]). False when nowhere.
    fn remove(&mut self) -> Result<bool>;
    /// Remove the record the cursor is on and return it; the cursor is then on the next one
    /// (the previous one when it goes [`Cursor::backward`]).
    fn seize(&mut self) -> Result<Option<(Vec<u8>, Record)>>;
    /// Whether the cursor's last jump or step went backward (`last`, `jump_back`,
    /// `step_back`), as Kyoto Cabinet's cursors remember it: `remove` and `seize` then move
    /// to the previous record, and a caller that steps "on" steps back. `first`, `jump` and
    /// `step` make it go forward again.
    fn backward(&self) -> bool {
        false
    }
    /// Iterate: the record the cursor is on, the cursor then moving past it (the first record
    /// when the cursor was just made); `None` at the end.
    fn next(&mut self) -> Result<Option<(Vec<u8>, Record)>>;
    /// Damaged records the cursor has passed over (skipped): only a database opened despite
    /// damage has any.
    fn damage_skipped(&self) -> u64 {
        0
    }
}

/// The keys [`Store::for_each_in_range`] shows: `from` and `to` bound them below and above
/// (each inclusive, exclusive or open); `desc` walks from the top; at most `max` records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyRange<'a> {
    pub from: std::ops::Bound<&'a [u8]>,
    pub to: std::ops::Bound<&'a [u8]>,
    pub desc: bool,
    pub max: usize,
}

impl<'a> KeyRange<'a> {
    /// `[from, to)` (`to` open when `None`), ascending, unlimited.
    pub fn new(from: &'a [u8], to: Option<&'a [u8]>) -> KeyRange<'a> {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        KeyRange {
            from: Included(from),
            to: to.map_or(Unbounded, Excluded),
            desc: false,
            max: usize::MAX,
        }
    }

    /// Whether `key` is above the lower bound.
    pub fn above_from(&self, key: &[u8]) -> bool {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        match self.from {
            Included(f) => key >= f,
            Excluded(f) => key > f,
            Unbounded => true,
        }
    }

    /// Whether `key` is below the upper bound.
    pub fn below_to(&self, key: &[u8]) -> bool {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        match self.to {
            Included(t) => key <= t,
            Excluded(t) => key < t,
            Unbounded => true,
        }
    }
}

/// The result of [`Store::check`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    pub records: u64,
    /// Damaged regions of the files: stored bytes that no longer verify.
    pub damage: Vec<Damaged>,
    /// Inconsistencies that are not damage to stored bytes (an index entry that does not match
    /// its record, …).
    pub problems: Vec<String>,
    /// Nothing lost, nothing to repair: what the next writable open rebuilds or drops (a
    /// damaged or missing index checkpoint, a write cut short by a crash).
    pub warnings: Vec<String>,
}

impl CheckReport {
    pub fn healthy(&self) -> bool {
        self.problems.is_empty() && self.damage.is_empty()
    }

    /// Records known lost to the damage (a lower bound).
    pub fn lost(&self) -> u64 {
        self.damage.iter().map(|d| d.lost).sum()
    }
}

/// What a repair did: the records it kept, and the damage it went around.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// Records written to the new database.
    pub kept: u64,
    /// Records known lost (a lower bound, as in `Damaged::lost`).
    pub lost: u64,
    /// Bytes of damaged regions skipped.
    pub damaged_bytes: u64,
    pub damage: Vec<Damaged>,
}

/// A damaged region of a database file: bytes that held records (or a file's header) and no
/// longer verify.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damaged {
    /// The file's name in the database directory.
    pub file: String,
    pub off: u64,
    pub len: u64,
    /// Records known lost: a lower bound (a record whose header still parses counts one, a
    /// batch the records in it that do not verify, a stretch that does not parse one).
    pub lost: u64,
    pub what: String,
}

impl std::fmt::Display for Damaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} offset {} ({} bytes): {}, {} record{} lost",
            self.file,
            self.off,
            self.len,
            self.what,
            self.lost,
            if self.lost == 1 { "" } else { "s" }
        )
    }
}

/// Maximum key length accepted by every kind (64 KiB).
pub const MAX_KEY_LEN: usize = 64 * 1024;
/// Maximum value length accepted by every kind (1 GiB).
pub const MAX_VALUE_LEN: usize = 1 << 30;

/// Validate key and value sizes against the limits shared by all kinds.
pub fn check_sizes(key: &[u8], value_len: usize) -> Result<()> {
    if key.len() > MAX_KEY_LEN {
        return Err(Error::TooLarge(format!(
            "key of {} bytes (limit {MAX_KEY_LEN})",
            key.len()
        )));
    }
    if value_len > MAX_VALUE_LEN {
        return Err(Error::TooLarge(format!(
            "value of {value_len} bytes (limit {MAX_VALUE_LEN})"
        )));
    }
    Ok(())
}

/// Current unix time in seconds.
///
/// Read from the kernel's coarse real-time clock (`CLOCK_REALTIME_COARSE`: the time of the last
/// timer tick, a few milliseconds old at most, read without touching the hardware counter),
/// which is all a resolution of seconds needs. Every write of the in-memory kinds and every
/// batch of server requests asks; the precise clock cost about 4 % of an in-memory insert.
#[inline]
pub fn now_secs() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec to the valid pointer it is given.
        if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) } == 0 {
            return u64::try_from(ts.tv_sec).unwrap_or(0);
        }
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Whether a record with this expiration time is expired at `now`.
#[inline]
pub fn is_expired(expires: u64, now: u64) -> bool {
    expires != 0 && expires <= now
}

/// What [`Store::for_each_record`] calls with each record (key, value, metadata); it returns
/// whether to go on.
pub type RecordVisitor<'a> = dyn FnMut(&[u8], &[u8], Meta) -> Result<bool> + 'a;

/// The storage interface. All methods take `&self`: every kind is internally synchronised and
/// shared between threads behind an `Arc`.
pub trait Store: Send + Sync {
    // ----- required core -----

    /// The live (present and not expired) record of `key`. Its value is a new allocation;
    /// threads that read many small values should prefer `view`: with glibc's allocator, two
    /// threads getting small values scaled 1.07× where `view` scaled 1.85× (docs/BENCHMARKS.md).
    fn get(&self, key: &[u8]) -> Result<Option<Record>>;

    /// Show the live record of `key` to `f` without copying its value out: the value may be
    /// borrowed from the store's own memory while a lock is held, so `f` must not call the
    /// store. Returns whether the record was found (`f` is called only then). Servers use it
    /// to encode a reply straight from the store, with no per-request allocation.
    fn view(&self, key: &[u8], f: &mut dyn FnMut(&[u8], Meta)) -> Result<bool> {
        Ok(match self.get(key)? {
            Some(r) => {
                f(&r.value, r.meta);
                true
            }
            None => false,
        })
    }

    /// Like [`Store::view`], but a value of at least `min` bytes that lies in memory the store
    /// can share (an on-disk hash's mapped, uncompressed record, or an in-memory record's shared
    /// block) is shown as [`Shown::Pinned`],
    /// which the caller may keep after the call: servers queue it for the socket instead of
    /// copying it. Other values are shown borrowed, as by `view`.
    fn view_shared(
        &self,
        key: &[u8],
        min: usize,
        f: &mut dyn FnMut(Shown<'_>, Meta),
    ) -> Result<bool> {
        let _ = min;
        self.view(key, &mut |v, m| f(Shown::Bytes(v), m))
    }

    /// Atomically look at the live record of `key` and apply the visitor's decision. Returns the
    /// metadata of the record after the call (`None` when absent afterwards).
    fn accept<'v>(
        &self,
        key: &[u8],
        visitor: &mut dyn FnMut(Option<Current<'_>>) -> Decision<'v>,
    ) -> Result<Option<Meta>>;

    /// Apply every operation or none of them, even across a crash. The operations apply in
    /// order: of several on one key, the last decides (a put after a remove stores, a remove
    /// after a put leaves the key absent). One that is refused (a key or value too large) fails
    /// the whole batch, which then changes nothing.
    fn write_batch(&self, ops: &[BatchOp]) -> Result<()>;

    /// A cursor positioned before the first record.
    fn cursor(&self) -> Result<Box<dyn Cursor + '_>>;

    /// Number of records (records expired but not yet reclaimed may be counted).
    fn count(&self) -> u64;

    /// Bytes the database occupies (on disk, or in memory for memory kinds).
    fn size(&self) -> u64;

    /// Make every write so far durable.
    fn sync(&self) -> Result<()>;

    /// Compact / rebuild; `params` may retune (`"bnum=1000000#compress=zstd"`, or empty).
    fn optimize(&self, params: &str) -> Result<()>;

    /// Remove every record.
    fn vanish(&self) -> Result<()>;

    /// Write a consistent copy of the database to `dest` while writers keep going.
    fn copy_to(&self, dest: &Path) -> Result<()>;

    /// Verify every checksum and structure; changes nothing.
    fn check(&self) -> Result<CheckReport>;

    /// The kind of this database.
    fn kind(&self) -> Kind;

    /// Path (or `*` / `+`) and tuning parameters in effect, for `inform` and `stat`.
    fn describe(&self) -> Vec<(String, String)>;

    /// Sync and release resources; further calls fail with [`Error::Closed`].
    fn close(&self) -> Result<()>;

    /// Damage the open found in the database's files: only a read-only open of a damaged
    /// database has any (a writable one refuses it); `check` lists every region.
    fn damage_found(&self) -> Vec<Damaged> {
        Vec::new()
    }

    /// Named counters for `stats` / `inform` (evictions, compactions, …).
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    // ----- provided operations -----

    /// Call `f` with every live record (key, value, metadata), in no particular order, until
    /// it returns `Ok(false)`: the fastest way through a whole database (`kura db export`).
    /// The guarantees are a cursor's: a record live throughout the call is shown exactly once;
    /// one written during the call may be missed. `f` must not call the store. Returns how
    /// many damaged records (or regions) it passed over: only a database opened despite damage
    /// (read-only, or damage behind its checkpoint) has any.
    fn for_each_record(&self, f: &mut RecordVisitor<'_>) -> Result<u64> {
        let mut cur = self.cursor()?;
        while let Some((k, r)) = cur.next()? {
            if !f(&k, &r.value, r.meta)? {
                break;
            }
        }
        Ok(cur.damage_skipped())
    }

    /// Forward-matching keys: up to `max` keys starting with `prefix`, the first ones in the
    /// kind's order: key order on ordered kinds, else the order of [`Store::for_each_record`]
    /// (the order `kura db list` shows; Tokyo Cabinet's hash answers the first matches in its
    /// storage order likewise).
    fn fwmkeys(&self, prefix: &[u8], max: usize) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        if max == 0 {
            return Ok(out);
        }
        if self.kind().ordered() {
            let range = KeyRange {
                from: std::ops::Bound::Included(prefix),
                to: std::ops::Bound::Unbounded,
                desc: false,
                max,
            };
            self.for_each_in_range(&range, &mut |k, _, _| {
                if !k.starts_with(prefix) {
                    return Ok(false);
                }
                out.push(k.to_vec());
                Ok(true)
            })?;
            return Ok(out);
        }
        self.for_each_record(&mut |k, _, _| {
            if k.starts_with(prefix) {
                out.push(k.to_vec());
            }
            Ok(out.len() < max)
        })?;
        Ok(out)
    }

    /// Keys in `[from, to)` in order, up to `max` (ordered kinds only).
    fn range(&self, from: &[u8], to: Option<&[u8]>, max: usize) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        let range = KeyRange {
            max,
            ..KeyRange::new(from, to)
        };
        self.for_each_in_range(&range, &mut |k, _, _| {
            out.push(k.to_vec());
            Ok(true)
        })?;
        Ok(out)
    }

    /// Whether a put of `key` with a value of `value_len` bytes, in a [`Store::write_batch`],
    /// would be accepted by this database's rules (the size limits every kind shares, and the
    /// kind's own: a fixed-length database's width and ids). Writes nothing; an import checks
    /// every line with it before it writes the first record.
    fn check_put(&self, key: &[u8], value_len: usize) -> Result<()> {
        check_sizes(key, value_len)
    }

    /// Whether this database keeps several values of one key (`put_dup`; the B+ tree).
    fn allows_dups(&self) -> bool {
        false
    }

    /// Add `value` as one more value of `key`: after the values it has (`front == false`,
    /// Tokyo Cabinet's `putdup`), or before them (`front == true`, `putdupback`, whose value
    /// then is the one `get` returns). With duplicates, `get` and the put variants read and
    /// replace the first value, `remove` removes the first, `count` counts every value and a
    /// cursor visits each. [`Error::Unsupported`] where [`Store::allows_dups`] is false.
    fn put_dup(&self, _key: &[u8], _value: &[u8], _front: bool) -> Result<()> {
        Err(Error::Unsupported(
            "duplicate keys (use a B+ tree, PATH.kb)",
        ))
    }

    /// Every value of `key`, first to last (empty when it has none). On a database without
    /// duplicates, the one value there is.
    fn get_all(&self, key: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(self.get(key)?.map(|r| r.value).into_iter().collect())
    }

    /// Remove every value of `key`; how many there were.
    fn remove_all(&self, key: &[u8]) -> Result<u64> {
        Ok(u64::from(self.out(key)?))
    }

    /// How many values `key` has (0 when none).
    fn value_count(&self, key: &[u8]) -> Result<u64> {
        Ok(u64::from(self.get(key)?.is_some()))
    }

    /// Call `f` with each live record whose key is in `range`, in key order (descending when
    /// `range.desc`), at most `range.max` of them, until `f` returns `Ok(false)` (ordered kinds
    /// only: [`Error::Unsupported`] on others). `f` must not call the store. Returns how many
    /// records `f` was shown. Built on the cursor, with its guarantees.
    fn for_each_in_range(&self, range: &KeyRange<'_>, f: &mut RecordVisitor<'_>) -> Result<u64> {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        if !self.kind().ordered() {
            return Err(Error::Unsupported("a key range on an unordered database"));
        }
        let mut shown = 0u64;
        if range.max == 0 {
            return Ok(0);
        }
        let mut cur = self.cursor()?;
        // Start at the bound the walk comes from; a record on an exclusive bound is skipped.
        let on = match (range.desc, range.from, range.to) {
            (false, Unbounded, _) => cur.first()?,
            (false, Included(k) | Excluded(k), _) => cur.jump(k)?,
            (true, _, Unbounded) => cur.last()?,
            (true, _, Included(k) | Excluded(k)) => cur.jump_back(k)?,
        };
        if !on {
            return Ok(0);
        }
        // Ascending: `next` reads each record once and moves past it; descending reads the
        // record, then steps back.
        loop {
            let got = if range.desc { cur.get()? } else { cur.next()? };
            let Some((k, r)) = got else { break };
            let on_start = match (range.desc, range.from, range.to) {
                (false, Excluded(f), _) => k.as_slice() == f,
                (true, _, Excluded(t)) => k.as_slice() == t,
                _ => false,
            };
            if !on_start {
                let inside = if range.desc {
                    range.above_from(&k)
                } else {
                    range.below_to(&k)
                };
                if !inside {
                    break;
                }
                shown += 1;
                if !f(&k, &r.value, r.meta)? || shown >= range.max as u64 {
                    break;
                }
            }
            if range.desc && !cur.step_back()? {
                break;
            }
        }
        Ok(shown)
    }

    /// Store unconditionally with no flags and no expiration.
    fn put(&self, key: &[u8], value: &[u8]) -> Result<Meta> {
        self.put_with(key, value, 0, 0)
    }

    /// Store unconditionally with flags and expiration.
    fn put_with(&self, key: &[u8], value: &[u8], flags: u32, expires: u64) -> Result<Meta> {
        check_sizes(key, value.len())?;
        let meta = self.accept(key, &mut |_| Decision::Put {
            value: Value::Lent(value),
            flags,
            expires,
        })?;
        meta.ok_or_else(|| Error::Corrupt("put produced no record".into()))
    }

    /// Store only if the key is absent (Tyrant putkeep, memcached add).
    fn putkeep(&self, key: &[u8], value: &[u8], flags: u32, expires: u64) -> Result<Outcome> {
        check_sizes(key, value.len())?;
        let mut existed = false;
        let meta = self.accept(key, &mut |cur| {
            if cur.is_some() {
                existed = true;
                Decision::Keep
            } else {
                Decision::Put {
                    value: Value::Lent(value),
                    flags,
                    expires,
                }
            }
        })?;
        Ok(stored_or(existed, Outcome::Exists, meta))
    }

    /// Store only if the key is present (memcached replace).
    fn replace(&self, key: &[u8], value: &[u8], flags: u32, expires: u64) -> Result<Outcome> {
        check_sizes(key, value.len())?;
        let mut missing = false;
        let meta = self.accept(key, &mut |cur| match cur {
            None => {
                missing = true;
                Decision::Keep
            }
            Some(_) => Decision::Put {
                value: Value::Lent(value),
                flags,
                expires,
            },
        })?;
        Ok(stored_or(missing, Outcome::NotFound, meta))
    }

    /// Append to the value, creating the record when absent (Tyrant putcat). Flags and
    /// expiration of an existing record are kept.
    fn putcat(&self, key: &[u8], value: &[u8]) -> Result<Meta> {
        concat_creating(self, key, value, false)
    }

    /// Prepend to the value, creating the record when absent.
    fn prepend(&self, key: &[u8], value: &[u8]) -> Result<Meta> {
        concat_creating(self, key, value, true)
    }

    /// Tokyo Tyrant's putshl: append `value` to the record and keep only its last `width`
    /// bytes. An absent record is created with the whole of `value`, not cut to `width`
    /// (Tyrant stores it through `tcadbputproc`, whose shift runs only on an existing record),
    /// with no flags and no expiry; an existing record keeps its flags and expiry.
    fn putshl(&self, key: &[u8], value: &[u8], width: usize) -> Result<Meta> {
        check_sizes(key, value.len())?;
        let meta = self.accept(key, &mut |cur| match cur {
            None => Decision::Put {
                value: Value::Lent(value),
                flags: 0,
                expires: 0,
            },
            Some(c) => {
                // The last `keep` bytes of old ++ new.
                let keep = (c.value.len() + value.len()).min(width);
                let from_new = keep.min(value.len());
                let from_old = keep - from_new;
                let mut v = Vec::with_capacity(keep);
                v.extend_from_slice(&c.value[c.value.len() - from_old..]);
                v.extend_from_slice(&value[value.len() - from_new..]);
                Decision::Put {
                    value: Value::Made(v),
                    flags: c.meta.flags,
                    expires: c.meta.expires,
                }
            }
        })?;
        meta.ok_or_else(|| Error::Corrupt("putshl produced no record".into()))
    }

    /// Store only if the record's version is still `version`.
    fn cas(
        &self,
        key: &[u8],
        version: u64,
        value: &[u8],
        flags: u32,
        expires: u64,
    ) -> Result<Outcome> {
        check_sizes(key, value.len())?;
        let mut result = None;
        let meta = self.accept(key, &mut |cur| match cur {
            None => {
                result = Some(Outcome::NotFound);
                Decision::Keep
            }
            Some(c) if c.meta.version != version => {
                result = Some(Outcome::VersionMismatch);
                Decision::Keep
            }
            Some(_) => Decision::Put {
                value: Value::Lent(value),
                flags,
                expires,
            },
        })?;
        Ok(match (result, meta) {
            (Some(r), _) => r,
            (None, Some(m)) => Outcome::Stored(m),
            (None, None) => Outcome::NotFound,
        })
    }

    /// Delete; `true` when a live record was removed.
    fn out(&self, key: &[u8]) -> Result<bool> {
        let mut found = false;
        self.accept(key, &mut |cur| {
            if cur.is_some() {
                found = true;
                Decision::Remove
            } else {
                Decision::Keep
            }
        })?;
        Ok(found)
    }

    /// Delete only if the record's version is still `version` (memcached delete with cas).
    fn out_if(&self, key: &[u8], version: u64) -> Result<Outcome> {
        let mut result = Outcome::NotFound;
        self.accept(key, &mut |cur| match cur {
            None => Decision::Keep,
            Some(c) if version != 0 && c.meta.version != version => {
                result = Outcome::VersionMismatch;
                Decision::Keep
            }
            Some(_) => {
                result = Outcome::Deleted;
                Decision::Remove
            }
        })?;
        Ok(result)
    }

    /// Size of the value, or `None` when absent.
    fn vsiz(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.get(key)?.map(|r| r.value.len()))
    }

    /// Set a new expiration time on a live record; `None` when absent.
    fn touch(&self, key: &[u8], expires: u64) -> Result<Option<Meta>> {
        let mut found = false;
        let meta = self.accept(key, &mut |cur| {
            if cur.is_some() {
                found = true;
                Decision::Touch { expires }
            } else {
                Decision::Keep
            }
        })?;
        Ok(if found { meta } else { None })
    }

    /// Read many keys at once.
    fn get_multi(&self, keys: &[&[u8]]) -> Result<Vec<Option<Record>>> {
        keys.iter().map(|k| self.get(k)).collect()
    }

    /// Tokyo Cabinet's addint: add `delta` to a record holding one native (little-endian)
    /// 4-byte int, creating it with `delta` when absent; the sum wraps around as C's int does.
    /// [`Error::NotNumeric`] when the record has another size (left unchanged). Flags and
    /// expiry of an existing record are kept. (Tyrant answers a sum of `i32::MIN`, its failure
    /// value, as a failure.)
    fn addint(&self, key: &[u8], delta: i32) -> Result<i32> {
        let mut result = Err(Error::NotNumeric);
        self.accept(key, &mut |cur| {
            let (n, flags, expires) = match cur {
                None => (delta, 0, 0),
                Some(c) => match <[u8; 4]>::try_from(c.value) {
                    Ok(b) => (
                        i32::from_le_bytes(b).wrapping_add(delta),
                        c.meta.flags,
                        c.meta.expires,
                    ),
                    Err(_) => return Decision::Keep,
                },
            };
            result = Ok(n);
            Decision::Put {
                value: Value::copied(&n.to_le_bytes()),
                flags,
                expires,
            }
        })?;
        result
    }

    /// Tokyo Cabinet's adddouble: add `delta` to a record holding one native (little-endian)
    /// 8-byte double, creating it with `delta` when absent. [`Error::NotNumeric`] when the
    /// record has another size (left unchanged). The sum is stored and returned whatever it
    /// is, an infinity or NaN included, as Tokyo Cabinet does (Tyrant answers NaN as a
    /// failure). Flags and expiry of an existing record are kept.
    fn adddouble(&self, key: &[u8], delta: f64) -> Result<f64> {
        let mut result = Err(Error::NotNumeric);
        self.accept(key, &mut |cur| {
            let (n, flags, expires) = match cur {
                None => (delta, 0, 0),
                Some(c) => match <[u8; 8]>::try_from(c.value) {
                    Ok(b) => (f64::from_le_bytes(b) + delta, c.meta.flags, c.meta.expires),
                    Err(_) => return Decision::Keep,
                },
            };
            result = Ok(n);
            Decision::Put {
                value: Value::copied(&n.to_le_bytes()),
                flags,
                expires,
            }
        })?;
        result
    }

    /// memcached's incr / decr: add `delta` to (or subtract it from) the number a live record
    /// holds in decimal text. `None` when absent; [`Error::NotNumeric`] when the value is not a
    /// number as memcached reads one ([`crate::numbers::memcached_number`]).
    fn incr_decimal(&self, key: &[u8], delta: u64, decr: bool) -> Result<Option<(u64, Meta)>> {
        match self.incr_decimal_if(key, delta, decr, 0)? {
            Counted::Done(n, m) => Ok(Some((n, m))),
            Counted::NotFound | Counted::VersionMismatch => Ok(None),
        }
    }

    /// memcached's incr / decr, as its text, binary and meta (`ma`) commands do them: the value
    /// read as [`crate::numbers::memcached_number`], incr wrapping around at 2^64, decr
    /// stopping at 0, and a result shorter than the value it replaces padded with spaces to the
    /// old length (memcached rewrites the item in place; a get shows the padding). Flags and
    /// expiry are kept; `cas` (not 0) must be the record's version. An absent record is not
    /// created (memcached's binary protocol and `ma … N` create it themselves).
    /// [`Error::NotNumeric`] when the value is not such a number (left unchanged).
    fn incr_decimal_if(&self, key: &[u8], delta: u64, decr: bool, cas: u64) -> Result<Counted> {
        let mut result = Counted::NotFound;
        let mut not_number = false;
        let meta = self.accept(key, &mut |cur| {
            not_number = false;
            let Some(c) = cur else {
                result = Counted::NotFound;
                return Decision::Keep;
            };
            if cas != 0 && cas != c.meta.version {
                result = Counted::VersionMismatch;
                return Decision::Keep;
            }
            let Some(n) = crate::numbers::memcached_number(c.value) else {
                not_number = true;
                return Decision::Keep;
            };
            let n = if decr {
                n.saturating_sub(delta)
            } else {
                n.wrapping_add(delta)
            };
            result = Counted::Done(n, c.meta);
            Decision::Put {
                value: crate::numbers::memcached_counter(n, c.value.len()),
                flags: c.meta.flags,
                expires: c.meta.expires,
            }
        })?;
        if not_number {
            return Err(Error::NotNumeric);
        }
        Ok(match (result, meta) {
            (Counted::Done(n, _), Some(m)) => Counted::Done(n, m),
            (Counted::Done(..), None) => Counted::NotFound,
            (other, _) => other,
        })
    }

    /// memcached's append / prepend: add `data` at the end (`front`: the front) of a live
    /// record, keeping its flags and expiry. An absent record is not created
    /// ([`Outcome::NotFound`]); `cas` (not 0) must be the record's version
    /// ([`Outcome::VersionMismatch`]); `fits(flags, len)` says whether a value of `len` bytes
    /// with the record's flags is within the caller's limit (memcached's item size, which
    /// counts the flags), and [`Outcome::TooLarge`] when it is not (or when `len` is over
    /// [`MAX_VALUE_LEN`]).
    fn concat_if(
        &self,
        key: &[u8],
        data: &[u8],
        front: bool,
        cas: u64,
        fits: &dyn Fn(u32, usize) -> bool,
    ) -> Result<Outcome> {
        let mut result = Outcome::NotFound;
        let meta = self.accept(key, &mut |cur| {
            let Some(c) = cur else {
                result = Outcome::NotFound;
                return Decision::Keep;
            };
            if cas != 0 && c.meta.version != cas {
                result = Outcome::VersionMismatch;
                return Decision::Keep;
            }
            let len = c.value.len() + data.len();
            if len > MAX_VALUE_LEN || !fits(c.meta.flags, len) {
                result = Outcome::TooLarge;
                return Decision::Keep;
            }
            result = Outcome::Stored(c.meta);
            Decision::Put {
                value: Value::Made(joined(c.value, data, front)),
                flags: c.meta.flags,
                expires: c.meta.expires,
            }
        })?;
        Ok(match (result, meta) {
            (Outcome::Stored(_), Some(m)) => Outcome::Stored(m),
            (Outcome::Stored(_), None) => Outcome::NotFound,
            (r, _) => r,
        })
    }

    /// Kyoto Cabinet's append: add `value` at the end of the record, creating it when absent.
    /// The record takes `expires` (Kyoto Tycoon's `xt`, 0: never) and keeps its flags.
    /// [`Error::TooLarge`] when the result would be over [`MAX_VALUE_LEN`].
    fn append_with(&self, key: &[u8], value: &[u8], expires: u64) -> Result<Meta> {
        check_sizes(key, value.len())?;
        let mut too_large = None;
        let meta = self.accept(key, &mut |cur| match cur {
            None => Decision::Put {
                value: Value::Lent(value),
                flags: 0,
                expires,
            },
            Some(c) => {
                let len = c.value.len() + value.len();
                if len > MAX_VALUE_LEN {
                    too_large = Some(len);
                    return Decision::Keep;
                }
                Decision::Put {
                    value: Value::Made(joined(c.value, value, false)),
                    flags: c.meta.flags,
                    expires,
                }
            }
        })?;
        if let Some(len) = too_large {
            return Err(Error::TooLarge(format!("appended value of {len} bytes")));
        }
        meta.ok_or_else(|| Error::Corrupt("append produced no record".into()))
    }

    /// Kyoto Cabinet's increment (`kcdb.h`, 0.9.56): add `num` to a record holding an 8-byte
    /// big-endian integer (the sum wraps around). An absent record is created with
    /// `orig + num`; `orig` is `i64::MIN`: an absent record is a failure; `i64::MAX`: the
    /// record is set to `num` whatever it holds. Adding 0 to an existing record reads it
    /// without writing. The record written takes `expires` (0: never) and keeps its flags.
    /// The new number; `None` when the record is absent with `orig` `i64::MIN`;
    /// [`Error::NotNumeric`] when it is not 8 bytes (left unchanged).
    fn increment(&self, key: &[u8], num: i64, orig: i64, expires: u64) -> Result<Option<i64>> {
        let mut result = None;
        let mut not_number = false;
        self.accept(key, &mut |cur| {
            result = None;
            not_number = false;
            let (n, flags) = match cur {
                Some(c) => {
                    let Ok(b) = <[u8; 8]>::try_from(c.value) else {
                        not_number = true;
                        return Decision::Keep;
                    };
                    if orig == i64::MAX {
                        (num, c.meta.flags)
                    } else {
                        let old = i64::from_be_bytes(b);
                        if num == 0 {
                            result = Some(old);
                            return Decision::Keep;
                        }
                        (num.wrapping_add(old), c.meta.flags)
                    }
                }
                None if orig == i64::MIN => return Decision::Keep,
                None if orig == i64::MAX => (num, 0),
                None => (num.wrapping_add(orig), 0),
            };
            result = Some(n);
            Decision::Put {
                value: Value::copied(&n.to_be_bytes()),
                flags,
                expires,
            }
        })?;
        if not_number {
            return Err(Error::NotNumeric);
        }
        Ok(result)
    }

    /// Kyoto Cabinet's increment_double (`kcdb.h`, 0.9.56): add `num` to a record holding
    /// Kyoto Cabinet's 16-byte fixed-point decimal ([`crate::numbers::kc_fixed_point`]).
    /// `orig` as [`Store::increment`]'s, with negative infinity (or NaN) for failure on an
    /// absent record and positive infinity for "set to `num`". A record holding an infinity
    /// stays so; adding 0 reads without writing; adding an infinity stores it. The record
    /// written takes `expires` and keeps its flags. `None` when the record holds Kyoto
    /// Cabinet's NaN, or is absent with a failing `orig`, or when `num` is NaN;
    /// [`Error::NotNumeric`] when the record is not 16 bytes (left unchanged).
    fn increment_double(
        &self,
        key: &[u8],
        num: f64,
        orig: f64,
        expires: u64,
    ) -> Result<Option<f64>> {
        use crate::numbers::{kc_fixed_point, kc_join_double, kc_split_double, KC_DEC_UNIT};
        let mut result = None;
        let mut not_number = false;
        self.accept(key, &mut |cur| {
            result = None;
            not_number = false;
            match cur {
                Some(c) => {
                    let Some((mut integ, mut fract)) = crate::numbers::kc_read_fixed_point(c.value)
                    else {
                        not_number = true;
                        return Decision::Keep;
                    };
                    if orig == f64::INFINITY {
                        (integ, fract) = (0, 0);
                    }
                    if integ == i64::MIN && fract == i64::MIN {
                        return Decision::Keep;
                    }
                    if integ == i64::MAX {
                        result = Some(f64::INFINITY);
                        return Decision::Keep;
                    }
                    if integ == i64::MIN {
                        result = Some(f64::NEG_INFINITY);
                        return Decision::Keep;
                    }
                    if num == 0.0 && orig != f64::INFINITY {
                        result = Some(kc_join_double(integ, fract));
                        return Decision::Keep;
                    }
                    let Some((di, df)) = kc_split_double(num) else {
                        return Decision::Keep;
                    };
                    let value = if num.is_infinite() {
                        result = Some(num);
                        kc_fixed_point(di, 0)
                    } else {
                        integ = integ.wrapping_add(di);
                        fract = fract.wrapping_add(df);
                        if fract >= KC_DEC_UNIT {
                            integ = integ.wrapping_add(1);
                            fract -= KC_DEC_UNIT;
                        }
                        result = Some(kc_join_double(integ, fract));
                        kc_fixed_point(integ, fract)
                    };
                    Decision::Put {
                        value: Value::copied(&value),
                        flags: c.meta.flags,
                        expires,
                    }
                }
                None => {
                    if orig.is_nan() || orig == f64::NEG_INFINITY {
                        return Decision::Keep;
                    }
                    let n = if orig.is_finite() { num + orig } else { num };
                    let Some((integ, fract)) = kc_split_double(n) else {
                        return Decision::Keep;
                    };
                    result = Some(n);
                    Decision::Put {
                        value: Value::copied(&kc_fixed_point(integ, fract)),
                        flags: 0,
                        expires,
                    }
                }
            }
        })?;
        if not_number {
            return Err(Error::NotNumeric);
        }
        Ok(result)
    }

    /// Kyoto Cabinet's cas: compare the record's value with `old` (`None`: the record must be
    /// absent) and, when equal, store `new` (taking `expires`, with no flags) or, when `new`
    /// is `None`, remove the record. Whether the values matched.
    fn cas_value(
        &self,
        key: &[u8],
        old: Option<&[u8]>,
        new: Option<&[u8]>,
        expires: u64,
    ) -> Result<bool> {
        if let Some(n) = new {
            check_sizes(key, n.len())?;
        }
        let mut ok = false;
        self.accept(key, &mut |cur| {
            ok = match cur {
                Some(c) => old == Some(c.value),
                None => old.is_none(),
            };
            match (ok, cur, new) {
                (false, ..) => Decision::Keep,
                (true, Some(_), None) => Decision::Remove,
                (true, None, None) => Decision::Keep,
                (true, _, Some(n)) => Decision::Put {
                    value: Value::Lent(n),
                    flags: 0,
                    expires,
                },
            }
        })?;
        Ok(ok)
    }

    /// Kyoto Cabinet's seize: the live record of `key`, removed in the same step.
    fn seize(&self, key: &[u8]) -> Result<Option<Record>> {
        let mut taken = None;
        self.accept(key, &mut |cur| match cur {
            Some(c) => {
                taken = Some(Record {
                    value: c.value.to_vec(),
                    meta: c.meta,
                });
                Decision::Remove
            }
            None => Decision::Keep,
        })?;
        Ok(taken)
    }
}

/// What [`Store::incr_decimal_if`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    /// The new number, and the record's new metadata.
    Done(u64, Meta),
    NotFound,
    /// The record's version was not the one given.
    VersionMismatch,
}

/// Append (`front`: prepend) `value` to the record of `key`, creating it when absent (Tokyo
/// Cabinet's putcat); the joined record keeps its flags and expiry. [`Error::TooLarge`] when
/// the result would be over [`MAX_VALUE_LEN`] (left unchanged). memcached's form, which never
/// creates, is [`Store::concat_if`].
fn concat_creating<S: Store + ?Sized>(
    store: &S,
    key: &[u8],
    value: &[u8],
    front: bool,
) -> Result<Meta> {
    let mut too_large = None;
    let meta = store.accept(key, &mut |cur| match cur {
        None => Decision::Put {
            value: Value::Lent(value),
            flags: 0,
            expires: 0,
        },
        Some(c) => {
            let len = c.value.len() + value.len();
            if len > MAX_VALUE_LEN {
                too_large = Some(len);
                return Decision::Keep;
            }
            Decision::Put {
                value: Value::Made(joined(c.value, value, front)),
                flags: c.meta.flags,
                expires: c.meta.expires,
            }
        }
    })?;
    if let Some(len) = too_large {
        return Err(Error::TooLarge(format!(
            "concatenated value of {len} bytes"
        )));
    }
    meta.ok_or_else(|| Error::Corrupt("a concatenation produced no record".into()))
}

fn stored_or(failed: bool, failure: Outcome, meta: Option<Meta>) -> Outcome {
    match (failed, meta) {
        (false, Some(m)) => Outcome::Stored(m),
        _ => failure,
    }
}

/// `old` with `data` appended (`front`: prepended), in a new buffer.
fn joined(old: &[u8], data: &[u8], front: bool) -> Vec<u8> {
    let mut v = Vec::with_capacity(old.len() + data.len());
    let (a, b) = if front { (data, old) } else { (old, data) };
    v.extend_from_slice(a);
    v.extend_from_slice(b);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_short_ones_inline() {
        for n in [0u64, 7, 10, 12345, u64::MAX] {
            let v = Value::decimal(n);
            assert_eq!(&*v, n.to_string().as_bytes());
            assert!(matches!(v, Value::Short { .. }), "{n}");
        }
        let long = [b'x'; SHORT_VALUE + 1];
        assert_eq!(Value::copied(&long), Value::Made(long.to_vec()));
        assert_eq!(&*Value::copied(&long[..SHORT_VALUE]), &long[..SHORT_VALUE]);
        assert!(matches!(Value::copied(b""), Value::Short { len: 0, .. }));
        assert_eq!(&*Value::from(&b"lent"[..]), b"lent");
        assert_eq!(&*Value::from(b"made".to_vec()), b"made");
    }

    #[test]
    fn the_coarse_clock_agrees_with_the_system_clock_to_the_second() {
        for _ in 0..1000 {
            let before = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            let t = now_secs();
            let after = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            // The coarse clock may trail by up to a timer tick: one second at a boundary.
            assert!(t + 1 >= before && t <= after, "{before} {t} {after}");
        }
    }
}
