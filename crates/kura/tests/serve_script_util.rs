//! The helpers a Tyrant script shares with Kyoto Tycoon's (pack, codecs, hashes, regex, sets,
//! sleep, the file built-ins) through the real server: `kura serve --ext
//! tests/scripts/util.lua`, each called with Tyrant's binary `ext` (0xC8 0x68). The file
//! built-ins are confined to `--backup-dir` and refused without it.

mod common;

use common::Server;
use kura_proto::tt_bin::{decode_reply, encode_request, DecodedReply, Reply, Request};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/scripts/util.lua");

/// `ext NAME KEY VALUE` (no lock): the function's string, or `None` for an error reply.
fn ext(s: &mut TcpStream, name: &str, key: &[u8], value: &[u8]) -> Option<Vec<u8>> {
    let req = Request::Ext {
        name: name.as_bytes(),
        opts: 0,
        key,
        value,
    };
    let mut out = Vec::new();
    encode_request(&req, &mut out);
    s.write_all(&out).unwrap();
    let mut buf = Vec::new();
    loop {
        match decode_reply(req.cmd(), &buf).expect("well-formed reply") {
            DecodedReply::Complete { reply, .. } => {
                return match reply {
                    Reply::Value(v) => Some(v),
                    Reply::Code(_) => None,
                    other => panic!("{other:?}"),
                }
            }
            DecodedReply::Incomplete => {
                let mut chunk = [0u8; 4096];
                let n = s.read(&mut chunk).unwrap();
                assert!(n > 0, "server closed the connection");
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
}

fn text(s: &mut TcpStream, name: &str, key: &str, value: &str) -> String {
    let v = ext(s, name, key.as_bytes(), value.as_bytes()).expect("a string reply");
    String::from_utf8(v).unwrap()
}

fn start(dir: &Path, extra: &[&str]) -> Server {
    let mut args = vec!["--ext", SCRIPT];
    args.extend_from_slice(extra);
    Server::start_with(dir, "*", &args)
}

#[test]
fn the_shared_helpers_answer_through_ext() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path(), &[]);
    let mut s = srv.connect();
    assert_eq!(
        ext(&mut s, "pack", b"", b"").unwrap(),
        [0, 0, 0, 1, 0, 2, 3]
    );
    assert_eq!(
        text(&mut s, "unpack", "N*", "\0\0\0\x07\0\0\x01\0\x09"),
        "7,256"
    );
    assert_eq!(text(&mut s, "codec", "base", "hello"), "aGVsbG8=");
    assert_eq!(text(&mut s, "codec", "~url", "a%20b+c"), "a b c");
    assert_eq!(text(&mut s, "codec", "url", "a b/"), "a%20b%2F");
    assert_eq!(text(&mut s, "codec", "~hex", "6b757261"), "kura");
    assert_eq!(text(&mut s, "codec", "nosuch", "x"), "nil");
    // A codec Tokyo Cabinet has and Kura does not: an error reply, not a wrong answer.
    assert_eq!(ext(&mut s, "codec", b"tcbs", b"x"), None);
    assert_eq!(
        text(&mut s, "hash", "md5", "abc"),
        "900150983cd24fb0d6963f7d28e17f72"
    );
    assert_eq!(text(&mut s, "hash", "crc32", "123456789"), "3421780262");
    assert_eq!(text(&mut s, "regex", "*^KURA", "kura db"), "true");
    assert_eq!(text(&mut s, "regex", "^KURA", "kura db"), "false");
    assert_eq!(
        text(&mut s, "regex", "([a-z]+)-([0-9]+)", "ab-12 cd-34\t\\2:&"),
        "12:ab-12 34:cd-34"
    );
    assert_eq!(text(&mut s, "sets", "a,b,c", "c,x,a"), "c,a|a,b,c,x");
}

#[test]
fn file_built_ins_stay_inside_the_backup_dir() {
    let dir = tempfile::tempdir().unwrap();
    let backups = dir.path().join("backups");
    let outside = dir.path().join("outside");
    std::fs::create_dir(&backups).unwrap();
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("keep"), b"precious").unwrap();
    std::os::unix::fs::symlink(&outside, backups.join("link")).unwrap();
    let srv = start(dir.path(), &["--backup-dir", backups.to_str().unwrap()]);
    let mut s = srv.connect();
    assert_eq!(text(&mut s, "fs", "mkdir", "day1"), "true");
    assert_eq!(text(&mut s, "fs", "mkdir", "day1"), "false");
    assert!(backups.join("day1").is_dir());
    std::fs::write(backups.join("day1/a.tch"), b"12345").unwrap();
    assert_eq!(text(&mut s, "fs", "glob", "day*/*.tch"), "day1/a.tch");
    assert_eq!(text(&mut s, "fs", "stat", "day1/a.tch"), "file 5");
    assert_eq!(text(&mut s, "fs", "stat", "day1"), "dir");
    assert_eq!(text(&mut s, "fs", "stat", "nothing"), "nil");
    for (op, path) in [
        ("remove", "../outside/keep"),
        ("remove", "link/keep"),
        ("stat", "link/keep"),
        ("mkdir", outside.join("made").to_str().unwrap()),
        ("glob", "../*"),
        ("remove", "."),
    ] {
        let r = text(&mut s, "fs", op, path);
        assert!(
            r.starts_with("error: ") && r.contains("refused"),
            "{op} {path}: {r}"
        );
    }
    assert_eq!(text(&mut s, "fs", "glob", "link/*"), "");
    assert_eq!(std::fs::read(outside.join("keep")).unwrap(), b"precious");
    assert!(!outside.join("made").exists());
    assert_eq!(text(&mut s, "fs", "remove", "day1"), "true");
    assert!(!backups.join("day1").exists());
}

#[test]
fn file_built_ins_are_refused_without_a_backup_dir() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path(), &[]);
    let mut s = srv.connect();
    for op in ["mkdir", "remove", "stat", "glob"] {
        let r = text(&mut s, "fs", op, "x");
        assert!(
            r.contains("refused: the server has no --backup-dir"),
            "{op}: {r}"
        );
    }
    assert!(!dir.path().join("x").exists());
}

#[test]
fn sleep_stops_at_the_script_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path(), &["--script-timeout", "0.3"]);
    let mut s = srv.connect();
    assert_eq!(text(&mut s, "sleep", "", "0.01"), "slept");
    let t = Instant::now();
    assert_eq!(ext(&mut s, "sleep", b"", b"60"), None);
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    // The connection and the interpreter are still good.
    assert_eq!(text(&mut s, "codec", "hex", "A"), "41");
}
