//! Opening a tree database: the directory, the descriptor, the lock, the checkpoint, and the
//! replay of the write-ahead log after it (docs/architecture/kinds.md, "B+ tree", "Recovery").
//!
//! - The checkpoint gives the leaves (their images are read when first used) and where replay
//!   starts; images written after it (the node log past its recorded end) belong to no
//!   checkpoint and are cut off by a writable open.
//! - The write-ahead log is replayed from there by the log's driver (`log::replay`, the hash's
//!   too) under [`Rules::TREE`]: scanned and classified (damage, torn tail, zeros), and only
//!   then replayed: a writable open that finds damage refuses before changing anything; a
//!   read-only one serves every record that verifies and reports the rest. A damaged batch is
//!   lost whole; a clear empties the keyspace it names, in its place in the order.
//! - A write-ahead segment ending torn before its lane's last one ends that lane's replay: the
//!   records after it were never synced (every sync syncs the segments in order), and are
//!   dropped with it.
//! - The lanes' records are merged by seq when more than one lane holds any.

use super::ckpt::Checkpoint;
use super::cmp::Cmp;
use super::forest::{Forest, Image};
use super::write::Change;
use super::{
    DiskTree, Inner, TreeConfig, TreeCounters, CKPT_NAME, CKPT_TMP, KIND, NODES_DIR, WAL_LANES,
};
use crate::config::{Compression, OpenMode, Params};
use crate::counter::Counter;
use crate::error::{Error, Result};
use crate::io::Vfs;
use crate::log::checkpoint::Places;
use crate::log::format::{self, SEG_HEADER_LEN, T_BATCH, T_CLEAR, T_DELETE, T_PUT};
use crate::log::recovery::{probe_segments, settle_probes, Finding, SegBytes};
use crate::log::replay::{self, Replayer, Rules};
use crate::log::scan;
use crate::log::segment::{parse_seg_file_name, SegTable, Segment};
use crate::log::{for_each_sub, Log, LogConfig};
use crate::meta::{self, Descriptor, DirState};
use crate::store::{Damaged, Meta};
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Whether `name` is one of the files a tree database keeps in its directory.
pub fn own_file(name: &str) -> bool {
    matches!(
        name,
        "LOCK" | CKPT_NAME | CKPT_TMP | NODES_DIR | meta::META_NAME | meta::META_TMP
    ) || parse_seg_file_name(name).is_some()
}

/// What a tree stores about itself (`kura.meta`, kind `tree`): its key order (fixed at
/// creation) and the compression of its leaf images (chosen at creation or by `optimize`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stored {
    pub cmp: Cmp,
    pub compress: Compression,
}

impl Stored {
    pub fn from_descriptor(d: &Descriptor, dir: &Path) -> Result<Stored> {
        let bad = |what: String| {
            Error::Corrupt(format!("{}: {what}", dir.join(meta::META_NAME).display()))
        };
        if d.kind != KIND {
            return Err(Error::NotADatabase(format!(
                "{} is a Kura database of kind `{}`, not a tree database",
                dir.display(),
                d.kind
            )));
        }
        let mut s = Stored {
            cmp: Cmp::Lex,
            compress: Compression::None,
        };
        for (k, v) in &d.params {
            match k.as_str() {
                "cmp" => s.cmp = Cmp::parse(v).map_err(|_| bad(format!("bad cmp `{v}`")))?,
                "compress" => {
                    s.compress =
                        Compression::parse(v).map_err(|_| bad(format!("bad compress `{v}`")))?
                }
                other => return Err(bad(format!("unknown stored parameter `{other}`"))),
            }
        }
        Ok(s)
    }

    pub fn descriptor(&self) -> Descriptor {
        let mut d = Descriptor::new(KIND);
        d.set("cmp", self.cmp.name());
        d.set("compress", self.compress.name());
        d
    }
}

