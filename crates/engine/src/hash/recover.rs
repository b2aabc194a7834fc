//! Opening the files of a database: what the checkpoint says, and what the records mean to
//! the hash's index. The replay itself — which ranges to scan, a torn tail told from damage,
//! the refusal of a writable open that finds damage, the clears of a `vanish`, the cut of torn
//! tails — is the log's (`log::replay`, docs/ARCHITECTURE.md "Recovery procedure"); the hash
//! supplies its checkpoint's places and index, and applies each record ([`Replayer`]): a key's
//! records may be in several lanes, and the shard seq of each decides between them.

use super::ckpt;
use super::format::{self, T_BATCH, T_DELETE, T_PUT};
use super::index::Table;
use super::segment::{seg_file_name, SegTable};
use super::{
    decode_ckpt_shard, for_each_sub, shard_max_load, side_by_side, Inner, CKPT_MAGIC, CKPT_NAME,
    CKPT_VERSION, CKPT_VERSION_SPACES, NSHARDS, PARALLEL_CKPT,
};
use crate::error::{Error, Result};
use crate::io::Vfs;
use crate::log::checkpoint::{self, le_u32, le_u64, Places};
use crate::log::recovery::{refusal, Finding, Probe};
use crate::log::replay::{self, Replayer};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The shortest `index.ki` (checksum included).
const CKPT_MIN_LEN: usize = 40;

/// What `index.ki` holds, as far as it could be read.
pub(super) enum CkptRead {
    Missing,
    /// Its checksum or structure fails, or it is of another format or database.
    Damaged(String),
    Read(Checkpoint),
}

/// A keyspace's index as a checkpoint holds it: its id, and each shard's seq and table.
pub(super) type SpaceTables = (u64, Vec<(u64, Table)>);

/// A checkpoint whose checksum verified.
pub(super) struct Checkpoint {
    pub hash_seed: u64,
    /// Where each lane's replay starts, and each segment's valid length, live bytes and
    /// horizon.
    pub places: Places,
    /// Per shard: (seq, table), when every slot points into a segment on disk.
    pub shards: Option<Vec<(u64, Table)>>,
    /// Each keyspace's index (version 3): its id and its shards, as `shards`.
    pub spaces: Vec<SpaceTables>,
    /// Segments its slots point into that are not on disk, with how many slots each.
    pub missing: Vec<(u32, u64)>,
}

/// Read and decode `index.ki` of `dir`, for a database of `lanes` lanes whose segments on disk
/// are `known` (sorted ids).
pub(super) fn read_checkpoint(vfs: &dyn Vfs, dir: &Path, lanes: usize, known: &[u32]) -> CkptRead {
    match checkpoint::read_verified_with(vfs, dir, CKPT_NAME, CKPT_MIN_LEN, true, |body| {
        decode_checkpoint(body, lanes, known)
    }) {
        checkpoint::Read::Missing => CkptRead::Missing,
        checkpoint::Read::Damaged(why) => CkptRead::Damaged(why),
        checkpoint::Read::Verified(Ok(c)) => CkptRead::Read(c),
        checkpoint::Read::Verified(Err(why)) => CkptRead::Damaged(why.into()),
    }
}

/// The salt (hash seed) and lane count a checkpoint that verifies was written for: what a
/// database whose segment headers are all unusable is read with.
pub(super) fn peek_checkpoint(vfs: &dyn Vfs, dir: &Path) -> Option<(u64, usize)> {
    match checkpoint::read_verified(vfs, dir, CKPT_NAME, CKPT_MIN_LEN) {
        checkpoint::Read::Verified(b) if &b[0..8] == CKPT_MAGIC => {
            Some((le_u64(&b, 16)?, le_u32(&b, 24)? as usize))
        }
        _ => None,
    }
}

