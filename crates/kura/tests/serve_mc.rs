//! `kura serve` as a client sees it: the real binary on a free loopback port, spoken to over
//! TCP with the memcached text protocol.

mod common;

use common::Server;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

fn roundtrip(s: &mut TcpStream, send: &[u8], expect: &str) {
    s.write_all(send).unwrap();
    let mut got = vec![0u8; expect.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), expect);
}

#[test]
fn memcached_text_over_tcp_and_clean_shutdown_keeps_data() {
    let dir = tempfile::tempdir().unwrap();
    let mut srv = Server::start(dir.path(), "m.kh");
    let mut c = srv.connect();
    roundtrip(&mut c, b"set k 7 0 5\r\nhello\r\n", "STORED\r\n");
    roundtrip(&mut c, b"get k nope\r\n", "VALUE k 7 5\r\nhello\r\nEND\r\n");
    roundtrip(
        &mut c,
        b"incr k 1\r\n",
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
    );
    roundtrip(
        &mut c,
        b"set n 0 0 1 noreply\r\n9\r\nincr n 1\r\n",
        "10\r\n",
    );
    // Two clients at once.
    let mut d = srv.connect();
    roundtrip(&mut d, b"get n\r\n", "VALUE n 0 2\r\n10\r\nEND\r\n");
    // SIGTERM: stop, sync, close; exit 0; the data is on disk.
    let status = srv.signal(libc::SIGTERM);
    assert!(status.success(), "{status:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["db", "get", "m.kh", "k"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.stdout, b"hello");
}

/// What one writer saw acknowledged before its server was killed.
#[derive(Default)]
struct Acked {
    /// Keys stored (each written once, with the value `val(key)`).
    stored: Vec<String>,
    /// Keys stored, then deleted (both acknowledged).
    deleted: Vec<String>,
    /// The last acknowledged value of this writer's counter key, overwritten by every write.
    counter: Option<u64>,
}

/// `kura db check NAME` in `dir` passes.
fn db_check_ok(dir: &std::path::Path, name: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["db", "check", name])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn val(key: &str) -> String {
    format!("v-{key}-{}", key.len())
}

/// Write until the server goes away: pipelines of 8 sets of new keys, a delete of one of
/// them and an overwrite of the counter key, noting what was acknowledged. Returns when the
/// connection fails (the server was killed).
fn write_until_killed(addr: &str, round: usize, writer: usize) -> Acked {
    let mut acked = Acked::default();
    let Ok(mut s) = TcpStream::connect(addr) else {
        return acked;
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    for batch in 0usize.. {
        let keys: Vec<String> = (0..8)
            .map(|i| format!("r{round}w{writer}b{batch}i{i}"))
            .collect();
        let counter = (round * 1_000_000 + batch) as u64;
        let mut req = String::new();
        for k in &keys {
            let v = val(k);
            req += &format!("set {k} 0 0 {}\r\n{v}\r\n", v.len());
        }
        req += &format!("delete {}\r\n", keys[0]);
        let c = counter.to_string();
        req += &format!("set c{writer} 0 0 {}\r\n{c}\r\n", c.len());
        if s.write_all(req.as_bytes()).is_err() {
            return acked;
        }
        for (i, k) in keys.iter().enumerate() {
            line.clear();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return acked;
            }
            assert_eq!(line, "STORED\r\n", "set {k}");
            if i > 0 {
                acked.stored.push(k.clone());
            }
        }
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            // The delete was not acknowledged: the key may be there or not.
            return acked;
        }
        assert_eq!(line, "DELETED\r\n");
        acked.deleted.push(keys[0].clone());
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return acked;
        }
        assert_eq!(line, "STORED\r\n");
        acked.counter = Some(counter);
    }
    unreachable!()
}

