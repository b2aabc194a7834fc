//! How fast this machine hands out fresh memory: THREADS threads each map their share of
//! MEGABYTES of anonymous memory (advised into huge pages, or kept off them), write one byte
//! into every 4 KiB page, and unmap it. Prints the elapsed time and the rate.
//!
//! Run: `cargo run --release -p kura-bench --example fault_rate -- THREADS MEGABYTES HUGE`
//! (HUGE 1 or 0), several times in a row: on a virtual machine the first run can be an order of
//! magnitude slower than the next ones, when the hypervisor backs guest memory on first touch.
//! Results: docs/bench-history/engine-hash.md, "A fifteenth engine run, and what moves the
//! two-writer ratio".

use std::time::Instant;

mod anon;

fn fault(bytes: usize, huge: bool) {
    let base = anon::map(bytes, huge);
    for at in (0..bytes).step_by(4096) {
        // SAFETY: `at < bytes`, inside the mapping, which nothing else uses.
        unsafe { std::ptr::write_volatile(base.add(at), 1) };
    }
    // SAFETY: the whole mapping made above, no longer used.
    unsafe { anon::unmap(base, bytes) };
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| {
            a.parse()
                .expect("usage: fault_rate THREADS MEGABYTES HUGE(0|1)")
        })
        .collect();
    let [threads, megabytes, huge] = args[..] else {
        panic!("usage: fault_rate THREADS MEGABYTES HUGE(0|1)");
    };
    let share = (megabytes << 20) / threads.max(1);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| fault(share, huge == 1));
        }
    });
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "threads={threads} megabytes={megabytes} huge={huge}: {secs:.3} s ({:.2} GB/s)",
        megabytes as f64 / 1024.0 / secs
    );
}
