//! Damaged databases through the real `kura` binary: what `check`, a writable open, `serve`
//! and `repair` make of them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const KURA: &str = env!("CARGO_BIN_EXE_kura");

fn kura(dir: &Path, args: &[&str]) -> Output {
    Command::new(KURA)
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run kura")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[track_caller]
fn status(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        text(&o.stdout),
        text(&o.stderr)
    );
}

/// Every file of a database directory but its lock, with its bytes.
fn files(db: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    std::fs::read_dir(db)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap() != "LOCK")
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p.file_name().unwrap().into(), b)
        })
        .collect()
}

fn flip(path: &Path, at: usize, n: usize) {
    let mut b = std::fs::read(path).unwrap();
    for x in &mut b[at..at + n] {
        *x ^= 0xa5;
    }
    std::fs::write(path, b).unwrap();
}

/// A value of its own for each key, longer than the damage.
fn value(i: usize) -> String {
    format!("value-{i:05}-{}", "x".repeat(40))
}

/// Regression for the report that opened this work: 20,000 imported records, a few bytes
/// flipped in the middle of the segment and of the checkpoint. `check` answered `healthy`
/// with `records: 0`, and the next writable open cut the segment to its header, losing every
/// record. Now: `check` reports the damage and exits 1; `put` and `serve` refuse (exit 2)
/// and change nothing; reads serve what verifies; `repair` writes a database of every record
/// but the damaged ones.
#[test]
fn flipped_bytes_in_segment_and_checkpoint_are_reported_refused_and_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut dump = String::new();
    for i in 0..20_000 {
        dump.push_str(&format!("key{i:05}\t{}\n", value(i)));
    }
    std::fs::write(d.join("dump.tsv"), &dump).unwrap();
    status(&kura(d, &["db", "create", "e.kh"]), 0);
    status(&kura(d, &["db", "import", "e.kh", "dump.tsv"]), 0);
    let db = d.join("e.kh");
    let seg = db.join("seg-00000001.kd");
    let seg_len = std::fs::metadata(&seg).unwrap().len() as usize;
    flip(&seg, seg_len / 2, 6);
    let ckpt = db.join("index.ki");
    let ckpt_len = std::fs::metadata(&ckpt).unwrap().len() as usize;
    flip(&ckpt, ckpt_len / 2, 6);
    let before = files(&db);

    let o = kura(d, &["db", "check", "e.kh"]);
    status(&o, 1);
    let out = text(&o.stdout);
    assert!(out.contains("damaged: seg-00000001.kd offset"), "{out}");
    assert!(out.contains("warning: index.ki is damaged"), "{out}");
    assert!(out.contains("unhealthy"), "{out}");
    assert!(
        text(&o.stderr).contains("kura db repair"),
        "{}",
        text(&o.stderr)
    );

    let o = kura(d, &["db", "put", "e.kh", "new", "value"]);
    status(&o, 2);
    let err = text(&o.stderr);
    assert!(err.contains("seg-00000001.kd at offset"), "{err}");
    assert!(err.contains("nothing was changed"), "{err}");
    assert_eq!(files(&db), before, "a refused open changed the files");

    let o = kura(d, &["serve", "e.kh", "--port", "0", "--threads", "1"]);
    status(&o, 2);
    let err = text(&o.stderr);
    assert!(err.contains("kura db repair"), "{err}");
    assert!(!err.contains("listening on"), "{err}");
    assert_eq!(files(&db), before, "a refused server changed the files");

    // Reads serve what verifies, before and after the damage.
    for i in [0, 19_999] {
        let o = kura(d, &["db", "get", "e.kh", &format!("key{i:05}")]);
        status(&o, 0);
        assert_eq!(text(&o.stdout), value(i));
    }

    let o = kura(d, &["db", "repair", "e.kh", "fixed.kh"]);
    status(&o, 0);
    let out = text(&o.stdout);
    let num = |label: &str| -> usize {
        out.lines()
            .find_map(|l| l.strip_prefix(label))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no `{label}` in {out}"))
    };
    let (kept, lost) = (num("kept: "), num("lost: "));
    assert!((1..=2).contains(&lost), "{out}");
    assert_eq!(kept + lost, 20_000, "{out}");
    assert_eq!(files(&db), before, "repair changed its source");
    let o = kura(d, &["db", "check", "fixed.kh"]);
    status(&o, 0);
    assert!(text(&o.stdout).contains(&format!("records: {kept}")));
    let o = kura(d, &["db", "export", "fixed.kh"]);
    status(&o, 0);
    let mut got: Vec<String> = text(&o.stdout).lines().map(str::to_string).collect();
    got.sort();
    let want: Vec<&str> = dump.lines().collect();
    let missing: Vec<&&str> = want
        .iter()
        .filter(|l| got.binary_search(&l.to_string()).is_err())
        .collect();
    assert_eq!(missing.len(), lost, "records lost: {missing:?}");
    assert_eq!(got.len(), kept);

    // In place: the repaired database takes the name, the damaged files are kept beside it.
    let o = kura(d, &["db", "repair", "e.kh", "--in-place"]);
    status(&o, 0);
    let kept_at = text(&o.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("damaged files kept as ").map(PathBuf::from))
        .expect("where the damaged files went");
    assert_eq!(files(&d.join(kept_at)), before);
    status(&kura(d, &["db", "check", "e.kh"]), 0);
    status(&kura(d, &["db", "put", "e.kh", "new", "value"]), 0);
}