/// The crash test of the server: clients keep writing (sets, deletes, overwrites, pipelined,
/// over several connections) to a `sync=always` server while it is SIGKILLed and restarted in
/// a loop. Every acknowledged write must be there afterwards (and every acknowledged delete
/// gone, and each counter key at its last acknowledged value or the one write after it that
/// was in flight), and the database must pass `kura db check`.
#[test]
fn sigkill_while_writing_loses_no_acknowledged_write() {
    const ROUNDS: usize = 6;
    const WRITERS: usize = 3;
    let dir = tempfile::tempdir().unwrap();
    let name = "s.kh#sync=always";
    let mut all = Vec::new();
    for round in 0..ROUNDS {
        let mut srv = Server::start(dir.path(), name);
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let addr = srv.addr.clone();
                std::thread::spawn(move || write_until_killed(&addr, round, w))
            })
            .collect();
        // Kill while the writers are in the middle of their pipelines.
        std::thread::sleep(Duration::from_millis(150 + 70 * round as u64));
        srv.signal(libc::SIGKILL);
        let got: Vec<Acked> = writers.into_iter().map(|h| h.join().unwrap()).collect();
        all.push(got);
    }
    let total: usize = all.iter().flatten().map(|a| a.stored.len()).sum();
    assert!(
        total > 100,
        "only {total} writes acknowledged: the kills came too early"
    );
    db_check_ok(dir.path(), "s.kh");
    let srv = Server::start(dir.path(), name);
    let mut c = srv.connect();
    let mut r = BufReader::new(c.try_clone().unwrap());
    let mut get = |k: &str| -> Option<String> {
        c.write_all(format!("get {k}\r\n").as_bytes()).unwrap();
        let mut head = String::new();
        r.read_line(&mut head).unwrap();
        if head == "END\r\n" {
            return None;
        }
        assert!(head.starts_with(&format!("VALUE {k} 0 ")), "{head}");
        let (mut value, mut end) = (String::new(), String::new());
        r.read_line(&mut value).unwrap();
        r.read_line(&mut end).unwrap();
        assert_eq!(end, "END\r\n");
        Some(value.trim_end().to_string())
    };
    for (round, writers) in all.iter().enumerate() {
        for (w, a) in writers.iter().enumerate() {
            for k in &a.stored {
                assert_eq!(get(k), Some(val(k)), "acknowledged set of {k} lost");
            }
            for k in &a.deleted {
                assert_eq!(get(k), None, "acknowledged delete of {k} lost");
            }
            // The counter of the last round: its last acknowledged value, or the next one
            // (written, not acknowledged). Earlier rounds' values were overwritten since.
            if let (true, Some(n)) = (round == ROUNDS - 1, a.counter) {
                let got: u64 = get(&format!("c{w}")).expect("counter").parse().unwrap();
                assert!(
                    got == n || got == n + 1,
                    "counter c{w}: {got}, acknowledged {n}"
                );
            }
        }
    }
}

#[test]
fn bad_input_gets_errors_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "*");
    // A line that never ends: the connection is closed without a word, as memcached does.
    let mut a = srv.connect();
    let _ = a.write_all(&vec![b'x'; 8 << 10]);
    let mut got = String::new();
    let _ = a.read_to_string(&mut got);
    assert_eq!(got, "");
    // Garbage gets ERROR and the connection goes on; a length field above INT_MAX - 2 is a
    // malformed line (as in memcached: nothing is skipped, the next command is answered); a
    // length within range but above the item size limit is refused and its block skipped as
    // it arrives.
    let mut b = srv.connect();
    roundtrip(&mut b, b"\x01\x02\x03\r\n", "ERROR\r\n");
    roundtrip(
        &mut b,
        b"set k 0 0 2147483646\r\nversion\r\n",
        "CLIENT_ERROR bad command line format\r\nVERSION ",
    );
    let mut rest = String::new();
    BufReader::new(b.try_clone().unwrap())
        .read_line(&mut rest)
        .unwrap();
    roundtrip(
        &mut b,
        b"set k 0 0 2000000\r\n",
        "SERVER_ERROR object too large for cache\r\n",
    );
    b.write_all(&vec![b'z'; 2_000_000]).unwrap();
    roundtrip(&mut b, b"\r\nget k\r\n", "END\r\n");
    // A client that stops halfway through a request and shuts down its side is hung up on
    // at once (after its replies), in every protocol, not left open until a timeout.
    for partial in [
        &b"get a\r\nset a 0 0 100\r\nab"[..],
        b"\x80\x01\x00\x03\x08\x00\x00\x00\x00\x00\x03\xe8",
        b"\xC8\x10\x00\x00",
        b"GET /a HTTP/1.1\r\nHost",
    ] {
        let mut s = srv.connect();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        s.write_all(partial).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        let r = s.read_to_end(&mut rest);
        assert!(r.is_ok(), "{partial:?} left open: {r:?}");
    }
    // Other clients are unaffected.
    let mut c = srv.connect();
    roundtrip(&mut c, b"version\r\n", "VERSION 1.6.21\r\n");
}

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0)
}

