//! The commit thread: one fsync for the writes of every worker that asked meanwhile.

use kura_engine::durability::GroupCommit;
use kura_engine::Store;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The commit thread: workers take a ticket of the engine's group commit instead of waiting for
/// a sync, and are woken when it is done; one [`Store::sync`] (itself a group commit of the
/// store's log: the update log's, with `--ulog`) then covers the writes of every worker that
/// asked meanwhile.
#[derive(Default)]
pub(super) struct Committer {
    commit: GroupCommit,
    stop: AtomicBool,
    pub(super) wakers: Mutex<Vec<Arc<mio::Waker>>>,
}

impl Committer {
    /// A ticket for the writes made so far by the calling thread.
    pub(super) fn request(&self) -> u64 {
        self.commit.request()
    }

    /// The tickets done so far, and whether a sync failed (nothing after it is acknowledged).
    pub(super) fn status(&self) -> (u64, bool) {
        self.commit.status()
    }

    /// Stop once every ticket taken is done (called once the workers have ended).
    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.commit.wake();
    }

    pub(super) fn run(&self, store: &dyn Store) {
        let wake = || {
            for w in self.wakers.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                let _ = w.wake();
            }
        };
        loop {
            if self.stop.load(Ordering::Acquire) {
                // The workers have ended: sync what they still owe, then end.
                while self.commit.serve(Duration::ZERO, || store.sync()) {
                    wake();
                }
                return;
            }
            if self
                .commit
                .serve(Duration::from_millis(100), || store.sync())
            {
                wake();
            }
        }
    }
}
