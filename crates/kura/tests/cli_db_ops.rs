//! What an operator meets in `kura db` and `kura remote` (issue 30): listings of duplicate keys,
//! imports refused before anything is written, restores to a time, the update log's listing,
//! list bounds, messages and read-only access to a live database. The real binary, in a
//! temporary directory.

mod common;

use common::{port_of, Server};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const KURA: &str = env!("CARGO_BIN_EXE_kura");

/// Run `kura ARGS…` in `dir` with `stdin` as its input.
fn kura_in(dir: &Path, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(KURA)
        .current_dir(dir)
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

fn kura(dir: &Path, args: &[&str]) -> Output {
    kura_in(dir, args, b"")
}

fn db(dir: &Path, args: &[&str]) -> Output {
    kura(dir, &[&["db"], args].concat())
}

fn remote(dir: &Path, srv: &Server, args: &[&str]) -> Output {
    kura(
        dir,
        &[&["remote", "--port", port_of(&srv.addr)], args].concat(),
    )
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

/// `kura remote list --values` on a B+ tree with duplicate keys printed the first value for
/// every record of a key (a `get` per key): each record shows its own value, with and
/// without a prefix, and a limit counts lines.
#[test]
fn remote_listings_show_each_duplicates_own_value() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(db(d, &["put", "--create", "d.kb", "apple", "v-apple-5831"]));
    ok(db(d, &["put", "--dup", "d.kb", "apple", "v-apple-6466"]));
    ok(db(d, &["put", "d.kb", "banana", "v-banana"]));
    let local = out(&ok(db(d, &["list", "--values", "d.kb"])));
    assert_eq!(
        local,
        "apple\tv-apple-5831\napple\tv-apple-6466\nbanana\tv-banana\n"
    );
    let srv = common::serve(d, &["d.kb", "--port", "0"]);
    assert_eq!(out(&ok(remote(d, &srv, &["list", "--values"]))), local);
    assert_eq!(
        out(&ok(remote(
            d,
            &srv,
            &["list", "--values", "--prefix", "app"]
        ))),
        "apple\tv-apple-5831\napple\tv-apple-6466\n"
    );
    assert_eq!(
        out(&ok(remote(
            d,
            &srv,
            &["list", "--values", "--prefix", "a", "--limit", "1"]
        ))),
        "apple\tv-apple-5831\n"
    );
    assert_eq!(
        out(&ok(remote(d, &srv, &["list", "--values", "--limit", "2"]))),
        "apple\tv-apple-5831\napple\tv-apple-6466\n"
    );
    assert_eq!(
        out(&ok(remote(d, &srv, &["list"]))),
        "apple\napple\nbanana\n"
    );
}

/// A `.kf` import with a value wider than the database's width failed part way ("running the
/// same import again finishes it", which it never would): the width, and the kind's other
/// rules (a key that is an id of the database), are checked with every line before the first
/// record is written; the message names the line and the width. A successful import says how
/// many records it stored.
#[test]
fn an_import_is_checked_against_the_kinds_rules_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(db(d, &["create", "f.kf#width=5"]));
    ok(db(d, &["put", "f.kf", "1", "one"]));
    for (input, what) in [
        (&b"7\t123456789\n9\tok\n"[..], "line 1"),
        (b"7\tok\nx\tok\n", "line 2"),
        (b"7\tok\nmax\tok\n", "line 2"),
        (b"7\tok\n99999999999\tok\n", "line 2"),
    ] {
        let o = kura_in(d, &["db", "import", "--format", "raw", "f.kf"], input);
        status(&o, 2);
        let e = err(&o);
        assert!(
            e.contains(what) && e.contains("nothing was imported"),
            "{e}"
        );
        assert!(!e.contains("Running the same import again"), "{e}");
        assert_eq!(out(&ok(db(d, &["list", "--values", "f.kf"]))), "1\tone\n");
    }
    let o = kura_in(
        d,
        &["db", "import", "--format", "raw", "f.kf"],
        b"7\t123456789\n",
    );
    assert!(err(&o).contains("up to 5 bytes"), "{}", err(&o));
    // A database created for a refused import is not left behind.
    let o = kura_in(
        d,
        &[
            "db",
            "import",
            "--create",
            "--format",
            "raw",
            "g.kf#width=3",
        ],
        b"1\tabcd\n",
    );
    status(&o, 2);
    assert!(!d.join("g.kf").exists());
    // What passes is stored, and counted.
    let o = ok(kura_in(
        d,
        &["db", "import", "--format", "raw", "f.kf"],
        b"7\tseven\n9\tnine\n",
    ));
    assert_eq!(out(&o), "2 records stored in f.kf\n");
    assert_eq!(
        out(&ok(db(d, &["list", "--values", "f.kf"]))),
        "1\tone\n7\tseven\n9\tnine\n"
    );
}

