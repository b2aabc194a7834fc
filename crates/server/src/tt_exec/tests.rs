//! The Tyrant executor through the codec both ways, on every kind.

use super::*;
use crate::mask::Mask;
use kura_proto::tt_bin::{
    decode, decode_reply, encode_request, Decoded, DecodedReply, Limits, Reply,
};
use std::path::PathBuf;

/// A client of one connection: every request goes through the codec both ways.
struct Client<'s> {
    db: &'s dyn Store,
    sh: Shared,
    st: TtState<'s>,
}

impl<'s> Client<'s> {
    fn new(db: &'s dyn Store) -> Client<'s> {
        Client {
            db,
            sh: Shared::new(0, 1 << 20),
            st: TtState::new(),
        }
    }

    /// The raw reply bytes and what the connection does next.
    fn raw(&mut self, req: &Request<'_>) -> (Vec<u8>, Next) {
        let mut wire = Vec::new();
        encode_request(req, &mut wire);
        let Ok(Decoded::Complete { request, consumed }) = decode(&wire, &Limits::default()) else {
            panic!("{req:?} does not decode");
        };
        assert_eq!(consumed, wire.len());
        let mut out = Vec::new();
        let next = execute(
            self.db,
            &self.sh,
            &mut self.st,
            &request,
            1_000_000,
            &mut out,
        );
        (out, next)
    }

    /// Exactly one well-formed reply of the request's command, decoded.
    fn call(&mut self, req: &Request<'_>) -> (Reply, Next) {
        let (out, next) = self.raw(req);
        if next == Next::Close {
            assert!(out.is_empty());
            return (Reply::None, next);
        }
        match decode_reply(req.cmd(), &out) {
            Ok(DecodedReply::Complete { reply, consumed }) => {
                assert_eq!(consumed, out.len(), "{req:?}: trailing bytes in {out:?}");
                (reply, next)
            }
            other => panic!("{req:?}: {other:?} from {out:?}"),
        }
    }

    fn r(&mut self, req: Request<'_>) -> Reply {
        let (reply, next) = self.call(&req);
        assert_eq!(next, Next::Continue);
        reply
    }

    fn misc(&mut self, name: &[u8], args: &[&[u8]]) -> Reply {
        self.r(Request::Misc {
            name,
            opts: 1,
            args: args.to_vec(),
        })
    }

    fn int(&mut self, key: &[u8], num: i32) -> Reply {
        self.r(Request::AddInt { key, num })
    }

    fn dbl(&mut self, key: &[u8], x: f64) -> Reply {
        let (integ, fract) = tt_bin::pack_double(x);
        self.r(Request::AddDouble { key, integ, fract })
    }
}

fn list(items: &[&[u8]]) -> Reply {
    Reply::List(items.iter().map(|i| i.to_vec()).collect())
}

const OK_: Reply = Reply::Code(0);
const FAIL_: Reply = Reply::Code(1);

struct TempDir(PathBuf);
impl TempDir {
    fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "kura-tt-exec-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run `f` on every kind: memory hash, memory tree, and a disk hash and a disk B+ tree in a
/// temporary directory.
fn each_kind(f: impl Fn(&dyn Store, &str)) {
    for name in ["*", "+"] {
        let db = kura_engine::open(name).unwrap();
        f(&*db, name);
    }
    for suffix in [".kh", ".kb"] {
        let dir = TempDir::new("kind");
        let name = dir.0.join(format!("t{suffix}"));
        let db = kura_engine::open(name.to_str().unwrap()).unwrap();
        f(&*db, suffix);
        db.close().unwrap();
    }
}

#[test]
fn record_commands_on_every_kind() {
    each_kind(|db, kind| {
        let mut c = Client::new(db);
        macro_rules! is {
            ($req:expr, $want:expr) => {
                assert_eq!(c.r($req), $want, "{kind}: {}", stringify!($req))
            };
        }
        is!(
            Request::Put {
                key: b"a\0b",
                value: b"1"
            },
            OK_
        );
        is!(
            Request::Put {
                key: b"a\0b",
                value: b"v\r\n"
            },
            OK_
        );
        is!(
            Request::Get { key: b"a\0b" },
            Reply::Value(b"v\r\n".to_vec())
        );
        is!(Request::Get { key: b"a" }, FAIL_);
        is!(
            Request::PutKeep {
                key: b"a\0b",
                value: b"x"
            },
            FAIL_
        );
        is!(
            Request::PutKeep {
                key: b"k",
                value: b"x"
            },
            OK_
        );
        is!(
            Request::PutCat {
                key: b"k",
                value: b"yz"
            },
            OK_
        );
        is!(
            Request::PutCat {
                key: b"new",
                value: b"n"
            },
            OK_
        );
        is!(Request::Get { key: b"k" }, Reply::Value(b"xyz".to_vec()));
        is!(
            Request::PutShl {
                key: b"k",
                value: b"1234",
                width: 5
            },
            OK_
        );
        is!(Request::Get { key: b"k" }, Reply::Value(b"z1234".to_vec()));
        is!(
            Request::PutShl {
                key: b"s",
                value: b"abcdef",
                width: 2
            },
            OK_
        );
        // An absent record gets the whole value, as in Tyrant; then the shift applies.
        is!(Request::Get { key: b"s" }, Reply::Value(b"abcdef".to_vec()));
        is!(
            Request::PutShl {
                key: b"s",
                value: b"g",
                width: 3
            },
            OK_
        );
        is!(Request::Get { key: b"s" }, Reply::Value(b"efg".to_vec()));
        is!(
            Request::PutShl {
                key: b"s",
                value: b"123456",
                width: 4
            },
            OK_
        );
        is!(Request::Get { key: b"s" }, Reply::Value(b"3456".to_vec()));
        is!(
            Request::PutShl {
                key: b"s",
                value: b"",
                width: 0
            },
            OK_
        );
        is!(Request::Get { key: b"s" }, Reply::Value(b"".to_vec()));
        is!(Request::Vsiz { key: b"k" }, Reply::Int(5));
        is!(Request::Vsiz { key: b"none" }, FAIL_);
        is!(Request::Out { key: b"s" }, OK_);
        is!(Request::Out { key: b"s" }, FAIL_);
        is!(
            Request::Mget {
                keys: vec![b"k", b"none", b"new", b"k"]
            },
            Reply::Pairs(vec![
                (b"k".to_vec(), b"z1234".to_vec()),
                (b"new".to_vec(), b"n".to_vec()),
                (b"k".to_vec(), b"z1234".to_vec()),
            ])
        );
        is!(Request::Mget { keys: vec![] }, Reply::Pairs(vec![]));
        is!(Request::Rnum, Reply::U64(3));
        assert!(matches!(c.r(Request::Size), Reply::U64(_)));
        // putnr: stored, and not one byte of reply.
        let (out, next) = c.raw(&Request::PutNr {
            key: b"nr",
            value: b"quiet",
        });
        assert_eq!((out.len(), next), (0, Next::Continue));
        is!(Request::Get { key: b"nr" }, Reply::Value(b"quiet".to_vec()));
        // fwmkeys: every key with the prefix; max < 0 is no limit, 0 is none.
        for k in [&b"pre1"[..], b"pre2", b"pr"] {
            is!(Request::Put { key: k, value: b"" }, OK_);
        }
        let Reply::List(mut keys) = c.r(Request::Fwmkeys {
            prefix: b"pre",
            max: -1,
        }) else {
            panic!()
        };
        keys.sort();
        assert_eq!(keys, vec![b"pre1".to_vec(), b"pre2".to_vec()]);
        let Reply::List(keys) = c.r(Request::Fwmkeys {
            prefix: b"pre",
            max: 1,
        }) else {
            panic!()
        };
        assert_eq!(keys.len(), 1);
        is!(
            Request::Fwmkeys {
                prefix: b"pre",
                max: 0
            },
            list(&[])
        );
        // Whole-database commands.
        is!(Request::Sync, OK_);
        is!(Request::Optimize { params: b"" }, OK_);
        is!(
            Request::Optimize {
                params: b"nonsense=1"
            },
            FAIL_
        );
        is!(
            Request::Ext {
                name: b"f",
                opts: 0,
                key: b"k",
                value: b"v"
            },
            FAIL_
        );
        is!(
            Request::Restore {
                path: b"/x",
                ts: 0,
                opts: 0
            },
            FAIL_
        );
        is!(
            Request::SetMst {
                host: b"h",
                port: 1,
                ts: 0,
                opts: 0
            },
            FAIL_
        );
        is!(Request::Vanish, OK_);
        is!(Request::Rnum, Reply::U64(0));
        is!(Request::Get { key: b"k" }, FAIL_);
    });
}

/// addint / adddouble follow Tokyo Cabinet: a missing record is created, a record of
/// another size is a failure and stays as it was, sums wrap (addint) or go infinite.
#[test]
fn addint_and_adddouble_edge_cases() {
    each_kind(|db, kind| {
        let mut c = Client::new(db);
        assert_eq!(c.int(b"i", 5), Reply::Int(5), "{kind}");
        assert_eq!(c.int(b"i", -7), Reply::Int(-2));
        assert_eq!(db.get(b"i").unwrap().unwrap().value, (-2i32).to_le_bytes());
        assert_eq!(c.int(b"i", 0), Reply::Int(-2));
        // Wraps around like Tyrant's C int.
        db.put(b"w", &i32::MAX.to_le_bytes()).unwrap();
        assert_eq!(c.int(b"w", 2), Reply::Int(i32::MIN + 1));
        // A sum of exactly INT_MIN is Tyrant's failure value: stored, answered 1.
        assert_eq!(c.int(b"w", -1), FAIL_);
        assert_eq!(db.get(b"w").unwrap().unwrap().value, i32::MIN.to_le_bytes());
        // Not a 4-byte record: failure, unchanged.
        db.put(b"s", b"12345").unwrap();
        assert_eq!(c.int(b"s", 1), FAIL_);
        assert_eq!(db.get(b"s").unwrap().unwrap().value, b"12345");

        assert_eq!(c.dbl(b"d", 1.5), Reply::Double(1.5));
        assert_eq!(c.dbl(b"d", -0.25), Reply::Double(1.25));
        assert_eq!(db.get(b"d").unwrap().unwrap().value, 1.25f64.to_le_bytes());
        assert_eq!(c.dbl(b"d", -3.0), Reply::Double(-1.75));
        assert_eq!(c.dbl(b"s", 1.0), FAIL_);
        assert_eq!(c.dbl(b"i", 1.0), FAIL_, "4 bytes is not a double");
        assert_eq!(c.int(b"d", 1), FAIL_, "8 bytes is not an int");
        assert_eq!(c.dbl(b"inf", f64::INFINITY), Reply::Double(f64::INFINITY));
        assert_eq!(c.dbl(b"nan", f64::NAN), FAIL_);
        // Exact wire form of the sum: integral and trillionfold fractional parts.
        let (out, _) = c.raw(&Request::AddDouble {
            key: b"x",
            integ: 2,
            fract: 500_000_000_000,
        });
        let mut want = vec![0];
        want.extend_from_slice(&2i64.to_be_bytes());
        want.extend_from_slice(&500_000_000_000i64.to_be_bytes());
        assert_eq!(out, want);
    });
}

#[test]
fn iteration_sees_every_unchanged_record_once_while_others_change() {
    each_kind(|db, kind| {
        let mut c = Client::new(db);
        // Before iterinit there is nothing to iterate (Tyrant's fresh iterator).
        assert_eq!(c.r(Request::IterNext), FAIL_);
        for i in 0..200u32 {
            db.put(format!("k{i:03}").as_bytes(), b"v").unwrap();
        }
        assert_eq!(c.r(Request::IterInit), OK_);
        let mut seen = std::collections::BTreeMap::new();
        let mut n = 0;
        loop {
            match c.r(Request::IterNext) {
                Reply::Value(k) => *seen.entry(k).or_insert(0) += 1,
                Reply::Code(1) => break,
                other => panic!("{other:?}"),
            }
            // Writers keep going for a while: new keys, removals of odd keys above 100.
            n += 1;
            assert!(n < 1000, "{kind}: the iteration does not end");
            if n <= 300 {
                db.put(format!("new{n}").as_bytes(), b"x").unwrap();
            }
            if n % 2 == 1 && n > 100 && n < 200 {
                db.out(format!("k{n:03}").as_bytes()).unwrap();
            }
        }
        for i in 0..=100u32 {
            let k = format!("k{i:03}").into_bytes();
            assert_eq!(seen.get(&k), Some(&1), "{kind}: {i}");
        }
        assert!(seen.values().all(|&c| c == 1), "{kind}: a key seen twice");
        // The end stays the end; a new iterinit starts over.
        assert_eq!(c.r(Request::IterNext), FAIL_);
        assert_eq!(c.r(Request::IterInit), OK_);
        assert!(matches!(c.r(Request::IterNext), Reply::Value(_)));
    });
}

#[test]
fn misc_functions() {
    each_kind(|db, kind| {
        let mut c = Client::new(db);
        assert_eq!(c.misc(b"put", &[b"a", b"1"]), list(&[]), "{kind}");
        assert_eq!(c.misc(b"put", &[b"a"]), FAIL_);
        assert_eq!(c.misc(b"putkeep", &[b"a", b"2"]), FAIL_);
        assert_eq!(c.misc(b"putkeep", &[b"b", b"2"]), list(&[]));
        assert_eq!(c.misc(b"putcat", &[b"b", b"3"]), list(&[]));
        assert_eq!(c.misc(b"get", &[b"b"]), list(&[b"23"]));
        assert_eq!(c.misc(b"get", &[b"zz"]), FAIL_);
        assert_eq!(c.misc(b"get", &[]), FAIL_);
        assert_eq!(c.misc(b"out", &[b"b"]), list(&[]));
        assert_eq!(c.misc(b"out", &[b"b"]), FAIL_);
        // putlist takes pairs (an odd last argument is ignored), getlist answers pairs.
        assert_eq!(
            c.misc(b"putlist", &[b"x", b"0", b"y", b"2", b"x", b"1", b"odd"]),
            list(&[])
        );
        // A database with duplicate keys (the B+ tree) keeps both values of x, as Tokyo
        // Cabinet's B+ tree does; the others keep the last.
        let want: &[&[u8]] = if db.allows_dups() {
            &[b"x", b"0", b"x", b"1", b"y", b"2"]
        } else {
            &[b"x", b"1", b"y", b"2"]
        };
        assert_eq!(
            c.misc(b"getlist", &[b"x", b"missing", b"y", b"odd"]),
            list(want)
        );
        assert_eq!(c.misc(b"outlist", &[b"x", b"missing"]), list(&[]));
        assert_eq!(c.misc(b"getlist", &[b"x", b"y"]), list(&[b"y", b"2"]));
        // getpart: offset and length as decimal text.
        c.misc(b"put", &[b"p", b"0123456789"]);
        assert_eq!(c.misc(b"getpart", &[b"p", b"3", b"4"]), list(&[b"3456"]));
        assert_eq!(c.misc(b"getpart", &[b"p", b"8"]), list(&[b"89"]));
        assert_eq!(c.misc(b"getpart", &[b"p"]), list(&[b"0123456789"]));
        assert_eq!(c.misc(b"getpart", &[b"p", b"-5", b"2"]), list(&[b"01"]));
        assert_eq!(c.misc(b"getpart", &[b"p", b"10"]), FAIL_);
        assert_eq!(c.misc(b"getpart", &[b"none"]), FAIL_);
        // iterinit / iternext: key and value; the iterator is the binary commands' one.
        c.misc(b"vanish", &[]);
        c.misc(b"putlist", &[b"i1", b"v1", b"i2", b"v2", b"i3", b"v3"]);
        assert_eq!(c.misc(b"iterinit", &[]), list(&[]));
        let mut got = Vec::new();
        while let Reply::List(kv) = c.misc(b"iternext", &[]) {
            assert_eq!(kv.len(), 2);
            got.push(kv);
        }
        got.sort();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], vec![b"i1".to_vec(), b"v1".to_vec()]);
        assert_eq!(c.misc(b"iterinit", &[b"i2"]), list(&[]));
        let Reply::List(first) = c.misc(b"iternext", &[]) else {
            panic!()
        };
        assert_eq!(first[0], b"i2", "{kind}: starts at the record of the key");
        if db.kind().ordered() {
            assert_eq!(c.r(Request::IterNext), Reply::Value(b"i3".to_vec()));
            // A start key between keys starts at the next one; past the last, a failure.
            assert_eq!(c.misc(b"iterinit", &[b"i25"]), list(&[]));
            assert_eq!(c.r(Request::IterNext), Reply::Value(b"i3".to_vec()));
            assert_eq!(c.misc(b"iterinit", &[b"zz"]), FAIL_);
        } else {
            assert_eq!(c.misc(b"iterinit", &[b"absent"]), FAIL_);
        }
        // regex on the keys, `*` for case-insensitive, max < 1 for no limit.
        c.misc(b"put", &[b"Apple", b"red"]);
        c.misc(b"put", &[b"apricot", b"orange"]);
        let pairs = |x: Reply| match x {
            Reply::List(v) => {
                let mut p: Vec<Vec<Vec<u8>>> = v.chunks(2).map(|c| c.to_vec()).collect();
                p.sort();
                p
            }
            other => panic!("{other:?}"),
        };
        assert_eq!(
            pairs(c.misc(b"regex", &[b"^ap"])),
            vec![vec![b"apricot".to_vec(), b"orange".to_vec()]]
        );
        assert_eq!(pairs(c.misc(b"regex", &[b"*^AP", b"0"])).len(), 2);
        assert_eq!(pairs(c.misc(b"regex", &[b"*^AP", b"1"])).len(), 1);
        assert_eq!(pairs(c.misc(b"regex", &[b"^i[0-9]$"])).len(), 3);
        assert_eq!(c.misc(b"regex", &[b"(unclosed"]), FAIL_);
        assert_eq!(c.misc(b"regex", &[]), FAIL_);
        // range: ordered kinds only; start, max, exclusive end.
        let range = c.misc(b"range", &[b"i1", b"0", b"i3"]);
        if db.kind().ordered() {
            assert_eq!(range, list(&[b"i1", b"v1", b"i2", b"v2"]));
            assert_eq!(c.misc(b"range", &[b"i", b"1"]), list(&[b"i1", b"v1"]));
            let all = c.misc(b"range", &[]);
            assert_eq!(all, c.misc(b"range", &[b"", b"-1"]));
            assert_eq!(pairs(all).len(), 5);
        } else {
            assert_eq!(range, FAIL_);
        }
        // Maintenance and error.
        assert_eq!(c.misc(b"sync", &[]), list(&[]));
        assert_eq!(c.misc(b"optimize", &[]), list(&[]));
        assert_eq!(c.misc(b"optimize", &[b"bogus=1"]), FAIL_);
        assert_eq!(c.misc(b"cacheclear", &[]), list(&[]));
        // The last failure on this connection, as Tokyo Cabinet's last error.
        let why = c.misc(b"error", &[]);
        let text = format!("{why:?}");
        assert!(
            matches!(&why, Reply::List(l) if l.len() == 1 && l[0].starts_with(b"9999: invalid parameter")),
            "{text}"
        );
        // Table-database functions and anything unknown: failure [1][0:4]; putdup where
        // the database keeps no duplicates.
        for name in [
            &b"setindex"[..],
            b"search",
            b"genuid",
            b"putdup",
            b"",
            b"PUT",
        ] {
            if name == b"putdup" && db.allows_dups() {
                continue;
            }
            assert_eq!(c.misc(name, &[b"a", b"b"]), FAIL_);
        }
        let (out, _) = c.raw(&Request::Misc {
            name: b"nope",
            opts: 0,
            args: vec![],
        });
        assert_eq!(out, [1, 0, 0, 0, 0]);
        assert_eq!(c.misc(b"vanish", &[]), list(&[]));
        assert_eq!(db.count(), 0);
    });
}

