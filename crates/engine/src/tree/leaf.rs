//! A leaf of the B+ tree: the records of one key range, in memory as one byte buffer of
//! entries and a sorted array of their offsets, and on disk as an image (prefix-compressed
//! keys, versions relative to the leaf's smallest).
//!
//! Entry in memory (at an offset of `offs`):
//! ```text
//! varint klen, key, u8 bits (1 flags, 2 expires, 4 dup), varint vlen, varint version,
//! [u32 LE flags], [varint expires], [varint dup], value
//! ```
//! Image (docs/architecture/kinds.md, "B+ tree"):
//! ```text
//! u8 IMAGE_VERSION (2), varint count, varint base version,
//! u8 span bits (1 low, 2 high), [varint len, low key], [varint len, high key],
//! varint restart interval r,
//! per entry in key order: u8 bits, varint shared (bytes in common with the previous key;
//! 0 at every r-th entry, a restart point), varint suffix length, suffix, varint vlen,
//! varint version - base, [u32 LE flags], [varint expires], [varint dup], value,
//! then ceil(count / r) × u32 LE: the offset in the image of each restart point's entry
//! ```
//! Format 1 (written before) has no restart interval and no table; it is read too. One
//! record is found in an image without building the leaf (`find_in_image`): a binary search
//! over the restart points, whose keys are whole, then a walk of at most r entries.
//! The span is the leaf's key range when the image was written: from its low key (none: the
//! first leaf) to its right neighbour's low key (none: the last leaf), so that a salvage
//! without a checkpoint knows which keys an image speaks for.
//!
//! Of several records of one key (duplicates, in a database that allows them), each carries
//! its `dup` number: entries sort by key, then `dup`.

use super::cmp::Cmp;
use crate::log::format::{get_varint, put_varint};
use crate::store::Meta;
use std::cmp::Ordering;

const B_FLAGS: u8 = 1;
const B_EXPIRES: u8 = 2;
const B_DUP: u8 = 4;
/// The image format written (format 1, without restart points, is read too).
const IMAGE_VERSION: u8 = 2;
/// Entries between restart points in an image written.
const RESTART: usize = 16;
/// The most entries between restart points an image may have.
const MAX_RESTART: u64 = 1 << 16;

/// A leaf's key range: low key (inclusive) and high key (exclusive), `None` unbounded.
pub(crate) type Span<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);
pub(crate) type OwnedSpan = (Option<Vec<u8>>, Option<Vec<u8>>);

/// One record, borrowed from a leaf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub meta: Meta,
    pub dup: u64,
}

/// A leaf in memory.
#[derive(Clone, Debug, Default)]
pub(crate) struct Leaf {
    buf: Vec<u8>,
    offs: Vec<u32>,
    /// The first 8 bytes of each entry's key, big-endian and zero-padded (`head`): a
    /// lexical search compares these and reads an entry only on a tie.
    heads: Vec<u64>,
    /// Bytes of `buf` no entry uses any more.
    dead: usize,
}

/// Append `v` as a varint to a `Vec`.
#[inline]
fn varint(out: &mut Vec<u8>, v: u64) {
    put_varint(out, v);
}

#[inline]
fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// Read a varint known to be well formed (it was written by this module).
#[inline]
fn rd(buf: &[u8], pos: &mut usize) -> u64 {
    let b = buf[*pos];
    if b < 0x80 {
        *pos += 1;
        return u64::from(b);
    }
    get_varint(buf, pos).unwrap_or(0)
}

