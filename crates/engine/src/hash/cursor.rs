//! The hash's cursor: the index in its own order (shard, then tag, then key), each record
//! read where the index points when the walk reaches it.
//!
//! A key's place in that order comes from its hash alone, so it never changes: not when the
//! record is rewritten, not when compaction moves it to another segment, not when the table
//! grows. A walk therefore meets every key at most once and meets every key that stays in
//! the index throughout (the log order the cursor used to follow changed under it: compaction
//! moved records behind or ahead of it). What it holds is a window of the current shard's
//! tags (4 bytes each, at most a 32nd of the shard, at least 4,096), read under the shard's
//! exclusive hold in one pass over its table, and the keys of the last tag read.

use super::*;
#[cfg(doc)]
use crate::cursor::KindCursor;
use crate::cursor::{Found, Walk};
use std::collections::VecDeque;
use std::ops::Bound;

/// Tags a window holds at least (and a 32nd of the shard's slots when that is more).
const WINDOW_MIN: usize = 4096;

/// The walk behind the hash's cursor (a [`KindCursor`] over it): the index in its own order
/// (see the module doc).
pub(super) struct HashCursor<'a> {
    db: &'a DiskHash,
    /// Every shard's seq when the walk began: a record version written later is not returned
    /// by a step. A client that rewrites each record it visits never meets them again anyway
    /// (their place does not move); the bound makes a walk a view of the records that existed
    /// when it began, whatever is inserted ahead of it. `None`: no bound (a read-only
    /// database, which nobody writes).
    seqs: Option<Box<[u64]>>,
    /// The shard whose tags `tags` holds (`usize::MAX`: none).
    shard: usize,
    /// Every tag of `shard` in (`from`, `to`] when the window was read, ascending, each once.
    tags: VecDeque<u32>,
    from: Option<u32>,
    /// `None`: the window reaches the end of the shard.
    to: Option<u32>,
    /// The keys of the last tag group read (shard, tag, keys ascending).
    group: Option<(usize, u32, Vec<Vec<u8>>)>,
    damaged: u64,
}

impl<'a> HashCursor<'a> {
    pub(super) fn new(db: &'a DiskHash) -> HashCursor<'a> {
        HashCursor {
            db,
            seqs: None,
            shard: usize::MAX,
            tags: VecDeque::new(),
            from: None,
            to: None,
            group: None,
            damaged: 0,
        }
    }

    /// The live records of `tag` in `shard` (every key there whose record the index points
    /// at, unexpired and within the walk's bound), ascending by key; `only` keeps just that
    /// key's.
    fn read_group(
        &mut self,
        shard: usize,
        tag: u32,
        only: Option<&[u8]>,
    ) -> Result<Vec<(Vec<u8>, Record)>> {
        let inner = &self.db.inner;
        let bound = self.seqs.as_ref().map(|s| s[shard]);
        let now = now_secs();
        let mut damaged = 0;
        // The body never evaluates to an error (it returns one), so it runs once.
        let mut got = with_reader!(inner, shard, tag, tbl => {
            let mut got: Vec<(Vec<u8>, Record)> = Vec::new();
            for slot in tbl.cands(tag) {
                let read = inner.with_record(slot.seg, slot.off as u64, |h, rec| {
                    if h.typ != T_PUT || h.key_off + h.klen > rec.len() {
                        return Ok(None);
                    }
                    let key = &rec[h.key_off..h.key_off + h.klen];
                    if only.is_some_and(|o| o != key)
                        || bound.is_some_and(|b| h.fields.seq > b)
                        || is_expired(h.fields.expires, now)
                    {
                        return Ok(None);
                    }
                    Ok(Some((
                        key.to_vec(),
                        Record {
                            value: decode_value(h, rec)?,
                            meta: meta_of(h),
                        },
                    )))
                });
                match read.and_then(|r| r) {
                    Ok(Some(x)) => got.push(x),
                    Ok(None) => {}
                    // A record the index points at that no longer verifies (damage behind
                    // the checkpoint of a database opened despite it): passed over, counted.
                    Err(Error::Corrupt(_)) => damaged += 1,
                    Err(e) => return Err(e),
                }
            }
            Ok::<_, Error>(got)
        })?;
        self.damaged += damaged;
        got.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(got)
    }

    /// Read the window of `shard`'s tags after `after`.
    fn fill(&mut self, shard: usize, after: Option<u32>) {
        let g = self.db.inner.excl(shard);
        let cap = WINDOW_MIN.max(g.len() / 32);
        let mut tags = VecDeque::new();
        let mut complete = true;
        for slot in g.iter() {
            if after.is_some_and(|a| slot.tag <= a) || tags.back() == Some(&slot.tag) {
                continue;
            }
            if tags.len() == cap {
                complete = false;
                break;
            }
            tags.push_back(slot.tag);
        }
        drop(g);
        self.to = if complete { None } else { tags.back().copied() };
        self.tags = tags;
        self.from = after;
        self.shard = shard;
    }

    /// The next tag of `shard` after `after`, or `None` past its last.
    fn next_tag(&mut self, shard: usize, after: Option<u32>) -> Option<u32> {
        if self.shard != shard || self.from > after {
            self.fill(shard, after);
        }
        loop {
            while self.tags.front().is_some_and(|&t| Some(t) <= after) {
                self.tags.pop_front();
            }
            if let Some(t) = self.tags.pop_front() {
                self.from = Some(t);
                return Some(t);
            }
            match self.to {
                Some(to) => self.fill(shard, Some(to.max(after.unwrap_or(0)))),
                None => return None,
            }
        }
    }
}

impl Walk for HashCursor<'_> {
    fn ordered(&self) -> bool {
        false
    }

