//! Recovery's kind-neutral procedure (docs/architecture/hash.md, "Recovery procedure"), for every
//! kind: which ranges to scan, what a failure in them was, the refusal of a writable open that
//! finds damage, the clears, the replay itself (in each lane's log order, or merged by seq), the
//! cut of torn tails and of segments created at a crash, and each lane's active segment
//! afterwards.
//!
//! The kind says what records mean ([`Replayer`]) and which of the driver's rules it replays by
//! ([`Rules`], an associated constant: the driver is monomorphised for each kind, and the
//! rules a kind does not take cost it nothing). The on-disk hash (`hash/recover.rs`) and the
//! fixed-length database (`fixed/open.rs`) take [`Rules::INDEX`]: clears cut by position,
//! salvaged records of a damaged batch kept, lanes replayed one after the other (their
//! `apply` orders a key's records by seq). The B+ tree (`tree/open.rs`) takes
//! [`Rules::TREE`]: clears applied in order to the keyspace they name, each lane ending at its
//! first torn segment, a damaged batch lost whole, lanes merged by seq.

use super::checkpoint::Places;
use super::format::{self, Header, SEG_HEADER_LEN, T_BATCH, T_CLEAR};
use super::recovery::{classify, refusal, End, Finding, Probe, SegBytes};
use super::scan::{self, Bytes, Scanned};
use super::segment::{seg_file_name, SegTable, Segment};
use super::{data_end, Log};
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// How the clear records of a `vanish` are replayed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Clears {
    /// A `vanish` writes a clear into every lane that has a log; once the clears of all of
    /// them survived, everything of a lane before its clear is dead
    /// ([`Replayer::forget_before`]), and a writable open deletes the segments wholly before
    /// it. The clears themselves are not applied.
    ByPosition,
    /// A clear is applied as any record is, in its place in the replay order: it empties the
    /// keyspace it names, and nothing else.
    InOrder,
}

/// The rules a kind's log is replayed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rules {
    pub clears: Clears,
    /// A damaged batch frame is lost whole: the inner records of it that verify are left out
    /// and reported (a batch, across keyspaces too, is applied whole or not at all).
    /// Otherwise they are applied.
    pub whole_batches: bool,
    /// When more than one lane has records to replay, they are applied in seq order (a batch
    /// by its first record's seq) rather than lane after lane: every key's records in the
    /// order they were made, for a kind whose `apply` cannot order them itself.
    pub merge_by_seq: bool,
    /// The driver gives each lane its active segment (its last), maps the segments and seals
    /// the others; otherwise the kind does (with [`Replayed::dropped`]).
    pub activate: bool,
}

impl Rules {
    /// A kind with an index in memory that orders a key's records by their seq itself.
    pub(crate) const INDEX: Rules = Rules {
        clears: Clears::ByPosition,
        whole_batches: false,
        merge_by_seq: false,
        activate: true,
    };
    /// The B+ tree's write-ahead lanes.
    pub(crate) const TREE: Rules = Rules {
        clears: Clears::InOrder,
        whole_batches: true,
        merge_by_seq: true,
        activate: false,
    };
}

/// What a kind does with the records recovery reads back.
pub(crate) trait Replayer {
    /// The rules its log is replayed by.
    const RULES: Rules = Rules::INDEX;
    /// The open goes on (a writable one found no damage; a read-only one serves around
    /// `found`): called once, after every range was scanned and before anything is applied or
    /// anything on disk is changed by the replay.
    fn begin(&mut self, _found: &[Finding]) -> Result<()> {
        Ok(())
    }
    /// ([`Clears::ByPosition`]) A `vanish` cleared lane `l` at `cut[l]` (`segment << 32 |
    /// offset` of its clear record): forget every index entry pointing at a record before it
    /// (`lane_of` tells a segment's lane). Called once, before any record is applied, only
    /// when some lane has a clear.
    fn forget_before(
        &mut self,
        _cut: &[Option<u64>],
        _lane_of: &dyn Fn(u32) -> Option<usize>,
    ) -> Result<()> {
        Ok(())
    }
    /// Apply one verified record at (`seg`, `off`): a put, a delete or a batch frame (a
    /// clear too with [`Clears::InOrder`]), in its lane's log order, lanes one after the other
    /// (or merged by seq: [`Rules::merge_by_seq`]).
    fn apply(&mut self, seg: u32, off: u64, h: &Header, rec: &[u8]) -> Result<()>;
}

/// What the replay did.
pub(crate) struct Replayed {
    /// The damage found (a read-only open only: a writable one is refused).
    pub findings: Vec<Finding>,
    /// Records applied (the kind checkpoints at the next close when there were any).
    pub applied: u64,
    /// The segments after a torn end of their lane ([`lane_ends`]): not replayed, deleted by
    /// a writable open, never a lane's active segment.
    pub dropped: Vec<u32>,
}

/// One range recovery scans.
struct Region {
    seg: Arc<Segment>,
    /// Its lane, `None` for a segment whose header is damaged.
    lane: Option<usize>,
    start: u64,
    end: u64,
    /// Replayed (not after a torn end of its lane: [`lane_ends`]).
    kept: bool,
    scanned: Scanned,
    verdict: End,
    /// Its segment's records end with a marker (what a roll leaves at the end of every
    /// segment it seals).
    marked: bool,
}

