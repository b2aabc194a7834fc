//! Replication between Kura and the originals' protocols, with real `kura serve` processes on
//! loopback: a Kura replica of a Tokyo Tyrant master (a model of ttserver's `repl` side,
//! records hand-encoded), a Kyoto Tycoon slave of a Kura master (a model of ktserver's slave)
//! and a Kura replica of a Kyoto Tycoon master (a model of its master side), and a Kura
//! replica that follows a Kura master over Tyrant's protocol.

mod common;

use common::{converge, eventually, free_port, mc, serve, Server, Tt};
use kura_proto::kt_bin;
use kura_proto::repl_kt::{self, KtOp, Msg};
use kura_proto::repl_tt;
use kura_proto::tt_bin::{self, Request};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A time stamp in microseconds, as Tyrant's update log has them.
fn tt_ts(i: u64) -> u64 {
    1_700_000_000_000_000 + i * 1000
}

fn body(req: &Request<'_>, ok: bool) -> Vec<u8> {
    let mut b = Vec::new();
    repl_tt::encode_body(&mut b, req, ok);
    b
}

/// What a model master sends: a record (`ts`, origin `sid`, bytes after the header) or a
/// heartbeat.
#[derive(Clone)]
enum Item {
    Rec(u64, u32, Vec<u8>),
    Nop,
}

/// A model of a master's side of a replication stream: it accepts a connection, reads the
/// request with `hello` (which answers it and says from which time stamp on to send), then
/// streams every item of `items` at or after it (and those added later), paced by `pace`
/// items at a time, with heartbeats when idle. It keeps the requests it got.
struct ModelMaster {
    addr: String,
    items: Arc<Mutex<Vec<Item>>>,
    requests: Arc<Mutex<Vec<(u64, u32)>>>,
    stop: Arc<AtomicBool>,
}

type Hello = fn(&mut TcpStream) -> Option<(u64, u32)>;
type Encode = fn(&mut Vec<u8>, &Item);

