//! The HTTP executor through the codec both ways: Kyoto Tycoon's RPC, both REST dialects, the
//! mask and keep-alive.

use super::*;
use crate::kt_common::{atof, kt_expiry_param};
use crate::mask::Mask;
use kura_proto::http::{decode, Decoded, Limits};
use kura_proto::kt_tsv::{self, ColEnc};
use std::collections::BTreeMap;

/// The time of the tests: the real clock (the store checks expiration against it), read
/// once so that expected expiration times are exact.
fn now() -> u64 {
    static NOW: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NOW.get_or_init(kura_engine::store::now_secs)
}

#[derive(Debug)]
struct Resp {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| &v[..])
    }

    /// The TSV body, decoded as its Content-Type says.
    fn tsv(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let enc = ColEnc::from_content_type(self.header("content-type").unwrap()).unwrap();
        kt_tsv::parse(&self.body, enc)
            .unwrap()
            .into_iter()
            .map(|(n, v)| (n.into_owned(), v.into_owned()))
            .collect()
    }

    fn field(&self, name: &str) -> Option<Vec<u8>> {
        self.tsv().remove(name.as_bytes())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Split the server's output into responses; `heads[i]`: whether request i was a HEAD.
fn parse_responses(mut out: &[u8], heads: &[bool]) -> Vec<Resp> {
    let mut v = Vec::new();
    for &head in heads {
        let end = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let text = std::str::from_utf8(&out[..end - 4]).unwrap();
        let mut lines = text.split("\r\n");
        let status_line = lines.next().unwrap();
        assert!(status_line.starts_with("HTTP/1.1 "), "{status_line}");
        let status: u16 = status_line[9..12].parse().unwrap();
        let headers: Vec<(String, Vec<u8>)> = lines
            .map(|l| {
                let (n, v) = l.split_once(": ").unwrap();
                (n.to_string(), v.as_bytes().to_vec())
            })
            .collect();
        let len: usize = headers
            .iter()
            .find(|(n, _)| n == "Content-Length")
            .map(|(_, v)| std::str::from_utf8(v).unwrap().parse().unwrap())
            .unwrap_or(0);
        let blen = if head { 0 } else { len };
        v.push(Resp {
            status,
            headers,
            body: out[end..end + blen].to_vec(),
        });
        out = &out[end + blen..];
    }
    assert!(
        out.is_empty(),
        "trailing output {:?}",
        String::from_utf8_lossy(out)
    );
    v
}

/// Run a transcript through the codec and the executor: the responses, and whether the
/// connection was closed.
fn session(store: &dyn Store, shared: &Shared, input: &[u8]) -> (Vec<Resp>, bool) {
    let mut out = Vec::new();
    let mut heads = Vec::new();
    let mut pos = 0;
    let mut closed = false;
    while pos < input.len() {
        match decode(&input[pos..], &Limits::default()) {
            Ok(Decoded::Complete { request, consumed }) => {
                pos += consumed;
                heads.push(request.method == Method::Head);
                if execute(store, shared, &request, now(), &mut out) == Next::Close {
                    closed = true;
                    break;
                }
            }
            other => panic!("{other:?}"),
        }
    }
    (parse_responses(&out, &heads), closed)
}

fn call(
    store: &dyn Store,
    shared: &Shared,
    method: &str,
    target: &str,
    headers: &[(&str, &[u8])],
    body: &[u8],
) -> Resp {
    let mut input = Vec::new();
    http::write_request(&mut input, method, target, headers, body);
    let (mut r, closed) = session(store, shared, &input);
    assert!(!closed);
    r.pop().unwrap()
}

/// How RPC parameters travel.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Style {
    Query,
    Form,
    Tsv(ColEnc),
}

const STYLES: [Style; 6] = [
    Style::Query,
    Style::Form,
    Style::Tsv(ColEnc::Raw),
    Style::Tsv(ColEnc::Base64),
    Style::Tsv(ColEnc::Url),
    Style::Tsv(ColEnc::Quoted),
];

fn form(params: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut s = Vec::new();
    for (i, (n, v)) in params.iter().enumerate() {
        if i > 0 {
            s.push(b'&');
        }
        http::percent_encode(&mut s, n, b"-_.~", true);
        s.push(b'=');
        http::percent_encode(&mut s, v, b"-_.~", false);
    }
    s
}