/// 10,000 idle connections, a client sending one byte at a time and a line of 8 MB without a
/// newline: the server keeps answering others, and its memory stays bounded.
#[test]
fn idle_floods_slow_clients_and_huge_lines_do_not_starve_others() {
    // This test process needs descriptors for its 10,000 connections too.
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur = r.rlim_max.min(30_000);
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
    }
    let n = if r.rlim_cur >= 11_000 {
        10_000
    } else {
        (r.rlim_cur as usize).saturating_sub(500)
    };
    let dir = tempfile::tempdir().unwrap();
    let (srv, _) = Server::start_args(
        dir.path(),
        &[
            "*",
            "--port",
            "0",
            "--threads",
            "2",
            "--max-connections",
            "20000",
        ],
        1,
    );
    let before = rss_kb(srv.child.id());
    let idle: Vec<TcpStream> = (0..n)
        .map(|_| TcpStream::connect(&srv.addr).unwrap())
        .collect();
    let mut c = srv.connect();
    roundtrip(
        &mut c,
        b"set k 0 0 1\r\nx\r\nget k\r\n",
        "STORED\r\nVALUE k 0 1\r\nx\r\nEND\r\n",
    );
    let with_idle = rss_kb(srv.child.id());
    assert!(
        with_idle < before + 64 * 1024,
        "{n} idle connections took {} KiB",
        with_idle.saturating_sub(before)
    );
    // A slow client: one byte at a time, while another client is served meanwhile.
    let mut slow = srv.connect();
    for &b in b"set s 0 0 2\r\nhi\r" {
        slow.write_all(&[b]).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        roundtrip(&mut c, b"get k\r\n", "VALUE k 0 1\r\nx\r\nEND\r\n");
    }
    roundtrip(&mut slow, b"\n", "STORED\r\n");
    // 8 MB without a newline: the connection is closed, the server goes on.
    let mut big = srv.connect();
    let line = vec![b'a'; 8 << 20];
    let _ = big.write_all(&line); // the server may close before all of it is sent
    let mut got = String::new();
    let _ = big.read_to_string(&mut got);
    assert_eq!(got, "");
    roundtrip(&mut c, b"get s\r\n", "VALUE s 0 2\r\nhi\r\nEND\r\n");
    assert!(rss_kb(srv.child.id()) < before + 128 * 1024, "memory grew");
    drop(idle);
}

