//! Authentication and users through the real binary: `kura users` writing the users file,
//! `kura serve --users` on every protocol (memcached SASL with libmemcached's tools and raw
//! packets, memcached's text login compared with memcached's own `-Y`, HTTP Basic and Bearer
//! with curl), the rule for the Tyrant and Kyoto Tycoon binary protocols, and `--user`.

mod common;

use common::{free_port, kura_users, mc, Server, Tt};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A users file: alice (read,write), reader (read), boss (all); returns alice's token.
fn users_file(dir: &Path) -> String {
    for (name, pw, rights) in [
        ("alice", "s3cret", "read,write"),
        ("reader", "ro-pw", "read"),
        ("boss", "b0ss", "all"),
    ] {
        let o = kura_users(dir, &["add", "users.txt", name, "--rights", rights], pw);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let o = kura_users(dir, &["token", "users.txt", "alice"], "");
    assert!(o.status.success());
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

/// Start with a log file, so the test can read what was logged.
fn start(dir: &Path, extra: &[&str]) -> Server {
    let mut args = vec!["*", "--port", "0", "--threads", "2", "--log", "kura.log"];
    args.extend_from_slice(extra);
    // The log goes to the file (a new one for each server): wait for the port there.
    let _ = std::fs::remove_file(dir.join("kura.log"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_kura"))
        .arg("serve")
        .args(&args)
        .current_dir(dir)
        .stderr(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("start kura serve");
    let log = dir.join("kura.log");
    for _ in 0..500 {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(rest) = text.split("listening on ").nth(1) {
            let addr = rest.split_whitespace().next().unwrap().to_string();
            return Server { child, addr };
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!("kura serve exited ({st}): {text}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    panic!("kura serve did not listen");
}

fn log_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("kura.log")).unwrap_or_default()
}

#[test]
fn users_file_keeps_hashes_only() {
    let dir = tempfile::tempdir().unwrap();
    let token = users_file(dir.path());
    let text = std::fs::read_to_string(dir.path().join("users.txt")).unwrap();
    for secret in ["s3cret", "ro-pw", "b0ss", token.as_str()] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    assert!(text.contains("alice read,write pbkdf2-sha256$"), "{text}");
    assert!(text.contains("token-sha256$"), "{text}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.path().join("users.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // Refusals: no password, an unknown right, a token for nobody.
    let o = kura_users(dir.path(), &["add", "users.txt", "x"], "");
    assert!(!o.status.success());
    let o = kura_users(
        dir.path(),
        &["add", "users.txt", "x", "--rights", "root"],
        "pw",
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown right"));
    let o = kura_users(dir.path(), &["token", "users.txt", "nobody"], "");
    assert!(!o.status.success());
    // A users file that does not parse stops the server, naming the line.
    std::fs::write(dir.path().join("bad.txt"), "alice read plain-password\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_kura"))
        .current_dir(dir.path())
        .args(["serve", "*", "--port", "0", "--users", "bad.txt"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("line 1"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// curl's status code and headers for a request.
fn curl(args: &[&str]) -> (u16, String) {
    let o = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-D", "-", "-w", "%{http_code}"])
        .args(args)
        .output()
        .expect("curl");
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let code = out[out.len() - 3..].parse().unwrap();
    (code, out)
}

#[test]
fn http_basic_and_bearer() {
    let dir = tempfile::tempdir().unwrap();
    let token = users_file(dir.path());
    let s = start(dir.path(), &["--users", "users.txt", "--mask", "out"]);
    let url = |p: &str| format!("http://{}{p}", s.addr);
    // Missing and wrong credentials: 401 with both schemes offered.
    let (code, head) = curl(&[&url("/k")]);
    assert_eq!(code, 401);
    assert!(
        head.contains("WWW-Authenticate: Basic realm=\"kura\""),
        "{head}"
    );
    assert!(head.contains("WWW-Authenticate: Bearer"), "{head}");
    assert_eq!(curl(&["-u", "alice:nope", &url("/k")]).0, 401);
    assert_eq!(curl(&["-u", "ghost:s3cret", &url("/k")]).0, 401);
    assert_eq!(
        curl(&["-H", "Authorization: Bearer nope", &url("/k")]).0,
        401
    );
    // Tyrant's REST and Kyoto Tycoon's RPC with the right credentials.
    let put = ["-X", "PUT", "--data", "v1"];
    assert_eq!(
        curl(&[&put[..], &["-u", "alice:s3cret", &url("/k")]].concat()).0,
        201
    );
    let bearer = format!("Authorization: Bearer {token}");
    assert_eq!(curl(&["-H", &bearer, &url("/k")]).0, 200);
    assert_eq!(curl(&["-u", "reader:ro-pw", &url("/rpc/get?key=k")]).0, 200);
    // Lacking the right: 403.
    assert_eq!(
        curl(&[&put[..], &["-u", "reader:ro-pw", &url("/k")]].concat()).0,
        403
    );
    assert_eq!(curl(&["-u", "alice:s3cret", &url("/rpc/clear")]).0, 403);
    // --mask and the rights must both allow: `out` stays refused for the admin too.
    assert_eq!(
        curl(&["-X", "DELETE", "-u", "boss:b0ss", &url("/k")]).0,
        403
    );
    assert_eq!(curl(&["-u", "boss:b0ss", &url("/rpc/clear")]).0, 200);
    let log = log_of(dir.path());
    assert!(log.contains("refused a login from 127.0.0.1"), "{log}");
    assert!(!log.contains("nope"), "a secret in the log: {log}");
    // SIGHUP reads the users file again: a new user logs in; a broken file keeps the old.
    let o = kura_users(dir.path(), &["add", "users.txt", "newbie"], "n3w");
    assert!(o.status.success());
    assert_eq!(curl(&["-u", "newbie:n3w", &url("/k")]).0, 401);
    let hup = || unsafe { libc::kill(s.child.id() as libc::pid_t, libc::SIGHUP) };
    hup();
    assert!(common::eventually(10, || log_of(dir.path()).contains("reloaded: 4 users")));
    // Logged in: a miss (the records were cleared above), not 401.
    assert_eq!(curl(&["-u", "newbie:n3w", &url("/k")]).0, 404);
    std::fs::write(dir.path().join("users.txt"), "broken\n").unwrap();
    hup();
    assert!(common::eventually(10, || log_of(dir.path()).contains("the old users stay")));
    assert_eq!(curl(&["-u", "newbie:n3w", &url("/k")]).0, 404);
}

fn bin_packet(op: u8, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut p = vec![0x80, op];
    p.extend_from_slice(&(key.len() as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 0]);
    p.extend_from_slice(&((key.len() + value.len()) as u32).to_be_bytes());
    p.extend_from_slice(&[0; 12]);
    p.extend_from_slice(key);
    p.extend_from_slice(value);
    p
}

/// One binary response: (opcode, status, value).
fn bin_reply(s: &mut TcpStream) -> (u8, u16, Vec<u8>) {
    let mut h = [0u8; 24];
    s.read_exact(&mut h).unwrap();
    let body = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
    let mut b = vec![0; body];
    s.read_exact(&mut b).unwrap();
    let skip = h[4] as usize + u16::from_be_bytes([h[2], h[3]]) as usize;
    (h[1], u16::from_be_bytes([h[6], h[7]]), b[skip..].to_vec())
}

#[test]
fn memcached_sasl_plain() {
    let dir = tempfile::tempdir().unwrap();
    users_file(dir.path());
    let s = start(dir.path(), &["--users", "users.txt"]);
    let mut c = s.connect();
    let send = |c: &mut TcpStream, op, k: &[u8], v: &[u8]| {
        c.write_all(&bin_packet(op, k, v)).unwrap();
        bin_reply(c)
    };
    assert_eq!(send(&mut c, 0x20, b"", b""), (0x20, 0, b"PLAIN".to_vec()));
    // Before a login: "Auth error" (0x20), but for VERSION.
    assert_eq!(send(&mut c, 0x00, b"k", b"").1, 0x20);
    assert_eq!(send(&mut c, 0x0b, b"", b"").1, 0);
    assert_eq!(send(&mut c, 0x21, b"PLAIN", b"\0alice\0wrong").1, 0x20);
    assert_eq!(send(&mut c, 0x21, b"CRAM-MD5", b"alice").1, 0x20);
    assert_eq!(send(&mut c, 0x22, b"PLAIN", b"\0alice\0s3cret").1, 0x20);
    let ok = send(&mut c, 0x21, b"PLAIN", b"\0alice\0s3cret");
    assert_eq!((ok.1, ok.2.as_slice()), (0, &b"Authenticated"[..]));
    assert_eq!(
        send(&mut c, 0x00, b"k", b"").1,
        0x0001,
        "a miss, not an auth error"
    );
    // alice may not flush (admin): the mask's refusal.
    assert_eq!(send(&mut c, 0x08, b"", b"").1, 0x0083);
    assert!(log_of(dir.path()).contains("(memcached SASL): user \"alice\""));
    let mut t = s.connect();
    assert_eq!(mc(&mut t, "set x 0 0 12\r\nalice s3cret\r\n"), "STORED\r\n");
    t.write_all(b"stats settings\r\n").unwrap();
    let mut settings = String::new();
    while !settings.ends_with("END\r\n") {
        settings.push_str(&mc(&mut t, ""));
    }
    assert!(
        settings.contains("STAT auth_enabled_sasl yes\r\n"),
        "{settings}"
    );
    // A real client: libmemcached's tools with SASL, where installed.
    if Command::new("memccp").arg("--help").output().is_err() {
        eprintln!("libmemcached-tools missing: the client part is skipped");
        return;
    }
    let f = dir.path().join("f1");
    std::fs::write(&f, "hello\n").unwrap();
    let server = format!("--servers={}", s.addr);
    let run = |tool: &str, user: &str, pw: &str| {
        Command::new(tool)
            .current_dir(dir.path())
            .args([&server, "--binary", &format!("--username={user}")])
            .arg(format!("--password={pw}"))
            .arg("f1")
            .output()
            .unwrap()
    };
    assert!(run("memccp", "alice", "s3cret").status.success());
    let got = run("memccat", "reader", "ro-pw");
    assert_eq!(String::from_utf8_lossy(&got.stdout).trim(), "hello");
    assert!(!run("memccat", "reader", "bad").status.success());
    assert!(
        !run("memccp", "reader", "ro-pw").status.success(),
        "read only"
    );
}

/// The replies of memcached's text login, each case on a connection of its own.
const TEXT_CASES: &[&[u8]] = &[
    b"get foo\r\n",
    b"version\r\n",
    b"add foo 0 0 12\r\nalice s3cret\r\n",
    b"set foo 0 0 2\r\nhi\r\n",
    b"set foo 0 0 11\r\nalice wrong\r\n",
    b"set foo 0 0 12\r\nghost s3cret\r\n",
    b"set foo 0 0 12\r\nalice s3cret\r\nget foo\r\n",
    b"set foo 0 0 12 noreply\r\nalice s3cret\r\nset a 0 0 1\r\nx\r\nget a\r\n",
];

fn transcript(addr: &str, send: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(send).unwrap();
    let expect_lines = if send.ends_with(b"get a\r\n") { 5 } else { 1 }
        + usize::from(send.ends_with(b"get foo\r\n") && send.starts_with(b"set"));
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while got.iter().filter(|&&b| b == b'\n').count() < expect_lines {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    got
}

#[test]
fn memcached_text_login_as_memcached_y() {
    let dir = tempfile::tempdir().unwrap();
    users_file(dir.path());
    let s = start(dir.path(), &["--users", "users.txt"]);
    let kura: Vec<Vec<u8>> = TEXT_CASES.iter().map(|c| transcript(&s.addr, c)).collect();
    assert_eq!(kura[0], b"CLIENT_ERROR unauthenticated\r\n");
    assert_eq!(kura[4], b"CLIENT_ERROR authentication failure\r\n");
    assert_eq!(kura[7], b"STORED\r\nSTORED\r\nVALUE a 0 1\r\nx\r\nEND\r\n");
    // A storage command too large for an item removes the key's old item, as memcached
    // does, but not before a login, nor for a user without the right to write.
    let mut a = s.connect();
    assert_eq!(mc(&mut a, "set x 0 0 12\r\nalice s3cret\r\n"), "STORED\r\n");
    assert_eq!(mc(&mut a, "set k 0 0 1\r\nv\r\n"), "STORED\r\n");
    let mut r = s.connect();
    assert_eq!(mc(&mut r, "set x 0 0 12\r\nreader ro-pw\r\n"), "STORED\r\n");
    for c in [&mut s.connect(), &mut r] {
        let reply = mc(c, "set k 0 0 5000000\r\n");
        assert!(reply.starts_with("SERVER_ERROR"), "{reply}");
        assert_eq!(mc(&mut a, "get k\r\n"), "VALUE k 0 1\r\n", "the item stays");
        assert_eq!(mc(&mut a, ""), "v\r\n");
        assert_eq!(mc(&mut a, ""), "END\r\n");
    }
    // (The connection then skips the 5 MB it announced: a fresh one asks.)
    assert!(mc(&mut a, "set k 0 0 5000000\r\n").starts_with("SERVER_ERROR"));
    let mut a = s.connect();
    assert_eq!(mc(&mut a, "set x 0 0 12\r\nalice s3cret\r\n"), "STORED\r\n");
    assert_eq!(
        mc(&mut a, "get k\r\n"),
        "END\r\n",
        "a writer's too-large set removes it"
    );
    // The same transcripts from memcached started with -Y.
    std::fs::write(dir.path().join("authfile"), "alice:s3cret\n").unwrap();
    let port = free_port();
    let spawned = Command::new("memcached")
        .args([
            "-U",
            "0",
            "-l",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-u",
            "nobody",
        ])
        .arg("-Y")
        .arg(dir.path().join("authfile"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut memcached) = spawned else {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "memcached missing"
        );
        eprintln!("memcached missing: the comparison is skipped");
        return;
    };
    let addr = format!("127.0.0.1:{port}");
    assert!(common::eventually(5, || TcpStream::connect(&addr).is_ok()));
    for (case, k) in TEXT_CASES.iter().zip(&kura) {
        let m = transcript(&addr, case);
        assert_eq!(
            String::from_utf8_lossy(&m).replace("1.6.18", "V"),
            String::from_utf8_lossy(k).replace("1.6.21", "V"),
            "case {:?}",
            String::from_utf8_lossy(case)
        );
    }
    let _ = memcached.kill();
    let _ = memcached.wait();
}

/// Whether the server closes a connection whose first bytes are `first` without answering.
fn closed_at_once(addr: &str, first: &[u8]) -> bool {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(first).unwrap();
    let mut b = [0u8; 64];
    matches!(s.read(&mut b), Ok(0))
}

#[test]
fn binary_protocols_need_loopback_tls_or_the_switch() {
    // Tyrant `vsiz` of "k" and Kyoto Tycoon's get_bulk of nothing.
    let tt_vsiz = [0xC8, 0x38, 0, 0, 0, 1, b'k'];
    let kt_get = [0xBA, 0, 0, 0, 0, 0, 0, 0, 0];
    let dir = tempfile::tempdir().unwrap();
    users_file(dir.path());
    // No users file, a loopback peer: served.
    let s = start(dir.path(), &[]);
    let mut tt = Tt::new(&s.addr);
    assert_eq!(tt.put(b"k", b"v"), 0);
    drop(s);
    // A remote peer (loopback counted as remote, for this test): refused, logged.
    let s = start(dir.path(), &["--test-loopback-is-remote"]);
    assert!(closed_at_once(&s.addr, &tt_vsiz));
    assert!(closed_at_once(&s.addr, &kt_get));
    assert!(log_of(dir.path()).contains("binary protocol from a non-loopback peer"));
    // memcached text is not concerned.
    let mut c = s.connect();
    assert_eq!(mc(&mut c, "version\r\n"), "VERSION 1.6.21\r\n");
    drop(s);
    // A users file: the binary protocols need a TLS client certificate, even on loopback.
    let s = start(dir.path(), &["--users", "users.txt"]);
    assert!(closed_at_once(&s.addr, &tt_vsiz));
    drop(s);
    // Or the switch.
    let s = start(
        dir.path(),
        &[
            "--test-loopback-is-remote",
            "--allow-unauthenticated-binary",
        ],
    );
    let mut tt = Tt::new(&s.addr);
    assert_eq!(tt.put(b"k", b"v"), 0);
    assert_eq!(tt.get(b"k").as_deref(), Some(&b"v"[..]));
}

#[test]
fn user_drops_root_after_binding() {
    // SAFETY: a plain query of this process's credentials.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: --user is not tested");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &["--user", "nobody"]);
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.child.id())).unwrap();
    let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    let nobody = uid.split_whitespace().nth(1).unwrap();
    assert_ne!(nobody, "0", "{uid}");
    assert!(uid.split_whitespace().skip(1).all(|u| u == nobody), "{uid}");
    assert!(common::eventually(5, || log_of(dir.path()).contains("running as user nobody")));
    // And it serves.
    let mut c = s.connect();
    assert_eq!(mc(&mut c, "set k 0 0 1\r\nv\r\n"), "STORED\r\n");
    // An unknown user stops the start.
    let o = Command::new(env!("CARGO_BIN_EXE_kura"))
        .current_dir(dir.path())
        .args(["serve", "*", "--port", "0", "--user", "no-such-user-here"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no such user"));
}
