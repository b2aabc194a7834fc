//! TLS through the real binary with real TLS clients: Debian's `openssl s_client` (memcached
//! text, Tyrant bytes), `curl --cacert` (HTTP), client certificates with --tls-ca, SIGHUP's
//! reload, and the start-up errors of bad files. The certificates are made here with
//! `openssl req` / `openssl x509` (no key is kept in the repository).

mod common;

use common::Tt;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const KURA: &str = env!("CARGO_BIN_EXE_kura");

fn openssl(dir: &Path, args: &[&str]) {
    let o = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (Debian's openssl package)");
    assert!(
        o.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A CA (ca.pem), and signed by it a server certificate `NAME.pem` / `NAME.key` for localhost
/// and 127.0.0.1 with the subject CN=`cn`.
fn server_cert(dir: &Path, name: &str, cn: &str) {
    if !dir.join("ca.pem").exists() {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=Kura test CA",
            ],
        );
    }
    signed(
        dir,
        name,
        &format!("/CN={cn}"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    );
}

/// A certificate `NAME.pem` / `NAME.key` with `subj`, signed by ca.pem, with these X.509 v3
/// extensions.
fn signed(dir: &Path, name: &str, subj: &str, ext: &str) {
    let (key, csr, pem, extf) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
        format!("{name}.ext"),
    );
    std::fs::write(dir.join(&extf), ext).unwrap();
    openssl(
        dir,
        &[
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", subj,
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &extf,
        ],
    );
}

/// A client certificate client.pem / client.key (CN=alice, O=Kura test) signed by ca.pem.
fn client_cert(dir: &Path) {
    signed(
        dir,
        "client",
        "/CN=alice/O=Kura test",
        "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
    );
}

/// `kura serve` with its log lines kept (to wait for one), stopped when dropped.
struct Tls {
    child: Child,
    addrs: Vec<String>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Tls {
    fn start(dir: &Path, args: &[&str], listeners: usize) -> Tls {
        let mut child = Command::new(KURA)
            .arg("serve")
            .args(["*", "--threads", "2"])
            .args(args)
            .current_dir(dir)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("start kura serve");
        let log = Arc::new(Mutex::new(Vec::new()));
        let lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let keep = log.clone();
        std::thread::spawn(move || {
            for l in lines.map_while(Result::ok) {
                keep.lock().unwrap().push(l);
            }
        });
        let mut s = Tls {
            child,
            addrs: Vec::new(),
            log,
        };
        let ok = s.wait_log(|l| l.contains("listening on"), listeners);
        assert!(ok, "kura serve did not listen: {:?}", s.log.lock().unwrap());
        s.addrs = s
            .lines()
            .iter()
            .filter_map(|l| l.split("listening on ").nth(1))
            .map(|r| r.split_whitespace().next().unwrap().to_string())
            .collect();
        s
    }

    fn lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Wait (10 s at most) until `n` log lines match.
    fn wait_log(&mut self, f: impl Fn(&str) -> bool, n: usize) -> bool {
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if self.lines().iter().filter(|l| f(l)).count() >= n {
                return true;
            }
            if let Ok(Some(_)) = self.child.try_wait() {
                return self.lines().iter().filter(|l| f(l)).count() >= n;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Tls {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Talk to `addr` through `openssl s_client`: send `req`, read `want` reply bytes (10 s at
/// most), then end the session.
fn s_client(dir: &Path, addr: &str, extra: &[&str], req: &[u8], want: usize) -> Vec<u8> {
    let mut c = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            addr,
            "-quiet",
            "-verify_return_error",
        ])
        .args(["-CAfile", "ca.pem"])
        .args(extra)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run openssl s_client");
    c.stdin.as_mut().unwrap().write_all(req).unwrap();
    let mut out = c.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while got.len() < want {
            match out.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let _ = tx.send(got);
    });
    let got = rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
    let _ = c.kill();
    let _ = c.wait();
    got
}

/// The subject of the certificate the server at `addr` presents, as `openssl s_client` says.
fn presented_subject(dir: &Path, addr: &str) -> String {
    let o = Command::new("openssl")
        .args(["s_client", "-connect", addr, "-CAfile", "ca.pem"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run openssl s_client");
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    text.lines()
        .find_map(|l| l.strip_prefix("subject="))
        .unwrap_or_default()
        .to_string()
}

fn curl(dir: &Path, args: &[&str]) -> Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert", "ca.pem"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run curl")
}

fn tt_put(k: &[u8], v: &[u8]) -> Vec<u8> {
    let mut b = vec![0xC8, 0x10];
    b.extend_from_slice(&(k.len() as u32).to_be_bytes());
    b.extend_from_slice(&(v.len() as u32).to_be_bytes());
    b.extend_from_slice(k);
    b.extend_from_slice(v);
    b
}

fn tt_get(k: &[u8]) -> Vec<u8> {
    let mut b = vec![0xC8, 0x30];
    b.extend_from_slice(&(k.len() as u32).to_be_bytes());
    b.extend_from_slice(k);
    b
}

#[test]
fn tls_port_beside_plain_serves_memcached_text_and_tyrant_to_s_client() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    server_cert(d, "server", "localhost");
    let mut s = Tls::start(
        d,
        &[
            "--port",
            "0",
            "--tls-port",
            "0",
            "--tls-cert",
            "server.pem",
            "--tls-key",
            "server.key",
        ],
        2,
    );
    let (plain, tls) = (&s.addrs[0].clone(), &s.addrs[1].clone());
    assert!(
        s.lines().iter().any(|l| l.contains("(database *, TLS)")),
        "{:?}",
        s.lines()
    );

    // memcached text, first byte decrypted: `s`.
    let req = b"set tk 0 0 5\r\nhello\r\nget tk\r\n";
    let want = b"STORED\r\nVALUE tk 0 5\r\nhello\r\nEND\r\n";
    let got = s_client(d, tls, &[], req, want.len());
    assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));

    // Tokyo Tyrant's binary protocol, first byte 0xC8: put, then get.
    let mut req = tt_put(b"tt", b"over tls");
    req.extend(tt_get(b"tt"));
    let got = s_client(d, tls, &[], &req, 1 + 1 + 4 + 8);
    let mut want = vec![0, 0];
    want.extend_from_slice(&8u32.to_be_bytes());
    want.extend_from_slice(b"over tls");
    assert_eq!(got, want);

    // One store behind both ports; the plain port stays plain.
    let mut t = Tt::new(plain);
    assert_eq!(t.get(b"tt").as_deref(), Some(&b"over tls"[..]));
    assert_eq!(t.get(b"tk").as_deref(), Some(&b"hello"[..]));

    // Plain bytes on the TLS port: the handshake fails, the connection is closed and logged.
    let mut raw = std::net::TcpStream::connect(tls).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    raw.write_all(b"get tk\r\n").unwrap();
    let mut back = Vec::new();
    let _ = raw.read_to_end(&mut back);
    assert!(!back.windows(5).any(|w| w == b"hello"), "{back:?}");
    assert!(
        s.wait_log(|l| l.contains("TLS connection from 127.0.0.1:"), 1),
        "{:?}",
        s.lines()
    );
    // The server still serves TLS after it.
    let want = b"VALUE tk 0 5\r\nhello\r\nEND\r\n";
    let got = s_client(d, tls, &[], b"get tk\r\n", want.len());
    assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
}

#[test]
fn curl_over_https_and_client_certificates_required_with_tls_ca() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    server_cert(d, "server", "localhost");
    client_cert(d);
    let mut s = Tls::start(
        d,
        &[
            "--port",
            "0",
            "--tls-only",
            "--tls-cert",
            "server.pem",
            "--tls-key",
            "server.key",
            "--tls-ca",
            "ca.pem",
        ],
        1,
    );
    let port = common::port_of(&s.addrs[0]).to_string();
    let url = |p: &str| format!("https://localhost:{port}{p}");
    let cert = ["--cert", "client.pem", "--key", "client.key"];

    // No client certificate: refused in the handshake, and logged.
    let o = curl(d, &[&url("/k")]);
    assert!(!o.status.success(), "served without a client certificate");
    assert!(
        s.wait_log(
            |l| l.contains("TLS connection from") && l.contains("no certificate"),
            1
        ),
        "{:?}",
        s.lines()
    );

    // With one: Tyrant's HTTP and Kyoto Tycoon's RPC over HTTPS.
    let o = curl(
        d,
        &[&cert[..], &["-X", "PUT", "--data-binary", "v1", &url("/k")]].concat(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = curl(d, &[&cert[..], &[url("/k").as_str()]].concat());
    assert_eq!(String::from_utf8_lossy(&o.stdout), "v1");
    let o = curl(d, &[&cert[..], &[url("/rpc/get?key=k").as_str()]].concat());
    assert_eq!(String::from_utf8_lossy(&o.stdout), "value\tv1\n");

    // A client certificate from another CA is refused too.
    let other = d.join("other");
    std::fs::create_dir(&other).unwrap();
    server_cert(&other, "x", "x");
    client_cert(&other);
    std::fs::copy(d.join("ca.pem"), other.join("ca.pem.server")).unwrap();
    let o = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert", "ca.pem.server"])
        .args(["--cert", "client.pem", "--key", "client.key", &url("/k")])
        .current_dir(&other)
        .output()
        .unwrap();
    assert!(!o.status.success(), "served a certificate of another CA");

    // The plain protocols ride the same port with a certificate (s_client).
    let got = s_client(d, &s.addrs[0], &cert, b"get k\r\n", 21);
    assert_eq!(
        String::from_utf8_lossy(&got),
        "VALUE k 0 2\r\nv1\r\nEND\r\n"
    );
}

#[test]
fn sighup_reloads_the_certificate_and_keeps_it_when_the_new_files_fail() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    server_cert(d, "first", "first");
    server_cert(d, "second", "second");
    std::fs::copy(d.join("first.pem"), d.join("live.pem")).unwrap();
    std::fs::copy(d.join("first.key"), d.join("live.key")).unwrap();
    let mut s = Tls::start(
        d,
        &[
            "--port",
            "0",
            "--tls-only",
            "--tls-cert",
            "live.pem",
            "--tls-key",
            "live.key",
        ],
        1,
    );
    let addr = s.addrs[0].clone();
    assert!(presented_subject(d, &addr).contains("first"));

    std::fs::copy(d.join("second.pem"), d.join("live.pem")).unwrap();
    std::fs::copy(d.join("second.key"), d.join("live.key")).unwrap();
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(s.child.id() as libc::pid_t, libc::SIGHUP) };
    assert!(
        s.wait_log(
            |l| l.contains("TLS certificate live.pem and key live.key reloaded"),
            1
        ),
        "{:?}",
        s.lines()
    );
    assert!(presented_subject(d, &addr).contains("second"));

    // A key that is not the certificate's: the reload fails, says why, the old one stays.
    std::fs::copy(d.join("first.key"), d.join("live.key")).unwrap();
    unsafe { libc::kill(s.child.id() as libc::pid_t, libc::SIGHUP) };
    assert!(
        s.wait_log(
            |l| l.contains("TLS reload failed, the certificate in use stays")
                && l.contains("do not match"),
            1
        ),
        "{:?}",
        s.lines()
    );
    assert!(presented_subject(d, &addr).contains("second"));
    let got = s_client(d, &addr, &[], b"set a 0 0 1\r\nx\r\n", 8);
    assert_eq!(got, b"STORED\r\n");
}

