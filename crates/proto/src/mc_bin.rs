//! The memcached binary protocol: 24-byte headers, bodies of extras, key and value.
//!
//! `decode` borrows the key, extras and value from the input buffer. A header whose lengths do
//! not add up, or whose body is larger than the limits, is an error that says how many bytes to
//! skip (the whole announced body, so the stream stays in sync) or to close the connection.

use crate::mc_text::Limits;

pub const HEADER_LEN: usize = 24;
pub const REQ_MAGIC: u8 = 0x80;
pub const RES_MAGIC: u8 = 0x81;

/// Opcodes (memcached's protocol_binary.h).
pub mod op {
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const INCREMENTQ: u8 = 0x15;
    pub const DECREMENTQ: u8 = 0x16;
    pub const QUITQ: u8 = 0x17;
    pub const FLUSHQ: u8 = 0x18;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    pub const VERBOSITY: u8 = 0x1b;
    pub const TOUCH: u8 = 0x1c;
    pub const GAT: u8 = 0x1d;
    pub const GATQ: u8 = 0x1e;
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;
    /// SASL (memcached's `-S`): the mechanisms offered, a first step, a further step.
    pub const SASL_LIST_MECHS: u8 = 0x20;
    pub const SASL_AUTH: u8 = 0x21;
    pub const SASL_STEP: u8 = 0x22;
}

/// Response status codes.
pub mod status {
    pub const OK: u16 = 0x0000;
    pub const KEY_NOT_FOUND: u16 = 0x0001;
    pub const KEY_EXISTS: u16 = 0x0002;
    pub const TOO_LARGE: u16 = 0x0003;
    pub const INVALID_ARGUMENTS: u16 = 0x0004;
    pub const NOT_STORED: u16 = 0x0005;
    pub const NON_NUMERIC: u16 = 0x0006;
    pub const UNKNOWN_COMMAND: u16 = 0x0081;
    pub const OUT_OF_MEMORY: u16 = 0x0082;
    pub const NOT_SUPPORTED: u16 = 0x0083;
    /// Authentication failed, or a command came before authentication.
    pub const AUTH_ERROR: u16 = 0x0020;
    pub const AUTH_CONTINUE: u16 = 0x0021;
}

/// The user name and password of a SASL PLAIN message (RFC 4616: `[authzid] NUL authcid NUL
/// passwd`); `None` when it is not one.
pub fn sasl_plain(msg: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut parts = msg.splitn(3, |&b| b == 0);
    let _authzid = parts.next()?;
    let user = parts.next()?;
    let pass = parts.next()?;
    (!user.is_empty()).then_some((user, pass))
}

/// One request: the header fields that matter and borrowed body parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    pub opcode: u8,
    pub opaque: u32,
    pub cas: u64,
    pub extras: &'a [u8],
    pub key: &'a [u8],
    pub value: &'a [u8],
}

impl Request<'_> {
    /// A quiet variant: no reply on success (on a miss for the get family).
    pub fn quiet(&self) -> bool {
        matches!(
            self.opcode,
            op::GETQ
                | op::GETKQ
                | op::SETQ
                | op::ADDQ
                | op::REPLACEQ
                | op::DELETEQ
                | op::INCREMENTQ
                | op::DECREMENTQ
                | op::QUITQ
                | op::FLUSHQ
                | op::APPENDQ
                | op::PREPENDQ
                | op::GATQ
                | op::GATKQ
        )
    }

    fn be32(b: &[u8], at: usize) -> Option<u32> {
        Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
    }
    fn be64(b: &[u8], at: usize) -> Option<u64> {
        Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
    }
    /// Set / add / replace extras: (flags, expiration).
    pub fn store_extras(&self) -> Option<(u32, u32)> {
        (self.extras.len() == 8)
            .then(|| Some((Self::be32(self.extras, 0)?, Self::be32(self.extras, 4)?)))
            .flatten()
    }
    /// Increment / decrement extras: (delta, initial, expiration).
    pub fn arith_extras(&self) -> Option<(u64, u64, u32)> {
        (self.extras.len() == 20)
            .then(|| {
                Some((
                    Self::be64(self.extras, 0)?,
                    Self::be64(self.extras, 8)?,
                    Self::be32(self.extras, 16)?,
                ))
            })
            .flatten()
    }
    /// A single u32 extra (touch / gat expiration, flush delay, verbosity), if present.
    pub fn u32_extra(&self) -> Option<u32> {
        (self.extras.len() == 4)
            .then(|| Self::be32(self.extras, 0))
            .flatten()
    }
}

