//! Finding the segments of a log and telling what a failed record was: the parts of recovery
//! and `check` that do not depend on what the records mean (the kind replays them).
//!
//! - A failure followed by a record that verifies in the same segment is damage (`scan`).
//! - A failure with nothing valid after it in its segment is a torn tail — unless a checkpoint
//!   knew those bytes durable (`classify`'s `durable`), or the segment's header records them
//!   as synced (`Scanned::synced`): damage. Past the synced length the scan ends at the first
//!   failure, whatever verifies after it (a hole a write-back out of file order left).
//! - A segment file shorter than its header, or whose header does not verify while nothing
//!   after it does either and its other bytes are zeros, was being created at a crash: torn
//!   (`probe_verdict`).

use super::format::{self, SegInfo, SegLayout, SEG_DATA, SEG_HEADER_LEN, T_BATCH};
use super::scan::{self, Bytes, Scanned};
use super::segment::{parse_seg_file_name, seg_file_name, Segment};
use super::Log;
use crate::error::{Error, Result};
use crate::io::{VFile, Vfs};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Damage found in the files of a database.
pub(crate) type Finding = crate::store::Damaged;

/// The error of a writable open refused for `found` (not empty) in database `dir`.
pub(crate) fn refusal(dir: &Path, found: &[Finding]) -> Error {
    let lost: u64 = found.iter().map(|f| f.lost).sum();
    let first = &found[0];
    let len = match first.len {
        0 => String::new(),
        n => format!(" ({n} bytes)"),
    };
    let more = match found.len() {
        1 => String::new(),
        n => format!(
            " and {} more damaged region{}",
            n - 1,
            if n == 2 { "" } else { "s" }
        ),
    };
    Error::Corrupt(format!(
        "{}: {} in {} at offset {}{len}{more}, at least {lost} record{} lost; nothing was \
         changed. `kura db check {}` lists the damage; `kura db repair {} NEW.kh` writes a new \
         database of every record that verifies",
        dir.display(),
        first.what,
        first.file,
        first.off,
        if lost == 1 { "" } else { "s" },
        dir.display(),
        dir.display(),
    ))
}

/// Why a probe's header is unusable when the file ends inside it.
const SHORT: &str = "shorter than a segment header";

/// A segment file as found in the directory, its header read.
pub(crate) struct Probe {
    pub id: u32,
    pub path: PathBuf,
    pub file: Arc<dyn VFile>,
    pub len: u64,
    /// The header, or why it is not one of this database's.
    pub header: std::result::Result<SegInfo, String>,
}

/// Every segment file of `dir`, by id.
pub(crate) fn probe_segments(vfs: &dyn Vfs, dir: &Path) -> Result<Vec<Probe>> {
    let mut ids: Vec<u32> = vfs
        .list(dir)?
        .iter()
        .filter_map(|n| parse_seg_file_name(n))
        .collect();
    ids.sort_unstable();
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let path = dir.join(seg_file_name(id));
        let file = vfs.open(&path, false)?;
        let len = file.len()?;
        let header = if len < SEG_HEADER_LEN as u64 {
            Err(SHORT.to_string())
        } else {
            let mut h = vec![0u8; len.min(SEG_DATA as u64) as usize];
            file.read_at(&mut h, 0)?;
            match format::parse_seg_header(&h) {
                Ok(i) if i.id != id => Err(format!("its header names segment {}", i.id)),
                // Cut inside its synced-length slots: a slot left whole that records synced
                // records says the file was cut (damage); else its slots were being written
                // with the rest of the header at a crash.
                Ok(_) if len < format::seg_header_len(&h) as u64 => {
                    match format::read_slots(&h, format::SEG_SLOTS) {
                        Some((synced, _)) if synced > SEG_DATA as u64 => Err(format!(
                            "it is cut inside its header, which records {synced} bytes as synced"
                        )),
                        _ => Err(SHORT.to_string()),
                    }
                }
                Ok(i) => Ok(i),
                Err(e) => Err(e
                    .to_string()
                    .trim_start_matches("corrupt database: ")
                    .into()),
            }
        };
        out.push(Probe {
            id,
            path,
            file,
            len,
            header,
        });
    }
    Ok(out)
}

/// The database's salt and lane count, as most segment headers give them (ties: the oldest
/// segment's); the probes whose header gives others are marked as not this database's.
pub(crate) fn settle_probes(probes: &mut [Probe]) -> Option<(u64, usize)> {
    let mut votes: Vec<((u64, u16), usize, u32)> = Vec::new();
    for p in probes.iter() {
        if let Ok(i) = &p.header {
            match votes.iter_mut().find(|v| v.0 == (i.salt, i.lanes)) {
                Some(v) => v.1 += 1,
                None => votes.push(((i.salt, i.lanes), 1, p.id)),
            }
        }
    }
    let ((salt, lanes), _, _) = *votes
        .iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2)))?;
    for p in probes.iter_mut() {
        if p.header
            .as_ref()
            .is_ok_and(|i| (i.salt, i.lanes) != (salt, lanes))
        {
            p.header = Err("its header belongs to another database".into());
        }
    }
    Some((salt, lanes as usize))
}

/// Reads a segment's bytes, wherever they are (file or write buffer).
pub(crate) struct SegBytes<'a> {
    pub log: &'a Log,
    pub seg: &'a Segment,
}

