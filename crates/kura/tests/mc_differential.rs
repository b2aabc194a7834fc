//! The differential test: every transcript of `tests/memcached/corpus.txt` is sent to a
//! memcached 1.6.18 started here (the Debian package) and to `kura serve` on its
//! `--memcached-port`, over `*` and over a `.kh`, and the replies are compared byte for byte
//! after masking only what must differ (cas uniques, stats values, versions, clock readings,
//! which are compared to within a second). Kura is also sent every transcript cut into pieces
//! at awkward offsets, and must answer exactly as memcached answered the whole.
//!
//! A difference fails the test, with a readable side-by-side of both transcripts, unless the
//! case is listed in [`LISTED`] *and* in docs/PROTOCOL-MEMCACHED.md, with the reason; a listed
//! case that no longer differs fails too (the list must stay true).
//!
//! memcached missing: with `CI=true` the test fails; locally it prints a notice and passes.
//! `MC_DIFF_CASE=substring` runs only the matching cases.
//!
//! The corpus format (tests/memcached/corpus.txt):
//! - `=== name` starts a case; a case runs on a connection of its own, after a `flush_all`.
//! - Every other line is sent with `\r\n` appended, unless it ends with a lone `\`. Escapes:
//!   `\r`, `\n`, `\t`, `\s` (a space), `\\`, `\xHH`, `\{COUNT*TEXT}` (TEXT repeated), `\$cas`
//!   (the last cas unique this connection was shown), `\$bad` (a cas unique that matches no
//!   record).
//! - `!bin OP field=value…` sends one binary request packet (see [`bin_packet`]).
//! - `!step` ends a step: what was written so far is followed by a request whose answer is
//!   known (text: `mg` of a key no case uses, with an opaque; binary: NOOP with an opaque)
//!   and the replies are read up to that answer; the end of a case is a step too.
//! - Blank lines count only when more of the case follows them.
//! - `!eof` ends the case by shutting down the sending side and reading to the end.
//! - `!sleep MS` waits (for expiry), between steps.
//! - A line starting with `#` is a comment (a request line starting with it: `\x23`).

mod common;

use common::Server;
use std::fmt::Write as _;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Differences from memcached 1.6.18 that Kura keeps, by case name; each is listed in
/// docs/PROTOCOL-MEMCACHED.md ("Differences found by the differential test") with its reason.
const LISTED: &[&str] = &[
    "get-long-line-bad-key-in-middle",
    "long-line-not-retrieval",
    "stats-groups-empty",
    "stats-cachedump",
    "meta-debug-ttl",
    "bin-unknown-with-body",
];

fn corpus_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/memcached/corpus.txt")
}

fn docs_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/PROTOCOL-MEMCACHED.md")
}

// ----- the corpus -----

/// One piece of a request stream: bytes, or a cas unique resolved when sent.
#[derive(Clone, Debug)]
enum Piece {
    Bytes(Vec<u8>),
    /// The last cas unique seen (`bad`: one that matches nothing).
    Cas {
        bad: bool,
    },
    /// A binary packet whose cas field is the last cas unique seen.
    BinCas {
        packet: Vec<u8>,
        bad: bool,
    },
}

#[derive(Clone, Debug)]
enum Step {
    /// Send, then a no-op, and read up to its answer.
    Send(Vec<Piece>),
    /// Send, shut down the sending side, read to the end.
    Eof(Vec<Piece>),
    /// Send, then read until the replies end with these bytes (no request follows).
    Until(Vec<Piece>, Vec<u8>),
    Sleep(u64),
}

#[derive(Clone, Debug)]
struct Case {
    name: String,
    steps: Vec<Step>,
    /// Binary protocol (the first byte sent is 0x80).
    binary: bool,
}

