//! Writing: the lanes' buffers and segments (append, flush, roll, the filler's zeros ahead of
//! `sync=always` logs, markers), records pointed at from the index, and durability (group
//! commit, syncs).

use super::*;

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
            dup: 0,
        };
        let hdr = HeaderBuf::put_in(self.ks, key.len(), stored.bytes.len(), &fields);
        if expires != 0 {
            self.expiring.fetch_add(1, Ordering::Relaxed);
        }
        let len = hdr.as_slice().len() + key.len() + stored.bytes.len();
        let mut tail = self.log.tails[lane].0.lock();
        let (seg, off) = self
            .log
            .append(&mut tail, &[hdr.as_slice(), key, &stored.bytes], true)?;
        self.log.note_full(lane, &tail);
        if let Acct::Large = acct {
            // Under the lane lock, which a checkpoint takes to read the lane's positions and
            // compaction to look for pending records (`large_pending`).
            tail.large.push((seg, off));
        }
        if let Acct::Lane { old } = acct {
            self.log.note_live(&mut tail, seg, len as i64);
            if let Some((oseg, olen)) = old {
                self.log.note_live(&mut tail, oseg, -(olen as i64));
            }
        }
        Ok((seg, off, len))
    }

    pub(super) fn write_delete(&self, lane: usize, key: &[u8], seq: u64, acct: Acct) -> Result<()> {
        let hdr = HeaderBuf::delete_in(self.ks, key.len(), seq, 0);
        let mut tail = self.log.tails[lane].0.lock();
        self.log.append(&mut tail, &[hdr.as_slice(), key], true)?;
        self.log.note_full(lane, &tail);
        if let Acct::Lane {
            old: Some((oseg, olen)),
        } = acct
        {
            self.log.note_live(&mut tail, oseg, -(olen as i64));
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
        let lane = self.log.my_lane();
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
        let lane = self.log.my_lane();
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
        self.log.add_live(seg, len as i64);
        if let Some((o, olen)) = old {
            self.log.add_live(o.seg, -(olen as i64));
        }
    }

    pub(super) fn remove_slot(&self, tbl: &mut impl KeyIndex, old: Slot, len: usize) {
        if tbl.remove(&old) {
            self.log.add_live(old.seg, -(len as i64));
        }
    }
}
