//! The server's log through the real binary: each line `TIME LEVEL kura[PID]: message
//! key=value …` with an RFC 3339 UTC time, `--log-level` leaving out what is below it,
//! `--log-format json` (each line parsed by a JSON parser), `--log syslog:SOCKET` (a datagram a
//! line, facility daemon), the file reopened on SIGHUP, and what start-up says.

mod common;
use common::*;
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::Duration;

/// `2026-11-28T14:05:06.123Z`: an RFC 3339 UTC time with milliseconds.
fn is_rfc3339_ms(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() == 24
        && b.iter().enumerate().all(|(i, &c)| match i {
            4 | 7 => c == b'-',
            10 => c == b'T',
            13 | 16 => c == b':',
            19 => c == b'.',
            23 => c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

#[test]
fn text_lines_have_a_utc_time_a_level_the_pid_and_fields() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("k.log");
    let (k, _) = start_logged(
        dir.path(),
        &["d.kh", "--port", "0", "--threads", "1", "--log", "k.log"],
        &log,
    );
    let pid = k.0.id();
    k.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    for l in text.lines() {
        let (ts, rest) = l.split_once(' ').unwrap();
        assert!(is_rfc3339_ms(ts), "{l}");
        let (level, rest) = rest.split_once(' ').unwrap();
        assert!(["ERROR", "WARN", "INFO", "DEBUG"].contains(&level), "{l}");
        assert!(rest.starts_with(&format!("kura[{pid}]: ")), "{l}");
    }
    // Start-up says what was opened, what recovery did and how long it took.
    let opened = text
        .lines()
        .find(|l| l.contains("INFO kura[") && l.contains(": opened the database "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(opened.contains(" path=d.kh "), "{opened}");
    assert!(opened.contains(" kind=\"on-disk hash\" "), "{opened}");
    assert!(opened.contains(" records=0 "), "{opened}");
    assert!(opened.contains(" took_ms="), "{opened}");
    assert!(opened.contains(" recovery_truncated_bytes=0"), "{opened}");
    assert!(text.contains("INFO kura[") && text.contains("]: stopped; database synced"));
}

#[test]
fn the_log_level_leaves_out_lines_below_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("k.log");
    // The "listening on" line is info: with warn it is not written; wait for the port.
    let port = free_port().to_string();
    let child = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["serve", "*", "--port", &port, "--threads", "1"])
        .args([
            "--max-connections",
            "1",
            "--log",
            "k.log",
            "--log-level",
            "warn",
        ])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let k = Kura(child);
    let addr = format!("127.0.0.1:{port}");
    let mut first = None;
    assert!(eventually(20, || {
        first = std::net::TcpStream::connect(&addr).ok();
        first.is_some()
    }));
    let mut first = first.unwrap();
    first
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert!(mc(&mut first, "version\r\n").starts_with("VERSION"));
    // Refused at --max-connections: a warning.
    let mut second = std::net::TcpStream::connect(&addr).unwrap();
    let mut got = String::new();
    std::io::Read::read_to_string(&mut second, &mut got).unwrap();
    assert!(got.starts_with("SERVER_ERROR"));
    k.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains(" INFO "), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains(" WARN ") && l.contains("refused a connection")),
        "{text}"
    );
}

#[test]
fn json_lines_parse_as_json_objects() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("k.log");
    let (k, _) = start_logged(
        dir.path(),
        &[
            "d.kh",
            "--port",
            "0",
            "--threads",
            "1",
            "--log",
            "k.log",
            "--log-format",
            "json",
        ],
        &log,
    );
    k.stop();
    // Python's json module parses each line and checks its members.
    let check = r#"
import json, re, sys
n = 0
for line in open(sys.argv[1]):
    o = json.loads(line)
    assert set(o) == {"ts", "level", "pid", "msg", "fields"}, o
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", o["ts"]), o
    assert o["level"] in ("error", "warn", "info", "debug"), o
    assert isinstance(o["fields"], dict), o
    if o["msg"] == "opened the database":
        assert o["fields"]["path"] == "d.kh" and o["fields"]["records"] == "0", o
        n += 1
    if o["msg"].startswith("listening on "):
        n += 1
assert n == 2, n
"#;
    let out = Command::new("python3")
        .args(["-c", check, log.to_str().unwrap()])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(&log).unwrap()
    );
}

#[test]
fn syslog_gets_a_datagram_a_line_with_the_daemon_facility() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("log.sock");
    let rx = UnixDatagram::bind(&sock).unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let dest = format!("syslog:{}", sock.display());
    let child = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args([
            "serve",
            "*",
            "--port",
            "0",
            "--threads",
            "1",
            "--log",
            &dest,
        ])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let k = Kura(child);
    let pid = k.0.id();
    let mut buf = [0u8; 4096];
    let mut got = Vec::new();
    while !got.iter().any(|l: &String| l.contains("listening on")) {
        let n = rx.recv(&mut buf).expect("a syslog datagram");
        got.push(String::from_utf8_lossy(&buf[..n]).to_string());
    }
    k.stop();
    let listening = got.iter().find(|l| l.contains("listening on")).unwrap();
    // <30>: facility daemon (3) × 8 + severity info (6).
    assert!(listening.starts_with("<30>"), "{listening}");
    assert!(
        listening.contains(&format!(" kura[{pid}]: listening on 127.0.0.1:")),
        "{listening}"
    );
    // A missing socket is a clear error at start, exit 2.
    let out = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args([
            "serve",
            "*",
            "--port",
            "0",
            "--log",
            "syslog:/nonexistent/sock",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot open the log: /nonexistent/sock"),
        "{err}"
    );
}

#[test]
fn sighup_reopens_the_log_file_moved_away() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("k.log");
    let (mut k, _) = start_logged(
        dir.path(),
        &["*", "--port", "0", "--threads", "1", "--log", "k.log"],
        &log,
    );
    std::fs::rename(&log, dir.path().join("k.log.1")).unwrap();
    k.signal(libc::SIGHUP);
    assert!(
        eventually(20, || std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("INFO kura[")),
        "the log was not reopened"
    );
    k.stop();
    let new = std::fs::read_to_string(&log).unwrap();
    assert!(new.contains("]: log reopened"), "{new}");
    assert!(new.contains("]: stopped;"), "{new}");
    let old = std::fs::read_to_string(dir.path().join("k.log.1")).unwrap();
    assert!(
        old.contains("listening on") && !old.contains("stopped;"),
        "{old}"
    );
}
