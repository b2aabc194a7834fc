//! Replication figures against running `kura serve` processes (scripts/bench-repl.sh starts
//! them): the lag of a replica under a paced write load, and the moments a starting replica
//! catches up or finishes its bootstrap.
//!
//! ```text
//! repl_lag lag --master H:P --replica H:P --rate OPS [--secs 20] [--conns 8]
//!              [--key-size 100] [--value-size 400] [--keyspace 10000] [--probe-ms 10]
//! repl_lag wait-pos --replica H:P --ts TS --since-ns NS [--timeout 300]
//! repl_lag wait-boot --replica H:P --master H:P --since-ns NS [--timeout 600]
//! ```
//!
//! `lag`: CONNS connections set keys on the master (memcached text, `set`, each answered) at
//! OPS a second in all, paced every millisecond, for SECS seconds. Meanwhile a probe sets the
//! key `lag:probe` on the master to a sequence number every PROBE_MS milliseconds, and notes
//! when the master acknowledged it; a poller reads that key from the replica every 0.5 ms.
//! A probe's lag is the time from its acknowledgement by the master until the replica first
//! returned it or a later one (the replica applies the master's records in order, so a later
//! one means this one was applied too): the time a client that wrote to the master waits
//! before a reader of the replica sees its write, measured to about a millisecond (the poll
//! interval and one round trip). Prints the percentiles and a `RESULT` line.
//!
//! `wait-pos`: poll the replica's Tyrant `stat` every 5 ms until its `rts` reaches TS; print
//! the seconds since NS (Unix nanoseconds, e.g. `date +%s%N` taken just before the replica
//! was started).
//!
//! `wait-boot`: poll the replica until it has loaded a snapshot (`repl_bootstraps` ≥ 1), then
//! until its `rts` reaches the master's `ulog_last_ts` read at that moment; print both times
//! since NS.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn usage() -> ! {
    eprintln!(
        "usage: repl_lag lag --master H:P --replica H:P --rate OPS [--secs S] [--conns N] \
         [--key-size B] [--value-size B] [--keyspace N] [--probe-ms MS]\n       \
         repl_lag wait-pos --replica H:P --ts TS --since-ns NS [--timeout S]\n       \
         repl_lag wait-boot --replica H:P --master H:P --since-ns NS [--timeout S]"
    );
    std::process::exit(2)
}

struct Opts(HashMap<String, String>);

impl Opts {
    fn parse(args: &[String]) -> Opts {
        let mut m = HashMap::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let Some(name) = a.strip_prefix("--") else {
                usage()
            };
            let Some(v) = it.next() else { usage() };
            m.insert(name.to_string(), v.clone());
        }
        Opts(m)
    }
    fn str(&self, k: &str) -> String {
        self.0.get(k).cloned().unwrap_or_else(|| usage())
    }
    fn num<T: std::str::FromStr>(&self, k: &str, default: Option<T>) -> T {
        match self.0.get(k) {
            Some(v) => v.parse().unwrap_or_else(|_| usage()),
            None => default.unwrap_or_else(|| usage()),
        }
    }
}

fn connect(addr: &str) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    Ok(s)
}

/// Tyrant `stat` of the server at `addr` as name / value pairs.
fn stat(addr: &str) -> std::io::Result<HashMap<String, String>> {
    let mut s = connect(addr)?;
    s.write_all(&[0xC8, 0x88])?;
    let mut h = [0u8; 5];
    s.read_exact(&mut h)?;
    if h[0] != 0 {
        return Err(std::io::Error::other("stat refused"));
    }
    let mut text = vec![0u8; u32::from_be_bytes([h[1], h[2], h[3], h[4]]) as usize];
    s.read_exact(&mut text)?;
    Ok(String::from_utf8_lossy(&text)
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect())
}

