//! `kura db …` end to end: the real binary, run in a temporary directory.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::process::{Command, Output, Stdio};

mod common;

const KURA: &str = env!("CARGO_BIN_EXE_kura");

fn cmd(dir: &Path, args: &[&OsStr]) -> Command {
    let mut c = Command::new(KURA);
    c.current_dir(dir).arg("db").args(args);
    c
}

/// Run `kura db ARGS…` with `stdin` as its input.
fn run_in(dir: &Path, args: &[&OsStr], stdin: &[u8]) -> Output {
    let mut child = cmd(dir, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn kura");
    let mut pipe = child.stdin.take().unwrap();
    pipe.write_all(stdin).unwrap();
    drop(pipe);
    child.wait_with_output().unwrap()
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn bytes(b: &[u8]) -> &OsStr {
    OsStr::from_bytes(b)
}

/// Run `kura db ARGS…` (string arguments) with empty stdin.
fn run(dir: &Path, args: &[&str]) -> Output {
    let args: Vec<&OsStr> = args.iter().map(|a| os(a)).collect();
    run_in(dir, &args, b"")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
fn ok(o: Output) -> Output {
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    o
}

#[track_caller]
fn status(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        stdout(o),
        stderr(o)
    );
}

fn sorted_lines(b: &[u8]) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = b.split(|&c| c == b'\n').map(<[u8]>::to_vec).collect();
    assert_eq!(v.pop(), Some(vec![]), "output ends with a newline");
    v.sort();
    v
}

#[test]
fn put_get_out_list_inform_persist_across_invocations() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(run(d, &["create", "x.kh"]));
    assert!(d.join("x.kh").exists());
    let again = run(d, &["create", "x.kh"]);
    status(&again, 1);
    assert!(
        stderr(&again).contains("already exists"),
        "{}",
        stderr(&again)
    );

    ok(run(d, &["put", "x.kh", "apple", "red"]));
    ok(run(d, &["put", "x.kh", "banana", "yellow"]));
    ok(run(d, &["put", "x.kh", "cherry", "dark"]));
    assert_eq!(ok(run(d, &["get", "x.kh", "apple"])).stdout, b"red");

    // --keep refuses to overwrite; --cat appends.
    let keep = run(d, &["put", "x.kh", "apple", "green", "--keep"]);
    status(&keep, 1);
    assert!(
        stderr(&keep).contains("already exists"),
        "{}",
        stderr(&keep)
    );
    ok(run(d, &["put", "--keep", "x.kh", "date", "brown"]));
    ok(run(d, &["put", "--cat", "x.kh", "cherry", " red"]));
    assert_eq!(ok(run(d, &["get", "x.kh", "apple"])).stdout, b"red");
    assert_eq!(ok(run(d, &["get", "x.kh", "cherry"])).stdout, b"dark red");
    let both = run(d, &["put", "--keep", "--cat", "x.kh", "k", "v"]);
    status(&both, 2);

    // A plain put overwrites.
    ok(run(d, &["put", "x.kh", "date", "sweet"]));
    assert_eq!(ok(run(d, &["get", "x.kh", "date"])).stdout, b"sweet");

    ok(run(d, &["out", "x.kh", "banana"]));
    let out_again = run(d, &["out", "x.kh", "banana"]);
    status(&out_again, 1);
    assert!(
        stderr(&out_again).contains("no record"),
        "{}",
        stderr(&out_again)
    );

    let keys = ok(run(d, &["list", "x.kh"])).stdout;
    assert_eq!(sorted_lines(&keys), [&b"apple"[..], b"cherry", b"date"]);
    let pairs = ok(run(d, &["list", "x.kh", "--values"])).stdout;
    assert_eq!(
        sorted_lines(&pairs),
        [&b"apple\tred"[..], b"cherry\tdark red", b"date\tsweet"]
    );

    let inform = stdout(&ok(run(d, &["inform", "x.kh"])));
    let lines: Vec<&str> = inform.lines().collect();
    assert!(
        lines[0].starts_with("kind: ") && lines[0].contains(".kh"),
        "{inform}"
    );
    assert_eq!(lines[1], "records: 3", "{inform}");
    assert!(lines[2].starts_with("file_size: "), "{inform}");
    let size: u64 = lines[2]["file_size: ".len()..].parse().unwrap();
    assert!(size > 0, "{inform}");
    for l in &lines {
        assert!(
            l.contains(": "),
            "every inform line is `key: value`: {inform}"
        );
    }
    let mut names: Vec<&str> = lines
        .iter()
        .map(|l| l.split(": ").next().unwrap())
        .collect();
    let n = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), n, "no key printed twice: {inform}");
}

