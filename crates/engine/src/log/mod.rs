//! The durable log every on-disk kind writes through: segment files of checksummed records in
//! lanes (independent logs, one per writing thread), their write buffers, group commit and the
//! sync modes, and reading records back with damage told from a torn tail.
//!
//! - `format`: the segment header and the record layout (put, delete, batch, clear, marker);
//! - `segment`: a segment file (its map, its length written, its live bytes) and the table of
//!   segments readers use without a lock;
//! - `tail`: one lane's end: its active segment and buffer;
//! - `scan`: reading a range of a segment's records back, resynchronising after a failure;
//! - `recovery`: finding the segments, and telling damage from a torn tail.
//!
//! A kind drives the log: it appends records (`append`, under the lane's lock, which it holds
//! while it points its index at them), flushes and waits for durability (`after_write`,
//! `group_commit`), reads records back (`read_range`), notes bytes that died (`note_live`),
//! and at a checkpoint reads every lane's position (`lane_positions`). The kind owns what the
//! records mean: the hash its index, its checkpoints, its compaction policy and its recovery.

mod background;
pub(crate) mod checkpoint;
pub mod format;
pub(crate) mod recovery;
pub(crate) mod replay;
pub(crate) mod scan;
pub mod segment;
pub(crate) mod tail;

use self::format::{Header, T_DELETE, T_PUT};
use self::segment::{corrupt_at, seg_file_name, Retired, SegTable, Segment};
use self::tail::{Fill, Lane, Tail, FILL_LOW, FILL_STEP, NO_FILL};
use crate::config::SyncMode;
use crate::error::{Error, Result};
use crate::io::Vfs;
use arc_swap::ArcSwap;
use parking_lot::{Condvar, Mutex};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the log hands lane buffers to the OS (and the filler looks for work).
pub(crate) const FLUSH_TICK: Duration = Duration::from_millis(50);

/// Counters of the log (shown by `Store::counters`).
#[derive(Default)]
pub(crate) struct LogCounters {
    pub(crate) truncated_bytes: AtomicU64,
    pub(crate) syncs: AtomicU64,
}

/// How a log is tuned (fixed for one open).
pub(crate) struct LogConfig {
    pub(crate) sync: SyncMode,
    pub(crate) segsiz: u64,
    pub(crate) bufsiz: usize,
    pub(crate) msiz: u64,
    pub(crate) lanes: usize,
}

/// A file that is never read or written (a lane's placeholder before its first segment).
struct NullFile;

impl crate::io::VFile for NullFile {
    fn read_at(&self, _buf: &mut [u8], _off: u64) -> std::io::Result<()> {
        Err(std::io::Error::other("no segment"))
    }
    fn write_at(&self, _buf: &[u8], _off: u64) -> std::io::Result<()> {
        Err(std::io::Error::other("no segment"))
    }
    fn sync(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn len(&self) -> std::io::Result<u64> {
        Ok(0)
    }
    fn set_len(&self, _len: u64) -> std::io::Result<()> {
        Err(std::io::Error::other("no segment"))
    }
}

/// The log of one database.
pub(crate) struct Log {
    pub(crate) dir: PathBuf,
    pub(crate) vfs: Arc<dyn Vfs>,
    pub(crate) readonly: bool,
    /// Copies of hot configuration (read on every write without taking `cfg`).
    pub(crate) sync: SyncMode,
    pub(crate) segsiz: AtomicU64,
    pub(crate) bufsiz: AtomicU64,
    /// Seeds every record checksum (the same for every segment of a database).
    pub(crate) salt: u64,
    /// The segment table. Replaced only through `set_segs`, which keeps `segs_raw` pointing
    /// at the same table for `segs_locked`.
    pub(crate) segs: ArcSwap<SegTable>,
    pub(crate) segs_raw: std::sync::atomic::AtomicPtr<SegTable>,
    pub(crate) segs_update: Mutex<()>,
    /// Segment tables and maps replaced while a reader inside a shard may still be
    /// looking at them through a plain pointer (`segs_locked`, `Published::peek`); freed by
    /// `reclaim`.
    pub(crate) retired: Retired,
    pub(crate) lanes: usize,
    pub(crate) tails: Box<[Lane]>,
    pub(crate) next_seg: AtomicU32,
    pub(crate) poisoned: Mutex<Option<String>>,
    pub(crate) is_poisoned: AtomicBool,
    pub(crate) closed: AtomicBool,
    /// Group commit (`group_commit`); its counters are the log's `commit_waits`.
    pub(crate) commit: crate::durability::GroupCommit,
    /// Held for the whole of `sync_now`.
    pub(crate) sync_one: Mutex<()>,
    /// A segment was created since the directory was last synced.
    pub(crate) dir_dirty: AtomicBool,
    pub(crate) stop: Mutex<bool>,
    pub(crate) stop_cv: Condvar,
    /// Per lane, the fill lock and the last fill's result (`fill_lane`).
    pub(crate) fills: Box<[Mutex<Fill>]>,
    /// Wakes the filler thread (`sync=always` only); `fill_wake` keeps a wake-up that came
    /// while it was busy.
    pub(crate) fill_cv: Condvar,
    pub(crate) fill_wake: AtomicBool,
    /// A fill failed: no more are tried.
    pub(crate) fill_failed: AtomicBool,
    /// Bytes of the maps kept resident (`msiz`).
    pub(crate) msiz: u64,
    pub(crate) counters: LogCounters,
}

impl Log {
    /// The log of the database in `dir` whose segments on disk are `table` (their headers
    /// read; recovery then scans them and gives each lane its active segment).
    pub(crate) fn new(
        dir: &std::path::Path,
        vfs: Arc<dyn Vfs>,
        readonly: bool,
        cfg: LogConfig,
        salt: u64,
        table: SegTable,
    ) -> Log {
        let lanes = cfg.lanes;
        // Placeholder tails until recovery knows each lane's active segment.
        let tails: Box<[Lane]> = (0..lanes)
            .map(|lane| {
                Lane(
                    Mutex::new(Tail::new(Arc::new(Segment::new(
                        0,
                        lane,
                        salt,
                        dir.join("none"),
                        Arc::new(NullFile),
                        format::SEG_HEADER_LEN as u64,
                    )))),
                    AtomicBool::new(false),
                )
            })
            .collect();
        let next_seg = table.segs.keys().next_back().map_or(1, |&id| id + 1);
        let table = Arc::new(table);
        Log {
            dir: dir.to_path_buf(),
            vfs,
            readonly,
            sync: cfg.sync,
            segsiz: AtomicU64::new(cfg.segsiz),
            bufsiz: AtomicU64::new(cfg.bufsiz as u64),
            salt,
            segs_raw: std::sync::atomic::AtomicPtr::new(Arc::as_ptr(&table) as *mut SegTable),
            segs: ArcSwap::new(table),
            segs_update: Mutex::new(()),
            retired: Retired::default(),
            lanes,
            tails,
            next_seg: AtomicU32::new(next_seg),
            poisoned: Mutex::new(None),
            is_poisoned: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            commit: crate::durability::GroupCommit::new(),
            sync_one: Mutex::new(()),
            dir_dirty: AtomicBool::new(false),
            stop: Mutex::new(false),
            stop_cv: Condvar::new(),
            fills: (0..lanes).map(|_| Mutex::new(Fill::default())).collect(),
            fill_cv: Condvar::new(),
            fill_wake: AtomicBool::new(false),
            fill_failed: AtomicBool::new(false),
            msiz: cfg.msiz,
            counters: LogCounters::default(),
        }
    }

