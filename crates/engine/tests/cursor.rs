//! The cursor on every kind: a table of kinds, a `BTreeMap` model for the ordered ones and
//! set semantics for the unordered ones (each live key exactly once, in an order of the kind's
//! own), with others writing meanwhile. Seeds are printed on failure.
//!
//! The fixed-length database (`.kf`), keyed by record ids, runs the same tests on ids of one
//! digit count (whose byte order is their numeric order, so the same `BTreeMap` models it),
//! and a test of its own for numeric order across digit counts and the key words.

use kura_engine::{Cursor, Error, KeyRange, Store};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound::{self, Excluded, Included, Unbounded};
use std::path::Path;
use std::sync::Arc;

/// The keys a test writes on a kind: `k0042` and `new7`, `churn3`; or on a kind keyed by ids,
/// ids of six digits (`100042`, `200007`, `300003`).
#[derive(Clone, Copy)]
struct Form {
    ids: bool,
}

impl Form {
    fn key(self, i: u64) -> Vec<u8> {
        if self.ids {
            (100_000 + i).to_string().into_bytes()
        } else {
            key(i)
        }
    }
    /// A key no `key(i)` is: what a walk may meet as written meanwhile.
    fn fresh(self, i: u64) -> Vec<u8> {
        if self.ids {
            (200_000 + i).to_string().into_bytes()
        } else {
            format!("new{i}").into_bytes()
        }
    }
    fn is_fresh(self, k: &[u8]) -> bool {
        if self.ids {
            k.starts_with(b"2")
        } else {
            k.starts_with(b"new")
        }
    }
    /// One of 300 keys a writer churns.
    fn churn(self, i: u64) -> Vec<u8> {
        if self.ids {
            (300_000 + i % 300).to_string().into_bytes()
        } else {
            format!("churn{}", i % 300).into_bytes()
        }
    }
    fn is_stable(self, k: &[u8]) -> bool {
        k.starts_with(if self.ids { b"1" } else { b"k" })
    }
    /// The smallest key, as a range's bound.
    fn lowest(self) -> &'static [u8] {
        if self.ids {
            b"min"
        } else {
            b""
        }
    }
}

const BYTES: Form = Form { ids: false };
const IDS: Form = Form { ids: true };

/// Every kind, fresh, with tuning that reaches rare paths (a `.kh` with small segments), and
/// the form of its keys.
fn all_kinds(dir: &Path) -> Vec<(String, Arc<dyn Store>, Form)> {
    let kf = dir.join("c.kf");
    let mut v: Vec<_> = kinds(dir)
        .into_iter()
        .map(|(n, db)| (n, db, BYTES))
        .collect();
    let n = format!("{}#segsiz=64k#limsiz=1g", kf.display());
    let db = kura_engine::open(&n).unwrap_or_else(|e| panic!("{n}: {e}"));
    v.push((n, db, IDS));
    v
}

/// Every kind keyed by bytes, fresh, with tuning that reaches rare paths (a `.kh` with small
/// segments).
fn kinds(dir: &Path) -> Vec<(String, Arc<dyn Store>)> {
    let kh = dir.join("c.kh");
    let kb = dir.join("c.kb");
    let kd = dir.join("d.kb");
    [
        "*".to_string(),
        "+".to_string(),
        format!("{}#segsiz=64k", kh.display()),
        format!("{}#leafsiz=256#cache=1m#segsiz=64k", kb.display()),
        format!("{}#leafsiz=256#compress=lz4", kd.display()),
    ]
    .into_iter()
    .map(|n| {
        let db = kura_engine::open(&n).unwrap_or_else(|e| panic!("{n}: {e}"));
        (n, db)
    })
    .collect()
}

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

fn key(i: u64) -> Vec<u8> {
    format!("k{i:04}").into_bytes()
}

/// Every key a walk from `first` returns, checking that none comes twice.
fn walk(cur: &mut dyn Cursor) -> Vec<Vec<u8>> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    if !cur.first().unwrap() {
        return out;
    }
    while let Some((k, _)) = cur.get().unwrap() {
        assert!(
            seen.insert(k.clone()),
            "{:?} twice",
            String::from_utf8_lossy(&k)
        );
        out.push(k);
        if !cur.step().unwrap() {
            break;
        }
    }
    out
}