#[test]
fn get_of_a_missing_key_exits_1_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(run(d, &["put", "--create", "x.kh", "k", "v"]));
    let o = run(d, &["get", "x.kh", "nope"]);
    status(&o, 1);
    assert!(o.stdout.is_empty());
    let e = stderr(&o);
    assert!(e.starts_with("kura: ") && e.contains("nope"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
}

#[test]
fn binary_keys_and_values_round_trip_through_export_and_import() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Arguments cannot hold NUL bytes: those records go in through import, the rest as arguments.
    let records: Vec<(&[u8], &[u8])> = vec![
        (b"tab\tkey", b"value\twith\ttabs"),
        (b"new\nline", b"a\nb\r\nc\r"),
        (b"back\\slash", b"\\t is not a tab\\"),
        (b"\xff\xfe\x80", b"\xff\x01\x7f\x1b"),
        ("日本".as_bytes(), "語".as_bytes()),
        (b"empty value", b""),
    ];
    ok(run(d, &["create", "x.kh"]));
    for (k, v) in &records {
        ok(run_in(d, &[os("put"), os("x.kh"), bytes(k), bytes(v)], b""));
    }
    ok(run_in(
        d,
        &[os("import"), os("x.kh")],
        b"\\x00\tnul key\nnul value\t\\xff\\x00\\x01\n",
    ));
    for (k, v) in &records {
        assert_eq!(
            ok(run_in(d, &[os("get"), os("x.kh"), bytes(k)], b"")).stdout,
            *v
        );
    }
    assert_eq!(
        ok(run(d, &["get", "x.kh", "nul value"])).stdout,
        b"\xff\x00\x01"
    );

    // Export to stdout and to a file: the same lines, one per record.
    let exported = ok(run(d, &["export", "x.kh"])).stdout;
    ok(run(d, &["export", "x.kh", "dump.tsv"]));
    let file = std::fs::read(d.join("dump.tsv")).unwrap();
    assert_eq!(sorted_lines(&exported), sorted_lines(&file));
    assert_eq!(sorted_lines(&exported).len(), records.len() + 2);
    assert!(sorted_lines(&exported).contains(&b"\\x00\tnul key".to_vec()));
    // Readable: UTF-8 passes through, control bytes are escaped.
    assert!(exported.windows(6).any(|w| w == "日本".as_bytes()));
    assert!(exported.windows(12).any(|w| w == b"tab\\tkey\tval"));
    // list --values is the export format.
    let listed = ok(run(d, &["list", "x.kh", "--values"])).stdout;
    assert_eq!(sorted_lines(&listed), sorted_lines(&exported));

    // Import from stdin into one database and from the file into another.
    ok(run_in(
        d,
        &[os("import"), os("--create"), os("y.kh")],
        &exported,
    ));
    ok(run(d, &["import", "--create", "z.kh", "dump.tsv"]));
    for db in ["y.kh", "z.kh"] {
        for (k, v) in &records {
            let o = ok(run_in(d, &[os("get"), os(db), bytes(k)], b""));
            assert_eq!(o.stdout, *v, "{db}");
        }
        let again = ok(run(d, &["export", db])).stdout;
        assert_eq!(sorted_lines(&again), sorted_lines(&exported), "{db}");
    }
}

#[test]
fn import_accepts_crlf_and_blank_lines_and_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(run(d, &["put", "--create", "x.kh", "a", "old"]));
    let input = b"a\tnew\r\n\r\nb\tx\\ry\r\n\nc\t\n";
    ok(run_in(d, &[os("import"), os("x.kh")], input));
    assert_eq!(ok(run(d, &["get", "x.kh", "a"])).stdout, b"new");
    assert_eq!(ok(run(d, &["get", "x.kh", "b"])).stdout, b"x\ry");
    assert_eq!(ok(run(d, &["get", "x.kh", "c"])).stdout, b"");
    // The same key twice in one import: the later line wins.
    ok(run_in(d, &[os("import"), os("x.kh")], b"d\t1\nd\t2\n"));
    assert_eq!(ok(run(d, &["get", "x.kh", "d"])).stdout, b"2");
}

