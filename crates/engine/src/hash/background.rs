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
    // ------------------------------------------------------------------ background

    /// The filler thread (`sync=always`): zeros ahead of each lane's records (`fill_lane`),
    /// when a writer asks and at every tick.
    pub(super) fn filler(self: Arc<Self>) {
        loop {
            {
                let mut stop = self.stop.lock();
                if !*stop && !self.fill_wake.swap(false, Ordering::AcqRel) {
                    self.fill_cv.wait_for(&mut stop, FLUSH_TICK);
                }
                if *stop {
                    return;
                }
            }
            if self.is_poisoned.load(Ordering::Acquire) || self.fill_failed.load(Ordering::Relaxed)
            {
                continue;
            }
            for lane in 0..self.lanes {
                self.fill_lane(lane);
            }
        }
    }

    /// Wait `tick` for a background thread's next round; false once the database is closing.
    pub(super) fn pause(&self, tick: Duration) -> bool {
        let mut stop = self.stop.lock();
        if !*stop {
            self.stop_cv.wait_for(&mut stop, tick);
        }
        !*stop
    }

    pub(super) fn background(self: Arc<Self>) {
        BACKGROUND.with(|b| b.set(true));
        let mut last_sync = Instant::now();
        let mut last_maint = Instant::now();
        while self.pause(FLUSH_TICK) {
            if self.is_poisoned.load(Ordering::Acquire) {
                continue;
            }
            for t in self.tails.iter() {
                let mut tail = t.0.lock();
                let _ = self.flush(&mut tail);
            }
            self.start_writebacks();
            if let SyncMode::Interval(d) = self.sync {
                if last_sync.elapsed() >= d {
                    let _ = self.sync_now();
                    last_sync = Instant::now();
                }
            }
            if last_maint.elapsed() >= Duration::from_secs(1) {
                last_maint = Instant::now();
                self.trim_maps();
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
        while self.pause(COMPACT_TICK) {
            if self.is_poisoned.load(Ordering::Acquire) {
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
                let total = self.data_size();
                if self.appended_total() >= ckptsiz.max(total / 4) {
                    let _ = self.checkpoint();
                }
            }
            if last_sweep.elapsed() >= Duration::from_secs(10) {
                last_sweep = Instant::now();
                let _ = self.sweep_expired();
            }
        }
    }
}
