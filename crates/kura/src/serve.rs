//! `kura serve`: open the database, then listen (so no request is ever accepted before the
//! database is open and recovered), serve until SIGTERM / SIGINT, then finish, sync and close.

use kura_engine::name::parse_size;
use kura_server::backup::BackupDir;
use kura_server::context::{LogSink, Shared};
use kura_server::mask::Mask;
use kura_server::net::{self, Config};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod log;
mod reload;
use kura_server::context::Level;
use log::{Dest, Format, Log};

#[derive(clap::Args)]
pub struct ServeArgs {
    #[arg(default_value = "casket.kh", help = name_help())]
    name: String,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port for every protocol (told apart by the first byte of a connection).
    #[arg(long, default_value_t = 1978)]
    port: u16,
    /// An extra port that serves the memcached protocols only (text and binary), e.g. 11211:
    /// a line that looks like HTTP is hung up on there, as memcached does.
    #[arg(long)]
    memcached_port: Option<u16>,
    /// Worker threads, each with its own event loop (default: the number of cores; at
    /// least 1).
    #[arg(long, value_parser = at_least_one)]
    threads: Option<usize>,
    /// Connections served at once; more are refused with an error.
    #[arg(long, default_value_t = 4096)]
    max_connections: usize,
    /// Largest item of the memcached protocols (k/m/g suffixes; at most 1g).
    #[arg(long, default_value = "1m", value_parser = item_size)]
    max_item_size: u64,
    /// Largest value a request may carry, on every protocol: Tokyo Tyrant and Kyoto Tycoon,
    /// binary and HTTP, and memcached's (which also keep --max-item-size). A larger one is
    /// refused with the protocol's error and nothing is stored (k/m/g suffixes; at most 1g).
    #[arg(long, default_value = "64m", value_parser = item_size)]
    max_value_size: u64,
    /// Bytes of large requests the server holds in memory at once, beyond 128 KiB per
    /// connection: a connection whose request is larger waits for room before it is read on
    /// (k/m/g suffixes). At least the largest request of any protocol (about three times
    /// --max-value-size, for HTTP bodies).
    #[arg(long, default_value = "1g", value_parser = parse_bytes)]
    max_inflight: u64,
    /// Close connections idle for this many seconds (default: never).
    #[arg(long)]
    timeout: Option<u64>,
    /// Write the process id to this file (removed at exit if it still holds this process's
    /// id). Refuses to start when the file names a running process.
    #[arg(long)]
    pid: Option<PathBuf>,
    /// Append log lines to this file (reopened on SIGHUP) instead of stderr; `syslog` sends
    /// them to the local syslog socket /dev/log (facility daemon; journald reads it),
    /// `syslog:SOCKET` to another one.
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Detach from the terminal and run in the background. Returns once the server listens;
    /// exits 2 with the reason when it cannot start (database, port). Without --log, the log
    /// goes to the local syslog socket /dev/log when one answers there, else to PATH.log
    /// beside the database (kura-PORT.log in the working directory for `*` and `+`), and the
    /// command says which.
    #[arg(long)]
    daemon: bool,
    /// Refuse these operations on every protocol: a comma-separated list of Tyrant command
    /// names (put, putkeep, putcat, putshl, putnr, out, get, mget, vsiz, iterinit, iternext,
    /// fwmkeys, addint, adddouble, ext, sync, optimize, vanish, copy, restore, setmst, rnum,
    /// size, stat, misc, repl) or groups (all, allorg = the Tyrant binary protocol, allmc,
    /// allhttp, allredis, allread, allwrite, allmanage). `out` refuses memcached `delete`, HTTP `DELETE`
    /// and Kyoto Tycoon `remove` too. Repeatable.
    #[arg(long, value_name = "NAMES")]
    mask: Vec<String>,
    /// Allow these operations again (applied after every --mask). Repeatable.
    #[arg(long, value_name = "NAMES")]
    unmask: Vec<String>,
    /// Server id: reported by Tyrant `stat`, and the origin of this server's writes in the
    /// update log (default: derived from the port). Every server of a replication set needs
    /// its own.
    #[arg(long)]
    sid: Option<u32>,
    /// Keep an update log in this directory: every change, with a time stamp and the server
    /// id of its origin. Replicas follow it; `kura db restore` replays it onto a backup.
    #[arg(long, value_name = "DIR")]
    ulog: Option<PathBuf>,
    /// The update log's size cap (k/m/g suffixes; 0 = none): the oldest files are removed
    /// past it even if a replica still needs them (that replica then bootstraps again).
    #[arg(long, default_value = "1g", value_parser = parse_bytes)]
    ulog_limit: u64,
    /// Keep update log files at least this many seconds (for point-in-time restores), even
    /// once every replica has them.
    #[arg(long, default_value_t = 86400)]
    ulog_keep: u64,
    /// Follow this master (HOST:PORT): apply its update log, bootstrapping from a snapshot of
    /// it when this database is new or too far behind. Client writes are refused unless
    /// --replica-writes.
    #[arg(long, value_name = "HOST:PORT")]
    master: Option<String>,
    /// The protocol the master (--master, or Tyrant `setmst`) speaks: `kura` (Kura's own
    /// stream: flags, expiry, snapshots), `tyrant` (a Tokyo Tyrant ttserver's `repl`: its
    /// commands are redone here; no snapshot, so seed the database first) or `kyoto` (a Kyoto
    /// Tycoon ktserver's binary replication, for a database with expiration times; no
    /// snapshot either). Default: found out by probing the master (Tyrant `stat`, then Kyoto
    /// Tycoon's `/rpc/report`).
    #[arg(long, value_name = "PROTOCOL", value_parser = master_protocol)]
    master_protocol: Option<kura_server::repl::MasterProtocol>,
    /// What a bootstrap from a Kura master's snapshot does with the records this database
    /// holds: `refuse` (do not follow; the log and `stat` say why), `replace` (discard them,
    /// logging how many) or `merge` (keep them: keys only held here stay, keys both hold take
    /// the master's value unless changed here after the snapshot). Default: `merge` with
    /// --replica-writes, else `refuse`. A replica that followed the same master before holds a
    /// copy of it, which a new snapshot of that master replaces in any mode.
    #[arg(long, value_name = "MODE", value_parser = bootstrap_mode)]
    bootstrap: Option<kura_server::repl::Bootstrap>,
    /// Where a replica with no saved position yet starts: after this time stamp of the
    /// master's log (its units: µs for kura and tyrant, Kyoto Tycoon's for kyoto). For a
    /// replica seeded from a copy of the master's data, as ttserver's `-rts` file.
    #[arg(long, value_name = "TS")]
    master_ts: Option<u64>,
    /// A replica that also takes writes from clients (two masters following each other:
    /// concurrent writes of a key converge on the one with the later time stamp).
    #[arg(long)]
    replica_writes: bool,
    /// Hold the reply to each client write until this many replicas following on Kura's
    /// stream have acknowledged it (applied and durable there), up to
    /// --sync-replicas-timeout. 0: replies do not wait for replicas. Needs --ulog.
    #[arg(long, value_name = "N", default_value_t = 0)]
    sync_replicas: usize,
    /// How long a reply waits for --sync-replicas, in milliseconds; then it is sent anyway,
    /// unacknowledged (counted in `repl_sync_timeouts` and logged).
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    sync_replicas_timeout: u64,
    /// What a write's reply does when --sync-replicas-timeout runs out: `reply` (sent anyway,
    /// as Redis's WAIT returns) or `close` (the client's connection is closed without it: no
    /// write is acknowledged that the replicas do not hold).
    #[arg(long, value_name = "ACTION", default_value = "reply", value_parser = ["reply", "close"])]
    sync_replicas_on_timeout: String,
    /// The directory that copies asked for over the network go to: Tyrant `copy PATH` writes
    /// a hot copy to PATH in DIR (relative to it; `..`, and symbolic links that lead out, are
    /// refused), Tyrant `copy @NAME` and Kyoto Tycoon `synchronize command=NAME` write a hot
    /// copy DIR/NAME-<unix µs>.<ext> and run the executable DIR/NAME with that path and time
    /// stamp (killed after 60 s; success only on status 0). Without it, they are refused.
    #[arg(long, value_name = "DIR")]
    backup_dir: Option<PathBuf>,
    /// A Lua script for Tokyo Tyrant's `ext` calls (`tcrmgr ext`, HTTP `X-TT-XNAME`): its
    /// global functions `f(key, value)`. Loaded at start; reloaded on SIGHUP.
    #[arg(long, value_name = "FILE")]
    ext: Option<PathBuf>,
    /// A Lua script for Kyoto Tycoon's `play_script` (HTTP RPC and binary): its global
    /// functions `f(inmap, outmap)`. Loaded at start; reloaded on SIGHUP.
    #[arg(long, value_name = "FILE")]
    scr: Option<PathBuf>,
    /// Call the --ext script's function NAME every PERIOD seconds (fractions allowed), on a
    /// thread of its own, as ttserver's `-extpc` (e.g. an expiry sweep). Repeatable.
    #[arg(long, num_args = 2, value_names = ["NAME", "PERIOD"])]
    extpc: Vec<String>,
    /// The longest one script call may run, in seconds (fractions allowed): a call past it is
    /// stopped with an error reply.
    #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = seconds)]
    script_timeout: Duration,
    /// The most memory one script interpreter may hold (one per worker thread and script;
    /// k/m/g suffixes). An allocation past it fails the call with an error reply.
    #[arg(long, value_name = "BYTES", default_value = "64m", value_parser = parse_bytes)]
    script_memory: u64,
    /// TLS: the server's certificate chain (PEM, leaf first), for --tls-port or --tls-only.
    /// Reloaded with --tls-key on SIGHUP (new connections get the new ones).
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// TLS: the private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// TLS: certificate authorities (PEM); with it, every TLS client must present a
    /// certificate signed by one of them, or the handshake is refused.
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// A TLS port beside the plain one: every protocol, told apart by the first decrypted
    /// byte as on the plain port.
    #[arg(long, value_name = "PORT")]
    tls_port: Option<u16>,
    /// --port (and --memcached-port) speak TLS only.
    #[arg(long)]
    tls_only: bool,
    /// The users file: one user a line, `NAME RIGHTS SECRET...` (written by `kura users`).
    /// With it, memcached clients log in (SASL PLAIN on the binary protocol, a first `set` of
    /// `NAME PASSWORD` on the text protocol), HTTP requests carry Basic or Bearer credentials,
    /// and each user may run only what their rights (read, write, admin) grant.
    #[arg(long, value_name = "FILE")]
    users: Option<PathBuf>,
    /// Serve the Tokyo Tyrant and Kyoto Tycoon binary protocols, which have no authentication,
    /// to every peer. Without it they are refused to non-loopback peers (and to every peer
    /// when --users is given) unless TLS verified a client certificate.
    #[arg(long)]
    allow_unauthenticated_binary: bool,
    /// For tests only: count loopback peers as remote (the binary-protocol rule).
    #[arg(long, hide = true)]
    test_loopback_is_remote: bool,
    /// Run as this user (and their group) once the ports are bound and the files opened:
    /// for a server started as root.
    #[arg(long, value_name = "NAME")]
    user: Option<String>,
    /// Read flags from this TOML file: each key a long flag (`port = 1978`, `mask = ["out"]`,
    /// `daemon = true`, `name = "data.kh"`); flags on the command line override it (a list
    /// flag given there replaces the file's list). An unknown key is an error. SIGHUP reads
    /// it again and applies log-level, mask and unmask; the log names what else changed.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the effective configuration (file, command line and defaults) as the TOML
    /// --config reads, and exit.
    #[arg(long)]
    print_config: bool,
    /// Log lines of this level and above: error, warn, info or debug.
    #[arg(long, value_name = "LEVEL", default_value = "info", value_parser = log_level)]
    log_level: Level,
    /// Log lines as `text` (`TIME LEVEL kura[PID]: message key=value …`, the time in RFC
    /// 3339 UTC) or `json` (one object a line: ts, level, pid, msg, fields).
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = Format::parse)]
    log_format: Format,
    /// Serve Prometheus metrics (`GET /metrics`) on this port too, as plain HTTP on --host
    /// (they are on the main port's HTTP interface as well). Refused by `--mask stat`.
    #[arg(long, value_name = "PORT")]
    metrics_port: Option<u16>,
}

