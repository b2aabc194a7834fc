//! Kyoto Tycoon's TSV-RPC under `/rpc/`: the procedures, their input (query string and body)
//! and their TSV output.

use super::{bump, Reply, KT_VERSION};
use crate::backup;
use crate::context::{Shared, ValueTooLarge};
use crate::kt_common::{
    atof, atoi, db_error, db_ok, fail, get, kt_expiry_param, set, Input, Output, Rv, NO_RECORD,
};
use crate::kt_cursor::{self, KtCursors};
use crate::kt_signal::{self, WaitReq, Waited};
use crate::mask::{Op, Proto};
use crate::tt_exec::os_name;
use kura_engine::counter::Counter;
use kura_engine::store::check_sizes;
use kura_engine::KyotoOps;
use kura_engine::{BatchOp, Error, Outcome, Store};
use kura_proto::http::{self, Request};
use kura_proto::kt_tsv::{self, ColEnc};
use std::sync::atomic::Ordering::Relaxed;

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

/// Run a procedure; `Err` when it waits for a signal first (`WAIT`, and `waited` is `None`).
pub(super) fn rpc<'s>(
    store: &'s dyn Store,
    shared: &Shared,
    curs: &mut KtCursors<'s>,
    req: &Request<'_>,
    name: &str,
    waited: Option<Waited>,
    now: u64,
) -> Result<Reply, WaitReq> {
    let mut out = Output::new();
    let status = match (http::percent_decode(name.as_bytes()), rpc_input(req)) {
        (Err(_), _) => fail(&mut out, 400, "bad escape in the procedure name"),
        (_, Err(msg)) => fail(&mut out, 400, msg),
        (Ok(name), Ok(input)) => {
            // ktserver waits before anything else, and sends its signal after the procedure,
            // whatever its outcome (not when the wait timed out).
            match (get(&input, "WAIT"), waited) {
                (Some(cond), None) => {
                    return Err(WaitReq {
                        name: cond.to_vec(),
                        time: kt_signal::wait_time(get(&input, "WAITTIME").map(atof)),
                    })
                }
                (Some(_), Some(Waited::TimedOut)) => fail(&mut out, 503, "the condition timed out"),
                _ => {
                    let status = match procedure(store, shared, curs, &name, &input, now, &mut out)
                    {
                        Ok(status) => status,
                        Err(e) => {
                            out.clear();
                            let (status, msg) = super::engine_error(&e);
                            fail(&mut out, status, msg)
                        }
                    };
                    if let Some(cond) = get(&input, "SIGNAL") {
                        let broad = get(&input, "SIGNALBROAD").is_some();
                        let n = shared.kt_signals.send(cond, broad);
                        set(&mut out, "SIGNALED", n.to_string());
                    }
                    status
                }
            }
        }
    };
    let enc = kt_tsv::choose_encoding(out.iter().map(|(n, v)| (&n[..], &v[..])));
    let mut body = Vec::new();
    kt_tsv::encode(&mut body, out.iter().map(|(n, v)| (&n[..], &v[..])), enc);
    Ok(Reply {
        status,
        headers: vec![("Content-Type", enc.content_type().as_bytes().to_vec())],
        body,
    })
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
        b"synchronize" if get(input, "command").is_some_and(|c| !c.is_empty()) => Op::Copy,
        b"synchronize" => Op::Sync,
        b"play_script" => Op::Ext,
        b"tune_replication" => Op::SetMst,
        _ => return None,
    })
}

/// Kyoto Tycoon's `tune_replication`: follow the master `host`:`port` (default 1978) after its
/// time stamp `ts` (when given and above 0), or none (no or an empty `host`: a promotion).
/// `iv` (the slave's interval) is taken and ignored. Kura's `force=true` lets a bootstrap
/// replace the records the server holds; without it a server that holds records refuses a
/// master whose snapshot would replace them: 450 with the reason.
fn tune_replication(shared: &Shared, input: &Input<'_>, out: &mut Output) -> Rv {
    let Some(r) = &shared.repl else {
        return fail(out, 501, "replication is not available");
    };
    let host = get(input, "host").map_or_else(String::new, |h| {
        String::from_utf8_lossy(h).trim().to_string()
    });
    let master = if host.is_empty() {
        None
    } else {
        let port = match get(input, "port") {
            None => 1978,
            Some(p) => match u16::try_from(atoi(p)) {
                Ok(p) if p > 0 => p,
                _ => return fail(out, 400, "invalid parameters: port"),
            },
        };
        Some((host, port))
    };
    let ts = get(input, "ts").map_or(0, |t| u64::try_from(atoi(t)).unwrap_or(0));
    let force = get(input, "force").is_some_and(|f| f == b"true" || f == b"1");
    match r.change_master(&shared.read_only, master, ts, force) {
        Ok(()) => 200,
        Err(why) => fail(out, 450, why),
    }
}

