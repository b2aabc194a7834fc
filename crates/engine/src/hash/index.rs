//! The in-memory index of one shard: an ordered linear-probing table of 12-byte slots.
//!
//! A slot's home position is `tag * capacity >> 32`, which grows with the tag, and slots are kept
//! sorted by tag with no empty slot between a slot's home and its position (the Robin Hood
//! invariant for a monotone hash). So:
//! - a lookup reads from the home position until a larger tag or an empty slot: usually one
//!   cache line, found or not;
//! - an insert shifts the few slots after its place one step right;
//! - a delete shifts the displaced slots after it one step left (no tombstones);
//! - growing, shrinking and loading a checkpoint are single sequential passes, since slots
//!   come out (and go in) in tag order.
//!
//! There is no wrap-around: an overflow area after the last home position holds runs that spill
//! past the end; a run that would leave it makes the table grow.

/// Where the newest record of a key lives. `seg == 0` marks an empty slot (segment ids start
/// at 1).
/// All-zero bytes are a valid, empty slot (the table relies on it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Slot {
    pub tag: u32,
    pub seg: u32,
    pub off: u32,
}

impl Slot {
    #[inline]
    pub fn loc(&self) -> u64 {
        ((self.seg as u64) << 32) | self.off as u64
    }
    #[inline]
    fn is_empty(&self) -> bool {
        self.seg == 0
    }
}

/// Sort slots by `key` (stable): a least-significant-digit radix sort on bytes, skipping the
/// byte positions where every key has the same byte. Checkpoints sort every slot of the index
/// twice (by location to write, by tag to load); this is several times faster than a
/// comparison sort there.
pub fn radix_sort_by_key(v: &mut Vec<Slot>, key: impl Fn(&Slot) -> u64) {
    if v.len() < 64 {
        v.sort_by_key(|s| key(s));
        return;
    }
    let mut counts = [[0usize; 256]; 8];
    for s in v.iter() {
        let k = key(s);
        for (d, c) in counts.iter_mut().enumerate() {
            c[((k >> (8 * d)) & 0xff) as usize] += 1;
        }
    }
    let mut tmp = vec![Slot::default(); v.len()];
    for (d, c) in counts.iter().enumerate() {
        if c.contains(&v.len()) {
            continue; // the same byte in every key
        }
        let mut pos = [0usize; 256];
        let mut at = 0;
        for (p, &n) in pos.iter_mut().zip(c.iter()) {
            *p = at;
            at += n;
        }
        for s in v.iter() {
            let b = ((key(s) >> (8 * d)) & 0xff) as usize;
            tmp[pos[b]] = *s;
            pos[b] += 1;
        }
        std::mem::swap(v, &mut tmp);
    }
}

/// Tables at least this large are aligned to, and advised into, 2 MiB huge pages: a random
/// probe into a large index otherwise pays a TLB miss on top of the cache miss.
const HUGE: usize = 2 << 20;

/// The slot array: zeroed memory (an all-zero slot is empty), huge-page backed when large.
struct Slots {
    ptr: std::ptr::NonNull<Slot>,
    len: usize,
    /// Made by `map_huge` (else by the global allocator).
    mapped: bool,
}

// SAFETY: `Slots` owns its allocation exclusively, like a `Box<[Slot]>`; `Slot` is plain data.
unsafe impl Send for Slots {}
// SAFETY: shared access only reads through `&[Slot]`.
unsafe impl Sync for Slots {}

impl Slots {
    fn bytes(len: usize) -> usize {
        (len * std::mem::size_of::<Slot>()).max(1)
    }

    fn small_layout(len: usize) -> std::alloc::Layout {
        match std::alloc::Layout::array::<Slot>(len.max(1)) {
            Ok(l) => l,
            Err(_) => std::alloc::handle_alloc_error(std::alloc::Layout::new::<Slot>()),
        }
    }

    /// A zeroed array of `len` slots. Large arrays are anonymous memory maps, aligned to and
    /// advised into huge pages; the kernel zero-fills their pages on first touch (so nothing is
    /// written twice). Small ones come from the allocator.
    fn zeroed(len: usize) -> Slots {
        let bytes = Self::bytes(len);
        if bytes >= HUGE {
            if let Some(ptr) = map_huge(bytes) {
                return Slots {
                    ptr,
                    len,
                    mapped: true,
                };
            }
        }
        let layout = Self::small_layout(len);
        // SAFETY: the layout has a non-zero size; zeroed memory is a valid array of empty slots.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(ptr) = std::ptr::NonNull::new(raw.cast::<Slot>()) else {
            std::alloc::handle_alloc_error(layout)
        };
        Slots {
            ptr,
            len,
            mapped: false,
        }
    }
}

