//! The connection loop: worker threads, each with its own event loop (mio), accepting from the
//! shared listeners and serving their connections. Per read, every complete request in the
//! buffer is decoded and executed, and all their replies go out in one write. Nothing is shared
//! between connections but the store and a few counters.
//!
//! Protocols are told apart by the first byte of a connection ([`sniff`]): memcached text and
//! binary, Tokyo Tyrant binary, HTTP (Tyrant's and Kyoto Tycoon's) and Redis, each with its own codec
//! (`kura_proto`) and executor, all on the same store.
//!
//! Here: the settings, the protocol sniff, the in-flight budget and the limits, and `serve`,
//! which starts the workers. `worker.rs` is a worker's event loop and its connections;
//! `wire.rs` the wire adapters (one `Wire` per protocol: decode, execute) and the loop that
//! drives them over a connection's buffer; `commit.rs` the commit thread (one fsync for every
//! worker waiting).

use crate::context::Shared;
use kura_engine::Store;
use kura_proto::mc_text::Limits;
use kura_proto::{http, kt_bin, resp, tt_bin};
use mio::net::TcpListener;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod commit;
pub mod tls;
mod wire;
mod worker;

use commit::*;
use tls::Link;
pub use tls::{Tls, TlsFiles, TlsInfo};
use wire::*;
use worker::*;

pub(crate) use wire::login_failed;

/// Server settings.
#[derive(Clone, Debug)]
pub struct Config {
    pub threads: usize,
    pub max_connections: usize,
    /// memcached's item size limit (text and binary).
    pub max_item_size: usize,
    /// Largest value of every protocol (`--max-value-size`): the codecs' limit, and that of
    /// the executors' check, [`Shared::max_value_size`], which must be the same.
    pub max_value_size: usize,
    /// Bytes of requests in flight that connections may hold beyond their free allowance,
    /// server-wide ([`Budget`]); at least the largest request any protocol accepts.
    pub max_inflight: usize,
    /// Close connections idle for longer than this.
    pub idle_timeout: Option<Duration>,
    /// The listeners (by their place in the list given to [`serve`]) that serve the memcached
    /// protocols only, text and binary: memcached's own port, where a line that looks like
    /// HTTP is hung up on rather than served as HTTP.
    pub memcached_only: Vec<usize>,
    /// The listeners (by their place in the list) that speak TLS only, with [`Config::tls`].
    pub tls_listeners: Vec<usize>,
    /// The certificate and key of those listeners (reloaded in place on SIGHUP).
    pub tls: Option<Arc<Tls>>,
}

/// The protocol of a connection, from its first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    MemcachedText,
    MemcachedBinary,
    TokyoTyrant,
    KyotoBinary,
    Http,
    Redis,
}

/// Tell the protocol from the first byte a client sends: 0x80 memcached binary, 0xC8 Tokyo
/// Tyrant, 0xB1 / 0xB4 / 0xB8–0xBA Kyoto Tycoon's binary protocol, `*` a Redis multibulk, an
/// upper-case letter an HTTP method or a Redis inline command (told apart by the whole first
/// line: [`sniff_line`]), anything else memcached text (whose commands are lower-case and never
/// start with `*`). On a memcached-only port: 0x80 binary, anything else text, as memcached
/// tells them.
pub fn sniff(first: u8, memcached_only: bool) -> Protocol {
    match first {
        0x80 => Protocol::MemcachedBinary,
        _ if memcached_only => Protocol::MemcachedText,
        0xC8 => Protocol::TokyoTyrant,
        b if kt_bin::is_magic(b) => Protocol::KyotoBinary,
        b'*' => Protocol::Redis,
        b'A'..=b'Z' => Protocol::Http,
        _ => Protocol::MemcachedText,
    }
}

/// The longest first line [`sniff_line`] waits for: a longer one is HTTP's (whose codec
/// refuses it as HTTP does).
pub const SNIFF_LINE_MAX: usize = 8 << 10;