/// A power cut while a segment was being created leaves a file of 0 bytes or a torn header:
/// that is a torn tail, not damage — `check` is healthy (with a warning), reads work, and a
/// writable open removes the files. (Read-only commands once called such a database corrupt
/// while `serve` opened it.)
#[test]
fn a_segment_cut_at_creation_is_not_damage() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    status(&kura(d, &["db", "create", "p.kh"]), 0);
    status(&kura(d, &["db", "put", "p.kh", "a", "1"]), 0);
    let db = d.join("p.kh");
    std::fs::write(db.join("seg-00000090.kd"), b"").unwrap();
    std::fs::write(db.join("seg-00000091.kd"), b"KURASEG1\x02\x00").unwrap();
    std::fs::write(db.join("seg-00000092.kd"), [0u8; 4096]).unwrap();
    for args in [
        &["db", "get", "p.kh", "a"][..],
        &["db", "list", "p.kh"],
        &["db", "inform", "p.kh"],
    ] {
        let o = kura(d, args);
        status(&o, 0);
    }
    let o = kura(d, &["db", "check", "p.kh"]);
    status(&o, 0);
    let out = text(&o.stdout);
    assert!(out.contains("healthy"), "{out}");
    assert!(
        out.contains("warning: seg-00000091.kd was being created at a crash"),
        "{out}"
    );
    status(&kura(d, &["db", "put", "p.kh", "b", "2"]), 0);
    for n in 90..=92 {
        assert!(
            !db.join(format!("seg-{n:08}.kd")).exists(),
            "segment {n} stayed"
        );
    }
    let o = kura(d, &["db", "check", "p.kh"]);
    status(&o, 0);
    assert!(!text(&o.stdout).contains("warning"), "{}", text(&o.stdout));
}

/// A damaged descriptor (`kura.meta`) loses no record but hides what the database stores
/// (its compression): a writable open refuses, `check` reports it, reads work, and `repair`
/// writes a new database with every record.
#[test]
fn a_damaged_descriptor_is_reported_and_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    status(&kura(d, &["db", "create", "m.kh#compress=lz4"]), 0);
    for i in 0..50 {
        let k = format!("k{i}");
        status(&kura(d, &["db", "put", "m.kh", &k, &value(i)]), 0);
    }
    flip(&d.join("m.kh/kura.meta"), 20, 2);
    let o = kura(d, &["db", "check", "m.kh"]);
    status(&o, 1);
    assert!(
        text(&o.stdout).contains("damaged: kura.meta offset 0"),
        "{}",
        text(&o.stdout)
    );
    status(&kura(d, &["db", "put", "m.kh", "x", "y"]), 2);
    let o = kura(d, &["db", "get", "m.kh", "k7"]);
    status(&o, 0);
    assert_eq!(text(&o.stdout), value(7));
    let o = kura(d, &["db", "repair", "m.kh", "n.kh#compress=lz4"]);
    status(&o, 0);
    assert!(
        text(&o.stdout).contains("kept: 50 records"),
        "{}",
        text(&o.stdout)
    );
    let o = kura(d, &["db", "inform", "n.kh"]);
    status(&o, 0);
    assert!(
        text(&o.stdout).contains("stored.compress: lz4"),
        "{}",
        text(&o.stdout)
    );
    status(&kura(d, &["db", "check", "n.kh"]), 0);
}

/// A checkpoint written by an earlier build (the engine's fixture `before-descriptor.kh`, made
/// at 409fab4) loads as it is: `check` finds nothing to say about it. Damaged, it is a warning
/// that loses nothing: the next writable open replays the whole log, and its close writes a
/// checkpoint that loads again.
#[test]
fn an_earlier_builds_checkpoint_loads_and_a_damaged_one_costs_a_replay() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/tests/fixtures/before-descriptor.kh");
    let db = d.join("old.kh");
    std::fs::create_dir(&db).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), db.join(e.file_name())).unwrap();
    }
    let keys = |want: usize| {
        let o = kura(d, &["db", "export", "old.kh"]);
        status(&o, 0);
        let out = text(&o.stdout);
        assert_eq!(out.lines().count(), want, "{out}");
        assert!(out.contains("apple\tred"), "{out}");
    };
    let o = kura(d, &["db", "check", "old.kh"]);
    status(&o, 0);
    assert!(!text(&o.stdout).contains("index.ki"), "{}", text(&o.stdout));
    keys(4);

    flip(&db.join("index.ki"), 40, 4);
    let o = kura(d, &["db", "check", "old.kh"]);
    status(&o, 0);
    let out = text(&o.stdout);
    assert!(
        out.contains("warning: index.ki is damaged (its checksum"),
        "{out}"
    );
    keys(4);
    status(&kura(d, &["db", "put", "old.kh", "new", "value"]), 0);
    let o = kura(d, &["db", "check", "old.kh"]);
    status(&o, 0);
    assert!(!text(&o.stdout).contains("index.ki"), "{}", text(&o.stdout));
    keys(5);
}
