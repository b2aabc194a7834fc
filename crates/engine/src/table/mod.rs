//! The table database (`PATH.kt`): records of named columns under a primary key, with
//! secondary indexes (docs/architecture/kinds.md, "The table database").
//!
//! A table is an on-disk B+ tree database (its directory, log, checkpoint and cache are a
//! `.kb`'s) whose keyspaces hold:
//! - the database itself (keyspace `""`): the records, primary key → the columns' stored form
//!   (`record`), in primary-key order;
//! - `kt.meta`: what the table is — `format` (1), `posting_form` (2: token and q-gram indexes are
//!   posting lists, see `postings`; a table without it, from an older build, is refused while
//!   it has such an index, until `repair` rebuilds them), `uid` (the ceiling of the unique ids handed
//!   out, see [`Table::genuid`]), `next_space` (the id of the next index keyspace) and, for each
//!   index, `i` + column → its type, keyspace id and build state;
//! - `kt.idx.<id>`, one per index: its entries (`terms`), in byte order.
//!
//! A record and its index entries change in one batch across keyspaces
//! ([`Store::write_across`]), so after any crash they agree. Writers of one primary key are
//! serialized by a lock stripe (one of [`STRIPES`], by the key's hash) held across the read of
//! the old record, the computation of the index changes and the batch; writers of other keys
//! proceed in parallel.
//!
//! An index made on a table that has records is built online, in steps of [`BUILD_STEP`]
//! records: each step locks the stripes of its records, reads them and writes their entries
//! and the build's position in one batch. Writers maintain an index from the moment it is
//! made (the schema is read under the stripe lock), so a record written during the build is
//! right whether the build has passed it or not. A build cut short by a crash goes on from its
//! position at the next writable open; queries use an index only once it is built
//! ([`Table::index`]).

mod api;
mod indexes;
pub mod postings;
pub mod query;
pub mod record;
pub mod terms;
#[cfg(test)]
mod tests;

pub use record::Columns;
pub use terms::{Entry, IndexOp, IndexType};

use crate::config::{OpenMode, Params};
use crate::error::{Error, Result};
use crate::io::Vfs;
use crate::log::format::{get_varint, put_varint};
use crate::store::{BatchOp, KeyRange, Meta, RepairReport, Store};
use crate::tree::DiskTree;
use arc_swap::ArcSwap;
use parking_lot::{Mutex, MutexGuard};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The parameters a `.kt` name accepts (the B+ tree's, but its order: records are in
/// primary-key byte order).
pub const PARAMS: &[&str] = &[
    "cache", "compress", "leafsiz", "sync", "segsiz", "bufsiz", "ckptsiz",
];

/// The keyspace of the table's metadata.
pub const META_SPACE: &str = "kt.meta";
/// Index keyspaces are named this and their id.
pub const INDEX_SPACE: &str = "kt.idx.";
/// Lock stripes of the write path.
pub const STRIPES: usize = 1024;
/// Lock stripes of the posting lists (by index and term; see `postings`).
pub const TERM_STRIPES: usize = 1024;
/// Records an index build step takes.
pub const BUILD_STEP: usize = 256;
/// Unique ids reserved at a time (one synced metadata write per block).
pub const UID_BLOCK: u64 = 1024;
/// The metadata's format.
const FORMAT: &[u8] = b"1";

const K_FORMAT: &[u8] = b"format";
/// The form of token and q-gram indexes: absent in tables of builds that kept an entry per
/// (term, record); [`IXFORM`] for posting lists.
const K_IXFORM: &[u8] = b"posting_form";
const IXFORM: &[u8] = b"2";
const K_UID: &[u8] = b"uid";
const K_NEXT_SPACE: &[u8] = b"next_space";
/// An index's metadata key: this byte, then the column.
const K_INDEX: u8 = b'i';

/// How [`Table::put_row`] treats an existing record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutMode {
    /// Replace it (`put`).
    Replace,
    /// Keep it and store nothing (`putkeep`).
    Keep,
    /// Merge the columns into it (`putcat`): those it does not have are added, its own keep
    /// their values (Tokyo Cabinet's `tctdbputcat`).
    Cat,
}

/// An index as [`Table::indexes`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexInfo {
    pub column: Vec<u8>,
    pub typ: IndexType,
    /// Built: queries may use it.
    pub ready: bool,
    /// Its entries (for a token or q-gram index, its (term, record) postings, counted from
    /// its chunks: a read of the whole index).
    pub entries: u64,
}