/// The last key of `model` before `k`.
fn before(model: &BTreeMap<Vec<u8>, Vec<u8>>, k: &[u8]) -> Option<Vec<u8>> {
    model
        .range::<[u8], _>((Unbounded, Excluded(k)))
        .next_back()
        .map(|(k, _)| k.clone())
}

/// What an ordered cursor on `model` is on: the record of `k`, or the first after it.
fn model_at(model: &BTreeMap<Vec<u8>, Vec<u8>>, k: &[u8]) -> Option<Vec<u8>> {
    model
        .range::<[u8], _>((Included(k), Unbounded))
        .next()
        .map(|(k, _)| k.clone())
}

#[test]
fn empty_databases_have_nothing_to_walk() {
    let dir = tempfile::tempdir().unwrap();
    for (name, db) in kinds(dir.path()) {
        let mut cur = db.cursor().unwrap();
        assert_eq!(cur.get().unwrap(), None, "{name}: a new cursor is nowhere");
        assert!(!cur.step().unwrap(), "{name}");
        assert!(!cur.first().unwrap(), "{name}");
        assert!(!cur.jump(b"a").unwrap(), "{name}");
        assert!(!cur.remove().unwrap(), "{name}");
        assert!(!cur.set_value(b"v", None).unwrap(), "{name}");
        assert_eq!(cur.next().unwrap(), None, "{name}");
        if db.kind().ordered() {
            assert!(!cur.last().unwrap(), "{name}");
            assert!(!cur.jump_back(b"z").unwrap(), "{name}");
        }
    }
}

/// Random operations through a cursor and beside it on the ordered kinds, against a
/// `BTreeMap` and the position Kyoto Cabinet's cursor would have.
#[test]
fn ordered_kinds_follow_the_model() {
    let dir = tempfile::tempdir().unwrap();
    for (name, db, form) in all_kinds(dir.path()) {
        if !db.kind().ordered() {
            continue;
        }
        let key = |i| form.key(i);
        for seed in 1..=40u64 {
            let ctx = format!("{name} seed {seed}");
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            db.vanish().unwrap();
            let mut model = BTreeMap::new();
            // The model cursor: the key it is on (the record, or the next after it).
            let mut at: Option<Vec<u8>> = None;
            // The way of its last jump or step: a removal then leaves it on the previous key.
            let mut back = false;
            let mut cur = db.cursor().unwrap();
            for step in 0..400 {
                let k = key(rng.below(60));
                let v = format!("v{seed}-{step}").into_bytes();
                let ctx = format!("{ctx} step {step}");
                match rng.below(13) {
                    0 | 1 => {
                        db.put(&k, &v).unwrap();
                        model.insert(k, v);
                    }
                    2 => {
                        assert_eq!(db.out(&k).unwrap(), model.remove(&k).is_some(), "{ctx}");
                    }
                    3 => {
                        at = model.keys().next().cloned();
                        back = false;
                        assert_eq!(cur.first().unwrap(), at.is_some(), "{ctx} first");
                    }
                    4 => {
                        at = model.keys().next_back().cloned();
                        back = true;
                        assert_eq!(cur.last().unwrap(), at.is_some(), "{ctx} last");
                    }
                    5 => {
                        at = model_at(&model, &k);
                        back = false;
                        assert_eq!(cur.jump(&k).unwrap(), at.is_some(), "{ctx} jump");
                    }
                    6 => {
                        at = model
                            .range::<[u8], _>((Unbounded, Included(k.as_slice())))
                            .next_back()
                            .map(|(k, _)| k.clone());
                        back = true;
                        assert_eq!(cur.jump_back(&k).unwrap(), at.is_some(), "{ctx} back");
                    }
                    7 => {
                        let now = at.as_deref().and_then(|a| model_at(&model, a));
                        at = now.and_then(|n| {
                            model
                                .range::<[u8], _>((Excluded(n.as_slice()), Unbounded))
                                .next()
                                .map(|(k, _)| k.clone())
                        });
                        back = false;
                        assert_eq!(cur.step().unwrap(), at.is_some(), "{ctx} step");
                    }
                    8 => {
                        let now = at.as_deref().and_then(|a| model_at(&model, a));
                        at = now.and_then(|n| {
                            model
                                .range::<[u8], _>((Unbounded, Excluded(n.as_slice())))
                                .next_back()
                                .map(|(k, _)| k.clone())
                        });
                        back = true;
                        assert_eq!(cur.step_back().unwrap(), at.is_some(), "{ctx} step back");
                    }
                    9 => {
                        let now = at.as_deref().and_then(|a| model_at(&model, a));
                        if let Some(n) = &now {
                            model.insert(n.clone(), v.clone());
                        }
                        assert_eq!(cur.set_value(&v, None).unwrap(), now.is_some(), "{ctx}");
                    }
                    10 => {
                        let now = at.as_deref().and_then(|a| model_at(&model, a));
                        let want = now.map(|n| {
                            let v = model.remove(&n).unwrap_or_default();
                            (n, v)
                        });
                        if back {
                            at = want.as_ref().and_then(|(n, _)| before(&model, n));
                        }
                        let got = cur.seize().unwrap().map(|(k, r)| (k, r.value));
                        assert_eq!(got, want, "{ctx} seize");
                    }
                    11 => {
                        let now = at.as_deref().and_then(|a| model_at(&model, a));
                        if let Some(n) = &now {
                            model.remove(n);
                            if back {
                                at = before(&model, n);
                            }
                        }
                        assert_eq!(cur.remove().unwrap(), now.is_some(), "{ctx} remove");
                    }
                    _ => {}
                }
                // Wherever the model cursor is, the cursor shows that record.
                let want = at
                    .as_deref()
                    .and_then(|a| model_at(&model, a))
                    .map(|n| (n.clone(), model[&n].clone()));
                let got = cur.get().unwrap().map(|(k, r)| (k, r.value));
                assert_eq!(got, want, "{ctx} get");
                // A read settles on the record it shows.
                at = want.map(|(k, _)| k);
            }
            // A last walk shows the model, in order, both ways.
            let all: Vec<Vec<u8>> = model.keys().cloned().collect();
            assert_eq!(walk(&mut *cur), all, "{ctx}");
            let mut back = Vec::new();
            if cur.last().unwrap() {
                loop {
                    back.push(cur.get().unwrap().unwrap().0);
                    if !cur.step_back().unwrap() {
                        break;
                    }
                }
            }
            back.reverse();
            assert_eq!(back, all, "{ctx} backward");
        }
    }
}

