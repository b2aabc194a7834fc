//! Byte layouts of the on-disk hash kind. docs/ARCHITECTURE.md draws the same layouts; the
//! constants here and the prose there must agree.
//!
//! Segment file `seg-NNNNNNNN.kd`:
//! ```text
//! 0   8  magic "KURASEG1"
//! 8   4  format version (u32 LE) = SEG_VERSION (SEG_VERSION_MIN.. are read)
//! 12  4  segment id (u32 LE)
//! 16  8  salt (u64 LE): seeds every record checksum of this segment
//! 24  2  lane (u16 LE): the log this segment belongs to
//! 26  2  lane count of the database (u16 LE)
//! 28  4  crc32c of bytes 0..28
//! 32  16 synced-length slot 0  (version 4 on)  [synced u64][n u32][crc32c u32]
//! 48  16 synced-length slot 1  (version 4 on)
//! 64  .. records, back to back (from 32 in versions 1 to 3)
//! ```
//! A slot's crc covers its first 12 bytes and then the header's crc (bytes 28..32), so a slot
//! is never taken from another file ([`synced_slot`], shared with the update log). After each
//! fdatasync of a segment's records, the log writes the length that sync covered into the slot
//! the last write did not use (`n` counts the writes), unsynced itself: the next fdatasync makes
//! it durable, and until then the other slot says less. So the larger length of a slot that
//! verifies never exceeds what is durable, and lags it by at most one sync. At recovery a bad
//! record below it is damage; past it, the first bad record ends the segment (a torn tail: a
//! write-back out of file order can leave a hole before intact records that were never
//! synced), whatever verifies after it. A segment of versions 1 to 3, or one neither of whose
//! slots verifies, records no synced length: a bad record followed by one that verifies is
//! damage there, wherever it is ([`SegLayout`]).
//! Record:
//! ```text
//! 0   4  crc32c (seeded with the segment salt) of every byte after this field
//! 4   1  bits: 0-1 type (0 put, 1 delete, 2 batch, 3 clear), 2 flags present,
//!           3 expires present, 4 version present, 5-6 compression code, 7 extension present
//! 5   ..  put:    varint klen, varint vlen (stored bytes), [varint raw_len if compressed],
//!                 varint seq, [u32 LE flags], [varint expires], [varint version],
//!                 [extension], key, value
//!         delete: varint klen, varint seq, [extension], key
//!         batch:  varint body_len, varint count, body = `count` complete put/delete records
//!                 (each sealed, with the segment's seed or in the B+ tree with [`inner_seed`])
//!         clear:  varint clear id, varint lanes, [extension] (a vanish writes one clear into
//!                 each of its lanes; recovery honours it only when all of them survived)
//! ```
//! The extension (bit 7) is one of two forms, told apart by its first byte:
//! ```text
//! varint dup                  (first byte not 0: a dup is never 0 where it is written)
//! 0x00, varint what,          what: bit 0 dup present, bit 1 keyspace present
//!       [varint dup], [varint keyspace]
//! ```
//! The first form is the whole of versions 1 and 2 (bit 7 was "dup present"), so a record
//! parses the same whatever its segment's version: no reader needs to know it. A record of
//! keyspace 0 (the database itself) carries no keyspace and costs no byte more than before;
//! the second form appears only in version-3 segments.
//! `seq` orders the writes of one shard: every write of a key takes the next number of its
//! shard (under the shard's lock), so whatever log (lane) a record landed in, recovery applies
//! a key's records in the order they were made. It is also the record's version, unless the
//! record carries a version of its own: a touch rewrites a record with a new seq (for the
//! order) but keeps the version it had (a touch changes no cas, as in memcached). Compaction
//! copies a record with its seq and version, so moving a record never changes its version.
//!
//! `dup` (the B+ tree only) names one of several values of a key: a put sets that value, a
//! delete removes it; absent, it is 0 (the value of a key without duplicates).
//!
//! `keyspace` (the B+ tree and the hash) names the keyspace a record belongs to: 0 the database
//! itself, [`KS_CATALOG`] the catalog (a put per keyspace: key its name, value its id and
//! parameters), [`KS_FIRST`] and up the keyspaces made by `Store::keyspace`. A batch frame's
//! records may name different keyspaces: the frame is checked as one, so a batch across
//! keyspaces is applied whole or not at all.

