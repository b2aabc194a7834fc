//! The connection loop: worker threads, each with its own event loop (mio), accepting from the
//! shared listeners and serving their connections. Per read, every complete request in the
//! buffer is decoded and executed, and all their replies go out in one write. Nothing is shared
//! between connections but the store and a few counters.
//!
//! Protocols are told apart by the first byte of a connection ([`sniff`]): memcached text and
//! binary, Tokyo Tyrant binary and HTTP (Tyrant's and Kyoto Tycoon's), each with its own codec
//! (`kura_proto`) and executor, all on the same store.

use crate::context::{Next, Shared};
use crate::kt_cursor::KtCursors;
use crate::kt_signal::{Ticket, WaitReq, Waited, Wake};
use crate::mc_exec;
use crate::mc_stats::Dump;
use crate::out::Out;
use crate::tt_exec::{self, TtState};
use crate::{http_exec, kt_bin_exec, mc_bin_exec};
use kura_engine::store::now_secs;
use kura_engine::Store;
use kura_proto::mc_text::{self, Decoded, GetLine, Limits};
use kura_proto::{http, kt_bin, mc_bin, tt_bin};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
}

/// The protocol of a connection, from its first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    MemcachedText,
    MemcachedBinary,
    TokyoTyrant,
    KyotoBinary,
    Http,
}

/// Tell the protocol from the first byte a client sends: 0x80 memcached binary, 0xC8 Tokyo
/// Tyrant, 0xB1 / 0xB4 / 0xB8–0xBA Kyoto Tycoon's binary protocol, an upper-case letter an HTTP
/// method, anything else memcached text (whose commands are lower-case). On a memcached-only
/// port: 0x80 binary, anything else text, as memcached tells them.
pub fn sniff(first: u8, memcached_only: bool) -> Protocol {
    match first {
        0x80 => Protocol::MemcachedBinary,
        _ if memcached_only => Protocol::MemcachedText,
        0xC8 => Protocol::TokyoTyrant,
        b if kt_bin::is_magic(b) => Protocol::KyotoBinary,
        b'A'..=b'Z' => Protocol::Http,
        _ => Protocol::MemcachedText,
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

/// The commit thread: workers ask for a sync (a ticket) instead of waiting for one, and are woken
/// when it is done; one fsync then covers the writes of every worker that asked meanwhile.
struct Committer {
    state: std::sync::Mutex<CommitState>,
    cv: std::sync::Condvar,
}

#[derive(Default)]
struct CommitState {
    /// Highest ticket handed out.
    requested: u64,
    /// Every ticket up to this one is durable.
    done: u64,
    /// A sync failed: nothing after it will be acknowledged.
    failed: bool,
    stop: bool,
    wakers: Vec<Arc<mio::Waker>>,
}

impl Committer {
    /// A ticket for the writes made so far by the calling thread.
    fn request(&self) -> u64 {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.requested += 1;
        self.cv.notify_one();
        st.requested
    }

    fn status(&self) -> (u64, bool) {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        (st.done, st.failed)
    }

    fn run(&self, store: &dyn Store) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            while st.requested == st.done && !st.stop {
                st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            if st.requested == st.done {
                return; // stopping, nothing owed
            }
            let target = st.requested;
            drop(st);
            // Started after every ticket up to `target` was requested, so it covers them.
            let ok = store.sync().is_ok();
            st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            st.done = target;
            st.failed |= !ok;
            for w in &st.wakers {
                let _ = w.wake();
            }
        }
    }
}

/// The waker's token (no connection or listener has it).
const WAKE: Token = Token(usize::MAX);

struct Conn<'s> {
    sock: TcpStream,
    rbuf: Vec<u8>,
    out: Out,
    /// Bytes still to discard (the rest of a refused data block).
    skip: usize,
    /// Then this many `[size:4][bytes]` elements (the rest of a refused Tyrant list).
    skip_elements: usize,
    proto: Option<Protocol>,
    last: Instant,
    /// Close once the replies are written.
    closing: bool,
    /// Registered for writability too (only while replies wait for the socket).
    wants_write: bool,
    /// The client closed its side (replies still owed are written first).
    eof: bool,
    /// Replies wait until this commit ticket is durable (0: none owed).
    ticket: u64,
    /// Tokyo Tyrant connections only: the iterator (`iterinit` / `iternext`).
    tt: Option<Box<TtState<'s>>>,
    /// HTTP connections only: Kyoto Tycoon's cursors (`cur_*`), freed with the connection.
    kt: Option<Box<KtCursors<'s>>>,
    /// A request asked to wait for a signal (Kyoto Tycoon's `WAIT`); it is still in `rbuf`.
    want_wait: Option<WaitReq>,
    /// Parked: waiting for the signal (registered in `Shared::kt_signals`) until the instant.
    /// Nothing is executed meanwhile; the connection is only watched for its client leaving.
    wait: Option<(Ticket, Instant)>,
    /// How the wait of the request first in `rbuf` ended: it runs with this.
    waited: Option<Waited>,
    /// Accepted on a memcached-only port.
    mc_only: bool,
    /// memcached text: the long retrieval line whose next piece is due.
    more: Option<GetLine>,
    /// Discarding input through the next newline (the rest of a refused long line).
    discard_line: bool,
    /// memcached text: an `lru_crawler metadump` asked for (every item: true) and not started.
    want_dump: Option<bool>,
    /// The connection asked to become a replication stream.
    want_stream: Option<crate::repl::StreamReq>,
    /// The metadump under way: no request is read until it is written out.
    dump: Option<Dump<'s>>,
    /// Bytes granted by the [`Budget`] (0 or the largest request of the protocol).
    grant: usize,
    /// Not read for want of a grant: tried again every `PAUSED_RETRY`.
    paused: bool,
}

