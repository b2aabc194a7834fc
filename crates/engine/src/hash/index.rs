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

use super::arena::{self, HUGE};
use std::sync::atomic::{AtomicU64, Ordering};

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
/// byte positions where every key has the same byte, with a scratch vector kept by the caller
/// (so that sorting many arrays in turn allocates, and faults in, its memory once). A
/// checkpoint sorts a shard it finds out of tag order with it (`ckpt::encode`).
pub fn radix_sort_with(v: &mut Vec<Slot>, tmp: &mut Vec<Slot>, key: impl Fn(&Slot) -> u64) {
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
    tmp.clear();
    tmp.resize(v.len(), Slot::default());
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
        std::mem::swap(v, tmp);
    }
}

/// Slots per bucket. A bucket is two cache lines (128 bytes): its lock-and-seq word, then
/// `PER` slots.
pub const PER: usize = 10;

/// A bucket of the slot array: a word and `PER` slots. The word's bit 0 is the bucket's lock
/// (taken by `Table::lock_run`, which writers that do not hold the whole table use); the other
/// bits are the bucket's seq (`Run::seq`). A run that changed a bucket's slots leaves its word
/// larger than it found it, so the word is also the bucket's version, which lets readers read
/// its slots without the lock (`Table::snapshot`, a seqlock). The word sits in the same cache line as the first
/// slots, so that a write moves no line other than the slots' own between writing cores (the
/// measurement: docs/bench-history/engine-hash.md, "Two writers: where the locks must live").
#[repr(C, align(128))]
struct Bucket {
    word: AtomicU64,
    slots: [Slot; PER],
}

const _: () = assert!(std::mem::size_of::<Bucket>() == 128);

/// The slot array: zeroed memory (an all-zero slot is empty, an all-zero word unlocked with
/// seq 0), on huge pages (`arena`). Slots are addressed by position: position `p` is slot
/// `p % PER` of bucket `p / PER`.
///
/// Every access goes through a raw pointer (no reference into the array outlives a call), so
/// that `Table::lock_run` can write the slots of the buckets it locked while other threads
/// hold the same `&Table`.
#[repr(C)]
struct Slots {
    ptr: std::ptr::NonNull<Bucket>,
    /// Buckets.
    nb: usize,
    from: Backing,
}

/// Where a slot array's memory comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backing {
    /// A block of this order from the shared arena (arrays under `HUGE` bytes). One byte, so
    /// that `Slots` stays three words (`Table::hot_field_ends`).
    Arena(u8),
    /// A mapping of its own (`arena::map_huge`).
    Mapped,
    /// The global allocator (when no memory could be mapped).
    Heap,
}

// SAFETY: `Slots` owns its allocation exclusively, like a `Box<[Bucket]>`; `Slot` is plain
// data and the words are atomics.
unsafe impl Send for Slots {}
// SAFETY: shared access reads slots, and writes only those of buckets whose lock the writer
// holds (`Table::lock_run`, whose contract excludes every other kind of access meanwhile).
unsafe impl Sync for Slots {}

impl Slots {
    fn bytes(nb: usize) -> usize {
        nb.max(1) * std::mem::size_of::<Bucket>()
    }

    fn heap_layout(nb: usize) -> std::alloc::Layout {
        match std::alloc::Layout::array::<Bucket>(nb.max(1)) {
            Ok(l) => l,
            Err(_) => std::alloc::handle_alloc_error(std::alloc::Layout::new::<Bucket>()),
        }
    }

