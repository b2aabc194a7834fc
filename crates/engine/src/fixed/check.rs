//! `check` of a fixed-length database (every byte of every file verified, damage told from
//! what a crash leaves, the index checked against the records it points at) and `repair` (a
//! new database of every record that verifies), with the hash's rules.

use super::rw::{id_of, split};
use super::*;
use crate::config::OpenMode;
use crate::io::Vfs;
use crate::log::format::{SEG_HEADER_LEN, T_BATCH, T_PUT};
use crate::log::recovery::{classify, probe_segments, End, FileBytes};
use crate::log::segment::seg_file_name;
use crate::log::{for_each_sub, scan};
use crate::store::{BatchOp, CheckReport, RepairReport, Store};
use std::path::{Path, PathBuf};

/// Records per batch written by `repair`.
const BATCH_RECORDS: usize = 1000;

impl Inner {
    /// Verify every file; changes nothing.
    pub(super) fn audit(&self) -> Result<CheckReport> {
        let mut rep = CheckReport::default();
        let segs = self.log.segs.load_full();
        let known: Vec<u32> = segs.segs.keys().copied().collect();
        // The slot file as it is on disk: its headers, side file and every page.
        let template = slots::Head {
            salt: self.log.salt,
            width: self.width(),
            limsiz: self.limsiz.load(Ordering::Relaxed),
            ..slots::Head::default()
        };
        let opened = slots::Slots::open(&*self.log.vfs, &self.log.dir, true, Some(template))?;
        rep.damage.extend(opened.findings);
        rep.warnings.extend(opened.warnings);
        if opened.absent {
            rep.warnings.push(format!(
                "{} is missing: the database is of the format before it, converted at the next \
                 writable open",
                slots::DATA_NAME
            ));
        }
        for b in opened.slots.bad_pages() {
            rep.damage.push(crate::log::recovery::Finding {
                file: slots::DATA_NAME.into(),
                off: b.off,
                len: b.len,
                lost: 1,
                what: format!("page {} of records fails its checksum", b.page),
            });
        }
        let head = opened.slots.head.lock().clone();
        let ckpt = (head.gen > 0).then(|| head.places.clone());
        if let Some(c) = &ckpt {
            rep.damage.extend(c.findings(&segs, &[]));
        }
        let _ = known;
        if let Err(Error::Corrupt(m)) = crate::meta::read(&*self.log.vfs, &self.log.dir) {
            rep.damage
                .push(open::meta_damage(&*self.log.vfs, &self.log.dir, m));
        }
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
            let listed = ckpt.as_ref().and_then(|c| c.listed(p.id));
            match self.log.probe_verdict(&p, listed)? {
                Some(f) => rep.damage.push(f),
                None => rep.warnings.push(format!(
                    "{} was being created at a crash and holds nothing: removed at the next \
                     writable open",
                    seg_file_name(p.id)
                )),
            }
        }
        let limid = self.limid();
        for seg in segs.segs.values() {
            if orphans.contains(&seg.id) {
                continue;
            }
            let len = seg.file.len()?;
            let mut bad_record = None;
            let s = scan::scan(
                &mut FileBytes(&*seg.file),
                seg.seed,
                SEG_HEADER_LEN as u64,
                len.max(SEG_HEADER_LEN as u64),
                |off, h, rec, _| {
                    let ok = match h.typ {
                        T_BATCH => for_each_sub(rec, h, |_, sh, srec| {
                            if id_of(sh, srec).is_some_and(|i| i >= 1 && i <= limid) {
                                Ok(())
                            } else {
                                Err(Error::Corrupt(String::new()))
                            }
                        })
                        .is_ok(),
                        T_PUT | crate::log::format::T_DELETE => {
                            id_of(h, rec).is_some_and(|i| i >= 1 && i <= limid)
                        }
                        _ => true,
                    };
                    if !ok && bad_record.is_none() {
                        bad_record = Some(off);
                    }
                    Ok(true)
                },
            )?;
            if let Some(off) = bad_record {
                rep.problems.push(format!(
                    "{} offset {off}: a record verifies but is not of an id of this database",
                    seg_file_name(seg.id)
                ));
            }
            let durable = ckpt.as_ref().and_then(|c| c.durable(seg.id, seg.lane));
            if classify(seg.id, &s, durable, &mut rep.damage) == End::Torn {
                let t = s.tail.as_ref().map_or(0, |t| t.len);
                rep.warnings.push(format!(
                    "{}: the last {t} bytes are a write cut short by a crash (never \
                     acknowledged as durable); dropped at the next writable open",
                    seg_file_name(seg.id)
                ));
            }
        }
        // The index against the records it points at (a place in a damaged region is part
        // of the damage already reported).
        let in_damage = |place: u64| {
            let (s, o) = split(place);
            let file = seg_file_name(s);
            rep.damage
                .iter()
                .any(|d| d.file == file && d.off <= o && o < d.off + d.len.max(1))
        };
        let mut problems = Vec::new();
        self.index.each_from(1, |id, place| {
            if place == super::rw::DEL {
                return true;
            }
            let res = self.with_place(place, true, &mut |h, rec| {
                Ok((h.typ == T_PUT && id_of(h, rec) == Some(id))
                    .then_some(())
                    .ok_or("the index points at a record of another id"))
            });
            match res {
                Ok(Some(Ok(()))) => {}
                _ if in_damage(place) => {}
                Ok(Some(Err(p))) => problems.push(format!("id {id}: {p}")),
                Ok(None) => problems.push(format!(
                    "id {id}: the index points into missing segment {}",
                    split(place).0
                )),
                Err(e) => problems.push(format!("id {id}: {e}")),
            }
            true
        });
        let records = self.count.load(Ordering::Acquire);
        rep.records = records;
        rep.problems.extend(problems);
        rep.damage
            .sort_by(|a, b| (&a.file, a.off).cmp(&(&b.file, b.off)));
        rep.damage.dedup();
        Ok(rep)
    }
}

