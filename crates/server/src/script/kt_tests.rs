//! The `kt` module and the database methods, in process on memory kinds, with the fixture
//! script the integration tests use (crates/kura/tests/scripts/ktscr.lua).

use super::*;
use crate::mask::Mask;
use crate::script::{ScriptConf, Scripts};
use kura_engine::name;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../kura/tests/scripts/ktscr.lua")
}

fn setup(kind: &str) -> (Arc<dyn Store>, Shared) {
    let db = name::open(kind).unwrap();
    let mut sh = Shared::new(0, 1 << 20);
    sh.db_name = "/some/where/casket.kch".into();
    let scripts = Scripts::load(ScriptConf {
        scr: Some(fixture()),
        timeout: Duration::from_millis(300),
        ..ScriptConf::default()
    })
    .unwrap();
    sh.scripts = Some(Arc::new(scripts));
    (db, sh)
}

fn call(db: &dyn Store, sh: &Shared, name: &str, args: &[(&str, &str)]) -> Played {
    play(
        db,
        sh,
        Proto::Http,
        name.as_bytes(),
        args.iter().map(|(k, v)| (k.as_bytes(), v.as_bytes())),
    )
}

fn out(p: &Played, name: &str) -> String {
    String::from_utf8_lossy(p.out.get(name.as_bytes()).map_or(&b"-"[..], |v| &v[..])).into_owned()
}

#[test]
fn statuses_follow_kyoto_tycoon() {
    let (db, sh) = setup("*");
    let echo = call(&*db, &sh, "echo", &[("a", "1"), ("b", "two")]);
    assert_eq!(
        (echo.status, out(&echo, "a"), out(&echo, "b")),
        (200, "1".into(), "two".into())
    );
    for (rv, status) in [
        ("RVSUCCESS", 200),
        ("RVENOIMPL", 501),
        ("RVEINVALID", 400),
        ("RVELOGIC", 450),
        ("RVETIMEOUT", 503),
        ("RVEINTERNAL", 500),
        ("RVEMISC", 500),
    ] {
        let p = call(&*db, &sh, "status", &[("rv", rv)]);
        assert_eq!(p.status, status, "{rv}");
        // Only a success carries the output.
        assert_eq!(p.out.is_empty(), status != 200, "{rv}");
    }
    let missing = call(&*db, &sh, "nosuch", &[]);
    assert_eq!(missing.status, 501);
    assert_eq!(
        missing.error.as_deref(),
        Some("no such scripting procedure")
    );
    let failed = call(&*db, &sh, "fail", &[]);
    assert_eq!(failed.status, 500);
    let e = failed.error.unwrap();
    assert!(
        e.contains("ktscr.lua:") && e.contains("deliberate failure"),
        "{e}"
    );
    let bad = call(&*db, &sh, "badarg", &[]);
    assert!(bad.error.unwrap().contains("db:set: invalid arguments"));
    let t = std::time::Instant::now();
    let spun = call(&*db, &sh, "spin", &[]);
    assert_eq!(spun.status, 503);
    assert!(t.elapsed() < Duration::from_secs(3));
    let report = call(&*db, &sh, "report", &[]);
    assert_eq!(out(&report, "version"), crate::http_exec::KT_VERSION);
    assert_eq!(out(&report, "ndbs"), "1");
    assert_eq!(out(&report, "same"), "true");
    assert_eq!(out(&report, "names"), "casket.kch");
}

/// The input and output maps cross into Lua as length-prefixed bytes (`PLAY_LUA`): every byte,
/// empty names and values, lengths past one and two bytes, and many pairs come back as sent.
#[test]
fn play_passes_maps_byte_for_byte() {
    let (db, sh) = setup("*");
    let mut input: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (Vec::new(), Vec::new()),
        (b"nul\0in\xffkey".to_vec(), b"\0\x01\xfe\xff".to_vec()),
        (vec![b'k'; 300], vec![b'v'; 70_000]),
        (b"empty".to_vec(), Vec::new()),
    ];
    for i in 0..500 {
        input.push((
            format!("n{i}").into_bytes(),
            format!("{i}").repeat(i % 7).into_bytes(),
        ));
    }
    let p = play(
        &*db,
        &sh,
        Proto::Http,
        b"echo",
        input.iter().map(|(k, v)| (&k[..], &v[..])),
    );
    assert_eq!(p.status, 200, "{:?}", p.error);
    let want: BTreeMap<Vec<u8>, Vec<u8>> = input.into_iter().collect();
    assert_eq!(p.out, want);
    // A global that is not a function is no procedure; a name with a NUL is looked up whole.
    for name in [&b"kt"[..], b"echo\0x", b""] {
        let p = play(&*db, &sh, Proto::Http, name, std::iter::empty());
        assert_eq!(p.status, 501, "{:?}", String::from_utf8_lossy(name));
    }
}

