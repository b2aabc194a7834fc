//! A process writing to a `.kh`, `.kb` or `.kf` database is killed with SIGKILL, again and
//! again; after each kill the database must open, pass `check`, and hold every record whose
//! write returned (with `sync=always`), and with the default sync mode it must open consistent
//! and healthy. A `.kf` (fixed-length database) takes record ids as keys: the same writes go to
//! decimal ids there.
//!
//! The writer is this same test binary started again with `KURA_KILL9_CHILD` set: it runs the
//! ignored test `kill9_child_writer`, which writes records and prints `ack N` after each write
//! returns. With `KURA_KILL9_MT_CHILD` set it runs `kill9_child_writer_threads` instead: eight
//! threads putting, appending and deleting keys of their own, each printing `ack T I`.

use kura_engine::TokyoOps;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "KURA_KILL9_CHILD";

/// Whether `name` is a fixed-length database (keys are record ids).
fn is_kf(name: &str) -> bool {
    name.split('#').next().is_some_and(|p| p.ends_with(".kf"))
}

/// The key of record `i` in the database `name`: `key000000042`, or on a `.kf` the id 43.
fn key_for(name: &str, i: u64) -> Vec<u8> {
    if is_kf(name) {
        (i + 1).to_string().into_bytes()
    } else {
        format!("key{i:09}").into_bytes()
    }
}

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
        db.put(&key_for(name, i), &value_for(i)).expect("put");
        use std::io::Write;
        writeln!(out, "ack {i}").expect("stdout");
        out.flush().expect("flush");
    }
}

/// Start this test binary again running the ignored test `test` with `env` set, hand each
/// line it prints to `on_line` (from another thread, which owns `state`), SIGKILL it after
/// `run`, and return `state` once the child's output has ended.
fn run_child_and_kill<S: Send + 'static>(
    test: &str,
    env: (&str, String),
    run: Duration,
    mut state: S,
    mut on_line: impl FnMut(&mut S, &str) + Send + 'static,
) -> S {
    let exe = std::env::current_exe().expect("current exe");
    let mut child = Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            test,
            "--nocapture",
            "--test-threads=1",
        ])
        .env(env.0, env.1)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn writer");
    let stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            on_line(&mut state, &line);
        }
        state
    });
    let deadline = Instant::now() + run;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("kill -9"); // SIGKILL
    child.wait().expect("wait");
    reader.join().expect("reader")
}

/// Start a writer, let it run for `run`, kill it; returns the highest acknowledged index.
fn run_and_kill(name: &str, start: u64, run: Duration) -> Option<u64> {
    run_child_and_kill(
        "kill9_child_writer",
        (CHILD_ENV, format!("{name}|{start}")),
        run,
        None,
        |last, line| {
            if let Some(n) = line.strip_prefix("ack ") {
                *last = n.trim().parse::<u64>().ok();
            }
        },
    )
}

fn verify(name: &str, upto: Option<u64>, from: u64) {
    let db = kura_engine::open(name).expect("reopen after SIGKILL");
    let rep = db.check().expect("check");
    assert!(rep.healthy(), "unhealthy after SIGKILL: {:?}", rep.problems);
    if let Some(last) = upto {
        for i in from..=last {
            let got = db
                .get(&key_for(name, i))
                .expect("get")
                .unwrap_or_else(|| panic!("acknowledged record {i} lost (acked up to {last})"));
            assert_eq!(got.value, value_for(i), "record {i}");
        }
    }
    db.close().expect("close");
}

#[test]
fn sigkill_loses_no_acknowledged_write_with_sync_always() {
    no_loss_with_sync_always("k.kh");
}

#[test]
fn sigkill_loses_no_acknowledged_write_with_sync_always_kb() {
    no_loss_with_sync_always(KB);
}

#[test]
fn sigkill_loses_no_acknowledged_write_with_sync_always_kf() {
    no_loss_with_sync_always(KF);
}

/// A `.kb` with small leaves and checkpoints, so kills land in splits and checkpoints.
const KB: &str = "t.kb#leafsiz=512#ckptsiz=1m#segsiz=256k";

/// A `.kf` with room for 4M ids, small segments and checkpoints, so kills land in segment rolls
/// and checkpoints.
const KF: &str = "t.kf#limsiz=1g#ckptsiz=1m#segsiz=256k";

fn no_loss_with_sync_always(file: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let name = format!("{}#sync=always", dir.path().join(file).display());
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
    default_sync_reopens_healthy("d.kh");
}

