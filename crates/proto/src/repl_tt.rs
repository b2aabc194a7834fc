//! Tokyo Tyrant's replication stream (command 0xA0 of the binary protocol), both sides. Sans-IO:
//! bytes in, frames out; frames in, bytes out. No engine, no sockets.
//!
//! A slave opens a connection and sends the `repl` request `[0xC8 0xA0][ts:8][sid:4]` (decoded
//! by [`tt_bin::decode`] as [`Request::Repl`]; built by [`encode_request`]): `ts` is the first
//! time stamp it wants (`ttserver`'s slave sends the last one it applied plus one, and the master
//! skips records older than `ts`), `sid` is the slave's own server id. `ttserver` closes the
//! connection without a byte when `ts` or `sid` is 0, when `repl` is masked, and when `sid` is
//! its own id ("circular replication").
//!
//! The master answers its own server id, `[sid:4]` ([`encode_sid`], [`decode_sid`]; a slave
//! gives up on 0), then streams frames for as long as the connection lives:
//!
//! | frame | bytes |
//! |---|---|
//! | record | `[0xC9][ts:8][sid:4][size:4][body:size]` |
//! | heartbeat (NOP) | `[0xCA]`: one byte, nothing after it |
//!
//! All integers are big-endian. A record's `ts` is the master's update-log time stamp
//! (microseconds since the epoch when the master wrote it) and its `sid` the id of the server
//! where the change was first made (the master itself, or its own master). The master sends a
//! NOP at most once a second while idle or while skipping records (those that came from the
//! slave: origin or relaying server equal to the slave's `sid`), so that the slave's 60-second
//! read timeout does not expire; the slave ignores it. Nothing is ever sent back.
//!
//! On disk (`tculog.c`, `tculogwrite`) an update-log record is `[0xC9][ts:8][sid:2][mid:2]
//! [size:4][body]`: two 16-bit ids, the origin and the master it was relayed from. The wire
//! record has the same 17-byte header length but one 32-bit `sid` (the origin) and no `mid`;
//! so ids above 65535 do not survive a trip through an update log.
//!
//! A record's body is one binary-protocol command followed by one result byte: `0` if the
//! command succeeded on the master, `1` if it failed (the master logs failed writes too, and a
//! slave compares its own outcome with it to detect inconsistency). The commands are those the
//! update log holds: put, putkeep, putcat, putshl, out, addint, adddouble, sync, optimize,
//! vanish and misc (putnr and the memcached and HTTP writes are logged as put, out, and so on).
//! Every one of them is laid out exactly as a client sends it ([`tt_bin::decode`] reads it),
//! **except misc**: the log leaves out the options word, `[0xC8 0x90][nsiz:4][rnum:4][name]`
//! then `rnum` × `[asiz:4][arg]` (`tculogadbmisc`), so this module reads misc bodies itself and
//! reports `opts` 0 (a misc sent with "no update log" is never logged at all).

use crate::tt_bin::{self, cmd, Limits, Request, MAGIC};

/// First byte of a record frame (`TCULMAGICNUM`).
pub const RECORD: u8 = 0xC9;
/// The heartbeat frame, one byte (`TCULMAGICNOP`).
pub const NOP: u8 = 0xCA;
/// Bytes of a record frame before its body: magic, ts, sid, size.
pub const RECORD_HEADER: usize = 1 + 8 + 4 + 4;

/// The result byte of a command that succeeded on the master (anything else is a failure;
/// `ttserver` writes 1).
pub const RESULT_OK: u8 = 0;
/// The result byte `ttserver` writes for a command that failed on the master.
pub const RESULT_FAIL: u8 = 1;

/// A frame of the master's stream; a record's body borrows from the input buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// One update-log entry: time stamp, origin server id, body (command + result byte; see
    /// [`split_body`], [`decode_body`]).
    Record { ts: u64, sid: u32, body: &'a [u8] },
    /// A heartbeat; carries nothing.
    Nop,
}

