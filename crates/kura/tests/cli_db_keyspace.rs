//! `kura db --keyspace NAME`: get, put, out, list, import, export and inform on a keyspace of a
//! `.kb` (and a memory kind), refused clearly on a kind without keyspaces (`.kf`) and, for a
//! command that reads, on a keyspace the database does not have (reading makes no keyspace).
//! The real binary, in a temporary directory.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const KURA: &str = env!("CARGO_BIN_EXE_kura");

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
    let _ = pipe.write_all(stdin);
    drop(pipe);
    child.wait_with_output().unwrap()
}

fn db(dir: &Path, args: &[&str]) -> Output {
    db_in(dir, args, b"")
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
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

/// The `keyspace.` lines of `inform`.
fn informed_spaces(dir: &Path, name: &str) -> Vec<String> {
    let o = db(dir, &["inform", name]);
    status(&o, 0);
    out(&o)
        .lines()
        .filter(|l| l.starts_with("keyspace."))
        .map(str::to_string)
        .collect()
}

#[test]
fn keyspace_records_apart_from_the_database() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    status(&db(d, &["put", "--create", "t.kb", "k", "own"]), 0);
    // A keyspace made with an order: its keys list in that order.
    for k in ["10", "9", "100"] {
        status(
            &db(
                d,
                &[
                    "put",
                    "--keyspace",
                    "idx#cmp=dec",
                    "t.kb",
                    k,
                    &format!("v{k}"),
                ],
            ),
            0,
        );
    }
    let o = db(d, &["get", "--keyspace", "idx", "t.kb", "10"]);
    status(&o, 0);
    assert_eq!(out(&o), "v10");
    // The database's own key is not in the keyspace, nor the keyspace's in the database.
    status(&db(d, &["get", "--keyspace", "idx", "t.kb", "k"]), 1);
    status(&db(d, &["get", "t.kb", "10"]), 1);
    assert_eq!(out(&db(d, &["get", "t.kb", "k"])), "own");
    let o = db(d, &["list", "--keyspace", "idx", "t.kb"]);
    status(&o, 0);
    assert_eq!(out(&o), "9\n10\n100\n");
    let o = db(d, &["list", "t.kb"]);
    assert_eq!(out(&o), "k\n");
    // out removes from the keyspace only.
    status(&db(d, &["out", "--keyspace", "idx", "t.kb", "9"]), 0);
    status(&db(d, &["out", "--keyspace", "idx", "t.kb", "9"]), 1);
    status(&db(d, &["out", "--keyspace", "idx", "t.kb", "k"]), 1);
    // A keyspace's order is fixed at creation.
    let o = db(d, &["put", "--keyspace", "idx#cmp=lex", "t.kb", "1", "x"]);
    status(&o, 2);
    assert!(err(&o).contains("fixed at creation"), "{}", err(&o));
    assert_eq!(
        informed_spaces(d, "t.kb"),
        ["keyspace.idx: 2 records cmp=dec"]
    );
    // inform on the keyspace: its own count.
    let o = db(d, &["inform", "--keyspace", "idx", "t.kb"]);
    status(&o, 0);
    assert!(out(&o).contains("records: 2\n"), "{}", out(&o));
}

#[test]
fn keyspace_import_and_export() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    status(&db(d, &["create", "t.kb"]), 0);
    let o = db_in(
        d,
        &["import", "--keyspace", "s", "t.kb"],
        b"a\t1\nb\t2\\t3\n",
    );
    status(&o, 0);
    assert!(out(&o).contains("2 records stored"), "{}", out(&o));
    let o = db(d, &["export", "--keyspace", "s", "t.kb"]);
    status(&o, 0);
    assert_eq!(out(&o), "a\t1\nb\t2\\t3\n");
    status(&db(d, &["export", "--keyspace", "s", "t.kb", "s.tsv"]), 0);
    assert_eq!(
        std::fs::read_to_string(d.join("s.tsv")).unwrap(),
        "a\t1\nb\t2\\t3\n"
    );
    // The database itself has none of them.
    assert_eq!(out(&db(d, &["export", "t.kb"])), "");
    // Bad input is refused before a record is written, and makes no keyspace.
    let o = db_in(
        d,
        &["import", "--keyspace", "bad", "t.kb"],
        b"a\t1\nb\\q\t2\n",
    );
    status(&o, 2);
    assert_eq!(
        informed_spaces(d, "t.kb"),
        ["keyspace.s: 2 records cmp=lex"]
    );
    // Into an existing keyspace, in a file, with duplicates kept.
    std::fs::write(d.join("in.tsv"), "a\tagain\nc\t3\n").unwrap();
    status(
        &db(d, &["import", "--keyspace", "s", "--dup", "t.kb", "in.tsv"]),
        0,
    );
    let o = db(d, &["get", "--all", "--keyspace", "s", "t.kb", "a"]);
    status(&o, 0);
    assert_eq!(out(&o), "1\nagain\n");
    let o = db(
        d,
        &[
            "list",
            "--values",
            "--keyspace",
            "s",
            "--prefix",
            "c",
            "t.kb",
        ],
    );
    assert_eq!(out(&o), "c\t3\n");
}

