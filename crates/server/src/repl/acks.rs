//! Replica-acknowledged writes (`kura serve --sync-replicas N`): a client write's reply is held
//! until N replicas following on Kura's stream have acknowledged a position at or past the
//! write's update log record, or until `--sync-replicas-timeout`. Then, as
//! `--sync-replicas-on-timeout` says: `reply` sends the replies anyway, as Redis's `WAIT`
//! returns; `close` closes the client's connection without them, so no write is ever
//! acknowledged that N replicas do not hold. Either is counted in `repl_sync_timeouts` and
//! logged.
//!
//! The feeds report each replica's acknowledgements ([`SyncAcks::ack`]); the position that N
//! replicas have reached only grows. A worker never blocks: its held replies wait in their
//! connections, and it publishes the lowest position they wait for ([`SyncAcks::want`]); an
//! acknowledgement that reaches it wakes that worker (its event loop's waker), no other.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Wakes one worker's event loop.
pub type WakeFn = Box<dyn Fn() + Send + Sync>;

/// Nothing waited for ([`SyncAcks::want`]).
pub const NONE: u64 = u64::MAX;

pub struct SyncAcks {
    /// How many replicas must acknowledge a write (at least 1).
    pub need: usize,
    /// How long a reply waits for them at most.
    pub timeout: Duration,
    /// At the timeout, close the connection without its held replies (else send them).
    pub close_on_timeout: bool,
    /// The position acknowledged by each connected Kura-stream replica, by server id.
    acked: Mutex<BTreeMap<u32, u64>>,
    /// The newest position `need` replicas have acknowledged (only grows).
    reached: AtomicU64,
    /// Per registered worker: the lowest position its held replies wait for ([`NONE`]), and
    /// its waker.
    workers: Mutex<Vec<(std::sync::Arc<AtomicU64>, WakeFn)>>,
    /// Replies that waited for replicas (once per held batch of a connection).
    pub waits: AtomicU64,
    /// Of those, the ones whose timeout ran out (sent, or their connection closed).
    pub timeouts: AtomicU64,
}

impl SyncAcks {
    pub fn new(need: usize, timeout: Duration) -> SyncAcks {
        SyncAcks {
            need: need.max(1),
            timeout,
            close_on_timeout: false,
            acked: Mutex::new(BTreeMap::new()),
            reached: AtomicU64::new(0),
            workers: Mutex::new(Vec::new()),
            waits: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
        }
    }

    /// Register a worker: returns its slot for [`SyncAcks::want`].
    pub fn register(&self, wake: WakeFn) -> usize {
        let mut w = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        w.push((std::sync::Arc::new(AtomicU64::new(NONE)), wake));
        w.len() - 1
    }

    /// Worker `slot` waits for position `pos` ([`NONE`]: nothing). Returns whether it is
    /// reached already (then no wake-up comes for it).
    pub fn want(&self, slot: usize, pos: u64) -> bool {
        if let Some((w, _)) = self
            .workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(slot)
        {
            w.store(pos, Ordering::SeqCst);
        }
        pos != NONE && pos <= self.reached()
    }

    /// The newest position `need` replicas have acknowledged.
    pub fn reached(&self) -> u64 {
        self.reached.load(Ordering::SeqCst)
    }

    /// Replica `sid` acknowledged `pos` (every record up to it is applied and durable there).
    pub fn ack(&self, sid: u32, pos: u64) {
        let nth = {
            let mut a = self.acked.lock().unwrap_or_else(|p| p.into_inner());
            let e = a.entry(sid).or_insert(0);
            *e = (*e).max(pos);
            nth_largest(a.values().copied(), self.need)
        };
        let before = self.reached.fetch_max(nth, Ordering::SeqCst);
        if nth > before {
            for (want, wake) in self
                .workers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
            {
                let w = want.load(Ordering::SeqCst);
                if w != NONE && w <= nth {
                    wake();
                }
            }
        }
    }

    /// Replica `sid` disconnected: it no longer counts (what it acknowledged stays reached).
    pub fn gone(&self, sid: u32) {
        self.acked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&sid);
    }

    /// The replicas counted now.
    pub fn connected(&self) -> usize {
        self.acked.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// The `n`th largest of `vals` (1: the largest); 0 when there are fewer.
fn nth_largest(vals: impl Iterator<Item = u64>, n: usize) -> u64 {
    let mut v: Vec<u64> = vals.collect();
    if v.len() < n || n == 0 {
        return 0;
    }
    v.sort_unstable_by(|a, b| b.cmp(a));
    v[n - 1]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_position_reached_is_that_of_the_nth_replica_and_never_goes_back() {
        let s = SyncAcks::new(2, Duration::from_millis(10));
        s.ack(1, 50);
        assert_eq!(s.reached(), 0, "one replica of two");
        s.ack(2, 30);
        assert_eq!(s.reached(), 30);
        s.ack(2, 70);
        assert_eq!(s.reached(), 50);
        s.ack(1, 40); // older than what it acknowledged: ignored
        assert_eq!(s.reached(), 50);
        s.gone(1);
        assert_eq!(s.reached(), 50, "what two acknowledged stays reached");
        assert_eq!(s.connected(), 1);
        s.ack(2, 90);
        assert_eq!(s.reached(), 50, "one replica left of the two needed");
        s.ack(3, 80);
        assert_eq!(s.reached(), 80);
    }

    #[test]
    fn an_acknowledgement_wakes_only_the_workers_whose_position_it_reaches() {
        let s = SyncAcks::new(1, Duration::from_millis(10));
        let woken: Vec<Arc<AtomicU64>> = (0..3).map(|_| Arc::new(AtomicU64::new(0))).collect();
        let slots: Vec<usize> = woken
            .iter()
            .map(|w| {
                let w = w.clone();
                s.register(Box::new(move || {
                    w.fetch_add(1, Ordering::SeqCst);
                }))
            })
            .collect();
        assert!(!s.want(slots[0], 10));
        assert!(!s.want(slots[1], 20));
        assert!(!s.want(slots[2], NONE));
        s.ack(7, 15);
        let n: Vec<u64> = woken.iter().map(|w| w.load(Ordering::SeqCst)).collect();
        assert_eq!(n, [1, 0, 0]);
        assert!(s.want(slots[1], 12), "reached already: no wake-up needed");
        s.ack(7, 15); // nothing new reached: nobody woken
        assert_eq!(woken[0].load(Ordering::SeqCst), 1);
    }

    #[test]
    fn nth_largest_of_too_few_is_zero() {
        assert_eq!(nth_largest([5, 9, 1].into_iter(), 2), 5);
        assert_eq!(nth_largest([5].into_iter(), 2), 0);
        assert_eq!(nth_largest([].into_iter(), 1), 0);
    }
}
