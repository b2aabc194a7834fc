//! Segment files: append-only logs of checksummed records, read through a memory map when the
//! backend offers one, else with positioned reads.

use super::format::{self, Header, SegLayout, MAX_HEADER_LEN, SEG_DATA, SEG_HEADER_LEN};
use crate::error::{Error, Result};
use crate::io::{Map, VFile};
use arc_swap::ArcSwapOption;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Values replaced in a `Published`, kept until no reader can be looking at them (see
/// `Published::peek` and `Inner::reclaim`).
#[derive(Default)]
pub struct Retired(Mutex<Vec<Box<dyn std::any::Any + Send + Sync>>>);

impl Retired {
    pub fn push(&self, v: Box<dyn std::any::Any + Send + Sync>) {
        self.0.lock().push(v);
    }

    /// Everything retired so far.
    pub fn take(&self) -> Vec<Box<dyn std::any::Any + Send + Sync>> {
        std::mem::take(&mut *self.0.lock())
    }

    pub fn is_empty(&self) -> bool {
        self.0.lock().is_empty()
    }
}

/// A value replaced as a whole (copy on write) and read two ways:
/// - `load` / `load_full`: an `ArcSwap` guard, safe anywhere;
/// - `peek`: one plain pointer load, with no atomic read-modify-write or fence, for the hot
///   paths, which run inside a shard (its lock held, or counted in while it is fast). A
///   replaced value goes to the database's `Retired` list and is freed only after every shard
///   has been held exclusively once since (`Inner::reclaim`): a reader that peeked it inside
///   some shard has left that shard by then, and a reader that enters a shard later sees the
///   new pointer.
pub struct Published<T> {
    arc: ArcSwapOption<T>,
    raw: AtomicPtr<T>,
    /// Serialises stores, so that `raw` always matches `arc`.
    store: Mutex<()>,
}

fn raw_of<T>(v: &Option<Arc<T>>) -> *mut T {
    v.as_ref()
        .map_or(std::ptr::null_mut(), |a| Arc::as_ptr(a) as *mut T)
}

impl<T: Send + Sync + 'static> Published<T> {
    pub fn new(v: Option<Arc<T>>) -> Published<T> {
        Published {
            raw: AtomicPtr::new(raw_of(&v)),
            arc: ArcSwapOption::new(v),
            store: Mutex::new(()),
        }
    }

    pub fn load(&self) -> arc_swap::Guard<Option<Arc<T>>> {
        self.arc.load()
    }

    pub fn load_full(&self) -> Option<Arc<T>> {
        self.arc.load_full()
    }

    /// Replace the value; the old one goes to `retired`.
    pub fn store(&self, v: Option<Arc<T>>, retired: &Retired) {
        let _g = self.store.lock();
        let p = raw_of(&v);
        let old = self.arc.swap(v);
        self.raw.store(p, Ordering::Release);
        if let Some(old) = old {
            retired.push(Box::new(old));
        }
    }

    /// The current value, by a plain load.
    ///
    /// # Safety
    /// The caller is inside a shard (its lock held, or counted in while it is fast) of the
    /// database whose `Retired` list this value's replacements go to, for as long as it uses
    /// the reference; or no other thread can be reclaiming (the database is being opened).
    #[inline]
    pub unsafe fn peek(&self) -> Option<&T> {
        // SAFETY: `raw` is null or points into an `Arc` still held by `arc` or, once
        // replaced, by the retired list, which is not freed while the caller holds a shard
        // lock (see the type's documentation).
        unsafe { self.raw.load(Ordering::Acquire).as_ref() }
    }
}