/// Every combination of bounds, both directions and a maximum, against the model.
#[test]
fn ranges_on_ordered_kinds_match_the_model() {
    let dir = tempfile::tempdir().unwrap();
    for (name, db, form) in all_kinds(dir.path()) {
        let key = |i| form.key(i);
        if !db.kind().ordered() {
            assert!(matches!(
                db.for_each_in_range(&KeyRange::new(b"a", None), &mut |_, _, _| Ok(true)),
                Err(Error::Unsupported(_))
            ));
            continue;
        }
        let model: BTreeMap<Vec<u8>, Vec<u8>> = (0..30).map(|i| (key(i * 2), key(i))).collect();
        for (k, v) in &model {
            db.put(k, v).unwrap();
        }
        let ends = [0u64, 1, 10, 11, 58, 59, 70];
        let bounds =
            |i: u64| -> Vec<Bound<Vec<u8>>> { vec![Unbounded, Included(key(i)), Excluded(key(i))] };
        for &a in &ends {
            for &b in &ends {
                for from in bounds(a) {
                    for to in bounds(b) {
                        for desc in [false, true] {
                            for max in [0, 1, 3, usize::MAX] {
                                let r = KeyRange {
                                    from: from.as_ref().map(Vec::as_slice),
                                    to: to.as_ref().map(Vec::as_slice),
                                    desc,
                                    max,
                                };
                                let mut want: Vec<Vec<u8>> = model
                                    .keys()
                                    .filter(|k| r.above_from(k) && r.below_to(k))
                                    .cloned()
                                    .collect();
                                if desc {
                                    want.reverse();
                                }
                                want.truncate(max);
                                let mut got = Vec::new();
                                let n = db
                                    .for_each_in_range(&r, &mut |k, v, _| {
                                        assert_eq!(model.get(k).map(Vec::as_slice), Some(v));
                                        got.push(k.to_vec());
                                        Ok(true)
                                    })
                                    .unwrap();
                                assert_eq!(got, want, "{name} {r:?}");
                                assert_eq!(n as usize, want.len());
                            }
                        }
                    }
                }
            }
        }
        // `f` stops the walk.
        let mut n = 0;
        db.for_each_in_range(&KeyRange::new(form.lowest(), None), &mut |_, _, _| {
            n += 1;
            Ok(n < 5)
        })
        .unwrap();
        assert_eq!(n, 5);
        assert_eq!(db.range(&key(10), Some(&key(16)), 100).unwrap().len(), 3);
    }
}

