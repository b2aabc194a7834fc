//! What Tyrant's scripts share across a server, and the locks of `ext`'s options.
//!
//! * [`ExtShared`] (`Shared::ext`): the record locks, the global lock, the user locks of
//!   `_lock` / `_unlock`, the stash of `_stash*`, the expressions of `_eval`.
//! * [`Locked`]: a [`Store`] decorator that `kura serve` installs when an `--ext` script is
//!   loaded (the outermost wrapper, around the update log's). Every write of a key takes the
//!   global lock shared and the key's stripe shared; an `ext` call with the record lock
//!   (option 1) takes its key's stripe exclusively, one with the global lock (option 2) the
//!   global lock exclusively. So a record-locked call is atomic against every other writer of
//!   that key, whatever its protocol; reads take no lock. Without a script the decorator is
//!   not there and writes pay nothing.
//! * A thread-local notes what the calling thread holds ([`hold`]), so the script's own
//!   writes do not wait on the lock their call holds. A script holding a record lock that
//!   writes a key of another stripe waits for it at most [`ExtShared::wait`], then that write
//!   fails (two such calls waiting on each other's keys would otherwise never end).

use kura_engine::table::{Columns, IndexInfo, IndexOp, IndexType, PutMode, Table};
use kura_engine::{
    BatchOp, CheckReport, Current, Cursor, Damaged, Decision, Error, KeyRange, Kind, Meta, Outcome,
    Record, Result, Shown, Store,
};
use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

/// Stripes of the record lock (keys hash onto them, as ttserver's `RECMTXNUM` mutexes).
pub const STRIPES: usize = 256;

/// What Tyrant's scripts share across the server.
#[derive(Debug)]
pub struct ExtShared {
    global: RwLock<()>,
    stripes: Box<[RwLock<()>]>,
    /// The longest a record-locked call's write of another stripe waits for it.
    pub wait: Duration,
    /// The user locks of `_lock` / `_unlock` (keys held).
    pub user_locks: Mutex<HashSet<Vec<u8>>>,
    /// The stash of `_stashput` … (`_stash*`): server-wide, in memory, gone at exit.
    pub stash: Mutex<HashMap<Vec<u8>, Vec<u8>>>,
    /// The expressions `_eval` ran, in order, and the script generation they belong to:
    /// every interpreter of that generation runs those it has not run before its next call.
    pub evals: Mutex<(u64, Vec<String>)>,
    /// Bumped at every `_eval`: an interpreter looks at `evals` only when it changed.
    pub eval_stamp: AtomicU64,
    /// The script generation whose `_begin` has run (one interpreter per generation runs it).
    pub begun: AtomicU64,
    /// The last Lua error or timeout of any call (Tyrant `stat`'s `ext_error`).
    last_error: Mutex<Option<String>>,
}

impl Default for ExtShared {
    fn default() -> Self {
        ExtShared {
            global: RwLock::new(()),
            stripes: (0..STRIPES).map(|_| RwLock::new(())).collect(),
            wait: Duration::from_secs(1),
            user_locks: Mutex::default(),
            stash: Mutex::default(),
            evals: Mutex::default(),
            eval_stamp: AtomicU64::new(0),
            begun: AtomicU64::new(0),
            last_error: Mutex::default(),
        }
    }
}

impl ExtShared {
    /// Note the last script error of the server.
    pub fn note_error(&self, why: &str) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.to_string());
    }

    /// The last script error of the server, on one line.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A server's, whose record-locked calls wait at most `wait` for another stripe.
    pub fn new(wait: Duration) -> ExtShared {
        ExtShared {
            wait,
            ..ExtShared::default()
        }
    }
}

/// The stripe of a key (FNV-1a).
pub fn stripe_of(key: &[u8]) -> usize {
    let mut h: u32 = 0x811c_9dc5;
    for &b in key {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    h as usize % STRIPES
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    Nothing,
    Stripe(usize),
    Global,
}

thread_local! {
    /// What this thread's `ext` call holds, and of which [`ExtShared`] (its address).
    static HELD: Cell<(usize, Held)> = const { Cell::new((0, Held::Nothing)) };
}

/// The locks an `ext` call holds while its function runs ([`hold`]); released when dropped.
pub struct Hold<'a> {
    _global: Option<RwLockReadGuard<'a, ()>>,
    _global_w: Option<RwLockWriteGuard<'a, ()>>,
    _stripe: Option<RwLockWriteGuard<'a, ()>>,
    before: (usize, Held),
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        HELD.with(|h| h.set(self.before));
    }
}

/// `ext`'s option bits.
pub const XO_LOCK_RECORD: u32 = 1;
pub const XO_LOCK_GLOBAL: u32 = 2;