/// Tokyo Cabinet's B+ tree over Tyrant (tcadb.c, `ADBOBDB`): duplicates through misc, every
/// value in get / getlist / range / regex / iteration, outlist removing them all, key order
/// everywhere; on kinds without duplicates putdup fails and putlist overwrites.
#[test]
fn duplicates_and_key_order_on_a_b_plus_tree() {
    let dir = TempDir::new("dups");
    let name = dir.0.join("d.kb");
    let db = kura_engine::open(name.to_str().unwrap()).unwrap();
    assert!(db.allows_dups());
    let mut c = Client::new(&*db);
    // Written out of order: read back in key order.
    for k in [&b"m"[..], b"b", b"z", b"a"] {
        assert_eq!(
            c.r(Request::Put {
                key: k,
                value: b"1"
            }),
            OK_
        );
    }
    assert_eq!(c.misc(b"putdup", &[b"b", b"2"]), list(&[]));
    assert_eq!(c.misc(b"putdup", &[b"b", b"3"]), list(&[]));
    assert_eq!(c.misc(b"putdupback", &[b"b", b"0"]), list(&[]));
    assert_eq!(c.misc(b"putdup", &[b"b"]), FAIL_);
    assert_eq!(c.misc(b"get", &[b"b"]), list(&[b"0", b"1", b"2", b"3"]));
    assert_eq!(c.misc(b"get", &[b"none"]), FAIL_);
    // The single-value commands see the first value; rnum counts every value.
    assert_eq!(c.r(Request::Get { key: b"b" }), Reply::Value(b"0".to_vec()));
    assert_eq!(c.r(Request::Rnum), Reply::U64(7));
    // putlist adds duplicates, in order; getlist answers a pair for every value.
    assert_eq!(
        c.misc(b"putlist", &[b"m", b"2", b"c", b"x", b"c", b"y", b"odd"]),
        list(&[])
    );
    assert_eq!(
        c.misc(b"getlist", &[b"c", b"none", b"m"]),
        list(&[b"c", b"x", b"c", b"y", b"m", b"1", b"m", b"2"])
    );
    // Iteration: keys in order, a key once per value.
    assert_eq!(c.r(Request::IterInit), OK_);
    let mut keys = Vec::new();
    while let Reply::Value(k) = c.r(Request::IterNext) {
        keys.push(String::from_utf8(k).unwrap());
    }
    assert_eq!(keys, ["a", "b", "b", "b", "b", "c", "c", "m", "m", "z"]);
    // misc iterinit at a key, iternext as [key, value].
    assert_eq!(c.misc(b"iterinit", &[b"bb"]), list(&[]));
    assert_eq!(c.misc(b"iternext", &[]), list(&[b"c", b"x"]));
    assert_eq!(c.misc(b"iternext", &[]), list(&[b"c", b"y"]));
    // fwmkeys: each key once, in order, up to max.
    c.misc(b"putlist", &[b"ba", b"1", b"bc", b"1"]);
    assert_eq!(
        c.r(Request::Fwmkeys {
            prefix: b"b",
            max: -1
        }),
        list(&[b"b", b"ba", b"bc"])
    );
    assert_eq!(
        c.r(Request::Fwmkeys {
            prefix: b"b",
            max: 2
        }),
        list(&[b"b", b"ba"])
    );
    // range [b, c): every value of b, then ba; max counts values.
    assert_eq!(
        c.misc(b"range", &[b"b", b"0", b"bb"]),
        list(&[b"b", b"0", b"b", b"1", b"b", b"2", b"b", b"3", b"ba", b"1"])
    );
    assert_eq!(
        c.misc(b"range", &[b"b", b"2"]),
        list(&[b"b", b"0", b"b", b"1"])
    );
    // regex in key order, every value.
    assert_eq!(
        c.misc(b"regex", &[b"*^[CM]$"]),
        list(&[b"c", b"x", b"c", b"y", b"m", b"1", b"m", b"2"])
    );
    // outlist removes every value of each key; out only the first.
    assert_eq!(c.misc(b"outlist", &[b"c", b"none"]), list(&[]));
    assert_eq!(c.misc(b"get", &[b"c"]), FAIL_);
    assert_eq!(c.r(Request::Out { key: b"m" }), OK_);
    assert_eq!(c.misc(b"get", &[b"m"]), list(&[b"2"]));
    drop(c);
    db.close().unwrap();

    // Kinds without duplicates: putdup is no function of theirs, putlist overwrites.
    let db = kura_engine::open("+").unwrap();
    let mut c = Client::new(&*db);
    assert_eq!(c.misc(b"putdup", &[b"k", b"1"]), FAIL_);
    assert_eq!(c.misc(b"putdupback", &[b"k", b"1"]), FAIL_);
    c.misc(b"putlist", &[b"k", b"1", b"k", b"2"]);
    assert_eq!(c.misc(b"get", &[b"k"]), list(&[b"2"]));
    assert_eq!(c.misc(b"getlist", &[b"k"]), list(&[b"k", b"2"]));
}

