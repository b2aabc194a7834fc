//! memcached's `stats` groups, `stats detail` (per-prefix counters), `stats cachedump` and
//! `lru_crawler` (its `metadump` streamed by the connection loop, [`Dump`]) over any
//! [`Store`].
//!
//! Field names and their order are memcached 1.6.18's, so that a client that reads them finds
//! them where memcached has them; the values Kura has no counterpart for (slab allocator,
//! LRU segments, extstore, TLS) are memcached's defaults or 0. Kura's own come after them:
//! `kura_version`, then the database's counters as `db_<name>`, then the replication state
//! (`crate::repl::Replication::report`).

use crate::context::Shared;
use crate::mc_access::Used;
use kura_engine::counter::Counter;
use kura_engine::{Cursor, Error, Record, Store};
use kura_proto::mc_text::{self, item_size, reply, Keys};
use std::sync::atomic::Ordering::Relaxed;

/// memcached's slab classes (`MAX_NUMBER_OF_SLAB_CLASSES`): `stats cachedump` refuses ids at
/// or above it. Kura has one class, 1, that holds every item.
const SLAB_CLASSES: u32 = 64;

/// `stats cachedump` stops at this much output, as memcached's does.
const CACHEDUMP_LIMIT: usize = 2 << 20;

/// `stats [group …]` in the text protocol.
pub fn stats(store: &dyn Store, shared: &Shared, args: Keys<'_>, now: u64, out: &mut Vec<u8>) {
    let group = args.get(0);
    match group {
        Some(b"reset") => {
            shared.reset_stats();
            out.extend_from_slice(b"RESET\r\n");
            return;
        }
        Some(b"detail") => {
            match args.get(1) {
                Some(b"on") => {
                    shared.mc.detail.enable(true);
                    out.extend_from_slice(reply::OK);
                }
                Some(b"off") => {
                    shared.mc.detail.enable(false);
                    out.extend_from_slice(reply::OK);
                }
                Some(b"dump") => {
                    shared.mc.detail.dump(out);
                    out.extend_from_slice(reply::END);
                }
                _ => out.extend_from_slice(b"CLIENT_ERROR usage: stats detail on|off|dump\r\n"),
            }
            return;
        }
        Some(b"cachedump") => {
            let (Some(id), Some(limit)) = (args.get(1), args.get(2)) else {
                out.extend_from_slice(b"CLIENT_ERROR bad command line\r\n");
                return;
            };
            let (Some(id), Some(limit)) = (mc_text::c_strtoul32(id), mc_text::c_strtoul32(limit))
            else {
                out.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n");
                return;
            };
            if id >= SLAB_CLASSES {
                out.extend_from_slice(b"CLIENT_ERROR Illegal slab id\r\n");
                return;
            }
            if id == 1 {
                if let Err(e) = cachedump(store, limit, now, out) {
                    crate::mc_common::server_error(out, &e);
                    return;
                }
            }
            out.extend_from_slice(reply::END);
            return;
        }
        _ => {}
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

/// `stats cachedump 1 <limit>`: `ITEM <key> [<bytes> b; <expiry> s]` per item (expiry: a unix
/// time, 0 for none), at most `limit` of them (0: no limit) and 2 MiB of lines.
fn cachedump(store: &dyn Store, limit: u32, now: u64, out: &mut Vec<u8>) -> Result<(), Error> {
    let start = out.len();
    let mut cur = store.cursor()?;
    let mut n = 0;
    while let Some((key, rec)) = cur.next()? {
        if kura_engine::store::is_expired(rec.meta.expires, now) {
            continue;
        }
        if (limit != 0 && n >= limit) || out.len() - start >= CACHEDUMP_LIMIT {
            break;
        }
        out.extend_from_slice(b"ITEM ");
        out.extend_from_slice(&key);
        out.extend_from_slice(b" [");
        kura_proto::push_decimal(out, rec.value.len() as u64);
        out.extend_from_slice(b" b; ");
        kura_proto::push_decimal(out, rec.meta.expires);
        out.extend_from_slice(b" s]\r\n");
        n += 1;
    }
    Ok(())
}

/// What `lru_crawler <args>` asks for.
pub enum Crawler {
    /// A reply line, written.
    Done,
    /// `metadump`: stream every item (the connection loop drives a [`Dump`]); `false`: the
    /// classes asked for hold nothing (only `END` is due).
    Metadump(bool),
}

/// `lru_crawler …`: `metadump all|hash|<class ids>` starts a dump; `crawl`, `tocrawl`,
/// `sleep`, `enable` and `disable` are accepted (Kura's expiry sweeps need no crawler).
pub fn lru_crawler(args: Keys<'_>, out: &mut Vec<u8>) -> Crawler {
    let n = args.len();
    let sub = args.get(0).unwrap_or_default();
    let arg = args.get(1).unwrap_or_default();
    match (sub, n) {
        (b"metadump", 2) => {
            if arg == b"all" || arg == b"hash" {
                return Crawler::Metadump(true);
            }
            let ids: Option<Vec<u32>> = arg
                .split(|&b| b == b',')
                .map(mc_text::c_strtoul32)
                .collect();
            match ids {
                Some(ids) if ids.iter().all(|&i| i < SLAB_CLASSES) => {
                    return Crawler::Metadump(ids.contains(&1));
                }
                _ => out.extend_from_slice(b"BADCLASS invalid class id\r\n"),
            }
        }
        (b"crawl", 2) => out.extend_from_slice(reply::OK),
        (b"tocrawl", 2) => match mc_text::c_strtoul32(arg) {
            Some(_) => out.extend_from_slice(reply::OK),
            None => out.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n"),
        },
        (b"sleep", 2) => match mc_text::c_strtoul32(arg) {
            Some(s) if s > 1_000_000 => {
                out.extend_from_slice(b"CLIENT_ERROR sleep must be one second or less\r\n")
            }
            Some(_) => out.extend_from_slice(reply::OK),
            None => out.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n"),
        },
        (b"enable" | b"disable", 1) => out.extend_from_slice(reply::OK),
        _ => out.extend_from_slice(b"ERROR\r\n"),
    }
    Crawler::Done
}

/// An `lru_crawler metadump` under way: a cursor over the database, written out a batch at a
/// time as the client takes it, so that a dump of any size holds one batch in memory.
pub struct Dump<'s> {
    cursor: Option<Box<dyn Cursor + 's>>,
}

/// Stop a batch of a dump once this much waits for the client.
pub const DUMP_BATCH: usize = 256 << 10;

impl<'s> Dump<'s> {
    /// A dump of every item (`all`), or of nothing (a class that holds none).
    pub fn start(
        store: &'s dyn Store,
        shared: &Shared,
        all: bool,
        now: u64,
    ) -> Result<Dump<'s>, Error> {
        shared.mc.access.start(now);
        Ok(Dump {
            cursor: if all { Some(store.cursor()?) } else { None },
        })
    }

    /// Write lines until `out` holds [`DUMP_BATCH`] bytes or the items run out (then `END`).
    /// True while more is to come.
    pub fn step(&mut self, shared: &Shared, now: u64, out: &mut Vec<u8>) -> bool {
        while out.len() < DUMP_BATCH {
            let Some(cur) = self.cursor.as_mut() else {
                break;
            };
            match cur.next() {
                Ok(Some((key, rec))) => {
                    if !kura_engine::store::is_expired(rec.meta.expires, now) {
                        metadump_line(out, &key, &rec, shared.mc.access.used(&key, now));
                    }
                }
                Ok(None) => self.cursor = None,
                Err(e) => {
                    crate::mc_common::server_error(out, &e);
                    self.cursor = None;
                    return false;
                }
            }
        }
        if self.cursor.is_none() {
            out.extend_from_slice(reply::END);
            return false;
        }
        true
    }
}

