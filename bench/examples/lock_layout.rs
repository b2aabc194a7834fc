//! Where an index's write locks live, and what that does to two writer threads on this machine.
//!
//! A model of the `.kh` write path, not the engine: each put hashes an 8-byte key, appends a
//! checksummed record to its thread's own buffer (the lane) and points a 12-byte slot at it,
//! under a lock, taking a sequence number. 1,000,000 new keys `00000001`…, split between the
//! threads by key range (as `kura-bench write -t 2`). Three places for the locks:
//!
//! - `shard`: the engine's layout before 635186d: 64 shards, each a `parking_lot::RwLock` whose cache
//!   line also holds the shard's seq, over a linear-probing table of its own;
//! - `line`: one table of 64-byte buckets, each holding its own lock word, seq and 4 slots;
//! - `array`: the same buckets, with their locks and seqs in arrays of their own;
//! - `brline`: `line`, each put also counting itself in and out of its key's shard in a
//!   stripe of counters of its own thread (a "big-reader" lock, as the engine's fast mode);
//! - `line2`: 128-byte buckets (two cache lines) of a lock word, a seq and 9 slots.
//!
//! Run: `cargo run --release -p kura-bench --example lock_layout -- LAYOUT THREADS`; it prints
//! the seconds the puts took. Results and what they mean: docs/bench-history/engine-hash.md,
//! "Two writers: where the locks must live" and "Two writers: locks in the slot lines".

use parking_lot::RwLock;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

const RECORDS: u64 = 1_000_000;
const SEED: u64 = 7;

/// A thread's log buffer: records are appended (header, seq, key, value = key) and checksummed.
struct Lane {
    buf: Vec<u8>,
}

impl Lane {
    #[inline]
    fn append(&mut self, key: &[u8], seq: u64) -> u32 {
        if self.buf.len() > 1 << 20 {
            self.buf.clear(); // as if flushed to the file
        }
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0; 4]);
        self.buf.push(1);
        self.buf.extend_from_slice(&seq.to_le_bytes());
        self.buf.extend_from_slice(key);
        self.buf.extend_from_slice(key);
        let crc = crc32c::crc32c(&self.buf[at + 4..]);
        self.buf[at..at + 4].copy_from_slice(&crc.to_le_bytes());
        at as u32
    }
}

#[derive(Clone, Copy, Default)]
#[repr(C)]
struct Slot {
    tag: u32,
    seg: u32,
    off: u32,
}

trait Index: Sync {
    /// Start fetching the key's place in the table.
    fn prefetch(&self, hash: u64);
    fn put(&self, hash: u64, lane: &mut Lane, key: &[u8]);
}

#[inline]
fn prefetch_addr<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 only hints the cache; any address is allowed.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

// ------------------------------------------------------------------ `shard`

#[repr(align(128))]
struct Shard(RwLock<(u64, Vec<Slot>)>);

struct Sharded {
    shards: Vec<Shard>,
}

impl Sharded {
    fn new() -> Sharded {
        let shards = (0..64)
            .map(|_| Shard(RwLock::new((0, vec![Slot::default(); 1 << 15]))))
            .collect();
        Sharded { shards }
    }
}

impl Index for Sharded {
    #[inline(always)]
    fn prefetch(&self, hash: u64) {
        let shard = &self.shards[(hash >> 58) as usize];
        // SAFETY: only the table's address and length are read, which no put changes.
        let table = unsafe { &(*shard.0.data_ptr()).1 };
        let home = ((hash as u32 as u64 * table.len() as u64) >> 32) as usize;
        prefetch_addr(table.as_ptr().wrapping_add(home));
    }

    #[inline(always)]
    fn put(&self, hash: u64, lane: &mut Lane, key: &[u8]) {
        let tag = hash as u32 | 1;
        let mut g = self.shards[(hash >> 58) as usize].0.write();
        g.0 += 1;
        let seq = g.0;
        let off = lane.append(key, seq);
        let cap = g.1.len();
        let mut p = ((tag as u64 * cap as u64) >> 32) as usize;
        loop {
            let s = &mut g.1[p];
            if s.seg == 0 || s.tag == tag {
                *s = Slot { tag, seg: 1, off };
                return;
            }
            p = (p + 1) & (cap - 1);
        }
    }
}

// ------------------------------------------------------------------ `line` and `array`

const BUCKETS: usize = 1 << 19;

#[inline]
fn lock(l: &AtomicU32) {
    while l
        .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::hint::spin_loop();
    }
}

/// Put into `slots` (bucket `b`, whose lock is held): false when the bucket is full.
#[inline]
fn put_in(slots: &mut [Slot], seq: &mut u64, tag: u32, lane: &mut Lane, key: &[u8]) -> bool {
    let Some(s) = slots.iter_mut().find(|s| s.seg == 0 || s.tag == tag) else {
        return false;
    };
    *seq += 1;
    let off = lane.append(key, *seq);
    *s = Slot { tag, seg: 1, off };
    true
}

