//! Walks in key order, both ways, over the leaves (the [`Walk`] of the tree's cursors), and the
//! leaf-by-leaf scans behind `for_each_record` and `for_each_in_range`.

use super::forest::{Forest, NONE};
use super::{Gone, Inner, ReadLatch};
use crate::cursor::{Found, Walk};
use crate::error::Result;
use crate::store::{is_expired, now_secs, KeyRange, Meta, Record};
use std::cmp::Ordering as KeyOrder;
use std::ops::Bound::{self, Excluded, Included, Unbounded};

/// A walk remembers the value it last landed on (key and duplicate number), so that among
/// several values of one key it steps from value to value.
pub(crate) struct TreeWalk<'a> {
    pub inner: &'a Inner,
    pub last: Option<(Vec<u8>, u64)>,
}

/// A live record, and which of its key's values it is.
type FoundDup = Option<(Vec<u8>, Record, u64)>;

impl Inner {
    /// The leaf holding the keys just below leaf `id`'s low key (`None`: `id` is the first).
    fn leaf_before<'f>(
        &self,
        f: &'f Forest,
        id: u32,
    ) -> Result<std::result::Result<Option<(u32, ReadLatch<'f>)>, Gone>> {
        let Some(low) = f.slot(id).low() else {
            return Ok(Ok(None));
        };
        let mut at = f.index.find_before(self.cmp, low);
        loop {
            let g = match self.read_id(f, at)? {
                Ok(g) => g,
                Err(Gone) => return Ok(Err(Gone)),
            };
            // Move right while the right neighbour still starts below `low`.
            let r = g.right;
            let further = r != NONE
                && r != id
                && f.slot(r)
                    .low()
                    .is_some_and(|rl| self.cmp.cmp(rl, low) == KeyOrder::Less);
            if further {
                drop(g);
                at = r;
                continue;
            }
            return Ok(Ok(Some((at, g))));
        }
    }

    /// The first live record after `from`, in key order; with `dup`, an `Excluded` bound
    /// is that value of the key, and the key's later values come first.
    pub(crate) fn next_after(&self, from: Bound<&[u8]>, dup: Option<u64>) -> Result<FoundDup> {
        let now = now_secs();
        'again: loop {
            let f = self.forest.load();
            let (_, mut g) = match from {
                Unbounded => match self.read_id(&f, 0)? {
                    Ok(g) => (0, g),
                    Err(Gone) => continue,
                },
                Included(k) | Excluded(k) => match self.read_leaf(&f, k)? {
                    Ok(x) => x,
                    Err(Gone) => continue,
                },
            };
            let mut first = true;
            loop {
                let leaf = g.leaf.as_ref().expect("latched leaves are cached");
                let start = match (first, from) {
                    (false, _) | (_, Unbounded) => 0,
                    (true, Included(k)) => leaf.find(self.cmp, k).0,
                    (true, Excluded(k)) => match dup {
                        Some(d) => match leaf.find_dup(self.cmp, k, d) {
                            (p, true) => p + 1,
                            (p, false) => p,
                        },
                        None => leaf.upper(self.cmp, k),
                    },
                };
                for i in start..leaf.len() {
                    let e = leaf.entry(i);
                    if !is_expired(e.meta.expires, now) {
                        return Ok(Some((e.key.to_vec(), record(e.value, e.meta), e.dup)));
                    }
                }
                let r = g.right;
                drop(g);
                if r == NONE {
                    return Ok(None);
                }
                g = match self.read_id(&f, r)? {
                    Ok(g) => g,
                    Err(Gone) => continue 'again,
                };
                first = false;
            }
        }
    }

    /// The last live record before `to`, in key order; with `dup`, an `Excluded` bound is
    /// that value of the key, and the key's earlier values come first.
    pub(crate) fn prev_before(&self, to: Bound<&[u8]>, dup: Option<u64>) -> Result<FoundDup> {
        let now = now_secs();
        'again: loop {
            let f = self.forest.load();
            let (mut id, mut g) = match to {
                Unbounded => {
                    let mut id = f.index.last();
                    loop {
                        let g = match self.read_id(&f, id)? {
                            Ok(g) => g,
                            Err(Gone) => continue 'again,
                        };
                        if g.right == NONE {
                            break (id, g);
                        }
                        id = g.right;
                    }
                }
                Included(k) | Excluded(k) => match self.read_leaf(&f, k)? {
                    Ok(x) => x,
                    Err(Gone) => continue,
                },
            };
            let mut first = true;
            loop {
                let leaf = g.leaf.as_ref().expect("latched leaves are cached");
                let end = match (first, to) {
                    (false, _) | (_, Unbounded) => leaf.len(),
                    (true, Included(k)) => leaf.upper(self.cmp, k),
                    (true, Excluded(k)) => match dup {
                        Some(d) => leaf.find_dup(self.cmp, k, d).0,
                        None => leaf.find(self.cmp, k).0,
                    },
                };
                for i in (0..end).rev() {
                    let e = leaf.entry(i);
                    if !is_expired(e.meta.expires, now) {
                        return Ok(Some((e.key.to_vec(), record(e.value, e.meta), e.dup)));
                    }
                }
                drop(g);
                match self.leaf_before(&f, id)? {
                    Err(Gone) => continue 'again,
                    Ok(None) => return Ok(None),
                    Ok(Some((pid, pg))) => {
                        id = pid;
                        g = pg;
                    }
                }
                first = false;
            }
        }
    }

    /// Show every live record in key order to `f` until it returns false, a leaf at a time
    /// (each latched for reading while its records are shown).
    pub(crate) fn scan(
        &self,
        range: &KeyRange<'_>,
        f: &mut crate::store::RecordVisitor<'_>,
    ) -> Result<u64> {
        let now = now_secs();
        let mut shown = 0u64;
        if range.max == 0 {
            return Ok(0);
        }
        if range.desc {
            return self.scan_desc(range, f);
        }
        'again: loop {
            let forest = self.forest.load();
            let mut g = match range.from {
                Unbounded => match self.read_id(&forest, 0)? {
                    Ok(g) => g,
                    Err(Gone) => continue,
                },
                Included(k) | Excluded(k) => match self.read_leaf(&forest, k)? {
                    Ok(x) => x.1,
                    Err(Gone) => continue,
                },
            };
            let mut first = true;
            // After a restart (a vanish while scanning), resume after the last key shown.
            loop {
                let leaf = g.leaf.as_ref().expect("latched leaves are cached");
                let start = match (first, range.from) {
                    (false, _) | (_, Unbounded) => 0,
                    (true, Included(k)) => leaf.find(self.cmp, k).0,
                    (true, Excluded(k)) => leaf.upper(self.cmp, k),
                };
                for i in start..leaf.len() {
                    let e = leaf.entry(i);
                    if !range_below_to(self, range, e.key) {
                        return Ok(shown);
                    }
                    if is_expired(e.meta.expires, now) {
                        continue;
                    }
                    shown += 1;
                    if !f(e.key, e.value, e.meta)? || shown >= range.max as u64 {
                        return Ok(shown);
                    }
                }
                let r = g.right;
                drop(g);
                if r == NONE {
                    return Ok(shown);
                }
                g = match self.read_id(&forest, r)? {
                    Ok(g) => g,
                    // Vanished meanwhile: nothing more to show.
                    Err(Gone) => break 'again,
                };
                first = false;
            }
        }
        Ok(shown)
    }

    fn scan_desc(
        &self,
        range: &KeyRange<'_>,
        f: &mut crate::store::RecordVisitor<'_>,
    ) -> Result<u64> {
        // Descending walks go leaf by leaf through `prev_before` positions.
        let now = now_secs();
        let mut shown = 0u64;
        let forest = self.forest.load();
        let (mut id, mut g) = match range.to {
            Unbounded => {
                let mut id = forest.index.last();
                loop {
                    let g = match self.read_id(&forest, id)? {
                        Ok(g) => g,
                        Err(Gone) => return Ok(0),
                    };
                    if g.right == NONE {
                        break (id, g);
                    }
                    id = g.right;
                }
            }
            Included(k) | Excluded(k) => match self.read_leaf(&forest, k)? {
                Ok(x) => x,
                Err(Gone) => return Ok(0),
            },
        };
        let mut first = true;
        loop {
            let leaf = g.leaf.as_ref().expect("latched leaves are cached");
            let end = match (first, range.to) {
                (false, _) | (_, Unbounded) => leaf.len(),
                (true, Included(k)) => leaf.upper(self.cmp, k),
                (true, Excluded(k)) => leaf.find(self.cmp, k).0,
            };
            for i in (0..end).rev() {
                let e = leaf.entry(i);
                if !range_above_from(self, range, e.key) {
                    return Ok(shown);
                }
                if is_expired(e.meta.expires, now) {
                    continue;
                }
                shown += 1;
                if !f(e.key, e.value, e.meta)? || shown >= range.max as u64 {
                    return Ok(shown);
                }
            }
            drop(g);
            match self.leaf_before(&forest, id)? {
                Err(Gone) | Ok(None) => return Ok(shown),
                Ok(Some((pid, pg))) => {
                    id = pid;
                    g = pg;
                }
            }
            first = false;
        }
    }
}

