//! Kyoto Tycoon's binary protocol: the compact frames that Kyoto Tycoon's own C++ client
//! (`RemoteDB::set_bulk_binary` and friends) and Python clients such as `ukt` use for bulk
//! operations. Sans-IO: bytes in, requests out; replies in, bytes out.
//!
//! Every integer is big-endian. A request starts with a magic byte:
//!
//! | magic  | request | layout after the magic |
//! |--------|---------|------------------------|
//! | `0xB8` | set_bulk | flags u32, count u32, count × (db u16, ksiz u32, vsiz u32, xt i64, key, value) |
//! | `0xB9` | remove_bulk | flags u32, count u32, count × (db u16, ksiz u32, key) |
//! | `0xBA` | get_bulk | flags u32, count u32, count × (db u16, ksiz u32, key) |
//! | `0xB4` | play_script | flags u32, nsiz u32, count u32, name, count × (ksiz u32, vsiz u32, key, value) |
//! | `0xB1` | replication | flags u32, ts u64, sid u16 (a slave asking for the update log: `repl_kt`) |
//!
//! Flag bit 0 (`0x01`) asks for no reply (get_bulk always replies). Replies start with the
//! request's magic, or are the single byte `0xBF` on any error:
//!
//! * set_bulk, remove_bulk: magic, count u32 (records stored / removed);
//! * get_bulk: magic, count u32, count × (db u16, ksiz u32, vsiz u32, xt i64, key, value);
//! * play_script: magic, count u32, count × (ksiz u32, vsiz u32, key, value).

/// set_bulk.
pub const SET_BULK: u8 = 0xB8;
/// remove_bulk.
pub const REMOVE_BULK: u8 = 0xB9;
/// get_bulk.
pub const GET_BULK: u8 = 0xBA;
/// play_script (a Lua procedure).
pub const PLAY_SCRIPT: u8 = 0xB4;
/// replication (a slave asking for the update log).
pub const REPLICATION: u8 = 0xB1;
/// The error reply.
pub const ERROR: u8 = 0xBF;
/// Flag: the client does not read a reply.
pub const NO_REPLY: u32 = 0x01;

/// Whether a connection's first byte selects this protocol.
pub fn is_magic(b: u8) -> bool {
    matches!(
        b,
        SET_BULK | REMOVE_BULK | GET_BULK | PLAY_SCRIPT | REPLICATION
    )
}

/// Codec configuration: sizes above these are refused before anything is allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest key (also a play_script procedure name and argument key).
    pub max_key: usize,
    /// Longest value (also a play_script argument value).
    pub max_value: usize,
    /// Most records (or script arguments) in one request.
    pub max_records: usize,
    /// Most bytes of one whole request, magic included.
    pub max_frame: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_key: 64 * 1024,
            max_value: 1024 * 1024,
            max_records: 1 << 20,
            max_frame: 64 << 20,
        }
    }
}

/// One record of set_bulk: (database index, key, value, xt).
pub type SetRecord<'a> = (u16, &'a [u8], &'a [u8], i64);

/// One request; every byte string borrows from the input buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    SetBulk {
        no_reply: bool,
        records: Vec<SetRecord<'a>>,
    },
    RemoveBulk {
        no_reply: bool,
        keys: Vec<(u16, &'a [u8])>,
    },
    GetBulk {
        keys: Vec<(u16, &'a [u8])>,
    },
    PlayScript {
        no_reply: bool,
        name: &'a [u8],
        args: Vec<(&'a [u8], &'a [u8])>,
    },
    /// A slave asking for the update log after `ts` (`crate::repl_kt::Request`); the
    /// connection becomes a replication stream.
    Replication {
        flags: u32,
        ts: u64,
        sid: u16,
    },
}

impl Request<'_> {
    /// The magic byte of this request (and of its successful reply).
    pub fn magic(&self) -> u8 {
        match self {
            Request::SetBulk { .. } => SET_BULK,
            Request::RemoveBulk { .. } => REMOVE_BULK,
            Request::GetBulk { .. } => GET_BULK,
            Request::PlayScript { .. } => PLAY_SCRIPT,
            Request::Replication { .. } => REPLICATION,
        }
    }

    /// Whether the client asked for no reply (never for get_bulk and replication).
    pub fn no_reply(&self) -> bool {
        match self {
            Request::SetBulk { no_reply, .. }
            | Request::RemoveBulk { no_reply, .. }
            | Request::PlayScript { no_reply, .. } => *no_reply,
            Request::GetBulk { .. } | Request::Replication { .. } => false,
        }
    }
}