fn log_level(s: &str) -> Result<Level, String> {
    Level::parse(s).ok_or_else(|| format!("{s}: expected error, warn, info or debug"))
}

/// Give up root for user `name`: its group, no supplementary groups, then its uid.
fn drop_to(name: &str) -> Result<(u32, u32), String> {
    let cname = std::ffi::CString::new(name).map_err(|_| format!("--user {name:?}: bad name"))?;
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 << 10];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; the result points into `pw` and `buf`.
    let rc = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pw,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() {
        return Err(format!("--user {name}: no such user"));
    }
    let (uid, gid) = (pw.pw_uid, pw.pw_gid);
    // SAFETY: plain system calls on this process's credentials.
    unsafe {
        if libc::geteuid() != 0 && libc::geteuid() != uid {
            return Err(format!(
                "--user {name}: only root can change to another user"
            ));
        }
        if libc::setgroups(0, std::ptr::null()) != 0 && libc::geteuid() == 0 {
            return Err(format!(
                "--user {name}: setgroups: {}",
                std::io::Error::last_os_error()
            ));
        }
        if libc::setgid(gid) != 0 {
            return Err(format!(
                "--user {name}: setgid: {}",
                std::io::Error::last_os_error()
            ));
        }
        if libc::setuid(uid) != 0 {
            return Err(format!(
                "--user {name}: setuid: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok((uid, gid))
}

fn seconds(s: &str) -> Result<Duration, String> {
    s.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v > 0.0 && *v <= 86400.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{s}: expected seconds, more than 0 and at most 86400"))
}

/// The database name's help: every kind, from the registry.
fn name_help() -> String {
    format!(
        "Database name: {}, optionally followed by #param=value tuning (created when missing, \
         and said so in the log; its directory must exist)",
        kura_engine::registry::usage()
    )
}

fn bootstrap_mode(s: &str) -> Result<kura_server::repl::Bootstrap, String> {
    kura_server::repl::Bootstrap::parse(s)
        .ok_or_else(|| format!("{s}: expected refuse, replace or merge"))
}

fn master_protocol(s: &str) -> Result<kura_server::repl::MasterProtocol, String> {
    kura_server::repl::MasterProtocol::parse(s)
        .ok_or_else(|| format!("{s}: expected kura, tyrant or kyoto"))
}

/// `HOST:PORT` of a master.
fn host_port(s: &str) -> Result<(String, u16), String> {
    let (h, p) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("--master {s}: expected HOST:PORT"))?;
    let port: u16 = p
        .parse()
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| format!("--master {s}: bad port"))?;
    Ok((h.trim_matches(|c| c == '[' || c == ']').to_string(), port))
}

/// The mask from every `--mask`, then every `--unmask`.
fn command_mask(a: &ServeArgs) -> Result<Mask, String> {
    let mut m = Mask::NONE;
    for e in &a.mask {
        m = m.mask(e).map_err(|e| e.to_string())?;
    }
    for e in &a.unmask {
        m = m.unmask(e).map_err(|e| e.to_string())?;
    }
    Ok(m)
}

fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("0 threads would serve nothing: give at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Where a daemon started without `--log` logs: beside its database, or in the working
/// directory for a memory database.
fn default_log(name: &str, port: u16) -> PathBuf {
    let path = name.split('#').next().unwrap_or(name);
    if path == "*" || path == "+" {
        PathBuf::from(format!("kura-{port}.log"))
    } else {
        PathBuf::from(format!("{}.log", path.trim_end_matches('/')))
    }
}

fn item_size(s: &str) -> Result<u64, String> {
    match parse_size(s) {
        Some(n) if (1..=1 << 30).contains(&n) => Ok(n),
        _ => Err("expected a size from 1 to 1g (k/m/g suffixes)".into()),
    }
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    parse_size(s).ok_or_else(|| "expected a size (k/m/g suffixes)".into())
}

static STOP: AtomicBool = AtomicBool::new(false);
static HUP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

extern "C" fn on_hup(_: libc::c_int) {
    HUP.store(true, Ordering::SeqCst);
}

/// Say what was opened and what its recovery did: the kind, records and size, the time the
/// open (with its recovery) took, what the engine cut off or found damaged.
fn opened(log: &Log, path: &str, store: &dyn kura_engine::Store, took: Duration) {
    let mut fields = vec![
        ("path", path.to_string()),
        ("kind", store.kind().info().about.to_string()),
        ("records", store.count().to_string()),
        ("bytes", store.size().to_string()),
        ("took_ms", format!("{:.1}", took.as_secs_f64() * 1e3)),
    ];
    let cut: u64 = store
        .counters()
        .iter()
        .filter(|(n, _)| n.contains("truncated"))
        .map(|&(_, v)| v)
        .sum();
    fields.push(("recovery_truncated_bytes", cut.to_string()));
    log.write(Level::Info, "opened the database", &fields);
    if cut > 0 {
        log.warn(&format!(
            "recovery: {cut} bytes of a write torn by a crash cut off"
        ));
    }
    let damaged = store.damage_found();
    if !damaged.is_empty() {
        log.warn(&format!(
            "the open found {} damaged regions (`kura db check` lists them)",
            damaged.len()
        ));
    }
}

/// The TLS settings the flags ask for, their files loaded; an error names the flag and file.
fn tls_settings(a: &ServeArgs) -> Result<Option<Arc<net::Tls>>, String> {
    let wanted = a.tls_port.is_some() || a.tls_only;
    match (&a.tls_cert, &a.tls_key) {
        (None, None) if a.tls_ca.is_none() && !wanted => Ok(None),
        (Some(cert), Some(key)) if wanted => net::Tls::load(net::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            ca: a.tls_ca.clone(),
        })
        .map(|t| Some(Arc::new(t))),
        (Some(_), Some(_)) => Err(
            "--tls-cert and --tls-key are given but no port speaks TLS: add --tls-port PORT (a \
             TLS port beside --port) or --tls-only (--port speaks TLS)"
                .into(),
        ),
        _ => Err(
            "TLS needs both --tls-cert FILE and --tls-key FILE (with --tls-port PORT or \
             --tls-only; --tls-ca FILE to require client certificates)"
                .into(),
        ),
    }
}

/// The listeners that speak TLS, by their place: --port, [--memcached-port], [--tls-port].
fn tls_listeners(a: &ServeArgs) -> Vec<usize> {
    let mut v = Vec::new();
    let n = 1 + usize::from(a.memcached_port.is_some());
    if a.tls_only {
        v.extend(0..n);
    }
    if a.tls_port.is_some() {
        v.push(n);
    }
    v
}

/// The process id in the pid file at `path`, if it names a running process other than this one.
fn running_pid(path: &std::path::Path) -> Option<i32> {
    let text = std::fs::read_to_string(path).ok()?;
    let pid: i32 = text.trim().parse().ok().filter(|&p| p > 0)?;
    if pid as u32 == std::process::id() {
        return None;
    }
    // SAFETY: signal 0 only checks whether the process exists; nothing is sent.
    let rc = unsafe { libc::kill(pid, 0) };
    let alive = rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    alive.then_some(pid)
}

/// Whether the pid file at `path` still holds this process's id (so it is ours to remove).
fn pid_file_is_ours(path: &std::path::Path) -> bool {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok())
        == Some(std::process::id())
}