/// What is wrong with a replication stream or a record body. Framing errors ([`Error::BadMagic`],
/// [`Error::TooLarge`]) leave the stream unsynchronised: close the connection. Body errors
/// concern one well-delimited record; `ttserver`'s slave stops replicating on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// A frame starts with a byte that is neither [`RECORD`] nor [`NOP`].
    BadMagic(u8),
    /// A record announces a body larger than the caller's bound.
    TooLarge { size: u64, max: usize },
    /// The master announced server id 0 (a slave gives up, as `tcreplopen` does).
    ZeroSid,
    /// A body that is not one command followed by its result byte; says what is wrong.
    BadBody(&'static str),
    /// A command the update log never holds (`tculogadbredo` refuses it).
    Command(u8),
    /// A well-formed command whose key, value, name or list exceeds the caller's [`Limits`].
    OverLimits,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::BadMagic(b) => write!(f, "Tokyo Tyrant replication: bad frame magic {b:#04x}"),
            Error::TooLarge { size, max } => write!(
                f,
                "Tokyo Tyrant replication: record of {size} bytes over the limit of {max}"
            ),
            Error::ZeroSid => write!(f, "Tokyo Tyrant replication: master server id 0"),
            Error::BadBody(what) => write!(f, "Tokyo Tyrant replication: bad record body: {what}"),
            Error::Command(c) => write!(
                f,
                "Tokyo Tyrant replication: command {c:#04x} is not an update-log command"
            ),
            Error::OverLimits => write!(f, "Tokyo Tyrant replication: record over the limits"),
        }
    }
}

impl std::error::Error for Error {}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[at..at + 4]);
    u32::from_be_bytes(b)
}

fn u64_at(buf: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    u64::from_be_bytes(b)
}

// ----- the request and the master's id -----

/// Append the slave's request `[0xC8 0xA0][ts:8][sid:4]` (through [`tt_bin::encode_request`]).
pub fn encode_request(out: &mut Vec<u8>, ts: u64, sid: u32) {
    tt_bin::encode_request(&Request::Repl { ts, sid }, out);
}

/// Append the master's first reply: its own server id, `[sid:4]`.
pub fn encode_sid(out: &mut Vec<u8>, sid: u32) {
    out.extend_from_slice(&sid.to_be_bytes());
}

/// Decode the master's server id from the start of `buf`: `Ok(None)` until 4 bytes are there,
/// then the id and 4 (bytes consumed). Id 0 is an error.
pub fn decode_sid(buf: &[u8]) -> Result<Option<(u32, usize)>, Error> {
    if buf.len() < 4 {
        return Ok(None);
    }
    match u32_at(buf, 0) {
        0 => Err(Error::ZeroSid),
        sid => Ok(Some((sid, 4))),
    }
}

// ----- frames -----

/// Decode one frame from the start of `buf`: `Ok(None)` while it is incomplete, else the frame
/// and the bytes it took. A record whose body would exceed `max` bytes is an error as soon as
/// its header has arrived, before the body is awaited. Never panics.
pub fn decode_frame(buf: &[u8], max: usize) -> Result<Option<(Frame<'_>, usize)>, Error> {
    match buf.first() {
        None => Ok(None),
        Some(&NOP) => Ok(Some((Frame::Nop, 1))),
        Some(&RECORD) => {
            if buf.len() < RECORD_HEADER {
                return Ok(None);
            }
            let ts = u64_at(buf, 1);
            let sid = u32_at(buf, 9);
            let size = u32_at(buf, 13);
            let too_large = Error::TooLarge {
                size: size.into(),
                max,
            };
            let size = usize::try_from(size).map_err(|_| too_large)?;
            if size > max {
                return Err(too_large);
            }
            let end = RECORD_HEADER.checked_add(size).ok_or(too_large)?;
            match buf.get(RECORD_HEADER..end) {
                Some(body) => Ok(Some((Frame::Record { ts, sid, body }, end))),
                None => Ok(None),
            }
        }
        Some(&b) => Err(Error::BadMagic(b)),
    }
}

