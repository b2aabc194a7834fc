//! The table database (`PATH.kt`) on Tokyo Cabinet's `tcttest` workload, for
//! scripts/bench-table.sh.
//!
//! `write`: records 1..N as `tcttest write` makes them (primary key `%d` of the id; columns
//! `str` = the id, `num` = a random number up to the id (a third of them with two decimals),
//! `type` = 1..32, and when a random count 0..4 is not 0, `flag` and `text` = that many rising
//! numbers joined by commas), put one by one, optionally with the indexes of tcttest's flags
//! (`p`: the primary key decimal, `s`: `str` lexical, `n`: `num` decimal, `t`: `type`
//! decimal, `f`: `flag` token, `x`: `text` q-gram), then sync and close.
//! `read`: open, get every record 1..N, close.
//! `search`: one query shape run REPS times in one process (the database opened once).
//!
//! `seed`: the write-up's workload (issue 32) against a `kura serve` on 127.0.0.1:PORT over
//! the Tyrant binary protocol, on one connection, PIPELINE requests in flight (1: one
//! round trip a request): `misc setindex sendDates tok`, then N puts of records keyed by an
//! e-mail address or a 9-digit id (alternately) with a `sendDates` column of 1–5
//! comma-separated dates before 2026-11-28 and a `count` column (how many), then M
//! updates (records spread evenly over the N; each a get, then a put of the record with
//! 2026-11-28 added to `sendDates` and `count` one more, as the write-up did), then a get of
//! every key (each checked), then `misc search` of the records sent on
//! 2026-11-28 (`sendDates STRAND 2026-11-28`, which must find the M). One RESULT line per
//! phase (`matches=-1` for a server without `misc search`).
//! `search … date` is that query through the engine.
//!
//! Each prints one line `RESULT op=… records=… seconds=… [matches=…] file_size=…`.
//!
//! Usage: table-bench write [-n N] [-i pstnfx] PATH
//!        table-bench read PATH
//!        table-bench search [-r REPS] PATH SHAPE   (SHAPE: eq range fts order strinc date)
//!        table-bench seed [-n N] [-m M] [-p PIPELINE] [-x] PORT   (-x: no setindex, for a
//!                                                          hash database of the same data)

use kura_engine::table::query::{self, Cond, Op, OrderType, Query};
use kura_engine::table::{Columns, IndexOp, IndexType, PutMode, Table, TableDb};
use kura_engine::{Params, Store};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

/// tcttest's `myrand`-like draws from a fixed seed (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) % n.max(1)
    }
}

/// The columns tcttest's `procwrite` gives record `i` (id `i`).
fn record(r: &mut Rng, i: u64) -> Columns {
    let mut c = Columns::new();
    let set = |c: &mut Columns, n: &str, v: &str| c.set(n.as_bytes(), v.as_bytes()).unwrap();
    set(&mut c, "str", &i.to_string());
    let num = if r.below(3) == 0 {
        format!("{:.2}", (r.below(i * 100) + 1) as f64 / 100.0)
    } else {
        (r.below(i) + 1).to_string()
    };
    set(&mut c, "num", &num);
    set(&mut c, "type", &(r.below(32) + 1).to_string());
    let mut pt = 0;
    let mut list = String::new();
    for _ in 0..r.below(5) {
        pt += r.below(5) + 1;
        if !list.is_empty() {
            list.push(',');
        }
        list.push_str(&pt.to_string());
    }
    if !list.is_empty() {
        set(&mut c, "flag", &list);
        set(&mut c, "text", &list);
    }
    c
}

fn open(path: &str) -> kura_engine::Result<TableDb> {
    TableDb::open(Path::new(path), &Params::default())
}

fn write(path: &str, n: u64, indexes: &str) -> kura_engine::Result<()> {
    let start = Instant::now();
    let t = open(path)?;
    for flag in indexes.chars() {
        let (col, typ): (&[u8], _) = match flag {
            'p' => (b"", IndexType::Decimal),
            's' => (b"str", IndexType::Lexical),
            'n' => (b"num", IndexType::Decimal),
            't' => (b"type", IndexType::Decimal),
            'f' => (b"flag", IndexType::Token),
            'x' => (b"text", IndexType::QGram),
            _ => {
                return Err(kura_engine::Error::InvalidParam(format!(
                    "index flag `{flag}`: expected some of p s n t f x"
                )))
            }
        };
        t.set_index(col, IndexOp::Make { typ, keep: false })?;
    }
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    for i in 1..=n {
        let c = record(&mut r, i);
        t.put_row(i.to_string().as_bytes(), &c, PutMode::Replace)?;
    }
    t.sync()?;
    let rows = t.rows();
    t.close()?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "RESULT op=write records={rows} indexes={indexes} seconds={secs:.3} file_size={}",
        dir_size(Path::new(path))
    );
    Ok(())
}

