//! The database lock (`LOCK`): an OS lock taken by every open of an on-disk database (it dies
//! with its process, so a crash never leaves a stale lock), plus the holder's process id
//! written into the file, so that an open that finds the lock taken can name the holder.
//!
//! The id is only a note for that message: the lock itself is the OS lock, never the file's
//! contents, and the file is not synced. A read-only open takes the lock too and writes its id
//! (the lock file is the one file such an open writes; it holds no data).

use crate::error::{Error, Result};
use crate::io::Vfs;
use std::any::Any;
use std::path::Path;

/// The lock file's name in the database directory.
pub const LOCK_NAME: &str = "LOCK";

/// The guard of a taken lock: dropping it releases the lock.
pub type Guard = Box<dyn Any + Send + Sync>;

/// The most bytes of the lock file read for its holder's id.
const HOLDER_MAX: usize = 32;

/// Take the lock of the database at `dir`, then write this process's id into it. When another
/// holder has it: [`Error::Locked`] naming that holder's id and command when they can be told.
pub fn take(vfs: &dyn Vfs, dir: &Path) -> Result<Guard> {
    let path = dir.join(LOCK_NAME);
    let guard = match vfs.lock(&path) {
        Ok(g) => g,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            let pid = holder(vfs, &path);
            return Err(Error::Locked {
                path: dir.to_path_buf(),
                pid,
                command: pid.and_then(command_of),
            });
        }
        Err(e) => return Err(Error::Io(e)),
    };
    // A note for the message of the next open, not a part of the lock: a failure to write it
    // (a read-only directory) does not fail the open.
    if let Ok(f) = vfs.open(&path, true) {
        let mut id = format!("{}\n", std::process::id()).into_bytes();
        // Over the last holder's id, without truncating the file first: a truncation frees the
        // file's block and the write allocates it again, about 0.2 ms on ext4, the costliest
        // step of opening a small database. A shorter id is padded with spaces (`holder`
        // trims them).
        let _ = match f.len() {
            Ok(old) if old <= HOLDER_MAX as u64 => {
                id.resize(id.len().max(old as usize), b' ');
                f.write_at(&id, 0)
            }
            _ => f.set_len(0).and_then(|()| f.write_at(&id, 0)),
        };
    }
    Ok(guard)
}

/// The process id written in the lock file at `path`, if it names a live process.
fn holder(vfs: &dyn Vfs, path: &Path) -> Option<u32> {
    let f = vfs.open(path, false).ok()?;
    let len = f.len().ok()?.min(HOLDER_MAX as u64) as usize;
    let mut buf = vec![0u8; len];
    f.read_at(&mut buf, 0).ok()?;
    let pid: u32 = std::str::from_utf8(&buf).ok()?.trim().parse().ok()?;
    alive(pid).then_some(pid)
}

/// Whether a process with this id exists (it may belong to another user).
fn alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if p <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks whether the process exists; nothing is sent.
    let rc = unsafe { libc::kill(p, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The command line of process `pid` (Linux `/proc`), shortened, for messages.
fn command_of(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let words: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    let mut s = words.join(" ");
    if s.is_empty() {
        return None;
    }
    if s.chars().count() > 80 {
        s = s.chars().take(77).collect::<String>() + "...";
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{OsVfs, SimVfs};

    #[test]
    fn the_holder_is_named_by_its_pid_and_command() {
        let tmp = tempfile::tempdir().unwrap();
        let g = take(&OsVfs, tmp.path()).unwrap();
        let written = std::fs::read_to_string(tmp.path().join(LOCK_NAME)).unwrap();
        assert_eq!(written.trim(), std::process::id().to_string());
        match take(&OsVfs, tmp.path()) {
            Err(e @ Error::Locked { .. }) => {
                let Error::Locked { pid, command, .. } = &e else {
                    unreachable!()
                };
                assert_eq!(*pid, Some(std::process::id()));
                assert!(command.is_some());
                let msg = e.to_string();
                assert!(
                    msg.contains(&format!("pid {}", std::process::id())),
                    "{msg}"
                );
                assert!(msg.contains("kura remote"), "{msg}");
            }
            other => panic!("expected Locked, got {:?}", other.err()),
        }
        drop(g);
        drop(take(&OsVfs, tmp.path()).unwrap());
    }

    /// The id goes over the last holder's without a truncation first: a shorter id is padded
    /// and still names the holder; a file longer than an id can be is cut to it.
    #[test]
    fn a_shorter_id_over_a_longer_one_still_names_the_holder() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(LOCK_NAME);
        let me = std::process::id().to_string();
        std::fs::write(&path, "1234567890123456789\n").unwrap();
        let g = take(&OsVfs, tmp.path()).unwrap();
        let written = std::fs::read_to_string(&path).unwrap();
        assert_eq!(written.trim(), me);
        assert_eq!(written.len(), 20, "padded over the old id, not truncated");
        match take(&OsVfs, tmp.path()) {
            Err(Error::Locked { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("expected Locked, got {:?}", other.err()),
        }
        drop(g);
        std::fs::write(&path, "x".repeat(100)).unwrap();
        drop(take(&OsVfs, tmp.path()).unwrap());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("{me}\n"));
    }

    #[test]
    fn a_stale_or_junk_pid_is_not_named() {
        let fs = SimVfs::new();
        let dir = Path::new("/sim/x.kh");
        let _g = take(&fs, dir).unwrap();
        for junk in [&b"no pid here"[..], b"", b"4294967295\n", b"0\n"] {
            let f = fs.open(&dir.join(LOCK_NAME), false).unwrap();
            f.set_len(0).unwrap();
            f.write_at(junk, 0).unwrap();
            match take(&fs, dir) {
                Err(Error::Locked { pid: None, .. }) => {}
                other => panic!("{junk:?}: {:?}", other.err()),
            }
        }
    }
}