impl ModelMaster {
    fn start(hello: Hello, encode: Encode, pace: usize) -> ModelMaster {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let items: Arc<Mutex<Vec<Item>>> = Arc::default();
        let requests: Arc<Mutex<Vec<(u64, u32)>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (it, rq, st) = (items.clone(), requests.clone(), stop.clone());
        std::thread::spawn(move || {
            for c in l.incoming() {
                if st.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(mut c) = c else { continue };
                let (it, rq, st) = (it.clone(), rq.clone(), st.clone());
                std::thread::spawn(move || {
                    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    let Some((from, sid)) = hello(&mut c) else {
                        return;
                    };
                    rq.lock().unwrap().push((from, sid));
                    let mut next = 0;
                    let mut idle = Instant::now();
                    while !st.load(Ordering::Relaxed) {
                        let mut out = Vec::new();
                        {
                            let items = it.lock().unwrap();
                            let mut n = 0;
                            while next < items.len() && n < pace {
                                match &items[next] {
                                    Item::Rec(ts, ..) if *ts < from => {}
                                    i => {
                                        encode(&mut out, i);
                                        n += 1;
                                    }
                                }
                                next += 1;
                            }
                        }
                        if out.is_empty() && idle.elapsed() > Duration::from_millis(300) {
                            encode(&mut out, &Item::Nop);
                        }
                        if !out.is_empty() {
                            idle = Instant::now();
                            if c.write_all(&out).is_err() {
                                return;
                            }
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                });
            }
        });
        ModelMaster {
            addr,
            items,
            requests,
            stop,
        }
    }

    fn push(&self, item: Item) {
        self.items.lock().unwrap().push(item);
    }

    fn requests(&self) -> Vec<(u64, u32)> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for ModelMaster {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(&self.addr);
    }
}

/// ttserver's side of `repl`: read `[C8 A0][ts][sid]`, answer the master's sid (77). A
/// `stat` (`[C8 88]`, a replica's probe) is answered with ttserver's status text; any other
/// command closes the connection, as ttserver does.
fn tt_hello(c: &mut TcpStream) -> Option<(u64, u32)> {
    let mut req = [0u8; 14];
    c.read_exact(&mut req[..2]).ok()?;
    if req[..2] == [0xC8, tt_bin::cmd::STAT] {
        let text = b"version\t1.1.41\nlibver\t906\nprotver\t0.91\nsid\t77\n";
        let mut out = vec![0];
        out.extend_from_slice(&(text.len() as u32).to_be_bytes());
        out.extend_from_slice(text);
        c.write_all(&out).ok()?;
        return None;
    }
    if req[..2] != [0xC8, tt_bin::cmd::REPL] {
        return None;
    }
    c.read_exact(&mut req[2..]).ok()?;
    let Ok(kura_proto::Decoded::Complete {
        request: Request::Repl { ts, sid },
        ..
    }) = tt_bin::decode(&req, &tt_bin::Limits::default())
    else {
        panic!("not a repl request: {req:?}")
    };
    let mut out = Vec::new();
    repl_tt::encode_sid(&mut out, 77);
    c.write_all(&out).ok()?;
    Some((ts, sid))
}

fn tt_encode(out: &mut Vec<u8>, item: &Item) {
    match item {
        Item::Rec(ts, sid, body) => repl_tt::encode_record(out, *ts, *sid, body),
        Item::Nop => repl_tt::encode_nop(out),
    }
}

/// Answers to idle frames the model Kyoto Tycoon master got: right ones, wrong ones.
static KT_ACKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static KT_BAD_ACKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// ktserver's side of 0xB1: read `[B1][flags][ts][sid]`, answer `B1`. An HTTP request (a
/// replica's probe: `GET /rpc/report`) is answered with a report of ktserver's; anything else
/// closes the connection.
fn kt_hello(c: &mut TcpStream) -> Option<(u64, u32)> {
    let mut req = [0u8; repl_kt::REQUEST_LEN];
    c.read_exact(&mut req[..1]).ok()?;
    if req[0] == b'G' {
        let mut head = vec![b'G'];
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && c.read_exact(&mut b).is_ok() {
            head.push(b[0]);
        }
        let body = "conf_kt_version\t0.9.56 (2.19)\nconf_os_name\tLinux\n";
        let reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/tab-separated-values\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        c.write_all(reply.as_bytes()).ok()?;
        return None;
    }
    if req[0] != repl_kt::MAGIC {
        return None;
    }
    c.read_exact(&mut req[1..]).ok()?;
    let (r, _) = repl_kt::decode_request(&req).unwrap().unwrap();
    c.write_all(&[repl_kt::MAGIC]).ok()?;
    // The slave answers each idle frame with one byte: read them (and check them) on the side.
    let mut rd = c.try_clone().ok()?;
    std::thread::spawn(move || {
        let mut b = [0u8; 1];
        rd.set_read_timeout(None).ok();
        while rd.read_exact(&mut b).is_ok() {
            if b[0] == repl_kt::MAGIC {
                KT_ACKS.fetch_add(1, Ordering::Relaxed);
            } else {
                KT_BAD_ACKS.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    Some((r.ts, u32::from(r.sid)))
}

fn kt_encode(out: &mut Vec<u8>, item: &Item) {
    match item {
        Item::Rec(ts, _, msg) => repl_kt::encode_record(out, *ts, msg),
        // The model's clock: far enough ahead of the records' time stamps to show.
        Item::Nop => repl_kt::encode_nop(out, 9_000_000_000),
    }
}

fn kt_msg(sid: u16, dbid: u16, op: KtOp<'_>) -> Vec<u8> {
    let mut m = Vec::new();
    repl_kt::encode_msg(&mut m, &Msg { sid, dbid, op });
    m
}

fn digest(addr: &str) -> BTreeMap<Vec<u8>, Vec<u8>> {
    Tt::new(addr).digest()
}

fn map(pairs: &[(&str, &[u8])]) -> BTreeMap<Vec<u8>, Vec<u8>> {
    pairs
        .iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), v.to_vec()))
        .collect()
}

/// Wait until the server at `addr` holds exactly `want`.
fn holds(addr: &str, want: &BTreeMap<Vec<u8>, Vec<u8>>, secs: u64) {
    let mut got = BTreeMap::new();
    let ok = eventually(secs, || {
        got = digest(addr);
        &got == want
    });
    let show = |m: &BTreeMap<Vec<u8>, Vec<u8>>| {
        m.iter()
            .map(|(k, v)| {
                let v = String::from_utf8_lossy(v);
                let v = if v.len() > 80 {
                    format!("{}…{} ({} bytes)", &v[..30], &v[v.len() - 30..], v.len())
                } else {
                    v.into_owned()
                };
                format!("{}={v}", String::from_utf8_lossy(k))
            })
            .collect::<Vec<_>>()
    };
    assert!(ok, "want {:?}\n got {:?}", show(want), show(&got));
}

#[test]
fn a_replica_of_a_tokyo_tyrant_master_redoes_its_commands_and_resumes_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let master = ModelMaster::start(tt_hello, tt_encode, usize::MAX);
    let rp = free_port().to_string();
    let start_replica = || {
        serve(
            dir.path(),
            &[
                "r.kh",
                "--port",
                &rp,
                "--sid",
                "2",
                "--master",
                &master.addr,
                "--master-protocol",
                "tyrant",
            ],
        )
    };
    let rec = |i: u64, req: Request<'_>| Item::Rec(tt_ts(i), 77, body(&req, true));
    for item in [
        rec(
            1,
            Request::Put {
                key: b"z",
                value: b"gone",
            },
        ),
        Item::Rec(tt_ts(2), 77, {
            let mut b = Vec::new();
            repl_tt::encode_vanish(&mut b, true);
            b
        }),
        rec(
            3,
            Request::Put {
                key: b"a",
                value: b"1",
            },
        ),
        rec(
            4,
            Request::PutNr {
                key: b"b",
                value: b"2",
            },
        ),
        rec(
            5,
            Request::PutCat {
                key: b"a",
                value: b"23",
            },
        ),
        rec(6, Request::AddInt { key: b"n", num: 5 }),
        Item::Nop,
        rec(7, Request::AddInt { key: b"n", num: -2 }),
        Item::Rec(tt_ts(8), 77, {
            let mut b = Vec::new();
            repl_tt::encode_out(&mut b, b"b", true);
            b
        }),
        Item::Rec(tt_ts(9), 77, {
            let mut b = Vec::new();
            repl_tt::encode_misc(&mut b, b"putlist", &[b"c", b"3", b"d", b"4"], true);
            b
        }),
        // A change that came from the replica itself (its sid) is not applied again.
        Item::Rec(tt_ts(10), 2, {
            let mut b = Vec::new();
            repl_tt::encode_put(&mut b, b"mine", b"x", true);
            b
        }),
        // A putkeep that failed on the master fails here too.
        Item::Rec(
            tt_ts(11),
            9,
            body(
                &Request::PutKeep {
                    key: b"a",
                    value: b"no",
                },
                false,
            ),
        ),
        rec(
            12,
            Request::PutShl {
                key: b"c",
                value: b"456",
                width: 3,
            },
        ),
    ] {
        master.push(item);
    }
    let mut replica = start_replica();
    let mut want = map(&[
        ("a", b"123"),
        ("n", &3i32.to_le_bytes()),
        ("c", b"456"),
        ("d", b"4"),
    ]);
    holds(&replica.addr, &want, 20);
    assert_eq!(master.requests(), [(1, 2)], "a new replica asks from 1 on");
    // The replica refuses client writes, and reports its master.
    assert_eq!(Tt::new(&replica.addr).put(b"x", b"y"), 1);
    let st = Tt::new(&replica.addr).stat();
    assert_eq!(st["master_sid"], "77", "{st:?}");
    assert_eq!(st["master_protocol"], "tyrant", "{st:?}");
    assert_eq!(st["rts"], tt_ts(12).to_string(), "{st:?}");
    // A clean restart goes on after the last record applied: the putcat is not redone.
    replica.signal(libc::SIGTERM);
    master.push(rec(
        13,
        Request::PutCat {
            key: b"a",
            value: b"4",
        },
    ));
    replica = start_replica();
    want.insert(b"a".to_vec(), b"1234".to_vec());
    holds(&replica.addr, &want, 20);
    assert_eq!(master.requests()[1], (tt_ts(12) + 1, 2));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(digest(&replica.addr), want);
}

#[test]
fn a_tyrant_replica_with_an_update_log_killed_mid_stream_applies_no_command_twice() {
    let dir = tempfile::tempdir().unwrap();
    // Ten records every 5 ms.
    let master = ModelMaster::start(tt_hello, tt_encode, 10);
    let n = 1500;
    let mut whole = Vec::new();
    for i in 0..n {
        let piece = format!("{i:05};");
        whole.extend_from_slice(piece.as_bytes());
        master.push(Item::Rec(
            tt_ts(i + 1),
            77,
            body(
                &Request::PutCat {
                    key: b"s",
                    value: piece.as_bytes(),
                },
                true,
            ),
        ));
    }
    let rp = free_port().to_string();
    let start_replica = || {
        serve(
            dir.path(),
            &[
                "r.kh",
                "--port",
                &rp,
                "--sid",
                "2",
                "--ulog",
                "rlog",
                "--master",
                &master.addr,
                "--master-protocol",
                "tyrant",
            ],
        )
    };
    let mut replica = start_replica();
    let len = |addr: &str| Tt::new(addr).get(b"s").map_or(0, |v| v.len());
    // Killed before it saved any position, then after it saved some.
    for at in [200, 1000] {
        assert!(eventually(20, || len(&replica.addr) >= at * 6));
        replica.signal(libc::SIGKILL);
        replica = start_replica();
    }
    holds(&replica.addr, &map(&[("s", &whole[..])]), 30);
    let reqs = master.requests();
    assert_eq!(reqs.len(), 3, "{reqs:?}");
    assert!(
        reqs[1].0 > tt_ts(200) && reqs[2].0 > tt_ts(1000),
        "{reqs:?}"
    );
}

/// Read Kyoto Tycoon frames from a Kura master until `want` messages came and, if `idle`, an
/// idle frame (each answered); the messages decoded, with their time stamps, and the idle
/// frames' time stamps.
#[allow(clippy::type_complexity)]
fn kt_read(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    want: usize,
    idle: bool,
) -> (Vec<(u64, String)>, Vec<u64>) {
    let mut got = Vec::new();
    let mut nops = Vec::new();
    let end = Instant::now() + Duration::from_secs(20);
    let mut b = [0u8; 65536];
    while got.len() < want || (idle && nops.is_empty()) {
        assert!(Instant::now() < end, "only {got:?}");
        let n = s.read(&mut b).unwrap();
        assert!(n > 0, "the master hung up");
        buf.extend_from_slice(&b[..n]);
        let mut at = 0;
        while let Some((f, used)) = repl_kt::decode_frame(&buf[at..], 1 << 20).unwrap() {
            at += used;
            match f {
                repl_kt::Frame::Record { ts, msg } => {
                    let m = repl_kt::decode_msg(msg, true).unwrap();
                    assert_eq!((m.sid, m.dbid), (1, 0));
                    let text = match m.op {
                        KtOp::Set { key, value, xt } => {
                            let xt = xt.unwrap();
                            let xt = if xt == repl_kt::XT_MAX {
                                "never".to_string()
                            } else {
                                format!("{:+}", xt as i64 - now_secs() as i64)
                            };
                            format!(
                                "set {}={} {xt}",
                                String::from_utf8_lossy(key),
                                String::from_utf8_lossy(value)
                            )
                        }
                        KtOp::Remove { key } => format!("remove {}", String::from_utf8_lossy(key)),
                        KtOp::Clear => "clear".to_string(),
                    };
                    got.push((ts, text));
                }
                repl_kt::Frame::Nop { ts } => {
                    nops.push(ts);
                    s.write_all(&[repl_kt::MAGIC]).unwrap();
                }
            }
        }
        buf.drain(..at);
    }
    (got, nops)
}

/// Expiry offsets in seconds from now, rounded to what a test run allows.
fn rough(text: &str) -> String {
    match text.rsplit_once(' ') {
        Some((head, off)) if off.starts_with('+') || off.starts_with('-') => {
            let n: i64 = off.parse().unwrap();
            format!("{head} ~{}", (n + 50) / 100 * 100)
        }
        _ => text.to_string(),
    }
}

fn kt_connect(addr: &str, ts: u64, sid: u16) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = Vec::new();
    repl_kt::encode_request(&mut req, &repl_kt::Request { flags: 0, ts, sid });
    s.write_all(&req).unwrap();
    let mut b = [0u8; 1];
    s.read_exact(&mut b).unwrap();
    assert_eq!(b[0], repl_kt::MAGIC, "the master accepts");
    s
}

#[test]
fn a_kyoto_tycoon_slave_follows_a_kura_master() {
    let dir = tempfile::tempdir().unwrap();
    // Without an update log: refused with 0xBF.
    let plain = Server::start(dir.path(), "p.kh");
    let mut s = plain.connect();
    let mut req = Vec::new();
    repl_kt::encode_request(
        &mut req,
        &repl_kt::Request {
            flags: 0,
            ts: 0,
            sid: 9,
        },
    );
    s.write_all(&req).unwrap();
    let mut b = Vec::new();
    s.read_to_end(&mut b).unwrap();
    assert_eq!(b, [repl_kt::ERROR]);
    drop(plain);

    let master = serve(
        dir.path(),
        &["m.kh", "--port", "0", "--sid", "1", "--ulog", "mlog"],
    );
    let mut t = Tt::new(&master.addr);
    let mut m = master.connect();
    t.put(b"z", b"0");
    t.vanish();
    t.put(b"a", b"1");
    assert_eq!(mc(&mut m, "set e 0 100000 2\r\nxy\r\n"), "STORED\r\n");
    t.put(b"b", b"2");
    t.out(b"b");
    t.putcat(b"a", b"2");
    assert_eq!(mc(&mut m, "touch a 50000\r\n"), "TOUCHED\r\n");
    t.put(b"c", b"3");
    let mut s = kt_connect(&master.addr, 0, 9);
    let mut buf = Vec::new();
    let (got, _) = kt_read(&mut s, &mut buf, 9, false);
    let texts: Vec<String> = got.iter().map(|(_, t)| rough(t)).collect();
    assert_eq!(
        texts,
        [
            "set z=0 never",
            "clear",
            "set a=1 never",
            "set e=xy ~100000",
            "set b=2 never",
            "remove b",
            "set a=12 never",
            // An expiry change: the key's value with its new expiration time.
            "set a=12 ~50000",
            "set c=3 never",
        ]
    );
    // Kura's µs time stamps × 1000, increasing.
    assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "{got:?}");
    assert!(got.iter().all(|(ts, _)| ts % 1000 == 0), "{got:?}");
    // Idle: heartbeats with the last time stamp, answered; then new writes come through.
    let (_, nops) = kt_read(&mut s, &mut buf, 0, true);
    assert!(nops[0] >= got[8].0, "{nops:?} {got:?}");
    t.put(b"d", b"4");
    let (more, _) = kt_read(&mut s, &mut buf, 1, false);
    assert_eq!(more[0].1, "set d=4 never");
    // The master knows this slave.
    assert!(Tt::new(&master.addr).stat().contains_key("replica_9"));
    drop(s);
    // A slave that asks again after the fifth message gets what followed it.
    let mut s = kt_connect(&master.addr, got[4].0, 9);
    let mut buf = Vec::new();
    let (again, _) = kt_read(&mut s, &mut buf, 2, false);
    assert_eq!(again[0].1, "remove b");
    assert_eq!(again[1].1, "set a=12 never");
}

