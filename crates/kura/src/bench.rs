//! `kura bench`: a load generator for memcached servers (Kura or memcached itself), text or
//! binary protocol, for Tokyo Tyrant servers (get / put / putnr, or a script's `ext` call) and
//! for Kyoto Tycoon's binary protocol (a script's `play_script`, 0xB4). Threads × connections, each connection sending `pipeline` requests per round
//! trip; random keys from a key space; a get:set ratio; bounded by a duration or a request count.
//! Prints throughput and latency percentiles, and one machine-readable `RESULT` line.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum, Debug)]
pub enum Proto {
    /// memcached text.
    Text,
    /// memcached binary.
    Binary,
    /// Tokyo Tyrant binary (get and put, or putnr with --putnr).
    Tyrant,
    /// Tokyo Tyrant's `ext` (0xC8 0x68): every request calls the `--ext` script's function
    /// --script with the key and the value, with the --ext-opts locking.
    TyrantExt,
    /// Kyoto Tycoon's binary play_script (0xB4): every request calls the `--scr` script's
    /// procedure --script with the input `key` and `value`.
    KtScript,
}

#[derive(clap::Args, Clone, Debug)]
pub struct BenchArgs {
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, default_value_t = 1978)]
    port: u16,
    #[arg(long, value_enum, default_value = "text")]
    protocol: Proto,
    /// Connections in all (spread over the threads).
    #[arg(long, default_value_t = 128)]
    connections: usize,
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Requests sent per connection before reading their replies.
    #[arg(long, default_value_t = 1)]
    pipeline: usize,
    #[arg(long, default_value_t = 100)]
    key_size: usize,
    #[arg(long, default_value_t = 400)]
    value_size: usize,
    /// Distinct keys.
    #[arg(long, default_value_t = 10_000)]
    keyspace: u64,
    /// Gets per sets, as GETS:SETS (e.g. 9:1; 1:0 = get only; 0:1 = set only).
    #[arg(long, default_value = "9:1")]
    ratio: String,
    /// Run this many seconds (default 10 when --requests is not given).
    #[arg(long)]
    duration: Option<f64>,
    /// Stop after this many requests in all.
    #[arg(long)]
    requests: Option<u64>,
    /// Store every key of the key space first (not timed).
    #[arg(long)]
    preload: bool,
    /// With --protocol tyrant: send the sets as putnr (no reply is awaited).
    #[arg(long)]
    putnr: bool,
    /// Bulk mode: store N distinct records `bulk:%010d` (values of 100–180 bytes, ~140 bytes a
    /// record with the key, derived from the key so they can be checked) over the connections,
    /// pipelined; with --verify, read every one back and compare. Text protocol.
    #[arg(long)]
    bulk: Option<u64>,
    /// The script function that --protocol tyrant-ext and kt-script call.
    #[arg(long, default_value = "incr")]
    script: String,
    /// Tyrant `ext` options: 1 locks the record, 2 locks the whole database, 0 no lock.
    #[arg(long, default_value_t = 1)]
    ext_opts: u32,
    /// With --bulk: read back and verify instead of writing.
    #[arg(long, requires = "bulk")]
    verify: bool,
    /// Connect over TLS, trusting the certificate authorities in this PEM file (the server's
    /// certificate must name --host). Not with --bulk.
    #[arg(long, value_name = "FILE", conflicts_with = "bulk")]
    tls_ca: Option<std::path::PathBuf>,
}

