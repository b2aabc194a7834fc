//! A worker thread: its event loop, its connections (accept, read, park while a Kyoto Tycoon
//! signal is awaited, hand over to replication, close) and their replies.

use super::*;
use crate::context::Shared;
use crate::kt_cursor::KtCursors;
use crate::kt_signal::{Ticket, WaitReq, Waited, Wake};
use crate::mc_stats::Dump;
use crate::out::Out;
use crate::tt_exec::TtState;
use kura_engine::store::now_secs;
use kura_engine::Store;
use kura_proto::mc_text::GetLine;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The waker's token (no connection or listener has it).
pub(super) const WAKE: Token = Token(usize::MAX);

pub(super) struct Conn<'s> {
    pub(super) sock: TcpStream,
    /// Plain, or through a TLS session.
    pub(super) link: Link,
    pub(super) rbuf: Vec<u8>,
    pub(super) out: Out,
    /// Bytes still to discard (the rest of a refused data block).
    pub(super) skip: usize,
    /// Then this many `[size:4][bytes]` elements (the rest of a refused Tyrant list).
    pub(super) skip_elements: usize,
    pub(super) proto: Option<Protocol>,
    pub(super) last: Instant,
    /// Close once the replies are written.
    pub(super) closing: bool,
    /// Registered for writability too (only while replies wait for the socket).
    pub(super) wants_write: bool,
    /// The client closed its side (replies still owed are written first).
    pub(super) eof: bool,
    /// Replies wait until this commit ticket is durable (0: none owed).
    pub(super) ticket: u64,
    /// Replies wait until replicas acknowledge this update log position (0: none owed;
    /// `--sync-replicas`), or until the instant.
    pub(super) acks: u64,
    pub(super) acks_until: Instant,
    /// The acknowledgements did not come in time and `--sync-replicas-on-timeout close`: the
    /// held replies are dropped with the connection.
    pub(super) acks_missed: bool,
    /// In the worker's `held` list (waiting for a commit ticket or acknowledgements).
    pub(super) in_held: bool,
    /// Tokyo Tyrant connections only: the iterator (`iterinit` / `iternext`).
    pub(super) tt: Option<Box<TtState<'s>>>,
    /// HTTP connections only: Kyoto Tycoon's cursors (`cur_*`), freed with the connection.
    pub(super) kt: Option<Box<KtCursors<'s>>>,
    /// Redis connections only: RESP version, name, transaction, SCAN cursors.
    pub(super) redis: Option<Box<crate::redis_exec::RedisConn<'s>>>,
    /// A request asked to wait for a signal (Kyoto Tycoon's `WAIT`); it is still in `rbuf`.
    pub(super) want_wait: Option<WaitReq>,
    /// Parked: waiting for the signal (registered in `Shared::kt_signals`) until the instant.
    /// Nothing is executed meanwhile; the connection is only watched for its client leaving.
    pub(super) wait: Option<(Ticket, Instant)>,
    /// How the wait of the request first in `rbuf` ended: it runs with this.
    pub(super) waited: Option<Waited>,
    /// Accepted on a memcached-only port.
    pub(super) mc_only: bool,
    /// memcached text: the long retrieval line whose next piece is due.
    pub(super) more: Option<GetLine>,
    /// Discarding input through the next newline (the rest of a refused long line).
    pub(super) discard_line: bool,
    /// memcached text: an `lru_crawler metadump` asked for (every item: true) and not started.
    pub(super) want_dump: Option<bool>,
    /// The connection asked to become a replication stream.
    pub(super) want_stream: Option<crate::repl::StreamReq>,
    /// The metadump under way: no request is read until it is written out.
    pub(super) dump: Option<Dump<'s>>,
    /// Bytes granted by the [`Budget`] (0 or the largest request of the protocol).
    pub(super) grant: usize,
    /// Not read for want of a grant: tried again every `PAUSED_RETRY`.
    pub(super) paused: bool,
    /// What the client has proven (its peer, TLS client, user).
    pub(super) session: crate::auth::Session,
}

impl Conn<'_> {
    /// Whether the connection is TLS, and the client's verified certificate: for
    /// authentication (`None` on a plain connection).
    #[allow(dead_code)]
    pub(super) fn tls_info(&self) -> Option<TlsInfo> {
        self.link.info()
    }
}

