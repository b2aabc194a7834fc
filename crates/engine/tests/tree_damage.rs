//! Damage to the files of a B+ tree (`.kb`): seeded trials write a workload of puts, removes
//! and duplicates (small leaves and segments, so that images move and checkpoints run), close
//! or crash, then flip bytes of the checkpoint (`tree.ki`) or of a node segment, or cut one
//! short, and hold the engine to what the damage allows:
//!
//! - nothing panics;
//! - an open either refuses with `Corrupt`, changing no byte, or serves each record as it was
//!   written or fails its read with `Corrupt`, never a wrong or missing value; `check` reports
//!   damage whenever a read failed;
//! - `repair` yields a database that passes `check`, holds no key the workload removed and no
//!   value it did not write, keeps every record the damaged open could still read, and, when
//!   only the checkpoint was damaged, holds exactly what was written (rebuilt from the leaf
//!   images and the log).

use kura_engine::{Error, Store};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

type Model = BTreeMap<Vec<u8>, VecDeque<Vec<u8>>>;

const PARAMS: &str = "#leafsiz=512#segsiz=64k";

/// Write the workload of `seed` into `path`; close it, or (`crash`) stop as a killed process
/// would, every write synced.
fn workload(path: &Path, seed: u64, crash: bool) -> Model {
    let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let sync = if crash { "#sync=always" } else { "#sync=none" };
    let name = format!("{}{PARAMS}{sync}", path.display());
    let db = kura_engine::tree::DiskTree::open(Path::new(&path), &params(&name)).expect("open");
    let mut model = Model::new();
    let ops = if crash { 1500 } else { 5000 };
    for step in 0..ops {
        if step % 1000 == 999 {
            db.checkpoint().unwrap();
        }
        let key = format!("key{:04}", r.below(900)).into_bytes();
        let value = format!("value {step} {}", "x".repeat(r.below(40) as usize)).into_bytes();
        match r.below(10) {
            0..=5 => {
                db.put(&key, &value).unwrap();
                let vs = model.entry(key).or_default();
                match vs.front_mut() {
                    Some(v) => *v = value,
                    None => vs.push_back(value),
                }
            }
            6 => {
                db.put_dup(&key, &value, false).unwrap();
                model.entry(key).or_default().push_back(value);
            }
            _ => {
                db.remove_all(&key).unwrap();
                model.remove(&key);
            }
        }
    }
    if crash {
        db.abandon();
    } else {
        db.close().unwrap();
    }
    model
}

fn params(name: &str) -> kura_engine::Params {
    let (_, p) = name.split_once('#').unwrap_or((name, ""));
    kura_engine::Params::parse(p).expect("params")
}

/// Every file under `dir`, with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Target {
    Checkpoint,
    NodeSegment,
}

/// Damage one file of the database; a description of what was done.
fn damage(dir: &Path, r: &mut Rng, target: Target) -> String {
    let file = match target {
        Target::Checkpoint => dir.join("tree.ki"),
        Target::NodeSegment => {
            let mut segs: Vec<PathBuf> = std::fs::read_dir(dir.join("nodes"))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| std::fs::metadata(p).map(|m| m.len() > 64).unwrap_or(false))
                .collect();
            segs.sort();
            segs[r.below(segs.len() as u64) as usize].clone()
        }
    };
    let mut bytes = std::fs::read(&file).unwrap();
    let what = if r.below(5) == 0 && bytes.len() > 64 {
        let cut = 32 + r.below(bytes.len() as u64 - 32) as usize;
        bytes.truncate(cut);
        format!("{} cut to {cut}", file.display())
    } else {
        let n = 1 + r.below(16);
        let mut at = Vec::new();
        for _ in 0..n {
            let p = r.below(bytes.len() as u64) as usize;
            bytes[p] ^= 1 + r.below(255) as u8;
            at.push(p);
        }
        format!("{} flipped at {at:?}", file.display())
    };
    std::fs::write(&file, bytes).unwrap();
    what
}

