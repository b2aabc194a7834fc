//! Helpers both script interfaces give: packing, codecs, hashes, string and set functions.
//!
//! The functions here are plain Rust over bytes (unit-tested without Lua); their Lua bindings
//! are in `util_lua.rs` ([`install_tyrant`] for Tokyo Tyrant's globals `_pack _unpack …`,
//! [`install_kyoto`] for Kyoto Tycoon's `kt.pack kt.unpack …`) and the file-system built-ins,
//! confined to `--backup-dir`, in `util_fs.rs`. Where the two originals agree (Tyrant's
//! scrext.c and Kyoto Tycoon's ktscrex.cc share most of this code) one function serves both;
//! where they differ the function takes a [`Dialect`].
//!
//! Strings that the originals read as C strings (`lua_tostring` then `strlen`) stop at their
//! first NUL byte here too ([`cstr`]); the others are taken whole.

#[path = "util_fs.rs"]
mod fs;
#[path = "util_lua.rs"]
mod lua;
#[cfg(test)]
#[path = "util_tests.rs"]
mod tests;

pub use fs::{glob, make_dir, remove, stat, FsError, Stat};
pub use lua::{install_kyoto, install_tyrant};

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};

/// Which original a helper follows where the two differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// Tokyo Tyrant (tcutil.c, scrext.c).
    Tyrant,
    /// Kyoto Tycoon (kcutil.h, kcregex.cc, ktscrex.cc).
    Kyoto,
}

/// The bytes before the first NUL (what C's string functions see).
pub fn cstr(b: &[u8]) -> &[u8] {
    match b.iter().position(|&c| c == 0) {
        Some(n) => &b[..n],
        None => b,
    }
}

// ---------------------------------------------------------------------------------------------
// pack / unpack (Perl's formats as both originals implement them: c C s S i I l L f F d D n N
// M w W; native order little-endian, n N M big-endian, w W BER compressed integers)

/// One directive of a pack format: the letter and how many times it applies (`*`: all).
fn directives(format: &[u8]) -> Vec<(u8, usize)> {
    let format = cstr(format);
    let mut out = Vec::new();
    let mut i = 0;
    while i < format.len() {
        let c = format[i];
        let mut count = 1usize;
        if format.get(i + 1) == Some(&b'*') {
            count = usize::MAX;
            i += 1;
        } else if format.get(i + 1).is_some_and(u8::is_ascii_digit) {
            count = 0;
            while let Some(d) = format.get(i + 1).filter(|d| d.is_ascii_digit()) {
                count = count
                    .saturating_mul(10)
                    .saturating_add(usize::from(d - b'0'));
                i += 1;
            }
        }
        out.push((c, count));
        i += 1;
    }
    out
}

/// A Lua number as C converts a double to an unsigned integer of 64 bits on x86-64 (negative
/// values wrap as two's complement; NaN is 0).
fn to_u64(n: f64) -> u64 {
    if n >= 9_223_372_036_854_775_808.0 {
        n as u64
    } else {
        n as i64 as u64
    }
}

/// Append `n` in BER compressed form (7 bits a byte, most significant first, the high bit set on
/// every byte but the last).
pub fn write_ber(out: &mut Vec<u8>, n: u64) {
    let mut buf = [0u8; 10];
    let mut i = buf.len() - 1;
    buf[i] = (n & 0x7f) as u8;
    let mut rest = n >> 7;
    while rest > 0 {
        i -= 1;
        buf[i] = (rest & 0x7f) as u8 | 0x80;
        rest >>= 7;
    }
    out.extend_from_slice(&buf[i..]);
}

/// `_pack(format, ...)` / `kt.pack`: the values (already flattened, as numbers) packed by
/// `format`. A directive takes as many values as its count (`*`: the rest); packing stops when
/// the values run out.
pub fn pack(format: &[u8], nums: &[f64]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut next = 0;
    for (c, count) in directives(format) {
        let end = next + count.min(nums.len() - next);
        for &num in &nums[next..end] {
            let l = to_u64(num);
            match c {
                b'c' | b'C' => out.push(l as u8),
                b's' | b'S' => out.extend_from_slice(&(l as u16).to_le_bytes()),
                b'i' | b'I' => out.extend_from_slice(&(l as u32).to_le_bytes()),
                b'l' | b'L' => out.extend_from_slice(&l.to_le_bytes()),
                b'f' | b'F' => out.extend_from_slice(&(num as f32).to_le_bytes()),
                b'd' | b'D' => out.extend_from_slice(&num.to_le_bytes()),
                b'n' => out.extend_from_slice(&(l as u16).to_be_bytes()),
                b'N' => out.extend_from_slice(&(l as u32).to_be_bytes()),
                b'M' => out.extend_from_slice(&l.to_be_bytes()),
                b'w' | b'W' => write_ber(&mut out, l),
                _ => {}
            }
        }
        next = end;
        if next >= nums.len() {
            break;
        }
    }
    out
}

