//! Reading records: where a segment's bytes are (file, map or a lane's buffer), a key's
//! candidate records checked against it, and the scans of a segment's records in order.

use super::*;

/// How many bytes of a segment a scan reads at a time (in tests, little: so that records
/// straddle chunk ends and outgrow chunks often).
#[cfg(not(test))]
pub(super) const SCAN_CHUNK: usize = 1 << 20;

#[cfg(test)]
pub(super) const SCAN_CHUNK: usize = 4096;

/// Reads records of one segment at increasing offsets below `end` through a buffer of up to
/// `SCAN_CHUNK` bytes: one read per chunk instead of one per record. Scans (`scan_segment`:
/// recovery, compaction, checks) read every record this way, and compaction then the live
/// ones again.
pub(super) struct ChunkReader<'a> {
    inner: &'a Inner,
    seg: &'a Segment,
    end: u64,
    buf: Vec<u8>,
    /// The segment offset of `buf[0]`.
    start: u64,
}

impl<'a> ChunkReader<'a> {
    pub(super) fn new(inner: &'a Inner, seg: &'a Segment, end: u64) -> ChunkReader<'a> {
        ChunkReader {
            inner,
            seg,
            end,
            buf: Vec::new(),
            start: 0,
        }
    }

    /// The record at `off` (below `end`), its checksum verified; `None` when no valid record
    /// starts there (a header that does not parse, a record running past `end`, a checksum
    /// that fails). Errors are read errors.
    pub(super) fn valid(&mut self, off: u64) -> Result<Option<(Header, &[u8])>> {
        let held = self.start + self.buf.len() as u64;
        let header_held = off + format::MAX_HEADER_LEN as u64 <= held || held == self.end;
        if off < self.start || off >= held || !header_held {
            let want = ((self.end - off) as usize).min(SCAN_CHUNK);
            self.inner
                .log
                .read_range(self.seg, off, want, &mut self.buf)?;
            self.start = off;
        }
        let rel = (off - self.start) as usize;
        let Some(h) = format::parse_header(&self.buf[rel..]) else {
            return Ok(None);
        };
        if h.len as u64 > self.end - off {
            return Ok(None); // runs past the end: torn or damaged
        }
        let rel = if rel + h.len > self.buf.len() {
            self.inner
                .log
                .read_range(self.seg, off, h.len, &mut self.buf)?;
            self.start = off;
            0
        } else {
            rel
        };
        let rec = &self.buf[rel..rel + h.len];
        Ok(format::verify(rec, self.seg.seed).then_some((h, rec)))
    }

    /// The record at `off`, its checksum verified; an error when there is none.
    pub(super) fn record(&mut self, off: u64) -> Result<(Header, &[u8])> {
        let (id, end) = (self.seg.id, self.end);
        if off >= end {
            return Err(corrupt_at(id, off, "read past the end of the log"));
        }
        self.valid(off)?
            .ok_or_else(|| corrupt_at(id, off, "damaged record"))
    }
}

/// Whether the record at `off` of `seg` (header `h`, bytes `rec`) is a put of `key`, with the
/// checks of `Inner::with_key_record`: its checksum verified when `verify`, and always when it
/// is another key's record.
pub(super) fn key_record_is(
    seg: &Segment,
    off: u64,
    h: &Header,
    rec: &[u8],
    key: &[u8],
    verify: bool,
) -> Result<bool> {
    let ours = format::is_put_of(h, rec, key);
    if (verify || !ours) && !format::verify(rec, seg.seed) {
        return Err(corrupt_at(seg.id, off, "checksum mismatch"));
    }
    Ok(ours)
}

/// The metadata a put record carries.
pub(super) fn meta_of(h: &Header) -> Meta {
    Meta {
        flags: h.fields.flags,
        expires: h.fields.expires,
        version: h.fields.version(),
    }
}

pub(super) fn decode_value(h: &Header, rec: &[u8]) -> Result<Vec<u8>> {
    let stored = &rec[h.value_off()..h.len];
    if h.fields.compression == 0 {
        return Ok(stored.to_vec());
    }
    let raw = usize::try_from(h.fields.raw_len)
        .ok()
        .filter(|&n| n <= crate::store::MAX_VALUE_LEN)
        .ok_or_else(|| Error::Corrupt("compressed length out of range".into()))?;
    compress::decompress(format::codec(h)?, stored, raw)
}