#[test]
fn bad_tls_files_and_flags_stop_the_start_with_exit_2_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    server_cert(d, "server", "localhost");
    server_cert(d, "other", "other");
    std::fs::write(d.join("junk.pem"), "not a certificate\n").unwrap();
    let run = |args: &[&str]| {
        let o = Command::new(KURA)
            .args(["serve", "*", "--port", "0"])
            .args(args)
            .current_dir(d)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    let tls = |cert: &'static str, key: &'static str| {
        vec!["--tls-port", "0", "--tls-cert", cert, "--tls-key", key]
    };
    for (args, says) in [
        (
            tls("missing.pem", "server.key"),
            "--tls-cert missing.pem: No such file",
        ),
        (
            tls("junk.pem", "server.key"),
            "--tls-cert junk.pem: no certificate",
        ),
        (
            tls("server.pem", "server.pem"),
            "--tls-key server.pem: no private key",
        ),
        (
            tls("server.pem", "other.key"),
            "--tls-cert server.pem with --tls-key other.key: the key is not the certificate's",
        ),
        (
            [
                tls("server.pem", "server.key"),
                vec!["--tls-ca", "junk.pem"],
            ]
            .concat(),
            "--tls-ca junk.pem: no certificate",
        ),
        (
            vec!["--tls-cert", "server.pem", "--tls-key", "server.key"],
            "no port speaks TLS",
        ),
        (vec!["--tls-only", "--tls-cert", "server.pem"], "needs both"),
    ] {
        let (code, err) = run(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn kyoto_wait_parks_a_tls_connection_until_the_signal() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    server_cert(d, "server", "localhost");
    let s = Tls::start(
        d,
        &[
            "--port",
            "0",
            "--tls-only",
            "--tls-cert",
            "server.pem",
            "--tls-key",
            "server.key",
        ],
        1,
    );
    let port = common::port_of(&s.addrs[0]).to_string();
    let url = |p: &str| format!("https://localhost:{port}{p}");
    // A consumer waits (parked) on its TLS connection for the signal `q`.
    let waiter = Command::new("curl")
        .args(["-sS", "--max-time", "20", "--cacert", "ca.pem"])
        .arg(url("/rpc/get?key=job&WAIT=q&WAITTIME=15"))
        .current_dir(d)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The producer's set signals it (tried until the waiter is parked).
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let o = curl(d, &[&url("/rpc/set?key=job&value=v1&SIGNAL=q")]);
        if String::from_utf8_lossy(&o.stdout).contains("SIGNALED\t1") {
            break;
        }
        assert!(Instant::now() < end, "the waiter never parked");
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = waiter.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "value\tv1\n");
}

#[test]
fn a_replication_stream_asked_for_over_tls_is_refused_and_logged() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    server_cert(d, "server", "localhost");
    let mut s = Tls::start(
        d,
        &[
            "--port",
            "0",
            "--tls-port",
            "0",
            "--tls-cert",
            "server.pem",
            "--tls-key",
            "server.key",
            "--ulog",
            "ulog",
        ],
        2,
    );
    // Tyrant's `repl` (0xC8 0xA0, time stamp, server id) over TLS: closed without a byte.
    let mut req = vec![0xC8, 0xA0];
    req.extend_from_slice(&0u64.to_be_bytes());
    req.extend_from_slice(&7u32.to_be_bytes());
    let got = s_client(d, &s.addrs[1], &[], &req, 1);
    assert!(got.is_empty(), "{got:?}");
    assert!(
        s.wait_log(
            |l| l.contains("replication stream refused on a TLS connection"),
            1
        ),
        "{:?}",
        s.lines()
    );
}

