//! Numbers as memcached reads them from its text protocol: C's `strtoull` / `strtol` behind
//! memcached's `safe_strto*` wrappers, truncated to the width memcached stores. Shared by the
//! codec (command lines) and the executors (meta flags, values for incr / decr).

/// C's `isspace`.
fn c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// C's `strtoull` / `strtoll` on a token: leading white space, a sign, decimal digits, then
/// nothing or white space. The magnitude, whether it was negative; `None` when there are no
/// digits, something else follows them, or the magnitude overflows 64 bits (ERANGE).
fn c_digits(t: &[u8]) -> Option<(u64, bool)> {
    let mut i = t.iter().take_while(|&&b| c_space(b)).count();
    let neg = match t.get(i) {
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
    let mut v: u64 = 0;
    while let Some(&d) = t.get(i).filter(|b| b.is_ascii_digit()) {
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        i += 1;
    }
    if i == start || t.get(i).is_some_and(|&b| !c_space(b)) {
        return None;
    }
    Some((v, neg))
}

/// memcached's `safe_strtoull`: an unsigned 64-bit number; a minus sign is refused when the
/// result reads as negative (so `-0` is 0, and `-1` is an error).
pub fn c_strtoull(t: &[u8]) -> Option<u64> {
    let (m, neg) = c_digits(t)?;
    let v = if neg { m.wrapping_neg() } else { m };
    if neg && (v as i64) < 0 {
        return None;
    }
    Some(v)
}

/// memcached's `safe_strtoul` into a 32-bit field: as [`c_strtoull`], then truncated (a flags
/// value of 2^32 is stored as 0, as memcached stores it).
pub fn c_strtoul32(t: &[u8]) -> Option<u32> {
    c_strtoull(t).map(|v| v as u32)
}

/// memcached's `safe_strtol` into a 32-bit field: a signed 64-bit number (out of range:
/// `None`), truncated to 32 bits (an exptime of 2^32 is 0).
pub fn c_strtol32(t: &[u8]) -> Option<i32> {
    let (m, neg) = c_digits(t)?;
    let v = if neg {
        0i64.checked_sub_unsigned(m)?
    } else {
        i64::try_from(m).ok()?
    };
    Some(v as i32)
}

/// memcached's `safe_strtod`: a decimal floating-point number (`inf` and `nan` too), then
/// nothing; `None` when there is none, something follows it, or it overflows (ERANGE).
pub fn c_strtod(t: &[u8]) -> Option<f64> {
    let start = t.iter().take_while(|&&b| c_space(b)).count();
    let text = std::str::from_utf8(&t[start..]).ok()?;
    let v: f64 = text.parse().ok()?;
    let spelled_inf = text
        .trim_start_matches(['+', '-'])
        .get(..3)
        .is_some_and(|p| p.eq_ignore_ascii_case("inf"));
    (v.is_finite() || v.is_nan() || spelled_inf).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_numbers() {
        assert_eq!(c_strtoull(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(c_strtoull(b"18446744073709551616"), None);
        assert_eq!(c_strtoull(b"-0"), Some(0));
        assert_eq!(c_strtoull(b"-1"), None);
        assert_eq!(c_strtoull(b"+7"), Some(7));
        assert_eq!(c_strtoull(b"7x"), None);
        assert_eq!(c_strtoull(b""), None);
        assert_eq!(c_strtoul32(b"4294967296"), Some(0));
        assert_eq!(c_strtod(b"0.5"), Some(0.5));
        assert_eq!(c_strtod(b"1e3"), Some(1000.0));
        assert_eq!(c_strtod(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(c_strtod(b"1e999"), None);
        assert_eq!(c_strtod(b"0.5x"), None);
        assert_eq!(c_strtod(b""), None);
        assert_eq!(c_strtol32(b"-5"), Some(-5));
        assert_eq!(c_strtol32(b"4294967296"), Some(0));
        assert_eq!(c_strtol32(b"9223372036854775808"), None);
    }
}
