//! Checkpoints (`tree.ki`) and the background thread.
//!
//! A checkpoint rolls the write-ahead log to a new segment, walks the leaves left to right
//! (each latched only while it is looked at), writes the image of every leaf changed since its
//! last one, and of every leaf whose image lies in a node segment that is mostly dead (so that
//! segment can go), syncs the write-ahead log (every change an image holds is then durable in
//! it too: a batch is never half in the images) and the node log, and replaces `tree.ki`
//! through `log::checkpoint` (which appends the checksum and verifies it when it is read).
//! Then the write-ahead segments before the roll and the emptied node segments are removed.
//!
//! `tree.ki` (all integers little-endian):
//! ```text
//! 0   8  magic "KURATKI1"
//! 8   4  format version (2; 1 is read: it has no keyspace list)
//! 12  8  salt of the database's logs
//! 20  4  write-ahead segment where replay starts
//! 24  8  offset in it
//! 32  4  node segment where the node log ended
//! 36  8  offset in it (images after it belong to no checkpoint)
//! 44  8  last version given out
//! 52  8  records (informative: an open counts the leaves' records)
//! 60  8  leaves
//! 68  .. per leaf in key order: [varint shared, varint suffix length, suffix: its low key,
//!        prefix-compressed against the previous one; absent for the first leaf],
//!        varint node segment, varint offset, varint record length, varint records in it
//!        (the leaves of keyspace 0, the database itself)
//! ..     (version 2) varint keyspaces, then per keyspace by id: varint id, varint name
//!        length, name, varint parameters length, parameters (`cmp=…`), varint leaves, and
//!        its leaves as above
//! ..  4  crc32c of every byte before it
//! ```
//! A checkpoint is the database's: it rolls the one write-ahead log once and walks the
//! leaves of every keyspace.

use super::forest::{Image, NONE};
use super::index::Key;
use super::{Inner, CKPT_NAME, CKPT_TMP};
use crate::error::{Error, Result};
use crate::log::format::{get_varint, put_varint, SEG_HEADER_LEN};
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub(crate) const CKPT_MAGIC: &[u8; 8] = b"KURATKI1";
pub(crate) const CKPT_VERSION: u32 = 2;
const FIXED: usize = 68;
/// The shortest `tree.ki`: the fixed part and the checksum.
pub(crate) const MIN_LEN: usize = FIXED + 4;

/// What a checkpoint says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Checkpoint {
    pub salt: u64,
    pub wal: (u32, u64),
    pub nodes_end: (u32, u64),
    pub version: u64,
    pub records: u64,
    pub leaves: Vec<(Option<Key>, Image)>,
    /// The keyspaces besides 0, by id.
    pub spaces: Vec<SpaceCkpt>,
}

/// A keyspace in a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SpaceCkpt {
    pub id: u64,
    pub name: String,
    pub cmp: super::cmp::Cmp,
    pub leaves: Vec<(Option<Key>, Image)>,
}

type Leaves = Vec<(Option<Key>, Image)>;

fn encode_leaves(b: &mut Vec<u8>, leaves: &Leaves) {
    let mut prev: &[u8] = &[];
    for (i, (low, img)) in leaves.iter().enumerate() {
        if i > 0 {
            let low = low.as_deref().unwrap_or(&[]);
            let shared = prev.iter().zip(low).take_while(|(a, b)| a == b).count();
            put_varint(b, shared as u64);
            put_varint(b, (low.len() - shared) as u64);
            b.extend_from_slice(&low[shared..]);
            prev = low;
        }
        put_varint(b, u64::from(img.seg()));
        put_varint(b, img.off());
        put_varint(b, u64::from(img.len));
        put_varint(b, u64::from(img.count));
    }
}

