//! The meta commands of the memcached text protocol (mg, ms, md, ma, me) on a [`Store`]; the
//! per-item stale / win-token state of their anti-stampede protocol is
//! [`crate::mc_common::ItemStates`].

use crate::context::Shared;
use crate::mc_access::Used;
use crate::mc_common::{absolute_expiry, append, Did, ItemState, StateShard};
use kura_engine::MemcachedOps;
use kura_engine::{Counted, Decision, Error, Outcome, Store, Value};
use kura_proto::mc_text::{self, reply, Keys};
use std::borrow::Cow;

// ----- meta commands -----

/// The argument of the first flag token starting with `c` (e.g. `T60` → `60`).
fn meta_arg<'a>(flags: Keys<'a>, c: u8) -> Option<&'a [u8]> {
    flags.iter().find(|t| t[0] == c).map(|t| &t[1..])
}

fn meta_has(flags: Keys<'_>, c: u8) -> bool {
    flags.iter().any(|t| t == [c])
}

/// A meta flag's number, read as memcached reads it (`safe_strtol` / `safe_strtoull`).
trait MetaNum: Sized {
    fn parse(t: &[u8]) -> Option<Self>;
}
impl MetaNum for i64 {
    fn parse(t: &[u8]) -> Option<i64> {
        mc_text::c_strtol32(t).map(i64::from)
    }
}
impl MetaNum for u32 {
    fn parse(t: &[u8]) -> Option<u32> {
        mc_text::c_strtoul32(t)
    }
}
impl MetaNum for u64 {
    fn parse(t: &[u8]) -> Option<u64> {
        mc_text::c_strtoull(t)
    }
}

fn meta_num<T: MetaNum>(flags: Keys<'_>, c: u8) -> Result<Option<T>, ()> {
    match meta_arg(flags, c) {
        None => Ok(None),
        Some(a) => T::parse(a).map(Some).ok_or(()),
    }
}

/// Seconds left before `expires` (-1: never).
fn ttl_left(expires: u64, now: u64) -> i64 {
    if expires == 0 {
        -1
    } else {
        expires.saturating_sub(now) as i64
    }
}

/// The key of a meta request: base64-decoded when the request has the `b` flag. `None` (the
/// error reply written) when it does not decode; memcached answers `CLIENT_ERROR error decoding
/// key` (and, for ms, skips the data block first — the codec already consumed it).
fn meta_key<'k>(flags: Keys<'_>, key: &'k [u8], out: &mut Vec<u8>) -> Option<Cow<'k, [u8]>> {
    use base64::Engine;
    if !meta_has(flags, b'b') {
        return Some(Cow::Borrowed(key));
    }
    match base64::engine::general_purpose::STANDARD.decode(key) {
        Ok(k) if !k.is_empty() => Some(Cow::Owned(k)),
        _ => {
            meta_bad(out, "error decoding key");
            None
        }
    }
}

/// The return flags a meta request asked for, in the order it asked for them. With `b` the
/// key (`k`) is returned base64-encoded and followed by a `b` flag, as memcached does. Of the
/// flags that show the record (`c`, `f`, `s`, `t`), only those in `shows` are returned: as
/// in memcached 1.6.18, mg shows all four, ma `c` and `t`, ms `c` only.
#[allow(clippy::too_many_arguments)]
fn meta_ret(
    out: &mut Vec<u8>,
    flags: Keys<'_>,
    key: &[u8],
    meta: Option<&kura_engine::Meta>,
    size: usize,
    shows: &[u8],
    now: u64,
    used: Option<Used>,
) {
    for t in flags.iter() {
        let rest = &t[1..];
        let meta = meta.filter(|_| shows.contains(&t[0]));
        match (t[0], meta) {
            (b'k', _) if rest.is_empty() => {
                out.extend_from_slice(b" k");
                if meta_has(flags, b'b') {
                    use base64::Engine;
                    let enc = base64::engine::general_purpose::STANDARD.encode(key);
                    out.extend_from_slice(enc.as_bytes());
                    out.extend_from_slice(b" b");
                } else {
                    out.extend_from_slice(key);
                }
            }
            (b'O', _) => {
                out.extend_from_slice(b" O");
                out.extend_from_slice(rest);
            }
            (b'c', Some(m)) if rest.is_empty() => {
                out.extend_from_slice(b" c");
                kura_proto::push_decimal(out, m.version);
            }
            (b'f', Some(m)) if rest.is_empty() => {
                out.extend_from_slice(b" f");
                kura_proto::push_decimal(out, u64::from(m.flags));
            }
            (b's', Some(_)) if rest.is_empty() => {
                out.extend_from_slice(b" s");
                kura_proto::push_decimal(out, size as u64);
            }
            (b'h', Some(_)) if rest.is_empty() => {
                if let Some(u) = used {
                    out.extend_from_slice(if u.fetched { b" h1" } else { b" h0" });
                }
            }
            (b'l', Some(_)) if rest.is_empty() => {
                if let Some(u) = used {
                    out.extend_from_slice(b" l");
                    kura_proto::push_decimal(out, now.saturating_sub(u.at));
                }
            }
            (b't', Some(m)) if rest.is_empty() => {
                out.extend_from_slice(b" t");
                match ttl_left(m.expires, now) {
                    -1 => out.extend_from_slice(b"-1"),
                    n => kura_proto::push_decimal(out, n as u64),
                }
            }
            _ => {}
        }
    }
}

