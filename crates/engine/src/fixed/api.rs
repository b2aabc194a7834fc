//! `Store` for the fixed-length database.

use super::cursor::FixedWalk;
use super::*;
use crate::log::format::{self, MAX_HEADER_LEN};
use crate::log::replay::loc_of;
use crate::store::{
    check_sizes, is_expired, now_secs, BatchOp, CheckReport, Current, Cursor, Decision, KeyRange,
    Kind, Meta, Record, RecordVisitor, Store,
};
use std::ops::Bound;

/// The most a batch's records may take: as much as the largest single record (see the hash).
const MAX_BATCH_BYTES: usize = crate::store::MAX_VALUE_LEN + (1 << 20);

impl FixedDb {
    /// Stop as a killed process would: no flush, no sync, no checkpoint. For crash tests.
    #[doc(hidden)]
    pub fn abandon(self) {
        self.stop_background();
        self.inner.log.closed.store(true, Ordering::Release);
        self.inner.lock.lock().take();
    }

    /// The stored width (the longest value a record may hold).
    pub fn width(&self) -> u64 {
        self.inner.width()
    }

    /// The largest id a record may have (`limsiz` and `width` as Tokyo Cabinet counts them).
    pub fn limid(&self) -> u64 {
        self.inner.limid()
    }

    /// The smallest and largest ids that have a record (0 and 0 when there is none).
    pub fn bounds(&self) -> (u64, u64) {
        (
            self.inner.min.load(Ordering::Acquire),
            self.inner.max.load(Ordering::Acquire),
        )
    }

    /// The smallest and largest ids with a record that reads (not expired; 0 and 0 when there
    /// is none): what `min` and `max` are in an interval. The records between an expired one
    /// and the sweep that reclaims it are skipped, so an interval agrees with what `get` shows.
    fn live_bounds(&self) -> Result<(u64, u64)> {
        let (min, max) = self.bounds();
        if min == 0 || self.inner.expiring.load(Ordering::Relaxed) == 0 {
            return Ok((min, max));
        }
        let now = now_secs();
        let reads = |id: u64| -> Result<bool> {
            Ok(self
                .inner
                .with_rec(id, &mut |_, m| Ok(!is_expired(m.expires, now)))?
                == Some(true))
        };
        let mut lo = min;
        loop {
            match self.inner.next_live(lo, max) {
                Some(id) if reads(id)? => break lo = id,
                Some(id) => lo = id + 1,
                None => return Ok((0, 0)),
            }
        }
        let mut hi = max;
        while let Some(id) = self.inner.prev_live(lo, hi) {
            if reads(id)? {
                return Ok((lo, id));
            }
            hi = id - 1;
        }
        Ok((lo, lo))
    }

    /// Bytes of memory the id array holds.
    pub fn index_memory(&self) -> u64 {
        self.inner.index.memory()
    }

    /// The ids `from..=to` (ascending, or descending with `desc`) a range's bounds give.
    fn range_ids(&self, range: &KeyRange<'_>) -> Result<Option<(u64, u64)>> {
        let lo = match range.from {
            Bound::Unbounded => 1,
            Bound::Included(k) => self.bound_id(k)?,
            Bound::Excluded(k) => match self.bound_id(k)?.checked_add(1) {
                Some(n) => n,
                None => return Ok(None),
            },
        };
        let hi = match range.to {
            Bound::Unbounded => id::MAX_ID,
            Bound::Included(k) => self.bound_id(k)?,
            Bound::Excluded(k) => match self.bound_id(k)?.checked_sub(1) {
                Some(n) => n,
                None => return Ok(None),
            },
        };
        Ok((lo.max(1) <= hi).then_some((lo.max(1), hi)))
    }
}

impl Drop for FixedDb {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

impl Store for FixedDb {
    fn get(&self, key: &[u8]) -> Result<Option<Record>> {
        self.inner.log.check_open()?;
        let Some(id) = self.inner.id_to_read(key)? else {
            return Ok(None);
        };
        let now = now_secs();
        let got = self.inner.with_rec(id, &mut |value, meta| {
            Ok((!is_expired(meta.expires, now)).then(|| Record {
                value: value.to_vec(),
                meta,
            }))
        })?;
        Ok(got.flatten())
    }

