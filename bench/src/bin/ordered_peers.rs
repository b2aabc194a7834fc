//! `ordered-peers`: the workloads of `kura-bench write` / `read` / `scan` against the ordered
//! stores a Rust user would pick instead of a Kura B+ tree, and against Kura itself by name, in
//! one binary so that every store runs the same loop (docs/benchmarks/kinds.md, "Ordered stores").
//!
//! Records are keyed `%08d` from `00000001` to N and each value equals its key (8 bytes), as in
//! `kura-bench`. `--rnd` visits every key exactly once in a shuffled order (SplitMix64 and
//! Fisher–Yates with the seed of `kura-bench --rnd`, thread 0: the same order), computed before
//! the timer starts; the read phase uses another shuffle than the write phase.
//!
//! Stores (`STORE PATH`; each gets its own fresh directory from the caller):
//!
//! * `lmdb-batch`: LMDB through heed, `NO_SYNC`, a write transaction committed every `--batch`
//!   (1,000) puts. Nothing is fsynced, not even at close.
//! * `lmdb-one`: LMDB through heed, default flags, every put in one write transaction (one fsync,
//!   at its commit).
//! * `redb`: one write transaction, default durability (`Immediate`: one fsync, at the commit).
//! * `fjall`: default options, one keyspace; `insert` per record (journal buffered, not fsynced
//!   per operation; the drop at close persists it). Its reopen replays the journal.
//! * `kura`: `kura_engine::open(PATH)`, any Kura name (`+`, `/dir/x.kb`, …) with its default
//!   tuning; `put` per record, then `sync` and `close` as `kura-bench write` does. A database that
//!   opens empty for `read` or `scan` (a memory kind in a fresh process) is first filled with the
//!   records of `write`, untimed, as `kura-bench --fill` does.
//!
//! Every phase is timed from the open to the end of the close, in its own process, and prints
//! `kura-bench`'s machine-readable line, with `store=` added:
//!
//! ```text
//! RESULT op=write threads=1 records=1000000 rnd=1 seconds=… ops_per_sec=… file_size=… store=redb name=…
//! ```

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "ordered-peers",
    about = "kura-bench's write/read/scan workloads against LMDB (heed), redb, fjall and Kura"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Store N records (open, put every record, close; all timed).
    Write(Common),
    /// Get and verify N records stored by `write` (open, get every record, close; all timed).
    /// Exits non-zero on a missing or wrong record.
    Read(Common),
    /// Walk every record in key order and verify it (open, walk, close; all timed).
    Scan(Common),
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum StoreKind {
    /// LMDB (heed), NO_SYNC, a commit every --batch puts.
    LmdbBatch,
    /// LMDB (heed), default flags, one write transaction.
    LmdbOne,
    /// redb, one write transaction, default durability.
    Redb,
    /// fjall, default options.
    Fjall,
    /// Kura, opened by name.
    Kura,
}

impl StoreKind {
    fn name(self) -> &'static str {
        match self {
            StoreKind::LmdbBatch => "lmdb-batch",
            StoreKind::LmdbOne => "lmdb-one",
            StoreKind::Redb => "redb",
            StoreKind::Fjall => "fjall",
            StoreKind::Kura => "kura",
        }
    }
}

#[derive(Args, Clone)]
struct Common {
    /// The store.
    #[arg(value_enum)]
    store: StoreKind,
    /// Its directory (made when missing), or for `kura` the database name, opened verbatim.
    path: String,
    /// Number of records (keys 00000001..N).
    #[arg(short = 'n', long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..=99_999_999))]
    records: u64,
    /// Visit the keys in a shuffled order (every key once).
    #[arg(long)]
    rnd: bool,
    /// Seed of the shuffles (`kura-bench`'s default).
    #[arg(long, default_value_t = 19_780_211)]
    seed: u64,
    /// `lmdb-batch`: puts per write transaction.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    batch: u64,
}

type Res<T> = Result<T, String>;

fn err<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> String {
    move |e| format!("{what}: {e}")
}

// ----- keys (as kura-bench) -----

/// `%08d` of `n` (n < 10^8).
fn key_of(n: u64) -> [u8; 8] {
    let mut k = [b'0'; 8];
    let mut v = n;
    for b in k.iter_mut().rev() {
        *b = b'0' + (v % 10) as u8;
        v /= 10;
    }
    k
}