/// misc range compares with the stored comparator: on a decimal tree, "9" < "10" and the
/// exclusive end is a number too.
#[test]
fn range_follows_the_comparator() {
    let dir = TempDir::new("cmp");
    let name = dir.0.join("n.kb#cmp=dec");
    let db = kura_engine::open(name.to_str().unwrap()).unwrap();
    let mut c = Client::new(&*db);
    for k in ["1", "2", "9", "10", "11", "100"] {
        db.put(k.as_bytes(), k.as_bytes()).unwrap();
    }
    assert_eq!(
        c.misc(b"range", &[b"2", b"0", b"11"]),
        list(&[b"2", b"2", b"9", b"9", b"10", b"10"])
    );
    assert_eq!(
        c.misc(b"range", &[b"10"]),
        list(&[b"10", b"10", b"11", b"11", b"100", b"100"])
    );
    assert_eq!(c.r(Request::IterInit), OK_);
    let mut keys = Vec::new();
    while let Reply::Value(k) = c.r(Request::IterNext) {
        keys.push(String::from_utf8(k).unwrap());
    }
    assert_eq!(keys, ["1", "2", "9", "10", "11", "100"]);
    drop(c);
    db.close().unwrap();
}

#[test]
fn the_mask_refuses_and_changes_nothing() {
    let db = kura_engine::open("*").unwrap();
    db.put(b"k", b"v").unwrap();
    let mut c = Client::new(&*db);
    c.sh.mask.set(Mask::NONE.mask("allorg").unwrap());
    let one = (vec![1u8], Next::Continue);
    let empty_list = (vec![0u8, 0, 0, 0, 0], Next::Continue);
    assert_eq!(
        c.raw(&Request::Put {
            key: b"k",
            value: b"x"
        }),
        one
    );
    assert_eq!(c.raw(&Request::Get { key: b"k" }), one);
    assert_eq!(c.raw(&Request::Out { key: b"k" }), one);
    assert_eq!(c.raw(&Request::Vanish), one);
    assert_eq!(c.raw(&Request::AddInt { key: b"n", num: 1 }), one);
    assert_eq!(c.raw(&Request::IterInit), one);
    assert_eq!(
        c.raw(&Request::Copy {
            path: b"/tmp/never"
        }),
        one
    );
    assert_eq!(
        c.raw(&Request::PutNr {
            key: b"k",
            value: b"x"
        }),
        (vec![], Next::Continue)
    );
    // As ttserver: empty results for mget and fwmkeys, zero for rnum, empty stat.
    assert_eq!(c.raw(&Request::Mget { keys: vec![b"k"] }), empty_list);
    assert_eq!(
        c.raw(&Request::Fwmkeys {
            prefix: b"",
            max: -1
        }),
        empty_list
    );
    assert_eq!(c.raw(&Request::Rnum), (vec![0; 9], Next::Continue));
    assert_eq!(c.raw(&Request::Stat), (vec![0; 5], Next::Continue));
    // misc: the failure form, not ttserver's empty success.
    let put = Request::Misc {
        name: b"put",
        opts: 0,
        args: vec![b"k", b"x"],
    };
    assert_eq!(c.raw(&put), (vec![1, 0, 0, 0, 0], Next::Continue));
    assert_eq!(
        c.raw(&Request::Repl { ts: 1, sid: 2 }),
        (vec![], Next::Close)
    );
    assert_eq!(db.get(b"k").unwrap().unwrap().value, b"v");
    assert_eq!(db.count(), 1);
    // One operation masked, the others served; other protocols' masks do not apply.
    c.sh.mask.set(Mask::NONE.mask("out").unwrap());
    assert_eq!(c.raw(&Request::Out { key: b"k" }), one);
    assert_eq!(c.raw(&Request::Get { key: b"k" }).0, b"\0\0\0\0\x01v");
    c.sh.mask.set(Mask::NONE.mask("allmc,allhttp").unwrap());
    assert_eq!(
        c.raw(&Request::Out { key: b"k" }),
        (vec![0], Next::Continue)
    );
}

