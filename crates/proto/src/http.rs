//! HTTP/1.x, sans IO: request heads and bodies from bytes, responses to bytes, plus the
//! URL / form helpers that Tokyo Tyrant's REST interface and Kyoto Tycoon's RPC and REST
//! interfaces share.
//!
//! The request line and header fields are parsed by `httparse`; this module adds the message
//! framing rules of RFC 9112 that matter to a server:
//!
//! * the body is delimited by `Content-Length` (borrowed from the input) or by
//!   `Transfer-Encoding: chunked` (chunk extensions and trailers are accepted and dropped; the
//!   body is copied once, when the whole message has arrived). A request with neither has no
//!   body. Both at once: the chunked framing wins and the connection closes afterwards.
//! * keep-alive: HTTP/1.1 keeps the connection unless `Connection: close`; HTTP/1.0 closes it
//!   unless `Connection: keep-alive`.
//! * `Expect: 100-continue` makes [`decode`] return [`Decoded::Continue`] while the head is
//!   complete and no body byte has arrived yet.
//!
//! Every limit of [`Limits`] is checked before anything is allocated: a head longer than
//! `max_head` (431), more header fields than `max_headers` (431), a body larger than
//! `max_body` (413, decided from `Content-Length` or from the chunk sizes before the data is
//! awaited). Malformed requests are 400, unknown HTTP versions 505, unsupported transfer
//! codings 501 and unsupported expectations 417. Every decode error asks to close the
//! connection: after a framing error the position of the next request is unknown.
//!
//! [`decode`] never allocates for a request with a `Content-Length` body: the target, the
//! header fields and the body borrow from the input. Header fields are not copied out of the
//! head at all: [`Headers`] walks the (already validated) head again when asked.

use crate::push_decimal;
use std::borrow::Cow;
use std::fmt;
use std::mem::MaybeUninit;

/// The most header fields a request may carry, whatever [`Limits::max_headers`] says (the
/// parser's slots live on the stack).
pub const HEADER_SLOTS: usize = 128;

/// The interim response to `Expect: 100-continue`.
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Longest chunk-size line (size, extensions and CRLF) accepted in a chunked body.
const MAX_CHUNK_LINE: usize = 1024;

/// Most trailer fields accepted after a chunked body (they are dropped).
const TRAILER_SLOTS: usize = 32;

/// Limits checked before anything is allocated or awaited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest request head (request line, header fields and the empty line), leading empty
    /// lines included. Tokyo Tyrant and Kyoto Tycoon read lines of at most 8 KiB.
    pub max_head: usize,
    /// Most header fields in a request (at most [`HEADER_SLOTS`]).
    pub max_headers: usize,
    /// Largest request body, after chunked decoding.
    pub max_body: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head: 16 * 1024,
            max_headers: 64,
            max_body: 64 << 20,
        }
    }
}

/// The request method. Methods are case-sensitive (RFC 9110 9.1): `get` is `Other("get")`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method<'a> {
    Get,
    Head,
    Put,
    Post,
    Delete,
    Options,
    Other(&'a str),
}

impl<'a> Method<'a> {
    fn parse(token: &'a str) -> Method<'a> {
        match token {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "PUT" => Method::Put,
            "POST" => Method::Post,
            "DELETE" => Method::Delete,
            "OPTIONS" => Method::Options,
            other => Method::Other(other),
        }
    }

    /// The method token as sent.
    pub fn as_str(&self) -> &'a str {
        match *self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Put => "PUT",
            Method::Post => "POST",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
            Method::Other(s) => s,
        }
    }
}

/// The header fields of a request, borrowed from its head.
///
/// Invariant: `raw` is the header section of a head that `httparse` accepted (field lines
/// ending in CRLF or LF, then the empty line), holding exactly `len` fields. Iteration splits
/// it again the way `httparse` did: the name is everything before the first `:`, the value is
/// the rest without leading and trailing spaces and tabs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Headers<'a> {
    raw: &'a [u8],
    len: usize,
}

impl<'a> Headers<'a> {
    /// Number of header fields.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The fields in the order they were sent.
    pub fn iter(&self) -> HeaderIter<'a> {
        HeaderIter { rest: self.raw }
    }

    /// The value of the first field named `name` (ASCII case-insensitive).
    pub fn get(&self, name: &str) -> Option<&'a [u8]> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Whether any field name starts with `prefix` (ASCII case-insensitive).
    pub fn any_prefixed(&self, prefix: &str) -> bool {
        self.iter().any(|(n, _)| {
            n.len() >= prefix.len()
                && n.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
        })
    }
}

/// Iterator over `(name, value)` header fields.
#[derive(Clone, Debug)]
pub struct HeaderIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for HeaderIter<'a> {
    type Item = (&'a str, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let nl = self.rest.iter().position(|&b| b == b'\n')?;
        let mut line = &self.rest[..nl];
        self.rest = &self.rest[nl + 1..];
        if let Some(l) = line.strip_suffix(b"\r") {
            line = l;
        }
        if line.is_empty() {
            self.rest = &[];
            return None;
        }
        let colon = line.iter().position(|&b| b == b':')?;
        // httparse accepted the name as a token, so it is ASCII.
        let name = std::str::from_utf8(&line[..colon]).ok()?;
        Some((name, trim_ows(&line[colon + 1..])))
    }
}

/// `s` without leading and trailing spaces and tabs.
fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// One decoded request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    pub method: Method<'a>,
    /// The request target as sent: origin form (`/path?query`) or absolute form
    /// (`http://host/path?query`). Always valid UTF-8 without spaces or control bytes.
    pub target: &'a str,
    /// The minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub version: u8,
    pub headers: Headers<'a>,
    /// The body: borrowed with `Content-Length`, owned when it was chunked.
    pub body: Cow<'a, [u8]>,
    /// Whether the connection stays open after the response.
    pub keep_alive: bool,
}