/// The operations of a table database, reached through [`Store::table`] (servers never name
/// the kind). Through the plain [`Store`] interface a record's value is its wire form
/// (`record`).
pub trait Table: Send + Sync {
    /// Store `cols` as the record of `pk` (see [`PutMode`]). False only for [`PutMode::Keep`]
    /// when a record exists.
    fn put_row(&self, pk: &[u8], cols: &Columns, mode: PutMode) -> Result<bool>;
    /// Remove the record of `pk`; whether there was one.
    fn out_row(&self, pk: &[u8]) -> Result<bool>;
    /// The record of `pk`.
    fn get_row(&self, pk: &[u8]) -> Result<Option<Columns>>;
    /// The columns of the record of `pk` named in `names` (in the record's order; a record
    /// without any of them gives no columns).
    fn get_columns(&self, pk: &[u8], names: &[&[u8]]) -> Result<Option<Columns>> {
        Ok(self.get_row(pk)?.map(|c| c.only(names)))
    }
    /// A new unique id (Tokyo Cabinet's `genuid`): increasing, never handed out twice, even
    /// across a crash (ids are reserved in blocks of [`UID_BLOCK`] by a synced write, so a
    /// restart skips the rest of a block).
    fn genuid(&self) -> Result<u64>;
    /// Tokyo Cabinet's `setindex` on `column` (`""`: the primary key). False only for a
    /// `keep` make when the column has an index. [`Error::NotFound`] for an optimize or a
    /// drop of a column without an index. A make returns when the index is built.
    fn set_index(&self, column: &[u8], op: IndexOp) -> Result<bool>;
    /// Every index, by column.
    fn indexes(&self) -> Vec<IndexInfo>;
    /// The built index of `column`: its type and its keyspace, read-only for the query layer
    /// (entries or posting chunks as `terms` and `postings` describe them; read them with
    /// `postings::for_each_posting` and `postings::count`).
    fn index(&self, column: &[u8]) -> Option<(IndexType, Arc<dyn Store>)>;
    /// Call `f` with each record whose primary key is in `range`, in primary-key order (or
    /// descending), until it returns false; how many were shown.
    fn for_each_row(
        &self,
        range: &KeyRange<'_>,
        f: &mut dyn FnMut(&[u8], &Columns) -> Result<bool>,
    ) -> Result<u64>;
    /// [`Table::for_each_row`] with only the columns named in `names` decoded (a record
    /// without any of them shows no columns): what a scan that judges a few columns reads.
    fn for_each_row_of(
        &self,
        range: &KeyRange<'_>,
        names: &[&[u8]],
        f: &mut dyn FnMut(&[u8], &Columns) -> Result<bool>,
    ) -> Result<u64> {
        self.for_each_row(range, &mut |k, c| f(k, &c.only(names)))
    }
    /// Records.
    fn rows(&self) -> u64;
    /// Every way the built indexes disagree with the records (empty: they agree). Exact while
    /// writers run: each record and each entry is judged under its record's lock.
    fn check_indexes(&self) -> Result<Vec<String>>;
    /// Rebuild every index from the records (online, as a new index is built).
    fn rebuild_indexes(&self) -> Result<()>;
}

/// [`Table::put_row`] done through `store`'s own `accept` on the wire form: how a wrapper of a
/// table (the update log's `Logged`) writes rows so that its own rules (logging) apply to them.
pub fn put_row_through(
    store: &dyn Store,
    pk: &[u8],
    cols: &Columns,
    mode: PutMode,
) -> Result<bool> {
    let mut stored = false;
    let mut bad: Option<Error> = None;
    store.accept(pk, &mut |cur| {
        let (value, flags) = match (mode, cur) {
            (PutMode::Keep, Some(_)) => return crate::store::Decision::Keep,
            (PutMode::Cat, Some(c)) => match Columns::from_wire(c.value) {
                Ok(mut old) => {
                    old.merge(cols);
                    (old.to_wire(), c.meta.flags)
                }
                Err(e) => {
                    bad = Some(e);
                    return crate::store::Decision::Keep;
                }
            },
            (_, cur) => (cols.to_wire(), cur.map_or(0, |c| c.meta.flags)),
        };
        stored = true;
        crate::store::Decision::Put {
            value: crate::store::Value::Made(value),
            flags,
            expires: 0,
        }
    })?;
    match bad {
        Some(e) => Err(e),
        None => Ok(stored),
    }
}

