//! The replica's side: one thread follows the master (`Replication::master`), applies its
//! records in order, and every 200 ms makes what it applied durable, then saves its position
//! (a persistent replica: `pos_file`, written only after the database is synced, so the
//! position never runs ahead of the data) and, on Kura's stream, acknowledges it to the
//! master. It reconnects by itself (every second).
//!
//! Three masters: Kura's own stream (`session`; records are effects, so replaying a few again
//! after a crash changes nothing; a snapshot when this replica holds nothing or the master's
//! log no longer reaches back to its position, or the master changed), Tokyo Tyrant's `repl`
//! (`session_tyrant`: commands, redone with their Tyrant meaning; no snapshot) and Kyoto
//! Tycoon's binary replication (`session_kyoto`: sets with their expiration time, removes,
//! clears; no snapshot).

use super::{Bootstrap, MasterProtocol, Replication};
use kura_engine::ulog::apply::apply;
use kura_engine::ulog::record::{self, Op, Rec};
use kura_engine::ulog::Start;
use kura_engine::BatchOp;
use kura_proto::repl as wire;
use kura_proto::{repl_kt, repl_tt, tt_bin};
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Start the follower thread (it idles while there is no master).
pub fn start(repl: Arc<Replication>) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("kura-follow".into())
        .spawn(move || run(&repl))
}

/// What the position file holds: the master's server id, the position in its log, the
/// protocol that position belongs to, and this server's own update log time stamp when it
/// was saved (0: none); `found` is false when there is no position file (or a damaged one).
#[derive(Debug, Default, PartialEq, Eq)]
struct Saved {
    found: bool,
    sid: u32,
    ts: u64,
    protocol: MasterProtocol,
    local: u64,
}

fn load_pos(repl: &Replication) -> Saved {
    let Some(p) = &repl.pos_file else {
        return Saved::default();
    };
    let Ok(text) = std::fs::read_to_string(p) else {
        return Saved::default();
    };
    let mut lines = text.lines();
    let (Some(body), Some(crc)) = (lines.next(), lines.next()) else {
        return Saved::default();
    };
    if crc.strip_prefix("crc ").and_then(|c| c.parse::<u32>().ok())
        != Some(crc32c::crc32c(body.as_bytes()))
    {
        repl.warn(&format!(
            "{}: damaged replica position; starting over from the master",
            p.display()
        ));
        return Saved::default();
    }
    let f: Vec<&str> = body.split(' ').collect();
    let num = |s: &str| s.parse().unwrap_or(0);
    match f[..] {
        ["kura-replica", sid, ts] => Saved {
            found: true,
            sid: num(sid) as u32,
            ts: num(ts),
            ..Saved::default()
        },
        ["kura-replica", sid, ts, proto, local] => Saved {
            found: true,
            sid: num(sid) as u32,
            ts: num(ts),
            protocol: MasterProtocol::parse(proto).unwrap_or_default(),
            local: num(local),
        },
        _ => Saved::default(),
    }
}

fn save_pos(repl: &Replication, sid: u32, ts: u64) -> io::Result<()> {
    let Some(p) = &repl.pos_file else {
        return Ok(());
    };
    // Read before the sync: every record of what was applied up to `ts` is at or before it.
    let local = repl.logged.as_ref().map_or(0, |l| l.log().last_ts());
    repl.store.sync().map_err(io::Error::other)?;
    let body = format!("kura-replica {sid} {ts} {} {local}", repl.protocol().name());
    let text = format!("{body}\ncrc {}\n", crc32c::crc32c(body.as_bytes()));
    let tmp = p.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, p)
}

/// The newest origin time stamp of a replicated record in this server's own update log after
/// `local` (its time stamp when the position was saved): the last command of a Tyrant master
/// applied here, even if the server was killed before it saved its position. Its effects are
/// in the database (the log is redone onto it at open), so the master is asked for the
/// commands after it and none is applied twice. (A command that changed nothing left no
/// record; redoing it changes nothing again.)
fn applied_in_log(repl: &Replication, local: u64) -> u64 {
    // A database that starts empty (no position file: a memory one) holds none of them.
    let (Some(l), Some(_)) = (&repl.logged, &repl.pos_file) else {
        return 0;
    };
    // The newest records are kept longest: from the oldest kept if some were removed.
    // Damage in the log is said, not passed over in silence: the commands after it may be
    // asked for (and applied) again.
    let damaged = |e: kura_engine::Error, newest: u64| {
        repl.warn(&format!(
            "reading this server's update log for the Tyrant master's commands applied: {e} \
             (going on from those found up to {newest})"
        ));
        newest
    };
    let mut r = match l.log().reader(local) {
        Ok(Start::Reader(r)) => r,
        Ok(Start::Behind { first }) => match l.log().reader(first) {
            Ok(Start::Reader(r)) => r,
            Ok(Start::Behind { .. }) => return 0,
            Err(e) => return damaged(e, 0),
        },
        Err(e) => return damaged(e, 0),
    };
    let mut newest = 0;
    loop {
        match r.next(Duration::ZERO) {
            Ok(Some(bytes)) => {
                if let Ok(record::Next::Record(rec, _)) = record::decode(bytes) {
                    if rec.origin_sid != repl.sid {
                        newest = newest.max(rec.origin_ts);
                    }
                }
            }
            Ok(None) => return newest,
            Err(e) => return damaged(e, newest),
        }
    }
}

