//! Large values through the real `kura serve` with its default settings: 32 MiB through Kyoto
//! Tycoon's HTTP RPC and binary protocol and through Tokyo Tyrant's binary protocol, while
//! memcached keeps its 1 MiB item limit; and many large requests at once, more than the
//! server's in-flight budget holds: each waits for room, none is lost.

mod common;

use common::Server;
use std::io::{BufRead, BufReader, Read, Write};

const BIG: usize = 32 << 20;

fn big_value() -> Vec<u8> {
    (0..BIG).map(|i| (i % 251) as u8).collect()
}

fn b64(s: &[u8]) -> Vec<u8> {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(s.len() / 3 * 4 + 4);
    for c in s.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            out.push(if i <= c.len() {
                T[(n >> (18 - 6 * i) & 63) as usize]
            } else {
                b'='
            });
        }
    }
    out
}

#[test]
fn a_32_mib_value_through_kyoto_tycoon_http_and_binary_and_tyrant() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "big.kh");
    let value = big_value();

    // Kyoto Tycoon RPC: a TSV body with base64 columns, as Kyoto Tycoon's clients send it.
    let mut s = srv.connect();
    let mut body = Vec::new();
    body.extend_from_slice(&b64(b"key"));
    body.push(b'\t');
    body.extend_from_slice(&b64(b"h"));
    body.extend_from_slice(b"\n");
    body.extend_from_slice(&b64(b"value"));
    body.push(b'\t');
    body.extend_from_slice(&b64(&value));
    body.push(b'\n');
    write!(
        s,
        "POST /rpc/set HTTP/1.1\r\nHost: x\r\nContent-Type: text/tab-separated-values; colenc=B\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(&body).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    let mut len = 0;
    loop {
        let mut h = String::new();
        r.read_line(&mut h).unwrap();
        if h.trim().is_empty() {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
    }
    let mut rest = vec![0; len];
    r.read_exact(&mut rest).unwrap();
    // REST GET of the same record: the bytes as they are.
    s.write_all(b"GET /h HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    line.clear();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    loop {
        let mut h = String::new();
        r.read_line(&mut h).unwrap();
        if h.trim().is_empty() {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
    }
    assert_eq!(len, BIG);
    let mut got = vec![0; len];
    r.read_exact(&mut got).unwrap();
    assert!(got == value, "the HTTP value came back changed");

    // Kyoto Tycoon's binary protocol: set_bulk, then get_bulk.
    let mut k = srv.connect();
    let mut req = vec![0xB8];
    req.extend_from_slice(&0u32.to_be_bytes());
    req.extend_from_slice(&1u32.to_be_bytes());
    req.extend_from_slice(&0u16.to_be_bytes());
    req.extend_from_slice(&1u32.to_be_bytes());
    req.extend_from_slice(&(BIG as u32).to_be_bytes());
    req.extend_from_slice(&i64::MAX.to_be_bytes());
    req.push(b'b');
    req.extend_from_slice(&value);
    k.write_all(&req).unwrap();
    let mut rep = [0u8; 5];
    k.read_exact(&mut rep).unwrap();
    assert_eq!(rep, [0xB8, 0, 0, 0, 1], "set_bulk stored it");
    let mut req = vec![0xBA];
    req.extend_from_slice(&0u32.to_be_bytes());
    req.extend_from_slice(&1u32.to_be_bytes());
    req.extend_from_slice(&0u16.to_be_bytes());
    req.extend_from_slice(&1u32.to_be_bytes());
    req.push(b'b');
    k.write_all(&req).unwrap();
    let mut head = [0u8; 5 + 2 + 4 + 4 + 8 + 1];
    k.read_exact(&mut head).unwrap();
    assert_eq!(&head[..5], [0xBA, 0, 0, 0, 1]);
    assert_eq!(
        u32::from_be_bytes(head[11..15].try_into().unwrap()) as usize,
        BIG
    );
    let mut got = vec![0; BIG];
    k.read_exact(&mut got).unwrap();
    assert!(got == value, "the binary value came back changed");

    // Tokyo Tyrant: put, then get.
    let mut t = srv.connect();
    let mut req = vec![0xC8, 0x10];
    req.extend_from_slice(&1u32.to_be_bytes());
    req.extend_from_slice(&(BIG as u32).to_be_bytes());
    req.push(b't');
    req.extend_from_slice(&value);
    t.write_all(&req).unwrap();
    let mut code = [0u8; 1];
    t.read_exact(&mut code).unwrap();
    assert_eq!(code, [0], "Tyrant put");
    t.write_all(&[0xC8, 0x30, 0, 0, 0, 1, b't']).unwrap();
    let mut head = [0u8; 5];
    t.read_exact(&mut head).unwrap();
    assert_eq!(head[0], 0);
    assert_eq!(
        u32::from_be_bytes(head[1..5].try_into().unwrap()) as usize,
        BIG
    );
    let mut got = vec![0; BIG];
    t.read_exact(&mut got).unwrap();
    assert!(got == value, "the Tyrant value came back changed");

    // memcached keeps its item limit.
    let mut m = srv.connect();
    let item = vec![b'x'; (1 << 20) + 1];
    write!(m, "set m 0 0 {}\r\n", item.len()).unwrap();
    m.write_all(&item).unwrap();
    m.write_all(b"\r\n").unwrap();
    let mut r = BufReader::new(m);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "SERVER_ERROR object too large for cache\r\n");
}

/// 80 connections each start a 1 MiB memcached set; the budget holds about 60 such requests,
/// so some connections are not read until others finish. Every set completes.
#[test]
fn more_large_requests_than_the_budget_holds_all_complete() {
    let dir = tempfile::tempdir().unwrap();
    // The largest request is a 64 MiB Tyrant or Kyoto Tycoon frame: the least budget there is.
    let srv = Server::start_with(
        dir.path(),
        "*",
        &["--max-value-size", "8m", "--max-inflight", "66m"],
    );
    let n = 80;
    let item = vec![b'v'; 1_000_000];
    let mut conns: Vec<_> = (0..n).map(|_| srv.connect()).collect();
    // The first half of every request, then the rest.
    for (i, c) in conns.iter_mut().enumerate() {
        write!(c, "set k{i} 0 0 {}\r\n", item.len()).unwrap();
        c.write_all(&item[..item.len() / 2]).unwrap();
    }
    let writers: Vec<_> = conns
        .into_iter()
        .map(|mut c| {
            let rest = item[item.len() / 2..].to_vec();
            std::thread::spawn(move || {
                c.write_all(&rest).unwrap();
                c.write_all(b"\r\n").unwrap();
                let mut r = BufReader::new(c);
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                (line, r)
            })
        })
        .collect();
    // Every connection stays open until all are answered: a grant comes back only when its
    // request is done, not when its connection closes.
    let mut open = Vec::new();
    for w in writers {
        let (line, r) = w.join().unwrap();
        assert_eq!(line, "STORED\r\n");
        open.push(r);
    }
    let mut c = srv.connect();
    c.write_all(b"stats\r\n").unwrap();
    let mut r = BufReader::new(c);
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if let Some(v) = line.strip_prefix("STAT curr_items ") {
            assert_eq!(v.trim(), n.to_string());
        }
        if line == "END\r\n" {
            break;
        }
    }
}

/// A budget smaller than the largest request would make that request wait forever: refused.
#[test]
fn a_budget_below_the_largest_request_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["serve", "*", "--port", "0", "--max-inflight", "1m"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--max-inflight"), "{err}");
}