/// `_unpack(format, data)` / `kt.unpack`: the numbers `data` holds by `format`. A value cut
/// short by the end of the data ends the unpacking.
pub fn unpack(format: &[u8], data: &[u8]) -> Vec<f64> {
    fn take<const N: usize>(rest: &mut &[u8]) -> Option<[u8; N]> {
        let (head, tail) = rest.split_first_chunk::<N>()?;
        *rest = tail;
        Some(*head)
    }
    let mut out = Vec::new();
    let mut rest = data;
    for (c, count) in directives(format) {
        let count = count.min(rest.len());
        for _ in 0..count {
            if rest.is_empty() {
                break;
            }
            let v = match c {
                b'c' => take::<1>(&mut rest).map(|b| f64::from(b[0] as i8)),
                b'C' => take::<1>(&mut rest).map(|b| f64::from(b[0])),
                b's' => take::<2>(&mut rest).map(|b| f64::from(i16::from_le_bytes(b))),
                b'S' => take::<2>(&mut rest).map(|b| f64::from(u16::from_le_bytes(b))),
                b'i' => take::<4>(&mut rest).map(|b| f64::from(i32::from_le_bytes(b))),
                b'I' => take::<4>(&mut rest).map(|b| f64::from(u32::from_le_bytes(b))),
                b'l' => take::<8>(&mut rest).map(|b| i64::from_le_bytes(b) as f64),
                b'L' => take::<8>(&mut rest).map(|b| u64::from_le_bytes(b) as f64),
                b'f' | b'F' => take::<4>(&mut rest).map(|b| f64::from(f32::from_le_bytes(b))),
                b'd' | b'D' => take::<8>(&mut rest).map(f64::from_le_bytes),
                b'n' => take::<2>(&mut rest).map(|b| f64::from(u16::from_be_bytes(b))),
                b'N' => take::<4>(&mut rest).map(|b| f64::from(u32::from_be_bytes(b))),
                b'M' => take::<8>(&mut rest).map(|b| u64::from_be_bytes(b) as f64),
                b'w' | b'W' => {
                    let mut n = 0u64;
                    while let Some((&b, tail)) = rest.split_first() {
                        rest = tail;
                        n = n.wrapping_mul(0x80).wrapping_add(u64::from(b & 0x7f));
                        if b < 0x80 {
                            break;
                        }
                    }
                    Some(n as f64)
                }
                _ => continue,
            };
            match v {
                Some(v) => out.push(v),
                None => rest = &[],
            }
        }
        if rest.is_empty() {
            break;
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// split

/// `_split(str, delims)` / `kt.split`: with delimiters, the parts of `input` (read as a C
/// string) between any of the delimiter bytes; without, the parts between NUL bytes.
pub fn split<'a>(input: &'a [u8], delims: Option<&[u8]>) -> Vec<&'a [u8]> {
    match delims {
        Some(d) => {
            let d = cstr(d);
            cstr(input).split(|c| d.contains(c)).collect()
        }
        None => input.split(|&c| c == 0).collect(),
    }
}

// ---------------------------------------------------------------------------------------------
// codecs

/// What `_codec` / `kt.codec` can be asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    Url,
    Base64,
    Quote,
    Hex,
    /// zlib's format (a header and an Adler-32): Tyrant's and Kyoto Tycoon's `deflate`.
    Deflate,
    /// Raw deflate: Kyoto Tycoon's `zlib`.
    RawDeflate,
    Gzip,
    Xml,
    /// Tokyo Cabinet's PackBits run-length coding (Tyrant's `pack`).
    PackBits,
}

/// The codec a mode names (case-insensitive, without its `~`), or why it is refused: a mode
/// the original has that Kura does not give is an error naming it; an unknown mode is
/// `Ok(None)` (the originals return nil).
pub fn codec_named(dialect: Dialect, mode: &[u8]) -> Result<Option<Codec>, String> {
    let m = String::from_utf8_lossy(cstr(mode)).to_ascii_lowercase();
    Ok(Some(match (dialect, m.as_str()) {
        (_, "url") => Codec::Url,
        (_, "base") => Codec::Base64,
        (_, "quote") => Codec::Quote,
        (_, "hex") => Codec::Hex,
        (_, "deflate") => Codec::Deflate,
        (_, "gzip") => Codec::Gzip,
        (Dialect::Kyoto, "zlib") => Codec::RawDeflate,
        (Dialect::Tyrant, "xml") => Codec::Xml,
        (Dialect::Tyrant, "pack") => Codec::PackBits,
        (Dialect::Tyrant, "tcbs" | "bzip") => {
            return Err(format!(
                "the {m} codec (Tokyo Cabinet's {}) is not supported by Kura",
                if m == "tcbs" { "BWT" } else { "bzip2" }
            ))
        }
        _ => return Ok(None),
    }))
}

/// Encode (`decode == false`) or decode `input` with `codec`. `None` when the input cannot be
/// decoded (compressed data that does not inflate).
pub fn codec(dialect: Dialect, codec: Codec, decode: bool, input: &[u8]) -> Option<Vec<u8>> {
    Some(match (codec, decode) {
        (Codec::Url, false) => url_encode(dialect, input),
        (Codec::Url, true) => url_decode(cstr(input)),
        (Codec::Base64, false) => base64_encode(input),
        (Codec::Base64, true) => base64_decode(cstr(input)),
        (Codec::Quote, false) => quote_encode(input),
        (Codec::Quote, true) => quote_decode(cstr(input)),
        (Codec::Hex, false) => hex_encode(input),
        (Codec::Hex, true) => hex_decode(cstr(input)),
        (Codec::Xml, false) => xml_escape(cstr(input)),
        (Codec::Xml, true) => xml_unescape(cstr(input)),
        (Codec::PackBits, false) => packbits_encode(input),
        (Codec::PackBits, true) => return packbits_decode(input),
        (Codec::Deflate | Codec::RawDeflate | Codec::Gzip, false) => compress(codec, input),
        (Codec::Deflate | Codec::RawDeflate | Codec::Gzip, true) => return inflate(codec, input),
    })
}

