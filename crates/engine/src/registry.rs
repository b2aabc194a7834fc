//! The kinds of database: one table of descriptors ([`KINDS`]) that open-by-name dispatches
//! through. A descriptor says how a name selects the kind (`*`, `+`, a suffix such as `.kh`),
//! which `#key=value` parameters it accepts, what it can do ([`Caps`]), what the servers of the
//! systems Kura replaces call its counterpart, and how to open (and, for kinds with files,
//! repair) it. Adding a kind is one variant of [`Kind`] and one entry here.
//!
//! Callers ask a handle for its descriptor (`store.kind().info()`) instead of matching on
//! concrete kinds.

use crate::config::{OpenMode, Params};
use crate::error::{Error, Result};
use crate::store::{Kind, RepairReport, Store};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a kind can do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Cursors walk in key order; `jump`, ranges and misc `range` work.
    pub ordered: bool,
    /// Records live in files and survive a restart.
    pub persistent: bool,
    /// Keys are decimal integers (Tokyo Cabinet's fixed-length database, `.kf`).
    pub integer_keys: bool,
    /// Values are records of named columns, given and shown in Tokyo Cabinet's wire form
    /// `name1\0value1\0…` (the table, `.kt`; [`Store::table`] has its own operations): other
    /// bytes are refused, and byte operations (append, counters) do not apply.
    pub columns: bool,
}

/// How the path part of a name selects a kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selector {
    /// The path is exactly this (`*`).
    Exactly(&'static str),
    /// The path ends with this (`.kh`).
    Suffix(&'static str),
}

impl Selector {
    fn selects(self, path: &str) -> bool {
        match self {
            Selector::Exactly(s) => path == s,
            Selector::Suffix(s) => path.ends_with(s),
        }
    }

    /// As a user writes it: `*`, `PATH.kh`.
    pub fn usage(self) -> String {
        match self {
            Selector::Exactly(s) => format!("`{s}`"),
            Selector::Suffix(s) => format!("`PATH{s}`"),
        }
    }
}

/// A database opened by name.
pub struct Opened {
    pub store: Arc<dyn Store>,
    /// This open made a new on-disk database (always false for the memory kinds).
    pub created: bool,
}

/// Opens a kind: the path (ignored by the memory kinds), its parameters, the open mode.
pub type OpenFn = fn(&Path, &Params, OpenMode) -> Result<Opened>;

/// How a kind with files is repaired (see [`crate::name::repair`]).
#[derive(Clone, Copy, Debug)]
pub struct Repair {
    /// Write a new database at the second path (tuned by the parameters) from the first.
    pub into: fn(&Path, &Path, &Params) -> Result<RepairReport>,
    /// Repair beside the source and swap: the damaged files' new path is returned.
    pub in_place: fn(&Path, &Params) -> Result<(RepairReport, PathBuf)>,
}

/// One kind of database.
#[derive(Clone, Copy, Debug)]
pub struct KindInfo {
    pub kind: Kind,
    pub selector: Selector,
    /// Its name in `inform` and messages: `memory hash (*)`.
    pub name: &'static str,
    /// What it is, for the list of kinds in messages: `memory hash`.
    pub about: &'static str,
    /// The `#key=value` parameters it accepts (any other is an error).
    pub params: &'static [&'static str],
    pub caps: Caps,
    /// The Tokyo Cabinet database it stands in for, as Tokyo Tyrant's `stat` (`type`) and
    /// OPTIONS (`X-TT-TYPE`) name it (`tcadbomode`).
    pub tt_type: &'static str,
    /// The Kyoto Cabinet class it stands in for, as Kyoto Tycoon's `status` reports it
    /// (`type`, `realtype`: `BasicDB::Type`): 0x20 `CacheDB`, 0x21 `GrassDB`, 0x30 `HashDB`,
    /// 0x31 `TreeDB`, 0x80 `TYPEMISC` (Kyoto Cabinet has no fixed-length database: its
    /// "miscellaneous").
    pub kc_type: u32,
    pub open: OpenFn,
    /// `None`: nothing on disk to repair.
    pub repair: Option<Repair>,
}

