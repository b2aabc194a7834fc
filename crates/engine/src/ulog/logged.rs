//! `Logged`: a database whose every change is written to an update log. It wraps any kind
//! (it is itself a `Store`), so every protocol and tool that writes through it is logged
//! alike.
//!
//! Rules:
//! - **Log, then apply.** A change is appended to the log (and written to the operating
//!   system at once, so a killed process never loses a log record whose change reached the
//!   database), then applied. A change the database then refuses is followed by a record of
//!   the key's actual state, so the log never claims what the database does not hold.
//! - **One order per key.** Changes of one key are serialised by one of 1,024 stripe locks,
//!   taken around logging and applying, so a key's records are in the order its changes were
//!   applied. Different keys proceed in parallel (the log's append is a short critical
//!   section). A read-modify-write (`accept`) decides on the record it reads under the stripe.
//! - **The log is the commit point.** A change is durable once its log record is: a write
//!   waits for (or, on a server thread that defers, owes) the log's group commit only. The
//!   database's own writes are never synced for a write (they run with durability deferred,
//!   and the debt is dropped; `kura serve --ulog` opens the database with `sync=none`
//!   besides, [`database_name`]); the database is synced lazily, at the `applied` mark, its
//!   checkpoints and close. [`Store::sync`] syncs the log.
//! - **Redo after a crash.** Every 2 s (and at close) the time stamp up to which every record
//!   is applied and the database synced is saved (`applied` in the log's directory): the
//!   position is read first, then the database synced, then the mark written, so every record
//!   up to the mark is durable in the database. Opening replays the records after it onto the
//!   database; retention keeps them until then ([`Ulog::keep_after`]). Records are effects, so
//!   replaying one the database already holds changes nothing. The database may hold a change
//!   whose record a power loss took (its writes reach the disk in their own time): one that
//!   was never acknowledged.
//! - **Positions for copies.** [`Logged::position`] waits until every record up to the log's
//!   newest is applied and returns its time stamp: a copy or snapshot taken after it holds at
//!   least everything up to it, and replaying the log from it makes it exact.
//! - **Keyspaces.** [`Logged::keyspace_handle`] (`Store::keyspace`) gives a keyspace's
//!   handle, whose records are `In` the keyspace; `write_across` logs one `Batch` whose
//!   elements name their keyspaces, so redo, replicas and restores apply it whole.
//! - **Concurrent writes of two masters converge**: a replicated change of a key is applied
//!   only if its origin stamp (origin time stamp, then origin server id) is newer than that of
//!   the key's last change this server saw within the last `LWW_WINDOW` (last writer wins).

use super::apply::apply;
use super::record::{self, push_batch_op, push_value, Op, Rec};
use super::{now_us, read_dir_in, read_file, replace_file, Ulog};
use crate::error::{Error, Result};
use crate::io::{OsVfs, Vfs};
use crate::store::{
    BatchOp, CheckReport, Current, Cursor, Damaged, Decision, KeyRange, Kind, Meta, Record,
    RecordVisitor, Shown, Store,
};
use hashbrown::HashMap;
use parking_lot::Mutex;
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const STRIPES: usize = 1024;
/// How long a key's last origin stamp is remembered for ordering concurrent writes of two
/// masters, in microseconds.
pub const LWW_WINDOW: u64 = 600 * 1_000_000;
/// Stamps kept per stripe at most (so about a million keys in all).
const LWW_PER_STRIPE: usize = 1024;

type Stamp = (u64, u32);

thread_local! {
    /// The origin `(sid, ts)` every record logged by this thread is stamped with while
    /// [`Logged::as_origin`] runs; `None` otherwise (the records are this server's own).
    static ORIGIN: Cell<Option<(u32, u64)>> = const { Cell::new(None) };
}

/// Puts back the thread's previous origin when dropped (also when the closure panics).
struct OriginGuard(Option<(u32, u64)>);

impl Drop for OriginGuard {
    fn drop(&mut self) {
        ORIGIN.with(|o| o.set(self.0));
    }
}

type Stamps = Option<HashMap<Box<[u8]>, Stamp>>;

#[derive(Default)]
struct Stripe {
    /// Keys of the database's own keyspace.
    stamps: Stamps,
    /// Keys of other keyspaces, as `[name length u16][name][key]`.
    spaced: Stamps,
}

/// A key of keyspace `name` in [`Stripe::spaced`].
fn spaced_key(name: &[u8], key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + name.len() + key.len());
    k.extend_from_slice(&(name.len() as u16).to_le_bytes());
    k.extend_from_slice(name);
    k.extend_from_slice(key);
    k
}

impl Stripe {
    /// Whether a change of `key` (of keyspace `space`, `None`: the database's own) with a
    /// stamp at least `stamp` was seen.
    fn newer_seen(&self, space: Option<&[u8]>, key: &[u8], stamp: Stamp) -> bool {
        let seen = |m: &Stamps, key: &[u8]| {
            m.as_ref()
                .and_then(|m| m.get(key))
                .is_some_and(|s| *s >= stamp)
        };
        match space {
            None => seen(&self.stamps, key),
            Some(n) => seen(&self.spaced, &spaced_key(n, key)),
        }
    }