impl<'a> Request<'a> {
    /// The value of the first header field named `name` (ASCII case-insensitive).
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.headers.get(name)
    }

    /// The path of the target, still percent-encoded: the absolute form loses its scheme and
    /// authority (`http://h:1/k` → `/k`, `http://h` → `/`), and the query is cut off.
    pub fn path(&self) -> &'a str {
        let t = strip_authority(self.target);
        let p = match t.find('?') {
            Some(q) => &t[..q],
            None => t,
        };
        if p.is_empty() {
            "/"
        } else {
            p
        }
    }

    /// The query string after the first `?`, still encoded.
    pub fn query(&self) -> Option<&'a str> {
        let t = strip_authority(self.target);
        t.find('?').map(|q| &t[q + 1..])
    }
}

/// The target without `http://authority` / `https://authority` (like Tokyo Tyrant, which
/// accepts absolute URIs from proxies).
fn strip_authority(t: &str) -> &str {
    let b = t.as_bytes();
    let skip = if b.len() >= 7 && b[..7].eq_ignore_ascii_case(b"http://") {
        7
    } else if b.len() >= 8 && b[..8].eq_ignore_ascii_case(b"https://") {
        8
    } else {
        return t;
    };
    let rest = &t[skip..];
    match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => &rest[i..],
        // `http://host?q`: an empty path (read as `/`) and the query.
        Some(i) => &rest[i..],
        None => "/",
    }
}

/// The result of decoding the start of a buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A whole request, and how many bytes it took.
    Complete {
        request: Request<'a>,
        consumed: usize,
    },
    /// More bytes are needed.
    Incomplete,
    /// More bytes are needed, and the client waits for [`CONTINUE`] before it sends the body:
    /// write it, then read on. Returned only while the buffer holds the head and no body byte
    /// (so at most once per request when the caller decodes only after new bytes arrive; a
    /// repeated 100 would be harmless anyway: clients skip any number of 1xx responses).
    Continue,
}

/// A request that cannot be served, and what happens next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpError {
    /// The status to answer (400, 413, 417, 431, 501, 505).
    pub status: u16,
    /// A short explanation, sent as the body.
    pub message: &'static str,
    /// Bytes of the input that belong to the refused request, as far as they are known (at
    /// least 1).
    pub consumed: usize,
    /// Whether to close the connection after the answer. Always true for now: after a framing
    /// error the start of the next request is unknown.
    pub close: bool,
}

impl HttpError {
    fn new(status: u16, message: &'static str, consumed: usize) -> HttpError {
        HttpError {
            status,
            message,
            consumed: consumed.max(1),
            close: true,
        }
    }

    /// Append the error response (plain-text body, `Connection: close` when closing).
    pub fn write(&self, out: &mut Vec<u8>) {
        let mut body = Vec::with_capacity(self.message.len() + 1);
        body.extend_from_slice(self.message.as_bytes());
        body.push(b'\n');
        write_response(
            out,
            self.status,
            &[("Content-Type", b"text/plain")],
            &body,
            !self.close,
            false,
        );
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status,
            reason(self.status),
            self.message
        )
    }
}

impl std::error::Error for HttpError {}

/// Decode one request from the start of `buf`.
pub fn decode<'a>(buf: &'a [u8], limits: &Limits) -> Result<Decoded<'a>, HttpError> {
    if buf.is_empty() {
        return Ok(Decoded::Incomplete);
    }
    let mut slots = [const { MaybeUninit::<httparse::Header<'a>>::uninit() }; HEADER_SLOTS];
    let nslots = limits.max_headers.min(HEADER_SLOTS);
    let mut parsed = httparse::Request::new(&mut []);
    let head_len = match parsed.parse_with_uninit_headers(buf, &mut slots[..nslots]) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() >= limits.max_head {
                return Err(HttpError::new(431, "request head too large", buf.len()));
            }
            return Ok(Decoded::Incomplete);
        }
        Err(httparse::Error::TooManyHeaders) => {
            return Err(HttpError::new(431, "too many header fields", buf.len()))
        }
        Err(httparse::Error::Version) if names_http_version(buf) => {
            return Err(HttpError::new(505, "unsupported HTTP version", buf.len()))
        }
        Err(_) => return Err(HttpError::new(400, "malformed request head", buf.len())),
    };
    if head_len > limits.max_head {
        return Err(HttpError::new(431, "request head too large", head_len));
    }
    let (Some(method), Some(target), Some(version)) = (parsed.method, parsed.path, parsed.version)
    else {
        return Err(HttpError::new(400, "malformed request line", head_len));
    };

    // Framing and connection management from the header fields.
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let (mut close_asked, mut keep_asked) = (false, false);
    let mut expect_continue = false;
    for h in parsed.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            let n = parse_content_length(h.value)
                .ok_or_else(|| HttpError::new(400, "invalid Content-Length", head_len))?;
            if content_length.is_some_and(|c| c != n) {
                return Err(HttpError::new(400, "conflicting Content-Length", head_len));
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            for coding in list_tokens(h.value) {
                if coding.eq_ignore_ascii_case(b"chunked") && !chunked {
                    chunked = true;
                } else {
                    // Only `chunked`, once and last, is understood (RFC 9112 6.1).
                    return Err(HttpError::new(501, "unsupported transfer coding", head_len));
                }
            }
        } else if name.eq_ignore_ascii_case("connection") {
            for opt in list_tokens(h.value) {
                close_asked |= opt.eq_ignore_ascii_case(b"close");
                keep_asked |= opt.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case("expect") {
            if h.value.eq_ignore_ascii_case(b"100-continue") {
                expect_continue = true;
            } else {
                return Err(HttpError::new(417, "unsupported expectation", head_len));
            }
        }
    }
    // `close` wins over `keep-alive`, wherever each appears.
    let mut keep_alive = !close_asked && (version >= 1 || keep_asked);
    let headers = Headers {
        raw: header_section(buf, head_len),
        len: parsed.headers.len(),
    };

    let (body, consumed) = if chunked {
        if version == 0 {
            return Err(HttpError::new(
                400,
                "chunked body in an HTTP/1.0 request",
                head_len,
            ));
        }
        if content_length.is_some() {
            // Request smuggling defence (RFC 9112 6.3): trust the chunks, then close.
            keep_alive = false;
        }
        match scan_chunked(buf, head_len, limits)? {
            Some((end, total)) => (Cow::Owned(collect_chunks(buf, head_len, total)), end),
            None => return Ok(awaiting(buf, head_len, expect_continue)),
        }
    } else {
        let len = content_length.unwrap_or(0);
        if len > limits.max_body as u64 {
            return Err(HttpError::new(413, "request body too large", head_len));
        }
        // len <= max_body, which is a usize.
        let len = len as usize;
        if buf.len() - head_len < len {
            return Ok(awaiting(buf, head_len, expect_continue));
        }
        (
            Cow::Borrowed(&buf[head_len..head_len + len]),
            head_len + len,
        )
    };
    Ok(Decoded::Complete {
        request: Request {
            method: Method::parse(method),
            target,
            version,
            headers,
            body,
            keep_alive,
        },
        consumed,
    })
}

