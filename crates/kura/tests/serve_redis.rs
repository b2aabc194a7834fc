//! The Redis protocol through the real binary: RESP2 and RESP3, pipelining, every command
//! served with its errors, expiry with time passing, SCAN in key order on a `.kb`,
//! MULTI/EXEC, AUTH against a users file, `--mask`, a malformed request, durability across
//! SIGKILL, and `redis-cli` (Debian's `redis-tools`) driving the server.

mod common;

use common::{bulk, kura_users, Resp, Server, RV};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn ok() -> RV {
    RV::Simple("OK".into())
}

fn err(s: &str) -> RV {
    RV::Err(s.into())
}

fn arr(v: &[&str]) -> RV {
    RV::Array(v.iter().map(|s| bulk(s)).collect())
}

#[test]
fn strings_counters_and_keys_in_resp2() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), "*");
    let mut c = Resp::new(&s.addr);
    assert_eq!(c.call(&["PING"]), RV::Simple("PONG".into()));
    assert_eq!(c.call(&["ping", "hi"]), bulk("hi"));
    assert_eq!(c.call(&["ECHO", "x y"]), bulk("x y"));
    assert_eq!(c.call(&["SELECT", "0"]), ok());
    assert_eq!(
        c.call(&["SELECT", "2"]),
        err("ERR DB index is out of range")
    );
    assert_eq!(c.call(&["SET", "k", "v"]), ok());
    assert_eq!(c.call(&["GET", "k"]), bulk("v"));
    assert_eq!(c.call(&["GET", "missing"]), RV::Nil);
    assert_eq!(c.call(&["SET", "k", "w", "NX"]), RV::Nil);
    assert_eq!(c.call(&["SET", "k", "w", "XX", "GET"]), bulk("v"));
    assert_eq!(c.call(&["SET", "new", "1", "XX"]), RV::Nil);
    assert_eq!(
        c.call(&["SET", "k", "w", "NX", "XX"]),
        err("ERR syntax error")
    );
    assert_eq!(c.call(&["SET", "k", "w", "EX"]), err("ERR syntax error"));
    assert_eq!(
        c.call(&["SET", "k", "w", "PX", "-5"]),
        err("ERR invalid expire time in 'set' command")
    );
    assert_eq!(c.call(&["SETNX", "k", "z"]), RV::Int(0));
    assert_eq!(c.call(&["SETNX", "k2", "z"]), RV::Int(1));
    assert_eq!(c.call(&["GETSET", "k2", "y"]), bulk("z"));
    assert_eq!(c.call(&["GETDEL", "k2"]), bulk("y"));
    assert_eq!(c.call(&["GETDEL", "k2"]), RV::Nil);
    assert_eq!(c.call(&["MSET", "a", "1", "b", "2"]), ok());
    assert_eq!(
        c.call(&["MGET", "a", "nope", "b"]),
        RV::Array(vec![bulk("1"), RV::Nil, bulk("2")])
    );
    assert_eq!(c.call(&["MSETNX", "a", "9", "c", "9"]), RV::Int(0));
    assert_eq!(c.call(&["MSETNX", "c", "3", "d", "4"]), RV::Int(1));
    assert_eq!(c.call(&["EXISTS", "a", "a", "zz"]), RV::Int(2));
    assert_eq!(c.call(&["DEL", "c", "d", "zz"]), RV::Int(2));
    assert_eq!(c.call(&["UNLINK", "b"]), RV::Int(1));
    assert_eq!(c.call(&["APPEND", "a", "23"]), RV::Int(3));
    assert_eq!(c.call(&["STRLEN", "a"]), RV::Int(3));
    assert_eq!(c.call(&["STRLEN", "zz"]), RV::Int(0));
    assert_eq!(c.call(&["INCR", "a"]), RV::Int(124));
    assert_eq!(c.call(&["INCRBY", "a", "-24"]), RV::Int(100));
    assert_eq!(c.call(&["DECR", "a"]), RV::Int(99));
    assert_eq!(c.call(&["DECRBY", "a", "9"]), RV::Int(90));
    assert_eq!(c.call(&["INCR", "fresh"]), RV::Int(1));
    let not_int = err("ERR value is not an integer or out of range");
    assert_eq!(c.call(&["INCR", "k"]), not_int);
    assert_eq!(c.call(&["INCRBY", "a", "1.5"]), not_int);
    assert_eq!(c.call(&["SET", "big", "9223372036854775807"]), ok());
    assert_eq!(
        c.call(&["INCR", "big"]),
        err("ERR increment or decrement would overflow")
    );
    assert_eq!(c.call(&["INCRBYFLOAT", "f", "10.5"]), bulk("10.5"));
    assert_eq!(c.call(&["INCRBYFLOAT", "f", "0.1"]), bulk("10.6"));
    assert_eq!(c.call(&["INCRBYFLOAT", "f", "-0.6"]), bulk("10"));
    assert_eq!(
        c.call(&["INCRBYFLOAT", "k", "1"]),
        err("ERR value is not a valid float")
    );
    assert_eq!(c.call(&["TYPE", "a"]), RV::Simple("string".into()));
    assert_eq!(c.call(&["TYPE", "zz"]), RV::Simple("none".into()));
    assert_eq!(
        c.call(&["GET"]),
        err("ERR wrong number of arguments for 'get' command")
    );
    assert_eq!(
        c.call(&["MSET", "a"]),
        err("ERR wrong number of arguments for 'mset' command")
    );
    assert_eq!(
        c.call(&["MSET", "a", "1", "b"]),
        err("ERR wrong number of arguments for 'mset' command")
    );
    // Other data types are unknown commands, as Redis words it.
    for (cmd, want) in [
        (
            vec!["LPUSH", "l", "a"],
            "ERR unknown command 'LPUSH', with args beginning with: 'l' 'a' ",
        ),
        (
            vec!["sadd", "s"],
            "ERR unknown command 'sadd', with args beginning with: 's' ",
        ),
        (
            vec!["ZADD"],
            "ERR unknown command 'ZADD', with args beginning with: ",
        ),
    ] {
        assert_eq!(c.call(&cmd), err(want));
    }
    assert_eq!(
        c.call(&["REPLICAOF", "h", "1"]).clone(),
        err(
            "ERR REPLICAOF is not served here: Kura replicates with its own protocol; start \
             the replica with kura serve --master HOST:PORT"
        )
    );
    let RV::Array(t) = c.call(&["TIME"]) else {
        panic!("TIME")
    };
    assert_eq!(t.len(), 2);
    assert_eq!(c.call(&["DBSIZE"]), RV::Int(5));
    let RV::Array(keys) = c.call(&["KEYS", "*"]) else {
        panic!("KEYS")
    };
    let mut keys: Vec<String> = keys.iter().map(RV::s).collect();
    keys.sort();
    assert_eq!(keys, ["a", "big", "f", "fresh", "k"]);
    assert_eq!(c.call(&["FLUSHDB", "NOW"]), err("ERR syntax error"));
    assert_eq!(c.call(&["FLUSHALL", "ASYNC"]), ok());
    assert_eq!(c.call(&["DBSIZE"]), RV::Int(0));
    assert_eq!(c.call(&["QUIT"]), ok());
    let mut rest = Vec::new();
    c.r.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
}

