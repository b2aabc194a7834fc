//! Copies of the database asked for over the network: Tyrant's `copy` (a path, or `@NAME`)
//! and Kyoto Tycoon's `synchronize` with `command=NAME`. Every path that comes from the
//! network goes through [`BackupDir::resolve`], which confines it to the server's backup
//! directory (`kura serve --backup-dir DIR`); a server without one refuses them all. Tyrant's
//! `restore` path goes through it too ([`confined`]) before it is refused (no update log).
//!
//! The rule for a requested path (bytes):
//!
//! * not empty, no NUL byte, no `..` component;
//! * relative paths are taken from DIR; an absolute path is accepted only when it names a
//!   place in DIR too;
//! * its last component is a name (not `/` or `.`);
//! * the directory that holds it must exist; resolved with every symbolic link
//!   (`canonicalize`), it must be DIR or below DIR, and not inside the database being served;
//! * the destination itself is not a symbolic link, and for a copy it must not exist yet.
//!
//! `@NAME` and `command=NAME` name an executable in DIR: NAME is a plain file name (no `/`,
//! not `.` or `..`), and `DIR/NAME`, resolved, must be a regular file in DIR with an execute
//! bit. Kura first writes a hot copy of the database, `DIR/NAME-<unix µs><ext>` (the
//! extension of the database's kind; a memory kind's copy is written as the persistent kind of
//! the same order), then runs `DIR/NAME COPY µs` in DIR, without a shell, with stdin and
//! stdout on /dev/null, and waits at most [`COMMAND_TIMEOUT`]: after that the command and
//! every process of its group are killed. Only an exit status of 0 is a success. The copy is
//! left in DIR whatever the command does (it may move or remove it). Writers are never held
//! up: the copy is the kinds' hot consistent copy (`Store::copy_to`), not the live files.
//!
//! The worker thread that executes the request waits for the copy and the command; the other
//! connections of that worker wait with it.

use crate::context::Shared;
use kura_engine::registry::{Selector, KINDS};
use kura_engine::Store;
use std::ffi::OsStr;
use std::fmt;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a backup command may run before it is killed.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// Bytes of a failed command's stderr kept for the log.
const STDERR_TAIL: usize = 1024;

/// The server's backup directory.
#[derive(Debug)]
pub struct BackupDir {
    /// DIR, canonical.
    root: PathBuf,
    /// The database being served, canonical (none for the memory kinds).
    database: Option<PathBuf>,
    timeout: Duration,
    /// Held while a copy is written: two copies never race for one destination.
    busy: Mutex<()>,
}

/// Why a copy or a command was refused, or failed.
#[derive(Debug)]
pub enum Refusal {
    /// The server has no `--backup-dir`.
    NoBackupDir,
    Empty,
    Nul,
    /// A `..` component.
    ParentDir,
    /// The path ends in no name (`/`, `.`).
    NotAName,
    /// The directory that would hold it cannot be resolved (it does not exist).
    NoDirectory(String),
    /// It resolves outside the backup directory.
    Outside(PathBuf),
    /// It resolves inside the database being served.
    InDatabase(PathBuf),
    /// The destination is a symbolic link.
    Symlink(PathBuf),
    /// The destination exists.
    Exists(PathBuf),
    /// A command name that is not a plain file name.
    BadCommand,
    /// No such command in the backup directory.
    NoCommand(String),
    NotExecutable(PathBuf),
    /// Writing the copy failed.
    Copy(String),
    /// The command could not be started.
    Spawn(String),
    /// The command exited with a failure status; the end of its stderr.
    Failed {
        status: String,
        stderr: String,
    },
    /// The command ran out of time and was killed.
    TimedOut(Duration),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NoBackupDir => {
                f.write_str("the server has no --backup-dir, so it writes no copies")
            }
            Refusal::Empty => f.write_str("empty path"),
            Refusal::Nul => f.write_str("a NUL byte in the path"),
            Refusal::ParentDir => f.write_str("a `..` component"),
            Refusal::NotAName => f.write_str("the path ends in no file name"),
            Refusal::NoDirectory(e) => write!(f, "its directory cannot be resolved: {e}"),
            Refusal::Outside(p) => write!(f, "{} is outside the backup directory", p.display()),
            Refusal::InDatabase(p) => {
                write!(f, "{} is inside the database being served", p.display())
            }
            Refusal::Symlink(p) => write!(f, "{} is a symbolic link", p.display()),
            Refusal::Exists(p) => write!(f, "{} already exists", p.display()),
            Refusal::BadCommand => {
                f.write_str("a command is the plain name of a file in the backup directory")
            }
            Refusal::NoCommand(e) => write!(f, "no such command: {e}"),
            Refusal::NotExecutable(p) => write!(f, "{} is not an executable file", p.display()),
            Refusal::Copy(e) => write!(f, "the copy failed: {e}"),
            Refusal::Spawn(e) => write!(f, "the command could not be started: {e}"),
            Refusal::Failed { status, stderr } if stderr.is_empty() => {
                write!(f, "the command failed ({status})")
            }
            Refusal::Failed { status, stderr } => {
                write!(f, "the command failed ({status}): {stderr}")
            }
            Refusal::TimedOut(t) => {
                write!(
                    f,
                    "the command ran longer than {} s and was killed",
                    t.as_secs_f64()
                )
            }
        }
    }
}