/// `Continue` when the client waits for it and has sent no body byte, else `Incomplete`.
fn awaiting(buf: &[u8], head_len: usize, expect_continue: bool) -> Decoded<'_> {
    if expect_continue && buf.len() == head_len {
        Decoded::Continue
    } else {
        Decoded::Incomplete
    }
}

/// Whether the request line of a head that failed on its version names one (`HTTP/…`):
/// then the answer is 505 rather than 400.
fn names_http_version(buf: &[u8]) -> bool {
    let start = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    let line = &buf[start..];
    let end = line
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .unwrap_or(line.len());
    let mut parts = line[..end].split(|&b| b == b' ');
    let third = parts.nth(2).unwrap_or(&[]);
    third.len() > 5 && third.starts_with(b"HTTP/") && third[5].is_ascii_digit()
}

/// The header section of an accepted head: after the request line, up to `head_len`.
fn header_section(buf: &[u8], head_len: usize) -> &[u8] {
    let head = &buf[..head_len];
    // httparse skipped leading empty lines, which are made of CR and LF bytes only.
    let start = head
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(head.len());
    match head[start..].iter().position(|&b| b == b'\n') {
        Some(nl) => &head[start + nl + 1..],
        None => &[],
    }
}

/// A `Content-Length` value: ASCII digits only. Values beyond `u64` read as `u64::MAX` (too
/// large for any limit).
fn parse_content_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0u64, |n, &d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

/// The non-empty, trimmed elements of a comma-separated header list.
fn list_tokens(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|&b| b == b',')
        .map(trim_ows)
        .filter(|t| !t.is_empty())
}

/// Walk a chunked body starting at `start` without copying it: `Some((end, total))` with the
/// end of the message (after the trailers) and the decoded body size, or `None` while bytes
/// are missing.
fn scan_chunked(
    buf: &[u8],
    start: usize,
    limits: &Limits,
) -> Result<Option<(usize, usize)>, HttpError> {
    let mut pos = start;
    let mut total = 0usize;
    loop {
        match httparse::parse_chunk_size(&buf[pos..]) {
            Ok(httparse::Status::Complete((n, size))) => {
                pos += n;
                if size == 0 {
                    break;
                }
                let left = limits.max_body - total;
                if size > left as u64 {
                    return Err(HttpError::new(413, "request body too large", pos));
                }
                // size <= left <= max_body, a usize.
                let size = size as usize;
                if buf.len() - pos < size + 2 {
                    return Ok(None);
                }
                if &buf[pos + size..pos + size + 2] != b"\r\n" {
                    return Err(HttpError::new(400, "chunk not followed by CRLF", pos));
                }
                total += size;
                pos += size + 2;
            }
            Ok(httparse::Status::Partial) => {
                if buf.len() - pos > MAX_CHUNK_LINE {
                    return Err(HttpError::new(400, "chunk size line too long", pos));
                }
                return Ok(None);
            }
            Err(_) => return Err(HttpError::new(400, "invalid chunk size", pos)),
        }
    }
    // Trailer fields, then the empty line: parsed for framing, then dropped.
    let mut trailers = [httparse::EMPTY_HEADER; TRAILER_SLOTS];
    match httparse::parse_headers(&buf[pos..], &mut trailers) {
        Ok(httparse::Status::Complete((n, _))) => Ok(Some((pos + n, total))),
        Ok(httparse::Status::Partial) => {
            if buf.len() - pos > limits.max_head {
                return Err(HttpError::new(431, "trailer section too large", pos));
            }
            Ok(None)
        }
        Err(httparse::Error::TooManyHeaders) => {
            Err(HttpError::new(431, "too many trailer fields", pos))
        }
        Err(_) => Err(HttpError::new(400, "malformed trailer section", pos)),
    }
}

/// Copy the data of a chunked body that [`scan_chunked`] found complete (`total` bytes, all of
/// them present in `buf`, so the allocation is bounded by what was received).
fn collect_chunks(buf: &[u8], start: usize, total: usize) -> Vec<u8> {
    let mut body = Vec::with_capacity(total);
    let mut pos = start;
    while let Ok(httparse::Status::Complete((n, size))) = httparse::parse_chunk_size(&buf[pos..]) {
        pos += n;
        if size == 0 {
            break;
        }
        let size = size as usize;
        body.extend_from_slice(&buf[pos..pos + size]);
        pos += size + 2;
    }
    debug_assert_eq!(body.len(), total);
    body
}

/// The reason phrase of a status code (Kyoto Tycoon's 450 included).
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Request Entity Too Large",
        414 => "Request-URI Too Long",
        417 => "Expectation Failed",
        431 => "Request Header Fields Too Large",
        450 => "Logical Inconsistency",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        s if s < 200 => "Informational",
        s if s < 300 => "Success",
        s if s < 400 => "Redirection",
        s if s < 500 => "Client Error",
        _ => "Server Error",
    }
}

/// Append a response: the status line (always HTTP/1.1), `headers` (which must not include
/// `Content-Length` or `Connection`), `Content-Length: body.len()` (except for 1xx, 204 and
/// 304, which have no body), `Connection: close` unless `keep_alive`, and the body unless
/// `head_only` (a HEAD request: the length is that of the body a GET would get).
///
/// CR and LF inside header values are replaced by spaces, so no value can end the head.
pub fn write_response(
    out: &mut Vec<u8>,
    status: u16,
    headers: &[(&str, &[u8])],
    body: &[u8],
    keep_alive: bool,
    head_only: bool,
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_decimal(out, u64::from(status));
    out.push(b' ');
    out.extend_from_slice(reason(status).as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend(value.iter().map(|&b| match b {
            b'\r' | b'\n' => b' ',
            b => b,
        }));
        out.extend_from_slice(b"\r\n");
    }
    let bodiless = status < 200 || status == 204 || status == 304;
    if !bodiless {
        out.extend_from_slice(b"Content-Length: ");
        push_decimal(out, body.len() as u64);
        out.extend_from_slice(b"\r\n");
    }
    if !keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !head_only && !bodiless {
        out.extend_from_slice(body);
    }
}