#[test]
fn a_replica_of_a_kyoto_tycoon_master_applies_sets_removes_and_clears() {
    let dir = tempfile::tempdir().unwrap();
    let master = ModelMaster::start(kt_hello, kt_encode, usize::MAX);
    let rp = free_port().to_string();
    let start_replica = || {
        serve(
            dir.path(),
            &[
                "r.kh",
                "--port",
                &rp,
                "--sid",
                "2",
                "--master",
                &master.addr,
                "--master-protocol",
                "kyoto",
            ],
        )
    };
    let later = now_secs() + 5000;
    let ts = |i: u64| 1_700_000_000_000 * 1_000_000 + i;
    let set = |k: &'static [u8], v: &'static [u8], xt: u64| KtOp::Set {
        key: k,
        value: v,
        xt: Some(xt),
    };
    for (i, (sid, dbid, op)) in [
        (5, 0, set(b"gone", b"x", repl_kt::XT_MAX)),
        (5, 0, KtOp::Clear),
        (5, 0, set(b"a", b"1", repl_kt::XT_MAX)),
        (5, 0, set(b"t", b"timed", later)),
        (5, 0, set(b"b", b"2", repl_kt::XT_MAX)),
        (5, 0, KtOp::Remove { key: b"b" }),
        // Another database: not this one.
        (5, 1, set(b"other", b"db", repl_kt::XT_MAX)),
        // This server's own change coming back.
        (2, 0, set(b"mine", b"x", repl_kt::XT_MAX)),
        (6, 0, set(b"c", b"3", repl_kt::XT_MAX)),
    ]
    .into_iter()
    .enumerate()
    {
        master.push(Item::Rec(ts(i as u64 + 1), 0, kt_msg(sid, dbid, op)));
    }
    // A time stamp alone (after skipped messages).
    master.push(Item::Rec(ts(20), 0, Vec::new()));
    let mut replica = start_replica();
    let want = map(&[("a", b"1"), ("t", b"timed"), ("c", b"3")]);
    holds(&replica.addr, &want, 20);
    // The expiration time travels (Kyoto Tycoon's get_bulk reports it).
    let mut k = replica.connect();
    let mut req = Vec::new();
    kt_bin::encode_request(
        &kt_bin::Request::GetBulk {
            keys: vec![(0, b"t"), (0, b"a")],
        },
        &mut req,
    );
    k.write_all(&req).unwrap();
    let mut reply = Vec::new();
    let mut b = [0u8; 4096];
    let r = loop {
        let n = k.read(&mut b).unwrap();
        assert!(n > 0);
        reply.extend_from_slice(&b[..n]);
        if let kt_bin::DecodedReply::Complete { reply, .. } =
            kt_bin::decode_reply(kt_bin::GET_BULK, &reply).unwrap()
        {
            break reply;
        }
    };
    assert_eq!(
        r,
        kt_bin::Reply::Records(vec![
            (0, b"t".to_vec(), b"timed".to_vec(), later as i64),
            (0, b"a".to_vec(), b"1".to_vec(), repl_kt::XT_MAX as i64),
        ])
    );
    assert_eq!(master.requests(), [(0, 2)], "a new replica asks after 0");
    // Heartbeats are answered; the position is the newest time stamp seen (the time stamp
    // alone included).
    assert!(eventually(10, || KT_ACKS.load(Ordering::Relaxed) > 0));
    assert_eq!(KT_BAD_ACKS.load(Ordering::Relaxed), 0);
    assert!(eventually(5, || Tt::new(&replica.addr).stat()["rts"]
        == ts(20).to_string()));
    // A restart asks after the newest time stamp seen.
    replica.signal(libc::SIGTERM);
    master.push(Item::Rec(
        ts(21),
        0,
        kt_msg(5, 0, KtOp::Remove { key: b"a" }),
    ));
    replica = start_replica();
    holds(&replica.addr, &map(&[("t", b"timed"), ("c", b"3")]), 20);
    let reqs = master.requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert!(reqs[1].0 >= ts(20), "{reqs:?}");
    assert_eq!(reqs[1].1, 2);
}