    fn note(&mut self, space: Option<&[u8]>, key: &[u8], stamp: Stamp) {
        let note = |m: &mut Stamps, key: &[u8]| {
            let m = m.get_or_insert_with(HashMap::new);
            if m.len() >= LWW_PER_STRIPE && !m.contains_key(key) {
                let old = now_us().saturating_sub(LWW_WINDOW);
                m.retain(|_, s| s.0 >= old);
                if m.len() >= LWW_PER_STRIPE {
                    m.clear();
                }
            }
            m.insert(key.into(), stamp);
        };
        match space {
            None => note(&mut self.stamps, key),
            Some(n) => note(&mut self.spaced, &spaced_key(n, key)),
        }
    }
}

/// A database with an update log (see the module's comment).
/// [`Logged::keyspace`] gives a keyspace's handle: a `Logged` of the keyspace's store that
/// shares the database's log, stripes and catalog, whose every record is `In` the keyspace.
pub struct Logged {
    /// The database, or the keyspace of a keyspace's handle.
    inner: Arc<dyn Store>,
    log: Arc<Ulog>,
    stripes: Arc<[Mutex<Stripe>]>,
    /// Remember origin stamps (a server that takes writes from clients and from a master).
    lww: Arc<AtomicBool>,
    /// A keyspace's handle: the keyspace's name and the parameters its records carry.
    space: Option<(String, String)>,
    /// Every keyspace opened through this database: name → parameters (what a record `In`
    /// it carries, so a replica or a restore can make it).
    catalog: Arc<Mutex<HashMap<String, String>>>,
    persistent: bool,
    stop: Arc<AtomicBool>,
    marker: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Records replayed onto the database when it was opened.
    pub redone: u64,
}

/// Run `f`, a change of the database, without its durability wait: the log's record is the
/// commit point. A `sync=always` database's write then owes a sync (`crate::durability`),
/// which is dropped; what the calling thread owed before is kept.
fn unsynced<T>(f: impl FnOnce() -> T) -> T {
    use crate::durability as d;
    let (was_deferred, was_pending) = (d::deferred(), d::pending());
    d::set_deferred(true);
    let r = f();
    d::set_deferred(was_deferred);
    if !was_pending {
        d::take_pending();
    }
    r
}

/// The name to open a database by when a [`Logged`] wraps it, and the sync mode of its update
/// log: a persistent database's `sync=` goes to the log (the commit point), and the database
/// is opened with `sync=none` (synced only at the `applied` mark, its checkpoints and close).
/// Any other name is kept as it is (a memory kind takes no `sync=`: its open refuses one).
pub fn database_name(name: &str) -> Result<(String, crate::SyncMode)> {
    let (path, params) = crate::name::split_name(name)?;
    let sync = params.sync()?.unwrap_or(crate::SyncMode::DEFAULT);
    if !crate::registry::by_path(path).is_some_and(|k| k.caps.persistent) {
        return Ok((name.to_string(), sync));
    }
    let mut out = path.to_string();
    for (k, v) in params.items().iter().filter(|(k, _)| k != "sync") {
        out.push_str(&format!("#{k}={v}"));
    }
    out.push_str("#sync=none");
    Ok((out, sync))
}

/// A batch operation as a record's batch element.
fn batch_op(op: &BatchOp) -> Op<'_> {
    match op {
        BatchOp::Put {
            key,
            value,
            flags,
            expires,
        } => Op::Put {
            key,
            value,
            flags: *flags,
            expires: *expires,
        },
        BatchOp::Remove { key } => Op::Remove { key },
    }
}

fn stripe_of(key: &[u8]) -> usize {
    xxhash_rust::xxh3::xxh3_64(key) as usize & (STRIPES - 1)
}

fn applied_path(log: &Ulog) -> PathBuf {
    log.config().dir.join("applied")
}

fn read_applied(log: &Ulog) -> Option<u64> {
    let text = read_file(&*log.config().vfs, &applied_path(log)).ok()?;
    let text = std::str::from_utf8(&text).ok()?;
    let (ts, crc) = text.trim().split_once(' ')?;
    (crc.parse::<u32>().ok()? == crc32c::crc32c(ts.as_bytes())).then_some(())?;
    ts.parse().ok()
}

fn write_applied(log: &Ulog, ts: u64) -> Result<()> {
    let ts = ts.to_string();
    let text = format!("{ts} {}\n", crc32c::crc32c(ts.as_bytes()));
    replace_file(&*log.config().vfs, &applied_path(log), text.as_bytes())?;
    Ok(())
}

/// The name of a copy's position file inside the copy's directory: the directory alone
/// carries what a restore needs.
pub const POSITION_NAME: &str = "kura.ulogpos";

/// The position file of the copy at `dest`: `DEST/kura.ulogpos` when the copy is a directory
/// (every on-disk kind), else beside it.
pub fn position_path(dest: &Path) -> PathBuf {
    position_path_in(&OsVfs, dest)
}

