//! Maintenance: checkpoints of the id array, compaction of segments that are mostly dead, the
//! background threads, the expiry sweep, `vanish`, `optimize` and `copy_to`.

use super::rw::{id_of, split};
use super::*;
use crate::io::{OsVfs, Vfs};
use crate::log::checkpoint::{self, Places};
use crate::log::format::{self, HeaderBuf, SEG_HEADER_LEN, T_BATCH, T_DELETE, T_PUT};
use crate::log::recovery::SegBytes;
use crate::log::replay::loc_of;
use crate::log::segment::{corrupt_at, seg_file_name, SegTable};
use crate::log::{for_each_sub, scan, FLUSH_TICK};
use crate::store::{is_expired, now_secs};
use std::time::{Duration, Instant};

/// How often the compaction thread looks for work.
const COMPACT_TICK: Duration = Duration::from_millis(100);
/// How long one round of background compaction may run.
const COMPACT_BUDGET: Duration = Duration::from_millis(500);
/// Background compaction copies live records at most this fast (bytes per second).
const COMPACT_RATE: u64 = 64 << 20;
/// Records relocated per hold of the writer lock.
const RELOCATE_BATCH: usize = 256;

/// The share of a segment's bytes that no record in the index needs.
fn dead_share(s: &crate::log::segment::Segment) -> f64 {
    let total = s.flushed().saturating_sub(SEG_HEADER_LEN as u64).max(1);
    1.0 - (s.live.load(Ordering::Relaxed) as f64 / total as f64)
}

impl FixedDb {
    pub(super) fn start_background(&self) -> Result<()> {
        type Run = fn(Arc<Inner>);
        let mut threads: Vec<(&str, Run)> = vec![
            ("kura-kf-bg", Inner::background),
            ("kura-kf-gc", Inner::compactor),
        ];
        if self.inner.log.sync == SyncMode::Always {
            threads.push(("kura-kf-fill", |w| w.log.fill_loop()));
        }
        for (name, run) in threads {
            let w = self.inner.clone();
            let h = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || run(w))
                .map_err(Error::Io)?;
            self.bg.lock().push(h);
        }
        Ok(())
    }

    pub(super) fn stop_background(&self) {
        *self.inner.log.stop.lock() = true;
        self.inner.log.stop_cv.notify_all();
        self.inner.log.fill_cv.notify_all();
        for h in std::mem::take(&mut *self.bg.lock()) {
            let _ = h.join();
        }
    }
}

impl Inner {
    /// The flush tick, interval syncs, and every second the maps trimmed and what was
    /// retired freed (readers hold their own references: nothing waits).
    fn background(self: Arc<Self>) {
        let mut last_sync = Instant::now();
        let mut last_trim = Instant::now();
        while self.log.pause(FLUSH_TICK) {
            self.log.tick(&mut last_sync);
            if last_trim.elapsed() >= Duration::from_secs(1) {
                last_trim = Instant::now();
                self.log.trim_maps();
                drop(self.log.retired.take());
            }
        }
    }

    /// Compaction, checkpoints when enough was appended, and the expiry sweep.
    fn compactor(self: Arc<Self>) {
        let mut last_sweep = Instant::now();
        let mut last_ckpt_look = Instant::now();
        while self.log.pause(COMPACT_TICK) {
            if self.log.is_poisoned.load(Ordering::Acquire) {
                continue;
            }
            let Some(_m) = self.maint.try_lock() else {
                continue;
            };
            let _ = self.compact_some(COMPACT_BUDGET);
            if last_ckpt_look.elapsed() >= Duration::from_secs(1) {
                last_ckpt_look = Instant::now();
                let ckptsiz = self.cfg.lock().ckptsiz;
                let total = self.log.data_size();
                if self.appended_total() >= ckptsiz.max(total / 4) {
                    let _ = self.checkpoint();
                }
            }
            if last_sweep.elapsed() >= Duration::from_secs(10) {
                last_sweep = Instant::now();
                let _ = self.sweep_expired();
            }
        }
    }

    /// Bytes appended since the last checkpoint (or recovery work not yet checkpointed).
    pub(super) fn appended_total(&self) -> u64 {
        self.appended.load(Ordering::Relaxed)
            + self
                .log
                .tails
                .iter()
                .map(|t| t.0.lock().appended)
                .sum::<u64>()
    }