/// Look at `path` and make it ready to be locked and opened under `mode`: whether this open
/// creates the database.
fn prepare(vfs: &dyn Vfs, path: &Path, mode: OpenMode) -> Result<bool> {
    let shown = path.display();
    match meta::inspect(vfs, path, &own_file)? {
        DirState::Missing if mode == OpenMode::Create => match vfs.create_dir(path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => prepare(vfs, path, mode),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let parent = path
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .unwrap_or(Path::new("."));
                Err(Error::NotFound(format!(
                    "cannot create {shown}: directory {} does not exist",
                    parent.display()
                )))
            }
            Err(e) => Err(Error::Io(std::io::Error::new(
                e.kind(),
                format!("cannot create {shown}: {e}"),
            ))),
        },
        DirState::Missing => Err(Error::NotFound(format!("no database at {shown}"))),
        DirState::Empty if mode == OpenMode::Create => Ok(true),
        DirState::Empty => Err(Error::NotFound(format!(
            "no database at {shown} (an empty directory)"
        ))),
        DirState::File => Err(Error::NotADatabase(format!(
            "{shown} exists and is a file, not a Kura tree database (a .kb database is a \
             directory)"
        ))),
        DirState::Foreign(names) => Err(Error::NotADatabase(format!(
            "{shown} is a directory that is not a Kura database: it holds {}… and no {}; it is \
             left alone (choose another path, or empty the directory)",
            names.join(", "),
            meta::META_NAME
        ))),
        // A creation cut short (killed after taking the lock, before the descriptor was
        // written) leaves nothing but the lock: nothing was stored, so it is made again.
        DirState::Unmarked if only_lock(vfs, path)? => match mode {
            OpenMode::Create => Ok(true),
            _ => Err(Error::NotFound(format!(
                "no database at {shown} (its creation was cut short: it holds only its lock)"
            ))),
        },
        // Tree databases always had a descriptor: files without one are not one.
        DirState::Unmarked => Err(Error::NotADatabase(format!(
            "{shown} holds database files but no {}",
            meta::META_NAME
        ))),
        DirState::Database(_) => Ok(false),
        DirState::Damaged(m) => Err(Error::Corrupt(m)),
    }
}

/// Whether `path` holds nothing but a lock file (and a descriptor's temporary file): what a
/// creation killed before its descriptor was written leaves.
fn only_lock(vfs: &dyn Vfs, path: &Path) -> Result<bool> {
    Ok(vfs
        .list(path)?
        .iter()
        .all(|n| n == "LOCK" || n == meta::META_TMP))
}

impl DiskTree {
    /// Open (creating when missing) the database directory at `path` on the real file system.
    pub fn open(path: &Path, params: &Params) -> Result<DiskTree> {
        Self::open_mode(path, params, Arc::new(crate::io::OsVfs), OpenMode::Create)
    }

    /// Open on any file system under `mode`.
    pub fn open_mode(
        path: &Path,
        params: &Params,
        vfs: Arc<dyn Vfs>,
        mode: OpenMode,
    ) -> Result<DiskTree> {
        Self::open_full(path, params, vfs, mode, false, None)
    }

