//! Index builds, drops and checks of a table (see the parent module's documentation for the
//! protocol that keeps a build right while writers run).

use super::{index_key, index_meta, postings, put_op, terms, Build, Index, TableDb, BUILD_STEP};
use super::{IndexType, INDEX_SPACE, K_NEXT_SPACE, META_SPACE};
use crate::error::{Error, Result};
use crate::store::{BatchOp, KeyRange, Store};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

impl TableDb {
    /// Write index metadata (and sync: what follows relies on it).
    pub(super) fn describe_index(&self, ix: &Index, build: &Build) -> Result<()> {
        self.meta.write_batch(&[put_op(
            index_key(&ix.column),
            index_meta(ix.typ, ix.id, build),
            0,
        )])?;
        self.db.sync()
    }

    /// Build `ix` from the records after `from` (see the module's documentation). The caller
    /// holds `schema_lock`; `ix` is in the schema.
    /// The primary keys of the next step of records after `from` (from the first: `None`).
    fn record_keys_after(&self, from: Option<&[u8]>) -> Result<Vec<Vec<u8>>> {
        let mut keys = Vec::with_capacity(BUILD_STEP);
        let range = KeyRange {
            from: from.map_or(Bound::Unbounded, Bound::Excluded),
            to: Bound::Unbounded,
            desc: false,
            max: BUILD_STEP,
        };
        self.db.for_each_in_range(&range, &mut |k, _, _| {
            keys.push(k.to_vec());
            Ok(true)
        })?;
        Ok(keys)
    }

    pub(super) fn build(&self, ix: &Index, mut from: Option<Vec<u8>>) -> Result<()> {
        let mkey = index_key(&ix.column);
        loop {
            let keys = self.record_keys_after(from.as_deref())?;
            let Some(last) = keys.last().cloned() else {
                break;
            };
            {
                let _g = self.lock_keys(keys.iter().map(|k| k.as_slice()));
                let mut ops: Vec<(&str, BatchOp)> = Vec::new();
                let mut post = postings::Changes::new();
                for k in &keys {
                    if let Some((cols, _)) = self.read(k)? {
                        if ix.chunked() {
                            for (t, offs) in ix.terms(k, Some(&cols)) {
                                post.entry(t).or_default().insert(k.clone(), Some(offs));
                            }
                            continue;
                        }
                        for (ek, ev) in ix.entries(k, Some(&cols)) {
                            ops.push((&ix.space, put_op(ek, ev, 0)));
                        }
                    }
                }
                let _t = self.post_ops_of(std::iter::once((ix, &post)), &mut ops)?;
                let progress = index_meta(ix.typ, ix.id, &Build::From(Some(last.clone())));
                ops.push((META_SPACE, put_op(mkey.clone(), progress, 0)));
                self.db.write_across(&ops)?;
            }
            from = Some(last);
        }
        self.meta
            .write_batch(&[put_op(mkey, index_meta(ix.typ, ix.id, &Build::Ready), 0)])?;
        ix.ready.store(true, Ordering::Release);
        Ok(())
    }

