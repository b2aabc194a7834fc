//! The index's shards: their two modes (slow: everything through the shard's `RwLock`; fast:
//! one key's operations lock only the buckets of its run, threads counted in through `Brl`),
//! growth, and the spinning waits for a shard held exclusively. See docs/ARCHITECTURE.md,
//! "Index (memory)".

use super::*;

impl std::ops::Deref for ShardState {
    type Target = Table;
    fn deref(&self) -> &Table {
        &self.table
    }
}

impl std::ops::DerefMut for ShardState {
    fn deref_mut(&mut self) -> &mut Table {
        &mut self.table
    }
}

impl ShardState {
    /// Take the next seq of this shard for a write of `key` (the caller holds the shard's write
    /// lock). A large put of the key still in flight is thereby superseded.
    pub(super) fn next_seq(&mut self, key: &[u8]) -> u64 {
        for f in &mut self.inflight {
            if *f.key == *key {
                f.superseded = true;
            }
        }
        self.seq += 1;
        self.seq
    }
}

impl Brl {
    pub(super) fn new() -> Brl {
        Brl {
            stripes: (0..BRL_STRIPES)
                .map(|_| BrlStripe(std::array::from_fn(|_| BrlCount::default())))
                .collect(),
            slow: BrlFlags(std::array::from_fn(|_| AtomicBool::new(false))),
        }
    }

    /// This thread's counters for `shard`, and whether the stripe is this thread's alone.
    #[inline]
    pub(super) fn mine(&self, shard: usize) -> (&BrlCount, bool) {
        let (stripe, own) = STRIPE.with(|c| (c.0, c.1));
        (&self.stripes[stripe].0[shard], own)
    }

    /// Slots inserted less slots removed in `shard` by fast writers, not yet folded in.
    pub(super) fn delta(&self, shard: usize) -> i64 {
        self.stripes
            .iter()
            .map(|s| s.0[shard].delta.load(Ordering::Relaxed))
            .sum()
    }
}

/// The `Brl` stripe of a thread: one of its own while there are enough (`true`), given back
/// when the thread ends; else the last stripe, which such threads share (`false`). A thread's
/// own stripe is written with plain stores, a shared one with atomic read-modify-writes.
pub(super) struct StripeClaim(usize, bool);

/// Stripes no thread holds (all but the shared last one, at first).
pub(super) static FREE_STRIPES: Mutex<Vec<usize>> = Mutex::new(Vec::new());

pub(super) static STRIPES_MADE: AtomicBool = AtomicBool::new(false);

impl StripeClaim {
    pub(super) fn claim() -> StripeClaim {
        let mut free = FREE_STRIPES.lock();
        if !STRIPES_MADE.swap(true, Ordering::Relaxed) {
            free.extend((0..BRL_STRIPES - 1).rev());
        }
        match free.pop() {
            Some(i) => StripeClaim(i, true),
            None => StripeClaim(BRL_STRIPES - 1, false),
        }
    }
}

impl Drop for StripeClaim {
    fn drop(&mut self) {
        if self.1 {
            FREE_STRIPES.lock().push(self.0);
        }
    }
}

