//! Kyoto Tycoon's `play_script` through the real server: `kura serve --scr` with the fixture
//! script tests/scripts/ktscr.lua (procedures modelled on Kyoto Tycoon's example/ktscrex.lua),
//! each procedure called over HTTP RPC (`/rpc/play_script`, `_`-prefixed parameters) and over
//! the binary protocol (0xB4, with and without its no-reply flag).

mod common;

use common::Server;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/ktscr.lua")
}

/// Start `kura serve * --scr ktscr.lua ARGS…`, keeping its log lines.
fn start(dir: &Path, args: &[&str]) -> (Server, Arc<Mutex<Vec<String>>>) {
    let scr = fixture();
    let mut all = vec![
        "*",
        "--port",
        "0",
        "--threads",
        "2",
        "--scr",
        scr.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    let mut child = Command::new(env!("CARGO_BIN_EXE_kura"))
        .arg("serve")
        .args(&all)
        .current_dir(dir)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start kura serve");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let log = Arc::new(Mutex::new(Vec::new()));
    let addr = loop {
        let line = lines.next().expect("kura serve exited").unwrap();
        log.lock().unwrap().push(line.clone());
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    let keep = log.clone();
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            keep.lock().unwrap().push(l);
        }
    });
    (Server { child, addr }, log)
}

/// play_script over HTTP RPC: the status and the output, with the `_` taken off the names
/// (`ERROR` stays as it is).
fn http(srv: &Server, name: &str, args: &[(&str, &str)]) -> (u16, BTreeMap<String, String>) {
    let mut body = format!("name\t{name}\n");
    for (k, v) in args {
        body.push_str(&format!("_{k}\t{v}\n"));
    }
    let mut s = srv.connect();
    let req = format!(
        "POST /rpc/play_script HTTP/1.1\r\nHost: x\r\nContent-Type: text/tab-separated-values\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp[9..12].parse().unwrap();
    let body = resp.split("\r\n\r\n").nth(1).unwrap_or("");
    let cols = body
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k.strip_prefix('_').unwrap_or(k).to_string(), v.to_string()))
        .collect();
    (status, cols)
}

fn bin_request(name: &str, args: &[(&str, &str)], no_reply: bool) -> Vec<u8> {
    let mut m = vec![0xB4];
    m.extend_from_slice(&u32::from(no_reply).to_be_bytes());
    m.extend_from_slice(&(name.len() as u32).to_be_bytes());
    m.extend_from_slice(&(args.len() as u32).to_be_bytes());
    m.extend_from_slice(name.as_bytes());
    for (k, v) in args {
        m.extend_from_slice(&(k.len() as u32).to_be_bytes());
        m.extend_from_slice(&(v.len() as u32).to_be_bytes());
        m.extend_from_slice(k.as_bytes());
        m.extend_from_slice(v.as_bytes());
    }
    m
}

/// Read one binary play_script reply: `None` for the error byte.
fn bin_reply(s: &mut impl Read) -> Option<BTreeMap<String, String>> {
    let mut magic = [0u8; 1];
    s.read_exact(&mut magic).unwrap();
    if magic[0] == 0xBF {
        return None;
    }
    assert_eq!(magic[0], 0xB4);
    let mut n = [0u8; 4];
    s.read_exact(&mut n).unwrap();
    let mut out = BTreeMap::new();
    for _ in 0..u32::from_be_bytes(n) {
        let mut h = [0u8; 8];
        s.read_exact(&mut h).unwrap();
        let ksiz = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let vsiz = u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize;
        let mut k = vec![0; ksiz];
        let mut v = vec![0; vsiz];
        s.read_exact(&mut k).unwrap();
        s.read_exact(&mut v).unwrap();
        out.insert(String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap());
    }
    Some(out)
}

fn bin(srv: &Server, name: &str, args: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    let mut s = srv.connect();
    s.write_all(&bin_request(name, args, false)).unwrap();
    bin_reply(&mut s)
}

/// A procedure over both protocols (after `reset`): HTTP's output, which must succeed, and
/// the same output from the binary call.
fn check_both(
    srv: &Server,
    name: &str,
    args: &[(&str, &str)],
    reset: impl Fn(&Server),
) -> BTreeMap<String, String> {
    reset(srv);
    let (status, out) = http(srv, name, args);
    assert_eq!(status, 200, "{name} over HTTP: {out:?}");
    reset(srv);
    let b = bin(srv, name, args).unwrap_or_else(|| panic!("{name} over binary failed"));
    assert_eq!(b, out, "{name}: binary and HTTP agree");
    out
}

/// A record, through the fixture's `set` and `get` procedures.
fn put(srv: &Server, k: &str, v: &str) {
    assert_eq!(http(srv, "set", &[("key", k), ("value", v)]).0, 200);
}

