//! The values the [`Store`](super::Store) interface takes and gives: records and their
//! metadata, a visitor's view and decision, outcomes, batches, kinds, ranges and reports, and
//! the limits and clock every kind shares.

use crate::error::{Error, Result};

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
    /// `.kt`: table database (records of named columns, secondary indexes).
    Table,
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

/// Longest keyspace name.
pub const MAX_KEYSPACE_NAME: usize = 255;

/// Validate a keyspace name: 1 to [`MAX_KEYSPACE_NAME`] bytes of UTF-8 (the empty name is the
/// database itself, not a keyspace).
pub fn check_keyspace_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_KEYSPACE_NAME {
        return Err(Error::InvalidParam(format!(
            "keyspace name of {} bytes: expected 1 to {MAX_KEYSPACE_NAME}",
            name.len()
        )));
    }
    Ok(())
}

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

/// The most a batch's records may take in an on-disk kind's log (headers counted at their
/// longest): as much as the largest single record. A batch is one record (a frame of
/// records), and reading any record back — a read, recovery, `check`, `repair` — holds it
/// whole in memory to verify its checksum, so a larger batch would raise what those need.
pub const MAX_BATCH_BYTES: usize = MAX_VALUE_LEN + MAX_KEY_LEN + (1 << 20);

/// Validate every operation of a batch (as [`check_sizes`]) and the size of the frame that
/// holds them, each record counted with `header_len` bytes of header; that size.
pub fn check_batch<'a>(
    ops: impl IntoIterator<Item = &'a BatchOp>,
    header_len: usize,
) -> Result<usize> {
    let mut frame = 0usize;
    for op in ops {
        let vlen = match op {
            BatchOp::Put { value, .. } => value.len(),
            BatchOp::Remove { .. } => 0,
        };
        check_sizes(op.key(), vlen)?;
        frame = frame.saturating_add(header_len + op.key().len() + vlen);
    }
    if frame > MAX_BATCH_BYTES {
        return Err(Error::TooLarge(format!(
            "a batch of {frame} bytes of records (limit {MAX_BATCH_BYTES}, as large as the \
             largest single record: split it)"
        )));
    }
    Ok(frame)
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