fn read(path: &str) -> kura_engine::Result<()> {
    let start = Instant::now();
    let t = open(path)?;
    let n = t.rows();
    for i in 1..=n {
        if t.get_row(i.to_string().as_bytes())?.is_none() {
            return Err(kura_engine::Error::InvalidParam(format!(
                "record {i} is missing"
            )));
        }
    }
    t.close()?;
    let secs = start.elapsed().as_secs_f64();
    println!("RESULT op=read records={n} seconds={secs:.3}");
    Ok(())
}

/// The query of each shape (the same as scripts/bench-table.sh gives `tctmgr search`).
fn shape(name: &str, rows: u64) -> kura_engine::Result<Query> {
    let cond = |c: &str, op, e: &str| Cond::new(c.as_bytes(), op, e.as_bytes(), false, false);
    let mut q = Query::new();
    match name {
        "eq" => q
            .conds
            .push(cond("str", Op::StrEq, &(rows / 2).to_string())?),
        "range" => q.conds.push(cond("num", Op::NumBt, "1000 2000")?),
        "fts" => q.conds.push(cond("text", Op::FtsPh, "3,5")?),
        "order" => {
            q.order = Some((b"num".to_vec(), OrderType::NumDesc));
            q.limit = Some(10);
        }
        "strinc" => q.conds.push(cond("str", Op::StrInc, "12345")?),
        "date" => q.conds.push(cond("sendDates", Op::StrAnd, NEW_DATE)?),
        _ => {
            return Err(kura_engine::Error::InvalidParam(format!(
                "shape `{name}`: expected eq range fts order strinc date"
            )))
        }
    }
    Ok(q)
}

fn search(path: &str, name: &str, reps: u32) -> kura_engine::Result<()> {
    let t = open(path)?;
    let q = shape(name, t.rows())?;
    let mut matches = 0;
    let start = Instant::now();
    for _ in 0..reps {
        matches = query::search(&t, &q)?.keys.len();
    }
    let secs = start.elapsed().as_secs_f64() / f64::from(reps);
    t.close()?;
    println!("RESULT op=search shape={name} reps={reps} seconds={secs:.6} matches={matches}");
    Ok(())
}

/// The date the updates add.
const NEW_DATE: &str = "2026-11-28";

