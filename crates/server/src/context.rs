//! The server-wide context every executor shares: the counters every protocol counts and the
//! settings of a server ([`Shared`]), what a connection does after a request ([`Next`]), and
//! the delayed `flush_all` that applies to every protocol ([`flush_if_due`]). Executors import
//! it from here; what one protocol keeps for itself is its own (memcached's is
//! [`McState`], in `mc_common`).

use crate::backup::BackupDir;
use crate::mask::{Mask, MaskCell};
use crate::mc_common::McState;
use kura_engine::counter::Counter;
use kura_engine::{Error, Store};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The memcached version reported to clients (`version`, binary VERSION, `stats`): the release
/// whose protocol Kura follows, a plain number as clients expect (some parse it). Kura's own
/// version is the `kura_version` statistic.
pub const MEMCACHED_VERSION: &str = "1.6.21";

/// Counters and settings shared by every connection of a server.
#[derive(Debug)]
pub struct Shared {
    pub started: u64,
    pub version: &'static str,
    pub cmd_get: Counter,
    pub cmd_set: Counter,
    pub get_hits: Counter,
    pub get_misses: Counter,
    pub delete_hits: Counter,
    pub delete_misses: Counter,
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
    /// The item size limit (memcached's `-I`, counted as [`item_size`] counts).
    pub max_item_size: u64,
    /// The largest value any request may carry, on every protocol (`--max-value-size`):
    /// see [`Shared::check_value`].
    pub max_value_size: u64,
    /// The address listened on and `--timeout` (for `stats settings`).
    pub host: String,
    pub idle_timeout: u64,
    /// A pending `flush_all <delay>`: the unix time at which every record goes (0 = none).
    pub flush_at: AtomicU64,
    /// Operations refused on every protocol (`--mask`); SIGHUP may replace it.
    pub mask: MaskCell,
    /// The database name the server was started with (Tyrant's `path`).
    pub db_name: String,
    /// The server id (Tyrant's `sid`): from `--sid`, else derived from the port.
    pub sid: u32,
    /// The main listening port.
    pub port: u16,
    /// What memcached keeps for itself: its own counters, item states, `stats detail`.
    pub mc: McState,
    /// What Tyrant keeps for itself: its `cnt_*` counters and the server's iteration.
    pub tt: crate::tt_exec::TtShared,
    /// What the Redis protocol keeps for itself: client ids, calls by command.
    pub redis: crate::redis_exec::RedisShared,
    /// Refuse every client write (a replica that takes its changes from its master only).
    pub read_only: std::sync::atomic::AtomicBool,
    /// Replication: the update log, the master followed, the replicas fed.
    pub repl: Option<std::sync::Arc<crate::repl::Replication>>,
    /// Kyoto Tycoon's named signals: the requests waiting for one (`WAIT`).
    pub kt_signals: crate::kt_signal::Signals,
    /// Where copies asked for over the network go (`--backup-dir`); `None` refuses them
    /// (see [`crate::backup`]).
    pub backup_dir: Option<BackupDir>,
    /// The server's log (`kura serve --log`); nothing is written when none was given.
    pub log: LogSink,
    /// Scripts (`--ext`, `--scr`); `None` when none was given.
    pub scripts: Option<std::sync::Arc<crate::script::Scripts>>,
    /// What Tyrant's scripts share: `ext`'s locks, user locks, the stash.
    pub ext: std::sync::Arc<crate::script::tt_lock::ExtShared>,
    /// Request latency by protocol (the connection loop records it; `crate::metrics`).
    pub latency: crate::metrics::Latencies,
    /// Users and who may connect (`--users`, `--allow-unauthenticated-binary`).
    pub access: crate::auth::Access,
}

/// A log line's level (`--log-level`: the lines below it are not written).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

impl Level {
    pub fn parse(s: &str) -> Option<Level> {
        Some(match s {
            "error" => Level::Error,
            "warn" | "warning" => Level::Warn,
            "info" => Level::Info,
            "debug" => Level::Debug,
            _ => return None,
        })
    }

    /// The name written in a log line: `ERROR`, `WARN`, `INFO`, `DEBUG`.
    pub fn name(self) -> &'static str {
        match self {
            Level::Error => "ERROR",
            Level::Warn => "WARN",
            Level::Info => "INFO",
            Level::Debug => "DEBUG",
        }
    }
}