#[test]
fn stat_reports_tyrant_fields() {
    each_kind(|db, kind| {
        let mut c = Client::new(db);
        c.sh.started = kura_engine::store::now_secs();
        c.sh.db_name = format!("{kind}#bnum=1");
        c.sh.sid = 7;
        c.st.fd = 12;
        db.put(b"a", b"1").unwrap();
        // Counted per command, with ttserver's three misses.
        c.r(Request::Put {
            key: b"p",
            value: b"1",
        });
        c.r(Request::PutKeep {
            key: b"p",
            value: b"2",
        });
        c.r(Request::Get { key: b"p" });
        c.r(Request::Get { key: b"nothing" });
        c.r(Request::Out { key: b"nothing" });
        c.r(Request::Out { key: b"p" });
        let Reply::Stat(text) = c.r(Request::Stat) else {
            panic!()
        };
        let fields: std::collections::HashMap<&str, &str> =
            text.lines().map(|l| l.split_once('\t').expect(l)).collect();
        for name in [
            "version", "libver", "protver", "os", "time", "pid", "sid", "type", "path", "rnum",
            "size", "bigend", "fd", "loadavg", "ru_real",
        ] {
            assert!(
                fields.contains_key(name),
                "{kind}: {name} missing in {text}"
            );
        }
        if cfg!(target_os = "linux") {
            for name in ["memsize", "memrss", "ru_user", "ru_sys"] {
                assert!(fields.contains_key(name), "{name}");
            }
        }
        for (name, want) in [
            ("cnt_put", "1"),
            ("cnt_putkeep", "1"),
            ("cnt_get", "2"),
            ("cnt_out", "2"),
            ("cnt_stat", "1"),
            ("cnt_vanish", "0"),
            ("cnt_repl", "0"),
            ("cnt_put_miss", "1"),
            ("cnt_out_miss", "1"),
            ("cnt_get_miss", "1"),
        ] {
            assert_eq!(fields.get(name), Some(&want), "{kind}: {name} in {text}");
        }
        let names: Vec<&str> = text.lines().filter_map(|l| l.split('\t').next()).collect();
        let cnt: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| n.starts_with("cnt_"))
            .collect();
        assert_eq!(cnt.len(), 29, "ttserver's 26 counters and 3 misses");
        assert_eq!(
            (cnt[0], cnt[25]),
            ("cnt_put", "cnt_repl"),
            "in ttserver's order"
        );
        assert_eq!(fields["version"], "1.1.41");
        assert_eq!(fields["sid"], "7");
        assert_eq!(fields["rnum"], "1");
        assert_eq!(fields["fd"], "12");
        assert_eq!(fields["path"], kind);
        let want_type = match kind {
            "*" => "on-memory hash",
            "+" => "on-memory tree",
            ".kb" => "B+ tree",
            _ => "hash",
        };
        assert_eq!(fields["type"], want_type);
        assert!(text.ends_with('\n'));
    });
}

