//! The string commands: GET, SET and its variants, MGET, MSET, APPEND, STRLEN and the
//! counters (INCR…, INCRBYFLOAT).

use super::keys::{expires_at, now_ms, Expiry};
use super::{arity_error, err, int_arg, Call, Done, NOT_INT, SYNTAX};
use crate::out::{Out, PIN_MIN};
use kura_engine::{BatchOp, Decision, Shown, Store, Value};
use kura_proto::resp;

/// Whether `key` has a live record.
fn present(store: &dyn Store, key: &[u8]) -> Result<bool, kura_engine::Error> {
    store.view(key, &mut |_, _| {})
}

/// A value's reply, straight from the store's memory (a large one queued by reference).
fn reply_value(out: &mut Out, v: Shown<'_>) {
    match v {
        Shown::Bytes(b) => resp::bulk(out, b),
        Shown::Pinned(p) => {
            resp::bulk_header(out, p.len());
            out.push_pinned(p);
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// Read `key` as GET does: its value or a null, counted as a get.
fn get_one(c: &Call<'_, '_, '_>, key: &[u8], out: &mut Out) -> Result<(), kura_engine::Error> {
    c.shared.cmd_get.add(1);
    let hit = c
        .store
        .view_shared(key, PIN_MIN, &mut |v, _| reply_value(out, v))?;
    if hit {
        c.shared.get_hits.add(1);
    } else {
        c.shared.get_misses.add(1);
        resp::null(out, c.resp3());
    }
    Ok(())
}

pub(super) fn get(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    get_one(c, c.args[1], out)?;
    Ok(crate::context::Next::Continue)
}

pub(super) fn mget(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    resp::array(out, c.args.len() - 1);
    for k in &c.args[1..] {
        get_one(c, k, out)?;
    }
    Ok(crate::context::Next::Continue)
}

/// The options of SET (`set`) and GETEX (`!set`), as Redis's
/// `parseExtendedStringArgumentsOrReply` takes them.
#[derive(Default)]
pub(super) struct Opts {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    persist: bool,
    /// The expiration asked for, in unix milliseconds.
    at_ms: Option<i64>,
}

pub(super) fn parse_opts(args: &[&[u8]], set: bool, cmd: &str) -> Result<Opts, super::Reply> {
    let mut o = Opts::default();
    let mut i = 0;
    let mut expire: Option<(&[u8], &[u8])> = None;
    while i < args.len() {
        let a = args[i].to_ascii_uppercase();
        let next = args.get(i + 1);
        let no_expiry = expire.is_none() && !o.keepttl && !o.persist;
        match a.as_slice() {
            b"NX" if set && !o.xx => o.nx = true,
            b"XX" if set && !o.nx => o.xx = true,
            b"GET" if set => o.get = true,
            b"KEEPTTL" if set && no_expiry => o.keepttl = true,
            b"PERSIST" if !set && no_expiry => o.persist = true,
            b"EX" | b"PX" | b"EXAT" | b"PXAT" if no_expiry && next.is_some() => {
                expire = next.map(|n| (args[i], *n));
                i += 1;
            }
            _ => return Err(err(SYNTAX)),
        }
        i += 1;
    }
    if let Some((unit, n)) = expire {
        let n = int_arg(n)?;
        let invalid = || err(format!("ERR invalid expire time in '{cmd}' command"));
        if n <= 0 {
            return Err(invalid());
        }
        let unit = unit.to_ascii_uppercase();
        let ms = match unit.as_slice() {
            b"EX" | b"EXAT" => n.checked_mul(1000).ok_or_else(invalid)?,
            _ => n,
        };
        o.at_ms = Some(match unit.as_slice() {
            b"EX" | b"PX" => ms.checked_add(now_ms()).ok_or_else(invalid)?,
            _ => ms,
        });
    }
    Ok(o)
}

/// Store `value` at `key` on these conditions, as SET does: whether it was stored, and the
/// old value when `get`.
fn set_with(
    c: &Call<'_, '_, '_>,
    key: &[u8],
    value: &[u8],
    o: &Opts,
) -> Result<(bool, Option<Vec<u8>>), super::Reply> {
    if let Err(e) = c.shared.check_value("Redis SET", value.len()) {
        return Err(err(format!("ERR {e}")));
    }
    c.shared.cmd_set.add(1);
    let exp = match o.at_ms {
        Some(at) => expires_at(at, now_ms()),
        None if o.keepttl => Expiry::Keep,
        None => Expiry::At(0),
    };
    if let (false, false, false, Expiry::At(e)) = (o.nx, o.xx, o.get, exp) {
        c.store.put_with(key, value, 0, e)?;
        return Ok((true, None));
    }
    let (mut stored, mut old) = (false, None);
    c.store.accept(key, &mut |cur| {
        stored = false;
        old = cur.filter(|_| o.get).map(|cur| cur.value.to_vec());
        if (o.nx && cur.is_some()) || (o.xx && cur.is_none()) {
            return Decision::Keep;
        }
        stored = true;
        let expires = match exp {
            Expiry::At(e) => e,
            Expiry::Keep => cur.map_or(0, |c| c.meta.expires),
            // Stored, then gone at once, as Redis does with a time in the past.
            Expiry::Past => {
                return if cur.is_some() {
                    Decision::Remove
                } else {
                    Decision::Keep
                }
            }
        };
        Decision::Put {
            value: Value::Lent(value),
            flags: 0,
            expires,
        }
    })?;
    Ok((stored, old))
}

pub(super) fn set(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let o = parse_opts(&c.args[3..], true, "set")?;
    let (stored, old) = set_with(c, c.args[1], c.args[2], &o)?;
    match (o.get, old) {
        (true, Some(v)) => resp::bulk(out, &v),
        (true, None) => resp::null(out, c.resp3()),
        (false, _) if stored => resp::ok(out),
        (false, _) => resp::null(out, c.resp3()),
    }
    Ok(crate::context::Next::Continue)
}

pub(super) fn setnx(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let o = Opts {
        nx: true,
        ..Opts::default()
    };
    let (stored, _) = set_with(c, c.args[1], c.args[2], &o)?;
    resp::integer(out, i64::from(stored));
    Ok(crate::context::Next::Continue)
}

/// SETEX and PSETEX.
pub(super) fn setex(c: &mut Call<'_, '_, '_>, name: &str, out: &mut Out) -> Done {
    let n = int_arg(c.args[2])?;
    let invalid = || err(format!("ERR invalid expire time in '{name}' command"));
    if n <= 0 {
        return Err(invalid());
    }
    let ms = if name == "setex" {
        n.checked_mul(1000).ok_or_else(invalid)?
    } else {
        n
    };
    let o = Opts {
        at_ms: Some(ms.checked_add(now_ms()).ok_or_else(invalid)?),
        ..Opts::default()
    };
    set_with(c, c.args[1], c.args[3], &o)?;
    resp::ok(out);
    Ok(crate::context::Next::Continue)
}

pub(super) fn getset(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let o = Opts {
        get: true,
        ..Opts::default()
    };
    match set_with(c, c.args[1], c.args[2], &o)?.1 {
        Some(v) => resp::bulk(out, &v),
        None => resp::null(out, c.resp3()),
    }
    Ok(crate::context::Next::Continue)
}

pub(super) fn getdel(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let mut old = None;
    c.store.accept(c.args[1], &mut |cur| {
        old = cur.map(|cur| cur.value.to_vec());
        if cur.is_some() {
            Decision::Remove
        } else {
            Decision::Keep
        }
    })?;
    match old {
        Some(v) => resp::bulk(out, &v),
        None => resp::null(out, c.resp3()),
    }
    Ok(crate::context::Next::Continue)
}

pub(super) fn getex(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let o = parse_opts(&c.args[2..], false, "getex")?;
    let exp = match o.at_ms {
        Some(at) => Some(expires_at(at, now_ms())),
        None if o.persist => Some(Expiry::At(0)),
        None => None,
    };
    let mut old = None;
    c.store.accept(c.args[1], &mut |cur| {
        old = cur.map(|cur| cur.value.to_vec());
        match (cur, exp) {
            (None, _) | (_, None) => Decision::Keep,
            (Some(_), Some(Expiry::Past)) => Decision::Remove,
            (Some(_), Some(Expiry::At(e))) => Decision::Touch { expires: e },
            (Some(_), Some(Expiry::Keep)) => Decision::Keep,
        }
    })?;
    match old {
        Some(v) => resp::bulk(out, &v),
        None => resp::null(out, c.resp3()),
    }
    Ok(crate::context::Next::Continue)
}

/// MSET's pairs as one atomic batch (without expiry, as SET leaves them).
fn pairs(c: &Call<'_, '_, '_>, name: &str) -> Result<Vec<BatchOp>, super::Reply> {
    if c.args.len().is_multiple_of(2) {
        return Err(arity_error(name));
    }
    let mut ops = Vec::with_capacity(c.args.len() / 2);
    for kv in c.args[1..].chunks(2) {
        if let Err(e) = c.shared.check_value("Redis MSET", kv[1].len()) {
            return Err(err(format!("ERR {e}")));
        }
        ops.push(BatchOp::Put {
            key: kv[0].to_vec(),
            value: kv[1].to_vec(),
            flags: 0,
            expires: 0,
        });
    }
    Ok(ops)
}

pub(super) fn mset(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let ops = pairs(c, "mset")?;
    c.store.write_batch(&ops)?;
    c.shared.cmd_set.add(ops.len() as u64);
    resp::ok(out);
    Ok(crate::context::Next::Continue)
}

/// MSETNX: nothing when one of the keys exists, else every pair in one batch. (The check and
/// the batch are two steps: a concurrent writer of one of the keys may come between them.)
pub(super) fn msetnx(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let ops = pairs(c, "msetnx")?;
    for op in &ops {
        if present(c.store, op.key())? {
            resp::integer(out, 0);
            return Ok(crate::context::Next::Continue);
        }
    }
    c.store.write_batch(&ops)?;
    c.shared.cmd_set.add(ops.len() as u64);
    resp::integer(out, 1);
    Ok(crate::context::Next::Continue)
}

pub(super) fn append(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let add = c.args[2];
    let max = c.shared.max_value_size;
    let (mut len, mut too_big) = (0usize, false);
    c.store.accept(c.args[1], &mut |cur| {
        too_big = false;
        let old = cur.map_or(&[][..], |c| c.value);
        len = old.len() + add.len();
        if len as u64 > max {
            too_big = true;
            return Decision::Keep;
        }
        let mut v = Vec::with_capacity(len);
        v.extend_from_slice(old);
        v.extend_from_slice(add);
        Decision::Put {
            value: Value::Made(v),
            flags: cur.map_or(0, |c| c.meta.flags),
            expires: cur.map_or(0, |c| c.meta.expires),
        }
    })?;
    if too_big {
        return Err(err(
            "ERR string exceeds maximum allowed size (proto-max-bulk-len)",
        ));
    }
    resp::integer(out, len as i64);
    Ok(crate::context::Next::Continue)
}

pub(super) fn strlen(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let mut n = 0;
    c.store.view(c.args[1], &mut |v, _| n = v.len())?;
    resp::integer(out, n as i64);
    Ok(crate::context::Next::Continue)
}

/// INCR, INCRBY, DECR, DECRBY: the record's value read as a 64-bit integer (none: 0), the
/// result stored in decimal with the record's expiry kept.
pub(super) fn incr(c: &mut Call<'_, '_, '_>, name: &str, out: &mut Out) -> Done {
    let by = match name {
        "incr" => 1,
        "decr" => -1,
        "incrby" => int_arg(c.args[2])?,
        _ => {
            let n = int_arg(c.args[2])?;
            n.checked_neg()
                .ok_or_else(|| err("ERR decrement would overflow"))?
        }
    };
    let mut res: Result<i64, &'static str> = Ok(0);
    c.store.accept(c.args[1], &mut |cur| {
        let old = match cur {
            None => Some(0),
            Some(cur) => resp::parse_i64(cur.value),
        };
        res = match old {
            None => Err(NOT_INT),
            Some(o) => o
                .checked_add(by)
                .ok_or("ERR increment or decrement would overflow"),
        };
        match res {
            Ok(n) => Decision::Put {
                value: Value::copied(n.to_string().as_bytes()),
                flags: cur.map_or(0, |c| c.meta.flags),
                expires: cur.map_or(0, |c| c.meta.expires),
            },
            Err(_) => Decision::Keep,
        }
    })?;
    resp::integer(out, res.map_err(err)?);
    Ok(crate::context::Next::Continue)
}

/// A float as Redis reads one (`strtold` over the whole argument, no spaces, not NaN).
fn parse_float(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.starts_with(char::is_whitespace) || s.ends_with(char::is_whitespace) {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    (!v.is_nan()).then_some(v)
}

pub(super) fn incrbyfloat(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let by = parse_float(c.args[2]).ok_or_else(|| err("ERR value is not a valid float"))?;
    let mut res: Result<String, &'static str> = Err("");
    c.store.accept(c.args[1], &mut |cur| {
        let old = match cur {
            None => Some(0.0),
            Some(cur) => parse_float(cur.value),
        };
        res = match old {
            None => Err("ERR value is not a valid float"),
            Some(o) if !(o + by).is_finite() => Err("ERR increment would produce NaN or Infinity"),
            Some(o) => Ok(resp::format_double(o + by)),
        };
        match &res {
            Ok(s) => Decision::Put {
                value: Value::copied(s.as_bytes()),
                flags: cur.map_or(0, |c| c.meta.flags),
                expires: cur.map_or(0, |c| c.meta.expires),
            },
            Err(_) => Decision::Keep,
        }
    })?;
    // A bulk string in RESP3 too, as Redis replies.
    resp::bulk(out, res.map_err(err)?.as_bytes());
    Ok(crate::context::Next::Continue)
}
