//! Executes HTTP requests on a [`Store`]: Kyoto Tycoon's TSV-RPC under `/rpc/`, and one REST
//! interface for every other path that speaks both Tokyo Tyrant's and Kyoto Tycoon's headers.
//! No sockets here: the connection loop decodes with [`kura_proto::http::decode`] and writes
//! what [`execute`] appends.
//!
//! # REST: one handler, two dialects
//!
//! The key is the percent-decoded path after its leading `/` (the query is not part of it).
//! Tokyo Tyrant 1.1.41 and Kyoto Tycoon agree on GET, HEAD and PUT (201) and on the 404s;
//! they differ on details that a request tells apart by its headers:
//!
//! * PUT reads `X-TT-PDMODE` (1 putkeep → 409 when the key exists, 2 putcat) and Kyoto
//!   Tycoon's `X-Kt-Mode` (`add` / `replace` → 450 when they fail) and `X-Kt-Xt` (absolute
//!   expiration: unix seconds or a date);
//! * DELETE answers Tyrant's `200 OK` unless the request carries an `X-Kt-*` header (and no
//!   `X-TT-*` one): then Kyoto Tycoon's `204 No Content`. Kyoto Tycoon REST clients that send
//!   no such header get Tyrant's 200 (see docs/PROTOCOL-HTTP.md);
//! * GET and HEAD add `X-Kt-Xt` when the record expires; misses carry both Tyrant's body and
//!   Kyoto Tycoon's `X-Kt-Error` header;
//! * POST is Tyrant's: `X-TT-XNAME` (script extensions: none are loaded, so 500 like a
//!   ttserver without `-ext`) or `X-TT-MNAME` (a `misc` function with form-encoded
//!   arguments); OPTIONS is Tyrant's server description.
//!
//! # Numbers and expiration in Kyoto Tycoon's format
//!
//! `/rpc/increment` keeps Kyoto Tycoon's 8-byte big-endian integer and `/rpc/increment_double`
//! its 16-byte fixed-point number (integral part and fraction × 10^15, both big-endian), not
//! Tyrant's little-endian `addint` / `adddouble` formats: a record incremented through one
//! protocol is not numeric for the other, exactly as between the original servers.
//!
//! Kyoto Tycoon's `xt` is relative seconds when positive and an absolute unix time when
//! negative; results at or beyond 2^40 − 1 mean "never", like Kyoto Tycoon's cap. Every KT
//! write without `xt` stores a record that never expires (Kyoto Tycoon's default), except
//! REST PUT with Tyrant's putcat, which keeps the record's expiration.

use crate::kt_bin_exec::{kt_expiry, XT_MAX};
use crate::kt_cursor::{self, KtCursors};
use crate::mask::{Op, Proto};
use crate::mc_exec::{flush_if_due, Next, Shared};
use crate::tt_exec::TtState;
use kura_engine::counter::Counter;
use kura_engine::store::check_sizes;
use kura_engine::{BatchOp, Decision, Error, Kind, Outcome, Store, Value};
use kura_proto::http::{self, Method, Request};
use kura_proto::kt_tsv::{self, ColEnc};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering::Relaxed;

/// The Tokyo Tyrant release whose HTTP interface is served (reported by OPTIONS).
pub const TT_VERSION: &str = "1.1.41";
/// The library version of that release.
pub const TT_LIBVER: u32 = 324;
/// The protocol version of that release.
pub const TT_PROTVER: &str = "0.91";
/// The Kyoto Tycoon release whose RPC interface is served (reported by `/rpc/report`).
pub const KT_VERSION: &str = "0.9.56";

/// Kyoto Tycoon's fixed-point unit of `increment_double`.
const DEC_UNIT: i64 = 1_000_000_000_000_000;

