//! Kyoto Tycoon's replication stream (magic 0xB1 of its binary protocol), both sides. Sans-IO:
//! bytes in, frames and update-log operations out; and back. No engine, no sockets.
//!
//! All integers are big-endian. The conversation, as `ktserver.cc` (`do_bin_replication`, the
//! `Slave` thread) and `ktremotedb.h` (`ReplicationClient`) hold it:
//!
//! 1. The slave sends `[0xB1][flags:4][ts:8][sid:2]` ([`encode_request`], [`decode_request`]):
//!    `ts` is the highest time stamp it has already applied (the master sends only later ones),
//!    `sid` its own server id. Flag [`WHITESID`] asks for the messages that originated at `sid`
//!    only; without it the master leaves those out (they came from the slave).
//! 2. The master answers one byte: `0xB1` (go on) or `0xBF` (it has no update log, or could not
//!    read it; it closes) — [`encode_accept`], [`encode_refuse`], [`decode_accept`].
//! 3. Then frames ([`decode_frame`], [`encode_record`], [`encode_nop`]):
//!
//! | frame | bytes |
//! |---|---|
//! | record | `[0xB1][ts:8][size:4][msg:size]` |
//! | idle | `[0xB0][ts:8]`, answered by the slave with the one byte `0xB1` ([`encode_ack`], [`decode_ack`]) |
//!
//! A record of size 0 carries no message: the master sends one after every 256 messages in a
//! row that it filtered out (`Slave::DUMMYFREQ`), so the slave's time stamp moves on. When it
//! has nothing to send the master sends an idle frame whose `ts` is the current clock less one
//! second (but not less than the last record's), waits for the slave's `0xB1`, and sleeps
//! 0.1 s. The slave takes the larger of its time stamp and every frame's `ts` as the new
//! replication time stamp. The slave's reads time out after 60 s.
//!
//! A time stamp is the master's update-log clock: milliseconds since the epoch × 10^6 plus a
//! counter that orders messages within one millisecond (`UpdateLogger::clock_impl`); this
//! module carries it as a plain `u64`.
//!
//! A message ([`decode_msg`], [`encode_msg`]) is `[sid:2][dbid:2]` (the server where the change
//! originated, the index of the database it applies to) followed by one operation of the timed
//! database's update log (`kttimeddb.h`, `TimedDB::log_update` and `recover`):
//!
//! | op | byte | after it |
//! |---|---|---|
//! | set | 0xA1 | `[ksiz:varnum][vsiz:varnum][key][value]` |
//! | remove | 0xA2 | `[ksiz:varnum][key]` |
//! | clear | 0xA5 | nothing |
//!
//! The sizes are Kyoto Cabinet's variable-length numbers ([`write_varnum`], [`read_varnum`]),
//! and the message ends exactly where the key (and value) end. The value of a set is the value
//! as the database stores it: unless the database was opened with `ktopts=p` (persistent, no
//! expiration), it starts with the 5-byte big-endian expiration time ([`XT_WIDTH`]: absolute
//! seconds since the epoch, [`XT_MAX`] for "never"), which [`split_xt`] takes off. Nothing in
//! the message says which: master and slave must agree, so [`decode_msg`] is told.

/// The replication magic: the request's first byte, the master's "go on", a record's first
/// byte and the slave's answer to an idle frame (`BMREPLICATION`; the same byte as
/// [`crate::kt_bin::REPLICATION`]).
pub const MAGIC: u8 = 0xB1;
/// The first byte of an idle frame (`BMNOP`).
pub const NOP: u8 = 0xB0;
/// The master's refusal (`BMERROR`).
pub const ERROR: u8 = 0xBF;
/// Request flag: send only the messages that originated at the slave's `sid`.
pub const WHITESID: u32 = 1;
/// Bytes of the request, magic included.
pub const REQUEST_LEN: usize = 1 + 4 + 8 + 2;
/// Bytes of a record frame before its message: magic, ts, size.
pub const RECORD_HEADER: usize = 1 + 8 + 4;
/// Bytes of an idle frame.
pub const NOP_LEN: usize = 1 + 8;
/// Width of the expiration-time prefix of a stored value.
pub const XT_WIDTH: usize = 5;
/// The largest expiration time (2^40 − 1): the record never expires.
pub const XT_MAX: u64 = (1 << 40) - 1;
/// Bytes of a message before its operation: sid, dbid.
pub const MSG_HEADER: usize = 2 + 2;
/// Longest variable-length number Kyoto Cabinet writes (a full 64-bit value).
pub const VARNUM_MAX_LEN: usize = 10;