    /// What a checkpoint holds, taken at one instant under the writer lock: the head and
    /// every entry. `reset` starts counting what is appended anew (a checkpoint of this
    /// database, not a copy's).
    pub(super) fn snapshot(&self, reset: bool) -> (ckpt::Head, Vec<(u64, u32, u32)>) {
        let w = self.w.lock();
        for t in self.log.tails.iter() {
            self.log.mark(&mut t.0.lock());
        }
        let replay = self.log.lane_positions(reset);
        let mut entries = Vec::with_capacity(w.count as usize);
        self.index.each_from(1, |id, place| {
            let (s, o) = split(place);
            entries.push((id, s, o as u32));
            true
        });
        let head = ckpt::Head {
            salt: self.log.salt,
            seq: w.seq,
            places: Places {
                replay,
                segs: self.log.seg_infos(),
            },
            entries: entries.len() as u64,
        };
        (head, entries)
    }

    /// Write a checkpoint so that recovery replays only what follows it. Called with `maint`
    /// held.
    pub(super) fn checkpoint(&self) -> Result<()> {
        if self.log.readonly {
            return Ok(());
        }
        let (head, entries) = self.snapshot(true);
        let mut body = Vec::with_capacity(64 + entries.len() * 4);
        ckpt::encode(&head, &entries, &mut body);
        let res = checkpoint::write_atomic(
            &*self.log.vfs,
            &self.log.dir,
            CKPT_NAME,
            CKPT_TMP,
            &[&body],
            || {
                self.log
                    .sync_now()
                    .map_err(|e| std::io::Error::other(e.to_string()))
            },
        );
        res.map_err(|e| self.log.poison(&e))?;
        self.appended.store(0, Ordering::Relaxed);
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Remove segments `ids` from the table and the directory.
    pub(super) fn drop_segments(&self, ids: &[u32]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        self.log.set_segs(|t| {
            let mut t = SegTable::clone(t);
            for id in ids {
                t.segs.remove(id);
            }
            t
        });
        for &id in ids {
            let _ = self.log.vfs.remove(&self.log.dir.join(seg_file_name(id)));
        }
        self.log
            .vfs
            .sync_dir(&self.log.dir)
            .map_err(|e| self.log.poison(&e))?;
        drop(self.log.retired.take());
        Ok(())
    }

    /// The sealed segments past the compaction threshold (not found damaged).
    fn compactable(&self) -> Vec<(u32, f64)> {
        let threshold = self.cfg.lock().compact;
        let damaged = self.damaged.lock();
        self.log
            .segs
            .load()
            .segs
            .values()
            .filter(|s| s.sealed.load(Ordering::Acquire) && !damaged.contains(&s.id))
            .filter_map(|s| {
                let dead = dead_share(s);
                (dead >= threshold).then_some((s.id, dead))
            })
            .collect()
    }

    /// Compact sealed segments, the most dead first, until none is past the threshold or
    /// `budget` is spent; then one checkpoint, then they are removed. Called with `maint`.
    pub(super) fn compact_some(&self, budget: Duration) -> Result<usize> {
        let started = Instant::now();
        let mut done = Vec::new();
        let mut moved = 0;
        while started.elapsed() < budget {
            let next = self
                .compactable()
                .into_iter()
                .filter(|(id, _)| !done.contains(id))
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(id, _)| id);
            let Some(id) = next else { break };
            match self.relocate_segment(id, Some(COMPACT_RATE)) {
                Ok(Some(m)) => {
                    done.push(id);
                    moved += m;
                }
                Ok(None) => break,
                Err(e) => {
                    self.drop_compacted(&done, moved)?;
                    return Err(e);
                }
            }
        }
        self.drop_compacted(&done, moved)?;
        Ok(done.len())
    }