    pub(super) fn make_index(&self, column: &[u8], typ: IndexType) -> Result<()> {
        let id = match self.meta.get(K_NEXT_SPACE)? {
            Some(r) => std::str::from_utf8(&r.value)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| Error::Corrupt("a table's next index id does not parse".into()))?,
            None => 1,
        };
        let space = format!("{INDEX_SPACE}{id}");
        let store = self.db.keyspace(&space, "cmp=lex")?;
        let ix = Arc::new(Index {
            column: column.to_vec(),
            typ,
            id,
            space,
            store,
            ready: AtomicBool::new(false),
        });
        self.meta.write_batch(&[
            put_op(K_NEXT_SPACE.to_vec(), (id + 1).to_string().into_bytes(), 0),
            put_op(
                index_key(column),
                index_meta(typ, id, &Build::From(None)),
                0,
            ),
        ])?;
        self.db.sync()?;
        let mut next: Vec<Arc<Index>> = self.schema().iter().cloned().collect();
        next.push(ix.clone());
        self.schema.store(Arc::new(next));
        self.build(&ix, None)
    }

    pub(super) fn drop_index(&self, ix: &Arc<Index>) -> Result<()> {
        self.meta.write_batch(&[BatchOp::Remove {
            key: index_key(&ix.column),
        }])?;
        self.db.sync()?;
        let next: Vec<Arc<Index>> = self
            .schema()
            .iter()
            .filter(|i| i.id != ix.id)
            .cloned()
            .collect();
        self.schema.store(Arc::new(next));
        // Writers that read the schema before are done once each stripe has been free.
        drop(self.lock_all());
        ix.store.vanish()
    }

    pub(super) fn vanish_all(&self) -> Result<()> {
        let _s = self.schema_lock.lock();
        let schema = self.schema();
        let mut ops = Vec::new();
        for ix in schema.iter() {
            ops.push(put_op(
                index_key(&ix.column),
                index_meta(ix.typ, ix.id, &Build::From(None)),
                0,
            ));
        }
        if !ops.is_empty() {
            self.meta.write_batch(&ops)?;
            self.db.sync()?;
        }
        let _all = self.lock_all();
        self.db.vanish()?;
        for ix in schema.iter() {
            ix.store.vanish()?;
        }
        let ops: Vec<BatchOp> = schema
            .iter()
            .map(|ix| {
                put_op(
                    index_key(&ix.column),
                    index_meta(ix.typ, ix.id, &Build::Ready),
                    0,
                )
            })
            .collect();
        if !ops.is_empty() {
            self.meta.write_batch(&ops)?;
        }
        Ok(())
    }

    /// Check one index against the records (see [`Table::check_indexes`]).
    pub(super) fn check_index(&self, ix: &Index, problems: &mut Vec<String>) -> Result<()> {
        if ix.chunked() {
            return self.check_postings(ix, problems);
        }
        let col = String::from_utf8_lossy(&ix.column).into_owned();
        let shown = |k: &[u8]| String::from_utf8_lossy(k).into_owned();
        // Every record's entries are there.
        let mut from: Option<Vec<u8>> = None;
        loop {
            let keys = self.record_keys_after(from.as_deref())?;
            let Some(last) = keys.last().cloned() else {
                break;
            };
            for k in &keys {
                let _g = self.stripe(k).lock();
                let cols = match self.read(k) {
                    Ok(c) => c.map(|(c, _)| c),
                    Err(Error::Corrupt(m)) => {
                        problems.push(format!("record `{}`: {m}", shown(k)));
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                for (ek, ev) in ix.entries(k, cols.as_ref()) {
                    if ix.store.get(&ek)?.map(|r| r.value) != Some(ev) {
                        problems.push(format!(
                            "index of `{col}` ({}): record `{}` lacks an entry",
                            ix.typ.name(),
                            shown(k)
                        ));
                        break;
                    }
                }
            }
            from = Some(last);
        }
        // Every entry stands for a record that makes it.
        let mut from: Option<Vec<u8>> = None;
        loop {
            let entries = entries_after(&*ix.store, from.as_deref())?;
            let Some((last, _)) = entries.last().cloned() else {
                break;
            };
            for (k, v) in &entries {
                let e = match terms::decode_entry(ix.typ, k, v) {
                    Ok(e) => e,
                    Err(_) => {
                        problems.push(format!("index of `{col}`: an entry does not parse"));
                        continue;
                    }
                };
                let _g = self.stripe(e.pk).lock();
                let Some(now) = ix.store.get(k)? else {
                    continue;
                };
                let cols = self.read(e.pk).ok().flatten().map(|(c, _)| c);
                if ix.entries(e.pk, cols.as_ref()).get(k) != Some(&now.value) {
                    problems.push(format!(
                        "index of `{col}` ({}): an entry for record `{}` it does not match",
                        ix.typ.name(),
                        shown(e.pk)
                    ));
                }
            }
            from = Some(last);
        }
        Ok(())
    }

    /// Check a posting-list index: every record's terms list it, with its offsets; every
    /// chunk parses and each of its postings stands for a record that makes it. Each (term,
    /// record) is judged under the record's lock and the term's.
    fn check_postings(&self, ix: &Index, problems: &mut Vec<String>) -> Result<()> {
        let col = String::from_utf8_lossy(&ix.column).into_owned();
        let shown = |k: &[u8]| String::from_utf8_lossy(k).into_owned();
        let mut from: Option<Vec<u8>> = None;
        loop {
            let keys = self.record_keys_after(from.as_deref())?;
            let Some(last) = keys.last().cloned() else {
                break;
            };
            for k in &keys {
                let _g = self.stripe(k).lock();
                let cols = match self.read(k) {
                    Ok(c) => c.map(|(c, _)| c),
                    Err(Error::Corrupt(m)) => {
                        problems.push(format!("record `{}`: {m}", shown(k)));
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                for (t, offs) in ix.terms(k, cols.as_ref()) {
                    let _t = self.term_stripes[self.term_stripe(ix.id, &t)].lock();
                    let now = match postings::lookup(&*ix.store, ix.typ, &t, k) {
                        Ok(n) => n,
                        Err(Error::Corrupt(_)) => None,
                        Err(e) => return Err(e),
                    };
                    if now.as_ref() != Some(&offs) {
                        problems.push(format!(
                            "index of `{col}` ({}): record `{}` lacks an entry",
                            ix.typ.name(),
                            shown(k)
                        ));
                        break;
                    }
                }
            }
            from = Some(last);
        }
        let mut from: Option<Vec<u8>> = None;
        loop {
            let chunks = entries_after(&*ix.store, from.as_deref())?;
            let Some((last, _)) = chunks.last().cloned() else {
                break;
            };
            for (k, v) in &chunks {
                let parsed = terms::decode_entry(IndexType::Lexical, k, b"")
                    .ok()
                    .map(|e| e.term)
                    .zip(postings::postings(ix.typ, k, v).ok());
                let Some((term, list)) = parsed else {
                    problems.push(format!("index of `{col}`: a chunk does not parse"));
                    continue;
                };
                for p in list {
                    let _g = self.stripe(&p.pk).lock();
                    let _t = self.term_stripes[self.term_stripe(ix.id, &term)].lock();
                    let now = match postings::lookup(&*ix.store, ix.typ, &term, &p.pk) {
                        Ok(Some(n)) => n,
                        Ok(None) | Err(Error::Corrupt(_)) => continue,
                        Err(e) => return Err(e),
                    };
                    let cols = self.read(&p.pk).ok().flatten().map(|(c, _)| c);
                    if ix.terms(&p.pk, cols.as_ref()).get(&term) != Some(&now) {
                        problems.push(format!(
                            "index of `{col}` ({}): an entry for record `{}` it does not match",
                            ix.typ.name(),
                            shown(&p.pk)
                        ));
                    }
                }
            }
            from = Some(last);
        }
        Ok(())
    }
}

/// The next step of `space`'s entries (key and value) after `from` (from the first without).
fn entries_after(space: &dyn Store, from: Option<&[u8]>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::with_capacity(BUILD_STEP);
    let range = KeyRange {
        from: from.map_or(Bound::Unbounded, Bound::Excluded),
        to: Bound::Unbounded,
        desc: false,
        max: BUILD_STEP,
    };
    space.for_each_in_range(&range, &mut |k, v, _| {
        out.push((k.to_vec(), v.to_vec()));
        Ok(true)
    })?;
    Ok(out)
}
