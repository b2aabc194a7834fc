//! Scale measurements of a database (see docs/benchmarks/engine.md, "Engine at scale", and
//! scripts/bench-scale.sh):
//!
//! * `grow`: insert N records in one thread and print the insert rate of every interval, so one
//!   run shows whether the rate falls off as the database grows past its `bnum` hint. It also
//!   prints the process's memory after writing (and after reading every record back with
//!   `--verify`), and with `--crash` it is killed with SIGKILL instead of closing.
//! * `reopen`: time `open` alone (recovery included), print the record count and memory, verify
//!   records, then close (timed) or get killed with `--kill` so that nothing is checkpointed.
//! * `big`: write large values until the database is several GiB, close, reopen, verify.
//!
//! Keys are `%08d` from `start+1` to `start+N` (8 bytes up to 99,999,999) with values equal to
//! their keys, as in `write`; or, with `--keys random16`, 16 pseudo-random bytes derived from the
//! record number and `--seed`, with the first 8 of them as the value. Memory figures come from
//! `/proc/self/status` (VmRSS, VmHWM, RssAnon, RssFile; Linux only).

use crate::{key_of, open, rate, secs, BenchResult, SplitMix};
use clap::{Args, ValueEnum};
use std::io::Write;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KeyKind {
    /// `%08d` of the record number; the value equals the key (8 bytes each).
    Decimal,
    /// 16 pseudo-random bytes per record number; the value is the key's first 8 bytes.
    Random16,
}

impl KeyKind {
    fn name(self) -> &'static str {
        match self {
            KeyKind::Decimal => "decimal8",
            KeyKind::Random16 => "random16",
        }
    }
}

/// Key and value of record number `n`.
struct Keys {
    kind: KeyKind,
    seed: u64,
    dec: [u8; 20],
    rnd: [u8; 16],
}

impl Keys {
    fn new(kind: KeyKind, seed: u64) -> Keys {
        Keys {
            kind,
            seed,
            dec: [0; 20],
            rnd: [0; 16],
        }
    }

    /// (key, value) of record `n`.
    fn record(&mut self, n: u64) -> (&[u8], &[u8]) {
        match self.kind {
            KeyKind::Decimal => {
                let k = key_of(n, &mut self.dec);
                (k, k)
            }
            KeyKind::Random16 => {
                let mut r = SplitMix(self.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
                self.rnd[..8].copy_from_slice(&r.next().to_le_bytes());
                self.rnd[8..].copy_from_slice(&r.next().to_le_bytes());
                (&self.rnd, &self.rnd[..8])
            }
        }
    }
}

// ----- memory -----

/// Memory figures of this process, in KiB, from /proc/self/status.
#[derive(Default)]
pub(crate) struct Mem {
    pub(crate) rss: u64,
    pub(crate) hwm: u64,
    pub(crate) anon: u64,
    pub(crate) file: u64,
}

pub(crate) fn mem() -> Mem {
    let mut m = Mem::default();
    let Ok(s) = std::fs::read_to_string("/proc/self/status") else {
        return m;
    };
    for line in s.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let kb = v
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .unwrap_or(0);
        match k {
            "VmRSS" => m.rss = kb,
            "VmHWM" => m.hwm = kb,
            "RssAnon" => m.anon = kb,
            "RssFile" => m.file = kb,
            _ => {}
        }
    }
    m
}

