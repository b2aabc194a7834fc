//! Executes memcached requests on a [`Store`] and writes memcached replies: the storage adapter
//! between the codec (`kura_proto::mc_text`) and the database. No sockets here: the connection
//! loop (`crate::net`) feeds decoded requests in and writes the bytes out.

use crate::mask::{Mask, Op, Proto};
use crate::out::{Out, PIN_MIN};
use kura_engine::counter::Counter;
use kura_engine::{Counted, Decision, Error, Outcome, Shown, Store, Value};
use kura_proto::mc_text::{self, reply, Keys, Request, StoreMode};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};

/// The version reported to clients: the memcached release whose protocol Kura follows, then
/// Kura's own version. Clients and test tools read the leading numbers to pick features
/// (memcached 1.6 semantics: e.g. `version` and `quit` ignore extra arguments).
pub const VERSION: &str = concat!("1.6.21-kura-", env!("CARGO_PKG_VERSION"));

/// memcached's boundary between relative and absolute expiration times (30 days).
const RELATIVE_LIMIT: i64 = 60 * 60 * 24 * 30;

/// Counters and settings shared by every connection of a server.
#[derive(Debug)]
pub struct Shared {
    pub started: u64,
    pub version: &'static str,
    pub cmd_get: Counter,
    pub cmd_set: Counter,
    /// Values stored by the memcached storage commands (memcached's `total_items`).
    pub total_items: Counter,
    pub cmd_touch: Counter,
    pub cmd_flush: Counter,
    pub get_hits: Counter,
    pub get_misses: Counter,
    pub delete_hits: Counter,
    pub delete_misses: Counter,
    pub incr_hits: Counter,
    pub incr_misses: Counter,
    pub decr_hits: Counter,
    pub decr_misses: Counter,
    pub cas_hits: Counter,
    pub cas_misses: Counter,
    pub cas_badval: Counter,
    pub touch_hits: Counter,
    pub touch_misses: Counter,
    pub curr_connections: AtomicU64,
    pub total_connections: AtomicU64,
    /// Connections refused at `max_connections`.
    pub rejected_connections: AtomicU64,
    /// Bytes read from and written to clients.
    pub bytes_read: Counter,
    pub bytes_written: Counter,
    /// Worker threads and the connection limit (for `stats` and `stats settings`).
    pub threads: usize,
    pub max_connections: usize,
    pub max_item_size: u64,
    /// A pending `flush_all <delay>`: the unix time at which every record goes (0 = none).
    pub flush_at: AtomicU64,
    /// Operations refused on every protocol (`--mask`).
    pub mask: Mask,
    /// The database name the server was started with (Tyrant's `path`).
    pub db_name: String,
    /// The server id (Tyrant's `sid`): from `--sid`, else derived from the port.
    pub sid: u32,
    /// The main listening port.
    pub port: u16,
    /// memcached's per-item stale / win-token bits for the meta commands (see [`ItemStates`]).
    pub item_states: ItemStates,
    /// Tyrant commands received, by operation (`crate::mask::Op` order: Tyrant's `cnt_*`).
    pub tt_counts: [Counter; crate::mask::OPS.len()],
    /// Tyrant's `cnt_put_miss`, `cnt_out_miss`, `cnt_get_miss`.
    pub tt_misses: [Counter; 3],
}

impl Shared {
    pub fn new(now: u64, max_item_size: u64) -> Shared {
        let z = || AtomicU64::new(0);
        Shared {
            started: now,
            version: VERSION,
            cmd_get: Counter::new(),
            cmd_set: Counter::new(),
            total_items: Counter::new(),
            cmd_touch: Counter::new(),
            cmd_flush: Counter::new(),
            tt_counts: std::array::from_fn(|_| Counter::new()),
            tt_misses: std::array::from_fn(|_| Counter::new()),
            get_hits: Counter::new(),
            get_misses: Counter::new(),
            delete_hits: Counter::new(),
            delete_misses: Counter::new(),
            incr_hits: Counter::new(),
            incr_misses: Counter::new(),
            decr_hits: Counter::new(),
            decr_misses: Counter::new(),
            cas_hits: Counter::new(),
            cas_misses: Counter::new(),
            cas_badval: Counter::new(),
            touch_hits: Counter::new(),
            touch_misses: Counter::new(),
            curr_connections: z(),
            total_connections: z(),
            rejected_connections: z(),
            bytes_read: Counter::new(),
            bytes_written: Counter::new(),
            threads: 0,
            max_connections: 0,
            max_item_size,
            flush_at: z(),
            mask: Mask::NONE,
            db_name: String::new(),
            sid: 1,
            port: 0,
            item_states: ItemStates::new(),
        }
    }
}

impl Shared {
    /// `stats reset`: every request and hit/miss counter back to zero, and
    /// `total_connections` (as memcached does; current connections and items stay).
    pub fn reset_stats(&self) {
        for c in [
            &self.cmd_get,
            &self.cmd_set,
            &self.total_items,
            &self.cmd_touch,
            &self.cmd_flush,
            &self.get_hits,
            &self.get_misses,
            &self.delete_hits,
            &self.delete_misses,
            &self.incr_hits,
            &self.incr_misses,
            &self.decr_hits,
            &self.decr_misses,
            &self.cas_hits,
            &self.cas_misses,
            &self.cas_badval,
            &self.touch_hits,
            &self.touch_misses,
            &self.bytes_read,
            &self.bytes_written,
        ] {
            c.reset();
        }
        for c in self.tt_counts.iter().chain(&self.tt_misses) {
            c.reset();
        }
        self.total_connections.store(0, Relaxed);
    }
}

/// memcached keeps two bits on every item for its anti-stampede meta protocol: *stale*
/// (`md <key> I`, or `ms … I` with an older CAS: the value may still be served, flagged `X`)
/// and *win token sent* (one client was told `W`, "you recache it"; everyone else is told `Z`
/// until the item is written again). Kura's records carry no spare bits, and the state is cache
/// metadata that memcached itself loses on restart and on eviction, so Kura keeps it here, in
/// memory, per server:
///
/// - an entry maps a key to the record version it was recorded for. Every write to a record
///   gives it a new version, so any later modification (set, cas, incr, append, delete,
///   flush, …) leaves the entry describing a version that no longer exists: it is ignored and
///   dropped when next looked at — the state clears itself exactly where memcached's item bits
///   disappear with the replaced item. A touch (`touch`, `gat`, `mg … T`) keeps the version,
///   as memcached keeps the item, so it keeps the state too.
/// - memory is bounded: [`ITEM_STATE_SHARDS`] shards of at most [`ITEM_STATES_PER_SHARD`]
///   entries (16 Ki keys in all, a few MiB at worst with 250-byte keys); when a shard is full
///   its oldest entry is evicted. Losing an entry costs what memcached's eviction of the item
///   costs: a later client may win the recache again, or a stale value is served as fresh.
/// - each shard's lock is held across the read / decide / mark of one meta command, so two
///   clients racing on the same key cannot both be handed `W`.
#[derive(Debug)]
pub struct ItemStates {
    shards: Vec<Mutex<StateShard>>,
}

/// Shards of [`ItemStates`] (and of its lock).
pub const ITEM_STATE_SHARDS: usize = 64;
/// Entries kept per shard before the oldest is evicted.
pub const ITEM_STATES_PER_SHARD: usize = 256;

/// The stale / win-token state of one record version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ItemState {
    /// Marked stale (`X`).
    stale: bool,
    /// A win token (`W`) was handed out (later readers get `Z`).
    token_sent: bool,
}

#[derive(Debug, Default)]
struct StateShard {
    /// key → (record version, state, insertion tick).
    map: HashMap<Vec<u8>, (u64, ItemState, u64)>,
    /// insertion tick → key: the eviction order (oldest first).
    order: BTreeMap<u64, Vec<u8>>,
    tick: u64,
}

impl StateShard {
    /// The state of `key` at record `version` (default: neither stale nor won).
    fn get(&mut self, key: &[u8], version: u64) -> ItemState {
        match self.map.get(key) {
            Some(&(v, st, _)) if v == version => st,
            Some(&(_, _, tick)) => {
                // Recorded for an older version: the record changed since, the state is gone.
                self.map.remove(key);
                self.order.remove(&tick);
                ItemState::default()
            }
            None => ItemState::default(),
        }
    }