/// Take the locks of `ext`'s options for a call on `key`: the global lock exclusively
/// (option 2), else `key`'s stripe exclusively (option 1), else nothing. A thread that holds
/// a lock already (a nested call) takes nothing more.
pub fn hold<'a>(ext: &'a ExtShared, opts: u32, key: &[u8]) -> Hold<'a> {
    let me = ext as *const ExtShared as usize;
    let before = HELD.with(|h| h.get());
    let mut hold = Hold {
        _global: None,
        _global_w: None,
        _stripe: None,
        before,
    };
    if before.0 == me && before.1 != Held::Nothing {
        return hold;
    }
    let held = if opts & XO_LOCK_GLOBAL != 0 {
        hold._global_w = Some(ext.global.write().unwrap_or_else(|p| p.into_inner()));
        Held::Global
    } else if opts & XO_LOCK_RECORD != 0 {
        hold._global = Some(ext.global.read().unwrap_or_else(|p| p.into_inner()));
        let s = stripe_of(key);
        hold._stripe = Some(ext.stripes[s].write().unwrap_or_else(|p| p.into_inner()));
        Held::Stripe(s)
    } else {
        return hold;
    };
    HELD.with(|h| h.set((me, held)));
    hold
}

/// The shared locks a plain write holds.
struct WriteGuard<'a> {
    _global: Option<RwLockReadGuard<'a, ()>>,
    _one: Option<RwLockReadGuard<'a, ()>>,
    _many: Vec<RwLockReadGuard<'a, ()>>,
}

impl ExtShared {
    /// The locks a write of `keys` takes (`None`: every stripe).
    fn write_guard<'a>(
        &'a self,
        keys: Option<&mut dyn Iterator<Item = &[u8]>>,
    ) -> Result<WriteGuard<'a>> {
        let me = self as *const ExtShared as usize;
        let (owner, held) = HELD.with(|h| h.get());
        let held = if owner == me { held } else { Held::Nothing };
        let mut g = WriteGuard {
            _global: None,
            _one: None,
            _many: Vec::new(),
        };
        if held == Held::Global {
            return Ok(g);
        }
        let mut idx: Vec<usize> = Vec::new();
        let one = match keys {
            Some(keys) => {
                let first = keys.next();
                match (first, keys.next()) {
                    (Some(k), None) => Some(stripe_of(k)),
                    (None, _) => return Ok(g),
                    (Some(a), Some(b)) => {
                        idx.push(stripe_of(a));
                        idx.push(stripe_of(b));
                        idx.extend(keys.map(stripe_of));
                        None
                    }
                }
            }
            None => {
                idx.extend(0..STRIPES);
                None
            }
        };
        idx.sort_unstable();
        idx.dedup();
        match held {
            Held::Stripe(mine) => {
                // The global lock is held (shared) by this thread's call already; other
                // stripes are waited for a bounded time.
                let deadline = Instant::now() + self.wait;
                for s in one.into_iter().chain(idx).filter(|&s| s != mine) {
                    g._many.push(self.read_until(s, deadline)?);
                }
            }
            _ => {
                g._global = Some(self.global.read().unwrap_or_else(|p| p.into_inner()));
                match one {
                    Some(s) => {
                        g._one = Some(self.stripes[s].read().unwrap_or_else(|p| p.into_inner()))
                    }
                    None => {
                        for s in idx {
                            g._many
                                .push(self.stripes[s].read().unwrap_or_else(|p| p.into_inner()));
                        }
                    }
                }
            }
        }
        Ok(g)
    }

    fn read_until(&self, s: usize, deadline: Instant) -> Result<RwLockReadGuard<'_, ()>> {
        loop {
            match self.stripes[s].try_read() {
                Ok(g) => return Ok(g),
                Err(std::sync::TryLockError::Poisoned(p)) => return Ok(p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => {}
            }
            if Instant::now() >= deadline {
                return Err(Error::Unsupported(
                    "a write of a key another record-locked ext call holds (this call holds a \
                     record lock too: it waited, then gave up rather than deadlock)",
                ));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn one(&self, key: &[u8]) -> Result<WriteGuard<'_>> {
        self.write_guard(Some(&mut std::iter::once(key)))
    }

    fn all(&self) -> Result<WriteGuard<'_>> {
        self.write_guard(None)
    }
}

/// A store whose every write takes [`ExtShared`]'s locks (shared), so that an `ext` call
/// holding a lock exclusively is atomic against it.
pub struct Locked {
    inner: Arc<dyn Store>,
    ext: Arc<ExtShared>,
}

impl Locked {
    pub fn new(inner: Arc<dyn Store>, ext: Arc<ExtShared>) -> Locked {
        Locked { inner, ext }
    }

    fn inner_table(&self) -> Result<&dyn Table> {
        self.inner.table().ok_or(Error::Unsupported(
            "table operations on a database that is not a table",
        ))
    }
}