/// Allow enough descriptors for `max_connections` (plus files and listeners): raise the soft
/// limit up to the hard one, and say so when that is still too few.
fn raise_fd_limit(max_connections: usize, log: &Log) {
    let want = max_connections as u64 + 256;
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return;
        }
        if r.rlim_cur < want {
            r.rlim_cur = want.min(r.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
    if r.rlim_cur < want {
        log.warn(&format!(
            "open-file limit {} is below --max-connections {max_connections}: connections past it are refused",
            r.rlim_cur
        ));
    }
}

/// What a daemon tells its parent once it listens (anything else is why it failed).
const READY: &str = "ready";

/// The detached child of `--daemon`, holding the pipe its parent waits on.
struct Daemon(std::fs::File);

impl Daemon {
    /// Fork. The parent waits until the child reports (`report`) that it listens, or why it
    /// could not start, or dies, and exits: 0 once the server is ready, else 2 with the
    /// reason on stderr. So `kura serve --daemon` fails like `kura serve` when the database
    /// cannot be opened or the port is taken. The child starts a new session, keeps the
    /// working directory (relative database paths stay valid), and gets /dev/null as stdin,
    /// stdout and stderr.
    fn detach() -> std::io::Result<Daemon> {
        use std::io::Read;
        use std::os::fd::{AsRawFd, FromRawFd};
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two new descriptors into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the descriptors were just made and are owned by nothing else.
        let (r, w) = unsafe {
            (
                std::fs::File::from_raw_fd(fds[0]),
                std::fs::File::from_raw_fd(fds[1]),
            )
        };
        // SAFETY: no thread has been started yet, so the child may go on running anything.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if pid > 0 {
            drop(w);
            let mut msg = String::new();
            let _ = (&r).read_to_string(&mut msg);
            if msg == READY {
                std::process::exit(0);
            }
            if msg.is_empty() {
                eprintln!("kura: the server stopped before it was ready");
            } else {
                eprintln!("kura: {msg}");
            }
            std::process::exit(2);
        }
        drop(r);
        let null = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")?;
        // SAFETY: plain system calls on descriptors this process owns.
        unsafe {
            libc::setsid();
            for fd in 0..3 {
                libc::dup2(null.as_raw_fd(), fd);
            }
        }
        Ok(Daemon(w))
    }

    /// Tell the waiting parent `msg` (`READY`, or why the server did not start) and let it go.
    fn report(self, msg: &str) {
        use std::io::Write;
        let _ = (&self.0).write_all(msg.as_bytes());
    }
}

