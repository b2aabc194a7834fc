//! Record ids: how a key names one (Tokyo Cabinet's `tcfdbkeytoid`, strict), the key words,
//! interval strings (`tcfdbrange4`), and the id limit that `width` and `limsiz` give
//! (`tcfdbtune`, `tcfdbopenimpl`).
//!
//! Where Tokyo Cabinet reads any bytes as an id (it skips every byte that is not a digit, so
//! `"a1b2"` is 12 and `"abc"` is 0, which then fails as an invalid id), Kura takes only a
//! decimal number (ASCII digits, leading zeros allowed: `tcftest` writes `"00000001"`) or one
//! of the key words, and says what is wrong with anything else.

use crate::error::{Error, Result};

/// Tokyo Cabinet's default value width (`FDBDEFWIDTH`).
pub const DEFAULT_WIDTH: u64 = 255;
/// Tokyo Cabinet's default size limit (`FDBDEFLIMSIZ`, 256 MiB).
pub const DEFAULT_LIMSIZ: u64 = 256 << 20;
/// The size of Tokyo Cabinet's file header (`FDBHEADSIZ`), part of its id limit.
pub const HEAD_SIZE: u64 = 256;
/// The page size Tokyo Cabinet aligns `limsiz` to (`tcpagealign` on this platform).
pub const PAGE: u64 = 4096;
/// The widest value a width may allow: the largest value any kind stores.
pub const MAX_WIDTH: u64 = crate::store::MAX_VALUE_LEN as u64;
/// The largest id Kura keeps (2^40 - 1): the in-memory index reaches that far (Tokyo Cabinet
/// maps `limsiz` bytes of address space, which ends about there for its narrowest records).
pub const MAX_ID: u64 = (1 << 40) - 1;

/// What a key names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// A record id (not yet checked against the database's limit; may be 0).
    Id(u64),
    /// `min`: the smallest id that has a record.
    Min,
    /// `max`: the largest id that has a record.
    Max,
    /// `prev`: the id before `min` (writes only).
    Prev,
    /// `next`: the id after `max` (writes only).
    Next,
}

/// Read a key: a decimal id or a key word. Anything else is [`Error::InvalidKey`].
pub fn parse_key(key: &[u8]) -> Result<Key> {
    if key.first().is_some_and(u8::is_ascii_digit) {
        return parse_number(key).map(Key::Id).ok_or_else(|| not_an_id(key));
    }
    match key {
        b"min" => return Ok(Key::Min),
        b"max" => return Ok(Key::Max),
        b"prev" => return Ok(Key::Prev),
        b"next" => return Ok(Key::Next),
        _ => {}
    }
    parse_number(key).map(Key::Id).ok_or_else(|| not_an_id(key))
}

/// A decimal number of ASCII digits (leading zeros allowed), or `None` (empty, another byte,
/// beyond 64 bits).
pub fn parse_number(b: &[u8]) -> Option<u64> {
    if b.is_empty() {
        return None;
    }
    if b.len() <= 19 {
        // Up to 19 digits cannot overflow: no checks but the digits'.
        let mut n: u64 = 0;
        for &c in b {
            let d = c.wrapping_sub(b'0');
            if d > 9 {
                return None;
            }
            n = n * 10 + u64::from(d);
        }
        return Some(n);
    }
    let mut n: u64 = 0;
    for &c in b {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(n)
}

/// The error for a key that is not an id.
pub fn not_an_id(key: &[u8]) -> Error {
    Error::InvalidKey(format!(
        "`{}` is not a record id of a fixed-length database: a key is a decimal number from 1 \
         (or one of the key words min, max, prev, next)",
        shown(key)
    ))
}

/// A key as it is shown in messages: printable ASCII as is, other bytes escaped, cut at 40.
pub fn shown(key: &[u8]) -> String {
    let s: String = key
        .iter()
        .take(40)
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect();
    if key.len() > 40 {
        format!("{s}…")
    } else {
        s
    }
}

/// The key of id `id`: its decimal digits, no leading zeros.
pub fn key_of(id: u64) -> Vec<u8> {
    id.to_string().into_bytes()
}

/// The id limit of a database of `width` and `limsiz` (both as stored, `tune`d), as Tokyo
/// Cabinet computes it (`limid` in `tcfdbopenimpl`): the records a file of `limsiz` bytes holds
/// after its 256-byte header, each `width` bytes plus its size field (1 byte up to a width of
/// 255, 2 up to 65535, else 4).
pub fn limid(width: u64, limsiz: u64) -> u64 {
    let wsiz = if width <= u64::from(u8::MAX) {
        1
    } else if width <= u64::from(u16::MAX) {
        2
    } else {
        4
    };
    limsiz.saturating_sub(HEAD_SIZE) / (width + wsiz)
}

/// The `width` and `limsiz` a database stores for the ones asked for, as Tokyo Cabinet's
/// `tcfdbtune` makes them: `limsiz` raised to hold one record after the header, then rounded
/// up to a whole page. A width of 0 or past [`MAX_WIDTH`], and a limit whose id limit is
/// past [`MAX_ID`], are errors (Tokyo Cabinet took a width of 0 for its default).
pub fn tune(width: u64, limsiz: u64) -> Result<(u64, u64)> {
    if !(1..=MAX_WIDTH).contains(&width) {
        return Err(Error::InvalidParam(format!(
            "`width={width}`: expected 1 to {MAX_WIDTH} (the longest value a record may hold)"
        )));
    }
    let min = HEAD_SIZE + width + 4;
    let limsiz = limsiz.max(min);
    let limsiz = limsiz
        .checked_next_multiple_of(PAGE)
        .ok_or_else(|| Error::InvalidParam(format!("`limsiz={limsiz}`: too large")))?;
    let ids = limid(width, limsiz);
    if ids > MAX_ID {
        return Err(Error::InvalidParam(format!(
            "`limsiz={limsiz}`: with width {width} it allows {ids} ids; Kura keeps ids up to \
             {MAX_ID} (2^40 - 1)"
        )));
    }
    Ok((width, limsiz))
}

/// A parsed interval (`[1,100]`, `(5,max]`): each bound a key and whether it is inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    pub lower: Key,
    pub lower_inclusive: bool,
    pub upper: Key,
    pub upper_inclusive: bool,
}

