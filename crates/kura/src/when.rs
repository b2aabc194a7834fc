//! Times on the command line (`kura db restore --until`, `kura db ulog --from/--until`): the
//! update log's time stamps are microseconds since the Unix epoch; an operator writes them as
//! that number, as an RFC 3339 time (`2026-11-28T03:05:00Z`, `…T04:05:00.5+01:00`), or as a
//! time before now (`-30s`, `-5m`, `-2h`, `-1d`). Shown back as RFC 3339 in UTC.

use kura_proto::http::{civil_from_days, days_from_civil};

/// Microseconds per second.
const US: i64 = 1_000_000;

/// Read a time: microseconds since the epoch, RFC 3339, or `-N{s,m,h,d}` before `now_us`.
pub fn parse(s: &str, now_us: u64) -> Result<u64, String> {
    let bad = |why: &str| {
        format!(
            "`{s}`: {why}; a time is microseconds since the epoch, an RFC 3339 time \
             (2026-11-28T03:05:00Z, with an offset or fractional seconds) or one before now \
             (-30s, -5m, -2h, -1d)"
        )
    };
    let t = s.trim();
    if t.is_empty() {
        return Err(bad("empty"));
    }
    if t.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse().map_err(|_| bad("too large"));
    }
    if let Some(rel) = t.strip_prefix('-') {
        let unit = rel.chars().last().ok_or_else(|| bad("no amount"))?;
        let per: u64 = match unit {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(bad("a relative time ends in s, m, h or d")),
        };
        let n: u64 = rel[..rel.len() - 1]
            .parse()
            .map_err(|_| bad("a relative time is a whole number and a unit"))?;
        let back = n
            .checked_mul(per)
            .and_then(|secs| secs.checked_mul(US as u64))
            .filter(|&b| b <= now_us)
            .ok_or_else(|| bad("before the epoch"))?;
        return Ok(now_us - back);
    }
    rfc3339(t).ok_or_else(|| bad("not a valid time"))
}

/// An RFC 3339 time (`T`, `t` or a space between date and time; `Z`, `z` or `±HH:MM`), in
/// microseconds since the epoch; fractions beyond microseconds are cut.
fn rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let d = b.get(from..from + len)?;
        d.iter()
            .all(u8::is_ascii_digit)
            .then(|| std::str::from_utf8(d).ok()?.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    if !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let (y, mo, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (h, mi, sec) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 {
        return None;
    }
    if sec > 59 {
        return None;
    }
    let mut i = 19;
    let mut micros = 0i64;
    if b[i] == b'.' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            if i - start < 6 {
                micros = micros * 10 + i64::from(b[i] - b'0');
            }
            i += 1;
        }
        let digits = i - start;
        if digits == 0 {
            return None;
        }
        for _ in digits..6 {
            micros *= 10;
        }
    }
    let offset = match b.get(i..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (oh, om) = (num(i + 1, 2)?, num(i + 4, 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let o = (oh * 60 + om) * 60;
            if *sign == b'-' {
                -o
            } else {
                o
            }
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo as u32, d as u32) * 86_400 + h * 3600 + mi * 60 + sec - offset;
    u64::try_from(secs.checked_mul(US)?.checked_add(micros)?).ok()
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A time stamp in microseconds as RFC 3339 in UTC, to the microsecond:
/// `2026-11-28T03:05:00.000000Z`.
pub fn show(us: u64) -> String {
    let us = i64::try_from(us).unwrap_or(i64::MAX);
    let (secs, micros) = (us.div_euclid(US), us.rem_euclid(US));
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// Now, in microseconds since the epoch.
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_with_offsets_and_fractions() {
        let t = 1_795_835_100_000_000; // 2026-11-28T03:05:00Z
        assert_eq!(parse("2026-11-28T03:05:00Z", 0), Ok(t));
        assert_eq!(parse("2026-11-28t03:05:00z", 0), Ok(t));
        assert_eq!(parse("2026-11-28 04:05:00+01:00", 0), Ok(t));
        assert_eq!(parse("2026-11-27T22:35:00-04:30", 0), Ok(t));
        assert_eq!(parse("2026-11-28T03:05:00.5Z", 0), Ok(t + 500_000));
        assert_eq!(parse("2026-11-28T03:05:00.123456789Z", 0), Ok(t + 123_456));
        assert_eq!(parse("1970-01-01T00:00:00Z", 0), Ok(0));
        assert_eq!(
            parse("2024-02-29T00:00:00Z", 0),
            Ok(1_709_164_800 * 1_000_000)
        );
        for bad in [
            "2026-11-28T03:05:00",
            "2026-11-28T03:05Z",
            "2026-13-28T03:05:00Z",
            "2025-02-29T03:05:00Z",
            "2026-11-28T24:00:00Z",
            "2026-11-28T03:05:00.Z",
            "2026-11-28T03:05:00+1:00",
            "1969-12-31T23:59:59Z",
            "yesterday",
            "",
        ] {
            assert!(parse(bad, 0).is_err(), "{bad}");
        }
    }

    #[test]
    fn numbers_and_times_before_now() {
        let now = 10_000 * US as u64;
        assert_eq!(parse("1795835100000000", now), Ok(1_795_835_100_000_000));
        assert_eq!(parse("-30s", now), Ok(now - 30 * US as u64));
        assert_eq!(parse("-5m", now), Ok(now - 300 * US as u64));
        assert_eq!(parse("-2h", now), Ok(now - 7200 * US as u64));
        assert!(parse("-1d", now).is_err(), "before the epoch");
        for bad in ["-5", "-m", "-5x", "-1.5h", "--5m"] {
            assert!(parse(bad, now).is_err(), "{bad}");
        }
    }

    #[test]
    fn shown_as_utc_and_read_back() {
        assert_eq!(show(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(show(1_795_835_100_123_456), "2026-11-28T03:05:00.123456Z");
        for us in [
            0,
            1,
            951_782_400_000_001,
            1_795_835_100_123_456,
            4_102_444_799_999_999,
        ] {
            assert_eq!(parse(&show(us), 0), Ok(us));
        }
    }
}