/// The result of decoding the start of a buffer (see [`crate::Decoded`]).
pub type Decoded<'a> = crate::Decoded<Request<'a>>;

/// A request that cannot be served. Every error of this protocol leaves the stream
/// unsynchronised (`close` is always true today): send [`ERROR`] (see [`reply_error`]) and
/// close the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// Bytes examined before the error (at least 1).
    pub consumed: usize,
    /// Hang up after sending the error byte.
    pub close: bool,
    /// Refused for a value over `max_value` (set_bulk): the size of that value.
    pub value_len: Option<u64>,
}

enum Fail {
    Incomplete,
    Bad,
    /// A set_bulk value of this many bytes, over `max_value`.
    TooLarge(usize),
}

struct Rd<'a> {
    buf: &'a [u8],
    pos: usize,
    max_frame: usize,
}

impl<'a> Rd<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Fail> {
        let end = self.pos.checked_add(n).ok_or(Fail::Bad)?;
        if end > self.max_frame {
            return Err(Fail::Bad);
        }
        let s = self.buf.get(self.pos..end).ok_or(Fail::Incomplete)?;
        self.pos = end;
        Ok(s)
    }
    fn u16(&mut self) -> Result<u16, Fail> {
        let s = self.take(2)?;
        Ok(u16::from_be_bytes([s[0], s[1]]))
    }
    fn u32(&mut self) -> Result<u32, Fail> {
        let s = self.take(4)?;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self) -> Result<u64, Fail> {
        let s = self.take(8)?;
        let mut b = [0u8; 8];
        b.copy_from_slice(s);
        Ok(u64::from_be_bytes(b))
    }
    fn i64(&mut self) -> Result<i64, Fail> {
        let s = self.take(8)?;
        let mut b = [0u8; 8];
        b.copy_from_slice(s);
        Ok(i64::from_be_bytes(b))
    }
    /// A length from the wire, refused above `max`.
    fn len(&mut self, max: usize) -> Result<usize, Fail> {
        let n = usize::try_from(self.u32()?).map_err(|_| Fail::Bad)?;
        if n > max {
            return Err(Fail::Bad);
        }
        Ok(n)
    }
}

/// Vectors start no larger than this, whatever count the wire announces; they only grow as
/// records actually arrive.
const INITIAL_CAPACITY: usize = 64;

fn body<'a>(rd: &mut Rd<'a>, limits: &Limits) -> Result<Request<'a>, Fail> {
    let magic = rd.take(1)?[0];
    if magic == REPLICATION {
        let flags = rd.u32()?;
        let ts = rd.u64()?;
        let sid = rd.u16()?;
        return Ok(Request::Replication { flags, ts, sid });
    }
    if !matches!(magic, SET_BULK | REMOVE_BULK | GET_BULK | PLAY_SCRIPT) {
        return Err(Fail::Bad);
    }
    let flags = rd.u32()?;
    let no_reply = flags & NO_REPLY != 0;
    if magic == PLAY_SCRIPT {
        let nsiz = rd.len(limits.max_key)?;
        let count = rd.len(limits.max_records)?;
        let name = rd.take(nsiz)?;
        let mut args = Vec::with_capacity(count.min(INITIAL_CAPACITY));
        for _ in 0..count {
            let ksiz = rd.len(limits.max_key)?;
            let vsiz = rd.len(limits.max_value)?;
            let k = rd.take(ksiz)?;
            let v = rd.take(vsiz)?;
            args.push((k, v));
        }
        return Ok(Request::PlayScript {
            no_reply,
            name,
            args,
        });
    }
    let count = rd.len(limits.max_records)?;
    if magic == SET_BULK {
        let mut records = Vec::with_capacity(count.min(INITIAL_CAPACITY));
        for _ in 0..count {
            let db = rd.u16()?;
            let ksiz = rd.len(limits.max_key)?;
            let vsiz = rd.len(usize::MAX)?;
            if vsiz > limits.max_value {
                return Err(Fail::TooLarge(vsiz));
            }
            let xt = rd.i64()?;
            let k = rd.take(ksiz)?;
            let v = rd.take(vsiz)?;
            records.push((db, k, v, xt));
        }
        return Ok(Request::SetBulk { no_reply, records });
    }
    let mut keys = Vec::with_capacity(count.min(INITIAL_CAPACITY));
    for _ in 0..count {
        let db = rd.u16()?;
        let ksiz = rd.len(limits.max_key)?;
        keys.push((db, rd.take(ksiz)?));
    }
    Ok(if magic == GET_BULK {
        Request::GetBulk { keys }
    } else {
        Request::RemoveBulk { no_reply, keys }
    })
}