/// Writes one line to the server's log.
type LineFn = dyn Fn(Level, &str) + Send + Sync;

/// Where the executors write a line to the server's log.
#[derive(Clone, Default)]
pub struct LogSink {
    f: Option<Arc<LineFn>>,
    /// The lines written by [`LogSink::limited`], by kind (shared by every clone).
    limited: Arc<Mutex<Vec<Limited>>>,
}

/// The pace of one kind of [`LogSink::limited`] line.
struct Limited {
    kind: &'static str,
    /// When the last line of this kind was written.
    last: Instant,
    /// Lines of this kind left out since then.
    left_out: u64,
}

/// At most one line of a kind in this long (the first of a burst is written at once).
pub const LOG_PACE: Duration = Duration::from_secs(10);

impl LogSink {
    pub fn new(f: impl Fn(Level, &str) + Send + Sync + 'static) -> LogSink {
        LogSink {
            f: Some(Arc::new(f)),
            limited: Arc::default(),
        }
    }

    /// Write `msg` as one log line of level info.
    pub fn line(&self, msg: &str) {
        self.at(Level::Info, msg);
    }

    /// Write `msg` as one log line of `level`.
    pub fn at(&self, level: Level, msg: &str) {
        if let Some(f) = &self.f {
            f(level, msg);
        }
    }

    pub fn warn(&self, msg: &str) {
        self.at(Level::Warn, msg);
    }

    pub fn error(&self, msg: &str) {
        self.at(Level::Error, msg);
    }

    /// Write `msg` unless a line of the same `kind` was written less than [`LOG_PACE`] ago;
    /// the next line written tells how many were left out meanwhile. For events a client
    /// can cause at any rate (refused requests): the log keeps their kind and count without
    /// growing at the client's pace. Written as a warning.
    pub fn limited(&self, kind: &'static str, msg: &str) {
        let Some(f) = &self.f else { return };
        let now = Instant::now();
        let left_out = {
            let mut all = self.limited.lock().unwrap_or_else(|p| p.into_inner());
            match all.iter_mut().find(|l| l.kind == kind) {
                Some(l) if now.duration_since(l.last) < LOG_PACE => {
                    l.left_out += 1;
                    return;
                }
                Some(l) => {
                    l.last = now;
                    std::mem::take(&mut l.left_out)
                }
                None => {
                    all.push(Limited {
                        kind,
                        last: now,
                        left_out: 0,
                    });
                    0
                }
            }
        };
        if left_out == 0 {
            f(Level::Warn, msg);
        } else {
            f(
                Level::Warn,
                &format!(
                    "{msg} ({left_out} more like it in the last {} s not logged)",
                    LOG_PACE.as_secs()
                ),
            );
        }
    }
}

impl std::fmt::Debug for LogSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.f.is_some() {
            "LogSink(on)"
        } else {
            "LogSink(off)"
        })
    }
}

/// A value over `--max-value-size` ([`Shared::check_value`]): the reason every protocol
/// gives, in its own error form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValueTooLarge {
    /// The size of the value refused.
    pub len: u64,
    /// The server's `--max-value-size`.
    pub max: u64,
}

impl std::fmt::Display for ValueTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "value of {} bytes over the server's --max-value-size {}",
            self.len, self.max
        )
    }
}

/// What a read-only server refuses: every change of the database.
static READ_ONLY: std::sync::LazyLock<Mask> = std::sync::LazyLock::new(|| {
    Mask::NONE
        .mask("allwrite,vanish,optimize,restore")
        .unwrap_or(Mask::NONE)
});