#[test]
fn a_kura_replica_follows_a_kura_master_over_tyrant_replication() {
    let dir = tempfile::tempdir().unwrap();
    let mp = free_port().to_string();
    let master = serve(
        dir.path(),
        &["m.kh", "--port", &mp, "--sid", "1", "--ulog", "mlog"],
    );
    let mut t = Tt::new(&master.addr);
    for i in 0..200 {
        t.put(format!("pre{i}").as_bytes(), b"before the replica");
    }
    let master_at = format!("127.0.0.1:{mp}");
    let rp = free_port().to_string();
    let start_replica = || {
        serve(
            dir.path(),
            &[
                "r.kh",
                "--port",
                &rp,
                "--sid",
                "2",
                "--master",
                &master_at,
                "--master-protocol",
                "tyrant",
            ],
        )
    };
    let mut replica = start_replica();
    t.put(b"a", b"1");
    t.putcat(b"a", b"23");
    t.addint(b"n", 5);
    t.out(b"pre7");
    let mut m = master.connect();
    assert_eq!(mc(&mut m, "set e 3 100000 2\r\nxy\r\n"), "STORED\r\n");
    assert_eq!(mc(&mut m, "incr n2 1\r\n"), "NOT_FOUND\r\n");
    assert_eq!(mc(&mut m, "set c 0 0 2\r\n10\r\n"), "STORED\r\n");
    assert_eq!(mc(&mut m, "incr c 7\r\n"), "17\r\n");
    converge(&master.addr, &replica.addr, 20);
    // The replica away: the master goes on; a restart resumes without redoing anything.
    replica.signal(libc::SIGTERM);
    t.putcat(b"a", b"4");
    t.addint(b"n", 1);
    replica = start_replica();
    converge(&master.addr, &replica.addr, 20);
    assert_eq!(Tt::new(&replica.addr).get(b"a").unwrap(), b"1234");
    t.vanish();
    t.put(b"after", b"vanish");
    t.putcat(b"after", b"!");
    converge(&master.addr, &replica.addr, 20);
    assert_eq!(digest(&replica.addr), map(&[("after", b"vanish!")]));
}

