//! `kura serve --daemon --pid FILE --log FILE`: the command returns at once, the detached
//! server writes its pid and its log, reopens the log on SIGHUP (log rotation) and, on
//! SIGTERM, syncs, closes the database and removes the pid file (its own only); a pid file of
//! a running server refuses the start; where a database may be created.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Poll `f` every 20 ms for up to 20 s; panic with `what` when it never holds.
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

fn roundtrip(addr: &str, send: &[u8], expect: &str) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(send).unwrap();
    let mut got = vec![0u8; expect.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), expect);
}

fn signal(pid: i32, sig: libc::c_int) {
    // SAFETY: kill(2) with a pid this test started (through the daemon's fork).
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill {pid}");
}

/// Kills the daemon if the test fails half-way.
struct Reaper(i32);

impl Drop for Reaper {
    fn drop(&mut self) {
        if self.0 > 0 {
            // SAFETY: as in `signal`.
            unsafe { libc::kill(self.0, libc::SIGKILL) };
        }
    }
}

#[test]
fn daemon_writes_pid_and_log_reopens_the_log_on_sighup_and_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let (pid_file, log_file) = (dir.path().join("k.pid"), dir.path().join("k.log"));
    let started = Instant::now();
    let status = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["serve", "d.kh", "--port", "0", "--threads", "2", "--daemon"])
        .args(["--pid", "k.pid", "--log", "k.log"])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{status}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "--daemon returns at once"
    );

    // The pid file appears once the database is open and the port listens.
    let pid: i32 = wait_for("the pid file", || read(&pid_file).trim().parse().ok());
    let mut reaper = Reaper(pid);
    assert_ne!(pid as u32, std::process::id());
    let addr = wait_for("the listening line in the log", || {
        let log = read(&log_file);
        let rest = log.split("listening on ").nth(1)?;
        Some(rest.split_whitespace().next()?.to_string())
    });
    roundtrip(&addr, b"set k 5 0 2\r\nhi\r\n", "STORED\r\n");

    // Log rotation: the file is moved away, SIGHUP makes the server open a new one.
    let rotated = dir.path().join("k.log.1");
    std::fs::rename(&log_file, &rotated).unwrap();
    signal(pid, libc::SIGHUP);
    wait_for("a new log file after SIGHUP", || {
        read(&log_file).contains("log reopened").then_some(())
    });
    assert!(
        read(&rotated).contains("listening on"),
        "the old log is kept"
    );
    roundtrip(&addr, b"get k\r\n", "VALUE k 5 2\r\nhi\r\nEND\r\n");

    // SIGTERM: synced, closed, pid file removed; the record is there for the next open.
    signal(pid, libc::SIGTERM);
    wait_for("the pid file removed", || {
        (!pid_file.exists()).then_some(())
    });
    reaper.0 = 0;
    assert!(
        read(&log_file).contains("stopped; database synced and closed"),
        "{}",
        read(&log_file)
    );
    let out = wait_for("the database lock released", || {
        let o = Command::new(env!("CARGO_BIN_EXE_kura"))
            .args(["db", "get", "d.kh", "k"])
            .current_dir(dir.path())
            .output()
            .unwrap();
        o.status.success().then_some(o)
    });
    assert_eq!(out.stdout, b"hi");
}

