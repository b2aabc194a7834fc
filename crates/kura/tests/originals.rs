//! `kura ttserver`, `kura ktserver` and `kura memcached`: the originals' command lines (as
//! their documentation writes them) start a server that answers; flags with no meaning here
//! exit 2 naming the flag and why; `kura serve` given an original's flag names Kura's.

mod common;

use common::{free_port, mc, Server, Tt};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const KURA: &str = env!("CARGO_BIN_EXE_kura");

/// Start `kura PROG ARGS…` and wait for `listeners` "listening on" lines.
fn start(dir: &Path, prog: &str, args: &[&str], listeners: usize) -> (Server, Vec<String>) {
    let mut child = Command::new(KURA)
        .arg(prog)
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut addrs = Vec::new();
    let mut seen = String::new();
    while addrs.len() < listeners {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("kura {prog} exited before listening: {seen}"))
            .unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if let Some(rest) = line.split("listening on ").nth(1) {
            addrs.push(rest.split_whitespace().next().unwrap().to_string());
        }
    }
    std::thread::spawn(move || for _ in lines {});
    let addr = addrs[0].clone();
    (Server { child, addr }, addrs)
}

fn kura(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let o = Command::new(KURA)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn http_get(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Tokyo Tyrant's documentation: `ttserver -port 1978 -thnum 8 -ulog ulog -sid 1 casket.tch`,
/// and a slave with `-mhost -mport`.
#[test]
fn ttserver_command_lines_serve_and_replicate() {
    let dir = tempfile::tempdir().unwrap();
    let p1 = free_port().to_string();
    let (master, _) = start(
        dir.path(),
        "ttserver",
        &[
            "-port",
            &p1,
            "-thnum",
            "8",
            "-ulog",
            "ulog",
            "-sid",
            "1",
            "casket.tch",
        ],
        1,
    );
    let mut tt = Tt::new(&master.addr);
    assert_eq!(tt.put(b"key", b"value"), 0);
    assert_eq!(tt.get(b"key").as_deref(), Some(&b"value"[..]));
    let stat = tt.stat();
    assert_eq!(stat.get("sid").map(String::as_str), Some("1"));
    assert_eq!(stat.get("port").map(String::as_str), Some(p1.as_str()));
    assert!(
        dir.path().join("casket.kh").is_dir(),
        "casket.tch served as casket.kh"
    );
    assert!(dir.path().join("ulog").is_dir());

    let p2 = free_port().to_string();
    let (slave, _) = start(
        dir.path(),
        "ttserver",
        &[
            "-port",
            &p2,
            "-ulog",
            "ulog2",
            "-sid",
            "2",
            "-mhost",
            "127.0.0.1",
            "-mport",
            &p1,
            "slave.tch",
        ],
        1,
    );
    common::converge(&master.addr, &slave.addr, 30);
}

/// Kyoto Tycoon's: `ktserver -port 1978 -th 4 casket.kch#bnum=...`, with the memcached
/// plug-in (`-plsv libktplugservmemc.so -plex port=...`).
#[test]
fn ktserver_command_lines_serve() {
    let dir = tempfile::tempdir().unwrap();
    let (p1, p2) = (free_port().to_string(), free_port().to_string());
    let plex = format!("port={p2}#opts=f");
    let (srv, addrs) = start(
        dir.path(),
        "ktserver",
        &[
            "-port",
            &p1,
            "-th",
            "4",
            "-plsv",
            "/usr/local/libexec/libktplugservmemc.so",
            "-plex",
            &plex,
            "casket.kch#bnum=1000",
        ],
        2,
    );
    let r = http_get(&srv.addr, "/rpc/set?key=k&value=v");
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let r = http_get(&srv.addr, "/rpc/get?key=k");
    assert!(r.contains("value\tv"), "{r}");
    let mut m = TcpStream::connect(&addrs[1]).unwrap();
    m.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(mc(&mut m, "get k\r\n"), "VALUE k 0 1\r\n");
    assert!(dir.path().join("casket.kh").is_dir());
}

/// memcached's: `memcached -p 11211 -m 64 -t 2`, in memory; `-- NAME` durable.
#[test]
fn memcached_command_lines_serve() {
    let dir = tempfile::tempdir().unwrap();
    let p = free_port().to_string();
    let (srv, _) = start(
        dir.path(),
        "memcached",
        &["-p", &p, "-m", "64", "-t", "2"],
        1,
    );
    let mut s = srv.connect();
    assert_eq!(mc(&mut s, "set a 5 0 2\r\nhi\r\n"), "STORED\r\n");
    assert_eq!(mc(&mut s, "get a\r\n"), "VALUE a 5 2\r\n");
    drop(srv);
    let p = free_port().to_string();
    let (srv, _) = start(
        dir.path(),
        "memcached",
        &["-p", &p, "-c", "100", "--", "data.kh"],
        1,
    );
    let mut s = srv.connect();
    assert_eq!(mc(&mut s, "set a 0 0 1\r\nx\r\n"), "STORED\r\n");
    assert!(dir.path().join("data.kh").is_dir());
}

#[test]
fn dry_run_prints_the_kura_serve_command() {
    let dir = tempfile::tempdir().unwrap();
    for (args, want) in [
        (
            vec![
                "ttserver",
                "--dry-run",
                "-port",
                "1978",
                "-thnum",
                "8",
                "-ulog",
                "ulog",
                "-sid",
                "1",
                "casket.tch",
            ],
            "kura serve casket.kh --port 1978 --threads 8 --ulog ulog --sid 1",
        ),
        (
            vec![
                "ttserver",
                "--dry-run",
                "-host",
                "0.0.0.0",
                "-dmn",
                "-pid",
                "t.pid",
                "-mhost",
                "m",
                "-mask",
                "out",
            ],
            "kura serve '*' --host 0.0.0.0 --daemon --pid t.pid --mask out --master m:1978",
        ),
        (
            vec![
                "ktserver",
                "--dry-run",
                "-th",
                "4",
                "-ord",
                "-asi",
                "2",
                "-cmd",
                "bk",
                "casket.kct",
            ],
            "kura serve 'casket.kb#sync=interval:2000' --threads 4 --mask allwrite --backup-dir bk",
        ),
        (
            vec![
                "memcached",
                "--dry-run",
                "-p",
                "11211",
                "-m",
                "64",
                "-t",
                "2",
            ],
            "kura serve '*#capsiz=64m' --threads 2 --port 11211",
        ),
    ] {
        let (code, out, err) = kura(dir.path(), &args);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        assert_eq!(out.trim(), want, "{args:?}");
    }
    let (code, out, _) = kura(dir.path(), &["memcached", "--print-config", "-p", "11311"]);
    assert_eq!(code, Some(0));
    assert!(out.lines().any(|l| l == "port = 11311"), "{out}");
    assert!(out.lines().any(|l| l == "name = \"*#capsiz=64m\""), "{out}");
}

#[test]
fn flags_with_no_meaning_here_exit_2_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("old.tch"), b"ToKyO CaBiNeT").unwrap();
    for (args, want) in [
        (
            vec!["ttserver", "-skel", "libskel.so"],
            "-skel libskel.so: a skeleton database",
        ),
        (
            vec!["ttserver", "-mul", "4"],
            "-mul 4: Kura serves one database",
        ),
        (vec!["ttserver", "-kl"], "-kl:"),
        (
            vec!["ttserver", "-mport", "1978"],
            "-mport: given without -mhost",
        ),
        (
            vec!["ttserver", "-port", "x"],
            "-port x: expected a whole number",
        ),
        (vec!["ttserver", "-bogus"], "-bogus: not a ttserver flag"),
        (
            vec!["ttserver", "old.tch"],
            "tchmgr list -pv -px old.tch | kura db import",
        ),
        (
            vec!["ktserver", "-bgs", "snap"],
            "-bgs snap: Kura takes no periodic snapshots",
        ),
        (vec!["ktserver", "-pldb", "x.so"], "-pldb x.so:"),
        (
            vec!["ktserver", "-plsv", "libother.so"],
            "-plsv libother.so:",
        ),
        (
            vec!["ktserver", "a.kch", "b.kch"],
            "one database per server",
        ),
        (
            vec!["memcached", "-U", "11211"],
            "-U 11211: Kura serves memcached over TCP only",
        ),
        (vec!["memcached", "-M"], "-M: Kura's memory database evicts"),
        (
            vec!["memcached", "-Y", "auth.txt"],
            "-Y auth.txt: authentication takes Kura's users file",
        ),
        (
            vec!["memcached", "-S"],
            "-S: SASL authentication takes Kura's users file",
        ),
        (
            vec!["memcached", "-o", "ssl_chain_cert=c.pem"],
            "TLS is not yet",
        ),
        (vec!["memcached", "-l", "127.0.0.1,10.0.0.1"], "one address"),
        (vec!["memcached", "-Z"], "-Z: TLS is not yet in Kura"),
        (
            vec!["memcached", "-s", "/tmp/mc.sock"],
            "-s /tmp/mc.sock: Kura listens on TCP only",
        ),
        (vec!["memcached", "-e", "/dev/shm/mc"], "-e /dev/shm/mc:"),
        (vec!["ttserver", "-mask", "0x10"], "-mask 0x10: a bit mask"),
        (
            vec!["ttserver", "-host", "/tmp/tt.sock"],
            "UNIX domain socket",
        ),
        (
            vec!["ktserver", "-bgsc", "gz"],
            "-bgsc gz: Kura takes no periodic snapshots",
        ),
        (
            vec!["ktserver", "old.kcd"],
            "old.kcd: Kura has no directory hash kind",
        ),
    ] {
        let (code, _, err) = kura(dir.path(), &args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {want:?} not in {err}");
    }
    assert!(
        !dir.path().join("old.kh").exists(),
        "nothing created for a refused line"
    );
}

#[test]
fn kura_serve_names_its_flag_for_an_original_one() {
    let dir = tempfile::tempdir().unwrap();
    for (args, want) in [
        (vec!["serve", "-port", "1978"], "in kura serve: --port"),
        (vec!["serve", "--mhost", "m"], "--master HOST:PORT"),
        (vec!["serve", "-thnum", "8"], "--threads"),
        (vec!["serve", "x.kh", "-dmn"], "--daemon"),
    ] {
        let (code, _, err) = kura(dir.path(), &args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {want:?} not in {err}");
        assert!(!err.contains("similar argument"), "clap's guess: {err}");
    }
}
