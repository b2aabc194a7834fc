//! `*`: the concurrent in-memory hash.

use super::*;

/// One shard of the hash: dense slots plus a table of positions (like an index map).
#[derive(Default)]
pub(super) struct Shard {
    /// Positions in `slots`, filed under `table_hash` of their key's hash.
    pub(super) index: HashTable<u32>,
    /// The low 32 bits of the hash of each slot's key (parallel to `slots`), so that growing
    /// the table reads no record: recomputing every key's hash from the records made a fifth
    /// of the time of a 1M-record load. Kept apart from the table, which lookups read, so that
    /// its entries stay 4 bytes (8-byte entries made gets a fifth slower).
    pub(super) hashes: Vec<u32>,
    pub(super) slots: Vec<Rec>,
    /// CLOCK hand (a position in `slots`).
    pub(super) clock: usize,
    /// Reaper hand (a position in `slots`).
    pub(super) reap: usize,
    /// Records with an expiration time.
    pub(super) expiring: usize,
    /// Writes to this shard so far (`Shard::next_version`); kept when the shard is emptied.
    pub(super) seq: u64,
}

/// The hash the table files an entry under, from the key hash's low 32 bits (the bits above
/// pick the shard): spread over 64 bits so that the table's control byte (its top 7 bits) and
/// bucket (its low bits) both vary.
#[inline]
pub(super) fn table_hash(h32: u32) -> u64 {
    u64::from(h32).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// `table_hash` of a key's full hash.
#[inline]
pub(super) fn th(hash: u64) -> u64 {
    table_hash(hash as u32)
}

/// Rehash an entry for table growth, from `Shard::hashes` (no record read).
pub(super) fn rehasher(hashes: &[u32]) -> impl Fn(&u32) -> u64 + '_ {
    move |&i| hashes.get(i as usize).map_or(0, |&h| table_hash(h))
}

impl Shard {
    /// A fresh version for a write to this shard, shard `si`: its own sequence with the shard in
    /// the low bits. Versions are thus unique across shards and grow with every write of a key
    /// (a key never leaves its shard), with no counter that every writer shares (one shared
    /// `AtomicU64` moved its cache line between the writers' cores on every write).
    #[inline]
    pub(super) fn next_version(&mut self, si: usize) -> u64 {
        self.seq += 1;
        (self.seq << SHARDS.trailing_zeros()) | si as u64
    }

    /// Empty the shard; its sequence goes on, so no version is ever handed out twice.
    pub(super) fn clear(&mut self) {
        let seq = self.seq;
        *self = Shard::default();
        self.seq = seq;
    }

    pub(super) fn find(&self, hash: u64, key: &[u8]) -> Option<usize> {
        let slots = &self.slots;
        self.index
            .find(th(hash), |&i| {
                slots.get(i as usize).is_some_and(|r| r.key() == key)
            })
            .map(|&i| i as usize)
    }

    pub(super) fn has_room(&self, n: usize) -> bool {
        self.slots.len().saturating_add(n) <= MAX_SHARD_RECORDS
    }

    /// Insert a record whose key is absent (the caller checked [`Shard::has_room`]).
    pub(super) fn insert_new(&mut self, c: &Common, hash: u64, rec: Rec) {
        c.added(&rec);
        if rec.expires() != 0 {
            self.expiring += 1;
        }
        let pos = self.slots.len() as u32;
        self.slots.push(rec);
        self.hashes.push(hash as u32);
        let Shard { index, hashes, .. } = self;
        index.insert_unique(th(hash), pos, rehasher(hashes));
    }

    pub(super) fn replace_at(&mut self, c: &Common, i: usize, rec: Rec) {
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        let old = std::mem::replace(slot, rec);
        c.replaced(&old, slot);
        self.expiring = (self.expiring + usize::from(slot.expires() != 0))
            .saturating_sub(usize::from(old.expires() != 0));
    }

