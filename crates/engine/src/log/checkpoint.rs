//! Checkpoint files of any kind: written atomically, read back whole with their checksum
//! verified. What a checkpoint holds is the kind's (the hash's index shards, the fixed-length
//! database's id array); the file's life is the same for every kind:
//!
//! - written to `TMP` beside it, the data it points at made durable (`before_commit`, which
//!   syncs the log), the file fsynced, renamed over `NAME`, the directory fsynced: a crash at
//!   any point leaves the old checkpoint or the new one, never a mix;
//! - its last 4 bytes are the crc32c of every byte before them; a file shorter than `min_len`
//!   or whose checksum fails is damaged (the kind then replays its whole log).
//!
//! Also what a checkpoint knows of the log, in the same form for every kind
//! ([`Places`]): where each lane's replay starts and how long each segment was, from which
//! recovery tells damage below what was durable from a torn tail.

use super::recovery::Finding;
use super::segment::{seg_file_name, SegTable};
use crate::io::{VFile, Vfs};
use std::path::Path;

/// Write the checkpoint `name` of `dir` atomically from `parts` (concatenated; the crc32c of
/// all of them is appended). `before_commit` runs after the temporary file is written and
/// before it is synced and renamed: it makes durable what the checkpoint points at.
pub(crate) fn write_atomic(
    vfs: &dyn Vfs,
    dir: &Path,
    name: &str,
    tmp: &str,
    parts: &[&[u8]],
    before_commit: impl FnOnce() -> std::io::Result<()>,
) -> std::io::Result<()> {
    write_atomic_with(
        vfs,
        dir,
        name,
        tmp,
        |file| {
            let mut at = 0u64;
            let mut crc = 0u32;
            for p in parts {
                file.write_at(p, at)?;
                crc = crc32c::crc32c_append(crc, p);
                at += p.len() as u64;
            }
            Ok((at, crc))
        },
        before_commit,
    )
}

/// [`write_atomic`] for a kind that writes its body itself (in chunks, or from several
/// threads): `fill` writes every byte of the body to the (empty) temporary file from offset 0
/// and returns its length and its crc32c, which is appended.
pub(crate) fn write_atomic_with(
    vfs: &dyn Vfs,
    dir: &Path,
    name: &str,
    tmp: &str,
    fill: impl FnOnce(&dyn VFile) -> std::io::Result<(u64, u32)>,
    before_commit: impl FnOnce() -> std::io::Result<()>,
) -> std::io::Result<()> {
    replace_atomic(
        vfs,
        dir,
        name,
        tmp,
        |file| {
            let (end, crc) = fill(file)?;
            file.write_at(&crc.to_le_bytes(), end)
        },
        before_commit,
    )
}

/// The life of every file replaced whole (checkpoints, `kura.meta`): `fill` writes it under
/// the temporary name `tmp`, `before_commit` makes durable what it points at, the file is
/// fsynced, renamed over `name`, and the directory fsynced. A crash at any point leaves the
/// old file or the new one. (The checksum is the caller's: [`write_atomic`] appends one.)
pub(crate) fn replace_atomic(
    vfs: &dyn Vfs,
    dir: &Path,
    name: &str,
    tmp: &str,
    fill: impl FnOnce(&dyn VFile) -> std::io::Result<()>,
    before_commit: impl FnOnce() -> std::io::Result<()>,
) -> std::io::Result<()> {
    let tmp = dir.join(tmp);
    let file = vfs.open(&tmp, true)?;
    file.set_len(0)?;
    fill(&*file)?;
    before_commit()?;
    file.sync()?;
    drop(file);
    vfs.rename(&tmp, &dir.join(name))?;
    vfs.sync_dir(dir)
}

/// What reading a checkpoint file found.
pub(crate) enum Read<T = Vec<u8>> {
    Missing,
    /// Too short, unreadable, or its checksum fails: why.
    Damaged(String),
    /// Its bytes without the checksum, verified (or what the kind made of them).
    Verified(T),
}

/// Read the checkpoint `name` of `dir` and verify its checksum (`min_len`: the shortest a
/// checkpoint of the kind can be, checksum included).
pub(crate) fn read_verified(vfs: &dyn Vfs, dir: &Path, name: &str, min_len: usize) -> Read {
    match read_body(vfs, dir, name, min_len, false) {
        Read::Missing => Read::Missing,
        Read::Damaged(why) => Read::Damaged(why),
        Read::Verified(Body::Owned(mut b)) => {
            b.truncate(b.len() - 4);
            Read::Verified(b)
        }
        Read::Verified(Body::Mapped(m)) => {
            Read::Verified(m.as_slice()[..m.as_slice().len() - 4].to_vec())
        }
    }
}

