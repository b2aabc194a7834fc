//! The one interface every database kind implements.
//!
//! The required core is small: [`Store::get`], [`Store::accept`] (look at the current record of
//! one key and decide what to write, atomically), [`Store::write_batch`], [`Store::cursor`] and
//! the whole-database operations. The record operations every protocol shares (put, putkeep,
//! replace, out, …) are provided methods built on `accept`, so every kind behaves the same; a
//! kind overrides one only to be faster, never to differ.
//!
//! The operations that come from one system, each with that system's meaning, are extension
//! traits implemented for every `Store` (no kind implements them): [`TokyoOps`] (Tokyo
//! Cabinet / Tyrant: `putcat`, `prepend`, `putshl`, `addint`, `adddouble`), [`MemcachedOps`]
//! (`cas`, `out_if`, `touch`, `incr_decimal`, `incr_decimal_if`, `concat_if`) and
//! [`KyotoOps`] (Kyoto Cabinet / Tycoon: `append_with`, `increment`, `increment_double`,
//! `cas_value`, `seize`). The servers map their wire forms onto these; an embedder calls the
//! same ones. The values they take and give are in `types.rs`.

mod kyoto;
mod memcached;
mod tokyo;
mod types;

pub use kyoto::KyotoOps;
pub use memcached::{Counted, MemcachedOps};
pub use tokyo::TokyoOps;
pub use types::*;

use crate::error::{Error, Result};
use std::path::Path;

/// A cursor over the records of a store (see docs/architecture/kinds.md, "Cursors (every kind)").
///
/// A cursor is *on* a record (after `first`, `last`, `jump`, `jump_back`, `step`,
/// `step_back`), or nowhere (when made, after running off an end or a jump that found
/// nothing). Ordered kinds walk in key order, both ways; unordered kinds in their storage
/// order, forward only: `last`, `jump_back` and `step_back` fail there with
/// [`Error::Unsupported`], and `jump(k)` goes to the record of `k` itself.
///
/// Others may write meanwhile. The record a cursor is on is read again at each use: a read
/// shows its current value, and when it was removed (by anyone) the cursor is on the next
/// record, as Kyoto Cabinet's cursors are. A forward walk (from `first` or a `jump`) returns
/// every record that is live for the whole walk exactly once and no key twice; a record
/// written or removed during the walk may or may not be returned (each kind says which in
/// docs/ARCHITECTURE.md).
pub trait Cursor: Send {
    /// Go to the first record; false when there is none.
    fn first(&mut self) -> Result<bool>;
    /// Go to the last record (ordered kinds); false when there is none.
    fn last(&mut self) -> Result<bool> {
        Err(Error::Unsupported(
            "a backward walk on an unordered database",
        ))
    }
    /// Go to the first record whose key is >= `key` (ordered kinds), or to the record of
    /// `key` itself (unordered kinds); false when there is none.
    fn jump(&mut self, key: &[u8]) -> Result<bool>;
    /// Go to the last record whose key is <= `key` (ordered kinds); false when there is none.
    fn jump_back(&mut self, _key: &[u8]) -> Result<bool> {
        Err(Error::Unsupported(
            "a backward walk on an unordered database",
        ))
    }
    /// Go to the next record; false (and nowhere) past the last one or when nowhere.
    fn step(&mut self) -> Result<bool>;
    /// Go to the previous record (ordered kinds); false (and nowhere) before the first one or
    /// when nowhere.
    fn step_back(&mut self) -> Result<bool> {
        Err(Error::Unsupported(
            "a backward walk on an unordered database",
        ))
    }
    /// The record the cursor is on (read now); `None` when nowhere.
    fn get(&mut self) -> Result<Option<(Vec<u8>, Record)>>;
    /// Replace the value of the record the cursor is on, keeping its flags; its expiration
    /// becomes `expires` when given. False when nowhere.
    fn set_value(&mut self, value: &[u8], expires: Option<u64>) -> Result<bool>;
    /// Remove the record the cursor is on; the cursor is then on the next one (the previous
    /// one when it goes [`Cursor::backward`]). False when nowhere.
    fn remove(&mut self) -> Result<bool>;
    /// Remove the record the cursor is on and return it; the cursor is then on the next one
    /// (the previous one when it goes [`Cursor::backward`]).
    fn seize(&mut self) -> Result<Option<(Vec<u8>, Record)>>;
    /// Whether the cursor's last jump or step went backward (`last`, `jump_back`,
    /// `step_back`), as Kyoto Cabinet's cursors remember it: `remove` and `seize` then move
    /// to the previous record, and a caller that steps "on" steps back. `first`, `jump` and
    /// `step` make it go forward again.
    fn backward(&self) -> bool {
        false
    }
    /// Iterate: the record the cursor is on, the cursor then moving past it (the first record
    /// when the cursor was just made); `None` at the end.
    fn next(&mut self) -> Result<Option<(Vec<u8>, Record)>>;
    /// Damaged records the cursor has passed over (skipped): only a database opened despite
    /// damage has any.
    fn damage_skipped(&self) -> u64 {
        0
    }
}