/// A response being built.
struct Reply {
    status: u16,
    headers: Vec<(&'static str, Vec<u8>)>,
    body: Vec<u8>,
}

impl Reply {
    fn new(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Tyrant's style: a `text/plain` body of one line.
    fn text(status: u16, line: &str) -> Reply {
        let mut body = Vec::with_capacity(line.len() + 1);
        body.extend_from_slice(line.as_bytes());
        body.push(b'\n');
        Reply {
            status,
            headers: vec![("Content-Type", b"text/plain".to_vec())],
            body,
        }
    }

    fn header(mut self, name: &'static str, value: impl Into<Vec<u8>>) -> Reply {
        self.headers.push((name, value.into()));
        self
    }
}

/// Execute one request, appending its response to `out`. [`Next::Close`] when the request
/// did not ask to keep the connection. Kyoto Tycoon's cursors live only for this request.
pub fn execute(
    store: &dyn Store,
    shared: &Shared,
    req: &Request<'_>,
    now: u64,
    out: &mut Vec<u8>,
) -> Next {
    execute_with(store, shared, &mut KtCursors::new(), req, now, out)
}

/// [`execute`] on a connection that keeps Kyoto Tycoon's cursors in `curs`.
pub fn execute_with<'s>(
    store: &'s dyn Store,
    shared: &Shared,
    curs: &mut KtCursors<'s>,
    req: &Request<'_>,
    now: u64,
    out: &mut Vec<u8>,
) -> Next {
    let reply = match flush_if_due(store, shared, now) {
        Err(e) => Reply::text(500, &e.to_string()),
        Ok(()) => match req.path().strip_prefix("/rpc/") {
            Some(name) => rpc(store, shared, curs, req, name, now),
            None => rest(store, shared, req, now),
        },
    };
    send(out, req, now, reply)
}

fn send(out: &mut Vec<u8>, req: &Request<'_>, now: u64, reply: Reply) -> Next {
    let mut date = Vec::with_capacity(29);
    http::write_http_date(&mut date, now);
    let mut headers: Vec<(&str, &[u8])> = Vec::with_capacity(reply.headers.len() + 2);
    headers.push(("Date", date.as_slice()));
    headers.extend(reply.headers.iter().map(|(n, v)| (*n, v.as_slice())));
    if req.keep_alive && req.version == 0 {
        headers.push(("Connection", b"Keep-Alive"));
    }
    let head_only = req.method == Method::Head;
    http::write_response(
        out,
        reply.status,
        &headers,
        &reply.body,
        req.keep_alive,
        head_only,
    );
    if req.keep_alive {
        Next::Continue
    } else {
        Next::Close
    }
}

fn bump(counter: &Counter) {
    counter.add(1);
}

/// Kyoto Cabinet's error text: `DB: <code>: <name>: <message>`.
pub(crate) fn db_error(code: u8, message: &str) -> String {
    let name = match code {
        6 => "record duplication",
        7 => "no record",
        8 => "logical inconsistency",
        _ => "system error",
    };
    format!("DB: {code}: {name}: {message}")
}

pub(crate) const NO_RECORD: &str = "DB: 7: no record: no record";

// ----- numbers as Kyoto Cabinet reads them -----

/// `kc::atoi`: leading spaces, a sign, digits; anything after them is ignored; no digits is
/// 0. Saturates instead of overflowing.
pub(crate) fn atoi(s: &[u8]) -> i64 {
    let s = &s[s.iter().position(|&b| b > b' ').unwrap_or(s.len())..];
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let mut n: i64 = 0;
    for &d in digits.iter().take_while(|b| b.is_ascii_digit()) {
        let d = i64::from(d - b'0');
        n = if neg {
            n.saturating_mul(10).saturating_sub(d)
        } else {
            n.saturating_mul(10).saturating_add(d)
        };
    }
    n
}

/// `kc::atof`: the longest leading decimal number (`inf` and `nan` included); 0 when none.
fn atof(s: &[u8]) -> f64 {
    let s = &s[s.iter().position(|&b| b > b' ').unwrap_or(s.len())..];
    let s = &s[..s.len().min(64)];
    let Ok(s) = std::str::from_utf8(
        &s[..s
            .iter()
            .position(|b| !(b.is_ascii_alphanumeric() || b"+-.".contains(b)))
            .unwrap_or(s.len())],
    ) else {
        return 0.0;
    };
    (1..=s.len())
        .rev()
        .find_map(|n| s.get(..n).and_then(|p| p.parse::<f64>().ok()))
        .unwrap_or(0.0)
}

/// The absolute expiration (0 = never) of Kyoto Tycoon's `xt` parameter: absent → never, else
/// as the binary protocol reads it ([`kt_expiry`]).
pub(crate) fn kt_expiry_param(xt: Option<&[u8]>, now: u64) -> u64 {
    xt.map_or(0, |xt| kt_expiry(atoi(xt), now))
}

// ----- Kyoto Tycoon's TSV-RPC -----

/// The input of a procedure: query string first, then the body; the last value of a name
/// wins (Kyoto Tycoon reads both into one map).
pub(crate) type Input<'a> = BTreeMap<Cow<'a, [u8]>, Cow<'a, [u8]>>;
/// The output of a procedure, sent sorted by name like Kyoto Tycoon's map.
pub(crate) type Output = BTreeMap<Vec<u8>, Vec<u8>>;

fn rpc_input<'a>(req: &'a Request<'_>) -> Result<Input<'a>, &'static str> {
    let mut input = Input::new();
    if let Some(q) = req.query() {
        for pair in http::form_pairs(q.as_bytes()) {
            let (n, v) = pair.map_err(|_| "bad escape in the query string")?;
            input.insert(n, v);
        }
    }
    let ct = req.header("content-type").unwrap_or_default();
    const FORM: &[u8] = b"application/x-www-form-urlencoded";
    if ct.len() >= FORM.len() && ct[..FORM.len()].eq_ignore_ascii_case(FORM) {
        for pair in http::form_pairs(&req.body) {
            let (n, v) = pair.map_err(|_| "bad escape in the form body")?;
            input.insert(n, v);
        }
    } else if let Some(enc) = ColEnc::from_content_type(ct) {
        for (n, v) in kt_tsv::parse(&req.body, enc).map_err(|e| e.message)? {
            input.insert(n, v);
        }
    }
    Ok(input)
}

pub(crate) fn get<'i>(input: &'i Input<'_>, name: &str) -> Option<&'i [u8]> {
    input.get(name.as_bytes()).map(|v| v.as_ref())
}

pub(crate) fn set(out: &mut Output, name: &str, value: impl Into<Vec<u8>>) {
    out.insert(name.as_bytes().to_vec(), value.into());
}

/// The result of a procedure: an HTTP status (200, 400, 403, 450, 500, 501); the output map
/// carries `ERROR` for the others.
pub(crate) type Rv = u16;