/// The first 8 bytes of `key` as a big-endian number, zero-padded: `head(a) < head(b)`
/// implies `a < b` in lexical order.
#[inline]
pub(crate) fn head(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

/// The order of duplicate numbers: as signed numbers, so that a value put before the first
/// (`putdupback`) takes the number below it.
#[inline]
pub(crate) fn dup_order(dup: u64) -> i64 {
    dup as i64
}

/// Bytes an entry takes in memory.
fn entry_len(key: &[u8], vlen: usize, meta: &Meta, dup: u64) -> usize {
    varint_len(key.len() as u64)
        + key.len()
        + 1
        + varint_len(vlen as u64)
        + varint_len(meta.version)
        + if meta.flags != 0 { 4 } else { 0 }
        + if meta.expires != 0 {
            varint_len(meta.expires)
        } else {
            0
        }
        + if dup != 0 { varint_len(dup) } else { 0 }
        + vlen
}

fn encode_entry(out: &mut Vec<u8>, key: &[u8], value: &[u8], meta: &Meta, dup: u64) {
    varint(out, key.len() as u64);
    out.extend_from_slice(key);
    let mut bits = 0;
    if meta.flags != 0 {
        bits |= B_FLAGS;
    }
    if meta.expires != 0 {
        bits |= B_EXPIRES;
    }
    if dup != 0 {
        bits |= B_DUP;
    }
    out.push(bits);
    varint(out, value.len() as u64);
    varint(out, meta.version);
    if meta.flags != 0 {
        out.extend_from_slice(&meta.flags.to_le_bytes());
    }
    if meta.expires != 0 {
        varint(out, meta.expires);
    }
    if dup != 0 {
        varint(out, dup);
    }
    out.extend_from_slice(value);
}

impl Leaf {
    pub fn new() -> Leaf {
        Leaf::default()
    }

    pub fn len(&self) -> usize {
        self.offs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offs.is_empty()
    }

    /// Bytes of records held (what a split keeps near the leaf size).
    pub fn live_bytes(&self) -> usize {
        self.buf.len() - self.dead + 4 * self.offs.len()
    }

    /// Bytes of memory held (what the cache counts).
    pub fn mem_bytes(&self) -> usize {
        self.buf.capacity() + 4 * self.offs.capacity() + 8 * self.heads.capacity() + 64
    }

    #[inline]
    pub fn key(&self, i: usize) -> &[u8] {
        let mut p = self.offs[i] as usize;
        let klen = rd(&self.buf, &mut p) as usize;
        &self.buf[p..p + klen]
    }

    /// The entry at index `i` and the bytes it takes.
    pub fn entry(&self, i: usize) -> Entry<'_> {
        self.entry_at(self.offs[i] as usize).0
    }

    fn entry_at(&self, at: usize) -> (Entry<'_>, usize) {
        let b = &self.buf;
        let mut p = at;
        let klen = rd(b, &mut p) as usize;
        let key = &b[p..p + klen];
        p += klen;
        let bits = b[p];
        p += 1;
        let vlen = rd(b, &mut p) as usize;
        let version = rd(b, &mut p);
        let mut meta = Meta {
            flags: 0,
            expires: 0,
            version,
        };
        if bits & B_FLAGS != 0 {
            meta.flags = u32::from_le_bytes([b[p], b[p + 1], b[p + 2], b[p + 3]]);
            p += 4;
        }
        if bits & B_EXPIRES != 0 {
            meta.expires = rd(b, &mut p);
        }
        let dup = if bits & B_DUP != 0 { rd(b, &mut p) } else { 0 };
        let value = &b[p..p + vlen];
        let e = Entry {
            key,
            value,
            meta,
            dup,
        };
        (e, p + vlen - at)
    }

    /// The index of the first entry whose key is not below `key` (its first duplicate), and
    /// whether it is `key`.
    #[inline]
    pub fn find(&self, cmp: Cmp, key: &[u8]) -> (usize, bool) {
        let i = self.search(cmp, key, |o| o != Ordering::Less);
        let hit = i < self.offs.len() && self.cmp_entry(cmp, i, key, head(key)).is_eq();
        (i, hit)
    }

    /// The entries of `key` (its values, first to last): `start..end`, empty at the place
    /// where it would go when it has none.
    pub fn run(&self, cmp: Cmp, key: &[u8]) -> (usize, usize) {
        let (i, hit) = self.find(cmp, key);
        if !hit {
            return (i, i);
        }
        let mut j = i + 1;
        while j < self.len() && self.key(j) == key {
            j += 1;
        }
        (i, j)
    }

    /// The place of value `dup` of `key` (duplicates sort by `dup` as a signed number), and
    /// whether it is there.
    pub fn find_dup(&self, cmp: Cmp, key: &[u8], dup: u64) -> (usize, bool) {
        let (i, j) = self.run(cmp, key);
        let mut k = i;
        while k < j && dup_order(self.entry(k).dup) < dup_order(dup) {
            k += 1;
        }
        (k, k < j && self.entry(k).dup == dup)
    }

    /// The index of the first entry whose key is above `key`.
    pub fn upper(&self, cmp: Cmp, key: &[u8]) -> usize {
        self.search(cmp, key, |o| o == Ordering::Greater)
    }

    /// The first index whose entry's order against `key` satisfies `right` (entries that
    /// do form a suffix of the leaf).
    #[inline]
    fn search(&self, cmp: Cmp, key: &[u8], right: impl Fn(Ordering) -> bool) -> usize {
        let h = head(key);
        let (mut lo, mut hi) = (0, self.offs.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if right(self.cmp_entry(cmp, mid, key, h)) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }

    /// The order of entry `i`'s key against `key` (whose head is `h`).
    #[inline]
    fn cmp_entry(&self, cmp: Cmp, i: usize, key: &[u8], h: u64) -> Ordering {
        let by_head = match cmp {
            Cmp::Lex => self.heads[i].cmp(&h),
            Cmp::LexDesc => h.cmp(&self.heads[i]),
            _ => Ordering::Equal,
        };
        if by_head != Ordering::Equal {
            return by_head;
        }
        self.key_at_off(self.offs[i]).cmp_with(cmp, key)
    }

    #[inline]
    fn key_at_off(&self, o: u32) -> KeyRef<'_> {
        let mut p = o as usize;
        let klen = rd(&self.buf, &mut p) as usize;
        KeyRef(&self.buf[p..p + klen])
    }

    /// Insert a new entry at index `i` (the caller found the place).
    pub fn insert(&mut self, i: usize, key: &[u8], value: &[u8], meta: &Meta, dup: u64) {
        self.room(entry_len(key, value.len(), meta, dup));
        let off = self.buf.len();
        encode_entry(&mut self.buf, key, value, meta, dup);
        self.offs.insert(i, off as u32);
        self.heads.insert(i, head(key));
    }

    /// Replace the value and metadata of the entry at `i` (its key and dup number stay).
    pub fn replace(&mut self, i: usize, value: &[u8], meta: &Meta) {
        let at = self.offs[i] as usize;
        let (old, old_len) = self.entry_at(at);
        let (klen, dup) = (old.key.len(), old.dup);
        let new_len = entry_len(old.key, value.len(), meta, dup);
        if new_len == old_len {
            // Same size (a counter, an overwrite by an equal-length value): in place.
            let mut tmp = Vec::with_capacity(new_len);
            let key_at = at + varint_len(klen as u64);
            encode_entry(&mut tmp, &self.buf[key_at..key_at + klen], value, meta, dup);
            self.buf[at..at + new_len].copy_from_slice(&tmp);
            return;
        }
        self.room(new_len);
        let off = self.buf.len();
        let key_at = at + varint_len(klen as u64);
        let mut tmp = Vec::with_capacity(new_len);
        encode_entry(&mut tmp, &self.buf[key_at..key_at + klen], value, meta, dup);
        self.buf.extend_from_slice(&tmp);
        self.offs[i] = off as u32;
        self.dead += old_len;
        self.maybe_compact();
    }

    /// Make room for `n` more bytes of entries, growing by a quarter at a time rather than
    /// doubling (the cache counts capacity: a leaf should hold little it does not use).
    fn room(&mut self, n: usize) {
        if self.buf.capacity() - self.buf.len() < n {
            self.buf.reserve_exact(n.max(self.buf.len() / 4).max(64));
        }
        if self.offs.capacity() == self.offs.len() {
            let more = (self.offs.len() / 4).max(8);
            self.offs.reserve_exact(more);
            self.heads.reserve_exact(more);
        }
    }

    /// Remove the entry at `i`.
    pub fn remove(&mut self, i: usize) {
        let at = self.offs.remove(i) as usize;
        self.heads.remove(i);
        let (_, len) = self.entry_at(at);
        self.dead += len;
        self.maybe_compact();
    }

    fn maybe_compact(&mut self) {
        if self.dead > 512 && self.dead * 2 > self.buf.len() {
            self.compact();
        }
    }

    /// Rewrite the buffer with the entries in order and no dead bytes.
    pub fn compact(&mut self) {
        *self = self.slice(0, self.len());
    }

    /// A new leaf of the entries `from..to`.
    fn slice(&self, from: usize, to: usize) -> Leaf {
        let mut bytes = 0;
        for i in from..to {
            bytes += self.entry_at(self.offs[i] as usize).1;
        }
        let mut out = Leaf {
            buf: Vec::with_capacity(bytes),
            offs: Vec::with_capacity(to - from),
            heads: self.heads[from..to].to_vec(),
            dead: 0,
        };
        for i in from..to {
            let (_, len) = self.entry_at(self.offs[i] as usize);
            let at = self.offs[i] as usize;
            out.offs.push(out.buf.len() as u32);
            out.buf.extend_from_slice(&self.buf[at..at + len]);
        }
        out
    }

    /// Split a leaf that grew too large: the entries from the split point on move to the
    /// returned leaf, whose first key (its low key) is returned too. `hint` is where the
    /// write that made it grow went: at the end (keys written in order) the split keeps
    /// this leaf full, at the start it keeps the new one full. A key's duplicates stay in one
    /// leaf; `None` when every entry is of one key.
    pub fn split(&mut self, hint: usize) -> Option<(Vec<u8>, Leaf)> {
        let n = self.len();
        if n < 2 {
            return None;
        }
        let mut s = if hint + 1 >= n {
            n - 1
        } else if hint == 0 {
            1
        } else {
            // Half the bytes on each side.
            let half = (self.buf.len() - self.dead) / 2;
            let mut acc = 0;
            let mut s = n / 2;
            for i in 0..n {
                acc += self.entry_at(self.offs[i] as usize).1;
                if acc >= half {
                    s = (i + 1).clamp(1, n - 1);
                    break;
                }
            }
            s
        };
        // Not between two records of one key.
        let same = |l: &Leaf, i: usize| l.key(i) == l.key(i - 1);
        let start = s;
        while s < n && same(self, s) {
            s += 1;
        }
        if s == n {
            s = start;
            while s > 0 && same(self, s) {
                s -= 1;
            }
            if s == 0 {
                return None;
            }
        }
        let right = self.slice(s, n);
        for i in s..n {
            self.dead += self.entry_at(self.offs[i] as usize).1;
        }
        self.offs.truncate(s);
        self.heads.truncate(s);
        self.maybe_compact();
        Some((right.key(0).to_vec(), right))
    }

    /// The image of this leaf (see the module documentation): format 2, with a restart
    /// point every `RESTART` entries.
    pub fn encode_image(&self, out: &mut Vec<u8>, span: Span<'_>) {
        self.encode_image_with(out, span, Some(RESTART));
    }

    /// The image in format 2 with a restart point every `restart` entries, or in format 1
    /// (`None`: the tests of the old format).
    fn encode_image_with(&self, out: &mut Vec<u8>, span: Span<'_>, restart: Option<usize>) {
        let start = out.len();
        out.push(if restart.is_some() { IMAGE_VERSION } else { 1 });
        varint(out, self.len() as u64);
        let base = (0..self.len())
            .map(|i| self.entry(i).meta.version)
            .min()
            .unwrap_or(0);
        varint(out, base);
        out.push(u8::from(span.0.is_some()) | (u8::from(span.1.is_some()) << 1));
        for k in [span.0, span.1].into_iter().flatten() {
            varint(out, k.len() as u64);
            out.extend_from_slice(k);
        }
        if let Some(r) = restart {
            varint(out, r as u64);
        }
        let every = restart.unwrap_or(usize::MAX);
        let mut restarts = Vec::with_capacity(self.len().div_ceil(every));
        let mut prev: &[u8] = &[];
        for i in 0..self.len() {
            let e = self.entry(i);
            let shared = if i % every == 0 && restart.is_some() {
                restarts.push((out.len() - start) as u32);
                0
            } else {
                prev.iter().zip(e.key).take_while(|(a, b)| a == b).count()
            };
            let mut bits = 0;
            if e.meta.flags != 0 {
                bits |= B_FLAGS;
            }
            if e.meta.expires != 0 {
                bits |= B_EXPIRES;
            }
            if e.dup != 0 {
                bits |= B_DUP;
            }
            out.push(bits);
            varint(out, shared as u64);
            varint(out, (e.key.len() - shared) as u64);
            out.extend_from_slice(&e.key[shared..]);
            varint(out, e.value.len() as u64);
            varint(out, e.meta.version - base);
            if e.meta.flags != 0 {
                out.extend_from_slice(&e.meta.flags.to_le_bytes());
            }
            if e.meta.expires != 0 {
                varint(out, e.meta.expires);
            }
            if e.dup != 0 {
                varint(out, e.dup);
            }
            out.extend_from_slice(e.value);
            prev = e.key;
        }
        for r in restarts {
            out.extend_from_slice(&r.to_le_bytes());
        }
    }

    /// A leaf from its image; `Err` says what is wrong with a damaged one (it never panics).
    /// With `cmp`, the keys must be in strictly increasing order (by key, then dup number).
    pub fn decode_image(img: &[u8], cmp: Option<Cmp>) -> Result<Leaf, String> {
        Leaf::decode_image_span(img, cmp).map(|(l, _)| l)
    }

    /// The leaf of an image and the span it was written with (low, high). With `cmp`, the
    /// keys must lie in the span. Both formats are read.
    pub fn decode_image_span(img: &[u8], cmp: Option<Cmp>) -> Result<(Leaf, OwnedSpan), String> {
        let h = ImageHead::parse(img)?;
        let bad = |what: &str| Err(format!("leaf image: {what}"));
        let span: OwnedSpan = (
            h.low.clone().map(|r| img[r].to_vec()),
            h.high.clone().map(|r| img[r].to_vec()),
        );
        let n = h.n;
        let mut leaf = Leaf {
            buf: Vec::with_capacity(img.len() + 8 * n),
            offs: Vec::with_capacity(n),
            heads: Vec::with_capacity(n),
            dead: 0,
        };
        let mut p = h.entries;
        let mut prev_dup = 0u64;
        let mut key = Vec::new();
        let mut prev: Vec<u8> = Vec::new();
        for i in 0..n {
            if h.interval != 0 && i % h.interval == 0 && h.restart(img, i / h.interval) != Some(p) {
                return bad("a restart point that is not its entry's");
            }
            let (e, shared) = h.entry(img, &mut p, &mut key)?;
            if h.interval != 0 && i % h.interval == 0 && shared != 0 {
                return bad("a restart entry that shares bytes");
            }
            if let (Some(c), true) = (cmp, i > 0) {
                let ord = c
                    .cmp(&prev, &key)
                    .then(dup_order(prev_dup).cmp(&dup_order(e.dup)));
                if ord != Ordering::Less {
                    return bad("keys out of order");
                }
            }
            if let Some(c) = cmp {
                let below = span.0.as_ref().is_some_and(|l| c.cmp(&key, l).is_lt());
                let above = span.1.as_ref().is_some_and(|h| c.cmp(&key, h).is_ge());
                if below || above {
                    return bad("a key outside the image's span");
                }
            }
            leaf.insert(leaf.len(), &key, &img[e.value.clone()], &e.meta, e.dup);
            prev.clear();
            prev.extend_from_slice(&key);
            prev_dup = e.dup;
        }
        if p != h.end {
            return bad("bytes after the last entry");
        }
        Ok((leaf, span))
    }

    /// The first record of `key` in an image (its first duplicate), found without building
    /// the leaf: in format 2 a binary search over the restart points, then a walk of at most
    /// one restart interval; in format 1 a walk from the first entry up to the key. `Err` for
    /// an image that is not well formed where the search went (it never panics); the order
    /// of the keys is not checked (`decode_image` does).
    pub fn find_in_image<'a>(
        img: &'a [u8],
        cmp: Cmp,
        key: &[u8],
    ) -> Result<Option<ImageEntry<'a>>, String> {
        let h = ImageHead::parse(img)?;
        let mut first = 0;
        if h.interval != 0 && h.n > 0 {
            // The last restart whose key is below `key`: a key's first record is never
            // before it.
            let points = h.n.div_ceil(h.interval);
            let (mut lo, mut hi) = (0, points);
            let mut k = Vec::new();
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                let mut p = h
                    .restart(img, mid)
                    .ok_or("leaf image: a restart point out of bounds")?;
                let (_, shared) = h.entry(img, &mut p, &mut k)?;
                if shared != 0 {
                    return Err("leaf image: a restart entry that shares bytes".into());
                }
                if cmp.cmp(&k, key).is_lt() {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            first = lo.saturating_sub(1);
        }
        let mut p = if first == 0 {
            h.entries
        } else {
            h.restart(img, first)
                .ok_or("leaf image: a restart point out of bounds")?
        };
        let mut k = Vec::new();
        let mut i = first * h.interval;
        while i < h.n {
            let (e, _) = h.entry(img, &mut p, &mut k)?;
            match cmp.cmp(&k, key) {
                Ordering::Less => {}
                Ordering::Equal => {
                    return Ok(Some(ImageEntry {
                        value: &img[e.value],
                        meta: e.meta,
                        dup: e.dup,
                    }))
                }
                Ordering::Greater => break,
            }
            i += 1;
        }
        Ok(None)
    }
}