impl Shared {
    pub fn new(now: u64, max_item_size: u64) -> Shared {
        let z = || AtomicU64::new(0);
        Shared {
            started: now,
            version: MEMCACHED_VERSION,
            cmd_get: Counter::new(),
            cmd_set: Counter::new(),
            mc: McState::new(),
            tt: Default::default(),
            redis: Default::default(),
            read_only: std::sync::atomic::AtomicBool::new(false),
            repl: None,
            kt_signals: crate::kt_signal::Signals::new(),
            get_hits: Counter::new(),
            get_misses: Counter::new(),
            delete_hits: Counter::new(),
            delete_misses: Counter::new(),
            curr_connections: z(),
            total_connections: z(),
            rejected_connections: z(),
            bytes_read: Counter::new(),
            bytes_written: Counter::new(),
            threads: 0,
            max_connections: 0,
            max_item_size,
            max_value_size: crate::net::DEFAULT_MAX_VALUE as u64,
            host: String::from("NULL"),
            idle_timeout: 0,
            flush_at: z(),
            mask: MaskCell::default(),
            db_name: String::new(),
            sid: 1,
            port: 0,
            backup_dir: None,
            log: LogSink::default(),
            scripts: None,
            ext: Default::default(),
            latency: Default::default(),
            access: Default::default(),
        }
    }

    /// Why a request [`Shared::mask`] refuses was refused, when it is because this server is a
    /// read-only replica (`by_mask`: whether `--mask` alone refuses it, whose reply each
    /// protocol keeps): "this server is a replica of HOST:PORT (read-only)". The refusal is
    /// counted and logged at a bounded pace.
    pub fn read_only_refusal(&self, by_mask: bool) -> Option<String> {
        if by_mask || !self.read_only.load(Relaxed) {
            return None;
        }
        let master = self.repl.as_ref().and_then(|r| r.master());
        let why = crate::repl::read_only_text(master.as_ref());
        self.log
            .limited("replica-write", &format!("refused a client write ({why})"));
        Some(why)
    }

    /// The replication state (see [`crate::repl::Replication::report`]); empty without
    /// replication.
    pub fn repl_report(&self) -> Vec<(String, String)> {
        self.repl
            .as_ref()
            .map(|r| r.report(self.read_only.load(Relaxed)))
            .unwrap_or_default()
    }

    /// `stats reset`: every request and hit/miss counter back to zero, the `stats detail`
    /// prefixes and `total_connections` (as memcached does; current connections and items
    /// stay).
    /// The mask's verdict on a request that `denies` tells about: `None` when the mask in
    /// force ([`Shared::mask`]) allows it, else whether `--mask` or the user's rights alone
    /// refuse it (see [`Shared::read_only_refusal`]).
    #[inline]
    pub fn verdict(&self, denies: impl Fn(Mask) -> bool) -> Option<bool> {
        let mask = self.mask();
        if mask.is_empty() || !denies(mask) {
            return None;
        }
        Some(denies(self.mask.get().union(crate::auth::denied())))
    }

    /// The command mask in force: `--mask`, what the rights of the user whose request runs
    /// do not grant ([`crate::auth`]), and every write while the server is read-only.
    #[inline]
    pub fn mask(&self) -> Mask {
        let m = self.mask.get().union(crate::auth::denied());
        if self.read_only.load(Relaxed) {
            m.union(*READ_ONLY)
        } else {
            m
        }
    }

    pub fn reset_stats(&self) {
        for c in [
            &self.cmd_get,
            &self.cmd_set,
            &self.get_hits,
            &self.get_misses,
            &self.delete_hits,
            &self.delete_misses,
            &self.bytes_read,
            &self.bytes_written,
        ] {
            c.reset();
        }
        self.tt.reset_stats();
        self.mc.reset_stats();
        self.redis.reset_stats();
        self.total_connections.store(0, Relaxed);
    }

    /// The one check of `--max-value-size`, made where a protocol has decoded a value a
    /// request carries (`len` bytes; `what` names the protocol and request for the log). A
    /// refusal is logged ([`LogSink::limited`]) and its reason returned for the protocol to
    /// send in its own error form; nothing may be stored then.
    pub fn check_value(
        &self,
        what: impl std::fmt::Display,
        len: usize,
    ) -> Result<(), ValueTooLarge> {
        if len as u64 <= self.max_value_size {
            return Ok(());
        }
        Err(self.value_refused(what, len as u64))
    }

    /// Log the refusal of a value of `len` bytes that a codec found over its limit (the
    /// binary protocols decide before the value is read: see `net`'s limits, which are set
    /// from `--max-value-size`), and return its reason.
    pub fn value_refused(&self, what: impl std::fmt::Display, len: u64) -> ValueTooLarge {
        let e = ValueTooLarge {
            len,
            max: self.max_value_size,
        };
        self.log
            .limited("value too large", &format!("refused ({what}): {e}"));
        e
    }
}

