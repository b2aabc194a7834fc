//! The record operations of `Store` (its provided methods, built on `accept`), each with one
//! meaning, checked once here on every kind of the registry: a new kind joins by its entry.
//! Protocol executors map their wire forms onto these and test only that mapping.

use kura_engine::registry::{Selector, KINDS};
use kura_engine::store::{now_secs, MAX_VALUE_LEN};
use kura_engine::KyotoOps;
use kura_engine::MemcachedOps;
use kura_engine::TokyoOps;
use kura_engine::{Counted, Error, Meta, OpenMode, Outcome, Params, Store};

/// Run `f` on a fresh database of every kind (the persistent ones in a temporary directory),
/// with the kind's form of each key the tests name: the key itself, or on a kind keyed by ids
/// (the fixed-length database) an id of its own for each (keys longer than 64 bytes, which
/// every kind refuses, are passed as they are).
/// Not on a table: these tests' values are bytes, expiry times and numbers in a byte form,
/// where a table's values are columns and its records never expire (tests/conformance runs
/// every one of these operations on tables against a model of the table's rules).
fn each_kind(f: impl Fn(&dyn Store, &str, &dyn Fn(&[u8]) -> Vec<u8>)) {
    each_kind_and_table(|db, kind, key, _| f(db, kind, key), false)
}

/// As `each_kind`, on tables too (`tables`), with the kind's form of each value the tests
/// name: the value itself, or on a table a record of one column, `v`, holding it.
fn each_kind_and_table(
    f: impl Fn(&dyn Store, &str, &dyn Fn(&[u8]) -> Vec<u8>, &dyn Fn(&[u8]) -> Vec<u8>),
    tables: bool,
) {
    let dir = tempfile::tempdir().unwrap();
    for (i, k) in KINDS.iter().enumerate() {
        if k.caps.columns && !tables {
            continue;
        }
        let path = match k.selector {
            Selector::Exactly(s) => s.to_string(),
            Selector::Suffix(s) => format!("{}/db{i}{s}", dir.path().display()),
        };
        let ids = k.caps.integer_keys;
        // Values up to a few KiB (the default width is 255 bytes).
        let params = Params::parse(if ids { "width=8192" } else { "" }).unwrap();
        let db = (k.open)(path.as_ref(), &params, OpenMode::Create)
            .unwrap()
            .store;
        let named = std::cell::RefCell::new(Vec::<Vec<u8>>::new());
        let key = |name: &[u8]| -> Vec<u8> {
            if !ids || name.len() > 64 {
                return name.to_vec();
            }
            let mut named = named.borrow_mut();
            let n = match named.iter().position(|k| k == name) {
                Some(n) => n,
                None => {
                    named.push(name.to_vec());
                    named.len() - 1
                }
            };
            (n + 1).to_string().into_bytes()
        };
        let columns = k.caps.columns;
        let value = |v: &[u8]| -> Vec<u8> {
            if columns {
                [&b"v\0"[..], v].concat()
            } else {
                v.to_vec()
            }
        };
        f(&*db, k.name, &key, &value);
        db.close().unwrap();
    }
}

fn val(db: &dyn Store, key: &[u8]) -> Option<Vec<u8>> {
    db.get(key).unwrap().map(|r| r.value)
}

fn meta(db: &dyn Store, key: &[u8]) -> Meta {
    db.get(key).unwrap().unwrap().meta
}

