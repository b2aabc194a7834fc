//! Replica-acknowledged writes (`kura serve --sync-replicas N`) between real `kura serve`
//! processes: a write's reply waits until the replica holds it; with the replica gone, the
//! reply goes out at `--sync-replicas-timeout`, counted.

mod common;

use common::{eventually, free_port, mc, serve, Tt};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// memcached `get` of one key: its value, `None` when missing.
fn mc_get(s: &mut TcpStream, key: &str) -> Option<String> {
    s.write_all(format!("get {key}\r\n").as_bytes()).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    if line == "END\r\n" {
        return None;
    }
    let mut value = String::new();
    r.read_line(&mut value).unwrap();
    let mut end = String::new();
    r.read_line(&mut end).unwrap();
    assert_eq!(end, "END\r\n", "after {line:?} {value:?}");
    Some(value.trim_end().to_string())
}

/// A master with `--sync-replicas 1` and the timeout, its replica on `r.kh`; waits until the
/// replica is counted.
fn pair(
    dir: &std::path::Path,
    timeout_ms: &str,
    replica_sync: &str,
    on_timeout: &str,
) -> (common::Server, common::Server) {
    let mp = free_port().to_string();
    let master = serve(
        dir,
        &[
            "m.kh",
            "--port",
            &mp,
            "--sid",
            "1",
            "--ulog",
            "mlog",
            "--sync-replicas",
            "1",
            "--sync-replicas-timeout",
            timeout_ms,
            "--sync-replicas-on-timeout",
            on_timeout,
        ],
    );
    let replica = serve(
        dir,
        &[
            &format!("r.kh#sync={replica_sync}"),
            "--port",
            "0",
            "--sid",
            "2",
            "--master",
            &format!("127.0.0.1:{mp}"),
        ],
    );
    let mut t = Tt::new(&master.addr);
    assert!(
        eventually(20, || t
            .stat()
            .get("sync_replicas_connected")
            .is_some_and(|n| n == "1")),
        "the replica was never counted: {:?}",
        t.stat()
    );
    (master, replica)
}

/// Without `--sync-replicas` a reply goes out as soon as the master holds the write, and a
/// read of the replica right after it finds the key missing most of the time (the replica
/// acknowledges every 200 ms); with it, never.
#[test]
fn a_write_acknowledged_under_sync_replicas_is_on_the_replica_when_its_reply_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let (master, replica) = pair(dir.path(), "10000", "always", "reply");
    let (mut m, mut r) = (master.connect(), replica.connect());
    let n = 300;
    let mut took = Vec::with_capacity(n);
    for i in 0..n {
        let at = Instant::now();
        let value = format!("v{i}");
        assert_eq!(
            mc(
                &mut m,
                &format!("set k{i} 0 0 {}\r\n{value}\r\n", value.len())
            ),
            "STORED\r\n"
        );
        took.push(at.elapsed());
        assert_eq!(
            mc_get(&mut r, &format!("k{i}")).as_deref(),
            Some(value.as_str()),
            "write {i} was acknowledged before the replica held it"
        );
    }
    // Several writes of one batch (pipelined) wait together.
    let mut batch = String::new();
    for i in 0..50 {
        batch.push_str(&format!("set p{i} 0 0 1 noreply\r\nx\r\n"));
    }
    batch.push_str("set p50 0 0 1\r\ny\r\n");
    assert_eq!(mc(&mut m, &batch), "STORED\r\n");
    for i in 0..50 {
        assert_eq!(mc_get(&mut r, &format!("p{i}")).as_deref(), Some("x"));
    }
    let st = Tt::new(&master.addr).stat();
    assert_eq!(st.get("repl_sync_timeouts").map(String::as_str), Some("0"));
    let waits: u64 = st["repl_sync_waits"].parse().unwrap();
    assert!(waits >= n as u64, "{st:?}");
    took.sort();
    // The replica acknowledges as soon as it holds a write, not at its 200 ms round.
    assert!(
        took[n / 2] < Duration::from_millis(100),
        "{:?}",
        took[n / 2]
    );
    eprintln!(
        "acknowledged writes: median {:?}, p99 {:?}, max {:?}",
        took[n / 2],
        took[n * 99 / 100],
        took[n - 1]
    );
}

/// With the replica stopped, a write's reply waits for the timeout, then goes out (the write is
/// the master's), counted in `repl_sync_timeouts`; reads never wait.
#[test]
fn with_the_replica_stopped_a_write_is_answered_at_the_timeout_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (master, mut replica) = pair(dir.path(), "400", "none", "reply");
    let mut m = master.connect();
    replica.signal(libc::SIGKILL);
    let mut t = Tt::new(&master.addr);
    assert!(
        eventually(10, || t
            .stat()
            .get("sync_replicas_connected")
            .is_some_and(|n| n == "0")),
        "the replica's loss was never noticed"
    );
    let at = Instant::now();
    assert_eq!(mc(&mut m, "set lone 0 0 1\r\nz\r\n"), "STORED\r\n");
    let waited = at.elapsed();
    assert!(
        waited >= Duration::from_millis(380) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    let at = Instant::now();
    assert_eq!(mc_get(&mut m, "lone").as_deref(), Some("z"));
    assert!(at.elapsed() < Duration::from_millis(300), "a read waited");
    let st = t.stat();
    assert_eq!(
        st.get("repl_sync_timeouts").map(String::as_str),
        Some("1"),
        "{st:?}"
    );
    eprintln!("unacknowledged write answered after {waited:?}");
}

/// `--sync-replicas-on-timeout close`: with the replica stopped, the write's connection is
/// closed without its reply (it was never acknowledged); the master holds the write.
#[test]
fn on_timeout_close_drops_the_connection_instead_of_acknowledging() {
    let dir = tempfile::tempdir().unwrap();
    let (master, mut replica) = pair(dir.path(), "300", "none", "close");
    let mut m = master.connect();
    assert_eq!(mc(&mut m, "set before 0 0 1\r\nb\r\n"), "STORED\r\n");
    replica.signal(libc::SIGKILL);
    let mut t = Tt::new(&master.addr);
    assert!(eventually(10, || t
        .stat()
        .get("sync_replicas_connected")
        .is_some_and(|n| n == "0")));
    let at = Instant::now();
    m.write_all(b"set lone 0 0 1\r\nz\r\n").unwrap();
    let mut got = Vec::new();
    let n = std::io::Read::read_to_end(&mut m, &mut got);
    assert!(
        matches!(n, Ok(0)) || n.is_err(),
        "a reply came: {:?}",
        String::from_utf8_lossy(&got)
    );
    assert!(
        at.elapsed() >= Duration::from_millis(280),
        "{:?}",
        at.elapsed()
    );
    let mut m = master.connect();
    assert_eq!(mc_get(&mut m, "lone").as_deref(), Some("z"));
    let st = t.stat();
    assert_eq!(st.get("repl_sync_timeouts").map(String::as_str), Some("1"));
}

#[test]
fn sync_replicas_without_an_update_log_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["serve", "m.kh", "--port", "0", "--sync-replicas", "1"])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--sync-replicas 1 needs --ulog"), "{err}");
}
