//! The cursor part of the suite.

use super::*;

/// The cursor part of the suite, in one place so that new cursor operations join here.
///
/// A walk shows every live record exactly once with its value and metadata, in strictly
/// increasing key order on ordered kinds. With `writes`, records are written and removed
/// while it runs: those may or may not be seen, every other one still exactly once.
/// `for_each_record` shows the same records and stops when asked. `jump` on an ordered
/// kind goes to the first key at or after its argument (forward and back); an unordered
/// kind refuses it.
pub(crate) fn check_cursor(db: &dyn Store, m: &mut Model, keys: &Keys, writes: bool, seed: u64) {
    let mut rng = Rng::new(seed);
    let ordered = db.kind().ordered();
    let before: BTreeMap<Bytes, Rec> = m.live.clone();
    let mut touched = BTreeSet::new();
    let mut seen: BTreeMap<Bytes, (usize, Record)> = BTreeMap::new();
    let mut last: Option<Vec<u8>> = None;
    // A third of the walks with writes also see an optimize.
    let optimize_at = (writes && rng.chance(1, 3)).then(|| rng.upto(m.live.len()));
    let mut step = 0;

    let mut cur = db.cursor().unwrap();
    while let Some((k, r)) = cur.next().unwrap() {
        if ordered {
            assert!(
                last.as_ref()
                    .is_none_or(|l| Bytes(l.clone()) < Bytes(k.clone())),
                "cursor out of key order: {:?} after {:?}",
                Bytes(k.clone()),
                last.clone().map(Bytes)
            );
            last = Some(k.clone());
        }
        seen.entry(Bytes(k)).or_insert((0, r)).0 += 1;
        step += 1;
        if optimize_at == Some(step) {
            // Maintenance changes no record: every one is still shown once.
            db.optimize("").unwrap();
        }
        if writes && rng.chance(1, 3) {
            let w = keys.pick(&mut rng);
            if rng.chance(1, 2) {
                let v = keys.value(&mut rng);
                let r = db.put_with(&w, &v, 7, 0);
                match m.stored(&v, 0) {
                    Ok(stored) => m.wrote(&w, stored, 7, 0, r.unwrap()),
                    Err(why) => m.refused(db, &w, why, r, "a put during a walk"),
                }
            } else {
                let had = m.remove(&w).is_some();
                assert_eq!(db.out(&w).unwrap(), had, "out {w:?} during a walk");
            }
            touched.insert(w);
        }
    }
    assert_eq!(
        cur.damage_skipped(),
        0,
        "a healthy database has no damage to skip"
    );
    drop(cur);
    for (k, (n, r)) in &seen {
        if touched.contains(k) {
            continue;
        }
        assert_eq!(*n, 1, "cursor showed {k:?} {n} times");
        m.expect(k, Some(Rec::of(&r.value, r.meta)), "cursor");
    }
    for k in before.keys().filter(|k| !touched.contains(*k)) {
        assert!(seen.contains_key(k), "cursor missed {k:?}");
    }

    let mut all = BTreeMap::new();
    let skipped = db
        .for_each_record(&mut |k, v, meta| {
            assert!(
                all.insert(Bytes(k.to_vec()), Rec::of(v, meta)).is_none(),
                "for_each_record showed {:?} twice",
                Bytes(k.to_vec())
            );
            Ok(true)
        })
        .unwrap();
    assert_eq!(skipped, 0);
    assert_eq!(all, m.live, "for_each_record");
    let mut calls = 0;
    db.for_each_record(&mut |_, _, _| {
        calls += 1;
        Ok(false)
    })
    .unwrap();
    assert_eq!(
        calls,
        usize::from(!m.live.is_empty()),
        "for_each_record goes on after false"
    );

    let mut cur = db.cursor().unwrap();
    for _ in 0..3 {
        let at = keys.probe(&mut rng);
        if !ordered {
            // An unordered kind jumps to the key's own record, and walks only forward.
            let live = m.live.get(&at).cloned();
            assert_eq!(cur.jump(&at).unwrap(), live.is_some(), "jump {at:?}");
            match live {
                Some(_) => {
                    let (k, r) = cur.get().unwrap().expect("on the record jumped to");
                    assert_eq!(Bytes(k), at, "jump on an unordered kind");
                    m.expect(&at, Some(Rec::of(&r.value, r.meta)), "cursor after a jump");
                }
                None => assert!(cur.get().unwrap().is_none(), "jump {at:?} to a missing key"),
            }
            for refused in [cur.last(), cur.jump_back(&at), cur.step_back()] {
                assert!(
                    matches!(refused, Err(Error::Unsupported(_))),
                    "a backward move on an unordered kind"
                );
            }
            continue;
        }
        cur.jump(&at).unwrap();
        let want: Vec<Bytes> = m
            .live
            .range(at.clone()..)
            .map(|(k, _)| k.clone())
            .take(3)
            .collect();
        for w in &want {
            let (k, r) = cur
                .next()
                .unwrap()
                .unwrap_or_else(|| panic!("jump {at:?}: ended before {w:?}"));
            assert_eq!(&Bytes(k), w, "jump {at:?}");
            m.expect(w, Some(Rec::of(&r.value, r.meta)), "cursor after a jump");
        }
        if want.len() < 3 {
            assert!(
                cur.next().unwrap().is_none(),
                "jump {at:?}: records past the last"
            );
        }
    }
}
