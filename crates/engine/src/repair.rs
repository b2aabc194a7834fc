//! What every on-disk kind's repair shares: the report of a salvage, removing a half-written
//! copy, and the in-place swap (repair beside the database, then rename).

use crate::config::Params;
use crate::error::{Error, Result};
use crate::io::Vfs;
use crate::store::{Damaged, RepairReport};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The report of a repair that kept `kept` records around `damage`.
pub(crate) fn report(kept: u64, damage: Vec<Damaged>) -> RepairReport {
    RepairReport {
        kept,
        lost: damage.iter().map(|d| d.lost).sum(),
        damaged_bytes: damage.iter().map(|d| d.len).sum(),
        damage,
    }
}

/// Remove a database directory a failed repair was writing (its files, then its directories,
/// `subdirs` first): it is ours and incomplete.
pub(crate) fn remove_copy(vfs: &dyn Vfs, dir: &Path, subdirs: &[&str]) {
    let inner: Vec<PathBuf> = subdirs.iter().map(|s| dir.join(s)).collect();
    for d in inner.iter().map(PathBuf::as_path).chain([dir]) {
        if let Ok(names) = vfs.list(d) {
            for n in names {
                let _ = vfs.remove(&d.join(n));
            }
        }
        let _ = std::fs::remove_dir(d);
    }
}

/// Repair `src` in place: `repair(tmp)` writes the repaired database at a temporary name
/// beside it (its salvage open must not take `src`'s lock: this holds it throughout, so no
/// writer can have the database open), then `src` is renamed to `SRC.damaged-<unix time>`
/// (returned) and the repaired database takes its name.
pub(crate) fn in_place(
    src: &Path,
    vfs: &Arc<dyn Vfs>,
    repair: impl FnOnce(&Path) -> Result<RepairReport>,
) -> Result<(RepairReport, PathBuf)> {
    let lock = crate::lock::take(&**vfs, src)?;
    let name = src
        .file_name()
        .ok_or_else(|| Error::InvalidName(format!("{}: not a database path", src.display())))?
        .to_string_lossy()
        .into_owned();
    let tmp = src.with_file_name(format!(".{name}.repair-{}", std::process::id()));
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let kept = src.with_file_name(format!("{name}.damaged-{secs}"));
    if vfs.exists(&kept) {
        return Err(Error::InvalidName(format!(
            "{}: already exists",
            kept.display()
        )));
    }
    let report = repair(&tmp)?;
    vfs.rename(src, &kept)?;
    vfs.rename(&tmp, src)?;
    let parent = match src.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    vfs.sync_dir(parent)?;
    drop(lock);
    Ok((report, kept))
}

/// A repair writes a new database at `dst` from an existing `src`.
pub(crate) fn check_paths(vfs: &dyn Vfs, src: &Path, dst: &Path) -> Result<()> {
    if vfs.exists(dst) {
        return Err(Error::InvalidName(format!(
            "{}: already exists; repair writes a new database",
            dst.display()
        )));
    }
    if !vfs.exists(src) {
        return Err(Error::NotFound(format!(
            "{}: no such database",
            src.display()
        )));
    }
    Ok(())
}

/// The parameters of the repaired copy: `params`, and each of `stored` (what the source keeps
/// about itself) that `params` do not name.
pub(crate) fn copy_params(params: &Params, stored: &[(&str, String)]) -> Result<Params> {
    let mut given: Vec<String> = params
        .items()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for (k, v) in stored {
        if !params.items().iter().any(|(x, _)| x == k) {
            given.push(format!("{k}={v}"));
        }
    }
    Params::parse(&given.join("#"))
}
