//! The update log's files through `kura serve --ulog` and `kura db ulog`: a log written by the
//! format before opens and goes on in a new file; after a power loss, a hole past the synced
//! length the newest file's header records is a torn tail, and damage before it is refused;
//! records out of order in an older file are damage for every reader of the log.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A log file of the format before (`KURAULG1`, a 32-byte header without synced lengths):
/// sid 1, then puts `a` = `1` (ts 1000001) and `b` = `22` (ts 1000002).
const V1_FILE: &str = "4b555241554c473101000000000000000000000000000000000000006eb05e61\
27000000ae407f5a41420f00000000000100000041420f0000000000010000000000000000000000000100\
00006131280000001dd57bd342420f00000000000100000042420f0000000000010000000000000000000000\
0001000000623232";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn kura(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// `kura db ulog DIR`: each record's op and key.
fn records(dir: &Path) -> Vec<String> {
    let o = kura(dir, &["db", "ulog", "ulog"]);
    assert!(o.status.success(), "{o:?}");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            format!("{} {}", f[3], f[4])
        })
        .collect()
}

/// The log's files, oldest first.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("ulog"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "kul"))
        .collect();
    v.sort();
    v
}

fn start(dir: &Path) -> Server {
    serve(
        dir,
        &["m.kh", "--port", "0", "--sid", "1", "--ulog", "ulog"],
    )
}

#[test]
fn an_update_log_of_the_format_before_opens_and_goes_on_in_a_new_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("ulog")).unwrap();
    let old = dir.path().join("ulog/00000000000000000001.kul");
    std::fs::write(&old, unhex(V1_FILE)).unwrap();
    assert_eq!(records(dir.path()), ["put a", "put b"]);
    let mut server = start(dir.path());
    assert_eq!(Tt::new(&server.addr).put(b"c", b"3"), 0);
    assert!(server.signal(libc::SIGTERM).success());
    assert_eq!(records(dir.path()), ["put a", "put b", "put c"]);
    let f = files(dir.path());
    assert_eq!(f.len(), 2, "{f:?}");
    assert_eq!(std::fs::read(&old).unwrap(), unhex(V1_FILE));
    assert_eq!(&std::fs::read(&f[1]).unwrap()[..8], b"KURAULG2");
    // And it opens again.
    let mut server = start(dir.path());
    assert_eq!(Tt::new(&server.addr).get(b"c").as_deref(), Some(&b"3"[..]));
    assert!(server.signal(libc::SIGTERM).success());
}

/// Where the records of a log file end (after its 64-byte header): each is `[len u32][crc
/// u32]` and `len` more bytes; zeros follow.
fn records_end(data: &[u8]) -> usize {
    let mut at = 64;
    while at + 8 <= data.len() {
        let len = u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize;
        if len == 0 {
            break;
        }
        at += 8 + len;
    }
    at
}

#[test]
fn a_hole_past_the_synced_length_is_cut_and_damage_before_it_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(dir.path());
    let mut t = Tt::new(&server.addr);
    for k in ["a", "b", "c"] {
        assert_eq!(t.put(k.as_bytes(), b"value"), 0);
    }
    drop(t);
    assert!(server.signal(libc::SIGTERM).success());
    let newest = files(dir.path()).pop().unwrap();
    let mut data = std::fs::read(&newest).unwrap();
    let end = records_end(&data);
    // What a write-back out of file order can leave: a record appended after the sync lost
    // (zeros), the next one (like the last, with a later time stamp) on the disk.
    let mut at = 64;
    let mut last = 64;
    while at < end {
        last = at;
        at += 8 + u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize;
    }
    let mut rec = data[last..end].to_vec();
    let ts = u64::from_le_bytes(rec[8..16].try_into().unwrap());
    kura_engine::ulog::record::restamp(&mut rec, ts + 10);
    let hole = end + rec.len();
    data.resize(data.len().max(hole + rec.len()), 0);
    data[hole..hole + rec.len()].copy_from_slice(&rec);
    std::fs::write(&newest, &data).unwrap();
    let mut server = start(dir.path());
    assert_eq!(
        Tt::new(&server.addr).get(b"c").as_deref(),
        Some(&b"value"[..])
    );
    assert!(server.signal(libc::SIGTERM).success());
    assert_eq!(records(dir.path()), ["put a", "put b", "put c"]);
    // A damaged byte in the last record, before the synced length: refused, not cut.
    let newest = files(dir.path()).pop().unwrap();
    let mut data = std::fs::read(&newest).unwrap();
    let end = records_end(&data);
    data[end - 2] ^= 0x40;
    std::fs::write(&newest, &data).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args([
            "serve", "m.kh", "--port", "0", "--sid", "1", "--ulog", "ulog",
        ])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("kura serve started on a damaged update log");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{err}");
    assert!(err.contains("cannot open the update log"), "{err}");
    assert!(err.contains("bytes synced"), "{err}");
}

