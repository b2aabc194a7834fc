//! The TSV line codec of `kura db import` / `kura db export`: one record per line,
//! `key<TAB>value\n`, escaped so that any bytes round-trip.
//!
//! # Format
//!
//! Writing ([`escape_into`], [`write_line`]) escapes:
//!
//! | byte                                   | written as |
//! |----------------------------------------|------------|
//! | `\` (0x5c)                             | `\\`       |
//! | TAB (0x09)                             | `\t`       |
//! | LF (0x0a)                              | `\n`       |
//! | CR (0x0d)                              | `\r`       |
//! | other control bytes (< 0x20) and 0x7f  | `\xHH` (lowercase hex) |
//!
//! Every other byte, including every byte >= 0x80, is written unchanged, so UTF-8 text stays
//! readable. An escaped field therefore never contains a raw TAB, LF or CR, and a line has exactly
//! one raw TAB: the separator.
//!
//! Reading ([`parse_line`], [`unescape`]) is the exact inverse and a little more lenient:
//!
//! * `\xHH` is accepted for any byte (upper- or lowercase hex), not only control bytes;
//! * other raw bytes (including raw control bytes other than TAB) are taken as they are;
//! * one raw CR at the very end of the line is stripped, so files with CRLF line ends are
//!   accepted. This loses nothing: a CR that belongs to the value is always written as `\r`.
//!
//! Anything else — no TAB, a second raw TAB, an unknown escape such as `\q`, a `\x` not followed
//! by two hex digits, a backslash at the end of a field — is a [`TsvError`].

use std::fmt;

/// Which field of a line an error is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Key,
    Value,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Field::Key => "key",
            Field::Value => "value",
        })
    }
}

/// Why a line is not valid TSV. Columns are 1-based byte offsets in the line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TsvError {
    /// The line has no TAB separating key and value.
    MissingTab,
    /// A second raw TAB; tabs inside keys and values must be written as `\t`.
    ExtraTab { column: usize },
    /// A backslash followed by something other than `\`, `t`, `n`, `r` or `xHH`.
    UnknownEscape {
        field: Field,
        column: usize,
        byte: u8,
    },
    /// `\x` not followed by two hex digits.
    BadHexEscape { field: Field, column: usize },
    /// A backslash as the last byte of a field.
    DanglingBackslash { field: Field, column: usize },
}

impl fmt::Display for TsvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TsvError::MissingTab => {
                f.write_str("missing tab between key and value (expected KEY<TAB>VALUE)")
            }
            TsvError::ExtraTab { column } => write!(
                f,
                "unescaped tab at column {column} (a line has exactly one tab; write tabs inside \
                 keys and values as \\t)"
            ),
            TsvError::UnknownEscape {
                field,
                column,
                byte,
            } => {
                write!(f, "unknown escape `\\")?;
                if byte.is_ascii_graphic() {
                    write!(f, "{}", byte as char)?;
                } else {
                    write!(f, "<0x{byte:02x}>")?;
                }
                write!(
                    f,
                    "` in {field} at column {column} (known: \\\\ \\t \\n \\r \\xHH)"
                )
            }
            TsvError::BadHexEscape { field, column } => write!(
                f,
                "bad escape in {field} at column {column}: \\x must be followed by two hex digits"
            ),
            TsvError::DanglingBackslash { field, column } => write!(
                f,
                "backslash at the end of the {field} at column {column} (write a backslash as \\\\)"
            ),
        }
    }
}

impl std::error::Error for TsvError {}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Append `bytes` to `out`, escaped (see the module documentation).
pub fn escape_into(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len());
    for &b in bytes {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            0..=0x1f | 0x7f => out.extend_from_slice(&[
                b'\\',
                b'x',
                HEX[(b >> 4) as usize],
                HEX[(b & 15) as usize],
            ]),
            _ => out.push(b),
        }
    }
}

/// `bytes`, escaped.
pub fn escape(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    escape_into(&mut out, bytes);
    out
}