pub(crate) fn fail(out: &mut Output, status: Rv, message: impl Into<Vec<u8>>) -> Rv {
    out.insert(b"ERROR".to_vec(), message.into());
    status
}

fn rpc<'s>(
    store: &'s dyn Store,
    shared: &Shared,
    curs: &mut KtCursors<'s>,
    req: &Request<'_>,
    name: &str,
    now: u64,
) -> Reply {
    let mut out = Output::new();
    let status = match (http::percent_decode(name.as_bytes()), rpc_input(req)) {
        (Err(_), _) => fail(&mut out, 400, "bad escape in the procedure name"),
        (_, Err(msg)) => fail(&mut out, 400, msg),
        (Ok(name), Ok(input)) => match procedure(store, shared, curs, &name, &input, now, &mut out)
        {
            Ok(status) => status,
            Err(Error::TooLarge(m)) => {
                out.clear();
                fail(&mut out, 400, format!("invalid parameters: {m}"))
            }
            Err(e) => {
                out.clear();
                fail(&mut out, 500, db_error(9, &e.to_string()))
            }
        },
    };
    let enc = kt_tsv::choose_encoding(out.iter().map(|(n, v)| (&n[..], &v[..])));
    let mut body = Vec::new();
    kt_tsv::encode(&mut body, out.iter().map(|(n, v)| (&n[..], &v[..])), enc);
    Reply {
        status,
        headers: vec![("Content-Type", enc.content_type().as_bytes().to_vec())],
        body,
    }
}

/// The operation the command mask knows a procedure as (`None`: always allowed).
fn procedure_op(name: &[u8], input: &Input<'_>) -> Option<Op> {
    Some(match name {
        b"set" | b"replace" | b"cas" | b"set_bulk" => Op::Put,
        b"add" => Op::PutKeep,
        b"append" => Op::PutCat,
        b"increment" => Op::AddInt,
        b"increment_double" => Op::AddDouble,
        b"remove" | b"remove_bulk" | b"seize" => Op::Out,
        b"get" => Op::Get,
        b"get_bulk" => Op::Mget,
        b"check" => Op::Vsiz,
        b"match_prefix" | b"match_regex" => Op::Fwmkeys,
        b"clear" => Op::Vanish,
        b"status" | b"report" => Op::Stat,
        b"vacuum" => Op::Optimize,
        b"synchronize" if get(input, "command").is_some() => Op::Copy,
        b"synchronize" => Op::Sync,
        b"play_script" => Op::Ext,
        _ => return None,
    })
}

/// Whether the `DB` parameter names our one database: absent, empty, a number that reads as
/// 0, or the file name of the database path.
pub(crate) fn db_ok(input: &Input<'_>, shared: &Shared) -> bool {
    match get(input, "DB") {
        None | Some(b"") => true,
        Some(d) if d[0].is_ascii_digit() => atoi(d) == 0,
        Some(d) => {
            let base = shared.db_name.rsplit('/').next().unwrap_or("");
            !base.is_empty() && d == base.as_bytes()
        }
    }
}

/// The records (`_name` → value) of a bulk procedure, without the underscore.
fn bulk<'i>(input: &'i Input<'_>) -> impl Iterator<Item = (&'i [u8], &'i [u8])> {
    input
        .iter()
        .filter_map(|(n, v)| n.strip_prefix(b"_").map(|k| (k, v.as_ref())))
}