    /// A zeroed array of `nb` buckets on huge pages: a block of the shared arena when smaller
    /// than `HUGE`, else a mapping of its own whose pages the kernel zero-fills on first touch
    /// (so nothing is written twice). The global allocator only if mapping memory fails.
    ///
    /// Every page is touched by a write before the table is used (`arena::prefault`).
    fn zeroed(nb: usize) -> Slots {
        let bytes = Self::bytes(nb);
        if bytes < HUGE {
            let order = arena::order_for(bytes);
            if let Some(ptr) = arena::alloc(order) {
                return Slots {
                    ptr: ptr.cast(),
                    nb,
                    from: Backing::Arena(order as u8),
                };
            }
        } else if let Some(ptr) = arena::map_huge(bytes) {
            arena::prefault(ptr.as_ptr(), bytes);
            return Slots {
                ptr: ptr.cast(),
                nb,
                from: Backing::Mapped,
            };
        }
        let layout = Self::heap_layout(nb);
        // SAFETY: the layout has a non-zero size; zeroed memory is a valid array of empty
        // buckets.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(ptr) = std::ptr::NonNull::new(raw.cast::<Bucket>()) else {
            std::alloc::handle_alloc_error(layout)
        };
        arena::prefault(raw, bytes);
        Slots {
            ptr,
            nb,
            from: Backing::Heap,
        }
    }

    /// Positions (slots) in the array.
    #[inline]
    fn len(&self) -> usize {
        self.nb * PER
    }

    #[inline]
    fn bucket(&self, b: usize) -> *mut Bucket {
        debug_assert!(b < self.nb);
        // SAFETY: `b` is within the allocation of `nb` buckets.
        unsafe { self.ptr.as_ptr().add(b) }
    }

    #[inline]
    fn slot_ptr(&self, p: usize) -> *mut Slot {
        let b = self.bucket(p / PER);
        // SAFETY: a field of a bucket inside the allocation; no reference is made.
        unsafe {
            std::ptr::addr_of_mut!((*b).slots)
                .cast::<Slot>()
                .add(p % PER)
        }
    }

    #[inline]
    fn get(&self, p: usize) -> Slot {
        // SAFETY: a valid, aligned slot; plain data. See the type's notes on concurrency.
        unsafe { self.slot_ptr(p).read() }
    }

    /// `get` racing with writers of the position's bucket: the value may be torn, and is only
    /// used once the bucket's word shows that no writer was there (`Table::snapshot`).
    #[inline]
    fn get_racy(&self, p: usize) -> Slot {
        // SAFETY: a valid, aligned slot of plain data (any bytes are a valid `Slot`). A
        // volatile read, as a seqlock's optimistic read must be: the compiler neither assumes
        // the bytes stable nor elides the read.
        unsafe { self.slot_ptr(p).read_volatile() }
    }

    #[inline]
    fn set(&self, p: usize, s: Slot) {
        // SAFETY: as in `get`; the caller has the array exclusively (`&mut Table`) or holds
        // the lock of this position's bucket (`Run`).
        unsafe { self.slot_ptr(p).write(s) }
    }

    #[inline]
    fn word(&self, b: usize) -> &AtomicU64 {
        // SAFETY: the word of a bucket inside the allocation; atomics may be shared.
        unsafe { &*std::ptr::addr_of!((*self.bucket(b)).word) }
    }

    /// Every non-empty slot from position `from` on, in order.
    fn occupied(&self, from: usize) -> impl Iterator<Item = Slot> + '_ {
        (from..self.len())
            .map(|p| self.get(p))
            .filter(|s| !s.is_empty())
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        let ptr = self.ptr.cast::<u8>();
        match self.from {
            // SAFETY: the block `zeroed` took for this order; the array is gone with `self`.
            Backing::Arena(order) => unsafe { arena::free(ptr, order as usize) },
            // SAFETY: the mapping `zeroed` made for this length.
            Backing::Mapped => unsafe { arena::unmap_huge(ptr, Self::bytes(self.nb)) },
            // SAFETY: allocated in `zeroed` with this same layout.
            Backing::Heap => unsafe {
                std::alloc::dealloc(ptr.as_ptr(), Self::heap_layout(self.nb))
            },
        }
    }
}

impl Clone for Slots {
    fn clone(&self) -> Slots {
        let c = Slots::zeroed(self.nb);
        // SAFETY: two distinct allocations of `nb` buckets; the source is not being written
        // (cloning takes `&Table` outside any `Run`).
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().cast::<u8>(),
                c.ptr.as_ptr().cast::<u8>(),
                Self::bytes(self.nb),
            )
        };
        c
    }
}

impl std::fmt::Debug for Slots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Slots({} buckets)", self.nb)
    }
}

/// Default maximum load (slots used / home positions) before the table doubles.
const MAX_LOAD: f64 = 0.85;
/// Minimum number of buckets.
const MIN_BUCKETS: usize = 8;
/// From this many home positions, a table past its load limit grows without blocking its shard
/// (`Table::wants_growth`): the writer makes the new memory after releasing the shard lock,
/// installs it under the lock in constant time, and the slots then move over a few at a time
/// with each later write (`Moving`). An insert grows a table by itself, moving every slot at
/// once, only `SLACK` past the limit. Smaller tables always grow at once: that is cheap.
const DEFER_CAP: usize = 1024;
const SLACK: f64 = 0.06;
/// Old positions moved to the new array per write while a table grows.
const MOVE_STEP: usize = 32;

/// Memory for a table's next size, made (and its pages faulted in) without holding the
/// table: see `Table::grow_into`. Also memory a table no longer needs (`Table::take_retired`),
/// to be freed after the lock is released.
pub struct Spare {
    slots: Slots,
}

