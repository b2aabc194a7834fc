//! Running queries: the planner, the execution, metasearch and Tyrant's `search` reply.
//!
//! The plan (each step is one line of the hint):
//! 1. Every condition that an index can answer — not negated, not marked no-index, on a
//!    column with a built index of a type that serves the operator, or on the primary key —
//!    gets an estimate: the entries in its ranges of the index keyspace, counted only up to
//!    [`INTERSECT_RATIO`] times the best estimate so far (a count past that cannot change the
//!    choice).
//! 2. The condition with the fewest entries drives; every other one whose count is within
//!    [`INTERSECT_RATIO`] of it is intersected (index entries are read in order and cost far
//!    less than the records they rule out). The conditions so answered are exact: they are not
//!    checked again, and a record they rule out is never read.
//! 3. With an order on a column that has an ordered index (lexical for a string order, decimal
//!    for a numeric one; the records themselves for the primary key in string order) and a
//!    limit, the index is walked in order and stopped at the limit when that reads fewer
//!    records than the driven set holds (limit × records < driven²); indexes with few entries
//!    beside the records the walk is expected to read filter it.
//! 4. Otherwise the candidates (or every record, with no usable index) are read in primary-key
//!    order, the other conditions checked, and the matches sorted when an order is asked.
//!
//! Order: by the column's value (bytes, or the number [`tc_atof`] reads), ties by primary key
//! in the same direction; records without the column last, by primary key ascending. Without
//! an order, primary-key order.

use super::{Cond, Op, OrderType, Query, Search, SetOp};
use crate::error::Result;
use crate::store::{Decision, KeyRange, Store};
use crate::table::postings;
use crate::table::terms::{dec_term, decode_entry, put_prefix, put_term, tc_atof, IndexType};
use crate::table::{Columns, Table};
use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::fmt::Write;
use std::ops::Bound;
use std::sync::Arc;

/// A condition is intersected when its index count is within this factor of the driver's.
pub const INTERSECT_RATIO: u64 = 16;

/// What a search found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Found {
    /// Primary keys of the matches, in the order asked.
    pub keys: Vec<Vec<u8>>,
    /// The plan taken, one fact a line.
    pub hint: String,
}

/// `[from, to)` in an index keyspace (`to` open when `None`).
type Range = (Vec<u8>, Option<Vec<u8>>);

/// How an index answers a condition.
enum Access {
    /// The primary keys of the entries in these ranges of an index.
    Ranges(Arc<dyn Store>, IndexType, Vec<Range>),
    /// The records in every one of these.
    All(Vec<Access>),
    /// Full-text units on a q-gram index.
    Fts(Arc<dyn Store>, Vec<super::FtsUnit>),
    /// These primary keys (those that exist).
    Keys(Vec<Vec<u8>>),
    /// The primary keys starting with this.
    PkPrefix(Vec<u8>),
}

/// The first key after every key starting with `p` (`None`: there is none).
fn prefix_end(p: &[u8]) -> Option<Vec<u8>> {
    let mut v = p.to_vec();
    while let Some(&l) = v.last() {
        if l == 0xff {
            v.pop();
        } else {
            *v.last_mut().unwrap() += 1;
            return Some(v);
        }
    }
    None
}

fn term_range(term: &[u8]) -> Range {
    let mut k = Vec::new();
    put_term(&mut k, term);
    let end = prefix_end(&k);
    (k, end)
}

fn next8(t: [u8; 8]) -> Vec<u8> {
    (u64::from_be_bytes(t).wrapping_add(1))
        .to_be_bytes()
        .to_vec()
}

fn nan_term() -> Vec<u8> {
    dec_term(f64::NAN).to_vec()
}

/// The ranges of numbers `lo..=hi` (`None`: unbounded that side; NaN bounds: none).
fn num_range(lo: Option<(f64, bool)>, hi: Option<(f64, bool)>) -> Vec<Range> {
    if lo.is_some_and(|(x, _)| x.is_nan()) || hi.is_some_and(|(x, _)| x.is_nan()) {
        return Vec::new();
    }
    let from = match lo {
        None => vec![0u8; 8],
        Some((x, true)) => dec_term(x).to_vec(),
        Some((x, false)) => next8(dec_term(x)),
    };
    let to = match hi {
        None => nan_term(),
        Some((x, true)) => next8(dec_term(x)),
        Some((x, false)) => dec_term(x).to_vec(),
    };
    if from >= to {
        return Vec::new();
    }
    vec![(from, Some(to))]
}

