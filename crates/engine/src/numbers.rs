//! How the numeric record operations of [`crate::Store`] read and write values, each in the
//! format of the system it comes from: memcached's decimal text (`incr_decimal`), Kyoto
//! Cabinet's 8-byte big-endian integer (`increment`) and 16-byte fixed-point decimal
//! (`increment_double`). Tokyo Cabinet's native 4-byte int and 8-byte double (`addint`,
//! `adddouble`) need no more than `from_le_bytes`.

use crate::store::{Value, SHORT_VALUE};

/// C's `isspace` (memcached reads numbers with `strtoull`).
fn c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// The number memcached's incr / decr read from a value: `strtoull` on the value followed by
/// its `\r\n` (memcached's `safe_strtoull`): leading white space, an optional sign, decimal
/// digits, then the end or white space (anything after that white space is ignored). A minus
/// sign is refused when the result reads as negative (`-0` is 0); no digits, another byte
/// after them or a magnitude over 64 bits is not a number.
pub fn memcached_number(v: &[u8]) -> Option<u64> {
    let mut i = v.iter().take_while(|&&b| c_space(b)).count();
    let neg = match v.get(i) {
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
    let start = i;
    let mut n: u64 = 0;
    while let Some(&d) = v.get(i).filter(|b| b.is_ascii_digit()) {
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        i += 1;
    }
    if i == start || v.get(i).is_some_and(|&b| !c_space(b)) {
        return None;
    }
    let n = if neg { n.wrapping_neg() } else { n };
    if neg && (n as i64) < 0 {
        return None;
    }
    Some(n)
}

/// The value memcached's incr / decr store for `n` in place of `old_len` bytes: `n` in
/// decimal, padded with spaces to the old length when shorter (memcached rewrites the item in
/// place).
pub fn memcached_counter(n: u64, old_len: usize) -> Value<'static> {
    let text = Value::decimal(n);
    if text.len() >= old_len {
        return text;
    }
    if old_len <= SHORT_VALUE {
        let mut bytes = [b' '; SHORT_VALUE];
        bytes[..text.len()].copy_from_slice(&text);
        return Value::Short {
            len: old_len as u8,
            bytes,
        };
    }
    let mut v = Vec::with_capacity(old_len);
    v.extend_from_slice(&text);
    v.resize(old_len, b' ');
    Value::Made(v)
}

/// Kyoto Cabinet's fixed-point unit: the fraction of `increment_double`'s numbers is stored
/// times 10^15.
pub const KC_DEC_UNIT: i64 = 1_000_000_000_000_000;

/// Kyoto Cabinet's 16-byte fixed-point number: the integral part, then the fraction × 10^15,
/// both big-endian i64.
pub fn kc_fixed_point(integ: i64, fract: i64) -> [u8; 16] {
    let mut v = [0u8; 16];
    v[..8].copy_from_slice(&integ.to_be_bytes());
    v[8..].copy_from_slice(&fract.to_be_bytes());
    v
}

/// A 16-byte value read as [`kc_fixed_point`] wrote it.
pub fn kc_read_fixed_point(v: &[u8]) -> Option<(i64, i64)> {
    let v: &[u8; 16] = v.try_into().ok()?;
    let mut a = [0u8; 8];
    let mut b = [0u8; 8];
    a.copy_from_slice(&v[..8]);
    b.copy_from_slice(&v[8..]);
    Some((i64::from_be_bytes(a), i64::from_be_bytes(b)))
}

/// A finite or infinite number as Kyoto Cabinet's (integral, fraction) pair (an infinity is
/// `i64::MAX` or `i64::MIN` and no fraction); `None` for NaN.
pub fn kc_split_double(n: f64) -> Option<(i64, i64)> {
    if n.is_nan() {
        return None;
    }
    if n.is_infinite() {
        return Some((if n > 0.0 { i64::MAX } else { i64::MIN }, 0));
    }
    let integ = n.trunc();
    Some((integ as i64, ((n - integ) * KC_DEC_UNIT as f64) as i64))
}

/// The number a fixed-point pair stands for.
pub fn kc_join_double(integ: i64, fract: i64) -> f64 {
    integ as f64 + fract as f64 / KC_DEC_UNIT as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcached_numbers() {
        assert_eq!(memcached_number(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(memcached_number(b"18446744073709551616"), None);
        assert_eq!(memcached_number(b" 12"), Some(12));
        assert_eq!(memcached_number(b"12   "), Some(12));
        assert_eq!(memcached_number(b"12 junk"), Some(12));
        assert_eq!(memcached_number(b"+7"), Some(7));
        assert_eq!(memcached_number(b"-0"), Some(0));
        assert_eq!(memcached_number(b"-1"), None);
        assert_eq!(memcached_number(b"7x"), None);
        assert_eq!(memcached_number(b""), None);
        assert_eq!(memcached_number(b"  "), None);
        assert_eq!(memcached_number(b"\x0b5"), Some(5));
    }

    #[test]
    fn memcached_counters_are_padded_to_the_old_length() {
        assert_eq!(&*memcached_counter(9, 3), b"9  ");
        assert_eq!(&*memcached_counter(100, 2), b"100");
        assert_eq!(&*memcached_counter(0, 0), b"0");
        assert!(matches!(
            memcached_counter(1, 22),
            Value::Short { len: 22, .. }
        ));
        let long = memcached_counter(1, 40);
        assert_eq!(long.len(), 40);
        assert!(long.starts_with(b"1 ") && long.ends_with(b" "));
    }

    #[test]
    fn kc_fixed_points() {
        assert_eq!(kc_split_double(-1.25), Some((-1, -250_000_000_000_000)));
        assert_eq!(kc_split_double(f64::NAN), None);
        assert_eq!(kc_split_double(f64::NEG_INFINITY), Some((i64::MIN, 0)));
        let v = kc_fixed_point(2, 500_000_000_000_000);
        assert_eq!(kc_read_fixed_point(&v), Some((2, 500_000_000_000_000)));
        assert_eq!(kc_join_double(2, 500_000_000_000_000), 2.5);
        assert_eq!(kc_read_fixed_point(&v[..15]), None);
    }
}
