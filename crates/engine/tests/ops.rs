//! The record operations of `Store` (its provided methods, built on `accept`), each with one
//! meaning, checked once here on every kind of the registry: a new kind joins by its entry.
//! Protocol executors map their wire forms onto these and test only that mapping.

use kura_engine::registry::{Selector, KINDS};
use kura_engine::store::{now_secs, MAX_VALUE_LEN};
use kura_engine::{Counted, Error, Meta, OpenMode, Outcome, Params, Store};

/// Run `f` on a fresh database of every kind (the persistent ones in a temporary directory).
fn each_kind(f: impl Fn(&dyn Store, &str)) {
    let dir = tempfile::tempdir().unwrap();
    for (i, k) in KINDS.iter().enumerate() {
        let path = match k.selector {
            Selector::Exactly(s) => s.to_string(),
            Selector::Suffix(s) => format!("{}/db{i}{s}", dir.path().display()),
        };
        let db = (k.open)(path.as_ref(), &Params::default(), OpenMode::Create)
            .unwrap()
            .store;
        f(&*db, k.name);
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
    each_kind(|db, kind| {
        assert!(matches!(
            db.putkeep(b"k", b"v", 1, 0).unwrap(),
            Outcome::Stored(_)
        ));
        assert_eq!(db.putkeep(b"k", b"w", 1, 0).unwrap(), Outcome::Exists);
        assert_eq!(val(db, b"k").unwrap(), b"v", "{kind}");
        assert_eq!(db.replace(b"x", b"v", 0, 0).unwrap(), Outcome::NotFound);
        assert_eq!(db.get(b"x").unwrap(), None);
        let Outcome::Stored(m) = db.replace(b"k", b"w", 3, 0).unwrap() else {
            panic!("{kind}: replace of an existing key failed")
        };
        assert_eq!(m.flags, 3);
        // cas on the version.
        assert_eq!(db.cas(b"no", 1, b"v", 0, 0).unwrap(), Outcome::NotFound);
        assert_eq!(
            db.cas(b"k", m.version + 100, b"x", 0, 0).unwrap(),
            Outcome::VersionMismatch
        );
        let Outcome::Stored(m2) = db.cas(b"k", m.version, b"xyz", 0, 0).unwrap() else {
            panic!("{kind}: cas with the right version failed")
        };
        assert_eq!(db.vsiz(b"k").unwrap(), Some(3));
        assert_eq!(db.vsiz(b"nope").unwrap(), None);
        assert_eq!(
            db.out_if(b"k", m.version).unwrap(),
            Outcome::VersionMismatch
        );
        assert_eq!(db.out_if(b"k", m2.version).unwrap(), Outcome::Deleted);
        assert_eq!(db.out_if(b"k", 0).unwrap(), Outcome::NotFound);
        db.put(b"k", b"v").unwrap();
        assert!(db.out(b"k").unwrap());
        assert!(!db.out(b"k").unwrap());
    });
}

#[test]
fn putcat_prepend_and_concat() {
    each_kind(|db, kind| {
        db.putcat(b"c", b"ab").unwrap();
        db.putcat(b"c", b"cd").unwrap();
        assert_eq!(val(db, b"c").unwrap(), b"abcd", "{kind}");
        db.prepend(b"c", b"XY").unwrap();
        assert_eq!(val(db, b"c").unwrap(), b"XYabcd");
        db.prepend(b"p", b"new").unwrap();
        assert_eq!(val(db, b"p").unwrap(), b"new");
        assert_eq!(db.concat(b"absent", b"x", false, false).unwrap(), None);
        assert_eq!(db.get(b"absent").unwrap(), None);
        // putcat keeps flags and expiration.
        let later = now_secs() + 1000;
        db.put_with(b"f", b"1", 9, later).unwrap();
        let m = db.putcat(b"f", b"2").unwrap();
        assert_eq!((m.flags, m.expires), (9, later));
    });
}

/// Tyrant's putshl creates an absent record with the whole value: the engine's putshl used
/// to cut it to `width` as well, which Tyrant (`tculogadbputshl` → `tcadbputproc`) does not.
#[test]
fn putshl_is_tyrants() {
    each_kind(|db, kind| {
        db.putshl(b"s", b"abcdef", 2).unwrap();
        assert_eq!(val(db, b"s").unwrap(), b"abcdef", "{kind}");
        db.putshl(b"s", b"g", 3).unwrap();
        assert_eq!(val(db, b"s").unwrap(), b"efg");
        db.putshl(b"s", b"123456", 4).unwrap();
        assert_eq!(val(db, b"s").unwrap(), b"3456");
        db.putshl(b"s", b"78", 10).unwrap();
        assert_eq!(val(db, b"s").unwrap(), b"345678");
        db.putshl(b"s", b"", 0).unwrap();
        assert_eq!(val(db, b"s").unwrap(), b"");
        // An existing record keeps its flags and expiry.
        let later = now_secs() + 1000;
        db.put_with(b"f", b"xy", 7, later).unwrap();
        let m = db.putshl(b"f", b"z", 2).unwrap();
        assert_eq!((m.flags, m.expires), (7, later));
        assert_eq!(val(db, b"f").unwrap(), b"yz");
    });
}

#[test]
fn addint_is_tokyo_cabinets() {
    each_kind(|db, kind| {
        assert_eq!(db.addint(b"i", 5).unwrap(), 5, "{kind}");
        assert_eq!(db.addint(b"i", -7).unwrap(), -2);
        assert_eq!(val(db, b"i").unwrap(), (-2i32).to_le_bytes());
        db.put_with(b"w", &i32::MAX.to_le_bytes(), 4, 0).unwrap();
        assert_eq!(
            db.addint(b"w", 2).unwrap(),
            i32::MIN + 1,
            "wraps as a C int"
        );
        assert_eq!(meta(db, b"w").flags, 4);
        db.put(b"s", b"12345").unwrap();
        assert!(matches!(db.addint(b"s", 1), Err(Error::NotNumeric)));
        assert_eq!(val(db, b"s").unwrap(), b"12345");
    });
}

/// Tokyo Cabinet's adddouble stores whatever sum it gets: the engine's adddouble used to
/// refuse an infinite or NaN sum, which Tyrant's adddouble stores (and answers: an infinity as
/// a number, NaN as a failure).
#[test]
fn adddouble_is_tokyo_cabinets() {
    each_kind(|db, kind| {
        assert_eq!(db.adddouble(b"d", 1.5).unwrap(), 1.5, "{kind}");
        assert_eq!(db.adddouble(b"d", -0.25).unwrap(), 1.25);
        assert_eq!(val(db, b"d").unwrap(), 1.25f64.to_le_bytes());
        assert_eq!(db.adddouble(b"d", 0.0).unwrap(), 1.25);
        assert_eq!(db.adddouble(b"d", f64::INFINITY).unwrap(), f64::INFINITY);
        assert_eq!(val(db, b"d").unwrap(), f64::INFINITY.to_le_bytes());
        assert_eq!(db.adddouble(b"d", 1.0).unwrap(), f64::INFINITY);
        assert!(db.adddouble(b"d", f64::NEG_INFINITY).unwrap().is_nan());
        assert!(f64::from_le_bytes(val(db, b"d").unwrap().try_into().unwrap()).is_nan());
        // An absent record is created with the number itself (-0.0 stays negative).
        assert_eq!(
            db.adddouble(b"z", -0.0).unwrap().to_bits(),
            (-0.0f64).to_bits()
        );
        db.put(b"i", &1i32.to_le_bytes()).unwrap();
        assert!(matches!(db.adddouble(b"i", 1.0), Err(Error::NotNumeric)));
        assert_eq!(val(db, b"i").unwrap(), 1i32.to_le_bytes());
    });
}

/// memcached's incr / decr: the number as `strtoull` reads it, a shorter result padded with
/// spaces to the old length. The engine's incr_decimal used to read only digits followed by
/// spaces and to store the result unpadded; the server's own copy had memcached's rules.
#[test]
fn incr_decimal_is_memcacheds() {
    each_kind(|db, kind| {
        assert_eq!(
            db.incr_decimal_if(b"n", 1, false, 0).unwrap(),
            Counted::NotFound
        );
        db.put_with(b"n", b"100", 5, 0).unwrap();
        let Counted::Done(n, m) = db.incr_decimal_if(b"n", 95, true, 0).unwrap() else {
            panic!("{kind}")
        };
        assert_eq!(n, 5);
        assert_eq!(val(db, b"n").unwrap(), b"5  ", "{kind}: padded in place");
        assert_eq!(meta(db, b"n"), m);
        assert_eq!(m.flags, 5);
        assert_eq!(db.incr_decimal(b"n", 10, true).unwrap().unwrap().0, 0);
        assert_eq!(db.incr_decimal(b"n", 1234, false).unwrap().unwrap().0, 1234);
        assert_eq!(val(db, b"n").unwrap(), b"1234");
        // incr wraps at 2^64.
        db.put(b"n", u64::MAX.to_string().as_bytes()).unwrap();
        assert_eq!(db.incr_decimal(b"n", 2, false).unwrap().unwrap().0, 1);
        assert_eq!(val(db, b"n").unwrap(), format!("{:<20}", 1).as_bytes());
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
            db.put(b"v", v).unwrap();
            match db.incr_decimal_if(b"v", 1, false, 0).unwrap() {
                Counted::Done(n, _) => assert_eq!(Some(n), want, "{kind}: {v:?}"),
                Counted::NotNumeric => {
                    assert_eq!(want, None, "{kind}: {v:?}");
                    assert_eq!(val(db, b"v").unwrap(), v, "unchanged");
                }
                other => panic!("{kind}: {v:?}: {other:?}"),
            }
        }
        assert!(matches!(
            db.incr_decimal(b"v", 1, false),
            Err(Error::NotNumeric)
        ));
        // With a cas: only while the record has that version.
        let m = db.put(b"c", b"1").unwrap();
        assert_eq!(
            db.incr_decimal_if(b"c", 1, false, m.version + 1).unwrap(),
            Counted::VersionMismatch
        );
        assert!(matches!(
            db.incr_decimal_if(b"c", 1, false, m.version).unwrap(),
            Counted::Done(2, _)
        ));
    });
}