/// An upper-case first line (through its `\n`, or [`SNIFF_LINE_MAX`] bytes without one): an
/// HTTP request line (`METHOD TARGET HTTP/x.y`), or else a Redis inline command (`PING`,
/// `SET k v`, typed by hand).
pub fn sniff_line(line: &[u8]) -> Protocol {
    let Some(nl) = line.iter().position(|&b| b == b'\n') else {
        return Protocol::Http;
    };
    let l = line[..nl].strip_suffix(b"\r").unwrap_or(&line[..nl]);
    let words: Vec<&[u8]> = l.split(|&b| b == b' ').filter(|w| !w.is_empty()).collect();
    match words.as_slice() {
        [_, _, v] if v.starts_with(b"HTTP/") => Protocol::Http,
        _ => Protocol::Redis,
    }
}

/// Stop reading from a client while this many reply bytes wait for it (back-pressure).
const MAX_PENDING_OUT: usize = 4 << 20;
const READ_CHUNK: usize = 64 << 10;
/// Request bytes a connection may hold without a grant from the [`Budget`]: a read is made
/// without one while the buffer holds at most `FREE - READ_CHUNK` bytes.
pub const FREE: usize = 2 * READ_CHUNK;
/// The default of [`Config::max_value_size`]: Kyoto Tycoon and Tokyo Tyrant clients send
/// values of tens of megabytes.
pub const DEFAULT_MAX_VALUE: usize = 64 << 20;
/// The default of [`Config::max_inflight`].
pub const DEFAULT_MAX_INFLIGHT: usize = 1 << 30;

/// The server-wide budget of request bytes in flight beyond every connection's [`FREE`]
/// allowance. A connection whose buffer outgrows its allowance (a request larger than that
/// arriving) takes a grant of the largest request its protocol accepts before it reads on, and
/// gives it back once its buffer is down to its allowance; when the budget has no such grant
/// left, the connection is not read (the client waits, its bytes stay in the kernel) and is
/// tried again every [`PAUSED_RETRY`]. Each holder of a grant can always finish its request,
/// so requests never wait for each other in a circle. Request memory is thus bounded by
/// connections × `FREE` + the budget (plus one read chunk per connection).
pub struct Budget {
    cap: usize,
    used: std::sync::atomic::AtomicUsize,
}

impl Budget {
    pub fn new(cap: usize) -> Budget {
        Budget {
            cap,
            used: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Take `n` bytes if they are left.
    pub fn take(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                u.checked_add(n).filter(|&t| t <= self.cap)
            })
            .is_ok()
    }

    pub fn give(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }

    /// Bytes granted now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

/// How often a connection waiting for the budget is tried again.
const PAUSED_RETRY: Duration = Duration::from_millis(5);

/// The codec limits of every protocol, from the server settings.
struct AllLimits {
    mc: Limits,
    tt: tt_bin::Limits,
    kt: kt_bin::Limits,
    http: http::Limits,
    redis: resp::Limits,
    budget: Arc<Budget>,
}

impl AllLimits {
    fn new(cfg: &Config, budget: Arc<Budget>) -> AllLimits {
        let value = cfg.max_value_size;
        let frame = (64 << 20usize).max(value.saturating_add(1 << 20));
        AllLimits {
            mc: Limits {
                max_line: 2048,
                max_key: 250,
                max_item: cfg.max_item_size,
                max_value: cfg.max_value_size,
            },
            tt: tt_bin::Limits {
                max_value: value,
                max_frame: frame,
                ..tt_bin::Limits::default()
            },
            kt: kt_bin::Limits {
                max_value: value,
                max_frame: frame,
                ..kt_bin::Limits::default()
            },
            http: http::Limits {
                // Room for a value at the limit in any encoding of a TSV or form body (URL
                // and quoted-printable escapes take three bytes a byte, base64 four per three).
                max_body: value.saturating_mul(3).saturating_add(64 << 10),
                ..http::Limits::default()
            },
            redis: resp::Limits {
                max_bulk: value,
                // What a connection's grant of the budget holds ([`AllLimits::largest`]).
                max_request: value.saturating_add(1 << 20),
                ..resp::Limits::default()
            },
            budget,
        }
    }

