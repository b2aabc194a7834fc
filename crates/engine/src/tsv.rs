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
//!
//! # The other formats ([`Format`])
//!
//! * [`Format::Raw`]: the bytes as they are, what Tokyo Cabinet's `tchmgr list -pv` and Kyoto
//!   Cabinet's `kchashmgr list -pv` write (and `tchmgr importtsv` / `kchashmgr import` read):
//!   `key<TAB>value<LF>`. A line is split at its first TAB; the value is the rest of the line,
//!   TABs and CRs included (nothing is stripped). So a key cannot hold a TAB or LF and a value
//!   cannot hold a LF: such a record cannot be written raw ([`TsvError::Unwritable`]).
//! * [`Format::Hex`]: each field as hex byte pairs separated by single spaces, `6B 31<TAB>76`
//!   (what `list -pv -px` of both tools writes and `kchashmgr import -sx` reads): any bytes.
//!   Reading takes upper or lower case and any number of spaces between pairs; one trailing CR
//!   is stripped.

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
    /// A hex field that is not pairs of hex digits separated by spaces.
    BadHex { field: Field, column: usize },
    /// A record the raw format cannot carry: its key holds a TAB or LF, or its value a LF.
    Unwritable { field: Field, byte: u8 },
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
            TsvError::BadHex { field, column } => write!(
                f,
                "bad hex in the {field} at column {column} (expected pairs of hex digits \
                 separated by spaces)"
            ),
            TsvError::Unwritable { field, byte } => write!(
                f,
                "the {field} holds a {}, which the raw format cannot carry (use the escaped or \
                 hex format)",
                if byte == b'\t' { "tab" } else { "newline" }
            ),
        }
    }
}

impl std::error::Error for TsvError {}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[inline]
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'\\' || b == 0x7f
}

/// Append `bytes` to `out`, escaped (see the module documentation). Runs of bytes that need no
/// escape are copied whole.
pub fn escape_into(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len());
    let mut rest = bytes;
    while let Some(i) = rest.iter().position(|&b| needs_escape(b)) {
        out.extend_from_slice(&rest[..i]);
        let b = rest[i];
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'x',
                HEX[(b >> 4) as usize],
                HEX[(b & 15) as usize],
            ]),
        }
        rest = &rest[i + 1..];
    }
    out.extend_from_slice(rest);
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
    unescape_into(&mut out, field, which, start)?;
    Ok(out)
}

/// [`unescape_at`], appending to `out`: the runs between escapes copied whole.
fn unescape_into(
    out: &mut Vec<u8>,
    field: &[u8],
    which: Field,
    start: usize,
) -> Result<(), TsvError> {
    let mut i = 0;
    while i < field.len() {
        let Some(n) = field[i..].iter().position(|&b| b == b'\\') else {
            out.extend_from_slice(&field[i..]);
            break;
        };
        out.extend_from_slice(&field[i..i + n]);
        i += n;
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
    Ok(())
}

/// Undo [`escape_into`] on a single field (e.g. one line of `kura db list` without `--values`).
/// Errors are reported as if the field were a key.
pub fn unescape(field: &[u8]) -> Result<Vec<u8>, TsvError> {
    unescape_at(field, Field::Key, 0)
}

/// Parse one line (without its trailing LF) into key and value. One raw trailing CR is stripped
/// first, so CRLF files are accepted.
pub fn parse_line(line: &[u8]) -> Result<(Vec<u8>, Vec<u8>), TsvError> {
    let (key, value, at) = split_fields(line)?;
    Ok((
        unescape_at(key, Field::Key, 0)?,
        unescape_at(value, Field::Value, at)?,
    ))
}

/// A line's key and value fields (one trailing CR stripped first) and the column where the
/// value starts; exactly one tab.
fn split_fields(line: &[u8]) -> Result<(&[u8], &[u8], usize), TsvError> {
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
    Ok((key, value, tab + 1))
}

/// The line formats of `kura db import` / `export` (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Backslash escapes: any bytes, readable text.
    Escaped,
    /// The bytes as they are (Tokyo and Kyoto Cabinet's tools): no TAB or LF in keys, no LF in
    /// values.
    Raw,
    /// Hex byte pairs separated by spaces: any bytes.
    Hex,
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

fn hex_into(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len() * 3);
    for (i, &b) in bytes.iter().enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        out.push(HEX_UPPER[(b >> 4) as usize]);
        out.push(HEX_UPPER[(b & 15) as usize]);
    }
}

