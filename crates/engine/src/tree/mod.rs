//! The on-disk B+ tree (`PATH.kb`): ordered keys, a cache of leaves bounded in bytes, and the
//! shared durable log (docs/architecture/kinds.md, "B+ tree").
//!
//! A database directory holds:
//! - the write-ahead log (`seg-NNNNNNNN.kd`, `WAL_LANES` lanes): every change as a put / delete / batch /
//!   clear record of the shared log format, the full new state of one key each, so replaying a
//!   record twice changes nothing;
//! - the node log (`nodes/seg-NNNNNNNN.kd`): leaf images, each a put record of the same format
//!   (key: the leaf's id at the time, value: the image, compressed with `#compress=`);
//! - the checkpoint (`tree.ki`): where replay starts in the write-ahead log, and every leaf in
//!   key order with its low key and where its image is. The inner levels are rebuilt from it.
//!
//! The three hold any number of keyspaces (`space`): the database itself (keyspace 0) and those
//! `Store::keyspace` makes, each an ordered tree of its own; every record names its keyspace,
//! and a batch across keyspaces is one record.
//!
//! Modules: `leaf` (a leaf and its image), `index` (the inner levels), `forest` (the leaf
//! table), `cmp` (key orders), `write` (changes and splits), `api` (the `Store`), `cursor`,
//! `ckpt` (checkpoints and the cache's evictions), `open` (opening and recovery), `space`
//! (keyspaces), `check`.

mod api;
mod check;
mod ckpt;
pub mod cmp;
mod cursor;
mod forest;
mod index;
mod leaf;
mod open;
mod repair;
mod space;
mod write;

use self::cmp::Cmp;
use self::forest::{Forest, Image, SlotState, NONE};
use self::leaf::Leaf;
use crate::config::{Compression, SyncMode};
use crate::counter::Counter;
use crate::error::{Error, Result};
use crate::log::format::{self, HeaderBuf, PutFields, T_PUT};
use crate::log::Log;
use crate::store::{Damaged, Meta};
use arc_swap::ArcSwap;
use parking_lot::{Mutex, RwLockReadGuard, RwLockWriteGuard};
use std::cmp::Ordering as KeyOrder;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// The parameters a `.kb` name accepts.
pub const PARAMS: &[&str] = &[
    "cmp", "cache", "compress", "leafsiz", "sync", "segsiz", "bufsiz", "ckptsiz",
];

/// The descriptor's kind.
pub const KIND: &str = "tree";

/// Lanes of the write-ahead log: each writing thread appends to one (`Log::my_lane`), so
/// writers on different threads share no log buffer and no lock.
pub(crate) const WAL_LANES: usize = 4;

/// The checkpoint's file name.
pub(crate) const CKPT_NAME: &str = "tree.ki";
/// The name it is written under before it replaces the checkpoint.
pub(crate) const CKPT_TMP: &str = "tree.ki.tmp";
/// The node log's directory.
pub(crate) const NODES_DIR: &str = "nodes";

/// How one open is tuned.
#[derive(Clone, Debug)]
pub struct TreeConfig {
    pub sync: SyncMode,
    pub segsiz: u64,
    pub bufsiz: usize,
    /// Write-ahead log bytes between checkpoints.
    pub ckptsiz: u64,
    /// Bytes of cached leaves.
    pub cache: u64,
    /// A leaf splits when its records take more than this.
    pub leafsiz: usize,
}

/// The default cache: with it a server's resident memory stays under 256 MiB.
pub const DEFAULT_CACHE: u64 = 128 << 20;

