//! One REST interface for every path outside `/rpc/`, speaking Tokyo Tyrant's and Kyoto
//! Tycoon's dialects (see the module above), and Tyrant's OPTIONS.

use super::{atoi, bump, db_error, Reply, NO_RECORD};
use crate::context::Shared;
use crate::kt_common::XT_MAX;
use crate::mask::{Op, Proto};
use crate::tt_exec::TtState;
use crate::tt_exec::{os_name, TT_LIBVER, TT_PROTVER, TT_VERSION};
use kura_engine::TokyoOps;
use kura_engine::{Error, Outcome, Store};
use kura_proto::http::{self, Method, Request};
use std::borrow::Cow;
use std::collections::HashMap;

fn forbidden() -> Reply {
    Reply::text(403, "Forbidden")
}

/// A request the mask in force refuses: 403 with the replica's reason when it is because the
/// server is a read-only replica (`by_mask`: whether `--mask` alone refuses it).
fn refused(shared: &Shared, by_mask: bool) -> Reply {
    match shared.read_only_refusal(by_mask) {
        Some(why) => Reply::text(403, &why),
        None => forbidden(),
    }
}

/// The refusal of `op` when the mask in force refuses it ([`Shared::verdict`]).
fn masked(shared: &Shared, op: Op) -> Option<Reply> {
    shared
        .verdict(|mask| mask.denies(op, Proto::Http))
        .map(|by_mask| refused(shared, by_mask))
}

/// A miss in both dialects: Tyrant's body, Kyoto Tycoon's header.
fn not_found() -> Reply {
    Reply::text(404, "Not Found").header("X-Kt-Error", NO_RECORD)
}

/// A request refused for what it asks: the reason in the body and in Kyoto Tycoon's header.
fn bad_request(why: &str) -> Reply {
    Reply::text(400, why).header("X-Kt-Error", why)
}

/// An engine error: 400 with its reason when the request caused it (a key the kind cannot
/// take, a value too large, an operation the kind lacks), 500 for a fault of the server.
fn internal(e: &Error) -> Reply {
    match super::engine_error(e) {
        (500, msg) => Reply::text(500, "Internal Server Error").header("X-Kt-Error", msg),
        (_, msg) => bad_request(&msg),
    }
}

fn xt_header(reply: Reply, expires: u64) -> Reply {
    if expires == 0 {
        return reply;
    }
    let mut date = Vec::with_capacity(29);
    http::write_http_date(&mut date, expires);
    reply.header("X-Kt-Xt", date)
}

pub(super) fn rest(store: &dyn Store, shared: &Shared, req: &Request<'_>, now: u64) -> Reply {
    let deny = |op| shared.mask().denies(op, Proto::Http);
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
            if let Some(r) = masked(shared, op) {
                return r;
            }
            rest_get(store, shared, &key)
        }
        Method::Put => rest_put(store, shared, req, &key),
        Method::Delete => {
            if let Some(r) = masked(shared, Op::Out) {
                return r;
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
    if let Some(r) = masked(shared, op) {
        return Ok(r);
    }
    let expires = match req.header("x-kt-xt").and_then(http::parse_http_date) {
        Some(t) if t > 0 && t < XT_MAX => t,
        _ => 0,
    };
    let value = &req.body[..];
    if let Err(e) = shared.check_value("HTTP PUT", value.len()) {
        return Ok(bad_request(&e.to_string()));
    }
    bump(&shared.cmd_set);
    let kt = kt_dialect(req);
    let stored = match mode {
        // On a table an empty path takes a new unique id, as Tyrant's binary put.
        Mode::Put => {
            crate::tt_exec::put_or_genuid(store, key, value, expires)?;
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
    key: &[u8],
) -> Result<Reply, Error> {
    let named = |h| req.header(h).filter(|v| !v.is_empty());
    if named("x-tt-xname").is_some() {
        if let Some(r) = masked(shared, Op::Ext) {
            return Ok(r);
        }
        // The `--ext` script's function on the path's key and the body; 500 on failure
        // (as ttserver, also without `-ext`), with the reason in the body.
        let name = named("x-tt-xname").unwrap_or_default();
        let opts = req
            .header("x-tt-xopts")
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.trim().parse::<u32>().ok())
            .unwrap_or(0);
        return Ok(
            match crate::script::tt::ext(store, shared, Proto::Http, name, opts, key, &req.body) {
                Ok(body) => Reply {
                    status: 200,
                    headers: vec![("Content-Type", b"application/octet-stream".to_vec())],
                    body,
                },
                Err(why) => Reply::text(500, &format!("Internal Server Error: {why}")),
            },
        );
    }
    let Some(mname) = named("x-tt-mname") else {
        // Kura's JSON query endpoint (a read).
        if req.path() == super::query::PATH {
            if let Some(r) = masked(shared, Op::Get) {
                return Ok(r);
            }
            return super::query::json_query(store, &req.body);
        }
        return Ok(Reply::text(400, "Bad Request"));
    };
    // Tyrant passes the values of the form in the order their names first appear (a later
    // duplicate replaces the value in place).
    let mut args: Vec<Cow<'_, [u8]>> = Vec::new();
    let mut seen: HashMap<Cow<'_, [u8]>, usize> = HashMap::new();
    for pair in http::form_pairs(&req.body) {
        let Ok((n, v)) = pair else {
            return Ok(Reply::text(400, "Bad Request"));
        };
        if let Err(e) = shared.check_value("HTTP POST misc", v.len()) {
            return Ok(bad_request(&e.to_string()));
        }
        match seen.get(&n) {
            Some(&i) => args[i] = v,
            None => {
                seen.insert(n, args.len());
                args.push(v);
            }
        }
    }
    // The binary protocol's misc functions; misc iterinit / iternext take part in the
    // server's iteration (an HTTP request has no connection to keep one of its own in).
    let args: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
    if crate::tt_exec::misc_denied(shared, mname, &args, Proto::Http) {
        return Ok(refused(
            shared,
            shared.mask.get().denies(Op::Misc, Proto::Http),
        ));
    }
    let Some(results) =
        crate::tt_exec::server_misc(store, shared, &mut TtState::of_server(shared), mname, &args)?
    else {
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

/// Tyrant's OPTIONS: the allowed methods (as the mask leaves them) and the server's
/// description in `X-TT-*` headers.
fn options(store: &dyn Store, shared: &Shared, now: u64) -> Reply {
    let deny = |op| shared.mask().denies(op, Proto::Http);
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
    let ty = store.kind().info().tt_type;
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