/// The same keys over memcached and Redis: one store.
#[test]
fn memcached_and_redis_share_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), "*");
    let mut c = Resp::new(&s.addr);
    assert_eq!(c.call(&["SET", "shared", "from-redis"]), ok());
    let mut m = s.connect();
    assert_eq!(
        common::mc(&mut m, "get shared\r\n"),
        "VALUE shared 0 10\r\n"
    );
    common::mc(&mut m, "");
    common::mc(&mut m, "");
    common::mc(&mut m, "set mc 0 0 2\r\nhi\r\n");
    assert_eq!(c.call(&["GET", "mc"]), bulk("hi"));
}

#[test]
fn resp3_after_hello_and_client_commands() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), "*");
    let mut c = Resp::new(&s.addr);
    assert_eq!(
        c.call(&["HELLO", "4"]),
        err("NOPROTO unsupported protocol version")
    );
    let RV::Map(m) = c.call(&["HELLO", "3", "SETNAME", "me"]) else {
        panic!("HELLO 3 answers a map")
    };
    let get = |k: &str| m.iter().find(|(n, _)| n.s() == k).map(|(_, v)| v.clone());
    assert_eq!(get("server"), Some(bulk("redis")));
    assert_eq!(get("proto"), Some(RV::Int(3)));
    assert_eq!(get("version"), Some(bulk("7.0.15")));
    assert_eq!(c.call(&["GET", "nope"]), RV::Nil);
    assert_eq!(c.call(&["CLIENT", "GETNAME"]), bulk("me"));
    assert_eq!(
        c.call(&["CLIENT", "SETNAME", "a b"]),
        err("ERR Client names cannot contain spaces, newlines or special characters.")
    );
    assert_eq!(c.call(&["CLIENT", "SETINFO", "LIB-NAME", "test"]), ok());
    assert_eq!(c.call(&["CLIENT", "SETINFO", "LIB-VER", "1.0"]), ok());
    let RV::Int(id) = c.call(&["CLIENT", "ID"]) else {
        panic!("CLIENT ID")
    };
    let RV::Verbatim(fmt, info) = c.call(&["CLIENT", "INFO"]) else {
        panic!("CLIENT INFO is verbatim in RESP3")
    };
    assert_eq!(fmt, "txt");
    assert!(info.starts_with(&format!("id={id} ")), "{info}");
    assert!(
        info.contains(" name=me ") && info.contains(" resp=3 "),
        "{info}"
    );
    assert!(info.contains("lib-name=test lib-ver=1.0"), "{info}");
    assert_eq!(
        c.call(&["CLIENT", "NOPE"]),
        err("ERR unknown subcommand 'NOPE'. Try CLIENT HELP.")
    );
    assert_eq!(
        c.call(&["CLIENT", "SETNAME"]),
        err("ERR wrong number of arguments for 'client|setname' command")
    );
    let RV::Map(cfg) = c.call(&["CONFIG", "GET", "maxmemory*", "databases"]) else {
        panic!("CONFIG GET is a map in RESP3")
    };
    assert_eq!(cfg.len(), 3);
    let RV::Int(n) = c.call(&["COMMAND", "COUNT"]) else {
        panic!("COMMAND COUNT")
    };
    let RV::Array(info) = c.call(&["COMMAND", "INFO", "get", "nope"]) else {
        panic!("COMMAND INFO")
    };
    assert!(n > 40);
    assert_eq!(info[1], RV::Nil);
    let RV::Array(get_info) = &info[0] else {
        panic!("COMMAND INFO get")
    };
    assert_eq!(get_info[..2], [bulk("get"), RV::Int(2)]);
    assert!(matches!(c.call(&["COMMAND", "DOCS", "set"]), RV::Map(d) if d.len() == 1));
    let RV::Verbatim(_, text) = c.call(&["INFO"]) else {
        panic!("INFO is verbatim in RESP3")
    };
    for line in [
        "# Server",
        "redis_version:7.0.15",
        "# Clients",
        "# Memory",
        "# Persistence",
        "aof_enabled:0",
        "# Stats",
        // Read by client libraries at connection (redis-py's test suite: a KeyError without).
        "arch_bits:64",
        "# Cluster",
        "cluster_enabled:0",
        "# Keyspace",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
    // Back to RESP2.
    let RV::Array(_) = c.call(&["HELLO", "2"]) else {
        panic!("HELLO 2 answers an array")
    };
    assert_eq!(c.call(&["GET", "nope"]), RV::Nil);
    let RV::Array(cfg) = c.call(&["CONFIG", "GET", "appendonly"]) else {
        panic!("CONFIG GET is an array in RESP2")
    };
    assert_eq!(cfg, [bulk("appendonly"), bulk("no")]);
}