impl Store for Locked {
    fn get(&self, key: &[u8]) -> Result<Option<Record>> {
        self.inner.get(key)
    }
    fn view(&self, key: &[u8], f: &mut dyn FnMut(&[u8], Meta)) -> Result<bool> {
        self.inner.view(key, f)
    }
    fn view_shared(
        &self,
        key: &[u8],
        min: usize,
        f: &mut dyn FnMut(Shown<'_>, Meta),
    ) -> Result<bool> {
        self.inner.view_shared(key, min, f)
    }
    fn accept<'v>(
        &self,
        key: &[u8],
        visitor: &mut dyn FnMut(Option<Current<'_>>) -> Decision<'v>,
    ) -> Result<Option<Meta>> {
        let _g = self.ext.one(key)?;
        self.inner.accept(key, visitor)
    }
    fn write_batch(&self, ops: &[BatchOp]) -> Result<()> {
        let _g = self
            .ext
            .write_guard(Some(&mut ops.iter().map(|o| o.key())))?;
        self.inner.write_batch(ops)
    }
    fn cursor(&self) -> Result<Box<dyn Cursor + '_>> {
        Ok(Box::new(LockedCursor {
            inner: self.inner.cursor()?,
            ext: &self.ext,
        }))
    }
    fn count(&self) -> u64 {
        self.inner.count()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn sync(&self) -> Result<()> {
        self.inner.sync()
    }
    fn optimize(&self, params: &str) -> Result<()> {
        let _g = self.ext.all()?;
        self.inner.optimize(params)
    }
    fn vanish(&self) -> Result<()> {
        let _g = self.ext.all()?;
        self.inner.vanish()
    }
    fn copy_to(&self, dest: &Path) -> Result<()> {
        self.inner.copy_to(dest)
    }
    fn check(&self) -> Result<CheckReport> {
        self.inner.check()
    }
    fn kind(&self) -> Kind {
        self.inner.kind()
    }
    fn describe(&self) -> Vec<(String, String)> {
        self.inner.describe()
    }
    fn close(&self) -> Result<()> {
        self.inner.close()
    }
    fn damage_found(&self) -> Vec<Damaged> {
        self.inner.damage_found()
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.inner.counters()
    }
    fn keyspace(&self, name: &str, params: &str) -> Result<Arc<dyn Store>> {
        self.inner.keyspace(name, params)
    }
    fn keyspaces(&self) -> Vec<(String, String)> {
        self.inner.keyspaces()
    }
    fn write_across(&self, ops: &[(&str, BatchOp)]) -> Result<()> {
        let _g = self
            .ext
            .write_guard(Some(&mut ops.iter().map(|(_, o)| o.key())))?;
        self.inner.write_across(ops)
    }
    fn table(&self) -> Option<&dyn Table> {
        self.inner.table().map(|_| self as &dyn Table)
    }
    fn for_each_record(&self, f: &mut kura_engine::store::RecordVisitor<'_>) -> Result<u64> {
        self.inner.for_each_record(f)
    }
    fn fwmkeys(&self, prefix: &[u8], max: usize) -> Result<Vec<Vec<u8>>> {
        self.inner.fwmkeys(prefix, max)
    }
    fn range(&self, from: &[u8], to: Option<&[u8]>, max: usize) -> Result<Vec<Vec<u8>>> {
        self.inner.range(from, to, max)
    }
    fn check_put(&self, key: &[u8], value_len: usize) -> Result<()> {
        self.inner.check_put(key, value_len)
    }
    fn keyspace_rules(&self, params: &str) -> Result<Option<Arc<dyn Store>>> {
        self.inner.keyspace_rules(params)
    }
    fn allows_dups(&self) -> bool {
        self.inner.allows_dups()
    }
    fn put_dup(&self, key: &[u8], value: &[u8], front: bool) -> Result<()> {
        let _g = self.ext.one(key)?;
        self.inner.put_dup(key, value, front)
    }
    fn get_all(&self, key: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.inner.get_all(key)
    }
    fn remove_all(&self, key: &[u8]) -> Result<u64> {
        let _g = self.ext.one(key)?;
        self.inner.remove_all(key)
    }
    fn value_count(&self, key: &[u8]) -> Result<u64> {
        self.inner.value_count(key)
    }
    fn for_each_in_range(
        &self,
        range: &KeyRange<'_>,
        f: &mut kura_engine::store::RecordVisitor<'_>,
    ) -> Result<u64> {
        self.inner.for_each_in_range(range, f)
    }
    fn put_with(&self, key: &[u8], value: &[u8], flags: u32, expires: u64) -> Result<Meta> {
        let _g = self.ext.one(key)?;
        self.inner.put_with(key, value, flags, expires)
    }
    fn putkeep(&self, key: &[u8], value: &[u8], flags: u32, expires: u64) -> Result<Outcome> {
        let _g = self.ext.one(key)?;
        self.inner.putkeep(key, value, flags, expires)
    }
    fn replace(&self, key: &[u8], value: &[u8], flags: u32, expires: u64) -> Result<Outcome> {
        let _g = self.ext.one(key)?;
        self.inner.replace(key, value, flags, expires)
    }
    fn out(&self, key: &[u8]) -> Result<bool> {
        let _g = self.ext.one(key)?;
        self.inner.out(key)
    }
    fn vsiz(&self, key: &[u8]) -> Result<Option<usize>> {
        self.inner.vsiz(key)
    }
    fn get_multi(&self, keys: &[&[u8]]) -> Result<Vec<Option<Record>>> {
        self.inner.get_multi(keys)
    }
}

impl Table for Locked {
    fn put_row(&self, pk: &[u8], cols: &Columns, mode: PutMode) -> Result<bool> {
        let _g = self.ext.one(pk)?;
        self.inner_table()?.put_row(pk, cols, mode)
    }
    fn out_row(&self, pk: &[u8]) -> Result<bool> {
        let _g = self.ext.one(pk)?;
        self.inner_table()?.out_row(pk)
    }
    fn get_row(&self, pk: &[u8]) -> Result<Option<Columns>> {
        self.inner_table()?.get_row(pk)
    }
    fn get_columns(&self, pk: &[u8], names: &[&[u8]]) -> Result<Option<Columns>> {
        self.inner_table()?.get_columns(pk, names)
    }
    fn genuid(&self) -> Result<u64> {
        self.inner_table()?.genuid()
    }
    fn set_index(&self, column: &[u8], op: IndexOp) -> Result<bool> {
        self.inner_table()?.set_index(column, op)
    }
    fn indexes(&self) -> Vec<IndexInfo> {
        self.inner.table().map(|t| t.indexes()).unwrap_or_default()
    }
    fn index(&self, column: &[u8]) -> Option<(IndexType, Arc<dyn Store>)> {
        self.inner.table().and_then(|t| t.index(column))
    }
    fn for_each_row(
        &self,
        range: &KeyRange<'_>,
        f: &mut dyn FnMut(&[u8], &Columns) -> Result<bool>,
    ) -> Result<u64> {
        self.inner_table()?.for_each_row(range, f)
    }
    fn rows(&self) -> u64 {
        self.inner.table().map_or(0, |t| t.rows())
    }
    fn check_indexes(&self) -> Result<Vec<String>> {
        self.inner_table()?.check_indexes()
    }
    fn rebuild_indexes(&self) -> Result<()> {
        self.inner_table()?.rebuild_indexes()
    }
}

/// A cursor whose writes (set_value, remove, seize) take the lock of the record they change.
struct LockedCursor<'a> {
    inner: Box<dyn Cursor + 'a>,
    ext: &'a ExtShared,
}

