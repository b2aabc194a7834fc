//! Token and q-gram indexes as posting lists.
//!
//! A TOK or QGR index keyspace holds, per term, a run of chunk entries:
//!
//! ```text
//! key    esc(term) 00 00  first_pk
//! value  varint count, then per record in primary-key order:
//!        varint shared, varint len, suffix[len]   (the primary key: `shared` bytes of the one
//!                                                  before it — of `first_pk` for the first —
//!                                                  then `suffix`)
//!        QGR only: varint n, n varints            (the gram's offsets in the normalized text,
//!                                                  ascending: the first, then the gaps)
//! ```
//!
//! A chunk holds the records from its `first_pk` up to the next chunk's; its postings take at
//! most about [`CHUNK_BYTES`]. A write finds the chunk of each (term, record) it changes (the
//! chunk with the greatest key not above `esc(term) 00 00 pk`, else the term's first chunk),
//! rewrites it, and splits it when it outgrows the bound (in halves; with everything added at
//! its end, full chunks on the left) or removes it when it empties. A term's chunks are
//! rewritten under a term lock (see `TableDb::lock_terms`), taken after the records' locks.
//! Keys sort as single entries did (`terms`), so a term, or every term with a prefix, is one
//! key range and a query reads a term's list in order.

use super::terms::{put_term, IndexType};
use crate::error::{Error, Result};
use crate::log::format::{get_varint, put_varint};
use crate::store::{BatchOp, KeyRange, Store};
use std::collections::BTreeMap;
use std::ops::Bound;

/// The bound of a chunk's postings, in bytes.
pub const CHUNK_BYTES: usize = 64;

/// Whether an index of this type keeps posting chunks (else an entry per record).
pub fn chunked(typ: IndexType) -> bool {
    matches!(typ, IndexType::Token | IndexType::QGram)
}

/// One record of a term's list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Posting {
    pub pk: Vec<u8>,
    pub offsets: Vec<u32>,
}

/// What [`decode_chunk`] and [`for_each_posting`] call with each (primary key, offsets): false
/// stops.
pub type PostingVisitor<'a> = dyn FnMut(&[u8], &[u32]) -> Result<bool> + 'a;

/// Changes to one index's postings: term → primary key → the new offsets (`None`: remove the
/// record from the term's list).
pub type Changes = BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, Option<Vec<u32>>>>;

fn bad() -> Error {
    Error::Corrupt("a posting chunk that does not parse".into())
}

/// Where the primary key starts in a chunk key (after `esc(term) 00 00`).
pub fn pk_start(key: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i + 1 < key.len() {
        if key[i] == 0 {
            match key[i + 1] {
                0 => return Some(i + 2),
                0xff => i += 2,
                _ => return None,
            }
        } else {
            i += 1;
        }
    }
    None
}

/// The key of a chunk of `term` starting at `pk`.
pub fn chunk_key(term: &[u8], pk: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(term.len() + 2 + pk.len());
    put_term(&mut k, term);
    k.extend_from_slice(pk);
    k
}

/// The number of records in a chunk (its first varint).
pub fn chunk_count(value: &[u8]) -> Result<u64> {
    let mut pos = 0;
    get_varint(value, &mut pos).ok_or_else(bad)
}

/// Call `f` with each posting of the chunk `key` → `value` (primary key, offsets) until it
/// returns false; whether it never did.
pub fn decode_chunk(
    typ: IndexType,
    key: &[u8],
    value: &[u8],
    f: &mut PostingVisitor<'_>,
) -> Result<bool> {
    let mut pk = key[pk_start(key).ok_or_else(bad)?..].to_vec();
    let mut pos = 0;
    let n = get_varint(value, &mut pos).ok_or_else(bad)?;
    let mut offs: Vec<u32> = Vec::new();
    let mut prev: Option<Vec<u8>> = None;
    for _ in 0..n {
        let shared = get_varint(value, &mut pos).ok_or_else(bad)? as usize;
        let len = get_varint(value, &mut pos).ok_or_else(bad)? as usize;
        if shared > pk.len() || pos + len > value.len() {
            return Err(bad());
        }
        pk.truncate(shared);
        pk.extend_from_slice(&value[pos..pos + len]);
        pos += len;
        if prev.as_ref().is_some_and(|p| p.as_slice() >= pk.as_slice()) {
            return Err(bad());
        }
        offs.clear();
        if typ == IndexType::QGram {
            let c = get_varint(value, &mut pos).ok_or_else(bad)?;
            let mut at = 0u64;
            for i in 0..c {
                let d = get_varint(value, &mut pos).ok_or_else(bad)?;
                at = if i == 0 { d } else { at + d };
                offs.push(u32::try_from(at).map_err(|_| bad())?);
            }
        }
        if !f(&pk, &offs)? {
            return Ok(false);
        }
        match &mut prev {
            Some(p) => {
                p.clear();
                p.extend_from_slice(&pk);
            }
            None => prev = Some(pk.clone()),
        }
    }
    if pos != value.len() {
        return Err(bad());
    }
    Ok(true)
}

