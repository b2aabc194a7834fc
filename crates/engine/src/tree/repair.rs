//! `repair`: a new tree holding every record of a damaged one that can be read.
//!
//! The source is opened in salvage mode (read-only; a damaged leaf image counts as an empty
//! leaf, a damaged checkpoint is replaced by every image in the node log), its records are
//! copied in key order into a database created for them (each keyspace into a keyspace of the
//! same name and order), and the damage gone around is reported. The source is never written.

use super::DiskTree;
use crate::config::{OpenMode, Params};
use crate::error::Result;
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
        crate::repair::check_paths(&*vfs, src, dst)?;
        let from = DiskTree::open_full(
            src,
            &Params::default(),
            vfs.clone(),
            OpenMode::ReadOnly,
            true,
            held,
        )?;
        let params = crate::repair::copy_params(
            params,
            &[
                ("cmp", from.inner.cmp.name().to_string()),
                ("compress", from.inner.compression().name().to_string()),
            ],
        )?;
        let res = copy_all(&from, dst, &params, vfs.clone());
        if res.is_err() {
            crate::repair::remove_copy(&*vfs, dst, &[super::NODES_DIR]);
        }
        let kept = res?;
        let damage = from.inner.findings.lock().clone();
        from.close()?;
        Ok(crate::repair::report(kept, damage))
    }

    /// `repair_with` beside `src`, then swap (`crate::repair::in_place`): `src` is renamed to
    /// `SRC.damaged-<unix time>` (returned) and the repaired database takes its name.
    pub fn repair_in_place(
        src: &Path,
        params: &Params,
        vfs: Arc<dyn Vfs>,
    ) -> Result<(RepairReport, PathBuf)> {
        // The salvage open keeps a stand-in for the lock `in_place` holds.
        crate::repair::in_place(src, &vfs, |tmp| {
            Self::repair_locked(src, tmp, params, vfs.clone(), Some(Box::new(())))
        })
    }
}

/// Copy every record of `from` into a new database at `dst`; from a database, its keyspaces
/// too (each made anew with its order). Returns the records copied.
pub(super) fn copy_all(
    from: &DiskTree,
    dst: &Path,
    params: &Params,
    vfs: Arc<dyn Vfs>,
) -> Result<u64> {
    let to = DiskTree::open_mode(dst, params, vfs, OpenMode::Create)?;
    let mut kept = copy_records(from, &to)?;
    if from.inner.ks == 0 {
        for sp in from.inner.others() {
            let params = format!("cmp={}", sp.cmp.name());
            let to_sp = to.keyspace(&sp.name, &params)?;
            kept += copy_records(&DiskTree::space_handle(sp), &*to_sp)?;
        }
    }
    to.close()?;
    Ok(kept)
}

fn copy_records(from: &DiskTree, to: &dyn Store) -> Result<u64> {
    let mut ops: Vec<BatchOp> = Vec::with_capacity(BATCH_RECORDS);
    let mut bytes = 0usize;
    let mut kept = 0u64;
    // The previous key (one buffer, reused), and whether there was one.
    let (mut prev, mut any) = (Vec::new(), false);
    // The visitor writes to the new database (it must not call the one it walks).
    from.for_each_record(&mut |k, v, m| {
        if any && prev == k {
            // A key's second and later values: after the first, in their order.
            to.write_batch(&ops)?;
            kept += ops.len() as u64;
            ops.clear();
            bytes = 0;
            to.put_dup(k, v, false)?;
            kept += 1;
            return Ok(true);
        }
        prev.clear();
        prev.extend_from_slice(k);
        any = true;
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
    Ok(kept)
}