/// Unordered kinds: a walk returns each live key once, in the kind's own order; `jump` goes
/// to the key itself and a walk from there is the rest of that order; the backward walk is
/// not there; reads and writes at the cursor.
#[test]
fn unordered_kinds_walk_each_key_once() {
    let dir = tempfile::tempdir().unwrap();
    for (name, db) in kinds(dir.path()) {
        if db.kind().ordered() {
            continue;
        }
        let n = 3000;
        for i in 0..n {
            db.put(&key(i), &key(i)).unwrap();
        }
        let mut cur = db.cursor().unwrap();
        let order = walk(&mut *cur);
        let want: BTreeSet<Vec<u8>> = (0..n).map(key).collect();
        assert_eq!(
            order.iter().cloned().collect::<BTreeSet<_>>(),
            want,
            "{name}"
        );
        assert_eq!(order.len(), n as usize, "{name}");
        // The iterator form agrees.
        let mut it = db.cursor().unwrap();
        let mut again = Vec::new();
        while let Some((k, r)) = it.next().unwrap() {
            assert_eq!(k, r.value, "{name}");
            again.push(k);
        }
        assert_eq!(again, order, "{name}: the same order twice");
        // A jump goes to the key; stepping on from there gives the rest of the order.
        for at in [0, 1, 1500, n as usize - 1] {
            assert!(cur.jump(&order[at]).unwrap(), "{name}");
            assert_eq!(cur.get().unwrap().unwrap().0, order[at], "{name}");
            let mut rest = Vec::new();
            while cur.step().unwrap() {
                rest.push(cur.get().unwrap().unwrap().0);
            }
            assert_eq!(rest, order[at + 1..], "{name} from {at}");
        }
        assert!(!cur.jump(b"absent").unwrap(), "{name}");
        assert_eq!(cur.get().unwrap(), None, "{name}");
        for r in [cur.last(), cur.jump_back(b"k"), cur.step_back()] {
            assert!(matches!(r, Err(Error::Unsupported(_))), "{name}");
        }
        // Writes at the cursor.
        assert!(cur.jump(&order[10]).unwrap());
        assert!(cur.set_value(b"new", Some(0)).unwrap());
        assert_eq!(db.get(&order[10]).unwrap().unwrap().value, b"new");
        assert!(cur.remove().unwrap());
        assert_eq!(db.get(&order[10]).unwrap(), None);
        // Removed: the cursor is on the next record.
        assert_eq!(cur.get().unwrap().unwrap().0, order[11], "{name}");
        let (k, r) = cur.seize().unwrap().unwrap();
        assert_eq!(
            (k.as_slice(), r.value.as_slice()),
            (&order[11][..], &order[11][..])
        );
        assert_eq!(cur.get().unwrap().unwrap().0, order[12], "{name}");
        // Removed by someone else: on to the next one as well.
        db.out(&order[12]).unwrap();
        assert_eq!(cur.get().unwrap().unwrap().0, order[13], "{name}");
        assert!(cur.step().unwrap());
        assert_eq!(cur.get().unwrap().unwrap().0, order[14], "{name}");
        assert_eq!(db.count(), n - 3, "{name}");
    }
}

/// While a walk runs, others remove keys (ahead of it and behind), insert new ones,
/// overwrite the ones it visits, and on the `.kh` compact everything (moving every record to
/// another segment): no key comes twice, every key that nobody touched comes, and a value
/// returned is one the key had.
#[test]
fn a_walk_while_others_write_misses_and_repeats_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for (name, db, form) in all_kinds(dir.path()) {
        let key = |i| form.key(i);
        for seed in [3u64, 17, 99] {
            let ctx = format!("{name} seed {seed}");
            let mut rng = Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1);
            db.vanish().unwrap();
            let n = 2000u64;
            for i in 0..n {
                db.put(&key(i), b"0").unwrap();
            }
            let mut touched = BTreeSet::new();
            let mut seen = BTreeSet::new();
            let mut cur = db.cursor().unwrap();
            let mut steps = 0u64;
            while let Some((k, r)) = cur.next().unwrap() {
                assert!(seen.insert(k.clone()), "{ctx}: {k:?} twice");
                let fresh = form.is_fresh(&k) && r.value == b"3";
                assert!(
                    r.value == b"0" || touched.contains(&k) || fresh,
                    "{ctx}: {k:?} has a value it never had"
                );
                steps += 1;
                // Rewrite what was just visited, remove and insert elsewhere.
                db.put(&k, b"1").unwrap();
                let other = key(rng.below(n));
                match rng.below(3) {
                    0 => {
                        db.out(&other).unwrap();
                    }
                    1 => {
                        db.put(&other, b"2").unwrap();
                    }
                    _ => {
                        db.put(&form.fresh(steps), b"3").unwrap();
                    }
                }
                touched.insert(other);
                if steps.is_multiple_of(500) {
                    db.optimize("").unwrap();
                }
            }
            for i in 0..n {
                let k = key(i);
                if !touched.contains(&k) {
                    assert!(seen.contains(&k), "{ctx}: untouched {k:?} missed");
                }
            }
            assert!(steps < 3 * n, "{ctx}: {steps} steps");
        }
    }
}