/// The codec limits of every protocol, from the server settings.
struct AllLimits {
    mc: Limits,
    tt: tt_bin::Limits,
    kt: kt_bin::Limits,
    http: http::Limits,
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
        }
    }

    /// The largest request of any protocol.
    fn largest_any(&self) -> usize {
        [
            Protocol::MemcachedText,
            Protocol::TokyoTyrant,
            Protocol::KyotoBinary,
            Protocol::Http,
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
    let committer = Arc::new(Committer {
        state: std::sync::Mutex::new(CommitState::default()),
        cv: std::sync::Condvar::new(),
    });
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
    {
        let mut st = committer.state.lock().unwrap_or_else(|p| p.into_inner());
        st.stop = true;
        committer.cv.notify_all();
    }
    let _ = commit_thread.join();
    res
}

fn worker<'s>(
    mut listeners: Vec<TcpListener>,
    store: &'s dyn Store,
    shared: &Shared,
    cfg: &Config,
    stop: &AtomicBool,
    committer: &Committer,
    mine: &Mine,
) -> io::Result<()> {
    let mut poll = Poll::new()?;
    let waker = Arc::new(mio::Waker::new(poll.registry(), WAKE)?);
    // What a signal calls to wake this worker for a connection of its that waits.
    let wake: Wake = {
        let w = waker.clone();
        Arc::new(move || {
            let _ = w.wake();
        })
    };
    // Connections parked waiting for a signal.
    let mut waiting: Vec<usize> = Vec::new();
    let mut ended: Vec<usize> = Vec::new();
    *mine.spread.wakers[mine.me]
        .lock()
        .unwrap_or_else(|p| p.into_inner()) = Some(waker.clone());
    committer
        .state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .wakers
        .push(waker);
    // Connections whose replies wait for a commit ticket.
    let mut held: Vec<usize> = Vec::new();
    let mut events = Events::with_capacity(1024);
    let nl = listeners.len();
    for (i, l) in listeners.iter_mut().enumerate() {
        poll.registry().register(l, Token(i), Interest::READABLE)?;
    }
    let mut conns: Vec<Option<Conn<'s>>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let limits = AllLimits::new(cfg, mine.budget.clone());
    // Connections waiting for a grant of the budget.
    let mut paused: Vec<usize> = Vec::new();
    let mut last_sweep = Instant::now();
    // Reads land here first (zeroed once), then only the bytes read are copied to the
    // connection's buffer.
    let mut scratch = vec![0u8; READ_CHUNK];
    let mut touched: Vec<(usize, bool)> = Vec::new();
    // `sync=always` writes of this thread wait for one sync per event batch (see phase 2).
    kura_engine::durability::set_deferred(true);
    while !stop.load(Ordering::Relaxed) {
        let mut wait = if paused.is_empty() {
            Duration::from_millis(100)
        } else {
            PAUSED_RETRY
        };
        for &idx in &waiting {
            if let Some(Some(Conn {
                wait: Some((_, deadline)),
                ..
            })) = conns.get(idx)
            {
                wait = wait.min(deadline.saturating_duration_since(Instant::now()));
            }
        }
        match poll.poll(&mut events, Some(wait)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        // Connections another worker accepted for this one.
        if mine.spread.mail[mine.me].load(Ordering::Acquire) {
            take_mail(mine, &mut poll, &mut conns, &mut free, nl)?;
        }
        // Phase 1: read and execute; replies wait in the connections' buffers. Connections
        // waiting for the budget are tried first, as if they were readable.
        touched.clear();
        // Connections whose wait for a signal ended run their request, as if readable.
        ended.clear();
        if !waiting.is_empty() {
            wait_ended(&mut conns, &mut waiting, shared, &mut ended);
        }
        let retry: Vec<(usize, bool)> = std::mem::take(&mut paused)
            .into_iter()
            .chain(ended.iter().copied())
            .map(|i| (nl + i, false))
            .collect();
        let ready = retry
            .into_iter()
            .chain(events.iter().map(|ev| (ev.token().0, ev.is_read_closed())));
        for (t, hup) in ready {
            if t == WAKE.0 {
                continue; // a commit finished: the held replies are handled below
            }
            if t < nl {
                accept_all(
                    &listeners[t],
                    cfg.memcached_only.contains(&t),
                    &mut poll,
                    &mut conns,
                    &mut free,
                    nl,
                    shared,
                    cfg,
                    mine,
                )?;
                continue;
            }
            let idx = t - nl;
            if let Some(c) = conns.get_mut(idx).and_then(Option::as_mut) {
                c.paused = false;
                let alive = read_and_execute(c, store, shared, &limits, &mut scratch, hup);
                if alive {
                    park(c, idx, shared, &wake, &mut waiting);
                }
                if alive && c.want_stream.is_some() {
                    hand_over_stream(&mut poll, &mut conns, &mut free, idx, store, shared, mine);
                    continue;
                }
                if c.ticket == 0 && !kura_engine::durability::pending() {
                    // Nothing of this batch so far waits for a commit: the replies go out now,
                    // not after the rest of the batch (up to 1024 connections) is executed.
                    let keep = alive && finish_all(c, store, shared, &limits, &mut scratch);
                    if keep && c.paused && !paused.contains(&idx) {
                        paused.push(idx);
                    }
                    settle(
                        &mut poll, &mut conns, &mut free, idx, keep, nl, shared, mine,
                    )?;
                } else {
                    touched.push((idx, alive));
                }
            }
        }
        // Phase 2: the deferred `sync=always` writes of the batch get a commit ticket from the
        // commit thread (one fsync covers every worker that asks meanwhile); their replies
        // wait for it, and the worker goes on serving. Nothing is acknowledged before it is
        // durable.
        if kura_engine::durability::take_pending() {
            let ticket = committer.request();
            for &(idx, _) in &touched {
                if let Some(c) = conns.get_mut(idx).and_then(Option::as_mut) {
                    if c.ticket == 0 {
                        held.push(idx);
                    }
                    c.ticket = ticket;
                }
            }
        }
        let (done, failed) = if held.is_empty() {
            (0, false)
        } else {
            committer.status()
        };
        // Connections whose commit is done (or failed) are finished with the rest.
        held.retain(|&idx| {
            let Some(c) = conns.get_mut(idx).and_then(Option::as_mut) else {
                return false;
            };
            if c.ticket <= done || failed {
                if !touched.iter().any(|&(i, _)| i == idx) {
                    touched.push((idx, true));
                }
                false
            } else {
                true
            }
        });
        for &(idx, alive) in &touched {
            let keep = match conns.get_mut(idx).and_then(Option::as_mut) {
                Some(c) if c.ticket > done => continue, // still waiting for its commit
                Some(c) if failed && c.ticket > 0 => false, // a failed sync: drop, not durability
                Some(c) if alive => {
                    c.ticket = 0;
                    let keep = finish_all(c, store, shared, &limits, &mut scratch);
                    if keep && c.paused && !paused.contains(&idx) {
                        paused.push(idx);
                    }
                    keep
                }
                Some(_) => false,
                None => continue,
            };
            settle(
                &mut poll, &mut conns, &mut free, idx, keep, nl, shared, mine,
            )?;
        }
        if let Some(idle) = cfg.idle_timeout {
            if last_sweep.elapsed() >= Duration::from_secs(1) {
                last_sweep = Instant::now();
                let stale: Vec<usize> = conns
                    .iter()
                    .enumerate()
                    // A connection waiting for a signal is bounded by its wait time.
                    .filter(|(_, c)| {
                        c.as_ref()
                            .is_some_and(|c| c.wait.is_none() && c.last.elapsed() > idle)
                    })
                    .map(|(i, _)| i)
                    .collect();
                for i in stale {
                    close(&mut poll, &mut conns, &mut free, i, shared, mine);
                }
            }
        }
    }
    // Stopping. Every request read so far has been executed; hand out the replies (those
    // held for a commit after a last sync), waiting for slow readers up to STOP_FLUSH in all,
    // then end each connection with a FIN after its last reply.
    let durable = held.is_empty() || store.sync().is_ok();
    let deadline = Instant::now() + STOP_FLUSH;
    for i in 0..conns.len() {
        if let Some(c) = conns[i].as_mut() {
            if c.ticket == 0 || durable {
                let _ = c.sock.set_nodelay(true);
                drain_until(c, shared, deadline);
            }
            let _ = c.sock.shutdown(std::net::Shutdown::Write);
        }
        close(&mut poll, &mut conns, &mut free, i, shared, mine);
    }
    Ok(())
}

/// How long a stopping worker waits, in all, for clients to take their last replies.
const STOP_FLUSH: Duration = Duration::from_secs(5);

/// Write a connection's pending output, waiting for the socket to drain until `deadline`.
fn drain_until(c: &mut Conn<'_>, shared: &Shared, deadline: Instant) {
    loop {
        if flush(c, shared).is_err() || c.out.is_drained() {
            return;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let mut pfd = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&c.sock),
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one valid pollfd for a socket this connection owns.
        let n = unsafe { libc::poll(&mut pfd, 1, left.as_millis().clamp(1, 1000) as i32) };
        if n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return;
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn accept_all(
    listener: &TcpListener,
    mc_only: bool,
    poll: &mut Poll,
    conns: &mut Vec<Option<Conn<'_>>>,
    free: &mut Vec<usize>,
    nl: usize,
    shared: &Shared,
    cfg: &Config,
    mine: &Mine,
) -> io::Result<()> {
    loop {
        let (mut sock, _) = match listener.accept() {
            Ok(s) => s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // Out of descriptors and the like: drop this round, the next event retries.
            Err(_) => return Ok(()),
        };
        if shared.curr_connections.load(Ordering::Relaxed) as usize >= cfg.max_connections {
            shared.rejected_connections.fetch_add(1, Ordering::Relaxed);
            let _ = sock.write_all(b"SERVER_ERROR too many open connections\r\n");
            continue; // dropped: closes the socket
        }
        let _ = sock.set_nodelay(true);
        shared.curr_connections.fetch_add(1, Ordering::Relaxed);
        shared.total_connections.fetch_add(1, Ordering::Relaxed);
        let to = mine.spread.pick(mine.me);
        if to == mine.me {
            adopt(sock, mc_only, poll, conns, free, nl)?;
        } else {
            mine.spread.hand_over(to, sock, mc_only);
        }
    }
}

/// Register a connection with this worker's event loop.
fn adopt(
    mut sock: TcpStream,
    mc_only: bool,
    poll: &mut Poll,
    conns: &mut Vec<Option<Conn<'_>>>,
    free: &mut Vec<usize>,
    nl: usize,
) -> io::Result<()> {
    let idx = free.pop().unwrap_or_else(|| {
        conns.push(None);
        conns.len() - 1
    });
    poll.registry()
        .register(&mut sock, Token(nl + idx), Interest::READABLE)?;
    conns[idx] = Some(Conn {
        sock,
        rbuf: Vec::new(),
        out: Out::default(),
        skip: 0,
        skip_elements: 0,
        proto: None,
        last: Instant::now(),
        closing: false,
        wants_write: false,
        eof: false,
        ticket: 0,
        tt: None,
        kt: None,
        want_wait: None,
        wait: None,
        waited: None,
        mc_only,
        more: None,
        discard_line: false,
        want_dump: None,
        want_stream: None,
        dump: None,
        grant: 0,
        paused: false,
    });
    Ok(())
}

/// Register the connections other workers accepted for this one.
fn take_mail(
    mine: &Mine,
    poll: &mut Poll,
    conns: &mut Vec<Option<Conn<'_>>>,
    free: &mut Vec<usize>,
    nl: usize,
) -> io::Result<()> {
    let socks = {
        let mut inbox = mine.spread.inbox[mine.me]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        mine.spread.mail[mine.me].store(false, Ordering::Release);
        std::mem::take(&mut *inbox)
    };
    for (sock, mc_only) in socks {
        adopt(sock, mc_only, poll, conns, free, nl)?;
    }
    Ok(())
}

/// Spreads new connections evenly over the workers, as memcached's dispatcher does. Every
/// worker accepts from the shared listeners, and without this the first one to wake takes a
/// whole burst of connects. That split moved from run to run (119 against 68 CPU ticks, then
/// 64 against 120), and with a client waiting on each reply, the connections of the busier
/// worker wait longer while the other core idles. Unpipelined throughput followed it (221K to
/// 260K requests/s).
struct Spread {
    /// Open connections of each worker (counted when handed over, so a burst spreads).
    conns: Vec<std::sync::atomic::AtomicUsize>,
    /// Connections accepted for each worker by another, not yet registered.
    inbox: Vec<std::sync::Mutex<Vec<(TcpStream, bool)>>>,
    mail: Vec<AtomicBool>,
    wakers: Vec<std::sync::Mutex<Option<Arc<mio::Waker>>>>,
}

impl Spread {
    fn new(workers: usize) -> Spread {
        Spread {
            conns: (0..workers).map(|_| Default::default()).collect(),
            inbox: (0..workers).map(|_| Default::default()).collect(),
            mail: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            wakers: (0..workers).map(|_| Default::default()).collect(),
        }
    }

    /// The worker for a connection `me` just accepted: the one with the fewest, `me` on a tie.
    /// Counts it for that worker.
    fn pick(&self, me: usize) -> usize {
        let load = |i: usize| self.conns[i].load(Ordering::Relaxed);
        let mut to = me;
        for i in 0..self.conns.len() {
            if load(i) < load(to) {
                to = i;
            }
        }
        self.conns[to].fetch_add(1, Ordering::Relaxed);
        to
    }

    fn hand_over(&self, to: usize, sock: TcpStream, mc_only: bool) {
        self.inbox[to]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((sock, mc_only));
        self.mail[to].store(true, Ordering::Release);
        // A worker that has no waker yet takes its mail on its first round.
        if let Some(w) = &*self.wakers[to].lock().unwrap_or_else(|p| p.into_inner()) {
            let _ = w.wake();
        }
    }
}

/// A worker's index, the spread it takes part in and the server's request budget.
struct Mine {
    spread: Arc<Spread>,
    me: usize,
    budget: Arc<Budget>,
}

fn close(
    poll: &mut Poll,
    conns: &mut [Option<Conn<'_>>],
    free: &mut Vec<usize>,
    idx: usize,
    shared: &Shared,
    mine: &Mine,
) {
    if let Some(mut c) = conns.get_mut(idx).and_then(Option::take) {
        if let Some((t, _)) = c.wait.take() {
            shared.kt_signals.cancel(&t);
        }
        mine.budget.give(c.grant);
        let _ = poll.registry().deregister(&mut c.sock);
        free.push(idx);
        shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
        mine.spread.conns[mine.me].fetch_sub(1, Ordering::Relaxed);
    }
}

/// Give a connection that asked for a replication stream to a thread of its own, with the
/// replies owed to the requests before it.
fn hand_over_stream(
    poll: &mut Poll,
    conns: &mut [Option<Conn<'_>>],
    free: &mut Vec<usize>,
    idx: usize,
    store: &dyn Store,
    shared: &Shared,
    mine: &Mine,
) {
    let Some(mut c) = conns.get_mut(idx).and_then(Option::take) else {
        return;
    };
    mine.budget.give(c.grant);
    let _ = poll.registry().deregister(&mut c.sock);
    free.push(idx);
    shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
    mine.spread.conns[mine.me].fetch_sub(1, Ordering::Relaxed);
    let (Some(req), Some(repl)) = (c.want_stream.take(), shared.repl.clone()) else {
        return; // no replication here: the connection is dropped (closed)
    };
    if c.ticket != 0 || kura_engine::durability::pending() {
        // Replies owed to writes before it go out only once those are durable.
        let _ = store.sync();
    }
    let pending = c.out.contiguous();
    use std::os::fd::{FromRawFd, IntoRawFd};
    // SAFETY: the descriptor comes out of the mio socket, which gives up its ownership.
    let sock = unsafe { std::net::TcpStream::from_raw_fd(c.sock.into_raw_fd()) };
    if sock.set_nonblocking(false).is_ok() {
        crate::repl::feed::start(repl, req, sock, pending);
    }
}

/// Read what is there and execute every complete request (replies go to the output buffer).
/// `hup`: the event said the client has finished sending, so read on to the end of the stream
/// even after a short read (the end comes with no event of its own). False when the
/// connection failed.
fn read_and_execute<'s>(
    c: &mut Conn<'s>,
    store: &'s dyn Store,
    shared: &Shared,
    limits: &AllLimits,
    scratch: &mut [u8],
    hup: bool,
) -> bool {
    c.last = Instant::now();
    if c.wait.is_some() {
        return buffer_while_waiting(c, shared, limits, scratch, hup);
    }
    if c.waited.is_some() {
        // The request whose wait ended runs first, then those behind it.
        process(c, store, shared, limits);
        release(c, limits);
    }
    if c.dump.is_some() {
        // A metadump under way takes the connection until it is written out; then the
        // requests that came behind it.
        pump(c, shared);
        if c.dump.is_some() {
            return true;
        }
        process(c, store, shared, limits);
    }
    while c.out.pending() < MAX_PENDING_OUT
        && !c.closing
        && !c.eof
        && c.dump.is_none()
        && c.want_wait.is_none()
    {
        if !may_read(c, limits) {
            c.paused = true;
            break;
        }
        match c.sock.read(scratch) {
            Ok(0) => c.eof = true,
            Ok(n) => {
                shared.bytes_read.add(n as u64);
                c.rbuf.extend_from_slice(&scratch[..n]);
                process(c, store, shared, limits);
                release(c, limits);
                if n < READ_CHUNK && !hup {
                    // A short read took everything there was; new data raises a new event
                    // (edge-triggered), so skip the read that would only say EAGAIN.
                    break;
                }
            }
            Err(e) => match e.kind() {
                io::ErrorKind::WouldBlock => break,
                io::ErrorKind::Interrupted => continue,
                _ => return false,
            },
        }
    }
    true
}

/// While a request waits for a signal: keep what the client sends (nothing is executed), and
/// end the wait with the connection when the client closes it. False when it is finished.
fn buffer_while_waiting(
    c: &mut Conn<'_>,
    shared: &Shared,
    limits: &AllLimits,
    scratch: &mut [u8],
    hup: bool,
) -> bool {
    if hup {
        return false;
    }
    while may_read(c, limits) {
        match c.sock.read(scratch) {
            Ok(0) => return false,
            Ok(n) => {
                shared.bytes_read.add(n as u64);
                c.rbuf.extend_from_slice(&scratch[..n]);
            }
            Err(e) => match e.kind() {
                io::ErrorKind::WouldBlock => break,
                io::ErrorKind::Interrupted => continue,
                _ => return false,
            },
        }
    }
    true
}

/// Park a connection whose request asked to wait for a signal: register it, to be woken
/// through `wake`, and note it in `waiting`.
fn park(c: &mut Conn<'_>, idx: usize, shared: &Shared, wake: &Wake, waiting: &mut Vec<usize>) {
    if let Some(w) = c.want_wait.take() {
        let ticket = shared.kt_signals.wait(&w.name, wake.clone());
        c.wait = Some((ticket, Instant::now() + w.time));
        waiting.push(idx);
    }
}

/// The parked connections whose wait has ended (signaled, or past its time): each is told how,
/// and is to run its request now.
fn wait_ended(
    conns: &mut [Option<Conn<'_>>],
    waiting: &mut Vec<usize>,
    shared: &Shared,
    ended: &mut Vec<usize>,
) {
    let now = Instant::now();
    waiting.retain(|&idx| {
        let Some(c) = conns.get_mut(idx).and_then(Option::as_mut) else {
            return false;
        };
        let Some((t, deadline)) = &c.wait else {
            return false;
        };
        let how = if t.woken() {
            Waited::Woken
        } else if now >= *deadline {
            shared.kt_signals.cancel(t);
            // A signal that took it meanwhile still counts.
            if t.woken() {
                Waited::Woken
            } else {
                Waited::TimedOut
            }
        } else {
            return true;
        };
        c.wait = None;
        c.waited = Some(how);
        ended.push(idx);
        false
    });
}

/// Whether the connection may read another chunk: its buffer within its allowance, or within
/// a grant it holds or gets now (see [`Budget`]).
fn may_read(c: &mut Conn<'_>, limits: &AllLimits) -> bool {
    let held = c.rbuf.len();
    if held + READ_CHUNK <= FREE || held < c.grant {
        return true;
    }
    if c.grant > 0 {
        // A buffer as large as the largest request holds a whole one, which is executed (and
        // the buffer drained) as soon as it is read.
        return false;
    }
    let want = limits.largest(c.proto);
    if limits.budget.take(want) {
        c.grant = want;
        true
    } else {
        false
    }
}

/// After requests were executed: a connection whose buffer is back within its allowance gives
/// its grant back, and the memory a large request left in its buffer.
fn release(c: &mut Conn<'_>, limits: &AllLimits) {
    if c.grant > 0 && c.rbuf.len() + READ_CHUNK <= FREE {
        limits.budget.give(c.grant);
        c.grant = 0;
        c.rbuf.shrink_to(FREE);
    }
}

/// After a connection's replies were handed to the socket: close it unless `keep`, else
/// watch for writability exactly while output is left over.
#[allow(clippy::too_many_arguments)]
fn settle(
    poll: &mut Poll,
    conns: &mut [Option<Conn<'_>>],
    free: &mut Vec<usize>,
    idx: usize,
    keep: bool,
    nl: usize,
    shared: &Shared,
    mine: &Mine,
) -> io::Result<()> {
    if !keep {
        close(poll, conns, free, idx, shared, mine);
    } else if let Some(Some(c)) = conns.get_mut(idx) {
        // Change the registration only when writability starts or stops to matter.
        let pending = !c.out.is_drained() || c.dump.is_some();
        if pending != c.wants_write {
            let want = if pending {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            poll.registry()
                .reregister(&mut c.sock, Token(nl + idx), want)?;
            c.wants_write = pending;
        }
    }
    Ok(())
}

/// Write the replies, and while a metadump is under way and the socket takes everything, go
/// on with it (the socket's next "writable" only comes once it has been full). False when
/// the connection is finished.
fn finish_all<'s>(
    c: &mut Conn<'s>,
    store: &'s dyn Store,
    shared: &Shared,
    limits: &AllLimits,
    scratch: &mut [u8],
) -> bool {
    loop {
        if !finish(c, shared) {
            return false;
        }
        if c.dump.is_none() || !c.out.is_drained() {
            return true;
        }
        if !read_and_execute(c, store, shared, limits, scratch, false) {
            return false;
        }
    }
}

/// The next batch of a metadump.
fn pump(c: &mut Conn<'_>, shared: &Shared) {
    if let Some(d) = c.dump.as_mut() {
        if !d.step(shared, now_secs(), &mut c.out) {
            c.dump = None;
        }
    }
}

/// Write the replies; false when the connection is finished (the client hung up, or it asked
/// to close and has everything).
fn finish(c: &mut Conn<'_>, shared: &Shared) -> bool {
    if flush(c, shared).is_err() {
        return false;
    }
    let drained = c.out.is_drained();
    !((c.eof || c.closing) && drained)
}

/// Decode and execute every complete request in the read buffer.
fn process<'s>(c: &mut Conn<'s>, store: &'s dyn Store, shared: &Shared, limits: &AllLimits) {
    let mut pos = 0;
    skip_owed(c, &mut pos);
    if c.discard_line {
        match c.rbuf[pos..].iter().position(|&b| b == b'\n') {
            Some(nl) => {
                pos += nl + 1;
                c.discard_line = false;
            }
            None => pos = c.rbuf.len(),
        }
    }
    if c.proto.is_none() && pos < c.rbuf.len() {
        let p = sniff(c.rbuf[pos], c.mc_only);
        c.proto = Some(p);
        if p == Protocol::TokyoTyrant {
            let mut st = TtState::of_server(shared);
            st.fd = std::os::fd::AsRawFd::as_raw_fd(&c.sock);
            c.tt = Some(Box::new(st));
        }
    }
    let now = now_secs();
    let at = Ctx { store, shared, now };
    match c.proto {
        Some(Protocol::MemcachedBinary) => drive(c, pos, &mut McBinary(at, &limits.mc)),
        Some(Protocol::TokyoTyrant) => {
            // The iterator state leaves the connection while the loop borrows it.
            let Some(mut st) = c.tt.take() else { return };
            drive(c, pos, &mut Tyrant(store, at, &limits.tt, &mut st));
            c.tt = Some(st);
        }
        Some(Protocol::KyotoBinary) => drive(c, pos, &mut KyotoBinary(at, &limits.kt)),
        Some(Protocol::Http) => {
            // The cursors leave the connection while the loop borrows it.
            let mut curs = c.kt.take().unwrap_or_default();
            let mut waited = c.waited.take();
            drive(
                c,
                pos,
                &mut Http(store, at, &limits.http, &mut curs, &mut waited),
            );
            c.kt = Some(curs);
        }
        Some(Protocol::MemcachedText) | None => {
            let mut w = McText {
                at,
                limits: &limits.mc,
                more: c.more.take(),
            };
            let mut pos = pos;
            loop {
                drive(c, pos, &mut w);
                let Some(all) = c.want_dump.take() else { break };
                match Dump::start(store, shared, all, now) {
                    Ok(d) => {
                        c.dump = Some(d);
                        pump(c, shared);
                    }
                    Err(e) => mc_exec::server_error(&mut c.out, &e),
                }
                if c.dump.is_some() {
                    break;
                }
                // A dump written out whole: on with the requests behind it.
                pos = 0;
            }
            c.more = w.more;
        }
    }
}

/// Discard from `pos` on what a refused request left to discard ([`Conn::skip`], then
/// [`Conn::skip_elements`]), as far as it has arrived.
fn skip_owed(c: &mut Conn<'_>, pos: &mut usize) {
    loop {
        let n = c.skip.min(c.rbuf.len() - *pos);
        *pos += n;
        c.skip -= n;
        if c.skip > 0 || c.skip_elements == 0 {
            return;
        }
        let Some(size) = c.rbuf.get(*pos..*pos + 4) else {
            return;
        };
        c.skip = u32::from_be_bytes([size[0], size[1], size[2], size[3]]) as usize;
        c.skip_elements -= 1;
        *pos += 4;
    }
}

/// What decoding the start of the buffer found.
enum Step<R> {
    /// A whole request and the bytes it takes.
    Request(R, usize),
    /// More bytes are needed (anything to send meanwhile is already in the output).
    More,
    /// A request that is refused: its error reply is written; skip `consumed` bytes (also
    /// those not received yet), then through the next newline if `discard_line`, and close
    /// the connection if `close`.
    Refused {
        consumed: usize,
        close: bool,
        discard_line: bool,
        /// Then discard this many `[size:4][bytes]` elements (Tyrant lists).
        elements: usize,
    },
}

/// One protocol as the connection loop drives it: its codec and its executor.
trait Wire {
    type Req<'a>;
    fn decode<'a>(&mut self, buf: &'a [u8], out: &mut Vec<u8>) -> Step<Self::Req<'a>>;
    fn execute(&mut self, req: &Self::Req<'_>, out: &mut Out) -> Next;
}

/// What every executor gets.
#[derive(Clone, Copy)]
struct Ctx<'x> {
    store: &'x dyn Store,
    shared: &'x Shared,
    now: u64,
}

/// Decode and execute the requests from `pos` on, then drop what was consumed.
fn drive<W: Wire>(c: &mut Conn<'_>, mut pos: usize, w: &mut W) {
    while pos < c.rbuf.len() && !c.closing {
        let (consumed, close, discard_line, elements) = match w.decode(&c.rbuf[pos..], &mut c.out) {
            Step::Request(req, consumed) => {
                let next = w.execute(&req, &mut c.out);
                if let Next::Wait(wait) = next {
                    // Unanswered: the request stays in the buffer until its wait ends.
                    c.want_wait = Some(wait);
                    break;
                }
                pos += consumed;
                match next {
                    Next::Continue => continue,
                    Next::Close => c.closing = true,
                    Next::Dump(all) => {
                        // Nothing more is read until the dump is out.
                        c.want_dump = Some(all);
                        break;
                    }
                    Next::Stream(req) => {
                        // Nothing more is read here: the stream's thread takes the socket.
                        c.want_stream = Some(req);
                        break;
                    }
                    Next::Wait(_) => unreachable!("handled above"),
                }
                continue;
            }
            Step::More => break,
            Step::Refused {
                consumed,
                close,
                discard_line,
                elements,
            } => (consumed, close, discard_line, elements),
        };
        if close {
            c.closing = true;
        }
        let avail = c.rbuf.len() - pos;
        if consumed > avail || elements > 0 {
            c.skip = consumed;
            c.skip_elements = elements;
            skip_owed(c, &mut pos);
        } else {
            pos += consumed;
            if discard_line {
                match c.rbuf[pos..].iter().position(|&b| b == b'\n') {
                    Some(nl) => pos += nl + 1,
                    None => {
                        pos = c.rbuf.len();
                        c.discard_line = true;
                    }
                }
            }
        }
    }
    c.rbuf.drain(..pos.min(c.rbuf.len()));
}

struct McText<'x> {
    at: Ctx<'x>,
    limits: &'x Limits,
    /// The long retrieval line whose next piece is due.
    more: Option<GetLine>,
}

impl Wire for McText<'_> {
    type Req<'a> = mc_text::Request<'a>;
    fn decode<'a>(&mut self, buf: &'a [u8], out: &mut Vec<u8>) -> Step<Self::Req<'a>> {
        let decoded = match self.more {
            Some(line) => mc_text::decode_continued(buf, self.limits, line),
            None => mc_text::decode(buf, self.limits),
        };
        match decoded {
            Ok(Decoded::Complete { request, consumed }) => {
                self.more = mc_text::continues(&request);
                Step::Request(request, consumed)
            }
            Ok(Decoded::Incomplete) => Step::More,
            Err(e) => {
                self.more = None;
                let Ctx { store, shared, .. } = self.at;
                if let Some(u) = e.unlink {
                    let key = &buf[u.start..u.start + u.len];
                    if let Err(err) = mc_exec::unlink_key(store, shared, key, u.base64) {
                        mc_exec::server_error(out, &err);
                    }
                } else if e.kind == mc_text::ErrorKind::TooLarge {
                    shared.store_too_large.add(1);
                }
                if let Some(n) = e.value_len {
                    mc_refused(shared, "memcached text", n);
                }
                e.encode(out);
                Step::Refused {
                    consumed: e.consumed,
                    close: e.close,
                    discard_line: e.discard_line,
                    elements: 0,
                }
            }
        }
    }
    fn execute(&mut self, req: &Self::Req<'_>, out: &mut Out) -> Next {
        let Ctx { store, shared, now } = self.at;
        mc_exec::execute(store, shared, req, now, out)
    }
}

