//! A segment whose tail a write-back out of file order left with a hole through the real `kura`
//! binary: past the synced length the segment's header records, a hole before an intact record
//! is a torn tail (cut at the next writable open, every record before it kept); a damaged
//! stretch before that length is damage.

mod common;

use common::{kura_db as db, ok_stdout as ok};
use kura_engine::log::format;
use std::path::{Path, PathBuf};

/// A `.kh` of 20 records written through `kura db put`, and its segment holding them.
fn written(dir: &Path) -> PathBuf {
    ok(db(dir, &["put", "--create", "d.kh", "k0", "value 0"]));
    for i in 1..20 {
        ok(db(
            dir,
            &["put", "d.kh", &format!("k{i}"), &format!("value {i}")],
        ));
    }
    std::fs::read_dir(dir.join("d.kh"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "kd"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap()
}

#[test]
fn a_hole_past_the_synced_length_is_a_torn_tail_and_damage_before_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let seg = written(dir.path());
    let data = std::fs::read(&seg).unwrap();
    let layout = format::seg_layout(&data);
    let synced = layout.synced.expect("the segment records a synced length");
    assert_eq!(synced, data.len() as u64, "a clean close leaves it exact");
    // Past it: zeros, then a copy of the first record (it verifies wherever it lies).
    let first = layout.data as usize;
    let len = format::parse_header(&data[first..]).unwrap().len;
    let mut torn = data.clone();
    torn.resize(data.len() + 500, 0);
    torn.extend_from_slice(&data[first..first + len]);
    std::fs::write(&seg, &torn).unwrap();
    ok(db(dir.path(), &["put", "d.kh", "after", "the hole"]));
    let kept = std::fs::read(&seg).unwrap();
    // (Its synced-length slots say more now.)
    assert!(
        kept.len() < torn.len() && kept[first..data.len()] == data[first..],
        "the torn tail is cut, what was synced kept"
    );
    for i in 0..20 {
        assert_eq!(
            ok(db(dir.path(), &["get", "d.kh", &format!("k{i}")])),
            format!("value {i}")
        );
    }
    assert_eq!(ok(db(dir.path(), &["get", "d.kh", "after"])), "the hole");
    ok(db(dir.path(), &["check", "d.kh"]));

    // Before it: the last 30 synced bytes zeroed, nothing valid after them. The checkpoint of
    // the clean close holds every record, so the open reads none of them back; `check` reads
    // every byte and reports the damage (not a torn tail), and the last record reads as an
    // error, never as a wrong value.
    let dir = tempfile::tempdir().unwrap();
    let seg = written(dir.path());
    let mut data = std::fs::read(&seg).unwrap();
    let n = data.len();
    data[n - 30..].fill(0);
    std::fs::write(&seg, &data).unwrap();
    let o = db(dir.path(), &["check", "d.kh"]);
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_ne!(o.status.code(), Some(0), "check: {out}");
    assert!(out.contains("damaged records"), "{out}");
    let o = db(dir.path(), &["get", "d.kh", "k19"]);
    assert_ne!(o.status.code(), Some(0));
}
