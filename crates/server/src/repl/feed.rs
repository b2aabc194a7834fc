//! The master's side: a connection that asked for the update log is handed to a thread of its
//! own (blocking I/O), which sends the records after the asked position as they are written,
//! a snapshot first when the replica holds nothing or the log no longer reaches back far
//! enough, and a heartbeat at least once a second. Records that came from the replica itself
//! (their origin is its server id) are never sent back to it.

use super::{Replication, StreamReq};
use kura_engine::ulog::logged::Logged;
use kura_engine::ulog::record::{self, push_value, Op};
use kura_engine::ulog::Start;
use kura_engine::Store;
use kura_proto::repl as wire;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Serve `req` on `sock` from a new thread. `pending` are replies owed to requests that came
/// before it on the connection.
pub fn start(repl: Arc<Replication>, req: StreamReq, sock: TcpStream, pending: Vec<u8>) {
    let _ = std::thread::Builder::new()
        .name("kura-feed".into())
        .spawn(move || {
            let peer = sock
                .peer_addr()
                .map_or_else(|_| "?".to_string(), |a| a.to_string());
            let r = match req {
                StreamReq::Kura { after, sid, flags } => {
                    feed_kura(&repl, sock, &pending, after, sid, flags, &peer)
                }
                StreamReq::Tyrant { ts, sid } => feed_tyrant(&repl, sock, &pending, ts, sid),
            };
            if let Err(e) = r {
                if e.kind() != io::ErrorKind::BrokenPipe
                    && e.kind() != io::ErrorKind::ConnectionReset
                {
                    repl.log(&format!("replication feed to {peer}: {e}"));
                }
            }
        });
}

fn say(sock: &mut TcpStream, tag: u8, payload: &[u8]) -> io::Result<()> {
    let mut b = Vec::with_capacity(5 + payload.len());
    wire::frame(&mut b, tag, payload);
    sock.write_all(&b)
}

fn refuse(sock: &mut TcpStream, text: &str) -> io::Result<()> {
    say(sock, wire::ERROR, text.as_bytes())?;
    let _ = sock.shutdown(std::net::Shutdown::Write);
    Ok(())
}

/// The origin server id of an encoded record.
fn origin_of(rec: &[u8]) -> u32 {
    u32::from_le_bytes([rec[16], rec[17], rec[18], rec[19]])
}

#[allow(clippy::too_many_arguments)]
fn feed_kura(
    repl: &Replication,
    mut sock: TcpStream,
    pending: &[u8],
    after: u64,
    sid: u32,
    flags: u32,
    peer: &str,
) -> io::Result<()> {
    sock.write_all(pending)?;
    let mut hello = Vec::new();
    hello.extend_from_slice(&repl.sid.to_be_bytes());
    let last = repl.logged.as_ref().map_or(0, |l| l.log().last_ts());
    hello.extend_from_slice(&last.to_be_bytes());
    say(&mut sock, wire::HELLO, &hello)?;
    let Some(logged) = repl.logged.clone() else {
        return refuse(
            &mut sock,
            "no update log here: start the master with --ulog DIR",
        );
    };
    if sid == repl.sid {
        return refuse(
            &mut sock,
            "circular replication: the replica has the master's sid",
        );
    }
    let log = logged.log().clone();
    let mut pos = after;
    let behind = match log.reader(pos).map_err(io::Error::other)? {
        Start::Behind { first } => Some(first),
        Start::Reader(_) => None,
    };
    if flags & wire::FRESH != 0 || behind.is_some() {
        if flags & wire::MAY_BOOTSTRAP == 0 {
            let first = behind.unwrap_or(0);
            return refuse(
                &mut sock,
                &format!(
                    "behind: the records after {pos} were removed from the update log (the \
                     oldest kept follow {first}); bootstrap from a snapshot"
                ),
            );
        }
        log.confirm(sid, 0, peer, true);
        pos = snapshot(repl, &logged, &mut sock)?;
    }
    log.confirm(sid, pos, peer, true);
    let mut reader = match log.reader(pos).map_err(io::Error::other)? {
        Start::Reader(r) => r,
        Start::Behind { first } => {
            return refuse(
                &mut sock,
                &format!("behind: the oldest records kept follow {first}; bootstrap again"),
            )
        }
    };
    // Acknowledgements come back on the same connection.
    let gone = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicU64::new(pos));
    {
        let (mut rd, gone, acked, log, peer) = (
            sock.try_clone()?,
            gone.clone(),
            acked.clone(),
            log.clone(),
            peer.to_string(),
        );
        std::thread::Builder::new()
            .name("kura-feed-ack".into())
            .spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    match rd.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                    while let Ok(Some((tag, p, n))) = wire::decode_frame(&buf) {
                        if tag == wire::ACK {
                            if let Some(ts) = wire::be_u64(p) {
                                acked.store(ts, Ordering::Relaxed);
                                log.confirm(sid, ts, &peer, true);
                            }
                        }
                        buf.drain(..n);
                    }
                }
                gone.store(true, Ordering::Relaxed);
                log.confirm(sid, acked.load(Ordering::Relaxed), &peer, false);
            })?;
    }
    let mut out = Vec::with_capacity(1 << 20);
    let mut beat = Instant::now();
    while !gone.load(Ordering::Relaxed) && !repl.stop.load(Ordering::Relaxed) {
        let wait = if out.is_empty() {
            Duration::from_millis(500)
        } else {
            Duration::ZERO
        };
        match reader.next(wait).map_err(io::Error::other)? {
            Some(rec) => {
                if origin_of(rec) != sid {
                    wire::frame(&mut out, wire::RECORD, rec);
                }
                if out.len() >= 256 << 10 {
                    sock.write_all(&out)?;
                    out.clear();
                }
            }
            None => {
                if !out.is_empty() {
                    sock.write_all(&out)?;
                    out.clear();
                }
            }
        }
        if beat.elapsed() >= Duration::from_millis(500) {
            beat = Instant::now();
            wire::frame(&mut out, wire::BEAT, &log.last_ts().to_be_bytes());
            sock.write_all(&out)?;
            out.clear();
        }
    }
    Ok(())
}