#[test]
fn pipelined_requests_and_inline_commands() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), "*");
    let mut c = Resp::new(&s.addr);
    let mut wire = Vec::new();
    for i in 0..500 {
        let (k, v) = (format!("p{i}"), format!("v{i}"));
        wire.extend(Resp::encode(&[b"SET", k.as_bytes(), v.as_bytes()]));
        wire.extend(Resp::encode(&[b"GET", k.as_bytes()]));
    }
    c.w.write_all(&wire).unwrap();
    for i in 0..500 {
        assert_eq!(c.read(), ok());
        assert_eq!(c.read(), bulk(&format!("v{i}")));
    }
    // Typed by hand: an inline command on a fresh connection (upper-case, no HTTP line).
    let mut raw = s.connect();
    raw.write_all(b"PING\r\nSET hand \"a b\"\r\nGET hand\r\n")
        .unwrap();
    let want = b"+PONG\r\n+OK\r\n$3\r\na b\r\n";
    let mut got = vec![0u8; want.len()];
    raw.read_exact(&mut got).unwrap();
    assert_eq!(got, want);
    // HTTP still works on the same port.
    let mut h = s.connect();
    h.write_all(b"GET /hand HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut resp = String::new();
    h.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.ends_with("a b"), "{resp}");
}

/// A malformed request gets Redis's protocol error and its connection is closed; the other
/// connections and the data stay.
#[test]
fn a_malformed_request_closes_only_its_connection() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_with(dir.path(), "*", &["--max-value-size", "1000"]);
    let mut good = Resp::new(&s.addr);
    assert_eq!(good.call(&["SET", "keep", "me"]), ok());
    for (bad, want) in [
        (
            &b"*1\r\n$4\r\nPING\r\n*x\r\n"[..],
            &b"+PONG\r\n-ERR Protocol error: invalid multibulk length\r\n"[..],
        ),
        (
            b"*1\r\n+PING\r\n",
            b"-ERR Protocol error: expected '$', got '+'\r\n",
        ),
        (
            b"*2\r\n$3\r\nGET\r\n$-3\r\n",
            b"-ERR Protocol error: invalid bulk length\r\n",
        ),
        // Over --max-value-size: refused before it is read.
        (
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1001\r\n",
            b"-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"SET k \"open\r\n",
            b"-ERR Protocol error: unbalanced quotes in request\r\n",
        ),
    ] {
        let mut c = s.connect();
        c.write_all(bad).unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
    }
    // Arguments each within the limit, over --max-value-size + 1 MiB in all: refused as the
    // declared lengths pass it, not left waiting for a budget it can never get.
    let mut big = b"*2201\r\n$4\r\nMSET\r\n".to_vec();
    for i in 0..1100 {
        big.extend(format!("$5\r\nk{i:04}\r\n$1000\r\n").bytes());
        big.extend_from_slice(&[b'v'; 1000]);
        big.extend_from_slice(b"\r\n");
    }
    let mut c = s.connect();
    let mut w = c.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = w.write_all(&big);
    });
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    writer.join().unwrap();
    let got = String::from_utf8_lossy(&got);
    assert!(
        got.starts_with("-ERR Protocol error: request of more than 1049576 bytes"),
        "{got}"
    );
    assert_eq!(good.call(&["GET", "keep"]), bulk("me"));
    assert_eq!(good.call(&["DBSIZE"]), RV::Int(1));
}

