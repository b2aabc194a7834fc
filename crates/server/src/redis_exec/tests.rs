use super::*;
use crate::out::Out;

/// Run `args` on `store` as one connection would and return the reply.
fn run<'s>(
    store: &'s dyn Store,
    sh: &Shared,
    conn: &mut RedisConn<'s>,
    session: &mut Session,
    args: &[&str],
) -> String {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    let mut out = Out::default();
    run_args(store, sh, conn, session, &args, 1, &mut out);
    String::from_utf8_lossy(&out.contiguous()).into_owned()
}

#[test]
fn strings_counters_and_errors() {
    let db = kura_engine::open("*").unwrap();
    let sh = Shared::new(1, 1 << 20);
    let mut conn = RedisConn::new(&sh, 1);
    let mut ses = Session::default();
    let mut r = |a: &[&str]| run(&*db, &sh, &mut conn, &mut ses, a);
    assert_eq!(r(&["SET", "k", "v"]), "+OK\r\n");
    assert_eq!(r(&["get", "k"]), "$1\r\nv\r\n");
    assert_eq!(r(&["GET", "nope"]), "$-1\r\n");
    assert_eq!(r(&["SET", "k", "w", "NX"]), "$-1\r\n");
    assert_eq!(r(&["SET", "k", "w", "XX", "GET"]), "$1\r\nv\r\n");
    assert_eq!(r(&["SET", "k", "w", "NX", "XX"]), "-ERR syntax error\r\n");
    assert_eq!(
        r(&["SET", "k", "w", "EX", "0"]),
        "-ERR invalid expire time in 'set' command\r\n"
    );
    assert_eq!(
        r(&["SET", "k", "w", "EX", "x"]),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(
        r(&["GET"]),
        "-ERR wrong number of arguments for 'get' command\r\n"
    );
    assert_eq!(
        r(&["LPUSH", "l", "a"]),
        "-ERR unknown command 'LPUSH', with args beginning with: 'l' 'a' \r\n"
    );
    assert_eq!(r(&["INCR", "n"]), ":1\r\n");
    assert_eq!(r(&["INCRBY", "n", "41"]), ":42\r\n");
    assert_eq!(r(&["DECRBY", "n", "2"]), ":40\r\n");
    assert_eq!(
        r(&["INCR", "k"]),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(r(&["SET", "m", "9223372036854775807"]), "+OK\r\n");
    assert_eq!(
        r(&["INCR", "m"]),
        "-ERR increment or decrement would overflow\r\n"
    );
    assert_eq!(r(&["INCRBYFLOAT", "f", "10.5"]), "$4\r\n10.5\r\n");
    assert_eq!(r(&["INCRBYFLOAT", "f", "0.1"]), "$4\r\n10.6\r\n");
    assert_eq!(r(&["APPEND", "f", "x"]), ":5\r\n");
    assert_eq!(r(&["STRLEN", "f"]), ":5\r\n");
    assert_eq!(
        r(&["MSET", "a", "1", "b"]),
        "-ERR wrong number of arguments for 'mset' command\r\n"
    );
    assert_eq!(r(&["MSET", "a", "1", "b", "2"]), "+OK\r\n");
    assert_eq!(
        r(&["MGET", "a", "x", "b"]),
        "*3\r\n$1\r\n1\r\n$-1\r\n$1\r\n2\r\n"
    );
    assert_eq!(r(&["MSETNX", "a", "3", "c", "4"]), ":0\r\n");
    assert_eq!(r(&["DEL", "a", "b", "zz"]), ":2\r\n");
    assert_eq!(r(&["EXISTS", "k", "k", "a"]), ":2\r\n");
    assert_eq!(r(&["TTL", "k"]), ":-1\r\n");
    assert_eq!(r(&["TTL", "zz"]), ":-2\r\n");
    assert_eq!(r(&["EXPIRE", "k", "100"]), ":1\r\n");
    assert_eq!(r(&["TTL", "k"]), ":100\r\n");
    assert_eq!(r(&["EXPIRE", "k", "50", "GT"]), ":0\r\n");
    assert_eq!(r(&["PERSIST", "k"]), ":1\r\n");
    assert_eq!(r(&["EXPIRE", "k", "-1"]), ":1\r\n");
    assert_eq!(r(&["EXISTS", "k"]), ":0\r\n");
    assert_eq!(r(&["TYPE", "n"]), "+string\r\n");
    assert_eq!(r(&["TYPE", "k"]), "+none\r\n");
    assert_eq!(r(&["SELECT", "1"]), "-ERR DB index is out of range\r\n");
    assert!(r(&["AUTH", "x"]).starts_with("-ERR AUTH <password> called without"));
}

#[test]
fn transactions_queue_abort_and_watch() {
    let db = kura_engine::open("+").unwrap();
    let sh = Shared::new(1, 1 << 20);
    let mut conn = RedisConn::new(&sh, 1);
    let mut ses = Session::default();
    let mut r = |a: &[&str]| run(&*db, &sh, &mut conn, &mut ses, a);
    assert_eq!(r(&["EXEC"]), "-ERR EXEC without MULTI\r\n");
    assert_eq!(r(&["MULTI"]), "+OK\r\n");
    assert_eq!(r(&["MULTI"]), "-ERR MULTI calls can not be nested\r\n");
    assert_eq!(r(&["SET", "a", "1"]), "+QUEUED\r\n");
    assert_eq!(r(&["MSET", "b", "2", "c", "3"]), "+QUEUED\r\n");
    assert_eq!(r(&["EXEC"]), "*2\r\n+OK\r\n+OK\r\n");
    assert_eq!(r(&["MULTI"]), "+OK\r\n");
    assert_eq!(r(&["INCR", "a"]), "+QUEUED\r\n");
    assert_eq!(r(&["GET", "b"]), "+QUEUED\r\n");
    assert_eq!(r(&["EXEC"]), "*2\r\n:2\r\n$1\r\n2\r\n");
    assert_eq!(r(&["MULTI"]), "+OK\r\n");
    assert!(r(&["NOPE"]).starts_with("-ERR unknown command"));
    assert_eq!(
        r(&["EXEC"]),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    assert_eq!(r(&["WATCH", "a"]), "+OK\r\n");
    // Another client writes the key watched.
    db.put(b"a", b"9").unwrap();
    assert_eq!(r(&["MULTI"]), "+OK\r\n");
    assert_eq!(r(&["SET", "a", "1"]), "+QUEUED\r\n");
    assert_eq!(r(&["EXEC"]), "*-1\r\n");
    assert_eq!(r(&["GET", "a"]), "$1\r\n9\r\n");
}

#[test]
fn scan_walks_in_key_order_with_a_prefix_range() {
    let db = kura_engine::open("+").unwrap();
    let sh = Shared::new(1, 1 << 20);
    let mut conn = RedisConn::new(&sh, 1);
    let mut ses = Session::default();
    for k in ["b1", "a1", "b3", "b2", "c1"] {
        db.put(k.as_bytes(), b"x").unwrap();
    }
    let mut r = |a: &[&str]| run(&*db, &sh, &mut conn, &mut ses, a);
    assert_eq!(
        r(&["SCAN", "0", "MATCH", "b*", "COUNT", "2"]),
        "*2\r\n$1\r\n1\r\n*2\r\n$2\r\nb1\r\n$2\r\nb2\r\n"
    );
    // A write meanwhile does not lose the cursor's place.
    db.out(b"b2").unwrap();
    assert_eq!(
        r(&["SCAN", "1", "MATCH", "b*", "COUNT", "2"]),
        "*2\r\n$1\r\n0\r\n*1\r\n$2\r\nb3\r\n"
    );
    assert_eq!(r(&["SCAN", "1"]), "-ERR invalid cursor\r\n");
    assert_eq!(
        r(&["KEYS", "*1"]),
        "*3\r\n$2\r\na1\r\n$2\r\nb1\r\n$2\r\nc1\r\n"
    );
}