/// Cursors of several threads at once, with writers: each walk sees every stable key once.
#[test]
fn concurrent_walks_and_writers() {
    let dir = tempfile::tempdir().unwrap();
    for (name, db, form) in all_kinds(dir.path()) {
        for i in 0..1000u64 {
            db.put(&form.key(i), b"stable").unwrap();
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (db, stop) = (db.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let k = form.churn(i);
                    if i.is_multiple_of(3) {
                        db.out(&k).unwrap();
                    } else {
                        db.put(&k, &i.to_le_bytes()).unwrap();
                    }
                    i += 1;
                }
            })
        };
        let walkers: Vec<_> = (0..3)
            .map(|_| {
                let db = db.clone();
                std::thread::spawn(move || {
                    for _ in 0..5 {
                        let mut cur = db.cursor().unwrap();
                        let keys = walk(&mut *cur);
                        let stable = keys.iter().filter(|k| form.is_stable(k)).count();
                        assert_eq!(stable, 1000);
                    }
                })
            })
            .collect();
        for w in walkers {
            w.join()
                .unwrap_or_else(|_| panic!("{name}: a walker failed"));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        writer.join().unwrap();
    }
}

/// A cursor kept across a close fails instead of reading freed memory.
#[test]
fn a_cursor_fails_after_close() {
    let dir = tempfile::tempdir().unwrap();
    for (name, db, form) in all_kinds(dir.path()) {
        db.put(&form.key(1), b"1").unwrap();
        let mut cur = db.cursor().unwrap();
        assert!(cur.first().unwrap());
        db.close().unwrap();
        assert!(cur.step().is_err(), "{name}");
        assert!(cur.first().is_err(), "{name}");
    }
}

/// The fixed-length database: ids in numeric order across digit counts (`9` before `10`),
/// ids written with leading zeros, and the key words `min` and `max` as a cursor's and a
/// range's bounds.
#[test]
fn fixed_length_ids_walk_in_numeric_order() {
    let dir = tempfile::tempdir().unwrap();
    let db = kura_engine::open(&format!("{}/n.kf", dir.path().display())).unwrap();
    let mut cur = db.cursor().unwrap();
    assert!(!cur.first().unwrap());
    assert!(!cur.jump(b"min").unwrap(), "an empty database has no min");
    for id in [100u64, 9, 10, 1, 99, 1000] {
        db.put(id.to_string().as_bytes(), format!("v{id}").as_bytes())
            .unwrap();
    }
    let order = [b"1".to_vec(), b"9".to_vec(), b"10".to_vec(), b"99".to_vec()];
    let all: Vec<Vec<u8>> = order
        .iter()
        .cloned()
        .chain([b"100".to_vec(), b"1000".to_vec()])
        .collect();
    assert_eq!(walk(&mut *cur), all);
    // A key with leading zeros names the same id; the cursor shows it without them.
    assert!(cur.jump(b"0009").unwrap());
    assert_eq!(cur.get().unwrap().unwrap().0, b"9");
    assert!(cur.jump(b"11").unwrap());
    assert_eq!(cur.get().unwrap().unwrap().0, b"99");
    assert!(cur.jump_back(b"999").unwrap());
    assert_eq!(cur.get().unwrap().unwrap().0, b"100");
    assert!(cur.jump(b"max").unwrap());
    assert_eq!(cur.get().unwrap().unwrap().0, b"1000");
    assert!(cur.jump_back(b"min").unwrap());
    assert_eq!(cur.get().unwrap().unwrap().0, b"1");
    assert!(!cur.step_back().unwrap());
    assert!(cur.jump(b"abc").is_err(), "not an id");
    let range = |from: Bound<&[u8]>, to: Bound<&[u8]>, desc: bool| -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        let r = KeyRange {
            from,
            to,
            desc,
            max: usize::MAX,
        };
        db.for_each_in_range(&r, &mut |k, v, _| {
            assert_eq!(v, format!("v{}", String::from_utf8_lossy(k)).as_bytes());
            got.push(k.to_vec());
            Ok(true)
        })
        .unwrap();
        got
    };
    assert_eq!(range(Included(b"min"), Included(b"max"), false), all);
    assert_eq!(range(Included(b"9"), Excluded(b"100"), false), order[1..]);
    assert_eq!(
        range(Excluded(b"1"), Included(b"99"), true),
        [b"99".to_vec(), b"10".to_vec(), b"9".to_vec()]
    );
    assert_eq!(
        range(Unbounded, Excluded(b"min"), false),
        Vec::<Vec<u8>>::new()
    );
    assert_eq!(db.range(b"2", Some(b"100"), 10).unwrap().len(), 3);
    assert_eq!(db.fwmkeys(b"(min,100]", 10).unwrap(), all[1..5]);
}

