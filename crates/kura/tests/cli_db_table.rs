//! `kura db` on a table database (`PATH.kt`): put with columns, get printing them as `tctmgr
//! get` does, setindex, and the import of `tctmgr list -pv` output with indexes by flag.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn kura(dir: &Path, args: &[&str], stdin: &[u8]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kura"))
        .arg("db")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(stdin).unwrap();
    c.wait_with_output().unwrap()
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let o = kura(dir, args, b"");
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn status(dir: &Path, args: &[&str]) -> (i32, String) {
    let o = kura(dir, args, b"");
    (
        o.status.code().unwrap(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn put_get_out_and_setindex_on_a_table() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    ok(
        d,
        &["put", "--create", "x.kt", "1", "name", "alice", "age", "30"],
    );
    assert_eq!(ok(d, &["get", "x.kt", "1"]), "name\talice\nage\t30\n");
    // --cat adds the columns the record does not have (its own keep their values); --keep refuses an existing record (status 1).
    ok(
        d,
        &["put", "--cat", "x.kt", "1", "age", "99", "city", "a\tb"],
    );
    assert_eq!(
        ok(d, &["get", "x.kt", "1"]),
        "name\talice\nage\t30\ncity\ta\\tb\n"
    );
    assert_eq!(status(d, &["put", "--keep", "x.kt", "1", "n", "v"]).0, 1);
    // An empty key takes a unique id, printed.
    let id = ok(d, &["put", "x.kt", "", "name", "bob"]);
    let id = id.trim_end();
    assert!(id.parse::<u64>().is_ok(), "{id}");
    assert_eq!(ok(d, &["get", "x.kt", id]), "name\tbob\n");
    // A record without columns (tctmgr put PATH PKEY).
    ok(d, &["put", "x.kt", "bare"]);
    assert_eq!(ok(d, &["get", "x.kt", "bare"]), "");
    // Odd columns, an empty column name, --dup: refused, nothing stored.
    let (code, err) = status(d, &["put", "x.kt", "2", "name"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("odd number"), "{err}");
    assert_eq!(status(d, &["put", "x.kt", "2", "", "v"]).0, 2);
    assert_eq!(status(d, &["put", "--dup", "x.kt", "2", "n", "v"]).0, 2);
    assert_eq!(status(d, &["get", "x.kt", "2"]).0, 1);
    // setindex: make, keep (status 1), drop, a drop of nothing (status 1), a bad type (2).
    ok(d, &["setindex", "x.kt", "name", "lexical"]);
    ok(d, &["setindex", "x.kt", "age", "1"]);
    assert_eq!(status(d, &["setindex", "x.kt", "name", "+lex"]).0, 1);
    ok(d, &["setindex", "x.kt", "age", "void"]);
    assert_eq!(status(d, &["setindex", "x.kt", "age", "void"]).0, 1);
    assert_eq!(status(d, &["setindex", "x.kt", "age", "bogus"]).0, 2);
    let info = ok(d, &["inform", "x.kt"]);
    assert!(info.contains("indexes: name:lex"), "{info}");
    ok(d, &["check", "x.kt"]);
    // out.
    ok(d, &["out", "x.kt", "1"]);
    assert_eq!(status(d, &["out", "x.kt", "1"]).0, 1);
    // Other kinds: one value; setindex is a table's.
    ok(d, &["put", "--create", "h.kh", "k", "v"]);
    assert_eq!(status(d, &["put", "h.kh", "k", "v", "w"]).0, 2);
    assert_eq!(status(d, &["put", "h.kh", "k"]).0, 2);
    let (code, err) = status(d, &["setindex", "h.kh", "a", "lex"]);
    assert_eq!(code, 2);
    assert!(err.contains("PATH.kt"), "{err}");
}

/// `tctmgr list -pv casket.tct | kura db import --format raw --index … x.kt`: the key, then
/// column and value pairs, tab-separated.
#[test]
fn tctmgr_list_output_imports_into_a_table_with_indexes() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    let lines = b"u1\tname\talice\tdates\t2026-01-01,2026-01-02\tn\t2\n\
                  u2\tname\tbob\tn\t5\n\
                  u3\tname\tcarol\n";
    let o = kura(
        d,
        &[
            "import",
            "--format",
            "raw",
            "--create",
            "--index",
            "name:lexical",
            "--index",
            "n:decimal",
            "--index",
            "dates:token",
            "t.kt",
        ],
        lines,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "3 records stored in t.kt\n"
    );
    assert_eq!(
        ok(d, &["get", "t.kt", "u1"]),
        "name\talice\ndates\t2026-01-01,2026-01-02\nn\t2\n"
    );
    assert_eq!(ok(d, &["get", "t.kt", "u3"]), "name\tcarol\n");
    let info = ok(d, &["inform", "t.kt"]);
    assert!(info.contains("indexes: dates:tok,n:dec,name:lex"), "{info}");
    ok(d, &["check", "t.kt"]);
    // A line whose columns do not pair up stops the import before anything is written.
    let o = kura(
        d,
        &["import", "--format", "raw", "t.kt"],
        b"u4\tname\tdan\nu5\tname\n",
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("line 2"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(status(d, &["get", "t.kt", "u4"]).0, 1);
    // A bad --index is refused before a database is made.
    let o = kura(d, &["import", "--create", "--index", "name", "n.kt"], b"");
    assert_eq!(o.status.code(), Some(2));
    assert!(!d.join("n.kt").exists());
    // An export of a table imports back (the NUL-separated form, escaped).
    let exported = ok(d, &["export", "t.kt"]);
    let o = kura(d, &["import", "--create", "t2.kt"], exported.as_bytes());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        ok(d, &["get", "t2.kt", "u1"]),
        "name\talice\ndates\t2026-01-01,2026-01-02\nn\t2\n"
    );
}

/// A table whose token index an older build wrote (an entry per term and record, no
/// `posting_form` in its metadata) is refused with a message naming `kura db repair`, never
/// read in the wrong form; the repair rebuilds its index as posting lists, and a search by
/// token then answers.
#[test]
fn an_old_form_token_index_is_refused_until_repair_rebuilds_it() {
    use kura_engine::{Params, Store};
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    ok(d, &["put", "--create", "x.kt", "1", "tags", "a b"]);
    ok(d, &["put", "x.kt", "2", "tags", "b c"]);
    ok(d, &["setindex", "x.kt", "tags", "token"]);
    assert_eq!(ok(d, &["search", "x.kt", "tags", "STRAND", "b"]), "1\n2\n");
    // Make it what an older build left: an entry per (token, record).
    {
        let t = kura_engine::tree::DiskTree::open(&d.join("x.kt"), &Params::default()).unwrap();
        let meta = t.keyspace("kt.meta", "cmp=lex").unwrap();
        assert!(meta.out(b"posting_form").unwrap());
        let ix = t.keyspace("kt.idx.1", "cmp=lex").unwrap();
        ix.vanish().unwrap();
        for (tok, pk) in [("a", "1"), ("b", "1"), ("b", "2"), ("c", "2")] {
            ix.put(format!("{tok}\0\0{pk}").as_bytes(), b"").unwrap();
        }
        drop((meta, ix));
        t.close().unwrap();
    }
    for args in [
        &["get", "x.kt", "1"][..],
        &["search", "x.kt", "tags", "STRAND", "b"],
    ] {
        let (code, err) = status(d, args);
        assert_ne!(code, 0, "{args:?}");
        assert!(
            err.contains("older build") && err.contains("kura db repair"),
            "{args:?}: {err}"
        );
    }
    ok(d, &["repair", "x.kt", "y.kt"]);
    assert_eq!(ok(d, &["search", "y.kt", "tags", "STRAND", "b"]), "1\n2\n");
    assert_eq!(ok(d, &["search", "y.kt", "tags", "STRAND", "c"]), "2\n");
}
