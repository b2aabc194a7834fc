//! The table database (`PATH.kt`) over the real `kura serve`: Tyrant's table `misc`
//! functions with their wire forms, binary put/get of a record's wire form (an empty key takes
//! a unique id), iteration, Tyrant's REST, and replication of table writes.

mod common;

use common::tt_call as call;

use common::{converge, free_port, serve, Server, Tt};
use kura_proto::tt_bin::{Reply, Request};
use std::io::{Read, Write};
use std::net::TcpStream;

fn misc_opts(s: &mut TcpStream, name: &[u8], opts: u32, args: &[&[u8]]) -> Reply {
    call(
        s,
        &Request::Misc {
            name,
            opts,
            args: args.to_vec(),
        },
    )
}

fn misc(s: &mut TcpStream, name: &[u8], args: &[&[u8]]) -> Reply {
    misc_opts(s, name, 0, args)
}

fn list(items: &[&[u8]]) -> Reply {
    Reply::List(items.iter().map(|i| i.to_vec()).collect())
}

/// Misc's failure form `[1][0]`.
const FAILED: Reply = Reply::Code(1);

#[test]
fn table_misc_functions_answer_with_tyrants_wire_forms() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "t.kt");
    let mut s = srv.connect();
    // put [pk, n1, v1, …]; get [pk] → [n1, v1, …] in the record's order.
    assert_eq!(
        misc(&mut s, b"put", &[b"1", b"name", b"alice", b"age", b"30"]),
        list(&[])
    );
    assert_eq!(
        misc(&mut s, b"get", &[b"1"]),
        list(&[b"name", b"alice", b"age", b"30"])
    );
    // putkeep fails on an existing record and changes nothing; works on a new one.
    assert_eq!(misc(&mut s, b"putkeep", &[b"1", b"name", b"bob"]), FAILED);
    assert_eq!(
        misc(&mut s, b"putkeep", &[b"2", b"name", b"bob"]),
        list(&[])
    );
    // putcat adds the columns the record does not have; its own keep their values
    // (tctdbputcat).
    assert_eq!(
        misc(
            &mut s,
            b"putcat",
            &[b"1", b"name", b"zed", b"city", b"oslo"]
        ),
        list(&[])
    );
    assert_eq!(
        misc(&mut s, b"get", &[b"1"]),
        list(&[b"name", b"alice", b"age", b"30", b"city", b"oslo"])
    );
    // A put replaces the whole record; an odd last name is ignored, as tcadbmisc does.
    assert_eq!(
        misc(&mut s, b"put", &[b"1", b"name", b"al", b"dangling"]),
        list(&[])
    );
    assert_eq!(misc(&mut s, b"get", &[b"1"]), list(&[b"name", b"al"]));
    // With RDBMONOULOG (opts bit 0) the same.
    assert_eq!(
        misc_opts(&mut s, b"put", 1, &[b"3", b"name", b"carol"]),
        list(&[])
    );
    assert_eq!(
        misc_opts(&mut s, b"get", 1, &[b"3"]),
        list(&[b"name", b"carol"])
    );
    // out [pk]: failure when there is no record.
    assert_eq!(misc(&mut s, b"out", &[b"3"]), list(&[]));
    assert_eq!(misc(&mut s, b"out", &[b"3"]), FAILED);
    assert_eq!(misc(&mut s, b"get", &[b"3"]), FAILED);
    // Missing arguments and a column with an empty name fail; nothing is stored.
    assert_eq!(misc(&mut s, b"put", &[]), FAILED);
    assert_eq!(misc(&mut s, b"get", &[]), FAILED);
    assert_eq!(misc(&mut s, b"put", &[b"4", b"", b"x"]), FAILED);
    assert_eq!(misc(&mut s, b"get", &[b"4"]), FAILED);
    // setindex [col, type]: names, numbers, keep and void, as tctdbstrtoindextype reads them.
    assert_eq!(misc(&mut s, b"setindex", &[b"name", b"lexical"]), list(&[]));
    assert_eq!(misc(&mut s, b"setindex", &[b"age", b"1"]), list(&[]));
    // keep on an indexed column fails; an unknown type fails; void drops, twice fails.
    assert_eq!(misc(&mut s, b"setindex", &[b"name", b"+lex"]), FAILED);
    assert_eq!(misc(&mut s, b"setindex", &[b"name", b"bogus"]), FAILED);
    assert_eq!(misc(&mut s, b"setindex", &[b"age", b"void"]), list(&[]));
    assert_eq!(misc(&mut s, b"setindex", &[b"age", b"9999"]), FAILED);
    assert_eq!(
        misc(&mut s, b"setindex", &[b"age", b"dec", b"city", b"qgram"]),
        list(&[])
    );
    // genuid: increasing decimal ids.
    let uid = |s: &mut TcpStream| match misc(s, b"genuid", &[]) {
        Reply::List(l) if l.len() == 1 => String::from_utf8(l[0].clone())
            .unwrap()
            .parse::<u64>()
            .unwrap(),
        r => panic!("genuid: {r:?}"),
    };
    let (a, b) = (uid(&mut s), uid(&mut s));
    assert!(b > a && a >= 1, "{a} {b}");
    // search: Tyrant's commands, one an argument; primary keys, records, count, hint.
    assert_eq!(
        misc(&mut s, b"search", &[b"addcond\0name\0STREQ\0al"]),
        list(&[b"1"])
    );
    assert_eq!(
        misc(
            &mut s,
            b"search",
            &[b"setorder\0name\0STRDESC", b"get\0name"]
        ),
        list(&[b"name\0bob", b"name\0al"])
    );
    assert_eq!(
        misc_opts(
            &mut s,
            b"search",
            1,
            &[b"addcond\0name\0STRBW\0a", b"count"]
        ),
        list(&[b"1"])
    );
    match misc(&mut s, b"search", &[b"addcond\0name\0STREQ\0bob", b"hint"]) {
        Reply::List(l) => {
            assert_eq!(l[0], b"2");
            assert!(l[1].starts_with(b"\0\0[[HINT]]\n"), "{l:?}");
        }
        r => panic!("search hint: {r:?}"),
    }
    // metasearch: a union of two queries, ordered as the first asks.
    assert_eq!(
        misc(
            &mut s,
            b"metasearch",
            &[
                b"addcond\0name\0STREQ\0al",
                b"setorder\0\0STRDESC",
                b"next",
                b"addcond\0name\0STREQ\0bob",
                b"mstype\0UNION",
            ]
        ),
        list(&[b"2", b"1"])
    );
    // A command or operator it cannot read: the failure form; the connection goes on, and
    // `misc error` says why.
    assert_eq!(
        misc(&mut s, b"search", &[b"addcond\0name\0BOGUS\0al"]),
        FAILED
    );
    assert_eq!(misc(&mut s, b"search", &[b"frobnicate"]), FAILED);
    match misc(&mut s, b"error", &[]) {
        Reply::List(l) => assert!(
            String::from_utf8_lossy(&l[0]).contains("frobnicate"),
            "{l:?}"
        ),
        r => panic!("error: {r:?}"),
    }
    // The generic functions see the records' wire forms: getlist, iternext.
    assert_eq!(
        misc(&mut s, b"getlist", &[b"1", b"2"]),
        list(&[b"1", b"name\0al", b"2", b"name\0bob"])
    );
    assert_eq!(misc(&mut s, b"iterinit", &[]), list(&[]));
    assert_eq!(misc(&mut s, b"iternext", &[]), list(&[b"1", b"name\0al"]));
    assert_eq!(misc(&mut s, b"iternext", &[]), list(&[b"2", b"name\0bob"]));
    assert_eq!(misc(&mut s, b"iternext", &[]), FAILED);
    // The connection still answers after every failure.
    assert_eq!(misc(&mut s, b"get", &[b"2"]), list(&[b"name", b"bob"]));
}