/// Decode a hex field that starts at 0-based byte offset `start` of its line.
fn unhex_at(field: &[u8], which: Field, start: usize) -> Result<Vec<u8>, TsvError> {
    let mut out = Vec::with_capacity(field.len() / 3 + 1);
    unhex_into(&mut out, field, which, start)?;
    Ok(out)
}

/// [`unhex_at`], appending to `out`.
fn unhex_into(out: &mut Vec<u8>, field: &[u8], which: Field, start: usize) -> Result<(), TsvError> {
    let mut i = 0;
    while i < field.len() {
        if field[i] == b' ' {
            i += 1;
            continue;
        }
        let hi = hex_val(field[i]);
        let lo = field.get(i + 1).copied().and_then(hex_val);
        let bad = TsvError::BadHex {
            field: which,
            column: start + i + 1,
        };
        match (hi, lo) {
            (Some(hi), Some(lo)) if field.get(i + 2).is_none_or(|&c| c == b' ') => {
                out.push(hi << 4 | lo)
            }
            _ => return Err(bad),
        }
        i += 2;
    }
    Ok(())
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Escaped => "escaped",
            Format::Raw => "raw",
            Format::Hex => "hex",
        }
    }

    /// Append one record, `key<TAB>value<LF>`, in this format. Only [`Format::Raw`] can fail
    /// ([`TsvError::Unwritable`]); `out` is then unchanged.
    pub fn write_line(self, out: &mut Vec<u8>, key: &[u8], value: &[u8]) -> Result<(), TsvError> {
        match self {
            Format::Escaped => write_line(out, key, value),
            Format::Raw => {
                for (field, bytes, bad) in [
                    (Field::Key, key, &b"\t\n"[..]),
                    (Field::Value, value, &b"\n"[..]),
                ] {
                    if let Some(&byte) = bytes.iter().find(|b| bad.contains(b)) {
                        return Err(TsvError::Unwritable { field, byte });
                    }
                }
                out.reserve(key.len() + value.len() + 2);
                out.extend_from_slice(key);
                out.push(b'\t');
                out.extend_from_slice(value);
                out.push(b'\n');
            }
            Format::Hex => {
                hex_into(out, key);
                out.push(b'\t');
                hex_into(out, value);
                out.push(b'\n');
            }
        }
        Ok(())
    }

    /// Parse one line (without its LF) into key and value.
    pub fn parse_line(self, line: &[u8]) -> Result<(Vec<u8>, Vec<u8>), TsvError> {
        match self {
            Format::Escaped => parse_line(line),
            Format::Raw => {
                let tab = line
                    .iter()
                    .position(|&b| b == b'\t')
                    .ok_or(TsvError::MissingTab)?;
                Ok((line[..tab].to_vec(), line[tab + 1..].to_vec()))
            }
            Format::Hex => {
                let (key, value, at) = split_fields(line)?;
                Ok((
                    unhex_at(key, Field::Key, 0)?,
                    unhex_at(value, Field::Value, at)?,
                ))
            }
        }
    }

    /// [`Format::parse_line`] into buffers the caller keeps (cleared first), so that reading
    /// many lines allocates nothing once they are large enough. On an error their contents are
    /// unspecified.
    pub fn parse_line_into(
        self,
        line: &[u8],
        key: &mut Vec<u8>,
        value: &mut Vec<u8>,
    ) -> Result<(), TsvError> {
        key.clear();
        value.clear();
        match self {
            Format::Escaped => {
                let (k, v, at) = split_fields(line)?;
                unescape_into(key, k, Field::Key, 0)?;
                unescape_into(value, v, Field::Value, at)
            }
            Format::Raw => {
                let tab = line
                    .iter()
                    .position(|&b| b == b'\t')
                    .ok_or(TsvError::MissingTab)?;
                key.extend_from_slice(&line[..tab]);
                value.extend_from_slice(&line[tab + 1..]);
                Ok(())
            }
            Format::Hex => {
                let (k, v, at) = split_fields(line)?;
                unhex_into(key, k, Field::Key, 0)?;
                unhex_into(value, v, Field::Value, at)
            }
        }
    }
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

    /// Regression: a Tokyo Cabinet dump `win<TAB>C:\\temp\\new` read as escaped became
    /// `C:<TAB>emp<LF>ew`. Raw takes the bytes as they are, TABs and CRs in the value too.
    #[test]
    fn raw_lines_are_the_bytes_as_they_are() {
        let raw = Format::Raw;
        assert_eq!(
            raw.parse_line(b"win\tC:\\temp\\new").unwrap(),
            (b"win".to_vec(), b"C:\\temp\\new".to_vec())
        );
        assert_eq!(
            raw.parse_line(b"k\tv\twith\ttabs\r").unwrap(),
            (b"k".to_vec(), b"v\twith\ttabs\r".to_vec())
        );
        assert_eq!(raw.parse_line(b"\t").unwrap(), (vec![], vec![]));
        assert_eq!(raw.parse_line(b"no tab"), Err(TsvError::MissingTab));
        let mut out = Vec::new();
        raw.write_line(&mut out, b"a\\b", b"c\td\re\x00").unwrap();
        assert_eq!(out, b"a\\b\tc\td\re\x00\n");
        for (k, v, field, byte) in [
            (&b"a\tb"[..], &b"v"[..], Field::Key, b'\t'),
            (b"a\nb", b"v", Field::Key, b'\n'),
            (b"k", b"x\ny", Field::Value, b'\n'),
        ] {
            let mut out = b"kept".to_vec();
            let e = raw.write_line(&mut out, k, v).unwrap_err();
            assert_eq!(e, TsvError::Unwritable { field, byte });
            assert_eq!(out, b"kept");
            assert!(e.to_string().contains("raw format cannot carry"), "{e}");
        }
    }

    /// The peers' `-px` form: `6B 31<TAB>76 0A`.
    #[test]
    fn hex_lines_are_the_peers_px_form() {
        let hex = Format::Hex;
        let mut out = Vec::new();
        hex.write_line(&mut out, b"win", b"C:\\\n\x00\xff").unwrap();
        assert_eq!(out, b"77 69 6E\t43 3A 5C 0A 00 FF\n");
        assert_eq!(
            hex.parse_line(b"77 69 6e\t43  3A 5c 0A 00 ff\r").unwrap(),
            (b"win".to_vec(), b"C:\\\n\x00\xff".to_vec())
        );
        assert_eq!(hex.parse_line(b"\t").unwrap(), (vec![], vec![]));
        assert_eq!(
            hex.parse_line(b"6B 3\t00"),
            Err(TsvError::BadHex {
                field: Field::Key,
                column: 4
            })
        );
        assert_eq!(
            hex.parse_line(b"6B\t001"),
            Err(TsvError::BadHex {
                field: Field::Value,
                column: 4
            })
        );
        assert!(hex.parse_line(b"6B\tzz").is_err());
        assert!(hex.parse_line(b"6B\t00\t00").is_err());
        assert!(hex.parse_line(b"6B").is_err());
    }

    proptest! {
        #[test]
        fn every_format_round_trips(
            key in proptest::collection::vec(any::<u8>(), 0..32),
            value in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            for f in [Format::Escaped, Format::Raw, Format::Hex] {
                let mut l = Vec::new();
                match f.write_line(&mut l, &key, &value) {
                    Ok(()) => {
                        prop_assert_eq!(l.iter().position(|&b| b == b'\n'), Some(l.len() - 1));
                        let (k, v) = f.parse_line(&l[..l.len() - 1]).unwrap();
                        prop_assert_eq!(&k, &key);
                        prop_assert_eq!(&v, &value);
                    }
                    Err(_) => {
                        prop_assert_eq!(f, Format::Raw);
                        prop_assert!(key.contains(&b'\t') || key.contains(&b'\n') || value.contains(&b'\n'));
                    }
                }
            }
        }

        #[test]
        fn parse_into_agrees_with_parse(
            lines in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..48), 1..8),
        ) {
            // The buffers are reused from line to line, as an import reads them.
            let (mut k, mut v) = (b"left over".to_vec(), b"from before".to_vec());
            for f in [Format::Escaped, Format::Raw, Format::Hex] {
                for line in &lines {
                    let into = f.parse_line_into(line, &mut k, &mut v);
                    match f.parse_line(line) {
                        Ok((key, value)) => {
                            prop_assert_eq!(into, Ok(()));
                            prop_assert_eq!(&k, &key);
                            prop_assert_eq!(&v, &value);
                        }
                        Err(e) => prop_assert_eq!(into, Err(e)),
                    }
                }
            }
        }

        #[test]
        fn no_format_panics_on_any_line(line in proptest::collection::vec(any::<u8>(), 0..128)) {
            for f in [Format::Escaped, Format::Raw, Format::Hex] {
                let _ = f.parse_line(&line);
            }
        }

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
