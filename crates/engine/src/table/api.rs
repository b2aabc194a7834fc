//! The `Store` of a table: the plain key/value interface, a record's value being its wire form
//! (`record`). A value that is not a wire form, an expiration time and a touch are refused
//! (a table's records never expire: an expired record would leave its index entries behind).

use super::record::{self, Columns};
use super::{Change, RowChange, Table, TableDb};
use crate::cursor::{Found, KindCursor, Walk};
use crate::error::{Error, Result};
use crate::store::{
    BatchOp, CheckReport, Current, Cursor, Damaged, Decision, KeyRange, Kind, Meta, Record,
    RecordVisitor, Store,
};
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

const NO_EXPIRY: &str = "an expiration time on a table's record (its records never expire)";

/// A record with its stored form made the wire form.
fn wired(r: Record) -> Result<Record> {
    let mut value = Vec::with_capacity(r.value.len());
    record::stored_to_wire(&r.value, &mut value)?;
    Ok(Record {
        value,
        meta: r.meta,
    })
}

impl Store for TableDb {
    fn get(&self, key: &[u8]) -> Result<Option<Record>> {
        self.db.get(key)?.map(wired).transpose()
    }

    fn view(&self, key: &[u8], f: &mut dyn FnMut(&[u8], Meta)) -> Result<bool> {
        match self.get(key)? {
            Some(r) => {
                f(&r.value, r.meta);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn accept<'v>(
        &self,
        key: &[u8],
        visitor: &mut dyn FnMut(Option<Current<'_>>) -> Decision<'v>,
    ) -> Result<Option<Meta>> {
        let mut refused: Option<Error> = None;
        let mut wire = Vec::new();
        let mut after = None;
        let (kept, wrote) = self.update_with(
            key,
            |cur| {
                if let Some((c, _)) = cur {
                    c.write_wire(&mut wire);
                }
                let shown = cur.map(|(_, meta)| Current { value: &wire, meta });
                let kept = cur.map(|(_, m)| m);
                match visitor(shown) {
                    Decision::Keep => (Change::Keep, kept),
                    Decision::Remove => (Change::Remove, None),
                    // No record: nothing to touch, as on every kind.
                    Decision::Touch { .. } if kept.is_none() => (Change::Keep, None),
                    Decision::Touch { .. } => {
                        refused = Some(Error::Unsupported(NO_EXPIRY));
                        (Change::Keep, kept)
                    }
                    Decision::Put { expires, .. } if expires != 0 => {
                        refused = Some(Error::Unsupported(NO_EXPIRY));
                        (Change::Keep, kept)
                    }
                    Decision::Put { value, flags, .. } => match Columns::from_wire(&value) {
                        Ok(c) => (Change::Put(c, flags), None),
                        Err(e) => {
                            refused = Some(e);
                            (Change::Keep, kept)
                        }
                    },
                }
            },
            Some(&mut after),
        )?;
        if let Some(e) = refused {
            return Err(e);
        }
        if !wrote {
            return Ok(kept);
        }
        // After a put, its metadata (the version the tree gave it); after a remove, none.
        Ok(after)
    }

    fn write_batch(&self, ops: &[BatchOp]) -> Result<()> {
        crate::store::check_batch(ops, 32)?;
        let mut changes: Vec<RowChange<'_>> = Vec::with_capacity(ops.len());
        for op in ops {
            match op {
                BatchOp::Put { expires, .. } if *expires != 0 => {
                    return Err(Error::Unsupported(NO_EXPIRY))
                }
                BatchOp::Put {
                    key, value, flags, ..
                } => changes.push((key, Some((Columns::from_wire(value)?, *flags)))),
                BatchOp::Remove { key } => changes.push((key, None)),
            }
        }
        self.update_many(&changes)
    }

    fn cursor(&self) -> Result<Box<dyn Cursor + '_>> {
        self.db.check_open()?;
        Ok(Box::new(KindCursor::new(self, TableWalk { t: self })))
    }

    fn count(&self) -> u64 {
        self.db.count()
    }

    fn size(&self) -> u64 {
        self.db.size()
    }

    fn sync(&self) -> Result<()> {
        self.db.sync()
    }

    fn optimize(&self, params: &str) -> Result<()> {
        self.db.optimize(params)
    }

    fn vanish(&self) -> Result<()> {
        self.vanish_all()
    }

    fn copy_to(&self, dest: &Path) -> Result<()> {
        // The tree's copy holds every keyspace at one cut: records, indexes and metadata agree.
        self.db.copy_to(dest)
    }

    fn check(&self) -> Result<CheckReport> {
        let mut rep = self.db.check()?;
        if rep.damage.is_empty() {
            rep.problems.extend(self.check_indexes()?);
        }
        Ok(rep)
    }

    fn kind(&self) -> Kind {
        Kind::Table
    }

    fn describe(&self) -> Vec<(String, String)> {
        let mut d = self.db.describe();
        d.retain(|(k, _)| k != "cmp" && k != "keyspaces");
        let idx: Vec<String> = self
            .indexes()
            .iter()
            .map(|i| {
                format!(
                    "{}:{}{}",
                    String::from_utf8_lossy(&i.column),
                    i.typ.name(),
                    if i.ready { "" } else { "(building)" }
                )
            })
            .collect();
        d.push(("indexes".into(), idx.join(",")));
        d
    }

    fn close(&self) -> Result<()> {
        self.db.close()
    }

    fn damage_found(&self) -> Vec<Damaged> {
        self.db.damage_found()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.db.counters()
    }

    fn keyspace(&self, _name: &str, _params: &str) -> Result<Arc<dyn Store>> {
        Err(Error::Unsupported(
            "keyspaces of a table (its keyspaces hold its indexes)",
        ))
    }

    fn table(&self) -> Option<&dyn Table> {
        Some(self)
    }

    fn for_each_record(&self, f: &mut RecordVisitor<'_>) -> Result<u64> {
        let all = KeyRange {
            from: Bound::Unbounded,
            to: Bound::Unbounded,
            desc: false,
            max: usize::MAX,
        };
        self.for_each_in_range(&all, f)?;
        Ok(0)
    }

    fn for_each_in_range(&self, range: &KeyRange<'_>, f: &mut RecordVisitor<'_>) -> Result<u64> {
        let mut wire = Vec::new();
        self.db.for_each_in_range(range, &mut |k, v, m| {
            wire.clear();
            record::stored_to_wire(v, &mut wire)?;
            f(k, &wire, m)
        })
    }
}

/// The walk of a table's cursor: the records in primary-key order, values in wire form.
struct TableWalk<'a> {
    t: &'a TableDb,
}

impl TableWalk<'_> {
    fn one(&self, from: Bound<&[u8]>, to: Bound<&[u8]>, desc: bool) -> Result<Found> {
        let mut out = None;
        let range = KeyRange {
            from,
            to,
            desc,
            max: 1,
        };
        self.t.db.for_each_in_range(&range, &mut |k, v, meta| {
            out = Some((
                k.to_vec(),
                Record {
                    value: v.to_vec(),
                    meta,
                },
            ));
            Ok(false)
        })?;
        out.map(|(k, r)| Ok((k, wired(r)?))).transpose()
    }
}

impl Walk for TableWalk<'_> {
    fn ordered(&self) -> bool {
        true
    }

    fn forward(&mut self, from: Bound<&[u8]>) -> Result<Found> {
        self.one(from, Bound::Unbounded, false)
    }

    fn backward(&mut self, to: Bound<&[u8]>) -> Result<Found> {
        self.one(Bound::Unbounded, to, true)
    }
}
