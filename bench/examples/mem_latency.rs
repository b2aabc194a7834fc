//! What one cache miss costs on this machine, by where the line comes from: a random pointer
//! chase through working sets of growing size (on huge pages, so that the TLB does not
//! count), and a cache line handed back and forth between two threads (each write by one
//! thread must take the line from the other core).
//!
//! Run: `cargo run --release -p kura-bench --example mem_latency`. Prints nanoseconds per
//! dependent load for each working set, then per one-way hand-off of a line between cores.
//! Results and what they mean for the index: docs/benchmarks/engine.md, "What a miss costs here".

mod anon;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

const LINE: usize = 64;

/// Nanoseconds per load of a chase through `bytes` of memory, one line per step, in a random
/// cyclic order (each load's address comes from the previous load).
fn chase(bytes: usize) -> f64 {
    let lines = bytes / LINE;
    let p = anon::map(bytes, true);
    let base = p.cast::<usize>();
    // A random cycle through every line (Sattolo's shuffle), with a xorshift generator.
    let mut order: Vec<usize> = (0..lines).collect();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in (1..lines).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let j = (x % i as u64) as usize;
        order.swap(i, j);
    }
    for w in 0..lines {
        let from = order[w];
        let to = order[(w + 1) % lines];
        // SAFETY: both are line indexes inside the mapping of `bytes` bytes.
        unsafe { *base.add(from * LINE / 8) = base.add(to * LINE / 8) as usize };
    }
    let steps = (lines * 4).max(4_000_000);
    let mut at = base as usize;
    for _ in 0..lines {
        // SAFETY: every stored value is the address of a line of the mapping.
        at = unsafe { *(at as *const usize) };
    }
    let t = Instant::now();
    for _ in 0..steps {
        // SAFETY: as above.
        at = unsafe { *(at as *const usize) };
    }
    let ns = t.elapsed().as_secs_f64() * 1e9 / steps as f64;
    std::hint::black_box(at);
    // SAFETY: the mapping made above, no longer used.
    unsafe { anon::unmap(p, bytes) };
    ns
}

/// Nanoseconds per one-way hand-off of one cache line between two threads: each thread waits
/// for the counter to reach its turn, then increments it.
fn ping_pong(rounds: u64) -> f64 {
    #[repr(align(128))]
    struct Padded(AtomicU64);
    let c = Padded(AtomicU64::new(0));
    let t = Instant::now();
    std::thread::scope(|s| {
        for me in 0..2u64 {
            let c = &c;
            s.spawn(move || {
                let mut next = me;
                while next < rounds * 2 {
                    while c.0.load(Ordering::Acquire) != next {
                        std::hint::spin_loop();
                    }
                    c.0.store(next + 1, Ordering::Release);
                    next += 2;
                }
            });
        }
    });
    t.elapsed().as_secs_f64() * 1e9 / (rounds * 2) as f64
}

fn main() {
    for kib in [
        64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288,
    ] {
        let ns = chase(kib << 10);
        println!("RESULT chase_kib={kib} ns_per_load={ns:.1}");
    }
    let ns = ping_pong(2_000_000);
    println!("RESULT handoff ns_one_way={ns:.1}");
}
