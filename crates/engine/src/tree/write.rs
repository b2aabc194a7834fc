//! Changes: one key (`accept`), an atomic batch, a record replayed at open, `vanish`, and the
//! splits they cause.
//!
//! A change latches its leaf for writing, appends its record to its thread's lane of the
//! write-ahead log (its seq taken under the lane's lock, so a lane's records are in seq order,
//! and under the leaf's latch, so a key's records are in seq order across lanes: replay merges
//! the lanes by seq), changes the cached leaf and marks it dirty. A leaf grown past
//! `leafsiz` splits under the same latch: the new right leaf is linked from it before the latch
//! is released, and the index learns of it afterwards (readers meanwhile reach it through the
//! right link).

use super::forest::{Forest, SlotState, NONE};
use super::index::Key;
use super::leaf::{dup_order, Leaf};
use super::{Gone, Inner};
use crate::error::Result;
use crate::log::format::{self, HeaderBuf, PutFields, MAX_HEADER_LEN};
use crate::store::{
    check_batch, check_sizes, is_expired, now_secs, BatchOp, Current, Decision, Meta,
};
use std::cmp::Ordering as KeyOrder;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A change of one key, as replayed or applied by a batch.
/// `dup`: which of the key's values (0 for a key without duplicates).
pub(crate) enum Change<'a> {
    Put {
        value: &'a [u8],
        meta: Meta,
        dup: u64,
    },
    Remove {
        dup: u64,
    },
}

impl Inner {
    /// Append a put of `key` to the write-ahead log; its version (`keep`, or a new one).
    fn log_put(
        &self,
        key: &[u8],
        value: &[u8],
        flags: u32,
        expires: u64,
        keep: Option<u64>,
        dup: u64,
    ) -> Result<u64> {
        let lane = self.wal.my_lane();
        let mut tail = self.wal.tails[lane].0.lock();
        let seq = self.version.fetch_add(1, Ordering::Relaxed) + 1;
        let f = PutFields {
            flags,
            expires,
            seq,
            version: keep.unwrap_or(0),
            dup,
            ..PutFields::default()
        };
        let h = HeaderBuf::put_in(self.ks, key.len(), value.len(), &f);
        self.wal
            .append(&mut tail, &[h.as_slice(), key, value], true)?;
        self.wal.note_full(lane, &tail);
        let len = h.as_slice().len() + key.len() + value.len();
        self.note_wal_bytes(len as u64);
        Ok(f.version())
    }

    fn log_delete(&self, key: &[u8], dup: u64) -> Result<()> {
        let lane = self.wal.my_lane();
        let mut tail = self.wal.tails[lane].0.lock();
        let seq = self.version.fetch_add(1, Ordering::Relaxed) + 1;
        let h = HeaderBuf::delete_in(self.ks, key.len(), seq, dup);
        self.wal.append(&mut tail, &[h.as_slice(), key], true)?;
        self.wal.note_full(lane, &tail);
        let len = h.as_slice().len() + key.len();
        self.note_wal_bytes(len as u64);
        Ok(())
    }

    /// `Store::accept` (see there).
    pub(crate) fn accept_key<'v>(
        &self,
        key: &[u8],
        visitor: &mut dyn FnMut(Option<Current<'_>>) -> Decision<'v>,
    ) -> Result<Option<Meta>> {
        check_sizes(key, 0)?;
        self.wal.check_writable()?;
        self.change_leaf(key, true, |st| {
            let leaf = st.leaf_mut().expect("write_leaf caches the leaf");
            let (i, hit) = leaf.find(self.cmp, key);
            let now = now_secs();
            let live = hit && !is_expired(leaf.entry(i).meta.expires, now);
            let decision = {
                let cur = live.then(|| {
                    let e = leaf.entry(i);
                    Current {
                        value: e.value,
                        meta: e.meta,
                    }
                });
                visitor(cur)
            };
            let before = leaf.mem_bytes();
            let result = match decision {
                Decision::Keep => {
                    return Ok((live.then(|| leaf.entry(i).meta), None));
                }
                Decision::Put {
                    value,
                    flags,
                    expires,
                } => {
                    check_sizes(key, value.len())?;
                    let dup = if hit { leaf.entry(i).dup } else { 0 };
                    let version = self.log_put(key, &value, flags, expires, None, dup)?;
                    let meta = Meta {
                        flags,
                        expires,
                        version,
                    };
                    if hit {
                        leaf.replace(i, &value, &meta);
                    } else {
                        leaf.insert(i, key, &value, &meta, 0);
                        self.count.add(1);
                    }
                    Some(meta)
                }
                Decision::Touch { expires } => {
                    if !live {
                        return Ok((None, None));
                    }
                    let e = leaf.entry(i);
                    let (value, dup) = (e.value.to_vec(), e.dup);
                    let mut meta = e.meta;
                    self.log_put(key, &value, meta.flags, expires, Some(meta.version), dup)?;
                    meta.expires = expires;
                    leaf.replace(i, &value, &meta);
                    Some(meta)
                }
                Decision::Remove => {
                    if !hit {
                        return Ok((None, None));
                    }
                    self.log_delete(key, leaf.entry(i).dup)?;
                    leaf.remove(i);
                    self.count_neg.add(1);
                    None
                }
            };
            self.account(before, leaf.mem_bytes());
            Ok((result, Some(i)))
        })
    }