/// Map `bytes` of zeroed anonymous memory at a huge-page-aligned address, advised into huge
/// pages; `None` when the kernel refuses.
fn map_huge(bytes: usize) -> Option<std::ptr::NonNull<Slot>> {
    let len = bytes.div_ceil(HUGE) * HUGE;
    // SAFETY: an anonymous private mapping with no address hint; checked for failure below.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len + HUGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return None;
    }
    let start = raw as usize;
    let aligned = start.div_ceil(HUGE) * HUGE;
    // SAFETY: trimming the unaligned head and the unused tail of the mapping just made; the
    // kept range [aligned, aligned + len) lies inside it.
    unsafe {
        if aligned > start {
            libc::munmap(raw, aligned - start);
        }
        let end = start + len + HUGE;
        if end > aligned + len {
            libc::munmap((aligned + len) as *mut libc::c_void, end - aligned - len);
        }
        // A hint: refused, the table simply uses small pages.
        libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    }
    std::ptr::NonNull::new(aligned as *mut Slot)
}

impl Drop for Slots {
    fn drop(&mut self) {
        if self.mapped {
            let len = Self::bytes(self.len).div_ceil(HUGE) * HUGE;
            // SAFETY: the mapping made by `map_huge` for this length.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), len) };
        } else {
            // SAFETY: allocated in `zeroed` with this same layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast(), Self::small_layout(self.len)) }
        }
    }
}

impl std::ops::Deref for Slots {
    type Target = [Slot];
    fn deref(&self) -> &[Slot] {
        // SAFETY: `ptr` points at `len` initialised slots owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for Slots {
    fn deref_mut(&mut self) -> &mut [Slot] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Clone for Slots {
    fn clone(&self) -> Slots {
        let mut c = Slots::zeroed(self.len);
        c.copy_from_slice(self);
        c
    }
}

impl std::fmt::Debug for Slots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Slots({})", self.len)
    }
}

/// Default maximum load (slots used / home positions) before the table doubles.
const MAX_LOAD: f64 = 0.85;
/// Minimum number of home positions.
const MIN_CAP: usize = 16;

#[derive(Clone, Debug)]
pub struct Table {
    /// `cap` home positions followed by the overflow area.
    slots: Slots,
    cap: usize,
    len: usize,
    /// Load at which the table doubles (shards use different ones so that they do not all
    /// double at the same moment).
    max_load: f64,
}

impl Default for Table {
    fn default() -> Self {
        Table::with_capacity(0)
    }
}

fn overflow(cap: usize) -> usize {
    cap / 8 + 32
}

impl Table {
    /// A table that holds `n` slots without growing.
    pub fn with_capacity(n: usize) -> Table {
        let cap = ((n as f64 / MAX_LOAD) as usize + 1)
            .next_power_of_two()
            .max(MIN_CAP);
        Table {
            slots: Slots::zeroed(cap + overflow(cap)),
            cap,
            len: 0,
            max_load: MAX_LOAD,
        }
    }

    /// Double at load `l` (clamped to 0.5..=0.9) instead of the default.
    pub fn set_max_load(&mut self, l: f64) {
        self.max_load = l.clamp(0.5, 0.9);
    }

    #[inline]
    fn home(&self, tag: u32) -> usize {
        ((tag as u64 * self.cap as u64) >> 32) as usize
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of memory the table occupies.
    pub fn memory(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Slot>()
    }

    /// The slots whose tag is `tag`.
    #[inline]
    pub fn candidates(&self, tag: u32) -> impl Iterator<Item = &Slot> + '_ {
        self.slots[self.home(tag)..]
            .iter()
            .take_while(move |s| !s.is_empty() && s.tag <= tag)
            .filter(move |s| s.tag == tag)
    }

    /// Whether this exact slot is present.
    pub fn contains(&self, slot: &Slot) -> bool {
        self.candidates(slot.tag).any(|s| s == slot)
    }

    fn position(&self, slot: &Slot) -> Option<usize> {
        let h = self.home(slot.tag);
        self.slots[h..]
            .iter()
            .take_while(|s| !s.is_empty() && s.tag <= slot.tag)
            .position(|s| s == slot)
            .map(|p| h + p)
    }

    /// Overwrite slot `old` with `new` (same tag). Returns false when `old` is absent.
    pub fn replace(&mut self, old: &Slot, new: Slot) -> bool {
        debug_assert_eq!(old.tag, new.tag);
        match self.position(old) {
            Some(p) => {
                self.slots[p] = new;
                true
            }
            None => false,
        }
    }