/// Decode the body of `index.ki` (its checksum verified).
fn decode_checkpoint(
    b: &[u8],
    lanes: usize,
    known: &[u32],
) -> std::result::Result<Checkpoint, &'static str> {
    let body = b;
    let bad = "its structure is damaged";
    if &body[0..8] != CKPT_MAGIC {
        return Err("not a checkpoint file");
    }
    let version = le_u32(body, 8).ok_or(bad)?;
    if version != CKPT_VERSION && version != CKPT_VERSION_SPACES {
        return Err("a checkpoint format this build does not read (the log is replayed instead)");
    }
    if le_u32(body, 12).ok_or(bad)? != NSHARDS as u32 {
        return Err("written for another shard count");
    }
    let hash_seed = le_u64(body, 16).ok_or(bad)?;
    if le_u32(body, 24).ok_or(bad)? as usize != lanes {
        return Err("written for another lane count");
    }
    // The places in the layout every kind's checkpoint shares.
    let mut pos = 24;
    let places = Places::decode(body, &mut pos).ok_or(bad)?;
    // Where each shard's section starts (sections come in any order, each led by its
    // shard's number and giving its length), so that the sections can then be decoded
    // and their tables built by two threads.
    let mut starts = vec![usize::MAX; NSHARDS];
    let mut slots = 0usize;
    for _ in 0..NSHARDS {
        let i = le_u32(body, pos).ok_or(bad)? as usize;
        let start = starts.get_mut(i).filter(|s| **s == usize::MAX).ok_or(bad)?;
        *start = pos + 4;
        let (end, n) = ckpt::section_end(body, pos + 4).ok_or(bad)?;
        pos = end;
        slots = slots.saturating_add(n);
    }
    // Version 3: each keyspace's id and its shard sections.
    let mut space_starts: Vec<(u64, Vec<usize>)> = Vec::new();
    if version == CKPT_VERSION_SPACES {
        let k = le_u32(body, pos).ok_or(bad)? as usize;
        pos += 4;
        for _ in 0..k.min(body.len()) {
            let ks = le_u64(body, pos).ok_or(bad)?;
            pos += 8;
            let mut st = vec![usize::MAX; NSHARDS];
            for _ in 0..NSHARDS {
                let i = le_u32(body, pos).ok_or(bad)? as usize;
                let start = st.get_mut(i).filter(|s| **s == usize::MAX).ok_or(bad)?;
                *start = pos + 4;
                pos = ckpt::section_end(body, pos + 4).ok_or(bad)?.0;
            }
            if ks == 0 || space_starts.iter().any(|s| s.0 == ks) {
                return Err(bad);
            }
            space_starts.push((ks, st));
        }
    }
    if pos != body.len() {
        return Err(bad);
    }
    // Each thread takes the next shard not yet taken, as the writer does.
    let next = AtomicUsize::new(0);
    let decode = || -> Option<Vec<(usize, (u64, Table))>> {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= NSHARDS {
                return Some(done);
            }
            done.push((i, decode_ckpt_shard(body, starts[i], known)?));
        }
    };
    let (mine, theirs) = side_by_side(slots >= PARALLEL_CKPT, decode);
    let parts = match (mine, theirs) {
        (Some(m), None) => Some(m),
        (Some(mut m), Some(Ok(Some(t)))) => {
            m.extend(t);
            Some(m)
        }
        _ => None,
    };
    let mut c = Checkpoint {
        hash_seed,
        places,
        shards: None,
        spaces: Vec::new(),
        missing: Vec::new(),
    };
    let spaces: Option<Vec<SpaceTables>> = space_starts
        .iter()
        .map(|(ks, st)| {
            st.iter()
                .map(|&s| decode_ckpt_shard(body, s, known))
                .collect::<Option<Vec<_>>>()
                .map(|t| (*ks, t))
        })
        .collect();
    match parts.zip(spaces) {
        Some((mut parts, spaces)) => {
            parts.sort_unstable_by_key(|p| p.0);
            c.shards = Some(parts.into_iter().map(|p| p.1).collect());
            c.spaces = spaces;
        }
        None => {
            // Damaged sections would have failed the checksum: the slots point into segments
            // that are gone. Count them, segment by segment.
            let starts: Vec<usize> = starts
                .iter()
                .chain(space_starts.iter().flat_map(|s| s.1.iter()))
                .copied()
                .collect();
            let mut all: Vec<u32> = Vec::new();
            for &s in &starts {
                all.extend(ckpt::section_ids(body, s).ok_or(bad)?);
            }
            all.sort_unstable();
            all.dedup();
            let mut missing: HashMap<u32, u64> = HashMap::new();
            for &s in &starts {
                let (_, _, slots) = ckpt::decode(body, s, &all).ok_or(bad)?;
                for slot in slots {
                    if known.binary_search(&slot.seg).is_err() {
                        *missing.entry(slot.seg).or_default() += 1;
                    }
                }
            }
            if missing.is_empty() {
                return Err(bad);
            }
            c.missing = missing.into_iter().collect();
            c.missing.sort_unstable();
        }
    }
    Ok(c)
}

