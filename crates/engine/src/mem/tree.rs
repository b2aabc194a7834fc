//! `+`: the concurrent in-memory ordered tree.

use super::*;

#[derive(Default)]
pub(super) struct TreeInner {
    pub(super) set: BTreeSet<Rec>,
    /// CLOCK hand: the last victim's key (`None`: before the first key).
    pub(super) clock: Option<Box<[u8]>>,
    /// Reaper hand: the last key examined.
    pub(super) reap: Option<Box<[u8]>>,
    /// Records with an expiration time.
    pub(super) expiring: usize,
}

pub(super) type Range<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

pub(super) const EMPTY: &[u8] = &[];

/// Every record once, starting just after `hand` and wrapping around.
// `Rec`'s atomics (reference bit, expiry, version) never change its key, which alone orders it.
#[allow(clippy::mutable_key_type)]
pub(super) fn from_hand<'a>(
    set: &'a BTreeSet<Rec>,
    hand: Option<&'a [u8]>,
) -> impl Iterator<Item = &'a Rec> {
    let (a, b): (Range<'a>, Range<'a>) = match hand {
        Some(h) => ((Excluded(h), Unbounded), (Unbounded, Included(h))),
        None => ((Unbounded, Unbounded), (Unbounded, Excluded(EMPTY))),
    };
    set.range::<[u8], _>(a).chain(set.range::<[u8], _>(b))
}

impl TreeInner {
    pub(super) fn insert(&mut self, c: &Common, rec: Rec) {
        let new_exp = rec.expires() != 0;
        c.added(&rec);
        if let Some(old) = self.set.replace(rec) {
            c.removed(&old);
            if old.expires() != 0 {
                self.expiring = self.expiring.saturating_sub(1);
            }
        }
        if new_exp {
            self.expiring += 1;
        }
    }

    pub(super) fn remove(&mut self, c: &Common, key: &[u8]) -> Option<Rec> {
        let rec = self.set.take(key)?;
        c.removed(&rec);
        if rec.expires() != 0 {
            self.expiring = self.expiring.saturating_sub(1);
        }
        Some(rec)
    }

    pub(super) fn set_expiry(&mut self, key: &[u8], expires: u64) -> Option<Meta> {
        let r = self.set.get(key)?;
        let before = r.expires() != 0;
        r.expires.store(expires, Relaxed);
        self.expiring =
            (self.expiring + usize::from(expires != 0)).saturating_sub(usize::from(before));
        Some(r.meta())
    }

    pub(super) fn evict_one(
        &mut self,
        c: &Common,
        protect: Option<&[u8]>,
        now: u64,
    ) -> Option<bool> {
        let n = self.set.len();
        let hand = self.clock.as_deref();
        let (key, expired) = from_hand(&self.set, hand)
            .chain(from_hand(&self.set, hand))
            .take(2 * n)
            .find_map(|r| {
                if protect.is_some_and(|p| p == r.key()) {
                    return None;
                }
                let expired = r.is_expired(now);
                (expired || !r.take_used()).then(|| (r.key().to_vec(), expired))
            })?;
        self.remove(c, &key)?;
        self.clock = Some(key.into_boxed_slice());
        c.evicted(expired);
        Some(expired)
    }

    pub(super) fn reap(&mut self, c: &Common, now: u64) {
        if self.expiring == 0 {
            return;
        }
        let mut dead = Vec::new();
        let mut last = None;
        for r in from_hand(&self.set, self.reap.as_deref()).take(REAP_STEPS) {
            if r.is_expired(now) {
                dead.push(r.key().to_vec());
            } else {
                last = Some(Box::<[u8]>::from(r.key()));
            }
        }
        if let Some(k) = last {
            self.reap = Some(k);
        }
        let mut freed = 0;
        for k in dead {
            if self.remove(c, &k).is_some() {
                freed += 1;
            }
        }
        c.reclaimed(freed);
    }

    pub(super) fn reclaim_all(&mut self, c: &Common, now: u64) {
        if self.expiring == 0 {
            return;
        }
        let mut freed = 0;
        let mut expiring = 0;
        self.set.retain(|r| {
            if r.is_expired(now) {
                c.removed(r);
                freed += 1;
                false
            } else {
                expiring += usize::from(r.expires() != 0);
                true
            }
        });
        self.expiring = expiring;
        c.reclaimed(freed);
    }