/// The records (`_name` → value) of a bulk procedure, without the underscore.
fn bulk<'i>(input: &'i Input<'_>) -> impl Iterator<Item = (&'i [u8], &'i [u8])> {
    input
        .iter()
        .filter_map(|(n, v)| n.strip_prefix(b"_").map(|k| (k, v.as_ref())))
}

/// `--max-value-size` on the values a procedure stores, checked once its input is decoded
/// (from any body encoding): `value` (set, add, replace, append, cur_set_value), `nval`
/// (cas) and every record of set_bulk.
fn check_values(shared: &Shared, name: &[u8], input: &Input<'_>) -> Result<(), ValueTooLarge> {
    let bulk = name == b"set_bulk";
    for (n, v) in input {
        if &n[..] == b"value" || &n[..] == b"nval" || (bulk && n.starts_with(b"_")) {
            let name = String::from_utf8_lossy(name);
            shared.check_value(format_args!("Kyoto Tycoon RPC {name}"), v.len())?;
        }
    }
    Ok(())
}

pub(crate) fn procedure<'s>(
    store: &'s dyn Store,
    shared: &Shared,
    curs: &mut KtCursors<'s>,
    name: &[u8],
    input: &Input<'_>,
    now: u64,
    out: &mut Output,
) -> Result<Rv, Error> {
    if let Err(e) = check_values(shared, name, input) {
        return Ok(fail(out, 400, format!("invalid parameters: {e}")));
    }
    if let Some(rv) = kt_cursor::procedure(store, shared, curs, name, input, now, out) {
        return rv;
    }
    match name {
        b"void" => return Ok(200),
        b"tune_replication" => return Ok(tune_replication(shared, input, out)),
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
    if let Some(by_mask) = shared.verdict(|mask| mask.denies(op, Proto::Http)) {
        let why = shared.read_only_refusal(by_mask);
        return Ok(fail(out, 403, why.unwrap_or_else(|| "forbidden".into())));
    }
    if name == b"report" {
        report(store, shared, now, out);
        return Ok(200);
    }
    if name == b"play_script" {
        return Ok(play_script(store, shared, input, out));
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
            // Kyoto Tycoon runs the command on the synchronized database; Kura on a fresh hot
            // copy in the backup directory (crate::backup). Any failure is Kyoto Cabinet's
            // failed postprocessing. An empty command is none, as in Kyoto Tycoon.
            match get(input, "command").filter(|c| !c.is_empty()) {
                Some(cmd) if !backup::run(store, shared, cmd, "KT synchronize") => {
                    Ok(fail(out, 500, db_error(8, "postprocessing failed")))
                }
                _ => Ok(200),
            }
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
            store.append_with(key, value, expires)?;
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
            Ok(match store.increment(key, atoi(num), orig, expires) {
                Ok(Some(n)) => {
                    set(out, "num", n.to_string());
                    200
                }
                Ok(None) | Err(Error::NotNumeric) => {
                    fail(out, 450, db_error(8, "logical inconsistency"))
                }
                Err(e) => return Err(e),
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
                match store.increment_double(key, atof(num), orig, expires) {
                    Ok(Some(n)) => {
                        set(out, "num", format!("{n:.6}"));
                        200
                    }
                    Ok(None) | Err(Error::NotNumeric) => {
                        fail(out, 450, db_error(8, "logical inconsistency"))
                    }
                    Err(e) => return Err(e),
                },
            )
        }
        b"cas" => {
            let Some(key) = key else {
                return invalid(out);
            };
            bump(&shared.cmd_set);
            let (oval, nval) = (get(input, "oval"), get(input, "nval"));
            Ok(if store.cas_value(key, oval, nval, expires)? {
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
                store.seize(key)?
            } else {
                store.get(key)?
            };
            let found = found.map(|r| (r.value, r.meta.expires));
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
            // Counted as every protocol counts a removal: a hit or a miss per key.
            let mut n = 0u64;
            for (k, _) in bulk(input) {
                if store.out(k)? {
                    n += 1;
                    bump(&shared.delete_hits);
                } else {
                    bump(&shared.delete_misses);
                }
            }
            set(out, "num", n.to_string());
            Ok(200)
        }
        b"get_bulk" => {
            let keys: Vec<&[u8]> = bulk(input).map(|(k, _)| k).collect();
            let records = store.get_multi(&keys)?;
            let mut n = 0u64;
            // Counted as every protocol counts a read: a hit or a miss per key.
            for (k, r) in keys.iter().zip(records) {
                bump(&shared.cmd_get);
                bump(if r.is_some() {
                    &shared.get_hits
                } else {
                    &shared.get_misses
                });
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
                crate::tt_exec::prefix_keys(store, prefix, max)?
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
                    // A key with several values (duplicates) is one key.
                    if re.is_match(&k) && keys.last() != Some(&k) {
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

/// Kyoto Tycoon's `play_script`: the procedure `name` (letters, digits and `_`) of the `--scr`
/// script, given the `_`-prefixed parameters without their `_`; on success its output comes
/// back with a `_` before each name, otherwise only `ERROR` (`crate::script::kt::play`).
fn play_script(store: &dyn Store, shared: &Shared, input: &Input<'_>, out: &mut Output) -> Rv {
    let name = match get(input, "name") {
        Some(n) if !n.is_empty() && n.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'_') => n,
        _ => return fail(out, 400, "invalid parameters"),
    };
    let args = input
        .iter()
        .filter_map(|(n, v)| n.strip_prefix(b"_").map(|k| (k, &v[..])));
    let played = crate::script::kt::play(store, shared, Proto::Http, name, args);
    match played.error {
        Some(e) => fail(out, played.status, e),
        None => {
            for (k, v) in played.out {
                let mut n = Vec::with_capacity(k.len() + 1);
                n.push(b'_');
                n.extend_from_slice(&k);
                out.insert(n, v);
            }
            played.status
        }
    }
}

fn status(store: &dyn Store, shared: &Shared, out: &mut Output) {
    for (k, v) in store.describe() {
        out.insert(k.into_bytes(), v.into_bytes());
    }
    repl_state(shared, out);
    if !shared.db_name.is_empty() {
        set(out, "path", shared.db_name.as_str());
    }
    // Kyoto Cabinet's numeric type of the kind's counterpart class.
    let ty = store.kind().info().kc_type.to_string();
    set(out, "type", ty.as_str());
    set(out, "realtype", ty);
    set(out, "count", store.count().to_string());
    set(out, "size", store.size().to_string());
    // What a tree database's status adds in Kyoto Cabinet (`TreeDB::status`): the record
    // comparator by its name there, and the leaf count, from what the kind describes.
    let described = |out: &Output, name: &str| {
        out.get(name.as_bytes())
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    if let Some(cmp) = described(out, "cmp") {
        let rcomp = match cmp.as_str() {
            "lex" => "lexical",
            "dec" => "decimal",
            "lexdesc" => "lexicaldesc",
            "decdesc" => "decimaldesc",
            _ => "external",
        };
        set(out, "rcomp", rcomp);
    }
    // Kyoto Cabinet's names for the same figures: page (leaf) size, page cache capacity and
    // the bytes the cache holds now.
    for (kc, ours) in [
        ("lcnt", "leaves"),
        ("psiz", "leafsiz"),
        ("pccap", "cache"),
        ("cusage", "cached_bytes"),
    ] {
        if let Some(v) = described(out, ours) {
            set(out, kc, v);
        }
    }
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
    // Kura's: requests parked waiting for a signal (`WAIT`).
    set(
        out,
        "serv_wait_count",
        shared.kt_signals.waiting().to_string(),
    );
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
    set(
        out,
        "conf_max_value_size",
        shared.max_value_size.to_string(),
    );
    repl_state(shared, out);
}

/// The replication state (`crate::repl::Replication::report`), as Tyrant `stat` and
/// memcached `stats` show it.
fn repl_state(shared: &Shared, out: &mut Output) {
    for (name, v) in shared.repl_report() {
        set(out, &name, v);
    }
}