/// Operation bytes of the timed database's update log (`TimedDB::UpdateOperation`).
pub mod op {
    /// Set a record.
    pub const SET: u8 = 0xA1;
    /// Remove a record.
    pub const REMOVE: u8 = 0xA2;
    /// Remove every record.
    pub const CLEAR: u8 = 0xA5;
}

/// The slave's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Option bits ([`WHITESID`]); unknown bits are kept as sent (the master ignores them).
    pub flags: u32,
    /// The highest time stamp the slave has already applied.
    pub ts: u64,
    /// The slave's server id.
    pub sid: u16,
}

impl Request {
    /// Whether the slave asked only for messages that originated at its own `sid`.
    pub fn white_sid(&self) -> bool {
        self.flags & WHITESID != 0
    }
}

/// A frame of the master's stream (after its first byte, see [`decode_accept`]); a record's
/// message borrows from the input buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// One update-log message and its time stamp. An empty `msg` carries only the time stamp
    /// (the master sends one after skipping 256 messages in a row).
    Record { ts: u64, msg: &'a [u8] },
    /// The master is idle; the slave must answer [`encode_ack`].
    Nop { ts: u64 },
}

/// One operation of the update log; byte strings borrow from the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KtOp<'a> {
    /// Set `key` to `value`. With `xt: Some(t)` the stored value is the 5-byte expiration time
    /// `t` followed by `value` (a database without `ktopts=p`); with `None`, `value` is the
    /// stored value as it is.
    Set {
        key: &'a [u8],
        value: &'a [u8],
        xt: Option<u64>,
    },
    /// Remove `key` (a missing key is not an error on the slave).
    Remove { key: &'a [u8] },
    /// Remove every record of the database.
    Clear,
}

/// A message: where the change originated, which database it applies to, what it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Msg<'a> {
    /// The server id of the origin (the slave skips its own).
    pub sid: u16,
    /// The database index (the slave skips indexes it does not have).
    pub dbid: u16,
    pub op: KtOp<'a>,
}

/// What is wrong with a replication stream or message. Framing errors ([`Error::BadMagic`],
/// [`Error::TooLarge`]) leave the stream unsynchronised: close the connection. Message errors
/// concern one well-delimited record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// A byte that is not what this point of the conversation allows.
    BadMagic(u8),
    /// A record announces a message larger than the caller's bound.
    TooLarge { size: u64, max: usize },
    /// A message that does not follow the update log's format; says what is wrong.
    BadMsg(&'static str),
    /// An operation byte other than set, remove and clear (Kyoto Tycoon's slave ignores such
    /// messages; the master never writes them).
    Op(u8),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::BadMagic(b) => write!(f, "Kyoto Tycoon replication: unexpected byte {b:#04x}"),
            Error::TooLarge { size, max } => write!(
                f,
                "Kyoto Tycoon replication: message of {size} bytes over the limit of {max}"
            ),
            Error::BadMsg(what) => write!(f, "Kyoto Tycoon replication: bad message: {what}"),
            Error::Op(b) => write!(f, "Kyoto Tycoon replication: unknown operation {b:#04x}"),
        }
    }
}

impl std::error::Error for Error {}

fn be(buf: &[u8]) -> u64 {
    buf.iter().fold(0, |n, &b| (n << 8) | u64::from(b))
}

// ----- the request and the master's answer -----

/// Append the slave's request.
pub fn encode_request(out: &mut Vec<u8>, req: &Request) {
    out.push(MAGIC);
    out.extend_from_slice(&req.flags.to_be_bytes());
    out.extend_from_slice(&req.ts.to_be_bytes());
    out.extend_from_slice(&req.sid.to_be_bytes());
}

/// Decode the slave's request (magic included) from the start of `buf`: `Ok(None)` until its
/// 15 bytes are there.
pub fn decode_request(buf: &[u8]) -> Result<Option<(Request, usize)>, Error> {
    match buf.first() {
        None => return Ok(None),
        Some(&MAGIC) => {}
        Some(&b) => return Err(Error::BadMagic(b)),
    }
    let Some(b) = buf.get(..REQUEST_LEN) else {
        return Ok(None);
    };
    let req = Request {
        flags: be(&b[1..5]) as u32,
        ts: be(&b[5..13]),
        sid: be(&b[13..15]) as u16,
    };
    Ok(Some((req, REQUEST_LEN)))
}