    /// Insert a slot (the caller guarantees no equal slot exists).
    pub fn insert(&mut self, slot: Slot) {
        debug_assert!(!slot.is_empty());
        if (self.len + 1) as f64 > self.cap as f64 * self.max_load {
            self.resize(self.cap * 2);
        }
        loop {
            let mut p = self.home(slot.tag);
            while p < self.slots.len() && !self.slots[p].is_empty() && self.slots[p].tag <= slot.tag
            {
                p += 1;
            }
            let Some(empty) = self.slots[p..].iter().position(Slot::is_empty) else {
                // The run reaches the end of the overflow area.
                self.resize(self.cap * 2);
                continue;
            };
            let e = p + empty;
            self.slots.copy_within(p..e, p + 1);
            self.slots[p] = slot;
            self.len += 1;
            return;
        }
    }

    /// Remove this exact slot. Returns false when absent.
    pub fn remove(&mut self, slot: &Slot) -> bool {
        let Some(mut i) = self.position(slot) else {
            return false;
        };
        // Shift left every following slot that sits after its home.
        loop {
            let j = i + 1;
            if j >= self.slots.len()
                || self.slots[j].is_empty()
                || self.home(self.slots[j].tag) >= j
            {
                self.slots[i] = Slot::default();
                break;
            }
            self.slots[i] = self.slots[j];
            i = j;
        }
        self.len -= 1;
        true
    }

