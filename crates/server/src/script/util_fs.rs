//! Tyrant's file-system built-ins (`_stat _glob _remove _mkdir`), confined to the server's
//! `--backup-dir`: every path goes through [`BackupDir::resolve`] (relative paths are taken
//! from the backup directory, `..` and symbolic links that lead out are refused); a server
//! without `--backup-dir` refuses them all. An ordinary failure (no such file, a directory
//! that is not empty for `mkdir`'s parent, …) is the original's answer (nil, false); a refusal
//! is an error that says why.

use crate::backup::{BackupDir, Refusal};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Why a file-system built-in refused a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsError(pub String);

impl fmt::Display for FsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "refused: {}", self.0)
    }
}

impl From<Refusal> for FsError {
    fn from(r: Refusal) -> FsError {
        FsError(r.to_string())
    }
}

fn dir(bd: Option<&BackupDir>) -> Result<&BackupDir, FsError> {
    bd.ok_or_else(|| {
        FsError("the server has no --backup-dir, so scripts reach no files".to_string())
    })
}

/// Whether a path names the backup directory itself (``, `.`, `./`, or its own absolute path).
fn is_root(bd: &BackupDir, path: &[u8]) -> bool {
    let p = Path::new(std::ffi::OsStr::from_bytes(path));
    let rel = p.strip_prefix(bd.root()).unwrap_or(p);
    rel.components()
        .all(|c| matches!(c, std::path::Component::CurDir))
}

/// The place a path names, `None` when its directory does not exist (the original would find
/// nothing there either).
fn place(bd: &BackupDir, path: &[u8]) -> Result<Option<PathBuf>, FsError> {
    match bd.resolve(path) {
        Ok(p) => Ok(Some(p)),
        Err(Refusal::NoDirectory(_)) => Ok(None),
        Err(r) => Err(r.into()),
    }
}

/// What `_stat` reports of a path (its `lstat` and the caller's access to it).
#[derive(Debug, Clone, PartialEq)]
pub struct Stat {
    pub dev: u64,
    pub ino: u64,
    pub mode: u32,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u64,
    pub size: u64,
    pub blksize: u64,
    pub blocks: u64,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    pub regular: bool,
    pub directory: bool,
    pub readable: bool,
    pub writable: bool,
    pub executable: bool,
    pub realpath: Option<Vec<u8>>,
}

/// `_stat(path)`: `None` when nothing is there.
pub fn stat(bd: Option<&BackupDir>, path: &[u8]) -> Result<Option<Stat>, FsError> {
    let bd = dir(bd)?;
    let p = if is_root(bd, path) {
        bd.root().to_path_buf()
    } else {
        match place(bd, path)? {
            Some(p) => p,
            None => return Ok(None),
        }
    };
    let Ok(m) = std::fs::symlink_metadata(&p) else {
        return Ok(None);
    };
    // SAFETY: geteuid and getegid only read the process's ids.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let mode = m.mode();
    let bits = |shift: u32| -> u32 {
        let mut b = mode & 0o7;
        if m.uid() == euid {
            b |= (mode >> 6) & 0o7;
        }
        if m.gid() == egid {
            b |= (mode >> 3) & 0o7;
        }
        (b >> shift) & 1
    };
    Ok(Some(Stat {
        dev: m.dev(),
        ino: m.ino(),
        mode,
        nlink: m.nlink(),
        uid: m.uid(),
        gid: m.gid(),
        rdev: m.rdev(),
        size: m.size(),
        blksize: m.blksize(),
        blocks: m.blocks(),
        atime: m.atime(),
        mtime: m.mtime(),
        ctime: m.ctime(),
        regular: m.file_type().is_file(),
        directory: m.file_type().is_dir(),
        readable: bits(2) == 1,
        writable: bits(1) == 1,
        executable: bits(0) == 1,
        realpath: p
            .canonicalize()
            .ok()
            .map(|r| r.as_os_str().as_bytes().to_vec()),
    }))
}

/// `_remove(path)`: remove a file, a symbolic link (not what it points to) or a directory with
/// everything in it. False when there is nothing to remove or it cannot be removed. The backup
/// directory itself, and a directory holding the database being served, are refused.
pub fn remove(bd: Option<&BackupDir>, path: &[u8]) -> Result<bool, FsError> {
    let bd = dir(bd)?;
    if is_root(bd, path) {
        return Err(FsError("the backup directory itself".to_string()));
    }
    let p = match bd.resolve(path) {
        Ok(p) => p,
        Err(Refusal::NoDirectory(_)) => return Ok(false),
        // A link is removed, never followed: the link itself lies in the backup directory.
        Err(Refusal::Symlink(p)) => return Ok(std::fs::remove_file(p).is_ok()),
        Err(r) => return Err(r.into()),
    };
    if bd.database().is_some_and(|db| db.starts_with(&p)) {
        return Err(FsError(format!(
            "{} holds the database being served",
            p.display()
        )));
    }
    let Ok(m) = std::fs::symlink_metadata(&p) else {
        return Ok(false);
    };
    Ok(if m.is_dir() {
        std::fs::remove_dir_all(&p).is_ok()
    } else {
        std::fs::remove_file(&p).is_ok()
    })
}

/// `_mkdir(path)`: make a directory (mode 0755); false when it cannot be made (it exists, its
/// parent does not).
pub fn make_dir(bd: Option<&BackupDir>, path: &[u8]) -> Result<bool, FsError> {
    let bd = dir(bd)?;
    let Some(p) = place(bd, path)? else {
        return Ok(false);
    };
    Ok(std::fs::DirBuilder::new().mode(0o755).create(p).is_ok())
}