fn procedure<'s>(
    store: &'s dyn Store,
    shared: &Shared,
    curs: &mut KtCursors<'s>,
    name: &[u8],
    input: &Input<'_>,
    now: u64,
    out: &mut Output,
) -> Result<Rv, Error> {
    if let Some(rv) = kt_cursor::procedure(store, shared, curs, name, input, now, out) {
        return rv;
    }
    match name {
        b"void" => return Ok(200),
        b"echo" => {
            for (n, v) in input {
                out.insert(n.to_vec(), v.to_vec());
            }
            return Ok(200);
        }
        _ => {}
    }
    let Some(op) = procedure_op(name, input) else {
        let name = String::from_utf8_lossy(name);
        return Ok(fail(out, 501, format!("not implemented: {name}")));
    };
    if shared.mask.denies(op, Proto::Http) {
        return Ok(fail(out, 403, "forbidden"));
    }
    if name == b"report" {
        report(store, shared, now, out);
        return Ok(200);
    }
    if name == b"play_script" {
        return Ok(fail(out, 501, "the scripting extention is disabled"));
    }
    if !db_ok(input, shared) {
        return Ok(fail(out, 400, "no such database"));
    }
    let key = get(input, "key");
    let value = get(input, "value");
    let expires = kt_expiry_param(get(input, "xt"), now);
    let invalid = |out: &mut Output| Ok(fail(out, 400, "invalid parameters"));
    match name {
        b"status" => {
            status(store, shared, out);
            Ok(200)
        }
        b"clear" => {
            store.vanish()?;
            Ok(200)
        }
        b"synchronize" => {
            store.sync()?;
            if get(input, "command").is_some() {
                return Ok(fail(
                    out,
                    450,
                    "postprocessing commands are not supported by Kura",
                ));
            }
            Ok(200)
        }
        b"vacuum" => {
            store.optimize("")?;
            Ok(200)
        }
        b"set" => {
            let (Some(key), Some(value)) = (key, value) else {
                return invalid(out);
            };
            bump(&shared.cmd_set);
            store.put_with(key, value, 0, expires)?;
            Ok(200)
        }
        b"add" | b"replace" => {
            let (Some(key), Some(value)) = (key, value) else {
                return invalid(out);
            };
            bump(&shared.cmd_set);
            let outcome = if name == b"add" {
                store.putkeep(key, value, 0, expires)?
            } else {
                store.replace(key, value, 0, expires)?
            };
            Ok(match outcome {
                Outcome::Stored(_) => 200,
                Outcome::Exists => fail(out, 450, db_error(6, "record duplication")),
                _ => fail(out, 450, NO_RECORD),
            })
        }
        b"append" => {
            let (Some(key), Some(value)) = (key, value) else {
                return invalid(out);
            };
            bump(&shared.cmd_set);
            append(store, key, value, expires)?;
            Ok(200)
        }
        b"increment" => {
            let (Some(key), Some(num)) = (key, get(input, "num")) else {
                return invalid(out);
            };
            let orig = match get(input, "orig") {
                None => 0,
                Some(b"try") => i64::MIN,
                Some(b"set") => i64::MAX,
                Some(o) => atoi(o),
            };
            Ok(match increment(store, key, atoi(num), orig, expires)? {
                Some(n) => {
                    set(out, "num", n.to_string());
                    200
                }
                None => fail(out, 450, db_error(8, "logical inconsistency")),
            })
        }
        b"increment_double" => {
            let (Some(key), Some(num)) = (key, get(input, "num")) else {
                return invalid(out);
            };
            let orig = match get(input, "orig") {
                None => 0.0,
                Some(b"try") => f64::NEG_INFINITY,
                Some(b"set") => f64::INFINITY,
                Some(o) => atof(o),
            };
            Ok(
                match increment_double(store, key, atof(num), orig, expires)? {
                    Some(n) => {
                        set(out, "num", format!("{n:.6}"));
                        200
                    }
                    None => fail(out, 450, db_error(8, "logical inconsistency")),
                },
            )
        }
        b"cas" => {
            let Some(key) = key else {
                return invalid(out);
            };
            bump(&shared.cmd_set);
            let (oval, nval) = (get(input, "oval"), get(input, "nval"));
            if let Some(n) = nval {
                check_sizes(key, n.len())?;
            }
            let mut ok = false;
            store.accept(key, &mut |cur| {
                ok = match cur {
                    Some(c) => oval == Some(c.value),
                    None => oval.is_none(),
                };
                match (ok, cur, nval) {
                    (false, ..) => Decision::Keep,
                    (true, Some(_), None) => Decision::Remove,
                    (true, None, None) => Decision::Keep,
                    (true, _, Some(n)) => Decision::Put {
                        value: Value::Lent(n),
                        flags: 0,
                        expires,
                    },
                }
            })?;
            Ok(if ok {
                200
            } else {
                fail(out, 450, db_error(8, "status conflict"))
            })
        }
        b"remove" => {
            let Some(key) = key else {
                return invalid(out);
            };
            Ok(if store.out(key)? {
                bump(&shared.delete_hits);
                200
            } else {
                bump(&shared.delete_misses);
                fail(out, 450, NO_RECORD)
            })
        }
        b"get" | b"seize" | b"check" => {
            let Some(key) = key else {
                return invalid(out);
            };
            bump(&shared.cmd_get);
            let found = if name == b"seize" {
                let mut taken = None;
                store.accept(key, &mut |cur| match cur {
                    Some(c) => {
                        taken = Some((c.value.to_vec(), c.meta.expires));
                        Decision::Remove
                    }
                    None => Decision::Keep,
                })?;
                taken
            } else {
                store.get(key)?.map(|r| (r.value, r.meta.expires))
            };
            let Some((v, expires)) = found else {
                bump(&shared.get_misses);
                return Ok(fail(out, 450, NO_RECORD));
            };
            bump(&shared.get_hits);
            if name == b"check" {
                set(out, "vsiz", v.len().to_string());
            } else {
                set(out, "value", v);
            }
            if expires != 0 {
                set(out, "xt", expires.to_string());
            }
            Ok(200)
        }
        b"set_bulk" => {
            let mut ops = Vec::new();
            for (k, v) in bulk(input) {
                check_sizes(k, v.len())?;
                ops.push(BatchOp::Put {
                    key: k.to_vec(),
                    value: v.to_vec(),
                    flags: 0,
                    expires,
                });
            }
            if !ops.is_empty() {
                store.write_batch(&ops)?;
            }
            shared.cmd_set.add(ops.len() as u64);
            set(out, "num", ops.len().to_string());
            Ok(200)
        }
        b"remove_bulk" => {
            let mut n = 0u64;
            for (k, _) in bulk(input) {
                if store.out(k)? {
                    n += 1;
                }
            }
            set(out, "num", n.to_string());
            Ok(200)
        }
        b"get_bulk" => {
            let keys: Vec<&[u8]> = bulk(input).map(|(k, _)| k).collect();
            let records = store.get_multi(&keys)?;
            let mut n = 0u64;
            for (k, r) in keys.iter().zip(records) {
                bump(&shared.cmd_get);
                if let Some(r) = r {
                    n += 1;
                    let mut name = Vec::with_capacity(k.len() + 1);
                    name.push(b'_');
                    name.extend_from_slice(k);
                    out.insert(name, r.value);
                }
            }
            set(out, "num", n.to_string());
            Ok(200)
        }
        b"match_prefix" | b"match_regex" => {
            let max = match get(input, "max").map(atoi) {
                Some(m) if m >= 0 => usize::try_from(m).unwrap_or(usize::MAX),
                _ => usize::MAX,
            };
            let keys = if name == b"match_prefix" {
                let Some(prefix) = get(input, "prefix") else {
                    return invalid(out);
                };
                store.fwmkeys(prefix, max)?
            } else {
                let Some(pattern) = get(input, "regex") else {
                    return invalid(out);
                };
                let re = std::str::from_utf8(pattern)
                    .ok()
                    .and_then(|p| regex::bytes::Regex::new(p).ok());
                let Some(re) = re else {
                    return Ok(fail(out, 450, db_error(8, "compilation failed")));
                };
                let mut keys = Vec::new();
                let mut cur = store.cursor()?;
                while keys.len() < max {
                    let Some((k, _)) = cur.next()? else { break };
                    if re.is_match(&k) {
                        keys.push(k);
                    }
                }
                keys
            };
            set(out, "num", keys.len().to_string());
            for (i, k) in keys.into_iter().enumerate() {
                let mut name = Vec::with_capacity(k.len() + 1);
                name.push(b'_');
                name.extend_from_slice(&k);
                out.insert(name, i.to_string().into_bytes());
            }
            Ok(200)
        }
        _ => Ok(fail(out, 501, "not implemented")),
    }
}

