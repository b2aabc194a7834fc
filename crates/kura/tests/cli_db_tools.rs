//! `kura db …` never misplaces, corrupts or misreports data (issue 21): mistyped paths create
//! nothing, foreign directories are left alone, the raw and hex formats of Tokyo and Kyoto
//! Cabinet's tools, imports that are all or nothing, exports that leave no partial file, and
//! parameters that are stored, reported and refused as they should be. The real binary, in a
//! temporary directory.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const KURA: &str = env!("CARGO_BIN_EXE_kura");

/// Run `kura db ARGS…` in `dir` with `stdin` as its input.
fn db_in(dir: &Path, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(KURA)
        .current_dir(dir)
        .arg("db")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn kura");
    let mut pipe = child.stdin.take().unwrap();
    // The command may exit before reading (an error): a broken pipe is fine.
    let _ = pipe.write_all(stdin);
    drop(pipe);
    child.wait_with_output().unwrap()
}

fn db(dir: &Path, args: &[&str]) -> Output {
    db_in(dir, args, b"")
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[track_caller]
fn status(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        out(o),
        err(o)
    );
}

#[track_caller]
fn ok(o: Output) -> Output {
    status(&o, 0);
    o
}

/// The value of `key: value` in `inform`'s output.
fn inform(dir: &Path, name: &str, key: &str) -> String {
    let o = ok(db(dir, &["inform", name]));
    out(&o)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}: ")).map(str::to_string))
        .unwrap_or_else(|| panic!("no {key} in {}", out(&o)))
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Regression: `kura db put typo5.kh a b` and `kura db import new2.kh dump.tsv` created a
/// database; so did every writing command. Now a missing database is an error that says how
/// to create one, and nothing is made.
#[test]
fn a_mistyped_path_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(d.join("dump.tsv"), b"a\t1\n").unwrap();
    for args in [
        &["put", "typo5.kh", "a", "b"][..],
        &["import", "new2.kh", "dump.tsv"],
    ] {
        let o = db(d, args);
        status(&o, 2);
        let e = err(&o);
        assert!(
            e.starts_with("kura: cannot open ") && e.contains("no database at"),
            "{e}"
        );
        assert!(e.contains("add --create"), "{e}");
    }
    for args in [
        &["out", "typo.kh", "a"][..],
        &["optimize", "typo.kh"],
        &["vanish", "typo.kh"],
        &["copy", "typo.kh", "b.kh"],
        &["get", "typo.kh", "a"],
        &["list", "typo.kh"],
        &["export", "typo.kh"],
        &["check", "typo.kh"],
        &["inform", "typo.kh"],
    ] {
        let o = db(d, args);
        status(&o, 2);
        assert!(
            err(&o).contains("no database at typo.kh"),
            "{args:?}: {}",
            err(&o)
        );
    }
    assert_eq!(names(d), ["dump.tsv"]);
    // A missing parent directory is an error even with --create; nothing is made.
    for args in [
        &["put", "--create", "no/such/dir/x.kh", "a", "b"][..],
        &["create", "no/such/dir/x.kh"],
        &["import", "--create", "no/such/dir/x.kh", "dump.tsv"],
    ] {
        let o = db(d, args);
        status(&o, 2);
        assert!(
            err(&o).contains("directory no/such/dir does not exist"),
            "{}",
            err(&o)
        );
    }
    assert_eq!(names(d), ["dump.tsv"]);
    // With --create, a database is made, once.
    ok(db(d, &["put", "--create", "x.kh", "a", "b"]));
    ok(db(d, &["put", "--create", "x.kh", "c", "d"]));
    assert_eq!(ok(db(d, &["get", "x.kh", "a"])).stdout, b"b");
    ok(db(d, &["import", "--create", "y.kh", "dump.tsv"]));
    assert_eq!(ok(db(d, &["get", "y.kh", "a"])).stdout, b"1");
}