    /// How every change of one key goes: latch the leaf holding `key` for writing (again if a
    /// vanish replaced the tree meanwhile) and let `change` work on it. When it changed the
    /// leaf (`Some(hint)`, where), the leaf is marked dirty and split if it grew, the index
    /// learns of new leaves once the latch is released, the writer waits for its log record
    /// as the sync mode says (`durable`; not while replaying) and the cache is kept within
    /// its budget.
    fn change_leaf<R>(
        &self,
        key: &[u8],
        durable: bool,
        change: impl FnOnce(&mut SlotState) -> Result<(R, Option<usize>)>,
    ) -> Result<R> {
        let mut change = Some(change);
        loop {
            let f = self.forest.load();
            let (_, mut g) = match self.write_leaf(&f, key)? {
                Ok(x) => x,
                Err(Gone) => continue,
            };
            let change = change.take().expect("a change runs once");
            let (result, hint) = change(&mut g)?;
            let Some(hint) = hint else {
                return Ok(result);
            };
            g.dirty = true;
            let splits = self.split_leaf(&f, &mut g, hint);
            drop(g);
            self.index_splits(&f, splits);
            if durable {
                self.wal.after_write()?;
            }
            self.after_change();
            return Ok(result);
        }
    }

    /// Read the cached leaf holding `key`, latched for reading (again if a vanish replaced
    /// the tree meanwhile).
    /// A published leaf is read without the latch (`Inner::published_leaf`).
    pub(crate) fn read_key<R>(&self, key: &[u8], read: impl FnOnce(&Leaf) -> R) -> Result<R> {
        loop {
            let forest = self.forest.load();
            if let Some(p) = self.published_leaf(&forest, key) {
                return Ok(read(p.leaf()));
            }
            let (id, g) = match self.read_leaf(&forest, key)? {
                Ok(x) => x,
                Err(Gone) => continue,
            };
            forest.slot(id).note_read(&g);
            return Ok(read(g.leaf.as_ref().expect("latched leaves are cached")));
        }
    }

    /// Apply `change` to `key` in a latched, cached leaf that holds it (no log record).
    pub(crate) fn apply(&self, st: &mut SlotState, key: &[u8], change: &Change<'_>) -> usize {
        let leaf = st.leaf_mut().expect("a latched leaf is cached");
        let before = leaf.mem_bytes();
        let dup = match change {
            Change::Put { dup, .. } | Change::Remove { dup } => *dup,
        };
        let (i, hit) = if dup == 0 {
            // Fast path: value 0 is the first (duplicates put before it are rare).
            match leaf.find(self.cmp, key) {
                (i, true) if leaf.entry(i).dup != 0 => leaf.find_dup(self.cmp, key, 0),
                x => x,
            }
        } else {
            leaf.find_dup(self.cmp, key, dup)
        };
        match change {
            Change::Put { value, meta, dup } => {
                if hit {
                    leaf.replace(i, value, meta);
                } else {
                    leaf.insert(i, key, value, meta, *dup);
                    self.count.add(1);
                }
            }
            Change::Remove { .. } => {
                if hit {
                    leaf.remove(i);
                    self.count_neg.add(1);
                }
            }
        }
        let after = leaf.mem_bytes();
        self.account(before, after);
        st.dirty = true;
        i
    }