/// Kyoto Tycoon's append: concatenate (or create), and take the new expiration.
fn append(store: &dyn Store, key: &[u8], value: &[u8], expires: u64) -> Result<(), Error> {
    check_sizes(key, value.len())?;
    let mut too_large = false;
    store.accept(key, &mut |cur| {
        let (mut v, flags) = match cur {
            Some(c) => {
                if c.value.len() + value.len() > kura_engine::store::MAX_VALUE_LEN {
                    too_large = true;
                    return Decision::Keep;
                }
                let mut v = Vec::with_capacity(c.value.len() + value.len());
                v.extend_from_slice(c.value);
                (v, c.meta.flags)
            }
            None => (Vec::with_capacity(value.len()), 0),
        };
        v.extend_from_slice(value);
        Decision::Put {
            value: v.into(),
            flags,
            expires,
        }
    })?;
    if too_large {
        return Err(Error::TooLarge("appended value".into()));
    }
    Ok(())
}

/// Kyoto Tycoon's `increment` on an 8-byte big-endian integer. `orig`: the start value of an
/// absent record; `i64::MIN` fails on an absent record, `i64::MAX` ignores the current value.
/// Adding 0 reads without writing. `None`: the record is not 8 bytes, or absent with `try`.
fn increment(
    store: &dyn Store,
    key: &[u8],
    num: i64,
    orig: i64,
    expires: u64,
) -> Result<Option<i64>, Error> {
    let mut result = None;
    store.accept(key, &mut |cur| {
        result = None;
        let (n, flags) = match cur {
            Some(c) => {
                let Ok(b) = <[u8; 8]>::try_from(c.value) else {
                    return Decision::Keep;
                };
                if orig == i64::MAX {
                    (num, c.meta.flags)
                } else {
                    let old = i64::from_be_bytes(b);
                    if num == 0 {
                        result = Some(old);
                        return Decision::Keep;
                    }
                    (num.wrapping_add(old), c.meta.flags)
                }
            }
            None if orig == i64::MIN => return Decision::Keep,
            None if orig == i64::MAX => (num, 0),
            None => (num.wrapping_add(orig), 0),
        };
        result = Some(n);
        Decision::Put {
            value: Value::copied(&n.to_be_bytes()),
            flags,
            expires,
        }
    })?;
    Ok(result)
}

/// Kyoto Tycoon's 16-byte fixed-point number: the integral part, then the fraction × 10^15,
/// both big-endian i64.
fn fixed_point(integ: i64, fract: i64) -> Vec<u8> {
    let mut v = Vec::with_capacity(16);
    v.extend_from_slice(&integ.to_be_bytes());
    v.extend_from_slice(&fract.to_be_bytes());
    v
}

/// Split a finite or infinite number into Kyoto Tycoon's (integral, fraction) pair; `None` for
/// NaN.
fn split_double(n: f64) -> Option<(i64, i64)> {
    if n.is_nan() {
        return None;
    }
    if n.is_infinite() {
        return Some((if n > 0.0 { i64::MAX } else { i64::MIN }, 0));
    }
    let integ = n.trunc();
    Some((integ as i64, ((n - integ) * DEC_UNIT as f64) as i64))
}

