//! The Redis protocol (RESP): requests in, replies out (docs/PROTOCOL-REDIS.md).
//!
//! Requests are what a Redis server reads: a multibulk (`*N\r\n` then N `$len\r\n…\r\n`
//! arguments), or an inline command (one line of space-separated words, `"…"` and `'…'`
//! quoting as Redis's `sdssplitargs`). Every malformed request is Redis's protocol error
//! (`-ERR Protocol error: …`), after which the connection is closed, as Redis closes it.
//! An empty multibulk (`*0`, `*-1`) or an empty inline line is a request with no arguments,
//! which the server skips without a reply, as Redis does.
//!
//! Replies are written by the functions at the end, in RESP2 or RESP3 (`resp3`): the types
//! RESP3 added (null, map, set, double, boolean, verbatim string) fall back to their RESP2
//! forms, as Redis writes them to a RESP2 client.

use crate::Decoded;
use std::borrow::Cow;

/// The codec's limits, checked before anything is allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest argument (Redis's `proto-max-bulk-len`; Kura: the server's largest value).
    pub max_bulk: usize,
    /// Most arguments in one multibulk.
    pub max_args: usize,
    /// Longest inline request, and longest `*N` / `$N` line (Redis's
    /// `PROTO_INLINE_MAX_SIZE`, 64 KiB).
    pub max_inline: usize,
    /// Largest multibulk in all, its headers included (Redis's `client-query-buffer-limit`):
    /// refused as soon as its declared lengths pass it, before its data is read.
    pub max_request: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_bulk: 512 << 20,
            max_args: 1 << 20,
            max_inline: 64 << 10,
            max_request: 1 << 30,
        }
    }
}

/// One request: its arguments (the command name first), borrowed from the buffer except for
/// inline words written with quotes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    pub args: Vec<Cow<'a, [u8]>>,
    /// Sent inline (a line typed by hand) rather than as a multibulk.
    pub inline: bool,
}

impl Request<'_> {
    /// Every argument as owned bytes (a request kept for later: MULTI's queue).
    pub fn to_owned_args(&self) -> Vec<Vec<u8>> {
        self.args.iter().map(|a| a.to_vec()).collect()
    }
}

/// A protocol error: the message (after `-ERR Protocol error: `), then the connection is
/// closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub message: String,
    /// The length of a bulk refused as over [`Limits::max_bulk`] (for the server's log).
    pub bulk_len: Option<u64>,
}

impl Error {
    fn new(message: impl Into<String>) -> Error {
        Error {
            message: message.into(),
            bulk_len: None,
        }
    }

    /// The reply Redis sends before it closes the connection.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"-ERR Protocol error: ");
        out.extend_from_slice(self.message.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Protocol error: {}", self.message)
    }
}

/// Decode one request from the start of `buf`.
pub fn decode<'a>(buf: &'a [u8], limits: &Limits) -> Result<Decoded<Request<'a>>, Error> {
    match buf.first() {
        None => Ok(Decoded::Incomplete),
        Some(b'*') => decode_multibulk(buf, limits),
        Some(_) => decode_inline(buf, limits),
    }
}

/// The number on a `*N` / `$N` line starting at `at` (after the type byte): `Ok(None)` when
/// the line has not all arrived, else the number (`None` inside when it does not parse) and
/// where the next line starts. Redis looks for the `\r` and steps over two bytes.
#[allow(clippy::type_complexity)]
fn count_line(
    buf: &[u8],
    at: usize,
    limits: &Limits,
    too_big: &str,
) -> Result<Option<(Option<i64>, usize)>, Error> {
    let rest = &buf[at..];
    let Some(cr) = rest.iter().position(|&b| b == b'\r') else {
        if rest.len() > limits.max_inline {
            return Err(Error::new(too_big));
        }
        return Ok(None);
    };
    if cr > limits.max_inline {
        return Err(Error::new(too_big));
    }
    if rest.len() < cr + 2 {
        return Ok(None);
    }
    Ok(Some((parse_i64(&rest[..cr]), at + cr + 2)))
}

/// Redis's `string2ll`: an optional `-`, then digits, no leading zeros, no spaces, no `+`.
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (neg, digits) = match s[0] {
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || digits[0] == b'0' || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: i64 = 0;
    for &d in digits {
        let d = i64::from(d - b'0');
        v = v.checked_mul(10)?;
        v = if neg {
            v.checked_sub(d)?
        } else {
            v.checked_add(d)?
        };
    }
    Some(v)
}