/// Decode `n` leaves at `*p` (never panics).
fn decode_leaves(
    body: &[u8],
    p: &mut usize,
    n: u64,
    cmp: super::cmp::Cmp,
) -> std::result::Result<Leaves, String> {
    if n == 0 || n > body.len() as u64 {
        return Err(format!("{n} leaves"));
    }
    let mut out = Vec::new();
    let mut prev: Vec<u8> = Vec::new();
    let bad = || "its leaf list is malformed".to_string();
    for i in 0..n {
        let low = if i == 0 {
            None
        } else {
            let shared = get_varint(body, p).ok_or_else(bad)? as usize;
            let suffix = get_varint(body, p).ok_or_else(bad)? as usize;
            if shared > prev.len() || suffix > body.len().saturating_sub(*p) {
                return Err(bad());
            }
            let mut k = prev[..shared].to_vec();
            k.extend_from_slice(&body[*p..*p + suffix]);
            *p += suffix;
            if i > 1 && cmp.cmp(&prev, &k) != std::cmp::Ordering::Less {
                return Err("its leaves are out of order".into());
            }
            prev.clone_from(&k);
            Some(Arc::from(k.into_boxed_slice()))
        };
        let seg = get_varint(body, p).ok_or_else(bad)?;
        let off = get_varint(body, p).ok_or_else(bad)?;
        let len = get_varint(body, p).ok_or_else(bad)?;
        let count = get_varint(body, p).ok_or_else(bad)?;
        let big = |v: u64| v > u64::from(u32::MAX);
        if seg == 0 || big(seg) || big(off) || len == 0 || big(len) || count > len {
            return Err(bad());
        }
        out.push((
            low,
            Image {
                loc: (seg << 32) | off,
                len: len as u32,
                count: count as u32,
            },
        ));
    }
    Ok(out)
}