/// The result of decoding the start of a buffer (see [`crate::Decoded`]).
pub type Decoded<'a> = crate::Decoded<Request<'a>>;

/// A request that cannot be served as sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// The status to answer with (`None`: close without answering — not a binary request).
    pub status: Option<u16>,
    pub opcode: u8,
    pub opaque: u32,
    /// Bytes to discard (may exceed what arrived: keep discarding as it comes).
    pub consumed: usize,
    pub close: bool,
    /// A SET refused as too large: memcached removes the key's old value so that no reader
    /// sees stale data. Where the key is in the buffer (start, length).
    pub unlink: Option<(usize, usize)>,
    /// A request refused as too large: the size of its value.
    pub value_len: Option<u64>,
}

/// The opcode with its quiet form mapped to the loud one (memcached treats them alike but
/// for the replies).
pub fn loud(opcode: u8) -> u8 {
    match opcode {
        op::SETQ => op::SET,
        op::ADDQ => op::ADD,
        op::REPLACEQ => op::REPLACE,
        op::DELETEQ => op::DELETE,
        op::INCREMENTQ => op::INCREMENT,
        op::DECREMENTQ => op::DECREMENT,
        op::QUITQ => op::QUIT,
        op::FLUSHQ => op::FLUSH,
        op::APPENDQ => op::APPEND,
        op::PREPENDQ => op::PREPEND,
        op::GETQ => op::GET,
        op::GETKQ => op::GETK,
        op::GATQ => op::GAT,
        op::GATKQ => op::GATK,
        o => o,
    }
}

/// Whether memcached serves the opcode, and whether the key, extras and body lengths have the
/// shape it requires of it (memcached 1.6.18's `dispatch_bin_command`). `None`: an opcode it
/// does not serve (VERBOSITY among them: 1.6 answers it as unknown).
fn well_formed(opcode: u8, klen: usize, elen: usize, blen: usize) -> Option<bool> {
    Some(match loud(opcode) {
        op::VERSION | op::NOOP | op::QUIT => elen == 0 && klen == 0 && blen == 0,
        op::FLUSH => klen == 0 && blen == elen && (elen == 0 || elen == 4),
        op::SET | op::ADD | op::REPLACE => elen == 8 && klen != 0 && blen >= klen + 8,
        op::GET | op::GETK => elen == 0 && blen == klen && klen > 0,
        op::DELETE => klen > 0 && elen == 0 && blen == klen,
        op::INCREMENT | op::DECREMENT => klen > 0 && elen == 20 && blen == klen + elen,
        op::APPEND | op::PREPEND => klen > 0 && elen == 0,
        op::STAT => elen == 0,
        op::TOUCH | op::GAT | op::GATK => elen == 4 && klen != 0,
        op::SASL_LIST_MECHS => elen == 0 && klen == 0 && blen == 0,
        // The key names the mechanism; the value is its message.
        op::SASL_AUTH | op::SASL_STEP => elen == 0 && klen > 0,
        _ => return None,
    })
}

