//! memcached's helpers and per-server state, shared by its text (`mc_exec`), meta (`mc_meta`),
//! binary (`mc_bin_exec`) and statistics (`mc_stats`) modules: expiration times, error
//! replies, append within the size limits, the meta commands' item states, the `stats
//! detail` prefixes, and [`McState`], what a server keeps for memcached alone. A leaf: it
//! uses no other module of the server but the last-use table (`mc_access`, a leaf too).

use crate::mc_access::Access;
use kura_engine::counter::Counter;
use kura_engine::{Error, MemcachedOps, Outcome, Store};
use kura_proto::mc_text::{item_size, reply};
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};

/// What a server keeps for memcached alone: its own counters, the per-item state of the meta
/// commands, the last-use table, `stats detail`, and the settings `stats settings` shows. (The
/// counters every protocol shares, `cmd_get`, `get_hits`, …, are in `context::Shared`.)
#[derive(Debug)]
pub struct McState {
    /// Meta commands received (memcached's `cmd_meta`).
    pub cmd_meta: Counter,
    /// Values stored by the memcached storage commands (memcached's `total_items`).
    pub total_items: Counter,
    pub cmd_touch: Counter,
    pub cmd_flush: Counter,
    pub incr_hits: Counter,
    pub incr_misses: Counter,
    pub decr_hits: Counter,
    pub decr_misses: Counter,
    pub cas_hits: Counter,
    pub cas_misses: Counter,
    pub cas_badval: Counter,
    pub touch_hits: Counter,
    pub touch_misses: Counter,
    /// Storage commands refused as too large.
    pub store_too_large: Counter,
    /// `verbosity <level>` (memcached keeps at most 2); the log does not change.
    pub verbosity: AtomicU32,
    /// `slabs automove <level>` and `slabs automove ratio <r>` (the bits of an f64), shown by
    /// `stats settings`; Kura has no slabs to move.
    pub slab_automove: AtomicU32,
    pub slab_automove_ratio: AtomicU64,
    /// The per-item stale / win-token bits of the meta commands (see [`ItemStates`]).
    pub item_states: ItemStates,
    /// Last use and fetched bit of items (`mg … h l`, `me`, metadump), kept once asked for.
    pub access: Access,
    /// `stats detail` counters.
    pub detail: PrefixStats,
}

impl McState {
    pub fn new() -> McState {
        McState {
            cmd_meta: Counter::new(),
            total_items: Counter::new(),
            cmd_touch: Counter::new(),
            cmd_flush: Counter::new(),
            incr_hits: Counter::new(),
            incr_misses: Counter::new(),
            decr_hits: Counter::new(),
            decr_misses: Counter::new(),
            cas_hits: Counter::new(),
            cas_misses: Counter::new(),
            cas_badval: Counter::new(),
            touch_hits: Counter::new(),
            touch_misses: Counter::new(),
            store_too_large: Counter::new(),
            verbosity: AtomicU32::new(0),
            slab_automove: AtomicU32::new(1),
            slab_automove_ratio: AtomicU64::new(0.8f64.to_bits()),
            item_states: ItemStates::new(),
            access: Access::new(),
            detail: PrefixStats::default(),
        }
    }

    /// `stats reset`: memcached's own counters and the `stats detail` prefixes.
    pub fn reset_stats(&self) {
        for c in [
            &self.cmd_meta,
            &self.total_items,
            &self.cmd_touch,
            &self.cmd_flush,
            &self.incr_hits,
            &self.incr_misses,
            &self.decr_hits,
            &self.decr_misses,
            &self.cas_hits,
            &self.cas_misses,
            &self.cas_badval,
            &self.touch_hits,
            &self.touch_misses,
            &self.store_too_large,
        ] {
            c.reset();
        }
        self.detail.clear();
    }

    /// A memcached read of `key`: `stats detail` and the last-use table, when they are on.
    #[inline]
    pub fn note_get(&self, key: &[u8], hit: bool, now: u64) {
        self.detail.record(key, Did::Get { hit });
        if hit {
            self.access.fetched(key, now);
        }
    }

    /// A memcached write of `key`.
    #[inline]
    pub fn note_set(&self, key: &[u8], now: u64) {
        self.detail.record(key, Did::Set);
        self.access.wrote(key, now);
    }
}

impl Default for McState {
    fn default() -> Self {
        McState::new()
    }
}

/// memcached's boundary between relative and absolute expiration times (30 days).
pub(crate) const RELATIVE_LIMIT: i64 = 60 * 60 * 24 * 30;

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