impl Region {
    /// Where its replay ends: a damaged tail is read through (read-only opens only get here
    /// with damage), a torn one is not.
    fn replay_to(&self) -> u64 {
        match self.verdict {
            End::Damaged => self.end,
            _ => self.scanned.valid_end(self.end),
        }
    }
}

/// Replay the log of `log` into `kind`, by the kind's [`Rules`].
///
/// - `bad`: the segment files whose header is not one of this database's;
/// - `ckpt`: what a checkpoint that verified knows of the log (its durable lengths tell damage
///   from a torn tail), whether or not its index was used;
/// - `from`: where each lane's replay starts when the kind loaded the checkpoint's index (else
///   every segment is replayed from its start);
/// - `found`: findings made already (about the checkpoint);
/// - `segsiz`: the size the active segments are mapped at ([`Rules::activate`]).
///
/// A writable open that finds damage fails with [`crate::Error::Corrupt`] before anything on
/// disk is changed; a read-only one serves what verifies and returns the findings.
pub(crate) fn replay<R: Replayer>(
    log: &Log,
    bad: Vec<Probe>,
    ckpt: Option<&Places>,
    from: Option<&[(u32, u64)]>,
    mut found: Vec<Finding>,
    segsiz: usize,
    kind: &mut R,
) -> Result<Replayed> {
    let rules = R::RULES;
    let by_position = rules.clears == Clears::ByPosition;
    let table = log.segs.load_full();
    let durable = |s: &Segment| ckpt.and_then(|c| c.durable(s.id, s.lane));
    // The ranges to replay: per lane, its segments from the replay position on.
    let mut regions: Vec<Region> = Vec::new();
    for lane in 0..log.lanes {
        let (rseg, roff) = from.and_then(|r| r.get(lane).copied()).unwrap_or((0, 0));
        let segs: Vec<&Arc<Segment>> = table
            .segs
            .values()
            .filter(|s| s.lane == lane && s.id >= rseg)
            .collect();
        for seg in &segs {
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
                kept: true,
                scanned: Scanned::default(),
                verdict: End::Clean,
                marked: false,
            });
        }
    }
    // Segment files without a usable header: created at a crash, or damaged.
    let mut torn_files: Vec<PathBuf> = Vec::new();
    for p in bad {
        let listed = ckpt.and_then(|c| c.listed(p.id));
        match log.probe_verdict(&p, listed)? {
            None => torn_files.push(p.path),
            Some(f) => {
                found.push(f);
                if log.readonly && p.len > SEG_HEADER_LEN as u64 {
                    // Its records still verify with the database's salt: served.
                    let seg = Arc::new(Segment::new(p.id, 0, log.salt, p.path, p.file, p.len));
                    seg.sealed.store(true, Ordering::Release);
                    log.set_segs(|t| {
                        let mut t = SegTable::clone(t);
                        t.segs.insert(p.id, seg.clone());
                        t
                    });
                    regions.push(Region {
                        seg,
                        lane: None,
                        start: SEG_HEADER_LEN as u64,
                        end: p.len,
                        kept: true,
                        scanned: Scanned::default(),
                        verdict: End::Clean,
                        marked: false,
                    });
                }
            }
        }
    }
    // Pass 1: scan; note the clear records (a vanish writes one into each lane; it counts
    // only if all of them survived).
    let mut clears: Vec<(usize, u64, u64)> = Vec::new(); // lane, loc, id
    let mut clear_parts: HashMap<u64, (u64, u64)> = HashMap::new();
    for r in regions.iter_mut() {
        let (seg, lane) = (&r.seg, r.lane);
        // Whether the last record met is a marker (`None`: none met).
        let mut last_marker = None;
        r.scanned = scan::scan(
            &mut SegBytes { log, seg },
            seg.seed,
            r.start,
            r.end,
            |off, h, _, salvaged| {
                if let (T_CLEAR, Some(lane), true) = (h.typ, lane, by_position) {
                    clears.push((lane, loc_of(seg.id, off), h.fields.seq));
                    clear_parts.entry(h.fields.seq).or_insert((0, h.count)).0 += 1;
                }
                if !salvaged {
                    last_marker = Some(is_marker(h));
                }
                Ok(true)
            },
        )?;
        r.verdict = classify(seg.id, &r.scanned, durable(seg), &mut found);
        r.marked = match last_marker {
            Some(m) => m,
            // Nothing past the replay position: the record before it (a checkpoint marks
            // every lane before it takes their positions).
            None if r.start > seg.data => ends_with_marker_at(log, seg, r.start)?,
            None => false,
        };
        if rules.whole_batches {
            for d in r.scanned.damage.iter().filter(|d| !d.salvaged.is_empty()) {
                found.push(Finding {
                    file: seg_file_name(seg.id),
                    off: d.off,
                    len: d.len,
                    lost: d.salvaged.len() as u64,
                    what: format!(
                        "{} records of a damaged batch that verify on their own are left out \
                         with it (a batch is applied whole or not at all)",
                        d.salvaged.len()
                    ),
                });
            }
        }
    }
    // Each lane up to its first torn end (regions are in log order within a lane).
    let ended = lane_ends(&mut regions, &mut found);
    for (r, &d) in regions.iter_mut().zip(&ended) {
        r.kept = !d;
    }
    clears.retain(|&(_, loc, _)| {
        !regions
            .iter()
            .any(|r| !r.kept && loc >> 32 == u64::from(r.seg.id))
    });
    if !found.is_empty() && !log.readonly {
        return Err(refusal(&log.dir, &found));
    }
    kind.begin(&found)?;
    // Per lane, the last complete clear: everything of the lane before it is dead.
    let mut cut: Vec<Option<u64>> = vec![None; log.lanes];
    for &(lane, loc, id) in &clears {
        if clear_parts.get(&id).is_some_and(|&(n, of)| n >= of) {
            cut[lane] = Some(cut[lane].map_or(loc, |c: u64| c.max(loc)));
        }
    }
    if cut.iter().any(Option::is_some) {
        let lane_of = |id: u32| table.get(id).map(|s| s.lane);
        kind.forget_before(&cut, &lane_of)?;
    }
    // Merged by seq only when more than one lane has something to replay.
    let merge = rules.merge_by_seq && {
        let mut used = vec![false; log.lanes + 1];
        for r in regions.iter().filter(|r| r.kept && r.replay_to() > r.start) {
            used[r.lane.unwrap_or(log.lanes)] = true;
        }
        used.iter().filter(|&&u| u).count() > 1
    };
    // With `merge`: every record to replay, copied, and (seq, segment, offset, where it is).
    let mut arena: Vec<u8> = Vec::new();
    let mut order: Vec<(u64, u32, u64, usize, usize)> = Vec::new();
    // Pass 2: apply, in each lane's log order.
    let mut applied = 0u64;
    for r in regions.iter().filter(|r| r.kept) {
        let seg = &r.seg;
        let lane_cut = r.lane.and_then(|l| cut[l]);
        let mut apply = |off: u64, h: &Header, rec: &[u8]| -> Result<()> {
            applied += 1;
            if (!by_position || h.typ != T_CLEAR)
                && lane_cut.is_none_or(|c| loc_of(seg.id, off) >= c)
            {
                if merge {
                    order.push((record_seq(h, rec), seg.id, off, arena.len(), rec.len()));
                    arena.extend_from_slice(rec);
                } else {
                    kind.apply(seg.id, off, h, rec)?;
                }
            }
            Ok(())
        };
        scan::scan(
            &mut SegBytes { log, seg },
            seg.seed,
            r.start,
            r.replay_to(),
            |off, h, rec, salvaged| {
                // A record salvaged from a damaged batch frame, with whole batches, is left
                // out with the rest of its batch (reported above).
                if !(rules.whole_batches && salvaged) {
                    apply(off, h, rec)?;
                }
                Ok(true)
            },
        )?;
        if r.verdict == End::Damaged && !rules.whole_batches {
            // A damaged tail's salvaged records (read-only opens only get here with damage).
            if let Some(t) = &r.scanned.tail {
                let mut bytes = SegBytes { log, seg };
                let mut buf = Vec::new();
                for &at in &t.salvaged {
                    let n = format::MAX_HEADER_LEN.min((r.end - at) as usize);
                    bytes.read(at, n, &mut buf)?;
                    let Some(h) = format::parse_header(&buf) else {
                        continue;
                    };
                    bytes.read(at, h.len, &mut buf)?;
                    apply(at, &h, &buf)?;
                }
            }
        }
    }
    if merge {
        order.sort_by_key(|o| o.0);
        for (_, seg, off, at, len) in order {
            let rec = &arena[at..at + len];
            let h = format::parse_header(rec)
                .ok_or_else(|| Error::Corrupt("a verified record does not parse".into()))?;
            kind.apply(seg, off, &h, rec)?;
        }
    }
    let mut dropped: Vec<u32> = Vec::new();
    for r in &regions {
        let (seg, end) = (&r.seg, r.end);
        if !r.kept {
            if !rules.activate {
                // Deleted below (a writable open); the kind activates its lanes itself.
                dropped.push(seg.id);
                continue;
            }
            // After its lane's torn end: a writable open deletes it (below), so that the
            // segment the lane ended in is its last, its active one (a segment emptied
            // behind it would leave that one sealed without a marker at its end); a
            // read-only one ignores its bytes.
            log.counters
                .truncated_bytes
                .fetch_add(end - r.start, Ordering::Relaxed);
            if !log.readonly {
                dropped.push(seg.id);
            } else {
                seg.flushed
                    .store(r.start.min(end).max(seg.data), Ordering::Release);
            }
            continue;
        }
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
                log.counters
                    .truncated_bytes
                    .fetch_add(torn, Ordering::Relaxed);
                // Cut, so that the lane's next records follow its last valid one.
                if !log.readonly {
                    seg.file.set_len(valid_end)?;
                    seg.file.sync()?;
                }
            }
        }
        seg.flushed.store(valid_end, Ordering::Release);
    }
    if !log.readonly {
        log.remove_segments(&dropped)?;
        for path in &torn_files {
            log.vfs.remove(path)?;
        }
        // Segments wholly before their lane's clear hold nothing live.
        let dead: Vec<u32> = table
            .segs
            .values()
            .filter(|s| cut[s.lane].is_some_and(|c| (s.id as u64) < (c >> 32)))
            .map(|s| s.id)
            .collect();
        if !dead.is_empty() {
            log.set_segs(|t| {
                let mut t = SegTable::clone(t);
                for id in &dead {
                    t.segs.remove(id);
                }
                t
            });
            for &id in &dead {
                let _ = log.vfs.remove(&log.dir.join(seg_file_name(id)));
            }
        }
        if !dead.is_empty() || !torn_files.is_empty() {
            log.vfs.sync_dir(&log.dir)?;
        }
    }
    if rules.activate {
        activate(log, &regions, segsiz)?;
    }
    Ok(Replayed {
        findings: found,
        applied,
        dropped,
    })
}

