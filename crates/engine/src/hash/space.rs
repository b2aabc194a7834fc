//! Keyspaces of a hash database: each an index of its own (its shards, count, cursor and
//! export) on the database's one log, lanes and checkpoint.
//!
//! Every record of a keyspace names its id (segment format 3); replay, compaction and
//! `check` send each record to its keyspace's index. The catalog is keyspace
//! [`KS_CATALOG`], an index like the others: one put per keyspace, key its name, value its id
//! as a varint. So compaction keeps the catalog as it keeps any live record, a full replay
//! finds it, and a checkpoint holds it with the other keyspaces' indexes (`index.ki` version
//! 3). Keyspace 0 — the database itself — is the `Inner` the database opened, and its hot
//! path is what it is without keyspaces: its records name no keyspace, and its index is its
//! own.

use super::*;
use crate::log::format::{get_varint, put_varint, KS_CATALOG, KS_FIRST};
use crate::store::{check_batch, check_keyspace_name};
use std::collections::HashMap;
use std::sync::{OnceLock, Weak};

/// The keyspaces of a database (every one but 0), shared by all of its `Inner`s.
#[derive(Default)]
pub(super) struct Spaces {
    /// By id, ascending (the catalog among them once it exists).
    list: RwLock<Vec<Arc<Inner>>>,
    /// The id of each keyspace the catalog names.
    names: RwLock<HashMap<String, u64>>,
    /// Keyspace 0, once it is open.
    root: OnceLock<Weak<Inner>>,
}

impl Spaces {
    pub(super) fn set_root(&self, root: &Arc<Inner>) {
        let _ = self.root.set(Arc::downgrade(root));
    }

    /// Keyspace `ks` (not 0).
    pub(super) fn get(&self, ks: u64) -> Option<Arc<Inner>> {
        let list = self.list.read();
        list.binary_search_by_key(&ks, |s| s.ks)
            .ok()
            .map(|i| list[i].clone())
    }

    /// Forget every keyspace (the database closed: their indexes hold its log).
    pub(super) fn clear(&self) {
        self.list.write().clear();
    }

    /// Every keyspace but 0, by id.
    pub(super) fn all(&self) -> Vec<Arc<Inner>> {
        self.list.read().clone()
    }

    /// Whether the database has keyspaces (or a catalog) besides 0.
    pub(super) fn any(&self) -> bool {
        !self.list.read().is_empty()
    }

    /// Every keyspace the catalog names: (name, id).
    pub(super) fn named(&self) -> Vec<(String, u64)> {
        self.names
            .read()
            .iter()
            .map(|(n, &i)| (n.clone(), i))
            .collect()
    }

    /// The id of the keyspace named `name`.
    pub(super) fn id_of(&self, name: &str) -> Option<u64> {
        self.names.read().get(name).copied()
    }
}

impl Inner {
    /// A new, empty index for keyspace `ks` of this database (same log, settings and
    /// maintenance lock).
    fn new_space(&self, ks: u64) -> Inner {
        let shards: Box<[Shard]> = (0..NSHARDS)
            .map(|i| {
                let mut table = Table::with_capacity(0);
                table.set_max_load(shard_max_load(i));
                Shard(RwLock::new(ShardState {
                    seq: 0,
                    table,
                    inflight: Vec::new(),
                }))
            })
            .collect();
        Inner {
            log: self.log.clone(),
            ks,
            spaces: self.spaces.clone(),
            full_replay: self.full_replay,
            findings: Mutex::new(Vec::new()),
            cfg: Mutex::new(self.cfg.lock().clone()),
            compression: AtomicU8::new(self.compression.load(Ordering::Relaxed)),
            hash_seed: AtomicU64::new(self.hash_seed.load(Ordering::Relaxed)),
            shards,
            brl: Brl::new(),
            hints: Box::new(TableHints(std::array::from_fn(|_| TableHint::default()))),
            appended: AtomicU64::new(0),
            expiring: AtomicU64::new(0),
            damaged: Mutex::new(Vec::new()),
            maint: self.maint.clone(),
            counters: Counters::default(),
            lock: Mutex::new(None),
        }
    }

