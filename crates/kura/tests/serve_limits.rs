//! Limits that hold on every protocol and say what happened: `--max-value-size` refused where
//! a value enters (HTTP REST and RPC in every body encoding, Kyoto Tycoon binary, Tokyo
//! Tyrant, memcached text, meta and binary), nothing stored, the refusal logged at a bounded
//! pace; `kura remote` naming the limit; client mistakes answered as client errors.

mod common;

use common::{eventually, Tt};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `kura serve` whose log (stderr) is kept for the test to read.
struct Logged {
    child: Child,
    addr: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Logged {
    fn start(dir: &std::path::Path, args: &[&str]) -> Logged {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kura"))
            .arg("serve")
            .args(["--port", "0", "--threads", "2"])
            .args(args)
            .current_dir(dir)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("start kura serve");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let log = Arc::new(Mutex::new(Vec::new()));
        let addr = loop {
            let line = lines
                .next()
                .expect("kura serve exited")
                .expect("read stderr");
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest.split_whitespace().next().expect("address").to_string();
            }
        };
        let keep = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                keep.lock().unwrap().push(line);
            }
        });
        Logged { child, addr, log }
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(&self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }

    /// Log lines containing `what`.
    fn logged(&self, what: &str) -> Vec<String> {
        let log = self.log.lock().unwrap();
        log.iter().filter(|l| l.contains(what)).cloned().collect()
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP request on its own connection: the status and the whole response.
fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    // The server may answer (and close) before it has read a refused body: a failed write
    // after the head is not an error here, the answer is what counts.
    let _ = s.write_all(req.as_bytes()).and_then(|_| s.write_all(body));
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

fn b64(data: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                s.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// Every byte as `%XX` (URL encoding) or `=XX` (quoted-printable).
fn escaped(data: &[u8], mark: char) -> String {
    data.iter().map(|b| format!("{mark}{b:02X}")).collect()
}

/// Store `value` under `key` by every way Kyoto Tycoon's RPC and Tyrant's REST take a value;
/// the statuses, in order.
fn http_writes(addr: &str, key: &str, value: &[u8]) -> Vec<(String, u16)> {
    let text = std::str::from_utf8(value).unwrap();
    let tsv = "text/tab-separated-values";
    let mut got = Vec::new();
    let mut note = |what: &str, (status, _): (u16, String)| got.push((what.to_string(), status));
    note("PUT", http(addr, "PUT", &format!("/{key}"), &[], value));
    let body = format!("key\t{key}\nvalue\t{text}\n");
    note(
        "set tsv",
        http(
            addr,
            "POST",
            "/rpc/set",
            &[("Content-Type", tsv)],
            body.as_bytes(),
        ),
    );
    let body = format!(
        "{}\t{}\n{}\t{}\n",
        b64(b"key"),
        b64(key.as_bytes()),
        b64(b"value"),
        b64(value)
    );
    let ct = format!("{tsv}; colenc=B");
    note(
        "set base64",
        http(
            addr,
            "POST",
            "/rpc/set",
            &[("Content-Type", &ct)],
            body.as_bytes(),
        ),
    );
    let body = format!("key\t{key}\nvalue\t{}\n", escaped(value, '='));
    let ct = format!("{tsv}; colenc=Q");
    note(
        "set quoted-printable",
        http(
            addr,
            "POST",
            "/rpc/set",
            &[("Content-Type", &ct)],
            body.as_bytes(),
        ),
    );
    let ct = "application/x-www-form-urlencoded";
    let body = format!("key={key}&value={}", escaped(value, '%'));
    note(
        "set form",
        http(
            addr,
            "POST",
            "/rpc/set",
            &[("Content-Type", ct)],
            body.as_bytes(),
        ),
    );
    let body = format!("key={key}&value={}", escaped(value, '%'));
    note(
        "set query",
        http(addr, "GET", &format!("/rpc/set?{body}"), &[], b""),
    );
    for proc in ["add", "replace", "append"] {
        let body = format!("key\t{key}\nvalue\t{text}\n");
        note(
            proc,
            http(
                addr,
                "POST",
                &format!("/rpc/{proc}"),
                &[("Content-Type", tsv)],
                body.as_bytes(),
            ),
        );
    }
    let body = format!("key\t{key}\nnval\t{text}\n");
    note(
        "cas",
        http(
            addr,
            "POST",
            "/rpc/cas",
            &[("Content-Type", tsv)],
            body.as_bytes(),
        ),
    );
    // Tyrant's REST POST of a misc function: its arguments are the form's values.
    let body = format!("a={key}&b={}", escaped(value, '%'));
    let mname = [("X-TT-MNAME", "putlist"), ("Content-Type", ct)];
    note(
        "POST misc",
        http(addr, "POST", "/", &mname, body.as_bytes()),
    );
    let body = format!("_{key}\t{text}\n");
    note(
        "set_bulk",
        http(
            addr,
            "POST",
            "/rpc/set_bulk",
            &[("Content-Type", tsv)],
            body.as_bytes(),
        ),
    );
    got
}

/// Kyoto Tycoon's binary set_bulk of one record: the reply's first byte.
fn kt_set_bulk(addr: &str, key: &[u8], value: &[u8]) -> u8 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut m = vec![0xB8];
    m.extend_from_slice(&0u32.to_be_bytes());
    m.extend_from_slice(&1u32.to_be_bytes());
    m.extend_from_slice(&0u16.to_be_bytes());
    m.extend_from_slice(&(key.len() as u32).to_be_bytes());
    m.extend_from_slice(&(value.len() as u32).to_be_bytes());
    m.extend_from_slice(&i64::MAX.to_be_bytes());
    m.extend_from_slice(key);
    m.extend_from_slice(value);
    let _ = s.write_all(&m);
    let mut b = [0u8; 1];
    s.read_exact(&mut b).unwrap();
    b[0]
}

/// memcached text: the reply line to a request.
fn mc_line(s: &mut TcpStream, req: &[u8]) -> String {
    s.write_all(req).unwrap();
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        s.read_exact(&mut b).unwrap();
        line.push(b[0]);
    }
    String::from_utf8(line).unwrap()
}