fn get(srv: &Server, k: &str) -> Option<String> {
    let (st, out) = http(srv, "get", &[("key", k)]);
    (st == 200).then(|| out["value"].clone())
}

fn clear(srv: &Server) {
    let mut s = srv.connect();
    s.write_all(
        b"POST /rpc/clear HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
}

#[test]
fn ktscrex_procedures_over_http_and_binary() {
    let dir = tempfile::tempdir().unwrap();
    let (srv, log) = start(dir.path(), &[]);
    let none = |_: &Server| {};
    let echo = check_both(&srv, "echo", &[("a", "1"), ("b", "x y")], none);
    assert_eq!(
        echo,
        BTreeMap::from([("a".into(), "1".into()), ("b".into(), "x y".into())])
    );
    // set, get, remove, and a missing record: RVELOGIC is 450; no key: RVEINVALID, 400.
    check_both(&srv, "set", &[("key", "k"), ("value", "v")], none);
    let got = check_both(&srv, "get", &[("key", "k")], none);
    assert_eq!(got["value"], "v");
    assert_eq!(http(&srv, "get", &[("key", "none")]).0, 450);
    assert_eq!(http(&srv, "get", &[]).0, 400);
    assert_eq!(bin(&srv, "get", &[("key", "none")]), None);
    assert_eq!(http(&srv, "remove", &[("key", "k")]).0, 200);
    assert_eq!(http(&srv, "remove", &[("key", "k")]).0, 450);
    // increment (a decimal counter through accept) and cas.
    let reset_n = |s: &Server| put(s, "n", "10");
    let inc = check_both(&srv, "increment", &[("key", "n"), ("num", "5")], reset_n);
    assert_eq!(inc["num"], "15");
    assert_eq!(get(&srv, "n").as_deref(), Some("15"));
    let reset_c = |s: &Server| put(s, "c", "old");
    check_both(
        &srv,
        "cas",
        &[("key", "c"), ("oval", "old"), ("nval", "new")],
        reset_c,
    );
    assert_eq!(get(&srv, "c").as_deref(), Some("new"));
    let (st, out) = http(&srv, "cas", &[("key", "c"), ("oval", "old"), ("nval", "x")]);
    assert_eq!(st, 450, "{out:?}");
    // match_*, cursor walks, iterate with a visitor, mapreduce.
    let fill = |s: &Server| {
        clear(s);
        for (k, v) in [
            ("apple", "red fruit"),
            ("apply", "a verb"),
            ("banana", "a fruit."),
        ] {
            put(s, k, v);
        }
    };
    let m = check_both(&srv, "match", &[("prefix", "app")], fill);
    assert_eq!(m["n"], "2");
    let m = check_both(&srv, "match", &[("regex", "^ban")], fill);
    assert_eq!((m["n"].as_str(), m["1"].as_str()), ("1", "banana"));
    let m = check_both(&srv, "match", &[("origin", "appla")], fill);
    assert_eq!(m["n"], "2");
    let l = check_both(&srv, "list", &[], fill);
    assert_eq!((l["n"].as_str(), l["banana"].as_str()), ("3", "a fruit."));
    let w = check_both(&srv, "walk", &[], fill);
    assert_eq!(w["n"], "3");
    let words = check_both(&srv, "countwords", &[], fill);
    assert_eq!((words["fruit"].as_str(), words["a"].as_str()), ("2", "2"));
    let s = check_both(&srv, "sweep", &[("prefix", "appl")], fill);
    assert_eq!(s["hooks"], "true,true");
    assert_eq!(get(&srv, "apple"), None);
    assert_eq!(get(&srv, "banana").as_deref(), Some("a fruit.a fruit."));
    // A transaction that aborts leaves the records as they were; one that commits keeps them.
    let reset_t = |s: &Server| {
        clear(s);
        put(s, "from", "100");
        put(s, "gone", "here");
    };
    let t = check_both(
        &srv,
        "transfer",
        &[("from", "from"), ("to", "to"), ("commit", "no")],
        reset_t,
    );
    assert_eq!(t["ok"], "true");
    assert_eq!(get(&srv, "from").as_deref(), Some("100"));
    assert_eq!(get(&srv, "to"), None);
    assert_eq!(get(&srv, "gone").as_deref(), Some("here"));
    http(
        &srv,
        "transfer",
        &[("from", "from"), ("to", "to"), ("commit", "yes")],
    );
    assert_eq!(get(&srv, "from").as_deref(), Some("0"));
    assert_eq!(get(&srv, "gone"), None);
    // kt.log reaches the server's log; so does the start-up message.
    assert_eq!(http(&srv, "log", &[("message", "hello from lua")]).0, 200);
    assert!(common::eventually(5, || {
        let l = log.lock().unwrap();
        l.iter().any(|x| x.contains("hello from lua"))
            && l.iter().any(|x| x.contains("ktscr.lua loaded"))
    }));
    // A procedure that does not exist, and a bad name.
    let (st, out) = http(&srv, "nosuch", &[]);
    assert_eq!(
        (st, out["ERROR"].as_str()),
        (501, "no such scripting procedure")
    );
    assert_eq!(bin(&srv, "nosuch", &[]), None);
    assert_eq!(http(&srv, "bad-name", &[]).0, 400);
}

#[test]
fn no_reply_stores_and_answers_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (srv, _log) = start(dir.path(), &[]);
    let mut s = srv.connect();
    s.write_all(&bin_request(
        "set",
        &[("key", "q"), ("value", "quiet")],
        true,
    ))
    .unwrap();
    s.write_all(&bin_request("fail", &[], true)).unwrap();
    s.write_all(&bin_request("get", &[("key", "q")], false))
        .unwrap();
    // The first reply on the connection is the get's.
    let got = bin_reply(&mut s).expect("get answered");
    assert_eq!(got["value"], "quiet");
}