/// Large values go out by reference from the database's mapping (queued between the encoded
/// reply bytes, written with writev): a client that reads slowly, in small pieces, still gets
/// every byte in order, in both protocols, pipelined among small replies.
#[test]
fn large_values_reach_a_slow_reader_whole_and_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "big.kh");
    let mut c = srv.connect();
    let values: Vec<Vec<u8>> = (0..6usize)
        .map(|i| {
            (0..20_000 + i * 150_000)
                .map(|j| (i * 7 + j % 251) as u8)
                .collect()
        })
        .collect();
    for (i, v) in values.iter().enumerate() {
        let mut req = format!("set big{i} {i} 0 {}\r\n", v.len()).into_bytes();
        req.extend_from_slice(v);
        req.extend_from_slice(b"\r\n");
        roundtrip(&mut c, &req, "STORED\r\n");
    }
    roundtrip(&mut c, b"set small 0 0 2\r\nhi\r\n", "STORED\r\n");
    // Past the 50 ms flush tick: the records are in the file, read through its mapping.
    std::thread::sleep(Duration::from_millis(300));
    let item = |out: &mut Vec<u8>, i: usize| {
        out.extend_from_slice(format!("VALUE big{i} {i} {}\r\n", values[i].len()).as_bytes());
        out.extend_from_slice(&values[i]);
        out.extend_from_slice(b"\r\n");
    };
    let mut req = Vec::new();
    let mut want = Vec::new();
    for round in 0..3 {
        req.extend_from_slice(b"get big0 small big1 big2 nothing big3 big4 big5\r\n");
        for i in [0, 1, 2, 3, 4, 5] {
            if i == 1 {
                want.extend_from_slice(b"VALUE small 0 2\r\nhi\r\n");
            }
            item(&mut want, i);
        }
        want.extend_from_slice(b"END\r\n");
        req.extend_from_slice(format!("get big{round}\r\n").as_bytes());
        item(&mut want, round);
        want.extend_from_slice(b"END\r\n");
    }
    c.write_all(&req).unwrap();
    let mut got = Vec::new();
    let mut piece = vec![0u8; 7000];
    while got.len() < want.len() {
        let n = c.read(&mut piece).unwrap();
        assert!(
            n > 0,
            "the server closed after {} of {} bytes",
            got.len(),
            want.len()
        );
        got.extend_from_slice(&piece[..n]);
        if got.len().is_multiple_of(20) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    assert_eq!(got.len(), want.len());
    assert!(got == want, "the stream differs from the replies");
    // The binary protocol's get of a large value.
    let mut b = srv.connect();
    let key = b"big4";
    let mut pkt = vec![0x80, 0x00, 0, key.len() as u8, 0, 0, 0, 0];
    pkt.extend_from_slice(&(key.len() as u32).to_be_bytes());
    pkt.extend_from_slice(&[0xAB, 0xCD, 0xEF, 0x01, 0, 0, 0, 0, 0, 0, 0, 0]);
    pkt.extend_from_slice(key);
    b.write_all(&pkt).unwrap();
    let mut hdr = [0u8; 24];
    b.read_exact(&mut hdr).unwrap();
    assert_eq!((hdr[0], hdr[1], hdr[6], hdr[7]), (0x81, 0x00, 0, 0));
    assert_eq!(&hdr[12..16], &[0xAB, 0xCD, 0xEF, 0x01], "opaque echoed");
    let body = u32::from_be_bytes(hdr[8..12].try_into().unwrap()) as usize;
    assert_eq!(body, 4 + values[4].len());
    let mut rest = vec![0u8; body];
    b.read_exact(&mut rest).unwrap();
    assert_eq!(&rest[..4], &4u32.to_be_bytes(), "flags");
    assert!(rest[4..] == values[4][..]);
}

/// `--max-connections`: a connection past the limit is told why and closed, and counted;
/// `stats` reports the traffic, the threads and the limits as memcached's fields.
#[test]
fn connection_limit_and_traffic_stats() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start_with(dir.path(), "*", &["--max-connections", "2"]);
    let mut a = srv.connect();
    roundtrip(&mut a, b"set k 0 0 2\r\nhi\r\n", "STORED\r\n");
    let _b = srv.connect();
    // The acceptor may see the third connection only after the second: retry briefly.
    let mut refused = String::new();
    for _ in 0..50 {
        let mut c = srv.connect();
        refused.clear();
        let _ = c.read_to_string(&mut refused);
        if !refused.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(refused, "SERVER_ERROR too many open connections\r\n");
    a.write_all(b"stats\r\nstats settings\r\n").unwrap();
    let mut r = BufReader::new(a.try_clone().unwrap());
    let mut stats = std::collections::HashMap::new();
    let mut ends = 0;
    while ends < 2 {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if line == "END\r\n" {
            ends += 1;
            continue;
        }
        let mut f = line.split_whitespace().skip(1);
        let (k, v) = (f.next().unwrap(), f.next().unwrap_or(""));
        stats.insert(k.to_string(), v.to_string());
    }
    let num = |k: &str| -> u64 { stats[k].parse().unwrap() };
    assert!(num("rejected_connections") >= 1, "{stats:?}");
    assert!(num("bytes_read") >= 19 + 7, "{stats:?}");
    assert!(num("bytes_written") >= 8, "{stats:?}");
    assert_eq!((num("threads"), num("num_threads")), (2, 2));
    assert_eq!((num("max_connections"), num("maxconns")), (2, 2));
    assert_eq!(stats["tcpport"], common::port_of(&srv.addr));
    assert!(stats["rusage_user"].contains('.'), "{stats:?}");
}