/// Each lane's active segment: its last one (a lane with none creates one when first
/// written). Map what can be mapped. A lane whose log ends with a marker needs none at the
/// next seal, checkpoint or close.
fn activate(log: &Log, regions: &[Region], segsiz: usize) -> Result<()> {
    let table = log.segs.load_full();
    let orphans: Vec<u32> = regions
        .iter()
        .filter(|r| r.lane.is_none())
        .map(|r| r.seg.id)
        .collect();
    for lane in 0..log.lanes {
        let active = table
            .segs
            .values()
            .rev()
            .find(|s| s.lane == lane && !orphans.contains(&s.id));
        if let Some(active) = active {
            if let Some(m) = log.vfs.map(&active.path, segsiz) {
                active.map.store(Some(Arc::new(m)), &log.retired);
            }
            let mut tail = log.tails[lane].0.lock();
            tail.set_seg(active.clone());
            tail.marked = log.ends_with_marker(active)?;
        }
    }
    let active = log.active_ids();
    for s in table.segs.values() {
        if !active.contains(&s.id) {
            s.sealed.store(true, Ordering::Release);
            if let Some(m) = log.vfs.map(&s.path, s.flushed() as usize) {
                s.map.store(Some(Arc::new(m)), &log.retired);
            }
        }
    }
    log.trim_maps();
    Ok(())
}