/// Every posting of a chunk, decoded.
pub fn postings(typ: IndexType, key: &[u8], value: &[u8]) -> Result<Vec<Posting>> {
    let mut out = Vec::new();
    decode_chunk(typ, key, value, &mut |pk, offs| {
        out.push(Posting {
            pk: pk.to_vec(),
            offsets: offs.to_vec(),
        });
        Ok(true)
    })?;
    Ok(out)
}

/// The stored form of a chunk whose key holds `ps[0].pk`.
pub fn encode_chunk(typ: IndexType, ps: &[Posting]) -> Vec<u8> {
    let mut l = List::default();
    for p in ps {
        l.push(&p.pk, &p.offsets);
    }
    l.encode(typ, 0..l.items.len())
}

/// A chunk's postings while it is edited: the primary keys and offsets in two arenas, the
/// postings in order as ranges of them (an insert appends to the arenas and moves only the
/// small items).
#[derive(Default)]
struct List {
    bytes: Vec<u8>,
    offs: Vec<u32>,
    items: Vec<Item>,
}

#[derive(Clone, Copy)]
struct Item {
    pk: (u32, u32),
    off: (u32, u32),
}

fn varint_len(x: u64) -> usize {
    (64 - (x | 1).leading_zeros() as usize).div_ceil(7)
}

impl List {
    fn load(typ: IndexType, key: &[u8], value: &[u8]) -> Result<List> {
        let mut l = List::default();
        l.bytes.reserve(value.len() * 2);
        decode_chunk(typ, key, value, &mut |pk, offs| {
            l.push(pk, offs);
            Ok(true)
        })?;
        Ok(l)
    }

    fn make(&mut self, pk: &[u8], offs: &[u32]) -> Item {
        let b = self.bytes.len() as u32;
        self.bytes.extend_from_slice(pk);
        let o = self.offs.len() as u32;
        self.offs.extend_from_slice(offs);
        Item {
            pk: (b, self.bytes.len() as u32),
            off: (o, self.offs.len() as u32),
        }
    }

    fn push(&mut self, pk: &[u8], offs: &[u32]) {
        let it = self.make(pk, offs);
        self.items.push(it);
    }

    fn pk(&self, i: usize) -> &[u8] {
        let (a, b) = self.items[i].pk;
        &self.bytes[a as usize..b as usize]
    }

    fn offsets(&self, i: usize) -> &[u32] {
        let (a, b) = self.items[i].off;
        &self.offs[a as usize..b as usize]
    }

    /// Set (or with `None` remove) the posting of `pk`; false when it was put before the
    /// last posting or removed.
    fn set(&mut self, pk: &[u8], offs: Option<&[u32]>) -> bool {
        let at = self
            .items
            .binary_search_by(|it| self.bytes[it.pk.0 as usize..it.pk.1 as usize].cmp(pk));
        match (at, offs) {
            (Ok(i), Some(o)) => {
                if self.offsets(i) != o {
                    let it = self.make(pk, o);
                    self.items[i] = it;
                }
                true
            }
            (Ok(i), None) => {
                self.items.remove(i);
                false
            }
            (Err(i), Some(o)) => {
                let it = self.make(pk, o);
                self.items.insert(i, it);
                i + 1 == self.items.len()
            }
            (Err(_), None) => true,
        }
    }

