//! A process writing to a `.kh` database is killed with SIGKILL, again and again; after each
//! kill the database must open, pass `check`, and hold every record whose write returned
//! (with `sync=always`), and with the default sync mode it must open consistent and healthy.
//!
//! The writer is this same test binary started again with `KURA_KILL9_CHILD` set: it runs the
//! ignored test `kill9_child_writer`, which writes records and prints `ack N` after each write
//! returns.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "KURA_KILL9_CHILD";

fn value_for(i: u64) -> Vec<u8> {
    format!("value-{i}-{}", "x".repeat((i % 97) as usize)).into_bytes()
}

/// Not a test on its own: the body of the child process (see the module documentation).
#[test]
#[ignore]
fn kill9_child_writer() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    // spec = "NAME|START"
    let (name, start) = spec.rsplit_once('|').expect("spec");
    let start: u64 = start.parse().expect("start");
    let db = kura_engine::open(name).expect("child open");
    let mut out = std::io::stdout();
    for i in start.. {
        db.put(format!("key{i:09}").as_bytes(), &value_for(i))
            .expect("put");
        use std::io::Write;
        writeln!(out, "ack {i}").expect("stdout");
        out.flush().expect("flush");
    }
}

/// Start a writer, let it run for `run`, kill it; returns the highest acknowledged index.
fn run_and_kill(name: &str, start: u64, run: Duration) -> Option<u64> {
    let exe = std::env::current_exe().expect("current exe");
    let mut child = Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            "kill9_child_writer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, format!("{name}|{start}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn writer");
    let stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut last = None;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(n) = line.strip_prefix("ack ") {
                last = n.trim().parse::<u64>().ok();
            }
        }
        last
    });
    let deadline = Instant::now() + run;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("kill -9"); // SIGKILL
    child.wait().expect("wait");
    reader.join().expect("reader")
}

fn verify(name: &str, upto: Option<u64>, from: u64) {
    let db = kura_engine::open(name).expect("reopen after SIGKILL");
    let rep = db.check().expect("check");
    assert!(rep.healthy(), "unhealthy after SIGKILL: {:?}", rep.problems);
    if let Some(last) = upto {
        for i in from..=last {
            let got = db
                .get(format!("key{i:09}").as_bytes())
                .expect("get")
                .unwrap_or_else(|| panic!("acknowledged record {i} lost (acked up to {last})"));
            assert_eq!(got.value, value_for(i), "record {i}");
        }
    }
    db.close().expect("close");
}

#[test]
fn sigkill_loses_no_acknowledged_write_with_sync_always() {
    let dir = tempfile::tempdir().expect("tempdir");
    let name = format!("{}#sync=always", dir.path().join("k.kh").display());
    let mut start = 0;
    for round in 0..8u64 {
        let acked = run_and_kill(&name, start, Duration::from_millis(150 + 40 * round));
        verify(&name, acked, 0);
        start = acked.map_or(start, |a| a + 1);
    }
    assert!(start > 0, "the writer never acknowledged a write");
}

#[test]
fn sigkill_with_default_sync_reopens_healthy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let name = dir.path().join("d.kh").display().to_string();
    let mut start = 0;
    let mut confirmed: Vec<u64> = Vec::new();
    for round in 0..6u64 {
        let acked = run_and_kill(&name, start, Duration::from_millis(150 + 50 * round));
        let db = kura_engine::open(&name).expect("reopen after SIGKILL");
        let rep = db.check().expect("check");
        assert!(rep.healthy(), "unhealthy after SIGKILL: {:?}", rep.problems);
        // Records confirmed after an earlier crash were made durable by that reopen's close.
        for &i in &confirmed {
            let got = db.get(format!("key{i:09}").as_bytes()).expect("get");
            assert_eq!(
                got.map(|r| r.value),
                Some(value_for(i)),
                "confirmed record {i} lost"
            );
        }
        // Of this round, whatever survived is intact (records handed to the OS survive a
        // killed process; only the last ~50 ms of a lane's write buffer may be lost).
        let end = acked.map_or(start, |a| a + 1);
        for i in start..end {
            if let Some(r) = db.get(format!("key{i:09}").as_bytes()).expect("get") {
                assert_eq!(r.value, value_for(i), "record {i} damaged");
                confirmed.push(i);
            }
        }
        db.close().expect("close");
        start = end;
    }
    assert!(!confirmed.is_empty(), "nothing survived any round");
}