#[test]
fn copy_repl_and_engine_errors() {
    let dir = TempDir::new("copy");
    let db = kura_engine::open("+").unwrap();
    let mut c = Client::new(&*db);
    db.put(b"k", b"v").unwrap();
    let dest = dir.0.join("copy.kh");
    let dest_s = dest.to_str().unwrap().as_bytes().to_vec();
    // Without a backup directory, no copy.
    assert_eq!(c.r(Request::Copy { path: &dest_s }), FAIL_);
    assert!(!dest.exists());
    c.sh.backup_dir = Some(crate::backup::BackupDir::new(&dir.0, None).unwrap());
    assert_eq!(c.r(Request::Copy { path: &dest_s }), OK_);
    let copy = kura_engine::open(dest.to_str().unwrap()).unwrap();
    assert_eq!(copy.get(b"k").unwrap().unwrap().value, b"v");
    copy.close().unwrap();
    // Not over it again, not outside the directory; a shell command line is no command
    // name; an empty path fails.
    assert_eq!(c.r(Request::Copy { path: &dest_s }), FAIL_);
    assert_eq!(c.r(Request::Copy { path: b"../x.kh" }), FAIL_);
    let cmd_path = dir.0.join("pwned");
    let at = format!("@touch {}", cmd_path.display());
    assert_eq!(
        c.r(Request::Copy {
            path: at.as_bytes()
        }),
        FAIL_
    );
    assert!(!cmd_path.exists());
    assert_eq!(c.r(Request::Copy { path: b"" }), FAIL_);
    // restore: its path confined, then refused (no update log).
    for path in [&b"ulog"[..], b"/etc"] {
        assert_eq!(
            c.r(Request::Restore {
                path,
                ts: 0,
                opts: 0
            }),
            FAIL_
        );
    }
    // repl: no update log to stream, hang up without a byte.
    assert_eq!(
        c.raw(&Request::Repl { ts: 1, sid: 9 }),
        (vec![], Next::Close)
    );
    // A closed database: every command answers its failure form, nothing panics.
    db.close().unwrap();
    for req in [
        Request::Put {
            key: b"k",
            value: b"v",
        },
        Request::PutKeep {
            key: b"k",
            value: b"v",
        },
        Request::PutCat {
            key: b"k",
            value: b"v",
        },
        Request::PutShl {
            key: b"k",
            value: b"v",
            width: 1,
        },
        Request::Out { key: b"k" },
        Request::Get { key: b"k" },
        Request::Mget { keys: vec![b"k"] },
        Request::Vsiz { key: b"k" },
        Request::IterInit,
        Request::IterNext,
        Request::Fwmkeys {
            prefix: b"",
            max: -1,
        },
        Request::AddInt { key: b"k", num: 1 },
        Request::AddDouble {
            key: b"k",
            integ: 1,
            fract: 0,
        },
        Request::Sync,
        Request::Vanish,
        Request::Copy { path: b"closed.kh" },
        Request::Misc {
            name: b"get",
            opts: 0,
            args: vec![b"k"],
        },
        Request::Misc {
            name: b"regex",
            opts: 0,
            args: vec![b"."],
        },
    ] {
        assert_eq!(c.call(&req), (FAIL_, Next::Continue), "{req:?}");
    }
    // The failed copy left nothing behind.
    assert!(!dir.0.join("closed.kh").exists());
    let (out, _) = c.raw(&Request::PutNr {
        key: b"k",
        value: b"v",
    });
    assert!(out.is_empty());
    assert!(matches!(c.r(Request::Rnum), Reply::U64(_)));
    assert!(matches!(c.r(Request::Stat), Reply::Stat(_)));
}