/// Regression: a malformed line stopped an import half-way, the lines before it already
/// stored. Every line is checked first: a malformed one imports nothing, and with `--create`
/// makes no database.
#[test]
fn a_malformed_import_line_fails_with_its_number_and_imports_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cases: &[(&[u8], &str)] = &[
        (b"k1\tv1\nk2\tv2\nno tab here\nk4\tv4\n", "missing tab"),
        (b"k1\tv1\nk2\tv2\na\tb\tc\nk4\tv4\n", "unescaped tab"),
        (
            b"k1\tv1\nk2\tv2\nk3\tbad \\q escape\nk4\tv4\n",
            "unknown escape",
        ),
        (b"k1\tv1\nk2\tv2\nk3\t\\x4\nk4\tv4\n", "\\x"),
    ];
    ok(run(d, &["put", "--create", "x.kh", "k1", "before"]));
    for (i, (input, what)) in cases.iter().enumerate() {
        for args in [
            vec![os("import"), os("x.kh")],
            vec![os("import"), os("--create"), os("new.kh")],
        ] {
            let o = run_in(d, &args, input);
            status(&o, 2);
            let e = stderr(&o);
            assert!(e.starts_with("kura: "), "{e}");
            assert!(e.contains("line 3"), "{i}: {e}");
            assert!(e.contains(what), "{e} should name {what}");
            assert!(e.contains("nothing was imported"), "{e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        assert!(!d.join("new.kh").exists());
        assert_eq!(ok(run(d, &["get", "x.kh", "k1"])).stdout, b"before");
        status(&run(d, &["get", "x.kh", "k2"]), 1);
    }
    // From a file, the message names the file.
    std::fs::write(d.join("in.tsv"), b"ok\t1\n\\\n").unwrap();
    let o = run(d, &["import", "--create", "f.kh", "in.tsv"]);
    status(&o, 2);
    assert!(stderr(&o).contains("in.tsv: line 2"), "{}", stderr(&o));
    assert!(!d.join("f.kh").exists());
    // A missing input file is an error and creates no database.
    let o = run(d, &["import", "--create", "g.kh", "missing.tsv"]);
    status(&o, 2);
    assert!(stderr(&o).contains("missing.tsv"), "{}", stderr(&o));
    assert!(!d.join("g.kh").exists());
}

#[test]
fn bad_names_exit_2_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (name, what) in [
        ("foo.xyz", "unknown database kind"),
        ("a.kh#nosuch=1", "nosuch"),
        ("a.kh#sync=sometimes", "sync"),
        ("#x=1", "empty path"),
        ("*#bogus", "key=value"),
    ] {
        for args in [
            vec!["get", name, "k"],
            vec!["put", name, "k", "v"],
            vec!["inform", name],
            vec!["create", name],
        ] {
            let o = run(d, &args);
            status(&o, 2);
            let e = stderr(&o);
            assert!(e.starts_with("kura: ") && e.contains(what), "{args:?}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }
    assert!(!d.join("a.kh").exists());
    // A file where the database directory should be.
    std::fs::write(d.join("junk.kh"), vec![0x5a; 10_000]).unwrap();
    let o = run(d, &["get", "junk.kh", "k"]);
    status(&o, 2);
    assert!(
        stderr(&o).starts_with("kura: cannot open junk.kh"),
        "{}",
        stderr(&o)
    );
    // A database whose files are overwritten with junk: a message, never a panic. Writable
    // commands refuse it (2); read-only ones serve what verifies (here nothing), say so on
    // stderr, and end with status 1 when they went through every record.
    ok(run(d, &["put", "--create", "bad.kh", "k", "v"]));
    for entry in std::fs::read_dir(d.join("bad.kh")).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap() != "LOCK" {
            let mut data = std::fs::read(&path).unwrap();
            let n = data.len().min(64);
            data[..n].fill(0x5a);
            std::fs::write(&path, data).unwrap();
        }
    }
    for (args, code) in [
        (vec!["put", "bad.kh", "k", "w"], 2),
        (vec!["get", "bad.kh", "k"], 1),
        (vec!["check", "bad.kh"], 1),
        (vec!["export", "bad.kh"], 1),
        (vec!["list", "bad.kh"], 1),
    ] {
        let o = run(d, &args);
        status(&o, code);
        let e = stderr(&o);
        assert!(
            e.starts_with("kura: ") && (e.contains("damage") || e.contains("corrupt")),
            "{args:?}: {e}"
        );
    }
    // Usage errors are clap's, with status 2.
    status(&run(d, &["get", "x.kh"]), 2);
    status(&run(d, &["frobnicate", "x.kh"]), 2);
    status(&run(d, &["list", "x.kh", "--limit", "many"]), 2);
}

#[test]
fn check_on_a_healthy_database_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(run_in(
        d,
        &[os("import"), os("--create"), os("x.kh")],
        b"a\t1\nb\t2\nc\t3\n",
    ));
    let o = ok(run(d, &["check", "x.kh"]));
    let out = stdout(&o);
    assert!(out.contains("records: 3"), "{out}");
    assert!(out.contains("healthy"), "{out}");
}

#[test]
fn list_prefix_and_limit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut input = Vec::new();
    for i in 0..50 {
        input.extend_from_slice(format!("user:{i:02}\tu{i}\nitem:{i:02}\ti{i}\n").as_bytes());
    }
    ok(run_in(
        d,
        &[os("import"), os("--create"), os("x.kh")],
        &input,
    ));

    let all = ok(run(d, &["list", "x.kh"])).stdout;
    assert_eq!(sorted_lines(&all).len(), 100);
    let users = ok(run(d, &["list", "x.kh", "--prefix", "user:"])).stdout;
    let users = sorted_lines(&users);
    assert_eq!(users.len(), 50);
    assert!(users.iter().all(|k| k.starts_with(b"user:")));
    let some = ok(run(
        d,
        &["list", "x.kh", "--prefix", "item:4", "--limit", "3"],
    ))
    .stdout;
    let some = sorted_lines(&some);
    assert_eq!(some.len(), 3);
    assert!(some.iter().all(|k| k.starts_with(b"item:4")));
    assert_eq!(
        sorted_lines(&ok(run(d, &["list", "x.kh", "--limit", "7"])).stdout).len(),
        7
    );
    assert!(ok(run(d, &["list", "x.kh", "--limit", "0"]))
        .stdout
        .is_empty());
    assert!(ok(run(d, &["list", "x.kh", "--prefix", "nobody"]))
        .stdout
        .is_empty());
    let with_values = ok(run(d, &["list", "x.kh", "--prefix", "user:07", "--values"])).stdout;
    assert_eq!(with_values, b"user:07\tu7\n");
    // A binary prefix.
    ok(run_in(
        d,
        &[os("put"), os("x.kh"), bytes(b"\xff\x01k"), os("v")],
        b"",
    ));
    let o = ok(run_in(
        d,
        &[os("list"), os("x.kh"), os("--prefix"), bytes(b"\xff")],
        b"",
    ));
    assert_eq!(o.stdout, b"\xff\\x01k\n");
}

