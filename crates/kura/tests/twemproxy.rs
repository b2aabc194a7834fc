//! Three `kura serve` shards behind twemproxy (Debian's `nutcracker`), started here from
//! deploy/nutcracker.yml with its addresses rewritten to free loopback ports: every key lands on
//! the shard ketama names (the ring computed here from twemproxy's algorithm, which libmemcached
//! shares); a shard killed with SIGKILL is ejected while the others keep answering; restarted on
//! its port and database, it is taken back after `server_retry_timeout` with all its keys.
//! memccapable's text checks that twemproxy forwards pass through it (docs/SCALING.md lists what
//! it does not forward).
//!
//! Its redis mode (deploy/nutcracker-redis.yml) in front of three `kura serve '*'`, and the same
//! test in front of three Debian redis-server (the reference, so the test itself is proven):
//! ketama placement, commands through the proxy, a killed shard ejected.
//!
//! nutcracker missing: with `CI=true` the test fails (scripts/test.sh installs it) unless
//! `KURA_NO_NUTCRACKER` says its package cannot be installed here; otherwise it prints a notice
//! and passes.

mod common;
#[path = "common/proxy.rs"]
mod proxy;

use common::{eventually, free_port, Server};
use proxy::{get, nutcracker_bin, rewrite_config, Ring};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Proxy {
    child: Child,
    addr: String,
    stats: String,
}

