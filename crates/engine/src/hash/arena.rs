//! Memory for the index's slot arrays: zeroed, and backed by 2 MiB huge pages whatever its size.
//!
//! A lookup in an index larger than the caches is a random read; on 4 KiB pages it also misses
//! the TLB, and a page walk (two-dimensional in a virtual machine) costs about as much as the
//! read itself. Arrays of `HUGE` bytes or more get a mapping of their own (`map_huge`). The
//! smaller ones (64 shards of a million-record index are 0.4 MiB each) come from `Arena`: a
//! buddy allocator over 2 MiB huge-page chunks, so that many small arrays share huge pages
//! instead of each rounding up to one.
//!
//! Blocks are powers of two from `MIN_BLOCK` to a whole chunk, each aligned to its size; a
//! freed block merges with its free buddy. A chunk that becomes wholly free is unmapped, except
//! one kept for the next allocation. A fresh chunk is zero (its pages are written once by
//! `prefault`); a block freed by its user is zeroed again only when it is handed out.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::ptr::NonNull;

/// A huge page, the arena's chunk size and the threshold for a mapping of its own.
pub const HUGE: usize = 2 << 20;
/// The smallest block the arena hands out.
const MIN_BLOCK: usize = 1 << 10;
/// Block sizes `MIN_BLOCK << order` for `order` in `0..ORDERS`; the last is a whole chunk.
const ORDERS: usize = (HUGE / MIN_BLOCK).trailing_zeros() as usize + 1;

/// The order of the smallest block that holds `bytes` (at most `HUGE`).
pub fn order_for(bytes: usize) -> usize {
    debug_assert!(bytes <= HUGE);
    let blocks = bytes.max(1).div_ceil(MIN_BLOCK).next_power_of_two();
    blocks.trailing_zeros() as usize
}

/// Bytes of a block of `order`.
pub fn block_bytes(order: usize) -> usize {
    MIN_BLOCK << order
}

/// Touch every 4 KiB page of fresh zeroed memory with a write of zero.
///
/// Fresh anonymous memory that is *read* first gets the kernel's shared zero page; the first
/// write then replaces it, and replacing a mapped page flushes the TLB of every core running
/// the process: an inter-processor interrupt that stalls the other writer threads too. A
/// probe reads the table before an insert writes it, so without this every page of a new
/// table cost one such flush (a third of the time of a 2-thread load into a pre-sized index).
/// Writing first maps a private zeroed page directly, with no flush.
pub fn prefault(ptr: *mut u8, bytes: usize) {
    const PAGE: usize = 4096;
    let mut at = 0;
    while at < bytes {
        // SAFETY: `at < bytes` lies inside the allocation of `bytes` bytes at `ptr`, which
        // holds zeros and is not shared yet; writing a zero changes no value.
        unsafe { std::ptr::write_volatile(ptr.add(at), 0u8) };
        at += PAGE;
    }
}

/// Map `bytes` of zeroed anonymous memory at a huge-page-aligned address, advised into huge
/// pages; `None` when the kernel refuses. Freed with `unmap_huge(ptr, bytes)`.
pub fn map_huge(bytes: usize) -> Option<NonNull<u8>> {
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
        // A hint: refused, the memory simply uses small pages.
        libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    }
    NonNull::new(aligned as *mut u8)
}

/// Unmap what `map_huge(bytes)` returned.
///
/// # Safety
/// `ptr` came from `map_huge(bytes)` and nothing uses the memory any more.
pub unsafe fn unmap_huge(ptr: NonNull<u8>, bytes: usize) {
    let len = bytes.div_ceil(HUGE) * HUGE;
    // SAFETY: the caller's promise.
    unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
}

/// The buddy allocator's state (behind `ARENA`'s lock; allocations are rare: a table's
/// growth, a checkpoint load).
#[derive(Default)]
struct Arena {
    /// Free blocks of each order: address, and whether the block is still all zero.
    free: [BTreeMap<usize, bool>; ORDERS],
    /// Bytes handed out, by chunk address (a chunk is in the map while it is mapped).
    used: BTreeMap<usize, usize>,
}

static ARENA: Mutex<Arena> = Mutex::new(Arena {
    free: [const { BTreeMap::new() }; ORDERS],
    used: BTreeMap::new(),
});

impl Arena {
    /// A block of `order` from the free lists, split off a larger one if need be, and whether
    /// it still holds zeros; `None` when no free block is large enough. A block that does not
    /// is zeroed by the caller (`zeroed`), after the arena's lock is released.
    fn take(&mut self, order: usize) -> Option<(NonNull<u8>, bool)> {
        let k = (order..ORDERS).find(|&k| !self.free[k].is_empty())?;
        let (addr, clean) = self.free[k].pop_first().expect("not empty");
        // Split down to `order`, freeing the upper halves.
        for j in (order..k).rev() {
            self.free[j].insert(addr + block_bytes(j), clean);
        }
        *self.used.get_mut(&chunk_of(addr)).expect("a mapped chunk") += block_bytes(order);
        Some((NonNull::new(addr as *mut u8)?, clean))
    }

