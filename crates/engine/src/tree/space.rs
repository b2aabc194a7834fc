//! Keyspaces of a tree database: each an ordered tree of its own (its order, leaves, index
//! and count) on the database's one write-ahead log, node log and checkpoint.
//!
//! A keyspace is made by a catalog record in the write-ahead log (a put in keyspace
//! [`KS_CATALOG`]: key its name, value its id as a varint and then its parameters, `cmp=…`),
//! written and applied under `ckpt_lock`, so a checkpoint lists either the keyspace (and then
//! its catalog record may go with the log before it) or none of it (and then its catalog
//! record lies past the checkpoint's replay position). Every record of a keyspace names its id;
//! replay sends it there.

use super::cmp::Cmp;
use super::forest::{Forest, Image};
use super::index::Key;
use super::{DiskTree, Inner};
use crate::counter::Counter;
use crate::error::{Error, Result};
use crate::log::format::{
    self, get_varint, put_varint, HeaderBuf, PutFields, KS_CATALOG, KS_FIRST,
};
use crate::store::{check_keyspace_name, check_sizes, BatchOp, Store};
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// The parameters a keyspace of a `.kb` accepts.
pub const SPACE_PARAMS: &[&str] = &["cmp"];

impl Inner {
    /// A new, empty keyspace `id` of this database (its leaves: `leaves`, or one empty leaf).
    pub(crate) fn new_space(
        &self,
        id: u64,
        name: &str,
        cmp: Cmp,
        leaves: Option<Vec<(Option<Key>, Image)>>,
    ) -> Inner {
        let forest = match leaves {
            Some(l) => Forest::from_images(l),
            None => Forest::new(),
        };
        Inner {
            wal: self.wal.clone(),
            nodes: self.nodes.clone(),
            cmp,
            compress: self.compress.clone(),
            cfg: self.cfg.clone(),
            forest: ArcSwap::new(Arc::new(forest)),
            cached: self.cached.clone(),
            count: Counter::new(),
            count_neg: Counter::new(),
            version: self.version.clone(),
            since_ckpt: self.since_ckpt.clone(),
            node_live: self.node_live.clone(),
            node_since: self.node_since.clone(),
            ckpt_asked: self.ckpt_asked.clone(),
            ckpt_lock: self.ckpt_lock.clone(),
            hand: AtomicU32::new(0),
            evicting: self.evicting.clone(),
            findings: self.findings.clone(),
            counters: self.counters.clone(),
            lock: Mutex::new(None),
            salvage: self.salvage,
            ks: id,
            name: name.to_string(),
            spaces: self.spaces.clone(),
        }
    }

    /// The keyspace `ks` (0: this database itself, when called on it).
    pub(crate) fn space(&self, ks: u64) -> Option<Arc<Inner>> {
        self.spaces.list.read().iter().find(|s| s.ks == ks).cloned()
    }

    /// The keyspace named `name`.
    pub(crate) fn space_named(&self, name: &str) -> Option<Arc<Inner>> {
        self.spaces
            .list
            .read()
            .iter()
            .find(|s| s.name == name)
            .cloned()
    }

    /// Keyspace 0 of this database (`None` while it opens or after it closed).
    pub(crate) fn root(&self) -> Option<Arc<Inner>> {
        self.spaces.root.get().and_then(|w| w.upgrade())
    }

    /// Every keyspace but 0, by id.
    pub(crate) fn others(&self) -> Vec<Arc<Inner>> {
        self.spaces.list.read().clone()
    }

    /// Add keyspace `id` named `name` (replay of its catalog record, or a checkpoint's list);
    /// a second catalog record of the same keyspace changes nothing.
    pub(crate) fn add_space(
        &self,
        id: u64,
        name: &str,
        cmp: Cmp,
        leaves: Option<Vec<(Option<Key>, Image)>>,
    ) -> Result<Arc<Inner>> {
        if let Some(s) = self.space(id) {
            if s.name != name || s.cmp != cmp {
                return Err(Error::Corrupt(format!(
                    "keyspace {id} is named both `{}` and `{name}`",
                    s.name
                )));
            }
            return Ok(s);
        }
        if self.space_named(name).is_some() || id < KS_FIRST {
            return Err(Error::Corrupt(format!(
                "keyspace `{name}` is given two ids (or an impossible one, {id})"
            )));
        }
        let s = Arc::new(self.new_space(id, name, cmp, leaves));
        let mut list = self.spaces.list.write();
        list.push(s.clone());
        list.sort_by_key(|s| s.ks);
        Ok(s)
    }

    /// Replay a catalog record: the keyspace it names exists from here on.
    pub(crate) fn replay_catalog(&self, h: &format::Header, rec: &[u8]) -> Result<()> {
        if h.typ != format::T_PUT {
            return Err(Error::Corrupt("a catalog record that is not a put".into()));
        }
        let (id, name, cmp) = parse_catalog(h, rec)?;
        self.version.fetch_max(h.fields.seq, Ordering::Relaxed);
        self.add_space(id, &name, cmp, None).map(|_| ())
    }

