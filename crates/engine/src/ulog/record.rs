//! The update log's record: one change of the database, as its effect (the state a key is left
//! in), stamped with its place in the log and its origin.
//!
//! ```text
//! [len u32][crc32c u32][ts u64][origin sid u32][origin ts u64][op u8][body …]
//! ```
//!
//! All integers little-endian. `len` counts the bytes after the crc (from `ts` to the end of
//! the body), `crc` is CRC-32C of those bytes. `ts` is the record's position in this log:
//! microseconds since the epoch, strictly increasing within one log. `origin` is the server
//! that took the write from a client and the time stamp it gave it there (the same as `ts`
//! for a local write): replicas relog a record with its origin kept, which is how a master
//! knows not to send a replica its own writes and how two masters order concurrent writes to
//! one key.
//!
//! Records hold effects, not commands: a counter's new value, an append's whole result, every
//! value of a key with duplicates. Replaying a suffix of the log in order from any state the
//! database passed through at or after the suffix's start therefore ends in the same state,
//! which is what lets a hot copy or a bootstrap snapshot be taken without pausing writes.
//!
//! A change of a keyspace (`Store::keyspace`) is an `In` record: the keyspace's name and the
//! parameters it is made with, then the operation. A batch element may be one too, so a batch
//! across keyspaces is one `Batch` record, applied whole. A record without `In` is the
//! database's own keyspace; logs written before `In` existed hold only such records and read
//! as they always did.

use crate::error::{Error, Result};

/// Bytes before the body: len, crc, ts, origin sid, origin ts, op.
pub const HEADER: usize = 4 + 4 + 8 + 4 + 8 + 1;
/// The largest record accepted when reading (a value of up to 1 GiB and then some).
pub const MAX_LEN: usize = (1 << 30) + (64 << 10);

/// What a record does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum OpCode {
    /// `[flags u32][expires u64][klen u32][key][value]`: the key holds this value.
    Put = 1,
    /// `[key]`: the key is absent.
    Remove = 2,
    /// `[expires u64][key]`: an existing record's expiration time changed.
    Touch = 3,
    /// No body: every record removed.
    Vanish = 4,
    /// `[params]`: the database was optimized with these parameters.
    Optimize = 5,
    /// `[n u32]` then `n` × `[op u8][len u32][body]` of `Put` / `Remove`: applied atomically.
    Batch = 6,
    /// `[klen u32][key][n u32]` then `n` × `[len u32][value]`: every value of a key of a
    /// database with duplicate keys, in order (none: the key is absent).
    Values = 7,
    /// `[nlen u16][name][plen u16][params][op u8][body]`: the operation `op` (with its body,
    /// any code but `In`) in keyspace `name`, made with `params` where it does not exist yet.
    In = 8,
}

impl OpCode {
    pub fn from_u8(b: u8) -> Option<OpCode> {
        Some(match b {
            1 => OpCode::Put,
            2 => OpCode::Remove,
            3 => OpCode::Touch,
            4 => OpCode::Vanish,
            5 => OpCode::Optimize,
            6 => OpCode::Batch,
            7 => OpCode::Values,
            8 => OpCode::In,
            _ => return None,
        })
    }
}

/// A decoded operation, borrowing from the record's bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op<'a> {
    Put {
        key: &'a [u8],
        value: &'a [u8],
        flags: u32,
        expires: u64,
    },
    Remove {
        key: &'a [u8],
    },
    Touch {
        key: &'a [u8],
        expires: u64,
    },
    Vanish,
    Optimize {
        params: &'a [u8],
    },
    /// Puts and removes, applied together; decode them with [`batch_ops`].
    Batch {
        count: u32,
        body: &'a [u8],
    },
    /// Every value of `key`; decode them with [`values_of`].
    Values {
        key: &'a [u8],
        count: u32,
        body: &'a [u8],
    },
    /// `op` in keyspace `name` (made with `params` where it does not exist yet).
    In {
        name: &'a [u8],
        params: &'a [u8],
        op: Box<Op<'a>>,
    },
}

impl<'a> Op<'a> {
    /// The key of a single-key operation (in its keyspace, for `In`).
    pub fn key(&self) -> Option<&[u8]> {
        match self {
            Op::Put { key, .. }
            | Op::Remove { key }
            | Op::Touch { key, .. }
            | Op::Values { key, .. } => Some(key),
            Op::In { op, .. } => op.key(),
            _ => None,
        }
    }

    /// The keyspace an operation names (`None`: the database's own) and the operation in it.
    pub fn space(&self) -> (Option<Space<'_>>, &Op<'a>) {
        match self {
            Op::In { name, params, op } => (Some(Space { name, params }), op),
            op => (None, op),
        }
    }
}