    /// Record the state of `key` at record `version` (a default state removes the entry).
    fn set(&mut self, key: &[u8], version: u64, st: ItemState) {
        if let Some((_, _, tick)) = self.map.remove(key) {
            self.order.remove(&tick);
        }
        if st == ItemState::default() {
            return;
        }
        while self.map.len() >= ITEM_STATES_PER_SHARD {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.map.remove(&oldest);
        }
        self.tick += 1;
        self.map.insert(key.to_vec(), (version, st, self.tick));
        self.order.insert(self.tick, key.to_vec());
    }
}

impl ItemStates {
    pub fn new() -> ItemStates {
        ItemStates {
            shards: (0..ITEM_STATE_SHARDS)
                .map(|_| Mutex::new(StateShard::default()))
                .collect(),
        }
    }

    /// The locked shard of `key`.
    fn lock(&self, key: &[u8]) -> MutexGuard<'_, StateShard> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut h);
        let shard = &self.shards[h.finish() as usize % self.shards.len()];
        shard.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Entries held (all shards).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).map.len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for ItemStates {
    fn default() -> Self {
        ItemStates::new()
    }
}

/// What the connection does after a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    Continue,
    Close,
}

/// The absolute expiration time (unix seconds, 0 = never) of a memcached exptime sent at `now`:
/// relative up to 30 days, else a unix time; negative means already expired.
pub fn absolute_expiry(exptime: i64, now: u64) -> u64 {
    match exptime {
        0 => 0,
        e if e < 0 => 1,
        e if e <= RELATIVE_LIMIT => now + e as u64,
        e => e as u64,
    }
}

