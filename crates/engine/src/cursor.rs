//! The one [`Cursor`] every kind hands out ([`KindCursor`]), built on what a kind knows how to
//! do: find the live record after (or before) a position in its own order ([`Walk`]).
//!
//! The cursor keeps a key, never a place in the kind's memory or files: the record it is on
//! is looked up again at each use, so others may write, relocate or remove records meanwhile.
//! Positions in an unordered kind's order are derived from the key too (its hash), so a key
//! that was removed still tells where the walk goes on.

use crate::error::{Error, Result};
use crate::store::{Cursor, Decision, Record, Store, Value};
use std::ops::Bound::{self, Excluded, Included, Unbounded};

/// A live record: its key and the record.
pub type Found = Option<(Vec<u8>, Record)>;

/// What a kind provides to [`KindCursor`]: its live records in one fixed order (key order for
/// ordered kinds; for others an order of their own that does not change while records are
/// written, so that a walk never meets a key twice).
pub trait Walk: Send {
    /// Whether the order is the key order (and `backward` works).
    fn ordered(&self) -> bool;
    /// A walk starts (`first`, `last`, `jump`, `jump_back`): a kind that bounds a walk by what
    /// existed when it began takes that bound now.
    fn begin(&mut self) -> Result<()> {
        Ok(())
    }
    /// The first live record after `from` in the order: `Unbounded` the first of all,
    /// `Excluded(k)` the first after `k`'s place (whether or not `k` has a record),
    /// `Included(k)` (ordered kinds) the first at or after `k`.
    fn forward(&mut self, from: Bound<&[u8]>) -> Result<Found>;
    /// The last live record before `to` (ordered kinds).
    fn backward(&mut self, _to: Bound<&[u8]>) -> Result<Found> {
        Err(Error::Unsupported(
            "a backward walk on an unordered database",
        ))
    }
    /// The record of `key` where the walk is (a kind with several values of a key reads the
    /// one it landed on).
    fn get_at(&mut self, store: &dyn Store, key: &[u8]) -> Result<Option<Record>> {
        store.get(key)
    }
    /// Damaged records passed over.
    fn damage_skipped(&self) -> u64 {
        0
    }
}

/// Where a [`KindCursor`] is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Pos {
    /// Just made: `next` starts at the first record; nothing else finds one.
    Fresh,
    /// On the record of this key, or (when it is gone) on the next one.
    At(Vec<u8>),
    /// On the first record after this key (after `next`, and `remove`, `seize` going forward).
    After(Vec<u8>),
    /// On the last record before this key (after `remove`, `seize` going backward).
    Before(Vec<u8>),
    /// Nowhere.
    Off,
}

/// The cursor of every kind: Kyoto Cabinet's cursor semantics over a [`Walk`], reading and
/// writing through the store's own operations.
pub struct KindCursor<'a, W: Walk> {
    store: &'a dyn Store,
    walk: W,
    pos: Pos,
    /// The last jump or step went backward (`last`, `jump_back`, `step_back`), as Kyoto
    /// Cabinet's tree cursor remembers it: `remove` and `seize` then leave the cursor on the
    /// previous record.
    back: bool,
}

impl<'a, W: Walk> KindCursor<'a, W> {
    pub fn new(store: &'a dyn Store, walk: W) -> KindCursor<'a, W> {
        KindCursor {
            store,
            walk,
            pos: Pos::Fresh,
            back: false,
        }
    }

    /// Take the result of a move.
    fn land(&mut self, found: Found) -> bool {
        match found {
            Some((k, _)) => {
                self.pos = Pos::At(k);
                true
            }
            None => {
                self.pos = Pos::Off;
                false
            }
        }
    }

    /// The record the cursor is on now (moving on past a removed one), and its key.
    fn current(&mut self) -> Result<Found> {
        let found = match &self.pos {
            Pos::Fresh | Pos::Off => return Ok(None),
            Pos::At(k) => match self.walk.get_at(self.store, k)? {
                Some(r) => return Ok(Some((k.clone(), r))),
                None => self.walk.forward(Excluded(k))?,
            },
            Pos::After(k) => self.walk.forward(Excluded(k))?,
            Pos::Before(k) => self.walk.backward(Excluded(k))?,
        };
        match found {
            Some((k, r)) => {
                self.pos = Pos::At(k.clone());
                Ok(Some((k, r)))
            }
            None => {
                self.pos = Pos::Off;
                Ok(None)
            }
        }
    }

    fn need_order(&self) -> Result<()> {
        if self.walk.ordered() {
            Ok(())
        } else {
            Err(Error::Unsupported(
                "a backward walk on an unordered database",
            ))
        }
    }
}

impl<W: Walk> Cursor for KindCursor<'_, W> {
    fn first(&mut self) -> Result<bool> {
        self.back = false;
        self.walk.begin()?;
        let found = self.walk.forward(Unbounded)?;
        Ok(self.land(found))
    }