/// How an index can answer `c`, if one can.
fn access(t: &dyn Table, c: &Cond) -> Option<(Access, String)> {
    use super::Matcher as M;
    if c.negate || c.noidx {
        return None;
    }
    if c.column.is_empty() {
        match (c.op, &c.m) {
            (Op::StrEq, _) => return Some((Access::Keys(vec![c.expr.clone()]), "primary".into())),
            (Op::StrOrEq, M::Tokens(ts)) => {
                return Some((Access::Keys(ts.clone()), "primary".into()))
            }
            (Op::StrBw, _) => return Some((Access::PkPrefix(c.expr.clone()), "primary".into())),
            _ => {}
        }
    }
    let (typ, space) = t.index(&c.column)?;
    let name = typ.name().to_string();
    let a = match (typ, c.op, &c.m) {
        (IndexType::Lexical, Op::StrEq, _) => Access::Ranges(space, typ, vec![term_range(&c.expr)]),
        (IndexType::Lexical, Op::StrBw, _) => {
            let mut p = Vec::new();
            put_prefix(&mut p, &c.expr);
            let end = prefix_end(&p);
            Access::Ranges(space, typ, vec![(p, end)])
        }
        (IndexType::Lexical, Op::StrOrEq, M::Tokens(ts))
        | (IndexType::Token, Op::StrOr, M::Tokens(ts)) => {
            let set: BTreeSet<&Vec<u8>> = ts.iter().collect();
            Access::Ranges(space, typ, set.into_iter().map(|t| term_range(t)).collect())
        }
        (IndexType::Token, Op::StrAnd, M::Tokens(ts)) if !ts.is_empty() => {
            let set: BTreeSet<&Vec<u8>> = ts.iter().collect();
            Access::All(
                set.into_iter()
                    .map(|t| Access::Ranges(space.clone(), typ, vec![term_range(t)]))
                    .collect(),
            )
        }
        (IndexType::Decimal, _, M::Num(x)) => {
            let x = *x;
            let r = match c.op {
                Op::NumEq => num_range(Some((x, true)), Some((x, true))),
                Op::NumGt => num_range(Some((x, false)), None),
                Op::NumGe => num_range(Some((x, true)), None),
                Op::NumLt => num_range(None, Some((x, false))),
                _ => num_range(None, Some((x, true))),
            };
            Access::Ranges(space, typ, r)
        }
        (IndexType::Decimal, _, M::Between(lo, hi)) => {
            Access::Ranges(space, typ, num_range(Some((*lo, true)), Some((*hi, true))))
        }
        (IndexType::Decimal, _, M::Nums(xs)) => {
            let set: BTreeSet<[u8; 8]> = xs
                .iter()
                .filter(|x| !x.is_nan())
                .map(|&x| dec_term(x))
                .collect();
            Access::Ranges(
                space,
                typ,
                set.into_iter()
                    .map(|t| (t.to_vec(), Some(next8(t))))
                    .collect(),
            )
        }
        (IndexType::QGram, _, M::Fts(units))
            if units
                .iter()
                .all(|u| u.phrases.iter().all(|p| !p.is_empty())) =>
        {
            Access::Fts(space, units.clone())
        }
        _ => return None,
    };
    Some((a, name))
}

fn key_range(r: &Range, max: usize) -> KeyRange<'_> {
    KeyRange {
        from: Bound::Included(&r.0),
        to: r.1.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
        desc: false,
        max,
    }
}

/// Entries (records of posting lists) in `r` of `space`, counting up to `bound` (a count
/// above it stops there).
fn count_range(space: &dyn Store, typ: IndexType, r: &Range, bound: u64) -> Result<u64> {
    let max = usize::try_from(bound.saturating_add(1)).unwrap_or(usize::MAX);
    postings::count(space, typ, &key_range(r, max), bound)
}