/// The most paths `_glob` returns.
pub const GLOB_LIMIT: usize = 100_000;

/// `_glob(pattern)`: the paths in the backup directory that match a shell pattern (`*`, `?`,
/// `[...]` within one component; names beginning with `.` only match a pattern that does),
/// sorted, written as the pattern was (relative to the backup directory, or absolute).
/// Directories reached through symbolic links that lead out are not searched.
pub fn glob(bd: Option<&BackupDir>, pattern: &[u8]) -> Result<Vec<Vec<u8>>, FsError> {
    let bd = dir(bd)?;
    if pattern.contains(&0) {
        return Err(Refusal::Nul.into());
    }
    let root = bd.root();
    let root_bytes = root.as_os_str().as_bytes();
    let (prefix, rel): (Vec<u8>, &[u8]) = if pattern.starts_with(b"/") {
        match pattern.strip_prefix(root_bytes) {
            Some(rest) if rest.is_empty() || rest.starts_with(b"/") => {
                (root_bytes.to_vec(), rest.strip_prefix(b"/").unwrap_or(rest))
            }
            _ => {
                return Err(FsError(format!(
                    "{} is outside the backup directory",
                    String::from_utf8_lossy(pattern)
                )))
            }
        }
    } else {
        (Vec::new(), pattern)
    };
    let parts: Vec<&[u8]> = rel
        .split(|&c| c == b'/')
        .filter(|p| !p.is_empty() && *p != b".")
        .collect();
    if parts.contains(&&b".."[..]) {
        return Err(Refusal::ParentDir.into());
    }
    // (the path as written, the place on disk)
    let mut found: Vec<(Vec<u8>, PathBuf)> = vec![(prefix, root.to_path_buf())];
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let mut next = Vec::new();
        for (shown, real) in &found {
            // Only search directories that are really inside the backup directory.
            if !real
                .canonicalize()
                .is_ok_and(|r| r.starts_with(root) && r.is_dir())
            {
                continue;
            }
            let join = |name: &[u8]| {
                let mut s = shown.clone();
                if !s.is_empty() && !s.ends_with(b"/") {
                    s.push(b'/');
                }
                s.extend_from_slice(name);
                s
            };
            if part.iter().any(|c| matches!(c, b'*' | b'?' | b'[')) {
                let Ok(entries) = std::fs::read_dir(real) else {
                    continue;
                };
                let mut names: Vec<Vec<u8>> = entries
                    .filter_map(Result::ok)
                    .map(|e| e.file_name().as_bytes().to_vec())
                    .filter(|n| {
                        (!n.starts_with(b".") || part.starts_with(b".")) && fnmatch(part, n)
                    })
                    .collect();
                names.sort();
                for n in names {
                    next.push((join(&n), real.join(std::ffi::OsStr::from_bytes(&n))));
                }
            } else {
                let lit = unescape(part);
                let p = real.join(std::ffi::OsStr::from_bytes(&lit));
                if std::fs::symlink_metadata(&p).is_ok() {
                    next.push((join(&lit), p));
                }
            }
            if next.len() > GLOB_LIMIT {
                return Err(FsError(format!("more than {GLOB_LIMIT} paths match")));
            }
        }
        if !last {
            next.retain(|(_, p)| p.is_dir());
        }
        found = next;
    }
    if parts.is_empty() {
        return Ok(Vec::new());
    }
    let mut out: Vec<Vec<u8>> = found.into_iter().map(|(s, _)| s).collect();
    out.sort();
    Ok(out)
}

fn unescape(part: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(part.len());
    let mut i = 0;
    while i < part.len() {
        if part[i] == b'\\' && i + 1 < part.len() {
            i += 1;
        }
        out.push(part[i]);
        i += 1;
    }
    out
}

/// One pattern token at `p`: whether it matches `c`, and its length; `None` for `*`.
fn token(pat: &[u8], p: usize, c: u8) -> Option<(bool, usize)> {
    match pat[p] {
        b'*' => None,
        b'?' => Some((true, 1)),
        b'\\' if p + 1 < pat.len() => Some((pat[p + 1] == c, 2)),
        b'[' => {
            let mut i = p + 1;
            let neg = matches!(pat.get(i), Some(b'!' | b'^'));
            if neg {
                i += 1;
            }
            let start = i;
            let mut hit = false;
            while i < pat.len() && (pat[i] != b']' || i == start) {
                let lo = pat[i];
                if pat.get(i + 1) == Some(&b'-') && pat.get(i + 2).is_some_and(|&h| h != b']') {
                    hit |= (lo..=pat[i + 2]).contains(&c);
                    i += 3;
                } else {
                    hit |= lo == c;
                    i += 1;
                }
            }
            if i >= pat.len() {
                // No closing `]`: the `[` is itself.
                return Some((c == b'[', 1));
            }
            Some((hit != neg, i + 1 - p))
        }
        x => Some((x == c, 1)),
    }
}

/// Whether a file name matches a shell pattern of one component.
pub fn fnmatch(pat: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pat.len() {
            match token(pat, p, name[n]) {
                None => {
                    star = Some((p + 1, n));
                    p += 1;
                    continue;
                }
                Some((true, len)) => {
                    p += len;
                    n += 1;
                    continue;
                }
                Some((false, _)) => {}
            }
        }
        match star {
            Some((sp, sn)) => {
                p = sp;
                n = sn + 1;
                star = Some((sp, sn + 1));
            }
            None => return false,
        }
    }
    pat[p..].iter().all(|&c| c == b'*')
}