    /// `open_mode`; `salvage` (read-only only): go around damage instead of failing on it (a
    /// damaged checkpoint: the leaves are rebuilt from every image in the node log, newest
    /// version of each key; a damaged image: its records are lost, and reported); `held`: the
    /// caller holds the database's lock, and this is what to keep in its place.
    pub(crate) fn open_full(
        path: &Path,
        params: &Params,
        vfs: Arc<dyn Vfs>,
        mode: OpenMode,
        salvage: bool,
        held: Option<Box<dyn std::any::Any + Send + Sync>>,
    ) -> Result<DiskTree> {
        let readonly = mode == OpenMode::ReadOnly;
        let salvage = salvage && readonly;
        let cfg = TreeConfig::from_params(params)?;
        let want_cmp = params
            .items()
            .iter()
            .find(|(k, _)| k == "cmp")
            .map(|(_, v)| Cmp::parse(v))
            .transpose()?;
        let want_compress = params.compression()?;
        let created = prepare(&*vfs, path, mode)?;
        let lock: Box<dyn std::any::Any + Send + Sync> = match held {
            Some(l) => l,
            None => Box::new(crate::lock::take(&*vfs, path)?),
        };
        let had = match meta::read(&*vfs, path)? {
            Some(d) => Some(Stored::from_descriptor(&d, path)?),
            None => None,
        };
        if let (Some(h), Some(w)) = (had, want_cmp) {
            if h.cmp != w {
                return Err(Error::InvalidParam(format!(
                    "`cmp={}`: this database orders its keys by `{}`, fixed at creation",
                    w.name(),
                    h.cmp.name()
                )));
            }
        }
        let stored = match had {
            Some(h) => h,
            None if readonly => {
                return Err(Error::NotFound(format!(
                    "no database at {}",
                    path.display()
                )))
            }
            None => {
                let s = Stored {
                    cmp: want_cmp.unwrap_or(Cmp::Lex),
                    compress: want_compress.unwrap_or(Compression::None),
                };
                meta::write(&*vfs, path, &s.descriptor())?;
                s
            }
        };
        let compress = want_compress.unwrap_or(stored.compress);
        let nodes_dir = path.join(NODES_DIR);
        if !readonly {
            vfs.create_dir_all(&nodes_dir)?;
        }
        let mut wal_probes = probe_segments(&*vfs, path)?;
        let mut node_probes = if vfs.exists(&nodes_dir) {
            probe_segments(&*vfs, &nodes_dir)?
        } else {
            Vec::new()
        };
        let mut found: Vec<Finding> = Vec::new();
        let ckpt = match read_ckpt(&*vfs, path, stored.cmp) {
            Err(Error::Corrupt(why)) if salvage => {
                found.push(Finding {
                    file: CKPT_NAME.into(),
                    off: 0,
                    len: vfs
                        .open(&path.join(CKPT_NAME), false)
                        .and_then(|f| f.len())
                        .unwrap_or(0),
                    lost: 0,
                    what: format!(
                        "the checkpoint is damaged ({why}): the leaves are rebuilt from every \
                         image in the node log (a record removed before the last checkpoint \
                         may come back)"
                    ),
                });
                Err(())
            }
            r => Ok(r?),
        };
        let from_images = ckpt.is_err();
        let ckpt = ckpt.unwrap_or(None);
        let salt = match &ckpt {
            Some(c) => c.salt,
            None => settle_probes(&mut wal_probes)
                .or_else(|| settle_probes(&mut node_probes))
                .map(|s| s.0)
                .unwrap_or_else(crate::hash::random_salt),
        };
        let mut tables = [SegTable::default(), SegTable::default()];
        for (t, probes, dir) in [(0, wal_probes, path), (1, node_probes, nodes_dir.as_path())] {
            for p in probes {
                match &p.header {
                    Ok(info) if info.salt == salt => {
                        // A write-ahead segment stays in the lane it was written in.
                        let lane = if t == 0 {
                            usize::from(info.lane) % WAL_LANES
                        } else {
                            0
                        };
                        let seg = Segment::new(p.id, lane, salt, p.path, p.file, p.len);
                        tables[t].segs.insert(p.id, Arc::new(seg));
                    }
                    Ok(_) | Err(_) if p.len < SEG_HEADER_LEN as u64 && !readonly => {
                        // Being created at a crash.
                        vfs.remove(&p.path)?;
                    }
                    other => found.push(Finding {
                        file: format!(
                            "{}{}",
                            if t == 1 { "nodes/" } else { "" },
                            crate::log::segment::seg_file_name(p.id)
                        ),
                        off: 0,
                        len: p.len,
                        lost: 1,
                        what: match other {
                            Err(why) => format!("the segment header is unusable ({why})"),
                            Ok(_) => "the segment belongs to another database".into(),
                        },
                    }),
                }
            }
            let _ = dir;
        }
        let [wal_table, node_table] = tables;
        let log_cfg = |dir_sync, lanes| LogConfig {
            sync: dir_sync,
            segsiz: cfg.segsiz,
            bufsiz: cfg.bufsiz,
            msiz: 0,
            lanes,
        };
        let inner = Inner {
            wal: Arc::new(Log::new(
                path,
                vfs.clone(),
                readonly,
                log_cfg(cfg.sync, WAL_LANES),
                salt,
                wal_table,
            )),
            nodes: Arc::new(Log::new(
                &nodes_dir,
                vfs.clone(),
                readonly,
                log_cfg(crate::config::SyncMode::None, 1),
                salt,
                node_table,
            )),
            cmp: stored.cmp,
            compress: Arc::new(std::sync::atomic::AtomicU8::new(compress as u8)),
            cfg,
            forest: ArcSwap::new(Arc::new(Forest::new())),
            cached: Arc::new(AtomicI64::new(0)),
            count: Counter::new(),
            count_neg: Counter::new(),
            version: Arc::new(AtomicU64::new(0)),
            since_ckpt: Arc::new(AtomicU64::new(0)),
            node_live: Arc::new(std::sync::atomic::AtomicI64::new(0)),
            node_since: Arc::new(AtomicU64::new(0)),
            ckpt_asked: Arc::new(AtomicBool::new(false)),
            ckpt_lock: Arc::new(Mutex::new(())),
            hand: AtomicU32::new(0),
            evicting: Arc::new(Mutex::new(())),
            findings: Arc::new(Mutex::new(Vec::new())),
            counters: Arc::new(TreeCounters::default()),
            lock: Mutex::new(Some(lock)),
            salvage,
            ks: 0,
            name: String::new(),
            spaces: Arc::new(super::Spaces::default()),
        };
        if from_images {
            let skipped = inner.rebuild_from_images()?;
            if skipped > 0 {
                found.push(Finding {
                    file: NODES_DIR.into(),
                    off: 0,
                    len: 0,
                    lost: skipped,
                    what: format!(
                        "{skipped} leaf images of keyspaces: with the checkpoint that named \
                         them damaged, only the database's own records are rebuilt"
                    ),
                });
            }
        }
        let recovered = inner.recover(ckpt, from_images, found);
        if let Err(e) = recovered {
            inner.spaces.list.write().clear();
            return Err(e);
        }
        let inner = Arc::new(inner);
        let _ = inner.spaces.root.set(Arc::downgrade(&inner));
        let db = DiskTree {
            inner: inner.clone(),
            created,
        };
        if !readonly {
            type Job = fn(Arc<Inner>);
            let mut threads: Vec<(&str, Job)> = vec![("kura-kb-bg", Inner::background)];
            if db.inner.wal.sync == crate::config::SyncMode::Always {
                threads.push(("kura-kb-fill", |w| w.wal.fill_loop()));
            }
            for (name, run) in threads {
                let w = inner.clone();
                let h = std::thread::Builder::new()
                    .name(name.into())
                    .spawn(move || run(w))
                    .map_err(Error::Io)?;
                db.inner.spaces.bg.lock().push(h);
            }
        }
        Ok(db)
    }
}