/// The values of one key of a database with duplicates, gathered for a snapshot: key,
/// values, flags and expiry of the first.
type Group = (Vec<u8>, Vec<Vec<u8>>, u32, u64);

/// Send a snapshot of the whole database: the position first (every change up to it is in
/// what follows; later ones may be too, and the log after it makes the replica exact).
fn snapshot(repl: &Replication, logged: &Logged, sock: &mut TcpStream) -> io::Result<u64> {
    let pos = logged.position();
    say(sock, wire::SNAP_BEGIN, &pos.to_be_bytes())?;
    let origin = repl.sid;
    let mut chunk = Vec::with_capacity(1 << 20);
    let mut n = 0u32;
    let mut count = 0u64;
    let mut failed = None;
    let dups = logged.allows_dups();
    let mut group: Option<Group> = None;
    let send = |chunk: &mut Vec<u8>, n: &mut u32, sock: &mut TcpStream| -> io::Result<()> {
        let mut f = Vec::with_capacity(chunk.len() + 9);
        let at = wire::begin_frame(&mut f, wire::SNAP);
        f.extend_from_slice(&n.to_be_bytes());
        f.extend_from_slice(chunk);
        wire::end_frame(&mut f, at);
        sock.write_all(&f)?;
        chunk.clear();
        *n = 0;
        Ok(())
    };
    let emit_group = |g: Group, chunk: &mut Vec<u8>| {
        let (key, vals, flags, expires) = g;
        if vals.len() == 1 {
            record::encode(
                chunk,
                pos,
                origin,
                pos,
                &Op::Put {
                    key: &key,
                    value: &vals[0],
                    flags,
                    expires,
                },
            );
        } else {
            let mut body = Vec::new();
            for v in &vals {
                push_value(&mut body, v);
            }
            record::encode(
                chunk,
                pos,
                origin,
                pos,
                &Op::Values {
                    key: &key,
                    count: vals.len() as u32,
                    body: &body,
                },
            );
        }
    };
    let r = logged.for_each_record(&mut |k, v, m| {
        if dups {
            match &mut group {
                Some((gk, vals, ..)) if gk.as_slice() == k => {
                    vals.push(v.to_vec());
                    return Ok(true);
                }
                _ => {
                    if let Some(g) = group.take() {
                        emit_group(g, &mut chunk);
                        n += 1;
                    }
                    group = Some((k.to_vec(), vec![v.to_vec()], m.flags, m.expires));
                    count += 1;
                }
            }
        } else {
            record::encode(
                &mut chunk,
                pos,
                origin,
                pos,
                &Op::Put {
                    key: k,
                    value: v,
                    flags: m.flags,
                    expires: m.expires,
                },
            );
            n += 1;
            count += 1;
        }
        if chunk.len() >= 1 << 20 {
            if let Err(e) = send(&mut chunk, &mut n, sock) {
                failed = Some(e);
                return Ok(false);
            }
        }
        Ok(true)
    });
    if let Some(e) = failed {
        return Err(e);
    }
    r.map_err(io::Error::other)?;
    if let Some(g) = group.take() {
        emit_group(g, &mut chunk);
        n += 1;
    }
    if n > 0 {
        send(&mut chunk, &mut n, sock)?;
    }
    say(sock, wire::SNAP_END, &count.to_be_bytes())?;
    repl.log(&format!("sent a snapshot of {count} keys at {pos}"));
    Ok(pos)
}

