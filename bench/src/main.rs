//! `kura-bench`: the workloads of Tokyo Cabinet's `tchtest write` / `tchtest read` (and
//! `tchmttest` for several threads) and of Kyoto Cabinet's `kchashtest order`, run against any
//! Kura database name (`/tmp/x.kh#sync=none`, `*`, …).
//!
//! Records are keyed `%08d` from `00000001` to N, and every value equals its key (8 bytes each),
//! as in tchtest (or, with `--vsiz N`, is N bytes: the key, then filler). With T threads each
//! thread handles a disjoint slice of the key range. With `--rnd` each thread visits its slice in
//! a shuffled order computed before the timer starts.
//!
//! Every measurement prints a human line and one machine-readable line:
//!
//! ```text
//! RESULT op=write threads=2 records=1000000 rnd=0 seconds=0.812 ops_per_sec=1231527 file_size=…
//! ```
//!
//! Timing: `write` and `read` time everything from `open` to the end of `close` (the write also
//! includes an explicit `sync`), as tchtest does; `order` times its phases separately, as
//! kchashtest does (open, set, get, remove, close). `scan` walks every record in key order
//! (`tcbmgr list`'s workload), timed from open to close.
//!
//! A memory kind (`+`, `*`) starts empty in every process: `read` and `scan` given `--fill` first
//! store the records `write` would, untimed, so that the same commands (and scripts) run against
//! `+` and against an on-disk kind, where `--fill` finds the records there and does nothing
//! (`--fill=all`: every key in order, for a read with other options than its write's).
//!
//! `grow`, `reopen` and `big` measure the database at scale (insert rate as it grows, memory,
//! open and recovery time, databases beyond 4 GiB); see the `scale` module.

mod scale;

use clap::{Args, Parser, Subcommand};
use kura_engine::hash::DiskHash;
use kura_engine::name::split_name;
use kura_engine::store::KeyRange;
use kura_engine::Store;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "kura-bench",
    version,
    about = "Tokyo Cabinet / Kyoto Cabinet style benchmark for Kura databases",
    long_about = "Runs the workloads of Tokyo Cabinet's `tchtest write`/`tchtest read` \
                  (`tchmttest` with threads) and Kyoto Cabinet's `kchashtest order` against \
                  a Kura database name, e.g. `/tmp/x.kh#sync=none` or `*`. Keys are `%08d` \
                  from 00000001 to N and each value equals its key. Prints one `RESULT …` \
                  line per measurement."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Store N records (open, put every record, sync, close; all timed).
    Write(Common),
    /// Read and verify N records written by `write` (open, get every record, close; all timed).
    /// Exits non-zero when any record is missing or has a wrong value.
    Read(Common),
    /// Walk every record in key order (an ordered kind; any other kind in its own order) and
    /// verify it (open, walk, close; all timed). One thread; exits non-zero when the records are
    /// out of order, a value is wrong, or fewer than N were seen (unless `--draw`).
    Scan(Common),
    /// Write, read (verifying), then remove N records in one open database, timing each phase
    /// like `kchashtest order`. Exits non-zero on any missing record.
    Order(Common),
    /// Insert N records in one thread, printing the insert rate of every interval and the
    /// process's memory afterwards (`--verify`: read every record back; `--crash`: SIGKILL
    /// instead of closing).
    Grow(scale::GrowArgs),
    /// Time the open (recovery included) of an existing database, print its count and the
    /// process's memory, optionally verify records, then close (or `--kill`: SIGKILL).
    Reopen(scale::ReopenArgs),
    /// Write N large values (default 5000 of 1 MiB), close, reopen, verify the count and a
    /// sample of values.
    Big(scale::BigArgs),
}