/// SplitMix64, as kura-bench.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(bound)) >> 64) as u64
    }
}

/// The keys of a phase (1 write, 2 read), in order or shuffled as `kura-bench --rnd` shuffles
/// thread 0's slice.
fn plan(c: &Common, phase: u64) -> Vec<[u8; 8]> {
    let mut nums: Vec<u64> = (1..=c.records).collect();
    if c.rnd {
        let mut rng = SplitMix(c.seed ^ (phase << 48));
        for j in (1..nums.len()).rev() {
            let k = rng.below(j as u64 + 1) as usize;
            nums.swap(j, k);
        }
    }
    nums.into_iter().map(key_of).collect()
}

// ----- measuring -----

/// What one phase measured.
#[derive(Default)]
struct Phase {
    open: Duration,
    work: Duration,
    close: Duration,
    /// Not timed: filling an empty Kura memory database before a read or scan.
    fill: Duration,
    /// Records stored (write), found (read) or walked (scan).
    count: u64,
    misses: u64,
    bad: u64,
    unordered: u64,
    /// Bytes in memory (a Kura memory kind), when the store says; else the files are summed.
    mem_size: Option<u64>,
}

impl Phase {
    fn total(&self) -> Duration {
        self.open + self.work + self.close
    }
}

/// Checks each record of a scan: key order, value equal to the key.
#[derive(Default)]
struct ScanCheck {
    prev: Option<Vec<u8>>,
    seen: u64,
    unordered: u64,
    bad: u64,
}

impl ScanCheck {
    fn see(&mut self, k: &[u8], v: &[u8]) {
        if let Some(p) = &self.prev {
            if k <= p.as_slice() {
                self.unordered += 1;
            }
        }
        if k != v {
            self.bad += 1;
        }
        match &mut self.prev {
            Some(p) => {
                p.clear();
                p.extend_from_slice(k);
            }
            None => self.prev = Some(k.to_vec()),
        }
        self.seen += 1;
    }
}

/// Apparent bytes of every file under `p` (`du -sb`).
fn files_size(p: &Path) -> u64 {
    let Ok(md) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    if !md.is_dir() {
        return md.len();
    }
    let mut total = md.len();
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            total += files_size(&e.path());
        }
    }
    total
}

fn vm_hwm_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Write,
    Read,
    Scan,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Read => "read",
            Op::Scan => "scan",
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (op, c) = match &cli.cmd {
        Cmd::Write(c) => (Op::Write, c),
        Cmd::Read(c) => (Op::Read, c),
        Cmd::Scan(c) => (Op::Scan, c),
    };
    match run(op, c) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("ordered-peers: {} {}: {e}", op.name(), c.store.name());
            ExitCode::FAILURE
        }
    }
}

