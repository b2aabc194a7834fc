//! One operation on keys, applied to a store and to the model, checking every answer.

use super::*;

/// Apply one operation on keys (the ones threads run too) to `db` and to the model, checking
/// what the store answers. Whole-database operations are `Runner::apply`'s.
pub(crate) fn apply_key_op(db: &dyn Store, m: &mut Model, op: &Op) {
    match op {
        Op::Get(k) => {
            let got = db.get(k).unwrap();
            m.expect(k, got.map(|r| Rec::of(&r.value, r.meta)), "get");
            assert_eq!(
                db.vsiz(k).unwrap(),
                m.get(k).map(|r| r.value.len()),
                "vsiz {k:?}"
            );
        }
        Op::View { key: k, min } => {
            let mut seen = None;
            let found = db
                .view(k, &mut |v, meta| seen = Some(Rec::of(v, meta)))
                .unwrap();
            assert_eq!(
                found,
                seen.is_some(),
                "view {k:?}: found without a call, or a call not found"
            );
            m.expect(k, seen, "view");
            let mut seen = None;
            let found = db
                .view_shared(k, *min, &mut |v, meta| {
                    seen = Some(Rec::of(v.bytes(), meta))
                })
                .unwrap();
            assert_eq!(found, seen.is_some(), "view_shared {k:?}");
            m.expect(k, seen, "view_shared");
        }
        Op::Put {
            key: k,
            value: v,
            flags,
            exp,
            plain,
        } => {
            let (flags, expires) = if *plain { (0, 0) } else { (*flags, exp.at()) };
            let r = if *plain {
                db.put(k, v)
            } else {
                db.put_with(k, v, flags, expires)
            };
            match m.stored(v, expires) {
                Ok(stored) => m.wrote(k, stored, flags, expires, r.unwrap()),
                Err(why) => m.refused(db, k, why, r, "put"),
            }
        }
        Op::PutKeep {
            key: k,
            value: v,
            flags,
            exp,
        } => {
            let r = db.putkeep(k, v, *flags, exp.at());
            match (m.get(k), m.stored(v, exp.at())) {
                (Some(_), _) => assert_eq!(r.unwrap(), Outcome::Exists, "putkeep {k:?}"),
                (None, Err(why)) => m.refused(db, k, why, r, "putkeep"),
                (None, Ok(stored)) => match r.unwrap() {
                    Outcome::Stored(meta) => m.wrote(k, stored, *flags, exp.at(), meta),
                    r => panic!("putkeep {k:?} over nothing: {r:?}"),
                },
            }
        }
        Op::Replace {
            key: k,
            value: v,
            flags,
            exp,
        } => {
            let r = db.replace(k, v, *flags, exp.at());
            match (m.get(k), m.stored(v, exp.at())) {
                (None, _) => assert_eq!(r.unwrap(), Outcome::NotFound, "replace {k:?}"),
                (Some(_), Err(why)) => m.refused(db, k, why, r, "replace"),
                (Some(cur), Ok(stored)) => match r.unwrap() {
                    Outcome::Stored(meta) => m.wrote(k, stored, *flags, exp.at(), meta),
                    r => panic!("replace {k:?} over {cur:?}: {r:?}"),
                },
            }
        }
        Op::Cas {
            key: k,
            ver,
            value: v,
            flags,
            exp,
        } => {
            let version = ver.resolve(m.get(k));
            let r = db.cas(k, version, v, *flags, exp.at());
            match (m.get(k), m.stored(v, exp.at())) {
                (None, _) => assert_eq!(r.unwrap(), Outcome::NotFound, "cas {k:?}"),
                (Some(c), _) if c.version != version => assert_eq!(
                    r.unwrap(),
                    Outcome::VersionMismatch,
                    "cas {k:?} version {version} over {c:?}"
                ),
                (Some(_), Err(why)) => m.refused(db, k, why, r, "cas"),
                (Some(cur), Ok(stored)) => match r.unwrap() {
                    Outcome::Stored(meta) => m.wrote(k, stored, *flags, exp.at(), meta),
                    r => panic!("cas {k:?} version {version} over {cur:?}: {r:?}"),
                },
            }
        }
        Op::Cat {
            key: k,
            value: v,
            front,
            create,
        } => {
            let r = match (*front, *create) {
                (false, true) => db.putcat(k, v).map(Some),
                (true, true) => db.prepend(k, v).map(Some),
                (front, false) => concat_existing(db, k, v, front),
            };
            let what = format!("concat (front {front}, create {create})");
            let cur = m.get(k).cloned();
            // What the record becomes: nothing stored (`None`), or the value (or why it is
            // refused) with its flags and expiry. A table's putcat merges columns.
            let next = match &cur {
                None if !*create => None,
                None => Some((m.stored(v, 0), 0, 0)),
                Some(c) if m.columns && !*front && *create => {
                    Some((m.merged(&c.value, v), c.flags, c.expires))
                }
                Some(c) => {
                    let joined = if *front {
                        [&v[..], &c.value].concat()
                    } else {
                        [&c.value, &v[..]].concat()
                    };
                    Some((m.stored(&joined, c.expires), c.flags, c.expires))
                }
            };
            match next {
                None => assert_eq!(r.unwrap(), None, "{what} {k:?} over nothing"),
                Some((Err(why), ..)) => m.refused(db, k, why, r, &what),
                Some((Ok(stored), flags, expires)) => match r.unwrap() {
                    Some(meta) => m.wrote(k, stored, flags, expires, meta),
                    None => panic!("{what} {k:?} over {cur:?}: not stored"),
                },
            }
        }
        Op::Shl {
            key: k,
            value: v,
            width,
        } => {
            let r = db.putshl(k, v, *width);
            // Tyrant's: an absent record gets the whole value; an existing one the last
            // `width` bytes of the two joined.
            let (next, flags, expires) = match m.get(k).cloned() {
                None => (v.to_vec(), 0, 0),
                Some(c) => {
                    let mut joined = c.value.clone();
                    joined.extend_from_slice(v);
                    let cut = joined.len().saturating_sub(*width);
                    (joined[cut..].to_vec(), c.flags, c.expires)
                }
            };
            match m.stored(&next, expires) {
                Ok(stored) => m.wrote(k, stored, flags, expires, r.unwrap()),
                Err(why) => m.refused(db, k, why, r, "putshl"),
            }
        }
        Op::Out(k) => {
            let had = m.remove(k).is_some();
            assert_eq!(db.out(k).unwrap(), had, "out {k:?}");
        }
        Op::OutIf { key: k, ver } => {
            let version = ver.resolve(m.get(k));
            let r = db.out_if(k, version).unwrap();
            match (m.get(k), r) {
                (None, Outcome::NotFound) => {}
                (Some(c), Outcome::VersionMismatch) if version != 0 && c.version != version => {}
                (Some(c), Outcome::Deleted) if version == 0 || c.version == version => {
                    m.remove(k);
                }
                (cur, r) => panic!("out_if {k:?} version {version} over {cur:?}: {r:?}"),
            }
        }
        Op::Touch { key: k, exp } => {
            let r = db.touch(k, exp.at());
            match m.get(k).cloned() {
                None => assert_eq!(r.unwrap(), None, "touch of absent {k:?}"),
                // A table's records never expire: a touch is refused.
                Some(_) if m.columns => m.refused(db, k, Refusal::Expiry, r, "touch"),
                Some(c) => {
                    let touched = Rec {
                        expires: exp.at(),
                        ..c
                    };
                    assert_eq!(
                        r.unwrap(),
                        Some(touched.meta()),
                        "touch {k:?}: the version stays, the expiry changes"
                    );
                    m.set(k, touched);
                }
            }
        }
        Op::AddInt { key: k, delta } => {
            let r = db.addint(k, *delta);
            let cur = m.get(k).cloned();
            let next = match &cur {
                None => Some((*delta, 0, 0)),
                Some(c) => <[u8; 4]>::try_from(&c.value[..]).ok().map(|b| {
                    (
                        i32::from_le_bytes(b).wrapping_add(*delta),
                        c.flags,
                        c.expires,
                    )
                }),
            };
            match next {
                None => {
                    assert!(
                        matches!(r, Err(Error::NotNumeric)),
                        "addint on a value of {} bytes: {r:?}",
                        cur.unwrap().value.len()
                    );
                    let got = db.get(k).unwrap().map(|r| Rec::of(&r.value, r.meta));
                    m.expect(k, got, "after a failed addint");
                }
                Some((n, flags, expires)) => match m.stored(&n.to_le_bytes(), expires) {
                    Ok(stored) => {
                        assert_eq!(r.unwrap(), n, "addint {k:?} over {cur:?}");
                        m.learn(db, k, stored, flags, expires);
                    }
                    Err(why) => m.refused(db, k, why, r, "addint"),
                },
            }
        }
        Op::AddDouble { key: k, delta } => {
            let r = db.adddouble(k, *delta);
            let cur = m.get(k).cloned();
            // Tokyo Cabinet's: an absent record becomes `delta` itself; any sum is stored,
            // an infinity or NaN included.
            let next = match &cur {
                None => Some((*delta, 0, 0)),
                Some(c) => <[u8; 8]>::try_from(&c.value[..])
                    .ok()
                    .map(|b| (f64::from_le_bytes(b) + delta, c.flags, c.expires)),
            };
            match next {
                Some((n, flags, expires)) => match m.stored(&n.to_le_bytes(), expires) {
                    Ok(stored) => {
                        assert_eq!(r.unwrap().to_bits(), n.to_bits(), "adddouble {k:?}");
                        m.learn(db, k, stored, flags, expires);
                    }
                    Err(why) => m.refused(db, k, why, r, "adddouble"),
                },
                _ => {
                    assert!(
                        matches!(r, Err(Error::NotNumeric)),
                        "adddouble {k:?} over {cur:?}: {r:?}"
                    );
                    let got = db.get(k).unwrap().map(|r| Rec::of(&r.value, r.meta));
                    m.expect(k, got, "after a failed adddouble");
                }
            }
        }
        Op::Incr {
            key: k,
            delta,
            decr,
            ver,
            plain,
        } => {
            let cas = if *plain { 0 } else { ver.resolve(m.get(k)) };
            let r = if *plain {
                db.incr_decimal(k, *delta, *decr).map(|r| match r {
                    Some((n, meta)) => Counted::Done(n, meta),
                    None => Counted::NotFound,
                })
            } else {
                db.incr_decimal_if(k, *delta, *decr, cas)
            };
            let cur = m.get(k).cloned();
            match (&cur, r) {
                (None, Ok(Counted::NotFound)) => {}
                (Some(c), Ok(Counted::VersionMismatch)) if cas != 0 && cas != c.version => {}
                (Some(c), r) if cas == 0 || cas == c.version => {
                    let n = model_decimal(&c.value).map(|n| {
                        if *decr {
                            n.saturating_sub(*delta)
                        } else {
                            n.wrapping_add(*delta)
                        }
                    });
                    let stored = n.map(|n| m.stored(&model_counter(n, c.value.len()), c.expires));
                    match (n, stored, r) {
                        (None, _, Err(Error::NotNumeric)) => {
                            let got = db.get(k).unwrap().map(|r| Rec::of(&r.value, r.meta));
                            m.expect(k, got, "after a failed incr");
                        }
                        (Some(n), Some(Ok(stored)), Ok(Counted::Done(got, meta))) => {
                            assert_eq!(got, n, "incr {k:?} of {:?}", Bytes(c.value.clone()));
                            m.wrote(k, stored, c.flags, c.expires, meta);
                        }
                        (Some(_), Some(Err(why)), r) => m.refused(db, k, why, r, "incr"),
                        (n, _, r) => panic!(
                            "incr {k:?} of {:?} (decimal {n:?}): {r:?}",
                            Bytes(c.value.clone())
                        ),
                    }
                }
                (cur, r) => panic!("incr {k:?} with cas {cas} over {cur:?}: {r:?}"),
            }
        }
        Op::GetMulti(keys) => {
            let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
            let got = db.get_multi(&refs).unwrap();
            assert_eq!(got.len(), keys.len(), "get_multi answers once per key");
            for (k, r) in keys.iter().zip(got) {
                m.expect(k, r.map(|r| Rec::of(&r.value, r.meta)), "get_multi");
            }
        }
        Op::Batch { items, poison } => {
            let mut ops: Vec<BatchOp> = items
                .iter()
                .map(|(k, v)| match v {
                    Some((v, flags, exp)) => BatchOp::Put {
                        key: k.to_vec(),
                        value: v.to_vec(),
                        flags: *flags,
                        expires: exp.at(),
                    },
                    None => BatchOp::Remove { key: k.to_vec() },
                })
                .collect();
            let unchanged = |m: &Model, what: &str| {
                for (k, _) in items {
                    let got = db.get(k).unwrap().map(|r| Rec::of(&r.value, r.meta));
                    m.expect(k, got, what);
                }
            };
            if let Some(at) = poison {
                let huge = BatchOp::Put {
                    key: vec![b'x'; MAX_KEY_LEN + 1],
                    value: Vec::new(),
                    flags: 0,
                    expires: 0,
                };
                ops.insert((*at).min(ops.len()), huge);
                too_large(db.write_batch(&ops), "a batch");
                return unchanged(m, "after a refused batch");
            }
            // The first put the kind refuses refuses the whole batch.
            let refusal = items.iter().find_map(|(_, v)| {
                v.as_ref()
                    .and_then(|(v, _, exp)| m.stored(v, exp.at()).err())
            });
            let r = db.write_batch(&ops);
            if let Some(why) = refusal {
                why.check(&r, "a batch");
                return unchanged(m, "after a refused batch");
            }
            r.unwrap();
            // In order: the last operation on a key decides.
            let mut last: BTreeMap<&Bytes, &Option<Put>> = BTreeMap::new();
            for (k, v) in items {
                last.insert(k, v);
            }
            for (k, v) in last {
                match v {
                    Some((v, flags, exp)) => {
                        let stored = m.stored(v, exp.at()).unwrap();
                        m.learn(db, k, stored, *flags, exp.at())
                    }
                    None => {
                        m.remove(k);
                        assert_eq!(db.get(k).unwrap(), None, "{k:?} removed by a batch");
                    }
                }
            }
        }
        Op::Accept { key: k, decide } => {
            let cur = m.get(k).cloned();
            let mut calls = 0;
            let mut seen = Vec::new();
            let r = db.accept(k, &mut |c| {
                calls += 1;
                seen.push(c.map(|c| Rec::of(c.value, c.meta)));
                match decide {
                    Decide::Keep => Decision::Keep,
                    Decide::Touch(e) => Decision::Touch { expires: e.at() },
                    Decide::Remove => Decision::Remove,
                }
            });
            assert!(calls >= 1, "accept {k:?} never called its visitor");
            for s in seen {
                assert_eq!(s, cur, "accept {k:?}: what the visitor was shown");
            }
            match (decide, cur) {
                (Decide::Keep, cur) => {
                    assert_eq!(r.unwrap(), cur.map(|c| c.meta()), "accept {k:?} keeping")
                }
                (Decide::Touch(_), None) | (Decide::Remove, None) => {
                    assert_eq!(r.unwrap(), None, "accept {k:?} on an absent record")
                }
                // A table's records never expire: a touch is refused.
                (Decide::Touch(_), Some(_)) if m.columns => {
                    m.refused(db, k, Refusal::Expiry, r, "accept touching")
                }
                (Decide::Touch(e), Some(c)) => {
                    let touched = Rec {
                        expires: e.at(),
                        ..c
                    };
                    assert_eq!(r.unwrap(), Some(touched.meta()), "accept {k:?} touching");
                    m.set(k, touched);
                }
                (Decide::Remove, Some(_)) => {
                    assert_eq!(r.unwrap(), None, "accept {k:?} removing");
                    m.remove(k);
                }
            }
        }
        Op::TooLarge(which) => {
            let k = vec![b'k'; MAX_KEY_LEN + 1];
            // A value every kind takes (a table's: a column).
            let v: &[u8] = if m.columns { b"c\0v" } else { b"v" };
            match which {
                0 => too_large(db.put_with(&k, v, 1, 0), "put_with"),
                1 => too_large(db.putkeep(&k, v, 0, 0), "putkeep"),
                2 => too_large(db.replace(&k, v, 0, 0), "replace"),
                3 => too_large(db.cas(&k, 1, v, 0, 0), "cas"),
                4 => too_large(db.putshl(&k, v, 10), "putshl"),
                _ => too_large(db.putcat(&k, v), "putcat"),
            }
        }
        other => panic!("{other:?} is not an operation on keys"),
    }
}