impl Inner {
    /// Free what was retired before this call once no reader can be looking at it: a reader
    /// peeks only inside a shard (its lock held, or counted in while it is fast), so after
    /// every shard has been held exclusively once (`excl`, which waits for the threads
    /// inside), each reader that saw a retired pointer has finished. Must be called with no
    /// shard or lane lock held.
    pub(super) fn reclaim(&self) {
        if self.log.retired.is_empty() {
            return;
        }
        let batch = self.log.retired.take();
        for i in 0..NSHARDS {
            drop(self.excl(i));
        }
        drop(batch);
    }

    /// Call `f` with the segment and the complete record at (`seg_id`, `off`): its header
    /// parsed and within it, its checksum not verified (`with_record`, `with_key_record`).
    /// From the map when it is there (no copy), else copied into the thread's buffer. The
    /// caller is inside a shard.
    pub(super) fn with_raw_record<R>(
        &self,
        seg_id: u32,
        off: u64,
        whole: bool,
        f: impl FnOnce(&Segment, &Header, &[u8]) -> Result<R>,
    ) -> Result<R> {
        // SAFETY: every caller is inside a shard (this reads the records a shard's table
        // points at).
        let segs = unsafe { self.log.segs_locked() };
        let seg = segs
            .get(seg_id)
            .ok_or_else(|| Error::Corrupt(format!("index points into missing segment {seg_id}")))?;
        let mut f = Some(f);
        if off < seg.flushed() {
            // SAFETY: as above.
            if let Some(r) = unsafe {
                seg.with_mapped(off, |res| {
                    res.and_then(|(h, rec)| (f.take().expect("called once"))(seg, &h, rec))
                })
            } {
                return r;
            }
        }
        let f = f.take().expect("not yet called");
        // Taken out of the thread's slot, so a nested read (none today) would just allocate.
        let mut buf = SCRATCH.with(std::cell::Cell::take);
        let res = self
            .read_record(seg, off, whole, &mut buf)
            .and_then(|h| f(seg, &h, &buf[..h.len.min(buf.len())]));
        if buf.capacity() <= SCRATCH_KEEP {
            SCRATCH.with(|c| c.set(buf));
        }
        res
    }

    /// Call `f` with the complete verified record at (`seg`, `off`). The caller holds a shard
    /// lock.
    pub(super) fn with_record<R>(
        &self,
        seg_id: u32,
        off: u64,
        f: impl FnOnce(&Header, &[u8]) -> R,
    ) -> Result<R> {
        self.with_raw_record(seg_id, off, true, |seg, h, rec| {
            if format::verify(rec, seg.seed) {
                Ok(f(h, rec))
            } else {
                Err(corrupt_at(seg_id, off, "checksum mismatch"))
            }
        })
    }

    /// Call `f` with the complete verified record at (`seg_id`, `off`) if it is a put of
    /// `key`; `Ok(None)` if it is another key's (or not a put). Another key's record (a rare
    /// tag collision) is verified too, so that damaged key bytes are an error, never a key
    /// silently not found. Called with a shard lock held.
    pub(super) fn with_key_record<R>(
        &self,
        seg_id: u32,
        off: u64,
        key: &[u8],
        f: impl FnOnce(&Header, &[u8]) -> R,
    ) -> Result<Option<R>> {
        self.with_raw_record(seg_id, off, true, |seg, h, rec| {
            Ok(key_record_is(seg, off, h, rec, key, true)?.then(|| f(h, rec)))
        })
    }

    /// The header of the record at (`seg_id`, `off`) if it is a put of `key`, not verified;
    /// `Ok(None)` if it is another key's (or not a put). For a lookup that uses nothing but
    /// the record's length and key (a put or a delete replacing it): of a record read from
    /// the file, only the first `FIRST_READ` bytes are read when they hold the key. Another
    /// key's record (a rare tag collision) is read whole and verified, as in
    /// `with_key_record`. Called with a shard lock held.
    pub(super) fn key_header(&self, seg_id: u32, off: u64, key: &[u8]) -> Result<Option<Header>> {
        let ours = self.with_raw_record(seg_id, off, false, |_, h, part| {
            Ok(format::is_put_of(h, part, key).then_some(*h))
        })?;
        if ours.is_some() {
            return Ok(ours);
        }
        self.with_raw_record(seg_id, off, true, |seg, h, rec| {
            Ok(key_record_is(seg, off, h, rec, key, false)?.then_some(*h))
        })
    }

