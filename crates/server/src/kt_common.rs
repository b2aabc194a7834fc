//! Kyoto Tycoon's helpers, shared by its RPC procedures (`http_exec`), its cursor procedures
//! (`kt_cursor`) and its binary protocol (`kt_bin_exec`): a procedure's input and output, its
//! result, Kyoto Cabinet's error texts and number reading, and expiration times. A leaf: it
//! uses no protocol module of the server.

use crate::context::Shared;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// The input of a procedure: query string first, then the body; the last value of a name
/// wins (Kyoto Tycoon reads both into one map).
pub(crate) type Input<'a> = BTreeMap<Cow<'a, [u8]>, Cow<'a, [u8]>>;
/// The output of a procedure, sent sorted by name like Kyoto Tycoon's map.
pub(crate) type Output = BTreeMap<Vec<u8>, Vec<u8>>;

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

/// Kyoto Cabinet's error text: `DB: <code>: <name>: <message>`.
pub(crate) fn db_error(code: u8, message: &str) -> String {
    let name = match code {
        1 => "not implemented",
        2 => "invalid operation",
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
pub(crate) fn atof(s: &[u8]) -> f64 {
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

/// Kyoto Tycoon's largest expiration time; at or beyond it a record never expires.
pub const XT_MAX: u64 = (1 << 40) - 1;

/// The absolute expiration time (unix seconds, 0 = never) of a binary-protocol `xt` sent at
/// `now`. A time at or before `now` leaves an already-expired record, as in Kyoto Tycoon.
pub fn kt_expiry(xt: i64, now: u64) -> u64 {
    let at = if xt < 0 {
        xt.unsigned_abs()
    } else {
        now.saturating_add(xt as u64)
    };
    if at >= XT_MAX {
        0
    } else {
        at.max(1)
    }
}