/// A value alone on its cache line (128 bytes: adjacent-line prefetch pairs lines).
#[repr(align(128))]
#[derive(Debug, Default)]
pub struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// One segment file.
pub struct Segment {
    pub id: u32,
    /// The log (lane) this segment belongs to.
    pub lane: usize,
    pub salt: u64,
    pub seed: u32,
    pub path: PathBuf,
    pub file: Arc<dyn VFile>,
    /// Bytes written to the file (records below this offset are readable from the file).
    pub flushed: AtomicU64,
    /// Bytes of live records (approximate; guides compaction). Changed on nearly every write
    /// (by its lane's writer, and by any thread overwriting a record here), so it has a cache
    /// line of its own: next to `flushed`, which every read of the segment loads, each change
    /// would pull that line away from the readers' cores.
    pub live: Padded<AtomicU64>,
    /// Written since the last fdatasync.
    pub dirty: AtomicBool,
    /// The OS was asked to start writing the file back up to here (only the background
    /// thread changes it: `Inner::start_writebacks`).
    pub written_back: AtomicU64,
    /// No longer any lane's active segment: it never grows again.
    pub sealed: AtomicBool,
    /// Every segment that existed while this one was written has a smaller id (set when it
    /// is sealed; `u32::MAX` while unknown). A delete record in this segment can hide only
    /// records in those segments.
    pub horizon: AtomicU32,
    pub map: Published<Map>,
    /// Where its records start, and whether its header has synced-length slots (read from its
    /// header when it is made: `format::seg_layout`).
    pub data: u64,
    pub slots: bool,
    /// The fixed part of its header (the slots' crc covers its crc).
    head: [u8; SEG_HEADER_LEN],
    /// The synced length last written into a slot (or read from one), and the slot writes so
    /// far. Changed only by `Log::sync_now`, one at a time.
    pub marked: AtomicU64,
    slot_writes: AtomicU32,
    /// A slot verified when it was read, or one was written since: `marked` is a length its
    /// header records. (A header whose fixed part verifies but neither of whose slots does —
    /// both are written with it, and only one is ever being written at a time — was damaged:
    /// it records no length.)
    length_known: AtomicBool,
}

impl Segment {
    pub fn new(
        id: u32,
        lane: usize,
        salt: u64,
        path: PathBuf,
        file: Arc<dyn VFile>,
        flushed: u64,
    ) -> Segment {
        // The header as the file holds it (a file that cannot be read, as a lane's placeholder,
        // is taken for one without slots: it is never synced).
        let mut h = [0u8; SEG_DATA];
        let layout = match file.len() {
            Ok(len) if len >= SEG_HEADER_LEN as u64 => {
                let n = len.min(SEG_DATA as u64) as usize;
                match file.read_at(&mut h[..n], 0) {
                    Ok(()) => format::seg_layout(&h[..n]),
                    Err(_) => SegLayout::PLAIN,
                }
            }
            _ => SegLayout::PLAIN,
        };
        let mut head = [0u8; SEG_HEADER_LEN];
        head.copy_from_slice(&h[..SEG_HEADER_LEN]);
        Segment {
            data: layout.data,
            slots: layout.slots,
            head,
            marked: AtomicU64::new(layout.synced.unwrap_or(0)),
            slot_writes: AtomicU32::new(layout.slot_writes),
            length_known: AtomicBool::new(layout.synced.is_some()),
            id,
            lane,
            salt,
            seed: format::seed(salt),
            path,
            file,
            flushed: AtomicU64::new(flushed),
            live: Padded(AtomicU64::new(0)),
            dirty: AtomicBool::new(false),
            written_back: AtomicU64::new(flushed),
            sealed: AtomicBool::new(false),
            horizon: AtomicU32::new(u32::MAX),
            map: Published::new(None),
        }
    }