#[test]
fn memory_kinds_open_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for name in ["*", "+", "+#capsiz=64m"] {
        ok(run(d, &["put", name, "k", "v"]));
        ok(run_in(d, &[os("import"), os(name)], b"a\t1\n"));
        let inform = stdout(&ok(run(d, &["inform", name])));
        assert!(inform.starts_with("kind: memory"), "{inform}");
        assert!(inform.contains("records: 0"), "{inform}");
        // A new process starts empty.
        status(&run(d, &["get", name, "k"]), 1);
    }
}

#[test]
fn vanish_copy_and_optimize() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(run_in(
        d,
        &[os("import"), os("--create"), os("x.kh")],
        b"a\t1\nb\t2\n",
    ));
    ok(run(d, &["copy", "x.kh", "y.kh"]));
    let again = run(d, &["copy", "x.kh", "y.kh"]);
    status(&again, 1);
    assert!(
        stderr(&again).contains("already exists"),
        "{}",
        stderr(&again)
    );
    ok(run(d, &["optimize", "x.kh"]));
    assert_eq!(ok(run(d, &["get", "x.kh", "b"])).stdout, b"2");
    ok(run(d, &["vanish", "x.kh"]));
    assert!(ok(run(d, &["list", "x.kh"])).stdout.is_empty());
    assert_eq!(ok(run(d, &["get", "y.kh", "a"])).stdout, b"1");
    assert!(stdout(&ok(run(d, &["inform", "y.kh"]))).contains("records: 2"));
}

