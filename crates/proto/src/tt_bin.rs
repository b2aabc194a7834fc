//! The Tokyo Tyrant binary protocol ("the original binary protocol" of Tyrant 1.1.41).
//!
//! Every request starts with the magic byte [`MAGIC`] (0xC8) and a command byte, followed by
//! big-endian fixed-size fields and then the variable-size data those fields announce. Replies
//! have no header: their shape depends on the command they answer, so [`decode_reply`] is told
//! which command that was.
//!
//! `decode` borrows keys, values and arguments from the input buffer. What an error means for
//! the connection follows `ttserver`: a stream that cannot be trusted any more (bad magic byte,
//! unknown command, a size that is negative as a signed 32-bit integer or above Tyrant's own
//! 256 MiB argument limit, a malformed list) is closed without a reply, because there is no way
//! to find the start of the next request. A well-delimited request that is merely larger than
//! our [`Limits`] is skipped whole and answered with the command's failure code, as if the
//! database had refused the record.
//!
//! Layout of every request (`[name:size]`, sizes in bytes, `*` = announced by an earlier field):
//!
//! | command | code | after the two magic bytes |
//! |---|---|---|
//! | put, putkeep, putcat, putnr | 0x10, 0x11, 0x12, 0x18 | `[ksiz:4][vsiz:4][key:*][value:*]` |
//! | putshl | 0x13 | `[ksiz:4][vsiz:4][width:4][key:*][value:*]` |
//! | out, get, vsiz | 0x20, 0x30, 0x38 | `[ksiz:4][key:*]` |
//! | mget | 0x31 | `[rnum:4]` then `rnum` × `[ksiz:4][key:*]` |
//! | iterinit, iternext | 0x50, 0x51 | nothing |
//! | fwmkeys | 0x58 | `[psiz:4][max:4][prefix:*]` |
//! | addint | 0x60 | `[ksiz:4][num:4][key:*]` |
//! | adddouble | 0x61 | `[ksiz:4][integ:8][fract:8][key:*]` |
//! | ext | 0x68 | `[nsiz:4][opts:4][ksiz:4][vsiz:4][name:*][key:*][value:*]` |
//! | sync, vanish | 0x70, 0x72 | nothing |
//! | optimize, copy | 0x71, 0x73 | `[psiz:4][params or path:*]` |
//! | restore | 0x74 | `[psiz:4][ts:8][opts:4][path:*]` |
//! | setmst | 0x78 | `[hsiz:4][port:4][ts:8][opts:4][host:*]` |
//! | rnum, size, stat | 0x80, 0x81, 0x88 | nothing |
//! | misc | 0x90 | `[nsiz:4][opts:4][rnum:4][name:*]` then `rnum` × `[asiz:4][arg:*]` |
//! | repl | 0xa0 | `[ts:8][sid:4]` |

/// The first byte of every request.
pub const MAGIC: u8 = 0xC8;

/// Command bytes (the second byte of a request), as in Tyrant's `ttutil.h`.
pub mod cmd {
    pub const PUT: u8 = 0x10;
    pub const PUTKEEP: u8 = 0x11;
    pub const PUTCAT: u8 = 0x12;
    pub const PUTSHL: u8 = 0x13;
    pub const PUTNR: u8 = 0x18;
    pub const OUT: u8 = 0x20;
    pub const GET: u8 = 0x30;
    pub const MGET: u8 = 0x31;
    pub const VSIZ: u8 = 0x38;
    pub const ITERINIT: u8 = 0x50;
    pub const ITERNEXT: u8 = 0x51;
    pub const FWMKEYS: u8 = 0x58;
    pub const ADDINT: u8 = 0x60;
    pub const ADDDOUBLE: u8 = 0x61;
    pub const EXT: u8 = 0x68;
    pub const SYNC: u8 = 0x70;
    pub const OPTIMIZE: u8 = 0x71;
    pub const VANISH: u8 = 0x72;
    pub const COPY: u8 = 0x73;
    pub const RESTORE: u8 = 0x74;
    pub const SETMST: u8 = 0x78;
    pub const RNUM: u8 = 0x80;
    pub const SIZE: u8 = 0x81;
    pub const STAT: u8 = 0x88;
    pub const MISC: u8 = 0x90;
    pub const REPL: u8 = 0xa0;
    /// Kura's own replication request (`crate::repl`), on the same port.
    pub const KREPL: u8 = 0xa8;
}

/// Reply codes. Tyrant answers 0 on success and 1 on every failure (missing record, existing
/// record, refused command, engine error); clients only distinguish zero from non-zero.
pub const OK: u8 = 0;
pub const FAIL: u8 = 1;