    fn view(&self, key: &[u8], f: &mut dyn FnMut(&[u8], Meta)) -> Result<bool> {
        self.inner.log.check_open()?;
        let Some(id) = self.inner.id_to_read(key)? else {
            return Ok(false);
        };
        let now = now_secs();
        let got = self.inner.with_rec(id, &mut |value, meta| {
            if is_expired(meta.expires, now) {
                return Ok(false);
            }
            f(value, meta);
            Ok(true)
        })?;
        Ok(got == Some(true))
    }

    fn accept<'v>(
        &self,
        key: &[u8],
        visitor: &mut dyn FnMut(Option<Current<'_>>) -> Decision<'v>,
    ) -> Result<Option<Meta>> {
        let inner = &self.inner;
        inner.log.check_writable()?;
        check_sizes(key, 0)?;
        let (result, wrote) = inner.accept_key(key, visitor)?;
        if wrote {
            inner.log.after_write()?;
        }
        Ok(result)
    }

    fn put_with(&self, key: &[u8], value: &[u8], flags: u32, expires: u64) -> Result<Meta> {
        let inner = &self.inner;
        inner.log.check_writable()?;
        check_sizes(key, value.len())?;
        inner.check_width(value.len())?;
        let meta = {
            let mut w = inner.w.lock();
            let id = inner.id_to_write(&w, key)?;
            let old = inner.old_version(id);
            inner.put_locked(&mut w, id, old, value, flags, expires, None)?
        };
        inner.log.after_write()?;
        Ok(meta)
    }

    /// Delete; `min` and `max` name records, `prev` and `next` none (an error, as in Tokyo
    /// Cabinet).
    fn out(&self, key: &[u8]) -> Result<bool> {
        let inner = &self.inner;
        inner.log.check_writable()?;
        if matches!(key, b"prev" | b"next") {
            inner.id_to_read(key)?;
        }
        let mut found = false;
        self.accept(key, &mut |cur| {
            found = cur.is_some();
            if found {
                Decision::Remove
            } else {
                Decision::Keep
            }
        })?;
        Ok(found)
    }

    /// The rules `write_batch` applies to a put: sizes, the width, and a key that is an id
    /// of this database (a batch takes no key words).
    fn check_put(&self, key: &[u8], value_len: usize) -> Result<()> {
        let inner = &self.inner;
        check_sizes(key, value_len)?;
        inner.check_width(value_len)?;
        match id::parse_key(key)? {
            id::Key::Id(n) => inner.check_id(n).map(|_| ()),
            _ => Err(batch_key_word(key)),
        }
    }

