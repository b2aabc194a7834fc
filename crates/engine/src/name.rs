//! Open a database by name: `path.kh#bnum=1000000#sync=always`, `*`, `+#capsiz=64m`.
//!
//! The part before the first `#` picks the kind (through [`crate::registry`]: by its suffix, or
//! `*` / `+`); each `#key=value` after it tunes the kind. An unknown suffix, an unknown key, a
//! repeated key or a bad value is an error, never ignored.
//!
//! The configuration types live in [`crate::config`]; they are re-exported here for callers
//! that import them from `name`.

pub use crate::config::{parse_size, Compression, OpenMode, Params, SyncMode};
pub use crate::registry::Opened;

use crate::error::{Error, Result};
use crate::registry::{self, KindInfo};
use crate::store::{RepairReport, Store};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Split a name into its path part and its parameters.
pub fn split_name(name: &str) -> Result<(&str, Params)> {
    let (path, rest) = match name.find('#') {
        Some(i) => (&name[..i], &name[i + 1..]),
        None => (name, ""),
    };
    if path.is_empty() {
        return Err(Error::InvalidName(format!(
            "empty path (use {})",
            registry::usage()
        )));
    }
    Ok((path, Params::parse(rest)?))
}

/// The kind the path part of a name selects.
fn kind_of(path: &str) -> Result<&'static KindInfo> {
    registry::by_path(path).ok_or_else(|| {
        Error::InvalidName(format!(
            "`{path}`: unknown database kind; use {}",
            registry::usage()
        ))
    })
}

/// Open (creating when missing) the database named `name`: [`OpenMode::Create`].
pub fn open(name: &str) -> Result<Arc<dyn Store>> {
    Ok(open_as(name, OpenMode::Create)?.store)
}

/// Open the existing database named `name` for writing: [`OpenMode::Existing`].
pub fn open_existing(name: &str) -> Result<Arc<dyn Store>> {
    Ok(open_as(name, OpenMode::Existing)?.store)
}

/// Open an existing database for inspection only (`check`, `inform`, reads):
/// [`OpenMode::ReadOnly`]. In-memory kinds open as usual (there is nothing to inspect on disk).
pub fn open_readonly(name: &str) -> Result<Arc<dyn Store>> {
    Ok(open_as(name, OpenMode::ReadOnly)?.store)
}

/// Open the database named `name` under `mode`.
pub fn open_as(name: &str, mode: OpenMode) -> Result<Opened> {
    let (path, params) = split_name(name)?;
    let kind = kind_of(path)?;
    (kind.open)(Path::new(path), &params, mode)
}

const NOTHING_TO_REPAIR: Error =
    Error::Unsupported("repair: only on-disk databases have files to repair");

/// Write a new database `dst` (which must not exist; `#params` tune it) holding every record
/// of the database `src` that verifies, at its newest surviving version. `src` is not written.
/// `dst` is of `src`'s kind.
pub fn repair(src: &str, dst: &str) -> Result<RepairReport> {
    let (sp, sparams) = split_name(src)?;
    let (dp, dparams) = split_name(dst)?;
    if !sparams.is_empty() {
        return Err(Error::InvalidParam(format!(
            "`{src}`: the database to repair takes no parameters"
        )));
    }
    let kind = registry::by_path(sp).ok_or(NOTHING_TO_REPAIR)?;
    let repair = kind.repair.ok_or(NOTHING_TO_REPAIR)?;
    if registry::by_path(dp).map(|k| k.kind) != Some(kind.kind) {
        let sel = match kind.selector {
            registry::Selector::Exactly(s) | registry::Selector::Suffix(s) => s,
        };
        return Err(Error::InvalidName(format!(
            "`{dp}`: the repaired copy of a {sel} database is a {sel} database"
        )));
    }
    (repair.into)(Path::new(sp), Path::new(dp), &dparams)
}

/// `repair` into a temporary database beside `src`, then swap them: `src` keeps its name and
/// the damaged files are kept as `SRC.damaged-<unix time>` (returned).
pub fn repair_in_place(src: &str) -> Result<(RepairReport, PathBuf)> {
    let (sp, params) = split_name(src)?;
    let repair = registry::by_path(sp)
        .and_then(|k| k.repair)
        .ok_or(NOTHING_TO_REPAIR)?;
    (repair.in_place)(Path::new(sp), &params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_names() {
        let (p, params) = split_name("a.kh#bnum=10#sync=always").unwrap();
        assert_eq!(p, "a.kh");
        assert_eq!(params.size("bnum").unwrap(), Some(10));
        assert_eq!(params.sync().unwrap(), Some(SyncMode::Always));
        let e = split_name("#a=1").err().unwrap().to_string();
        assert!(e.contains("empty path") && e.contains("`PATH.kh`"), "{e}");
        assert!(split_name("*#bnum").is_err());
    }

    #[test]
    fn unknown_kind_is_an_error() {
        let e = open("foo.tch").err().unwrap().to_string();
        assert!(e.contains("unknown database kind"), "{e}");
        assert!(e.contains("`*` (memory hash)"), "{e}");
    }

    #[test]
    fn repair_needs_files_and_the_same_kind() {
        let nothing = |r: Result<RepairReport>| matches!(r, Err(Error::Unsupported(m)) if m.contains("only on-disk"));
        assert!(nothing(repair("*", "b.kh")));
        assert!(nothing(repair("a.tch", "b.kh")));
        assert!(matches!(repair_in_place("+"), Err(Error::Unsupported(_))));
        let e = repair("a.kh", "+").err().unwrap().to_string();
        assert!(e.contains("is a .kh database"), "{e}");
        assert!(matches!(
            repair("a.kh#bnum=1", "b.kh"),
            Err(Error::InvalidParam(_))
        ));
    }
}