/// Decode one request from the start of `buf`.
///
/// As memcached: a header whose key and extras exceed its body, a key over 250 bytes or a
/// body of the wrong shape for its opcode is answered "Invalid arguments" and the connection
/// is closed; an opcode memcached does not serve is answered "Unknown command" and its body
/// skipped; a value whose item would be over the size limit ([`crate::mc_text::item_size`])
/// is answered "Too large." and skipped as it arrives.
pub fn decode<'a>(buf: &'a [u8], limits: &Limits) -> Result<Decoded<'a>, DecodeError> {
    if buf.len() < HEADER_LEN {
        if !buf.is_empty() && buf[0] != REQ_MAGIC {
            return Err(bad_magic());
        }
        return Ok(Decoded::Incomplete);
    }
    if buf[0] != REQ_MAGIC {
        return Err(bad_magic());
    }
    let opcode = buf[1];
    let klen = u16::from_be_bytes([buf[2], buf[3]]) as usize;
    let elen = buf[4] as usize;
    let blen = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize;
    let opaque = u32::from_be_bytes([buf[12], buf[13], buf[14], buf[15]]);
    let cas = u64::from_be_bytes(buf[16..24].try_into().unwrap_or_default());
    let err = |status, consumed: usize, close| DecodeError {
        status: Some(status),
        opcode,
        opaque,
        consumed,
        close,
        unlink: None,
        value_len: None,
    };
    if klen + elen > blen || klen > limits.max_key {
        // Nothing after this can be trusted.
        return Err(err(status::INVALID_ARGUMENTS, buf.len(), true));
    }
    let total = HEADER_LEN + blen;
    match well_formed(opcode, klen, elen, blen) {
        None => return Err(err(status::UNKNOWN_COMMAND, total, false)),
        Some(false) => return Err(err(status::INVALID_ARGUMENTS, buf.len(), true)),
        Some(true) => {}
    }
    let vlen = blen - klen - elen;
    let stores = matches!(
        loud(opcode),
        op::SET | op::ADD | op::REPLACE | op::APPEND | op::PREPEND
    );
    if stores {
        // The item's size counts its flags (the first 4 bytes of the extras) and its key,
        // which come first: wait for them (a few hundred bytes at most), not for the value.
        let head = HEADER_LEN + elen + klen;
        if buf.len() < head {
            return Ok(Decoded::Incomplete);
        }
        let flags = if elen >= 4 {
            u32::from_be_bytes([buf[24], buf[25], buf[26], buf[27]])
        } else {
            0
        };
        if vlen > limits.max_value
            || crate::mc_text::item_size(klen, flags, vlen) > limits.max_item as u64
        {
            let mut e = err(status::TOO_LARGE, total, false);
            e.value_len = Some(vlen as u64);
            if loud(opcode) == op::SET {
                e.unlink = Some((HEADER_LEN + elen, klen));
            }
            return Err(e);
        }
    } else if vlen > limits.max_item {
        return Err(err(status::TOO_LARGE, total, false));
    }
    if buf.len() < total {
        return Ok(Decoded::Incomplete);
    }
    let body = &buf[HEADER_LEN..total];
    Ok(Decoded::Complete {
        request: Request {
            opcode,
            opaque,
            cas,
            extras: &body[..elen],
            key: &body[elen..elen + klen],
            value: &body[elen + klen..],
        },
        consumed: total,
    })
}

fn bad_magic() -> DecodeError {
    DecodeError {
        status: None,
        opcode: 0,
        opaque: 0,
        consumed: 0,
        close: true,
        unlink: None,
        value_len: None,
    }
}

/// Append a request packet (for clients, load generators and tests).
pub fn encode_request(
    out: &mut Vec<u8>,
    opcode: u8,
    opaque: u32,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    let head = Head {
        magic: REQ_MAGIC,
        opcode,
        vbucket_or_status: 0,
        opaque,
        cas,
    };
    head.encode(out, extras, key, value.len());
    out.extend_from_slice(value);
}

/// The fixed fields of a packet header (requests carry a vbucket where responses carry the
/// status; the data type is always 0).
struct Head {
    magic: u8,
    opcode: u8,
    vbucket_or_status: u16,
    opaque: u32,
    cas: u64,
}

impl Head {
    /// Append the 24-byte header (its body length counting a value of `value_len` bytes),
    /// the extras and the key.
    fn encode(&self, out: &mut Vec<u8>, extras: &[u8], key: &[u8], value_len: usize) {
        out.push(self.magic);
        out.push(self.opcode);
        out.extend_from_slice(&(key.len() as u16).to_be_bytes());
        out.push(extras.len() as u8);
        out.push(0);
        out.extend_from_slice(&self.vbucket_or_status.to_be_bytes());
        out.extend_from_slice(&((extras.len() + key.len() + value_len) as u32).to_be_bytes());
        out.extend_from_slice(&self.opaque.to_be_bytes());
        out.extend_from_slice(&self.cas.to_be_bytes());
        out.extend_from_slice(extras);
        out.extend_from_slice(key);
    }
}

/// Append a response packet.
#[allow(clippy::too_many_arguments)]
pub fn encode_response(
    out: &mut Vec<u8>,
    opcode: u8,
    status: u16,
    opaque: u32,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    encode_response_header(out, opcode, status, opaque, cas, extras, key, value.len());
    out.extend_from_slice(value);
}

/// Append a response packet up to its value: the header (whose body length counts a value of
/// `value_len` bytes), the extras and the key. The caller sends the value after it.
#[allow(clippy::too_many_arguments)]
pub fn encode_response_header(
    out: &mut Vec<u8>,
    opcode: u8,
    status: u16,
    opaque: u32,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value_len: usize,
) {
    let head = Head {
        magic: RES_MAGIC,
        opcode,
        vbucket_or_status: status,
        opaque,
        cas,
    };
    head.encode(out, extras, key, value_len);
}