/// Where an index's build is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Build {
    Ready,
    /// Records after this primary key (all, when `None`) are still to be indexed; `None` also
    /// means the index keyspace may hold stale entries (a vanish or a rebuild was cut short)
    /// and is emptied before the build.
    From(Option<Vec<u8>>),
}

fn index_meta(typ: IndexType, id: u64, build: &Build) -> Vec<u8> {
    let mut v = vec![typ.code()];
    put_varint(&mut v, id);
    match build {
        Build::Ready => v.push(0),
        Build::From(None) => v.push(1),
        Build::From(Some(k)) => {
            v.push(2);
            v.extend_from_slice(k);
        }
    }
    v
}

fn parse_index_meta(b: &[u8]) -> Result<(IndexType, u64, Build)> {
    let bad = || Error::Corrupt("a table's index description does not parse".into());
    let typ = b
        .first()
        .and_then(|&c| IndexType::from_code(c))
        .ok_or_else(bad)?;
    let mut pos = 1;
    let id = get_varint(b, &mut pos).ok_or_else(bad)?;
    let build = match b.get(pos) {
        Some(0) => Build::Ready,
        Some(1) => Build::From(None),
        Some(2) => Build::From(Some(b[pos + 1..].to_vec())),
        _ => return Err(bad()),
    };
    Ok((typ, id, build))
}

fn index_key(column: &[u8]) -> Vec<u8> {
    let mut k = vec![K_INDEX];
    k.extend_from_slice(column);
    k
}

fn put_op(key: Vec<u8>, value: Vec<u8>, flags: u32) -> BatchOp {
    BatchOp::Put {
        key,
        value,
        flags,
        expires: 0,
    }
}

/// One index of the schema.
struct Index {
    column: Vec<u8>,
    typ: IndexType,
    id: u64,
    space: String,
    store: Arc<dyn Store>,
    ready: AtomicBool,
}

impl Index {
    /// The terms the record `cols` of `pk` makes in this posting-list index (term → offsets).
    fn terms(&self, pk: &[u8], cols: Option<&Columns>) -> BTreeMap<Vec<u8>, Vec<u32>> {
        let v = match cols {
            Some(_) if self.column.is_empty() => Some(pk),
            Some(c) => c.get(&self.column),
            None => None,
        };
        v.map_or_else(BTreeMap::new, |v| terms::postings_of(self.typ, v))
    }

    /// Whether it keeps posting lists.
    fn chunked(&self) -> bool {
        postings::chunked(self.typ)
    }

    /// The entries the record `cols` of `pk` makes in this index.
    fn entries(&self, pk: &[u8], cols: Option<&Columns>) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut m = BTreeMap::new();
        if let Some(c) = cols {
            let v = if self.column.is_empty() {
                Some(pk)
            } else {
                c.get(&self.column)
            };
            if let Some(v) = v {
                terms::entries_of(self.typ, pk, v, &mut m);
            }
        }
        m
    }
}

/// One record change of a batch: its primary key and its new columns and flags (`None`:
/// remove it).
pub(crate) type RowChange<'a> = (&'a [u8], Option<(Columns, u32)>);

/// What an update decides.
pub(crate) enum Change {
    Keep,
    Put(Columns, u32),
    Remove,
}

/// A table database.
pub struct TableDb {
    db: DiskTree,
    meta: Arc<dyn Store>,
    /// The indexes; replaced whole under `schema_lock`, read (without a lock) by writers
    /// under their stripe.
    schema: ArcSwap<Vec<Arc<Index>>>,
    /// Serializes `set_index`, `rebuild_indexes` and `vanish`.
    schema_lock: Mutex<()>,
    stripes: Box<[Mutex<()>]>,
    /// Held (after the records' stripes) while a term's chunks are read and rewritten.
    term_stripes: Box<[Mutex<()>]>,
    /// (next id, ceiling reserved in the metadata).
    uid: Mutex<(u64, u64)>,
    readonly: bool,
}

impl TableDb {
    /// Open (creating when missing) the table at `path` on the real file system.
    pub fn open(path: &Path, params: &Params) -> Result<TableDb> {
        Self::open_mode(path, params, Arc::new(crate::io::OsVfs), OpenMode::Create)
    }