    /// Keyspace `ks`, made (empty) when this database has no index for it yet: for recovery,
    /// which meets a keyspace's records or its checkpointed index before the catalog names it.
    pub(super) fn space_or_new(&self, ks: u64) -> Arc<Inner> {
        if let Some(s) = self.spaces.get(ks) {
            return s;
        }
        let mut list = self.spaces.list.write();
        match list.binary_search_by_key(&ks, |s| s.ks) {
            Ok(i) => list[i].clone(),
            Err(i) => {
                let s = Arc::new(self.new_space(ks));
                list.insert(i, s.clone());
                s
            }
        }
    }

    /// Run `f` on the index of keyspace `ks` (`None`: no such keyspace).
    pub(super) fn with_space<R>(&self, ks: u64, f: impl FnOnce(&Inner) -> R) -> Option<R> {
        if ks == self.ks {
            return Some(f(self));
        }
        if ks == 0 {
            let root = self.spaces.root.get()?.upgrade()?;
            return Some(f(&root));
        }
        self.spaces.get(ks).map(|s| f(&s))
    }

    /// Keyspace 0 of this database (`None` only while it opens or once it is gone).
    pub(super) fn root(&self) -> Option<Arc<Inner>> {
        self.spaces.root.get()?.upgrade()
    }

    /// After recovery: name each keyspace from the catalog. Records of a keyspace no catalog
    /// record names are damage: a writable open refuses, a read-only one reports them and
    /// serves the rest.
    pub(super) fn name_spaces(&self) -> Result<()> {
        let mut names = HashMap::new();
        if let Some(cat) = self.spaces.get(KS_CATALOG) {
            let handle = DiskHash::space_handle(cat);
            let mut cur = handle.cursor()?;
            while let Some((key, rec)) = cur.next()? {
                let mut pos = 0;
                let id = get_varint(&rec.value, &mut pos).filter(|&i| i >= KS_FIRST);
                let name = String::from_utf8(key).ok();
                match (id, name) {
                    (Some(id), Some(name)) if check_keyspace_name(&name).is_ok() => {
                        names.insert(name, id);
                    }
                    _ => {
                        return Err(Error::Corrupt(format!(
                            "{}: a catalog record of the hash's keyspaces does not parse",
                            self.log.dir.display()
                        )))
                    }
                }
            }
        }
        for &id in names.values() {
            self.space_or_new(id);
        }
        let named: Vec<u64> = names.values().copied().collect();
        let stray: Vec<(u64, u64)> = self
            .spaces
            .all()
            .iter()
            .filter(|s| s.ks >= KS_FIRST && !named.contains(&s.ks))
            .map(|s| (s.ks, s.count()))
            .collect();
        *self.spaces.names.write() = names;
        if let Some(&(ks, n)) = stray.first() {
            let what = format!(
                "{} records of keyspace {ks}, which no catalog record names{}",
                n,
                if stray.len() > 1 {
                    format!(" (and {} more such keyspaces)", stray.len() - 1)
                } else {
                    String::new()
                }
            );
            if !self.log.readonly {
                return Err(Error::Corrupt(format!(
                    "{}: {what}; `kura db check` reports the damage and `kura db repair` \
                     copies what it can name",
                    self.log.dir.display()
                )));
            }
            self.findings.lock().push(crate::store::Damaged {
                file: CKPT_NAME.into(),
                off: 0,
                len: 0,
                lost: stray.iter().map(|s| s.1).sum(),
                what,
            });
        }
        Ok(())
    }

