//! A process writing batches across three keyspaces of a `.kb` through `Logged` (the update
//! log as the commit point, `sync=always`; the `.kb` opened with `sync=none`, as `kura serve
//! --ulog` opens it) is killed with SIGKILL, again and again. After each kill the database is
//! opened again (the tree's recovery, then the redo from the update log) and: every slot holds
//! the same batch in all three keyspaces, and the last acknowledged batch is there (or a later
//! one of its slot).
//!
//! The writer is this test binary started again with `KURA_ULKS_CHILD` set: it runs the
//! ignored test `ulks_child_writer`, which prints `ack N` after each batch returns.

use kura_engine::store::{BatchOp, Store};
use kura_engine::ulog::logged::{self, Logged};
use kura_engine::ulog::{Config, Ulog};
use kura_engine::SyncMode;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "KURA_ULKS_CHILD";
const SLOTS: u64 = 40;
const SPACES: [&str; 3] = ["", "idx", "meta"];

fn open(dir: &Path) -> Arc<Logged> {
    let (name, _) = logged::database_name(&dir.join("d.kb").display().to_string()).unwrap();
    let inner = kura_engine::open(&name).unwrap();
    let mut cfg = Config::new(dir.join("ulog"), 5);
    cfg.sync = SyncMode::Always;
    let db = Logged::new(inner, Ulog::open(cfg).unwrap()).unwrap();
    db.keyspace("idx", "cmp=decimal").unwrap();
    db.keyspace("meta", "").unwrap();
    db
}

fn key(space: &str, slot: u64) -> Vec<u8> {
    match space {
        "" => format!("row{slot:03}"),
        "idx" => slot.to_string(),
        _ => format!("m{slot}"),
    }
    .into_bytes()
}

fn batch(n: u64) -> Vec<(&'static str, BatchOp)> {
    let slot = n % SLOTS;
    SPACES
        .iter()
        .map(|&sp| {
            let mut value = n.to_string().into_bytes();
            value.resize(20 + (n % 11) as usize * 23, b'.');
            (
                sp,
                BatchOp::Put {
                    key: key(sp, slot),
                    value,
                    flags: 0,
                    expires: 0,
                },
            )
        })
        .collect()
}

fn number(v: &[u8]) -> u64 {
    let end = v.iter().position(|&b| b == b'.').unwrap_or(v.len());
    std::str::from_utf8(&v[..end]).unwrap().parse().unwrap()
}

/// Not a test on its own: the body of the child process (see the module documentation).
#[test]
#[ignore]
fn ulks_child_writer() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (dir, start) = spec.rsplit_once('|').expect("spec");
    let start: u64 = start.parse().expect("start");
    let db = open(Path::new(dir));
    let mut out = std::io::stdout();
    for n in start.. {
        db.write_across(&batch(n)).expect("write_across");
        use std::io::Write;
        writeln!(out, "ack {n}").expect("stdout");
        out.flush().expect("flush");
    }
}

/// Run the writer from batch `start` for `run`, SIGKILL it; the last batch acknowledged.
fn run_and_kill(dir: &Path, start: u64, run: Duration) -> Option<u64> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "ulks_child_writer", "--nocapture"])
        .env(CHILD_ENV, format!("{}|{start}", dir.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
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
    let end = Instant::now() + run;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    reader.join().unwrap()
}

#[test]
fn batches_across_keyspaces_survive_sigkill_with_redo() {
    let dir = tempfile::tempdir().unwrap();
    let mut redone = 0;
    for round in 0..4u64 {
        // Batch numbers of each round above every earlier round's.
        let start = round * 10_000_000 + 1;
        // An open after a kill takes a few seconds of a debug build on a loaded machine.
        let acked = run_and_kill(dir.path(), start, Duration::from_millis(4000 + round * 300));
        let last = acked.unwrap_or_else(|| panic!("round {round}: nothing acknowledged"));
        let db = open(dir.path());
        redone += db.redone;
        let stores: Vec<Arc<dyn Store>> = SPACES
            .iter()
            .map(|sp| match *sp {
                "" => db.clone() as Arc<dyn Store>,
                sp => db.keyspace(sp, "").unwrap(),
            })
            .collect();
        for slot in 0..SLOTS {
            let got: Vec<Option<u64>> = SPACES
                .iter()
                .zip(&stores)
                .map(|(sp, s)| s.get(&key(sp, slot)).unwrap().map(|r| number(&r.value)))
                .collect();
            assert!(
                got.iter().all(|g| g == &got[0]),
                "round {round}: slot {slot} differs between keyspaces: {got:?}"
            );
        }
        let slot = last % SLOTS;
        let have = db.get(&key("", slot)).unwrap().map(|r| number(&r.value));
        assert!(
            have.is_some_and(|h| h >= last && h % SLOTS == slot),
            "round {round}: acknowledged batch {last} lost (slot {slot} holds {have:?})"
        );
        assert!(db.check().unwrap().healthy(), "round {round}: check");
        db.close().unwrap();
    }
    eprintln!("{redone} records redone over 4 kills");
}