/// Regression: an existing `other.kh/` holding a foreign file was adopted without a word.
/// Every command refuses it and leaves it exactly as it was; an empty directory may become a
/// database when creating.
#[test]
fn a_directory_that_is_not_a_database_is_refused_and_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::create_dir(d.join("other.kh")).unwrap();
    std::fs::write(d.join("other.kh/thesis.tex"), b"precious").unwrap();
    for args in [
        &["create", "other.kh"][..],
        &["put", "--create", "other.kh", "a", "b"],
        &["import", "--create", "other.kh"],
        &["get", "other.kh", "a"],
        &["inform", "other.kh"],
        &["check", "other.kh"],
    ] {
        let o = db(d, args);
        status(&o, 2);
        let e = err(&o);
        assert!(
            e.contains("not a Kura database") && e.contains("thesis.tex"),
            "{args:?}: {e}"
        );
    }
    assert_eq!(names(&d.join("other.kh")), ["thesis.tex"]);
    std::fs::create_dir(d.join("empty.kh")).unwrap();
    status(&db(d, &["put", "empty.kh", "a", "b"]), 2);
    ok(db(d, &["create", "empty.kh"]));
    let again = db(d, &["create", "empty.kh"]);
    status(&again, 1);
    assert!(err(&again).contains("already exists"), "{}", err(&again));
    assert!(names(&d.join("empty.kh")).contains(&"kura.meta".to_string()));
}

/// Regression: `tchmgr list -pv` / `kchashmgr list -pv` write raw lines; read as escaped,
/// `win<TAB>C:\temp\new` was stored as `C:<TAB>emp<LF>ew`, and a later `\d` stopped the import
/// half-way. `--format raw` takes the bytes as they are; the escaped format refuses the whole
/// input instead of storing part of it.
#[test]
fn tokyo_cabinet_dumps_import_exactly_in_the_raw_format() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let dump = b"win\tC:\\temp\\new\nk2\tv\twith\ttabs\ndos\tC:\\data\\x\r\n";
    let o = db_in(d, &["import", "--create", "tc.kh"], dump);
    status(&o, 2);
    assert!(
        err(&o).contains("line 2") && err(&o).contains("nothing was imported"),
        "{}",
        err(&o)
    );
    assert!(!d.join("tc.kh").exists());
    ok(db_in(
        d,
        &["import", "--create", "--format", "raw", "tc.kh"],
        dump,
    ));
    assert_eq!(ok(db(d, &["get", "tc.kh", "win"])).stdout, b"C:\\temp\\new");
    assert_eq!(ok(db(d, &["get", "tc.kh", "k2"])).stdout, b"v\twith\ttabs");
    assert_eq!(ok(db(d, &["get", "tc.kh", "dos"])).stdout, b"C:\\data\\x\r");
    // Raw out is the same bytes (in any order).
    let o = ok(db(d, &["export", "--format", "raw", "tc.kh"]));
    let mut lines: Vec<&[u8]> = o.stdout.split_inclusive(|&b| b == b'\n').collect();
    lines.sort();
    let mut want: Vec<&[u8]> = dump.split_inclusive(|&b| b == b'\n').collect();
    want.sort();
    assert_eq!(lines, want);
    // A line without a tab is an error in raw too (the peers skip it silently).
    let o = db_in(
        d,
        &["import", "--format", "raw", "tc.kh"],
        b"a\t1\nno tab\n",
    );
    status(&o, 2);
    assert!(err(&o).contains("line 2: missing tab"), "{}", err(&o));
    status(&db(d, &["get", "tc.kh", "a"]), 1);
}

/// Hex (`-px` of the peers' tools) carries any bytes; raw refuses what it cannot carry, and
/// an export to a file that fails leaves no partial file and an older file as it was.
#[test]
fn hex_carries_any_bytes_and_a_failed_export_leaves_no_partial_file() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let input = b"6B 31\t00 0A 09 FF\n\t\n74 61 62 09\t76\n";
    ok(db_in(
        d,
        &["import", "--create", "--format", "hex", "h.kh"],
        input,
    ));
    assert_eq!(ok(db(d, &["get", "h.kh", "k1"])).stdout, b"\x00\n\t\xff");
    assert_eq!(ok(db(d, &["get", "h.kh", ""])).stdout, b"");
    ok(db(d, &["export", "--format", "hex", "h.kh", "out.hex"]));
    let mut got: Vec<Vec<u8>> = std::fs::read(d.join("out.hex"))
        .unwrap()
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    got.sort();
    let mut want: Vec<Vec<u8>> = input
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    want.sort();
    assert_eq!(got, want);
    // `k1`'s value (a newline) and the key `tab\t` cannot be written raw: status 2 naming
    // the first met, the old file kept.
    std::fs::write(d.join("out.raw"), b"old contents\n").unwrap();
    let o = db(d, &["export", "--format", "raw", "h.kh", "out.raw"]);
    status(&o, 2);
    let e = err(&o);
    assert!(e.contains("raw format cannot carry"), "{e}");
    assert!(
        e.contains("record `tab\\t`") || e.contains("record `k1`"),
        "{e}"
    );
    assert_eq!(std::fs::read(d.join("out.raw")).unwrap(), b"old contents\n");
    assert_eq!(
        names(d).iter().filter(|n| n.contains("out.raw")).count(),
        1,
        "{:?}",
        names(d)
    );
}