/// A bucket locked by its own word: its lock, and its seq and slots (touched only with the lock
/// held).
trait LockedBucket: Sync {
    fn parts(&self) -> (&AtomicU32, *mut u64, *mut [Slot]);
}

/// Put into the first bucket from `b` on (`next` gives the one after) with room for `tag`,
/// locking one bucket at a time.
#[inline(always)]
fn put_probing<B: LockedBucket>(
    buckets: &[B],
    mut b: usize,
    next: impl Fn(usize) -> usize,
    tag: u32,
    lane: &mut Lane,
    key: &[u8],
) {
    loop {
        let (lock_word, seq, slots) = buckets[b].parts();
        lock(lock_word);
        // SAFETY: the bucket's lock is held.
        let done = unsafe { put_in(&mut *slots, &mut *seq, tag, lane, key) };
        lock_word.store(0, Ordering::Release);
        if done {
            return;
        }
        b = next(b);
    }
}

/// A bucket: its lock, its seq and its slots in one cache line.
#[repr(C, align(64))]
struct Bucket {
    lock: AtomicU32,
    seq: UnsafeCell<u64>,
    slots: UnsafeCell<[Slot; 4]>,
}

// SAFETY: `seq` and `slots` are only touched with `lock` held.
unsafe impl Sync for Bucket {}

impl LockedBucket for Bucket {
    #[inline(always)]
    fn parts(&self) -> (&AtomicU32, *mut u64, *mut [Slot]) {
        (&self.lock, self.seq.get(), self.slots.get())
    }
}

struct InLine {
    buckets: Vec<Bucket>,
}

impl InLine {
    fn new() -> InLine {
        let buckets = (0..BUCKETS)
            .map(|_| Bucket {
                lock: AtomicU32::new(0),
                seq: UnsafeCell::new(0),
                slots: UnsafeCell::new([Slot::default(); 4]),
            })
            .collect();
        InLine { buckets }
    }
}

impl Index for InLine {
    #[inline(always)]
    fn prefetch(&self, hash: u64) {
        prefetch_addr(&self.buckets[(hash >> 32) as usize & (BUCKETS - 1)]);
    }

    #[inline(always)]
    fn put(&self, hash: u64, lane: &mut Lane, key: &[u8]) {
        let b = (hash >> 32) as usize & (BUCKETS - 1);
        let next = |b: usize| (b + 1) & (BUCKETS - 1);
        put_probing(&self.buckets, b, next, hash as u32 | 1, lane, key);
    }
}

/// The same buckets, their locks and seqs apart.
struct Apart {
    locks: Vec<AtomicU32>,
    seqs: Vec<UnsafeCell<u64>>,
    slots: Vec<UnsafeCell<[Slot; 4]>>,
}

// SAFETY: `seqs[b]` and `slots[b]` are only touched with `locks[b]` held.
unsafe impl Sync for Apart {}

impl Apart {
    fn new() -> Apart {
        Apart {
            locks: (0..BUCKETS).map(|_| AtomicU32::new(0)).collect(),
            seqs: (0..BUCKETS).map(|_| UnsafeCell::new(0)).collect(),
            slots: (0..BUCKETS)
                .map(|_| UnsafeCell::new([Slot::default(); 4]))
                .collect(),
        }
    }
}

impl Index for Apart {
    #[inline(always)]
    fn prefetch(&self, hash: u64) {
        let b = (hash >> 32) as usize & (BUCKETS - 1);
        prefetch_addr(&self.locks[b]);
        prefetch_addr(self.slots[b].get());
    }

    #[inline(always)]
    fn put(&self, hash: u64, lane: &mut Lane, key: &[u8]) {
        let tag = hash as u32 | 1;
        let mut b = (hash >> 32) as usize & (BUCKETS - 1);
        loop {
            lock(&self.locks[b]);
            // SAFETY: the bucket's lock is held.
            let done = unsafe {
                put_in(
                    &mut *self.slots[b].get(),
                    &mut *self.seqs[b].get(),
                    tag,
                    lane,
                    key,
                )
            };
            self.locks[b].store(0, Ordering::Release);
            if done {
                return;
            }
            b = (b + 1) & (BUCKETS - 1);
        }
    }
}

// ------------------------------------------------------------------ `brline`, `line2`

/// Per-thread counts of the threads inside each shard (a "big-reader" lock): a put counts
/// itself in its own thread's line, then checks that no one holds the shard exclusively, so
/// that the shared side writes no line that another thread writes.
#[repr(C, align(128))]
struct Stripe([std::sync::atomic::AtomicU64; 64]);