/// URL encoding: letters, digits and the unreserved marks as they are (Tyrant keeps
/// `_-.!~*'()`, Kyoto Tycoon `_-.~`), every other byte `%XX` (Tyrant upper case, Kyoto Tycoon
/// lower case).
pub fn url_encode(dialect: Dialect, input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len() * 3);
    match dialect {
        Dialect::Tyrant => kura_proto::http::percent_encode(&mut out, input, b"_-.!~*'()", true),
        Dialect::Kyoto => kura_proto::http::percent_encode(&mut out, input, b"_-.~", false),
    }
    out
}

fn hex_val(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// URL decoding: `%XX` a byte, `+` a space; a `%` not followed by two hex digits ends it.
pub fn url_decode(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        match input[i] {
            b'%' => match (
                input.get(i + 1).and_then(|&c| hex_val(c)),
                input.get(i + 2).and_then(|&c| hex_val(c)),
            ) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 3;
                }
                _ => break,
            },
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// Base64 with `=` padding and no line breaks.
pub fn base64_encode(input: &[u8]) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .encode(input)
        .into_bytes()
}

/// Base64 decoding as Tokyo Cabinet does it: bytes outside the alphabet are skipped, and the
/// group holding the first `=` is the last.
pub fn base64_decode(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len() / 4 * 3 + 3);
    let mut pos = 0;
    let mut eq = 0;
    while pos < input.len() && eq == 0 {
        let mut bits = 0u32;
        let mut n = 0;
        while pos < input.len() && n < 4 {
            let c = input[pos];
            pos += 1;
            let v = match c {
                b'A'..=b'Z' => c - b'A',
                b'a'..=b'z' => c - b'a' + 26,
                b'0'..=b'9' => c - b'0' + 52,
                b'+' => 62,
                b'/' => 63,
                b'=' => {
                    eq += 1;
                    0
                }
                _ => continue,
            };
            bits = bits << 6 | u32::from(v);
            n += 1;
        }
        if n == 0 {
            continue;
        }
        // A group cut short by the end is shifted as if padded (Tokyo Cabinet reads its
        // partial bits the same way).
        bits <<= 6 * (4 - n);
        let bytes = [(bits >> 16) as u8, (bits >> 8) as u8, bits as u8];
        let keep = match eq {
            0 => 3,
            1 => 2,
            2 => 1,
            _ => 0,
        };
        out.extend_from_slice(&bytes[..keep]);
    }
    out
}

/// Quoted-printable: `=`, control bytes other than CR LF TAB, and bytes above 0x7e as `=XX`.
pub fn quote_encode(input: &[u8]) -> Vec<u8> {
    const D: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = Vec::with_capacity(input.len());
    for &c in input {
        if c == b'=' || (c < 0x20 && !matches!(c, b'\r' | b'\n' | b'\t')) || c > 0x7e {
            out.extend_from_slice(&[b'=', D[usize::from(c >> 4)], D[usize::from(c & 15)]]);
        } else {
            out.push(c);
        }
    }
    out
}

/// Quoted-printable decoding: `=XX` a byte, `=` before a line break a soft break.
pub fn quote_decode(input: &[u8]) -> Vec<u8> {
    // Tokyo Cabinet reads the two characters after `=` without checking them: a letter counts
    // from 10, anything else from '0'.
    fn nib(c: u8) -> u8 {
        match c {
            b'A'..=b'Z' => c.wrapping_sub(b'A').wrapping_add(10),
            b'a'..=b'z' => c.wrapping_sub(b'a').wrapping_add(10),
            _ => c.wrapping_sub(b'0'),
        }
    }
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        if input[i] != b'=' {
            out.push(input[i]);
            i += 1;
            continue;
        }
        match (input.get(i + 1), input.get(i + 2)) {
            (None, _) => break,
            (Some(b'\r'), Some(b'\n')) => i += 3,
            (Some(b'\r' | b'\n'), _) => i += 2,
            (Some(&h), None) => {
                out.push(nib(h).wrapping_mul(16));
                break;
            }
            (Some(&h), Some(&l)) => {
                out.push(nib(h).wrapping_mul(16).wrapping_add(nib(l)));
                i += 3;
            }
        }
    }
    out
}

/// Two lower-case hex digits a byte.
pub fn hex_encode(input: &[u8]) -> Vec<u8> {
    const D: &[u8; 16] = b"0123456789abcdef";
    input
        .iter()
        .flat_map(|&c| [D[usize::from(c >> 4)], D[usize::from(c & 15)]])
        .collect()
}

/// Hex decoding: white space between pairs is skipped; the first byte that is not a hex digit
/// ends it (a lone last digit is its byte's high half, as the originals read it).
pub fn hex_decode(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len() / 2);
    let mut it = input.iter().copied().filter(|c| !c.is_ascii_whitespace());
    while let Some(h) = it.next().map(hex_val) {
        let Some(h) = h else { break };
        match it.next().map(hex_val) {
            Some(Some(l)) => out.push(h << 4 | l),
            None => {
                out.push(h << 4);
                break;
            }
            Some(None) => break,
        }
    }
    out
}