impl Spare {
    /// An array of `nb` buckets (a power of two: `Table::grow_cap`).
    pub fn new(nb: usize) -> Spare {
        Spare {
            slots: Slots::zeroed(nb),
        }
    }
}

/// The previous array of a growing table. Its slots move to the new array in tag order: every
/// slot with a tag below `Table::bound` is in the new array, every other one in this array at
/// a position of at least `pos`. The positions below `pos` are stale and never read: a tag of
/// at least `bound` has its home at or after `pos`, since `pos` was an empty position (or 0)
/// when `bound` was set to `pos`'s first home tag, and no run crosses an empty position.
#[derive(Clone, Debug)]
struct Moving {
    slots: Slots,
    cap: usize,
    pos: usize,
}

/// Laid out (`repr(C)`) so that, behind the shard's lock word, what every write reads or
/// writes (the array, `cap`, `len`, `bound`) shares the lock's cache line, and the fields that
/// change only when the table grows come after (see `ShardState`).
#[derive(Clone, Debug)]
#[repr(C)]
pub struct Table {
    /// `cap` home positions followed by the overflow area.
    slots: Slots,
    cap: usize,
    /// Slots in the table (in both arrays while it grows). Writers through `lock_run` count
    /// theirs elsewhere (the shard's, see `hash::Brl`), and add them here afterwards.
    len: usize,
    /// Tags below this are in `slots`, the others in `moving` (`u64::MAX` when not growing:
    /// every tag is in `slots`). Kept here so that a lookup decides with no extra load.
    bound: u64,
    /// Load at which the table doubles (shards use different ones so that they do not all
    /// double at the same moment).
    max_load: f64,
    moving: Option<Box<Moving>>,
    /// The previous array once every slot has moved out of it, for the writer to free after
    /// releasing the shard lock.
    retired: Option<Slots>,
}

impl Default for Table {
    fn default() -> Self {
        Table::with_capacity(0)
    }
}

/// Home positions of an array of `nb` buckets: all but the overflow area, 1/32 of the buckets
/// (at least 4), which holds runs that spill past the last home position (a run that would
/// leave it makes the table grow).
fn cap_of(nb: usize) -> usize {
    (nb - (nb / 32).max(4)) * PER
}

#[inline]
fn home_in(tag: u32, cap: usize) -> usize {
    ((tag as u64 * cap as u64) >> 32) as usize
}

/// The smallest tag whose home in an array of `cap` home positions is `p` or later.
fn first_home_tag(p: usize, cap: usize) -> u64 {
    ((p as u64) << 32).div_ceil(cap as u64)
}

/// The address of `tag`'s home position in an array at `base` of `cap` home positions (from
/// `Table::home_array`). Only an address to prefetch: computed without the table's lock, it
/// may point into an array since replaced, and must never be dereferenced.
/// Returns the address of the home position's bucket (its word, which a writer locks first)
/// and of the home position itself.
#[inline]
pub fn home_addr(base: usize, cap: usize, tag: u32) -> (usize, usize) {
    let p = home_in(tag, cap);
    let bucket = base.wrapping_add((p / PER) * std::mem::size_of::<Bucket>());
    (
        bucket,
        bucket.wrapping_add(8 + (p % PER) * std::mem::size_of::<Slot>()),
    )
}

/// Insert `slot` into the array `slots` of `cap` home positions, keeping it sorted; false
/// when its run would leave the overflow area (nothing changed).
fn insert_in(slots: &Slots, cap: usize, slot: Slot) -> bool {
    insert_within(slots, home_in(slot.tag, cap), slots.len(), slot)
}

/// `insert_in` for a slot whose home is `home`, using positions before `end` only.
#[inline]
fn insert_within(slots: &Slots, home: usize, end: usize, slot: Slot) -> bool {
    let mut p = home;
    while p < end {
        let s = slots.get(p);
        if s.is_empty() || s.tag > slot.tag {
            break;
        }
        p += 1;
    }
    let mut e = p;
    while e < end && !slots.get(e).is_empty() {
        e += 1;
    }
    if e >= end {
        return false;
    }
    while e > p {
        slots.set(e, slots.get(e - 1));
        e -= 1;
    }
    slots.set(p, slot);
    true
}

/// Where `slot` is in the array `slots` of `cap` home positions.
#[inline]
fn position_in(slots: &Slots, cap: usize, slot: &Slot) -> Option<usize> {
    let mut p = home_in(slot.tag, cap);
    while p < slots.len() {
        let s = slots.get(p);
        if s.is_empty() || s.tag > slot.tag {
            return None;
        }
        if s == *slot {
            return Some(p);
        }
        p += 1;
    }
    None
}

