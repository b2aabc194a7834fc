//! What the engine's integration tests share (`mod common;`).

use kura_engine::io::{CrashMode, Fault, SimVfs};
use kura_engine::Error;

/// What an open after a crash gave: the database, or `None` when there is none (the crash
/// came before its creation was durable); any other error fails the test.
pub fn reopened<T>(r: kura_engine::Result<T>, what: &str) -> Option<T> {
    match r {
        Ok(db) => Some(db),
        Err(Error::NotFound(_)) => None,
        Err(e) => panic!("{what}: reopen: {e}"),
    }
}

/// The crash model test: a power loss at every write of a run. `write` runs the writes on a
/// database on the simulated file system given it until one fails and says how many were
/// acknowledged (leaving the database as a killed process leaves it); `read` reopens what a
/// crash left and gives its state (`None`: no database), checking whatever else must hold;
/// `states[k]` is the state after the first `k` writes.
///
/// First the whole run without a crash (every write acknowledged, the last state, more than
/// `min_writes` writes of the file system); then, for each write of the file system in turn,
/// the run again with that write failing, and what a crash then leaves (unsynced writes
/// dropped, torn at a random byte, or each kept or lost on its own) reopened: its state is
/// the state after a prefix of the writes that holds every acknowledged one.
pub fn power_loss_at_every_write<S: PartialEq>(
    label: &str,
    states: &[S],
    min_writes: u64,
    write: impl Fn(&SimVfs) -> usize,
    read: impl Fn(&SimVfs, &str) -> Option<S>,
) {
    let n = states.len() - 1;
    let steps = {
        let fs = SimVfs::new();
        let before = fs.op_count();
        assert_eq!(write(&fs), n, "{label}: without a crash, every write");
        let all = read(&fs, "no crash").expect("without a crash: the database");
        assert!(all == states[n], "{label}: without a crash, the last state");
        fs.op_count() - before
    };
    assert!(steps > min_writes, "{label}: {steps} writes");
    for step in 0..steps {
        let fs = SimVfs::new();
        fs.fail_after(step, Fault::Eio);
        let acked = write(&fs);
        let mode = match step % 3 {
            0 => CrashMode::Torn { seed: step },
            1 => CrashMode::DropUnsynced,
            _ => CrashMode::Scattered { seed: step },
        };
        let fs = SimVfs::from_image(&fs.crash_image(mode));
        let what = format!("{label}, power lost at write {step} of {steps} ({mode:?})");
        let Some(got) = read(&fs, &what) else {
            assert_eq!(acked, 0, "{what}: the database is gone");
            continue;
        };
        // The last prefix with this state (a write may change nothing).
        let Some(k) = states.iter().rposition(|s| *s == got) else {
            panic!("{what}: the state is no prefix of the writes ({acked} acknowledged)");
        };
        assert!(
            k >= acked,
            "{what}: {acked} writes acknowledged, only {k} recovered"
        );
    }
}