impl Checkpoint {
    /// Its findings about the segments on disk: records in segments that are gone, and
    /// segments shorter than it recorded.
    pub fn findings(&self, table: &SegTable) -> Vec<Finding> {
        self.places.findings(table, &self.missing)
    }
}

impl Inner {
    /// Build the index: from the checkpoint when it is usable, then replay the log after it;
    /// else from every segment. `bad` are the segment files whose header is not one of this
    /// database's. Refuses (writable) or reports (read-only) damage; truncates a torn tail;
    /// starts the active segments (`log::replay`).
    pub(super) fn recover(&self, bad: Vec<Probe>) -> Result<()> {
        let table = self.log.segs.load_full();
        let known: Vec<u32> = table.segs.keys().copied().collect();
        let mut found: Vec<Finding> = Vec::new();
        let mut ckpt = match read_checkpoint(&*self.log.vfs, &self.log.dir, self.log.lanes, &known)
        {
            CkptRead::Read(c) if c.hash_seed == self.log.salt => Some(c),
            _ => None,
        };
        if let Some(c) = &ckpt {
            found.extend(c.findings(&table));
        }
        let usable = found.is_empty() && !self.full_replay;
        let from = match &mut ckpt {
            Some(c) if usable => self.load_checkpoint(c),
            _ => None,
        };
        if from.is_none() {
            // Rebuilt from the whole log: save the result at the next close.
            self.appended.fetch_add(1, Ordering::Relaxed);
        }
        let segsiz = self.cfg.lock().segsiz as usize;
        let done = replay::replay(
            &self.log,
            bad,
            ckpt.as_ref().map(|c| &c.places),
            from.as_deref(),
            found,
            segsiz,
            &mut Replay {
                inner: self,
                tombs: HashMap::new(),
                space_tombs: HashMap::new(),
            },
        )?;
        self.name_spaces()?;
        // Something to checkpoint at the next close.
        self.appended.fetch_add(done.applied, Ordering::Relaxed);
        *self.findings.lock() = done.findings;
        // Close the files and maps of segments the replay dropped (wholly before a clear).
        self.reclaim();
        Ok(())
    }

    /// Fill the index from a checkpoint and take what it recorded of each segment; returns
    /// where each lane's replay starts. `None` (and an empty index) when its slots point into
    /// a segment that does not exist.
    fn load_checkpoint(&self, c: &mut Checkpoint) -> Option<Vec<(u32, u64)>> {
        let shards = c.shards.take()?;
        for (i, (seq, t)) in shards.into_iter().enumerate() {
            let mut g = self.excl(i);
            g.table = t;
            g.table.set_max_load(shard_max_load(i));
            g.seq = seq;
        }
        for (ks, shards) in std::mem::take(&mut c.spaces) {
            let sp = self.space_or_new(ks);
            for (i, (seq, t)) in shards.into_iter().enumerate() {
                let mut g = sp.excl(i);
                g.table = t;
                g.table.set_max_load(shard_max_load(i));
                g.seq = seq;
            }
        }
        replay::restore_places(&self.log, &c.places);
        Some(c.places.replay.clone())
    }