/// Remove the slot at `i` of the array `slots` of `cap` home positions, shifting left every
/// following slot that sits after its home.
#[inline]
fn remove_at(slots: &Slots, cap: usize, mut i: usize) {
    loop {
        let j = i + 1;
        let next = if j < slots.len() {
            slots.get(j)
        } else {
            Slot::default()
        };
        if next.is_empty() || home_in(next.tag, cap) >= j {
            slots.set(i, Slot::default());
            return;
        }
        slots.set(i, next);
        i = j;
    }
}

/// The slots whose tag is `tag` in the array `slots` of `cap` home positions.
#[inline]
fn candidates_in(slots: &Slots, cap: usize, tag: u32) -> impl Iterator<Item = Slot> + '_ {
    (home_in(tag, cap)..slots.len())
        .map(|p| slots.get(p))
        .take_while(move |s| !s.is_empty() && s.tag <= tag)
        .filter(move |s| s.tag == tag)
}

/// How many times a wait spins before the thread yields between tries.
const SPINS: u32 = 64;

/// One more try of a short wait (`spins` counts them): spin at first, then yield, so that a
/// waiter does not burn the core its holder may need.
#[inline]
pub fn back_off(spins: &mut u32) {
    *spins += 1;
    if *spins < SPINS {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// Take the lock of the bucket whose word is `w`.
#[inline]
fn lock_word(w: &AtomicU64) {
    let mut spins = 0;
    loop {
        let v = w.load(Ordering::Relaxed);
        if v & 1 == 0
            && w.compare_exchange_weak(v, v | 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            // A seqlock writer: a reader that sees any slot written after this sees the word
            // locked (`Table::snapshot`). Free on x86.
            std::sync::atomic::fence(Ordering::Release);
            return;
        }
        back_off(&mut spins);
    }
}

/// Release a bucket lock held by this thread (only the holder changes the word), adding
/// `add` to its seq.
#[inline]
fn unlock_word(w: &AtomicU64, add: u64) {
    let v = w.load(Ordering::Relaxed);
    debug_assert!(v & 1 == 1);
    w.store((v & !1) + (add << 1), Ordering::Release);
}

/// The buckets of one tag's run, locked: from the bucket of the tag's home position through
/// the bucket of the first empty position at or after it (`Table::lock_run`). Everything a
/// lookup, an insert, a replace or a remove of that tag reads or writes lies in them: a lookup
/// stops at the first empty position, an insert shifts slots up to it, a remove shifts back
/// slots from before it. Dropping the run releases the locks.
pub struct Run<'a> {
    slots: &'a Slots,
    cap: usize,
    tag: u32,
    home: usize,
    /// First and last locked buckets.
    first: usize,
    last: usize,
    /// The home bucket's seq when it was locked.
    seq0: u64,
    /// Whether a slot was written.
    dirty: bool,
}

impl Run<'_> {
    /// The tag whose run this is.
    #[inline]
    pub fn tag(&self) -> u32 {
        self.tag
    }

    /// The positions this run may use: up to the end of its last bucket.
    #[inline]
    fn end(&self) -> usize {
        (self.last + 1) * PER
    }

    /// The slots whose tag is the run's.
    #[inline]
    pub fn candidates(&self) -> impl Iterator<Item = Slot> + '_ {
        candidates_in(self.slots, self.cap, self.tag)
    }

    /// The seq kept in the home bucket: the largest seq given out through it (0 at first).
    #[inline]
    pub fn seq(&self) -> u64 {
        self.slots.word(self.first).load(Ordering::Relaxed) >> 1
    }

    /// Keep `seq` in the home bucket (which stays locked).
    #[inline]
    pub fn set_seq(&mut self, seq: u64) {
        self.slots
            .word(self.first)
            .store((seq << 1) | 1, Ordering::Relaxed);
    }

    /// Insert `slot` (of the run's tag; the caller guarantees no equal slot exists). Always
    /// fits: the run ends at an empty position.
    #[inline]
    pub fn insert(&mut self, slot: Slot) {
        debug_assert_eq!(slot.tag, self.tag);
        let fitted = insert_within(self.slots, self.home, self.end(), slot);
        debug_assert!(fitted, "a locked run ends at an empty position");
        self.dirty = true;
    }

    /// Overwrite slot `old` with `new` (the run's tag). Returns false when `old` is absent.
    #[inline]
    pub fn replace(&mut self, old: &Slot, new: Slot) -> bool {
        debug_assert!(old.tag == self.tag && new.tag == self.tag);
        match position_in(self.slots, self.cap, old) {
            Some(p) => {
                self.slots.set(p, new);
                self.dirty = true;
                true
            }
            None => false,
        }
    }

    /// Remove this exact slot (of the run's tag). Returns false when absent.
    #[inline]
    pub fn remove(&mut self, slot: &Slot) -> bool {
        debug_assert_eq!(slot.tag, self.tag);
        match position_in(self.slots, self.cap, slot) {
            Some(i) => {
                remove_at(self.slots, self.cap, i);
                self.dirty = true;
                true
            }
            None => false,
        }
    }
}

