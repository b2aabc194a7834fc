//! Tyrant's `misc` functions: those of Tokyo Cabinet's abstract database (`tcadbmisc`) that
//! apply to Kura's kinds, shared by the binary protocol and HTTP POST (`X-TT-MNAME`).

use super::{c_str, TtState};
use crate::context::Shared;
use crate::mask::{Op, Proto};
use kura_engine::table::{query, Columns, IndexOp, PutMode};
use kura_engine::TokyoOps;
use kura_engine::{BatchOp, Error, KeyRange, Outcome, Store};

/// Whether the mask refuses misc `name`. Kura's replication functions (`ulogstat`,
/// `ulogforget`: `crate::repl::MISC_FUNCS`) change no data, so a read-only replica takes them
/// as it takes `setmst`; `--mask misc` or `--mask setmst` refuses them.
/// The functions that only read (`get`, `getlist`, `iternext` …) are refused by `--mask misc`
/// alone, never by a read-only replica; so is a table's `setindex`, which changes no record:
/// indexes are each server's own (an update log carries records, not indexes), and a replica
/// is given its indexes by a `setindex` of its own; so is a `search` or `metasearch` without
/// `out`.
pub(crate) fn misc_denied(shared: &Shared, name: &[u8], args: &[&[u8]], proto: Proto) -> bool {
    if name == RELOAD_SCRIPTS {
        // Changes no data (a read-only replica takes it); refused by `--mask misc` or `ext`.
        shared.mask.get().denies(Op::Misc, proto) || shared.mask.get().denies(Op::Ext, proto)
    } else if crate::repl::is_misc(name) {
        shared.mask.get().denies(Op::Misc, proto) || shared.mask().denies(Op::SetMst, proto)
    } else if reads_only(name) || name == b"setindex" || search_reads_only(name, args) {
        shared.mask.get().denies(Op::Misc, proto)
    } else {
        shared.mask().denies(Op::Misc, proto)
    }
}

/// Whether misc `name` changes nothing in the database.
fn reads_only(name: &[u8]) -> bool {
    matches!(
        name,
        b"get"
            | b"getlist"
            | b"getpart"
            | b"iterinit"
            | b"iternext"
            | b"error"
            | b"regex"
            | b"range"
    )
}

/// Whether misc `name` is a table's `search` or `metasearch` that removes nothing (no `out` or
/// `remove` command among its arguments).
fn search_reads_only(name: &[u8], args: &[&[u8]]) -> bool {
    matches!(name, b"search" | b"metasearch")
        && !args.iter().any(|a| {
            let cmd = a.split(|&b| b == 0).next().unwrap_or(a);
            cmd == b"out" || cmd == b"remove"
        })
}

/// Kura's misc function that reloads the server's scripts (`kura remote reload`), as SIGHUP
/// does: the empty success, or the failure with the reason (`misc error`) when a script
/// cannot be read or does not compile (the old scripts stay) or none is loaded.
pub const RELOAD_SCRIPTS: &[u8] = b"reloadscripts";

/// A misc function of the server: Kura's replication functions (on the server's replication
/// state; failure without one), [`RELOAD_SCRIPTS`], else [`misc`] on the database.
pub(crate) fn server_misc<'s>(
    store: &'s dyn Store,
    shared: &Shared,
    st: &mut TtState<'s>,
    name: &[u8],
    args: &[&[u8]],
) -> Result<Option<Vec<Vec<u8>>>, Error> {
    if name == RELOAD_SCRIPTS {
        let r = match &shared.scripts {
            None => Err("no script is loaded (--ext, --scr)".to_string()),
            Some(s) => s.reload(),
        };
        return Ok(match r {
            Ok(()) => {
                shared.log.line("scripts reloaded (misc reloadscripts)");
                Some(Vec::new())
            }
            Err(e) => {
                shared
                    .log
                    .line(&format!("script reload failed, the old scripts stay: {e}"));
                st.last_error = Some(format!("script reload failed, the old scripts stay: {e}"));
                None
            }
        });
    }
    if crate::repl::is_misc(name) {
        return Ok(shared.repl.as_ref().and_then(|r| r.misc(name, args)));
    }
    misc(store, st, name, args)
}

/// Tokyo Cabinet's `tcatoi` on a misc argument: leading white space, an optional sign, decimal
/// digits up to the first other byte; saturates instead of overflowing.
fn atoi(b: &[u8]) -> i64 {
    let b = c_str(b);
    let mut i = b
        .iter()
        .position(|c| !matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c))
        .unwrap_or(b.len());
    let neg = match b.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let mut n: i64 = 0;
    for &d in b[i..].iter().take_while(|d| d.is_ascii_digit()) {
        n = n.saturating_mul(10).saturating_add(i64::from(d - b'0'));
    }
    if neg {
        -n
    } else {
        n
    }
}

