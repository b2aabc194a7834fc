//! The in-memory index of a fixed-length database: a dense array from id to the place of the
//! id's newest record, `segment << 32 | offset` in one `u64` (0: no record; segment ids start
//! at 1).
//!
//! It is a two-level radix array, allocated as ids are written: a top array of 2^16 pointers
//! (each covering 2^24 ids), middle arrays of 4,096 pointers to chunks, and chunks of 4,096
//! slots (32 KiB) with a count of their live slots. An empty database costs the top array,
//! whose pages are never touched until an id under them is written (it is allocated zeroed);
//! a dense one 8 bytes an id. A chunk, once made, stays until the database is closed (a
//! `vanish` zeroes it): readers look slots up without any lock, so nothing they may be
//! reading is ever freed under them.
//!
//! Writers are serialised by the database (its writer lock): `set` is called by one thread at
//! a time; `get` by any number, at any time.

use super::id::MAX_ID;
use std::alloc::{alloc_zeroed, handle_alloc_error, Layout};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

const CHUNK_BITS: u32 = 12;
/// Ids a chunk covers.
pub(super) const CHUNK: u64 = 1 << CHUNK_BITS;
const MID_BITS: u32 = 12;
const MID: usize = 1 << MID_BITS;
/// Ids a middle array covers.
const MID_SPAN: u64 = CHUNK << MID_BITS;
/// Pointers in the top array: every id up to `MAX_ID`.
const TOP: usize = ((MAX_ID + 1) / MID_SPAN) as usize;

struct Chunk {
    slots: [AtomicU64; CHUNK as usize],
    live: AtomicU32,
}

struct Mid {
    chunks: [AtomicPtr<Chunk>; MID],
}

/// A zeroed `T` on the heap.
///
/// # Safety
/// All-zero bytes must be a valid `T` (atomics and null pointers are).
unsafe fn zeroed<T>() -> *mut T {
    let layout = Layout::new::<T>();
    // SAFETY: `T` has a non-zero size (every caller's type does).
    let p = unsafe { alloc_zeroed(layout) } as *mut T;
    if p.is_null() {
        handle_alloc_error(layout);
    }
    p
}

/// The id array (see the module doc).
pub(super) struct Index {
    top: Box<[AtomicPtr<Mid>]>,
    /// How many entries of `top` may hold a middle array (one past the highest made): walks,
    /// `clear` and the drop look no further, so that a small database never touches the rest
    /// of the top array's pages.
    hi: AtomicUsize,
}

impl Default for Index {
    fn default() -> Self {
        Index::new()
    }
}

