//! `kura serve --config FILE`, `--print-config`, the example deploy/kura.toml, and systemd's
//! readiness protocol (`Type=notify`) through the real binary, with the unit deploy/kura.service.

mod common;

use common::{Server, Tt};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const KURA: &str = env!("CARGO_BIN_EXE_kura");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn kura(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(KURA)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run kura")
}

#[test]
fn a_configuration_file_sets_flags_and_the_command_line_wins() {
    let dir = tempfile::tempdir().unwrap();
    // The file's port is taken by nobody; the command line's port 0 wins over it.
    std::fs::write(
        dir.path().join("kura.toml"),
        "name = \"conf.kh\"\nport = 1\nmask = [\"out\"]\nthreads = 2\nsid = 7\n",
    )
    .unwrap();
    let (srv, _) = Server::start_args(dir.path(), &["--config", "kura.toml", "--port", "0"], 1);
    let mut tt = Tt::new(&srv.addr);
    assert_eq!(tt.put(b"k", b"v"), 0);
    assert_ne!(tt.out(b"k"), 0, "the file's mask refuses out");
    assert_eq!(tt.stat().get("sid").map(String::as_str), Some("7"));
    assert!(
        dir.path().join("conf.kh").exists(),
        "the file's name is served"
    );
    drop(srv);

    // A list flag on the command line replaces the file's list.
    let (srv, _) = Server::start_args(
        dir.path(),
        &["--config", "kura.toml", "--port", "0", "--mask", "vanish"],
        1,
    );
    let mut tt = Tt::new(&srv.addr);
    assert_eq!(tt.put(b"k", b"v"), 0);
    assert_eq!(tt.out(b"k"), 0, "out is allowed again");
}

