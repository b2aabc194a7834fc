//! The memcached text protocol (classic and meta commands): bytes in, requests out; replies to
//! bytes.
//!
//! `decode` never allocates for a request: keys and data blocks borrow from the input buffer.
//! Every error says how many bytes to skip to stay in sync with the client, whether memcached
//! stays silent about it (`noreply`) and whether the connection must be closed.
//!
//! The rules are memcached 1.6.18's, checked against it by the differential test
//! (crates/kura/tests/mc_differential.rs): a key is any run of bytes but space and newline, at
//! most 250 of them; numbers are read as C's `strtoul` / `strtol` read them, truncated to the
//! width memcached stores; `noreply` silences errors as well as replies; a line of more than
//! 2 KiB is served only when it is a retrieval command (`get`, `gets`, `gat`, `gats`), whose
//! keys are then taken in pieces as they arrive ([`decode_continued`]), and hung up on
//! otherwise.
//!
//! The meta commands (mg, ms, md, ma, mn, me) are decoded into their key, data block and flag
//! tokens; the executor interprets the flags (including `b`: the key token is then base64,
//! passed through untouched here and decoded by the executor).

pub use crate::mc_num::{c_strtod, c_strtol32, c_strtoul32, c_strtoull};
use crate::push_decimal;
use std::fmt;

/// Limits checked before anything is allocated or a data block is awaited.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Longest command line, newline included, when it is not a retrieval command
    /// (memcached hangs up on 2 KiB without a newline). Retrieval lines are taken in pieces
    /// of this size.
    pub max_line: usize,
    /// Longest key (memcached: 250).
    pub max_key: usize,
    /// Largest item, counted as memcached counts it ([`item_size`]): memcached's `-I`.
    pub max_item: usize,
    /// Largest value, whatever the item size (the server's limit on every protocol).
    pub max_value: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_line: 2048,
            max_key: 250,
            max_item: 1 << 20,
            max_value: usize::MAX,
        }
    }
}

/// The bytes an item takes in memcached, which its item size limit counts: the item header
/// (48 bytes on a 64-bit build), the key and a NUL, 4 bytes of client flags unless they are 0,
/// the value and its `\r\n`, and the 8-byte cas. With the default 1 MiB limit a 1-byte key
/// with flags 0 holds at most 1,048,516 bytes of value (measured against memcached 1.6.18).
pub fn item_size(key_len: usize, flags: u32, value_len: usize) -> u64 {
    const HEADER: u64 = 48;
    const CAS: u64 = 8;
    let flags = if flags == 0 { 0 } else { 4 };
    HEADER + key_len as u64 + 1 + flags + value_len as u64 + 2 + CAS
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

/// Space-separated tokens (the keys of a retrieval command, the flags of a meta command, the
/// arguments of `stats`), as they appear in the line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keys<'a>(&'a [u8]);

impl<'a> Keys<'a> {
    pub fn new(tokens: &'a [u8]) -> Keys<'a> {
        Keys(tokens)
    }
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.0.split(|&b| b == b' ').filter(|k| !k.is_empty())
    }
    pub fn len(&self) -> usize {
        self.iter().count()
    }
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }
    /// The `i`th token.
    pub fn get(&self, i: usize) -> Option<&'a [u8]> {
        self.iter().nth(i)
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

/// A retrieval line too long to be taken whole: what its next piece continues (see
/// [`decode_continued`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GetLine {
    /// `gets` / `gats`: return cas uniques.
    pub cas: bool,
    /// `gat` / `gats`: the expiration time to set.
    pub touch: Option<i64>,
}

