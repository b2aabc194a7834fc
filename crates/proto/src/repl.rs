//! Kura's own replication stream: what a Kura replica asks its master for and the frames the
//! master sends back. It rides on the Tyrant port: the request is a Tyrant-style command
//! `[0xC8][0xA8][after u64][sid u32][flags u32]` (big-endian); after it the connection is a
//! stream of frames `[tag u8][len u32][payload]` both ways.
//!
//! Master to replica: `HELLO [sid u32][last ts u64][flags u32]` (`flags` may be absent: 0;
//! `HELLO_ACK_AT_ONCE`: the master holds client writes until replicas acknowledge them, so
//! acknowledge what was applied as soon as it is durable, not only every 200 ms), then either `RECORD` frames (an update
//! log record as stored, with its own crc) after the position asked for, or first a snapshot
//! (`SNAP_BEGIN [ts u64]`, `SNAP [n u32]` + n update log records, `SNAP_END [count u64]`, then
//! the log after `ts`); `BEAT [last ts u64]` at least once a second; `ERROR [text]` before
//! hanging up. Replica to master: `ACK [ts u64]`, the position it has applied.

/// The command byte after Tyrant's 0xC8 magic.
pub const CMD: u8 = 0xA8;
/// Flag: the replica may be sent a snapshot when the log no longer holds what it needs.
pub const MAY_BOOTSTRAP: u32 = 1;
/// Flag: the replica holds nothing yet: start with a snapshot.
pub const FRESH: u32 = 2;
/// HELLO flag: acknowledge applied records as soon as they are durable (`--sync-replicas`).
pub const HELLO_ACK_AT_ONCE: u32 = 1;

pub const HELLO: u8 = 1;
pub const RECORD: u8 = 2;
pub const BEAT: u8 = 3;
pub const SNAP_BEGIN: u8 = 4;
pub const SNAP: u8 = 5;
pub const SNAP_END: u8 = 6;
pub const ERROR: u8 = 7;
pub const ACK: u8 = 0x10;

/// Request length, magic included.
pub const REQUEST_LEN: usize = 2 + 8 + 4 + 4;
/// The largest frame accepted (a snapshot batch or a record with a 1 GiB value).
pub const MAX_FRAME: usize = (1 << 30) + (1 << 20);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub after: u64,
    pub sid: u32,
    pub flags: u32,
}

pub fn encode_request(out: &mut Vec<u8>, r: &Request) {
    out.extend_from_slice(&[0xC8, CMD]);
    out.extend_from_slice(&r.after.to_be_bytes());
    out.extend_from_slice(&r.sid.to_be_bytes());
    out.extend_from_slice(&r.flags.to_be_bytes());
}

/// Decode the request's arguments (the bytes after `[0xC8][0xA8]`): `None` if incomplete.
pub fn decode_request(args: &[u8]) -> Option<Request> {
    if args.len() < REQUEST_LEN - 2 {
        return None;
    }
    Some(Request {
        after: u64::from_be_bytes(args[0..8].try_into().ok()?),
        sid: u32::from_be_bytes(args[8..12].try_into().ok()?),
        flags: u32::from_be_bytes(args[12..16].try_into().ok()?),
    })
}

/// Start a frame: returns where its length goes (fill with [`end_frame`]).
pub fn begin_frame(out: &mut Vec<u8>, tag: u8) -> usize {
    out.push(tag);
    out.extend_from_slice(&[0; 4]);
    out.len()
}

pub fn end_frame(out: &mut [u8], at: usize) {
    let len = (out.len() - at) as u32;
    out[at - 4..at].copy_from_slice(&len.to_be_bytes());
}

pub fn frame(out: &mut Vec<u8>, tag: u8, payload: &[u8]) {
    out.push(tag);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
}

#[derive(Debug, PartialEq, Eq)]
pub enum FrameError {
    TooLarge(usize),
}

/// A decoded frame: its tag, its payload and the bytes it took.
pub type Frame<'a> = (u8, &'a [u8], usize);

/// The frame at the start of `buf`; `Ok(None)` if incomplete.
pub fn decode_frame(buf: &[u8]) -> Result<Option<Frame<'_>>, FrameError> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    if buf.len() < 5 + len {
        return Ok(None);
    }
    Ok(Some((buf[0], &buf[5..5 + len], 5 + len)))
}

pub fn be_u64(b: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(..8)?.try_into().ok()?))
}

pub fn be_u32(b: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(..4)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_frames_round_trip() {
        let r = Request {
            after: 5,
            sid: 7,
            flags: FRESH,
        };
        let mut b = Vec::new();
        encode_request(&mut b, &r);
        assert_eq!(b.len(), REQUEST_LEN);
        assert_eq!(decode_request(&b[2..]), Some(r));
        assert_eq!(decode_request(&b[2..10]), None);
        let mut f = Vec::new();
        let at = begin_frame(&mut f, BEAT);
        f.extend_from_slice(&9u64.to_be_bytes());
        end_frame(&mut f, at);
        frame(&mut f, ACK, &3u64.to_be_bytes());
        let (tag, p, n) = decode_frame(&f).unwrap().unwrap();
        assert_eq!((tag, be_u64(p), n), (BEAT, Some(9), 13));
        let (tag, p, _) = decode_frame(&f[n..]).unwrap().unwrap();
        assert_eq!((tag, be_u64(p)), (ACK, Some(3)));
        for cut in 0..13 {
            assert_eq!(decode_frame(&f[..cut]), Ok(None));
        }
        assert_eq!(
            decode_frame(&[1, 0xff, 0xff, 0xff, 0xff]),
            Err(FrameError::TooLarge(u32::MAX as usize))
        );
    }
}