impl Refusal {
    /// "refused" for a request the rule turns down, "failed" for a copy or command that went
    /// wrong.
    fn verb(&self) -> &'static str {
        match self {
            Refusal::Copy(_)
            | Refusal::Spawn(_)
            | Refusal::Failed { .. }
            | Refusal::TimedOut(_) => "failed",
            _ => "refused",
        }
    }
}

fn os(b: &[u8]) -> &OsStr {
    OsStr::from_bytes(b)
}

impl BackupDir {
    /// `dir` (which must be a directory) as the backup directory of a server of the database
    /// at `database` (none for the memory kinds). DIR must not lie inside the database.
    pub fn new(dir: &Path, database: Option<&Path>) -> Result<BackupDir, String> {
        let root = dir
            .canonicalize()
            .map_err(|e| format!("--backup-dir {}: {e}", dir.display()))?;
        if !root.is_dir() {
            return Err(format!("--backup-dir {}: not a directory", dir.display()));
        }
        let database = database.and_then(|p| p.canonicalize().ok());
        if let Some(db) = database.as_ref().filter(|db| root.starts_with(db)) {
            return Err(format!(
                "--backup-dir {} is inside the database {}",
                dir.display(),
                db.display()
            ));
        }
        Ok(BackupDir {
            root,
            database,
            timeout: COMMAND_TIMEOUT,
            busy: Mutex::new(()),
        })
    }

    /// The same with another time limit for commands.
    pub fn with_timeout(mut self, timeout: Duration) -> BackupDir {
        self.timeout = timeout;
        self
    }

    /// The backup directory, canonical.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The database being served, canonical (none for the memory kinds).
    pub fn database(&self) -> Option<&Path> {
        self.database.as_deref()
    }

