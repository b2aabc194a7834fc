//! Space reclamation: choosing sealed segments worth compacting and copying their live records
//! to the end of the log, then dropping them.

use super::*;

/// The share of a segment's bytes that no record in the index needs.
pub(super) fn dead_share(s: &Segment) -> f64 {
    let total = s.flushed().saturating_sub(s.data).max(1);
    1.0 - (s.live.load(Ordering::Relaxed) as f64 / total as f64)
}

/// Keep a compaction that has copied `moved` bytes since `started` at `rate` bytes a second
/// (sleeping at most 100 ms at a time); `paced` is what the last call saw.
pub(super) fn pace(rate: Option<u64>, moved: u64, paced: &mut u64, started: Instant) {
    if let Some(rate) = rate.filter(|_| moved != *paced) {
        *paced = moved;
        let due = Duration::from_secs_f64(moved as f64 / rate as f64);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            std::thread::sleep(wait.min(Duration::from_millis(100)));
        }
    }
}

impl Inner {
    // ------------------------------------------------------------------ compaction

    /// Copy the live records of sealed segment `id` to the end of the log, then remove it.
    /// `recode` re-encodes values with the current compression. Called with `maint` held.
    /// Returns false when it stopped early (close requested) or could not compact.
    pub(super) fn compact_segment(&self, id: u32, recode: bool, rate: Option<u64>) -> Result<bool> {
        if self.log.segs.load().get(id).is_none() {
            return Ok(true);
        }
        let Some(moved) = self.relocate_segment(id, recode, rate)? else {
            return Ok(false);
        };
        self.drop_compacted(&[id], moved)?;
        Ok(true)
    }

    /// Compact sealed segments, the most garbage first, until none is past the threshold or
    /// `budget` is spent; then one checkpoint for all of them, and they are removed. Keeps up
    /// with writers that overwrite a small set of keys at disk speed (one segment at a time,
    /// each with its own checkpoint, did not). Called with `maint` held. Returns how many.
    pub(super) fn compact_some(&self, budget: Duration) -> Result<usize> {
        let started = Instant::now();
        let mut done = Vec::new();
        let mut moved = 0;
        while started.elapsed() < budget {
            let Some(id) = self.compaction_candidate(&done) else {
                break;
            };
            match self.relocate_segment(id, false, Some(COMPACT_RATE)) {
                Ok(Some(m)) => {
                    done.push(id);
                    moved += m;
                }
                Ok(None) => break,
                Err(e) => {
                    // What was copied so far is still worth its checkpoint.
                    self.drop_compacted(&done, moved)?;
                    return Err(e);
                }
            }
        }
        self.drop_compacted(&done, moved)?;
        Ok(done.len())
    }

    /// After the live records of segments `ids` were copied (`moved` bytes in all): make the
    /// copies durable and save the index (the originals must not disappear before), then remove
    /// the segments.
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