    pub(crate) fn check_writable(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if self.readonly {
            return Err(Error::Unsupported("writing to a database opened read-only"));
        }
        if self.is_poisoned.load(Ordering::Acquire) {
            let msg = self.poisoned.lock().clone().unwrap_or_default();
            return Err(Error::Poisoned(msg));
        }
        Ok(())
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    pub(crate) fn poison(&self, e: &std::io::Error) -> Error {
        let msg = e.to_string();
        self.poisoned.lock().get_or_insert(msg);
        self.is_poisoned.store(true, Ordering::Release);
        Error::Io(std::io::Error::new(e.kind(), e.to_string()))
    }

    /// Add the lane's pending live-byte changes to the segments' counters.
    pub(crate) fn flush_live(&self, tail: &mut Tail) {
        if tail.nlive == 0 {
            return;
        }
        let segs = self.segs.load();
        for &(id, delta) in &tail.live[..tail.nlive] {
            if let Some(s) = segs.get(id) {
                s.add_live(delta);
            }
        }
        tail.nlive = 0;
    }

    /// Note a live-byte change in the lane (see `Tail::live`).
    #[inline]
    pub(crate) fn note_live(&self, tail: &mut Tail, seg: u32, delta: i64) {
        if !tail.note_live(seg, delta) {
            self.flush_live(tail);
            tail.note_live(seg, delta);
        }
    }

    /// Hand every lane's buffer to the OS (a read-only open has none): every record the index
    /// points at is then in its file.
    pub(crate) fn flush_all(&self) -> Result<()> {
        if !self.readonly {
            for t in self.tails.iter() {
                self.flush(&mut t.0.lock())?;
            }
        }
        Ok(())
    }

    /// Hand the buffer to the OS (and the pending live-byte changes to the counters). Called
    /// with the tail lock held.
    pub(crate) fn flush(&self, tail: &mut Tail) -> Result<()> {
        self.flush_live(tail);
        if tail.buf.is_empty() {
            return Ok(());
        }
        let at = tail.seg.flushed();
        self.reserve(tail, at + tail.buf.len() as u64);
        if let Err(e) = tail.seg.file.write_at(&tail.buf, at) {
            return Err(self.poison(&e));
        }
        tail.seg
            .flushed
            .store(at + tail.buf.len() as u64, Ordering::Release);
        tail.seg.dirty.store(true, Ordering::Release);
        tail.buf.clear();
        Ok(())
    }

    /// Before records up to `end` are written to the active segment: wait for a fill under way
    /// that they would reach, and with `sync=always` wake the filler when they come near the
    /// end of the zeros. Called with the tail lock held.
    #[inline]
    pub(crate) fn reserve(&self, tail: &mut Tail, end: u64) {
        if end > tail.fill_from {
            self.settle_fill(tail);
        }
        if self.sync == SyncMode::Always && end + FILL_LOW > tail.alloc && !tail.fill_asked {
            tail.fill_asked = true;
            self.fill_wake.store(true, Ordering::Release);
            self.fill_cv.notify_one();
        }
    }

    /// Wait for the lane's fill under way (if any) and take its result. Called with the tail
    /// lock held (the filler takes the fill lock only while holding the tail lock, or after
    /// dropping it: the order is tail, then fill).
    pub(crate) fn settle_fill(&self, tail: &mut Tail) {
        if tail.fill_from == NO_FILL {
            return;
        }
        let done = self.fills[tail.seg.lane].lock();
        tail.apply_fill(&done);
    }

    /// With `sync=always`, write zeros ahead of the lane's records when they come within
    /// `FILL_LOW` of the end of the last zeros (see `VFile::zero_fill`). Runs on the filler
    /// thread; the lane's writers go on meanwhile, below the zeros being written.
    pub(crate) fn fill_lane(&self, lane: usize) {
        let lane_lock = &self.tails[lane].0;
        let (seg, from, to, mut done) = {
            let mut tail = lane_lock.lock();
            if !std::mem::take(&mut tail.fill_asked) {
                return; // a lane nobody writes needs no zeros
            }
            let end = tail.end();
            let segsiz = self.segsiz.load(Ordering::Relaxed);
            if tail.seg.id == 0 || tail.fill_from != NO_FILL || end + FILL_LOW <= tail.alloc {
                return;
            }
            // Whole pages past the records, up to the segment size. A lane that outran its
            // zeros (a new segment, a burst) gets a gap to write into meanwhile and a shorter
            // fill, done sooner.
            let (gap, step) = if end > tail.alloc {
                ((FILL_LOW / 4).min(segsiz / 8), FILL_STEP / 4)
            } else {
                (0, FILL_STEP)
            };
            let from = tail.alloc.max(end + gap).next_multiple_of(4096);
            let to = (from + step).min(segsiz.next_multiple_of(4096));
            if from >= to {
                return;
            }
            tail.fill_from = from;
            // Taken before the tail lock is dropped, so a writer that must settle the fill
            // waits for it rather than finding the previous result.
            let done = self.fills[lane].lock();
            (tail.seg.clone(), from, to, done)
        };
        let ok = seg.file.zero_fill(from, to - from).is_ok();
        if !ok {
            // Out of space, say: records are written as before, without zeros ahead. (The
            // zeros written so far are cut off with the rest at the segment's seal.)
            self.fill_failed.store(true, Ordering::Relaxed);
        }
        *done = Fill {
            seg: seg.id,
            from,
            to: if ok { to } else { 0 },
        };
        let result = *done;
        drop(done);
        lane_lock.lock().apply_fill(&result);
    }

    /// Cut the active segment's file back to its records (the zeros written ahead of them).
    /// Called with the tail lock held, before the segment is sealed or the database closed.
    /// The next sync makes the cut durable, and every checkpoint syncs first, so a segment that
    /// recovery does not scan never ends in zeros; one that it scans may (a crash before that
    /// sync), and the scan stops there.
    pub(crate) fn trim_tail(&self, tail: &mut Tail) -> Result<()> {
        self.flush(tail)?;
        self.settle_fill(tail);
        let end = tail.seg.flushed();
        if tail.alloc > end || tail.seg.file.len().map_err(|e| self.poison(&e))? > end {
            tail.seg.file.set_len(end).map_err(|e| self.poison(&e))?;
            tail.seg.dirty.store(true, Ordering::Release);
            tail.alloc = end;
        }
        Ok(())
    }

    /// Start a new segment after the active one. Called with the tail lock held.
    ///
    /// The sealed segment ends with a marker, an empty one too (of the format with
    /// synced-length slots): recovery takes a segment that is not its lane's last and does
    /// not end with one for a segment whose end was lost, and ends the lane there
    /// (`replay::lane_ends`).
    pub(crate) fn roll(&self, tail: &mut Tail) -> Result<()> {
        self.mark(tail);
        if !tail.marked && tail.seg.id != 0 && tail.seg.slots {
            tail.buf.extend_from_slice(&format::marker(tail.seg.seed));
            tail.marked = true;
        }
        self.trim_tail(tail)?;
        let id = self.next_seg.fetch_add(1, Ordering::Relaxed);
        let seg = self.create_segment(id, tail.seg.lane)?;
        tail.seg
            .horizon
            .store(self.next_seg.load(Ordering::Relaxed), Ordering::Release);
        tail.seg.sealed.store(true, Ordering::Release);
        tail.set_seg(seg);
        self.trim_maps();
        Ok(())
    }

    /// End the lane's log with a marker, unless it already ends with one or holds nothing: a
    /// record that verifies after the last real one, so that damage to that record is told
    /// from a torn tail (`scan`). Written when a segment is sealed, before a checkpoint reads
    /// the lanes' positions and at close. Called with the tail lock held.
    pub(crate) fn mark(&self, tail: &mut Tail) {
        if tail.marked || tail.seg.id == 0 || tail.end() <= tail.seg.data {
            return;
        }
        tail.buf.extend_from_slice(&format::marker(tail.seg.seed));
        tail.marked = true;
    }

    pub(crate) fn create_segment(&self, id: u32, lane: usize) -> Result<Arc<Segment>> {
        let path = self.dir.join(seg_file_name(id));
        let file = self.vfs.open(&path, true).map_err(|e| self.poison(&e))?;
        file.set_len(0).map_err(|e| self.poison(&e))?;
        let info = format::SegInfo {
            id,
            salt: self.salt,
            lane: lane as u16,
            lanes: self.lanes as u16,
        };
        // Synced before any record is written: a write-back out of file order could otherwise
        // leave records under a header that never reached the disk (the file's name can become
        // durable with any later directory sync), which recovery cannot tell from damage.
        file.write_at(&format::seg_header(&info), 0)
            .and_then(|()| file.sync())
            .map_err(|e| self.poison(&e))?;
        let seg = Segment::new(
            id,
            lane,
            self.salt,
            path.clone(),
            file,
            format::SEG_DATA as u64,
        );
        debug_assert_eq!(seg.data, format::SEG_DATA as u64);
        seg.dirty.store(true, Ordering::Release);
        let segsiz = self.segsiz.load(Ordering::Relaxed);
        if let Some(m) = self.vfs.map(&path, segsiz as usize) {
            seg.map.store(Some(Arc::new(m)), &self.retired);
        }
        let seg = Arc::new(seg);
        self.set_segs(|t| {
            let mut t = SegTable::clone(t);
            t.segs.insert(id, seg.clone());
            t
        });
        // Its name becomes durable with the next sync, before any of its records can be
        // reported durable (an fsync of the directory here, under the shard and lane locks,
        // was most of a roll's time, and up to 11 ms).
        self.dir_dirty.store(true, Ordering::Release);
        Ok(seg)
    }

    /// Keep the memory-mapped part of the segments near `msiz` bytes (newest first): older
    /// sealed segments are unmapped (read with positioned reads), and when the active segments
    /// alone exceed it, the pages touched through their maps are released from the resident
    /// set (they stay in the OS page cache). Called at every roll and every second.
    pub(crate) fn trim_maps(&self) {
        let msiz = self.msiz;
        let mut mapped = 0u64;
        let mut active = Vec::new();
        for seg in self.segs.load().segs.values().rev() {
            let Some(m) = seg.map.load_full() else {
                continue;
            };
            mapped += seg.flushed();
            if !seg.sealed.load(Ordering::Acquire) {
                active.push(m);
            } else if mapped > msiz {
                seg.map.store(None, &self.retired);
            }
        }
        if mapped > msiz {
            for m in active {
                m.release();
            }
        }
    }

    /// Roll the lane to a new segment unless a record of `len` bytes fits in the active one (a
    /// record larger than a segment gets a fresh segment of its own). An active segment of a
    /// format without synced-length slots (a database written by an older build) is sealed at
    /// its first write, so that what is written from then on has them.
    pub(crate) fn ensure_room(&self, tail: &mut Tail, len: usize) -> Result<()> {
        let segsiz = self.segsiz.load(Ordering::Relaxed);
        if tail.seg.id == 0
            || !tail.seg.slots
            || (tail.end() + len as u64 > segsiz && tail.end() > tail.seg.data)
        {
            self.roll(tail)?;
        }
        Ok(())
    }

    /// Append one record made of `parts` (already sealed, or sealed here when `seal`).
    /// Returns its location. Called with the tail lock held.
    pub(crate) fn append(
        &self,
        tail: &mut Tail,
        parts: &[&[u8]],
        seal: bool,
    ) -> Result<(u32, u64)> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let bufsiz = self.bufsiz.load(Ordering::Relaxed) as usize;
        self.ensure_room(tail, len)?;
        let off = tail.end();
        if off + len as u64 > u32::MAX as u64 {
            return Err(Error::TooLarge(format!("record of {len} bytes")));
        }
        let seed = tail.seg.seed;
        if len >= bufsiz {
            // Large record: straight to the file.
            self.flush(tail)?;
            let mut crc = crc32c::crc32c_append(seed, &parts[0][4..]);
            for p in &parts[1..] {
                crc = crc32c::crc32c_append(crc, p);
            }
            let mut first = parts[0].to_vec();
            if seal {
                first[0..4].copy_from_slice(&crc.to_le_bytes());
            }
            self.reserve(tail, off + len as u64);
            let mut at = off;
            for p in std::iter::once(first.as_slice()).chain(parts[1..].iter().copied()) {
                tail.seg.file.write_at(p, at).map_err(|e| self.poison(&e))?;
                at += p.len() as u64;
            }
            tail.seg.flushed.store(at, Ordering::Release);
            tail.seg.dirty.store(true, Ordering::Release);
        } else {
            let start = tail.buf.len();
            for p in parts {
                tail.buf.extend_from_slice(p);
            }
            if seal {
                format::seal(&mut tail.buf[start..], seed);
            }
            // Writers flush a full buffer once they have left the shard lock (`Lane`,
            // `note_full`); this bounds the buffer when nobody does.
            if tail.buf.len() >= 2 * bufsiz {
                self.flush(tail)?;
            }
        }
        tail.appended += len as u64;
        tail.marked = false;
        Ok((tail.seg.id, off))
    }

