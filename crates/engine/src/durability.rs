//! Deferred durability for servers. With `sync=always`, each write normally returns only once
//! it is durable. A server thread that answers many clients at once can instead *defer*: its
//! writes return at once and record that a sync is owed; after a batch of requests it calls
//! [`crate::Store::sync`] once (a group commit shared with every other thread), and only then
//! sends the replies. Nothing is acknowledged before it is durable, and one fsync covers the
//! whole batch.

use std::cell::Cell;

thread_local! {
    static DEFERRED: Cell<bool> = const { Cell::new(false) };
    static PENDING: Cell<bool> = const { Cell::new(false) };
}

/// Defer (or stop deferring) durability waits of `sync=always` writes made by this thread.
pub fn set_deferred(on: bool) {
    DEFERRED.with(|d| d.set(on));
}

/// Whether this thread defers durability waits.
pub fn deferred() -> bool {
    DEFERRED.with(Cell::get)
}

/// Record that a write of this thread still needs a sync before it may be acknowledged.
pub fn note_pending() {
    PENDING.with(|p| p.set(true));
}

/// Whether this thread owes a sync (`note_pending` was called since the last `take_pending`).
pub fn pending() -> bool {
    PENDING.with(Cell::get)
}

/// Whether this thread owes a sync (and forget it: the caller syncs now).
pub fn take_pending() -> bool {
    PENDING.with(|p| p.replace(false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::DiskHash;
    use crate::io::{CrashMode, SimVfs};
    use crate::{Params, Store};
    use std::path::Path;
    use std::sync::Arc;

    /// Deferred writes are not durable until the sync; after it they survive a crash.
    #[test]
    fn deferred_writes_become_durable_at_the_sync() {
        let fs = SimVfs::new();
        let p = Params::parse("sync=always").unwrap();
        let open =
            || DiskHash::open_with(Path::new("/d/x.kh"), &p, Arc::new(fs.clone()), false).unwrap();
        let db = open();
        set_deferred(true);
        db.put(b"a", b"1").unwrap();
        assert!(take_pending(), "a deferred write owes a sync");
        assert!(!take_pending());
        db.put(b"b", b"2").unwrap();
        take_pending();
        db.sync().unwrap();
        db.put(b"c", b"3").unwrap(); // deferred, never synced
        set_deferred(false);
        db.abandon();
        fs.crash(CrashMode::DropUnsynced);
        let db = open();
        assert!(db.get(b"a").unwrap().is_some() && db.get(b"b").unwrap().is_some());
        // `c` may or may not have reached the disk (the background flush), but it was never
        // acknowledged; what matters is that the synced ones are there.
    }
}