    fn write_batch(&self, ops: &[BatchOp]) -> Result<()> {
        let inner = &self.inner;
        inner.log.check_writable()?;
        if ops.is_empty() {
            return Ok(());
        }
        let mut ids = Vec::with_capacity(ops.len());
        let mut frame = 0usize;
        for op in ops {
            let vlen = match op {
                BatchOp::Put { value, .. } => value.len(),
                BatchOp::Remove { .. } => 0,
            };
            check_sizes(op.key(), vlen)?;
            inner.check_width(vlen)?;
            let id = match id::parse_key(op.key())? {
                id::Key::Id(n) => inner.check_id(n)?,
                _ => return Err(batch_key_word(op.key())),
            };
            ids.push(id);
            frame = frame.saturating_add(MAX_HEADER_LEN + KEY_LEN + vlen);
        }
        if frame > MAX_BATCH_BYTES {
            return Err(Error::TooLarge(format!(
                "a batch of {frame} bytes of records (limit {MAX_BATCH_BYTES}: split it)"
            )));
        }
        {
            let mut w = inner.w.lock();
            let seed = format::seed(inner.log.salt);
            let mut body = Vec::new();
            let mut offs = Vec::with_capacity(ops.len());
            // Each id's version as the ops apply (`None`: no record), kept only when the batch
            // names an id twice.
            let repeats = {
                let mut sorted = ids.clone();
                sorted.sort_unstable();
                sorted.windows(2).any(|w| w[0] == w[1])
            };
            let mut versions: std::collections::HashMap<u64, Option<u64>> =
                std::collections::HashMap::new();
            // The index's entries of the batch looked up in one tight loop first, so that the
            // memory they lie in is fetched for all of them at once.
            let warm = ids.iter().fold(0u64, |a, &id| a ^ inner.index.get(id));
            std::hint::black_box(warm);
            let mut before = Vec::with_capacity(ops.len());
            let slot_file = inner.slots.load();
            for (op, &id) in ops.iter().zip(&ids) {
                let old = match versions.get(&id) {
                    Some(v) => *v,
                    None if inner.index.get(id) == 0 => slot_file
                        .with_rec(id, &mut |_, m| Ok(m.version))
                        .ok()
                        .flatten(),
                    None => inner.old_version(id),
                };
                before.push(old.is_some());
                w.seq += 1;
                let start = body.len();
                let key = id.to_be_bytes();
                match op {
                    BatchOp::Put {
                        value,
                        flags,
                        expires,
                        ..
                    } => {
                        if *expires != 0 {
                            inner.expiring.fetch_add(1, Ordering::Relaxed);
                        }
                        let version = slots::version_of(id, *flags, value, slots::next_gen(old));
                        if repeats {
                            versions.insert(id, Some(version));
                        }
                        let fields = format::PutFields {
                            flags: *flags,
                            expires: *expires,
                            seq: w.seq,
                            version,
                            ..Default::default()
                        };
                        format::encode_put(&mut body, &key, value, &fields);
                    }
                    BatchOp::Remove { .. } => {
                        if repeats {
                            versions.insert(id, None);
                        }
                        format::encode_delete(&mut body, &key, w.seq);
                    }
                }
                format::seal(&mut body[start..], seed);
                offs.push(start);
            }
            let mut hdr = Vec::with_capacity(16);
            format::encode_batch_header(&mut hdr, body.len(), ops.len());
            let (seg, off) = {
                let mut tail = inner.log.tails[0].0.lock();
                let at = inner.log.append(&mut tail, &[&hdr, &body], true)?;
                inner.log.note_full(0, &tail);
                at
            };
            let base = off + hdr.len() as u64;
            for (i, (op, &id)) in ops.iter().zip(&ids).enumerate() {
                match op {
                    BatchOp::Put { .. } => {
                        inner.index.set(id, loc_of(seg, base + offs[i] as u64));
                        if !before[i] {
                            inner.bounds_insert(&mut w, id);
                        }
                    }
                    BatchOp::Remove { .. } => {
                        if before[i] {
                            inner.index.set(id, rw::DEL);
                            inner.bounds_remove(&mut w, id);
                        }
                    }
                }
            }
        }
        inner.log.after_write()
    }

    fn cursor(&self) -> Result<Box<dyn Cursor + '_>> {
        self.inner.log.check_open()?;
        Ok(Box::new(crate::cursor::KindCursor::new(
            self,
            FixedWalk::new(self),
        )))
    }

    fn count(&self) -> u64 {
        self.inner.count.load(Ordering::Acquire)
    }

    fn size(&self) -> u64 {
        let len = |name: &str| {
            self.inner
                .log
                .vfs
                .open(&self.inner.log.dir.join(name), false)
                .and_then(|f| f.len())
                .unwrap_or(0)
        };
        self.inner.log.data_size() + len(slots::DATA_NAME) + len(slots::SIDE_NAME)
    }

    fn sync(&self) -> Result<()> {
        self.inner.log.check_writable()?;
        self.inner.log.group_commit()
    }

    fn optimize(&self, params: &str) -> Result<()> {
        self.optimize_with(params)
    }

    fn vanish(&self) -> Result<()> {
        self.inner.log.check_writable()?;
        self.vanish_all()
    }

    fn copy_to(&self, dest: &std::path::Path) -> Result<()> {
        self.copy_all(dest)
    }

    fn check(&self) -> Result<CheckReport> {
        let inner = &self.inner;
        inner.log.check_open()?;
        let _m = inner.maint.lock();
        inner.log.flush_all()?;
        inner.audit()
    }

    fn kind(&self) -> Kind {
        Kind::Fixed
    }

    /// Every live record in id order: the index walked, each record read where it points.
    fn for_each_record(&self, f: &mut RecordVisitor<'_>) -> Result<u64> {
        self.inner.log.check_open()?;
        let mut damaged = 0;
        let mut from = 1;
        while let Some((k, r)) = self.seek(from, id::MAX_ID, false, &mut damaged)? {
            if !f(&k, &r.value, r.meta)? {
                break;
            }
            from = id::parse_number(&k).unwrap_or(id::MAX_ID) + 1;
        }
        Ok(damaged)
    }

