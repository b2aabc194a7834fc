//! SIGHUP with `--config FILE` through the real binary: the file is read again under the
//! command line, the log level and the command mask change without a restart (a masked
//! command is refused at once, lines below the new level are left out), the other keys that
//! changed are named as waiting for a restart, and a file that no longer reads keeps the
//! settings in force.

mod common;
use common::*;
use std::path::Path;

/// SIGHUP, then wait until the log holds `want` one time more than before.
#[track_caller]
fn hup_until(k: &mut Kura, log: &Path, want: &str) -> String {
    let read = || std::fs::read_to_string(log).unwrap_or_default();
    let before = read().matches(want).count();
    k.signal(libc::SIGHUP);
    let mut text = String::new();
    let seen = eventually(20, || {
        text = read();
        text.matches(want).count() > before
    });
    assert!(seen, "no {want:?} after SIGHUP:\n{text}");
    text
}

#[test]
fn sighup_applies_the_files_log_level_and_mask_and_keeps_them_when_the_file_is_bad() {
    let dir = tempfile::tempdir().unwrap();
    let (conf, log) = (dir.path().join("kura.toml"), dir.path().join("k.log"));
    let base = "name = \"r.kh\"\nlog = \"k.log\"\n";
    std::fs::write(&conf, format!("{base}threads = 1\nmask = [\"vanish\"]\n")).unwrap();
    let (mut k, addr) = start_logged(dir.path(), &["--config", "kura.toml", "--port", "0"], &log);
    let mut tt = Tt::new(&addr);
    assert_eq!(tt.put(b"k", b"v"), 0);
    assert_eq!(tt.out(b"k"), 0, "out is allowed at start");
    assert_eq!(tt.put(b"k", b"v"), 0);

    // The mask moves from vanish to out, the level to warn; threads needs a restart.
    std::fs::write(
        &conf,
        format!("{base}threads = 2\nmask = [\"out\"]\nlog-level = \"warn\"\n"),
    )
    .unwrap();
    let text = hup_until(&mut k, &log, "mask: +out -vanish");
    assert!(text.contains("INFO kura["), "{text}");
    assert!(text.contains("log level info → warn"), "{text}");
    assert!(
        text.contains("changed but in force only after a restart: threads\n"),
        "{text}"
    );
    assert_ne!(tt.out(b"k"), 0, "out is refused on the open connection");
    assert_ne!(Tt::new(&addr).out(b"k"), 0, "and on a new one");
    tt.vanish();

    // A file that no longer reads: nothing changes, the log says why.
    std::fs::write(&conf, "port = \n").unwrap();
    let text = hup_until(&mut k, &log, "not reloaded, the settings in force stay");
    assert!(text.contains("not a TOML file"), "{text}");
    assert_eq!(tt.put(b"k", b"v"), 0);
    assert_ne!(tt.out(b"k"), 0, "out stays refused");
    // At warn, the info line of the second SIGHUP (`log reopened`) is left out.
    assert_eq!(text.matches("log reopened").count(), 1, "{text}");
    std::fs::write(&conf, format!("{base}threads = 1\nmask = [\"allmask\"]\n")).unwrap();
    let text = hup_until(&mut k, &log, "not reloaded, the settings in force stay");
    assert!(text.contains("allmask"), "{text}");
    assert_ne!(tt.out(b"k"), 0, "out stays refused");

    // Back to info and no mask.
    std::fs::write(&conf, format!("{base}threads = 1\n")).unwrap();
    let text = hup_until(&mut k, &log, "log level warn → info");
    assert!(text.contains("mask: -out"), "{text}");
    assert_eq!(tt.out(b"k"), 0, "out is allowed again");
    drop(tt);
    k.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("stopped; database synced"), "{text}");
}

#[test]
fn sighup_keeps_what_the_command_line_set() {
    let dir = tempfile::tempdir().unwrap();
    let (conf, log) = (dir.path().join("kura.toml"), dir.path().join("k.log"));
    std::fs::write(&conf, "name = \"*\"\nthreads = 1\nmask = [\"out\"]\n").unwrap();
    let (mut k, addr) = start_logged(
        dir.path(),
        &[
            "--config",
            "kura.toml",
            "--port",
            "0",
            "--log",
            "k.log",
            "--mask",
            "vanish",
        ],
        &log,
    );
    let mut tt = Tt::new(&addr);
    assert_eq!(tt.put(b"k", b"v"), 0);
    assert_eq!(
        tt.out(b"k"),
        0,
        "the command line's mask wins over the file's"
    );
    std::fs::write(&conf, "name = \"*\"\nthreads = 1\nmask = [\"put\"]\n").unwrap();
    hup_until(&mut k, &log, "read again: nothing to change");
    assert_eq!(tt.put(b"k", b"v"), 0, "put stays allowed");
    drop(tt);
    k.stop();
}