fn rpc_call(
    store: &dyn Store,
    shared: &Shared,
    name: &str,
    params: &[(&[u8], &[u8])],
    style: Style,
) -> Resp {
    let target = format!("/rpc/{name}");
    match style {
        Style::Query => {
            let q = String::from_utf8(form(params)).unwrap();
            call(store, shared, "GET", &format!("{target}?{q}"), &[], b"")
        }
        Style::Form => call(
            store,
            shared,
            "POST",
            &target,
            &[("Content-Type", b"application/x-www-form-urlencoded")],
            &form(params),
        ),
        Style::Tsv(enc) => {
            let mut body = Vec::new();
            kt_tsv::encode(&mut body, params.iter().copied(), enc);
            call(
                store,
                shared,
                "POST",
                &target,
                &[("Content-Type", enc.content_type().as_bytes())],
                &body,
            )
        }
    }
}

fn fresh() -> (std::sync::Arc<dyn Store>, Shared) {
    let mut sh = Shared::new(now() - 100, 1 << 20);
    sh.db_name = "/var/data/casket.kch".into();
    (kura_engine::open("*").unwrap(), sh)
}

/// Every procedure, with its parameters sent in every way Kyoto Tycoon accepts.
#[test]
fn rpc_procedures_in_every_style() {
    for style in STYLES {
        let (db, sh) = fresh();
        let db = &*db;
        let c = |name: &str, params: &[(&[u8], &[u8])]| rpc_call(db, &sh, name, params, style);
        // Raw TSV cannot carry tabs or newlines; the others can carry anything.
        let val: &[u8] = if style == Style::Tsv(ColEnc::Raw) {
            b"tokyo city"
        } else {
            b"to\tkyo\n\0\xff"
        };
        let ctx = format!("{style:?}");

        let r = c("void", &[]);
        assert_eq!((r.status, r.body.len()), (200, 0), "{ctx}");
        let r = c("echo", &[(b"a", b"1"), (b"b", val)]);
        assert_eq!(r.status, 200);
        assert_eq!(r.field("b").as_deref(), Some(val), "{ctx}");
        assert_eq!(r.field("a").as_deref(), Some(&b"1"[..]));

        assert_eq!(c("set", &[(b"key", b"k1"), (b"value", val)]).status, 200);
        let r = c("get", &[(b"key", b"k1")]);
        assert_eq!(
            (r.status, r.field("value").as_deref()),
            (200, Some(val)),
            "{ctx}"
        );
        assert_eq!(r.field("xt"), None);
        let r = c("check", &[(b"key", b"k1")]);
        assert_eq!(r.field("vsiz"), Some(val.len().to_string().into_bytes()));

        let r = c("add", &[(b"key", b"k1"), (b"value", b"x")]);
        assert_eq!(r.status, 450);
        assert_eq!(
            r.field("ERROR").as_deref(),
            Some(&b"DB: 6: record duplication: record duplication"[..])
        );
        assert_eq!(c("add", &[(b"key", b"k2"), (b"value", b"x")]).status, 200);
        let r = c("replace", &[(b"key", b"k3"), (b"value", b"x")]);
        assert_eq!(r.status, 450);
        assert_eq!(r.field("ERROR").as_deref(), Some(NO_RECORD.as_bytes()));
        assert_eq!(
            c("replace", &[(b"key", b"k2"), (b"value", b"y")]).status,
            200
        );
        assert_eq!(
            c("append", &[(b"key", b"k2"), (b"value", b"z")]).status,
            200
        );
        assert_eq!(
            c("append", &[(b"key", b"k4"), (b"value", b"new")]).status,
            200
        );
        assert_eq!(c("get", &[(b"key", b"k2")]).field("value").unwrap(), b"yz");
        assert_eq!(c("get", &[(b"key", b"k4")]).field("value").unwrap(), b"new");

        // increment: KT's 8-byte big-endian integers.
        let inc = |num: &[u8], orig: Option<&[u8]>| {
            let mut p: Vec<(&[u8], &[u8])> = vec![(b"key", b"n"), (b"num", num)];
            if let Some(o) = orig {
                p.push((b"orig", o));
            }
            c("increment", &p)
        };
        assert_eq!(inc(b"5", None).field("num").unwrap(), b"5");
        assert_eq!(inc(b"-2", None).field("num").unwrap(), b"3");
        assert_eq!(inc(b"0", None).field("num").unwrap(), b"3");
        assert_eq!(db.get(b"n").unwrap().unwrap().value, 3i64.to_be_bytes());
        assert_eq!(inc(b"7", Some(b"set")).field("num").unwrap(), b"7");
        let r = c(
            "increment",
            &[(b"key", b"fresh"), (b"num", b"1"), (b"orig", b"try")],
        );
        assert_eq!(r.status, 450);
        let r = c(
            "increment",
            &[(b"key", b"fresh"), (b"num", b"1"), (b"orig", b"10")],
        );
        assert_eq!(r.field("num").unwrap(), b"11");
        let r = c("increment", &[(b"key", b"k2"), (b"num", b"1")]);
        assert_eq!(r.status, 450, "{ctx}");
        assert_eq!(c("increment", &[(b"key", b"n")]).status, 400);

        // increment_double: KT's 16-byte fixed point.
        let r = c("increment_double", &[(b"key", b"d"), (b"num", b"1.5")]);
        assert_eq!(r.field("num").unwrap(), b"1.500000");
        let r = c("increment_double", &[(b"key", b"d"), (b"num", b"2.25")]);
        assert_eq!(r.field("num").unwrap(), b"3.750000");
        let r = c("increment_double", &[(b"key", b"d"), (b"num", b"0")]);
        assert_eq!(r.field("num").unwrap(), b"3.750000");
        let stored = db.get(b"d").unwrap().unwrap().value;
        assert_eq!(&stored[..8], 3i64.to_be_bytes());
        assert_eq!(&stored[8..], 750_000_000_000_000i64.to_be_bytes());
        let r = c("increment_double", &[(b"key", b"n"), (b"num", b"1")]);
        assert_eq!(r.status, 450);

        // cas compares values.
        let r = c(
            "cas",
            &[(b"key", b"k2"), (b"oval", b"nope"), (b"nval", b"q")],
        );
        assert_eq!(r.status, 450);
        assert_eq!(
            r.field("ERROR").as_deref(),
            Some(&b"DB: 8: logical inconsistency: status conflict"[..])
        );
        assert_eq!(
            c("cas", &[(b"key", b"k2"), (b"oval", b"yz"), (b"nval", val)]).status,
            200
        );
        assert_eq!(
            c("get", &[(b"key", b"k2")]).field("value").as_deref(),
            Some(val)
        );
        assert_eq!(c("cas", &[(b"key", b"k5"), (b"nval", b"v5")]).status, 200);
        assert_eq!(c("cas", &[(b"key", b"k5"), (b"nval", b"v6")]).status, 450);
        assert_eq!(c("cas", &[(b"key", b"k5"), (b"oval", b"v5")]).status, 200);
        assert_eq!(c("get", &[(b"key", b"k5")]).status, 450);

        // remove and seize.
        assert_eq!(c("remove", &[(b"key", b"k4")]).status, 200);
        assert_eq!(c("remove", &[(b"key", b"k4")]).status, 450);
        let r = c("seize", &[(b"key", b"k1")]);
        assert_eq!(r.field("value").as_deref(), Some(val));
        assert_eq!(c("seize", &[(b"key", b"k1")]).status, 450);

        // Bulk procedures.
        let r = c(
            "set_bulk",
            &[(b"_p1", b"one"), (b"_p2", val), (b"xt", b"100")],
        );
        assert_eq!(r.field("num").unwrap(), b"2");
        let r = c("get_bulk", &[(b"_p1", b""), (b"_p2", b""), (b"_zz", b"")]);
        assert_eq!(r.field("num").unwrap(), b"2");
        assert_eq!(r.field("_p1").unwrap(), b"one");
        assert_eq!(r.field("_p2").as_deref(), Some(val));
        assert_eq!(r.field("_zz"), None);
        let r = c("get", &[(b"key", b"p1")]);
        assert_eq!(r.field("xt").unwrap(), (now() + 100).to_string().as_bytes());

        let r = c("match_prefix", &[(b"prefix", b"p")]);
        assert_eq!(r.field("num").unwrap(), b"2");
        assert!(r.field("_p1").is_some() && r.field("_p2").is_some());
        let r = c("match_prefix", &[(b"prefix", b"p"), (b"max", b"1")]);
        assert_eq!(r.field("num").unwrap(), b"1");
        let r = c("match_regex", &[(b"regex", b"^p[12]$")]);
        assert_eq!(r.field("num").unwrap(), b"2");
        let r = c("match_regex", &[(b"regex", b"(")]);
        assert_eq!(r.status, 450);
        assert_eq!(c("match_prefix", &[]).status, 400);

        let r = c("remove_bulk", &[(b"_p1", b""), (b"_none", b"")]);
        assert_eq!(r.field("num").unwrap(), b"1");

        // Database-wide procedures.
        let r = c("status", &[]);
        assert_eq!(r.status, 200);
        assert_eq!(r.field("count"), Some(db.count().to_string().into_bytes()));
        assert!(r.field("size").is_some());
        assert_eq!(r.field("path").unwrap(), b"/var/data/casket.kch");
        assert_eq!(r.field("type").unwrap(), b"32");
        let r = c("report", &[]);
        assert_eq!(
            r.field("db_total_count"),
            Some(db.count().to_string().into_bytes())
        );
        assert!(r.field("conf_kt_version").unwrap().starts_with(b"0.9.56"));
        assert_eq!(r.field("serv_running_term").unwrap(), b"100.000000");
        assert_eq!(c("synchronize", &[(b"hard", b"")]).status, 200);
        // No backup directory: the command is refused.
        let r = c("synchronize", &[(b"command", b"backup")]);
        assert_eq!(r.status, 500);
        assert_eq!(
            r.field("ERROR").unwrap(),
            b"DB: 8: logical inconsistency: postprocessing failed"
        );
        assert_eq!(c("vacuum", &[]).status, 200);
        assert_eq!(c("clear", &[]).status, 200);
        assert_eq!(db.count(), 0);

        // Database selection.
        assert_eq!(
            c("set", &[(b"DB", b"0"), (b"key", b"a"), (b"value", b"b")]).status,
            200
        );
        let r = c("get", &[(b"DB", b"casket.kch"), (b"key", b"a")]);
        assert_eq!(r.status, 200);
        let r = c("get", &[(b"DB", b"1"), (b"key", b"a")]);
        assert_eq!(r.status, 400);
        assert_eq!(r.field("ERROR").unwrap(), b"no such database");
        assert_eq!(
            c("get", &[(b"DB", b"other.kch"), (b"key", b"a")]).status,
            400
        );

        // Missing parameters, unknown and unimplemented procedures.
        let r = c("set", &[(b"key", b"a")]);
        assert_eq!(
            (r.status, r.field("ERROR").unwrap()),
            (400, b"invalid parameters".to_vec())
        );
        let r = c("bogus", &[]);
        assert_eq!(r.status, 501);
        assert_eq!(r.field("ERROR").unwrap(), b"not implemented: bogus");
        assert_eq!(c("tune_replication", &[]).status, 501);
        assert_eq!(c("play_script", &[(b"name", b"x")]).status, 501);
    }
}