/// The reply to an engine error: `CLIENT_ERROR` with its reason when the request caused it
/// ([`Error::from_request`]: a key the kind cannot take, …), else `SERVER_ERROR`.
pub(crate) fn server_error(out: &mut Vec<u8>, e: &Error) {
    out.extend_from_slice(if e.from_request() {
        b"CLIENT_ERROR "
    } else {
        b"SERVER_ERROR "
    });
    let msg = e.to_string().replace(['\r', '\n'], " ");
    out.extend_from_slice(msg.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// memcached's append / prepend ([`MemcachedOps::concat_if`]) within the item and value size
/// limits, as the text, binary and meta commands map them: an absent record and a result
/// over a limit are both NOT_STORED; `cas` (not 0, the binary protocol and `ms … C`) must match.
/// `limits`: the server's item size limit and `--max-value-size`.
pub fn append(
    store: &dyn Store,
    limits: (u64, u64),
    key: &[u8],
    data: &[u8],
    front: bool,
    cas: u64,
) -> Result<Outcome, Error> {
    let (max, max_value) = limits;
    store.concat_if(key, data, front, cas, &|flags, len| {
        item_size(key.len(), flags, len) <= max && len as u64 <= max_value
    })
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
pub(crate) struct ItemState {
    /// Marked stale (`X`).
    pub(crate) stale: bool,
    /// A win token (`W`) was handed out (later readers get `Z`).
    pub(crate) token_sent: bool,
}

#[derive(Debug, Default)]
pub(crate) struct StateShard {
    /// key → (record version, state, insertion tick).
    map: HashMap<Vec<u8>, (u64, ItemState, u64)>,
    /// insertion tick → key: the eviction order (oldest first).
    order: BTreeMap<u64, Vec<u8>>,
    tick: u64,
}

impl StateShard {
    /// The state of `key` at record `version` (default: neither stale nor won).
    pub(crate) fn get(&mut self, key: &[u8], version: u64) -> ItemState {
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
    pub(crate) fn set(&mut self, key: &[u8], version: u64, st: ItemState) {
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
    pub(crate) fn lock(&self, key: &[u8]) -> MutexGuard<'_, StateShard> {
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

/// memcached's per-prefix counters (`stats detail on`): for each key prefix (the key up to
/// its first `:`), the gets, hits, sets and deletes while detail is on. Kept for at most
/// [`PREFIXES`] prefixes (memcached keeps any number); a request pays one relaxed load while
/// detail is off.
#[derive(Debug, Default)]
pub struct PrefixStats {
    on: AtomicBool,
    map: Mutex<HashMap<Vec<u8>, Prefix>>,
}

/// Prefixes counted at most.
pub const PREFIXES: usize = 4096;

#[derive(Clone, Copy, Debug, Default)]
struct Prefix {
    get: u64,
    hit: u64,
    set: u64,
    del: u64,
    /// Order of creation (the dump lists a bucket's newest first, as memcached does).
    seq: u64,
}

/// What a request did to a key, for [`PrefixStats::record`].
#[derive(Clone, Copy, Debug)]
pub enum Did {
    Get { hit: bool },
    Set,
    Delete,
}

impl PrefixStats {
    pub fn enable(&self, on: bool) {
        self.on.store(on, Relaxed);
    }

    pub fn is_on(&self) -> bool {
        self.on.load(Relaxed)
    }

    /// Forget every prefix (`stats reset`).
    pub fn clear(&self) {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    #[inline]
    pub fn record(&self, key: &[u8], did: Did) {
        if self.on.load(Relaxed) {
            self.record_slow(key, did);
        }
    }

    fn record_slow(&self, key: &[u8], did: Did) {
        let Some(end) = key.iter().position(|&b| b == b':') else {
            return;
        };
        let prefix = &key[..end];
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let next = map.len() as u64;
        if !map.contains_key(prefix) && map.len() >= PREFIXES {
            return;
        }
        let p = map.entry(prefix.to_vec()).or_insert(Prefix {
            seq: next,
            ..Prefix::default()
        });
        match did {
            Did::Get { hit } => {
                p.get += 1;
                p.hit += u64::from(hit);
            }
            Did::Set => p.set += 1,
            Did::Delete => p.del += 1,
        }
    }

    /// `PREFIX <prefix> get <n> hit <n> set <n> del <n>` lines, in memcached's order (its hash
    /// table's: murmur3 of the prefix modulo 256, the newest of a bucket first).
    pub fn dump(&self, out: &mut Vec<u8>) {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<(&Vec<u8>, &Prefix)> = map.iter().collect();
        v.sort_by_key(|(k, p)| (murmur3_32(k) % 256, std::cmp::Reverse(p.seq)));
        for (k, p) in v {
            out.extend_from_slice(b"PREFIX ");
            out.extend_from_slice(k);
            for (name, n) in [
                (" get ", p.get),
                (" hit ", p.hit),
                (" set ", p.set),
                (" del ", p.del),
            ] {
                out.extend_from_slice(name.as_bytes());
                kura_proto::push_decimal(out, n);
            }
            out.extend_from_slice(b"\r\n");
        }
    }

    /// The dump as one value (the binary protocol's `detail dump`).
    pub fn dump_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.dump(&mut v);
        v.extend_from_slice(reply::END);
        v
    }
}

/// MurmurHash3 (x86, 32-bit, seed 0): memcached's default hash, which orders its prefix
/// table.
fn murmur3_32(data: &[u8]) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mut h: u32 = 0;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let mut k: u32 = 0;
        for (i, &b) in tail.iter().enumerate() {
            k |= u32::from(b) << (8 * i);
        }
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
    }
    h ^= data.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur3_matches_the_reference() {
        // Known values of MurmurHash3_x86_32 with seed 0.
        assert_eq!(murmur3_32(b""), 0);
        assert_eq!(murmur3_32(b"hello"), 0x248b_fa47);
        assert_eq!(murmur3_32(b"hello, world"), 0x149b_bb7f);
    }

    #[test]
    fn prefix_counts_are_kept_only_while_on_and_bounded() {
        let p = PrefixStats::default();
        p.record(b"a:1", Did::Set);
        p.enable(true);
        p.record(b"a:1", Did::Get { hit: true });
        p.record(b"a:2", Did::Get { hit: false });
        p.record(b"nocolon", Did::Set);
        p.record(b"b:x", Did::Delete);
        let mut out = Vec::new();
        p.dump(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("PREFIX a get 2 hit 1 set 0 del 0\r\n"),
            "{text}"
        );
        assert!(
            text.contains("PREFIX b get 0 hit 0 set 0 del 1\r\n"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 2);
        for i in 0..PREFIXES + 10 {
            p.record(format!("p{i}:k").as_bytes(), Did::Set);
        }
        assert_eq!(p.map.lock().unwrap().len(), PREFIXES);
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
}