/// [`position_path`] of a copy on `vfs`.
fn position_path_in(vfs: &dyn Vfs, dest: &Path) -> PathBuf {
    if vfs.exists(dest) && vfs.list(dest).is_ok() {
        dest.join(POSITION_NAME)
    } else {
        beside_path(dest)
    }
}

/// Where a copy's position file was kept before it went inside the copy: `DEST.ulogpos`.
fn beside_path(dest: &Path) -> PathBuf {
    let mut s = dest.as_os_str().to_owned();
    s.push(".ulogpos");
    PathBuf::from(s)
}

/// Record that the copy at `dest` holds every change up to `ts` of server `sid`'s log
/// (written under a temporary name, synced and renamed: a crash leaves the old position or
/// the new one). A position file beside the copy (where older copies kept it) is removed.
pub fn write_position(dest: &Path, ts: u64, sid: u32) -> Result<()> {
    write_position_in(&OsVfs, dest, ts, sid)
}

/// [`write_position`] for a copy on `vfs`.
fn write_position_in(vfs: &dyn Vfs, dest: &Path, ts: u64, sid: u32) -> Result<()> {
    let body = format!("kura-ulog-position {ts} {sid}");
    let text = format!("{body}\ncrc {}\n", crc32c::crc32c(body.as_bytes()));
    let path = position_path_in(vfs, dest);
    replace_file(vfs, &path, text.as_bytes())?;
    let old = beside_path(dest);
    if path != old && vfs.exists(&old) {
        vfs.remove(&old)?;
    }
    Ok(())
}

/// The log position recorded with the copy at `dest`: `(ts, sid)`. Read inside the copy, or
/// beside it (copies made before the position went inside).
pub fn read_position(dest: &Path) -> Result<(u64, u32)> {
    read_position_in(&OsVfs, dest)
}

/// [`read_position`] of a copy on `vfs`.
fn read_position_in(vfs: &dyn Vfs, dest: &Path) -> Result<(u64, u32)> {
    let inside = position_path_in(vfs, dest);
    let path = if vfs.exists(&inside) {
        inside.clone()
    } else {
        beside_path(dest)
    };
    let text = read_file(vfs, &path).map_err(|e| {
        Error::NotFound(format!(
            "{}: no update log position in the backup ({e}); a backup made by `copy` of a \
             server with --ulog has one",
            inside.display()
        ))
    })?;
    let bad = || Error::Corrupt(format!("{}: damaged log position file", path.display()));
    let text = std::str::from_utf8(&text).map_err(|_| bad())?;
    let mut lines = text.lines();
    let body = lines.next().ok_or_else(bad)?;
    let crc: u32 = lines
        .next()
        .and_then(|l| l.strip_prefix("crc "))
        .and_then(|c| c.parse().ok())
        .ok_or_else(bad)?;
    if crc != crc32c::crc32c(body.as_bytes()) {
        return Err(bad());
    }
    let f: Vec<&str> = body.split(' ').collect();
    match f[..] {
        ["kura-ulog-position", ts, sid] => Ok((
            ts.parse().map_err(|_| bad())?,
            sid.parse().map_err(|_| bad())?,
        )),
        _ => Err(bad()),
    }
}