use crate::config::Compression;
use crate::error::{Error, Result};

pub const SEG_MAGIC: &[u8; 8] = b"KURASEG1";
/// Written into new segments. Version 2 added the put record's own version (bit 4), version 3
/// the extension's keyspace form (bit 7), version 4 the synced-length slots (records start at
/// [`SEG_DATA`]); this build reads versions 1 to 4, so older databases open unchanged, while an
/// older build refuses a newer segment with a clear error instead of misreading its records.
pub const SEG_VERSION: u32 = 4;
/// The oldest segment format this build reads.
pub const SEG_VERSION_MIN: u32 = 1;
/// The fixed part of a segment header (every version): no record starts before it.
pub const SEG_HEADER_LEN: usize = 32;
/// The first version with synced-length slots.
pub const SEG_VERSION_SLOTS: u32 = 4;
/// Where the two synced-length slots of a version-4 header are.
pub const SEG_SLOTS: [usize; 2] = [32, 48];
/// Where the records of a version-4 segment start: its whole header, slots included.
pub const SEG_DATA: usize = 64;

pub const T_PUT: u8 = 0;
pub const T_DELETE: u8 = 1;
pub const T_BATCH: u8 = 2;
pub const T_CLEAR: u8 = 3;

const B_FLAGS: u8 = 1 << 2;
const B_EXPIRES: u8 = 1 << 3;
const B_VERSION: u8 = 1 << 4;
const COMP_SHIFT: u8 = 5;
const B_EXT: u8 = 1 << 7;
const EXT_DUP: u64 = 1;
const EXT_KEYSPACE: u64 = 2;

/// The keyspace of the catalog (see the module documentation).
pub const KS_CATALOG: u64 = 1;
/// The first keyspace id `Store::keyspace` gives out.
pub const KS_FIRST: u64 = 2;

/// Longest possible record header: crc + bits + 6 varints of at most 10 bytes + flags + the
/// extension (a zero byte and three varints).
pub const MAX_HEADER_LEN: usize = 4 + 1 + 10 * 6 + 4 + 1 + 10 * 3;

/// What a segment header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegInfo {
    pub id: u32,
    pub salt: u64,
    pub lane: u16,
    pub lanes: u16,
}

/// Build a segment header, slots included: both say the header itself is synced (nothing
/// past it is known durable yet).
pub fn seg_header(i: &SegInfo) -> [u8; SEG_DATA] {
    let mut h = [0u8; SEG_DATA];
    h[0..8].copy_from_slice(SEG_MAGIC);
    h[8..12].copy_from_slice(&SEG_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&i.id.to_le_bytes());
    h[16..24].copy_from_slice(&i.salt.to_le_bytes());
    h[24..26].copy_from_slice(&i.lane.to_le_bytes());
    h[26..28].copy_from_slice(&i.lanes.to_le_bytes());
    let crc = crc32c::crc32c(&h[0..28]);
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    for (n, at) in SEG_SLOTS.into_iter().enumerate() {
        let s = synced_slot(&h, SEG_DATA as u64, n as u32);
        h[at..at + 16].copy_from_slice(&s);
    }
    h
}

/// A synced-length slot `[synced u64][n u32][crc32c u32]` of the file whose header starts
/// with `h` (its crc at bytes 28..32, which the slot's crc covers too). The segments' and the
/// update log's headers both carry two.
pub fn synced_slot(h: &[u8], synced: u64, n: u32) -> [u8; 16] {
    debug_assert!(h.len() >= 32);
    let mut s = [0u8; 16];
    s[0..8].copy_from_slice(&synced.to_le_bytes());
    s[8..12].copy_from_slice(&n.to_le_bytes());
    let mut c = [0u8; 16];
    c[0..12].copy_from_slice(&s[0..12]);
    c[12..16].copy_from_slice(&h[28..32]);
    s[12..16].copy_from_slice(&crc32c::crc32c(&c).to_le_bytes());
    s
}