/// Every kind, in the order of [`Kind`]'s variants ([`Kind::info`] indexes it).
pub const KINDS: &[KindInfo] = &[
    KindInfo {
        kind: Kind::MemHash,
        selector: Selector::Exactly("*"),
        name: "memory hash (*)",
        about: "memory hash",
        params: crate::mem::PARAMS,
        caps: Caps {
            ordered: false,
            persistent: false,
            integer_keys: false,
            columns: false,
        },
        tt_type: "on-memory hash",
        kc_type: 0x20,
        open: |_, params, _| memory(Arc::new(crate::mem::MemHash::open(params)?)),
        repair: None,
    },
    KindInfo {
        kind: Kind::MemTree,
        selector: Selector::Exactly("+"),
        name: "memory tree (+)",
        about: "memory tree",
        params: crate::mem::PARAMS,
        caps: Caps {
            ordered: true,
            persistent: false,
            integer_keys: false,
            columns: false,
        },
        tt_type: "on-memory tree",
        kc_type: 0x21,
        open: |_, params, _| memory(Arc::new(crate::mem::MemTree::open(params)?)),
        repair: None,
    },
    KindInfo {
        kind: Kind::DiskHash,
        selector: Selector::Suffix(".kh"),
        name: "disk hash (.kh)",
        about: "on-disk hash",
        params: crate::hash::PARAMS,
        caps: Caps {
            ordered: false,
            persistent: true,
            integer_keys: false,
            columns: false,
        },
        tt_type: "hash",
        kc_type: 0x30,
        open: |path, params, mode| {
            let db = crate::hash::DiskHash::open_mode(path, params, os(), mode)?;
            let created = db.created();
            Ok(Opened {
                store: Arc::new(db),
                created,
            })
        },
        repair: Some(Repair {
            into: |src, dst, params| crate::hash::DiskHash::repair_with(src, dst, params, os()),
            in_place: |src, params| crate::hash::DiskHash::repair_in_place(src, params, os()),
        }),
    },
    KindInfo {
        kind: Kind::DiskTree,
        selector: Selector::Suffix(".kb"),
        name: "disk tree (.kb)",
        about: "on-disk B+ tree",
        params: crate::tree::PARAMS,
        caps: Caps {
            ordered: true,
            persistent: true,
            integer_keys: false,
            columns: false,
        },
        tt_type: "B+ tree",
        kc_type: 0x31,
        open: |path, params, mode| {
            let db = crate::tree::DiskTree::open_mode(path, params, os(), mode)?;
            let created = db.created();
            Ok(Opened {
                store: Arc::new(db),
                created,
            })
        },
        repair: Some(Repair {
            into: |src, dst, params| crate::tree::DiskTree::repair_with(src, dst, params, os()),
            in_place: |src, params| crate::tree::DiskTree::repair_in_place(src, params, os()),
        }),
    },
    KindInfo {
        kind: Kind::Fixed,
        selector: Selector::Suffix(".kf"),
        name: "fixed-length (.kf)",
        about: "fixed-length database",
        params: crate::fixed::PARAMS,
        caps: Caps {
            ordered: true,
            persistent: true,
            integer_keys: true,
            columns: false,
        },
        tt_type: "fixed-length",
        kc_type: 0x80,
        open: |path, params, mode| {
            let db = crate::fixed::FixedDb::open_mode(path, params, os(), mode)?;
            let created = db.created();
            Ok(Opened {
                store: Arc::new(db),
                created,
            })
        },
        repair: Some(Repair {
            into: |src, dst, params| crate::fixed::FixedDb::repair_with(src, dst, params, os()),
            in_place: |src, params| crate::fixed::FixedDb::repair_in_place(src, params, os()),
        }),
    },
    KindInfo {
        kind: Kind::Table,
        selector: Selector::Suffix(".kt"),
        name: "table (.kt)",
        about: "table database",
        params: crate::table::PARAMS,
        caps: Caps {
            ordered: true,
            persistent: true,
            integer_keys: false,
            columns: true,
        },
        tt_type: "table",
        kc_type: 0x80,
        open: |path, params, mode| {
            let db = crate::table::TableDb::open_mode(path, params, os(), mode)?;
            let created = db.tree().created();
            Ok(Opened {
                store: Arc::new(db),
                created,
            })
        },
        repair: Some(Repair {
            into: |src, dst, params| crate::table::TableDb::repair_with(src, dst, params, os()),
            in_place: |src, params| crate::table::TableDb::repair_in_place(src, params, os()),
        }),
    },
];

// `Kind::info` indexes the table by the variant: every entry must sit at its kind's index.
const _: () = {
    let mut i = 0;
    while i < KINDS.len() {
        assert!(
            KINDS[i].kind as usize == i,
            "KINDS is out of the order of Kind"
        );
        i += 1;
    }
};

fn memory(store: Arc<dyn Store>) -> Result<Opened> {
    Ok(Opened {
        store,
        created: false,
    })
}

fn os() -> Arc<dyn crate::io::Vfs> {
    Arc::new(crate::io::OsVfs)
}

/// The kind the path part of a name selects.
pub fn by_path(path: &str) -> Option<&'static KindInfo> {
    KINDS.iter().find(|k| k.selector.selects(path))
}

/// The kind a copy of a database is written as when `copy_to(dest)` makes a new database (a
/// memory kind's copy): the persistent kind `dest`'s name selects, else the first persistent
/// kind of the table.
pub fn copy_kind(dest: &Path) -> Result<&'static KindInfo> {
    let named = dest.to_str().and_then(by_path);
    named
        .filter(|k| k.caps.persistent)
        .or_else(|| KINDS.iter().find(|k| k.caps.persistent))
        .ok_or(Error::Unsupported(
            "no kind of database keeps its records in files",
        ))
}