fn stat_u64(st: &HashMap<String, String>, k: &str) -> u64 {
    st.get(k).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn secs_since(ns: u128) -> f64 {
    now_ns().saturating_sub(ns) as f64 / 1e9
}

fn wait_pos(o: &Opts) {
    let replica = o.str("replica");
    let ts: u64 = o.num("ts", None);
    let since: u128 = o.num("since-ns", None);
    let timeout: f64 = o.num("timeout", Some(300.0));
    let end = Instant::now() + Duration::from_secs_f64(timeout);
    while Instant::now() < end {
        if let Ok(st) = stat(&replica) {
            if stat_u64(&st, "rts") >= ts {
                println!("RESULT caught_up_s={:.3}", secs_since(since));
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    println!("RESULT caught_up_s=timeout");
    std::process::exit(1)
}

fn wait_boot(o: &Opts) {
    let (replica, master) = (o.str("replica"), o.str("master"));
    let since: u128 = o.num("since-ns", None);
    let timeout: f64 = o.num("timeout", Some(600.0));
    let end = Instant::now() + Duration::from_secs_f64(timeout);
    let mut target = None;
    let mut snap = 0.0;
    while Instant::now() < end {
        if let Ok(st) = stat(&replica) {
            match target {
                None if stat_u64(&st, "repl_bootstraps") >= 1 => {
                    snap = secs_since(since);
                    let m = stat(&master).expect("master stat");
                    target = Some(stat_u64(&m, "ulog_last_ts"));
                    println!("snapshot loaded after {snap:.3} s");
                }
                Some(ts) if stat_u64(&st, "rts") >= ts => {
                    println!(
                        "RESULT snapshot_s={snap:.3} caught_up_s={:.3} records={}",
                        secs_since(since),
                        stat_u64(&st, "rnum")
                    );
                    return;
                }
                _ => {}
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("RESULT snapshot_s=timeout");
    std::process::exit(1)
}

fn key(i: u64, size: usize) -> Vec<u8> {
    let mut k = format!("key:{i:012}").into_bytes();
    k.resize(size.max(16), b'x');
    k
}

/// Read one reply line of a memcached text `set`.
fn stored(r: &mut BufReader<TcpStream>, line: &mut Vec<u8>) -> std::io::Result<()> {
    line.clear();
    r.read_until(b'\n', line)?;
    if !line.starts_with(b"STORED") {
        return Err(std::io::Error::other(format!(
            "set answered {:?}",
            String::from_utf8_lossy(line)
        )));
    }
    Ok(())
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

fn lag(o: &Opts) {
    let master = o.str("master");
    let replica = o.str("replica");
    let rate: f64 = o.num("rate", None);
    let secs: f64 = o.num("secs", Some(20.0));
    let conns: usize = o.num("conns", Some(8));
    let key_size: usize = o.num("key-size", Some(100));
    let value_size: usize = o.num("value-size", Some(400));
    let keyspace: u64 = o.num("keyspace", Some(10_000));
    let probe_ms: u64 = o.num("probe-ms", Some(10));
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(secs);
    let sent = Arc::new(AtomicU64::new(0));
    // Load.
    let loaders: Vec<_> = (0..conns)
        .map(|c| {
            let (master, sent) = (master.clone(), sent.clone());
            std::thread::spawn(move || -> std::io::Result<()> {
                let s = connect(&master)?;
                let mut r = BufReader::new(s.try_clone()?);
                let mut w = s;
                let my_rate = rate / conns as f64;
                let value = vec![b'v'; value_size];
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (c as u64 + 1);
                let (mut done, mut out, mut line) = (0u64, Vec::new(), Vec::new());
                loop {
                    let now = Instant::now();
                    if now >= end {
                        return Ok(());
                    }
                    let due = ((now - t0).as_secs_f64() * my_rate) as u64;
                    let n = due.saturating_sub(done).min(256);
                    if n == 0 {
                        std::thread::sleep(Duration::from_micros(500));
                        continue;
                    }
                    out.clear();
                    for _ in 0..n {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let k = key(x % keyspace.max(1), key_size);
                        out.extend_from_slice(b"set ");
                        out.extend_from_slice(&k);
                        out.extend_from_slice(format!(" 0 0 {value_size}\r\n").as_bytes());
                        out.extend_from_slice(&value);
                        out.extend_from_slice(b"\r\n");
                    }
                    w.write_all(&out)?;
                    for _ in 0..n {
                        stored(&mut r, &mut line)?;
                    }
                    done += n;
                    sent.fetch_add(n, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // Probe acknowledgements and first sightings, in µs since t0, by sequence number.
    let acks: Arc<Mutex<Vec<u64>>> = Arc::default();
    let ack_lat: Arc<Mutex<Vec<f64>>> = Arc::default();
    let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
    let probing = Arc::new(AtomicBool::new(true));
    let prober = {
        let (master, acks, ack_lat) = (master.clone(), acks.clone(), ack_lat.clone());
        std::thread::spawn(move || -> std::io::Result<()> {
            let s = connect(&master)?;
            let mut r = BufReader::new(s.try_clone()?);
            let mut w = s;
            let mut line = Vec::new();
            let mut seq = 0u64;
            let mut next = Instant::now();
            while next < end {
                let now = Instant::now();
                if now < next {
                    std::thread::sleep(next - now);
                }
                next += Duration::from_millis(probe_ms);
                seq += 1;
                let v = seq.to_string();
                let sent = Instant::now();
                w.write_all(format!("set lag:probe 0 0 {}\r\n{v}\r\n", v.len()).as_bytes())?;
                stored(&mut r, &mut line)?;
                let at = t0.elapsed().as_micros() as u64;
                ack_lat
                    .lock()
                    .unwrap()
                    .push(sent.elapsed().as_secs_f64() * 1e3);
                acks.lock().unwrap().push(at);
            }
            Ok(())
        })
    };
    let poller = {
        let (replica, seen, probing) = (replica.clone(), seen.clone(), probing.clone());
        std::thread::spawn(move || -> std::io::Result<()> {
            let s = connect(&replica)?;
            let mut r = BufReader::new(s.try_clone()?);
            let mut w = s;
            let mut line = Vec::new();
            let mut last = 0u64;
            while probing.load(Ordering::Relaxed) {
                w.write_all(b"get lag:probe\r\n")?;
                line.clear();
                r.read_until(b'\n', &mut line)?;
                let mut got = None;
                if line.starts_with(b"VALUE ") {
                    line.clear();
                    r.read_until(b'\n', &mut line)?;
                    got = std::str::from_utf8(&line)
                        .ok()
                        .and_then(|v| v.trim().parse().ok());
                    line.clear();
                    r.read_until(b'\n', &mut line)?; // END
                }
                let at = t0.elapsed().as_micros() as u64;
                if let Some(seq) = got.filter(|&s: &u64| s > last) {
                    let mut seen = seen.lock().unwrap();
                    seen.resize(seq as usize, at);
                    last = seq;
                }
                std::thread::sleep(Duration::from_micros(500));
            }
            Ok(())
        })
    };
    let mut failed = false;
    for l in loaders {
        if let Err(e) = l.join().unwrap() {
            eprintln!("load connection: {e}");
            failed = true;
        }
    }
    let load_secs = t0.elapsed().as_secs_f64();
    if let Err(e) = prober.join().unwrap() {
        eprintln!("probe: {e}");
        failed = true;
    }
    let probes = acks.lock().unwrap().len();
    // Give the replica up to 10 s to show the last probe.
    let grace = Instant::now() + Duration::from_secs(10);
    while seen.lock().unwrap().len() < probes && Instant::now() < grace {
        std::thread::sleep(Duration::from_millis(5));
    }
    probing.store(false, Ordering::Relaxed);
    if let Err(e) = poller.join().unwrap() {
        eprintln!("poll: {e}");
        failed = true;
    }
    let acks = acks.lock().unwrap().clone();
    let seen = seen.lock().unwrap().clone();
    let mut lags: Vec<f64> = acks
        .iter()
        .zip(&seen)
        .map(|(a, s)| s.saturating_sub(*a) as f64 / 1e3)
        .collect();
    let unseen = acks.len() - lags.len();
    let mut acked = ack_lat.lock().unwrap().clone();
    let ops = sent.load(Ordering::Relaxed);
    let (p50, p90, p99, p999) = (
        pct(&mut lags, 0.5),
        pct(&mut lags, 0.9),
        pct(&mut lags, 0.99),
        pct(&mut lags, 0.999),
    );
    let max = lags.iter().copied().fold(0.0, f64::max);
    println!(
        "load {ops} sets in {load_secs:.2} s: {:.0}/s (asked {rate:.0}/s); {} probes, {unseen} \
         never seen; lag ms p50 {p50:.2} p90 {p90:.2} p99 {p99:.2} p99.9 {p999:.2} max {max:.2}; \
         probe set on the master ms p50 {:.2} p99 {:.2}",
        ops as f64 / load_secs,
        acks.len(),
        pct(&mut acked, 0.5),
        pct(&mut acked, 0.99),
    );
    println!(
        "RESULT rate={rate:.0} achieved={:.0} probes={} unseen={unseen} lag_p50_ms={p50:.2} \
         lag_p90_ms={p90:.2} lag_p99_ms={p99:.2} lag_p999_ms={p999:.2} lag_max_ms={max:.2}",
        ops as f64 / load_secs,
        acks.len()
    );
    if failed || unseen > 0 {
        std::process::exit(1);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else { usage() };
    let o = Opts::parse(&args[1..]);
    match cmd.as_str() {
        "lag" => lag(&o),
        "wait-pos" => wait_pos(&o),
        "wait-boot" => wait_boot(&o),
        _ => usage(),
    }
}