/// Append a record frame. `body` must be shorter than 2^32 bytes.
pub fn encode_record(out: &mut Vec<u8>, ts: u64, sid: u32, body: &[u8]) {
    out.push(RECORD);
    out.extend_from_slice(&ts.to_be_bytes());
    out.extend_from_slice(&sid.to_be_bytes());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body);
}

/// Append a heartbeat frame (one byte).
pub fn encode_nop(out: &mut Vec<u8>) {
    out.push(NOP);
}

/// Append any frame.
pub fn encode_frame(out: &mut Vec<u8>, frame: &Frame<'_>) {
    match frame {
        Frame::Record { ts, sid, body } => encode_record(out, *ts, *sid, body),
        Frame::Nop => encode_nop(out),
    }
}

// ----- record bodies -----

/// Whether the update log holds commands with this byte (what [`decode_command`] accepts).
pub fn is_logged(c: u8) -> bool {
    matches!(
        c,
        cmd::PUT
            | cmd::PUTKEEP
            | cmd::PUTCAT
            | cmd::PUTSHL
            | cmd::OUT
            | cmd::ADDINT
            | cmd::ADDDOUBLE
            | cmd::SYNC
            | cmd::OPTIMIZE
            | cmd::VANISH
            | cmd::MISC
    )
}

/// Split a record body into the command's bytes (from the magic `0xC8` on) and the result byte
/// ([`RESULT_OK`] = the command succeeded on the master). A body has at least three bytes:
/// magic, command byte, result. (A master never sends an empty body; `ttserver`'s slave would
/// skip one.)
pub fn split_body(body: &[u8]) -> Result<(&[u8], u8), Error> {
    if body.len() < 3 {
        return Err(Error::BadBody("shorter than three bytes"));
    }
    if body[0] != MAGIC {
        return Err(Error::BadBody("no 0xC8 magic"));
    }
    let (command, result) = body.split_at(body.len() - 1);
    Ok((command, result[0]))
}

/// Decode the command of a record body (the bytes [`split_body`] returns, magic included): the
/// whole slice must be exactly one logged command. Every command but misc goes through
/// [`tt_bin::decode`] with `limits`; misc, logged without its options word, is read here
/// (`opts` is reported as 0), under the same limits.
pub fn decode_command<'a>(command: &'a [u8], limits: &Limits) -> Result<Request<'a>, Error> {
    if command.first() != Some(&MAGIC) {
        return Err(Error::BadBody("no 0xC8 magic"));
    }
    let Some(&c) = command.get(1) else {
        return Err(Error::BadBody("no command byte"));
    };
    if !is_logged(c) {
        return Err(Error::Command(c));
    }
    if c == cmd::MISC {
        return decode_misc(command, limits);
    }
    match tt_bin::decode(command, limits) {
        Ok(crate::Decoded::Complete { request, consumed }) if consumed == command.len() => {
            Ok(request)
        }
        Ok(crate::Decoded::Complete { .. }) => Err(Error::BadBody("bytes after the command")),
        Ok(crate::Decoded::Incomplete) => Err(Error::BadBody("truncated command")),
        Err(e) if !e.close => Err(Error::OverLimits),
        Err(_) => Err(Error::BadBody("malformed command")),
    }
}

/// [`split_body`] then [`decode_command`]: the command and the result byte.
pub fn decode_body<'a>(body: &'a [u8], limits: &Limits) -> Result<(Request<'a>, u8), Error> {
    let (command, result) = split_body(body)?;
    Ok((decode_command(command, limits)?, result))
}

