//! Durability waits: group commit ([`GroupCommit`], the one way every log and the server wait
//! for a sync), and deferred durability for servers.
//!
//! Deferred durability: with `sync=always`, each write normally returns only once it is
//! durable. A server thread that answers many clients at once can instead *defer*: its writes
//! return at once and record that a sync is owed; after a batch of requests it asks its commit
//! thread for one [`crate::Store::sync`] (a group commit shared with every other thread), and
//! only then sends the replies. Nothing is acknowledged before it is durable, and one fsync covers the
//! whole batch.

use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

thread_local! {
    static DEFERRED: Cell<bool> = const { Cell::new(false) };
    static PENDING: Cell<bool> = const { Cell::new(false) };
    /// The time stamp of the newest update log record this thread appended since the last
    /// [`take_logged`] (0: none).
    static LOGGED: Cell<u64> = const { Cell::new(0) };
}

/// Record that this thread appended the update log record stamped `ts` (a server thread
/// whose replies wait for replicas to acknowledge its writes reads it back: [`take_logged`]).
pub fn note_logged(ts: u64) {
    LOGGED.with(|l| l.set(l.get().max(ts)));
}

/// The time stamp of the newest record this thread appended since the last `take_logged`
/// (0: none).
pub fn logged() -> u64 {
    LOGGED.with(Cell::get)
}