#[test]
fn putkeep_replace_cas_and_deletes() {
    each_kind_and_table(
        |db, kind, key, v| {
            assert!(matches!(
                db.putkeep(&key(b"k"), &v(b"v"), 1, 0).unwrap(),
                Outcome::Stored(_)
            ));
            assert_eq!(
                db.putkeep(&key(b"k"), &v(b"w"), 1, 0).unwrap(),
                Outcome::Exists
            );
            assert_eq!(val(db, &key(b"k")).unwrap(), v(b"v"), "{kind}");
            assert_eq!(
                db.replace(&key(b"x"), &v(b"v"), 0, 0).unwrap(),
                Outcome::NotFound
            );
            assert_eq!(db.get(&key(b"x")).unwrap(), None);
            let Outcome::Stored(m) = db.replace(&key(b"k"), &v(b"w"), 3, 0).unwrap() else {
                panic!("{kind}: replace of an existing key failed")
            };
            assert_eq!(m.flags, 3);
            // cas on the version.
            assert_eq!(
                db.cas(&key(b"no"), 1, &v(b"v"), 0, 0).unwrap(),
                Outcome::NotFound
            );
            assert_eq!(
                db.cas(&key(b"k"), m.version + 100, &v(b"x"), 0, 0).unwrap(),
                Outcome::VersionMismatch
            );
            let Outcome::Stored(m2) = db.cas(&key(b"k"), m.version, &v(b"xyz"), 0, 0).unwrap()
            else {
                panic!("{kind}: cas with the right version failed")
            };
            assert_eq!(db.vsiz(&key(b"k")).unwrap(), Some(v(b"xyz").len()));
            assert_eq!(db.vsiz(&key(b"nope")).unwrap(), None);
            assert_eq!(
                db.out_if(&key(b"k"), m.version).unwrap(),
                Outcome::VersionMismatch
            );
            assert_eq!(db.out_if(&key(b"k"), m2.version).unwrap(), Outcome::Deleted);
            assert_eq!(db.out_if(&key(b"k"), 0).unwrap(), Outcome::NotFound);
            db.put(&key(b"k"), &v(b"v")).unwrap();
            assert!(db.out(&key(b"k")).unwrap());
            assert!(!db.out(&key(b"k")).unwrap());
        },
        true,
    );
}

#[test]
fn putcat_prepend_and_concat() {
    each_kind(|db, kind, key| {
        db.putcat(&key(b"c"), b"ab").unwrap();
        db.putcat(&key(b"c"), b"cd").unwrap();
        assert_eq!(val(db, &key(b"c")).unwrap(), b"abcd", "{kind}");
        db.prepend(&key(b"c"), b"XY").unwrap();
        assert_eq!(val(db, &key(b"c")).unwrap(), b"XYabcd");
        db.prepend(&key(b"p"), b"new").unwrap();
        assert_eq!(val(db, &key(b"p")).unwrap(), b"new");
        assert_eq!(
            db.concat_if(&key(b"absent"), b"x", false, 0, &|_, _| true)
                .unwrap(),
            Outcome::NotFound
        );
        assert_eq!(db.get(&key(b"absent")).unwrap(), None);
        // putcat keeps flags and expiration.
        let later = now_secs() + 1000;
        db.put_with(&key(b"f"), b"1", 9, later).unwrap();
        let m = db.putcat(&key(b"f"), b"2").unwrap();
        assert_eq!((m.flags, m.expires), (9, later));
    });
}

/// Tyrant's putshl creates an absent record with the whole value: the engine's putshl used
/// to cut it to `width` as well, which Tyrant (`tculogadbputshl` → `tcadbputproc`) does not.
#[test]
fn putshl_is_tyrants() {
    each_kind(|db, kind, key| {
        db.putshl(&key(b"s"), b"abcdef", 2).unwrap();
        assert_eq!(val(db, &key(b"s")).unwrap(), b"abcdef", "{kind}");
        db.putshl(&key(b"s"), b"g", 3).unwrap();
        assert_eq!(val(db, &key(b"s")).unwrap(), b"efg");
        db.putshl(&key(b"s"), b"123456", 4).unwrap();
        assert_eq!(val(db, &key(b"s")).unwrap(), b"3456");
        db.putshl(&key(b"s"), b"78", 10).unwrap();
        assert_eq!(val(db, &key(b"s")).unwrap(), b"345678");
        db.putshl(&key(b"s"), b"", 0).unwrap();
        assert_eq!(val(db, &key(b"s")).unwrap(), b"");
        // An existing record keeps its flags and expiry.
        let later = now_secs() + 1000;
        db.put_with(&key(b"f"), b"xy", 7, later).unwrap();
        let m = db.putshl(&key(b"f"), b"z", 2).unwrap();
        assert_eq!((m.flags, m.expires), (7, later));
        assert_eq!(val(db, &key(b"f")).unwrap(), b"yz");
    });
}

