//! The database descriptor (`kura.meta`): what a database directory *is*, written by the engine
//! for every on-disk kind.
//!
//! It holds the parameters chosen for the database (by its creation, or later by `optimize`),
//! as opposed to the tuning of one open: its kind, and the kind's stored parameters (for the
//! hash: lanes, compression, the `bnum` hint). Its presence marks a directory as a Kura
//! database; a directory with other files and no descriptor is never adopted.
//!
//! # Format (version 1)
//!
//! Text, one `name value` pair per line (a single space between them, no spaces in either),
//! every line ending in LF:
//!
//! ```text
//! kura database            magic line
//! version 1                this format's version
//! kind hash                the database kind
//! lanes 16                 the kind's stored parameters, in the order written: names are
//! compress zstd            [a-z0-9_]+, values printable ASCII without spaces
//! bnum 1000000
//! crc32c 1c291ca3          crc32c of every byte before this line, 8 lowercase hex digits
//! ```
//!
//! Anything else (a missing or wrong checksum, a line out of place, a name given twice, a
//! file over [`MAX_LEN`] bytes) is [`Error::Corrupt`] naming the file: a damaged descriptor is
//! reported, never replaced. A later version is refused by its version line.
//!
//! It is replaced atomically (`log::checkpoint::replace_atomic`): written to `kura.meta.tmp`,
//! fsynced, renamed over `kura.meta`, then the directory is fsynced, all through [`Vfs`] (so
//! the crash tests cover it).

use crate::error::{Error, Result};
use crate::io::Vfs;
use std::path::Path;

/// The descriptor's file name in the database directory.
pub const META_NAME: &str = "kura.meta";
/// Its temporary name while it is replaced.
pub const META_TMP: &str = "kura.meta.tmp";
/// The format version this build writes and reads.
pub const META_VERSION: u32 = 1;
/// A descriptor larger than this is damaged (version 1 writes well under 200 bytes).
pub const MAX_LEN: u64 = 4096;
const MAGIC_LINE: &str = "kura database";

/// What a database is: its kind and the kind's stored parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    pub kind: String,
    /// `(name, value)` in the order written.
    pub params: Vec<(String, String)>,
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

fn valid_value(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic())
}

impl Descriptor {
    pub fn new(kind: &str) -> Descriptor {
        Descriptor {
            kind: kind.to_string(),
            params: Vec::new(),
        }
    }

    /// The stored value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Set `name` (kept in its place when present, else added at the end).
    pub fn set(&mut self, name: &str, value: impl ToString) {
        let value = value.to_string();
        debug_assert!(valid_name(name) && valid_value(&value), "{name} {value}");
        match self.params.iter_mut().find(|(k, _)| k == name) {
            Some(p) => p.1 = value,
            None => self.params.push((name.to_string(), value)),
        }
    }

    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut s = format!("{MAGIC_LINE}\nversion {META_VERSION}\nkind {}\n", self.kind);
        for (k, v) in &self.params {
            s.push_str(&format!("{k} {v}\n"));
        }
        let crc = crc32c::crc32c(s.as_bytes());
        s.push_str(&format!("crc32c {crc:08x}\n"));
        s.into_bytes()
    }

    /// Parse a descriptor's bytes; the error says what is wrong (the caller names the file).
    pub fn decode(bytes: &[u8]) -> std::result::Result<Descriptor, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "not text".to_string())?;
        let body_end = text
            .trim_end_matches('\n')
            .rfind('\n')
            .map(|i| i + 1)
            .ok_or("too short")?;
        let (body, last) = text.split_at(body_end);
        let crc = last
            .strip_suffix('\n')
            .and_then(|l| l.strip_prefix("crc32c "))
            .filter(|h| h.len() == 8 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or("no checksum line at the end")?;
        if crc32c::crc32c(body.as_bytes()) != crc {
            return Err("checksum mismatch".into());
        }
        let mut lines = body.lines();
        if lines.next() != Some(MAGIC_LINE) {
            return Err(format!("does not start with `{MAGIC_LINE}`"));
        }
        let version = lines
            .next()
            .and_then(|l| l.strip_prefix("version "))
            .and_then(|v| v.parse::<u32>().ok())
            .ok_or("no version line")?;
        if version != META_VERSION {
            return Err(format!(
                "descriptor version {version}: this build reads version {META_VERSION} (a newer \
                 Kura wrote it?)"
            ));
        }
        let kind = lines
            .next()
            .and_then(|l| l.strip_prefix("kind "))
            .filter(|k| valid_name(k))
            .ok_or("no kind line")?;
        let mut d = Descriptor::new(kind);
        for line in lines {
            let (k, v) = line
                .split_once(' ')
                .filter(|(k, v)| valid_name(k) && valid_value(v))
                .ok_or_else(|| format!("malformed line `{}`", line.escape_debug()))?;
            if d.get(k).is_some() {
                return Err(format!("`{k}` given twice"));
            }
            d.params.push((k.to_string(), v.to_string()));
        }
        Ok(d)
    }
}

