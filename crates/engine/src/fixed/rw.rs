//! Reading and writing records: a record found by its place (the segment's map, its file, or
//! the lane's buffer), the key words resolved, and the writes that hold the writer lock from
//! choosing the id to pointing the index at the new record.

use super::id::{self, Key};
use super::{slots, Inner, KEY_LEN, W};
use crate::error::{Error, Result};
use crate::log::format::{self, Header, HeaderBuf, PutFields, MAX_HEADER_LEN, T_PUT};
use crate::log::replay::loc_of;
use crate::log::segment::corrupt_at;
use crate::store::{check_sizes, is_expired, now_secs, Current, Decision, Meta};
use std::sync::atomic::Ordering;

thread_local! {
    /// This thread's buffer for records read outside the maps, kept between reads.
    static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// How many bytes a read of a record from a segment's file asks for first: the header and a
/// small record in one system call.
const FIRST_READ: usize = 512;
/// The largest `SCRATCH` buffer a thread keeps after a read.
const SCRATCH_KEEP: usize = 64 << 10;

/// The segment and offset of a place.
#[inline]
pub(super) fn split(place: u64) -> (u32, u64) {
    ((place >> 32) as u32, place & 0xffff_ffff)
}

/// The metadata a put record carries.
pub(super) fn meta_of(h: &Header) -> Meta {
    Meta {
        flags: h.fields.flags,
        expires: h.fields.expires,
        version: h.fields.version(),
    }
}

/// The id a put or delete record is of (its 8-byte key), or `None` for another key length.
pub(super) fn id_of(h: &Header, rec: &[u8]) -> Option<u64> {
    if h.klen != KEY_LEN {
        return None;
    }
    let k = rec.get(h.key_off..h.key_off + KEY_LEN)?;
    Some(u64::from_be_bytes(k.try_into().ok()?))
}

/// A record read for a write: what the visitor is shown and what the write needs.
pub(super) struct Old {
    pub meta: Meta,
    pub value: Vec<u8>,
}

/// The index's mark of an id whose record was removed since the last checkpoint.
pub(super) const DEL: u64 = u64::MAX;

impl Inner {
    /// Call `f` with the record at `place`: its header parsed and within it, its checksum
    /// verified when `verify`. `Ok(None)` when the place's segment is not in the table (the
    /// record moved and the segment was removed since the place was read).
    pub(super) fn with_place<R>(
        &self,
        place: u64,
        verify: bool,
        f: &mut dyn FnMut(&Header, &[u8]) -> Result<R>,
    ) -> Result<Option<R>> {
        let (seg_id, off) = split(place);
        let segs = self.log.segs.load();
        let Some(seg) = segs.get(seg_id) else {
            return Ok(None);
        };
        let bad = |what| corrupt_at(seg_id, off, what);
        let check = |h: &Header, rec: &[u8]| -> Result<()> {
            if verify && !format::verify(rec, seg.seed) {
                return Err(bad("checksum mismatch"));
            }
            let _ = h;
            Ok(())
        };
        let flushed = seg.flushed();
        if off < flushed {
            let map = seg.map.load();
            if let Some(m) = map.as_ref() {
                let s = m.as_slice();
                let end = (flushed as usize).min(s.len());
                if let Some(avail) = s.get(off as usize..end) {
                    if let Some(h) = format::parse_header(&avail[..avail.len().min(MAX_HEADER_LEN)])
                    {
                        if h.len <= avail.len() {
                            let rec = &avail[..h.len];
                            check(&h, rec)?;
                            return f(&h, rec).map(Some);
                        }
                    }
                }
            }
        }
        // Not in the map: the lane's buffer, or the file.
        let mut buf = SCRATCH.with(std::cell::Cell::take);
        let res = (|| -> Result<R> {
            if off >= flushed {
                let tail = self.log.tails[seg.lane].0.lock();
                if tail.seg.id == seg.id && off >= tail.seg.flushed() {
                    let (h, rec) = tail.buffered(off)?;
                    check(&h, rec)?;
                    return f(&h, rec);
                }
            }
            let avail = seg.flushed().saturating_sub(off) as usize;
            seg.read_file(off, &mut buf, avail.min(FIRST_READ))?;
            let h = format::parse_header(&buf).ok_or_else(|| bad("bad record header"))?;
            if h.len > avail {
                return Err(bad("record runs past the end"));
            }
            if h.len > buf.len() {
                seg.read_file(off, &mut buf, h.len)?;
            }
            let rec = &buf[..h.len];
            check(&h, rec)?;
            f(&h, rec)
        })();
        if buf.capacity() <= SCRATCH_KEEP {
            SCRATCH.with(|c| c.set(buf));
        }
        res.map(Some)
    }

    /// Call `f` with the verified record of `id`, if it has one: its newest in the log when
    /// it was written since the last checkpoint, else its slot. A record whose segment went
    /// (a checkpoint moved it into its slot) is looked up again.
    pub(super) fn with_rec<R>(
        &self,
        id: u64,
        f: &mut dyn FnMut(&[u8], Meta) -> Result<R>,
    ) -> Result<Option<R>> {
        loop {
            let place = self.index.get(id);
            if place == DEL {
                return Ok(None);
            }
            if place == 0 {
                return self.slots.load().with_rec(id, f);
            }
            let got = self.with_place(place, true, &mut |h, rec| {
                if h.typ != T_PUT || id_of(h, rec) != Some(id) {
                    let (s, o) = split(place);
                    return Err(corrupt_at(
                        s,
                        o,
                        "the index points at a record of another id",
                    ));
                }
                f(&rec[h.value_off()..h.len], meta_of(h))
            })?;
            match got {
                Some(r) => return Ok(Some(r)),
                None if self.index.get(id) == place => {
                    return Err(Error::Corrupt(format!(
                        "id {id}: the index points into missing segment {}",
                        split(place).0
                    )))
                }
                None => {} // moved: look again
            }
        }
    }

    /// The first id in `from..=to` with a record (in the log or its slot).
    pub(super) fn next_live(&self, mut from: u64, to: u64) -> Option<u64> {
        let slots = self.slots.load();
        let mut damaged = 0;
        loop {
            if from > to || from == 0 {
                return None;
            }
            let a = self.index.next_live(from, to);
            let upto = a.map_or(to, |a| a.saturating_sub(1));
            let b = if upto >= from {
                slots.next_present(from, upto, &mut damaged)
            } else {
                None
            };
            match (a, b) {
                (_, Some(b)) if self.index.get(b) == 0 => return Some(b),
                (_, Some(b)) => from = b,
                (Some(a), None) if self.index.get(a) != DEL => return Some(a),
                (Some(a), None) => from = a + 1,
                (None, None) => return None,
            }
        }
    }

    /// The last id in `from..=to` with a record.
    pub(super) fn prev_live(&self, from: u64, mut to: u64) -> Option<u64> {
        let slots = self.slots.load();
        let mut damaged = 0;
        let from = from.max(1);
        loop {
            if to < from {
                return None;
            }
            let a = self.index.prev_live(from, to);
            let lo = a.map_or(from, |a| a + 1);
            let b = if lo <= to {
                slots.prev_present(lo, to, &mut damaged)
            } else {
                None
            };
            match (a, b) {
                (_, Some(b)) if self.index.get(b) == 0 => return Some(b),
                (_, Some(b)) => to = b,
                (Some(a), None) if self.index.get(a) != DEL => return Some(a),
                (Some(a), None) => to = a.checked_sub(1)?,
                (None, None) => return None,
            }
        }
    }

    /// The length and seq of the record at `place`, from its header (not verified: the header
    /// of a record whose value was damaged still tells them). `None` when it cannot be read.
    pub(super) fn header_at(&self, place: u64) -> Option<(usize, u64)> {
        self.with_place(place, false, &mut |h, _| Ok((h.len, h.fields.seq)))
            .ok()
            .flatten()
    }

    /// The id a key names for a read: an id (checked against the limit), or `min` / `max`
    /// (`None` when the database is empty). `prev` and `next` name no record.
    pub(super) fn id_to_read(&self, key: &[u8]) -> Result<Option<u64>> {
        match id::parse_key(key)? {
            Key::Id(n) => self.check_id(n).map(Some),
            Key::Min => Ok(Some(self.min.load(Ordering::Acquire)).filter(|&n| n != 0)),
            Key::Max => Ok(Some(self.max.load(Ordering::Acquire)).filter(|&n| n != 0)),
            Key::Prev | Key::Next => Err(Error::InvalidKey(format!(
                "`{}` names the id before the first record or after the last: a record can be \
                 written there, not read or removed",
                id::shown(key)
            ))),
        }
    }

    /// The id a key names for a write, resolved under the writer lock: `min` and `max` the
    /// smallest and largest ids with a record, `prev` the one before `min`, `next` the one
    /// after `max` (1 in an empty database), each checked against the limit.
    pub(super) fn id_to_write(&self, w: &W, key: &[u8]) -> Result<u64> {
        let k = id::parse_key(key)?;
        let id = match k {
            Key::Id(n) => n,
            Key::Min | Key::Max | Key::Prev if w.count == 0 => {
                return Err(Error::InvalidKey(format!(
                    "`{}`: the database has no record, so no first or last id",
                    id::shown(key)
                )))
            }
            Key::Min => w.min,
            Key::Max => w.max,
            Key::Prev => w.min - 1,
            Key::Next => w.max.checked_add(1).unwrap_or(0),
        };
        if k == Key::Next && id > self.limid() {
            return Err(Error::InvalidKey(format!(
                "`next` would be id {id}, past this database's last id {} (its limsiz \
                 divided by its width, as Tokyo Cabinet counts them): the database is full",
                self.limid()
            )));
        }
        self.check_id(id)
    }

    /// A value checked against the database's width.
    pub(super) fn check_width(&self, len: usize) -> Result<()> {
        let width = self.width();
        if len as u64 > width {
            return Err(Error::TooLarge(format!(
                "value of {len} bytes: this fixed-length database holds values of up to \
                 {width} bytes (its width, fixed at creation; Tokyo Cabinet cut longer ones \
                 short, Kura refuses them)"
            )));
        }
        Ok(())
    }

    /// The version of `id`'s record before a write, if it has one (a damaged record counts
    /// as none: the write replaces it). Under the writer lock.
    pub(super) fn old_version(&self, id: u64) -> Option<u64> {
        self.with_rec(id, &mut |_, m| Ok(m.version)).ok().flatten()
    }

    /// Append a put record of `id` (under the writer lock) and point the index at it; `old`
    /// is the version of its record before (`None`: it had none). `keep_version`: a touch.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn put_locked(
        &self,
        w: &mut W,
        id: u64,
        old: Option<u64>,
        value: &[u8],
        flags: u32,
        expires: u64,
        keep_version: Option<u64>,
    ) -> Result<Meta> {
        w.seq += 1;
        let seq = w.seq;
        let version = keep_version
            .unwrap_or_else(|| slots::version_of(id, flags, value, slots::next_gen(old)));
        let fields = PutFields {
            flags,
            expires,
            seq,
            compression: 0,
            raw_len: 0,
            version,
            dup: 0,
        };
        let hdr = HeaderBuf::put(KEY_LEN, value.len(), &fields);
        let key = id.to_be_bytes();
        if expires != 0 {
            self.expiring.fetch_add(1, Ordering::Relaxed);
        }
        let place = {
            let mut tail = self.log.tails[0].0.lock();
            let (seg, off) = self
                .log
                .append(&mut tail, &[hdr.as_slice(), &key, value], true)?;
            self.log.note_full(0, &tail);
            loc_of(seg, off)
        };
        self.index.set(id, place);
        if old.is_none() {
            self.bounds_insert(w, id);
        }
        Ok(Meta {
            flags,
            expires,
            version,
        })
    }

    /// Append a delete record of `id`, which has a record, and forget it.
    pub(super) fn delete_locked(&self, w: &mut W, id: u64) -> Result<()> {
        w.seq += 1;
        let hdr = HeaderBuf::delete(KEY_LEN, w.seq);
        let key = id.to_be_bytes();
        {
            let mut tail = self.log.tails[0].0.lock();
            self.log.append(&mut tail, &[hdr.as_slice(), &key], true)?;
            self.log.note_full(0, &tail);
        }
        self.index.set(id, DEL);
        self.bounds_remove(w, id);
        Ok(())
    }

    /// The record of `id` for a write (under the writer lock), verified, when it has one.
    pub(super) fn old_record(&self, id: u64) -> Result<Option<Old>> {
        self.with_rec(id, &mut |value, meta| {
            Ok(Old {
                meta,
                value: value.to_vec(),
            })
        })
    }

    /// `accept` on a fixed-length database: the key resolved, the visitor shown the live
    /// record, its decision written. (what it returns, whether it wrote).
    pub(super) fn accept_key<'v>(
        &self,
        key: &[u8],
        visitor: &mut dyn FnMut(Option<Current<'_>>) -> Decision<'v>,
    ) -> Result<(Option<Meta>, bool)> {
        let mut w = self.w.lock();
        let id = self.id_to_write(&w, key)?;
        let old = self.old_record(id)?;
        let now = now_secs();
        let live = old.as_ref().filter(|o| !is_expired(o.meta.expires, now));
        let cur = live.map(|o| Current {
            value: &o.value,
            meta: o.meta,
        });
        let decision = visitor(cur);
        let old_version = old.as_ref().map(|o| o.meta.version);
        match decision {
            Decision::Keep => Ok((live.map(|o| o.meta), false)),
            Decision::Put {
                value,
                flags,
                expires,
            } => {
                check_sizes(key, value.len())?;
                self.check_width(value.len())?;
                let m = self.put_locked(&mut w, id, old_version, &value, flags, expires, None)?;
                Ok((Some(m), true))
            }
            // A touch rewrites the record with the new expiry and keeps its version (as
            // memcached keeps the cas).
            Decision::Touch { expires } => match live {
                None => Ok((None, false)),
                Some(o) => {
                    let (flags, version) = (o.meta.flags, Some(o.meta.version));
                    let value = o.value.clone();
                    let m =
                        self.put_locked(&mut w, id, old_version, &value, flags, expires, version)?;
                    Ok((Some(m), true))
                }
            },
            Decision::Remove => {
                if old.is_some() {
                    self.delete_locked(&mut w, id)?;
                    Ok((None, true))
                } else {
                    Ok((None, false))
                }
            }
        }
    }
}