/// One line of a metadump, as memcached writes it (a bare `\n` at its end): the key
/// URI-encoded, the expiry and last access as unix times, the cas, whether it was fetched,
/// the class and the item's size.
fn metadump_line(out: &mut Vec<u8>, key: &[u8], rec: &Record, used: Used) {
    out.extend_from_slice(b"key=");
    for &b in key {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
    out.extend_from_slice(b" exp=");
    if rec.meta.expires == 0 {
        out.extend_from_slice(b"-1");
    } else {
        kura_proto::push_decimal(out, rec.meta.expires);
    }
    out.extend_from_slice(b" la=");
    kura_proto::push_decimal(out, used.at);
    out.extend_from_slice(b" cas=");
    kura_proto::push_decimal(out, rec.meta.version);
    out.extend_from_slice(if used.fetched {
        &b" fetch=yes cls=1 size="[..]
    } else {
        b" fetch=no cls=1 size="
    });
    kura_proto::push_decimal(out, item_size(key.len(), rec.meta.flags, rec.value.len()));
    out.push(b'\n');
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
/// memcached does not know (`reset`, `detail` and `cachedump` are not groups of pairs: the
/// callers handle them).
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
            let conns = shared.curr_connections.load(Relaxed);
            let counters = store.counters();
            let counter = |name: &str| {
                counters
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map_or(0, |(_, x)| *x)
            };
            s("pid", &std::process::id());
            s("uptime", &now.saturating_sub(shared.started));
            s("time", &now);
            s("version", &shared.version);
            s("libevent", &"none");
            s("pointer_size", &(8 * std::mem::size_of::<usize>()));
            let (user, system) = rusage();
            s("rusage_user", &user);
            s("rusage_system", &system);
            s("max_connections", &shared.max_connections);
            s("curr_connections", &conns);
            s("total_connections", &shared.total_connections.load(Relaxed));
            s(
                "rejected_connections",
                &shared.rejected_connections.load(Relaxed),
            );
            s("connection_structures", &conns);
            s("response_obj_oom", &0);
            s("response_obj_count", &conns);
            s("response_obj_bytes", &0);
            s("read_buf_count", &conns);
            s("read_buf_bytes", &0);
            s("read_buf_bytes_free", &0);
            s("read_buf_oom", &0);
            s("reserved_fds", &0);
            s("cmd_get", &c(&shared.cmd_get));
            s("cmd_set", &c(&shared.cmd_set));
            s("cmd_flush", &c(&shared.mc.cmd_flush));
            s("cmd_touch", &c(&shared.mc.cmd_touch));
            s("cmd_meta", &c(&shared.mc.cmd_meta));
            s("get_hits", &c(&shared.get_hits));
            s("get_misses", &c(&shared.get_misses));
            s("get_expired", &0);
            s("get_flushed", &0);
            s("delete_misses", &c(&shared.delete_misses));
            s("delete_hits", &c(&shared.delete_hits));
            s("incr_misses", &c(&shared.mc.incr_misses));
            s("incr_hits", &c(&shared.mc.incr_hits));
            s("decr_misses", &c(&shared.mc.decr_misses));
            s("decr_hits", &c(&shared.mc.decr_hits));
            s("cas_misses", &c(&shared.mc.cas_misses));
            s("cas_hits", &c(&shared.mc.cas_hits));
            s("cas_badval", &c(&shared.mc.cas_badval));
            s("touch_hits", &c(&shared.mc.touch_hits));
            s("touch_misses", &c(&shared.mc.touch_misses));
            s("store_too_large", &c(&shared.mc.store_too_large));
            s("store_no_memory", &0);
            s("auth_cmds", &0);
            s("auth_errors", &0);
            s("bytes_read", &c(&shared.bytes_read));
            s("bytes_written", &c(&shared.bytes_written));
            s("limit_maxbytes", &limit_maxbytes(store));
            s("accepting_conns", &1);
            s("listen_disabled_num", &0);
            s("time_in_listen_disabled_us", &0);
            s("threads", &shared.threads);
            s("conn_yields", &0);
            s("hash_power_level", &16);
            s("hash_bytes", &524288);
            s("hash_is_expanding", &0);
            for name in [
                "slab_reassign_rescues",
                "slab_reassign_chunk_rescues",
                "slab_reassign_evictions_nomem",
                "slab_reassign_inline_reclaim",
                "slab_reassign_busy_items",
                "slab_reassign_busy_deletes",
                "slab_reassign_running",
                "slabs_moved",
                "lru_crawler_running",
                "lru_crawler_starts",
                "lru_maintainer_juggles",
                "malloc_fails",
                "log_worker_dropped",
                "log_worker_written",
                "log_watcher_skipped",
                "log_watcher_sent",
                "log_watchers",
                "unexpected_napi_ids",
                "round_robin_fallback",
            ] {
                s(name, &0);
            }
            s("bytes", &store.size());
            s("curr_items", &store.count());
            s("total_items", &c(&shared.mc.total_items));
            s("slab_global_page_pool", &0);
            s("expired_unfetched", &0);
            s("evicted_unfetched", &0);
            s("evicted_active", &0);
            s("evictions", &counter("evictions"));
            s("reclaimed", &counter("expired_reclaimed"));
            for name in [
                "crawler_reclaimed",
                "crawler_items_checked",
                "lrutail_reflocked",
                "moves_to_cold",
                "moves_to_warm",
                "moves_within_lru",
                "direct_reclaims",
                "lru_bumps_dropped",
            ] {
                s(name, &0);
            }
            s("kura_version", &env!("CARGO_PKG_VERSION"));
            for (name, x) in counters {
                s(&format!("db_{name}"), &x);
            }
            // The replication state, as Tyrant `stat` and Kyoto Tycoon `report` show it.
            for (name, v) in shared.repl_report() {
                s(&name, &v);
            }
        }
        Some(b"settings") => {
            let yes_no = |b: bool| if b { "yes" } else { "no" };
            s("maxbytes", &limit_maxbytes(store));
            s("maxconns", &shared.max_connections);
            s("tcpport", &shared.port);
            s("udpport", &0);
            s("inter", &shared.host);
            s("verbosity", &shared.mc.verbosity.load(Relaxed));
            s("oldest", &0);
            s("evictions", &"on");
            s("domain_socket", &"NULL");
            s("umask", &700);
            s("shutdown_command", &"no");
            s("growth_factor", &"1.25");
            s("chunk_size", &48);
            s("num_threads", &shared.threads);
            s("num_threads_per_udp", &shared.threads);
            s("stat_key_prefix", &":");
            s("detail_enabled", &yes_no(shared.mc.detail.is_on()));
            s("reqs_per_event", &20);
            s("cas_enabled", &"yes");
            s("tcp_backlog", &1024);
            s("binding_protocol", &"auto-negotiate");
            // memcached shows its -Y file's path for ascii; Kura's users serve both.
            s("auth_enabled_sasl", &yes_no(shared.access.has_users()));
            s("auth_enabled_ascii", &yes_no(shared.access.has_users()));
            s("item_size_max", &shared.max_item_size);
            s("maxconns_fast", &"yes");
            s("hashpower_init", &0);
            s("slab_reassign", &"yes");
            s("slab_automove", &shared.mc.slab_automove.load(Relaxed));
            let ratio = f64::from_bits(shared.mc.slab_automove_ratio.load(Relaxed));
            s("slab_automove_ratio", &format_args!("{ratio:.2}"));
            s("slab_automove_window", &30);
            s("slab_chunk_max", &(shared.max_item_size / 2));
            s("lru_crawler", &"yes");
            s("lru_crawler_sleep", &100);
            s("lru_crawler_tocrawl", &0);
            s("tail_repair_time", &0);
            s("flush_enabled", &"yes");
            s("dump_enabled", &"yes");
            s("hash_algorithm", &"murmur3");
            s("lru_maintainer_thread", &"yes");
            s("lru_segmented", &"yes");
            s("hot_lru_pct", &20);
            s("warm_lru_pct", &40);
            s("hot_max_factor", &"0.20");
            s("warm_max_factor", &"2.00");
            s("temp_lru", &"no");
            s("temporary_ttl", &61);
            s("idle_timeout", &shared.idle_timeout);
            s("watcher_logbuf_size", &262144);
            s("worker_logbuf_size", &65536);
            s("read_buf_mem_limit", &0);
            s("track_sizes", &"no");
            s("inline_ascii_response", &"no");
            s("ext_item_size", &512);
            s("ext_item_age", &4294967295u32);
            s("ext_low_ttl", &0);
            s("ext_recache_rate", &2000);
            s("ext_wbuf_size", &4194304);
            s("ext_compact_under", &0);
            s("ext_drop_under", &0);
            s("ext_max_sleep", &1000000);
            s("ext_max_frag", &"0.80");
            s("slab_automove_freeratio", &"0.010");
            s("ext_drop_unread", &"no");
            s("ssl_enabled", &"no");
            s("ssl_chain_cert", &"(null)");
            s("ssl_key", &"(null)");
            s("ssl_verify_mode", &0);
            s("ssl_keyformat", &1);
            s("ssl_ciphers", &"NULL");
            s("ssl_ca_cert", &"NULL");
            s("ssl_wbuf_size", &16384);
            s("ssl_session_cache", &"no");
            s("ssl_kernel_tls", &"no");
            s("ssl_min_version", &"tlsv1.2");
            s("num_napi_ids", &"(null)");
            s("memory_file", &"(null)");
            for (k, x) in store.describe() {
                s(&format!("db_{k}"), &x);
            }
        }
        // No slab allocator: every item is in class 1.
        Some(b"items") => {
            let n = store.count();
            if n > 0 {
                let mut item = |f: &str, x: &dyn std::fmt::Display| s(&format!("items:1:{f}"), x);
                item("number", &n);
                for f in ["number_hot", "number_warm"] {
                    item(f, &0);
                }
                item("number_cold", &n);
                for f in [
                    "age_hot",
                    "age_warm",
                    "age",
                    "mem_requested",
                    "evicted",
                    "evicted_nonzero",
                    "evicted_time",
                    "outofmemory",
                    "tailrepairs",
                    "reclaimed",
                    "expired_unfetched",
                    "evicted_unfetched",
                    "evicted_active",
                    "crawler_reclaimed",
                    "crawler_items_checked",
                    "lrutail_reflocked",
                    "moves_to_cold",
                    "moves_to_warm",
                    "moves_within_lru",
                    "direct_reclaims",
                    "hits_to_hot",
                    "hits_to_warm",
                    "hits_to_cold",
                    "hits_to_temp",
                ] {
                    item(f, &0);
                }
            }
        }
        Some(b"slabs") => {
            let n = store.count();
            if n > 0 {
                let mut slab = |f: &str, x: &dyn std::fmt::Display| s(&format!("1:{f}"), x);
                slab("chunk_size", &96);
                slab("chunks_per_page", &10922);
                slab("total_pages", &1);
                slab("total_chunks", &10922);
                slab("used_chunks", &n);
                slab("free_chunks", &0);
                slab("free_chunks_end", &0);
                slab("get_hits", &c(&shared.get_hits));
                slab("cmd_set", &c(&shared.cmd_set));
                slab("delete_hits", &c(&shared.delete_hits));
                slab("incr_hits", &c(&shared.mc.incr_hits));
                slab("decr_hits", &c(&shared.mc.decr_hits));
                slab("cas_hits", &c(&shared.mc.cas_hits));
                slab("cas_badval", &c(&shared.mc.cas_badval));
                slab("touch_hits", &c(&shared.mc.touch_hits));
            }
            s("active_slabs", &u8::from(n > 0));
            s("total_malloced", &store.size());
        }
        Some(b"sizes") => s("sizes_status", &"disabled"),
        // Connections are not listed (each worker keeps its own).
        Some(b"conns") => {}
        Some(_) => return None,
    }
    Some(v)
}