/// The largest synced length of the two slots at `slots` of header `h` that verify, and the
/// largest write count among them (`None`: neither verifies).
pub fn read_slots(h: &[u8], slots: [usize; 2]) -> Option<(u64, u32)> {
    let mut best: Option<(u64, u32)> = None;
    for at in slots {
        let Some(s) = h.get(at..at + 16) else {
            continue;
        };
        let len = u64::from_le_bytes(s[0..8].try_into().unwrap_or_default());
        let n = u32::from_le_bytes(s[8..12].try_into().unwrap_or_default());
        if s == synced_slot(h, len, n) {
            best = Some(best.map_or((len, n), |(l, m)| (l.max(len), m.max(n))));
        }
    }
    best
}

/// Where a segment's records start and what its header records as synced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegLayout {
    /// The offset of its first record.
    pub data: u64,
    /// Whether its header has synced-length slots (version 4 on).
    pub slots: bool,
    /// The synced length of its slots (`None`: no slots, or neither verifies).
    pub synced: Option<u64>,
    /// The slot writes so far (the next goes to slot `(n + 1) % 2`).
    pub slot_writes: u32,
}

impl SegLayout {
    /// A segment of the formats before the slots.
    pub const PLAIN: SegLayout = SegLayout {
        data: SEG_HEADER_LEN as u64,
        slots: false,
        synced: None,
        slot_writes: 0,
    };
}

/// The layout of a segment whose first bytes (up to [`SEG_DATA`] of them) are `h`, its header
/// verified by [`parse_seg_header`] (a header that does not verify: [`SegLayout::PLAIN`]).
pub fn seg_layout(h: &[u8]) -> SegLayout {
    if parse_seg_header(h).is_err() {
        return SegLayout::PLAIN;
    }
    let ver = u32::from_le_bytes(h[8..12].try_into().unwrap_or_default());
    if ver < SEG_VERSION_SLOTS {
        return SegLayout::PLAIN;
    }
    let slots = read_slots(h, SEG_SLOTS);
    SegLayout {
        data: SEG_DATA as u64,
        slots: true,
        synced: slots.map(|s| s.0),
        slot_writes: slots.map_or(0, |s| s.1),
    }
}

/// How many bytes of header a segment whose first bytes are `h` has (its fixed part verified):
/// [`SEG_DATA`] from version 4 on, else [`SEG_HEADER_LEN`].
pub fn seg_header_len(h: &[u8]) -> usize {
    match h.get(8..12) {
        Some(v) if u32::from_le_bytes(v.try_into().unwrap_or_default()) >= SEG_VERSION_SLOTS => {
            SEG_DATA
        }
        _ => SEG_HEADER_LEN,
    }
}

/// Parse a segment header.
pub fn parse_seg_header(h: &[u8]) -> Result<SegInfo> {
    if h.len() < SEG_HEADER_LEN || &h[0..8] != SEG_MAGIC {
        return Err(Error::Corrupt("segment header magic missing".into()));
    }
    let crc = u32::from_le_bytes(h[28..32].try_into().unwrap_or_default());
    if crc != crc32c::crc32c(&h[0..28]) {
        return Err(Error::Corrupt("segment header checksum mismatch".into()));
    }
    let ver = u32::from_le_bytes(h[8..12].try_into().unwrap_or_default());
    if !(SEG_VERSION_MIN..=SEG_VERSION).contains(&ver) {
        return Err(Error::Corrupt(format!(
            "segment format version {ver} is not supported (this build reads \
             {SEG_VERSION_MIN} to {SEG_VERSION})"
        )));
    }
    let info = SegInfo {
        id: u32::from_le_bytes(h[12..16].try_into().unwrap_or_default()),
        salt: u64::from_le_bytes(h[16..24].try_into().unwrap_or_default()),
        lane: u16::from_le_bytes(h[24..26].try_into().unwrap_or_default()),
        lanes: u16::from_le_bytes(h[26..28].try_into().unwrap_or_default()),
    };
    if info.lanes == 0 || info.lane >= info.lanes {
        return Err(Error::Corrupt(
            "segment header names an impossible lane".into(),
        ));
    }
    Ok(info)
}

/// The checksum seed of a segment.
#[inline]
pub fn seed(salt: u64) -> u32 {
    (salt ^ (salt >> 32)) as u32
}

pub fn put_varint(out: &mut impl Sink, mut v: u64) {
    while v >= 0x80 {
        out.put(&[(v as u8) | 0x80]);
        v >>= 7;
    }
    out.put(&[v as u8]);
}