struct BrLock {
    stripes: Vec<Stripe>,
    exclusive: Vec<std::sync::atomic::AtomicBool>,
}

impl BrLock {
    fn new() -> BrLock {
        BrLock {
            stripes: (0..16)
                .map(|_| Stripe(std::array::from_fn(|_| Default::default())))
                .collect(),
            exclusive: (0..64).map(|_| Default::default()).collect(),
        }
    }

    #[inline(always)]
    fn enter(&self, me: usize, shard: usize) -> &std::sync::atomic::AtomicU64 {
        let c = &self.stripes[me & 15].0[shard];
        c.fetch_add(1, Ordering::SeqCst);
        while self.exclusive[shard].load(Ordering::SeqCst) {
            std::hint::spin_loop();
        }
        c
    }
}

thread_local!(static ME: std::cell::Cell<usize> = const { std::cell::Cell::new(0) });

/// `line` behind a big-reader lock per shard.
struct BrInLine {
    inner: InLine,
    br: BrLock,
}

impl Index for BrInLine {
    #[inline(always)]
    fn prefetch(&self, hash: u64) {
        self.inner.prefetch(hash)
    }

    #[inline(always)]
    fn put(&self, hash: u64, lane: &mut Lane, key: &[u8]) {
        let c = self.br.enter(ME.with(|m| m.get()), (hash >> 58) as usize);
        self.inner.put(hash, lane, key);
        c.fetch_sub(1, Ordering::Release);
    }
}

/// A bucket of two cache lines: its lock, its seq and 9 slots.
#[repr(C, align(128))]
struct Bucket2 {
    lock: AtomicU32,
    seq: UnsafeCell<u64>,
    slots: UnsafeCell<[Slot; 9]>,
}

// SAFETY: `seq` and `slots` are only touched with `lock` held.
unsafe impl Sync for Bucket2 {}

impl LockedBucket for Bucket2 {
    #[inline(always)]
    fn parts(&self) -> (&AtomicU32, *mut u64, *mut [Slot]) {
        (&self.lock, self.seq.get(), self.slots.get())
    }
}

struct InLine2 {
    buckets: Vec<Bucket2>,
}

impl Index for InLine2 {
    #[inline(always)]
    fn prefetch(&self, hash: u64) {
        let b = &self.buckets[(hash >> 32) as usize % self.buckets.len()];
        prefetch_addr(b);
    }

    #[inline(always)]
    fn put(&self, hash: u64, lane: &mut Lane, key: &[u8]) {
        let n = self.buckets.len();
        let next = |b: usize| (b + 1) % n;
        put_probing(
            &self.buckets,
            (hash >> 32) as usize % n,
            next,
            hash as u32 | 1,
            lane,
            key,
        );
    }
}

// ------------------------------------------------------------------ driver

fn run<I: Index>(index: &I, threads: u64) -> f64 {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                ME.with(|m| m.set(t as usize));
                let mut lane = Lane {
                    buf: Vec::with_capacity(3 << 20),
                };
                let per = RECORDS / threads;
                for i in t * per..(t + 1) * per {
                    let mut key = [b'0'; 8];
                    let mut v = i + 1;
                    for d in key.iter_mut().rev() {
                        *d = b'0' + (v % 10) as u8;
                        v /= 10;
                    }
                    let hash = xxhash_rust::xxh3::xxh3_64_with_seed(&key, SEED);
                    index.prefetch(hash);
                    index.put(hash, &mut lane, &key);
                }
            });
        }
    });
    start.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(layout), Some(threads)) =
        (args.get(1), args.get(2).and_then(|t| t.parse::<u64>().ok()))
    else {
        eprintln!("usage: lock_layout shard|line|array|brline|line2 THREADS");
        std::process::exit(2);
    };
    let seconds = match layout.as_str() {
        "shard" => run(&Sharded::new(), threads.max(1)),
        "line" => run(&InLine::new(), threads.max(1)),
        "array" => run(&Apart::new(), threads.max(1)),
        "brline" => run(
            &BrInLine {
                inner: InLine::new(),
                br: BrLock::new(),
            },
            threads.max(1),
        ),
        "line2" => run(
            &InLine2 {
                buckets: (0..BUCKETS * 4 / 9)
                    .map(|_| Bucket2 {
                        lock: AtomicU32::new(0),
                        seq: UnsafeCell::new(0),
                        slots: UnsafeCell::new([Slot::default(); 9]),
                    })
                    .collect(),
            },
            threads.max(1),
        ),
        _ => {
            eprintln!("usage: lock_layout shard|line|array|brline|line2 THREADS");
            std::process::exit(2);
        }
    };
    println!("RESULT layout={layout} threads={threads} records={RECORDS} seconds={seconds:.4}");
}