    /// Change the live-byte count (never below zero).
    pub fn add_live(&self, delta: i64) {
        if delta >= 0 {
            self.live.fetch_add(delta as u64, Ordering::Relaxed);
        } else {
            let d = delta.unsigned_abs();
            let _ = self
                .live
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                    Some(v.saturating_sub(d))
                });
        }
    }

    pub fn flushed(&self) -> u64 {
        self.flushed.load(Ordering::Acquire)
    }

    /// The synced length its header records, as far as this process knows (`None`: a segment
    /// without slots, or whose slots were both damaged and none written since).
    pub fn synced(&self) -> Option<u64> {
        (self.slots && self.length_known.load(Ordering::Acquire))
            .then(|| self.marked.load(Ordering::Acquire))
    }

    /// Record in a slot of the header that the first `len` bytes are durable (an fdatasync
    /// covering them has returned), if that is more than the slots say: into the slot the last
    /// write did not use, not synced itself (the next fdatasync makes it durable; until then the
    /// other slot says less). True when a slot was written. Called by `Log::sync_now` only (one
    /// at a time).
    pub fn mark_synced(&self, len: u64) -> std::io::Result<bool> {
        if !self.slots || len <= self.marked.load(Ordering::Acquire) {
            return Ok(false);
        }
        let n = self.slot_writes.load(Ordering::Relaxed).wrapping_add(1);
        let at = format::SEG_SLOTS[(n % 2) as usize];
        self.file
            .write_at(&format::synced_slot(&self.head, len, n), at as u64)?;
        self.slot_writes.store(n, Ordering::Relaxed);
        self.marked.store(len, Ordering::Release);
        self.length_known.store(true, Ordering::Release);
        Ok(true)
    }

    /// Read `len` bytes at `off` from the file part (the caller checked `off + len <= flushed`).
    pub fn read_file(&self, off: u64, out: &mut Vec<u8>, len: usize) -> Result<()> {
        if let Some(m) = self.map.load().as_ref() {
            if let Some(b) = m.as_slice().get(off as usize..off as usize + len) {
                out.clear();
                out.extend_from_slice(b);
                return Ok(());
            }
        }
        // Every byte is read over: only the part that grows is zeroed, not the whole buffer.
        out.truncate(len);
        out.resize(len, 0);
        self.file.read_at(out, off)?;
        Ok(())
    }

    /// Call `f` with the complete record at `off` (header parsed and within the record; the
    /// checksum is the caller's to verify) when it lies in the mapped, flushed part: the
    /// zero-copy fast path. `None` when the caller must take the slow path.
    ///
    /// # Safety
    /// As `Published::peek`: the caller is inside a shard.
    pub unsafe fn with_mapped<R>(
        &self,
        off: u64,
        f: impl FnOnce(Result<(Header, &[u8])>) -> R,
    ) -> Option<R> {
        // SAFETY: the caller is inside a shard.
        let m = unsafe { self.map.peek() }?.as_slice();
        let end = (self.flushed() as usize).min(m.len());
        let avail = m.get(off as usize..end)?;
        let res = match format::parse_header(&avail[..avail.len().min(MAX_HEADER_LEN)]) {
            Some(h) if h.len <= avail.len() => Ok((h, &avail[..h.len])),
            Some(h) if off as usize + h.len > m.len() => return None,
            // The map ends inside the header (a segment grown past the size it was mapped
            // at, by a record larger than the rest of it): read it from the file.
            None if avail.len() < MAX_HEADER_LEN && end < self.flushed() as usize => return None,
            _ => Err(corrupt_at(self.id, off, "bad record header")),
        };
        Some(f(res))
    }
}

pub fn corrupt_at(seg: u32, off: u64, what: &str) -> Error {
    Error::Corrupt(format!("segment {seg} offset {off}: {what}"))
}

/// The segments of a database by id, replaced as a whole (copy on write) when one is added or
/// removed so readers never lock.
#[derive(Clone, Default)]
pub struct SegTable {
    pub segs: BTreeMap<u32, Arc<Segment>>,
}

impl SegTable {
    pub fn get(&self, id: u32) -> Option<&Arc<Segment>> {
        self.segs.get(&id)
    }
    pub fn oldest(&self) -> Option<u32> {
        self.segs.keys().next().copied()
    }
}

pub fn seg_file_name(id: u32) -> String {
    format!("seg-{id:08}.kd")
}

pub fn parse_seg_file_name(name: &str) -> Option<u32> {
    name.strip_prefix("seg-")?.strip_suffix(".kd")?.parse().ok()
}