/// Append a request with a `Content-Length` body (for clients, tests and the fuzzer).
pub fn write_request(
    out: &mut Vec<u8>,
    method: &str,
    target: &str,
    headers: &[(&str, &[u8])],
    body: &[u8],
) {
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    if !body.is_empty() {
        out.extend_from_slice(b"Content-Length: ");
        push_decimal(out, body.len() as u64);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

// ----- percent-encoding and forms -----

/// A `%` not followed by two hexadecimal digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadEscape;

impl fmt::Display for BadEscape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("bad percent escape")
    }
}

impl std::error::Error for BadEscape {}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Decode `%XX` escapes (and `+` as a space when `plus` is set). Any byte may result: keys are
/// bytes, not text. Borrowed when there is nothing to decode.
fn unescape(s: &[u8], plus: bool) -> Result<Cow<'_, [u8]>, BadEscape> {
    if !s.iter().any(|&b| b == b'%' || (plus && b == b'+')) {
        return Ok(Cow::Borrowed(s));
    }
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'%' => {
                let hi = s.get(i + 1).copied().and_then(hex_value).ok_or(BadEscape)?;
                let lo = s.get(i + 2).copied().and_then(hex_value).ok_or(BadEscape)?;
                out.push(hi << 4 | lo);
                i += 3;
            }
            b'+' if plus => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Ok(Cow::Owned(out))
}

/// Decode the `%XX` escapes of a URL path segment; `+` stays a plus.
pub fn percent_decode(s: &[u8]) -> Result<Cow<'_, [u8]>, BadEscape> {
    unescape(s, false)
}

/// Decode one name or value of `application/x-www-form-urlencoded` data: `%XX` escapes, and
/// `+` for a space.
pub fn form_decode(s: &[u8]) -> Result<Cow<'_, [u8]>, BadEscape> {
    unescape(s, true)
}

/// Append `s` percent-encoded: ASCII letters, digits and the bytes of `keep` stay literal,
/// every other byte becomes `%XX` (upper-case hex when `upper`).
pub fn percent_encode(out: &mut Vec<u8>, s: &[u8], keep: &[u8], upper: bool) {
    let digits: &[u8; 16] = if upper {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    for &b in s {
        if b.is_ascii_alphanumeric() || keep.contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[
                b'%',
                digits[usize::from(b >> 4)],
                digits[usize::from(b & 15)],
            ]);
        }
    }
}

/// The `name=value` pairs of `application/x-www-form-urlencoded` data (a query string or a
/// body), decoded, in order. Pairs are separated by `&`; spaces, tabs, CR and LF around a pair
/// are ignored (a trailing newline after a form body is common); empty pairs are skipped; a
/// pair without `=` has an empty value.
pub fn form_pairs(s: &[u8]) -> FormPairs<'_> {
    FormPairs { rest: Some(s) }
}

/// Iterator returned by [`form_pairs`].
#[derive(Clone, Debug)]
pub struct FormPairs<'a> {
    rest: Option<&'a [u8]>,
}

/// One decoded form pair.
pub type FormPair<'a> = (Cow<'a, [u8]>, Cow<'a, [u8]>);

impl<'a> Iterator for FormPairs<'a> {
    type Item = Result<FormPair<'a>, BadEscape>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let rest = self.rest?;
            let (pair, next) = match rest.iter().position(|&b| b == b'&') {
                Some(i) => (&rest[..i], Some(&rest[i + 1..])),
                None => (rest, None),
            };
            self.rest = next;
            let pair = trim_space(pair);
            if pair.is_empty() {
                continue;
            }
            let (name, value) = match pair.iter().position(|&b| b == b'=') {
                Some(i) => (&pair[..i], &pair[i + 1..]),
                None => (pair, &pair[pair.len()..]),
            };
            return Some(form_decode(name).and_then(|n| Ok((n, form_decode(value)?))));
        }
    }
}

fn trim_space(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t' | b'\r' | b'\n', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t' | b'\r' | b'\n'] = s {
        s = rest;
    }
    s
}

// ----- dates -----

/// Days since 1970-01-01 of a proleptic Gregorian date.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The (year, month, day) of a day count since 1970-01-01.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Append a unix time as an RFC 1123 date in GMT (`Sun, 06 Nov 1994 08:49:37 GMT`), the form
/// of HTTP's `Date` and Kyoto Tycoon's `X-Kt-Xt`.
pub fn write_http_date(out: &mut Vec<u8>, t: u64) {
    let t = t.min(253_402_300_799); // 9999-12-31T23:59:59Z
    let days = (t / 86_400) as i64;
    let secs = t % 86_400;
    let (y, m, d) = civil_from_days(days);
    let two = |out: &mut Vec<u8>, n: u64| {
        out.extend_from_slice(&[b'0' + (n / 10 % 10) as u8, b'0' + (n % 10) as u8])
    };
    out.extend_from_slice(WEEKDAYS[(days % 7) as usize].as_bytes());
    out.extend_from_slice(b", ");
    two(out, u64::from(d));
    out.push(b' ');
    out.extend_from_slice(MONTHS[(m - 1) as usize].as_bytes());
    out.push(b' ');
    // 1970 <= y <= 9999
    two(out, (y / 100) as u64);
    two(out, (y % 100) as u64);
    out.push(b' ');
    two(out, secs / 3600);
    out.push(b':');
    two(out, secs / 60 % 60);
    out.push(b':');
    two(out, secs % 60);
    out.extend_from_slice(b" GMT");
}

/// Parse a date as Kyoto Tycoon accepts it in `X-Kt-Xt`: a decimal unix time, an RFC 1123
/// date (`Sun, 06 Nov 1994 08:49:37 GMT`, the weekday optional) or a W3CDTF date
/// (`1994-11-06T08:49:37Z`, `+09:00` style offsets, the time optional). `None` when it is none
/// of them or before 1970.
pub fn parse_http_date(s: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(trim_ows(s)).ok()?;
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().ok();
    }
    parse_rfc1123(s).or_else(|| parse_w3cdtf(s))
}

