use super::*;
use proptest::prelude::*;

fn slot(tag: u32, off: u32) -> Slot {
    Slot { tag, seg: 1, off }
}

#[test]
fn radix_sort_matches_a_comparison_sort() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for n in [0usize, 1, 5, 63, 64, 65, 1000, 5000] {
        let v: Vec<Slot> = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                Slot {
                    tag: (x >> 8) as u32 & 0xffff_0fff,
                    seg: 1 + (x % 3) as u32,
                    off: (x >> 40) as u32,
                }
            })
            .collect();
        for key in [|s: &Slot| s.tag as u64, |s: &Slot| s.loc()] {
            let mut a = v.clone();
            let mut b = v.clone();
            radix_sort_with(&mut a, &mut Vec::new(), key);
            b.sort_by_key(key); // stable, as the radix sort is
            assert_eq!(a, b, "n={n}");
        }
    }
}

#[test]
fn copy_into_gives_what_iter_gives_while_growing() {
    let mut t = Table::with_capacity(2000);
    for i in 0..1500u32 {
        t.insert(Slot {
            tag: i.wrapping_mul(0x9E37_79B9),
            seg: 1,
            off: i,
        });
    }
    let mut v = vec![Slot::default()]; // appended to, not replaced
    t.copy_into(&mut v);
    let want: Vec<Slot> = std::iter::once(Slot::default()).chain(t.iter()).collect();
    assert_eq!(v, want);
    // Mid-growth: slots in both arrays.
    let spare = Spare::new(t.grow_cap());
    assert!(t.grow_into(spare).is_none());
    t.step();
    assert!(t.moving.is_some());
    let mut v = Vec::new();
    t.copy_into(&mut v);
    assert_eq!(v, t.iter().collect::<Vec<_>>());
    assert_eq!(v.len(), 1500);
    // Emptied by removes: nothing is appended.
    for s in v {
        assert!(t.remove(&s));
    }
    let mut v = vec![Slot::default()];
    t.copy_into(&mut v);
    assert_eq!(v.len(), 1);
}

#[test]
fn insert_find_remove_grow() {
    let mut t = Table::default();
    for i in 0..10_000u32 {
        t.insert(slot(i.wrapping_mul(2_654_435_761), i));
    }
    t.verify().unwrap();
    assert_eq!(t.len(), 10_000);
    for i in 0..10_000u32 {
        let tag = i.wrapping_mul(2_654_435_761);
        assert_eq!(t.candidates(tag).count(), 1);
        assert!(t.contains(&slot(tag, i)));
    }
    for i in (0..10_000u32).step_by(2) {
        assert!(t.remove(&slot(i.wrapping_mul(2_654_435_761), i)));
    }
    t.verify().unwrap();
    assert_eq!(t.len(), 5_000);
    assert!(!t.remove(&slot(0, 0)));
}

/// Tables past 2 MiB live in huge-page memory maps: grow through that size, shrink back.
#[test]
fn large_tables_grow_and_shrink() {
    let mut t = Table::default();
    let n = 400_000u32;
    for i in 0..n {
        t.insert(slot(i.wrapping_mul(2_654_435_761), i));
    }
    assert!(t.memory() >= HUGE);
    assert_eq!(t.len(), n as usize);
    assert!(t.contains(&slot(7u32.wrapping_mul(2_654_435_761), 7)));
    let copy = t.clone();
    t.retain(|s| s.off < 1000);
    assert_eq!(t.len(), 1000);
    t.verify().unwrap();
    assert_eq!(copy.len(), n as usize);
    copy.verify().unwrap();
}

#[test]
fn equal_tags_and_extremes() {
    let mut t = Table::default();
    for i in 0..200 {
        t.insert(slot(u32::MAX, i));
        t.insert(slot(0, i));
        t.insert(slot(7, i));
    }
    t.verify().unwrap();
    assert_eq!(t.candidates(u32::MAX).count(), 200);
    assert_eq!(t.candidates(0).count(), 200);
    assert!(t.replace(&slot(7, 3), slot(7, 1000)));
    assert!(t.contains(&slot(7, 1000)));
    t.retain(|s| s.off % 2 == 0);
    t.verify().unwrap();
    assert_eq!(t.len(), 301);
}

