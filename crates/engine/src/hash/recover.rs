//! Opening the files of a database: which segments there are, what the checkpoint says, and
//! the replay that rebuilds the index — telling a crash's torn tail from damage on the way.
//!
//! The rules (docs/ARCHITECTURE.md, "Recovery"):
//! - A failure followed by a record that verifies in the same segment is damage (`scan`).
//! - A failure with nothing valid after it in its segment is a torn tail — unless a checkpoint
//!   knew those bytes durable, or the segment is shorter than a checkpoint recorded: damage.
//! - A segment file shorter than its header, or whose header does not verify while nothing
//!   after it does either and its other bytes are zeros, was being created at a crash: torn.
//! - A writable open that finds damage fails with `Error::Corrupt` before changing anything.
//!   A read-only open serves every record that verifies: after damage, and the inner records
//!   of a damaged batch frame.

use super::ckpt::{self, le_u32, le_u64};
use super::format::{self, SEG_HEADER_LEN, T_BATCH, T_CLEAR, T_DELETE, T_PUT};
use super::index::Table;
use super::scan::{self, Bytes, Scanned};
use super::segment::{seg_file_name, SegTable, Segment};
use super::{
    data_end, decode_ckpt_shard, for_each_sub, loc_of, shard_max_load, side_by_side, Inner,
    CKPT_MAGIC, CKPT_NAME, CKPT_VERSION, NSHARDS, PARALLEL_CKPT,
};
use crate::error::{Error, Result};
use crate::io::Vfs;
use crate::log::recovery::{classify, refusal, End, Finding, Probe, SegBytes};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// What `index.ki` holds, as far as it could be read.
pub(super) enum CkptRead {
    Missing,
    /// Its checksum or structure fails, or it is of another format or database.
    Damaged(String),
    Read(Checkpoint),
}

/// A checkpoint whose checksum verified.
pub(super) struct Checkpoint {
    pub hash_seed: u64,
    /// Per lane: (segment, offset) where replay starts (segment 0: the lane had none).
    pub replay: Vec<(u32, u64)>,
    /// (id, valid length, live bytes, horizon)
    pub segs: Vec<(u32, u64, u64, u32)>,
    /// Per shard: (seq, table), when every slot points into a segment on disk.
    pub shards: Option<Vec<(u64, Table)>>,
    /// Segments its slots point into that are not on disk, with how many slots each.
    pub missing: Vec<(u32, u64)>,
}

impl Checkpoint {
    /// The length it recorded for segment `seg`, if it lists it.
    pub fn listed(&self, seg: u32) -> Option<u64> {
        self.segs.iter().find(|s| s.0 == seg).map(|s| s.1)
    }

    /// Where the checkpoint knew segment `seg` (of lane `lane`) durable up to: a segment
    /// before its lane's replay position, the length it recorded; the replay segment, the
    /// replay offset.
    pub fn durable(&self, seg: u32, lane: usize) -> Option<u64> {
        let (rseg, roff) = *self.replay.get(lane)?;
        if seg == rseg {
            return Some(roff);
        }
        if seg > rseg {
            return None;
        }
        self.segs.iter().find(|s| s.0 == seg).map(|s| s.1)
    }
}

/// Read and decode `index.ki` of `dir`, for a database of `lanes` lanes whose segments on disk
/// are `known` (sorted ids).
pub(super) fn read_checkpoint(vfs: &dyn Vfs, dir: &Path, lanes: usize, known: &[u32]) -> CkptRead {
    let path = dir.join(CKPT_NAME);
    let Ok(f) = vfs.open(&path, false) else {
        return CkptRead::Missing;
    };
    let len = match f.len() {
        Ok(n) => n as usize,
        Err(e) => return CkptRead::Damaged(format!("cannot be read: {e}")),
    };
    if len < 40 {
        return CkptRead::Damaged(format!("{len} bytes, shorter than a checkpoint"));
    }
    // Mapped: its pages are in the page cache already, where a buffer would be fresh
    // memory (about a millisecond a megabyte on a virtual machine) and a copy.
    let map = vfs.map(&path, len);
    let mut owned = Vec::new();
    let b: &[u8] = match &map {
        Some(m) if m.as_slice().len() == len => m.as_slice(),
        _ => {
            owned.resize(len, 0);
            if let Err(e) = f.read_at(&mut owned, 0) {
                return CkptRead::Damaged(format!("cannot be read: {e}"));
            }
            &owned
        }
    };
    match decode_checkpoint(b, lanes, known) {
        Ok(c) => CkptRead::Read(c),
        Err(why) => CkptRead::Damaged(why.into()),
    }
}