/// Expiry with time passing: SET EX/PX, EXPIRE, PEXPIRE, EXPIREAT, TTL/PTTL, PERSIST, GETEX,
/// SETEX; TTL -1 and -2 as Redis.
#[test]
fn expiry_with_time_passing() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), "*");
    let mut c = Resp::new(&s.addr);
    assert_eq!(c.call(&["SET", "short", "1", "PX", "1200"]), ok());
    assert_eq!(c.call(&["SET", "long", "1", "EX", "100"]), ok());
    assert_eq!(c.call(&["SET", "plain", "1"]), ok());
    assert_eq!(c.call(&["SETEX", "sx", "1", "v"]), ok());
    assert_eq!(c.call(&["PSETEX", "px", "1500", "v"]), ok());
    assert_eq!(
        c.call(&["SETEX", "sx", "0", "v"]),
        err("ERR invalid expire time in 'setex' command")
    );
    assert_eq!(c.call(&["TTL", "long"]), RV::Int(100));
    let RV::Int(pttl) = c.call(&["PTTL", "long"]) else {
        panic!()
    };
    assert!((98_000..=101_000).contains(&pttl), "{pttl}");
    assert_eq!(c.call(&["TTL", "plain"]), RV::Int(-1));
    assert_eq!(c.call(&["PTTL", "nope"]), RV::Int(-2));
    assert_eq!(c.call(&["EXPIRE", "nope", "10"]), RV::Int(0));
    assert_eq!(c.call(&["EXPIRE", "plain", "10", "XX"]), RV::Int(0));
    assert_eq!(c.call(&["EXPIRE", "plain", "10", "NX"]), RV::Int(1));
    assert_eq!(c.call(&["EXPIRE", "plain", "5", "GT"]), RV::Int(0));
    assert_eq!(c.call(&["EXPIRE", "plain", "50", "GT"]), RV::Int(1));
    assert_eq!(c.call(&["TTL", "plain"]), RV::Int(50));
    assert_eq!(c.call(&["PERSIST", "plain"]), RV::Int(1));
    assert_eq!(c.call(&["PERSIST", "plain"]), RV::Int(0));
    assert_eq!(c.call(&["TTL", "plain"]), RV::Int(-1));
    assert_eq!(
        c.call(&["EXPIRE", "plain", "x"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(c.call(&["PEXPIRE", "plain", "100000"]), RV::Int(1));
    assert_eq!(c.call(&["TTL", "plain"]), RV::Int(100));
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 1000;
    assert_eq!(c.call(&["EXPIREAT", "plain", &at.to_string()]), RV::Int(1));
    assert_eq!(c.call(&["EXPIRETIME", "plain"]), RV::Int(at as i64));
    assert_eq!(c.call(&["GETEX", "plain", "PERSIST"]), bulk("1"));
    assert_eq!(c.call(&["TTL", "plain"]), RV::Int(-1));
    assert_eq!(c.call(&["GETEX", "plain", "EX", "30"]), bulk("1"));
    assert_eq!(c.call(&["TTL", "plain"]), RV::Int(30));
    // KEEPTTL keeps it; a plain SET clears it.
    assert_eq!(c.call(&["SET", "plain", "2", "KEEPTTL"]), ok());
    assert_eq!(c.call(&["TTL", "plain"]), RV::Int(30));
    assert_eq!(c.call(&["SET", "plain", "3"]), ok());
    assert_eq!(c.call(&["TTL", "plain"]), RV::Int(-1));
    // A time in the past removes the key.
    assert_eq!(c.call(&["EXPIRE", "plain", "-1"]), RV::Int(1));
    assert_eq!(c.call(&["EXISTS", "plain"]), RV::Int(0));
    assert_eq!(c.call(&["SET", "gone", "1", "EXAT", "1"]), ok());
    assert_eq!(c.call(&["GET", "gone"]), RV::Nil);
    // Time passes: the short ones go, the long one stays.
    let start = Instant::now();
    assert!(common::eventually(5, || c.call(&["GET", "short"]) == RV::Nil));
    assert!(start.elapsed() >= Duration::from_millis(900));
    assert!(common::eventually(5, || {
        c.call(&["EXISTS", "sx", "px"]) == RV::Int(0)
    }));
    assert_eq!(c.call(&["TTL", "short"]), RV::Int(-2));
    assert_eq!(c.call(&["GET", "long"]), bulk("1"));
}

/// SCAN walks a `.kb` in key order; `MATCH prefix*` is a range; the cursor survives writes.
#[test]
fn scan_in_key_order_on_a_b_tree() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), "t.kb");
    let mut c = Resp::new(&s.addr);
    for i in (0..300).rev() {
        assert_eq!(c.call(&["SET", &format!("user:{i:04}"), "x"]), ok());
    }
    for k in ["a", "b", "zz"] {
        assert_eq!(c.call(&["SET", k, "x"]), ok());
    }
    let scan = |c: &mut Resp, args: &[&str]| -> (String, Vec<String>) {
        let RV::Array(v) = c.call(args) else {
            panic!("SCAN")
        };
        let RV::Array(keys) = &v[1] else { panic!() };
        (v[0].s(), keys.iter().map(RV::s).collect())
    };
    // The whole walk, COUNT 7 at a time, in key order.
    let (mut cur, mut all) = ("0".to_string(), Vec::new());
    let mut calls = 0;
    loop {
        let (next, keys) = scan(&mut c, &["SCAN", &cur, "COUNT", "7"]);
        all.extend(keys);
        calls += 1;
        if next == "0" {
            break;
        }
        cur = next;
        // A write meanwhile does not disturb the walk.
        if calls == 3 {
            assert_eq!(c.call(&["DEL", "user:0100"]), RV::Int(1));
        }
    }
    let mut want: Vec<String> = ["a", "b"].iter().map(|s| s.to_string()).collect();
    want.extend(
        (0..300)
            .filter(|&i| i != 100)
            .map(|i| format!("user:{i:04}")),
    );
    want.push("zz".into());
    assert_eq!(all, want);
    assert!(calls >= 40);
    // MATCH with a prefix: only the range is walked, and the walk ends past it.
    let (next, keys) = scan(&mut c, &["SCAN", "0", "MATCH", "user:01*", "COUNT", "1000"]);
    assert_eq!(next, "0");
    assert_eq!(keys.len(), 99);
    assert_eq!(keys[0], "user:0101");
    let (_, keys) = scan(&mut c, &["SCAN", "0", "MATCH", "*9", "COUNT", "1000"]);
    assert_eq!(keys.len(), 30);
    assert_eq!(scan(&mut c, &["SCAN", "0", "TYPE", "list"]).1.len(), 0);
    assert_eq!(c.call(&["SCAN", "x"]), err("ERR invalid cursor"));
    let RV::Array(keys) = c.call(&["KEYS", "user:02?9"]) else {
        panic!()
    };
    assert_eq!(keys.len(), 10);
    assert_eq!(keys[0], bulk("user:0209"));
}