/// Tyrant's own limit on any one announced size (`MAXARGSIZ`, 256 MiB): above it `ttserver`
/// hangs up, and so do we.
pub const MAX_ARG_SIZE: usize = 256 << 20;

/// Longest function name of `ext` and `misc` (Tyrant reads names into a 1024-byte buffer and
/// hangs up on longer ones).
pub const MAX_NAME_LEN: usize = 1023;

/// Scale of the fractional part of a real number on the wire (`adddouble`).
pub const TRILLION: f64 = 1_000_000_000_000.0;

/// Codec configuration: sizes above these are refused before anything is allocated.
/// Kura's option of `setmst`: a bootstrap from the new master may replace the records the
/// server holds (without it, a server that holds records refuses to become a replica of a
/// master that would replace them). Tokyo Tyrant uses only bit 0 (`RDBROCHKCON`).
pub const SETMST_REPLACE: u32 = 1 << 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest key; also bounds the other "name-like" fields (fwmkeys prefix, optimize
    /// parameters, copy / restore path, setmst host) and each mget key.
    pub max_key: usize,
    /// Longest value; also bounds each misc argument.
    pub max_value: usize,
    /// Most elements of one mget or misc request (Tyrant's `MAXARGNUM` is 2^20).
    pub max_args: usize,
    /// Most bytes of one whole mget or misc request (the list commands; every other request
    /// is bounded by `max_key` and `max_value`).
    pub max_frame: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_key: 64 * 1024,
            max_value: 1024 * 1024,
            max_args: 1 << 20,
            max_frame: 64 << 20,
        }
    }
}

/// One request; every byte string borrows from the input buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    Put {
        key: &'a [u8],
        value: &'a [u8],
    },
    PutKeep {
        key: &'a [u8],
        value: &'a [u8],
    },
    PutCat {
        key: &'a [u8],
        value: &'a [u8],
    },
    /// Append, then keep the last `width` bytes (`width` >= 0: negative widths are refused).
    PutShl {
        key: &'a [u8],
        value: &'a [u8],
        width: i32,
    },
    /// Put without a reply.
    PutNr {
        key: &'a [u8],
        value: &'a [u8],
    },
    Out {
        key: &'a [u8],
    },
    Get {
        key: &'a [u8],
    },
    Mget {
        keys: Vec<&'a [u8]>,
    },
    Vsiz {
        key: &'a [u8],
    },
    IterInit,
    IterNext,
    /// Keys starting with `prefix`, at most `max` of them (negative = no limit).
    Fwmkeys {
        prefix: &'a [u8],
        max: i32,
    },
    AddInt {
        key: &'a [u8],
        num: i32,
    },
    /// Add the real number `integ + fract / 10^12` (see [`unpack_double`]; kept as sent so
    /// that requests compare exactly).
    AddDouble {
        key: &'a [u8],
        integ: i64,
        fract: i64,
    },
    /// Call a script function (`opts`: 1 record lock, 2 global lock).
    Ext {
        name: &'a [u8],
        opts: u32,
        key: &'a [u8],
        value: &'a [u8],
    },
    Sync,
    Optimize {
        params: &'a [u8],
    },
    Vanish,
    Copy {
        path: &'a [u8],
    },
    Restore {
        path: &'a [u8],
        ts: u64,
        opts: u32,
    },
    /// Set the replication master (`port` >= 0: negative ports are refused). `opts`: Tyrant's
    /// `RDBROCHKCON` (1), and Kura's [`SETMST_REPLACE`].
    SetMst {
        host: &'a [u8],
        port: i32,
        ts: u64,
        opts: u32,
    },
    Rnum,
    Size,
    Stat,
    /// A named function with a list of arguments (`opts`: 1 = no update log).
    Misc {
        name: &'a [u8],
        opts: u32,
        args: Vec<&'a [u8]>,
    },
    /// A slave asks for the update log from time stamp `ts` on; `sid` is the slave's id.
    Repl {
        ts: u64,
        sid: u32,
    },
    /// A Kura replica asks for the update log after `after` (see `crate::repl`).
    KuraRepl {
        after: u64,
        sid: u32,
        flags: u32,
    },
}