/// Kyoto Tycoon's `increment_double` (same `orig` conventions as [`increment`], with ±∞).
fn increment_double(
    store: &dyn Store,
    key: &[u8],
    num: f64,
    orig: f64,
    expires: u64,
) -> Result<Option<f64>, Error> {
    let mut result = None;
    store.accept(key, &mut |cur| {
        result = None;
        match cur {
            Some(c) => {
                if c.value.len() != 16 {
                    return Decision::Keep;
                }
                let (mut integ, mut fract) = if orig == f64::INFINITY {
                    (0, 0)
                } else {
                    let mut a = [0u8; 8];
                    let mut b = [0u8; 8];
                    a.copy_from_slice(&c.value[..8]);
                    b.copy_from_slice(&c.value[8..]);
                    (i64::from_be_bytes(a), i64::from_be_bytes(b))
                };
                if integ == i64::MIN && fract == i64::MIN {
                    return Decision::Keep;
                }
                if integ == i64::MAX {
                    result = Some(f64::INFINITY);
                    return Decision::Keep;
                }
                if integ == i64::MIN {
                    result = Some(f64::NEG_INFINITY);
                    return Decision::Keep;
                }
                if num == 0.0 && orig != f64::INFINITY {
                    result = Some(integ as f64 + fract as f64 / DEC_UNIT as f64);
                    return Decision::Keep;
                }
                let Some((di, df)) = split_double(num) else {
                    return Decision::Keep;
                };
                let value = if num.is_infinite() {
                    result = Some(num);
                    fixed_point(di, 0)
                } else {
                    integ = integ.wrapping_add(di);
                    fract = fract.wrapping_add(df);
                    if fract >= DEC_UNIT {
                        integ = integ.wrapping_add(1);
                        fract -= DEC_UNIT;
                    }
                    result = Some(integ as f64 + fract as f64 / DEC_UNIT as f64);
                    fixed_point(integ, fract)
                };
                Decision::Put {
                    value: value.into(),
                    flags: c.meta.flags,
                    expires,
                }
            }
            None => {
                if orig.is_nan() || orig == f64::NEG_INFINITY {
                    return Decision::Keep;
                }
                let n = if orig.is_finite() { num + orig } else { num };
                let Some((integ, fract)) = split_double(n) else {
                    return Decision::Keep;
                };
                result = Some(n);
                Decision::Put {
                    value: fixed_point(integ, fract).into(),
                    flags: 0,
                    expires,
                }
            }
        }
    })?;
    Ok(result)
}

/// Kyoto Cabinet's numeric database type of a kind (`type` / `realtype` in `status`).
fn kc_type(kind: Kind) -> u32 {
    match kind {
        Kind::MemHash => 0x20,  // CacheDB, ktserver's default `*`
        Kind::MemTree => 0x21,  // GrassDB, `+`
        Kind::DiskHash => 0x30, // HashDB
    }
}

fn status(store: &dyn Store, shared: &Shared, out: &mut Output) {
    for (k, v) in store.describe() {
        out.insert(k.into_bytes(), v.into_bytes());
    }
    if !shared.db_name.is_empty() {
        set(out, "path", shared.db_name.as_str());
    }
    let ty = kc_type(store.kind()).to_string();
    set(out, "type", ty.as_str());
    set(out, "realtype", ty);
    set(out, "count", store.count().to_string());
    set(out, "size", store.size().to_string());
}

fn report(store: &dyn Store, shared: &Shared, now: u64, out: &mut Output) {
    let c = |a: &Counter| a.get().to_string();
    let (count, size) = (store.count(), store.size());
    set(
        out,
        "db_0",
        format!("count={count} size={size} path={}", shared.db_name),
    );
    set(out, "db_total_count", count.to_string());
    set(out, "db_total_size", size.to_string());
    set(
        out,
        "serv_conn_count",
        shared.curr_connections.load(Relaxed).to_string(),
    );
    set(out, "serv_task_count", "0");
    set(out, "serv_current_time", format!("{now}.000000"));
    set(
        out,
        "serv_running_term",
        format!("{}.000000", now.saturating_sub(shared.started)),
    );
    set(out, "serv_proc_id", std::process::id().to_string());
    set(out, "cnt_get", c(&shared.cmd_get));
    set(out, "cnt_get_misses", c(&shared.get_misses));
    set(out, "cnt_set", c(&shared.cmd_set));
    let (hits, misses) = (shared.delete_hits.get(), shared.delete_misses.get());
    set(out, "cnt_remove", (hits + misses).to_string());
    set(out, "cnt_remove_misses", misses.to_string());
    set(
        out,
        "conf_kt_version",
        format!("{KT_VERSION} (kura {})", env!("CARGO_PKG_VERSION")),
    );
    set(out, "conf_os_name", os_name());
}

// ----- REST (Tokyo Tyrant and Kyoto Tycoon) -----

fn forbidden() -> Reply {
    Reply::text(403, "Forbidden")
}

/// A miss in both dialects: Tyrant's body, Kyoto Tycoon's header.
fn not_found() -> Reply {
    Reply::text(404, "Not Found").header("X-Kt-Error", NO_RECORD)
}

fn internal(e: &Error) -> Reply {
    Reply::text(500, "Internal Server Error").header("X-Kt-Error", db_error(9, &e.to_string()))
}

fn xt_header(reply: Reply, expires: u64) -> Reply {
    if expires == 0 {
        return reply;
    }
    let mut date = Vec::with_capacity(29);
    http::write_http_date(&mut date, expires);
    reply.header("X-Kt-Xt", date)
}