    /// Open on any file system under `mode`. A build cut short by a crash is finished here
    /// (writable opens).
    pub fn open_mode(
        path: &Path,
        params: &Params,
        vfs: Arc<dyn Vfs>,
        mode: OpenMode,
    ) -> Result<TableDb> {
        Self::open_inner(path, params, vfs, mode, false)
    }

    /// [`TableDb::open_mode`]; with `upgrade`, token and q-gram indexes of an older build's
    /// form are rebuilt (repair) rather than refused.
    fn open_inner(
        path: &Path,
        params: &Params,
        vfs: Arc<dyn Vfs>,
        mode: OpenMode,
        upgrade: bool,
    ) -> Result<TableDb> {
        params.allow_only("a table (.kt)", PARAMS)?;
        let db = DiskTree::open_mode(path, params, vfs, mode)?;
        match Self::over(db, mode == OpenMode::ReadOnly, path, upgrade) {
            Ok(t) => Ok(t),
            Err((db, e)) => {
                let _ = db.close();
                Err(e)
            }
        }
    }

    fn over(
        db: DiskTree,
        readonly: bool,
        path: &Path,
        upgrade: bool,
    ) -> std::result::Result<TableDb, (DiskTree, Error)> {
        let spaces = db.keyspaces();
        let has_meta = spaces.iter().any(|(n, _)| n == META_SPACE);
        if !has_meta {
            if db.count() > 0 || !spaces.is_empty() {
                let e = Error::NotADatabase(format!(
                    "{} is a tree database (.kb), not a table: it has no `{META_SPACE}`",
                    path.display()
                ));
                return Err((db, e));
            }
            if readonly {
                let e = Error::NotFound(format!("no table at {}", path.display()));
                return Err((db, e));
            }
        }
        let meta = match db.keyspace(META_SPACE, "cmp=lex") {
            Ok(m) => m,
            Err(e) => return Err((db, e)),
        };
        let t = TableDb {
            db,
            meta,
            schema: ArcSwap::new(Arc::new(Vec::new())),
            schema_lock: Mutex::new(()),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            term_stripes: (0..TERM_STRIPES).map(|_| Mutex::new(())).collect(),
            uid: Mutex::new((1, 1)),
            readonly,
        };
        match t.load(has_meta, path, upgrade) {
            Ok(()) => Ok(t),
            Err(e) => Err((t.db, e)),
        }
    }

