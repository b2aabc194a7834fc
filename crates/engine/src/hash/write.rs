//! Writing: the lanes' buffers and segments (append, flush, roll, the filler's zeros ahead of
//! `sync=always` logs, markers), records pointed at from the index, and durability (group
//! commit, syncs).

use super::*;

impl Tail {
    pub(super) fn new(seg: Arc<Segment>) -> Tail {
        Tail {
            alloc: seg.flushed(),
            fill_from: NO_FILL,
            fill_asked: false,
            seg,
            buf: Vec::new(),
            appended: 0,
            marked: false,
            live: [(0, 0); LIVE_PENDING],
            nlive: 0,
            large: Vec::new(),
        }
    }

    pub(super) fn end(&self) -> u64 {
        self.seg.flushed() + self.buf.len() as u64
    }

    /// The header and bytes of the record at `off` of the active segment, which lies in the
    /// buffer (`off` at or past the flushed end).
    pub(super) fn buffered(&self, off: u64) -> Result<(Header, &[u8])> {
        let bad = |what| corrupt_at(self.seg.id, off, what);
        let avail = self
            .buf
            .get((off - self.seg.flushed()) as usize..)
            .ok_or_else(|| bad("read past the end of the log"))?;
        let h = format::parse_header(&avail[..avail.len().min(MAX_HEADER_LEN)])
            .ok_or_else(|| bad("bad record header"))?;
        let rec = avail
            .get(..h.len)
            .ok_or_else(|| bad("record runs past the end"))?;
        Ok((h, rec))
    }

    /// Take the result of the fill under way, if `done` is it (else a writer already did).
    pub(super) fn apply_fill(&mut self, done: &Fill) {
        if self.fill_from == done.from && self.seg.id == done.seg {
            self.fill_from = NO_FILL;
            self.alloc = self.alloc.max(done.to);
        }
    }

    /// Make `seg` the lane's active segment (its file is as long as its records; no fill is
    /// under way; no marker known at its end).
    pub(super) fn set_seg(&mut self, seg: Arc<Segment>) {
        debug_assert_eq!(self.fill_from, NO_FILL);
        self.alloc = seg.flushed();
        self.seg = seg;
        self.marked = false;
    }

    /// Note a live-byte change of segment `seg`; false when the list is full.
    #[inline]
    pub(super) fn note_live(&mut self, seg: u32, delta: i64) -> bool {
        for e in &mut self.live[..self.nlive] {
            if e.0 == seg {
                e.1 += delta;
                return true;
            }
        }
        if self.nlive == LIVE_PENDING {
            return false;
        }
        self.live[self.nlive] = (seg, delta);
        self.nlive += 1;
        true
    }
}

/// The locked shard `shard` among a batch's guards.
pub(super) fn guard_of<'a, 'g>(
    guards: &'a mut [(usize, Excl<'g>)],
    shard: usize,
) -> Result<&'a mut ShardState> {
    guards
        .iter_mut()
        .find(|(s, _)| *s == shard)
        .map(|(_, g)| &mut **g)
        .ok_or_else(|| Error::Corrupt("batch shard not locked".into()))
}

impl Inner {
    // ------------------------------------------------------------------ writing