/// The salt (hash seed) and lane count a checkpoint that verifies was written for: what a
/// database whose segment headers are all unusable is read with.
pub(super) fn peek_checkpoint(vfs: &dyn Vfs, dir: &Path) -> Option<(u64, usize)> {
    let f = vfs.open(&dir.join(CKPT_NAME), false).ok()?;
    let len = f.len().ok()? as usize;
    if len < 40 {
        return None;
    }
    let mut b = vec![0u8; len];
    f.read_at(&mut b, 0).ok()?;
    let (body, crc) = b.split_at(len - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().ok()?) || &body[0..8] != CKPT_MAGIC
    {
        return None;
    }
    Some((le_u64(body, 16)?, le_u32(body, 24)? as usize))
}

fn decode_checkpoint(
    b: &[u8],
    lanes: usize,
    known: &[u32],
) -> std::result::Result<Checkpoint, &'static str> {
    let len = b.len();
    let (body, crc) = b.split_at(len - 4);
    let bad = "its structure is damaged";
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().map_err(|_| bad)?) {
        return Err("its checksum does not match");
    }
    if &body[0..8] != CKPT_MAGIC {
        return Err("not a checkpoint file");
    }
    if u32::from_le_bytes(body[8..12].try_into().map_err(|_| bad)?) != CKPT_VERSION {
        return Err("an older checkpoint format (the log is replayed instead)");
    }
    if u32::from_le_bytes(body[12..16].try_into().map_err(|_| bad)?) != NSHARDS as u32 {
        return Err("written for another shard count");
    }
    let hash_seed = le_u64(body, 16).ok_or(bad)?;
    if le_u32(body, 24).ok_or(bad)? as usize != lanes {
        return Err("written for another lane count");
    }
    let mut pos = 28;
    let mut replay = Vec::with_capacity(lanes);
    for _ in 0..lanes {
        replay.push((
            le_u32(body, pos).ok_or(bad)?,
            le_u32(body, pos + 4).ok_or(bad)? as u64,
        ));
        pos += 8;
    }
    let nsegs = le_u32(body, pos).ok_or(bad)? as usize;
    pos += 4;
    let mut segs = Vec::with_capacity(nsegs.min(1 << 16));
    for _ in 0..nsegs {
        segs.push((
            le_u32(body, pos).ok_or(bad)?,
            le_u64(body, pos + 4).ok_or(bad)?,
            le_u64(body, pos + 12).ok_or(bad)?,
            le_u32(body, pos + 20).ok_or(bad)?,
        ));
        pos += 24;
    }
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
        replay,
        segs,
        shards: None,
        missing: Vec::new(),
    };
    match parts {
        Some(mut parts) => {
            parts.sort_unstable_by_key(|p| p.0);
            c.shards = Some(parts.into_iter().map(|p| p.1).collect());
        }
        None => {
            // Damaged sections would have failed the checksum: the slots point into segments
            // that are gone. Count them, segment by segment.
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

/// The findings of a checkpoint that verified about the segments on disk: records in
/// segments that are gone, and segments shorter than it recorded.
pub(super) fn checkpoint_findings(c: &Checkpoint, table: &SegTable) -> Vec<Finding> {
    let mut found: Vec<Finding> = c
        .missing
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
        let Some(durable) = c.durable(s.id, s.lane) else {
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

/// One range recovery scans.
struct Region {
    seg: Arc<Segment>,
    /// Its lane, `None` for a segment whose header is damaged.
    lane: Option<usize>,
    start: u64,
    end: u64,
    /// The lane's last segment.
    last: bool,
    scanned: Scanned,
    verdict: End,
}

impl Inner {
    /// Build the index: from the checkpoint when it is usable, then replay the log after it;
    /// else from every segment. `bad` are the segment files whose header is not one of this
    /// database's. Refuses (writable) or reports (read-only) damage; truncates a torn tail;
    /// starts the active segments.
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
            found.extend(checkpoint_findings(c, &table));
        }
        let usable = found.is_empty() && !self.full_replay;
        let loaded = match &mut ckpt {
            Some(c) if usable && c.shards.is_some() => self.load_checkpoint(&table, c),
            _ => false,
        };
        let durable = |s: &Segment| ckpt.as_ref().and_then(|c| c.durable(s.id, s.lane));
        if !loaded {
            // Rebuilt from the whole log: save the result at the next close.
            self.appended.fetch_add(1, Ordering::Relaxed);
        }
        let replay_from = self.replay_from.lock().clone();
        // The ranges to replay: per lane, its segments from the replay position on.
        let mut regions: Vec<Region> = Vec::new();
        for lane in 0..self.log.lanes {
            let (rseg, roff) = replay_from.as_ref().map_or((0, 0), |r| r[lane]);
            let segs: Vec<&Arc<Segment>> = table
                .segs
                .values()
                .filter(|s| s.lane == lane && s.id >= rseg)
                .collect();
            for (i, seg) in segs.iter().enumerate() {
                let start = if seg.id == rseg {
                    roff.max(SEG_HEADER_LEN as u64)
                } else {
                    SEG_HEADER_LEN as u64
                };
                regions.push(Region {
                    seg: (*seg).clone(),
                    lane: Some(lane),
                    start,
                    end: seg.file.len()?.max(start),
                    last: i + 1 == segs.len(),
                    scanned: Scanned::default(),
                    verdict: End::Clean,
                });
            }
        }
        // Segment files without a usable header: created at a crash, or damaged.
        let mut torn_files: Vec<PathBuf> = Vec::new();
        for p in bad {
            let listed = ckpt.as_ref().and_then(|c| c.listed(p.id));
            match self.log.probe_verdict(&p, listed)? {
                None => torn_files.push(p.path),
                Some(f) => {
                    found.push(f);
                    if self.log.readonly && p.len > SEG_HEADER_LEN as u64 {
                        // Its records still verify with the database's salt: served.
                        let seg = Segment::new(p.id, 0, self.log.salt, p.path, p.file, p.len);
                        let seg = Arc::new(seg);
                        seg.sealed.store(true, Ordering::Release);
                        self.log.set_segs(|t| {
                            let mut t = SegTable::clone(t);
                            t.segs.insert(p.id, seg.clone());
                            t
                        });
                        regions.push(Region {
                            seg,
                            lane: None,
                            start: SEG_HEADER_LEN as u64,
                            end: p.len,
                            last: false,
                            scanned: Scanned::default(),
                            verdict: End::Clean,
                        });
                    }
                }
            }
        }
        // Pass 1: scan; note the clear records (a vanish writes one into each lane; it
        // counts only if all of them survived).
        let mut clears: Vec<(usize, u64, u64)> = Vec::new(); // lane, loc, id
        let mut clear_parts: HashMap<u64, (u64, u64)> = HashMap::new();
        for r in regions.iter_mut() {
            let (seg, lane) = (&r.seg, r.lane);
            r.scanned = scan::scan(
                &mut SegBytes {
                    log: &self.log,
                    seg,
                },
                seg.seed,
                r.start,
                r.end,
                |off, h, _, _| {
                    if let (T_CLEAR, Some(lane)) = (h.typ, lane) {
                        clears.push((lane, loc_of(seg.id, off), h.fields.seq));
                        clear_parts.entry(h.fields.seq).or_insert((0, h.count)).0 += 1;
                    }
                    Ok(true)
                },
            )?;
            r.verdict = classify(seg.id, &r.scanned, durable(seg), &mut found);
        }
        if !found.is_empty() && !self.log.readonly {
            return Err(refusal(&self.log.dir, &found));
        }
        self.findings.lock().clone_from(&found);
        // Per lane, the last complete clear: everything of the lane before it is dead.
        let mut cut: Vec<Option<u64>> = vec![None; self.log.lanes];
        for &(lane, loc, id) in &clears {
            if clear_parts.get(&id).is_some_and(|&(n, of)| n >= of) {
                cut[lane] = Some(cut[lane].map_or(loc, |c: u64| c.max(loc)));
            }
        }
        let lane_of_seg = |id: u32| table.get(id).map(|s| s.lane);
        if cut.iter().any(Option::is_some) {
            for i in 0..NSHARDS {
                self.excl(i).retain(|s| {
                    let lane = lane_of_seg(s.seg);
                    lane.and_then(|l| cut[l]).is_none_or(|c| s.loc() >= c)
                });
            }
        }
        // Pass 2: apply, in each lane's log order; the shard seq of each record decides between
        // records of one key in different lanes. A damaged tail's salvaged records are applied
        // (read-only opens only get here with damage).
        let mut tombs: HashMap<Vec<u8>, u64> = HashMap::new();
        for r in &regions {
            let seg = &r.seg;
            let lane_cut = r.lane.and_then(|l| cut[l]);
            let apply = |off: u64, h: &format::Header, rec: &[u8], tombs: &mut HashMap<_, _>| {
                // Something to checkpoint at the next close.
                self.appended.fetch_add(1, Ordering::Relaxed);
                if h.typ != T_CLEAR && lane_cut.is_none_or(|c| loc_of(seg.id, off) >= c) {
                    self.replay_record(seg.id, off, h, rec, tombs)?;
                }
                Ok::<(), Error>(())
            };
            let valid_end = r.scanned.valid_end(r.end);
            let to = if r.verdict == End::Damaged {
                r.end
            } else {
                valid_end
            };
            scan::scan(
                &mut SegBytes {
                    log: &self.log,
                    seg,
                },
                seg.seed,
                r.start,
                to,
                |off, h, rec, _| {
                    apply(off, h, rec, &mut tombs)?;
                    Ok(true)
                },
            )?;
            if r.verdict == End::Damaged {
                if let Some(t) = &r.scanned.tail {
                    let mut bytes = SegBytes {
                        log: &self.log,
                        seg,
                    };
                    let mut buf = Vec::new();
                    for &at in &t.salvaged {
                        let n = format::MAX_HEADER_LEN.min((r.end - at) as usize);
                        bytes.read(at, n, &mut buf)?;
                        let Some(h) = format::parse_header(&buf) else {
                            continue;
                        };
                        bytes.read(at, h.len, &mut buf)?;
                        apply(at, &h, &buf, &mut tombs)?;
                    }
                }
            }
        }
        for r in &regions {
            let (seg, end) = (&r.seg, r.end);
            let valid_end = r.scanned.valid_end(end);
            match r.verdict {
                End::Clean => {}
                End::Damaged => {
                    // (Read-only.) Everything stays readable.
                    seg.flushed.store(end, Ordering::Release);
                    continue;
                }
                End::Zeros | End::Torn => {
                    // Zeros at the end are space allocated ahead (`reserve`), not lost records.
                    let torn = data_end(&*seg.file, valid_end, end)? - valid_end;
                    self.log
                        .counters
                        .truncated_bytes
                        .fetch_add(torn, Ordering::Relaxed);
                    // A lane's last segment loses its torn tail; any segment, allocated zeros
                    // (a crash before the cut at its seal was synced).
                    if (r.last || r.verdict == End::Zeros) && !self.log.readonly {
                        seg.file.set_len(valid_end)?;
                        seg.file.sync()?;
                    }
                }
            }
            seg.flushed.store(valid_end, Ordering::Release);
        }
        if !self.log.readonly {
            for path in &torn_files {
                self.log.vfs.remove(path)?;
            }
            // Segments wholly before their lane's clear hold nothing live.
            let dead: Vec<u32> = table
                .segs
                .values()
                .filter(|s| cut[s.lane].is_some_and(|c| (s.id as u64) < (c >> 32)))
                .map(|s| s.id)
                .collect();
            self.drop_segments(&dead)?;
            if dead.is_empty() && !torn_files.is_empty() {
                self.log.vfs.sync_dir(&self.log.dir)?;
            }
        }
        // Each lane's active segment: its last one (a lane with none creates one when first
        // written). Map what can be mapped. A lane whose log ends with a marker needs none
        // at the next seal, checkpoint or close.
        let table = self.log.segs.load_full();
        let orphans: Vec<u32> = regions
            .iter()
            .filter(|r| r.lane.is_none())
            .map(|r| r.seg.id)
            .collect();
        let segsiz = self.cfg.lock().segsiz as usize;
        for lane in 0..self.log.lanes {
            let active = table
                .segs
                .values()
                .rev()
                .find(|s| s.lane == lane && !orphans.contains(&s.id));
            if let Some(active) = active {
                if let Some(m) = self.log.vfs.map(&active.path, segsiz) {
                    active.map.store(Some(Arc::new(m)), &self.log.retired);
                }
                let mut tail = self.log.tails[lane].0.lock();
                tail.set_seg(active.clone());
                tail.marked = self.log.ends_with_marker(active)?;
            }
        }
        let active = self.log.active_ids();
        for s in table.segs.values() {
            if !active.contains(&s.id) {
                s.sealed.store(true, Ordering::Release);
                if let Some(m) = self.log.vfs.map(&s.path, s.flushed() as usize) {
                    s.map.store(Some(Arc::new(m)), &self.log.retired);
                }
            }
        }
        self.log.trim_maps();
        Ok(())
    }

    /// Fill the index from a checkpoint; false (and an empty index) when it was written for
    /// other segments or points into a segment that does not exist.
    fn load_checkpoint(&self, table: &SegTable, c: &mut Checkpoint) -> bool {
        let Some(shards) = c.shards.take() else {
            return false;
        };
        for (i, (seq, t)) in shards.into_iter().enumerate() {
            let mut g = self.excl(i);
            g.table = t;
            g.table.set_max_load(shard_max_load(i));
            g.seq = seq;
        }
        for &(id, len, live, horizon) in &c.segs {
            if let Some(s) = table.get(id) {
                s.live.store(live, Ordering::Relaxed);
                s.horizon.store(horizon, Ordering::Relaxed);
                if id < c.replay[s.lane].0 {
                    // Sealed before the checkpoint: valid up to what it counted.
                    s.flushed.store(len, Ordering::Release);
                }
            }
        }
        *self.replay_from.lock() = Some(c.replay.clone());
        true
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

    /// Apply one record during recovery. A key's records may be in several lanes; the shard
    /// seq orders them: a record older than what the index holds for its key, or than a delete
    /// already applied (`tombs`), is skipped.
    pub(super) fn replay_record(
        &self,
        seg: u32,
        off: u64,
        h: &format::Header,
        rec: &[u8],
        tombs: &mut HashMap<Vec<u8>, u64>,
    ) -> Result<()> {
        match h.typ {
            T_PUT | T_DELETE => {
                let key = &rec[h.key_off..h.key_off + h.klen];
                let seq = h.fields.seq;
                let (shard, tag) = self.hash(key);
                let mut tbl = self.excl(shard);
                tbl.seq = tbl.seq.max(seq);
                let found = self.replay_find(&tbl, tag, key)?;
                if found.as_ref().is_some_and(|f| f.seq >= seq)
                    || tombs.get(key).is_some_and(|&t| t >= seq)
                {
                    return Ok(()); // a newer write of the key is already applied
                }
                let old = found.map(|f| (f.slot, f.len));
                if h.typ == T_PUT {
                    if h.fields.expires != 0 {
                        self.expiring.fetch_add(1, Ordering::Relaxed);
                    }
                    self.set_slot(&mut tbl, tag, old, seg, off, h.len);
                } else {
                    if let Some((o, len)) = old {
                        self.remove_slot(&mut tbl, o, len);
                    }
                    tombs.insert(key.to_vec(), seq);
                }
            }
            T_BATCH => {
                for_each_sub(rec, h, |pos, sh, srec| {
                    self.replay_record(seg, off + pos as u64, sh, srec, tombs)
                })?;
            }
            _ => {}
        }
        Ok(())
    }
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