#[test]
fn rpc_output_encodings_and_bad_input() {
    let (db, sh) = fresh();
    let db = &*db;
    // Binary output is Base64, mostly-text output URL-encoded, plain text raw.
    db.put(b"bin", &[0u8, 1, 2, 3, 4, 5, 6, 7, 8, 9]).unwrap();
    db.put(b"tab", b"hello\tworld, how are you").unwrap();
    db.put(b"txt", "平林".as_bytes()).unwrap();
    for (key, ct) in [
        ("bin", "text/tab-separated-values; colenc=B"),
        ("tab", "text/tab-separated-values; colenc=U"),
        ("txt", "text/tab-separated-values"),
    ] {
        let r = call(db, &sh, "GET", &format!("/rpc/get?key={key}"), &[], b"");
        assert_eq!(r.header("content-type").unwrap(), ct.as_bytes());
        assert_eq!(
            r.field("value").unwrap(),
            db.get(key.as_bytes()).unwrap().unwrap().value
        );
    }
    // The body overrides the query; a tab-separated body in Kyoto Tycoon's spec form.
    let r = call(
        db,
        &sh,
        "POST",
        "/rpc/echo?a=query&b=query",
        &[("Content-Type", b"text/tab-separated-values; colenc=B")],
        b"YQ==\tYm9keQ==\n",
    );
    assert_eq!(r.field("a").unwrap(), b"body");
    assert_eq!(r.field("b").unwrap(), b"query");
    // Undecodable input is a 400.
    let r = call(
        db,
        &sh,
        "POST",
        "/rpc/echo",
        &[("Content-Type", b"text/tab-separated-values; colenc=U")],
        b"a\t%zz\n",
    );
    assert_eq!(r.status, 400);
    assert_eq!(call(db, &sh, "GET", "/rpc/echo?a=%g", &[], b"").status, 400);
    assert_eq!(call(db, &sh, "GET", "/rpc/%zz", &[], b"").status, 400);
    // HEAD on a procedure: the length of the TSV answer, no body.
    let mut input = Vec::new();
    http::write_request(&mut input, "HEAD", "/rpc/get?key=txt", &[], b"");
    let (r, _) = session(db, &sh, &input);
    assert_eq!(r[0].status, 200);
    assert!(r[0].body.is_empty());
    assert_eq!(r[0].header("content-length").unwrap(), b"13");
}