/// Log a memcached storage command refused as too large (its data is skipped, and
/// memcached's own reply sent): over `--max-value-size`, or an item over `--max-item-size`.
fn mc_refused(shared: &Shared, what: &str, value_len: u64) {
    if value_len > shared.max_value_size {
        shared.value_refused(what, value_len);
    } else {
        shared.log.limited(
            "item too large",
            &format!(
                "refused ({what}): a value of {value_len} bytes makes an item over the \
                 server's --max-item-size {}",
                shared.max_item_size
            ),
        );
    }
}

struct McBinary<'x>(Ctx<'x>, &'x Limits);

impl Wire for McBinary<'_> {
    type Req<'a> = mc_bin::Request<'a>;
    fn decode<'a>(&mut self, buf: &'a [u8], out: &mut Vec<u8>) -> Step<Self::Req<'a>> {
        match mc_bin::decode(buf, self.1) {
            Ok(mc_bin::Decoded::Complete { request, consumed }) => Step::Request(request, consumed),
            Ok(mc_bin::Decoded::Incomplete) => Step::More,
            Err(e) => {
                let Ctx { store, shared, .. } = self.0;
                if let Some((start, len)) = e.unlink {
                    if let Err(err) =
                        mc_exec::unlink_key(store, shared, &buf[start..start + len], false)
                    {
                        mc_bin::encode_error(
                            out,
                            e.opcode,
                            mc_bin::status::OUT_OF_MEMORY,
                            e.opaque,
                        );
                        let _ = err;
                    }
                } else if e.status == Some(mc_bin::status::TOO_LARGE) {
                    shared.store_too_large.add(1);
                }
                if let Some(n) = e.value_len {
                    mc_refused(shared, "memcached binary", n);
                }
                if let Some(st) = e.status {
                    mc_bin::encode_error(out, e.opcode, st, e.opaque);
                }
                Step::Refused {
                    consumed: e.consumed,
                    close: e.close,
                    discard_line: false,
                    elements: 0,
                }
            }
        }
    }
    fn execute(&mut self, req: &Self::Req<'_>, out: &mut Out) -> Next {
        let Ctx { store, shared, now } = self.0;
        mc_bin_exec::execute(store, shared, req, now, out)
    }
}