impl Logged {
    /// Wrap `inner` with `log`. A persistent database gets the log's records after its saved
    /// `applied` mark replayed onto it; a memory database, which starts empty, gets a `Vanish`
    /// logged (when the log has records), so its replicas start empty too.
    pub fn new(inner: Arc<dyn Store>, log: Arc<Ulog>) -> Result<Arc<Logged>> {
        let persistent = inner.kind().info().caps.persistent;
        let mut redone = 0;
        if persistent {
            let (_, first) = log.span();
            let from = read_applied(&log).unwrap_or(0).max(first);
            if from < log.last_ts() {
                // Applied without an fsync a record (`sync=always`), then synced once.
                redone = super::apply::deferred(|| {
                    let c = log.config();
                    read_dir_in(&*c.vfs, &c.dir, from, u64::MAX, &mut |r: &Rec<'_>| {
                        apply(&*inner, &r.op).map(|_| ())
                    })
                })?;
                inner.sync()?;
            }
            write_applied(&log, log.last_ts())?;
            log.keep_after(log.last_ts());
        } else if log.last_ts() > 0 {
            log.append(&Op::Vanish)?;
        }
        let stripes: Arc<[Mutex<Stripe>]> = (0..STRIPES)
            .map(|_| Mutex::new(Stripe::default()))
            .collect();
        let me = Arc::new(Logged {
            inner,
            log,
            stripes,
            lww: Arc::new(AtomicBool::new(false)),
            space: None,
            catalog: Arc::new(Mutex::new(HashMap::new())),
            persistent,
            stop: Arc::new(AtomicBool::new(false)),
            marker: Mutex::new(None),
            redone,
        });
        if persistent {
            let weak = Arc::downgrade(&me);
            let stop = me.stop.clone();
            let h = std::thread::Builder::new()
                .name("kura-ulog-mark".into())
                .spawn(move || {
                    let mut n = 0u32;
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(100));
                        n += 1;
                        if !n.is_multiple_of(20) {
                            continue;
                        }
                        let Some(me) = weak.upgrade() else { return };
                        let _ = me.mark();
                    }
                })
                .ok();
            *me.marker.lock() = h;
        }
        Ok(me)
    }

    pub fn log(&self) -> &Arc<Ulog> {
        &self.log
    }

    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    /// Order concurrent writes to a key by their origin stamps (a server with a master that
    /// also takes writes: dual master).
    pub fn set_lww(&self, on: bool) {
        self.lww.store(on, Ordering::Relaxed);
    }

    /// Wait until every record logged so far is applied; the newest time stamp.
    pub fn position(&self) -> u64 {
        let ts = self.log.last_ts();
        for s in self.stripes.iter() {
            drop(s.lock());
        }
        ts
    }

    /// Save the point up to which the database holds every record, durably (then retention
    /// may let the records up to it go).
    fn mark(&self) -> Result<()> {
        let ts = self.position();
        self.inner.sync()?;
        write_applied(&self.log, ts)?;
        self.log.keep_after(ts);
        Ok(())
    }

    /// Append a record: this server's own, or stamped with the origin [`Logged::as_origin`]
    /// set for this thread.
    fn append(&self, op: &Op<'_>) -> Result<u64> {
        self.append_from(ORIGIN.with(Cell::get), op)
    }

    /// Append a record with `origin`, `In` this handle's keyspace if it is one.
    fn append_from(&self, origin: Option<(u32, u64)>, op: &Op<'_>) -> Result<u64> {
        match &self.space {
            None => self.log.append_from(origin, op),
            Some((name, params)) => self.log.append_from(
                origin,
                &Op::In {
                    name: name.as_bytes(),
                    params: params.as_bytes(),
                    op: Box::new(op.clone()),
                },
            ),
        }
    }

    /// This handle's keyspace name (`None`: the database's own), for last-writer-wins stamps.
    fn space_name(&self) -> Option<&[u8]> {
        self.space.as_ref().map(|(n, _)| n.as_bytes())
    }

    /// The handle of keyspace `name` (see [`Store::keyspace`]): made with `params` where it
    /// does not exist; its records carry the parameters it was made with (as
    /// [`Store::keyspaces`] gives them, else the first ones it was opened with here).
    pub fn keyspace_handle(&self, name: &str, params: &str) -> Result<Arc<Logged>> {
        if self.space.is_some() {
            return Err(Error::Unsupported("a keyspace of a keyspace"));
        }
        if name.len() > u16::MAX as usize || params.len() > u16::MAX as usize {
            return Err(Error::InvalidParam(
                "a keyspace name or its parameters longer than 65,535 bytes".into(),
            ));
        }
        let inner = self.inner.keyspace(name, params)?;
        let params = {
            let mut c = self.catalog.lock();
            let p = c.entry(name.to_string()).or_default();
            if p.is_empty() {
                *p = params.to_string();
            }
            if p.is_empty() {
                // Opened without parameters: those it was made with, as the kind says.
                if let Some((_, made)) = self.inner.keyspaces().into_iter().find(|(n, _)| n == name)
                {
                    *p = made;
                }
            }
            p.clone()
        };
        Ok(Arc::new(Logged {
            inner,
            log: self.log.clone(),
            stripes: self.stripes.clone(),
            lww: self.lww.clone(),
            space: Some((name.to_string(), params)),
            catalog: self.catalog.clone(),
            persistent: self.persistent,
            stop: self.stop.clone(),
            marker: Mutex::new(None),
            redone: 0,
        }))
    }

    /// The last-writer-wins stamp of a change logged at `ts`: its origin's.
    fn stamp(&self, ts: u64) -> Stamp {
        match ORIGIN.with(Cell::get) {
            Some((sid, ots)) => (ots, sid),
            None => (ts, self.log.sid()),
        }
    }

    /// Run `f` on this database (every operation of it logged as usual: under the key's
    /// stripe, the effects, a compensating record when the database refuses) with every
    /// record it logs stamped with the origin `sid` and its time stamp `ts` there, as a
    /// replicated change is. For a master that sends commands rather than effects (Tokyo
    /// Tyrant's update log): the command is executed here with its own meaning and its effects
    /// are logged as the origin's, so they are never sent back to it and chained replicas
    /// know where they came from. `None` (nothing run) when the origin is this server.
    pub fn as_origin<T>(
        &self,
        sid: u32,
        ts: u64,
        f: impl FnOnce(&dyn Store) -> Result<T>,
    ) -> Result<Option<T>> {
        if sid == self.log.sid() {
            return Ok(None);
        }
        let _back = OriginGuard(ORIGIN.with(|o| o.replace(Some((sid, ts)))));
        f(self).map(Some)
    }

    /// Log `op` (a change of `key`) and apply it with `f`, under the key's stripe.
    fn change<T>(
        &self,
        key: &[u8],
        op: &Op<'_>,
        f: impl FnOnce(&dyn Store) -> Result<T>,
    ) -> Result<T> {
        let mut st = self.stripes[stripe_of(key)].lock();
        let exact = matches!(op, Op::Values { .. }) || self.exact(key)?;
        let ts = self.append(op)?;
        let r = unsynced(|| f(&*self.inner));
        match &r {
            Ok(_) if exact => {}
            // A key with duplicates: the change may have touched one value of several.
            Ok(_) | Err(_) => self.compensate(key),
        }
        if r.is_ok() && self.lww.load(Ordering::Relaxed) {
            st.note(self.space_name(), key, self.stamp(ts));
        }
        drop(st);
        if r.is_ok() {
            self.log.settle()?;
        }
        r
    }

    /// Whether a put, touch or remove of `key` (under its stripe) is exactly what its record
    /// says, so that no record of the key's state need follow it: always on a kind without
    /// duplicate keys, and on one with them while the key holds at most one value (a change
    /// of one value of several is followed by a `Values` record of them all).
    fn exact(&self, key: &[u8]) -> Result<bool> {
        Ok(!self.inner.allows_dups() || self.inner.value_count(key)? <= 1)
    }

    /// After a logged change the database refused, or one that may have touched one value of
    /// several: log the key's actual state.
    fn compensate(&self, key: &[u8]) {
        if self.inner.allows_dups() && self.inner.value_count(key).unwrap_or(0) > 1 {
            if let Ok(vals) = self.inner.get_all(key) {
                let mut body = Vec::new();
                for v in &vals {
                    push_value(&mut body, v);
                }
                let _ = self.append(&Op::Values {
                    key,
                    count: vals.len() as u32,
                    body: &body,
                });
            }
            return;
        }
        let _ = match self.inner.get(key) {
            Ok(Some(r)) => self.append(&Op::Put {
                key,
                value: &r.value,
                flags: r.meta.flags,
                expires: r.meta.expires,
            }),
            Ok(None) => self.append(&Op::Remove { key }),
            Err(_) => return,
        };
    }

    /// Apply a record replicated from another server: logged again with its origin kept,
    /// skipped when it came from this server (a loop) or, with last-writer-wins on, when a
    /// newer change of the key was seen. Whether it was applied.
    pub fn apply_remote(&self, rec: &Rec<'_>) -> Result<bool> {
        if rec.origin_sid == self.log.sid() {
            return Ok(false);
        }
        let origin = Some((rec.origin_sid, rec.origin_ts));
        let stamp = (rec.origin_ts, rec.origin_sid);
        let lww = self.lww.load(Ordering::Relaxed);
        // A batch element's keyspace: its own `In`, else this handle's.
        let space_of = |o: &Op<'_>| -> Option<Vec<u8>> {
            match o.space().0 {
                Some(s) => Some(s.name.to_vec()),
                None => self.space_name().map(<[u8]>::to_vec),
            }
        };
        match &rec.op {
            Op::In { name, params, op } => {
                let (name, params) = record::Space { name, params }.text()?;
                let space = self.keyspace_handle(name, params)?;
                return space.apply_remote(&Rec {
                    op: (**op).clone(),
                    ..rec.clone()
                });
            }
            Op::Batch { body, .. } => {
                let ops: Vec<Op<'_>> = record::batch_ops(body).collect::<Result<_>>()?;
                let mut idx: Vec<usize> =
                    ops.iter().filter_map(|o| o.key().map(stripe_of)).collect();
                idx.sort_unstable();
                idx.dedup();
                let mut guards: Vec<_> = idx.iter().map(|&i| (i, self.stripes[i].lock())).collect();
                let stripe = |guards: &mut Vec<(usize, parking_lot::MutexGuard<'_, Stripe>)>,
                              key: &[u8]| {
                    let i = stripe_of(key);
                    guards.iter_mut().position(|(j, _)| *j == i).unwrap_or(0)
                };
                let mut kept = Vec::new();
                let mut n = 0;
                for o in &ops {
                    let key = o.key().unwrap_or_default();
                    let g = stripe(&mut guards, key);
                    if lww && guards[g].1.newer_seen(space_of(o).as_deref(), key, stamp) {
                        continue;
                    }
                    push_batch_op(&mut kept, o);
                    n += 1;
                }
                if n == 0 {
                    return Ok(false);
                }
                let op = Op::Batch {
                    count: n,
                    body: &kept,
                };
                self.append_from(origin, &op)?;
                unsynced(|| apply(&*self.inner, &op))?;
                if lww {
                    for o in &ops {
                        let key = o.key().unwrap_or_default();
                        let g = stripe(&mut guards, key);
                        guards[g].1.note(space_of(o).as_deref(), key, stamp);
                    }
                }
                drop(guards);
            }
            Op::Vanish => {
                let guards: Vec<_> = self.stripes.iter().map(|s| s.lock()).collect();
                self.append_from(origin, &rec.op)?;
                unsynced(|| apply(&*self.inner, &rec.op))?;
                drop(guards);
            }
            Op::Optimize { .. } => {
                self.append_from(origin, &rec.op)?;
                unsynced(|| apply(&*self.inner, &rec.op))?;
            }
            op => {
                let key = op.key().unwrap_or_default();
                let mut st = self.stripes[stripe_of(key)].lock();
                if lww && st.newer_seen(self.space_name(), key, stamp) {
                    return Ok(false);
                }
                self.append_from(origin, op)?;
                if let Err(e) = unsynced(|| apply(&*self.inner, op)) {
                    self.compensate(key);
                    return Err(e);
                }
                if lww {
                    st.note(self.space_name(), key, stamp);
                }
            }
        }
        self.log.settle()?;
        Ok(true)
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        // A keyspace's handle leaves the database running.
        if self.space.is_none() {
            self.stop.store(true, Ordering::Relaxed);
        }
    }
}

