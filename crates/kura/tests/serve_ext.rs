//! Tokyo Tyrant's scripts (`kura serve --ext`) through the real binary: `ext` over the binary
//! protocol and HTTP POST, errors and the time budget, the mask, the record lock against a
//! plain writer, `--extpc` sweeps, reloads from `kura remote`, and a script's writes reaching
//! a replica. The fixtures are under tests/scripts/.

mod common;

use common::{eventually, free_port, port_of, serve, Server, Tt};
use kura_proto::tt_bin::{decode_reply, encode_request, DecodedReply, Reply, Request};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn script(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scripts")
        .join(name)
        .display()
        .to_string()
}

/// Send one Tyrant request, read its whole reply.
fn call(s: &mut TcpStream, req: &Request<'_>) -> Reply {
    let mut out = Vec::new();
    encode_request(req, &mut out);
    s.write_all(&out).unwrap();
    let mut buf = Vec::new();
    loop {
        match decode_reply(req.cmd(), &buf).expect("well-formed reply") {
            DecodedReply::Complete { reply, .. } => return reply,
            DecodedReply::Incomplete => {
                let mut chunk = [0u8; 65536];
                let n = s.read(&mut chunk).unwrap();
                assert!(n > 0, "server closed the connection");
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
}

/// The line of tt_ext.lua whose error `boom` raises.
fn boom_line() -> usize {
    let text = std::fs::read_to_string(script("tt_ext.lua")).unwrap();
    1 + text
        .lines()
        .position(|l| l.contains("error(\"boom on"))
        .unwrap()
}

/// `ext NAME KEY VALUE` with `opts`: the result, or `None` for the failure code.
fn ext(s: &mut TcpStream, name: &str, opts: u32, key: &str, value: &str) -> Option<String> {
    let req = Request::Ext {
        name: name.as_bytes(),
        opts,
        key: key.as_bytes(),
        value: value.as_bytes(),
    };
    match call(s, &req) {
        Reply::Value(v) => Some(String::from_utf8(v).unwrap()),
        Reply::Code(1) => None,
        other => panic!("unexpected reply {other:?}"),
    }
}

/// The connection's last error (`misc error`).
fn last_error(s: &mut TcpStream) -> String {
    match call(
        s,
        &Request::Misc {
            name: b"error",
            opts: 0,
            args: Vec::new(),
        },
    ) {
        Reply::List(items) => String::from_utf8_lossy(&items[0]).into_owned(),
        other => panic!("unexpected reply {other:?}"),
    }
}

fn remote(addr: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["remote", "--port", port_of(addr)])
        .args(args)
        .output()
        .expect("run kura remote")
}

/// One HTTP/1.1 request on a fresh connection: status and body.
fn http(addr: &str, head: &str, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let req = format!(
        "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text[9..12].parse().unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

/// Start `kura serve ARGS… --log LOG` and wait for its "listening on" line in the log.
fn with_log(dir: &std::path::Path, log: &std::path::Path, args: &[&str]) -> Server {
    let child = Command::new(env!("CARGO_BIN_EXE_kura"))
        .arg("serve")
        .args(args)
        .args(["--port", "0", "--threads", "2", "--log"])
        .arg(log)
        .current_dir(dir)
        .spawn()
        .expect("start kura serve");
    let mut addr = None;
    assert!(eventually(20, || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        addr = text
            .split("listening on ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .map(str::to_string);
        addr.is_some()
    }));
    Server {
        child,
        addr: addr.unwrap(),
    }
}

#[test]
fn tyrant_style_functions_over_the_binary_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let ext_file = script("tt_ext.lua");
    // An ordered kind, as Tyrant's queue.lua expects (a B+ tree): fwmkeys in key order.
    let srv = Server::start_with(dir.path(), "+", &["--ext", &ext_file, "--sid", "7"]);
    let mut s = srv.connect();
    assert_eq!(ext(&mut s, "echo", 0, "k", "v").as_deref(), Some("k\tv"));
    assert_eq!(
        ext(&mut s, "about", 0, "", "").as_deref(),
        Some("1.1.41\t7\t2")
    );
    // A write reaches the database as a client's would.
    assert_eq!(ext(&mut s, "put", 0, "a", "1").as_deref(), Some("ok"));
    let mut t = Tt::new(&srv.addr);
    assert_eq!(t.get(b"a").as_deref(), Some(&b"1"[..]));
    assert_eq!(ext(&mut s, "get", 0, "a", "").as_deref(), Some("1"));
    assert_eq!(ext(&mut s, "get", 0, "nothing", ""), None);
    // The counter's rule: up to 10, then refused without a change.
    assert_eq!(ext(&mut s, "incr", 1, "c", "4").as_deref(), Some("4"));
    assert_eq!(ext(&mut s, "incr", 1, "c", "6").as_deref(), Some("10"));
    assert_eq!(ext(&mut s, "incr", 1, "c", "1"), None);
    assert_eq!(t.get(b"c").as_deref(), Some(&b"10"[..]));
    // Compare and put.
    assert_eq!(ext(&mut s, "cas", 1, "c", "10\t0").as_deref(), Some("ok"));
    assert_eq!(ext(&mut s, "cas", 1, "c", "10\t5"), None);
    assert_eq!(t.get(b"c").as_deref(), Some(&b"0"[..]));
    // The queue.
    for v in ["first", "second", "third"] {
        assert_eq!(ext(&mut s, "enqueue", 0, "q", v).as_deref(), Some("ok"));
    }
    assert_eq!(
        ext(&mut s, "dequeue", 0, "q", "2").as_deref(),
        Some("first\nsecond\n")
    );
    assert_eq!(
        ext(&mut s, "dequeue", 0, "q", "2").as_deref(),
        Some("third\n")
    );
    // The stash is the server's: another connection sees it.
    assert_eq!(
        ext(&mut s, "stashput", 0, "sk", "sv").as_deref(),
        Some("ok")
    );
    let mut s2 = srv.connect();
    assert_eq!(ext(&mut s2, "stashget", 0, "sk", "").as_deref(), Some("sv"));
    assert_eq!(t.get(b"sk"), None);
    // User locks are the server's too.
    assert_eq!(ext(&mut s, "lock", 0, "L", "").as_deref(), Some("ok"));
    assert_eq!(ext(&mut s2, "unlock", 0, "L", "").as_deref(), Some("ok"));
    assert_eq!(ext(&mut s2, "unlock", 0, "L", ""), None);
    // Map-reduce over every record.
    t.vanish();
    t.put(b"1", b"The cat");
    t.put(b"2", b"the dog and the cat");
    assert_eq!(
        ext(&mut s, "wordcount", 0, "", "").as_deref(),
        Some("and\t1\ncat\t2\ndog\t1\nthe\t3")
    );
    // The global lock (option 2) runs the function too.
    assert_eq!(ext(&mut s, "echo", 2, "g", "l").as_deref(), Some("g\tl"));
    // No such function; a built-in's name is not callable.
    assert_eq!(ext(&mut s, "nosuch", 0, "", ""), None);
    assert!(last_error(&mut s).contains("no such function"));
    assert_eq!(ext(&mut s, "_put", 0, "x", "y"), None);
    assert_eq!(t.get(b"x"), None);
    // `stat` counts the calls.
    let st = t.stat();
    assert!(st["cnt_ext"].parse::<u64>().unwrap() >= 20, "{st:?}");
}

#[test]
fn lua_errors_and_runaway_loops_answer_with_their_reason() {
    let dir = tempfile::tempdir().unwrap();
    let ext_file = script("tt_ext.lua");
    let log = dir.path().join("kura.log");
    let srv = with_log(
        dir.path(),
        &log,
        &["*", "--ext", &ext_file, "--script-timeout", "0.3"],
    );
    let mut s = srv.connect();
    assert_eq!(ext(&mut s, "boom", 0, "here", ""), None);
    let e = last_error(&mut s);
    assert!(
        e.contains(&format!("tt_ext.lua:{}:", boom_line())) && e.contains("boom on here"),
        "{e}"
    );
    // The runaway loop is stopped within the budget; the connection and server serve on.
    let t = Instant::now();
    assert_eq!(ext(&mut s, "spin", 0, "", ""), None);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(last_error(&mut s).contains("--script-timeout"));
    // `stat` has the server's last script error.
    let st = Tt::new(&srv.addr).stat();
    assert!(st["ext_error"].contains("--script-timeout"), "{st:?}");
    assert_eq!(
        ext(&mut s, "echo", 0, "still", "here").as_deref(),
        Some("still\there")
    );
    // Both reached the log; `_begin` wrote its line.
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("boom on here"), "{text}");
    assert!(text.contains("tt_ext.lua started"), "{text}");
    // `kura remote ext` prints the result, or fails with the server's reason.
    let out = remote(&srv.addr, &["ext", "echo", "a", "b", "--lock", "record"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a\tb");
    let out = remote(&srv.addr, &["ext", "boom", "x"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("boom on x") && err.contains(&format!(":{}:", boom_line())),
        "{err}"
    );
    // `_end` runs when the server stops (in the interpreter that ran `_begin`).
    let mut srv = srv;
    assert!(srv.signal(libc::SIGTERM).success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("tt_ext.lua finished"), "{text}");
}

#[test]
fn http_post_calls_the_script() {
    let dir = tempfile::tempdir().unwrap();
    let ext_file = script("tt_ext.lua");
    let srv = Server::start_with(dir.path(), "*", &["--ext", &ext_file]);
    let (st, body) = http(
        &srv.addr,
        "POST /a%20key HTTP/1.1\r\nX-TT-XNAME: echo\r\nX-TT-XOPTS: 1",
        b"the value",
    );
    assert_eq!((st, body.as_str()), (200, "a key\tthe value"));
    let (st, body) = http(&srv.addr, "POST /k HTTP/1.1\r\nX-TT-XNAME: boom", b"");
    assert_eq!(st, 500);
    assert!(
        body.contains("boom on k") && body.contains(&format!(":{}:", boom_line())),
        "{body}"
    );
    let (st, _) = http(&srv.addr, "POST /k HTTP/1.1\r\nX-TT-XNAME: put", b"v");
    assert_eq!(st, 200);
    assert_eq!(Tt::new(&srv.addr).get(b"k").as_deref(), Some(&b"v"[..]));
}

#[test]
fn the_mask_refuses_ext_and_a_masked_write_inside_a_script() {
    let dir = tempfile::tempdir().unwrap();
    let ext_file = script("tt_ext.lua");
    let srv = Server::start_with(dir.path(), "*", &["--ext", &ext_file, "--mask", "ext"]);
    let mut s = srv.connect();
    assert_eq!(ext(&mut s, "echo", 0, "k", "v"), None);
    let (st, _) = http(&srv.addr, "POST /k HTTP/1.1\r\nX-TT-XNAME: echo", b"v");
    assert_eq!(st, 403);
    drop(srv);

    let srv = Server::start_with(dir.path(), "*", &["--ext", &ext_file, "--mask", "put"]);
    let mut s = srv.connect();
    assert_eq!(ext(&mut s, "maskedput", 0, "k", "v"), None);
    let e = last_error(&mut s);
    assert!(e.contains("put refused by --mask"), "{e}");
    assert_eq!(Tt::new(&srv.addr).get(b"k"), None);
    // Other built-ins still work.
    assert_eq!(ext(&mut s, "echo", 0, "k", "v").as_deref(), Some("k\tv"));
}

#[test]
fn a_record_locked_call_loses_no_write_of_a_concurrent_plain_writer() {
    let dir = tempfile::tempdir().unwrap();
    let ext_file = script("tt_ext.lua");
    let srv = Server::start_with(dir.path(), "t.kh", &["--ext", &ext_file]);
    const N: usize = 300;
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let mut s = srv.connect();
            for _ in 0..N {
                assert_eq!(ext(&mut s, "slowcat", 1, "k", "y").as_deref(), Some("ok"));
            }
        });
        sc.spawn(|| {
            let mut t = Tt::new(&srv.addr);
            for _ in 0..N {
                assert_eq!(t.putcat(b"k", b"x"), 0);
            }
        });
    });
    let v = Tt::new(&srv.addr).get(b"k").unwrap();
    let count = |c: u8| v.iter().filter(|&&b| b == c).count();
    assert_eq!((count(b'x'), count(b'y')), (N, N));
}

#[test]
fn extpc_sweeps_expired_records_on_a_timer() {
    let dir = tempfile::tempdir().unwrap();
    let ext_file = script("tt_expire.lua");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // A table: column x.
    let srv = Server::start_with(
        dir.path(),
        "t.kt",
        &["--ext", &ext_file, "--extpc", "expire", "0.2"],
    );
    let mut t = Tt::new(&srv.addr);
    let row = |x: u64| format!("x\0{x}").into_bytes();
    t.put(b"old", &row(now - 100));
    t.put(b"new", &row(now + 3600));
    assert!(eventually(10, || t.get(b"old").is_none()));
    assert!(t.get(b"new").is_some());
    drop(srv);
    // A hash: the value is the time.
    let srv = Server::start_with(
        dir.path(),
        "h.kh",
        &["--ext", &ext_file, "--extpc", "sweep", "0.2"],
    );
    let mut t = Tt::new(&srv.addr);
    t.put(b"old", (now - 100).to_string().as_bytes());
    t.put(b"new", (now + 3600).to_string().as_bytes());
    assert!(eventually(10, || t.get(b"old").is_none()));
    assert!(t.get(b"new").is_some());
}

#[test]
fn kura_remote_reload_keeps_the_old_script_when_the_new_one_fails() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.lua");
    std::fs::write(&file, "function v() return 'one' end\n").unwrap();
    let f = file.display().to_string();
    let srv = Server::start_with(dir.path(), "*", &["--ext", &f]);
    let mut s = srv.connect();
    assert_eq!(ext(&mut s, "v", 0, "", "").as_deref(), Some("one"));
    std::fs::write(&file, "function v() return 'two' end\n").unwrap();
    let out = remote(&srv.addr, &["reload"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(ext(&mut s, "v", 0, "", "").as_deref(), Some("two"));
    std::fs::write(&file, "function v( return 'three' end\n").unwrap();
    let out = remote(&srv.addr, &["reload"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("s.lua:1:") && err.contains("old scripts stay"),
        "{err}"
    );
    assert_eq!(ext(&mut s, "v", 0, "", "").as_deref(), Some("two"));
    // `--mask ext` refuses the reload too.
    drop(srv);
    std::fs::write(&file, "function v() return 'one' end\n").unwrap();
    let srv = Server::start_with(dir.path(), "*", &["--ext", &f, "--mask", "ext"]);
    let out = remote(&srv.addr, &["reload"]);
    assert!(!out.status.success());
}

#[test]
fn a_scripts_writes_under_ulog_reach_a_replica() {
    let dir = tempfile::tempdir().unwrap();
    let ext_file = script("tt_ext.lua");
    let mp = free_port().to_string();
    let master = serve(
        dir.path(),
        &[
            "m.kh", "--port", &mp, "--sid", "1", "--ulog", "mlog", "--ext", &ext_file,
        ],
    );
    let master_at = format!("127.0.0.1:{mp}");
    let replica = serve(
        dir.path(),
        &["*", "--port", "0", "--sid", "2", "--master", &master_at],
    );
    let mut s = master.connect();
    assert_eq!(ext(&mut s, "put", 0, "a", "1").as_deref(), Some("ok"));
    assert_eq!(ext(&mut s, "incr", 1, "c", "3").as_deref(), Some("3"));
    assert_eq!(ext(&mut s, "enqueue", 0, "q", "job").as_deref(), Some("ok"));
    assert_eq!(
        ext(&mut s, "misc", 0, "putlist", "l1\tv1\tl2\tv2").as_deref(),
        Some("")
    );
    common::converge(&master.addr, &replica.addr, 20);
    let mut r = Tt::new(&replica.addr);
    assert_eq!(r.get(b"c").as_deref(), Some(&b"3"[..]));
    assert_eq!(r.get(b"q\t000000000001").as_deref(), Some(&b"job"[..]));
    assert_eq!(r.get(b"l2").as_deref(), Some(&b"v2"[..]));
    // A misc name starting with `$` is applied beneath the update log, as in Tyrant: the
    // master holds it, the replica never sees it.
    assert_eq!(
        ext(&mut s, "misc", 0, "$put", "quiet\tq").as_deref(),
        Some("")
    );
    assert_eq!(ext(&mut s, "put", 0, "after", "1").as_deref(), Some("ok"));
    assert!(eventually(20, || r.get(b"after").is_some()));
    assert_eq!(
        Tt::new(&master.addr).get(b"quiet").as_deref(),
        Some(&b"q"[..])
    );
    assert_eq!(r.get(b"quiet"), None);
}