#[test]
fn a_seeded_replica_starts_after_the_time_stamp_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let master = ModelMaster::start(tt_hello, tt_encode, usize::MAX);
    for i in 1..=6u64 {
        let k = format!("k{i}");
        master.push(Item::Rec(tt_ts(i), 77, {
            let mut b = Vec::new();
            repl_tt::encode_put(&mut b, k.as_bytes(), b"v", true);
            b
        }));
    }
    // The copy it was seeded from holds everything up to the third record.
    let replica = serve(
        dir.path(),
        &[
            "r.kh",
            "--port",
            "0",
            "--sid",
            "2",
            "--master",
            &master.addr,
            "--master-protocol",
            "tyrant",
            "--master-ts",
            &tt_ts(3).to_string(),
        ],
    );
    holds(
        &replica.addr,
        &map(&[("k4", b"v"), ("k5", b"v"), ("k6", b"v")]),
        20,
    );
    assert_eq!(master.requests(), [(tt_ts(3) + 1, 2)]);
    // Tyrant setmst with a time stamp: go on after it (the fifth record is applied again).
    let mut t = Tt::new(&replica.addr);
    let (host, port) = master.addr.rsplit_once(':').unwrap();
    let mut req = Vec::new();
    tt_bin::encode_request(
        &Request::SetMst {
            host: host.as_bytes(),
            port: port.parse().unwrap(),
            ts: tt_ts(4),
            opts: 0,
        },
        &mut req,
    );
    t.0.write_all(&req).unwrap();
    assert_eq!(t.code(), 0);
    assert!(eventually(10, || master.requests().len() == 2));
    assert_eq!(master.requests()[1], (tt_ts(4) + 1, 2));
}

