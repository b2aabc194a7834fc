//! The walk behind a fixed-length database's cursor: ids in ascending order, both ways, each
//! record read where the index points when the walk reaches it. A record's place in the
//! order is its id, so nothing a writer or compaction does moves it; the walk holds nothing
//! but the cursor's key.

use super::id::{self, Key, MAX_ID};
use super::FixedDb;
use crate::cursor::{Found, Walk};
use crate::error::{Error, Result};
use crate::store::{is_expired, now_secs, Record};
use std::ops::Bound;
use std::sync::atomic::Ordering;

pub(super) struct FixedWalk<'a> {
    db: &'a FixedDb,
    damaged: u64,
}

impl<'a> FixedWalk<'a> {
    pub(super) fn new(db: &'a FixedDb) -> FixedWalk<'a> {
        FixedWalk { db, damaged: 0 }
    }
}

impl FixedDb {
    /// The id a bound of a range or a cursor position names: an id (0 included, not checked
    /// against the limit: a bound needs no record) or a key word, resolved now (`prev` is the
    /// id before the first record, `next` the one after the last).
    pub(super) fn bound_id(&self, key: &[u8]) -> Result<u64> {
        let inner = &self.inner;
        let (min, max) = (
            inner.min.load(Ordering::Acquire),
            inner.max.load(Ordering::Acquire),
        );
        Ok(match id::parse_key(key)? {
            Key::Id(n) => n,
            Key::Min => min,
            Key::Max => max,
            Key::Prev => min.saturating_sub(1),
            Key::Next => max + 1,
        })
    }

    /// The live record of `id` for a walk; damaged ones are counted in `damaged` and passed
    /// over (only a database opened despite damage has any).
    pub(super) fn walk_record(&self, id: u64, damaged: &mut u64) -> Result<Option<Record>> {
        let now = now_secs();
        let got = self.inner.with_rec(id, &mut |value, meta| {
            Ok((!is_expired(meta.expires, now)).then(|| Record {
                value: value.to_vec(),
                meta,
            }))
        });
        match got {
            Ok(r) => Ok(r.flatten()),
            Err(Error::Corrupt(_)) => {
                *damaged += 1;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The first live record in `from..=to` (ascending) or the last (descending).
    pub(super) fn seek(
        &self,
        mut from: u64,
        mut to: u64,
        desc: bool,
        damaged: &mut u64,
    ) -> Result<Found> {
        self.inner.log.check_open()?;
        // No id above the largest with a record has one (it changes under the writer lock).
        to = to.min(self.inner.max.load(Ordering::Acquire));
        from = from.max(1);
        while from <= to {
            let found = if desc {
                self.inner.prev_live(from, to)
            } else {
                self.inner.next_live(from, to)
            };
            let Some(i) = found else { return Ok(None) };
            if let Some(r) = self.walk_record(i, damaged)? {
                return Ok(Some((id::key_of(i), r)));
            }
            if desc {
                let Some(t) = i.checked_sub(1) else {
                    return Ok(None);
                };
                to = t;
            } else {
                from = i + 1;
            }
        }
        Ok(None)
    }
}

impl Walk for FixedWalk<'_> {
    fn ordered(&self) -> bool {
        true
    }

    fn forward(&mut self, from: Bound<&[u8]>) -> Result<Found> {
        let start = match from {
            Bound::Unbounded => 1,
            Bound::Included(k) => self.db.bound_id(k)?,
            Bound::Excluded(k) => match self.db.bound_id(k)?.checked_add(1) {
                Some(n) => n,
                None => return Ok(None),
            },
        };
        self.db.seek(start, MAX_ID, false, &mut self.damaged)
    }

    fn backward(&mut self, to: Bound<&[u8]>) -> Result<Found> {
        let end = match to {
            Bound::Unbounded => MAX_ID,
            Bound::Included(k) => self.db.bound_id(k)?,
            Bound::Excluded(k) => match self.db.bound_id(k)?.checked_sub(1) {
                Some(n) => n,
                None => return Ok(None),
            },
        };
        self.db.seek(1, end, true, &mut self.damaged)
    }

    fn damage_skipped(&self) -> u64 {
        self.damaged
    }
}
