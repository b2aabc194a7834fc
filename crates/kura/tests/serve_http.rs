//! `kura serve` over HTTP on its one port: Tyrant's REST interface, Kyoto Tycoon's RPC, and
//! bad HTTP input (each bad connection gets a 4xx and is closed; the others keep being served).

mod common;

use common::Server;
use std::io::{Read, Write};
use std::net::TcpStream;

/// Send raw bytes, read until the server closes (the requests end with `Connection: close`).
fn exchange(srv: &Server, raw: &[u8]) -> String {
    let mut s = srv.connect();
    s.write_all(raw).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn status(resp: &str) -> u16 {
    resp.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[test]
fn tyrant_rest_and_kyoto_rpc_share_the_store_with_memcached() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "h.kh");
    // Keep-alive: several requests on one connection, answered in order.
    let mut s = srv.connect();
    s.write_all(
        b"PUT /k%20ey HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\
          GET /k%20ey HTTP/1.1\r\nHost: x\r\n\r\n\
          PUT /k%20ey HTTP/1.1\r\nHost: x\r\nX-TT-PDMODE: 1\r\nContent-Length: 1\r\n\r\nx\
          PUT /k%20ey HTTP/1.1\r\nHost: x\r\nX-TT-PDMODE: 2\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n!!!\r\n0\r\n\r\n\
          GET /k%20ey HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out);
    let statuses: Vec<u16> = text
        .match_indices("HTTP/1.1 ")
        .map(|(i, _)| text[i + 9..i + 12].parse().unwrap())
        .collect();
    assert_eq!(statuses, [201, 200, 409, 201, 200], "{text}");
    assert!(text.ends_with("hello!!!"), "{text}");
    // The same record over memcached text.
    let mut m = srv.connect();
    m.write_all(b"get k\r\n").unwrap(); // a different key: not found
    let mut buf = [0u8; 5];
    m.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"END\r\n");
    // Kyoto Tycoon RPC with a TSV body (base64 columns) and a query string.
    // Every column is encoded, names too: key = "a", value = "123".
    let body = b"a2V5\tYQ==\ndmFsdWU=\tMTIz\n";
    let req = format!(
        "POST /rpc/set HTTP/1.1\r\nHost: x\r\nContent-Type: text/tab-separated-values; colenc=B\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let r = exchange(&srv, &[req.as_bytes(), body].concat());
    assert_eq!(status(&r), 200, "{r}");
    let r = exchange(
        &srv,
        b"GET /rpc/get?key=a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status(&r), 200, "{r}");
    assert!(r.contains("value\t123"), "{r}");
    let r = exchange(
        &srv,
        b"GET /rpc/get?key=nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status(&r), 450, "{r}");
    let r = exchange(
        &srv,
        b"GET /rpc/nosuch HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status(&r), 501, "{r}");
    let r = exchange(
        &srv,
        b"GET /rpc/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(r.contains("count\t2"), "{r}");
    // Kyoto Tycoon REST: PUT with X-Kt-Mode, GET, DELETE.
    let r = exchange(
        &srv,
        b"PUT /kt HTTP/1.1\r\nHost: x\r\nX-Kt-Mode: add\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
    );
    assert_eq!(status(&r), 201, "{r}");
    let r = exchange(
        &srv,
        b"DELETE /kt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status(&r), 200, "{r}");
    let r = exchange(
        &srv,
        b"GET /kt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status(&r), 404, "{r}");
}

#[test]
fn bad_http_input_gets_4xx_and_others_keep_being_served() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "*");
    let mut keep = srv.connect();
    keep.write_all(b"set k 0 0 1\r\nv\r\n").unwrap();
    let mut buf = [0u8; 8];
    keep.read_exact(&mut buf).unwrap();
    let flood: Vec<u8> = {
        let mut v = b"GET /k HTTP/1.1\r\n".to_vec();
        for i in 0..10_000 {
            v.extend_from_slice(format!("X-H{i}: y\r\n").as_bytes());
        }
        v.extend_from_slice(b"\r\n");
        v
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "2^31 content length",
            b"PUT /k HTTP/1.1\r\nContent-Length: 2147483648\r\n\r\n".to_vec(),
        ),
        ("header flood", flood),
        (
            "invalid UTF-8 in the URL",
            b"GET /\xff\xfe%zz HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        ),
        (
            "not HTTP at all",
            b"GARBAGE\x00\x01 / HTTP/1.1\r\n\r\n".to_vec(),
        ),
        ("unknown version", b"GET /k HTTP/9.9\r\n\r\n".to_vec()),
        (
            "a bad chunk size",
            b"PUT /k HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".to_vec(),
        ),
    ];
    for (what, raw) in cases {
        let r = exchange(&srv, &raw);
        let st = status(&r);
        assert!((400..500).contains(&st) || st == 505, "{what}: {r}");
    }
    // An upper-case line that is no HTTP request line is a Redis inline command
    // (docs/PROTOCOL-REDIS.md): an unknown one gets Redis's error.
    {
        let mut t = srv.connect();
        t.write_all(b"GARBAGE\x00\x01\x02\r\n").unwrap();
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while !line.ends_with(b"\n") {
            t.read_exact(&mut b).unwrap();
            line.push(b[0]);
        }
        let line = String::from_utf8_lossy(&line);
        assert!(line.starts_with("-ERR unknown command 'GARBAGE"), "{line}");
    }
    // Kyoto Tycoon's binary protocol: a set_bulk announcing 2^31 records is answered with the
    // error magic 0xBF and the connection is closed.
    let r = {
        let mut t = srv.connect();
        t.write_all(&[0xB8, 0, 0, 0, 0, 0x80, 0, 0, 0, 0, 0])
            .unwrap();
        let mut out = Vec::new();
        let _ = t.read_to_end(&mut out);
        out
    };
    assert_eq!(r, [0xBF]);
    // A truncated request, then the client goes away.
    {
        let mut t = TcpStream::connect(&srv.addr).unwrap();
        t.write_all(b"PUT /k HTTP/1.1\r\nContent-Length: 100\r\n\r\nabc")
            .unwrap();
    }
    keep.write_all(b"get k\r\n").unwrap();
    let mut got = [0u8; 20];
    keep.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"VALUE k 0 1\r\nv\r\nEND\r");
}