/// memcached's append / prepend: never creates, keeps flags and expiry, honours a cas and the
/// caller's size limit.
#[test]
fn concat_if_is_memcacheds() {
    each_kind(|db, kind| {
        let any = |_: u32, _: usize| true;
        assert_eq!(
            db.concat_if(b"a", b"x", false, 0, &any).unwrap(),
            Outcome::NotFound
        );
        assert_eq!(db.get(b"a").unwrap(), None, "{kind}");
        let later = now_secs() + 1000;
        let m = db.put_with(b"a", b"mid", 3, later).unwrap();
        assert_eq!(
            db.concat_if(b"a", b"x", false, m.version + 1, &any)
                .unwrap(),
            Outcome::VersionMismatch
        );
        let Outcome::Stored(m2) = db.concat_if(b"a", b"_end", false, m.version, &any).unwrap()
        else {
            panic!("{kind}")
        };
        assert_eq!((m2.flags, m2.expires), (3, later));
        assert!(m2.version != m.version);
        db.concat_if(b"a", b"start_", true, 0, &any).unwrap();
        assert_eq!(val(db, b"a").unwrap(), b"start_mid_end");
        // The limit sees the record's flags and the new length.
        let seen = std::cell::Cell::new((0, 0));
        let small = |flags: u32, len: usize| {
            seen.set((flags, len));
            len <= 14
        };
        assert_eq!(
            db.concat_if(b"a", b"!!", false, 0, &small).unwrap(),
            Outcome::TooLarge
        );
        assert_eq!(seen.get(), (3, 15));
        assert_eq!(val(db, b"a").unwrap(), b"start_mid_end");
        assert!(matches!(
            db.concat_if(b"a", b"!", false, 0, &small).unwrap(),
            Outcome::Stored(_)
        ));
    });
}