fn decode_multibulk<'a>(buf: &'a [u8], limits: &Limits) -> Result<Decoded<Request<'a>>, Error> {
    let Some((n, mut pos)) = count_line(buf, 1, limits, "too big mbulk count string")? else {
        return Ok(Decoded::Incomplete);
    };
    let n = match n {
        Some(n) if n <= 0 => {
            return Ok(Decoded::Complete {
                request: Request {
                    args: Vec::new(),
                    inline: false,
                },
                consumed: pos,
            })
        }
        Some(n) if (n as u64) <= limits.max_args as u64 => n as usize,
        _ => return Err(Error::new("invalid multibulk length")),
    };
    // Grown as arguments arrive, never sized from the wire.
    let mut args = Vec::with_capacity(n.min(16));
    for _ in 0..n {
        let Some(&b) = buf.get(pos) else {
            return Ok(Decoded::Incomplete);
        };
        if b != b'$' {
            return Err(Error::new(format!(
                "expected '$', got '{}'",
                char::from(b).escape_default()
            )));
        }
        let Some((len, next)) = count_line(buf, pos + 1, limits, "too big bulk count string")?
        else {
            return Ok(Decoded::Incomplete);
        };
        let len = match len {
            Some(l) if l >= 0 && (l as u64) <= limits.max_bulk as u64 => l as usize,
            Some(l) if l >= 0 => {
                return Err(Error {
                    message: "invalid bulk length".into(),
                    bulk_len: Some(l as u64),
                })
            }
            _ => return Err(Error::new("invalid bulk length")),
        };
        // Redis steps over the two bytes after the data without looking at them.
        let end = next + len;
        if end + 2 > limits.max_request {
            return Err(Error {
                message: format!(
                    "request of more than {} bytes (the server's limit)",
                    limits.max_request
                ),
                bulk_len: None,
            });
        }
        if buf.len() < end + 2 {
            return Ok(Decoded::Incomplete);
        }
        args.push(Cow::Borrowed(&buf[next..end]));
        pos = end + 2;
    }
    Ok(Decoded::Complete {
        request: Request {
            args,
            inline: false,
        },
        consumed: pos,
    })
}

fn decode_inline<'a>(buf: &'a [u8], limits: &Limits) -> Result<Decoded<Request<'a>>, Error> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > limits.max_inline {
            return Err(Error::new("too big inline request"));
        }
        return Ok(Decoded::Incomplete);
    };
    if nl > limits.max_inline {
        return Err(Error::new("too big inline request"));
    }
    let mut line = &buf[..nl];
    if line.last() == Some(&b'\r') {
        line = &line[..line.len() - 1];
    }
    let args = split_args(line).ok_or_else(|| Error::new("unbalanced quotes in request"))?;
    Ok(Decoded::Complete {
        request: Request { args, inline: true },
        consumed: nl + 1,
    })
}

/// Redis's `sdssplitargs`: words separated by white space; `"…"` with backslash escapes
/// (`\n \r \t \b \a \\ \" \xHH`) and `'…'` (only `\'`); a closing quote must be followed by
/// white space or the end. Words without quotes borrow from `line`; quoted ones are owned.
fn split_args(line: &[u8]) -> Option<Vec<Cow<'_, [u8]>>> {
    let mut args = Vec::new();
    let mut i = 0;
    let n = line.len();
    loop {
        while i < n && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= n {
            return Some(args);
        }
        let start = i;
        let mut word = Vec::new();
        let mut quoted = false;
        loop {
            if i >= n {
                break;
            }
            match line[i] {
                b'"' => {
                    quoted = true;
                    i += 1;
                    loop {
                        let c = *line.get(i)?;
                        if c == b'\\' && i + 3 < n && line[i + 1] == b'x' {
                            let h = |b: u8| (b as char).to_digit(16);
                            if let (Some(a), Some(b)) = (h(line[i + 2]), h(line[i + 3])) {
                                word.push((a * 16 + b) as u8);
                                i += 4;
                                continue;
                            }
                        }
                        if c == b'\\' && i + 1 < n {
                            word.push(match line[i + 1] {
                                b'n' => b'\n',
                                b'r' => b'\r',
                                b't' => b'\t',
                                b'b' => 8,
                                b'a' => 7,
                                o => o,
                            });
                            i += 2;
                        } else if c == b'"' {
                            i += 1;
                            if i < n && !line[i].is_ascii_whitespace() {
                                return None;
                            }
                            break;
                        } else {
                            word.push(c);
                            i += 1;
                        }
                    }
                }
                b'\'' => {
                    quoted = true;
                    i += 1;
                    loop {
                        let c = *line.get(i)?;
                        if c == b'\\' && line.get(i + 1) == Some(&b'\'') {
                            word.push(b'\'');
                            i += 2;
                        } else if c == b'\'' {
                            i += 1;
                            if i < n && !line[i].is_ascii_whitespace() {
                                return None;
                            }
                            break;
                        } else {
                            word.push(c);
                            i += 1;
                        }
                    }
                }
                c if c.is_ascii_whitespace() => break,
                c => {
                    word.push(c);
                    i += 1;
                }
            }
        }
        if quoted {
            args.push(Cow::Owned(word));
        } else {
            args.push(Cow::Borrowed(&line[start..i]));
        }
    }
}