impl Store for Logged {
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
        let mut st = self.stripes[stripe_of(key)].lock();
        // Decide on the record as it is now: no other change of this key can come between
        // (they all take this stripe).
        let mut decided = None;
        let mut seen = None;
        let found = self.inner.view(key, &mut |value, meta| {
            seen = Some(meta);
            decided = Some(visitor(Some(Current { value, meta })));
        })?;
        let decision = match decided {
            Some(d) if found => d,
            _ => visitor(None),
        };
        let op = match &decision {
            Decision::Keep => return Ok(seen),
            Decision::Put {
                value,
                flags,
                expires,
            } => Op::Put {
                key,
                value,
                flags: *flags,
                expires: *expires,
            },
            Decision::Touch { expires } => {
                if seen.is_none() {
                    return Ok(None);
                }
                Op::Touch {
                    key,
                    expires: *expires,
                }
            }
            Decision::Remove => {
                if seen.is_none() {
                    return Ok(None);
                }
                Op::Remove { key }
            }
        };
        let exact = self.exact(key)?;
        let ts = self.append(&op)?;
        let r = unsynced(|| self.inner.accept(key, &mut |_| decision.clone()));
        if r.is_err() || !exact {
            self.compensate(key);
        }
        if r.is_ok() && self.lww.load(Ordering::Relaxed) {
            st.note(self.space_name(), key, self.stamp(ts));
        }
        drop(st);
        if r.is_ok() {
            self.log.settle()?;
        }
        r
    }

    fn put_with(&self, key: &[u8], value: &[u8], flags: u32, expires: u64) -> Result<Meta> {
        crate::store::check_sizes(key, value.len())?;
        let op = Op::Put {
            key,
            value,
            flags,
            expires,
        };
        self.change(key, &op, |s| s.put_with(key, value, flags, expires))
    }

    fn out(&self, key: &[u8]) -> Result<bool> {
        // Only a live record's removal is a change worth logging.
        let st = self.stripes[stripe_of(key)].lock();
        let live = self.inner.view(key, &mut |_, _| {})?;
        drop(st);
        if !live {
            return Ok(false);
        }
        self.change(key, &Op::Remove { key }, |s| s.out(key))
    }

    fn write_batch(&self, ops: &[BatchOp]) -> Result<()> {
        for op in ops {
            if let BatchOp::Put { key, value, .. } = op {
                crate::store::check_sizes(key, value.len())?;
            }
        }
        let mut idx: Vec<usize> = ops.iter().map(|o| stripe_of(o.key())).collect();
        idx.sort_unstable();
        idx.dedup();
        let guards: Vec<_> = idx.iter().map(|&i| self.stripes[i].lock()).collect();
        let mut body = Vec::new();
        for op in ops {
            push_batch_op(&mut body, &batch_op(op));
        }
        self.append(&Op::Batch {
            count: ops.len() as u32,
            body: &body,
        })?;
        let r = unsynced(|| self.inner.write_batch(ops));
        if r.is_err() {
            for op in ops {
                self.compensate(op.key());
            }
        }
        drop(guards);
        r?;
        self.log.settle()
    }

    fn cursor(&self) -> Result<Box<dyn Cursor + '_>> {
        Ok(Box::new(LoggedCursor {
            inner: self.inner.cursor()?,
            owner: self,
        }))
    }

    fn count(&self) -> u64 {
        self.inner.count()
    }

    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn sync(&self) -> Result<()> {
        // The log is the commit point: what it holds is redone onto the database after a
        // crash.
        self.log.sync()
    }

    fn optimize(&self, params: &str) -> Result<()> {
        self.append(&Op::Optimize {
            params: params.as_bytes(),
        })?;
        unsynced(|| self.inner.optimize(params))?;
        self.log.settle()
    }

    fn vanish(&self) -> Result<()> {
        let guards: Vec<_> = self.stripes.iter().map(|s| s.lock()).collect();
        self.append(&Op::Vanish)?;
        let r = unsynced(|| self.inner.vanish());
        drop(guards);
        r?;
        self.log.settle()
    }

    fn copy_to(&self, dest: &Path) -> Result<()> {
        let ts = self.position();
        self.inner.copy_to(dest)?;
        // Beside the copy, on the file system the kind wrote it to (`copy_to` writes copies
        // on the real one).
        write_position(dest, ts, self.log.sid())
    }

    fn check(&self) -> Result<CheckReport> {
        self.inner.check()
    }

    fn check_put(&self, key: &[u8], value_len: usize) -> Result<()> {
        self.inner.check_put(key, value_len)
    }

    fn keyspace_rules(&self, params: &str) -> Result<Option<Arc<dyn Store>>> {
        self.inner.keyspace_rules(params)
    }

    fn kind(&self) -> Kind {
        self.inner.kind()
    }

    fn describe(&self) -> Vec<(String, String)> {
        let mut d = self.inner.describe();
        // Writes are as durable as the log makes them.
        for (k, v) in d.iter_mut() {
            if k == "sync" {
                *v = self.log.config().sync.describe();
            }
        }
        let (files, first) = self.log.span();
        d.push(("ulog".into(), self.log.config().dir.display().to_string()));
        d.push(("ulog_files".into(), files.to_string()));
        d.push(("ulog_first_ts".into(), first.to_string()));
        d.push(("ulog_last_ts".into(), self.log.last_ts().to_string()));
        d
    }

    fn close(&self) -> Result<()> {
        if self.space.is_some() {
            // A keyspace closes with its database.
            return Ok(());
        }
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.marker.lock().take() {
            let _ = h.join();
        }
        self.log.close()?;
        if self.persistent {
            self.mark()?;
        }
        self.inner.close()
    }

    fn damage_found(&self) -> Vec<Damaged> {
        self.inner.damage_found()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut c = self.inner.counters();
        let (waits, _) = self.log.commit_waits();
        c.push(("ulog_syncs", self.log.sync_count()));
        c.push(("ulog_commit_waits", waits));
        c
    }

    fn for_each_record(&self, f: &mut RecordVisitor<'_>) -> Result<u64> {
        self.inner.for_each_record(f)
    }

    fn fwmkeys(&self, prefix: &[u8], max: usize) -> Result<Vec<Vec<u8>>> {
        self.inner.fwmkeys(prefix, max)
    }

    fn range(&self, from: &[u8], to: Option<&[u8]>, max: usize) -> Result<Vec<Vec<u8>>> {
        self.inner.range(from, to, max)
    }

    fn allows_dups(&self) -> bool {
        self.inner.allows_dups()
    }

    fn keyspace(&self, name: &str, params: &str) -> Result<Arc<dyn Store>> {
        Ok(self.keyspace_handle(name, params)?)
    }

    fn table(&self) -> Option<&dyn crate::table::Table> {
        self.inner.table().map(|_| self as &dyn crate::table::Table)
    }

    fn keyspaces(&self) -> Vec<(String, String)> {
        match self.space {
            Some(_) => Vec::new(),
            None => self.inner.keyspaces(),
        }
    }

    fn write_across(&self, ops: &[(&str, BatchOp)]) -> Result<()> {
        if self.space.is_some() {
            return Err(Error::Unsupported(
                "a batch across keyspaces on a keyspace (call it on the database)",
            ));
        }
        let mut params = Vec::with_capacity(ops.len());
        {
            let catalog = self.catalog.lock();
            for (name, op) in ops {
                if let BatchOp::Put { key, value, .. } = op {
                    crate::store::check_sizes(key, value.len())?;
                }
                params.push(match name.is_empty() {
                    true => String::new(),
                    false => catalog.get(*name).cloned().ok_or_else(|| {
                        Error::InvalidParam(format!(
                            "keyspace `{name}`: not opened (open it with `keyspace` first)"
                        ))
                    })?,
                });
            }
        }
        let mut idx: Vec<usize> = ops.iter().map(|(_, o)| stripe_of(o.key())).collect();
        idx.sort_unstable();
        idx.dedup();
        let guards: Vec<_> = idx.iter().map(|&i| self.stripes[i].lock()).collect();
        let mut body = Vec::new();
        for ((name, op), params) in ops.iter().zip(&params) {
            let o = batch_op(op);
            if name.is_empty() {
                push_batch_op(&mut body, &o);
            } else {
                push_batch_op(
                    &mut body,
                    &Op::In {
                        name: name.as_bytes(),
                        params: params.as_bytes(),
                        op: Box::new(o),
                    },
                );
            }
        }
        self.append(&Op::Batch {
            count: ops.len() as u32,
            body: &body,
        })?;
        let r = unsynced(|| self.inner.write_across(ops));
        if r.is_err() {
            for ((name, op), params) in ops.iter().zip(&params) {
                if name.is_empty() {
                    self.compensate(op.key());
                } else if let Ok(h) = self.keyspace_handle(name, params) {
                    h.compensate(op.key());
                }
            }
        }
        drop(guards);
        r?;
        self.log.settle()
    }

    fn put_dup(&self, key: &[u8], value: &[u8], front: bool) -> Result<()> {
        crate::store::check_sizes(key, value.len())?;
        let mut st = self.stripes[stripe_of(key)].lock();
        let mut vals = self.inner.get_all(key)?;
        if front {
            vals.insert(0, value.to_vec());
        } else {
            vals.push(value.to_vec());
        }
        let mut body = Vec::new();
        for v in &vals {
            push_value(&mut body, v);
        }
        let ts = self.append(&Op::Values {
            key,
            count: vals.len() as u32,
            body: &body,
        })?;
        let r = unsynced(|| self.inner.put_dup(key, value, front));
        match &r {
            Ok(()) if self.lww.load(Ordering::Relaxed) => {
                st.note(self.space_name(), key, self.stamp(ts))
            }
            Ok(()) => {}
            Err(_) => self.compensate(key),
        }
        drop(st);
        r?;
        self.log.settle()
    }

    fn get_all(&self, key: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.inner.get_all(key)
    }

    fn remove_all(&self, key: &[u8]) -> Result<u64> {
        let op = Op::Values {
            key,
            count: 0,
            body: &[],
        };
        if self.inner.value_count(key)? == 0 {
            return Ok(0);
        }
        self.change(key, &op, |s| s.remove_all(key))
    }

    fn value_count(&self, key: &[u8]) -> Result<u64> {
        self.inner.value_count(key)
    }

    fn for_each_in_range(&self, range: &KeyRange<'_>, f: &mut RecordVisitor<'_>) -> Result<u64> {
        self.inner.for_each_in_range(range, f)
    }
}