/// Where encoders write: a `Vec`, or a [`HeaderBuf`] on the stack.
pub trait Sink {
    fn put(&mut self, b: &[u8]);
}

impl Sink for Vec<u8> {
    #[inline]
    fn put(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
}

/// A record header built on the stack (no allocation on the write path); the key and value
/// follow it as separate parts.
pub struct HeaderBuf {
    b: [u8; MAX_HEADER_LEN],
    n: usize,
}

impl HeaderBuf {
    /// The header of a put record of a `klen`-byte key and `vlen` stored value bytes.
    pub fn put(klen: usize, vlen: usize, f: &PutFields) -> HeaderBuf {
        let mut h = HeaderBuf {
            b: [0; MAX_HEADER_LEN],
            n: 0,
        };
        encode_put_header(&mut h, klen, vlen, f);
        h
    }

    /// The header of a put record in keyspace `ks`.
    pub fn put_in(ks: u64, klen: usize, vlen: usize, f: &PutFields) -> HeaderBuf {
        let mut h = HeaderBuf {
            b: [0; MAX_HEADER_LEN],
            n: 0,
        };
        encode_put_header_in(&mut h, ks, klen, vlen, f);
        h
    }

    /// The header of a delete record of a `klen`-byte key.
    pub fn delete(klen: usize, seq: u64) -> HeaderBuf {
        HeaderBuf::delete_dup(klen, seq, 0)
    }

    /// The header of a delete record of value `dup` of a `klen`-byte key.
    pub fn delete_dup(klen: usize, seq: u64, dup: u64) -> HeaderBuf {
        HeaderBuf::delete_in(0, klen, seq, dup)
    }

    /// The header of a delete record of value `dup` of a `klen`-byte key in keyspace `ks`.
    pub fn delete_in(ks: u64, klen: usize, seq: u64, dup: u64) -> HeaderBuf {
        let mut h = HeaderBuf {
            b: [0; MAX_HEADER_LEN],
            n: 0,
        };
        encode_delete_header(&mut h, ks, klen, seq, dup);
        h
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.b[..self.n]
    }
}

impl Sink for HeaderBuf {
    #[inline]
    fn put(&mut self, b: &[u8]) {
        // A put header is at most MAX_HEADER_LEN bytes by construction (six varints and the
        // flags), so this never runs past the array.
        self.b[self.n..self.n + b.len()].copy_from_slice(b);
        self.n += b.len();
    }
}

/// Decode a varint at `*pos`, advancing it; `None` when truncated or longer than 10 bytes.
#[inline]
pub fn get_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= ((b & 0x7f) as u64) << (7 * i);
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

/// The fields of a put record besides key and value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PutFields {
    pub flags: u32,
    pub expires: u64,
    /// Position of this write in its shard's sequence (the record's version).
    pub seq: u64,
    pub compression: u8,
    /// Uncompressed length when compressed.
    pub raw_len: u64,
    /// The record's version when it is not `seq` (0: it is `seq`).
    pub version: u64,
    /// Which value of the key (B+ tree duplicates; 0 otherwise).
    pub dup: u64,
}

impl PutFields {
    /// The record's version: its own, or its seq.
    pub fn version(&self) -> u64 {
        if self.version != 0 {
            self.version
        } else {
            self.seq
        }
    }
}

/// Append a put record (crc left zero: see [`seal`]). Returns the record length.
pub fn encode_put(out: &mut Vec<u8>, key: &[u8], value: &[u8], f: &PutFields) -> usize {
    encode_put_in(out, 0, key, value, f)
}

/// Append a put record in keyspace `ks` (crc left zero). Returns the record length.
pub fn encode_put_in(out: &mut Vec<u8>, ks: u64, key: &[u8], value: &[u8], f: &PutFields) -> usize {
    let start = out.len();
    encode_put_header_in(out, ks, key.len(), value.len(), f);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out.len() - start
}

/// Append only the header of a put record (through the fields, before the key).
pub fn encode_put_header(out: &mut impl Sink, klen: usize, vlen: usize, f: &PutFields) {
    encode_put_header_in(out, 0, klen, vlen, f)
}