/// Append the master's "go on" (`0xB1`), sent once before the first frame.
pub fn encode_accept(out: &mut Vec<u8>) {
    out.push(MAGIC);
}

/// Append the master's refusal (`0xBF`); the master then closes.
pub fn encode_refuse(out: &mut Vec<u8>) {
    out.push(ERROR);
}

/// Decode the master's first byte: `Ok(None)` if it has not arrived, `Some(true)` for "go on",
/// `Some(false)` for a refusal. Either takes one byte.
pub fn decode_accept(buf: &[u8]) -> Result<Option<bool>, Error> {
    match buf.first() {
        None => Ok(None),
        Some(&MAGIC) => Ok(Some(true)),
        Some(&ERROR) => Ok(Some(false)),
        Some(&b) => Err(Error::BadMagic(b)),
    }
}

/// Append the slave's answer to an idle frame (`0xB1`).
pub fn encode_ack(out: &mut Vec<u8>) {
    out.push(MAGIC);
}

/// Decode the slave's answer to an idle frame: `Ok(None)` if it has not arrived, else the one
/// byte it takes. Anything but `0xB1` is an error (the master closes).
pub fn decode_ack(buf: &[u8]) -> Result<Option<usize>, Error> {
    match buf.first() {
        None => Ok(None),
        Some(&MAGIC) => Ok(Some(1)),
        Some(&b) => Err(Error::BadMagic(b)),
    }
}

// ----- frames -----

/// Decode one frame from the start of `buf`: `Ok(None)` while it is incomplete, else the frame
/// and the bytes it took. A record whose message would exceed `max` bytes is an error as soon
/// as its header has arrived. Never panics.
pub fn decode_frame(buf: &[u8], max: usize) -> Result<Option<(Frame<'_>, usize)>, Error> {
    match buf.first() {
        None => Ok(None),
        Some(&NOP) => Ok(buf.get(..NOP_LEN).map(|b| {
            (
                Frame::Nop {
                    ts: be(&b[1..NOP_LEN]),
                },
                NOP_LEN,
            )
        })),
        Some(&MAGIC) => {
            let Some(head) = buf.get(..RECORD_HEADER) else {
                return Ok(None);
            };
            let ts = be(&head[1..9]);
            let size = be(&head[9..13]);
            let too_large = Error::TooLarge { size, max };
            let size = usize::try_from(size).map_err(|_| too_large)?;
            if size > max {
                return Err(too_large);
            }
            let end = RECORD_HEADER.checked_add(size).ok_or(too_large)?;
            Ok(buf
                .get(RECORD_HEADER..end)
                .map(|msg| (Frame::Record { ts, msg }, end)))
        }
        Some(&b) => Err(Error::BadMagic(b)),
    }
}

/// Append a record frame. `msg` must be shorter than 2^32 bytes; an empty one carries only the
/// time stamp.
pub fn encode_record(out: &mut Vec<u8>, ts: u64, msg: &[u8]) {
    out.push(MAGIC);
    out.extend_from_slice(&ts.to_be_bytes());
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(msg);
}

/// Append an idle frame.
pub fn encode_nop(out: &mut Vec<u8>, ts: u64) {
    out.push(NOP);
    out.extend_from_slice(&ts.to_be_bytes());
}

/// Append any frame.
pub fn encode_frame(out: &mut Vec<u8>, frame: &Frame<'_>) {
    match frame {
        Frame::Record { ts, msg } => encode_record(out, *ts, msg),
        Frame::Nop { ts } => encode_nop(out, *ts),
    }
}

// ----- variable-length numbers -----

/// Bytes [`write_varnum`] takes for `n` (1 to 10).
pub fn varnum_len(n: u64) -> usize {
    let bits = 64 - n.leading_zeros() as usize;
    bits.div_ceil(7).max(1)
}

/// Append `n` as Kyoto Cabinet's variable-length number (`kcutil.h`, `writevarnum`): base 128,
/// most significant group first, every byte but the last with its high bit set. 0 is `00`,
/// 127 `7F`, 128 `81 00`, 300 `82 2C`.
pub fn write_varnum(out: &mut Vec<u8>, n: u64) {
    let len = varnum_len(n);
    for i in (1..len).rev() {
        out.push(((n >> (7 * i)) & 0x7F) as u8 | 0x80);
    }
    out.push((n & 0x7F) as u8);
}