impl Proxy {
    /// A shard's `server_ejected_at` in the proxy's statistics (JSON, refreshed every 500 ms):
    /// the time of its last ejection in microseconds, 0 for never.
    fn ejected_at(&self, shard: &str) -> u64 {
        let mut json = String::new();
        if let Ok(mut s) = TcpStream::connect(&self.stats) {
            let _ = s.read_to_string(&mut json);
        }
        let Some(at) = json.find(&format!("\"{shard}\": {{")) else {
            return 0;
        };
        let field = "\"server_ejected_at\":";
        let rest = &json[at..];
        let v = &rest[rest.find(field).expect("server_ejected_at") + field.len()..];
        let digits: String = v
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().unwrap_or(0)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start nutcracker on deploy/`file` rewritten for `shards` (written to `dir`) and wait until it
/// accepts connections.
fn start_proxy(bin: &Path, dir: &Path, file: &str, shards: &[String]) -> Proxy {
    for _ in 0..20 {
        let addr = format!("127.0.0.1:{}", free_port());
        let stats = free_port().to_string();
        let conf = dir.join("nutcracker.yml");
        std::fs::write(&conf, rewrite_config(file, &addr, shards)).unwrap();
        let check = Command::new(bin)
            .arg("-t")
            .arg("-c")
            .arg(&conf)
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "nutcracker -t rejects the configuration: {}",
            String::from_utf8_lossy(&check.stderr)
        );
        let mut child = Command::new(bin)
            .arg("-c")
            .arg(&conf)
            .args(["-s", &stats, "-a", "127.0.0.1", "-i", "500", "-o"])
            .arg(dir.join("nutcracker.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nutcracker");
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break; // a port was taken meanwhile: try others
            }
            if TcpStream::connect(&addr).is_ok() {
                let stats = format!("127.0.0.1:{stats}");
                return Proxy { child, addr, stats };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("nutcracker did not start");
}

fn hit(key: &str) -> String {
    let v = format!("v-{key}");
    format!("VALUE {key} 0 {}\r\n{v}\r\nEND\r\n", v.len())
}

fn start_shard(dir: &Path, name: &str, port: u16) -> Server {
    let port = port.to_string();
    let args = [
        name,
        "--host",
        "127.0.0.1",
        "--port",
        &port,
        "--threads",
        "2",
    ];
    Server::start_args(dir, &args, 1).0
}

#[test]
fn keys_land_where_ketama_says_and_an_ejected_shard_comes_back_with_its_keys() {
    let Some(bin) = nutcracker_bin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let names = ["s0.kh", "s1.kh", "s2.kh"];
    let mut shards: Vec<Server> = (0..3)
        .map(|i| start_shard(dir.path(), names[i], ports[i]))
        .collect();
    let addrs: Vec<String> = shards.iter().map(|s| s.addr.clone()).collect();
    let proxy = start_proxy(&bin, dir.path(), "nutcracker.yml", &addrs);
    let ring = Ring::new(&addrs);

    // Writes through the proxy; each key is on its ketama shard and on no other.
    let keys: Vec<String> = (0..300).map(|i| format!("key:{i}")).collect();
    let mut c = TcpStream::connect(&proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for k in &keys {
        let v = format!("v-{k}");
        let r = common::mc(&mut c, &format!("set {k} 0 0 {}\r\n{v}\r\n", v.len()));
        assert_eq!(r, "STORED\r\n", "{k}");
    }
    let mut per_shard = [0usize; 3];
    for k in &keys {
        let want = ring.shard(k);
        per_shard[want] += 1;
        for (i, a) in addrs.iter().enumerate() {
            let got = get(a, k);
            if i == want {
                assert_eq!(got, hit(k), "{k} is not on shard {i}, where ketama puts it");
            } else {
                assert_eq!(
                    got, "END\r\n",
                    "{k} is on shard {i}, ketama puts it on {want}"
                );
            }
        }
        assert_eq!(get(&proxy.addr, k), hit(k), "{k} through the proxy");
    }
    assert!(
        per_shard.iter().all(|&n| n > 50),
        "uneven ring: {per_shard:?}"
    );

    // SIGKILL shard 0: the other shards' keys answer throughout; shard 0's keys first fail,
    // then, once the proxy has ejected it, are misses on the ring of the two others.
    shards[0].signal(libc::SIGKILL);
    let (lost, kept): (Vec<&String>, Vec<&String>) = keys.iter().partition(|k| ring.shard(k) == 0);
    let ejected = eventually(20, || {
        for k in &kept {
            assert_eq!(
                get(&proxy.addr, k),
                hit(k),
                "{k}, on a live shard, while shard 0 is down"
            );
        }
        lost.iter().all(|k| get(&proxy.addr, k) == "END\r\n")
    });
    assert!(ejected, "the proxy did not eject the killed shard");
    assert!(
        eventually(5, || proxy.ejected_at(&addrs[0]) > 0),
        "the proxy's statistics show no ejection of {}",
        addrs[0]
    );
    assert_eq!(proxy.ejected_at(&addrs[1]), 0);

    // Restart it on its port and database: the proxy takes it back after server_retry_timeout
    // and every key it held answers again through the proxy.
    shards[0] = start_shard(dir.path(), names[0], ports[0]);
    let back = eventually(20, || get(&proxy.addr, lost[0]) == hit(lost[0]));
    assert!(back, "the proxy did not take the restarted shard back");
    for k in &lost {
        assert_eq!(get(&proxy.addr, k), hit(k), "{k} after the shard's return");
    }
    for k in &kept {
        assert_eq!(get(&proxy.addr, k), hit(k), "{k} after the shard's return");
    }
}

/// memccapable's text checks that twemproxy forwards (the ones that pass through it in front of
/// memcached 1.6.18 too): the others send `flush_all`, `verbosity`, `stats` or a
/// malformed command, on which twemproxy closes the client's connection.
const MEMCCAPABLE_THROUGH_PROXY: [&str; 5] = [
    "ascii mget",
    "ascii incr",
    "ascii decr",
    "ascii append",
    "ascii prepend",
];

#[test]
fn memccapable_text_checks_pass_through_the_proxy() {
    let Some(bin) = nutcracker_bin() else { return };
    if Command::new("memccapable").arg("-h").output().is_err() {
        eprintln!(
            "NOTICE: memccapable (libmemcached-tools) is not installed; its checks through \
             twemproxy are skipped (scripts/client-tests.sh installs it)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let shards: Vec<Server> = (0..3)
        .map(|i| start_shard(dir.path(), &format!("m{i}.kh"), free_port()))
        .collect();
    let addrs: Vec<String> = shards.iter().map(|s| s.addr.clone()).collect();
    let proxy = start_proxy(&bin, dir.path(), "nutcracker.yml", &addrs);
    let port = common::port_of(&proxy.addr);
    for t in MEMCCAPABLE_THROUGH_PROXY {
        let out = Command::new("memccapable")
            .args(["-h", "127.0.0.1", "-p", port, "-t", "5", "-v", "-T", t])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            text.contains("[pass]") && !text.contains("[FAIL]"),
            "memccapable -T '{t}' through twemproxy:\n{text}"
        );
    }
}

// ---- twemproxy's redis mode (deploy/nutcracker-redis.yml) ----

/// A Redis reply, written compactly for assertions: `+OK`, `-ERR …`, `:5`, a bulk string as
/// its text, `(nil)`, `[a, b]`; `<closed>` when the connection closed or went quiet first.
fn read_resp(r: &mut impl std::io::BufRead) -> Option<String> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 || !line.ends_with("\r\n") {
        return None;
    }
    let line = line.trim_end_matches("\r\n");
    let (kind, rest) = line.split_at(1);
    Some(match kind {
        "+" | "-" | ":" => line.to_string(),
        "$" => match rest.parse::<i64>().ok()? {
            n if n < 0 => "(nil)".to_string(),
            n => {
                let mut b = vec![0u8; n as usize + 2];
                r.read_exact(&mut b).ok()?;
                String::from_utf8_lossy(&b[..n as usize]).into_owned()
            }
        },
        "*" => match rest.parse::<i64>().ok()? {
            n if n < 0 => "(nil)".to_string(),
            n => {
                let items: Option<Vec<String>> = (0..n).map(|_| read_resp(r)).collect();
                format!("[{}]", items?.join(", "))
            }
        },
        _ => return None,
    })
}

/// One Redis command (a RESP array of bulk strings) on a fresh connection (twemproxy closes a
/// client's connection on an error); its reply as `read_resp` writes it.
fn redis(addr: &str, args: &[&str]) -> String {
    let Ok(s) = TcpStream::connect(addr) else {
        return "<refused>".into();
    };
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    (&s).write_all(req.as_bytes()).unwrap();
    read_resp(&mut std::io::BufReader::new(s)).unwrap_or_else(|| "<closed>".into())
}

/// What a shard behind the proxy is: `kura serve` (in-memory `*`) or Debian's redis-server
/// (no persistence), the reference the same test runs against.
#[derive(Clone, Copy)]
enum Backend {
    Kura,
    RedisServer,
}

struct RedisShard {
    child: Child,
    addr: String,
}

impl Drop for RedisShard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Debian's redis-server, when installed; with `CI=true` its absence fails the test
/// (scripts/test.sh installs it).
fn redis_server_bin() -> Option<PathBuf> {
    let found = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
    if found.is_none() {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "redis-server is not installed: scripts/test.sh installs it (apt-get install redis-server)"
        );
        eprintln!(
            "NOTICE: redis-server is not installed; the twemproxy test against it is skipped"
        );
    }
    found
}

fn start_redis_shard(bin: &Path, dir: &Path) -> RedisShard {
    for _ in 0..20 {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let mut child = Command::new(bin)
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break; // the port was taken meanwhile: try another
            }
            if redis(&addr, &["PING"]) == "+PONG" {
                return RedisShard { child, addr };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("redis-server did not start");
}

/// Three shards of `backend` behind twemproxy's redis mode: every key SET through the proxy is
/// on the shard ketama names and on no other; GET, MGET across shards, INCR, EXPIRE / TTL,
/// DEL and PING answer through the proxy; a shard killed with SIGKILL is ejected while the
/// others' keys keep answering, its own keys then misses on the ring of the two others.
fn redis_mode(backend: Backend) {
    let Some(bin) = nutcracker_bin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut kura: Vec<Server> = Vec::new();
    let mut reds: Vec<RedisShard> = Vec::new();
    let addrs: Vec<String> = match backend {
        Backend::Kura => {
            kura = (0..3)
                .map(|_| start_shard(dir.path(), "*", free_port()))
                .collect();
            kura.iter().map(|s| s.addr.clone()).collect()
        }
        Backend::RedisServer => {
            let Some(rbin) = redis_server_bin() else {
                return;
            };
            reds = (0..3)
                .map(|i| {
                    let d = dir.path().join(format!("r{i}"));
                    std::fs::create_dir_all(&d).unwrap();
                    start_redis_shard(&rbin, &d)
                })
                .collect();
            reds.iter().map(|s| s.addr.clone()).collect()
        }
    };
    let proxy = start_proxy(&bin, dir.path(), "nutcracker-redis.yml", &addrs);
    let ring = Ring::new(&addrs);
    let p = proxy.addr.as_str();

    assert_eq!(redis(p, &["PING"]), "+PONG");
    let keys: Vec<String> = (0..300).map(|i| format!("key:{i}")).collect();
    for k in &keys {
        assert_eq!(redis(p, &["SET", k, &format!("v-{k}")]), "+OK", "SET {k}");
    }
    let mut per_shard = [0usize; 3];
    for k in &keys {
        let want = ring.shard(k);
        per_shard[want] += 1;
        for (i, a) in addrs.iter().enumerate() {
            let got = redis(a, &["GET", k]);
            if i == want {
                assert_eq!(
                    got,
                    format!("v-{k}"),
                    "{k} is not on shard {i}, where ketama puts it"
                );
            } else {
                assert_eq!(
                    got, "(nil)",
                    "{k} is on shard {i}, ketama puts it on {want}"
                );
            }
        }
        assert_eq!(
            redis(p, &["GET", k]),
            format!("v-{k}"),
            "{k} through the proxy"
        );
    }
    assert!(
        per_shard.iter().all(|&n| n > 50),
        "uneven ring: {per_shard:?}"
    );

    // Commands the proxy splits over the shards or forwards to the key's shard.
    let some: Vec<&str> = keys[..8].iter().map(String::as_str).collect();
    let mut mget = vec!["MGET"];
    mget.extend(&some);
    mget.push("missing");
    let want: Vec<String> = some.iter().map(|k| format!("v-{k}")).collect();
    assert_eq!(redis(p, &mget), format!("[{}, (nil)]", want.join(", ")));
    assert_eq!(redis(p, &["INCR", "counter"]), ":1");
    assert_eq!(redis(p, &["INCRBY", "counter", "41"]), ":42");
    assert_eq!(redis(p, &["GET", "counter"]), "42");
    assert_eq!(redis(p, &["EXPIRE", "counter", "100"]), ":1");
    let ttl = redis(p, &["TTL", "counter"]);
    assert!(
        ttl == ":100" || ttl == ":99",
        "TTL through the proxy: {ttl}"
    );
    assert_eq!(redis(p, &["DEL", "key:290", "key:291", "nope"]), ":2");
    assert_eq!(redis(p, &["EXISTS", "key:290"]), ":0");
    let keys = &keys[..290];

    // SIGKILL shard 0: the other shards' keys answer throughout; shard 0's keys first fail,
    // then, once the proxy has ejected it, are misses on the ring of the two others.
    match backend {
        Backend::Kura => {
            kura[0].signal(libc::SIGKILL);
        }
        Backend::RedisServer => {
            let _ = reds[0].child.kill();
            let _ = reds[0].child.wait();
        }
    }
    let (lost, kept): (Vec<&String>, Vec<&String>) = keys.iter().partition(|k| ring.shard(k) == 0);
    let ejected = eventually(20, || {
        for k in &kept {
            assert_eq!(
                redis(p, &["GET", k]),
                format!("v-{k}"),
                "{k}, on a live shard, while shard 0 is down"
            );
        }
        lost.iter().all(|k| redis(p, &["GET", k]) == "(nil)")
    });
    assert!(ejected, "the proxy did not eject the killed shard");
    assert!(
        eventually(5, || proxy.ejected_at(&addrs[0]) > 0),
        "the proxy's statistics show no ejection of {}",
        addrs[0]
    );
    assert_eq!(proxy.ejected_at(&addrs[1]), 0);
}

#[test]
fn redis_mode_in_front_of_redis_server() {
    redis_mode(Backend::RedisServer);
}

#[test]
fn redis_mode_in_front_of_kura() {
    redis_mode(Backend::Kura);
}