/// The options a plain `kura serve` run relies on, together: no database name (the default
/// `casket.kh` in the working directory), `--memcached-port` (a second listener on the same
/// database), `--max-item-size` above 1 MiB, `--timeout` (idle connections closed), SIGINT
/// (a clean stop that keeps the data).
#[test]
fn default_database_second_port_item_size_timeout_and_sigint() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--port",
        "0",
        "--memcached-port",
        "0",
        "--host",
        "127.0.0.1",
        "--threads",
        "2",
        "--max-item-size",
        "2m",
        "--timeout",
        "1",
    ];
    let (mut srv, addrs) = Server::start_args(dir.path(), &args, 2);
    let connect = |addr: &str| {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    };
    let (mut a, mut b) = (connect(&addrs[0]), connect(&addrs[1]));
    // 1.5 MB fits under 2m; 2.5 MB does not (and its block is skipped).
    let big = vec![b'q'; 1_500_000];
    let set =
        |head: &str, value: &[u8], tail: &str| [head.as_bytes(), value, tail.as_bytes()].concat();
    roundtrip(
        &mut a,
        &set("set big 0 0 1500000\r\n", &big, "\r\n"),
        "STORED\r\n",
    );
    let huge = set(
        "set huge 0 0 2500000\r\n",
        &vec![b'z'; 2_500_000],
        "\r\nget huge\r\n",
    );
    let refused = "SERVER_ERROR object too large for cache\r\nEND\r\n";
    roundtrip(&mut a, &huge, refused);
    // The second port serves the same database.
    b.write_all(b"get big\r\n").unwrap();
    let mut head = String::new();
    let mut rb = BufReader::new(b.try_clone().unwrap());
    rb.read_line(&mut head).unwrap();
    assert_eq!(head, "VALUE big 0 1500000\r\n");
    let mut got = vec![0u8; 1_500_000 + 7];
    rb.read_exact(&mut got).unwrap();
    assert!(got.starts_with(&big) && got.ends_with(b"\r\nEND\r\n"));
    // --timeout 1: an idle connection is closed within a few seconds.
    let idle = connect(&addrs[0]);
    let started = std::time::Instant::now();
    let mut rest = Vec::new();
    let n = (&idle).read_to_end(&mut rest).unwrap();
    assert_eq!(n, 0);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(8),
        "{waited:?}"
    );
    // SIGINT: a clean stop; the record is in casket.kh.
    assert!(srv.signal(libc::SIGINT).success());
    let out = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["db", "get", "casket.kh", "big"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.stdout, big);
}

/// SIGTERM while a client has not read any of 10 MB of replies: the server stops, but only
/// after delivering every reply to what it had read, whole, in order, then a FIN; it syncs and
/// exits 0, and the set among the pipelined requests is in the database.
#[test]
fn sigterm_delivers_every_reply_already_due_then_stops() {
    let dir = tempfile::tempdir().unwrap();
    let mut srv = Server::start(dir.path(), "t.kh");
    let big: Vec<u8> = (0..256usize << 10).map(|i| (i % 251) as u8).collect();
    let mut c = srv.connect();
    let mut set = format!("set big 0 0 {}\r\n", big.len()).into_bytes();
    set.extend_from_slice(&big);
    set.extend_from_slice(b"\r\n");
    roundtrip(&mut c, &set, "STORED\r\n");
    let gets = 40;
    let mut pipelined = b"get big\r\n".repeat(gets);
    pipelined.extend_from_slice(b"set after 0 0 2\r\nok\r\nget after\r\n");
    c.write_all(&pipelined).unwrap();
    // Wait (bounded) until the server has executed all of it: 41 gets counted.
    let mut stats = srv.connect();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        stats.write_all(b"stats\r\n").unwrap();
        let mut r = BufReader::new(stats.try_clone().unwrap());
        let mut cmd_get = 0;
        loop {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            if let Some(v) = line.strip_prefix("STAT cmd_get ") {
                cmd_get = v.trim().parse().unwrap();
            }
            if line == "END\r\n" {
                break;
            }
        }
        if cmd_get > gets {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not executed");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(srv.child.id() as libc::pid_t, libc::SIGTERM) };
    // Read only once the workers are stopping (they see the signal within 150 ms), so that
    // the replies must come from the stopping path, not from the normal loop.
    std::thread::sleep(Duration::from_millis(600));
    let mut got = Vec::new();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.read_to_end(&mut got).unwrap();
    let mut want = Vec::new();
    for _ in 0..gets {
        want.extend_from_slice(format!("VALUE big 0 {}\r\n", big.len()).as_bytes());
        want.extend_from_slice(&big);
        want.extend_from_slice(b"\r\nEND\r\n");
    }
    want.extend_from_slice(b"STORED\r\nVALUE after 0 2\r\nok\r\nEND\r\n");
    assert_eq!(got.len(), want.len(), "replies cut short");
    assert!(got == want, "replies differ");
    assert!(srv.child.wait().unwrap().success());
    let out = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["db", "get", "t.kh", "after"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.stdout, b"ok");
}

/// With `--timeout 2`, a client sending one byte a second is active, not idle: it is served
/// when its line is complete, 7 s after it began; a silent client is closed meanwhile, and others are
/// served throughout.
#[test]
fn a_client_sending_one_byte_a_second_is_served_and_an_idle_one_closed() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start_with(dir.path(), "*", &["--timeout", "2"]);
    let mut other = srv.connect();
    roundtrip(&mut other, b"set k 0 0 1\r\nx\r\n", "STORED\r\n");
    let mut slow = srv.connect();
    let idle = srv.connect();
    let mut idle_reader = Some(std::thread::spawn(move || {
        let started = std::time::Instant::now();
        let mut rest = Vec::new();
        let n = (&idle).read_to_end(&mut rest).unwrap_or(0);
        (n, started.elapsed())
    }));
    for (i, &b) in b"get k\r".iter().enumerate() {
        slow.write_all(&[b]).unwrap();
        std::thread::sleep(Duration::from_secs(1));
        roundtrip(&mut other, b"get k\r\n", "VALUE k 0 1\r\nx\r\nEND\r\n");
        if i == 4 {
            let (n, waited) = idle_reader.take().unwrap().join().unwrap();
            assert_eq!(n, 0, "the idle client got bytes");
            assert!(waited < Duration::from_secs(5), "idle for {waited:?}");
        }
    }
    roundtrip(&mut slow, b"\n", "VALUE k 0 1\r\nx\r\nEND\r\n");
}