impl Request<'_> {
    /// The command byte.
    pub fn cmd(&self) -> u8 {
        match self {
            Request::Put { .. } => cmd::PUT,
            Request::PutKeep { .. } => cmd::PUTKEEP,
            Request::PutCat { .. } => cmd::PUTCAT,
            Request::PutShl { .. } => cmd::PUTSHL,
            Request::PutNr { .. } => cmd::PUTNR,
            Request::Out { .. } => cmd::OUT,
            Request::Get { .. } => cmd::GET,
            Request::Mget { .. } => cmd::MGET,
            Request::Vsiz { .. } => cmd::VSIZ,
            Request::IterInit => cmd::ITERINIT,
            Request::IterNext => cmd::ITERNEXT,
            Request::Fwmkeys { .. } => cmd::FWMKEYS,
            Request::AddInt { .. } => cmd::ADDINT,
            Request::AddDouble { .. } => cmd::ADDDOUBLE,
            Request::Ext { .. } => cmd::EXT,
            Request::Sync => cmd::SYNC,
            Request::Optimize { .. } => cmd::OPTIMIZE,
            Request::Vanish => cmd::VANISH,
            Request::Copy { .. } => cmd::COPY,
            Request::Restore { .. } => cmd::RESTORE,
            Request::SetMst { .. } => cmd::SETMST,
            Request::Rnum => cmd::RNUM,
            Request::Size => cmd::SIZE,
            Request::Stat => cmd::STAT,
            Request::Misc { .. } => cmd::MISC,
            Request::Repl { .. } => cmd::REPL,
            Request::KuraRepl { .. } => cmd::KREPL,
        }
    }

    /// Tyrant's name of the command (as in `--mask`).
    pub fn name(&self) -> &'static str {
        cmd_name(self.cmd()).unwrap_or("?")
    }
}

/// Tyrant's name of a command byte, or `None` for an unknown byte.
pub fn cmd_name(c: u8) -> Option<&'static str> {
    Some(match c {
        cmd::PUT => "put",
        cmd::PUTKEEP => "putkeep",
        cmd::PUTCAT => "putcat",
        cmd::PUTSHL => "putshl",
        cmd::PUTNR => "putnr",
        cmd::OUT => "out",
        cmd::GET => "get",
        cmd::MGET => "mget",
        cmd::VSIZ => "vsiz",
        cmd::ITERINIT => "iterinit",
        cmd::ITERNEXT => "iternext",
        cmd::FWMKEYS => "fwmkeys",
        cmd::ADDINT => "addint",
        cmd::ADDDOUBLE => "adddouble",
        cmd::EXT => "ext",
        cmd::SYNC => "sync",
        cmd::OPTIMIZE => "optimize",
        cmd::VANISH => "vanish",
        cmd::COPY => "copy",
        cmd::RESTORE => "restore",
        cmd::SETMST => "setmst",
        cmd::RNUM => "rnum",
        cmd::SIZE => "size",
        cmd::STAT => "stat",
        cmd::MISC => "misc",
        cmd::REPL | cmd::KREPL => "repl",
        _ => return None,
    })
}

/// The result of decoding the start of a buffer (see [`crate::Decoded`]).
pub type Decoded<'a> = crate::Decoded<Request<'a>>;

/// A request that cannot be served as sent; says what the connection does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// Bytes to discard. With `close == false` this is the whole announced request and may
    /// exceed what has arrived: keep discarding as the rest comes in.
    pub consumed: usize,
    /// Hang up (after sending `reply`, if any): the stream cannot be resynchronised.
    pub close: bool,
    /// A reply code to send (always [`FAIL`] when present), or `None` to send nothing.
    pub reply: Option<u8>,
    /// A request refused for a value over `max_value`: the size of that value.
    pub value_len: Option<u64>,
    /// After `consumed` bytes, discard this many more `[size:4][bytes]` elements (the rest of
    /// an mget or misc list refused at an element over its limit; sizes not arrived yet).
    pub then_elements: usize,
}

impl DecodeError {
    /// Hang up without a reply (what `ttserver` does on anything it cannot parse).
    fn hang_up() -> DecodeError {
        DecodeError {
            consumed: 0,
            close: true,
            reply: None,
            value_len: None,
            then_elements: 0,
        }
    }

    /// Refused for a value of `len` bytes over the limit.
    fn value(mut self, len: usize) -> DecodeError {
        self.value_len = Some(len as u64);
        self
    }
}

/// Big-endian reads from the input; `None` = not enough bytes yet.
struct Rd<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Rd<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.bytes(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.bytes(8)?.try_into().ok()?))
    }
}

/// An announced size: Tyrant reads sizes as signed 32-bit integers and hangs up on negative
/// ones or ones above [`MAX_ARG_SIZE`].
fn size(v: u32) -> Result<usize, DecodeError> {
    let v = v as usize;
    if v > MAX_ARG_SIZE {
        Err(DecodeError::hang_up())
    } else {
        Ok(v)
    }
}