/// The store again with its own lifetime: the connection's iterator borrows it for that long.
struct Tyrant<'x, 's>(
    &'s dyn Store,
    Ctx<'x>,
    &'x tt_bin::Limits,
    &'x mut TtState<'s>,
);

impl Wire for Tyrant<'_, '_> {
    type Req<'a> = tt_bin::Request<'a>;
    fn decode<'a>(&mut self, buf: &'a [u8], out: &mut Vec<u8>) -> Step<Self::Req<'a>> {
        match tt_bin::decode(buf, self.2) {
            Ok(tt_bin::Decoded::Complete { request, consumed }) => Step::Request(request, consumed),
            Ok(tt_bin::Decoded::Incomplete) => Step::More,
            Err(e) => {
                let c = buf.get(1).copied().unwrap_or_default();
                if e.reply.is_some() {
                    tt_bin::reply_failure(out, c);
                }
                if let Some(n) = e.value_len {
                    let what = format!("Tyrant {}", tt_bin::cmd_name(c).unwrap_or("request"));
                    let why = self.1.shared.value_refused(&what, n);
                    self.3.last_error = Some(why.to_string());
                }
                Step::Refused {
                    consumed: e.consumed,
                    close: e.close,
                    discard_line: false,
                    elements: e.then_elements,
                }
            }
        }
    }
    fn execute(&mut self, req: &Self::Req<'_>, out: &mut Out) -> Next {
        let Ctx { shared, now, .. } = self.1;
        tt_exec::execute(self.0, shared, self.3, req, now, out)
    }
}

