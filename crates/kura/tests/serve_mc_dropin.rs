//! What real memcached clients tripped over (issue 22), one test per point, through the real
//! `kura serve` on a free loopback port. Each is also a case of the differential test
//! (`mc_differential.rs`), which compares the same transcripts with memcached itself.

mod common;

use common::Server;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn send(s: &mut TcpStream, req: &[u8], want: &str) {
    s.write_all(req).unwrap();
    let mut got = vec![0u8; want.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), want);
}

/// Every database kind the server is tested on.
fn servers(dir: &std::path::Path) -> Vec<Server> {
    vec![Server::start(dir, "*"), Server::start(dir, "d.kh")]
}

/// 1. A `get` of 18,000 keys (a 128 KiB line; pylibmc's get_multi sends such lines) is
///    answered key by key; it was refused as "line too long" and the connection closed.
#[test]
fn a_get_of_18000_keys_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    for srv in servers(dir.path()) {
        let mut c = srv.connect();
        send(&mut c, b"set k1 0 0 2\r\nv1\r\n", "STORED\r\n");
        let mut line = b"get".to_vec();
        let mut want = String::new();
        for i in 0..18_000 {
            let key = if i % 3 == 0 {
                "k1".to_string()
            } else {
                format!("missing-{i}")
            };
            line.extend_from_slice(format!(" {key}").as_bytes());
            if i % 3 == 0 {
                want.push_str("VALUE k1 0 2\r\nv1\r\n");
            }
        }
        line.extend_from_slice(b"\r\n");
        want.push_str("END\r\n");
        assert!(line.len() > 128 << 10, "{}", line.len());
        send(&mut c, &line, &want);
        send(&mut c, b"get k1\r\n", "VALUE k1 0 2\r\nv1\r\nEND\r\n");
    }
}

/// 2. `version` is a plain memcached version (Perl's version->parse died on
///    `1.6.21-kura-0.1.0`); Kura's own is the `kura_version` statistic.
#[test]
fn version_is_a_plain_number() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "*");
    let mut c = srv.connect();
    send(&mut c, b"version\r\n", "VERSION 1.6.21\r\n");
    c.write_all(b"stats\r\n").unwrap();
    let stats = read_stats(&mut c);
    assert_eq!(stats["version"], "1.6.21");
    assert_eq!(stats["kura_version"], env!("CARGO_PKG_VERSION"));
    // Binary VERSION too.
    let mut b = srv.connect();
    let mut p = vec![0x80, 0x0b];
    p.extend_from_slice(&[0; 22]);
    b.write_all(&p).unwrap();
    let mut h = [0u8; 24];
    b.read_exact(&mut h).unwrap();
    let mut body = vec![0u8; u32::from_be_bytes(h[8..12].try_into().unwrap()) as usize];
    b.read_exact(&mut body).unwrap();
    assert_eq!(body, b"1.6.21");
}

fn read_stats(c: &mut TcpStream) -> std::collections::HashMap<String, String> {
    let mut r = BufReader::new(c.try_clone().unwrap());
    let mut m = std::collections::HashMap::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if line == "END\r\n" {
            return m;
        }
        let mut f = line.trim_end().splitn(3, ' ').skip(1);
        let (k, v) = (f.next().unwrap(), f.next().unwrap_or(""));
        m.insert(k.to_string(), v.to_string());
    }
}

/// 3. The item size limit counts the item as memcached does (1,048,516 bytes of value fit a
///    1-byte key under the default 1 MiB, 1,048,517 do not), and a `set` refused as too large
///    removes the key's old value, so that no reader sees it.
#[test]
fn too_large_counts_the_item_and_a_refused_set_drops_the_old_value() {
    let dir = tempfile::tempdir().unwrap();
    for srv in servers(dir.path()) {
        let mut c = srv.connect();
        let set = |n: usize| {
            let mut v = format!("set k 0 0 {n}\r\n").into_bytes();
            v.extend(std::iter::repeat_n(b'v', n));
            v.extend_from_slice(b"\r\n");
            v
        };
        send(&mut c, &set(1_048_516), "STORED\r\n");
        send(
            &mut c,
            &set(1_048_517),
            "SERVER_ERROR object too large for cache\r\n",
        );
        send(&mut c, b"get k\r\n", "END\r\n");
        // An add refused as too large leaves the value alone, as memcached does.
        send(&mut c, b"set k 0 0 3\r\nold\r\n", "STORED\r\n");
        let mut add = b"add k 0 0 2000000\r\n".to_vec();
        add.extend(std::iter::repeat_n(b'z', 2_000_000));
        add.extend_from_slice(b"\r\nget k\r\n");
        send(
            &mut c,
            &add,
            "SERVER_ERROR object too large for cache\r\nVALUE k 0 3\r\nold\r\nEND\r\n",
        );
    }
}