// ----- replies -----

/// `+s`
pub fn simple(out: &mut Vec<u8>, s: &str) {
    out.push(b'+');
    out.extend_from_slice(s.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `+OK`
pub fn ok(out: &mut Vec<u8>) {
    out.extend_from_slice(b"+OK\r\n");
}

/// An error reply: `msg` starts with its code (`ERR …`, `WRONGPASS …`); line breaks in it
/// become spaces, as Redis makes them.
pub fn error(out: &mut Vec<u8>, msg: &str) {
    out.push(b'-');
    out.extend(
        msg.bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

fn header(out: &mut Vec<u8>, t: u8, n: i64) {
    out.push(t);
    let mut b = itoa_buf(n);
    out.append(&mut b);
    out.extend_from_slice(b"\r\n");
}

fn itoa_buf(n: i64) -> Vec<u8> {
    let mut v = Vec::with_capacity(20);
    if n < 0 {
        v.push(b'-');
    }
    crate::push_decimal(&mut v, n.unsigned_abs());
    v
}

/// `:n`
pub fn integer(out: &mut Vec<u8>, n: i64) {
    header(out, b':', n);
}

/// `$len\r\nbytes\r\n`
pub fn bulk(out: &mut Vec<u8>, b: &[u8]) {
    header(out, b'$', b.len() as i64);
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

/// The header of a bulk string of `len` bytes (the bytes and `\r\n` follow from the caller).
pub fn bulk_header(out: &mut Vec<u8>, len: usize) {
    header(out, b'$', len as i64);
}

/// A null: RESP3 `_`, RESP2's null bulk string `$-1`.
pub fn null(out: &mut Vec<u8>, resp3: bool) {
    out.extend_from_slice(if resp3 { b"_\r\n" } else { b"$-1\r\n" });
}

/// A null array: RESP3 `_`, RESP2 `*-1` (EXEC of a transaction a WATCH aborted).
pub fn null_array(out: &mut Vec<u8>, resp3: bool) {
    out.extend_from_slice(if resp3 { b"_\r\n" } else { b"*-1\r\n" });
}

/// `*n`: an array of n elements follows.
pub fn array(out: &mut Vec<u8>, n: usize) {
    header(out, b'*', n as i64);
}

/// A map of n pairs: RESP3 `%n`, RESP2 an array of 2n elements.
pub fn map(out: &mut Vec<u8>, n: usize, resp3: bool) {
    if resp3 {
        header(out, b'%', n as i64);
    } else {
        header(out, b'*', 2 * n as i64);
    }
}

/// A set of n elements: RESP3 `~n`, RESP2 an array.
pub fn set(out: &mut Vec<u8>, n: usize, resp3: bool) {
    header(out, if resp3 { b'~' } else { b'*' }, n as i64);
}

/// A double: RESP3 `,d`, RESP2 a bulk string; written as Redis writes a human-readable
/// double (no exponent, no trailing zeros).
pub fn double(out: &mut Vec<u8>, d: f64, resp3: bool) {
    let s = format_double(d);
    if resp3 {
        out.push(b',');
        out.extend_from_slice(s.as_bytes());
        out.extend_from_slice(b"\r\n");
    } else {
        bulk(out, s.as_bytes());
    }
}

/// A double in the form Redis gives INCRBYFLOAT's result and stores it.
pub fn format_double(d: f64) -> String {
    if d.is_infinite() {
        return if d > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if d == 0.0 {
        return "0".into();
    }
    format!("{d}")
}

/// A boolean: RESP3 `#t` / `#f`, RESP2 `:1` / `:0`.
pub fn boolean(out: &mut Vec<u8>, b: bool, resp3: bool) {
    if resp3 {
        out.extend_from_slice(if b { b"#t\r\n" } else { b"#f\r\n" });
    } else {
        integer(out, i64::from(b));
    }
}

/// A verbatim string of format `fmt` (three letters: `txt`): RESP3 `=len\r\nfmt:…`, RESP2 a
/// bulk string.
pub fn verbatim(out: &mut Vec<u8>, fmt: &str, text: &[u8], resp3: bool) {
    if resp3 {
        header(out, b'=', (text.len() + fmt.len() + 1) as i64);
        out.extend_from_slice(fmt.as_bytes());
        out.push(b':');
        out.extend_from_slice(text);
        out.extend_from_slice(b"\r\n");
    } else {
        bulk(out, text);
    }
}

#[cfg(test)]
mod tests;