    /// The record the index holds for `key`, by its header (not verified: the header of a
    /// record whose value was damaged still gives its seq). A candidate too damaged to tell
    /// whose it is is damage behind the checkpoint: a writable open refuses; a read-only one
    /// takes it for another key's and serves around it.
    fn replay_find(
        &self,
        tbl: &impl super::Cands,
        tag: u32,
        key: &[u8],
    ) -> Result<Option<super::Found>> {
        for slot in tbl.cands(tag) {
            match self.key_header(slot.seg, slot.off as u64, key) {
                Ok(Some(h)) => return Ok(Some(super::Found::new(&slot, &h, None))),
                Ok(None) => {}
                Err(Error::Corrupt(_)) if self.log.readonly => {}
                Err(Error::Corrupt(_)) => {
                    let f = Finding {
                        file: seg_file_name(slot.seg),
                        off: slot.off as u64,
                        len: 0,
                        lost: 1,
                        what: "a damaged record the index points at".into(),
                    };
                    return Err(refusal(&self.log.dir, &[f]));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }
}

/// Recovery's view of the records (`log::replay`): each key's records applied in seq order.
struct Replay<'a> {
    inner: &'a Inner,
    /// The seq of the newest delete applied for each key.
    tombs: HashMap<Vec<u8>, u64>,
    /// `tombs` of each keyspace but 0.
    space_tombs: HashMap<u64, HashMap<Vec<u8>, u64>>,
}

impl Replayer for Replay<'_> {
    fn forget_before(
        &mut self,
        cut: &[Option<u64>],
        lane_of: &dyn Fn(u32) -> Option<usize>,
    ) -> Result<()> {
        let spaces = self.inner.spaces.all();
        for sp in std::iter::once(self.inner).chain(spaces.iter().map(|s| &**s)) {
            for i in 0..NSHARDS {
                sp.excl(i).retain(|s| {
                    let lane = lane_of(s.seg);
                    lane.and_then(|l| cut[l]).is_none_or(|c| s.loc() >= c)
                });
            }
        }
        Ok(())
    }

    /// A key's records may be in several lanes; the shard seq orders them: a record older
    /// than what the index holds for its key, or than a delete already applied (`tombs`), is
    /// skipped.
    fn apply(&mut self, seg: u32, off: u64, h: &format::Header, rec: &[u8]) -> Result<()> {
        match h.typ {
            T_PUT | T_DELETE if h.keyspace != 0 => {
                // A keyspace's record, to its own index (named by the catalog after replay).
                let sp = self.inner.space_or_new(h.keyspace);
                let tombs = self.space_tombs.entry(h.keyspace).or_default();
                apply_key(&sp, tombs, seg, off, h, rec)?;
            }
            T_PUT | T_DELETE => apply_key(self.inner, &mut self.tombs, seg, off, h, rec)?,
            T_BATCH => {
                for_each_sub(rec, h, |pos, sh, srec| {
                    self.apply(seg, off + pos as u64, sh, srec)
                })?;
            }
            _ => {}
        }
        Ok(())
    }
}

/// Apply a put or delete to the index `inner` (its keyspace's).
fn apply_key(
    inner: &Inner,
    tombs: &mut HashMap<Vec<u8>, u64>,
    seg: u32,
    off: u64,
    h: &format::Header,
    rec: &[u8],
) -> Result<()> {
    {
        {
            {
                let key = &rec[h.key_off..h.key_off + h.klen];
                let seq = h.fields.seq;
                let (shard, tag) = inner.hash(key);
                let mut tbl = inner.excl(shard);
                tbl.seq = tbl.seq.max(seq);
                let found = inner.replay_find(&tbl, tag, key)?;
                if found.as_ref().is_some_and(|f| f.seq >= seq)
                    || tombs.get(key).is_some_and(|&t| t >= seq)
                {
                    return Ok(()); // a newer write of the key is already applied
                }
                let old = found.map(|f| (f.slot, f.len));
                if h.typ == T_PUT {
                    if h.fields.expires != 0 {
                        inner.expiring.fetch_add(1, Ordering::Relaxed);
                    }
                    inner.set_slot(&mut tbl, tag, old, seg, off, h.len);
                } else {
                    if let Some((o, len)) = old {
                        inner.remove_slot(&mut tbl, o, len);
                    }
                    tombs.insert(key.to_vec(), seq);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
impl Inner {
    /// The checkpoint, when it is intact and every slot points into a segment of `known`.
    pub(super) fn read_checkpoint(&self, known: &[u32]) -> Option<Checkpoint> {
        match read_checkpoint(&*self.log.vfs, &self.log.dir, self.log.lanes, known) {
            CkptRead::Read(c) if c.shards.is_some() => Some(c),
            _ => None,
        }
    }
}