/// Parse Tokyo Cabinet's interval notation (`tcfdbrange4`): optional leading white space, `[`
/// (inclusive) or `(` (exclusive), the lower bound, `,`, the upper bound, `]` or `)`; bounds
/// are ids or key words, white space around them ignored. Anything else is an error naming
/// what is missing (Tokyo Cabinet returned nothing).
pub fn parse_interval(s: &[u8]) -> Result<Interval> {
    let bad = |why: &str| {
        Error::InvalidKey(format!(
            "`{}` is not an interval of ids ({why}): write `[1,100]`, `(5,max]` — `[` or `]` \
             includes the bound, `(` or `)` leaves it out",
            shown(s)
        ))
    };
    let trim = |b: &[u8]| -> Vec<u8> {
        let start = b.iter().position(|&c| c > b' ').unwrap_or(b.len());
        let end = b.iter().rposition(|&c| c > b' ').map_or(start, |e| e + 1);
        b[start..end.max(start)].to_vec()
    };
    let start = s
        .iter()
        .position(|&c| c == 0 || c > b' ')
        .unwrap_or(s.len());
    let rest = &s[start..];
    let lower_inclusive = match rest.first() {
        Some(b'[') => true,
        Some(b'(') => false,
        _ => return Err(bad("it starts with neither `[` nor `(`")),
    };
    let rest = &rest[1..];
    let comma = rest
        .iter()
        .position(|&c| c == b',')
        .ok_or_else(|| bad("no `,` between the bounds"))?;
    let lower = trim(&rest[..comma]);
    let rest = &rest[comma + 1..];
    let close = rest
        .iter()
        .position(|&c| c == b']' || c == b')')
        .ok_or_else(|| bad("it ends with neither `]` nor `)`"))?;
    let upper_inclusive = rest[close] == b']';
    if rest[close + 1..].iter().any(|&c| c > b' ') {
        return Err(bad("something follows its closing bracket"));
    }
    let upper = trim(&rest[..close]);
    let bound = |b: &[u8]| parse_key(b).map_err(|_| bad(&format!("`{}` is not an id", shown(b))));
    Ok(Interval {
        lower: bound(&lower)?,
        lower_inclusive,
        upper: bound(&upper)?,
        upper_inclusive,
    })
}

