//! The leaves of one B+ tree and the index over them: a table of leaf slots that only grows
//! (leaves split, never merge), addressed by id without a lock, and the copy-on-write index.
//!
//! A slot holds its leaf's low key (fixed when the leaf is made; the first leaf's is none:
//! it holds every key below the second's), and behind its latch the leaf itself when cached,
//! where its newest image is in the node log, its right neighbour, and whether it changed
//! since that image.
//!
//! A leaf read often and changed seldom is also *published*: the slot holds a shared
//! reference to it and a copy of its right link, which a point read loads without the latch
//! (`Slot::published`). A publication is made under the shared latch and withdrawn by
//! every exclusive latch (`Slot::write`) before anything changes, so a published leaf is
//! never changed in place: a writer that finds a reader still holding it changes a copy
//! (`SlotState::leaf_mut`), and the reader's copy is freed when it lets go.

use super::index::{Index, Key};
use super::leaf::Leaf;
use arc_swap::ArcSwapOption;
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

const CHUNK_BITS: u32 = 12;
const CHUNK: usize = 1 << CHUNK_BITS;
const MAX_CHUNKS: usize = 1 << 16;
/// No leaf: the right link of the last leaf.
pub(crate) const NONE: u32 = u32::MAX;

/// Where a leaf's image is in the node log: `seg << 32 | offset`, and its record's length. 0:
/// the leaf has never been written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Image {
    pub loc: u64,
    pub len: u32,
    /// Records in the image (the checkpoint's record count is their sum).
    pub count: u32,
}

impl Image {
    pub fn seg(self) -> u32 {
        (self.loc >> 32) as u32
    }
    pub fn off(self) -> u64 {
        self.loc & 0xffff_ffff
    }
    pub fn is_none(self) -> bool {
        self.loc == 0
    }
}

/// What a slot's latch guards.
#[derive(Default)]
pub(crate) struct SlotState {
    /// The leaf, when cached (shared with its publication, if any: changed through
    /// `leaf_mut`).
    pub leaf: Option<Arc<Leaf>>,
    pub image: Image,
    pub right: u32,
    /// Changed since `image` was written.
    pub dirty: bool,
    /// The tree this slot belongs to was replaced (`vanish`): start again from the new one.
    pub gone: bool,
}

impl SlotState {
    /// The cached leaf, to change: under an exclusive latch (`Slot::write`), which withdrew
    /// its publication, so it is copied only when a reader still holds that.
    #[inline]
    pub fn leaf_mut(&mut self) -> Option<&mut Leaf> {
        self.leaf.as_mut().map(Arc::make_mut)
    }
}

/// A published leaf as loaded (`Slot::published`), known to be there.
pub(crate) struct PublishedGuard(pub arc_swap::Guard<Option<Arc<Leaf>>>);

impl PublishedGuard {
    #[inline]
    pub fn leaf(&self) -> &Leaf {
        self.0.as_ref().expect("a published leaf")
    }
}

/// Reads under the shared latch since the leaf last changed after which it is published.
const PUBLISH_AFTER: u8 = 2;
/// `Slot::reads` of a published leaf.
const PUBLISHED: u8 = u8::MAX;

pub(crate) struct Slot {
    low: OnceLock<Option<Key>>,
    st: RwLock<SlotState>,
    /// The leaf published for reads without the latch (see the module documentation): the
    /// cached leaf itself, so that a read without the latch follows no more pointers than
    /// one under it.
    publ: ArcSwapOption<Leaf>,
    /// The right link when the leaf was last published (written before `publ`, by
    /// publishers only; the link changes only under the exclusive latch, which withdraws the
    /// publication first).
    pub_right: AtomicU32,
    /// Reads under the shared latch since the leaf was last latched exclusively (counted
    /// up to `PUBLISH_AFTER`), or `PUBLISHED`. Written under the latch only; only the
    /// exclusive latch takes it from `PUBLISHED`.
    reads: AtomicU8,
    /// Used since the eviction hand last passed (CLOCK).
    pub used: AtomicBool,
}

impl Slot {
    fn empty() -> Slot {
        Slot {
            low: OnceLock::new(),
            st: RwLock::new(SlotState {
                right: NONE,
                ..SlotState::default()
            }),
            publ: ArcSwapOption::empty(),
            pub_right: AtomicU32::new(NONE),
            reads: AtomicU8::new(0),
            used: AtomicBool::new(false),
        }
    }