    /// Remove the record at `i` (whose key hashes to `hash`); the last slot moves into `i`.
    pub(super) fn remove_at(&mut self, c: &Common, i: usize, hash: u64) -> Option<Rec> {
        if i >= self.slots.len() {
            return None;
        }
        if let Ok(e) = self.index.find_entry(th(hash), |&j| j as usize == i) {
            e.remove();
        }
        let last = self.slots.len() - 1;
        if i != last {
            let h = table_hash(self.hashes[last]);
            if let Ok(mut e) = self.index.find_entry(h, |&j| j as usize == last) {
                *e.get_mut() = i as u32;
            }
        }
        self.hashes.swap_remove(i);
        let rec = self.slots.swap_remove(i);
        c.removed(&rec);
        if rec.expires() != 0 {
            self.expiring = self.expiring.saturating_sub(1);
        }
        Some(rec)
    }

    pub(super) fn set_expiry(&mut self, i: usize, expires: u64) -> Option<Meta> {
        let r = self.slots.get(i)?;
        let before = r.expires() != 0;
        r.expires.store(expires, Relaxed);
        self.expiring =
            (self.expiring + usize::from(expires != 0)).saturating_sub(usize::from(before));
        Some(r.meta())
    }

    /// Evict one record by CLOCK, never `protect`. `Some(expired)` when a record was removed.
    pub(super) fn evict_one(
        &mut self,
        c: &Common,
        protect: Option<&[u8]>,
        now: u64,
    ) -> Option<bool> {
        let n = self.slots.len();
        for _ in 0..=2 * n {
            if self.clock >= self.slots.len() {
                self.clock = 0;
            }
            let i = self.clock;
            let r = self.slots.get(i)?;
            if protect.is_some_and(|p| p == r.key()) {
                self.clock += 1;
                continue;
            }
            let expired = r.is_expired(now);
            if !expired && r.take_used() {
                self.clock += 1;
                continue;
            }
            let hash = xxh3_64(r.key());
            self.remove_at(c, i, hash)?;
            // The slot now holds the former last record (usually the newest): step past it so
            // it gets a full revolution.
            self.clock = i + 1;
            c.evicted(expired);
            return Some(expired);
        }
        None
    }

    /// Advance the reaper hand a few records, freeing expired ones.
    pub(super) fn reap(&mut self, c: &Common, now: u64) {
        if self.expiring == 0 {
            return;
        }
        let mut freed = 0;
        for _ in 0..REAP_STEPS {
            if self.slots.is_empty() {
                break;
            }
            if self.reap >= self.slots.len() {
                self.reap = 0;
            }
            let i = self.reap;
            let r = &self.slots[i];
            if r.is_expired(now) {
                let hash = xxh3_64(r.key());
                if self.remove_at(c, i, hash).is_some() {
                    freed += 1;
                }
            } else {
                self.reap += 1;
            }
        }
        c.reclaimed(freed);
    }

    /// Free every expired record.
    pub(super) fn reclaim_all(&mut self, c: &Common, now: u64) {
        if self.expiring == 0 {
            return;
        }
        let mut freed = 0;
        let mut i = 0;
        while i < self.slots.len() {
            let r = &self.slots[i];
            if r.is_expired(now) {
                let hash = xxh3_64(r.key());
                if self.remove_at(c, i, hash).is_some() {
                    freed += 1;
                }
            } else {
                i += 1;
            }
        }
        c.reclaimed(freed);
    }

    pub(super) fn shrink(&mut self) {
        self.slots.shrink_to_fit();
        self.hashes.shrink_to_fit();
        let Shard { index, hashes, .. } = self;
        index.shrink_to_fit(rehasher(hashes));
    }

    pub(super) fn reserve(&mut self, n: usize) -> Result<()> {
        let more = n.saturating_sub(self.slots.len());
        let fail = |why: String| {
            Error::InvalidParam(format!("bnum: cannot reserve {n} records per shard: {why}"))
        };
        self.slots
            .try_reserve(more)
            .map_err(|e| fail(e.to_string()))?;
        self.hashes
            .try_reserve(more)
            .map_err(|e| fail(e.to_string()))?;
        let Shard { index, hashes, .. } = self;
        index
            .try_reserve(more, rehasher(hashes))
            .map_err(|e| fail(format!("{e:?}")))
    }
}

/// A cache-line aligned shard, so that shard locks do not share lines.
#[repr(align(128))]
pub(super) struct Padded(RwLock<Shard>);

