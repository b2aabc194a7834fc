use super::*;
use kura_engine::store::now_secs;
use mio::net::TcpStream;
use std::io::{Read, Write};

#[test]
fn a_burst_of_connections_is_spread_over_the_workers() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let clients: Vec<_> = (0..9)
        .map(|_| std::net::TcpStream::connect(addr).unwrap())
        .collect();
    let spread = Spread::new(3);
    // Worker 0 accepts all nine, as the first worker to wake would.
    for _ in 0..9 {
        let (sock, _) = listener.accept().unwrap();
        let to = spread.pick(0);
        if to != 0 {
            spread.hand_over(to, TcpStream::from_std(sock), false, Link::Plain);
        }
    }
    let counts: Vec<usize> = spread
        .conns
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .collect();
    assert_eq!(counts, [3, 3, 3]);
    for w in 1..3 {
        assert!(spread.mail[w].load(Ordering::Relaxed));
        assert_eq!(spread.inbox[w].lock().unwrap().len(), 3);
    }
    assert!(!spread.mail[0].load(Ordering::Relaxed));
    // A tie stays with the worker that accepted; a closed connection makes room.
    spread.conns[2].fetch_sub(1, Ordering::Relaxed);
    assert_eq!(spread.pick(1), 2);
    assert_eq!(spread.pick(1), 1);
    drop(clients);
}

#[test]
fn sniffing() {
    assert_eq!(sniff(0x80, false), Protocol::MemcachedBinary);
    assert_eq!(sniff(0xC8, false), Protocol::TokyoTyrant);
    for b in [0xB1, 0xB4, 0xB8, 0xB9, 0xBA] {
        assert_eq!(sniff(b, false), Protocol::KyotoBinary);
    }
    assert_eq!(sniff(b'G', false), Protocol::Http);
    assert_eq!(sniff(b'P', false), Protocol::Http);
    assert_eq!(sniff(b'g', false), Protocol::MemcachedText);
    assert_eq!(sniff(b's', false), Protocol::MemcachedText);
    assert_eq!(sniff(b'*', false), Protocol::Redis);
    // An upper-case first line: HTTP's request line, else a Redis inline command.
    assert_eq!(sniff_line(b"GET / HTTP/1.1\r\n"), Protocol::Http);
    assert_eq!(sniff_line(b"PUT /k HTTP/1.0\n"), Protocol::Http);
    assert_eq!(sniff_line(b"GET /"), Protocol::Http);
    assert_eq!(sniff_line(b"PING\r\n"), Protocol::Redis);
    assert_eq!(sniff_line(b"SET k v\r\n"), Protocol::Redis);
    assert_eq!(sniff_line(b"GET k\r\n"), Protocol::Redis);
    // A memcached-only port: binary or text, nothing else.
    assert_eq!(sniff(0x80, true), Protocol::MemcachedBinary);
    for b in [0xC8, 0xB8, b'G', b'P', b'g', b'*'] {
        assert_eq!(sniff(b, true), Protocol::MemcachedText);
    }
}

fn start(
    threads: usize,
) -> (
    std::net::SocketAddr,
    Arc<AtomicBool>,
    std::thread::JoinHandle<io::Result<()>>,
) {
    start_limited(threads, DEFAULT_MAX_VALUE)
}

fn start_limited(
    threads: usize,
    max_value_size: usize,
) -> (
    std::net::SocketAddr,
    Arc<AtomicBool>,
    std::thread::JoinHandle<io::Result<()>>,
) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let store = kura_engine::open("*").unwrap();
    let mut shared = Shared::new(now_secs(), 1 << 20);
    shared.max_value_size = max_value_size as u64;
    let shared = Arc::new(shared);
    let stop = Arc::new(AtomicBool::new(false));
    let cfg = Config {
        threads,
        max_connections: 100,
        max_item_size: 1 << 20,
        max_value_size,
        max_inflight: DEFAULT_MAX_INFLIGHT,
        idle_timeout: None,
        memcached_only: Vec::new(),
        tls_listeners: Vec::new(),
        tls: None,
    };
    let s = stop.clone();
    let h = std::thread::spawn(move || serve(vec![l], store, shared, cfg, s));
    (addr, stop, h)
}

fn roundtrip(s: &mut std::net::TcpStream, send: &[u8], expect: &[u8]) {
    s.write_all(send).unwrap();
    let mut got = vec![0u8; expect.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(expect)
    );
}