/// A `max` argument of misc regex / range: below 1 means no limit.
fn max_arg(args: &[&[u8]], i: usize) -> usize {
    match args.get(i).map(|a| atoi(a)) {
        Some(n) if n >= 1 => usize::try_from(n).unwrap_or(usize::MAX),
        _ => usize::MAX,
    }
}

/// The misc functions of Tokyo Cabinet's abstract database (`tcadbmisc`) that apply to Kura's
/// kinds. `Ok(None)` is Tyrant's failure (unknown function, missing arguments, absent record,
/// a condition not met); `Ok(Some(list))` the result elements.
pub fn misc<'s>(
    store: &'s dyn Store,
    st: &mut TtState<'s>,
    name: &[u8],
    args: &[&[u8]],
) -> Result<Option<Vec<Vec<u8>>>, Error> {
    if store.table().is_some() {
        if let Some(r) = table_misc(store, name, args)? {
            return Ok(r);
        }
    }
    let done = Some(Vec::new());
    // A database that keeps several values of a key (the B+ tree) answers the functions
    // that take or give records as Tokyo Cabinet's B+ tree does (tcadb.c, `ADBOBDB`): every
    // value of a key, duplicates added by putlist.
    let dups = store.allows_dups();
    Ok(match name {
        b"put" | b"putkeep" | b"putcat" | b"putdup" | b"putdupback" => {
            let [key, value, ..] = args else {
                return Ok(None);
            };
            match name {
                b"put" => {
                    store.put_with(key, value, 0, 0)?;
                    done
                }
                b"putkeep" => match store.putkeep(key, value, 0, 0)? {
                    Outcome::Stored(_) => done,
                    _ => None,
                },
                b"putcat" => {
                    store.putcat(key, value)?;
                    done
                }
                // Not a function of a database without duplicates (Tokyo Cabinet's hash).
                _ if !dups => None,
                _ => {
                    store.put_dup(key, value, name == b"putdupback")?;
                    done
                }
            }
        }
        b"out" => match args.first() {
            Some(key) if store.out(key)? => done,
            _ => None,
        },
        b"get" => match args.first() {
            Some(key) if dups => Some(store.get_all(key)?).filter(|v| !v.is_empty()),
            Some(key) => store.get(key)?.map(|r| vec![r.value]),
            None => None,
        },
        b"putlist" if dups => {
            // Each pair one more value of its key, in order (an odd last argument is
            // ignored), as tcbdbputdup one by one.
            for p in args.chunks_exact(2) {
                store.put_dup(p[0], p[1], false)?;
            }
            done
        }
        b"putlist" => {
            // Key, value pairs, in order (an odd last argument is ignored): a key given twice
            // keeps its last value, as Tyrant's one-by-one puts leave it and as a batch
            // applies its operations.
            let ops: Vec<BatchOp> = args
                .chunks_exact(2)
                .map(|p| BatchOp::Put {
                    key: p[0].to_vec(),
                    value: p[1].to_vec(),
                    flags: 0,
                    expires: 0,
                })
                .collect();
            store.write_batch(&ops)?;
            done
        }
        b"outlist" => {
            // Every value of each key (absent keys are ignored).
            for key in args {
                store.remove_all(key)?;
            }
            done
        }
        b"getlist" if dups => {
            let mut items = Vec::new();
            for key in args {
                for v in store.get_all(key)? {
                    items.push(key.to_vec());
                    items.push(v);
                }
            }
            Some(items)
        }
        b"getlist" => {
            let recs = store.get_multi(args)?;
            let mut items = Vec::new();
            for (k, r) in args.iter().zip(recs) {
                if let Some(r) = r {
                    items.push(k.to_vec());
                    items.push(r.value);
                }
            }
            Some(items)
        }
        b"getpart" => {
            // Key, offset (default 0), length (default: to the end).
            let Some(key) = args.first() else {
                return Ok(None);
            };
            let off = args.get(1).map_or(0, |a| atoi(a)).max(0);
            let len = args.get(2).map_or(-1, |a| atoi(a));
            let len = if len < 0 || len > i64::from(i32::MAX / 2) {
                i64::from(i32::MAX / 2)
            } else {
                len
            };
            match store.get(key)? {
                Some(r) if (off as u64) < r.value.len() as u64 => {
                    let off = off as usize;
                    let end = off.saturating_add(len as usize).min(r.value.len());
                    Some(vec![r.value[off..end].to_vec()])
                }
                _ => None,
            }
        }
        b"iterinit" => st
            .iter_init(store, args.first().copied())?
            .then_some(Vec::new()),
        b"iternext" => st.iter_next(store)?.map(|(k, r)| vec![k, r.value]),
        b"sync" => {
            store.sync()?;
            done
        }
        b"optimize" => {
            let params = args.first().map_or(&b""[..], |a| c_str(a));
            match std::str::from_utf8(params) {
                Ok(p) => {
                    store.optimize(p)?;
                    done
                }
                Err(_) => None,
            }
        }
        b"vanish" => {
            store.vanish()?;
            done
        }
        // Tokyo Cabinet's error code and message of the last failure: the reason of the last
        // request refused on this connection (as TCEMISC), else "success".
        b"error" => Some(vec![match &st.last_error {
            Some(e) => format!("9999: {e}").into_bytes(),
            None => b"0: success".to_vec(),
        }]),
        // No separate cache to clear and no fragmentation to repair in place: accepted.
        b"cacheclear" | b"defrag" => done,
        b"regex" => {
            let Some(pattern) = args.first() else {
                return Ok(None);
            };
            let Some(re) = compile_regex(c_str(pattern)) else {
                return Ok(None);
            };
            let max = max_arg(args, 1);
            let mut items = Vec::new();
            let mut found = 0;
            // In key order on an ordered kind (its cursor's order), every value of a key.
            let mut cur = store.cursor()?;
            while found < max {
                let Some((k, r)) = cur.next()? else { break };
                // regexec sees the key as a C string.
                if re.is_match(c_str(&k)) {
                    items.push(k);
                    items.push(r.value);
                    found += 1;
                }
            }
            Some(items)
        }
        b"range" => {
            // Start key (default: the first), max (< 1: no limit), end key (exclusive), in
            // the database's own key order (a B+ tree's comparator, a fixed-length
            // database's ids).
            if !store.kind().ordered() {
                return Ok(None);
            }
            let max = max_arg(args, 1);
            let ids = store.kind().info().caps.integer_keys;
            let (from, to) = if ids {
                (
                    args.first().and_then(|k| id_bound(k)),
                    args.get(2).and_then(|k| id_bound(k)),
                )
            } else {
                (
                    args.first().map(|k| k.to_vec()),
                    args.get(2).map(|k| k.to_vec()),
                )
            };
            use std::ops::Bound::{Excluded, Included, Unbounded};
            let range = KeyRange {
                from: from.as_deref().map_or(Unbounded, Included),
                to: to.as_deref().map_or(Unbounded, Excluded),
                desc: false,
                max,
            };
            let mut items = Vec::new();
            store.for_each_in_range(&range, &mut |k, v, _| {
                items.push(k.to_vec());
                items.push(v.to_vec());
                Ok(true)
            })?;
            Some(items)
        }
        // Table-database functions (setindex, search, genuid, …) and anything else: not a
        // function of these kinds.
        _ => None,
    })
}