#[test]
fn addint_is_tokyo_cabinets() {
    each_kind(|db, kind, key| {
        assert_eq!(db.addint(&key(b"i"), 5).unwrap(), 5, "{kind}");
        assert_eq!(db.addint(&key(b"i"), -7).unwrap(), -2);
        assert_eq!(val(db, &key(b"i")).unwrap(), (-2i32).to_le_bytes());
        db.put_with(&key(b"w"), &i32::MAX.to_le_bytes(), 4, 0)
            .unwrap();
        assert_eq!(
            db.addint(&key(b"w"), 2).unwrap(),
            i32::MIN + 1,
            "wraps as a C int"
        );
        assert_eq!(meta(db, &key(b"w")).flags, 4);
        db.put(&key(b"s"), b"12345").unwrap();
        assert!(matches!(db.addint(&key(b"s"), 1), Err(Error::NotNumeric)));
        assert_eq!(val(db, &key(b"s")).unwrap(), b"12345");
    });
}

/// Tokyo Cabinet's adddouble stores whatever sum it gets: the engine's adddouble used to
/// refuse an infinite or NaN sum, which Tyrant's adddouble stores (and answers: an infinity as
/// a number, NaN as a failure).
#[test]
fn adddouble_is_tokyo_cabinets() {
    each_kind(|db, kind, key| {
        assert_eq!(db.adddouble(&key(b"d"), 1.5).unwrap(), 1.5, "{kind}");
        assert_eq!(db.adddouble(&key(b"d"), -0.25).unwrap(), 1.25);
        assert_eq!(val(db, &key(b"d")).unwrap(), 1.25f64.to_le_bytes());
        assert_eq!(db.adddouble(&key(b"d"), 0.0).unwrap(), 1.25);
        assert_eq!(
            db.adddouble(&key(b"d"), f64::INFINITY).unwrap(),
            f64::INFINITY
        );
        assert_eq!(val(db, &key(b"d")).unwrap(), f64::INFINITY.to_le_bytes());
        assert_eq!(db.adddouble(&key(b"d"), 1.0).unwrap(), f64::INFINITY);
        assert!(db
            .adddouble(&key(b"d"), f64::NEG_INFINITY)
            .unwrap()
            .is_nan());
        assert!(f64::from_le_bytes(val(db, &key(b"d")).unwrap().try_into().unwrap()).is_nan());
        // An absent record is created with the number itself (-0.0 stays negative).
        assert_eq!(
            db.adddouble(&key(b"z"), -0.0).unwrap().to_bits(),
            (-0.0f64).to_bits()
        );
        db.put(&key(b"i"), &1i32.to_le_bytes()).unwrap();
        assert!(matches!(
            db.adddouble(&key(b"i"), 1.0),
            Err(Error::NotNumeric)
        ));
        assert_eq!(val(db, &key(b"i")).unwrap(), 1i32.to_le_bytes());
    });
}

/// memcached's incr / decr: the number as `strtoull` reads it, a shorter result padded with
/// spaces to the old length. The engine's incr_decimal used to read only digits followed by
/// spaces and to store the result unpadded; the server's own copy had memcached's rules.
#[test]
fn incr_decimal_is_memcacheds() {
    each_kind(|db, kind, key| {
        assert_eq!(
            db.incr_decimal_if(&key(b"n"), 1, false, 0).unwrap(),
            Counted::NotFound
        );
        db.put_with(&key(b"n"), b"100", 5, 0).unwrap();
        let Counted::Done(n, m) = db.incr_decimal_if(&key(b"n"), 95, true, 0).unwrap() else {
            panic!("{kind}")
        };
        assert_eq!(n, 5);
        assert_eq!(
            val(db, &key(b"n")).unwrap(),
            b"5  ",
            "{kind}: padded in place"
        );
        assert_eq!(meta(db, &key(b"n")), m);
        assert_eq!(m.flags, 5);
        assert_eq!(db.incr_decimal(&key(b"n"), 10, true).unwrap().unwrap().0, 0);
        assert_eq!(
            db.incr_decimal(&key(b"n"), 1234, false).unwrap().unwrap().0,
            1234
        );
        assert_eq!(val(db, &key(b"n")).unwrap(), b"1234");
        // incr wraps at 2^64.
        db.put(&key(b"n"), u64::MAX.to_string().as_bytes()).unwrap();
        assert_eq!(db.incr_decimal(&key(b"n"), 2, false).unwrap().unwrap().0, 1);
        assert_eq!(
            val(db, &key(b"n")).unwrap(),
            format!("{:<20}", 1).as_bytes()
        );
        // memcached's reading: white space around the digits, anything after a space.
        for (v, want) in [
            (&b" 12"[..], Some(13)),
            (b"12 junk", Some(13)),
            (b"+12", Some(13)),
            (b"12x", None),
            (b"", None),
            (b"-1", None),
            (b"18446744073709551616", None),
        ] {
            db.put(&key(b"v"), v).unwrap();
            match db.incr_decimal_if(&key(b"v"), 1, false, 0) {
                Ok(Counted::Done(n, _)) => assert_eq!(Some(n), want, "{kind}: {v:?}"),
                Err(Error::NotNumeric) => {
                    assert_eq!(want, None, "{kind}: {v:?}");
                    assert_eq!(val(db, &key(b"v")).unwrap(), v, "unchanged");
                }
                other => panic!("{kind}: {v:?}: {other:?}"),
            }
        }
        assert!(matches!(
            db.incr_decimal(&key(b"v"), 1, false),
            Err(Error::NotNumeric)
        ));
        // With a cas: only while the record has that version.
        let m = db.put(&key(b"c"), b"1").unwrap();
        assert_eq!(
            db.incr_decimal_if(&key(b"c"), 1, false, m.version + 1)
                .unwrap(),
            Counted::VersionMismatch
        );
        assert!(matches!(
            db.incr_decimal_if(&key(b"c"), 1, false, m.version).unwrap(),
            Counted::Done(2, _)
        ));
    });
}