#[test]
fn rpc_expiration() {
    let (db, sh) = fresh();
    let db = &*db;
    let set = |xt: &str| {
        let r = call(
            db,
            &sh,
            "GET",
            &format!("/rpc/set?key=k&value=v&xt={xt}"),
            &[],
            b"",
        );
        assert_eq!(r.status, 200);
        db.get(b"k").unwrap().map(|r| r.meta.expires)
    };
    assert_eq!(set("60"), Some(now() + 60));
    assert_eq!(set("-2000000000"), Some(2_000_000_000));
    assert_eq!(set("2000000000000"), Some(0));
    assert_eq!(set("-1"), None); // absolute time 1: long gone
    let r = call(db, &sh, "GET", "/rpc/set?key=k&value=v&xt=60", &[], b"");
    assert_eq!(r.status, 200);
    let r = call(db, &sh, "GET", "/rpc/get?key=k", &[], b"");
    assert_eq!(r.field("xt").unwrap(), (now() + 60).to_string().as_bytes());
    // A write without xt never expires, like Kyoto Tycoon.
    call(db, &sh, "GET", "/rpc/append?key=k&value=w", &[], b"");
    assert_eq!(db.get(b"k").unwrap().unwrap().meta.expires, 0);
    // REST shows it as a date.
    call(db, &sh, "GET", "/rpc/set?key=k&value=v&xt=60", &[], b"");
    let r = call(db, &sh, "GET", "/k", &[], b"");
    let mut want = Vec::new();
    http::write_http_date(&mut want, now() + 60);
    assert_eq!(r.header("x-kt-xt").unwrap(), want);
}

