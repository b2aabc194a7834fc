//! Tyrant's `misc` functions: those of Tokyo Cabinet's abstract database (`tcadbmisc`) that
//! apply to Kura's kinds, shared by the binary protocol and HTTP POST (`X-TT-MNAME`).

use super::{c_str, TtState};
use kura_engine::{BatchOp, Error, Outcome, Store};

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
    let done = Some(Vec::new());
    Ok(match name {
        b"put" | b"putkeep" | b"putcat" => {
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
                _ => {
                    store.putcat(key, value)?;
                    done
                }
            }
        }
        b"out" => match args.first() {
            Some(key) if store.out(key)? => done,
            _ => None,
        },
        b"get" => match args.first() {
            Some(key) => store.get(key)?.map(|r| vec![r.value]),
            None => None,
        },
        b"putlist" => {
            // Key, value pairs; an odd last argument is ignored. A key given twice keeps its
            // last value, as Tyrant's one-by-one puts do: only that pair goes into the batch
            // (the order of a batch's operations on one key is not defined).
            let pairs: Vec<&[&[u8]]> = args.chunks_exact(2).collect();
            let mut last = std::collections::HashMap::with_capacity(pairs.len());
            for (i, p) in pairs.iter().enumerate() {
                last.insert(p[0], i);
            }
            let ops: Vec<BatchOp> = pairs
                .iter()
                .enumerate()
                .filter(|(i, p)| last.get(p[0]) == Some(i))
                .map(|(_, p)| BatchOp::Put {
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
            for key in args {
                store.out(key)?;
            }
            done
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
        b"iternext" => st.iter_next()?.map(|(k, r)| vec![k, r.value]),
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
        // Tokyo Cabinet's error code and message: Kura reports errors per request, so the last
        // error is always "success".
        b"error" => Some(vec![b"0: success".to_vec()]),
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
            // Start key (default: the first), max (< 1: no limit), end key (exclusive).
            if !store.kind().ordered() {
                return Ok(None);
            }
            let max = max_arg(args, 1);
            let end = args.get(2);
            let mut cur = store.cursor()?;
            if let Some(from) = args.first() {
                cur.jump(from)?;
            }
            let mut items = Vec::new();
            let mut found = 0;
            while found < max {
                let Some((k, r)) = cur.next()? else { break };
                if end.is_some_and(|e| k.as_slice() >= *e) {
                    break;
                }
                items.push(k);
                items.push(r.value);
                found += 1;
            }
            Some(items)
        }
        // Table-database functions (setindex, search, genuid, …), B+ tree duplicates (putdup,
        // putdupback) and anything else: not a function of these kinds.
        _ => None,
    })
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
