//! The master's side: a connection that asked for the update log is handed to a thread of its
//! own (blocking I/O), which sends the records after the asked position as they are written,
//! a snapshot first when the replica holds nothing or the log no longer reaches back far
//! enough (Kura's stream only), and a heartbeat at least once a second. Records that came from
//! the replica itself (their origin is its server id) are never sent back to it. Three
//! formats: Kura's own, Tokyo Tyrant's (`feed_tyrant`) and Kyoto Tycoon's (`feed_kyoto`).

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
                StreamReq::Kyoto { flags, ts, sid } => {
                    feed_kyoto(&repl, sock, &pending, flags, ts, sid, &peer)
                }
            };
            if let Err(e) = r {
                if e.kind() != io::ErrorKind::BrokenPipe
                    && e.kind() != io::ErrorKind::ConnectionReset
                {
                    repl.warn(&format!("replication feed to {peer}: {e}"));
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
    let hello_flags = if repl.sync_acks.is_some() {
        wire::HELLO_ACK_AT_ONCE
    } else {
        0
    };
    hello.extend_from_slice(&hello_flags.to_be_bytes());
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
    let sync_acks = repl.sync_acks.clone();
    if let Some(s) = &sync_acks {
        s.ack(sid, pos);
    }
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
                                if let Some(s) = &sync_acks {
                                    s.ack(sid, ts);
                                }
                            }
                        }
                        buf.drain(..n);
                    }
                }
                gone.store(true, Ordering::Relaxed);
                log.confirm(sid, acked.load(Ordering::Relaxed), &peer, false);
                if let Some(s) = &sync_acks {
                    s.gone(sid);
                }
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
/// The keyspace a snapshot's records are of: name and parameters (`None`: the database's own).
type SnapSpace = Option<(String, String)>;