/// Read a variable-length number from the start of `buf`: the number and the bytes it took.
/// Like `readvarnum`, redundant leading `0x80` bytes are accepted; unlike it, a number that
/// runs past the end of `buf`, takes more than [`VARNUM_MAX_LEN`] bytes or exceeds 64 bits is
/// an error instead of a truncated or wrapped value.
pub fn read_varnum(buf: &[u8]) -> Result<(u64, usize), Error> {
    let mut n: u64 = 0;
    for (i, &b) in buf.iter().enumerate().take(VARNUM_MAX_LEN) {
        if n > u64::MAX >> 7 {
            return Err(Error::BadMsg("number over 64 bits"));
        }
        n = (n << 7) | u64::from(b & 0x7F);
        if b & 0x80 == 0 {
            return Ok((n, i + 1));
        }
    }
    if buf.len() >= VARNUM_MAX_LEN {
        Err(Error::BadMsg("number over 10 bytes"))
    } else {
        Err(Error::BadMsg("truncated number"))
    }
}

// ----- messages -----

/// Split a stored value into its expiration time and the value proper; `None` if it is shorter
/// than the 5-byte prefix.
pub fn split_xt(raw: &[u8]) -> Option<(u64, &[u8])> {
    (raw.len() >= XT_WIDTH).then(|| (be(&raw[..XT_WIDTH]), &raw[XT_WIDTH..]))
}

/// Append the 5-byte expiration-time prefix of a stored value (above [`XT_MAX`] it is
/// [`XT_MAX`], as Kyoto Tycoon caps it).
pub fn write_xt(out: &mut Vec<u8>, xt: u64) {
    out.extend_from_slice(&xt.min(XT_MAX).to_be_bytes()[8 - XT_WIDTH..]);
}

/// Decode a message (the `msg` of a [`Frame::Record`]). `xt_prefix` says whether set values
/// carry the 5-byte expiration time (the master's database has no `ktopts=p`): if so it is
/// split off into `xt`, and a shorter value is an error; if not, `xt` is `None` and `value` is
/// the stored value. An empty message (a time stamp only) is an error: check first.
pub fn decode_msg(msg: &[u8], xt_prefix: bool) -> Result<Msg<'_>, Error> {
    if msg.len() < MSG_HEADER {
        return Err(Error::BadMsg("shorter than its four-byte header"));
    }
    let sid = be(&msg[0..2]) as u16;
    let dbid = be(&msg[2..4]) as u16;
    let rest = &msg[MSG_HEADER..];
    let Some((&code, rest)) = rest.split_first() else {
        return Err(Error::BadMsg("no operation"));
    };
    let op = match code {
        op::SET => {
            let (ksiz, n) = read_varnum(rest)?;
            let rest = &rest[n..];
            let (vsiz, n) = read_varnum(rest)?;
            let rest = &rest[n..];
            if Some(rest.len() as u64) != ksiz.checked_add(vsiz) {
                return Err(Error::BadMsg("sizes do not match the message"));
            }
            let (key, raw) = rest.split_at(ksiz as usize);
            if xt_prefix {
                let (xt, value) =
                    split_xt(raw).ok_or(Error::BadMsg("value shorter than its expiration"))?;
                KtOp::Set {
                    key,
                    value,
                    xt: Some(xt),
                }
            } else {
                KtOp::Set {
                    key,
                    value: raw,
                    xt: None,
                }
            }
        }
        op::REMOVE => {
            let (ksiz, n) = read_varnum(rest)?;
            let key = &rest[n..];
            if key.len() as u64 != ksiz {
                return Err(Error::BadMsg("size does not match the message"));
            }
            KtOp::Remove { key }
        }
        op::CLEAR => {
            if !rest.is_empty() {
                return Err(Error::BadMsg("bytes after clear"));
            }
            KtOp::Clear
        }
        other => return Err(Error::Op(other)),
    };
    Ok(Msg { sid, dbid, op })
}

