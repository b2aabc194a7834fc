//! The memcached text protocol (classic commands): bytes in, requests out; replies to bytes.
//!
//! `decode` never allocates for a request: keys and data blocks borrow from the input buffer.
//! Every error says how many bytes to skip to stay in sync with the client and whether the
//! connection must be closed (memcached closes it only when a line is too long to be a command).
//!
//! The meta commands (mg, ms, md, ma, mn, me) are decoded into their key, data block and flag
//! tokens; the executor interprets the flags (including `b`: the key token is then base64,
//! passed through untouched here and decoded by the executor).

use crate::push_decimal;
use std::fmt;

/// Limits checked before anything is allocated or a data block is awaited.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Longest command line, newline included (memcached hangs up on 2 KiB without a newline).
    pub max_line: usize,
    /// Longest key (memcached: 250).
    pub max_key: usize,
    /// Largest data block of a storage command.
    pub max_value: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_line: 2048,
            max_key: 250,
            max_value: 1 << 20,
        }
    }
}

/// The five storage commands besides cas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

/// The keys of a retrieval command, as they appear in the line (split on spaces when iterated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keys<'a>(&'a [u8]);

impl<'a> Keys<'a> {
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.0.split(|&b| b == b' ').filter(|k| !k.is_empty())
    }
    pub fn len(&self) -> usize {
        self.iter().count()
    }
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }
}

/// The flag letters memcached 1.6 accepts on mg, ms, md and ma (each command ignores those it
/// has no use for); Kura also takes `b` on md and ma, as later memcached versions do.
const META_FLAGS: &[u8] = b"bcfhklqstuvCDFIJLMNOPRT";

/// memcached's check of a meta command's flags: every token starts with a known letter, and
/// none twice. The error text is memcached's: mg and ms tell the two faults apart, md and ma
/// do not.
fn check_meta_flags(flags: Keys<'_>, cmd: &[u8]) -> Result<(), &'static str> {
    let split = matches!(cmd, b"mg" | b"ms");
    let mut seen = 0u64;
    for t in flags.iter() {
        let c = t[0];
        if !META_FLAGS.contains(&c) {
            return Err(if split {
                "invalid flag"
            } else {
                "invalid or duplicate flag"
            });
        }
        let bit = 1u64 << (c - b'A');
        if seen & bit != 0 {
            return Err(if split {
                "duplicate flag"
            } else {
                "invalid or duplicate flag"
            });
        }
        seen |= bit;
    }
    Ok(())
}

/// One decoded request. Expiration times are as sent (relative up to 30 days, else absolute
/// unix time, negative = already expired): the executor turns them into absolute times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// `get` / `gets` (`cas`: return cas uniques).
    Get {
        keys: Keys<'a>,
        cas: bool,
    },
    /// `gat` / `gats`.
    Gat {
        exptime: i64,
        keys: Keys<'a>,
        cas: bool,
    },
    /// `set` / `add` / `replace` / `append` / `prepend` / `cas`.
    Store {
        mode: StoreMode,
        key: &'a [u8],
        flags: u32,
        exptime: i64,
        data: &'a [u8],
        /// The cas unique (`cas` only; 0 otherwise).
        cas: u64,
        noreply: bool,
    },
    Delete {
        key: &'a [u8],
        noreply: bool,
    },
    /// `incr` / `decr`.
    Arith {
        key: &'a [u8],
        delta: u64,
        decr: bool,
        noreply: bool,
    },
    Touch {
        key: &'a [u8],
        exptime: i64,
        noreply: bool,
    },
    FlushAll {
        delay: i64,
        noreply: bool,
    },
    /// `stats [group]`.
    Stats {
        group: Option<&'a [u8]>,
    },
    Version,
    Verbosity {
        level: u32,
        noreply: bool,
    },
    Quit,
    /// `mg <key> <flags>*`
    MetaGet {
        key: &'a [u8],
        flags: Keys<'a>,
    },
    /// `ms <key> <datalen> <flags>*` and its data block.
    MetaSet {
        key: &'a [u8],
        data: &'a [u8],
        flags: Keys<'a>,
    },
    /// `md <key> <flags>*`
    MetaDelete {
        key: &'a [u8],
        flags: Keys<'a>,
    },
    /// `ma <key> <flags>*`
    MetaArith {
        key: &'a [u8],
        flags: Keys<'a>,
    },
    /// `mn`
    MetaNoop,
    /// `me <key>`
    MetaDebug {
        key: &'a [u8],
    },
}