fn run(op: Op, c: &Common) -> Res<bool> {
    if c.store != StoreKind::Kura {
        std::fs::create_dir_all(&c.path).map_err(err("make the directory"))?;
    }
    println!(
        "ordered-peers {}: store={} path={} records={} order={}",
        op.name(),
        c.store.name(),
        c.path,
        c.records,
        if c.rnd { "random" } else { "sequential" }
    );
    let keys = match op {
        Op::Write => plan(c, 1),
        Op::Read => plan(c, 2),
        Op::Scan => Vec::new(),
    };
    // A Kura name's path part (`/dir/x.kb#cache=…` is `/dir/x.kb`).
    let dir = PathBuf::from(c.path.split('#').next().unwrap_or_default());
    let p = match c.store {
        StoreKind::LmdbBatch => lmdb(op, c, &dir, &keys, Some(c.batch))?,
        StoreKind::LmdbOne => lmdb(op, c, &dir, &keys, None)?,
        StoreKind::Redb => redb_run(op, &dir, &keys)?,
        StoreKind::Fjall => fjall_run(op, &dir, &keys)?,
        StoreKind::Kura => kura(op, c, &keys)?,
    };
    // Not timed: the size after the close.
    let size = p.mem_size.unwrap_or_else(|| files_size(&dir));
    let total = p.total();
    let ops = match op {
        Op::Scan => p.count,
        _ => keys.len() as u64,
    };
    let s = total.as_secs_f64();
    let rate = if s > 0.0 {
        (ops as f64 / s).round() as u64
    } else {
        0
    };
    println!(
        "  open {:.3}s  {} {:.3}s  close {:.3}s  total {:.3}s  ({rate} ops/s)  records {}  \
         misses {}  wrong {}  out of order {}  size {size} bytes{}",
        p.open.as_secs_f64(),
        op.name(),
        p.work.as_secs_f64(),
        p.close.as_secs_f64(),
        s,
        p.count,
        p.misses,
        p.bad,
        p.unordered,
        if p.fill.is_zero() {
            String::new()
        } else {
            format!(
                "  (filled first in {:.3}s, not timed)",
                p.fill.as_secs_f64()
            )
        }
    );
    println!(
        "RESULT op={} threads=1 records={ops} rnd={} seconds={s:.3} ops_per_sec={rate} \
         file_size={size} count={} misses={} bad={} unordered={} open_seconds={:.3} \
         work_seconds={:.3} close_seconds={:.3} fill_seconds={:.3} vm_hwm_kb={} store={} name={}",
        op.name(),
        u8::from(c.rnd),
        p.count,
        p.misses,
        p.bad,
        p.unordered,
        p.open.as_secs_f64(),
        p.work.as_secs_f64(),
        p.close.as_secs_f64(),
        p.fill.as_secs_f64(),
        vm_hwm_kb(),
        c.store.name(),
        c.path
    );
    let ok = p.misses == 0
        && p.bad == 0
        && p.unordered == 0
        && (op == Op::Write || p.count == c.records);
    if !ok {
        eprintln!(
            "ordered-peers: {} {}: {} records, {} missing, {} wrong, {} out of order",
            op.name(),
            c.store.name(),
            p.count,
            p.misses,
            p.bad,
            p.unordered
        );
    }
    Ok(ok)
}

// ----- LMDB (heed) -----

fn lmdb(op: Op, _c: &Common, dir: &Path, keys: &[[u8; 8]], batch: Option<u64>) -> Res<Phase> {
    use heed::types::Bytes;
    use heed::{CommitOrAbort, Database, EnvFlags, EnvOpenOptions};
    let mut p = Phase::default();
    let t0 = Instant::now();
    let mut opts = EnvOpenOptions::new();
    // The map is only an address-space reservation (the file grows as pages are written); LMDB's
    // default of 10 MiB cannot hold the records.
    opts.map_size(16 << 30);
    if op == Op::Write && batch.is_some() {
        // SAFETY: NO_SYNC only gives up durability on a crash of the OS, which the benchmark
        // accepts (the other stores do not fsync per operation either).
        unsafe {
            opts.flags(EnvFlags::NO_SYNC);
        }
    }
    // SAFETY: the directory is this process's alone for the run.
    let env = unsafe { opts.open(dir) }.map_err(err("open"))?;
    let db: Database<Bytes, Bytes> = if op == Op::Write {
        let wtxn = env.write_txn().map_err(err("write_txn"))?;
        env.create_databases_and_commit(wtxn, |wdo, wtxn| {
            let db: Database<Bytes, Bytes> = wdo.create_database(wtxn, None)?;
            heed::Result::Ok(CommitOrAbort::<_, ()>::Commit(db))
        })
        .map_err(err("create the database"))?
        .unwrap_commit()
    } else {
        let rtxn = env.read_txn().map_err(err("read_txn"))?;
        env.open_databases_and_commit(rtxn, |dbo, rtxn| {
            let db: Option<Database<Bytes, Bytes>> = dbo.open_database(rtxn, None)?;
            heed::Result::Ok(CommitOrAbort::<_, ()>::Commit(db))
        })
        .map_err(err("open the database"))?
        .unwrap_commit()
        .ok_or("no database")?
    };
    p.open = t0.elapsed();
    let t0 = Instant::now();
    match op {
        Op::Write => {
            let per_txn = batch.unwrap_or(u64::MAX);
            let mut wtxn = env.write_txn().map_err(err("write_txn"))?;
            let mut in_txn = 0u64;
            for k in keys {
                db.put(&mut wtxn, k, k).map_err(err("put"))?;
                in_txn += 1;
                if in_txn == per_txn {
                    wtxn.commit().map_err(err("commit"))?;
                    wtxn = env.write_txn().map_err(err("write_txn"))?;
                    in_txn = 0;
                }
            }
            wtxn.commit().map_err(err("commit"))?;
            let rtxn = env.read_txn().map_err(err("read_txn"))?;
            p.count = db.len(&rtxn).map_err(err("len"))?;
        }
        Op::Read => {
            let rtxn = env.read_txn().map_err(err("read_txn"))?;
            for k in keys {
                match db.get(&rtxn, k).map_err(err("get"))? {
                    None => p.misses += 1,
                    Some(v) if v != k => p.bad += 1,
                    Some(_) => p.count += 1,
                }
            }
        }
        Op::Scan => {
            let rtxn = env.read_txn().map_err(err("read_txn"))?;
            let mut chk = ScanCheck::default();
            for kv in db.iter(&rtxn).map_err(err("iter"))? {
                let (k, v) = kv.map_err(err("iter"))?;
                chk.see(k, v);
            }
            (p.count, p.unordered, p.bad) = (chk.seen, chk.unordered, chk.bad);
        }
    }
    p.work = t0.elapsed();
    let t0 = Instant::now();
    let closing = env.prepare_for_closing();
    closing.wait();
    p.close = t0.elapsed();
    Ok(p)
}