impl BrlCount {
    /// Count this thread in, sequentially consistent with the reading of the shard's flag.
    #[inline]
    pub(super) fn enter(&self, own: bool) {
        if own {
            let v = self.inside.load(Ordering::Relaxed);
            self.inside.store(v + 1, Ordering::SeqCst);
        } else {
            self.inside.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Count this thread out: what it did before is seen by `excl` once it sees the count.
    #[inline]
    pub(super) fn exit(&self, own: bool) {
        if own {
            let v = self.inside.load(Ordering::Relaxed);
            self.inside.store(v - 1, Ordering::Release);
        } else {
            self.inside.fetch_sub(1, Ordering::Release);
        }
    }

    /// Add `d` to the slot count; returns the new value.
    #[inline]
    pub(super) fn add_delta(&self, own: bool, d: i64) -> i64 {
        if own {
            let v = self.delta.load(Ordering::Relaxed) + d;
            self.delta.store(v, Ordering::Relaxed);
            v
        } else {
            self.delta.fetch_add(d, Ordering::Relaxed) + d
        }
    }

    /// Raise `maxseq` to `seq`.
    #[inline]
    pub(super) fn note_seq(&self, own: bool, seq: u64) {
        if seq > self.maxseq.load(Ordering::Relaxed) {
            if own {
                self.maxseq.store(seq, Ordering::Relaxed);
            } else {
                self.maxseq.fetch_max(seq, Ordering::Relaxed);
            }
        }
    }
}

impl Cands for Table {
    #[inline]
    fn cands(&self, tag: u32) -> impl Iterator<Item = Slot> + '_ {
        self.candidates(tag)
    }
    #[inline]
    fn small(&self) -> bool {
        self.memory() <= SMALL_TABLE
    }
}

impl Cands for ShardState {
    #[inline]
    fn cands(&self, tag: u32) -> impl Iterator<Item = Slot> + '_ {
        self.table.candidates(tag)
    }
    #[inline]
    fn small(&self) -> bool {
        self.table.small()
    }
}

impl KeyIndex for ShardState {
    #[inline]
    fn peek_seq(&self) -> u64 {
        self.seq + 1
    }
    #[inline]
    fn next_seq(&mut self, key: &[u8]) -> u64 {
        ShardState::next_seq(self, key)
    }
    #[inline]
    fn insert(&mut self, slot: Slot) {
        self.table.insert(slot)
    }
    #[inline]
    fn replace(&mut self, old: &Slot, new: Slot) -> bool {
        self.table.replace(old, new)
    }
    #[inline]
    fn remove(&mut self, slot: &Slot) -> bool {
        self.table.remove(slot)
    }
}

impl Fast<'_> {
    /// The next seq for a key of the locked run: above the run's bucket, the shard and this
    /// thread's last one.
    #[inline]
    pub(super) fn seq_after(&self, floor: u64) -> u64 {
        let run = self.run.as_ref().map_or(0, |r| r.seq());
        self.base
            .max(run)
            .max(floor)
            .max(CLOCK.with(std::cell::Cell::get))
            + 1
    }

    /// Note that `seq` was given out (and is in the log).
    #[inline]
    pub(super) fn gave(&mut self, seq: u64) {
        self.maxseq = self.maxseq.max(seq);
        CLOCK.with(|c| c.set(c.get().max(seq)));
    }
}

impl Cands for Fast<'_> {
    #[inline]
    fn cands(&self, tag: u32) -> impl Iterator<Item = Slot> + '_ {
        let run = self.run.as_ref().expect("held until dropped");
        debug_assert_eq!(tag, run.tag());
        run.candidates()
    }
    #[inline]
    fn small(&self) -> bool {
        self.table.small()
    }
}

impl KeyIndex for Fast<'_> {
    #[inline]
    fn peek_seq(&self) -> u64 {
        self.seq_after(0)
    }
    #[inline]
    fn next_seq(&mut self, _key: &[u8]) -> u64 {
        // No large put is in flight while the shard is fast: nothing to supersede.
        let seq = self.peek_seq();
        self.run.as_mut().expect("held").set_seq(seq);
        self.gave(seq);
        seq
    }
    #[inline]
    fn insert(&mut self, slot: Slot) {
        self.run.as_mut().expect("held").insert(slot);
        self.delta += 1;
    }
    #[inline]
    fn replace(&mut self, old: &Slot, new: Slot) -> bool {
        self.run.as_mut().expect("held").replace(old, new)
    }
    #[inline]
    fn remove(&mut self, slot: &Slot) -> bool {
        let removed = self.run.as_mut().expect("held").remove(slot);
        self.delta -= i64::from(removed);
        removed
    }
}