/// Decode the request at the start of `buf`. `Incomplete` until the whole frame has arrived;
/// a frame that would exceed `limits` is an error as soon as its announced sizes say so.
pub fn decode<'a>(buf: &'a [u8], limits: &Limits) -> Result<Decoded<'a>, DecodeError> {
    let mut rd = Rd {
        buf,
        pos: 0,
        max_frame: limits.max_frame.max(1),
    };
    match body(&mut rd, limits) {
        Ok(request) => Ok(Decoded::Complete {
            request,
            consumed: rd.pos,
        }),
        Err(Fail::Incomplete) => Ok(Decoded::Incomplete),
        Err(Fail::Bad) => Err(DecodeError {
            consumed: rd.pos.max(1),
            close: true,
            value_len: None,
        }),
        Err(Fail::TooLarge(n)) => Err(DecodeError {
            consumed: rd.pos.max(1),
            close: true,
            value_len: Some(n as u64),
        }),
    }
}

// ----- server side: replies -----

/// set_bulk / remove_bulk success: the magic and a count.
pub fn reply_count(out: &mut Vec<u8>, magic: u8, n: u32) {
    out.push(magic);
    out.extend_from_slice(&n.to_be_bytes());
}

/// get_bulk success: the records found, as (database index, key, value, xt).
pub fn reply_records(out: &mut Vec<u8>, records: &[(u16, &[u8], &[u8], i64)]) {
    out.push(GET_BULK);
    out.extend_from_slice(&(records.len() as u32).to_be_bytes());
    for (db, k, v, xt) in records {
        out.extend_from_slice(&db.to_be_bytes());
        out.extend_from_slice(&(k.len() as u32).to_be_bytes());
        out.extend_from_slice(&(v.len() as u32).to_be_bytes());
        out.extend_from_slice(&xt.to_be_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(v);
    }
}

/// play_script success: the procedure's output pairs.
pub fn reply_pairs(out: &mut Vec<u8>, pairs: &[(&[u8], &[u8])]) {
    out.push(PLAY_SCRIPT);
    out.extend_from_slice(&(pairs.len() as u32).to_be_bytes());
    for (k, v) in pairs {
        out.extend_from_slice(&(k.len() as u32).to_be_bytes());
        out.extend_from_slice(&(v.len() as u32).to_be_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(v);
    }
}

/// Any failure: the single byte [`ERROR`].
pub fn reply_error(out: &mut Vec<u8>) {
    out.push(ERROR);
}

// ----- client side (tests, fuzzing, tools) -----

/// Encode a request as a client sends it (get_bulk with flags 0).
pub fn encode_request(req: &Request<'_>, out: &mut Vec<u8>) {
    let flags = |nr: bool| if nr { NO_REPLY } else { 0 };
    let len = |s: &[u8]| (s.len() as u32).to_be_bytes();
    out.push(req.magic());
    match req {
        Request::SetBulk { no_reply, records } => {
            out.extend_from_slice(&flags(*no_reply).to_be_bytes());
            out.extend_from_slice(&(records.len() as u32).to_be_bytes());
            for (db, k, v, xt) in records {
                out.extend_from_slice(&db.to_be_bytes());
                out.extend_from_slice(&len(k));
                out.extend_from_slice(&len(v));
                out.extend_from_slice(&xt.to_be_bytes());
                out.extend_from_slice(k);
                out.extend_from_slice(v);
            }
        }
        Request::RemoveBulk { no_reply, keys } => {
            out.extend_from_slice(&flags(*no_reply).to_be_bytes());
            encode_keys(keys, out);
        }
        Request::GetBulk { keys } => {
            out.extend_from_slice(&0u32.to_be_bytes());
            encode_keys(keys, out);
        }
        Request::PlayScript {
            no_reply,
            name,
            args,
        } => {
            out.extend_from_slice(&flags(*no_reply).to_be_bytes());
            out.extend_from_slice(&len(name));
            out.extend_from_slice(&(args.len() as u32).to_be_bytes());
            out.extend_from_slice(name);
            for (k, v) in args {
                out.extend_from_slice(&len(k));
                out.extend_from_slice(&len(v));
                out.extend_from_slice(k);
                out.extend_from_slice(v);
            }
        }
        Request::Replication { flags, ts, sid } => {
            out.extend_from_slice(&flags.to_be_bytes());
            out.extend_from_slice(&ts.to_be_bytes());
            out.extend_from_slice(&sid.to_be_bytes());
        }
    }
}

fn encode_keys(keys: &[(u16, &[u8])], out: &mut Vec<u8>) {
    out.extend_from_slice(&(keys.len() as u32).to_be_bytes());
    for (db, k) in keys {
        out.extend_from_slice(&db.to_be_bytes());
        out.extend_from_slice(&(k.len() as u32).to_be_bytes());
        out.extend_from_slice(k);
    }
}

/// A decoded reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The error byte.
    Error,
    /// set_bulk / remove_bulk.
    Count(u32),
    /// get_bulk: (database index, key, value, xt).
    Records(Vec<(u16, Vec<u8>, Vec<u8>, i64)>),
    /// play_script.
    Pairs(Vec<(Vec<u8>, Vec<u8>)>),
}

/// A decoded reply of this protocol.
pub type DecodedReply = crate::DecodedReply<Reply>;

/// A reply that does not follow the protocol (the connection is unusable).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyError(pub &'static str);

impl std::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed Kyoto Tycoon binary reply: {}", self.0)
    }
}

