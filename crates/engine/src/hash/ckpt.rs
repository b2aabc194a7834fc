//! One shard's section of an index checkpoint (`index.ki`, layout in docs/ARCHITECTURE.md): the
//! shard's slots in tag order, as its table holds them, bit-packed.
//!
//! Each slot is the difference from the previous slot's tag in a Rice code, the index of its
//! segment among the segments the shard points into, and its offset in that segment, each of
//! the fewest bits that hold every value in the shard. Neither side sorts: the encoder reads
//! the slots in the order the table gives them, and the loader builds the table in one
//! sequential pass from the order they come in. About 5.6 bytes a slot for a million records
//! in one 26 MB segment (the tag in about 20 bits, the offset in 25).
//!
//! ```text
//! u64 seq       the shard's seq
//! u32 n         slots
//! u32 bytes     length of the rest of the section
//! u8  k         Rice parameter of the tag differences (0..=31)
//! u8  wseg      bits of a segment index (0..=32)
//! u8  woff      bits of an offset (0..=32)
//! u32 m         segments pointed into, then m × u32 their ids, ascending
//! bits          n × (tag difference d: q = d >> k as q one-bits and a zero, then the k low
//!               bits of d; or, when q >= 32, 32 one-bits and then the 32 bits of d;
//!               segment index, wseg bits; offset, woff bits), least significant bit
//!               first, padded with zeros to a whole byte
//! ```

use super::index::{radix_sort_with, Slot};

/// Bytes of a section before its segment ids.
const FIXED: usize = 8 + 4 + 4 + 3 + 4;
/// The unary part of a tag difference at or beyond this is escaped (the difference in full).
const ESCAPE: u64 = 32;

/// Reused buffers for `encode`.
#[derive(Default)]
pub struct Scratch {
    sort: Vec<Slot>,
    /// Segment index by id, for ids under `DENSE_IDS` (`u32::MAX`: not pointed into).
    dense: Vec<u32>,
    ids: Vec<u32>,
}

/// Bits needed to write every value up to `max`.
fn width(max: u64) -> u8 {
    (64 - max.leading_zeros()) as u8
}

/// Encode a shard's section to `out`. `v` is the shard's slots, normally in tag order (they
/// are sorted here if they are not).
pub fn encode(seq: u64, v: &mut Vec<Slot>, scratch: &mut Scratch, out: &mut Vec<u8>) {
    let n = v.len();
    let mut k = rice_guess(v);
    // Pass 1: order, offset width, segments (marked in `dense` by id while ids are small),
    // and the length of the tag codes for three Rice parameters around the guess.
    let (mut sorted, mut prev) = (true, 0u32);
    let (mut lo, mut hi, mut max_off) = (u32::MAX, 0u32, 0u32);
    let cands = [k.saturating_sub(1), k, (k + 1).min(31)];
    let mut cost = [0u64; 3];
    let dense = &mut scratch.dense;
    dense.clear();
    for s in v.iter() {
        sorted &= s.tag >= prev;
        let d = s.tag.wrapping_sub(prev) as u64;
        prev = s.tag;
        for (c, &k) in cost.iter_mut().zip(&cands) {
            *c += code_bits(d, k);
        }
        lo = lo.min(s.seg);
        hi = hi.max(s.seg);
        max_off = max_off.max(s.off);
        let i = s.seg as usize;
        if i < DENSE_IDS {
            if i >= dense.len() {
                dense.resize(i + 1, u32::MAX);
            }
            dense[i] = 0;
        }
    }
    if sorted {
        let best = (0..3).min_by_key(|&i| cost[i]).unwrap_or(1);
        k = cands[best];
    } else {
        radix_sort_with(v, &mut scratch.sort, |s| s.tag as u64);
        k = rice_guess(v);
    }

    // The segments pointed into, ascending, and each one's index among them.
    let ids = &mut scratch.ids;
    ids.clear();
    let by_id = (hi as usize) < DENSE_IDS;
    if by_id {
        for (id, m) in dense.iter_mut().enumerate().skip(lo.min(hi) as usize) {
            if *m == 0 {
                *m = ids.len() as u32;
                ids.push(id as u32);
            }
        }
    } else {
        ids.extend(v.iter().map(|s| s.seg));
        ids.sort_unstable();
        ids.dedup();
    }
    let wseg = width(ids.len().saturating_sub(1) as u64);
    let woff = width(max_off as u64);

    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&(n as u32).to_le_bytes());
    let len_at = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&[k, wseg, woff]);
    out.extend_from_slice(&(ids.len() as u32).to_le_bytes());
    for id in ids.iter() {
        out.extend_from_slice(&id.to_le_bytes());
    }
    out.reserve(n * 8 + 16);
    let mut w = BitWriter::new(out);
    let mut prev = 0u64;
    let low = (1u64 << k) - 1;
    for s in v.iter() {
        let d = s.tag as u64 - prev;
        prev = s.tag as u64;
        let q = d >> k;
        if q < ESCAPE {
            // q one-bits, a zero, then the k low bits: at most 63 bits.
            w.put(
                ((1u64 << q) - 1) | ((d & low) << (q + 1)),
                q as u32 + 1 + k as u32,
            );
        } else {
            w.put(u32::MAX as u64 | (d << 32), 64);
        }
        let j = if by_id {
            scratch.dense[s.seg as usize]
        } else {
            ids.binary_search(&s.seg).unwrap_or(0) as u32
        };
        w.put(
            j as u64 | ((s.off as u64) << wseg),
            wseg as u32 + woff as u32,
        );
    }
    w.finish();
    let rest = (out.len() - len_at - 4) as u32;
    out[len_at..len_at + 4].copy_from_slice(&rest.to_le_bytes());
}