impl FixedDb {
    /// Write a new database at `dst` (which must not exist) holding every record of `src` that
    /// verifies, at its newest surviving version, with `src`'s width and limsiz unless
    /// `params` give others; `src` is not written.
    pub fn repair_with(
        src: &Path,
        dst: &Path,
        params: &Params,
        vfs: Arc<dyn Vfs>,
    ) -> Result<RepairReport> {
        Self::repair_locked(src, dst, params, vfs, None)
    }

    fn repair_locked(
        src: &Path,
        dst: &Path,
        params: &Params,
        vfs: Arc<dyn Vfs>,
        held: Option<Box<dyn std::any::Any + Send + Sync>>,
    ) -> Result<RepairReport> {
        crate::repair::check_paths(&*vfs, src, dst)?;
        let from = FixedDb::open_full(
            src,
            &Params::default(),
            vfs.clone(),
            OpenMode::ReadOnly,
            true,
            held,
        )?;
        let stored: Vec<(&str, String)> = from
            .stored()
            .map(|st| {
                vec![
                    ("width", st.width.to_string()),
                    ("limsiz", st.limsiz.to_string()),
                ]
            })
            .unwrap_or_default();
        let params = crate::repair::copy_params(params, &stored)?;
        let res = copy_live(&from, dst, &params, vfs.clone());
        if res.is_err() {
            crate::repair::remove_copy(&*vfs, dst, &[]);
        }
        let kept = res?;
        let damage = from.inner.findings.lock().clone();
        from.close()?;
        Ok(crate::repair::report(kept, damage))
    }

    /// `repair_with` beside `src`, then swap (`crate::repair::in_place`): `src` is renamed to
    /// `SRC.damaged-<unix time>` (returned) and the repaired database takes its name.
    pub fn repair_in_place(
        src: &Path,
        params: &Params,
        vfs: Arc<dyn Vfs>,
    ) -> Result<(RepairReport, PathBuf)> {
        // The salvage open keeps a stand-in for the lock `in_place` holds.
        crate::repair::in_place(src, &vfs, |tmp| {
            Self::repair_locked(src, tmp, params, vfs.clone(), Some(Box::new(())))
        })
    }
}

/// Copy the live records of `from` into a new database at `dst`, in id order; how many.
fn copy_live(from: &FixedDb, dst: &Path, params: &Params, vfs: Arc<dyn Vfs>) -> Result<u64> {
    let to = FixedDb::open_mode(dst, params, vfs, OpenMode::Create)?;
    let mut ops: Vec<BatchOp> = Vec::with_capacity(BATCH_RECORDS);
    let mut kept = 0u64;
    let mut failed = None;
    from.for_each_record(&mut |key, value, meta| {
        ops.push(BatchOp::Put {
            key: key.to_vec(),
            value: value.to_vec(),
            flags: meta.flags,
            expires: meta.expires,
        });
        if ops.len() >= BATCH_RECORDS {
            if let Err(e) = to.write_batch(&ops) {
                failed = Some(e);
                return Ok(false);
            }
            kept += ops.len() as u64;
            ops.clear();
        }
        Ok(true)
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    to.write_batch(&ops)?;
    kept += ops.len() as u64;
    to.close()?;
    Ok(kept)
}