/// 4. `delete <key> 0` is accepted, another time is refused with memcached's usage line, and
///    under `noreply` nothing is sent, so the replies stay in step with the requests.
#[test]
fn delete_with_a_time_and_errors_under_noreply() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "*");
    let mut c = srv.connect();
    send(
        &mut c,
        b"set k 0 0 1\r\nx\r\ndelete k 0\r\ndelete k 5\r\ndelete k 5 noreply\r\nincr k x noreply\r\nset k x 0 1 noreply\r\nmn\r\n",
        "STORED\r\nDELETED\r\nCLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\nMN\r\n",
    );
}

/// 5. `verbosity`, `stats settings` (every field memcached prints), `stats` with
///    `connection_structures`, `stats cachedump`, `stats detail` in text and binary.
#[test]
fn commands_and_stats_clients_call_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "*");
    let mut c = srv.connect();
    send(
        &mut c,
        b"verbosity 1\r\nverbosity x\r\nverbosity 1 noreply\r\nmn\r\n",
        "OK\r\nCLIENT_ERROR bad command line format\r\nMN\r\n",
    );
    c.write_all(b"stats settings\r\n").unwrap();
    let settings = read_stats(&mut c);
    assert_eq!(settings["verbosity"], "1");
    for f in [
        "maxbytes",
        "item_size_max",
        "detail_enabled",
        "lru_crawler",
        "slab_chunk_max",
    ] {
        assert!(settings.contains_key(f), "{f} missing");
    }
    c.write_all(b"stats\r\n").unwrap();
    let stats = read_stats(&mut c);
    assert_eq!(stats["connection_structures"], stats["curr_connections"]);
    send(
        &mut c,
        b"stats cachedump 1 0\r\nstats detail on\r\nget p:k\r\nstats detail dump\r\nstats detail off\r\n",
        "END\r\nOK\r\nEND\r\nPREFIX p get 1 hit 0 set 0 del 0\r\nEND\r\nOK\r\n",
    );
    // Binary STAT "detail on": an empty success, not "Not found".
    let mut b = srv.connect();
    let key = b"detail on";
    let mut p = vec![0x80, 0x10, 0, key.len() as u8, 0, 0, 0, 0];
    p.extend_from_slice(&(key.len() as u32).to_be_bytes());
    p.extend_from_slice(&[0; 12]);
    p.extend_from_slice(key);
    b.write_all(&p).unwrap();
    let mut h = [0u8; 24];
    b.read_exact(&mut h).unwrap();
    assert_eq!((h[1], h[6], h[7], &h[8..12]), (0x10, 0, 0, &[0u8; 4][..]));
}

/// 6. `ma … N<ttl>` gives the item it creates that TTL; `mg … h l` show whether the item was
///    fetched before and how long ago it was last used, on every kind.
#[test]
fn meta_arith_ttl_and_hit_and_last_access() {
    let dir = tempfile::tempdir().unwrap();
    for srv in servers(dir.path()) {
        let mut c = srv.connect();
        send(
            &mut c,
            b"ma n N100 J5 v t\r\nmg n t v\r\n",
            "VA 1 t100\r\n5\r\nVA 1 t100\r\n5\r\n",
        );
        send(
            &mut c,
            b"set k 0 0 1\r\na\r\nmg k h l v\r\nmg k h\r\nmg k h l u\r\n",
            "STORED\r\nVA 1 h0 l0\r\na\r\nHD h1\r\nHD h1 l0\r\n",
        );
        std::thread::sleep(Duration::from_millis(2100));
        c.write_all(b"mg k l\r\n").unwrap();
        let mut r = BufReader::new(c.try_clone().unwrap());
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let l: u64 = line.trim().strip_prefix("HD l").unwrap().parse().unwrap();
        assert!((2..=3).contains(&l), "{line}");
        // A write clears the fetched bit.
        send(
            &mut c,
            b"set k 0 0 1\r\nb\r\nmg k h\r\n",
            "STORED\r\nHD h0\r\n",
        );
    }
}

/// 7. `--memcached-port` serves memcached text and binary only, and hangs up without a reply
///    on a first line that looks like HTTP; the main port still serves HTTP.
#[test]
fn the_memcached_port_hangs_up_on_http() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "*",
        "--port",
        "0",
        "--memcached-port",
        "0",
        "--threads",
        "2",
    ];
    let (_srv, addrs) = Server::start_args(dir.path(), &args, 2);
    for first in [
        &b"GET / HTTP/1.0\r\n\r\n"[..],
        b"PUT /x HTTP/1.1\r\n\r\n",
        b"DELETE HTTP/1.1\r\n",
    ] {
        let mut s = TcpStream::connect(&addrs[1]).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(first).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
    }
    let mut m = TcpStream::connect(&addrs[1]).unwrap();
    send(&mut m, b"set a 0 0 1\r\nx\r\n", "STORED\r\n");
    let mut h = TcpStream::connect(&addrs[0]).unwrap();
    h.write_all(b"GET /a HTTP/1.0\r\n\r\n").unwrap();
    let mut got = Vec::new();
    h.read_to_end(&mut got).unwrap();
    assert!(got.starts_with(b"HTTP/1.") && got.ends_with(b"\r\n\r\nx"));
}