/// Random bytes over TCP, in every protocol the first byte selects (memcached text and binary,
/// Tokyo Tyrant, HTTP, Kyoto Tycoon binary): 300 connections of up to 64 KiB each, from a
/// seeded generator. The server answers or hangs up, keeps serving a well-behaved client
/// throughout, keeps its memory bounded, and a SIGTERM still stops it cleanly.
#[test]
fn random_bytes_on_every_protocol_leave_the_server_serving() {
    let dir = tempfile::tempdir().unwrap();
    let mut srv = Server::start(dir.path(), "g.kh");
    let mut good = srv.connect();
    roundtrip(&mut good, b"set keep 0 0 4\r\nsafe\r\n", "STORED\r\n");
    let before = rss_kb(srv.child.id());
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        // xorshift64*
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        seed.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let firsts: [&[u8]; 6] = [b"", b"\x80", b"\xC8", b"GET /", b"POST /rpc/", b"\xB8"];
    for round in 0..300u64 {
        let mut bytes = firsts[(next() % firsts.len() as u64) as usize].to_vec();
        let len = (next() % (64 << 10)) as usize;
        while bytes.len() < len {
            bytes.extend_from_slice(&next().to_le_bytes());
        }
        // A third of the connections speak in lines, as a confused text client would.
        if round % 3 == 0 {
            for b in bytes.iter_mut().filter(|b| **b % 16 == 0) {
                *b = b'\n';
            }
        }
        let mut s = srv.connect();
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let _ = s.write_all(&bytes); // the server may hang up first
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink); // a reply, a hang-up or a timeout: all are fine
        if round % 25 == 0 {
            assert!(srv.child.try_wait().unwrap().is_none(), "the server died");
            roundtrip(&mut good, b"mn\r\n", "MN\r\n");
        }
    }
    // Tokyo Tyrant's vanish or memcached's flush_all may have been spelled by chance: store
    // the control key again before checking it.
    roundtrip(
        &mut good,
        b"set keep 0 0 4\r\nsafe\r\nget keep\r\n",
        "STORED\r\nVALUE keep 0 4\r\nsafe\r\nEND\r\n",
    );
    let after = rss_kb(srv.child.id());
    assert!(
        after < before + 256 * 1024,
        "memory grew from {before} to {after} KiB"
    );
    assert!(srv.signal(libc::SIGTERM).success());
    db_check_ok(dir.path(), "g.kh");
}