impl TreeConfig {
    pub fn from_params(params: &crate::config::Params) -> Result<TreeConfig> {
        params.allow_only("a disk tree (.kb)", PARAMS)?;
        let range = |key: &str, v: u64, lo: u64, hi: u64, shown: &str| {
            if (lo..=hi).contains(&v) {
                Ok(v)
            } else {
                Err(Error::InvalidParam(format!(
                    "`{key}={v}`: expected {shown}"
                )))
            }
        };
        let segsiz = params.size("segsiz")?.unwrap_or(64 << 20);
        let bufsiz = params.size("bufsiz")?.unwrap_or(256 << 10);
        let cache = params.size("cache")?.unwrap_or(DEFAULT_CACHE);
        let leafsiz = params.size("leafsiz")?.unwrap_or(4 << 10);
        Ok(TreeConfig {
            sync: params.sync()?.unwrap_or(SyncMode::DEFAULT),
            segsiz: range("segsiz", segsiz, 64 << 10, 2 << 30, "64k to 2g")?,
            bufsiz: range("bufsiz", bufsiz, 4 << 10, 64 << 20, "4k to 64m")? as usize,
            ckptsiz: params.size("ckptsiz")?.unwrap_or(64 << 20).max(1 << 20),
            cache: range("cache", cache, 1 << 20, 1 << 50, "1m or more")?,
            leafsiz: range("leafsiz", leafsiz, 256, 1 << 20, "256 to 1m")? as usize,
        })
    }
}

/// Counters shown by `inform` / `stats`.
#[derive(Default)]
pub(crate) struct TreeCounters {
    pub loads: AtomicU64,
    /// Gets answered from a leaf's image, the leaf not cached (`Inner::lookup`).
    pub image_lookups: AtomicU64,
    pub evictions: AtomicU64,
    pub splits: AtomicU64,
    pub checkpoints: AtomicU64,
    pub images: AtomicU64,
}

/// An open B+ tree database.
pub struct DiskTree {
    inner: Arc<Inner>,
    created: bool,
}

/// One keyspace of a tree database: the database itself (keyspace 0) or one made by
/// `Store::keyspace`. Each has its own order, leaves, index and count; the fields behind an
/// `Arc` are the database's, shared by all its keyspaces (one write-ahead log, one node log,
/// one checkpoint, one cache budget).
pub(crate) struct Inner {
    pub wal: Arc<Log>,
    pub nodes: Arc<Log>,
    pub cmp: Cmp,
    /// The compression of images written from now on (a `Compression` code: `optimize`
    /// changes it).
    pub compress: Arc<std::sync::atomic::AtomicU8>,
    pub cfg: TreeConfig,
    pub forest: ArcSwap<Forest>,
    /// Bytes of cached leaves (of every keyspace).
    pub cached: Arc<AtomicI64>,
    /// Records of this keyspace (expired ones not yet removed included).
    pub count: Counter,
    pub count_neg: Counter,
    /// The last version given out.
    pub version: Arc<AtomicU64>,
    /// Write-ahead log bytes since the last checkpoint.
    pub since_ckpt: Arc<AtomicU64>,
    /// Bytes of the node log's live images, and bytes appended to it since the last
    /// checkpoint: a checkpoint is due when the log grew by as much as it holds alive (its
    /// dead images go at checkpoints), so the node log stays within about twice its live size.
    pub node_live: Arc<std::sync::atomic::AtomicI64>,
    pub node_since: Arc<AtomicU64>,
    pub ckpt_asked: Arc<AtomicBool>,
    /// Held by a checkpoint (and by what must not run beside one: vanish, making a keyspace).
    pub ckpt_lock: Arc<Mutex<()>>,
    /// This keyspace's eviction clock hand; the one evictor of the database.
    pub hand: AtomicU32,
    pub evicting: Arc<Mutex<()>>,
    /// Damage a read-only open found and served around.
    pub findings: Arc<Mutex<Vec<Damaged>>>,
    pub counters: Arc<TreeCounters>,
    /// The database directory's lock, released at close (keyspace 0's).
    pub lock: Mutex<Option<Box<dyn std::any::Any + Send + Sync>>>,
    /// A read-only open going around damage (`repair`): a leaf whose image fails is taken as
    /// empty, and reported.
    pub salvage: bool,
    /// This keyspace's id (0: the database itself) and name ("" for 0).
    pub ks: u64,
    pub name: String,
    /// The database's keyspaces besides 0.
    pub spaces: Arc<Spaces>,
}

