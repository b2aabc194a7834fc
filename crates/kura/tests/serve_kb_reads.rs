//! Reads of a `.kb` served by `kura serve`: gets beside sets on the same leaves (gets read
//! published leaves without their latch) see whole values of their own key, never going back;
//! and with the cache full, gets of leaves not cached are answered from their images.

mod common;

use common::{mc, Server, Tt};
use std::net::TcpStream;

/// The value of the `n`th set of `key`: the key, `n`, filler whose length and byte follow `n`.
fn value(key: &str, n: u64) -> String {
    let fill = char::from(b'a' + (n % 26) as u8)
        .to_string()
        .repeat((n % 61) as usize);
    format!("{key}|{n}|{fill}|end")
}

/// `n` of a value read for `key`, after checking that it is whole (`value`).
fn check(key: &str, v: &str) -> u64 {
    let parts: Vec<&str> = v.split('|').collect();
    assert_eq!(parts.len(), 4, "a torn value for {key}: {v:?}");
    assert_eq!(parts[0], key, "another key's value: {v:?}");
    let n: u64 = parts[1].parse().unwrap();
    assert_eq!(parts[2].len() as u64, n % 61, "a torn value: {v:?}");
    let c = char::from(b'a' + (n % 26) as u8);
    assert!(parts[2].chars().all(|x| x == c), "a torn value: {v:?}");
    assert_eq!(parts[3], "end", "a torn value: {v:?}");
    n
}

fn set(s: &mut TcpStream, key: &str, v: &str) {
    let r = mc(s, &format!("set {key} 0 0 {}\r\n{v}\r\n", v.len()));
    assert_eq!(r, "STORED\r\n");
}

fn get(s: &mut TcpStream, key: &str) -> Option<String> {
    let head = mc(s, &format!("get {key}\r\n"));
    if head == "END\r\n" {
        return None;
    }
    assert!(head.starts_with(&format!("VALUE {key} 0 ")), "{head}");
    let v = mc(s, "");
    assert_eq!(mc(s, ""), "END\r\n");
    Some(v.trim_end_matches("\r\n").to_string())
}

#[test]
fn gets_beside_sets_on_the_same_leaves_see_whole_values_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "t.kb#leafsiz=512");
    let key = |w: u64, k: u64| format!("w{w}/{k:03}");
    {
        let mut s = srv.connect();
        for w in 0..2 {
            for k in 0..30 {
                set(&mut s, &key(w, k), &value(&key(w, k), 0));
            }
        }
    }
    const SETS: u64 = 1_500;
    std::thread::scope(|scope| {
        for w in 0..2u64 {
            let mut s = srv.connect();
            scope.spawn(move || {
                for n in 1..=SETS {
                    let k = key(w, (n * 7) % 30);
                    set(&mut s, &k, &value(&k, n));
                    if n % 3 == 0 {
                        // Other keys among them: leaves split.
                        set(&mut s, &format!("{k}x{}", n % 7), "churn");
                    }
                }
            });
        }
        for r in 0..2u64 {
            let mut s = srv.connect();
            scope.spawn(move || {
                let mut seen = std::collections::HashMap::new();
                for i in 0..4_000u64 {
                    let x = (i * 2654435761 + r * 97) % 60;
                    let k = key(x % 2, x / 2);
                    let v = get(&mut s, &k).expect("a key set before");
                    let n = check(&k, &v);
                    let last = seen.entry(k.clone()).or_insert(0);
                    assert!(n >= *last, "{k} went back from {last} to {n}");
                    *last = n;
                }
            });
        }
    });
    let mut s = srv.connect();
    for w in 0..2 {
        for k in 0..30 {
            let last = (1..=SETS).rev().find(|n| (n * 7) % 30 == k).unwrap();
            let v = get(&mut s, &key(w, k)).unwrap();
            assert_eq!(check(&key(w, k), &v), last);
        }
    }
}

#[test]
fn gets_past_a_full_cache_are_answered_from_leaf_images() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "c.kb#cache=1m");
    let n = 16_000u64;
    let val = |i: u64| format!("{i:08}:{}", "v".repeat(60 + (i % 40) as usize));
    let mut tt = Tt::new(&srv.addr);
    for i in 0..n {
        assert_eq!(tt.put(format!("{i:08}").as_bytes(), val(i).as_bytes()), 0);
    }
    let mut x = 11u64;
    for _ in 0..6_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let i = (x >> 33) % (n + 50);
        let got = tt.get(format!("{i:08}").as_bytes());
        if i < n {
            assert_eq!(got.as_deref(), Some(val(i).as_bytes()), "{i}");
        } else {
            assert_eq!(got, None, "{i}");
        }
    }
    let stat = tt.stat();
    let lookups: u64 = stat
        .get("kura_leaf_image_lookups")
        .expect("the tree's counters in stat")
        .parse()
        .unwrap();
    assert!(lookups > 0, "no get was answered from an image: {stat:?}");
}
