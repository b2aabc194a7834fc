//! Reading a segment's records back in order, and telling damage from a torn tail.
//!
//! A segment is a run of checksummed records with no markers between them. A scan walks it
//! record by record. When a record fails its checksum, the scan looks for the next offset at
//! which any record verifies (`Finder`: every byte offset is a candidate, as the damaged
//! record's length cannot be trusted). What it finds decides what the failure was:
//!
//! - a verified record further on: **damage** (`Damage`): bytes that were written whole and
//!   changed since. The scan reports the region and goes on from the record it found;
//! - nothing up to the end of the range: a **tail** (`Tail`) — what a crash leaves when a write
//!   is cut short. Whether it really is one is the caller's to decide (a tail below what a
//!   checkpoint knew to be durable is damage too).
//!
//! A segment whose header records a synced length (`Bytes::layout`, format version 4) narrows
//! the second case: a failure at or past that length ends the range as a tail at once, whatever
//! verifies after it — a write-back that does not go in file order can leave a hole before
//! intact records that no sync covered (never acknowledged as durable). A failure before it is
//! looked past as above. The range starts no earlier than the segment's first record.
//!
//! A batch frame is a record holding complete records, each with its own checksum. When the
//! frame fails, the records of it that verify, in order from its first, are *salvaged*: shown to
//! the caller as such in a damaged region (so one damaged byte costs only the record it is in),
//! and kept aside in a tail (a torn batch is dropped whole: it was never acknowledged).
//!
//! Verifying a candidate costs a checksum over its claimed length, and in random bytes (a
//! damaged compressed value) claimed lengths are often megabytes: checking every offset that
//! way is quadratic. A candidate longer than `SHORT` is verified instead from the checksums of
//! the region's 4 KiB blocks, computed once (`Prefix`), plus two partial blocks: CRCs combine
//! (the CRC of `A ‖ B` is `CRC(A) · x^(8|B|) ⊕ CRC(B)` modulo the polynomial), so the CRC of any
//! range follows from the CRCs of the blocks around it in microseconds.

use super::format::{self, Header, MAX_HEADER_LEN, T_BATCH, T_DELETE, T_PUT};
use crate::error::Result;

/// Candidates no longer than this are checked from the scan's window directly.
const SHORT: usize = 64 << 10;
/// Bytes a window covers beyond `SHORT` (a read of `WINDOW + SHORT` bytes). Small in tests, so
/// that their small segments cross window boundaries.
#[cfg(not(test))]
const WINDOW: usize = 1 << 20;
#[cfg(test)]
const WINDOW: usize = 4 << 10;
/// An empty put of seq 0: what eight zero bytes parse as.
const ZERO_RECORD: usize = 8;
/// Block size of the prefix checksums used for long candidates.
const BLOCK: u64 = 4 << 10;

/// Where a scan reads a segment's bytes.
pub(crate) trait Bytes {
    /// Exactly `len` bytes at `off` into `out` (replacing its contents).
    fn read(&mut self, off: u64, len: usize, out: &mut Vec<u8>) -> Result<()>;

    /// Where the segment's records start and the synced length its header records (by
    /// default neither: records from where the caller says, no synced length).
    fn layout(&mut self) -> Result<format::SegLayout> {
        Ok(format::SegLayout::PLAIN)
    }
}

/// A damaged region: bytes of a segment that held records whole and no longer verify, followed
/// by a record that does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Damage {
    pub off: u64,
    pub len: u64,
    /// Records known lost in it: each record whose header still parses counts one (a batch
    /// frame, its inner records that do not verify), a stretch that does not parse counts one.
    pub lost: u64,
    /// Inner records of a damaged batch frame in it that verify (offsets), also shown to the
    /// scan's callback as salvaged.
    pub salvaged: Vec<u64>,
}

/// Bytes at the end of a range in which no record verifies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Tail {
    pub off: u64,
    pub len: u64,
    /// Whether every byte of it is zero (space written ahead of the log, not a record).
    pub zeros: bool,
    /// As `Damage::lost`, if the tail turns out to be damage.
    pub lost: u64,
    /// Verified inner records of a batch frame the tail starts with (not shown to the
    /// callback: a torn batch is dropped whole).
    pub salvaged: Vec<u64>,
}

