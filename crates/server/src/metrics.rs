//! Prometheus metrics: the text exposition format 0.0.4 of the counters the server already
//! keeps (memcached's `stats`, Tyrant's `cnt_*`, Kyoto Tycoon's `report`, the store's
//! [`Store::counters`], the replication report), plus a latency histogram per protocol
//! ([`Latencies`]), recorded by the connection loop for every request it executes.
//!
//! Served as `GET /metrics` on the HTTP interface and on `--metrics-port` ([`serve_port`]); the
//! command mask refuses both as `stat`.

use crate::context::Shared;
use crate::mask::{Op, Proto, OPS};
use kura_engine::counter::Counter;
use kura_engine::Store;
use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// The protocols a latency is kept for, with their label.
pub const PROTOCOLS: [&str; 6] = [
    "memcached_text",
    "memcached_binary",
    "tyrant",
    "kyoto_binary",
    "http",
    "redis",
];

/// The upper bounds of the latency buckets, in microseconds (then `+Inf`).
pub const BUCKETS_US: [u64; 14] = [
    25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000,
];

/// One protocol's latency histogram: a [`Counter`] per bucket (not cumulative; the last is
/// `+Inf`) and the sum in nanoseconds. Recording one is two adds to the calling thread's slots.
pub struct Histogram {
    buckets: [Counter; BUCKETS_US.len() + 1],
    sum_ns: Counter,
}

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            buckets: std::array::from_fn(|_| Counter::new()),
            sum_ns: Counter::new(),
        }
    }

    #[inline]
    pub fn observe(&self, d: Duration) {
        self.observe_n(d, 1);
    }

    /// `n` requests that took `d` together, each counted as taking `d / n`.
    #[inline]
    pub fn observe_n(&self, d: Duration, n: u64) {
        let ns = d.as_nanos().min(u128::from(u64::MAX)) as u64;
        let each = ns / n.max(1);
        let i = BUCKETS_US
            .iter()
            .position(|&b| each <= b * 1000)
            .unwrap_or(BUCKETS_US.len());
        self.buckets[i].add(n);
        self.sum_ns.add(ns);
    }

    /// Requests recorded.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(Counter::get).sum()
    }
}

/// The request latency of every protocol ([`PROTOCOLS`] order).
pub struct Latencies(pub [Histogram; PROTOCOLS.len()]);

impl Default for Latencies {
    fn default() -> Self {
        Latencies(std::array::from_fn(|_| Histogram::new()))
    }
}

impl std::fmt::Debug for Latencies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Latencies")
    }
}

/// A metric being written: its `# HELP` and `# TYPE` once, then its samples.
struct Page(String);

impl Page {
    fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: impl std::fmt::Display) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{k}=\"{}\"", escape(val));
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {v}");
    }

    fn one(&mut self, name: &str, kind: &str, help: &str, v: impl std::fmt::Display) {
        self.head(name, kind, help);
        self.sample(name, &[], v);
    }
}