fn server_error(out: &mut Vec<u8>, e: &Error) {
    out.extend_from_slice(b"SERVER_ERROR ");
    let msg = e.to_string().replace(['\r', '\n'], " ");
    out.extend_from_slice(msg.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Carry out a pending delayed `flush_all` once its time has come.
pub fn flush_if_due(store: &dyn Store, shared: &Shared, now: u64) -> Result<(), Error> {
    let at = shared.flush_at.load(Relaxed);
    if at != 0
        && now >= at
        && shared
            .flush_at
            .compare_exchange(at, 0, Relaxed, Relaxed)
            .is_ok()
    {
        store.vanish()?;
    }
    Ok(())
}

/// The reply to a request the command mask refuses.
pub const REFUSED: &[u8] = b"SERVER_ERROR command refused by the server's mask\r\n";

/// Whether the command mask refuses `req` (see [`crate::mask`]): memcached commands are
/// checked as the Tyrant operations they perform (`delete` is `out`, `add` is `putkeep`, …).
fn masked(mask: Mask, req: &Request<'_>) -> bool {
    let deny = |op| mask.denies(op, Proto::Memcached);
    match req {
        Request::Get { .. } | Request::MetaGet { .. } | Request::MetaDebug { .. } => deny(Op::Get),
        Request::Gat { .. } => deny(Op::Get) || deny(Op::Put),
        Request::Store { mode, .. } => deny(match mode {
            StoreMode::Add => Op::PutKeep,
            StoreMode::Append | StoreMode::Prepend => Op::PutCat,
            StoreMode::Set | StoreMode::Replace | StoreMode::Cas => Op::Put,
        }),
        Request::MetaSet { flags, .. } => {
            deny(match flags.iter().find(|f| f.first() == Some(&b'M')) {
                Some([_, b'E' | b'e', ..]) => Op::PutKeep,
                Some([_, b'A' | b'a' | b'P' | b'p', ..]) => Op::PutCat,
                _ => Op::Put,
            })
        }
        Request::Touch { .. } => deny(Op::Put),
        Request::Delete { .. } | Request::MetaDelete { .. } => deny(Op::Out),
        Request::Arith { .. } | Request::MetaArith { .. } => deny(Op::AddInt),
        Request::FlushAll { .. } => deny(Op::Vanish),
        Request::Stats { .. } => deny(Op::Stat),
        Request::Version | Request::Verbosity { .. } | Request::Quit | Request::MetaNoop => false,
    }
}

/// Whether the client asked for no reply (`noreply`, or the meta `q` flag).
fn noreply(req: &Request<'_>) -> bool {
    match req {
        Request::Store { noreply, .. }
        | Request::Delete { noreply, .. }
        | Request::Arith { noreply, .. }
        | Request::Touch { noreply, .. }
        | Request::FlushAll { noreply, .. }
        | Request::Verbosity { noreply, .. } => *noreply,
        _ => false,
    }
}

/// Execute one request, appending its reply (if any) to `out`.
pub fn execute(
    store: &dyn Store,
    shared: &Shared,
    req: &Request<'_>,
    now: u64,
    out: &mut Out,
) -> Next {
    if !shared.mask.is_empty() && masked(shared.mask, req) {
        if !noreply(req) {
            out.extend_from_slice(REFUSED);
        }
        return Next::Continue;
    }
    if let Err(e) = flush_if_due(store, shared, now) {
        server_error(out, &e);
        return Next::Continue;
    }
    match run(store, shared, req, now, out) {
        Ok(next) => next,
        Err(e) => {
            server_error(out, &e);
            Next::Continue
        }
    }
}

fn run(
    store: &dyn Store,
    shared: &Shared,
    req: &Request<'_>,
    now: u64,
    out: &mut Out,
) -> Result<Next, Error> {
    let quiet = |noreply: bool, out: &mut Vec<u8>, line: &[u8]| {
        if !noreply {
            out.extend_from_slice(line);
        }
    };
    match *req {
        Request::Get { keys, cas } => {
            for key in keys.iter() {
                shared.cmd_get.add(1);
                // Encoded straight from the store's memory, no allocation; a large value in a
                // segment's mapping is not even copied: it is queued for writev by reference.
                let hit = store.view_shared(key, PIN_MIN, &mut |value, meta| {
                    let cas = cas.then_some(meta.version);
                    match value {
                        Shown::Bytes(v) => mc_text::encode_value(out, key, meta.flags, v, cas),
                        Shown::Pinned(p) => {
                            mc_text::encode_value_header(out, key, meta.flags, p.len(), cas);
                            out.push_pinned(p);
                            out.extend_from_slice(b"\r\n");
                        }
                    }
                })?;
                if hit {
                    shared.get_hits.add(1);
                } else {
                    shared.get_misses.add(1);
                }
            }
            out.extend_from_slice(reply::END);
        }
        Request::Gat { exptime, keys, cas } => {
            let expires = absolute_expiry(exptime, now);
            for key in keys.iter() {
                // Counted as memcached counts gat: a touch, not a get.
                shared.cmd_touch.add(1);
                // A touch keeps the flags and the cas: the value is encoded from the store's
                // memory as it is shown, not copied out first, and withdrawn if the touch
                // fails.
                let mark = out.len();
                let mut hit = false;
                let touched = store.accept(key, &mut |cur| match cur {
                    Some(c) => {
                        hit = true;
                        let m = c.meta;
                        mc_text::encode_value(out, key, m.flags, c.value, cas.then_some(m.version));
                        Decision::Touch { expires }
                    }
                    None => Decision::Keep,
                });
                if let Err(e) = touched {
                    out.truncate(mark);
                    return Err(e);
                }
                if hit {
                    shared.touch_hits.add(1);
                } else {
                    shared.touch_misses.add(1);
                }
            }
            out.extend_from_slice(reply::END);
        }
        Request::Store {
            mode,
            key,
            flags,
            exptime,
            data,
            cas,
            noreply,
        } => {
            shared.cmd_set.add(1);
            let expires = absolute_expiry(exptime, now);
            let line: &[u8] = match mode {
                StoreMode::Set => {
                    store.put_with(key, data, flags, expires)?;
                    reply::STORED
                }
                StoreMode::Add => match store.putkeep(key, data, flags, expires)? {
                    Outcome::Stored(_) => reply::STORED,
                    _ => reply::NOT_STORED,
                },
                StoreMode::Replace => match store.replace(key, data, flags, expires)? {
                    Outcome::Stored(_) => reply::STORED,
                    _ => reply::NOT_STORED,
                },
                StoreMode::Append | StoreMode::Prepend => {
                    let front = mode == StoreMode::Prepend;
                    match store.concat(key, data, front, false)? {
                        Some(_) => reply::STORED,
                        None => reply::NOT_STORED,
                    }
                }
                StoreMode::Cas => match store.cas(key, cas, data, flags, expires)? {
                    Outcome::Stored(_) => {
                        shared.cas_hits.add(1);
                        reply::STORED
                    }
                    Outcome::VersionMismatch => {
                        shared.cas_badval.add(1);
                        reply::EXISTS
                    }
                    _ => {
                        shared.cas_misses.add(1);
                        reply::NOT_FOUND
                    }
                },
            };
            if line == reply::STORED {
                shared.total_items.add(1);
            }
            quiet(noreply, out, line);
        }
        Request::Delete { key, noreply } => {
            let line = if store.out(key)? {
                shared.delete_hits.add(1);
                reply::DELETED
            } else {
                shared.delete_misses.add(1);
                reply::NOT_FOUND
            };
            quiet(noreply, out, line);
        }
        Request::Arith {
            key,
            delta,
            decr,
            noreply,
        } => {
            let (hits, misses) = if decr {
                (&shared.decr_hits, &shared.decr_misses)
            } else {
                (&shared.incr_hits, &shared.incr_misses)
            };
            match store.incr_decimal(key, delta, decr) {
                Ok(Some((n, _))) => {
                    hits.add(1);
                    if !noreply {
                        mc_text::encode_number(out, n);
                    }
                }
                Ok(None) => {
                    misses.add(1);
                    quiet(noreply, out, reply::NOT_FOUND);
                }
                Err(Error::NotNumeric) => out.extend_from_slice(reply::NON_NUMERIC),
                Err(e) => return Err(e),
            }
        }
        Request::Touch {
            key,
            exptime,
            noreply,
        } => {
            shared.cmd_touch.add(1);
            let line = match store.touch(key, absolute_expiry(exptime, now))? {
                Some(_) => {
                    shared.touch_hits.add(1);
                    reply::TOUCHED
                }
                None => {
                    shared.touch_misses.add(1);
                    reply::NOT_FOUND
                }
            };
            quiet(noreply, out, line);
        }
        Request::FlushAll { delay, noreply } => {
            shared.cmd_flush.add(1);
            if delay <= 0 {
                shared.flush_at.store(0, Relaxed);
                store.vanish()?;
            } else {
                shared
                    .flush_at
                    .store(absolute_expiry(delay, now).max(1), Relaxed);
            }
            quiet(noreply, out, reply::OK);
        }
        Request::Stats { group } => stats(store, shared, group, now, out),
        Request::Version => {
            out.extend_from_slice(b"VERSION ");
            out.extend_from_slice(shared.version.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Request::Verbosity { noreply, .. } => quiet(noreply, out, reply::OK),
        Request::Quit => return Ok(Next::Close),
        Request::MetaNoop => out.extend_from_slice(b"MN\r\n"),
        Request::MetaGet { key, flags } => meta_get(store, shared, key, flags, now, out)?,
        Request::MetaSet { key, data, flags } => {
            meta_set(store, shared, key, data, flags, now, out)?
        }
        Request::MetaDelete { key, flags } => meta_delete(store, shared, key, flags, now, out)?,
        Request::MetaArith { key, flags } => meta_arith(store, shared, key, flags, now, out)?,
        Request::MetaDebug { key } => match store.get(key)? {
            Some(r) => {
                out.extend_from_slice(b"ME ");
                out.extend_from_slice(key);
                let exp = ttl_left(r.meta.expires, now);
                out.extend_from_slice(
                    format!(
                        " exp={exp} la=0 cas={} fetch=no cls=1 size={}\r\n",
                        r.meta.version,
                        key.len() + r.value.len()
                    )
                    .as_bytes(),
                );
            }
            None => out.extend_from_slice(b"EN\r\n"),
        },
    }
    Ok(Next::Continue)
}

// ----- meta commands -----

/// The argument of the first flag token starting with `c` (e.g. `T60` → `60`).
fn meta_arg<'a>(flags: Keys<'a>, c: u8) -> Option<&'a [u8]> {
    flags.iter().find(|t| t[0] == c).map(|t| &t[1..])
}

fn meta_has(flags: Keys<'_>, c: u8) -> bool {
    flags.iter().any(|t| t == [c])
}

fn meta_num<T: std::str::FromStr>(flags: Keys<'_>, c: u8) -> Result<Option<T>, ()> {
    match meta_arg(flags, c) {
        None => Ok(None),
        Some(a) => std::str::from_utf8(a)
            .ok()
            .and_then(|a| a.parse().ok())
            .map(Some)
            .ok_or(()),
    }
}

/// Seconds left before `expires` (-1: never).
fn ttl_left(expires: u64, now: u64) -> i64 {
    if expires == 0 {
        -1
    } else {
        expires.saturating_sub(now) as i64
    }
}

/// The key of a meta request: base64-decoded when the request has the `b` flag. `None` (the
/// error reply written) when it does not decode; memcached answers `CLIENT_ERROR error decoding
/// key` (and, for ms, skips the data block first — the codec already consumed it).
fn meta_key<'k>(flags: Keys<'_>, key: &'k [u8], out: &mut Vec<u8>) -> Option<Cow<'k, [u8]>> {
    use base64::Engine;
    if !meta_has(flags, b'b') {
        return Some(Cow::Borrowed(key));
    }
    match base64::engine::general_purpose::STANDARD.decode(key) {
        Ok(k) if !k.is_empty() => Some(Cow::Owned(k)),
        _ => {
            meta_bad(out, "error decoding key");
            None
        }
    }
}

/// The return flags a meta request asked for, in the order it asked for them. With `b` the
/// key (`k`) is returned base64-encoded and followed by a `b` flag, as memcached does. Of the
/// flags that show the record (`c`, `f`, `s`, `t`), only those in `shows` are returned: as
/// in memcached 1.6.18, mg shows all four, ma `c` and `t`, ms `c` only.
fn meta_ret(
    out: &mut Vec<u8>,
    flags: Keys<'_>,
    key: &[u8],
    meta: Option<&kura_engine::Meta>,
    size: usize,
    shows: &[u8],
    now: u64,
) {
    for t in flags.iter() {
        let rest = &t[1..];
        let meta = meta.filter(|_| shows.contains(&t[0]));
        match (t[0], meta) {
            (b'k', _) if rest.is_empty() => {
                out.extend_from_slice(b" k");
                if meta_has(flags, b'b') {
                    use base64::Engine;
                    let enc = base64::engine::general_purpose::STANDARD.encode(key);
                    out.extend_from_slice(enc.as_bytes());
                    out.extend_from_slice(b" b");
                } else {
                    out.extend_from_slice(key);
                }
            }
            (b'O', _) => {
                out.extend_from_slice(b" O");
                out.extend_from_slice(rest);
            }
            (b'c', Some(m)) if rest.is_empty() => {
                out.extend_from_slice(b" c");
                kura_proto::push_decimal(out, m.version);
            }
            (b'f', Some(m)) if rest.is_empty() => {
                out.extend_from_slice(b" f");
                kura_proto::push_decimal(out, u64::from(m.flags));
            }
            (b's', Some(_)) if rest.is_empty() => {
                out.extend_from_slice(b" s");
                kura_proto::push_decimal(out, size as u64);
            }
            (b't', Some(m)) if rest.is_empty() => {
                out.extend_from_slice(b" t");
                match ttl_left(m.expires, now) {
                    -1 => out.extend_from_slice(b"-1"),
                    n => kura_proto::push_decimal(out, n as u64),
                }
            }
            _ => {}
        }
    }
}

/// The record flags mg returns.
const MG_SHOWS: &[u8] = b"cfst";

fn meta_bad(out: &mut Vec<u8>, what: &str) {
    out.extend_from_slice(format!("CLIENT_ERROR {what}\r\n").as_bytes());
}

/// `mg`. Besides the return flags: `T` touches, `N<ttl>` creates an empty item on a miss and
/// hands this client the win (`W`), `R<ttl>` hands out the win when the item's remaining TTL is
/// below the token; a win already handed out shows as `Z`, a stale item as `X` (and its first
/// reader wins). `W`, `X` and `Z` follow the requested flags, in memcached's order: `Z X W`.
fn meta_get(
    store: &dyn Store,
    shared: &Shared,
    key: &[u8],
    flags: Keys<'_>,
    now: u64,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    if meta_has(flags, b'h') || meta_has(flags, b'l') {
        // memcached's "fetched before" bit and last access time: Kura's records do not carry
        // them (an on-disk database would have to write on every read), so a client that asks
        // is told plainly rather than answered without them.
        meta_bad(out, "flags h and l are not supported");
        return Ok(());
    }
    let Some(key) = meta_key(flags, key, out) else {
        return Ok(());
    };
    let (Ok(touch), Ok(vivify), Ok(recache)) = (
        meta_num::<i64>(flags, b'T'),
        meta_num::<i64>(flags, b'N'),
        meta_num::<i64>(flags, b'R'),
    ) else {
        meta_bad(out, "bad token in command line format");
        return Ok(());
    };
    shared.cmd_get.add(1);
    let mut states = shared.item_states.lock(&key);
    let mut hit = false;
    if touch.is_some() || vivify.is_some() {
        // The record version before this request changed anything, and whether `N` created it.
        let mut before = 0;
        let mut created = false;
        let mut value = None;
        let meta = store.accept(&key, &mut |cur| match cur {
            Some(c) => {
                value = Some(c.value.to_vec());
                before = c.meta.version;
                created = false;
                match touch {
                    Some(t) => Decision::Touch {
                        expires: absolute_expiry(t, now),
                    },
                    None => Decision::Keep,
                }
            }
            None => match vivify {
                Some(ttl) => {
                    value = Some(Vec::new());
                    created = true;
                    Decision::Put {
                        value: Value::Lent(&[]),
                        flags: 0,
                        expires: absolute_expiry(ttl, now),
                    }
                }
                None => Decision::Keep,
            },
        })?;
        if let Some((value, meta)) = value.zip(meta) {
            hit = true;
            let got = Got {
                value: &value,
                meta,
                before,
                created,
            };
            meta_hit(out, &mut states, &key, flags, got, recache, now);
        }
    } else {
        // A plain read, encoded from the store's memory.
        store.view(&key, &mut |value, meta| {
            hit = true;
            let got = Got {
                value,
                meta,
                before: meta.version,
                created: false,
            };
            meta_hit(out, &mut states, &key, flags, got, recache, now);
        })?;
    }
    drop(states);
    if hit {
        shared.get_hits.add(1);
    } else {
        shared.get_misses.add(1);
        if !meta_has(flags, b'q') {
            out.extend_from_slice(b"EN");
            meta_ret(out, flags, &key, None, 0, b"", now);
            out.extend_from_slice(b"\r\n");
        }
    }
    Ok(())
}

/// A record an mg found: its value and metadata after the request, its version before it, and
/// whether the request created it (`N`).
struct Got<'a> {
    value: &'a [u8],
    meta: kura_engine::Meta,
    before: u64,
    created: bool,
}

/// The reply to an mg that found its record, and the record's new stale / win-token state.
fn meta_hit(
    out: &mut Vec<u8>,
    states: &mut StateShard,
    key: &[u8],
    flags: Keys<'_>,
    got: Got<'_>,
    recache: Option<i64>,
    now: u64,
) {
    let Got {
        value,
        meta,
        before,
        created,
    } = got;
    let st = if created {
        ItemState::default()
    } else {
        states.get(key, before)
    };
    let mut won = created
        || recache.is_some_and(|r| {
            !st.token_sent && meta.expires != 0 && meta.expires < absolute_expiry(r, now)
        });
    let with_value = meta_has(flags, b'v');
    if with_value {
        out.extend_from_slice(b"VA ");
        kura_proto::push_decimal(out, value.len() as u64);
    } else {
        out.extend_from_slice(b"HD");
    }
    meta_ret(out, flags, key, Some(&meta), value.len(), MG_SHOWS, now);
    if st.token_sent {
        out.extend_from_slice(b" Z");
    }
    if st.stale {
        out.extend_from_slice(b" X");
        // A stale item's first reader wins the recache.
        won |= !st.token_sent;
    }
    if won {
        out.extend_from_slice(b" W");
    }
    let after = ItemState {
        stale: st.stale,
        token_sent: st.token_sent || won,
    };
    if after != st || (meta.version != before && after != ItemState::default()) {
        // New state, or our own touch moved the record to a new version.
        states.set(key, meta.version, after);
    }
    out.extend_from_slice(b"\r\n");
    if with_value {
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
}

fn meta_set(
    store: &dyn Store,
    shared: &Shared,
    key: &[u8],
    data: &[u8],
    flags: Keys<'_>,
    now: u64,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    let Some(key) = meta_key(flags, key, out) else {
        return Ok(());
    };
    let key = &*key;
    let (Ok(cflags), Ok(ttl), Ok(cas)) = (
        meta_num::<u32>(flags, b'F'),
        meta_num::<i64>(flags, b'T'),
        meta_num::<u64>(flags, b'C'),
    ) else {
        meta_bad(out, "bad token in command line format");
        return Ok(());
    };
    shared.cmd_set.add(1);
    let (cflags, expires) = (cflags.unwrap_or(0), absolute_expiry(ttl.unwrap_or(0), now));
    let mode = meta_arg(flags, b'M')
        .and_then(|m| m.first().copied())
        .unwrap_or(b'S');
    let outcome: Result<kura_engine::Meta, &[u8]> = match (mode.to_ascii_uppercase(), cas) {
        (b'S', Some(c)) | (b'R', Some(c)) if meta_has(flags, b'I') => {
            match cas_or_stale(store, shared, key, c, data, cflags, expires)? {
                Outcome::Stored(m) => Ok(m),
                Outcome::VersionMismatch => Err(b"EX"),
                _ => Err(b"NF"),
            }
        }
        (b'S', Some(c)) | (b'R', Some(c)) => match store.cas(key, c, data, cflags, expires)? {
            Outcome::Stored(m) => Ok(m),
            Outcome::VersionMismatch => Err(b"EX"),
            _ => Err(b"NF"),
        },
        (b'S', None) => Ok(store.put_with(key, data, cflags, expires)?),
        (b'E', _) => match store.putkeep(key, data, cflags, expires)? {
            Outcome::Stored(m) => Ok(m),
            _ => Err(b"NS"),
        },
        (b'R', None) => match store.replace(key, data, cflags, expires)? {
            Outcome::Stored(m) => Ok(m),
            _ => Err(b"NS"),
        },
        (b'A', _) | (b'P', _) => {
            match store.concat(key, data, mode.eq_ignore_ascii_case(&b'P'), false)? {
                Some(m) => Ok(m),
                None => Err(b"NF"),
            }
        }
        _ => {
            meta_bad(out, "invalid mode for ms");
            return Ok(());
        }
    };
    match outcome {
        Ok(m) => {
            shared.total_items.add(1);
            if !meta_has(flags, b'q') {
                out.extend_from_slice(b"HD");
                meta_ret(out, flags, key, Some(&m), data.len(), b"c", now);
                out.extend_from_slice(b"\r\n");
            }
        }
        Err(code) => {
            out.extend_from_slice(code);
            // memcached shows a refused set's cas as 0.
            let none = kura_engine::Meta::default();
            meta_ret(out, flags, key, Some(&none), 0, b"c", now);
            out.extend_from_slice(b"\r\n");
        }
    }
    Ok(())
}

/// `ms <key> … C<cas> I`: a compare-and-swap that, when `cas` is older than the record's
/// version (Kura's versions only grow), still stores the value but as a stale item: the old
/// expiry is kept, the item is marked stale and a win token already handed out stays handed
/// out (memcached's "set-to-invalid if CAS is older").
fn cas_or_stale(
    store: &dyn Store,
    shared: &Shared,
    key: &[u8],
    cas: u64,
    data: &[u8],
    cflags: u32,
    expires: u64,
) -> Result<Outcome, Error> {
    kura_engine::store::check_sizes(key, data.len())?;
    let mut states = shared.item_states.lock(key);
    // `None` once the visitor decided to store.
    let mut failed = Some(Outcome::NotFound);
    let mut stale_from = None;
    let meta = store.accept(key, &mut |cur| match cur {
        None => {
            failed = Some(Outcome::NotFound);
            Decision::Keep
        }
        Some(c) if cas <= c.meta.version => {
            failed = None;
            let stale = cas != c.meta.version;
            stale_from = stale.then_some(c.meta.version);
            Decision::Put {
                value: Value::Lent(data),
                flags: cflags,
                expires: if stale { c.meta.expires } else { expires },
            }
        }
        Some(_) => {
            failed = Some(Outcome::VersionMismatch);
            Decision::Keep
        }
    })?;
    Ok(match (failed, meta) {
        (None, Some(m)) => {
            if let Some(old) = stale_from {
                let sent = states.get(key, old).token_sent;
                let st = ItemState {
                    stale: true,
                    token_sent: sent,
                };
                states.set(key, m.version, st);
            }
            Outcome::Stored(m)
        }
        (None, None) => Outcome::NotFound,
        (Some(r), _) => r,
    })
}

/// `md`. With `I` the item is not deleted but marked stale (its next reader wins the recache),
/// gets a new CAS and, with `T<ttl>`, a new expiry.
fn meta_delete(
    store: &dyn Store,
    shared: &Shared,
    key: &[u8],
    flags: Keys<'_>,
    now: u64,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    let Some(key) = meta_key(flags, key, out) else {
        return Ok(());
    };
    let key = &*key;
    let (Ok(cas), Ok(ttl)) = (meta_num::<u64>(flags, b'C'), meta_num::<i64>(flags, b'T')) else {
        meta_bad(out, "bad token in command line format");
        return Ok(());
    };
    let outcome = if meta_has(flags, b'I') {
        let mut states = shared.item_states.lock(key);
        let mut result = Outcome::NotFound;
        let meta = store.accept(key, &mut |cur| match cur {
            None => {
                result = Outcome::NotFound;
                Decision::Keep
            }
            Some(c) if cas.is_some_and(|v| v != c.meta.version) => {
                result = Outcome::VersionMismatch;
                Decision::Keep
            }
            Some(c) => {
                result = Outcome::Stored(c.meta);
                // Written again, unchanged but for the expiry, for a new version: memcached's
                // CAS bump (a touch would keep the version).
                Decision::Put {
                    value: Value::copied(c.value),
                    flags: c.meta.flags,
                    expires: ttl.map_or(c.meta.expires, |t| absolute_expiry(t, now)),
                }
            }
        })?;
        match (result, meta) {
            (Outcome::Stored(_), Some(m)) => {
                // Stale, and no win token out yet: the next reader wins.
                let st = ItemState {
                    stale: true,
                    token_sent: false,
                };
                states.set(key, m.version, st);
                if meta_has(flags, b'q') {
                    return Ok(());
                }
                b"HD" as &[u8]
            }
            (Outcome::VersionMismatch, _) => {
                shared.delete_misses.add(1);
                b"EX"
            }
            _ => {
                shared.delete_misses.add(1);
                b"NF"
            }
        }
    } else {
        match store.out_if(key, cas.unwrap_or(0))? {
            Outcome::Deleted => {
                shared.delete_hits.add(1);
                if meta_has(flags, b'q') {
                    return Ok(());
                }
                b"HD" as &[u8]
            }
            Outcome::VersionMismatch => b"EX",
            _ => {
                shared.delete_misses.add(1);
                b"NF"
            }
        }
    };
    out.extend_from_slice(outcome);
    meta_ret(out, flags, key, None, 0, b"", 0);
    out.extend_from_slice(b"\r\n");
    Ok(())
}

fn meta_arith(
    store: &dyn Store,
    shared: &Shared,
    key: &[u8],
    flags: Keys<'_>,
    now: u64,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    let Some(key) = meta_key(flags, key, out) else {
        return Ok(());
    };
    let key = &*key;
    let (Ok(delta), Ok(vivify), Ok(initial), Ok(cas)) = (
        meta_num::<u64>(flags, b'D'),
        meta_num::<i64>(flags, b'N'),
        meta_num::<u64>(flags, b'J'),
        meta_num::<u64>(flags, b'C'),
    ) else {
        meta_bad(out, "bad token in command line format");
        return Ok(());
    };
    let decr = matches!(
        meta_arg(flags, b'M').and_then(|m| m.first().copied()),
        Some(b'D' | b'd' | b'-')
    );
    let (hits, misses) = if decr {
        (&shared.decr_hits, &shared.decr_misses)
    } else {
        (&shared.incr_hits, &shared.incr_misses)
    };
    let result = loop {
        match store.incr_decimal_if(key, delta.unwrap_or(1), decr, cas.unwrap_or(0)) {
            Ok(Counted::Done(n, m)) => {
                hits.add(1);
                break Some((n, m));
            }
            Ok(Counted::VersionMismatch) => {
                out.extend_from_slice(b"EX");
                meta_ret(out, flags, key, None, 0, b"", now);
                out.extend_from_slice(b"\r\n");
                return Ok(());
            }
            Ok(Counted::NotFound) => {
                misses.add(1);
                let Some(ttl) = vivify else { break None };
                let n = initial.unwrap_or(0);
                let v = n.to_string();
                if let Outcome::Stored(m) =
                    store.putkeep(key, v.as_bytes(), 0, absolute_expiry(ttl, now))?
                {
                    break Some((n, m));
                }
            }
            Err(Error::NotNumeric) => {
                out.extend_from_slice(reply::NON_NUMERIC);
                return Ok(());
            }
            Err(e) => return Err(e),
        }
    };
    match result {
        Some((n, m)) => {
            let text = Value::decimal(n);
            if meta_has(flags, b'q') {
                // memcached hides a successful ma under q, its value too.
            } else if meta_has(flags, b'v') {
                out.extend_from_slice(b"VA ");
                kura_proto::push_decimal(out, text.len() as u64);
                meta_ret(out, flags, key, Some(&m), text.len(), b"ct", now);
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(&text);
                out.extend_from_slice(b"\r\n");
            } else {
                out.extend_from_slice(b"HD");
                meta_ret(out, flags, key, Some(&m), text.len(), b"ct", now);
                out.extend_from_slice(b"\r\n");
            }
        }
        None => {
            out.extend_from_slice(b"NF");
            meta_ret(out, flags, key, None, 0, b"", now);
            out.extend_from_slice(b"\r\n");
        }
    }
    Ok(())
}

fn stats(store: &dyn Store, shared: &Shared, group: Option<&[u8]>, now: u64, out: &mut Vec<u8>) {
    if group == Some(&b"reset"[..]) {
        shared.reset_stats();
        out.extend_from_slice(b"RESET\r\n");
        return;
    }
    match stat_pairs(store, shared, group, now) {
        Some(pairs) => {
            for (name, value) in pairs {
                mc_text::encode_stat(out, &name, &value);
            }
            out.extend_from_slice(reply::END);
        }
        // Like memcached: an unknown group (`stats noreply` included) is an error.
        None => out.extend_from_slice(b"ERROR\r\n"),
    }
}

/// The process's user and system CPU time, as memcached prints them (`seconds.micros`).
fn rusage() -> (String, String) {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) };
    let t = |v: libc::timeval| format!("{}.{:06}", v.tv_sec, v.tv_usec);
    (t(r.ru_utime), t(r.ru_stime))
}