/// A connection of the load client: plain, or TLS (rustls).
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(b),
            Stream::Tls(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(b),
            Stream::Tls(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// The TLS client settings of --tls-ca.
fn tls_client(ca: &std::path::Path) -> Result<std::sync::Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("--tls-ca {}: {e:?}", ca.display()))?;
    for c in certs {
        roots
            .add(c)
            .map_err(|e| format!("--tls-ca {}: {e}", ca.display()))?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(std::sync::Arc::new(cfg))
}

/// Connect (with TLS under --tls-ca).
fn connect(a: &BenchArgs) -> std::io::Result<BufReader<Stream>> {
    let s = TcpStream::connect((a.host.as_str(), a.port))?;
    s.set_nodelay(true)?;
    let s = match &a.tls_ca {
        None => Stream::Plain(s),
        Some(ca) => {
            let cfg = tls_client(ca).map_err(std::io::Error::other)?;
            let name = rustls::pki_types::ServerName::try_from(a.host.clone())
                .map_err(std::io::Error::other)?;
            let c = rustls::ClientConnection::new(cfg, name).map_err(std::io::Error::other)?;
            Stream::Tls(Box::new(rustls::StreamOwned::new(c, s)))
        }
    };
    Ok(BufReader::with_capacity(256 << 10, s))
}

/// The value of bulk record `i`: 100 to 180 bytes, a function of `i`.
fn bulk_value(i: u64) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let len = 100 + (x % 81) as usize;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b'a' + (x % 26) as u8
        })
        .collect()
}

/// Write (or read back and check) records `lo..hi` on one connection, `depth` at a time.
fn bulk_range(a: &BenchArgs, lo: u64, hi: u64, depth: u64) -> std::io::Result<(u64, u64)> {
    let s = TcpStream::connect((a.host.as_str(), a.port))?;
    s.set_nodelay(true)?;
    let mut w = s.try_clone()?;
    let mut r = BufReader::with_capacity(1 << 20, s);
    let (mut done, mut bad) = (0u64, 0u64);
    let mut out = Vec::with_capacity(1 << 20);
    let mut line = Vec::new();
    let mut i = lo;
    while i < hi {
        let n = (hi - i).min(depth);
        out.clear();
        for j in i..i + n {
            let k = format!("bulk:{j:010}");
            if a.verify {
                out.extend_from_slice(format!("get {k}\r\n").as_bytes());
            } else {
                let v = bulk_value(j);
                out.extend_from_slice(format!("set {k} 0 0 {}\r\n", v.len()).as_bytes());
                out.extend_from_slice(&v);
                out.extend_from_slice(b"\r\n");
            }
        }
        w.write_all(&out)?;
        for j in i..i + n {
            line.clear();
            r.read_until(b'\n', &mut line)?;
            if !a.verify {
                bad += u64::from(!line.starts_with(b"STORED"));
                done += 1;
                continue;
            }
            if line.starts_with(b"VALUE ") {
                let len: usize = std::str::from_utf8(&line)
                    .ok()
                    .and_then(|l| l.split_whitespace().nth(3))
                    .and_then(|x| x.parse().ok())
                    .unwrap_or(0);
                let mut v = vec![0u8; len + 2];
                r.read_exact(&mut v)?;
                v.truncate(len);
                bad += u64::from(v != bulk_value(j));
                line.clear();
                r.read_until(b'\n', &mut line)?;
            } else {
                bad += 1; // END without a value: missing
            }
            done += 1;
        }
        i += n;
    }
    Ok((done, bad))
}

fn run_bulk(a: &BenchArgs, n: u64) -> ExitCode {
    let start = Instant::now();
    let conns = a.connections.max(1) as u64;
    let results: Vec<std::io::Result<(u64, u64)>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..conns)
            .map(|c| {
                let (lo, hi) = (n * c / conns, n * (c + 1) / conns);
                sc.spawn(move || bulk_range(a, lo, hi, a.pipeline.max(1) as u64))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("panicked")))
            })
            .collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let (mut done, mut bad) = (0, 0);
    for r in results {
        match r {
            Ok((d, b)) => {
                done += d;
                bad += b;
            }
            Err(e) => {
                eprintln!("kura: bulk connection failed: {e}");
                return ExitCode::from(1);
            }
        }
    }
    let what = if a.verify { "verified" } else { "stored" };
    println!(
        "{done} records {what} in {secs:.1}s ({:.0}/s); {bad} missing or wrong",
        done as f64 / secs
    );
    println!(
        "RESULT bulk={} records={done} seconds={secs:.3} per_sec={:.0} bad={bad}",
        if a.verify { "verify" } else { "load" },
        done as f64 / secs
    );
    if bad > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

