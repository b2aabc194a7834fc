//! `kura serve` as a client sees it: the real binary on a free loopback port, spoken to over
//! TCP with the memcached text protocol.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Server {
    child: Child,
    addr: String,
}

impl Server {
    /// Start `kura serve NAME --port 0` and wait for its "listening on" line (never sleep).
    fn start(dir: &std::path::Path, name: &str) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kura"))
            .args(["serve", name, "--port", "0", "--threads", "2"])
            .current_dir(dir)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("start kura serve");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let addr = loop {
            let line = lines
                .next()
                .expect("kura serve exited before listening")
                .expect("read stderr");
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest.split_whitespace().next().expect("address").to_string();
            }
        };
        // Keep draining the log so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Server { child, addr }
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(&self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    fn signal(&mut self, sig: libc::c_int) -> std::process::ExitStatus {
        // SAFETY: sending a signal to our own child process.
        unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        self.child.wait().expect("wait")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn roundtrip(s: &mut TcpStream, send: &[u8], expect: &str) {
    s.write_all(send).unwrap();
    let mut got = vec![0u8; expect.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), expect);
}

#[test]
fn memcached_text_over_tcp_and_clean_shutdown_keeps_data() {
    let dir = tempfile::tempdir().unwrap();
    let mut srv = Server::start(dir.path(), "m.kh");
    let mut c = srv.connect();
    roundtrip(&mut c, b"set k 7 0 5\r\nhello\r\n", "STORED\r\n");
    roundtrip(&mut c, b"get k nope\r\n", "VALUE k 7 5\r\nhello\r\nEND\r\n");
    roundtrip(
        &mut c,
        b"incr k 1\r\n",
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
    );
    roundtrip(
        &mut c,
        b"set n 0 0 1 noreply\r\n9\r\nincr n 1\r\n",
        "10\r\n",
    );
    // Two clients at once.
    let mut d = srv.connect();
    roundtrip(&mut d, b"get n\r\n", "VALUE n 0 2\r\n10\r\nEND\r\n");
    // SIGTERM: stop, sync, close; exit 0; the data is on disk.
    let status = srv.signal(libc::SIGTERM);
    assert!(status.success(), "{status:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["db", "get", "m.kh", "k"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.stdout, b"hello");
}

/// Every write acknowledged by a `sync=always` server survives SIGKILL; the database passes
/// `kura db check` afterwards.
#[test]
fn sigkill_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let name = "s.kh#sync=always";
    let mut acked = 0;
    for round in 0..3 {
        let mut srv = Server::start(dir.path(), name);
        let mut c = srv.connect();
        for i in 0..50 {
            let n = round * 50 + i;
            roundtrip(
                &mut c,
                format!("set k{n} 0 0 3\r\nv{:02}\r\n", n % 100).as_bytes(),
                "STORED\r\n",
            );
            acked = n + 1;
        }
        srv.signal(libc::SIGKILL);
    }
    let check = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["db", "check", "s.kh"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let srv = Server::start(dir.path(), name);
    let mut c = srv.connect();
    for n in 0..acked {
        roundtrip(
            &mut c,
            format!("get k{n}\r\n").as_bytes(),
            &format!("VALUE k{n} 0 3\r\nv{:02}\r\nEND\r\n", n % 100),
        );
    }
}

#[test]
fn bad_input_gets_errors_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "*");
    // A line that never ends: error, then the connection is closed.
    let mut a = srv.connect();
    a.write_all(&vec![b'x'; 8 << 10]).unwrap();
    let mut got = String::new();
    let _ = a.read_to_string(&mut got);
    assert!(got.starts_with("CLIENT_ERROR line too long"), "{got}");
    // Garbage gets ERROR and the connection goes on; a huge length field is refused (and the
    // announced block would be skipped as it arrives).
    let mut b = srv.connect();
    roundtrip(&mut b, b"\x01\x02\x03\r\n", "ERROR\r\n");
    roundtrip(
        &mut b,
        b"set k 0 0 4294967296\r\n",
        "SERVER_ERROR object too large for cache\r\n",
    );
    // Other clients are unaffected.
    let mut c = srv.connect();
    roundtrip(
        &mut c,
        b"version\r\n",
        &format!("VERSION 1.6.21-kura-{}\r\n", env!("CARGO_PKG_VERSION")),
    );
}
