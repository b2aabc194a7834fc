//! The update log's files through `kura serve --ulog` and `kura db ulog`: a log written by the
//! format before opens and goes on in a new file; after a power loss, a hole past the synced
//! length the newest file's header records is a torn tail, and damage before it is refused.

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