struct Stats {
    ops: u64,
    gets: u64,
    hits: u64,
    errors: u64,
    lat_us: Vec<u32>,
}

/// Key number `i` as `size` bytes: `key:000000000042xxx…` from 16 bytes on; below that, `i`
/// in decimal padded with zeros to `size` digits (`00000042`, as tcrtest and tchtest write).
fn key(i: u64, size: usize) -> Vec<u8> {
    if size < 16 {
        let size = size.max(1);
        let modulo = 10u64.checked_pow(size as u32).unwrap_or(u64::MAX);
        return format!("{:0size$}", i % modulo).into_bytes();
    }
    let mut k = format!("key:{i:012}").into_bytes();
    k.resize(size.max(k.len()), b'x');
    k.truncate(size.max(16));
    k
}

/// xorshift64*: the generator of key numbers and the get/set choice.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn encode(out: &mut Vec<u8>, a: &BenchArgs, putnr: bool, get: bool, k: &[u8], value: &[u8]) {
    use kura_proto::tt_bin::{encode_request, Request};
    match a.protocol {
        Proto::TyrantExt => encode_request(
            &Request::Ext {
                name: a.script.as_bytes(),
                opts: a.ext_opts,
                key: k,
                value,
            },
            out,
        ),
        Proto::KtScript => kura_proto::kt_bin::encode_request(
            &kura_proto::kt_bin::Request::PlayScript {
                no_reply: false,
                name: a.script.as_bytes(),
                args: vec![(&b"key"[..], k), (&b"value"[..], value)],
            },
            out,
        ),
        Proto::Tyrant if get => encode_request(&Request::Get { key: k }, out),
        Proto::Tyrant if putnr => encode_request(&Request::PutNr { key: k, value }, out),
        Proto::Tyrant => encode_request(&Request::Put { key: k, value }, out),
        Proto::Text if get => {
            out.extend_from_slice(b"get ");
            out.extend_from_slice(k);
            out.extend_from_slice(b"\r\n");
        }
        Proto::Text => {
            out.extend_from_slice(
                format!("set {} 0 0 {}\r\n", String::from_utf8_lossy(k), value.len()).as_bytes(),
            );
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        Proto::Binary => {
            let (opcode, extras): (u8, &[u8]) = if get { (0x00, &[]) } else { (0x01, &[0; 8]) };
            let val: &[u8] = if get { &[] } else { value };
            kura_proto::mc_bin::encode_request(out, opcode, 0, 0, extras, k, val);
        }
    }
}

/// Read one reply; returns (ok, hit).
fn read_reply(
    r: &mut BufReader<Stream>,
    proto: Proto,
    putnr: bool,
    get: bool,
    line: &mut Vec<u8>,
) -> std::io::Result<(bool, bool)> {
    let u32_at = |r: &mut BufReader<Stream>| -> std::io::Result<u64> {
        let mut b = [0u8; 4];
        r.read_exact(&mut b)?;
        Ok(u64::from(u32::from_be_bytes(b)))
    };
    match proto {
        Proto::TyrantExt => {
            // `[0][size:4][bytes]` for the function's string, a bare error code for nil.
            let mut code = [0u8; 1];
            r.read_exact(&mut code)?;
            if code[0] != 0 {
                return Ok((false, false));
            }
            let n = u32_at(r)?;
            std::io::copy(&mut r.by_ref().take(n), &mut std::io::sink())?;
            Ok((true, false))
        }
        Proto::KtScript => {
            // `[0xB4][count:4]` and count × `[ksiz:4][vsiz:4][key][value]`, or `[0xBF]`.
            let mut magic = [0u8; 1];
            r.read_exact(&mut magic)?;
            if magic[0] != kura_proto::kt_bin::PLAY_SCRIPT {
                return Ok((false, false));
            }
            for _ in 0..u32_at(r)? {
                let n = u32_at(r)? + u32_at(r)?;
                std::io::copy(&mut r.by_ref().take(n), &mut std::io::sink())?;
            }
            Ok((true, false))
        }
        Proto::Tyrant if !get && putnr => Ok((true, false)), // no reply to wait for
        Proto::Tyrant => {
            let mut code = [0u8; 1];
            r.read_exact(&mut code)?;
            if code[0] != 0 {
                return Ok((get, false)); // a get of an absent key answers 1: a miss, not an error
            }
            if get {
                let mut len = [0u8; 4];
                r.read_exact(&mut len)?;
                let n = u32::from_be_bytes(len) as u64;
                std::io::copy(&mut r.by_ref().take(n), &mut std::io::sink())?;
            }
            Ok((true, get))
        }
        Proto::Text => {
            line.clear();
            r.read_until(b'\n', line)?;
            if !get {
                return Ok((line.starts_with(b"STORED"), false));
            }
            if line.starts_with(b"END") {
                return Ok((true, false));
            }
            if !line.starts_with(b"VALUE ") {
                return Ok((false, false));
            }
            let len: usize = std::str::from_utf8(line)
                .ok()
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            let mut data = vec![0u8; len + 2];
            r.read_exact(&mut data)?;
            line.clear();
            r.read_until(b'\n', line)?;
            Ok((line.starts_with(b"END"), true))
        }
        Proto::Binary => {
            let mut h = [0u8; 24];
            r.read_exact(&mut h)?;
            let blen = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
            let mut body = vec![0u8; blen];
            r.read_exact(&mut body)?;
            let status = u16::from_be_bytes([h[6], h[7]]);
            Ok((status == 0 || (get && status == 1), get && status == 0))
        }
    }
}