fn rest(store: &dyn Store, shared: &Shared, req: &Request<'_>, now: u64) -> Reply {
    let deny = |op| shared.mask.denies(op, Proto::Http);
    if req.method == Method::Options {
        return if deny(Op::Stat) {
            forbidden()
        } else {
            options(store, shared, now)
        };
    }
    if let Method::Other(_) = req.method {
        return Reply::text(501, "Not Implemented");
    }
    let path = req.path();
    let raw = path.strip_prefix('/').unwrap_or(path);
    let Ok(key) = http::percent_decode(raw.as_bytes()) else {
        return Reply::text(400, "Bad Request");
    };
    let result = match req.method {
        Method::Get | Method::Head => {
            // Tyrant counts HEAD as vsiz.
            let op = if req.method == Method::Get {
                Op::Get
            } else {
                Op::Vsiz
            };
            if deny(op) {
                return forbidden();
            }
            rest_get(store, shared, &key)
        }
        Method::Put => rest_put(store, shared, req, &key),
        Method::Delete => {
            if deny(Op::Out) {
                return forbidden();
            }
            rest_delete(store, shared, req, &key)
        }
        _ => rest_post(store, shared, req, &key),
    };
    result.unwrap_or_else(|e| internal(&e))
}

fn rest_get(store: &dyn Store, shared: &Shared, key: &[u8]) -> Result<Reply, Error> {
    bump(&shared.cmd_get);
    Ok(match store.get(key)? {
        Some(r) => {
            bump(&shared.get_hits);
            let reply = Reply {
                status: 200,
                headers: vec![("Content-Type", b"application/octet-stream".to_vec())],
                body: r.value,
            };
            xt_header(reply, r.meta.expires)
        }
        None => {
            bump(&shared.get_misses);
            not_found()
        }
    })
}

/// Whether a request speaks Kyoto Tycoon's REST dialect: an `X-Kt-*` header and no `X-TT-*`.
fn kt_dialect(req: &Request<'_>) -> bool {
    req.headers.any_prefixed("x-kt-") && !req.headers.any_prefixed("x-tt-")
}

fn rest_put(
    store: &dyn Store,
    shared: &Shared,
    req: &Request<'_>,
    key: &[u8],
) -> Result<Reply, Error> {
    #[derive(PartialEq)]
    enum Mode {
        Put,
        Keep,
        Cat,
        Replace,
    }
    let mode = match req.header("x-tt-pdmode").map(atoi) {
        Some(1) => Mode::Keep,
        Some(2) => Mode::Cat,
        Some(_) => Mode::Put,
        None => match req.header("x-kt-mode") {
            Some(m) if m.eq_ignore_ascii_case(b"add") => Mode::Keep,
            Some(m) if m.eq_ignore_ascii_case(b"replace") => Mode::Replace,
            _ => Mode::Put,
        },
    };
    let op = match mode {
        Mode::Put | Mode::Replace => Op::Put,
        Mode::Keep => Op::PutKeep,
        Mode::Cat => Op::PutCat,
    };
    if shared.mask.denies(op, Proto::Http) {
        return Ok(forbidden());
    }
    let expires = match req.header("x-kt-xt").and_then(http::parse_http_date) {
        Some(t) if t > 0 && t < XT_MAX => t,
        _ => 0,
    };
    bump(&shared.cmd_set);
    let value = &req.body[..];
    let kt = kt_dialect(req);
    let stored = match mode {
        Mode::Put => {
            store.put_with(key, value, 0, expires)?;
            Ok(())
        }
        Mode::Cat => {
            store.putcat(key, value)?;
            Ok(())
        }
        Mode::Keep => match store.putkeep(key, value, 0, expires)? {
            Outcome::Stored(_) => Ok(()),
            _ if kt => Err((450, db_error(6, "record duplication"))),
            _ => Err((409, String::new())),
        },
        Mode::Replace => match store.replace(key, value, 0, expires)? {
            Outcome::Stored(_) => Ok(()),
            _ => Err((450, NO_RECORD.to_string())),
        },
    };
    Ok(match (stored, kt) {
        (Ok(()), false) => Reply::text(201, "Created"),
        (Ok(()), true) => {
            let reply = Reply::new(201);
            match req.header("host") {
                Some(host) => {
                    let mut url = b"http://".to_vec();
                    url.extend_from_slice(host);
                    url.extend_from_slice(req.path().as_bytes());
                    reply.header("Location", url)
                }
                None => reply,
            }
        }
        (Err((409, _)), _) => Reply::text(409, "Conflict"),
        (Err((status, msg)), _) => Reply::new(status).header("X-Kt-Error", msg),
    })
}

fn rest_delete(
    store: &dyn Store,
    shared: &Shared,
    req: &Request<'_>,
    key: &[u8],
) -> Result<Reply, Error> {
    Ok(if store.out(key)? {
        bump(&shared.delete_hits);
        if kt_dialect(req) {
            Reply::new(204)
        } else {
            Reply::text(200, "OK")
        }
    } else {
        bump(&shared.delete_misses);
        not_found()
    })
}