impl Drop for Run<'_> {
    /// Unlock the buckets. When a slot was written, each word is left larger than it was
    /// found (the home bucket's already is when its seq was raised), so that no optimistic
    /// reader takes what it read meanwhile for a consistent view.
    #[inline]
    fn drop(&mut self) {
        let raised = self.seq() != self.seq0;
        for b in self.first..=self.last {
            let add = self.dirty && !(b == self.first && raised);
            unlock_word(self.slots.word(b), u64::from(add));
        }
    }
}

/// The most candidates `Table::snapshot` keeps; a tag with more is read under its locks.
const SNAP_MAX: usize = 4;

/// The candidates of a tag, read without locks (`Table::snapshot`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Snapshot {
    slots: [Slot; SNAP_MAX],
    n: usize,
}

impl Snapshot {
    /// The slots whose tag is the snapshot's, in table order.
    #[inline]
    pub fn candidates(&self) -> impl Iterator<Item = Slot> + '_ {
        self.slots[..self.n].iter().copied()
    }
}

/// Buckets one snapshot may read (the home bucket and those its run spills into).
const SNAP_BUCKETS: usize = 4;

/// Tries of `Table::snapshot` before it gives up.
const SNAP_TRIES: u32 = 8;

impl Table {
    /// A table that holds `n` slots without growing.
    pub fn with_capacity(n: usize) -> Table {
        let want = (n as f64 / MAX_LOAD) as usize + 1;
        let mut nb = MIN_BUCKETS;
        while cap_of(nb) < want {
            nb *= 2;
        }
        Table {
            slots: Slots::zeroed(nb),
            cap: cap_of(nb),
            len: 0,
            max_load: MAX_LOAD,
            bound: u64::MAX,
            moving: None,
            retired: None,
        }
    }

    /// Double at load `l` (clamped to 0.5..=0.9) instead of the default.
    pub fn set_max_load(&mut self, l: f64) {
        self.max_load = l.clamp(0.5, 0.9);
    }