impl Bytes for SegBytes<'_> {
    fn read(&mut self, off: u64, len: usize, out: &mut Vec<u8>) -> Result<()> {
        self.log.read_range(self.seg, off, len, out)
    }

    fn layout(&mut self) -> Result<SegLayout> {
        Ok(SegLayout {
            data: self.seg.data,
            slots: self.seg.slots,
            synced: self.seg.synced(),
            slot_writes: 0,
        })
    }
}

/// Reads a file that is not (or not yet) a segment of the database.
pub(crate) struct FileBytes<'a>(pub &'a dyn VFile);

impl Bytes for FileBytes<'_> {
    fn read(&mut self, off: u64, len: usize, out: &mut Vec<u8>) -> Result<()> {
        out.clear();
        out.resize(len, 0);
        self.0.read_at(out, off)?;
        Ok(())
    }

    /// From the file's header (one that does not verify: no slots, records from where the
    /// caller says).
    fn layout(&mut self) -> Result<SegLayout> {
        let n = self.0.len()?.min(SEG_DATA as u64) as usize;
        let mut h = vec![0u8; n];
        self.0.read_at(&mut h, 0)?;
        Ok(format::seg_layout(&h))
    }
}

/// What a scanned range ends with, once classified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// Every byte verified.
    Clean,
    /// Zeros written ahead of the log (never records): cut off by a writable open.
    Zeros,
    /// A write cut short by a crash: dropped (a lane's last segment is cut there).
    Torn,
    /// Damage (a finding): nothing is dropped.
    Damaged,
}

/// Classify the scan of `[.., end)` of segment `id`: its damage, and its tail given what a
/// checkpoint knew durable (`durable`) and how long the file is.
pub(crate) fn classify(
    id: u32,
    s: &Scanned,
    durable: Option<u64>,
    found: &mut Vec<Finding>,
) -> End {
    let file = seg_file_name(id);
    for d in &s.damage {
        found.push(Finding {
            file: file.clone(),
            off: d.off,
            len: d.len,
            lost: d.lost,
            what: if d.salvaged.is_empty() {
                "damaged records".into()
            } else {
                format!(
                    "a damaged batch ({} of its records verify and are kept)",
                    d.salvaged.len()
                )
            },
        });
    }
    let durable = durable.max(s.synced);
    let Some(t) = &s.tail else {
        // Every record verifies, but the file ends before what its header or a checkpoint
        // records as durable: cut by damage (a crash never takes synced bytes away), even
        // where the cut falls after a marker.
        if let Some(d) = durable.filter(|&d| d > s.end && s.stopped.is_none()) {
            found.push(Finding {
                file,
                off: s.end,
                len: 0,
                lost: 0,
                what: format!("the file ends before the {d} bytes recorded as synced"),
            });
            return End::Damaged;
        }
        return End::Clean;
    };
    if durable.is_some_and(|d| t.off < d) {
        found.push(Finding {
            file,
            off: t.off,
            len: t.len,
            lost: t.lost,
            what: "damaged records at the end of what was written".into(),
        });
        End::Damaged
    } else if t.zeros {
        End::Zeros
    } else {
        End::Torn
    }
}

impl Log {
    /// Whether the last record of `seg` (below its flushed end) is a marker: an empty batch.
    pub(crate) fn ends_with_marker(&self, seg: &Segment) -> Result<bool> {
        let end = seg.flushed();
        let m = format::marker(seg.seed);
        if end < seg.data + m.len() as u64 {
            return Ok(false);
        }
        let mut buf = Vec::new();
        self.read_range(seg, end - m.len() as u64, m.len(), &mut buf)?;
        Ok(buf == m)
    }

    /// What a segment file whose header is not usable holds: `None` when it was being created
    /// at a crash (shorter than a header, or nothing in it verifies and its bytes after the
    /// header are zeros, and no checkpoint listed it with records: `listed`, the length one
    /// recorded), else the finding.
    pub(crate) fn probe_verdict(&self, p: &Probe, listed: Option<u64>) -> Result<Option<Finding>> {
        let why = p.header.as_ref().err().cloned().unwrap_or_default();
        let file = seg_file_name(p.id);
        let had_records = listed.is_some_and(|l| l > SEG_HEADER_LEN as u64);
        if (p.len < SEG_HEADER_LEN as u64 || why == SHORT) && !had_records {
            return Ok(None);
        }
        let mut records = 0u64;
        let mut src = FileBytes(&*p.file);
        let s = scan::scan(
            &mut src,
            format::seed(self.salt),
            SEG_HEADER_LEN as u64,
            p.len.max(SEG_HEADER_LEN as u64),
            |_, h, _, _| {
                records += if h.typ == T_BATCH { h.count } else { 1 };
                Ok(true)
            },
        )?;
        let zeros = records == 0
            && s.damage.is_empty()
            && s.tail
                .as_ref()
                .is_none_or(|t| t.zeros && t.off == SEG_HEADER_LEN as u64);
        if zeros && !had_records && why != "its header belongs to another database" {
            return Ok(None);
        }
        let what = if records > 0 {
            format!("the segment header is unusable ({why}); {records} records after it verify")
        } else {
            format!("the segment header is unusable ({why}); nothing in the file verifies")
        };
        Ok(Some(Finding {
            file,
            off: 0,
            len: if records > 0 {
                SEG_HEADER_LEN as u64
            } else {
                p.len
            },
            lost: u64::from(records == 0),
            what,
        }))
    }
}