/// Whether `key` is not past the range's upper bound (in the tree's order).
fn range_below_to(inner: &Inner, r: &KeyRange<'_>, key: &[u8]) -> bool {
    match r.to {
        Included(t) => inner.cmp.cmp(key, t) != KeyOrder::Greater,
        Excluded(t) => inner.cmp.cmp(key, t) == KeyOrder::Less,
        Unbounded => true,
    }
}

fn range_above_from(inner: &Inner, r: &KeyRange<'_>, key: &[u8]) -> bool {
    match r.from {
        Included(t) => inner.cmp.cmp(key, t) != KeyOrder::Less,
        Excluded(t) => inner.cmp.cmp(key, t) == KeyOrder::Greater,
        Unbounded => true,
    }
}

fn record(value: &[u8], meta: Meta) -> Record {
    Record {
        value: value.to_vec(),
        meta,
    }
}

impl Walk for TreeWalk<'_> {
    fn ordered(&self) -> bool {
        true
    }
    fn forward(&mut self, from: Bound<&[u8]>) -> Result<Found> {
        self.inner.wal.check_open()?;
        let dup = self.dup_at(from);
        let found = self.inner.next_after(from, dup)?;
        Ok(self.land(found))
    }
    fn backward(&mut self, to: Bound<&[u8]>) -> Result<Found> {
        self.inner.wal.check_open()?;
        let dup = self.dup_at(to);
        let found = self.inner.prev_before(to, dup)?;
        Ok(self.land(found))
    }
    fn get_at(&mut self, _store: &dyn crate::store::Store, key: &[u8]) -> Result<Option<Record>> {
        self.inner.wal.check_open()?;
        let dup = match &self.last {
            Some((k, d)) if k.as_slice() == key => *d,
            _ => 0,
        };
        self.inner.get_dup(key, dup)
    }
}

impl TreeWalk<'_> {
    /// The value the walk is on, when `b` is the key it last landed on.
    fn dup_at(&self, b: Bound<&[u8]>) -> Option<u64> {
        match (b, &self.last) {
            (Excluded(k), Some((lk, d))) if lk.as_slice() == k => Some(*d),
            _ => None,
        }
    }

    fn land(&mut self, found: FoundDup) -> Found {
        let (k, r, d) = found?;
        self.last = Some((k.clone(), d));
        Some((k, r))
    }
}

impl Inner {
    /// Value `dup` of `key`, when live.
    pub(crate) fn get_dup(&self, key: &[u8], dup: u64) -> Result<Option<Record>> {
        self.read_key(key, |leaf| {
            let (i, hit) = leaf.find_dup(self.cmp, key, dup);
            let e = hit.then(|| leaf.entry(i))?;
            (!is_expired(e.meta.expires, now_secs())).then(|| record(e.value, e.meta))
        })
    }
}