#[derive(Args, Clone)]
struct Common {
    /// Database name, opened verbatim (`PATH.kh#sync=none`, `*`, …).
    name: String,
    /// Number of records (keys 00000001..N).
    #[arg(short = 'n', long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    records: u64,
    /// Number of threads; each handles a disjoint slice of the key range.
    #[arg(short = 't', long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1024))]
    threads: u64,
    /// Visit each thread's slice in a shuffled order (computed before timing).
    #[arg(long)]
    rnd: bool,
    /// With --rnd: draw every key at random, with replacement, from the whole range 1..N,
    /// as `tchtest -rnd` and `kchashtest -rnd` do (so writes store fewer distinct keys and
    /// reads and removes meet misses, which are then expected and not errors).
    #[arg(long, requires = "rnd")]
    draw: bool,
    /// Seed for the shuffles of --rnd.
    #[arg(long, default_value_t = 19_780_211)]
    seed: u64,
    /// `write` to a `.kh` only: split the keys between the threads by index shard
    /// (`DiskHash::shard_of`) instead of by key range, so that no two threads write to the
    /// same shard. The split is computed after the open and is not timed.
    #[arg(long, conflicts_with = "draw")]
    by_shard: bool,
    /// Value size in bytes: 0 makes every value equal its key (8 bytes, as tchtest); N > 0 makes
    /// it N bytes, the key followed by filler (`--vsiz 100`).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1 << 30))]
    vsiz: u64,
    /// `read` and `scan` only: when the database opens empty (a memory kind such as `+` in a
    /// fresh process), first store records, not timed: `--fill` (or `--fill=same`) the records
    /// `write` with the same options would store (same keys, values and order), `--fill=all`
    /// every key 1..N in order. A database that holds records is left as it is.
    #[arg(long, value_enum, num_args = 0..=1, require_equals = true, default_missing_value = "same")]
    fill: Option<Fill>,
    /// `read` with `--draw` only: the number of lookups, drawn from the whole range 1..N
    /// (default: N).
    #[arg(long, requires = "draw", value_parser = clap::value_parser!(u64).range(1..))]
    reads: Option<u64>,
}

/// What `--fill` stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Fill {
    /// The records of `write` with the same options.
    Same,
    /// Every key 1..N, in order.
    All,
}

impl Common {
    /// Refuse the options that `cmd` does not take.
    fn only(&self, cmd: &str) -> BenchResult<()> {
        if self.by_shard && cmd != "write" {
            return Err("--by-shard is for `write` only".into());
        }
        if self.fill.is_some() && cmd != "read" && cmd != "scan" {
            return Err("--fill is for `read` and `scan` only".into());
        }
        if self.reads.is_some() && cmd != "read" {
            return Err("--reads is for `read` only".into());
        }
        if cmd == "scan" && (self.threads != 1 || self.rnd) {
            return Err("`scan` walks in one thread, in key order (no -t, no --rnd)".into());
        }
        Ok(())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let res = match &cli.cmd {
        Cmd::Write(c) => cmd_write(c),
        Cmd::Read(c) => cmd_read(c),
        Cmd::Scan(c) => cmd_scan(c),
        Cmd::Order(c) => cmd_order(c),
        Cmd::Grow(a) => scale::cmd_grow(a),
        Cmd::Reopen(a) => scale::cmd_reopen(a),
        Cmd::Big(a) => scale::cmd_big(a),
    };
    match res {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("kura-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

type BenchResult<T> = Result<T, String>;

// ----- keys and work split -----

/// Format `n` as `%08d` into `buf`, returning the used part.
fn key_of(n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    let mut v = n;
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    while buf.len() - i < 8 {
        i -= 1;
        buf[i] = b'0';
    }
    &buf[i..]
}

/// SplitMix64: small, fast and good enough to shuffle a key range.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..bound` (multiply-shift; the bias is negligible for these sizes).
    fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(bound)) >> 64) as u64
    }
}