/// Kyoto Cabinet's append: creates, appends, takes the new expiration, keeps the flags.
#[test]
fn append_with_is_kyoto_cabinets() {
    each_kind(|db, kind| {
        let later = now_secs() + 1000;
        let m = db.append_with(b"k", b"ab", later).unwrap();
        assert_eq!((m.flags, m.expires), (0, later), "{kind}");
        db.put_with(b"f", b"x", 6, later).unwrap();
        let m = db.append_with(b"f", b"yz", 0).unwrap();
        assert_eq!((m.flags, m.expires), (6, 0));
        assert_eq!(val(db, b"f").unwrap(), b"xyz");
        assert!(matches!(
            db.append_with(&vec![b'k'; 70_000], b"v", 0),
            Err(Error::TooLarge(_))
        ));
    });
}

/// Kyoto Cabinet's increment on 8-byte big-endian integers, with its `orig` conventions.
#[test]
fn increment_is_kyoto_cabinets() {
    each_kind(|db, kind| {
        let later = now_secs() + 1000;
        assert_eq!(db.increment(b"n", 5, 0, 0).unwrap(), Some(5), "{kind}");
        assert_eq!(db.increment(b"n", -2, 0, later).unwrap(), Some(3));
        assert_eq!(val(db, b"n").unwrap(), 3i64.to_be_bytes());
        assert_eq!(meta(db, b"n").expires, later);
        // Adding 0 reads without writing.
        let before = meta(db, b"n");
        assert_eq!(db.increment(b"n", 0, 0, 0).unwrap(), Some(3));
        assert_eq!(meta(db, b"n"), before);
        // orig: the start of an absent record; MIN fails there; MAX sets.
        assert_eq!(db.increment(b"fresh", 1, i64::MIN, 0).unwrap(), None);
        assert_eq!(db.get(b"fresh").unwrap(), None);
        assert_eq!(db.increment(b"fresh", 1, 10, 0).unwrap(), Some(11));
        assert_eq!(db.increment(b"n", 7, i64::MAX, 0).unwrap(), Some(7));
        assert_eq!(db.increment(b"new", 7, i64::MAX, 0).unwrap(), Some(7));
        // Wraps; another size fails and changes nothing.
        db.put(b"w", &i64::MAX.to_be_bytes()).unwrap();
        assert_eq!(db.increment(b"w", 1, 0, 0).unwrap(), Some(i64::MIN));
        db.put(b"s", b"abc").unwrap();
        assert_eq!(db.increment(b"s", 1, 0, 0).unwrap(), None);
        assert_eq!(val(db, b"s").unwrap(), b"abc");
    });
}