/// Where to start in the log of a master of protocol `proto` when it is first known: the
/// saved position when it belongs to a log of that protocol, else `--master-ts`, else the
/// start; a Tyrant master's commands found applied in this server's own log move it on.
fn start_position(repl: &Replication, proto: MasterProtocol) -> (u32, u64) {
    let saved = load_pos(repl);
    // A position is one of a log of the master's protocol.
    let usable = saved.found && saved.protocol == proto;
    let (msid, mut pos) = if usable {
        (saved.sid, saved.ts)
    } else {
        (0, 0)
    };
    if saved.found && !usable && saved.ts != 0 {
        repl.log(&format!(
            "the replica's position is one of a {} master's log; starting over from this {} \
             master",
            saved.protocol.name(),
            proto.name()
        ));
    }
    if !usable {
        if let Some(ts) = repl.initial_ts {
            repl.log(&format!(
                "no saved position: starting after {ts} of the master's log"
            ));
            pos = ts;
        }
    }
    // Tyrant's records are commands: go on after the last one applied, even if the server
    // stopped before it saved its position (or before it saved one at all).
    if proto == MasterProtocol::Tyrant && (usable || !saved.found) {
        let found = applied_in_log(repl, if usable { saved.local } else { 0 });
        if found > pos {
            repl.log(&format!(
                "commands up to {found} were applied after the saved position {pos}: \
                 going on after them"
            ));
            pos = found;
        }
    }
    (msid, pos)
}