fn corrupt(dir: &Path, what: &str) -> Error {
    Error::Corrupt(format!("{}: {what}", dir.join(META_NAME).display()))
}

/// Read the descriptor of the database at `dir`: `None` when there is none.
pub fn read(vfs: &dyn Vfs, dir: &Path) -> Result<Option<Descriptor>> {
    let path = dir.join(META_NAME);
    let f = match vfs.open(&path, false) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let len = f.len()?;
    if len > MAX_LEN {
        return Err(corrupt(
            dir,
            &format!("{len} bytes, more than a descriptor"),
        ));
    }
    let mut buf = vec![0u8; len as usize];
    f.read_at(&mut buf, 0)?;
    Descriptor::decode(&buf)
        .map(Some)
        .map_err(|e| corrupt(dir, &e))
}

/// Replace the descriptor of the database at `dir` atomically (see the module documentation).
pub fn write(vfs: &dyn Vfs, dir: &Path, d: &Descriptor) -> Result<()> {
    let bytes = d.encode();
    crate::log::checkpoint::replace_atomic(
        vfs,
        dir,
        META_NAME,
        META_TMP,
        |f| f.write_at(&bytes, 0),
        || Ok(()),
    )?;
    Ok(())
}

/// What is at a database path, before it is opened.
#[derive(Debug, PartialEq, Eq)]
pub enum DirState {
    /// Nothing.
    Missing,
    /// A file, not a directory.
    File,
    /// An empty directory: may become a database where creating is allowed.
    Empty,
    /// A database, with its descriptor.
    Database(Descriptor),
    /// A descriptor that fails its checks (why): a database, damaged.
    Damaged(String),
    /// A directory holding only the kind's own files and no descriptor: a database made before
    /// descriptors existed (adopted: it gets one at its first writable open).
    Unmarked,
    /// A directory with files that are not the kind's and no descriptor: not a database. Holds
    /// the first few foreign names (sorted), for the message.
    Foreign(Vec<String>),
}

/// Look at `dir` without changing anything. `own` tells the kind's own file names (the
/// descriptor's are always own). A damaged descriptor is [`Error::Corrupt`].
pub fn inspect(vfs: &dyn Vfs, dir: &Path, own: &dyn Fn(&str) -> bool) -> Result<DirState> {
    if !vfs.exists(dir) {
        return Ok(DirState::Missing);
    }
    let names = match vfs.list(dir) {
        Ok(n) => n,
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return Ok(DirState::File),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(DirState::Missing),
        Err(e) => return Err(e.into()),
    };
    if names.iter().any(|n| n == META_NAME) {
        return match read(vfs, dir) {
            Err(Error::Corrupt(m)) => Ok(DirState::Damaged(m)),
            Err(e) => Err(e),
            Ok(Some(d)) => Ok(DirState::Database(d)),
            // Removed between the listing and the read.
            Ok(None) => Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "{}: removed while being read",
                    dir.join(META_NAME).display()
                ),
            ))),
        };
    }
    let mut foreign: Vec<String> = names
        .iter()
        .filter(|n| *n != META_TMP && !own(n))
        .cloned()
        .collect();
    if !foreign.is_empty() {
        foreign.sort();
        foreign.truncate(3);
        return Ok(DirState::Foreign(foreign));
    }
    Ok(if names.is_empty() {
        DirState::Empty
    } else {
        DirState::Unmarked
    })
}