struct KyotoBinary<'x>(Ctx<'x>, &'x kt_bin::Limits);

impl Wire for KyotoBinary<'_> {
    type Req<'a> = kt_bin::Request<'a>;
    fn decode<'a>(&mut self, buf: &'a [u8], out: &mut Vec<u8>) -> Step<Self::Req<'a>> {
        match kt_bin::decode(buf, self.1) {
            Ok(kt_bin::Decoded::Complete { request, consumed }) => Step::Request(request, consumed),
            Ok(kt_bin::Decoded::Incomplete) => Step::More,
            Err(e) => {
                // No error of this protocol leaves the stream readable: answer, then close.
                if let Some(n) = e.value_len {
                    self.0.shared.value_refused("Kyoto Tycoon binary", n);
                }
                kt_bin::reply_error(out);
                Step::Refused {
                    consumed: e.consumed,
                    close: true,
                    discard_line: false,
                    elements: 0,
                }
            }
        }
    }
    fn execute(&mut self, req: &Self::Req<'_>, out: &mut Out) -> Next {
        let Ctx { store, shared, now } = self.0;
        kt_bin_exec::execute(store, shared, req, now, out)
    }
}

/// The store again with its own lifetime: the connection's cursors borrow it for that long.
struct Http<'x, 's>(
    &'s dyn Store,
    Ctx<'x>,
    &'x http::Limits,
    &'x mut KtCursors<'s>,
    /// How the wait of the first request ended (it ran before and waited).
    &'x mut Option<Waited>,
);