proptest! {
    #[test]
    fn behaves_like_a_multiset(ops in proptest::collection::vec((any::<bool>(), 0u32..64, any::<u32>()), 1..400)) {
        let mut t = Table::default();
        let mut model: Vec<Slot> = Vec::new();
        for (ins, tag_hi, off) in ops {
            let s = slot(tag_hi.wrapping_mul(0x0400_0001), off % 8);
            if ins {
                if !model.contains(&s) { t.insert(s); model.push(s); }
            } else {
                let present = model.iter().position(|m| *m == s);
                prop_assert_eq!(t.remove(&s), present.is_some());
                if let Some(p) = present { model.swap_remove(p); }
            }
            prop_assert!(t.verify().is_ok(), "{:?}", t.verify());
        }
        let mut got: Vec<Slot> = t.iter().collect();
        got.sort_by_key(|s| (s.tag, s.off));
        model.sort_by_key(|s| (s.tag, s.off));
        prop_assert_eq!(got, model);
    }

    /// A table that grows a few slots at a time (`grow_into`, then `step` with each
    /// write) answers like a multiset at every point of the move, in both arrays, and
    /// keeps its invariants; growing again, retiring and settling all keep the contents.
    #[test]
    fn grows_while_it_is_written(
        start in 0usize..3000,
        tag_bits in 8u32..32,
        ops in proptest::collection::vec((0u8..10, any::<u32>(), any::<u32>()), 1..1500),
    ) {
        let mut t = Table::default();
        let mut model: Vec<Slot> = Vec::new();
        let mut x = 0x2545_f491_4f6c_dd1du64 ^ start as u64;
        let mask = if tag_bits == 32 { u32::MAX } else { (1u32 << tag_bits) - 1 };
        let scatter = |v: u32| (v & mask).wrapping_mul(0x9e37_79b1);
        for i in 0..start {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let s = slot(scatter(x as u32), i as u32);
            t.insert(s);
            model.push(s);
        }
        for (kind, a, b) in ops {
            match kind {
                0..=3 => {
                    let s = slot(scatter(a), b);
                    if !model.contains(&s) { t.insert(s); model.push(s); }
                }
                4 | 5 if !model.is_empty() => {
                    let i = a as usize % model.len();
                    let s = model.swap_remove(i);
                    prop_assert!(t.remove(&s));
                }
                6 if !model.is_empty() => {
                    let i = a as usize % model.len();
                    let new = Slot { off: b, seg: 2, ..model[i] };
                    if !model.contains(&new) {
                        prop_assert!(t.replace(&model[i], new));
                        model[i] = new;
                    }
                }
                7 | 8 => {
                    // Grow as a writer would, or try to while a growth is under way.
                    let spare = Spare::new(t.grow_cap());
                    drop(t.grow_into(spare));
                    drop(t.take_retired());
                }
                _ => {
                    let s = slot(scatter(a), b);
                    prop_assert_eq!(t.contains(&s), model.contains(&s));
                    let present = model.iter().position(|m| *m == s);
                    prop_assert_eq!(t.remove(&s), present.is_some());
                    if let Some(p) = present { model.swap_remove(p); }
                }
            }
            prop_assert!(t.verify().is_ok(), "{:?}", t.verify());
            prop_assert_eq!(t.len(), model.len());
        }
        for m in &model {
            prop_assert!(t.candidates(m.tag).any(|s| s == *m), "lost {:?}", m);
        }
        let mut got: Vec<Slot> = t.iter().collect();
        prop_assert!(got.windows(2).all(|w| w[0].tag <= w[1].tag), "iter out of tag order");
        got.sort_by_key(|s| (s.tag, s.off, s.seg));
        model.sort_by_key(|s| (s.tag, s.off, s.seg));
        prop_assert_eq!(&got, &model);
        // Settling (as `reserve` does) finishes any growth and changes nothing else.
        t.reserve(0);
        prop_assert!(t.moving.is_none());
        t.verify().map_err(TestCaseError::fail)?;
        let mut after: Vec<Slot> = t.iter().collect();
        after.sort_by_key(|s| (s.tag, s.off, s.seg));
        prop_assert_eq!(after, model);
    }
}

/// Runs of one tag at the very end of the tag space while a table grows: inserts into the
/// old array run out of overflow room, which finishes the growth at once and grows again.
#[test]
fn equal_tags_at_the_end_across_a_growth() {
    let mut t = Table::default();
    for i in 0..6000 {
        t.insert(slot(u32::MAX, i));
    }
    assert!(t.cap >= DEFER_CAP);
    assert!(t.grow_into(Spare::new(t.grow_cap())).is_none());
    for i in 6000..30_000 {
        t.insert(slot(u32::MAX, i));
        if i % 997 == 0 {
            t.verify().unwrap();
        }
    }
    t.verify().unwrap();
    assert_eq!(t.candidates(u32::MAX).count(), 30_000);
    assert!(t.remove(&slot(u32::MAX, 12_345)));
    assert_eq!(t.len(), 29_999);
}

