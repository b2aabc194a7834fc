//! The confinement rule, command names, running commands, and the executors' entry points.

use super::*;
use crate::context::LogSink;
use std::sync::Arc;

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "kura-backup-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p.canonicalize().unwrap())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A backup directory `DIR/backups` beside an outside directory `DIR/outside`.
fn setup(tag: &str) -> (TempDir, BackupDir, PathBuf) {
    let t = TempDir::new(tag);
    let root = t.0.join("backups");
    let outside = t.0.join("outside");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let d = BackupDir::new(&root, None).unwrap();
    (t, d, outside)
}

/// An executable shell script `body` as `dir/name`.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

#[test]
fn relative_and_absolute_paths_inside_are_accepted() {
    let (_t, d, _) = setup("inside");
    let root = d.root().to_path_buf();
    assert_eq!(d.resolve(b"a.kh").unwrap(), root.join("a.kh"));
    assert_eq!(d.resolve(b"./a.kh").unwrap(), root.join("a.kh"));
    assert_eq!(d.resolve(b"a.kh/").unwrap(), root.join("a.kh"));
    let abs = root.join("b.kh");
    assert_eq!(d.resolve(abs.as_os_str().as_bytes()).unwrap(), abs);
    std::fs::create_dir(root.join("daily")).unwrap();
    assert_eq!(
        d.resolve(b"daily/c.kh").unwrap(),
        root.join("daily").join("c.kh")
    );
    // A symbolic link that stays inside is followed.
    std::os::unix::fs::symlink(root.join("daily"), root.join("today")).unwrap();
    assert_eq!(
        d.resolve(b"today/c.kh").unwrap(),
        root.join("daily").join("c.kh")
    );
}

#[test]
fn escapes_and_malformed_paths_are_refused() {
    let (t, d, outside) = setup("escape");
    let r = |p: &[u8]| d.resolve(p).unwrap_err();
    assert!(matches!(r(b""), Refusal::Empty));
    assert!(matches!(r(b"a\0b"), Refusal::Nul));
    assert!(matches!(r(b"a.kh\0"), Refusal::Nul));
    assert!(matches!(r(b".."), Refusal::ParentDir));
    assert!(matches!(r(b"../x.kh"), Refusal::ParentDir));
    assert!(matches!(r(b"daily/../x.kh"), Refusal::ParentDir));
    assert!(matches!(r(b"x/.."), Refusal::ParentDir));
    assert!(matches!(r(b"/"), Refusal::NotAName));
    assert!(matches!(r(b"."), Refusal::NotAName));
    assert!(matches!(r(b"missing/x.kh"), Refusal::NoDirectory(_)));
    // Absolute paths outside, also the directory itself's parent.
    let out = outside.join("x.kh");
    assert!(matches!(r(out.as_os_str().as_bytes()), Refusal::Outside(_)));
    assert!(matches!(r(b"/etc/x.kh"), Refusal::Outside(_)));
    let beside = t.0.join("x.kh");
    assert!(matches!(
        r(beside.as_os_str().as_bytes()),
        Refusal::Outside(_)
    ));
    // An absolute path through `..` is refused before anything is resolved.
    let dotdot = d.root().join("..").join("x.kh");
    assert!(matches!(
        r(dotdot.as_os_str().as_bytes()),
        Refusal::ParentDir
    ));
    assert!(!outside.join("x.kh").exists());
}

#[test]
fn symbolic_links_do_not_escape() {
    let (_t, d, outside) = setup("symlink");
    let root = d.root().to_path_buf();
    // A directory link to the outside.
    std::os::unix::fs::symlink(&outside, root.join("out")).unwrap();
    assert!(matches!(d.resolve(b"out/x.kh"), Err(Refusal::Outside(_))));
    // A link as the destination itself, dangling or not.
    std::os::unix::fs::symlink(outside.join("x.kh"), root.join("x.kh")).unwrap();
    assert!(matches!(d.resolve(b"x.kh"), Err(Refusal::Symlink(_))));
    std::os::unix::fs::symlink(&outside, root.join("o2")).unwrap();
    assert!(matches!(d.resolve(b"o2"), Err(Refusal::Symlink(_))));
    // A backup directory given through a link is its target.
    let via = root.parent().unwrap().join("via");
    std::os::unix::fs::symlink(&root, &via).unwrap();
    let d2 = BackupDir::new(&via, None).unwrap();
    assert_eq!(d2.root(), root);
    let abs = via.join("y.kh");
    assert_eq!(
        d2.resolve(abs.as_os_str().as_bytes()).unwrap(),
        root.join("y.kh")
    );
}

