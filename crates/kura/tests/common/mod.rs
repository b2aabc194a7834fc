//! The harness shared by the integration tests that start the real `kura serve`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    pub child: Child,
    pub addr: String,
}

impl Server {
    /// Start `kura serve NAME --port 0` and wait for its "listening on" line (never sleep).
    pub fn start(dir: &std::path::Path, name: &str) -> Server {
        Server::start_with(dir, name, &[])
    }

    /// Start with extra `kura serve` options.
    pub fn start_with(dir: &std::path::Path, name: &str, extra: &[&str]) -> Server {
        let mut args = vec![name, "--port", "0", "--threads", "2"];
        args.extend_from_slice(extra);
        Server::start_args(dir, &args, 1).0
    }

    /// Start `kura serve ARGS…` and wait for `listeners` "listening on" lines; returns the
    /// server (its `addr` the first listener's) and every listener's address, in order.
    pub fn start_args(
        dir: &std::path::Path,
        args: &[&str],
        listeners: usize,
    ) -> (Server, Vec<String>) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kura"))
            .arg("serve")
            .args(args)
            .current_dir(dir)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("start kura serve");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let mut addrs = Vec::new();
        while addrs.len() < listeners {
            let line = lines
                .next()
                .expect("kura serve exited before listening")
                .expect("read stderr");
            if let Some(rest) = line.split("listening on ").nth(1) {
                addrs.push(rest.split_whitespace().next().expect("address").to_string());
            }
        }
        // Keep draining the log so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let addr = addrs[0].clone();
        (Server { child, addr }, addrs)
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(&self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    pub fn signal(&mut self, sig: libc::c_int) -> std::process::ExitStatus {
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

/// The port of a server address `host:port`.
pub fn port_of(addr: &str) -> &str {
    addr.rsplit(':').next().expect("port")
}

/// A port free right now (the server binds it next).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn serve(dir: &Path, args: &[&str]) -> Server {
    let mut a = vec!["--threads", "2"];
    a.extend_from_slice(args);
    Server::start_args(dir, &a, 1).0
}

/// A minimal Tokyo Tyrant client.
pub struct Tt(pub TcpStream);

impl Tt {
    pub fn new(addr: &str) -> Tt {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Tt(s)
    }
    pub fn code(&mut self) -> u8 {
        let mut b = [0u8; 1];
        self.0.read_exact(&mut b).unwrap();
        b[0]
    }
    pub fn u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        self.0.read_exact(&mut b).unwrap();
        u32::from_be_bytes(b)
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        self.0.read_exact(&mut b).unwrap();
        b
    }
    pub fn kv(&mut self, cmd: u8, k: &[u8], v: &[u8]) -> u8 {
        let mut m = vec![0xC8, cmd];
        m.extend_from_slice(&(k.len() as u32).to_be_bytes());
        m.extend_from_slice(&(v.len() as u32).to_be_bytes());
        m.extend_from_slice(k);
        m.extend_from_slice(v);
        self.0.write_all(&m).unwrap();
        self.code()
    }
    /// The server's reason for this connection's last failure (`misc error`).
    pub fn last_error(&mut self) -> String {
        let mut m = vec![0xC8, 0x90];
        m.extend_from_slice(&5u32.to_be_bytes());
        m.extend_from_slice(&0u32.to_be_bytes());
        m.extend_from_slice(&0u32.to_be_bytes());
        m.extend_from_slice(b"error");
        self.0.write_all(&m).unwrap();
        if self.code() != 0 {
            return "misc error failed".into();
        }
        let n = self.u32();
        let mut out = String::new();
        for _ in 0..n {
            let l = self.u32() as usize;
            out.push_str(&String::from_utf8_lossy(&self.bytes(l)));
        }
        out
    }
    pub fn put(&mut self, k: &[u8], v: &[u8]) -> u8 {
        self.kv(0x10, k, v)
    }
    pub fn putcat(&mut self, k: &[u8], v: &[u8]) -> u8 {
        self.kv(0x12, k, v)
    }
    pub fn out(&mut self, k: &[u8]) -> u8 {
        let mut m = vec![0xC8, 0x20];
        m.extend_from_slice(&(k.len() as u32).to_be_bytes());
        m.extend_from_slice(k);
        self.0.write_all(&m).unwrap();
        self.code()
    }
    pub fn addint(&mut self, k: &[u8], n: i32) {
        let mut m = vec![0xC8, 0x60];
        m.extend_from_slice(&(k.len() as u32).to_be_bytes());
        m.extend_from_slice(&n.to_be_bytes());
        m.extend_from_slice(k);
        self.0.write_all(&m).unwrap();
        assert_eq!(self.code(), 0);
        self.u32();
    }
    pub fn get(&mut self, k: &[u8]) -> Option<Vec<u8>> {
        let mut m = vec![0xC8, 0x30];
        m.extend_from_slice(&(k.len() as u32).to_be_bytes());
        m.extend_from_slice(k);
        self.0.write_all(&m).unwrap();
        if self.code() != 0 {
            return None;
        }
        let n = self.u32() as usize;
        Some(self.bytes(n))
    }
    /// Every key (fwmkeys with an empty prefix).
    pub fn keys(&mut self) -> Vec<Vec<u8>> {
        let mut m = vec![0xC8, 0x58];
        m.extend_from_slice(&0u32.to_be_bytes());
        m.extend_from_slice(&(-1i32).to_be_bytes());
        self.0.write_all(&m).unwrap();
        let code = self.code();
        assert_eq!(code, 0, "fwmkeys failed: {}", self.last_error());
        let n = self.u32();
        (0..n)
            .map(|_| {
                let l = self.u32() as usize;
                self.bytes(l)
            })
            .collect()
    }
    pub fn vanish(&mut self) {
        self.0.write_all(&[0xC8, 0x72]).unwrap();
        assert_eq!(self.code(), 0);
    }
    pub fn stat(&mut self) -> BTreeMap<String, String> {
        self.0.write_all(&[0xC8, 0x88]).unwrap();
        assert_eq!(self.code(), 0);
        let n = self.u32() as usize;
        let text = String::from_utf8(self.bytes(n)).unwrap();
        text.lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }
    pub fn digest(&mut self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let keys = self.keys();
        keys.into_iter()
            .filter_map(|k| self.get(&k).map(|v| (k, v)))
            .collect()
    }
}

/// memcached text: send a line (and data), read one reply line.
pub fn mc(s: &mut TcpStream, req: &str) -> String {
    s.write_all(req.as_bytes()).unwrap();
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        s.read_exact(&mut b).unwrap();
        line.push(b[0]);
    }
    String::from_utf8(line).unwrap()
}

/// Wait until `f` holds (at most `secs`).
pub fn eventually(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

pub fn converge(master: &str, replica: &str, secs: u64) {
    let (mut m, mut r) = (Tt::new(master), Tt::new(replica));
    let mut last = (BTreeMap::new(), BTreeMap::new());
    let ok = eventually(secs, || {
        last = (m.digest(), r.digest());
        last.0 == last.1
    });
    assert!(
        ok,
        "no convergence: master {} keys, replica {} keys",
        last.0.len(),
        last.1.len()
    );
}