/// What the connection does after a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    Continue,
    Close,
    /// Stream an `lru_crawler metadump` (every item if true, none if false) before reading
    /// any further request: the connection loop drives it ([`crate::mc_stats::Dump`]).
    Dump(bool),
    /// The connection becomes a replication stream, served by a thread of its own.
    Stream(crate::repl::StreamReq),
    /// Kyoto Tycoon's `WAIT`: nothing is answered yet; the request stays unread and runs
    /// again once the signal comes or the time is up (see [`crate::kt_signal`]).
    Wait(crate::kt_signal::WaitReq),
}

/// One protocol's part in the steps every request takes, whatever its protocol ([`execute`]):
/// what its requests are, which of them the command mask refuses, and its replies.
pub trait Exec {
    type Req<'a>;
    /// Where replies are encoded.
    type Out: Written + ?Sized;
    /// Count a request received (before the mask: a refused request was received too).
    fn received(&mut self, _req: &Self::Req<'_>) {}
    /// Whether the command mask refuses `req` ([`Shared::verdict`]): `None` when it is
    /// allowed, else whether `--mask` alone refuses it.
    fn denied(&self, shared: &Shared, req: &Self::Req<'_>) -> Option<bool>;
    /// Answer a refused request; `why` is set when it was refused because this server is a
    /// read-only replica.
    fn refuse(&mut self, req: &Self::Req<'_>, why: Option<String>, out: &mut Self::Out) -> Next;
    /// Carry out an allowed request.
    fn run(&mut self, req: &Self::Req<'_>, out: &mut Self::Out) -> Result<Next, Error>;
    /// Answer a request that failed with `e` (its reply, from `start` of `out` on, may be
    /// half-written).
    fn failed(&mut self, req: &Self::Req<'_>, e: Error, start: usize, out: &mut Self::Out) -> Next;
}

/// The length of a reply buffer.
pub trait Written {
    fn written(&self) -> usize;
}

impl Written for Vec<u8> {
    fn written(&self) -> usize {
        self.len()
    }
}

impl Written for crate::out::Out {
    fn written(&self) -> usize {
        self.len()
    }
}

/// The steps every request takes, the same for every protocol and in this order: counted as
/// received, checked against the command mask (a refusal answered in the protocol's form, and
/// counted and logged when the server is a read-only replica), a delayed `flush_all` whose
/// time has come carried out, then the request itself.
pub fn execute<E: Exec>(
    e: &mut E,
    store: &dyn Store,
    shared: &Shared,
    req: &E::Req<'_>,
    now: u64,
    out: &mut E::Out,
) -> Next {
    e.received(req);
    if let Some(by_mask) = e.denied(shared, req) {
        let why = shared.read_only_refusal(by_mask);
        return e.refuse(req, why, out);
    }
    let start = out.written();
    match flush_if_due(store, shared, now).and_then(|_| e.run(req, out)) {
        Ok(next) => next,
        Err(err) => e.failed(req, err, start, out),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limited_lines_keep_their_kind_and_count() {
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let keep = lines.clone();
        let log = LogSink::new(move |_, m| keep.lock().unwrap().push(m.to_string()));
        let clone = log.clone();
        log.limited("a", "first a");
        clone.limited("a", "second a");
        log.limited("b", "first b");
        log.limited("a", "third a");
        assert_eq!(*lines.lock().unwrap(), ["first a", "first b"]);
        // Once the pace has passed, the next line tells how many were left out.
        for l in log.limited.lock().unwrap().iter_mut() {
            l.last -= LOG_PACE;
        }
        log.limited("a", "fourth a");
        assert_eq!(
            lines.lock().unwrap()[2],
            "fourth a (2 more like it in the last 10 s not logged)"
        );
    }

    #[test]
    fn a_value_over_the_limit_is_refused_with_its_reason() {
        let mut sh = Shared::new(0, 1 << 20);
        sh.max_value_size = 10;
        assert_eq!(sh.check_value("test", 10), Ok(()));
        let e = sh.check_value("test", 11).unwrap_err();
        assert_eq!(
            e.to_string(),
            "value of 11 bytes over the server's --max-value-size 10"
        );
    }
}