/// The checkpoint of `dir`, read and verified by `log::checkpoint`: `None` when there is
/// none; damage (too short, its checksum, what it says) is `Error::Corrupt`. A file that is
/// there but cannot be opened is an error, never taken for no checkpoint.
pub(crate) fn read_ckpt(vfs: &dyn Vfs, dir: &Path, cmp: Cmp) -> Result<Option<Checkpoint>> {
    use crate::log::checkpoint::{read_verified_with, Read};
    let path = dir.join(CKPT_NAME);
    let corrupt = |why: String| Error::Corrupt(format!("{}: {why}", path.display()));
    match read_verified_with(vfs, dir, CKPT_NAME, super::ckpt::MIN_LEN, true, |body| {
        Checkpoint::decode(body, cmp)
    }) {
        Read::Missing => match vfs.open(&path, false) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
            Ok(_) => Err(corrupt("it could not be opened".into())),
        },
        Read::Damaged(why) => Err(corrupt(why)),
        Read::Verified(c) => c.map(Some).map_err(corrupt),
    }
}

impl Inner {
    /// Salvage of a database whose checkpoint is damaged, from every leaf image in the node
    /// log that verifies. An image tells the state of every key of its span (its leaf's key
    /// range when it was written) as of that moment: each key takes its values from the
    /// newest image whose span covers it, so a key removed before that image stays removed
    /// even though older images still hold it.
    /// Returns how many images of keyspaces other than 0 it left out (their names and
    /// orders were in the damaged checkpoint).
    fn rebuild_from_images(&self) -> Result<u64> {
        use std::collections::BinaryHeap;
        struct Span {
            seq: u64,
            low: Option<Vec<u8>>,
            high: Option<Vec<u8>>,
        }
        let mut spans: Vec<Span> = Vec::new();
        /// key, dup, value, meta, image
        type Salvaged = (Vec<u8>, u64, Vec<u8>, Meta, usize);
        let mut entries: Vec<Salvaged> = Vec::new();
        let mut skipped_spaces = 0u64;
        let table = self.nodes.segs.load_full();
        for seg in table.segs.values() {
            let end = seg.flushed();
            let mut bytes = SegBytes {
                log: &self.nodes,
                seg,
            };
            scan::scan(
                &mut bytes,
                seg.seed,
                SEG_HEADER_LEN as u64,
                end,
                |_, h, rec, _| {
                    if h.typ != T_PUT {
                        return Ok(true);
                    }
                    if h.keyspace != 0 {
                        // The keyspaces' names and orders were in the checkpoint.
                        skipped_spaces += 1;
                        return Ok(true);
                    }
                    let Ok(img) = super::decode_image_record(rec, seg.seed) else {
                        return Ok(true);
                    };
                    let Ok((leaf, (low, high))) =
                        super::leaf::Leaf::decode_image_span(&img, Some(self.cmp))
                    else {
                        return Ok(true);
                    };
                    let at = spans.len();
                    spans.push(Span {
                        seq: h.fields.seq,
                        low,
                        high,
                    });
                    for i in 0..leaf.len() {
                        let e = leaf.entry(i);
                        entries.push((e.key.to_vec(), e.dup, e.value.to_vec(), e.meta, at));
                    }
                    Ok(true)
                },
            )?;
        }
        let cmp = self.cmp;
        entries.sort_by(|a, b| {
            cmp.cmp(&a.0, &b.0)
                .then(super::leaf::dup_order(a.1).cmp(&super::leaf::dup_order(b.1)))
        });
        let mut by_first: Vec<usize> = (0..spans.len()).collect();
        by_first.sort_by(|&a, &b| match (&spans[a].low, &spans[b].low) {
            (None, None) => std::cmp::Ordering::Equal,
            (None, Some(_)) => std::cmp::Ordering::Less,
            (Some(_), None) => std::cmp::Ordering::Greater,
            (Some(x), Some(y)) => cmp.cmp(x, y),
        });
        let mut next_span = 0;
        // The spans begun so far, newest on top (ties: the later image).
        let mut open: BinaryHeap<(u64, usize)> = BinaryHeap::new();
        let mut i = 0;
        while i < entries.len() {
            let key = entries[i].0.clone();
            let mut j = i;
            while j < entries.len() && entries[j].0 == key {
                j += 1;
            }
            while next_span < by_first.len()
                && spans[by_first[next_span]]
                    .low
                    .as_ref()
                    .is_none_or(|l| cmp.cmp(l, &key).is_le())
            {
                let s = by_first[next_span];
                open.push((spans[s].seq, s));
                next_span += 1;
            }
            while let Some(&(_, s)) = open.peek() {
                if spans[s]
                    .high
                    .as_ref()
                    .is_some_and(|h| cmp.cmp(h, &key).is_le())
                {
                    open.pop();
                } else {
                    break;
                }
            }
            // The key's own image covers it, so a span is open.
            let Some(&(_, newest)) = open.peek() else {
                i = j;
                continue;
            };
            for (k, dup, v, meta, img) in &entries[i..j] {
                if *img == newest {
                    self.replay(
                        k,
                        Change::Put {
                            value: v,
                            meta: *meta,
                            dup: *dup,
                        },
                    )?;
                }
            }
            i = j;
        }
        Ok(skipped_spaces)
    }