impl Drop for Fast<'_> {
    #[inline]
    fn drop(&mut self) {
        drop(self.run.take());
        let mut grow = false;
        if self.delta != 0 {
            let d = self.count.add_delta(self.own, self.delta);
            // Checked while still inside (the table's fields may change once out).
            grow = self.delta > 0
                && d % 32 == 0
                && self.inner.fast_wants_growth(self.shard, self.table);
        }
        self.count.note_seq(self.own, self.maxseq);
        // Release: `excl` sees the counts and the slots written before.
        self.count.exit(self.own);
        if grow {
            self.inner.grow(self.shard);
        }
    }
}

impl std::ops::Deref for Excl<'_> {
    type Target = ShardState;
    fn deref(&self) -> &ShardState {
        &self.g
    }
}

impl std::ops::DerefMut for Excl<'_> {
    fn deref_mut(&mut self) -> &mut ShardState {
        &mut self.g
    }
}

impl Drop for Excl<'_> {
    fn drop(&mut self) {
        if !self.g.table.is_moving() && self.g.inflight.is_empty() {
            // Still under the write lock: fast threads see everything done under it.
            self.slow.store(false, Ordering::Release);
        }
    }
}

impl Cands for Excl<'_> {
    #[inline]
    fn cands(&self, tag: u32) -> impl Iterator<Item = Slot> + '_ {
        Cands::cands(&*self.g, tag)
    }
    #[inline]
    fn small(&self) -> bool {
        Cands::small(&*self.g)
    }
}

impl KeyIndex for Excl<'_> {
    #[inline]
    fn peek_seq(&self) -> u64 {
        KeyIndex::peek_seq(&*self.g)
    }
    #[inline]
    fn next_seq(&mut self, key: &[u8]) -> u64 {
        KeyIndex::next_seq(&mut *self.g, key)
    }
    #[inline]
    fn insert(&mut self, slot: Slot) {
        KeyIndex::insert(&mut *self.g, slot)
    }
    #[inline]
    fn replace(&mut self, old: &Slot, new: Slot) -> bool {
        KeyIndex::replace(&mut *self.g, old, new)
    }
    #[inline]
    fn remove(&mut self, slot: &Slot) -> bool {
        KeyIndex::remove(&mut *self.g, slot)
    }
}

impl Cands for Snap<'_> {
    #[inline]
    fn cands(&self, _tag: u32) -> impl Iterator<Item = Slot> + '_ {
        self.cands.candidates()
    }
    #[inline]
    fn small(&self) -> bool {
        self.inside.table.small()
    }
}

/// How long `write_spinning` and `read_spinning` spin for a shard's lock before they sleep.
pub(super) const EXCL_SPIN: Duration = Duration::from_micros(50);

/// Take `lock` for writing, spinning up to `EXCL_SPIN` while another thread holds it before
/// sleeping in the lock's queue. A shard is held exclusively for microseconds at a time (a
/// write in slow mode, one batch of a growing table's move), while a sleep and a wake-up cost
/// tens of microseconds here (waking a thread whose core went idle, in a virtual machine):
/// sleeping there made two writers into one growing index put each other to sleep about 600
/// times per million puts.
pub(super) fn write_spinning<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    spinning(|| lock.try_write(), || !lock.is_locked(), || lock.write())
}

/// `write_spinning` for a reader of a slow shard (one that is growing, say).
pub(super) fn read_spinning<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    spinning(
        || lock.try_read(),
        || !lock.is_locked_exclusive(),
        || lock.read(),
    )
}