/// [`read_verified`] handing the verified body to `decode` instead of returning it. With
/// `mapped`, the file is read through a memory map where the file system has one: a large
/// checkpoint's pages are in the page cache already, where a buffer would be fresh memory
/// (about a millisecond a megabyte on a virtual machine) and a copy.
pub(crate) fn read_verified_with<T>(
    vfs: &dyn Vfs,
    dir: &Path,
    name: &str,
    min_len: usize,
    mapped: bool,
    decode: impl FnOnce(&[u8]) -> T,
) -> Read<T> {
    match read_body(vfs, dir, name, min_len, mapped) {
        Read::Missing => Read::Missing,
        Read::Damaged(why) => Read::Damaged(why),
        Read::Verified(b) => {
            let all = b.bytes();
            Read::Verified(decode(&all[..all.len() - 4]))
        }
    }
}

/// A checkpoint file's bytes, checksum included.
enum Body {
    Owned(Vec<u8>),
    Mapped(crate::io::Map),
}

impl Body {
    fn bytes(&self) -> &[u8] {
        match self {
            Body::Owned(v) => v,
            Body::Mapped(m) => m.as_slice(),
        }
    }
}

/// Read a checkpoint file whole and verify its checksum.
fn read_body(vfs: &dyn Vfs, dir: &Path, name: &str, min_len: usize, mapped: bool) -> Read<Body> {
    let path = dir.join(name);
    let Ok(f) = vfs.open(&path, false) else {
        return Read::Missing;
    };
    let len = match f.len() {
        Ok(n) => n,
        Err(e) => return Read::Damaged(format!("cannot be read: {e}")),
    };
    if len < min_len.max(4) as u64 {
        return Read::Damaged(format!("{len} bytes, shorter than a checkpoint"));
    }
    let Ok(len) = usize::try_from(len) else {
        return Read::Damaged(format!("{len} bytes, larger than this machine can hold"));
    };
    let body = match if mapped { vfs.map(&path, len) } else { None } {
        Some(m) if m.as_slice().len() == len => Body::Mapped(m),
        _ => {
            let mut b = vec![0u8; len];
            if let Err(e) = f.read_at(&mut b, 0) {
                return Read::Damaged(format!("cannot be read: {e}"));
            }
            Body::Owned(b)
        }
    };
    let b = body.bytes();
    let end = len - 4;
    let stored = u32::from_le_bytes([b[end], b[end + 1], b[end + 2], b[end + 3]]);
    if crc32c::crc32c(&b[..end]) != stored {
        return Read::Damaged("its checksum does not match".into());
    }
    Read::Verified(body)
}

/// What a checkpoint that verified knows of the log: per lane, where replay starts
/// (segment 0: the lane had none), and per segment (id, valid length, live bytes, horizon).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Places {
    pub replay: Vec<(u32, u64)>,
    pub segs: Vec<(u32, u64, u64, u32)>,
}

impl Places {
    /// The length it recorded for segment `seg`, if it lists it.
    pub(crate) fn listed(&self, seg: u32) -> Option<u64> {
        self.segs.iter().find(|s| s.0 == seg).map(|s| s.1)
    }

    /// Where the checkpoint knew segment `seg` (of lane `lane`) durable up to: a segment
    /// before its lane's replay position, the length it recorded; the replay segment, the
    /// replay offset.
    pub(crate) fn durable(&self, seg: u32, lane: usize) -> Option<u64> {
        let (rseg, roff) = *self.replay.get(lane)?;
        if seg == rseg {
            return Some(roff);
        }
        if seg > rseg {
            return None;
        }
        self.listed(seg)
    }

    /// The findings about the segments on disk: records its index points into segments that
    /// are gone (`missing`: segment, how many), and segments shorter than it recorded.
    pub(crate) fn findings(&self, table: &SegTable, missing: &[(u32, u64)]) -> Vec<Finding> {
        let mut found: Vec<Finding> = missing
            .iter()
            .map(|&(id, n)| Finding {
                file: seg_file_name(id),
                off: 0,
                len: 0,
                lost: n,
                what: "the segment is missing, and the index points into it".into(),
            })
            .collect();
        for s in table.segs.values() {
            let Some(durable) = self.durable(s.id, s.lane) else {
                continue;
            };
            let len = s.file.len().unwrap_or(0);
            if len < durable {
                found.push(Finding {
                    file: seg_file_name(s.id),
                    off: len,
                    len: durable - len,
                    lost: 1,
                    what: format!(
                        "the file ends {} bytes before what was written to it",
                        durable - len
                    ),
                });
            }
        }
        found
    }