/// The q-gram ranges a phrase is looked up by: grams at offsets 0, 3, 6, … and the last
/// three characters (exact terms), or for a phrase shorter than a gram, every gram starting
/// with it. Each with the phrase offset it stands at.
fn phrase_grams(p: &str) -> Vec<(Range, u32)> {
    let chars: Vec<char> = p.chars().collect();
    let q = crate::table::terms::QGRAM;
    if chars.len() < q {
        let mut k = Vec::new();
        put_prefix(&mut k, p.as_bytes());
        let end = prefix_end(&k);
        return vec![((k, end), 0)];
    }
    let mut offs: Vec<usize> = (0..=chars.len() - q).step_by(q).collect();
    if *offs.last().unwrap() != chars.len() - q {
        offs.push(chars.len() - q);
    }
    offs.into_iter()
        .map(|o| {
            let g: String = chars[o..o + q].iter().collect();
            (term_range(g.as_bytes()), o as u32)
        })
        .collect()
}

fn estimate(t: &dyn Table, a: &Access, bound: u64) -> Result<u64> {
    Ok(match a {
        Access::Ranges(space, typ, rs) => {
            let mut n = 0u64;
            for r in rs {
                n += count_range(&**space, *typ, r, bound.saturating_sub(n))?;
                if n > bound {
                    break;
                }
            }
            n
        }
        Access::All(parts) => {
            let mut best = bound.saturating_add(1);
            for p in parts {
                best = best.min(estimate(t, p, best)?);
            }
            best
        }
        Access::Fts(space, units) => {
            // The first positive unit bounds the result: its phrases' rarest grams.
            let mut n = 0u64;
            if let Some(u) = units.iter().find(|u| u.positive) {
                for p in &u.phrases {
                    let mut least = bound.saturating_add(1);
                    for (r, _) in phrase_grams(p) {
                        least = least.min(count_range(&**space, IndexType::QGram, &r, least)?);
                    }
                    n = n.saturating_add(least);
                    if n > bound {
                        break;
                    }
                }
            }
            n
        }
        Access::Keys(ks) => ks.len() as u64,
        Access::PkPrefix(p) => {
            let r = (p.clone(), prefix_end(p));
            let mut n = 0u64;
            let max = usize::try_from(bound.saturating_add(1)).unwrap_or(usize::MAX);
            t.for_each_row(&key_range(&r, max), &mut |_, _| {
                n += 1;
                Ok(n <= bound)
            })?;
            n
        }
    })
}

/// The primary keys `a` stands for (within `within` when given).
fn materialize(
    t: &dyn Table,
    a: &Access,
    within: Option<&BTreeSet<Vec<u8>>>,
) -> Result<BTreeSet<Vec<u8>>> {
    let mut out = BTreeSet::new();
    let keep = |pk: &[u8]| within.is_none_or(|s| s.contains(pk));
    match a {
        Access::Ranges(space, typ, rs) => {
            // Gathered first and built into the set at once: a set built from sorted keys has
            // full nodes, one filled a key at a time in order about half-full ones (47 bytes a
            // key against 26, on a query matching millions of records).
            let mut keys: Vec<Vec<u8>> = Vec::new();
            for r in rs {
                postings::for_each_posting(
                    &**space,
                    *typ,
                    &key_range(r, usize::MAX),
                    &mut |pk, _| {
                        if keep(pk) {
                            keys.push(pk.to_vec());
                        }
                        Ok(true)
                    },
                )?;
            }
            keys.shrink_to_fit();
            out = keys.into_iter().collect();
        }
        Access::All(parts) => {
            let mut cur: Option<BTreeSet<Vec<u8>>> = within.cloned();
            for p in parts {
                let s = materialize(t, p, cur.as_ref())?;
                let empty = s.is_empty();
                cur = Some(s);
                if empty {
                    break;
                }
            }
            out = cur.unwrap_or_default();
        }
        Access::Fts(space, units) => {
            if !units.first().is_some_and(|u| u.positive) {
                return Ok(out);
            }
            let mut cur: Option<BTreeSet<Vec<u8>>> = within.cloned();
            for u in units.iter().filter(|u| u.positive) {
                let mut s = BTreeSet::new();
                for p in &u.phrases {
                    let ks = phrase_keys(&**space, p, cur.as_ref())?;
                    if s.is_empty() {
                        s = ks;
                    } else {
                        s.extend(ks);
                    }
                }
                cur = Some(s);
            }
            let mut cur = cur.unwrap_or_default();
            for u in units.iter().filter(|u| !u.positive) {
                for p in &u.phrases {
                    if cur.is_empty() {
                        break;
                    }
                    for k in phrase_keys(&**space, p, Some(&cur))? {
                        cur.remove(&k);
                    }
                }
            }
            out = cur;
        }
        Access::Keys(ks) => {
            for k in ks {
                if keep(k) && t.get_row(k)?.is_some() {
                    out.insert(k.clone());
                }
            }
        }
        Access::PkPrefix(p) => {
            let r = (p.clone(), prefix_end(p));
            t.for_each_row(&key_range(&r, usize::MAX), &mut |k, _| {
                if keep(k) {
                    out.insert(k.to_vec());
                }
                Ok(true)
            })?;
        }
    }
    Ok(out)
}