/// The seq a record is merged by: a batch's is its first record's.
fn record_seq(h: &Header, rec: &[u8]) -> u64 {
    if h.typ == T_BATCH {
        return rec
            .get(h.key_off..)
            .and_then(format::parse_header)
            .map_or(0, |sub| sub.fields.seq);
    }
    h.fields.seq
}

/// Where each lane's log ends: at its first region that ends torn (or in zeros), or that lost
/// its end whole (below); the regions of the lane after it are dropped (true in the result).
/// A sync makes a lane's segments durable in order, so records after a torn end were never
/// synced — unless a later segment's header records some of its own as synced: then the end
/// was not torn but damaged, and is reported so (nothing is dropped). Regions without a lane
/// are never dropped.
///
/// A segment of the format with synced-length slots that is not its lane's last was sealed,
/// and a roll ends every segment it seals with a marker: one whose records verify to their
/// end but do not end with a marker lost its end at a record boundary (the write that carried
/// its last records and the marker, or all of its unsynced writes, never reached the disk),
/// which its scan cannot see. Its lane ends there too, unless a later segment records some of
/// its own as synced: then it lost its end after a sync made it durable (a recovery that cuts
/// a torn tail deletes the lane's later segments, so the cut one is its last), which is
/// damage, reported as a torn end before synced records is.
fn lane_ends(regions: &mut [Region], found: &mut Vec<Finding>) -> Vec<bool> {
    let mut dropped = vec![false; regions.len()];
    for e in 0..regions.len() {
        let Some(lane) = regions[e].lane else {
            continue;
        };
        let later = || (e + 1..regions.len()).filter(|&i| regions[i].lane == Some(lane));
        let r = &regions[e];
        let torn = matches!(r.verdict, End::Torn | End::Zeros);
        let lost_end =
            r.verdict == End::Clean && r.seg.slots && !r.marked && later().next().is_some();
        if dropped[e] || !(torn || lost_end) {
            continue;
        }
        let synced_later = later().any(|i| {
            let r = &regions[i];
            r.scanned.synced.is_some_and(|s| s > r.seg.data)
        });
        if synced_later {
            let r = &regions[e];
            let (off, len, lost) = r
                .scanned
                .tail
                .as_ref()
                .map_or((r.end, 0, 0), |t| (t.off, t.len, t.lost));
            found.push(Finding {
                file: super::segment::seg_file_name(r.seg.id),
                off,
                len,
                lost,
                what: if lost_end {
                    "a sealed segment without its end (no marker after its last record) followed by synced ones"
                } else {
                    "damaged records at the end of a segment followed by synced ones"
                }
                .into(),
            });
            regions[e].verdict = End::Damaged;
        } else {
            for i in later().collect::<Vec<_>>() {
                dropped[i] = true;
            }
        }
    }
    dropped
}