/// What a scan of a range found besides its verified records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Scanned {
    pub damage: Vec<Damage>,
    pub tail: Option<Tail>,
    /// Set when the callback stopped the scan: where to resume.
    pub stopped: Option<u64>,
    /// The synced length the segment's header records: a tail before it is damage
    /// (`recovery::classify`).
    pub synced: Option<u64>,
    /// Where the range scanned ended (the file's end, for a scan to it).
    pub end: u64,
}

impl Scanned {
    /// Where the verified records of the range end (the tail's start, or `end`).
    pub fn valid_end(&self, end: u64) -> u64 {
        self.stopped
            .or(self.tail.as_ref().map(|t| t.off))
            .unwrap_or(end)
    }
}

/// Scan `[from, end)`, calling `f(offset, header, record, salvaged)` for each record that
/// verifies, in order (`salvaged`: an inner record of a damaged batch frame, reached through
/// its frame). `f` returns false to stop. Damage does not stop a scan; errors are read errors.
pub(crate) fn scan(
    src: &mut dyn Bytes,
    seed: u32,
    from: u64,
    end: u64,
    f: impl FnMut(u64, &Header, &[u8], bool) -> Result<bool>,
) -> Result<Scanned> {
    scan_with(src, seed, from, end, SHORT, f)
}

/// `scan`, checking candidates longer than `short` bytes through the block checksums.
fn scan_with(
    src: &mut dyn Bytes,
    seed: u32,
    from: u64,
    end: u64,
    short: usize,
    mut f: impl FnMut(u64, &Header, &[u8], bool) -> Result<bool>,
) -> Result<Scanned> {
    let layout = src.layout()?;
    let from = from.max(layout.data);
    let end = end.max(from);
    let mut out = Scanned {
        synced: layout.synced,
        end,
        ..Scanned::default()
    };
    let mut win = Window::default();
    let mut finder = Finder::new(seed, from, end);
    finder.short = short;
    let mut off = from;
    while off < end {
        if let Some((h, rec)) = win.valid(src, seed, off, end)? {
            let len = h.len as u64;
            if !f(off, &h, rec, false)? {
                out.stopped = Some(off + len);
                return Ok(out);
            }
            off += len;
            continue;
        }
        // A failure at `off`: a batch frame's inner records first, then anything further on.
        let salvaged = inner_chain(src, &mut win, seed, off, end)?;
        let search = salvaged
            .last()
            .map_or(off + 1, |&(at, len)| at + len as u64);
        // Past the synced length, the first failure ends the range.
        let next = if layout.synced.is_some_and(|s| off >= s) {
            None
        } else {
            finder.find(src, search)?
        };
        let stop = next.unwrap_or(end);
        let lost = lost_in(src, &mut win, off, stop, &salvaged)?;
        let at: Vec<u64> = salvaged.iter().map(|s| s.0).collect();
        match next {
            Some(q) => {
                for &s in &at {
                    let Some((h, rec)) = win.valid(src, seed, s, end)? else {
                        continue; // verified a moment ago; a read error would have surfaced
                    };
                    if !f(s, &h, rec, true)? {
                        out.stopped = Some(s + h.len as u64);
                        return Ok(out);
                    }
                }
                out.damage.push(Damage {
                    off,
                    len: q - off,
                    lost,
                    salvaged: at,
                });
                off = q;
            }
            None => {
                out.tail = Some(Tail {
                    off,
                    len: end - off,
                    zeros: all_zeros(src, off, end)?,
                    lost,
                    salvaged: at,
                });
                return Ok(out);
            }
        }
    }
    Ok(out)
}