    /// Copy the live records of sealed segment `id` to the end of the log. Returns the bytes
    /// written, or `None` when it stopped early (close requested, a clear that must wait) or
    /// the segment is not sealed. A segment that is gone has nothing to copy.
    ///
    /// Puts (plain or in a batch) are only noted during the scan (shard, tag, offset) and
    /// checked against the index afterwards, one read lock per shard; only the live ones are
    /// read again and copied. A segment worth compacting is mostly dead records, and a lock per
    /// record moved the shards' lock lines between the compacting core and the writers'.
    /// (`recode` rewrites every value, so then each record goes to `relocate` as it is met.)
    pub(super) fn relocate_segment(
        &self,
        id: u32,
        recode: bool,
        rate: Option<u64>,
    ) -> Result<Option<u64>> {
        let Some(seg) = self.log.segs.load().get(id).cloned() else {
            return Ok(Some(0));
        };
        if !seg.sealed.load(Ordering::Acquire) {
            return Ok(None);
        }
        if self.log.large_pending(&seg) {
            return Ok(None);
        }
        let has_older = self.may_hide(&seg);
        // A copy keeps its record's seq but goes to this thread's lane, which a crash cuts
        // apart from the lane the record came from: it must not reach the disk before the
        // records written ahead of its original, or a crash could keep a writer's later write
        // (the copy) and lose earlier ones (records of its lane not yet synced, or in segments
        // whose names are not durable yet). So the log is synced, once, before the first copy:
        // the segment is sealed, so its records and everything before them in every lane are
        // then durable.
        let synced = std::cell::Cell::new(false);
        let durable = || -> Result<()> {
            if !synced.replace(true) {
                self.log.sync_now()?;
            }
            Ok(())
        };
        let started = Instant::now();
        let mut moved = 0u64;
        let mut paced = 0u64;
        let mut seen = 0u32;
        let mut aborted = false;
        let end = seg.flushed();
        // (keyspace, shard, tag, offset) of each put met.
        let mut puts: Vec<(u64, u32, u32, u32)> = Vec::new();
        let mut one = |off: u64, h: &Header, rec: &[u8], moved: &mut u64| -> Result<()> {
            if h.typ == T_PUT && !recode {
                let (shard, tag) = self.hash(&rec[h.key_off..h.key_off + h.klen]);
                puts.push((h.keyspace, shard as u32, tag, off as u32));
            } else {
                durable()?;
                *moved += self.relocate_any(&seg, off, h, rec, has_older, recode)?;
            }
            Ok(())
        };
        let mut bytes = crate::log::recovery::SegBytes {
            log: &self.log,
            seg: &seg,
        };
        let scanned = scan::scan(
            &mut bytes,
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
                    // Every 256 records (a few tens of microseconds of scanning), let a waiting
                    // thread have the core: otherwise a worker that this thread preempted waits
                    // out the rest of its time slice, which showed in the workers' p99 latency.
                    std::thread::yield_now();
                }
                match h.typ {
                    T_PUT | T_DELETE => one(off, h, rec, &mut moved)?,
                    T_BATCH => {
                        for_each_sub(rec, h, |pos, sh, srec| {
                            one(off + pos as u64, sh, srec, &mut moved)
                        })?;
                    }
                    _ => {
                        if has_older {
                            // Older segments still hold records this clear hides: not yet.
                            aborted = true;
                            return Ok(false);
                        }
                    }
                }
                pace(rate, moved, &mut paced, started);
                Ok(true)
            },
        )?;
        if aborted {
            return Ok(None);
        }
        let damage = scanned.damage.first().map(|d| d.off);
        if let Some(off) = damage.or(scanned.tail.as_ref().map(|t| t.off)) {
            // A damaged record in a sealed segment: the segment must stay, with the damaged
            // bytes (`check` reports them, `repair` salvages around them). Background
            // compaction leaves it alone from now on.
            self.damaged.lock().push(id);
            return Err(corrupt_at(
                id,
                off,
                "damaged record; the segment was not compacted",
            ));
        }
        puts.sort_unstable_by_key(|p| (p.0, p.1));
        let mut live: Vec<u32> = Vec::new();
        for group in puts.chunk_by(|a, b| (a.0, a.1) == (b.0, b.1)) {
            // A put of a keyspace this database does not know is kept (`check` reports it).
            let kept = self.with_space(group[0].0, |sp| {
                let tbl = sp.excl(group[0].1 as usize);
                group
                    .iter()
                    .filter(|&&(_, _, tag, off)| tbl.contains(&Slot { tag, seg: id, off }))
                    .map(|p| p.3)
                    .collect::<Vec<u32>>()
            });
            match kept {
                Some(k) => live.extend(k),
                None => {
                    self.damaged.lock().push(id);
                    return Err(corrupt_at(
                        id,
                        group[0].3 as u64,
                        "a record of a keyspace no catalog record names; the segment was not \
                         compacted",
                    ));
                }
            }
        }
        // Read again in the order they lie in the file, a chunk at a time. The segment is
        // sealed (its bytes never change) and cannot be removed while this thread holds the
        // maintenance lock, so no shard lock is needed to read it; `relocate` checks under the
        // shard's lock that each record is still live.
        live.sort_unstable();
        let mut reader = ChunkReader::new(self, &seg, end);
        for (i, &off) in live.iter().enumerate() {
            if i % 256 == 255 && *self.log.stop.lock() {
                return Ok(None);
            }
            let (h, rec) = reader.record(off as u64)?;
            durable()?;
            moved += self.relocate_any(&seg, off as u64, &h, rec, has_older, recode)?;
            pace(rate, moved, &mut paced, started);
        }
        Ok(Some(moved))
    }

    /// Whether a segment that existed while `seg` was written still exists: then a delete or
    /// clear record of `seg` may still be hiding records in it.
    pub(super) fn may_hide(&self, seg: &Segment) -> bool {
        let horizon = seg.horizon.load(Ordering::Acquire);
        self.log
            .segs
            .load()
            .segs
            .values()
            .any(|s| s.id != seg.id && s.id < horizon)
    }

    /// `relocate` in the index of the record's keyspace.
    fn relocate_any(
        &self,
        seg: &Segment,
        off: u64,
        h: &Header,
        rec: &[u8],
        has_older: bool,
        recode: bool,
    ) -> Result<u64> {
        if h.keyspace == self.ks {
            return self.relocate(seg, off, h, rec, has_older, recode);
        }
        self.with_space(h.keyspace, |sp| {
            sp.relocate(seg, off, h, rec, has_older, recode)
        })
        .unwrap_or_else(|| {
            self.damaged.lock().push(seg.id);
            Err(corrupt_at(
                seg.id,
                off,
                "a record of a keyspace no catalog record names; the segment was not \
                     compacted",
            ))
        })
    }

    /// Relocate one record of a segment being compacted, if it is still needed. Returns the
    /// bytes written.
    pub(super) fn relocate(
        &self,
        seg: &Segment,
        off: u64,
        h: &Header,
        rec: &[u8],
        has_older: bool,
        recode: bool,
    ) -> Result<u64> {
        let key = &rec[h.key_off..h.key_off + h.klen];
        let (shard, tag) = self.hash(key);
        with_writer!(self, shard, self.writer(shard, tag), tbl => {
            self.relocate_in(tbl, tag, seg, off, h, rec, has_older, recode)
        })
    }

    /// `relocate` with the key's run held.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn relocate_in(
        &self,
        tbl: &mut impl KeyIndex,
        tag: u32,
        seg: &Segment,
        off: u64,
        h: &Header,
        rec: &[u8],
        has_older: bool,
        recode: bool,
    ) -> Result<u64> {
        let key = &rec[h.key_off..h.key_off + h.klen];
        let lane = self.log.my_lane();
        let here = Slot {
            tag,
            seg: seg.id,
            off: off as u32,
        };
        if h.typ == T_DELETE {
            // Needed only to hide an older put in an older segment, and only while the key
            // has no newer live record.
            if !has_older || self.find(tbl, tag, key, Want::Slot)?.is_some() {
                return Ok(0);
            }
            self.write_delete(lane, key, h.fields.seq, Acct::Caller)?;
            return Ok(key.len() as u64 + 8);
        }
        if !tbl.cands(tag).any(|s| s == here) {
            return Ok(0); // dead
        }
        if is_expired(h.fields.expires, now_secs()) {
            self.remove_slot(tbl, here, h.len);
            self.counters
                .expired_reclaimed
                .fetch_add(1, Ordering::Relaxed);
            if has_older {
                let seq = tbl.next_seq(key);
                self.write_delete(lane, key, seq, Acct::Caller)?;
            }
            return Ok(0);
        }
        let value;
        let (stored, fields) = if recode
            && (h.fields.compression != 0 || self.compression.load(Ordering::Relaxed) != 0)
        {
            value = decode_value(h, rec)?;
            let (s, o, len) = self.write_put(
                lane,
                key,
                &self.stored_form(&value),
                h.fields.flags,
                h.fields.expires,
                (h.fields.seq, h.fields.version),
                Acct::Caller,
            )?;
            self.set_slot(tbl, tag, Some((here, h.len)), s, o, len);
            return Ok(len as u64);
        } else {
            (&rec[h.value_off()..h.len], h.fields)
        };
        let mut hdr = Vec::with_capacity(32);
        format::encode_put_header_in(&mut hdr, self.ks, key.len(), stored.len(), &fields);
        let (s, o) = {
            let mut tail = self.log.tails[lane].0.lock();
            self.log.append(&mut tail, &[&hdr, key, stored], true)?
        };
        let len = hdr.len() + key.len() + stored.len();
        self.set_slot(tbl, tag, Some((here, h.len)), s, o, len);
        Ok(len as u64)
    }

    /// The sealed segments past the compaction threshold (and not found damaged), with the
    /// share of each that is dead.
    pub(super) fn compactable(&self) -> Vec<(u32, f64)> {
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
                (dead >= threshold && !self.log.large_pending(s)).then_some((s.id, dead))
            })
            .collect()
    }

    /// The sealed segment most worth compacting, not in `skip`, if any is past the threshold.
    pub(super) fn compaction_candidate(&self, skip: &[u32]) -> Option<u32> {
        self.compactable()
            .into_iter()
            .filter(|(id, _)| !skip.contains(id))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(id, _)| id)
    }

    /// Drop expired records from the index (the space is reclaimed by compaction).
    pub(super) fn sweep_expired(&self) -> Result<()> {
        if self.expiring.load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        let now = now_secs();
        let mut any_left = false;
        for i in 0..NSHARDS {
            let mut tbl = self.excl(i);
            let slots: Vec<Slot> = tbl.iter().collect();
            for s in slots {
                let exp = self.with_record(s.seg, s.off as u64, |h, _| h.fields.expires)?;
                if is_expired(exp, now) {
                    let len = self.with_record(s.seg, s.off as u64, |h, _| h.len)?;
                    self.remove_slot(&mut tbl, s, len);
                    self.counters
                        .expired_reclaimed
                        .fetch_add(1, Ordering::Relaxed);
                } else if exp != 0 {
                    any_left = true;
                }
            }
        }
        if !any_left {
            self.expiring.store(0, Ordering::Relaxed);
        }
        Ok(())
    }
}