    /// Replay one change at open.
    pub(crate) fn replay(&self, key: &[u8], change: Change<'_>) -> Result<()> {
        if let Change::Put { meta, .. } = &change {
            self.version.fetch_max(meta.version, Ordering::Relaxed);
        }
        self.change_leaf(key, false, |st| {
            Ok(((), Some(self.apply(st, key, &change))))
        })
    }

    /// Split the latched leaf while it is larger than `leafsiz` (`hint`: where the last
    /// change went). The new leaves are linked to its right; their separators are returned,
    /// for the index once the latch is released.
    pub(crate) fn split_leaf(
        &self,
        f: &Forest,
        st: &mut SlotState,
        hint: usize,
    ) -> Vec<(Key, u32)> {
        let mut out = Vec::new();
        self.split_into(f, st, hint, &mut out);
        out
    }

    fn split_into(&self, f: &Forest, st: &mut SlotState, hint: usize, out: &mut Vec<(Key, u32)>) {
        let Some(leaf) = st.leaf_mut() else {
            return;
        };
        if leaf.live_bytes() <= self.cfg.leafsiz {
            return;
        }
        let before = leaf.mem_bytes();
        let Some((sep, right)) = leaf.split(hint) else {
            return;
        };
        let after = leaf.mem_bytes() + right.mem_bytes();
        self.account(before, after);
        let sep: Key = Arc::from(sep.into_boxed_slice());
        let rid = f.alloc(Some(sep.clone()));
        let right_big = right.live_bytes() > self.cfg.leafsiz;
        let rn = right.len();
        {
            // Nobody reaches the new leaf but through this latched one.
            let mut rg = f.slot(rid).write();
            rg.leaf = Some(Arc::new(right));
            rg.right = st.right;
            rg.dirty = true;
            st.right = rid;
            st.dirty = true;
            self.counters.splits.fetch_add(1, Ordering::Relaxed);
            out.push((sep, rid));
            if right_big {
                self.split_into(f, &mut rg, rn / 2, out);
            }
        }
        let n = st.leaf.as_ref().map_or(0, |l| l.len());
        self.split_into(f, st, n / 2, out);
    }

    /// Tell the index of new leaves.
    pub(crate) fn index_splits(&self, f: &Forest, splits: Vec<(Key, u32)>) {
        for (sep, id) in splits {
            f.index.insert(self.cmp, sep, id);
        }
    }

    /// `Store::write_batch`: every operation or none, even across a crash.
    pub(crate) fn batch(&self, ops: &[BatchOp]) -> Result<()> {
        let ops: Vec<(usize, &BatchOp)> = ops.iter().map(|op| (0, op)).collect();
        Inner::batch_across(&[self], &ops)
    }