    /// Read (or, for a new table, write) the metadata; finish cut-short builds.
    fn load(&self, has_meta: bool, path: &Path, upgrade: bool) -> Result<()> {
        // A creation cut short by a crash leaves the metadata's keyspace empty (and nothing
        // else: no write is taken before the open that creates the table returns).
        if !has_meta || self.meta.count() == 0 {
            if self.readonly {
                return Err(Error::NotFound(
                    "no table (its creation was cut short)".into(),
                ));
            }
            self.meta.write_batch(&[
                put_op(K_FORMAT.to_vec(), FORMAT.to_vec(), 0),
                put_op(K_IXFORM.to_vec(), IXFORM.to_vec(), 0),
            ])?;
            self.db.sync()?;
        }
        match self.meta.get(K_FORMAT)? {
            Some(r) if r.value == FORMAT => {}
            Some(r) => {
                return Err(Error::NotADatabase(format!(
                    "a table of format {} (this build reads format 1)",
                    String::from_utf8_lossy(&r.value)
                )))
            }
            None => return Err(Error::Corrupt("a table without its format".into())),
        }
        let ceiling = match self.meta.get(K_UID)? {
            Some(r) => std::str::from_utf8(&r.value)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| Error::Corrupt("a table's uid ceiling does not parse".into()))?,
            None => 1,
        };
        *self.uid.lock() = (ceiling, ceiling);
        let mut described = Vec::new();
        let from = [K_INDEX];
        let to = [K_INDEX + 1];
        self.meta.for_each_in_range(
            &KeyRange {
                from: Bound::Included(&from),
                to: Bound::Excluded(&to),
                desc: false,
                max: usize::MAX,
            },
            &mut |k, v, _| {
                described.push((k[1..].to_vec(), v.to_vec()));
                Ok(true)
            },
        )?;
        let old_form = match self.meta.get(K_IXFORM)? {
            None => true,
            Some(r) if r.value == IXFORM => false,
            Some(r) => {
                return Err(Error::NotADatabase(format!(
                    "a table whose token and q-gram indexes are of form {} (this build reads \
                     form 2)",
                    String::from_utf8_lossy(&r.value)
                )))
            }
        };
        let mut schema = Vec::new();
        let mut builds = Vec::new();
        let mut upgraded = false;
        for (column, v) in described {
            let (typ, id, mut build) = parse_index_meta(&v)?;
            if old_form && postings::chunked(typ) {
                if !upgrade || self.readonly {
                    return Err(Error::NotADatabase(format!(
                        "{}: its {} index on column `{}` is in the form of an older build (an \
                         entry per term and record, where this build keeps posting lists); \
                         run `kura db repair {} NEW.kt` (or `--in-place`) to rebuild its \
                         indexes",
                        path.display(),
                        typ.name(),
                        String::from_utf8_lossy(&column),
                        path.display()
                    )));
                }
                build = Build::From(None);
                upgraded = true;
            }
            let space = format!("{INDEX_SPACE}{id}");
            let store = self.db.keyspace(&space, "cmp=lex")?;
            let ix = Arc::new(Index {
                column,
                typ,
                id,
                space,
                store,
                ready: AtomicBool::new(build == Build::Ready),
            });
            if build != Build::Ready {
                builds.push((ix.clone(), build));
            }
            schema.push(ix);
        }
        self.schema.store(Arc::new(schema));
        if self.readonly {
            return Ok(());
        }
        if upgraded {
            // Old-form entries are dropped before anything reads them as chunks.
            for (ix, _) in &builds {
                self.describe_index(ix, &Build::From(None))?;
            }
        }
        // Index keyspaces no index owns (a drop cut short) are emptied.
        let owned: Vec<String> = self.schema().iter().map(|i| i.space.clone()).collect();
        for (name, _) in self.db.keyspaces() {
            if name.starts_with(INDEX_SPACE) && !owned.contains(&name) {
                let s = self.db.keyspace(&name, "")?;
                if s.count() > 0 {
                    s.vanish()?;
                }
            }
        }
        let _s = self.schema_lock.lock();
        for (ix, build) in builds {
            let from = match build {
                Build::From(Some(k)) => Some(k),
                _ => {
                    ix.store.vanish()?;
                    None
                }
            };
            self.build(&ix, from)?;
        }
        if old_form {
            self.meta
                .write_batch(&[put_op(K_IXFORM.to_vec(), IXFORM.to_vec(), 0)])?;
            self.db.sync()?;
        }
        Ok(())
    }

    /// The database under the table (its records are the table's stored forms).
    pub fn tree(&self) -> &DiskTree {
        &self.db
    }

    /// Write a checkpoint now (tests and tools).
    pub fn checkpoint(&self) -> Result<()> {
        self.db.checkpoint()
    }

    /// Stop as a killed process would (the crash tests).
    pub fn abandon(self) {
        let TableDb {
            db, meta, schema, ..
        } = self;
        drop(meta);
        drop(schema);
        db.abandon();
    }

    fn schema(&self) -> Arc<Vec<Arc<Index>>> {
        self.schema.load_full()
    }

    fn stripe(&self, pk: &[u8]) -> &Mutex<()> {
        let h = xxhash_rust::xxh3::xxh3_64(pk) as usize;
        &self.stripes[h & (STRIPES - 1)]
    }

    /// Lock the stripes of every key in `keys`, in stripe order (the one order every holder of
    /// several takes them in).
    fn lock_keys<'a>(&'a self, keys: impl Iterator<Item = &'a [u8]>) -> Vec<MutexGuard<'a, ()>> {
        let mut ids: Vec<usize> = keys
            .map(|k| xxhash_rust::xxh3::xxh3_64(k) as usize & (STRIPES - 1))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter().map(|i| self.stripes[i].lock()).collect()
    }

    /// Every stripe, held: no writer is between its read and its batch.
    fn lock_all(&self) -> Vec<MutexGuard<'_, ()>> {
        self.stripes.iter().map(|s| s.lock()).collect()
    }

    /// The record of `pk`, decoded.
    fn read(&self, pk: &[u8]) -> Result<Option<(Columns, Meta)>> {
        match self.db.get(pk)? {
            Some(r) => Ok(Some((record::decode(&r.value)?, r.meta))),
            None => Ok(None),
        }
    }

    /// The index changes that turn the entries of `old` into those of `new` for `pk`: entry
    /// writes into `ops`, posting changes into `post` (one per index of `schema`, applied by
    /// [`TableDb::post_ops`]).
    fn index_ops<'s>(
        schema: &'s [Arc<Index>],
        pk: &[u8],
        old: Option<&Columns>,
        new: Option<&Columns>,
        ops: &mut Vec<(&'s str, BatchOp)>,
        post: &mut [postings::Changes],
    ) {
        for (ix, changes) in schema.iter().zip(post.iter_mut()) {
            if ix.chunked() {
                let before = ix.terms(pk, old);
                let after = ix.terms(pk, new);
                for t in before.keys() {
                    if !after.contains_key(t) {
                        changes
                            .entry(t.clone())
                            .or_default()
                            .insert(pk.to_vec(), None);
                    }
                }
                for (t, offs) in after {
                    if before.get(&t) != Some(&offs) {
                        changes
                            .entry(t)
                            .or_default()
                            .insert(pk.to_vec(), Some(offs));
                    }
                }
                continue;
            }
            let before = ix.entries(pk, old);
            let after = ix.entries(pk, new);
            for k in before.keys() {
                if !after.contains_key(k) {
                    ops.push((&ix.space, BatchOp::Remove { key: k.clone() }));
                }
            }
            for (k, v) in after {
                if before.get(&k) != Some(&v) {
                    ops.push((&ix.space, put_op(k, v, 0)));
                }
            }
        }
    }

    /// Lock the term stripes of every term in `post` (in stripe order; the caller holds the
    /// records' stripes), then append the chunk writes that make the changes to `ops`. The
    /// guards are held until the batch is written.
    fn post_ops<'s>(
        &'s self,
        schema: &'s [Arc<Index>],
        post: &[postings::Changes],
        ops: &mut Vec<(&'s str, BatchOp)>,
    ) -> Result<Vec<MutexGuard<'s, ()>>> {
        self.post_ops_of(schema.iter().map(|i| &**i).zip(post), ops)
    }

    /// [`TableDb::post_ops`] for (index, changes) pairs.
    fn post_ops_of<'s, 'c>(
        &'s self,
        parts: impl Iterator<Item = (&'s Index, &'c postings::Changes)> + Clone,
        ops: &mut Vec<(&'s str, BatchOp)>,
    ) -> Result<Vec<MutexGuard<'s, ()>>> {
        let mut ids: Vec<usize> = Vec::new();
        for (ix, changes) in parts.clone() {
            for t in changes.keys() {
                ids.push(self.term_stripe(ix.id, t));
            }
        }
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        ids.sort_unstable();
        ids.dedup();
        let guards = ids
            .into_iter()
            .map(|i| self.term_stripes[i].lock())
            .collect();
        let mut chunk_ops = Vec::new();
        for (ix, changes) in parts {
            if changes.is_empty() {
                continue;
            }
            postings::edit(&*ix.store, ix.typ, changes, &mut chunk_ops)?;
            ops.extend(chunk_ops.drain(..).map(|op| (ix.space.as_str(), op)));
        }
        Ok(guards)
    }

    fn term_stripe(&self, index: u64, term: &[u8]) -> usize {
        let h = xxhash_rust::xxh3::xxh3_64_with_seed(term, index) as usize;
        h & (TERM_STRIPES - 1)
    }

    /// Look at the record of `pk` and apply what `f` decides, with the index changes, in one
    /// batch, under the key's stripe. Returns `f`'s result and whether anything was written.
    pub(crate) fn update<R>(
        &self,
        pk: &[u8],
        f: impl FnOnce(Option<(&Columns, Meta)>) -> (Change, R),
    ) -> Result<(R, bool)> {
        self.update_with(pk, f, None)
    }

    /// [`TableDb::update`]; after a write, `after` (when given) is set to the record's
    /// metadata as the write left it (read under the stripe: no other writer between).
    pub(crate) fn update_with<R>(
        &self,
        pk: &[u8],
        f: impl FnOnce(Option<(&Columns, Meta)>) -> (Change, R),
        after: Option<&mut Option<Meta>>,
    ) -> Result<(R, bool)> {
        let _g = self.stripe(pk).lock();
        let old = self.read(pk)?;
        let (change, r) = f(old.as_ref().map(|(c, m)| (c, *m)));
        let schema = self.schema();
        let mut ops: Vec<(&str, BatchOp)> = Vec::new();
        let old_cols = old.as_ref().map(|(c, _)| c);
        let mut post = vec![postings::Changes::new(); schema.len()];
        match change {
            Change::Keep => return Ok((r, false)),
            Change::Remove if old.is_none() => return Ok((r, false)),
            Change::Remove => {
                ops.push(("", BatchOp::Remove { key: pk.to_vec() }));
                Self::index_ops(&schema, pk, old_cols, None, &mut ops, &mut post);
            }
            Change::Put(cols, flags) => {
                ops.push(("", put_op(pk.to_vec(), cols.encode(), flags)));
                Self::index_ops(&schema, pk, old_cols, Some(&cols), &mut ops, &mut post);
            }
        }
        let _t = self.post_ops(&schema, &post, &mut ops)?;
        self.db.write_across(&ops)?;
        if let Some(a) = after {
            *a = self.db.get(pk)?.map(|r| r.meta);
        }
        Ok((r, true))
    }

    /// Apply several record changes (each a key and its new columns, `None`: remove) as one
    /// batch: the last change of a key decides.
    pub(crate) fn update_many(&self, changes: &[RowChange<'_>]) -> Result<()> {
        let _g = self.lock_keys(changes.iter().map(|(k, _)| *k));
        let schema = self.schema();
        let mut last: BTreeMap<&[u8], &Option<(Columns, u32)>> = BTreeMap::new();
        for (k, c) in changes {
            last.insert(k, c);
        }
        let mut olds = Vec::with_capacity(last.len());
        for k in last.keys() {
            olds.push(self.read(k)?.map(|(c, _)| c));
        }
        let mut ops: Vec<(&str, BatchOp)> = Vec::new();
        let mut post = vec![postings::Changes::new(); schema.len()];
        for ((k, new), old) in last.iter().zip(&olds) {
            match new {
                Some((cols, flags)) => {
                    ops.push(("", put_op(k.to_vec(), cols.encode(), *flags)));
                    Self::index_ops(&schema, k, old.as_ref(), Some(cols), &mut ops, &mut post);
                }
                None if old.is_some() => {
                    ops.push(("", BatchOp::Remove { key: k.to_vec() }));
                    Self::index_ops(&schema, k, old.as_ref(), None, &mut ops, &mut post);
                }
                None => {}
            }
        }
        let _t = self.post_ops(&schema, &post, &mut ops)?;
        if ops.is_empty() {
            return Ok(());
        }
        self.db.write_across(&ops)
    }

    /// Write a new table at `dst` holding every readable record of the damaged table at `src`
    /// (the B+ tree's repair), its indexes rebuilt from those records.
    pub fn repair_with(
        src: &Path,
        dst: &Path,
        params: &Params,
        vfs: Arc<dyn Vfs>,
    ) -> Result<RepairReport> {
        let rep = DiskTree::repair_with(src, dst, params, vfs.clone())?;
        Self::reindex(dst, vfs)?;
        Ok(rep)
    }

    /// `repair_with` beside `src`, then swap (see `DiskTree::repair_in_place`).
    pub fn repair_in_place(
        src: &Path,
        params: &Params,
        vfs: Arc<dyn Vfs>,
    ) -> Result<(RepairReport, PathBuf)> {
        let (rep, old) = DiskTree::repair_in_place(src, params, vfs.clone())?;
        Self::reindex(src, vfs)?;
        Ok((rep, old))
    }

    fn reindex(path: &Path, vfs: Arc<dyn Vfs>) -> Result<()> {
        let t = TableDb::open_inner(path, &Params::default(), vfs, OpenMode::Existing, true)?;
        t.rebuild_indexes()?;
        t.db.close()
    }
}

