//! The `Store` of the B+ tree.

use super::cursor::TreeWalk;
use super::{DiskTree, Inner, CKPT_NAME, NODES_DIR};
use crate::error::{Error, Result};
use crate::log::segment::seg_file_name;
use crate::store::{
    is_expired, now_secs, BatchOp, CheckReport, Current, Cursor, Damaged, Decision, KeyRange, Kind,
    Meta, Record, RecordVisitor, Store,
};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Inner {
    fn after_read(&self) {
        if self.cached.load(Ordering::Relaxed) > self.cfg.cache as i64 {
            self.evict();
        }
    }
}

impl Store for DiskTree {
    fn get(&self, key: &[u8]) -> Result<Option<Record>> {
        let mut out = None;
        self.view(key, &mut |v, meta| {
            out = Some(Record {
                value: v.to_vec(),
                meta,
            })
        })?;
        Ok(out)
    }

    fn view(&self, key: &[u8], f: &mut dyn FnMut(&[u8], Meta)) -> Result<bool> {
        let inner = &self.inner;
        inner.wal.check_open()?;
        let shown = inner.lookup(key, |rec| match rec {
            Some((value, meta)) if !is_expired(meta.expires, now_secs()) => {
                f(value, meta);
                true
            }
            _ => false,
        })?;
        inner.after_read();
        Ok(shown)
    }

    fn accept<'v>(
        &self,
        key: &[u8],
        visitor: &mut dyn FnMut(Option<Current<'_>>) -> Decision<'v>,
    ) -> Result<Option<Meta>> {
        self.inner.accept_key(key, visitor)
    }

    fn write_batch(&self, ops: &[BatchOp]) -> Result<()> {
        self.inner.batch(ops)
    }

    fn keyspace(&self, name: &str, params: &str) -> Result<Arc<dyn Store>> {
        self.keyspace_of(name, params)
    }

    fn write_across(&self, ops: &[(&str, BatchOp)]) -> Result<()> {
        self.write_across_of(ops)
    }

    fn keyspaces(&self) -> Vec<(String, String)> {
        if self.inner.ks != 0 {
            return Vec::new();
        }
        let spaces = self.inner.others().into_iter();
        spaces
            .map(|s| (s.name.clone(), format!("cmp={}", s.cmp.name())))
            .collect()
    }

    fn allows_dups(&self) -> bool {
        true
    }

    fn put_dup(&self, key: &[u8], value: &[u8], front: bool) -> Result<()> {
        self.inner.put_dup(key, value, front)
    }

    fn get_all(&self, key: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        self.inner.values_of(key, &mut |v| out.push(v.to_vec()))?;
        self.inner.after_read();
        Ok(out)
    }

    fn remove_all(&self, key: &[u8]) -> Result<u64> {
        self.inner.remove_all(key)
    }

    fn value_count(&self, key: &[u8]) -> Result<u64> {
        let mut n = 0;
        self.inner.values_of(key, &mut |_| n += 1)?;
        self.inner.after_read();
        Ok(n)
    }

