//! The checkpoint of a fixed-length database (`index.kfi`): the id array, so that an open
//! replays only the log written after it. docs/ARCHITECTURE.md draws the same layout; the two
//! must agree.
//!
//! ```text
//! 0   8  magic "KURAFIX1"
//! 8   4  version (u32 LE) = 1
//! 12  8  salt (u64 LE): the salt of the segments it indexes (a mismatch voids it)
//! 20  8  seq (u64 LE): the largest seq given out when it was taken
//! 28  4  L, the lane count, then L × (u32 segment, u32 offset): where each lane's replay
//!        starts (segment 0: the lane had none)
//! ..  4  S, then S × (u32 id, u64 valid length, u64 live bytes, u32 horizon): the segments
//! ..  8  N (u64 LE): ids with a record
//! ..  ..  N entries, ascending by id, each three varints:
//!          gap     the id minus the previous entry's id, minus 1 (the first: the id minus 1)
//!          seg     0: the previous entry's segment; else the segment id
//!          off     seg 0: the offset minus the previous entry's, zigzag-encoded; else the
//!                  offset
//! end 4  crc32c of every byte before it
//! ```
//!
//! Records written in id order, as a load does, cost 3 bytes an id (a gap of 0, the same
//! segment, a small step forward).

use crate::log::checkpoint::{le_u32, le_u64, Places};
use crate::log::format::{get_varint, put_varint};

pub(super) const MAGIC: &[u8; 8] = b"KURAFIX1";
pub(super) const VERSION: u32 = 1;
/// The shortest checkpoint: header, no lanes, no segments, no entries, checksum.
pub(super) const MIN_LEN: usize = 28 + 4 + 4 + 8 + 4;

/// What a checkpoint holds besides its entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Head {
    pub salt: u64,
    pub seq: u64,
    pub places: Places,
    pub entries: u64,
}

/// Encode a checkpoint (without its checksum, which the file writer appends) of `entries`
/// (id, segment, offset), ascending by id.
pub(super) fn encode(head: &Head, entries: &[(u64, u32, u32)], out: &mut Vec<u8>) {
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&head.salt.to_le_bytes());
    out.extend_from_slice(&head.seq.to_le_bytes());
    head.places.encode(out);
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    let (mut pid, mut pseg, mut poff) = (0u64, 0u32, 0u32);
    for &(id, seg, off) in entries {
        debug_assert!(id > pid && seg != 0);
        put_varint(out, id - pid - 1);
        if seg == pseg {
            put_varint(out, 0);
            let d = i64::from(off) - i64::from(poff);
            put_varint(out, ((d << 1) ^ (d >> 63)) as u64);
        } else {
            put_varint(out, u64::from(seg));
            put_varint(out, u64::from(off));
        }
        (pid, pseg, poff) = (id, seg, off);
    }
}

/// Decode a checkpoint's bytes (checksum already verified and cut off), calling
/// `f(id, segment, offset)` for each entry in id order. An error says what is wrong with it
/// (the caller then replays the whole log).
pub(super) fn decode(
    b: &[u8],
    mut f: impl FnMut(u64, u32, u32) -> Result<(), &'static str>,
) -> Result<Head, &'static str> {
    let bad = "its structure is damaged";
    if b.get(..8) != Some(MAGIC) {
        return Err("not a checkpoint of a fixed-length database");
    }
    if le_u32(b, 8).ok_or(bad)? != VERSION {
        return Err("a checkpoint format this build does not read (the log is replayed instead)");
    }
    let salt = le_u64(b, 12).ok_or(bad)?;
    let seq = le_u64(b, 20).ok_or(bad)?;
    let mut pos = 28;
    let places = Places::decode(b, &mut pos).ok_or(bad)?;
    let n = le_u64(b, pos).ok_or(bad)?;
    pos += 8;
    let (mut pid, mut pseg, mut poff) = (0u64, 0u32, 0u32);
    for _ in 0..n {
        let gap = get_varint(b, &mut pos).ok_or(bad)?;
        let id = pid
            .checked_add(gap)
            .and_then(|x| x.checked_add(1))
            .ok_or(bad)?;
        let s = get_varint(b, &mut pos).ok_or(bad)?;
        let v = get_varint(b, &mut pos).ok_or(bad)?;
        let (seg, off) = if s == 0 {
            if pseg == 0 {
                return Err(bad);
            }
            let d = ((v >> 1) as i64) ^ -((v & 1) as i64);
            let off = i64::from(poff).checked_add(d).ok_or(bad)?;
            let off = u32::try_from(off).map_err(|_| bad)?;
            (pseg, off)
        } else {
            (
                u32::try_from(s).map_err(|_| bad)?,
                u32::try_from(v).map_err(|_| bad)?,
            )
        };
        f(id, seg, off)?;
        (pid, pseg, poff) = (id, seg, off);
    }
    if pos != b.len() {
        return Err(bad);
    }
    Ok(Head {
        salt,
        seq,
        places,
        entries: n,
    })
}