#[test]
fn sigkill_with_default_sync_reopens_healthy_kb() {
    default_sync_reopens_healthy(KB);
}

#[test]
fn sigkill_with_default_sync_reopens_healthy_kf() {
    default_sync_reopens_healthy(KF);
}

fn default_sync_reopens_healthy(file: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let name = dir.path().join(file).display().to_string();
    let mut start = 0;
    let mut confirmed: Vec<u64> = Vec::new();
    for round in 0..6u64 {
        let acked = run_and_kill(&name, start, Duration::from_millis(150 + 50 * round));
        let db = kura_engine::open(&name).expect("reopen after SIGKILL");
        let rep = db.check().expect("check");
        assert!(rep.healthy(), "unhealthy after SIGKILL: {:?}", rep.problems);
        // Records confirmed after an earlier crash were made durable by that reopen's close.
        for &i in &confirmed {
            let got = db.get(&key_for(&name, i)).expect("get");
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
            if let Some(r) = db.get(&key_for(&name, i)).expect("get") {
                assert_eq!(r.value, value_for(i), "record {i} damaged");
                confirmed.push(i);
            }
        }
        db.close().expect("close");
        start = end;
    }
    assert!(!confirmed.is_empty(), "nothing survived any round");
}

// ---------------------------------------------------------------- several writer threads

const MT_CHILD_ENV: &str = "KURA_KILL9_MT_CHILD";
/// Writer threads in the child. Each writes keys of its own (no two threads share a key, so
/// each key's history is the order of one thread's writes).
const MT_THREADS: u64 = 8;

/// One write of thread `t`'s sequence in round `round`, number `i`: deterministic, so that
/// the parent can replay what the child did from the acknowledgements alone.
enum MtOp {
    Put(Vec<u8>, Vec<u8>),
    Cat(Vec<u8>, Vec<u8>),
    Out(Vec<u8>),
}

fn mt_op(kf: bool, round: u64, t: u64, i: u64) -> MtOp {
    // SplitMix64 of (round, t, i).
    let mut z = (round << 40 ^ t << 32 ^ i).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    // Half the writes go to a new key (so the index keeps growing), half to a key this thread
    // wrote earlier in the round.
    let n = if (z >> 8).is_multiple_of(2) {
        i
    } else {
        (z >> 32) % (i + 1)
    };
    let key = if kf {
        // A million ids of its own for each thread and round.
        ((round * MT_THREADS + t) * 1_000_000 + n + 1)
            .to_string()
            .into_bytes()
    } else {
        format!("t{t}-r{round}-{n}").into_bytes()
    };
    match (z >> 20) % 10 {
        0..=6 => MtOp::Put(
            key,
            format!("r{round}i{i}-{}", "v".repeat((z >> 40) as usize % 60)).into_bytes(),
        ),
        7..=8 => MtOp::Cat(key, format!("+{i}").into_bytes()),
        _ => MtOp::Out(key),
    }
}

fn mt_key(op: &MtOp) -> &[u8] {
    match op {
        MtOp::Put(k, _) | MtOp::Cat(k, _) | MtOp::Out(k) => k,
    }
}

/// The value `op` leaves under its key, which held `before`.
fn mt_after(before: Option<&Vec<u8>>, op: &MtOp) -> Option<Vec<u8>> {
    match op {
        MtOp::Put(_, v) => Some(v.clone()),
        MtOp::Cat(_, v) => Some([before.map_or(&[][..], |b| b), v].concat()),
        MtOp::Out(_) => None,
    }
}

/// Set `key` to `value` (`None`: absent) in a model of the database.
fn mt_set(model: &mut BTreeMap<Vec<u8>, Vec<u8>>, key: &[u8], value: Option<Vec<u8>>) {
    match value {
        Some(v) => model.insert(key.to_vec(), v),
        None => model.remove(key),
    };
}

/// Not a test on its own: the child of `sigkill_with_writer_threads_loses_no_acknowledged_write`.
#[test]
#[ignore]
fn kill9_child_writer_threads() {
    let Ok(spec) = std::env::var(MT_CHILD_ENV) else {
        return;
    };
    let (name, round) = spec.rsplit_once('|').expect("spec");
    let round: u64 = round.parse().expect("round");
    let db = kura_engine::open(name).expect("child open");
    let out = std::sync::Mutex::new(std::io::stdout());
    std::thread::scope(|s| {
        for t in 0..MT_THREADS {
            let (db, out) = (&db, &out);
            s.spawn(move || {
                for i in 0.. {
                    match mt_op(is_kf(name), round, t, i) {
                        MtOp::Put(k, v) => drop(db.put(&k, &v).expect("put")),
                        MtOp::Cat(k, v) => drop(db.putcat(&k, &v).expect("putcat")),
                        MtOp::Out(k) => drop(db.out(&k).expect("out")),
                    }
                    use std::io::Write;
                    let mut o = out.lock().expect("stdout");
                    writeln!(o, "ack {t} {i}").expect("stdout");
                    o.flush().expect("flush");
                }
            });
        }
    });
}