/// The extension of a record: none, the dup alone, or the long form.
fn put_ext(out: &mut impl Sink, dup: u64, ks: u64) {
    if ks == 0 {
        if dup != 0 {
            put_varint(out, dup);
        }
        return;
    }
    out.put(&[0]);
    let what = EXT_KEYSPACE | if dup != 0 { EXT_DUP } else { 0 };
    put_varint(out, what);
    if dup != 0 {
        put_varint(out, dup);
    }
    put_varint(out, ks);
}

/// Parse an extension at `*pos`: (dup, keyspace).
fn get_ext(buf: &[u8], pos: &mut usize) -> Option<(u64, u64)> {
    if *buf.get(*pos)? != 0 {
        return Some((get_varint(buf, pos)?, 0));
    }
    *pos += 1;
    let what = get_varint(buf, pos)?;
    if what & !(EXT_DUP | EXT_KEYSPACE) != 0 {
        return None;
    }
    let dup = if what & EXT_DUP != 0 {
        get_varint(buf, pos).filter(|&d| d != 0)?
    } else {
        0
    };
    let ks = if what & EXT_KEYSPACE != 0 {
        get_varint(buf, pos).filter(|&k| k != 0)?
    } else {
        0
    };
    Some((dup, ks))
}

/// Append only the header of a put record in keyspace `ks`.
pub fn encode_put_header_in(out: &mut impl Sink, ks: u64, klen: usize, vlen: usize, f: &PutFields) {
    let mut bits = T_PUT | (f.compression << COMP_SHIFT);
    if f.flags != 0 {
        bits |= B_FLAGS;
    }
    if f.expires != 0 {
        bits |= B_EXPIRES;
    }
    if f.version != 0 {
        bits |= B_VERSION;
    }
    if f.dup != 0 || ks != 0 {
        bits |= B_EXT;
    }
    out.put(&[0, 0, 0, 0, bits]);
    put_varint(out, klen as u64);
    put_varint(out, vlen as u64);
    if f.compression != 0 {
        put_varint(out, f.raw_len);
    }
    put_varint(out, f.seq);
    if f.flags != 0 {
        out.put(&f.flags.to_le_bytes());
    }
    if f.expires != 0 {
        put_varint(out, f.expires);
    }
    if f.version != 0 {
        put_varint(out, f.version);
    }
    if bits & B_EXT != 0 {
        put_ext(out, f.dup, ks);
    }
}

pub fn encode_delete(out: &mut Vec<u8>, key: &[u8], seq: u64) -> usize {
    encode_delete_dup(out, key, seq, 0)
}

/// A delete record of value `dup` of `key`.
pub fn encode_delete_dup(out: &mut Vec<u8>, key: &[u8], seq: u64, dup: u64) -> usize {
    encode_delete_in(out, 0, key, seq, dup)
}

/// A delete record of value `dup` of `key` in keyspace `ks`.
pub fn encode_delete_in(out: &mut Vec<u8>, ks: u64, key: &[u8], seq: u64, dup: u64) -> usize {
    let start = out.len();
    encode_delete_header(out, ks, key.len(), seq, dup);
    out.extend_from_slice(key);
    out.len() - start
}

/// The header of a delete record (crc left zero), before its key.
fn encode_delete_header(out: &mut impl Sink, ks: u64, klen: usize, seq: u64, dup: u64) {
    let ext = dup != 0 || ks != 0;
    let bits = if ext { T_DELETE | B_EXT } else { T_DELETE };
    out.put(&[0, 0, 0, 0, bits]);
    put_varint(out, klen as u64);
    put_varint(out, seq);
    if ext {
        put_ext(out, dup, ks);
    }
}

pub fn encode_clear(out: &mut Vec<u8>, id: u64, lanes: usize) -> usize {
    encode_clear_in(out, 0, id, lanes)
}

/// A clear record of keyspace `ks` (it empties that keyspace only).
pub fn encode_clear_in(out: &mut Vec<u8>, ks: u64, id: u64, lanes: usize) -> usize {
    let start = out.len();
    let bits = if ks != 0 { T_CLEAR | B_EXT } else { T_CLEAR };
    out.extend_from_slice(&[0, 0, 0, 0, bits]);
    put_varint(out, id);
    put_varint(out, lanes as u64);
    if ks != 0 {
        put_ext(out, 0, ks);
    }
    out.len() - start
}

