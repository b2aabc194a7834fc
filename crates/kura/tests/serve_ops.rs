//! One operation layer, every protocol: the real `kura serve` on a memory database, where
//! Tyrant, Kyoto Tycoon and memcached requests reach the same `Store` operations (and a memory
//! database's copy is written through the registry of kinds).

mod common;

use common::tt_call as tt;

use common::Server;
use kura_proto::tt_bin::{Reply, Request};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;

/// One memcached text request whose reply ends with `end`.
fn mc(s: &mut TcpStream, req: &str, end: &str) -> String {
    s.write_all(req.as_bytes()).unwrap();
    let mut buf = Vec::new();
    while !buf.ends_with(end.as_bytes()) {
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "server closed the connection");
        buf.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// One Kyoto Tycoon RPC call (form-encoded query), the whole response.
fn kt(srv: &Server, call: &str) -> String {
    let mut s = srv.connect();
    let req = format!("GET /rpc/{call} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn every_protocol_reaches_the_same_operations() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start_with(dir.path(), "+", &["--backup-dir", "."]);
    let mut t = srv.connect();
    let mut m = srv.connect();
    // Tyrant's putshl on an absent key stores the whole value (TokyoOps::putshl), memcached reads it.
    let shl = Request::PutShl {
        key: b"s",
        value: b"abcdef",
        width: 2,
    };
    assert_eq!(tt(&mut t, &shl), Reply::Code(0));
    assert_eq!(
        mc(&mut m, "get s\r\n", "END\r\n"),
        "VALUE s 0 6\r\nabcdef\r\nEND\r\n"
    );
    // memcached's incr pads a shorter result to the old length (MemcachedOps::incr_decimal_if).
    mc(&mut m, "set n 0 0 3\r\n100\r\n", "STORED\r\n");
    assert_eq!(mc(&mut m, "decr n 95\r\n", "\r\n"), "5\r\n");
    assert_eq!(
        mc(&mut m, "get n\r\n", "END\r\n"),
        "VALUE n 0 3\r\n5  \r\nEND\r\n"
    );
    // Kyoto Tycoon's append takes the record memcached wrote; seize takes it away for all.
    let r = kt(&srv, "append?key=n&value=!");
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let r = kt(&srv, "seize?key=n");
    assert!(r.contains("value\t5  !"), "{r}");
    assert_eq!(mc(&mut m, "get n\r\n", "END\r\n"), "END\r\n");
    // Each counter keeps its own format: Kyoto Tycoon's 8-byte integer is no number to
    // memcached, whose decimal text is no number to Tyrant's addint.
    let r = kt(&srv, "increment?key=k&num=7");
    assert!(r.contains("num\t7"), "{r}");
    assert_eq!(
        mc(&mut m, "incr k 1\r\n", "\r\n"),
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    );
    mc(&mut m, "set d 0 0 2\r\n10\r\n", "STORED\r\n");
    assert_eq!(
        tt(&mut t, &Request::AddInt { key: b"d", num: 1 }),
        Reply::Code(1)
    );
    // A copy of the memory database is written as the registry's persistent kind and opens
    // by its name like any other database.
    let copy = dir.path().join("copy.kh");
    let path = copy.to_str().unwrap().as_bytes();
    assert_eq!(tt(&mut t, &Request::Copy { path }), Reply::Code(0));
    let out = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["db", "get", copy.to_str().unwrap(), "s"])
        .output()
        .unwrap();
    assert_eq!(out.stdout, b"abcdef");
    let out = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["db", "inform", copy.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("kind: disk hash (.kh)\n"), "{text}");
}
