//! Replication between real `kura serve` processes on loopback: convergence after writes of
//! every kind, SIGKILL of either side, two masters, retention, a link that keeps failing, and
//! Tokyo Tyrant's own `repl` stream.

mod common;

use common::{converge, eventually, free_port, mc, serve, Tt};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

#[test]
fn a_memory_replica_converges_after_writes_of_every_kind_over_every_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let mp = free_port().to_string();
    let master = serve(
        dir.path(),
        &["m.kh", "--port", &mp, "--sid", "1", "--ulog", "mlog"],
    );
    let mut t = Tt::new(&master.addr);
    for i in 0..300 {
        t.put(format!("pre{i}").as_bytes(), b"before the replica");
    }
    let master_at = format!("127.0.0.1:{mp}");
    let replica = serve(
        dir.path(),
        &["*", "--port", "0", "--sid", "2", "--master", &master_at],
    );
    t.put(b"a", b"1");
    t.putcat(b"a", b"23");
    t.addint(b"n", 5);
    t.addint(b"n", -2);
    t.out(b"pre7");
    let mut s = master.connect();
    assert_eq!(mc(&mut s, "set m 5 0 3\r\nabc\r\n"), "STORED\r\n");
    assert_eq!(mc(&mut s, "append m 0 0 2\r\nde\r\n"), "STORED\r\n");
    assert_eq!(mc(&mut s, "set c 0 0 2\r\n10\r\n"), "STORED\r\n");
    assert_eq!(mc(&mut s, "incr c 7\r\n"), "17\r\n");
    assert_eq!(mc(&mut s, "delete pre8\r\n"), "DELETED\r\n");
    assert_eq!(mc(&mut s, "touch m 100000\r\n"), "TOUCHED\r\n");
    converge(&master.addr, &replica.addr, 20);
    // Flags and expiration times travel too.
    let mut r = replica.connect();
    assert_eq!(mc(&mut r, "mg m f v\r\n"), "VA 5 f5\r\n");
    // The replica refuses writes from clients.
    assert_eq!(Tt::new(&replica.addr).put(b"x", b"y"), 1);
    // Lag and position are reported on both sides.
    let st = Tt::new(&replica.addr).stat();
    assert_eq!(st.get("mport").map(String::as_str), Some(mp.as_str()));
    assert!(st.contains_key("delay") && st.contains_key("rts"), "{st:?}");
    let ms = Tt::new(&master.addr).stat();
    assert!(ms.contains_key("replica_2"), "{ms:?}");
    // vanish replicates.
    t.vanish();
    t.put(b"after", b"vanish");
    converge(&master.addr, &replica.addr, 20);
}

#[test]
fn sigkill_of_master_and_replica_in_turn_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let mp = free_port().to_string();
    let rp = free_port().to_string();
    let master_at = format!("127.0.0.1:{mp}");
    let start_master = || {
        serve(
            dir.path(),
            &[
                "m.kh#sync=always",
                "--port",
                &mp,
                "--sid",
                "1",
                "--ulog",
                "mlog",
            ],
        )
    };
    let start_replica = || {
        serve(
            dir.path(),
            &["r.kh", "--port", &rp, "--sid", "2", "--master", &master_at],
        )
    };
    let mut master = start_master();
    let mut replica = start_replica();
    let mut acked = BTreeMap::new();
    for round in 0..4 {
        let mut t = Tt::new(&master.addr);
        for i in 0..400 {
            let k = format!("k{}", (round * 131 + i) % 500);
            let v = format!("r{round}i{i}");
            if i % 9 == 0 {
                if t.out(k.as_bytes()) == 0 {
                    acked.remove(&k);
                }
            } else {
                assert_eq!(t.put(k.as_bytes(), v.as_bytes()), 0);
                acked.insert(k, v);
            }
        }
        if round % 2 == 0 {
            master.signal(libc::SIGKILL);
            master = start_master();
        } else {
            replica.signal(libc::SIGKILL);
            replica = start_replica();
        }
    }
    let got = Tt::new(&master.addr).digest();
    let want: BTreeMap<Vec<u8>, Vec<u8>> = acked
        .into_iter()
        .map(|(k, v)| (k.into_bytes(), v.into_bytes()))
        .collect();
    assert_eq!(got, want, "the master lost acknowledged writes");
    converge(&master.addr, &replica.addr, 30);
    drop(replica);
    drop(master);
}