/// The Tyrant `stat` of the server at `addr`, polled until `f` holds (at most `secs`).
fn stat_until(
    addr: &str,
    secs: u64,
    f: impl Fn(&BTreeMap<String, String>) -> bool,
) -> BTreeMap<String, String> {
    let mut st = BTreeMap::new();
    let ok = eventually(secs, || {
        st = Tt::new(addr).stat();
        f(&st)
    });
    assert!(ok, "{st:?}");
    st
}

/// Without `--master-protocol`, a replica finds out what its master speaks (a probe: Tyrant
/// `stat`, then Kyoto Tycoon's `/rpc/report`) and follows it: a ttserver-like master and a
/// ktserver-like one. It used to follow every master with Kura's protocol and, pointed at a
/// ttserver, replicate nothing and say nothing.
#[test]
fn a_replica_finds_out_the_protocol_its_master_speaks() {
    let dir = tempfile::tempdir().unwrap();
    let tt = ModelMaster::start(tt_hello, tt_encode, usize::MAX);
    tt.push(Item::Rec(
        tt_ts(1),
        77,
        body(
            &Request::Put {
                key: b"from",
                value: b"tyrant",
            },
            true,
        ),
    ));
    let r = serve(
        dir.path(),
        &["*", "--port", "0", "--sid", "2", "--master", &tt.addr],
    );
    holds(&r.addr, &map(&[("from", b"tyrant")]), 20);
    let st = Tt::new(&r.addr).stat();
    assert_eq!(
        st.get("master_protocol").map(String::as_str),
        Some("tyrant (detected)"),
        "{st:?}"
    );
    let kt = ModelMaster::start(kt_hello, kt_encode, usize::MAX);
    let set = KtOp::Set {
        key: b"from",
        value: b"kyoto",
        xt: Some(repl_kt::XT_MAX),
    };
    kt.push(Item::Rec(1_000_000, 0, kt_msg(9, 0, set)));
    let r2 = serve(
        dir.path(),
        &["*", "--port", "0", "--sid", "3", "--master", &kt.addr],
    );
    holds(&r2.addr, &map(&[("from", b"kyoto")]), 20);
    let st = Tt::new(&r2.addr).stat();
    assert_eq!(
        st.get("master_protocol").map(String::as_str),
        Some("kyoto (detected)"),
        "{st:?}"
    );
}