    /// Every slot, in tag order.
    pub fn iter(&self) -> impl Iterator<Item = &Slot> + '_ {
        self.slots.iter().filter(|s| !s.is_empty())
    }

    pub fn clear(&mut self) {
        let l = self.max_load;
        *self = Table::with_capacity(0);
        self.max_load = l;
    }

    /// Keep only the slots for which `f` is true.
    pub fn retain(&mut self, mut f: impl FnMut(&Slot) -> bool) {
        let kept: Vec<Slot> = self.iter().copied().filter(|s| f(s)).collect();
        self.rebuild(kept.len(), kept.into_iter());
    }

    /// Make room for `additional` more slots without growing.
    pub fn reserve(&mut self, additional: usize) {
        let want = Table::with_capacity(self.len + additional).cap;
        if want > self.cap {
            self.resize(want);
        }
    }

    fn resize(&mut self, cap: usize) {
        let old = std::mem::replace(&mut self.slots, Slots::zeroed(cap + overflow(cap)));
        let n = self.len;
        self.cap = cap;
        self.len = 0;
        self.fill_sorted(old.iter().copied().filter(|s| !s.is_empty()), n);
    }

    fn rebuild(&mut self, n: usize, slots: impl Iterator<Item = Slot>) {
        let l = self.max_load;
        *self = Table::with_capacity(n);
        self.max_load = l;
        self.fill_sorted(slots, n);
    }

    /// Fill an empty table from slots given in tag order: one sequential pass.
    fn fill_sorted(&mut self, slots: impl Iterator<Item = Slot>, n: usize) {
        let mut next = 0usize;
        let mut pending = Vec::new();
        for s in slots {
            let p = self.home(s.tag).max(next);
            if p >= self.slots.len() {
                pending.push(s);
                continue;
            }
            self.slots[p] = s;
            next = p + 1;
            self.len += 1;
        }
        debug_assert!(pending.is_empty() || n > 0);
        if !pending.is_empty() {
            // Overflow ran out (pathological tags): grow and insert the rest one by one.
            let cap = self.cap * 2;
            self.resize(cap);
            for s in pending {
                self.insert(s);
            }
        }
    }

    /// Build from slots in any order (sorted here).
    pub fn from_slots(mut v: Vec<Slot>) -> Table {
        radix_sort_by_key(&mut v, |s| s.tag as u64);
        Table::from_sorted(v.len(), v.into_iter())
    }

    /// Build from `n` slots given in ascending tag order (one sequential pass).
    pub fn from_sorted(n: usize, slots: impl Iterator<Item = Slot>) -> Table {
        let mut t = Table::with_capacity(n);
        t.fill_sorted(slots, n);
        t
    }

    /// Check the invariants (tests and `check`): sorted, each slot at or after its home with no
    /// empty slot in between, and the count right.
    pub fn verify(&self) -> Result<(), String> {
        let mut n = 0;
        let mut prev: Option<u32> = None;
        let mut last_empty: Option<usize> = None;
        for (i, s) in self.slots.iter().enumerate() {
            if s.is_empty() {
                last_empty = Some(i);
                continue;
            }
            n += 1;
            if prev.is_some_and(|p| p > s.tag) {
                return Err(format!("slot {i} out of tag order"));
            }
            prev = Some(s.tag);
            let h = self.home(s.tag);
            if h > i || last_empty.is_some_and(|e| e >= h) {
                return Err(format!("slot {i} is not reachable from its home {h}"));
            }
        }
        if n != self.len {
            return Err(format!("{} slots counted as {}", n, self.len));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn slot(tag: u32, off: u32) -> Slot {
        Slot { tag, seg: 1, off }
    }

    #[test]
    fn radix_sort_matches_a_comparison_sort() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for n in [0usize, 1, 5, 63, 64, 65, 1000, 5000] {
            let v: Vec<Slot> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    Slot {
                        tag: (x >> 8) as u32 & 0xffff_0fff,
                        seg: 1 + (x % 3) as u32,
                        off: (x >> 40) as u32,
                    }
                })
                .collect();
            for key in [|s: &Slot| s.tag as u64, |s: &Slot| s.loc()] {
                let mut a = v.clone();
                let mut b = v.clone();
                radix_sort_by_key(&mut a, key);
                b.sort_by_key(key); // stable, as the radix sort is
                assert_eq!(a, b, "n={n}");
            }
        }
    }

    #[test]
    fn insert_find_remove_grow() {
        let mut t = Table::default();
        for i in 0..10_000u32 {
            t.insert(slot(i.wrapping_mul(2_654_435_761), i));
        }
        t.verify().unwrap();
        assert_eq!(t.len(), 10_000);
        for i in 0..10_000u32 {
            let tag = i.wrapping_mul(2_654_435_761);
            assert_eq!(t.candidates(tag).count(), 1);
            assert!(t.contains(&slot(tag, i)));
        }
        for i in (0..10_000u32).step_by(2) {
            assert!(t.remove(&slot(i.wrapping_mul(2_654_435_761), i)));
        }
        t.verify().unwrap();
        assert_eq!(t.len(), 5_000);
        assert!(!t.remove(&slot(0, 0)));
    }

    /// Tables past 2 MiB live in huge-page memory maps: grow through that size, shrink back.
    #[test]
    fn large_tables_grow_and_shrink() {
        let mut t = Table::default();
        let n = 400_000u32;
        for i in 0..n {
            t.insert(slot(i.wrapping_mul(2_654_435_761), i));
        }
        assert!(t.memory() >= HUGE);
        assert_eq!(t.len(), n as usize);
        assert!(t.contains(&slot(7u32.wrapping_mul(2_654_435_761), 7)));
        let copy = t.clone();
        t.retain(|s| s.off < 1000);
        assert_eq!(t.len(), 1000);
        t.verify().unwrap();
        assert_eq!(copy.len(), n as usize);
        copy.verify().unwrap();
    }

    #[test]
    fn equal_tags_and_extremes() {
        let mut t = Table::default();
        for i in 0..200 {
            t.insert(slot(u32::MAX, i));
            t.insert(slot(0, i));
            t.insert(slot(7, i));
        }
        t.verify().unwrap();
        assert_eq!(t.candidates(u32::MAX).count(), 200);
        assert_eq!(t.candidates(0).count(), 200);
        assert!(t.replace(&slot(7, 3), slot(7, 1000)));
        assert!(t.contains(&slot(7, 1000)));
        t.retain(|s| s.off % 2 == 0);
        t.verify().unwrap();
        assert_eq!(t.len(), 301);
    }

    proptest! {
        #[test]
        fn behaves_like_a_multiset(ops in proptest::collection::vec((any::<bool>(), 0u32..64, any::<u32>()), 1..400)) {
            let mut t = Table::default();
            let mut model: Vec<Slot> = Vec::new();
            for (ins, tag_hi, off) in ops {
                let s = slot(tag_hi.wrapping_mul(0x0400_0001), off % 8);
                if ins {
                    if !model.contains(&s) { t.insert(s); model.push(s); }
                } else {
                    let present = model.iter().position(|m| *m == s);
                    prop_assert_eq!(t.remove(&s), present.is_some());
                    if let Some(p) = present { model.swap_remove(p); }
                }
                prop_assert!(t.verify().is_ok(), "{:?}", t.verify());
            }
            let mut got: Vec<Slot> = t.iter().copied().collect();
            got.sort_by_key(|s| (s.tag, s.off));
            model.sort_by_key(|s| (s.tag, s.off));
            prop_assert_eq!(got, model);
        }
    }
}