/// Skip a well-delimited request of `total` bytes that exceeds our limits, answering the
/// failure code (none for putnr, which never answers). Every announced size is at most
/// [`MAX_ARG_SIZE`] and a request announces at most three, so `total` cannot overflow.
fn skip(c: u8, total: usize) -> DecodeError {
    DecodeError {
        consumed: total,
        close: false,
        reply: (c != cmd::PUTNR).then_some(FAIL),
        value_len: None,
        then_elements: 0,
    }
}

/// Decode one request from the start of `buf`. Never panics; `consumed` of a complete request
/// is at most `buf.len()`.
pub fn decode<'a>(buf: &'a [u8], limits: &Limits) -> Result<Decoded<'a>, DecodeError> {
    match buf.first() {
        None => return Ok(Decoded::Incomplete),
        Some(&MAGIC) => {}
        Some(_) => return Err(DecodeError::hang_up()),
    }
    let Some(&c) = buf.get(1) else {
        return Ok(Decoded::Incomplete);
    };
    if cmd_name(c).is_none() {
        // ttserver logs "unknown command" and closes the connection without a reply.
        return Err(DecodeError::hang_up());
    }
    let mut rd = Rd { buf, pos: 2 };
    match decode_body(c, &mut rd, limits)? {
        Some(request) => Ok(Decoded::Complete {
            request,
            consumed: rd.pos,
        }),
        None => Ok(Decoded::Incomplete),
    }
}

/// `Ok(None)`: more bytes are needed.
fn decode_body<'a>(
    c: u8,
    rd: &mut Rd<'a>,
    limits: &Limits,
) -> Result<Option<Request<'a>>, DecodeError> {
    // Read a fixed-size header field, or report that more bytes are needed.
    macro_rules! need {
        ($e:expr) => {
            match $e {
                Some(v) => v,
                None => return Ok(None),
            }
        };
    }
    let req = match c {
        cmd::PUT | cmd::PUTKEEP | cmd::PUTCAT | cmd::PUTNR | cmd::PUTSHL => {
            let ksiz = size(need!(rd.u32()))?;
            let vsiz = size(need!(rd.u32()))?;
            let width = if c == cmd::PUTSHL {
                let w = need!(rd.u32()) as i32;
                if w < 0 {
                    return Err(DecodeError::hang_up());
                }
                w
            } else {
                0
            };
            let total = rd.pos + ksiz + vsiz;
            if ksiz > limits.max_key {
                return Err(skip(c, total));
            }
            if vsiz > limits.max_value {
                return Err(skip(c, total).value(vsiz));
            }
            let key = need!(rd.bytes(ksiz));
            let value = need!(rd.bytes(vsiz));
            match c {
                cmd::PUT => Request::Put { key, value },
                cmd::PUTKEEP => Request::PutKeep { key, value },
                cmd::PUTCAT => Request::PutCat { key, value },
                cmd::PUTNR => Request::PutNr { key, value },
                _ => Request::PutShl { key, value, width },
            }
        }
        cmd::OUT | cmd::GET | cmd::VSIZ => {
            let ksiz = size(need!(rd.u32()))?;
            let total = rd.pos + ksiz;
            if ksiz > limits.max_key {
                return Err(skip(c, total));
            }
            let key = need!(rd.bytes(ksiz));
            match c {
                cmd::OUT => Request::Out { key },
                cmd::GET => Request::Get { key },
                _ => Request::Vsiz { key },
            }
        }
        cmd::MGET | cmd::MISC => return decode_list(c, rd, limits),
        cmd::ITERINIT => Request::IterInit,
        cmd::ITERNEXT => Request::IterNext,
        cmd::SYNC => Request::Sync,
        cmd::VANISH => Request::Vanish,
        cmd::RNUM => Request::Rnum,
        cmd::SIZE => Request::Size,
        cmd::STAT => Request::Stat,
        cmd::FWMKEYS => {
            let psiz = size(need!(rd.u32()))?;
            let max = need!(rd.u32()) as i32;
            let total = rd.pos + psiz;
            if psiz > limits.max_key {
                return Err(skip(c, total));
            }
            Request::Fwmkeys {
                prefix: need!(rd.bytes(psiz)),
                max,
            }
        }
        cmd::ADDINT => {
            let ksiz = size(need!(rd.u32()))?;
            let num = need!(rd.u32()) as i32;
            let total = rd.pos + ksiz;
            if ksiz > limits.max_key {
                return Err(skip(c, total));
            }
            Request::AddInt {
                key: need!(rd.bytes(ksiz)),
                num,
            }
        }
        cmd::ADDDOUBLE => {
            let ksiz = size(need!(rd.u32()))?;
            let integ = need!(rd.u64()) as i64;
            let fract = need!(rd.u64()) as i64;
            let total = rd.pos + ksiz;
            if ksiz > limits.max_key {
                return Err(skip(c, total));
            }
            Request::AddDouble {
                key: need!(rd.bytes(ksiz)),
                integ,
                fract,
            }
        }
        cmd::EXT => {
            let nsiz = size(need!(rd.u32()))?;
            let opts = need!(rd.u32());
            let ksiz = size(need!(rd.u32()))?;
            let vsiz = size(need!(rd.u32()))?;
            if nsiz > MAX_NAME_LEN {
                return Err(DecodeError::hang_up());
            }
            let total = rd.pos + nsiz + ksiz + vsiz;
            if ksiz > limits.max_key {
                return Err(skip(c, total));
            }
            if vsiz > limits.max_value {
                return Err(skip(c, total).value(vsiz));
            }
            let name = need!(rd.bytes(nsiz));
            let key = need!(rd.bytes(ksiz));
            let value = need!(rd.bytes(vsiz));
            Request::Ext {
                name,
                opts,
                key,
                value,
            }
        }
        cmd::OPTIMIZE | cmd::COPY | cmd::RESTORE | cmd::SETMST => {
            let psiz = size(need!(rd.u32()))?;
            let (mut port, mut ts, mut opts) = (0, 0, 0);
            if c == cmd::SETMST {
                port = need!(rd.u32()) as i32;
                if port < 0 {
                    return Err(DecodeError::hang_up());
                }
            }
            if c == cmd::RESTORE || c == cmd::SETMST {
                ts = need!(rd.u64());
                opts = need!(rd.u32());
            }
            let total = rd.pos + psiz;
            if psiz > limits.max_key {
                return Err(skip(c, total));
            }
            let text = need!(rd.bytes(psiz));
            match c {
                cmd::OPTIMIZE => Request::Optimize { params: text },
                cmd::COPY => Request::Copy { path: text },
                cmd::RESTORE => Request::Restore {
                    path: text,
                    ts,
                    opts,
                },
                _ => Request::SetMst {
                    host: text,
                    port,
                    ts,
                    opts,
                },
            }
        }
        cmd::REPL => {
            let ts = need!(rd.u64());
            let sid = need!(rd.u32());
            Request::Repl { ts, sid }
        }
        cmd::KREPL => {
            let after = need!(rd.u64());
            let sid = need!(rd.u32());
            let flags = need!(rd.u32());
            Request::KuraRepl { after, sid, flags }
        }
        _ => return Err(DecodeError::hang_up()),
    };
    Ok(Some(req))
}