/// Start the threaded writer for `round`, kill it after `run`; returns, for each thread, how
/// many of its writes were acknowledged.
fn run_threads_and_kill(name: &str, round: u64, run: Duration) -> Vec<u64> {
    run_child_and_kill(
        "kill9_child_writer_threads",
        (MT_CHILD_ENV, format!("{name}|{round}")),
        run,
        vec![0u64; MT_THREADS as usize],
        |acked, line| {
            let mut f = line.split_whitespace();
            if f.next() != Some("ack") {
                return;
            }
            let (Some(Ok(t)), Some(Ok(i))) = (
                f.next().map(str::parse::<usize>),
                f.next().map(str::parse::<u64>),
            ) else {
                return;
            };
            // A thread's acknowledgements come in order: i + 1 of them so far.
            if let Some(a) = acked.get_mut(t) {
                *a = i + 1;
            }
        },
    )
}

/// Eight threads put, append and delete keys of their own in a `sync=always` database until
/// the process is killed, round after round. After each kill the database must pass `check`
/// and hold exactly what the acknowledged writes left, except that each thread's one write in
/// flight may or may not have happened. The index grows from empty meanwhile, so writers also
/// meet shards that are growing (slow mode, the move in batches).
#[test]
fn sigkill_with_writer_threads_loses_no_acknowledged_write() {
    threads_lose_nothing("mt.kh");
}

#[test]
fn sigkill_with_writer_threads_loses_no_acknowledged_write_kb() {
    threads_lose_nothing(KB);
}

/// The same on a fixed-length database: its writers share one writer lock and one log, so
/// group commit and the id array's growth are what is killed in the middle.
#[test]
fn sigkill_with_writer_threads_loses_no_acknowledged_write_kf() {
    threads_lose_nothing("mt.kf#width=4096#limsiz=1t#ckptsiz=1m#segsiz=256k");
}

fn threads_lose_nothing(file: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let name = format!("{}#sync=always", dir.path().join(file).display());
    let kf = is_kf(&name);
    let mut model = BTreeMap::<Vec<u8>, Vec<u8>>::new();
    let mut touched = BTreeSet::<Vec<u8>>::new();
    let mut total = 0;
    for round in 0..8u64 {
        let acked = run_threads_and_kill(&name, round, Duration::from_millis(300 + 60 * round));
        let db = kura_engine::open(&name).expect("reopen after SIGKILL");
        let rep = db.check().expect("check");
        assert!(rep.healthy(), "unhealthy after SIGKILL: {:?}", rep.problems);
        // The key of each thread's write in flight: the model before or after that write.
        let mut either = BTreeMap::new();
        for (t, &n) in acked.iter().enumerate() {
            for i in 0..n {
                let op = mt_op(kf, round, t as u64, i);
                let key = mt_key(&op);
                let after = mt_after(model.get(key), &op);
                mt_set(&mut model, key, after);
                touched.insert(key.to_vec());
            }
            total += n;
            let op = mt_op(kf, round, t as u64, n);
            let key = mt_key(&op).to_vec();
            let before = model.get(&key).cloned();
            let after = mt_after(before.as_ref(), &op);
            touched.insert(key.clone());
            either.insert(key, (before, after));
        }
        for key in &touched {
            let got = db.get(key).expect("get").map(|r| r.value);
            let shown = String::from_utf8_lossy(key);
            match either.get(key) {
                Some((before, after)) => {
                    assert!(
                        got == *before || got == *after,
                        "round {round}: {shown} is {got:?}, neither {before:?} nor {after:?}"
                    );
                    mt_set(&mut model, key, got);
                }
                None => assert_eq!(
                    got.as_ref(),
                    model.get(key),
                    "round {round}: acknowledged state of {shown} lost"
                ),
            }
        }
        assert_eq!(db.count(), model.len() as u64, "round {round}");
        db.close().expect("close");
    }
    eprintln!(
        "{total} acknowledged writes of {} keys, {} records at the end",
        touched.len(),
        model.len()
    );
    assert!(total > 0, "the writers never acknowledged a write");
}