    /// Append the places in the layout every kind's checkpoint shares (little-endian):
    /// `u32 L`, L × (`u32` segment, `u32` offset), `u32 S`, S × (`u32` id, `u64` valid length,
    /// `u64` live bytes, `u32` horizon).
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.replay.len() as u32).to_le_bytes());
        for &(seg, off) in &self.replay {
            out.extend_from_slice(&seg.to_le_bytes());
            out.extend_from_slice(&(off as u32).to_le_bytes());
        }
        out.extend_from_slice(&(self.segs.len() as u32).to_le_bytes());
        for &(id, len, live, horizon) in &self.segs {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&live.to_le_bytes());
            out.extend_from_slice(&horizon.to_le_bytes());
        }
    }

    /// Decode what `encode` wrote at `*pos` of `b`, advancing `pos`; `None` when it runs past
    /// the end.
    pub(crate) fn decode(b: &[u8], pos: &mut usize) -> Option<Places> {
        let lanes = le_u32(b, *pos)? as usize;
        *pos += 4;
        if lanes > b.len() / 8 {
            return None;
        }
        let mut replay = Vec::with_capacity(lanes);
        for _ in 0..lanes {
            replay.push((le_u32(b, *pos)?, u64::from(le_u32(b, *pos + 4)?)));
            *pos += 8;
        }
        let nsegs = le_u32(b, *pos)? as usize;
        *pos += 4;
        if nsegs > b.len() / 24 {
            return None;
        }
        let mut segs = Vec::with_capacity(nsegs);
        for _ in 0..nsegs {
            segs.push((
                le_u32(b, *pos)?,
                le_u64(b, *pos + 4)?,
                le_u64(b, *pos + 12)?,
                le_u32(b, *pos + 20)?,
            ));
            *pos += 24;
        }
        Some(Places { replay, segs })
    }
}

/// The little-endian `u32` at `pos` of `b`, if it is all there.
pub(crate) fn le_u32(b: &[u8], pos: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(pos..pos.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// The little-endian `u64` at `pos` of `b`, if it is all there.
pub(crate) fn le_u64(b: &[u8], pos: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(pos..pos.checked_add(8)?)?.try_into().ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{CrashMode, SimVfs};

    #[test]
    fn written_atomically_and_read_back_verified() {
        let fs = SimVfs::new();
        let dir = Path::new("/c");
        fs.create_dir_all(dir).unwrap();
        assert!(matches!(read_verified(&fs, dir, "x.ck", 8), Read::Missing));
        write_atomic(&fs, dir, "x.ck", "x.ck.tmp", &[b"abc", b"defg"], || Ok(())).unwrap();
        fs.crash(CrashMode::DropUnsynced);
        match read_verified(&fs, dir, "x.ck", 8) {
            Read::Verified(b) => assert_eq!(b, b"abcdefg"),
            _ => panic!("not read back"),
        }
        // Handed to a decoder, mapped where the file system maps (on disk too).
        let tmp = tempfile::tempdir().unwrap();
        for (vfs, dir) in [(&fs as &dyn Vfs, dir), (&crate::io::OsVfs, tmp.path())] {
            write_atomic_with(
                vfs,
                dir,
                "y.ck",
                "y.ck.tmp",
                |f| {
                    f.write_at(b"xyz", 0)?;
                    Ok((3, crc32c::crc32c(b"xyz")))
                },
                || Ok(()),
            )
            .unwrap();
            let got = read_verified_with(vfs, dir, "y.ck", 4, true, |b| b.to_vec());
            assert!(matches!(got, Read::Verified(b) if b == b"xyz"));
            let short = read_verified_with(vfs, dir, "y.ck", 8, true, |b| b.to_vec());
            assert!(matches!(short, Read::Damaged(why) if why.contains("shorter")));
        }
        // A replacement that fails before its rename leaves the old one.
        let failed = write_atomic(&fs, dir, "x.ck", "x.ck.tmp", &[b"zzzzzz"], || {
            Err(std::io::Error::other("no"))
        });
        assert!(failed.is_err());
        assert!(matches!(read_verified(&fs, dir, "x.ck", 8), Read::Verified(b) if b == b"abcdefg"));
        assert!(fs.corrupt(&dir.join("x.ck"), 2, b"Z"));
        assert!(matches!(
            read_verified(&fs, dir, "x.ck", 8),
            Read::Damaged(_)
        ));
        assert!(matches!(
            read_verified(&fs, dir, "x.ck", 100),
            Read::Damaged(_)
        ));
    }

    #[test]
    fn places_round_trip_and_tell_what_was_durable() {
        let p = Places {
            replay: vec![(3, 100), (0, 0)],
            segs: vec![(1, 500, 20, 3), (3, 90, 10, u32::MAX)],
        };
        let mut b = Vec::new();
        p.encode(&mut b);
        let mut pos = 0;
        assert_eq!(Places::decode(&b, &mut pos), Some(p.clone()));
        assert_eq!(pos, b.len());
        for cut in 0..b.len() {
            assert_eq!(Places::decode(&b[..cut], &mut 0), None, "cut at {cut}");
        }
        assert_eq!(p.durable(1, 0), Some(500));
        assert_eq!(p.durable(3, 0), Some(100));
        assert_eq!(p.durable(4, 0), None);
        assert_eq!(p.listed(2), None);
    }
}