/// Append one record, `key<TAB>value\n`, both escaped.
pub fn write_line(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    escape_into(out, key);
    out.push(b'\t');
    escape_into(out, value);
    out.push(b'\n');
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Undo [`escape_into`] on one field that starts at 0-based byte offset `start` of its line.
fn unescape_at(field: &[u8], which: Field, start: usize) -> Result<Vec<u8>, TsvError> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let b = field[i];
        if b != b'\\' {
            out.push(b);
            i += 1;
            continue;
        }
        let column = start + i + 1;
        let Some(&e) = field.get(i + 1) else {
            return Err(TsvError::DanglingBackslash {
                field: which,
                column,
            });
        };
        match e {
            b'\\' => out.push(b'\\'),
            b't' => out.push(b'\t'),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b'x' => {
                let hi = field.get(i + 2).copied().and_then(hex_val);
                let lo = field.get(i + 3).copied().and_then(hex_val);
                match (hi, lo) {
                    (Some(hi), Some(lo)) => out.push(hi << 4 | lo),
                    _ => {
                        return Err(TsvError::BadHexEscape {
                            field: which,
                            column,
                        })
                    }
                }
                i += 4;
                continue;
            }
            byte => {
                return Err(TsvError::UnknownEscape {
                    field: which,
                    column,
                    byte,
                })
            }
        }
        i += 2;
    }
    Ok(out)
}

/// Undo [`escape_into`] on a single field (e.g. one line of `kura db list` without `--values`).
/// Errors are reported as if the field were a key.
pub fn unescape(field: &[u8]) -> Result<Vec<u8>, TsvError> {
    unescape_at(field, Field::Key, 0)
}