pub use crate::Decoded;

/// What went wrong with the input, and how to carry on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    pub kind: ErrorKind,
    /// Bytes to discard: the bad line, and the data block of a storage command whose length
    /// was readable. It may exceed the bytes received so far: the caller discards what it has
    /// and keeps discarding the rest as it arrives.
    pub consumed: usize,
    /// Whether the connection must be closed after the reply.
    pub close: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Unknown command: `ERROR`.
    UnknownCommand,
    /// Malformed line: `CLIENT_ERROR <msg>`.
    Client(&'static str),
    /// Data block larger than the limit: `SERVER_ERROR object too large for cache` (the block
    /// is skipped so the connection stays in sync).
    TooLarge,
    /// The data block is not followed by `\r\n`: `CLIENT_ERROR bad data chunk`.
    BadDataChunk,
    /// No newline within the line limit: `CLIENT_ERROR line too long`, then close.
    LineTooLong,
}

impl DecodeError {
    fn new(kind: ErrorKind, consumed: usize) -> DecodeError {
        let close = kind == ErrorKind::LineTooLong;
        DecodeError {
            kind,
            consumed,
            close,
        }
    }

    /// The reply line for this error.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match &self.kind {
            ErrorKind::UnknownCommand => out.extend_from_slice(b"ERROR\r\n"),
            ErrorKind::Client(m) => {
                out.extend_from_slice(b"CLIENT_ERROR ");
                out.extend_from_slice(m.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            ErrorKind::TooLarge => {
                out.extend_from_slice(b"SERVER_ERROR object too large for cache\r\n")
            }
            ErrorKind::BadDataChunk => out.extend_from_slice(b"CLIENT_ERROR bad data chunk\r\n"),
            ErrorKind::LineTooLong => out.extend_from_slice(b"CLIENT_ERROR line too long\r\n"),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut v = Vec::new();
        self.encode(&mut v);
        f.write_str(String::from_utf8_lossy(&v).trim_end())
    }
}

impl std::error::Error for DecodeError {}

/// Whether a key is acceptable: 1..=max_key bytes, no control characters or spaces.
pub fn valid_key(key: &[u8], limits: &Limits) -> bool {
    !key.is_empty() && key.len() <= limits.max_key && key.iter().all(|&b| b > b' ' && b != 0x7f)
}

fn parse_u64(t: &[u8]) -> Option<u64> {
    if t.is_empty() || t.len() > 20 || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(t).ok()?.parse().ok()
}

fn parse_i64(t: &[u8]) -> Option<i64> {
    match t.split_first() {
        Some((b'-', rest)) => parse_u64(rest)
            .and_then(|v| i64::try_from(v).ok())
            .map(|v| -v),
        _ => parse_u64(t).and_then(|v| i64::try_from(v).ok()),
    }
}

/// The data block of a storage command whose line (of `line_len` bytes) announced `bytes`:
/// `Ok(None)` until it has arrived, then the block and the bytes used by line and block. A bad
/// key or a block over the limit is refused and the whole block skipped (memcached does the
/// same, so the block is not taken for commands); a block not followed by `\r\n` is a bad
/// data chunk (memcached answers and goes on reading after the announced bytes).
/// Arguments kept by `Args`: more than any command but `get` takes (which reads its keys
/// from the line itself).
const MAX_ARGS: usize = 8;

/// The arguments of a command line, on the stack: decoding a request allocates nothing. A
/// line with more than `MAX_ARGS` arguments keeps the first `MAX_ARGS`, which is already
/// too many for every command that uses `Args`, so it is refused just the same.
struct Args<'a> {
    v: [&'a [u8]; MAX_ARGS],
    n: usize,
}

impl<'a> Args<'a> {
    fn collect(toks: impl Iterator<Item = &'a [u8]>) -> Args<'a> {
        let mut a = Args {
            v: [&[]; MAX_ARGS],
            n: 0,
        };
        for t in toks.take(MAX_ARGS) {
            a.v[a.n] = t;
            a.n += 1;
        }
        a
    }
}

impl<'a> std::ops::Deref for Args<'a> {
    type Target = [&'a [u8]];
    fn deref(&self) -> &[&'a [u8]] {
        &self.v[..self.n]
    }
}

/// The largest data length a command line may announce (memcached's `INT_MAX - 2`); a larger
/// one is an error of the line itself, and no block is skipped.
const MAX_LENGTH_FIELD: i64 = i32::MAX as i64 - 2;

fn data_block<'a>(
    buf: &'a [u8],
    line_len: usize,
    key: &[u8],
    bytes: u64,
    limits: &Limits,
) -> Result<Option<(&'a [u8], usize)>, DecodeError> {
    let skip = usize::try_from((line_len as u64).saturating_add(bytes).saturating_add(2))
        .unwrap_or(usize::MAX);
    if !valid_key(key, limits) {
        return Err(DecodeError::new(
            ErrorKind::Client("bad command line format"),
            skip,
        ));
    }
    if bytes > limits.max_value as u64 {
        return Err(DecodeError::new(ErrorKind::TooLarge, skip));
    }
    let bytes = bytes as usize;
    if buf.len() < skip {
        return Ok(None);
    }
    if &buf[line_len + bytes..skip] != b"\r\n" {
        return Err(DecodeError::new(ErrorKind::BadDataChunk, line_len + bytes));
    }
    Ok(Some((&buf[line_len..line_len + bytes], skip)))
}

/// Decode one request from the start of `buf`.
pub fn decode<'a>(buf: &'a [u8], limits: &Limits) -> Result<Decoded<Request<'a>>, DecodeError> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() >= limits.max_line {
            return Err(DecodeError::new(ErrorKind::LineTooLong, buf.len()));
        }
        return Ok(Decoded::Incomplete);
    };
    let line_len = nl + 1;
    if line_len > limits.max_line {
        return Err(DecodeError::new(ErrorKind::LineTooLong, line_len));
    }
    let line = &buf[..nl];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut toks = line.split(|&b| b == b' ').filter(|t| !t.is_empty());
    let Some(cmd) = toks.next() else {
        return Err(DecodeError::new(ErrorKind::UnknownCommand, line_len));
    };
    let rest_of = |cmd: &[u8]| -> &'a [u8] {
        // Everything after the command word (for key lists).
        let start = cmd.as_ptr() as usize - line.as_ptr() as usize + cmd.len();
        &line[start..]
    };
    let client = |m: &'static str| Err(DecodeError::new(ErrorKind::Client(m), line_len));
    let done = |request: Request<'a>| {
        Ok(Decoded::Complete {
            request,
            consumed: line_len,
        })
    };
    let args: Args<'a>;
    match cmd {
        b"get" | b"gets" => {
            let keys = Keys(rest_of(cmd));
            if keys.is_empty() {
                return Err(DecodeError::new(ErrorKind::UnknownCommand, line_len));
            }
            if keys.iter().any(|k| !valid_key(k, limits)) {
                return client("bad command line format");
            }
            done(Request::Get {
                keys,
                cas: cmd == b"gets",
            })
        }
        b"gat" | b"gats" => {
            let Some(exp) = toks.next() else {
                return Err(DecodeError::new(ErrorKind::UnknownCommand, line_len));
            };
            let Some(exptime) = parse_i64(exp) else {
                return client("invalid exptime argument");
            };
            let start = exp.as_ptr() as usize - line.as_ptr() as usize + exp.len();
            let keys = Keys(&line[start..]);
            if keys.is_empty() {
                return Err(DecodeError::new(ErrorKind::UnknownCommand, line_len));
            }
            if keys.iter().any(|k| !valid_key(k, limits)) {
                return client("bad command line format");
            }
            done(Request::Gat {
                exptime,
                keys,
                cas: cmd == b"gats",
            })
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            let mode = match cmd {
                b"set" => StoreMode::Set,
                b"add" => StoreMode::Add,
                b"replace" => StoreMode::Replace,
                b"append" => StoreMode::Append,
                b"prepend" => StoreMode::Prepend,
                _ => StoreMode::Cas,
            };
            args = Args::collect(toks);
            let need = if mode == StoreMode::Cas { 5 } else { 4 };
            if args.len() < need || args.len() > need + 1 {
                return Err(DecodeError::new(ErrorKind::UnknownCommand, line_len));
            }
            let noreply = match args.get(need) {
                None => false,
                Some(t) if *t == b"noreply" => true,
                Some(_) => return client("bad command line format"),
            };
            let key = args[0];
            let (Some(flags), Some(exptime), Some(bytes)) = (
                parse_u64(args[1]).and_then(|f| u32::try_from(f).ok()),
                parse_i64(args[2]),
                parse_i64(args[3]),
            ) else {
                return client("bad command line format");
            };
            let cas = if mode == StoreMode::Cas {
                match parse_u64(args[4]) {
                    Some(c) => c,
                    None => return client("bad command line format"),
                }
            } else {
                0
            };
            // As memcached: a length outside 0..=INT_MAX-2 is a malformed line (nothing is
            // skipped), not a block too large to store.
            if !(0..=MAX_LENGTH_FIELD).contains(&bytes) {
                return client("bad command line format");
            }
            let Some((data, consumed)) = data_block(buf, line_len, key, bytes as u64, limits)?
            else {
                return Ok(Decoded::Incomplete);
            };
            Ok(Decoded::Complete {
                request: Request::Store {
                    mode,
                    key,
                    flags,
                    exptime,
                    data,
                    cas,
                    noreply,
                },
                consumed,
            })
        }
        b"delete" => {
            args = Args::collect(toks);
            // `delete <key> [0] [noreply]` (a legacy time argument of 0 is accepted)
            let (key, rest) = match args.split_first() {
                Some((k, r)) => (*k, r),
                None => return Err(DecodeError::new(ErrorKind::UnknownCommand, line_len)),
            };
            let noreply = rest.last().is_some_and(|t| *t == b"noreply");
            let extra = rest.len() - usize::from(noreply);
            if extra > 1 || (extra == 1 && rest[0] != b"0") {
                return client("bad command line format.  Usage: delete <key> [noreply]");
            }
            if !valid_key(key, limits) {
                return client("bad command line format");
            }
            done(Request::Delete { key, noreply })
        }
        b"incr" | b"decr" | b"touch" => {
            // `<cmd> <key> <number> [noreply]`
            args = Args::collect(toks);
            if args.len() < 2 || args.len() > 3 {
                return Err(DecodeError::new(ErrorKind::UnknownCommand, line_len));
            }
            let noreply = args.get(2).is_some_and(|t| *t == b"noreply");
            if args.len() == 3 && !noreply || !valid_key(args[0], limits) {
                return client("bad command line format");
            }
            let key = args[0];
            if cmd == b"touch" {
                let Some(exptime) = parse_i64(args[1]) else {
                    return client("invalid exptime argument");
                };
                return done(Request::Touch {
                    key,
                    exptime,
                    noreply,
                });
            }
            let Some(delta) = parse_u64(args[1]) else {
                return client("invalid numeric delta argument");
            };
            done(Request::Arith {
                key,
                delta,
                decr: cmd == b"decr",
                noreply,
            })
        }
        b"flush_all" => {
            args = Args::collect(toks);
            let noreply = args.last().is_some_and(|t| *t == b"noreply");
            let rest = &args[..args.len() - usize::from(noreply)];
            let delay = match rest {
                [] => 0,
                [d] => match parse_i64(d) {
                    Some(d) => d,
                    None => return client("bad command line format"),
                },
                _ => return client("bad command line format"),
            };
            done(Request::FlushAll { delay, noreply })
        }
        b"stats" => {
            let group = toks.next();
            done(Request::Stats { group })
        }
        b"mg" | b"md" | b"ma" | b"me" => {
            let Some(key) = toks.next() else {
                return client("bad command line format");
            };
            if !valid_key(key, limits) {
                return client("bad command line format");
            }
            let start = key.as_ptr() as usize - line.as_ptr() as usize + key.len();
            let flags = Keys(&line[start..]);
            if cmd != b"me" {
                if let Err(m) = check_meta_flags(flags, cmd) {
                    return client(m);
                }
            }
            done(match cmd {
                b"mg" => Request::MetaGet { key, flags },
                b"md" => Request::MetaDelete { key, flags },
                b"ma" => Request::MetaArith { key, flags },
                _ => Request::MetaDebug { key },
            })
        }
        b"mn" => done(Request::MetaNoop),
        b"ms" => {
            let (Some(key), Some(len)) = (toks.next(), toks.next()) else {
                return client("bad command line format");
            };
            let Some(bytes) = parse_u64(len).filter(|&b| b <= MAX_LENGTH_FIELD as u64) else {
                return client("bad data chunk");
            };
            let start = len.as_ptr() as usize - line.as_ptr() as usize + len.len();
            let flags = Keys(&line[start..]);
            let Some((data, consumed)) = data_block(buf, line_len, key, bytes, limits)? else {
                return Ok(Decoded::Incomplete);
            };
            if let Err(m) = check_meta_flags(flags, cmd) {
                // The data block goes with the refused line, as in memcached.
                return Err(DecodeError::new(ErrorKind::Client(m), consumed));
            }
            Ok(Decoded::Complete {
                request: Request::MetaSet { key, data, flags },
                consumed,
            })
        }
        b"version" => done(Request::Version),
        b"quit" => done(Request::Quit),
        b"verbosity" => {
            args = Args::collect(toks);
            let noreply = args.last().is_some_and(|t| *t == b"noreply");
            let rest = &args[..args.len() - usize::from(noreply)];
            match rest {
                [l] => match parse_u64(l).and_then(|l| u32::try_from(l).ok()) {
                    Some(level) => done(Request::Verbosity { level, noreply }),
                    None => client("bad command line format"),
                },
                // `verbosity noreply`: memcached accepts it silently.
                [] if noreply => done(Request::Verbosity { level: 0, noreply }),
                _ => Err(DecodeError::new(ErrorKind::UnknownCommand, line_len)),
            }
        }
        _ => Err(DecodeError::new(ErrorKind::UnknownCommand, line_len)),
    }
}

