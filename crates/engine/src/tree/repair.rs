//! `repair`: a new tree holding every record of a damaged one that can be read.
//!
//! The source is opened in salvage mode (read-only; a damaged leaf image counts as an empty
//! leaf, a damaged checkpoint is replaced by every image in the node log), its records are
//! copied in key order into a database created for them, and the damage gone around is
//! reported. The source is never written.

use super::DiskTree;
use crate::config::{OpenMode, Params};
use crate::error::{Error, Result};
use crate::io::Vfs;
use crate::store::{BatchOp, RepairReport, Store};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const BATCH_RECORDS: usize = 1000;
const BATCH_BYTES: usize = 16 << 20;

impl DiskTree {
    /// Write a new database at `dst` (which must not exist) holding every readable record of
    /// `src`; `src` is not written. `params` tune the new database (its order and compression
    /// are `src`'s unless they give others).
    pub fn repair_with(
        src: &Path,
        dst: &Path,
        params: &Params,
        vfs: Arc<dyn Vfs>,
    ) -> Result<RepairReport> {
        Self::repair_locked(src, dst, params, vfs, None)
    }

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
            return Err(Error::NotFound(format!(
                "{}: no such database",
                src.display()
            )));
        }
        let from = DiskTree::open_full(
            src,
            &Params::default(),
            vfs.clone(),
            OpenMode::ReadOnly,
            true,
            held,
        )?;
        let mut given: Vec<String> = params
            .items()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let has = |k: &str| params.items().iter().any(|(x, _)| x == k);
        if !has("cmp") {
            given.push(format!("cmp={}", from.inner.cmp.name()));
        }
        if !has("compress") {
            given.push(format!("compress={}", from.inner.compression().name()));
        }
        let params = Params::parse(&given.join("#"))?;
        let res = copy_all(&from, dst, &params, vfs.clone());
        if res.is_err() {
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
    /// `SRC.damaged-<unix time>` (returned) and the repaired database takes its name.
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

fn copy_all(from: &DiskTree, dst: &Path, params: &Params, vfs: Arc<dyn Vfs>) -> Result<u64> {
    let to = DiskTree::open_mode(dst, params, vfs, OpenMode::Create)?;
    let mut ops: Vec<BatchOp> = Vec::with_capacity(BATCH_RECORDS);
    let mut bytes = 0usize;
    let mut kept = 0u64;
    let mut prev: Option<Vec<u8>> = None;
    // The visitor writes to the new database (it must not call the one it walks).
    from.for_each_record(&mut |k, v, m| {
        if prev.as_deref() == Some(k) {
            // A key's second and later values: after the first, in their order.
            to.write_batch(&ops)?;
            kept += ops.len() as u64;
            ops.clear();
            bytes = 0;
            to.put_dup(k, v, false)?;
            kept += 1;
            return Ok(true);
        }
        prev = Some(k.to_vec());
        bytes += k.len() + v.len();
        ops.push(BatchOp::Put {
            key: k.to_vec(),
            value: v.to_vec(),
            flags: m.flags,
            expires: m.expires,
        });
        if ops.len() >= BATCH_RECORDS || bytes >= BATCH_BYTES {
            to.write_batch(&ops)?;
            kept += ops.len() as u64;
            ops.clear();
            bytes = 0;
        }
        Ok(true)
    })?;
    to.write_batch(&ops)?;
    kept += ops.len() as u64;
    to.close()?;
    Ok(kept)
}

fn remove_tree(vfs: &dyn Vfs, dir: &Path) {
    let nodes = dir.join(super::NODES_DIR);
    for d in [nodes.as_path(), dir] {
        if let Ok(names) = vfs.list(d) {
            for n in names {
                let _ = vfs.remove(&d.join(n));
            }
        }
        let _ = std::fs::remove_dir(d);
    }
}