/// One decoded request. Expiration times are as sent (relative up to 30 days, else absolute
/// unix time, negative = already expired): the executor turns them into absolute times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// `get` / `gets` (`cas`: return cas uniques). `more`: the line goes on (a piece of a long
    /// line): no `END` yet, and the next piece is decoded by [`decode_continued`].
    Get {
        keys: Keys<'a>,
        cas: bool,
        more: bool,
    },
    /// `gat` / `gats`.
    Gat {
        exptime: i64,
        keys: Keys<'a>,
        cas: bool,
        more: bool,
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
    /// `stats [group [args…]]`: the tokens after `stats`.
    Stats {
        args: Keys<'a>,
    },
    Version,
    Verbosity {
        level: u32,
        noreply: bool,
    },
    Quit,
    /// `lru_crawler <args…>`.
    LruCrawler {
        args: Keys<'a>,
    },
    /// `cache_memlimit <megabytes> [noreply]`.
    CacheMemlimit {
        megabytes: u32,
        noreply: bool,
    },
    /// `slabs automove <0|1|2>` or `slabs automove ratio <number>` (then any tokens).
    SlabsAutomove {
        setting: Automove<'a>,
        noreply: bool,
    },
    /// `slabs reassign <src> <dst>`.
    SlabsReassign {
        src: i32,
        dst: i32,
    },
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

/// What `slabs automove` sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Automove<'a> {
    /// The automover's level: 0, 1 or 2.
    Level(u32),
    /// `ratio <number>`: the number as sent (it reads as one: [`c_strtod`]).
    Ratio(&'a [u8]),
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
    /// Then go on discarding through the next newline, which may not have arrived yet (the
    /// rest of a long retrieval line after a bad key).
    pub discard_line: bool,
    /// Whether the connection must be closed after the reply.
    pub close: bool,
    /// The command said `noreply`: memcached sends no error either, so nothing is written.
    pub noreply: bool,
    /// A `set` / `ms` refused as too large: memcached removes the key's old value, so that no
    /// reader sees stale data. The key's place in the input.
    pub unlink: Option<Unlink>,
    /// A data block refused as too large: the value size its command announced.
    pub value_len: Option<u64>,
}

/// The key of a refused set whose old value must go (see [`DecodeError::unlink`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unlink {
    /// Where the key starts in the buffer given to the decoder, and its length.
    pub start: usize,
    pub len: usize,
    /// The key is base64 (`ms … b`).
    pub base64: bool,
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
    /// Close without a word: a line of more than 2 KiB that is not a retrieval command, or
    /// one that looks like HTTP (memcached's guard against requests a browser is made to send).
    Hangup,
}

impl DecodeError {
    fn new(kind: ErrorKind, consumed: usize) -> DecodeError {
        let close = kind == ErrorKind::Hangup;
        DecodeError {
            kind,
            consumed,
            discard_line: false,
            close,
            noreply: false,
            unlink: None,
            value_len: None,
        }
    }

    fn quiet(mut self, noreply: bool) -> DecodeError {
        self.noreply = noreply;
        self
    }

    /// The reply line for this error (nothing under `noreply`, nothing for a hang-up).
    pub fn encode(&self, out: &mut Vec<u8>) {
        if self.noreply {
            return;
        }
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
            ErrorKind::Hangup => {}
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.kind == ErrorKind::Hangup {
            return f.write_str("hang up");
        }
        let mut v = Vec::new();
        DecodeError {
            noreply: false,
            ..self.clone()
        }
        .encode(&mut v);
        f.write_str(String::from_utf8_lossy(&v).trim_end())
    }
}

impl std::error::Error for DecodeError {}

/// Whether a key is acceptable: 1..=max_key bytes (the text protocol's tokens hold no space
/// and no newline; any other byte is a key byte, as in memcached).
pub fn valid_key(key: &[u8], limits: &Limits) -> bool {
    !key.is_empty() && key.len() <= limits.max_key
}

/// The arguments of a command line, on the stack: decoding a request allocates nothing. A
/// line with more than `MAX_ARGS` arguments keeps the first `MAX_ARGS`, which is already
/// too many for every command that uses `Args`, so it is refused just the same.
const MAX_ARGS: usize = 8;

struct Args<'a> {
    v: [&'a [u8]; MAX_ARGS],
    n: usize,
    /// More tokens followed the first `MAX_ARGS`.
    more: bool,
}