/// Header of a batch frame whose body (complete records) follows.
pub fn encode_batch_header(out: &mut Vec<u8>, body_len: usize, count: usize) {
    out.extend_from_slice(&[0, 0, 0, 0, T_BATCH]);
    put_varint(out, body_len as u64);
    put_varint(out, count as u64);
}

/// Bytes of a marker record.
pub const MARKER_LEN: usize = 7;

/// A marker: an empty batch frame (no records), sealed with `seed`. Written after the last
/// record of a lane at a seal, a checkpoint and a close: it changes nothing, but as a record
/// that verifies after the last one, it shows damage to that one for what it is (a failed
/// record with nothing valid after it would be taken for a torn tail).
pub fn marker(seed: u32) -> [u8; MARKER_LEN] {
    let mut m = Vec::with_capacity(MARKER_LEN);
    encode_batch_header(&mut m, 0, 0);
    seal(&mut m, seed);
    let mut out = [0u8; MARKER_LEN];
    out.copy_from_slice(&m);
    out
}

/// The checksum seed of the records inside a batch frame of a log whose inner records are
/// never read on their own (the B+ tree's write-ahead log): a scan looking past damage then
/// never takes the inner records of a damaged frame for records of their own, so a damaged
/// batch is lost whole, never in part. (The frame's own checksum covers them.)
#[inline]
pub fn inner_seed(seed: u32) -> u32 {
    seed ^ 0x5bd1_e995
}

/// Fill in the checksum of the record occupying all of `rec`.
#[inline]
pub fn seal(rec: &mut [u8], seed: u32) {
    let crc = crc32c::crc32c_append(seed, &rec[4..]);
    rec[0..4].copy_from_slice(&crc.to_le_bytes());
}

/// A parsed record header. Offsets are relative to the record start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub typ: u8,
    pub fields: PutFields,
    /// Offset of the key (put / delete) or of the body (batch).
    pub key_off: usize,
    pub klen: usize,
    /// Stored value length (put), body length (batch).
    pub vlen: usize,
    /// Sub-record count (batch).
    pub count: u64,
    /// The keyspace of a put, delete or clear (0: the database itself).
    pub keyspace: u64,
    /// Whole record length.
    pub len: usize,
}

impl Header {
    pub fn value_off(&self) -> usize {
        self.key_off + self.klen
    }
}

/// Parse the header at the start of `buf` (which may hold only a prefix of the record).
/// `None` when `buf` is too short to hold the header or a field is malformed.
pub fn parse_header(buf: &[u8]) -> Option<Header> {
    let bits = *buf.get(4)?;
    let typ = bits & 3;
    let mut pos = 5;
    let mut h = Header {
        typ,
        fields: PutFields::default(),
        key_off: 0,
        klen: 0,
        vlen: 0,
        count: 0,
        keyspace: 0,
        len: 0,
    };
    match typ {
        T_PUT => {
            h.klen = usize::try_from(get_varint(buf, &mut pos)?).ok()?;
            h.vlen = usize::try_from(get_varint(buf, &mut pos)?).ok()?;
            let comp = (bits >> COMP_SHIFT) & 3;
            h.fields.compression = comp;
            if comp != 0 {
                h.fields.raw_len = get_varint(buf, &mut pos)?;
            }
            h.fields.seq = get_varint(buf, &mut pos)?;
            if bits & B_FLAGS != 0 {
                h.fields.flags = u32::from_le_bytes(buf.get(pos..pos + 4)?.try_into().ok()?);
                pos += 4;
            }
            if bits & B_EXPIRES != 0 {
                h.fields.expires = get_varint(buf, &mut pos)?;
            }
            if bits & B_VERSION != 0 {
                h.fields.version = get_varint(buf, &mut pos)?;
            }
            if bits & B_EXT != 0 {
                (h.fields.dup, h.keyspace) = get_ext(buf, &mut pos)?;
            }
            if h.klen > crate::store::MAX_KEY_LEN || h.vlen > 2 * crate::store::MAX_VALUE_LEN {
                return None;
            }
        }
        T_DELETE => {
            h.klen = usize::try_from(get_varint(buf, &mut pos)?).ok()?;
            h.fields.seq = get_varint(buf, &mut pos)?;
            if bits & B_EXT != 0 {
                (h.fields.dup, h.keyspace) = get_ext(buf, &mut pos)?;
            }
            if h.klen > crate::store::MAX_KEY_LEN {
                return None;
            }
        }
        T_BATCH => {
            h.vlen = usize::try_from(get_varint(buf, &mut pos)?).ok()?;
            h.count = get_varint(buf, &mut pos)?;
            // A frame fits in a segment, whose offsets are u32.
            if h.vlen > u32::MAX as usize || h.count > h.vlen as u64 {
                return None;
            }
        }
        _ => {
            // clear: its id in `fields.seq`, its lane count in `count`
            h.fields.seq = get_varint(buf, &mut pos)?;
            h.count = get_varint(buf, &mut pos)?;
            if bits & B_EXT != 0 {
                let (dup, ks) = get_ext(buf, &mut pos)?;
                if dup != 0 || ks == 0 {
                    return None;
                }
                h.keyspace = ks;
            }
        }
    }
    let version = if typ == T_PUT { B_VERSION } else { 0 };
    let ext = if typ == T_BATCH { 0 } else { B_EXT };
    if bits & !(3 | B_FLAGS | B_EXPIRES | version | ext | (3 << COMP_SHIFT)) != 0 {
        return None;
    }
    h.key_off = pos;
    h.len = pos.checked_add(h.klen)?.checked_add(h.vlen)?;
    Some(h)
}