/// The sorted keys of a database.
fn keys(d: &Path, name: &str) -> Vec<String> {
    let mut k: Vec<String> = out(&ok(db(d, &["list", name])))
        .lines()
        .map(str::to_string)
        .collect();
    k.sort();
    k
}

/// `kura db restore --until` took only microseconds and answered "0 records replayed" with
/// status 0 for a time before the backup; there was no way to see the log's records; and the
/// position a backup needs lived beside its directory, so copying the directory alone lost it.
/// Now: RFC 3339 and relative times, a time before the backup is an error naming the backup's
/// time, `kura db ulog` lists the records (binary keys escaped), and the position travels
/// inside the backup (the old place is still read).
#[test]
fn restores_to_a_time_the_log_listing_shows() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let master = common::serve(
        d,
        &[
            "m.kh",
            "--port",
            "0",
            "--sid",
            "9",
            "--ulog",
            "mlog",
            "--backup-dir",
            ".",
        ],
    );
    let mut t = common::Tt::new(&master.addr);
    t.put(b"a", b"1");
    t.put(b"b", b"2");
    ok(remote(d, &master, &["copy", "bk.kh"]));
    ok(remote(d, &master, &["copy", "old.kh"]));
    assert!(d.join("bk.kh/kura.ulogpos").exists());
    assert!(!d.join("bk.kh.ulogpos").exists());
    t.put(b"c", b"3");
    t.out(b"a");
    t.put(b"bin\x01", b"x");
    t.put(b"d", b"too late");
    drop(master);

    // The listing: time (RFC 3339, UTC), µs, origin, operation, escaped key.
    let listing = out(&ok(db(d, &["ulog", "mlog"])));
    let lines: Vec<Vec<&str>> = listing.lines().map(|l| l.split('\t').collect()).collect();
    let ops: Vec<String> = lines.iter().map(|f| format!("{} {}", f[3], f[4])).collect();
    assert_eq!(
        ops,
        ["put a", "put b", "put c", "out a", "put bin\\x01", "put d"],
        "{listing}"
    );
    for f in &lines {
        assert_eq!(f.len(), 5, "{listing}");
        assert_eq!(f[2], "9");
        assert!(f[0].starts_with("20") && f[0].ends_with('Z'), "{listing}");
    }
    let out_a = lines[3][0];
    // --from/--until in the same forms, inclusive.
    let some = out(&ok(db(
        d,
        &["ulog", "mlog", "--from", lines[2][0], "--until", out_a],
    )));
    assert_eq!(some.lines().count(), 2, "{some}");
    let some = out(&ok(db(d, &["ulog", "mlog", "--from", lines[4][1]])));
    assert_eq!(some.lines().count(), 2, "{some}");
    assert_eq!(out(&ok(db(d, &["ulog", "mlog", "--from", "-1h"]))), listing);
    assert_eq!(out(&ok(db(d, &["ulog", "mlog", "--until", "-1h"]))), "");
    let bad = db(d, &["ulog", "mlog", "--from", "yesterday"]);
    status(&bad, 2);
    assert!(err(&bad).contains("RFC 3339"), "{}", err(&bad));

    // The backup's directory alone, moved elsewhere, restores to an RFC 3339 time.
    std::fs::create_dir(d.join("elsewhere")).unwrap();
    std::fs::rename(d.join("bk.kh"), d.join("elsewhere/bk.kh")).unwrap();
    let o = ok(db(
        d,
        &[
            "restore",
            "elsewhere/bk.kh",
            "--ulog",
            "mlog",
            "--until",
            out_a,
        ],
    ));
    assert!(out(&o).starts_with("2 records replayed"), "{}", out(&o));
    assert!(out(&o).contains(out_a), "{}", out(&o));
    assert_eq!(keys(d, "elsewhere/bk.kh"), ["b", "c"]);
    // A time before the backup's: an error saying the backup's time; nothing changes.
    let o = db(
        d,
        &[
            "restore",
            "elsewhere/bk.kh",
            "--ulog",
            "mlog",
            "--until",
            "2001-02-03T04:05:06+01:00",
        ],
    );
    status(&o, 2);
    assert!(
        err(&o).contains("before the backup's time") && err(&o).contains(out_a),
        "{}",
        err(&o)
    );
    assert_eq!(keys(d, "elsewhere/bk.kh"), ["b", "c"]);
    // A time relative to now: the rest.
    ok(db(
        d,
        &[
            "restore",
            "elsewhere/bk.kh",
            "--ulog",
            "mlog",
            "--until",
            "-0s",
        ],
    ));
    assert_eq!(keys(d, "elsewhere/bk.kh"), ["b", "bin\\x01", "c", "d"]);

    // A backup whose position lies beside it (where copies kept it before) still restores,
    // and its position moves inside.
    std::fs::rename(d.join("old.kh/kura.ulogpos"), d.join("old.kh.ulogpos")).unwrap();
    ok(db(d, &["restore", "old.kh", "--ulog", "mlog"]));
    assert_eq!(keys(d, "old.kh"), ["b", "bin\\x01", "c", "d"]);
    assert!(d.join("old.kh/kura.ulogpos").exists());
    assert!(!d.join("old.kh.ulogpos").exists());
}