#[test]
fn tyrant_rest() {
    let (db, sh) = fresh();
    let db = &*db;
    let r = call(db, &sh, "PUT", "/a%2Fb%00", &[], b"value");
    assert_eq!((r.status, r.text().as_str()), (201, "Created\n"));
    assert_eq!(db.get(b"a/b\0").unwrap().unwrap().value, b"value");
    let r = call(db, &sh, "GET", "/a%2Fb%00", &[], b"");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"value"[..]));
    assert_eq!(
        r.header("content-type").unwrap(),
        b"application/octet-stream"
    );
    assert_eq!(r.header("x-kt-xt"), None);
    assert!(r.header("date").is_some());
    // Keys may hold slashes and keep their query out.
    call(db, &sh, "PUT", "/dir/file?ignored=1", &[], b"f");
    assert_eq!(db.get(b"dir/file").unwrap().unwrap().value, b"f");
    // HEAD: the length, no body.
    let mut input = Vec::new();
    http::write_request(&mut input, "HEAD", "/dir/file", &[], b"");
    http::write_request(&mut input, "HEAD", "/none", &[], b"");
    let (r, _) = session(db, &sh, &input);
    assert_eq!(
        (r[0].status, r[0].header("content-length")),
        (200, Some(&b"1"[..]))
    );
    assert_eq!(r[1].status, 404);
    // putkeep and putcat.
    let keep: &[(&str, &[u8])] = &[("X-TT-PDMODE", b"1")];
    let r = call(db, &sh, "PUT", "/a%2Fb%00", keep, b"other");
    assert_eq!((r.status, r.text().as_str()), (409, "Conflict\n"));
    assert_eq!(call(db, &sh, "PUT", "/new", keep, b"n").status, 201);
    let cat: &[(&str, &[u8])] = &[("X-TT-PDMODE", b"2")];
    assert_eq!(call(db, &sh, "PUT", "/new", cat, b"+m").status, 201);
    assert_eq!(db.get(b"new").unwrap().unwrap().value, b"n+m");
    // DELETE and misses.
    let r = call(db, &sh, "DELETE", "/new", &[], b"");
    assert_eq!((r.status, r.text().as_str()), (200, "OK\n"));
    let r = call(db, &sh, "DELETE", "/new", &[], b"");
    assert_eq!((r.status, r.text().as_str()), (404, "Not Found\n"));
    let r = call(db, &sh, "GET", "/new", &[], b"");
    assert_eq!((r.status, r.text().as_str()), (404, "Not Found\n"));
    assert_eq!(r.header("x-kt-error").unwrap(), NO_RECORD.as_bytes());
    // Bad escapes, unknown methods.
    assert_eq!(call(db, &sh, "GET", "/bad%zz", &[], b"").status, 400);
    assert_eq!(call(db, &sh, "PATCH", "/k", &[], b"").status, 501);
    // POST: extensions (none loaded), misc functions, or nothing.
    assert_eq!(call(db, &sh, "POST", "/k", &[], b"").status, 400);
    let r = call(db, &sh, "POST", "/k", &[("X-TT-XNAME", b"echo")], b"v");
    assert_eq!(r.status, 500);
    let m = |name: &[u8], body: &[u8]| call(db, &sh, "POST", "/", &[("X-TT-MNAME", name)], body);
    let r = m(b"put", b"arg1=mk&arg2=m%00v");
    assert_eq!((r.status, r.body.len()), (200, 0));
    let r = m(b"get", b"key=mk");
    assert_eq!(r.text(), "res1=m%00v");
    assert_eq!(
        r.header("content-type").unwrap(),
        b"application/x-www-form-urlencoded"
    );
    assert_eq!(m(b"putkeep", b"a=mk&b=x").status, 500);
    let r = m(b"putlist", b"a=l1&b=v1&c=l2&d=v2");
    assert_eq!(r.status, 200);
    let r = m(b"getlist", b"a=l1&b=l2&c=none");
    assert_eq!(r.text(), "res1=l1&res2=v1&res3=l2&res4=v2");
    // A repeated name replaces its value in place.
    let r = m(b"getlist", b"a=zz&b=l2&a=l1");
    assert_eq!(r.text(), "res1=l1&res2=v1&res3=l2&res4=v2");
    assert_eq!(m(b"outlist", b"a=l1&b=l2&c=none").status, 200);
    assert_eq!(m(b"out", b"a=l1").status, 500);
    assert_eq!(m(b"bogus", b"").status, 500);
    assert_eq!(m(b"get", b"a=%zz").status, 400);
    let r = m(b"getpart", b"a=mk&b=1&c=1");
    assert_eq!(r.text(), "res1=%00");
    assert_eq!(m(b"getpart", b"a=mk&b=9").status, 500);
    let r = m(b"regex", b"a=*^MK$&b=0");
    assert_eq!(r.text(), "res1=mk&res2=m%00v");
    assert_eq!(m(b"regex", b"a=(").status, 500);
    assert_eq!(m(b"range", b"").status, 500, "unordered database");
    assert_eq!(m(b"error", b"").text(), "res1=0%3A%20success");
    // A tuning parameter the kind does not know is the client's mistake.
    assert_eq!(m(b"optimize", b"a=bogus%3D1").status, 400);
    assert_eq!(m(b"vanish", b"").status, 200);
    assert_eq!(db.count(), 0);
    let tree = kura_engine::open("+").unwrap();
    for k in [&b"r1"[..], b"r2", b"r3"] {
        tree.put(k, b"v").unwrap();
    }
    let r = call(
        &*tree,
        &sh,
        "POST",
        "/",
        &[("X-TT-MNAME", b"range")],
        b"a=r2&b=0",
    );
    assert_eq!(r.text(), "res1=r2&res2=v&res3=r3&res4=v");
    // OPTIONS describes the server.
    let r = call(db, &sh, "OPTIONS", "*", &[], b"");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("allow").unwrap(),
        b"OPTIONS, GET, HEAD, PUT, POST, DELETE"
    );
    assert_eq!(r.header("x-tt-version").unwrap(), b"1.1.41");
    assert_eq!(r.header("x-tt-type").unwrap(), b"on-memory hash");
    assert_eq!(r.header("x-tt-rnum").unwrap(), b"0");
    assert_eq!(r.header("content-length").unwrap(), b"0");
}