/// Regression: `create 'casket.kh#bnum=1000'` then `inform` said `bnum: 0`.
#[test]
fn inform_shows_what_is_stored_and_what_this_open_chose() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    ok(db(d, &["create", "casket.kh#bnum=1000#lanes=4"]));
    assert_eq!(inform(d, "casket.kh", "stored.bnum"), "1000");
    assert_eq!(inform(d, "casket.kh", "stored.lanes"), "4");
    assert_eq!(inform(d, "casket.kh", "open.bnum"), "1000");
    assert_eq!(inform(d, "casket.kh#bnum=7", "open.bnum"), "7");
    assert_eq!(inform(d, "casket.kh#bnum=7", "stored.bnum"), "1000");
    assert_eq!(inform(d, "casket.kh", "open.sync"), "interval:1000");
    let o = db(d, &["put", "casket.kh#lanes=8", "k", "v"]);
    status(&o, 2);
    assert!(err(&o).contains("created with 4 lanes"), "{}", err(&o));
}

/// The bytes a put of a 100,000-byte compressible value adds to the database.
fn growth_of_a_put(d: &Path, name: &str, key: &str) -> u64 {
    let size = |d: &Path| -> u64 { inform(d, name, "file_size").parse().unwrap() };
    let before = size(d);
    ok(db(d, &["put", name, key, &"a".repeat(100_000)]));
    size(d) - before
}

/// Regression: `optimize z.kh compress=zstd` compressed the data, but `inform` still said
/// `compress: none` and later puts were not compressed; `optimize … lanes=4` exited 0 and
/// changed nothing.
#[test]
fn optimize_stores_compression_and_refuses_what_it_cannot_change() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    ok(db(d, &["create", "z.kh"]));
    assert!(growth_of_a_put(d, "z.kh", "plain") >= 100_000);
    ok(db(d, &["optimize", "z.kh", "compress=zstd"]));
    assert_eq!(inform(d, "z.kh", "stored.compress"), "zstd");
    assert_eq!(inform(d, "z.kh", "open.compress"), "zstd");
    assert!(
        growth_of_a_put(d, "z.kh", "later") < 10_000,
        "later puts are compressed"
    );
    assert_eq!(ok(db(d, &["get", "z.kh", "later"])).stdout.len(), 100_000);
    // An open may choose otherwise for itself; the stored choice stays.
    assert_eq!(inform(d, "z.kh#compress=none", "open.compress"), "none");
    assert_eq!(inform(d, "z.kh", "open.compress"), "zstd");
    for (params, named) in [
        ("lanes=4", "`lanes`"),
        ("segsiz=1m", "`segsiz`"),
        ("sync=always", "`sync`"),
    ] {
        let o = db(d, &["optimize", "z.kh", params]);
        status(&o, 2);
        assert!(
            err(&o).contains(named) && err(&o).contains("cannot be changed"),
            "{}",
            err(&o)
        );
    }
    assert_eq!(inform(d, "z.kh", "stored.lanes"), "16");
}

/// An import writes its lines in batches of thousands; a key met again within one batch, in
/// the same spelling or in another that unescapes to the same bytes, keeps the value of its
/// last line on every kind, and every other line is stored once.
#[test]
fn an_import_keeps_the_last_line_of_a_key_however_it_is_spelled() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let mut input = String::new();
    for i in 1..=6000u32 {
        input.push_str(&format!("{i}\tv{i}\n"));
        if i == 3000 {
            // Key 17 again, and key 18 spelled with an escape, in the same batch.
            input.push_str("17\tagain\n\\x318\tescaped\n");
        }
    }
    let path = d.join("in.tsv");
    std::fs::write(&path, &input).unwrap();
    for name in ["x.kh", "x.kb", "x.kf#width=16"] {
        let o = ok(db(d, &["import", "--create", name, "in.tsv"]));
        assert!(
            out(&o).contains("6002 records stored"),
            "{name}: {}",
            out(&o)
        );
        assert_eq!(out(&ok(db(d, &["get", name, "17"]))), "again", "{name}");
        assert_eq!(out(&ok(db(d, &["get", name, "18"]))), "escaped", "{name}");
        assert_eq!(out(&ok(db(d, &["get", name, "5999"]))), "v5999", "{name}");
        assert_eq!(inform(d, name, "records"), "6000", "{name}");
        let exported = out(&ok(db(d, &["export", name])));
        assert_eq!(exported.lines().count(), 6000, "{name}");
    }
}