/// The record flags mg returns.
const MG_SHOWS: &[u8] = b"cfhlst";

fn meta_bad(out: &mut Vec<u8>, what: &str) {
    out.extend_from_slice(format!("CLIENT_ERROR {what}\r\n").as_bytes());
}

/// `mg`. Besides the return flags: `T` touches, `N<ttl>` creates an empty item on a miss and
/// hands this client the win (`W`), `R<ttl>` hands out the win when the item's remaining TTL is
/// below the token; a win already handed out shows as `Z`, a stale item as `X` (and its first
/// reader wins). `W`, `X` and `Z` follow the requested flags, in memcached's order: `Z X W`.
pub fn meta_get(
    store: &dyn Store,
    shared: &Shared,
    key: &[u8],
    flags: Keys<'_>,
    now: u64,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    let Some(key) = meta_key(flags, key, out) else {
        return Ok(());
    };
    let (Ok(touch), Ok(vivify), Ok(recache)) = (
        meta_num::<i64>(flags, b'T'),
        meta_num::<i64>(flags, b'N'),
        meta_num::<i64>(flags, b'R'),
    ) else {
        meta_bad(out, "bad token in command line format");
        return Ok(());
    };
    shared.cmd_get.add(1);
    // `h` and `l`: the item's use before this request (kept in memory from the first request
    // that asks, see crate::mc_access).
    let used = if meta_has(flags, b'h') || meta_has(flags, b'l') {
        shared.mc.access.start(now);
        Some(shared.mc.access.used(&key, now))
    } else {
        None
    };
    let mut states = shared.mc.item_states.lock(&key);
    let mut hit = false;
    if touch.is_some() || vivify.is_some() {
        // The record version before this request changed anything, and whether `N` created it.
        let mut before = 0;
        let mut created = false;
        let mut value = None;
        let meta = store.accept(&key, &mut |cur| match cur {
            Some(c) => {
                value = Some(c.value.to_vec());
                before = c.meta.version;
                created = false;
                match touch {
                    Some(t) => Decision::Touch {
                        expires: absolute_expiry(t, now),
                    },
                    None => Decision::Keep,
                }
            }
            None => match vivify {
                Some(ttl) => {
                    value = Some(Vec::new());
                    created = true;
                    Decision::Put {
                        value: Value::Lent(&[]),
                        flags: 0,
                        expires: absolute_expiry(ttl, now),
                    }
                }
                None => Decision::Keep,
            },
        })?;
        if let Some((value, meta)) = value.zip(meta) {
            hit = true;
            let got = Got {
                value: &value,
                meta,
                before,
                created,
                used: used.map(|u| {
                    if created {
                        Used {
                            fetched: false,
                            at: now,
                        }
                    } else {
                        u
                    }
                }),
            };
            meta_hit(out, &mut states, &key, flags, got, recache, now);
        }
    } else {
        // A plain read, encoded from the store's memory.
        store.view(&key, &mut |value, meta| {
            hit = true;
            let got = Got {
                value,
                meta,
                before: meta.version,
                created: false,
                used,
            };
            meta_hit(out, &mut states, &key, flags, got, recache, now);
        })?;
    }
    drop(states);
    shared.mc.detail.record(&key, Did::Get { hit });
    if hit {
        shared.get_hits.add(1);
        // `u`: no bump, as memcached leaves the item's use alone.
        if !meta_has(flags, b'u') {
            shared.mc.access.fetched(&key, now);
        }
    } else {
        shared.get_misses.add(1);
        if !meta_has(flags, b'q') {
            out.extend_from_slice(b"EN");
            meta_ret(out, flags, &key, None, 0, b"", now, None);
            out.extend_from_slice(b"\r\n");
        }
    }
    Ok(())
}