impl Checkpoint {
    /// The body of `tree.ki` (`log::checkpoint` appends its checksum).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(FIXED + self.leaves.len() * 16);
        b.extend_from_slice(CKPT_MAGIC);
        b.extend_from_slice(&CKPT_VERSION.to_le_bytes());
        b.extend_from_slice(&self.salt.to_le_bytes());
        b.extend_from_slice(&self.wal.0.to_le_bytes());
        b.extend_from_slice(&self.wal.1.to_le_bytes());
        b.extend_from_slice(&self.nodes_end.0.to_le_bytes());
        b.extend_from_slice(&self.nodes_end.1.to_le_bytes());
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&self.records.to_le_bytes());
        b.extend_from_slice(&(self.leaves.len() as u64).to_le_bytes());
        encode_leaves(&mut b, &self.leaves);
        put_varint(&mut b, self.spaces.len() as u64);
        for sp in &self.spaces {
            put_varint(&mut b, sp.id);
            put_varint(&mut b, sp.name.len() as u64);
            b.extend_from_slice(sp.name.as_bytes());
            let params = format!("cmp={}", sp.cmp.name());
            put_varint(&mut b, params.len() as u64);
            b.extend_from_slice(params.as_bytes());
            put_varint(&mut b, sp.leaves.len() as u64);
            encode_leaves(&mut b, &sp.leaves);
        }
        b
    }

    /// Decode the body (never panics; the checksum after it is `log::checkpoint`'s, verified
    /// before); `cmp` checks the low keys rise.
    pub fn decode(body: &[u8], cmp: super::cmp::Cmp) -> std::result::Result<Checkpoint, String> {
        if body.len() < FIXED {
            return Err(format!(
                "{} bytes, shorter than a checkpoint",
                body.len() + 4
            ));
        }
        if &body[0..8] != CKPT_MAGIC {
            return Err("not a tree checkpoint".into());
        }
        let u32_at = |o: usize| u32::from_le_bytes(body[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(body[o..o + 8].try_into().unwrap());
        let version = u32_at(8);
        if !(1..=CKPT_VERSION).contains(&version) {
            return Err(format!(
                "format version {version} (this build reads 1 to {CKPT_VERSION})"
            ));
        }
        let mut c = Checkpoint {
            salt: u64_at(12),
            wal: (u32_at(20), u64_at(24)),
            nodes_end: (u32_at(32), u64_at(36)),
            version: u64_at(44),
            records: u64_at(52),
            leaves: Vec::new(),
            spaces: Vec::new(),
        };
        let mut p = FIXED;
        c.leaves = decode_leaves(body, &mut p, u64_at(60), cmp)?;
        if version >= 2 {
            let bad = || "its keyspace list is malformed".to_string();
            let n = get_varint(body, &mut p).ok_or_else(bad)?;
            let mut last = 0u64;
            for _ in 0..n {
                let id = get_varint(body, &mut p).ok_or_else(bad)?;
                if id < crate::log::format::KS_FIRST || id <= last {
                    return Err(bad());
                }
                last = id;
                let mut text = || -> std::result::Result<String, String> {
                    let len = get_varint(body, &mut p).ok_or_else(bad)? as usize;
                    let t = body
                        .get(p..p.saturating_add(len))
                        .and_then(|t| std::str::from_utf8(t).ok())
                        .ok_or_else(bad)?
                        .to_string();
                    p += len;
                    Ok(t)
                };
                let name = text()?;
                let params = text()?;
                if crate::store::check_keyspace_name(&name).is_err()
                    || c.spaces.iter().any(|s| s.name == name)
                {
                    return Err(bad());
                }
                let scmp = params
                    .strip_prefix("cmp=")
                    .and_then(|v| super::cmp::Cmp::parse(v).ok())
                    .ok_or_else(bad)?;
                let nl = get_varint(body, &mut p).ok_or_else(bad)?;
                let leaves = decode_leaves(body, &mut p, nl, scmp)?;
                c.spaces.push(SpaceCkpt {
                    id,
                    name,
                    cmp: scmp,
                    leaves,
                });
            }
        }
        if p != body.len() {
            return Err("bytes after its leaf list".into());
        }
        Ok(c)
    }
}

/// Write `body` as the `tree.ki` of `dir` (the database's, or a copy's).
pub(crate) fn write_ckpt(
    vfs: &dyn crate::io::Vfs,
    dir: &std::path::Path,
    body: &[u8],
) -> std::io::Result<()> {
    crate::log::checkpoint::write_atomic(vfs, dir, CKPT_NAME, CKPT_TMP, &[body], || Ok(()))
}

impl Checkpoint {
    /// The leaves of every keyspace.
    pub fn all_leaves(&self) -> impl Iterator<Item = &(Option<Key>, Image)> {
        self.leaves
            .iter()
            .chain(self.spaces.iter().flat_map(|s| s.leaves.iter()))
    }
}

impl Inner {
    /// Write a checkpoint (see the module documentation).
    pub(crate) fn checkpoint(&self) -> Result<()> {
        let _one = self.ckpt_lock.lock();
        self.checkpoint_locked(false).map(|_| ())
    }

    /// A checkpoint, with `ckpt_lock` held; `all` rewrites every leaf's image (`optimize`:
    /// every node segment is then emptied, and the images take the current compression).
    pub(crate) fn checkpoint_locked(&self, all: bool) -> Result<Checkpoint> {
        if self.ks != 0 {
            // The database's checkpoint.
            let root = self.root().ok_or(Error::Closed)?;
            return root.checkpoint_locked(all);
        }
        self.ckpt_asked.store(false, Ordering::Release);
        // Every lane that has a segment begins a new one (lane 0 always), all lanes' locks
        // held: every record before the replay position is older than every record after it,
        // and the segments after it are exactly those the roll made and those made later.
        let wal_pos = {
            let mut tails: Vec<_> = self.wal.tails.iter().map(|t| t.0.lock()).collect();
            let mut first = u32::MAX;
            for (lane, tail) in tails.iter_mut().enumerate() {
                if lane == 0 || tail.seg.id != 0 {
                    self.wal.roll(tail)?;
                    first = first.min(tail.seg.id);
                }
            }
            self.since_ckpt.store(0, Ordering::Relaxed);
            self.node_since.store(0, Ordering::Relaxed);
            (first, SEG_HEADER_LEN as u64)
        };
        if all {
            // Every image is rewritten: the node segment being written is sealed too, so it
            // can go with the others.
            let mut tail = self.nodes.tails[0].0.lock();
            if tail.end() > tail.seg.data {
                self.nodes.roll(&mut tail)?;
            }
        }
        // Node segments mostly dead: their live images move.
        let active = self.nodes.active_ids();
        let victims: HashSet<u32> = self
            .nodes
            .segs
            .load()
            .segs
            .values()
            .filter(|s| {
                let data = s.flushed().saturating_sub(s.data);
                !active.contains(&s.id) && (all || s.live.load(Ordering::Relaxed) * 2 < data)
            })
            .map(|s| s.id)
            .collect();
        let leaves = self.ckpt_leaves(&victims, all)?;
        let mut spaces = Vec::new();
        for sp in self.others() {
            spaces.push(SpaceCkpt {
                id: sp.ks,
                name: sp.name.clone(),
                cmp: sp.cmp,
                leaves: sp.ckpt_leaves(&victims, all)?,
            });
        }
        let nodes_end = {
            let mut tail = self.nodes.tails[0].0.lock();
            self.nodes.ensure_room(&mut tail, 0)?;
            (tail.seg.id, tail.end())
        };
        self.wal.sync_now()?;
        self.nodes.sync_now()?;
        let c = Checkpoint {
            salt: self.wal.salt,
            wal: wal_pos,
            nodes_end,
            version: self.version.load(Ordering::Relaxed),
            records: self.records(),
            leaves,
            spaces,
        };
        self.write_ckpt_file(&c.encode())?;
        let old_wal: Vec<u32> = self
            .wal
            .segs
            .load()
            .segs
            .keys()
            .copied()
            .filter(|&s| s < wal_pos.0)
            .collect();
        self.wal.remove_segments(&old_wal)?;
        let dead: Vec<u32> = victims.into_iter().collect();
        self.nodes.remove_segments(&dead)?;
        drop(self.wal.retired.take());
        drop(self.nodes.retired.take());
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(c)
    }

    /// This keyspace's leaves for a checkpoint, in key order: the image of every leaf changed
    /// since its last one written, those in `victims` moved (all rewritten with `all`).
    fn ckpt_leaves(&self, victims: &HashSet<u32>, all: bool) -> Result<Vec<(Option<Key>, Image)>> {
        let f = self.forest.load_full();
        let mut leaves = Vec::new();
        let mut id = 0;
        loop {
            let slot = f.slot(id);
            let mut g = slot.write();
            let rewrite = all && victims.contains(&g.image.seg());
            if g.dirty || g.image.is_none() || rewrite {
                if g.leaf.is_none() {
                    self.load(&mut g)?;
                }
                self.write_image(id, &mut g)?;
            } else if victims.contains(&g.image.seg()) {
                self.move_image(&mut g)?;
            }
            // The image and the right link as of this latch, together: once it is released the
            // leaf may split, and an image taken before the split must not be paired with the
            // new right neighbour (both would hold the moved keys; the split and every change
            // after it are in the log past this checkpoint's position).
            leaves.push((
                slot.low().map(|l| Arc::from(l.to_vec().into_boxed_slice())),
                g.image,
            ));
            let right = g.right;
            drop(g);
            if all {
                self.evict();
            }
            if right == NONE {
                break;
            }
            id = right;
        }
        Ok(leaves)
    }

    /// Copy a clean leaf's image record to the end of the node log as it is.
    fn move_image(&self, st: &mut super::forest::SlotState) -> Result<()> {
        let img = st.image;
        let segs = self.nodes.segs.load();
        let Some(seg) = segs.get(img.seg()) else {
            return Err(Error::Corrupt(format!(
                "leaf image in missing node segment {}",
                img.seg()
            )));
        };
        let mut buf = Vec::new();
        self.nodes
            .read_range(seg, img.off(), img.len as usize, &mut buf)?;
        let (s, off) = {
            let mut tail = self.nodes.tails[0].0.lock();
            self.nodes.append(&mut tail, &[&buf], false)?
        };
        self.nodes.add_live(s, i64::from(img.len));
        self.nodes.add_live(img.seg(), -i64::from(img.len));
        self.node_since
            .fetch_add(u64::from(img.len), Ordering::Relaxed);
        st.image = Image {
            loc: (u64::from(s) << 32) | off,
            ..img
        };
        Ok(())
    }

    /// Replace `tree.ki` through `log::checkpoint::write_atomic` (beside it, synced, renamed,
    /// the directory synced; the checksum appended). What it points at is synced before.
    fn write_ckpt_file(&self, body: &[u8]) -> Result<()> {
        write_ckpt(&*self.wal.vfs, &self.wal.dir, body).map_err(|e| self.wal.poison(&e))
    }

    /// The background thread: hands the logs' buffers to the OS, syncs at the interval,
    /// checkpoints when asked, keeps the cache within its budget.
    pub(crate) fn background(self: Arc<Inner>) {
        let mut last_sync = std::time::Instant::now();
        while self.wal.pause(crate::log::FLUSH_TICK) {
            if self.wal.is_poisoned.load(Ordering::Acquire) {
                continue;
            }
            let _ = self.wal.flush_all();
            let _ = self.nodes.flush_all();
            self.wal.start_writebacks();
            self.nodes.start_writebacks();
            if let crate::config::SyncMode::Interval(d) = self.wal.sync {
                if last_sync.elapsed() >= d {
                    let _ = self.wal.sync_now();
                    last_sync = std::time::Instant::now();
                }
            }
            if self.ckpt_due() {
                let _ = self.checkpoint();
            }
            if self.cached.load(Ordering::Relaxed) > self.cfg.cache as i64 {
                self.evict();
            }
            self.nodes.trim_maps();
            self.wal.trim_maps();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{CrashMode, SimVfs, Vfs};
    use crate::tree::cmp::Cmp;
    use crate::tree::open::read_ckpt;
    use std::path::Path;

    #[test]
    fn checkpoints_round_trip_and_refuse_damage() {
        let key = |s: &str| Some(Arc::from(s.as_bytes().to_vec().into_boxed_slice()));
        let img = |seg: u64, off: u64| Image {
            loc: (seg << 32) | off,
            len: 100,
            count: 7,
        };
        let c = Checkpoint {
            salt: 7,
            wal: (3, 32),
            nodes_end: (2, 4096),
            version: 99,
            records: 1234,
            leaves: vec![
                (None, img(1, 32)),
                (key("apple"), img(1, 132)),
                (key("apricot"), img(2, 32)),
            ],
            spaces: Vec::new(),
        };
        // Version 1 (no keyspace list) is read.
        let mut v1 = c.encode();
        v1.truncate(v1.len() - 1);
        v1[8..12].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(Checkpoint::decode(&v1, Cmp::Lex).unwrap(), c);
        let c = Checkpoint {
            spaces: vec![
                SpaceCkpt {
                    id: 2,
                    name: "by-age".into(),
                    cmp: Cmp::Dec,
                    leaves: vec![(None, img(1, 500)), (key("10"), img(1, 600))],
                },
                SpaceCkpt {
                    id: 5,
                    name: "z".into(),
                    cmp: Cmp::Lex,
                    leaves: vec![(None, img(2, 900))],
                },
            ],
            ..c
        };
        let b = c.encode();
        assert_eq!(Checkpoint::decode(&b, Cmp::Lex).unwrap(), c);
        for cut in 0..b.len() {
            assert!(Checkpoint::decode(&b[..cut], Cmp::Lex).is_err());
        }
        // Out of order for another comparator.
        assert!(Checkpoint::decode(&b, Cmp::LexDesc).is_err());
        // On disk through `log::checkpoint`: the body and its crc32c (the bytes every version
        // wrote), read back verified; any byte flipped, or the file cut, refuses.
        let fs = SimVfs::new();
        let dir = Path::new("/t");
        fs.create_dir_all(dir).unwrap();
        assert_eq!(read_ckpt(&fs, dir, Cmp::Lex).unwrap(), None);
        write_ckpt(&fs, dir, &b).unwrap();
        fs.crash(CrashMode::DropUnsynced);
        let file = dir.join(CKPT_NAME);
        let mut want = b.clone();
        want.extend_from_slice(&crc32c::crc32c(&b).to_le_bytes());
        let f = fs.open(&file, false).unwrap();
        let mut on_disk = vec![0u8; f.len().unwrap() as usize];
        f.read_at(&mut on_disk, 0).unwrap();
        assert_eq!(on_disk, want);
        assert!(!fs.exists(&dir.join(CKPT_TMP)));
        assert_eq!(read_ckpt(&fs, dir, Cmp::Lex).unwrap(), Some(c));
        for at in 0..want.len() {
            let mut bad = want.clone();
            bad[at] ^= 1;
            f.write_at(&bad, 0).unwrap();
            let r = read_ckpt(&fs, dir, Cmp::Lex);
            assert!(
                matches!(&r, Err(Error::Corrupt(why)) if why.contains(CKPT_NAME)),
                "{at}: {r:?}"
            );
        }
        f.write_at(&want, 0).unwrap();
        f.set_len(40).unwrap();
        let r = read_ckpt(&fs, dir, Cmp::Lex);
        assert!(
            matches!(&r, Err(Error::Corrupt(why)) if why.contains("shorter")),
            "{r:?}"
        );
    }
}