/// Record `i` of the seed workload: its key, its dates and count.
fn seed_record(i: u64) -> (Vec<u8>, String, u64) {
    let mut r = Rng(i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let key = if i.is_multiple_of(2) {
        format!("user{i}.{}@mail{}.example", r.below(1000), r.below(50))
    } else {
        // A bijection of i onto 9-digit ids (611953 is prime to 900,000,000).
        format!("{:09}", (i * 611_953) % 900_000_000 + 100_000_000)
    };
    let n = r.below(5) + 1;
    let mut dates = String::new();
    let mut day = 0;
    for _ in 0..n {
        day += r.below(12) + 1; // days before 2026-11-28, rising
        if !dates.is_empty() {
            dates.push(',');
        }
        let (m, d) = if day <= 27 {
            (11, 28 - day)
        } else {
            (10, 31 + 27 - day + 1)
        };
        let (m, d) = if d < 1 { (9, 30 + d) } else { (m, d) };
        dates.push_str(&format!("2026-{m:02}-{d:02}"));
    }
    (key.into_bytes(), dates, n)
}

fn cols_wire(dates: &str, count: u64) -> Vec<u8> {
    format!("sendDates\0{dates}\0count\0{count}").into_bytes()
}

/// A request of Tyrant's binary protocol with a key and a value (put 0x10, putcat 0x12).
fn tt_kv(out: &mut Vec<u8>, cmd: u8, k: &[u8], v: &[u8]) {
    out.extend_from_slice(&[0xC8, cmd]);
    out.extend_from_slice(&(k.len() as u32).to_be_bytes());
    out.extend_from_slice(&(v.len() as u32).to_be_bytes());
    out.extend_from_slice(k);
    out.extend_from_slice(v);
}

fn tt_misc(out: &mut Vec<u8>, name: &[u8], args: &[&[u8]]) {
    out.extend_from_slice(&[0xC8, 0x90]);
    out.extend_from_slice(&(name.len() as u32).to_be_bytes());
    out.extend_from_slice(&0u32.to_be_bytes());
    out.extend_from_slice(&(args.len() as u32).to_be_bytes());
    out.extend_from_slice(name);
    for a in args {
        out.extend_from_slice(&(a.len() as u32).to_be_bytes());
        out.extend_from_slice(a);
    }
}

struct Conn {
    w: std::net::TcpStream,
    r: std::io::BufReader<std::net::TcpStream>,
}

impl Conn {
    fn code(&mut self) -> std::io::Result<u8> {
        let mut b = [0u8; 1];
        std::io::Read::read_exact(&mut self.r, &mut b)?;
        Ok(b[0])
    }
    fn u32(&mut self) -> std::io::Result<u32> {
        let mut b = [0u8; 4];
        std::io::Read::read_exact(&mut self.r, &mut b)?;
        Ok(u32::from_be_bytes(b))
    }
    fn skip(&mut self, n: u32) -> std::io::Result<()> {
        let mut v = vec![0u8; n as usize];
        std::io::Read::read_exact(&mut self.r, &mut v)
    }
    /// A misc reply: its code and its elements (skipped); the count.
    fn misc_reply(&mut self) -> std::io::Result<Option<u32>> {
        if self.code()? != 0 {
            return Ok(None);
        }
        let n = self.u32()?;
        for _ in 0..n {
            let len = self.u32()?;
            self.skip(len)?;
        }
        Ok(Some(n))
    }
}

fn seed_err(what: String) -> kura_engine::Error {
    kura_engine::Error::InvalidParam(what)
}

/// Send the requests `make(i, out)` for i in 0..n, `depth` at a time, each batch's replies
/// read by `check` before the next batch goes out.
fn pipelined(
    c: &mut Conn,
    n: u64,
    depth: u64,
    make: &mut dyn FnMut(u64, &mut Vec<u8>),
    check: &mut dyn FnMut(&mut Conn, u64) -> std::io::Result<bool>,
) -> kura_engine::Result<()> {
    let mut buf = Vec::new();
    let mut i = 0;
    while i < n {
        let end = (i + depth).min(n);
        buf.clear();
        for j in i..end {
            make(j, &mut buf);
        }
        std::io::Write::write_all(&mut c.w, &buf)?;
        for j in i..end {
            if !check(c, j)? {
                return Err(seed_err(format!("request {j} failed")));
            }
        }
        i = end;
    }
    Ok(())
}

fn seed(port: u16, n: u64, m: u64, depth: u64, index: bool) -> kura_engine::Result<()> {
    let w = std::net::TcpStream::connect(("127.0.0.1", port))?;
    w.set_nodelay(true)?;
    let r = std::io::BufReader::with_capacity(1 << 16, w.try_clone()?);
    let mut c = Conn { w, r };
    let mut buf = Vec::new();
    if index {
        tt_misc(&mut buf, b"setindex", &[b"sendDates", b"tok"]);
        std::io::Write::write_all(&mut c.w, &buf)?;
        if c.misc_reply()?.is_none() {
            return Err(seed_err("misc setindex sendDates tok failed".into()));
        }
    }
    let report = |op: &str, count: u64, start: Instant, extra: String| {
        let secs = start.elapsed().as_secs_f64();
        println!(
            "RESULT op={op} records={count} pipeline={depth} seconds={secs:.3} ops_per_sec={:.0}{extra}",
            count as f64 / secs
        );
    };
    let ok = |c: &mut Conn, _| Ok(c.code()? == 0);
    let start = Instant::now();
    pipelined(
        &mut c,
        n,
        depth,
        &mut |i, out| {
            let (k, d, cnt) = seed_record(i);
            tt_kv(out, 0x10, &k, &cols_wire(&d, cnt));
        },
        &mut ok.clone(),
    )?;
    report("load", n, start, String::new());
    // The updated records: m of them spread evenly over the n.
    let upd = |j: u64| j * n / m.max(1);
    // As the write-up did it: a get of the record, then a put of it with the date added
    // (Tyrant's putcat keeps columns a record has, so it cannot extend one); `depth` gets,
    // then their `depth` puts.
    let start = Instant::now();
    let total = m.min(n);
    let mut j = 0;
    let mut got = Vec::new();
    while j < total {
        let end = (j + depth).min(total);
        buf.clear();
        for u in j..end {
            let k = seed_record(upd(u)).0;
            buf.extend_from_slice(&[0xC8, 0x30]);
            buf.extend_from_slice(&(k.len() as u32).to_be_bytes());
            buf.extend_from_slice(&k);
        }
        std::io::Write::write_all(&mut c.w, &buf)?;
        buf.clear();
        for u in j..end {
            if c.code()? != 0 {
                return Err(seed_err(format!("get of update {u} failed")));
            }
            let len = c.u32()?;
            got.resize(len as usize, 0);
            std::io::Read::read_exact(&mut c.r, &mut got)?;
            let mut dates = "";
            let mut count = 0u64;
            let mut parts = got.split(|&b| b == 0);
            while let (Some(name), Some(v)) = (parts.next(), parts.next()) {
                let v = std::str::from_utf8(v).unwrap_or("");
                match name {
                    b"sendDates" => dates = v,
                    b"count" => count = v.parse().unwrap_or(0),
                    _ => {}
                }
            }
            let k = seed_record(upd(u)).0;
            tt_kv(
                &mut buf,
                0x10,
                &k,
                &cols_wire(&format!("{dates},{NEW_DATE}"), count + 1),
            );
        }
        std::io::Write::write_all(&mut c.w, &buf)?;
        for u in j..end {
            if c.code()? != 0 {
                return Err(seed_err(format!("put of update {u} failed")));
            }
        }
        j = end;
    }
    report("update", m.min(n), start, String::new());
    let start = Instant::now();
    pipelined(
        &mut c,
        n,
        depth,
        &mut |i, out| {
            let k = seed_record(i).0;
            out.extend_from_slice(&[0xC8, 0x30]);
            out.extend_from_slice(&(k.len() as u32).to_be_bytes());
            out.extend_from_slice(&k);
        },
        &mut |c, _| {
            if c.code()? != 0 {
                return Ok(false);
            }
            let len = c.u32()?;
            c.skip(len)?;
            Ok(true)
        },
    )?;
    report("lookup", n, start, String::new());
    let start = Instant::now();
    buf.clear();
    let cond = format!("addcond\0sendDates\0{}\0{NEW_DATE}", 4); // STRAND
    tt_misc(&mut buf, b"search", &[cond.as_bytes()]);
    std::io::Write::write_all(&mut c.w, &buf)?;
    let found = c.misc_reply()?.map_or(-1, i64::from);
    report("query", 1, start, format!(" matches={found}"));
    Ok(())
}

fn dir_size(p: &Path) -> u64 {
    let Ok(m) = std::fs::metadata(p) else {
        return 0;
    };
    if !m.is_dir() {
        return m.len();
    }
    std::fs::read_dir(p)
        .map(|d| d.flatten().map(|e| dir_size(&e.path())).sum())
        .unwrap_or(0)
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: table-bench write [-n N] [-i pstnfx] PATH\n       table-bench read PATH\n       \
         table-bench search [-r REPS] PATH SHAPE   (eq range fts order strinc date)\n       \
         table-bench seed [-n N] [-m M] [-p PIPELINE] [-x] PORT"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        return usage();
    };
    let (mut n, mut idx, mut reps, mut rest) = (1_000_000u64, String::new(), 10u32, vec![]);
    let (mut m, mut depth, mut index) = (None, 256u64, true);
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().unwrap_or_default();
        match a.as_str() {
            "-n" => match val().parse() {
                Ok(v) if v > 0 => n = v,
                _ => return usage(),
            },
            "-i" => idx = val(),
            "-x" => index = false,
            "-m" => match val().parse() {
                Ok(v) => m = Some(v),
                _ => return usage(),
            },
            "-p" => match val().parse() {
                Ok(v) if v > 0 => depth = v,
                _ => return usage(),
            },
            "-r" => match val().parse() {
                Ok(v) if v > 0 => reps = v,
                _ => return usage(),
            },
            _ => rest.push(a.clone()),
        }
    }
    let r = match (cmd.as_str(), rest.as_slice()) {
        ("write", [p]) => write(p, n, &idx),
        ("read", [p]) => read(p),
        ("search", [p, s]) => search(p, s, reps),
        ("seed", [port]) => match port.parse() {
            Ok(port) => seed(port, n, m.unwrap_or(n * 158 / 376), depth, index),
            Err(_) => return usage(),
        },
        _ => return usage(),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("table-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