/// `attempt` until it succeeds, trying again each time `free` says it may, for up to
/// `EXCL_SPIN`; then `block`. After the first few microseconds the thread yields between
/// rounds of spinning, so that when there are more threads than cores (a server's workers
/// beside its clients, say) the holder, or other work, gets the core meanwhile.
#[inline]
pub(super) fn spinning<G>(
    mut attempt: impl FnMut() -> Option<G>,
    free: impl Fn() -> bool,
    block: impl FnOnce() -> G,
) -> G {
    if let Some(g) = attempt() {
        return g;
    }
    let start = Instant::now();
    let mut rounds = 0u32;
    loop {
        for _ in 0..64 {
            std::hint::spin_loop();
            if free() {
                if let Some(g) = attempt() {
                    return g;
                }
            }
        }
        rounds += 1;
        if start.elapsed() >= EXCL_SPIN {
            return block();
        }
        if rounds >= 2 {
            std::thread::yield_now();
        }
    }
}

impl Inner {
    // ------------------------------------------------------------------ hashing and reading

    #[inline]
    pub(super) fn hash(&self, key: &[u8]) -> (usize, u32) {
        let h = xxhash_rust::xxh3::xxh3_64_with_seed(key, self.hash_seed.load(Ordering::Relaxed));
        ((h >> (64 - SHARD_BITS)) as usize, h as u32)
    }

    /// `hash`, and start fetching the key's home position in its shard's table into the
    /// cache. A lookup in a large index is a cache miss; started here, it overlaps with taking
    /// the shard lock, whose cache line comes from the other core about every other time when
    /// two threads write.
    #[inline]
    pub(super) fn locate(&self, key: &[u8]) -> (usize, u32) {
        let (shard, tag) = self.hash(key);
        let hint = &self.hints.0[shard];
        let base = hint.base.load(Ordering::Relaxed);
        if base != 0 {
            let (bucket, addr) = index::home_addr(base, hint.cap.load(Ordering::Relaxed), tag);
            prefetch(bucket);
            if addr >= bucket + 64 {
                prefetch(addr);
            }
        }
        (shard, tag)
    }

    /// Record where shard `i`'s table array is (`TableHint`); called with the shard locked.
    #[inline]
    pub(super) fn note_table(&self, i: usize, tbl: &Table) {
        let (base, cap) = tbl.home_array();
        let hint = &self.hints.0[i];
        if hint.base.load(Ordering::Relaxed) != base || hint.cap.load(Ordering::Relaxed) != cap {
            hint.cap.store(cap, Ordering::Relaxed);
            hint.base.store(base, Ordering::Relaxed);
        }
    }

    // ------------------------------------------------------------------ shard modes (`Brl`)