    fn begin(&mut self) -> Result<()> {
        let inner = &self.db.inner;
        inner.log.check_open()?;
        self.seqs =
            (!inner.log.readonly).then(|| (0..NSHARDS).map(|i| inner.excl(i).seq).collect());
        self.group = None;
        Ok(())
    }

    fn forward(&mut self, from: Bound<&[u8]>) -> Result<Found> {
        self.db.inner.log.check_open()?;
        let (mut shard, mut after) = match from {
            Bound::Unbounded => (0, None),
            Bound::Included(k) => {
                let (s, t) = self.db.inner.hash(k);
                if let Some(r) = self.read_group(s, t, Some(k))?.pop() {
                    return Ok(Some(r));
                }
                (s, Some((t, k)))
            }
            Bound::Excluded(k) => {
                let (s, t) = self.db.inner.hash(k);
                (s, Some((t, k)))
            }
        };
        while shard < NSHARDS {
            // The rest of the tag group `after` is in: keys above it (rarely any: a tag is 32
            // bits of the hash).
            if let Some((t, k)) = after {
                let later: Vec<Vec<u8>> = match &self.group {
                    Some((s, gt, keys)) if *s == shard && *gt == t => {
                        keys.iter().filter(|x| x.as_slice() > k).cloned().collect()
                    }
                    _ => self
                        .read_group(shard, t, None)?
                        .into_iter()
                        .map(|(x, _)| x)
                        .filter(|x| x.as_slice() > k)
                        .collect(),
                };
                for key in later {
                    if let Some(r) = self.read_group(shard, t, Some(&key))?.pop() {
                        return Ok(Some(r));
                    }
                }
            }
            // The next tags.
            let mut from_tag = after.map(|(t, _)| t);
            while let Some(t) = self.next_tag(shard, from_tag) {
                let group = self.read_group(shard, t, None)?;
                self.group = Some((shard, t, group.iter().map(|(k, _)| k.clone()).collect()));
                if let Some(first) = group.into_iter().next() {
                    return Ok(Some(first));
                }
                from_tag = Some(t);
            }
            shard += 1;
            after = None;
        }
        Ok(None)
    }

    fn damage_skipped(&self) -> u64 {
        self.damaged
    }
}