    /// The array that holds `tag`, and its number of home positions.
    #[inline]
    fn part(&self, tag: u32) -> (&Slots, usize) {
        if (tag as u64) < self.bound {
            return (&self.slots, self.cap);
        }
        match &self.moving {
            Some(m) => (&m.slots, m.cap),
            None => (&self.slots, self.cap),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Add `n` (may be negative) slots inserted or removed through `lock_run` to the count.
    pub fn add_len(&mut self, n: i64) {
        self.len = (self.len as i64 + n).max(0) as usize;
    }

    /// The address of the array that new slots go to, and its number of home positions: a
    /// hint for prefetching a tag's home without holding the table (`home_addr`).
    pub fn home_array(&self) -> (usize, usize) {
        (self.slots.ptr.as_ptr() as usize, self.cap)
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether a slot of the table is moving between two arrays (a growth under way).
    pub fn is_moving(&self) -> bool {
        self.moving.is_some()
    }

    /// Home positions of the array new slots go to.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// The load limit (`set_max_load`).
    pub fn max_load(&self) -> f64 {
        self.max_load
    }

    /// Bytes of memory the table occupies.
    pub fn memory(&self) -> usize {
        let old = self.moving.as_ref().map_or(0, |m| m.slots.nb);
        Slots::bytes(self.slots.nb + old)
    }

    /// The slots whose tag is `tag`.
    #[inline]
    pub fn candidates(&self, tag: u32) -> impl Iterator<Item = Slot> + '_ {
        let (slots, cap) = self.part(tag);
        candidates_in(slots, cap, tag)
    }

    /// Whether this exact slot is present.
    pub fn contains(&self, slot: &Slot) -> bool {
        self.candidates(slot.tag).any(|s| s == *slot)
    }

    /// Lock the run of `tag` (see `Run`), for a writer that does not hold the table
    /// exclusively. `None` when the run reaches the end of the overflow area (nothing is then
    /// held; the caller must insert with `&mut Table`, which grows the table).
    ///
    /// # Safety
    /// Until the `Run` is dropped, every other thread uses this table only through `lock_run`
    /// (and the methods of its `Run`), `snapshot`, `len`, `capacity`, `memory` and
    /// `home_array`; the table is not growing (`is_moving` false).
    #[inline(always)]
    pub unsafe fn lock_run(&self, tag: u32) -> Option<Run<'_>> {
        debug_assert!(self.moving.is_none());
        let slots = &self.slots;
        let home = home_in(tag, self.cap);
        let first = home / PER;
        lock_word(slots.word(first));
        let mut b = first;
        let mut p = home;
        loop {
            let end = (b + 1) * PER;
            while p < end {
                if slots.get(p).is_empty() {
                    return Some(Run {
                        slots,
                        cap: self.cap,
                        tag,
                        home,
                        first,
                        last: b,
                        seq0: slots.word(first).load(Ordering::Relaxed) >> 1,
                        dirty: false,
                    });
                }
                p += 1;
            }
            if b + 1 >= slots.nb {
                for l in first..=b {
                    unlock_word(slots.word(l), 0);
                }
                return None;
            }
            b += 1;
            lock_word(slots.word(b));
        }
    }

    /// The candidates of `tag` read without taking a lock, as a seqlock reader: the words of
    /// the buckets read are read before their slots and again after; the slots are taken only
    /// when no word was locked or changed (`Run` leaves a word it changed slots under larger).
    /// `None` after `SNAP_TRIES` tries that met writers, or when the tag has more than
    /// `SNAP_MAX` candidates or its run spans more than `SNAP_BUCKETS` buckets: the caller
    /// then locks the run.
    ///
    /// # Safety
    /// As for `lock_run`.
    #[inline]
    pub unsafe fn snapshot(&self, tag: u32) -> Option<Snapshot> {
        debug_assert!(self.moving.is_none());
        let slots = &self.slots;
        let home = home_in(tag, self.cap);
        let first = home / PER;
        let mut spins = 0;
        'tries: while spins < SNAP_TRIES {
            let mut words = [0u64; SNAP_BUCKETS];
            let mut nw = 0;
            let mut snap = Snapshot::default();
            let mut p = home;
            while p < slots.len() {
                if p == home || p.is_multiple_of(PER) {
                    if nw == SNAP_BUCKETS {
                        return None;
                    }
                    let w = slots.word(first + nw).load(Ordering::Acquire);
                    if w & 1 != 0 {
                        back_off(&mut spins);
                        continue 'tries;
                    }
                    words[nw] = w;
                    nw += 1;
                }
                let s = slots.get_racy(p);
                if s.is_empty() || s.tag > tag {
                    break;
                }
                if s.tag == tag {
                    if snap.n == SNAP_MAX {
                        return None;
                    }
                    snap.slots[snap.n] = s;
                    snap.n += 1;
                }
                p += 1;
            }
            // Orders the slot reads before the words' second reading (seqlock).
            std::sync::atomic::fence(Ordering::Acquire);
            if (0..nw).all(|i| slots.word(first + i).load(Ordering::Relaxed) == words[i]) {
                return Some(snap);
            }
            back_off(&mut spins);
        }
        None
    }

    /// Overwrite slot `old` with `new` (same tag). Returns false when `old` is absent.
    pub fn replace(&mut self, old: &Slot, new: Slot) -> bool {
        debug_assert_eq!(old.tag, new.tag);
        self.step();
        let (slots, cap) = self.part(old.tag);
        match position_in(slots, cap, old) {
            Some(p) => {
                slots.set(p, new);
                true
            }
            None => false,
        }
    }

    /// Whether the table is past its load limit and its writer should grow it: make a
    /// `Spare::new(grow_cap())` without the lock, then `grow_into` it under the lock.
    #[inline]
    pub fn wants_growth(&self) -> bool {
        self.moving.is_none() && self.len as f64 > self.cap as f64 * self.max_load
    }

    /// The number of buckets `wants_growth` asks for (for `Spare::new`).
    pub fn grow_cap(&self) -> usize {
        self.slots.nb * 2
    }

    /// Start growing into `spare` if it is larger than the table (else another writer grew it
    /// first, and `spare` comes back to be freed). Constant time: the slots move later, a few
    /// with each write (`step`).
    pub fn grow_into(&mut self, spare: Spare) -> Option<Spare> {
        if spare.slots.nb <= self.slots.nb || self.moving.is_some() {
            return Some(spare);
        }
        let old = std::mem::replace(&mut self.slots, spare.slots);
        self.moving = Some(Box::new(Moving {
            slots: old,
            cap: self.cap,
            pos: 0,
        }));
        self.cap = cap_of(self.slots.nb);
        self.bound = 0;
        None
    }

    /// The previous array of a finished growth, to be freed once the lock is released.
    pub fn take_retired(&mut self) -> Option<Spare> {
        self.retired.take().map(|slots| Spare { slots })
    }