#[test]
fn kyoto_tycoon_rest() {
    let (db, sh) = fresh();
    let db = &*db;
    let xt = b"Sun, 06 Nov 2033 08:49:37 GMT";
    let r = call(
        db,
        &sh,
        "PUT",
        "/japan",
        &[("Host", b"localhost:1978"), ("X-Kt-Xt", xt)],
        b"tokyo",
    );
    assert_eq!((r.status, r.body.len()), (201, 0));
    assert_eq!(
        r.header("location").unwrap(),
        b"http://localhost:1978/japan"
    );
    let r = call(db, &sh, "GET", "/japan", &[], b"");
    assert_eq!(r.body, b"tokyo");
    assert_eq!(r.header("x-kt-xt").unwrap(), xt);
    // Decimal X-Kt-Xt is an absolute unix time.
    call(db, &sh, "PUT", "/k", &[("X-Kt-Xt", b"2000000000")], b"v");
    assert_eq!(db.get(b"k").unwrap().unwrap().meta.expires, 2_000_000_000);
    // add / replace fail with 450 and X-Kt-Error.
    let r = call(db, &sh, "PUT", "/japan", &[("X-Kt-Mode", b"add")], b"x");
    assert_eq!(r.status, 450);
    assert!(r.header("x-kt-error").unwrap().starts_with(b"DB: 6:"));
    let r = call(db, &sh, "PUT", "/korea", &[("X-Kt-Mode", b"replace")], b"x");
    assert_eq!(r.status, 450);
    assert_eq!(r.header("x-kt-error").unwrap(), NO_RECORD.as_bytes());
    let r = call(
        db,
        &sh,
        "PUT",
        "/japan",
        &[("X-Kt-Mode", b"REPLACE")],
        b"kyoto",
    );
    assert_eq!(r.status, 201);
    assert_eq!(db.get(b"japan").unwrap().unwrap().meta.expires, 0);
    // DELETE in Kyoto Tycoon's dialect: 204.
    let kt: &[(&str, &[u8])] = &[("X-Kt-Mode", b"set")];
    let r = call(db, &sh, "DELETE", "/japan", kt, b"");
    assert_eq!((r.status, r.header("content-length")), (204, None));
    let r = call(db, &sh, "DELETE", "/japan", kt, b"");
    assert_eq!(r.status, 404);
}