impl<'a> Args<'a> {
    fn collect(mut toks: impl Iterator<Item = &'a [u8]>) -> Args<'a> {
        let mut a = Args {
            v: [&[]; MAX_ARGS],
            n: 0,
            more: false,
        };
        for t in toks.by_ref().take(MAX_ARGS) {
            a.v[a.n] = t;
            a.n += 1;
        }
        a.more = toks.next().is_some();
        a
    }

    /// The argument count, at least `MAX_ARGS + 1` when there were more.
    fn count(&self) -> usize {
        self.n + usize::from(self.more)
    }

    /// memcached's `set_noreply_maybe`: the last token is `noreply`.
    fn noreply(&self) -> bool {
        !self.more && self.n > 0 && self.v[self.n - 1] == b"noreply"
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
const MAX_LENGTH_FIELD: i32 = i32::MAX - 2;

/// Where `part` (a slice of `line`) starts in it.
fn offset(line: &[u8], part: &[u8]) -> usize {
    part.as_ptr() as usize - line.as_ptr() as usize
}

/// The data block of a storage command whose line (of `line_len` bytes) announced `bytes`:
/// `Ok(None)` until it has arrived, then the block and the bytes used by line and block. A
/// block whose item would be over the limit is refused and skipped as it arrives (memcached
/// does the same, so the block is not taken for commands); a block not followed by `\r\n`
/// is a bad data chunk, and memcached goes on reading after the announced bytes and their
/// two more.
fn data_block<'a>(
    buf: &'a [u8],
    line_len: usize,
    key: &[u8],
    flags: u32,
    bytes: usize,
    limits: &Limits,
) -> Result<Option<(&'a [u8], usize)>, DecodeError> {
    let skip = line_len + bytes + 2;
    if bytes > limits.max_value || item_size(key.len(), flags, bytes) > limits.max_item as u64 {
        let mut e = DecodeError::new(ErrorKind::TooLarge, skip);
        e.value_len = Some(bytes as u64);
        return Err(e);
    }
    if buf.len() < skip {
        return Ok(None);
    }
    if &buf[line_len + bytes..skip] != b"\r\n" {
        return Err(DecodeError::new(ErrorKind::BadDataChunk, skip));
    }
    Ok(Some((&buf[line_len..line_len + bytes], skip)))
}

/// Whether a line that is not a known command ends with a token that looks like HTTP's
/// version (`GET / HTTP/1.0`): memcached hangs up on it without a reply.
fn looks_like_http(line: &[u8]) -> bool {
    line.split(|&b| b == b' ')
        .rfind(|t| !t.is_empty())
        .is_some_and(|t| t.starts_with(b"HTTP/"))
}

/// Decode one request from the start of `buf`.
pub fn decode<'a>(buf: &'a [u8], limits: &Limits) -> Result<Decoded<Request<'a>>, DecodeError> {
    let window = &buf[..buf.len().min(limits.max_line)];
    let Some(nl) = window.iter().position(|&b| b == b'\n') else {
        if buf.len() < limits.max_line {
            return Ok(Decoded::Incomplete);
        }
        return long_line(buf, limits);
    };
    let line_len = nl + 1;
    let line = &buf[..nl];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut toks = line.split(|&b| b == b' ').filter(|t| !t.is_empty());
    let Some(cmd) = toks.next() else {
        return Err(DecodeError::new(ErrorKind::UnknownCommand, line_len));
    };
    let err = |kind: ErrorKind| Err(DecodeError::new(kind, line_len));
    let client = |m: &'static str| err(ErrorKind::Client(m));
    let done = |request: Request<'a>| {
        Ok(Decoded::Complete {
            request,
            consumed: line_len,
        })
    };
    match cmd {
        b"get" | b"gets" | b"gat" | b"gats" => {
            let touch = matches!(cmd, b"gat" | b"gats");
            let cas = matches!(cmd, b"gets" | b"gats");
            let Some(first) = toks.next() else {
                return err(ErrorKind::UnknownCommand);
            };
            let (exptime, from) = if touch {
                let Some(e) = c_strtol32(first) else {
                    return client("invalid exptime argument");
                };
                (i64::from(e), offset(line, first) + first.len())
            } else {
                (0, offset(line, first))
            };
            let keys = Keys(&line[from..]);
            // A key that is too long: the whole get is refused (no value of it is sent).
            if keys.iter().any(|k| k.len() > limits.max_key) {
                return client("bad command line format");
            }
            done(if touch {
                Request::Gat {
                    exptime,
                    keys,
                    cas,
                    more: false,
                }
            } else {
                Request::Get {
                    keys,
                    cas,
                    more: false,
                }
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
            let args = Args::collect(toks);
            let need = if mode == StoreMode::Cas { 5 } else { 4 };
            if args.count() != need && args.count() != need + 1 {
                return err(ErrorKind::UnknownCommand);
            }
            // As memcached: `noreply` (the last token) silences the errors too, and a bad
            // line skips no data block (the block is then read as commands).
            let noreply = args.noreply();
            let bad = |m| Err(DecodeError::new(ErrorKind::Client(m), line_len).quiet(noreply));
            let key = args[0];
            if key.len() > limits.max_key {
                return bad("bad command line format");
            }
            let (Some(flags), Some(exptime), Some(bytes)) = (
                c_strtoul32(args[1]),
                c_strtol32(args[2]),
                c_strtol32(args[3]),
            ) else {
                return bad("bad command line format");
            };
            let cas = if mode == StoreMode::Cas {
                match c_strtoull(args[4]) {
                    Some(c) => c,
                    None => return bad("bad command line format"),
                }
            } else {
                0
            };
            if !(0..=MAX_LENGTH_FIELD).contains(&bytes) {
                return bad("bad command line format");
            }
            let block = data_block(buf, line_len, key, flags, bytes as usize, limits);
            let (data, consumed) = match block {
                Ok(Some(b)) => b,
                Ok(None) => return Ok(Decoded::Incomplete),
                Err(mut e) => {
                    if e.kind == ErrorKind::TooLarge && mode == StoreMode::Set {
                        e.unlink = Some(Unlink {
                            start: offset(buf, key),
                            len: key.len(),
                            base64: false,
                        });
                    }
                    return Err(e.quiet(noreply));
                }
            };
            Ok(Decoded::Complete {
                request: Request::Store {
                    mode,
                    key,
                    flags,
                    exptime: i64::from(exptime),
                    data,
                    cas,
                    noreply,
                },
                consumed,
            })
        }
        b"delete" => {
            // `delete <key> [0] [noreply]` (a legacy time argument of 0 is accepted)
            let args = Args::collect(toks);
            if !(1..=3).contains(&args.count()) {
                return err(ErrorKind::UnknownCommand);
            }
            let noreply = args.noreply();
            if args.len() > 1 {
                let zero = args[1] == b"0";
                if !(args.len() == 2 && (zero || noreply) || args.len() == 3 && zero && noreply) {
                    return Err(DecodeError::new(
                        ErrorKind::Client(
                            "bad command line format.  Usage: delete <key> [noreply]",
                        ),
                        line_len,
                    )
                    .quiet(noreply));
                }
            }
            let key = args[0];
            if key.len() > limits.max_key {
                return Err(DecodeError::new(
                    ErrorKind::Client("bad command line format"),
                    line_len,
                )
                .quiet(noreply));
            }
            done(Request::Delete { key, noreply })
        }
        b"incr" | b"decr" | b"touch" => {
            // `<cmd> <key> <number> [noreply]`
            let args = Args::collect(toks);
            if args.count() != 2 && args.count() != 3 {
                return err(ErrorKind::UnknownCommand);
            }
            let noreply = args.noreply();
            let bad = |m| Err(DecodeError::new(ErrorKind::Client(m), line_len).quiet(noreply));
            let key = args[0];
            if key.len() > limits.max_key {
                return bad("bad command line format");
            }
            if cmd == b"touch" {
                let Some(exptime) = c_strtol32(args[1]) else {
                    return bad("invalid exptime argument");
                };
                return done(Request::Touch {
                    key,
                    exptime: i64::from(exptime),
                    noreply,
                });
            }
            let Some(delta) = c_strtoull(args[1]) else {
                return bad("invalid numeric delta argument");
            };
            done(Request::Arith {
                key,
                delta,
                decr: cmd == b"decr",
                noreply,
            })
        }
        b"mg" | b"md" | b"ma" | b"me" | b"ms" | b"mn" => meta(buf, line, line_len, cmd, limits),
        b"cache_memlimit" => {
            // memcached 1.6.18: `safe_strtoul` of the argument, else ERROR.
            let args = Args::collect(toks);
            if args.count() != 1 && args.count() != 2 {
                return err(ErrorKind::UnknownCommand);
            }
            let noreply = args.noreply();
            match c_strtoul32(args[0]) {
                Some(megabytes) => done(Request::CacheMemlimit { megabytes, noreply }),
                None => Err(DecodeError::new(ErrorKind::UnknownCommand, line_len).quiet(noreply)),
            }
        }
        b"slabs" => {
            let args = Args::collect(toks);
            match args.first().copied() {
                // Exactly two numbers (`safe_strtol`), and no noreply.
                Some(b"reassign") if args.count() == 3 => {
                    match (c_strtol32(args[1]), c_strtol32(args[2])) {
                        (Some(src), Some(dst)) => done(Request::SlabsReassign { src, dst }),
                        _ => client("bad command line format"),
                    }
                }
                Some(b"automove") if args.count() >= 2 => {
                    let noreply = args.noreply();
                    let fail = |kind| Err(DecodeError::new(kind, line_len).quiet(noreply));
                    let setting = if args[1] == b"ratio" {
                        if args.count() < 3 || c_strtod(args[2]).is_none() {
                            return fail(ErrorKind::UnknownCommand);
                        }
                        Automove::Ratio(args[2])
                    } else {
                        match c_strtoul32(args[1]) {
                            None => return fail(ErrorKind::Client("bad command line format")),
                            Some(level) if level > 2 => return fail(ErrorKind::UnknownCommand),
                            Some(level) => Automove::Level(level),
                        }
                    };
                    done(Request::SlabsAutomove { setting, noreply })
                }
                _ => err(ErrorKind::UnknownCommand),
            }
        }
        // memcached checks for HTTP before the commands below (and after those above).
        _ if looks_like_http(line) => err(ErrorKind::Hangup),
        b"flush_all" => {
            let args = Args::collect(toks);
            if args.count() > 2 {
                return err(ErrorKind::UnknownCommand);
            }
            let noreply = args.noreply();
            let delay = if args.len() == usize::from(noreply) {
                0
            } else {
                match c_strtol32(args[0]) {
                    Some(d) => i64::from(d),
                    None => {
                        return Err(DecodeError::new(
                            ErrorKind::Client("invalid exptime argument"),
                            line_len,
                        )
                        .quiet(noreply))
                    }
                }
            };
            done(Request::FlushAll { delay, noreply })
        }
        b"stats" => {
            let start = offset(line, cmd) + cmd.len();
            done(Request::Stats {
                args: Keys(&line[start..]),
            })
        }
        b"lru_crawler" => {
            let start = offset(line, cmd) + cmd.len();
            done(Request::LruCrawler {
                args: Keys(&line[start..]),
            })
        }
        b"version" => done(Request::Version),
        b"quit" => done(Request::Quit),
        b"verbosity" => {
            let args = Args::collect(toks);
            if args.count() != 1 && args.count() != 2 {
                return err(ErrorKind::UnknownCommand);
            }
            let noreply = args.noreply();
            match c_strtoul32(args[0]) {
                Some(level) => done(Request::Verbosity { level, noreply }),
                None => Err(DecodeError::new(
                    ErrorKind::Client("bad command line format"),
                    line_len,
                )
                .quiet(noreply)),
            }
        }
        _ => err(ErrorKind::UnknownCommand),
    }
}

/// The meta commands.
fn meta<'a>(
    buf: &'a [u8],
    line: &'a [u8],
    line_len: usize,
    cmd: &'a [u8],
    limits: &Limits,
) -> Result<Decoded<Request<'a>>, DecodeError> {
    let client = |m: &'static str| Err(DecodeError::new(ErrorKind::Client(m), line_len));
    let done = |request: Request<'a>| {
        Ok(Decoded::Complete {
            request,
            consumed: line_len,
        })
    };
    let rest = &line[offset(line, cmd) + cmd.len()..];
    let mut toks = rest.split(|&b| b == b' ').filter(|t| !t.is_empty());
    if cmd == b"mn" {
        return done(Request::MetaNoop);
    }
    let Some(key) = toks.next() else {
        // memcached: a meta command without a key is not a command at all.
        return if cmd == b"me" {
            client("bad command line format")
        } else {
            Err(DecodeError::new(ErrorKind::UnknownCommand, line_len))
        };
    };
    if key.len() > limits.max_key {
        return client("bad command line format");
    }
    if cmd == b"ms" {
        let Some(len) = toks.next() else {
            return client("bad command line format");
        };
        let Some(bytes) = c_strtol32(len) else {
            return client("bad command line format");
        };
        if !(0..=MAX_LENGTH_FIELD).contains(&bytes) {
            return client("bad command line format");
        }
        let flags = Keys(&line[offset(line, len) + len.len()..]);
        let cflags = flags
            .iter()
            .find(|t| t[0] == b'F')
            .and_then(|t| c_strtoul32(&t[1..]))
            .unwrap_or(0);
        let block = data_block(buf, line_len, key, cflags, bytes as usize, limits);
        let (data, consumed) = match block {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(Decoded::Incomplete),
            Err(mut e) => {
                if e.kind == ErrorKind::TooLarge {
                    // Whatever the mode, as memcached 1.6.18 does.
                    e.unlink = Some(Unlink {
                        start: offset(buf, key),
                        len: key.len(),
                        base64: flags.iter().any(|t| t == b"b"),
                    });
                }
                return Err(e);
            }
        };
        if let Err(m) = check_meta_flags(flags, cmd) {
            // The data block goes with the refused line, as in memcached.
            return Err(DecodeError::new(ErrorKind::Client(m), consumed));
        }
        return Ok(Decoded::Complete {
            request: Request::MetaSet { key, data, flags },
            consumed,
        });
    }
    let flags = Keys(&line[offset(line, key) + key.len()..]);
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