/// Tokyo Tyrant's `repl`: `[own sid u32]`, then `[0xC9][ts u64][sid u32][size u32][body]`
/// per record (body: a Tyrant command as a client sends it, then its result byte, 0) and a
/// NOP `[0xCA]` each idle second. Records are sent from time stamp `ts` on (a Tyrant slave
/// asks for its last one plus one).
fn feed_tyrant(
    repl: &Replication,
    mut sock: TcpStream,
    pending: &[u8],
    ts: u64,
    sid: u32,
) -> io::Result<()> {
    sock.write_all(pending)?;
    let Some(logged) = repl.logged.clone() else {
        return Ok(()); // no update log: hang up, as ttserver without -ulog does
    };
    if sid == repl.sid {
        return Ok(());
    }
    let log = logged.log().clone();
    let Start::Reader(mut reader) = log.reader(ts.saturating_sub(1)).map_err(io::Error::other)?
    else {
        repl.log(&format!(
            "a Tyrant slave (sid {sid}) asked for records from {ts}, which were removed"
        ));
        return Ok(());
    };
    sock.write_all(&repl.sid.to_be_bytes())?;
    let peer = sock
        .peer_addr()
        .map_or_else(|_| "?".into(), |a| a.to_string());
    log.confirm(sid, ts.saturating_sub(1), &peer, true);
    let mut out = Vec::with_capacity(1 << 20);
    let mut body = Vec::new();
    let mut idle = Instant::now();
    while !repl.stop.load(Ordering::Relaxed) {
        let wait = if out.is_empty() {
            Duration::from_millis(1000)
        } else {
            Duration::ZERO
        };
        match reader.next(wait).map_err(io::Error::other)? {
            Some(bytes) => {
                let rec = match record::decode(bytes).map_err(io::Error::other)? {
                    record::Next::Record(r, _) => r,
                    record::Next::Incomplete => continue,
                };
                if rec.origin_sid == sid {
                    continue;
                }
                let mut emit = |body: &[u8]| {
                    kura_proto::repl_tt::encode_record(&mut out, rec.ts, rec.origin_sid, body)
                };
                for_tyrant(&rec.op, &mut body, &mut emit).map_err(io::Error::other)?;
                if out.len() >= 256 << 10 {
                    sock.write_all(&out)?;
                    out.clear();
                }
                idle = Instant::now();
            }
            None => {
                if !out.is_empty() {
                    sock.write_all(&out)?;
                    out.clear();
                } else if idle.elapsed() >= Duration::from_millis(900) {
                    let mut nop = Vec::new();
                    kura_proto::repl_tt::encode_nop(&mut nop);
                    sock.write_all(&nop)?;
                    idle = Instant::now();
                }
            }
        }
    }
    Ok(())
}

/// The Tyrant update log bodies (command and result byte) that have an operation's effect,
/// each passed to `emit`.
fn for_tyrant(
    op: &Op<'_>,
    body: &mut Vec<u8>,
    emit: &mut dyn FnMut(&[u8]),
) -> kura_engine::Result<()> {
    use kura_proto::repl_tt as tt;
    body.clear();
    match op {
        Op::Put { key, value, .. } => tt::encode_put(body, key, value, true),
        Op::Remove { key } => tt::encode_out(body, key, true),
        // Tyrant's records do not expire: nothing to send.
        Op::Touch { .. } => return Ok(()),
        Op::Vanish => tt::encode_vanish(body, true),
        Op::Optimize { params } => tt::encode_body(
            body,
            &kura_proto::tt_bin::Request::Optimize { params },
            true,
        ),
        Op::Batch { body: b, .. } => {
            for o in record::batch_ops(b) {
                for_tyrant(&o?, body, emit)?;
            }
            return Ok(());
        }
        Op::Values { key, body: b, .. } => {
            tt::encode_out(body, key, true);
            emit(body);
            body.clear();
            // putlist takes key / value pairs; on a B+ tree each is a putdup.
            let mut args = Vec::new();
            for v in record::values_of(b) {
                args.push(*key);
                args.push(v?);
            }
            if args.is_empty() {
                return Ok(());
            }
            tt::encode_misc(body, b"putlist", &args, true);
        }
    }
    emit(body);
    Ok(())
}