    /// Move the next `MOVE_STEP` old positions (and up to the next empty one) of a growing
    /// table to its new array.
    #[inline]
    fn step(&mut self) {
        if self.moving.is_some() {
            self.move_slots(MOVE_STEP);
        }
    }

    /// Move at least `n` old positions of a growing table, stopping at an empty one (or the
    /// end, which finishes the growth).
    fn move_slots(&mut self, n: usize) {
        let Some(m) = self.moving.as_mut() else {
            return;
        };
        let old_len = m.slots.len();
        let end = m.pos.saturating_add(n).min(old_len);
        let mut p = m.pos;
        // The moving slots come in tag order and every tag in the new array is smaller: each
        // goes to the first empty position from its home, which is never before the position
        // after the one moved just before it (`next`): a sequential pass, as in a resize.
        let mut next = 0;
        let new_len = self.slots.len();
        while p < old_len {
            let s = m.slots.get(p);
            if p >= end && s.is_empty() {
                break;
            }
            if !s.is_empty() {
                let mut q = home_in(s.tag, self.cap).max(next);
                while q < new_len && !self.slots.get(q).is_empty() {
                    q += 1;
                }
                if q >= new_len {
                    // The new array's overflow area ran out (pathological tags): rebuild
                    // from every slot (`iter` reads the old array from `pos`).
                    m.pos = p;
                    let all: Vec<Slot> = self.iter().collect();
                    return self.rebuild(all.len(), all.into_iter());
                }
                self.slots.set(q, s);
                next = q + 1;
            }
            p += 1;
        }
        if p >= old_len {
            let done = self.moving.take().expect("growing");
            self.retired = Some(done.slots);
            self.bound = u64::MAX;
        } else {
            m.pos = p;
            // Every tag whose home in the old array is before `p` has moved.
            self.bound = first_home_tag(p, m.cap);
        }
    }

    /// Move up to `n` more old positions of a growth under way (none when there is none).
    pub fn move_some(&mut self, n: usize) {
        self.move_slots(n);
    }

    /// Finish a growth under way at once.
    fn settle(&mut self) {
        if self.moving.is_some() {
            self.move_slots(usize::MAX);
        }
    }

    /// Insert a slot (the caller guarantees no equal slot exists).
    pub fn insert(&mut self, slot: Slot) {
        debug_assert!(!slot.is_empty());
        self.step();
        let limit = if self.cap >= DEFER_CAP {
            self.max_load + SLACK
        } else {
            self.max_load
        };
        if (self.len + 1) as f64 > self.cap as f64 * limit {
            self.resize(self.grow_cap());
        }
        loop {
            let (slots, cap) = self.part(slot.tag);
            if insert_in(slots, cap, slot) {
                self.len += 1;
                return;
            }
            // The run reaches the end of the overflow area.
            self.resize(self.grow_cap());
        }
    }

    /// Remove this exact slot. Returns false when absent.
    pub fn remove(&mut self, slot: &Slot) -> bool {
        self.step();
        let (slots, cap) = self.part(slot.tag);
        let Some(i) = position_in(slots, cap, slot) else {
            return false;
        };
        remove_at(slots, cap, i);
        self.len -= 1;
        true
    }

    /// Append every slot to `v` (as `iter` gives them), without a branch per position.
    pub fn copy_into(&self, v: &mut Vec<Slot>) {
        if self.len == 0 {
            return; // a table emptied by deletes keeps its size: nothing to look through
        }
        let old = self.moving.as_ref().map(|m| (&m.slots, m.pos));
        for (part, from) in std::iter::once((&self.slots, 0)).chain(old) {
            let start = v.len();
            let n_pos = part.len() - from.min(part.len());
            v.resize(start + n_pos, Slot::default());
            let dst = &mut v[start..];
            let mut n = 0;
            for p in from..part.len() {
                let s = part.get(p);
                dst[n] = s;
                n += usize::from(!s.is_empty());
            }
            v.truncate(start + n);
        }
    }