/// No newline within `max_line` bytes. A retrieval command is served in pieces: its first
/// piece is the keys complete within the first `max_line` bytes; anything else is hung up on,
/// as memcached hangs up on 2 KiB without a newline.
fn long_line<'a>(buf: &'a [u8], limits: &Limits) -> Result<Decoded<Request<'a>>, DecodeError> {
    let window = &buf[..limits.max_line];
    let lead = window.iter().take_while(|&&b| b == b' ').count();
    let rest = &window[lead..];
    let (cmd_len, line) = if rest.starts_with(b"get ") {
        (
            4,
            GetLine {
                cas: false,
                touch: None,
            },
        )
    } else if rest.starts_with(b"gets ") {
        (
            5,
            GetLine {
                cas: true,
                touch: None,
            },
        )
    } else if rest.starts_with(b"gat ") || rest.starts_with(b"gats ") {
        let cas = rest.starts_with(b"gats ");
        let after = &rest[if cas { 5 } else { 4 }..];
        let skip = after.iter().take_while(|&&b| b == b' ').count();
        let exp = after[skip..].split(|&b| b == b' ').next().unwrap_or(b"");
        let Some(e) = c_strtol32(exp).filter(|_| skip + exp.len() < after.len()) else {
            let mut e = DecodeError::new(ErrorKind::Client("invalid exptime argument"), 1);
            e.discard_line = true;
            return Err(e);
        };
        let used = (if cas { 5 } else { 4 }) + skip + exp.len();
        (
            used,
            GetLine {
                cas,
                touch: Some(i64::from(e)),
            },
        )
    } else {
        return Err(DecodeError::new(ErrorKind::Hangup, buf.len()));
    };
    piece(window, lead + cmd_len, line, limits)
}