fn parse_corpus(text: &str) -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    let mut pieces: Vec<Piece> = Vec::new();
    let flush = |cases: &mut Vec<Case>, pieces: &mut Vec<Piece>, eof: bool| {
        if let Some(c) = cases.last_mut() {
            if !pieces.is_empty() || eof {
                let p = std::mem::take(pieces);
                c.steps.push(if eof { Step::Eof(p) } else { Step::Send(p) });
            }
        }
    };
    // Blank lines count only when more of the case follows (cases are separated by them).
    let mut blanks = 0;
    for (no, line) in text.lines().enumerate() {
        let at = || format!("corpus line {}", no + 1);
        if line.is_empty() {
            blanks += 1;
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        if !line.starts_with("=== ") && !cases.is_empty() {
            for _ in 0..std::mem::take(&mut blanks) {
                push_bytes(&mut pieces, b"\r\n");
            }
        }
        blanks = 0;
        if let Some(name) = line.strip_prefix("=== ") {
            flush(&mut cases, &mut pieces, false);
            let name = name.trim().to_string();
            assert!(
                cases.iter().all(|c| c.name != name),
                "{}: case {name} twice",
                at()
            );
            cases.push(Case {
                name,
                steps: Vec::new(),
                binary: false,
            });
            continue;
        }
        assert!(!cases.is_empty(), "{}: text before the first case", at());
        if line == "!step" {
            flush(&mut cases, &mut pieces, false);
        } else if line == "!eof" {
            flush(&mut cases, &mut pieces, true);
        } else if let Some(end) = line.strip_prefix("!until ") {
            let mut e = Vec::new();
            unescape(end, &mut e).unwrap_or_else(|e| panic!("{}: {e}", at()));
            let end = match e.as_slice() {
                [Piece::Bytes(b)] => b.clone(),
                _ => panic!("{}: !until takes bytes", at()),
            };
            let p = std::mem::take(&mut pieces);
            cases.last_mut().unwrap().steps.push(Step::Until(p, end));
        } else if let Some(ms) = line.strip_prefix("!sleep ") {
            flush(&mut cases, &mut pieces, false);
            let ms = ms.trim().parse().unwrap_or_else(|_| panic!("{}", at()));
            cases.last_mut().unwrap().steps.push(Step::Sleep(ms));
        } else if let Some(spec) = line.strip_prefix("!bin ") {
            pieces.push(bin_packet(spec).unwrap_or_else(|e| panic!("{}: {e}", at())));
        } else {
            // An odd number of trailing backslashes: the last one says "no \r\n".
            let trailing = line.bytes().rev().take_while(|&b| b == b'\\').count();
            let (body, crlf) = if trailing % 2 == 1 {
                (&line[..line.len() - 1], false)
            } else {
                (line, true)
            };
            unescape(body, &mut pieces).unwrap_or_else(|e| panic!("{}: {e}", at()));
            if crlf {
                push_bytes(&mut pieces, b"\r\n");
            }
        }
    }
    flush(&mut cases, &mut pieces, false);
    for c in &mut cases {
        c.binary = c.steps.iter().find_map(|s| match s {
            Step::Send(p) | Step::Eof(p) | Step::Until(p, _) => p.first().map(|p| match p {
                Piece::Bytes(b) => b.first() == Some(&0x80),
                Piece::BinCas { .. } => true,
                Piece::Cas { .. } => false,
            }),
            Step::Sleep(_) => None,
        }) == Some(true);
    }
    cases
}

fn push_bytes(pieces: &mut Vec<Piece>, b: &[u8]) {
    if let Some(Piece::Bytes(v)) = pieces.last_mut() {
        v.extend_from_slice(b);
    } else {
        pieces.push(Piece::Bytes(b.to_vec()));
    }
}

/// Decode the escapes of a corpus line into pieces.
fn unescape(s: &str, pieces: &mut Vec<Piece>) -> Result<(), String> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut lit = Vec::new();
    while i < b.len() {
        if b[i] != b'\\' {
            lit.push(b[i]);
            i += 1;
            continue;
        }
        let c = *b.get(i + 1).ok_or("a lone backslash")?;
        i += 2;
        match c {
            b'r' => lit.push(b'\r'),
            b'n' => lit.push(b'\n'),
            b't' => lit.push(b'\t'),
            b's' => lit.push(b' '),
            b'0' => lit.push(0),
            b'\\' => lit.push(b'\\'),
            b'x' => {
                let h = s.get(i..i + 2).ok_or("short \\x")?;
                lit.push(u8::from_str_radix(h, 16).map_err(|e| e.to_string())?);
                i += 2;
            }
            b'{' => {
                let end = s[i..].find('}').ok_or("unclosed \\{")? + i;
                let (n, text) = s[i..end].split_once('*').ok_or("\\{COUNT*TEXT}")?;
                let n: usize = n.parse().map_err(|_| "bad count")?;
                lit.extend(text.as_bytes().repeat(n));
                i = end + 1;
            }
            b'$' => {
                let bad = if s[i..].starts_with("cas") {
                    false
                } else if s[i..].starts_with("bad") {
                    true
                } else {
                    return Err("\\$cas or \\$bad".into());
                };
                i += 3;
                push_bytes(pieces, &std::mem::take(&mut lit));
                pieces.push(Piece::Cas { bad });
            }
            other => return Err(format!("unknown escape \\{}", other as char)),
        }
    }
    push_bytes(pieces, &lit);
    pieces.retain(|p| !matches!(p, Piece::Bytes(v) if v.is_empty()));
    Ok(())
}