    /// Copy the record at `off` of `seg` into `out` and return its header, from the file or
    /// from the lane's buffer, taking the tail lock at most once. Records never straddle the
    /// flushed end (a flush writes the whole buffer), so one source always holds all of it.
    /// Without `whole`, a record read from the file may stop after its key: `out` then holds
    /// the first `FIRST_READ` bytes (or more, up to the end of the key). The caller verifies
    /// the checksum.
    pub(super) fn read_record(
        &self,
        seg: &Segment,
        off: u64,
        whole: bool,
        out: &mut Vec<u8>,
    ) -> Result<Header> {
        out.clear();
        let bad = |what| corrupt_at(seg.id, off, what);
        if off >= seg.flushed() {
            let tail = self.log.tails[seg.lane].0.lock();
            let flushed = tail.seg.flushed();
            if tail.seg.id == seg.id && off >= flushed {
                let (h, rec) = tail.buffered(off)?;
                out.extend_from_slice(rec);
                return Ok(h);
            }
            // Flushed since the first look: the file has it now.
        }
        let avail = seg.flushed().saturating_sub(off) as usize;
        // One read for the header and, usually, the rest of the record (`FIRST_READ`).
        seg.read_file(off, out, avail.min(FIRST_READ))?;
        let h = format::parse_header(out).ok_or_else(|| bad("bad record header"))?;
        if h.len > avail {
            return Err(bad("record runs past the end"));
        }
        let key_end = h.key_off + h.klen;
        if h.len > out.len() && (whole || key_end > out.len()) {
            seg.read_file(off, out, if whole { h.len } else { key_end })?;
        }
        Ok(h)
    }

    /// Show the record of `key` in a shard table to `f`: candidate records are read in place
    /// (from the map when flushed) to compare keys; `f` sees the matching one's slot, header
    /// and bytes, its checksum verified (`with_key_record`). `None` when the key has no record.
    pub(super) fn find_with<R>(
        &self,
        tbl: &impl Cands,
        tag: u32,
        key: &[u8],
        mut f: impl FnMut(&Slot, &Header, &[u8]) -> Result<R>,
    ) -> Result<Option<R>> {
        for slot in tbl.cands(tag) {
            let r =
                self.with_key_record(slot.seg, slot.off as u64, key, |h, rec| f(&slot, h, rec))?;
            if let Some(r) = r {
                return r.map(Some);
            }
        }
        Ok(None)
    }

    /// `bytes` (read from segment `seg`) as a `Pinned` holding the segment's mapping, when
    /// they lie in it (not when they were read into a buffer, or are still in a lane's).
    pub(super) fn pin(&self, seg: u32, bytes: &[u8]) -> Option<Pinned> {
        let map = self.log.segs.load().get(seg)?.map.load_full()?;
        let off = (bytes.as_ptr() as usize).checked_sub(map.as_slice().as_ptr() as usize)?;
        Pinned::new(map, off, bytes.len())
    }

    /// Find the slot of `key` in a shard table, and what `want` asks for of its record.
    pub(super) fn find(
        &self,
        tbl: &impl Cands,
        tag: u32,
        key: &[u8],
        want: Want,
    ) -> Result<Option<Found>> {
        if want == Want::Slot {
            for slot in tbl.cands(tag) {
                if let Some(h) = self.key_header(slot.seg, slot.off as u64, key)? {
                    return Ok(Some(Found::new(&slot, &h, None)));
                }
            }
            return Ok(None);
        }
        self.find_with(tbl, tag, key, |slot, h, rec| {
            Ok(Found::new(slot, h, Some(decode_value(h, rec)?)))
        })
    }