/// XML escaping of `& < > "`.
pub fn xml_escape(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len());
    for &c in input {
        match c {
            b'&' => out.extend_from_slice(b"&amp;"),
            b'<' => out.extend_from_slice(b"&lt;"),
            b'>' => out.extend_from_slice(b"&gt;"),
            b'"' => out.extend_from_slice(b"&quot;"),
            _ => out.push(c),
        }
    }
    out
}

/// The four entity references [`xml_escape`] writes back to their characters; any other `&`
/// stays.
pub fn xml_unescape(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    'outer: while i < input.len() {
        if input[i] == b'&' {
            for (ent, c) in [
                (&b"&amp;"[..], b'&'),
                (b"&lt;", b'<'),
                (b"&gt;", b'>'),
                (b"&quot;", b'"'),
            ] {
                if input[i..].starts_with(ent) {
                    out.push(c);
                    i += ent.len();
                    continue 'outer;
                }
            }
        }
        out.push(input[i]);
        i += 1;
    }
    out
}

/// PackBits as Tokyo Cabinet writes it: a control byte, then either a run (control 1…127: the
/// next byte that many times) or a literal (control −2…−127 as a signed byte: that many bytes).
/// A literal stops before two equal bytes, which start the next run; a lone byte is a run of 1.
pub fn packbits_encode(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len() + input.len() / 64 + 2);
    let mut p = 0;
    while p < input.len() {
        let run = input[p..]
            .iter()
            .take(127)
            .take_while(|&&b| b == input[p])
            .count();
        if run > 1 || p + 1 == input.len() {
            out.extend_from_slice(&[run as u8, input[p]]);
            p += run;
            continue;
        }
        // A literal: while each byte differs from the one before it, 127 at most; when it
        // stopped at a pair of equal bytes, the first of the pair goes to the run that follows.
        let mut end = p + 1;
        while end < input.len() && end - p < 127 && input[end] != input[end - 1] {
            end += 1;
        }
        if end < input.len() && input[end] == input[end - 1] {
            end -= 1;
        }
        let n = end - p;
        out.push(if n == 1 {
            1
        } else {
            (n as i8).wrapping_neg() as u8
        });
        out.extend_from_slice(&input[p..end]);
        p = end;
    }
    out
}

/// PackBits decoding (any control byte: 0…127 a run of the next byte, −1…−128 a literal, cut
/// short at the end of the input). `None` when the output would pass [`OUTPUT_LIMIT`].
pub fn packbits_decode(input: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(input.len() * 2);
    let mut p = 0;
    while p < input.len() {
        let control = input[p] as i8;
        p += 1;
        let n = usize::from(control.unsigned_abs());
        if out.len() + n > OUTPUT_LIMIT {
            return None;
        }
        if control >= 0 {
            let Some(&b) = input.get(p) else { break };
            out.resize(out.len() + n, b);
            p += 1;
        } else {
            let n = n.min(input.len() - p);
            out.extend_from_slice(&input[p..p + n]);
            p += n;
        }
    }
    Some(out)
}

fn compress(codec: Codec, input: &[u8]) -> Vec<u8> {
    use flate2::Compression;
    let level = Compression::default();
    // Writing into a Vec cannot fail.
    let r = match codec {
        Codec::Deflate => {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), level);
            e.write_all(input).and_then(|_| e.finish())
        }
        Codec::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), level);
            e.write_all(input).and_then(|_| e.finish())
        }
        _ => {
            let mut e = flate2::write::DeflateEncoder::new(Vec::new(), level);
            e.write_all(input).and_then(|_| e.finish())
        }
    };
    r.unwrap_or_default()
}

/// The most one helper call may produce (a decompression, a replacement): past it the call
/// fails rather than fill the server's memory from a small input.
pub const OUTPUT_LIMIT: usize = 64 << 20;

/// [`OUTPUT_LIMIT`] for a decompression.
pub const INFLATE_LIMIT: u64 = OUTPUT_LIMIT as u64;

fn inflate(codec: Codec, input: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let r = match codec {
        Codec::Deflate => flate2::read::ZlibDecoder::new(input)
            .take(INFLATE_LIMIT + 1)
            .read_to_end(&mut out),
        Codec::Gzip => flate2::read::GzDecoder::new(input)
            .take(INFLATE_LIMIT + 1)
            .read_to_end(&mut out),
        _ => flate2::read::DeflateDecoder::new(input)
            .take(INFLATE_LIMIT + 1)
            .read_to_end(&mut out),
    };
    (r.is_ok() && out.len() as u64 <= INFLATE_LIMIT).then_some(out)
}

// ---------------------------------------------------------------------------------------------
// hashes

