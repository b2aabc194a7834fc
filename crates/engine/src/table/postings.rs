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
pub const CHUNK_BYTES: usize = 512;

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
    f: &mut dyn FnMut(&[u8], &[u32]) -> Result<bool>,
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
    if out.first().is_some_and(|p| key.ends_with(&p.pk)) || out.is_empty() {
        Ok(out)
    } else {
        Err(bad())
    }
}

/// The stored form of a chunk whose key holds `ps[0].pk`.
pub fn encode_chunk(typ: IndexType, ps: &[Posting]) -> Vec<u8> {
    let mut v = Vec::with_capacity(ps.iter().map(posting_size).sum::<usize>() + 2);
    put_varint(&mut v, ps.len() as u64);
    let mut prev: &[u8] = ps.first().map_or(&[], |p| &p.pk);
    for p in ps {
        let shared = prev
            .iter()
            .zip(&p.pk)
            .take_while(|(a, b)| a == b)
            .count();
        put_varint(&mut v, shared as u64);
        put_varint(&mut v, (p.pk.len() - shared) as u64);
        v.extend_from_slice(&p.pk[shared..]);
        if typ == IndexType::QGram {
            put_varint(&mut v, p.offsets.len() as u64);
            let mut last = 0u32;
            for (i, &o) in p.offsets.iter().enumerate() {
                put_varint(&mut v, u64::from(if i == 0 { o } else { o - last }));
                last = o;
            }
        }
        prev = &p.pk;
    }
    v
}

/// About what a posting takes in a chunk (its primary key whole: a bound, not the size).
fn posting_size(p: &Posting) -> usize {
    p.pk.len() / 2 + 2 + p.offsets.len() + usize::from(!p.offsets.is_empty())
}

/// The postings `ps` cut into chunks of at most [`CHUNK_BYTES`]: in halves, or with
/// `appended` (everything new went to the end) full chunks on the left, so that an index
/// filled in key order is left full.
fn split(ps: Vec<Posting>, appended: bool) -> Vec<Vec<Posting>> {
    let total: usize = ps.iter().map(posting_size).sum();
    if total <= CHUNK_BYTES || ps.len() < 2 {
        return vec![ps];
    }
    if appended {
        let mut out = vec![Vec::new()];
        let mut size = 0;
        for p in ps {
            let s = posting_size(&p);
            if size + s > CHUNK_BYTES && !out.last().unwrap().is_empty() {
                out.push(Vec::new());
                size = 0;
            }
            size += s;
            out.last_mut().unwrap().push(p);
        }
        return out;
    }
    let mut acc = 0;
    let cut = ps
        .iter()
        .position(|p| {
            acc += posting_size(p);
            acc * 2 >= total
        })
        .map_or(ps.len() / 2, |i| (i + 1).min(ps.len() - 1))
        .max(1);
    let mut left = ps;
    let right = left.split_off(cut);
    let mut out = split(left, false);
    out.extend(split(right, false));
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
pub fn lookup(store: &dyn Store, typ: IndexType, term: &[u8], pk: &[u8]) -> Result<Option<Vec<u32>>> {
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
        let (lo, hi) = term_bounds(term);
        // chunk key (None: a new chunk) → (its postings, everything added at its end).
        let mut touched: BTreeMap<Option<Vec<u8>>, (Vec<Posting>, bool)> = BTreeMap::new();
        for (pk, change) in recs {
            // The chunk boundaries are the stored ones until the batch is written.
            let slot = match find_chunk(store, &lo, &hi, pk)? {
                Some((k, v)) => {
                    let key = Some(k);
                    if !touched.contains_key(&key) {
                        let ps = postings(typ, key.as_deref().unwrap(), &v)?;
                        touched.insert(key.clone(), (ps, true));
                    }
                    key
                }
                None => {
                    touched.entry(None).or_insert((Vec::new(), true));
                    None
                }
            };
            let (ps, appended) = touched.get_mut(&slot).unwrap();
            match (ps.binary_search_by(|p| p.pk.as_slice().cmp(pk)), change) {
                (Ok(i), Some(offs)) => ps[i].offsets = offs.clone(),
                (Ok(i), None) => {
                    ps.remove(i);
                    *appended = false;
                }
                (Err(i), Some(offs)) => {
                    if i < ps.len() {
                        *appended = false;
                    }
                    ps.insert(
                        i,
                        Posting {
                            pk: pk.clone(),
                            offsets: offs.clone(),
                        },
                    );
                }
                (Err(_), None) => {}
            }
        }
        for (old, (ps, appended)) in touched {
            let pieces = if ps.is_empty() {
                Vec::new()
            } else {
                split(ps, appended)
            };
            let mut kept_old = false;
            let mut puts = Vec::with_capacity(pieces.len());
            for piece in pieces {
                let key = chunk_key(term, &piece[0].pk);
                kept_old |= old.as_deref() == Some(key.as_slice());
                puts.push(BatchOp::Put {
                    key,
                    value: encode_chunk(typ, &piece),
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
    f: &mut dyn FnMut(&[u8], &[u32]) -> Result<bool>,
) -> Result<()> {
    if chunked(typ) {
        store.for_each_in_range(range, &mut |k, v, _| decode_chunk(typ, k, v, f))?;
    } else {
        store.for_each_in_range(range, &mut |k, v, _| {
            let e = super::terms::decode_entry(typ, k, v)?;
            f(e.pk, &e.offsets)
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
        let ps: Vec<Posting> = (0..400).map(|i| p(&format!("{i:06}"), &[])).collect();
        let halves = split(ps.clone(), false);
        assert!(halves.len() >= 2);
        for h in &halves {
            assert!(h.iter().map(posting_size).sum::<usize>() <= CHUNK_BYTES);
            assert!(h.len() * 3 >= ps.len() / halves.len(), "balanced");
        }
        let full = split(ps.clone(), true);
        let first: usize = full[0].iter().map(posting_size).sum();
        assert!(first + 8 > CHUNK_BYTES, "the left chunk is full: {first}");
        let joined: Vec<Posting> = full.into_iter().flatten().collect();
        assert_eq!(joined, ps);
    }
}