/// Kyoto Cabinet's increment_double on its 16-byte fixed-point numbers.
#[test]
fn increment_double_is_kyoto_cabinets() {
    each_kind(|db, kind| {
        assert_eq!(
            db.increment_double(b"d", 1.5, 0.0, 0).unwrap(),
            Some(1.5),
            "{kind}"
        );
        assert_eq!(db.increment_double(b"d", 2.25, 0.0, 0).unwrap(), Some(3.75));
        let before = meta(db, b"d");
        assert_eq!(db.increment_double(b"d", 0.0, 0.0, 0).unwrap(), Some(3.75));
        assert_eq!(meta(db, b"d"), before, "adding 0 reads without writing");
        let v = val(db, b"d").unwrap();
        assert_eq!(&v[..8], 3i64.to_be_bytes());
        assert_eq!(&v[8..], 750_000_000_000_000i64.to_be_bytes());
        assert_eq!(db.increment_double(b"d", -1.25, 0.0, 0).unwrap(), Some(2.5));
        // orig: -inf fails on an absent record, +inf sets.
        assert_eq!(
            db.increment_double(b"x", 1.0, f64::NEG_INFINITY, 0)
                .unwrap(),
            None
        );
        assert_eq!(db.get(b"x").unwrap(), None);
        assert_eq!(db.increment_double(b"x", 1.0, 2.5, 0).unwrap(), Some(3.5));
        assert_eq!(
            db.increment_double(b"d", 4.0, f64::INFINITY, 0).unwrap(),
            Some(4.0)
        );
        // Infinities are stored as such and stay.
        assert_eq!(
            db.increment_double(b"d", f64::INFINITY, 0.0, 0).unwrap(),
            Some(f64::INFINITY)
        );
        assert_eq!(
            db.increment_double(b"d", 1.0, 0.0, 0).unwrap(),
            Some(f64::INFINITY)
        );
        assert_eq!(db.increment_double(b"x", f64::NAN, 0.0, 0).unwrap(), None);
        assert_eq!(db.increment_double(b"x", 0.0, 0.0, 0).unwrap(), Some(3.5));
        db.put(b"i", &1i64.to_be_bytes()).unwrap();
        assert_eq!(db.increment_double(b"i", 1.0, 0.0, 0).unwrap(), None);
        assert_eq!(val(db, b"i").unwrap(), 1i64.to_be_bytes());
    });
}

/// Kyoto Cabinet's cas compares values; a missing old value means "absent", a missing new
/// value removes.
#[test]
fn cas_value_is_kyoto_cabinets() {
    each_kind(|db, kind| {
        let later = now_secs() + 1000;
        assert!(
            db.cas_value(b"k", None, Some(b"v1"), later).unwrap(),
            "{kind}"
        );
        assert_eq!(meta(db, b"k").expires, later);
        assert!(!db.cas_value(b"k", None, Some(b"v2"), 0).unwrap());
        assert!(!db.cas_value(b"k", Some(b"nope"), Some(b"v2"), 0).unwrap());
        assert_eq!(val(db, b"k").unwrap(), b"v1");
        assert!(db.cas_value(b"k", Some(b"v1"), Some(b"v2"), 0).unwrap());
        assert_eq!(val(db, b"k").unwrap(), b"v2");
        assert!(db.cas_value(b"k", Some(b"v2"), None, 0).unwrap());
        assert_eq!(db.get(b"k").unwrap(), None);
        assert!(db.cas_value(b"k", None, None, 0).unwrap());
        assert!(!db.cas_value(b"k", Some(b"v2"), None, 0).unwrap());
        assert!(matches!(
            db.cas_value(b"k", None, Some(&vec![0; MAX_VALUE_LEN + 1]), 0),
            Err(Error::TooLarge(_))
        ));
    });
}

#[test]
fn seize_takes_and_removes() {
    each_kind(|db, kind| {
        let later = now_secs() + 1000;
        db.put_with(b"k", b"v", 2, later).unwrap();
        let r = db.seize(b"k").unwrap().unwrap();
        assert_eq!(
            (&r.value[..], r.meta.flags, r.meta.expires),
            (&b"v"[..], 2, later)
        );
        assert_eq!(db.get(b"k").unwrap(), None, "{kind}");
        assert_eq!(db.seize(b"k").unwrap(), None);
    });
}