    /// A large put written with `Acct::Large` to lane `lane`, its record at (`seg`, `off`),
    /// has pointed the index at it (or found that a later write of its key came first): the
    /// segment may be compacted again, and checkpoints need not replay the record.
    pub(crate) fn large_put_done(&self, lane: usize, seg: u32, off: u64) {
        let mut tail = self.tails[lane].0.lock();
        if let Some(i) = tail.large.iter().position(|&p| p == (seg, off)) {
            tail.large.swap_remove(i);
        }
    }

    /// Whether a large put's record in `seg` is not in the index yet (`Tail::large` of the
    /// segment's lane). Compaction would take it for dead. A sealed segment gets no new
    /// records, so once this is false it stays false, and every such record is indexed (the
    /// lane lock orders the check after `large_put_done`, which follows the slot).
    pub(crate) fn large_pending(&self, seg: &Segment) -> bool {
        self.tails[seg.lane]
            .0
            .lock()
            .large
            .iter()
            .any(|p| p.0 == seg.id)
    }

    pub(crate) fn add_live(&self, seg: u32, delta: i64) {
        if let Some(s) = self.segs.load().get(seg) {
            s.add_live(delta);
        }
    }

    /// Raise the lane's flag when its buffer is full (see `Lane`). Called by the writes that
    /// end with `after_write`, which flushes it.
    #[inline]
    pub(crate) fn note_full(&self, lane: usize, tail: &Tail) {
        if tail.buf.len() >= self.bufsiz.load(Ordering::Relaxed) as usize {
            self.tails[lane].1.store(true, Ordering::Relaxed);
        }
    }

