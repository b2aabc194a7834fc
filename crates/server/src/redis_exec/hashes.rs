//! The hash commands on a table database: a Redis hash is a table record, its columns the
//! fields (HSET, HMSET, HGET, HMGET, HDEL, HGETALL, HEXISTS, HLEN, HKEYS, HVALS, HINCRBY).
//!
//! A table is found through [`Store::table`] (the kind is never named); every change is one
//! `accept` on the record's wire form (`name\0value\0…`), so it is atomic on its key, keeps the
//! table's indexes in step and goes through the update log like any write. A hash left with no
//! field is removed, as Redis removes an empty hash. On every other kind the commands answer
//! an error that says where hashes are served.

use super::{arity_error, err, int_arg, Call, Done, Reply};
use crate::context::Next;
use crate::out::Out;
use kura_engine::table::Columns;
use kura_engine::{Decision, Store, Value};
use kura_proto::resp;

/// The error of a hash command on a kind that is not a table.
fn not_a_table(name: &str) -> Reply {
    err(format!(
        "ERR {} is served on a table database only (kura serve PATH.kt): a hash is a table \
         record, its fields the record's columns",
        name.to_uppercase()
    ))
}

/// The columns of the record of `key` (`None`: absent).
fn read(store: &dyn Store, key: &[u8], name: &str) -> Result<Option<Columns>, Reply> {
    let t = store.table().ok_or_else(|| not_a_table(name))?;
    Ok(t.get_row(key)?)
}

/// Change the record of `key` with `f` (given its columns, none when absent) in one accept;
/// `f`'s result is the command's; a record left without columns is removed.
fn change<T>(
    store: &dyn Store,
    key: &[u8],
    name: &str,
    f: &mut dyn FnMut(&mut Columns) -> Result<T, Reply>,
) -> Result<T, Reply> {
    store.table().ok_or_else(|| not_a_table(name))?;
    let mut res: Option<Result<T, Reply>> = None;
    store.accept(key, &mut |cur| {
        let mut cols = match cur.map(|c| Columns::from_wire(c.value)) {
            None => Columns::new(),
            Some(Ok(c)) => c,
            Some(Err(e)) => {
                res = Some(Err(e.into()));
                return Decision::Keep;
            }
        };
        let r = f(&mut cols);
        let ok = r.is_ok();
        res = Some(r);
        match (ok, cols.is_empty(), cur.is_some()) {
            (false, _, _) => Decision::Keep,
            (true, true, true) => Decision::Remove,
            (true, true, false) => Decision::Keep,
            (true, false, _) => Decision::Put {
                value: Value::Made(cols.to_wire()),
                flags: cur.map_or(0, |c| c.meta.flags),
                expires: 0,
            },
        }
    })?;
    res.unwrap_or_else(|| Err(err("ERR the table did not look at the record")))
}

/// Set `pairs` (field, value, …) in `cols`; how many fields are new.
fn set_pairs(cols: &mut Columns, pairs: &[&[u8]]) -> Result<i64, Reply> {
    let mut new = 0;
    for p in pairs.chunks(2) {
        if p[0].is_empty() {
            return Err(err("ERR a table column (hash field) name cannot be empty"));
        }
        new += i64::from(cols.get(p[0]).is_none());
        cols.set(p[0], p[1])?;
    }
    Ok(new)
}

pub(super) fn hash(c: &mut Call<'_, '_, '_>, name: &str, out: &mut Out) -> Done {
    let (store, key, args) = (c.store, c.args[1], &c.args[2..]);
    let r3 = c.resp3();
    match name {
        "hset" | "hmset" => {
            if !args.len().is_multiple_of(2) {
                return Err(arity_error(name));
            }
            for p in args.chunks(2) {
                if let Err(e) = c.shared.check_value("Redis HSET", p[1].len()) {
                    return Err(err(format!("ERR {e}")));
                }
            }
            let new = change(store, key, name, &mut |cols| set_pairs(cols, args))?;
            if name == "hset" {
                resp::integer(out, new);
            } else {
                resp::ok(out);
            }
        }
        "hdel" => {
            let n = change(store, key, name, &mut |cols| {
                let before = cols.len();
                cols.0.retain(|(f, _)| !args.contains(&&f[..]));
                Ok((before - cols.len()) as i64)
            })?;
            resp::integer(out, n);
        }
        "hincrby" => {
            let by = int_arg(args[1])?;
            let field = args[0];
            let n = change(store, key, name, &mut |cols| {
                let old = match cols.get(field) {
                    None => 0,
                    Some(v) => {
                        resp::parse_i64(v).ok_or_else(|| err("ERR hash value is not an integer"))?
                    }
                };
                let n = old
                    .checked_add(by)
                    .ok_or_else(|| err("ERR increment or decrement would overflow"))?;
                set_pairs(cols, &[field, n.to_string().as_bytes()])?;
                Ok(n)
            })?;
            resp::integer(out, n);
        }
        _ => {
            let cols = read(store, key, name)?.unwrap_or_default();
            match name {
                "hget" => match cols.get(args[0]) {
                    Some(v) => resp::bulk(out, v),
                    None => resp::null(out, r3),
                },
                "hmget" => {
                    resp::array(out, args.len());
                    for f in args {
                        match cols.get(f) {
                            Some(v) => resp::bulk(out, v),
                            None => resp::null(out, r3),
                        }
                    }
                }
                "hgetall" => {
                    resp::map(out, cols.len(), r3);
                    for (f, v) in cols.iter() {
                        resp::bulk(out, f);
                        resp::bulk(out, v);
                    }
                }
                "hexists" => resp::integer(out, i64::from(cols.get(args[0]).is_some())),
                "hlen" => resp::integer(out, cols.len() as i64),
                "hkeys" | "hvals" => {
                    resp::array(out, cols.len());
                    for (f, v) in cols.iter() {
                        resp::bulk(out, if name == "hkeys" { f } else { v });
                    }
                }
                _ => return Err(err(super::unknown_command(c.args))),
            }
        }
    }
    Ok(Next::Continue)
}