#[test]
fn binary_put_and_get_carry_a_tables_wire_form() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "t.kt");
    let mut t = Tt::new(&srv.addr);
    assert_eq!(t.put(b"k", b"a\x001\0b\x002"), 0);
    assert_eq!(t.get(b"k").unwrap(), b"a\x001\0b\x002");
    // putcat adds the columns the record does not have (tctdbputcat2).
    assert_eq!(t.putcat(b"k", b"a\x009\0c\x003"), 0);
    assert_eq!(t.get(b"k").unwrap(), b"a\x001\0b\x002\0c\x003");
    let mut s = srv.connect();
    assert_eq!(
        misc(&mut s, b"get", &[b"k"]),
        list(&[b"a", b"1", b"b", b"2", b"c", b"3"])
    );
    // A value that is not name\0value pairs is refused and stores nothing.
    assert_eq!(t.put(b"bad", b"odd\0fields\0count"), 1);
    assert_eq!(t.get(b"bad"), None);
    // An empty key takes a unique id (tcadbput on a table).
    assert_eq!(t.put(b"", b"n\0new"), 0);
    assert_eq!(t.put(b"", b"n\0newer"), 0);
    let keys = t.keys();
    assert_eq!(keys.len(), 3, "{keys:?}");
    let ids: Vec<u64> = keys
        .iter()
        .filter(|k| k.as_slice() != b"k")
        .map(|k| std::str::from_utf8(k).unwrap().parse().unwrap())
        .collect();
    assert_eq!(ids.len(), 2);
    let mut by_id: Vec<_> = ids
        .iter()
        .map(|i| (i, t.get(i.to_string().as_bytes()).unwrap()))
        .collect();
    by_id.sort();
    assert_eq!(by_id[0].1, b"n\0new");
    assert_eq!(by_id[1].1, b"n\0newer");
    // iterinit / iternext walk the primary keys.
    assert_eq!(call(&mut s, &Request::IterInit), Reply::Code(0));
    let mut seen = Vec::new();
    while let Reply::Value(k) = call(&mut s, &Request::IterNext) {
        seen.push(k);
    }
    seen.sort();
    let mut want = keys.clone();
    want.sort();
    assert_eq!(seen, want);
    assert_eq!(t.out(b"k"), 0);
    assert_eq!(t.out(b"k"), 1);
}