/// A cursor kept no direction: after `jump_back`, a remove or seize left it on the next
/// record (Kyoto Tycoon's `cur_seize` after `cur_step_back` to `k1` took `k1`, then `k3`).
/// Kyoto Cabinet's cursors remember the way of their last jump or step: removing then leaves
/// the cursor on the previous record, nowhere before the first. On unordered kinds, where
/// backward moves are refused, a cursor always goes forward.
#[test]
fn a_cursor_keeps_the_direction_of_its_last_move() {
    let dir = tempfile::tempdir().unwrap();
    for (name, db, form) in all_kinds(dir.path()) {
        let k: Vec<Vec<u8>> = (1..=4).map(|i| form.key(i)).collect();
        for key in &k {
            db.put(key, b"v").unwrap();
        }
        let mut cur = db.cursor().unwrap();
        let at = |cur: &mut Box<dyn Cursor + '_>| cur.get().unwrap().map(|(k, _)| k);
        assert!(cur.jump(&k[1]).unwrap(), "{name}");
        assert!(!cur.backward(), "{name}");
        if !db.kind().ordered() {
            assert!(matches!(cur.jump_back(&k[1]), Err(Error::Unsupported(_))));
            assert!(matches!(cur.step_back(), Err(Error::Unsupported(_))));
            assert!(
                !cur.backward(),
                "{name}: a refused move keeps the direction"
            );
            let taken = cur.seize().unwrap().map(|(k, _)| k);
            assert_eq!(taken.as_ref(), Some(&k[1]), "{name}");
            // On to the record after it in the kind's order, never back to it.
            assert_ne!(at(&mut cur).as_ref(), Some(&k[1]), "{name}");
            continue;
        }
        // Backward: a remove leaves the cursor on the previous record.
        assert!(cur.jump_back(&k[2]).unwrap(), "{name}");
        assert!(cur.backward(), "{name}");
        assert!(cur.remove().unwrap(), "{name}");
        assert_eq!(at(&mut cur).as_ref(), Some(&k[1]), "{name}");
        db.put(&k[2], b"v").unwrap();
        // Forward again after a step: a seize leaves it on the next one.
        assert!(cur.step().unwrap(), "{name}");
        assert!(!cur.backward(), "{name}");
        assert_eq!(cur.seize().unwrap().map(|(k, _)| k).as_ref(), Some(&k[2]));
        assert_eq!(at(&mut cur).as_ref(), Some(&k[3]), "{name}");
        db.put(&k[2], b"v").unwrap();
        // Back to the first: a seize takes it, and nothing is before it.
        assert!(cur.jump(&k[1]).unwrap(), "{name}");
        assert!(cur.step_back().unwrap(), "{name}");
        let first = cur.seize().unwrap().map(|(k, _)| k);
        assert_eq!(first.as_ref(), Some(&k[0]), "{name}");
        assert!(
            cur.seize().unwrap().is_none(),
            "{name}: nothing before the first"
        );
        assert!(at(&mut cur).is_none(), "{name}");
        // `last` goes backward too.
        assert!(cur.last().unwrap(), "{name}");
        assert_eq!(cur.seize().unwrap().map(|(k, _)| k).as_ref(), Some(&k[3]));
        assert_eq!(at(&mut cur).as_ref(), Some(&k[2]), "{name}");
    }
}
