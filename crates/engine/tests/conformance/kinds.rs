//! Every kind under test: how each is opened and restarted, and the open database a round runs on.

use super::*;

/// One kind under test: how to open it and what a restart means.
pub(crate) struct KindUnderTest {
    /// Shown on failure; `KURA_CONFORMANCE_KIND` selects by it.
    pub(crate) label: &'static str,
    pub(crate) open: Opener,
    pub(crate) restart: Restart,
    /// What `optimize` is called with (one drawn each time).
    pub(crate) retune: &'static [&'static str],
    /// The suffix a copy written by `copy_to` is opened by (the memory kinds copy to an
    /// on-disk hash).
    pub(crate) copy_as: &'static str,
    /// Keys are record ids (decimal numbers) and values at most this long (the width).
    pub(crate) ids: Option<usize>,
}

impl KindUnderTest {
    /// The keys of a round of `n` keys on this kind.
    pub(crate) fn keys(&self, n: usize) -> Keys {
        let mut k = Keys::new("", n, self.ids.is_some());
        k.value_cap = self.ids;
        k.columns = self.columns();
        k
    }

    /// A table: its values are columns in the wire form (`name\0value\0…`).
    pub(crate) fn columns(&self) -> bool {
        matches!(self.open, Opener::Table(..) | Opener::SimTable(..))
    }

    /// The kind's value holding `bytes` (no NUL among them): on a table a record of one column.
    pub(crate) fn value_of(&self, bytes: &[u8]) -> Vec<u8> {
        if self.columns() {
            [&b"blob\0"[..], bytes].concat()
        } else {
            bytes.to_vec()
        }
    }
}