/// mget and misc: a count, then that many `[size:4][bytes]` elements. The whole request is
/// checked (count, each size, total) before the list is allocated, and the list is allocated
/// only once every element has arrived, so its capacity is bounded by the buffer.
fn decode_list<'a>(
    c: u8,
    rd: &mut Rd<'a>,
    limits: &Limits,
) -> Result<Option<Request<'a>>, DecodeError> {
    let (nsiz, opts) = if c == cmd::MISC {
        let Some(nsiz) = rd.u32() else {
            return Ok(None);
        };
        let nsiz = size(nsiz)?;
        let Some(opts) = rd.u32() else {
            return Ok(None);
        };
        if nsiz > MAX_NAME_LEN {
            return Err(DecodeError::hang_up());
        }
        (nsiz, opts)
    } else {
        (0, 0)
    };
    let Some(count) = rd.u32() else {
        return Ok(None);
    };
    let count = size(count)?;
    if count > limits.max_args {
        return Err(DecodeError::hang_up());
    }
    let Some(name) = rd.bytes(nsiz) else {
        return Ok(None);
    };
    let limit = if c == cmd::MISC {
        limits.max_value
    } else {
        limits.max_key
    };
    // First pass: validate and find the end without allocating.
    let first = rd.pos;
    for i in 0..count {
        let Some(n) = rd.u32() else {
            return Ok(None);
        };
        let n = size(n)?;
        if n > limit {
            // Refused, and the rest of the list discarded as it arrives: the stream stays
            // in step (ttserver has no such limit, and hangs up only at MAX_ARG_SIZE).
            let mut e = skip(c, rd.pos + n);
            e.then_elements = count - i - 1;
            if c == cmd::MISC {
                e.value_len = Some(n as u64);
            }
            return Err(e);
        }
        if rd.pos.saturating_add(n) > limits.max_frame {
            return Err(DecodeError::hang_up());
        }
        if rd.bytes(n).is_none() {
            return Ok(None);
        }
    }
    // Second pass: every element is in the buffer (so `count` <= buf.len() / 4).
    let end = rd.pos;
    rd.pos = first;
    let mut items = Vec::with_capacity(count);
    while rd.pos < end {
        let n = rd.u32().unwrap_or_default() as usize;
        items.push(rd.bytes(n).unwrap_or_default());
    }
    debug_assert_eq!(items.len(), count);
    Ok(Some(if c == cmd::MISC {
        Request::Misc {
            name,
            opts,
            args: items,
        }
    } else {
        Request::Mget { keys: items }
    }))
}

