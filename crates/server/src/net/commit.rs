//! The commit thread: one fsync for the writes of every worker that asked meanwhile.

use kura_engine::Store;
use std::sync::Arc;

/// The commit thread: workers ask for a sync (a ticket) instead of waiting for one, and are woken
/// when it is done; one fsync then covers the writes of every worker that asked meanwhile.
pub(super) struct Committer {
    pub(super) state: std::sync::Mutex<CommitState>,
    pub(super) cv: std::sync::Condvar,
}

#[derive(Default)]
pub(super) struct CommitState {
    /// Highest ticket handed out.
    pub(super) requested: u64,
    /// Every ticket up to this one is durable.
    pub(super) done: u64,
    /// A sync failed: nothing after it will be acknowledged.
    pub(super) failed: bool,
    pub(super) stop: bool,
    pub(super) wakers: Vec<Arc<mio::Waker>>,
}

impl Committer {
    /// A ticket for the writes made so far by the calling thread.
    pub(super) fn request(&self) -> u64 {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.requested += 1;
        self.cv.notify_one();
        st.requested
    }

    pub(super) fn status(&self) -> (u64, bool) {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        (st.done, st.failed)
    }

    pub(super) fn run(&self, store: &dyn Store) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            while st.requested == st.done && !st.stop {
                st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            if st.requested == st.done {
                return; // stopping, nothing owed
            }
            let target = st.requested;
            drop(st);
            // Started after every ticket up to `target` was requested, so it covers them.
            let ok = store.sync().is_ok();
            st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            st.done = target;
            st.failed |= !ok;
            for w in &st.wakers {
                let _ = w.wake();
            }
        }
    }
}