/// Segment ids below this are mapped to their index through a table indexed by id.
const DENSE_IDS: usize = 1 << 16;

/// Bits of a tag difference `d` coded with Rice parameter `k`.
#[inline]
fn code_bits(d: u64, k: u8) -> u64 {
    let q = d >> k;
    if q < ESCAPE {
        q + 1 + k as u64
    } else {
        64
    }
}

/// The Rice parameter for slots in tag order: log2 of their mean difference (the last tag
/// over their number).
fn rice_guess(v: &[Slot]) -> u8 {
    match v.last() {
        None => 0,
        Some(s) => width(s.tag as u64 / v.len() as u64)
            .saturating_sub(1)
            .min(31),
    }
}

/// Where the section at `at` of `body` ends, and its number of slots (`None` when it does not
/// fit in `body`).
pub fn section_end(body: &[u8], at: usize) -> Option<(usize, usize)> {
    let n = le_u32(body, at + 8)? as usize;
    let rest = le_u32(body, at + 12)? as usize;
    let end = (at + 16).checked_add(rest)?;
    (end <= body.len()).then_some((end, n))
}

/// The ids of the segments the section at `at` of `body` points into (`None` when its head is
/// damaged).
pub fn section_ids(body: &[u8], at: usize) -> Option<Vec<u32>> {
    let (end, _) = section_end(body, at)?;
    let sec = body.get(at..end)?;
    let m = le_u32(sec, 19)? as usize;
    let ids = sec.get(FIXED..FIXED.checked_add(m.checked_mul(4)?)?)?;
    Some(
        ids.chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

/// Start decoding the section at `at` of `body` (its bounds checked by `section_end`): the
/// shard's seq, its number of slots, and the slots in ascending tag order as they are decoded
/// (check `Slots::intact` after taking them all). `None` when its head is damaged or names a
/// segment not in `known` (sorted).
pub fn decode<'a>(body: &'a [u8], at: usize, known: &[u32]) -> Option<(u64, usize, Slots<'a>)> {
    let seq = le_u64(body, at)?;
    let (end, n) = section_end(body, at)?;
    let sec = body.get(at..end)?;
    if sec.len() < FIXED {
        return None;
    }
    let (k, wseg, woff) = (sec[16], sec[17], sec[18]);
    if k > 31 || wseg > 32 || woff > 32 {
        return None;
    }
    let m = le_u32(sec, 19)? as usize;
    let ids_end = FIXED.checked_add(m.checked_mul(4)?)?;
    let ids: Vec<u32> = sec
        .get(FIXED..ids_end)?
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if ids.windows(2).any(|w| w[0] >= w[1]) || ids.iter().any(|id| known.binary_search(id).is_err())
    {
        return None;
    }
    let bits = &sec[ids_end..];
    // Every slot takes at least its zero bit, its k low bits and its location.
    let wloc = wseg as u32 + woff as u32;
    if n > bits.len().saturating_mul(8) / (1 + k as usize + wloc as usize) {
        return None;
    }
    let slots = Slots {
        r: BitReader::new(bits),
        ids,
        left: n,
        tag: 0,
        k: k as u32,
        wseg: wseg as u32,
        wloc,
        failed: false,
    };
    Some((seq, n, slots))
}

/// A section's slots, decoded one at a time (`decode`).
pub struct Slots<'a> {
    r: BitReader<'a>,
    ids: Vec<u32>,
    /// Slots not yet decoded.
    left: usize,
    /// The last slot's tag.
    tag: u64,
    k: u32,
    wseg: u32,
    /// `wseg` + the offset width.
    wloc: u32,
    failed: bool,
}

