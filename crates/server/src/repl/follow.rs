//! The replica's side: one thread follows the master (`Replication::master`), applies its
//! records in order, and every 200 ms makes what it applied durable, then saves its position
//! (a persistent replica: `pos_file`, written only after the database is synced, so the
//! position never runs ahead of the data; records are effects, so replaying a few again after
//! a crash changes nothing) and acknowledges it to the master. It reconnects by itself (every
//! second), bootstraps from a snapshot when it holds nothing or the master's log no longer
//! reaches back to its position, and starts over from a snapshot when the master changes.

use super::Replication;
use kura_engine::ulog::apply::apply;
use kura_engine::ulog::record::{self, Op, Rec};
use kura_engine::BatchOp;
use kura_proto::repl as wire;
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

fn load_pos(repl: &Replication) -> (u32, u64) {
    let Some(p) = &repl.pos_file else {
        return (0, 0);
    };
    let Ok(text) = std::fs::read_to_string(p) else {
        return (0, 0);
    };
    let mut lines = text.lines();
    let (Some(body), Some(crc)) = (lines.next(), lines.next()) else {
        return (0, 0);
    };
    if crc.strip_prefix("crc ").and_then(|c| c.parse::<u32>().ok())
        != Some(crc32c::crc32c(body.as_bytes()))
    {
        repl.log(&format!(
            "{}: damaged replica position; bootstrapping from the master",
            p.display()
        ));
        return (0, 0);
    }
    let f: Vec<&str> = body.split(' ').collect();
    match f[..] {
        ["kura-replica", sid, ts] => (sid.parse().unwrap_or(0), ts.parse().unwrap_or(0)),
        _ => (0, 0),
    }
}

fn save_pos(repl: &Replication, sid: u32, ts: u64) -> io::Result<()> {
    let Some(p) = &repl.pos_file else {
        return Ok(());
    };
    repl.store.sync().map_err(io::Error::other)?;
    let body = format!("kura-replica {sid} {ts}");
    let text = format!("{body}\ncrc {}\n", crc32c::crc32c(body.as_bytes()));
    let tmp = p.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, p)
}

fn run(repl: &Replication) {
    let (mut msid, mut pos) = load_pos(repl);
    repl.with_status(|s| {
        s.position = pos;
        s.master_sid = msid;
    });
    let mut last_err = String::new();
    while !repl.stop.load(Ordering::Relaxed) {
        let gen = repl.generation.load(Ordering::Relaxed);
        let Some((host, port)) = repl.master() else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let r = session(repl, &host, port, gen, &mut msid, &mut pos);
        repl.with_status(|s| s.connected = false);
        if let Err(e) = r {
            let text = e.to_string();
            if text != last_err {
                repl.log(&format!("replication from {host}:{port}: {text}"));
                last_err = text.clone();
            }
            repl.with_status(|s| s.last_error = text);
        } else {
            last_err.clear();
        }
        let _ = save_pos(repl, msid, pos);
        // Reconnect after a second (at once when the master was changed).
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until
            && !repl.stop.load(Ordering::Relaxed)
            && repl.generation.load(Ordering::Relaxed) == gen
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
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

/// One connection to the master, until it fails, the master changes or the server stops.
fn session(
    repl: &Replication,
    host: &str,
    port: u16,
    gen: u64,
    msid: &mut u32,
    pos: &mut u64,
) -> io::Result<()> {
    let addr = (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| fail("no address"))?;
    let mut sock = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
    sock.set_nodelay(true)?;
    sock.set_read_timeout(Some(Duration::from_millis(100)))?;
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
    loop {
        if repl.stop.load(Ordering::Relaxed) || repl.generation.load(Ordering::Relaxed) != gen {
            return Ok(());
        }
        match sock.read(&mut chunk) {
            Ok(0) => return Err(fail("the master closed the connection")),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                heard = Instant::now();
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if heard.elapsed() > Duration::from_secs(5) {
                    return Err(fail("no word from the master for 5 s"));
                }
            }
            Err(e) => return Err(e),
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
                        });
                    }
                }
                wire::BEAT => {
                    let last = wire::be_u64(p).unwrap_or(0);
                    repl.with_status(|s| s.master_last = last);
                }
                wire::SNAP_BEGIN => {
                    let at_ts = wire::be_u64(p).ok_or_else(|| fail("short snapshot start"))?;
                    repl.log(&format!(
                        "bootstrapping from a snapshot of server {msid} at {at_ts}"
                    ));
                    let wipe = Rec {
                        ts: at_ts,
                        origin_sid: *msid,
                        origin_ts: at_ts,
                        op: Op::Vanish,
                    };
                    take(repl, &wipe)?;
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
                    });
                    repl.log(&format!("snapshot of {got} keys loaded"));
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
        if snap.is_none() && last_save.elapsed() >= Duration::from_millis(200) {
            last_save = Instant::now();
            if *pos != saved {
                save_pos(repl, *msid, *pos)?;
                saved = *pos;
            }
            let mut ack = Vec::new();
            wire::frame(&mut ack, wire::ACK, &pos.to_be_bytes());
            sock.write_all(&ack)?;
        }
    }
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