#[test]
fn multi_exec_discard_and_watch() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), "t.kh");
    let mut c = Resp::new(&s.addr);
    let mut other = Resp::new(&s.addr);
    assert_eq!(c.call(&["EXEC"]), err("ERR EXEC without MULTI"));
    assert_eq!(c.call(&["DISCARD"]), err("ERR DISCARD without MULTI"));
    assert_eq!(c.call(&["MULTI"]), ok());
    assert_eq!(c.call(&["SET", "a", "1"]), RV::Simple("QUEUED".into()));
    assert_eq!(
        c.call(&["MSET", "b", "2", "c", "3"]),
        RV::Simple("QUEUED".into())
    );
    // Nothing is applied before EXEC.
    assert_eq!(other.call(&["GET", "a"]), RV::Nil);
    assert_eq!(c.call(&["EXEC"]), RV::Array(vec![ok(), ok()]));
    assert_eq!(other.call(&["MGET", "a", "b", "c"]), arr(&["1", "2", "3"]));
    assert_eq!(c.call(&["MULTI"]), ok());
    assert_eq!(c.call(&["INCR", "a"]), RV::Simple("QUEUED".into()));
    assert_eq!(c.call(&["GET", "a"]), RV::Simple("QUEUED".into()));
    assert_eq!(c.call(&["MULTI"]), err("ERR MULTI calls can not be nested"));
    assert_eq!(c.call(&["EXEC"]), RV::Array(vec![RV::Int(2), bulk("2")]));
    assert_eq!(c.call(&["MULTI"]), ok());
    assert_eq!(c.call(&["SET", "a", "x"]), RV::Simple("QUEUED".into()));
    assert_eq!(c.call(&["DISCARD"]), ok());
    assert_eq!(c.call(&["GET", "a"]), bulk("2"));
    // A queued error aborts the whole transaction.
    assert_eq!(c.call(&["MULTI"]), ok());
    assert_eq!(c.call(&["SET", "a", "y"]), RV::Simple("QUEUED".into()));
    assert_eq!(
        c.call(&["GET"]),
        err("ERR wrong number of arguments for 'get' command")
    );
    assert_eq!(
        c.call(&["EXEC"]),
        err("EXECABORT Transaction discarded because of previous errors.")
    );
    assert_eq!(c.call(&["GET", "a"]), bulk("2"));
    // A WATCHed key written by another client: EXEC does nothing.
    assert_eq!(c.call(&["WATCH", "a"]), ok());
    assert_eq!(other.call(&["SET", "a", "theirs"]), ok());
    assert_eq!(c.call(&["MULTI"]), ok());
    assert_eq!(
        c.call(&["WATCH", "b"]),
        err("ERR WATCH inside MULTI is not allowed")
    );
    assert_eq!(c.call(&["SET", "a", "mine"]), RV::Simple("QUEUED".into()));
    assert_eq!(c.call(&["EXEC"]), RV::Nil);
    assert_eq!(c.call(&["GET", "a"]), bulk("theirs"));
    assert_eq!(c.call(&["WATCH", "a"]), ok());
    assert_eq!(c.call(&["MULTI"]), ok());
    assert_eq!(c.call(&["SET", "a", "mine"]), RV::Simple("QUEUED".into()));
    assert_eq!(c.call(&["EXEC"]), RV::Array(vec![ok()]));
    assert_eq!(other.call(&["GET", "a"]), bulk("mine"));
}