/// When the record at `off` parses as a batch frame: its inner records that verify, in order
/// from the first, up to the first that does not (offset, length).
fn inner_chain(
    src: &mut dyn Bytes,
    win: &mut Window,
    seed: u32,
    off: u64,
    end: u64,
) -> Result<Vec<(u64, usize)>> {
    let mut found = Vec::new();
    let Some(h) = win.header(src, off, end)? else {
        return Ok(found);
    };
    if h.typ != T_BATCH {
        return Ok(found);
    }
    let frame_end = off.saturating_add(h.len as u64).min(end);
    let mut pos = off + h.key_off as u64;
    while pos < frame_end {
        match win.valid(src, seed, pos, frame_end)? {
            Some((s, _)) if s.typ == T_PUT || s.typ == T_DELETE => {
                found.push((pos, s.len));
                pos += s.len as u64;
            }
            _ => break,
        }
    }
    Ok(found)
}

/// Records known lost in `[off, stop)`, where the inner records `salvaged` of a batch frame at
/// `off` verified: a frame lying wholly in the range loses its other records; after that (or
/// else) every record whose header still parses counts one, and a stretch that does not parse
/// one more.
fn lost_in(
    src: &mut dyn Bytes,
    win: &mut Window,
    off: u64,
    stop: u64,
    salvaged: &[(u64, usize)],
) -> Result<u64> {
    let mut lost = 0;
    let mut at = off;
    if let Some(h) = win.header(src, off, stop)?.filter(|h| h.typ == T_BATCH) {
        if h.len as u64 <= stop - off {
            lost = h.count.saturating_sub(salvaged.len() as u64);
            at = off + h.len as u64;
        } else {
            // The frame runs on past the range: what follows in it was found.
            at = salvaged
                .last()
                .map_or(off + h.key_off as u64, |&(o, len)| o + len as u64);
        }
        if at >= stop {
            return Ok(lost);
        }
    }
    while at < stop {
        match win.header(src, at, stop)? {
            // (Zeros parse as an empty record: they are a stretch that does not parse.)
            Some(h) if (h.len as u64) <= stop - at && !win.zeros(src, at, h.len, stop)? => {
                lost += 1;
                at += h.len as u64;
            }
            _ => {
                lost += 1;
                break;
            }
        }
    }
    Ok(lost)
}

fn all_zeros(src: &mut dyn Bytes, from: u64, end: u64) -> Result<bool> {
    let mut buf = Vec::new();
    let mut at = from;
    while at < end {
        let n = ((end - at) as usize).min(WINDOW);
        src.read(at, n, &mut buf)?;
        if buf.iter().any(|&b| b != 0) {
            return Ok(false);
        }
        at += n as u64;
    }
    Ok(true)
}

/// A buffer over part of the range, read a window at a time.
#[derive(Default)]
struct Window {
    buf: Vec<u8>,
    /// The offset of `buf[0]`.
    start: u64,
}

impl Window {
    /// Hold `[off, off + want)` (cut at `end`), reading a fresh window when it is not held.
    fn hold(&mut self, src: &mut dyn Bytes, off: u64, want: usize, end: u64) -> Result<&[u8]> {
        let want = (want as u64).min(end - off) as usize;
        let held_end = self.start + self.buf.len() as u64;
        if off < self.start || off + want as u64 > held_end {
            let n = ((end - off) as usize).min(want.max(WINDOW + SHORT));
            src.read(off, n, &mut self.buf)?;
            self.start = off;
        }
        let rel = (off - self.start) as usize;
        Ok(&self.buf[rel..rel + want])
    }

    /// Whether the `len` bytes at `off` are all zero.
    fn zeros(&mut self, src: &mut dyn Bytes, off: u64, len: usize, end: u64) -> Result<bool> {
        Ok(self.hold(src, off, len, end)?.iter().all(|&b| b == 0))
    }

    /// The header at `off`, if one parses (its record may run past `end`).
    fn header(&mut self, src: &mut dyn Bytes, off: u64, end: u64) -> Result<Option<Header>> {
        Ok(format::parse_header(self.hold(
            src,
            off,
            MAX_HEADER_LEN,
            end,
        )?))
    }

    /// The record at `off` when it lies within `end` and verifies.
    fn valid(
        &mut self,
        src: &mut dyn Bytes,
        seed: u32,
        off: u64,
        end: u64,
    ) -> Result<Option<(Header, &[u8])>> {
        let Some(h) = self.header(src, off, end)? else {
            return Ok(None);
        };
        if h.len as u64 > end - off {
            return Ok(None);
        }
        let rec = self.hold(src, off, h.len, end)?;
        Ok(format::verify(rec, seed).then_some((h, rec)))
    }
}