    /// A batch across keyspaces (`ops`: the index in `spaces` of each operation's keyspace,
    /// every keyspace of one database, each once): every operation or none, even across a
    /// crash. The batch's leaves are latched together (by keyspace id, then in key order, as
    /// every writer of several leaves latches them) while its one log record, a frame whose
    /// records name their keyspaces, is written and applied, so no reader sees part of it.
    pub(crate) fn batch_across(spaces: &[&Inner], ops: &[(usize, &BatchOp)]) -> Result<()> {
        let Some(first_space) = spaces.first() else {
            return Ok(());
        };
        let wal = &first_space.wal;
        wal.check_writable()?;
        if ops.is_empty() {
            return Ok(());
        }
        let frame = check_batch(ops.iter().map(|(_, op)| *op), MAX_HEADER_LEN)?;
        // Latch order: keyspace id, then the keyspace's key order.
        let mut order: Vec<usize> = (0..ops.len()).collect();
        order.sort_by(|&a, &b| {
            let (sa, sb) = (spaces[ops[a].0], spaces[ops[b].0]);
            sa.ks
                .cmp(&sb.ks)
                .then_with(|| sa.cmp.cmp(ops[a].1.key(), ops[b].1.key()))
        });
        'again: loop {
            let forests: Vec<Arc<Forest>> = spaces.iter().map(|s| s.forest.load_full()).collect();
            // Latch the leaves of the keys in that order; `at[i]`: the latch of op i.
            let mut held: Vec<(usize, u32, super::WriteLatch<'_>)> = Vec::new();
            let mut at = vec![0usize; ops.len()];
            for &o in &order {
                let (si, op) = ops[o];
                let sp = spaces[si];
                let f = &*forests[si];
                let cmp = sp.cmp;
                let key = op.key();
                let last = held.last().filter(|(s, _, _)| *s == si);
                if let Some((_, _, g)) = last {
                    if !sp.right_holds(f, g.right, key) {
                        at[o] = held.len() - 1;
                        continue;
                    }
                }
                // The leaf to start from: the index's, unless that lies left of the last
                // latched leaf of this keyspace (the index may lag behind a split): then that
                // one's right.
                let mut id = f.index.find(cmp, key);
                if let Some((_, last, g)) = last {
                    let left_of_last = id == *last
                        || match (f.slot(id).low(), f.slot(*last).low()) {
                            (_, None) => false,
                            (None, Some(_)) => true,
                            (Some(a), Some(b)) => cmp.cmp(a, b) != KeyOrder::Greater,
                        };
                    if left_of_last {
                        id = g.right;
                    }
                }
                let g = loop {
                    let slot = f.slot(id);
                    let g = slot.write();
                    if g.gone {
                        continue 'again;
                    }
                    if sp.right_holds(f, g.right, key) {
                        id = g.right;
                        continue;
                    }
                    break g;
                };
                held.push((si, id, g));
                at[o] = held.len() - 1;
            }
            for (si, _, g) in held.iter_mut() {
                if g.leaf.is_none() {
                    spaces[*si].load(g)?;
                }
            }
            // One frame holding every record.
            let seed = format::inner_seed(format::seed(wal.salt));
            let mut body = Vec::with_capacity(frame.min(1 << 20));
            let first = first_space
                .version
                .fetch_add(ops.len() as u64, Ordering::Relaxed)
                + 1;
            let mut metas = Vec::with_capacity(ops.len());
            // Which value of its key each operation changes (the first, as `accept` does),
            // following the batch's own earlier operations on that key.
            let mut runs: std::collections::HashMap<
                (usize, &[u8]),
                std::collections::VecDeque<u64>,
            > = std::collections::HashMap::new();
            let mut dups = Vec::with_capacity(ops.len());
            // When no key comes twice (a table row and its index entries: the usual batch),
            // each operation changes the first value its leaf holds, or makes value 0: the
            // same answer as the map below, without hashing and a queue per key.
            let distinct = order.windows(2).all(|w| {
                let (a, b) = (ops[w[0]], ops[w[1]]);
                spaces[a.0].ks != spaces[b.0].ks
                    || spaces[a.0].cmp.cmp(a.1.key(), b.1.key()) != KeyOrder::Equal
            });
            if distinct {
                for (n, &(si, op)) in ops.iter().enumerate() {
                    let leaf = held[at[n]].2.leaf.as_ref().expect("loaded above");
                    let (i, j) = leaf.run(spaces[si].cmp, op.key());
                    dups.push(if i < j { leaf.entry(i).dup } else { 0 });
                }
            } else {
                for (n, &(si, op)) in ops.iter().enumerate() {
                    let run = runs.entry((si, op.key())).or_insert_with(|| {
                        let leaf = held[at[n]].2.leaf.as_ref().expect("loaded above");
                        let (i, j) = leaf.run(spaces[si].cmp, op.key());
                        (i..j).map(|k| leaf.entry(k).dup).collect()
                    });
                    dups.push(match op {
                        BatchOp::Put { .. } => match run.front() {
                            Some(&d) => d,
                            None => {
                                run.push_back(0);
                                0
                            }
                        },
                        BatchOp::Remove { .. } => run.pop_front().unwrap_or(0),
                    });
                }
            }
            for (n, &(si, op)) in ops.iter().enumerate() {
                let start = body.len();
                let seq = first + n as u64;
                let ks = spaces[si].ks;
                match op {
                    BatchOp::Put {
                        key,
                        value,
                        flags,
                        expires,
                    } => {
                        let fields = PutFields {
                            flags: *flags,
                            expires: *expires,
                            seq,
                            dup: dups[n],
                            ..PutFields::default()
                        };
                        format::encode_put_in(&mut body, ks, key, value, &fields);
                        metas.push(Meta {
                            flags: *flags,
                            expires: *expires,
                            version: seq,
                        });
                    }
                    BatchOp::Remove { key } => {
                        format::encode_delete_in(&mut body, ks, key, seq, dups[n]);
                        metas.push(Meta::default());
                    }
                }
                format::seal(&mut body[start..], seed);
            }
            let mut hdr = Vec::with_capacity(16);
            format::encode_batch_header(&mut hdr, body.len(), ops.len());
            {
                let lane = wal.my_lane();
                let mut tail = wal.tails[lane].0.lock();
                wal.append(&mut tail, &[&hdr, &body], true)?;
                wal.note_full(lane, &tail);
            }
            first_space.note_wal_bytes((hdr.len() + body.len()) as u64);
            let mut last_at = vec![0usize; held.len()];
            for (n, &(si, op)) in ops.iter().enumerate() {
                let change = match op {
                    BatchOp::Put { value, .. } => Change::Put {
                        value,
                        meta: metas[n],
                        dup: dups[n],
                    },
                    BatchOp::Remove { .. } => Change::Remove { dup: dups[n] },
                };
                last_at[at[n]] = spaces[si].apply(&mut held[at[n]].2, op.key(), &change);
            }
            let mut splits: Vec<Vec<(Key, u32)>> = vec![Vec::new(); spaces.len()];
            for (h, (si, _, g)) in held.iter_mut().enumerate() {
                splits[*si].extend(spaces[*si].split_leaf(&forests[*si], g, last_at[h]));
            }
            drop(held);
            for (si, s) in splits.into_iter().enumerate() {
                spaces[si].index_splits(&forests[si], s);
            }
            wal.after_write()?;
            first_space.after_change();
            return Ok(());
        }
    }

