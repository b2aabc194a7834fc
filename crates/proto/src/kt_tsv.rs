//! Kyoto Tycoon's TSV bodies (TSV-RPC): `name<TAB>value<LF>` lines, every column optionally
//! encoded as the `colenc` attribute of the `Content-Type` says: `B` Base64, `U` URL encoding,
//! `Q` quoted-printable.
//!
//! Parsing follows Kyoto Tycoon: lines end with LF (a CR before it is dropped), the name is
//! everything before the first tab and the value everything after it (tabs included, in the
//! raw form), and lines without a tab are ignored. Decoding is stricter than Kyoto Tycoon,
//! which drops what it cannot decode: a bad escape or bad Base64 is a [`TsvError`] (the
//! server answers 400).
//!
//! The server picks the encoding of its answers from their content like Kyoto Tycoon
//! ([`choose_encoding`]): raw when no byte needs escaping, else Base64 or URL encoding,
//! whichever is shorter. Quoted-printable is only ever read, never chosen.

use crate::http::{form_decode, percent_encode};
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use std::borrow::Cow;
use std::fmt;

/// The media type of TSV bodies.
pub const TSV_TYPE: &str = "text/tab-separated-values";

/// Base64 as Kyoto Tycoon reads it: the standard alphabet, padding optional.
const BASE64_LENIENT: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The encoding of every column of a TSV body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ColEnc {
    /// No encoding: columns hold no tab, LF or CR.
    Raw,
    /// `colenc=B`: Base64 (standard alphabet, padded).
    Base64,
    /// `colenc=U`: URL encoding (`%xx`, `+` read as a space).
    Url,
    /// `colenc=Q`: quoted-printable (`=XX`).
    Quoted,
}

impl ColEnc {
    /// The encoding a `Content-Type` value declares, or `None` when it is not TSV. Like Kyoto
    /// Tycoon: the type is matched case-insensitively as a prefix, attributes are separated by
    /// `;` and spaces, `colenc` may be quoted, and an unknown letter means raw.
    pub fn from_content_type(ct: &[u8]) -> Option<ColEnc> {
        let t = TSV_TYPE.as_bytes();
        if ct.len() < t.len() || !ct[..t.len()].eq_ignore_ascii_case(t) {
            return None;
        }
        let mut enc = ColEnc::Raw;
        for attr in ct[t.len()..].split(|&b| b == b';' || b == b' ') {
            let Some(eq) = attr.iter().position(|&b| b == b'=') else {
                continue;
            };
            if !attr[..eq].eq_ignore_ascii_case(b"colenc") {
                continue;
            }
            let v = &attr[eq + 1..];
            let v = v.strip_prefix(b"\"").unwrap_or(v);
            enc = match v.first().map(u8::to_ascii_uppercase) {
                Some(b'B') => ColEnc::Base64,
                Some(b'U') => ColEnc::Url,
                Some(b'Q') => ColEnc::Quoted,
                _ => enc,
            };
        }
        Some(enc)
    }

    /// The `Content-Type` value of a body in this encoding.
    pub fn content_type(self) -> &'static str {
        match self {
            ColEnc::Raw => "text/tab-separated-values",
            ColEnc::Base64 => "text/tab-separated-values; colenc=B",
            ColEnc::Url => "text/tab-separated-values; colenc=U",
            ColEnc::Quoted => "text/tab-separated-values; colenc=Q",
        }
    }
}

/// A column that cannot be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TsvError {
    /// The 1-based line of the body.
    pub line: usize,
    pub message: &'static str,
}

impl fmt::Display for TsvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TSV line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for TsvError {}

/// One decoded `(name, value)` record of a TSV body.
pub type Record<'a> = (Cow<'a, [u8]>, Cow<'a, [u8]>);