/// A Tyrant list refused at an element over the value limit is answered with the
/// failure form and the rest of it discarded as it arrives, sizes split across reads
/// included: the next request is answered.
#[test]
fn a_refused_tyrant_list_is_skipped_to_its_end() {
    let (addr, stop, h) = start_limited(1, 8);
    let mut t = std::net::TcpStream::connect(addr).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut req = Vec::new();
    tt_bin::encode_request(
        &tt_bin::Request::Misc {
            name: b"putlist",
            opts: 0,
            args: vec![b"k", b"123456789", b"k2", b"v2", b"k3", b"0123456789abcdef"],
        },
        &mut req,
    );
    // A get of k2 follows: it must find nothing (no record of the list was stored).
    req.extend_from_slice(&[0xC8, 0x30, 0, 0, 0, 2, b'k', b'2']);
    for piece in req.chunks(3) {
        t.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    roundtrip(&mut t, b"", &[1, 0, 0, 0, 0, 1]);
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap().unwrap();
}

#[test]
fn serves_every_protocol_on_one_port() {
    let (addr, stop, h) = start(2);
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    roundtrip(
        &mut s,
        b"set a 0 0 3\r\nabc\r\nget a\r\nbogus\r\n",
        b"STORED\r\nVALUE a 0 3\r\nabc\r\nEND\r\nERROR\r\n",
    );
    // A request split across writes.
    s.write_all(b"set b 0 0 5\r\nhel").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    roundtrip(
        &mut s,
        b"lo\r\nget b\r\n",
        b"STORED\r\nVALUE b 0 5\r\nhello\r\nEND\r\n",
    );
    // A too-large block is refused and skipped; the connection stays in sync.
    let mut big = b"set c 0 0 2000000\r\n".to_vec();
    big.extend(std::iter::repeat_n(b'x', 2_000_000));
    big.extend_from_slice(b"\r\nget a\r\n");
    roundtrip(
        &mut s,
        &big,
        b"SERVER_ERROR object too large for cache\r\nVALUE a 0 3\r\nabc\r\nEND\r\n",
    );
    let mut b = std::net::TcpStream::connect(addr).unwrap();
    b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // A binary noop is answered with a binary response.
    let mut noop = vec![0x80, 0x0a];
    noop.extend_from_slice(&[0; 22]);
    b.write_all(&noop).unwrap();
    let mut resp = [0u8; 24];
    b.read_exact(&mut resp).unwrap();
    assert_eq!((resp[0], resp[1], resp[7]), (0x81, 0x0a, 0));
    // Tyrant's magic byte: a Tyrant get of the record stored over memcached text.
    let mut t = std::net::TcpStream::connect(addr).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    roundtrip(
        &mut t,
        &[0xC8, 0x30, 0, 0, 0, 1, b'a'],
        &[0, 0, 0, 0, 3, b'a', b'b', b'c'],
    );
    // An upper-case first byte: HTTP, the same record over Tyrant's REST interface.
    let mut w = std::net::TcpStream::connect(addr).unwrap();
    w.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    w.write_all(b"GET /a HTTP/1.0\r\n\r\n").unwrap();
    let mut out = Vec::new();
    w.read_to_end(&mut out).unwrap();
    assert!(out.starts_with(b"HTTP/1.0 200") || out.starts_with(b"HTTP/1.1 200"));
    assert!(
        out.ends_with(b"\r\n\r\nabc"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    roundtrip(&mut s, b"quit\r\n", b"");
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap().unwrap();
}

/// The same refused list cut at every byte into two reads: a cut inside the size of an
/// element owed to the discard leaves the rest of that size for the next read, never decoded
/// as a request of its own (which closed the connection).
#[test]
fn a_refused_tyrant_list_cut_at_every_byte_is_skipped_to_its_end() {
    let (addr, stop, h) = start_limited(1, 8);
    let mut req = Vec::new();
    tt_bin::encode_request(
        &tt_bin::Request::Misc {
            name: b"putlist",
            opts: 0,
            args: vec![b"k", b"123456789", b"k2", b"v2", b"k3", b"0123456789abcdef"],
        },
        &mut req,
    );
    req.extend_from_slice(&[0xC8, 0x30, 0, 0, 0, 2, b'k', b'2']);
    for cut in 1..req.len() {
        let mut t = std::net::TcpStream::connect(addr).unwrap();
        t.set_nodelay(true).unwrap();
        t.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        t.write_all(&req[..cut]).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        t.write_all(&req[cut..])
            .unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        while got.len() < 6 {
            match t.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => panic!("cut at {cut}: {e}"),
            }
        }
        assert_eq!(got, [1, 0, 0, 0, 0, 1], "cut at {cut}");
    }
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap().unwrap();
}