/// memcached's memory limit: the store's `capsiz` when it is a bounded cache, else 0 (no limit:
/// an on-disk or unbounded database grows until the disk or memory is full).
fn limit_maxbytes(store: &dyn Store) -> u64 {
    store
        .describe()
        .iter()
        .find(|(k, _)| k == "capsiz")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// The statistics of a `stats [group]` request, as (name, value) pairs; `None` for a group
/// memcached does not know (`reset` is not a group of pairs: the callers handle it).
pub fn stat_pairs(
    store: &dyn Store,
    shared: &Shared,
    group: Option<&[u8]>,
    now: u64,
) -> Option<Vec<(String, String)>> {
    let mut v: Vec<(String, String)> = Vec::new();
    let mut s = |n: &str, x: &dyn std::fmt::Display| v.push((n.to_string(), x.to_string()));
    let c = |a: &Counter| a.get();
    match group {
        None => {
            s("pid", &std::process::id());
            s("uptime", &now.saturating_sub(shared.started));
            s("time", &now);
            s("version", &shared.version);
            s("pointer_size", &(8 * std::mem::size_of::<usize>()));
            let (user, system) = rusage();
            s("rusage_user", &user);
            s("rusage_system", &system);
            s("max_connections", &shared.max_connections);
            s("curr_connections", &shared.curr_connections.load(Relaxed));
            s("total_connections", &shared.total_connections.load(Relaxed));
            s(
                "rejected_connections",
                &shared.rejected_connections.load(Relaxed),
            );
            s("cmd_get", &c(&shared.cmd_get));
            s("cmd_set", &c(&shared.cmd_set));
            s("cmd_flush", &c(&shared.cmd_flush));
            s("cmd_touch", &c(&shared.cmd_touch));
            s("get_hits", &c(&shared.get_hits));
            s("get_misses", &c(&shared.get_misses));
            s("delete_misses", &c(&shared.delete_misses));
            s("delete_hits", &c(&shared.delete_hits));
            s("incr_misses", &c(&shared.incr_misses));
            s("incr_hits", &c(&shared.incr_hits));
            s("decr_misses", &c(&shared.decr_misses));
            s("decr_hits", &c(&shared.decr_hits));
            s("cas_misses", &c(&shared.cas_misses));
            s("cas_hits", &c(&shared.cas_hits));
            s("cas_badval", &c(&shared.cas_badval));
            s("touch_hits", &c(&shared.touch_hits));
            s("touch_misses", &c(&shared.touch_misses));
            s("bytes_read", &c(&shared.bytes_read));
            s("bytes_written", &c(&shared.bytes_written));
            s("threads", &shared.threads);
            s("curr_items", &store.count());
            s("total_items", &c(&shared.total_items));
            s("bytes", &store.size());
            s("limit_maxbytes", &limit_maxbytes(store));
            for (name, x) in store.counters() {
                s(name, &x);
            }
        }
        Some(b"settings") => {
            s("maxconns", &shared.max_connections);
            s("tcpport", &shared.port);
            s("num_threads", &shared.threads);
            s("item_size_max", &shared.max_item_size);
            for (k, x) in store.describe() {
                s(&format!("db_{k}"), &x);
            }
        }
        // No slab allocator: the item and slab groups are empty, as on a fresh memcached.
        Some(b"items" | b"slabs" | b"sizes" | b"conns") => {}
        Some(_) => return None,
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kura_proto::mc_text::{decode, Decoded, Limits};

    /// Run a whole client transcript through the codec and the executor.
    fn session(store: &dyn Store, shared: &Shared, input: &[u8], now: u64) -> String {
        let mut out = Out::default();
        let mut pos = 0;
        let limits = Limits::default();
        while pos < input.len() {
            match decode(&input[pos..], &limits) {
                Ok(Decoded::Complete { request, consumed }) => {
                    pos += consumed;
                    if execute(store, shared, &request, now, &mut out) == Next::Close {
                        break;
                    }
                }
                Ok(Decoded::Incomplete) => break,
                Err(e) => {
                    e.encode(&mut out);
                    pos += e.consumed;
                }
            }
        }
        String::from_utf8_lossy(&out.contiguous()).into_owned()
    }

    fn kinds() -> Vec<std::sync::Arc<dyn Store>> {
        vec![
            kura_engine::open("*").unwrap(),
            kura_engine::open("+").unwrap(),
        ]
    }

    #[test]
    fn the_mask_refuses_by_operation() {
        let db = kura_engine::open("*").unwrap();
        let mut sh = Shared::new(1000, 1 << 20);
        sh.mask = Mask::NONE.mask("out,vanish").unwrap();
        let r = session(
            &*db,
            &sh,
            b"set a 0 0 1\r\nx\r\ndelete a\r\ndelete a noreply\r\nmd a\r\nflush_all\r\nget a\r\n",
            1000,
        );
        let refused = std::str::from_utf8(REFUSED).unwrap();
        assert_eq!(
            r,
            format!("STORED\r\n{refused}{refused}{refused}VALUE a 0 1\r\nx\r\nEND\r\n")
        );
        sh.mask = Mask::NONE.mask("allwrite").unwrap();
        let r = session(
            &*db,
            &sh,
            b"set b 0 0 1\r\ny\r\nincr a 1\r\nms b 1 MA\r\nz\r\nget a b\r\nversion\r\n",
            1000,
        );
        assert!(
            r.starts_with(&format!(
                "{refused}{refused}{refused}VALUE a 0 1\r\nx\r\nEND\r\nVERSION "
            )),
            "{r}"
        );
        sh.mask = Mask::NONE.mask("allmc").unwrap();
        assert_eq!(session(&*db, &sh, b"get a\r\n", 1000), refused);
        // Another protocol's group leaves memcached alone.
        sh.mask = Mask::NONE.mask("allorg,allhttp").unwrap();
        assert_eq!(
            session(&*db, &sh, b"get a\r\n", 1000),
            "VALUE a 0 1\r\nx\r\nEND\r\n"
        );
    }

    #[test]
    fn storage_retrieval_and_cas() {
        for db in kinds() {
            let sh = Shared::new(1000, 1 << 20);
            let r = session(&*db, &sh, b"set a 5 0 3\r\nabc\r\nget a b\r\nadd a 0 0 1\r\nx\r\nadd b 0 0 1\r\ny\r\nreplace c 0 0 1\r\nz\r\nappend a 0 0 2\r\nde\r\nprepend a 0 0 1\r\n_\r\nappend nope 0 0 1\r\nx\r\nget a\r\n", 1000);
            assert_eq!(
                r,
                "STORED\r\nVALUE a 5 3\r\nabc\r\nEND\r\nNOT_STORED\r\nSTORED\r\nNOT_STORED\r\nSTORED\r\nSTORED\r\nNOT_STORED\r\nVALUE a 5 6\r\n_abcde\r\nEND\r\n"
            );
            // gets → cas
            let r = session(&*db, &sh, b"gets b\r\n", 1000);
            let cas: u64 = r.split_whitespace().nth(4).unwrap().parse().unwrap();
            let r = session(
                &*db,
                &sh,
                format!(
                    "cas b 0 0 1 {}\r\nZ\r\ncas b 0 0 1 {cas}\r\nW\r\ncas nope 0 0 1 1\r\nW\r\n",
                    cas + 1000
                )
                .as_bytes(),
                1000,
            );
            assert_eq!(r, "EXISTS\r\nSTORED\r\nNOT_FOUND\r\n");
        }
    }

    #[test]
    fn arithmetic_delete_touch_and_noreply() {
        for db in kinds() {
            let sh = Shared::new(0, 1 << 20);
            let r = session(&*db, &sh, b"set n 0 0 20\r\n18446744073709551615\r\nincr n 2\r\ndecr n 5\r\nincr nope 1\r\nset s 0 0 1\r\nx\r\nincr s 1\r\ndelete n\r\ndelete n\r\ntouch s 100\r\ntouch nope 1\r\nset q 0 0 1 noreply\r\nq\r\ndelete q noreply\r\nget q\r\n", 50);
            assert_eq!(r, "STORED\r\n1\r\n0\r\nNOT_FOUND\r\nSTORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\nDELETED\r\nNOT_FOUND\r\nTOUCHED\r\nNOT_FOUND\r\nEND\r\n");
        }
    }

    #[test]
    fn expiration_and_flush() {
        for db in kinds() {
            let sh = Shared::new(0, 1 << 20);
            // Relative exptime 10 at t=1000 expires at 1010; negative is already expired.
            session(
                &*db,
                &sh,
                b"set e 0 10 1\r\nx\r\nset g 0 -1 1\r\nx\r\n",
                1000,
            );
            let now = kura_engine::store::now_secs();
            assert_eq!(absolute_expiry(10, now), now + 10);
            assert_eq!(
                absolute_expiry(RELATIVE_LIMIT + 1, now),
                RELATIVE_LIMIT as u64 + 1
            );
            let r = session(&*db, &sh, b"get g\r\n", now);
            assert_eq!(r, "END\r\n");
            // gat returns the value and sets the new expiry.
            session(&*db, &sh, b"set t 3 0 2\r\nhi\r\n", now);
            let r = session(&*db, &sh, b"gat 100 t\r\n", now);
            assert_eq!(r, "VALUE t 3 2\r\nhi\r\nEND\r\n");
            assert_eq!(db.get(b"t").unwrap().unwrap().meta.expires, now + 100);
            // flush_all with a delay takes effect when due.
            let r = session(&*db, &sh, b"flush_all 5\r\nget t\r\n", now);
            assert_eq!(r, "OK\r\nVALUE t 3 2\r\nhi\r\nEND\r\n");
            let r = session(&*db, &sh, b"get t\r\n", now + 6);
            assert_eq!(r, "END\r\n");
            let r = session(
                &*db,
                &sh,
                b"set u 0 0 1\r\nx\r\nflush_all\r\nget u\r\n",
                now + 7,
            );
            assert_eq!(r, "STORED\r\nOK\r\nEND\r\n");
        }
    }

    #[test]
    fn meta_commands() {
        for db in kinds() {
            let sh = Shared::new(0, 1 << 20);
            let now = kura_engine::store::now_secs();
            let r = session(&*db, &sh, b"ms k 5 F7 T100\r\nhello\r\nmg k v f s t k O9\r\nmg nope v\r\nmg nope v q\r\nmn\r\n", now);
            assert_eq!(r, "HD\r\nVA 5 f7 s5 t100 kk O9\r\nhello\r\nEN\r\nMN\r\n");
            let r = session(&*db, &sh, b"mg k c\r\n", now);
            let cas: u64 = r.trim().strip_prefix("HD c").unwrap().parse().unwrap();
            let r = session(&*db, &sh, format!("ms k 1 C{}\r\nx\r\nms k 1 C{cas}\r\ny\r\nms k 1 ME\r\nz\r\nms k 2 MA\r\n!!\r\nms no 1 MR\r\nz\r\nms no 1 MA\r\nz\r\nmg k v\r\n", cas + 9).as_bytes(), now);
            assert_eq!(r, "EX\r\nHD\r\nNS\r\nHD\r\nNS\r\nNF\r\nVA 3\r\ny!!\r\n");
            let r = session(&*db, &sh, b"ma c v\r\nma c v N0 J10\r\nma c v D5\r\nma c v MD D100\r\nma k\r\nmd c q\r\nmd c\r\nme k\r\nme none\r\n", now);
            assert!(r.starts_with("NF\r\nVA 2\r\n10\r\nVA 2\r\n15\r\nVA 1\r\n0\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\nNF\r\nME k exp=-1 la=0 cas="), "{r}");
            assert!(r.ends_with(" fetch=no cls=1 size=4\r\nEN\r\n"), "{r}");
            // ma with C: only while the counter's version is that one.
            let r = session(&*db, &sh, b"set c 0 0 1\r\n5\r\nmg c c\r\n", now);
            let cas = flag_num(r.strip_prefix("STORED\r\n").unwrap(), 'c');
            let req = format!(
                "ma c v C{}\r\nma c v C{cas}\r\nma c C1 q\r\nma none C{cas}\r\nma c v q\r\nmn\r\n",
                cas + 1
            );
            let unsupported = "CLIENT_ERROR flags h and l are not supported\r\n";
            for (input, want) in [
                (
                    req.as_bytes(),
                    "EX\r\nVA 1\r\n6\r\nEX\r\nNF\r\nMN\r\n".to_string(),
                ),
                // ms shows the cas alone (0 when refused), ma the cas and the TTL (as memcached
                // 1.6.18 does).
                (
                    b"ms a 1 k O1 f s t T50\r\nx\r\nms a 1 ME c k\r\nx\r\nma c t f s k\r\n",
                    "HD ka O1\r\nNS c0 ka\r\nHD t-1 kc\r\n".to_string(),
                ),
                // Flags memcached knows but Kura does not keep: a plain error.
                (
                    b"mg c v h\r\nmg c l\r\nmg c v Y\r\nmg c v\r\n",
                    format!("{unsupported}{unsupported}CLIENT_ERROR invalid flag\r\nVA 1\r\n8\r\n"),
                ),
            ] {
                assert_eq!(session(&*db, &sh, input, now), want);
            }
        }
    }

    /// The number after flag `c` in the first line of a meta reply (e.g. `c` of `HD c12 W`).
    fn flag_num(reply: &str, c: char) -> u64 {
        let line = reply.lines().next().unwrap();
        let tok = line.split(' ').skip(1).find(|t| t.starts_with(c)).unwrap();
        tok[1..].parse().unwrap_or_else(|_| panic!("{reply}"))
    }

    #[test]
    fn meta_base64_keys() {
        // 44OG44K544OI is "テスト" (tesuto in katakana), memcached's own test key.
        let tesuto = "テスト".as_bytes();
        for db in kinds() {
            let sh = Shared::new(0, 1 << 20);
            let now = kura_engine::store::now_secs();
            let r = session(
                &*db,
                &sh,
                b"ms 44OG44K544OI 2 b k\r\npo\r\nmg 44OG44K544OI v\r\nmg 44OG44K544OI b v k s\r\n",
                now,
            );
            assert_eq!(
                r,
                "HD k44OG44K544OI b\r\nEN\r\nVA 2 k44OG44K544OI b s2\r\npo\r\n"
            );
            // The store holds the decoded key.
            assert_eq!(db.get(tesuto).unwrap().unwrap().value, b"po");
            assert!(db.get(b"44OG44K544OI").unwrap().is_none());
            // ma and md decode too; a miss returns the key encoded as well.
            let r = session(&*db, &sh, b"ma bnVt b N0 J5 v k\r\nma bnVt b v\r\nmd 44OG44K544OI b q\r\nmg 44OG44K544OI b k v\r\nmd 44OG44K544OI b k O1\r\n", now);
            assert_eq!(
                r,
                "VA 1 kbnVt b\r\n5\r\nVA 1\r\n6\r\nEN k44OG44K544OI b\r\nNF k44OG44K544OI b O1\r\n"
            );
            assert_eq!(db.get(b"num").unwrap().unwrap().value, b"6");
            // Not base64: memcached's error, and ms skips its data block first.
            let r = session(
                &*db,
                &sh,
                b"mg a*b b v\r\nms !!!! 2 b\r\nxx\r\nmd Zm9 b\r\nma ==== b\r\nmn\r\n",
                now,
            );
            let e = "CLIENT_ERROR error decoding key\r\n";
            assert_eq!(r, format!("{e}{e}{e}{e}MN\r\n"));
        }
    }

    #[test]
    fn meta_vivify_win_then_token_sent_then_normal_hit() {
        for db in kinds() {
            let sh = Shared::new(0, 1 << 20);
            let now = kura_engine::store::now_secs();
            // Pipelined: the first client creates the empty item and wins, the second sees Z.
            let r = session(
                &*db,
                &sh,
                b"mg needwin s c v N30 t\r\nmg needwin s t v N30\r\nmg needwin s\r\n",
                now,
            );
            let cas = flag_num(&r, 'c');
            assert_eq!(
                r,
                format!("VA 0 s0 c{cas} t30 W\r\n\r\nVA 0 s0 t30 Z\r\n\r\nHD s0 Z\r\n")
            );
            assert_eq!(sh.get_hits.get(), 3);
            // A wrong CAS fails; the winner's CAS store succeeds and the item is normal again.
            let r = session(
                &*db,
                &sh,
                format!("ms needwin 2 C{} T120\r\nnu\r\nms needwin 2 C{cas} T120\r\nmu\r\nmg needwin s k t v N30\r\n", cas + 5000).as_bytes(),
                now,
            );
            assert_eq!(r, "EX\r\nHD\r\nVA 2 s2 kneedwin t120\r\nmu\r\n");
            // q does not hide a vivified hit (memcached: the miss returns data anyway).
            let r = session(&*db, &sh, b"mg quietautov s N30 t q\r\nmn\r\n", now);
            assert_eq!(r, "HD s0 t30 W\r\nMN\r\n");
            // Any other write clears the token: a plain set, then a normal hit.
            let r = session(
                &*db,
                &sh,
                b"mg quietautov s\r\nset quietautov 0 0 1\r\nx\r\nmg quietautov s v\r\n",
                now,
            );
            assert_eq!(r, "HD s0 Z\r\nSTORED\r\nVA 1 s1\r\nx\r\n");
        }
    }

    #[test]
    fn meta_recache_when_ttl_is_low() {
        for db in kinds() {
            let sh = Shared::new(0, 1 << 20);
            let now = kura_engine::store::now_secs();
            let r = session(
                &*db,
                &sh,
                b"ms rc 2 T120\r\nmu\r\nmg rc v R30\r\nmg rc c v R130\r\nmg rc v R130\r\nset forever 0 0 1\r\nf\r\nmg forever R130\r\n",
                now,
            );
            let cas = flag_num(&r["HD\r\nVA 2\r\nmu\r\n".len()..], 'c');
            // TTL 120 is not below 30: no win; below 130: the first wins, the next sees Z; an
            // item that never expires never triggers R.
            assert_eq!(
                r,
                format!(
                    "HD\r\nVA 2\r\nmu\r\nVA 2 c{cas} W\r\nmu\r\nVA 2 Z\r\nmu\r\nSTORED\r\nHD\r\n"
                )
            );
            let r = session(
                &*db,
                &sh,
                format!("ms rc 4 C{cas} T300\r\nzuuu\r\nmg rc s t v R130\r\n").as_bytes(),
                now,
            );
            assert_eq!(r, "HD\r\nVA 4 s4 t300\r\nzuuu\r\n");
        }
    }

    #[test]
    fn meta_invalidate_serve_stale_and_revalidate() {
        for db in kinds() {
            let sh = Shared::new(0, 1 << 20);
            let now = kura_engine::store::now_secs();
            let r = session(
                &*db,
                &sh,
                b"set toinv 0 0 3\r\nmoo\r\nmg toinv s v\r\nmd toinv I T30\r\nmg toinv s t c v\r\n",
                now,
            );
            let tail = "STORED\r\nVA 3 s3\r\nmoo\r\nHD\r\n";
            assert!(r.starts_with(tail), "{r}");
            let cas = flag_num(&r[tail.len()..], 'c');
            // Marked stale (not deleted), TTL lowered, CAS bumped; the first reader wins.
            assert_eq!(
                &r[tail.len()..],
                format!("VA 3 s3 t30 c{cas} X W\r\nmoo\r\n")
            );
            assert_eq!(sh.delete_hits.get(), 0);
            // A CAS that is merely old fails without I; with I it stores, but stays stale,
            // keeps its TTL and the token already sent.
            let r = session(
                &*db,
                &sh,
                b"ms toinv 1 T90 C0\r\nf\r\nms toinv 1 I T90 C1\r\nf\r\nmg toinv s t c v\r\n",
                now,
            );
            let tail = "EX\r\nHD\r\n";
            assert!(r.starts_with(tail), "{r}");
            let cas2 = flag_num(&r[tail.len()..], 'c');
            assert!(cas2 > cas);
            assert_eq!(
                &r[tail.len()..],
                format!("VA 1 s1 t30 c{cas2} Z X\r\nf\r\n")
            );
            // A newer CAS than the item's fails even with I.
            let r = session(
                &*db,
                &sh,
                format!("ms toinv 1 I C{}\r\nz\r\n", cas2 + 1000).as_bytes(),
                now,
            );
            assert_eq!(r, "EX\r\n");
            // The right CAS revalidates: no stale, win or token flags, new TTL and CAS.
            let r = session(
                &*db,
                &sh,
                format!("ms toinv 1 T90 C{cas2}\r\ng\r\nmg toinv s t v\r\n").as_bytes(),
                now,
            );
            assert_eq!(r, "HD\r\nVA 1 s1 t90\r\ng\r\n");
            // md I: CAS mismatch, miss, quiet; a touch by mg carries the state to the new
            // version, a plain delete removes the item.
            let r = session(
                &*db,
                &sh,
                b"md toinv I C1\r\nmd nope I k\r\nmd toinv I q\r\nmg toinv T60 t\r\nmg toinv t\r\nmd toinv\r\nmg toinv v\r\n",
                now,
            );
            assert_eq!(
                r,
                "EX\r\nNF knope\r\nHD t60 X W\r\nHD t60 Z X\r\nHD\r\nEN\r\n"
            );
            assert!(sh.item_states.len() <= 1);
        }
    }

    #[test]
    fn item_states_are_bounded_and_cleared_by_new_versions() {
        let mut sh = StateShard::default();
        let won = ItemState {
            stale: false,
            token_sent: true,
        };
        sh.set(b"k", 5, won);
        assert_eq!(sh.get(b"k", 5), won);
        // Another version of the record: the state is gone, and the entry dropped.
        assert_eq!(sh.get(b"k", 6), ItemState::default());
        assert!(sh.map.is_empty() && sh.order.is_empty());
        // Setting the default state removes the entry.
        sh.set(b"k", 7, won);
        sh.set(b"k", 7, ItemState::default());
        assert!(sh.map.is_empty() && sh.order.is_empty());
        // Full: the oldest entries go first; updating an entry makes it young again.
        for i in 0..ITEM_STATES_PER_SHARD + 10 {
            sh.set(format!("k{i}").as_bytes(), 1, won);
            if i == 20 {
                sh.set(b"k0", 2, won);
            }
        }
        assert_eq!(sh.map.len(), ITEM_STATES_PER_SHARD);
        assert_eq!(sh.order.len(), ITEM_STATES_PER_SHARD);
        assert_eq!(sh.get(b"k1", 1), ItemState::default());
        assert_eq!(sh.get(b"k0", 2), won);
        assert_eq!(
            sh.get(format!("k{}", ITEM_STATES_PER_SHARD + 9).as_bytes(), 1),
            won
        );
        // The whole table stays within its shards' bounds.
        let t = ItemStates::new();
        for i in 0..ITEM_STATE_SHARDS * ITEM_STATES_PER_SHARD * 2 {
            t.lock(format!("x{i}").as_bytes())
                .set(format!("x{i}").as_bytes(), 1, won);
        }
        assert!(t.len() <= ITEM_STATE_SHARDS * ITEM_STATES_PER_SHARD);
    }

    /// touch, gat and gats keep an item's cas unique, as memcached does: a `cas` with the
    /// unique read before them still stores.
    #[test]
    fn touch_and_gat_keep_the_cas_unique() {
        for name in ["*", "+"] {
            let db = kura_engine::open(name).unwrap();
            let now = kura_engine::store::now_secs();
            let sh = Shared::new(now, 1 << 20);
            let r = session(&*db, &sh, b"set k 0 0 1\r\na\r\ngets k\r\n", now);
            let unique = r
                .trim_end()
                .lines()
                .nth(1)
                .unwrap()
                .rsplit(' ')
                .next()
                .unwrap();
            let unique = unique.to_string();
            let r = session(
                &*db,
                &sh,
                b"touch k 100\r\ngat 200 k\r\ngats 300 k\r\n",
                now,
            );
            assert!(r.contains(&format!("VALUE k 0 1 {unique}\r\n")), "{r}");
            let cas = format!("cas k 0 0 1 {unique}\r\nb\r\n");
            assert_eq!(session(&*db, &sh, cas.as_bytes(), 10), "STORED\r\n");
        }
    }

    /// gat encodes the value before the touch is written: when the touch fails (a write error
    /// injected after the store showed the record), the client gets the error alone.
    #[test]
    fn a_gat_whose_touch_fails_sends_only_the_error() {
        let db = crate::failing::FailingWrites(kura_engine::open("*").unwrap());
        db.0.put(b"k", b"v").unwrap();
        let sh = Shared::new(0, 1 << 20);
        let r = session(&db, &sh, b"gat 100 k\r\nget k\r\n", 10);
        let (first, rest) = r.split_once("\r\n").unwrap();
        assert!(first.starts_with("SERVER_ERROR "), "{r}");
        assert_eq!(rest, "VALUE k 0 1\r\nv\r\nEND\r\n");
    }

    #[test]
    fn stats_version_quit_and_errors() {
        let db = kura_engine::open("*").unwrap();
        let mut sh = Shared::new(0, 1 << 20);
        (sh.threads, sh.max_connections, sh.port) = (3, 77, 1978);
        sh.bytes_read.add(5);
        let r = session(
            &*db,
            &sh,
            b"set a 0 0 1\r\nx\r\nadd a 0 0 1\r\ny\r\nappend a 0 0 1\r\nz\r\nms b 1\r\nw\r\nmd b\r\nget a zz\r\nset a 0 0 1\r\nx\r\nstats\r\n",
            10,
        );
        for field in [
            // set, append, ms, set: the refused add is not an item.
            "STAT total_items 4\r\n",
            "STAT limit_maxbytes 0\r\n",
            "STAT threads 3\r\n",
            "STAT max_connections 77\r\n",
            "STAT bytes_read 5\r\n",
            "STAT bytes_written 0\r\n",
            "STAT rejected_connections 0\r\n",
            "STAT rusage_user ",
            "STAT rusage_system ",
        ] {
            assert!(r.contains(field), "{field} missing: {r}");
        }
        assert!(
            r.contains("STAT get_hits 1\r\n") && r.contains("STAT get_misses 1\r\n"),
            "{r}"
        );
        assert!(
            r.contains("STAT curr_items 1\r\n") && r.ends_with("END\r\n"),
            "{r}"
        );
        let r = session(
            &*db,
            &sh,
            b"stats settings\r\nstats items\r\nversion\r\nverbosity 1\r\n",
            10,
        );
        assert!(r.contains("STAT item_size_max 1048576\r\n"), "{r}");
        for field in [
            "STAT maxconns 77\r\n",
            "STAT tcpport 1978\r\n",
            "STAT num_threads 3\r\n",
        ] {
            assert!(r.contains(field), "{field} missing: {r}");
        }
        assert!(r.contains("END\r\nEND\r\nVERSION "), "{r}");
        assert!(r.ends_with("OK\r\n"));
        let r = session(&*db, &sh, b"stats reset\r\nget a\r\nstats\r\n", 10);
        assert!(r.starts_with("RESET\r\nVALUE a 0 1\r\nx\r\nEND\r\n"), "{r}");
        assert!(
            r.contains("STAT cmd_get 1\r\n")
                && r.contains("STAT get_hits 1\r\n")
                && r.contains("STAT get_misses 0\r\n")
                && r.contains("STAT curr_items 1\r\n"),
            "{r}"
        );
        let r = session(
            &*db,
            &sh,
            b"bogus\r\nset k 0 0 2000000\r\nquit\r\nget a\r\n",
            10,
        );
        assert_eq!(r, "ERROR\r\nSERVER_ERROR object too large for cache\r\n");
        // A bounded cache reports its byte limit as memcached reports `-m`.
        let db = kura_engine::open("*#capsiz=1000000").unwrap();
        let r = session(&*db, &sh, b"stats\r\n", 10);
        assert!(r.contains("STAT limit_maxbytes 1000000\r\n"), "{r}");
    }
}