impl Interval {
    /// The ids it covers in a database whose records lie from `min` to `max` (both 0 when it
    /// is empty), as inclusive bounds, the key words resolved as `tcfdbrange4` does (`prev` is
    /// `min - 1`, `next` is `max + 1`), cut to the ids there are; `None` when it covers none.
    pub fn resolve(&self, min: u64, max: u64) -> Option<(u64, u64)> {
        if max == 0 {
            return None;
        }
        let val = |k: Key| -> i128 {
            match k {
                Key::Id(n) => i128::from(n),
                Key::Min => i128::from(min),
                Key::Max => i128::from(max),
                Key::Prev => i128::from(min) - 1,
                Key::Next => i128::from(max) + 1,
            }
        };
        let mut lo = val(self.lower);
        let mut hi = val(self.upper);
        if !self.lower_inclusive {
            lo += 1;
        }
        if !self.upper_inclusive {
            hi -= 1;
        }
        let lo = lo.max(i128::from(min));
        let hi = hi.min(i128::from(max));
        (lo <= hi).then_some((lo as u64, hi as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_ids_or_key_words() {
        assert_eq!(parse_key(b"1").unwrap(), Key::Id(1));
        assert_eq!(parse_key(b"00000042").unwrap(), Key::Id(42));
        assert_eq!(parse_key(b"0").unwrap(), Key::Id(0));
        assert_eq!(parse_key(b"min").unwrap(), Key::Min);
        assert_eq!(parse_key(b"max").unwrap(), Key::Max);
        assert_eq!(parse_key(b"prev").unwrap(), Key::Prev);
        assert_eq!(parse_key(b"next").unwrap(), Key::Next);
        for bad in [
            &b""[..],
            b"a1b2",
            b"abc",
            b" 1",
            b"1 ",
            b"-1",
            b"+1",
            b"1.0",
            b"MAX",
            b"18446744073709551616",
            b"\xff",
        ] {
            match parse_key(bad) {
                Err(Error::InvalidKey(m)) => assert!(m.contains("not a record id"), "{m}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        assert_eq!(
            parse_key(b"18446744073709551615").unwrap(),
            Key::Id(u64::MAX)
        );
        assert_eq!(
            parse_key(b"9999999999999999999").unwrap(),
            Key::Id(9_999_999_999_999_999_999)
        );
        assert_eq!(key_of(7), b"7");
    }

    /// The figures `tcfmgr create` / `inform` give (Tokyo Cabinet 1.4.48): `create y.tcf 10
    /// 1000` stores limsiz 4096 and limit id 349; `10 8192`: 8192 and 721; `300 4097`: 8192 and
    /// 26; the defaults: 268435456 and 1048575.
    #[test]
    fn width_and_limsiz_as_tokyo_cabinet_tunes_them() {
        assert_eq!(tune(10, 1000).unwrap(), (10, 4096));
        assert_eq!(limid(10, 4096), 349);
        assert_eq!(tune(10, 8192).unwrap(), (10, 8192));
        assert_eq!(limid(10, 8192), 721);
        assert_eq!(tune(300, 4097).unwrap(), (300, 8192));
        assert_eq!(limid(300, 8192), 26);
        assert_eq!(
            tune(DEFAULT_WIDTH, DEFAULT_LIMSIZ).unwrap(),
            (255, 268435456)
        );
        assert_eq!(limid(255, 268435456), 1048575);
        assert_eq!(limid(70000, 1 << 30), ((1 << 30) - 256) / 70004);
        assert!(tune(0, 4096).is_err());
        assert!(tune(MAX_WIDTH + 1, 4096).is_err());
        assert!(tune(1, u64::MAX).is_err());
        assert!(tune(1, 1 << 50).is_err(), "past 2^40 ids");
        assert!(tune(255, 1 << 40).is_ok());
    }

    #[test]
    fn intervals_as_tokyo_cabinet_reads_them() {
        let i = parse_interval(b"[1,100]").unwrap();
        assert_eq!(i.resolve(1, 1000), Some((1, 100)));
        assert_eq!(i.resolve(50, 60), Some((50, 60)));
        assert_eq!(i.resolve(0, 0), None);
        let i = parse_interval(b"  ( 5 , max ]").unwrap();
        assert_eq!(
            i,
            Interval {
                lower: Key::Id(5),
                lower_inclusive: false,
                upper: Key::Max,
                upper_inclusive: true
            }
        );
        assert_eq!(i.resolve(1, 9), Some((6, 9)));
        assert_eq!(i.resolve(1, 5), None);
        assert_eq!(
            parse_interval(b"[min,max)").unwrap().resolve(3, 9),
            Some((3, 8))
        );
        assert_eq!(
            parse_interval(b"(prev,next)").unwrap().resolve(3, 9),
            Some((3, 9))
        );
        assert_eq!(
            parse_interval(b"[0,5]").unwrap().resolve(1, 9),
            Some((1, 5))
        );
        assert_eq!(parse_interval(b"[7,5]").unwrap().resolve(1, 9), None);
        for bad in [
            &b"1,5"[..],
            b"[1 5]",
            b"[1,5",
            b"[a,5]",
            b"[1,b)",
            b"[1,5]x",
            b"",
            b"{1,5}",
        ] {
            assert!(
                matches!(parse_interval(bad), Err(Error::InvalidKey(_))),
                "{bad:?}"
            );
        }
    }
}