    /// `Store::keyspace` on the database: the keyspace `name`, made (its catalog record
    /// written, as durable as the sync mode makes writes) when missing.
    pub(crate) fn open_space(&self, name: &str, params: &str) -> Result<Arc<Inner>> {
        check_keyspace_name(name)?;
        let p = crate::config::Params::parse(params)?;
        p.allow_only("a keyspace of a disk tree (.kb)", SPACE_PARAMS)?;
        let want = p
            .items()
            .iter()
            .find(|(k, _)| k == "cmp")
            .map(|(_, v)| Cmp::parse(v))
            .transpose()?;
        let check = |s: Arc<Inner>| match want {
            Some(c) if c != s.cmp => Err(Error::InvalidParam(format!(
                "`cmp={}`: keyspace `{name}` orders its keys by `{}`, fixed at creation",
                c.name(),
                s.cmp.name()
            ))),
            _ => Ok(s),
        };
        self.wal.check_open()?;
        if let Some(s) = self.space_named(name) {
            return check(s);
        }
        self.wal.check_writable()?;
        let cmp = want.unwrap_or(Cmp::Lex);
        let s = {
            let _ck = self.ckpt_lock.lock();
            if let Some(s) = self.space_named(name) {
                return check(s);
            }
            let id = self.others().last().map_or(KS_FIRST, |s| s.ks + 1);
            let mut value = Vec::new();
            put_varint(&mut value, id);
            value.extend_from_slice(format!("cmp={}", cmp.name()).as_bytes());
            check_sizes(name.as_bytes(), value.len())?;
            {
                let lane = self.wal.my_lane();
                let mut tail = self.wal.tails[lane].0.lock();
                let seq = self.version.fetch_add(1, Ordering::Relaxed) + 1;
                let f = PutFields {
                    seq,
                    ..PutFields::default()
                };
                let h = HeaderBuf::put_in(KS_CATALOG, name.len(), value.len(), &f);
                self.wal
                    .append(&mut tail, &[h.as_slice(), name.as_bytes(), &value], true)?;
                self.wal.note_full(lane, &tail);
                self.note_wal_bytes((h.as_slice().len() + name.len() + value.len()) as u64);
            }
            self.add_space(id, name, cmp, None)?
        };
        self.wal.after_write()?;
        Ok(s)
    }
}

/// The keyspace a catalog record makes: (id, name, order).
fn parse_catalog(h: &format::Header, rec: &[u8]) -> Result<(u64, String, Cmp)> {
    let bad = |why: &str| Error::Corrupt(format!("a catalog record {why}"));
    let name = rec
        .get(h.key_off..h.key_off + h.klen)
        .and_then(|n| std::str::from_utf8(n).ok())
        .filter(|n| check_keyspace_name(n).is_ok())
        .ok_or_else(|| bad("with a bad keyspace name"))?;
    let value = rec
        .get(h.value_off()..h.len)
        .ok_or_else(|| bad("shorter than its value"))?;
    let mut pos = 0;
    let id = get_varint(value, &mut pos).ok_or_else(|| bad("without an id"))?;
    let params = std::str::from_utf8(&value[pos..]).map_err(|_| bad("with bad parameters"))?;
    let cmp = params
        .strip_prefix("cmp=")
        .and_then(|c| Cmp::parse(c).ok())
        .ok_or_else(|| bad(&format!("with unknown parameters `{params}`")))?;
    Ok((id, name.to_string(), cmp))
}

impl DiskTree {
    /// A handle on keyspace `inner` of the same database.
    pub(crate) fn space_handle(inner: Arc<Inner>) -> DiskTree {
        DiskTree {
            inner,
            created: false,
        }
    }

    /// `Store::keyspace` (see there).
    pub(crate) fn keyspace_of(&self, name: &str, params: &str) -> Result<Arc<dyn Store>> {
        if self.inner.ks != 0 {
            return Err(Error::Unsupported("a keyspace of a keyspace"));
        }
        let s = self.inner.open_space(name, params)?;
        Ok(Arc::new(DiskTree::space_handle(s)))
    }

    /// `Store::write_across` (see there).
    pub(crate) fn write_across_of(&self, ops: &[(&str, BatchOp)]) -> Result<()> {
        let inner = &self.inner;
        inner.wal.check_writable()?;
        if inner.ks != 0 {
            return Err(Error::Unsupported(
                "a batch across keyspaces on a keyspace (call it on the database)",
            ));
        }
        let mut spaces: Vec<Arc<Inner>> = Vec::new();
        let mut at = Vec::with_capacity(ops.len());
        let root = self.inner.clone();
        for (name, _) in ops {
            let s = if name.is_empty() {
                root.clone()
            } else {
                inner.space_named(name).ok_or_else(|| {
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
}