/// memcached binary SET: the status of its reply.
fn mc_bin_set(s: &mut TcpStream, key: &[u8], value: &[u8]) -> u16 {
    let mut m = vec![0x80, 0x01];
    m.extend_from_slice(&(key.len() as u16).to_be_bytes());
    m.extend_from_slice(&[8, 0, 0, 0]);
    m.extend_from_slice(&((8 + key.len() + value.len()) as u32).to_be_bytes());
    m.extend_from_slice(&[0; 12]);
    m.extend_from_slice(&[0; 8]);
    m.extend_from_slice(key);
    m.extend_from_slice(value);
    s.write_all(&m).unwrap();
    let mut head = [0u8; 24];
    s.read_exact(&mut head).unwrap();
    let body = u32::from_be_bytes([head[8], head[9], head[10], head[11]]) as usize;
    let mut rest = vec![0u8; body];
    s.read_exact(&mut rest).unwrap();
    u16::from_be_bytes([head[6], head[7]])
}

/// Tyrant misc: the result list, or `None` on failure.
fn tt_misc(t: &mut Tt, name: &[u8], args: &[&[u8]]) -> Option<Vec<Vec<u8>>> {
    let mut m = vec![0xC8, 0x90];
    m.extend_from_slice(&(name.len() as u32).to_be_bytes());
    m.extend_from_slice(&0u32.to_be_bytes());
    m.extend_from_slice(&(args.len() as u32).to_be_bytes());
    m.extend_from_slice(name);
    for a in args {
        m.extend_from_slice(&(a.len() as u32).to_be_bytes());
        m.extend_from_slice(a);
    }
    t.0.write_all(&m).unwrap();
    let code = t.code();
    let n = t.u32();
    let items: Vec<Vec<u8>> = (0..n)
        .map(|_| {
            let l = t.u32() as usize;
            t.bytes(l)
        })
        .collect();
    (code == 0).then_some(items)
}

const LIMIT: usize = 1024;