#[test]
fn keys_starting_with_a_dash_need_double_dash() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(run(d, &["put", "--create", "x.kh", "--", "-k", "-v"]));
    assert_eq!(ok(run(d, &["get", "x.kh", "--", "-k"])).stdout, b"-v");
}

/// A database held by a server is refused to every other open, with a message that names the
/// server's pid and command and points at `kura remote`; usable again once the server stops.
#[test]
fn a_database_open_in_another_process_is_refused_then_usable_after() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(run(d, &["create", "x.kh"]));
    let mut srv = common::Server::start(d, "x.kh");
    let pid = srv.child.id();
    for args in [
        vec!["put", "x.kh", "k", "v"],
        vec!["get", "x.kh", "k"],
        vec!["inform", "x.kh"],
    ] {
        let o = run(d, &args);
        status(&o, 2);
        let e = stderr(&o);
        assert!(e.starts_with("kura: ") && e.contains("already open"), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains(&format!("pid {pid}")), "{e}");
        assert!(e.contains("serve x.kh"), "{e}");
        assert!(e.contains("kura remote"), "{e}");
    }
    // Through the server, as the message says.
    let port = common::port_of(&srv.addr).to_string();
    let o = Command::new(KURA)
        .args(["remote", "--port", &port, "put", "from", "server"])
        .output()
        .unwrap();
    status(&o, 0);
    assert!(srv.signal(libc::SIGTERM).success());
    ok(run(d, &["put", "x.kh", "k", "v2"]));
    assert_eq!(ok(run(d, &["get", "x.kh", "k"])).stdout, b"v2");
    assert_eq!(ok(run(d, &["get", "x.kh", "from"])).stdout, b"server");
}

#[test]
fn non_utf8_arguments_are_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let key = OsString::from_vec(b"k\xff\xfe".to_vec());
    let value = OsString::from_vec(b"\x80v\xc3".to_vec());
    ok(run_in(
        d,
        &[os("put"), os("--create"), os("x.kh"), &key, &value],
        b"",
    ));
    assert_eq!(
        ok(run_in(d, &[os("get"), os("x.kh"), &key], b"")).stdout,
        b"\x80v\xc3"
    );
    let missing = run_in(d, &[os("get"), os("x.kh"), bytes(b"\xff\x01")], b"");
    status(&missing, 1);
    // The message shows the key escaped, never raw control bytes.
    assert!(stderr(&missing).contains("\\x01"), "{}", stderr(&missing));
}

/// `kura db list --from/--to/--desc` needs an ordered kind: on a hash it is an error (status
/// 2, nothing listed); on the memory tree (empty at each open) it lists nothing.
#[test]
fn db_list_ranges_need_an_ordered_kind() {
    let dir = tempfile::tempdir().unwrap();
    ok(run(dir.path(), &["put", "h.kh", "k", "v", "--create"]));
    for args in [&["--from", "a"][..], &["--to", "z"], &["--desc"]] {
        let o = run(dir.path(), &[&["list", "h.kh"], args].concat());
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains("ordered"), "{}", stderr(&o));
        assert!(o.stdout.is_empty());
    }
    let o = ok(run(
        dir.path(),
        &[
            "list", "+", "--from", "a", "--to", "z", "--desc", "--limit", "3",
        ],
    ));
    assert!(o.stdout.is_empty());
    assert_eq!(stdout(&ok(run(dir.path(), &["list", "h.kh"]))), "k\n");
}