    /// The stored size of each posting, the first of a chunk counted as a first.
    fn sizes(&self, typ: IndexType) -> Vec<usize> {
        let mut out = Vec::with_capacity(self.items.len());
        for i in 0..self.items.len() {
            let pk = self.pk(i);
            let shared = if i == 0 {
                pk.len()
            } else {
                shared_len(self.pk(i - 1), pk)
            };
            let mut n = varint_len(shared as u64) + varint_len((pk.len() - shared) as u64);
            n += pk.len() - shared;
            if typ == IndexType::QGram {
                let o = self.offsets(i);
                n += varint_len(o.len() as u64);
                let mut last = 0;
                for (j, &x) in o.iter().enumerate() {
                    n += varint_len(u64::from(if j == 0 { x } else { x - last }));
                    last = x;
                }
            }
            out.push(n);
        }
        out
    }

    /// The stored form of the postings `r` as one chunk.
    fn encode(&self, typ: IndexType, r: std::ops::Range<usize>) -> Vec<u8> {
        let mut v = Vec::with_capacity(CHUNK_BYTES + 16);
        put_varint(&mut v, r.len() as u64);
        let mut prev: &[u8] = if r.is_empty() { &[] } else { self.pk(r.start) };
        for i in r {
            let pk = self.pk(i);
            let shared = shared_len(prev, pk);
            put_varint(&mut v, shared as u64);
            put_varint(&mut v, (pk.len() - shared) as u64);
            v.extend_from_slice(&pk[shared..]);
            if typ == IndexType::QGram {
                let o = self.offsets(i);
                put_varint(&mut v, o.len() as u64);
                let mut last = 0u32;
                for (j, &x) in o.iter().enumerate() {
                    put_varint(&mut v, u64::from(if j == 0 { x } else { x - last }));
                    last = x;
                }
            }
            prev = pk;
        }
        v
    }
}

fn shared_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The postings of sizes `sizes` cut into chunks of at most [`CHUNK_BYTES`]: in halves, or
/// with `appended` (everything new went to the end) full chunks on the left, so that an index
/// filled in key order is left full.
fn split(sizes: &[usize], appended: bool) -> Vec<std::ops::Range<usize>> {
    let total: usize = sizes.iter().sum();
    if total <= CHUNK_BYTES || sizes.len() < 2 {
        return std::iter::once(0..sizes.len()).collect();
    }
    if appended {
        let mut out = Vec::new();
        let (mut start, mut size) = (0, 0);
        for (i, &s) in sizes.iter().enumerate() {
            if size + s > CHUNK_BYTES && i > start {
                out.push(start..i);
                start = i;
                size = 0;
            }
            size += s;
        }
        out.push(start..sizes.len());
        return out;
    }
    let mut acc = 0;
    let cut = sizes
        .iter()
        .position(|&s| {
            acc += s;
            acc * 2 >= total
        })
        .map_or(sizes.len() / 2, |i| i + 1)
        .clamp(1, sizes.len() - 1);
    let mut out = split(&sizes[..cut], false);
    out.extend(
        split(&sizes[cut..], false)
            .into_iter()
            .map(|r| r.start + cut..r.end + cut),
    );
    out
}

/// The chunk holding (or to hold) `pk` in the list of the term whose keys start `lo` (and end
/// before `hi`): the last chunk starting at or before it, else the term's first. `None`: the
/// term has no chunk.
fn find_chunk(
    store: &dyn Store,
    lo: &[u8],
    hi: &[u8],
    pk: &[u8],
) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut at = lo.to_vec();
    at.extend_from_slice(pk);
    let mut found = None;
    for (from, to, desc) in [
        (Bound::Included(lo), Bound::Included(at.as_slice()), true),
        (Bound::Included(lo), Bound::Excluded(hi), false),
    ] {
        store.for_each_in_range(
            &KeyRange {
                from,
                to,
                desc,
                max: 1,
            },
            &mut |k, v, _| {
                found = Some((k.to_vec(), v.to_vec()));
                Ok(false)
            },
        )?;
        if found.is_some() {
            break;
        }
    }
    Ok(found)
}

/// The key range of a term's chunks.
pub fn term_bounds(term: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut lo = Vec::with_capacity(term.len() + 2);
    put_term(&mut lo, term);
    let mut hi = lo.clone();
    *hi.last_mut().unwrap() = 1;
    (lo, hi)
}