/// A keyspace as a record names it: its name and the parameters it is made with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Space<'a> {
    pub name: &'a [u8],
    pub params: &'a [u8],
}

impl<'a> Space<'a> {
    /// The name and parameters as text (what `Store::keyspace` takes).
    pub fn text(&self) -> Result<(&'a str, &'a str)> {
        match (
            std::str::from_utf8(self.name),
            std::str::from_utf8(self.params),
        ) {
            (Ok(n), Ok(p)) => Ok((n, p)),
            _ => Err(corrupt("a keyspace name or its parameters are not UTF-8")),
        }
    }
}

/// A whole record, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rec<'a> {
    pub ts: u64,
    pub origin_sid: u32,
    pub origin_ts: u64,
    pub op: Op<'a>,
}

fn corrupt(what: &str) -> Error {
    Error::Corrupt(format!("update log record: {what}"))
}

struct Take<'a>(&'a [u8]);

impl<'a> Take<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(corrupt("shorter than its fields"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u16(&mut self) -> Result<u16> {
        let b = self.bytes(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.bytes(1)?[0])
    }
    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.0)
    }
}

/// Encode the body of an operation (after the op byte) into `out`.
pub fn encode_body(out: &mut Vec<u8>, op: &Op<'_>) {
    match op {
        Op::Put {
            key,
            value,
            flags,
            expires,
        } => {
            out.extend_from_slice(&flags.to_le_bytes());
            out.extend_from_slice(&expires.to_le_bytes());
            out.extend_from_slice(&(key.len() as u32).to_le_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(value);
        }
        Op::Remove { key } => out.extend_from_slice(key),
        Op::Touch { key, expires } => {
            out.extend_from_slice(&expires.to_le_bytes());
            out.extend_from_slice(key);
        }
        Op::Vanish => {}
        Op::Optimize { params } => out.extend_from_slice(params),
        Op::Batch { count, body } => {
            out.extend_from_slice(&count.to_le_bytes());
            out.extend_from_slice(body);
        }
        Op::Values { key, count, body } => {
            out.extend_from_slice(&(key.len() as u32).to_le_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(&count.to_le_bytes());
            out.extend_from_slice(body);
        }
        Op::In { name, params, op } => {
            out.extend_from_slice(&(name.len() as u16).to_le_bytes());
            out.extend_from_slice(name);
            out.extend_from_slice(&(params.len() as u16).to_le_bytes());
            out.extend_from_slice(params);
            out.push(code_of(op) as u8);
            encode_body(out, op);
        }
    }
}

/// The op code of an operation.
pub fn code_of(op: &Op<'_>) -> OpCode {
    match op {
        Op::Put { .. } => OpCode::Put,
        Op::Remove { .. } => OpCode::Remove,
        Op::Touch { .. } => OpCode::Touch,
        Op::Vanish => OpCode::Vanish,
        Op::Optimize { .. } => OpCode::Optimize,
        Op::Batch { .. } => OpCode::Batch,
        Op::Values { .. } => OpCode::Values,
        Op::In { .. } => OpCode::In,
    }
}

/// Append one batch element (`Put` or `Remove`) to a batch body being built.
pub fn push_batch_op(body: &mut Vec<u8>, op: &Op<'_>) {
    body.push(code_of(op) as u8);
    let at = body.len();
    body.extend_from_slice(&[0; 4]);
    encode_body(body, op);
    let len = (body.len() - at - 4) as u32;
    body[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

/// Append one value to a `Values` body being built.
pub fn push_value(body: &mut Vec<u8>, value: &[u8]) {
    body.extend_from_slice(&(value.len() as u32).to_le_bytes());
    body.extend_from_slice(value);
}

/// Encode a whole record (header, crc and body) onto the end of `out`.
pub fn encode(out: &mut Vec<u8>, ts: u64, origin_sid: u32, origin_ts: u64, op: &Op<'_>) {
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&ts.to_le_bytes());
    out.extend_from_slice(&origin_sid.to_le_bytes());
    out.extend_from_slice(&origin_ts.to_le_bytes());
    out.push(code_of(op) as u8);
    encode_body(out, op);
    seal(out, start);
}

/// Fill in the length and crc of the record that starts at `start` and runs to the end of
/// `out` (its stamps, op byte and body already written after 8 reserved bytes).
pub fn seal(out: &mut [u8], start: usize) {
    let len = (out.len() - start - 8) as u32;
    let crc = crc32c::crc32c(&out[start + 8..]);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Rewrite the stamps of an encoded record (relogging a replicated record under a new local
/// position keeps its origin) and reseal it.
pub fn restamp(rec: &mut [u8], ts: u64) {
    rec[8..16].copy_from_slice(&ts.to_le_bytes());
    seal(rec, 0);
}

/// How a buffer starts.
#[derive(Debug)]
pub enum Next<'a> {
    /// A whole, intact record and its encoded length.
    Record(Rec<'a>, usize),
    /// Not enough bytes yet for the record that starts here.
    Incomplete,
}

/// Decode the record at the start of `buf`. A record whose bytes are all there but fail the
/// crc or their structure is an error: damage, never skipped in silence.
pub fn decode(buf: &[u8]) -> Result<Next<'_>> {
    if buf.len() < 8 {
        return Ok(Next::Incomplete);
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len == 0 {
        // Zeros: the unwritten end of a log file.
        return Ok(Next::Incomplete);
    }
    if !(HEADER - 8..=MAX_LEN).contains(&len) {
        return Err(corrupt(&format!("impossible length {len}")));
    }
    if buf.len() < 8 + len {
        return Ok(Next::Incomplete);
    }
    let crc = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
    let body = &buf[8..8 + len];
    if crc32c::crc32c(body) != crc {
        return Err(corrupt("checksum mismatch"));
    }
    let rec = parse(body)?;
    Ok(Next::Record(rec, 8 + len))
}

/// Parse the checked bytes of a record (after len and crc).
fn parse(body: &[u8]) -> Result<Rec<'_>> {
    let mut t = Take(body);
    let ts = t.u64()?;
    let origin_sid = t.u32()?;
    let origin_ts = t.u64()?;
    let code = t.u8()?;
    let code = OpCode::from_u8(code).ok_or_else(|| corrupt(&format!("unknown op {code}")))?;
    let op = parse_op(code, t.rest())?;
    Ok(Rec {
        ts,
        origin_sid,
        origin_ts,
        op,
    })
}

fn parse_op(code: OpCode, body: &[u8]) -> Result<Op<'_>> {
    let mut t = Take(body);
    Ok(match code {
        OpCode::Put => {
            let flags = t.u32()?;
            let expires = t.u64()?;
            let klen = t.u32()? as usize;
            let key = t.bytes(klen)?;
            Op::Put {
                key,
                value: t.rest(),
                flags,
                expires,
            }
        }
        OpCode::Remove => Op::Remove { key: t.rest() },
        OpCode::Touch => {
            let expires = t.u64()?;
            Op::Touch {
                key: t.rest(),
                expires,
            }
        }
        OpCode::Vanish => Op::Vanish,
        OpCode::Optimize => Op::Optimize { params: t.rest() },
        OpCode::Batch => {
            let count = t.u32()?;
            let body = t.rest();
            // Check the structure now, so applying never meets a broken batch half way.
            let mut n = 0u32;
            for op in batch_ops(body) {
                op?;
                n += 1;
            }
            if n != count {
                return Err(corrupt("batch count does not match its operations"));
            }
            Op::Batch { count, body }
        }
        OpCode::Values => {
            let klen = t.u32()? as usize;
            let key = t.bytes(klen)?;
            let count = t.u32()?;
            let body = t.rest();
            let mut n = 0u32;
            for v in values_of(body) {
                v?;
                n += 1;
            }
            if n != count {
                return Err(corrupt("value count does not match its values"));
            }
            Op::Values { key, count, body }
        }
        OpCode::In => {
            let n = t.u16()? as usize;
            let name = t.bytes(n)?;
            let n = t.u16()? as usize;
            let params = t.bytes(n)?;
            let code = t.u8()?;
            let op = match OpCode::from_u8(code) {
                Some(OpCode::In) | None => {
                    return Err(corrupt(&format!("op {code} in a keyspace")));
                }
                Some(c) => parse_op(c, t.rest())?,
            };
            Op::In {
                name,
                params,
                op: Box::new(op),
            }
        }
    })
}

/// The operations of a batch body, in order: puts and removes, each of the database's own
/// keyspace or `In` another.
pub fn batch_ops(body: &[u8]) -> impl Iterator<Item = Result<Op<'_>>> {
    let mut t = Take(body);
    std::iter::from_fn(move || {
        if t.0.is_empty() {
            return None;
        }
        let one = (|| {
            let code = t.u8()?;
            let len = t.u32()? as usize;
            let b = t.bytes(len)?;
            let op = match OpCode::from_u8(code) {
                Some(c @ (OpCode::Put | OpCode::Remove | OpCode::In)) => parse_op(c, b)?,
                _ => return Err(corrupt("a batch holds only puts and removes")),
            };
            match op.space().1 {
                Op::Put { .. } | Op::Remove { .. } => Ok(op),
                _ => Err(corrupt("a batch holds only puts and removes")),
            }
        })();
        if one.is_err() {
            t.0 = &[];
        }
        Some(one)
    })
}

/// The values of a `Values` body, in order.
pub fn values_of(body: &[u8]) -> impl Iterator<Item = Result<&[u8]>> {
    let mut t = Take(body);
    std::iter::from_fn(move || {
        if t.0.is_empty() {
            return None;
        }
        let one = t.u32().and_then(|n| t.bytes(n as usize));
        if one.is_err() {
            t.0 = &[];
        }
        Some(one)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(op: Op<'_>) {
        let mut b = Vec::new();
        encode(&mut b, 77, 3, 70, &op);
        match decode(&b).unwrap() {
            Next::Record(r, n) => {
                assert_eq!(n, b.len());
                assert_eq!((r.ts, r.origin_sid, r.origin_ts), (77, 3, 70));
                assert_eq!(r.op, op);
            }
            Next::Incomplete => panic!("complete record read as incomplete"),
        }
        for cut in 0..b.len() {
            assert!(
                matches!(decode(&b[..cut]), Ok(Next::Incomplete)),
                "cut {cut}"
            );
        }
        for i in 8..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x10;
            assert!(decode(&d).is_err(), "flip at {i} not caught");
        }
    }

    #[test]
    fn every_op_round_trips_and_damage_is_caught() {
        roundtrip(Op::Put {
            key: b"k",
            value: b"value",
            flags: 9,
            expires: 12,
        });
        roundtrip(Op::Remove { key: b"gone" });
        roundtrip(Op::Touch {
            key: b"t",
            expires: 5,
        });
        roundtrip(Op::Vanish);
        roundtrip(Op::Optimize { params: b"bnum=9" });
        let mut body = Vec::new();
        push_batch_op(
            &mut body,
            &Op::Put {
                key: b"a",
                value: b"1",
                flags: 0,
                expires: 0,
            },
        );
        push_batch_op(&mut body, &Op::Remove { key: b"b" });
        roundtrip(Op::Batch {
            count: 2,
            body: &body,
        });
        let ops: Vec<_> = batch_ops(&body).collect::<Result<_>>().unwrap();
        assert_eq!(ops[1], Op::Remove { key: b"b" });
        let mut vals = Vec::new();
        push_value(&mut vals, b"x");
        push_value(&mut vals, b"");
        roundtrip(Op::Values {
            key: b"d",
            count: 2,
            body: &vals,
        });
        roundtrip(Op::In {
            name: b"idx",
            params: b"cmp=decimal",
            op: Box::new(Op::Touch {
                key: b"t",
                expires: 5,
            }),
        });
        roundtrip(Op::In {
            name: b"idx",
            params: b"",
            op: Box::new(Op::Batch {
                count: 2,
                body: &body,
            }),
        });
        // A batch across keyspaces.
        let mut across = body.clone();
        push_batch_op(
            &mut across,
            &Op::In {
                name: b"idx",
                params: b"",
                op: Box::new(Op::Remove { key: b"c" }),
            },
        );
        roundtrip(Op::Batch {
            count: 3,
            body: &across,
        });
        let ops: Vec<_> = batch_ops(&across).collect::<Result<_>>().unwrap();
        assert_eq!(ops[2].space().0.unwrap().name, b"idx");
        assert_eq!(ops[2].key(), Some(&b"c"[..]));
    }

    #[test]
    fn a_keyspace_in_a_keyspace_and_other_ops_in_a_batch_are_refused() {
        fn inner(op: Op<'static>) -> Op<'static> {
            Op::In {
                name: b"a",
                params: b"",
                op: Box::new(op),
            }
        }
        let mut b = Vec::new();
        encode(&mut b, 1, 1, 1, &inner(inner(Op::Vanish)));
        assert!(decode(&b).is_err());
        let mut body = Vec::new();
        push_batch_op(&mut body, &inner(Op::Vanish));
        b.clear();
        encode(
            &mut b,
            1,
            1,
            1,
            &Op::Batch {
                count: 1,
                body: &body,
            },
        );
        assert!(decode(&b).is_err());
    }

    #[test]
    fn a_wrong_batch_count_is_refused() {
        let mut body = Vec::new();
        push_batch_op(&mut body, &Op::Remove { key: b"b" });
        let mut b = Vec::new();
        encode(
            &mut b,
            1,
            1,
            1,
            &Op::Batch {
                count: 3,
                body: &body,
            },
        );
        assert!(decode(&b).is_err());
    }
}