#[test]
fn the_database_is_off_limits() {
    let t = TempDir::new("db");
    let db = t.0.join("live.kh");
    std::fs::create_dir_all(db.join("sub")).unwrap();
    // DIR holds the database: copies beside it are fine, into it not.
    let d = BackupDir::new(&t.0, Some(&db)).unwrap();
    assert!(d.resolve(b"copy.kh").is_ok());
    assert!(matches!(d.resolve(b"live.kh"), Err(Refusal::InDatabase(_))));
    assert!(matches!(
        d.resolve(b"live.kh/sub/x"),
        Err(Refusal::InDatabase(_))
    ));
    // DIR inside the database is no backup directory.
    assert!(BackupDir::new(&db.join("sub"), Some(&db)).is_err());
    // Nor is a file or a missing directory.
    std::fs::write(t.0.join("file"), b"").unwrap();
    assert!(BackupDir::new(&t.0.join("file"), None).is_err());
    assert!(BackupDir::new(&t.0.join("missing"), None).is_err());
}

#[test]
fn command_names() {
    let (_t, d, outside) = setup("names");
    let root = d.root().to_path_buf();
    let ok = script(&root, "save", "exit 0");
    assert_eq!(d.command(b"save").unwrap(), ok);
    let c = |n: &[u8]| d.command(n).unwrap_err();
    assert!(matches!(c(b""), Refusal::Empty));
    assert!(matches!(c(b"sa\0ve"), Refusal::Nul));
    assert!(matches!(c(b"./save"), Refusal::BadCommand));
    assert!(matches!(c(b"/bin/sh"), Refusal::BadCommand));
    assert!(matches!(c(b"../outside/x"), Refusal::BadCommand));
    assert!(matches!(c(b"."), Refusal::BadCommand));
    assert!(matches!(c(b".."), Refusal::BadCommand));
    assert!(matches!(c(b"missing"), Refusal::NoCommand(_)));
    std::fs::write(root.join("plain"), b"#!/bin/sh\n").unwrap();
    assert!(matches!(c(b"plain"), Refusal::NotExecutable(_)));
    std::fs::create_dir(root.join("dir")).unwrap();
    assert!(matches!(c(b"dir"), Refusal::NotExecutable(_)));
    // A link to an executable outside.
    let sh = script(&outside, "evil", "exit 0");
    std::os::unix::fs::symlink(&sh, root.join("evil")).unwrap();
    assert!(matches!(c(b"evil"), Refusal::Outside(_)));
}

#[test]
fn commands_run_fail_and_time_out() {
    let (_t, d, _) = setup("run");
    let root = d.root().to_path_buf();
    let copy = root.join("c.kh");
    // Arguments, working directory.
    let ok = script(&root, "ok", "echo \"$1 $2 $(pwd)\" > args.txt");
    d.run_command(&ok, &copy, 1234).unwrap();
    let args = std::fs::read_to_string(root.join("args.txt")).unwrap();
    assert_eq!(
        args.trim(),
        format!("{} 1234 {}", copy.display(), root.display())
    );
    // A failure status, with the end of stderr.
    let bad = script(&root, "bad", "echo boom >&2; exit 3");
    match d.run_command(&bad, &copy, 1) {
        Err(Refusal::Failed { status, stderr }) => {
            assert!(status.contains('3'), "{status}");
            assert_eq!(stderr, "boom");
        }
        other => panic!("{other:?}"),
    }
    // Killed by a signal is a failure too.
    let killed = script(&root, "killed", "kill -9 $$");
    assert!(matches!(
        d.run_command(&killed, &copy, 1),
        Err(Refusal::Failed { .. })
    ));
    // Out of time: killed with what it started, without waiting for it.
    let d = d.with_timeout(Duration::from_millis(200));
    let slow = script(&root, "slow", "sleep 30; echo late > late.txt");
    let t = Instant::now();
    assert!(matches!(
        d.run_command(&slow, &copy, 1),
        Err(Refusal::TimedOut(_))
    ));
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(!root.join("late.txt").exists());
}

