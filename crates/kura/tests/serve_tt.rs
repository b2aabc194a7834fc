//! `kura serve` as a Tokyo Tyrant client sees it (the real binary on a free loopback port,
//! frames built by `kura_proto::tt_bin`), `kura remote` against it, the command mask across
//! protocols, and bad Tyrant input.

mod common;

use common::tt_call as call;

use common::{port_of, Server};
use kura_proto::tt_bin::{encode_request, Reply, Request};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output};

fn remote(addr: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["remote", "--port", port_of(addr)])
        .args(args)
        .output()
        .expect("run kura remote")
}

#[test]
fn every_command_over_tcp_and_pipelined() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start_with(dir.path(), "t.kh", &["--backup-dir", "."]);
    let mut s = srv.connect();
    let put = |k: &'static [u8], v: &'static [u8]| Request::Put { key: k, value: v };
    assert_eq!(call(&mut s, &put(b"a", b"1")), Reply::Code(0));
    assert_eq!(
        call(
            &mut s,
            &Request::PutKeep {
                key: b"a",
                value: b"2"
            }
        ),
        Reply::Code(1)
    );
    assert_eq!(
        call(
            &mut s,
            &Request::PutCat {
                key: b"a",
                value: b"23"
            }
        ),
        Reply::Code(0)
    );
    assert_eq!(
        call(
            &mut s,
            &Request::PutShl {
                key: b"a",
                value: b"45",
                width: 3
            }
        ),
        Reply::Code(0)
    );
    assert_eq!(
        call(&mut s, &Request::Get { key: b"a" }),
        Reply::Value(b"345".to_vec())
    );
    assert_eq!(call(&mut s, &Request::Vsiz { key: b"a" }), Reply::Int(3));
    assert_eq!(
        call(&mut s, &Request::AddInt { key: b"n", num: 40 }),
        Reply::Int(40)
    );
    assert_eq!(
        call(&mut s, &Request::AddInt { key: b"n", num: 2 }),
        Reply::Int(42)
    );
    assert_eq!(
        call(
            &mut s,
            &Request::AddDouble {
                key: b"d",
                integ: 2,
                fract: 500_000_000_000
            }
        ),
        Reply::Double(2.5)
    );
    // addint on a record that is not a 4-byte integer fails and leaves it alone.
    assert_eq!(
        call(&mut s, &Request::AddInt { key: b"a", num: 1 }),
        Reply::Code(1)
    );
    assert_eq!(call(&mut s, &Request::Rnum), Reply::U64(3));
    assert_eq!(
        call(
            &mut s,
            &Request::Mget {
                keys: vec![b"a", b"zz", b"n"]
            }
        ),
        Reply::Pairs(vec![
            (b"a".to_vec(), b"345".to_vec()),
            (b"n".to_vec(), 42i32.to_le_bytes().to_vec())
        ])
    );
    assert_eq!(call(&mut s, &Request::Out { key: b"zz" }), Reply::Code(1));
    assert_eq!(call(&mut s, &Request::Out { key: b"d" }), Reply::Code(0));
    assert_eq!(call(&mut s, &Request::Get { key: b"d" }), Reply::Code(1));

    // Pipelined: 500 putnr and puts in one write, then a count.
    let mut out = Vec::new();
    let keys: Vec<Vec<u8>> = (0..500).map(|i| format!("p{i:04}").into_bytes()).collect();
    for (i, k) in keys.iter().enumerate() {
        let r = if i % 2 == 0 {
            Request::PutNr { key: k, value: k }
        } else {
            Request::Put { key: k, value: k }
        };
        encode_request(&r, &mut out);
    }
    s.write_all(&out).unwrap();
    let mut codes = vec![0u8; 250];
    s.read_exact(&mut codes).unwrap();
    assert!(codes.iter().all(|&c| c == 0));
    assert_eq!(call(&mut s, &Request::Rnum), Reply::U64(502));
    match call(
        &mut s,
        &Request::Fwmkeys {
            prefix: b"p01",
            max: -1,
        },
    ) {
        Reply::List(mut l) => {
            l.sort();
            let want: Vec<Vec<u8>> = (100..200)
                .map(|i| format!("p{i:04}").into_bytes())
                .collect();
            assert_eq!(l, want);
        }
        other => panic!("{other:?}"),
    }
    // Iteration sees every record once.
    assert_eq!(call(&mut s, &Request::IterInit), Reply::Code(0));
    let mut seen = Vec::new();
    while let Reply::Value(k) = call(&mut s, &Request::IterNext) {
        seen.push(k);
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 502);
    assert_eq!(call(&mut s, &Request::Sync), Reply::Code(0));
    match call(&mut s, &Request::Stat) {
        Reply::Stat(text) => {
            assert!(text.contains("rnum\t502\n"), "{text}");
            assert!(text.contains("path\tt.kh\n"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    // A hot copy while the server runs (into --backup-dir), then vanish.
    let copy = dir.path().join("copy.kh");
    let path = copy.to_str().unwrap().as_bytes();
    assert_eq!(call(&mut s, &Request::Copy { path }), Reply::Code(0));
    assert_eq!(call(&mut s, &Request::Vanish), Reply::Code(0));
    assert_eq!(call(&mut s, &Request::Rnum), Reply::U64(0));
    // No update log or replication yet: clear failures, the connection stays usable.
    assert_eq!(
        call(
            &mut s,
            &Request::Restore {
                path: b"/nope",
                ts: 0,
                opts: 0
            }
        ),
        Reply::Code(1)
    );
    assert_eq!(call(&mut s, &Request::Rnum), Reply::U64(0));
    let check = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["db", "get", copy.to_str().unwrap(), "a"])
        .output()
        .unwrap();
    assert_eq!(check.stdout, b"345");
}

#[test]
fn kura_remote_manages_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "r.kh");
    let a = &srv.addr;
    assert!(remote(a, &["put", "k", "v"]).status.success());
    let got = remote(a, &["get", "k"]);
    assert!(got.status.success());
    assert_eq!(got.stdout, b"v");
    let keep = remote(a, &["put", "--keep", "k", "x"]);
    assert_eq!(keep.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&keep.stderr).contains("already exists"));
    let missing = remote(a, &["get", "nope"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(missing.stdout.is_empty());
    assert_eq!(remote(a, &["out", "nope"]).status.code(), Some(1));
    // Import TSV (escapes round-trip), list, mget, misc.
    let tsv = dir.path().join("in.tsv");
    std::fs::write(&tsv, b"t1\tone\nt\\x002\ttwo\\tvalue\n").unwrap();
    let imp = remote(a, &["import", tsv.to_str().unwrap()]);
    assert!(imp.status.success(), "{imp:?}");
    let list = remote(a, &["list", "--prefix", "t", "--values"]);
    let mut lines: Vec<&str> = std::str::from_utf8(&list.stdout).unwrap().lines().collect();
    lines.sort();
    assert_eq!(lines, ["t1\tone", "t\\x002\ttwo\\tvalue"]);
    let mget = remote(a, &["mget", "k", "t1", "zz"]);
    assert_eq!(mget.stdout, b"k\tv\nt1\tone\n");
    let misc = remote(a, &["misc", "getlist", "k"]);
    assert_eq!(misc.stdout, b"k\nv\n");
    assert_eq!(
        remote(a, &["misc", "nosuchfunction"]).status.code(),
        Some(1)
    );
    let inform = remote(a, &["inform"]);
    let text = String::from_utf8_lossy(&inform.stdout);
    assert!(text.starts_with("records: 3\n"), "{text}");
    assert!(remote(a, &["sync"]).status.success());
    assert!(remote(a, &["optimize"]).status.success());
    assert!(remote(a, &["version"]).status.success());
    assert!(remote(a, &["vanish"]).status.success());
    assert!(remote(a, &["list"]).stdout.is_empty());
    // Bad input: a malformed import line stops with status 2 and names the line.
    std::fs::write(&tsv, b"ok\t1\nno tab here\n").unwrap();
    let bad = remote(a, &["import", tsv.to_str().unwrap()]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("line 2"));
    // No server: a clear error, status 2.
    let none = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["remote", "--port", "1", "get", "k"])
        .output()
        .unwrap();
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("cannot connect"));
}

