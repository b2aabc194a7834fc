//! `kura bench` against the real `kura serve`: every protocol, pipelined, bounded by a request
//! count; the server's own counters must agree with what the load generator says it did.

mod common;

use common::{port_of, Server};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Output};

fn bench(port: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["bench", "--port", port])
        .args(args)
        .output()
        .expect("run kura bench")
}

/// The `key=value` fields of the RESULT line.
fn result(o: &Output) -> std::collections::HashMap<String, String> {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .find(|l| l.starts_with("RESULT "))
        .unwrap_or_else(|| {
            panic!(
                "no RESULT line: {out} {}",
                String::from_utf8_lossy(&o.stderr)
            )
        });
    line.split_whitespace()
        .skip(1)
        .filter_map(|f| f.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Run `kura bench`, which must succeed; the fields of its RESULT line.
fn bench_ok(port: &str, args: &[&str]) -> std::collections::HashMap<String, String> {
    let o = bench(port, args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    result(&o)
}

fn num(r: &std::collections::HashMap<String, String>, k: &str) -> f64 {
    r[k].parse().unwrap_or_else(|_| panic!("{k}={}", r[k]))
}

/// The server's `stats` as name → number.
fn stats(srv: &Server) -> std::collections::HashMap<String, u64> {
    let mut s = srv.connect();
    s.write_all(b"stats\r\n").unwrap();
    let mut r = BufReader::new(s);
    let mut m = std::collections::HashMap::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if line == "END\r\n" || line.is_empty() {
            return m;
        }
        let mut f = line.split_whitespace().skip(1);
        if let (Some(k), Some(v)) = (f.next(), f.next()) {
            if let Ok(v) = v.parse() {
                m.insert(k.to_string(), v);
            }
        }
    }
}

#[test]
fn bench_drives_every_protocol_and_the_server_counts_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "*");
    let port = port_of(&srv.addr).to_string();
    // 4,000 requests over 4 connections, 8 pipelined, into 50 keys of 20 bytes.
    let run = |protocol: &str, ratio: &str, value_size: &str, extra: &[&str]| {
        let mut args = vec![
            "--connections",
            "4",
            "--threads",
            "2",
            "--pipeline",
            "8",
            "--keyspace",
            "50",
            "--key-size",
            "20",
            "--requests",
            "4000",
            "--protocol",
            protocol,
            "--ratio",
            ratio,
            "--value-size",
            value_size,
        ];
        args.extend_from_slice(extra);
        bench_ok(&port, &args)
    };
    // memcached text, 1:1, with the key space stored first.
    let r = run("text", "1:1", "100", &["--preload"]);
    let ops = num(&r, "ops");
    assert!((4000.0..4000.0 + 4.0 * 8.0).contains(&ops), "ops={ops}");
    assert_eq!(num(&r, "errors"), 0.0);
    assert!(num(&r, "ops_per_sec") > 0.0);
    let (p50, p99, p999) = (num(&r, "p50_us"), num(&r, "p99_us"), num(&r, "p999_us"));
    assert!(p50 > 0.0 && p50 <= p99 && p99 <= p999, "{p50} {p99} {p999}");
    let st = stats(&srv);
    assert_eq!(st["curr_items"], 50, "the preload stores the key space");
    let (gets, sets) = (st["cmd_get"], st["cmd_set"]);
    assert_eq!(
        gets + sets,
        ops as u64 + 50,
        "every request and the preload reached the server"
    );
    assert!(
        gets > 1000 && sets > 1000 + 50,
        "a 1:1 mix: {gets} gets, {sets} sets"
    );
    assert_eq!(st["get_hits"], gets, "every key was preloaded");
    // memcached binary, get only.
    let ops2 = num(&run("binary", "1:0", "100", &[]), "ops");
    let st2 = stats(&srv);
    assert_eq!(st2["cmd_get"] - gets, ops2 as u64);
    assert_eq!(st2["cmd_set"], sets, "no sets at 1:0");
    // Tokyo Tyrant, put only, 7-byte values: every key of the space is rewritten.
    run("tyrant", "0:1", "7", &[]);
    let st3 = stats(&srv);
    assert_eq!(st3["curr_items"], 50);
    assert_eq!(
        st3["bytes"],
        st2["bytes"] - 50 * (100 - 7),
        "every key rewritten with 7 bytes"
    );
}