    fn cursor(&self) -> Result<Box<dyn Cursor + '_>> {
        self.inner.wal.check_open()?;
        Ok(Box::new(crate::cursor::KindCursor::new(
            self,
            TreeWalk {
                inner: &self.inner,
                last: None,
            },
        )))
    }

    fn count(&self) -> u64 {
        self.inner.records()
    }

    fn size(&self) -> u64 {
        let ckpt = self
            .inner
            .wal
            .vfs
            .open(&self.inner.wal.dir.join(CKPT_NAME), false)
            .and_then(|f| f.len())
            .unwrap_or(0);
        self.inner.wal.data_size() + self.inner.nodes.data_size() + ckpt
    }

    fn sync(&self) -> Result<()> {
        self.inner.wal.check_open()?;
        if self.inner.wal.readonly {
            return Ok(());
        }
        self.inner.wal.sync_now()
    }

    fn optimize(&self, params: &str) -> Result<()> {
        let inner = &self.inner;
        inner.wal.check_writable()?;
        let p = crate::config::Params::parse(params)?;
        p.allow_only("optimize of a disk tree (.kb)", &["compress"])?;
        if inner.ks != 0 && p.compression()?.is_some() {
            return Err(Error::InvalidParam(
                "`compress=` of a keyspace: the compression is the database's (optimize the \
                 database itself)"
                    .into(),
            ));
        }
        let _one = inner.ckpt_lock.lock();
        if let Some(c) = p.compression()?.filter(|&c| c != inner.compression()) {
            // Stored first (it holds for later opens), then every leaf is made dirty so the
            // checkpoint below (or an eviction before it) writes its image anew.
            let d = super::open::Stored {
                cmp: inner.cmp,
                compress: c,
            }
            .descriptor();
            crate::meta::write(&*inner.wal.vfs, &inner.wal.dir, &d)?;
            inner.compress.store(c as u8, Ordering::Relaxed);
            inner.dirty_all()?;
            for sp in inner.others() {
                sp.dirty_all()?;
            }
        }
        inner.checkpoint_locked(true)?;
        Ok(())
    }

    fn vanish(&self) -> Result<()> {
        self.inner.vanish()
    }

    fn copy_to(&self, dest: &Path) -> Result<()> {
        let inner = &self.inner;
        inner.wal.check_open()?;
        if inner.wal.readonly {
            return Err(Error::Unsupported(
                "a hot copy of a database opened read-only",
            ));
        }
        if inner.ks != 0 {
            // One keyspace: a new database of its records, in its order, record by record
            // (each as it is when the walk reaches it). The database's own copy holds every
            // keyspace, consistently.
            if dest.exists() {
                return Err(Error::InvalidParam(format!(
                    "{}: destination exists",
                    dest.display()
                )));
            }
            let params = crate::config::Params::parse(&format!("cmp={}", inner.cmp.name()))?;
            super::repair::copy_all(self, dest, &params, Arc::new(crate::io::OsVfs))?;
            return Ok(());
        }
        if dest.exists() && std::fs::read_dir(dest).map(|mut d| d.next().is_some())? {
            return Err(Error::InvalidParam(format!(
                "{}: destination exists and is not empty",
                dest.display()
            )));
        }
        match std::fs::create_dir(dest) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e.into()),
            _ => {}
        }
        std::fs::create_dir_all(dest.join(NODES_DIR))?;
        // A checkpoint, held (no segment is removed meanwhile), then its files and the
        // write-ahead log from its replay position to its end now.
        let _one = inner.ckpt_lock.lock();
        let c = inner.checkpoint_locked(false)?;
        // Every lane's end, all lanes' locks held (a cut of the lanes), and the segments then.
        let (wal_ends, wal_segs) = {
            let mut tails: Vec<_> = inner.wal.tails.iter().map(|t| t.0.lock()).collect();
            let mut ends = std::collections::HashMap::new();
            for tail in tails.iter_mut() {
                inner.wal.flush(tail)?;
                ends.insert(tail.seg.id, tail.seg.flushed());
            }
            (ends, inner.wal.segs.load_full())
        };
        let copy = |src: &crate::log::segment::Segment, to: &Path, len: u64| -> Result<()> {
            let out = std::fs::File::create(to)?;
            let mut buf = Vec::new();
            let mut at = 0u64;
            while at < len {
                let n = (len - at).min(4 << 20) as usize;
                src.read_file(at, &mut buf, n)?;
                std::os::unix::fs::FileExt::write_all_at(&out, &buf, at)?;
                at += n as u64;
            }
            out.sync_all()?;
            Ok(())
        };
        for s in inner.nodes.segs.load().segs.values() {
            if s.id > c.nodes_end.0 {
                continue;
            }
            let len = if s.id == c.nodes_end.0 {
                c.nodes_end.1
            } else {
                s.flushed()
            };
            copy(s, &dest.join(NODES_DIR).join(seg_file_name(s.id)), len)?;
        }
        for s in wal_segs.segs.values() {
            if s.id < c.wal.0 {
                continue;
            }
            let len = wal_ends.get(&s.id).copied().unwrap_or_else(|| s.flushed());
            copy(s, &dest.join(seg_file_name(s.id)), len)?;
        }
        std::fs::File::open(dest.join(NODES_DIR))?.sync_all()?;
        // Its checkpoint and descriptor as the database's own are written (atomically, synced).
        let os = crate::io::OsVfs;
        super::ckpt::write_ckpt(&os, dest, &c.encode())?;
        let d = super::open::Stored {
            cmp: inner.cmp,
            compress: inner.compression(),
        }
        .descriptor();
        crate::meta::write(&os, dest, &d)?;
        Ok(())
    }

    fn check(&self) -> Result<CheckReport> {
        self.inner.wal.check_open()?;
        let mut rep = self.inner.check()?;
        if self.inner.ks == 0 {
            // The database's check covers its keyspaces too (their records are not counted
            // in its own).
            for sp in self.inner.others() {
                let r = sp.check()?;
                rep.problems.extend(
                    r.problems
                        .into_iter()
                        .map(|p| format!("keyspace `{}`: {p}", sp.name)),
                );
                for d in r.damage {
                    if !rep.damage.contains(&d) {
                        rep.damage.push(d);
                    }
                }
            }
        }
        Ok(rep)
    }

    fn kind(&self) -> Kind {
        Kind::DiskTree
    }

    fn describe(&self) -> Vec<(String, String)> {
        let inner = &self.inner;
        let f = inner.forest.load();
        let (depth, index_bytes) = f.index.stats();
        let mut out = vec![
            ("path".into(), inner.wal.dir.display().to_string()),
            ("cmp".into(), inner.cmp.name().into()),
            ("compress".into(), inner.compression().name().into()),
            ("cache".into(), inner.cfg.cache.to_string()),
            ("leafsiz".into(), inner.cfg.leafsiz.to_string()),
            ("sync".into(), inner.wal.sync.describe()),
            ("ckptsiz".into(), inner.cfg.ckptsiz.to_string()),
            ("leaves".into(), f.allocated().to_string()),
            ("levels".into(), (depth + 1).to_string()),
            ("index_bytes".into(), index_bytes.to_string()),
            (
                "cached_bytes".into(),
                inner.cached.load(Ordering::Relaxed).max(0).to_string(),
            ),
        ];
        if inner.ks != 0 {
            out.insert(1, ("keyspace".into(), inner.name.clone()));
        } else if !inner.others().is_empty() {
            let names: Vec<String> = inner.others().iter().map(|s| s.name.clone()).collect();
            out.push(("keyspaces".into(), names.join(",")));
        }
        out
    }

    fn close(&self) -> Result<()> {
        if self.inner.ks != 0 {
            // A keyspace's close is its database's.
            return match self.inner.root() {
                Some(root) => close_db(&root),
                None => Ok(()),
            };
        }
        close_db(&self.inner)
    }
    fn damage_found(&self) -> Vec<Damaged> {
        self.inner.findings.lock().clone()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = &self.inner.counters;
        vec![
            ("leaf_loads", c.loads.load(Ordering::Relaxed)),
            (
                "leaf_image_lookups",
                c.image_lookups.load(Ordering::Relaxed),
            ),
            ("leaf_evictions", c.evictions.load(Ordering::Relaxed)),
            ("leaf_splits", c.splits.load(Ordering::Relaxed)),
            ("leaf_images", c.images.load(Ordering::Relaxed)),
            ("checkpoints", c.checkpoints.load(Ordering::Relaxed)),
            (
                "truncated_bytes",
                self.inner
                    .wal
                    .counters
                    .truncated_bytes
                    .load(Ordering::Relaxed),
            ),
            (
                "syncs",
                self.inner.wal.counters.syncs.load(Ordering::Relaxed),
            ),
            (
                "commit_waits",
                self.inner.wal.commit.waits.load(Ordering::Relaxed),
            ),
        ]
    }

    fn for_each_record(&self, f: &mut RecordVisitor<'_>) -> Result<u64> {
        self.inner.wal.check_open()?;
        let all = KeyRange {
            from: std::ops::Bound::Unbounded,
            to: std::ops::Bound::Unbounded,
            desc: false,
            max: usize::MAX,
        };
        self.inner.scan(&all, f)?;
        Ok(0)
    }

    fn for_each_in_range(&self, range: &KeyRange<'_>, f: &mut RecordVisitor<'_>) -> Result<u64> {
        self.inner.wal.check_open()?;
        self.inner.scan(range, f)
    }
}

/// Close the database keyspace 0 `inner` belongs to (see `Store::close`).
fn close_db(inner: &Inner) -> Result<()> {
    if inner.wal.closed.load(Ordering::Acquire) {
        return Ok(());
    }

    *inner.wal.stop.lock() = true;
    inner.wal.stop_cv.notify_all();
    inner.wal.fill_cv.notify_all();
    for h in inner.spaces.bg.lock().drain(..) {
        let _ = h.join();
    }
    let mut result = Ok(());
    if !inner.wal.readonly && !inner.wal.is_poisoned.load(Ordering::Acquire) {
        let r = (|| {
            if inner.since_ckpt.load(Ordering::Relaxed) > 0 {
                inner.checkpoint()?;
            }
            for log in [&inner.wal, &inner.nodes] {
                for t in log.tails.iter() {
                    let mut tail = t.0.lock();
                    log.mark(&mut tail);
                    log.trim_tail(&mut tail)?;
                }
            }
            inner.wal.sync_now()?;
            inner.nodes.sync_now()
        })();
        result = r;
    }
    inner.wal.closed.store(true, Ordering::Release);
    inner.nodes.closed.store(true, Ordering::Release);
    inner.spaces.list.write().clear();
    inner.lock.lock().take();
    result
}