/// Send a snapshot of the whole database: the position first (every change up to it is in
/// what follows; later ones may be too, and the log after it makes the replica exact). The
/// records of each keyspace follow the database's, `In` it.
fn snapshot(repl: &Replication, logged: &Arc<Logged>, sock: &mut TcpStream) -> io::Result<u64> {
    let pos = logged.position();
    say(sock, wire::SNAP_BEGIN, &pos.to_be_bytes())?;
    let origin = repl.sid;
    let mut chunk = Vec::with_capacity(1 << 20);
    let mut n = 0u32;
    let mut count = 0u64;
    let mut failed = None;
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
    // The database's records, then each keyspace's, `In` it.
    let mut stores: Vec<(SnapSpace, Arc<dyn Store>)> =
        vec![(None, logged.clone() as Arc<dyn Store>)];
    for (name, params) in logged.keyspaces() {
        let space = logged
            .keyspace_handle(&name, &params)
            .map_err(io::Error::other)?;
        stores.push((Some((name, params)), space));
    }
    for (space, store) in &stores {
        // One record of the snapshot, `In` the keyspace it is of.
        let encode = |chunk: &mut Vec<u8>, op: Op<'_>| match space {
            None => record::encode(chunk, pos, origin, pos, &op),
            Some((name, params)) => record::encode(
                chunk,
                pos,
                origin,
                pos,
                &Op::In {
                    name: name.as_bytes(),
                    params: params.as_bytes(),
                    op: Box::new(op),
                },
            ),
        };
        let emit_group = |g: Group, chunk: &mut Vec<u8>| {
            let (key, vals, flags, expires) = g;
            if vals.len() == 1 {
                encode(
                    chunk,
                    Op::Put {
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
                encode(
                    chunk,
                    Op::Values {
                        key: &key,
                        count: vals.len() as u32,
                        body: &body,
                    },
                );
            }
        };
        let dups = store.allows_dups();
        let r = store.for_each_record(&mut |k, v, m| {
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
                encode(
                    &mut chunk,
                    Op::Put {
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
    }
    if n > 0 {
        send(&mut chunk, &mut n, sock)?;
    }
    say(sock, wire::SNAP_END, &count.to_be_bytes())?;
    repl.log(&format!("sent a snapshot of {count} keys at {pos}"));
    Ok(pos)
}

/// A reader of the records after `after`; when they were removed, one from the oldest kept
/// if `fresh` (a replica that has applied nothing from this log), else `None`.
fn reader_from(
    log: &Arc<kura_engine::ulog::Ulog>,
    after: u64,
    fresh: bool,
) -> io::Result<Option<kura_engine::ulog::Reader>> {
    Ok(match log.reader(after).map_err(io::Error::other)? {
        Start::Reader(r) => Some(r),
        Start::Behind { first } if fresh => match log.reader(first).map_err(io::Error::other)? {
            Start::Reader(r) => Some(r),
            Start::Behind { .. } => None,
        },
        Start::Behind { .. } => None,
    })
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
    // A new slave (ts 1: it has applied nothing) gets whatever the log still holds, as from
    // ttserver; one that has applied records the log no longer holds is hung up on.
    let Some(mut reader) = reader_from(&log, ts.saturating_sub(1), ts <= 1)? else {
        repl.warn(&format!(
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
    let mut warned = false;
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
                let mut skipped = 0;
                for_tyrant(&rec.op, &mut body, &mut emit, &mut skipped)
                    .map_err(io::Error::other)?;
                not_sent(
                    repl,
                    skipped,
                    &mut warned,
                    &format!("a Tyrant slave (sid {sid})"),
                );
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

/// Count the `n` operations of keyspaces a Tyrant or Kyoto Tycoon slave (`who`) was not sent
/// (`repl_keyspace_skipped`), with a warning in the log the first time on a connection: their
/// streams name no keyspace, and a keyspace's change applied to the slave's only database
/// would be a wrong one.
fn not_sent(repl: &Replication, n: u64, warned: &mut bool, who: &str) {
    if n == 0 {
        return;
    }
    repl.keyspace_skipped.fetch_add(n, Ordering::Relaxed);
    if !*warned {
        *warned = true;
        repl.warn(&format!(
            "{who} is not sent changes of keyspaces (its protocol has none); \
             counted in repl_keyspace_skipped"
        ));
    }
}

/// The Tyrant update log bodies (command and result byte) that have an operation's effect,
/// each passed to `emit`. An operation of a keyspace is not sent: counted in `skipped`.
fn for_tyrant(
    op: &Op<'_>,
    body: &mut Vec<u8>,
    emit: &mut dyn FnMut(&[u8]),
    skipped: &mut u64,
) -> kura_engine::Result<()> {
    use kura_proto::repl_tt as tt;
    body.clear();
    match op {
        Op::In { .. } => {
            *skipped += 1;
            return Ok(());
        }
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
                for_tyrant(&o?, body, emit, skipped)?;
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

/// Kyoto Tycoon's time stamp of message `i` of the `n` a record of time stamp `ts` (µs)
/// becomes. Kyoto Tycoon counts milliseconds × 10^6 plus a counter: Kura sends µs × 1000, and
/// the messages of one record before its last one a little less, so a slave cut off in the
/// middle of a record asks for it again (a requested time stamp is divided by 1000, rounding
/// down, and the records after that are sent).
fn kt_ts(ts: u64, i: usize, n: usize) -> u64 {
    let before_last = (n - 1 - i).min(999) as u64;
    ts.saturating_mul(1000).saturating_sub(before_last)
}

/// The Kyoto Tycoon update-log messages with an operation's effect on the only database
/// (index 0), for a slave whose databases keep expiration times (Kyoto Tycoon's default:
/// every set's value carries the 5-byte expiration time; 2^40 − 1 = never). Kyoto Tycoon has
/// no duplicate keys: a key's several values are sent as its removal and a set of the last
/// one. An expiry change is sent as a set of the key's value now with the new expiration
/// time (nothing when the key is gone: a later record says so). Optimize has no message. An
/// operation of a keyspace has none either: counted in `skipped`.
fn for_kyoto(
    store: &dyn Store,
    op: &Op<'_>,
    sid: u16,
    out: &mut Vec<Vec<u8>>,
    skipped: &mut u64,
) -> io::Result<()> {
    use kura_proto::repl_kt::{self as kt, KtOp, Msg};
    let xt = |expires: u64| Some(if expires == 0 { kt::XT_MAX } else { expires });
    let mut push = |op: KtOp<'_>| {
        let mut m = Vec::new();
        kt::encode_msg(&mut m, &Msg { sid, dbid: 0, op });
        out.push(m);
    };
    match op {
        Op::Put {
            key,
            value,
            expires,
            ..
        } => push(KtOp::Set {
            key,
            value,
            xt: xt(*expires),
        }),
        Op::Remove { key } => push(KtOp::Remove { key }),
        Op::Touch { key, expires } => {
            if let Some(r) = store.get(key).map_err(io::Error::other)? {
                push(KtOp::Set {
                    key,
                    value: &r.value,
                    xt: xt(*expires),
                });
            }
        }
        Op::Vanish => push(KtOp::Clear),
        Op::Optimize { .. } => {}
        Op::In { .. } => *skipped += 1,
        Op::Batch { body, .. } => {
            for o in record::batch_ops(body) {
                for_kyoto(store, &o.map_err(io::Error::other)?, sid, out, skipped)?;
            }
        }
        Op::Values { key, body, .. } => {
            push(KtOp::Remove { key });
            if let Some(v) = record::values_of(body).last() {
                push(KtOp::Set {
                    key,
                    value: v.map_err(io::Error::other)?,
                    xt: xt(0),
                });
            }
        }
    }
    Ok(())
}

/// Kyoto Tycoon's binary replication: `0xB1` (go on) or `0xBF` (no update log; then close),
/// then `[0xB1][ts][size][msg]` per message of the records after the asked time stamp
/// (Kyoto Tycoon's units: µs × 1000, see [`kt_ts`]), skipping those that came from the
/// slave (or, with the WHITESID flag, all others) and sending the time stamp alone after 256
/// skipped in a row; when idle for a second, `[0xB0][ts]` (the last time stamp read), which
/// the slave answers with `0xB1`. Server ids are 16-bit on this stream.
#[allow(clippy::too_many_arguments)]
fn feed_kyoto(
    repl: &Replication,
    mut sock: TcpStream,
    pending: &[u8],
    flags: u32,
    ts: u64,
    sid: u16,
    peer: &str,
) -> io::Result<()> {
    use kura_proto::repl_kt as kt;
    sock.write_all(pending)?;
    let mut out = Vec::with_capacity(1 << 20);
    let Some(logged) = repl.logged.clone() else {
        kt::encode_refuse(&mut out);
        sock.write_all(&out)?;
        return Ok(()); // no update log: refused, as ktserver without -ulog does
    };
    let log = logged.log().clone();
    let after = ts / 1000;
    // A new slave (ts 0) gets whatever the log still holds, as from ktserver.
    let Some(mut reader) = reader_from(&log, after, ts == 0)? else {
        repl.warn(&format!(
            "a Kyoto Tycoon slave (sid {sid}) asked for records after {ts}, which were removed"
        ));
        kt::encode_refuse(&mut out);
        sock.write_all(&out)?;
        return Ok(());
    };
    kt::encode_accept(&mut out);
    sock.write_all(&out)?;
    out.clear();
    sock.set_read_timeout(Some(Duration::from_secs(60)))?;
    let white = flags & kt::WHITESID != 0;
    let who = u32::from(sid);
    log.confirm(who, reader.position(), peer, true);
    let mut msgs = Vec::new();
    let mut missed = 0u32;
    let mut warned = false;
    let mut idle = Instant::now();
    let r = (|| -> io::Result<()> {
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
                    let origin = rec.origin_sid as u16;
                    msgs.clear();
                    if (origin == sid) == white {
                        let mut skipped = 0;
                        for_kyoto(&*repl.store, &rec.op, origin, &mut msgs, &mut skipped)?;
                        not_sent(
                            repl,
                            skipped,
                            &mut warned,
                            &format!("a Kyoto Tycoon slave (sid {sid})"),
                        );
                    }
                    if msgs.is_empty() {
                        missed += 1;
                        if missed >= 256 {
                            kt::encode_record(&mut out, rec.ts.saturating_mul(1000), &[]);
                            missed = 0;
                        }
                    } else {
                        missed = 0;
                        for (i, m) in msgs.iter().enumerate() {
                            kt::encode_record(&mut out, kt_ts(rec.ts, i, msgs.len()), m);
                        }
                    }
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
                        let at = reader.position();
                        let mut nop = Vec::new();
                        kt::encode_nop(&mut nop, at.saturating_mul(1000));
                        sock.write_all(&nop)?;
                        let mut b = [0u8; 1];
                        sock.read_exact(&mut b)?;
                        if kt::decode_ack(&b).is_err() {
                            return Err(io::Error::other(format!(
                                "a Kyoto Tycoon slave answered {:#04x} to an idle frame",
                                b[0]
                            )));
                        }
                        // It has read everything sent before.
                        log.confirm(who, at, peer, true);
                        idle = Instant::now();
                    }
                }
            }
        }
        Ok(())
    })();
    log.confirm(who, 0, peer, false);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kyoto_time_stamps_of_one_record_ask_for_it_again_until_its_last_message() {
        // Three messages of the record at 5 µs, after the record at 4 µs.
        let ts: Vec<u64> = (0..3).map(|i| kt_ts(5, i, 3)).collect();
        assert_eq!(ts, [4998, 4999, 5000]);
        assert!(kt_ts(4, 0, 1) < ts[0]);
        // A slave cut off after the first two asks after 4 µs (the record again); after
        // the last, after 5 µs.
        assert_eq!(ts[1] / 1000, 4);
        assert_eq!(ts[2] / 1000, 5);
        // However many messages, they stay above the previous record's.
        assert_eq!(kt_ts(5, 0, 5000), 4001);
    }

    #[test]
    fn kyoto_messages_of_every_operation() {
        use kura_proto::repl_kt::{decode_msg, KtOp, XT_MAX};
        let db = kura_engine::open("*").unwrap();
        db.put_with(b"t", b"tv", 0, 0).unwrap();
        let mut batch = Vec::new();
        record::push_batch_op(
            &mut batch,
            &Op::Put {
                key: b"p",
                value: b"pv",
                flags: 3,
                expires: 2_000_000_000,
            },
        );
        record::push_batch_op(&mut batch, &Op::Remove { key: b"r" });
        let mut vals = Vec::new();
        push_value(&mut vals, b"v1");
        push_value(&mut vals, b"v2");
        let ops = [
            Op::Batch {
                count: 2,
                body: &batch,
            },
            Op::Touch {
                key: b"t",
                expires: 1_900_000_000,
            },
            Op::Touch {
                key: b"gone",
                expires: 1,
            },
            Op::Values {
                key: b"d",
                count: 2,
                body: &vals,
            },
            Op::Optimize { params: b"" },
            Op::Vanish,
        ];
        let mut out = Vec::new();
        for op in &ops {
            let mut skipped = 0;
            for_kyoto(&*db, op, 7, &mut out, &mut skipped).unwrap();
            assert_eq!(skipped, 0);
        }
        let got: Vec<KtOp<'_>> = out
            .iter()
            .map(|m| {
                let m = decode_msg(m, true).unwrap();
                assert_eq!((m.sid, m.dbid), (7, 0));
                m.op
            })
            .collect();
        let set = |key, value, xt| KtOp::Set {
            key,
            value,
            xt: Some(xt),
        };
        assert_eq!(
            got,
            [
                set(b"p", b"pv", 2_000_000_000),
                KtOp::Remove { key: b"r" },
                set(b"t", b"tv", 1_900_000_000),
                KtOp::Remove { key: b"d" },
                set(b"d", b"v2", XT_MAX),
                KtOp::Clear,
            ]
        );
    }

    /// A batch across keyspaces: a put of the database's own keyspace and one of `idx`.
    fn across_batch() -> Vec<u8> {
        let mut batch = Vec::new();
        record::push_batch_op(
            &mut batch,
            &Op::Put {
                key: b"own",
                value: b"1",
                flags: 0,
                expires: 0,
            },
        );
        record::push_batch_op(
            &mut batch,
            &Op::In {
                name: b"idx",
                params: b"",
                op: Box::new(Op::Put {
                    key: b"in-idx",
                    value: b"2",
                    flags: 0,
                    expires: 0,
                }),
            },
        );
        batch
    }

    #[test]
    fn keyspace_changes_are_not_sent_to_tyrant_or_kyoto_slaves_but_counted() {
        use kura_proto::repl_kt::{decode_msg, KtOp, XT_MAX};
        let batch = across_batch();
        let ops = [
            Op::Batch {
                count: 2,
                body: &batch,
            },
            Op::In {
                name: b"idx",
                params: b"",
                op: Box::new(Op::Remove { key: b"in-idx" }),
            },
        ];
        let db = kura_engine::open("*").unwrap();
        let (mut msgs, mut skipped) = (Vec::new(), 0);
        for op in &ops {
            for_kyoto(&*db, op, 7, &mut msgs, &mut skipped).unwrap();
        }
        assert_eq!(skipped, 2);
        let got: Vec<KtOp<'_>> = msgs
            .iter()
            .map(|m| decode_msg(m, true).unwrap().op)
            .collect();
        assert_eq!(
            got,
            [KtOp::Set {
                key: b"own",
                value: b"1",
                xt: Some(XT_MAX),
            }]
        );

        let (mut bodies, mut body, mut skipped) = (Vec::new(), Vec::new(), 0);
        for op in &ops {
            for_tyrant(
                op,
                &mut body,
                &mut |b| bodies.push(b.to_vec()),
                &mut skipped,
            )
            .unwrap();
        }
        assert_eq!(skipped, 2);
        let mut want = Vec::new();
        kura_proto::repl_tt::encode_put(&mut want, b"own", b"1", true);
        assert_eq!(bodies, [want]);
    }
}