/// AUTH against the users file, with Redis's wording; the rights decide (FLUSHALL needs
/// admin); HELLO AUTH logs in too.
#[test]
fn auth_with_a_users_file_and_rights() {
    let dir = tempfile::tempdir().unwrap();
    for (name, pw, rights) in [
        ("alice", "s3cret", "read,write"),
        ("reader", "ro-pw", "read"),
        ("default", "dflt", "all"),
    ] {
        let o = kura_users(
            dir.path(),
            &["add", "users.txt", name, "--rights", rights],
            pw,
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let s = Server::start_with(dir.path(), "*", &["--users", "users.txt"]);
    let mut c = Resp::new(&s.addr);
    assert_eq!(
        c.call(&["GET", "k"]),
        err("NOAUTH Authentication required.")
    );
    assert_eq!(c.call(&["PING"]), err("NOAUTH Authentication required."));
    let wrongpass = err("WRONGPASS invalid username-password pair or user is disabled.");
    assert_eq!(c.call(&["AUTH", "alice", "nope"]), wrongpass);
    assert_eq!(c.call(&["AUTH", "nobody", "nope"]), wrongpass);
    assert_eq!(
        c.call(&["GET", "k"]),
        err("NOAUTH Authentication required.")
    );
    assert_eq!(c.call(&["AUTH", "alice", "s3cret"]), ok());
    assert_eq!(c.call(&["SET", "k", "v"]), ok());
    assert_eq!(c.call(&["GET", "k"]), bulk("v"));
    assert_eq!(
        c.call(&["FLUSHALL"]),
        err("NOPERM User alice has no permissions to run the 'flushall' command")
    );
    // A reader reads only.
    let mut r = Resp::new(&s.addr);
    assert_eq!(r.call(&["AUTH", "reader", "ro-pw"]), ok());
    assert_eq!(r.call(&["GET", "k"]), bulk("v"));
    assert_eq!(
        r.call(&["SET", "k", "w"]),
        err("NOPERM User reader has no permissions to run the 'set' command")
    );
    assert_eq!(
        r.call(&["DEL", "k"]),
        err("NOPERM User reader has no permissions to run the 'del' command")
    );
    // HELLO with AUTH; a one-argument AUTH is the user `default`.
    let mut h = Resp::new(&s.addr);
    assert!(matches!(
        h.call(&["HELLO", "3", "AUTH", "alice", "bad"]),
        RV::Err(e) if e.starts_with("WRONGPASS")
    ));
    assert!(matches!(
        h.call(&["HELLO", "3", "AUTH", "alice", "s3cret"]),
        RV::Map(_)
    ));
    assert_eq!(h.call(&["GET", "k"]), bulk("v"));
    let mut d = Resp::new(&s.addr);
    assert_eq!(d.call(&["AUTH", "dflt"]), ok());
    assert_eq!(d.call(&["FLUSHALL"]), ok());
    assert_eq!(d.call(&["DBSIZE"]), RV::Int(0));
}

#[test]
fn auth_without_users_and_the_mask() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_with(dir.path(), "*", &["--mask", "out,vanish"]);
    let mut c = Resp::new(&s.addr);
    assert!(matches!(
        c.call(&["AUTH", "pw"]),
        RV::Err(e) if e.starts_with("ERR AUTH <password> called without any password configured")
    ));
    assert_eq!(c.call(&["SET", "k", "v"]), ok());
    assert_eq!(
        c.call(&["DEL", "k"]),
        err("ERR 'del' is refused by the server's --mask")
    );
    assert_eq!(
        c.call(&["FLUSHDB"]),
        err("ERR 'flushdb' is refused by the server's --mask")
    );
    // Refused at queueing: the transaction aborts.
    assert_eq!(c.call(&["MULTI"]), ok());
    assert_eq!(
        c.call(&["GETDEL", "k"]),
        err("ERR 'getdel' is refused by the server's --mask")
    );
    assert!(matches!(c.call(&["EXEC"]), RV::Err(e) if e.starts_with("EXECABORT")));
    assert_eq!(c.call(&["GET", "k"]), bulk("v"));
    drop(s);
    // allredis refuses the Redis protocol only.
    let s = Server::start_with(dir.path(), "*", &["--mask", "allredis", "--unmask", "stat"]);
    let mut c = Resp::new(&s.addr);
    assert_eq!(c.call(&["PING"]), RV::Simple("PONG".into()));
    assert_eq!(
        c.call(&["SET", "k", "v"]),
        err("ERR 'set' is refused by the server's --mask")
    );
    let mut m = s.connect();
    assert_eq!(common::mc(&mut m, "set k 0 0 1\r\nv\r\n"), "STORED\r\n");
    assert_eq!(
        c.call(&["GET", "k"]),
        err("ERR 'get' is refused by the server's --mask")
    );
    assert!(
        matches!(c.call(&["INFO", "keyspace"]), RV::Bulk(b) if String::from_utf8_lossy(&b).contains("db0:keys=1"))
    );
}

/// An acknowledged SET on a `sync=always` database survives SIGKILL; INFO persistence says
/// which durability is in force.
#[test]
fn a_set_acknowledged_with_sync_always_survives_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let name = "d.kh#sync=always";
    let mut s = Server::start(dir.path(), name);
    let mut c = Resp::new(&s.addr);
    let RV::Bulk(p) = c.call(&["INFO", "persistence"]) else {
        panic!()
    };
    let p = String::from_utf8(p).unwrap();
    assert!(
        p.contains("aof_enabled:1\r\n") && p.contains("appendfsync:always\r\n"),
        "{p}"
    );
    let mut wire = Vec::new();
    for i in 0..200 {
        wire.extend(Resp::encode(&[b"SET", format!("d{i}").as_bytes(), b"v"]));
    }
    c.w.write_all(&wire).unwrap();
    for _ in 0..200 {
        assert_eq!(c.read(), ok());
    }
    assert_eq!(c.call(&["INCRBY", "n", "7"]), RV::Int(7));
    s.signal(libc::SIGKILL);
    let s = Server::start(dir.path(), name);
    let mut c = Resp::new(&s.addr);
    assert_eq!(c.call(&["DBSIZE"]), RV::Int(201));
    assert_eq!(c.call(&["GET", "d199"]), bulk("v"));
    assert_eq!(c.call(&["GET", "n"]), bulk("7"));
    drop(s);
    // The default durability is Redis's everysec.
    let s = Server::start(dir.path(), "e.kh");
    let mut c = Resp::new(&s.addr);
    let RV::Bulk(p) = c.call(&["INFO", "persistence"]) else {
        panic!()
    };
    assert!(String::from_utf8_lossy(&p).contains("appendfsync:everysec\r\n"));
}