#[test]
fn the_mask_applies_to_every_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start_with(dir.path(), "*", &["--mask", "out,vanish"]);
    let mut t = srv.connect();
    assert_eq!(
        call(
            &mut t,
            &Request::Put {
                key: b"k",
                value: b"v"
            }
        ),
        Reply::Code(0)
    );
    assert_eq!(call(&mut t, &Request::Out { key: b"k" }), Reply::Code(1));
    assert_eq!(call(&mut t, &Request::Vanish), Reply::Code(1));
    let mut m = srv.connect();
    m.write_all(b"delete k\r\nflush_all\r\nget k\r\n").unwrap();
    let want = "SERVER_ERROR command refused by the server's mask\r\n\
                SERVER_ERROR command refused by the server's mask\r\n\
                VALUE k 0 1\r\nv\r\nEND\r\n";
    let mut got = vec![0u8; want.len()];
    m.read_exact(&mut got).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), want);
    let mut h = srv.connect();
    h.write_all(b"DELETE /k HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 12];
    h.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"HTTP/1.1 403");
    assert_eq!(
        call(&mut t, &Request::Get { key: b"k" }),
        Reply::Value(b"v".to_vec())
    );
    // An unknown mask name is refused at start-up.
    let bad = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["serve", "*", "--port", "0", "--mask", "bogus"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("bogus"));
}