/// Per-thread key numbers for one phase: thread `t` of `T` gets `1 + N*t/T .. 1 + N*(t+1)/T`,
/// in order or shuffled (Fisher–Yates).
/// With `--draw`, thread `t` draws as many keys from the whole range instead (in the read
/// phase, 2, `--reads` of them in all when given).
fn plan(c: &Common, phase: u64) -> Vec<Vec<u64>> {
    let n = c.records;
    let t = c.threads;
    (0..t)
        .map(|i| {
            let lo = 1 + (u128::from(n) * u128::from(i) / u128::from(t)) as u64;
            let hi = 1 + (u128::from(n) * u128::from(i + 1) / u128::from(t)) as u64;
            if c.draw {
                let mut rng =
                    SplitMix(c.seed ^ (phase << 48) ^ i.wrapping_mul(0x2545_F491_4F6C_DD1D));
                let ops = match c.reads {
                    Some(r) if phase == 2 => {
                        let r = u128::from(r);
                        (r * u128::from(i + 1) / u128::from(t) - r * u128::from(i) / u128::from(t))
                            as u64
                    }
                    _ => hi - lo,
                };
                return (0..ops).map(|_| 1 + rng.below(n)).collect();
            }
            let mut keys: Vec<u64> = (lo..hi).collect();
            shuffle_if(c, phase, i, &mut keys);
            keys
        })
        .collect()
}

/// With `--rnd`, shuffle thread `i`'s keys (Fisher–Yates).
fn shuffle_if(c: &Common, phase: u64, i: u64, keys: &mut [u64]) {
    if c.rnd {
        let mut rng = SplitMix(c.seed ^ (phase << 48) ^ i.wrapping_mul(0x2545_F491_4F6C_DD1D));
        for j in (1..keys.len()).rev() {
            let k = rng.below(j as u64 + 1) as usize;
            keys.swap(j, k);
        }
    }
}

/// `plan` for `--by-shard`: thread `t` of `T` gets the keys of shards `s` with
/// `s * T / SHARDS == t`, in key order (or shuffled with `--rnd`).
fn plan_by_shard(c: &Common, phase: u64, db: &DiskHash) -> Vec<Vec<u64>> {
    let t = c.threads as usize;
    let mut keys = vec![Vec::new(); t];
    let mut buf = [0u8; 20];
    for n in 1..=c.records {
        let s = db.shard_of(key_of(n, &mut buf));
        keys[s * t / DiskHash::SHARDS].push(n);
    }
    for (i, k) in keys.iter_mut().enumerate() {
        shuffle_if(c, phase, i as u64, k);
    }
    keys
}

/// The value of each key: the key itself (`--vsiz 0`), or `vsiz` bytes, the key then filler.
struct Values {
    vsiz: usize,
    buf: Vec<u8>,
}

impl Values {
    fn new(vsiz: u64) -> Values {
        let vsiz = vsiz as usize;
        Values {
            vsiz,
            buf: (0..vsiz).map(|i| b'a' + (i % 26) as u8).collect(),
        }
    }

    /// The value of `key`.
    fn of<'a>(&'a mut self, key: &'a [u8]) -> &'a [u8] {
        if self.vsiz == 0 {
            return key;
        }
        let n = key.len().min(self.vsiz);
        self.buf[..n].copy_from_slice(&key[..n]);
        &self.buf
    }
}

// ----- phases -----

#[derive(Default)]
struct Tally {
    /// Records not found (get / remove).
    misses: u64,
    /// Records found with a wrong value (get).
    bad: u64,
}

#[derive(Clone, Copy)]
enum Op {
    Put,
    Get,
    Remove,
}

/// Run one phase over the planned keys, one thread per slice, with values of `vsiz` bytes
/// (0: equal to their keys). Returns the elapsed time.
fn run_phase(
    db: &dyn Store,
    plan: &[Vec<u64>],
    op: Op,
    vsiz: u64,
) -> BenchResult<(Duration, Tally)> {
    let start = Instant::now();
    let results: Vec<BenchResult<Tally>> = std::thread::scope(|s| {
        let handles: Vec<_> = plan
            .iter()
            .map(|keys| s.spawn(move || worker(db, keys, op, vsiz)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a worker thread panicked".into()))
            })
            .collect()
    });
    let elapsed = start.elapsed();
    let mut total = Tally::default();
    for r in results {
        let t = r?;
        total.misses += t.misses;
        total.bad += t.bad;
    }
    Ok((elapsed, total))
}