// ----- replies -----

/// Append `VALUE <key> <flags> <bytes> [<cas>]\r\n` — the value itself and its `\r\n` follow
/// (written by the caller, so a stored value can be sent without a copy).
pub fn encode_value_header(
    out: &mut Vec<u8>,
    key: &[u8],
    flags: u32,
    len: usize,
    cas: Option<u64>,
) {
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.push(b' ');
    push_decimal(out, u64::from(flags));
    out.push(b' ');
    push_decimal(out, len as u64);
    if let Some(c) = cas {
        out.push(b' ');
        push_decimal(out, c);
    }
    out.extend_from_slice(b"\r\n");
}

/// Append a whole `VALUE` item: header, data, `\r\n`.
pub fn encode_value(out: &mut Vec<u8>, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    encode_value_header(out, key, flags, data.len(), cas);
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Append a decimal number and `\r\n` (the reply to incr / decr).
pub fn encode_number(out: &mut Vec<u8>, n: u64) {
    push_decimal(out, n);
    out.extend_from_slice(b"\r\n");
}

/// Append `STAT <name> <value>\r\n`.
pub fn encode_stat(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(b"STAT ");
    out.extend_from_slice(name.as_bytes());
    out.push(b' ');
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Fixed reply lines.
pub mod reply {
    pub const STORED: &[u8] = b"STORED\r\n";
    pub const NOT_STORED: &[u8] = b"NOT_STORED\r\n";
    pub const EXISTS: &[u8] = b"EXISTS\r\n";
    pub const NOT_FOUND: &[u8] = b"NOT_FOUND\r\n";
    pub const DELETED: &[u8] = b"DELETED\r\n";
    pub const TOUCHED: &[u8] = b"TOUCHED\r\n";
    pub const END: &[u8] = b"END\r\n";
    pub const OK: &[u8] = b"OK\r\n";
    pub const NON_NUMERIC: &[u8] =
        b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";
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
            other => panic!("{:?} for {:?}", other, String::from_utf8_lossy(buf)),
        }
    }

    fn err(buf: &[u8]) -> DecodeError {
        match decode(buf, &lim()) {
            Err(e) => e,
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn storage_commands() {
        let (r, n) = one(b"set k 5 100 3\r\nabc\r\nget k\r\n");
        assert_eq!(n, 20);
        assert_eq!(
            r,
            Request::Store {
                mode: StoreMode::Set,
                key: b"k",
                flags: 5,
                exptime: 100,
                data: b"abc",
                cas: 0,
                noreply: false
            }
        );
        let (r, _) = one(b"cas k 0 -1 2 77 noreply\r\nxy\r\n");
        assert!(matches!(
            r,
            Request::Store {
                mode: StoreMode::Cas,
                cas: 77,
                exptime: -1,
                noreply: true,
                ..
            }
        ));
        // Binary-safe data, bare \n line ending.
        let (r, n) = one(b"append k 0 0 4\n\r\n\0x\r\n");
        assert_eq!(n, 21);
        assert!(matches!(
            r,
            Request::Store {
                data: b"\r\n\0x",
                ..
            }
        ));
        assert_eq!(
            decode(b"set k 0 0 3\r\nab", &lim()),
            Ok(Decoded::Incomplete)
        );
    }

    #[test]
    fn retrieval_and_others() {
        let (r, _) = one(b"gets a bb ccc\r\n");
        match r {
            Request::Get { keys, cas } => {
                assert!(cas);
                assert_eq!(
                    keys.iter().collect::<Vec<_>>(),
                    vec![&b"a"[..], b"bb", b"ccc"]
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            one(b"gat 10 a b\r\n").0,
            Request::Gat { exptime: 10, .. }
        ));
        assert!(matches!(
            one(b"delete k noreply\r\n").0,
            Request::Delete { noreply: true, .. }
        ));
        assert!(matches!(
            one(b"delete k 0\r\n").0,
            Request::Delete { noreply: false, .. }
        ));
        assert!(matches!(
            one(b"incr k 18446744073709551615\r\n").0,
            Request::Arith {
                delta: u64::MAX,
                decr: false,
                ..
            }
        ));
        assert!(matches!(
            one(b"decr k 1 noreply\r\n").0,
            Request::Arith {
                decr: true,
                noreply: true,
                ..
            }
        ));
        assert!(matches!(
            one(b"touch k -5\r\n").0,
            Request::Touch { exptime: -5, .. }
        ));
        assert!(matches!(
            one(b"flush_all 10 noreply\r\n").0,
            Request::FlushAll {
                delay: 10,
                noreply: true
            }
        ));
        assert!(matches!(
            one(b"flush_all\r\n").0,
            Request::FlushAll {
                delay: 0,
                noreply: false
            }
        ));
        assert!(matches!(
            one(b"stats items\r\n").0,
            Request::Stats {
                group: Some(b"items")
            }
        ));
        assert_eq!(one(b"version\r\n").0, Request::Version);
        assert_eq!(one(b"quit\r\n").0, Request::Quit);
        assert!(matches!(
            one(b"verbosity 1\r\n").0,
            Request::Verbosity {
                level: 1,
                noreply: false
            }
        ));
    }

    #[test]
    fn errors_keep_the_stream_in_sync() {
        assert_eq!(err(b"bogus\r\n").kind, ErrorKind::UnknownCommand);
        assert_eq!(err(b"\r\n").kind, ErrorKind::UnknownCommand);
        assert_eq!(
            err(b"GET k\r\n").kind,
            ErrorKind::UnknownCommand,
            "commands are lower-case"
        );
        assert_eq!(err(b"get\r\n").kind, ErrorKind::UnknownCommand);
        let long_key = [b'k'; 251];
        let mut line = b"get ".to_vec();
        line.extend_from_slice(&long_key);
        line.extend_from_slice(b"\r\n");
        assert!(matches!(err(&line).kind, ErrorKind::Client(_)));
        assert!(matches!(err(b"get a\x01b\r\n").kind, ErrorKind::Client(_)));
        assert!(matches!(err(b"incr k x\r\n").kind, ErrorKind::Client(_)));
        assert!(matches!(
            err(b"set k x 0 1\r\na\r\n").kind,
            ErrorKind::Client(_)
        ));
        // Too large: the whole block is skipped, even before it arrived.
        let e = err(b"set k 0 0 2000000\r\n");
        assert_eq!(
            (e.kind.clone(), e.consumed, e.close),
            (ErrorKind::TooLarge, 19 + 2_000_002, false)
        );
        // A length field memcached cannot hold (above INT_MAX - 2, or negative): an error of
        // the line alone, nothing skipped, as memcached does.
        for line in [
            &b"set k 0 0 4294967296\r\n"[..],
            b"set k 0 0 2147483646\r\n",
            b"cas k 0 0 -1 5\r\n",
        ] {
            let e = err(line);
            assert_eq!(
                (e.kind, e.consumed),
                (ErrorKind::Client("bad command line format"), line.len())
            );
        }
        let e = err(b"ms k 4294967296\r\n");
        assert_eq!(
            (e.kind, e.consumed),
            (ErrorKind::Client("bad data chunk"), 17)
        );
        assert_eq!(err(b"set k 0 0 2147483645\r\n").kind, ErrorKind::TooLarge);
        // Bad data chunk: the line and the announced bytes are consumed.
        let e = err(b"set k 0 0 1\r\nabc\r\n");
        assert_eq!((e.kind, e.consumed), (ErrorKind::BadDataChunk, 14));
        // A line that never ends: close.
        let e = decode(&[b'a'; 4096], &lim()).unwrap_err();
        assert!(e.close);
        assert_eq!(decode(&[b'a'; 100], &lim()), Ok(Decoded::Incomplete));
        let mut out = Vec::new();
        err(b"set k 0 0 2000000\r\n").encode(&mut out);
        assert_eq!(out, b"SERVER_ERROR object too large for cache\r\n");
    }

    #[test]
    fn pipelined_and_split_at_every_offset() {
        let stream: &[u8] =
            b"set a 1 0 3\r\nxyz\r\nget a b\r\nincr n 5\r\ndelete a noreply\r\nversion\r\n";
        let mut whole = Vec::new();
        let mut pos = 0;
        while pos < stream.len() {
            let (r, n) = one(&stream[pos..]);
            whole.push(format!("{r:?}"));
            pos += n;
        }
        assert_eq!(whole.len(), 5);
        // Every prefix decodes to Incomplete or to the first request, never to something else.
        for cut in 0..stream.len() {
            match decode(&stream[..cut], &lim()) {
                Ok(Decoded::Incomplete) => {}
                Ok(Decoded::Complete { request, .. }) => {
                    assert_eq!(format!("{request:?}"), whole[0])
                }
                Err(e) => panic!("cut {cut}: {e}"),
            }
        }
    }

    #[test]
    fn meta_commands() {
        match one(b"mg key v c f O123 q\r\n").0 {
            Request::MetaGet { key, flags } => {
                assert_eq!(key, b"key");
                assert_eq!(
                    flags.iter().collect::<Vec<_>>(),
                    vec![&b"v"[..], b"c", b"f", b"O123", b"q"]
                );
            }
            other => panic!("{other:?}"),
        }
        let (r, n) = one(b"ms k 3 T60 F5 MA\r\nabc\r\nmn\r\n");
        assert_eq!(n, 23);
        assert!(matches!(r, Request::MetaSet { data: b"abc", .. }));
        assert_eq!(one(b"mn\r\n").0, Request::MetaNoop);
        assert!(matches!(one(b"md k q\r\n").0, Request::MetaDelete { .. }));
        assert!(matches!(
            one(b"ma k D5 MD v\r\n").0,
            Request::MetaArith { .. }
        ));
        assert!(matches!(
            one(b"me k\r\n").0,
            Request::MetaDebug { key: b"k" }
        ));
        // A base64 key (`b` flag) is an ordinary key token to the codec: `+`, `/`, `=` included.
        match one(b"mg a+b/Yw== b k v N30 R10\r\n").0 {
            Request::MetaGet { key, flags } => {
                assert_eq!(key, b"a+b/Yw==");
                assert_eq!(
                    flags.iter().collect::<Vec<_>>(),
                    vec![&b"b"[..], b"k", b"v", b"N30", b"R10"]
                );
            }
            other => panic!("{other:?}"),
        }
        match one(b"ms 44OG44K544OI 2 b I C5\r\npo\r\n").0 {
            Request::MetaSet { key, data, flags } => {
                assert_eq!((key, data), (&b"44OG44K544OI"[..], &b"po"[..]));
                assert_eq!(
                    flags.iter().collect::<Vec<_>>(),
                    vec![&b"b"[..], b"I", b"C5"]
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(err(b"mg\r\n").kind, ErrorKind::Client(_)));
        assert_eq!(err(b"ms k 2000000\r\n").kind, ErrorKind::TooLarge);
        assert_eq!(decode(b"ms k 3\r\nab", &lim()), Ok(Decoded::Incomplete));
    }

    #[test]
    fn meta_flags_are_checked_as_memcached_checks_them() {
        let client = |m: &'static str| ErrorKind::Client(m);
        assert_eq!(err(b"mg k v Y\r\n").kind, client("invalid flag"));
        assert_eq!(err(b"mg k v v\r\n").kind, client("duplicate flag"));
        assert_eq!(err(b"mg k T1 T2\r\n").kind, client("duplicate flag"));
        assert_eq!(
            err(b"md k E1\r\n").kind,
            client("invalid or duplicate flag")
        );
        assert_eq!(
            err(b"ma k q q\r\n").kind,
            client("invalid or duplicate flag")
        );
        assert_eq!(err(b"mg k 1\r\n").kind, client("invalid flag"));
        // A refused ms takes its data block with it: the next command is read in sync.
        let e = err(b"ms k 2 Z\r\nhi\r\nmn\r\n");
        assert_eq!(
            (e.kind, e.consumed, e.close),
            (client("invalid flag"), 14, false)
        );
        // Every letter memcached accepts, once each, on each command.
        for cmd in ["mg k", "md k", "ma k"] {
            let line = format!("{cmd} b c f h k l q s t u v C1 D1 F1 I J1 L M1 N1 O1 P R1 T1\r\n");
            assert!(decode(line.as_bytes(), &lim()).is_ok(), "{line}");
        }
        // me takes no flags to check.
        assert!(matches!(one(b"me k zz\r\n").0, Request::MetaDebug { .. }));
    }

    #[test]
    fn replies() {
        let mut out = Vec::new();
        encode_value(&mut out, b"k", 7, b"abc", Some(42));
        encode_number(&mut out, 18446744073709551615);
        encode_stat(&mut out, "pid", "12");
        out.extend_from_slice(reply::END);
        assert_eq!(
            out,
            b"VALUE k 7 3 42\r\nabc\r\n18446744073709551615\r\nSTAT pid 12\r\nEND\r\n"
        );
    }

    proptest! {
        /// Decoding never panics; a Complete consumes at least one byte and no more than it was
        /// given; an error consumes at least one byte.
        #[test]
        fn never_panics(buf in proptest::collection::vec(any::<u8>(), 0..300)) {
            match decode(&buf, &lim()) {
                Ok(Decoded::Complete { consumed, .. }) => prop_assert!(consumed >= 1 && consumed <= buf.len()),
                Ok(Decoded::Incomplete) => {}
                Err(e) => prop_assert!(e.consumed >= 1),
            }
        }

        /// Storage commands round-trip any data block.
        #[test]
        fn store_round_trip(data in proptest::collection::vec(any::<u8>(), 0..200), flags: u32) {
            let mut buf = format!("set key {flags} 0 {}\r\n", data.len()).into_bytes();
            buf.extend_from_slice(&data);
            buf.extend_from_slice(b"\r\n");
            let (r, n) = one(&buf);
            prop_assert_eq!(n, buf.len());
            match r {
                Request::Store { data: d, flags: f, .. } => { prop_assert_eq!(d, &data[..]); prop_assert_eq!(f, flags); }
                other => prop_assert!(false, "{:?}", other),
            }
        }
    }
}