/// Look at `path` and make it ready to be locked and opened under `mode` as a database of
/// the kind `about` (`"fixed-length database"`, for messages) whose own files `own` tells,
/// creating the directory when that is allowed; whether this open makes a new database.
/// Nothing is written into an existing directory. The rules (the same for every kind with a
/// directory; docs/architecture/hash.md, "Opening and creating"):
/// - nothing there: created by `Create` (the parent directory must exist; it is never made),
///   else [`Error::NotFound`];
/// - an empty directory: becomes the database under `Create`, else `NotFound`;
/// - a directory with a descriptor: opened (the kind checks it is its own);
/// - a directory with only the kind's own files and no descriptor: opened (a read-only open
///   of a damaged descriptor too, which it reports);
/// - anything else (a file, a directory holding foreign files): [`Error::NotADatabase`].
pub fn prepare(
    vfs: &dyn Vfs,
    path: &Path,
    mode: crate::config::OpenMode,
    own: &dyn Fn(&str) -> bool,
    about: &str,
) -> Result<bool> {
    use crate::config::OpenMode;
    let shown = path.display();
    match inspect(vfs, path, own)? {
        DirState::Missing if mode == OpenMode::Create => match vfs.create_dir(path) {
            Ok(()) => Ok(true),
            // Made by another open meanwhile: open what is there now.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                prepare(vfs, path, mode, own, about)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let parent = path
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .unwrap_or(Path::new("."));
                Err(Error::NotFound(format!(
                    "cannot create {shown}: directory {} does not exist",
                    parent.display()
                )))
            }
            Err(e) => Err(Error::Io(std::io::Error::new(
                e.kind(),
                format!("cannot create {shown}: {e}"),
            ))),
        },
        DirState::Missing => Err(Error::NotFound(format!("no database at {shown}"))),
        DirState::Empty if mode == OpenMode::Create => Ok(true),
        DirState::Empty => Err(Error::NotFound(format!(
            "no database at {shown} (an empty directory)"
        ))),
        DirState::File => Err(Error::NotADatabase(format!(
            "{shown} exists and is a file, not a Kura {about} (a Kura database is a directory)"
        ))),
        DirState::Foreign(names) => Err(Error::NotADatabase(format!(
            "{shown} is a directory that is not a Kura database: it holds {}… and no {}; it is \
             left alone (choose another path, or empty the directory)",
            names.join(", "),
            META_NAME
        ))),
        DirState::Unmarked | DirState::Database(_) => Ok(false),
        DirState::Damaged(_) if mode == OpenMode::ReadOnly => Ok(false),
        DirState::Damaged(m) => Err(Error::Corrupt(m)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{CrashMode, OsVfs, SimVfs};

    fn sample() -> Descriptor {
        let mut d = Descriptor::new("hash");
        d.set("lanes", 16);
        d.set("compress", "zstd");
        d.set("bnum", 1000);
        d
    }

    /// The checked-in version-1 file (tests/fixtures) still reads as written, and its damaged
    /// copy (`lanes 16` made `lanes 06`: a plausible value only the checksum catches) does not.
    #[test]
    fn the_version_1_fixture_reads_and_its_damaged_copy_does_not() {
        let v1 = include_bytes!("../tests/fixtures/kura.meta.v1");
        assert_eq!(Descriptor::decode(v1).unwrap(), sample());
        assert_eq!(
            sample().encode(),
            v1,
            "this build writes version 1 byte for byte"
        );
        let damaged = include_bytes!("../tests/fixtures/kura.meta.v1-damaged");
        assert_eq!(
            Descriptor::decode(damaged).unwrap_err(),
            "checksum mismatch"
        );
    }

    #[test]
    fn round_trips_and_reads_as_text() {
        let d = sample();
        let bytes = d.encode();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.starts_with("kura database\nversion 1\nkind hash\nlanes 16\n"));
        assert!(text.ends_with('\n'));
        assert_eq!(Descriptor::decode(&bytes).unwrap(), d);
        let mut e = d.clone();
        e.set("compress", "none");
        assert_eq!(e.params.len(), 3, "set replaces in place");
        assert_eq!(e.get("compress"), Some("none"));
        assert_eq!(Descriptor::decode(&e.encode()).unwrap(), e);
    }

    /// Every single flipped byte and every cut is caught (by the checksum or the structure).
    #[test]
    fn any_flipped_byte_or_cut_is_an_error() {
        let bytes = sample().encode();
        for i in 0..bytes.len() {
            for bit in [0x01u8, 0x20, 0x80] {
                let mut b = bytes.clone();
                b[i] ^= bit;
                assert!(Descriptor::decode(&b).is_err(), "flip {bit:#x} at {i}");
            }
        }
        for n in 0..bytes.len() {
            assert!(Descriptor::decode(&bytes[..n]).is_err(), "cut at {n}");
        }
        let mut longer = bytes.clone();
        longer.extend_from_slice(b"x 1\n");
        assert!(Descriptor::decode(&longer).is_err());
    }

    /// A well-formed file with a bad line, a repeated name or another version: each refused.
    #[test]
    fn structure_errors_are_named() {
        let with_crc = |body: &str| {
            let mut s = body.to_string();
            s.push_str(&format!("crc32c {:08x}\n", crc32c::crc32c(body.as_bytes())));
            s.into_bytes()
        };
        for (body, want) in [
            ("kura database\nversion 2\nkind hash\n", "version 2"),
            ("kura databse\nversion 1\nkind hash\n", "does not start"),
            ("kura database\nkind hash\n", "no version"),
            ("kura database\nversion 1\n", "no kind"),
            (
                "kura database\nversion 1\nkind hash\nlanes 1\nlanes 2\n",
                "twice",
            ),
            (
                "kura database\nversion 1\nkind hash\nLanes 1\n",
                "malformed",
            ),
            ("kura database\nversion 1\nkind hash\nlanes\n", "malformed"),
        ] {
            let e = Descriptor::decode(&with_crc(body)).unwrap_err();
            assert!(e.contains(want), "{body:?}: {e}");
        }
        assert!(Descriptor::decode(b"").is_err());
        assert!(Descriptor::decode(&[0xff; 40]).is_err());
    }

    #[test]
    fn written_atomically_through_the_vfs_and_survives_a_crash() {
        let fs = SimVfs::new();
        let dir = Path::new("/sim/x.kh");
        assert_eq!(read(&fs, dir).unwrap(), None);
        let d = sample();
        write(&fs, dir, &d).unwrap();
        fs.crash(CrashMode::DropUnsynced);
        assert_eq!(read(&fs, dir).unwrap(), Some(d.clone()));
        // A replacement cut short by a crash before its rename leaves the old one.
        let f = fs.open(&dir.join(META_TMP), true).unwrap();
        f.write_at(b"kura database\nvers", 0).unwrap();
        fs.crash(CrashMode::Torn { seed: 7 });
        assert_eq!(read(&fs, dir).unwrap(), Some(d.clone()));
        // …and the next write replaces whatever the temporary file held.
        let mut e = d.clone();
        e.set("compress", "lz4");
        write(&fs, dir, &e).unwrap();
        assert_eq!(read(&fs, dir).unwrap(), Some(e));
    }

    #[test]
    fn a_damaged_descriptor_is_corrupt_naming_the_file() {
        let fs = SimVfs::new();
        let dir = Path::new("/sim/x.kh");
        write(&fs, dir, &sample()).unwrap();
        assert!(fs.corrupt(&dir.join(META_NAME), 30, b"9"));
        match read(&fs, dir) {
            Err(Error::Corrupt(m)) => assert!(m.contains("/sim/x.kh/kura.meta"), "{m}"),
            other => panic!("expected Corrupt, got {other:?}"),
        }
        match inspect(&fs, dir, &|_| true) {
            Ok(DirState::Damaged(m)) => assert!(m.contains("/sim/x.kh/kura.meta"), "{m}"),
            other => panic!("expected Damaged, got {other:?}"),
        }
    }

    #[test]
    fn inspect_tells_every_state_apart() {
        let own = |n: &str| n == "LOCK" || n.starts_with("seg-");
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let st = |p: &str| inspect(&OsVfs, &d.join(p), &own).unwrap();
        assert_eq!(st("none.kh"), DirState::Missing);
        std::fs::write(d.join("file.kh"), b"x").unwrap();
        assert_eq!(st("file.kh"), DirState::File);
        std::fs::create_dir(d.join("empty.kh")).unwrap();
        assert_eq!(st("empty.kh"), DirState::Empty);
        std::fs::create_dir(d.join("old.kh")).unwrap();
        std::fs::write(d.join("old.kh/seg-00000001.kd"), b"").unwrap();
        std::fs::write(d.join("old.kh/LOCK"), b"").unwrap();
        assert_eq!(st("old.kh"), DirState::Unmarked);
        std::fs::write(d.join("old.kh/notes.txt"), b"").unwrap();
        std::fs::write(d.join("old.kh/a.jpg"), b"").unwrap();
        assert_eq!(
            st("old.kh"),
            DirState::Foreign(vec!["a.jpg".into(), "notes.txt".into()])
        );
        // With a descriptor, other files do not matter.
        write(&OsVfs, &d.join("old.kh"), &sample()).unwrap();
        assert_eq!(st("old.kh"), DirState::Database(sample()));
    }
}