fn trial(seed: u64, crash: bool, target: Target) {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t.kb");
    let model = workload(&path, seed, crash);
    let mut r = Rng(seed ^ 0x5851_f42d_4c95_7f2d);
    let what = damage(&path, &mut r, target);
    let ctx = format!("seed {seed} crash {crash}: {what}");
    let before = snapshot(&path);
    let name = path.display().to_string();
    let mut readable: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    match kura_engine::open(&name) {
        Err(Error::Corrupt(_)) => {
            assert!(
                snapshot(&path) == before,
                "{ctx}: a refused open changed the files"
            );
        }
        Err(e) => panic!("{ctx}: open failed with {e}, not Corrupt"),
        Ok(db) => {
            let mut failed = 0;
            for (k, vs) in &model {
                match db.get(k) {
                    Ok(Some(rec)) => {
                        assert_eq!(Some(&rec.value), vs.front(), "{ctx}: wrong value");
                        readable.insert(k.clone(), rec.value);
                    }
                    Ok(None) => panic!("{ctx}: {} missing", String::from_utf8_lossy(k)),
                    Err(Error::Corrupt(_)) => failed += 1,
                    Err(e) => panic!("{ctx}: get failed with {e}"),
                }
            }
            for i in 0..900 {
                let k = format!("key{i:04}").into_bytes();
                if !model.contains_key(&k) {
                    match db.get(&k) {
                        Ok(None) | Err(Error::Corrupt(_)) => {}
                        Ok(Some(_)) => panic!("{ctx}: removed key {i} is back"),
                        Err(e) => panic!("{ctx}: get failed with {e}"),
                    }
                }
            }
            if failed > 0 {
                let rep = db.check().expect("check");
                assert!(
                    !rep.healthy(),
                    "{ctx}: {failed} reads failed, check is healthy"
                );
            }
            let _ = db.close();
        }
    }
    let fixed = tmp.path().join("fixed.kb");
    kura_engine::repair(&name, &fixed.display().to_string())
        .unwrap_or_else(|e| panic!("{ctx}: repair failed: {e}"));
    let db = kura_engine::open(&fixed.display().to_string()).expect("open the repaired copy");
    let rep = db.check().expect("check");
    assert!(rep.healthy(), "{ctx}: repaired copy: {:?}", rep.problems);
    let mut got = Model::new();
    let mut cur = db.cursor().unwrap();
    if cur.first().unwrap() {
        while let Some((k, rec)) = cur.get().unwrap() {
            got.entry(k).or_default().push_back(rec.value);
            if !cur.step().unwrap() {
                break;
            }
        }
    }
    drop(cur);
    for (k, vs) in &got {
        let shown = String::from_utf8_lossy(k);
        let want = model
            .get(k)
            .unwrap_or_else(|| panic!("{ctx}: repair brought back removed {shown}"));
        for v in vs {
            assert!(want.contains(v), "{ctx}: repair made up a value of {shown}");
        }
    }
    for (k, v) in &readable {
        assert_eq!(
            got.get(k).and_then(|vs| vs.front()),
            Some(v),
            "{ctx}: repair lost {}, which the damaged database still served",
            String::from_utf8_lossy(k)
        );
    }
    if target == Target::Checkpoint {
        let missing: Vec<_> = model.keys().filter(|k| !got.contains_key(*k)).collect();
        let differ: Vec<_> = model
            .iter()
            .filter(|(k, v)| got.get(*k).is_some_and(|g| g != *v))
            .map(|(k, _)| k)
            .collect();
        if let Some(k) = differ.first() {
            eprintln!("want {:?}\ngot  {:?}", model[*k], got[*k]);
        }
        assert!(
            got == model,
            "{ctx}: the images and the log hold everything; missing {} ({:?}), differing {} \
             ({:?})",
            missing.len(),
            missing
                .iter()
                .take(3)
                .map(|k| String::from_utf8_lossy(k))
                .collect::<Vec<_>>(),
            differ.len(),
            differ
                .iter()
                .take(3)
                .map(|k| String::from_utf8_lossy(k))
                .collect::<Vec<_>>(),
        );
    }
    db.close().unwrap();
}

#[test]
fn damaged_checkpoint_after_a_close() {
    for seed in 0..6 {
        trial(seed, false, Target::Checkpoint);
    }
}

#[test]
fn damaged_checkpoint_after_a_crash() {
    for seed in 0..6 {
        trial(seed, true, Target::Checkpoint);
    }
}

#[test]
fn damaged_node_segment_after_a_close() {
    for seed in 0..10 {
        trial(seed, false, Target::NodeSegment);
    }
}

#[test]
fn damaged_node_segment_after_a_crash() {
    for seed in 0..6 {
        trial(seed, true, Target::NodeSegment);
    }
}