/// `--max-value-size` held only on the Tyrant binary protocol: HTTP PUT and Kyoto Tycoon's
/// RPC stored values of any size (up to the body limit). Now every
/// protocol refuses a value one byte over with its own error and stores nothing, and takes a
/// value exactly at the limit.
#[test]
fn the_value_limit_holds_on_every_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Logged::start(dir.path(), &["v.kh", "--max-value-size", "1k"]);
    let addr = srv.addr.clone();
    let over = vec![b'o'; LIMIT + 1];
    let at = vec![b'a'; LIMIT];
    let mut tt = Tt::new(&addr);

    // HTTP: 400 with the reason, nothing stored.
    for (what, status) in http_writes(&addr, "h", &over) {
        assert_eq!(status, 400, "{what} of a value over the limit");
    }
    let (status, text) = http(&addr, "PUT", "/h", &[], &over);
    assert!(
        text.contains("value of 1025 bytes over the server's --max-value-size 1024"),
        "{status} {text}"
    );
    assert_eq!(tt.get(b"h"), None, "nothing stored over HTTP");
    // At the limit: every way stores (add answers 450 once the key exists, as Kyoto Tycoon's
    // add does; cas of an absent old value 450 too).
    for (what, status) in http_writes(&addr, "h", &at) {
        let want = if what == "add" || what == "cas" {
            450
        } else {
            200
        };
        let want = if what == "PUT" { 201 } else { want };
        assert_eq!(status, want, "{what} of a value at the limit");
    }
    assert_eq!(tt.get(b"h"), Some(at.clone()), "set_bulk came last");

    // Kyoto Tycoon binary set_bulk: the error magic (and a hang-up), nothing stored.
    assert_eq!(kt_set_bulk(&addr, b"k", &over), 0xBF);
    assert_eq!(tt.get(b"k"), None);
    assert_eq!(kt_set_bulk(&addr, b"k", &at), 0xB8);
    assert_eq!(tt.get(b"k"), Some(at.clone()));

    // Tyrant: the failure code, the connection stays in step, `misc error` says why.
    assert_eq!(tt.put(b"t", &over), 1);
    assert_eq!(tt.putcat(b"t", &over), 1);
    let why = tt_misc(&mut tt, b"error", &[]).expect("misc error");
    assert_eq!(
        String::from_utf8_lossy(&why[0]),
        "9999: value of 1025 bytes over the server's --max-value-size 1024"
    );
    assert_eq!(
        tt_misc(
            &mut tt,
            b"putlist",
            &[b"t", b"small", b"t2", &over, b"t3", b"x"]
        ),
        None
    );
    assert_eq!(tt.get(b"t"), None);
    assert_eq!(
        tt.get(b"t3"),
        None,
        "a refused putlist stores none of its records"
    );
    assert_eq!(tt.put(b"t", &at), 0);
    assert!(tt_misc(&mut tt, b"putlist", &[b"t2", &at]).is_some());
    assert_eq!(tt.get(b"t2"), Some(at.clone()));

    // memcached text, meta and binary (the item limit, 1 MiB, is far above).
    let mut mc = srv.connect();
    let set = |k: &str, v: &[u8]| {
        [
            format!("set {k} 0 0 {}\r\n", v.len()).as_bytes(),
            v,
            b"\r\n",
        ]
        .concat()
    };
    assert_eq!(
        mc_line(&mut mc, &set("m", &over)),
        "SERVER_ERROR object too large for cache\r\n"
    );
    let ms = [
        format!("ms m {}\r\n", over.len()).as_bytes(),
        &over,
        b"\r\n",
    ]
    .concat();
    assert_eq!(
        mc_line(&mut mc, &ms),
        "SERVER_ERROR object too large for cache\r\n"
    );
    assert_eq!(mc_line(&mut mc, b"get m\r\n"), "END\r\n");
    assert_eq!(mc_line(&mut mc, &set("m", &at)), "STORED\r\n");
    // An append whose result would be over the limit stores nothing.
    assert_eq!(
        mc_line(&mut mc, b"append m 0 0 1\r\nx\r\n"),
        "NOT_STORED\r\n"
    );
    let mut bin = srv.connect();
    assert_eq!(
        mc_bin_set(&mut bin, b"b", &over),
        0x0003,
        "binary: value too large"
    );
    assert_eq!(mc_bin_set(&mut bin, b"b", &at), 0);
    assert_eq!(tt.get(b"b"), Some(at.clone()));

    // Each refusal is logged, at a bounded pace: the first of the burst, not one per request.
    assert!(eventually(5, || !srv
        .logged("over the server's --max-value-size")
        .is_empty()));
    let lines = srv.logged("over the server's --max-value-size");
    assert!(
        lines[0].contains("refused (HTTP PUT): value of 1025 bytes"),
        "{lines:?}"
    );
    assert!(lines.len() < 4, "rate-limited: {lines:?}");
}