    /// After the live records of `ids` were copied: checkpoint (the originals must not go
    /// before the copies are durable and indexed), then remove them.
    pub(super) fn drop_compacted(&self, ids: &[u32], moved: u64) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        self.checkpoint()?;
        self.drop_segments(ids)?;
        self.counters
            .compactions
            .fetch_add(ids.len() as u64, Ordering::Relaxed);
        self.counters
            .relocated_bytes
            .fetch_add(moved, Ordering::Relaxed);
        Ok(())
    }

    /// Whether a segment that existed while `seg` was written still exists: a delete record
    /// in `seg` may then still hide a record in it.
    fn may_hide(&self, seg: &crate::log::segment::Segment) -> bool {
        let horizon = seg.horizon.load(Ordering::Acquire);
        self.log
            .segs
            .load()
            .segs
            .values()
            .any(|s| s.id != seg.id && s.id < horizon)
    }

    /// Copy the records of sealed segment `id` that are still needed to the end of the log:
    /// the puts the index points at, and deletes that may still hide an older put of an id
    /// with no record. The bytes written; `None` when it stopped early (closing) or the
    /// segment is not sealed; an error when a record in it is damaged (it stays).
    pub(super) fn relocate_segment(&self, id: u32, rate: Option<u64>) -> Result<Option<u64>> {
        let Some(seg) = self.log.segs.load().get(id).cloned() else {
            return Ok(Some(0));
        };
        if !seg.sealed.load(Ordering::Acquire) {
            return Ok(None);
        }
        let has_older = self.may_hide(&seg);
        let end = seg.flushed();
        // (offset, id, is a put) of every record in it.
        let mut recs: Vec<(u64, u64, bool)> = Vec::new();
        let mut note = |off: u64, h: &format::Header, rec: &[u8]| {
            if let (T_PUT | T_DELETE, Some(i)) = (h.typ, id_of(h, rec)) {
                recs.push((off, i, h.typ == T_PUT));
            }
        };
        let mut seen = 0u32;
        let mut aborted = false;
        let scanned = scan::scan(
            &mut SegBytes {
                log: &self.log,
                seg: &seg,
            },
            seg.seed,
            SEG_HEADER_LEN as u64,
            end,
            |off, h, rec, _| {
                seen = seen.wrapping_add(1);
                if seen.is_multiple_of(256) {
                    if *self.log.stop.lock() {
                        aborted = true;
                        return Ok(false);
                    }
                    std::thread::yield_now();
                }
                match h.typ {
                    T_BATCH => {
                        for_each_sub(rec, h, |pos, sh, srec| {
                            note(off + pos as u64, sh, srec);
                            Ok(())
                        })?;
                    }
                    format::T_CLEAR if has_older => {
                        // Older segments still hold records this clear hides: not yet.
                        aborted = true;
                        return Ok(false);
                    }
                    _ => note(off, h, rec),
                }
                Ok(true)
            },
        )?;
        if aborted {
            return Ok(None);
        }
        if let Some(off) = scanned
            .damage
            .first()
            .map(|d| d.off)
            .or(scanned.tail.as_ref().map(|t| t.off))
        {
            self.damaged.lock().push(id);
            return Err(corrupt_at(
                id,
                off,
                "damaged record; the segment was not compacted",
            ));
        }
        let started = Instant::now();
        let mut moved = 0u64;
        let now = now_secs();
        for group in recs.chunks(RELOCATE_BATCH) {
            if *self.log.stop.lock() {
                return Ok(None);
            }
            let mut w = self.w.lock();
            for &(off, i, put) in group {
                let here = loc_of(id, off);
                let cur = self.index.get(i);
                if put && cur != here {
                    continue; // dead
                }
                if !put && (!has_older || cur != 0) {
                    continue; // hides nothing any more
                }
                let copied = self.with_place(here, true, &mut |h, rec| {
                    if put && is_expired(h.fields.expires, now) {
                        return Ok(None);
                    }
                    let mut hdr = Vec::with_capacity(32);
                    if put {
                        format::encode_put_header(
                            &mut hdr,
                            KEY_LEN,
                            h.len - h.value_off(),
                            &h.fields,
                        );
                    } else {
                        hdr.extend_from_slice(HeaderBuf::delete(KEY_LEN, h.fields.seq).as_slice());
                    }
                    let body = &rec[h.key_off..h.len];
                    let mut tail = self.log.tails[0].0.lock();
                    let (s, o) = self.log.append(&mut tail, &[&hdr, body], true)?;
                    let len = hdr.len() + body.len();
                    if put {
                        self.log.note_live(&mut tail, s, len as i64);
                        self.log.note_live(&mut tail, id, -(h.len as i64));
                    }
                    Ok(Some((loc_of(s, o), len)))
                })?;
                match copied {
                    Some(Some((place, len))) => {
                        if put {
                            self.index.set(i, place);
                        }
                        moved += len as u64;
                    }
                    Some(None) => {
                        // Expired: forget it; a delete keeps older puts hidden.
                        if has_older {
                            let old = self.index.get(i);
                            self.delete_locked(&mut w, i, old, None)?;
                        } else {
                            self.index.set(i, 0);
                            self.bounds_remove(&mut w, i);
                        }
                        self.counters
                            .expired_reclaimed
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    None => return Err(corrupt_at(id, off, "the segment left the table")),
                }
            }
            drop(w);
            if let Some(rate) = rate {
                let due = Duration::from_secs_f64(moved as f64 / rate as f64);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    std::thread::sleep(wait.min(Duration::from_millis(100)));
                }
            }
        }
        Ok(Some(moved))
    }

    /// Forget expired records (their space goes with compaction). A delete record is written
    /// for each, so that a replay does not bring one back to count (its put still reads as
    /// expired anyway).
    pub(super) fn sweep_expired(&self) -> Result<()> {
        if self.expiring.load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        let now = now_secs();
        let mut expired = Vec::new();
        let mut any_left = false;
        self.index.each_from(1, |id, place| {
            match self.with_place(place, false, &mut |h, _| Ok(h.fields.expires)) {
                Ok(Some(e)) if is_expired(e, now) => expired.push((id, place)),
                Ok(Some(e)) if e != 0 => any_left = true,
                _ => {}
            }
            true
        });
        for (id, place) in expired {
            let mut w = self.w.lock();
            if self.index.get(id) == place {
                self.delete_locked(&mut w, id, place, None)?;
                self.counters
                    .expired_reclaimed
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        if !any_left {
            self.expiring.store(0, Ordering::Relaxed);
        }
        self.log.after_write()
    }
}

impl FixedDb {
    /// Roll to a new segment and compact every older one (`optimize`).
    pub(super) fn rewrite_all(&self) -> Result<()> {
        let inner = &self.inner;
        {
            let _w = inner.w.lock();
            let mut tail = inner.log.tails[0].0.lock();
            if tail.seg.id != 0 {
                inner.log.roll(&mut tail)?;
            }
        }
        let ids: Vec<u32> = inner
            .log
            .segs
            .load()
            .segs
            .values()
            .filter(|s| s.sealed.load(Ordering::Acquire))
            .map(|s| s.id)
            .collect();
        let mut moved = 0;
        let mut done = Vec::new();
        for id in ids {
            match inner.relocate_segment(id, None)? {
                Some(m) => {
                    moved += m;
                    done.push(id);
                }
                None => break,
            }
        }
        inner.drop_compacted(&done, moved)?;
        inner.checkpoint()
    }

    /// `vanish`: every record forgotten, durably. A new segment starts with a clear record
    /// (recovery forgets everything of the lane before it), the index is emptied, a
    /// checkpoint written and the old segments removed.
    pub(super) fn vanish_all(&self) -> Result<()> {
        let inner = &self.inner;
        let _m = inner.maint.lock();
        {
            let mut w = inner.w.lock();
            {
                let mut tail = inner.log.tails[0].0.lock();
                if tail.seg.id != 0 {
                    inner.log.roll(&mut tail)?;
                    let mut c = Vec::new();
                    format::encode_clear(&mut c, open::random_u64(), 1);
                    inner.log.append(&mut tail, &[&c], true)?;
                }
            }
            inner.index.clear();
            inner.recount(&mut w);
            inner.expiring.store(0, Ordering::Relaxed);
            inner.log.sync_now()?;
        }
        let old: Vec<u32> = inner
            .log
            .segs
            .load()
            .segs
            .values()
            .filter(|s| s.sealed.load(Ordering::Acquire))
            .map(|s| s.id)
            .collect();
        inner.checkpoint()?;
        inner.drop_segments(&old)
    }

    /// `optimize`: `width=` and `limsiz=` (Tokyo Cabinet's `tcfdboptimize`) change what the
    /// database stores when every record fits (Tokyo Cabinet cut longer values and dropped
    /// ids past the new limit; Kura refuses); then every segment is compacted.
    pub(super) fn optimize_with(&self, params: &str) -> Result<()> {
        let inner = &self.inner;
        inner.log.check_writable()?;
        let p = Params::parse(params)?;
        p.allow_only("the fixed-length database (.kf)", PARAMS)?;
        for (k, _) in p.items() {
            if !matches!(k.as_str(), "width" | "limsiz") {
                return Err(Error::InvalidParam(format!(
                    "`{k}` cannot be changed by optimize: it tunes one open, not the database; \
                     give it when opening (`PATH.kf#{k}=…`)"
                )));
            }
        }
        let _m = inner.maint.lock();
        if !p.is_empty() {
            let width = p.size("width")?.unwrap_or(inner.width());
            let limsiz = p
                .size("limsiz")?
                .unwrap_or(inner.limsiz.load(Ordering::Relaxed));
            let (width, limsiz) = id::tune(width, limsiz)?;
            let limid = id::limid(width, limsiz);
            let w = inner.w.lock();
            if w.max > limid {
                return Err(Error::InvalidParam(format!(
                    "`limsiz={limsiz}`: with width {width} it allows ids up to {limid}, and id \
                     {} has a record (Tokyo Cabinet dropped such records; remove them first)",
                    w.max
                )));
            }
            if width < inner.width() {
                let mut longest = (0, 0u64);
                let mut failed = None;
                inner.index.each_from(1, |id, place| {
                    match inner.with_place(place, false, &mut |h, _| Ok(h.len - h.value_off())) {
                        Ok(Some(n)) if n > longest.0 => longest = (n, id),
                        Err(e) => {
                            failed = Some(e);
                            return false;
                        }
                        _ => {}
                    }
                    true
                });
                if let Some(e) = failed {
                    return Err(e);
                }
                if longest.0 as u64 > width {
                    return Err(Error::InvalidParam(format!(
                        "`width={width}`: id {} holds a value of {} bytes (Tokyo Cabinet cut \
                         such values short; shorten or remove it first)",
                        longest.1, longest.0
                    )));
                }
            }
            let s = stored::Stored { width, limsiz };
            crate::meta::write(&*inner.log.vfs, &inner.log.dir, &s.descriptor())?;
            inner.width.store(width, Ordering::Relaxed);
            inner.limsiz.store(limsiz, Ordering::Relaxed);
            inner.limid.store(limid, Ordering::Relaxed);
            *self.stored.lock() = Some(s);
            drop(w);
        }
        self.rewrite_all()
    }

    /// A consistent copy at `dest` while writers go on: the index and every lane's end taken
    /// at one instant, the segments copied up to those ends, a checkpoint written for the
    /// copy, its descriptor last (a copy cut short is never a database).
    pub(super) fn copy_all(&self, dest: &std::path::Path) -> Result<()> {
        let inner = &self.inner;
        inner.log.check_open()?;
        let _m = inner.maint.lock();
        if dest.exists() && std::fs::read_dir(dest).map(|mut d| d.next().is_some())? {
            return Err(Error::InvalidParam(format!(
                "{}: destination exists and is not empty",
                dest.display()
            )));
        }
        match std::fs::create_dir(dest) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e.into()),
            _ => {}
        }
        let stored = self.stored.lock().unwrap_or(stored::Stored {
            width: inner.width(),
            limsiz: inner.limsiz.load(Ordering::Relaxed),
        });
        let (mut head, entries) = inner.snapshot(false);
        let ends: Vec<(u32, u64)> = inner
            .log
            .tails
            .iter()
            .map(|t| {
                let mut t = t.0.lock();
                inner.log.flush(&mut t).map(|_| (t.seg.id, t.seg.flushed()))
            })
            .collect::<Result<_>>()?;
        let segs = inner.log.segs.load_full();
        let mut buf = Vec::new();
        for (id, seg) in segs.segs.iter() {
            let (end_seg, end_off) = ends.get(seg.lane).copied().unwrap_or((0, 0));
            if *id > end_seg {
                continue;
            }
            let len = if *id == end_seg {
                end_off
            } else {
                seg.flushed()
            };
            let out = OsVfs.open(&dest.join(seg_file_name(*id)), true)?;
            let mut at = 0u64;
            while at < len {
                let n = ((len - at) as usize).min(4 << 20);
                seg.read_file(at, &mut buf, n)?;
                out.write_at(&buf, at)?;
                at += n as u64;
            }
            out.sync()?;
        }
        // The copy's segments are exactly what was copied: no lengths to hold them to.
        head.places.segs.clear();
        let mut body = Vec::new();
        ckpt::encode(&head, &entries, &mut body);
        checkpoint::write_atomic(&OsVfs, dest, CKPT_NAME, CKPT_TMP, &[&body], || Ok(()))?;
        crate::meta::write(&OsVfs, dest, &stored.descriptor())
    }
}