/// A record found in an image (`Leaf::find_in_image`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ImageEntry<'a> {
    pub value: &'a [u8],
    pub meta: Meta,
    pub dup: u64,
}

/// An entry of an image as parsed: where its value is, its metadata and dup number.
struct RawEntry {
    value: std::ops::Range<usize>,
    meta: Meta,
    dup: u64,
}

/// What precedes an image's entries, and where they end.
struct ImageHead {
    n: usize,
    base: u64,
    low: Option<std::ops::Range<usize>>,
    high: Option<std::ops::Range<usize>>,
    /// Entries between restart points (0: format 1, which has none).
    interval: usize,
    entries: usize,
    /// The end of the entries (format 2: the restart table follows).
    end: usize,
}

impl ImageHead {
    fn parse(img: &[u8]) -> Result<ImageHead, String> {
        let mut p = 0;
        let bad = |what: &str| Err(format!("leaf image: {what}"));
        let version = *img.first().ok_or("leaf image: empty")?;
        if version != 1 && version != IMAGE_VERSION {
            return bad("unknown format");
        }
        p += 1;
        let n = get_varint(img, &mut p).ok_or("leaf image: truncated count")?;
        let base = get_varint(img, &mut p).ok_or("leaf image: truncated version")?;
        if n > img.len() as u64 {
            return bad("more entries than bytes");
        }
        let n = n as usize;
        let bits = *img.get(p).ok_or("leaf image: truncated span")?;
        p += 1;
        if bits & !3 != 0 {
            return bad("bad span bits");
        }
        let mut span = (None, None);
        for (bit, end) in [(1u8, &mut span.0), (2, &mut span.1)] {
            if bits & bit != 0 {
                let len = get_varint(img, &mut p).ok_or("leaf image: truncated span")? as usize;
                if len > crate::store::MAX_KEY_LEN || len > img.len() - p.min(img.len()) {
                    return bad("bad span key length");
                }
                *end = Some(p..p + len);
                p += len;
            }
        }
        let (interval, end) = if version == 1 {
            (0, img.len())
        } else {
            let iv = get_varint(img, &mut p).ok_or("leaf image: truncated restart interval")?;
            if iv == 0 || iv > MAX_RESTART {
                return bad("bad restart interval");
            }
            let iv = iv as usize;
            let table = 4 * n.div_ceil(iv);
            if table > img.len() - p {
                return bad("no room for the restart table");
            }
            (iv, img.len() - table)
        };
        Ok(ImageHead {
            n,
            base,
            low: span.0,
            high: span.1,
            interval,
            entries: p,
            end,
        })
    }