/// Whether `rec` (whose header is `h`, checked to lie within it) is a put of `key`.
#[inline]
pub fn is_put_of(h: &Header, rec: &[u8], key: &[u8]) -> bool {
    h.typ == T_PUT && rec.get(h.key_off..h.key_off + h.klen) == Some(key)
}

/// Verify the checksum of a complete record.
#[inline]
pub fn verify(rec: &[u8], seed: u32) -> bool {
    rec.len() >= 5
        && u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]])
            == crc32c::crc32c_append(seed, &rec[4..])
}

/// Compression codec of a header.
pub fn codec(h: &Header) -> Result<Compression> {
    Compression::from_code(h.fields.compression)
        .ok_or_else(|| Error::Corrupt("unknown compression code".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_round_trip_and_checksum() {
        let f = PutFields {
            flags: 7,
            expires: 1234567,
            seq: 99,
            compression: 0,
            raw_len: 0,
            version: 0,
            dup: 0,
        };
        // A record that carries a version of its own (a touched one) round-trips it.
        let touched = PutFields { version: 42, ..f };
        let mut t = Vec::new();
        encode_put(&mut t, b"key", b"value", &touched);
        let th = parse_header(&t).unwrap();
        assert_eq!((th.fields, th.fields.version()), (touched, 42));
        assert_eq!(
            parse_header(&t[..t.len() - 5]).unwrap().fields.version(),
            42
        );
        let mut v = Vec::new();
        let n = encode_put(&mut v, b"key", b"value", &f);
        assert_eq!(n, v.len());
        seal(&mut v, 42);
        assert!(verify(&v, 42));
        assert!(!verify(&v, 43));
        let h = parse_header(&v).unwrap();
        assert_eq!(h.typ, T_PUT);
        let mut d = Vec::new();
        encode_delete(&mut d, b"gone", 77);
        let dh = parse_header(&d).unwrap();
        assert_eq!((dh.typ, dh.fields.seq, dh.klen), (T_DELETE, 77, 4));
        assert_eq!((h.fields, h.fields.version()), (f, 99));
        assert_eq!(&v[h.key_off..h.key_off + h.klen], b"key");
        assert_eq!(&v[h.value_off()..h.len], b"value");
        for i in 0..v.len() {
            let mut w = v.clone();
            w[i] ^= 0x10;
            assert!(!verify(&w, 42), "flip at {i} undetected");
        }
    }

    #[test]
    fn small_record_is_small() {
        let mut v = Vec::new();
        let f = PutFields {
            seq: 3000,
            ..PutFields::default()
        };
        let n = encode_put(&mut v, b"00000001", b"00000001", &f);
        assert_eq!(
            n, 25,
            "crc 4 + bits 1 + klen 1 + vlen 1 + seq 2 + key 8 + value 8"
        );
    }

    #[test]
    fn header_parse_never_panics_on_junk() {
        for len in 0..40 {
            for fill in [0u8, 0xff, 0x80, 0x7f] {
                let _ = parse_header(&vec![fill; len]);
            }
        }
        assert!(parse_seg_header(&[0u8; 32]).is_err());
        let i = SegInfo {
            id: 3,
            salt: 0xdead,
            lane: 1,
            lanes: 4,
        };
        assert_eq!(parse_seg_header(&seg_header(&i)).unwrap(), i);
        // Format 1 (before records could carry a version) is still read; a later one is not.
        let with_version = |v: u32| {
            let mut h = seg_header(&i);
            h[8..12].copy_from_slice(&v.to_le_bytes());
            let crc = crc32c::crc32c(&h[0..28]);
            h[28..32].copy_from_slice(&crc.to_le_bytes());
            parse_seg_header(&h)
        };
        assert_eq!(with_version(1).unwrap(), i);
        assert!(with_version(0).is_err());
        assert!(with_version(SEG_VERSION + 1).is_err());
        // The version bit belongs to puts: a delete carrying it is damage.
        let mut d = Vec::new();
        encode_delete(&mut d, b"k", 5);
        d[4] |= B_VERSION;
        assert!(parse_header(&d).is_none());
    }

    /// Records naming a keyspace round-trip; keyspace 0 costs nothing; a version-2 dup record
    /// (bit 7 and a bare dup varint) parses as it always did.
    #[test]
    fn keyspace_extension() {
        let f = PutFields {
            seq: 9,
            dup: 300,
            ..PutFields::default()
        };
        for (ks, dup) in [(0u64, 0u64), (0, 300), (2, 0), (2, 300), (u64::MAX, 1)] {
            let f = PutFields { dup, ..f };
            let mut v = Vec::new();
            let n = encode_put_in(&mut v, ks, b"key", b"val", &f);
            let h = parse_header(&v).unwrap();
            assert_eq!((h.keyspace, h.fields, h.len), (ks, f, n), "put {ks} {dup}");
            assert_eq!(&v[h.value_off()..h.len], b"val");
            let hb = HeaderBuf::put_in(ks, 3, 3, &f);
            assert_eq!(hb.as_slice(), &v[..h.key_off]);
            let mut d = Vec::new();
            let n = encode_delete_in(&mut d, ks, b"key", 4, dup);
            let h = parse_header(&d).unwrap();
            assert_eq!(
                (h.keyspace, h.fields.dup, h.len, h.typ),
                (ks, dup, n, T_DELETE)
            );
            assert_eq!(
                HeaderBuf::delete_in(ks, 3, 4, dup).as_slice(),
                &d[..h.key_off]
            );
            let mut c = Vec::new();
            encode_clear_in(&mut c, ks, 5, 1);
            let h = parse_header(&c).unwrap();
            assert_eq!(
                (h.keyspace, h.fields.seq, h.count, h.len),
                (ks, 5, 1, c.len())
            );
        }
        let mut plain = Vec::new();
        let mut in0 = Vec::new();
        encode_put(&mut plain, b"k", b"v", &f);
        encode_put_in(&mut in0, 0, b"k", b"v", &f);
        assert_eq!(plain, in0);
        // A version-2 record of dup 300: bits | B_EXT, the dup varint where the extension is.
        let mut v2 = vec![0, 0, 0, 0, T_PUT | B_EXT, 1, 1, 9];
        put_varint(&mut v2, 300);
        v2.extend_from_slice(b"kv");
        let h = parse_header(&v2).unwrap();
        assert_eq!((h.fields.dup, h.keyspace, h.len), (300, 0, v2.len()));
        // The long form with an unknown bit, a zero keyspace or a zero dup is damage.
        for bad in [[0u8, 4, 2], [0, 2, 0], [0, 1, 0]] {
            let mut r = vec![0, 0, 0, 0, T_DELETE | B_EXT, 1, 7];
            r.extend_from_slice(&bad);
            r.push(b'k');
            assert!(parse_header(&r).is_none(), "{bad:?}");
        }
        // A batch frame carries no extension.
        let mut b = Vec::new();
        encode_batch_header(&mut b, 0, 0);
        b[4] |= B_EXT;
        assert!(parse_header(&b).is_none());
    }
}
