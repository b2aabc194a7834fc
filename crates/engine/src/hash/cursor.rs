//! The hash's cursor: the log in order, each record the index still points at.

use super::*;

/// Iterates the log in order and yields each record the index still points at.
pub(super) struct HashCursor<'a> {
    pub(super) db: &'a DiskHash,
    /// Every shard's seq when the cursor was made: a record version written later is not
    /// returned. Without this bound a client that rewrites each record it visits (append-only
    /// log: the new version lands ahead of the cursor) would iterate forever. Compaction keeps
    /// a record's seq when it relocates it, so unmodified records are still found.
    pub(super) seqs: Box<[u64]>,
    pub(super) seg: u32,
    pub(super) off: u64,
    pub(super) pending: std::collections::VecDeque<(Vec<u8>, Record)>,
    pub(super) done: bool,
    /// Damaged regions passed over.
    pub(super) damaged: u64,
}

impl HashCursor<'_> {
    /// Scan forward from the position until some live records are collected or the log ends.
    fn fill(&mut self) -> Result<()> {
        let inner = &self.db.inner;
        while self.pending.is_empty() && !self.done {
            let segs = inner.log.segs.load_full();
            let Some((&id, seg)) = segs.segs.range(self.seg..).next() else {
                self.done = true;
                return Ok(());
            };
            if id != self.seg {
                self.seg = id;
                self.off = SEG_HEADER_LEN as u64;
            }
            let end = inner.log.seg_end(seg);
            let now = now_secs();
            let mut collected = Vec::new();
            let mut full = false;
            let seqs = &self.seqs;
            let visit = |loc_off: u64,
                         h: &Header,
                         rec: &[u8],
                         collected: &mut Vec<(Vec<u8>, Record)>|
             -> Result<()> {
                if h.typ != T_PUT || is_expired(h.fields.expires, now) {
                    return Ok(());
                }
                let key = &rec[h.key_off..h.key_off + h.klen];
                let (shard, tag) = inner.hash(key);
                if h.fields.seq > seqs[shard] {
                    return Ok(()); // written after the cursor was made
                }
                let here = Slot {
                    tag,
                    seg: id,
                    off: loc_off as u32,
                };
                let live = with_reader!(inner, shard, tag, k => {
                    Ok::<_, Error>(k.cands(tag).any(|s| s == here))
                })?;
                if live {
                    collected.push((
                        key.to_vec(),
                        Record {
                            value: decode_value(h, rec)?,
                            meta: meta_of(h),
                        },
                    ));
                }
                Ok(())
            };
            let mut bytes = crate::log::recovery::SegBytes {
                log: &inner.log,
                seg,
            };
            let scanned = scan::scan(&mut bytes, seg.seed, self.off, end, |off, h, rec, _| {
                if h.typ == T_BATCH {
                    for_each_sub(rec, h, |pos, sh, srec| {
                        visit(off + pos as u64, sh, srec, &mut collected)
                    })?;
                } else {
                    visit(off, h, rec, &mut collected)?;
                }
                full = collected.len() >= 256;
                Ok(!full)
            })?;
            // Damage in what a read-only open serves (a writable one refuses damage): skipped,
            // counted. A damaged tail's salvaged records may be live (recovery applied them).
            let mut damaged = scanned.damage.len() as u64;
            if let Some(t) = &scanned.tail {
                damaged += 1;
                let mut buf = Vec::new();
                for &at in &t.salvaged {
                    let n = MAX_HEADER_LEN.min((end - at) as usize);
                    bytes.read(at, n, &mut buf)?;
                    if let Some(h) = format::parse_header(&buf) {
                        bytes.read(at, h.len, &mut buf)?;
                        visit(at, &h, &buf, &mut collected)?;
                    }
                }
            }
            self.damaged += damaged;
            let stop = scanned.stopped.unwrap_or(end);
            self.off = stop;
            self.pending.extend(collected);
            if stop >= end || !full {
                // End of this segment: move on if a later one exists, else the log ends here.
                match segs.segs.range(id + 1..).next() {
                    Some((&next, _)) => {
                        self.seg = next;
                        self.off = SEG_HEADER_LEN as u64;
                    }
                    None => {
                        if self.pending.is_empty() {
                            self.done = true;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

impl Cursor for HashCursor<'_> {
    fn next(&mut self) -> Result<Option<(Vec<u8>, Record)>> {
        self.db.inner.log.check_open()?;
        self.fill()?;
        Ok(self.pending.pop_front())
    }

    fn damage_skipped(&self) -> u64 {
        self.damaged
    }
}
