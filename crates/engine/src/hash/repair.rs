//! `repair`: a new database holding every record of a damaged one that verifies.
//!
//! The source is opened in `Mode::Salvage`: read-only, its index rebuilt from the log alone
//! (the checkpoint's index may point at a damaged newest version), every record that
//! verifies applied in seq order — after damage, and the verifiable inner records of a
//! damaged batch. So each key ends at its newest surviving version, and a surviving delete
//! keeps any older version of its key dead. Its cursor then copies the live records, in log
//! order, into a database created for them. The source is never written.

use super::DiskHash;
use crate::config::{OpenMode, Params};
use crate::error::{Error, Result};
use crate::io::Vfs;
use crate::store::{BatchOp, RepairReport, Store};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Records per batch written to the new database.
const BATCH_RECORDS: usize = 1000;
/// Bytes of keys and values after which a batch is written early.
const BATCH_BYTES: usize = 16 << 20;

impl DiskHash {
    /// Write a new database at `dst` (which must not exist) holding every record of `src`
    /// that verifies, at its newest surviving version; `src` is not written. `params` tune the
    /// new database (its lane count is `src`'s unless `params` give one).
    pub fn repair_with(
        src: &Path,
        dst: &Path,
        params: &Params,
        vfs: Arc<dyn Vfs>,
    ) -> Result<RepairReport> {
        Self::repair_locked(src, dst, params, vfs, None)
    }

    /// `repair_with`; `held`: the caller holds `src`'s lock.
    fn repair_locked(
        src: &Path,
        dst: &Path,
        params: &Params,
        vfs: Arc<dyn Vfs>,
        held: Option<Box<dyn std::any::Any + Send + Sync>>,
    ) -> Result<RepairReport> {
        if vfs.exists(dst) {
            return Err(Error::InvalidName(format!(
                "{}: already exists; repair writes a new database",
                dst.display()
            )));
        }
        if !vfs.exists(src) {
            return Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{}: no such database", src.display()),
            )));
        }
        let from = DiskHash::open_full(
            src,
            &Params::default(),
            vfs.clone(),
            OpenMode::ReadOnly,
            true,
            held,
        )?;
        // What the source stores about itself, unless `params` say otherwise.
        let mut given: Vec<String> = params
            .items()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let has = |k: &str| params.items().iter().any(|(x, _)| x == k);
        if !has("lanes") {
            given.push(format!("lanes={}", from.inner.log.lanes));
        }
        if let Some(st) = from.stored() {
            if !has("compress") {
                given.push(format!("compress={}", st.compress.name()));
            }
            if !has("bnum") && st.bnum != 0 {
                given.push(format!("bnum={}", st.bnum));
            }
        }
        let params = Params::parse(&given.join("#"))?;
        let res = copy_live(&from, dst, &params, vfs.clone());
        if res.is_err() {
            // Ours, and incomplete.
            remove_tree(&*vfs, dst);
        }
        let kept = res?;
        let damage = from.inner.findings.lock().clone();
        from.close()?;
        Ok(RepairReport {
            kept,
            lost: damage.iter().map(|d| d.lost).sum(),
            damaged_bytes: damage.iter().map(|d| d.len).sum(),
            damage,
        })
    }

    /// `repair_with` into a temporary database beside `src`, then swap: `src` is renamed to
    /// `SRC.damaged-<unix time>` (returned) and the repaired database takes its name. Holds
    /// `src`'s lock throughout, so no writer can have it open.
    pub fn repair_in_place(
        src: &Path,
        params: &Params,
        vfs: Arc<dyn Vfs>,
    ) -> Result<(RepairReport, PathBuf)> {
        let lock = crate::lock::take(&*vfs, src)?;
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
        // The salvage open keeps a stand-in: this function holds the real lock to the end.
        let report = Self::repair_locked(src, &tmp, params, vfs.clone(), Some(Box::new(())))?;
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
}

/// Copy the live records of `from` into a new database at `dst`; the number copied.
fn copy_live(from: &DiskHash, dst: &Path, params: &Params, vfs: Arc<dyn Vfs>) -> Result<u64> {
    let to = DiskHash::open_mode(dst, params, vfs, OpenMode::Create)?;
    let mut cur = from.cursor()?;
    let mut ops: Vec<BatchOp> = Vec::with_capacity(BATCH_RECORDS);
    let mut bytes = 0usize;
    let mut kept = 0u64;
    while let Some((key, rec)) = cur.next()? {
        bytes += key.len() + rec.value.len();
        ops.push(BatchOp::Put {
            key,
            value: rec.value,
            flags: rec.meta.flags,
            expires: rec.meta.expires,
        });
        if ops.len() >= BATCH_RECORDS || bytes >= BATCH_BYTES {
            to.write_batch(&ops)?;
            kept += ops.len() as u64;
            ops.clear();
            bytes = 0;
        }
    }
    to.write_batch(&ops)?;
    kept += ops.len() as u64;
    drop(cur);
    to.close()?;
    Ok(kept)
}

/// Remove what `copy_live` created at `dir` (best effort: the error that made it stop is the
/// one reported).
fn remove_tree(vfs: &dyn Vfs, dir: &Path) {
    if let Ok(names) = vfs.list(dir) {
        for n in names {
            let _ = vfs.remove(&dir.join(n));
        }
    }
    let _ = std::fs::remove_dir(dir);
}