#[test]
fn no_script_is_disabled() {
    let db = name::open("*").unwrap();
    let sh = Shared::new(0, 1 << 20);
    let p = call(&*db, &sh, "echo", &[]);
    assert_eq!(p.status, 501);
    assert_eq!(
        p.error.as_deref(),
        Some("the scripting extention is disabled")
    );
}

#[test]
fn record_methods() {
    let (db, sh) = setup("*");
    assert_eq!(
        call(&*db, &sh, "set", &[("key", "k"), ("value", "v")]).status,
        200
    );
    let got = call(&*db, &sh, "get", &[("key", "k")]);
    assert_eq!(out(&got, "value"), "v");
    assert_eq!(out(&got, "xt"), kura_engine_xt_max());
    assert_eq!(call(&*db, &sh, "get", &[("key", "none")]).status, 450);
    assert_eq!(call(&*db, &sh, "get", &[]).status, 400);
    let inc = call(&*db, &sh, "increment", &[("key", "n"), ("num", "5")]);
    assert_eq!(out(&inc, "num"), "5");
    let inc = call(&*db, &sh, "increment", &[("key", "n"), ("num", "2")]);
    assert_eq!(out(&inc, "num"), "7");
    assert_eq!(db.get(b"n").unwrap().unwrap().value, b"7");
    let c = call(&*db, &sh, "counter", &[("key", "c"), ("num", "3")]);
    assert_eq!(out(&c, "num"), "3");
    assert_eq!(db.get(b"c").unwrap().unwrap().value, 3i64.to_be_bytes());
    assert_eq!(
        call(&*db, &sh, "counter", &[("key", "k"), ("num", "1")]).status,
        450
    );
    assert_eq!(
        call(
            &*db,
            &sh,
            "cas",
            &[("key", "k"), ("oval", "v"), ("nval", "w")]
        )
        .status,
        200
    );
    let conflict = call(
        &*db,
        &sh,
        "cas",
        &[("key", "k"), ("oval", "v"), ("nval", "x")],
    );
    assert_eq!(conflict.status, 450);
    assert_eq!(db.get(b"k").unwrap().unwrap().value, b"w");
    assert_eq!(call(&*db, &sh, "upcase", &[("key", "k")]).status, 200);
    assert_eq!(db.get(b"k").unwrap().unwrap().value, b"W");
    let s = call(&*db, &sh, "survive", &[("key", "k")]);
    assert_eq!(out(&s, "old_xt"), kura_engine_xt_max());
    let xt = db.get(b"k").unwrap().unwrap().meta.expires;
    let now = super::db::now();
    assert!(xt >= now + 3590 && xt <= now + 3610, "{xt}");
    assert_eq!(call(&*db, &sh, "remove", &[("key", "k")]).status, 200);
    assert_eq!(call(&*db, &sh, "remove", &[("key", "k")]).status, 450);
    let b = call(&*db, &sh, "bulk", &[]);
    assert_eq!(
        (
            out(&b, "set"),
            out(&b, "got"),
            out(&b, "removed"),
            out(&b, "check")
        ),
        ("3".into(), "xynil".into(), "2".into(), "1".into())
    );
}

fn kura_engine_xt_max() -> String {
    crate::kt_common::XT_MAX.to_string()
}

#[test]
fn matches_cursors_and_visitors() {
    for kind in ["*", "+"] {
        let (db, sh) = setup(kind);
        for (k, v) in [("apple", "a"), ("apply", "b"), ("banana", "c")] {
            db.put(k.as_bytes(), v.as_bytes()).unwrap();
        }
        let m = call(&*db, &sh, "match", &[("prefix", "app")]);
        assert_eq!(out(&m, "n"), "2", "{kind}");
        let m = call(&*db, &sh, "match", &[("regex", "an+a$")]);
        assert_eq!((out(&m, "n"), out(&m, "1")), ("1".into(), "banana".into()));
        let m = call(&*db, &sh, "match", &[("origin", "appla")]);
        assert_eq!(out(&m, "n"), "2", "{kind}");
        let l = call(&*db, &sh, "list", &[]);
        assert_eq!(
            (out(&l, "n"), out(&l, "banana")),
            ("3".into(), "c".into()),
            "{kind}"
        );
        let w = call(&*db, &sh, "walk", &[]);
        assert_eq!(
            (out(&w, "n"), out(&w, "apple")),
            ("3".into(), "a".into()),
            "{kind}"
        );
        let back = call(&*db, &sh, "backward", &[]);
        if kind == "+" {
            assert_eq!(out(&back, "keys"), "banana,apply,apple");
        } else {
            assert_eq!(back.status, 501, "a hash cursor cannot go back");
        }
        let s = call(&*db, &sh, "sweep", &[("prefix", "appl")]);
        assert_eq!(out(&s, "hooks"), "true,true");
        assert_eq!(db.count(), 1, "{kind}");
        assert_eq!(db.get(b"banana").unwrap().unwrap().value, b"cc");
    }
}