#[inline]
pub(super) fn shard_of(hash: u64) -> usize {
    ((hash >> 32) as usize) & (SHARDS - 1)
}

/// `*`: a concurrent in-memory hash (see the module doc).
pub struct MemHash {
    common: Common,
    shards: Box<[Padded]>,
    /// Where the round-robin eviction across shards continues.
    evict_rr: AtomicUsize,
    spaces: super::Spaces<MemHash>,
}

impl MemHash {
    /// Open a new, empty in-memory hash with `capnum`, `capsiz` and `bnum`.
    pub fn open(params: &Params) -> Result<Self> {
        let t = Tuning::parse(params, "the memory hash (*)")?;
        let db = MemHash {
            common: Common::new("*", "the memory hash (*)", HASH_RECORD_OVERHEAD, &t),
            shards: (0..SHARDS)
                .map(|_| Padded(RwLock::new(Shard::default())))
                .collect(),
            evict_rr: AtomicUsize::new(0),
            spaces: super::Spaces::default(),
        };
        if let Some(bnum) = t.bnum {
            db.reserve(bnum)?;
        }
        Ok(db)
    }

    fn shard(&self, i: usize) -> &RwLock<Shard> {
        &self.shards[i].0
    }

    fn reserve(&self, bnum: u64) -> Result<()> {
        let bnum = bnum.min(MAX_PRESIZE);
        let per = usize::try_from(bnum.div_ceil(SHARDS as u64)).unwrap_or(usize::MAX);
        for i in 0..SHARDS {
            self.shard(i).write().reserve(per)?;
        }
        Ok(())
    }

    /// Evict round-robin across shards until within bounds (or nothing is left to evict).
    fn enforce(&self, protect: Option<&[u8]>) {
        let now = now_secs();
        let mut idle = 0;
        while idle < SHARDS && self.common.over_cap() {
            let i = self.evict_rr.fetch_add(1, Relaxed) % SHARDS;
            let mut sh = self.shard(i).write();
            if !self.common.over_cap() {
                break;
            }
            if sh.evict_one(&self.common, protect, now).is_some() {
                idle = 0;
            } else {
                idle += 1;
            }
        }
    }

    /// After a write to `sh`: reap a little, evict from the own shard if over a bound.
    /// Returns whether the database is still over a bound.
    fn after_write(&self, sh: &mut Shard, protect: Option<&[u8]>, now: u64) -> bool {
        sh.reap(&self.common, now);
        if self.common.over_cap() {
            sh.evict_one(&self.common, protect, now);
            return self.common.over_cap();
        }
        false
    }

    /// Lock every shard for writing, in ascending order.
    fn lock_all(&self) -> Vec<RwLockWriteGuard<'_, Shard>> {
        (0..SHARDS).map(|i| self.shard(i).write()).collect()
    }
}