    /// Every slot, in tag order.
    pub fn iter(&self) -> impl Iterator<Item = Slot> + '_ {
        let old = self.moving.as_ref().map(|m| m.slots.occupied(m.pos));
        self.slots.occupied(0).chain(old.into_iter().flatten())
    }

    pub fn clear(&mut self) {
        let l = self.max_load;
        *self = Table::with_capacity(0);
        self.max_load = l;
    }

    /// Keep only the slots for which `f` is true.
    pub fn retain(&mut self, mut f: impl FnMut(&Slot) -> bool) {
        let kept: Vec<Slot> = self.iter().filter(|s| f(s)).collect();
        self.rebuild(kept.len(), kept.into_iter());
    }

    /// Make room for `additional` more slots without growing.
    pub fn reserve(&mut self, additional: usize) {
        self.settle();
        let want = Table::with_capacity(self.len + additional).slots.nb;
        if want > self.slots.nb {
            self.resize(want);
        }
    }

    /// Grow to `nb` buckets at once (finishing a growth under way first).
    fn resize(&mut self, nb: usize) {
        self.settle();
        if nb <= self.slots.nb {
            return;
        }
        let old = std::mem::replace(&mut self.slots, Slots::zeroed(nb));
        let n = self.len;
        self.cap = cap_of(nb);
        self.len = 0;
        self.fill_sorted(old.occupied(0), n);
    }

    fn rebuild(&mut self, n: usize, slots: impl Iterator<Item = Slot>) {
        let l = self.max_load;
        *self = Table::with_capacity(n);
        self.max_load = l;
        self.fill_sorted(slots, n);
    }

    /// Fill an empty table (not growing) from slots given in tag order: one sequential pass.
    fn fill_sorted(&mut self, slots: impl Iterator<Item = Slot>, n: usize) {
        debug_assert!(self.moving.is_none());
        let mut next = 0usize;
        let mut pending = Vec::new();
        let end = self.slots.len();
        for s in slots {
            let p = home_in(s.tag, self.cap).max(next);
            if p >= end {
                pending.push(s);
                continue;
            }
            self.slots.set(p, s);
            next = p + 1;
            self.len += 1;
        }
        debug_assert!(pending.is_empty() || n > 0);
        if !pending.is_empty() {
            // Overflow ran out (pathological tags): grow and insert the rest one by one.
            self.resize(self.grow_cap());
            for s in pending {
                self.insert(s);
            }
        }
    }

    /// Build from `n` slots given in ascending tag order (one sequential pass).
    pub fn from_sorted(n: usize, slots: impl Iterator<Item = Slot>) -> Table {
        let mut t = Table::with_capacity(n);
        t.fill_sorted(slots, n);
        t
    }

    /// Check the invariants (tests and `check`): sorted, each slot at or after its home with no
    /// empty slot in between, and the count right; while growing, the same for the unmoved
    /// part of the old array, every tag below `bound` in the new array and none in the old;
    /// no bucket locked.
    pub fn verify(&self) -> Result<(), String> {
        let mut n = verify_part(&self.slots, 0, self.cap, 0, self.bound)?;
        if let Some(m) = &self.moving {
            n += verify_part(&m.slots, m.pos, m.cap, self.bound, u64::MAX)
                .map_err(|e| format!("old array: {e}"))?;
        }
        if n != self.len {
            return Err(format!("{} slots counted as {}", n, self.len));
        }
        Ok(())
    }
}

/// Check one array from position `from` (see `Table::verify`), every tag in `lo..hi` (`hi`
/// `u64::MAX`: no upper limit); returns its number of slots.
fn verify_part(slots: &Slots, from: usize, cap: usize, lo: u64, hi: u64) -> Result<usize, String> {
    if let Some(b) = (0..slots.nb).find(|&b| slots.word(b).load(Ordering::Relaxed) & 1 != 0) {
        return Err(format!("bucket {b} is locked"));
    }
    let mut n = 0;
    let mut prev: Option<u32> = None;
    let mut last_empty: Option<usize> = None;
    for i in from..slots.len() {
        let s = slots.get(i);
        if s.is_empty() {
            last_empty = Some(i);
            continue;
        }
        n += 1;
        if prev.is_some_and(|p| p > s.tag) {
            return Err(format!("slot {i} out of tag order"));
        }
        if (s.tag as u64) < lo || (hi != u64::MAX && s.tag as u64 >= hi) {
            return Err(format!("slot {i} has tag {} outside {lo}..{hi}", s.tag));
        }
        prev = Some(s.tag);
        let h = home_in(s.tag, cap);
        if h > i || h < from || last_empty.is_some_and(|e| e >= h) {
            return Err(format!("slot {i} is not reachable from its home {h}"));
        }
    }
    Ok(n)
}
#[cfg(test)]
impl Table {
    /// Where each field that every write reads or writes ends (byte offset within the table).
    pub(crate) fn hot_field_ends() -> [usize; 4] {
        use std::mem::{offset_of, size_of};
        [
            offset_of!(Table, slots) + size_of::<Slots>(),
            offset_of!(Table, cap) + size_of::<usize>(),
            offset_of!(Table, len) + size_of::<usize>(),
            offset_of!(Table, bound) + size_of::<u64>(),
        ]
    }
}

#[cfg(test)]
mod tests;