/// The update log's misc: `[0xC8 0x90][nsiz:4][rnum:4][name]` then `rnum` × `[asiz:4][arg]`,
/// nothing after. The list is validated before anything is allocated, and allocated only for
/// elements that are in the slice.
fn decode_misc<'a>(command: &'a [u8], limits: &Limits) -> Result<Request<'a>, Error> {
    const TRUNCATED: Error = Error::BadBody("truncated misc");
    let head = command.get(..10).ok_or(TRUNCATED)?;
    let nsiz = u32_at(head, 2) as usize;
    let rnum = u32_at(head, 6) as usize;
    if nsiz > tt_bin::MAX_NAME_LEN || rnum > limits.max_args {
        return Err(Error::OverLimits);
    }
    if command.len() > limits.max_frame {
        return Err(Error::OverLimits);
    }
    let name = command.get(10..10 + nsiz).ok_or(TRUNCATED)?;
    let first = 10 + nsiz;
    let mut pos = first;
    for _ in 0..rnum {
        let n = u32_at(command.get(pos..pos + 4).ok_or(TRUNCATED)?, 0) as usize;
        if n > limits.max_value {
            return Err(Error::OverLimits);
        }
        pos += 4;
        if command.len() - pos < n {
            return Err(TRUNCATED);
        }
        pos += n;
    }
    if pos != command.len() {
        return Err(Error::BadBody("bytes after the misc arguments"));
    }
    // Every element is in the slice, so `rnum` <= command.len() / 4.
    let mut args = Vec::with_capacity(rnum);
    pos = first;
    while pos < command.len() {
        let n = u32_at(command, pos) as usize;
        args.push(&command[pos + 4..pos + 4 + n]);
        pos += 4 + n;
    }
    Ok(Request::Misc {
        name,
        opts: 0,
        args,
    })
}

fn result_byte(ok: bool) -> u8 {
    if ok {
        RESULT_OK
    } else {
        RESULT_FAIL
    }
}

fn put_len(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u32).to_be_bytes());
}

/// Append the body of a record for `req` and its outcome on the master: the command as the
/// update log holds it (misc without its options word; everything else through
/// [`tt_bin::encode_request`]) and the result byte (0 if `ok`, else 1). Only commands for
/// which [`is_logged`] holds decode back.
pub fn encode_body(out: &mut Vec<u8>, req: &Request<'_>, ok: bool) {
    if let Request::Misc { name, args, .. } = req {
        out.push(MAGIC);
        out.push(cmd::MISC);
        put_len(out, name.len());
        put_len(out, args.len());
        out.extend_from_slice(name);
        for a in args {
            put_len(out, a.len());
            out.extend_from_slice(a);
        }
    } else {
        tt_bin::encode_request(req, out);
    }
    out.push(result_byte(ok));
}

/// Append a put body (0x10): `[0xC8 0x10][ksiz:4][vsiz:4][key][value][result]`.
pub fn encode_put(out: &mut Vec<u8>, key: &[u8], value: &[u8], ok: bool) {
    encode_body(out, &Request::Put { key, value }, ok);
}

/// Append an out body (0x20): `[0xC8 0x20][ksiz:4][key][result]`.
pub fn encode_out(out: &mut Vec<u8>, key: &[u8], ok: bool) {
    encode_body(out, &Request::Out { key }, ok);
}

/// Append a vanish body (0x72): `[0xC8 0x72][result]`.
pub fn encode_vanish(out: &mut Vec<u8>, ok: bool) {
    encode_body(out, &Request::Vanish, ok);
}