    /// `Store::keyspace` on the database: keyspace `name`, made when missing (its catalog
    /// record written and synced).
    fn open_space(&self, name: &str, params: &str) -> Result<Arc<Inner>> {
        check_keyspace_name(name)?;
        Params::parse(params)?.allow_only("a keyspace of a hash database (.kh)", &[])?;
        self.log.check_open()?;
        if let Some(s) = self.spaces.id_of(name).and_then(|id| self.spaces.get(id)) {
            return Ok(s);
        }
        self.log.check_writable()?;
        // Under the maintenance lock: no checkpoint sees the catalog record without the
        // keyspace, nor the other way round.
        let _m = self.maint.lock();
        if let Some(s) = self.spaces.id_of(name).and_then(|id| self.spaces.get(id)) {
            return Ok(s);
        }
        let id = self
            .spaces
            .all()
            .last()
            .map_or(KS_FIRST, |s| (s.ks + 1).max(KS_FIRST));
        // A record naming a keyspace goes only into a segment of the format that has them:
        // an active segment an older build wrote is sealed, and a new one begun.
        for t in self.log.tails.iter() {
            let mut tail = t.0.lock();
            if tail.seg.id != 0 {
                let mut ver = [0u8; 4];
                tail.seg.file.read_at(&mut ver, 8)?;
                if u32::from_le_bytes(ver) < format::SEG_VERSION {
                    self.log.roll(&mut tail)?;
                }
            }
        }
        let cat = DiskHash::space_handle(self.space_or_new(KS_CATALOG));
        let mut value = Vec::new();
        put_varint(&mut value, id);
        cat.put(name.as_bytes(), &value)?;
        // Durable before any record of the keyspace is written, whatever the sync mode: the
        // keyspace's records may go to other lanes, which a crash may keep while it loses
        // this one's tail, and a record of a keyspace no catalog record names is damage.
        self.log.sync_now()?;
        let s = self.space_or_new(id);
        self.spaces.names.write().insert(name.to_string(), id);
        Ok(s)
    }

    /// Apply every operation, each in its keyspace (`at`: an index into `spaces`, which hold
    /// no keyspace twice), or none: one batch frame in one lane, its records naming their
    /// keyspaces. The shards of every keyspace written are held (by keyspace id, then shard)
    /// while the frame is appended and the indexes changed: no reader sees part of it.
    pub(super) fn batch_across(spaces: &[&Inner], ops: &[(usize, &BatchOp)]) -> Result<()> {
        let Some(first) = spaces.first() else {
            return Ok(());
        };
        let log = &first.log;
        log.check_writable()?;
        if ops.is_empty() {
            return Ok(());
        }
        check_batch(ops.iter().map(|(_, op)| *op), MAX_HEADER_LEN)?;
        let hashed: Vec<(usize, u32)> = ops
            .iter()
            .map(|(at, op)| spaces[*at].hash(op.key()))
            .collect();
        // Lock every shard involved: keyspaces by id, each's shards ascending (the order
        // every writer of several shards takes them in).
        let mut order: Vec<usize> = (0..spaces.len()).collect();
        order.sort_unstable_by_key(|&j| spaces[j].ks);
        let mut guards: Vec<Vec<(usize, Excl<'_>)>> =
            (0..spaces.len()).map(|_| Vec::new()).collect();
        for &j in &order {
            let mut ids: Vec<usize> = ops
                .iter()
                .zip(&hashed)
                .filter(|((at, _), _)| *at == j)
                .map(|(_, h)| h.0)
                .collect();
            ids.sort_unstable();
            ids.dedup();
            guards[j] = ids.iter().map(|&i| (i, spaces[j].excl(i))).collect();
        }
        // One frame holding every record; each takes the next seq of its shard.
        let mut body = Vec::new();
        let mut offs = Vec::with_capacity(ops.len()); // (start, len) in the body
        for (i, (at, op)) in ops.iter().enumerate() {
            let sp = spaces[*at];
            let g = guard_of(&mut guards[*at], hashed[i].0)?;
            let seq = g.next_seq(op.key());
            let start = body.len();
            match op {
                BatchOp::Put {
                    key,
                    value,
                    flags,
                    expires,
                } => {
                    let stored = sp.stored_form(value);
                    if *expires != 0 {
                        sp.expiring.fetch_add(1, Ordering::Relaxed);
                    }
                    let fields = PutFields {
                        flags: *flags,
                        expires: *expires,
                        seq,
                        compression: stored.code,
                        raw_len: stored.raw_len,
                        version: 0,
                        dup: 0,
                    };
                    format::encode_put_in(&mut body, sp.ks, key, &stored.bytes, &fields);
                }
                BatchOp::Remove { key } => {
                    format::encode_delete_in(&mut body, sp.ks, key, seq, 0);
                }
            }
            format::seal(&mut body[start..], format::seed(log.salt));
            offs.push((start, body.len() - start));
        }
        let mut hdr = Vec::with_capacity(16);
        format::encode_batch_header(&mut hdr, body.len(), ops.len());
        let (seg, off) = {
            let lane = log.my_lane();
            let mut tail = log.tails[lane].0.lock();
            let at = log.append(&mut tail, &[&hdr, &body], true)?;
            log.note_full(lane, &tail);
            at
        };
        let base = off + hdr.len() as u64;
        for (i, (at, op)) in ops.iter().enumerate() {
            let sp = spaces[*at];
            let (shard, tag) = hashed[i];
            let g = guard_of(&mut guards[*at], shard)?;
            let old = sp
                .find(g, tag, op.key(), Want::Slot)?
                .map(|f| (f.slot, f.len));
            let (start, len) = offs[i];
            match op {
                BatchOp::Put { .. } => sp.set_slot(g, tag, old, seg, base + start as u64, len),
                BatchOp::Remove { .. } => {
                    if let Some((o, len)) = old {
                        sp.remove_slot(g, o, len);
                    }
                }
            }
        }
        drop(guards);
        log.after_write()
    }
}

impl DiskHash {
    /// A handle on keyspace `inner` of an open database: dropping it leaves the database
    /// open; its `close` closes the database.
    pub(super) fn space_handle(inner: Arc<Inner>) -> DiskHash {
        DiskHash {
            inner,
            bg: Mutex::new(Vec::new()),
            stored: Mutex::new(None),
            created: false,
        }
    }

