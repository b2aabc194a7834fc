//! docs/MIGRATING.md, step by step: its file blocks (`<!-- test: NAME -->` before a ```sh
//! block) run as written against databases the originals' own tools make, and its
//! replication path runs with a Kura server speaking Tyrant's replication in ttserver's place
//! (ttserver is not packaged here).
//!
//! The file steps need tchmgr, tcbmgr, tctmgr (tokyocabinet-bin), kchashmgr and kctreemgr
//! (kyotocabinet-utils), which scripts/test.sh installs, setting KURA_PEER_TESTS=1: with it,
//! missing tools fail the test; without it, the test says so and passes.

mod common;

use common::{converge, free_port, tools_present, Server, Tt};
use std::path::{Path, PathBuf};
use std::process::Command;

const KURA: &str = env!("CARGO_BIN_EXE_kura");

fn doc() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/MIGRATING.md");
    std::fs::read_to_string(p).unwrap()
}

/// The ```sh block after `<!-- test: NAME -->`.
fn block(doc: &str, name: &str) -> String {
    let marker = format!("<!-- test: {name} -->");
    let after = doc
        .split_once(&marker)
        .unwrap_or_else(|| panic!("{marker} not in docs/MIGRATING.md"))
        .1;
    let body = after.split_once("```sh\n").unwrap().1;
    body.split_once("```").unwrap().0.to_string()
}

/// Run a bash script in `dir` with this build's `kura` first on PATH; its stdout.
fn sh(dir: &Path, script: &str) -> String {
    let bin: PathBuf = Path::new(KURA).parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = Command::new("bash")
        .args(["-c", &format!("set -euo pipefail\n{script}")])
        .current_dir(dir)
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{script}\nstatus {}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn the_file_steps_run_as_written() {
    if !tools_present(&["tchmgr", "tcbmgr", "tctmgr", "kchashmgr", "kctreemgr"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The originals' databases, made by their own tools: a binary key and value (hex), a
    // value with a tab, duplicates in the B+ tree, a table with two columns.
    sh(
        dir.path(),
        "tchmgr create users.tch
         tchmgr put users.tch alice 'one	two'
         tchmgr put -sx users.tch '00ff0a' '0d0a00'
         tchmgr put users.tch bob 2
         tcbmgr create events.tcb
         tcbmgr put events.tcb day1 a
         tcbmgr put -dd events.tcb day1 b
         tcbmgr put events.tcb day2 c
         tctmgr create people.tct
         tctmgr put people.tct 1 name alice age 30
         tctmgr put people.tct 2 name bob age 25
         kchashmgr create cache.kch
         kchashmgr set cache.kch k1 v1
         kchashmgr set cache.kch k2 v2
         kctreemgr create index.kct
         kctreemgr set index.kct a 1
         kctreemgr set index.kct b 2",
    );
    let doc = doc();
    sh(dir.path(), &block(&doc, "import"));
    let check = block(&doc, "check");
    sh(dir.path(), &check);
    // The check compares numbers, not two empty strings.
    let count = check.lines().next().unwrap();
    for (tool, db, n) in [
        ("tcbmgr", "events.tcb", "3"),
        ("kura db", "events.kb", "3"),
        ("kctreemgr", "index.kct", "2"),
        ("tctmgr", "people.tct", "2"),
        ("kura db", "people.kt", "2"),
    ] {
        let got = sh(dir.path(), &format!("{count}\ncount {tool} inform {db}"));
        assert_eq!(got.trim(), n, "{tool} inform {db}");
    }
    let get = |db: &str, key: &str| sh(dir.path(), &format!("kura db get {db} {key}"));
    assert_eq!(get("users.kh", "alice"), "one\ttwo");
    let exported = sh(dir.path(), "kura db export --format hex users.kh");
    assert!(
        exported.lines().any(|l| l == "00 FF 0A\t0D 0A 00"),
        "{exported}"
    );
    assert_eq!(sh(dir.path(), "kura db get --all events.kb day1"), "a\nb\n");
    assert_eq!(get("people.kt", "2"), "name\tbob\nage\t25\n");
    assert_eq!(get("cache.kh", "k2"), "v2");
    assert_eq!(get("index.kb", "b"), "2");

    // The serve block: the command, and the `kura serve` it prints (its comment line).
    let serve = block(&doc, "serve");
    let mut lines = serve.lines().filter(|l| !l.trim().is_empty());
    let cmd = lines.next().unwrap();
    let want = lines.next().unwrap().trim_start_matches("# ");
    assert_eq!(sh(dir.path(), cmd).trim(), want);
}

/// The replication path: a replica follows the old server over Tyrant's replication from an
/// empty database, then is promoted and takes writes.
#[test]
fn the_replication_path_follows_then_takes_over() {
    let dir = tempfile::tempdir().unwrap();
    // In ttserver's place: a server started with ttserver's flags, with an update log.
    let p1 = free_port().to_string();
    let old = common::serve(
        dir.path(),
        &["old.kh", "--port", &p1, "--ulog", "ulog1", "--sid", "1"],
    );
    let mut tt = Tt::new(&old.addr);
    for i in 0..200u32 {
        assert_eq!(tt.put(format!("k{i}").as_bytes(), b"v"), 0);
    }
    // Step 2 (no seed: the old server's log holds every change since it was empty).
    let p2 = free_port().to_string();
    let master = format!("127.0.0.1:{p1}");
    let (new, _) = Server::start_args(
        dir.path(),
        &[
            "data.kh",
            "--port",
            &p2,
            "--threads",
            "2",
            "--sid",
            "2",
            "--ulog",
            "ulog2",
            "--master",
            &master,
            "--master-protocol",
            "tyrant",
        ],
        1,
    );
    // Writes go on at the old server while the replica follows.
    assert_eq!(tt.put(b"late", b"1"), 0);
    converge(&old.addr, &new.addr, 30);
    let mut r = Tt::new(&new.addr);
    assert_ne!(r.put(b"x", b"1"), 0, "a replica refuses client writes");
    let replicas = sh(dir.path(), &format!("kura remote --port {p2} replicas"));
    assert!(replicas.contains(&p1), "{replicas}");
    // Step 4: promote.
    sh(
        dir.path(),
        &format!("kura remote --port {p2} setmst --none"),
    );
    assert_eq!(r.put(b"x", b"1"), 0, "the promoted server takes writes");
    assert_eq!(r.get(b"late").as_deref(), Some(&b"1"[..]));
    assert_eq!(r.get(b"k199").as_deref(), Some(&b"v"[..]));
}