#[test]
fn bulk_load_then_verify_finds_a_changed_record() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "b.kh");
    let port = port_of(&srv.addr).to_string();
    let r = bench_ok(
        &port,
        &["--bulk", "3000", "--connections", "3", "--pipeline", "64"],
    );
    assert_eq!(
        (r["bulk"].as_str(), num(&r, "records"), num(&r, "bad")),
        ("load", 3000.0, 0.0)
    );
    assert_eq!(stats(&srv)["curr_items"], 3000);
    let verify = [
        "--bulk",
        "3000",
        "--verify",
        "--connections",
        "3",
        "--pipeline",
        "64",
    ];
    assert_eq!(num(&bench_ok(&port, &verify), "bad"), 0.0);
    // One value changed, one record deleted: verify counts both and fails.
    let mut c = srv.connect();
    c.write_all(b"set bulk:0000000007 0 0 3\r\nbad\r\ndelete bulk:0000002999\r\n")
        .unwrap();
    let mut r = BufReader::new(c);
    for want in ["STORED\r\n", "DELETED\r\n"] {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert_eq!(line, want);
    }
    let o = bench(&port, &verify);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(num(&result(&o), "bad"), 2.0);
}

#[test]
fn bad_arguments_and_an_absent_server_fail_with_a_message() {
    let port = {
        // A port nothing listens on: bind, note it, close.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port().to_string()
    };
    for (args, code, says) in [
        (&["--ratio", "nine"][..], 2, "--ratio"),
        (
            &["--threads", "4", "--connections", "2"][..],
            2,
            "one connection per thread",
        ),
        (&["--requests", "10"][..], 1, "failed"),
    ] {
        let o = bench(&port, args);
        assert_eq!(o.status.code(), Some(code), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// `--protocol tyrant-ext` calls the script's function once a request: with the record lock,
/// the counters it increments add up to the requests sent, exactly.
#[test]
fn bench_calls_an_ext_function_and_every_call_counts() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("count.lua");
    std::fs::write(
        &script,
        "function incr(key, value)\n\
           local n = (tonumber((_get(key))) or 0) + 1\n\
           if not _put(key, tostring(n)) then return nil end\n\
           return tostring(n)\n\
         end\n",
    )
    .unwrap();
    let srv = Server::start_with(dir.path(), "*", &["--ext", script.to_str().unwrap()]);
    let port = port_of(&srv.addr);
    let r = bench_ok(
        port,
        &[
            "--protocol",
            "tyrant-ext",
            "--script",
            "incr",
            "--ext-opts",
            "1",
            "--connections",
            "4",
            "--threads",
            "2",
            "--pipeline",
            "8",
            "--key-size",
            "8",
            "--keyspace",
            "10",
            "--requests",
            "400",
            "--ratio",
            "0:1",
        ],
    );
    assert_eq!(num(&r, "errors"), 0.0);
    let ops = num(&r, "ops") as u64;
    assert!(ops >= 400, "{ops}");
    let mut tt = common::Tt::new(&srv.addr);
    let total: u64 = (0..10)
        .filter_map(|i| tt.get(format!("{i:08}").as_bytes()))
        .map(|v| String::from_utf8(v).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, ops);
}

/// A script call that fails is an error of the run (and its exit status), never a success.
#[test]
fn bench_counts_failed_script_calls_as_errors() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "*");
    let port = port_of(&srv.addr);
    for proto in ["tyrant-ext", "kt-script"] {
        let o = bench(
            port,
            &[
                "--protocol",
                proto,
                "--connections",
                "2",
                "--threads",
                "1",
                "--requests",
                "20",
            ],
        );
        assert!(!o.status.success(), "{proto}");
        assert_eq!(
            num(&result(&o), "errors"),
            num(&result(&o), "ops"),
            "{proto}"
        );
    }
}