/// Finds the first offset at or after a point where a record verifies.
pub(crate) struct Finder {
    seed: u32,
    end: u64,
    /// Whether `ZERO_RECORD` zero bytes verify as a record under this seed: almost never, and
    /// then runs of zeros are skipped without checking each offset.
    zero_record: bool,
    /// Candidates up to this long are verified from the window (`SHORT`; less in tests).
    short: usize,
    prefix: Prefix,
    buf: Vec<u8>,
    part: Vec<u8>,
}

impl Finder {
    pub fn new(seed: u32, from: u64, end: u64) -> Finder {
        Finder {
            seed,
            end,
            zero_record: format::verify(&[0u8; ZERO_RECORD], seed),
            short: SHORT,
            prefix: Prefix::new(from),
            buf: Vec::new(),
            part: Vec::new(),
        }
    }

    /// The first offset in `[at, end)` where a record verifies.
    pub fn find(&mut self, src: &mut dyn Bytes, at: u64) -> Result<Option<u64>> {
        let end = self.end;
        let mut wstart = at;
        while wstart < end {
            let n = ((end - wstart) as usize).min(WINDOW + SHORT);
            src.read(wstart, n, &mut self.buf)?;
            // Candidates starting in this window; the next window starts where they stop.
            let last = if wstart + n as u64 == end { n } else { WINDOW };
            let mut rel = 0usize;
            while rel < last {
                let b = &self.buf[rel..];
                if b[0] == 0 && !self.zero_record {
                    // In a run of zeros every offset with `ZERO_RECORD` zeros ahead parses as
                    // the same empty record, which does not verify: go to the run's last few.
                    let run = b.iter().position(|&x| x != 0).unwrap_or(b.len());
                    if run >= ZERO_RECORD {
                        rel += run - (ZERO_RECORD - 1);
                        continue;
                    }
                }
                let q = wstart + rel as u64;
                if let Some(h) = format::parse_header(&b[..b.len().min(MAX_HEADER_LEN)]) {
                    let len = h.len as u64;
                    if len >= 5 && len <= end - q {
                        let ok = if h.len <= self.short && h.len <= b.len() {
                            format::verify(&b[..h.len], self.seed)
                        } else {
                            let stored = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                            self.verify_long(src, q, len, stored)?
                        };
                        if ok {
                            return Ok(Some(q));
                        }
                    }
                }
                rel += 1;
            }
            wstart += rel as u64;
        }
        Ok(None)
    }

    /// Verify the record claimed at `q` (`len` bytes, its stored checksum `stored`) from the
    /// block checksums.
    fn verify_long(&mut self, src: &mut dyn Bytes, q: u64, len: u64, stored: u32) -> Result<bool> {
        let (a, e) = (q + 4, q + len);
        let body = self.prefix.range_crc(src, a, e, &mut self.part)?;
        Ok(shift(self.seed, e - a) ^ body == stored)
    }
}

/// CRC32C of the region's blocks from its start: `crcs[k]` covers `[from, from + k·BLOCK)`.
struct Prefix {
    from: u64,
    crcs: Vec<u32>,
    buf: Vec<u8>,
}

impl Prefix {
    fn new(from: u64) -> Prefix {
        Prefix {
            from,
            crcs: vec![0],
            buf: Vec::new(),
        }
    }

    /// The prefix checksum through block `k` (reading the blocks not yet covered).
    fn at(&mut self, src: &mut dyn Bytes, k: usize) -> Result<u32> {
        while self.crcs.len() <= k {
            let have = self.crcs.len() - 1;
            let blocks = (k - have).min(WINDOW / BLOCK as usize);
            let off = self.from + have as u64 * BLOCK;
            src.read(off, blocks * BLOCK as usize, &mut self.buf)?;
            let mut c = self.crcs[have];
            for chunk in self.buf.chunks(BLOCK as usize) {
                c = crc32c::crc32c_append(c, chunk);
                self.crcs.push(c);
            }
        }
        Ok(self.crcs[k])
    }

