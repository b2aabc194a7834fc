//! `Store` for the on-disk hash: every operation of the trait, and the whole-database ones
//! (vanish, optimize, copy, close).

use super::*;

impl DiskHash {
    pub(super) fn unlock(&self, i: usize, tbl: Excl<'_>) {
        self.inner.unlock(i, tbl)
    }

    pub(super) fn stop_background(&self) {
        *self.inner.log.stop.lock() = true;
        self.inner.log.stop_cv.notify_all();
        self.inner.log.fill_cv.notify_all();
        for h in std::mem::take(&mut *self.bg.lock()) {
            let _ = h.join();
        }
    }

    /// `view` and `view_shared`: values of `min` bytes or more that lie in a segment's mapping
    /// are shown pinned.
    #[inline]
    pub(super) fn view_with(
        &self,
        key: &[u8],
        min: usize,
        mut f: impl FnMut(Shown<'_>, Meta),
    ) -> Result<bool> {
        let inner = &self.inner;
        inner.log.check_open()?;
        let (shard, tag) = inner.locate(key);
        // Read in place under the shard lock, so compaction cannot move the record meanwhile.
        let seen = with_reader!(inner, shard, tag, tbl => inner.find_with(tbl, tag, key, |slot, h, rec| {
            let meta = meta_of(h);
            if meta.expires != 0 && is_expired(meta.expires, now_secs()) {
                return Ok(false);
            }
            if h.fields.compression != 0 {
                f(Shown::Bytes(&decode_value(h, rec)?), meta);
                return Ok(true);
            }
            let value = &rec[h.value_off()..h.len];
            match (value.len() >= min).then(|| inner.pin(slot.seg, value)) {
                Some(Some(p)) => f(Shown::Pinned(p), meta),
                _ => f(Shown::Bytes(value), meta),
            }
            Ok(true)
        }))?;
        Ok(seen == Some(true))
    }

    /// A put of a large value: the record is written without holding the shard lock, so
    /// readers and writers of the shard's other keys never wait behind a long write. The seq is
    /// taken first (that fixes the put's place in the key's history); the slot is installed
    /// afterwards unless a later write of the key came first, which the in-flight entry records.
    pub(super) fn put_large(
        &self,
        key: &[u8],
        value: &[u8],
        flags: u32,
        expires: u64,
    ) -> Result<Meta> {
        let begun = self.large_put_begin(key, value, flags, expires);
        let seq = begun.seq;
        self.large_put_end(key, begun)?;
        self.inner.log.after_write()?;
        Ok(Meta {
            flags,
            expires,
            version: seq,
        })
    }

    /// The first half of `put_large`: take the key's next seq (noting the put as in flight in
    /// its shard) and write the record, with no lock held meanwhile.
    pub(super) fn large_put_begin(
        &self,
        key: &[u8],
        value: &[u8],
        flags: u32,
        expires: u64,
    ) -> LargePut {
        let inner = &self.inner;
        let (shard, tag) = inner.hash(key);
        let seq = {
            let mut tbl = self.inner.excl(shard);
            let seq = tbl.next_seq(key);
            tbl.inflight.push(Inflight {
                key: key.into(),
                seq,
                superseded: false,
            });
            seq
        };
        let stored = inner.stored_form(value);
        let lane = inner.log.my_lane();
        let written = inner.write_put(lane, key, &stored, flags, expires, (seq, 0), Acct::Large);
        LargePut {
            shard,
            tag,
            lane,
            seq,
            written,
        }
    }

    /// The second half of `put_large`: point the index at the record, unless a later write of
    /// the key (or a `vanish`) came first.
    pub(super) fn large_put_end(&self, key: &[u8], p: LargePut) -> Result<()> {
        let inner = &self.inner;
        let mut tbl = inner.excl(p.shard);
        let pos = tbl.inflight.iter().position(|f| f.seq == p.seq);
        let superseded = pos.is_some_and(|i| tbl.inflight.swap_remove(i).superseded);
        let (s, o, len) = p.written?;
        let installed = if superseded {
            Ok(())
        } else {
            inner.find(&tbl, p.tag, key, Want::Slot).map(|found| {
                let old = found.map(|f| (f.slot, f.len));
                inner.set_slot(&mut tbl, p.tag, old, s, o, len);
            })
        };
        // After the slot (its segment may be compacted from now on), and also when it could
        // not be installed.
        inner.log.large_put_done(p.lane, s, o);
        installed?;
        self.unlock(p.shard, tbl);
        Ok(())
    }

    /// `accept` with the key's run held: (what it returns, whether it wrote).
    pub(super) fn accept_in<'v>(
        &self,
        tbl: &mut impl KeyIndex,
        tag: u32,
        key: &[u8],
        visitor: &mut dyn FnMut(Option<Current<'_>>) -> Decision<'v>,
    ) -> Result<(Option<Meta>, bool)> {
        let inner = &self.inner;
        let found = inner.find(tbl, tag, key, Want::Value)?;
        let now = now_secs();
        let live = found.as_ref().filter(|f| !is_expired(f.meta.expires, now));
        let cur = live.map(|f| Current {
            value: f.value.as_deref().unwrap_or_default(),
            meta: f.meta,
        });
        let decision = visitor(cur);
        let old = found.as_ref().map(|f| (f.slot, f.len));
        let result = match decision {
            Decision::Keep => return Ok((live.map(|f| f.meta), false)),
            Decision::Put {
                value,
                flags,
                expires,
            } => {
                check_sizes(key, value.len())?;
                let stored = inner.stored_form(&value);
                Some(inner.put_locked(tbl, tag, key, old, &stored, flags, expires, None)?)
            }
            // A touch rewrites the record with the new expiry and keeps its version (as
            // memcached keeps the cas).
            Decision::Touch { expires } => match live {
                None => return Ok((None, false)),
                Some(f) => {
                    let stored = inner.stored_form(f.value.as_deref().unwrap_or_default());
                    let (flags, version) = (f.meta.flags, Some(f.meta.version));
                    let meta =
                        inner.put_locked(tbl, tag, key, old, &stored, flags, expires, version);
                    Some(meta?)
                }
            },
            Decision::Remove => {
                if let Some((o, len)) = old {
                    let seq = tbl.next_seq(key);
                    let acct = Acct::Lane {
                        old: Some((o.seg, len)),
                    };
                    inner.write_delete(inner.log.my_lane(), key, seq, acct)?;
                    tbl.remove(&o);
                }
                None
            }
        };
        Ok((result, true))
    }

    /// `out` with the key's run held: the removed record's slot and metadata, if it had one.
    pub(super) fn out_in(
        &self,
        tbl: &mut impl KeyIndex,
        tag: u32,
        key: &[u8],
    ) -> Result<Option<Found>> {
        let inner = &self.inner;
        let f = match inner.delete_appending_first(tbl, tag, key)? {
            Some(Some(f)) => f,
            Some(None) => return Ok(None),
            None => {
                let Some(f) = inner.find(tbl, tag, key, Want::Slot)? else {
                    return Ok(None);
                };
                let seq = tbl.next_seq(key);
                let acct = Acct::Lane {
                    old: Some((f.slot.seg, f.len)),
                };
                inner.write_delete(inner.log.my_lane(), key, seq, acct)?;
                f
            }
        };
        tbl.remove(&f.slot);
        Ok(Some(f))
    }

    /// Stop as a killed process would: no flush, no sync, no checkpoint. For crash tests (the
    /// simulated file system then decides what reached the disk).
    #[doc(hidden)]
    pub fn abandon(self) {
        self.stop_background();
        self.inner.log.closed.store(true, Ordering::Release);
        self.inner.spaces.clear();
        self.inner.lock.lock().take();
    }

    /// Roll to a new segment and compact every older one (used by `optimize`).
    pub(super) fn rewrite_all(&self, recode: bool) -> Result<()> {
        let inner = &self.inner;
        let _m = inner.maint.lock();
        for t in inner.log.tails.iter() {
            let mut tail = t.0.lock();
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
        for id in ids {
            inner.compact_segment(id, recode, None)?;
        }
        inner.checkpoint()
    }
}

impl Drop for DiskHash {
    fn drop(&mut self) {
        if self.is_space() {
            return; // a keyspace's handle: the database stays open
        }
        let _ = self.close();
    }
}

impl Store for DiskHash {
    fn get(&self, key: &[u8]) -> Result<Option<Record>> {
        self.inner.log.check_open()?;
        let inner = &self.inner;
        let (shard, tag) = inner.locate(key);
        // The record is made in the lookup's closure: nothing else is built or moved.
        let found = with_reader!(inner, shard, tag, tbl => inner.find_with(tbl, tag, key, |_, h, rec| {
            let meta = meta_of(h);
            if meta.expires != 0 && is_expired(meta.expires, now_secs()) {
                return Ok(None);
            }
            Ok(Some(Record {
                value: decode_value(h, rec)?,
                meta,
            }))
        }))?;
        Ok(found.flatten())
    }

    fn view(&self, key: &[u8], f: &mut dyn FnMut(&[u8], Meta)) -> Result<bool> {
        self.view_with(key, usize::MAX, |v, m| f(v.bytes(), m))
    }

    fn view_shared(
        &self,
        key: &[u8],
        min: usize,
        f: &mut dyn FnMut(Shown<'_>, Meta),
    ) -> Result<bool> {
        self.view_with(key, min, f)
    }

    fn accept<'v>(
        &self,
        key: &[u8],
        visitor: &mut dyn FnMut(Option<Current<'_>>) -> Decision<'v>,
    ) -> Result<Option<Meta>> {
        let inner = &self.inner;
        inner.log.check_writable()?;
        check_sizes(key, 0)?;
        let (shard, tag) = inner.locate(key);
        let (result, wrote) = with_writer!(self, shard, inner.writer(shard, tag), tbl => {
            self.accept_in(tbl, tag, key, visitor)
        })?;
        if wrote {
            inner.log.after_write()?;
        }
        Ok(result)
    }

    fn put_with(&self, key: &[u8], value: &[u8], flags: u32, expires: u64) -> Result<Meta> {
        let inner = &self.inner;
        inner.log.check_writable()?;
        check_sizes(key, value.len())?;
        if value.len() >= LARGE_VALUE {
            return self.put_large(key, value, flags, expires);
        }
        // Compressed (when configured) before the shard is locked.
        let stored = inner.stored_form(value);
        let (shard, tag) = inner.locate(key);
        let meta = match inner.put_fast(shard, tag, key, &stored, flags, expires) {
            Some(meta) => meta,
            None => {
                let mut tbl = inner.excl(shard);
                let meta = inner.put_replacing(&mut tbl, tag, key, &stored, flags, expires);
                self.unlock(shard, tbl);
                meta
            }
        };
        let meta = meta?;
        inner.log.after_write()?;
        Ok(meta)
    }

    fn out(&self, key: &[u8]) -> Result<bool> {
        let inner = &self.inner;
        inner.log.check_writable()?;
        check_sizes(key, 0)?;
        let (shard, tag) = inner.locate(key);
        let f = match inner.out_fast(shard, tag, key) {
            Some(f) => f,
            None => with_writer!(self, shard, inner.writer(shard, tag), tbl => {
                self.out_in(tbl, tag, key)
            }),
        }?;
        let Some(f) = f else {
            return Ok(false);
        };
        inner.log.after_write()?;
        Ok(f.meta.expires == 0 || !is_expired(f.meta.expires, now_secs()))
    }
    fn write_batch(&self, ops: &[BatchOp]) -> Result<()> {
        let ops: Vec<(usize, &BatchOp)> = ops.iter().map(|op| (0, op)).collect();
        Inner::batch_across(&[&self.inner], &ops)
    }

    fn keyspace(&self, name: &str, params: &str) -> Result<Arc<dyn Store>> {
        self.keyspace_of(name, params)
    }

    fn write_across(&self, ops: &[(&str, BatchOp)]) -> Result<()> {
        self.write_across_of(ops)
    }

    fn keyspaces(&self) -> Vec<(String, String)> {
        if self.is_space() {
            return Vec::new();
        }
        // A hash keyspace takes no parameters: its name makes it again as it is.
        let mut named = self.inner.spaces.named();
        named.sort_by_key(|(_, id)| *id);
        named.into_iter().map(|(n, _)| (n, String::new())).collect()
    }

    fn cursor(&self) -> Result<Box<dyn Cursor + '_>> {
        self.inner.log.check_open()?;
        Ok(Box::new(crate::cursor::KindCursor::new(
            self,
            HashCursor::new(self),
        )))
    }

    fn count(&self) -> u64 {
        self.inner.count()
    }

    fn size(&self) -> u64 {
        let ckpt = self
            .inner
            .log
            .vfs
            .open(&self.inner.log.dir.join(CKPT_NAME), false)
            .and_then(|f| f.len())
            .unwrap_or(0);
        self.inner.log.data_size() + ckpt
    }

    fn sync(&self) -> Result<()> {
        self.inner.log.check_writable()?;
        self.inner.log.group_commit()
    }

    fn optimize(&self, params: &str) -> Result<()> {
        self.inner.log.check_writable()?;
        if self.is_space() {
            // The log is the database's: a keyspace's optimize compacts it, with every
            // keyspace's records, and changes no parameter.
            Params::parse(params)?.allow_only("optimize of a keyspace of a .kh", &[])?;
            return self.rewrite_all(false);
        }
        let p = Params::parse(params)?;
        p.allow_only("the hash database (.kh)", PARAMS)?;
        // Only what optimize applies to the database is taken (README: nothing is ignored).
        for (k, _) in p.items() {
            match k.as_str() {
                "compress" | "bnum" => {}
                "lanes" => {
                    return Err(Error::InvalidParam(
                        "`lanes` cannot be changed by optimize: it is fixed when the database is \
                         created (export the records and import them into a new database \
                         created with the lanes wanted)"
                            .into(),
                    ))
                }
                other => {
                    return Err(Error::InvalidParam(format!(
                        "`{other}` cannot be changed by optimize: it tunes one open, not the \
                         database; give it when opening (`PATH.kh#{other}=…`)"
                    )))
                }
            }
        }
        let newcfg = Config::from_params(&p, Some(&self.inner.cfg.lock()))?;
        let comp = p.compression()?;
        // The choice is stored first: it holds for later writes and opens, whatever the
        // rewrite below finds.
        {
            let mut st = self.stored.lock();
            if let Some(mut s) = *st {
                s.compress = comp.unwrap_or(s.compress);
                if p.size("bnum")?.is_some() {
                    s.bnum = newcfg.bnum;
                }
                if Some(s) != *st {
                    crate::meta::write(&*self.inner.log.vfs, &self.inner.log.dir, &s.descriptor())?;
                    *st = Some(s);
                }
            }
        }
        let recode = match comp {
            Some(c) => {
                let changed = c as u8 != self.inner.compression.load(Ordering::Relaxed);
                self.inner.compression.store(c as u8, Ordering::Relaxed);
                for s in self.inner.spaces.all() {
                    s.compression.store(c as u8, Ordering::Relaxed);
                }
                changed
            }
            None => false,
        };
        let bnum = newcfg.bnum;
        *self.inner.cfg.lock() = newcfg;
        if bnum > 0 {
            for i in 0..NSHARDS {
                let mut t = self.inner.excl(i);
                let want = (bnum.min(MAX_PRESIZE) as usize / NSHARDS).saturating_sub(t.len());
                t.reserve(want);
            }
        }
        self.inner.note_tables();
        self.rewrite_all(recode)
    }

    fn vanish(&self) -> Result<()> {
        let inner = &self.inner;
        inner.log.check_writable()?;
        if self.is_space() || inner.spaces.any() {
            // The other keyspaces keep their records: this one's are deleted.
            return self.vanish_by_deletes();
        }
        let _m = inner.maint.lock();
        let mut guards: Vec<_> = (0..NSHARDS).map(|i| inner.excl(i)).collect();
        // Each lane that has a log starts a new segment with a clear record: recovery forgets
        // everything of a lane before its clear (once it finds the clears of every lane), so
        // the old segments can go in any order.
        {
            // All lanes at once, so that no checkpoint position falls between the clears.
            let mut tails: Vec<_> = inner.log.tails.iter().map(|t| t.0.lock()).collect();
            let used = tails.iter().filter(|t| t.seg.id != 0).count();
            let id = random_u64();
            for tail in tails.iter_mut() {
                // Large puts in flight now come before the clear (see below).
                tail.large.clear();
            }
            for tail in tails.iter_mut().filter(|t| t.seg.id != 0) {
                inner.log.roll(tail)?;
                let mut c = Vec::new();
                format::encode_clear(&mut c, id, used);
                inner.log.append(tail, &[&c], true)?;
            }
        }
        for (i, g) in guards.iter_mut().enumerate() {
            g.clear();
            // A large put in flight wrote its record in a segment about to go: it comes before
            // the clear, and must not point the index at its record afterwards.
            for f in &mut g.inflight {
                f.superseded = true;
            }
            inner.note_table(i, g);
        }
        inner.expiring.store(0, Ordering::Relaxed);
        inner.log.sync_now()?;
        let old: Vec<u32> = inner
            .log
            .segs
            .load()
            .segs
            .values()
            .filter(|s| s.sealed.load(Ordering::Acquire))
            .map(|s| s.id)
            .collect();
        drop(guards);
        inner.checkpoint()?;
        inner.drop_segments(&old)
    }

    fn copy_to(&self, dest: &Path) -> Result<()> {
        let inner = &self.inner;
        inner.log.check_open()?;
        if self.is_space() {
            // A new database of this keyspace's records.
            let params = Params::parse(&format!("lanes={}", inner.log.lanes))?;
            repair::copy_live(self, dest, &params, Arc::new(OsVfs)).map(|_| ())?;
            return Ok(());
        }
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
        // The copy is the same database: the same stored parameters (written last).
        let stored = self.stored.lock().unwrap_or(stored::Stored {
            lanes: inner.log.lanes,
            compress: Compression::from_code(inner.compression.load(Ordering::Relaxed))
                .unwrap_or(Compression::None),
            bnum: inner.cfg.lock().bnum,
        });
        // Where each lane ends, then the index: the copy replays its logs from these positions.
        let replay = inner.log.lane_positions(false);
        let shards = inner.snapshot_shards();
        let spaces: Vec<SpaceSnapshot> = inner
            .spaces
            .all()
            .iter()
            .map(|s| (s.ks, s.snapshot_shards()))
            .collect();
        let ends: Vec<(u32, u64)> = inner
            .log
            .tails
            .iter()
            .map(|t| {
                let mut t = t.0.lock();
                inner.log.flush(&mut t).map(|_| (t.seg.id, t.seg.flushed()))
            })
            .collect::<Result<_>>()?;
        // Segments up to each lane's end are immutable up to these lengths: copy them.
        let segs = inner.log.segs.load_full();
        let mut buf = Vec::new();
        for (id, seg) in segs.segs.iter() {
            let (end_seg, end_off) = ends[seg.lane];
            if *id > end_seg {
                continue; // started after the copy began
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
        // The copy's checkpoint: the snapshot and where replay starts. It lists no segment
        // lengths: the copy's segments are exactly what was copied.
        write_checkpoint(
            &OsVfs,
            dest,
            inner.hash_seed.load(Ordering::Relaxed),
            &replay,
            &[],
            shards.iter().map(|s| s.1.len()).sum::<usize>() >= PARALLEL_CKPT,
            |i, v| {
                let (seq, slots) = &shards[i];
                v.extend_from_slice(slots);
                *seq
            },
            &spaces,
            || Ok(()),
        )?;
        // Last: a copy cut short is never marked as a database.
        crate::meta::write(&OsVfs, dest, &stored.descriptor())
    }

    fn check(&self) -> Result<CheckReport> {
        let inner = &self.inner;
        inner.log.check_open()?;
        let _m = inner.maint.lock();
        inner.log.flush_all()?;
        inner.audit()
    }

    fn kind(&self) -> Kind {
        Kind::DiskHash
    }

    fn for_each_record(&self, f: &mut crate::store::RecordVisitor<'_>) -> Result<u64> {
        self.each_live(f)
    }

    /// The path; what the database stores (`stored.*`, see `stored`); what this open chose
    /// (`open.*`: its parameters, or the stored value it took, or the default); `segments`.
    fn describe(&self) -> Vec<(String, String)> {
        let c = self.inner.cfg.lock().clone();
        let comp = Compression::from_code(self.inner.compression.load(Ordering::Relaxed))
            .unwrap_or(Compression::None);
        let mut v: Vec<(String, String)> =
            vec![("path".into(), self.inner.log.dir.display().to_string())];
        let mut named = self.inner.spaces.named();
        if !named.is_empty() {
            named.sort_by_key(|n| n.1);
            let names: Vec<String> = named.into_iter().map(|n| n.0).collect();
            v.push(("keyspaces".into(), names.join(",")));
        }
        match *self.stored.lock() {
            Some(s) => v.extend([
                ("stored.lanes".into(), s.lanes.to_string()),
                ("stored.compress".into(), s.compress.name().into()),
                ("stored.bnum".into(), s.bnum.to_string()),
            ]),
            None => v.push((
                "stored".into(),
                format!(
                    "none (a database made before {}; written at its next writable open)",
                    crate::meta::META_NAME
                ),
            )),
        }
        v.extend([
            ("open.sync".into(), c.sync.describe()),
            ("open.compress".into(), comp.name().into()),
            ("open.bnum".into(), c.bnum.to_string()),
            ("open.segsiz".into(), c.segsiz.to_string()),
            ("open.bufsiz".into(), c.bufsiz.to_string()),
            ("open.msiz".into(), c.msiz.to_string()),
            ("open.compact".into(), c.compact.to_string()),
            ("open.ckptsiz".into(), c.ckptsiz.to_string()),
            (
                "segments".into(),
                self.inner.log.segs.load().segs.len().to_string(),
            ),
        ]);
        v
    }

    fn close(&self) -> Result<()> {
        if self.inner.log.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        if self.is_space() {
            // A keyspace's close closes its database (its background threads are told to
            // stop; the database's handle joins them).
            let Some(root) = self.inner.root() else {
                return Ok(());
            };
            *root.log.stop.lock() = true;
            root.log.stop_cv.notify_all();
            root.log.fill_cv.notify_all();
            return root.close_files();
        }
        self.stop_background();
        self.inner.close_files()
    }

    fn damage_found(&self) -> Vec<crate::store::Damaged> {
        self.inner.findings.lock().clone()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = &self.inner.counters;
        let l = &self.inner.log.counters;
        vec![
            ("compactions", c.compactions.load(Ordering::Relaxed)),
            ("relocated_bytes", c.relocated_bytes.load(Ordering::Relaxed)),
            ("checkpoints", c.checkpoints.load(Ordering::Relaxed)),
            (
                "expired_reclaimed",
                c.expired_reclaimed.load(Ordering::Relaxed),
            ),
            (
                "recovery_truncated_bytes",
                l.truncated_bytes.load(Ordering::Relaxed),
            ),
            ("syncs", l.syncs.load(Ordering::Relaxed)),
            (
                "commit_waits",
                self.inner.log.commit.waits.load(Ordering::Relaxed),
            ),
        ]
    }
}

impl Inner {
    /// Close the database (keyspace 0's `Inner`): its files end where their records do, a
    /// checkpoint when anything changed, every call from now on `Closed`.
    pub(super) fn close_files(&self) -> Result<()> {
        let inner = self;
        let unchanged =
            inner.appended_total() == 0 && inner.log.vfs.exists(&inner.log.dir.join(CKPT_NAME));
        let res = if inner.log.readonly || inner.log.poisoned.lock().is_some() {
            Ok(())
        } else {
            let _m = inner.maint.lock();
            // The files end where their records do (the cut is synced by the checkpoint).
            let trimmed = inner.log.tails.iter().try_for_each(|t| {
                let mut t = t.0.lock();
                inner.log.mark(&mut t);
                inner.log.trim_tail(&mut t)
            });
            match trimmed {
                Err(e) => Err(e),
                Ok(()) if unchanged => inner.log.sync_now(),
                Ok(()) => inner.checkpoint(),
            }
        };
        inner.log.closed.store(true, Ordering::Release);
        // The keyspaces' indexes hold the log (and each the keyspace list): let them go.
        inner.spaces.clear();
        inner.reclaim();
        inner.lock.lock().take();
        res
    }
}