impl Table for TableDb {
    fn put_row(&self, pk: &[u8], cols: &Columns, mode: PutMode) -> Result<bool> {
        crate::store::check_sizes(pk, cols.0.iter().map(|(n, v)| n.len() + v.len() + 4).sum())?;
        let (stored, _) = self.update(pk, |cur| match (mode, cur) {
            (PutMode::Keep, Some(_)) => (Change::Keep, false),
            (PutMode::Cat, Some((old, m))) => {
                let mut c = old.clone();
                c.merge(cols);
                (Change::Put(c, m.flags), true)
            }
            (_, cur) => (
                Change::Put(cols.clone(), cur.map_or(0, |(_, m)| m.flags)),
                true,
            ),
        })?;
        Ok(stored)
    }

    fn out_row(&self, pk: &[u8]) -> Result<bool> {
        Ok(self.update(pk, |_| (Change::Remove, ()))?.1)
    }

    fn get_row(&self, pk: &[u8]) -> Result<Option<Columns>> {
        Ok(self.read(pk)?.map(|(c, _)| c))
    }

    fn genuid(&self) -> Result<u64> {
        let mut g = self.uid.lock();
        if g.0 >= g.1 {
            let ceiling = g.0 + UID_BLOCK;
            self.meta.write_batch(&[put_op(
                K_UID.to_vec(),
                ceiling.to_string().into_bytes(),
                0,
            )])?;
            self.db.sync()?;
            g.1 = ceiling;
        }
        let id = g.0;
        g.0 += 1;
        Ok(id)
    }