/// Tyrant's POST: a script extension (`X-TT-XNAME`) or a `misc` function (`X-TT-MNAME`).
fn rest_post(
    store: &dyn Store,
    shared: &Shared,
    req: &Request<'_>,
    _key: &[u8],
) -> Result<Reply, Error> {
    let named = |h| req.header(h).filter(|v| !v.is_empty());
    if named("x-tt-xname").is_some() {
        if shared.mask.denies(Op::Ext, Proto::Http) {
            return Ok(forbidden());
        }
        // No script extension is ever loaded: ttserver without `-ext` answers 500.
        return Ok(Reply::text(500, "Internal Server Error"));
    }
    let Some(mname) = named("x-tt-mname") else {
        return Ok(Reply::text(400, "Bad Request"));
    };
    if shared.mask.denies(Op::Misc, Proto::Http) {
        return Ok(forbidden());
    }
    // Tyrant passes the values of the form in the order their names first appear (a later
    // duplicate replaces the value in place).
    let mut args: Vec<Cow<'_, [u8]>> = Vec::new();
    let mut seen: HashMap<Cow<'_, [u8]>, usize> = HashMap::new();
    for pair in http::form_pairs(&req.body) {
        let Ok((n, v)) = pair else {
            return Ok(Reply::text(400, "Bad Request"));
        };
        match seen.get(&n) {
            Some(&i) => args[i] = v,
            None => {
                seen.insert(n, args.len());
                args.push(v);
            }
        }
    }
    // The binary protocol's misc functions; an HTTP request has no connection to keep an
    // iterator in, so misc iterinit / iternext only see this request's state.
    let args: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
    let Some(results) = crate::tt_exec::misc(store, &mut TtState::new(), mname, &args)? else {
        return Ok(Reply::text(500, "Internal Server Error"));
    };
    let mut body = Vec::new();
    for (i, r) in results.iter().enumerate() {
        if i > 0 {
            body.push(b'&');
        }
        body.extend_from_slice(format!("res{}=", i + 1).as_bytes());
        http::percent_encode(&mut body, r, b"_-.!~*'()", true);
    }
    Ok(Reply {
        status: 200,
        headers: vec![(
            "Content-Type",
            b"application/x-www-form-urlencoded".to_vec(),
        )],
        body,
    })
}

/// The operating system as Tyrant's `TTSYSNAME` and Kyoto Cabinet's `OSNAME` spell it.
fn os_name() -> &'static str {
    match std::env::consts::OS {
        "linux" => "Linux",
        "macos" => "Mac OS X",
        "freebsd" => "FreeBSD",
        "netbsd" => "NetBSD",
        "openbsd" => "OpenBSD",
        "solaris" => "SunOS",
        other => other,
    }
}

/// Tyrant's OPTIONS: the allowed methods (as the mask leaves them) and the server's
/// description in `X-TT-*` headers.
fn options(store: &dyn Store, shared: &Shared, now: u64) -> Reply {
    let deny = |op| shared.mask.denies(op, Proto::Http);
    let mut allow = String::from("OPTIONS");
    for (op, method) in [
        (Op::Get, "GET"),
        (Op::Vsiz, "HEAD"),
        (Op::Put, "PUT"),
        (Op::Ext, "POST"),
        (Op::Out, "DELETE"),
    ] {
        if !deny(op) {
            allow.push_str(", ");
            allow.push_str(method);
        }
    }
    let ty = match store.kind() {
        Kind::MemHash => "on-memory hash",
        Kind::MemTree => "on-memory tree",
        Kind::DiskHash => "hash",
    };
    let mut reply = Reply::new(200)
        .header("Allow", allow)
        .header("X-TT-VERSION", TT_VERSION)
        .header("X-TT-LIBVER", TT_LIBVER.to_string())
        .header("X-TT-PROTVER", TT_PROTVER)
        .header("X-TT-OS", os_name())
        .header("X-TT-TIME", format!("{now}.000000"))
        .header("X-TT-PID", std::process::id().to_string())
        .header("X-TT-SID", shared.sid.to_string())
        .header("X-TT-TYPE", ty);
    if !shared.db_name.is_empty() {
        reply = reply.header("X-TT-PATH", shared.db_name.as_str());
    }
    reply
        .header("X-TT-RNUM", store.count().to_string())
        .header("X-TT-SIZE", store.size().to_string())
        .header(
            "X-TT-BIGEND",
            if cfg!(target_endian = "big") {
                "1"
            } else {
                "0"
            },
        )
        .header(
            "X-TT-RU_REAL",
            format!("{}.000000", now.saturating_sub(shared.started)),
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mask::Mask;
    use kura_proto::http::{decode, Decoded, Limits};

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
            assert_eq!(c("synchronize", &[(b"command", b"backup")]).status, 450);
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
        let m =
            |name: &[u8], body: &[u8]| call(db, &sh, "POST", "/", &[("X-TT-MNAME", name)], body);
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
        assert_eq!(m(b"optimize", b"a=bogus%3D1").status, 500);
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
        let (db, mut sh) = fresh();
        sh.mask = Mask::NONE.mask("out,vsiz,addint,misc").unwrap();
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
        sh.mask = Mask::NONE.mask("putkeep").unwrap();
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
        sh.mask = Mask::NONE.mask("allhttp").unwrap();
        assert_eq!(call(db, &sh, "GET", "/rpc/void", &[], b"").status, 200);
        assert_eq!(call(db, &sh, "GET", "/rpc/echo?a=1", &[], b"").status, 200);
        assert_eq!(call(db, &sh, "GET", "/rpc/status", &[], b"").status, 403);
        assert_eq!(call(db, &sh, "OPTIONS", "*", &[], b"").status, 403);
        assert_eq!(call(db, &sh, "PUT", "/k", &[], b"x").status, 403);
        // Another protocol's mask does not apply.
        sh.mask = Mask::NONE.mask("allmc").unwrap();
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
        assert_eq!(split_double(-1.25), Some((-1, -250_000_000_000_000)));
        assert_eq!(split_double(f64::NAN), None);
    }
}