/// The keyspaces of a tree database besides the database itself, by id, and keyspace 0.
#[derive(Default)]
pub(crate) struct Spaces {
    /// Written under `ckpt_lock` (a checkpoint lists every keyspace it finds here).
    pub list: parking_lot::RwLock<Vec<Arc<Inner>>>,
    pub root: std::sync::OnceLock<std::sync::Weak<Inner>>,
    /// The database's background threads, joined at close.
    pub bg: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

thread_local! {
    /// The keyspace (`Inner` address) and leaf this thread read or changed last, and whether
    /// it used that leaf twice in a row.
    static LAST_LEAF: std::cell::Cell<(usize, u32, bool)> =
        const { std::cell::Cell::new((0, NONE, false)) };
    /// Write-ahead bytes this thread appended and has not yet added to `since_ckpt` (whose
    /// address is the first field).
    static WAL_PENDING: std::cell::Cell<(usize, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// A leaf latched for reading or writing.
pub(crate) type ReadLatch<'f> = RwLockReadGuard<'f, SlotState>;
pub(crate) type WriteLatch<'f> = RwLockWriteGuard<'f, SlotState>;

/// The tree was replaced while an operation looked at it (`vanish`): start again.
pub(crate) struct Gone;

impl Inner {
    /// Whether the leaf `right` (a right neighbour) holds `key`.
    #[inline]
    fn right_holds(&self, f: &Forest, right: u32, key: &[u8]) -> bool {
        right != NONE
            && f.slot(right)
                .low()
                .is_some_and(|low| self.cmp.cmp(key, low) != KeyOrder::Less)
    }

    /// Where to look for `key`: the leaf this thread used last in this keyspace when its low
    /// key is at or below `key` (keys in order meet the same leaf again and again; leaves
    /// never merge, so a leaf whose low key is at or below a key leads to it by right links),
    /// `hinted`; else the index's answer.
    #[inline]
    fn start_leaf(&self, f: &Forest, key: &[u8]) -> (u32, bool) {
        let (who, id, streak) = LAST_LEAF.get();
        if streak && who == self as *const Inner as usize && f.exists(id) {
            if let Some(low) = f.slot(id).low() {
                if self.cmp.cmp(key, low) != KeyOrder::Less {
                    return (id, true);
                }
            }
        }
        (f.index.find(self.cmp, key), false)
    }

    /// Leaf `id` was used: the hint is tried next only while the thread keeps to one leaf
    /// (`hinted`, or the index led to the same leaf as last time), so keys at random pay no
    /// latch for a hint that misses.
    #[inline]
    fn note_leaf(&self, id: u32, hinted: bool) {
        let me = self as *const Inner as usize;
        let (who, last, _) = LAST_LEAF.get();
        LAST_LEAF.set((me, id, hinted || (who == me && last == id)));
    }

    /// The leaf holding `key`, cached and latched for writing.
    pub(crate) fn write_leaf<'f>(
        &self,
        f: &'f Forest,
        key: &[u8],
    ) -> Result<std::result::Result<(u32, WriteLatch<'f>), Gone>> {
        let (mut id, mut hinted) = self.start_leaf(f, key);
        loop {
            let slot = f.slot(id);
            let mut g = slot.write();
            if g.gone {
                return Ok(Err(Gone));
            }
            if self.right_holds(f, g.right, key) {
                // A hint that is not the leaf: the index, not a walk along the leaves.
                id = if hinted {
                    hinted = false;
                    drop(g);
                    f.index.find(self.cmp, key)
                } else {
                    g.right
                };
                continue;
            }
            self.touch(slot);
            if g.leaf.is_none() {
                self.load(&mut g)?;
            }
            self.note_leaf(id, hinted);
            return Ok(Ok((id, g)));
        }
    }

    /// The leaf holding `key`, cached and latched for reading.
    pub(crate) fn read_leaf<'f>(
        &self,
        f: &'f Forest,
        key: &[u8],
    ) -> Result<std::result::Result<(u32, ReadLatch<'f>), Gone>> {
        let (id, hinted) = self.start_leaf(f, key);
        if hinted {
            let slot = f.slot(id);
            let g = slot.read();
            if !g.gone && g.leaf.is_some() && !self.right_holds(f, g.right, key) {
                self.touch(slot);
                self.note_leaf(id, true);
                return Ok(Ok((id, g)));
            }
            drop(g);
            let id = f.index.find(self.cmp, key);
            let r = self.read_from(f, id, key)?;
            if let Ok((id, _)) = &r {
                self.note_leaf(*id, false);
            }
            return Ok(r);
        }
        let r = self.read_from(f, id, key)?;
        if let Ok((id, _)) = &r {
            self.note_leaf(*id, false);
        }
        Ok(r)
    }

    /// The published leaf holding `key` (`forest`, "published"), loaded without a latch,
    /// moving right as `read_leaf` does; `None` when a leaf on the way is not published (the
    /// caller takes the latch).
    #[inline]
    pub(crate) fn published_leaf(&self, f: &Forest, key: &[u8]) -> Option<forest::PublishedGuard> {
        let (mut id, mut hinted) = self.start_leaf(f, key);
        loop {
            let slot = f.slot(id);
            let (g, right) = slot.published();
            g.as_ref()?;
            if self.right_holds(f, right, key) {
                id = if hinted {
                    hinted = false;
                    f.index.find(self.cmp, key)
                } else {
                    right
                };
                continue;
            }
            self.touch(slot);
            self.note_leaf(id, hinted);
            // The guard, not a clone of the `Arc`: readers of one leaf on several cores
            // write no shared counter.
            return Some(forest::PublishedGuard(g));
        }
    }

    /// The first record of `key` (its first value), given to `found` (`None`: it has none):
    /// the point read of `get` and `view`. A published leaf is read without its latch, a
    /// cached one under its shared latch. A leaf not cached is cached, but for one not used
    /// since the clock hand last passed while the cache is full: then the record is looked up
    /// in the leaf's image without building the leaf (`Leaf::find_in_image`), so a leaf read
    /// once does not take the place of one read often; read again, it is cached.
    pub(crate) fn lookup<R>(
        &self,
        key: &[u8],
        found: impl FnOnce(Option<(&[u8], Meta)>) -> R,
    ) -> Result<R> {
        'again: loop {
            let f = self.forest.load();
            if let Some(p) = self.published_leaf(&f, key) {
                let leaf = p.leaf();
                let (i, hit) = leaf.find(self.cmp, key);
                return Ok(found(hit.then(|| {
                    let e = leaf.entry(i);
                    (e.value, e.meta)
                })));
            }
            let (mut id, mut hinted) = self.start_leaf(&f, key);
            loop {
                let slot = f.slot(id);
                let g = slot.read();
                if g.gone {
                    continue 'again;
                }
                if self.right_holds(&f, g.right, key) {
                    id = if hinted {
                        hinted = false;
                        f.index.find(self.cmp, key)
                    } else {
                        g.right
                    };
                    continue;
                }
                if let Some(leaf) = g.leaf.as_ref() {
                    slot.note_read(&g);
                    self.touch(slot);
                    self.note_leaf(id, hinted);
                    let (i, hit) = leaf.find(self.cmp, key);
                    return Ok(found(hit.then(|| {
                        let e = leaf.entry(i);
                        (e.value, e.meta)
                    })));
                }
                let full = self.cached.load(Ordering::Relaxed) >= (self.cfg.cache as i64) * 9 / 10;
                if full && !self.salvage && !slot.used.load(Ordering::Relaxed) {
                    // The image cannot move while the latch is held.
                    self.touch(slot);
                    self.counters.image_lookups.fetch_add(1, Ordering::Relaxed);
                    let img = g.image;
                    let bytes = self.read_image_bytes(img)?;
                    let e = Leaf::find_in_image(&bytes, self.cmp, key)
                        .map_err(|why| Error::Corrupt(format!("{}: {why}", image_at(img))))?;
                    return Ok(found(e.map(|e| (e.value, e.meta))));
                }
                drop(g);
                let mut w = slot.write();
                if w.gone {
                    continue 'again;
                }
                if w.leaf.is_none() {
                    self.load(&mut w)?;
                }
                // Read again under the shared latch.
            }
        }
    }