    /// Evict until within bounds or only `protect` is left.
    pub(super) fn enforce(&mut self, c: &Common, protect: Option<&[u8]>, now: u64) {
        while c.over_cap() && self.evict_one(c, protect, now).is_some() {}
    }
}

/// `+`: a concurrent in-memory ordered tree (see the module doc).
pub struct MemTree {
    common: Common,
    inner: RwLock<TreeInner>,
    spaces: super::Spaces<MemTree>,
}

impl MemTree {
    /// Open a new, empty in-memory tree with `capnum` and `capsiz` (`bnum` is accepted and
    /// ignored: a B-tree has no capacity to reserve).
    pub fn open(params: &Params) -> Result<Self> {
        let t = Tuning::parse(params, "the memory tree (+)")?;
        Ok(MemTree {
            common: Common::new("+", "the memory tree (+)", TREE_RECORD_OVERHEAD, &t),
            inner: RwLock::new(TreeInner::default()),
            spaces: super::Spaces::default(),
        })
    }
}

impl MemTree {
    /// Show `f` the live record of `key` under the read lock (marking it used). Whether there
    /// was one.
    fn with_live(&self, key: &[u8], f: impl FnOnce(&Rec)) -> Result<bool> {
        self.common.check_open()?;
        let t = self.inner.read();
        match t.set.get(key).filter(|r| r.is_live_now()) {
            Some(r) => {
                r.mark_used();
                f(r);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

impl MemTree {
    /// Apply `ops` under the write lock `t` of this tree.
    fn apply_batch(&self, t: &mut TreeInner, ops: &[BatchOp]) {
        let c = &self.common;
        let now = now_secs();
        for op in ops {
            match op {
                BatchOp::Put {
                    key,
                    value,
                    flags,
                    expires,
                } => t.insert(c, Rec::new(key, value, *flags, *expires, c.version())),
                BatchOp::Remove { key } => {
                    if t.remove(c, key).is_some_and(|r| r.is_expired(now)) {
                        c.reclaimed(1);
                    }
                }
            }
        }
        t.reap(c, now);
        t.enforce(c, None, now);
    }
}

impl super::MemKind for MemTree {
    fn write_locked(groups: &[(&Self, &[BatchOp])]) -> Result<()> {
        // Every keyspace's lock taken (in the order of the groups) before any is written.
        let mut locked: Vec<_> = groups.iter().map(|(db, _)| db.inner.write()).collect();
        for ((db, ops), t) in groups.iter().zip(locked.iter_mut()) {
            db.apply_batch(t, ops);
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
        MemTree::open(params)
    }
}

impl Store for MemTree {
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
        let mut t = self.inner.write();
        let now = now_secs();
        let (exists, live, decision) = {
            let found = t.set.get(key);
            let live = found.filter(|r| !r.is_expired(now));
            let decision = visitor(live.map(Rec::current));
            (found.is_some(), live.map(Rec::meta), decision)
        };
        let mut protect = None;
        let meta = match decision {
            Decision::Put {
                value,
                flags,
                expires,
            } => {
                c.check_fits(key, value.len())?;
                let version = c.version();
                t.insert(c, Rec::new(key, &value, flags, expires, version));
                protect = Some(key);
                Some(Meta {
                    flags,
                    expires,
                    version,
                })
            }
            // A touch changes the expiry only: the version stays (as memcached keeps the cas).
            Decision::Touch { expires } if live.is_some() => t.set_expiry(key, expires),
            Decision::Remove => {
                if t.remove(c, key).is_some() && live.is_none() {
                    c.reclaimed(1);
                }
                None
            }
            // Keep, or Touch of an absent record.
            _ => {
                if exists && live.is_none() && t.remove(c, key).is_some() {
                    c.reclaimed(1);
                }
                live
            }
        };
        t.reap(c, now);
        t.enforce(c, protect, now);
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
        let mut t = self.inner.write();
        self.apply_batch(&mut t, ops);
        Ok(())
    }

    fn cursor(&self) -> Result<Box<dyn Cursor + '_>> {
        self.common.check_open()?;
        Ok(Box::new(KindCursor::new(self, TreeWalk { db: self })))
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
        let mut inner = self.inner.write();
        let now = now_secs();
        inner.reclaim_all(&self.common, now);
        inner.enforce(&self.common, None, now);
        Ok(())
    }

    fn vanish(&self) -> Result<()> {
        self.common.check_open()?;
        let mut t = self.inner.write();
        for r in &t.set {
            self.common.removed(r);
        }
        *t = TreeInner::default();
        Ok(())
    }

    fn copy_to(&self, dest: &Path) -> Result<()> {
        self.common.check_open()?;
        let ops = snapshot(self.inner.read().set.iter(), now_secs());
        write_copy(dest, ops)
    }

    fn check(&self) -> Result<CheckReport> {
        self.common.check_open()?;
        let t = self.inner.read();
        let mut report = CheckReport {
            records: t.set.len() as u64,
            ..CheckReport::default()
        };
        let mut bytes = 0;
        let mut expiring = 0;
        let mut prev: Option<&[u8]> = None;
        for r in &t.set {
            if prev.is_some_and(|p| p >= r.key()) {
                report.problems.push("keys out of order".into());
            }
            prev = Some(r.key());
            if r.meta().version == 0 {
                report.problems.push("a record has version 0".into());
            }
            expiring += usize::from(r.expires() != 0);
            bytes += self.common.charge(r);
        }
        if expiring != t.expiring {
            report.problems.push(format!(
                "{expiring} expiring records, counter says {}",
                t.expiring
            ));
        }
        self.common
            .check_totals(report.records, bytes, &mut report.problems);
        Ok(report)
    }

    fn kind(&self) -> Kind {
        Kind::MemTree
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
        let mut t = self.inner.write();
        for r in &t.set {
            self.common.removed(r);
        }
        *t = TreeInner::default();
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.common.counters()
    }

    fn fwmkeys(&self, prefix: &[u8], max: usize) -> Result<Vec<Vec<u8>>> {
        self.common.check_open()?;
        let t = self.inner.read();
        let now = now_secs();
        Ok(t.set
            .range::<[u8], _>((Included(prefix), Unbounded))
            .take_while(|r| r.key().starts_with(prefix))
            .filter(|r| !r.is_expired(now))
            .take(max)
            .map(|r| r.key().to_vec())
            .collect())
    }

    fn range(&self, from: &[u8], to: Option<&[u8]>, max: usize) -> Result<Vec<Vec<u8>>> {
        self.common.check_open()?;
        if to.is_some_and(|to| to <= from) {
            return Ok(Vec::new());
        }
        let end = to.map_or(Unbounded, Excluded);
        let t = self.inner.read();
        let now = now_secs();
        Ok(t.set
            .range::<[u8], _>((Included(from), end))
            .filter(|r| !r.is_expired(now))
            .take(max)
            .map(|r| r.key().to_vec())
            .collect())
    }
}

/// The walk behind the tree's cursor: each step looks up the first (or last) live record past
/// the cursor's key in the tree, so records written meanwhile ahead of it are met, and
/// records come in key order.
pub(super) struct TreeWalk<'a> {
    db: &'a MemTree,
}

impl TreeWalk<'_> {
    fn find(&self, range: (Bound<&[u8]>, Bound<&[u8]>), back: bool) -> Result<Found> {
        self.db.common.check_open()?;
        let t = self.db.inner.read();
        let now = now_secs();
        let live = |r: &&Rec| !r.is_expired(now);
        let mut it = t.set.range::<[u8], _>(range);
        let found = if back {
            it.rev().find(live)
        } else {
            it.find(live)
        };
        Ok(found.map(|r| (r.key().to_vec(), r.record())))
    }
}

impl Walk for TreeWalk<'_> {
    fn ordered(&self) -> bool {
        true
    }

    fn forward(&mut self, from: Bound<&[u8]>) -> Result<Found> {
        self.find((from, Unbounded), false)
    }

    fn backward(&mut self, to: Bound<&[u8]>) -> Result<Found> {
        self.find((Unbounded, to), true)
    }
}