/// `kura db list` on an ordered kind as `tcbmgr list` walks it: `--through` includes the end
/// (`-rb` does), and `--desc --from K` walks down from K (`-bk -j K`), where `--from` was the
/// lower bound whatever the direction.
#[test]
fn list_bounds_follow_the_walk_as_tcbmgr_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(db(d, &["create", "t.kb"]));
    for k in ["a", "b", "c", "d", "e"] {
        ok(db(d, &["put", "t.kb", k, k]));
    }
    let list = |args: &[&str]| out(&ok(db(d, &[&["list", "t.kb"], args].concat())));
    assert_eq!(list(&["--from", "b", "--to", "d"]), "b\nc\n");
    assert_eq!(list(&["--from", "b", "--through", "d"]), "b\nc\nd\n");
    assert_eq!(list(&["--desc", "--from", "c"]), "c\nb\na\n");
    assert_eq!(list(&["--desc", "--from", "d", "--to", "b"]), "d\nc\n");
    assert_eq!(
        list(&["--desc", "--from", "d", "--through", "b"]),
        "d\nc\nb\n"
    );
    assert_eq!(list(&["--desc", "--limit", "2"]), "e\nd\n");
    status(&db(d, &["list", "t.kb", "--to", "b", "--through", "c"]), 2);
}

/// `kura serve --help` named only `*`, `+` and `.kh`; a Tokyo or Kyoto Cabinet file name
/// was an unknown kind and nothing more: the help lists every kind, and such a name gets the
/// README's migration pipeline.
#[test]
fn serve_names_every_kind_and_how_to_migrate_a_cabinet_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let help = out(&ok(kura(d, &["serve", "--help"])));
    for k in ["PATH.kh", "PATH.kb", "PATH.kf", "`*`", "`+`"] {
        assert!(help.contains(k), "{k}: {help}");
    }
    for (file, pipeline) in [
        (
            "c.tch",
            "tchmgr list -pv -px c.tch | kura db import --create --format hex c.kh",
        ),
        (
            "c.tcb",
            "tcbmgr list -pv -px c.tcb | kura db import --create --dup --format hex c.kb",
        ),
        (
            "c.tcf",
            "tcfmgr list -pv c.tcf | kura db import --create --format raw 'c.kf#width=W'",
        ),
        (
            "c.kch",
            "kchashmgr list -pv -px c.kch | kura db import --create --format hex c.kh",
        ),
        (
            "c.kct",
            "kctreemgr list -pv -px c.kct | kura db import --create --format hex c.kb",
        ),
    ] {
        let o = kura(d, &["serve", file, "--port", "0"]);
        status(&o, 2);
        assert!(err(&o).contains(pipeline), "{file}: {}", err(&o));
        let o = db(d, &["list", file]);
        status(&o, 2);
        assert!(err(&o).contains(pipeline), "{file}: {}", err(&o));
    }
    assert!(!d.join("c.kh").exists() && !d.join("c.tch").exists());
}

/// `kura remote copy` failures said only "the server answered code 1" and a list of what
/// might be wrong: they give the server's reason (its `misc error` after the copy).
#[test]
fn remote_copy_failures_give_the_servers_reason() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("bk")).unwrap();
    let srv = common::serve(d, &["m.kh", "--port", "0", "--backup-dir", "bk"]);
    ok(remote(d, &srv, &["copy", "x.kh"]));
    for (path, why) in [
        ("x.kh", "copy to x.kh refused: "),
        ("../y.kh", "copy to ../y.kh refused: a `..` component"),
        ("@nosuch", "copy @nosuch refused: no such command"),
    ] {
        let o = remote(d, &srv, &["copy", path]);
        status(&o, 1);
        assert!(err(&o).contains(why), "{path}: {}", err(&o));
    }
    assert!(err(&remote(d, &srv, &["copy", "x.kh"])).contains("x.kh already exists"));
    let plain = common::serve(d, &["*", "--port", "0"]);
    let o = remote(d, &plain, &["copy", "z.kh"]);
    status(&o, 1);
    assert!(
        err(&o).contains("the server has no --backup-dir"),
        "{}",
        err(&o)
    );
    // misc error answers success again on a connection with no failed copy.
    assert_eq!(
        out(&ok(remote(d, &srv, &["misc", "error"]))),
        "0: success\n"
    );
}