/// Append a message. A set with `xt: Some(t)` writes the value as `[t:5]` + `value`.
pub fn encode_msg(out: &mut Vec<u8>, msg: &Msg<'_>) {
    out.extend_from_slice(&msg.sid.to_be_bytes());
    out.extend_from_slice(&msg.dbid.to_be_bytes());
    match msg.op {
        KtOp::Set { key, value, xt } => {
            out.push(op::SET);
            write_varnum(out, key.len() as u64);
            let vsiz = value.len() + if xt.is_some() { XT_WIDTH } else { 0 };
            write_varnum(out, vsiz as u64);
            out.extend_from_slice(key);
            if let Some(xt) = xt {
                write_xt(out, xt);
            }
            out.extend_from_slice(value);
        }
        KtOp::Remove { key } => {
            out.push(op::REMOVE);
            write_varnum(out, key.len() as u64);
            out.extend_from_slice(key);
        }
        KtOp::Clear => out.push(op::CLEAR),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frames(buf: &[u8], max: usize) -> Result<Vec<Frame<'_>>, Error> {
        let mut pos = 0;
        let mut got = Vec::new();
        while let Some((f, n)) = decode_frame(&buf[pos..], max)? {
            assert!(n >= 1 && n <= buf.len() - pos);
            got.push(f);
            pos += n;
        }
        assert_eq!(pos, buf.len(), "a whole stream decodes to its end");
        Ok(got)
    }

    #[test]
    fn varnums_like_kyoto_cabinet() {
        let cases: [(u64, &[u8]); 9] = [
            (0, &[0x00]),
            (1, &[0x01]),
            (127, &[0x7F]),
            (128, &[0x81, 0x00]),
            (300, &[0x82, 0x2C]),
            (16383, &[0xFF, 0x7F]),
            (16384, &[0x81, 0x80, 0x00]),
            (
                u64::MAX >> 1,
                &[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F],
            ),
            (
                u64::MAX,
                &[0x81, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F],
            ),
        ];
        for (n, wire) in cases {
            let mut v = Vec::new();
            write_varnum(&mut v, n);
            assert_eq!(v, wire, "{n}");
            assert_eq!(varnum_len(n), wire.len());
            assert_eq!(read_varnum(wire), Ok((n, wire.len())));
            let mut longer = wire.to_vec();
            longer.push(0x55);
            assert_eq!(read_varnum(&longer), Ok((n, wire.len())));
            for cut in 0..wire.len() {
                assert!(read_varnum(&wire[..cut]).is_err(), "{n} cut {cut}");
            }
        }
        // Redundant leading groups are read, as readvarnum reads them.
        assert_eq!(read_varnum(&[0x80, 0x80, 0x05]), Ok((5, 3)));
        // Over 64 bits, over 10 bytes.
        assert!(
            read_varnum(&[0x82, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00]).is_err()
        );
        assert!(read_varnum(&[0x80; 11]).is_err());
        assert!(read_varnum(&[0x80; 10]).is_err());
    }

    /// A stream built byte by byte from `ktserver.cc` (`do_bin_replication`): the master's
    /// "go on", a record whose message sets "k" to "v" expiring at 2^40-1 on database 0 from
    /// server 3, a time-stamp-only record, an idle frame.
    #[test]
    fn hand_built_stream() {
        let msg: &[u8] = &[
            0x00, 0x03, // sid
            0x00, 0x00, // dbid
            0xA1, 0x01, 0x06, b'k', // set, ksiz 1, vsiz 6, key
            0xFF, 0xFF, 0xFF, 0xFF, 0xFF, b'v', // xt = 2^40 - 1, value
        ];
        let ts = 1_300_000_000_000u64 * 1_000_000 + 7;
        let wire: Vec<u8> = [
            &[0xB1][..],
            &[0xB1],
            &ts.to_be_bytes(),
            &(msg.len() as u32).to_be_bytes(),
            msg,
            &[0xB1],
            &(ts + 1).to_be_bytes(),
            &[0, 0, 0, 0],
            &[0xB0],
            &(ts + 2).to_be_bytes(),
        ]
        .concat();
        assert_eq!(decode_accept(&wire), Ok(Some(true)));
        let got = frames(&wire[1..], 64).unwrap();
        assert_eq!(
            got,
            [
                Frame::Record { ts, msg },
                Frame::Record {
                    ts: ts + 1,
                    msg: &[]
                },
                Frame::Nop { ts: ts + 2 }
            ]
        );
        let want = Msg {
            sid: 3,
            dbid: 0,
            op: KtOp::Set {
                key: b"k",
                value: b"v",
                xt: Some(XT_MAX),
            },
        };
        assert_eq!(decode_msg(msg, true), Ok(want));
        let mut again = Vec::new();
        encode_accept(&mut again);
        encode_record(&mut again, ts, msg);
        encode_record(&mut again, ts + 1, &[]);
        encode_nop(&mut again, ts + 2);
        assert_eq!(again, wire);
        let mut m = Vec::new();
        encode_msg(&mut m, &want);
        assert_eq!(m, msg);
        // The same message read from a ktopts=p database: the raw value, no expiration.
        assert_eq!(
            decode_msg(msg, false),
            Ok(Msg {
                sid: 3,
                dbid: 0,
                op: KtOp::Set {
                    key: b"k",
                    value: &msg[8..],
                    xt: None
                }
            })
        );
        assert_eq!(split_xt(&msg[8..]), Some((XT_MAX, &b"v"[..])));
    }

    #[test]
    fn request_round_trip() {
        let req = Request {
            flags: WHITESID,
            ts: 0x0102_0304_0506_0708,
            sid: 0x0A0B,
        };
        let mut wire = Vec::new();
        encode_request(&mut wire, &req);
        assert_eq!(wire, [0xB1, 0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 0x0A, 0x0B]);
        assert!(req.white_sid());
        for cut in 0..wire.len() {
            assert_eq!(decode_request(&wire[..cut]), Ok(None), "cut {cut}");
        }
        wire.push(0xB1);
        assert_eq!(decode_request(&wire), Ok(Some((req, REQUEST_LEN))));
        assert_eq!(decode_request(&[0xB8]), Err(Error::BadMagic(0xB8)));
        let plain = Request {
            flags: 0x8000_0000,
            ..req
        };
        assert!(!plain.white_sid());
    }

    #[test]
    fn accept_and_ack() {
        let mut v = Vec::new();
        encode_accept(&mut v);
        encode_refuse(&mut v);
        encode_ack(&mut v);
        assert_eq!(v, [0xB1, 0xBF, 0xB1]);
        assert_eq!(decode_accept(&[]), Ok(None));
        assert_eq!(decode_accept(&[0xB1]), Ok(Some(true)));
        assert_eq!(decode_accept(&[0xBF]), Ok(Some(false)));
        assert_eq!(decode_accept(&[0xB0]), Err(Error::BadMagic(0xB0)));
        assert_eq!(decode_ack(&[]), Ok(None));
        assert_eq!(decode_ack(&[0xB1, 0]), Ok(Some(1)));
        assert_eq!(decode_ack(&[0xBF]), Err(Error::BadMagic(0xBF)));
    }

    #[test]
    fn every_cut_is_incomplete() {
        let mut msg = Vec::new();
        encode_msg(
            &mut msg,
            &Msg {
                sid: 1,
                dbid: 2,
                op: KtOp::Remove { key: b"key" },
            },
        );
        let mut wire = Vec::new();
        encode_record(&mut wire, 5, &msg);
        let record_len = wire.len();
        encode_nop(&mut wire, 6);
        for cut in 0..record_len {
            assert_eq!(decode_frame(&wire[..cut], 64), Ok(None), "cut {cut}");
        }
        for cut in record_len..wire.len() {
            assert_eq!(decode_frame(&wire[record_len..cut], 64), Ok(None));
        }
        assert_eq!(
            frames(&wire, 64).unwrap(),
            [Frame::Record { ts: 5, msg: &msg }, Frame::Nop { ts: 6 }]
        );
    }

    #[test]
    fn bad_magic_and_oversized() {
        for b in [0x00, 0xB8, 0xBF, 0xC8, 0xA1] {
            assert_eq!(decode_frame(&[b], 64), Err(Error::BadMagic(b)));
        }
        let mut wire = Vec::new();
        encode_record(&mut wire, 1, &[0; 11]);
        assert_eq!(
            decode_frame(&wire[..RECORD_HEADER], 10),
            Err(Error::TooLarge { size: 11, max: 10 })
        );
        assert!(decode_frame(&wire, 11).unwrap().is_some());
        let huge = [&[MAGIC][..], &[0; 8], &[0xFF; 4]].concat();
        assert_eq!(decode_frame(&huge, usize::MAX >> 1), Ok(None));
        assert!(matches!(
            decode_frame(&huge, 1 << 20),
            Err(Error::TooLarge { .. })
        ));
    }

    #[test]
    fn malformed_msgs() {
        let m = |v: &[u8]| [&[0, 1, 0, 0][..], v].concat();
        assert!(decode_msg(&[], true).is_err());
        assert!(decode_msg(&[0, 1, 0], true).is_err());
        assert!(decode_msg(&m(&[]), true).is_err());
        // Sizes that do not add up to the message, both ways.
        assert!(decode_msg(&m(&[0xA1, 1, 1, b'k']), false).is_err());
        assert!(decode_msg(&m(&[0xA1, 1, 1, b'k', b'v', b'!']), false).is_err());
        assert!(decode_msg(&m(&[0xA1, 1, 1, b'k', b'v']), false).is_ok());
        assert!(decode_msg(&m(&[0xA2, 2, b'k']), false).is_err());
        assert!(decode_msg(&m(&[0xA2, 0, b'k']), false).is_err());
        assert!(decode_msg(&m(&[0xA5, 0]), false).is_err());
        // Truncated varints; sizes whose sum overflows.
        assert!(decode_msg(&m(&[0xA1, 0x81]), false).is_err());
        assert!(decode_msg(&m(&[0xA2]), false).is_err());
        let mut ovf = vec![0xA1];
        write_varnum(&mut ovf, u64::MAX);
        write_varnum(&mut ovf, 2);
        ovf.push(b'x');
        assert!(decode_msg(&m(&ovf), false).is_err());
        // A value shorter than the expiration prefix, when one is expected.
        assert!(decode_msg(&m(&[0xA1, 1, 4, b'k', 0, 0, 0, 0]), true).is_err());
        assert!(decode_msg(&m(&[0xA1, 1, 4, b'k', 0, 0, 0, 0]), false).is_ok());
        // Other operation bytes.
        for b in [0xA0, 0xA3, 0xA6, 0x00] {
            assert_eq!(decode_msg(&m(&[b]), false), Err(Error::Op(b)));
        }
    }

    #[test]
    fn xt_prefix() {
        let mut v = Vec::new();
        write_xt(&mut v, 0x01_0203_0405);
        write_xt(&mut v, u64::MAX);
        assert_eq!(v, [1, 2, 3, 4, 5, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]);
        assert_eq!(split_xt(&v), Some((0x01_0203_0405, &v[5..])));
        assert_eq!(split_xt(&v[..4]), None);
        assert_eq!(split_xt(&v[..5]), Some((0x01_0203_0405, &[][..])));
    }

    fn op_strategy() -> impl Strategy<Value = (u8, Vec<u8>, Vec<u8>, Option<u64>)> {
        (
            0u8..3,
            proptest::collection::vec(any::<u8>(), 0..200),
            proptest::collection::vec(any::<u8>(), 0..200),
            proptest::option::of(0..=XT_MAX),
        )
    }

    proptest! {
        #[test]
        fn varnums_round_trip(n in any::<u64>()) {
            let mut v = Vec::new();
            write_varnum(&mut v, n);
            prop_assert_eq!(v.len(), varnum_len(n));
            prop_assert_eq!(read_varnum(&v), Ok((n, v.len())));
        }

        #[test]
        fn msgs_round_trip(sid in any::<u16>(), dbid in any::<u16>(), (kind, k, v, xt) in op_strategy()) {
            let op = match kind {
                0 => KtOp::Set { key: &k, value: &v, xt },
                1 => KtOp::Remove { key: &k },
                _ => KtOp::Clear,
            };
            let msg = Msg { sid, dbid, op };
            let mut wire = Vec::new();
            encode_msg(&mut wire, &msg);
            let prefixed = !matches!(op, KtOp::Set { xt: None, .. });
            prop_assert_eq!(decode_msg(&wire, prefixed), Ok(msg));
            let mut frame = Vec::new();
            encode_record(&mut frame, 9, &wire);
            prop_assert_eq!(
                decode_frame(&frame, wire.len()),
                Ok(Some((Frame::Record { ts: 9, msg: &wire }, frame.len())))
            );
        }

        #[test]
        fn arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_frame(&buf, 64);
            let _ = decode_request(&buf);
            let _ = decode_accept(&buf);
            let _ = decode_ack(&buf);
            let _ = read_varnum(&buf);
            for prefixed in [false, true] {
                if let Ok(msg) = decode_msg(&buf, prefixed) {
                    let mut again = Vec::new();
                    encode_msg(&mut again, &msg);
                    prop_assert_eq!(decode_msg(&again, prefixed), Ok(msg));
                }
            }
        }
    }
}