/// A table's misc functions and put with an empty key, through the codec both ways; the same
/// calls on a hash are not table functions (genuid, setindex fail) or take a plain value.
#[test]
fn table_misc_functions_and_a_generated_key() {
    let dir = TempDir::new("table");
    let name = dir.0.join("t.kt");
    let db = kura_engine::open(name.to_str().unwrap()).unwrap();
    let mut c = Client::new(&*db);
    let list = |items: &[&[u8]]| Reply::List(items.iter().map(|i| i.to_vec()).collect());
    assert_eq!(c.misc(b"put", &[b"p", b"a", b"1", b"b", b"2"]), list(&[]));
    assert_eq!(c.misc(b"get", &[b"p"]), list(&[b"a", b"1", b"b", b"2"]));
    assert_eq!(
        c.misc(b"putcat", &[b"p", b"a", b"9", b"c", b"3"]),
        list(&[])
    );
    assert_eq!(
        c.misc(b"get", &[b"p"]),
        list(&[b"a", b"1", b"b", b"2", b"c", b"3"])
    );
    assert_eq!(c.misc(b"putkeep", &[b"p", b"a", b"0"]), Reply::Code(1));
    assert_eq!(
        c.misc(b"setindex", &[b"a", b"dec", b"b", b"+lex"]),
        list(&[])
    );
    assert_eq!(c.misc(b"setindex", &[b"a", b"+dec"]), Reply::Code(1));
    assert_eq!(c.misc(b"setindex", &[b"a", b"nonsense"]), Reply::Code(1));
    assert_eq!(
        c.misc(b"search", &[b"addcond\0a\0NUMEQ\x001"]),
        list(&[b"p"])
    );
    assert_eq!(c.misc(b"search", &[b"addcond\0a"]), Reply::Code(1));
    let Reply::List(uid) = c.misc(b"genuid", &[]) else {
        panic!("genuid")
    };
    let uid: u64 = std::str::from_utf8(&uid[0]).unwrap().parse().unwrap();
    // A put with an empty key: the next unique id.
    assert_eq!(
        c.r(Request::Put {
            key: b"",
            value: b"x\0y"
        }),
        Reply::Code(0)
    );
    let next = (uid + 1).to_string();
    assert_eq!(
        c.r(Request::Get {
            key: next.as_bytes()
        }),
        Reply::Value(b"x\0y".to_vec())
    );
    assert_eq!(c.misc(b"out", &[b"p"]), list(&[]));
    assert_eq!(c.misc(b"out", &[b"p"]), Reply::Code(1));
    db.close().unwrap();
    // Not a table: genuid and setindex are no functions; put is key, value.
    let db = kura_engine::open("*").unwrap();
    let mut c = Client::new(&*db);
    assert_eq!(c.misc(b"genuid", &[]), Reply::Code(1));
    assert_eq!(c.misc(b"setindex", &[b"a", b"lex"]), Reply::Code(1));
    assert_eq!(c.misc(b"put", &[b"k", b"v", b"w"]), list(&[]));
    assert_eq!(c.misc(b"get", &[b"k"]), list(&[b"v"]));
}