/// MD5 (RFC 1321).
pub fn md5(input: &[u8]) -> [u8; 16] {
    const S: [u32; 64] = [
        7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5,
        9, 14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10,
        15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
    ];
    let k: [u32; 64] =
        std::array::from_fn(|i| ((i as f64 + 1.0).sin().abs() * 4_294_967_296.0) as u32);
    let mut h: [u32; 4] = [0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476];
    let mut msg = input.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((input.len() as u64).wrapping_mul(8)).to_le_bytes());
    for block in msg.chunks_exact(64) {
        let m: [u32; 16] = std::array::from_fn(|i| {
            u32::from_le_bytes([
                block[4 * i],
                block[4 * i + 1],
                block[4 * i + 2],
                block[4 * i + 3],
            ])
        });
        let [mut a, mut b, mut c, mut d] = h;
        for i in 0..64 {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let t = d;
            d = c;
            c = b;
            b = b.wrapping_add(
                a.wrapping_add(f)
                    .wrapping_add(k[i])
                    .wrapping_add(m[g])
                    .rotate_left(S[i]),
            );
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 16];
    for (i, w) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// CRC-32 (IEEE 802.3, the one zlib computes), as Tokyo Cabinet's `tcgetcrc`.
pub fn crc32(input: &[u8]) -> u32 {
    crc32fast::hash(input)
}

/// Kyoto Cabinet's `hashmurmur` (MurmurHash64A with the seed 19780211).
pub fn hash_murmur(input: &[u8]) -> u64 {
    const MUL: u64 = 0xc6a4a7935bd1e995;
    const R: u32 = 47;
    let mut hash = 19780211u64 ^ (input.len() as u64).wrapping_mul(MUL);
    let mut chunks = input.chunks_exact(8);
    for c in &mut chunks {
        let mut n = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
        n = n.wrapping_mul(MUL);
        n ^= n >> R;
        n = n.wrapping_mul(MUL);
        hash = hash.wrapping_mul(MUL);
        hash ^= n;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate() {
            hash ^= u64::from(b) << (8 * i);
        }
        hash = hash.wrapping_mul(MUL);
    }
    hash ^= hash >> R;
    hash = hash.wrapping_mul(MUL);
    hash ^= hash >> R;
    hash
}

/// Kyoto Cabinet's `hashfnv` (FNV-1a, 64 bits, with Kyoto Cabinet's prime 109951162811).
pub fn hash_fnv(input: &[u8]) -> u64 {
    input.iter().fold(14695981039346656037u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(109951162811)
    })
}

/// What Kyoto Tycoon's `hash_murmur` / `hash_fnv` return: the low 48 bits (a Lua number holds
/// them exactly).
pub const KT_HASH_MASK: u64 = (1 << 48) - 1;

// ---------------------------------------------------------------------------------------------
// numbers and strings

/// `_bit(mode, num, aux)` / `kt.bit` on 32-bit unsigned integers; `None` for an unknown mode.
pub fn bit(mode: &[u8], num: u32, aux: u32) -> Option<u32> {
    let m = String::from_utf8_lossy(cstr(mode)).to_ascii_lowercase();
    Some(match m.as_str() {
        "and" => num & aux,
        "or" => num | aux,
        "xor" => num ^ aux,
        "not" => !num,
        // C's shift of a 32-bit value by 32 or more is undefined; it gives 0 here.
        "left" => num.checked_shl(aux).unwrap_or(0),
        "right" => num.checked_shr(aux).unwrap_or(0),
        _ => return None,
    })
}

/// A Lua number as C converts it to a 32-bit unsigned integer (through a 64-bit one).
pub fn to_u32(n: f64) -> u32 {
    to_u64(n) as u32
}

/// `_strstr(str, pat)` / `kt.strstr`: the 1-based position of `pat` in `s` (C strings), 0 when
/// it is not there.
pub fn strstr(s: &[u8], pat: &[u8]) -> usize {
    let (s, pat) = (cstr(s), cstr(pat));
    if pat.is_empty() {
        return 1;
    }
    memchr::memmem::find(s, pat).map_or(0, |p| p + 1)
}

/// `_strstr(str, pat, alt)`: every `pat` in `s` replaced by `alt` (C strings; an empty `pat`
/// replaces nothing). `None` when the result would pass [`OUTPUT_LIMIT`].
pub fn strstr_replace(s: &[u8], pat: &[u8], alt: &[u8]) -> Option<Vec<u8>> {
    let (mut s, pat, alt) = (cstr(s), cstr(pat), cstr(alt));
    let mut out = Vec::with_capacity(s.len());
    if !pat.is_empty() {
        // A linear search: a long pattern must not make the call quadratic.
        let finder = memchr::memmem::Finder::new(pat);
        while let Some(p) = finder.find(s) {
            if out.len() + p + alt.len() > OUTPUT_LIMIT {
                return None;
            }
            out.extend_from_slice(&s[..p]);
            out.extend_from_slice(alt);
            s = &s[p + pat.len()..];
        }
    }
    out.extend_from_slice(s);
    (out.len() <= OUTPUT_LIMIT).then_some(out)
}

/// `kt.strfwm`: whether `s` begins with `key` (C strings).
pub fn strfwm(s: &[u8], key: &[u8]) -> bool {
    cstr(s).starts_with(cstr(key))
}

/// `kt.strbwm`: whether `s` ends with `key` (C strings).
pub fn strbwm(s: &[u8], key: &[u8]) -> bool {
    cstr(s).ends_with(cstr(key))
}

/// Patterns compiled lately, per thread: a script that matches in a loop compiles once.
const REGEX_CACHE: usize = 64;

/// Compiled patterns by dialect and source (`None`: the pattern does not compile).
type RegexCache = HashMap<(Dialect, Vec<u8>), Option<regex::bytes::Regex>>;

thread_local! {
    static REGEXES: std::cell::RefCell<RegexCache> = std::cell::RefCell::new(HashMap::new());
}

/// [`compile`] through the thread's cache (emptied when it fills).
fn compile_regex(dialect: Dialect, pattern: &[u8]) -> Option<regex::bytes::Regex> {
    let key = (dialect, cstr(pattern).to_vec());
    REGEXES.with(|c| {
        let mut c = c.borrow_mut();
        if let Some(r) = c.get(&key) {
            return r.clone();
        }
        if c.len() >= REGEX_CACHE {
            c.clear();
        }
        let r = compile(dialect, &key.1);
        c.insert(key, r.clone());
        r
    })
}