/// A server context with a backup directory and a log kept in memory.
fn shared_with(d: Option<BackupDir>) -> (Shared, Arc<Mutex<Vec<String>>>) {
    let mut sh = Shared::new(0, 1 << 20);
    sh.backup_dir = d;
    let lines = Arc::new(Mutex::new(Vec::new()));
    let l = lines.clone();
    sh.log = LogSink::new(move |_, m| l.lock().unwrap().push(m.to_string()));
    (sh, lines)
}

#[test]
fn copies_through_the_entry_points() {
    let (_t, d, outside) = setup("copy");
    let root = d.root().to_path_buf();
    let db = kura_engine::open("+").unwrap();
    db.put(b"k", b"v").unwrap();
    // Without a backup directory: refused, logged, nothing written.
    let (sh, log) = shared_with(None);
    let dest = outside.join("x.kh");
    assert!(!copy(&*db, &sh, dest.as_os_str().as_bytes(), "test copy"));
    assert!(!dest.exists());
    assert!(log.lock().unwrap()[0].contains("--backup-dir"));
    assert!(confined(&sh, b"x", "test restore").is_none());
    // With one.
    let (sh, log) = shared_with(Some(d));
    assert!(copy(&*db, &sh, b"snap.kb", "test copy"));
    let c = kura_engine::open(root.join("snap.kb").to_str().unwrap()).unwrap();
    assert_eq!(c.get(b"k").unwrap().unwrap().value, b"v");
    assert!(c.check().unwrap().healthy());
    c.close().unwrap();
    // Never over an existing destination, never outside.
    assert!(!copy(&*db, &sh, b"snap.kb", "test copy"));
    assert!(!copy(&*db, &sh, b"../outside/x.kb", "test copy"));
    assert!(!outside.join("x.kb").exists());
    let lines = log.lock().unwrap().clone();
    assert!(lines[0].contains("copied to"), "{lines:?}");
    assert!(lines[1].contains("already exists"), "{lines:?}");
    assert!(lines[2].contains("refused: a `..` component"), "{lines:?}");
    assert_eq!(
        confined(&sh, b"ulog", "test restore"),
        Some(root.join("ulog"))
    );
    assert!(confined(&sh, b"/etc/ulog", "test restore").is_none());
}

#[test]
fn commands_get_a_fresh_copy_and_a_time_stamp() {
    let (_t, d, _) = setup("command");
    let root = d.root().to_path_buf();
    script(&root, "save", "echo \"$1 $2\" > args.txt; test -d \"$1\"");
    script(&root, "fail", "exit 1");
    let db = kura_engine::open("*").unwrap();
    db.put(b"k", b"v").unwrap();
    let (sh, log) = shared_with(Some(d));
    let before = now_micros();
    assert!(copy(&*db, &sh, b"@save", "test copy"));
    let args = std::fs::read_to_string(root.join("args.txt")).unwrap();
    let (path, ts) = args.trim().split_once(' ').unwrap();
    let ts: u64 = ts.parse().unwrap();
    assert!(ts >= before && ts <= now_micros());
    // A memory hash's copy is a disk hash.
    assert_eq!(path, root.join(format!("save-{ts}.kh")).to_str().unwrap());
    // A child that another test thread forks holds the copy's LOCK (flock) from its fork to
    // its exec: wait that out.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let c = loop {
        match kura_engine::open(path) {
            Err(kura_engine::Error::Locked { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            r => break r.unwrap(),
        }
    };
    assert_eq!(c.get(b"k").unwrap().unwrap().value, b"v");
    c.close().unwrap();
    // The same through `run` (Kyoto Tycoon's command=); failures and bad names.
    assert!(run(&*db, &sh, b"save", "test sync"));
    assert!(!run(&*db, &sh, b"fail", "test sync"));
    assert!(!copy(&*db, &sh, b"@", "test copy"));
    assert!(!copy(&*db, &sh, b"@/bin/true", "test copy"));
    assert!(!copy(&*db, &sh, b"@../save", "test copy"));
    assert!(!run(&*db, &sh, b"missing", "test sync"));
    let lines = log.lock().unwrap().clone();
    assert!(lines[0].contains("succeeded"), "{lines:?}");
    assert!(lines[2].contains("failed: the command failed"), "{lines:?}");
    assert!(
        lines[4].contains("refused: a command is the plain name"),
        "{lines:?}"
    );
}

#[test]
fn copy_suffixes() {
    for (name, want) in [("*", ".kh"), ("+", ".kb")] {
        let db = kura_engine::open(name).unwrap();
        assert_eq!(copy_suffix(&*db), want, "{name}");
    }
}
