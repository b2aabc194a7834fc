//! Replication as an operator meets it, with real `kura serve` processes on loopback: a
//! bootstrap never discards a replica's records unasked (`--bootstrap=refuse|replace|merge`,
//! `kura remote setmst [--force]`), a write refused on a replica says why on every protocol,
//! and a replica's delay keeps growing once its master is gone, shown alike by Tyrant `stat`,
//! memcached `stats` and Kyoto Tycoon's `report`.

mod common;

use common::{converge, eventually, free_port, mc, serve, Tt};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

fn kura(dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// Store `pairs` in the database file `name` (no server holds it).
fn seed(dir: &Path, name: &str, pairs: &[(&str, &str)]) {
    for (k, v) in pairs {
        let o = kura(dir, &["db", "put", "--create", name, k, v]);
        assert!(o.status.success(), "{o:?}");
    }
}

/// Start `kura serve ARGS… --log LOG` and wait for its "listening on" line in the log file.
fn serve_logged(dir: &Path, args: &[&str], log: &str) -> common::Server {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_kura"))
        .arg("serve")
        .args(["--threads", "2", "--log", log])
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut addr = None;
    eventually(20, || {
        addr = log_text(dir, log)
            .split("listening on ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .map(str::to_string);
        addr.is_some()
    });
    let addr = addr.expect("kura serve did not start");
    common::Server { child, addr }
}

fn log_text(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
}

fn digest(addr: &str) -> BTreeMap<String, String> {
    Tt::new(addr)
        .digest()
        .into_iter()
        .map(|(k, v)| {
            (
                String::from_utf8_lossy(&k).into_owned(),
                String::from_utf8_lossy(&v).into_owned(),
            )
        })
        .collect()
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The master of the example: `c.kh` holds `c1` and `shared=fromC`.
fn master_c(dir: &Path, port: &str) -> common::Server {
    seed(dir, "c.kh", &[("c1", "v-c1"), ("shared", "fromC")]);
    serve_logged(
        dir,
        &["c.kh", "--port", port, "--sid", "21", "--ulog", "clog"],
        "c.log",
    )
}

const D_RECORDS: [(&str, &str); 3] = [("d1", "v-d1"), ("d2", "v-d2"), ("shared", "fromD")];

/// A server started with `--master` on a database that holds records does not follow by
/// default: it says why in its log and in `stat`, and keeps serving its records (it used to
/// bootstrap and lose them for good).
#[test]
fn a_bootstrap_that_would_replace_records_is_refused_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let cp = free_port().to_string();
    let _c = master_c(dir.path(), &cp);
    seed(dir.path(), "d.kh", &D_RECORDS);
    let master = format!("127.0.0.1:{cp}");
    let d = serve_logged(
        dir.path(),
        &[
            "d.kh", "--port", "0", "--sid", "22", "--ulog", "dlog", "--master", &master,
        ],
        "d.log",
    );
    let mut st = BTreeMap::new();
    assert!(
        eventually(15, || {
            st = Tt::new(&d.addr).stat();
            st.get("repl_error")
                .is_some_and(|e| e.contains("bootstrap refused"))
        }),
        "{st:?}"
    );
    let e = &st["repl_error"];
    assert!(
        e.contains("holds 3 records") && e.contains("--bootstrap=replace"),
        "{e}"
    );
    assert_eq!(
        st.get("repl_role").map(String::as_str),
        Some("replica"),
        "{st:?}"
    );
    let log = log_text(dir.path(), "d.log");
    assert!(log.contains("bootstrap refused"), "{log}");
    assert!(!log.contains("bootstrapping"), "{log}");
    // Its records are all there, still, and it does not retry into a loss later.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(digest(&d.addr), map(&D_RECORDS));
}

/// `--bootstrap=replace` discards the records, saying how many.
#[test]
fn bootstrap_replace_discards_the_records_and_says_how_many() {
    let dir = tempfile::tempdir().unwrap();
    let cp = free_port().to_string();
    let c = master_c(dir.path(), &cp);
    seed(dir.path(), "d.kh", &D_RECORDS);
    let master = format!("127.0.0.1:{cp}");
    let d = serve_logged(
        dir.path(),
        &[
            "d.kh",
            "--port",
            "0",
            "--sid",
            "22",
            "--master",
            &master,
            "--bootstrap=replace",
        ],
        "d.log",
    );
    converge(&c.addr, &d.addr, 20);
    assert_eq!(digest(&d.addr), map(&[("c1", "v-c1"), ("shared", "fromC")]));
    let log = log_text(dir.path(), "d.log");
    assert!(log.contains("discarding the 3 records"), "{log}");
}

/// With `--replica-writes` (two masters) a bootstrap merges: keys only the replica holds stay,
/// a key both hold takes the master's value, and the other master, following this one, gets
/// the replica's own records, so both end up with the union.
#[test]
fn two_masters_seeded_from_existing_data_merge_without_loss() {
    let dir = tempfile::tempdir().unwrap();
    let (cp, dp) = (free_port().to_string(), free_port().to_string());
    let c = master_c(dir.path(), &cp);
    seed(dir.path(), "d.kh", &D_RECORDS);
    let (c_at, d_at) = (format!("127.0.0.1:{cp}"), format!("127.0.0.1:{dp}"));
    let d = serve_logged(
        dir.path(),
        &[
            "d.kh",
            "--port",
            &dp,
            "--sid",
            "22",
            "--ulog",
            "dlog",
            "--master",
            &c_at,
            "--replica-writes",
        ],
        "d.log",
    );
    let union = map(&[
        ("c1", "v-c1"),
        ("d1", "v-d1"),
        ("d2", "v-d2"),
        ("shared", "fromC"),
    ]);
    let mut got = BTreeMap::new();
    assert!(
        eventually(20, || {
            got = digest(&d.addr);
            got == union
        }),
        "{got:?}"
    );
    assert!(log_text(dir.path(), "d.log").contains("merged with the 3 records"));
    // C follows D in turn (restarted as the second master): it gets d1 and d2.
    drop(c);
    let c = serve_logged(
        dir.path(),
        &[
            "c.kh",
            "--port",
            &cp,
            "--sid",
            "21",
            "--ulog",
            "clog",
            "--master",
            &d_at,
            "--replica-writes",
        ],
        "c2.log",
    );
    assert!(
        eventually(20, || {
            got = digest(&c.addr);
            got == union
        }),
        "{got:?}"
    );
    // And both take writes and converge.
    assert_eq!(Tt::new(&c.addr).put(b"late", b"fromC"), 0);
    assert_eq!(Tt::new(&d.addr).put(b"later", b"fromD"), 0);
    converge(&c.addr, &d.addr, 20);
}

/// `kura remote setmst` turning a loaded server into a replica is refused with the reason
/// (the server keeps its records and stays writable); `--force` replaces them.
#[test]
fn setmst_on_a_loaded_server_is_refused_with_its_reason_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let cp = free_port().to_string();
    let c = master_c(dir.path(), &cp);
    seed(dir.path(), "d.kh", &D_RECORDS);
    let d = serve(dir.path(), &["d.kh", "--port", "0", "--sid", "22"]);
    let dport = common::port_of(&d.addr).to_string();
    let master = format!("127.0.0.1:{cp}");
    // Kyoto Tycoon's way: tune_replication, refused with the reason (450).
    let mut h = d.connect();
    h.write_all(
        format!("GET /rpc/tune_replication?host=127.0.0.1&port={cp} HTTP/1.0\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut text = String::new();
    let _ = h.read_to_string(&mut text);
    assert!(
        text.contains(" 450 ") && text.contains("holds 3 records"),
        "{text}"
    );
    let o = kura(dir.path(), &["remote", "--port", &dport, "setmst", &master]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("setmst refused")
            && err.contains("holds 3 records")
            && err.contains("--force"),
        "{err}"
    );
    assert_eq!(digest(&d.addr), map(&D_RECORDS));
    assert_eq!(Tt::new(&d.addr).put(b"still", b"writable"), 0);
    let o = kura(
        dir.path(),
        &["remote", "--port", &dport, "setmst", &master, "--force"],
    );
    assert!(o.status.success(), "{o:?}");
    converge(&c.addr, &d.addr, 20);
    assert_eq!(digest(&d.addr), map(&[("c1", "v-c1"), ("shared", "fromC")]));
}

/// A write refused on a replica says "this server is a replica of HOST:PORT (read-only)" on
/// memcached text and binary, Tyrant's HTTP, Kyoto Tycoon's RPC, and through `kura remote`
/// (Tyrant's binary replies carry no text: `stat` does); the log counts refusals at a
/// bounded pace. It used to say "refused by the server's mask" with no mask given.
#[test]
fn a_write_refused_on_a_replica_says_so_on_every_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let mp = free_port().to_string();
    let m = serve(
        dir.path(),
        &["*", "--port", &mp, "--sid", "1", "--ulog", "mlog"],
    );
    let master = format!("127.0.0.1:{mp}");
    let r = serve_logged(
        dir.path(),
        &["*", "--port", "0", "--sid", "2", "--master", &master],
        "r.log",
    );
    let want = format!("this server is a replica of {master} (read-only)");
    let mut s = r.connect();
    assert_eq!(
        mc(&mut s, "set k 0 0 1\r\nv\r\n"),
        format!("SERVER_ERROR {want}\r\n")
    );
    // memcached binary: SET answers "not supported" with the reason as its text.
    let mut s = r.connect();
    let mut pkt = vec![0x80, 0x01, 0, 1, 8, 0, 0, 0];
    pkt.extend_from_slice(&(8u32 + 1 + 1).to_be_bytes());
    pkt.extend_from_slice(&[0; 12]);
    pkt.extend_from_slice(&[0; 8]);
    pkt.extend_from_slice(b"kv");
    s.write_all(&pkt).unwrap();
    let mut head = [0u8; 24];
    s.read_exact(&mut head).unwrap();
    assert_eq!(u16::from_be_bytes([head[6], head[7]]), 0x83);
    let mut body = vec![0u8; u32::from_be_bytes([head[8], head[9], head[10], head[11]]) as usize];
    s.read_exact(&mut body).unwrap();
    assert_eq!(String::from_utf8_lossy(&body), want);
    // HTTP: Tyrant's PUT and Kyoto Tycoon's RPC.
    let http = |req: String| {
        let mut h = r.connect();
        h.write_all(req.as_bytes()).unwrap();
        let mut text = String::new();
        let _ = h.read_to_string(&mut text);
        text
    };
    let put = http("PUT /k HTTP/1.0\r\nContent-Length: 1\r\n\r\nv".into());
    assert!(
        put.starts_with("HTTP/1.0 403") || put.starts_with("HTTP/1.1 403"),
        "{put}"
    );
    assert!(put.contains(&want), "{put}");
    let rpc = http("GET /rpc/set?key=k&value=v HTTP/1.0\r\n\r\n".into());
    assert!(rpc.contains(" 403 ") && rpc.contains(&want), "{rpc}");
    // kura remote prints the reason.
    let rport = common::port_of(&r.addr).to_string();
    let o = kura(dir.path(), &["remote", "--port", &rport, "put", "k", "v"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("put k refused: {want}")), "{err}");
    let o = kura(dir.path(), &["remote", "--port", &rport, "out", "k"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains(&want), "{o:?}");
    // Tyrant's misc error names the refusal too.
    let mut t = Tt::new(&r.addr);
    assert_ne!(t.put(b"k", b"v"), 0);
    assert!(t.last_error().contains(&want));
    // Reads are not writes: misc functions that only read (iternext for `kura remote list
    // --values`, get) answer on a read-only replica.
    assert_eq!(Tt::new(&m.addr).put(b"seen", b"here"), 0);
    assert!(eventually(20, || Tt::new(&r.addr).get(b"seen").is_some()));
    let o = kura(
        dir.path(),
        &["remote", "--port", &rport, "list", "--values"],
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("seen\there"),
        "{o:?}"
    );
    let o = kura(
        dir.path(),
        &["remote", "--port", &rport, "misc", "get", "seen"],
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("here"), "{o:?}");
    // The log says it, once for a burst.
    for _ in 0..50 {
        Tt::new(&r.addr).put(b"x", b"y");
    }
    let log = log_text(dir.path(), "r.log");
    let lines = log.lines().filter(|l| l.contains("refused")).count();
    assert!(
        log.contains(&format!("refused a client write ({want})")),
        "{log}"
    );
    assert!(lines <= 2, "{log}");
}

/// Read memcached `stats` into a map.
fn mc_stats(addr: &str) -> BTreeMap<String, String> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"stats\r\n").unwrap();
    let mut text = String::new();
    let mut buf = [0u8; 65536];
    while !text.ends_with("END\r\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Kyoto Tycoon's `/rpc/report` into a map.
fn kt_report(addr: &str) -> BTreeMap<String, String> {
    let mut h = TcpStream::connect(addr).unwrap();
    h.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    h.write_all(b"GET /rpc/report HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    let _ = h.read_to_string(&mut text);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("");
    body.lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// After the master is killed, the replica's delay is the time since it last heard from it,
/// growing (it used to report `delay 0.000000` and "not connected"); Tyrant `stat`, memcached
/// `stats` and Kyoto Tycoon's `report` show the same replication fields.
#[test]
fn a_replica_whose_master_is_gone_reports_a_growing_delay_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let mp = free_port().to_string();
    let mut m = serve(
        dir.path(),
        &["*", "--port", &mp, "--sid", "1", "--ulog", "mlog"],
    );
    Tt::new(&m.addr).put(b"a", b"1");
    let master = format!("127.0.0.1:{mp}");
    let r = serve(
        dir.path(),
        &["*", "--port", "0", "--sid", "2", "--master", &master],
    );
    converge(&m.addr, &r.addr, 20);
    let st = Tt::new(&r.addr).stat();
    assert_eq!(st.get("master_connected").map(String::as_str), Some("true"));
    let delay = |st: &BTreeMap<String, String>| -> f64 { st["delay"].parse().unwrap() };
    assert!(delay(&st) < 2.0, "{st:?}");
    m.signal(libc::SIGKILL);
    std::thread::sleep(Duration::from_millis(3000));
    let (tt, mcs, kt) = (
        Tt::new(&r.addr).stat(),
        mc_stats(&r.addr),
        kt_report(&r.addr),
    );
    for (name, st) in [("tyrant", &tt), ("memcached", &mcs), ("kyoto", &kt)] {
        assert_eq!(
            st.get("master_connected").map(String::as_str),
            Some("false"),
            "{name}: {st:?}"
        );
        assert!(delay(st) >= 2.5, "{name}: {st:?}");
        assert_eq!(
            st.get("repl_role").map(String::as_str),
            Some("replica"),
            "{name}"
        );
        assert_eq!(
            st.get("mport").map(String::as_str),
            Some(mp.as_str()),
            "{name}"
        );
        assert!(
            st.contains_key("rts") && st.contains_key("master_protocol"),
            "{name}: {st:?}"
        );
    }
    // Growing.
    std::thread::sleep(Duration::from_millis(1000));
    let later = Tt::new(&r.addr).stat();
    assert!(delay(&later) > delay(&tt), "{later:?}");
}
