//! The same operation through different protocols: the same stored result and the same
//! counters. Bulk forms apply their records in order (a key given twice keeps its last value),
//! and a bulk read or removal counts a hit or a miss per key, as the single forms do.

mod common;

use common::{mc, Server, Tt};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;

/// Keys and values, as a bulk read answers them.
type Records = Vec<(Vec<u8>, Vec<u8>)>;

/// Kyoto Tycoon binary: `magic`, flags 0, the count, then each item; the reply's magic and
/// count (and, for get_bulk, the records' keys and values).
fn kt_bin(srv: &Server, magic: u8, items: &[(&[u8], Option<&[u8]>)]) -> (u8, Records, u32) {
    let mut s = srv.connect();
    let mut m = vec![magic];
    m.extend_from_slice(&0u32.to_be_bytes());
    m.extend_from_slice(&(items.len() as u32).to_be_bytes());
    for (k, v) in items {
        m.extend_from_slice(&0u16.to_be_bytes());
        m.extend_from_slice(&(k.len() as u32).to_be_bytes());
        if let Some(v) = v {
            m.extend_from_slice(&(v.len() as u32).to_be_bytes());
            m.extend_from_slice(&i64::MAX.to_be_bytes());
        }
        m.extend_from_slice(k);
        if let Some(v) = v {
            m.extend_from_slice(v);
        }
    }
    s.write_all(&m).unwrap();
    let mut head = [0u8; 5];
    s.read_exact(&mut head).unwrap();
    let n = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
    let mut recs = Vec::new();
    if magic == 0xBA {
        for _ in 0..n {
            let mut h = [0u8; 18];
            s.read_exact(&mut h).unwrap();
            let ksiz = u32::from_be_bytes([h[2], h[3], h[4], h[5]]) as usize;
            let vsiz = u32::from_be_bytes([h[6], h[7], h[8], h[9]]) as usize;
            let mut k = vec![0; ksiz];
            let mut v = vec![0; vsiz];
            s.read_exact(&mut k).unwrap();
            s.read_exact(&mut v).unwrap();
            recs.push((k, v));
        }
    }
    (head[0], recs, n)
}