impl std::error::Error for ReplyError {}

/// Decode the reply to a request whose magic is `magic`.
pub fn decode_reply(magic: u8, buf: &[u8]) -> Result<DecodedReply, ReplyError> {
    let mut rd = Rd {
        buf,
        pos: 0,
        max_frame: usize::MAX,
    };
    match reply_body(magic, &mut rd) {
        Ok(reply) => Ok(DecodedReply::Complete {
            reply,
            consumed: rd.pos,
        }),
        Err(Fail::Incomplete) => Ok(DecodedReply::Incomplete),
        Err(Fail::Bad | Fail::TooLarge(_)) => Err(ReplyError("unexpected magic")),
    }
}

fn reply_body(magic: u8, rd: &mut Rd<'_>) -> Result<Reply, Fail> {
    let m = rd.take(1)?[0];
    if m == ERROR {
        return Ok(Reply::Error);
    }
    if m != magic {
        return Err(Fail::Bad);
    }
    let count = rd.u32()?;
    match magic {
        SET_BULK | REMOVE_BULK => Ok(Reply::Count(count)),
        GET_BULK => {
            let mut recs = Vec::with_capacity((count as usize).min(INITIAL_CAPACITY));
            for _ in 0..count {
                let db = rd.u16()?;
                let ksiz = rd.len(usize::MAX)?;
                let vsiz = rd.len(usize::MAX)?;
                let xt = rd.i64()?;
                let k = rd.take(ksiz)?.to_vec();
                let v = rd.take(vsiz)?.to_vec();
                recs.push((db, k, v, xt));
            }
            Ok(Reply::Records(recs))
        }
        PLAY_SCRIPT => {
            let mut pairs = Vec::with_capacity((count as usize).min(INITIAL_CAPACITY));
            for _ in 0..count {
                let ksiz = rd.len(usize::MAX)?;
                let vsiz = rd.len(usize::MAX)?;
                let k = rd.take(ksiz)?.to_vec();
                let v = rd.take(vsiz)?.to_vec();
                pairs.push((k, v));
            }
            Ok(Reply::Pairs(pairs))
        }
        _ => Err(Fail::Bad),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn samples() -> Vec<Request<'static>> {
        vec![
            Request::SetBulk {
                no_reply: false,
                records: vec![(0, b"k1", b"v1", i64::MAX), (3, b"", b"", -1_000_000)],
            },
            Request::SetBulk {
                no_reply: true,
                records: vec![],
            },
            Request::RemoveBulk {
                no_reply: true,
                keys: vec![(0, b"a"), (1, b"bb")],
            },
            Request::GetBulk {
                keys: vec![(0, b"a"), (0, b"")],
            },
            Request::PlayScript {
                no_reply: false,
                name: b"echo",
                args: vec![(b"x", b"1"), (b"", b"")],
            },
            Request::Replication {
                flags: 1,
                ts: 1_700_000_000_000_000_123,
                sid: 7,
            },
        ]
    }

    fn enc(r: &Request<'_>) -> Vec<u8> {
        let mut v = Vec::new();
        encode_request(r, &mut v);
        v
    }

    #[test]
    fn every_request_round_trips() {
        for r in samples() {
            let b = enc(&r);
            assert_eq!(
                decode(&b, &Limits::default()),
                Ok(Decoded::Complete {
                    request: r.clone(),
                    consumed: b.len()
                })
            );
        }
    }

    /// The exact bytes `ukt` writes for `set_bulk({'k': 'v'}, db=0, expire_time=None)`.
    #[test]
    fn ukt_set_bulk_bytes() {
        let mut b = vec![0xB8, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1];
        b.extend_from_slice(&0x7fff_ffff_ffff_ffffu64.to_be_bytes());
        b.extend_from_slice(b"kv");
        let want = Request::SetBulk {
            no_reply: false,
            records: vec![(0, b"k", b"v", i64::MAX)],
        };
        assert_eq!(
            decode(&b, &Limits::default()),
            Ok(Decoded::Complete {
                request: want,
                consumed: b.len()
            })
        );
    }

    #[test]
    fn split_at_every_offset() {
        for r in samples() {
            let b = enc(&r);
            for cut in 0..b.len() {
                assert_eq!(
                    decode(&b[..cut], &Limits::default()),
                    Ok(Decoded::Incomplete),
                    "{r:?} cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn pipelined() {
        let mut b = Vec::new();
        let rs = samples();
        for r in &rs[..5] {
            encode_request(r, &mut b);
        }
        let mut pos = 0;
        for r in &rs[..5] {
            match decode(&b[pos..], &Limits::default()).unwrap() {
                Decoded::Complete { request, consumed } => {
                    assert_eq!(&request, r);
                    pos += consumed;
                }
                Decoded::Incomplete => panic!("incomplete"),
            }
        }
        assert_eq!(pos, b.len());
    }

    #[test]
    fn oversized_counts_and_sizes_are_refused_early() {
        let lim = Limits {
            max_key: 8,
            max_value: 16,
            max_records: 4,
            max_frame: 1024,
        };
        // A count above max_records, with nothing after it.
        let b = [0xBA, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff];
        assert!(decode(&b, &lim).unwrap_err().close);
        // u32::MAX records announced against the default limits: refused, no allocation.
        assert!(decode(&b, &Limits::default()).is_err());
        // A key above max_key.
        let b = [0xB9, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 9];
        assert!(decode(&b, &lim).is_err());
        // A value above max_value.
        let mut b = vec![0xB8, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 17];
        b.extend_from_slice(&[0; 8]);
        assert!(decode(&b, &lim).is_err());
        // Records that fit one by one but not together in max_frame.
        let lim = Limits {
            max_frame: 40,
            ..Limits::default()
        };
        let r = Request::GetBulk {
            keys: vec![(0, b"0123456789"), (0, b"0123456789"), (0, b"0123456789")],
        };
        let b = enc(&r);
        assert!(decode(&b[..30], &lim).is_ok());
        assert!(decode(&b, &lim).is_err());
        // A script name above max_key.
        let b = [0xB4, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0];
        assert!(decode(&b, &Limits::default()).is_err());
    }

    #[test]
    fn bad_magic() {
        for m in [0x00u8, 0xB0, 0xBF, 0xC8, b'G'] {
            let e = decode(&[m, 0, 0], &Limits::default()).unwrap_err();
            assert_eq!(
                e,
                DecodeError {
                    consumed: 1,
                    close: true,
                    value_len: None,
                }
            );
        }
        assert_eq!(decode(&[], &Limits::default()), Ok(Decoded::Incomplete));
    }

    #[test]
    fn replies_round_trip() {
        let mut out = Vec::new();
        reply_count(&mut out, SET_BULK, 7);
        reply_records(&mut out, &[(0, b"k", b"v", 5), (2, b"", b"xyz", -1)]);
        reply_pairs(&mut out, &[(b"a", b"b")]);
        reply_error(&mut out);
        let mut pos = 0;
        let want = [
            (SET_BULK, Reply::Count(7)),
            (
                GET_BULK,
                Reply::Records(vec![
                    (0, b"k".to_vec(), b"v".to_vec(), 5),
                    (2, vec![], b"xyz".to_vec(), -1),
                ]),
            ),
            (
                PLAY_SCRIPT,
                Reply::Pairs(vec![(b"a".to_vec(), b"b".to_vec())]),
            ),
            (REMOVE_BULK, Reply::Error),
        ];
        for (m, r) in want {
            match decode_reply(m, &out[pos..]).unwrap() {
                DecodedReply::Complete { reply, consumed } => {
                    assert_eq!(reply, r);
                    pos += consumed;
                }
                DecodedReply::Incomplete => panic!(),
            }
        }
        assert_eq!(pos, out.len());
        assert!(decode_reply(GET_BULK, &[SET_BULK, 0, 0, 0, 0]).is_err());
        assert_eq!(
            decode_reply(GET_BULK, &[GET_BULK, 0, 0, 0, 1, 0]),
            Ok(DecodedReply::Incomplete)
        );
    }

    fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..max)
    }

    type Owned = (u8, bool, Vec<(u16, Vec<u8>, Vec<u8>, i64)>);

    fn owned() -> impl Strategy<Value = Owned> {
        (
            0u8..5,
            any::<bool>(),
            proptest::collection::vec((any::<u16>(), bytes(12), bytes(20), any::<i64>()), 0..6),
        )
    }

    fn build(o: &Owned) -> Request<'_> {
        let (kind, nr, recs) = o;
        match kind {
            0 => Request::SetBulk {
                no_reply: *nr,
                records: recs
                    .iter()
                    .map(|(d, k, v, x)| (*d, &k[..], &v[..], *x))
                    .collect(),
            },
            1 => Request::RemoveBulk {
                no_reply: *nr,
                keys: recs.iter().map(|(d, k, _, _)| (*d, &k[..])).collect(),
            },
            2 => Request::GetBulk {
                keys: recs.iter().map(|(d, k, _, _)| (*d, &k[..])).collect(),
            },
            3 => Request::PlayScript {
                no_reply: *nr,
                name: recs.first().map(|r| &r.1[..]).unwrap_or(b"f"),
                args: recs.iter().map(|(_, k, v, _)| (&k[..], &v[..])).collect(),
            },
            _ => Request::Replication {
                flags: recs.len() as u32,
                ts: u64::MAX - recs.len() as u64,
                sid: 3,
            },
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(mut b in bytes(200), m in 0usize..6) {
            let magics = [SET_BULK, REMOVE_BULK, GET_BULK, PLAY_SCRIPT, REPLICATION, 0];
            if let Some(f) = b.first_mut() {
                if magics[m] != 0 { *f = magics[m]; }
            }
            let lim = Limits { max_key: 16, max_value: 32, max_records: 8, max_frame: 150 };
            for l in [lim, Limits::default()] {
                match decode(&b, &l) {
                    Ok(Decoded::Complete { consumed, .. }) => {
                        prop_assert!(consumed >= 1 && consumed <= b.len())
                    }
                    Ok(Decoded::Incomplete) => {}
                    Err(e) => prop_assert!(e.consumed >= 1 && e.close),
                }
            }
            let _ = decode_reply(GET_BULK, &b);
            let _ = decode_reply(PLAY_SCRIPT, &b);
        }

        #[test]
        fn generated_requests_round_trip(o in owned(), tail in bytes(10)) {
            let r = build(&o);
            let mut b = enc(&r);
            let n = b.len();
            b.extend_from_slice(&tail);
            prop_assert_eq!(
                decode(&b, &Limits::default()),
                Ok(Decoded::Complete { request: r, consumed: n })
            );
        }
    }
}