impl Index {
    pub(super) fn new() -> Index {
        let layout = match Layout::array::<AtomicPtr<Mid>>(TOP) {
            Ok(l) => l,
            Err(_) => handle_alloc_error(Layout::new::<u8>()),
        };
        // SAFETY: a null `AtomicPtr` is all zero bytes; the layout is that of `TOP` of them,
        // and the box takes ownership of exactly that allocation.
        let top = unsafe {
            let p = alloc_zeroed(layout) as *mut AtomicPtr<Mid>;
            if p.is_null() {
                handle_alloc_error(layout);
            }
            Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, TOP))
        };
        Index {
            top,
            hi: AtomicUsize::new(0),
        }
    }

    /// The entries of `top` that may hold a middle array.
    fn used_top(&self) -> &[AtomicPtr<Mid>] {
        &self.top[..self.hi.load(Ordering::Acquire).min(TOP)]
    }

    /// The largest id a record can have been written for (0: none yet).
    fn last_id(&self) -> u64 {
        (self.hi.load(Ordering::Acquire) as u64 * MID_SPAN).saturating_sub(1)
    }

    #[inline]
    fn chunk(&self, id: u64) -> Option<&Chunk> {
        let mid = self
            .top
            .get((id / MID_SPAN) as usize)?
            .load(Ordering::Acquire);
        // SAFETY: a non-null pointer in `top` is a `Mid` this index allocated and frees only
        // when dropped; likewise a chunk in a `Mid`.
        let mid = unsafe { mid.as_ref() }?;
        let c = mid.chunks[((id / CHUNK) as usize) & (MID - 1)].load(Ordering::Acquire);
        // SAFETY: as above.
        unsafe { c.as_ref() }
    }

    /// The place of `id`'s record (0: none).
    #[inline]
    pub(super) fn get(&self, id: u64) -> u64 {
        match self.chunk(id) {
            Some(c) => c.slots[(id % CHUNK) as usize].load(Ordering::Acquire),
            None => 0,
        }
    }

    /// The chunk of `id`, made when missing. Only the writer calls this.
    fn chunk_for(&self, id: u64) -> &Chunk {
        let at = (id / MID_SPAN) as usize;
        let slot = &self.top[at];
        let mut mid = slot.load(Ordering::Acquire);
        if mid.is_null() {
            // SAFETY: all-zero is a valid `Mid` (null pointers).
            mid = unsafe { zeroed::<Mid>() };
            slot.store(mid, Ordering::Release);
            self.hi.fetch_max(at + 1, Ordering::AcqRel);
        }
        // SAFETY: made above or earlier by this index, freed only when it is dropped.
        let mid = unsafe { &*mid };
        let cslot = &mid.chunks[((id / CHUNK) as usize) & (MID - 1)];
        let mut c = cslot.load(Ordering::Acquire);
        if c.is_null() {
            // SAFETY: all-zero is a valid `Chunk` (zero atomics).
            c = unsafe { zeroed::<Chunk>() };
            cslot.store(c, Ordering::Release);
        }
        // SAFETY: as above.
        unsafe { &*c }
    }

    /// Point `id` at `place` (0: no record); the place it had. One writer at a time: slots
    /// and live counts are only ever written here, so plain loads and stores (no atomic
    /// read-modify-write) suffice, and readers see each slot's old or new place.
    pub(super) fn set(&self, id: u64, place: u64) -> u64 {
        let c = if place == 0 {
            match self.chunk(id) {
                Some(c) => c,
                None => return 0,
            }
        } else {
            self.chunk_for(id)
        };
        let slot = &c.slots[(id % CHUNK) as usize];
        let old = slot.load(Ordering::Relaxed);
        slot.store(place, Ordering::Release);
        let live = c.live.load(Ordering::Relaxed);
        match (old == 0, place == 0) {
            (true, false) => c.live.store(live + 1, Ordering::Relaxed),
            (false, true) => c.live.store(live.saturating_sub(1), Ordering::Relaxed),
            _ => {}
        }
        old
    }

    /// The first id in `from..=to` that has a record.
    pub(super) fn next_live(&self, from: u64, to: u64) -> Option<u64> {
        let to = to.min(MAX_ID).min(self.last_id());
        let mut id = from;
        while id <= to {
            let Some(mid) = self.mid(id) else {
                id = (id / MID_SPAN + 1) * MID_SPAN;
                continue;
            };
            let c = mid.chunks[((id / CHUNK) as usize) & (MID - 1)].load(Ordering::Acquire);
            // SAFETY: see `chunk`.
            match unsafe { c.as_ref() } {
                Some(c) if c.live.load(Ordering::Relaxed) > 0 => {
                    let end = (id | (CHUNK - 1)).min(to);
                    for i in id..=end {
                        if c.slots[(i % CHUNK) as usize].load(Ordering::Acquire) != 0 {
                            return Some(i);
                        }
                    }
                    id = end + 1;
                }
                _ => id = (id / CHUNK + 1) * CHUNK,
            }
        }
        None
    }

    /// The last id in `from..=to` that has a record (`from` <= `to`).
    pub(super) fn prev_live(&self, from: u64, to: u64) -> Option<u64> {
        let mut id = to.min(MAX_ID).min(self.last_id());
        loop {
            if id < from {
                return None;
            }
            let Some(mid) = self.mid(id) else {
                let below = (id / MID_SPAN) * MID_SPAN;
                id = below.checked_sub(1)?;
                continue;
            };
            let c = mid.chunks[((id / CHUNK) as usize) & (MID - 1)].load(Ordering::Acquire);
            let start = (id / CHUNK) * CHUNK;
            // SAFETY: see `chunk`.
            if let Some(c) = unsafe { c.as_ref() }.filter(|c| c.live.load(Ordering::Relaxed) > 0) {
                let lo = start.max(from);
                for i in (lo..=id).rev() {
                    if c.slots[(i % CHUNK) as usize].load(Ordering::Acquire) != 0 {
                        return Some(i);
                    }
                }
            }
            id = start.checked_sub(1)?;
        }
    }

    fn mid(&self, id: u64) -> Option<&Mid> {
        let p = self
            .top
            .get((id / MID_SPAN) as usize)?
            .load(Ordering::Acquire);
        // SAFETY: see `chunk`.
        unsafe { p.as_ref() }
    }

    /// Call `f(id, place)` for every id that has a record, in id order, from `from` on, until
    /// it returns false.
    pub(super) fn each_from(&self, from: u64, mut f: impl FnMut(u64, u64) -> bool) {
        let mut id = from;
        while let Some(i) = self.next_live(id, MAX_ID) {
            let p = self.get(i);
            if p != 0 && !f(i, p) {
                return;
            }
            id = i + 1;
        }
    }

    /// Forget every record (`vanish`). One writer at a time; chunks stay allocated.
    pub(super) fn clear(&self) {
        for m in self.used_top() {
            // SAFETY: see `chunk`.
            let Some(mid) = (unsafe { m.load(Ordering::Acquire).as_ref() }) else {
                continue;
            };
            for c in mid.chunks.iter() {
                // SAFETY: see `chunk`.
                if let Some(c) = unsafe { c.load(Ordering::Acquire).as_ref() } {
                    if c.live.load(Ordering::Relaxed) > 0 {
                        for s in c.slots.iter() {
                            s.store(0, Ordering::Release);
                        }
                        c.live.store(0, Ordering::Relaxed);
                    }
                }
            }
        }
    }

    /// Bytes of memory the index holds (top array, middle arrays, chunks).
    pub(super) fn memory(&self) -> u64 {
        let mut n = (TOP * 8) as u64;
        for m in self.used_top() {
            // SAFETY: see `chunk`.
            let Some(mid) = (unsafe { m.load(Ordering::Acquire).as_ref() }) else {
                continue;
            };
            n += std::mem::size_of::<Mid>() as u64;
            n += mid
                .chunks
                .iter()
                .filter(|c| !c.load(Ordering::Acquire).is_null())
                .count() as u64
                * std::mem::size_of::<Chunk>() as u64;
        }
        n
    }
}