pub(super) fn worker<'s>(
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
        .wakers
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(waker.clone());
    // Client writes wait for replicas' acknowledgements (`--sync-replicas`): this worker's
    // slot, woken by the acknowledgement that reaches the position it waits for.
    let sync_acks = shared.repl.as_ref().and_then(|r| r.sync_acks.clone());
    let acks_slot = sync_acks.as_ref().map(|s| {
        let w = waker.clone();
        s.register(Box::new(move || {
            let _ = w.wake();
        }))
    });
    // Connections whose replies wait for a commit ticket or replicas' acknowledgements.
    let mut held: Vec<usize> = Vec::new();
    // The position held replies wait for was reached before this worker said it waits.
    let mut recheck = false;
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
        if recheck {
            wait = Duration::ZERO;
        }
        if sync_acks.is_some() {
            // Held replies go out at their timeout at the latest.
            for &idx in &held {
                if let Some(Some(c)) = conns.get(idx) {
                    if c.acks > 0 {
                        wait = wait.min(c.acks_until.saturating_duration_since(Instant::now()));
                    }
                }
            }
        }
        match poll.poll(&mut events, Some(wait)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        // Connections another worker accepted for this one.
        if mine.spread.mail[mine.me].load(Ordering::Acquire) {
            take_mail(mine, &mut poll, &mut conns, &mut free, nl, shared)?;
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
                    cfg.tls_listeners
                        .contains(&t)
                        .then_some(cfg.tls.as_deref())
                        .flatten(),
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
                let before = kura_engine::durability::logged();
                let alive = read_and_execute(c, store, shared, &limits, &mut scratch, hup);
                if let Some(sa) = &sync_acks {
                    // This connection's writes wait for replicas: its replies are held until
                    // the position of the last record it logged is acknowledged (or the
                    // timeout). Reads, and other connections of the batch, do not wait.
                    let now = kura_engine::durability::logged();
                    if now > before {
                        if c.acks == 0 {
                            c.acks_until = Instant::now() + sa.timeout;
                            sa.waits.fetch_add(1, Ordering::Relaxed);
                        }
                        c.acks = c.acks.max(now);
                    }
                }
                if alive {
                    park(c, idx, shared, &wake, &mut waiting);
                }
                if alive && c.want_stream.is_some() {
                    hand_over_stream(&mut poll, &mut conns, &mut free, idx, store, shared, mine);
                    continue;
                }
                if c.ticket == 0 && !kura_engine::durability::pending() && c.acks == 0 {
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
                    if !c.in_held {
                        c.in_held = true;
                        held.push(idx);
                    }
                    c.ticket = ticket;
                }
            }
        }
        // Connections whose writes wait for replicas (set in phase 1) are held too.
        kura_engine::durability::take_logged();
        if sync_acks.is_some() {
            for &(idx, _) in &touched {
                if let Some(c) = conns.get_mut(idx).and_then(Option::as_mut) {
                    if c.acks > 0 && !c.in_held {
                        c.in_held = true;
                        held.push(idx);
                    }
                }
            }
        }
        let (done, failed) = if held.is_empty() {
            (0, false)
        } else {
            committer.status()
        };
        let now = Instant::now();
        let reached = sync_acks.as_ref().map_or(u64::MAX, |s| s.reached());
        // Whether a connection's replies wait for no acknowledgement (any more); a timeout
        // lets them go, counted and logged.
        let acked = |c: &mut Conn<'_>| -> bool {
            if c.acks == 0 || c.acks <= reached {
                return true;
            }
            if now < c.acks_until {
                return false;
            }
            if let Some(sa) = &sync_acks {
                sa.timeouts.fetch_add(1, Ordering::Relaxed);
                c.acks_missed = sa.close_on_timeout;
                shared.log.limited(
                    "sync-replicas timeout",
                    &format!(
                        "{} without the acknowledgement of {} replica(s) after {} ms \
                         (--sync-replicas-timeout; {} replica(s) connected): counted in \
                         repl_sync_timeouts",
                        if sa.close_on_timeout {
                            "connections closed, their replies unsent,"
                        } else {
                            "replies sent"
                        },
                        sa.need,
                        sa.timeout.as_millis(),
                        sa.connected()
                    ),
                );
            }
            c.acks = 0;
            true
        };
        // Connections whose commit is done (or failed) and whose acknowledgements came (or
        // timed out) are finished with the rest.
        held.retain(|&idx| {
            let Some(c) = conns.get_mut(idx).and_then(Option::as_mut) else {
                return false;
            };
            if (c.ticket <= done || failed) && acked(c) {
                c.in_held = false;
                if !touched.iter().any(|&(i, _)| i == idx) {
                    touched.push((idx, true));
                }
                false
            } else {
                true
            }
        });
        for &(idx, alive) in &touched {
            let waits_acks = match conns.get_mut(idx).and_then(Option::as_mut) {
                Some(c) => !failed && c.ticket <= done && !acked(c),
                None => false,
            };
            let keep = match conns.get_mut(idx).and_then(Option::as_mut) {
                Some(c) if c.ticket > done => continue, // still waiting for its commit
                Some(_) if waits_acks => continue,      // waiting for replicas
                Some(c) if c.acks_missed => false,      // unacknowledged: no reply, closed
                Some(c) if failed && c.ticket > 0 => false, // a failed sync: drop, not durability
                Some(c) if alive => {
                    c.ticket = 0;
                    c.acks = 0;
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
        if let (Some(sa), Some(slot)) = (&sync_acks, acks_slot) {
            // The lowest position a held reply waits for: the acknowledgement reaching it
            // wakes this worker. Reached meanwhile: no wake-up comes, so look again at once.
            let lowest = held
                .iter()
                .filter_map(|&i| conns.get(i).and_then(Option::as_ref))
                .filter(|c| c.acks > 0)
                .map(|c| c.acks)
                .min()
                .unwrap_or(crate::repl::acks::NONE);
            recheck = sa.want(slot, lowest);
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
            // TLS: close_notify after the last reply.
            c.link.close_notify(&mut c.sock);
            let _ = c.sock.shutdown(std::net::Shutdown::Write);
        }
        close(&mut poll, &mut conns, &mut free, i, shared, mine);
    }
    Ok(())
}

/// How long a stopping worker waits, in all, for clients to take their last replies.
pub(super) const STOP_FLUSH: Duration = Duration::from_secs(5);

/// Write a connection's pending output, waiting for the socket to drain until `deadline`.
pub(super) fn drain_until(c: &mut Conn<'_>, shared: &Shared, deadline: Instant) {
    loop {
        if flush(c, shared).is_err() || drained(c) {
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
pub(super) fn accept_all(
    listener: &TcpListener,
    mc_only: bool,
    tls: Option<&Tls>,
    poll: &mut Poll,
    conns: &mut Vec<Option<Conn<'_>>>,
    free: &mut Vec<usize>,
    nl: usize,
    shared: &Shared,
    cfg: &Config,
    mine: &Mine,
) -> io::Result<()> {
    loop {
        let (mut sock, peer) = match listener.accept() {
            Ok(s) => s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // Out of descriptors and the like: drop this round, the next event retries.
            Err(_) => return Ok(()),
        };
        if shared.curr_connections.load(Ordering::Relaxed) as usize >= cfg.max_connections {
            shared.rejected_connections.fetch_add(1, Ordering::Relaxed);
            shared.log.limited(
                "connection refused",
                &format!(
                    "refused a connection from {peer}: --max-connections {} reached",
                    cfg.max_connections
                ),
            );
            if tls.is_none() {
                // (A TLS client could not read it: it is closed without a word.)
                let _ = sock.write_all(b"SERVER_ERROR too many open connections\r\n");
            }
            continue; // dropped: closes the socket
        }
        let link = match tls.map(Tls::session) {
            None => Link::Plain,
            Some(Ok(t)) => Link::Tls(Box::new(t)),
            Some(Err(e)) => {
                shared.log.limited(
                    "tls",
                    &format!("TLS session not started, connection closed: {e}"),
                );
                continue;
            }
        };
        let _ = sock.set_nodelay(true);
        shared.curr_connections.fetch_add(1, Ordering::Relaxed);
        shared.total_connections.fetch_add(1, Ordering::Relaxed);
        let to = mine.spread.pick(mine.me);
        if to == mine.me {
            adopt(sock, mc_only, link, poll, conns, free, nl, shared)?;
        } else {
            mine.spread.hand_over(to, sock, mc_only, link);
        }
    }
}

/// Register a connection with this worker's event loop.
#[allow(clippy::too_many_arguments)] // the worker's parts a new connection joins
pub(super) fn adopt(
    mut sock: TcpStream,
    mc_only: bool,
    link: Link,
    poll: &mut Poll,
    conns: &mut Vec<Option<Conn<'_>>>,
    free: &mut Vec<usize>,
    nl: usize,
    shared: &Shared,
) -> io::Result<()> {
    let session = crate::auth::Session::new(sock.peer_addr().ok(), &shared.access);
    let idx = free.pop().unwrap_or_else(|| {
        conns.push(None);
        conns.len() - 1
    });
    poll.registry()
        .register(&mut sock, Token(nl + idx), Interest::READABLE)?;
    conns[idx] = Some(Conn {
        sock,
        link,
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
        acks: 0,
        acks_until: Instant::now(),
        acks_missed: false,
        in_held: false,
        tt: None,
        kt: None,
        redis: None,
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
        session,
    });
    Ok(())
}

/// Register the connections other workers accepted for this one.
pub(super) fn take_mail(
    mine: &Mine,
    poll: &mut Poll,
    conns: &mut Vec<Option<Conn<'_>>>,
    free: &mut Vec<usize>,
    nl: usize,
    shared: &Shared,
) -> io::Result<()> {
    let socks = {
        let mut inbox = mine.spread.inbox[mine.me]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        mine.spread.mail[mine.me].store(false, Ordering::Release);
        std::mem::take(&mut *inbox)
    };
    for (sock, mc_only, link) in socks {
        adopt(sock, mc_only, link, poll, conns, free, nl, shared)?;
    }
    Ok(())
}

/// Spreads new connections evenly over the workers, as memcached's dispatcher does. Every
/// worker accepts from the shared listeners, and without this the first one to wake takes a
/// whole burst of connects. That split moved from run to run (119 against 68 CPU ticks, then
/// 64 against 120), and with a client waiting on each reply, the connections of the busier
/// worker wait longer while the other core idles. Unpipelined throughput followed it (221K to
/// 260K requests/s).
pub(super) struct Spread {
    /// Open connections of each worker (counted when handed over, so a burst spreads).
    pub(super) conns: Vec<std::sync::atomic::AtomicUsize>,
    /// Connections accepted for each worker by another, not yet registered.
    pub(super) inbox: Vec<std::sync::Mutex<Vec<(TcpStream, bool, Link)>>>,
    pub(super) mail: Vec<AtomicBool>,
    pub(super) wakers: Vec<std::sync::Mutex<Option<Arc<mio::Waker>>>>,
}

impl Spread {
    pub(super) fn new(workers: usize) -> Spread {
        Spread {
            conns: (0..workers).map(|_| Default::default()).collect(),
            inbox: (0..workers).map(|_| Default::default()).collect(),
            mail: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            wakers: (0..workers).map(|_| Default::default()).collect(),
        }
    }

    /// The worker for a connection `me` just accepted: the one with the fewest, `me` on a tie.
    /// Counts it for that worker.
    pub(super) fn pick(&self, me: usize) -> usize {
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

    pub(super) fn hand_over(&self, to: usize, sock: TcpStream, mc_only: bool, link: Link) {
        self.inbox[to]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((sock, mc_only, link));
        self.mail[to].store(true, Ordering::Release);
        // A worker that has no waker yet takes its mail on its first round.
        if let Some(w) = &*self.wakers[to].lock().unwrap_or_else(|p| p.into_inner()) {
            let _ = w.wake();
        }
    }
}

/// A worker's index, the spread it takes part in and the server's request budget.
pub(super) struct Mine {
    pub(super) spread: Arc<Spread>,
    pub(super) me: usize,
    pub(super) budget: Arc<Budget>,
}

pub(super) fn close(
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
        c.link.close_notify(&mut c.sock);
        let _ = poll.registry().deregister(&mut c.sock);
        free.push(idx);
        shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
        mine.spread.conns[mine.me].fetch_sub(1, Ordering::Relaxed);
    }
}

/// Give a connection that asked for a replication stream to a thread of its own, with the
/// replies owed to the requests before it.
pub(super) fn hand_over_stream(
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
    if !c.link.is_plain() {
        // The stream's thread writes the socket itself; a follower speaks plain TCP.
        shared.log.limited(
            "tls replication",
            &format!(
                "replication stream refused on a TLS connection from {}: followers connect \
                 to a plain port (--port, or a --tls-port beside it)",
                c.sock
                    .peer_addr()
                    .map_or_else(|_| "?".to_string(), |a| a.to_string())
            ),
        );
        c.link.close_notify(&mut c.sock);
        return;
    }
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
pub(super) fn read_and_execute<'s>(
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
        match c.link.read(&mut c.sock, scratch) {
            Ok(0) => c.eof = true,
            Ok(n) => {
                shared.bytes_read.add(n as u64);
                c.rbuf.extend_from_slice(&scratch[..n]);
                process(c, store, shared, limits);
                release(c, limits);
                if n < READ_CHUNK && !hup && c.link.is_plain() {
                    // A short read took everything there was; new data raises a new event
                    // (edge-triggered), so skip the read that would only say EAGAIN. (A TLS
                    // session may hold more plaintext than one read gave: read on.)
                    break;
                }
            }
            Err(e) => match e.kind() {
                io::ErrorKind::WouldBlock => break,
                io::ErrorKind::Interrupted => continue,
                _ => return read_failed(c, shared, &e),
            },
        }
    }
    true
}

/// A read failed: the connection is finished (false). A TLS failure (a handshake refused, a
/// bad record) is logged with the client's address; a socket error is not.
pub(super) fn read_failed(c: &Conn<'_>, shared: &Shared, e: &io::Error) -> bool {
    if e.kind() == io::ErrorKind::InvalidData && !c.link.is_plain() {
        let peer = c
            .sock
            .peer_addr()
            .map_or_else(|_| "?".to_string(), |a| a.to_string());
        shared
            .log
            .limited("tls", &format!("TLS connection from {peer} closed: {e}"));
    }
    false
}

/// While a request waits for a signal: keep what the client sends (nothing is executed), and
/// end the wait with the connection when the client closes it. False when it is finished.
pub(super) fn buffer_while_waiting(
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
        match c.link.read(&mut c.sock, scratch) {
            Ok(0) => return false,
            Ok(n) => {
                shared.bytes_read.add(n as u64);
                c.rbuf.extend_from_slice(&scratch[..n]);
            }
            Err(e) => match e.kind() {
                io::ErrorKind::WouldBlock => break,
                io::ErrorKind::Interrupted => continue,
                _ => return read_failed(c, shared, &e),
            },
        }
    }
    true
}

/// Park a connection whose request asked to wait for a signal: register it, to be woken
/// through `wake`, and note it in `waiting`.
pub(super) fn park(
    c: &mut Conn<'_>,
    idx: usize,
    shared: &Shared,
    wake: &Wake,
    waiting: &mut Vec<usize>,
) {
    if let Some(w) = c.want_wait.take() {
        let ticket = shared.kt_signals.wait(&w.name, wake.clone());
        c.wait = Some((ticket, Instant::now() + w.time));
        waiting.push(idx);
    }
}

/// The parked connections whose wait has ended (signaled, or past its time): each is told how,
/// and is to run its request now.
pub(super) fn wait_ended(
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
pub(super) fn may_read(c: &mut Conn<'_>, limits: &AllLimits) -> bool {
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
pub(super) fn release(c: &mut Conn<'_>, limits: &AllLimits) {
    if c.grant > 0 && c.rbuf.len() + READ_CHUNK <= FREE {
        limits.budget.give(c.grant);
        c.grant = 0;
        c.rbuf.shrink_to(FREE);
    }
}

/// After a connection's replies were handed to the socket: close it unless `keep`, else
/// watch for writability exactly while output is left over.
#[allow(clippy::too_many_arguments)]
pub(super) fn settle(
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
        let pending = !drained(c) || c.dump.is_some();
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
pub(super) fn finish_all<'s>(
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
        if c.dump.is_none() || !drained(c) {
            return true;
        }
        if !read_and_execute(c, store, shared, limits, scratch, false) {
            return false;
        }
    }
}

/// The next batch of a metadump.
pub(super) fn pump(c: &mut Conn<'_>, shared: &Shared) {
    if let Some(d) = c.dump.as_mut() {
        if !d.step(shared, now_secs(), &mut c.out) {
            c.dump = None;
        }
    }
}

/// Write the replies; false when the connection is finished (the client hung up, or it asked
/// to close and has everything).
pub(super) fn finish(c: &mut Conn<'_>, shared: &Shared) -> bool {
    if flush(c, shared).is_err() {
        return false;
    }
    !((c.eof || c.closing) && drained(c))
}

/// Every reply is written out (TLS: encrypted and handed to the socket).
pub(super) fn drained(c: &Conn<'_>) -> bool {
    c.out.is_drained() && !c.link.wants_write()
}

/// Write pending replies until done or the socket is full.
pub(super) fn flush(c: &mut Conn<'_>, shared: &Shared) -> io::Result<()> {
    let before = c.out.pending();
    let r = c.link.write(&mut c.sock, &mut c.out);
    shared
        .bytes_written
        .add(before.saturating_sub(c.out.pending()) as u64);
    r
}
