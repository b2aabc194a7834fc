//! The conformance suite: every database kind against one model.
//!
//! Random sequences of every `Store` operation run against a `BTreeMap` model that follows
//! the trait's documentation (crates/engine/src/store/), on every entry of [`KINDS`]: the
//! memory hash and tree, and the on-disk hash on real files and on the simulated file system,
//! closed and reopened, or crashed under `sync=always` (where every acknowledged write must
//! survive). The on-disk hash runs with tiny tuning (64 KiB segments, 4 KiB write buffers,
//! 1 MiB checkpoints, three lanes) so that segment rolls, checkpoints, compaction and the
//! ordering of lanes happen in small databases; some rounds write from several threads at
//! once, each on keys of its own.
//!
//! What the model holds a kind to, per operation:
//! - reads (`get`, `view`, `view_shared`, `vsiz`, `get_multi`, an `accept` that keeps) show
//!   exactly the live record, value and metadata; a record written with an expiry already past
//!   reads as absent (expiry times are either far in the future or long past, so no test
//!   depends on the clock);
//! - every write returns the metadata it stored: the flags and expiry given (or kept), a version
//!   that is never 0 and differs from the one it replaced; a touch keeps the version;
//! - conditional writes (putkeep, replace, cas, out_if, incr with a cas) succeed or fail by the
//!   model's record, and a failure changes nothing; numeric operations fail with `NotNumeric`
//!   on values not of their form, and change nothing then;
//! - a batch applies its operations in order (a later one on the same key wins), or none of
//!   them when one is refused;
//! - a cursor shows every live record exactly once, in key order on ordered kinds, and an
//!   unmodified record exactly once even while others are written; `fwmkeys` and `range` agree;
//! - `count` lies between the live records and those plus the ones written already expired
//!   (which a kind may count until it reclaims them); `check` is healthy; a copy holds the live
//!   records; a restart (or a crash under `sync=always`) loses nothing; `vanish` empties.
//!
//! Keys are the kind's: byte strings (`k12`, binary ones, a thread's prefix), or for kinds
//! whose keys are record ids (the fixed-length database) decimal ids, ordered as numbers, each
//! thread on a range of its own, and `fwmkeys` taking an interval (`[3,10]`, `(min,7]`). The
//! model orders keys as `Bytes` does: canonical decimal numbers by value, anything else by
//! its bytes (no byte-keyed round makes a key of digits only).
//!
//! A table (`.kt`) runs the same rounds, with and without an index of each type: through the
//! plain `Store` interface its value is its columns' wire form (`name\0value\0…`), so its
//! keys draw values column by column (`gen_columns`) and the model keeps what a table keeps
//! and refuses what it refuses (`Model::stored`: a value that is not a wire form, an expiry
//! time, a touch; putcat merges columns). Its `check` also compares every index with the
//! records. A table has no keyspace kind: its keyspaces hold its indexes.
//!
//! A new kind joins by one entry in [`KINDS`]. Two drivers: `fixed_seeds` runs the same seeds on
//! every kind (a failure prints its seed, the last operations, and the command that reruns it:
//! `KURA_CONFORMANCE_SEED=N` runs one seed, `KURA_CONFORMANCE_KIND=LABEL` one kind), and
//! `proptest_sequences` lets proptest draw sequences and shrink a failing one.

use kura_engine::fixed::FixedDb;
use kura_engine::hash::DiskHash;
use kura_engine::io::{CrashMode, SimVfs, Vfs};
use kura_engine::store::{now_secs, MAX_KEY_LEN};
use kura_engine::table::{IndexOp, IndexType, TableDb};
use kura_engine::tree::DiskTree;
use kura_engine::MemcachedOps;
use kura_engine::TokyoOps;
use kura_engine::{
    BatchOp, Counted, Decision, Error, Meta, OpenMode, Outcome, Params, Record, Store,
};
use proptest::prelude::{any, prop, proptest, ProptestConfig, TestCaseError};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

mod apply;
mod cursor;
mod gen;
mod kinds;
mod model;
mod ops;
mod regressions;
mod runner;

use apply::*;
use cursor::*;
use gen::*;
use kinds::*;
use model::*;
use ops::*;
use runner::*;

// ---------------------------------------------------------------------------------- the drivers

/// Rounds of `fixed_seeds` (seeds 0 to ROUNDS - 1) and operations in each.
const ROUNDS: u64 = 16;
const OPS: usize = 300;

/// The keys and operations of the round `seed`: the same on every kind (but for the form of
/// the keys).
fn round(seed: u64, kind: &KindUnderTest) -> (Keys, Vec<Op>) {
    let mut rng = Rng::new(seed);
    let keys = kind.keys(rng.pick(&[8, 24, 24, 64, 2000]));
    let ops = (0..OPS).map(|_| gen_op(&mut rng, &keys, true)).collect();
    (keys, ops)
}

/// Every kind runs the same rounds; a kind stops at its first failing round, and every
/// failing kind is reported.
#[test]
fn fixed_seeds() {
    let seeds: Vec<u64> = match std::env::var("KURA_CONFORMANCE_SEED") {
        Ok(s) => vec![s.parse().expect("KURA_CONFORMANCE_SEED is a number")],
        Err(_) => (0..std::env::var("KURA_CONFORMANCE_ROUNDS").map_or(ROUNDS, |n| {
            n.parse().expect("KURA_CONFORMANCE_ROUNDS is a number")
        }))
            .collect(),
    };
    let mut failed = Vec::new();
    for kind in kinds() {
        let t = std::time::Instant::now();
        let failure = seeds.iter().find_map(|&seed| {
            let (keys, ops) = round(seed, kind);
            run(kind, &keys, &ops).err().map(|e| (seed, e))
        });
        match failure {
            None => eprintln!(
                "kind {:?}: {} rounds in {:.1?}",
                kind.label,
                seeds.len(),
                t.elapsed()
            ),
            Some((seed, e)) => failed.push(format!(
                "kind {:?}, seed {seed}: {e}rerun: KURA_CONFORMANCE_SEED={seed} KURA_CONFORMANCE_KIND='{}' \
                 cargo test -p kura-engine --test conformance fixed_seeds\n",
                kind.label, kind.label
            )),
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Each number seeds one operation: proptest shrinks a failing sequence by dropping
    /// operations and simplifying the ones left.
    #[test]
    fn proptest_sequences(keyspace in prop::sample::select(vec![6usize, 24]), seeds in prop::collection::vec(any::<u64>(), 1..120)) {
        for kind in kinds() {
            let keys = kind.keys(keyspace);
            let ops: Vec<Op> = seeds.iter().map(|&s| gen_op(&mut Rng::new(s), &keys, true)).collect();
            if let Err(e) = run(kind, &keys, &ops) {
                return Err(TestCaseError::fail(format!("kind {:?}: {e}", kind.label)));
            }
        }
    }
}

// ---------------------------------------------------------------------------------- regressions