/// `kura serve ARGS…` (the words after `serve`): with --config, the file under the command
/// line; with --print-config, the effective configuration printed instead of served.
pub fn main(cli: &[std::ffi::OsString]) -> ExitCode {
    let (a, m) = match crate::conf::resolve(cli) {
        Ok(x) => x,
        Err(e) => {
            let e = e.trim_end();
            match e.strip_prefix("error: ") {
                Some(clap) => eprintln!("kura serve: {clap}"),
                None => eprintln!("kura serve: {e}"),
            }
            return ExitCode::from(2);
        }
    };
    if a.print_config {
        print!("{}", crate::conf::print(&m));
        return ExitCode::SUCCESS;
    }
    let reload = a
        .config
        .clone()
        .map(|file| reload::Reload::new(cli.to_vec(), file, crate::conf::settings(&m)));
    run(a, reload)
}

/// Serve with the settings `a`; `reload`, with --config, reads the file again on SIGHUP.
fn run(a: ServeArgs, reload: Option<reload::Reload>) -> ExitCode {
    // systemd's Type=notify: told once the ports listen, and when a stop begins.
    let notify = crate::sd_notify::Notify::from_env();
    let mask = match command_mask(&a) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("kura: {e}");
            return ExitCode::from(2);
        }
    };
    let master = match a.master.as_deref().map(host_port).transpose() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("kura: {e}");
            return ExitCode::from(2);
        }
    };
    if a.sync_replicas > 0 && a.ulog.is_none() {
        eprintln!(
            "kura: --sync-replicas {} needs --ulog DIR: replicas acknowledge positions in the \
             update log",
            a.sync_replicas
        );
        return ExitCode::from(2);
    }
    let mut a = a;
    let beside = default_log(&a.name, a.port);
    let dir_exists = beside
        .parent()
        .is_none_or(|d| d.as_os_str().is_empty() || d.is_dir());
    // A daemon has no stderr: its log goes to syslog, or to a file, and the command says
    // which. (Where the database's directory is missing, the open fails and says so.)
    let syslog = (a.daemon && a.log.is_none())
        .then(log::local_syslog)
        .flatten();
    if let Some(sock) = syslog {
        eprintln!(
            "kura: --daemon without --log: the log goes to syslog ({})",
            sock.display()
        );
        a.log = Some(PathBuf::from(format!("syslog:{}", sock.display())));
    } else if a.daemon && a.log.is_none() && dir_exists {
        let p = beside;
        let shown = std::env::current_dir().map_or(p.clone(), |d| d.join(&p));
        eprintln!(
            "kura: --daemon without --log: the log goes to {}",
            shown.display()
        );
        a.log = Some(p);
    }
    let mut daemon = None;
    if a.daemon {
        match Daemon::detach() {
            Ok(d) => daemon = Some(d),
            Err(e) => {
                eprintln!("kura: cannot run in the background: {e}");
                return ExitCode::from(2);
            }
        }
    }
    // A failure before the server is ready: logged, and told to the waiting parent of a
    // daemon (which prints it and exits non-zero).
    let fail = |log: Option<&Log>, daemon: Option<Daemon>, msg: String| {
        match log {
            Some(l) => l.error(&msg),
            None => eprintln!("kura: {msg}"),
        }
        if let Some(d) = daemon {
            d.report(&msg);
        }
        ExitCode::from(2)
    };
    let dest = a
        .log
        .as_deref()
        .map_or(Dest::Stderr, |p| Dest::parse(&p.to_string_lossy()));
    let log = match Log::open(dest, a.log_format, a.log_level) {
        Ok(l) => Arc::new(l),
        Err(e) => return fail(None, daemon, format!("cannot open the log: {e}")),
    };
    // SAFETY: the handlers only store to atomics, which is async-signal-safe.
    unsafe {
        libc::signal(
            libc::SIGTERM,
            on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
        libc::signal(
            libc::SIGINT,
            on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
        libc::signal(
            libc::SIGHUP,
            on_hup as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let least =
        kura_server::net::min_inflight(a.max_item_size as usize, a.max_value_size as usize) as u64;
    if a.max_inflight < least {
        let msg = format!(
            "--max-inflight {} is below the largest request the server accepts ({least} bytes)",
            a.max_inflight
        );
        return fail(Some(&log), daemon, msg);
    }
    let tls = match tls_settings(&a) {
        Ok(t) => t,
        Err(e) => return fail(Some(&log), daemon, e),
    };
    raise_fd_limit(a.max_connections, &log);
    if let Some(p) = &a.pid {
        if let Some(pid) = running_pid(p) {
            let msg = format!(
                "the pid file {} names process {pid}, which is running (another server?); stop \
                 it, or choose another --pid",
                p.display()
            );
            return fail(Some(&log), daemon, msg);
        }
    }
    // Open (and recover) the database before listening. With an update log, the log is the
    // commit point: it takes the name's sync mode, and the database is synced lazily.
    let (open_name, ulog_sync) = match &a.ulog {
        Some(_) => match kura_engine::ulog::logged::database_name(&a.name) {
            Ok(x) => x,
            Err(e) => {
                let msg = crate::db::open_error("open", &a.name, &e);
                return fail(Some(&log), daemon, msg);
            }
        },
        None => (a.name.clone(), kura_engine::SyncMode::DEFAULT),
    };
    let opening = std::time::Instant::now();
    let store = match kura_engine::open_as(&open_name, kura_engine::OpenMode::Create) {
        Ok(o) => {
            let path = a.name.split('#').next().unwrap_or(&a.name);
            if o.created {
                log.line(&format!("created new database {path}"));
            }
            opened(&log, path, &*o.store, opening.elapsed());
            o.store
        }
        Err(e) => {
            let hint = crate::db::migrate_hint(&a.name).unwrap_or_default();
            return fail(
                Some(&log),
                daemon,
                format!("{}{hint}", crate::db::open_error("open", &a.name, &e)),
            );
        }
    };
    let sid = a.sid.unwrap_or(if a.port != 0 {
        u32::from(a.port)
    } else {
        std::process::id()
    });
    let mut logged = None;
    let store: Arc<dyn kura_engine::Store> = match &a.ulog {
        None => store,
        Some(dir) => {
            let mut cfg = kura_engine::ulog::Config::new(dir, sid);
            cfg.sync = ulog_sync;
            cfg.limit = a.ulog_limit;
            cfg.keep = Duration::from_secs(a.ulog_keep);
            if cfg.limit > 0 {
                cfg.file_size = cfg.file_size.min((cfg.limit / 4).max(1 << 20));
            }
            let opened = kura_engine::ulog::Ulog::open(cfg).and_then(|l| {
                if l.torn_tail > 0 {
                    log.warn(&format!(
                        "update log: {} bytes of a write torn by a crash cut off",
                        l.torn_tail
                    ));
                }
                kura_engine::ulog::logged::Logged::new(store.clone(), l)
            });
            match opened {
                Ok(l) => {
                    if l.redone > 0 {
                        log.line(&format!(
                            "update log: {} records redone onto the database",
                            l.redone
                        ));
                    }
                    l.set_lww(master.is_some() && a.replica_writes);
                    logged = Some(l.clone());
                    l
                }
                Err(e) => {
                    let _ = store.close();
                    let msg = format!("cannot open the update log {}: {e}", dir.display());
                    return fail(Some(&log), daemon, msg);
                }
            }
        }
    };
    // Paths from the network are confined to the backup directory, never into the database.
    let backup_dir = match &a.backup_dir {
        None => None,
        Some(dir) => {
            let path = kura_engine::name::split_name(&a.name)
                .ok()
                .map(|(p, _)| PathBuf::from(p))
                .filter(|_| store.kind().info().caps.persistent);
            match BackupDir::new(dir, path.as_deref()) {
                Ok(d) => {
                    log.line(&format!("backup directory {}", d.root().display()));
                    Some(d)
                }
                Err(e) => {
                    let _ = store.close();
                    return fail(Some(&log), daemon, e);
                }
            }
        }
    };
    let scripts = if a.ext.is_some() || a.scr.is_some() {
        let conf = kura_server::script::ScriptConf {
            ext: a.ext.clone(),
            scr: a.scr.clone(),
            timeout: a.script_timeout,
            memory: usize::try_from(a.script_memory).unwrap_or(usize::MAX),
        };
        match kura_server::script::Scripts::load(conf) {
            Ok(s) => {
                for p in a.ext.iter().chain(&a.scr) {
                    log.line(&format!("script {} loaded", p.display()));
                }
                Some(Arc::new(s))
            }
            Err(e) => {
                let _ = store.close();
                return fail(Some(&log), daemon, e);
            }
        }
    } else {
        None
    };
    // `--extpc NAME PERIOD` pairs.
    let mut extpc = Vec::new();
    for pair in a.extpc.chunks(2) {
        let [name, period] = pair else { break };
        match seconds(period) {
            Ok(p) if a.ext.is_some() && !p.is_zero() => extpc.push((name.clone(), p)),
            Ok(_) if a.ext.is_none() => {
                let _ = store.close();
                return fail(Some(&log), daemon, "--extpc needs an --ext script".into());
            }
            _ => {
                let _ = store.close();
                let msg = format!("--extpc {name} {period}: the period is a number of seconds");
                return fail(Some(&log), daemon, msg);
            }
        }
    }
    // With a Tyrant script, every write takes the locks of `ext`'s options (shared): a
    // record-locked call is atomic against every writer of its key. Without one, writes
    // take no such lock.
    let ext_shared = Arc::new(kura_server::script::tt_lock::ExtShared::new(
        a.script_timeout,
    ));
    let store: Arc<dyn kura_engine::Store> = if a.ext.is_some() {
        Arc::new(kura_server::script::tt_lock::Locked::new(
            store,
            ext_shared.clone(),
        ))
    } else {
        store
    };
    let users = match &a.users {
        None => None,
        Some(p) => match kura_server::auth::Users::load(p) {
            Ok(u) => {
                log.line(&format!("users file {}: {} users", p.display(), u.len()));
                Some(u)
            }
            Err(e) => {
                let _ = store.close();
                return fail(Some(&log), daemon, e);
            }
        },
    };
    let mut listeners = Vec::new();
    for port in std::iter::once(a.port)
        .chain(a.memcached_port)
        .chain(a.tls_port)
    {
        match std::net::TcpListener::bind((a.host.as_str(), port)) {
            Ok(l) => {
                if let Ok(addr) = l.local_addr() {
                    let tls = if tls_listeners(&a).contains(&listeners.len()) {
                        ", TLS"
                    } else {
                        ""
                    };
                    log.line(&format!("listening on {addr} (database {}{tls})", a.name));
                }
                listeners.push(l);
            }
            Err(e) => {
                let _ = store.close();
                let msg = format!("cannot listen on {}:{port}: {e}", a.host);
                return fail(Some(&log), daemon, msg);
            }
        }
    }
    let metrics_listener = match a.metrics_port {
        None => None,
        Some(port) => match std::net::TcpListener::bind((a.host.as_str(), port)) {
            Ok(l) => {
                if let Ok(addr) = l.local_addr() {
                    log.line(&format!("metrics served on http://{addr}/metrics"));
                }
                Some(l)
            }
            Err(e) => {
                let _ = store.close();
                let msg = format!("cannot listen on {}:{port} (--metrics-port): {e}", a.host);
                return fail(Some(&log), daemon, msg);
            }
        },
    };
    if let Some(p) = &a.pid {
        if let Err(e) = std::fs::write(p, format!("{}\n", std::process::id())) {
            log.warn(&format!("cannot write the pid file {}: {e}", p.display()));
        }
    }
    let public = listeners
        .iter()
        .filter_map(|l| l.local_addr().ok())
        .find(|addr| !addr.ip().is_loopback());
    if let Some(addr) = public {
        if users.is_none() {
            log.warn(&format!(
                "listening on {addr}, not a loopback address, without authentication: \
                 any client that reaches it may read and change the database (see --users)"
            ));
        }
        if a.allow_unauthenticated_binary {
            log.warn(&format!(
                "--allow-unauthenticated-binary: the Tyrant and Kyoto Tycoon binary \
                 protocols serve any peer that reaches {addr}, with every right"
            ));
        }
    }
    if let Some(name) = &a.user {
        match drop_to(name) {
            Ok((uid, gid)) => log.line(&format!("running as user {name} (uid {uid}, gid {gid})")),
            Err(e) => {
                let _ = store.close();
                return fail(Some(&log), daemon, e);
            }
        }
    } else if unsafe { libc::geteuid() } == 0 {
        log.warn("running as root (see --user)");
    }
    if let Some(d) = daemon {
        d.report(READY);
    }
    if let Some(n) = &notify {
        let state = format!("READY=1\nMAINPID={}\nSTATUS=serving", std::process::id());
        if let Err(e) = n.send(&state) {
            log.line(&format!("cannot tell systemd the server is ready: {e}"));
        }
    }
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let cfg = Config {
        threads,
        max_connections: a.max_connections,
        max_item_size: a.max_item_size as usize,
        max_value_size: a.max_value_size as usize,
        max_inflight: usize::try_from(a.max_inflight).unwrap_or(usize::MAX),
        idle_timeout: a.timeout.map(Duration::from_secs),
        // The second listener, when there is one, is --memcached-port.
        memcached_only: if a.memcached_port.is_some() {
            vec![1]
        } else {
            Vec::new()
        },
        tls_listeners: tls_listeners(&a),
        tls: tls.clone(),
    };
    let port = listeners
        .first()
        .and_then(|l| l.local_addr().ok())
        .map_or(a.port, |addr| addr.port());
    if !mask.is_empty() {
        log.line(&format!(
            "command mask: {} refused over Tyrant",
            mask.names(kura_server::mask::Proto::Tyrant).join(",")
        ));
    }
    let mut shared = Shared::new(kura_engine::store::now_secs(), a.max_item_size);
    shared.max_value_size = a.max_value_size;
    shared.mask.set(mask);
    shared.db_name = a.name.clone();
    shared.port = port;
    shared.threads = threads;
    shared.max_connections = a.max_connections;
    shared.host = a.host.clone();
    shared.idle_timeout = a.timeout.unwrap_or(0);
    shared.sid = sid;
    let pos_file = store.kind().info().caps.persistent.then(|| {
        PathBuf::from(format!(
            "{}.replica",
            a.name.split('#').next().unwrap_or("")
        ))
    });
    let repl = {
        let log = log.clone();
        let mut r = kura_server::repl::Replication::new(
            sid,
            store.clone(),
            logged.clone(),
            pos_file,
            a.replica_writes,
            Box::new(move |level, m: &str| log.write(level, m, &[])),
        );
        r.protocol = a.master_protocol;
        r.bootstrap = a.bootstrap.unwrap_or(if a.replica_writes {
            kura_server::repl::Bootstrap::Merge
        } else {
            kura_server::repl::Bootstrap::Refuse
        });
        r.initial_ts = a.master_ts;
        if a.sync_replicas > 0 {
            let mut s = kura_server::repl::acks::SyncAcks::new(
                a.sync_replicas,
                Duration::from_millis(a.sync_replicas_timeout),
            );
            s.close_on_timeout = a.sync_replicas_on_timeout == "close";
            r.sync_acks = Some(Arc::new(s));
        }
        Arc::new(r)
    };
    if let Some(m) = master.clone() {
        log.line(&format!(
            "following the master {}:{} ({}; bootstrap: {})",
            m.0,
            m.1,
            a.master_protocol.map_or_else(
                || "its protocol found out by a probe".to_string(),
                |p| format!("{} protocol", p.name())
            ),
            repl.bootstrap.name()
        ));
        repl.set_master(Some(m));
        shared.read_only.store(!a.replica_writes, Ordering::Relaxed);
    }
    if let Some(sa) = &repl.sync_acks {
        log.line(&format!(
            "client writes wait for {} replica(s) to acknowledge them, up to {} ms (then {})",
            sa.need,
            sa.timeout.as_millis(),
            if sa.close_on_timeout {
                "the connection is closed unanswered"
            } else {
                "the reply is sent anyway"
            }
        ));
    }
    shared.repl = Some(repl.clone());
    let follower = kura_server::repl::follow::start(repl.clone()).ok();
    shared.backup_dir = backup_dir;
    shared.scripts = scripts.clone();
    shared.ext = ext_shared;
    shared.access = kura_server::auth::Access::new(
        users,
        a.allow_unauthenticated_binary,
        a.test_loopback_is_remote,
    );
    shared.log = {
        let log = log.clone();
        LogSink::new(move |level, m| log.write(level, m, &[]))
    };
    let shared = Arc::new(shared);
    let stop = Arc::new(AtomicBool::new(false));
    let metrics = metrics_listener.and_then(|l| {
        kura_server::metrics::serve_port(l, store.clone(), shared.clone(), stop.clone())
            .map_err(|e| log.error(&format!("cannot serve the metrics port: {e}")))
            .ok()
    });
    // Watch the signal flags: stop the workers; reopen the log and reload the scripts.
    let watcher = {
        let (stop, log, notify) = (stop.clone(), log.clone(), notify);
        let (shared, users_file) = (shared.clone(), a.users.clone());
        let mut reload = reload;
        std::thread::spawn(move || loop {
            if HUP.swap(false, Ordering::SeqCst) {
                log.reopen();
                log.line("log reopened");
                if let Some(r) = &mut reload {
                    r.reload(&log, &shared);
                }
                if let Some(t) = &tls {
                    let f = t.files();
                    match t.reload() {
                        Ok(()) => log.line(&format!(
                            "TLS certificate {} and key {} reloaded: new connections use them",
                            f.cert.display(),
                            f.key.display()
                        )),
                        Err(e) => log.line(&format!(
                            "TLS reload failed, the certificate in use stays: {e}"
                        )),
                    }
                }
                if let Some(p) = &users_file {
                    let r = kura_server::auth::Users::load(p).and_then(|u| {
                        let n = u.len();
                        shared.access.replace_users(u).map_err(String::from)?;
                        Ok(n)
                    });
                    match r {
                        Ok(n) => {
                            log.line(&format!("users file {} reloaded: {n} users", p.display()))
                        }
                        Err(e) => log.line(&format!(
                            "users file reload failed, the old users stay: {e}"
                        )),
                    }
                }
                if let Some(s) = &scripts {
                    match s.reload() {
                        Ok(()) => log.line("scripts reloaded"),
                        Err(e) => {
                            log.warn(&format!("script reload failed, the old scripts stay: {e}"))
                        }
                    }
                }
            }
            if STOP.load(Ordering::SeqCst) || stop.load(Ordering::SeqCst) {
                if let Some(n) = &notify {
                    let _ = n.send("STOPPING=1\nSTATUS=stopping: finishing requests, syncing");
                }
                stop.store(true, Ordering::SeqCst);
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        })
    };
    let timers: Vec<_> = extpc
        .into_iter()
        .map(|(name, period)| {
            let (store, shared, stop) = (store.clone(), shared.clone(), stop.clone());
            log.line(&format!(
                "calling ext {name} every {} s",
                period.as_secs_f64()
            ));
            std::thread::spawn(move || {
                kura_server::script::tt::extpc(store, shared, name, period, stop)
            })
        })
        .collect();
    let served = net::serve(listeners, store.clone(), shared, cfg, stop.clone());
    stop.store(true, Ordering::SeqCst);
    for t in timers {
        let _ = t.join();
    }
    stop.store(true, Ordering::SeqCst);
    let _ = watcher.join();
    if let Some(m) = metrics {
        let _ = m.join();
    }
    repl.stop.store(true, Ordering::SeqCst);
    if let Some(f) = follower {
        let _ = f.join();
    }
    let mut code = ExitCode::SUCCESS;
    if let Err(e) = served {
        log.error(&format!("server error: {e}"));
        code = ExitCode::from(1);
    }
    match store.close() {
        Ok(()) => log.line("stopped; database synced and closed"),
        Err(e) => {
            log.error(&format!("closing the database failed: {e}"));
            code = ExitCode::from(1);
        }
    }
    // Only our own: a pid file another process has written since is left to it.
    if let Some(p) = a.pid.as_ref().filter(|p| pid_file_is_ours(p)) {
        let _ = std::fs::remove_file(p);
    }
    code
}