impl Slots<'_> {
    /// Whether every slot was decoded, each valid, and the bits ended in the section's last
    /// byte (the rest is padding).
    pub fn intact(&self) -> bool {
        !self.failed && self.left == 0 && self.r.used().div_ceil(8) == self.r.buf.len()
    }

    #[inline]
    fn decode_one(&mut self) -> Option<Slot> {
        let window = self.r.peek();
        let ones = window.trailing_ones();
        let d = if ones < ESCAPE as u32 {
            self.r.skip(ones + 1 + self.k);
            ((ones as u64) << self.k) | ((window >> (ones + 1)) & mask(self.k))
        } else {
            self.r.skip(64);
            window >> 32
        };
        self.tag += d;
        let loc = self.r.take(self.wloc);
        let (j, off) = ((loc & mask(self.wseg)) as usize, loc >> self.wseg);
        if self.tag > u32::MAX as u64 || off > u32::MAX as u64 {
            return None;
        }
        Some(Slot {
            tag: self.tag as u32,
            seg: *self.ids.get(j)?,
            off: off as u32,
        })
    }
}

impl Iterator for Slots<'_> {
    type Item = Slot;

    #[inline]
    fn next(&mut self) -> Option<Slot> {
        if self.left == 0 || self.failed {
            return None;
        }
        match self.decode_one() {
            Some(s) => {
                self.left -= 1;
                Some(s)
            }
            None => {
                self.failed = true;
                None
            }
        }
    }
}

