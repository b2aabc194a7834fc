//! Counters that many threads change on every operation and few read: the server's request
//! statistics, the in-memory hash's record and byte totals.
//!
//! One `AtomicU64` would be written by all those threads: its cache line would move between
//! the cores on about every operation (on the test VM a transfer costs about 170 ns, as much as
//! a whole insert into the in-memory hash). A [`Counter`] keeps one slot per thread (threads
//! are numbered on first use, slot = number mod [`SLOTS`]), each on its own cache lines, and
//! adds them up only when read. Slots wrap, so a slot may hold a "negative" share of a total
//! that only ever is read whole.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Slots per counter: threads beyond this many share slots (still correct, just contended).
pub const SLOTS: usize = 8;

/// One slot, alone on its pair of cache lines (the adjacent-line prefetcher fetches lines in
/// pairs).
#[derive(Default)]
#[repr(align(128))]
struct Slot(AtomicU64);

/// A counter that many threads add to and few read.
pub struct Counter([Slot; SLOTS]);

static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD_NUMBER: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// The calling thread's number, given out in order on first use (0, 1, 2, …). Spreads threads
/// over per-thread resources: a [`Counter`]'s slots, the on-disk hash's lanes.
#[inline]
pub fn thread_number() -> usize {
    THREAD_NUMBER.with(|c| {
        let mut n = c.get();
        if n == usize::MAX {
            n = NEXT_THREAD.fetch_add(1, Relaxed);
            c.set(n);
        }
        n
    })
}

/// The slot of the calling thread.
#[inline]
fn my_slot() -> usize {
    thread_number() % SLOTS
}

impl Counter {
    pub fn new() -> Counter {
        Counter(std::array::from_fn(|_| Slot::default()))
    }

    /// Add `n` (in the calling thread's slot).
    #[inline]
    pub fn add(&self, n: u64) {
        self.0[my_slot()].0.fetch_add(n, Relaxed);
    }

    /// Subtract `n` (wrapping, in the calling thread's slot).
    #[inline]
    pub fn sub(&self, n: u64) {
        self.add(n.wrapping_neg());
    }

    /// Back to zero (`stats reset`). An add racing with it may count or not.
    pub fn reset(&self) {
        for s in &self.0 {
            s.0.store(0, Relaxed);
        }
    }

    /// The total of every slot (wrapping, as the 64-bit counters of memcached do).
    pub fn get(&self) -> u64 {
        self.0
            .iter()
            .fold(0u64, |t, s| t.wrapping_add(s.0.load(Relaxed)))
    }
}

impl Default for Counter {
    fn default() -> Counter {
        Counter::new()
    }
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_from_many_threads_sum_up() {
        let c = Counter::new();
        std::thread::scope(|s| {
            for t in 0..(2 * SLOTS as u64 + 3) {
                let c = &c;
                s.spawn(move || {
                    for _ in 0..1000 {
                        c.add(t + 1);
                    }
                });
            }
        });
        let n = 2 * SLOTS as u64 + 3;
        assert_eq!(c.get(), 1000 * n * (n + 1) / 2);
    }

    #[test]
    fn subtractions_in_other_threads_cancel_out() {
        let c = Counter::new();
        std::thread::scope(|s| {
            s.spawn(|| c.add(1000));
        });
        c.sub(400);
        assert_eq!(c.get(), 600);
    }

    #[test]
    fn reset_clears_every_slot() {
        let c = Counter::new();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| c.add(5));
            }
        });
        assert_eq!(c.get(), 20);
        c.reset();
        assert_eq!(c.get(), 0);
        c.add(1);
        assert_eq!(c.get(), 1);
    }

    #[test]
    fn threads_take_different_slots() {
        let slots: Vec<usize> = (0..SLOTS)
            .map(|_| std::thread::spawn(my_slot).join().unwrap())
            .collect();
        let mut distinct = slots.clone();
        distinct.sort_unstable();
        distinct.dedup();
        // Other tests' threads take numbers too, so only "not all the same" is certain.
        assert!(distinct.len() > 1, "{slots:?}");
    }

    #[test]
    fn slots_do_not_share_cache_lines() {
        assert!(std::mem::align_of::<Slot>() >= 128);
        assert_eq!(std::mem::size_of::<Counter>(), SLOTS * 128);
    }
}
