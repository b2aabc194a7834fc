//! Kyoto Tycoon's cursors and `match_similar` through the real `kura serve`, on every kind,
//! over keep-alive HTTP connections, with the calls `ktremotemgr` makes (its `list` is
//! `cur_jump`, then `cur_get` with `step` until a 450, then `cur_delete`; `list -des` is
//! `cur_jump_back`, then `cur_get` and `cur_step_back`), sent as Kyoto Tycoon's `RemoteDB`
//! sends them: a TSV body with the cursor number in `CUR`.

mod common;

use common::Server;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

/// One keep-alive HTTP connection speaking Kyoto Tycoon's TSV-RPC.
struct Rpc {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

/// A procedure's answer: status and output columns (raw or base64, decoded).
struct Answer {
    status: u16,
    cols: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Answer {
    fn col(&self, name: &str) -> Option<&[u8]> {
        self.cols.get(name.as_bytes()).map(Vec::as_slice)
    }
}

fn b64(s: &[u8]) -> Vec<u8> {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    for c in s.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
    out
}

fn unb64(s: &[u8]) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let s: Vec<u8> = s.iter().copied().filter(|&c| c != b'=').collect();
    let mut out = Vec::new();
    for c in s.chunks(4) {
        let mut n = 0u32;
        for (i, &x) in c.iter().enumerate() {
            n |= u32::from(val(x)) << (18 - 6 * i);
        }
        for i in 0..c.len().saturating_sub(1) {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    out
}

impl Rpc {
    fn new(srv: &Server) -> Rpc {
        let w = srv.connect();
        w.set_nodelay(true).unwrap();
        let r = BufReader::new(w.try_clone().unwrap());
        Rpc { w, r }
    }

    /// Call `proc` with these parameters (every column base64, as `RemoteDB` does for
    /// binary data).
    fn call(&mut self, proc: &str, params: &[(&str, &[u8])]) -> Answer {
        let mut body = Vec::new();
        for (n, v) in params {
            body.extend_from_slice(&b64(n.as_bytes()));
            body.push(b'\t');
            body.extend_from_slice(&b64(v));
            body.push(b'\n');
        }
        // One write per request (head and body together), as an HTTP client library sends it.
        let mut req = format!(
            "POST /rpc/{proc} HTTP/1.1\r\nHost: x\r\nContent-Type: text/tab-separated-values; colenc=B\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(&body);
        self.w.write_all(&req).unwrap();
        let mut line = String::new();
        self.r.read_line(&mut line).unwrap();
        let status: u16 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        let (mut len, mut colenc) = (0usize, None);
        loop {
            let mut h = String::new();
            self.r.read_line(&mut h).unwrap();
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (name, value) = h.split_once(':').unwrap();
            match name.to_ascii_lowercase().as_str() {
                "content-length" => len = value.trim().parse().unwrap(),
                "content-type" => colenc = value.split("colenc=").nth(1).map(str::to_string),
                _ => {}
            }
        }
        let mut body = vec![0; len];
        self.r.read_exact(&mut body).unwrap();
        let dec = |c: &[u8]| match colenc.as_deref() {
            Some("B") => unb64(c),
            None => c.to_vec(),
            Some(e) => panic!("colenc {e}"),
        };
        let cols = body
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| {
                let t = l.iter().position(|&b| b == b'\t').unwrap();
                (dec(&l[..t]), dec(&l[t + 1..]))
            })
            .collect();
        Answer { status, cols }
    }

    fn cur(&mut self, proc: &str, cur: u64, more: &[(&str, &[u8])]) -> Answer {
        let id = cur.to_string();
        let mut params = vec![("CUR", id.as_bytes())];
        params.extend_from_slice(more);
        self.call(proc, &params)
    }

    /// `ktremotemgr list [-des] [key]`: every key it prints.
    fn list(&mut self, cur: u64, desc: bool, from: Option<&[u8]>) -> Vec<Vec<u8>> {
        let key: Vec<(&str, &[u8])> = from.map(|k| ("key", k)).into_iter().collect();
        let jump = if desc { "cur_jump_back" } else { "cur_jump" };
        let a = self.cur(jump, cur, &key);
        assert!(a.status == 200 || a.status == 450, "{jump}: {}", a.status);
        let mut keys = Vec::new();
        loop {
            let step: &[(&str, &[u8])] = if desc { &[] } else { &[("step", b"")] };
            let a = self.cur("cur_get", cur, step);
            if a.status == 450 {
                assert_eq!(a.col("ERROR"), Some(&b"DB: 7: no record: no record"[..]));
                break;
            }
            assert_eq!(a.status, 200);
            keys.push(a.col("key").unwrap().to_vec());
            if desc {
                self.cur("cur_step_back", cur, &[]);
            }
        }
        assert_eq!(self.cur("cur_delete", cur, &[]).status, 200);
        keys
    }
}

fn kinds() -> [&'static str; 3] {
    ["*", "+", "c.kh"]
}

fn fill(rpc: &mut Rpc, n: usize) -> Vec<Vec<u8>> {
    let keys: Vec<Vec<u8>> = (0..n).map(|i| format!("key{i:03}").into_bytes()).collect();
    for k in &keys {
        let a = rpc.call("set", &[("key", k), ("value", &[b"v-", &k[..]].concat())]);
        assert_eq!(a.status, 200);
    }
    keys
}

fn sorted(mut v: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    v.sort();
    v
}

#[test]
fn ktremotemgr_list_lists_every_kind() {
    for kind in kinds() {
        let dir = tempfile::tempdir().unwrap();
        let srv = Server::start(dir.path(), kind);
        let mut rpc = Rpc::new(&srv);
        // An empty database: the jump fails with 450, the list is empty.
        assert!(rpc.list(7, false, None).is_empty(), "{kind}");
        let keys = fill(&mut rpc, 150);
        let listed = rpc.list(8_170_013_455_300_123, false, None);
        let ordered = kind == "+";
        if ordered {
            assert_eq!(listed, keys, "{kind}: key order");
        } else {
            assert_eq!(listed.len(), keys.len(), "{kind}: each key once");
            assert_eq!(sorted(listed.clone()), keys, "{kind}");
        }
        // `list KEY`: from that key on (the first key >= it on the tree; the record of the key
        // itself, and the rest of the walk, on a hash).
        let from = rpc.list(9, false, Some(b"key100"));
        if ordered {
            assert_eq!(from, keys[100..], "{kind}");
        } else {
            let at = listed.iter().position(|k| k == b"key100").unwrap();
            assert_eq!(from, listed[at..], "{kind}");
            assert!(rpc.list(9, false, Some(b"nosuch")).is_empty(), "{kind}");
        }
        // `list -des`.
        if ordered {
            let mut rev = keys.clone();
            rev.reverse();
            assert_eq!(rpc.list(10, true, None), rev, "{kind}");
            assert_eq!(rpc.list(11, true, Some(b"key0505")), rev[99..], "{kind}");
        } else {
            let a = rpc.cur("cur_jump_back", 10, &[]);
            assert_eq!(a.status, 501, "{kind}");
            assert_eq!(
                a.col("ERROR"),
                Some(&b"DB: 1: not implemented: not implemented"[..])
            );
        }
    }
}

#[test]
fn cursor_procedures_on_every_kind() {
    for kind in kinds() {
        let dir = tempfile::tempdir().unwrap();
        let srv = Server::start(dir.path(), kind);
        let mut rpc = Rpc::new(&srv);
        let keys = fill(&mut rpc, 20);
        let order = rpc.list(1, false, None);
        // A new cursor is nowhere.
        for p in [
            "cur_get",
            "cur_get_key",
            "cur_get_value",
            "cur_step",
            "cur_remove",
            "cur_seize",
        ] {
            let a = rpc.cur(p, 2, &[]);
            assert_eq!(a.status, 450, "{kind} {p}");
            assert_eq!(a.col("ERROR"), Some(&b"DB: 7: no record: no record"[..]));
        }
        assert_eq!(rpc.cur("cur_set_value", 2, &[("value", b"x")]).status, 450);
        // Without a numeric CUR there is no cursor.
        assert_eq!(rpc.call("cur_jump", &[]).status, 400, "{kind}");
        assert_eq!(
            rpc.call("cur_jump", &[("CUR", b"x1")]).status,
            400,
            "{kind}"
        );
        // Jump, read, step.
        assert_eq!(rpc.cur("cur_jump", 2, &[]).status, 200);
        let a = rpc.cur("cur_get_key", 2, &[]);
        assert_eq!(a.col("key"), Some(&order[0][..]), "{kind}");
        let a = rpc.cur("cur_get_value", 2, &[("step", b"")]);
        assert_eq!(a.col("value"), Some(&[b"v-", &order[0][..]].concat()[..]));
        let a = rpc.cur("cur_get", 2, &[]);
        assert_eq!(a.col("key"), Some(&order[1][..]), "{kind}: stepped");
        assert_eq!(a.col("xt"), None, "{kind}: no expiration, no xt");
        assert_eq!(rpc.cur("cur_step", 2, &[]).status, 200);
        assert_eq!(
            rpc.cur("cur_get_key", 2, &[]).col("key"),
            Some(&order[2][..])
        );
        // set_value: the value, an expiration, and a step.
        let a = rpc.cur(
            "cur_set_value",
            2,
            &[("value", b"new"), ("xt", b"1000"), ("step", b"")],
        );
        assert_eq!(a.status, 200, "{kind}");
        let a = rpc.call("get", &[("key", &order[2])]);
        assert_eq!(a.col("value"), Some(&b"new"[..]), "{kind}");
        assert!(a.col("xt").is_some(), "{kind}: the expiration was set");
        assert_eq!(
            rpc.cur("cur_get_key", 2, &[]).col("key"),
            Some(&order[3][..])
        );
        // remove: the cursor is then on the next record.
        assert_eq!(rpc.cur("cur_remove", 2, &[]).status, 200);
        assert_eq!(rpc.call("get", &[("key", &order[3])]).status, 450);
        assert_eq!(
            rpc.cur("cur_get_key", 2, &[]).col("key"),
            Some(&order[4][..])
        );
        // seize: the record, removed; then on the next one.
        let a = rpc.cur("cur_seize", 2, &[]);
        assert_eq!(a.col("key"), Some(&order[4][..]), "{kind}");
        assert_eq!(a.col("value"), Some(&[b"v-", &order[4][..]].concat()[..]));
        assert_eq!(rpc.call("get", &[("key", &order[4])]).status, 450);
        assert_eq!(
            rpc.cur("cur_get_key", 2, &[]).col("key"),
            Some(&order[5][..])
        );
        // Removed by another client: the cursor is on the next record.
        let mut other = Rpc::new(&srv);
        assert_eq!(other.call("remove", &[("key", &order[5])]).status, 200);
        assert_eq!(
            rpc.cur("cur_get_key", 2, &[]).col("key"),
            Some(&order[6][..])
        );
        // Backward steps: the tree only.
        let back = rpc.cur("cur_step_back", 2, &[]);
        if kind == "+" {
            assert_eq!(back.status, 200);
            assert_eq!(
                rpc.cur("cur_get_key", 2, &[]).col("key"),
                Some(&order[2][..])
            );
        } else {
            assert_eq!(back.status, 501, "{kind}");
        }
        // Off the end: 450, and the cursor is nowhere.
        assert_eq!(rpc.cur("cur_jump", 3, &[("key", &order[19])]).status, 200);
        assert_eq!(rpc.cur("cur_step", 3, &[]).status, 450, "{kind}");
        assert_eq!(rpc.cur("cur_get", 3, &[]).status, 450, "{kind}");
        // A cursor belongs to its connection: number 2 elsewhere is a new cursor, and one
        // deleted (or of a closed connection) is gone.
        assert_eq!(other.cur("cur_get", 2, &[]).status, 450, "{kind}");
        assert_eq!(rpc.cur("cur_delete", 2, &[]).status, 200);
        assert_eq!(rpc.cur("cur_get", 2, &[]).status, 450, "{kind}");
        assert_eq!(rpc.cur("cur_jump", 4, &[]).status, 200);
        drop(rpc);
        let mut again = Rpc::new(&srv);
        assert_eq!(again.cur("cur_get", 4, &[]).status, 450, "{kind}");
        // A request without a connection's cursors (`Connection: close`) still works alone.
        let _ = keys;
    }
}

#[test]
fn match_similar_on_every_kind() {
    for kind in kinds() {
        let dir = tempfile::tempdir().unwrap();
        let srv = Server::start(dir.path(), kind);
        let mut rpc = Rpc::new(&srv);
        for k in [
            "apple",
            "apply",
            "ample",
            "maple",
            "applesauce",
            "äpple",
            "banana",
        ] {
            assert_eq!(
                rpc.call("set", &[("key", k.as_bytes()), ("value", b"1")])
                    .status,
                200
            );
        }
        let ranked = |a: &Answer| {
            let mut v: Vec<(usize, String)> = a
                .cols
                .iter()
                .filter(|(k, _)| k.first() == Some(&b'_'))
                .map(|(k, v)| {
                    let rank = String::from_utf8_lossy(v).parse().unwrap();
                    (rank, String::from_utf8_lossy(&k[1..]).into_owned())
                })
                .collect();
            v.sort();
            v.into_iter().map(|(_, k)| k).collect::<Vec<_>>()
        };
        // Default range 1, bytes: "äpple" is two byte edits away.
        let a = rpc.call("match_similar", &[("origin", b"apple")]);
        assert_eq!(a.status, 200, "{kind}");
        assert_eq!(ranked(&a), ["apple", "ample", "apply"], "{kind}");
        assert_eq!(a.col("num"), Some(&b"3"[..]));
        // Characters: one edit.
        let a = rpc.call("match_similar", &[("origin", b"apple"), ("utf", b"1")]);
        assert_eq!(ranked(&a), ["apple", "ample", "apply", "äpple"], "{kind}");
        // Range 2, at most 4: nearest first, then by key.
        let a = rpc.call(
            "match_similar",
            &[("origin", b"apple"), ("range", b"2"), ("max", b"4")],
        );
        assert_eq!(ranked(&a), ["apple", "ample", "apply", "maple"], "{kind}");
        assert_eq!(rpc.call("match_similar", &[]).status, 400, "{kind}");
    }
}

/// A cursor forgot the way it went: on a `.kb`, `cur_jump_back k2x` then `cur_get` with
/// `step` walked `k2, k3, k4`, and after `cur_step_back` to `k1`, `cur_seize` took `k1` and a
/// second one `k3`. ktserver's cursors keep the direction of their last jump or step:
/// `cur_get … step`, `cur_seize` and `cur_remove` move that way. On a hash, where the
/// backward moves are refused (501), a cursor goes forward.
#[test]
fn a_cursor_keeps_the_direction_of_its_last_jump_or_step() {
    for kind in ["c.kb", "+", "c.kh"] {
        let dir = tempfile::tempdir().unwrap();
        let srv = Server::start(dir.path(), kind);
        let mut rpc = Rpc::new(&srv);
        for k in ["k1", "k2", "k3", "k4"] {
            let a = rpc.call("set", &[("key", k.as_bytes()), ("value", b"v")]);
            assert_eq!(a.status, 200);
        }
        let key_of = |a: &Answer| {
            a.col("key")
                .map(|k| String::from_utf8_lossy(k).into_owned())
        };
        assert_eq!(rpc.cur("cur_jump", 1, &[("key", b"k2")]).status, 200);
        if kind == "c.kh" {
            assert_eq!(rpc.cur("cur_jump_back", 1, &[("key", b"k2x")]).status, 501);
            assert_eq!(rpc.cur("cur_step_back", 1, &[]).status, 501);
            let a = rpc.cur("cur_seize", 1, &[]);
            assert_eq!(key_of(&a).as_deref(), Some("k2"), "{kind}");
            // Forward in the hash's order: never k2 again.
            let a = rpc.cur("cur_get", 1, &[]);
            assert_ne!(key_of(&a).as_deref(), Some("k2"), "{kind}");
            continue;
        }
        assert_eq!(rpc.cur("cur_jump_back", 1, &[("key", b"k2x")]).status, 200);
        let mut walked = Vec::new();
        loop {
            let a = rpc.cur("cur_get", 1, &[("step", b"")]);
            if a.status == 450 {
                break;
            }
            assert_eq!(a.status, 200, "{kind}");
            walked.extend(key_of(&a));
        }
        assert_eq!(walked, ["k2", "k1"], "{kind}");
        // Back to k1 with a step back: a seize takes it, and nothing is before it.
        assert_eq!(rpc.cur("cur_jump", 1, &[("key", b"k2")]).status, 200);
        assert_eq!(rpc.cur("cur_step_back", 1, &[]).status, 200);
        assert_eq!(key_of(&rpc.cur("cur_seize", 1, &[])).as_deref(), Some("k1"));
        let a = rpc.cur("cur_seize", 1, &[]);
        assert_eq!(a.status, 450, "{kind}: nothing before k1");
        assert_eq!(a.col("ERROR"), Some(&b"DB: 7: no record: no record"[..]));
        // cur_remove after a backward jump leaves the cursor on the previous record.
        assert_eq!(rpc.cur("cur_jump_back", 1, &[("key", b"k3")]).status, 200);
        assert_eq!(rpc.cur("cur_remove", 1, &[]).status, 200);
        assert_eq!(key_of(&rpc.cur("cur_get", 1, &[])).as_deref(), Some("k2"));
        // A step forward turns it round: a seize then moves on to the next record.
        assert_eq!(rpc.cur("cur_step", 1, &[]).status, 200);
        assert_eq!(key_of(&rpc.cur("cur_seize", 1, &[])).as_deref(), Some("k4"));
        assert_eq!(rpc.cur("cur_get", 1, &[]).status, 450, "{kind}");
    }
}
