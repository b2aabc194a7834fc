//! Group commit on a slow disk: T threads put distinct keys into a `sync=always` database on a
//! `SimVfs` whose every fdatasync takes `--delay-ms`, for `--secs` seconds, and the run counts
//! the writes acknowledged and the file syncs the disk saw. Each sync of a group commit should
//! cover every write waiting when it starts: with T writers, close to T writes a sync.
//!
//! `cargo run --release -p kura-bench --example group_commit -- --kind kh --threads 1,2,4,8,16`
//!
//! Prints one line a run and, with `--reps` above 1, the median of each figure:
//!
//! ```text
//! RESULT kind=kh threads=8 delay_ms=3 seconds=3.00 writes=… syncs=… log_syncs=… commit_waits=… writes_per_sync=… writes_per_sec=…
//! ```
//!
//! `syncs` are the file syncs (`SimVfs::sync_count`: the filler's zeros included), `log_syncs`
//! the log's group syncs (the store's `syncs` counter), `commit_waits` the group commit leaders
//! that waited for the writers they expected (its `commit_waits`, 0 before it had one); all
//! from just after the open to just after the last writer stopped. `writes_per_sync` is
//! `writes / syncs`. `--ulog` puts an update log in front (`Logged`; the log on a `SimVfs` of
//! its own whose fsyncs are as slow): `ulog_syncs` and `writes_per_ulog_sync` are its own,
//! `writes_per_fsync` counts the fsyncs of both (the log is the commit point: the database's
//! files are synced only at `Logged`'s `applied` mark, every 2 s).

use clap::Parser;
use kura_engine::hash::DiskHash;
use kura_engine::io::SimVfs;
use kura_engine::tree::DiskTree;
use kura_engine::{OpenMode, Params, Store};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser)]
struct Opts {
    /// `kh` (the hash) or `kb` (the B+ tree); both write through the same log.
    #[arg(long, default_value = "kh")]
    kind: String,
    /// Writer thread counts, one run each (comma-separated).
    #[arg(long, default_value = "1,2,4,8,16", value_delimiter = ',')]
    threads: Vec<usize>,
    /// How long each run writes.
    #[arg(long, default_value_t = 3.0)]
    secs: f64,
    /// How long every fdatasync takes.
    #[arg(long, default_value_t = 3.0)]
    delay_ms: f64,
    /// Runs of each thread count (the median is printed after them).
    #[arg(long, default_value_t = 1)]
    reps: usize,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    vsiz: usize,
    /// With an update log (`sync=always`, its fsyncs as slow as the database's; in a
    /// temporary directory): `ulog_syncs` counts its fsyncs.
    #[arg(long)]
    ulog: bool,
}

struct Run {
    secs: f64,
    writes: u64,
    syncs: u64,
    log_syncs: u64,
    waits: u64,
    ulog_syncs: u64,
}

/// A counter of the store (0 when it has none of that name).
fn counter(db: &dyn Store, name: &str) -> u64 {
    db.counters()
        .iter()
        .find(|(k, _)| *k == name)
        .map_or(0, |c| c.1)
}

fn run(o: &Opts, threads: usize) -> Run {
    let fs = SimVfs::new();
    fs.set_sync_delay(Duration::from_secs_f64(o.delay_ms / 1000.0));
    let params = Params::parse("sync=always").unwrap();
    let vfs = Arc::new(fs.clone());
    let db: Arc<dyn Store> = match o.kind.as_str() {
        "kh" => {
            Arc::new(DiskHash::open_with(Path::new("/sim/db.kh"), &params, vfs, false).unwrap())
        }
        "kb" => Arc::new(
            DiskTree::open_mode(Path::new("/sim/db.kb"), &params, vfs, OpenMode::Create).unwrap(),
        ),
        k => panic!("--kind kh or kb, not {k}"),
    };
    let inner = db.clone();
    let ulog = o.ulog.then(|| {
        let ufs = SimVfs::new();
        ufs.set_sync_delay(Duration::from_secs_f64(o.delay_ms / 1000.0));
        let mut c = kura_engine::ulog::Config::new("/sim/ulog", 1);
        c.sync = kura_engine::SyncMode::Always;
        c.vfs = Arc::new(ufs);
        // The simulated file system compares a mapped file's pages at every call: small files.
        c.file_size = 1 << 20;
        kura_engine::ulog::Ulog::open(c).unwrap()
    });
    let db: Arc<dyn Store> = match &ulog {
        Some(l) => kura_engine::ulog::logged::Logged::new(db, l.clone()).unwrap(),
        None => db,
    };
    let ulog0 = ulog.as_ref().map_or(0, |l| l.sync_count());
    let stop = Arc::new(AtomicBool::new(false));
    let syncs0 = fs.sync_count();
    let log0 = counter(&*inner, "syncs");
    let waits0 = counter(&*inner, "commit_waits");
    let t0 = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let db = db.clone();
            let stop = stop.clone();
            let vsiz = o.vsiz;
            std::thread::spawn(move || {
                let value = vec![b'v'; vsiz];
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    db.put(format!("t{t:02}-{n:010}").as_bytes(), &value)
                        .unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(o.secs));
    stop.store(true, Ordering::Relaxed);
    let writes: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let secs = t0.elapsed().as_secs_f64();
    let r = Run {
        secs,
        writes,
        syncs: fs.sync_count() - syncs0,
        log_syncs: counter(&*inner, "syncs") - log0,
        waits: counter(&*inner, "commit_waits") - waits0,
        ulog_syncs: ulog.as_ref().map_or(0, |l| l.sync_count()) - ulog0,
    };
    db.close().unwrap();
    r
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let o = Opts::parse();
    for &threads in &o.threads {
        let mut runs = Vec::new();
        for _ in 0..o.reps {
            let r = run(&o, threads);
            println!(
                "RESULT kind={} threads={threads} delay_ms={} seconds={:.2} writes={} syncs={} \
                 log_syncs={} commit_waits={} ulog_syncs={} writes_per_sync={:.2} \
                 writes_per_ulog_sync={:.2} writes_per_fsync={:.2} writes_per_sec={:.0}",
                o.kind,
                o.delay_ms,
                r.secs,
                r.writes,
                r.syncs,
                r.log_syncs,
                r.waits,
                r.ulog_syncs,
                r.writes as f64 / r.syncs.max(1) as f64,
                r.writes as f64 / r.ulog_syncs.max(1) as f64,
                r.writes as f64 / (r.syncs + r.ulog_syncs).max(1) as f64,
                r.writes as f64 / r.secs
            );
            runs.push(r);
        }
        if o.reps > 1 {
            let per_sync = median(
                runs.iter()
                    .map(|r| r.writes as f64 / r.syncs.max(1) as f64)
                    .collect(),
            );
            let per_fsync = median(
                runs.iter()
                    .map(|r| r.writes as f64 / (r.syncs + r.ulog_syncs).max(1) as f64)
                    .collect(),
            );
            let per_sec = median(runs.iter().map(|r| r.writes as f64 / r.secs).collect());
            println!(
                "MEDIAN kind={} threads={threads} delay_ms={} reps={} writes_per_sync={per_sync:.2} \
                 writes_per_fsync={per_fsync:.2} writes_per_sec={per_sec:.0}",
                o.kind, o.delay_ms, o.reps
            );
        }
    }
}