    /// `Store::vanish`: every leaf latched (left to right), one clear record, a new empty
    /// tree; operations waiting on the old leaves find them gone and start again.
    pub(crate) fn vanish(&self) -> Result<()> {
        self.wal.check_writable()?;
        let _ck = self.ckpt_lock.lock();
        let f = self.forest.load_full();
        let mut held = Vec::new();
        let mut id = 0;
        loop {
            let g = f.slot(id).write();
            let r = g.right;
            held.push(g);
            if r == NONE {
                break;
            }
            id = r;
        }
        {
            let mut rec = Vec::with_capacity(16);
            let seq = self.version.fetch_add(1, Ordering::Relaxed) + 1;
            format::encode_clear_in(&mut rec, self.ks, seq, 1);
            let lane = self.wal.my_lane();
            let mut tail = self.wal.tails[lane].0.lock();
            self.wal.append(&mut tail, &[&rec], true)?;
            self.wal.note_full(lane, &tail);
            self.note_wal_bytes(rec.len() as u64);
        }
        for g in held.iter_mut() {
            g.gone = true;
            if let Some(l) = g.leaf.take() {
                self.cached
                    .fetch_sub(l.mem_bytes() as i64, Ordering::Relaxed);
            }
            self.drop_image(g.image);
        }
        self.count.reset();
        self.count_neg.reset();
        self.forest.store(Arc::new(Forest::new()));
        drop(held);
        self.wal.after_write()?;
        Ok(())
    }

    /// A leaf's image is no longer anyone's (its keyspace was emptied): the node log holds
    /// that much less alive (other keyspaces' images stay alive).
    fn drop_image(&self, img: super::forest::Image) {
        if !img.is_none() {
            self.nodes.add_live(img.seg(), -i64::from(img.len));
            self.node_live
                .fetch_sub(i64::from(img.len), Ordering::Relaxed);
        }
    }

    /// Replay a clear record at open: an empty keyspace.
    pub(crate) fn replay_clear(&self) {
        let f = self.forest.load_full();
        let mut id = 0;
        loop {
            let mut g = f.slot(id).write();
            g.gone = true;
            if let Some(l) = g.leaf.take() {
                self.cached
                    .fetch_sub(l.mem_bytes() as i64, Ordering::Relaxed);
            }
            self.drop_image(g.image);
            if g.right == NONE {
                break;
            }
            id = g.right;
        }
        self.count.reset();
        self.count_neg.reset();
        self.forest.store(Arc::new(Forest::new()));
    }
}