/// The storage interface. All methods take `&self`: every kind is internally synchronised and
/// shared between threads behind an `Arc`.
pub trait Store: Send + Sync {
    // ----- required core -----

    /// The live (present and not expired) record of `key`. Its value is a new allocation;
    /// threads that read many small values should prefer `view`: with glibc's allocator, two
    /// threads getting small values scaled 1.07× where `view` scaled 1.85× (docs/BENCHMARKS.md).
    fn get(&self, key: &[u8]) -> Result<Option<Record>>;

    /// Show the live record of `key` to `f` without copying its value out: the value may be
    /// borrowed from the store's own memory while a lock is held, so `f` must not call the
    /// store. Returns whether the record was found (`f` is called only then). Servers use it
    /// to encode a reply straight from the store, with no per-request allocation.
    fn view(&self, key: &[u8], f: &mut dyn FnMut(&[u8], Meta)) -> Result<bool> {
        Ok(match self.get(key)? {
            Some(r) => {
                f(&r.value, r.meta);
                true
            }
            None => false,
        })
    }

    /// Like [`Store::view`], but a value of at least `min` bytes that lies in memory the store
    /// can share (an on-disk hash's mapped, uncompressed record, or an in-memory record's shared
    /// block) is shown as [`Shown::Pinned`],
    /// which the caller may keep after the call: servers queue it for the socket instead of
    /// copying it. Other values are shown borrowed, as by `view`.
    fn view_shared(
        &self,
        key: &[u8],
        min: usize,
        f: &mut dyn FnMut(Shown<'_>, Meta),
    ) -> Result<bool> {
        let _ = min;
        self.view(key, &mut |v, m| f(Shown::Bytes(v), m))
    }

    /// Atomically look at the live record of `key` and apply the visitor's decision. Returns the
    /// metadata of the record after the call (`None` when absent afterwards).
    fn accept<'v>(
        &self,
        key: &[u8],
        visitor: &mut dyn FnMut(Option<Current<'_>>) -> Decision<'v>,
    ) -> Result<Option<Meta>>;

    /// Apply every operation or none of them, even across a crash. The operations apply in
    /// order: of several on one key, the last decides (a put after a remove stores, a remove
    /// after a put leaves the key absent). One that is refused (a key or value too large) fails
    /// the whole batch, which then changes nothing.
    fn write_batch(&self, ops: &[BatchOp]) -> Result<()>;

    /// A cursor positioned before the first record.
    fn cursor(&self) -> Result<Box<dyn Cursor + '_>>;

    /// Number of records (records expired but not yet reclaimed may be counted).
    fn count(&self) -> u64;

    /// Bytes the database occupies (on disk, or in memory for memory kinds).
    fn size(&self) -> u64;

    /// Make every write so far durable.
    fn sync(&self) -> Result<()>;

    /// Compact / rebuild; `params` may retune (`"bnum=1000000#compress=zstd"`, or empty).
    fn optimize(&self, params: &str) -> Result<()>;

    /// Remove every record.
    fn vanish(&self) -> Result<()>;

    /// Write a consistent copy of the database to `dest` while writers keep going.
    fn copy_to(&self, dest: &Path) -> Result<()>;

    /// Verify every checksum and structure; changes nothing.
    fn check(&self) -> Result<CheckReport>;

    /// The kind of this database.
    fn kind(&self) -> Kind;

    /// Path (or `*` / `+`) and tuning parameters in effect, for `inform` and `stat`.
    fn describe(&self) -> Vec<(String, String)>;

    /// Sync and release resources; further calls fail with [`Error::Closed`].
    fn close(&self) -> Result<()>;

    /// Damage the open found in the database's files: only a read-only open of a damaged
    /// database has any (a writable one refuses it); `check` lists every region.
    fn damage_found(&self) -> Vec<Damaged> {
        Vec::new()
    }

    /// Named counters for `stats` / `inform` (evictions, compactions, …).
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    // ----- keyspaces -----

    /// The keyspace `name` of this database, made on first use with `params` (a `.kb`'s:
    /// `cmp=`, fixed at creation; a `.kh`'s: none; a memory kind's: its own parameters). A
    /// keyspace is a store of its own (its records, count, cursors and order apart from the
    /// database's and every other keyspace's) that shares the database's log:
    /// [`Store::write_across`] changes several keyspaces atomically. A kind without keyspaces
    /// (`.kf`) refuses.
    fn keyspace(&self, name: &str, params: &str) -> Result<std::sync::Arc<dyn Store>> {
        let _ = (name, params);
        Err(Error::Unsupported(
            "keyspaces (a .kb, .kh or memory database has them; a .kf, an array of fixed-length slots, has none)",
        ))
    }

    /// Every keyspace of this database but its own: name and the parameters that make it
    /// again as it is (a `.kb`'s `cmp=`). None for a kind without keyspaces, or a keyspace.
    fn keyspaces(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Apply every operation, each in its keyspace (`""`: the database itself; the others
    /// made before by [`Store::keyspace`]), or none of them, even across a crash. The order
    /// and refusals are [`Store::write_batch`]'s.
    fn write_across(&self, ops: &[(&str, BatchOp)]) -> Result<()> {
        if ops.iter().any(|(ks, _)| !ks.is_empty()) {
            return Err(Error::Unsupported(
                "keyspaces (a .kb, .kh or memory database has them; a .kf, an array of fixed-length slots, has none)",
            ));
        }
        let own: Vec<BatchOp> = ops.iter().map(|(_, op)| op.clone()).collect();
        self.write_batch(&own)
    }

    // ----- tables -----

    /// The table operations of a table database (`.kt`): columns, indexes, unique ids. `None`
    /// for every other kind. Through the rest of this interface a table's record value is
    /// Tokyo Cabinet's wire form, `name1\0value1\0name2\0value2…`.
    fn table(&self) -> Option<&dyn crate::table::Table> {
        None
    }

    // ----- provided operations -----

    /// Call `f` with every live record (key, value, metadata), in no particular order, until
    /// it returns `Ok(false)`: the fastest way through a whole database (`kura db export`).
    /// The guarantees are a cursor's: a record live throughout the call is shown exactly once;
    /// one written during the call may be missed. `f` must not call the store. Returns how
    /// many damaged records (or regions) it passed over: only a database opened despite damage
    /// (read-only, or damage behind its checkpoint) has any.
    fn for_each_record(&self, f: &mut RecordVisitor<'_>) -> Result<u64> {
        let mut cur = self.cursor()?;
        while let Some((k, r)) = cur.next()? {
            if !f(&k, &r.value, r.meta)? {
                break;
            }
        }
        Ok(cur.damage_skipped())
    }

    /// Forward-matching keys: up to `max` keys starting with `prefix`, the first ones in the
    /// kind's order: key order on ordered kinds, else the order of [`Store::for_each_record`]
    /// (the order `kura db list` shows; Tokyo Cabinet's hash answers the first matches in its
    /// storage order likewise).
    fn fwmkeys(&self, prefix: &[u8], max: usize) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        if max == 0 {
            return Ok(out);
        }
        if self.kind().ordered() {
            let range = KeyRange {
                from: std::ops::Bound::Included(prefix),
                to: std::ops::Bound::Unbounded,
                desc: false,
                max,
            };
            self.for_each_in_range(&range, &mut |k, _, _| {
                if !k.starts_with(prefix) {
                    return Ok(false);
                }
                out.push(k.to_vec());
                Ok(true)
            })?;
            return Ok(out);
        }
        self.for_each_record(&mut |k, _, _| {
            if k.starts_with(prefix) {
                out.push(k.to_vec());
            }
            Ok(out.len() < max)
        })?;
        Ok(out)
    }

    /// Keys in `[from, to)` in order, up to `max` (ordered kinds only).
    fn range(&self, from: &[u8], to: Option<&[u8]>, max: usize) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        let range = KeyRange {
            max,
            ..KeyRange::new(from, to)
        };
        self.for_each_in_range(&range, &mut |k, _, _| {
            out.push(k.to_vec());
            Ok(true)
        })?;
        Ok(out)
    }

    /// Whether a put of `key` with a value of `value_len` bytes, in a [`Store::write_batch`],
    /// would be accepted by this database's rules (the size limits every kind shares, and the
    /// kind's own: a fixed-length database's width and ids). Writes nothing; an import checks
    /// every line with it before it writes the first record.
    fn check_put(&self, key: &[u8], value_len: usize) -> Result<()> {
        check_sizes(key, value_len)
    }

    /// An empty stand-in for a keyspace [`Store::keyspace`] would make with `params`, whose
    /// [`Store::check_put`] checks input by that keyspace's rules before it is made (an
    /// import into a new keyspace); `None` when a new keyspace's rules are this database's.
    fn keyspace_rules(&self, params: &str) -> Result<Option<std::sync::Arc<dyn Store>>> {
        let _ = params;
        Ok(None)
    }

    /// Whether this database keeps several values of one key (`put_dup`; the B+ tree).
    fn allows_dups(&self) -> bool {
        false
    }

    /// Add `value` as one more value of `key`: after the values it has (`front == false`,
    /// Tokyo Cabinet's `putdup`), or before them (`front == true`, `putdupback`, whose value
    /// then is the one `get` returns). With duplicates, `get` and the put variants read and
    /// replace the first value, `remove` removes the first, `count` counts every value and a
    /// cursor visits each. [`Error::Unsupported`] where [`Store::allows_dups`] is false.
    fn put_dup(&self, _key: &[u8], _value: &[u8], _front: bool) -> Result<()> {
        Err(Error::Unsupported(
            "duplicate keys (use a B+ tree, PATH.kb)",
        ))
    }

    /// Every value of `key`, first to last (empty when it has none). On a database without
    /// duplicates, the one value there is.
    fn get_all(&self, key: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(self.get(key)?.map(|r| r.value).into_iter().collect())
    }

    /// Remove every value of `key`; how many there were.
    fn remove_all(&self, key: &[u8]) -> Result<u64> {
        Ok(u64::from(self.out(key)?))
    }

    /// How many values `key` has (0 when none).
    fn value_count(&self, key: &[u8]) -> Result<u64> {
        Ok(u64::from(self.get(key)?.is_some()))
    }

    /// Call `f` with each live record whose key is in `range`, in key order (descending when
    /// `range.desc`), at most `range.max` of them, until `f` returns `Ok(false)` (ordered kinds
    /// only: [`Error::Unsupported`] on others). `f` must not call the store. Returns how many
    /// records `f` was shown. Built on the cursor, with its guarantees.
    fn for_each_in_range(&self, range: &KeyRange<'_>, f: &mut RecordVisitor<'_>) -> Result<u64> {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        if !self.kind().ordered() {
            return Err(Error::Unsupported("a key range on an unordered database"));
        }
        let mut shown = 0u64;
        if range.max == 0 {
            return Ok(0);
        }
        let mut cur = self.cursor()?;
        // Start at the bound the walk comes from; a record on an exclusive bound is skipped.
        let on = match (range.desc, range.from, range.to) {
            (false, Unbounded, _) => cur.first()?,
            (false, Included(k) | Excluded(k), _) => cur.jump(k)?,
            (true, _, Unbounded) => cur.last()?,
            (true, _, Included(k) | Excluded(k)) => cur.jump_back(k)?,
        };
        if !on {
            return Ok(0);
        }
        // Ascending: `next` reads each record once and moves past it; descending reads the
        // record, then steps back.
        loop {
            let got = if range.desc { cur.get()? } else { cur.next()? };
            let Some((k, r)) = got else { break };
            let on_start = match (range.desc, range.from, range.to) {
                (false, Excluded(f), _) => k.as_slice() == f,
                (true, _, Excluded(t)) => k.as_slice() == t,
                _ => false,
            };
            if !on_start {
                let inside = if range.desc {
                    range.above_from(&k)
                } else {
                    range.below_to(&k)
                };
                if !inside {
                    break;
                }
                shown += 1;
                if !f(&k, &r.value, r.meta)? || shown >= range.max as u64 {
                    break;
                }
            }
            if range.desc && !cur.step_back()? {
                break;
            }
        }
        Ok(shown)
    }

    /// Store unconditionally with no flags and no expiration.
    fn put(&self, key: &[u8], value: &[u8]) -> Result<Meta> {
        self.put_with(key, value, 0, 0)
    }

    /// Store unconditionally with flags and expiration.
    fn put_with(&self, key: &[u8], value: &[u8], flags: u32, expires: u64) -> Result<Meta> {
        check_sizes(key, value.len())?;
        let meta = self.accept(key, &mut |_| Decision::Put {
            value: Value::Lent(value),
            flags,
            expires,
        })?;
        meta.ok_or_else(|| Error::Corrupt("put produced no record".into()))
    }

    /// Store only if the key is absent (Tyrant putkeep, memcached add).
    fn putkeep(&self, key: &[u8], value: &[u8], flags: u32, expires: u64) -> Result<Outcome> {
        check_sizes(key, value.len())?;
        let mut existed = false;
        let meta = self.accept(key, &mut |cur| {
            if cur.is_some() {
                existed = true;
                Decision::Keep
            } else {
                Decision::Put {
                    value: Value::Lent(value),
                    flags,
                    expires,
                }
            }
        })?;
        Ok(stored_or(existed, Outcome::Exists, meta))
    }

    /// Store only if the key is present (memcached replace).
    fn replace(&self, key: &[u8], value: &[u8], flags: u32, expires: u64) -> Result<Outcome> {
        check_sizes(key, value.len())?;
        let mut missing = false;
        let meta = self.accept(key, &mut |cur| match cur {
            None => {
                missing = true;
                Decision::Keep
            }
            Some(_) => Decision::Put {
                value: Value::Lent(value),
                flags,
                expires,
            },
        })?;
        Ok(stored_or(missing, Outcome::NotFound, meta))
    }

    /// Delete; `true` when a live record was removed.
    fn out(&self, key: &[u8]) -> Result<bool> {
        let mut found = false;
        self.accept(key, &mut |cur| {
            if cur.is_some() {
                found = true;
                Decision::Remove
            } else {
                Decision::Keep
            }
        })?;
        Ok(found)
    }

    /// Size of the value, or `None` when absent.
    fn vsiz(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.get(key)?.map(|r| r.value.len()))
    }

    /// Read many keys at once.
    fn get_multi(&self, keys: &[&[u8]]) -> Result<Vec<Option<Record>>> {
        keys.iter().map(|k| self.get(k)).collect()
    }
}

fn stored_or(failed: bool, failure: Outcome, meta: Option<Meta>) -> Outcome {
    match (failed, meta) {
        (false, Some(m)) => Outcome::Stored(m),
        _ => failure,
    }
}

/// `old` with `data` appended (`front`: prepended), in a new buffer.
fn joined(old: &[u8], data: &[u8], front: bool) -> Vec<u8> {
    let mut v = Vec::with_capacity(old.len() + data.len());
    let (a, b) = if front { (data, old) } else { (old, data) };
    v.extend_from_slice(a);
    v.extend_from_slice(b);
    v
}