/// Debian's `redis-cli` driving the server (scripts/test.sh installs `redis-tools`; with
/// CI=true a missing redis-cli fails).
#[test]
fn redis_cli_drives_the_server() {
    if !common::tools_present(&["redis-cli"]) {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "redis-cli is missing (apt-get install redis-tools)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), "t.kb");
    let port = common::port_of(&s.addr).to_string();
    let cli = |args: &[&str]| -> String {
        let o = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port])
            .args(args)
            .output()
            .expect("run redis-cli");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    assert_eq!(cli(&["PING"]), "PONG\n");
    assert_eq!(cli(&["SET", "greeting", "hello world"]), "OK\n");
    assert_eq!(cli(&["GET", "greeting"]), "hello world\n");
    assert_eq!(cli(&["INCRBY", "n", "5"]), "5\n");
    assert_eq!(cli(&["-3", "GET", "missing"]), "\n");
    assert!(cli(&["-3", "HELLO", "3"]).starts_with("server redis\n"));
    assert_eq!(cli(&["MSET", "k1", "a", "k2", "b"]), "OK\n");
    assert_eq!(cli(&["--scan", "--pattern", "k*"]), "k1\nk2\n");
    assert_eq!(cli(&["DBSIZE"]), "4\n");
    assert!(cli(&["INFO", "keyspace"]).contains("db0:keys=4,expires=0"));
    assert!(cli(&["LPUSH", "l", "x"])
        .starts_with("ERR unknown command 'LPUSH', with args beginning with: 'l' 'x' \n"));
    // Mass insertion with --pipe.
    let mut input = Vec::new();
    for i in 0..1000 {
        input.extend(Resp::encode(&[b"SET", format!("pipe{i}").as_bytes(), b"1"]));
    }
    let mut child = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port, "--pipe"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let o = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("errors: 0, replies: 1000"), "{text}");
    assert_eq!(cli(&["DBSIZE"]), "1004\n");
}

/// redis-benchmark (Debian's redis-tools) runs its workloads against the server, unpipelined
/// and pipelined, with no error, and leaves the records it wrote.
#[test]
fn redis_benchmark_runs_against_the_server() {
    if !common::tools_present(&["redis-benchmark"]) {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "redis-benchmark is missing (apt-get install redis-tools)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), "t.kh");
    let port = common::port_of(&s.addr).to_string();
    for pipeline in ["1", "16"] {
        let o = Command::new("redis-benchmark")
            .args(["-h", "127.0.0.1", "-p", &port, "-n", "2000", "-c", "4"])
            .args(["-P", pipeline, "-r", "100", "-d", "50", "--csv"])
            .args(["-t", "ping,set,get,incr,mset"])
            .output()
            .expect("run redis-benchmark");
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "-P {pipeline}: {out}{err}");
        for test in ["PING_INLINE", "PING_MBULK", "SET", "GET", "INCR", "MSET"] {
            assert!(
                out.lines().any(|l| l.starts_with(&format!("\"{test}"))),
                "-P {pipeline}: no {test} row in {out}{err}"
            );
        }
        assert!(
            !out.contains("ERR") && !err.contains("ERR"),
            "-P {pipeline}: {out}{err}"
        );
    }
    // Its keys are there: `key:__rand_int__` (SET, GET), `counter:__rand_int__` (INCR).
    let mut c = Resp::new(&s.addr);
    match c.call(&["DBSIZE"]) {
        RV::Int(n) => assert!(n > 0, "DBSIZE {n}"),
        other => panic!("DBSIZE: {other:?}"),
    }
}