/// The little-endian `u32` at `pos` of `buf`, if it is all there.
pub fn le_u32(buf: &[u8], pos: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        buf.get(pos..pos.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// The little-endian `u64` at `pos` of `buf`, if it is all there.
pub fn le_u64(buf: &[u8], pos: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        buf.get(pos..pos.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// Appends bits, least significant first, to a byte vector.
struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    acc: u128,
    /// Bits in `acc` (under 64 between calls).
    n: u32,
}

impl<'a> BitWriter<'a> {
    fn new(out: &'a mut Vec<u8>) -> Self {
        BitWriter { out, acc: 0, n: 0 }
    }

    /// Append the low `w` (at most 64) bits of `v`, whose other bits are zero.
    #[inline]
    fn put(&mut self, v: u64, w: u32) {
        debug_assert!(w <= 64 && (w == 64 || v >> w == 0));
        self.acc |= (v as u128) << self.n;
        self.n += w;
        if self.n >= 64 {
            self.out.extend_from_slice(&(self.acc as u64).to_le_bytes());
            self.acc >>= 64;
            self.n -= 64;
        }
    }

    /// Write out the last bits, padded to a byte.
    fn finish(self) {
        let bytes = (self.n as usize).div_ceil(8);
        self.out
            .extend_from_slice(&(self.acc as u64).to_le_bytes()[..bytes]);
    }
}

/// Reads bits, least significant first; past the end it reads zeros (and `used` tells).
struct BitReader<'a> {
    buf: &'a [u8],
    /// Next byte of `buf` to load.
    pos: usize,
    acc: u128,
    /// Bits in `acc` (zeros past the end count).
    n: u32,
    /// Bits consumed.
    used: usize,
}

impl<'a> BitReader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        BitReader {
            buf,
            pos: 0,
            acc: 0,
            n: 0,
            used: 0,
        }
    }

    /// Make at least 64 bits available.
    #[inline]
    fn fill(&mut self) {
        if self.n >= 64 {
            return;
        }
        let word = match self.buf.get(self.pos..self.pos + 8) {
            Some(b) => u64::from_le_bytes(b.try_into().expect("8 bytes")),
            None => {
                let mut b = [0u8; 8];
                let tail = self.buf.get(self.pos..).unwrap_or(&[]);
                b[..tail.len()].copy_from_slice(tail);
                u64::from_le_bytes(b)
            }
        };
        self.acc |= (word as u128) << self.n;
        self.n += 64;
        self.pos += 8;
    }

    /// The next 64 bits, not consumed.
    #[inline]
    fn peek(&mut self) -> u64 {
        self.fill();
        self.acc as u64
    }

    /// Consume `w` (at most 64) bits.
    #[inline]
    fn skip(&mut self, w: u32) {
        self.fill();
        self.acc >>= w;
        self.n -= w;
        self.used += w as usize;
    }

    /// Consume and return `w` (at most 64) bits.
    #[inline]
    fn take(&mut self, w: u32) -> u64 {
        self.fill();
        let v = (self.acc as u64) & mask(w);
        self.skip(w);
        v
    }

    fn used(&self) -> usize {
        self.used
    }
}