    fn recover(
        &self,
        ckpt: Option<Checkpoint>,
        from_images: bool,
        mut found: Vec<Finding>,
    ) -> Result<()> {
        let readonly = self.wal.readonly;
        // The node log: what the checkpoint points at must be there; what is after its end
        // belongs to no checkpoint.
        let nodes = self.nodes.segs.load_full();
        if let Some(c) = &ckpt {
            for (_, img) in c.all_leaves() {
                let ok = nodes.get(img.seg()).is_some_and(|s| {
                    img.off() + u64::from(img.len) <= s.flushed()
                        && img.off() >= SEG_HEADER_LEN as u64
                });
                if !ok {
                    found.push(Finding {
                        file: format!("nodes/{}", crate::log::segment::seg_file_name(img.seg())),
                        off: img.off(),
                        len: u64::from(img.len),
                        lost: 1,
                        what: "a leaf image the checkpoint lists is missing (its file is gone \
                               or shorter)"
                            .into(),
                    });
                }
            }
        }
        let (end_seg, end_off) = match &ckpt {
            Some(c) => c.nodes_end,
            // No checkpoint: no image is anyone's (unless rebuilt from them: all kept).
            None if from_images => (u32::MAX, u64::MAX),
            None => (0, 0),
        };
        let mut cut_nodes = Vec::new();
        for s in nodes.segs.values() {
            if s.id > end_seg {
                cut_nodes.push(s.id);
            } else if s.id == end_seg && s.flushed() > end_off {
                if !readonly {
                    s.file.set_len(end_off)?;
                }
                s.flushed.store(end_off, Ordering::Release);
            }
        }
        // The write-ahead log from the replay position, through the log's driver: each lane
        // up to its first torn end, a damaged batch lost whole, clears applied in order, and
        // when more than one lane holds records, merged by seq (a batch by its first
        // record's), which orders every key's records as they were made.
        let rseg = ckpt.as_ref().map_or(0, |c| c.wal.0);
        let wal = self.wal.segs.load_full();
        if ckpt.is_some() && rseg != 0 && wal.get(rseg).is_none() {
            found.push(Finding {
                file: crate::log::segment::seg_file_name(rseg),
                off: 0,
                len: 0,
                lost: 1,
                what: "the write-ahead segment where replay starts is missing".into(),
            });
        }
        // Every lane starts at the one position (the first of the segments the checkpoint
        // rolled to), the durable end of what was before it.
        let places = ckpt.as_ref().map(|c| Places {
            replay: vec![c.wal; WAL_LANES],
            segs: Vec::new(),
        });
        let done = replay::replay(
            &self.wal,
            Vec::new(),
            places.as_ref(),
            places.as_ref().map(|p| &p.replay[..]),
            found,
            self.cfg.segsiz as usize,
            &mut Replay {
                inner: self,
                ckpt: ckpt.as_ref(),
                cut_nodes: &cut_nodes,
            },
        )?;
        if done.applied > 0 {
            // Saved at the next checkpoint (at the latest, at close).
            self.since_ckpt.store(1, Ordering::Relaxed);
        }
        // Segments before the replay position (a crash kept them after a checkpoint) are
        // never written again: their records are not replayed.
        let mut gone = done.dropped;
        gone.extend(wal.segs.keys().copied().filter(|&id| id < rseg));
        self.activate(&self.wal, &gone)
    }