/// The next piece of a retrieval line begun by a request with `more` set: the keys complete
/// within the next `max_line` bytes, or up to the newline.
pub fn decode_continued<'a>(
    buf: &'a [u8],
    limits: &Limits,
    line: GetLine,
) -> Result<Decoded<Request<'a>>, DecodeError> {
    let window = &buf[..buf.len().min(limits.max_line)];
    match window.iter().position(|&b| b == b'\n') {
        Some(nl) => {
            let keys = &buf[..nl];
            let keys = keys.strip_suffix(b"\r").unwrap_or(keys);
            if Keys(keys).iter().any(|k| k.len() > limits.max_key) {
                return Err(DecodeError::new(
                    ErrorKind::Client("bad command line format"),
                    nl + 1,
                ));
            }
            Ok(Decoded::Complete {
                request: retrieval(Keys(keys), line, false),
                consumed: nl + 1,
            })
        }
        None if buf.len() < limits.max_line => Ok(Decoded::Incomplete),
        None => piece(window, 0, line, limits),
    }
}

/// A piece of a long retrieval line: the keys of `window[from..]` up to its last space (the
/// token after it may not have arrived whole). A key over the limit refuses the rest of the
/// line.
fn piece<'a>(
    window: &'a [u8],
    from: usize,
    line: GetLine,
    limits: &Limits,
) -> Result<Decoded<Request<'a>>, DecodeError> {
    let region = &window[from..];
    let end = region.iter().rposition(|&b| b == b' ').unwrap_or(0);
    let keys = Keys(&region[..end]);
    let partial = &region[end..];
    let partial = partial.strip_prefix(b" ").unwrap_or(partial);
    if keys.iter().any(|k| k.len() > limits.max_key) || partial.len() > limits.max_key {
        // No newline in the window: one byte, then through the newline, is the rest of the line.
        let mut e = DecodeError::new(ErrorKind::Client("bad command line format"), 1);
        e.discard_line = true;
        return Err(e);
    }
    Ok(Decoded::Complete {
        request: retrieval(keys, line, true),
        consumed: from + end + 1,
    })
}