/// The records of a TSV body, decoded, in order (later duplicates are kept: the caller
/// decides; Kyoto Tycoon lets the last one win).
pub fn parse(body: &[u8], enc: ColEnc) -> Result<Vec<Record<'_>>, TsvError> {
    let mut out = Vec::new();
    for (i, line) in body.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(tab) = line.iter().position(|&b| b == b'\t') else {
            continue;
        };
        let err = |message| TsvError {
            line: i + 1,
            message,
        };
        let name = decode_field(&line[..tab], enc).map_err(err)?;
        let value = decode_field(&line[tab + 1..], enc).map_err(err)?;
        out.push((name, value));
    }
    Ok(out)
}

/// Decode one column.
pub fn decode_field(s: &[u8], enc: ColEnc) -> Result<Cow<'_, [u8]>, &'static str> {
    match enc {
        ColEnc::Raw => Ok(Cow::Borrowed(s)),
        ColEnc::Base64 => BASE64_LENIENT
            .decode(s)
            .map(Cow::Owned)
            .map_err(|_| "bad Base64"),
        ColEnc::Url => form_decode(s).map_err(|_| "bad URL escape"),
        ColEnc::Quoted => quoted_decode(s),
    }
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

fn quoted_decode(s: &[u8]) -> Result<Cow<'_, [u8]>, &'static str> {
    if !s.contains(&b'=') {
        return Ok(Cow::Borrowed(s));
    }
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'=' {
            let hi = s.get(i + 1).copied().and_then(hex);
            let lo = s.get(i + 2).copied().and_then(hex);
            match (hi, lo) {
                (Some(hi), Some(lo)) => out.push(hi << 4 | lo),
                _ => return Err("bad quoted-printable escape"),
            }
            i += 3;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    Ok(Cow::Owned(out))
}

/// Append one column in `enc`. [`ColEnc::Raw`] copies the bytes as they are: only use it when
/// [`choose_encoding`] says so.
pub fn encode_field(out: &mut Vec<u8>, s: &[u8], enc: ColEnc) {
    match enc {
        ColEnc::Raw => out.extend_from_slice(s),
        ColEnc::Base64 => {
            let start = out.len();
            out.resize(start + base64::encoded_len(s.len(), true).unwrap_or(0), 0);
            let n = STANDARD.encode_slice(s, &mut out[start..]).unwrap_or(0);
            out.truncate(start + n);
        }
        // Kyoto Tycoon's URL encoding: letters, digits and `-_.~` stay, the rest is `%xx`.
        ColEnc::Url => percent_encode(out, s, b"-_.~", false),
        ColEnc::Quoted => {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            for &b in s {
                if b == b'=' || !(0x20..=0x7e).contains(&b) {
                    out.extend_from_slice(&[
                        b'=',
                        HEX[usize::from(b >> 4)],
                        HEX[usize::from(b & 15)],
                    ]);
                } else {
                    out.push(b);
                }
            }
        }
    }
}

/// The encoding Kyoto Tycoon would pick for these records: raw unless a column holds a
/// control byte (below space, or DEL) or is longer than 255 bytes; then Base64 when its
/// estimated size is smaller than URL encoding's, else URL encoding. Like Kyoto Tycoon, the
/// estimate only looks at the first 255 bytes of each column.
pub fn choose_encoding<'a, I>(records: I) -> ColEnc
where
    I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
{
    let mut bin = false;
    let (mut blen, mut ulen) = (0usize, 0usize);
    for (name, value) in records {
        for col in [name, value] {
            let col = if col.len() > 255 {
                bin = true;
                &col[..255]
            } else {
                col
            };
            blen += col.len() * 6 / 4 + 3;
            for &c in col {
                if c < b' ' || c == 0x7f {
                    bin = true;
                }
                ulen += if c.is_ascii_alphanumeric() || b"_-.!~*'()".contains(&c) {
                    1
                } else {
                    3
                };
            }
        }
    }
    match (bin, blen < ulen) {
        (false, _) => ColEnc::Raw,
        (true, true) => ColEnc::Base64,
        (true, false) => ColEnc::Url,
    }
}

/// Append records as a TSV body in `enc`.
pub fn encode<'a, I>(out: &mut Vec<u8>, records: I, enc: ColEnc)
where
    I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
{
    for (name, value) in records {
        encode_field(out, name, enc);
        out.push(b'\t');
        encode_field(out, value, enc);
        out.push(b'\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn owned(recs: Vec<Record<'_>>) -> Vec<(Vec<u8>, Vec<u8>)> {
        recs.into_iter()
            .map(|(n, v)| (n.into_owned(), v.into_owned()))
            .collect()
    }

    fn pair(n: &str, v: &str) -> (Vec<u8>, Vec<u8>) {
        (n.as_bytes().to_vec(), v.as_bytes().to_vec())
    }

    #[test]
    fn content_types() {
        let ct = |s: &str| ColEnc::from_content_type(s.as_bytes());
        assert_eq!(ct("text/tab-separated-values"), Some(ColEnc::Raw));
        assert_eq!(
            ct("text/tab-separated-values; colenc=B"),
            Some(ColEnc::Base64)
        );
        assert_eq!(ct("TEXT/Tab-Separated-Values;colenc=u"), Some(ColEnc::Url));
        assert_eq!(
            ct("text/tab-separated-values; charset=utf-8; colenc=\"Q\""),
            Some(ColEnc::Quoted)
        );
        assert_eq!(ct("text/tab-separated-values; colenc=X"), Some(ColEnc::Raw));
        assert_eq!(ct("application/x-www-form-urlencoded"), None);
        assert_eq!(ct("text/plain"), None);
        for e in [ColEnc::Raw, ColEnc::Base64, ColEnc::Url, ColEnc::Quoted] {
            assert_eq!(ct(e.content_type()), Some(e));
        }
    }

    #[test]
    fn parsing_like_kyoto_tycoon() {
        let body = b"key\tjapan\r\nvalue\ttokyo\tcity\n\nno tab here\n\tempty name\nlast\t";
        let recs = owned(parse(body, ColEnc::Raw).unwrap());
        assert_eq!(
            recs,
            vec![
                pair("key", "japan"),
                pair("value", "tokyo\tcity"),
                pair("", "empty name"),
                pair("last", ""),
            ]
        );
        // The examples of Kyoto Tycoon's specification.
        let recs = owned(parse(b"aWQ=\tMTIzNDU=\nYWdl\tMzE=\n", ColEnc::Base64).unwrap());
        assert_eq!(recs, vec![pair("id", "12345"), pair("age", "31")]);
        let recs = owned(parse(b"value\t%e5%b9%b3%e6%9e%97\n", ColEnc::Url).unwrap());
        assert_eq!(recs, vec![pair("value", "平林")]);
        let recs = owned(parse(b"k=3D\ta=09b=0A\n", ColEnc::Quoted).unwrap());
        assert_eq!(recs, vec![pair("k=", "a\tb\n")]);
        // Base64 padding is optional.
        let recs = owned(parse(b"aWQ\tMTIzNDU\n", ColEnc::Base64).unwrap());
        assert_eq!(recs, vec![pair("id", "12345")]);
    }

    #[test]
    fn bad_columns() {
        let e = parse(b"ok\tok\nbad\t%zz\n", ColEnc::Url).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(parse(b"a\t=4\n", ColEnc::Quoted).is_err());
        assert!(parse(b"a\t=\n", ColEnc::Quoted).is_err());
        assert!(parse(b"a\t!!!!\n", ColEnc::Base64).is_err());
        assert!(e.to_string().contains("line 2"));
    }

    #[test]
    fn encodings() {
        let mut out = Vec::new();
        encode_field(&mut out, b"a b/~\xff", ColEnc::Url);
        assert_eq!(out, b"a%20b%2f~%ff");
        out.clear();
        encode_field(&mut out, b"a=\t\x7f~ ", ColEnc::Quoted);
        assert_eq!(out, b"a=3D=09=7F~ ");
        out.clear();
        encode_field(&mut out, b"12345", ColEnc::Base64);
        assert_eq!(out, b"MTIzNDU=");
        out.clear();
        encode(
            &mut out,
            [(&b"num"[..], &b"3"[..]), (&b"_k"[..], &b"v"[..])],
            ColEnc::Raw,
        );
        assert_eq!(out, b"num\t3\n_k\tv\n");
    }

    #[test]
    fn choosing_like_kyoto_tycoon() {
        let c = |recs: &[(&[u8], &[u8])]| choose_encoding(recs.iter().copied());
        assert_eq!(c(&[]), ColEnc::Raw);
        assert_eq!(c(&[(b"value", b"tokyo")]), ColEnc::Raw);
        // UTF-8 text is not binary for Kyoto Tycoon.
        assert_eq!(c(&[(b"value", "平林".as_bytes())]), ColEnc::Raw);
        // A tab forces an encoding: mostly-text goes URL, binary goes Base64.
        assert_eq!(c(&[(b"value", b"hello\tworld")]), ColEnc::Url);
        assert_eq!(
            c(&[(b"value", b"\x00\x01\x02\x03\x04\x05\x06")]),
            ColEnc::Base64
        );
        // Long columns are always encoded.
        let long = vec![b'a'; 300];
        assert_eq!(c(&[(b"value", &long)]), ColEnc::Url);
    }

    fn arb_records() -> impl Strategy<Value = Vec<(Vec<u8>, Vec<u8>)>> {
        prop::collection::vec(
            (
                prop::collection::vec(any::<u8>(), 0..20),
                prop::collection::vec(any::<u8>(), 0..300),
            ),
            0..8,
        )
    }

    proptest! {
        /// Any bytes survive encode → parse in every encoding that escapes.
        #[test]
        fn round_trip_every_encoding(recs in arb_records()) {
            for enc in [ColEnc::Base64, ColEnc::Url, ColEnc::Quoted] {
                let mut body = Vec::new();
                encode(&mut body, recs.iter().map(|(n, v)| (&n[..], &v[..])), enc);
                let back = owned(parse(&body, enc).unwrap());
                prop_assert_eq!(&back, &recs, "{:?}", enc);
            }
        }

        /// The chosen encoding always round-trips, raw included.
        #[test]
        fn chosen_encoding_round_trips(recs in arb_records()) {
            let enc = choose_encoding(recs.iter().map(|(n, v)| (&n[..], &v[..])));
            let mut body = Vec::new();
            encode(&mut body, recs.iter().map(|(n, v)| (&n[..], &v[..])), enc);
            prop_assert_eq!(owned(parse(&body, enc).unwrap()), recs);
        }

        /// Printable records are sent raw and still round-trip.
        #[test]
        fn printable_is_raw(recs in prop::collection::vec(("[ -~]{0,20}", "[ -~]{0,100}"), 0..6)) {
            let recs: Vec<(Vec<u8>, Vec<u8>)> =
                recs.into_iter().map(|(n, v)| (n.into_bytes(), v.into_bytes())).collect();
            let enc = choose_encoding(recs.iter().map(|(n, v)| (&n[..], &v[..])));
            prop_assert_eq!(enc, ColEnc::Raw);
            let mut body = Vec::new();
            encode(&mut body, recs.iter().map(|(n, v)| (&n[..], &v[..])), enc);
            prop_assert_eq!(owned(parse(&body, enc).unwrap()), recs);
        }

        /// Parsing arbitrary bytes never panics, in any encoding.
        #[test]
        fn parse_never_panics(body in prop::collection::vec(any::<u8>(), 0..200)) {
            for enc in [ColEnc::Raw, ColEnc::Base64, ColEnc::Url, ColEnc::Quoted] {
                let _ = parse(&body, enc);
            }
            let _ = ColEnc::from_content_type(&body);
        }
    }
}