    fn set_index(&self, column: &[u8], op: IndexOp) -> Result<bool> {
        if self.readonly {
            return Err(Error::Unsupported("setindex on a table opened read-only"));
        }
        let _s = self.schema_lock.lock();
        let existing = self.schema().iter().find(|i| i.column == column).cloned();
        let none = || {
            Error::NotFound(format!(
                "no index on column `{}`",
                String::from_utf8_lossy(column)
            ))
        };
        match op {
            IndexOp::Optimize => {
                existing.ok_or_else(none)?;
                self.db.checkpoint()?;
                Ok(true)
            }
            IndexOp::Void => {
                self.drop_index(&existing.ok_or_else(none)?)?;
                Ok(true)
            }
            IndexOp::Make { typ, keep } => {
                if let Some(ix) = existing {
                    if keep {
                        return Ok(false);
                    }
                    self.drop_index(&ix)?;
                }
                self.make_index(column, typ)?;
                Ok(true)
            }
        }
    }

    fn indexes(&self) -> Vec<IndexInfo> {
        let mut out: Vec<IndexInfo> = self
            .schema()
            .iter()
            .map(|i| IndexInfo {
                column: i.column.clone(),
                typ: i.typ,
                ready: i.ready.load(Ordering::Acquire),
                entries: if i.chunked() {
                    let all = KeyRange::new(b"", None);
                    postings::count(&*i.store, i.typ, &all, u64::MAX).unwrap_or(0)
                } else {
                    i.store.count()
                },
            })
            .collect();
        out.sort_by(|a, b| a.column.cmp(&b.column));
        out
    }