/// A cursor whose writes are logged.
struct LoggedCursor<'a> {
    inner: Box<dyn Cursor + 'a>,
    owner: &'a Logged,
}

impl Cursor for LoggedCursor<'_> {
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
        let Some((key, rec)) = self.inner.get()? else {
            return Ok(false);
        };
        let o = self.owner;
        let mut st = o.stripes[stripe_of(&key)].lock();
        let op = Op::Put {
            key: &key,
            value,
            flags: rec.meta.flags,
            expires: expires.unwrap_or(rec.meta.expires),
        };
        let exact = o.exact(&key)?;
        let ts = o.append(&op)?;
        let r = unsynced(|| self.inner.set_value(value, expires));
        if !matches!(r, Ok(true)) || !exact {
            o.compensate(&key);
        } else if o.lww.load(Ordering::Relaxed) {
            st.note(o.space_name(), &key, o.stamp(ts));
        }
        drop(st);
        if r.is_ok() {
            o.log.settle()?;
        }
        r
    }
    fn remove(&mut self) -> Result<bool> {
        Ok(self.seize()?.is_some())
    }
    fn seize(&mut self) -> Result<Option<(Vec<u8>, Record)>> {
        let Some((key, _)) = self.inner.get()? else {
            return Ok(None);
        };
        let o = self.owner;
        let st = o.stripes[stripe_of(&key)].lock();
        let exact = o.exact(&key)?;
        o.append(&Op::Remove { key: &key })?;
        let r = unsynced(|| self.inner.seize());
        if !matches!(r, Ok(Some(_))) || !exact {
            o.compensate(&key);
        }
        drop(st);
        if r.is_ok() {
            o.log.settle()?;
        }
        r
    }
    fn next(&mut self) -> Result<Option<(Vec<u8>, Record)>> {
        self.inner.next()
    }
    fn backward(&self) -> bool {
        self.inner.backward()
    }
    fn damage_skipped(&self) -> u64 {
        self.inner.damage_skipped()
    }
}

