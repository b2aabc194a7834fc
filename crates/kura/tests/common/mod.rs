//! The harness shared by the integration tests that start the real `kura serve`.
#![allow(dead_code)]

use kura_proto::tt_bin::{decode_reply, encode_request, DecodedReply, Reply, Request};
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

/// `kura db ARGS` run in `dir` (no standard input).
pub fn kura_db(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kura"))
        .current_dir(dir)
        .arg("db")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run kura")
}

/// `kura users ARGS` run in `dir`, `stdin` written to it (a password). A command that refuses
/// its arguments exits without reading: a broken pipe is no error.
pub fn kura_users(dir: &Path, args: &[&str], stdin: &str) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kura"))
        .current_dir(dir)
        .arg("users")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kura users");
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}

/// The standard output of a command that must have exited with status 0.
#[track_caller]
pub fn ok_stdout(o: std::process::Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(0),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// Copy the directory `from` (a database, a fixture) to `to`, whole.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Send one Tyrant request (framed by `kura_proto::tt_bin`), read its whole reply (and
/// nothing after it).
pub fn tt_call(s: &mut TcpStream, req: &Request<'_>) -> Reply {
    let mut out = Vec::new();
    encode_request(req, &mut out);
    s.write_all(&out).unwrap();
    let mut buf = Vec::new();
    loop {
        match decode_reply(req.cmd(), &buf).expect("well-formed reply") {
            DecodedReply::Complete { reply, consumed } => {
                assert_eq!(consumed, buf.len(), "nothing after the reply");
                return reply;
            }
            DecodedReply::Incomplete => {
                let mut chunk = [0u8; 65536];
                let n = s.read(&mut chunk).unwrap();
                assert!(n > 0, "server closed the connection");
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
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

/// A `kura serve` that logs to a file (`start_logged`), killed when dropped.
pub struct Kura(pub Child);

impl Drop for Kura {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Kura {
    pub fn signal(&mut self, sig: libc::c_int) {
        // SAFETY: a signal to the child this test started.
        unsafe { libc::kill(self.0.id() as libc::pid_t, sig) };
    }

    pub fn stop(mut self) {
        self.signal(libc::SIGTERM);
        assert!(self.0.wait().unwrap().success());
    }
}

/// Start `kura serve ARGS…` in `dir` and wait until the log file `log` says it listens (text or
/// JSON lines); its address.
pub fn start_logged(dir: &Path, args: &[&str], log: &Path) -> (Kura, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_kura"))
        .arg("serve")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start kura serve");
    let k = Kura(child);
    let mut addr = None;
    assert!(
        eventually(20, || {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            addr = text.lines().find_map(|l| {
                l.split("listening on ")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .map(|a| a.trim_end_matches(['"', ',']).to_string())
            });
            addr.is_some()
        }),
        "never listened: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    (k, addr.unwrap())
}

/// Whether these tools are there; panics when they must be (KURA_PEER_TESTS).
pub fn tools_present(tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| {
            Command::new("sh")
                .args(["-c", &format!("command -v {t}")])
                .stdout(Stdio::null())
                .status()
                .map_or(true, |s| !s.success())
        })
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var_os("KURA_PEER_TESTS").is_none(),
        "KURA_PEER_TESTS is set but {missing:?} are missing (apt-get install tokyocabinet-bin \
         kyotocabinet-utils)"
    );
    eprintln!("skipped: {missing:?} not installed (scripts/test.sh installs them)");
    false
}

/// A Redis reply (RESP2 and RESP3), as [`Resp`] reads it.
#[derive(Clone, Debug, PartialEq)]
pub enum RV {
    Simple(String),
    Err(String),
    Int(i64),
    Bulk(Vec<u8>),
    /// `$-1`, `*-1` or RESP3's `_`.
    Nil,
    Array(Vec<RV>),
    Map(Vec<(RV, RV)>),
    Set(Vec<RV>),
    Double(String),
    Bool(bool),
    /// A verbatim string: its format and text.
    Verbatim(String, String),
}

impl RV {
    /// A bulk string's text.
    pub fn s(&self) -> String {
        match self {
            RV::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            RV::Simple(s) | RV::Double(s) => s.clone(),
            RV::Verbatim(_, s) => s.clone(),
            other => panic!("not a string: {other:?}"),
        }
    }
}

/// A bulk string reply.
pub fn bulk(s: &str) -> RV {
    RV::Bulk(s.as_bytes().to_vec())
}

/// A small Redis client: requests as multibulks, replies read whole (every RESP3 type).
pub struct Resp {
    pub w: TcpStream,
    pub r: BufReader<TcpStream>,
}

impl Resp {
    pub fn new(addr: &str) -> Resp {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Resp {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }

    /// A request as a multibulk.
    pub fn encode(args: &[&[u8]]) -> Vec<u8> {
        let mut v = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            v.extend_from_slice(a);
            v.extend_from_slice(b"\r\n");
        }
        v
    }

    pub fn send(&mut self, args: &[&str]) {
        let a: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.w.write_all(&Resp::encode(&a)).unwrap();
    }

    /// Send a request and read its reply.
    pub fn call(&mut self, args: &[&str]) -> RV {
        self.send(args);
        self.read()
    }

    pub fn call_bytes(&mut self, args: &[&[u8]]) -> RV {
        self.w.write_all(&Resp::encode(args)).unwrap();
        self.read()
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).unwrap();
        assert!(l.ends_with("\r\n"), "line {l:?}");
        l.truncate(l.len() - 2);
        l
    }

    fn n(s: &str) -> i64 {
        s.parse().unwrap_or_else(|_| panic!("number {s:?}"))
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n + 2];
        self.r.read_exact(&mut b).unwrap();
        assert_eq!(&b[n..], b"\r\n");
        b.truncate(n);
        b
    }

    /// Read one reply.
    pub fn read(&mut self) -> RV {
        let l = self.line();
        let (t, rest) = l.split_at(1);
        match t {
            "+" => RV::Simple(rest.into()),
            "-" => RV::Err(rest.into()),
            ":" => RV::Int(Resp::n(rest)),
            "_" => RV::Nil,
            "," => RV::Double(rest.into()),
            "#" => RV::Bool(rest == "t"),
            "$" | "=" => match Resp::n(rest) {
                -1 => RV::Nil,
                n => {
                    let b = self.bytes(n as usize);
                    if t == "$" {
                        RV::Bulk(b)
                    } else {
                        let s = String::from_utf8(b).unwrap();
                        RV::Verbatim(s[..3].into(), s[4..].into())
                    }
                }
            },
            "*" | "~" => match Resp::n(rest) {
                -1 => RV::Nil,
                n => {
                    let v = (0..n).map(|_| self.read()).collect();
                    if t == "*" {
                        RV::Array(v)
                    } else {
                        RV::Set(v)
                    }
                }
            },
            "%" => RV::Map(
                (0..Resp::n(rest))
                    .map(|_| (self.read(), self.read()))
                    .collect(),
            ),
            _ => panic!("unknown reply {l:?}"),
        }
    }
}