/// memcached's append / prepend: never creates, keeps flags and expiry, honours a cas and the
/// caller's size limit.
#[test]
fn concat_if_is_memcacheds() {
    each_kind(|db, kind, key| {
        let any = |_: u32, _: usize| true;
        assert_eq!(
            db.concat_if(&key(b"a"), b"x", false, 0, &any).unwrap(),
            Outcome::NotFound
        );
        assert_eq!(db.get(&key(b"a")).unwrap(), None, "{kind}");
        let later = now_secs() + 1000;
        let m = db.put_with(&key(b"a"), b"mid", 3, later).unwrap();
        assert_eq!(
            db.concat_if(&key(b"a"), b"x", false, m.version + 1, &any)
                .unwrap(),
            Outcome::VersionMismatch
        );
        let Outcome::Stored(m2) = db
            .concat_if(&key(b"a"), b"_end", false, m.version, &any)
            .unwrap()
        else {
            panic!("{kind}")
        };
        assert_eq!((m2.flags, m2.expires), (3, later));
        assert!(m2.version != m.version);
        db.concat_if(&key(b"a"), b"start_", true, 0, &any).unwrap();
        assert_eq!(val(db, &key(b"a")).unwrap(), b"start_mid_end");
        // The limit sees the record's flags and the new length.
        let seen = std::cell::Cell::new((0, 0));
        let small = |flags: u32, len: usize| {
            seen.set((flags, len));
            len <= 14
        };
        assert_eq!(
            db.concat_if(&key(b"a"), b"!!", false, 0, &small).unwrap(),
            Outcome::TooLarge
        );
        assert_eq!(seen.get(), (3, 15));
        assert_eq!(val(db, &key(b"a")).unwrap(), b"start_mid_end");
        assert!(matches!(
            db.concat_if(&key(b"a"), b"!", false, 0, &small).unwrap(),
            Outcome::Stored(_)
        ));
    });
}

/// Kyoto Cabinet's append: creates, appends, takes the new expiration, keeps the flags.
#[test]
fn append_with_is_kyoto_cabinets() {
    each_kind(|db, kind, key| {
        let later = now_secs() + 1000;
        let m = db.append_with(&key(b"k"), b"ab", later).unwrap();
        assert_eq!((m.flags, m.expires), (0, later), "{kind}");
        db.put_with(&key(b"f"), b"x", 6, later).unwrap();
        let m = db.append_with(&key(b"f"), b"yz", 0).unwrap();
        assert_eq!((m.flags, m.expires), (6, 0));
        assert_eq!(val(db, &key(b"f")).unwrap(), b"xyz");
        assert!(matches!(
            db.append_with(&vec![b'k'; 70_000], b"v", 0),
            Err(Error::TooLarge(_))
        ));
    });
}