impl Drop for Index {
    fn drop(&mut self) {
        let hi = (*self.hi.get_mut()).min(TOP);
        for m in self.top[..hi].iter() {
            let mid = m.swap(std::ptr::null_mut(), Ordering::AcqRel);
            if mid.is_null() {
                continue;
            }
            // SAFETY: allocated by `zeroed::<Mid>` with `Mid`'s layout, owned by this index.
            let mid = unsafe { Box::from_raw(mid) };
            for c in mid.chunks.iter() {
                let c = c.swap(std::ptr::null_mut(), Ordering::AcqRel);
                if !c.is_null() {
                    // SAFETY: allocated by `zeroed::<Chunk>`, owned by this index.
                    drop(unsafe { Box::from_raw(c) });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn sparse_ids_far_apart_are_found_both_ways() {
        let ix = Index::new();
        assert_eq!(ix.get(1), 0);
        assert_eq!(ix.next_live(1, MAX_ID), None);
        assert_eq!(ix.prev_live(1, MAX_ID), None);
        let ids = [1u64, 2, 4095, 4096, 4097, 1 << 24, (1 << 24) + 5, MAX_ID];
        for (i, &id) in ids.iter().enumerate() {
            assert_eq!(ix.set(id, (i as u64 + 1) << 32 | 40), 0);
        }
        for (i, &id) in ids.iter().enumerate() {
            assert_eq!(ix.get(id), (i as u64 + 1) << 32 | 40);
            assert_eq!(ix.next_live(id, MAX_ID), Some(id));
            assert_eq!(ix.prev_live(1, id), Some(id));
            if i + 1 < ids.len() {
                assert_eq!(ix.next_live(id + 1, MAX_ID), Some(ids[i + 1]));
            }
            if i > 0 {
                assert_eq!(ix.prev_live(1, id - 1), Some(ids[i - 1]));
            }
        }
        assert_eq!(ix.prev_live(3, 4094), None);
        assert_eq!(ix.next_live(5, 4094), None);
        let mut seen = Vec::new();
        ix.each_from(1, |id, _| {
            seen.push(id);
            true
        });
        assert_eq!(seen, ids);
        assert_ne!(ix.set(4096, 0), 0);
        assert_eq!(ix.next_live(4096, MAX_ID), Some(4097));
        ix.clear();
        assert_eq!(ix.next_live(1, MAX_ID), None);
        assert_eq!(ix.get(MAX_ID), 0);
        assert!(ix.memory() > 0);
    }

    /// A database of small ids walks one entry of the top array, not all 65,536 of its
    /// entries (whose pages a fresh process would otherwise fault in to find nothing).
    #[test]
    fn walks_look_only_at_the_top_entries_in_use() {
        let ix = Index::new();
        assert!(ix.used_top().is_empty());
        assert_eq!(ix.last_id(), 0);
        ix.set(5, 1 << 32 | 40);
        assert_eq!(ix.used_top().len(), 1);
        assert_eq!(ix.last_id(), MID_SPAN - 1);
        assert_eq!(ix.next_live(6, MAX_ID), None);
        assert_eq!(ix.prev_live(1, MAX_ID), Some(5));
        ix.set(3 * MID_SPAN + 7, 2 << 32 | 40);
        assert_eq!(ix.used_top().len(), 4);
        assert_eq!(ix.next_live(6, MAX_ID), Some(3 * MID_SPAN + 7));
        assert_eq!(ix.prev_live(6, MAX_ID), Some(3 * MID_SPAN + 7));
        ix.set(3 * MID_SPAN + 7, 0);
        assert_eq!(ix.prev_live(1, MAX_ID), Some(5));
    }

    /// Random sets and clears against a map: `get`, `next_live` and `prev_live` agree.
    #[test]
    fn agrees_with_a_map() {
        let ix = Index::new();
        let mut m = BTreeMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let id = 1 + x % 20_000;
            if x.is_multiple_of(3) {
                ix.set(id, 0);
                m.remove(&id);
            } else {
                ix.set(id, step + 1);
                m.insert(id, step + 1);
            }
            let probe = 1 + (x >> 20) % 20_000;
            assert_eq!(ix.get(probe), m.get(&probe).copied().unwrap_or(0));
            assert_eq!(
                ix.next_live(probe, 20_000),
                m.range(probe..).next().map(|(k, _)| *k)
            );
            assert_eq!(
                ix.prev_live(1, probe),
                m.range(..=probe).next_back().map(|(k, _)| *k)
            );
        }
    }
}