// ----- client side: requests -----

fn put_len(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u32).to_be_bytes());
}

/// Append a request (for `kura remote`, load generators and tests). Every byte string must be
/// shorter than 2^31 bytes (Tyrant's sizes are signed 32-bit integers).
pub fn encode_request(req: &Request<'_>, out: &mut Vec<u8>) {
    out.push(MAGIC);
    out.push(req.cmd());
    match req {
        Request::Put { key, value }
        | Request::PutKeep { key, value }
        | Request::PutCat { key, value }
        | Request::PutNr { key, value } => {
            put_len(out, key.len());
            put_len(out, value.len());
            out.extend_from_slice(key);
            out.extend_from_slice(value);
        }
        Request::PutShl { key, value, width } => {
            put_len(out, key.len());
            put_len(out, value.len());
            out.extend_from_slice(&width.to_be_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(value);
        }
        Request::Out { key } | Request::Get { key } | Request::Vsiz { key } => {
            put_len(out, key.len());
            out.extend_from_slice(key);
        }
        Request::Mget { keys } => {
            put_len(out, keys.len());
            for k in keys {
                put_len(out, k.len());
                out.extend_from_slice(k);
            }
        }
        Request::IterInit
        | Request::IterNext
        | Request::Sync
        | Request::Vanish
        | Request::Rnum
        | Request::Size
        | Request::Stat => {}
        Request::Fwmkeys { prefix, max } => {
            put_len(out, prefix.len());
            out.extend_from_slice(&max.to_be_bytes());
            out.extend_from_slice(prefix);
        }
        Request::AddInt { key, num } => {
            put_len(out, key.len());
            out.extend_from_slice(&num.to_be_bytes());
            out.extend_from_slice(key);
        }
        Request::AddDouble { key, integ, fract } => {
            put_len(out, key.len());
            out.extend_from_slice(&integ.to_be_bytes());
            out.extend_from_slice(&fract.to_be_bytes());
            out.extend_from_slice(key);
        }
        Request::Ext {
            name,
            opts,
            key,
            value,
        } => {
            put_len(out, name.len());
            out.extend_from_slice(&opts.to_be_bytes());
            put_len(out, key.len());
            put_len(out, value.len());
            out.extend_from_slice(name);
            out.extend_from_slice(key);
            out.extend_from_slice(value);
        }
        Request::Optimize { params: text } | Request::Copy { path: text } => {
            put_len(out, text.len());
            out.extend_from_slice(text);
        }
        Request::Restore { path, ts, opts } => {
            put_len(out, path.len());
            out.extend_from_slice(&ts.to_be_bytes());
            out.extend_from_slice(&opts.to_be_bytes());
            out.extend_from_slice(path);
        }
        Request::SetMst {
            host,
            port,
            ts,
            opts,
        } => {
            put_len(out, host.len());
            out.extend_from_slice(&port.to_be_bytes());
            out.extend_from_slice(&ts.to_be_bytes());
            out.extend_from_slice(&opts.to_be_bytes());
            out.extend_from_slice(host);
        }
        Request::Misc { name, opts, args } => {
            put_len(out, name.len());
            out.extend_from_slice(&opts.to_be_bytes());
            put_len(out, args.len());
            out.extend_from_slice(name);
            for a in args {
                put_len(out, a.len());
                out.extend_from_slice(a);
            }
        }
        Request::Repl { ts, sid } => {
            out.extend_from_slice(&ts.to_be_bytes());
            out.extend_from_slice(&sid.to_be_bytes());
        }
        Request::KuraRepl { after, sid, flags } => {
            out.extend_from_slice(&after.to_be_bytes());
            out.extend_from_slice(&sid.to_be_bytes());
            out.extend_from_slice(&flags.to_be_bytes());
        }
    }
}

// ----- real numbers -----

/// Tyrant's wire form of a real number: the integral part and the fractional part times 10^12,
/// both truncated toward zero. Infinities are `(i64::MAX, 0)` / `(i64::MIN, 0)` and NaN is
/// `(i64::MIN, i64::MIN)`. Finite numbers beyond ±2^63 saturate (Tyrant's C conversion is
/// undefined there; on x86 it yields `i64::MIN`).
pub fn pack_double(num: f64) -> (i64, i64) {
    if num.is_nan() {
        return (i64::MIN, i64::MIN);
    }
    if num.is_infinite() {
        return (if num > 0.0 { i64::MAX } else { i64::MIN }, 0);
    }
    let integ = num.trunc();
    let fract = num - integ;
    (integ as i64, (fract * TRILLION) as i64)
}

/// The real number of Tyrant's wire form (the inverse of [`pack_double`]).
pub fn unpack_double(integ: i64, fract: i64) -> f64 {
    if integ == i64::MIN && fract == i64::MIN {
        f64::NAN
    } else if integ == i64::MAX {
        f64::INFINITY
    } else if integ == i64::MIN {
        f64::NEG_INFINITY
    } else {
        integ as f64 + fract as f64 / TRILLION
    }
}

// ----- server side: replies -----

/// `[code:1]`: the whole reply of put, putkeep, putcat, putshl, out, iterinit, sync,
/// optimize, vanish, copy, restore, setmst, and the failure reply of get, vsiz, iternext,
/// fwmkeys, addint, adddouble and ext.
pub fn reply_code(out: &mut Vec<u8>, code: u8) {
    out.push(code);
}

/// `[0][size:4][bytes]`: get, iternext, ext.
pub fn reply_value(out: &mut Vec<u8>, value: &[u8]) {
    out.push(OK);
    put_len(out, value.len());
    out.extend_from_slice(value);
}

/// `[0][n:4]`: vsiz (the value size) and addint (the sum).
pub fn reply_i32(out: &mut Vec<u8>, n: i32) {
    out.push(OK);
    out.extend_from_slice(&n.to_be_bytes());
}

/// `[0][n:8]`: rnum and size.
pub fn reply_u64(out: &mut Vec<u8>, n: u64) {
    out.push(OK);
    out.extend_from_slice(&n.to_be_bytes());
}

/// `[0][integ:8][fract:8]`: adddouble (see [`pack_double`]).
pub fn reply_double(out: &mut Vec<u8>, num: f64) {
    let (integ, fract) = pack_double(num);
    out.push(OK);
    out.extend_from_slice(&integ.to_be_bytes());
    out.extend_from_slice(&fract.to_be_bytes());
}

/// `[0][count:4]` then `count` × `[size:4][bytes]`: fwmkeys and misc.
pub fn reply_list<'i>(out: &mut Vec<u8>, items: impl IntoIterator<Item = &'i [u8]>) {
    out.push(OK);
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    let mut n = 0u32;
    for item in items {
        put_len(out, item.len());
        out.extend_from_slice(item);
        n = n.wrapping_add(1);
    }
    out[at..at + 4].copy_from_slice(&n.to_be_bytes());
}

