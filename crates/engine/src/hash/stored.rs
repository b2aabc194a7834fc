//! What a hash database stores about itself, and the rules of opening a path.
//!
//! The descriptor (`crate::meta`, kind `hash`) stores what the database *is*: `lanes` (fixed
//! at creation), `compress` (chosen at creation or by `optimize`; an open may override it for
//! itself) and `bnum` (the index size hint given at creation or by `optimize`; every open
//! pre-sizes the index with it unless it gives its own). Everything else (`sync`, `segsiz`,
//! `bufsiz`, `msiz`, `compact`, `ckptsiz`) tunes one open and is not stored.
//!
//! Opening a path ([`OpenMode`]):
//! - nothing there: created by `Create` (the parent directory must exist; it is never made),
//!   else [`Error::NotFound`];
//! - an empty directory: becomes the database under `Create`, else `NotFound`;
//! - a directory with a descriptor: opened (another kind's is refused);
//! - a directory with only the hash's own files (`LOCK`, `seg-*.kd`, `index.ki`…) and no
//!   descriptor: a database made before descriptors existed; opened, and given a descriptor
//!   at its first writable open;
//! - anything else (a file, a directory holding foreign files): [`Error::NotADatabase`],
//!   before anything is written there.

use super::segment::parse_seg_file_name;
use crate::config::{Compression, OpenMode};
use crate::error::{Error, Result};
use crate::io::Vfs;
use crate::meta::{self, Descriptor, DirState};
use std::path::Path;

/// The descriptor's kind for this database kind.
pub const KIND: &str = "hash";

/// Whether `name` is one of the files a hash database keeps in its directory.
pub fn own_file(name: &str) -> bool {
    matches!(
        name,
        "LOCK" | "index.ki" | "index.ki.tmp" | meta::META_NAME | meta::META_TMP
    ) || parse_seg_file_name(name).is_some()
}

/// The stored parameters, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stored {
    pub lanes: usize,
    pub compress: Compression,
    pub bnum: u64,
}

impl Stored {
    pub fn from_descriptor(d: &Descriptor, dir: &Path, max_lanes: usize) -> Result<Stored> {
        let bad = |what: String| {
            Error::Corrupt(format!("{}: {what}", dir.join(meta::META_NAME).display()))
        };
        if d.kind != KIND {
            return Err(Error::NotADatabase(format!(
                "{} is a Kura database of kind `{}`, not a hash database",
                dir.display(),
                d.kind
            )));
        }
        let mut s = Stored {
            lanes: 0,
            compress: Compression::None,
            bnum: 0,
        };
        for (k, v) in &d.params {
            match k.as_str() {
                "lanes" => {
                    s.lanes = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=max_lanes).contains(n))
                        .ok_or_else(|| bad(format!("bad lanes `{v}`")))?
                }
                "compress" => {
                    s.compress =
                        Compression::parse(v).map_err(|_| bad(format!("bad compress `{v}`")))?
                }
                "bnum" => s.bnum = v.parse().map_err(|_| bad(format!("bad bnum `{v}`")))?,
                other => return Err(bad(format!("unknown stored parameter `{other}`"))),
            }
        }
        if s.lanes == 0 {
            return Err(bad("no lanes".into()));
        }
        Ok(s)
    }

    pub fn descriptor(&self) -> Descriptor {
        let mut d = Descriptor::new(KIND);
        d.set("lanes", self.lanes);
        d.set("compress", self.compress.name());
        d.set("bnum", self.bnum);
        d
    }
}

/// What `prepare` found at the path.
pub struct Found {
    /// This open makes a new database.
    pub created: bool,
}