/// The low `w` (at most 64) bits set.
#[inline]
fn mask(w: u32) -> u64 {
    if w >= 64 {
        u64::MAX
    } else {
        (1u64 << w) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn slot(tag: u32, seg: u32, off: u32) -> Slot {
        Slot { tag, seg, off }
    }

    fn round_trip(seq: u64, slots: &[Slot], known: &[u32]) -> Option<(u64, Vec<Slot>)> {
        let mut out = vec![0xee; 3]; // a section need not start the buffer
        let mut v = slots.to_vec();
        encode(seq, &mut v, &mut Scratch::default(), &mut out);
        out.push(0xee);
        let (end, n) = section_end(&out, 3).expect("fits");
        assert_eq!((end, n), (out.len() - 1, slots.len()));
        collect(&out, 3, known)
    }

    /// `decode`, every slot taken: `None` unless intact.
    fn collect(body: &[u8], at: usize, known: &[u32]) -> Option<(u64, Vec<Slot>)> {
        let (seq, n, mut it) = decode(body, at, known)?;
        let v: Vec<Slot> = it.by_ref().collect();
        assert!(v.len() <= n);
        it.intact().then_some((seq, v))
    }

    fn sorted(mut v: Vec<Slot>) -> Vec<Slot> {
        v.sort_by_key(|s| s.tag);
        v
    }

    #[test]
    fn empty_and_extreme_sections_round_trip() {
        assert_eq!(round_trip(7, &[], &[1]), Some((7, vec![])));
        let v = vec![
            slot(0, 1, 0),
            slot(0, 1, u32::MAX),
            slot(5, 9, 3),
            slot(u32::MAX, 1, 1),
            slot(u32::MAX, u32::MAX, 0),
        ];
        assert_eq!(
            round_trip(u64::MAX, &v, &[1, 9, u32::MAX]),
            Some((u64::MAX, v.clone()))
        );
        // One huge gap among small ones: escaped.
        let mut v: Vec<Slot> = (0..1000).map(|i| slot(i, 2, i * 30)).collect();
        v.push(slot(u32::MAX - 1, 2, 5));
        assert_eq!(round_trip(1, &v, &[2]), Some((1, v.clone())));
    }

    #[test]
    fn unsorted_input_is_sorted_first() {
        let v = vec![slot(9, 1, 0), slot(3, 1, 10), slot(5, 2, 20)];
        assert_eq!(round_trip(0, &v, &[1, 2]), Some((0, sorted(v))));
    }

    #[test]
    fn a_segment_not_on_disk_voids_the_section() {
        let v = vec![slot(1, 4, 0), slot(2, 5, 10)];
        assert_eq!(round_trip(0, &v, &[4]), None);
        assert_eq!(round_trip(0, &v, &[4, 5]), Some((0, v)));
    }

    #[test]
    fn a_million_slots_take_under_six_bytes_each() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut v: Vec<Slot> = (0..15_625u32)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                slot(x as u32, 1, i * 26 * 64)
            })
            .collect();
        v.sort_by_key(|s| s.tag);
        let mut out = Vec::new();
        encode(0, &mut v, &mut Scratch::default(), &mut out);
        let per = out.len() as f64 / v.len() as f64;
        assert!(per < 6.0, "{per} bytes a slot");
        assert_eq!(collect(&out, 0, &[1]), Some((0, v)));
    }

    #[test]
    fn many_segments_far_apart_round_trip() {
        let v: Vec<Slot> = (0..500u32)
            .map(|i| slot(i * 7, 1 + (i % 50) * 100_000, i))
            .collect();
        let known: Vec<u32> = (0..50).map(|i| 1 + i * 100_000).collect();
        assert_eq!(round_trip(3, &v, &known), Some((3, v)));
    }

    proptest! {
        #[test]
        fn any_slots_round_trip(
            seq: u64,
            raw in prop::collection::vec((any::<u32>(), 1u32..6, any::<u32>()), 0..300),
            small_tags: bool,
        ) {
            let v: Vec<Slot> = raw
                .iter()
                .map(|&(t, s, o)| slot(if small_tags { t % 1000 } else { t }, s, o))
                .collect();
            let got = round_trip(seq, &v, &[1, 2, 3, 4, 5]);
            let (gseq, gv) = got.expect("decodes");
            prop_assert_eq!(gseq, seq);
            // The same slots, in tag order (slots of one tag in any order).
            let key = |s: &Slot| (s.tag, s.seg, s.off);
            let mut a = gv.clone();
            a.sort_by_key(key);
            let mut b = v.clone();
            b.sort_by_key(key);
            prop_assert_eq!(a, b);
            prop_assert!(gv.windows(2).all(|w| w[0].tag <= w[1].tag));
        }

        #[test]
        fn any_bytes_decode_without_panicking(
            body in prop::collection::vec(any::<u8>(), 0..200),
            at in 0usize..40,
        ) {
            if let Some((seq, v)) = collect(&body, at, &[1, 2, 3]) {
                prop_assert_eq!(Some(seq), le_u64(&body, at));
                prop_assert!(v.windows(2).all(|w| w[0].tag <= w[1].tag));
                prop_assert!(v.iter().all(|s| [1, 2, 3].contains(&s.seg)));
            }
        }

        #[test]
        fn a_changed_byte_never_panics(
            raw in prop::collection::vec((any::<u32>(), 1u32..4, any::<u32>()), 1..100),
            at: prop::sample::Index,
            byte: u8,
        ) {
            let mut v: Vec<Slot> = raw.iter().map(|&(t, s, o)| slot(t, s, o)).collect();
            let mut out = Vec::new();
            encode(1, &mut v, &mut Scratch::default(), &mut out);
            let i = at.index(out.len());
            out[i] = byte;
            let _ = collect(&out, 0, &[1, 2, 3]);
        }
    }
}
