//! The key commands: DEL, EXISTS, expiry (EXPIRE…, TTL…, PERSIST), TYPE, KEYS, SCAN and the
//! flushes.
//!
//! Expiry is the record's expiration time, in unix seconds: a time in milliseconds is
//! rounded up to the next whole second ([`expires_at`]), so a key never goes before the
//! time asked; TTL counts whole seconds left (rounded down, so `EX n` reads back as n), PTTL
//! the milliseconds left to that second (up to 999 more than a PX asked).

use super::{err, int_arg, keep_scans, Call, Done, SYNTAX};
use crate::context::Next;
use crate::out::Out;
use kura_engine::{Decision, Store};
use kura_proto::resp;

/// The wall clock in unix milliseconds.
pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A record's expiration as a command sets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Expiry {
    /// This expiration time (unix seconds; 0: never).
    At(u64),
    /// The record's own, kept (SET KEEPTTL).
    Keep,
    /// A time already past: the key goes.
    Past,
}

/// The expiration time of a record asked to expire at `at_ms` (unix milliseconds): the
/// second it lies in, rounded up; [`Expiry::Past`] when the time has come.
pub(super) fn expires_at(at_ms: i64, now_ms: i64) -> Expiry {
    if at_ms <= now_ms {
        return Expiry::Past;
    }
    Expiry::At((at_ms as u64).div_ceil(1000))
}

pub(super) fn del(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let mut n = 0;
    for k in &c.args[1..] {
        if c.store.out(k)? {
            n += 1;
            c.shared.delete_hits.add(1);
        } else {
            c.shared.delete_misses.add(1);
        }
    }
    resp::integer(out, n);
    Ok(Next::Continue)
}

pub(super) fn exists(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let mut n = 0;
    for k in &c.args[1..] {
        if c.store.view(k, &mut |_, _| {})? {
            n += 1;
        }
    }
    resp::integer(out, n);
    Ok(Next::Continue)
}

/// EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT with Redis 7's NX, XX, GT, LT.
pub(super) fn expire(c: &mut Call<'_, '_, '_>, name: &str, out: &mut Out) -> Done {
    let n = int_arg(c.args[2])?;
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for o in &c.args[3..] {
        match o.to_ascii_uppercase().as_slice() {
            b"NX" => nx = true,
            b"XX" => xx = true,
            b"GT" => gt = true,
            b"LT" => lt = true,
            _ => {
                return Err(err(format!(
                    "ERR Unsupported option {}",
                    String::from_utf8_lossy(o)
                )))
            }
        }
    }
    if nx && (xx || gt || lt) {
        return Err(err(
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if gt && lt {
        return Err(err(
            "ERR GT and LT options at the same time are not compatible",
        ));
    }
    let invalid = || err(format!("ERR invalid expire time in '{name}' command"));
    let now = now_ms();
    let ms = match name {
        "expire" | "expireat" => n.checked_mul(1000).ok_or_else(invalid)?,
        _ => n,
    };
    let at_ms = match name {
        "expire" | "pexpire" => ms.checked_add(now).ok_or_else(invalid)?,
        _ => ms,
    };
    let exp = expires_at(at_ms, now);
    let new_s = match exp {
        Expiry::At(s) => s,
        _ => 0,
    };
    let mut done = false;
    c.store.accept(c.args[1], &mut |cur| {
        done = false;
        let Some(cur) = cur else {
            return Decision::Keep;
        };
        let old = cur.meta.expires;
        // No expiry counts as infinite for GT and LT.
        let ok = !(nx && old != 0 || xx && old == 0)
            && !(gt && (old == 0 || exp == Expiry::Past || new_s <= old))
            && !(lt && old != 0 && exp != Expiry::Past && new_s >= old);
        if !ok {
            return Decision::Keep;
        }
        done = true;
        match exp {
            Expiry::At(s) => Decision::Touch { expires: s },
            _ => Decision::Remove,
        }
    })?;
    resp::integer(out, i64::from(done));
    Ok(Next::Continue)
}

/// TTL, PTTL, EXPIRETIME, PEXPIRETIME: -2 for a missing key, -1 for one without expiry.
pub(super) fn ttl(c: &mut Call<'_, '_, '_>, name: &str, out: &mut Out) -> Done {
    let mut exp = None;
    c.store.view(c.args[1], &mut |_, m| exp = Some(m.expires))?;
    let n = match exp {
        None => -2,
        Some(0) => -1,
        Some(s) => {
            let at_ms = (s as i64).saturating_mul(1000);
            match name {
                // Whole seconds left, rounded down: `EX n` reads back as n although the
                // record's second was rounded up.
                "ttl" => (at_ms - now_ms()).max(0) / 1000,
                "pttl" => (at_ms - now_ms()).max(0),
                "expiretime" => s as i64,
                _ => at_ms,
            }
        }
    };
    resp::integer(out, n);
    Ok(Next::Continue)
}

pub(super) fn persist(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let mut done = false;
    c.store.accept(c.args[1], &mut |cur| match cur {
        Some(cur) if cur.meta.expires != 0 => {
            done = true;
            Decision::Touch { expires: 0 }
        }
        _ => {
            done = false;
            Decision::Keep
        }
    })?;
    resp::integer(out, i64::from(done));
    Ok(Next::Continue)
}

pub(super) fn type_of(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let found = c.store.view(c.args[1], &mut |_, _| {})?;
    // A table's records are hashes (see `hashes`).
    let kind = match (found, c.store.table().is_some()) {
        (false, _) => "none",
        (true, true) => "hash",
        (true, false) => "string",
    };
    resp::simple(out, kind);
    Ok(Next::Continue)
}

/// FLUSHDB and FLUSHALL (`ASYNC` and `SYNC` both flush at once); a pending delayed
/// `flush_all` of memcached is cancelled too.
pub(super) fn flush(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    match c.args.get(1).map(|a| a.to_ascii_uppercase()) {
        None => {}
        Some(a) if c.args.len() == 2 && (a == b"ASYNC" || a == b"SYNC") => {}
        Some(_) => return Err(err(SYNTAX)),
    }
    c.shared
        .flush_at
        .store(0, std::sync::atomic::Ordering::Relaxed);
    c.store.vanish()?;
    resp::ok(out);
    Ok(Next::Continue)
}

/// The literal start of a glob pattern: the bytes before its first special character.
fn literal_prefix(pattern: &[u8]) -> &[u8] {
    let end = pattern
        .iter()
        .position(|b| matches!(b, b'*' | b'?' | b'[' | b'\\'))
        .unwrap_or(pattern.len());
    &pattern[..end]
}

/// Redis's `stringmatchlen`: `*`, `?`, `[abc]`, `[^a-z]`, `\x`.
pub(crate) fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    // Where to resume after the last `*`.
    let mut star: Option<(usize, usize)> = None;
    loop {
        if pi < p.len() {
            let (matched, plen) = match p[pi] {
                b'*' => {
                    star = Some((pi, si));
                    pi += 1;
                    continue;
                }
                b'?' => (si < s.len(), 1),
                b'[' => match class(&p[pi..], s.get(si).copied()) {
                    Some((m, n)) => (m, n),
                    None => (s.get(si) == Some(&b'['), 1),
                },
                b'\\' if pi + 1 < p.len() => (s.get(si) == Some(&p[pi + 1]), 2),
                b => (s.get(si) == Some(&b), 1),
            };
            if matched {
                pi += plen;
                si += 1;
                continue;
            }
        } else if si == s.len() {
            return true;
        }
        match star {
            Some((sp, ss)) if ss < s.len() => {
                star = Some((sp, ss + 1));
                pi = sp + 1;
                si = ss + 1;
            }
            _ => return false,
        }
    }
}

/// A `[...]` class at the start of `p` against `c`: whether it matches, and its length;
/// `None` when unterminated.
fn class(p: &[u8], c: Option<u8>) -> Option<(bool, usize)> {
    let mut i = 1;
    let not = p.get(1) == Some(&b'^');
    if not {
        i += 1;
    }
    let mut hit = false;
    loop {
        let b = *p.get(i)?;
        if b == b']' {
            break;
        }
        if b == b'\\' && i + 1 < p.len() {
            hit |= c == Some(p[i + 1]);
            i += 2;
        } else if p.get(i + 1) == Some(&b'-') && p.get(i + 2).is_some_and(|&e| e != b']') {
            let (lo, hi) = (b.min(p[i + 2]), b.max(p[i + 2]));
            hit |= c.is_some_and(|c| (lo..=hi).contains(&c));
            i += 3;
        } else {
            hit |= c == Some(b);
            i += 1;
        }
    }
    Some((c.is_some() && hit != not, i + 1))
}

/// Call `f` with every live key matching `pattern`: on an ordered kind only the range of the
/// pattern's literal prefix is walked.
fn matching(
    store: &dyn Store,
    pattern: &[u8],
    f: &mut dyn FnMut(&[u8]),
) -> Result<(), kura_engine::Error> {
    let prefix = literal_prefix(pattern);
    let all = pattern == b"*";
    if store.kind().ordered() && !prefix.is_empty() {
        let range = kura_engine::KeyRange::new(prefix, None);
        store.for_each_in_range(&range, &mut |k, _, _| {
            if !k.starts_with(prefix) {
                return Ok(false);
            }
            if glob(pattern, k) {
                f(k);
            }
            Ok(true)
        })?;
        return Ok(());
    }
    store.for_each_record(&mut |k, _, _| {
        if all || glob(pattern, k) {
            f(k);
        }
        Ok(true)
    })?;
    Ok(())
}

pub(super) fn keys(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let mut found: Vec<Vec<u8>> = Vec::new();
    matching(c.store, c.args[1], &mut |k| found.push(k.to_vec()))?;
    resp::array(out, found.len());
    for k in &found {
        resp::bulk(out, k);
    }
    Ok(Next::Continue)
}

/// SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]: a walk of the store's cursor, kept
/// open on the connection between calls under the id returned (0: the walk is over). Keys
/// come in key order on ordered kinds, where `MATCH prefix*` starts at the prefix and ends
/// past it. A record live for the whole walk is returned once; the cursor survives writes.
pub(super) fn scan(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let id = std::str::from_utf8(c.args[1])
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| err("ERR invalid cursor"))?;
    let (mut pattern, mut count, mut type_ok) = (None, 10usize, true);
    let mut i = 2;
    while i < c.args.len() {
        let o = c.args[i].to_ascii_uppercase();
        let v = c.args.get(i + 1).ok_or_else(|| err(SYNTAX))?;
        match o.as_slice() {
            b"MATCH" => pattern = Some(*v),
            b"COUNT" => {
                let n = int_arg(v)?;
                if n < 1 {
                    return Err(err(SYNTAX));
                }
                count = n as usize;
            }
            b"TYPE" => {
                let own: &[u8] = if c.store.table().is_some() {
                    b"hash"
                } else {
                    b"string"
                };
                type_ok = v.eq_ignore_ascii_case(own);
            }
            _ => return Err(err(SYNTAX)),
        }
        i += 2;
    }
    let prefix = pattern.map_or(&b""[..], literal_prefix);
    let ordered = c.store.kind().ordered();
    let mut over = false;
    let mut cur = if id == 0 {
        let mut cur = c.store.cursor()?;
        // A cursor that finds nothing to stand on ends the walk at once.
        over = !if ordered && !prefix.is_empty() {
            cur.jump(prefix)?
        } else {
            cur.first()?
        };
        cur
    } else {
        let at = c
            .conn
            .scans
            .iter()
            .position(|s| s.0 == id)
            .ok_or_else(|| err("ERR invalid cursor"))?;
        c.conn.scans.remove(at).1
    };
    let mut keys = Vec::new();
    for _ in 0..if over { 0 } else { count } {
        let Some((k, _)) = cur.next()? else {
            over = true;
            break;
        };
        if ordered && !k.starts_with(prefix) {
            over = true;
            break;
        }
        if type_ok && pattern.is_none_or(|p| glob(p, &k)) {
            keys.push(k);
        }
    }
    let next = if over {
        0
    } else {
        let n = c.conn.next_scan;
        c.conn.next_scan += 1;
        c.conn.scans.push((n, cur));
        keep_scans(c.conn);
        n
    };
    resp::array(out, 2);
    resp::bulk(out, next.to_string().as_bytes());
    resp::array(out, keys.len());
    for k in &keys {
        resp::bulk(out, k);
    }
    Ok(Next::Continue)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_redis() {
        for (p, s, m) in [
            ("*", "", true),
            ("a*", "abc", true),
            ("a*", "bac", false),
            ("*c", "abc", true),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("h[ae]llo", "hello", true),
            ("h[^e]llo", "hello", false),
            ("h[a-b]llo", "hbllo", true),
            ("a\\*", "a*", true),
            ("a\\*", "ab", false),
            ("*a*b*", "xxaxxbxx", true),
            ("user:*:name", "user:1:name", true),
            ("user:*:name", "user:1:age", false),
        ] {
            assert_eq!(glob(p.as_bytes(), s.as_bytes()), m, "{p} {s}");
        }
        assert_eq!(literal_prefix(b"user:*"), b"user:");
        assert_eq!(literal_prefix(b"ab"), b"ab");
    }

    #[test]
    fn millisecond_times_round_up_to_the_second() {
        assert_eq!(expires_at(100_001, 50_000), Expiry::At(101));
        assert_eq!(expires_at(100_000, 50_000), Expiry::At(100));
        assert_eq!(expires_at(50_000, 50_000), Expiry::Past);
        assert_eq!(expires_at(-5, 50_000), Expiry::Past);
    }
}
