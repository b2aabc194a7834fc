//! Tests of the on-disk hash: operations, persistence, recovery after simulated crashes, injected
//! I/O faults, compaction. The model test against a `BTreeMap` is the conformance suite's
//! (`crates/engine/tests/conformance/`).

use super::shard::{read_spinning, write_spinning, EXCL_SPIN};
use super::*;
use crate::io::{CrashMode, Fault, SimVfs};
use crate::log::format::SEG_DATA;
use crate::store::Outcome;
use crate::{MemcachedOps, TokyoOps};
use std::collections::BTreeMap;
use std::path::PathBuf;

fn sim_open(fs: &SimVfs, params: &str) -> DiskHash {
    DiskHash::open_with(
        Path::new("/sim/db.kh"),
        &Params::parse(params).unwrap(),
        Arc::new(fs.clone()),
        false,
    )
    .unwrap()
}

fn dump(db: &dyn Store) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut c = db.cursor().unwrap();
    while let Some((k, r)) = c.next().unwrap() {
        assert!(
            out.insert(k, r.value).is_none(),
            "cursor returned a key twice"
        );
    }
    out
}

fn seg_lens(fs: &SimVfs) -> Vec<(PathBuf, u64)> {
    fs.paths()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "kd"))
        .map(|p| (p.clone(), fs.open_len(&p)))
        .collect()
}

fn counter(db: &DiskHash, name: &str) -> u64 {
    db.counters().into_iter().find(|c| c.0 == name).unwrap().1
}

/// Run `f` on a thread of its own and fail unless it returns within `limit`: a test of a
/// deadlock then fails instead of hanging. (A panic in `f` fails it too.)
fn finishes_within(limit: Duration, f: impl FnOnce() + Send + 'static) {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        f();
        done.send(()).unwrap();
    });
    finished
        .recv_timeout(limit)
        .expect("finished in time, without a failure (a deadlock never finishes)");
}

mod compaction;
mod concurrency;
mod crash;
mod ops;