// ----- redb -----

const REDB_TABLE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("bench");

fn redb_run(op: Op, dir: &Path, keys: &[[u8; 8]]) -> Res<Phase> {
    use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata};
    let mut p = Phase::default();
    let file = dir.join("data.redb");
    let t0 = Instant::now();
    let db = if op == Op::Write {
        redb::Database::create(&file).map_err(err("create"))?
    } else {
        redb::Database::open(&file).map_err(err("open"))?
    };
    p.open = t0.elapsed();
    let t0 = Instant::now();
    match op {
        Op::Write => {
            let txn = db.begin_write().map_err(err("begin_write"))?;
            {
                let mut t = txn.open_table(REDB_TABLE).map_err(err("open_table"))?;
                for k in keys {
                    t.insert(k.as_slice(), k.as_slice())
                        .map_err(err("insert"))?;
                }
                p.count = t.len().map_err(err("len"))?;
            }
            txn.commit().map_err(err("commit"))?;
        }
        Op::Read => {
            let txn = db.begin_read().map_err(err("begin_read"))?;
            let t = txn.open_table(REDB_TABLE).map_err(err("open_table"))?;
            for k in keys {
                match t.get(k.as_slice()).map_err(err("get"))? {
                    None => p.misses += 1,
                    Some(v) if v.value() != k.as_slice() => p.bad += 1,
                    Some(_) => p.count += 1,
                }
            }
        }
        Op::Scan => {
            let txn = db.begin_read().map_err(err("begin_read"))?;
            let t = txn.open_table(REDB_TABLE).map_err(err("open_table"))?;
            let mut chk = ScanCheck::default();
            for kv in t.iter().map_err(err("iter"))? {
                let (k, v) = kv.map_err(err("iter"))?;
                chk.see(k.value(), v.value());
            }
            (p.count, p.unordered, p.bad) = (chk.seen, chk.unordered, chk.bad);
        }
    }
    p.work = t0.elapsed();
    let t0 = Instant::now();
    drop(db);
    p.close = t0.elapsed();
    Ok(p)
}

// ----- fjall -----

fn fjall_run(op: Op, dir: &Path, keys: &[[u8; 8]]) -> Res<Phase> {
    use fjall::{Database, KeyspaceCreateOptions};
    let mut p = Phase::default();
    let t0 = Instant::now();
    let db = Database::builder(dir).open().map_err(err("open"))?;
    let ks = db
        .keyspace("bench", KeyspaceCreateOptions::default)
        .map_err(err("keyspace"))?;
    p.open = t0.elapsed();
    let t0 = Instant::now();
    match op {
        Op::Write => {
            for k in keys {
                ks.insert(k.as_slice(), k.as_slice())
                    .map_err(err("insert"))?;
            }
            p.count = ks.approximate_len() as u64;
        }
        Op::Read => {
            for k in keys {
                match ks.get(k).map_err(err("get"))? {
                    None => p.misses += 1,
                    Some(v) if v.as_ref() != k.as_slice() => p.bad += 1,
                    Some(_) => p.count += 1,
                }
            }
        }
        Op::Scan => {
            let mut chk = ScanCheck::default();
            for g in ks.iter() {
                let (k, v) = g.into_inner().map_err(err("iter"))?;
                chk.see(&k, &v);
            }
            (p.count, p.unordered, p.bad) = (chk.seen, chk.unordered, chk.bad);
        }
    }
    p.work = t0.elapsed();
    let t0 = Instant::now();
    // Dropping the last handle persists the journal (SyncAll) and stops the background workers.
    drop(ks);
    drop(db);
    p.close = t0.elapsed();
    Ok(p)
}

