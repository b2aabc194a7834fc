//! The database's background threads: the flush tick, interval syncs and checkpoints, the
//! expiry sweep, and the compaction thread.

use super::*;

/// Set the calling thread's nice value, best effort (Linux: per thread).
pub(super) fn set_thread_nice(nice: i32) {
    #[cfg(target_os = "linux")]
    // SAFETY: plain system calls on the calling thread, no memory passed.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, nice);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

impl Inner {
    pub(super) fn background(self: Arc<Self>) {
        BACKGROUND.with(|b| b.set(true));
        let mut last_sync = Instant::now();
        let mut last_maint = Instant::now();
        while self.log.pause(FLUSH_TICK) {
            if self.log.is_poisoned.load(Ordering::Acquire) {
                continue;
            }
            for t in self.log.tails.iter() {
                let mut tail = t.0.lock();
                let _ = self.log.flush(&mut tail);
            }
            self.log.start_writebacks();
            if let SyncMode::Interval(d) = self.log.sync {
                if last_sync.elapsed() >= d {
                    let _ = self.log.sync_now();
                    last_sync = Instant::now();
                }
            }
            if last_maint.elapsed() >= Duration::from_secs(1) {
                last_maint = Instant::now();
                self.log.trim_maps();
                self.reclaim();
            }
        }
    }

    /// The compaction thread: every `COMPACT_TICK`, compacts what is past the threshold (for
    /// up to `COMPACT_BUDGET` at a time), checkpoints when enough was appended, and every 10
    /// seconds drops expired records. Its own thread, so the flushes and interval syncs of
    /// `background` never wait behind it.
    pub(super) fn compactor(self: Arc<Self>) {
        BACKGROUND.with(|b| b.set(true));
        let mut nice = 0;
        let mut last_sweep = Instant::now();
        let mut last_ckpt_look = Instant::now();
        while self.log.pause(COMPACT_TICK) {
            if self.log.is_poisoned.load(Ordering::Acquire) {
                continue;
            }
            let Some(_m) = self.maint.try_lock() else {
                continue;
            };
            // At nice 10 compaction takes a small share of a busy CPU instead of preempting
            // the threads that serve requests (and all of an idle one); when it falls behind
            // it competes as an equal, so the dead space it leaves stays bounded.
            let want = if self.compactable().len() > COMPACT_BACKLOG {
                0
            } else {
                10
            };
            if want != nice {
                nice = want;
                set_thread_nice(nice);
            }
            let _ = self.compact_some(COMPACT_BUDGET);
            if last_ckpt_look.elapsed() >= Duration::from_secs(1) {
                last_ckpt_look = Instant::now();
                // Two statements: the `cfg` guard must be gone before `data_size` takes the lane
                // locks (a writer rolling a segment holds its lane lock and then takes `cfg`).
                let ckptsiz = self.cfg.lock().ckptsiz;
                let total = self.log.data_size();
                if self.appended_total() >= ckptsiz.max(total / 4) {
                    let _ = self.checkpoint();
                }
            }
            if last_sweep.elapsed() >= Duration::from_secs(10) {
                last_sweep = Instant::now();
                let _ = self.sweep_expired();
                for s in self.spaces.all() {
                    let _ = s.sweep_expired();
                }
            }
        }
    }
}