/// Append an error response whose body is the status text (as memcached sends).
pub fn encode_error(out: &mut Vec<u8>, opcode: u8, status: u16, opaque: u32) {
    let text: &[u8] = match status {
        status::KEY_NOT_FOUND => b"Not found",
        status::KEY_EXISTS => b"Data exists for key.",
        status::TOO_LARGE => b"Too large.",
        status::INVALID_ARGUMENTS => b"Invalid arguments",
        status::NOT_STORED => b"Not stored.",
        status::NON_NUMERIC => b"Non-numeric server-side value for incr or decr",
        status::UNKNOWN_COMMAND => b"Unknown command",
        status::NOT_SUPPORTED => b"Not supported: refused by the server's mask",
        status::AUTH_ERROR => b"Auth failure.",
        _ => b"Out of memory",
    };
    encode_response(out, opcode, status, opaque, 0, &[], &[], text);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sasl_plain_splits_user_and_password() {
        assert_eq!(
            sasl_plain(b"\0alice\0pw"),
            Some((&b"alice"[..], &b"pw"[..]))
        );
        assert_eq!(
            sasl_plain(b"z\0alice\0p\0w"),
            Some((&b"alice"[..], &b"p\0w"[..]))
        );
        assert_eq!(sasl_plain(b"\0\0pw"), None);
        assert_eq!(sasl_plain(b"alice"), None);
    }

    fn packet(
        opcode: u8,
        opaque: u32,
        cas: u64,
        extras: &[u8],
        key: &[u8],
        value: &[u8],
    ) -> Vec<u8> {
        let mut v = Vec::new();
        encode_request(&mut v, opcode, opaque, cas, extras, key, value);
        v
    }

    #[test]
    fn decodes_a_set_and_splits_anywhere() {
        let mut extras = 7u32.to_be_bytes().to_vec();
        extras.extend_from_slice(&100u32.to_be_bytes());
        let p = packet(op::SETQ, 42, 9, &extras, b"key", b"value");
        for cut in 0..p.len() {
            assert_eq!(
                decode(&p[..cut], &Limits::default()),
                Ok(Decoded::Incomplete)
            );
        }
        match decode(&p, &Limits::default()) {
            Ok(Decoded::Complete { request, consumed }) => {
                assert_eq!(consumed, p.len());
                assert_eq!(request.key, b"key");
                assert_eq!(request.value, b"value");
                assert_eq!(request.opaque, 42);
                assert_eq!(request.cas, 9);
                assert_eq!(request.store_extras(), Some((7, 100)));
                assert!(request.quiet());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn errors() {
        // Key and extras longer than the body: close.
        let mut p = packet(op::GET, 1, 0, &[], b"k", b"");
        p[11] = 0;
        assert!(decode(&p, &Limits::default()).unwrap_err().close);
        // A huge body is refused and skipped whole.
        let mut p = packet(op::SET, 1, 0, &[0; 8], b"k", b"");
        p[8..12].copy_from_slice(&(u32::MAX).to_be_bytes());
        let e = decode(&p, &Limits::default()).unwrap_err();
        assert_eq!(
            (e.status, e.consumed, e.close),
            (Some(status::TOO_LARGE), 24 + u32::MAX as usize, false)
        );
        // Not a request at all.
        assert!(decode(b"get k\r\n", &Limits::default()).unwrap_err().close);
    }

    #[test]
    fn responses() {
        let mut out = Vec::new();
        encode_response(
            &mut out,
            op::GETK,
            status::OK,
            5,
            77,
            &3u32.to_be_bytes(),
            b"k",
            b"v",
        );
        assert_eq!(out.len(), 24 + 4 + 1 + 1);
        assert_eq!(out[0], RES_MAGIC);
        assert_eq!(u16::from_be_bytes([out[2], out[3]]), 1);
        assert_eq!(u32::from_be_bytes(out[12..16].try_into().unwrap()), 5);
        assert_eq!(u64::from_be_bytes(out[16..24].try_into().unwrap()), 77);
    }

    proptest! {
        #[test]
        fn never_panics(buf in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut buf = buf;
            if !buf.is_empty() { buf[0] = REQ_MAGIC; }
            match decode(&buf, &Limits::default()) {
                Ok(Decoded::Complete { consumed, request }) => {
                    prop_assert!(consumed <= buf.len());
                    let _ = (request.store_extras(), request.arith_extras(), request.u32_extra());
                }
                Ok(Decoded::Incomplete) | Err(_) => {}
            }
        }
    }
}