#[test]
fn the_mask() {
    let (db, sh) = fresh();
    sh.mask
        .set(Mask::NONE.mask("out,vsiz,addint,misc").unwrap());
    let db = &*db;
    db.put(b"k", b"v").unwrap();
    assert_eq!(call(db, &sh, "DELETE", "/k", &[], b"").status, 403);
    let r = call(db, &sh, "GET", "/rpc/remove?key=k", &[], b"");
    assert_eq!(
        (r.status, r.field("ERROR").unwrap()),
        (403, b"forbidden".to_vec())
    );
    assert_eq!(
        call(db, &sh, "GET", "/rpc/seize?key=k", &[], b"").status,
        403
    );
    assert_eq!(
        call(db, &sh, "GET", "/rpc/increment?key=n&num=1", &[], b"").status,
        403
    );
    assert_eq!(
        call(db, &sh, "POST", "/", &[("X-TT-MNAME", b"get")], b"a=k").status,
        403
    );
    let mut input = Vec::new();
    http::write_request(&mut input, "HEAD", "/k", &[], b"");
    assert_eq!(session(db, &sh, &input).0[0].status, 403);
    // Others still work, and OPTIONS leaves the refused methods out.
    assert_eq!(call(db, &sh, "GET", "/k", &[], b"").status, 200);
    assert_eq!(call(db, &sh, "GET", "/rpc/get?key=k", &[], b"").status, 200);
    let r = call(db, &sh, "OPTIONS", "/", &[], b"");
    assert_eq!(r.header("allow").unwrap(), b"OPTIONS, GET, PUT, POST");
    assert!(db.get(b"k").unwrap().is_some());
    // PUT is refused by the operation its mode performs.
    sh.mask.set(Mask::NONE.mask("putkeep").unwrap());
    assert_eq!(
        call(db, &sh, "PUT", "/k", &[("X-TT-PDMODE", b"1")], b"x").status,
        403
    );
    assert_eq!(
        call(db, &sh, "PUT", "/k", &[("X-Kt-Mode", b"add")], b"x").status,
        403
    );
    assert_eq!(call(db, &sh, "PUT", "/k", &[], b"x").status, 201);
    // Everything refused: echo and void still answer, OPTIONS does not.
    sh.mask.set(Mask::NONE.mask("allhttp").unwrap());
    assert_eq!(call(db, &sh, "GET", "/rpc/void", &[], b"").status, 200);
    assert_eq!(call(db, &sh, "GET", "/rpc/echo?a=1", &[], b"").status, 200);
    assert_eq!(call(db, &sh, "GET", "/rpc/status", &[], b"").status, 403);
    assert_eq!(call(db, &sh, "OPTIONS", "*", &[], b"").status, 403);
    assert_eq!(call(db, &sh, "PUT", "/k", &[], b"x").status, 403);
    // Another protocol's mask does not apply.
    sh.mask.set(Mask::NONE.mask("allmc").unwrap());
    assert_eq!(call(db, &sh, "GET", "/k", &[], b"").status, 200);
}