    /// Where restart entry `j` starts (format 2), when it lies among the entries.
    fn restart(&self, img: &[u8], j: usize) -> Option<usize> {
        let at = self.end + 4 * j;
        let b = img.get(at..at + 4)?;
        let off = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        (self.entries..self.end).contains(&off).then_some(off)
    }

    /// Parse the entry at `p` (moved past it), `key` holding the previous entry's key on
    /// entry and this one's on return; the bytes it shares with the previous key are
    /// returned too.
    #[inline]
    fn entry(
        &self,
        img: &[u8],
        p: &mut usize,
        key: &mut Vec<u8>,
    ) -> Result<(RawEntry, usize), String> {
        let bad = |what: &str| Err(format!("leaf image: {what}"));
        let img = &img[..self.end];
        let Some(&bits) = img.get(*p) else {
            return bad("truncated entry");
        };
        *p += 1;
        if bits & !(B_FLAGS | B_EXPIRES | B_DUP) != 0 {
            return bad("bad entry bits");
        }
        let field = |p: &mut usize| match img.get(*p) {
            // Most fields are one byte.
            Some(&b) if b < 0x80 => {
                *p += 1;
                Ok(u64::from(b))
            }
            _ => get_varint(img, p).ok_or("leaf image: truncated entry"),
        };
        let shared = field(p)? as usize;
        let suffix = field(p)? as usize;
        if shared > key.len() || suffix > img.len() - (*p).min(img.len()) {
            return bad("bad key length");
        }
        key.truncate(shared);
        key.extend_from_slice(&img[*p..*p + suffix]);
        *p += suffix;
        if key.len() > crate::store::MAX_KEY_LEN {
            return bad("key too long");
        }
        let vlen = field(p)? as usize;
        let vdelta = field(p)?;
        let mut meta = Meta {
            flags: 0,
            expires: 0,
            version: self
                .base
                .checked_add(vdelta)
                .ok_or("leaf image: bad version")?,
        };
        if bits & B_FLAGS != 0 {
            let f = img.get(*p..*p + 4).ok_or("leaf image: truncated flags")?;
            meta.flags = u32::from_le_bytes([f[0], f[1], f[2], f[3]]);
            *p += 4;
        }
        if bits & B_EXPIRES != 0 {
            meta.expires = field(p)?;
        }
        let dup = if bits & B_DUP != 0 { field(p)? } else { 0 };
        if vlen > img.len() - (*p).min(img.len()) {
            return bad("truncated value");
        }
        let value = *p..*p + vlen;
        *p += vlen;
        Ok((RawEntry { value, meta, dup }, shared))
    }
}