/// [`logged`], and forget it: the caller holds its replies until replicas have that position.
pub fn take_logged() -> u64 {
    LOGGED.with(|l| l.replace(0))
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

/// Group commits waited for the writers they expected only after syncs at least this long: a
/// timed wait shorter than half of one lasts longer than asked (the kernel's timer slack, 50
/// µs), and faster syncs leave little to share anyway.
const GATHER_MIN_SYNC: Duration = Duration::from_micros(100);

/// Group commit: the one way durability is waited for in Kura. A caller asks for everything it
/// wrote before the call to be durable; one sync (the caller's `sync`, run by one of them, the
/// leader) covers every caller waiting when it starts. The database's log (`log::Log`), the
/// update log (`ulog::Ulog`) and the server's commit thread each keep one, around their own
/// sync.
///
/// The callers waiting for a sync that has not started form the next group. Its leader is the
/// first of them to find no sync running; the sync covers every write made before it starts,
/// and a caller arriving while it runs waits for the next one. Before it starts, the leader
/// waits for the callers known to be active (`State::expect`: the last group, whose writers
/// are about to write again, and those that arrived during its sync) until that many are
/// waiting, for at most half the time a sync takes (`State::sync_time`; only when that is long
/// enough to be worth a wait: `GATHER_MIN_SYNC`). Without this, N writers settle into
/// alternating groups: the first writer back after a sync leads one of its own at once while
/// the rest of the last group is still writing, and they then make the next group. A lone
/// writer never waits: it is the whole of its last group. A writer that leaves costs one wait
/// (the group after it is smaller, and so is what the next leader expects); writers that keep
/// coming back too late for the wait stop the waiting: after each wait that runs out, 1, 3, 7
/// … 63 leaders start at once (`State::skip`).
///
/// A caller that must not block (a server's event loop) takes a ticket instead
/// ([`GroupCommit::request`]) and checks it later ([`GroupCommit::status`]); a commit thread
/// leads the syncs for tickets ([`GroupCommit::serve`]).
///
/// A failed sync fails every caller of its group, and every later one: the thing synced is
/// poisoned (nothing after a failed sync is acknowledged).
#[derive(Default)]
pub struct GroupCommit {
    state: Mutex<State>,
    /// Wakes the callers waiting for a sync to finish (and a commit thread, for tickets).
    done_cv: Condvar,
    /// Wakes a gathering leader when the callers it expects are waiting.
    gather_cv: Condvar,
    /// Leaders that waited for the callers they expected.
    pub waits: AtomicU64,
    /// Of those, the waits that ran out before the callers came.
    pub wait_misses: AtomicU64,
}

/// Where group commit stands, under `GroupCommit::state`.
#[derive(Default)]
struct State {
    /// Group syncs started and finished (numbered from 1).
    started: u64,
    finished: u64,
    /// A group sync is running.
    running: bool,
    /// A leader is waiting for the callers it expects before it starts its sync.
    gathering: bool,
    /// Callers (and tickets) that no started sync covers: the next group.
    queued: usize,
    /// The callers known to be writing when the last group sync finished: its group (each
    /// about to write again) and those that arrived during it.
    expect: usize,
    /// Waits for the expected callers that ran out of time in a row (up to 6), and how many
    /// leaders are still to start without waiting because of them (`2^misses - 1` after the
    /// last).
    misses: u32,
    skip: u32,
    /// How long the last group syncs took (a ring: `syncs_timed` counts them).
    sync_times: [Duration; 4],
    syncs_timed: usize,
    /// The error of the first sync that failed.
    failed: Option<String>,
}

impl State {
    fn timed(&mut self, took: Duration) {
        let n = self.sync_times.len();
        self.sync_times[self.syncs_timed % n] = took;
        self.syncs_timed += 1;
    }

    /// What a group sync costs: the shortest of the last few (a sync whose thread lost its core
    /// takes longer than the disk does; none takes less).
    fn sync_time(&self) -> Duration {
        let n = self.syncs_timed.min(self.sync_times.len());
        self.sync_times[..n]
            .iter()
            .copied()
            .min()
            .unwrap_or_default()
    }

    fn result(&self) -> Result<()> {
        match &self.failed {
            Some(e) => Err(Error::Poisoned(e.clone())),
            None => Ok(()),
        }
    }
}

impl GroupCommit {
    pub fn new() -> GroupCommit {
        GroupCommit::default()
    }

    /// Wait until everything written before this call is durable, sharing each `sync` with
    /// every caller waiting when it starts (see the type's comment). The leader returns its
    /// sync's error; the others of its group, and every caller after it, get
    /// [`Error::Poisoned`].
    pub fn commit(&self, sync: impl FnOnce() -> Result<()>) -> Result<()> {
        let mut st = self.state.lock();
        if st.failed.is_some() {
            return st.result();
        }
        // The next sync to start covers our write (no sync starts without taking us along).
        let need = st.started + 1;
        st.queued += 1;
        if st.gathering && st.queued >= st.expect {
            self.gather_cv.notify_one();
        }
        loop {
            if st.finished >= need {
                return st.result();
            }
            if st.running || st.gathering {
                self.done_cv.wait(&mut st);
                continue;
            }
            // Lead the next group: ours.
            self.gather(&mut st);
            return self.lead(st, need, sync);
        }
    }

    /// Join the next group without waiting: the number of the sync that covers the caller's
    /// writes (done once [`GroupCommit::status`] reaches it). A commit thread must lead it
    /// ([`GroupCommit::serve`]), unless a caller of `commit` does first.
    pub fn request(&self) -> u64 {
        let mut st = self.state.lock();
        st.queued += 1;
        if st.gathering && st.queued >= st.expect {
            self.gather_cv.notify_one();
        }
        self.done_cv.notify_all();
        st.started + 1
    }

    /// The group syncs finished so far, and whether one failed.
    pub fn status(&self) -> (u64, bool) {
        let st = self.state.lock();
        (st.finished, st.failed.is_some())
    }

    /// For a commit thread that leads the syncs of tickets ([`GroupCommit::request`]): wait up
    /// to `idle` for a ticket no sync covers, then lead one sync for every ticket taken so far.
    /// It does not wait for more tickets (their takers do not block: gathering would only delay
    /// them). Whether a sync ran.
    pub fn serve(&self, idle: Duration, sync: impl FnOnce() -> Result<()>) -> bool {
        let mut st = self.state.lock();
        if st.queued == 0 || st.running || st.gathering {
            self.done_cv.wait_for(&mut st, idle);
        }
        if st.queued == 0 || st.running || st.gathering {
            return false;
        }
        let need = st.started + 1;
        let _ = self.lead(st, need, sync);
        true
    }

    /// Wake a commit thread waiting in [`GroupCommit::serve`] (to see that it must stop).
    pub fn wake(&self) {
        let _st = self.state.lock();
        self.done_cv.notify_all();
    }

    /// As the next group's leader: wait for the callers expected (see the type's comment).
    fn gather(&self, st: &mut MutexGuard<'_, State>) {
        let sync_time = st.sync_time();
        if st.queued >= st.expect || sync_time < GATHER_MIN_SYNC {
            return;
        }
        if st.skip > 0 {
            st.skip -= 1;
            return;
        }
        st.gathering = true;
        self.waits.fetch_add(1, Ordering::Relaxed);
        let until = Instant::now() + sync_time / 2;
        while st.queued < st.expect {
            if self.gather_cv.wait_until(st, until).timed_out() {
                break;
            }
        }
        st.gathering = false;
        if st.queued < st.expect {
            self.wait_misses.fetch_add(1, Ordering::Relaxed);
            st.misses = (st.misses + 1).min(6);
            st.skip = (1 << st.misses) - 1;
        } else {
            st.misses = 0;
        }
    }

    /// Run sync number `need` for the queued group.
    fn lead(
        &self,
        mut st: MutexGuard<'_, State>,
        need: u64,
        sync: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        st.running = true;
        st.started += 1;
        debug_assert_eq!(st.started, need);
        let group = std::mem::take(&mut st.queued);
        // A lone writer's syncs are not timed (two clock reads, about 0.1 µs here, on every
        // write): nobody waits for writers then.
        let t0 = (group > 1 || st.expect > 1).then(Instant::now);
        // After a failed sync nothing is synced again: the group gets the failure.
        let failed = st.result();
        drop(st);
        let r = failed.and_then(|()| sync());
        let took = t0.map(|t| t.elapsed());
        let mut st = self.state.lock();
        st.running = false;
        st.finished = need;
        if let Some(took) = took {
            st.timed(took);
        }
        if let Err(e) = &r {
            st.failed.get_or_insert_with(|| e.to_string());
        }
        st.expect = group + st.queued;
        self.done_cv.notify_all();
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::DiskHash;
    use crate::io::{CrashMode, SimVfs};
    use crate::{Params, Store};
    use std::path::Path;
    use std::sync::Arc;

    /// Tickets taken without waiting are done by one sync a commit thread leads for all of
    /// them; with none taken, it runs none.
    #[test]
    fn tickets_are_done_by_one_sync_for_all_of_them() {
        let gc = GroupCommit::new();
        let syncs = AtomicU64::new(0);
        let sync = || {
            syncs.fetch_add(1, Ordering::Relaxed);
            Ok(())
        };
        assert!(!gc.serve(Duration::from_millis(1), sync));
        let tickets: Vec<u64> = (0..3).map(|_| gc.request()).collect();
        assert_eq!(gc.status(), (0, false));
        assert!(gc.serve(Duration::from_millis(1), sync));
        assert_eq!(syncs.load(Ordering::Relaxed), 1);
        assert!(tickets.iter().all(|&t| t <= gc.status().0));
        // A blocking commit after them runs a sync of its own.
        gc.commit(sync).unwrap();
        assert_eq!(syncs.load(Ordering::Relaxed), 2);
    }

    /// A failed sync fails its caller, every ticket it covered, and every commit after it
    /// (without syncing again).
    #[test]
    fn a_failed_sync_fails_every_commit_after_it() {
        let gc = GroupCommit::new();
        let t = gc.request();
        let r = gc.commit(|| Err(Error::Io(std::io::Error::other("disk gone"))));
        assert!(matches!(r, Err(Error::Io(_))), "{r:?}");
        assert_eq!(gc.status(), (t, true));
        let r = gc.commit(|| panic!("no sync after a failed one"));
        assert!(
            matches!(r, Err(Error::Poisoned(ref m)) if m.contains("disk gone")),
            "{r:?}"
        );
        gc.request();
        assert!(gc.serve(Duration::from_millis(1), || panic!("no sync")));
        assert!(gc.status().1);
    }

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