fn worker(
    a: &BenchArgs,
    conns: usize,
    seed: u64,
    deadline: Option<Instant>,
    budget: Option<u64>,
    get_share: f64,
) -> std::io::Result<Stats> {
    let mut socks: Vec<BufReader<Stream>> = (0..conns)
        .map(|_| connect(a))
        .collect::<std::io::Result<_>>()?;
    let value = vec![b'v'; a.value_size];
    let mut rng = Rng(seed | 1);
    let mut st = Stats {
        ops: 0,
        gets: 0,
        hits: 0,
        errors: 0,
        lat_us: Vec::new(),
    };
    let mut out = Vec::new();
    let mut line = Vec::new();
    let mut kinds: Vec<Vec<bool>> = vec![Vec::new(); conns];
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) || budget.is_some_and(|b| st.ops >= b) {
            break;
        }
        let sent = Instant::now();
        for (i, s) in socks.iter_mut().enumerate() {
            out.clear();
            kinds[i].clear();
            for _ in 0..a.pipeline {
                // A script call is one request whatever the ratio.
                let get = !matches!(a.protocol, Proto::TyrantExt | Proto::KtScript)
                    && (rng.next() % 10_000) as f64 / 10_000.0 < get_share;
                let k = key(rng.next() % a.keyspace.max(1), a.key_size);
                encode(&mut out, a, a.putnr, get, &k, &value);
                kinds[i].push(get);
            }
            s.get_mut().write_all(&out)?;
        }
        for (i, r) in socks.iter_mut().enumerate() {
            for &get in &kinds[i] {
                let (ok, hit) = read_reply(r, a.protocol, a.putnr, get, &mut line)?;
                st.ops += 1;
                st.gets += u64::from(get);
                st.hits += u64::from(hit);
                st.errors += u64::from(!ok);
                st.lat_us
                    .push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32);
            }
        }
    }
    if a.protocol == Proto::Tyrant && a.putnr {
        // putnr is not answered: one get per connection makes the timed run include the
        // server executing every putnr sent before it.
        for r in socks.iter_mut() {
            out.clear();
            encode(&mut out, a, false, true, &key(0, a.key_size), &value);
            r.get_mut().write_all(&out)?;
            read_reply(r, a.protocol, false, true, &mut line)?;
        }
    }
    Ok(st)
}