    /// Add a chunk just mapped (and faulted in) as one free, zero block.
    fn add_chunk(&mut self, chunk: NonNull<u8>) {
        let addr = chunk.as_ptr() as usize;
        self.used.insert(addr, 0);
        self.free[ORDERS - 1].insert(addr, true);
    }

    #[cfg(test)]
    fn alloc(&mut self, order: usize) -> Option<NonNull<u8>> {
        if self.free[order..].iter().all(BTreeMap::is_empty) {
            self.add_chunk(new_chunk()?);
        }
        self.take(order).map(|t| zeroed(t, order))
    }

    fn free(&mut self, addr: usize, order: usize) {
        let chunk = chunk_of(addr);
        let used = self
            .used
            .get_mut(&chunk)
            .expect("a block of a mapped chunk");
        *used -= block_bytes(order);
        // A freed block is dirty, and so is any block merged with it.
        let (mut addr, mut order) = (addr, order);
        while order + 1 < ORDERS {
            let buddy = addr ^ block_bytes(order);
            if self.free[order].remove(&buddy).is_none() {
                break;
            }
            addr = addr.min(buddy);
            order += 1;
        }
        if order + 1 == ORDERS && !self.free[order].is_empty() {
            // A wholly free chunk, and another is kept already: give this one back.
            self.used.remove(&chunk);
            // SAFETY: the whole chunk is free: no block of it is in use or on a free list.
            unsafe { unmap_huge(NonNull::new(chunk as *mut u8).expect("not null"), HUGE) };
            return;
        }
        self.free[order].insert(addr, false);
    }
}

fn chunk_of(addr: usize) -> usize {
    addr & !(HUGE - 1)
}

/// A fresh chunk, mapped and faulted in (for the kernel, on a fresh huge page: zeroing 2 MiB).
fn new_chunk() -> Option<NonNull<u8>> {
    let p = map_huge(HUGE)?;
    prefault(p.as_ptr(), HUGE);
    Some(p)
}

/// A zeroed block of `block_bytes(order)` bytes from the shared arena, aligned to its size;
/// `None` when no memory could be mapped. A new chunk is mapped and faulted in without the
/// arena's lock, so other threads' allocations and frees do not wait for the kernel.
pub fn alloc(order: usize) -> Option<NonNull<u8>> {
    let taken = ARENA.lock().take(order);
    let taken = match taken {
        Some(t) => t,
        None => {
            let chunk = new_chunk()?;
            let mut a = ARENA.lock();
            a.add_chunk(chunk);
            // Another thread may have taken part of the chunk meanwhile, or added one.
            a.take(order)?
        }
    };
    Some(zeroed(taken, order))
}

/// The block `take` returned, zeroed if it was not.
fn zeroed((ptr, clean): (NonNull<u8>, bool), order: usize) -> NonNull<u8> {
    if !clean {
        // SAFETY: the block lies in a mapped chunk and was just taken off the free lists:
        // nothing else uses it.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, block_bytes(order)) };
    }
    ptr
}