    /// Tokyo Cabinet's `fwmkeys` on a fixed-length database (`tcfdbrange4`): `prefix` is an
    /// interval of ids (`[1,100]`, `(5,max]`); the keys of up to `max` records in it, in id
    /// order. Anything else is an error (Tokyo Cabinet returned nothing).
    fn fwmkeys(&self, prefix: &[u8], max: usize) -> Result<Vec<Vec<u8>>> {
        self.inner.log.check_open()?;
        let interval = id::parse_interval(prefix)?;
        let (min, mx) = self.live_bounds()?;
        let mut out = Vec::new();
        let Some((lo, hi)) = interval.resolve(min, mx) else {
            return Ok(out);
        };
        let mut at = lo;
        while out.len() < max && at <= hi {
            let Some(i) = self.inner.next_live(at, hi) else {
                break;
            };
            let live = self
                .inner
                .with_rec(i, &mut |_, m| Ok(!is_expired(m.expires, now_secs())))?;
            if live == Some(true) {
                out.push(id::key_of(i));
            }
            at = i + 1;
        }
        Ok(out)
    }

    /// Records with ids in `range`, in id order (keys compare as numbers here, not as bytes).
    fn for_each_in_range(&self, range: &KeyRange<'_>, f: &mut RecordVisitor<'_>) -> Result<u64> {
        self.inner.log.check_open()?;
        let mut shown = 0u64;
        if range.max == 0 {
            return Ok(0);
        }
        let Some((mut lo, mut hi)) = self.range_ids(range)? else {
            return Ok(0);
        };
        let mut damaged = 0;
        while lo <= hi {
            let Some((k, r)) = self.seek(lo, hi, range.desc, &mut damaged)? else {
                break;
            };
            let i = id::parse_number(&k).unwrap_or(0);
            shown += 1;
            if !f(&k, &r.value, r.meta)? || shown >= range.max as u64 {
                break;
            }
            if range.desc {
                match i.checked_sub(1) {
                    Some(n) => hi = n,
                    None => break,
                }
            } else {
                lo = i + 1;
            }
        }
        Ok(shown)
    }

    /// The path; what the database stores (`stored.width`, `stored.limsiz`) and the id limit
    /// they give; this open's tuning; the ids with records.
    fn describe(&self) -> Vec<(String, String)> {
        let inner = &self.inner;
        let c = inner.cfg.lock().clone();
        let mut v: Vec<(String, String)> =
            vec![("path".into(), inner.log.dir.display().to_string())];
        match *self.stored.lock() {
            Some(s) => v.extend([
                ("stored.width".into(), s.width.to_string()),
                ("stored.limsiz".into(), s.limsiz.to_string()),
                ("limid".into(), s.limid().to_string()),
            ]),
            None => v.push((
                "stored".into(),
                format!(
                    "unknown ({} is missing or damaged: width and limsiz unknown)",
                    crate::meta::META_NAME
                ),
            )),
        }
        let (min, max) = self.bounds();
        v.extend([
            ("min".into(), min.to_string()),
            ("max".into(), max.to_string()),
            ("open.sync".into(), c.sync.describe()),
            ("open.segsiz".into(), c.segsiz.to_string()),
            ("open.bufsiz".into(), c.bufsiz.to_string()),
            ("open.msiz".into(), c.msiz.to_string()),
            ("open.compact".into(), c.compact.to_string()),
            ("open.ckptsiz".into(), c.ckptsiz.to_string()),
            (
                "segments".into(),
                inner.log.segs.load().segs.len().to_string(),
            ),
        ]);
        v
    }

    fn close(&self) -> Result<()> {
        let inner = &self.inner;
        if inner.log.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        self.stop_background();
        let unchanged = inner.appended_total() == 0;
        let res = if inner.log.readonly || inner.log.poisoned.lock().is_some() {
            Ok(())
        } else {
            let _m = inner.maint.lock();
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
        drop(inner.log.retired.take());
        inner.lock.lock().take();
        res
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

/// A key word (min, max, prev, next) in a batch.
fn batch_key_word(key: &[u8]) -> Error {
    Error::InvalidKey(format!(
        "`{}`: a batch names its records by id; a key word names an id only when its own \
         write runs (write it with put)",
        id::shown(key)
    ))
}