#[test]
fn two_masters_converge_on_concurrent_writes_to_the_same_keys() {
    let dir = tempfile::tempdir().unwrap();
    let (ap, bp) = (free_port().to_string(), free_port().to_string());
    let (a_at, b_at) = (format!("127.0.0.1:{ap}"), format!("127.0.0.1:{bp}"));
    let a = serve(
        dir.path(),
        &[
            "a.kh",
            "--port",
            &ap,
            "--sid",
            "11",
            "--ulog",
            "alog",
            "--master",
            &b_at,
            "--replica-writes",
        ],
    );
    let b = serve(
        dir.path(),
        &[
            "b.kh",
            "--port",
            &bp,
            "--sid",
            "12",
            "--ulog",
            "blog",
            "--master",
            &a_at,
            "--replica-writes",
        ],
    );
    // Let both bootstrap from each other (both empty) first.
    std::thread::sleep(Duration::from_millis(1500));
    let writers: Vec<_> = [a.addr.clone(), b.addr.clone()]
        .into_iter()
        .enumerate()
        .map(|(w, addr)| {
            std::thread::spawn(move || {
                let mut t = Tt::new(&addr);
                for i in 0..1500 {
                    let k = format!("hot{}", i % 20);
                    if i % 13 == 0 {
                        t.out(k.as_bytes());
                    } else {
                        assert_eq!(t.put(k.as_bytes(), format!("w{w}i{i}").as_bytes()), 0);
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    converge(&a.addr, &b.addr, 30);
}

#[test]
fn a_replica_the_log_left_behind_bootstraps_again() {
    let dir = tempfile::tempdir().unwrap();
    let mp = free_port().to_string();
    let master_at = format!("127.0.0.1:{mp}");
    let master = serve(
        dir.path(),
        &[
            "m.kh",
            "--port",
            &mp,
            "--sid",
            "1",
            "--ulog",
            "mlog",
            "--ulog-limit",
            "4m",
            "--ulog-keep",
            "0",
        ],
    );
    let rp = free_port().to_string();
    let start_replica = || {
        serve(
            dir.path(),
            &["r.kh", "--port", &rp, "--sid", "2", "--master", &master_at],
        )
    };
    let mut replica = start_replica();
    let mut t = Tt::new(&master.addr);
    t.put(b"first", b"1");
    converge(&master.addr, &replica.addr, 20);
    replica.signal(libc::SIGTERM);
    // 16 MiB of changes while it is away: four times the cap.
    let v = vec![b'v'; 4000];
    for i in 0..4000 {
        t.put(format!("k{}", i % 300).as_bytes(), &v);
    }
    let ulog_size: u64 = std::fs::read_dir(dir.path().join("mlog"))
        .unwrap()
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    assert!(
        eventually(5, || {
            std::fs::read_dir(dir.path().join("mlog"))
                .unwrap()
                .filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum::<u64>()
                <= 6 << 20
        }),
        "the update log stays near its cap (was {ulog_size})"
    );
    replica = start_replica();
    converge(&master.addr, &replica.addr, 30);
    let st = Tt::new(&replica.addr).stat();
    assert_eq!(
        st.get("repl_bootstraps").map(String::as_str),
        Some("1"),
        "{st:?}"
    );
}

/// A proxy that cuts every connection through it after a while, and delays its bytes.
fn flaky_proxy(to: String) -> (String, std::sync::Arc<std::sync::atomic::AtomicBool>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    std::thread::spawn(move || {
        let mut n = 0u64;
        for c in l.incoming() {
            if s2.load(Ordering::Relaxed) {
                return;
            }
            let Ok(c) = c else { continue };
            let Ok(up) = TcpStream::connect(&to) else {
                continue;
            };
            n += 1;
            let life = Duration::from_millis(150 + (n * 97) % 400);
            for (mut from, mut into) in [
                (c.try_clone().unwrap(), up.try_clone().unwrap()),
                (up.try_clone().unwrap(), c.try_clone().unwrap()),
            ] {
                std::thread::spawn(move || {
                    let end = Instant::now() + life;
                    from.set_read_timeout(Some(Duration::from_millis(20))).ok();
                    let mut b = [0u8; 1500];
                    while Instant::now() < end {
                        match from.read(&mut b) {
                            Ok(0) => break,
                            Ok(k) => {
                                std::thread::sleep(Duration::from_millis(2));
                                if into.write_all(&b[..k]).is_err() {
                                    break;
                                }
                            }
                            Err(_) => continue,
                        }
                    }
                    let _ = from.shutdown(std::net::Shutdown::Both);
                    let _ = into.shutdown(std::net::Shutdown::Both);
                });
            }
        }
    });
    (addr, stop)
}

#[test]
fn a_replica_behind_a_link_that_keeps_failing_converges() {
    let dir = tempfile::tempdir().unwrap();
    let master = serve(
        dir.path(),
        &["m.kh", "--port", "0", "--sid", "1", "--ulog", "mlog"],
    );
    let (via, stop) = flaky_proxy(master.addr.clone());
    let replica = serve(
        dir.path(),
        &["r.kh", "--port", "0", "--sid", "2", "--master", &via],
    );
    let mut t = Tt::new(&master.addr);
    for i in 0..3000 {
        t.put(
            format!("k{}", i % 700).as_bytes(),
            format!("v{i}").as_bytes(),
        );
        if i % 500 == 0 {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    converge(&master.addr, &replica.addr, 60);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
}

#[test]
fn a_tokyo_tyrant_slave_is_sent_tyrant_commands() {
    use kura_proto::repl_tt::{self, Frame};
    use kura_proto::tt_bin::{Limits, Request};
    let dir = tempfile::tempdir().unwrap();
    let master = serve(
        dir.path(),
        &["m.kh", "--port", "0", "--sid", "7", "--ulog", "mlog"],
    );
    let mut t = Tt::new(&master.addr);
    t.put(b"k", b"v");
    t.out(b"k");
    // A slave with sid 3 asking from time stamp 1 on, as ttserver's do_slave asks.
    let mut s = TcpStream::connect(&master.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = Vec::new();
    repl_tt::encode_request(&mut req, 1, 3);
    s.write_all(&req).unwrap();
    let mut buf = Vec::new();
    let mut b = [0u8; 4096];
    let mut frames = Vec::new();
    let limits = Limits::default();
    let end = Instant::now() + Duration::from_secs(10);
    while frames.len() < 2 && Instant::now() < end {
        let n = s.read(&mut b).unwrap();
        assert!(n > 0, "the master hung up");
        buf.extend_from_slice(&b[..n]);
        let mut at = 0;
        if frames.is_empty() && buf.len() >= 4 && at == 0 && !buf.is_empty() {
            if let Ok(Some((sid, used))) = repl_tt::decode_sid(&buf) {
                assert_eq!(sid, 7);
                at = used;
                frames.push(None);
            }
        }
        while let Ok(Some((f, used))) = repl_tt::decode_frame(&buf[at..], 1 << 20) {
            at += used;
            if let Frame::Record { ts, sid, body } = f {
                assert!(ts > 1);
                assert_eq!(sid, 7);
                let (req, result) = repl_tt::decode_body(body, &limits).unwrap();
                assert_eq!(result, 0);
                let cmd = match req {
                    Request::Put { key, value } => format!("put {key:?} {value:?}"),
                    Request::Out { key } => format!("out {key:?}"),
                    other => format!("{other:?}"),
                };
                frames.push(Some(cmd));
            }
        }
        buf.drain(..at);
    }
    assert_eq!(
        frames,
        vec![
            None,
            Some(format!("put {:?} {:?}", b"k", b"v")),
            Some(format!("out {:?}", b"k"))
        ]
    );
}

#[test]
fn a_hot_backup_and_the_update_log_restore_to_a_point_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let master = serve(
        dir.path(),
        &[
            "m.kh",
            "--port",
            "0",
            "--sid",
            "1",
            "--ulog",
            "mlog",
            "--backup-dir",
            ".",
        ],
    );
    let mut t = Tt::new(&master.addr);
    t.put(b"a", b"1");
    t.put(b"b", b"2");
    let kura = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_kura"))
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let port = common::port_of(&master.addr).to_string();
    let o = kura(&["remote", "copy", "--port", &port, "bk.kh"]);
    assert!(o.status.success(), "{o:?}");
    assert!(dir.path().join("bk.kh/kura.ulogpos").exists());
    t.put(b"c", b"3");
    t.out(b"a");
    let until = t.stat()["ulog_last_ts"].clone();
    t.put(b"d", b"too late");
    let o = kura(&[
        "db", "restore", "bk.kh", "--ulog", "mlog", "--until", &until,
    ]);
    assert!(o.status.success(), "{o:?}");
    let o = kura(&["db", "list", "bk.kh"]);
    let mut keys: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    keys.sort();
    assert_eq!(keys, ["b", "c"]);
    // A damaged log is refused before any of it is applied: the record of `e` is damaged,
    // and `d` before it must not come in either.
    t.put(b"e", b"EEEEEEEEEEEEEEEE");
    let first = std::fs::read_dir(dir.path().join("mlog"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "kul"))
        .unwrap();
    drop(master);
    let mut bytes = std::fs::read(&first).unwrap();
    let at = bytes
        .windows(16)
        .position(|w| w == b"EEEEEEEEEEEEEEEE")
        .expect("the record of e");
    bytes[at + 3] ^= 0x55;
    std::fs::write(&first, &bytes).unwrap();
    let o = kura(&["db", "restore", "bk.kh", "--ulog", "mlog"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let o = kura(&["db", "list", "bk.kh"]);
    let mut keys: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    keys.sort();
    assert_eq!(keys, ["b", "c"]);
}