/// Wait a second, or less when the master is changed or the server stops.
fn pause(repl: &Replication, gen: u64) {
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until
        && !repl.stop.load(Ordering::Relaxed)
        && repl.generation.load(Ordering::Relaxed) == gen
    {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Say a replication error: in the log (once until it changes) and in `stat`.
fn report_error(repl: &Replication, host: &str, port: u16, text: String, last: &mut String) {
    if text != *last {
        repl.warn(&format!("replication from {host}:{port}: {text}"));
        last.clone_from(&text);
    }
    repl.with_status(|s| s.last_error = text);
}

fn run(repl: &Replication) {
    // Applied changes owe no sync of their own: what the replica has applied is made durable
    // (one sync) before its position is saved and acknowledged.
    kura_engine::durability::set_deferred(true);
    // The protocol the position belongs to, once known.
    let mut resolved: Option<MasterProtocol> = None;
    let (mut msid, mut pos) = (0u32, 0u64);
    // The generation (master) the detected protocol belongs to.
    let mut probed: Option<u64> = None;
    let mut reset: Option<u64> = None;
    let mut last_err = String::new();
    while !repl.stop.load(Ordering::Relaxed) {
        let gen = repl.generation.load(Ordering::Relaxed);
        if let Some(ts) = repl.take_reset() {
            reset = Some(ts);
        }
        let Some((host, port)) = repl.master() else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        if repl.status().halted {
            // A refused bootstrap: wait for another master (setmst) or the stop.
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        let proto = match repl.protocol {
            Some(p) => p,
            None if probed == Some(gen) => repl.protocol(),
            None => match probe(&host, port) {
                Ok(p) => {
                    repl.log(&format!(
                        "the master {host}:{port} speaks {}'s replication protocol: following \
                         it so",
                        p.name()
                    ));
                    *repl.detected.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
                    probed = Some(gen);
                    p
                }
                Err(e) => {
                    report_error(repl, &host, port, e.to_string(), &mut last_err);
                    pause(repl, gen);
                    continue;
                }
            },
        };
        if resolved != Some(proto) {
            (msid, pos) = match resolved {
                None => start_position(repl, proto),
                Some(_) => (0, 0),
            };
            resolved = Some(proto);
            let copy_of = (msid != 0).then_some(msid);
            repl.with_status(|s| {
                s.copy_of = copy_of;
                s.position = pos;
                s.master_sid = msid;
                s.units_per_us = proto.units_per_us();
            });
        }
        if let Some(ts) = reset.take() {
            repl.log(&format!("going on after {ts} of the master's log"));
            (msid, pos) = (0, ts);
            repl.with_status(|s| s.position = ts);
            let _ = save_pos(repl, msid, pos);
        }
        let r = match proto {
            MasterProtocol::Kura => session(repl, &host, port, gen, &mut msid, &mut pos),
            MasterProtocol::Tyrant => session_tyrant(repl, &host, port, gen, &mut msid, &mut pos),
            MasterProtocol::Kyoto => session_kyoto(repl, &host, port, gen, &mut pos),
        };
        let was_connected = repl.status().connected;
        repl.with_status(|s| s.connected = false);
        if let Err(e) = r {
            let mut text = e.to_string();
            if !was_connected && e.kind() != io::ErrorKind::ConnectionRefused {
                // The handshake failed: is it the wrong kind of master?
                match repl.protocol {
                    Some(given) => match probe(&host, port) {
                        Ok(p) if p != given => text.push_str(&format!(
                            "; the master speaks {}'s replication protocol, not {}'s: start \
                             with --master-protocol {} (or without the flag, to follow what \
                             the master speaks)",
                            p.name(),
                            given.name(),
                            p.name()
                        )),
                        _ => {}
                    },
                    // Found out again next time.
                    None => probed = None,
                }
            }
            report_error(repl, &host, port, text, &mut last_err);
        } else {
            last_err.clear();
        }
        let _ = save_pos(repl, msid, pos);
        // Reconnect after a second (at once when the master was changed).
        pause(repl, gen);
    }
}

/// How long a probe waits for each answer.
const PROBE_WAIT: Duration = Duration::from_millis(1500);

/// Send `req` to `host:port` on a new connection and read the answer until `done` says it is
/// complete, the peer hangs up or [`PROBE_WAIT`] has passed.
fn ask(host: &str, port: u16, req: &[u8], done: impl Fn(&[u8]) -> bool) -> io::Result<Vec<u8>> {
    let mut sock = connect(host, port)?;
    sock.write_all(req)?;
    let start = Instant::now();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    while start.elapsed() < PROBE_WAIT && !done(&buf) && buf.len() < 1 << 20 {
        match sock.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    Ok(buf)
}

/// Find out which replication protocol the master at `host:port` speaks, from its answers to
/// two harmless requests: Tyrant's `stat` (Kura and Tokyo Tyrant answer it; Kura's status has
/// `kura_version`), then Kyoto Tycoon's `GET /rpc/report` over HTTP (its report has
/// `conf_kt_version`). An error names what it answered (or that it said nothing) and the flag
/// that fixes the protocol.
pub(crate) fn probe(host: &str, port: u16) -> io::Result<MasterProtocol> {
    let stat = ask(host, port, &[0xC8, tt_bin::cmd::STAT], |b| {
        b.len() >= 5
            && b[0] == 0
            && b.len() >= 5 + u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize
    })?;
    if stat.len() >= 5 && stat[0] == 0 {
        let text = String::from_utf8_lossy(&stat[5..]);
        if text.contains("\nkura_version\t") {
            return Ok(MasterProtocol::Kura);
        }
        if text.starts_with("version\t") {
            return Ok(MasterProtocol::Tyrant);
        }
    }
    let http = ask(
        host,
        port,
        b"GET /rpc/report HTTP/1.0\r\nConnection: close\r\n\r\n",
        |b| b.windows(16).any(|w| w == b"conf_kt_version\t") && b.ends_with(b"\n"),
    )?;
    let text = String::from_utf8_lossy(&http);
    if text.starts_with("HTTP/1.") && text.contains("conf_kt_version\t") {
        return Ok(if text.contains("(kura ") {
            MasterProtocol::Kura
        } else {
            MasterProtocol::Kyoto
        });
    }
    let heard = if stat.is_empty() && http.is_empty() {
        format!("said nothing within {} ms", PROBE_WAIT.as_millis())
    } else {
        let first = if stat.is_empty() { &http } else { &stat };
        let shown: String = String::from_utf8_lossy(&first[..first.len().min(24)])
            .chars()
            .map(|c| if c.is_control() { '.' } else { c })
            .collect();
        format!("answered {} bytes ({shown:?}…)", first.len())
    };
    Err(fail(format!(
        "the master {heard} to a probe for Kura's, Tokyo Tyrant's and Kyoto Tycoon's \
         protocols: is {host}:{port} a replication master? --master-protocol kura|tyrant|kyoto \
         names its protocol"
    )))
}

fn fail(msg: impl Into<String>) -> io::Error {
    io::Error::other(msg.into())
}

/// Apply one record from the master.
fn take(repl: &Replication, rec: &Rec<'_>) -> io::Result<()> {
    let r = match &repl.logged {
        Some(l) => l.apply_remote(rec).map(|_| ()),
        None if rec.origin_sid == repl.sid => Ok(()),
        None => apply(&*repl.store, &rec.op).map(|_| ()),
    };
    r.map_err(|e| fail(format!("applying the record at {}: {e}", rec.ts)))
}

/// Connect to the master (reads time out after 100 ms, so the stop flag and a change of
/// master are seen).
fn connect(host: &str, port: u16) -> io::Result<TcpStream> {
    let addr = (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| fail("no address"))?;
    let sock = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
    sock.set_nodelay(true)?;
    sock.set_read_timeout(Some(Duration::from_millis(100)))?;
    Ok(sock)
}

/// Read what the master sent into `buf`. An error when it hung up or said nothing for
/// `quiet` (its heartbeats come at least once a second).
fn fill(
    sock: &mut TcpStream,
    chunk: &mut [u8],
    buf: &mut Vec<u8>,
    heard: &mut Instant,
    quiet: Duration,
) -> io::Result<()> {
    match sock.read(chunk) {
        Ok(0) => Err(fail("the master closed the connection")),
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            *heard = Instant::now();
            Ok(())
        }
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            if heard.elapsed() > quiet {
                return Err(fail(format!(
                    "no word from the master for {} s",
                    quiet.as_secs()
                )));
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// One connection to the master, until it fails, the master changes or the server stops.
fn session(
    repl: &Replication,
    host: &str,
    port: u16,
    gen: u64,
    msid: &mut u32,
    pos: &mut u64,
) -> io::Result<()> {
    let mut sock = connect(host, port)?;
    let mut req = Vec::new();
    let flags = wire::MAY_BOOTSTRAP | if *pos == 0 { wire::FRESH } else { 0 };
    wire::encode_request(
        &mut req,
        &wire::Request {
            after: *pos,
            sid: repl.sid,
            flags,
        },
    );
    sock.write_all(&req)?;
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut chunk = vec![0u8; 256 << 10];
    let mut snap: Option<(u64, u64)> = None; // (position, keys received)
    let mut last_save = Instant::now();
    let mut saved = *pos;
    let mut heard = Instant::now();
    // The master holds client writes until acknowledged (HELLO's flag): acknowledge as soon
    // as what was applied is durable.
    let mut at_once = false;
    let mut acked = *pos;
    loop {
        if repl.stop.load(Ordering::Relaxed) || repl.generation.load(Ordering::Relaxed) != gen {
            return Ok(());
        }
        if let Err(e) = fill(
            &mut sock,
            &mut chunk,
            &mut buf,
            &mut heard,
            Duration::from_secs(5),
        ) {
            if *msid == 0 || !repl.status().connected {
                return Err(fail(format!(
                    "the master did not answer Kura's replication handshake ({e})"
                )));
            }
            return Err(e);
        }
        let mut at = 0;
        loop {
            let (tag, p, n) = match wire::decode_frame(&buf[at..]) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return Err(fail(format!("bad frame from the master: {e:?}"))),
            };
            at += n;
            match tag {
                wire::HELLO => {
                    let sid = wire::be_u32(p).ok_or_else(|| fail("short hello"))?;
                    let last = wire::be_u64(&p[4.min(p.len())..]).unwrap_or(0);
                    let flags = wire::be_u32(&p[12.min(p.len())..]).unwrap_or(0);
                    at_once = flags & wire::HELLO_ACK_AT_ONCE != 0;
                    if sid == repl.sid {
                        return Err(fail("circular: the master has this server's sid"));
                    }
                    if *msid != 0 && *msid != sid && *pos != 0 {
                        // Another master: its log's positions mean nothing here.
                        *pos = 0;
                        *msid = sid;
                        return Err(fail(format!(
                            "the master is now server {sid}: bootstrapping from it"
                        )));
                    }
                    *msid = sid;
                    repl.with_status(|s| {
                        s.connected = true;
                        s.heard = Some(Instant::now());
                        s.master_sid = sid;
                        s.master_last = last;
                        s.last_error.clear();
                    });
                }
                wire::RECORD => {
                    let rec = match record::decode(p) {
                        Ok(record::Next::Record(r, _)) => r,
                        Ok(record::Next::Incomplete) => {
                            return Err(fail("a record cut short in its frame"))
                        }
                        Err(e) => return Err(fail(format!("a damaged record: {e}"))),
                    };
                    if rec.ts > *pos {
                        take(repl, &rec)?;
                        *pos = rec.ts;
                        repl.with_status(|s| {
                            s.applied += 1;
                            s.position = rec.ts;
                            s.master_last = s.master_last.max(rec.ts);
                            s.heard = Some(heard);
                        });
                    }
                }
                wire::BEAT => {
                    let last = wire::be_u64(p).unwrap_or(0);
                    repl.with_status(|s| {
                        s.master_last = last;
                        s.heard = Some(heard);
                    });
                }
                wire::SNAP_BEGIN => {
                    let at_ts = wire::be_u64(p).ok_or_else(|| fail("short snapshot start"))?;
                    begin_bootstrap(repl, *msid, *pos, at_ts)?;
                    snap = Some((at_ts, 0));
                }
                wire::SNAP => {
                    let Some((at_ts, got)) = snap.as_mut() else {
                        return Err(fail("snapshot data outside a snapshot"));
                    };
                    *got += load_chunk(repl, *msid, *at_ts, p)?;
                }
                wire::SNAP_END => {
                    let want = wire::be_u64(p).ok_or_else(|| fail("short snapshot end"))?;
                    let Some((at_ts, got)) = snap.take() else {
                        return Err(fail("snapshot end outside a snapshot"));
                    };
                    if got != want {
                        return Err(fail(format!(
                            "the snapshot held {got} keys, the master said {want}"
                        )));
                    }
                    *pos = at_ts;
                    repl.with_status(|s| {
                        s.position = at_ts;
                        s.bootstraps += 1;
                        s.copy_of = Some(*msid);
                    });
                    repl.log(&format!("snapshot of {got} keys loaded"));
                    // At once: a replica killed now is known as this master's copy.
                    save_pos(repl, *msid, *pos)?;
                    saved = *pos;
                }
                wire::ERROR => {
                    let text = String::from_utf8_lossy(p).into_owned();
                    if text.starts_with("behind") {
                        *pos = 0;
                    }
                    return Err(fail(format!("the master refused: {text}")));
                }
                _ => return Err(fail(format!("unknown frame {tag} from the master"))),
            }
        }
        buf.drain(..at);
        // Caught up with what was read (no frame half-received) and something new applied.
        let due_now = at_once && buf.is_empty() && *pos != acked;
        if snap.is_none() && due_now && last_save.elapsed() < Duration::from_millis(200) {
            // What was applied is made durable (one sync), then acknowledged; the position
            // file waits for the 200 ms round (a restart from an older one applies a few
            // records again, which changes nothing).
            repl.store.sync().map_err(io::Error::other)?;
            acked = *pos;
            let mut ack = Vec::new();
            wire::frame(&mut ack, wire::ACK, &pos.to_be_bytes());
            sock.write_all(&ack)?;
        } else if snap.is_none() && last_save.elapsed() >= Duration::from_millis(200) {
            last_save = Instant::now();
            if *pos != saved {
                save_pos(repl, *msid, *pos)?;
                saved = *pos;
            }
            acked = *pos;
            let mut ack = Vec::new();
            wire::frame(&mut ack, wire::ACK, &pos.to_be_bytes());
            sock.write_all(&ack)?;
        }
    }
}

/// Begin a bootstrap from a snapshot of master `msid` at `at_ts` (this replica's position in
/// its log: `pos`, 0 for none) by what `--bootstrap` says of the records held here:
/// - none held, or a position in this master's log or one saved with its server id (the
///   records are a copy of it, which its log no longer reaches): replace them, in any mode;
/// - `replace` (or Tyrant `setmst` with Kura's replace option): discard them, saying how many;
/// - `merge`: keep them, the snapshot is applied over them (see [`Bootstrap::Merge`]);
/// - `refuse`: follow no further (until the master is changed) and say why, in the log and in
///   `stat`. Nothing has changed here then.
fn begin_bootstrap(repl: &Replication, msid: u32, pos: u64, at_ts: u64) -> io::Result<()> {
    let held = repl.store.count();
    let forced = repl.force_replace.swap(false, Ordering::Relaxed);
    // A position in this master's log, or one saved with its server id: a copy of it.
    let copy = pos != 0 || repl.status().copy_of == Some(msid);
    let mode = if forced {
        Bootstrap::Replace
    } else {
        repl.bootstrap
    };
    if held > 0 && !copy {
        match mode {
            Bootstrap::Refuse => {
                repl.with_status(|s| s.halted = true);
                return Err(fail(format!(
                    "bootstrap refused: this database holds {held} records and a snapshot of \
                     server {msid} would replace them; not following it. Start with \
                     --bootstrap=replace to discard them, --bootstrap=merge to keep them \
                     (the master's values win for keys both hold), or empty the database \
                     (kura remote setmst --force does the same as replace)"
                )));
            }
            Bootstrap::Merge => {
                repl.log(&format!(
                    "bootstrapping from a snapshot of server {msid} at {at_ts}, merged with \
                     the {held} records held here (--bootstrap=merge)"
                ));
                return Ok(());
            }
            Bootstrap::Replace => repl.log(&format!(
                "bootstrapping from a snapshot of server {msid} at {at_ts}: discarding the \
                 {held} records held here ({})",
                if forced {
                    "setmst with the replace option"
                } else {
                    "--bootstrap=replace"
                }
            )),
        }
    } else if held > 0 {
        // A copy of this master (with --replica-writes also this server's own writes, which
        // its master, following this server, has from its log): replaced as it was made.
        repl.log(&format!(
            "bootstrapping again from a snapshot of server {msid} at {at_ts} (this replica's \
             position: {pos}): the {held} records held here, a copy of it, are replaced"
        ));
    } else {
        repl.log(&format!(
            "bootstrapping from a snapshot of server {msid} at {at_ts}"
        ));
    }
    let wipe = Rec {
        ts: at_ts,
        origin_sid: msid,
        origin_ts: at_ts,
        op: Op::Vanish,
    };
    take(repl, &wipe)?;
    // Every keyspace too: the snapshot holds the master's.
    for (name, params) in repl.store.keyspaces() {
        let wipe = Rec {
            op: Op::In {
                name: name.as_bytes(),
                params: params.as_bytes(),
                op: Box::new(Op::Vanish),
            },
            ..wipe.clone()
        };
        take(repl, &wipe)?;
    }
    Ok(())
}

/// Load one snapshot frame: `[n u32]` and `n` records (puts, or every value of a key).
fn load_chunk(repl: &Replication, msid: u32, at_ts: u64, p: &[u8]) -> io::Result<u64> {
    let n = wire::be_u32(p).ok_or_else(|| fail("short snapshot frame"))?;
    let mut rest = &p[4..];
    let mut puts: Vec<BatchOp> = Vec::new();
    let mut batch = Vec::new();
    let mut count = 0u64;
    for _ in 0..n {
        let (rec, len) = match record::decode(rest) {
            Ok(record::Next::Record(r, len)) => (r, len),
            Ok(record::Next::Incomplete) => return Err(fail("a snapshot frame cut short")),
            Err(e) => return Err(fail(format!("a damaged snapshot record: {e}"))),
        };
        match &rec.op {
            Op::Put {
                key,
                value,
                flags,
                expires,
            } => {
                if repl.logged.is_some() {
                    record::push_batch_op(&mut batch, &rec.op);
                }
                puts.push(BatchOp::Put {
                    key: key.to_vec(),
                    value: value.to_vec(),
                    flags: *flags,
                    expires: *expires,
                });
            }
            _ => take(repl, &rec)?,
        }
        count += 1;
        rest = &rest[len..];
    }
    if !rest.is_empty() {
        return Err(fail("bytes after a snapshot frame's records"));
    }
    if puts.is_empty() {
        return Ok(count);
    }
    match &repl.logged {
        Some(l) => {
            let op = Op::Batch {
                count: puts.len() as u32,
                body: &batch,
            };
            let rec = Rec {
                ts: at_ts,
                origin_sid: msid,
                origin_ts: at_ts,
                op,
            };
            l.apply_remote(&rec).map_err(io::Error::other)?;
        }
        None => repl.store.write_batch(&puts).map_err(io::Error::other)?,
    }
    Ok(count)
}

/// Make the position durable every 200 ms (the database synced first).
fn save_due(
    repl: &Replication,
    msid: u32,
    pos: u64,
    saved: &mut u64,
    last: &mut Instant,
) -> io::Result<()> {
    if last.elapsed() >= Duration::from_millis(200) {
        *last = Instant::now();
        if pos != *saved {
            save_pos(repl, msid, pos)?;
            *saved = pos;
        }
    }
    Ok(())
}

/// The largest record body accepted from a Tyrant master (a value of up to 1 GiB).
const TT_MAX_BODY: usize = (1 << 30) + (1 << 20);

/// Tyrant commands from a master are taken whatever their size (Kura's own limits apply
/// when they are executed).
const TT_LIMITS: tt_bin::Limits = tt_bin::Limits {
    max_key: TT_MAX_BODY,
    max_value: TT_MAX_BODY,
    max_args: 1 << 24,
    max_frame: TT_MAX_BODY,
};

/// Redo one record of a Tyrant master: its command, with the Tyrant meaning, logged (with an
/// update log) with its origin `sid` and time stamp `ts`. A record this server's changes came
/// back in is skipped. A body that is no update-log command is skipped and said so, as
/// ttserver's slave moves past it. Whether it was applied.
fn redo_tyrant(repl: &Replication, ts: u64, sid: u32, body: &[u8]) -> io::Result<bool> {
    if sid == repl.sid {
        return Ok(false);
    }
    let (req, result) = match repl_tt::decode_body(body, &TT_LIMITS) {
        Ok(d) => d,
        Err(e) => {
            repl.warn(&format!("the record at {ts} skipped: {e}"));
            return Ok(false);
        }
    };
    let done = match &repl.logged {
        Some(l) => l.as_origin(sid, ts, |s| crate::tt_exec::redo(s, &req)),
        None => crate::tt_exec::redo(&*repl.store, &req).map(Some),
    };
    match done {
        Ok(Some(ok)) => {
            if ok != (result == repl_tt::RESULT_OK) {
                // As ttserver: told, not fatal.
                repl.warn(&format!(
                    "inconsistency: the command at {ts} {} on the master, {} here",
                    if ok { "failed" } else { "succeeded" },
                    if ok { "succeeded" } else { "failed" }
                ));
            }
            Ok(true)
        }
        Ok(None) => Ok(false),
        Err(e) => Err(fail(format!("applying the command at {ts}: {e}"))),
    }
}

/// One connection to a Tokyo Tyrant master (`repl`, 0xA0): ask for the records from the
/// position + 1 on, read its server id, then redo each record's command; NOPs keep the
/// connection alive. The position is the time stamp of the last record applied.
fn session_tyrant(
    repl: &Replication,
    host: &str,
    port: u16,
    gen: u64,
    msid: &mut u32,
    pos: &mut u64,
) -> io::Result<()> {
    let mut sock = connect(host, port)?;
    let mut req = Vec::new();
    repl_tt::encode_request(&mut req, *pos + 1, repl.sid);
    sock.write_all(&req)?;
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut chunk = vec![0u8; 256 << 10];
    let mut heard = Instant::now();
    let mut last_save = Instant::now();
    let mut saved = *pos;
    let mut hello = false;
    loop {
        if repl.stop.load(Ordering::Relaxed) || repl.generation.load(Ordering::Relaxed) != gen {
            return Ok(());
        }
        if let Err(e) = fill(
            &mut sock,
            &mut chunk,
            &mut buf,
            &mut heard,
            // The handshake is answered at once; heartbeats come every second.
            Duration::from_secs(if hello { 60 } else { 5 }),
        ) {
            if !hello {
                return Err(fail(format!(
                    "the master did not answer repl ({e}): no update log there, repl masked, \
                     or it has this server's sid"
                )));
            }
            return Err(e);
        }
        if hello {
            repl.with_status(|s| s.heard = Some(heard));
        }
        let mut at = 0;
        if !hello {
            match repl_tt::decode_sid(&buf) {
                Ok(None) => continue,
                Ok(Some((sid, n))) => {
                    if sid == repl.sid {
                        return Err(fail("circular: the master has this server's sid"));
                    }
                    if *msid != 0 && *msid != sid {
                        repl.log(&format!(
                            "the master is now server {sid} (was {msid}): going on after {pos}, \
                             its time stamps being the wall clock's, as ttserver does"
                        ));
                    }
                    *msid = sid;
                    hello = true;
                    at = n;
                    repl.with_status(|s| {
                        s.connected = true;
                        s.heard = Some(Instant::now());
                        s.master_sid = sid;
                        s.last_error.clear();
                    });
                }
                Err(e) => return Err(fail(e.to_string())),
            }
        }
        loop {
            match repl_tt::decode_frame(&buf[at..], TT_MAX_BODY) {
                Ok(None) => break,
                Ok(Some((repl_tt::Frame::Nop, n))) => at += n,
                Ok(Some((repl_tt::Frame::Record { ts, sid, body }, n))) => {
                    let applied = redo_tyrant(repl, ts, sid, body)?;
                    at += n;
                    *pos = ts;
                    repl.with_status(|s| {
                        s.applied += u64::from(applied);
                        s.position = ts;
                        s.master_last = s.master_last.max(ts);
                    });
                }
                Err(e) => return Err(fail(e.to_string())),
            }
        }
        buf.drain(..at);
        save_due(repl, *msid, *pos, &mut saved, &mut last_save)?;
    }
}

/// The expiration time (unix seconds, 0 = never) of a Kyoto Tycoon stored value's `xt`.
fn kt_expires(xt: Option<u64>) -> u64 {
    match xt {
        None => 0,
        Some(x) if x >= repl_kt::XT_MAX => 0,
        // 0 is a time long past: expired, not "never".
        Some(x) => x.max(1),
    }
}

/// Apply one message of a Kyoto Tycoon master (time stamp `ts`, its units): a set (its value
/// with the 5-byte expiration time of a timed database in front), a remove or a clear of
/// database 0, unless it came from this server. A message that cannot be read is skipped and
/// said so (Kyoto Tycoon's slave moves past it too). Whether it was applied.
fn apply_kyoto(repl: &Replication, ts: u64, msg: &[u8]) -> io::Result<bool> {
    let m = match repl_kt::decode_msg(msg, true) {
        Ok(m) => m,
        // Operations other than these three are ignored by Kyoto Tycoon's slave as well.
        Err(repl_kt::Error::Op(_)) => return Ok(false),
        Err(e) => {
            repl.warn(&format!("the message at {ts} skipped: {e}"));
            return Ok(false);
        }
    };
    if m.sid == repl.sid as u16 || m.dbid != 0 {
        return Ok(false);
    }
    let op = match m.op {
        repl_kt::KtOp::Set { key, value, xt } => Op::Put {
            key,
            value,
            flags: 0,
            expires: kt_expires(xt),
        },
        repl_kt::KtOp::Remove { key } => Op::Remove { key },
        repl_kt::KtOp::Clear => Op::Vanish,
    };
    let rec = Rec {
        ts,
        origin_sid: u32::from(m.sid),
        origin_ts: ts / 1000,
        op,
    };
    take(repl, &rec)?;
    Ok(true)
}

/// One connection to a Kyoto Tycoon master (0xB1): ask for what came after the position (its
/// time stamps: milliseconds × 10^6 plus a counter), then apply each message; answer each
/// idle frame with 0xB1. The position is the largest time stamp of any frame, as Kyoto
/// Tycoon's slave keeps it. Server ids are 16-bit on this stream.
fn session_kyoto(
    repl: &Replication,
    host: &str,
    port: u16,
    gen: u64,
    pos: &mut u64,
) -> io::Result<()> {
    let mut sock = connect(host, port)?;
    let mut req = Vec::new();
    repl_kt::encode_request(
        &mut req,
        &repl_kt::Request {
            flags: 0,
            ts: *pos,
            sid: repl.sid as u16,
        },
    );
    sock.write_all(&req)?;
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut chunk = vec![0u8; 256 << 10];
    let mut heard = Instant::now();
    let mut last_save = Instant::now();
    let mut saved = *pos;
    let mut accepted = false;
    loop {
        if repl.stop.load(Ordering::Relaxed) || repl.generation.load(Ordering::Relaxed) != gen {
            return Ok(());
        }
        if let Err(e) = fill(
            &mut sock,
            &mut chunk,
            &mut buf,
            &mut heard,
            Duration::from_secs(if accepted { 60 } else { 5 }),
        ) {
            if !accepted {
                return Err(fail(format!(
                    "the master did not answer Kyoto Tycoon's replication handshake ({e})"
                )));
            }
            return Err(e);
        }
        if accepted {
            repl.with_status(|s| s.heard = Some(heard));
        }
        let mut at = 0;
        if !accepted {
            match repl_kt::decode_accept(&buf) {
                Ok(None) => continue,
                Ok(Some(true)) => {
                    accepted = true;
                    at = 1;
                    repl.with_status(|s| {
                        s.connected = true;
                        s.heard = Some(Instant::now());
                        s.last_error.clear();
                    });
                }
                Ok(Some(false)) => {
                    return Err(fail(
                        "the master refused (0xBF): it has no update log, or no longer the \
                         records after this replica's position",
                    ))
                }
                Err(e) => return Err(fail(e.to_string())),
            }
        }
        let mut acks = 0;
        loop {
            match repl_kt::decode_frame(&buf[at..], TT_MAX_BODY) {
                Ok(None) => break,
                Ok(Some((repl_kt::Frame::Nop { ts }, n))) => {
                    at += n;
                    acks += 1;
                    *pos = (*pos).max(ts);
                    repl.with_status(|s| {
                        s.position = *pos;
                        s.master_last = s.master_last.max(ts);
                    });
                }
                Ok(Some((repl_kt::Frame::Record { ts, msg }, n))) => {
                    let applied = !msg.is_empty() && apply_kyoto(repl, ts, msg)?;
                    at += n;
                    *pos = (*pos).max(ts);
                    repl.with_status(|s| {
                        s.applied += u64::from(applied);
                        s.position = *pos;
                        s.master_last = s.master_last.max(ts);
                    });
                }
                Err(e) => return Err(fail(e.to_string())),
            }
        }
        buf.drain(..at);
        if acks > 0 {
            let mut ack = Vec::new();
            for _ in 0..acks {
                repl_kt::encode_ack(&mut ack);
            }
            sock.write_all(&ack)?;
        }
        save_due(repl, 0, *pos, &mut saved, &mut last_save)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kura_engine::ulog::logged::Logged;
    use kura_engine::ulog::{Config, Ulog};
    use kura_engine::Store;
    use std::sync::Mutex;

    /// Damage in this server's own update log (two records of an older file out of order)
    /// met while looking for the Tyrant master's commands applied is said in the log, with
    /// the commands found before it, not passed over in silence.
    #[test]
    fn damage_met_looking_for_the_tyrant_commands_applied_is_said() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = || {
            let mut c = Config::new(dir.path().join("ulog"), 2);
            c.sync = kura_engine::config::SyncMode::None;
            c.file_size = 4096;
            c
        };
        let name = dir.path().join("r.kh").display().to_string();
        let db = Logged::new(
            kura_engine::open(&name).unwrap(),
            Ulog::open(cfg()).unwrap(),
        )
        .unwrap();
        let v = vec![1u8; 200];
        for i in 0..40u32 {
            let op = Op::Put {
                key: &i.to_be_bytes(),
                value: &v,
                flags: 0,
                expires: 0,
            };
            db.log()
                .append_from(Some((77, 1000 + u64::from(i))), &op)
                .unwrap();
        }
        db.close().unwrap();
        drop(db);
        // The second and third records of the first file swap their time stamps.
        let path = dir.path().join("ulog/00000000000000000001.kul");
        let mut data = std::fs::read(&path).unwrap();
        let mut recs = Vec::new();
        let mut at = 64;
        while let Ok(record::Next::Record(r, n)) = record::decode(&data[at..]) {
            recs.push((at, n, r.ts));
            at += n;
        }
        let ((a, an, ta), (b, bn, tb)) = (recs[1], recs[2]);
        record::restamp(&mut data[a..a + an], tb);
        record::restamp(&mut data[b..b + bn], ta);
        std::fs::write(&path, &data).unwrap();
        let db = Logged::new(
            kura_engine::open(&name).unwrap(),
            Ulog::open(cfg()).unwrap(),
        )
        .unwrap();
        let said: Arc<Mutex<Vec<String>>> = Arc::default();
        let s = said.clone();
        let repl = Replication::new(
            2,
            db.clone(),
            Some(db.clone()),
            Some(dir.path().join("r.pos")),
            false,
            Box::new(move |_, m| s.lock().unwrap().push(m.to_string())),
        );
        assert_eq!(
            applied_in_log(&repl, 0),
            1001,
            "the commands before the damage"
        );
        let said = said.lock().unwrap().join("\n");
        assert!(
            said.contains("time stamps out of order") && said.contains("up to 1001"),
            "{said}"
        );
        db.close().unwrap();
    }
}