fn mib(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

/// Print the memory of this process (human line and RESULT line); `count` is the number of
/// records of the open database (`None` once it is closed).
fn report_mem(phase: &str, count: Option<u64>, name: &str) {
    let m = mem();
    let count = count.map_or("-".to_string(), |c| c.to_string());
    println!(
        "  memory {phase}: VmRSS {:.1} MiB (anon {:.1}, file {:.1}), VmHWM {:.1} MiB; \
         records {count}",
        mib(m.rss),
        mib(m.anon),
        mib(m.file),
        mib(m.hwm),
    );
    println!(
        "RESULT op=memory phase={phase} vm_rss_kb={} vm_hwm_kb={} rss_anon_kb={} rss_file_kb={} \
         count={count} name={name}",
        m.rss, m.hwm, m.anon, m.file,
    );
}

// ----- dying like a crashed process -----

/// End the process with SIGKILL (no destructor, no close, no checkpoint), as `kill -9` would.
/// Whatever the database had handed to the OS stays in the page cache and reaches the file.
fn die_by_sigkill() -> ! {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    let pid = std::process::id().to_string();
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status();
    // `kill` should not return; if it is missing, die without unwinding anyway.
    std::thread::sleep(Duration::from_secs(2));
    std::process::abort()
}

// ----- grow -----

#[derive(Args, Clone)]
pub struct GrowArgs {
    /// Database name, opened verbatim (`PATH.kh#bnum=1000000#sync=none`, …).
    name: String,
    /// Records to insert.
    #[arg(short = 'n', long, default_value_t = 10_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    records: u64,
    /// Number the records `start+1 ..= start+N` (to add records to an existing database).
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Print the insert rate of every interval of this many records.
    #[arg(long, default_value_t = 500_000, value_parser = clap::value_parser!(u64).range(1..))]
    report_every: u64,
    /// Key format.
    #[arg(long, value_enum, default_value_t = KeyKind::Decimal)]
    keys: KeyKind,
    /// Seed of `--keys random16`.
    #[arg(long, default_value_t = 19_780_211)]
    seed: u64,
    /// After writing, read every record back (same order), verify it and print memory again.
    #[arg(long)]
    verify: bool,
    /// After writing, wait `--settle-ms` (the engine hands its write buffers to the OS every
    /// 50 ms) and kill this process with SIGKILL instead of closing: no sync, no checkpoint.
    #[arg(long)]
    crash: bool,
    /// Milliseconds to wait before the SIGKILL of `--crash`.
    #[arg(long, default_value_t = 300)]
    settle_ms: u64,
}

pub fn cmd_grow(a: &GrowArgs) -> BenchResult<bool> {
    println!(
        "kura-bench grow: name={} records={} start={} keys={} report_every={}{}",
        a.name,
        a.records,
        a.start,
        a.keys.name(),
        a.report_every,
        if a.crash { " (then SIGKILL)" } else { "" }
    );
    let t0 = Instant::now();
    let db = open(&a.name)?;
    let t_open = t0.elapsed();
    let before = db.count();
    println!(
        "  open {:.3}s; the database holds {before} records",
        secs(t_open)
    );
    println!(
        "RESULT op=grow_open seconds={:.3} count={before} name={}",
        secs(t_open),
        a.name
    );
    let mut keys = Keys::new(a.keys, a.seed);
    let start = Instant::now();
    let mut mark = start;
    let mut done = 0u64;
    while done < a.records {
        let chunk = a.report_every.min(a.records - done);
        for n in a.start + done + 1..=a.start + done + chunk {
            let (k, v) = keys.record(n);
            db.put(k, v)
                .map_err(|e| format!("put {}: {e}", String::from_utf8_lossy(k)))?;
        }
        done += chunk;
        let now = Instant::now();
        let d = now - mark;
        mark = now;
        println!(
            "  {:>11} records: {:>9} puts/s over the last {chunk} ({:.3}s; {:.3}s in all)",
            a.start + done,
            rate(chunk, d),
            secs(d),
            secs(now - start)
        );
        println!(
            "RESULT op=grow records={} interval_records={chunk} seconds={:.3} ops_per_sec={} \
             elapsed={:.3} keys={} name={}",
            a.start + done,
            secs(d),
            rate(chunk, d),
            secs(now - start),
            a.keys.name(),
            a.name
        );
    }
    let t_put = start.elapsed();
    let count = db.count();
    println!(
        "  {} puts in {:.3}s ({} puts/s); the database holds {count} records",
        a.records,
        secs(t_put),
        rate(a.records, t_put)
    );
    println!(
        "RESULT op=grow_total records={} seconds={:.3} ops_per_sec={} count={count} keys={} name={}",
        a.records,
        secs(t_put),
        rate(a.records, t_put),
        a.keys.name(),
        a.name
    );
    report_mem("after_write", Some(db.count()), &a.name);

    let mut ok = true;
    if a.verify {
        let t0 = Instant::now();
        let (mut misses, mut bad) = (0u64, 0u64);
        for n in a.start + 1..=a.start + a.records {
            let (k, v) = keys.record(n);
            match db
                .get(k)
                .map_err(|e| format!("get {}: {e}", String::from_utf8_lossy(k)))?
            {
                None => misses += 1,
                Some(r) if r.value != v => bad += 1,
                Some(_) => {}
            }
        }
        let d = t0.elapsed();
        println!(
            "  read back {} records in {:.3}s ({} gets/s): {misses} missing, {bad} wrong",
            a.records,
            secs(d),
            rate(a.records, d)
        );
        println!(
            "RESULT op=grow_verify records={} seconds={:.3} ops_per_sec={} misses={misses} \
             bad={bad} name={}",
            a.records,
            secs(d),
            rate(a.records, d),
            a.name
        );
        report_mem("after_read", Some(db.count()), &a.name);
        ok = misses == 0 && bad == 0;
    }

    if a.crash {
        std::thread::sleep(Duration::from_millis(a.settle_ms));
        println!(
            "RESULT op=crash records={} count={count} settle_ms={} name={}",
            a.records, a.settle_ms, a.name
        );
        println!("  killing this process with SIGKILL (no close, no checkpoint)");
        die_by_sigkill();
    }

    let t0 = Instant::now();
    db.sync().map_err(|e| format!("sync: {e}"))?;
    let t_sync = t0.elapsed();
    let t0 = Instant::now();
    db.close().map_err(|e| format!("close: {e}"))?;
    let t_close = t0.elapsed();
    let size = db.size();
    drop(db);
    println!(
        "  sync {:.3}s  close {:.3}s  size {size} bytes",
        secs(t_sync),
        secs(t_close)
    );
    println!(
        "RESULT op=grow_close sync_seconds={:.3} close_seconds={:.3} file_size={size} name={}",
        secs(t_sync),
        secs(t_close),
        a.name
    );
    // VmHWM now includes the peak of the close (its checkpoint is built in memory).
    report_mem("after_close", None, &a.name);
    Ok(ok)
}

// ----- reopen -----

#[derive(Args, Clone)]
pub struct ReopenArgs {
    /// Database name, opened verbatim.
    name: String,
    /// Expected records (keys 1..=N); the count must match, and `--verify` reads among them.
    #[arg(short = 'n', long)]
    records: Option<u64>,
    /// Records to read back and verify after the open: 0 = none, or a number spread evenly
    /// over 1..=N (N or more = every record). Needs `-n`.
    #[arg(long, default_value_t = 0)]
    verify: u64,
    /// Key format of the records.
    #[arg(long, value_enum, default_value_t = KeyKind::Decimal)]
    keys: KeyKind,
    /// Seed of `--keys random16`.
    #[arg(long, default_value_t = 19_780_211)]
    seed: u64,
    /// Instead of closing, kill this process with SIGKILL right after the measurements, so that
    /// the open leaves nothing behind (no checkpoint) and can be timed again on the same files.
    #[arg(long)]
    kill: bool,
}

pub fn cmd_reopen(a: &ReopenArgs) -> BenchResult<bool> {
    println!(
        "kura-bench reopen: name={} expected={} verify={}{}",
        a.name,
        a.records.map_or("-".into(), |n| n.to_string()),
        a.verify,
        if a.kill { " (then SIGKILL)" } else { "" }
    );
    let t0 = Instant::now();
    let db = open(&a.name)?;
    let t_open = t0.elapsed();
    let count = db.count();
    let size = db.size();
    println!(
        "  open {:.3}s; {count} records; size {size} bytes",
        secs(t_open)
    );
    println!(
        "RESULT op=reopen seconds={:.3} count={count} file_size={size} name={}",
        secs(t_open),
        a.name
    );
    report_mem("after_open", Some(count), &a.name);
    let mut ok = true;
    if let Some(n) = a.records {
        if count != n {
            eprintln!("kura-bench: reopen: {count} records, expected {n}");
            ok = false;
        }
        if a.verify > 0 {
            let want = a.verify.min(n);
            let mut keys = Keys::new(a.keys, a.seed);
            let (mut misses, mut bad) = (0u64, 0u64);
            let t0 = Instant::now();
            for i in 0..want {
                // Evenly spread over 1..=n, always including the first and the last.
                let r = if want == 1 {
                    n
                } else {
                    1 + (u128::from(i) * u128::from(n - 1) / u128::from(want - 1)) as u64
                };
                let (k, v) = keys.record(r);
                match db
                    .get(k)
                    .map_err(|e| format!("get {}: {e}", String::from_utf8_lossy(k)))?
                {
                    None => misses += 1,
                    Some(rec) if rec.value != v => bad += 1,
                    Some(_) => {}
                }
            }
            let d = t0.elapsed();
            println!(
                "  verified {want} records in {:.3}s: {misses} missing, {bad} wrong",
                secs(d)
            );
            println!(
                "RESULT op=reopen_verify records={want} seconds={:.3} ops_per_sec={} \
                 misses={misses} bad={bad} name={}",
                secs(d),
                rate(want, d),
                a.name
            );
            report_mem("after_read", Some(db.count()), &a.name);
            ok &= misses == 0 && bad == 0;
        }
    }
    if a.kill {
        if !ok {
            eprintln!("kura-bench: reopen: verification failed");
        }
        println!("  killing this process with SIGKILL (no close, no checkpoint)");
        die_by_sigkill();
    }
    let t0 = Instant::now();
    db.close().map_err(|e| format!("close: {e}"))?;
    drop(db);
    let t_close = t0.elapsed();
    println!("  close {:.3}s", secs(t_close));
    println!(
        "RESULT op=reopen_close seconds={:.3} name={}",
        secs(t_close),
        a.name
    );
    Ok(ok)
}

// ----- big -----

#[derive(Args, Clone)]
pub struct BigArgs {
    /// Database name, opened verbatim (`PATH.kh#sync=none`).
    name: String,
    /// Number of values (keys `%08d` from 1).
    #[arg(short = 'n', long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..))]
    records: u64,
    /// Size of each value (`1m`, `64k`, …; powers of 1024).
    #[arg(long, default_value = "1m")]
    value_size: String,
    /// Values to read back and compare after reopening, spread evenly (first and last included).
    #[arg(long, default_value_t = 200)]
    sample: u64,
    #[arg(long, default_value_t = 19_780_211)]
    seed: u64,
}

/// Value of record `n`: a pseudo-random base with `n` stamped every 4 KiB, so that every page
/// of every value differs from the same page of the other values.
fn stamp(buf: &mut [u8], n: u64) {
    let mut off = 0;
    while off + 8 <= buf.len() {
        buf[off..off + 8].copy_from_slice(&n.to_le_bytes());
        off += 4096;
    }
}

pub fn cmd_big(a: &BigArgs) -> BenchResult<bool> {
    let vsize = kura_engine::name::parse_size(&a.value_size)
        .filter(|&v| v > 0 && v <= kura_engine::store::MAX_VALUE_LEN as u64)
        .ok_or_else(|| format!("--value-size {}: expected 1 byte to 1g", a.value_size))?
        as usize;
    let total = a.records * vsize as u64;
    println!(
        "kura-bench big: name={} values={} value_size={vsize} total={total} bytes ({:.2} GiB)",
        a.name,
        a.records,
        total as f64 / f64::from(1u32 << 30)
    );
    let mut base = vec![0u8; vsize];
    let mut rng = SplitMix(a.seed);
    for c in base.chunks_mut(8) {
        let r = rng.next().to_le_bytes();
        c.copy_from_slice(&r[..c.len()]);
    }
    let mut kb = [0u8; 20];

    // Write: open, put every value, sync, close; all timed.
    let start = Instant::now();
    let db = open(&a.name)?;
    let mut val = base.clone();
    for n in 1..=a.records {
        stamp(&mut val, n);
        let k = key_of(n, &mut kb);
        db.put(k, &val)
            .map_err(|e| format!("put {}: {e}", String::from_utf8_lossy(k)))?;
    }
    let t_put = start.elapsed();
    db.sync().map_err(|e| format!("sync: {e}"))?;
    db.close().map_err(|e| format!("close: {e}"))?;
    let size = db.size();
    drop(db);
    let t_write = start.elapsed();
    println!(
        "  write {:.3}s (puts {:.3}s, then sync and close) = {:.0} MiB/s; size {size} bytes",
        secs(t_write),
        secs(t_put),
        total as f64 / 1048576.0 / secs(t_write)
    );
    println!(
        "RESULT op=big_write records={} seconds={:.3} put_seconds={:.3} bytes={total} \
         file_size={size} name={}",
        a.records,
        secs(t_write),
        secs(t_put),
        a.name
    );

    // Reopen (timed), count, verify a sample, close.
    let t0 = Instant::now();
    let db = open(&a.name)?;
    let t_open = t0.elapsed();
    let count = db.count();
    let size = db.size();
    let want = a.sample.min(a.records);
    let (mut misses, mut bad) = (0u64, 0u64);
    let t0 = Instant::now();
    for i in 0..want {
        let n = if want == 1 {
            a.records
        } else {
            1 + (u128::from(i) * u128::from(a.records - 1) / u128::from(want - 1)) as u64
        };
        stamp(&mut val, n);
        let k = key_of(n, &mut kb);
        match db
            .get(k)
            .map_err(|e| format!("get {}: {e}", String::from_utf8_lossy(k)))?
        {
            None => misses += 1,
            Some(r) if r.value != val => bad += 1,
            Some(_) => {}
        }
    }
    let t_verify = t0.elapsed();
    db.close().map_err(|e| format!("close: {e}"))?;
    drop(db);
    println!(
        "  reopen {:.3}s; {count} records; size {size} bytes; verified {want} values in {:.3}s: \
         {misses} missing, {bad} wrong",
        secs(t_open),
        secs(t_verify)
    );
    println!(
        "RESULT op=big_reopen seconds={:.3} count={count} file_size={size} verified={want} \
         verify_seconds={:.3} misses={misses} bad={bad} name={}",
        secs(t_open),
        secs(t_verify),
        a.name
    );
    let ok = count == a.records && misses == 0 && bad == 0;
    if !ok {
        eprintln!(
            "kura-bench: big: {count} records (expected {}), {misses} missing, {bad} wrong",
            a.records
        );
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_deterministic_and_sized() {
        let mut a = Keys::new(KeyKind::Random16, 5);
        let mut b = Keys::new(KeyKind::Random16, 5);
        let (k1, v1) = a.record(42);
        let (k1, v1) = (k1.to_vec(), v1.to_vec());
        let (k2, v2) = b.record(42);
        assert_eq!((k1.as_slice(), v1.as_slice()), (k2, v2));
        assert_eq!(k1.len(), 16);
        assert_eq!(v1, &k1[..8]);
        assert_ne!(a.record(43).0, k1.as_slice());
        let mut d = Keys::new(KeyKind::Decimal, 0);
        assert_eq!(d.record(10_000_000), (&b"10000000"[..], &b"10000000"[..]));
    }

    #[test]
    fn stamps_every_page() {
        let mut v = vec![0u8; 10_000];
        stamp(&mut v, 7);
        assert_eq!(&v[0..8], &7u64.to_le_bytes());
        assert_eq!(&v[4096..4104], &7u64.to_le_bytes());
        assert_eq!(&v[8192..8200], &7u64.to_le_bytes());
    }

    #[test]
    fn reads_own_memory() {
        let m = mem();
        if std::path::Path::new("/proc/self/status").exists() {
            assert!(m.rss > 0 && m.hwm >= m.rss);
        }
    }

    #[test]
    fn grow_reopen_and_big_on_a_small_database() {
        let dir = std::env::temp_dir().join(format!("kura-bench-scale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let name = format!("{}#sync=none", dir.join("g.kh").display());
        let g = GrowArgs {
            name: name.clone(),
            records: 1000,
            start: 0,
            report_every: 300,
            keys: KeyKind::Random16,
            seed: 3,
            verify: true,
            crash: false,
            settle_ms: 0,
        };
        assert!(cmd_grow(&g).unwrap());
        let r = ReopenArgs {
            name,
            records: Some(1000),
            verify: 50,
            keys: KeyKind::Random16,
            seed: 3,
            kill: false,
        };
        assert!(cmd_reopen(&r).unwrap());
        let b = BigArgs {
            name: format!("{}#sync=none", dir.join("b.kh").display()),
            records: 5,
            value_size: "10k".into(),
            sample: 3,
            seed: 1,
        };
        assert!(cmd_big(&b).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