    /// `find(.., Want::Slot)` for a caller that holds the tail lock of its lane `tail`: a
    /// candidate record still in that lane's buffer is read from it (`read_record` would take
    /// the lock again). `None` when a candidate lies in another lane's buffer: reading it
    /// would lock that lane while holding this one, and two threads deleting each other's
    /// newest keys would then wait for each other forever. Other records are read from files,
    /// which takes no lane lock.
    pub(super) fn find_holding(
        &self,
        tbl: &impl Cands,
        tag: u32,
        key: &[u8],
        tail: &Tail,
    ) -> Result<Option<Option<Found>>> {
        let own = &tail.seg;
        let flushed = own.flushed();
        // SAFETY: the caller is inside a shard (see `segs_locked`).
        let segs = unsafe { self.log.segs_locked() };
        for slot in tbl.cands(tag) {
            let off = slot.off as u64;
            if slot.seg == own.id && off >= flushed {
                let (h, rec) = tail.buffered(off)?;
                if key_record_is(own, off, &h, rec, key, false)? {
                    return Ok(Some(Some(Found::new(&slot, &h, None))));
                }
                continue;
            }
            // A flushed end only grows: a record below it now is read without a lane lock.
            if segs.get(slot.seg).is_some_and(|s| off >= s.flushed()) {
                return Ok(None);
            }
            if let Some(h) = self.key_header(slot.seg, off, key)? {
                return Ok(Some(Some(Found::new(&slot, &h, None))));
            }
        }
        Ok(Some(None))
    }

    /// Whether `append` of a `len`-byte record to `tail` only adds it to the buffer: it starts
    /// no new segment, writes nothing to the file and flushes nothing (see `append`,
    /// `ensure_room`).
    pub(super) fn stays_in_buffer(&self, tail: &Tail, len: usize) -> bool {
        let bufsiz = self.log.bufsiz.load(Ordering::Relaxed) as usize;
        let end = tail.end() + len as u64;
        tail.seg.id != 0
            && end <= self.log.segsiz.load(Ordering::Relaxed)
            && end <= u32::MAX as u64
            && len < bufsiz
            && tail.buf.len() + len < 2 * bufsiz
    }

    /// A delete under the shard's write lock (`tbl`) that appends its delete record before it
    /// looks for the key's record, so that the miss on the key's home position (prefetched by
    /// `locate`) is fetched during the append (1M deletes: about 10 % faster). The lane stays
    /// locked until the lookup is done; when the key has no record, the delete record is
    /// taken back out of the buffer, which nothing can have flushed meanwhile. `None` (nothing
    /// written) when the record would not stay in the buffer, or a candidate record is in
    /// another lane's buffer (`find_holding`): the caller looks first instead.
    pub(super) fn delete_appending_first(
        &self,
        tbl: &mut impl KeyIndex,
        tag: u32,
        key: &[u8],
    ) -> Result<Option<Option<Found>>> {
        let seq = tbl.peek_seq(); // taken (`next_seq`) only if the key has a record
        let hdr = HeaderBuf::delete_in(self.ks, key.len(), seq, 0);
        let len = hdr.as_slice().len() + key.len();
        let lane = self.log.my_lane();
        let mut tail = self.log.tails[lane].0.lock();
        if !self.stays_in_buffer(&tail, len) {
            return Ok(None);
        }
        let (mark, appended, seg_id) = (tail.buf.len(), tail.appended, tail.seg.id);
        self.log.append(&mut tail, &[hdr.as_slice(), key], true)?;
        debug_assert!(tail.seg.id == seg_id && tail.buf.len() == mark + len);
        let found = self.find_holding(tbl, tag, key, &tail);
        match &found {
            Ok(Some(Some(f))) => {
                let taken = tbl.next_seq(key);
                debug_assert_eq!(taken, seq);
                self.log.note_full(lane, &tail);
                self.log.note_live(&mut tail, f.slot.seg, -(f.len as i64));
            }
            _ => {
                tail.buf.truncate(mark);
                tail.appended = appended;
            }
        }
        found
    }

    pub(super) fn count(&self) -> u64 {
        // The table's count plus what fast writers counted in their stripes (read under the
        // read lock, so that no `excl` moves counts from one to the other meanwhile).
        (0..NSHARDS)
            .map(|i| {
                let g = self.shards[i].0.read();
                (g.len() as i64 + self.brl.delta(i)).max(0) as u64
            })
            .sum()
    }
}