/// Give back a block.
///
/// # Safety
/// `ptr` came from `alloc(order)` and nothing uses the block any more.
pub unsafe fn free(ptr: NonNull<u8>, order: usize) {
    ARENA.lock().free(ptr.as_ptr() as usize, order);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_round_up_to_powers_of_two() {
        assert_eq!(order_for(1), 0);
        assert_eq!(order_for(MIN_BLOCK), 0);
        assert_eq!(order_for(MIN_BLOCK + 1), 1);
        assert_eq!(order_for(3 * MIN_BLOCK), 2);
        assert_eq!(order_for(HUGE), ORDERS - 1);
        assert_eq!(block_bytes(ORDERS - 1), HUGE);
    }

    /// Panic unless the blocks (address, order) are pairwise disjoint.
    fn check_disjoint(blocks: &[(usize, usize)]) {
        let mut v: Vec<(usize, usize)> = blocks
            .iter()
            .map(|&(a, o)| (a, a + block_bytes(o)))
            .collect();
        v.sort();
        for w in v.windows(2) {
            assert!(w[0].1 <= w[1].0, "blocks overlap: {w:?}");
        }
    }

    /// On a private arena (the shared one is used by every test thread at once).
    #[test]
    fn blocks_are_aligned_zeroed_disjoint_and_merge_back() {
        let mut a = Arena::default();
        let mut blocks = Vec::new();
        for order in [0, 3, 1, 0, 5, 2, ORDERS - 1, 4] {
            let p = a.alloc(order).expect("memory").as_ptr() as usize;
            assert_eq!(p % block_bytes(order), 0, "aligned to its size");
            // SAFETY: the block is ours, `block_bytes(order)` long.
            let b = unsafe { std::slice::from_raw_parts_mut(p as *mut u8, block_bytes(order)) };
            assert!(b.iter().all(|&x| x == 0), "zeroed");
            b.fill(0xA5);
            blocks.push((p, order));
        }
        check_disjoint(&blocks);
        // Freed and taken again: dirty memory comes back zeroed.
        let (p, o) = blocks.remove(1);
        a.free(p, o);
        let q = a.alloc(o).expect("memory").as_ptr() as usize;
        // SAFETY: as above.
        let b = unsafe { std::slice::from_raw_parts(q as *const u8, block_bytes(o)) };
        assert!(b.iter().all(|&x| x == 0), "a reused block is zeroed");
        blocks.push((q, o));
        check_disjoint(&blocks);
        for (p, o) in blocks {
            a.free(p, o);
        }
        // Everything merged back into whole chunks; all but one were unmapped.
        assert_eq!(a.used.len(), 1);
        assert_eq!(a.used.values().copied().collect::<Vec<_>>(), [0]);
        for (k, f) in a.free.iter().enumerate() {
            assert_eq!(f.len(), usize::from(k == ORDERS - 1), "order {k}: {f:?}");
        }
        let (last, _) = a.free[ORDERS - 1].pop_first().expect("kept");
        // SAFETY: the kept chunk, now taken off the lists.
        unsafe { unmap_huge(NonNull::new(last as *mut u8).expect("not null"), HUGE) };
    }

    /// The shared arena under threads that allocate and free at once (chunks are mapped
    /// without the lock): no block is handed out twice while in use.
    #[test]
    fn threads_share_the_arena() {
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut live: Vec<(NonNull<u8>, usize, u8)> = Vec::new();
                    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(t);
                    for i in 0..2000u32 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        if !x.is_multiple_of(3) || live.is_empty() {
                            let order = (x >> 8) as usize % (ORDERS - 2);
                            let p = alloc(order).expect("memory");
                            let fill = (i as u8) ^ t;
                            // SAFETY: the block is ours.
                            unsafe { std::ptr::write_bytes(p.as_ptr(), fill, block_bytes(order)) };
                            live.push((p, order, fill));
                        } else {
                            let (p, o, f) = live.swap_remove((x >> 16) as usize % live.len());
                            // SAFETY: the block is ours.
                            let b =
                                unsafe { std::slice::from_raw_parts(p.as_ptr(), block_bytes(o)) };
                            assert!(b.iter().all(|&v| v == f), "a block kept its bytes");
                            // SAFETY: taken from `alloc(o)`, no longer used.
                            unsafe { free(p, o) };
                        }
                    }
                    for (p, o, f) in live {
                        // SAFETY: as above.
                        let b = unsafe { std::slice::from_raw_parts(p.as_ptr(), block_bytes(o)) };
                        assert!(b.iter().all(|&v| v == f), "a block kept its bytes");
                        // SAFETY: as above.
                        unsafe { free(p, o) };
                    }
                })
            })
            .collect();
        for h in threads {
            h.join().expect("no thread failed");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Random allocations and frees: live blocks never overlap, each keeps what its owner
        /// wrote, and at the end every chunk is free again.
        #[test]
        fn random_use_keeps_blocks_apart(
            ops in proptest::collection::vec((proptest::prelude::any::<bool>(), 0usize..ORDERS, proptest::prelude::any::<u8>()), 1..120)
        ) {
            let mut a = Arena::default();
            let mut live: Vec<(usize, usize, u8)> = Vec::new();
            for (take, order, fill) in ops {
                if take || live.is_empty() {
                    let p = a.alloc(order).expect("memory").as_ptr() as usize;
                    // SAFETY: the block is ours.
                    unsafe { std::ptr::write_bytes(p as *mut u8, fill, block_bytes(order)) };
                    live.push((p, order, fill));
                } else {
                    let (p, o, f) = live.swap_remove(fill as usize % live.len());
                    // SAFETY: the block is ours.
                    let b = unsafe { std::slice::from_raw_parts(p as *const u8, block_bytes(o)) };
                    proptest::prop_assert!(b.iter().all(|&x| x == f), "a block kept its bytes");
                    a.free(p, o);
                }
                let spans: Vec<(usize, usize)> = live.iter().map(|&(p, o, _)| (p, o)).collect();
                check_disjoint(&spans);
            }
            for (p, o, _) in live {
                a.free(p, o);
            }
            proptest::prop_assert!(a.used.len() <= 1);
            proptest::prop_assert!(a.used.values().all(|&u| u == 0));
            for (k, f) in a.free.iter().enumerate() {
                proptest::prop_assert_eq!(f.len(), usize::from(k == ORDERS - 1 && !a.used.is_empty()));
            }
            if let Some((last, _)) = a.free[ORDERS - 1].pop_first() {
                // SAFETY: the kept chunk, now taken off the lists.
                unsafe { unmap_huge(NonNull::new(last as *mut u8).expect("not null"), HUGE) };
            }
        }
    }
}