// ----- Kura -----

fn kura(op: Op, c: &Common, keys: &[[u8; 8]]) -> Res<Phase> {
    let mut p = Phase::default();
    let t0 = Instant::now();
    let db = kura_engine::open(&c.path).map_err(|e| format!("open `{}`: {e}", c.path))?;
    p.open = t0.elapsed();
    if op != Op::Write && db.count() == 0 {
        // A memory kind in a fresh process: store what `write` would, untimed.
        let t = Instant::now();
        for k in plan(c, 1) {
            db.put(&k, &k).map_err(err("put (fill)"))?;
        }
        p.fill = t.elapsed();
    }
    let t0 = Instant::now();
    match op {
        Op::Write => {
            for k in keys {
                db.put(k, k).map_err(err("put"))?;
            }
            db.sync().map_err(err("sync"))?;
            p.count = db.count();
        }
        Op::Read => {
            for k in keys {
                match db.get(k).map_err(err("get"))? {
                    None => p.misses += 1,
                    Some(r) if r.value != k.as_slice() => p.bad += 1,
                    Some(_) => p.count += 1,
                }
            }
        }
        Op::Scan => {
            let mut chk = ScanCheck::default();
            let mut see = |k: &[u8], v: &[u8], _| {
                chk.see(k, v);
                Ok(true)
            };
            let ordered = db.kind().ordered();
            if ordered {
                let range = kura_engine::KeyRange::new(b"", None);
                db.for_each_in_range(&range, &mut see)
                    .map_err(err("scan"))?;
            } else {
                // An unordered kind (`.kh`, `*`): its own order, so no order to check.
                db.for_each_record(&mut see).map_err(err("scan"))?;
            }
            (p.count, p.bad) = (chk.seen, chk.bad);
            p.unordered = if ordered { chk.unordered } else { 0 };
        }
    }
    p.work = t0.elapsed();
    let mem_size = db.size();
    let t0 = Instant::now();
    db.close().map_err(err("close"))?;
    drop(db);
    p.close = t0.elapsed();
    if !Path::new(c.path.split('#').next().unwrap_or_default()).exists() {
        // `+`, `*`: no files; the bytes in memory instead.
        p.mem_size = Some(mem_size);
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn common(store: StoreKind, path: &str, rnd: bool) -> Common {
        Common {
            store,
            path: path.into(),
            records: 5000,
            rnd,
            seed: 3,
            batch: 100,
        }
    }

    #[test]
    fn keys_and_shuffles() {
        assert_eq!(&key_of(1), b"00000001");
        assert_eq!(&key_of(1_000_000), b"01000000");
        let c = common(StoreKind::Kura, "+", true);
        let (a, b) = (plan(&c, 1), plan(&c, 2));
        assert_ne!(a, b);
        let mut s = a.clone();
        s.sort_unstable();
        assert_eq!(s, plan(&common(StoreKind::Kura, "+", false), 1));
    }

    #[test]
    fn every_store_writes_reads_and_scans() {
        let dir = std::env::temp_dir().join(format!("ordered-peers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for store in [
            StoreKind::LmdbBatch,
            StoreKind::LmdbOne,
            StoreKind::Redb,
            StoreKind::Fjall,
            StoreKind::Kura,
        ] {
            for rnd in [false, true] {
                let d = dir.join(format!("{}-{rnd}", store.name()));
                let path = if store == StoreKind::Kura {
                    std::fs::create_dir_all(&d).unwrap();
                    format!("{}/x.kh", d.display())
                } else {
                    d.display().to_string()
                };
                let c = common(store, &path, rnd);
                for op in [Op::Write, Op::Read, Op::Scan] {
                    assert!(run(op, &c).unwrap(), "{} {}", store.name(), op.name());
                }
            }
        }
        // A memory kind is filled before a read in a fresh process.
        assert!(run(Op::Read, &common(StoreKind::Kura, "+", true)).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