fn exchange(srv: &Server, raw: &[u8]) -> Vec<u8> {
    let mut s = srv.connect();
    s.write_all(raw).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

fn status(resp: &[u8]) -> u16 {
    String::from_utf8_lossy(resp)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

fn body(resp: &[u8]) -> &[u8] {
    let at = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    &resp[at + 4..]
}

#[test]
fn tyrants_rest_puts_gets_and_deletes_a_table_record() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "t.kt");
    let put = |path: &str, mode: Option<u8>, v: &[u8]| {
        let mut r = format!("PUT /{path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
        if let Some(m) = mode {
            r.push_str(&format!("X-TT-PDMODE: {m}\r\n"));
        }
        r.push_str(&format!("Content-Length: {}\r\n\r\n", v.len()));
        let mut raw = r.into_bytes();
        raw.extend_from_slice(v);
        status(&exchange(&srv, &raw))
    };
    let get = |path: &str| {
        exchange(
            &srv,
            format!("GET /{path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
    };
    assert_eq!(put("u%201", None, b"name\0alice\0age\x0030"), 201);
    let r = get("u%201");
    assert_eq!(status(&r), 200);
    assert_eq!(body(&r), b"name\0alice\0age\x0030");
    // Keep (409 on an existing record), cat (merges columns).
    assert_eq!(put("u%201", Some(1), b"name\0bob"), 409);
    assert_eq!(put("u%201", Some(2), b"city\0oslo"), 201);
    assert_eq!(body(&get("u%201")), b"name\0alice\0age\x0030\0city\0oslo");
    // A value that is not a record is refused, and the record is unchanged.
    assert_ne!(put("u%201", None, b"odd"), 201);
    assert_eq!(body(&get("u%201")), b"name\0alice\0age\x0030\0city\0oslo");
    // The misc functions through POST (X-TT-MNAME) see the columns.
    let mut s = srv.connect();
    assert_eq!(
        misc(&mut s, b"get", &[b"u 1"]),
        list(&[b"name", b"alice", b"age", b"30", b"city", b"oslo"])
    );
    // misc over POST (X-TT-MNAME): setindex, genuid.
    let post = |name: &str, form: &str| {
        exchange(
            &srv,
            format!(
                "POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-TT-MNAME: {name}\r\n\
                 Content-Type: application/x-www-form-urlencoded\r\n\
                 Content-Length: {}\r\n\r\n{form}",
                form.len()
            )
            .as_bytes(),
        )
    };
    assert_eq!(status(&post("setindex", "a=name&b=lexical")), 200);
    assert_eq!(status(&post("setindex", "a=name&b=bogus")), 500);
    let r = post("genuid", "");
    assert_eq!(status(&r), 200);
    assert!(
        body(&r).starts_with(b"res1="),
        "{}",
        String::from_utf8_lossy(&r)
    );
    let del = exchange(
        &srv,
        b"DELETE /u%201 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status(&del), 200);
    assert_eq!(status(&get("u%201")), 404);
}

/// REST's PUT with an empty path on a table takes a unique id as the key, as Tyrant's
/// `do_http_put` does (`tcadbput` on a table: an empty key is `tctdbgenuid`), each PUT a new
/// record; the binary put does the same.
#[test]
fn rest_put_with_an_empty_path_takes_a_unique_id() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "t.kt");
    let put = |v: &[u8]| {
        let mut raw = format!(
            "PUT / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
            v.len()
        )
        .into_bytes();
        raw.extend_from_slice(v);
        status(&exchange(&srv, &raw))
    };
    assert_eq!(put(b"name\0first"), 201);
    assert_eq!(put(b"name\0second"), 201);
    let mut t = Tt::new(&srv.addr);
    assert_eq!(t.put(b"", b"name\0third"), 0);
    // A value that is not a record is refused and takes no id's record.
    assert_ne!(put(b"odd"), 201);
    let mut keys: Vec<u64> = t
        .keys()
        .iter()
        .map(|k| std::str::from_utf8(k).unwrap().parse().unwrap())
        .collect();
    keys.sort();
    assert_eq!(keys.len(), 3, "{keys:?}");
    assert!(keys.windows(2).all(|w| w[0] < w[1]));
    let values: Vec<Vec<u8>> = keys
        .iter()
        .map(|k| t.get(k.to_string().as_bytes()).unwrap())
        .collect();
    assert_eq!(
        values,
        [&b"name\0first"[..], b"name\0second", b"name\0third"]
    );
    // No record under the empty key.
    assert_eq!(t.get(b""), None);
}

/// Table writes over the wire go through the update log and replicate; indexes are each
/// server's own: a read-only replica takes a `setindex` (it changes no record) and indexes
/// what it receives.
#[test]
fn table_writes_replicate_and_a_replica_takes_its_own_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let mp = free_port().to_string();
    let master = serve(
        dir.path(),
        &["m.kt", "--port", &mp, "--sid", "1", "--ulog", "mlog"],
    );
    let mut m = master.connect();
    assert_eq!(
        misc(&mut m, b"put", &[b"a", b"n", b"1", b"w", b"x"]),
        list(&[])
    );
    let master_at = format!("127.0.0.1:{mp}");
    let replica = serve(
        dir.path(),
        &["r.kt", "--port", "0", "--sid", "2", "--master", &master_at],
    );
    let mut r = replica.connect();
    assert_eq!(misc(&mut r, b"setindex", &[b"n", b"decimal"]), list(&[]));
    // The replica refuses record writes from clients.
    assert_eq!(misc(&mut r, b"put", &[b"z", b"n", b"9"]), FAILED);
    assert_eq!(
        misc(&mut m, b"putcat", &[b"a", b"n", b"2", b"v", b"y"]),
        list(&[])
    );
    assert_eq!(misc_opts(&mut m, b"put", 1, &[b"b", b"n", b"3"]), list(&[]));
    assert_eq!(misc(&mut m, b"putkeep", &[b"c", b"n", b"4"]), list(&[]));
    assert_eq!(misc(&mut m, b"out", &[b"c"]), list(&[]));
    let mut t = Tt::new(&master.addr);
    assert_eq!(t.put(b"d", b"n\x005"), 0);
    assert_eq!(t.put(b"e", b"n\x006"), 0);
    // search … out on the master reaches the replica (logged as the removes it made).
    assert_eq!(
        misc(&mut m, b"search", &[b"addcond\0n\0NUMGE\x006", b"out"]),
        list(&[])
    );
    converge(&master.addr, &replica.addr, 20);
    assert_eq!(misc(&mut r, b"get", &[b"e"]), FAILED);
    // A read-only replica answers a search, and refuses one that removes.
    assert_eq!(
        misc(&mut r, b"search", &[b"addcond\0n\0NUMGE\x002", b"count"]),
        list(&[b"2"])
    );
    assert_eq!(
        misc(&mut r, b"search", &[b"addcond\0n\0NUMGE\x002", b"out"]),
        FAILED
    );
    assert_eq!(
        misc(&mut r, b"get", &[b"a"]),
        list(&[b"n", b"1", b"w", b"x", b"v", b"y"])
    );
    assert_eq!(misc(&mut r, b"get", &[b"c"]), FAILED);
    // Stopped cleanly: a SIGKILL may lose what the default sync mode had not yet handed to the
    // OS (a replica fetches it again from its durable position).
    drop(r);
    let mut replica = replica;
    assert!(replica.signal(libc::SIGTERM).success());
    // The replica has its index, and it agrees with the records (`check` verifies indexes).
    let kura = |cmd: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kura"))
            .args(["db", cmd])
            .arg(dir.path().join("r.kt"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let info = kura("inform");
    assert!(info.contains("indexes: n:dec"), "{info}");
    assert!(info.contains("records: 3"), "{info}");
    kura("check");
}

/// `kura remote misc` (tcrmgr's misc) drives a table: put, get (one element a line), setindex,
/// genuid, out, and a failure's status.
#[test]
fn kura_remote_misc_drives_a_table() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "t.kt");
    let remote = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_kura"))
            .args(["remote", "--port", common::port_of(&srv.addr), "misc"])
            .args(args)
            .output()
            .unwrap()
    };
    let out = |args: &[&str]| {
        let o = remote(args);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    assert_eq!(out(&["put", "1", "name", "alice", "age", "30"]), "");
    assert_eq!(out(&["get", "1"]), "name\nalice\nage\n30\n");
    assert_eq!(out(&["setindex", "name", "lexical"]), "");
    assert_eq!(out(&["--no-ulog", "putcat", "1", "city", "oslo"]), "");
    assert_eq!(out(&["get", "1"]), "name\nalice\nage\n30\ncity\noslo\n");
    assert!(out(&["genuid"]).trim_end().parse::<u64>().is_ok());
    assert_eq!(out(&["out", "1"]), "");
    assert_eq!(remote(&["get", "1"]).status.code(), Some(1));
    assert_eq!(
        remote(&["setindex", "name", "bogus"]).status.code(),
        Some(1)
    );
    // `tctmgr list -pv` output imports through the server.
    let import = |input: &[u8]| {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kura"))
            .args(["remote", "--port", common::port_of(&srv.addr)])
            .args(["import", "--format", "raw"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        child.wait_with_output().unwrap()
    };
    let o = import(b"u1\tname\tbob\tage\t40\nu2\n");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(out(&["get", "u1"]), "name\nbob\nage\n40\n");
    assert_eq!(out(&["get", "u2"]), "");
    // A line whose columns do not pair up: refused, nothing sent.
    let o = import(b"u3\tname\tcarl\nu4\tname\n");
    assert!(!o.status.success());
    assert_eq!(remote(&["get", "u3"]).status.code(), Some(1));
}

/// `kura remote search` (tcrmgr's search) on a table server: conditions, order and limit,
/// records, count, hint, remove; a bad operator is status 1 with the server's reason.
#[test]
fn kura_remote_search_queries_a_table() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "t.kt");
    let mut s = srv.connect();
    for (pk, name, age) in [("1", "alice", "30"), ("2", "bob", "25"), ("3", "al", "41")] {
        assert_eq!(
            misc(
                &mut s,
                b"put",
                &[
                    pk.as_bytes(),
                    b"name",
                    name.as_bytes(),
                    b"age",
                    age.as_bytes()
                ]
            ),
            list(&[])
        );
    }
    let remote = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_kura"))
            .args(["remote", "--port", common::port_of(&srv.addr), "search"])
            .args(args)
            .output()
            .unwrap()
    };
    let out = |args: &[&str]| {
        let o = remote(args);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    assert_eq!(out(&["name", "STRBW", "al"]), "1\n3\n");
    assert_eq!(
        out(&["--ord", "age", "NUMDESC", "-m", "2", "--pv"]),
        "3\tname\tal\tage\t41\n1\tname\talice\tage\t30\n"
    );
    assert_eq!(
        out(&["--column", "age", "--", "name", "STREQ", "bob"]),
        "2\tage\t25\n"
    );
    assert_eq!(out(&["-c", "age", "NUMGE", "30"]), "2\n");
    let hint = out(&["--hint", "name", "STREQ", "bob"]);
    assert!(hint.starts_with("2\n\t:::: "), "{hint}");
    assert_eq!(
        out(&["--ms", "UNION", "name", "STREQ", "bob", "age", "NUMEQ", "41"]),
        "2\n3\n"
    );
    assert_eq!(out(&["--out", "age", "NUMLT", "35"]), "");
    assert_eq!(out(&[]), "3\n");
    let o = remote(&["name", "BOGUS", "x"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("operator"), "{err}");
}

/// Kura's JSON query endpoint, `POST /_query`, through the real server: conditions, order,
/// limit and skip, chosen columns, count, hint; bad JSON and bad queries are 400 with the
/// reason; a database that is not a table is 400.
#[test]
fn json_query_endpoint_answers_records_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "t.kt");
    let mut s = srv.connect();
    for (pk, name, age) in [("1", "alice", "30"), ("2", "bob", "25"), ("3", "al", "41")] {
        assert_eq!(
            misc(
                &mut s,
                b"put",
                &[
                    pk.as_bytes(),
                    b"name",
                    name.as_bytes(),
                    b"age",
                    age.as_bytes()
                ]
            ),
            list(&[])
        );
    }
    let post = |srv: &Server, json: &str| {
        let raw = format!(
            "POST /_query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{json}",
            json.len()
        );
        let resp = exchange(srv, raw.as_bytes());
        (
            status(&resp),
            String::from_utf8_lossy(body(&resp)).into_owned(),
        )
    };
    let (st, b) = post(
        &srv,
        r#"{"conditions": [{"column": "name", "op": "STRBW", "expr": "al"}],
            "order": {"column": "age", "type": "NUMDESC"}}"#,
    );
    assert_eq!(st, 200, "{b}");
    assert_eq!(
        b,
        "{\"records\":[{\"columns\":{\"age\":\"41\",\"name\":\"al\"},\"key\":\"3\"},\
         {\"columns\":{\"age\":\"30\",\"name\":\"alice\"},\"key\":\"1\"}]}\n"
    );
    let (st, b) = post(
        &srv,
        r#"{"order": {"column": "", "type": "STRASC"}, "limit": 1, "skip": 1,
            "columns": ["age"]}"#,
    );
    assert_eq!(
        (st, b.as_str()),
        (
            200,
            "{\"records\":[{\"columns\":{\"age\":\"25\"},\"key\":\"2\"}]}\n"
        )
    );
    let (st, b) = post(
        &srv,
        r#"{"conditions": [{"column": "age", "op": "NUMLT", "expr": 35, "negate": true}],
            "count": true, "hint": true}"#,
    );
    assert_eq!(st, 200, "{b}");
    assert!(b.starts_with("{\"count\":1,\"hint\":\""), "{b}");
    // Bad requests: the reason, nothing changed.
    let (st, b) = post(&srv, "{\"conditions\": [");
    assert_eq!(st, 400);
    assert!(b.contains("not valid JSON"), "{b}");
    let (st, b) = post(
        &srv,
        r#"{"conditions": [{"column": "age", "op": "BOGUS", "expr": "1"}]}"#,
    );
    assert_eq!(st, 400);
    assert!(b.contains("operator"), "{b}");
    let (st, b) = post(&srv, r#"{"limit": "ten"}"#);
    assert_eq!(st, 400);
    assert!(b.contains("`limit`"), "{b}");
    assert_eq!(misc(&mut s, b"search", &[b"count"]), list(&[b"3"]));
    // On a database that is not a table.
    let hash = Server::start(dir.path(), "h.kh");
    let (st, b) = post(&hash, "{}");
    assert_eq!(st, 400);
    assert!(b.contains("table"), "{b}");
}