fn worker(db: &dyn Store, keys: &[u64], op: Op, vsiz: u64) -> BenchResult<Tally> {
    let mut tally = Tally::default();
    let mut buf = [0u8; 20];
    let mut values = Values::new(vsiz);
    for &n in keys {
        let key = key_of(n, &mut buf);
        match op {
            Op::Put => {
                db.put(key, values.of(key))
                    .map_err(|e| format!("put {}: {e}", String::from_utf8_lossy(key)))?;
            }
            Op::Get => match db
                .get(key)
                .map_err(|e| format!("get {}: {e}", String::from_utf8_lossy(key)))?
            {
                None => tally.misses += 1,
                Some(r) if r.value != values.of(key) => tally.bad += 1,
                Some(_) => {}
            },
            Op::Remove => {
                if !db
                    .out(key)
                    .map_err(|e| format!("remove {}: {e}", String::from_utf8_lossy(key)))?
                {
                    tally.misses += 1;
                }
            }
        }
    }
    Ok(tally)
}

fn open(name: &str) -> BenchResult<Arc<dyn Store>> {
    kura_engine::open(name).map_err(|e| format!("open `{name}`: {e}"))
}

/// Open `name`, which must name an on-disk hash (`PATH.kh#…`), as a `DiskHash`.
fn open_hash(name: &str) -> BenchResult<Arc<DiskHash>> {
    let (path, params) = split_name(name).map_err(|e| format!("open `{name}`: {e}"))?;
    if !path.ends_with(".kh") {
        return Err(format!(
            "--by-shard needs an on-disk hash (`PATH.kh`), not `{name}`"
        ));
    }
    DiskHash::open(Path::new(path), &params)
        .map(Arc::new)
        .map_err(|e| format!("open `{name}`: {e}"))
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn rate(ops: u64, d: Duration) -> u64 {
    let s = d.as_secs_f64();
    if s > 0.0 {
        (ops as f64 / s).round() as u64
    } else {
        0
    }
}

/// The machine-readable line. `extra` is appended as is (`key=value` pairs).
fn result_line(op: &str, c: &Common, ops: u64, d: Duration, extra: &str) {
    println!(
        "RESULT op={op} threads={} records={} rnd={} seconds={:.3} ops_per_sec={}{}{} name={}",
        c.threads,
        ops,
        u8::from(c.rnd),
        secs(d),
        rate(ops, d),
        if extra.is_empty() { "" } else { " " },
        extra,
        c.name
    );
}

fn header(what: &str, c: &Common) {
    println!(
        "kura-bench {what}: name={} records={} threads={} order={}{}{}",
        c.name,
        c.records,
        c.threads,
        if c.rnd { "random" } else { "sequential" },
        if c.rnd {
            format!(" seed={}", c.seed)
        } else {
            String::new()
        },
        if c.vsiz > 0 {
            format!(" vsiz={}", c.vsiz)
        } else {
            String::new()
        }
    );
}

/// The process's peak resident memory so far (VmHWM, KiB; 0 where /proc is missing).
fn vm_hwm_kb() -> u64 {
    scale::mem().hwm
}

/// `--fill`: when `db` opened empty, store the records `write` would (untimed by the callers).
/// Returns how long that took (zero when the database held records or `--fill` is not given).
fn fill_if_empty(c: &Common, db: &dyn Store) -> BenchResult<Duration> {
    let Some(fill) = c.fill else {
        return Ok(Duration::ZERO);
    };
    if db.count() != 0 {
        return Ok(Duration::ZERO);
    }
    let keys = match fill {
        Fill::Same => plan(c, 1),
        Fill::All => plan(
            &Common {
                rnd: false,
                draw: false,
                ..c.clone()
            },
            1,
        ),
    };
    let t0 = Instant::now();
    run_phase(db, &keys, Op::Put, c.vsiz)?;
    let d = t0.elapsed();
    println!(
        "  filled the empty database with the records of `write` in {:.3}s (not timed); \
         records now: {}",
        secs(d),
        db.count()
    );
    Ok(d)
}

fn cmd_write(c: &Common) -> BenchResult<bool> {
    c.only("write")?;
    header("write", c);
    let mut keys = if c.by_shard { Vec::new() } else { plan(c, 1) };
    let start = Instant::now();
    let (db, hash) = if c.by_shard {
        let h = open_hash(&c.name)?;
        (Arc::clone(&h) as Arc<dyn Store>, Some(h))
    } else {
        (open(&c.name)?, None)
    };
    let t_open = start.elapsed();
    // Not timed: the split by shard needs the open database (its hash seed).
    let t_plan = Instant::now();
    if let Some(h) = hash {
        keys = plan_by_shard(c, 1, &h);
        let sizes: Vec<String> = keys.iter().map(|k| k.len().to_string()).collect();
        println!("  keys per thread (by shard): {}", sizes.join(" "));
    }
    let t_plan = t_plan.elapsed();
    let before = db.count();
    if before != 0 {
        println!("  note: the database already holds {before} records");
    }
    let (t_put, _) = run_phase(db.as_ref(), &keys, Op::Put, c.vsiz)?;
    let t0 = Instant::now();
    db.sync().map_err(|e| format!("sync: {e}"))?;
    let t_sync = t0.elapsed();
    let count = db.count();
    let size_synced = db.size();
    let kind = db.kind().name();
    let t0 = Instant::now();
    db.close().map_err(|e| format!("close: {e}"))?;
    let mut t_close = t0.elapsed();
    // Not timed: the size after close includes what close writes (the `.kh` checkpoint);
    // memory kinds report 0 once closed, so fall back to the size after the sync.
    let t_size = Instant::now();
    let size = match db.size() {
        0 => size_synced,
        s => s,
    };
    let t_size = t_size.elapsed();
    let t0 = Instant::now();
    drop(db);
    t_close += t0.elapsed();
    let total = start.elapsed() - t_size - t_plan;
    println!(
        "  kind: {kind}; records now: {count}; size: {size} bytes\n  \
         open {:.3}s  put {:.3}s  sync {:.3}s  close {:.3}s  total {:.3}s  ({} puts/s)",
        secs(t_open),
        secs(t_put),
        secs(t_sync),
        secs(t_close),
        secs(total),
        rate(c.records, total)
    );
    result_line(
        "write",
        c,
        c.records,
        total,
        &format!(
            "file_size={size} count={count} put_seconds={:.3} sync_seconds={:.3} close_seconds={:.3} by_shard={} vm_hwm_kb={}",
            secs(t_put),
            secs(t_sync),
            secs(t_close),
            u8::from(c.by_shard),
            vm_hwm_kb()
        ),
    );
    Ok(true)
}

fn cmd_read(c: &Common) -> BenchResult<bool> {
    c.only("read")?;
    header("read", c);
    let keys = plan(c, 2);
    let ops: u64 = keys.iter().map(|k| k.len() as u64).sum();
    let start = Instant::now();
    let db = open(&c.name)?;
    let t_open = start.elapsed();
    let t_fill = fill_if_empty(c, db.as_ref())?;
    let (t_get, tally) = run_phase(db.as_ref(), &keys, Op::Get, c.vsiz)?;
    let size = db.size();
    let t0 = Instant::now();
    db.close().map_err(|e| format!("close: {e}"))?;
    drop(db);
    let t_close = t0.elapsed();
    let total = start.elapsed() - t_fill;
    println!(
        "  open {:.3}s  get {:.3}s  close {:.3}s  total {:.3}s  ({} gets/s)  misses {}  wrong values {}",
        secs(t_open),
        secs(t_get),
        secs(t_close),
        secs(total),
        rate(ops, total),
        tally.misses,
        tally.bad
    );
    let fill = if c.fill.is_some() {
        format!(" fill_seconds={:.3}", secs(t_fill))
    } else {
        String::new()
    };
    result_line(
        "read",
        c,
        ops,
        total,
        &format!(
            "file_size={size} misses={} bad={} get_seconds={:.3} vm_hwm_kb={}{fill}",
            tally.misses,
            tally.bad,
            secs(t_get),
            vm_hwm_kb()
        ),
    );
    let ok = (tally.misses == 0 || c.draw) && tally.bad == 0;
    if !ok {
        eprintln!(
            "kura-bench: read: {} missing and {} wrong records",
            tally.misses, tally.bad
        );
    }
    Ok(ok)
}

fn cmd_order(c: &Common) -> BenchResult<bool> {
    c.only("order")?;
    header("order", c);
    let set_keys = plan(c, 1);
    let get_keys = plan(c, 2);
    let rem_keys = plan(c, 3);
    let n = c.records;

    let start = Instant::now();
    let db = open(&c.name)?;
    let t_open = start.elapsed();
    result_line("open", c, 0, t_open, "");

    let (t_set, _) = run_phase(db.as_ref(), &set_keys, Op::Put, c.vsiz)?;
    // Not timed: the size after the writes (not synced: kchashtest order syncs nothing either).
    let count = db.count();
    let size = db.size();
    println!(
        "  set     {:.3}s ({} ops/s); records now {count}; size {size} bytes",
        secs(t_set),
        rate(n, t_set)
    );
    result_line(
        "set",
        c,
        n,
        t_set,
        &format!("file_size={size} count={count}"),
    );

    let (t_get, got) = run_phase(db.as_ref(), &get_keys, Op::Get, c.vsiz)?;
    println!(
        "  get     {:.3}s ({} ops/s); misses {}, wrong values {}",
        secs(t_get),
        rate(n, t_get),
        got.misses,
        got.bad
    );
    result_line(
        "get",
        c,
        n,
        t_get,
        &format!("misses={} bad={}", got.misses, got.bad),
    );

    let (t_rem, removed) = run_phase(db.as_ref(), &rem_keys, Op::Remove, c.vsiz)?;
    let count_after = db.count();
    println!(
        "  remove  {:.3}s ({} ops/s); misses {}; records now {count_after}",
        secs(t_rem),
        rate(n, t_rem),
        removed.misses
    );
    result_line(
        "remove",
        c,
        n,
        t_rem,
        &format!("misses={} count={count_after}", removed.misses),
    );

    let t0 = Instant::now();
    let size_after = db.size();
    db.close().map_err(|e| format!("close: {e}"))?;
    drop(db);
    let t_close = t0.elapsed();
    result_line("close", c, 0, t_close, &format!("file_size={size_after}"));

    let total = t_open + t_set + t_get + t_rem + t_close;
    println!(
        "  open {:.3}s  close {:.3}s  total {:.3}s ({} ops/s over {} operations)",
        secs(t_open),
        secs(t_close),
        secs(total),
        rate(3 * n, total),
        3 * n
    );
    result_line("order", c, 3 * n, total, "");

    let ok = (c.draw || got.misses == 0 && removed.misses == 0) && got.bad == 0;
    if !ok {
        eprintln!(
            "kura-bench: order: get missed {} and found {} wrong; remove missed {}",
            got.misses, got.bad, removed.misses
        );
    }
    Ok(ok)
}

fn cmd_scan(c: &Common) -> BenchResult<bool> {
    c.only("scan")?;
    header("scan", c);
    let start = Instant::now();
    let db = open(&c.name)?;
    let t_open = start.elapsed();
    let t_fill = fill_if_empty(c, db.as_ref())?;
    let count = db.count();
    let ordered = db.kind().ordered();
    let t0 = Instant::now();
    let (mut seen, mut unordered, mut bad) = (0u64, 0u64, 0u64);
    let mut prev: Vec<u8> = Vec::with_capacity(64);
    let mut values = Values::new(c.vsiz);
    let mut visit = |k: &[u8], v: &[u8], _| {
        if seen > 0 && ordered && k <= prev.as_slice() {
            unordered += 1;
        }
        if v != values.of(k) {
            bad += 1;
        }
        prev.clear();
        prev.extend_from_slice(k);
        seen += 1;
        Ok(true)
    };
    let damaged = if ordered {
        db.for_each_in_range(&KeyRange::new(b"", None), &mut visit)
            .map(|_| 0)
    } else {
        db.for_each_record(&mut visit)
    }
    .map_err(|e| format!("scan: {e}"))?;
    let t_scan = t0.elapsed();
    let size = db.size();
    let t0 = Instant::now();
    db.close().map_err(|e| format!("close: {e}"))?;
    drop(db);
    let t_close = t0.elapsed();
    let total = start.elapsed() - t_fill;
    println!(
        "  open {:.3}s  scan {:.3}s  close {:.3}s  total {:.3}s  ({} records/s)  records {seen} \
         ({}); out of order {unordered}; wrong values {bad}",
        secs(t_open),
        secs(t_scan),
        secs(t_close),
        secs(total),
        rate(seen, total),
        if ordered {
            "key order"
        } else {
            "unordered kind"
        },
    );
    let fill = if c.fill.is_some() {
        format!(" fill_seconds={:.3}", secs(t_fill))
    } else {
        String::new()
    };
    result_line(
        "scan",
        c,
        seen,
        total,
        &format!(
            "file_size={size} count={count} ordered={} unordered={unordered} bad={bad} \
             scan_seconds={:.3} open_seconds={:.3} vm_hwm_kb={}{fill}",
            u8::from(ordered),
            secs(t_scan),
            secs(t_open),
            vm_hwm_kb()
        ),
    );
    let complete = seen == count && (c.draw || seen == c.records);
    let ok = complete && unordered == 0 && bad == 0 && damaged == 0;
    if !ok {
        eprintln!(
            "kura-bench: scan: {seen} records seen of {count} ({} expected), {unordered} out of \
             order, {bad} wrong values, {damaged} damaged regions passed over",
            c.records
        );
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn common(records: u64, threads: u64, rnd: bool) -> Common {
        Common {
            name: "*".into(),
            records,
            threads,
            rnd,
            draw: false,
            seed: 7,
            by_shard: false,
            vsiz: 0,
            fill: None,
            reads: None,
        }
    }

    #[test]
    fn by_shard_gives_each_thread_whole_shards_and_every_key_once() {
        let dir = std::env::temp_dir().join(format!("kura-bench-shard-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let name = format!("{}/s.kh", dir.display());
        let db = open_hash(&name).unwrap();
        for (t, rnd) in [(2, false), (3, true)] {
            let c = common(5000, t, rnd);
            let p = plan_by_shard(&c, 1, &db);
            assert_eq!(p.len() as u64, t);
            let mut b = [0u8; 20];
            let mut owner = vec![None; DiskHash::SHARDS];
            for (i, keys) in p.iter().enumerate() {
                assert!(keys.len() > 1000, "thread {i} got {} keys", keys.len());
                for &n in keys {
                    let s = db.shard_of(key_of(n, &mut b));
                    assert_eq!(
                        *owner[s].get_or_insert(i),
                        i,
                        "shard {s} split between threads"
                    );
                }
            }
            let mut all: Vec<u64> = p.concat();
            assert!(
                !all.windows(2).all(|w| w[0] < w[1]),
                "the keys interleave, not ranges"
            );
            all.sort_unstable();
            assert_eq!(all, (1..=5000).collect::<Vec<_>>());
        }
        assert!(open_hash("*").is_err(), "--by-shard needs a .kh");
        drop(db);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn draw_picks_keys_with_replacement_from_the_whole_range() {
        let mut c = common(1000, 2, true);
        c.draw = true;
        let p = plan(&c, 1);
        assert_eq!(p.iter().map(Vec::len).sum::<usize>(), 1000);
        let all: std::collections::BTreeSet<u64> = p.iter().flatten().copied().collect();
        assert!(all.iter().all(|&k| (1..=1000).contains(&k)));
        assert!(all.len() < 800, "draws repeat keys: {} distinct", all.len());
        assert!(
            p[0].iter().any(|&k| k > 500),
            "each thread draws from the whole range"
        );
    }

    #[test]
    fn values_are_the_key_or_vsiz_bytes_starting_with_it() {
        let mut v = Values::new(0);
        assert_eq!(v.of(b"00000007"), b"00000007");
        let mut v = Values::new(100);
        let got = v.of(b"00000007").to_vec();
        assert_eq!(got.len(), 100);
        assert!(got.starts_with(b"00000007"));
        assert_eq!(&got[8..11], b"ijk");
        let mut v = Values::new(4);
        assert_eq!(v.of(b"00000007"), b"0000");
    }

    #[test]
    fn reads_draws_that_many_lookups_from_the_whole_range() {
        let mut c = common(1000, 3, true);
        c.draw = true;
        c.reads = Some(10_001);
        let p = plan(&c, 2);
        assert_eq!(p.iter().map(Vec::len).sum::<usize>(), 10_001);
        assert!(p.iter().flatten().all(|&k| (1..=1000).contains(&k)));
        // The write phase keeps drawing N keys.
        assert_eq!(plan(&c, 1).iter().map(Vec::len).sum::<usize>(), 1000);
    }

    #[test]
    fn read_and_scan_fill_a_memory_kind_and_check_what_they_read() {
        for (name, rnd, draw, vsiz) in [
            ("+", false, false, 0),
            ("+", true, true, 100),
            ("*", true, false, 0),
        ] {
            let mut c = common(3000, 2, rnd);
            c.name = name.into();
            c.draw = draw;
            c.vsiz = vsiz;
            // Without --fill a fresh memory database is empty: every read misses.
            if !draw {
                assert!(!cmd_read(&c).unwrap(), "{name}: reads of an empty database");
            }
            c.fill = Some(Fill::Same);
            assert!(cmd_read(&c).unwrap(), "{name} rnd={rnd} draw={draw}");
            if draw {
                // Keys written in order, read at random: every draw finds its record.
                c.fill = Some(Fill::All);
                c.reads = Some(5000);
                assert!(cmd_read(&c).unwrap(), "{name}: --fill=all");
                c.reads = None;
                c.fill = Some(Fill::Same);
            }
            c.threads = 1;
            c.rnd = false;
            assert!(cmd_scan(&c).unwrap(), "{name} draw={draw} vsiz={vsiz}");
        }
        let mut c = common(10, 2, false);
        assert!(cmd_scan(&c).is_err(), "scan takes one thread");
        c.threads = 1;
        c.fill = Some(Fill::Same);
        assert!(cmd_write(&c).is_err(), "--fill is for read and scan");
    }

    #[test]
    fn scan_walks_an_on_disk_database_written_before() {
        let dir = std::env::temp_dir().join(format!("kura-bench-scan-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = common(2000, 2, true);
        c.name = format!("{}/s.kh#sync=none", dir.display());
        c.vsiz = 20;
        assert!(cmd_write(&c).unwrap());
        c.threads = 1;
        c.rnd = false;
        c.fill = Some(Fill::Same);
        assert!(cmd_scan(&c).unwrap());
        c.records = 2001;
        assert!(!cmd_scan(&c).unwrap(), "a record short");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn keys_are_percent_08d() {
        let mut b = [0u8; 20];
        assert_eq!(key_of(1, &mut b), b"00000001");
        assert_eq!(key_of(1_000_000, &mut b), b"01000000");
        assert_eq!(key_of(99_999_999, &mut b), b"99999999");
        assert_eq!(key_of(123_456_789, &mut b), b"123456789");
        assert_eq!(key_of(0, &mut b), b"00000000");
    }

    #[test]
    fn slices_are_disjoint_and_cover_the_range() {
        for &(n, t, rnd) in &[(10, 3, false), (10, 3, true), (7, 7, true), (5, 8, false)] {
            let p = plan(&common(n, t, rnd), 1);
            assert_eq!(p.len() as u64, t);
            let mut all: Vec<u64> = p.concat();
            all.sort_unstable();
            assert_eq!(all, (1..=n).collect::<Vec<_>>());
        }
    }

    #[test]
    fn rnd_shuffles_deterministically() {
        let c = common(1000, 2, true);
        let a = plan(&c, 1);
        assert_eq!(a, plan(&c, 1));
        assert_ne!(a, plan(&c, 2));
        assert_ne!(a, plan(&common(1000, 2, false), 1));
    }
}