/// The records whose text holds phrase `p`, from the q-gram index: exact, by the grams'
/// offsets.
fn phrase_keys(
    space: &dyn Store,
    p: &str,
    within: Option<&BTreeSet<Vec<u8>>>,
) -> Result<BTreeSet<Vec<u8>>> {
    let grams = phrase_grams(p);
    if grams.len() == 1 && p.chars().count() < crate::table::terms::QGRAM {
        let mut out = BTreeSet::new();
        let r = key_range(&grams[0].0, usize::MAX);
        postings::for_each_posting(space, IndexType::QGram, &r, &mut |pk, _| {
            if within.is_none_or(|s| s.contains(pk)) {
                out.insert(pk.to_vec());
            }
            Ok(true)
        })?;
        return Ok(out);
    }
    // The records (in primary-key order: each gram is one term, its list in that order) with
    // the text offsets where the phrase may start, narrowed gram by gram by a merge.
    let mut cur: Option<Vec<(Vec<u8>, Vec<u32>)>> = None;
    let n = grams.len();
    for (g, (r, o)) in grams.into_iter().enumerate() {
        let last = g + 1 == n;
        let mut next: Vec<(Vec<u8>, Vec<u32>)> = Vec::new();
        let mut i = 0;
        let r = key_range(&r, usize::MAX);
        postings::for_each_posting(space, IndexType::QGram, &r, &mut |pk, offsets| {
            if !within.is_none_or(|s| s.contains(pk)) {
                return Ok(true);
            }
            let prev: Option<&[u32]> = match &cur {
                None => None,
                Some(c) => {
                    while i < c.len() && c[i].0.as_slice() < pk {
                        i += 1;
                    }
                    if i == c.len() {
                        return Ok(false);
                    }
                    if c[i].0.as_slice() != pk {
                        return Ok(true);
                    }
                    Some(&c[i].1)
                }
            };
            let mut starts = offsets
                .iter()
                .filter(|&&x| x >= o)
                .map(|&x| x - o)
                .filter(|x| prev.is_none_or(|p| p.binary_search(x).is_ok()));
            if last {
                if starts.next().is_some() {
                    next.push((pk.to_vec(), Vec::new()));
                }
            } else {
                let starts: Vec<u32> = starts.collect();
                if !starts.is_empty() {
                    next.push((pk.to_vec(), starts));
                }
            }
            Ok(true)
        })?;
        let empty = next.is_empty();
        cur = Some(next);
        if empty {
            break;
        }
    }
    Ok(cur
        .unwrap_or_default()
        .into_iter()
        .map(|(k, _)| k)
        .collect())
}

/// A record's sort key for `order`: `None` when it has no such column.
fn sort_key(pk: &[u8], cols: &Columns, order: &(Vec<u8>, OrderType)) -> Option<Vec<u8>> {
    let v = if order.0.is_empty() {
        Some(pk)
    } else {
        cols.get(&order.0)
    };
    v.map(|v| {
        if order.1.numeric() {
            dec_term(tc_atof(v)).to_vec()
        } else {
            v.to_vec()
        }
    })
}

/// The order of two results: by key (missing last), ties by primary key, both reversed for a
/// descending order; results without the key by primary key ascending.
pub(crate) fn cmp_results(
    a: &(Vec<u8>, Option<Vec<u8>>),
    b: &(Vec<u8>, Option<Vec<u8>>),
    desc: bool,
) -> Ordering {
    match (&a.1, &b.1) {
        (Some(x), Some(y)) => {
            let o = x.cmp(y).then_with(|| a.0.cmp(&b.0));
            if desc {
                o.reverse()
            } else {
                o
            }
        }
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.0.cmp(&b.0),
    }
}