#[test]
fn errors_reach_the_client_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let (srv, log) = start(dir.path(), &["--script-timeout", "0.3"]);
    let (st, out) = http(&srv, "fail", &[]);
    assert_eq!(st, 500);
    let e = &out["ERROR"];
    assert!(
        e.contains("ktscr.lua:") && e.contains("deliberate failure"),
        "{e}"
    );
    assert!(common::eventually(5, || log.lock().unwrap().iter().any(
        |l| l.contains("[SCRIPT]: fail:") && l.contains("deliberate failure")
    )));
    let (st, out) = http(&srv, "badarg", &[]);
    assert_eq!(st, 500);
    assert!(
        out["ERROR"].contains("db:set: invalid arguments"),
        "{out:?}"
    );
    // A runaway loop is stopped within the budget, over both protocols.
    let t = Instant::now();
    let (st, out) = http(&srv, "spin", &[]);
    assert_eq!(st, 503, "{out:?}");
    assert!(out["ERROR"].contains("--script-timeout"), "{out:?}");
    assert_eq!(bin(&srv, "spin", &[]), None);
    assert!(t.elapsed() < Duration::from_secs(5));
    // Both workers still serve.
    for _ in 0..4 {
        assert_eq!(http(&srv, "echo", &[("a", "b")]).0, 200);
        assert!(bin(&srv, "echo", &[("a", "b")]).is_some());
    }
}

#[test]
fn the_mask_holds_for_play_script_and_inside_it() {
    let dir = tempfile::tempdir().unwrap();
    let (srv, _log) = start(dir.path(), &["--mask", "ext"]);
    let (st, _) = http(&srv, "echo", &[("a", "1")]);
    assert_eq!(st, 403);
    assert_eq!(bin(&srv, "echo", &[("a", "1")]), None);
    drop(srv);
    let dir = tempfile::tempdir().unwrap();
    let (srv, _log) = start(dir.path(), &["--mask", "put"]);
    let (st, out) = http(&srv, "tryset", &[("key", "k"), ("value", "v")]);
    assert_eq!(st, 200);
    // Refused inside the script as Kyoto Cabinet reports it: false, and NOPERM (4).
    assert_eq!((out["ok"].as_str(), out["code"].as_str()), ("false", "4"));
    assert_eq!(
        bin(&srv, "tryset", &[("key", "k"), ("value", "v")]).unwrap()["ok"],
        "false"
    );
    assert_eq!(http(&srv, "get", &[("key", "k")]).0, 450);
}

#[test]
fn copy_is_confined_to_the_backup_dir() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.kh");
    let db = db.to_str().unwrap();
    let scr = fixture();
    let backups = dir.path().join("backups");
    std::fs::create_dir(&backups).unwrap();
    let start_on = |extra: &[&str]| {
        let mut a = vec![db, "--scr", scr.to_str().unwrap()];
        a.extend_from_slice(extra);
        common::serve(dir.path(), &a)
    };
    let srv = start_on(&[]);
    http(&srv, "set", &[("key", "k"), ("value", "v")]);
    let (st, out) = http(&srv, "copyto", &[("dest", "snap.kh")]);
    assert_eq!(st, 200);
    assert_eq!(out["copied"], "false", "no --backup-dir: refused");
    assert!(out["error"].contains("no permission"), "{out:?}");
    assert_eq!(out["synced"], "true");
    assert!(out["seen"].ends_with("s.kh:1"), "{out:?}");
    drop(srv);
    let srv = start_on(&["--backup-dir", backups.to_str().unwrap()]);
    let (_, out) = http(&srv, "copyto", &[("dest", "snap.kh")]);
    assert_eq!(out["copied"], "true", "{out:?}");
    assert!(backups.join("snap.kh").exists());
    let (_, out) = http(&srv, "copyto", &[("dest", "../out.kh")]);
    assert_eq!(out["copied"], "false", "{out:?}");
    assert!(!dir.path().join("out.kh").exists());
}