    /// Hold shard `i` exclusively: its `RwLock` for writing, and (when the shard was fast) no
    /// thread inside it any more, their counts folded into the shard's state.
    pub(super) fn excl(&self, i: usize) -> Excl<'_> {
        let mut g = write_spinning(&self.shards[i].0);
        let slow = &self.brl.slow.0[i];
        // Only a holder of the write lock changes the flag.
        if !slow.load(Ordering::Relaxed) {
            slow.store(true, Ordering::SeqCst);
            let mut maxseq = 0u64;
            let mut delta = 0i64;
            for stripe in self.brl.stripes.iter() {
                let c = &stripe.0[i];
                let mut spins = 0u32;
                while c.inside.load(Ordering::SeqCst) != 0 {
                    index::back_off(&mut spins);
                }
                maxseq = maxseq.max(c.maxseq.swap(0, Ordering::AcqRel));
                delta += c.delta.swap(0, Ordering::AcqRel);
            }
            // The shard's seq stays at least every seq given out, so that the next ones (in
            // either mode) come after them all.
            g.seq = g.seq.max(maxseq);
            g.table.add_len(delta);
        }
        Excl { g, slow }
    }

    /// Enter shard `shard` in fast mode and lock the run of `tag`. `Err(false)` when the shard
    /// is slow, `Err(true)` when the run reaches the end of the table (the caller then takes
    /// the shard exclusively: an insert there grows the table).
    #[inline]
    pub(super) fn fast(&self, shard: usize, tag: u32) -> std::result::Result<Fast<'_>, bool> {
        let f = self.enter(shard).ok_or(false)?;
        Self::lock_run_in(f, tag).ok_or(true)
    }

    /// Lock the run of `tag` in a shard entered in fast mode (`enter`); `None` (the shard
    /// left) when the run reaches the end of the table.
    #[inline]
    pub(super) fn lock_run_in(mut f: Fast<'_>, tag: u32) -> Option<Fast<'_>> {
        let table = f.table;
        // SAFETY: while the shard is fast, every thread uses its table through `lock_run` or
        // `snapshot`, or reads only its count, size and array (`count`, `note_table`); a fast
        // shard's table is never growing (`Excl` keeps a growing shard slow).
        f.run = Some(unsafe { table.lock_run(tag) }?);
        Some(f)
    }

    /// Enter shard `shard` in fast mode (no run locked yet); `None` when it is slow.
    #[inline]
    pub(super) fn enter(&self, shard: usize) -> Option<Fast<'_>> {
        let (count, own) = self.brl.mine(shard);
        count.enter(own);
        if self.brl.slow.0[shard].load(Ordering::SeqCst) {
            count.exit(own);
            return None;
        }
        // SAFETY: the shard is fast and this thread is counted inside it: nothing changes the
        // shard's state until it leaves (`excl` waits for that; holders of the read lock only
        // read it; `Excl` guards that set the shard fast had finished their changes).
        let st = unsafe { &*self.shards[shard].0.data_ptr() };
        Some(Fast {
            inner: self,
            shard,
            run: None,
            table: &st.table,
            base: st.seq,
            count,
            own,
            maxseq: 0,
            delta: 0,
        })
    }

    /// A plain put in fast mode: the record is appended first, with a seq from this thread's
    /// clock, while the key's bucket (prefetched by `locate`) is fetched; then the run is
    /// locked and the slot pointed at the record. When the bucket shows a later seq (a key of
    /// it was written meanwhile by a thread whose clock ran ahead), the record is written
    /// again with a seq past it and the first copy is dead: no key's seqs ever go down.
    /// `None` when the shard is slow, or the run reaches the end of the table (after an
    /// append, which is then dead): the caller holds the shard exclusively instead.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn put_fast(
        &self,
        shard: usize,
        tag: u32,
        key: &[u8],
        stored: &Stored<'_>,
        flags: u32,
        expires: u64,
    ) -> Option<Result<Meta>> {
        let mut f = self.enter(shard)?;
        let lane = self.log.my_lane();
        let acct = Acct::Lane { old: None };
        let mut seq = f.seq_after(0);
        let (mut seg, mut off, len) =
            match self.write_put(lane, key, stored, flags, expires, (seq, 0), acct) {
                Ok(w) => w,
                Err(e) => return Some(Err(e)),
            };
        f.gave(seq);
        // SAFETY: as in `lock_run_in`.
        let Some(run) = (unsafe { f.table.lock_run(tag) }) else {
            self.dead_record(lane, seg, len);
            return None;
        };
        let behind = run.seq() >= seq;
        f.run = Some(run);
        if behind {
            self.dead_record(lane, seg, len);
            seq = f.seq_after(0);
            match self.write_put(lane, key, stored, flags, expires, (seq, 0), acct) {
                Ok(w) => (seg, off, _) = w,
                Err(e) => return Some(Err(e)),
            }
            f.gave(seq);
        }
        f.run.as_mut().expect("locked").set_seq(seq);
        let candidates = f.cands(tag).next().is_some();
        let found = self.point_appended(&mut f, tag, key, lane, (seg, off), candidates);
        Some(found.map(|_| Meta {
            flags,
            expires,
            version: seq,
        }))
    }

    /// A delete in fast mode, appending first like `put_fast`: its delete record (seq from
    /// the thread's clock) goes into the lane buffer while the key's bucket is fetched; then
    /// the run is locked and the key looked for. Found: the slot is removed (after writing the
    /// record again with a later seq if the bucket shows one at least as large). Not found:
    /// the record is taken back out of the buffer if nothing came after it, else it stays, a
    /// delete of an absent key, older than the bucket's seq it leaves: harmless on replay.
    /// `None` when the shard is slow, the record would not stay in the buffer, or the run
    /// reaches the end of the table: the caller then deletes through `writer`.
    pub(super) fn out_fast(
        &self,
        shard: usize,
        tag: u32,
        key: &[u8],
    ) -> Option<Result<Option<Found>>> {
        let mut f = self.enter(shard)?;
        let lane = self.log.my_lane();
        let mut seq = f.seq_after(0);
        let hdr = HeaderBuf::delete_in(self.ks, key.len(), seq, 0);
        let len = hdr.as_slice().len() + key.len();
        let (seg_id, mark, appended) = {
            let mut tail = self.log.tails[lane].0.lock();
            if !self.stays_in_buffer(&tail, len) {
                return None;
            }
            let (mark, seg_id) = (tail.buf.len(), tail.seg.id);
            if let Err(e) = self.log.append(&mut tail, &[hdr.as_slice(), key], true) {
                return Some(Err(e));
            }
            (seg_id, mark, tail.appended)
        };
        f.gave(seq);
        // SAFETY: as in `lock_run_in`.
        let run = unsafe { f.table.lock_run(tag) }?;
        let behind = run.seq() >= seq;
        let floor = run.seq().max(seq);
        f.run = Some(run);
        let found = match self.find(&f, tag, key, Want::Slot) {
            Ok(found) => found,
            Err(e) => {
                f.run.as_mut().expect("locked").set_seq(floor);
                return Some(Err(e));
            }
        };
        let Some(found) = found else {
            f.run.as_mut().expect("locked").set_seq(floor);
            let mut tail = self.log.tails[lane].0.lock();
            if tail.seg.id == seg_id && tail.buf.len() == mark + len && tail.appended == appended {
                tail.buf.truncate(mark);
                tail.appended -= len as u64;
            }
            return Some(Ok(None));
        };
        if behind {
            seq = f.seq_after(0);
            if let Err(e) = self.write_delete(lane, key, seq, Acct::Caller) {
                return Some(Err(e));
            }
            f.gave(seq);
        }
        f.run.as_mut().expect("locked").set_seq(seq);
        {
            let mut tail = self.log.tails[lane].0.lock();
            self.log.note_full(lane, &tail);
            self.log
                .note_live(&mut tail, found.slot.seg, -(found.len as i64));
        }
        f.remove(&found.slot);
        Some(Ok(Some(found)))
    }

    /// A record counted live (by `write_put` to lane `lane`, or long ago) is dead: note it in
    /// the lane.
    pub(super) fn dead_record(&self, lane: usize, seg: u32, len: usize) {
        let mut tail = self.log.tails[lane].0.lock();
        self.log.note_live(&mut tail, seg, -(len as i64));
    }

    /// A reader's view of the run of `tag` in `shard`: read without locks when `optimistic`
    /// and the shard is fast (unless writers keep changing it), else locked.
    #[inline]
    pub(super) fn reader(&self, shard: usize, tag: u32, optimistic: bool) -> Reader<'_> {
        loop {
            if let Some(f) = self.enter(shard) {
                if optimistic {
                    // SAFETY: as in `lock_run_in`.
                    if let Some(cands) = unsafe { f.table.snapshot(tag) } {
                        // The record is the next miss: start it now, so that it overlaps
                        // with the way back to the lookup.
                        if let Some(slot) = cands.candidates().next() {
                            self.prefetch_record(&slot);
                        }
                        return Reader::Snap(Snap { inside: f, cands });
                    }
                }
                // Still inside: the run is locked without counting in again.
                return match Self::lock_run_in(f, tag) {
                    Some(f) => Reader::Fast(f),
                    None => Reader::Excl(self.excl(shard)),
                };
            }
            let g = read_spinning(&self.shards[shard].0);
            // Made fast again before the read lock was ours: try again.
            if self.brl.slow.0[shard].load(Ordering::Acquire) {
                return Reader::Shared(g);
            }
        }
    }

    /// A writer's view of the run of `tag` in `shard`.
    #[inline]
    pub(super) fn writer(&self, shard: usize, tag: u32) -> Writer<'_> {
        match self.fast(shard, tag) {
            Ok(f) => Writer::Fast(f),
            Err(_) => Writer::Excl(self.excl(shard)),
        }
    }

    /// Whether shard `shard`, whose table is `table`, is past its load limit by the counts of
    /// every stripe (called inside the shard in fast mode, where the table's own count lags).
    pub(super) fn fast_wants_growth(&self, shard: usize, table: &Table) -> bool {
        let n = table.len() as i64 + self.brl.delta(shard);
        n as f64 > table.capacity() as f64 * table.max_load()
    }

    /// Grow shard `i`'s table if it is past its load limit: the new array is made without
    /// any lock, then installed (the slots move with the shard's next writes).
    pub(super) fn grow(&self, i: usize) {
        let nb = {
            let g = self.excl(i);
            if !g.table.wants_growth() {
                return;
            }
            g.table.grow_cap()
        };
        self.grow_to(i, nb);
    }

    /// Make an array of `nb` buckets without any lock and install it as shard `i`'s next
    /// (unless another writer grew the table first).
    pub(super) fn grow_to(&self, i: usize, nb: usize) {
        let spare = index::Spare::new(nb);
        let mut g = self.excl(i);
        let unused = g.table.grow_into(spare);
        self.note_table(i, &g.table);
        drop(g);
        drop(unused);
        // Then move the slots over in batches, the lock released between them, so that the
        // shard is back in fast mode soon instead of after its next few hundred writes.
        loop {
            let mut g = self.excl(i);
            if !g.table.is_moving() {
                break;
            }
            g.table.move_some(MOVE_BATCH);
            let retired = g.table.take_retired();
            drop(g);
            if retired.is_none() {
                // A moment with the lock free, so that a writer spinning for it
                // (`write_spinning`) gets it between two batches instead of after the move.
                for _ in 0..16 {
                    std::hint::spin_loop();
                }
            }
            drop(retired);
        }
    }

    /// Release a shard held exclusively after a write that may have inserted or removed.
    /// When the shard's table asks to grow, make the new memory (faulting its pages in)
    /// without the lock and install it under the lock (the slots move over with later
    /// writes); memory the table no longer needs is freed after the lock is released. So the
    /// shard's other writers never wait for the kernel or for a whole table to be copied.
    #[inline]
    pub(super) fn unlock(&self, i: usize, mut tbl: Excl<'_>) {
        let retired = tbl.table.take_retired();
        let grow = tbl.table.wants_growth().then(|| tbl.table.grow_cap());
        self.note_table(i, &tbl.table);
        drop(tbl);
        drop(retired);
        if let Some(nb) = grow {
            self.grow_to(i, nb);
        }
    }

    /// Start fetching the header and key of the record `slot` points at (the caller is inside
    /// the shard: holding a lock, or counted in).
    #[inline]
    pub(super) fn prefetch_record(&self, slot: &Slot) {
        // SAFETY: the caller is inside a shard (see `segs_locked`).
        let segs = unsafe { self.log.segs_locked() };
        if let Some(seg) = segs.get(slot.seg) {
            // SAFETY: as above.
            if let Some(m) = unsafe { seg.map.peek() } {
                let b = m.as_slice();
                if (slot.off as usize) < b.len() {
                    let a = b.as_ptr() as usize + slot.off as usize;
                    prefetch(a);
                    prefetch(a + 64);
                }
            }
        }
    }

    /// `note_table` for every shard (after open, vanish and optimize replace the tables).
    pub(super) fn note_tables(&self) {
        for (i, s) in self.shards.iter().enumerate() {
            self.note_table(i, &s.0.read());
        }
    }
}