impl LockedCursor<'_> {
    fn locked<T>(&mut self, f: impl FnOnce(&mut dyn Cursor) -> Result<T>) -> Result<T> {
        let key = self.inner.get()?.map(|(k, _)| k);
        let _g = match &key {
            Some(k) => Some(self.ext.one(k)?),
            None => None,
        };
        f(&mut *self.inner)
    }
}

impl Cursor for LockedCursor<'_> {
    fn first(&mut self) -> Result<bool> {
        self.inner.first()
    }
    fn last(&mut self) -> Result<bool> {
        self.inner.last()
    }
    fn jump(&mut self, key: &[u8]) -> Result<bool> {
        self.inner.jump(key)
    }
    fn jump_back(&mut self, key: &[u8]) -> Result<bool> {
        self.inner.jump_back(key)
    }
    fn step(&mut self) -> Result<bool> {
        self.inner.step()
    }
    fn step_back(&mut self) -> Result<bool> {
        self.inner.step_back()
    }
    fn get(&mut self) -> Result<Option<(Vec<u8>, Record)>> {
        self.inner.get()
    }
    fn set_value(&mut self, value: &[u8], expires: Option<u64>) -> Result<bool> {
        self.locked(|c| c.set_value(value, expires))
    }
    fn remove(&mut self) -> Result<bool> {
        self.locked(|c| c.remove())
    }
    fn seize(&mut self) -> Result<Option<(Vec<u8>, Record)>> {
        self.locked(|c| c.seize())
    }
    fn backward(&self) -> bool {
        self.inner.backward()
    }
    fn next(&mut self) -> Result<Option<(Vec<u8>, Record)>> {
        self.inner.next()
    }
    fn damage_skipped(&self) -> u64 {
        self.inner.damage_skipped()
    }
}