#[test]
fn bad_tyrant_input_closes_that_connection_only() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "b.kh");
    let mut good = srv.connect();
    assert_eq!(
        call(
            &mut good,
            &Request::Put {
                key: b"k",
                value: b"v"
            }
        ),
        Reply::Code(0)
    );
    let frames: Vec<Vec<u8>> = vec![
        // put with a key length of 2^31 and a value length of 2^31.
        vec![0xC8, 0x10, 0x80, 0, 0, 0, 0x80, 0, 0, 0, b'x'],
        // an unknown command byte.
        vec![0xC8, 0xEE, 0, 0, 0, 0],
        // mget announcing 2^31 - 1 keys.
        vec![0xC8, 0x31, 0x7F, 0xFF, 0xFF, 0xFF, 0, 0, 0, 1, b'k'],
        // a wrong magic byte after a good request.
        [
            &[0xC8, 0x80][..], // rnum
            &[0x00, 0x01, 0x02],
        ]
        .concat(),
    ];
    for f in &frames {
        let mut bad = srv.connect();
        bad.write_all(f).unwrap();
        // The server answers what it can, then closes: reading ends with EOF, not a hang.
        let mut rest = Vec::new();
        let _ = bad.read_to_end(&mut rest);
        assert!(rest.len() <= 9, "{f:?} -> {rest:?}");
    }
    // A truncated frame: the server waits for the rest; the client gives up and goes.
    {
        let mut t = srv.connect();
        t.write_all(&[0xC8, 0x10, 0, 0, 0, 5, 0, 0, 0, 5, b'a', b'b'])
            .unwrap();
    }
    assert_eq!(
        call(&mut good, &Request::Get { key: b"k" }),
        Reply::Value(b"v".to_vec())
    );
    assert_eq!(call(&mut good, &Request::Rnum), Reply::U64(1));
}

/// `kura remote list` on an ordered database (`+`): every key, in key order, with or without a
/// prefix and a limit.
#[test]
fn remote_list_is_in_key_order_on_an_ordered_database() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "+");
    for k in ["m", "b", "x", "a", "ba", "c"] {
        assert!(remote(&srv.addr, &["put", k, "v"]).status.success());
    }
    let list = |args: &[&str]| {
        let o = remote(&srv.addr, &[&["list"], args].concat());
        assert!(o.status.success());
        String::from_utf8(o.stdout).unwrap()
    };
    assert_eq!(list(&[]), "a\nb\nba\nc\nm\nx\n");
    assert_eq!(list(&["--prefix", "b"]), "b\nba\n");
    assert_eq!(list(&["--limit", "3"]), "a\nb\nba\n");
}