fn shown(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn cond_name(c: &Cond) -> String {
    format!(
        "\"{}\" {}{}{}",
        shown(&c.column),
        if c.negate { "~" } else { "" },
        if c.noidx { "+" } else { "" },
        c.op.name()
    )
}

/// Run one query on `t`.
pub fn search(t: &dyn Table, q: &Query) -> Result<Found> {
    let mut hint = String::new();
    let rows = t.rows();
    let need = q.limit.map(|l| l.saturating_add(q.skip));
    let _ = writeln!(hint, "records: {rows}");
    // 1. Estimates (counted up to 16 times the best so far, never past the records: an index
    // with more entries than the table has records is no better than reading them).
    let mut cands: Vec<(usize, Access, u64)> = Vec::new();
    let mut best = rows.saturating_add(1);
    for (i, c) in q.conds.iter().enumerate() {
        let Some((a, iname)) = access(t, c) else {
            continue;
        };
        let bound = best.saturating_mul(INTERSECT_RATIO).min(rows);
        let est = estimate(t, &a, bound)?;
        if est > bound {
            let _ = writeln!(
                hint,
                "index estimate: {} on {iname}: more than {bound} entries (stopped counting)",
                cond_name(c)
            );
            continue;
        }
        let _ = writeln!(
            hint,
            "index estimate: {} on {iname}: {est} entries",
            cond_name(c)
        );
        best = best.min(est);
        cands.push((i, a, est));
    }
    cands.sort_by_key(|c| c.2);
    let driver_est = cands.first().map(|c| c.2);
    // 3. An ordered walk?
    if let (Some((ocol, otype)), Some(need)) = (&q.order, need) {
        let walkable = if ocol.is_empty() && !otype.numeric() {
            Some(None)
        } else {
            match t.index(ocol) {
                Some((IndexType::Lexical, s)) if !otype.numeric() => {
                    Some(Some((IndexType::Lexical, s)))
                }
                Some((IndexType::Decimal, s)) if otype.numeric() => {
                    Some(Some((IndexType::Decimal, s)))
                }
                _ => None,
            }
        };
        let pays = match driver_est {
            None => (need as u64) < rows,
            Some(d) => (need as u128) * (rows as u128) < (d as u128) * (d as u128),
        };
        if let (Some(src), true) = (walkable, pays) {
            // Indexes cheap beside the records the walk is expected to read (need × records /
            // driven) filter it: a record they rule out is not read.
            let mut filter: Option<BTreeSet<Vec<u8>>> = None;
            let mut exact = vec![false; q.conds.len()];
            for (i, a, est) in &cands {
                let (e, n, r) = (*est as u128, need as u128, rows as u128);
                if e * e > 8 * n * r {
                    break;
                }
                let s = materialize(t, a, filter.as_ref())?;
                let _ = writeln!(
                    hint,
                    "filtering by index: {}: {} records",
                    cond_name(&q.conds[*i]),
                    s.len()
                );
                exact[*i] = true;
                filter = Some(s);
            }
            return walk(t, q, src, need, hint, filter, &exact);
        }
    }
    // 2. Driver and intersections.
    let mut exact = vec![false; q.conds.len()];
    let mut set: Option<BTreeSet<Vec<u8>>> = None;
    if let Some(d) = driver_est {
        for (i, a, est) in &cands {
            if *est > d.saturating_mul(INTERSECT_RATIO) {
                break;
            }
            let s = materialize(t, a, set.as_ref())?;
            let role = if set.is_none() {
                "driving by"
            } else {
                "intersecting"
            };
            let _ = writeln!(
                hint,
                "{role} index: {}: {} records",
                cond_name(&q.conds[*i]),
                s.len()
            );
            exact[*i] = true;
            let empty = s.is_empty();
            set = Some(s);
            if empty {
                break;
            }
        }
    }
    let residual: Vec<&Cond> = q
        .conds
        .iter()
        .zip(&exact)
        .filter(|(_, &e)| !e)
        .map(|(c, _)| c)
        .collect();
    for c in &residual {
        let _ = writeln!(hint, "checking on the record: {}", cond_name(c));
    }
    let needs_value = q.order.as_ref().is_some_and(|(c, _)| !c.is_empty());
    let stop_at = if q.order.is_none() { need } else { None };
    // The matches' primary keys, and with an order each one's sort key (`sorts[i]` is
    // `keys[i]`'s): an unordered result is only the keys, each moved from the driving set, so
    // a query matching millions of records holds each key once (issue 32's query by date).
    let room = set
        .as_ref()
        .map_or(0, |s| s.len().min(stop_at.unwrap_or(usize::MAX)));
    let mut keys: Vec<Vec<u8>> = Vec::with_capacity(room);
    let mut sorts: Vec<Option<Vec<u8>>> = Vec::new();
    let mut read = 0u64;
    let cols_read = set.is_none() || !residual.is_empty() || needs_value;
    let all_conds: Vec<&Cond> = q.conds.iter().collect();
    // A record that is read is judged on every condition (those an index answered agree with
    // it, unless a writer changed the record since: then the record as read decides).
    let mut take = |pk: Cow<'_, [u8]>, cols: &Columns| {
        let conds: &[&Cond] = if cols_read { &all_conds } else { &residual };
        if conds.iter().all(|c| c.check_row(&pk, cols)) {
            if let Some(o) = &q.order {
                sorts.push(sort_key(&pk, cols, o));
            }
            keys.push(pk.into_owned());
        }
        stop_at.is_none_or(|m| keys.len() < m)
    };
    match set {
        Some(set) => {
            // Consumed: each key moves into the result and the set's nodes are freed behind.
            let empty = Columns::new();
            for pk in set {
                let more = if cols_read {
                    read += 1;
                    match t.get_row(&pk)? {
                        Some(cols) => take(Cow::Owned(pk), &cols),
                        None => continue,
                    }
                } else {
                    take(Cow::Owned(pk), &empty)
                };
                if !more {
                    break;
                }
            }
        }
        None => {
            let _ = writeln!(hint, "scanning the whole table");
            let all = KeyRange {
                from: Bound::Unbounded,
                to: Bound::Unbounded,
                desc: false,
                max: usize::MAX,
            };
            // Only the columns the conditions and the order name are decoded.
            let mut names: Vec<&[u8]> = q.conds.iter().map(|c| c.column.as_slice()).collect();
            names.extend(q.order.iter().map(|o| o.0.as_slice()));
            names.retain(|n| !n.is_empty());
            t.for_each_row_of(&all, &names, &mut |pk, cols| {
                read += 1;
                Ok(take(Cow::Borrowed(pk), cols))
            })?;
        }
    }
    let _ = writeln!(hint, "records read: {read}");
    let _ = writeln!(hint, "result set size: {}", keys.len());
    if let Some((ocol, otype)) = &q.order {
        let _ = writeln!(
            hint,
            "sorting the result set: \"{}\" {:?}",
            shown(ocol),
            otype
        );
        let mut res: Vec<(Vec<u8>, Option<Vec<u8>>)> = keys.into_iter().zip(sorts).collect();
        res.sort_by(|a, b| cmp_results(a, b, otype.desc()));
        return Ok(finish(res.into_iter().map(|r| r.0), q, hint));
    }
    let _ = writeln!(hint, "leaving the primary-key order");
    Ok(finish(keys.into_iter(), q, hint))
}