    pub(super) fn check_writable(&self) -> Result<()> {
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

    pub(super) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    pub(super) fn poison(&self, e: &std::io::Error) -> Error {
        let msg = e.to_string();
        self.poisoned.lock().get_or_insert(msg);
        self.is_poisoned.store(true, Ordering::Release);
        Error::Io(std::io::Error::new(e.kind(), e.to_string()))
    }

    /// Add the lane's pending live-byte changes to the segments' counters.
    pub(super) fn flush_live(&self, tail: &mut Tail) {
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
    pub(super) fn note_live(&self, tail: &mut Tail, seg: u32, delta: i64) {
        if !tail.note_live(seg, delta) {
            self.flush_live(tail);
            tail.note_live(seg, delta);
        }
    }

    /// Hand every lane's buffer to the OS (a read-only open has none): every record the index
    /// points at is then in its file.
    pub(super) fn flush_all(&self) -> Result<()> {
        if !self.readonly {
            for t in self.tails.iter() {
                self.flush(&mut t.0.lock())?;
            }
        }
        Ok(())
    }

    /// Hand the buffer to the OS (and the pending live-byte changes to the counters). Called
    /// with the tail lock held.
    pub(super) fn flush(&self, tail: &mut Tail) -> Result<()> {
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
    pub(super) fn reserve(&self, tail: &mut Tail, end: u64) {
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
    pub(super) fn settle_fill(&self, tail: &mut Tail) {
        if tail.fill_from == NO_FILL {
            return;
        }
        let done = self.fills[tail.seg.lane].lock();
        tail.apply_fill(&done);
    }

    /// With `sync=always`, write zeros ahead of the lane's records when they come within
    /// `FILL_LOW` of the end of the last zeros (see `VFile::zero_fill`). Runs on the filler
    /// thread; the lane's writers go on meanwhile, below the zeros being written.
    pub(super) fn fill_lane(&self, lane: usize) {
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
    pub(super) fn trim_tail(&self, tail: &mut Tail) -> Result<()> {
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
    pub(super) fn roll(&self, tail: &mut Tail) -> Result<()> {
        self.mark(tail);
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
    pub(super) fn mark(&self, tail: &mut Tail) {
        if tail.marked || tail.seg.id == 0 || tail.end() <= SEG_HEADER_LEN as u64 {
            return;
        }
        tail.buf.extend_from_slice(&format::marker(tail.seg.seed));
        tail.marked = true;
    }

    pub(super) fn create_segment(&self, id: u32, lane: usize) -> Result<Arc<Segment>> {
        let path = self.dir.join(seg_file_name(id));
        let file = self.vfs.open(&path, true).map_err(|e| self.poison(&e))?;
        file.set_len(0).map_err(|e| self.poison(&e))?;
        let info = format::SegInfo {
            id,
            salt: self.salt,
            lane: lane as u16,
            lanes: self.lanes as u16,
        };
        file.write_at(&format::seg_header(&info), 0)
            .map_err(|e| self.poison(&e))?;
        let seg = Segment::new(
            id,
            lane,
            self.salt,
            path.clone(),
            file,
            SEG_HEADER_LEN as u64,
        );
        seg.dirty.store(true, Ordering::Release);
        let segsiz = self.cfg.lock().segsiz;
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
    pub(super) fn trim_maps(&self) {
        let msiz = self.cfg.lock().msiz;
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
    /// record larger than a segment gets a fresh segment of its own).
    pub(super) fn ensure_room(&self, tail: &mut Tail, len: usize) -> Result<()> {
        let segsiz = self.segsiz.load(Ordering::Relaxed);
        if tail.seg.id == 0
            || (tail.end() + len as u64 > segsiz && tail.end() > SEG_HEADER_LEN as u64)
        {
            self.roll(tail)?;
        }
        Ok(())
    }

    /// Append one record made of `parts` (already sealed, or sealed here when `seal`).
    /// Returns its location. Called with the tail lock held.
    pub(super) fn append(
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

    /// A value as stored: compressed with the configured codec when that makes it smaller.
    pub(super) fn stored_form<'a>(&self, value: &'a [u8]) -> Stored<'a> {
        let comp = Compression::from_code(self.compression.load(Ordering::Relaxed))
            .unwrap_or(Compression::None);
        match compress::compress(comp, value) {
            Some(z) => Stored {
                bytes: z.into(),
                code: comp as u8,
                raw_len: value.len() as u64,
            },
            None => Stored {
                bytes: value.into(),
                code: 0,
                raw_len: 0,
            },
        }
    }

    /// Encode and append a put record of a value already in its stored form. Returns
    /// (segment, offset, length).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_put(
        &self,
        lane: usize,
        key: &[u8],
        stored: &Stored<'_>,
        flags: u32,
        expires: u64,
        (seq, version): (u64, u64),
        acct: Acct,
    ) -> Result<(u32, u64, usize)> {
        let fields = PutFields {
            flags,
            expires,
            seq,
            compression: stored.code,
            raw_len: stored.raw_len,
            version,
        };
        let hdr = HeaderBuf::put(key.len(), stored.bytes.len(), &fields);
        if expires != 0 {
            self.expiring.fetch_add(1, Ordering::Relaxed);
        }
        let len = hdr.as_slice().len() + key.len() + stored.bytes.len();
        let mut tail = self.tails[lane].0.lock();
        let (seg, off) = self.append(&mut tail, &[hdr.as_slice(), key, &stored.bytes], true)?;
        self.note_full(lane, &tail);
        if let Acct::Large = acct {
            // Under the lane lock, which a checkpoint takes to read the lane's positions and
            // compaction to look for pending records (`large_pending`).
            tail.large.push((seg, off));
        }
        if let Acct::Lane { old } = acct {
            self.note_live(&mut tail, seg, len as i64);
            if let Some((oseg, olen)) = old {
                self.note_live(&mut tail, oseg, -(olen as i64));
            }
        }
        Ok((seg, off, len))
    }

    /// A large put written with `Acct::Large` to lane `lane`, its record at (`seg`, `off`),
    /// has pointed the index at it (or found that a later write of its key came first): the
    /// segment may be compacted again, and checkpoints need not replay the record.
    pub(super) fn large_put_done(&self, lane: usize, seg: u32, off: u64) {
        let mut tail = self.tails[lane].0.lock();
        if let Some(i) = tail.large.iter().position(|&p| p == (seg, off)) {
            tail.large.swap_remove(i);
        }
    }

    /// Whether a large put's record in `seg` is not in the index yet (`Tail::large` of the
    /// segment's lane). Compaction would take it for dead. A sealed segment gets no new
    /// records, so once this is false it stays false, and every such record is indexed (the
    /// lane lock orders the check after `large_put_done`, which follows the slot).
    pub(super) fn large_pending(&self, seg: &Segment) -> bool {
        self.tails[seg.lane]
            .0
            .lock()
            .large
            .iter()
            .any(|p| p.0 == seg.id)
    }

    pub(super) fn write_delete(&self, lane: usize, key: &[u8], seq: u64, acct: Acct) -> Result<()> {
        let hdr = HeaderBuf::delete(key.len(), seq);
        let mut tail = self.tails[lane].0.lock();
        self.append(&mut tail, &[hdr.as_slice(), key], true)?;
        self.note_full(lane, &tail);
        if let Acct::Lane {
            old: Some((oseg, olen)),
        } = acct
        {
            self.note_live(&mut tail, oseg, -(olen as i64));
        }
        Ok(())
    }

    /// Write a new record of `key` and point the index at it, under the shard's write lock
    /// (`tbl`); `old` is the key's current slot and record length. The lane accounts the live
    /// bytes. Returns the new record's metadata.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn put_locked(
        &self,
        tbl: &mut impl KeyIndex,
        tag: u32,
        key: &[u8],
        old: Option<(Slot, usize)>,
        stored: &Stored<'_>,
        flags: u32,
        expires: u64,
        keep_version: Option<u64>,
    ) -> Result<Meta> {
        let seq = tbl.next_seq(key);
        let acct = Acct::Lane {
            old: old.map(|(o, l)| (o.seg, l)),
        };
        // A version kept (a touch) is written into the record unless it equals the new seq.
        let version = keep_version.filter(|&v| v != seq).unwrap_or(0);
        let lane = self.my_lane();
        let (s, o, _) = self.write_put(lane, key, stored, flags, expires, (seq, version), acct)?;
        self.point(tbl, tag, old.map(|o| o.0), s, o);
        Ok(Meta {
            flags,
            expires,
            version: keep_version.unwrap_or(seq),
        })
    }

    /// A plain put under the shard's write lock (`tbl`): the new record is appended before the
    /// record it replaces is looked for, so that a memory miss is fetched during the append.
    /// With a small table, that miss is the old record's header and key (written long enough
    /// ago to have left the cache; sets over a small key space: 8–9 % more of them a second);
    /// with a large one, the key's home position in the table (1M new keys: 12 % faster). See
    /// docs/BENCHMARKS.md. If the old record cannot be read (a damaged header), the new record,
    /// already in the log, is indexed all the same (so that the index agrees with the log) and
    /// the error is returned.
    pub(super) fn put_replacing(
        &self,
        tbl: &mut impl KeyIndex,
        tag: u32,
        key: &[u8],
        stored: &Stored<'_>,
        flags: u32,
        expires: u64,
    ) -> Result<Meta> {
        // A small table is in the cache: look at the candidates first and fetch their records
        // while appending. A large one is not: append first, while the key's home position
        // (prefetched by `locate`) is fetched.
        let small = tbl.small();
        let mut candidates = false;
        if small {
            for c in tbl.cands(tag) {
                self.prefetch_record(&c);
                candidates = true;
            }
        }
        let seq = tbl.next_seq(key);
        let lane = self.my_lane();
        let acct = Acct::Lane { old: None };
        let (seg, off, _) = self.write_put(lane, key, stored, flags, expires, (seq, 0), acct)?;
        if !small {
            candidates = tbl.cands(tag).next().is_some();
        }
        let found = self.point_appended(tbl, tag, key, lane, (seg, off), candidates);
        found.map(|_| Meta {
            flags,
            expires,
            version: seq,
        })
    }

    /// The end of a put that appended its record (at `at`, in lane `lane`) before looking:
    /// find the record it replaces (only when some slot has its tag: `candidates`), count that
    /// one dead, and point the key at the new record. The key is pointed at it even when the
    /// old record cannot be read (the error is returned), so that the index agrees with the
    /// log.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn point_appended(
        &self,
        tbl: &mut impl KeyIndex,
        tag: u32,
        key: &[u8],
        lane: usize,
        at: (u32, u64),
        candidates: bool,
    ) -> Result<Option<Found>> {
        let found = if candidates {
            self.find(tbl, tag, key, Want::Slot)
        } else {
            Ok(None) // a new key: no record with its tag
        };
        let old = match &found {
            Ok(Some(f)) => Some((f.slot, f.len)),
            _ => None,
        };
        if let Some((o, len)) = old {
            self.dead_record(lane, o.seg, len);
        }
        self.point(tbl, tag, old.map(|o| o.0), at.0, at.1);
        found
    }

    /// Point `key` (whose old slot, if any, is `old`) at the record at (`seg`, `off`), without
    /// live-byte accounting (the lane did it: `Acct::Lane`).
    #[inline]
    pub(super) fn point(
        &self,
        tbl: &mut impl KeyIndex,
        tag: u32,
        old: Option<Slot>,
        seg: u32,
        off: u64,
    ) {
        let new = Slot {
            tag,
            seg,
            off: off as u32,
        };
        match old {
            Some(o) => {
                tbl.replace(&o, new);
            }
            None => tbl.insert(new),
        }
    }

    /// Point `key` (whose old slot, if any, is `old`) at a new record, accounting the live
    /// bytes at once.
    pub(super) fn set_slot(
        &self,
        tbl: &mut impl KeyIndex,
        tag: u32,
        old: Option<(Slot, usize)>,
        seg: u32,
        off: u64,
        len: usize,
    ) {
        self.point(tbl, tag, old.map(|(o, _)| o), seg, off);
        self.add_live(seg, len as i64);
        if let Some((o, olen)) = old {
            self.add_live(o.seg, -(olen as i64));
        }
    }

    pub(super) fn remove_slot(&self, tbl: &mut impl KeyIndex, old: Slot, len: usize) {
        if tbl.remove(&old) {
            self.add_live(old.seg, -(len as i64));
        }
    }

    pub(super) fn add_live(&self, seg: u32, delta: i64) {
        if let Some(s) = self.segs.load().get(seg) {
            s.add_live(delta);
        }
    }

    /// Raise the lane's flag when its buffer is full (see `Lane`). Called by the writes that
    /// end with `after_write`, which flushes it.
    #[inline]
    pub(super) fn note_full(&self, lane: usize, tail: &Tail) {
        if tail.buf.len() >= self.bufsiz.load(Ordering::Relaxed) as usize {
            self.tails[lane].1.store(true, Ordering::Relaxed);
        }
    }

    /// After a write, once the shard lock is released: flush this thread's lane if its buffer
    /// is full, and with `sync=always` wait until the write is durable.
    pub(super) fn after_write(&self) -> Result<()> {
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

    // ------------------------------------------------------------------ durability

    /// Wait until everything appended before this call is durable, sharing the fdatasync with
    /// every writer that arrives while one is running (group commit).
    pub(super) fn group_commit(&self) -> Result<()> {
        let mut st = self.commit.lock();
        // A sync that starts after this point covers our write.
        let need = st.started + 1;
        loop {
            if st.finished >= need {
                return match self.poisoned.lock().as_ref() {
                    Some(p) => Err(Error::Poisoned(p.clone())),
                    None => Ok(()),
                };
            }
            if !st.running {
                st.running = true;
                st.started += 1;
                let mine = st.started;
                drop(st);
                let r = self.sync_now();
                st = self.commit.lock();
                st.running = false;
                st.finished = mine;
                self.commit_cv.notify_all();
                if mine >= need {
                    return r;
                }
            } else {
                self.commit_cv.wait(&mut st);
            }
        }
    }

    /// Flush the buffer and fdatasync every segment written since its last sync.
    ///
    /// Syncs run one at a time: a sync that found a segment clean because another had just
    /// taken its dirty flag must not return before that other one's fdatasync has finished
    /// (a checkpoint's sync could otherwise let a group commit acknowledge writes early).
    /// The directory is synced after the segments, so the name of every segment whose records
    /// this sync made durable is durable too.
    pub(super) fn sync_now(&self) -> Result<()> {
        let _one = self.sync_one.lock();
        for t in self.tails.iter() {
            let mut tail = t.0.lock();
            self.flush(&mut tail)?;
        }
        let segs = self.segs.load();
        for seg in segs.segs.values() {
            if seg.dirty.swap(false, Ordering::AcqRel) {
                if let Err(e) = seg.file.sync() {
                    seg.dirty.store(true, Ordering::Release);
                    return Err(self.poison(&e));
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
}