    /// CRC32C of the bytes `[a, e)`, which lie in the region.
    fn range_crc(
        &mut self,
        src: &mut dyn Bytes,
        a: u64,
        e: u64,
        part: &mut Vec<u8>,
    ) -> Result<u32> {
        let ka = (a - self.from).div_ceil(BLOCK) as usize;
        let ke = ((e - self.from) / BLOCK) as usize;
        if ka >= ke {
            src.read(a, (e - a) as usize, part)?;
            return Ok(crc32c::crc32c(part));
        }
        let (ba, be) = (self.from + ka as u64 * BLOCK, self.from + ke as u64 * BLOCK);
        src.read(a, (ba - a) as usize, part)?;
        let head = crc32c::crc32c(part);
        let mid = self.at(src, ke)? ^ shift(self.at(src, ka)?, be - ba);
        src.read(be, (e - be) as usize, part)?;
        let tail = crc32c::crc32c(part);
        Ok(shift(shift(head, be - ba) ^ mid, e - be) ^ tail)
    }
}

/// The CRC32C polynomial, reflected.
const POLY: u32 = 0x82f6_3b78;

/// `a · b` modulo the polynomial (both reflected, x⁰ in the top bit).
const fn mult_mod(a: u32, mut b: u32) -> u32 {
    let mut m: u32 = 1 << 31;
    let mut p = 0;
    loop {
        if a & m != 0 {
            p ^= b;
            if a & (m - 1) == 0 {
                return p;
            }
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
}

/// `x^(2^k)` modulo the polynomial, for k in 0..64.
const X2N: [u32; 64] = {
    let mut t = [0u32; 64];
    let mut p: u32 = 1 << 30; // x¹
    let mut k = 0;
    while k < 64 {
        t[k] = p;
        p = mult_mod(p, p);
        k += 1;
    }
    t
};

/// The CRC32C of `A ‖ n zero bytes`… less those zeros' own CRC: what `crc` (of some `A`)
/// contributes to the CRC of `A ‖ B` for any `n`-byte `B`. So `CRC(A ‖ B) = shift(CRC(A),
/// |B|) ⊕ CRC(B)`, and `crc32c_append(seed, B) = shift(seed, |B|) ⊕ CRC(B)`.
fn shift(crc: u32, n: u64) -> u32 {
    if n == 0 {
        return crc;
    }
    // x^(8n) as the product of x^(2^k) for the set bits of 8n.
    let mut x: u32 = 1 << 31;
    let mut bits = n;
    let mut k = 3;
    while bits != 0 {
        if bits & 1 != 0 {
            x = mult_mod(X2N[k], x);
        }
        bits >>= 1;
        k += 1;
    }
    mult_mod(x, crc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::format::{encode_batch_header, encode_delete, encode_put, seal, PutFields};

    struct Mem(Vec<u8>);

    impl Bytes for Mem {
        fn read(&mut self, off: u64, len: usize, out: &mut Vec<u8>) -> Result<()> {
            out.clear();
            out.extend_from_slice(&self.0[off as usize..off as usize + len]);
            Ok(())
        }
    }

    const SEED: u32 = 0x1234_5678;

    fn rng(seed: u64) -> impl FnMut() -> u64 {
        let mut s = seed | 1;
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        }
    }

    fn put(out: &mut Vec<u8>, key: &[u8], value: &[u8], seq: u64) -> u64 {
        let at = out.len();
        let f = PutFields {
            seq,
            ..PutFields::default()
        };
        encode_put(out, key, value, &f);
        seal(&mut out[at..], SEED);
        at as u64
    }

    /// A batch frame of `n` puts; the offsets of its inner records.
    fn batch(out: &mut Vec<u8>, n: usize, seq: u64) -> (u64, Vec<u64>) {
        let mut body = Vec::new();
        let mut inner = Vec::new();
        for i in 0..n {
            inner.push(body.len());
            put(
                &mut body,
                format!("b{seq}-{i}").as_bytes(),
                b"batched",
                seq + i as u64,
            );
        }
        let at = out.len();
        encode_batch_header(out, body.len(), n);
        let base = out.len();
        out.extend_from_slice(&body);
        seal(&mut out[at..], SEED);
        (
            at as u64,
            inner.iter().map(|&i| (base + i) as u64).collect(),
        )
    }

    fn offsets(img: &[u8], from: u64) -> (Vec<(u64, bool)>, Scanned) {
        let mut seen = Vec::new();
        let s = scan(
            &mut Mem(img.to_vec()),
            SEED,
            from,
            img.len() as u64,
            |o, _, _, salv| {
                seen.push((o, salv));
                Ok(true)
            },
        )
        .unwrap();
        (seen, s)
    }

    #[test]
    fn shift_combines_like_the_crate() {
        let mut r = rng(7);
        for _ in 0..200 {
            let (a, b) = (r() as u32, r() as u32);
            let n = (r() % 5_000_000) as usize;
            assert_eq!(shift(a, n as u64) ^ b, crc32c::crc32c_combine(a, b, n));
        }
        let data: Vec<u8> = (0..10_000).map(|_| r() as u8).collect();
        for _ in 0..100 {
            let i = (r() % 10_000) as usize;
            let (x, y) = data.split_at(i);
            assert_eq!(
                shift(crc32c::crc32c(x), y.len() as u64) ^ crc32c::crc32c(y),
                crc32c::crc32c(&data)
            );
            assert_eq!(
                shift(SEED, y.len() as u64) ^ crc32c::crc32c(y),
                crc32c::crc32c_append(SEED, y)
            );
        }
    }

    #[test]
    fn range_crc_matches_a_direct_checksum() {
        let mut r = rng(11);
        let data: Vec<u8> = (0..200_000).map(|_| r() as u8).collect();
        let mut src = Mem(data.clone());
        let from = 37;
        let mut p = Prefix::new(from);
        let mut part = Vec::new();
        for _ in 0..300 {
            let a = from + r() % (data.len() as u64 - from);
            let e = a + r() % (data.len() as u64 - a + 1);
            let want = crc32c::crc32c(&data[a as usize..e as usize]);
            assert_eq!(
                p.range_crc(&mut src, a, e, &mut part).unwrap(),
                want,
                "[{a}, {e})"
            );
        }
    }

    #[test]
    fn clean_records_scan_with_nothing_found() {
        let mut img = vec![0u8; 32];
        let mut at = Vec::new();
        for i in 0..50u64 {
            at.push(put(&mut img, format!("k{i}").as_bytes(), b"v", i + 1));
        }
        let (seen, s) = offsets(&img, 32);
        assert_eq!(seen, at.iter().map(|&o| (o, false)).collect::<Vec<_>>());
        assert_eq!(
            s,
            Scanned {
                end: img.len() as u64,
                ..Scanned::default()
            }
        );
    }

    /// Any damage followed by a valid record is damage, with every record after it found; the
    /// same damage at the very end is a tail.
    #[test]
    fn a_flip_in_the_middle_is_damage_and_at_the_end_a_tail() {
        let mut img = vec![0u8; 32];
        let mut at = Vec::new();
        for i in 0..40u64 {
            at.push(put(
                &mut img,
                format!("key{i}").as_bytes(),
                &[i as u8; 30],
                i + 1,
            ));
        }
        for (victim, byte) in [
            (10usize, 0usize),
            (10, 3),
            (10, 4),
            (10, 6),
            (10, 20),
            (39, 1),
        ] {
            let mut d = img.clone();
            d[at[victim] as usize + byte] ^= 0x5a;
            let (seen, s) = offsets(&d, 32);
            let want: Vec<_> = at
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != victim)
                .map(|(_, &o)| (o, false))
                .collect();
            assert_eq!(seen, want, "victim {victim} byte {byte}");
            if victim == 39 {
                assert!(s.damage.is_empty());
                let t = s.tail.unwrap();
                assert_eq!(
                    (t.off, t.len, t.zeros),
                    (at[39], img.len() as u64 - at[39], false)
                );
            } else {
                assert_eq!(s.tail, None);
                assert_eq!(s.damage.len(), 1);
                let d = &s.damage[0];
                assert_eq!(
                    (d.off, d.len, d.lost),
                    (at[victim], at[victim + 1] - at[victim], 1)
                );
            }
        }
    }

    #[test]
    fn a_zeroed_page_is_found_and_records_after_it_kept() {
        let mut img = vec![0u8; 32];
        let mut at = Vec::new();
        for i in 0..400u64 {
            at.push(put(
                &mut img,
                format!("key{i}").as_bytes(),
                &[7u8; 40],
                i + 1,
            ));
        }
        img[4096..8192].fill(0);
        let (seen, s) = offsets(&img, 32);
        let kept: Vec<_> = at
            .iter()
            .zip(at.iter().skip(1).chain([&(img.len() as u64)]))
            .filter(|(&a, &b)| b <= 4096 || a >= 8192)
            .map(|(&a, _)| (a, false))
            .collect();
        assert_eq!(seen, kept);
        assert_eq!(s.damage.len(), 1);
        let d = &s.damage[0];
        let first_hit = at.iter().rposition(|&a| a < 4096).unwrap();
        let first_after = at.iter().position(|&a| a >= 8192).unwrap();
        assert_eq!(d.off, at[first_hit]);
        assert_eq!(d.off + d.len, at[first_after]);
        assert!(d.lost >= 1 && d.lost <= (first_after - first_hit) as u64);
    }

    /// A torn tail: a record cut short, then nothing or zeros written ahead of the log.
    #[test]
    fn a_cut_record_then_zeros_is_a_tail() {
        let mut img = vec![0u8; 32];
        for i in 0..10u64 {
            put(&mut img, format!("k{i}").as_bytes(), b"value", i + 1);
        }
        let last = put(&mut img, b"last", &[3u8; 5000], 11);
        let full = img.len();
        for cut in [last as usize + 3, last as usize + 100, full - 1] {
            for zeros in [0usize, 10_000] {
                let mut d = img[..cut].to_vec();
                d.resize(cut + zeros, 0);
                let (seen, s) = offsets(&d, 32);
                assert_eq!(seen.len(), 10);
                assert!(s.damage.is_empty());
                let t = s.tail.unwrap();
                assert_eq!(t.off, last);
                assert!(!t.zeros);
            }
        }
        let mut z = img.clone();
        z.resize(full + (3 << 20), 0);
        let (seen, s) = offsets(&z, 32);
        assert_eq!(seen.len(), 11);
        let t = s.tail.unwrap();
        assert_eq!((t.off, t.zeros), (full as u64, true));
    }

    #[test]
    fn a_damaged_batch_salvages_its_records_and_a_torn_one_is_a_tail() {
        let mut img = vec![0u8; 32];
        let before = put(&mut img, b"before", b"x", 1);
        let (frame, inner) = batch(&mut img, 20, 100);
        let after = put(&mut img, b"after", b"y", 500);
        // One inner record damaged: the other 19 are salvaged, the one lost.
        let mut d = img.clone();
        d[inner[7] as usize + 9] ^= 1;
        let (seen, s) = offsets(&d, 32);
        let mut want = vec![(before, false)];
        want.extend(inner[..7].iter().map(|&o| (o, true)));
        want.extend(inner[8..].iter().map(|&o| (o, false)));
        want.push((after, false));
        assert_eq!(seen, want);
        assert_eq!(s.damage.len(), 1);
        assert_eq!((s.damage[0].off, s.damage[0].lost), (frame, 1));
        assert_eq!(s.damage[0].salvaged, inner[..7].to_vec());
        // The frame's header damaged: its records are found all the same, nothing lost
        // but the frame.
        let mut d = img.clone();
        d[frame as usize + 5] ^= 0xff;
        let (seen, s) = offsets(&d, 32);
        assert_eq!(seen.len(), 22);
        assert_eq!(s.damage.len(), 1);
        // Torn: the frame cut inside its 12th record, zeros after. A tail, keeping aside the
        // eleven whole inner records, none of them shown.
        let mut t = img[..inner[11] as usize + 5].to_vec();
        t.resize(t.len() + 4096, 0);
        let (seen, s) = offsets(&t, 32);
        assert_eq!(seen, vec![(before, false)]);
        let tail = s.tail.unwrap();
        assert_eq!(
            (tail.off, tail.salvaged.clone()),
            (frame, inner[..11].to_vec())
        );
        assert!(s.damage.is_empty());
    }

    /// A damaged header before a long record of random bytes: the long record behind it is
    /// found through the block checksums, and quickly.
    #[test]
    fn long_records_after_damage_are_found_in_linear_time() {
        let mut r = rng(3);
        let mut img = vec![0u8; 32];
        let noise: Vec<u8> = (0..3 << 20).map(|_| r() as u8).collect();
        let a = put(&mut img, b"first", &noise[..1 << 20], 1);
        let b = put(&mut img, b"second", &noise[1 << 20..], 2);
        let c = put(&mut img, b"third", b"short", 3);
        img[a as usize + 5] ^= 0x80; // the key length varint: the header no longer describes it
        let t = std::time::Instant::now();
        let (seen, s) = offsets(&img, 32);
        assert_eq!(seen, vec![(b, false), (c, false)]);
        assert_eq!(s.damage[0].off, a);
        // Without the block checksums this takes minutes.
        assert!(
            t.elapsed() < std::time::Duration::from_secs(30),
            "{:?}",
            t.elapsed()
        );
    }

    fn verifies_at(img: &[u8], q: u64) -> bool {
        format::parse_header(&img[q as usize..])
            .filter(|h| q + h.len as u64 <= img.len() as u64)
            .is_some_and(|h| format::verify(&img[q as usize..q as usize + h.len], SEED))
    }

    #[test]
    fn zeros_parse_as_the_record_the_finder_skips() {
        let h = format::parse_header(&[0u8; 64]).unwrap();
        assert_eq!(h.len, ZERO_RECORD);
    }

    /// Random records, then random bytes over them: every record shown verifies, and after
    /// each failure the scan resumes at the first offset where a record verifies (by brute
    /// force), with long candidates checked through the block checksums half of the time.
    #[test]
    fn damage_regions_end_where_brute_force_finds_the_next_record() {
        let mut r = rng(5);
        for trial in 0..400 {
            let mut img = vec![0u8; 32];
            for i in 0..1 + r() % 12 {
                match r() % 3 {
                    0 => {
                        let v = vec![i as u8; (r() % 300) as usize];
                        put(&mut img, format!("k{i}").as_bytes(), &v, i + 1);
                    }
                    1 => {
                        let at = img.len();
                        encode_delete(&mut img, format!("k{i}").as_bytes(), i + 1);
                        seal(&mut img[at..], SEED);
                    }
                    _ => {
                        batch(&mut img, 1 + (r() % 5) as usize, 100 * i);
                    }
                }
            }
            for _ in 0..1 + r() % 4 {
                let at = 32 + (r() % (img.len() as u64 - 32)) as usize;
                let len = (1 + r() % 32).min((img.len() - at) as u64) as usize;
                for b in &mut img[at..at + len] {
                    *b = r() as u8;
                }
            }
            let short = if trial % 2 == 0 { SHORT } else { 16 };
            let mut seen = Vec::new();
            let end = img.len() as u64;
            let s = scan_with(&mut Mem(img.clone()), SEED, 32, end, short, |o, _, _, _| {
                seen.push(o);
                Ok(true)
            })
            .unwrap();
            for &o in &seen {
                assert!(verifies_at(&img, o), "trial {trial}: offset {o}");
            }
            let resumes = |off: u64, salvaged: &[u64]| {
                let from = salvaged.last().map_or(off + 1, |&o| {
                    o + format::parse_header(&img[o as usize..]).unwrap().len as u64
                });
                (from..end).find(|&q| verifies_at(&img, q))
            };
            for d in &s.damage {
                assert_eq!(
                    resumes(d.off, &d.salvaged),
                    Some(d.off + d.len),
                    "trial {trial}"
                );
            }
            if let Some(t) = &s.tail {
                assert_eq!(resumes(t.off, &t.salvaged), None, "trial {trial}");
                assert_eq!(t.off + t.len, end);
            }
            assert!(verifies_at(&img, 32) || seen.first() != Some(&32));
        }
    }
}
