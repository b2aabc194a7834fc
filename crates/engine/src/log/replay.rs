//! Recovery's kind-neutral procedure (docs/ARCHITECTURE.md, "Recovery procedure"), for a kind
//! that keeps its index in memory and replays the log written after its checkpoint: which
//! ranges to scan, what a failure in them was, the refusal of a writable open that finds
//! damage, the clears of a `vanish`, the replay itself in each lane's log order, the cut of
//! torn tails and of segments created at a crash, and each lane's active segment afterwards.
//!
//! The kind says what records mean ([`Replayer`]): it forgets what a clear hides and applies
//! each verified record (ordering a key's records by their seq, as they may be in several
//! lanes). The on-disk hash (`hash/recover.rs`) and the fixed-length database (`fixed/open.rs`)
//! recover through it.

use super::checkpoint::Places;
use super::format::{self, Header, SEG_HEADER_LEN, T_CLEAR};
use super::recovery::{classify, refusal, End, Finding, Probe, SegBytes};
use super::scan::{self, Bytes, Scanned};
use super::segment::{SegTable, Segment};
use super::{data_end, Log};
use crate::error::Result;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What a kind does with the records recovery reads back.
pub(crate) trait Replayer {
    /// A `vanish` cleared lane `l` at `cut[l]` (`segment << 32 | offset` of its clear record):
    /// forget every index entry pointing at a record before it (`lane_of` tells a segment's
    /// lane). Called once, before any record is applied, only when some lane has a clear.
    fn forget_before(
        &mut self,
        cut: &[Option<u64>],
        lane_of: &dyn Fn(u32) -> Option<usize>,
    ) -> Result<()>;
    /// Apply one verified record at (`seg`, `off`): a put, a delete or a batch frame (never a
    /// clear), in its lane's log order; lanes one after the other.
    fn apply(&mut self, seg: u32, off: u64, h: &Header, rec: &[u8]) -> Result<()>;
}

/// What the replay did.
pub(crate) struct Replayed {
    /// The damage found (a read-only open only: a writable one is refused).
    pub findings: Vec<Finding>,
    /// Records applied (the kind checkpoints at the next close when there were any).
    pub applied: u64,
}

/// One range recovery scans.
struct Region {
    seg: Arc<Segment>,
    /// Its lane, `None` for a segment whose header is damaged.
    lane: Option<usize>,
    start: u64,
    end: u64,
    scanned: Scanned,
    verdict: End,
}

/// Replay the log of `log` into `kind`.
///
/// - `bad`: the segment files whose header is not one of this database's;
/// - `ckpt`: what a checkpoint that verified knows of the log (its durable lengths tell damage
///   from a torn tail), whether or not its index was used;
/// - `from`: where each lane's replay starts when the kind loaded the checkpoint's index (else
///   every segment is replayed from its start);
/// - `found`: findings made already (about the checkpoint);
/// - `segsiz`: the size the active segments are mapped at.
///
/// A writable open that finds damage fails with [`crate::Error::Corrupt`] before anything on
/// disk is changed; a read-only one serves what verifies and returns the findings.
pub(crate) fn replay(
    log: &Log,
    bad: Vec<Probe>,
    ckpt: Option<&Places>,
    from: Option<&[(u32, u64)]>,
    mut found: Vec<Finding>,
    segsiz: usize,
    kind: &mut impl Replayer,
) -> Result<Replayed> {
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
                scanned: Scanned::default(),
                verdict: End::Clean,
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
                        scanned: Scanned::default(),
                        verdict: End::Clean,
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
        r.scanned = scan::scan(
            &mut SegBytes { log, seg },
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
    let dropped = lane_ends(&mut regions, &mut found);
    clears.retain(|&(_, loc, _)| {
        !regions
            .iter()
            .zip(&dropped)
            .any(|(r, &d)| d && loc >> 32 == u64::from(r.seg.id))
    });
    if !found.is_empty() && !log.readonly {
        return Err(refusal(&log.dir, &found));
    }
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
    // Pass 2: apply, in each lane's log order. A damaged tail's salvaged records are applied
    // (read-only opens only get here with damage).
    let mut applied = 0u64;
    for r in regions
        .iter()
        .zip(&dropped)
        .filter(|(_, &d)| !d)
        .map(|(r, _)| r)
    {
        let seg = &r.seg;
        let lane_cut = r.lane.and_then(|l| cut[l]);
        let mut apply = |off: u64, h: &Header, rec: &[u8]| -> Result<()> {
            applied += 1;
            if h.typ != T_CLEAR && lane_cut.is_none_or(|c| loc_of(seg.id, off) >= c) {
                kind.apply(seg.id, off, h, rec)?;
            }
            Ok(())
        };
        let to = if r.verdict == End::Damaged {
            r.end
        } else {
            r.scanned.valid_end(r.end)
        };
        scan::scan(
            &mut SegBytes { log, seg },
            seg.seed,
            r.start,
            to,
            |off, h, rec, _| {
                apply(off, h, rec)?;
                Ok(true)
            },
        )?;
        if r.verdict == End::Damaged {
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
    for (r, &drop) in regions.iter().zip(&dropped) {
        let (seg, end) = (&r.seg, r.end);
        if drop {
            // After its lane's torn end: emptied.
            log.counters
                .truncated_bytes
                .fetch_add(end - r.start, Ordering::Relaxed);
            let empty = r.start.min(end).max(seg.data);
            if !log.readonly {
                seg.file.set_len(empty)?;
                seg.file.sync()?;
            }
            seg.flushed.store(empty, Ordering::Release);
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
                let _ = log
                    .vfs
                    .remove(&log.dir.join(super::segment::seg_file_name(id)));
            }
        }
        if !dead.is_empty() || !torn_files.is_empty() {
            log.vfs.sync_dir(&log.dir)?;
        }
    }
    // Each lane's active segment: its last one (a lane with none creates one when first
    // written). Map what can be mapped. A lane whose log ends with a marker needs none at the
    // next seal, checkpoint or close.
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
    Ok(Replayed {
        findings: found,
        applied,
    })
}

/// Where each lane's log ends: at its first region that ends torn (or in zeros); the regions
/// of the lane after it are dropped (true in the result). A sync makes a lane's segments
/// durable in order, so records after a torn end were never synced — unless a later segment's
/// header records some of its own as synced: then the end was not torn but damaged, and is
/// reported so (nothing is dropped). Regions without a lane are never dropped.
fn lane_ends(regions: &mut [Region], found: &mut Vec<Finding>) -> Vec<bool> {
    let mut dropped = vec![false; regions.len()];
    for e in 0..regions.len() {
        let Some(lane) = regions[e].lane else {
            continue;
        };
        if dropped[e] || !matches!(regions[e].verdict, End::Torn | End::Zeros) {
            continue;
        }
        let later = || (e + 1..regions.len()).filter(|&i| regions[i].lane == Some(lane));
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
                what: "damaged records at the end of a segment followed by synced ones".into(),
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