/// Hashes on a table database: a hash is a record, its fields the columns; the same record
/// reads back over Tyrant's table functions' wire form. On other kinds, a clear error.
#[test]
fn hashes_are_table_records() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), "t.kt#sync=always");
    let mut c = Resp::new(&s.addr);
    assert_eq!(
        c.call(&["HSET", "u1", "name", "alice", "age", "30"]),
        RV::Int(2)
    );
    assert_eq!(
        c.call(&["HSET", "u1", "age", "31", "city", "Oslo"]),
        RV::Int(1)
    );
    assert_eq!(
        c.call(&["HSET", "u1", "odd"]),
        err("ERR wrong number of arguments for 'hset' command")
    );
    assert_eq!(c.call(&["HGET", "u1", "age"]), bulk("31"));
    assert_eq!(c.call(&["HGET", "u1", "nope"]), RV::Nil);
    assert_eq!(c.call(&["HGET", "nobody", "age"]), RV::Nil);
    assert_eq!(
        c.call(&["HMGET", "u1", "name", "nope", "city"]),
        RV::Array(vec![bulk("alice"), RV::Nil, bulk("Oslo")])
    );
    assert_eq!(
        c.call(&["HGETALL", "u1"]),
        arr(&["name", "alice", "age", "31", "city", "Oslo"])
    );
    assert_eq!(c.call(&["HEXISTS", "u1", "city"]), RV::Int(1));
    assert_eq!(c.call(&["HEXISTS", "u1", "zip"]), RV::Int(0));
    assert_eq!(c.call(&["HLEN", "u1"]), RV::Int(3));
    assert_eq!(c.call(&["HKEYS", "u1"]), arr(&["name", "age", "city"]));
    assert_eq!(c.call(&["HVALS", "u1"]), arr(&["alice", "31", "Oslo"]));
    assert_eq!(c.call(&["HINCRBY", "u1", "age", "2"]), RV::Int(33));
    assert_eq!(c.call(&["HINCRBY", "u1", "visits", "1"]), RV::Int(1));
    assert_eq!(
        c.call(&["HINCRBY", "u1", "name", "1"]),
        err("ERR hash value is not an integer")
    );
    assert_eq!(c.call(&["TYPE", "u1"]), RV::Simple("hash".into()));
    assert_eq!(c.call(&["HMSET", "u2", "name", "bob"]), ok());
    // The record over the plain interface: the table's wire form.
    assert_eq!(c.call(&["GET", "u2"]), RV::Bulk(b"name\0bob".to_vec()));
    // RESP3: a map.
    assert!(matches!(c.call(&["HELLO", "3"]), RV::Map(_)));
    let RV::Map(m) = c.call(&["HGETALL", "u2"]) else {
        panic!("HGETALL is a map in RESP3")
    };
    assert_eq!(m, vec![(bulk("name"), bulk("bob"))]);
    assert_eq!(c.call(&["HGETALL", "nobody"]), RV::Map(vec![]));
    // Removing the last field removes the hash.
    assert_eq!(c.call(&["HDEL", "u2", "name", "nope"]), RV::Int(1));
    assert_eq!(c.call(&["EXISTS", "u2"]), RV::Int(0));
    assert_eq!(c.call(&["HDEL", "u1", "visits", "city"]), RV::Int(2));
    assert_eq!(c.call(&["HLEN", "u1"]), RV::Int(2));
    drop(s);
    // Acknowledged with sync=always: the record reads back after SIGKILL and a restart.
    let s = Server::start(dir.path(), "t.kt#sync=always");
    let mut c = Resp::new(&s.addr);
    assert_eq!(
        c.call(&["HGETALL", "u1"]),
        arr(&["name", "alice", "age", "33"])
    );
    drop(s);
    let s = Server::start(dir.path(), "*");
    let mut c = Resp::new(&s.addr);
    assert_eq!(
        c.call(&["HSET", "h", "f", "v"]),
        err(
            "ERR HSET is served on a table database only (kura serve PATH.kt): a hash is a \
             table record, its fields the record's columns"
        )
    );
}

/// Metrics by command and the protocol's latency series, on the HTTP interface's page.
#[test]
fn metrics_count_redis_commands() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), "*");
    let mut c = Resp::new(&s.addr);
    for _ in 0..3 {
        assert_eq!(c.call(&["SET", "k", "v"]), ok());
    }
    assert_eq!(c.call(&["GET", "k"]), bulk("v"));
    assert!(matches!(c.call(&["NOPE"]), RV::Err(_)));
    let mut h = s.connect();
    h.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut page = String::new();
    h.read_to_string(&mut page).unwrap();
    for line in [
        "kura_redis_commands_total{command=\"set\"} 3",
        "kura_redis_commands_total{command=\"get\"} 1",
        "kura_redis_errors_total 1",
        "kura_request_duration_seconds_count{protocol=\"redis\"} 5",
    ] {
        assert!(page.contains(line), "{line} in\n{page}");
    }
}

/// A replica takes its changes from its master only: a Redis write there gets Redis's
/// `-READONLY`, also when queued in MULTI; the master's writes arrive.
#[test]
fn a_replica_refuses_redis_writes_with_readonly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let m = common::serve(d, &["*", "--port", "0", "--sid", "1", "--ulog", "mlog"]);
    let r = common::serve(d, &["*", "--port", "0", "--sid", "2", "--master", &m.addr]);
    let mut mc = Resp::new(&m.addr);
    let mut rc = Resp::new(&r.addr);
    assert_eq!(mc.call(&["SET", "k", "v"]), ok());
    assert!(common::eventually(10, || rc.call(&["GET", "k"]) == bulk("v")));
    let readonly = err("READONLY You can't write against a read only replica.");
    assert_eq!(rc.call(&["SET", "k", "w"]), readonly);
    assert_eq!(rc.call(&["MULTI"]), ok());
    assert_eq!(rc.call(&["DEL", "k"]), readonly);
    assert!(matches!(rc.call(&["EXEC"]), RV::Err(e) if e.starts_with("EXECABORT")));
    let RV::Bulk(info) = rc.call(&["INFO", "replication"]) else {
        panic!()
    };
    assert!(String::from_utf8_lossy(&info).contains("role:slave"));
    assert_eq!(rc.call(&["GET", "k"]), bulk("v"));
}