/// A replica told the wrong protocol (`--master-protocol kura` for a ttserver-like master)
/// says so in `stat` and names the flag to use.
#[test]
fn a_wrong_master_protocol_is_an_error_that_names_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let tt = ModelMaster::start(tt_hello, tt_encode, usize::MAX);
    let r = serve(
        dir.path(),
        &[
            "*",
            "--port",
            "0",
            "--sid",
            "2",
            "--master",
            &tt.addr,
            "--master-protocol",
            "kura",
        ],
    );
    let st = stat_until(&r.addr, 20, |st| {
        st.get("repl_error")
            .is_some_and(|e| e.contains("--master-protocol tyrant"))
    });
    assert_eq!(
        st.get("master_connected").map(String::as_str),
        Some("false")
    );
}

/// A master that never answers (a listener that says nothing) is an error in `stat` within
/// a bounded time, with or without `--master-protocol`, and the delay grows meanwhile.
#[test]
fn a_master_that_never_answers_is_an_error_within_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let held = Arc::new(Mutex::new(Vec::new()));
    {
        let held = held.clone();
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                held.lock().unwrap().push(c);
            }
        });
    }
    let r = serve(
        dir.path(),
        &["*", "--port", "0", "--sid", "2", "--master", &addr],
    );
    let st = stat_until(&r.addr, 15, |st| {
        st.get("repl_error")
            .is_some_and(|e| e.contains("said nothing"))
    });
    assert!(st["repl_error"].contains("--master-protocol"), "{st:?}");
    assert!(st["delay"].parse::<f64>().unwrap() >= 1.0, "{st:?}");
    let r2 = serve(
        dir.path(),
        &[
            "*",
            "--port",
            "0",
            "--sid",
            "3",
            "--master",
            &addr,
            "--master-protocol",
            "tyrant",
        ],
    );
    stat_until(&r2.addr, 15, |st| {
        st.get("repl_error")
            .is_some_and(|e| e.contains("did not answer"))
    });
}