/// A B+ tree (`.kb`) through `kura db`: list ranges, prefixes and export in key order (its
/// comparator's: decimal below), duplicates with `put --dup/--dupback`, `get --all`,
/// `out --all`, and `import --dup` taking back what `export` wrote, every value in order.
#[test]
fn a_b_plus_tree_ranges_duplicates_import_and_export() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(run(d, &["create", "t.kb"]));
    for k in ["m", "b", "z", "a", "ba", "c"] {
        ok(run(d, &["put", "t.kb", k, &format!("v{k}")]));
    }
    assert_eq!(
        stdout(&ok(run(d, &["list", "t.kb"]))),
        "a\nb\nba\nc\nm\nz\n"
    );
    let inform = stdout(&ok(run(d, &["inform", "t.kb"])));
    assert!(inform.contains("\ntype: B+ tree\n"), "{inform}");
    assert_eq!(
        stdout(&ok(run(
            d,
            &["list", "t.kb", "--from", "c", "--through", "b", "--desc"]
        ))),
        "c\nba\nb\n"
    );
    assert_eq!(
        stdout(&ok(run(d, &["list", "t.kb", "--prefix", "b"]))),
        "b\nba\n"
    );
    // Duplicates: after (--dup) and before (--dupback) the values there.
    ok(run(d, &["put", "t.kb", "b", "2", "--dup"]));
    ok(run(d, &["put", "t.kb", "b", "0", "--dupback"]));
    assert_eq!(stdout(&ok(run(d, &["get", "t.kb", "b"]))), "0");
    assert_eq!(
        stdout(&ok(run(d, &["get", "t.kb", "b", "--all"]))),
        "0\nvb\n2\n"
    );
    status(&run(d, &["get", "t.kb", "nope", "--all"]), 1);
    let o = run(d, &["put", "t.kb", "b", "x", "--dup", "--keep"]);
    status(&o, 2);
    // Export: key order, a line per value; import --dup gives every value back.
    let exported = ok(run(d, &["export", "t.kb"])).stdout;
    assert_eq!(
        String::from_utf8(exported.clone()).unwrap(),
        "a\tva\nb\t0\nb\tvb\nb\t2\nba\tvba\nc\tvc\nm\tvm\nz\tvz\n"
    );
    let o = run_in(
        d,
        &[os("import"), os("u.kb"), os("--create"), os("--dup")],
        &exported,
    );
    status(&o, 0);
    assert_eq!(
        stdout(&ok(run(d, &["get", "u.kb", "b", "--all"]))),
        "0\nvb\n2\n"
    );
    assert_eq!(ok(run(d, &["export", "u.kb"])).stdout, exported);
    // Without --dup the last line of a key wins.
    ok(run_in(
        d,
        &[os("import"), os("w.kb"), os("--create")],
        &exported,
    ));
    assert_eq!(stdout(&ok(run(d, &["get", "w.kb", "b", "--all"]))), "2\n");
    // out --all removes every value; out alone the first.
    ok(run(d, &["out", "u.kb", "b"]));
    assert_eq!(
        stdout(&ok(run(d, &["get", "u.kb", "b", "--all"]))),
        "vb\n2\n"
    );
    ok(run(d, &["out", "u.kb", "b", "--all"]));
    status(&run(d, &["out", "u.kb", "b", "--all"]), 1);
    status(&run(d, &["get", "u.kb", "b"]), 1);
    // Duplicates need a kind that keeps them.
    ok(run(d, &["put", "h.kh", "k", "v", "--create"]));
    let o = run(d, &["put", "h.kh", "k", "w", "--dup"]);
    status(&o, 2);
    assert!(stderr(&o).contains("duplicate"), "{}", stderr(&o));
    let o = run_in(d, &[os("import"), os("h.kh"), os("--dup")], b"k\tv\n");
    status(&o, 2);
    assert_eq!(stdout(&ok(run(d, &["get", "h.kh", "k", "--all"]))), "v\n");
    // A decimal comparator: ranges, prefixes and export follow it.
    ok(run(d, &["create", "n.kb#cmp=dec"]));
    for k in ["10", "9", "100", "2", "11"] {
        ok(run(d, &["put", "n.kb", k, k]));
    }
    assert_eq!(
        stdout(&ok(run(d, &["list", "n.kb"]))),
        "2\n9\n10\n11\n100\n"
    );
    assert_eq!(
        stdout(&ok(run(d, &["list", "n.kb", "--from", "9", "--to", "100"]))),
        "9\n10\n11\n"
    );
    assert_eq!(
        stdout(&ok(run(d, &["list", "n.kb", "--prefix", "1"]))),
        "10\n11\n100\n"
    );
    assert_eq!(
        stdout(&ok(run(d, &["export", "n.kb"]))),
        "2\t2\n9\t9\n10\t10\n11\t11\n100\t100\n"
    );
}