/// Kyoto Tycoon RPC with a plain TSV body: the status and the reply's columns.
fn rpc(srv: &Server, proc: &str, body: &str) -> (u16, BTreeMap<String, String>) {
    let mut s = srv.connect();
    let req = format!(
        "POST /rpc/{proc} HTTP/1.1\r\nHost: x\r\nContent-Type: text/tab-separated-values\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp[9..12].parse().unwrap();
    let body = resp.split("\r\n\r\n").nth(1).unwrap_or("");
    let cols = body
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    (status, cols)
}

/// memcached text: send a request, read reply lines up to `END`.
fn mc_until_end(s: &mut TcpStream, req: &str) -> String {
    s.write_all(req.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !(got.ends_with(b"END\r\n") && (got.len() == 5 || got.ends_with(b"\r\nEND\r\n"))) {
        s.read_exact(&mut b).unwrap();
        got.push(b[0]);
    }
    String::from_utf8(got).unwrap()
}

/// The memcached `stats` counters every protocol shares.
fn counters(srv: &Server) -> Vec<(String, String)> {
    let mut s = srv.connect();
    let r = mc_until_end(&mut s, "stats\r\n");
    let names = [
        "cmd_get",
        "get_hits",
        "get_misses",
        "cmd_set",
        "delete_hits",
        "delete_misses",
    ];
    names
        .iter()
        .map(|n| {
            let v = r
                .lines()
                .find_map(|l| l.strip_prefix(&format!("STAT {n} ")))
                .unwrap_or_else(|| panic!("no {n} in {r}"));
            (n.to_string(), v.to_string())
        })
        .collect()
}

/// Tyrant misc: the reply code.
fn tt_misc(t: &mut Tt, name: &[u8], args: &[&[u8]]) -> u8 {
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
    for _ in 0..t.u32() {
        let l = t.u32() as usize;
        t.bytes(l);
    }
    code
}

/// A key given twice in one bulk write keeps its last value, as Tokyo Tyrant's putlist and
/// Kyoto Tycoon's set_bulk (records set one by one) leave it, and as a batch applies its
/// operations in order; the binary bulk's count includes the repeated record.
#[test]
fn a_key_given_twice_in_a_bulk_write_keeps_its_last_value() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["t.kh", "t.kb", "*"] {
        let srv = Server::start(dir.path(), name);
        let mut t = Tt::new(&srv.addr);
        assert_eq!(
            tt_misc(&mut t, b"putlist", &[b"p", b"1", b"q", b"x", b"p", b"2"]),
            0
        );
        if name != "t.kb" {
            // On the B+ tree putlist adds duplicates (tested in serve_tt).
            assert_eq!(t.get(b"p").as_deref(), Some(&b"2"[..]), "{name} putlist");
        }

        let one: &[u8] = b"1";
        let two: &[u8] = b"2";
        let (magic, _, n) = kt_bin(&srv, 0xB8, &[(b"k", Some(one)), (b"k", Some(two))]);
        assert_eq!((magic, n), (0xB8, 2), "{name} set_bulk");
        let (_, recs, _) = kt_bin(&srv, 0xBA, &[(b"k", None)]);
        assert_eq!(
            recs,
            vec![(b"k".to_vec(), b"2".to_vec())],
            "{name} set_bulk"
        );

        let (status, cols) = rpc(&srv, "set_bulk", "_r\t1\n_r\t2\n");
        assert_eq!(status, 200, "{name}");
        // The RPC's input is a map (Kyoto Tycoon's too): a name given twice is one record.
        assert_eq!(cols.get("num").map(String::as_str), Some("1"), "{name}");
        let (_, cols) = rpc(&srv, "get", "key\tr\n");
        assert_eq!(
            cols.get("value").map(String::as_str),
            Some("2"),
            "{name} rpc"
        );
        std::fs::remove_file(dir.path().join(name)).ok();
    }
}

/// Kyoto Tycoon's RPC `get_bulk` counted no hits or misses and `remove_bulk` counted nothing,
/// where the binary forms (and memcached's get and delete) count a hit or a miss per key. The
/// same writes, reads and removals through each protocol leave the same counters.
#[test]
fn the_same_operations_count_the_same_on_every_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let want: Vec<(String, String)> = [
        ("cmd_get", "3"),
        ("get_hits", "2"),
        ("get_misses", "1"),
        ("cmd_set", "2"),
        ("delete_hits", "1"),
        ("delete_misses", "1"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();

    // Kyoto Tycoon binary.
    let srv = Server::start(dir.path(), "*");
    let (a, b): (&[u8], &[u8]) = (b"1", b"2");
    kt_bin(&srv, 0xB8, &[(b"a", Some(a)), (b"b", Some(b))]);
    let (_, recs, n) = kt_bin(&srv, 0xBA, &[(b"a", None), (b"b", None), (b"zz", None)]);
    assert_eq!((recs.len(), n), (2, 2));
    assert_eq!(kt_bin(&srv, 0xB9, &[(b"a", None), (b"zz", None)]).2, 1);
    assert_eq!(counters(&srv), want, "Kyoto Tycoon binary");
    drop(srv);

    // Kyoto Tycoon RPC.
    let srv = Server::start(dir.path(), "*");
    assert_eq!(rpc(&srv, "set_bulk", "_a\t1\n_b\t2\n").0, 200);
    let (_, cols) = rpc(&srv, "get_bulk", "_a\t\n_b\t\n_zz\t\n");
    assert_eq!(cols.get("num").map(String::as_str), Some("2"));
    let (_, cols) = rpc(&srv, "remove_bulk", "_a\t\n_zz\t\n");
    assert_eq!(cols.get("num").map(String::as_str), Some("1"));
    assert_eq!(counters(&srv), want, "Kyoto Tycoon RPC");
    drop(srv);

    // memcached text.
    let srv = Server::start(dir.path(), "*");
    let mut s = srv.connect();
    assert_eq!(mc(&mut s, "set a 0 0 1\r\n1\r\n"), "STORED\r\n");
    assert_eq!(mc(&mut s, "set b 0 0 1\r\n2\r\n"), "STORED\r\n");
    let r = mc_until_end(&mut s, "get a b zz\r\n");
    assert!(r.contains("VALUE a") && r.contains("VALUE b"), "{r}");
    assert_eq!(mc(&mut s, "delete a\r\n"), "DELETED\r\n");
    assert_eq!(mc(&mut s, "delete zz\r\n"), "NOT_FOUND\r\n");
    assert_eq!(counters(&srv), want, "memcached text");
}

/// Whether a protocol still finds the key `k`.
type Probe = fn(&Server) -> bool;

/// A delayed `flush_all` is carried out by the first request of any protocol once its time
/// has come (one step every request takes, whatever its protocol): a key stored before it is
/// gone for a Tyrant get, a Kyoto Tycoon binary get_bulk, an HTTP GET and a memcached get.
#[test]
fn a_delayed_flush_all_is_carried_out_by_a_request_of_any_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let present: [(&str, Probe); 4] = [
        ("Tyrant", |srv| Tt::new(&srv.addr).get(b"k").is_some()),
        ("Kyoto Tycoon binary", |srv| {
            !kt_bin(srv, 0xBA, &[(b"k", None)]).1.is_empty()
        }),
        ("HTTP", |srv| {
            let mut s = srv.connect();
            s.write_all(b"GET /k HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut resp = String::new();
            s.read_to_string(&mut resp).unwrap();
            resp.starts_with("HTTP/1.1 200")
        }),
        ("memcached", |srv| {
            let mut s = srv.connect();
            mc_until_end(&mut s, "get k\r\n").contains("VALUE k")
        }),
    ];
    for (proto, present) in present {
        let srv = Server::start(dir.path(), "*");
        let mut s = srv.connect();
        assert_eq!(mc(&mut s, "set k 0 0 1\r\nv\r\n"), "STORED\r\n");
        assert!(present(&srv), "{proto}: stored");
        assert_eq!(mc(&mut s, "flush_all 1\r\n"), "OK\r\n");
        assert!(
            common::eventually(10, || !present(&srv)),
            "{proto}: the delayed flush_all was not carried out"
        );
    }
}
