//! Copies asked for over the network, confined to `kura serve --backup-dir`: Tyrant `copy`
//! (a path or `@NAME`), `kura remote copy`, Kyoto Tycoon `synchronize command=NAME`; and
//! `kura db copy` beside them. Every copy is checked with `kura db check`.

mod common;

use common::tt_call as tt;

use common::{port_of, Server};
use kura_proto::tt_bin::{Reply, Request};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn copy(s: &mut TcpStream, path: &[u8]) -> Reply {
    tt(s, &Request::Copy { path })
}

/// One Kyoto Tycoon RPC call (query string), the whole response.
fn kt(srv: &Server, call: &str) -> String {
    let mut s = srv.connect();
    let req = format!("GET /rpc/{call} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// `kura ARGS…` in `dir`.
fn kura(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run kura")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `kura db check PATH` passes and reports `records` records.
fn check(dir: &Path, path: &str, records: u64) {
    let out = kura(dir, &["db", "check", path]);
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "{path}: {stdout}{}",
        text(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("records: {records}\n")),
        "{stdout}"
    );
    assert!(stdout.ends_with("healthy\n"), "{stdout}");
}

/// An executable shell script `dir/name`.
fn script(dir: &Path, name: &str, body: &str) {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn put_records(s: &mut TcpStream, n: usize) {
    for i in 0..n {
        let (k, v) = (format!("k{i}"), format!("v{i}"));
        let req = Request::Put {
            key: k.as_bytes(),
            value: v.as_bytes(),
        };
        assert_eq!(tt(s, &req), Reply::Code(0));
    }
}

#[test]
fn without_a_backup_dir_no_copy_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let srv = Server::start(d, "t.kh");
    let mut s = srv.connect();
    put_records(&mut s, 3);
    let abs = d.join("abs.kh");
    for path in [&b"c.kh"[..], abs.to_str().unwrap().as_bytes(), b"@save"] {
        assert_eq!(copy(&mut s, path), Reply::Code(1));
    }
    assert!(!d.join("c.kh").exists() && !abs.exists());
    let r = kt(&srv, "synchronize?command=save");
    assert!(r.starts_with("HTTP/1.1 500"), "{r}");
    assert!(r.contains("postprocessing failed"), "{r}");
    let r = kt(&srv, "synchronize");
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let out = kura(d, &["remote", "--port", port_of(&srv.addr), "copy", "c.kh"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--backup-dir"), "{out:?}");
    // Still serving.
    assert_eq!(tt(&mut s, &Request::Rnum), Reply::U64(3));
}

#[test]
fn copies_stay_inside_the_backup_dir() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("backups/daily")).unwrap();
    let srv = Server::start_with(d, "t.kh", &["--backup-dir", "backups"]);
    let mut s = srv.connect();
    put_records(&mut s, 100);
    // Relative to the backup directory.
    assert_eq!(copy(&mut s, b"snap.kh"), Reply::Code(0));
    check(d, "backups/snap.kh", 100);
    let got = kura(d, &["db", "get", "backups/snap.kh", "k7"]);
    assert_eq!(got.stdout, b"v7");
    // Absolute, inside it; a subdirectory.
    let abs = d.join("backups/daily/abs.kh");
    assert_eq!(
        copy(&mut s, abs.to_str().unwrap().as_bytes()),
        Reply::Code(0)
    );
    check(d, "backups/daily/abs.kh", 100);
    // Through `kura remote copy`.
    let port = port_of(&srv.addr).to_string();
    let out = kura(d, &["remote", "--port", &port, "copy", "daily/remote.kh"]);
    assert!(out.status.success(), "{out:?}");
    check(d, "backups/daily/remote.kh", 100);
    // Refused: an existing destination, `..`, absolute paths outside, a link leading out,
    // the live database, an empty path.
    std::os::unix::fs::symlink(d, d.join("backups/out")).unwrap();
    let outside = d.join("escape.kh");
    for path in [
        &b"snap.kh"[..],
        b"../escape.kh",
        b"daily/../../escape.kh",
        outside.to_str().unwrap().as_bytes(),
        b"out/escape.kh",
        b"/tmp/escape.kh",
        b"",
    ] {
        assert_eq!(copy(&mut s, path), Reply::Code(1), "{}", text(path));
    }
    assert!(!outside.exists());
    let out = kura(d, &["remote", "--port", &port, "copy", "../escape.kh"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(!outside.exists());
    // restore stays refused (no update log), its path confined the same way.
    let restore = Request::Restore {
        path: b"../t.kh",
        ts: 0,
        opts: 0,
    };
    assert_eq!(tt(&mut s, &restore), Reply::Code(1));
    assert_eq!(tt(&mut s, &Request::Rnum), Reply::U64(100));
}

#[test]
fn the_database_itself_is_out_of_reach() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The database inside the backup directory: copies beside it, never into it.
    let srv = Server::start_with(d, "t.kh", &["--backup-dir", "."]);
    let mut s = srv.connect();
    put_records(&mut s, 2);
    assert_eq!(copy(&mut s, b"t.kh"), Reply::Code(1));
    assert_eq!(copy(&mut s, b"t.kh/inner.kh"), Reply::Code(1));
    assert!(!d.join("t.kh/inner.kh").exists());
    assert_eq!(copy(&mut s, b"beside.kh"), Reply::Code(0));
    drop(srv);
    check(d, "beside.kh", 2);
    // A backup directory inside the database, or missing: the server does not start.
    for bad in ["t.kh", "missing"] {
        let out = kura(d, &["serve", "t.kh", "--port", "0", "--backup-dir", bad]);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        assert!(text(&out.stderr).contains("--backup-dir"), "{out:?}");
    }
}

/// The `PATH TS` lines a backup script wrote, in order.
fn calls(backups: &Path) -> Vec<(PathBuf, u64)> {
    let text = std::fs::read_to_string(backups.join("calls.txt")).unwrap_or_default();
    text.lines()
        .map(|l| {
            let (p, ts) = l.split_once(' ').expect("PATH TS");
            (PathBuf::from(p), ts.parse().expect("a time stamp"))
        })
        .collect()
}

#[test]
fn backup_commands_run_on_a_fresh_copy() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let backups = d.join("backups");
    std::fs::create_dir(&backups).unwrap();
    // Run in the backup directory, with the copy's path and the time stamp.
    script(&backups, "save", "echo \"$1 $2\" >> calls.txt");
    script(&backups, "fail", "echo no space >&2; exit 1");
    std::fs::write(backups.join("plain"), "#!/bin/sh\n").unwrap();
    let srv = Server::start_with(d, "t.kb", &["--backup-dir", "backups"]);
    let mut s = srv.connect();
    put_records(&mut s, 50);
    let root = backups.canonicalize().unwrap();
    let named = |path: &Path, ts: u64| {
        assert_eq!(path, root.join(format!("save-{ts}.kb")));
        check(d, path.to_str().unwrap(), 50);
    };
    // Tyrant's `@NAME`.
    assert_eq!(copy(&mut s, b"@save"), Reply::Code(0));
    let c = calls(&backups);
    assert_eq!(c.len(), 1);
    named(&c[0].0, c[0].1);
    // Kyoto Tycoon's synchronize command=NAME.
    let r = kt(&srv, "synchronize?command=save");
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let c = calls(&backups);
    assert_eq!(c.len(), 2);
    named(&c[1].0, c[1].1);
    assert!(c[1].1 > c[0].1);
    // `kura remote copy @NAME`.
    let port = port_of(&srv.addr).to_string();
    let out = kura(d, &["remote", "--port", &port, "copy", "@save"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(calls(&backups).len(), 3);
    // A command that fails, names that are no command of the directory.
    assert_eq!(copy(&mut s, b"@fail"), Reply::Code(1));
    for bad in [
        "fail",
        "plain",
        "missing",
        "..%2Fsave",
        "%2Fbin%2Ftrue",
        ".",
    ] {
        let r = kt(&srv, &format!("synchronize?command={bad}"));
        assert!(r.starts_with("HTTP/1.1 500"), "{bad}: {r}");
        assert!(
            r.contains("DB: 8: logical inconsistency: postprocessing failed"),
            "{r}"
        );
    }
    for bad in [&b"@plain"[..], b"@../backups/save", b"@/bin/true", b"@"] {
        assert_eq!(copy(&mut s, bad), Reply::Code(1), "{}", text(bad));
    }
    assert_eq!(calls(&backups).len(), 3);
    // An empty command is none: a plain synchronize, as in Kyoto Tycoon.
    let r = kt(&srv, "synchronize?command=");
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert_eq!(calls(&backups).len(), 3);
    assert_eq!(tt(&mut s, &Request::Rnum), Reply::U64(50));
}

#[test]
fn db_copy_writes_a_copy_that_checks() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (src, dest) in [("x.kb", "y.kb"), ("x.kh", "y.kh")] {
        let put = kura(d, &["db", "put", "--create", src, "a", "1"]);
        assert!(put.status.success(), "{put:?}");
        assert!(kura(d, &["db", "put", src, "b", "2"]).status.success());
        let out = kura(d, &["db", "copy", src, dest]);
        assert!(out.status.success(), "{out:?}");
        check(d, dest, 2);
        assert_eq!(kura(d, &["db", "get", dest, "b"]).stdout, b"2");
        // Never over an existing destination.
        let again = kura(d, &["db", "copy", src, dest]);
        assert_eq!(again.status.code(), Some(1), "{again:?}");
        assert!(text(&again.stderr).contains("already exists"));
    }
    // A database a server holds is copied through the server.
    let srv = Server::start_with(d, "x.kh", &["--backup-dir", "."]);
    let held = kura(d, &["db", "copy", "x.kh", "z.kh"]);
    assert_eq!(held.status.code(), Some(2), "{held:?}");
    assert!(text(&held.stderr).contains("kura remote"), "{held:?}");
    let port = port_of(&srv.addr).to_string();
    let out = kura(d, &["remote", "--port", &port, "copy", "z.kh"]);
    assert!(out.status.success(), "{out:?}");
    check(d, "z.kh", 2);
}