/// A fixed-length database (`.kf`) through `kura db`: keys are record ids (leading zeros name
/// the same id) and the key words `min`, `max` and `next`; `list` ranges take ids and key
/// words and follow numeric order, as do `--prefix` walks and `export`; a key that is not an
/// id, a value over the width and an id past the limit are errors (status 2) that store
/// nothing; `optimize` takes `width=`, `inform` shows it; `check`, `repair` and `import` work.
#[test]
fn a_fixed_length_database_by_ids_and_key_words() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(run(d, &["create", "f.kf#width=16#limsiz=1m"]));
    status(&run(d, &["create", "f.kf"]), 1);
    for id in ["3", "1", "10", "2", "100"] {
        ok(run(d, &["put", "f.kf", id, &format!("v{id}")]));
    }
    ok(run(d, &["put", "f.kf", "next", "v101"]));
    ok(run(d, &["put", "f.kf", "0009", "v9"]));
    assert_eq!(stdout(&ok(run(d, &["get", "f.kf", "max"]))), "v101");
    assert_eq!(stdout(&ok(run(d, &["get", "f.kf", "min"]))), "v1");
    assert_eq!(stdout(&ok(run(d, &["get", "f.kf", "010"]))), "v10");
    status(&run(d, &["get", "f.kf", "4"]), 1);
    assert_eq!(
        stdout(&ok(run(d, &["list", "f.kf"]))),
        "1\n2\n3\n9\n10\n100\n101\n"
    );
    assert_eq!(
        stdout(&ok(run(
            d,
            &["list", "f.kf", "--from", "3", "--to", "max", "--values"]
        ))),
        "3\tv3\n9\tv9\n10\tv10\n100\tv100\n"
    );
    assert_eq!(
        stdout(&ok(run(
            d,
            &["list", "f.kf", "--from", "9", "--through", "min", "--desc"]
        ))),
        "9\n3\n2\n1\n"
    );
    assert_eq!(
        stdout(&ok(run(d, &["list", "f.kf", "--desc", "--limit", "2"]))),
        "101\n100\n"
    );
    assert_eq!(
        stdout(&ok(run(d, &["list", "f.kf", "--prefix", "1"]))),
        "1\n10\n100\n101\n"
    );
    assert_eq!(
        stdout(&ok(run(d, &["export", "f.kf"]))),
        "1\tv1\n2\tv2\n3\tv3\n9\tv9\n10\tv10\n100\tv100\n101\tv101\n"
    );
    // Not an id, longer than the width, past the limit: refused, nothing stored.
    for (key, value, says) in [
        ("abc", "v", "record id"),
        ("5", "seventeen bytes!!", "width"),
        ("99999999", "v", "outside"),
    ] {
        let o = run(d, &["put", "f.kf", key, value]);
        status(&o, 2);
        assert!(stderr(&o).contains(says), "{key}: {}", stderr(&o));
    }
    assert_eq!(
        stdout(&ok(run(d, &["inform", "f.kf"])))
            .lines()
            .find(|l| l.starts_with("records:")),
        Some("records: 7")
    );
    ok(run(d, &["optimize", "f.kf", "width=32"]));
    let inform = stdout(&ok(run(d, &["inform", "f.kf"])));
    assert!(inform.contains("\nstored.width: 32\n"), "{inform}");
    ok(run(d, &["put", "f.kf", "5", "seventeen bytes!!"]));
    ok(run(d, &["out", "f.kf", "min"]));
    assert_eq!(
        stdout(&ok(run(d, &["list", "f.kf", "--limit", "3"]))),
        "2\n3\n5\n"
    );
    // check, and repair into a new database with the same records.
    ok(run(d, &["check", "f.kf"]));
    ok(run(d, &["repair", "f.kf", "r.kf"]));
    assert_eq!(
        ok(run(d, &["export", "r.kf"])).stdout,
        ok(run(d, &["export", "f.kf"])).stdout
    );
    // Import takes ids too.
    ok(run_in(
        d,
        &[os("import"), os("i.kf"), os("--create")],
        b"7\tseven\n0008\teight\n",
    ));
    assert_eq!(
        stdout(&ok(run(d, &["export", "i.kf"]))),
        "7\tseven\n8\teight\n"
    );
}