/// `kura serve` on a B+ tree (`.kb`), as Tokyo Tyrant serves a `.tcb`: iteration, fwmkeys and
/// `kura remote list` in key order, duplicates through misc putdup / putdupback / putlist,
/// every value from misc get / getlist / range, outlist removing them all, and `stat` naming
/// the type.
#[test]
fn a_b_plus_tree_served_as_tyrant_serves_a_tcb() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "t.kb");
    let mut s = srv.connect();
    for k in [&b"m"[..], b"b", b"x", b"a", b"ba", b"c"] {
        assert_eq!(
            call(
                &mut s,
                &Request::Put {
                    key: k,
                    value: b"v"
                }
            ),
            Reply::Code(0)
        );
    }
    let misc = |s: &mut TcpStream, name: &'static [u8], args: &[&[u8]]| {
        call(
            s,
            &Request::Misc {
                name,
                opts: 0,
                args: args.to_vec(),
            },
        )
    };
    let list = |items: &[&[u8]]| Reply::List(items.iter().map(|i| i.to_vec()).collect());
    assert_eq!(misc(&mut s, b"putdup", &[b"b", b"2"]), list(&[]));
    assert_eq!(misc(&mut s, b"putdupback", &[b"b", b"0"]), list(&[]));
    assert_eq!(misc(&mut s, b"putlist", &[b"c", b"w"]), list(&[]));
    assert_eq!(misc(&mut s, b"get", &[b"b"]), list(&[b"0", b"v", b"2"]));
    assert_eq!(
        misc(&mut s, b"getlist", &[b"c", b"a"]),
        list(&[b"c", b"v", b"c", b"w", b"a", b"v"])
    );
    assert_eq!(
        misc(&mut s, b"range", &[b"b", b"0", b"c"]),
        list(&[b"b", b"0", b"b", b"v", b"b", b"2", b"ba", b"v"])
    );
    assert_eq!(call(&mut s, &Request::IterInit), Reply::Code(0));
    let mut keys = Vec::new();
    while let Reply::Value(k) = call(&mut s, &Request::IterNext) {
        keys.push(String::from_utf8(k).unwrap());
    }
    assert_eq!(keys, ["a", "b", "b", "b", "ba", "c", "c", "m", "x"]);
    assert_eq!(
        call(
            &mut s,
            &Request::Fwmkeys {
                prefix: b"b",
                max: -1
            }
        ),
        list(&[b"b", b"ba"])
    );
    assert_eq!(misc(&mut s, b"outlist", &[b"b", b"c"]), list(&[]));
    assert_eq!(misc(&mut s, b"get", &[b"b"]), Reply::Code(1));
    let Reply::Stat(text) = call(&mut s, &Request::Stat) else {
        panic!("stat")
    };
    assert!(text.contains("\ntype\tB+ tree\n"), "{text}");
    assert!(text.contains("\nrnum\t4\n"), "{text}");
    let o = remote(&srv.addr, &["list"]);
    assert!(o.status.success());
    assert_eq!(String::from_utf8(o.stdout).unwrap(), "a\nba\nm\nx\n");
    let o = remote(&srv.addr, &["inform"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("B+ tree"));
}

/// A misc call on a connection of its own, as each `tcrmgr misc` makes one.
fn misc_alone(srv: &Server, name: &'static [u8], args: &[&[u8]]) -> Reply {
    let mut s = srv.connect();
    call(
        &mut s,
        &Request::Misc {
            name,
            opts: 0,
            args: args.to_vec(),
        },
    )
}

fn list(items: &[&str]) -> Reply {
    Reply::List(items.iter().map(|i| i.as_bytes().to_vec()).collect())
}