/// `kura db` on a table a server holds cannot open it (the server writes it): `search`, as
/// the other commands, says so and gives the same command through the server
/// (`kura remote search`, with the port), which does what was asked.
#[test]
fn kura_db_search_on_a_held_table_points_at_kura_remote_search() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let port = port.as_str();
    let srv = serve(dir.path(), &["t.kt", "--port", port]);
    let mut t = Tt::new(&srv.addr);
    assert_eq!(t.put(b"1", b"name\0alice\0age\x0030"), 0);
    assert_eq!(t.put(b"2", b"name\0bob\0age\x0025"), 0);
    let kura = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_kura"))
            .current_dir(dir.path())
            .args(args)
            .output()
            .unwrap()
    };
    for (args, same) in [
        (
            &["search", "t.kt", "name", "STREQ", "alice", "--count"][..],
            "search --count name STREQ alice",
        ),
        (
            &[
                "search", "t.kt", "--ord", "age", "NUMASC", "-m", "1", "--pv",
            ],
            "search --ord age NUMASC --max 1 --pv",
        ),
        (
            &["search", "--out", "t.kt", "--", "age", "NUMLT", "-1"],
            "search --out -- age NUMLT -1",
        ),
        (
            &["setindex", "t.kt", "name", "lexical"],
            "misc setindex name lexical",
        ),
        (
            &["put", "t.kt", "3", "name", "carl"],
            "misc put 3 name carl",
        ),
    ] {
        let o = kura(&[&["db"], args].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("already open by another process") && err.contains("kura serve"),
            "{args:?}: {err}"
        );
        let want = format!("`kura remote --port {port} {same}`");
        assert!(err.contains(&want), "{args:?}: {err}");
    }
    // The commands named run as they are.
    let remote = |args: &[&str]| {
        let o = kura(&[&["remote", "--port", port][..], args].concat());
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    assert_eq!(
        remote(&["search", "--count", "name", "STREQ", "alice"]),
        "1\n"
    );
    assert_eq!(
        remote(&["search", "--ord", "age", "NUMASC", "--max", "1", "--pv"]),
        "2\tname\tbob\tage\t25\n"
    );
    assert_eq!(remote(&["search", "--out", "--", "age", "NUMLT", "-1"]), "");
    assert_eq!(t.keys().len(), 2);
}