/// Append a misc body (0x90), as the update log holds it (no options word):
/// `[0xC8 0x90][nsiz:4][rnum:4][name]`, `rnum` × `[asiz:4][arg]`, `[result]`. The list
/// functions a master ships this way are `putlist` (key, value, …) and `outlist` (keys).
pub fn encode_misc(out: &mut Vec<u8>, name: &[u8], args: &[&[u8]], ok: bool) {
    encode_body(
        out,
        &Request::Misc {
            name,
            opts: 0,
            args: args.to_vec(),
        },
        ok,
    );
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

    /// A record frame and a NOP built byte by byte from `ttserver.c` (`do_repl`): magic 0xC9,
    /// ts, origin sid as 32 bits, body size, body (put "k" = "v" that succeeded); then 0xCA.
    #[test]
    fn hand_built_stream() {
        let wire: Vec<u8> = [
            &[0xC9][..],
            &0x0005_E0A1_2345_6789u64.to_be_bytes(),
            &[0, 0, 0, 7],
            &[0, 0, 0, 13],
            &[0xC8, 0x10, 0, 0, 0, 1, 0, 0, 0, 1, b'k', b'v', 0],
            &[0xCA],
        ]
        .concat();
        let got = frames(&wire, 1024).unwrap();
        assert_eq!(got.len(), 2);
        let Frame::Record { ts, sid, body } = got[0] else {
            panic!("{:?}", got[0]);
        };
        assert_eq!((ts, sid), (0x0005_E0A1_2345_6789, 7));
        assert_eq!(got[1], Frame::Nop);
        let (req, result) = decode_body(body, &Limits::default()).unwrap();
        assert_eq!(
            req,
            Request::Put {
                key: b"k",
                value: b"v"
            }
        );
        assert_eq!(result, RESULT_OK);
        let mut again = Vec::new();
        encode_record(&mut again, ts, sid, body);
        encode_nop(&mut again);
        assert_eq!(again, wire);
        let mut body_again = Vec::new();
        encode_put(&mut body_again, b"k", b"v", true);
        assert_eq!(body_again, body);
    }

    /// The update log's misc has no options word (`tculogadbmisc`): a putlist that failed.
    #[test]
    fn hand_built_misc_body() {
        let body: Vec<u8> = [
            &[0xC8, 0x90][..],
            &[0, 0, 0, 7],
            &[0, 0, 0, 2],
            b"putlist",
            &[0, 0, 0, 1],
            b"a",
            &[0, 0, 0, 2],
            b"bc",
            &[1],
        ]
        .concat();
        let (req, result) = decode_body(&body, &Limits::default()).unwrap();
        assert_eq!(
            req,
            Request::Misc {
                name: b"putlist",
                opts: 0,
                args: vec![b"a", b"bc"]
            }
        );
        assert_eq!(result, RESULT_FAIL);
        let mut again = Vec::new();
        encode_misc(&mut again, b"putlist", &[b"a", b"bc"], false);
        assert_eq!(again, body);
        // The client's layout (with an options word) is not what the log holds.
        let mut client = Vec::new();
        tt_bin::encode_request(
            &Request::Misc {
                name: b"putlist",
                opts: 0,
                args: vec![b"a", b"bc"],
            },
            &mut client,
        );
        client.push(0);
        assert!(decode_body(&client, &Limits::default()).is_err());
    }

    #[test]
    fn every_cut_is_incomplete() {
        let mut body = Vec::new();
        encode_put(&mut body, b"key", b"value", true);
        let mut wire = Vec::new();
        encode_record(&mut wire, 42, 3, &body);
        for cut in 0..wire.len() {
            assert_eq!(decode_frame(&wire[..cut], 1024), Ok(None), "cut {cut}");
        }
        assert!(matches!(
            decode_frame(&wire, 1024),
            Ok(Some((Frame::Record { ts: 42, sid: 3, .. }, n))) if n == wire.len()
        ));
        assert_eq!(decode_frame(&[], 0), Ok(None));
        assert_eq!(decode_frame(&[NOP, 0xFF], 0), Ok(Some((Frame::Nop, 1))));
    }

    #[test]
    fn bad_magic_and_oversized() {
        for b in [0x00, 0xC8, 0xCB, 0xFF] {
            assert_eq!(decode_frame(&[b], 1024), Err(Error::BadMagic(b)));
        }
        let mut wire = Vec::new();
        encode_record(&mut wire, 1, 1, &[0xC8, 0x72, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        // Refused from the header on, before the body arrives.
        assert_eq!(
            decode_frame(&wire[..RECORD_HEADER], 10),
            Err(Error::TooLarge { size: 11, max: 10 })
        );
        assert!(decode_frame(&wire, 11).unwrap().is_some());
        let huge = [&[RECORD][..], &[0; 12], &[0xFF; 4]].concat();
        assert_eq!(
            decode_frame(&huge, usize::MAX >> 1),
            Ok(None),
            "a 4 GiB body is awaited, not allocated"
        );
        assert!(matches!(
            decode_frame(&huge, 1 << 20),
            Err(Error::TooLarge { .. })
        ));
    }

    #[test]
    fn the_result_byte() {
        let mut ok = Vec::new();
        encode_vanish(&mut ok, true);
        assert_eq!(ok, [0xC8, 0x72, 0]);
        assert_eq!(split_body(&ok), Ok((&[0xC8, 0x72][..], RESULT_OK)));
        let mut failed = Vec::new();
        encode_out(&mut failed, b"gone", false);
        let (command, result) = split_body(&failed).unwrap();
        assert_eq!(result, RESULT_FAIL);
        assert_eq!(
            decode_command(command, &Limits::default()),
            Ok(Request::Out { key: b"gone" })
        );
        // Any non-zero result byte is a failure; it is passed through as it is.
        assert_eq!(split_body(&[0xC8, 0x70, 7]), Ok((&[0xC8, 0x70][..], 7)));
    }

    #[test]
    fn malformed_bodies() {
        let lim = Limits::default();
        assert!(matches!(split_body(&[]), Err(Error::BadBody(_))));
        assert!(matches!(split_body(&[0xC8, 0x72]), Err(Error::BadBody(_))));
        assert!(matches!(
            split_body(&[0xC9, 0x72, 0]),
            Err(Error::BadBody(_))
        ));
        // Commands the log never holds.
        for c in [cmd::GET, cmd::PUTNR, cmd::EXT, cmd::REPL, cmd::COPY, 0x00] {
            assert_eq!(
                decode_body(&[0xC8, c, 0, 0, 0, 0, 0], &lim),
                Err(Error::Command(c))
            );
        }
        // Truncated and over-long commands.
        let mut put = Vec::new();
        encode_put(&mut put, b"key", b"value", true);
        let (command, _) = split_body(&put).unwrap();
        for cut in 2..command.len() {
            assert!(decode_command(&command[..cut], &lim).is_err(), "cut {cut}");
        }
        let mut longer = command.to_vec();
        longer.push(b'x');
        assert!(matches!(
            decode_command(&longer, &lim),
            Err(Error::BadBody(_))
        ));
        assert!(matches!(
            decode_body(&[0xC8, cmd::VANISH, 0, 0], &lim),
            Err(Error::BadBody(_))
        ));
        // Over the caller's limits.
        let small = Limits {
            max_key: 2,
            max_value: 2,
            max_args: 1,
            max_frame: 64,
        };
        assert_eq!(decode_command(command, &small), Err(Error::OverLimits));
        let mut misc = Vec::new();
        encode_misc(&mut misc, b"outlist", &[b"a", b"b"], true);
        assert_eq!(decode_body(&misc, &small), Err(Error::OverLimits));
        let mut misc = Vec::new();
        encode_misc(&mut misc, b"putlist", &[b"abc"], true);
        assert_eq!(decode_body(&misc, &small), Err(Error::OverLimits));
        // A misc whose count promises more than the body holds.
        let (command, _) = split_body(&misc).unwrap();
        let mut lying = command.to_vec();
        lying[6..10].copy_from_slice(&0x7FFF_FFFFu32.to_be_bytes());
        assert!(decode_command(&lying, &lim).is_err());
        for cut in 2..command.len() {
            assert!(decode_command(&command[..cut], &lim).is_err(), "cut {cut}");
        }
    }

    #[test]
    fn every_logged_command_round_trips() {
        let lim = Limits::default();
        let reqs = [
            Request::Put {
                key: b"k",
                value: b"v",
            },
            Request::PutKeep {
                key: b"k",
                value: b"",
            },
            Request::PutCat {
                key: b"",
                value: b"v",
            },
            Request::PutShl {
                key: b"k",
                value: b"v",
                width: 8,
            },
            Request::Out { key: b"k" },
            Request::AddInt { key: b"n", num: -3 },
            Request::AddDouble {
                key: b"d",
                integ: 1,
                fract: 500_000_000_000,
            },
            Request::Sync,
            Request::Optimize { params: b"bnum=9" },
            Request::Vanish,
            Request::Misc {
                name: b"outlist",
                opts: 0,
                args: vec![b"a", b"", b"c"],
            },
            Request::Misc {
                name: b"",
                opts: 0,
                args: vec![],
            },
        ];
        for req in reqs {
            for ok in [true, false] {
                let mut body = Vec::new();
                encode_body(&mut body, &req, ok);
                assert_eq!(
                    decode_body(&body, &lim),
                    Ok((req.clone(), result_byte(ok))),
                    "{}",
                    req.name()
                );
            }
        }
    }

    #[test]
    fn request_and_sid() {
        let mut wire = Vec::new();
        encode_request(&mut wire, 1_234_567, 2);
        assert_eq!(wire[..2], [0xC8, 0xA0]);
        assert_eq!(
            tt_bin::decode(&wire, &Limits::default()),
            Ok(crate::Decoded::Complete {
                request: Request::Repl {
                    ts: 1_234_567,
                    sid: 2
                },
                consumed: 14
            })
        );
        let mut sid = Vec::new();
        encode_sid(&mut sid, 9);
        assert_eq!(sid, [0, 0, 0, 9]);
        for cut in 0..4 {
            assert_eq!(decode_sid(&sid[..cut]), Ok(None));
        }
        assert_eq!(decode_sid(&sid), Ok(Some((9, 4))));
        assert_eq!(decode_sid(&[0, 0, 0, 0]), Err(Error::ZeroSid));
        // The same bytes as tt_bin's client reads them.
        assert_eq!(
            tt_bin::decode_reply(cmd::REPL, &sid),
            Ok(crate::DecodedReply::Complete {
                reply: tt_bin::Reply::Sid(9),
                consumed: 4
            })
        );
    }

    proptest! {
        #[test]
        fn frames_round_trip(
            items in proptest::collection::vec(
                (any::<bool>(), any::<u64>(), any::<u32>(),
                 proptest::collection::vec(any::<u8>(), 0..64)),
                0..8),
        ) {
            let mut wire = Vec::new();
            let mut want = Vec::new();
            for (nop, ts, sid, body) in &items {
                if *nop {
                    encode_nop(&mut wire);
                    want.push(Frame::Nop);
                } else {
                    encode_record(&mut wire, *ts, *sid, body);
                    want.push(Frame::Record { ts: *ts, sid: *sid, body });
                }
            }
            prop_assert_eq!(frames(&wire, 64).unwrap(), want);
        }

        #[test]
        fn arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..200)) {
            let lim = Limits { max_key: 16, max_value: 32, max_args: 4, max_frame: 100 };
            let _ = decode_frame(&buf, 64);
            let _ = decode_sid(&buf);
            let mut body = buf.clone();
            if body.len() >= 2 {
                body[0] = MAGIC;
            }
            if let Ok((req, result)) = decode_body(&body, &lim) {
                let mut again = Vec::new();
                encode_body(&mut again, &req, result == RESULT_OK);
                if result <= RESULT_FAIL {
                    prop_assert_eq!(again, body);
                }
            }
        }
    }
}