pub fn run(a: BenchArgs) -> ExitCode {
    if let Some(n) = a.bulk {
        return run_bulk(&a, n);
    }
    let share = match a
        .ratio
        .split_once(':')
        .and_then(|(g, s)| Some((g.parse::<f64>().ok()?, s.parse::<f64>().ok()?)))
    {
        Some((g, s)) if g >= 0.0 && s >= 0.0 && g + s > 0.0 => g / (g + s),
        _ => {
            eprintln!("kura: --ratio expects GETS:SETS, e.g. 9:1");
            return ExitCode::from(2);
        }
    };
    if a.threads == 0 || a.connections < a.threads || a.pipeline == 0 {
        eprintln!("kura: need at least one connection per thread and a pipeline of 1 or more");
        return ExitCode::from(2);
    }
    if a.preload {
        let pre = BenchArgs {
            ratio: "0:1".into(),
            pipeline: 100,
            ..a.clone()
        };
        let mut r = match connect(&a) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("kura: cannot connect to {}:{}: {e}", a.host, a.port);
                return ExitCode::from(2);
            }
        };
        let value = vec![b'v'; a.value_size];
        let mut line = Vec::new();
        let mut i = 0;
        while i < a.keyspace {
            let mut out = Vec::new();
            let n = (a.keyspace - i).min(pre.pipeline as u64);
            for j in 0..n {
                encode(&mut out, &a, false, false, &key(i + j, a.key_size), &value);
            }
            if r.get_mut().write_all(&out).is_err() {
                eprintln!("kura: preload failed");
                return ExitCode::from(1);
            }
            for _ in 0..n {
                if !matches!(
                    read_reply(&mut r, a.protocol, false, false, &mut line),
                    Ok((true, _))
                ) {
                    eprintln!("kura: preload: a set was refused");
                    return ExitCode::from(1);
                }
            }
            i += n;
        }
    }
    let duration = a.duration.or(if a.requests.is_none() {
        Some(10.0)
    } else {
        None
    });
    let start = Instant::now();
    let deadline = duration.map(|d| start + Duration::from_secs_f64(d));
    let per_thread_budget = a.requests.map(|r| r.div_ceil(a.threads as u64));
    let results: Vec<std::io::Result<Stats>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..a.threads)
            .map(|t| {
                let conns = a.connections / a.threads + usize::from(t < a.connections % a.threads);
                let a = &a;
                sc.spawn(move || {
                    worker(
                        a,
                        conns,
                        0x9E37_79B9 ^ ((t as u64 + 1) * 7919),
                        deadline,
                        per_thread_budget,
                        share,
                    )
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("worker panicked")))
            })
            .collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let mut total = Stats {
        ops: 0,
        gets: 0,
        hits: 0,
        errors: 0,
        lat_us: Vec::new(),
    };
    for r in results {
        match r {
            Ok(s) => {
                total.ops += s.ops;
                total.gets += s.gets;
                total.hits += s.hits;
                total.errors += s.errors;
                total.lat_us.extend(s.lat_us);
            }
            Err(e) => {
                eprintln!("kura: benchmark connection failed: {e}");
                return ExitCode::from(1);
            }
        }
    }
    total.lat_us.sort_unstable();
    let pct = |p: f64| -> u32 {
        if total.lat_us.is_empty() {
            return 0;
        }
        let i = ((total.lat_us.len() as f64 * p).ceil() as usize).clamp(1, total.lat_us.len()) - 1;
        total.lat_us[i]
    };
    let ops_s = total.ops as f64 / elapsed;
    println!(
        "{} ops in {elapsed:.2}s: {ops_s:.0} ops/s; latency p50 {} us, p99 {} us, p99.9 {} us; gets {} (hits {}), errors {}",
        total.ops, pct(0.5), pct(0.99), pct(0.999), total.gets, total.hits, total.errors
    );
    println!(
        "RESULT protocol={:?} connections={} threads={} pipeline={} key_size={} value_size={} keyspace={} ratio={} ops={} seconds={elapsed:.3} ops_per_sec={ops_s:.0} p50_us={} p99_us={} p999_us={} errors={}",
        a.protocol, a.connections, a.threads, a.pipeline, a.key_size, a.value_size, a.keyspace, a.ratio, total.ops, pct(0.5), pct(0.99), pct(0.999), total.errors
    );
    if total.errors > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
