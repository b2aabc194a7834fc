//! Kyoto Tycoon's named signals (the RPC parameters `WAIT` / `WAITTIME` and `SIGNAL` /
//! `SIGNALBROAD`), server-wide: a request with `WAIT` runs only once another request has sent
//! the signal of that name, or answers 503 after `WAITTIME` seconds (ktserver.cc, `process`,
//! on a `kc::CondMap`).
//!
//! A waiting request costs no thread: its connection is parked in its worker's event loop
//! (`net`), its request left unread in the buffer, and registered here with a way to wake the
//! worker. A signal marks the oldest waiter of its name (a broadcast every one) and wakes its
//! worker, which runs the request then. A signal no one waits for is lost, as Kyoto Cabinet's
//! condition variables lose it. What the sender learns (`SIGNALED`) is Kyoto Cabinet's
//! answer: how many requests were waiting on the name, whether one or all of them was woken.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Wakes the event loop a waiter belongs to.
pub type Wake = Arc<dyn Fn() + Send + Sync>;

/// ktserver's default `WAITTIME` (its default network timeout, `DEFTOUT`).
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);
/// The longest wait a request may ask for (a wait ends sooner when its connection closes).
pub const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

/// The wait a `WAITTIME` value asks for: Kyoto Cabinet's `atof` of it, the default when
/// absent, not a number or not above 0, at most [`MAX_WAIT`].
pub fn wait_time(secs: Option<f64>) -> Duration {
    match secs {
        Some(s) if s > 0.0 => Duration::try_from_secs_f64(s)
            .unwrap_or(MAX_WAIT)
            .min(MAX_WAIT),
        _ => DEFAULT_WAIT,
    }
}

/// A request that waits: for the signal `name`, at most `time`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitReq {
    pub name: Vec<u8>,
    pub time: Duration,
}

/// How a request's wait ended, told to the executor when the request runs again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// A signal came: the request runs.
    Woken,
    /// `WAITTIME` passed: 503 `the condition timed out`.
    TimedOut,
}

struct Waiter {
    id: u64,
    woken: Arc<AtomicBool>,
    wake: Wake,
}

/// The requests waiting for a signal, by name (in the order they began to wait).
#[derive(Default)]
pub struct Signals {
    waiting: Mutex<HashMap<Vec<u8>, Vec<Waiter>>>,
    ids: AtomicU64,
}

impl std::fmt::Debug for Signals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signals")
            .field("waiting", &self.waiting())
            .finish()
    }
}

/// One waiting request: what its connection keeps to learn it was signaled, or to stop
/// waiting ([`Signals::cancel`]).
#[derive(Debug)]
pub struct Ticket {
    name: Vec<u8>,
    id: u64,
    woken: Arc<AtomicBool>,
}

impl Ticket {
    /// A signal has woken this waiter.
    pub fn woken(&self) -> bool {
        self.woken.load(Ordering::Acquire)
    }
}

impl Signals {
    pub fn new() -> Signals {
        Signals::default()
    }

    /// Wait for the signal `name`; `wake` is called once it comes.
    pub fn wait(&self, name: &[u8], wake: Wake) -> Ticket {
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let woken = Arc::new(AtomicBool::new(false));
        self.lock().entry(name.to_vec()).or_default().push(Waiter {
            id,
            woken: woken.clone(),
            wake,
        });
        Ticket {
            name: name.to_vec(),
            id,
            woken,
        }
    }

    /// Stop waiting (the wait timed out, or its connection went).
    pub fn cancel(&self, t: &Ticket) {
        let mut map = self.lock();
        if let Some(ws) = map.get_mut(&t.name) {
            ws.retain(|w| w.id != t.id);
            if ws.is_empty() {
                map.remove(&t.name);
            }
        }
    }

    /// Send the signal `name` to the oldest waiter (`broadcast`: to every one). Returns how
    /// many were waiting on it (Kyoto Cabinet's `CondMap::signal` / `broadcast`).
    pub fn send(&self, name: &[u8], broadcast: bool) -> usize {
        let (woken, n) = {
            let mut map = self.lock();
            let Some(ws) = map.get_mut(name) else {
                return 0;
            };
            let n = ws.len();
            let woken = if broadcast {
                std::mem::take(ws)
            } else {
                vec![ws.remove(0)]
            };
            if ws.is_empty() {
                map.remove(name);
            }
            (woken, n)
        };
        // Marked and woken outside the lock.
        for w in woken {
            w.woken.store(true, Ordering::Release);
            (w.wake)();
        }
        n
    }

    /// Requests waiting now, on every name.
    pub fn waiting(&self) -> usize {
        self.lock().values().map(Vec::len).sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Vec<Waiter>>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn a_signal_wakes_the_oldest_waiter_and_a_broadcast_every_one() {
        let s = Signals::new();
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let wake: Wake = Arc::new(move || {
            c.fetch_add(1, Ordering::Relaxed);
        });
        // Nobody waits: the signal is lost.
        assert_eq!(s.send(b"q", false), 0);
        let a = s.wait(b"q", wake.clone());
        let b = s.wait(b"q", wake.clone());
        let other = s.wait(b"r", wake.clone());
        assert_eq!(s.waiting(), 3);
        // Two were waiting; the first one is woken.
        assert_eq!(s.send(b"q", false), 2);
        assert!(a.woken() && !b.woken() && !other.woken());
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        s.cancel(&a); // already gone: nothing happens
        assert_eq!(s.send(b"q", true), 1);
        assert!(b.woken());
        assert_eq!(s.send(b"q", true), 0);
        // A cancelled waiter is not counted, nor woken.
        s.cancel(&other);
        assert_eq!(s.send(b"r", true), 0);
        assert!(!other.woken());
        assert_eq!(s.waiting(), 0);
    }

    #[test]
    fn wait_times_as_ktserver_reads_them() {
        assert_eq!(wait_time(None), DEFAULT_WAIT);
        assert_eq!(wait_time(Some(0.0)), DEFAULT_WAIT);
        assert_eq!(wait_time(Some(-3.0)), DEFAULT_WAIT);
        assert_eq!(wait_time(Some(f64::NAN)), DEFAULT_WAIT);
        assert_eq!(wait_time(Some(0.25)), Duration::from_millis(250));
        assert_eq!(wait_time(Some(1e300)), MAX_WAIT);
        assert_eq!(wait_time(Some(f64::INFINITY)), MAX_WAIT);
    }
}