    /// The latch, shared.
    #[inline]
    pub fn read(&self) -> RwLockReadGuard<'_, SlotState> {
        self.st.read()
    }

    /// The latch, exclusive; the leaf's publication is withdrawn before it is returned.
    #[inline]
    pub fn write(&self) -> RwLockWriteGuard<'_, SlotState> {
        let g = self.st.write();
        self.withdraw();
        g
    }

    /// `write` when the latch is free.
    #[inline]
    pub fn try_write(&self) -> Option<RwLockWriteGuard<'_, SlotState>> {
        let g = self.st.try_write()?;
        self.withdraw();
        Some(g)
    }

    /// Under the exclusive latch: no publication from now on until readers make one again.
    #[inline]
    fn withdraw(&self) {
        // Written only under the latch, which orders it with this read.
        match self.reads.load(Ordering::Relaxed) {
            0 => {}
            PUBLISHED => {
                self.publ.store(None);
                self.reads.store(0, Ordering::Relaxed);
            }
            _ => self.reads.store(0, Ordering::Relaxed),
        }
    }

    /// Under the shared latch `st`, a read of its cached leaf: count it, and publish the
    /// leaf once it was read `PUBLISH_AFTER` times without a change between.
    #[inline]
    pub fn note_read(&self, st: &SlotState) {
        let n = self.reads.load(Ordering::Relaxed);
        if n == PUBLISHED {
            return;
        }
        let Some(leaf) = st.leaf.as_ref() else {
            return;
        };
        if n + 1 < PUBLISH_AFTER {
            // Readers racing here may count once for two: it only delays the publication. A
            // count never replaces `PUBLISHED` (a plain store could, and the next writer would
            // then leave the publication in place).
            let _ = self
                .reads
                .compare_exchange(n, n + 1, Ordering::Relaxed, Ordering::Relaxed);
            return;
        }
        // Readers racing here publish the same leaf and link (both stores alike).
        self.pub_right.store(st.right, Ordering::Release);
        self.publ.store(Some(leaf.clone()));
        self.reads.store(PUBLISHED, Ordering::Release);
    }

    /// The published leaf, if any, loaded without the latch, and its right link: the leaf
    /// as it is (no change to it has begun), or as it was an instant ago when a writer
    /// withdraws it meanwhile (the read is ordered before that write). The link is the one
    /// published with it or a later one (the leaf split since): a later link's low key
    /// bounds what this leaf held, and the keys from it on are found by following it.
    #[inline]
    pub fn published(&self) -> (arc_swap::Guard<Option<Arc<Leaf>>>, u32) {
        let g = self.publ.load();
        (g, self.pub_right.load(Ordering::Acquire))
    }

    /// The low key (`None`: the first leaf, below everything).
    #[inline]
    pub fn low(&self) -> Option<&[u8]> {
        self.low.get().and_then(|l| l.as_deref())
    }
}

type Chunk = [Slot; CHUNK];

/// Leaves and index of one tree.
pub(crate) struct Forest {
    chunks: Box<[AtomicPtr<Chunk>]>,
    next: AtomicU32,
    pub index: Index,
}

impl Forest {
    /// A tree of one empty leaf (id 0).
    pub fn new() -> Forest {
        let f = Forest::with_capacity(0);
        let id = f.alloc(None);
        let slot = f.slot(id);
        slot.write().leaf = Some(Arc::default());
        f
    }

    fn with_capacity(_n: usize) -> Forest {
        Forest {
            chunks: (0..MAX_CHUNKS)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            next: AtomicU32::new(0),
            index: Index::new(0),
        }
    }

    /// A tree of the leaves of a checkpoint: `(low key, image)` in key order (the first low
    /// key is none), none of them cached.
    pub fn from_images(leaves: Vec<(Option<Key>, Image)>) -> Forest {
        let mut f = Forest::with_capacity(leaves.len());
        let n = leaves.len();
        let mut lows = Vec::with_capacity(n.saturating_sub(1));
        let mut ids = Vec::with_capacity(n);
        for (i, (low, image)) in leaves.into_iter().enumerate() {
            if let Some(l) = &low {
                lows.push(l.clone());
            }
            let id = f.alloc(low);
            let mut st = f.slot(id).write();
            st.image = image;
            st.right = if i + 1 < n { id + 1 } else { NONE };
            if image.is_none() {
                st.leaf = Some(Arc::default());
            }
            ids.push(id);
        }
        f.index = Index::build(&lows, &ids);
        f
    }

    /// A new slot with `low`; its state is the caller's to fill before it is linked.
    pub fn alloc(&self, low: Option<Key>) -> u32 {
        let id = self.next.fetch_add(1, Ordering::AcqRel);
        let c = (id >> CHUNK_BITS) as usize;
        assert!(c < MAX_CHUNKS, "too many leaves");
        if self.chunks[c].load(Ordering::Acquire).is_null() {
            // Made on the heap: a chunk is too large for a thread's stack.
            let slots: Box<[Slot]> = (0..CHUNK).map(|_| Slot::empty()).collect();
            let fresh: Box<Chunk> = slots.try_into().ok().expect("CHUNK slots");
            let p = Box::into_raw(fresh);
            if self.chunks[c]
                .compare_exchange(std::ptr::null_mut(), p, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                // SAFETY: `p` came from `Box::into_raw` above and was never shared.
                drop(unsafe { Box::from_raw(p) });
            }
        }
        let _ = self.slot(id).low.set(low);
        id
    }

    /// The slot of a leaf id handed out by `alloc`.
    #[inline]
    pub fn slot(&self, id: u32) -> &Slot {
        let p = self.chunks[(id >> CHUNK_BITS) as usize].load(Ordering::Acquire);
        assert!(!p.is_null(), "leaf {id} was never made");
        // SAFETY: a chunk, once published, lives as long as the forest (freed in `drop`).
        unsafe { &(*p)[id as usize & (CHUNK - 1)] }
    }

    /// Slots handed out so far (ids below this exist).
    pub fn allocated(&self) -> u32 {
        self.next.load(Ordering::Acquire)
    }

    /// Whether slot `id` exists and has its low key (is a leaf, or about to be one).
    pub fn exists(&self, id: u32) -> bool {
        id < self.allocated()
            && !self.chunks[(id >> CHUNK_BITS) as usize]
                .load(Ordering::Acquire)
                .is_null()
            && self.slot(id).low.get().is_some()
    }
}

impl Drop for Forest {
    fn drop(&mut self) {
        for c in self.chunks.iter() {
            let p = c.load(Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: every non-null chunk pointer came from `Box::into_raw` in `alloc`.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}