    fn last(&mut self) -> Result<bool> {
        self.need_order()?;
        self.back = true;
        self.walk.begin()?;
        let found = self.walk.backward(Unbounded)?;
        Ok(self.land(found))
    }

    fn jump(&mut self, key: &[u8]) -> Result<bool> {
        self.back = false;
        self.walk.begin()?;
        let found = if self.walk.ordered() {
            self.walk.forward(Included(key))?
        } else {
            self.store.get(key)?.map(|r| (key.to_vec(), r))
        };
        Ok(self.land(found))
    }

    fn jump_back(&mut self, key: &[u8]) -> Result<bool> {
        self.need_order()?;
        self.back = true;
        self.walk.begin()?;
        let found = self.walk.backward(Included(key))?;
        Ok(self.land(found))
    }

    fn step(&mut self) -> Result<bool> {
        self.back = false;
        let Some((k, _)) = self.current()? else {
            return Ok(false);
        };
        let found = self.walk.forward(Excluded(&k))?;
        Ok(self.land(found))
    }

    fn step_back(&mut self) -> Result<bool> {
        self.need_order()?;
        self.back = true;
        let Some((k, _)) = self.current()? else {
            return Ok(false);
        };
        let found = self.walk.backward(Excluded(&k))?;
        Ok(self.land(found))
    }

    fn get(&mut self) -> Result<Found> {
        self.current()
    }

    fn set_value(&mut self, value: &[u8], expires: Option<u64>) -> Result<bool> {
        crate::store::check_sizes(b"", value.len())?;
        // A record removed between the look and the write: on to the next one.
        while let Some((k, _)) = self.current()? {
            let mut hit = false;
            self.store.accept(&k, &mut |cur| match cur {
                Some(c) => {
                    hit = true;
                    Decision::Put {
                        value: Value::Lent(value),
                        flags: c.meta.flags,
                        expires: expires.unwrap_or(c.meta.expires),
                    }
                }
                None => Decision::Keep,
            })?;
            if hit {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn remove(&mut self) -> Result<bool> {
        Ok(self.seize()?.is_some())
    }

    fn seize(&mut self) -> Result<Found> {
        while let Some((k, _)) = self.current()? {
            let mut taken = None;
            self.store.accept(&k, &mut |cur| match cur {
                Some(c) => {
                    taken = Some(Record {
                        value: c.value.to_vec(),
                        meta: c.meta,
                    });
                    Decision::Remove
                }
                None => Decision::Keep,
            })?;
            self.pos = if self.back {
                Pos::Before(k.clone())
            } else {
                Pos::After(k.clone())
            };
            if let Some(r) = taken {
                return Ok(Some((k, r)));
            }
        }
        Ok(None)
    }

    fn next(&mut self) -> Result<Found> {
        let found = match &self.pos {
            Pos::Fresh => {
                self.walk.begin()?;
                self.walk.forward(Unbounded)?
            }
            Pos::Off => None,
            Pos::At(_) | Pos::After(_) | Pos::Before(_) => self.current()?,
        };
        match found {
            Some((k, r)) => {
                self.pos = Pos::After(k.clone());
                Ok(Some((k, r)))
            }
            None => {
                self.pos = Pos::Off;
                Ok(None)
            }
        }
    }

    fn backward(&self) -> bool {
        self.back
    }

    fn damage_skipped(&self) -> u64 {
        self.walk.damage_skipped()
    }
}