/// Kyoto Tycoon's `match_prefix` over HTTP: the keys, in the order of their numbers.
fn match_prefix(srv: &Server, query: &str) -> Vec<String> {
    let mut s = srv.connect();
    write!(s, "GET /rpc/match_prefix?{query} HTTP/1.0\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let body = out.split("\r\n\r\n").nth(1).unwrap();
    let mut keys: Vec<(usize, String)> = body
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .filter_map(|(n, v)| Some((v.parse().ok()?, n.strip_prefix('_')?.to_string())))
        .collect();
    keys.sort();
    keys.into_iter().map(|(_, k)| k).collect()
}

/// fwmkeys with a maximum on a hash returned the last matches of its walk (`ka key3` after
/// putting `key1 key2 key3 ka kb`), not the first ones in the order `kura db list` shows, as
/// Tokyo Tyrant's hash answers (`key1 key2`, its storage order); Kyoto Tycoon's `match_prefix`
/// the same. Every kind answers the first matches in its own order.
#[test]
fn fwmkeys_with_a_maximum_answers_the_first_matches_in_the_kinds_order() {
    for name in ["c.kh", "c.kb"] {
        let dir = tempfile::tempdir().unwrap();
        let kura = env!("CARGO_BIN_EXE_kura");
        let db = |args: &[&str]| {
            let out = Command::new(kura)
                .arg("db")
                .args(args)
                .current_dir(dir.path())
                .output()
                .unwrap();
            assert!(out.status.success(), "{args:?}: {out:?}");
            String::from_utf8(out.stdout).unwrap()
        };
        db(&["create", name]);
        for k in ["key1", "key2", "key3", "ka", "kb"] {
            db(&["put", name, k, "v"]);
        }
        let listed: Vec<String> = db(&["list", name]).lines().map(String::from).collect();
        let first_k: Vec<String> = listed
            .iter()
            .filter(|k| k.starts_with('k'))
            .cloned()
            .collect();
        assert_eq!(listed.len(), 5, "{name}");
        let srv = Server::start(dir.path(), name);
        let mut s = srv.connect();
        for max in [1usize, 2, 4, 5] {
            let got = call(
                &mut s,
                &Request::Fwmkeys {
                    prefix: b"k",
                    max: max as i32,
                },
            );
            let want: Vec<&str> = first_k[..max].iter().map(String::as_str).collect();
            assert_eq!(got, list(&want), "{name}: fwmkeys k {max}");
            let got = match_prefix(&srv, &format!("prefix=k&max={max}"));
            assert_eq!(got, want, "{name}: match_prefix k {max}");
        }
        if name == "c.kh" {
            assert_eq!(first_k[..2], ["key1", "key2"]);
        }
    }
}

/// ttserver keeps one iterator per server: `tcrmgr misc … iterinit charlie` and then `tcrmgr
/// misc … iternext` twice, each on a connection of its own, answer `charlie v-charlie` and
/// `delta v-delta` on a `.tcb`; Kura answered error 9999 (its iterator was the connection's).
/// A connection that has not begun an iteration takes up the server's last one; one that has
/// keeps its own.
#[test]
fn misc_iterinit_and_iternext_go_on_across_connections() {
    for name in ["t.kb", "t.kh", "+"] {
        let dir = tempfile::tempdir().unwrap();
        let srv = Server::start(dir.path(), name);
        let mut s = srv.connect();
        let keys = ["alpha", "bravo", "charlie", "delta", "echo"];
        for k in keys {
            let v = format!("v-{k}");
            let put = Request::Put {
                key: k.as_bytes(),
                value: v.as_bytes(),
            };
            assert_eq!(call(&mut s, &put), Reply::Code(0));
        }
        let ordered = name != "t.kh";
        // The walk's order (key order on ordered kinds).
        assert_eq!(misc_alone(&srv, b"iterinit", &[]), list(&[]));
        let mut walk = Vec::new();
        while let Reply::List(kv) = misc_alone(&srv, b"iternext", &[]) {
            assert_eq!(kv[1], [b"v-", &kv[0][..]].concat(), "{name}");
            walk.push(String::from_utf8(kv[0].clone()).unwrap());
        }
        if ordered {
            assert_eq!(walk, keys, "{name}");
        } else {
            assert_eq!(walk.len(), 5, "{name}");
        }
        // At its end the iteration is over for everyone.
        assert!(matches!(misc_alone(&srv, b"iternext", &[]), Reply::Code(_)));
        // iterinit KEY: from the record of the key (on a hash), or the first key >= it.
        let at = walk.iter().position(|k| k == "charlie").unwrap();
        assert_eq!(misc_alone(&srv, b"iterinit", &[b"charlie"]), list(&[]));
        for k in &walk[at..(at + 2).min(5)] {
            let v = format!("v-{k}");
            assert_eq!(misc_alone(&srv, b"iternext", &[]), list(&[k, &v]), "{name}");
        }
        if ordered {
            assert_eq!(misc_alone(&srv, b"iterinit", &[b"cz"]), list(&[]));
            assert_eq!(
                misc_alone(&srv, b"iternext", &[]),
                list(&["delta", "v-delta"])
            );
        } else {
            // A key without a record: no iteration (Tokyo Cabinet's tchdbiterinit2).
            assert!(matches!(
                misc_alone(&srv, b"iterinit", &[b"cz"]),
                Reply::Code(_)
            ));
        }
        // A connection with an iteration of its own is not moved by others.
        let mine = |s: &mut TcpStream, name: &'static [u8], args: &[&[u8]]| {
            call(
                s,
                &Request::Misc {
                    name,
                    opts: 0,
                    args: args.to_vec(),
                },
            )
        };
        assert_eq!(mine(&mut s, b"iterinit", &[]), list(&[]));
        assert_eq!(misc_alone(&srv, b"iterinit", &[b"echo"]), list(&[]));
        let first = format!("v-{}", walk[0]);
        assert_eq!(mine(&mut s, b"iternext", &[]), list(&[&walk[0], &first]));
    }
}

/// Tyrant's HTTP misc (`POST` with `X-TT-MNAME`): an iternext goes on from the iterinit of an
/// earlier request, as on ttserver, whose iterator is the server's.
#[test]
fn http_misc_iternext_goes_on_from_an_earlier_iterinit() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "t.kb");
    let mut s = srv.connect();
    for k in ["alpha", "bravo", "charlie"] {
        let put = Request::Put {
            key: k.as_bytes(),
            value: b"v",
        };
        assert_eq!(call(&mut s, &put), Reply::Code(0));
    }
    let post = |mname: &str, body: &str| {
        let mut h = srv.connect();
        write!(
            h,
            "POST / HTTP/1.0\r\nX-TT-MNAME: {mname}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut out = String::new();
        h.read_to_string(&mut out).unwrap();
        out.split("\r\n\r\n").nth(1).unwrap().to_string()
    };
    post("iterinit", "key=bravo");
    assert_eq!(post("iternext", ""), "res1=bravo&res2=v");
    assert_eq!(post("iternext", ""), "res1=charlie&res2=v");
}
