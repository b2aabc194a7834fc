//! `check` of an on-disk hash: every byte of every file verified, damage told from what a
//! crash leaves, the index checked against the records it points at.

use super::format::{SEG_HEADER_LEN, T_BATCH, T_PUT};
use super::recover::{read_checkpoint, CkptRead};
use super::scan;
use super::segment::seg_file_name;
use super::{decode_value, for_each_sub, Inner, CKPT_NAME, NSHARDS};
use crate::error::{Error, Result};
use crate::log::recovery::{classify, probe_segments, End, FileBytes};
use crate::store::CheckReport;

impl Inner {
    /// Verify every file of the database. Reaches the same verdict whatever the state of the
    /// checkpoint (which only adds what it knew to have been written) and however the
    /// database was opened; changes nothing.
    pub(super) fn audit(&self) -> Result<CheckReport> {
        let mut rep = CheckReport::default();
        let segs = self.log.segs.load_full();
        let known: Vec<u32> = segs.segs.keys().copied().collect();
        let ckpt = match read_checkpoint(&*self.log.vfs, &self.log.dir, self.log.lanes, &known) {
            CkptRead::Missing => {
                rep.warnings.push(format!(
                    "{CKPT_NAME} is missing: the index is rebuilt from the log at the next \
                     writable open"
                ));
                None
            }
            CkptRead::Damaged(why) => {
                rep.warnings.push(format!(
                    "{CKPT_NAME} is damaged ({why}): the index is rebuilt from the log at the \
                     next writable open; no record is lost by it"
                ));
                None
            }
            CkptRead::Read(c) if c.hash_seed != self.log.salt => {
                rep.warnings.push(format!(
                    "{CKPT_NAME} belongs to another database: it is ignored, and replaced at \
                     the next writable open"
                ));
                None
            }
            CkptRead::Read(c) => Some(c),
        };
        if let Some(c) = &ckpt {
            rep.damage.extend(c.findings(&segs));
        }
        if let Err(Error::Corrupt(m)) = crate::meta::read(&*self.log.vfs, &self.log.dir) {
            rep.damage
                .push(super::meta_damage(&*self.log.vfs, &self.log.dir, m));
        }
        // Segment files whose header is not usable (a read-only open also serves those whose
        // records verify: they are in the table, with no lane of their own).
        let mut orphans = Vec::new();
        for p in probe_segments(&*self.log.vfs, &self.log.dir)? {
            let ours = p
                .header
                .as_ref()
                .is_ok_and(|i| i.salt == self.log.salt && i.lanes as usize == self.log.lanes);
            if ours {
                continue;
            }
            orphans.push(p.id);
            let listed = ckpt.as_ref().and_then(|c| c.places.listed(p.id));
            match self.log.probe_verdict(&p, listed)? {
                Some(f) => rep.damage.push(f),
                None => rep.warnings.push(format!(
                    "{} was being created at a crash and holds nothing: removed at the next \
                     writable open",
                    seg_file_name(p.id)
                )),
            }
        }
        for seg in segs.segs.values() {
            if orphans.contains(&seg.id) {
                continue;
            }
            let len = seg.file.len()?;
            let mut bad_frame = None;
            let s = scan::scan(
                &mut FileBytes(&*seg.file),
                seg.seed,
                SEG_HEADER_LEN as u64,
                len.max(SEG_HEADER_LEN as u64),
                |off, h, rec, _| {
                    let ok = match h.typ {
                        T_BATCH => for_each_sub(rec, h, |_, _, _| Ok(())).is_ok(),
                        T_PUT if h.fields.compression != 0 => decode_value(h, rec).is_ok(),
                        _ => true,
                    };
                    if !ok && bad_frame.is_none() {
                        bad_frame = Some(off);
                    }
                    Ok(true)
                },
            )?;
            if let Some(off) = bad_frame {
                rep.problems.push(format!(
                    "{} offset {off}: a record verifies but does not decode",
                    seg_file_name(seg.id)
                ));
            }
            let durable = ckpt
                .as_ref()
                .and_then(|c| c.places.durable(seg.id, seg.lane));
            match classify(seg.id, &s, durable, &mut rep.damage) {
                End::Clean | End::Damaged | End::Zeros => {}
                End::Torn => {
                    let t = s.tail.as_ref().map_or(0, |t| t.len);
                    rep.warnings.push(format!(
                        "{}: the last {t} bytes are a write cut short by a crash (never \
                         acknowledged as durable); dropped at the next writable open",
                        seg_file_name(seg.id)
                    ));
                }
            }
        }
        // The index against the records it points at. A slot into a damaged region is part of
        // the damage already reported.
        let in_damage = |seg: u32, off: u64| {
            let file = seg_file_name(seg);
            rep.damage
                .iter()
                .any(|d| d.file == file && d.off <= off && off < d.off + d.len.max(1))
        };
        let mut problems = Vec::new();
        let spaces = self.spaces.all();
        let root = if self.ks == 0 { None } else { self.root() };
        let first: &Inner = root.as_deref().unwrap_or(self);
        for sp in std::iter::once(first).chain(spaces.iter().map(|s| &**s)) {
            for i in 0..NSHARDS {
                let t = sp.excl(i);
                for s in t.iter() {
                    if sp.ks == self.ks {
                        rep.records += 1; // the records of the keyspace checked
                    }
                    let res = self.with_record(s.seg, s.off as u64, |h, rec| {
                        if h.typ != T_PUT {
                            return Some("index points at a non-put record".to_string());
                        }
                        if h.keyspace != sp.ks {
                            return Some(format!(
                                "the index of keyspace {} points at a record of keyspace {}",
                                sp.ks, h.keyspace
                            ));
                        }
                        let (shard, tag) = self.hash(&rec[h.key_off..h.key_off + h.klen]);
                        (shard != i || tag != s.tag)
                            .then(|| "index slot does not match the key's hash".to_string())
                    });
                    match res {
                        Ok(None) => {}
                        _ if in_damage(s.seg, s.off as u64) => {}
                        Ok(Some(p)) => {
                            problems.push(format!("segment {} offset {}: {p}", s.seg, s.off))
                        }
                        Err(e) => problems.push(e.to_string()),
                    }
                }
            }
        }
        rep.problems.extend(problems);
        rep.damage
            .sort_by(|a, b| (&a.file, a.off).cmp(&(&b.file, b.off)));
        rep.damage.dedup();
        Ok(rep)
    }
}