/// A label value: backslash, double quote and newline escaped.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A store counter's name made a metric name (letters, digits and `_` only).
fn metric_name(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The content type of [`render`]'s page.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The metrics page.
pub fn render(store: &dyn Store, shared: &Shared) -> String {
    let mut p = Page(String::with_capacity(16 << 10));
    let now = kura_engine::store::now_secs();
    p.head(
        "kura_build_info",
        "gauge",
        "Kura's version and the database kind.",
    );
    p.sample(
        "kura_build_info",
        &[
            ("version", env!("CARGO_PKG_VERSION")),
            ("kind", store.kind().info().about),
        ],
        1,
    );
    p.one(
        "kura_start_time_seconds",
        "gauge",
        "When the server started (unix seconds).",
        shared.started,
    );
    p.one(
        "kura_uptime_seconds",
        "gauge",
        "Seconds since the server started.",
        now.saturating_sub(shared.started),
    );
    p.one(
        "kura_records",
        "gauge",
        "Records in the database.",
        store.count(),
    );
    p.one(
        "kura_size_bytes",
        "gauge",
        "Size of the database in bytes.",
        store.size(),
    );

    // The counters memcached's `stats` and Kyoto Tycoon's `report` show, shared by memcached,
    // Kyoto Tycoon and HTTP requests.
    let mc = &shared.mc;
    p.head(
        "kura_commands_total",
        "counter",
        "Commands of memcached, Kyoto Tycoon and HTTP requests, by command (memcached's cmd_*; Tyrant's are kura_tyrant_commands_total).",
    );
    for (cmd, c) in [
        ("get", &shared.cmd_get),
        ("set", &shared.cmd_set),
        ("touch", &mc.cmd_touch),
        ("flush", &mc.cmd_flush),
        ("meta", &mc.cmd_meta),
    ] {
        p.sample("kura_commands_total", &[("command", cmd)], c.get());
    }
    let hits_misses = [
        ("get", &shared.get_hits, &shared.get_misses),
        ("delete", &shared.delete_hits, &shared.delete_misses),
        ("incr", &mc.incr_hits, &mc.incr_misses),
        ("decr", &mc.decr_hits, &mc.decr_misses),
        ("cas", &mc.cas_hits, &mc.cas_misses),
        ("touch", &mc.touch_hits, &mc.touch_misses),
    ];
    p.head(
        "kura_hits_total",
        "counter",
        "Requests that found their key, by command (memcached's *_hits).",
    );
    for (cmd, h, _) in hits_misses {
        p.sample("kura_hits_total", &[("command", cmd)], h.get());
    }
    p.head(
        "kura_misses_total",
        "counter",
        "Requests that did not find their key, by command (memcached's *_misses).",
    );
    for (cmd, _, m) in hits_misses {
        p.sample("kura_misses_total", &[("command", cmd)], m.get());
    }
    p.one(
        "kura_cas_badval_total",
        "counter",
        "memcached cas requests refused for a changed value.",
        mc.cas_badval.get(),
    );
    p.one(
        "kura_items_stored_total",
        "counter",
        "Values stored by memcached's storage commands (memcached's total_items).",
        mc.total_items.get(),
    );
    p.one(
        "kura_too_large_total",
        "counter",
        "memcached storage commands refused as too large.",
        mc.store_too_large.get(),
    );

    // Tyrant's `cnt_*`.
    p.head(
        "kura_tyrant_commands_total",
        "counter",
        "Tokyo Tyrant binary protocol commands by command (Tyrant's cnt_*).",
    );
    for (i, (_, name, _)) in OPS.iter().enumerate() {
        p.sample(
            "kura_tyrant_commands_total",
            &[("command", name)],
            shared.tt.counts[i].get(),
        );
    }
    p.head(
        "kura_tyrant_misses_total",
        "counter",
        "Tokyo Tyrant commands that failed on their key (Tyrant's cnt_*_miss).",
    );
    for (i, name) in ["put", "out", "get"].iter().enumerate() {
        p.sample(
            "kura_tyrant_misses_total",
            &[("command", name)],
            shared.tt.misses[i].get(),
        );
    }

    // Redis's `cmdstat_*` calls.
    p.head(
        "kura_redis_commands_total",
        "counter",
        "Redis protocol commands by command (Redis's cmdstat_* calls).",
    );
    for (cmd, n) in crate::redis_exec::COMMANDS.iter().zip(&shared.redis.calls) {
        p.sample(
            "kura_redis_commands_total",
            &[("command", cmd.name)],
            n.get(),
        );
    }
    p.one(
        "kura_redis_errors_total",
        "counter",
        "Redis protocol commands answered with an error.",
        shared.redis.errors.get(),
    );

    p.one(
        "kura_received_bytes_total",
        "counter",
        "Bytes read from clients.",
        shared.bytes_read.get(),
    );
    p.one(
        "kura_sent_bytes_total",
        "counter",
        "Bytes written to clients.",
        shared.bytes_written.get(),
    );
    p.one(
        "kura_current_connections",
        "gauge",
        "Client connections open now.",
        shared.curr_connections.load(Relaxed),
    );
    p.one(
        "kura_connections_total",
        "counter",
        "Client connections accepted.",
        shared.total_connections.load(Relaxed),
    );
    p.one(
        "kura_connections_rejected_total",
        "counter",
        "Client connections refused at --max-connections.",
        shared.rejected_connections.load(Relaxed),
    );
    p.one(
        "kura_kt_waiting",
        "gauge",
        "Kyoto Tycoon requests parked waiting for a signal.",
        shared.kt_signals.waiting(),
    );

    p.head(
        "kura_request_duration_seconds",
        "histogram",
        "Time to decode and execute a request, by protocol (requests read together share their batch's time).",
    );
    for (proto, h) in PROTOCOLS.iter().zip(&shared.latency.0) {
        let mut total = 0u64;
        for (i, b) in h.buckets.iter().enumerate() {
            total += b.get();
            let le = match BUCKETS_US.get(i) {
                Some(&us) => format!("{}", us as f64 / 1e6),
                None => "+Inf".to_string(),
            };
            p.sample(
                "kura_request_duration_seconds_bucket",
                &[("protocol", proto), ("le", &le)],
                total,
            );
        }
        p.sample(
            "kura_request_duration_seconds_sum",
            &[("protocol", proto)],
            h.sum_ns.get() as f64 / 1e9,
        );
        p.sample(
            "kura_request_duration_seconds_count",
            &[("protocol", proto)],
            total,
        );
    }

    // What the engine counts (syncs, group-commit waits, checkpoints, compactions, …): each
    // a counter of its own.
    for (name, v) in store.counters() {
        let m = format!("kura_engine_{}_total", metric_name(name));
        p.one(&m, "counter", &format!("The engine's {name} count."), v);
    }
    p.one(
        "kura_damaged_regions",
        "gauge",
        "Damaged regions the open found in the database's files.",
        store.damage_found().len(),
    );

    if let Some(r) = &shared.repl {
        replication(&mut p, r);
    }
    p.0
}

/// The update log and replication: the log's size and each replica's lag (a master), and how
/// far behind its master this server is (a replica).
fn replication(p: &mut Page, r: &crate::repl::Replication) {
    if let Some(l) = &r.logged {
        let log = l.log();
        let last = log.last_ts();
        p.one(
            "kura_ulog_size_bytes",
            "gauge",
            "Bytes of the update log's files.",
            log.size(),
        );
        p.one(
            "kura_ulog_last_timestamp_seconds",
            "gauge",
            "Time stamp of the update log's newest record (unix seconds).",
            last as f64 / 1e6,
        );
        let replicas = log.replicas();
        if !replicas.is_empty() {
            p.head(
                "kura_replica_lag_seconds",
                "gauge",
                "How far each replica's confirmed position is behind this server's update log, by replica server id.",
            );
            for (sid, rep) in &replicas {
                let lag = last.saturating_sub(rep.confirmed) as f64 / 1e6;
                p.sample(
                    "kura_replica_lag_seconds",
                    &[("sid", &sid.to_string())],
                    lag,
                );
            }
            p.head(
                "kura_replica_connected",
                "gauge",
                "Whether each replica is connected (1) or not (0), by replica server id.",
            );
            for (sid, rep) in &replicas {
                p.sample(
                    "kura_replica_connected",
                    &[("sid", &sid.to_string())],
                    u8::from(rep.connected),
                );
            }
        }
    }
    if let Some(sa) = &r.sync_acks {
        p.one(
            "kura_sync_replica_waits_total",
            "counter",
            "Client writes whose replies waited for replicas' acknowledgements (--sync-replicas).",
            sa.waits.load(Relaxed),
        );
        p.one(
            "kura_sync_replica_timeouts_total",
            "counter",
            "Of those, the replies sent when --sync-replicas-timeout ran out, unacknowledged.",
            sa.timeouts.load(Relaxed),
        );
    }
    if r.master().is_some() {
        let st = r.status();
        p.one(
            "kura_replication_delay_seconds",
            "gauge",
            "How far this replica is behind its master.",
            st.lag_us() as f64 / 1e6,
        );
        p.one(
            "kura_replication_connected",
            "gauge",
            "Whether this replica is connected to its master (1) or not (0).",
            u8::from(st.connected),
        );
        p.one(
            "kura_replication_applied_total",
            "counter",
            "Records of the master applied since the server started.",
            st.applied,
        );
        p.one(
            "kura_replication_bootstraps_total",
            "counter",
            "Bootstraps from the master's snapshot since the server started.",
            st.bootstraps,
        );
    }
}

/// Whether the command mask in force refuses the metrics page (it is a `stat`).
pub fn refused(shared: &Shared) -> bool {
    shared.mask().denies(Op::Stat, Proto::Http)
}

/// Serve `GET /metrics` on `listener` (`--metrics-port`) until `stop` is set: one request per
/// connection, answered and closed, each by this thread (a scraper asks every few seconds).
pub fn serve_port(
    listener: std::net::TcpListener,
    store: std::sync::Arc<dyn Store>,
    shared: std::sync::Arc<Shared>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    listener.set_nonblocking(true)?;
    std::thread::Builder::new()
        .name("kura-metrics".into())
        .spawn(move || {
            while !stop.load(Relaxed) {
                match listener.accept() {
                    Ok((sock, _)) => answer(sock, &*store, &shared),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        })
}

/// Answer one request of the metrics port (read with a time limit, so a silent client
/// cannot hold the port).
fn answer(mut sock: std::net::TcpStream, store: &dyn Store, shared: &Shared) {
    use std::io::{Read, Write};
    let _ = sock.set_nonblocking(false);
    let _ = sock.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = sock.set_write_timeout(Some(Duration::from_secs(5)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 2048];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16 << 10 {
        match sock.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let line = buf.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, ctype, body) = if method != "GET" && method != "HEAD" {
        (
            "405 Method Not Allowed",
            "text/plain",
            "GET /metrics only\n".to_string(),
        )
    } else if path != "/metrics" {
        (
            "404 Not Found",
            "text/plain",
            "GET /metrics only\n".to_string(),
        )
    } else if refused(shared) {
        ("403 Forbidden", "text/plain", "Forbidden\n".to_string())
    } else {
        ("200 OK", CONTENT_TYPE, render(store, shared))
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = sock.write_all(head.as_bytes());
    if method != "HEAD" {
        let _ = sock.write_all(body.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_fall_in_their_bucket_and_render_cumulative() {
        let sh = Shared::new(0, 1 << 20);
        let h = &sh.latency.0[2];
        h.observe(Duration::from_micros(10));
        h.observe(Duration::from_micros(30));
        h.observe(Duration::from_secs(3));
        assert_eq!(h.count(), 3);
        // A batch of 4 in 100 µs: 25 µs each (a bucket holds what is at most its bound).
        h.observe_n(Duration::from_micros(100), 4);
        assert_eq!(h.count(), 7);
        let store = kura_engine::open("*").unwrap();
        let page = render(&*store, &sh);
        let line = |s: &str| page.lines().any(|l| l == s);
        assert!(line(
            "kura_request_duration_seconds_bucket{protocol=\"tyrant\",le=\"0.000025\"} 5"
        ));
        assert!(line(
            "kura_request_duration_seconds_bucket{protocol=\"tyrant\",le=\"0.00005\"} 6"
        ));
        assert!(line(
            "kura_request_duration_seconds_bucket{protocol=\"tyrant\",le=\"1\"} 6"
        ));
        assert!(line(
            "kura_request_duration_seconds_bucket{protocol=\"tyrant\",le=\"+Inf\"} 7"
        ));
        assert!(line(
            "kura_request_duration_seconds_count{protocol=\"tyrant\"} 7"
        ));
        // Every sample line is `name{labels} value` or `name value`, after its TYPE.
        for l in page.lines().filter(|l| !l.starts_with('#')) {
            let (name, v) = l.rsplit_once(' ').unwrap();
            assert!(v.parse::<f64>().is_ok(), "{l}");
            let base = name.split('{').next().unwrap();
            assert!(base.starts_with("kura_"), "{l}");
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(metric_name("leaf-loads.x"), "leaf_loads_x");
    }
}