    /// The place in the backup directory that a path from the network names, by the rule in
    /// the module's documentation. The place need not exist.
    pub fn resolve(&self, requested: &[u8]) -> Result<PathBuf, Refusal> {
        if requested.is_empty() {
            return Err(Refusal::Empty);
        }
        if requested.contains(&0) {
            return Err(Refusal::Nul);
        }
        let req = Path::new(os(requested));
        if req.components().any(|c| c == Component::ParentDir) {
            return Err(Refusal::ParentDir);
        }
        let Some(Component::Normal(name)) = req.components().next_back() else {
            return Err(Refusal::NotAName);
        };
        // An absolute path replaces the root here, and is judged by where it resolves.
        let full = self.root.join(req);
        let parent = full.parent().ok_or(Refusal::NotAName)?;
        let parent = parent
            .canonicalize()
            .map_err(|e| Refusal::NoDirectory(format!("{}: {e}", parent.display())))?;
        let dest = parent.join(name);
        if !parent.starts_with(&self.root) {
            return Err(Refusal::Outside(dest));
        }
        if self
            .database
            .as_ref()
            .is_some_and(|db| dest.starts_with(db))
        {
            return Err(Refusal::InDatabase(dest));
        }
        if std::fs::symlink_metadata(&dest).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(Refusal::Symlink(dest));
        }
        Ok(dest)
    }

    /// The executable a command name (`@NAME`, `command=NAME`) names in the backup directory.
    pub fn command(&self, name: &[u8]) -> Result<PathBuf, Refusal> {
        if name.is_empty() {
            return Err(Refusal::Empty);
        }
        if name.contains(&0) {
            return Err(Refusal::Nul);
        }
        if name.contains(&b'/') || name == b"." || name == b".." {
            return Err(Refusal::BadCommand);
        }
        let path = self.root.join(os(name));
        let real = path
            .canonicalize()
            .map_err(|e| Refusal::NoCommand(format!("{}: {e}", path.display())))?;
        if !real.starts_with(&self.root) {
            return Err(Refusal::Outside(real));
        }
        match std::fs::metadata(&real) {
            Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Ok(real),
            _ => Err(Refusal::NotExecutable(real)),
        }
    }

    /// Write a hot copy of `store` to `dest` (from [`BackupDir::resolve`]), which must not
    /// exist; a failed copy leaves nothing behind.
    pub fn copy(&self, store: &dyn Store, dest: &Path) -> Result<(), Refusal> {
        let _one = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        if std::fs::symlink_metadata(dest).is_ok() {
            return Err(Refusal::Exists(dest.to_path_buf()));
        }
        store.copy_to(dest).map_err(|e| {
            let _ = match std::fs::symlink_metadata(dest) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(dest),
                Ok(_) => std::fs::remove_file(dest),
                Err(_) => Ok(()),
            };
            Refusal::Copy(e.to_string())
        })
    }

    /// Run `cmd COPY TS` in the backup directory and wait for it, at most the time limit.
    pub fn run_command(&self, cmd: &Path, copy: &Path, ts_us: u64) -> Result<(), Refusal> {
        let mut c = Command::new(cmd);
        c.arg(copy)
            .arg(ts_us.to_string())
            .current_dir(&self.root)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = spawn(&mut c)?;
        // The end of stderr, read beside the wait so that a talkative command never blocks.
        let (tx, rx) = mpsc::channel();
        if let Some(mut err) = child.stderr.take() {
            std::thread::spawn(move || {
                let mut tail = Vec::new();
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = err.read(&mut buf) {
                    tail.extend_from_slice(&buf[..n]);
                    if tail.len() > STDERR_TAIL {
                        tail.drain(..tail.len() - STDERR_TAIL);
                    }
                }
                let _ = tx.send(tail);
            });
        }
        let deadline = Instant::now() + self.timeout;
        let mut pause = Duration::from_millis(1);
        let waited = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) if Instant::now() >= deadline => {
                    break Err(Refusal::TimedOut(self.timeout))
                }
                Ok(None) => {
                    std::thread::sleep(
                        pause.min(deadline.saturating_duration_since(Instant::now())),
                    );
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Err(e) => break Err(Refusal::Spawn(e.to_string())),
            }
        };
        let status = match waited {
            Ok(status) => status,
            Err(r) => {
                // The command and whatever it started (its own process group), before it is
                // reaped, so that the group id is still its own.
                if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                    // SAFETY: a signal to the process group of a child we started.
                    unsafe { libc::kill(-pid, libc::SIGKILL) };
                }
                let _ = child.kill();
                let _ = child.wait();
                return Err(r);
            }
        };
        if status.success() {
            return Ok(());
        }
        let tail = rx.recv_timeout(Duration::from_secs(1)).unwrap_or_default();
        Err(Refusal::Failed {
            status: status.to_string(),
            stderr: String::from_utf8_lossy(&tail).trim().to_string(),
        })
    }
}

/// Start `c`; an executable written a moment ago may still be open for writing in a process
/// forked meanwhile (ETXTBSY): tried again for a while.
fn spawn(c: &mut Command) -> Result<Child, Refusal> {
    let mut tries = 0;
    loop {
        match c.spawn() {
            Ok(child) => return Ok(child),
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(Refusal::Spawn(e.to_string())),
        }
    }
}

