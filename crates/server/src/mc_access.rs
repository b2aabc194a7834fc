//! When each item was last used and whether it was fetched since it was written: memcached's
//! `mg … h` / `l`, `me`'s `la` / `fetch` and `lru_crawler metadump`'s `la` / `fetch`.
//!
//! memcached keeps these in every item's header. A Kura record has no such field, and an
//! on-disk database would pay a write for every read to keep one, so the server keeps them in
//! memory, for every kind of database alike, and only from the first request that asks for
//! them (until then a request pays one relaxed atomic load):
//!
//! - a table of [`SLOTS`] 64-bit slots (8 MiB), allocated when tracking starts, indexed by a
//!   hash of the key. A slot holds 32 bits of the key's hash (its tag), the time of the last
//!   use in seconds since tracking started (31 bits) and the fetched bit. Writes and reads are
//!   single relaxed atomic stores: no lock, no allocation.
//! - two keys that share a slot overwrite each other: a key whose slot holds another tag is
//!   treated as not used since tracking started (`h0`, and `l` counts from the start). So is
//!   a key written by another protocol, which does not touch the table.
//! - it is lost on restart, as memcached loses it.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

/// Slots of the table (a power of two).
pub const SLOTS: usize = 1 << 20;

#[derive(Debug, Default)]
pub struct Access {
    on: AtomicBool,
    /// Unix time tracking started.
    since: AtomicU64,
    slots: OnceLock<Box<[AtomicU64]>>,
    hasher: std::collections::hash_map::RandomState,
}

/// What is known of a key's use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Used {
    /// Fetched since it was last written.
    pub fetched: bool,
    /// Unix time of the last write or fetch (tracking's start when unknown).
    pub at: u64,
}

impl Access {
    pub fn new() -> Access {
        Access::default()
    }

    /// Start tracking (once; later calls do nothing).
    pub fn start(&self, now: u64) {
        if self.on.load(Relaxed) {
            return;
        }
        self.slots.get_or_init(|| {
            self.since.store(now, Relaxed);
            (0..SLOTS).map(|_| AtomicU64::new(0)).collect()
        });
        self.on.store(true, Relaxed);
    }

    pub fn is_on(&self) -> bool {
        self.on.load(Relaxed)
    }

    fn slot(&self, key: &[u8]) -> Option<(&AtomicU64, u64)> {
        if !self.on.load(Relaxed) {
            return None;
        }
        let slots = self.slots.get()?;
        let mut h = self.hasher.build_hasher();
        h.write(key);
        let h = h.finish();
        Some((&slots[h as usize & (SLOTS - 1)], h >> 32))
    }

    fn put(&self, key: &[u8], now: u64, fetched: bool) {
        if let Some((slot, tag)) = self.slot(key) {
            let t = now
                .saturating_sub(self.since.load(Relaxed))
                .min((1 << 31) - 1);
            slot.store(tag << 32 | t << 1 | u64::from(fetched), Relaxed);
        }
    }

    /// A memcached write of `key` (set, add, append, incr, …): not fetched since.
    #[inline]
    pub fn wrote(&self, key: &[u8], now: u64) {
        if self.on.load(Relaxed) {
            self.put(key, now, false);
        }
    }

    /// A memcached read of `key` (get, gat, touch, mg, …).
    #[inline]
    pub fn fetched(&self, key: &[u8], now: u64) {
        if self.on.load(Relaxed) {
            self.put(key, now, true);
        }
    }

    /// What is known of `key` (tracking must be on for anything but "not fetched, now").
    pub fn used(&self, key: &[u8], now: u64) -> Used {
        let since = self.since.load(Relaxed);
        match self.slot(key) {
            Some((slot, tag)) => {
                let v = slot.load(Relaxed);
                if v != 0 && v >> 32 == tag {
                    Used {
                        fetched: v & 1 == 1,
                        at: since + ((v >> 1) & ((1 << 31) - 1)),
                    }
                } else {
                    Used {
                        fetched: false,
                        at: since,
                    }
                }
            }
            None => Used {
                fetched: false,
                at: now,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_kept_until_started_then_writes_and_reads_are() {
        let a = Access::new();
        a.wrote(b"k", 100);
        a.fetched(b"k", 100);
        assert!(a.slots.get().is_none(), "no table before the start");
        assert_eq!(
            a.used(b"k", 100),
            Used {
                fetched: false,
                at: 100
            }
        );
        a.start(1000);
        // Unknown since the start: not fetched, last used at the start.
        assert_eq!(
            a.used(b"k", 1005),
            Used {
                fetched: false,
                at: 1000
            }
        );
        a.wrote(b"k", 1003);
        assert_eq!(
            a.used(b"k", 1005),
            Used {
                fetched: false,
                at: 1003
            }
        );
        a.fetched(b"k", 1004);
        assert_eq!(
            a.used(b"k", 1005),
            Used {
                fetched: true,
                at: 1004
            }
        );
        a.wrote(b"k", 1006);
        assert!(
            !a.used(b"k", 1006).fetched,
            "a write clears the fetched bit"
        );
        assert!(!a.used(b"other", 1006).fetched);
        // A second start keeps what was recorded.
        a.start(2000);
        assert_eq!(a.used(b"k", 2000).at, 1006);
    }
}