/// A key, compared through an order.
struct KeyRef<'a>(&'a [u8]);

impl KeyRef<'_> {
    #[inline]
    fn cmp_with(&self, cmp: Cmp, key: &[u8]) -> Ordering {
        cmp.cmp(self.0, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(v: u64) -> Meta {
        Meta {
            flags: (v % 3) as u32,
            expires: if v.is_multiple_of(5) {
                1_900_000_000
            } else {
                0
            },
            version: v + 1,
        }
    }

    fn fill(keys: impl Iterator<Item = u64>) -> Leaf {
        let mut l = Leaf::new();
        for k in keys {
            let key = format!("{k:08}");
            let (i, hit) = l.find(Cmp::Lex, key.as_bytes());
            if hit {
                l.replace(i, key.as_bytes(), &meta(k));
            } else {
                l.insert(i, key.as_bytes(), key.as_bytes(), &meta(k), 0);
            }
        }
        l
    }

    fn check_sorted(l: &Leaf) {
        for i in 1..l.len() {
            assert!(l.key(i - 1) < l.key(i));
        }
    }

    #[test]
    fn insert_replace_remove_split_and_images() {
        let mut l = fill((0..300).map(|i| (i * 7919) % 300));
        assert_eq!(l.len(), 300);
        check_sorted(&l);
        for i in 0..300 {
            let e = l.entry(i);
            assert_eq!(e.key, format!("{i:08}").as_bytes());
            assert_eq!(e.value, e.key);
            assert_eq!(e.meta, meta(i as u64));
        }
        // Replace with longer and equal-length values, remove some.
        for i in (0..300).step_by(3) {
            l.replace(i, b"a longer value than before", &meta(1000 + i as u64));
        }
        for i in (0..300).step_by(3) {
            l.replace(i, b"a longer value than befor!", &meta(2000 + i as u64));
        }
        for i in (0..100).rev() {
            l.remove(i * 3 + 1);
        }
        assert_eq!(l.len(), 200);
        check_sorted(&l);
        let mut img = Vec::new();
        l.encode_image(&mut img, (None, None));
        let back = Leaf::decode_image(&img, Some(Cmp::Lex)).unwrap();
        assert_eq!(back.len(), l.len());
        for i in 0..l.len() {
            assert_eq!(back.entry(i), l.entry(i));
        }
        // Every truncation and every single-byte change either fails or decodes to some
        // leaf: never a panic.
        for cut in 0..img.len() {
            assert!(Leaf::decode_image(&img[..cut], Some(Cmp::Lex)).is_err());
        }
        for at in 0..img.len().min(600) {
            let mut bad = img.clone();
            bad[at] ^= 0x5a;
            let _ = Leaf::decode_image(&bad, Some(Cmp::Lex));
        }
        let (sep, right) = l.split(100).unwrap();
        assert_eq!(sep, right.key(0));
        assert!(l.key(l.len() - 1) < &sep[..]);
        assert_eq!(l.len() + right.len(), 200);
        check_sorted(&l);
        check_sorted(&right);
    }

    #[test]
    fn splits_keep_the_written_side_full_and_duplicates_together() {
        let mut l = fill(0..100);
        let (_, r) = l.split(99).unwrap();
        assert_eq!((l.len(), r.len()), (99, 1));
        let mut l = fill(0..100);
        let (_, r) = l.split(0).unwrap();
        assert_eq!((l.len(), r.len()), (1, 99));
        // Duplicates: 10 of key 5 in the middle.
        let mut l = fill(0..10);
        let (i, _) = l.find(Cmp::Lex, b"00000005");
        for d in 1..10 {
            l.insert(i + d, b"00000005", b"dup", &meta(d as u64), d as u64);
        }
        let mut left = l.clone();
        let (_, r) = left.split(6).unwrap();
        let fives = |x: &Leaf| (0..x.len()).filter(|&i| x.key(i) == b"00000005").count();
        assert_eq!(fives(&left) + fives(&r), 10);
        assert!(
            fives(&left) == 0 || fives(&r) == 0,
            "the split is not inside the run"
        );
        let mut one = Leaf::new();
        for d in 0..5 {
            one.insert(d, b"k", b"v", &meta(d as u64), d as u64);
        }
        assert!(one.split(2).is_none());
    }

    proptest::proptest! {
        /// Searches agree with a sorted list whatever the keys have in common (heads after a
        /// shared prefix, a key without it arriving, removals, splits), in both lexical orders.
        #[test]
        fn searches_agree_with_a_sorted_list(
            ops in proptest::collection::vec(
                (0u8..4, proptest::collection::vec(b'a'..b'e', 0..14), 0usize..64), 1..200),
            desc in proptest::bool::ANY,
        ) {
            let cmp = if desc { Cmp::LexDesc } else { Cmp::Lex };
            let mut leaf = Leaf::new();
            let mut model: Vec<Vec<u8>> = Vec::new();
            for (op, tail, at) in ops {
                // Mostly keys with a long common prefix, sometimes one without it.
                let key: Vec<u8> = if op == 3 { tail.clone() } else {
                    let mut k = b"prefix:shared/".to_vec();
                    k.extend_from_slice(&tail);
                    k
                };
                let (i, hit) = leaf.find(cmp, &key);
                let want = model.partition_point(|k| cmp.cmp(k, &key).is_lt());
                proptest::prop_assert_eq!(i, want);
                proptest::prop_assert_eq!(hit, model.get(want) == Some(&key));
                let up = model.partition_point(|k| !cmp.cmp(k, &key).is_gt());
                proptest::prop_assert_eq!(leaf.upper(cmp, &key), up);
                if op == 0 && !model.is_empty() {
                    let j = at % model.len();
                    leaf.remove(j);
                    model.remove(j);
                } else if !hit {
                    leaf.insert(i, &key, b"v", &meta(1), 0);
                    model.insert(i, key);
                }
                if model.len() > 40 {
                    let (_, right) = leaf.split(at % model.len()).unwrap();
                    let keep = leaf.len();
                    proptest::prop_assert_eq!(keep + right.len(), model.len());
                    if at % 2 == 0 {
                        leaf = right;
                        model.drain(..keep);
                    } else {
                        model.truncate(keep);
                    }
                }
            }
        }
    }

    proptest::proptest! {
        /// A lookup in an image finds what the decoded leaf finds (the first record of the
        /// key, its value, metadata and dup number), for keys in and between the leaf's, in
        /// both formats and with any restart interval: keys sharing long prefixes, several
        /// records of one key, flags, expiry times.
        #[test]
        fn image_lookups_agree_with_the_decoded_leaf(
            recs in proptest::collection::vec(
                (proptest::collection::vec(b'a'..b'd', 0..10), 0u8..4, 0u64..3, proptest::bool::ANY,
                 proptest::collection::vec(proptest::num::u8::ANY, 0..20)), 0..120),
            probes in proptest::collection::vec(proptest::collection::vec(b'a'..b'e', 0..11), 0..40),
            restart in proptest::option::of(1usize..20),
            desc in proptest::bool::ANY,
        ) {
            let cmp = if desc { Cmp::LexDesc } else { Cmp::Lex };
            let mut leaf = Leaf::new();
            for (tail, dups, v, expired, value) in &recs {
                let mut key = b"user:0000/".to_vec();
                key.extend_from_slice(tail);
                for d in 0..=u64::from(*dups) {
                    let dup = if d == 0 { 0 } else { d.wrapping_sub(2) };
                    let (i, hit) = leaf.find_dup(cmp, &key, dup);
                    let m = Meta {
                        flags: (*v as u32) * 7,
                        expires: if *expired { 1 } else if *v == 2 { 4_000_000_000 } else { 0 },
                        version: 1000 + v * 3 + d,
                    };
                    if hit {
                        leaf.replace(i, value, &m);
                    } else {
                        leaf.insert(i, &key, value, &m, dup);
                    }
                }
            }
            let mut img = Vec::new();
            leaf.encode_image_with(&mut img, (None, None), restart);
            let back = Leaf::decode_image(&img, Some(cmp)).unwrap();
            proptest::prop_assert_eq!(back.len(), leaf.len());
            let mut keys: Vec<Vec<u8>> = (0..leaf.len()).map(|i| leaf.key(i).to_vec()).collect();
            keys.extend(probes.iter().map(|p| {
                let mut k = b"user:0000/".to_vec();
                k.extend_from_slice(p);
                k
            }));
            keys.push(Vec::new());
            keys.push(b"zzz".to_vec());
            for k in keys {
                let got = Leaf::find_in_image(&img, cmp, &k).unwrap();
                let (i, hit) = back.find(cmp, &k);
                let want = hit.then(|| {
                    let e = back.entry(i);
                    ImageEntry { value: e.value, meta: e.meta, dup: e.dup }
                });
                proptest::prop_assert_eq!(got, want);
            }
        }
    }

    #[test]
    fn damaged_images_are_refused_by_lookups_without_a_panic() {
        let l = fill(0..200);
        for restart in [None, Some(16)] {
            let mut img = Vec::new();
            l.encode_image_with(&mut img, (Some(b"00000000"), None), restart);
            assert!(Leaf::decode_image(&img, Some(Cmp::Lex)).is_ok());
            let e = Leaf::find_in_image(&img, Cmp::Lex, b"00000123")
                .unwrap()
                .unwrap();
            assert_eq!(e.value, b"00000123");
            assert_eq!(e.meta, meta(123));
            for cut in 0..img.len() {
                assert!(Leaf::decode_image(&img[..cut], Some(Cmp::Lex)).is_err());
                let _ = Leaf::find_in_image(&img[..cut], Cmp::Lex, b"00000123");
            }
            for at in 0..img.len() {
                let mut bad = img.clone();
                bad[at] ^= 0x5a;
                let _ = Leaf::decode_image(&bad, Some(Cmp::Lex));
                let _ = Leaf::find_in_image(&bad, Cmp::Lex, b"00000199");
                crate::tree::fuzzing::image(&bad);
            }
            crate::tree::fuzzing::image(&img);
        }
    }
}