/// A Kura table (`.kt`) replica of a Tokyo Tyrant table master: the misc calls ttserver logs
/// verbatim (put, putcat, putkeep, out, setindex) and binary puts of the NUL-separated form are
/// redone with their table meaning; setindex makes the replica's index; a logged `search …
/// out` runs again on the replica.
#[test]
fn a_table_replica_of_a_tokyo_tyrant_table_master_redoes_its_misc_calls() {
    let dir = tempfile::tempdir().unwrap();
    let master = ModelMaster::start(tt_hello, tt_encode, usize::MAX);
    let misc = |i: u64, name: &[u8], args: &[&[u8]], ok: bool| {
        Item::Rec(tt_ts(i), 77, {
            let mut b = Vec::new();
            repl_tt::encode_misc(&mut b, name, args, ok);
            b
        })
    };
    for item in [
        misc(1, b"setindex", &[b"n", b"1"], true),
        misc(2, b"put", &[b"a", b"n", b"1", b"w", b"x"], true),
        misc(3, b"putcat", &[b"a", b"n", b"2", b"c", b"y"], true),
        misc(4, b"putkeep", &[b"a", b"n", b"9"], false),
        misc(5, b"put", &[b"b", b"n", b"3"], true),
        misc(6, b"out", &[b"b"], true),
        Item::Rec(
            tt_ts(7),
            77,
            body(
                &Request::Put {
                    key: b"c",
                    value: b"n\x004",
                },
                true,
            ),
        ),
        misc(8, b"setindex", &[b"w", b"lexical"], true),
        misc(9, b"put", &[b"d", b"n", b"7"], true),
        // ttserver logs a `search … out` verbatim: the replica runs it again.
        misc(10, b"search", &[b"addcond\0n\0NUMGE\x005", b"out"], true),
    ] {
        master.push(item);
    }
    let replica = serve(
        dir.path(),
        &[
            "r.kt",
            "--port",
            "0",
            "--sid",
            "2",
            "--master",
            &master.addr,
            "--master-protocol",
            "tyrant",
        ],
    );
    let want = map(&[("a", b"n\x001\0w\0x\0c\0y"), ("c", b"n\x004")]);
    holds(&replica.addr, &want, 20);
    let mut r = Tt::new(&replica.addr);
    let st = eventually(20, || r.stat()["rts"] == tt_ts(10).to_string());
    assert!(st, "the last search was not applied: {:?}", r.stat());
    drop(replica);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["db", "inform"])
        .arg(dir.path().join("r.kt"))
        .output()
        .unwrap();
    let info = String::from_utf8_lossy(&out.stdout);
    assert!(info.contains("indexes: n:dec,w:lex"), "{info}");
}