#[test]
fn keyspace_refusals() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    status(&db(d, &["put", "--create", "t.kb", "k", "v"]), 0);
    // A command that reads refuses a keyspace the database does not have, and makes none.
    for args in [
        &["get", "--keyspace", "nope", "t.kb", "k"][..],
        &["list", "--keyspace", "nope", "t.kb"],
        &["export", "--keyspace", "nope", "t.kb"],
        &["inform", "--keyspace", "nope", "t.kb"],
        &["out", "--keyspace", "nope", "t.kb", "k"],
    ] {
        let o = db(d, args);
        status(&o, 2);
        assert!(
            err(&o).contains("no keyspace `nope` in t.kb"),
            "{args:?}: {}",
            err(&o)
        );
    }
    assert!(informed_spaces(d, "t.kb").is_empty());
    // A kind without keyspaces (a .kf) refuses, reading or writing, and nothing is written.
    status(&db(d, &["create", "f.kf#width=8"]), 0);
    status(&db(d, &["put", "f.kf", "1", "v"]), 0);
    for args in [
        &["get", "--keyspace", "s", "f.kf", "1"][..],
        &["put", "--keyspace", "s", "f.kf", "2", "v"],
        &["list", "--keyspace", "s", "f.kf"],
        &["inform", "--keyspace", "s", "f.kf"],
    ] {
        let o = db(d, args);
        status(&o, 2);
        assert!(
            err(&o).contains("f.kf is a fixed-length"),
            "{args:?}: {}",
            err(&o)
        );
        assert!(
            err(&o).contains("has no keyspaces"),
            "{args:?}: {}",
            err(&o)
        );
    }
    let o = db_in(d, &["import", "--keyspace", "s", "f.kf"], b"3\tv\n");
    status(&o, 2);
    assert!(err(&o).contains("has no keyspaces"), "{}", err(&o));
    assert_eq!(out(&db(d, &["list", "f.kf"])), "1\n");
    // A bad keyspace name is refused.
    let o = db(d, &["put", "--keyspace", "", "t.kb", "k", "v"]);
    status(&o, 2);
}

#[test]
fn keyspace_on_a_memory_kind() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    // A memory database lives as long as the command: a write makes the keyspace, a read in
    // a new process finds none.
    status(&db(d, &["put", "--keyspace", "s", "+", "k", "v"]), 0);
    status(&db(d, &["put", "--keyspace", "s", "*", "k", "v"]), 0);
    let o = db(d, &["get", "--keyspace", "s", "*", "k"]);
    status(&o, 2);
    assert!(err(&o).contains("no keyspace `s` in *"), "{}", err(&o));
    let o = db_in(d, &["import", "--keyspace", "s", "+"], b"a\t1\n");
    status(&o, 0);
    assert!(
        out(&o).contains("1 records stored in + (keyspace `s`)"),
        "{}",
        out(&o)
    );
}

/// An import into a keyspace it makes checks every line by the rules that keyspace is to
/// have, not its database's: a memory keyspace's `capsiz` refuses a line too large for it
/// before any record is written, as the same limit on the database does.
#[test]
fn keyspace_import_checks_lines_by_the_new_keyspace_rules() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let input = format!("a\t1\nb\t{}\nc\t3\n", "x".repeat(500));
    for name in ["*", "+"] {
        let o = db_in(
            d,
            &["import", "--keyspace", "s#capsiz=300", name],
            input.as_bytes(),
        );
        status(&o, 2);
        assert!(
            err(&o).contains("line 2: too large")
                && err(&o).contains("exceeds capsiz=300")
                && err(&o).contains("nothing was imported"),
            "{name}: {}",
            err(&o)
        );
        // Lines that fit go in.
        let o = db_in(
            d,
            &["import", "--keyspace", "s#capsiz=300", name],
            b"a\t1\nc\t3\n",
        );
        status(&o, 0);
        assert!(out(&o).contains("2 records stored"), "{name}: {}", out(&o));
    }
}