/// Whether a record is a marker (an empty batch: `format::marker`).
fn is_marker(h: &Header) -> bool {
    h.typ == T_BATCH && h.count == 0 && h.len == format::MARKER_LEN
}

/// Whether the bytes of `seg` just before `at` are a marker.
fn ends_with_marker_at(log: &Log, seg: &Segment, at: u64) -> Result<bool> {
    let m = format::marker(seg.seed);
    if at < seg.data + m.len() as u64 {
        return Ok(false);
    }
    let mut buf = Vec::new();
    SegBytes { log, seg }.read(at - m.len() as u64, m.len(), &mut buf)?;
    Ok(buf == m)
}

/// A record's place as one number: segment in the high 32 bits, offset in the low.
#[inline]
pub(crate) fn loc_of(seg: u32, off: u64) -> u64 {
    ((seg as u64) << 32) | off
}

/// Take what a loaded checkpoint recorded of each segment: its live bytes and horizon, and for
/// a segment sealed before its lane's replay position, its valid length (bytes past it, if
/// any, are not records: a cut that was never synced).
pub(crate) fn restore_places(log: &Log, places: &Places) {
    let table = log.segs.load_full();
    for &(id, len, live, horizon) in &places.segs {
        if let Some(s) = table.get(id) {
            s.live.store(live, Ordering::Relaxed);
            s.horizon.store(horizon, Ordering::Relaxed);
            if places.replay.get(s.lane).is_some_and(|r| id < r.0) {
                s.flushed.store(len, Ordering::Release);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SyncMode;
    use crate::io::{SimVfs, Vfs};
    use crate::log::format::{PutFields, T_DELETE, T_PUT};
    use crate::log::recovery::probe_segments;
    use crate::log::{for_each_sub, LogConfig};
    use std::marker::PhantomData;
    use std::path::Path;

    const DIR: &str = "/r";
    const SALT: u64 = 7;

    fn config() -> LogConfig {
        LogConfig {
            sync: SyncMode::None,
            segsiz: 64 << 10,
            bufsiz: 4 << 10,
            msiz: 64 << 20,
            lanes: 2,
        }
    }

    /// A new log of two lanes.
    fn create(fs: &SimVfs) -> Log {
        let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
        vfs.create_dir_all(Path::new(DIR)).unwrap();
        Log::new(
            Path::new(DIR),
            vfs,
            false,
            config(),
            SALT,
            SegTable::default(),
        )
    }

    /// A new log of two lanes written by `f`, flushed: its files, and what `f` returned.
    fn written<T>(f: impl FnOnce(&Log) -> T) -> (SimVfs, T) {
        let fs = SimVfs::new();
        let log = create(&fs);
        let out = f(&log);
        log.flush_all().unwrap();
        (fs, out)
    }

    /// The log as an open finds it: every segment in the lane its header names.
    fn reopen(fs: &SimVfs, readonly: bool) -> Log {
        let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
        let mut t = SegTable::default();
        for p in probe_segments(&*vfs, Path::new(DIR)).unwrap() {
            let lane = usize::from(p.header.as_ref().unwrap().lane);
            let seg = Segment::new(p.id, lane, SALT, p.path, p.file, p.len);
            t.segs.insert(p.id, Arc::new(seg));
        }
        Log::new(Path::new(DIR), vfs, readonly, config(), SALT, t)
    }

    /// A put of keyspace `ks` with seq `seq` (sealed when appended).
    fn put(ks: u64, seq: u64) -> Vec<u8> {
        let mut r = Vec::new();
        let f = PutFields {
            seq,
            ..PutFields::default()
        };
        format::encode_put_in(&mut r, ks, format!("k{seq}").as_bytes(), b"a value", &f);
        r
    }

    /// Append `parts` (one record) to `lane`: where it went.
    fn write(log: &Log, lane: usize, parts: &[&[u8]]) -> (u32, u64) {
        let mut tail = log.tails[lane].0.lock();
        log.append(&mut tail, parts, true).unwrap()
    }

    /// A batch frame of puts of keyspace `ks` with these seqs, appended to `lane`: where it
    /// went, and where each inner record starts in the frame. Its records are sealed as the
    /// hash seals them (with the segment's seed: each verifies on its own, so the records of a
    /// damaged frame are salvaged; the tree's use `format::inner_seed`, and never are).
    fn write_batch(log: &Log, lane: usize, ks: u64, seqs: &[u64]) -> ((u32, u64), Vec<u64>) {
        let seed = format::seed(SALT);
        let mut body = Vec::new();
        let mut at = Vec::new();
        for &seq in seqs {
            let start = body.len();
            at.push(start as u64);
            body.extend_from_slice(&put(ks, seq));
            format::seal(&mut body[start..], seed);
        }
        let mut hdr = Vec::new();
        format::encode_batch_header(&mut hdr, body.len(), seqs.len());
        let place = write(log, lane, &[&hdr, &body]);
        let inner = at.iter().map(|a| a + hdr.len() as u64).collect();
        (place, inner)
    }

    fn roll(log: &Log, lane: usize) {
        log.roll(&mut log.tails[lane].0.lock()).unwrap();
    }

    fn seg_path(id: u32) -> PathBuf {
        Path::new(DIR).join(seg_file_name(id))
    }

    /// The rules a test replays by.
    trait Pick {
        const RULES: Rules;
    }
    struct Index;
    impl Pick for Index {
        const RULES: Rules = Rules::INDEX;
    }
    struct Tree;
    impl Pick for Tree {
        const RULES: Rules = Rules::TREE;
    }

    /// What a kind is shown: (type, seq, keyspace) of each record applied, a batch's records
    /// one by one; and whether `forget_before` was called.
    struct Seen<P> {
        got: Vec<(u8, u64, u64)>,
        forgot: bool,
        _rules: PhantomData<P>,
    }

    impl<P: Pick> Replayer for Seen<P> {
        const RULES: Rules = P::RULES;
        fn forget_before(
            &mut self,
            _cut: &[Option<u64>],
            _lane_of: &dyn Fn(u32) -> Option<usize>,
        ) -> Result<()> {
            self.forgot = true;
            Ok(())
        }
        fn apply(&mut self, _seg: u32, _off: u64, h: &Header, rec: &[u8]) -> Result<()> {
            if h.typ == T_BATCH {
                return for_each_sub(rec, h, |_, s, _| {
                    self.got.push((s.typ, s.fields.seq, s.keyspace));
                    Ok(())
                });
            }
            self.got.push((h.typ, h.fields.seq, h.keyspace));
            Ok(())
        }
    }

    /// A writable open refuses the files as damaged, by the index's rules and the tree's.
    #[track_caller]
    fn refused_by_every_rule(fs: &SimVfs) {
        for e in [run::<Index>(fs, false).err(), run::<Tree>(fs, false).err()] {
            assert!(matches!(e, Some(Error::Corrupt(_))), "refused: {e:?}");
        }
    }

    /// Replay the log of `fs` by `P`'s rules.
    fn run<P: Pick>(fs: &SimVfs, readonly: bool) -> Result<(Seen<P>, Replayed)> {
        let log = reopen(fs, readonly);
        let mut seen = Seen {
            got: Vec::new(),
            forgot: false,
            _rules: PhantomData,
        };
        let done = replay(
            &log,
            Vec::new(),
            None,
            None,
            Vec::new(),
            64 << 10,
            &mut seen,
        )?;
        Ok((seen, done))
    }

    fn seqs(got: &[(u8, u64, u64)]) -> Vec<u64> {
        got.iter().map(|g| g.1).collect()
    }

    /// A lane whose sealed segment ends torn: by every rule that lane ends there (the torn one
    /// cut) while the other lane replays whole; the lane's later segment is dropped and
    /// deleted, so that the torn one is the lane's last.
    #[test]
    fn a_torn_end_stops_its_own_lane_only() {
        let (fs, (a, off3)) = written(|log| {
            let (a, _) = write(log, 0, &[&put(0, 1)]);
            write(log, 1, &[&put(0, 2)]);
            let (_, off3) = write(log, 0, &[&put(0, 3)]);
            write(log, 1, &[&put(0, 4)]);
            roll(log, 0);
            let (b, _) = write(log, 0, &[&put(0, 5)]);
            assert_ne!(a, b);
            write(log, 1, &[&put(0, 6)]);
            (a, off3)
        });
        // The record of seq 3 cut short (and the marker after it gone).
        fs.open(&seg_path(a), false)
            .unwrap()
            .set_len(off3 + 5)
            .unwrap();
        let image = fs.image();
        let (seen, done) = run::<Index>(&fs, false).unwrap();
        assert_eq!(seqs(&seen.got), vec![1, 2, 4, 6], "lane after lane");
        assert_eq!(done.dropped.len(), 1);
        assert!(!fs.exists(&seg_path(done.dropped[0])), "deleted");
        assert!(done.findings.is_empty(), "a torn end is no damage");
        // The next open finds the lane ending in the cut segment, and replays the same.
        let (seen, done) = run::<Index>(&fs, false).unwrap();
        assert_eq!(seqs(&seen.got), vec![1, 2, 4, 6]);
        assert!(done.dropped.is_empty() && done.findings.is_empty());
        let fs = SimVfs::from_image(&image);
        let (seen, done) = run::<Tree>(&fs, false).unwrap();
        assert_eq!(seqs(&seen.got), vec![1, 2, 4, 6], "merged by seq");
        assert_eq!(done.dropped.len(), 1);
        assert!(!fs.exists(&seg_path(done.dropped[0])), "deleted");
        let len = fs.open(&seg_path(a), false).unwrap().len().unwrap();
        assert_eq!(len, off3, "cut at its torn end");
        assert!(done.findings.is_empty(), "a torn end is no damage");
    }

    /// A sealed segment whose end was lost at a record boundary (the write that carried its
    /// last records and the marker a roll ends it with never reached the disk): every record
    /// left in it verifies, and nothing after them is torn, but the lane ends there all the
    /// same, by every rule: the record in the lane's next segment, written after the lost
    /// ones, is not replayed, and that segment is deleted. A segment that ends with its
    /// marker, an empty one too, does not end its lane.
    #[test]
    fn a_sealed_segment_without_its_marker_ends_its_lane() {
        let (fs, (a, off3)) = written(|log| {
            let (a, _) = write(log, 0, &[&put(0, 1)]);
            write(log, 1, &[&put(0, 2)]);
            log.flush_all().unwrap();
            let (_, off3) = write(log, 0, &[&put(0, 3)]);
            write(log, 1, &[&put(0, 4)]);
            roll(log, 0);
            // An empty segment sealed: it ends with a marker of its own.
            roll(log, 0);
            write(log, 0, &[&put(0, 5)]);
            write(log, 1, &[&put(0, 6)]);
            (a, off3)
        });
        let image = fs.image();
        for rules in ["index", "tree"] {
            let fs = SimVfs::from_image(&image);
            // The seqs applied, in order.
            let got = |fs: &SimVfs| {
                let mut got = match rules {
                    "index" => seqs(&run::<Index>(fs, false).unwrap().0.got),
                    _ => seqs(&run::<Tree>(fs, false).unwrap().0.got),
                };
                got.sort_unstable();
                got
            };
            assert_eq!(got(&fs), vec![1, 2, 3, 4, 5, 6], "{rules}: whole");
            // Seq 3 and the marker lost: the segment ends after seq 1.
            fs.open(&seg_path(a), false).unwrap().set_len(off3).unwrap();
            let segs = fs.paths().len();
            assert_eq!(
                got(&fs),
                vec![1, 2, 4, 6],
                "{rules}: lane 0 ends after seq 1"
            );
            assert_eq!(
                fs.paths().len(),
                segs - 2,
                "{rules}: the later segments deleted"
            );
        }
    }

    /// A sealed segment that does not end with a marker, before a segment of its lane whose
    /// header records some of its records as synced, lost its end after a sync made it
    /// durable (a sync makes a lane's segments durable in order; a recovery that cuts a torn
    /// tail deletes the lane's later segments, so the cut one is its last): damage, refused
    /// by a writable open and reported by a read-only one, which replays the rest.
    #[test]
    fn a_segment_without_its_marker_before_synced_records_is_damage() {
        let (fs, (a, off2)) = written(|log| {
            let (a, _) = write(log, 0, &[&put(0, 1)]);
            let (_, off2) = write(log, 0, &[&put(0, 2)]);
            roll(log, 0);
            write(log, 0, &[&put(0, 3)]);
            // The second sync makes the synced length the first wrote durable.
            log.sync_now().unwrap();
            log.sync_now().unwrap();
            (a, off2)
        });
        fs.open(&seg_path(a), false).unwrap().set_len(off2).unwrap();
        refused_by_every_rule(&fs);
        let (seen, done) = run::<Index>(&fs, true).unwrap();
        assert_eq!(seqs(&seen.got), vec![1, 3]);
        assert!(done.dropped.is_empty());
        assert_eq!(done.findings.len(), 1, "{:?}", done.findings);
        // (Cut below its own synced length too: that says it first.)
        assert!(
            done.findings[0].what.contains("synced"),
            "{:?}",
            done.findings
        );
    }

    /// A segment whose header's fixed part verifies but neither of whose synced-length slots
    /// does (both are written with the header and only one is ever being written at a time:
    /// damage) records no synced length: a bad record with intact records after it is damage,
    /// as in the formats before the slots, never the start of a torn tail that would drop the
    /// records after it without a word.
    #[test]
    fn a_segment_whose_slots_are_both_damaged_reports_damage_before_intact_records() {
        let (fs, (seg, off2)) = written(|log| {
            let (seg, _) = write(log, 0, &[&put(0, 1)]);
            let (_, off2) = write(log, 0, &[&put(0, 2)]);
            write(log, 0, &[&put(0, 3)]);
            log.sync_now().unwrap();
            log.sync_now().unwrap();
            (seg, off2)
        });
        // Both slots, and a byte of the second record's value.
        for at in [40, 56, off2 + put(0, 2).len() as u64 - 2] {
            assert!(fs.corrupt(&seg_path(seg), at, b"X"));
        }
        refused_by_every_rule(&fs);
        let (seen, done) = run::<Index>(&fs, true).unwrap();
        assert_eq!(
            seqs(&seen.got),
            vec![1, 3],
            "the record after the damage kept"
        );
        assert_eq!(done.findings.len(), 1, "{:?}", done.findings);
    }

    /// A segment cut at a record boundary before the length its header records as synced
    /// (its lane's last, so no later segment tells): every record left verifies, but a crash
    /// never takes synced bytes away, so the cut is damage, refused by a writable open and
    /// reported by a read-only one.
    #[test]
    fn a_segment_cut_before_its_synced_length_is_damage() {
        let (fs, (seg, off3)) = written(|log| {
            let (seg, _) = write(log, 0, &[&put(0, 1)]);
            write(log, 0, &[&put(0, 2)]);
            let (_, off3) = write(log, 0, &[&put(0, 3)]);
            log.sync_now().unwrap();
            log.sync_now().unwrap();
            (seg, off3)
        });
        fs.open(&seg_path(seg), false)
            .unwrap()
            .set_len(off3)
            .unwrap();
        refused_by_every_rule(&fs);
        let (seen, done) = run::<Index>(&fs, true).unwrap();
        assert_eq!(seqs(&seen.got), vec![1, 2]);
        assert_eq!(done.findings.len(), 1, "{:?}", done.findings);
        assert!(done.findings[0].what.contains("synced"));
    }

    /// A damaged batch frame in the middle of a lane's synced records, with records after it:
    /// damage, never a torn tail. A writable open refuses it by every rule; a read-only one reports it, and
    /// with `whole_batches` leaves out the inner record that still verifies, where the
    /// index's rules apply it.
    #[test]
    fn a_damaged_batch_in_the_middle_is_reported_and_lost_whole() {
        let (fs, ((seg, off), inner)) = written(|log| {
            write(log, 0, &[&put(0, 1)]);
            let batch = write_batch(log, 0, 3, &[2, 3]);
            write(log, 0, &[&put(0, 4)]);
            // Synced (the segment's header records it), so the batch is inside what a
            // sync made durable.
            log.sync_now().unwrap();
            batch
        });
        // A byte of the second inner record's value.
        let at = off + inner[1] + put(3, 3).len() as u64 - 2;
        assert!(fs.corrupt(&seg_path(seg), at, b"X"));
        refused_by_every_rule(&fs);
        let (seen, done) = run::<Index>(&fs, true).unwrap();
        assert_eq!(
            seqs(&seen.got),
            vec![1, 2, 4],
            "the verified inner record kept"
        );
        assert_eq!(done.findings.len(), 1);
        let (seen, done) = run::<Tree>(&fs, true).unwrap();
        assert_eq!(seqs(&seen.got), vec![1, 4], "the batch lost whole");
        assert_eq!(done.findings.len(), 2);
        assert!(
            done.findings[1].what.contains("left out"),
            "{:?}",
            done.findings
        );
        assert_eq!(done.findings[1].lost, 1);
    }

    /// Clears applied in order empty only the keyspace they name: the kind is shown each one
    /// in its place and nothing before it is cut; by position (the index's rules), a clear
    /// every lane of which survived cuts its lane before it.
    #[test]
    fn clears_in_order_reach_the_kind_with_their_keyspace() {
        let (fs, ()) = written(|log| {
            write(log, 0, &[&put(0, 1)]);
            write(log, 0, &[&put(5, 2)]);
            let mut clear = Vec::new();
            format::encode_clear_in(&mut clear, 5, 3, 1);
            write(log, 0, &[&clear]);
            write(log, 0, &[&put(5, 4)]);
            write(log, 1, &[&put(0, 5)]);
        });
        let image = fs.image();
        let (seen, done) = run::<Tree>(&fs, false).unwrap();
        assert_eq!(
            seen.got,
            vec![
                (T_PUT, 1, 0),
                (T_PUT, 2, 5),
                (T_CLEAR, 3, 5),
                (T_PUT, 4, 5),
                (T_PUT, 5, 0)
            ]
        );
        assert!(!seen.forgot);
        assert_eq!(done.applied, 5);
        assert_eq!(fs.image().len(), image.len());
        let fs = SimVfs::from_image(&image);
        let (seen, _) = run::<Index>(&fs, false).unwrap();
        assert_eq!(seen.got, vec![(T_PUT, 4, 5), (T_PUT, 5, 0)]);
        assert!(seen.forgot);
    }

    /// With `merge_by_seq`, the records of several lanes are applied in seq order, a batch by
    /// its first record's; one lane's alone in its log order. The index's rules replay lane
    /// after lane.
    #[test]
    fn lanes_merge_by_seq() {
        let (fs, ()) = written(|log| {
            write(log, 0, &[&put(0, 1)]);
            write(log, 1, &[&put(0, 2)]);
            write(log, 1, &[&put(0, 3)]);
            let mut del = Vec::new();
            format::encode_delete_in(&mut del, 0, b"k1", 4, 0);
            write(log, 0, &[&del]);
            write_batch(log, 0, 2, &[5, 6]);
            write(log, 1, &[&put(0, 7)]);
        });
        let (seen, _) = run::<Tree>(&fs, true).unwrap();
        assert_eq!(seqs(&seen.got), vec![1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(seen.got[3].0, T_DELETE);
        let (seen, _) = run::<Index>(&fs, true).unwrap();
        assert_eq!(seqs(&seen.got), vec![1, 4, 5, 6, 2, 3, 7]);
        // One lane: its log order, whatever the seqs.
        let (fs, ()) = written(|log| {
            for seq in [3, 1, 2] {
                write(log, 0, &[&put(0, seq)]);
            }
        });
        let (seen, _) = run::<Tree>(&fs, true).unwrap();
        assert_eq!(seqs(&seen.got), vec![3, 1, 2]);
    }
}