/// The misc functions Tokyo Cabinet's abstract database gives a table database (tcadb.c,
/// `ADBOTDB`) where they differ from the other kinds': `put`, `putkeep`, `putcat` `[pk, n1,
/// v1, …]` (an odd last name is ignored; a name given twice keeps its last value), `out [pk]`,
/// `get [pk]` → `[n1, v1, …]`, `setindex [col, type]…` (a type as `tctdbstrtoindextype` reads
/// it), `genuid` → the id in decimal, `search` and `metasearch` (Tyrant's query commands, one
/// an argument: [`query::run_search`] on `store`, so the records an `out` removes are removed
/// through it — the update log's wrapper logs each as a remove of its key; a command it cannot
/// read is an error, answered as the failure).
/// `Ok(None)`: not one of these (the generic functions apply: `putlist`, `getlist`,
/// `iternext` … on the records' wire forms, as Tokyo Cabinet's do).
fn table_misc(
    store: &dyn Store,
    name: &[u8],
    args: &[&[u8]],
) -> Result<Option<Option<Vec<Vec<u8>>>>, Error> {
    let Some(t) = store.table() else {
        return Ok(None);
    };
    let done = Some(Vec::new());
    Ok(Some(match name {
        b"put" | b"putkeep" | b"putcat" => {
            let Some((pk, rest)) = args.split_first() else {
                return Ok(Some(None));
            };
            let mut cols = Columns::new();
            for p in rest.chunks_exact(2) {
                cols.set(p[0], p[1])?;
            }
            let mode = match name {
                b"put" => PutMode::Replace,
                b"putkeep" => PutMode::Keep,
                _ => PutMode::Cat,
            };
            t.put_row(pk, &cols, mode)?.then_some(Vec::new())
        }
        b"out" => match args.first() {
            Some(pk) if t.out_row(pk)? => done,
            _ => None,
        },
        b"get" => match args.first() {
            Some(pk) => t.get_row(pk)?.map(|cols| {
                cols.0
                    .into_iter()
                    .flat_map(|(n, v)| [n, v])
                    .collect::<Vec<_>>()
            }),
            None => None,
        },
        b"setindex" => {
            // Column, type pairs (an odd last argument is ignored); every pair is tried, a
            // failure of any fails the call.
            let mut ok = true;
            for p in args.chunks_exact(2) {
                let op = std::str::from_utf8(c_str(p[1]))
                    .ok()
                    .and_then(|s| IndexOp::parse(s).ok());
                ok &= match op {
                    Some(op) => match t.set_index(c_str(p[0]), op) {
                        Ok(made) => made,
                        Err(e) if e.from_request() || matches!(e, Error::NotFound(_)) => false,
                        Err(e) => return Err(e),
                    },
                    None => false,
                };
            }
            ok.then_some(Vec::new())
        }
        b"genuid" => Some(vec![t.genuid()?.to_string().into_bytes()]),
        b"search" | b"metasearch" => Some(query::run_search(store, &query::parse_search(args)?)?),
        _ => return Ok(None),
    }))
}

