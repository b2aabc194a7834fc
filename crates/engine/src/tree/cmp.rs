//! Key orders of the B+ tree, chosen at creation (`#cmp=`) and stored in the descriptor.
//!
//! Each order is total on byte strings: where Tokyo Cabinet's comparators call two different
//! keys equal (the decimal order of `1` and `01`, the integer orders of keys of another
//! length), the tie is broken by the bytes, so no two distinct keys are ever one.

use crate::error::{Error, Result};
use std::cmp::Ordering;

/// A key order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    /// Bytes, as `memcmp` then length (Tokyo Cabinet's `tccmplexical`).
    Lex,
    /// Decimal numbers: leading blanks skipped, an optional `-`, integer digits, an optional
    /// fraction of up to 12 digits; the bytes decide a tie (`tccmpdecimal`).
    Dec,
    /// 4-byte little-endian signed integers; a key of another length counts as 0
    /// (`tccmpint32` on a little-endian machine).
    Int32,
    /// 8-byte little-endian signed integers; likewise (`tccmpint64`).
    Int64,
    /// The reverse of each (Kyoto Cabinet's `lexdesc`, `decdesc`).
    LexDesc,
    DecDesc,
    Int32Desc,
    Int64Desc,
}

impl Cmp {
    pub fn parse(v: &str) -> Result<Cmp> {
        Ok(match v.to_ascii_lowercase().as_str() {
            "lex" | "lexical" => Cmp::Lex,
            "dec" | "decimal" => Cmp::Dec,
            "int32" => Cmp::Int32,
            "int64" => Cmp::Int64,
            "lexdesc" => Cmp::LexDesc,
            "decdesc" => Cmp::DecDesc,
            "int32desc" => Cmp::Int32Desc,
            "int64desc" => Cmp::Int64Desc,
            _ => {
                return Err(Error::InvalidParam(format!(
                    "`cmp={v}`: expected lex, dec, int32, int64, lexdesc, decdesc, int32desc \
                     or int64desc"
                )))
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Cmp::Lex => "lex",
            Cmp::Dec => "dec",
            Cmp::Int32 => "int32",
            Cmp::Int64 => "int64",
            Cmp::LexDesc => "lexdesc",
            Cmp::DecDesc => "decdesc",
            Cmp::Int32Desc => "int32desc",
            Cmp::Int64Desc => "int64desc",
        }
    }

    /// Tokyo Cabinet's code for the order (`tcbdb` header byte), for `inform`.
    pub fn is_desc(self) -> bool {
        matches!(
            self,
            Cmp::LexDesc | Cmp::DecDesc | Cmp::Int32Desc | Cmp::Int64Desc
        )
    }

    #[inline]
    pub fn cmp(self, a: &[u8], b: &[u8]) -> Ordering {
        match self {
            Cmp::Lex => a.cmp(b),
            Cmp::LexDesc => b.cmp(a),
            Cmp::Dec => decimal(a, b),
            Cmp::DecDesc => decimal(b, a),
            Cmp::Int32 => int32(a, b),
            Cmp::Int32Desc => int32(b, a),
            Cmp::Int64 => int64(a, b),
            Cmp::Int64Desc => int64(b, a),
        }
    }
}

/// The numeric parts of a decimal key: integer (wrapping, as Tokyo Cabinet's), signed fraction
/// scaled to 12 digits, and whether it had a fraction.
fn dec_parts(k: &[u8]) -> (i64, i64) {
    let mut p = 0;
    while p < k.len() && (k[p] <= b' ' || k[p] == 0x7f) {
        p += 1;
    }
    let mut sign = 1i64;
    if p < k.len() && k[p] == b'-' {
        sign = -1;
        p += 1;
    }
    let mut num = 0i64;
    while p < k.len() && k[p].is_ascii_digit() {
        num = num.wrapping_mul(10).wrapping_add(i64::from(k[p] - b'0'));
        p += 1;
    }
    let mut frac = 0i64;
    // Tokyo Cabinet reads a fraction only when a digit may follow the point.
    if k.len() - p > 1 && k[p] == b'.' {
        p += 1;
        let mut scale = 100_000_000_000i64; // 12 digits
        while p < k.len() && k[p].is_ascii_digit() && scale > 0 {
            frac += i64::from(k[p] - b'0') * scale;
            scale /= 10;
            p += 1;
        }
    }
    (num.wrapping_mul(sign), frac * sign)
}

fn decimal(a: &[u8], b: &[u8]) -> Ordering {
    let (an, af) = dec_parts(a);
    let (bn, bf) = dec_parts(b);
    an.cmp(&bn).then(af.cmp(&bf)).then_with(|| a.cmp(b))
}

fn int32(a: &[u8], b: &[u8]) -> Ordering {
    let v = |k: &[u8]| <[u8; 4]>::try_from(k).map_or(0, i32::from_le_bytes);
    v(a).cmp(&v(b)).then_with(|| a.cmp(b))
}

fn int64(a: &[u8], b: &[u8]) -> Ordering {
    let v = |k: &[u8]| <[u8; 8]>::try_from(k).map_or(0, i64::from_le_bytes);
    v(a).cmp(&v(b)).then_with(|| a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(c: Cmp, keys: &[&[u8]]) -> Vec<Vec<u8>> {
        let mut v: Vec<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
        v.sort_by(|a, b| c.cmp(a, b));
        v
    }

    #[test]
    fn orders() {
        let keys: &[&[u8]] = &[b"10", b"9", b"-3", b"2.5", b"2.25", b"02", b"2", b"abc"];
        let dec = sorted(Cmp::Dec, keys);
        let s: Vec<&str> = dec
            .iter()
            .map(|k| std::str::from_utf8(k).unwrap())
            .collect();
        assert_eq!(s, ["-3", "abc", "02", "2", "2.25", "2.5", "9", "10"]);
        let desc = sorted(Cmp::DecDesc, keys);
        assert_eq!(desc.iter().rev().cloned().collect::<Vec<_>>(), dec);
        let ints: Vec<Vec<u8>> = [5i32, -1, 300, 0]
            .iter()
            .map(|n| n.to_le_bytes().to_vec())
            .collect();
        let refs: Vec<&[u8]> = ints.iter().map(|v| v.as_slice()).collect();
        let got: Vec<i32> = sorted(Cmp::Int32, &refs)
            .iter()
            .map(|k| i32::from_le_bytes(k.as_slice().try_into().unwrap()))
            .collect();
        assert_eq!(got, [-1, 0, 5, 300]);
        assert_eq!(
            Cmp::Int64.cmp(b"x", b"y"),
            Ordering::Less,
            "ties go to the bytes"
        );
        assert_eq!(Cmp::LexDesc.cmp(b"a", b"b"), Ordering::Greater);
        for c in [
            "lex",
            "dec",
            "int32",
            "int64",
            "lexdesc",
            "decdesc",
            "int32desc",
            "int64desc",
        ] {
            assert_eq!(Cmp::parse(c).unwrap().name(), c);
        }
        assert!(Cmp::parse("random").is_err());
    }

    proptest::proptest! {
        /// Every order is total and antisymmetric: distinct keys never compare equal.
        #[test]
        fn total(a in proptest::collection::vec(0u8..=255, 0..10),
                 b in proptest::collection::vec(0u8..=255, 0..10)) {
            for c in [Cmp::Lex, Cmp::Dec, Cmp::Int32, Cmp::Int64, Cmp::DecDesc] {
                let ab = c.cmp(&a, &b);
                proptest::prop_assert_eq!(ab, c.cmp(&b, &a).reverse());
                proptest::prop_assert_eq!(ab == Ordering::Equal, a == b);
            }
        }
    }
}