/// `[0][count:4]` then `count` × `[ksiz:4][vsiz:4][key][value]`: mget.
pub fn reply_pairs<'i>(out: &mut Vec<u8>, pairs: impl IntoIterator<Item = (&'i [u8], &'i [u8])>) {
    out.push(OK);
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    let mut n = 0u32;
    for (k, v) in pairs {
        put_len(out, k.len());
        put_len(out, v.len());
        out.extend_from_slice(k);
        out.extend_from_slice(v);
        n = n.wrapping_add(1);
    }
    out[at..at + 4].copy_from_slice(&n.to_be_bytes());
}

/// `[0][size:4][text]`: stat (`name\tvalue\n` lines).
pub fn reply_stat(out: &mut Vec<u8>, text: &[u8]) {
    reply_value(out, text);
}

/// The failure reply of a command: nothing for putnr (which never answers) and repl (which
/// hangs up), `[1][0:4]` for mget and misc (whose clients read a count even on failure), `[1]`
/// for every other command.
pub fn reply_failure(out: &mut Vec<u8>, c: u8) {
    match c {
        cmd::PUTNR | cmd::REPL | cmd::KREPL => {}
        cmd::MGET | cmd::MISC => {
            out.push(FAIL);
            out.extend_from_slice(&[0; 4]);
        }
        _ => out.push(FAIL),
    }
}

// ----- client side: replies -----

/// A reply, owned.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// putnr: the server sends nothing.
    None,
    /// A bare code: the reply of the status-only commands, and every failure.
    Code(u8),
    /// get, iternext, ext.
    Value(Vec<u8>),
    /// vsiz (the value size), addint (the sum).
    Int(i32),
    /// adddouble (the sum).
    Double(f64),
    /// rnum, size.
    U64(u64),
    /// fwmkeys (keys), misc (result elements).
    List(Vec<Vec<u8>>),
    /// mget: (key, value) of every record found.
    Pairs(Vec<(Vec<u8>, Vec<u8>)>),
    /// stat: `name\tvalue\n` lines (invalid UTF-8 replaced).
    Stat(String),
    /// repl: the master's server id (the update-log stream that follows is not decoded here).
    Sid(u32),
}