/// Compile a POSIX extended regular expression the way the originals do (no `REG_NEWLINE`:
/// `.` matches a newline; bytes, not Unicode). Tyrant's leading `*` asks for case-insensitive
/// matching. `None` when it does not compile (the originals then match nothing). The syntax is
/// the `regex` crate's, which reads POSIX's extended syntax the same but for back-references
/// in a pattern (not supported: such a pattern matches nothing) and for alternatives, where
/// the first that matches is taken rather than the longest.
fn compile(dialect: Dialect, pattern: &[u8]) -> Option<regex::bytes::Regex> {
    let mut pattern = cstr(pattern);
    let mut icase = false;
    if dialect == Dialect::Tyrant {
        if let Some(rest) = pattern.strip_prefix(b"*") {
            pattern = rest;
            icase = true;
        }
    }
    let text = std::str::from_utf8(pattern).ok()?;
    regex::bytes::RegexBuilder::new(text)
        .unicode(false)
        .dot_matches_new_line(true)
        .case_insensitive(icase)
        .size_limit(1 << 20)
        .build()
        .ok()
}

/// `_regex(str, regex)` / `kt.regex`: whether `regex` matches somewhere in `s`. An empty
/// pattern matches (Tyrant's `*` alone too).
pub fn regex_match(dialect: Dialect, s: &[u8], pattern: &[u8]) -> bool {
    compile_regex(dialect, pattern).is_some_and(|r| r.is_match(cstr(s)))
}

/// `_regex(str, regex, alt)` / `kt.regex`: every match replaced by `alt`, where Tyrant's `alt`
/// names the match `&` and a group `\1`…`\9` (`\` before another byte quotes it) and Kyoto
/// Tycoon's names them `$&` / `$0`…`$9`. An empty match ends the replacing (as in both
/// originals); a pattern that does not compile leaves `s` as it is. `None` when the result
/// would pass [`OUTPUT_LIMIT`].
pub fn regex_replace(dialect: Dialect, s: &[u8], pattern: &[u8], alt: &[u8]) -> Option<Vec<u8>> {
    let (s, alt) = (cstr(s), cstr(alt));
    let Some(re) = compile_regex(dialect, pattern).filter(|_| !cstr(pattern).is_empty()) else {
        return Some(s.to_vec());
    };
    let escape = match dialect {
        Dialect::Tyrant => b'\\',
        Dialect::Kyoto => b'$',
    };
    let mut out = Vec::with_capacity(s.len());
    let mut at = 0;
    let mut locs = re.capture_locations();
    while at < s.len() {
        let Some(m) = re.captures_read_at(&mut locs, s, at) else {
            break;
        };
        if out.len() > OUTPUT_LIMIT {
            return None;
        }
        out.extend_from_slice(&s[at..m.start()]);
        let group = |n: usize| locs.get(n).map(|(a, b)| &s[a..b]);
        let mut i = 0;
        while i < alt.len() {
            let c = alt[i];
            if c == escape {
                match alt.get(i + 1) {
                    Some(d @ b'0'..=b'9') => {
                        out.extend_from_slice(group(usize::from(d - b'0')).unwrap_or_default());
                        i += 2;
                    }
                    Some(b'&') if dialect == Dialect::Kyoto => {
                        out.extend_from_slice(m.as_bytes());
                        i += 2;
                    }
                    Some(&q) => {
                        out.push(q);
                        i += 2;
                    }
                    None => i += 1,
                }
            } else if c == b'&' && dialect == Dialect::Tyrant {
                out.extend_from_slice(m.as_bytes());
                i += 1;
            } else {
                out.push(c);
                i += 1;
            }
        }
        // An empty match where the search began ends it (both originals stop there).
        let empty = m.end() == at;
        at = m.end();
        if empty {
            break;
        }
    }
    out.extend_from_slice(&s[at.min(s.len())..]);
    (out.len() <= OUTPUT_LIMIT).then_some(out)
}

/// Tokyo Cabinet's `tcstrutftoucs`: UTF-8 (a C string) to UCS-2; sequences longer than three
/// bytes and broken ones are skipped a byte at a time.
pub fn utf8_to_ucs2(s: &[u8]) -> Vec<u16> {
    let s = cstr(s);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        let at = |k: usize| s.get(i + k).copied().unwrap_or(0);
        if c < 0x80 {
            out.push(u16::from(c));
        } else if c < 0xe0 {
            if at(1) >= 0x80 {
                out.push(u16::from(c & 0x1f) << 6 | u16::from(at(1) & 0x3f));
                i += 1;
            }
        } else if c < 0xf0 && at(1) >= 0x80 && at(2) >= 0x80 {
            out.push(
                u16::from(c & 0xf) << 12 | u16::from(at(1) & 0x3f) << 6 | u16::from(at(2) & 0x3f),
            );
            i += 2;
        }
        i += 1;
    }
    out
}

/// Tokyo Cabinet's `tcstrucstoutf`: UCS-2 to UTF-8 (a 0 ends the string, as in C).
pub fn ucs2_to_utf8(ucs: &[u16]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ucs.len() * 3);
    for &c in ucs {
        if c == 0 {
            break;
        } else if c < 0x80 {
            out.push(c as u8);
        } else if c < 0x800 {
            out.extend_from_slice(&[0xc0 | (c >> 6) as u8, 0x80 | (c & 0x3f) as u8]);
        } else {
            out.extend_from_slice(&[
                0xe0 | (c >> 12) as u8,
                0x80 | ((c >> 6) & 0x3f) as u8,
                0x80 | (c & 0x3f) as u8,
            ]);
        }
    }
    out
}