    /// Give each of a log's lanes its active segment (its last one; a lane with none begins
    /// one when first written) and seal the others.
    fn activate(&self, log: &Log, gone: &[u32]) -> Result<()> {
        let table = log.segs.load_full();
        let mut last: Vec<Option<Arc<Segment>>> = vec![None; log.lanes];
        for s in table.segs.values().filter(|s| !gone.contains(&s.id)) {
            last[s.lane % log.lanes] = Some(s.clone());
        }
        for s in table.segs.values() {
            if !last.iter().flatten().any(|l| l.id == s.id) {
                s.sealed.store(true, Ordering::Release);
            }
        }
        for (lane, active) in last.into_iter().enumerate() {
            let Some(active) = active else { continue };
            if !log.readonly {
                let mut tail = log.tails[lane].0.lock();
                tail.set_seg(active.clone());
                tail.marked = log.ends_with_marker(&active)?;
                // A record naming a keyspace goes only into a segment of the format that has
                // them: one an older build wrote is sealed, and a new one begun.
                let mut ver = [0u8; 4];
                active.file.read_at(&mut ver, 8)?;
                if u32::from_le_bytes(ver) < format::SEG_VERSION {
                    log.roll(&mut tail)?;
                }
            }
        }
        Ok(())
    }

    /// Apply one verified write-ahead record (on keyspace 0, which sends each record to its
    /// keyspace): a clear empties the keyspace it names.
    fn replay_record(&self, h: &format::Header, rec: &[u8]) -> Result<()> {
        match h.typ {
            T_PUT | T_DELETE => self.replay_routed(h, rec),
            T_BATCH => for_each_sub(rec, h, |_, sub, r| self.replay_routed(sub, r)),
            T_CLEAR => {
                match h.keyspace {
                    0 => self.replay_clear(),
                    ks => {
                        if let Some(s) = self.space_or_damage(ks)? {
                            s.replay_clear();
                        }
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Replay a put or delete in the keyspace it names.
    fn replay_routed(&self, h: &format::Header, rec: &[u8]) -> Result<()> {
        match h.keyspace {
            0 => self.replay_one(h, rec),
            format::KS_CATALOG => self.replay_catalog(h, rec),
            ks => match self.space_or_damage(ks)? {
                Some(s) => s.replay_one(h, rec),
                None => Ok(()),
            },
        }
    }

    /// Keyspace `ks`, which a record names: one no catalog record made is damage. A salvage
    /// (whose checkpoint, naming the keyspaces, may be what is damaged) leaves such records
    /// out and reports them.
    fn space_or_damage(&self, ks: u64) -> Result<Option<Arc<Inner>>> {
        if let Some(s) = self.space(ks) {
            return Ok(Some(s));
        }
        let what = format!("a record of keyspace {ks}, which the database never made");
        if self.salvage {
            let mut found = self.findings.lock();
            if !found.iter().any(|f| f.what == what) {
                found.push(Damaged {
                    file: String::new(),
                    off: 0,
                    len: 0,
                    lost: 1,
                    what: what.clone(),
                });
            }
            return Ok(None);
        }
        Err(Error::Corrupt(format!(
            "{}: {what}",
            self.wal.dir.display()
        )))
    }

    fn replay_one(&self, h: &format::Header, rec: &[u8]) -> Result<()> {
        let key = rec
            .get(h.key_off..h.key_off + h.klen)
            .ok_or_else(|| Error::Corrupt("a log record shorter than its key".into()))?;
        if h.typ == T_DELETE {
            return self.replay(key, Change::Remove { dup: h.fields.dup });
        }
        let stored = rec
            .get(h.value_off()..h.len)
            .ok_or_else(|| Error::Corrupt("a log record shorter than its value".into()))?;
        let codec = format::codec(h)?;
        let owned;
        let value = if codec == Compression::None {
            stored
        } else {
            owned = crate::compress::decompress(codec, stored, h.fields.raw_len as usize)?;
            &owned[..]
        };
        let meta = Meta {
            flags: h.fields.flags,
            expires: h.fields.expires,
            version: h.fields.version(),
        };
        self.version.fetch_max(h.fields.seq, Ordering::Relaxed);
        self.replay(
            key,
            Change::Put {
                value,
                meta,
                dup: h.fields.dup,
            },
        )
    }
}

/// Recovery's view of the write-ahead records (`log::replay`, [`Rules::TREE`]).
struct Replay<'a> {
    inner: &'a Inner,
    ckpt: Option<&'a Checkpoint>,
    /// The node segments after the checkpoint's end: no checkpoint's.
    cut_nodes: &'a [u32],
}

impl Replayer for Replay<'_> {
    const RULES: Rules = Rules::TREE;

    /// The open goes on: the findings kept (a salvage adds to them while replaying), the node
    /// log cut where the checkpoint ended, and the checkpoint's leaves taken.
    fn begin(&mut self, found: &[Finding]) -> Result<()> {
        let inner = self.inner;
        *inner.findings.lock() = found.to_vec();
        if !inner.nodes.readonly {
            inner.nodes.remove_segments(self.cut_nodes)?;
        }
        inner.activate(&inner.nodes, self.cut_nodes)?;
        if let Some(c) = self.ckpt {
            inner.version.store(c.version, Ordering::Relaxed);
            inner
                .count
                .add(c.leaves.iter().map(|l| u64::from(l.1.count)).sum());
            let leaves: Vec<(Option<super::index::Key>, Image)> = c.leaves.clone();
            let f = Forest::from_images(leaves);
            for (_, img) in c.all_leaves() {
                inner.nodes.add_live(img.seg(), i64::from(img.len));
                inner
                    .node_live
                    .fetch_add(i64::from(img.len), Ordering::Relaxed);
            }
            inner.forest.store(Arc::new(f));
            for sp in &c.spaces {
                let s = inner.add_space(sp.id, &sp.name, sp.cmp, Some(sp.leaves.clone()))?;
                s.count
                    .add(sp.leaves.iter().map(|l| u64::from(l.1.count)).sum());
            }
        }
        Ok(())
    }

    fn apply(&mut self, _seg: u32, _off: u64, h: &format::Header, rec: &[u8]) -> Result<()> {
        self.inner.replay_record(h, rec)
    }
}