/// A decoded reply of this protocol.
pub type DecodedReply = crate::DecodedReply<Reply>;

/// A reply that does not follow the protocol (the connection is unusable).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyError(pub &'static str);

impl std::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed Tokyo Tyrant reply: {}", self.0)
    }
}

impl std::error::Error for ReplyError {}

/// A size or count in a reply: negative as a signed 32-bit integer is malformed.
fn reply_size(v: u32) -> Result<usize, ReplyError> {
    if v > i32::MAX as u32 {
        Err(ReplyError("negative size"))
    } else {
        Ok(v as usize)
    }
}

/// Decode the reply to a request with command byte `c` from the start of `buf`. Nothing is
/// allocated for elements that have not arrived.
pub fn decode_reply(c: u8, buf: &[u8]) -> Result<DecodedReply, ReplyError> {
    let mut rd = Rd { buf, pos: 0 };
    match decode_reply_body(c, &mut rd)? {
        Some(reply) => Ok(DecodedReply::Complete {
            reply,
            consumed: rd.pos,
        }),
        None => Ok(DecodedReply::Incomplete),
    }
}

fn decode_reply_body(c: u8, rd: &mut Rd<'_>) -> Result<Option<Reply>, ReplyError> {
    macro_rules! need {
        ($e:expr) => {
            match $e {
                Some(v) => v,
                None => return Ok(None),
            }
        };
    }
    if cmd_name(c).is_none() {
        return Err(ReplyError("unknown command"));
    }
    if c == cmd::PUTNR {
        return Ok(Some(Reply::None));
    }
    if c == cmd::REPL {
        return Ok(Some(Reply::Sid(need!(rd.u32()))));
    }
    let code = need!(rd.bytes(1))[0];
    // mget and misc carry a count even on failure; everything else is a bare failure code.
    if code != OK {
        if c == cmd::MGET || c == cmd::MISC {
            need!(rd.u32());
        }
        return Ok(Some(Reply::Code(code)));
    }
    Ok(Some(match c {
        cmd::GET | cmd::ITERNEXT | cmd::EXT => {
            let n = reply_size(need!(rd.u32()))?;
            Reply::Value(need!(rd.bytes(n)).to_vec())
        }
        cmd::STAT => {
            let n = reply_size(need!(rd.u32()))?;
            Reply::Stat(String::from_utf8_lossy(need!(rd.bytes(n))).into_owned())
        }
        cmd::VSIZ | cmd::ADDINT => Reply::Int(need!(rd.u32()) as i32),
        cmd::ADDDOUBLE => {
            let integ = need!(rd.u64()) as i64;
            let fract = need!(rd.u64()) as i64;
            Reply::Double(unpack_double(integ, fract))
        }
        cmd::RNUM | cmd::SIZE => Reply::U64(need!(rd.u64())),
        cmd::FWMKEYS | cmd::MISC => {
            let count = reply_size(need!(rd.u32()))?;
            // First pass without allocating, so a huge count costs nothing until it arrives.
            let first = rd.pos;
            for _ in 0..count {
                let n = reply_size(need!(rd.u32()))?;
                need!(rd.bytes(n));
            }
            let end = rd.pos;
            rd.pos = first;
            let mut items = Vec::with_capacity(count);
            while rd.pos < end {
                let n = rd.u32().unwrap_or_default() as usize;
                items.push(rd.bytes(n).unwrap_or_default().to_vec());
            }
            Reply::List(items)
        }
        cmd::MGET => {
            let count = reply_size(need!(rd.u32()))?;
            let first = rd.pos;
            for _ in 0..count {
                let k = reply_size(need!(rd.u32()))?;
                let v = reply_size(need!(rd.u32()))?;
                need!(rd.bytes(k));
                need!(rd.bytes(v));
            }
            let end = rd.pos;
            rd.pos = first;
            let mut pairs = Vec::with_capacity(count);
            while rd.pos < end {
                let k = rd.u32().unwrap_or_default() as usize;
                let v = rd.u32().unwrap_or_default() as usize;
                let kb = rd.bytes(k).unwrap_or_default().to_vec();
                let vb = rd.bytes(v).unwrap_or_default().to_vec();
                pairs.push((kb, vb));
            }
            Reply::Pairs(pairs)
        }
        _ => Reply::Code(code),
    }))
}

#[cfg(test)]
mod tests;
