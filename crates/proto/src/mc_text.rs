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
mod tests;