/// Binary opcodes by name (memcached's protocol_binary.h).
const OPCODES: &[(&str, u8)] = &[
    ("GET", 0x00),
    ("SET", 0x01),
    ("ADD", 0x02),
    ("REPLACE", 0x03),
    ("DELETE", 0x04),
    ("INCREMENT", 0x05),
    ("DECREMENT", 0x06),
    ("QUIT", 0x07),
    ("FLUSH", 0x08),
    ("GETQ", 0x09),
    ("NOOP", 0x0a),
    ("VERSION", 0x0b),
    ("GETK", 0x0c),
    ("GETKQ", 0x0d),
    ("APPEND", 0x0e),
    ("PREPEND", 0x0f),
    ("STAT", 0x10),
    ("SETQ", 0x11),
    ("ADDQ", 0x12),
    ("REPLACEQ", 0x13),
    ("DELETEQ", 0x14),
    ("INCREMENTQ", 0x15),
    ("DECREMENTQ", 0x16),
    ("QUITQ", 0x17),
    ("FLUSHQ", 0x18),
    ("APPENDQ", 0x19),
    ("PREPENDQ", 0x1a),
    ("VERBOSITY", 0x1b),
    ("TOUCH", 0x1c),
    ("GAT", 0x1d),
    ("GATQ", 0x1e),
    ("GATK", 0x23),
    ("GATKQ", 0x24),
];

fn op_name(op: u8) -> String {
    OPCODES
        .iter()
        .find(|(_, o)| *o == op)
        .map_or_else(|| format!("0x{op:02x}"), |(n, _)| n.to_string())
}

/// `!bin OP field=value…`: OP is a name of [`OPCODES`] or `0xHH`. Fields: `k=` key and `v=`
/// value (corpus escapes, no spaces: use `\s`), `x=` extras in hex, `se=FLAGS,EXP` (the 8
/// bytes of set/add/replace), `ae=DELTA,INITIAL,EXP` (the 20 bytes of incr/decr), `e4=N` (one
/// u32: touch, gat, flush, verbosity), `cas=N|$cas|$bad`, `o=OPAQUE`, and overrides for
/// malformed packets: `klen=`, `elen=`, `blen=` (header fields), `magic=HH`, `cut=N` (send
/// only the first N bytes).
fn bin_packet(spec: &str) -> Result<Piece, String> {
    let mut it = spec.split_whitespace();
    let op = it.next().ok_or("no opcode")?;
    let opcode = match op.strip_prefix("0x") {
        Some(h) => u8::from_str_radix(h, 16).map_err(|e| e.to_string())?,
        None => {
            OPCODES
                .iter()
                .find(|(n, _)| *n == op)
                .ok_or(format!("unknown opcode {op}"))?
                .1
        }
    };
    let (mut key, mut value, mut extras) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cas, mut cas_from) = (0u64, None);
    let mut opaque = 0u32;
    let (mut klen, mut elen, mut blen, mut magic, mut cut) = (None, None, None, 0x80u8, None);
    let bytes_of = |v: &str| -> Result<Vec<u8>, String> {
        let mut p = Vec::new();
        unescape(v, &mut p)?;
        Ok(p.into_iter()
            .flat_map(|p| match p {
                Piece::Bytes(b) => b,
                _ => Vec::new(),
            })
            .collect())
    };
    let num = |v: &str| -> Result<u64, String> { v.parse().map_err(|_| format!("bad number {v}")) };
    for f in it {
        let (name, v) = f.split_once('=').ok_or(format!("bad field {f}"))?;
        match name {
            "k" => key = bytes_of(v)?,
            "v" => value = bytes_of(v)?,
            "x" => {
                extras = (0..v.len() / 2)
                    .map(|i| u8::from_str_radix(&v[2 * i..2 * i + 2], 16))
                    .collect::<Result<_, _>>()
                    .map_err(|e| e.to_string())?
            }
            "se" => {
                let (f, e) = v.split_once(',').ok_or("se=FLAGS,EXP")?;
                extras = (num(f)? as u32).to_be_bytes().to_vec();
                extras.extend_from_slice(&(num(e)? as u32).to_be_bytes());
            }
            "ae" => {
                let p: Vec<&str> = v.split(',').collect();
                if p.len() != 3 {
                    return Err("ae=DELTA,INITIAL,EXP".into());
                }
                extras = num(p[0])?.to_be_bytes().to_vec();
                extras.extend_from_slice(&num(p[1])?.to_be_bytes());
                extras.extend_from_slice(&(num(p[2])? as u32).to_be_bytes());
            }
            "e4" => extras = (num(v)? as u32).to_be_bytes().to_vec(),
            "cas" => match v {
                "$cas" => cas_from = Some(false),
                "$bad" => cas_from = Some(true),
                n => cas = num(n)?,
            },
            "o" => opaque = num(v)? as u32,
            "klen" => klen = Some(num(v)? as u16),
            "elen" => elen = Some(num(v)? as u8),
            "blen" => blen = Some(num(v)? as u32),
            "magic" => magic = u8::from_str_radix(v, 16).map_err(|e| e.to_string())?,
            "cut" => cut = Some(num(v)? as usize),
            other => return Err(format!("unknown field {other}")),
        }
    }
    let mut p = vec![magic, opcode];
    p.extend_from_slice(&klen.unwrap_or(key.len() as u16).to_be_bytes());
    p.push(elen.unwrap_or(extras.len() as u8));
    p.extend_from_slice(&[0, 0, 0]);
    let body = (extras.len() + key.len() + value.len()) as u32;
    p.extend_from_slice(&blen.unwrap_or(body).to_be_bytes());
    p.extend_from_slice(&opaque.to_be_bytes());
    p.extend_from_slice(&cas.to_be_bytes());
    p.extend_from_slice(&extras);
    p.extend_from_slice(&key);
    p.extend_from_slice(&value);
    if let Some(n) = cut {
        p.truncate(n);
    }
    Ok(match cas_from {
        Some(bad) => Piece::BinCas { packet: p, bad },
        None => Piece::Bytes(p),
    })
}

