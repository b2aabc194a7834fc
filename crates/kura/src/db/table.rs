//! `kura db` on a table database (`PATH.kt`): records of columns, as `tctmgr` offers them
//! (put with columns, get printing them, setindex, the indexes of an import).

use super::{print, show, Fail, Res};
use kura_engine::table::{Columns, IndexOp, PutMode, Table};
use kura_engine::{tsv, Error, Store};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

/// The table of `db`, or the error naming what a table command needs.
pub(super) fn table_of<'a>(db: &'a dyn Store, what: &str) -> Result<&'a dyn Table, Fail> {
    db.table().ok_or_else(|| {
        Fail::Err(format!(
            "{what} needs a table database (PATH.kt), not a {}",
            db.kind().name()
        ))
    })
}

/// `put` on a table: `values` are column names and values in turn; an empty key takes a new
/// unique id, which is printed.
pub(super) fn put(t: &dyn Table, key: &[u8], values: &[OsString], keep: bool, cat: bool) -> Res {
    if !values.len().is_multiple_of(2) {
        return Err(Fail::Err(format!(
            "a table record is column names and values in turn: an odd number of arguments \
             after the key ({})",
            values.len()
        )));
    }
    let mut cols = Columns::new();
    for p in values.chunks_exact(2) {
        cols.set(p[0].as_bytes(), p[1].as_bytes())?;
    }
    let mode = match (keep, cat) {
        (true, _) => PutMode::Keep,
        (_, true) => PutMode::Cat,
        _ => PutMode::Replace,
    };
    let id = match key.is_empty() {
        true => Some(t.genuid()?.to_string()),
        false => None,
    };
    let key = id.as_ref().map_or(key, |i| i.as_bytes());
    if !t.put_row(key, &cols, mode)? {
        return Err(Fail::No(format!(
            "key `{}` already exists (not overwritten because of --keep)",
            show(key)
        )));
    }
    match id {
        Some(id) => print(format!("{id}\n").as_bytes()),
        None => Ok(()),
    }
}

/// `get` on a table: a `NAME<TAB>VALUE` line per column (`tctmgr get`), TSV-escaped.
pub(super) fn get(t: &dyn Table, key: &[u8]) -> Res {
    let Some(cols) = t.get_row(key)? else {
        return Err(Fail::No(format!("no record for key `{}`", show(key))));
    };
    let mut out = Vec::new();
    for (n, v) in cols.iter() {
        tsv::escape_into(&mut out, n);
        out.push(b'\t');
        tsv::escape_into(&mut out, v);
        out.push(b'\n');
    }
    print(&out)
}

/// `setindex`: status 1 when a keep found an index, or an optimize or drop found none.
pub(super) fn setindex(t: &dyn Table, column: &[u8], typ: &str) -> Res {
    let op = IndexOp::parse(typ)?;
    match t.set_index(column, op) {
        Ok(true) => Ok(()),
        Ok(false) => Err(Fail::No(format!(
            "column `{}` already has an index (kept because of `+`)",
            show(column)
        ))),
        Err(Error::NotFound(m)) => Err(Fail::No(m)),
        Err(e) => Err(e.into()),
    }
}

/// The `--index COLUMN:TYPE` of an import, read before anything is written.
pub(super) fn index_specs(specs: &[String]) -> Result<Vec<(Vec<u8>, IndexOp)>, Fail> {
    specs
        .iter()
        .map(|s| {
            let (col, typ) = s.rsplit_once(':').ok_or_else(|| {
                Fail::Err(format!(
                    "--index `{s}`: expected COLUMN:TYPE, e.g. name:lexical"
                ))
            })?;
            let op = IndexOp::parse(typ).map_err(|e| Fail::Err(format!("--index `{s}`: {e}")))?;
            Ok((col.as_bytes().to_vec(), op))
        })
        .collect()
}

/// Make the indexes of an import (each built from the records).
pub(super) fn make_indexes(t: &dyn Table, specs: &[(Vec<u8>, IndexOp)]) -> Res {
    for (col, op) in specs {
        t.set_index(col, *op)?;
    }
    Ok(())
}