/// An entry of a checkpoint: an id, and the segment and offset of its newest record.
pub type Entry = (u64, u32, u32);

/// A checkpoint's bytes (checksum already cut off) read as its seq and its entries (id,
/// segment, offset), ascending by id; an error says what is wrong with it. What an open reads,
/// for tools and the fuzz target.
pub fn read_entries(b: &[u8]) -> Result<(u64, Vec<Entry>), &'static str> {
    let mut entries = Vec::new();
    let head = decode(b, |id, seg, off| {
        entries.push((id, seg, off));
        Ok(())
    })?;
    Ok((head.seq, entries))
}

/// The bytes (without the checksum) of a checkpoint of `entries` (id, segment, offset; ascending
/// by id, segments not 0) taken at `seq`, with no lanes or segments listed.
pub fn write_entries(salt: u64, seq: u64, entries: &[Entry]) -> Vec<u8> {
    let head = Head {
        salt,
        seq,
        places: Places::default(),
        entries: entries.len() as u64,
    };
    let mut out = Vec::new();
    encode(&head, entries, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (Head, Vec<(u64, u32, u32)>) {
        let entries = vec![
            (1, 1, 32),
            (2, 1, 58),
            (3, 1, 40),
            (1000, 2, 32),
            (1001, 1, 4_000_000_000),
            (u64::from(u32::MAX) * 4, 3, 0),
        ];
        let head = Head {
            salt: 77,
            seq: 123,
            places: Places {
                replay: vec![(3, 90)],
                segs: vec![(1, 100, 50, 2), (2, 70, 20, 3), (3, 90, 9, u32::MAX)],
            },
            entries: entries.len() as u64,
        };
        (head, entries)
    }

    #[test]
    fn round_trips() {
        let (head, entries) = sample();
        let mut b = Vec::new();
        encode(&head, &entries, &mut b);
        let mut got = Vec::new();
        let h = decode(&b, |id, s, o| {
            got.push((id, s, o));
            Ok(())
        })
        .unwrap();
        assert_eq!(h, head);
        assert_eq!(got, entries);
        // Every cut is an error, never a panic.
        for cut in 0..b.len() {
            assert!(decode(&b[..cut], |_, _, _| Ok(())).is_err(), "cut at {cut}");
        }
        let mut longer = b.clone();
        longer.push(0);
        assert!(decode(&longer, |_, _, _| Ok(())).is_err());
    }

    #[test]
    fn ids_in_order_cost_three_bytes() {
        let entries: Vec<(u64, u32, u32)> =
            (1..=1000).map(|i| (i, 1, 32 + 26 * i as u32)).collect();
        let head = Head {
            salt: 1,
            seq: 1000,
            places: Places::default(),
            entries: 1000,
        };
        let mut b = Vec::new();
        encode(&head, &entries, &mut b);
        assert!(b.len() < 50 + 3 * 1000 + 2, "{} bytes", b.len());
    }

    #[test]
    fn an_offset_step_past_the_range_is_an_error() {
        // One entry at offset u32::MAX, then a step of i64::MAX (zigzag 2^64 - 2) from it.
        let mut b = write_entries(1, 1, &[(1, 1, u32::MAX)]);
        b[36..44].copy_from_slice(&2u64.to_le_bytes());
        put_varint(&mut b, 0);
        put_varint(&mut b, 0);
        put_varint(&mut b, u64::MAX - 1);
        assert!(read_entries(&b).is_err());
    }

    #[test]
    fn junk_never_panics() {
        let mut x = 7u64;
        for len in 0..200 {
            let mut b: Vec<u8> = MAGIC.to_vec();
            b.extend_from_slice(&VERSION.to_le_bytes());
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b.push(x as u8);
            }
            let _ = decode(&b, |_, _, _| Ok(()));
        }
    }
}