fn retrieval(keys: Keys<'_>, line: GetLine, more: bool) -> Request<'_> {
    match line.touch {
        Some(exptime) => Request::Gat {
            exptime,
            keys,
            cas: line.cas,
            more,
        },
        None => Request::Get {
            keys,
            cas: line.cas,
            more,
        },
    }
}

/// What a request with `more` set continues.
pub fn continues(req: &Request<'_>) -> Option<GetLine> {
    match *req {
        Request::Get {
            cas, more: true, ..
        } => Some(GetLine { cas, touch: None }),
        Request::Gat {
            exptime,
            cas,
            more: true,
            ..
        } => Some(GetLine {
            cas,
            touch: Some(exptime),
        }),
        _ => None,
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
            Request::Get { keys, cas, .. } => {
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
        match one(b"stats detail  on\r\n").0 {
            Request::Stats { args } => {
                assert_eq!(args.iter().collect::<Vec<_>>(), [&b"detail"[..], b"on"])
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            one(b"cache_memlimit 100 noreply\r\n").0,
            Request::CacheMemlimit {
                megabytes: 100,
                noreply: true
            }
        );
        assert_eq!(
            err(b"cache_memlimit -5\r\n").kind,
            ErrorKind::UnknownCommand
        );
        assert_eq!(
            one(b"slabs automove 2 extra\r\n").0,
            Request::SlabsAutomove {
                setting: Automove::Level(2),
                noreply: false
            }
        );
        assert_eq!(
            one(b"slabs automove ratio 0.5\r\n").0,
            Request::SlabsAutomove {
                setting: Automove::Ratio(b"0.5"),
                noreply: false
            }
        );
        assert_eq!(
            err(b"slabs automove invalid\r\n").kind,
            ErrorKind::Client("bad command line format")
        );
        assert_eq!(err(b"slabs automove 3\r\n").kind, ErrorKind::UnknownCommand);
        assert_eq!(
            one(b"slabs reassign 4294967297 -1\r\n").0,
            Request::SlabsReassign { src: 1, dst: -1 }
        );
        assert_eq!(
            err(b"slabs reassign 1 2 noreply\r\n").kind,
            ErrorKind::UnknownCommand
        );
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
        // Any byte but space and newline is a key byte, as in memcached.
        assert!(matches!(
            one(b"get a\x01b\x7f\r\n").0,
            Request::Get { keys, .. } if keys.iter().next() == Some(&b"a\x01b\x7f"[..])
        ));
        assert!(matches!(err(b"incr k x\r\n").kind, ErrorKind::Client(_)));
        assert!(matches!(
            err(b"set k x 0 1\r\na\r\n").kind,
            ErrorKind::Client(_)
        ));
        // noreply silences the error, and the block is not skipped (memcached reads it as a
        // command).
        let e = err(b"set k x 0 1 noreply\r\na\r\n");
        assert_eq!((e.noreply, e.consumed), (true, 21));
        let mut out = Vec::new();
        e.encode(&mut out);
        assert!(out.is_empty());
        // Too large: the whole block is skipped, even before it arrived; a set names its key.
        let e = err(b"set k 0 0 2000000\r\n");
        assert_eq!(
            (e.kind.clone(), e.consumed, e.close),
            (ErrorKind::TooLarge, 19 + 2_000_002, false)
        );
        assert_eq!(
            e.unlink,
            Some(Unlink {
                start: 4,
                len: 1,
                base64: false
            })
        );
        assert_eq!(err(b"add k 0 0 2000000\r\n").unlink, None);
        // The limit counts the item as memcached does.
        let at = |n: usize| format!("set k 0 0 {n}\r\n{}\r\n", "v".repeat(n));
        assert!(decode(at(1_048_516).as_bytes(), &lim()).is_ok());
        assert_eq!(err(at(1_048_517).as_bytes()).kind, ErrorKind::TooLarge);
        // Numbers as C reads them: flags and lengths truncated to 32 bits.
        assert!(matches!(
            one(b"set k 4294967297 4294967296 1\r\nx\r\n").0,
            Request::Store {
                flags: 1,
                exptime: 0,
                ..
            }
        ));
        for line in [&b"set k 0 0 2147483646\r\n"[..], b"cas k 0 0 -1 5\r\n"] {
            let e = err(line);
            assert_eq!(
                (e.kind, e.consumed),
                (ErrorKind::Client("bad command line format"), line.len())
            );
        }
        assert_eq!(err(b"set k 0 0 2147483645\r\n").kind, ErrorKind::TooLarge);
        // Bad data chunk: the line, the announced bytes and two more are consumed.
        let e = err(b"set k 0 0 1\r\nabc\r\n");
        assert_eq!((e.kind, e.consumed), (ErrorKind::BadDataChunk, 16));
        // A line that never ends: hang up without a word.
        let e = decode(&[b'a'; 4096], &lim()).unwrap_err();
        assert!(e.close && e.kind == ErrorKind::Hangup);
        assert_eq!(decode(&[b'a'; 100], &lim()), Ok(Decoded::Incomplete));
        // A line that looks like HTTP: hang up.
        assert_eq!(err(b"GET / HTTP/1.0\r\n").kind, ErrorKind::Hangup);
        assert_eq!(err(b"DELETE HTTP/1.1\r\n").kind, ErrorKind::Hangup);
        let mut out = Vec::new();
        err(b"set k 0 0 2000000\r\n").encode(&mut out);
        assert_eq!(out, b"SERVER_ERROR object too large for cache\r\n");
    }

    /// Drive a stream as the connection loop does: first line by [`decode`], then the pieces
    /// of a long retrieval line by [`decode_continued`]. The keys seen, whether an END is due
    /// after each request, and the errors.
    fn stream(input: &[u8], cut: usize) -> (Vec<Vec<u8>>, Vec<bool>, Vec<ErrorKind>) {
        let (mut keys, mut ends, mut errs) = (Vec::new(), Vec::new(), Vec::new());
        let mut buf: Vec<u8> = Vec::new();
        let mut more = None;
        let mut discard = false;
        let mut fed = 0;
        loop {
            if fed < input.len() {
                let n = cut.min(input.len() - fed);
                buf.extend_from_slice(&input[fed..fed + n]);
                fed += n;
            }
            if discard {
                match buf.iter().position(|&b| b == b'\n') {
                    Some(nl) => {
                        buf.drain(..=nl);
                        discard = false;
                    }
                    None => buf.clear(),
                }
            }
            loop {
                let r = match more {
                    Some(l) => decode_continued(&buf, &lim(), l),
                    None => decode(&buf, &lim()),
                };
                match r {
                    Ok(Decoded::Complete { request, consumed }) => {
                        more = continues(&request);
                        if let Request::Get {
                            keys: k, more: m, ..
                        } = &request
                        {
                            keys.extend(k.iter().map(|k| k.to_vec()));
                            ends.push(!m);
                        }
                        buf.drain(..consumed);
                    }
                    Ok(Decoded::Incomplete) => break,
                    Err(e) => {
                        more = None;
                        errs.push(e.kind);
                        buf.drain(..e.consumed.min(buf.len()));
                        if e.discard_line {
                            match buf.iter().position(|&b| b == b'\n') {
                                Some(nl) => {
                                    buf.drain(..=nl);
                                }
                                None => {
                                    buf.clear();
                                    discard = true;
                                }
                            }
                        }
                    }
                }
            }
            if fed == input.len() {
                return (keys, ends, errs);
            }
        }
    }

    /// A get of 18,000 keys (a 128 KiB line) is served key by key in pieces of at most 2 KiB,
    /// however it arrives; other lines keep the 2 KiB limit.
    #[test]
    fn long_retrieval_lines_are_taken_in_pieces() {
        let mut line = b"gets".to_vec();
        let want: Vec<Vec<u8>> = (0..18_000)
            .map(|i| format!("key{i}").into_bytes())
            .collect();
        for k in &want {
            line.push(b' ');
            line.extend_from_slice(k);
        }
        line.extend_from_slice(b"\r\nget tail\r\n");
        for cut in [1, 7, 100, 2047, 2048, 5000, 1 << 20] {
            let (keys, ends, errs) = stream(&line, cut);
            assert!(errs.is_empty(), "cut {cut}: {errs:?}");
            assert_eq!(keys.len(), 18_001, "cut {cut}");
            assert_eq!(&keys[..18_000], &want[..], "cut {cut}");
            assert_eq!(keys[18_000], b"tail");
            // END after the last piece of each line only.
            assert_eq!(ends.iter().filter(|e| **e).count(), 2, "cut {cut}");
            assert!(ends.len() > 60, "pieces of at most 2 KiB: {}", ends.len());
        }
        // A bad key in a long line: the error, the rest of the line skipped, the next served.
        let mut bad = b"get ".to_vec();
        bad.extend(b"a ".repeat(1500));
        bad.extend([b'x'; 300]);
        bad.extend(b" b b\r\nget c\r\n");
        for cut in [1, 64, 1 << 20] {
            let (keys, _, errs) = stream(&bad, cut);
            assert_eq!(
                errs,
                [ErrorKind::Client("bad command line format")],
                "cut {cut}"
            );
            assert_eq!(keys.last().map(Vec::as_slice), Some(&b"c"[..]));
            assert!(!keys.iter().any(|k| k == b"b"), "cut {cut}");
        }
        // gat: the exptime is carried into every piece.
        let mut gat = b"gat 100".to_vec();
        gat.extend(b" k".repeat(2000));
        gat.extend(b"\r\n");
        let r = decode(&gat, &lim()).unwrap();
        assert!(matches!(
            r,
            Decoded::Complete {
                request: Request::Gat {
                    exptime: 100,
                    more: true,
                    ..
                },
                ..
            }
        ));
        // Not a retrieval command: hang up.
        let mut set = b"set ".to_vec();
        set.extend([b'k'; 3000]);
        set.extend(b" 0 0 1\r\n");
        assert_eq!(err(&set).kind, ErrorKind::Hangup);
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
        assert_eq!(err(b"mg\r\n").kind, ErrorKind::UnknownCommand);
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

        /// With a short line limit, long lines and their pieces never panic, and every step
        /// makes progress.
        #[test]
        fn long_lines_never_panic(
            body in proptest::collection::vec(prop_oneof![Just(b' '), Just(b'k'), Just(b'\n'), any::<u8>()], 0..400),
            cmd in prop_oneof![Just(&b"get "[..]), Just(&b"gats 5 "[..]), Just(&b"set "[..]), Just(&b""[..])],
        ) {
            let limits = Limits { max_line: 32, max_key: 10, max_item: 1 << 20, max_value: 1 << 20 };
            let mut buf = cmd.to_vec();
            buf.extend_from_slice(&body);
            let mut pos = 0;
            let mut more = None;
            while pos < buf.len() {
                let r = match more {
                    Some(l) => decode_continued(&buf[pos..], &limits, l),
                    None => decode(&buf[pos..], &limits),
                };
                match r {
                    Ok(Decoded::Complete { request, consumed }) => {
                        prop_assert!(consumed >= 1 && pos + consumed <= buf.len());
                        more = continues(&request);
                        pos += consumed;
                    }
                    Ok(Decoded::Incomplete) => break,
                    Err(e) => {
                        prop_assert!(e.consumed >= 1);
                        if e.close {
                            break;
                        }
                        more = None;
                        pos += e.consumed;
                        if e.discard_line {
                            match buf[pos.min(buf.len())..].iter().position(|&b| b == b'\n') {
                                Some(nl) => pos += nl + 1,
                                None => break,
                            }
                        }
                    }
                }
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