// ----- running a case -----

/// The text request that ends a step, and its answer: a miss of a key no case uses, with an
/// opaque, so that no reply of a case can be taken for it.
const TEXT_SYNC: &[u8] = b"mg __sync__ k O5ea17e57\r\n";
const TEXT_SYNC_REPLY: &[u8] = b"EN k__sync__ O5ea17e57\r\n";
/// How long a step may take before its replies are taken as they are (marked `<timeout>`).
const STEP_LIMIT: Duration = Duration::from_secs(10);

/// The binary no-op's opaque (its answer ends a step).
const BIN_SYNC_OPAQUE: u32 = 0x5EA1_7E57;

fn bin_sync() -> Vec<u8> {
    let mut p = vec![0x80, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    p.extend_from_slice(&BIN_SYNC_OPAQUE.to_be_bytes());
    p.extend_from_slice(&[0; 8]);
    p
}

fn bin_sync_reply() -> Vec<u8> {
    let mut p = vec![0x81, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    p.extend_from_slice(&BIN_SYNC_OPAQUE.to_be_bytes());
    p.extend_from_slice(&[0; 8]);
    p
}

/// What a server answered to one case: the replies of each step, raw.
struct Transcript {
    steps: Vec<Vec<u8>>,
}

/// How to deliver the bytes of a step.
#[derive(Clone, Copy)]
enum Delivery {
    Whole,
    /// In pieces cut at awkward offsets (seeded by the case and step), with pauses between.
    Split(u64),
}

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    s
}

/// Read until `buf` ends with `end` (None: until the end of the stream), for at most
/// `limit`. Returns whether the server closed the connection.
fn read_until(s: &mut TcpStream, buf: &mut Vec<u8>, end: Option<&[u8]>, limit: Duration) -> bool {
    let started = Instant::now();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        if let Some(e) = end {
            if buf.ends_with(e) {
                return false;
            }
        }
        if started.elapsed() > limit {
            buf.extend_from_slice(b"<timeout>");
            return false;
        }
        match s.read(&mut chunk) {
            Ok(0) => return true,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
}

/// Deterministic cut points of a step of `len` bytes: near both ends and a few inside.
fn cuts(len: usize, seed: u64) -> Vec<usize> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut c: Vec<usize> = vec![1, len.saturating_sub(1), len / 2];
    for _ in 0..2 {
        c.push((next() % len.max(1) as u64) as usize);
    }
    c.retain(|&p| p > 0 && p < len);
    c.sort_unstable();
    c.dedup();
    c
}

fn run_case(addr: &str, case: &Case, how: Delivery) -> Transcript {
    // A clean slate, over a text connection of its own: nothing left from the cases before.
    let mut f = connect(addr);
    f.write_all(b"flush_all\r\n").unwrap();
    let mut ok = Vec::new();
    read_until(&mut f, &mut ok, Some(b"OK\r\n"), Duration::from_secs(5));
    assert_eq!(ok, b"OK\r\n", "flush_all before {}", case.name);
    drop(f);
    let mut s = connect(addr);
    let mut cas: Option<u64> = None;
    let mut out = Vec::new();
    let mut closed = false;
    for (si, step) in case.steps.iter().enumerate() {
        let (pieces, eof, until) = match step {
            Step::Sleep(ms) => {
                std::thread::sleep(Duration::from_millis(*ms));
                continue;
            }
            Step::Send(p) => (p, false, None),
            Step::Eof(p) => (p, true, None),
            Step::Until(p, end) => (p, false, Some(end)),
        };
        if closed {
            out.push(b"<closed before this step>".to_vec());
            continue;
        }
        let mut bytes = Vec::new();
        let c = cas.unwrap_or(0);
        for p in pieces {
            match p {
                Piece::Bytes(b) => bytes.extend_from_slice(b),
                Piece::Cas { bad } => {
                    let v = if *bad { c.wrapping_add(1_000_003) } else { c };
                    bytes.extend_from_slice(v.to_string().as_bytes());
                }
                Piece::BinCas { packet, bad } => {
                    let v = if *bad { c.wrapping_add(1_000_003) } else { c };
                    let mut p = packet.clone();
                    if p.len() >= 24 {
                        p[16..24].copy_from_slice(&v.to_be_bytes());
                    }
                    bytes.extend_from_slice(&p);
                }
            }
        }
        let (sync, sync_reply) = if case.binary {
            (bin_sync(), bin_sync_reply())
        } else {
            (TEXT_SYNC.to_vec(), TEXT_SYNC_REPLY.to_vec())
        };
        let mut sent_ok = true;
        match how {
            Delivery::Whole => sent_ok &= s.write_all(&bytes).is_ok(),
            Delivery::Split(seed) => {
                let mut at = 0;
                for c in cuts(bytes.len(), seed ^ (si as u64 + 1).wrapping_mul(0x9E37)) {
                    sent_ok &= s.write_all(&bytes[at..c]).is_ok();
                    at = c;
                    std::thread::sleep(Duration::from_millis(2));
                }
                sent_ok &= s.write_all(&bytes[at..]).is_ok();
            }
        }
        let mut got = Vec::new();
        if let Some(end) = until {
            closed = read_until(&mut s, &mut got, Some(end), STEP_LIMIT);
            if closed {
                got.extend_from_slice(b"<closed>");
            }
        } else if eof {
            let _ = s.shutdown(std::net::Shutdown::Write);
            read_until(&mut s, &mut got, None, STEP_LIMIT);
            got.extend_from_slice(b"<eof>");
            closed = true;
        } else {
            let _ = sent_ok && s.write_all(&sync).is_ok();
            // No case waits for this: it only bounds a server that stopped answering (a
            // loaded machine may be slow, so it is generous).
            closed = read_until(&mut s, &mut got, Some(&sync_reply), STEP_LIMIT);
            if got.ends_with(&sync_reply) {
                got.truncate(got.len() - sync_reply.len());
            }
            if closed {
                got.extend_from_slice(b"<closed>");
            }
        }
        if std::env::var("MC_DIFF_RAW").is_ok() {
            eprintln!(
                "{addr} {} step {si}: sent {:?}\n  got {:?}",
                case.name,
                escape(&bytes),
                escape(&got)
            );
        }
        if let Some(c) = last_cas(&got, case.binary) {
            cas = Some(c);
        }
        out.push(got);
    }
    Transcript { steps: out }
}

// ----- reading replies -----

/// The last cas unique shown in some replies (gets VALUE lines, meta `c` flags, binary
/// headers).
fn last_cas(raw: &[u8], binary: bool) -> Option<u64> {
    let mut last = None;
    if binary {
        for p in bin_packets(raw).0 {
            if p.cas != 0 {
                last = Some(p.cas);
            }
        }
        return last;
    }
    for item in text_items(raw) {
        if let TextItem::Line(l) = item {
            let toks: Vec<&str> = l.split(' ').collect();
            match toks.first() {
                Some(&"VALUE") if toks.len() == 5 => last = toks[4].parse().ok().or(last),
                Some(&("VA" | "HD" | "NS" | "EX" | "NF" | "EN")) => {
                    for t in &toks[1..] {
                        if let Some(n) = t.strip_prefix('c').and_then(|n| n.parse().ok()) {
                            last = Some(n);
                        }
                    }
                }
                _ => {}
            }
        }
    }
    last
}

enum TextItem {
    /// A reply line, without its `\r\n` (lossy UTF-8).
    Line(String),
    /// A data block (after VALUE / VA), escaped.
    Data(String),
    /// Bytes left that are no whole line.
    Tail(String),
}

fn escape(b: &[u8]) -> String {
    let mut s = String::new();
    for &c in b {
        match c {
            b'\\' => s.push_str("\\\\"),
            b'\r' => s.push_str("\\r"),
            b'\n' => s.push_str("\\n"),
            0x20..=0x7e => s.push(c as char),
            _ => {
                let _ = write!(s, "\\x{c:02x}");
            }
        }
    }
    s
}

/// Split text replies into lines and the data blocks their headers announce.
fn text_items(raw: &[u8]) -> Vec<TextItem> {
    let mut items = Vec::new();
    let mut pos = 0;
    while pos < raw.len() {
        let Some(nl) = raw[pos..].iter().position(|&b| b == b'\n') else {
            items.push(TextItem::Tail(escape(&raw[pos..])));
            break;
        };
        let end = pos + nl + 1;
        let line = &raw[pos..end];
        // memcached ends metadump lines with a bare \n; keep what the server sent visible.
        let (text, bare) = match line.strip_suffix(b"\r\n") {
            Some(t) => (t, false),
            None => (&line[..line.len() - 1], true),
        };
        let mut l = String::from_utf8_lossy(text).into_owned();
        if bare {
            l.push_str("\\n");
        }
        pos = end;
        let toks: Vec<&str> = l.split(' ').collect();
        let data_len = match toks.first() {
            Some(&"VALUE") if toks.len() >= 4 => toks[3].parse::<usize>().ok(),
            Some(&"VA") if toks.len() >= 2 => toks[1].parse::<usize>().ok(),
            _ => None,
        };
        items.push(TextItem::Line(l));
        if let Some(n) = data_len {
            let take = (n + 2).min(raw.len() - pos);
            items.push(TextItem::Data(escape(&raw[pos..pos + take])));
            pos += take;
        }
    }
    items
}

struct BinPacket {
    opcode: u8,
    status: u16,
    opaque: u32,
    cas: u64,
    extras: Vec<u8>,
    key: Vec<u8>,
    value: Vec<u8>,
    magic: u8,
}

/// Split binary replies into packets; the bytes left over (no whole packet) are returned.
fn bin_packets(raw: &[u8]) -> (Vec<BinPacket>, Vec<u8>) {
    let mut v = Vec::new();
    let mut p = 0;
    while raw.len() - p >= 24 {
        let h = &raw[p..p + 24];
        let klen = u16::from_be_bytes([h[2], h[3]]) as usize;
        let elen = h[4] as usize;
        let blen = u32::from_be_bytes(h[8..12].try_into().unwrap()) as usize;
        if raw.len() - p - 24 < blen || klen + elen > blen {
            break;
        }
        let body = &raw[p + 24..p + 24 + blen];
        v.push(BinPacket {
            magic: h[0],
            opcode: h[1],
            status: u16::from_be_bytes([h[6], h[7]]),
            opaque: u32::from_be_bytes(h[12..16].try_into().unwrap()),
            cas: u64::from_be_bytes(h[16..24].try_into().unwrap()),
            extras: body[..elen].to_vec(),
            key: body[elen..elen + klen].to_vec(),
            value: body[elen + klen..].to_vec(),
        });
        p += 24 + blen;
    }
    (v, raw[p..].to_vec())
}

// ----- masking -----

/// A transcript made comparable: one line per reply element, and the clock readings
/// (TTLs, ages, unix times) taken out, compared to within a second.
#[derive(Default)]
struct Masked {
    lines: Vec<String>,
    clocks: Vec<i64>,
}

impl Masked {
    /// A cas unique: only whether it is 0 is compared (memcached's come from one counter,
    /// Kura's from the record's version; each is unique for its key, which the corpus checks
    /// by using them).
    fn cas(&mut self, v: u64) -> String {
        if v == 0 {
            "0".into()
        } else {
            "<cas>".into()
        }
    }

    fn clock(&mut self, v: &str) -> String {
        match v.parse::<i64>() {
            Ok(n) => {
                self.clocks.push(n);
                "<clock>".into()
            }
            Err(_) => v.to_string(),
        }
    }

    /// A meta reply line: cas uniques named, TTLs (`t`) and ages (`l`) taken out.
    fn meta_line(&mut self, l: &str) -> String {
        let mut toks: Vec<String> = Vec::new();
        for (i, t) in l.split(' ').enumerate() {
            let masked = if i == 0 {
                t.to_string()
            } else if let Some(n) = t.strip_prefix('c').filter(|n| is_num(n)) {
                format!("c{}", self.cas(n.parse().unwrap_or(0)))
            } else if let Some(n) = t.strip_prefix('t').filter(|n| is_num(n) && *n != "-1") {
                format!("t{}", self.clock(n))
            } else if let Some(n) = t.strip_prefix('l').filter(|n| is_num(n)) {
                format!("l{}", self.clock(n))
            } else {
                t.to_string()
            };
            toks.push(masked);
        }
        toks.join(" ")
    }

    /// `name=value` fields (me, metadump): cas named, times and ages taken out.
    fn fields_line(&mut self, l: &str) -> String {
        let mut toks: Vec<String> = Vec::new();
        for t in l.split(' ') {
            let masked = match t.split_once('=') {
                Some(("cas", v)) => format!("cas={}", self.cas(v.parse().unwrap_or(0))),
                Some((k @ ("exp" | "la"), v)) if v != "-1" => format!("{k}={}", self.clock(v)),
                _ => t.to_string(),
            };
            toks.push(masked);
        }
        toks.join(" ")
    }
}

fn is_num(s: &str) -> bool {
    let d = s.strip_prefix('-').unwrap_or(s);
    !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
}

/// Statistics only Kura has (after memcached's): taken out before comparing (listed in
/// docs/PROTOCOL-MEMCACHED.md).
fn kura_only_stat(name: &str) -> bool {
    // The replication state (`Replication::report`), as Tyrant `stat` has it.
    const REPL: [&str; 16] = [
        "sid",
        "repl_role",
        "read_only",
        "setmst_refused",
        "mhost",
        "mport",
        "master_protocol",
        "rts",
        "master_sid",
        "master_connected",
        "delay",
        "master_heard_ago",
        "repl_applied",
        "repl_bootstraps",
        "repl_error",
        "ulog_last_ts",
    ];
    name == "kura_version"
        || name.starts_with("db_")
        || name.starts_with("replica_")
        || REPL.contains(&name)
}

/// A dump lists items in the server's own order (memcached's LRU, Kura's table): runs of
/// dump lines are compared sorted.
fn sort_dump_runs(items: &mut [TextItem]) {
    let dump = |i: &TextItem| matches!(i, TextItem::Line(l) if l.starts_with("key=") || l.starts_with("ITEM "));
    let mut i = 0;
    while i < items.len() {
        let j = i + items[i..].iter().take_while(|x| dump(x)).count();
        items[i..j].sort_by(|a, b| match (a, b) {
            (TextItem::Line(a), TextItem::Line(b)) => a.cmp(b),
            _ => std::cmp::Ordering::Equal,
        });
        i = j.max(i + 1);
    }
}

fn mask_text(raw: &[u8], m: &mut Masked) {
    let mut items = text_items(raw);
    sort_dump_runs(&mut items);
    for item in items {
        let line = match item {
            TextItem::Data(d) => format!("  data {d}"),
            TextItem::Tail(t) => format!("  tail {t}"),
            TextItem::Line(l) => {
                let toks: Vec<&str> = l.split(' ').collect();
                match toks[0] {
                    "VALUE" if toks.len() == 5 => {
                        let c = m.cas(toks[4].parse().unwrap_or(0));
                        format!("VALUE {} {} {} {c}", toks[1], toks[2], toks[3])
                    }
                    "STAT" if toks.len() >= 2 && kura_only_stat(toks[1]) => continue,
                    "STAT" if toks.len() >= 2 => format!("STAT {} *", toks[1]),
                    "VERSION" => "VERSION *".into(),
                    "VA" | "HD" | "EN" | "NF" | "NS" | "EX" => m.meta_line(&l),
                    "ME" => m.fields_line(&l),
                    "ITEM" if toks.len() == 6 => {
                        // ITEM key [N b; T s]: T is a unix time (0: none).
                        let t = toks[4];
                        let t = if t == "0" { "0".into() } else { m.clock(t) };
                        format!("ITEM {} {} {} {t} {}", toks[1], toks[2], toks[3], toks[5])
                    }
                    _ if l.starts_with("key=") => m.fields_line(&l),
                    _ => l.clone(),
                }
            }
        };
        m.lines.push(line);
    }
}

fn mask_binary(raw: &[u8], m: &mut Masked) {
    let (packets, rest) = bin_packets(raw);
    for p in packets {
        let stat = p.opcode == 0x10 && !p.key.is_empty();
        if stat && kura_only_stat(&String::from_utf8_lossy(&p.key)) {
            continue;
        }
        let version = p.opcode == 0x0b && p.status == 0;
        let value = if stat || version {
            "*".to_string()
        } else {
            escape(&p.value)
        };
        let cas = m.cas(p.cas);
        m.lines.push(format!(
            "{}{} st=0x{:04x} o={} cas={cas} x={} k={} v={value}",
            if p.magic == 0x81 { "" } else { "magic? " },
            op_name(p.opcode),
            p.status,
            p.opaque,
            p.extras.iter().fold(String::new(), |mut s, b| {
                let _ = write!(s, "{b:02x}");
                s
            }),
            escape(&p.key),
        ));
    }
    if !rest.is_empty() {
        m.lines.push(format!("  tail {}", escape(&rest)));
    }
}

fn mask(t: &Transcript, binary: bool) -> Masked {
    let mut m = Masked::default();
    for (i, step) in t.steps.iter().enumerate() {
        m.lines.push(format!("-- step {}", i + 1));
        // Markers the runner added stay readable.
        let mut raw = &step[..];
        let mut marks = Vec::new();
        for mark in [
            &b"<eof>"[..],
            b"<closed>",
            b"<timeout>",
            b"<closed before this step>",
        ] {
            if let Some(r) = raw.strip_suffix(mark) {
                raw = r;
                marks.push(String::from_utf8_lossy(mark).into_owned());
            }
        }
        // A binary connection answers in text when it was never binary (and vice versa).
        if binary && raw.first() == Some(&0x81) {
            mask_binary(raw, &mut m);
        } else {
            mask_text(raw, &mut m);
        }
        marks.reverse();
        m.lines.extend(marks);
    }
    m
}

fn same(a: &Masked, b: &Masked) -> bool {
    a.lines == b.lines
        && a.clocks.len() == b.clocks.len()
        && a.clocks
            .iter()
            .zip(&b.clocks)
            .all(|(x, y)| (x - y).abs() <= 1)
}

fn side_by_side(want: &Masked, got: &Masked, got_name: &str) -> String {
    let mut s = String::new();
    let n = want.lines.len().max(got.lines.len());
    // A window around the first difference: long transcripts stay readable.
    let first = (0..n)
        .find(|&i| want.lines.get(i) != got.lines.get(i))
        .unwrap_or(0);
    let (from, to) = (first.saturating_sub(6), (first + 24).min(n));
    let _ = writeln!(
        s,
        "    {:<60} | {got_name}   (lines {}-{} of {} | {})",
        "memcached 1.6.18",
        from + 1,
        to,
        want.lines.len(),
        got.lines.len()
    );
    for i in from..to {
        let a = want.lines.get(i).map_or("", |x| x.as_str());
        let b = got.lines.get(i).map_or("", |x| x.as_str());
        let mark = if a == b { ' ' } else { '!' };
        let cut = |x: &str| -> String {
            if x.chars().count() > 60 {
                format!("{}…", x.chars().take(59).collect::<String>())
            } else {
                x.to_string()
            }
        };
        let _ = writeln!(s, "  {mark} {:<60} | {}", cut(a), cut(b));
    }
    if want.lines == got.lines {
        let _ = writeln!(
            s,
            "    clock readings differ by more than a second: {:?} | {:?}",
            want.clocks, got.clocks
        );
    }
    s
}

// ----- the servers -----

struct Memcached {
    child: Child,
    addr: String,
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Start memcached on a free loopback port (None: not installed).
fn start_memcached() -> Option<Memcached> {
    let bin = ["/usr/bin/memcached", "/usr/local/bin/memcached"]
        .into_iter()
        .find(|p| Path::new(p).exists())?;
    for _ in 0..20 {
        let port = free_port().to_string();
        let mut cmd = Command::new(bin);
        cmd.args([
            "-l",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            "0",
            "-t",
            "2",
            "-c",
            "1024",
        ]);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            cmd.args(["-u", "root"]);
        }
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break; // the port was taken meanwhile: try another
            }
            if TcpStream::connect(&addr).is_ok() {
                return Some(Memcached { child, addr });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("memcached did not start");
}

/// `kura serve NAME --memcached-port 0`: the server and its memcached-only address.
fn start_kura(dir: &Path, name: &str) -> (Server, String) {
    let args = [
        name,
        "--port",
        "0",
        "--memcached-port",
        "0",
        "--threads",
        "2",
    ];
    let (srv, addrs) = Server::start_args(dir, &args, 2);
    (srv, addrs[1].clone())
}

#[test]
fn kura_answers_every_transcript_as_memcached_does() {
    let Some(mc) = start_memcached() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("memcached is not installed: scripts/test.sh installs it (apt-get install memcached)");
        }
        eprintln!(
            "NOTICE: memcached is not installed; the differential test is skipped \
             (apt-get install memcached, or run scripts/test.sh)"
        );
        return;
    };
    let text = std::fs::read_to_string(corpus_path()).expect("the corpus");
    let filter = std::env::var("MC_DIFF_CASE").ok();
    let cases: Vec<Case> = parse_corpus(&text)
        .into_iter()
        .filter(|c| filter.as_ref().is_none_or(|f| c.name.contains(f.as_str())))
        .collect();
    assert!(!cases.is_empty(), "no case to run");
    let docs = std::fs::read_to_string(docs_path()).expect("docs/PROTOCOL-MEMCACHED.md");
    for name in LISTED {
        assert!(
            docs.contains(&format!("`{name}`")),
            "listed difference {name} is not in docs/PROTOCOL-MEMCACHED.md"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let (_mem, mem_addr) = start_kura(dir.path(), "*");
    let (_kh, kh_addr) = start_kura(dir.path(), "d.kh");
    let started = Instant::now();
    let mut failures = Vec::new();
    let mut listed_seen = Vec::new();
    for (ci, case) in cases.iter().enumerate() {
        let t0 = Instant::now();
        let want = mask(&run_case(&mc.addr, case, Delivery::Whole), case.binary);
        let seed = 0xC0FF_EE00 + ci as u64;
        for (label, addr, how) in [
            ("kura *", &mem_addr, Delivery::Whole),
            ("kura d.kh", &kh_addr, Delivery::Whole),
            ("kura * (split)", &mem_addr, Delivery::Split(seed)),
            ("kura d.kh (split)", &kh_addr, Delivery::Split(seed)),
        ] {
            let got = mask(&run_case(addr, case, how), case.binary);
            if same(&want, &got) {
                continue;
            }
            if LISTED.contains(&case.name.as_str()) {
                listed_seen.push(case.name.clone());
                continue;
            }
            failures.push(format!(
                "case {} ({label}):\n{}",
                case.name,
                side_by_side(&want, &got, label)
            ));
            break;
        }
        if std::env::var("MC_DIFF_TIMES").is_ok() {
            eprintln!("{:>8.3} s  {}", t0.elapsed().as_secs_f64(), case.name);
        }
    }
    if filter.is_none() {
        for name in LISTED {
            if !listed_seen.iter().any(|n| n == name) {
                failures.push(format!(
                    "case {name} is listed as a difference but no longer differs: \
                     take it off LISTED and docs/PROTOCOL-MEMCACHED.md"
                ));
            }
        }
    }
    eprintln!(
        "differential test: {} cases, {} failed, {:.1} s",
        cases.len(),
        failures.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from memcached 1.6.18:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
