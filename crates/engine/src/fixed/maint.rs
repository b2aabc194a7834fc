//! Maintenance: checkpoints (the records written since the last one folded into their slots,
//! the log then cut), the background threads, the expiry sweep, `vanish`, `optimize` and
//! `copy_to`.

use super::rw::DEL;
use super::slots::{self, Slots};
use super::*;
use crate::io::{OsVfs, Vfs};
use crate::log::checkpoint::Places;
use crate::log::format;
use crate::log::segment::{seg_file_name, SegTable};
use crate::log::FLUSH_TICK;
use crate::store::{is_expired, now_secs};
use std::time::{Duration, Instant};

/// How many ids ahead a checkpoint fetches the record of (see `prefetch`).
const PREFETCH_AHEAD: u64 = 16;

/// Ask the processor to fetch the cache line at `s[at]` (nothing when out of range).
#[inline]
fn prefetch(s: &[u8], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(b) = s.get(at) {
        // SAFETY: SSE is part of every x86_64 processor; a prefetch is a hint that reads
        // nothing and cannot fault, and the address is of a byte of `s`.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                std::ptr::from_ref(b).cast(),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (s, at);
}

/// How often the maintenance thread looks for work.
const MAINT_TICK: Duration = Duration::from_millis(100);

impl FixedDb {
    pub(super) fn start_background(&self) -> Result<()> {
        type Run = fn(Arc<Inner>);
        let mut threads: Vec<(&str, Run)> = vec![
            ("kura-kf-bg", Inner::background),
            ("kura-kf-ckpt", Inner::maintainer),
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

    /// Checkpoints when enough was appended, and the expiry sweep.
    fn maintainer(self: Arc<Self>) {
        let mut last_sweep = Instant::now();
        let mut last_ckpt_look = Instant::now();
        while self.log.pause(MAINT_TICK) {
            if self.log.is_poisoned.load(Ordering::Acquire) {
                continue;
            }
            let Some(_m) = self.maint.try_lock() else {
                continue;
            };
            if last_ckpt_look.elapsed() >= Duration::from_secs(1) {
                last_ckpt_look = Instant::now();
                let ckptsiz = self.cfg.lock().ckptsiz;
                if self.appended_total() >= ckptsiz {
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

    /// The header of a checkpoint taken now (under the writer lock): the bounds, the seq,
    /// and the log's replay position and segments.
    fn head_now(&self, w: &W, reset: bool) -> slots::Head {
        for t in self.log.tails.iter() {
            self.log.mark(&mut t.0.lock());
        }
        slots::Head {
            salt: self.log.salt,
            gen: 0,
            seq: w.seq,
            width: self.width(),
            limsiz: self.limsiz.load(Ordering::Relaxed),
            count: w.count,
            min: w.min,
            max: w.max,
            places: Places {
                replay: self.log.lane_positions(reset),
                segs: self.log.seg_infos(),
            },
        }
    }

    /// Start a new segment and make the log durable: what a checkpoint cuts the log at. The
    /// ids of the older segments. Under the writer lock.
    fn roll_log(&self) -> Result<Vec<u32>> {
        let active = {
            let mut tail = self.log.tails[0].0.lock();
            if tail.seg.id != 0 {
                self.log.roll(&mut tail)?;
            }
            tail.seg.id
        };
        self.log.sync_now()?;
        Ok(self
            .log
            .segs
            .load()
            .segs
            .keys()
            .copied()
            .filter(|&id| id != active)
            .collect())
    }

    /// Fold every record written since the last checkpoint into its slot, then cut the log:
    /// recovery replays only what follows. Called with `maint` held; writers wait meanwhile.
    pub(super) fn checkpoint(&self) -> Result<()> {
        if self.log.readonly {
            return Ok(());
        }
        let w = self.w.lock();
        let res = self.checkpoint_locked(&w);
        drop(w);
        res.map_err(|e| match e {
            Error::Io(e) => self.log.poison(&e),
            e => e,
        })
    }

    fn checkpoint_locked(&self, w: &W) -> Result<()> {
        // What the pages are to hold is durable in the log first.
        self.log.sync_now()?;
        let slots = self.slots.load_full();
        let old = self.roll_log()?;
        let mut head = self.head_now(w, true);
        head.places.segs.retain(|s| !old.contains(&s.0));
        let vfs = &*self.log.vfs;
        if slots.is_void() {
            slots.clear(vfs, &self.log.dir, head.clone())?;
        }
        // Every record of the index, in id order, read from the log as the pages are built
        // (straight from a segment's map while the place is in it; writers wait, so nothing
        // is appended meanwhile).
        let segs = self.log.segs.load_full();
        let mut feed = |sink: slots::Sink<'_>| -> Result<()> {
            let mut res = Ok(());
            let mut cached: Option<(u32, Option<std::sync::Arc<crate::io::Map>>, u64)> = None;
            self.index.each_from(1, |id, place| {
                let (seg_id, off) = rw::split(place);
                if place != DEL && cached.as_ref().is_none_or(|c| c.0 != seg_id) {
                    cached = segs
                        .get(seg_id)
                        .map(|seg| (seg_id, seg.map.load_full(), seg.flushed()));
                }
                // Ids written out of order have their records scattered over the log: the
                // record of an id a little ahead is fetched while this one is copied.
                if let Some((s, Some(m), _)) = &cached {
                    let ahead = self.index.get(id + PREFETCH_AHEAD);
                    let (a_seg, a_off) = rw::split(ahead);
                    if ahead != DEL && a_seg == *s {
                        prefetch(m.as_slice(), a_off as usize);
                    }
                }
                let mapped =
                    cached
                        .as_ref()
                        .filter(|_| place != DEL)
                        .and_then(|(_, m, flushed)| {
                            let m = m.as_ref()?;
                            let s = m.as_slice();
                            let avail = s.get(off as usize..(*flushed as usize).min(s.len()))?;
                            let h = format::parse_header(
                                &avail[..avail.len().min(format::MAX_HEADER_LEN)],
                            )?;
                            let rec = avail.get(..h.len)?;
                            (h.typ == format::T_PUT && rw::id_of(&h, rec) == Some(id))
                                .then_some((h, rec))
                        });
                let r = if place == DEL {
                    sink(id, None)
                } else if let Some((h, rec)) = mapped {
                    sink(id, Some((&rec[h.value_off()..h.len], rw::meta_of(&h))))
                } else {
                    // Verified when appended or replayed.
                    let got = self.with_place(place, false, &mut |h, rec| {
                        sink(id, Some((&rec[h.value_off()..h.len], rw::meta_of(h))))
                    });
                    match got {
                        Ok(Some(())) => Ok(()),
                        Ok(None) => Err(Error::Corrupt(format!(
                            "id {id}: the index points into missing segment {}",
                            rw::split(place).0
                        ))),
                        Err(e) => Err(e),
                    }
                };
                res = r;
                res.is_ok()
            });
            res
        };
        slots.write(vfs, &self.log.dir, &mut feed, head)?;
        self.index.clear();
        self.drop_segments(&old)?;
        // The format before the slot file kept the id array here.
        if vfs.exists(&self.log.dir.join(CKPT_NAME)) {
            let _ = vfs.remove(&self.log.dir.join(CKPT_NAME));
            vfs.sync_dir(&self.log.dir)?;
        }
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

    /// Forget expired records (a delete record is written for each; their slots are emptied
    /// at the next checkpoint).
    pub(super) fn sweep_expired(&self) -> Result<()> {
        if self.expiring.load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        let now = now_secs();
        let mut candidates = Vec::new();
        self.index.each_from(1, |id, place| {
            if place != DEL {
                candidates.push(id);
            }
            true
        });
        for (id, _, e) in self.slots.load().side_entries() {
            if e != 0 && self.index.get(id) == 0 {
                candidates.push(id);
            }
        }
        let mut any_left = false;
        for id in candidates {
            let mut w = self.w.lock();
            match self.with_rec(id, &mut |_, m| Ok(m.expires)) {
                Ok(Some(e)) if is_expired(e, now) => {
                    self.delete_locked(&mut w, id)?;
                    self.counters
                        .expired_reclaimed
                        .fetch_add(1, Ordering::Relaxed);
                }
                Ok(Some(e)) if e != 0 => any_left = true,
                _ => {}
            }
        }
        if !any_left {
            self.expiring.store(0, Ordering::Relaxed);
        }
        self.log.after_write()
    }
}

impl FixedDb {
    /// `vanish`: every record forgotten, durably. A new segment starts with a clear record
    /// (recovery forgets the pages and everything of the log before it), then a checkpoint
    /// empties the slot file and removes the old segments.
    pub(super) fn vanish_all(&self) -> Result<()> {
        let inner = &self.inner;
        let _m = inner.maint.lock();
        let mut w = inner.w.lock();
        {
            let mut tail = inner.log.tails[0].0.lock();
            if tail.seg.id != 0 {
                inner.log.roll(&mut tail)?;
            }
            let mut c = Vec::new();
            format::encode_clear(&mut c, open::random_u64(), 1);
            inner.log.append(&mut tail, &[&c], true)?;
        }
        inner.log.sync_now()?;
        inner.slots.load().set_void();
        inner.index.clear();
        inner.recount(&mut w);
        inner.expiring.store(0, Ordering::Relaxed);
        let res = inner.checkpoint_locked(&w);
        res.map_err(|e| match e {
            Error::Io(e) => inner.log.poison(&e),
            e => e,
        })
    }

    /// `optimize`: `width=` and `limsiz=` (Tokyo Cabinet's `tcfdboptimize`) change what the
    /// database stores when every record fits (Tokyo Cabinet cut longer values and dropped
    /// ids past the new limit; Kura refuses): the slot file is rewritten for the new width.
    /// Without them, a checkpoint.
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
            let mut w = w;
            inner.checkpoint_locked(&w)?;
            if width < inner.width() {
                let mut longest = (0, 0u64);
                let mut at = 1;
                while let Some(id) = inner.next_live(at, w.max) {
                    let n = inner.with_rec(id, &mut |v, _| Ok(v.len()))?.unwrap_or(0);
                    if n > longest.0 {
                        longest = (n, id);
                    }
                    at = id + 1;
                }
                if longest.0 as u64 > width {
                    return Err(Error::InvalidParam(format!(
                        "`width={width}`: id {} holds a value of {} bytes (Tokyo Cabinet cut \
                         such values short; shorten or remove it first)",
                        longest.1, longest.0
                    )));
                }
            }
            let vfs = &*inner.log.vfs;
            let mut head = inner.head_now(&w, true);
            head.width = width;
            head.limsiz = limsiz;
            let old = inner.slots.load_full();
            Slots::rebuild(vfs, &inner.log.dir, head, &old, w.max)?;
            let opened = Slots::open(vfs, &inner.log.dir, false, None)?;
            inner.slots.store(Arc::new(opened.slots));
            let s = stored::Stored { width, limsiz };
            crate::meta::write(vfs, &inner.log.dir, &s.descriptor())?;
            inner.width.store(width, Ordering::Relaxed);
            inner.limsiz.store(limsiz, Ordering::Relaxed);
            inner.limid.store(limid, Ordering::Relaxed);
            *self.stored.lock() = Some(s);
            inner.recount(&mut w);
            return Ok(());
        }
        inner.checkpoint()
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
        if !inner.log.readonly {
            inner.checkpoint()?;
        }
        // No checkpoint writes the slot file while `maint` is held: its files as they are,
        // then the log up to its end now.
        let mut buf = Vec::new();
        for name in [slots::DATA_NAME, slots::SIDE_NAME, slots::DW_NAME] {
            let Ok(f) = inner.log.vfs.open(&inner.log.dir.join(name), false) else {
                continue;
            };
            let len = f.len()?;
            let out = OsVfs.open(&dest.join(name), true)?;
            let mut at = 0u64;
            while at < len {
                let n = ((len - at) as usize).min(4 << 20);
                buf.resize(n, 0);
                f.read_at(&mut buf, at)?;
                out.write_at(&buf, at)?;
                at += n as u64;
            }
            out.sync()?;
        }
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
        OsVfs.sync_dir(dest)?;
        crate::meta::write(&OsVfs, dest, &stored.descriptor())
    }
}