#[test]
fn unknown_keys_and_bad_values_exit_2_naming_the_key_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    for (text, want) in [
        (
            "prot = 1978\n",
            vec!["unknown key `prot`", "did you mean `port`", "bad.toml"],
        ),
        ("thnum = 8\n", vec!["unknown key `thnum`", "--threads"]),
        (
            "daemon = \"yes\"\n",
            vec!["daemon", "true or false", "bad.toml"],
        ),
        ("port = 99999\n", vec!["port = 99999", "bad.toml"]),
        ("mask = \"out\"\n", vec!["mask", "expected a list"]),
        ("mask = [\"nosuch\"]\n", vec![]),
        ("port = \n", vec!["not a TOML file", "bad.toml"]),
    ] {
        std::fs::write(dir.path().join("bad.toml"), text).unwrap();
        let o = kura(
            dir.path(),
            &["serve", "--config", "bad.toml", "--port", "0"],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{text}: {err}");
        for w in want {
            assert!(err.contains(w), "{text}: {w:?} not in {err}");
        }
    }
    let o = kura(dir.path(), &["serve", "--config", "missing.toml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("missing.toml"));
}

#[test]
fn print_config_reads_back_as_the_same_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "serve",
        "x.kb#sync=always",
        "--port",
        "2001",
        "--mask",
        "out",
        "--mask",
        "vanish",
        "--daemon",
        "--ulog",
        "u dir",
        "--max-item-size",
        "2m",
        "--print-config",
    ];
    let o = kura(dir.path(), &args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let first = String::from_utf8(o.stdout).unwrap();
    for line in [
        "name = \"x.kb#sync=always\"",
        "port = 2001",
        "mask = [\"out\", \"vanish\"]",
        "daemon = true",
        "ulog = \"u dir\"",
        "max-item-size = \"2m\"",
        "max-connections = 4096",
    ] {
        assert!(first.lines().any(|l| l == line), "{line} not in\n{first}");
    }
    assert!(
        !dir.path().join("x.kb").exists(),
        "--print-config opens nothing"
    );
    std::fs::write(dir.path().join("eff.toml"), &first).unwrap();
    let o = kura(
        dir.path(),
        &["serve", "--config", "eff.toml", "--print-config"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8(o.stdout).unwrap(), first);
}

/// deploy/kura.toml reads, and every key it shows commented out is a flag too.
#[test]
fn the_example_configuration_is_valid() {
    let example = repo().join("deploy/kura.toml");
    let o = kura(
        &repo(),
        &[
            "serve",
            "--config",
            example.to_str().unwrap(),
            "--print-config",
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains("name = \"/var/lib/kura/data.kh#sync=always\""),
        "{out}"
    );
    assert!(out.contains("mask = [\"vanish\", \"optimize\"]"), "{out}");
    let text = std::fs::read_to_string(&example).unwrap();
    let uncommented: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("# "))
        .filter(|l| {
            l.split_once(" = ")
                .is_some_and(|(k, _)| k.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(uncommented.lines().count() >= 5, "{uncommented}");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("all.toml"), &uncommented).unwrap();
    let o = kura(
        dir.path(),
        &["serve", "--config", "all.toml", "--print-config"],
    );
    assert!(
        o.status.success(),
        "{uncommented}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `Type=notify`: READY=1 on $NOTIFY_SOCKET once the port answers, STOPPING=1 at SIGTERM,
/// then a clean exit with the database synced.
#[test]
fn readiness_and_stopping_are_sent_to_notify_socket() {
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut child = Command::new(KURA)
        .args(["serve", "n.kh", "--port", "0", "--threads", "2"])
        .current_dir(dir.path())
        .env("NOTIFY_SOCKET", &sock_path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let log = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap());
    let mut buf = [0u8; 256];
    let n = sock.recv(&mut buf).expect("READY=1 within 30 s");
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(msg.lines().any(|l| l == "READY=1"), "{msg}");
    assert!(
        msg.lines().any(|l| l == format!("MAINPID={}", child.id())),
        "{msg}"
    );
    // Ready means listening: the port in the log answers at once. Find it from /proc.
    let port = listening_port(child.id()).expect("a listening port");
    let mut tt = Tt::new(&format!("127.0.0.1:{port}"));
    assert_eq!(tt.put(b"a", b"1"), 0);
    drop(tt);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let n = sock.recv(&mut buf).expect("STOPPING=1");
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(msg.lines().any(|l| l == "STOPPING=1"), "{msg}");
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let log = log.join().unwrap();
    assert!(log.contains("database synced and closed"), "{log}");
    let o = kura(dir.path(), &["db", "get", "n.kh", "a"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "1");
}

/// The TCP port process `pid` listens on (from /proc/net/tcp and its descriptors).
fn listening_port(pid: u32) -> Option<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            l.to_string_lossy()
                .strip_prefix("socket:[")
                .map(|s| s.trim_end_matches(']').to_string())
        })
        .collect();
    let tcp = std::fs::read_to_string("/proc/net/tcp").ok()?;
    tcp.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // state 0A = LISTEN; field 9 the inode.
        if f.get(3) == Some(&"0A") && inodes.iter().any(|i| Some(&i.as_str()) == f.get(9)) {
            let port = f[1].rsplit(':').next()?;
            u16::from_str_radix(port, 16).ok()
        } else {
            None
        }
    })
}

/// deploy/kura.service: Type=notify, the config file, hardening; checked by
/// `systemd-analyze verify` where it is installed.
#[test]
fn the_unit_file_is_a_notify_service_with_hardening() {
    let unit = std::fs::read_to_string(repo().join("deploy/kura.service")).unwrap();
    for line in [
        "Type=notify",
        "ExecStart=/usr/local/bin/kura serve --config /etc/kura/kura.toml",
        "KillSignal=SIGTERM",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ReadWritePaths=/var/lib/kura",
        "PrivateTmp=yes",
    ] {
        assert!(unit.lines().any(|l| l == line), "{line} missing");
    }
    let analyze = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !analyze {
        eprintln!("skipped: systemd-analyze not installed");
        return;
    }
    // Verify a copy whose ExecStart names this build's binary.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("kura.service");
    std::fs::write(&copy, unit.replace("/usr/local/bin/kura", KURA)).unwrap();
    let o = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&copy)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    // Without a running systemd, verify may complain about the machine (no bus, unknown
    // user kura); only complaints about the unit's own lines count.
    let bad: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("kura.service:") && !l.contains("User") && !l.contains("Group"))
        .collect();
    assert!(bad.is_empty(), "{err}");
}