/// The kinds as a user names them, for messages: "`*` (memory hash), …".
pub fn usage() -> String {
    let all: Vec<String> = KINDS
        .iter()
        .map(|k| format!("{} ({})", k.selector.usage(), k.about))
        .collect();
    all.join(", ")
}

impl Kind {
    /// This kind's descriptor.
    pub fn info(self) -> &'static KindInfo {
        &KINDS[self as usize]
    }

    /// Its name in `inform` and messages.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Whether iteration is in key order and range / jump operations are available.
    pub fn ordered(self) -> bool {
        self.info().caps.ordered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind, listed by an exhaustive match: a new variant fails to compile here until it
    /// is listed (and then fails below until its entry is in the table).
    fn every_kind() -> Vec<Kind> {
        let all = [
            Kind::MemHash,
            Kind::MemTree,
            Kind::DiskHash,
            Kind::DiskTree,
            Kind::Fixed,
            Kind::Table,
        ];
        for k in all {
            match k {
                Kind::MemHash
                | Kind::MemTree
                | Kind::DiskHash
                | Kind::DiskTree
                | Kind::Fixed
                | Kind::Table => {}
            }
        }
        all.to_vec()
    }

    #[test]
    fn every_kind_has_its_entry() {
        let kinds = every_kind();
        assert_eq!(kinds.len(), KINDS.len());
        for k in kinds {
            assert_eq!(k.info().kind, k);
        }
    }

    #[test]
    fn names_select_kinds() {
        let kind = |p: &str| by_path(p).map(|k| k.kind);
        assert_eq!(kind("*"), Some(Kind::MemHash));
        assert_eq!(kind("+"), Some(Kind::MemTree));
        assert_eq!(kind("/tmp/a.kh"), Some(Kind::DiskHash));
        assert_eq!(kind("/tmp/a.kf"), Some(Kind::Fixed));
        assert_eq!(kind("/tmp/a.kt"), Some(Kind::Table));
        assert_eq!(kind("a.tch"), None);
        assert_eq!(kind("x*"), None);
        assert_eq!(kind("**"), None);
        assert_eq!(
            usage(),
            "`*` (memory hash), `+` (memory tree), `PATH.kh` (on-disk hash), `PATH.kb` \
             (on-disk B+ tree), `PATH.kf` (fixed-length database), `PATH.kt` (table database)"
        );
    }

    #[test]
    fn capabilities() {
        assert!(Kind::MemTree.ordered() && !Kind::MemHash.ordered() && !Kind::DiskHash.ordered());
        let persistent: Vec<Kind> = KINDS
            .iter()
            .filter(|k| k.caps.persistent)
            .map(|k| k.kind)
            .collect();
        assert_eq!(
            persistent,
            [Kind::DiskHash, Kind::DiskTree, Kind::Fixed, Kind::Table]
        );
        assert!(Kind::Fixed.ordered() && Kind::Fixed.info().caps.integer_keys);
        // Exactly the kinds with files can be repaired.
        for k in KINDS {
            assert_eq!(k.repair.is_some(), k.caps.persistent, "{}", k.name);
        }
        assert_eq!(
            copy_kind(Path::new("/x/backup")).unwrap().kind,
            Kind::DiskHash
        );
        assert_eq!(copy_kind(Path::new("b.kh")).unwrap().kind, Kind::DiskHash);
        assert_eq!(copy_kind(Path::new("+")).unwrap().kind, Kind::DiskHash);
    }

    /// A descriptor's parameters are exactly those its kind accepts: the list an unknown
    /// parameter's error gives is the kind's own.
    #[test]
    fn each_kind_accepts_exactly_its_listed_parameters() {
        let dir = tempfile::tempdir().unwrap();
        for k in KINDS {
            let path = dir.path().join(format!("p{}", k.kind as usize));
            let path = match k.selector {
                Selector::Exactly(s) => PathBuf::from(s),
                Selector::Suffix(s) => PathBuf::from(format!("{}{s}", path.display())),
            };
            let params = Params::parse("zzz=1").unwrap();
            let Err(e) = (k.open)(&path, &params, OpenMode::Create) else {
                panic!("{}: an unknown parameter was accepted", k.name);
            };
            let msg = e.to_string();
            let known = msg
                .split("(known: ")
                .nth(1)
                .and_then(|s| s.strip_suffix(')'))
                .unwrap_or_else(|| panic!("{}: {msg}", k.name));
            let mut known: Vec<&str> = known.split(", ").collect();
            let mut listed = k.params.to_vec();
            known.sort_unstable();
            listed.sort_unstable();
            assert_eq!(known, listed, "{}", k.name);
        }
    }
}