/// Kyoto Cabinet's `strutftoucs`: UTF-8 (the whole string) to UCS-4, sequences of up to six
/// bytes; broken and overlong ones are skipped.
pub fn utf8_to_ucs4(s: &[u8]) -> Vec<u32> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let c = u32::from(s[i]);
        let (len, lead_mask, min) = match c {
            0..=0x7f => (1, 0x7f, 0),
            0x80..=0xdf => (2, 0x1f, 0x80),
            0xe0..=0xef => (3, 0x0f, 0x800),
            0xf0..=0xf7 => (4, 0x07, 0x10000),
            0xf8..=0xfb => (5, 0x03, 0x200000),
            0xfc..=0xfd => (6, 0x01, 0x4000000),
            _ => (0, 0, 0),
        };
        if len == 1 {
            out.push(c);
        } else if (len == 2 && c < 0xc0) || len == 0 {
            // A continuation byte or 0xfe/0xff alone: skipped.
        } else if i + len - 1 < s.len() {
            let v = s[i + 1..i + len]
                .iter()
                .fold(c & lead_mask, |v, &b| v << 6 | u32::from(b & 0x3f));
            if v >= min {
                out.push(v);
            }
            i += len - 1;
        }
        i += 1;
    }
    out
}

/// The most cells an edit distance may fill (about 0.1 s of work): longer inputs are refused
/// rather than holding the worker.
pub const DIST_LIMIT: usize = 100_000_000;

/// Levenshtein distance (insertions, deletions and substitutions all cost 1), or `None` when
/// `a.len() × b.len()` passes [`DIST_LIMIT`].
pub fn edit_distance<T: Eq>(a: &[T], b: &[T]) -> Option<usize> {
    if a.len().saturating_mul(b.len()) > DIST_LIMIT {
        return None;
    }
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.iter().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, y) in b.iter().enumerate() {
            let up = row[j + 1];
            row[j + 1] = (up + 1).min(row[j] + 1).min(diag + usize::from(x != y));
            diag = up;
        }
    }
    Some(row[b.len()])
}

/// `_isect`: the strings every list holds. With two lists, those of the second found in the
/// first, in the second's order; otherwise in the order they first appear. An empty list
/// makes the result empty. Each string appears once.
pub fn isect(lists: &[Vec<Vec<u8>>]) -> Vec<Vec<u8>> {
    if lists.iter().any(Vec::is_empty) {
        return Vec::new();
    }
    if let [former, latter] = lists {
        let former: HashSet<&[u8]> = former.iter().map(Vec::as_slice).collect();
        let mut seen = HashSet::new();
        return latter
            .iter()
            .filter(|s| former.contains(s.as_slice()) && seen.insert(s.as_slice()))
            .cloned()
            .collect();
    }
    let mut order: Vec<&[u8]> = Vec::new();
    let mut freq: HashMap<&[u8], usize> = HashMap::new();
    for list in lists {
        let mut uniq = HashSet::new();
        for s in list {
            if uniq.insert(s.as_slice()) {
                let n = freq.entry(s).or_insert_with(|| {
                    order.push(s);
                    0
                });
                *n += 1;
            }
        }
    }
    order
        .into_iter()
        .filter(|s| freq.get(s) == Some(&lists.len()))
        .map(<[u8]>::to_vec)
        .collect()
}

/// `_union`: every string of every list once, in the order they first appear.
pub fn union(lists: &[Vec<Vec<u8>>]) -> Vec<Vec<u8>> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for s in lists.iter().flatten() {
        if seen.insert(s.as_slice()) {
            out.push(s.clone());
        }
    }
    out
}

fn skip_space(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|&&c| c > 0 && c <= b' ').count();
    &s[n..]
}

fn sign(s: &[u8]) -> (f64, &[u8]) {
    match s.first() {
        Some(b'-') => (-1.0, &s[1..]),
        Some(b'+') => (1.0, &s[1..]),
        _ => (1.0, s),
    }
}

/// Kyoto Cabinet's `atoi`: leading white space, a sign and decimal digits; the rest ignored.
pub fn atoi(s: &[u8]) -> i64 {
    let (sg, s) = sign(skip_space(cstr(s)));
    let n = s
        .iter()
        .take_while(|c| c.is_ascii_digit())
        .fold(0i64, |n, &d| {
            n.wrapping_mul(10).wrapping_add(i64::from(d - b'0'))
        });
    if sg < 0.0 {
        n.wrapping_neg()
    } else {
        n
    }
}