/// The postings of (`term`, `pk`), if the list holds it.
pub fn lookup(
    store: &dyn Store,
    typ: IndexType,
    term: &[u8],
    pk: &[u8],
) -> Result<Option<Vec<u32>>> {
    let (lo, hi) = term_bounds(term);
    let Some((k, v)) = find_chunk(store, &lo, &hi, pk)? else {
        return Ok(None);
    };
    let mut out = None;
    decode_chunk(typ, &k, &v, &mut |p, offs| {
        if p == pk {
            out = Some(offs.to_vec());
        }
        Ok(p < pk)
    })?;
    Ok(out)
}

/// The chunk writes that make `changes` (the caller holds the terms' locks), appended to
/// `ops`.
pub fn edit(
    store: &dyn Store,
    typ: IndexType,
    changes: &Changes,
    ops: &mut Vec<BatchOp>,
) -> Result<()> {
    for (term, recs) in changes {
        let mut lo = Vec::with_capacity(term.len() + 2);
        put_term(&mut lo, term);
        let mut at = Vec::with_capacity(lo.len() + 16);
        // The chunks the changes touch (key, None: a new chunk), with their postings and
        // whether everything went to their end: few, looked up in order.
        let mut touched: Vec<(Option<Vec<u8>>, List, bool)> = Vec::new();
        for (pk, change) in recs {
            // The chunk boundaries are the stored ones until the batch is written: the last
            // chunk starting at or before `pk`, else the term's first.
            at.clear();
            at.extend_from_slice(&lo);
            at.extend_from_slice(pk);
            let slot = std::cell::Cell::new(None);
            {
                let mut visit = |k: &[u8], v: &[u8], _: crate::store::Meta| {
                    slot.set(Some(
                        match touched.iter().position(|t| t.0.as_deref() == Some(k)) {
                            Some(i) => i,
                            None => {
                                touched.push((Some(k.to_vec()), List::load(typ, k, v)?, true));
                                touched.len() - 1
                            }
                        },
                    ));
                    Ok(false)
                };
                let floor = KeyRange {
                    from: Bound::Included(&lo),
                    to: Bound::Included(&at),
                    desc: true,
                    max: 1,
                };
                store.for_each_in_range(&floor, &mut visit)?;
                if slot.get().is_none() {
                    let mut hi = lo.clone();
                    *hi.last_mut().unwrap() = 1;
                    let first = KeyRange {
                        from: Bound::Included(&lo),
                        to: Bound::Excluded(&hi),
                        desc: false,
                        max: 1,
                    };
                    store.for_each_in_range(&first, &mut visit)?;
                }
            }
            let i = match slot.get() {
                Some(i) => i,
                None => match touched.iter().position(|t| t.0.is_none()) {
                    Some(i) => i,
                    None => {
                        touched.push((None, List::default(), true));
                        touched.len() - 1
                    }
                },
            };
            let (_, l, appended) = &mut touched[i];
            *appended &= l.set(pk, change.as_deref());
        }
        for (old, l, appended) in touched {
            let pieces = if l.items.is_empty() {
                Vec::new()
            } else {
                split(&l.sizes(typ), appended)
            };
            let mut kept_old = false;
            let mut puts = Vec::with_capacity(pieces.len());
            for r in pieces {
                let key = chunk_key(term, l.pk(r.start));
                kept_old |= old.as_deref() == Some(key.as_slice());
                puts.push(BatchOp::Put {
                    key,
                    value: l.encode(typ, r),
                    flags: 0,
                    expires: 0,
                });
            }
            if let (Some(k), false) = (old, kept_old) {
                ops.push(BatchOp::Remove { key: k });
            }
            ops.extend(puts);
        }
    }
    Ok(())
}

/// Call `f` with each (primary key, offsets) of the entries of an index of type `typ` in
/// `[from, to)`, in key order, until it returns false.
pub fn for_each_posting(
    store: &dyn Store,
    typ: IndexType,
    range: &KeyRange<'_>,
    f: &mut PostingVisitor<'_>,
) -> Result<()> {
    if chunked(typ) {
        store.for_each_in_range(range, &mut |k, v, _| decode_chunk(typ, k, v, f))?;
    } else {
        let at = |k: &[u8]| match typ {
            IndexType::Decimal => (k.len() >= 8).then_some(8),
            _ => pk_start(k),
        };
        store.for_each_in_range(range, &mut |k, _, _| {
            let pk = &k[at(k)
                .ok_or_else(|| Error::Corrupt("an index entry that does not parse".into()))?..];
            f(pk, &[])
        })?;
    }
    Ok(())
}