/// The binary protocols' rule (issue 34): a peer counted as remote is served the Tyrant
/// protocol over TLS with a verified client certificate, and refused in plain; with a users
/// file, the certificate's common name must be a user's.
#[test]
fn a_verified_client_certificate_admits_the_binary_protocols() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    server_cert(d, "server", "localhost");
    client_cert(d);
    let tls = [
        "--port",
        "0",
        "--tls-port",
        "0",
        "--tls-cert",
        "server.pem",
        "--tls-key",
        "server.key",
        "--tls-ca",
        "ca.pem",
        "--test-loopback-is-remote",
    ];
    let cert = ["-cert", "client.pem", "-key", "client.key"];
    let s = Tls::start(d, &tls, 2);
    let (plain, secure) = (s.addrs[0].clone(), s.addrs[1].clone());
    // Over TLS with the certificate: put then get answer.
    let mut req = tt_put(b"k", b"v");
    req.extend(tt_get(b"k"));
    let got = s_client(d, &secure, &cert, &req, 1 + 1 + 4 + 1);
    assert_eq!(got, [0, 0, 0, 0, 0, 1, b'v'], "put and get over TLS");
    // In plain, the same peer is refused (the connection closed at its first byte).
    let mut c = std::net::TcpStream::connect(&plain).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(&tt_get(b"k")).unwrap();
    let mut buf = [0u8; 16];
    assert!(
        matches!(c.read(&mut buf), Ok(0) | Err(_)),
        "served in plain"
    );
    drop(s);

    // With a users file, alice's certificate is admitted only while alice is a user.
    let users = |names: &[&str]| {
        for n in names {
            let mut add = Command::new(KURA)
                .args(["users", "add", "users.txt", n, "--rights", "read"])
                .current_dir(d)
                .stdin(Stdio::piped())
                .spawn()
                .unwrap();
            let _ = add.stdin.take().unwrap().write_all(b"pw\n");
            assert!(add.wait().unwrap().success());
        }
    };
    users(&["bob"]);
    let with_users: Vec<&str> = tls
        .iter()
        .copied()
        .chain(["--users", "users.txt"])
        .collect();
    let s = Tls::start(d, &with_users, 2);
    let got = s_client(d, &s.addrs[1], &cert, &tt_get(b"k"), 1);
    assert!(
        got.is_empty(),
        "a certificate naming no user was served: {got:?}"
    );
    drop(s);
    users(&["alice"]);
    let s = Tls::start(d, &with_users, 2);
    // alice may read (a miss: this server is in memory) but not write.
    let got = s_client(d, &s.addrs[1], &cert, &tt_get(b"k"), 1);
    assert_eq!(got, [1], "alice's get");
    let got = s_client(d, &s.addrs[1], &cert, &tt_put(b"k", b"v"), 1);
    assert_eq!(got, [1], "alice may not write");
}