pub(crate) enum Opener {
    /// `kura_engine::open_as` with this name; `{dir}` stands for the round's own temporary
    /// directory.
    Name(&'static str),
    /// `DiskHash::open_with` on a `SimVfs` (kept across restarts) with these parameters.
    SimDiskHash(&'static str),
    /// `DiskTree::open_mode` on a `SimVfs` likewise.
    SimDiskTree(&'static str),
    /// `FixedDb::open_mode` on a `SimVfs` (kept across restarts) with these parameters.
    SimFixed(&'static str),
    /// The keyspace `ks` (made with these parameters) of the database `kura_engine::open_as`
    /// opens by this name. The database itself and a second keyspace hold records of their
    /// own with the round's keys (written at the first open), which the keyspace must not show.
    Keyspace(&'static str, &'static str),
    /// The same on `DiskTree::open_mode` on a `SimVfs` with these parameters (kept across
    /// restarts, so a crash restart can tear its unsynced writes).
    SimKeyspace(&'static str, &'static str),
    /// As `SimKeyspace`, of a `.kh` on the simulated file system.
    SimHashKeyspace(&'static str, &'static str),
    /// A table `kura_engine::open_as` opens by this name, with these indexes made when it is
    /// created (so that every write also changes index entries, and `check` compares them with
    /// the records).
    Table(&'static str, &'static [(&'static str, IndexType)]),
    /// A table on a `SimVfs` (kept across restarts) with these parameters and indexes.
    SimTable(&'static str, &'static [(&'static str, IndexType)]),
}

pub(crate) enum Restart {
    /// Nothing outlives the handle: a restart is a no-op.
    None,
    /// Close, then open the same database again (`OpenMode::Existing`).
    Reopen,
    /// Stop as a killed process would (`DiskHash::abandon`: no flush, no sync), crash the
    /// simulated file system (torn unsynced writes), open again. Only for `sync=always`,
    /// where every acknowledged write must survive.
    Crash,
}

/// Every kind, and every way of running the on-disk ones. A new kind is one more line.
#[rustfmt::skip]
pub(crate) const KINDS: &[KindUnderTest] = &[
    KindUnderTest { label: "*", open: Opener::Name("*"), restart: Restart::None, retune: &["", "bnum=1000"], copy_as: ".kh", ids: None },
    KindUnderTest { label: "+", open: Opener::Name("+"), restart: Restart::None, retune: &[""], copy_as: ".kh", ids: None },
    KindUnderTest { label: ".kh", open: Opener::Name("{dir}/db.kh#segsiz=64k#bufsiz=4k#ckptsiz=1m#lanes=3#sync=none"), restart: Restart::Reopen, retune: KH_RETUNE, copy_as: ".kh", ids: None },
    KindUnderTest { label: ".kh sim", open: Opener::SimDiskHash("segsiz=64k#bufsiz=4k#ckptsiz=1m#lanes=3#sync=none"), restart: Restart::Reopen, retune: KH_RETUNE, copy_as: ".kh", ids: None },
    KindUnderTest { label: ".kh sim crash", open: Opener::SimDiskHash("segsiz=64k#bufsiz=4k#ckptsiz=1m#lanes=3#sync=always"), restart: Restart::Crash, retune: KH_RETUNE, copy_as: ".kh", ids: None },
    KindUnderTest { label: ".kb", open: Opener::Name("{dir}/db.kb#segsiz=64k#bufsiz=4k#ckptsiz=1m#leafsiz=512#cache=1m#sync=none"), restart: Restart::Reopen, retune: &["", "compress=zstd", "compress=none"], copy_as: ".kb", ids: None },
    KindUnderTest { label: ".kb sim", open: Opener::SimDiskTree("segsiz=64k#bufsiz=4k#ckptsiz=1m#leafsiz=300#cache=1m#sync=none"), restart: Restart::Reopen, retune: &[""], copy_as: ".kb", ids: None },
    KindUnderTest { label: ".kb sim crash", open: Opener::SimDiskTree("segsiz=64k#bufsiz=4k#ckptsiz=1m#leafsiz=400#compress=lz4#sync=always"), restart: Restart::Crash, retune: &["", "compress=none"], copy_as: ".kb", ids: None },
    KindUnderTest { label: "* keyspace", open: Opener::Keyspace("*", ""), restart: Restart::None, retune: &["", "bnum=1000"], copy_as: ".kh", ids: None },
    KindUnderTest { label: "+ keyspace", open: Opener::Keyspace("+", ""), restart: Restart::None, retune: &[""], copy_as: ".kh", ids: None },
    KindUnderTest { label: ".kb keyspace sim crash", open: Opener::SimKeyspace("segsiz=64k#bufsiz=4k#ckptsiz=1m#leafsiz=400#compress=lz4#sync=always", "cmp=lex"), restart: Restart::Crash, retune: &[""], copy_as: ".kb", ids: None },
    KindUnderTest { label: ".kb keyspace", open: Opener::Keyspace("{dir}/db.kb#segsiz=64k#bufsiz=4k#ckptsiz=1m#leafsiz=512#cache=1m#sync=none", "cmp=lex"), restart: Restart::Reopen, retune: &[""], copy_as: ".kb", ids: None },
    KindUnderTest { label: ".kh keyspace sim crash", open: Opener::SimHashKeyspace("segsiz=64k#bufsiz=4k#ckptsiz=1m#compress=lz4#lanes=4#sync=always", ""), restart: Restart::Crash, retune: &[""], copy_as: ".kh", ids: None },
    KindUnderTest { label: ".kh keyspace", open: Opener::Keyspace("{dir}/db.kh#segsiz=64k#bufsiz=4k#ckptsiz=1m#compact=0.2#sync=none", ""), restart: Restart::Reopen, retune: &[""], copy_as: ".kh", ids: None },
    KindUnderTest { label: ".kf", open: Opener::Name("{dir}/db.kf#width=300000#limsiz=2t#segsiz=64k#bufsiz=4k#ckptsiz=1m#sync=none"), restart: Restart::Reopen, retune: KF_RETUNE, copy_as: ".kf", ids: Some(KF_WIDTH) },
    KindUnderTest { label: ".kf sim", open: Opener::SimFixed("width=300#limsiz=2t#segsiz=64k#bufsiz=4k#ckptsiz=1m#sync=none"), restart: Restart::Reopen, retune: KF_SIM_RETUNE, copy_as: ".kf", ids: Some(KF_SIM_WIDTH) },
    KindUnderTest { label: ".kf sim crash", open: Opener::SimFixed("width=300#limsiz=2t#segsiz=64k#bufsiz=4k#ckptsiz=1m#sync=always"), restart: Restart::Crash, retune: KF_SIM_RETUNE, copy_as: ".kf", ids: Some(KF_SIM_WIDTH) },
    KindUnderTest { label: ".kt", open: Opener::Table("{dir}/db.kt#segsiz=64k#bufsiz=4k#ckptsiz=1m#leafsiz=512#cache=1m#sync=none", &[]), restart: Restart::Reopen, retune: KT_RETUNE, copy_as: ".kt", ids: None },
    KindUnderTest { label: ".kt indexed", open: Opener::Table("{dir}/db.kt#segsiz=64k#bufsiz=4k#ckptsiz=1m#leafsiz=512#cache=1m#sync=none", KT_INDEXES), restart: Restart::Reopen, retune: KT_RETUNE, copy_as: ".kt", ids: None },
    KindUnderTest { label: ".kt indexed sim crash", open: Opener::SimTable("segsiz=64k#bufsiz=4k#ckptsiz=1m#leafsiz=400#compress=lz4#sync=always", KT_INDEXES), restart: Restart::Crash, retune: &["", "compress=none"], copy_as: ".kt", ids: None },
    // No table keyspace kind: a table refuses `keyspace` (its keyspaces hold its indexes).
];

const KT_RETUNE: &[&str] = &["", "compress=zstd", "compress=none"];
/// The indexed tables' indexes: one of each type, on the columns `gen_columns` shapes for it
/// (and the primary key).
const KT_INDEXES: &[(&str, IndexType)] = &[
    ("", IndexType::Lexical),
    ("name", IndexType::Lexical),
    ("num", IndexType::Decimal),
    ("tags", IndexType::Token),
    ("text", IndexType::QGram),
];

/// The width of the fixed-length kinds: every value the rounds make fits (the longest is
/// 300,000 bytes); a concatenation past it is refused, as the model expects.
pub(crate) const KF_WIDTH: usize = 300_000;

pub(crate) const KF_RETUNE: &[&str] = &["", "", "width=300000"];
/// The width of the `.kf` kinds on `SimVfs`: a fixed-length database is an array of slots of
/// the width, as long as its largest id, and `SimVfs` holds every file whole in memory.
pub(crate) const KF_SIM_WIDTH: usize = 300;
pub(crate) const KF_SIM_RETUNE: &[&str] = &["", "", "width=300"];

pub(crate) const KH_RETUNE: &[&str] = &["", "", "compress=lz4", "compress=none", "bnum=64"];

pub(crate) const SIM_PATH: &str = "/sim/db.kh";
pub(crate) const SIM_TREE_PATH: &str = "/sim/db.kb";
pub(crate) const SIM_FIXED_PATH: &str = "/sim/db.kf";
pub(crate) const SIM_TABLE_PATH: &str = "/sim/db.kt";

/// Open a database at `path` on the simulated file system `fs` with `params`.
fn on_sim<T>(
    open: impl FnOnce(&Path, &Params, Arc<dyn Vfs>, OpenMode) -> kura_engine::Result<T>,
    path: &str,
    params: &str,
    fs: &SimVfs,
    mode: OpenMode,
) -> Arc<T> {
    let params = Params::parse(params).unwrap();
    Arc::new(open(Path::new(path), &params, Arc::new(fs.clone()), mode).unwrap())
}

/// Make `indexes` on a new table.
fn make_indexes(db: &dyn Store, indexes: &[(&str, IndexType)]) {
    let t = db.table().expect("a table");
    for (column, typ) in indexes {
        let op = IndexOp::Make {
            typ: *typ,
            keep: false,
        };
        assert!(t.set_index(column.as_bytes(), op).unwrap());
    }
}

/// The kinds this run tests (`KURA_CONFORMANCE_KIND` picks one by label).
pub(crate) fn kinds() -> Vec<&'static KindUnderTest> {
    let only = std::env::var("KURA_CONFORMANCE_KIND").ok();
    let picked: Vec<_> = KINDS
        .iter()
        .filter(|k| only.as_deref().is_none_or(|l| l == k.label))
        .collect();
    assert!(
        !picked.is_empty(),
        "KURA_CONFORMANCE_KIND={only:?} names no kind (labels: {:?})",
        KINDS.iter().map(|k| k.label).collect::<Vec<_>>()
    );
    picked
}

/// Records a keyspace under test must not show, written when its database is made: in the
/// database itself and in a sibling keyspace, some by one batch across both.
pub(crate) fn write_beside(db: &dyn Store, params: &str) {
    let other = db.keyspace("other", params).unwrap();
    for k in ["k1", "k2", "k12", "t0-k1", "zz"] {
        db.put(k.as_bytes(), b"the database's").unwrap();
        other.put(k.as_bytes(), b"another keyspace's").unwrap();
    }
    let put = |key: &[u8]| BatchOp::Put {
        key: key.to_vec(),
        value: b"across".to_vec(),
        flags: 0,
        expires: 0,
    };
    db.write_across(&[("", put(b"k3")), ("other", put(b"k3"))])
        .unwrap();
}

/// Whether the records `write_beside` wrote are there, untouched.
pub(crate) fn check_beside(db: &dyn Store) {
    assert_eq!(db.get(b"k3").unwrap().unwrap().value, b"across");
    let other = db.keyspace("other", "").unwrap();
    assert_eq!(other.count(), 6, "the other keyspace's records");
    assert_eq!(
        other.get(b"zz").unwrap().unwrap().value,
        b"another keyspace's"
    );
    assert_eq!(other.get(b"k3").unwrap().unwrap().value, b"across");
}

/// An open database of one kind, with what it needs to restart.
pub(crate) struct Db {
    pub(crate) kind: &'static KindUnderTest,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) fs: SimVfs,
    /// `None` only while restarting.
    pub(crate) handle: Option<Handle>,
    pub(crate) copies: u32,
}

pub(crate) enum Handle {
    Named(Arc<dyn Store>),
    /// A keyspace, and the database it belongs to (kept open).
    Keyspace(Arc<dyn Store>, Arc<dyn Store>),
    SimKeyspace(Arc<dyn Store>, Arc<DiskTree>),
    SimHashKeyspace(Arc<dyn Store>, Arc<DiskHash>),
    Sim(Arc<DiskHash>),
    SimTree(Arc<DiskTree>),
    SimFixed(Arc<FixedDb>),
    SimTable(Arc<TableDb>),
}

impl Db {
    pub(crate) fn open(kind: &'static KindUnderTest) -> Db {
        let dir = tempfile::tempdir().unwrap();
        let fs = SimVfs::new();
        let handle = Self::open_handle(kind, dir.path(), &fs, OpenMode::Create);
        Db {
            kind,
            dir,
            fs,
            handle: Some(handle),
            copies: 0,
        }
    }

    pub(crate) fn open_handle(
        kind: &KindUnderTest,
        dir: &Path,
        fs: &SimVfs,
        mode: OpenMode,
    ) -> Handle {
        match kind.open {
            Opener::Name(name) => {
                let name = name.replace("{dir}", dir.to_str().unwrap());
                Handle::Named(kura_engine::open_as(&name, mode).unwrap().store)
            }
            Opener::SimDiskHash(params) => Handle::Sim(Arc::new(
                DiskHash::open_with(
                    Path::new(SIM_PATH),
                    &Params::parse(params).unwrap(),
                    Arc::new(fs.clone()),
                    false,
                )
                .unwrap(),
            )),
            Opener::SimDiskTree(params) => {
                Handle::SimTree(on_sim(DiskTree::open_mode, SIM_TREE_PATH, params, fs, mode))
            }
            Opener::Keyspace(name, params) => {
                let name = name.replace("{dir}", dir.to_str().unwrap());
                let mode = if name.starts_with(['*', '+']) {
                    OpenMode::Create
                } else {
                    mode
                };
                let db = kura_engine::open_as(&name, mode).unwrap().store;
                let ks = db.keyspace("ks", params).unwrap();
                if mode == OpenMode::Create {
                    write_beside(&*db, params);
                }
                Handle::Keyspace(ks, db)
            }
            Opener::SimKeyspace(db_params, params) => {
                let db = on_sim(DiskTree::open_mode, SIM_TREE_PATH, db_params, fs, mode);
                let ks = db.keyspace("ks", params).unwrap();
                if mode == OpenMode::Create {
                    write_beside(&*db, params);
                }
                Handle::SimKeyspace(ks, db)
            }
            Opener::SimHashKeyspace(db_params, params) => {
                let db = on_sim(DiskHash::open_mode, SIM_PATH, db_params, fs, mode);
                let ks = db.keyspace("ks", params).unwrap();
                if mode == OpenMode::Create {
                    write_beside(&*db, params);
                }
                Handle::SimHashKeyspace(ks, db)
            }
            Opener::Table(name, indexes) => {
                let name = name.replace("{dir}", dir.to_str().unwrap());
                let db = kura_engine::open_as(&name, mode).unwrap().store;
                if mode == OpenMode::Create {
                    make_indexes(&*db, indexes);
                }
                Handle::Named(db)
            }
            Opener::SimTable(params, indexes) => {
                let db = on_sim(TableDb::open_mode, SIM_TABLE_PATH, params, fs, mode);
                if mode == OpenMode::Create {
                    make_indexes(&*db, indexes);
                }
                Handle::SimTable(db)
            }
            Opener::SimFixed(params) => {
                Handle::SimFixed(on_sim(FixedDb::open_mode, SIM_FIXED_PATH, params, fs, mode))
            }
        }
    }

    pub(crate) fn store(&self) -> Arc<dyn Store> {
        match self.handle.as_ref().expect("open") {
            Handle::Named(s) => s.clone(),
            Handle::Keyspace(s, _) | Handle::SimKeyspace(s, _) | Handle::SimHashKeyspace(s, _) => {
                s.clone()
            }
            Handle::Sim(d) => d.clone(),
            Handle::SimTree(d) => d.clone(),
            Handle::SimFixed(d) => d.clone(),
            Handle::SimTable(d) => d.clone(),
        }
    }

    /// Restart as the kind defines it; `seed` picks how a crash tears unsynced writes.
    pub(crate) fn restart(&mut self, seed: u64) {
        let old = self.handle.take().expect("open");
        match (&self.kind.restart, old) {
            (Restart::None, old) => {
                self.handle = Some(old);
                return;
            }
            (Restart::Reopen, Handle::Named(s)) => s.close().unwrap(),
            (Restart::Reopen, Handle::Keyspace(s, db)) => {
                s.close().unwrap();
                // The database and its other keyspace kept their own records.
                db.close().unwrap();
                drop(db);
                let db = kura_engine::open_as(
                    &match self.kind.open {
                        Opener::Keyspace(name, _) => {
                            name.replace("{dir}", self.dir.path().to_str().unwrap())
                        }
                        _ => unreachable!(),
                    },
                    OpenMode::Existing,
                )
                .unwrap()
                .store;
                check_beside(&*db);
                db.close().unwrap();
            }
            (Restart::Crash, Handle::SimKeyspace(s, db)) => {
                drop(s);
                Arc::into_inner(db)
                    .expect("no other handle at a crash")
                    .abandon();
                self.fs.crash(CrashMode::Torn { seed });
                let handle =
                    Self::open_handle(self.kind, self.dir.path(), &self.fs, OpenMode::Existing);
                if let Handle::SimKeyspace(_, db) = &handle {
                    check_beside(&**db);
                }
                self.handle = Some(handle);
                return;
            }
            (Restart::Crash, Handle::SimHashKeyspace(s, db)) => {
                drop(s);
                Arc::into_inner(db)
                    .expect("no other handle at a crash")
                    .abandon();
                self.fs.crash(CrashMode::Torn { seed });
                let handle =
                    Self::open_handle(self.kind, self.dir.path(), &self.fs, OpenMode::Existing);
                if let Handle::SimHashKeyspace(_, db) = &handle {
                    check_beside(&**db);
                }
                self.handle = Some(handle);
                return;
            }
            (Restart::Reopen, Handle::SimKeyspace(..) | Handle::SimHashKeyspace(..)) => {
                panic!("a keyspace on SimVfs restarts by a crash")
            }
            (Restart::Reopen, Handle::Sim(d)) => d.close().unwrap(),
            (Restart::Reopen, Handle::SimTree(d)) => d.close().unwrap(),
            (Restart::Crash, Handle::SimTree(d)) => {
                Arc::into_inner(d)
                    .expect("no other handle at a crash")
                    .abandon();
                self.fs.crash(CrashMode::Torn { seed });
            }
            (Restart::Reopen, Handle::SimFixed(d)) => d.close().unwrap(),
            (Restart::Reopen, Handle::SimTable(d)) => d.close().unwrap(),
            (Restart::Crash, Handle::SimTable(d)) => {
                Arc::into_inner(d)
                    .expect("no other handle at a crash")
                    .abandon();
                self.fs.crash(CrashMode::Torn { seed });
            }
            (Restart::Crash, Handle::Sim(d)) => {
                Arc::into_inner(d)
                    .expect("no other handle at a crash")
                    .abandon();
                self.fs.crash(CrashMode::Torn { seed });
            }
            (Restart::Crash, Handle::SimFixed(d)) => {
                Arc::into_inner(d)
                    .expect("no other handle at a crash")
                    .abandon();
                self.fs.crash(CrashMode::Torn { seed });
            }
            (Restart::Crash, Handle::Named(_) | Handle::Keyspace(..)) => {
                panic!("a crash restart needs a SimDiskHash opener")
            }
        }
        let handle = Self::open_handle(self.kind, self.dir.path(), &self.fs, OpenMode::Existing);
        self.handle = Some(handle);
    }
}