impl Wire for Http<'_, '_> {
    type Req<'a> = http::Request<'a>;
    fn decode<'a>(&mut self, buf: &'a [u8], out: &mut Vec<u8>) -> Step<Self::Req<'a>> {
        match http::decode(buf, self.2) {
            Ok(http::Decoded::Complete { request, consumed }) => Step::Request(request, consumed),
            Ok(http::Decoded::Incomplete) => Step::More,
            Ok(http::Decoded::Continue) => {
                // `Expect: 100-continue`: the client waits for this before sending the body.
                out.extend_from_slice(http::CONTINUE);
                Step::More
            }
            Err(e) => {
                e.write(out);
                Step::Refused {
                    consumed: e.consumed,
                    close: e.close,
                    discard_line: false,
                    elements: 0,
                }
            }
        }
    }
    fn execute(&mut self, req: &Self::Req<'_>, out: &mut Out) -> Next {
        let Ctx { shared, now, .. } = self.1;
        http_exec::execute_with(self.0, shared, self.3, req, self.4.take(), now, out)
    }
}

/// Write pending replies until done or the socket is full.
fn flush(c: &mut Conn<'_>, shared: &Shared) -> io::Result<()> {
    let before = c.out.pending();
    let r = c.out.write_to(&mut c.sock).map(|_| ());
    shared
        .bytes_written
        .add(before.saturating_sub(c.out.pending()) as u64);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_connections_is_spread_over_the_workers() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let clients: Vec<_> = (0..9)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        let spread = Spread::new(3);
        // Worker 0 accepts all nine, as the first worker to wake would.
        for _ in 0..9 {
            let (sock, _) = listener.accept().unwrap();
            let to = spread.pick(0);
            if to != 0 {
                spread.hand_over(to, TcpStream::from_std(sock), false);
            }
        }
        let counts: Vec<usize> = spread
            .conns
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        assert_eq!(counts, [3, 3, 3]);
        for w in 1..3 {
            assert!(spread.mail[w].load(Ordering::Relaxed));
            assert_eq!(spread.inbox[w].lock().unwrap().len(), 3);
        }
        assert!(!spread.mail[0].load(Ordering::Relaxed));
        // A tie stays with the worker that accepted; a closed connection makes room.
        spread.conns[2].fetch_sub(1, Ordering::Relaxed);
        assert_eq!(spread.pick(1), 2);
        assert_eq!(spread.pick(1), 1);
        drop(clients);
    }

    #[test]
    fn sniffing() {
        assert_eq!(sniff(0x80, false), Protocol::MemcachedBinary);
        assert_eq!(sniff(0xC8, false), Protocol::TokyoTyrant);
        for b in [0xB1, 0xB4, 0xB8, 0xB9, 0xBA] {
            assert_eq!(sniff(b, false), Protocol::KyotoBinary);
        }
        assert_eq!(sniff(b'G', false), Protocol::Http);
        assert_eq!(sniff(b'P', false), Protocol::Http);
        assert_eq!(sniff(b'g', false), Protocol::MemcachedText);
        assert_eq!(sniff(b's', false), Protocol::MemcachedText);
        // A memcached-only port: binary or text, nothing else.
        assert_eq!(sniff(0x80, true), Protocol::MemcachedBinary);
        for b in [0xC8, 0xB8, b'G', b'P', b'g'] {
            assert_eq!(sniff(b, true), Protocol::MemcachedText);
        }
    }

    fn start(
        threads: usize,
    ) -> (
        std::net::SocketAddr,
        Arc<AtomicBool>,
        std::thread::JoinHandle<io::Result<()>>,
    ) {
        start_limited(threads, DEFAULT_MAX_VALUE)
    }

    fn start_limited(
        threads: usize,
        max_value_size: usize,
    ) -> (
        std::net::SocketAddr,
        Arc<AtomicBool>,
        std::thread::JoinHandle<io::Result<()>>,
    ) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let store = kura_engine::open("*").unwrap();
        let mut shared = Shared::new(now_secs(), 1 << 20);
        shared.max_value_size = max_value_size as u64;
        let shared = Arc::new(shared);
        let stop = Arc::new(AtomicBool::new(false));
        let cfg = Config {
            threads,
            max_connections: 100,
            max_item_size: 1 << 20,
            max_value_size,
            max_inflight: DEFAULT_MAX_INFLIGHT,
            idle_timeout: None,
            memcached_only: Vec::new(),
        };
        let s = stop.clone();
        let h = std::thread::spawn(move || serve(vec![l], store, shared, cfg, s));
        (addr, stop, h)
    }

    fn roundtrip(s: &mut std::net::TcpStream, send: &[u8], expect: &[u8]) {
        s.write_all(send).unwrap();
        let mut got = vec![0u8; expect.len()];
        s.read_exact(&mut got).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(expect)
        );
    }

    /// A Tyrant list refused at an element over the value limit is answered with the
    /// failure form and the rest of it discarded as it arrives, sizes split across reads
    /// included: the next request is answered.
    #[test]
    fn a_refused_tyrant_list_is_skipped_to_its_end() {
        let (addr, stop, h) = start_limited(1, 8);
        let mut t = std::net::TcpStream::connect(addr).unwrap();
        t.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut req = Vec::new();
        tt_bin::encode_request(
            &tt_bin::Request::Misc {
                name: b"putlist",
                opts: 0,
                args: vec![b"k", b"123456789", b"k2", b"v2", b"k3", b"0123456789abcdef"],
            },
            &mut req,
        );
        // A get of k2 follows: it must find nothing (no record of the list was stored).
        req.extend_from_slice(&[0xC8, 0x30, 0, 0, 0, 2, b'k', b'2']);
        for piece in req.chunks(3) {
            t.write_all(piece).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        roundtrip(&mut t, b"", &[1, 0, 0, 0, 0, 1]);
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap().unwrap();
    }

    #[test]
    fn serves_every_protocol_on_one_port() {
        let (addr, stop, h) = start(2);
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        roundtrip(
            &mut s,
            b"set a 0 0 3\r\nabc\r\nget a\r\nbogus\r\n",
            b"STORED\r\nVALUE a 0 3\r\nabc\r\nEND\r\nERROR\r\n",
        );
        // A request split across writes.
        s.write_all(b"set b 0 0 5\r\nhel").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        roundtrip(
            &mut s,
            b"lo\r\nget b\r\n",
            b"STORED\r\nVALUE b 0 5\r\nhello\r\nEND\r\n",
        );
        // A too-large block is refused and skipped; the connection stays in sync.
        let mut big = b"set c 0 0 2000000\r\n".to_vec();
        big.extend(std::iter::repeat_n(b'x', 2_000_000));
        big.extend_from_slice(b"\r\nget a\r\n");
        roundtrip(
            &mut s,
            &big,
            b"SERVER_ERROR object too large for cache\r\nVALUE a 0 3\r\nabc\r\nEND\r\n",
        );
        let mut b = std::net::TcpStream::connect(addr).unwrap();
        b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // A binary noop is answered with a binary response.
        let mut noop = vec![0x80, 0x0a];
        noop.extend_from_slice(&[0; 22]);
        b.write_all(&noop).unwrap();
        let mut resp = [0u8; 24];
        b.read_exact(&mut resp).unwrap();
        assert_eq!((resp[0], resp[1], resp[7]), (0x81, 0x0a, 0));
        // Tyrant's magic byte: a Tyrant get of the record stored over memcached text.
        let mut t = std::net::TcpStream::connect(addr).unwrap();
        t.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        roundtrip(
            &mut t,
            &[0xC8, 0x30, 0, 0, 0, 1, b'a'],
            &[0, 0, 0, 0, 3, b'a', b'b', b'c'],
        );
        // An upper-case first byte: HTTP, the same record over Tyrant's REST interface.
        let mut w = std::net::TcpStream::connect(addr).unwrap();
        w.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        w.write_all(b"GET /a HTTP/1.0\r\n\r\n").unwrap();
        let mut out = Vec::new();
        w.read_to_end(&mut out).unwrap();
        assert!(out.starts_with(b"HTTP/1.0 200") || out.starts_with(b"HTTP/1.1 200"));
        assert!(
            out.ends_with(b"\r\n\r\nabc"),
            "{}",
            String::from_utf8_lossy(&out)
        );
        roundtrip(&mut s, b"quit\r\n", b"");
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap().unwrap();
    }
}