/// Kyoto Cabinet's `atoix`: a decimal number (with a fraction) and a binary metric suffix
/// (`k` 2^10, `m`, `g`, `t`, `p`, `e` 2^60), clamped to 64 bits.
pub fn atoix(s: &[u8]) -> i64 {
    let (sg, mut s) = sign(skip_space(cstr(s)));
    let mut num = 0f64;
    while let Some((&d, rest)) = s.split_first().filter(|(d, _)| d.is_ascii_digit()) {
        num = num * 10.0 + f64::from(d - b'0');
        s = rest;
    }
    if let Some(rest) = s.strip_prefix(b".") {
        s = rest;
        let mut base = 10f64;
        while let Some((&d, rest)) = s.split_first().filter(|(d, _)| d.is_ascii_digit()) {
            num += f64::from(d - b'0') / base;
            base *= 10.0;
            s = rest;
        }
    }
    num *= sg;
    let s = skip_space(s);
    let shift = match s.first().map(u8::to_ascii_lowercase) {
        Some(b'k') => 10,
        Some(b'm') => 20,
        Some(b'g') => 30,
        Some(b't') => 40,
        Some(b'p') => 50,
        Some(b'e') => 60,
        _ => 0,
    };
    num *= (1u64 << shift) as f64;
    // `as` saturates at the bounds, as Kyoto Cabinet clamps.
    num as i64
}

/// Kyoto Cabinet's `atof`: a sign, `inf` / `nan`, digits, a fraction (16 significant digits
/// at most) and an `e` exponent.
pub fn atof(s: &[u8]) -> f64 {
    let (sg, mut s) = sign(skip_space(cstr(s)));
    let lower: Vec<u8> = s.iter().take(3).map(u8::to_ascii_lowercase).collect();
    if lower == b"inf" {
        return sg * f64::INFINITY;
    }
    if lower == b"nan" {
        return f64::NAN;
    }
    let mut num = 0f64;
    let mut col = 0;
    while let Some((&d, rest)) = s.split_first().filter(|(d, _)| d.is_ascii_digit()) {
        num = num * 10.0 + f64::from(d - b'0');
        if num > 0.0 {
            col += 1;
        }
        s = rest;
    }
    if let Some(rest) = s.strip_prefix(b".") {
        s = rest;
        let mut base = 10f64;
        while col < 16 {
            let Some((&d, rest)) = s.split_first().filter(|(d, _)| d.is_ascii_digit()) else {
                break;
            };
            num += f64::from(d - b'0') / base;
            base *= 10.0;
            col += 1;
            s = rest;
        }
        while let Some(rest) = s.split_first().filter(|(d, _)| d.is_ascii_digit()) {
            s = rest.1;
        }
    }
    if let Some(rest) = s.strip_prefix(b"e").or_else(|| s.strip_prefix(b"E")) {
        num *= 10f64.powi(atoi(rest).clamp(-10_000, 10_000) as i32);
    }
    num * sg
}

// ---------------------------------------------------------------------------------------------
// Kyoto Cabinet's serialization of arrays and maps (`arraydump` … `mapload`)

/// Append `n` in Kyoto Cabinet's variable-length form (the same BER form as `w`).
pub fn write_varnum(out: &mut Vec<u8>, n: u64) {
    write_ber(out, n)
}

/// Read a number in Kyoto Cabinet's variable-length form: the number and the bytes it took,
/// `None` when the data ends inside it.
pub fn read_varnum(buf: &[u8]) -> Option<(u64, usize)> {
    let mut n = 0u64;
    for (i, &b) in buf.iter().enumerate() {
        n = (n << 7).wrapping_add(u64::from(b & 0x7f));
        if b < 0x80 {
            return Some((n, i + 1));
        }
    }
    None
}

/// A number as Kyoto Tycoon writes it into a dump: an integral value as `%lld`, another as
/// `%.6f`.
pub fn number_text(n: f64) -> String {
    if n == n.floor() && n.is_finite() {
        format!("{}", n as i64)
    } else if n.is_nan() {
        "nan".into()
    } else if n.is_infinite() {
        if n > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        format!("{n:.6}")
    }
}

/// `kt.arraydump`: each element as its size (varnum) and its bytes.
pub fn array_dump<'a>(items: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for v in items {
        write_varnum(&mut out, v.len() as u64);
        out.extend_from_slice(v);
    }
    out
}

/// `kt.arrayload`: the elements of an [`array_dump`]; a record cut short ends the list.
pub fn array_load(mut buf: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        // Kyoto Tycoon reads a cut varnum as a step of 0 and loops for ever; it ends here.
        let Some((n, step)) = read_varnum(buf) else {
            break;
        };
        buf = &buf[step..];
        let Some(n) = usize::try_from(n).ok().filter(|&n| n <= buf.len()) else {
            break;
        };
        out.push(&buf[..n]);
        buf = &buf[n..];
    }
    out
}

/// `kt.mapdump`: each pair as the key's size, the value's size (varnums), the key, the value.
pub fn map_dump<'a>(pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in pairs {
        write_varnum(&mut out, k.len() as u64);
        write_varnum(&mut out, v.len() as u64);
        out.extend_from_slice(k);
        out.extend_from_slice(v);
    }
    out
}

/// `kt.mapload`: the pairs of a [`map_dump`], in order; a record cut short ends them.
pub fn map_load(mut buf: &[u8]) -> Vec<(&[u8], &[u8])> {
    let mut out = Vec::new();
    while buf.len() > 1 {
        let Some((k, step)) = read_varnum(buf) else {
            break;
        };
        buf = &buf[step..];
        let Some((v, step)) = read_varnum(buf) else {
            break;
        };
        buf = &buf[step..];
        let (Ok(k), Ok(v)) = (usize::try_from(k), usize::try_from(v)) else {
            break;
        };
        if k.checked_add(v).is_none_or(|n| n > buf.len()) {
            break;
        }
        out.push((&buf[..k], &buf[k..k + v]));
        buf = &buf[k + v..];
    }
    out
}

/// Seconds since the epoch with microseconds (`_time`, `kt.time`).
pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