/// A bound of misc range on a database keyed by ids, read as Tokyo Cabinet's `tcfdbkeytoid`
/// reads it: the key words `min` and `max` as they are, anything else the decimal number it
/// starts with (`tcatoi`); a number below 1 is no bound (Tokyo Cabinet's range then runs
/// from the first record, or to the last).
fn id_bound(key: &[u8]) -> Option<Vec<u8>> {
    let key = c_str(key);
    if key == b"min" || key == b"max" {
        return Some(key.to_vec());
    }
    let n = atoi(key);
    (n >= 1).then(|| n.to_string().into_bytes())
}

/// Up to `max` distinct keys starting with `prefix` (Tyrant's fwmkeys, Kyoto Tycoon's
/// match_prefix), in the database's order: the store's own `fwmkeys` where that is the
/// answer (unordered kinds, kinds keyed by ids, lexical orders without duplicates); on an
/// ordered database whose order is not lexical (a B+ tree's `#cmp=dec`, `lexdesc`, …) the
/// prefix's keys are not together, so every key is looked at, as Kyoto Cabinet's
/// `match_prefix` does; a key with several values is one key.
pub(crate) fn prefix_keys(
    store: &dyn Store,
    prefix: &[u8],
    max: usize,
) -> Result<Vec<Vec<u8>>, Error> {
    let info = store.kind().info();
    if !info.caps.ordered || info.caps.integer_keys {
        return store.fwmkeys(prefix, max);
    }
    let lexical = !store
        .describe()
        .iter()
        .any(|(k, v)| k == "cmp" && v != "lex");
    if lexical && !store.allows_dups() {
        return store.fwmkeys(prefix, max);
    }
    let mut keys: Vec<Vec<u8>> = Vec::new();
    if max == 0 {
        return Ok(keys);
    }
    let range = KeyRange {
        from: if lexical {
            std::ops::Bound::Included(prefix)
        } else {
            std::ops::Bound::Unbounded
        },
        to: std::ops::Bound::Unbounded,
        desc: false,
        max: usize::MAX,
    };
    store.for_each_in_range(&range, &mut |k, _, _| {
        if !k.starts_with(prefix) {
            // In a lexical order, past the prefix's keys.
            return Ok(!lexical);
        }
        if keys.last().map(Vec::as_slice) != Some(k) {
            if keys.len() >= max {
                return Ok(false);
            }
            keys.push(k.to_vec());
        }
        Ok(true)
    })?;
    Ok(keys)
}

/// A POSIX extended regular expression as Tokyo Cabinet compiles it for misc regex: a leading
/// `*` makes it case-insensitive; matched on bytes. `None` when it does not compile (or is
/// not UTF-8, or too large).
fn compile_regex(pattern: &[u8]) -> Option<regex::bytes::Regex> {
    let (pattern, icase) = match pattern.strip_prefix(b"*") {
        Some(p) => (p, true),
        None => (pattern, false),
    };
    regex::bytes::RegexBuilder::new(std::str::from_utf8(pattern).ok()?)
        .case_insensitive(icase)
        .unicode(false)
        .size_limit(1 << 20)
        .dfa_size_limit(1 << 20)
        .build()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcatoi() {
        assert_eq!(atoi(b"12"), 12);
        assert_eq!(atoi(b"  -7x"), -7);
        assert_eq!(atoi(b"+3"), 3);
        assert_eq!(atoi(b"x1"), 0);
        assert_eq!(atoi(b""), 0);
        assert_eq!(atoi(b"5\09"), 5);
        assert_eq!(atoi(b"99999999999999999999999"), i64::MAX);
    }
}