/// Parse one line (without its trailing LF) into key and value. One raw trailing CR is stripped
/// first, so CRLF files are accepted.
pub fn parse_line(line: &[u8]) -> Result<(Vec<u8>, Vec<u8>), TsvError> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let tab = line
        .iter()
        .position(|&b| b == b'\t')
        .ok_or(TsvError::MissingTab)?;
    let (key, value) = (&line[..tab], &line[tab + 1..]);
    if let Some(p) = value.iter().position(|&b| b == b'\t') {
        return Err(TsvError::ExtraTab {
            column: tab + 1 + p + 1,
        });
    }
    Ok((
        unescape_at(key, Field::Key, 0)?,
        unescape_at(value, Field::Value, tab + 1)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn line(k: &[u8], v: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        write_line(&mut out, k, v);
        out
    }

    #[test]
    fn escapes() {
        assert_eq!(escape(b"plain text"), b"plain text");
        assert_eq!(escape(b"a\tb\nc\rd\\e"), b"a\\tb\\nc\\rd\\\\e");
        assert_eq!(escape(b"\x00\x01\x1f\x7f "), b"\\x00\\x01\\x1f\\x7f ");
        assert_eq!(escape(b"\xff\x80"), b"\xff\x80");
        assert_eq!(escape("日本語".as_bytes()), "日本語".as_bytes());
        assert_eq!(line(b"k", b"v"), b"k\tv\n");
        assert_eq!(line(b"", b""), b"\t\n");
        assert_eq!(line(b"a\tb", b"c\nd"), b"a\\tb\tc\\nd\n");
    }

    #[test]
    fn parses() {
        assert_eq!(parse_line(b"k\tv").unwrap(), (b"k".to_vec(), b"v".to_vec()));
        assert_eq!(parse_line(b"\t").unwrap(), (vec![], vec![]));
        assert_eq!(
            parse_line(b"a\\tb\\\\\tc\\nd\\r\\x00\\xFF\\x7f").unwrap(),
            (b"a\tb\\".to_vec(), b"c\nd\r\x00\xff\x7f".to_vec())
        );
        // Lenient: \xHH for printable bytes, raw bytes >= 0x80, raw control bytes.
        assert_eq!(
            parse_line(b"\\x41\t\xff\x01").unwrap(),
            (b"A".to_vec(), b"\xff\x01".to_vec())
        );
    }

    #[test]
    fn crlf_is_accepted_and_escaped_cr_is_kept() {
        assert_eq!(
            parse_line(b"k\tv\r").unwrap(),
            (b"k".to_vec(), b"v".to_vec())
        );
        assert_eq!(
            parse_line(b"k\tv\\r\r").unwrap(),
            (b"k".to_vec(), b"v\r".to_vec())
        );
        // Only one trailing CR is stripped.
        assert_eq!(
            parse_line(b"k\tv\r\r").unwrap(),
            (b"k".to_vec(), b"v\r".to_vec())
        );
        assert_eq!(parse_line(b"\r"), Err(TsvError::MissingTab));
    }

    #[test]
    fn errors_name_the_problem() {
        assert_eq!(parse_line(b""), Err(TsvError::MissingTab));
        assert_eq!(parse_line(b"novalue"), Err(TsvError::MissingTab));
        assert_eq!(
            parse_line(b"a\tb\tc"),
            Err(TsvError::ExtraTab { column: 4 })
        );
        assert_eq!(
            parse_line(b"a\\q\tb"),
            Err(TsvError::UnknownEscape {
                field: Field::Key,
                column: 2,
                byte: b'q'
            })
        );
        assert_eq!(
            parse_line(b"a\tb\\x4"),
            Err(TsvError::BadHexEscape {
                field: Field::Value,
                column: 4
            })
        );
        assert_eq!(
            parse_line(b"a\tb\\xzz"),
            Err(TsvError::BadHexEscape {
                field: Field::Value,
                column: 4
            })
        );
        assert_eq!(
            parse_line(b"a\\\tb"),
            Err(TsvError::DanglingBackslash {
                field: Field::Key,
                column: 2
            })
        );
        assert_eq!(
            parse_line(b"a\tb\\"),
            Err(TsvError::DanglingBackslash {
                field: Field::Value,
                column: 4
            })
        );
        let msgs = [
            (parse_line(b"x"), "missing tab"),
            (parse_line(b"a\tb\tc"), "unescaped tab at column 4"),
            (
                parse_line(b"a\\q\tb"),
                "unknown escape `\\q` in key at column 2",
            ),
            (parse_line(b"a\\\x01\tb"), "unknown escape `\\<0x01>`"),
            (
                parse_line(b"a\tb\\x4"),
                "\\x must be followed by two hex digits",
            ),
            (parse_line(b"a\tb\\"), "backslash at the end of the value"),
        ];
        for (r, want) in msgs {
            let msg = r.unwrap_err().to_string();
            assert!(msg.contains(want), "{msg:?} should contain {want:?}");
        }
    }

    #[test]
    fn unescape_single_field() {
        assert_eq!(unescape(b"a\\tb\\x00").unwrap(), b"a\tb\x00");
        assert!(unescape(b"a\\").is_err());
    }

    proptest! {
        #[test]
        fn round_trips(
            key in proptest::collection::vec(any::<u8>(), 0..64),
            value in proptest::collection::vec(any::<u8>(), 0..256),
        ) {
            let l = line(&key, &value);
            // Exactly one raw TAB, one raw LF at the end, no raw CR.
            prop_assert_eq!(l.iter().filter(|&&b| b == b'\t').count(), 1);
            prop_assert_eq!(l.iter().position(|&b| b == b'\n'), Some(l.len() - 1));
            prop_assert!(!l.contains(&b'\r'));
            let (k, v) = parse_line(&l[..l.len() - 1]).unwrap();
            prop_assert_eq!(&k, &key);
            prop_assert_eq!(&v, &value);
            // CRLF form parses to the same record.
            let mut crlf = l[..l.len() - 1].to_vec();
            crlf.push(b'\r');
            prop_assert_eq!(parse_line(&crlf).unwrap(), (key.clone(), value.clone()));
            prop_assert_eq!(unescape(&escape(&key)).unwrap(), key);
        }

        #[test]
        fn parse_never_panics(line in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = parse_line(&line);
        }

        #[test]
        fn bytes_at_or_above_0x80_pass_through(
            bytes in proptest::collection::vec(0x80u8..=0xff, 0..64),
        ) {
            prop_assert_eq!(escape(&bytes), bytes);
        }
    }
}