/// The records of a log file: `(offset, time stamp)` each.
fn stamps(data: &[u8]) -> Vec<(usize, u64)> {
    let end = records_end(data);
    let mut out = Vec::new();
    let mut at = 64;
    while at < end {
        out.push((
            at,
            u64::from_le_bytes(data[at + 8..at + 16].try_into().unwrap()),
        ));
        at += 8 + u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize;
    }
    out
}

/// Two records of an older (sealed) file whose time stamps were swapped (each resealed, as a
/// writer would have written it) are damage: `kura db ulog` and `kura db restore` fail naming
/// the file and the offset, and apply nothing; a master started on the log (only the newest
/// file is checked at open) ends a replication feed there and says why in its log, rather than
/// skip the record (which its replicas would then miss). Reading from past the damaged file
/// works as before.
#[test]
fn records_out_of_order_in_an_older_file_are_damage_for_every_reader() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "m.kh",
        "--port",
        "0",
        "--sid",
        "1",
        "--ulog",
        "ulog",
        "--ulog-limit",
        "4m",
    ];
    let mut server = serve(dir.path(), &args);
    let mut t = Tt::new(&server.addr);
    let value = vec![b'v'; 64 << 10];
    for i in 0..24 {
        assert_eq!(t.put(format!("k{i:02}").as_bytes(), &value), 0);
    }
    drop(t);
    assert!(server.signal(libc::SIGTERM).success());
    let f = files(dir.path());
    assert!(f.len() >= 2, "{f:?}");
    let mut data = std::fs::read(&f[0]).unwrap();
    let recs = stamps(&data);
    assert!(recs.len() >= 3, "{recs:?}");
    let ((a, ta), (b, tb)) = (recs[1], recs[2]);
    for (at, ts) in [(a, tb), (b, ta)] {
        let len = 8 + u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize;
        kura_engine::ulog::record::restamp(&mut data[at..at + len], ts);
    }
    std::fs::write(&f[0], &data).unwrap();
    let want = format!("00000000000000000001.kul: time stamps out of order at offset {b} ");
    let o = kura(dir.path(), &["db", "ulog", "ulog"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains(&want), "{o:?}");
    // Past the damaged file: every record from there on.
    let next_first = stamps(&std::fs::read(&f[1]).unwrap())[0].1;
    let o = kura(
        dir.path(),
        &["db", "ulog", "ulog", "--from", &next_first.to_string()],
    );
    assert!(o.status.success(), "{o:?}");
    let n = String::from_utf8_lossy(&o.stdout).lines().count();
    assert_eq!(n, 24 - recs.len(), "{o:?}");
    // A restore of a backup taken before the first record: refused, nothing applied.
    let bk = dir.path().join("bk.kh");
    kura_engine::open(&bk.display().to_string())
        .unwrap()
        .close()
        .unwrap();
    kura_engine::ulog::logged::write_position(&bk, 0, 1).unwrap();
    let o = kura(dir.path(), &["db", "restore", "bk.kh", "--ulog", "ulog"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.code() == Some(2) && err.contains(&want), "{o:?}");
    let o = kura(dir.path(), &["db", "list", "bk.kh"]);
    assert!(o.status.success() && o.stdout.is_empty(), "{o:?}");
    // A master on the log: a Tyrant slave asking for every record gets those before the
    // damage, then the connection ends, and the master's log says why.
    let mut logged = args.to_vec();
    logged.extend(["--threads", "2", "--log", "m.log"]);
    let (master, addr) = start_logged(dir.path(), &logged, &dir.path().join("m.log"));
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut req = Vec::new();
    kura_proto::repl_tt::encode_request(&mut req, 1, 9);
    std::io::Write::write_all(&mut s, &req).unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match std::io::Read::read(&mut s, &mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!(
                "the feed went on past the damage ({} bytes): {e}",
                got.len()
            ),
        }
        assert!(
            Instant::now() < deadline,
            "the feed went on past the damage"
        );
    }
    // The master's sid, and of the records at most the two before the damage (64 KiB values).
    assert!(
        got.len() >= 4 && got.len() < 3 * (64 << 10),
        "{}",
        got.len()
    );
    let log = dir.path().join("m.log");
    assert!(
        eventually(10, || std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains(&want)),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    master.stop();
}