/// A logged table: its writes go through [`Logged`]'s own (logged as puts and removes of
/// the records' wire forms, which a replica, a redo and a restore apply to their table, its
/// indexes following); reads, unique ids and index changes are the table's own (not logged:
/// a replica makes its own indexes).
impl crate::table::Table for Logged {
    fn put_row(
        &self,
        pk: &[u8],
        cols: &crate::table::Columns,
        mode: crate::table::PutMode,
    ) -> Result<bool> {
        crate::table::put_row_through(self, pk, cols, mode)
    }

    fn out_row(&self, pk: &[u8]) -> Result<bool> {
        self.out(pk)
    }

    fn get_row(&self, pk: &[u8]) -> Result<Option<crate::table::Columns>> {
        self.inner_table()?.get_row(pk)
    }

    fn genuid(&self) -> Result<u64> {
        self.inner_table()?.genuid()
    }

    fn set_index(&self, column: &[u8], op: crate::table::IndexOp) -> Result<bool> {
        self.inner_table()?.set_index(column, op)
    }

    fn indexes(&self) -> Vec<crate::table::IndexInfo> {
        self.inner.table().map(|t| t.indexes()).unwrap_or_default()
    }

    fn index(&self, column: &[u8]) -> Option<(crate::table::IndexType, Arc<dyn Store>)> {
        self.inner.table().and_then(|t| t.index(column))
    }

    fn for_each_row(
        &self,
        range: &KeyRange<'_>,
        f: &mut dyn FnMut(&[u8], &crate::table::Columns) -> Result<bool>,
    ) -> Result<u64> {
        self.inner_table()?.for_each_row(range, f)
    }

    fn for_each_row_of(
        &self,
        range: &KeyRange<'_>,
        names: &[&[u8]],
        f: &mut dyn FnMut(&[u8], &crate::table::Columns) -> Result<bool>,
    ) -> Result<u64> {
        self.inner_table()?.for_each_row_of(range, names, f)
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

impl Logged {
    fn inner_table(&self) -> Result<&dyn crate::table::Table> {
        self.inner.table().ok_or(Error::Unsupported(
            "table operations on a database that is not a table",
        ))
    }
}