/// Skip and limit applied.
fn finish(keys: impl Iterator<Item = Vec<u8>>, q: &Query, hint: String) -> Found {
    let keys: Vec<Vec<u8>> = keys
        .skip(q.skip)
        .take(q.limit.unwrap_or(usize::MAX))
        .collect();
    Found { keys, hint }
}

/// Answer an ordered, limited query by walking an ordered index (`None`: the records in
/// primary-key order) until `need` records match.
fn walk(
    t: &dyn Table,
    q: &Query,
    src: Option<(IndexType, Arc<dyn Store>)>,
    need: usize,
    mut hint: String,
    filter: Option<BTreeSet<Vec<u8>>>,
    exact: &[bool],
) -> Result<Found> {
    let (ocol, otype) = q.order.clone().unwrap_or((Vec::new(), OrderType::StrAsc));
    let residual: Vec<&Cond> = q
        .conds
        .iter()
        .zip(exact)
        .filter(|(_, &e)| !e)
        .map(|(c, _)| c)
        .collect();
    let passes = |pk: &[u8]| filter.as_ref().is_none_or(|f| f.contains(pk));
    let desc = otype.desc();
    let all = KeyRange {
        from: Bound::Unbounded,
        to: Bound::Unbounded,
        desc,
        max: usize::MAX,
    };
    for c in &residual {
        let _ = writeln!(hint, "checking on the record: {}", cond_name(c));
    }
    let mut res: Vec<Vec<u8>> = Vec::new();
    let mut read = 0u64;
    match src {
        None => {
            let _ = writeln!(
                hint,
                "walking the records in primary-key order ({}) for {need}",
                if desc { "desc" } else { "asc" }
            );
            t.for_each_row(&all, &mut |pk, cols| {
                read += 1;
                if passes(pk) && q.conds.iter().all(|c| c.check_row(pk, cols)) {
                    res.push(pk.to_vec());
                }
                Ok(res.len() < need)
            })?;
        }
        Some((typ, space)) => {
            let _ = writeln!(
                hint,
                "walking index \"{}\" ({}) {} for the order, for {need}",
                shown(&ocol),
                typ.name(),
                if desc { "desc" } else { "asc" }
            );
            let mut err = None;
            space.for_each_in_range(&all, &mut |k, v, _| {
                let pk = decode_entry(typ, k, v)?.pk.to_vec();
                if !passes(&pk) {
                    return Ok(true);
                }
                if residual.is_empty() {
                    res.push(pk);
                    return Ok(res.len() < need);
                }
                read += 1;
                match t.get_row(&pk) {
                    Ok(Some(cols)) => {
                        if q.conds.iter().all(|c| c.check_row(&pk, &cols)) {
                            res.push(pk);
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        err = Some(e);
                        return Ok(false);
                    }
                }
                Ok(res.len() < need)
            })?;
            if let Some(e) = err {
                return Err(e);
            }
            if res.len() < need {
                // Records without the column come last, in primary-key order.
                let _ = writeln!(hint, "scanning for records without \"{}\"", shown(&ocol));
                let fwd = KeyRange { desc: false, ..all };
                t.for_each_row(&fwd, &mut |pk, cols| {
                    read += 1;
                    if cols.get(&ocol).is_none()
                        && passes(pk)
                        && q.conds.iter().all(|c| c.check_row(pk, cols))
                    {
                        res.push(pk.to_vec());
                    }
                    Ok(res.len() < need)
                })?;
            }
        }
    }
    let _ = writeln!(hint, "records read: {read}");
    let _ = writeln!(hint, "result set size: {}", res.len());
    Ok(finish(res.into_iter(), q, hint))
}

/// Tokyo Cabinet's `tctdbmetasearch`: the queries' results combined by `op`, ordered by the
/// first query's order (else primary-key order) and limited by its limit and skip. For a
/// union each query keeps its own limit (plus its skip); for an intersection or a difference
/// every query runs without one.
pub fn metasearch(t: &dyn Table, qs: &[Query], op: SetOp) -> Result<Found> {
    let Some(first) = qs.first() else {
        return Ok(Found::default());
    };
    if qs.len() == 1 {
        return search(t, first);
    }
    let mut hint = String::new();
    let mut set: BTreeSet<Vec<u8>> = BTreeSet::new();
    for (i, q) in qs.iter().enumerate() {
        let mut sub = q.clone();
        sub.skip = 0;
        sub.limit = match op {
            SetOp::Union => q.limit.map(|l| l.saturating_add(q.skip)),
            _ => None,
        };
        if i > 0 && op != SetOp::Union && set.is_empty() {
            let _ = writeln!(hint, "[{i}] omitted");
            continue;
        }
        let f = search(t, &sub)?;
        for line in f.hint.lines() {
            let _ = writeln!(hint, "[{i}] {line}");
        }
        let keys: BTreeSet<Vec<u8>> = f.keys.into_iter().collect();
        match (op, i) {
            (_, 0) | (SetOp::Union, _) => set.extend(keys),
            (SetOp::Isect, _) => set.retain(|k| keys.contains(k)),
            (SetOp::Diff, _) => set.retain(|k| !keys.contains(k)),
        }
    }
    let keys: Vec<Vec<u8>> = match &first.order {
        Some(order) if !(order.0.is_empty() && order.1 == OrderType::StrAsc) => {
            let mut res = Vec::with_capacity(set.len());
            for pk in set {
                let k = if order.0.is_empty() {
                    sort_key(&pk, &Columns::new(), order)
                } else {
                    match t.get_row(&pk)? {
                        Some(cols) => sort_key(&pk, &cols, order),
                        None => continue,
                    }
                };
                res.push((pk, k));
            }
            res.sort_by(|a, b| cmp_results(a, b, order.1.desc()));
            res.into_iter().map(|r| r.0).collect()
        }
        _ => set.into_iter().collect(),
    };
    let _ = writeln!(hint, "metasearch {op:?}: {} records", keys.len());
    Ok(finish(keys.into_iter(), first, hint))
}

/// The records of `keys` in Tyrant's reply form (`tcadbmisc`): with no `columns`, the primary
/// key under the empty name, then every column; else only the columns named, in the order
/// named (`""` standing for the primary key), those a record lacks left out. Name and value
/// pairs, NUL-separated. Keys whose record is gone are left out.
pub fn fetch(t: &dyn Table, keys: &[Vec<u8>], columns: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
    let mut names: Vec<&[u8]> = Vec::new();
    for c in columns {
        if !names.contains(&c.as_slice()) {
            names.push(c);
        }
    }
    let mut out = Vec::with_capacity(keys.len());
    for k in keys {
        let Some(cols) = t.get_row(k)? else { continue };
        let mut fields: Vec<&[u8]> = Vec::new();
        if names.is_empty() {
            fields.extend([&b""[..], k]);
            for (n, v) in cols.iter() {
                fields.extend([n, v]);
            }
        } else {
            for n in &names {
                let v = if n.is_empty() {
                    Some(&k[..])
                } else {
                    cols.get(n)
                };
                if let Some(v) = v {
                    fields.extend([*n, v]);
                }
            }
        }
        let e = fields.join(&0u8);
        out.push(e);
    }
    Ok(out)
}

/// Whether a record still answers the queries `qs` joined by `op` (their conditions only: a
/// limit or skip does not take a record out of a set it was found in).
pub fn still_matches(pk: &[u8], cols: &Columns, qs: &[Query], op: SetOp) -> bool {
    let hit = |q: &Query| q.conds.iter().all(|c| c.check_row(pk, cols));
    match op {
        SetOp::Union => qs.iter().any(hit),
        SetOp::Isect => qs.iter().all(hit),
        SetOp::Diff => qs.first().is_some_and(hit) && !qs.iter().skip(1).any(hit),
    }
}

/// Remove the records of `keys` that still answer `qs` joined by `op`, through `store` (the
/// table, or a wrapper of it such as the update log's, so each removal is logged as a remove of
/// its key). Each record is looked at again and removed under its record's lock
/// ([`Store::accept`]): a record a writer changed between the search and its removal so that it
/// no longer matches is kept. Each record goes with its index entries, as every write of the
/// kind does. How many were removed.
pub fn remove(store: &dyn Store, keys: &[Vec<u8>], qs: &[Query], op: SetOp) -> Result<u64> {
    let mut n = 0u64;
    for k in keys {
        let mut removed = false;
        store.accept(k, &mut |cur| match cur {
            Some(c) => match Columns::from_wire(c.value) {
                Ok(cols) if still_matches(k, &cols, qs, op) => {
                    removed = true;
                    Decision::Remove
                }
                _ => Decision::Keep,
            },
            None => Decision::Keep,
        })?;
        n += u64::from(removed);
    }
    Ok(n)
}

/// Tyrant's `misc search` (and `metasearch`) on `store`, a table or a wrapper of one: the
/// reply's elements — primary keys; records (with `get`); one decimal count (with `count`);
/// nothing (with `out` and without `get`); and with `hint`, a last element `\0\0[[HINT]]\n`
/// and the plan.
pub fn run_search(store: &dyn Store, s: &Search) -> Result<Vec<Vec<u8>>> {
    let t = store.table().ok_or(crate::error::Error::Unsupported(
        "a search on a database that is not a table",
    ))?;
    let found = metasearch(t, &s.queries, s.set_op)?;
    let mut out: Vec<Vec<u8>> = match &s.columns {
        Some(cols) if !s.count => fetch(t, &found.keys, cols)?,
        _ => Vec::new(),
    };
    let mut hint = found.hint;
    if s.remove {
        let n = remove(store, &found.keys, &s.queries, s.set_op)?;
        let _ = writeln!(hint, "removed: {n}");
    }
    if s.count {
        out = vec![found.keys.len().to_string().into_bytes()];
    } else if s.columns.is_none() && !s.remove {
        out = found.keys;
    }
    if s.hint {
        let mut h = b"\0\0[[HINT]]\n".to_vec();
        h.extend_from_slice(hint.as_bytes());
        out.push(h);
    }
    Ok(out)
}