impl MemHash {
    /// Show `f` the live record of `key` under its shard's read lock (marking it used).
    /// Whether there was one.
    fn with_live(&self, key: &[u8], f: impl FnOnce(&Rec)) -> Result<bool> {
        self.common.check_open()?;
        let hash = xxh3_64(key);
        let sh = self.shard(shard_of(hash)).read();
        match sh.find(hash, key).map(|i| &sh.slots[i]) {
            Some(r) if r.is_live_now() => {
                r.mark_used();
                f(r);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

/// The shards a batch writes, locked, and its keys' hashes.
pub(super) struct LockedBatch<'a> {
    hashes: Vec<u64>,
    guards: Vec<Option<RwLockWriteGuard<'a, Shard>>>,
}

impl MemHash {
    /// Lock every shard `ops` write, in ascending order (no deadlock with other batches),
    /// checking each has room.
    pub(super) fn lock_batch(&self, ops: &[BatchOp]) -> Result<LockedBatch<'_>> {
        let hashes: Vec<u64> = ops.iter().map(|op| xxh3_64(op.key())).collect();
        let mut puts = [0usize; SHARDS];
        let mut involved = [false; SHARDS];
        for (op, &h) in ops.iter().zip(&hashes) {
            involved[shard_of(h)] = true;
            if matches!(op, BatchOp::Put { .. }) {
                puts[shard_of(h)] += 1;
            }
        }
        let guards: Vec<Option<RwLockWriteGuard<'_, Shard>>> = (0..SHARDS)
            .map(|i| involved[i].then(|| self.shard(i).write()))
            .collect();
        for (i, g) in guards.iter().enumerate() {
            if g.as_ref().is_some_and(|g| !g.has_room(puts[i])) {
                return Err(Error::TooLarge("shard holds 2^32 records".into()));
            }
        }
        Ok(LockedBatch { hashes, guards })
    }

    /// Apply `ops` under the locks `lock_batch` took for them.
    pub(super) fn apply_batch(&self, ops: &[BatchOp], l: &mut LockedBatch<'_>) {
        let c = &self.common;
        let now = now_secs();
        for (op, &h) in ops.iter().zip(&l.hashes) {
            let si = shard_of(h);
            let Some(sh) = l.guards[si].as_mut() else {
                continue; // unreachable: every involved shard is locked
            };
            let pos = sh.find(h, op.key());
            match op {
                BatchOp::Put {
                    key,
                    value,
                    flags,
                    expires,
                } => {
                    let version = sh.next_version(si);
                    let rec = Rec::new(key, value, *flags, *expires, version);
                    match pos {
                        Some(i) => sh.replace_at(c, i, rec),
                        None => sh.insert_new(c, h, rec),
                    }
                }
                BatchOp::Remove { .. } => {
                    if let Some(i) = pos {
                        let expired = sh.slots[i].is_expired(now);
                        sh.remove_at(c, i, h);
                        if expired {
                            c.reclaimed(1);
                        }
                    }
                }
            }
        }
        for sh in l.guards.iter_mut().flatten() {
            self.after_write(sh, None, now);
        }
    }
}

impl super::MemKind for MemHash {
    fn write_locked(groups: &[(&Self, &[BatchOp])]) -> Result<()> {
        // Every keyspace's shards locked (in the order of the groups, then ascending) before
        // any is written.
        let mut locked = Vec::with_capacity(groups.len());
        for (db, ops) in groups {
            locked.push(db.lock_batch(ops)?);
        }
        for ((db, ops), l) in groups.iter().zip(locked.iter_mut()) {
            db.apply_batch(ops, l);
        }
        drop(locked);
        for (db, _) in groups {
            if db.common.over_cap() {
                db.enforce(None);
            }
        }
        Ok(())
    }

    fn common(&self) -> &Common {
        &self.common
    }
    fn spaces(&self) -> &super::Spaces<Self> {
        &self.spaces
    }
    fn open_space(params: &Params) -> Result<Self> {
        MemHash::open(params)
    }
}

impl Store for MemHash {
    fn keyspace(&self, name: &str, params: &str) -> Result<Arc<dyn Store>> {
        super::keyspace_of(self, name, params)
    }

    fn write_across(&self, ops: &[(&str, BatchOp)]) -> Result<()> {
        super::write_across_of(self, ops)
    }

    fn keyspaces(&self) -> Vec<(String, String)> {
        super::keyspaces_of(self)
    }

    fn get(&self, key: &[u8]) -> Result<Option<Record>> {
        let mut found = None;
        self.with_live(key, |r| found = Some(r.record()))?;
        Ok(found)
    }

    fn view(&self, key: &[u8], f: &mut dyn FnMut(&[u8], Meta)) -> Result<bool> {
        self.with_live(key, |r| f(r.value(), r.meta()))
    }

    fn view_shared(
        &self,
        key: &[u8],
        min: usize,
        f: &mut dyn FnMut(Shown<'_>, Meta),
    ) -> Result<bool> {
        self.with_live(key, |r| f(r.shown(min), r.meta()))
    }

    fn accept<'v>(
        &self,
        key: &[u8],
        visitor: &mut dyn FnMut(Option<Current<'_>>) -> Decision<'v>,
    ) -> Result<Option<Meta>> {
        self.common.check_open()?;
        let c = &self.common;
        let hash = xxh3_64(key);
        let si = shard_of(hash);
        let mut sh = self.shard(si).write();
        let now = now_secs();
        let pos = sh.find(hash, key);
        let live = pos.filter(|&i| !sh.slots[i].is_expired(now));
        let decision = visitor(live.map(|i| sh.slots[i].current()));
        let mut protect = None;
        let meta = match decision {
            Decision::Put {
                value,
                flags,
                expires,
            } => {
                c.check_fits(key, value.len())?;
                if pos.is_none() && !sh.has_room(1) {
                    return Err(Error::TooLarge("shard holds 2^32 records".into()));
                }
                let version = sh.next_version(si);
                let rec = Rec::new(key, &value, flags, expires, version);
                match pos {
                    Some(i) => sh.replace_at(c, i, rec),
                    None => sh.insert_new(c, hash, rec),
                }
                protect = Some(key);
                Some(Meta {
                    flags,
                    expires,
                    version,
                })
            }
            // A touch changes the expiry only: the version stays (as memcached keeps the cas).
            Decision::Touch { expires } if live.is_some() => {
                live.and_then(|i| sh.set_expiry(i, expires))
            }
            Decision::Remove => {
                if let Some(i) = pos {
                    sh.remove_at(c, i, hash);
                    if live.is_none() {
                        c.reclaimed(1);
                    }
                }
                None
            }
            // Keep, or Touch of an absent record.
            _ => match (pos, live) {
                (Some(i), None) => {
                    // Expired: free it now that we hold the lock.
                    sh.remove_at(c, i, hash);
                    c.reclaimed(1);
                    None
                }
                (_, Some(i)) => Some(sh.slots[i].meta()),
                (None, None) => None,
            },
        };
        let still_over = self.after_write(&mut sh, protect, now);
        drop(sh);
        if still_over {
            self.enforce(protect);
        }
        Ok(meta)
    }

    fn write_batch(&self, ops: &[BatchOp]) -> Result<()> {
        self.common.check_open()?;
        let c = &self.common;
        for op in ops {
            if let BatchOp::Put { key, value, .. } = op {
                c.check_fits(key, value.len())?;
            }
        }
        if ops.is_empty() {
            return Ok(());
        }
        let mut locked = self.lock_batch(ops)?;
        self.apply_batch(ops, &mut locked);
        drop(locked);
        if self.common.over_cap() {
            self.enforce(None);
        }
        Ok(())
    }

    fn cursor(&self) -> Result<Box<dyn Cursor + '_>> {
        self.common.check_open()?;
        Ok(Box::new(KindCursor::new(self, HashWalk::new(self))))
    }

    fn count(&self) -> u64 {
        self.common.count.get()
    }

    fn size(&self) -> u64 {
        self.common.bytes.get()
    }

    fn sync(&self) -> Result<()> {
        self.common.check_open()
    }

    fn optimize(&self, params: &str) -> Result<()> {
        self.common.check_open()?;
        let t = Tuning::parse(&Params::parse(params)?, self.common.kind_label)?;
        self.common.apply(&t);
        let now = now_secs();
        for i in 0..SHARDS {
            let mut sh = self.shard(i).write();
            sh.reclaim_all(&self.common, now);
            sh.shrink();
            sh.clock = 0;
            sh.reap = 0;
        }
        if let Some(bnum) = t.bnum {
            self.reserve(bnum)?;
        }
        self.enforce(None);
        Ok(())
    }

    fn vanish(&self) -> Result<()> {
        self.common.check_open()?;
        for mut sh in self.lock_all() {
            for r in &sh.slots {
                self.common.removed(r);
            }
            sh.clear();
        }
        Ok(())
    }

    fn copy_to(&self, dest: &Path) -> Result<()> {
        self.common.check_open()?;
        // A consistent snapshot: every shard read-locked at once while the records are copied
        // out (writers wait for that memcpy only, not for the disk).
        let now = now_secs();
        let ops = {
            let shards: Vec<_> = self.shards.iter().map(|s| s.0.read()).collect();
            snapshot(shards.iter().flat_map(|sh| sh.slots.iter()), now)
        };
        write_copy(dest, ops)
    }

    fn check(&self) -> Result<CheckReport> {
        self.common.check_open()?;
        let mut report = CheckReport::default();
        let mut bytes = 0;
        let guards: Vec<_> = (0..SHARDS).map(|i| self.shard(i).read()).collect();
        for (s, sh) in guards.iter().enumerate() {
            if sh.index.len() != sh.slots.len() || sh.hashes.len() != sh.slots.len() {
                report.problems.push(format!(
                    "shard {s}: index has {} entries and {} hashes for {} records",
                    sh.index.len(),
                    sh.hashes.len(),
                    sh.slots.len()
                ));
            }
            let mut expiring = 0;
            for (i, r) in sh.slots.iter().enumerate() {
                let hash = xxh3_64(r.key());
                if shard_of(hash) != s {
                    report
                        .problems
                        .push(format!("shard {s}: record {i} belongs to another shard"));
                }
                if sh.hashes.get(i) != Some(&(hash as u32)) {
                    report
                        .problems
                        .push(format!("shard {s}: record {i} has a wrong cached hash"));
                }
                if sh.index.find(th(hash), |&j| j as usize == i).is_none() {
                    report
                        .problems
                        .push(format!("shard {s}: record {i} is missing from the index"));
                }
                if r.meta().version == 0 {
                    report
                        .problems
                        .push(format!("shard {s}: record {i} has version 0"));
                }
                expiring += usize::from(r.expires() != 0);
                bytes += self.common.charge(r);
            }
            if expiring != sh.expiring {
                report.problems.push(format!(
                    "shard {s}: {expiring} expiring records, counter says {}",
                    sh.expiring
                ));
            }
            report.records += sh.slots.len() as u64;
        }
        self.common
            .check_totals(report.records, bytes, &mut report.problems);
        Ok(report)
    }

    fn kind(&self) -> Kind {
        Kind::MemHash
    }

    fn check_put(&self, key: &[u8], value_len: usize) -> Result<()> {
        self.common.check_fits(key, value_len)
    }

    fn keyspace_rules(&self, params: &str) -> Result<Option<Arc<dyn Store>>> {
        super::keyspace_rules_of(self, params)
    }

    fn describe(&self) -> Vec<(String, String)> {
        self.common.describe()
    }

    fn close(&self) -> Result<()> {
        self.common.close()?;
        super::close_spaces(self);
        // Nothing can use the data any more: free it.
        for mut sh in self.lock_all() {
            for r in &sh.slots {
                self.common.removed(r);
            }
            sh.clear();
        }
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.common.counters()
    }

    /// The first `max` matches in the cursor's order (shard, then hash, then key: the order
    /// of `for_each_record` here), read shard by shard without a cursor.
    fn fwmkeys(&self, prefix: &[u8], max: usize) -> Result<Vec<Vec<u8>>> {
        self.common.check_open()?;
        let mut out = Vec::new();
        let now = now_secs();
        for i in 0..SHARDS {
            if out.len() >= max {
                break;
            }
            let sh = self.shard(i).read();
            let mut found: Vec<(u32, &[u8])> = sh
                .slots
                .iter()
                .zip(&sh.hashes)
                .filter(|(r, _)| r.key().starts_with(prefix) && !r.is_expired(now))
                .map(|(r, &h)| (h, r.key()))
                .collect();
            found.sort_unstable();
            out.extend(
                found
                    .into_iter()
                    .take(max - out.len())
                    .map(|(_, k)| k.to_vec()),
            );
        }
        Ok(out)
    }
}

/// Keys a window of [`HashWalk`] holds at least (and a 16th of the shard when that is more).
pub(super) const WINDOW_MIN: usize = 256;

/// A key's place in the hash's walk order: (shard, low 32 bits of its hash, key).
pub(super) type Place = (usize, u32, Vec<u8>);

pub(super) fn place_of(key: &[u8]) -> Place {
    let h = xxh3_64(key);
    (shard_of(h), h as u32, key.to_vec())
}

/// The walk behind the hash's cursor: shard by shard, and in a shard by the low 32 bits of
/// the keys' hashes, then by key. A key's place never changes (a shard's slots move when
/// records are removed, its table when it grows), so a walk meets a key at most once, and
/// every key that stays live throughout. It holds a window of a shard's keys in that order
/// (at least 256, a 16th of the shard when that is more), read in one pass under the shard's
/// read lock; each record is read again when the walk reaches it.
pub(super) struct HashWalk<'a> {
    db: &'a MemHash,
    /// Every live key of shard `shard` placed in (`from`, `to`] when the window was read,
    /// ascending by (hash, key). `shard == SHARDS`: no window.
    shard: usize,
    window: std::collections::VecDeque<(u32, Vec<u8>)>,
    from: Option<(u32, Vec<u8>)>,
    /// `None`: the window reaches the end of the shard.
    to: Option<(u32, Vec<u8>)>,
}

impl<'a> HashWalk<'a> {
    fn new(db: &'a MemHash) -> HashWalk<'a> {
        HashWalk {
            db,
            shard: SHARDS,
            window: Default::default(),
            from: None,
            to: None,
        }
    }

    /// Read the window of shard `si` after `after`.
    fn fill(&mut self, si: usize, after: Option<(u32, Vec<u8>)>) {
        let sh = self.db.shard(si).read();
        let now = now_secs();
        let past = |h: u32, i: usize| match &after {
            None => true,
            Some((ah, ak)) => h > *ah || (h == *ah && sh.slots[i].key() > ak.as_slice()),
        };
        let mut cand: Vec<(u32, u32)> = sh
            .hashes
            .iter()
            .enumerate()
            .filter(|&(i, &h)| past(h, i) && !sh.slots[i].is_expired(now))
            .map(|(i, &h)| (h, i as u32))
            .collect();
        let cap = WINDOW_MIN.max(sh.slots.len() / 16);
        let complete = cand.len() <= cap;
        if !complete {
            // The `cap` lowest hashes, and every other key of the highest of them.
            cand.select_nth_unstable_by_key(cap - 1, |c| c.0);
            let top = cand[cap - 1].0;
            cand.retain(|c| c.0 <= top);
        }
        let mut window: Vec<(u32, Vec<u8>)> = cand
            .iter()
            .map(|&(h, i)| (h, sh.slots[i as usize].key().to_vec()))
            .collect();
        drop(sh);
        window.sort_unstable();
        self.to = if complete {
            None
        } else {
            window.last().cloned()
        };
        self.window = window.into();
        self.from = after;
        self.shard = si;
    }

    /// The live record of `key` (not marked used: a walk says nothing about which records
    /// are hot).
    fn live(&self, key: &[u8]) -> Option<Record> {
        let hash = xxh3_64(key);
        let sh = self.db.shard(shard_of(hash)).read();
        sh.find(hash, key)
            .map(|i| &sh.slots[i])
            .filter(|r| r.is_live_now())
            .map(Rec::record)
    }
}

impl Walk for HashWalk<'_> {
    fn ordered(&self) -> bool {
        false
    }