/// Readers of a snapshot (no lock) race writers that lock runs and shift slots in the
/// same buckets: a snapshot that is taken always holds exactly the slots of its tag (none
/// missed while a shift passed it, none torn), and writers leave the table sound.
#[test]
fn snapshots_race_writers_of_the_same_buckets() {
    use std::sync::atomic::AtomicBool;
    let t = Table::with_capacity(3300);
    let mix = |i: u32| i.wrapping_mul(2_654_435_761) ^ (i >> 7);
    // Stable slots (segment 1), never written; writers churn others (segment 2) among them.
    let stable: Vec<Slot> = (0..2000).map(|i| slot(mix(i), i)).collect();
    let mut t = t;
    for s in &stable {
        t.insert(*s);
    }
    let t = t;
    let done = AtomicBool::new(false);
    let (taken, fallbacks) = std::thread::scope(|sc| {
        let writers: Vec<_> = (0..2u32)
            .map(|w| {
                let t = &t;
                sc.spawn(move || {
                    let mut rng = 0x9e37_79b9_u64 ^ u64::from(w);
                    let mut present = vec![false; 600];
                    for _ in 0..3_000_000 {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let i = (rng % 600) as usize;
                        let id = 10_000 + w * 1000 + i as u32;
                        let s = Slot {
                            tag: mix(id),
                            seg: 2,
                            off: id,
                        };
                        // SAFETY: every thread uses `t` through `lock_run` and
                        // `snapshot` only, and it never grows.
                        let Some(mut run) = (unsafe { t.lock_run(s.tag) }) else {
                            continue;
                        };
                        if present[i] {
                            assert!(run.remove(&s));
                        } else {
                            run.insert(s);
                        }
                        present[i] = !present[i];
                    }
                })
            })
            .collect();
        let readers: Vec<_> = (0..2u32)
            .map(|r| {
                let (t, stable, done) = (&t, &stable, &done);
                sc.spawn(move || {
                    let (mut taken, mut fallbacks) = (0u64, 0u64);
                    let mut i = r as usize;
                    while !done.load(Ordering::Relaxed) {
                        let s = stable[i % stable.len()];
                        i += 7;
                        // SAFETY: as for the writers.
                        match unsafe { t.snapshot(s.tag) } {
                            Some(snap) => {
                                let got: Vec<Slot> = snap.candidates().collect();
                                assert_eq!(got, vec![s], "snapshot of tag {:#x}", s.tag);
                                taken += 1;
                            }
                            None => fallbacks += 1,
                        }
                    }
                    (taken, fallbacks)
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
        readers
            .into_iter()
            .map(|r| r.join().unwrap())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    });
    assert!(
        taken > 1000,
        "{taken} snapshots taken, {fallbacks} fell back"
    );
    let mut t = t;
    let churn = t.iter().filter(|s| s.seg == 2).count() as i64;
    t.add_len(churn);
    t.verify().unwrap();
    for s in &stable {
        assert!(t.contains(s));
    }
}

/// A growth moves every slot once enough writes follow it, then hands the old array
/// back to be freed.
#[test]
fn a_growth_finishes_and_retires_the_old_array() {
    let mut t = Table::default();
    let tag = |i: u32| i.wrapping_mul(2_654_435_761);
    for i in 0..20_000u32 {
        t.insert(slot(tag(i), i));
    }
    assert!(t.cap >= DEFER_CAP);
    let old_cap = t.cap;
    let positions = t.slots.len();
    assert!(t.grow_into(Spare::new(t.grow_cap())).is_none());
    assert!(t.moving.is_some());
    assert_eq!(t.cap, 2 * old_cap);
    let mut writes = 0;
    while t.moving.is_some() {
        t.insert(slot(tag(20_000 + writes), 20_000 + writes));
        writes += 1;
        t.verify().unwrap();
    }
    // MOVE_STEP positions per write (a little more to reach an empty position).
    assert!(
        writes as usize <= positions / MOVE_STEP + 1,
        "{writes} writes"
    );
    assert!(t.take_retired().is_some());
    assert!(t.take_retired().is_none());
    for i in 0..20_000 + writes {
        assert!(t.contains(&slot(tag(i), i)), "lost {i}");
    }
}