#[test]
fn keep_alive_and_pipelining() {
    let (db, sh) = fresh();
    let db = &*db;
    let input = b"PUT /a HTTP/1.1\r\nContent-Length: 1\r\n\r\n1GET /a HTTP/1.1\r\n\r\nGET /rpc/get?key=a HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /a HTTP/1.0\r\n\r\nGET /never HTTP/1.1\r\n\r\n";
    let (r, closed) = session(db, &sh, input);
    assert!(closed);
    assert_eq!(r.len(), 4);
    assert_eq!(r[0].status, 201);
    assert_eq!(r[1].body, b"1");
    assert_eq!(r[2].field("value").unwrap(), b"1");
    assert_eq!(r[2].header("connection").unwrap(), b"Keep-Alive");
    assert_eq!(r[3].header("connection").unwrap(), b"close");
    let (r, closed) = session(db, &sh, b"GET /a HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert!(closed);
    assert_eq!(r[0].header("connection").unwrap(), b"close");
}

#[test]
fn kt_numbers_and_expiry_helpers() {
    assert_eq!(atoi(b"  -12x"), -12);
    assert_eq!(atoi(b"+7"), 7);
    assert_eq!(atoi(b"abc"), 0);
    assert_eq!(atoi(b"99999999999999999999999"), i64::MAX);
    assert_eq!(atof(b"1.5e2xyz"), 150.0);
    assert_eq!(atof(b" -0.25"), -0.25);
    assert_eq!(atof(b"inf"), f64::INFINITY);
    assert_eq!(atof(b"junk"), 0.0);
    assert_eq!(kt_expiry_param(None, now()), 0);
    assert_eq!(kt_expiry_param(Some(b"10"), now()), now() + 10);
    assert_eq!(kt_expiry_param(Some(b"-5"), now()), 5);
    assert_eq!(kt_expiry_param(Some(b"-1099511627775"), now()), 0);
}

/// A B+ tree over Kyoto Tycoon's RPC and Tyrant's HTTP: status as Kyoto Cabinet's TreeDB
/// gives it (type 49, `rcomp`), matching and cursors in key order, a key with several values
/// matched once; Tyrant's OPTIONS names the type.
#[test]
fn a_b_plus_tree_over_http() {
    let dir = std::env::temp_dir().join(format!("kura-http-kb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let name = dir.join("t.kb#cmp=lexdesc");
    let tree = kura_engine::open(name.to_str().unwrap()).unwrap();
    let mut sh = Shared::new(now() - 100, 1 << 20);
    sh.db_name = "t.kb".into();
    for k in ["a1", "b2", "a3", "a2", "c"] {
        tree.put(k.as_bytes(), b"v").unwrap();
    }
    if tree.allows_dups() {
        tree.put_dup(b"a2", b"w", false).unwrap();
    }
    let c = |name: &str, params: &[(&[u8], &[u8])]| {
        rpc_call(&*tree, &sh, name, params, Style::Tsv(ColEnc::Raw))
    };
    let r = c("status", &[]);
    assert_eq!(r.field("type").as_deref(), Some(&b"49"[..]));
    assert_eq!(r.field("realtype").as_deref(), Some(&b"49"[..]));
    assert_eq!(r.field("rcomp").as_deref(), Some(&b"lexicaldesc"[..]));
    assert!(r.field("lcnt").is_some());
    for f in ["psiz", "pccap", "cusage"] {
        assert!(r.field(f).is_some(), "{f}");
    }
    // Descending order: a3, a2, a1; each key once.
    let keys = |r: &Resp| {
        let mut v: Vec<(u64, String)> = r
            .text()
            .lines()
            .filter(|l| l.starts_with('_'))
            .map(|l| {
                let (k, i) = l.split_once('\t').unwrap();
                (i.parse().unwrap(), k[1..].to_string())
            })
            .collect();
        v.sort();
        v.into_iter().map(|(_, k)| k).collect::<Vec<_>>()
    };
    let r = c("match_prefix", &[(b"prefix", b"a")]);
    assert_eq!(keys(&r), ["a3", "a2", "a1"]);
    let r = c("match_prefix", &[(b"prefix", b"a"), (b"max", b"2")]);
    assert_eq!(keys(&r), ["a3", "a2"]);
    let r = c("match_regex", &[(b"regex", b"^[ab]")]);
    assert_eq!(keys(&r), ["b2", "a3", "a2", "a1"]);
    let r = call(&*tree, &sh, "OPTIONS", "*", &[], b"");
    assert_eq!(r.header("x-tt-type").unwrap(), b"B+ tree");
    drop(tree);
    let _ = std::fs::remove_dir_all(&dir);
}