/// `--daemon` returns only once the server is ready, so it fails as `kura serve` does: a
/// database that cannot be opened, or a port already taken, is an exit status of 2 with the
/// reason on stderr, and no server is left behind.
#[test]
fn daemon_that_cannot_start_fails_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_kura"))
            .arg("serve")
            .args(args)
            .arg("--daemon")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let bad_db = daemon(&["/proc/no/such/x.kh", "--port", "0"]);
    assert_eq!(bad_db.status.code(), Some(2), "{bad_db:?}");
    let err = String::from_utf8_lossy(&bad_db.stderr);
    // Said once (it was `cannot open X: cannot create X: …`).
    assert!(
        err.contains("cannot create /proc/no/such/x.kh: directory /proc/no/such does not exist"),
        "{err}"
    );
    assert_eq!(err.matches("/proc/no/such/x.kh").count(), 1, "{err}");

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let busy = daemon(&["b.kh", "--port", &port, "--pid", "b.pid"]);
    assert_eq!(busy.status.code(), Some(2), "{busy:?}");
    let err = String::from_utf8_lossy(&busy.stderr);
    assert!(
        err.contains(&format!("cannot listen on 127.0.0.1:{port}")),
        "{err}"
    );
    assert!(!dir.path().join("b.pid").exists());
    // The failed daemon closed the database: it opens at once.
    let out = Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(["db", "inform", "b.kh"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// Run `kura serve ARGS… --daemon` in `dir`; returns its output once it reports.
fn daemon_in(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kura"))
        .arg("serve")
        .args(args)
        .arg("--daemon")
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Regression: `--pid FILE` overwrote the pid file of a server that was still running, then
/// deleted it on exit, leaving the live server without one. A pid file naming a running
/// process refuses the start; a stale one is replaced; a server removes its pid file at exit
/// only while it holds its own id.
#[test]
fn a_pid_file_of_a_running_server_is_never_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pid_file = d.join("k.pid");
    let first = daemon_in(
        d,
        &["a.kh", "--port", "0", "--pid", "k.pid", "--log", "a.log"],
    );
    assert!(first.status.success(), "{first:?}");
    let pid: i32 = wait_for("the pid file", || read(&pid_file).trim().parse().ok());
    let mut reaper = Reaper(pid);

    let second = daemon_in(d, &["b.kh", "--port", "0", "--pid", "k.pid"]);
    assert_eq!(second.status.code(), Some(2), "{second:?}");
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains(&format!("names process {pid}, which is running")),
        "{err}"
    );
    assert_eq!(read(&pid_file).trim(), pid.to_string(), "the file is kept");
    assert!(
        !d.join("b.kh").exists(),
        "the refused server opened nothing"
    );

    // Another process writes the file meanwhile (a second server with the same --pid started
    // after a crash, say): at exit the first server leaves it alone.
    std::fs::write(&pid_file, format!("{}\n", std::process::id())).unwrap();
    signal(pid, libc::SIGTERM);
    wait_for("the server stopped", || {
        read(&d.join("a.log")).contains("stopped;").then_some(())
    });
    reaper.0 = 0;
    assert_eq!(read(&pid_file).trim(), std::process::id().to_string());

    // A stale pid file (a process that is gone) is replaced, and removed at exit.
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    std::fs::write(&pid_file, format!("{gone_pid}\n")).unwrap();
    let third = daemon_in(d, &["a.kh", "--port", "0", "--pid", "k.pid"]);
    assert!(third.status.success(), "{third:?}");
    let pid3: i32 = wait_for("the new pid", || {
        read(&pid_file)
            .trim()
            .parse()
            .ok()
            .filter(|&p: &i32| p as u32 != gone_pid)
    });
    let mut reaper = Reaper(pid3);
    signal(pid3, libc::SIGTERM);
    wait_for("the pid file removed", || {
        (!pid_file.exists()).then_some(())
    });
    reaper.0 = 0;
}

/// Regression: `kura serve /nonexistent/dir/x.kh` created the whole directory tree and served
/// an empty database. A missing directory is an error; a new database is said so in the log;
/// a directory that is not a database is refused.
#[test]
fn serve_creates_a_database_only_where_it_should_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = daemon_in(d, &["no/such/dir/x.kh", "--port", "0"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("directory no/such/dir does not exist"),
        "{err}"
    );
    assert!(!d.join("no").exists());

    std::fs::create_dir(d.join("other.kh")).unwrap();
    std::fs::write(d.join("other.kh/photo.jpg"), b"x").unwrap();
    let o = daemon_in(d, &["other.kh", "--port", "0"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a Kura database"));

    for (round, says) in [(0, true), (1, false)] {
        let log = d.join(format!("s{round}.log"));
        let pid_file = d.join(format!("s{round}.pid"));
        let o = daemon_in(
            d,
            &[
                "casket.kh",
                "--port",
                "0",
                "--log",
                log.to_str().unwrap(),
                "--pid",
                pid_file.to_str().unwrap(),
            ],
        );
        assert!(o.status.success(), "{o:?}");
        let pid: i32 = wait_for("the pid file", || read(&pid_file).trim().parse().ok());
        let mut reaper = Reaper(pid);
        let text = wait_for("listening", || {
            let t = read(&log);
            t.contains("listening on").then_some(t)
        });
        assert_eq!(
            text.contains("created new database casket.kh"),
            says,
            "round {round}: {text}"
        );
        signal(pid, libc::SIGTERM);
        wait_for("the pid file removed", || {
            (!pid_file.exists()).then_some(())
        });
        reaper.0 = 0;
    }
}

/// `--daemon` without `--log` logs to the local syslog socket when one answers there (here a
/// socket of the test's, named by KURA_TEST_SYSLOG_SOCKET in place of /dev/log), and says so
/// before detaching; with none, to the file beside the database.
#[test]
fn a_daemon_without_log_goes_to_syslog_when_a_socket_answers() {
    use std::os::unix::net::UnixDatagram;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sock = d.join("log.sock");
    let rx = UnixDatagram::bind(&sock).unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let daemon = |socket: &Path| {
        Command::new(env!("CARGO_BIN_EXE_kura"))
            .args(["serve", "d.kh", "--port", "0", "--daemon", "--pid", "d.pid"])
            .env("KURA_TEST_SYSLOG_SOCKET", socket)
            .current_dir(d)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let o = daemon(&sock);
    assert!(o.status.success(), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("the log goes to syslog ({})", sock.display())),
        "{err}"
    );
    let pid: i32 = wait_for("the pid file", || {
        read(&d.join("d.pid")).trim().parse().ok()
    });
    let mut reaper = Reaper(pid);
    let mut buf = [0u8; 4096];
    let mut recv = |until: &str| loop {
        let n = rx.recv(&mut buf).expect("a syslog datagram");
        let line = String::from_utf8_lossy(&buf[..n]).into_owned();
        if line.contains(until) {
            return line;
        }
    };
    let listening = recv("listening on");
    // <30>: facility daemon (3) × 8 + severity info (6).
    assert!(
        listening.starts_with("<30>") && listening.contains(&format!(" kura[{pid}]: ")),
        "{listening}"
    );
    signal(pid, libc::SIGTERM);
    recv("stopped; database synced and closed");
    wait_for("the pid file removed", || {
        (!d.join("d.pid").exists()).then_some(())
    });
    reaper.0 = 0;
    assert!(!d.join("d.kh.log").exists(), "no file beside the database");

    // No socket answers: the file beside the database, as the command says.
    drop(rx);
    let o = daemon(&sock);
    assert!(o.status.success(), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("the log goes to") && err.contains("d.kh.log"),
        "{err}"
    );
    let pid: i32 = wait_for("the pid file", || {
        read(&d.join("d.pid")).trim().parse().ok()
    });
    let mut reaper = Reaper(pid);
    wait_for("the log file", || {
        read(&d.join("d.kh.log"))
            .contains("listening on")
            .then_some(())
    });
    signal(pid, libc::SIGTERM);
    wait_for("the pid file removed", || {
        (!d.join("d.pid").exists()).then_some(())
    });
    reaper.0 = 0;
}