/// With a 1 MiB limit a 1.5 MB HTTP PUT answered 201 and a TSV /rpc/set 200.
#[test]
fn a_one_and_a_half_megabyte_value_is_refused_over_http_at_one_mebibyte() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Logged::start(dir.path(), &["w.kh", "--max-value-size", "1m"]);
    let big = vec![b'z'; 1_500_000];
    let (status, text) = http(&srv.addr, "PUT", "/d", &[], &big);
    assert_eq!(status, 400, "{text}");
    let mut body = b"key\td\nvalue\t".to_vec();
    body.extend_from_slice(&big);
    body.push(b'\n');
    let (status, text) = http(
        &srv.addr,
        "POST",
        "/rpc/set",
        &[("Content-Type", "text/tab-separated-values")],
        &body,
    );
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("ERROR\tinvalid parameters: value of 1500000 bytes"),
        "{text}"
    );
    let mut tt = Tt::new(&srv.addr);
    assert_eq!(tt.get(b"d"), None);
    let (status, _) = http(&srv.addr, "PUT", "/d", &[], &vec![b'y'; 1 << 20]);
    assert_eq!(status, 201);
    assert_eq!(tt.get(b"d").map(|v| v.len()), Some(1 << 20));
    // A value at the limit arrives in any encoding, the longest too: every byte escaped.
    let mut body = b"key=e&value=".to_vec();
    body.extend(std::iter::repeat_n(&b"%41"[..], 1 << 20).flatten());
    let ct = [("Content-Type", "application/x-www-form-urlencoded")];
    let (status, text) = http(&srv.addr, "POST", "/rpc/set", &ct, &body);
    assert_eq!(status, 200, "{}", &text[..text.len().min(300)]);
    assert_eq!(tt.get(b"e"), Some(vec![b'A'; 1 << 20]));
}

fn remote(addr: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["remote", "--port", common::port_of(addr)])
        .args(args)
        .output()
        .expect("run kura remote")
}

/// `kura remote put` said `put x failed (code 1)` and `kura remote import` of a file with an
/// oversized line ended in `Connection reset by peer`: both now name the limit (read from the
/// server's `stat`), the import the line, before anything is imported.
#[test]
fn kura_remote_names_the_server_limit() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Logged::start(dir.path(), &["r.kh", "--max-value-size", "1k"]);
    let over = "o".repeat(LIMIT + 1);
    let out = remote(&srv.addr, &["put", "x", &over]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("put x: value of 1025 bytes over the server's --max-value-size 1024"),
        "{err}"
    );
    let out = remote(&srv.addr, &["put", "--nr", "x", &over]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-value-size 1024"));
    let out = remote(&srv.addr, &["put", "x", &over[1..]]);
    assert!(out.status.success());
    let file = dir.path().join("in.tsv");
    std::fs::write(&file, format!("a\t1\nb\t2\nc\t{over}\nd\t4\n")).unwrap();
    let out = remote(&srv.addr, &["import", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("line 3: value of 1025 bytes over the server's --max-value-size 1024; nothing was imported"),
        "{err}"
    );
    let mut tt = Tt::new(&srv.addr);
    assert_eq!(tt.get(b"a"), None, "nothing imported");
    // The server's own refusal of a list with an oversized element keeps the stream in step:
    // a batch over the limit fails, the next request is answered.
    assert_eq!(tt_misc(&mut tt, b"putlist", &[b"a", over.as_bytes()]), None);
    assert_eq!(tt.put(b"a", b"1"), 0);
}

/// `/rpc/match_prefix?prefix=1` on a `.kf` answered 500: the engine's refusal of a key the
/// kind cannot take is the client's mistake, a 400 with the reason on HTTP and a client error
/// on memcached; 5xx stays for faults of the server.
#[test]
fn client_mistakes_are_client_errors() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Logged::start(dir.path(), &["f.kf"]);
    let (status, text) = http(&srv.addr, "GET", "/rpc/match_prefix?prefix=1", &[], b"");
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("is not an interval of ids"), "{text}");
    let (status, text) = http(&srv.addr, "GET", "/rpc/set?key=abc&value=1", &[], b"");
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("invalid key"), "{text}");
    let (status, text) = http(&srv.addr, "PUT", "/abc", &[], b"v");
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("X-Kt-Error: DB: 2: invalid operation: invalid key"),
        "{text}"
    );
    let (status, _) = http(&srv.addr, "PUT", "/7", &[], b"v");
    assert_eq!(status, 201);
    let mut mc = srv.connect();
    let r = mc_line(&mut mc, b"set abc 0 0 1\r\nv\r\n");
    assert!(r.starts_with("CLIENT_ERROR invalid key"), "{r}");
    let mut tt = Tt::new(&srv.addr);
    assert_eq!(tt.put(b"abc", b"v"), 1);
    let why = tt_misc(&mut tt, b"error", &[]).expect("misc error");
    assert!(String::from_utf8_lossy(&why[0]).starts_with("9999: invalid key"));
}