/// Wait up to 10 s for `f` to give a value.
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed().as_secs() < 10,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `kura serve --threads 0` was taken; `--daemon` without `--log` threw the log away. Zero
/// threads are refused; a daemon without --log logs beside its database and says where.
#[test]
fn serve_refuses_zero_threads_and_a_daemon_keeps_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = kura(d, &["serve", "d.kh", "--port", "0", "--threads", "0"]);
    status(&o, 2);
    assert!(err(&o).contains("at least 1"), "{}", err(&o));
    assert!(!d.join("d.kh").exists());

    // No syslog socket answers (as where /dev/log is missing): the log goes beside the database.
    let o = Command::new(KURA)
        .current_dir(d)
        .args(["serve", "d.kh", "--port", "0", "--daemon", "--pid", "d.pid"])
        .env("KURA_TEST_SYSLOG_SOCKET", d.join("no-syslog.sock"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    status(&o, 0);
    assert!(
        err(&o).contains("the log goes to") && err(&o).contains("d.kh.log"),
        "{}",
        err(&o)
    );
    let read = |p: &str| std::fs::read_to_string(d.join(p)).unwrap_or_default();
    let pid: i32 = wait_for("the pid file", || read("d.pid").trim().parse().ok());
    wait_for("the log", || {
        read("d.kh.log").contains("listening on").then_some(())
    });
    // SAFETY: kill(2) of the daemon this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    wait_for("the server stopped", || {
        read("d.kh.log").contains("stopped;").then_some(())
    });
}

/// `cannot create nodir/x.kh: cannot create nodir/x.kh: …` named the database twice, and
/// `put --create` added "`kura db create` makes one": said once, for every kind and command.
#[test]
fn a_missing_directory_is_said_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for name in ["nodir/x.kh", "nodir/x.kb", "nodir/x.kf"] {
        for args in [
            &["db", "create", name][..],
            &["db", "put", "--create", name, "k", "v"],
            &["db", "import", "--create", name],
            &["serve", name, "--port", "0"],
        ] {
            let o = kura(d, args);
            status(&o, 2);
            let e = err(&o);
            assert!(
                e.contains(&format!(
                    "cannot create {name}: directory nodir does not exist"
                )),
                "{args:?}: {e}"
            );
            assert_eq!(e.matches(name).count(), 1, "{args:?}: {e}");
            assert!(!e.contains("makes one"), "{args:?}: {e}");
        }
    }
    assert!(!d.join("nodir").exists());
}

/// A database a server holds cannot be opened by `kura db` (the server writes it): the
/// message gives the same command through the server, with its port, so it can be run as
/// it is.
#[test]
fn a_database_a_server_holds_points_at_the_same_command_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(db(d, &["put", "--create", "live.kb", "k", "v"]));
    ok(db(d, &["put", "--dup", "live.kb", "k", "v2"]));
    let port = common::free_port().to_string();
    let srv = common::serve(d, &["live.kb", "--port", &port]);
    for (args, same) in [
        (&["inform", "live.kb"][..], "inform"),
        (&["get", "live.kb", "k"], "get k"),
        (&["get", "--all", "live.kb", "k"], "misc get k"),
        (&["list", "--values", "live.kb"], "list --values"),
        (&["export", "live.kb", "out.tsv"], "list --values > out.tsv"),
        (&["put", "live.kb", "it's", "x"], "put 'it'\\''s' x"),
    ] {
        let o = db(d, args);
        status(&o, 2);
        let want = format!("`kura remote --port {port} {same}`");
        assert!(err(&o).contains(&want), "{args:?}: {}", err(&o));
    }
    // The commands named do what was asked.
    let o = ok(remote(d, &srv, &["misc", "get", "k"]));
    assert_eq!(out(&o), "v\nv2\n");
    assert_eq!(out(&ok(remote(d, &srv, &["get", "k"]))), "v");
    assert!(!d.join("out.tsv").exists());
}
