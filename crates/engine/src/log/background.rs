//! The log's share of a database's background thread, the same for every kind: at every
//! `FLUSH_TICK`, hand every lane's buffer to the OS and ask it to start writing back what the
//! segments received (`start_writebacks`); with `sync=interval:MS`, fdatasync every MS. A
//! kind's thread calls [`Log::tick`] in its loop and adds its own work (trimming maps,
//! freeing what was retired).

use super::Log;
use crate::config::SyncMode;
use std::sync::atomic::Ordering;
use std::time::Instant;

impl Log {
    /// One tick of the background thread (see the module doc); `last_sync` is when the last
    /// interval sync ran. Errors poison the log (its writers see them); a poisoned log is left
    /// alone.
    pub(crate) fn tick(&self, last_sync: &mut Instant) {
        if self.is_poisoned.load(Ordering::Acquire) {
            return;
        }
        for t in self.tails.iter() {
            let mut tail = t.0.lock();
            let _ = self.flush(&mut tail);
        }
        self.start_writebacks();
        if let SyncMode::Interval(d) = self.sync {
            if last_sync.elapsed() >= d {
                let _ = self.sync_now();
                *last_sync = Instant::now();
            }
        }
    }
}