/// 8. Binary APPEND / PREPEND (and their quiet forms) honour the CAS field: a mismatch is
///    KEY_EXISTS and leaves the value alone; CAS 0 is unconditional.
#[test]
fn binary_append_honours_cas() {
    let dir = tempfile::tempdir().unwrap();
    for srv in servers(dir.path()) {
        let mut b = srv.connect();
        let packet = |op: u8, cas: u64, extras: &[u8], key: &[u8], value: &[u8]| {
            let mut p = vec![0x80, op];
            p.extend_from_slice(&(key.len() as u16).to_be_bytes());
            p.push(extras.len() as u8);
            p.extend_from_slice(&[0, 0, 0]);
            p.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
            p.extend_from_slice(&[0; 4]);
            p.extend_from_slice(&cas.to_be_bytes());
            p.extend_from_slice(extras);
            p.extend_from_slice(key);
            p.extend_from_slice(value);
            p
        };
        let read = |b: &mut TcpStream| {
            let mut h = [0u8; 24];
            b.read_exact(&mut h).unwrap();
            let mut body = vec![0u8; u32::from_be_bytes(h[8..12].try_into().unwrap()) as usize];
            b.read_exact(&mut body).unwrap();
            let status = u16::from_be_bytes([h[6], h[7]]);
            (
                status,
                u64::from_be_bytes(h[16..24].try_into().unwrap()),
                body,
            )
        };
        b.write_all(&packet(0x01, 0, &[0; 8], b"a", b"m")).unwrap();
        let (st, cas, _) = read(&mut b);
        assert_eq!(st, 0);
        for op in [0x0e, 0x0f, 0x19, 0x1a] {
            b.write_all(&packet(op, cas + 1, &[], b"a", b"x")).unwrap();
            assert_eq!(read(&mut b).0, 0x0002, "opcode {op:#x}: KEY_EXISTS");
        }
        b.write_all(&packet(0x0e, cas, &[], b"a", b"y")).unwrap();
        let (st, cas2, _) = read(&mut b);
        assert_eq!(st, 0);
        b.write_all(&packet(0x0f, 0, &[], b"a", b"z")).unwrap();
        assert_eq!(read(&mut b).0, 0);
        b.write_all(&packet(0x00, 0, &[], b"a", b"")).unwrap();
        let (st, _, body) = read(&mut b);
        assert_eq!((st, &body[4..]), (0, &b"zmy"[..]));
        assert_ne!(cas, cas2);
    }
}

/// 9. Key dumps: `lru_crawler metadump all` streams every key with its expiry and size, and
///    `stats cachedump` lists them (what libmemcached's memcdump reads).
#[test]
fn key_dumps() {
    let dir = tempfile::tempdir().unwrap();
    for srv in servers(dir.path()) {
        let mut c = srv.connect();
        let n = 20_000;
        let mut req = Vec::new();
        for i in 0..n {
            req.extend_from_slice(
                format!("set key:{i} 0 {} 1 noreply\r\nv\r\n", i % 2 * 1000).as_bytes(),
            );
        }
        req.extend_from_slice(b"mn\r\n");
        send(&mut c, &req, "MN\r\n");
        c.write_all(b"lru_crawler metadump all\r\nversion\r\n")
            .unwrap();
        let mut r = BufReader::new(c.try_clone().unwrap());
        let mut seen = std::collections::HashSet::new();
        loop {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            if line == "END\r\n" {
                break;
            }
            assert!(
                line.ends_with(" cls=1 size=63\n")
                    || line.ends_with(" cls=1 size=64\n")
                    || line.contains(" size="),
                "{line}"
            );
            let key = line
                .split(' ')
                .next()
                .unwrap()
                .strip_prefix("key=")
                .unwrap();
            let i: usize = key.strip_prefix("key%3A").unwrap().parse().unwrap();
            let exp = line.split(' ').nth(1).unwrap();
            assert_eq!(exp == "exp=-1", i.is_multiple_of(2), "{line}");
            assert!(seen.insert(i));
        }
        assert_eq!(seen.len(), n);
        let mut v = String::new();
        r.read_line(&mut v).unwrap();
        assert_eq!(
            v, "VERSION 1.6.21\r\n",
            "the request behind the dump is answered"
        );
        c.write_all(b"stats cachedump 1 3\r\n").unwrap();
        let mut items = 0;
        loop {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            if line == "END\r\n" {
                break;
            }
            assert!(
                line.starts_with("ITEM key:") && line.contains(" [1 b; "),
                "{line}"
            );
            items += 1;
        }
        assert_eq!(items, 3);
    }
}