/// Kyoto Cabinet's increment on 8-byte big-endian integers, with its `orig` conventions.
#[test]
fn increment_is_kyoto_cabinets() {
    each_kind(|db, kind, key| {
        let later = now_secs() + 1000;
        assert_eq!(
            db.increment(&key(b"n"), 5, 0, 0).unwrap(),
            Some(5),
            "{kind}"
        );
        assert_eq!(db.increment(&key(b"n"), -2, 0, later).unwrap(), Some(3));
        assert_eq!(val(db, &key(b"n")).unwrap(), 3i64.to_be_bytes());
        assert_eq!(meta(db, &key(b"n")).expires, later);
        // Adding 0 reads without writing.
        let before = meta(db, &key(b"n"));
        assert_eq!(db.increment(&key(b"n"), 0, 0, 0).unwrap(), Some(3));
        assert_eq!(meta(db, &key(b"n")), before);
        // orig: the start of an absent record; MIN fails there; MAX sets.
        assert_eq!(db.increment(&key(b"fresh"), 1, i64::MIN, 0).unwrap(), None);
        assert_eq!(db.get(&key(b"fresh")).unwrap(), None);
        assert_eq!(db.increment(&key(b"fresh"), 1, 10, 0).unwrap(), Some(11));
        assert_eq!(db.increment(&key(b"n"), 7, i64::MAX, 0).unwrap(), Some(7));
        assert_eq!(db.increment(&key(b"new"), 7, i64::MAX, 0).unwrap(), Some(7));
        // Wraps; another size fails and changes nothing.
        db.put(&key(b"w"), &i64::MAX.to_be_bytes()).unwrap();
        assert_eq!(db.increment(&key(b"w"), 1, 0, 0).unwrap(), Some(i64::MIN));
        db.put(&key(b"s"), b"abc").unwrap();
        assert!(matches!(
            db.increment(&key(b"s"), 1, 0, 0),
            Err(Error::NotNumeric)
        ));
        assert_eq!(val(db, &key(b"s")).unwrap(), b"abc");
    });
}

/// Kyoto Cabinet's increment_double on its 16-byte fixed-point numbers.
#[test]
fn increment_double_is_kyoto_cabinets() {
    each_kind(|db, kind, key| {
        assert_eq!(
            db.increment_double(&key(b"d"), 1.5, 0.0, 0).unwrap(),
            Some(1.5),
            "{kind}"
        );
        assert_eq!(
            db.increment_double(&key(b"d"), 2.25, 0.0, 0).unwrap(),
            Some(3.75)
        );
        let before = meta(db, &key(b"d"));
        assert_eq!(
            db.increment_double(&key(b"d"), 0.0, 0.0, 0).unwrap(),
            Some(3.75)
        );
        assert_eq!(
            meta(db, &key(b"d")),
            before,
            "adding 0 reads without writing"
        );
        let v = val(db, &key(b"d")).unwrap();
        assert_eq!(&v[..8], 3i64.to_be_bytes());
        assert_eq!(&v[8..], 750_000_000_000_000i64.to_be_bytes());
        assert_eq!(
            db.increment_double(&key(b"d"), -1.25, 0.0, 0).unwrap(),
            Some(2.5)
        );
        // orig: -inf fails on an absent record, +inf sets.
        assert_eq!(
            db.increment_double(&key(b"x"), 1.0, f64::NEG_INFINITY, 0)
                .unwrap(),
            None
        );
        assert_eq!(db.get(&key(b"x")).unwrap(), None);
        assert_eq!(
            db.increment_double(&key(b"x"), 1.0, 2.5, 0).unwrap(),
            Some(3.5)
        );
        assert_eq!(
            db.increment_double(&key(b"d"), 4.0, f64::INFINITY, 0)
                .unwrap(),
            Some(4.0)
        );
        // Infinities are stored as such and stay.
        assert_eq!(
            db.increment_double(&key(b"d"), f64::INFINITY, 0.0, 0)
                .unwrap(),
            Some(f64::INFINITY)
        );
        assert_eq!(
            db.increment_double(&key(b"d"), 1.0, 0.0, 0).unwrap(),
            Some(f64::INFINITY)
        );
        assert_eq!(
            db.increment_double(&key(b"x"), f64::NAN, 0.0, 0).unwrap(),
            None
        );
        assert_eq!(
            db.increment_double(&key(b"x"), 0.0, 0.0, 0).unwrap(),
            Some(3.5)
        );
        db.put(&key(b"i"), &1i64.to_be_bytes()).unwrap();
        assert!(matches!(
            db.increment_double(&key(b"i"), 1.0, 0.0, 0),
            Err(Error::NotNumeric)
        ));
        assert_eq!(val(db, &key(b"i")).unwrap(), 1i64.to_be_bytes());
    });
}