/// A record an mg found: its value and metadata after the request, its version before it, and
/// whether the request created it (`N`).
struct Got<'a> {
    value: &'a [u8],
    meta: kura_engine::Meta,
    before: u64,
    created: bool,
    /// The item's use before the request (`h`, `l`).
    used: Option<Used>,
}

/// The reply to an mg that found its record, and the record's new stale / win-token state.
fn meta_hit(
    out: &mut Vec<u8>,
    states: &mut StateShard,
    key: &[u8],
    flags: Keys<'_>,
    got: Got<'_>,
    recache: Option<i64>,
    now: u64,
) {
    let Got {
        value,
        meta,
        before,
        created,
        used,
    } = got;
    let st = if created {
        ItemState::default()
    } else {
        states.get(key, before)
    };
    let mut won = created
        || recache.is_some_and(|r| {
            !st.token_sent && meta.expires != 0 && meta.expires < absolute_expiry(r, now)
        });
    let with_value = meta_has(flags, b'v');
    if with_value {
        out.extend_from_slice(b"VA ");
        kura_proto::push_decimal(out, value.len() as u64);
    } else {
        out.extend_from_slice(b"HD");
    }
    meta_ret(
        out,
        flags,
        key,
        Some(&meta),
        value.len(),
        MG_SHOWS,
        now,
        used,
    );
    if st.token_sent {
        out.extend_from_slice(b" Z");
    }
    if st.stale {
        out.extend_from_slice(b" X");
        // A stale item's first reader wins the recache.
        won |= !st.token_sent;
    }
    if won {
        out.extend_from_slice(b" W");
    }
    let after = ItemState {
        stale: st.stale,
        token_sent: st.token_sent || won,
    };
    if after != st || (meta.version != before && after != ItemState::default()) {
        // New state, or our own touch moved the record to a new version.
        states.set(key, meta.version, after);
    }
    out.extend_from_slice(b"\r\n");
    if with_value {
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
}

pub fn meta_set(
    store: &dyn Store,
    shared: &Shared,
    key: &[u8],
    data: &[u8],
    flags: Keys<'_>,
    now: u64,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    let Some(key) = meta_key(flags, key, out) else {
        return Ok(());
    };
    let key = &*key;
    let (Ok(cflags), Ok(ttl), Ok(cas)) = (
        meta_num::<u32>(flags, b'F'),
        meta_num::<i64>(flags, b'T'),
        meta_num::<u64>(flags, b'C'),
    ) else {
        meta_bad(out, "bad token in command line format");
        return Ok(());
    };
    shared.cmd_set.add(1);
    shared.mc.detail.record(key, Did::Set);
    let (cflags, expires) = (cflags.unwrap_or(0), absolute_expiry(ttl.unwrap_or(0), now));
    let mode = meta_arg(flags, b'M')
        .and_then(|m| m.first().copied())
        .unwrap_or(b'S');
    let outcome: Result<kura_engine::Meta, &[u8]> = match (mode.to_ascii_uppercase(), cas) {
        (b'S', Some(c)) | (b'R', Some(c)) if meta_has(flags, b'I') => {
            match cas_or_stale(store, shared, key, c, data, cflags, expires)? {
                Outcome::Stored(m) => Ok(m),
                Outcome::VersionMismatch => Err(b"EX"),
                _ => Err(b"NF"),
            }
        }
        (b'S', Some(c)) | (b'R', Some(c)) => match store.cas(key, c, data, cflags, expires)? {
            Outcome::Stored(m) => Ok(m),
            Outcome::VersionMismatch => Err(b"EX"),
            _ => Err(b"NF"),
        },
        (b'S', None) => Ok(store.put_with(key, data, cflags, expires)?),
        (b'E', _) => match store.putkeep(key, data, cflags, expires)? {
            Outcome::Stored(m) => Ok(m),
            _ => Err(b"NS"),
        },
        (b'R', None) => match store.replace(key, data, cflags, expires)? {
            Outcome::Stored(m) => Ok(m),
            _ => Err(b"NS"),
        },
        (b'A', _) | (b'P', _) => {
            let front = mode.eq_ignore_ascii_case(&b'P');
            match append(
                store,
                (shared.max_item_size, shared.max_value_size),
                key,
                data,
                front,
                cas.unwrap_or(0),
            )? {
                Outcome::Stored(m) => Ok(m),
                Outcome::VersionMismatch => Err(b"EX"),
                _ => Err(b"NS"),
            }
        }
        _ => {
            meta_bad(out, "invalid mode for ms M token");
            return Ok(());
        }
    };
    match outcome {
        Ok(m) => {
            shared.mc.total_items.add(1);
            shared.mc.access.wrote(key, now);
            if !meta_has(flags, b'q') {
                out.extend_from_slice(b"HD");
                meta_ret(out, flags, key, Some(&m), data.len(), b"c", now, None);
                out.extend_from_slice(b"\r\n");
            }
        }
        Err(code) => {
            out.extend_from_slice(code);
            // memcached shows a refused set's cas as 0.
            let none = kura_engine::Meta::default();
            meta_ret(out, flags, key, Some(&none), 0, b"c", now, None);
            out.extend_from_slice(b"\r\n");
        }
    }
    Ok(())
}

/// `ms <key> … C<cas> I`: a compare-and-swap that, when `cas` is older than the record's
/// version (Kura's versions only grow), still stores the value but as a stale item: the old
/// expiry is kept, the item is marked stale and a win token already handed out stays handed
/// out (memcached's "set-to-invalid if CAS is older").
fn cas_or_stale(
    store: &dyn Store,
    shared: &Shared,
    key: &[u8],
    cas: u64,
    data: &[u8],
    cflags: u32,
    expires: u64,
) -> Result<Outcome, Error> {
    kura_engine::store::check_sizes(key, data.len())?;
    let mut states = shared.mc.item_states.lock(key);
    // `None` once the visitor decided to store.
    let mut failed = Some(Outcome::NotFound);
    let mut stale_from = None;
    let meta = store.accept(key, &mut |cur| match cur {
        None => {
            failed = Some(Outcome::NotFound);
            Decision::Keep
        }
        Some(c) if cas <= c.meta.version => {
            failed = None;
            let stale = cas != c.meta.version;
            stale_from = stale.then_some(c.meta.version);
            Decision::Put {
                value: Value::Lent(data),
                flags: cflags,
                expires: if stale { c.meta.expires } else { expires },
            }
        }
        Some(_) => {
            failed = Some(Outcome::VersionMismatch);
            Decision::Keep
        }
    })?;
    Ok(match (failed, meta) {
        (None, Some(m)) => {
            if let Some(old) = stale_from {
                let sent = states.get(key, old).token_sent;
                let st = ItemState {
                    stale: true,
                    token_sent: sent,
                };
                states.set(key, m.version, st);
            }
            Outcome::Stored(m)
        }
        (None, None) => Outcome::NotFound,
        (Some(r), _) => r,
    })
}

/// `md`. With `I` the item is not deleted but marked stale (its next reader wins the recache),
/// gets a new CAS and, with `T<ttl>`, a new expiry.
pub fn meta_delete(
    store: &dyn Store,
    shared: &Shared,
    key: &[u8],
    flags: Keys<'_>,
    now: u64,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    let Some(key) = meta_key(flags, key, out) else {
        return Ok(());
    };
    let key = &*key;
    let (Ok(cas), Ok(ttl)) = (meta_num::<u64>(flags, b'C'), meta_num::<i64>(flags, b'T')) else {
        meta_bad(out, "bad token in command line format");
        return Ok(());
    };
    let outcome = if meta_has(flags, b'I') {
        let mut states = shared.mc.item_states.lock(key);
        let mut result = Outcome::NotFound;
        let meta = store.accept(key, &mut |cur| match cur {
            None => {
                result = Outcome::NotFound;
                Decision::Keep
            }
            Some(c) if cas.is_some_and(|v| v != c.meta.version) => {
                result = Outcome::VersionMismatch;
                Decision::Keep
            }
            Some(c) => {
                result = Outcome::Stored(c.meta);
                // Written again, unchanged but for the expiry, for a new version: memcached's
                // CAS bump (a touch would keep the version).
                Decision::Put {
                    value: Value::copied(c.value),
                    flags: c.meta.flags,
                    expires: ttl.map_or(c.meta.expires, |t| absolute_expiry(t, now)),
                }
            }
        })?;
        match (result, meta) {
            (Outcome::Stored(_), Some(m)) => {
                // Stale, and no win token out yet: the next reader wins.
                let st = ItemState {
                    stale: true,
                    token_sent: false,
                };
                states.set(key, m.version, st);
                if meta_has(flags, b'q') {
                    return Ok(());
                }
                b"HD" as &[u8]
            }
            (Outcome::VersionMismatch, _) => {
                shared.delete_misses.add(1);
                b"EX"
            }
            _ => {
                shared.delete_misses.add(1);
                b"NF"
            }
        }
    } else {
        match store.out_if(key, cas.unwrap_or(0))? {
            Outcome::Deleted => {
                shared.delete_hits.add(1);
                if meta_has(flags, b'q') {
                    return Ok(());
                }
                b"HD" as &[u8]
            }
            Outcome::VersionMismatch => b"EX",
            _ => {
                shared.delete_misses.add(1);
                b"NF"
            }
        }
    };
    out.extend_from_slice(outcome);
    meta_ret(out, flags, key, None, 0, b"", 0, None);
    out.extend_from_slice(b"\r\n");
    Ok(())
}

pub fn meta_arith(
    store: &dyn Store,
    shared: &Shared,
    key: &[u8],
    flags: Keys<'_>,
    now: u64,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    let Some(key) = meta_key(flags, key, out) else {
        return Ok(());
    };
    let key = &*key;
    let (Ok(delta), Ok(vivify), Ok(initial), Ok(cas), Ok(touch)) = (
        meta_num::<u64>(flags, b'D'),
        meta_num::<i64>(flags, b'N'),
        meta_num::<u64>(flags, b'J'),
        meta_num::<u64>(flags, b'C'),
        meta_num::<i64>(flags, b'T'),
    ) else {
        // memcached 1.6.18's ma says this of any flag whose number does not read.
        meta_bad(out, "invalid or duplicate flag");
        return Ok(());
    };
    let decr = matches!(
        meta_arg(flags, b'M').and_then(|m| m.first().copied()),
        Some(b'D' | b'd' | b'-')
    );
    let (hits, misses) = if decr {
        (&shared.mc.decr_hits, &shared.mc.decr_misses)
    } else {
        (&shared.mc.incr_hits, &shared.mc.incr_misses)
    };
    let result = loop {
        match store.incr_decimal_if(key, delta.unwrap_or(1), decr, cas.unwrap_or(0)) {
            Ok(Counted::Done(n, m)) => {
                hits.add(1);
                break Some((n, m, false));
            }
            Ok(Counted::VersionMismatch) => {
                out.extend_from_slice(b"EX");
                meta_ret(out, flags, key, None, 0, b"", now, None);
                out.extend_from_slice(b"\r\n");
                return Ok(());
            }
            Ok(Counted::NotFound) => {
                misses.add(1);
                let Some(ttl) = vivify else { break None };
                let n = initial.unwrap_or(0);
                let v = Value::decimal(n);
                if let Outcome::Stored(m) = store.putkeep(key, &v, 0, absolute_expiry(ttl, now))? {
                    break Some((n, m, true));
                }
            }
            Err(Error::NotNumeric) => {
                out.extend_from_slice(reply::NON_NUMERIC);
                return Ok(());
            }
            Err(e) => return Err(e),
        }
    };
    if result.is_some() {
        shared.mc.access.wrote(key, now);
    }
    // `T<ttl>` sets the item's TTL (and `N<ttl>` the TTL of an item it created), in the order
    // of the flags as memcached applies them after the arithmetic: `t` shows the TTL as the
    // flags before it left it.
    let result = match result {
        Some((n, mut m, created)) if touch.is_some() || created => {
            let (mut at_t, mut last) = (None, if created { 0 } else { m.expires });
            for f in flags.iter() {
                match f[0] {
                    b't' => at_t = Some(last),
                    b'T' => last = absolute_expiry(touch.unwrap_or(0), now),
                    b'N' if created => last = absolute_expiry(vivify.unwrap_or(0), now),
                    _ => {}
                }
            }
            if last != m.expires {
                if let Some(touched) = store.touch(key, last)? {
                    m = touched;
                }
            }
            m.expires = at_t.unwrap_or(last);
            Some((n, m))
        }
        r => r.map(|(n, m, _)| (n, m)),
    };
    match result {
        Some((n, m)) => {
            // The number itself (the value stored may be padded with spaces).
            let text = Value::decimal(n);
            if meta_has(flags, b'q') {
                // memcached hides a successful ma under q, its value too.
            } else if meta_has(flags, b'v') {
                out.extend_from_slice(b"VA ");
                kura_proto::push_decimal(out, text.len() as u64);
                meta_ret(out, flags, key, Some(&m), text.len(), b"ct", now, None);
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(&text);
                out.extend_from_slice(b"\r\n");
            } else {
                out.extend_from_slice(b"HD");
                meta_ret(out, flags, key, Some(&m), text.len(), b"ct", now, None);
                out.extend_from_slice(b"\r\n");
            }
        }
        None => {
            out.extend_from_slice(b"NF");
            meta_ret(out, flags, key, None, 0, b"", now, None);
            out.extend_from_slice(b"\r\n");
        }
    }
    Ok(())
}
/// `me <key>`: `ME <key> exp=<ttl> la=<seconds since last use> cas=<cas> fetch=<yes|no> cls=1
/// size=<item size>` (memcached's fields; every item is in class 1), `EN` on a miss. It
/// starts the tracking of use ([`crate::mc_access`]) and is not a use itself.
pub fn meta_debug(
    store: &dyn Store,
    shared: &Shared,
    key: &[u8],
    now: u64,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    shared.mc.access.start(now);
    match store.get(key)? {
        Some(r) => {
            let used = shared.mc.access.used(key, now);
            out.extend_from_slice(b"ME ");
            out.extend_from_slice(key);
            out.extend_from_slice(b" exp=");
            match ttl_left(r.meta.expires, now) {
                -1 => out.extend_from_slice(b"-1"),
                n => kura_proto::push_decimal(out, n as u64),
            }
            out.extend_from_slice(b" la=");
            kura_proto::push_decimal(out, now.saturating_sub(used.at));
            out.extend_from_slice(b" cas=");
            kura_proto::push_decimal(out, r.meta.version);
            out.extend_from_slice(if used.fetched {
                &b" fetch=yes cls=1 size="[..]
            } else {
                b" fetch=no cls=1 size="
            });
            let size = mc_text::item_size(key.len(), r.meta.flags, r.value.len());
            kura_proto::push_decimal(out, size);
            out.extend_from_slice(b"\r\n");
        }
        None => out.extend_from_slice(b"EN\r\n"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mc_exec::tests::{kinds, session};

    #[test]
    fn meta_commands() {
        for db in kinds() {
            let sh = Shared::new(0, 1 << 20);
            let now = kura_engine::store::now_secs();
            let r = session(&*db, &sh, b"ms k 5 F7 T100\r\nhello\r\nmg k v f s t k O9\r\nmg nope v\r\nmg nope v q\r\nmn\r\n", now);
            assert_eq!(r, "HD\r\nVA 5 f7 s5 t100 kk O9\r\nhello\r\nEN\r\nMN\r\n");
            let r = session(&*db, &sh, b"mg k c\r\n", now);
            let cas: u64 = r.trim().strip_prefix("HD c").unwrap().parse().unwrap();
            let r = session(&*db, &sh, format!("ms k 1 C{}\r\nx\r\nms k 1 C{cas}\r\ny\r\nms k 1 ME\r\nz\r\nms k 2 MA\r\n!!\r\nms no 1 MR\r\nz\r\nms no 1 MA\r\nz\r\nmg k v\r\n", cas + 9).as_bytes(), now);
            assert_eq!(r, "EX\r\nHD\r\nNS\r\nHD\r\nNS\r\nNS\r\nVA 3\r\ny!!\r\n");
            let r = session(&*db, &sh, b"ma c v\r\nma c v N0 J10\r\nma c v D5\r\nma c v MD D100\r\nma k\r\nmd c q\r\nmd c\r\nme k\r\nme none\r\n", now);
            assert!(r.starts_with("NF\r\nVA 2\r\n10\r\nVA 2\r\n15\r\nVA 1\r\n0\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\nNF\r\nME k exp=-1 la=0 cas="), "{r}");
            // size: the item as memcached counts it (48 + key 1 + NUL + value 3 + CRLF + cas 8).
            assert!(r.ends_with(" fetch=no cls=1 size=63\r\nEN\r\n"), "{r}");
            // ma with C: only while the counter's version is that one.
            let r = session(&*db, &sh, b"set c 0 0 1\r\n5\r\nmg c c\r\n", now);
            let cas = flag_num(r.strip_prefix("STORED\r\n").unwrap(), 'c');
            let req = format!(
                "ma c v C{}\r\nma c v C{cas}\r\nma c C1 q\r\nma none C{cas}\r\nma c v q\r\nmn\r\n",
                cas + 1
            );
            for (input, want) in [
                (
                    req.as_bytes(),
                    "EX\r\nVA 1\r\n6\r\nEX\r\nNF\r\nMN\r\n".to_string(),
                ),
                // ms shows the cas alone (0 when refused), ma the cas and the TTL (as memcached
                // 1.6.18 does).
                (
                    b"ms a 1 k O1 f s t T50\r\nx\r\nms a 1 ME c k\r\nx\r\nma c t f s k\r\n",
                    "HD ka O1\r\nNS c0 ka\r\nHD t-1 kc\r\n".to_string(),
                ),
                // h and l: the use before this request (kept from the first request that
                // asks); an unknown flag is refused.
                (
                    b"mg c v h\r\nmg c l\r\nmg c v Y\r\nmg c v\r\n",
                    "VA 1 h0\r\n8\r\nHD l0\r\nCLIENT_ERROR invalid flag\r\nVA 1\r\n8\r\n"
                        .to_string(),
                ),
            ] {
                assert_eq!(session(&*db, &sh, input, now), want);
            }
        }
    }

    /// The number after flag `c` in the first line of a meta reply (e.g. `c` of `HD c12 W`).
    fn flag_num(reply: &str, c: char) -> u64 {
        let line = reply.lines().next().unwrap();
        let tok = line.split(' ').skip(1).find(|t| t.starts_with(c)).unwrap();
        tok[1..].parse().unwrap_or_else(|_| panic!("{reply}"))
    }

    #[test]
    fn meta_base64_keys() {
        // 44OG44K544OI is "テスト" (tesuto in katakana), memcached's own test key.
        let tesuto = "テスト".as_bytes();
        for db in kinds() {
            let sh = Shared::new(0, 1 << 20);
            let now = kura_engine::store::now_secs();
            let r = session(
                &*db,
                &sh,
                b"ms 44OG44K544OI 2 b k\r\npo\r\nmg 44OG44K544OI v\r\nmg 44OG44K544OI b v k s\r\n",
                now,
            );
            assert_eq!(
                r,
                "HD k44OG44K544OI b\r\nEN\r\nVA 2 k44OG44K544OI b s2\r\npo\r\n"
            );
            // The store holds the decoded key.
            assert_eq!(db.get(tesuto).unwrap().unwrap().value, b"po");
            assert!(db.get(b"44OG44K544OI").unwrap().is_none());
            // ma and md decode too; a miss returns the key encoded as well.
            let r = session(&*db, &sh, b"ma bnVt b N0 J5 v k\r\nma bnVt b v\r\nmd 44OG44K544OI b q\r\nmg 44OG44K544OI b k v\r\nmd 44OG44K544OI b k O1\r\n", now);
            assert_eq!(
                r,
                "VA 1 kbnVt b\r\n5\r\nVA 1\r\n6\r\nEN k44OG44K544OI b\r\nNF k44OG44K544OI b O1\r\n"
            );
            assert_eq!(db.get(b"num").unwrap().unwrap().value, b"6");
            // Not base64: memcached's error, and ms skips its data block first.
            let r = session(
                &*db,
                &sh,
                b"mg a*b b v\r\nms !!!! 2 b\r\nxx\r\nmd Zm9 b\r\nma ==== b\r\nmn\r\n",
                now,
            );
            let e = "CLIENT_ERROR error decoding key\r\n";
            assert_eq!(r, format!("{e}{e}{e}{e}MN\r\n"));
        }
    }

    #[test]
    fn meta_vivify_win_then_token_sent_then_normal_hit() {
        for db in kinds() {
            let sh = Shared::new(0, 1 << 20);
            let now = kura_engine::store::now_secs();
            // Pipelined: the first client creates the empty item and wins, the second sees Z.
            let r = session(
                &*db,
                &sh,
                b"mg needwin s c v N30 t\r\nmg needwin s t v N30\r\nmg needwin s\r\n",
                now,
            );
            let cas = flag_num(&r, 'c');
            assert_eq!(
                r,
                format!("VA 0 s0 c{cas} t30 W\r\n\r\nVA 0 s0 t30 Z\r\n\r\nHD s0 Z\r\n")
            );
            assert_eq!(sh.get_hits.get(), 3);
            // A wrong CAS fails; the winner's CAS store succeeds and the item is normal again.
            let r = session(
                &*db,
                &sh,
                format!("ms needwin 2 C{} T120\r\nnu\r\nms needwin 2 C{cas} T120\r\nmu\r\nmg needwin s k t v N30\r\n", cas + 5000).as_bytes(),
                now,
            );
            assert_eq!(r, "EX\r\nHD\r\nVA 2 s2 kneedwin t120\r\nmu\r\n");
            // q does not hide a vivified hit (memcached: the miss returns data anyway).
            let r = session(&*db, &sh, b"mg quietautov s N30 t q\r\nmn\r\n", now);
            assert_eq!(r, "HD s0 t30 W\r\nMN\r\n");
            // Any other write clears the token: a plain set, then a normal hit.
            let r = session(
                &*db,
                &sh,
                b"mg quietautov s\r\nset quietautov 0 0 1\r\nx\r\nmg quietautov s v\r\n",
                now,
            );
            assert_eq!(r, "HD s0 Z\r\nSTORED\r\nVA 1 s1\r\nx\r\n");
        }
    }

    #[test]
    fn meta_recache_when_ttl_is_low() {
        for db in kinds() {
            let sh = Shared::new(0, 1 << 20);
            let now = kura_engine::store::now_secs();
            let r = session(
                &*db,
                &sh,
                b"ms rc 2 T120\r\nmu\r\nmg rc v R30\r\nmg rc c v R130\r\nmg rc v R130\r\nset forever 0 0 1\r\nf\r\nmg forever R130\r\n",
                now,
            );
            let cas = flag_num(&r["HD\r\nVA 2\r\nmu\r\n".len()..], 'c');
            // TTL 120 is not below 30: no win; below 130: the first wins, the next sees Z; an
            // item that never expires never triggers R.
            assert_eq!(
                r,
                format!(
                    "HD\r\nVA 2\r\nmu\r\nVA 2 c{cas} W\r\nmu\r\nVA 2 Z\r\nmu\r\nSTORED\r\nHD\r\n"
                )
            );
            let r = session(
                &*db,
                &sh,
                format!("ms rc 4 C{cas} T300\r\nzuuu\r\nmg rc s t v R130\r\n").as_bytes(),
                now,
            );
            assert_eq!(r, "HD\r\nVA 4 s4 t300\r\nzuuu\r\n");
        }
    }

    #[test]
    fn meta_invalidate_serve_stale_and_revalidate() {
        for db in kinds() {
            let sh = Shared::new(0, 1 << 20);
            let now = kura_engine::store::now_secs();
            let r = session(
                &*db,
                &sh,
                b"set toinv 0 0 3\r\nmoo\r\nmg toinv s v\r\nmd toinv I T30\r\nmg toinv s t c v\r\n",
                now,
            );
            let tail = "STORED\r\nVA 3 s3\r\nmoo\r\nHD\r\n";
            assert!(r.starts_with(tail), "{r}");
            let cas = flag_num(&r[tail.len()..], 'c');
            // Marked stale (not deleted), TTL lowered, CAS bumped; the first reader wins.
            assert_eq!(
                &r[tail.len()..],
                format!("VA 3 s3 t30 c{cas} X W\r\nmoo\r\n")
            );
            assert_eq!(sh.delete_hits.get(), 0);
            // A CAS that is merely old fails without I; with I it stores, but stays stale,
            // keeps its TTL and the token already sent.
            let r = session(
                &*db,
                &sh,
                b"ms toinv 1 T90 C0\r\nf\r\nms toinv 1 I T90 C1\r\nf\r\nmg toinv s t c v\r\n",
                now,
            );
            let tail = "EX\r\nHD\r\n";
            assert!(r.starts_with(tail), "{r}");
            let cas2 = flag_num(&r[tail.len()..], 'c');
            assert!(cas2 > cas);
            assert_eq!(
                &r[tail.len()..],
                format!("VA 1 s1 t30 c{cas2} Z X\r\nf\r\n")
            );
            // A newer CAS than the item's fails even with I.
            let r = session(
                &*db,
                &sh,
                format!("ms toinv 1 I C{}\r\nz\r\n", cas2 + 1000).as_bytes(),
                now,
            );
            assert_eq!(r, "EX\r\n");
            // The right CAS revalidates: no stale, win or token flags, new TTL and CAS.
            let r = session(
                &*db,
                &sh,
                format!("ms toinv 1 T90 C{cas2}\r\ng\r\nmg toinv s t v\r\n").as_bytes(),
                now,
            );
            assert_eq!(r, "HD\r\nVA 1 s1 t90\r\ng\r\n");
            // md I: CAS mismatch, miss, quiet; a touch by mg carries the state to the new
            // version, a plain delete removes the item.
            let r = session(
                &*db,
                &sh,
                b"md toinv I C1\r\nmd nope I k\r\nmd toinv I q\r\nmg toinv T60 t\r\nmg toinv t\r\nmd toinv\r\nmg toinv v\r\n",
                now,
            );
            assert_eq!(
                r,
                "EX\r\nNF knope\r\nHD t60 X W\r\nHD t60 Z X\r\nHD\r\nEN\r\n"
            );
            assert!(sh.mc.item_states.len() <= 1);
        }
    }
}