/// The extension a copy of `store` is named with: its kind's (`.kh`), or for a memory kind
/// that of the first persistent kind of the same order, which its copy is written as.
pub fn copy_suffix(store: &dyn Store) -> &'static str {
    let suffix = |s: Selector| match s {
        Selector::Suffix(x) => Some(x),
        Selector::Exactly(_) => None,
    };
    let info = store.kind().info();
    suffix(info.selector)
        .or_else(|| {
            KINDS
                .iter()
                .filter(|k| k.caps.persistent && k.caps.ordered == info.caps.ordered)
                .find_map(|k| suffix(k.selector))
        })
        .unwrap_or("")
}

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A path from the network for the log: lossy UTF-8, control bytes escaped.
fn show(b: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(b))
}

fn dir(shared: &Shared) -> Result<&BackupDir, Refusal> {
    shared.backup_dir.as_ref().ok_or(Refusal::NoBackupDir)
}

/// Where a path from the network (Tyrant's `restore`, …) is confined to, or `None` when it
/// is refused (and logged as `what`).
pub fn confined(shared: &Shared, requested: &[u8], what: &str) -> Option<PathBuf> {
    match dir(shared).and_then(|d| d.resolve(requested)) {
        Ok(p) => Some(p),
        Err(r) => {
            shared
                .log
                .line(&format!("{what} {}: {}: {r}", show(requested), r.verb()));
            None
        }
    }
}

/// Tyrant's `copy`: `@NAME` as [`run`], else a hot copy to the confined path. Logged as
/// `what`; true on success.
pub fn copy(store: &dyn Store, shared: &Shared, requested: &[u8], what: &str) -> bool {
    copy_why(store, shared, requested, what).is_ok()
}

/// [`copy`], with why it was refused or failed (`refused: …`, `failed: …`, as logged): what a
/// client is told when it asks (Tyrant's `misc error`).
pub fn copy_why(
    store: &dyn Store,
    shared: &Shared,
    requested: &[u8],
    what: &str,
) -> Result<(), String> {
    if let Some(name) = requested.strip_prefix(b"@") {
        return run_why(store, shared, name, what);
    }
    let done = dir(shared).and_then(|d| {
        let dest = d.resolve(requested)?;
        d.copy(store, &dest)?;
        Ok(dest)
    });
    match done {
        Ok(dest) => {
            shared
                .log
                .line(&format!("{what}: database copied to {}", dest.display()));
            Ok(())
        }
        Err(r) => {
            shared
                .log
                .line(&format!("{what} {}: {}: {r}", show(requested), r.verb()));
            Err(format!("{}: {r}", r.verb()))
        }
    }
}

/// A backup command (`@NAME`, `command=NAME`): a hot copy `DIR/NAME-<µs><ext>`, then
/// `DIR/NAME COPY µs`. Logged as `what`; true when the command exited with status 0.
pub fn run(store: &dyn Store, shared: &Shared, name: &[u8], what: &str) -> bool {
    run_why(store, shared, name, what).is_ok()
}

/// [`run`], with why it was refused or failed (as [`copy_why`]).
pub fn run_why(store: &dyn Store, shared: &Shared, name: &[u8], what: &str) -> Result<(), String> {
    let done = dir(shared).and_then(|d| {
        let cmd = d.command(name)?;
        let ts = now_micros();
        let mut file = name.to_vec();
        file.extend_from_slice(format!("-{ts}{}", copy_suffix(store)).as_bytes());
        let dest = d.resolve(&file)?;
        d.copy(store, &dest)?;
        d.run_command(&cmd, &dest, ts)?;
        Ok((cmd, dest, ts))
    });
    match done {
        Ok((cmd, dest, ts)) => {
            shared.log.line(&format!(
                "{what}: database copied to {}, {} {} {ts} succeeded",
                dest.display(),
                cmd.display(),
                dest.display()
            ));
            Ok(())
        }
        Err(r) => {
            shared
                .log
                .warn(&format!("{what} command {}: {}: {r}", show(name), r.verb()));
            Err(format!("{}: {r}", r.verb()))
        }
    }
}

#[cfg(test)]
mod tests;