impl Inner {
    /// `Store::put_dup`: one more value of `key`, after its others or (`front`) before them.
    pub(crate) fn put_dup(&self, key: &[u8], value: &[u8], front: bool) -> Result<()> {
        check_sizes(key, value.len())?;
        self.wal.check_writable()?;
        self.change_leaf(key, true, |st| {
            let leaf = st.leaf_mut().expect("write_leaf caches the leaf");
            let (i, j) = leaf.run(self.cmp, key);
            let (at, dup) = if i == j {
                (i, 0)
            } else if front {
                (i, dup_order(leaf.entry(i).dup).wrapping_sub(1) as u64)
            } else {
                (j, dup_order(leaf.entry(j - 1).dup).wrapping_add(1) as u64)
            };
            let before = leaf.mem_bytes();
            let version = self.log_put(key, value, 0, 0, None, dup)?;
            let meta = Meta {
                flags: 0,
                expires: 0,
                version,
            };
            leaf.insert(at, key, value, &meta, dup);
            self.count.add(1);
            self.account(before, leaf.mem_bytes());
            Ok(((), Some(at)))
        })
    }

    /// `Store::remove_all`: every value of `key`, in one log record; how many were live.
    pub(crate) fn remove_all(&self, key: &[u8]) -> Result<u64> {
        check_sizes(key, 0)?;
        self.wal.check_writable()?;
        self.change_leaf(key, true, |st| {
            let leaf = st.leaf_mut().expect("write_leaf caches the leaf");
            let (i, j) = leaf.run(self.cmp, key);
            if i == j {
                return Ok((0, None));
            }
            let now = now_secs();
            let live = (i..j)
                .filter(|&k| !is_expired(leaf.entry(k).meta.expires, now))
                .count() as u64;
            let n = j - i;
            let seed = format::inner_seed(format::seed(self.wal.salt));
            let first = self.version.fetch_add(n as u64, Ordering::Relaxed) + 1;
            let mut body = Vec::with_capacity(n * (MAX_HEADER_LEN + key.len()));
            for (m, k) in (i..j).enumerate() {
                let start = body.len();
                let dup = leaf.entry(k).dup;
                format::encode_delete_in(&mut body, self.ks, key, first + m as u64, dup);
                format::seal(&mut body[start..], seed);
            }
            let mut hdr = Vec::with_capacity(16);
            format::encode_batch_header(&mut hdr, body.len(), n);
            {
                let lane = self.wal.my_lane();
                let mut tail = self.wal.tails[lane].0.lock();
                self.wal.append(&mut tail, &[&hdr, &body], true)?;
                self.wal.note_full(lane, &tail);
            }
            self.note_wal_bytes((hdr.len() + body.len()) as u64);
            let before = leaf.mem_bytes();
            for _ in i..j {
                leaf.remove(i);
            }
            self.count_neg.add(n as u64);
            self.account(before, leaf.mem_bytes());
            Ok((live, Some(i)))
        })
    }

    /// The live values of `key`, first to last, each handed to `f`.
    pub(crate) fn values_of(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<()> {
        self.wal.check_open()?;
        self.read_key(key, |leaf| {
            let (i, j) = leaf.run(self.cmp, key);
            let now = now_secs();
            for k in i..j {
                let e = leaf.entry(k);
                if !is_expired(e.meta.expires, now) {
                    f(e.value);
                }
            }
        })
    }
}

impl Inner {
    /// Mark every leaf changed (loading those not cached), so the next checkpoint writes
    /// every image anew (`optimize` with another compression). Leaves are latched one at a
    /// time; the cache stays within its budget meanwhile (an eviction writes the image).
    pub(crate) fn dirty_all(&self) -> Result<()> {
        let f = self.forest.load_full();
        let mut id = 0;
        loop {
            let right = {
                let mut g = f.slot(id).write();
                if g.gone {
                    return Ok(());
                }
                if g.leaf.is_none() {
                    self.load(&mut g)?;
                }
                g.dirty = true;
                g.right
            };
            self.after_change();
            if right == NONE {
                return Ok(());
            }
            id = right;
        }
    }
}