fn hms(s: &str) -> Option<(i64, i64, i64)> {
    let mut it = s.split(':');
    let h: i64 = it.next()?.parse().ok()?;
    let m: i64 = it.next()?.parse().ok()?;
    let sec: i64 = match it.next() {
        Some(x) => x.split('.').next()?.parse().ok()?,
        None => 0,
    };
    if it.next().is_some()
        || !(0..24).contains(&h)
        || !(0..60).contains(&m)
        || !(0..61).contains(&sec)
    {
        return None;
    }
    Some((h, m, sec))
}

fn to_unix(y: i64, m: u32, d: u32, h: i64, mi: i64, s: i64, offset: i64) -> Option<u64> {
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    let t = days_from_civil(y, m, d) * 86_400 + h * 3600 + mi * 60 + s - offset;
    u64::try_from(t).ok()
}

fn parse_rfc1123(s: &str) -> Option<u64> {
    let s = match s.find(',') {
        Some(i) => &s[i + 1..],
        None => s,
    };
    let mut it = s.split_ascii_whitespace();
    let d: u32 = it.next()?.parse().ok()?;
    let mon = it.next()?;
    let m = MONTHS.iter().position(|x| x.eq_ignore_ascii_case(mon))? as u32 + 1;
    let y: i64 = it.next()?.parse().ok()?;
    let (h, mi, sec) = hms(it.next()?)?;
    let offset = match it.next() {
        None => 0,
        Some(z) if z.eq_ignore_ascii_case("GMT") || z.eq_ignore_ascii_case("UTC") => 0,
        Some(z) => zone_offset(z)?,
    };
    to_unix(y, m, d, h, mi, sec, offset)
}

/// `+hhmm`, `-hh:mm` or `Z` as seconds east of UTC.
fn zone_offset(z: &str) -> Option<i64> {
    if z == "Z" || z == "z" {
        return Some(0);
    }
    let sign = match z.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let digits: String = z[1..].chars().filter(|c| *c != ':').collect();
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let h: i64 = digits[..2].parse().ok()?;
    let m: i64 = digits[2..].parse().ok()?;
    Some(sign * (h * 3600 + m * 60))
}