    /// Whether this is the handle of a keyspace (not of the database itself).
    pub(super) fn is_space(&self) -> bool {
        self.inner.ks != 0
    }

    /// `Store::keyspace`.
    pub(super) fn keyspace_of(&self, name: &str, params: &str) -> Result<Arc<dyn Store>> {
        if self.is_space() {
            return Err(Error::Unsupported("a keyspace of a keyspace"));
        }
        let s = self.inner.open_space(name, params)?;
        Ok(Arc::new(DiskHash::space_handle(s)))
    }

    /// `Store::write_across`.
    pub(super) fn write_across_of(&self, ops: &[(&str, BatchOp)]) -> Result<()> {
        self.inner.log.check_writable()?;
        if self.is_space() {
            return Err(Error::Unsupported(
                "a batch across keyspaces on a keyspace (call it on the database)",
            ));
        }
        let mut spaces: Vec<Arc<Inner>> = Vec::new();
        let mut at = Vec::with_capacity(ops.len());
        for (name, _) in ops {
            let s = if name.is_empty() {
                self.inner.clone()
            } else {
                self.inner
                    .spaces
                    .id_of(name)
                    .and_then(|id| self.inner.spaces.get(id))
                    .ok_or_else(|| {
                        Error::NotFound(format!("no keyspace `{name}` (Store::keyspace makes one)"))
                    })?
            };
            let i = match spaces.iter().position(|x| x.ks == s.ks) {
                Some(i) => i,
                None => {
                    spaces.push(s);
                    spaces.len() - 1
                }
            };
            at.push(i);
        }
        let refs: Vec<&Inner> = spaces.iter().map(|s| &**s).collect();
        let ops: Vec<(usize, &BatchOp)> = at.into_iter().zip(ops.iter().map(|(_, o)| o)).collect();
        Inner::batch_across(&refs, &ops)
    }

    /// Delete every record of this keyspace (or of the database itself, when it has
    /// keyspaces: the others keep theirs), shard by shard: a delete record for each, expired
    /// ones included, written under the shard's lock.
    pub(super) fn vanish_by_deletes(&self) -> Result<()> {
        let inner = &self.inner;
        inner.log.check_writable()?;
        let lane = inner.log.my_lane();
        for i in 0..NSHARDS {
            let mut g = inner.excl(i);
            let slots: Vec<Slot> = g.iter().collect();
            for slot in slots {
                let (key, len) = inner.with_record(slot.seg, slot.off as u64, |h, rec| {
                    (rec[h.key_off..h.key_off + h.klen].to_vec(), h.len)
                })?;
                let seq = g.next_seq(&key);
                inner.write_delete(lane, &key, seq, Acct::Caller)?;
                inner.remove_slot(&mut *g, slot, len);
            }
            inner.note_table(i, &g.table);
            drop(g);
            inner.log.after_write()?;
        }
        inner.expiring.store(0, Ordering::Relaxed);
        Ok(())
    }
}