/// The records (postings, or entries) in `range` of an index, counted up to `bound` (a count
/// above it stops there).
pub fn count(store: &dyn Store, typ: IndexType, range: &KeyRange<'_>, bound: u64) -> Result<u64> {
    let mut n = 0u64;
    let chunks = chunked(typ);
    store.for_each_in_range(range, &mut |_, v, _| {
        n += if chunks { chunk_count(v)? } else { 1 };
        Ok(n <= bound)
    })?;
    Ok(n)
}

/// A chunk as the entries `terms::entries_of` describes (one per record: the key a chunk
/// starting at it would have, the offsets as varints), added to `out`: how tests compare an
/// index with what its records make.
pub fn expand(
    typ: IndexType,
    key: &[u8],
    value: &[u8],
    out: &mut BTreeMap<Vec<u8>, Vec<u8>>,
) -> Result<()> {
    let term_end = pk_start(key).ok_or_else(bad)?;
    decode_chunk(typ, key, value, &mut |pk, offs| {
        let mut k = key[..term_end].to_vec();
        k.extend_from_slice(pk);
        let mut v = Vec::new();
        for &o in offs {
            put_varint(&mut v, u64::from(o));
        }
        out.insert(k, v);
        Ok(true)
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pk: &str, offs: &[u32]) -> Posting {
        Posting {
            pk: pk.as_bytes().to_vec(),
            offsets: offs.to_vec(),
        }
    }

    #[test]
    fn chunks_round_trip_and_refuse_damage() {
        for typ in [IndexType::Token, IndexType::QGram] {
            let q = typ == IndexType::QGram;
            let ps = vec![
                p("k1", if q { &[0, 4, 9] } else { &[] }),
                p("k10", if q { &[2] } else { &[] }),
                p("k2", if q { &[1, 1000] } else { &[] }),
                p("x", if q { &[7] } else { &[] }),
            ];
            let key = chunk_key(b"a\0b", b"k1");
            let v = encode_chunk(typ, &ps);
            assert_eq!(postings(typ, &key, &v).unwrap(), ps);
            assert_eq!(chunk_count(&v).unwrap(), 4);
            for cut in 0..v.len() {
                assert!(postings(typ, &key, &v[..cut]).is_err(), "{typ:?} cut {cut}");
            }
        }
        assert_eq!(pk_start(&chunk_key(b"\0a\0", b"pk")), Some(7));
    }

    #[test]
    fn splits_halve_or_fill_left_when_appending() {
        let sizes = vec![4usize; 400];
        let halves = split(&sizes, false);
        assert!(halves.len() >= 2);
        for h in &halves {
            assert!(h.len() * 4 <= CHUNK_BYTES);
            assert!(h.len() * 4 * 2 > CHUNK_BYTES / 2, "balanced: {h:?}");
        }
        let full = split(&sizes, true);
        assert!(full[..full.len() - 1]
            .iter()
            .all(|r| r.len() * 4 == CHUNK_BYTES));
        let mut at = 0;
        for r in halves.iter().chain(&full) {
            if r.start == 0 {
                at = 0;
            }
            assert_eq!(r.start, at);
            at = r.end;
        }
        assert_eq!(at, 400);
    }

    #[test]
    fn a_list_sets_removes_and_says_when_it_grew_at_its_end() {
        let mut l = List::default();
        assert!(l.set(b"b", Some(&[1])));
        assert!(l.set(b"c", Some(&[])));
        assert!(!l.set(b"a", Some(&[2, 3])));
        assert!(l.set(b"c", Some(&[4])));
        assert!(!l.set(b"b", None));
        assert!(l.set(b"zz", None));
        let v = l.encode(IndexType::QGram, 0..l.items.len());
        assert_eq!(
            postings(IndexType::QGram, &chunk_key(b"t", b"a"), &v).unwrap(),
            [p("a", &[2, 3]), p("c", &[4])]
        );
        let sizes = l.sizes(IndexType::QGram);
        assert_eq!(sizes.iter().sum::<usize>() + 1, v.len());
    }
}