fn parse_w3cdtf(s: &str) -> Option<u64> {
    let (date, time) = match s.find(['T', 't']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let mut it = date.split('-');
    let y: i64 = it.next()?.parse().ok()?;
    let m: u32 = it.next().map_or(Some(1), |x| x.parse().ok())?;
    let d: u32 = it.next().map_or(Some(1), |x| x.parse().ok())?;
    if it.next().is_some() {
        return None;
    }
    let (h, mi, sec, offset) = match time {
        None => (0, 0, 0, 0),
        Some(t) => {
            let zi = t.find(['Z', 'z', '+', '-']).unwrap_or(t.len());
            let (h, mi, sec) = hms(&t[..zi])?;
            let offset = if zi < t.len() {
                zone_offset(&t[zi..])?
            } else {
                0
            };
            (h, mi, sec, offset)
        }
    };
    to_unix(y, m, d, h, mi, sec, offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lim() -> Limits {
        Limits::default()
    }

    fn one(buf: &[u8]) -> (Request<'_>, usize) {
        match decode(buf, &lim()) {
            Ok(Decoded::Complete { request, consumed }) => (request, consumed),
            other => panic!("{other:?} for {:?}", String::from_utf8_lossy(buf)),
        }
    }

    fn err_with(buf: &[u8], limits: &Limits) -> HttpError {
        match decode(buf, limits) {
            Err(e) => e,
            other => panic!("expected an error, got {other:?}"),
        }
    }

    fn err(buf: &[u8]) -> HttpError {
        err_with(buf, &lim())
    }

    #[test]
    fn simple_get_and_helpers() {
        let buf = b"GET /a%20b?x=1&y HTTP/1.1\r\nHost: h\r\nX-Kt-Xt:  12 \r\n\r\n";
        let (r, n) = one(buf);
        assert_eq!(n, buf.len());
        assert_eq!(r.method, Method::Get);
        assert_eq!(r.target, "/a%20b?x=1&y");
        assert_eq!(r.path(), "/a%20b");
        assert_eq!(r.query(), Some("x=1&y"));
        assert_eq!(r.version, 1);
        assert!(r.keep_alive);
        assert_eq!(r.headers.len(), 2);
        assert_eq!(r.header("host"), Some(&b"h"[..]));
        assert_eq!(r.header("x-kt-xt"), Some(&b"12"[..]));
        assert!(r.headers.any_prefixed("X-KT-"));
        assert!(!r.headers.any_prefixed("x-tt-"));
        assert_eq!(r.header("missing"), None);
        assert!(r.body.is_empty());
        assert_eq!(
            percent_decode(&r.path().as_bytes()[1..]).unwrap().as_ref(),
            b"a b"
        );
    }

    #[test]
    fn absolute_form_targets() {
        let (r, _) = one(b"GET http://example.com:1978/k?q HTTP/1.1\r\n\r\n");
        assert_eq!((r.path(), r.query()), ("/k", Some("q")));
        let (r, _) = one(b"GET HTTPS://example.com HTTP/1.1\r\n\r\n");
        assert_eq!((r.path(), r.query()), ("/", None));
        let (r, _) = one(b"DELETE http://h?z=1 HTTP/1.1\r\n\r\n");
        assert_eq!(r.query(), Some("z=1"));
        assert_eq!(r.method, Method::Delete);
    }

    #[test]
    fn methods_are_case_sensitive() {
        let (r, _) = one(b"get / HTTP/1.1\r\n\r\n");
        assert_eq!(r.method, Method::Other("get"));
        assert_eq!(r.method.as_str(), "get");
        for (m, want) in [
            ("HEAD", Method::Head),
            ("PUT", Method::Put),
            ("POST", Method::Post),
            ("OPTIONS", Method::Options),
            ("PATCH", Method::Other("PATCH")),
        ] {
            let buf = format!("{m} / HTTP/1.1\r\n\r\n");
            assert_eq!(one(buf.as_bytes()).0.method, want);
        }
    }

    #[test]
    fn keep_alive_rules() {
        let ka = |s: &str| one(s.as_bytes()).0.keep_alive;
        assert!(ka("GET / HTTP/1.1\r\n\r\n"));
        assert!(!ka("GET / HTTP/1.1\r\nConnection: close\r\n\r\n"));
        assert!(!ka("GET / HTTP/1.1\r\nConnection: Upgrade, CLOSE\r\n\r\n"));
        assert!(!ka("GET / HTTP/1.0\r\n\r\n"));
        assert!(ka("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
        assert!(!ka(
            "GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n"
        ));
        assert!(!ka(
            "GET / HTTP/1.0\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n"
        ));
    }

    #[test]
    fn content_length_bodies_and_pipelining() {
        let buf = b"PUT /k HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /k HTTP/1.1\r\n\r\n";
        let (r, n) = one(buf);
        assert_eq!(r.body.as_ref(), b"hello");
        assert!(matches!(r.body, Cow::Borrowed(_)));
        let (r2, n2) = one(&buf[n..]);
        assert_eq!(r2.method, Method::Get);
        assert_eq!(n + n2, buf.len());
        // Equal duplicates are fine, different ones are not.
        one(b"PUT / HTTP/1.1\r\nContent-Length: 1\r\ncontent-length: 1\r\n\r\nx");
        let bad: [&[u8]; 4] = [
            b"PUT / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy",
            b"PUT / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            b"PUT / HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n",
            b"PUT / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n",
        ];
        for b in bad {
            assert_eq!(err(b).status, 400, "{:?}", String::from_utf8_lossy(b));
        }
    }

    #[test]
    fn split_at_every_offset() {
        let reqs: [&[u8]; 3] = [
            b"PUT /key HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world",
            b"POST /rpc/set HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: t\r\n\r\n",
            b"\r\nGET / HTTP/1.0\n\n",
        ];
        for full in reqs {
            let (whole, n) = one(full);
            assert_eq!(n, full.len());
            for cut in 0..full.len() {
                match decode(&full[..cut], &lim()) {
                    Ok(Decoded::Incomplete) => {}
                    other => panic!(
                        "cut {cut} of {:?}: {other:?}",
                        String::from_utf8_lossy(full)
                    ),
                }
            }
            let (again, _) = one(full);
            assert_eq!(whole, again);
        }
    }

    #[test]
    fn chunked_bodies() {
        let buf = b"PUT /k HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nA ; name=\"v\"\r\n0123456789\r\n0\r\nX-Check: 1\r\nY: 2\r\n\r\nGET / HTTP/1.1\r\n\r\n";
        let (r, n) = one(buf);
        assert_eq!(r.body.as_ref(), b"abc0123456789");
        assert!(matches!(r.body, Cow::Owned(_)));
        assert!(r.keep_alive);
        assert_eq!(&buf[n..], b"GET / HTTP/1.1\r\n\r\n");
        // An empty chunked body.
        let (r, _) = one(b"POST / HTTP/1.1\r\ntransfer-encoding: Chunked\r\n\r\n0\r\n\r\n");
        assert!(r.body.is_empty());
        // Chunked wins over Content-Length, and the connection closes.
        let (r, _) = one(
            b"PUT / HTTP/1.1\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nz\r\n0\r\n\r\n",
        );
        assert_eq!(r.body.as_ref(), b"z");
        assert!(!r.keep_alive);
        // Malformed chunks.
        let e = err(b"PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
        assert_eq!(e.status, 400);
        let e = err(b"PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n");
        assert_eq!(e.status, 400);
        let mut long = b"PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;".to_vec();
        long.resize(long.len() + MAX_CHUNK_LINE + 10, b'e');
        assert_eq!(err(&long).status, 400);
        // Codings other than chunked are not implemented; chunked needs HTTP/1.1.
        let e = err(b"PUT / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
        assert_eq!(e.status, 501);
        let e = err(b"PUT / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n");
        assert_eq!(e.status, 501);
        let e = err(b"PUT / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
        assert_eq!(e.status, 400);
        // Too many trailers.
        let mut t = b"PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n".to_vec();
        for i in 0..TRAILER_SLOTS + 1 {
            t.extend_from_slice(format!("T{i}: v\r\n").as_bytes());
        }
        t.extend_from_slice(b"\r\n");
        assert_eq!(err(&t).status, 431);
    }

    #[test]
    fn body_limits() {
        let small = Limits {
            max_body: 10,
            ..lim()
        };
        let e = err_with(b"PUT / HTTP/1.1\r\nContent-Length: 11\r\n\r\n", &small);
        assert_eq!((e.status, e.close), (413, true));
        let e = err_with(
            b"PUT / HTTP/1.1\r\nContent-Length: 99999999999999999999999999\r\n\r\n",
            &small,
        );
        assert_eq!(e.status, 413);
        assert!(matches!(
            decode(b"PUT / HTTP/1.1\r\nContent-Length: 10\r\n\r\n", &small),
            Ok(Decoded::Incomplete)
        ));
        // Chunked: refused as soon as the sizes add up past the limit, before the data.
        let e = err_with(
            b"PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n5\r\n",
            &small,
        );
        assert_eq!(e.status, 413);
        let e = err_with(
            b"PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffff\r\n",
            &small,
        );
        assert_eq!(e.status, 413);
    }

    #[test]
    fn head_limits_and_header_floods() {
        let small = Limits {
            max_head: 64,
            max_headers: 4,
            ..lim()
        };
        // A head that never ends.
        let mut buf = b"GET /".to_vec();
        buf.resize(buf.len() + 100, b'a');
        assert_eq!(err_with(&buf, &small).status, 431);
        // A complete head that is too long.
        let mut buf = b"GET / HTTP/1.1\r\nX: ".to_vec();
        buf.resize(buf.len() + 60, b'v');
        buf.extend_from_slice(b"\r\n\r\n");
        assert_eq!(err_with(&buf, &small).status, 431);
        // Too many fields.
        let e = err_with(
            b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n\r\n",
            &small,
        );
        assert_eq!(e.status, 431);
        // Leading empty lines count towards the head.
        let mut buf = b"\r\n".repeat(40);
        buf.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        assert_eq!(err_with(&buf, &small).status, 431);
        // The default limits accept a reasonable request with many fields.
        let mut buf = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..lim().max_headers {
            buf.extend_from_slice(format!("H{i}: v\r\n").as_bytes());
        }
        buf.extend_from_slice(b"\r\n");
        assert_eq!(one(&buf).0.headers.len(), lim().max_headers);
        buf.truncate(buf.len() - 2);
        buf.extend_from_slice(b"Extra: 1\r\n\r\n");
        assert_eq!(err(&buf).status, 431);
    }

    #[test]
    fn versions_and_malformed_heads() {
        assert_eq!(err(b"GET / HTTP/2.0\r\n\r\n").status, 505);
        assert_eq!(err(b"GET / HTTP/1.2\r\n\r\n").status, 505);
        assert_eq!(err(b"GET / FOO/1.1\r\n\r\n").status, 400);
        assert_eq!(err(b"GET /\r\n\r\n").status, 400);
        assert_eq!(err(b"GET  / HTTP/1.1\r\n\r\n").status, 400);
        assert_eq!(err(b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n").status, 400);
        assert_eq!(err(b"GET / HTTP/1.1\r\nNoColon\r\n\r\n").status, 400);
        assert_eq!(err(b"GET /\xff HTTP/1.1\r\n\r\n").status, 400);
        assert_eq!(err(b"\x00\x01").status, 400);
        assert_eq!(err(b"GET / HTTP/1.1\r\nExpect: bogus\r\n\r\n").status, 417);
        let e = err(b"GET / HTTP/1.1\r\n\x01\r\n\r\n");
        assert!(e.close && e.consumed >= 1);
        let mut out = Vec::new();
        e.write(&mut out);
        assert!(out.starts_with(b"HTTP/1.1 400 Bad Request\r\n"));
        assert!(String::from_utf8_lossy(&out).contains("Connection: close\r\n"));
    }

    #[test]
    fn expect_continue() {
        let head = b"PUT /k HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n";
        assert_eq!(decode(head, &lim()), Ok(Decoded::Continue));
        assert_eq!(
            decode(&head[..head.len() - 1], &lim()),
            Ok(Decoded::Incomplete)
        );
        let mut buf = head.to_vec();
        buf.push(b'a');
        assert_eq!(decode(&buf, &lim()), Ok(Decoded::Incomplete));
        buf.extend_from_slice(b"bc");
        assert_eq!(one(&buf).0.body.as_ref(), b"abc");
        // Without a body nothing is awaited.
        let (r, _) = one(b"GET / HTTP/1.1\r\nExpect: 100-Continue\r\n\r\n");
        assert!(r.body.is_empty());
        let chunked =
            b"PUT /k HTTP/1.1\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(decode(chunked, &lim()), Ok(Decoded::Continue));
    }

    #[test]
    fn responses() {
        let mut out = Vec::new();
        write_response(
            &mut out,
            200,
            &[("Content-Type", b"text/plain")],
            b"hi",
            true,
            false,
        );
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi"
        );
        out.clear();
        write_response(&mut out, 200, &[], b"hello", false, true);
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"
        );
        out.clear();
        write_response(&mut out, 204, &[("X", b"a\r\nb")], b"ignored", true, false);
        assert_eq!(out, b"HTTP/1.1 204 No Content\r\nX: a  b\r\n\r\n");
        out.clear();
        write_response(&mut out, 450, &[], b"", true, false);
        assert!(out.starts_with(b"HTTP/1.1 450 Logical Inconsistency\r\n"));
        assert_eq!(reason(299), "Success");
        assert_eq!(reason(599), "Server Error");
    }

    #[test]
    fn percent_and_forms() {
        assert_eq!(percent_decode(b"a%2Fb%00+").unwrap().as_ref(), b"a/b\0+");
        assert_eq!(percent_decode(b"%ff%FE").unwrap().as_ref(), b"\xff\xfe");
        assert!(matches!(
            percent_decode(b"plain").unwrap(),
            Cow::Borrowed(_)
        ));
        assert_eq!(percent_decode(b"%"), Err(BadEscape));
        assert_eq!(percent_decode(b"%4"), Err(BadEscape));
        assert_eq!(percent_decode(b"%zz"), Err(BadEscape));
        assert_eq!(form_decode(b"a+b%2B").unwrap().as_ref(), b"a b+");
        let pairs: Vec<_> = form_pairs(b"key=a+b&&value=%00%01&flag&=v&x=1=2\r\n")
            .map(|p| p.unwrap())
            .map(|(n, v)| (n.into_owned(), v.into_owned()))
            .collect();
        assert_eq!(
            pairs,
            vec![
                (b"key".to_vec(), b"a b".to_vec()),
                (b"value".to_vec(), b"\0\x01".to_vec()),
                (b"flag".to_vec(), b"".to_vec()),
                (b"".to_vec(), b"v".to_vec()),
                (b"x".to_vec(), b"1=2".to_vec()),
            ]
        );
        assert!(form_pairs(b"a=%g0").next().unwrap().is_err());
        let mut out = Vec::new();
        percent_encode(&mut out, b"a b/~\xff", b"-_.~", false);
        assert_eq!(out, b"a%20b%2f~%ff");
        out.clear();
        percent_encode(&mut out, b"a b", b"", true);
        assert_eq!(out, b"a%20b");
    }

    #[test]
    fn dates() {
        let mut out = Vec::new();
        write_http_date(&mut out, 784_111_777);
        assert_eq!(out, b"Sun, 06 Nov 1994 08:49:37 GMT");
        out.clear();
        write_http_date(&mut out, 0);
        assert_eq!(out, b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(
            parse_http_date(b"Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(
            parse_http_date(b"06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(
            parse_http_date(b"Sun, 06 Nov 1994 17:49:37 +0900"),
            Some(784_111_777)
        );
        assert_eq!(parse_http_date(b" 784111777 "), Some(784_111_777));
        assert_eq!(parse_http_date(b"1994-11-06T08:49:37Z"), Some(784_111_777));
        assert_eq!(
            parse_http_date(b"1994-11-06T17:49:37+09:00"),
            Some(784_111_777)
        );
        assert_eq!(parse_http_date(b"1994-11-06"), Some(784_080_000));
        assert_eq!(parse_http_date(b"1969-12-31T23:59:59Z"), None);
        assert_eq!(parse_http_date(b"yesterday"), None);
        assert_eq!(parse_http_date(b"Sun, 06 Foo 1994 08:49:37 GMT"), None);
        for t in [0u64, 59, 86_399, 951_782_400, 4_102_444_800, 1_700_000_000] {
            out.clear();
            write_http_date(&mut out, t);
            assert_eq!(
                parse_http_date(&out),
                Some(t),
                "{}",
                String::from_utf8_lossy(&out)
            );
        }
    }

    /// A generated request: method, path bytes, header fields, body, and the size of its
    /// chunks (`None`: sent with Content-Length).
    type ArbRequest = (
        String,
        Vec<u8>,
        Vec<(String, String)>,
        Vec<u8>,
        Option<usize>,
    );

    fn arb_request() -> impl Strategy<Value = ArbRequest> {
        (
            prop::sample::select(vec!["GET", "PUT", "POST", "DELETE", "HEAD", "OPTIONS"]),
            prop::collection::vec(any::<u8>(), 0..40),
            prop::collection::vec(("[A-Za-z][A-Za-z0-9-]{0,10}", "[ -~]{0,20}"), 0..8),
            prop::collection::vec(any::<u8>(), 0..300),
            prop::option::of(1usize..50),
        )
            .prop_map(|(m, p, h, b, c)| (m.to_string(), p, h, b, c))
    }

    proptest! {
        /// Arbitrary bytes never panic; a Complete consumes at least one byte and at most
        /// what it was given; errors say to close and consume at least one byte.
        #[test]
        fn never_panics(buf in prop::collection::vec(any::<u8>(), 0..400)) {
            match decode(&buf, &lim()) {
                Ok(Decoded::Complete { consumed, request }) => {
                    prop_assert!(consumed >= 1 && consumed <= buf.len());
                    for (n, _) in request.headers.iter() { prop_assert!(!n.is_empty()); }
                }
                Ok(_) => {}
                Err(e) => prop_assert!(e.consumed >= 1 && e.close),
            }
        }

        /// Bytes that look like HTTP never panic either.
        #[test]
        fn near_http_never_panics(
            head in "(GET|PUT|POST) /[a-z%0-9]{0,6} HTTP/1\\.[01]\r\n([A-Za-z-]{1,12}: [ -~]{0,12}\r\n){0,4}\r\n",
            tail in prop::collection::vec(any::<u8>(), 0..60),
        ) {
            let mut buf = head.into_bytes();
            buf.extend_from_slice(&tail);
            let _ = decode(&buf, &lim());
        }

        /// encode → decode gives back the request, whole and cut at any point.
        #[test]
        fn round_trip((method, path, hdrs, body, chunk) in arb_request(), cut in 0usize..1000) {
            let mut target = String::from("/");
            let mut enc = Vec::new();
            percent_encode(&mut enc, &path, b"-_.~", true);
            target.push_str(std::str::from_utf8(&enc).unwrap());
            target.push_str("?a=1");
            let mut buf = Vec::new();
            let header_refs: Vec<(&str, &[u8])> =
                hdrs.iter().map(|(n, v)| (n.as_str(), v.as_bytes())).collect();
            let framing: Vec<(&str, &[u8])> = header_refs
                .iter()
                .copied()
                .filter(|(n, _)| {
                    !["content-length", "transfer-encoding", "connection", "expect"]
                        .iter()
                        .any(|x| n.eq_ignore_ascii_case(x))
                })
                .collect();
            match chunk {
                None => write_request(&mut buf, &method, &target, &framing, &body),
                Some(size) => {
                    let mut h = framing.clone();
                    h.push(("Transfer-Encoding", b"chunked"));
                    write_request(&mut buf, &method, &target, &h, &[]);
                    for piece in body.chunks(size) {
                        buf.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                        buf.extend_from_slice(piece);
                        buf.extend_from_slice(b"\r\n");
                    }
                    buf.extend_from_slice(b"0\r\n\r\n");
                }
            }
            buf.extend_from_slice(b"GET /next HTTP/1.1\r\n\r\n");
            let (r, n) = match decode(&buf, &lim()) {
                Ok(Decoded::Complete { request, consumed }) => (request, consumed),
                other => return Err(TestCaseError::fail(format!("{other:?}"))),
            };
            prop_assert_eq!(r.method.as_str(), method.as_str());
            prop_assert_eq!(percent_decode(&r.path().as_bytes()[1..]).unwrap().into_owned(), path.clone());
            prop_assert_eq!(r.query(), Some("a=1"));
            prop_assert_eq!(r.body.as_ref(), &body[..]);
            prop_assert!(r.keep_alive);
            // The lazily split fields are the ones httparse saw, values trimmed alike.
            let want: Vec<(String, Vec<u8>)> = framing
                .iter()
                .map(|(n, v)| (n.to_string(), trim_ows(v).to_vec()))
                .collect();
            let got: Vec<(String, Vec<u8>)> = r
                .headers
                .iter()
                .filter(|(n, _)| {
                    !n.eq_ignore_ascii_case("content-length") && !n.eq_ignore_ascii_case("transfer-encoding")
                })
                .map(|(n, v)| (n.to_string(), v.to_vec()))
                .collect();
            prop_assert_eq!(got, want);
            prop_assert_eq!(&buf[n..], &b"GET /next HTTP/1.1\r\n\r\n"[..]);
            // Any proper prefix is incomplete.
            let cut = cut % n;
            prop_assert_eq!(decode(&buf[..cut], &lim()), Ok(Decoded::Incomplete));
        }

        /// Percent-encoding round-trips any bytes, with either case of hex digits.
        #[test]
        fn percent_round_trip(data in prop::collection::vec(any::<u8>(), 0..100), upper: bool) {
            let mut enc = Vec::new();
            percent_encode(&mut enc, &data, b"-_.~", upper);
            prop_assert_eq!(percent_decode(&enc).unwrap().into_owned(), data.clone());
            prop_assert_eq!(form_decode(&enc).unwrap().into_owned(), data.clone());
        }
    }
}