    fn index(&self, column: &[u8]) -> Option<(IndexType, Arc<dyn Store>)> {
        self.schema()
            .iter()
            .find(|i| i.column == column && i.ready.load(Ordering::Acquire))
            .map(|i| (i.typ, i.store.clone()))
    }

    fn for_each_row(
        &self,
        range: &KeyRange<'_>,
        f: &mut dyn FnMut(&[u8], &Columns) -> Result<bool>,
    ) -> Result<u64> {
        self.db.for_each_in_range(range, &mut |k, v, _| {
            let c = record::decode(v)?;
            f(k, &c)
        })
    }

    fn for_each_row_of(
        &self,
        range: &KeyRange<'_>,
        names: &[&[u8]],
        f: &mut dyn FnMut(&[u8], &Columns) -> Result<bool>,
    ) -> Result<u64> {
        let mut c = Columns::new();
        self.db.for_each_in_range(range, &mut |k, v, _| {
            c.0.clear();
            record::for_each_column(v, &mut |n, v| {
                if names.contains(&n) {
                    c.0.push((n.to_vec(), v.to_vec()));
                }
                true
            })?;
            f(k, &c)
        })
    }

    fn rows(&self) -> u64 {
        self.db.count()
    }

    fn check_indexes(&self) -> Result<Vec<String>> {
        let mut problems = Vec::new();
        for ix in self.schema().iter() {
            if ix.ready.load(Ordering::Acquire) {
                self.check_index(ix, &mut problems)?;
            }
        }
        Ok(problems)
    }

    fn rebuild_indexes(&self) -> Result<()> {
        if self.readonly {
            return Err(Error::Unsupported(
                "rebuilding indexes of a table opened read-only",
            ));
        }
        let _s = self.schema_lock.lock();
        for ix in self.schema().iter() {
            ix.ready.store(false, Ordering::Release);
            self.describe_index(ix, &Build::From(None))?;
            {
                let _all = self.lock_all();
                ix.store.vanish()?;
            }
            self.build(ix, None)?;
        }
        Ok(())
    }
}