    fn forward(&mut self, from: Bound<&[u8]>) -> Result<Found> {
        self.db.common.check_open()?;
        let (mut si, mut after) = match from {
            Unbounded => (0, None),
            Included(k) => {
                if let Some(r) = self.live(k) {
                    return Ok(Some((k.to_vec(), r)));
                }
                let (s, h, k) = place_of(k);
                (s, Some((h, k)))
            }
            Excluded(k) => {
                let (s, h, k) = place_of(k);
                (s, Some((h, k)))
            }
        };
        while si < SHARDS {
            if self.shard != si || self.from > after {
                self.fill(si, after.clone());
            }
            while self
                .window
                .front()
                .is_some_and(|e| Some(e) <= after.as_ref())
            {
                self.window.pop_front();
            }
            while let Some((h, key)) = self.window.pop_front() {
                let rec = self.live(&key);
                self.from = Some((h, key));
                if let Some(r) = rec {
                    let key = self.from.as_ref().map(|f| f.1.clone()).unwrap_or_default();
                    return Ok(Some((key, r)));
                }
            }
            match self.to.take() {
                Some(to) => {
                    after = Some(to);
                    self.shard = SHARDS;
                }
                None => {
                    si += 1;
                    after = None;
                }
            }
        }
        Ok(None)
    }
}