    /// The largest request of a protocol: the grant a connection takes to read one.
    fn largest(&self, p: Option<Protocol>) -> usize {
        match p {
            Some(Protocol::MemcachedText | Protocol::MemcachedBinary) | None => {
                self.mc.max_item.saturating_add(64 << 10)
            }
            Some(Protocol::TokyoTyrant) => self.tt.max_frame,
            Some(Protocol::KyotoBinary) => self.kt.max_frame,
            Some(Protocol::Http) => self.http.max_body.saturating_add(self.http.max_head),
            // A whole multibulk is held to this by the codec.
            Some(Protocol::Redis) => self.redis.max_request,
        }
    }

    /// The largest request of any protocol.
    fn largest_any(&self) -> usize {
        [
            Protocol::MemcachedText,
            Protocol::TokyoTyrant,
            Protocol::KyotoBinary,
            Protocol::Http,
            Protocol::Redis,
        ]
        .into_iter()
        .map(|p| self.largest(Some(p)))
        .max()
        .unwrap_or(0)
    }
}

/// The budget a server needs at least: one largest request of any protocol, with these
/// item and value size limits.
pub fn min_inflight(max_item_size: usize, max_value_size: usize) -> usize {
    let cfg = Config {
        threads: 1,
        max_connections: 1,
        max_item_size,
        max_value_size,
        max_inflight: 0,
        idle_timeout: None,
        memcached_only: Vec::new(),
        tls_listeners: Vec::new(),
        tls: None,
    };
    AllLimits::new(&cfg, Arc::new(Budget::new(0))).largest_any()
}

/// Serve until `stop` is set: spawn the workers, wait for them.
pub fn serve(
    listeners: Vec<std::net::TcpListener>,
    store: Arc<dyn Store>,
    shared: Arc<Shared>,
    cfg: Config,
    stop: Arc<AtomicBool>,
) -> io::Result<()> {
    for l in &listeners {
        l.set_nonblocking(true)?;
    }
    let committer = Arc::new(Committer::default());
    let commit_thread = {
        let (c, store) = (committer.clone(), store.clone());
        std::thread::Builder::new()
            .name("kura-commit".into())
            .spawn(move || c.run(&*store))?
    };
    debug_assert_eq!(cfg.max_value_size as u64, shared.max_value_size);
    let spread = Arc::new(Spread::new(cfg.threads.max(1)));
    let least = min_inflight(cfg.max_item_size, cfg.max_value_size);
    let budget = Arc::new(Budget::new(cfg.max_inflight.max(least)));
    let mut workers = Vec::new();
    for i in 0..cfg.threads.max(1) {
        let ls: Vec<TcpListener> = listeners
            .iter()
            .map(|l| l.try_clone().map(TcpListener::from_std))
            .collect::<io::Result<_>>()?;
        let (store, shared, cfg, stop) = (store.clone(), shared.clone(), cfg.clone(), stop.clone());
        let (committer, spread, budget) = (committer.clone(), spread.clone(), budget.clone());
        let mine = Mine {
            spread,
            me: i,
            budget,
        };
        workers.push(
            std::thread::Builder::new()
                .name(format!("kura-worker-{i}"))
                .spawn(move || worker(ls, &*store, &shared, &cfg, &stop, &committer, &mine))?,
        );
    }
    let mut res = Ok(());
    for w in workers {
        match w.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => res = Err(e),
            Err(_) => res = Err(io::Error::other("a worker thread panicked")),
        }
    }
    committer.stop();
    let _ = commit_thread.join();
    res
}

#[cfg(test)]
mod tests;