    /// After a write, once the shard lock is released: flush this thread's lane if its buffer
    /// is full, and with `sync=always` wait until the write is durable.
    pub(crate) fn after_write(&self) -> Result<()> {
        if self.sync != SyncMode::Always {
            let lane = &self.tails[self.my_lane()];
            if lane.1.load(Ordering::Relaxed) {
                lane.1.store(false, Ordering::Relaxed);
                let mut tail = lane.0.lock();
                if tail.buf.len() >= self.bufsiz.load(Ordering::Relaxed) as usize {
                    self.flush(&mut tail)?;
                }
            }
            return Ok(());
        }
        if crate::durability::deferred() {
            crate::durability::note_pending();
            return Ok(());
        }
        self.group_commit()
    }

    /// Wait until everything appended before this call is durable, sharing each fdatasync with
    /// every writer waiting when it starts (`durability::GroupCommit`). The sync flushes every
    /// lane before its fdatasync, so it covers every write appended before it starts. A failed
    /// sync poisons the log first, so the writers of its group and every later one fail.
    pub(crate) fn group_commit(&self) -> Result<()> {
        self.commit.commit(|| self.sync_now())
    }

    /// Flush the buffer and fdatasync every segment written since its last sync.
    ///
    /// Syncs run one at a time: a sync that found a segment clean because another had just
    /// taken its dirty flag must not return before that other one's fdatasync has finished
    /// (a checkpoint's sync could otherwise let a group commit acknowledge writes early).
    /// The directory is synced after the segments, so the name of every segment whose records
    /// this sync made durable is durable too.
    pub(crate) fn sync_now(&self) -> Result<()> {
        let _one = self.sync_one.lock();
        for t in self.tails.iter() {
            let mut tail = t.0.lock();
            self.flush(&mut tail)?;
        }
        let segs = self.segs.load();
        for seg in segs.segs.values() {
            if seg.dirty.swap(false, Ordering::AcqRel) {
                // Every byte below this was handed to the OS before the flag was taken.
                let upto = seg.flushed();
                if let Err(e) = seg.file.sync() {
                    seg.dirty.store(true, Ordering::Release);
                    return Err(self.poison(&e));
                }
                // The synced length into the header, durable with the next sync. A sealed
                // segment gets no other: its final length is made durable by the next sync
                // (once), so that a sealed segment never ends in a stretch that recovery
                // would take for a torn tail.
                match seg.mark_synced(upto) {
                    Ok(true) if seg.sealed.load(Ordering::Acquire) => {
                        seg.dirty.store(true, Ordering::Release);
                    }
                    Ok(_) => {}
                    Err(e) => return Err(self.poison(&e)),
                }
            }
        }
        if self.dir_dirty.swap(false, Ordering::AcqRel) {
            if let Err(e) = self.vfs.sync_dir(&self.dir) {
                self.dir_dirty.store(true, Ordering::Release);
                return Err(self.poison(&e));
            }
        }
        self.counters.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The lane this thread writes to: threads are spread over the lanes, so writers on
    /// different threads share no log buffer and no lock. Under `sync=always` every thread
    /// writes to lane 0 instead: each group commit then fdatasyncs one file, not one per
    /// writing thread, and on a journaling file system each fdatasync costs a journal commit
    /// of its own (two files take twice as long as one); the writers wait for the disk
    /// anyway, so sharing the lane's lock costs nothing. Records of one key may sit in
    /// several lanes (ordered by seq), so where a thread writes can change at any open.
    #[inline]
    pub(crate) fn my_lane(&self) -> usize {
        if self.sync == SyncMode::Always {
            return 0;
        }
        crate::counter::thread_number() % self.lanes
    }

    /// The ids of every lane's active segment.
    pub(crate) fn active_ids(&self) -> Vec<u32> {
        self.tails.iter().map(|t| t.0.lock().seg.id).collect()
    }

    /// Read `len` bytes of a segment at `off`, wherever they are (file or write buffer).
    pub(crate) fn read_range(
        &self,
        seg: &Segment,
        off: u64,
        len: usize,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let end = off + len as u64;
        if end <= seg.flushed() {
            return seg.read_file(off, out, len);
        }
        let tail = self.tails[seg.lane].0.lock();
        let flushed = tail.seg.flushed();
        if tail.seg.id == seg.id && end > flushed {
            if off < flushed {
                // Straddles file and buffer: read the file part after releasing nothing — the
                // buffer cannot be flushed while we hold the tail lock.
                seg.read_file(off, out, (flushed - off) as usize)?;
            } else {
                out.clear();
            }
            let from = off.max(flushed) - flushed;
            let b = tail
                .buf
                .get(from as usize..(end - flushed) as usize)
                .ok_or_else(|| corrupt_at(seg.id, off, "read past the end of the log"))?;
            out.extend_from_slice(b);
            return Ok(());
        }
        drop(tail);
        seg.read_file(off, out, len)
    }

    /// The segment table, by a plain pointer load (no `ArcSwap` guard: this is on every read).
    ///
    /// # Safety
    /// The caller is inside a shard while it uses the table (its lock held, or counted in
    /// while it is fast: `Brl`), or no other thread can be reclaiming (see `Published::peek`
    /// and `reclaim`).
    #[inline]
    pub(crate) unsafe fn segs_locked(&self) -> &SegTable {
        // SAFETY: `segs_raw` always points at the table `segs` holds or at a replaced one in
        // `retired`, which `reclaim` frees only after holding every shard exclusively once.
        unsafe { &*self.segs_raw.load(Ordering::Acquire) }
    }

    /// Replace the segment table with `f` of it (serialised; the old one is retired).
    pub(crate) fn set_segs(&self, f: impl FnOnce(&SegTable) -> SegTable) {
        let _g = self.segs_update.lock();
        let old = self.segs.load_full();
        let new = Arc::new(f(&old));
        self.segs_raw
            .store(Arc::as_ptr(&new) as *mut SegTable, Ordering::Release);
        self.segs.store(new);
        self.retired.push(Box::new(old));
    }

    /// Remove segments from the table and their files from the directory (then synced). A
    /// reader still holding one keeps reading it until it lets go. What was retired is the
    /// caller's to free (`retired`), once no reader can be peeking at it.
    pub(crate) fn remove_segments(&self, ids: &[u32]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        self.set_segs(|t| {
            let mut t = SegTable::clone(t);
            for id in ids {
                t.segs.remove(id);
            }
            t
        });
        for &id in ids {
            let _ = self.vfs.remove(&self.dir.join(seg_file_name(id)));
        }
        self.vfs.sync_dir(&self.dir).map_err(|e| self.poison(&e))
    }

    pub(crate) fn data_size(&self) -> u64 {
        let tail_extra: u64 = self.tails.iter().map(|t| t.0.lock().buf.len() as u64).sum();
        self.segs
            .load()
            .segs
            .values()
            .map(|s| s.flushed())
            .sum::<u64>()
            + tail_extra
    }

    /// Ask the OS to start writing back what the lanes handed it since the last tick, without
    /// waiting (`VFile::start_writeback`): the next sync (an interval's, a checkpoint's,
    /// close's) then finds little left to write, instead of everything since the last one.
    /// Done here, not by the writers: the request builds and queues the I/O in the calling
    /// thread, which takes a fraction of a millisecond for a MiB.
    pub(crate) fn start_writebacks(&self) {
        if self.sync == SyncMode::Always {
            return; // every write is synced anyway
        }
        let segs = self.segs.load();
        for seg in segs.segs.values() {
            if !seg.dirty.load(Ordering::Acquire) {
                continue;
            }
            let end = seg.flushed();
            let from = seg.written_back.load(Ordering::Relaxed);
            if end > from {
                seg.file.start_writeback(from, end - from);
                seg.written_back.store(end, Ordering::Relaxed);
            }
        }
    }

    /// Where every lane's log ends, read at one instant (all tails locked together): a batch
    /// holds the tails of all its lanes while it writes its parts, so none straddles these
    /// positions. Every record before them is reflected in a shard snapshot taken afterwards.
    pub(crate) fn lane_positions(&self, reset_appended: bool) -> Vec<(u32, u64)> {
        let mut guards: Vec<_> = self.tails.iter().map(|t| t.0.lock()).collect();
        guards
            .iter_mut()
            .map(|t| {
                if reset_appended {
                    t.appended = 0;
                }
                self.flush_live(t);
                // Segment ids grow along a lane, so the smallest pair comes first in the log.
                let end = (t.seg.id, t.end());
                t.large.iter().copied().min().map_or(end, |p| p.min(end))
            })
            .collect()
    }

    /// (id, valid length, live bytes, horizon) of every segment, for a checkpoint.
    pub(crate) fn seg_infos(&self) -> Vec<(u32, u64, u64, u32)> {
        self.segs
            .load()
            .segs
            .values()
            .map(|s| {
                (
                    s.id,
                    s.flushed(),
                    s.live.load(Ordering::Relaxed),
                    s.horizon.load(Ordering::Relaxed),
                )
            })
            .collect()
    }

    /// The filler thread (`sync=always`): zeros ahead of each lane's records (`fill_lane`),
    /// when a writer asks and at every tick.
    pub(crate) fn fill_loop(&self) {
        loop {
            {
                let mut stop = self.stop.lock();
                if !*stop && !self.fill_wake.swap(false, Ordering::AcqRel) {
                    self.fill_cv.wait_for(&mut stop, FLUSH_TICK);
                }
                if *stop {
                    return;
                }
            }
            if self.is_poisoned.load(Ordering::Acquire) || self.fill_failed.load(Ordering::Relaxed)
            {
                continue;
            }
            for lane in 0..self.lanes {
                self.fill_lane(lane);
            }
        }
    }

    /// Wait `tick` for a background thread's next round; false once the database is closing.
    pub(crate) fn pause(&self, tick: Duration) -> bool {
        let mut stop = self.stop.lock();
        if !*stop {
            self.stop_cv.wait_for(&mut stop, tick);
        }
        !*stop
    }
}

/// Where the bytes of `file` between `from` and `len` stop being non-zero: `from` when they are
/// all zeros (read backwards, a chunk at a time).
pub(crate) fn data_end(file: &dyn crate::io::VFile, from: u64, len: u64) -> Result<u64> {
    const CHUNK: u64 = 64 << 10;
    let mut buf = vec![0u8; CHUNK as usize];
    let mut hi = len;
    while hi > from {
        let lo = hi.saturating_sub(CHUNK).max(from);
        let b = &mut buf[..(hi - lo) as usize];
        file.read_at(b, lo)?;
        if let Some(i) = b.iter().rposition(|&x| x != 0) {
            return Ok(lo + i as u64 + 1);
        }
        hi = lo;
    }
    Ok(from)
}

/// Walk the sub-records of a batch frame: `f(offset_in_frame, header, record)`.
pub(crate) fn for_each_sub(
    frame: &[u8],
    h: &Header,
    mut f: impl FnMut(usize, &Header, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut pos = h.key_off;
    for _ in 0..h.count {
        let sub = frame
            .get(pos..)
            .and_then(format::parse_header)
            .filter(|s| s.typ == T_PUT || s.typ == T_DELETE)
            .ok_or_else(|| Error::Corrupt("malformed batch frame".into()))?;
        let rec = frame
            .get(pos..pos + sub.len)
            .ok_or_else(|| Error::Corrupt("batch frame shorter than its records".into()))?;
        f(pos, &sub, rec)?;
        pos += sub.len;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{CrashMode, SimVfs};
    use crate::log::format::{encode_put, PutFields, SEG_HEADER_LEN};
    use crate::log::scan::scan;

    fn open(fs: &SimVfs, sync: SyncMode) -> Log {
        let cfg = LogConfig {
            sync,
            segsiz: 64 << 10,
            bufsiz: 4 << 10,
            msiz: 64 << 20,
            lanes: 2,
        };
        let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
        vfs.create_dir_all(std::path::Path::new("/l")).unwrap();
        Log::new(
            std::path::Path::new("/l"),
            vfs,
            false,
            cfg,
            7,
            SegTable::default(),
        )
    }

    fn put(n: u64) -> Vec<u8> {
        let mut r = Vec::new();
        let f = PutFields {
            seq: n,
            ..PutFields::default()
        };
        encode_put(&mut r, format!("k{n}").as_bytes(), &[n as u8; 300], &f);
        r
    }

    /// What a kind sees of the log: records appended to two lanes roll over segments, read
    /// back at the positions `append` gave, end where `lane_positions` says, and after a group
    /// commit survive a crash that drops everything not synced.
    #[test]
    fn appended_records_read_back_and_survive_a_crash_once_committed() {
        let fs = SimVfs::new();
        let log = open(&fs, SyncMode::Always);
        let mut at = Vec::new();
        for n in 1..=1200u64 {
            let lane = (n % 2) as usize;
            let rec = put(n);
            let mut tail = log.tails[lane].0.lock();
            let (seg, off) = log.append(&mut tail, &[&rec], true).unwrap();
            at.push((seg, off, rec));
        }
        let segs = log.segs.load();
        assert!(
            segs.segs.len() > 4,
            "1,200 records of 300 bytes roll 64 KiB segments"
        );
        let mut buf = Vec::new();
        for (seg, off, rec) in &at {
            let s = segs.get(*seg).unwrap();
            log.read_range(s, *off, rec.len(), &mut buf).unwrap();
            assert!(format::verify(&buf, s.seed));
            assert_eq!(&buf[4..], &rec[4..]);
        }
        let ends = log.lane_positions(false);
        for (lane, &(seg, end)) in ends.iter().enumerate() {
            let last = at
                .iter()
                .rev()
                .find(|a| segs.get(a.0).unwrap().lane == lane)
                .unwrap();
            assert_eq!((seg, end), (last.0, last.1 + last.2.len() as u64));
        }
        log.group_commit().unwrap();
        drop(segs);
        fs.crash(CrashMode::DropUnsynced);
        // Every record is in the files, in order, lane by lane.
        let found = seqs_in(&fs, false);
        assert_eq!(found.len(), 1200);
        assert_eq!(found.iter().next_back(), Some(&1200));
    }

    /// The seq of every put record in the segments of `fs` (after a crash, or built from a
    /// crash image), whose scans find no damage, and no tail torn unless `torn`.
    fn seqs_in(fs: &SimVfs, torn: bool) -> std::collections::BTreeSet<u64> {
        let mut found = std::collections::BTreeSet::new();
        for (path, data) in &fs.image() {
            if !path.to_string_lossy().ends_with(".kd") {
                continue;
            }
            let mut src = crate::log::recovery::FileBytes(&*fs.open(path, false).unwrap());
            let s = scan(
                &mut src,
                format::seed(7),
                SEG_HEADER_LEN as u64,
                data.len() as u64,
                |_, h, _, _| {
                    if h.typ == format::T_PUT {
                        assert!(found.insert(h.fields.seq), "seq {} twice", h.fields.seq);
                    }
                    Ok(true)
                },
            )
            .unwrap();
            assert!(s.damage.is_empty(), "{path:?}: damage");
            assert!(
                torn || s.tail.as_ref().is_none_or(|t| t.zeros),
                "{path:?}: torn"
            );
        }
        found
    }

    /// What `threads` writers do under `sync=always`: append a record (seq `1 + t * each + i`)
    /// to lane 0 and wait for its group commit, `each` times or until an error, which ends the
    /// writer. With `think`, a writer pauses up to 3 ms between writes, so that writes arrive
    /// while syncs run. Notes the seqs acknowledged in `acked`; returns the errors.
    fn write_and_commit(
        log: &Log,
        threads: u64,
        each: u64,
        think: bool,
        acked: &Mutex<Vec<u64>>,
    ) -> Vec<Error> {
        std::thread::scope(|s| {
            let writers: Vec<_> = (0..threads)
                .map(|t| {
                    s.spawn(move || {
                        for i in 0..each {
                            let n = 1 + t * each + i;
                            let rec = put(n);
                            let r = log.check_writable().and_then(|()| {
                                log.append(&mut log.tails[0].0.lock(), &[&rec], true)?;
                                log.group_commit()
                            });
                            match r {
                                Ok(()) => acked.lock().push(n),
                                Err(e) => return Some(e),
                            }
                            if think {
                                std::thread::sleep(Duration::from_micros(n * 7919 % 3000));
                            }
                        }
                        None
                    })
                })
                .collect();
            writers
                .into_iter()
                .filter_map(|w| w.join().unwrap())
                .collect()
        })
    }

    /// Eight writers on a disk whose fdatasync takes 10 ms: each sync covers (nearly) all of
    /// them, every one written before it started. Before the leader waited for the writers of
    /// the last group, the groups alternated between the writer back first, alone, and the
    /// seven others: about 4 writes a sync. A lone writer syncs once a write, without waiting.
    #[test]
    fn a_group_sync_covers_every_writer_waiting() {
        let fs = SimVfs::new();
        fs.set_sync_delay(Duration::from_millis(10));
        let log = open(&fs, SyncMode::Always);
        let acked = Mutex::new(Vec::new());
        let (threads, each) = (8, 60);
        assert!(write_and_commit(&log, threads, each, false, &acked).is_empty());
        let syncs = log.counters.syncs.load(Ordering::Relaxed);
        let writes = threads * each;
        assert!(
            writes as f64 / syncs as f64 >= 6.0,
            "{writes} writes took {syncs} syncs"
        );
        let waits = log.commit.waits.load(Ordering::Relaxed);
        for i in 1..=20 {
            log.append(&mut log.tails[0].0.lock(), &[&put(writes + i)], true)
                .unwrap();
            log.group_commit().unwrap();
        }
        assert_eq!(log.counters.syncs.load(Ordering::Relaxed), syncs + 20);
        // The first lone sync waits for the eight writers of the last group (for half a sync
        // at most); after it, the lone writer is the whole of its group.
        assert!(log.commit.waits.load(Ordering::Relaxed) <= waits + 1);
        fs.crash(CrashMode::DropUnsynced);
        let found = seqs_in(&fs, false);
        assert!(acked.lock().iter().all(|n| found.contains(n)));
    }

    /// Two writers that each pause 6 ms after every acknowledged write, on a disk whose
    /// fdatasync takes 8 ms: each comes back after the 4 ms a leader may wait for it, so
    /// leaders soon stop waiting (each wait that ran out skips more leaders' waits).
    #[test]
    fn leaders_stop_waiting_for_writers_that_come_back_too_late() {
        let fs = SimVfs::new();
        fs.set_sync_delay(Duration::from_millis(8));
        let log = open(&fs, SyncMode::Always);
        std::thread::scope(|s| {
            for t in 0..2u64 {
                let log = &log;
                s.spawn(move || {
                    for i in 0..40 {
                        log.append(&mut log.tails[0].0.lock(), &[&put(1 + t * 40 + i)], true)
                            .unwrap();
                        log.group_commit().unwrap();
                        std::thread::sleep(Duration::from_millis(6));
                    }
                });
            }
        });
        // Waits that found the other writer are allowed (on a loaded machine the two writers
        // can fall into step and then share every sync); waits that ran out must back off.
        let syncs = log.counters.syncs.load(Ordering::Relaxed);
        let misses = log.commit.wait_misses.load(Ordering::Relaxed);
        assert!(syncs >= 40, "{syncs} syncs");
        assert!(
            misses <= syncs / 4,
            "{misses} waits ran out in {syncs} syncs"
        );
    }

    /// Crashes while eight writers commit (images of what each would leave, taken at one
    /// instant, every few milliseconds): every write acknowledged before one survives it (its
    /// sync had returned, and covered it).
    #[test]
    fn acknowledged_writes_survive_a_crash_in_the_middle_of_group_commits() {
        let fs = SimVfs::new();
        fs.set_sync_delay(Duration::from_millis(2));
        let log = open(&fs, SyncMode::Always);
        let acked = Mutex::new(Vec::new());
        let done = AtomicBool::new(false);
        let images = std::thread::scope(|s| {
            let w = s.spawn(|| {
                let errors = write_and_commit(&log, 8, 150, true, &acked);
                done.store(true, Ordering::Release);
                errors
            });
            let mut images = Vec::new();
            for n in 0u64.. {
                if done.load(Ordering::Acquire) {
                    break;
                }
                std::thread::sleep(Duration::from_micros(5000 + n * 997 % 3000));
                // What was acknowledged, then what a crash leaves: the first was durable
                // before the second was taken.
                let before = acked.lock().len();
                let mode = if n % 2 == 0 {
                    CrashMode::DropUnsynced
                } else {
                    CrashMode::Torn { seed: n }
                };
                images.push((before, fs.crash_image(mode)));
            }
            assert!(w.join().unwrap().is_empty());
            images
        });
        assert!(images.len() >= 10, "{} crash images", images.len());
        let acked = acked.into_inner();
        for (n, (before, image)) in images.iter().enumerate() {
            let found = seqs_in(&SimVfs::from_image(image), true);
            let lost: Vec<_> = acked[..*before]
                .iter()
                .filter(|n| !found.contains(n))
                .collect();
            assert!(lost.is_empty(), "crash {n}: lost {lost:?}");
        }
    }

    /// A sync that fails: every writer of its group gets the error, none is acknowledged
    /// without a sync that covered it, and later writers get the poison.
    #[test]
    fn a_failed_group_sync_fails_every_writer_of_its_group() {
        let fs = SimVfs::new();
        fs.set_sync_delay(Duration::from_millis(2));
        let log = open(&fs, SyncMode::Always);
        let acked = Mutex::new(Vec::new());
        let errors = std::thread::scope(|s| {
            let w = s.spawn(|| write_and_commit(&log, 8, 1000, true, &acked));
            while acked.lock().len() < 16 {
                std::thread::sleep(Duration::from_millis(1));
            }
            fs.fail_after(0, crate::io::Fault::Eio);
            w.join().unwrap()
        });
        // Every writer stopped at an error.
        assert_eq!(errors.len(), 8, "{errors:?}");
        assert!(errors
            .iter()
            .all(|e| matches!(e, Error::Io(_) | Error::Poisoned(_))));
        let acked = acked.into_inner();
        assert!(acked.len() < 8000);
        fs.heal();
        fs.crash(CrashMode::DropUnsynced);
        let found = seqs_in(&fs, false);
        let lost: Vec<_> = acked.iter().filter(|n| !found.contains(n)).collect();
        assert!(lost.is_empty(), "lost {lost:?}");
    }
}