#[test]
fn mapreduce_counts_words() {
    let (db, sh) = setup("+");
    db.put(b"1", b"the cat and the hat").unwrap();
    db.put(b"2", b"The end.").unwrap();
    let p = call(&*db, &sh, "countwords", &[]);
    assert_eq!(p.status, 200);
    assert_eq!(
        (out(&p, "the"), out(&p, "cat"), out(&p, "end")),
        ("3".into(), "1".into(), "1".into())
    );
}

#[test]
fn a_transaction_aborts_or_commits() {
    let (db, sh) = setup("*");
    db.put(b"from", b"100").unwrap();
    db.put(b"gone", b"here").unwrap();
    let p = call(
        &*db,
        &sh,
        "transfer",
        &[("from", "from"), ("to", "to"), ("commit", "no")],
    );
    assert_eq!(out(&p, "ok"), "true");
    assert_eq!(db.get(b"from").unwrap().unwrap().value, b"100");
    assert!(db.get(b"to").unwrap().is_none());
    assert_eq!(db.get(b"gone").unwrap().unwrap().value, b"here");
    // An error aborts too, and reaches the caller.
    let p = call(&*db, &sh, "transfer_error", &[("from", "from")]);
    assert_eq!(p.status, 500);
    assert!(p.error.unwrap().contains("transfer refused"));
    assert_eq!(db.get(b"from").unwrap().unwrap().value, b"100");
    let p = call(
        &*db,
        &sh,
        "transfer",
        &[("from", "from"), ("to", "to"), ("commit", "yes")],
    );
    assert_eq!(out(&p, "ok"), "true");
    assert_eq!(db.get(b"from").unwrap().unwrap().value, b"0");
    assert_eq!(db.get(b"to").unwrap().unwrap().value, b"all");
    assert!(db.get(b"gone").unwrap().is_none());
}

#[test]
fn masked_writes_fail_inside_the_script() {
    let (db, sh) = setup("*");
    sh.mask.set(Mask::NONE.mask("put").unwrap());
    let p = call(&*db, &sh, "set", &[("key", "k"), ("value", "v")]);
    assert_eq!(p.status, 500);
    assert!(db.get(b"k").unwrap().is_none());
    // The reason is NOPERM (4), as db:error() reports it.
    let p = call(&*db, &sh, "tryset", &[("key", "k"), ("value", "v")]);
    assert_eq!(
        (out(&p, "ok"), out(&p, "code")),
        ("false".into(), "4".into())
    );
    sh.mask.set(Mask::NONE);
    let p = call(&*db, &sh, "tryset", &[("key", "k"), ("value", "v")]);
    assert_eq!(out(&p, "ok"), "true");
    let (db2, sh2) = setup("*");
    sh2.mask.set(Mask::NONE.mask("put").unwrap());
    db2.put(b"k", b"v").unwrap();
    let p = call(&*db2, &sh2, "upcase", &[("key", "k")]);
    assert_eq!(p.status, 500);
    assert_eq!(db2.get(b"k").unwrap().unwrap().value, b"v");
}

#[test]
fn cursor_writes() {
    let (db, sh) = setup("+");
    for k in ["a", "b", "c", "d"] {
        db.put(k.as_bytes(), k.as_bytes()).unwrap();
    }
    let p = call(&*db, &sh, "curops", &[]);
    assert_eq!(p.status, 200, "{:?}", p.error);
    assert_eq!(out(&p, "seized"), "d=d");
    assert_eq!(
        (out(&p, "after"), out(&p, "code")),
        ("nil".into(), "7".into())
    );
    assert_eq!(out(&p, "db"), "true");
    assert_eq!(db.get(b"a").unwrap().unwrap().value, b"A");
    assert_eq!(db.get(b"b").unwrap().unwrap().value, b"b!");
    assert!(db.get(b"c").unwrap().is_none() && db.get(b"d").unwrap().is_none());
}

#[test]
fn a_cursor_lives_across_calls() {
    let (db, sh) = setup("+");
    for k in ["a", "b", "c"] {
        db.put(k.as_bytes(), b"v").unwrap();
    }
    let key = |args: &[(&str, &str)]| out(&call(&*db, &sh, "nextrec", args), "key");
    assert_eq!(key(&[("restart", "1")]), "a");
    // The record it is on goes meanwhile: it is on the next one.
    db.out(b"b").unwrap();
    assert_eq!(key(&[]), "c");
    assert_eq!(key(&[]), "nil");
}