    /// Latch leaf `id` for reading, moving right while a neighbour holds `key` (when given).
    pub(crate) fn read_from<'f>(
        &self,
        f: &'f Forest,
        mut id: u32,
        key: &[u8],
    ) -> Result<std::result::Result<(u32, ReadLatch<'f>), Gone>> {
        loop {
            let slot = f.slot(id);
            let g = slot.read();
            if g.gone {
                return Ok(Err(Gone));
            }
            if self.right_holds(f, g.right, key) {
                id = g.right;
                continue;
            }
            if g.leaf.is_none() {
                drop(g);
                let mut w = slot.write();
                if w.gone {
                    return Ok(Err(Gone));
                }
                if w.leaf.is_none() {
                    self.load(&mut w)?;
                }
                let g = RwLockWriteGuard::downgrade(w);
                if self.right_holds(f, g.right, key) {
                    id = g.right;
                    continue;
                }
                self.touch(slot);
                return Ok(Ok((id, g)));
            }
            self.touch(slot);
            return Ok(Ok((id, g)));
        }
    }

    /// Latch leaf `id` for reading (cached), whatever it holds.
    pub(crate) fn read_id<'f>(
        &self,
        f: &'f Forest,
        id: u32,
    ) -> Result<std::result::Result<ReadLatch<'f>, Gone>> {
        let slot = f.slot(id);
        let g = slot.read();
        if g.gone {
            return Ok(Err(Gone));
        }
        self.touch(slot);
        if g.leaf.is_some() {
            return Ok(Ok(g));
        }
        drop(g);
        let mut w = slot.write();
        if w.gone {
            return Ok(Err(Gone));
        }
        if w.leaf.is_none() {
            self.load(&mut w)?;
        }
        Ok(Ok(RwLockWriteGuard::downgrade(w)))
    }

    #[inline]
    fn touch(&self, slot: &forest::Slot) {
        if !slot.used.load(Ordering::Relaxed) {
            slot.used.store(true, Ordering::Relaxed);
        }
    }

    /// Read a leaf's image into the cache.
    pub(crate) fn load(&self, st: &mut SlotState) -> Result<()> {
        let leaf = match self.read_image(st.image) {
            Err(Error::Corrupt(why)) if self.salvage => {
                let img = st.image;
                self.findings.lock().push(Damaged {
                    file: format!(
                        "{NODES_DIR}/{}",
                        crate::log::segment::seg_file_name(img.seg())
                    ),
                    off: img.off(),
                    len: u64::from(img.len),
                    lost: u64::from(img.count),
                    what: format!("a damaged leaf image ({why}): its records are lost"),
                });
                Leaf::new()
            }
            r => r?,
        };
        self.cached
            .fetch_add(leaf.mem_bytes() as i64, Ordering::Relaxed);
        st.leaf = Some(Arc::new(leaf));
        self.counters.loads.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The leaf an image holds; damage is `Error::Corrupt` naming where.
    pub(crate) fn read_image(&self, img: Image) -> Result<Leaf> {
        let bytes = self.read_image_bytes(img)?;
        Leaf::decode_image(&bytes, Some(self.cmp))
            .map_err(|why| Error::Corrupt(format!("{}: {why}", image_at(img))))
    }

    /// The bytes of an image (read, checked, decompressed); damage is `Error::Corrupt`.
    pub(crate) fn read_image_bytes(&self, img: Image) -> Result<Vec<u8>> {
        let at = || image_at(img);
        if img.is_none() {
            return Err(Error::Corrupt("a leaf with no image is not cached".into()));
        }
        let segs = self.nodes.segs.load();
        let seg = segs
            .get(img.seg())
            .ok_or_else(|| Error::Corrupt(format!("{}: the node segment is missing", at())))?;
        let mut buf = Vec::new();
        match self
            .nodes
            .read_range(seg, img.off(), img.len as usize, &mut buf)
        {
            Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(Error::Corrupt(format!(
                    "{}: the image lies past the end of its segment",
                    at()
                )));
            }
            r => r?,
        }
        decode_image_record(&buf, seg.seed)
            .map_err(|why| Error::Corrupt(format!("{}: {why}", at())))
    }

    /// Write the image of a cached leaf to the node log (it is then clean).
    pub(crate) fn write_image(&self, id: u32, st: &mut SlotState) -> Result<()> {
        let Some(leaf) = st.leaf.as_ref() else {
            return Ok(());
        };
        let mut raw = Vec::with_capacity(leaf.live_bytes() + 16);
        // The latch on `st` keeps a vanish from replacing the forest (it latches every
        // leaf first), so unless the leaf is gone, the current forest is the leaf's.
        let forest = self.forest.load();
        let low = if st.gone { None } else { forest.slot(id).low() };
        let high = if st.gone || st.right == NONE {
            None
        } else {
            forest.slot(st.right).low()
        };
        leaf.encode_image(&mut raw, (low, high));
        let count = leaf.len() as u32;
        let (stored, fields) = image_fields(
            self.compression(),
            raw,
            self.version.load(Ordering::Relaxed),
        );
        let key = id.to_le_bytes();
        let h = HeaderBuf::put_in(self.ks, key.len(), stored.len(), &fields);
        let len = h.as_slice().len() + key.len() + stored.len();
        let (seg, off) = {
            let mut tail = self.nodes.tails[0].0.lock();
            self.nodes
                .append(&mut tail, &[h.as_slice(), &key, &stored], true)?
        };
        self.nodes.add_live(seg, len as i64);
        self.node_live.fetch_add(len as i64, Ordering::Relaxed);
        let since = self.node_since.fetch_add(len as u64, Ordering::Relaxed) + len as u64;
        let live = self.node_live.load(Ordering::Relaxed).max(0) as u64;
        if since >= live.max(self.cfg.ckptsiz) {
            self.ask_ckpt();
        }
        if !st.image.is_none() {
            self.nodes
                .add_live(st.image.seg(), -i64::from(st.image.len));
            self.node_live
                .fetch_sub(i64::from(st.image.len), Ordering::Relaxed);
        }
        st.image = Image {
            loc: (u64::from(seg) << 32) | off,
            len: len as u32,
            count,
        };
        st.dirty = false;
        self.counters.images.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The compression of images written now.
    pub(crate) fn compression(&self) -> Compression {
        Compression::from_code(self.compress.load(Ordering::Relaxed)).unwrap_or(Compression::None)
    }

    /// Records now.
    pub(crate) fn records(&self) -> u64 {
        self.count.get().saturating_sub(self.count_neg.get())
    }

    /// After a change: ask for a checkpoint when the log has grown enough since the last, and
    /// keep the cache within its budget.
    /// Whether the logs grew enough for a checkpoint.
    pub(crate) fn ckpt_due(&self) -> bool {
        let live = self.node_live.load(Ordering::Relaxed).max(0) as u64;
        self.since_ckpt.load(Ordering::Relaxed) >= self.cfg.ckptsiz
            || self.node_since.load(Ordering::Relaxed) >= live.max(self.cfg.ckptsiz)
    }

    /// `n` more bytes in the write-ahead log: a checkpoint is asked for once they add up to
    /// `ckptsiz` (checked here, where the counter is written). Each thread adds its bytes to
    /// the shared counter in steps of `WAL_STEP` (and at once while it is 0, so that a close
    /// knows there is something to checkpoint), so that writers on different cores do not
    /// pass its cache line back and forth on every change.
    pub(crate) fn note_wal_bytes(&self, n: u64) {
        const WAL_STEP: u64 = 64 << 10;
        let me = Arc::as_ptr(&self.since_ckpt) as usize;
        let (who, pending) = WAL_PENDING.get();
        let pending = if who == me { pending + n } else { n };
        if pending < WAL_STEP && self.since_ckpt.load(Ordering::Relaxed) != 0 {
            WAL_PENDING.set((me, pending));
            return;
        }
        WAL_PENDING.set((me, 0));
        let since = self.since_ckpt.fetch_add(pending, Ordering::Relaxed) + pending;
        if since >= self.cfg.ckptsiz {
            self.ask_ckpt();
        }
    }

    /// Wake the background thread for a checkpoint (once until it runs).
    pub(crate) fn ask_ckpt(&self) {
        if !self.ckpt_asked.load(Ordering::Relaxed) && !self.ckpt_asked.swap(true, Ordering::AcqRel)
        {
            self.wal.stop_cv.notify_all();
        }
    }

    /// A cached leaf went from `before` to `after` bytes (most changes leave its capacity,
    /// and so the shared counter, alone).
    #[inline]
    pub(crate) fn account(&self, before: usize, after: usize) {
        if before != after {
            self.cached
                .fetch_add(after as i64 - before as i64, Ordering::Relaxed);
        }
    }

    /// After a change: keep the cache within its budget (checkpoints are asked for where the
    /// logs grow).
    pub(crate) fn after_change(&self) {
        if self.cached.load(Ordering::Relaxed) > self.cfg.cache as i64 {
            self.evict();
        }
    }

    /// Drop cached leaves (writing the images of changed ones first) until the cache is below
    /// nine tenths of its budget: the CLOCK algorithm (a leaf used since the hand last passed
    /// is spared once). Latches are only tried: the evictor never waits for a leaf.
    pub(crate) fn evict(&self) {
        let Some(_one) = self.evicting.try_lock() else {
            return;
        };
        self.evict_own();
        let target = (self.cfg.cache as i64) * 9 / 10;
        if self.cached.load(Ordering::Relaxed) <= target {
            return;
        }
        // The budget is the database's: the other keyspaces' leaves go too.
        let root = self.spaces.root.get().and_then(|w| w.upgrade());
        let others: Vec<Arc<Inner>> = root
            .into_iter()
            .chain(self.spaces.list.read().iter().cloned())
            .collect();
        for s in others {
            if self.cached.load(Ordering::Relaxed) <= target {
                break;
            }
            if !std::ptr::eq(&*s, self) {
                s.evict_own();
            }
        }
    }

    /// `evict` over this keyspace's leaves.
    fn evict_own(&self) {
        let f = self.forest.load();
        let target = (self.cfg.cache as i64) * 9 / 10;
        let n = f.allocated();
        if n == 0 {
            return;
        }
        let mut steps = 0u64;
        while self.cached.load(Ordering::Relaxed) > target && steps < 4 * u64::from(n) {
            steps += 1;
            let id = self.hand.fetch_add(1, Ordering::Relaxed) % n;
            if !f.exists(id) {
                continue;
            }
            let slot = f.slot(id);
            if slot.used.swap(false, Ordering::Relaxed) {
                continue;
            }
            let Some(mut g) = slot.try_write() else {
                continue;
            };
            if g.gone || g.leaf.is_none() {
                continue;
            }
            if (g.dirty || g.image.is_none())
                && (self.wal.readonly || self.write_image(id, &mut g).is_err())
            {
                continue;
            }
            if let Some(leaf) = g.leaf.take() {
                self.cached
                    .fetch_sub(leaf.mem_bytes() as i64, Ordering::Relaxed);
                self.counters.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Where an image is, for messages.
fn image_at(img: Image) -> String {
    format!(
        "{}/{} offset {}",
        NODES_DIR,
        crate::log::segment::seg_file_name(img.seg()),
        img.off()
    )
}

/// The fields and stored bytes of an image record: compressed when that makes it smaller.
fn image_fields(c: Compression, raw: Vec<u8>, seq: u64) -> (Vec<u8>, PutFields) {
    let mut fields = PutFields {
        seq,
        ..PutFields::default()
    };
    match crate::compress::compress(c, &raw) {
        Some(z) => {
            fields.compression = c as u8;
            fields.raw_len = raw.len() as u64;
            (z, fields)
        }
        None => (raw, fields),
    }
}

/// The image bytes of an image record (checked, decompressed); `Err` says what is wrong.
pub(crate) fn decode_image_record(rec: &[u8], seed: u32) -> std::result::Result<Vec<u8>, String> {
    if !format::verify(rec, seed) {
        return Err("the leaf image fails its checksum".into());
    }
    let h = format::parse_header(rec)
        .filter(|h| h.typ == T_PUT && h.len == rec.len())
        .ok_or("the leaf image record is malformed")?;
    let stored = &rec[h.value_off()..h.len];
    let codec = format::codec(&h).map_err(|e| e.to_string())?;
    if codec == Compression::None {
        return Ok(stored.to_vec());
    }
    if h.fields.raw_len > (crate::store::MAX_VALUE_LEN as u64) * 2 {
        return Err("the leaf image's length is impossible".into());
    }
    crate::compress::decompress(codec, stored, h.fields.raw_len as usize).map_err(|e| e.to_string())
}

impl DiskTree {
    /// Whether this open made the database.
    pub fn created(&self) -> bool {
        self.created
    }

    /// The key order of this database.
    pub fn order(&self) -> Cmp {
        self.inner.cmp
    }

    /// Write a checkpoint now (tests and tools; the database writes them by itself).
    pub fn checkpoint(&self) -> Result<()> {
        self.inner.wal.check_writable()?;
        self.inner.checkpoint()
    }

    /// [`Error::Closed`] once the database is closed.
    pub(crate) fn check_open(&self) -> Result<()> {
        self.inner.wal.check_open()
    }

    /// Whether this handle is a keyspace (not the database itself).
    pub fn is_keyspace(&self) -> bool {
        self.inner.ks != 0
    }

    /// Stop as a killed process would: background threads stopped, nothing flushed, synced
    /// or checkpointed (the crash tests).
    pub fn abandon(self) {
        *self.inner.wal.stop.lock() = true;
        self.inner.wal.stop_cv.notify_all();
        self.inner.wal.fill_cv.notify_all();
        for h in self.inner.spaces.bg.lock().drain(..) {
            let _ = h.join();
        }
        self.inner.wal.closed.store(true, Ordering::Release);
        self.inner.nodes.closed.store(true, Ordering::Release);
        self.inner.spaces.list.write().clear();
        self.inner.lock.lock().take();
    }

    /// Bytes of leaves cached now.
    pub fn cached_bytes(&self) -> u64 {
        self.inner.cached.load(Ordering::Relaxed).max(0) as u64
    }
}

impl Drop for DiskTree {
    fn drop(&mut self) {
        // Dropping a keyspace's handle leaves its database open.
        if self.inner.ks == 0 {
            let _ = crate::store::Store::close(self);
        }
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<DiskTree>();
    let _ = Path::new("");
}

/// Entry points for the fuzz targets (`fuzz/fuzz_targets/tree_*.rs`): the file readers of
/// the tree on arbitrary bytes. Not part of the API.
#[doc(hidden)]
pub mod fuzzing {
    use super::ckpt::Checkpoint;
    use super::cmp::Cmp;
    use super::leaf::Leaf;

    const ORDERS: [Cmp; 4] = [Cmp::Lex, Cmp::Dec, Cmp::Int64, Cmp::LexDesc];

    /// A leaf image: decodes or is refused; what decodes is in order, within its span, and
    /// round-trips through `encode_image`; a lookup of one record never panics, and in an
    /// image that decodes finds what the decoded leaf holds.
    pub fn image(data: &[u8]) {
        let cmp = ORDERS[data.first().map_or(0, |b| *b as usize) % ORDERS.len()];
        let _ = Leaf::find_in_image(data, cmp, data.get(..data.len().min(9)).unwrap_or(&[]));
        let Ok((leaf, span)) = Leaf::decode_image_span(data, Some(cmp)) else {
            return;
        };
        for i in (0..leaf.len()).step_by(leaf.len() / 16 + 1) {
            let key = leaf.key(i);
            let (j, hit) = leaf.find(cmp, key);
            assert!(hit);
            let e = leaf.entry(j);
            let found = Leaf::find_in_image(data, cmp, key).expect("an image that decodes");
            assert_eq!(
                found.map(|f| (f.value, f.meta, f.dup)),
                Some((e.value, e.meta, e.dup)),
                "the lookup in the image finds what the leaf holds"
            );
        }
        for i in 1..leaf.len() {
            assert!(
                cmp.cmp(leaf.key(i - 1), leaf.key(i)).is_le(),
                "keys out of order"
            );
        }
        let mut again = Vec::new();
        leaf.encode_image(&mut again, (span.0.as_deref(), span.1.as_deref()));
        let (back, span2) = Leaf::decode_image_span(&again, Some(cmp)).expect("own image");
        assert_eq!(span, span2);
        assert_eq!(back.len(), leaf.len());
        for i in 0..leaf.len() {
            assert_eq!(back.entry(i), leaf.entry(i));
        }
    }

    /// A checkpoint's body (`tree.ki` less the checksum `log::checkpoint` verifies): decodes
    /// or is refused; what decodes re-encodes to a body that decodes the same.
    pub fn checkpoint(data: &[u8]) {
        let cmp = ORDERS[data.last().map_or(0, |b| *b as usize) % ORDERS.len()];
        let Ok(c) = Checkpoint::decode(data, cmp) else {
            return;
        };
        let again = Checkpoint::decode(&c.encode(), cmp).expect("own checkpoint");
        // Every field, the keyspace list (format 2) with each keyspace's leaves included.
        assert_eq!(again, c);
    }
}