/// Look at `path` and make it ready to be locked and opened under `mode` (creating the
/// directory when that is allowed). Nothing is written into an existing directory.
pub fn prepare(vfs: &dyn Vfs, path: &Path, mode: OpenMode) -> Result<Found> {
    let shown = path.display();
    match meta::inspect(vfs, path, &own_file)? {
        DirState::Missing if mode == OpenMode::Create => match vfs.create_dir(path) {
            Ok(()) => Ok(Found { created: true }),
            // Made by another open meanwhile: open what is there now.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => prepare(vfs, path, mode),
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
        DirState::Empty if mode == OpenMode::Create => Ok(Found { created: true }),
        DirState::Empty => Err(Error::NotFound(format!(
            "no database at {shown} (an empty directory)"
        ))),
        DirState::File => Err(Error::NotADatabase(format!(
            "{shown} exists and is a file, not a Kura hash database (a .kh database is a \
             directory)"
        ))),
        DirState::Foreign(names) => Err(Error::NotADatabase(format!(
            "{shown} is a directory that is not a Kura database: it holds {}… and no {}; it is \
             left alone (choose another path, or empty the directory)",
            names.join(", "),
            meta::META_NAME
        ))),
        DirState::Unmarked | DirState::Database(_) => Ok(Found { created: false }),
        // Only a read-only open goes on (and reports it): nothing else may guess what the
        // database stores.
        DirState::Damaged(_) if mode == OpenMode::ReadOnly => Ok(Found { created: false }),
        DirState::Damaged(m) => Err(Error::Corrupt(m)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_files() {
        for n in [
            "LOCK",
            "index.ki",
            "index.ki.tmp",
            "kura.meta",
            "kura.meta.tmp",
            "seg-00000001.kd",
        ] {
            assert!(own_file(n), "{n}");
        }
        for n in ["seg-x.kd", "index.ki.bak", "notes.txt", "lock"] {
            assert!(!own_file(n), "{n}");
        }
    }

    #[test]
    fn stored_parameters_round_trip_and_bad_ones_are_corrupt() {
        let dir = Path::new("/x.kh");
        let s = Stored {
            lanes: 4,
            compress: Compression::Zstd,
            bnum: 1000,
        };
        let d = s.descriptor();
        assert_eq!(Stored::from_descriptor(&d, dir, 64).unwrap(), s);
        for (k, v) in [
            ("lanes", "0"),
            ("lanes", "65"),
            ("lanes", "x"),
            ("compress", "bzip2"),
            ("bnum", "-1"),
            ("extra", "1"),
        ] {
            let mut e = d.clone();
            e.set(k, v);
            match Stored::from_descriptor(&e, dir, 64) {
                Err(Error::Corrupt(m)) => assert!(m.contains("/x.kh/kura.meta"), "{m}"),
                other => panic!("{k}={v}: {other:?}"),
            }
        }
        let mut other = d.clone();
        other.kind = "tree".into();
        assert!(matches!(
            Stored::from_descriptor(&other, dir, 64),
            Err(Error::NotADatabase(_))
        ));
    }

    // ----- the open rules and the stored parameters, through `DiskHash` -----

    use crate::hash::DiskHash;
    use crate::io::{CrashMode, OsVfs, SimVfs};
    use crate::name::Params;
    use crate::store::Store;
    use std::sync::Arc;

    const SIM: &str = "/sim/db.kh";

    fn sim(fs: &SimVfs, params: &str, mode: OpenMode) -> Result<DiskHash> {
        DiskHash::open_mode(
            Path::new(SIM),
            &Params::parse(params).unwrap(),
            Arc::new(fs.clone()),
            mode,
        )
    }

    fn os(path: &Path, params: &str, mode: OpenMode) -> Result<DiskHash> {
        DiskHash::open_mode(path, &Params::parse(params).unwrap(), Arc::new(OsVfs), mode)
    }

    fn described(db: &DiskHash, key: &str) -> String {
        db.describe()
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no {key} in {:?}", db.describe()))
    }

    /// Bytes of data after putting 40 values of 16 KiB of zeros: small only when compressed.
    fn compressed_puts(db: &DiskHash, tag: &str) -> bool {
        let before = db.inner.log.data_size();
        for i in 0..40 {
            db.put(format!("{tag}{i}").as_bytes(), &[0u8; 16 << 10])
                .unwrap();
        }
        db.sync().unwrap();
        db.inner.log.data_size() - before < 100 << 10
    }

    /// Regression: `create 'x.kh#bnum=1000'` then `inform` said `bnum: 0`. Creation stores
    /// lanes, compression and the bnum hint; every later open takes them unless it gives its
    /// own, and tells both apart.
    #[test]
    fn creation_stores_lanes_compression_and_bnum() {
        let fs = SimVfs::new();
        let db = sim(&fs, "bnum=1000#compress=zstd#lanes=4", OpenMode::Create).unwrap();
        assert!(db.created());
        db.close().unwrap();
        let db = sim(&fs, "", OpenMode::Existing).unwrap();
        assert!(!db.created());
        let want = Stored {
            lanes: 4,
            compress: Compression::Zstd,
            bnum: 1000,
        };
        assert_eq!(db.stored(), Some(want));
        assert_eq!(described(&db, "stored.bnum"), "1000");
        assert_eq!(described(&db, "stored.compress"), "zstd");
        assert_eq!(described(&db, "open.bnum"), "1000");
        assert_eq!(described(&db, "open.compress"), "zstd");
        assert!(compressed_puts(&db, "a"), "later writes are compressed");
        db.close().unwrap();
        // An open's own choices hold for that open only.
        let db = sim(&fs, "compress=none#bnum=5", OpenMode::Existing).unwrap();
        assert_eq!(described(&db, "open.compress"), "none");
        assert_eq!(described(&db, "open.bnum"), "5");
        assert_eq!(db.stored(), Some(want));
        assert!(!compressed_puts(&db, "b"));
        db.close().unwrap();
        let db = sim(&fs, "", OpenMode::ReadOnly).unwrap();
        assert_eq!(described(&db, "open.compress"), "zstd");
        // The descriptor on disk says the same.
        let d = meta::read(&fs, Path::new(SIM)).unwrap().unwrap();
        assert_eq!(
            Stored::from_descriptor(&d, Path::new(SIM), 64).unwrap(),
            want
        );
    }

    /// Regression: `optimize compress=zstd` compressed the data, but `inform` still said
    /// `compress: none` and the next open (a restarted server) stopped compressing.
    #[test]
    fn optimize_stores_its_compression_for_later_opens() {
        let fs = SimVfs::new();
        let db = sim(&fs, "", OpenMode::Create).unwrap();
        for i in 0..20 {
            db.put(format!("k{i}").as_bytes(), &[1u8; 8 << 10]).unwrap();
        }
        let before = db.inner.log.data_size();
        db.optimize("compress=zstd").unwrap();
        assert!(
            db.inner.log.data_size() < before / 4,
            "optimize recompressed"
        );
        assert_eq!(described(&db, "stored.compress"), "zstd");
        assert_eq!(described(&db, "open.compress"), "zstd");
        db.close().unwrap();
        let db = sim(&fs, "", OpenMode::Existing).unwrap();
        assert_eq!(described(&db, "open.compress"), "zstd");
        assert!(
            compressed_puts(&db, "later"),
            "a reopened database keeps compressing"
        );
        db.optimize("compress=none#bnum=100000").unwrap();
        db.close().unwrap();
        let db = sim(&fs, "", OpenMode::Existing).unwrap();
        assert_eq!(
            db.stored(),
            Some(Stored {
                lanes: 16,
                compress: Compression::None,
                bnum: 100000
            })
        );
        assert!(!compressed_puts(&db, "plain"));
    }

    /// Regression: `optimize … lanes=4` exited 0 and changed nothing. What optimize cannot
    /// change is an error naming the parameter, and nothing changes.
    #[test]
    fn optimize_refuses_what_it_cannot_change() {
        let fs = SimVfs::new();
        let db = sim(&fs, "lanes=2", OpenMode::Create).unwrap();
        db.put(b"k", b"v").unwrap();
        let before = db.stored();
        for (p, names) in [
            ("lanes=4", "`lanes`"),
            ("compress=zstd#segsiz=1m", "`segsiz`"),
            ("sync=always", "`sync`"),
            ("bufsiz=64k", "`bufsiz`"),
            ("msiz=1m", "`msiz`"),
            ("compact=0.3", "`compact`"),
            ("ckptsiz=8m", "`ckptsiz`"),
            ("nosuch=1", "`nosuch`"),
        ] {
            match db.optimize(p) {
                Err(Error::InvalidParam(m)) => assert!(m.contains(names), "{p}: {m}"),
                other => panic!("{p}: {other:?}"),
            }
        }
        assert_eq!(db.stored(), before);
        assert_eq!(described(&db, "open.compress"), "none");
        assert_eq!(db.get(b"k").unwrap().unwrap().value, b"v");
    }

    #[test]
    fn lanes_are_fixed_at_creation_even_before_the_first_segment() {
        let fs = SimVfs::new();
        sim(&fs, "lanes=3", OpenMode::Create)
            .unwrap()
            .close()
            .unwrap();
        match sim(&fs, "lanes=5", OpenMode::Create) {
            Err(Error::InvalidParam(m)) => assert!(m.contains("created with 3 lanes"), "{m}"),
            other => panic!("{:?}", other.err()),
        }
        assert_eq!(
            sim(&fs, "lanes=3", OpenMode::Existing)
                .unwrap()
                .stored()
                .unwrap()
                .lanes,
            3
        );
    }

    /// The descriptor of a new database is durable before the open returns: a power cut right
    /// after leaves a database, not a directory nobody knows.
    #[test]
    fn a_new_database_survives_a_crash_right_after_its_creation() {
        let fs = SimVfs::new();
        let db = sim(&fs, "compress=lz4", OpenMode::Create).unwrap();
        db.abandon();
        fs.crash(CrashMode::DropUnsynced);
        let db = sim(&fs, "", OpenMode::Existing).unwrap();
        assert_eq!(described(&db, "stored.compress"), "lz4");
    }

    #[test]
    fn missing_databases_are_errors_unless_creating() {
        let fs = SimVfs::new();
        for mode in [OpenMode::Existing, OpenMode::ReadOnly] {
            match sim(&fs, "", mode) {
                Err(Error::NotFound(m)) => assert!(m.contains("no database at /sim/db.kh"), "{m}"),
                other => panic!("{mode:?}: {:?}", other.err()),
            }
        }
        assert!(fs.paths().is_empty(), "nothing written: {:?}", fs.paths());
        let tmp = tempfile::tempdir().unwrap();
        // A missing parent directory is an error in every mode; nothing is made.
        let deep = tmp.path().join("no/such/dir/x.kh");
        for mode in [OpenMode::Create, OpenMode::Existing, OpenMode::ReadOnly] {
            match os(&deep, "", mode) {
                Err(Error::NotFound(m)) => assert!(m.contains("x.kh"), "{mode:?}: {m}"),
                other => panic!("{mode:?}: {:?}", other.err()),
            }
        }
        match os(&deep, "", OpenMode::Create) {
            Err(Error::NotFound(m)) => assert!(m.contains("no/such/dir does not exist"), "{m}"),
            other => panic!("{:?}", other.err()),
        }
        assert!(!tmp.path().join("no").exists());
        // An empty directory becomes a database only when creating.
        let empty = tmp.path().join("empty.kh");
        std::fs::create_dir(&empty).unwrap();
        assert!(matches!(
            os(&empty, "", OpenMode::Existing),
            Err(Error::NotFound(_))
        ));
        assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
        let db = os(&empty, "", OpenMode::Create).unwrap();
        assert!(db.created());
        db.close().unwrap();
        assert!(empty.join(meta::META_NAME).exists());
    }

    /// Regression: an existing `other.kh/` holding a foreign file was adopted without a word.
    #[test]
    fn a_directory_of_foreign_files_is_refused_and_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("other.kh");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("thesis.tex"), b"precious").unwrap();
        for mode in [OpenMode::Create, OpenMode::Existing, OpenMode::ReadOnly] {
            match os(&dir, "", mode) {
                Err(Error::NotADatabase(m)) => {
                    assert!(
                        m.contains("thesis.tex") && m.contains("not a Kura database"),
                        "{m}"
                    )
                }
                other => panic!("{mode:?}: {:?}", other.err()),
            }
        }
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["thesis.tex"], "no lock file, nothing else");
        let file = tmp.path().join("file.kh");
        std::fs::write(&file, b"x").unwrap();
        assert!(matches!(
            os(&file, "", OpenMode::Create),
            Err(Error::NotADatabase(_))
        ));
    }

    /// A database made before descriptors (only its own files) opens in every mode; a
    /// read-only open shows that nothing is stored and writes nothing; the first writable open
    /// stores the lanes it has and this open's choices.
    #[test]
    fn a_database_from_before_descriptors_is_adopted() {
        let fs = SimVfs::new();
        let db = sim(&fs, "lanes=2", OpenMode::Create).unwrap();
        db.put(b"k", b"v").unwrap();
        db.close().unwrap();
        assert!(fs.remove_file(&Path::new(SIM).join(meta::META_NAME)));
        let db = sim(&fs, "", OpenMode::ReadOnly).unwrap();
        assert_eq!(db.stored(), None);
        assert!(described(&db, "stored").starts_with("none"));
        db.close().unwrap();
        assert_eq!(meta::read(&fs, Path::new(SIM)).unwrap(), None);
        let db = sim(&fs, "compress=deflate", OpenMode::Existing).unwrap();
        assert!(!db.created());
        assert_eq!(db.get(b"k").unwrap().unwrap().value, b"v");
        db.close().unwrap();
        let d = meta::read(&fs, Path::new(SIM)).unwrap().expect("adopted");
        assert_eq!(
            Stored::from_descriptor(&d, Path::new(SIM), 64).unwrap(),
            Stored {
                lanes: 2,
                compress: Compression::Deflate,
                bnum: 0
            }
        );
    }

    /// A database written by the build before descriptors (checked in: tests/fixtures,
    /// `before-descriptor.kh`, made by `kura db import 'before-descriptor.kh#lanes=2#…'` at
    /// 409fab4) opens read-only as it is, and its first writable open adopts it.
    #[test]
    fn the_fixture_from_before_descriptors_opens_and_is_adopted() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/before-descriptor.kh");
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("old.kh");
        std::fs::create_dir(&dir).unwrap();
        for e in std::fs::read_dir(&src).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
        }
        let records = |db: &DiskHash| {
            let mut v = Vec::new();
            db.for_each_record(&mut |k, val, _| {
                v.push((k.to_vec(), val.to_vec()));
                Ok(true)
            })
            .unwrap();
            v.sort();
            v
        };
        let want = vec![
            (b"apple".to_vec(), b"red".to_vec()),
            (b"big".to_vec(), vec![b'z'; 3000]),
            (b"bin".to_vec(), b"\x00\xff".to_vec()),
            (b"win".to_vec(), b"C:\\temp".to_vec()),
        ];
        let db = os(&dir, "", OpenMode::ReadOnly).unwrap();
        assert_eq!(db.stored(), None);
        assert_eq!(records(&db), want);
        db.close().unwrap();
        assert!(!dir.join(meta::META_NAME).exists());
        let db = os(&dir, "", OpenMode::Existing).unwrap();
        assert!(!db.created());
        assert_eq!(
            db.stored(),
            Some(Stored {
                lanes: 2,
                compress: Compression::None,
                bnum: 0
            })
        );
        assert_eq!(records(&db), want);
        db.close().unwrap();
        assert!(dir.join(meta::META_NAME).exists());
        assert_eq!(records(&os(&dir, "", OpenMode::ReadOnly).unwrap()), want);
    }

    /// The fixture's `index.ki`, written at 409fab4 by the hash's own checkpoint writer (before
    /// every kind's went through `log::checkpoint`), loads as it is: the open replays nothing.
    /// The same file damaged is ignored, and the whole log replayed, with nothing lost.
    #[test]
    fn the_fixture_checkpoint_loads_and_a_damaged_one_is_replayed_instead() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/before-descriptor.kh");
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("old.kh");
        std::fs::create_dir(&dir).unwrap();
        for e in std::fs::read_dir(&src).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
        }
        let open = || {
            let db = os(&dir, "", OpenMode::ReadOnly).unwrap();
            let mut keys = Vec::new();
            db.for_each_record(&mut |k, _, _| {
                keys.push(k.to_vec());
                Ok(true)
            })
            .unwrap();
            keys.sort();
            let replayed = db.inner.appended.load(std::sync::atomic::Ordering::Relaxed);
            (db, keys, replayed)
        };
        let want: Vec<Vec<u8>> = ["apple", "big", "bin", "win"]
            .iter()
            .map(|k| k.as_bytes().to_vec())
            .collect();
        let (db, keys, replayed) = open();
        assert_eq!(
            (keys, replayed),
            (want.clone(), 0),
            "loaded, nothing replayed"
        );
        assert!(db.check().unwrap().warnings.is_empty());
        drop(db);
        let ki = dir.join(super::super::CKPT_NAME);
        let mut b = std::fs::read(&ki).unwrap();
        b[60] ^= 0x40;
        std::fs::write(&ki, &b).unwrap();
        let (db, keys, replayed) = open();
        assert_eq!(keys, want);
        assert!(replayed > 0, "the log is replayed instead");
        let rep = db.check().unwrap();
        assert!(rep.damage.is_empty(), "{rep:?}");
        assert!(
            rep.warnings
                .iter()
                .any(|w| w.contains("index.ki is damaged (its checksum")),
            "{rep:?}"
        );
    }

    /// A damaged descriptor is `Corrupt` naming the file for every writable open, and stays as
    /// it was: never replaced by a fresh one. A read-only open goes on without it and reports
    /// it as damage that loses no record.
    #[test]
    fn a_damaged_descriptor_refuses_writable_opens_and_is_kept() {
        let fs = SimVfs::new();
        let db = sim(&fs, "compress=zstd", OpenMode::Create).unwrap();
        db.put(b"k", b"v").unwrap();
        db.close().unwrap();
        let path = Path::new(SIM).join(meta::META_NAME);
        assert!(fs.corrupt(&path, 40, b"X"));
        let read_all = || {
            let f = fs.open(&path, false).unwrap();
            let mut b = vec![0u8; f.len().unwrap() as usize];
            f.read_at(&mut b, 0).unwrap();
            b
        };
        let damaged = read_all();
        for mode in [OpenMode::Create, OpenMode::Existing] {
            match sim(&fs, "", mode) {
                Err(Error::Corrupt(m)) => assert!(m.contains("/sim/db.kh/kura.meta"), "{m}"),
                other => panic!("{mode:?}: {:?}", other.err()),
            }
        }
        let ro = sim(&fs, "", OpenMode::ReadOnly).unwrap();
        assert_eq!(ro.get(b"k").unwrap().unwrap().value, b"v");
        assert_eq!(ro.stored(), None);
        let rep = ro.check().unwrap();
        assert_eq!(rep.damage.len(), 1, "{rep:?}");
        assert_eq!((rep.damage[0].file.as_str(), rep.lost()), ("kura.meta", 0));
        drop(ro);
        assert_eq!(read_all(), damaged);
    }

    #[test]
    fn a_copy_stores_the_same_parameters() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("a.kh");
        let db = os(&src, "lanes=3#compress=lz4#bnum=77", OpenMode::Create).unwrap();
        db.put(b"k", b"v").unwrap();
        let dest = tmp.path().join("b.kh");
        db.copy_to(&dest).unwrap();
        db.close().unwrap();
        let copy = os(&dest, "", OpenMode::Existing).unwrap();
        assert_eq!(copy.stored(), db.stored());
        assert_eq!(copy.get(b"k").unwrap().unwrap().value, b"v");
        // The parent of a copy must exist too.
        let db = os(&src, "", OpenMode::Existing).unwrap();
        assert!(db.copy_to(&tmp.path().join("no/b.kh")).is_err());
        assert!(!tmp.path().join("no").exists());
    }
}