/// Kyoto Cabinet's cas compares values; a missing old value means "absent", a missing new
/// value removes.
#[test]
fn cas_value_is_kyoto_cabinets() {
    each_kind(|db, kind, key| {
        let later = now_secs() + 1000;
        assert!(
            db.cas_value(&key(b"k"), None, Some(b"v1"), later).unwrap(),
            "{kind}"
        );
        assert_eq!(meta(db, &key(b"k")).expires, later);
        assert!(!db.cas_value(&key(b"k"), None, Some(b"v2"), 0).unwrap());
        assert!(!db
            .cas_value(&key(b"k"), Some(b"nope"), Some(b"v2"), 0)
            .unwrap());
        assert_eq!(val(db, &key(b"k")).unwrap(), b"v1");
        assert!(db
            .cas_value(&key(b"k"), Some(b"v1"), Some(b"v2"), 0)
            .unwrap());
        assert_eq!(val(db, &key(b"k")).unwrap(), b"v2");
        assert!(db.cas_value(&key(b"k"), Some(b"v2"), None, 0).unwrap());
        assert_eq!(db.get(&key(b"k")).unwrap(), None);
        assert!(db.cas_value(&key(b"k"), None, None, 0).unwrap());
        assert!(!db.cas_value(&key(b"k"), Some(b"v2"), None, 0).unwrap());
        assert!(matches!(
            db.cas_value(&key(b"k"), None, Some(&vec![0; MAX_VALUE_LEN + 1]), 0),
            Err(Error::TooLarge(_))
        ));
    });
}

#[test]
fn seize_takes_and_removes() {
    each_kind(|db, kind, key| {
        let later = now_secs() + 1000;
        db.put_with(&key(b"k"), b"v", 2, later).unwrap();
        let r = db.seize(&key(b"k")).unwrap().unwrap();
        assert_eq!(
            (&r.value[..], r.meta.flags, r.meta.expires),
            (&b"v"[..], 2, later)
        );
        assert_eq!(db.get(&key(b"k")).unwrap(), None, "{kind}");
        assert_eq!(db.seize(&key(b"k")).unwrap(), None);
    });
}

/// `check_put` agrees with `write_batch` on every kind: what it accepts a batch stores, what
/// it refuses a batch refuses; it writes nothing.
#[test]
fn check_put_agrees_with_write_batch() {
    each_kind_and_table(
        |db, name, key, v| {
            let big = MAX_VALUE_LEN + 1;
            let cases: Vec<(Vec<u8>, usize)> = vec![
                (key(b"a"), 10),
                (key(b"b"), 0),
                (key(b"c"), 9000), // over the fixed-length kind's width here
                (vec![b'k'; 70_000], 1),
                (key(b"d"), big),
                (b"max".to_vec(), 1),
                (b"x".to_vec(), 1),
            ];
            for (k, len) in cases {
                // The kind's value of `len` bytes of its own (on a table, the column's name
                // too).
                let verdict = db.check_put(&k, v(b"").len() + len);
                assert_eq!(db.count(), 0, "{name}: check_put wrote");
                if len > 1 << 20 {
                    // Not built: the shared limit refuses it on every kind.
                    assert!(matches!(verdict, Err(Error::TooLarge(_))), "{name}");
                    continue;
                }
                let op = kura_engine::BatchOp::Put {
                    key: k.clone(),
                    value: v(&vec![b'v'; len]),
                    flags: 0,
                    expires: 0,
                };
                let stored = db.write_batch(&[op]);
                assert_eq!(
                    verdict.is_ok(),
                    stored.is_ok(),
                    "{name}: key {:?} value {len}: check_put {verdict:?}, write_batch {stored:?}",
                    String::from_utf8_lossy(&k[..k.len().min(8)])
                );
                db.vanish().unwrap();
            }
        },
        true,
    );
}
