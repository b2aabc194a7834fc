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
use crate::error::Result;
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
        crate::repair::check_paths(&*vfs, src, dst)?;
        let from = DiskHash::open_full(
            src,
            &Params::default(),
            vfs.clone(),
            OpenMode::ReadOnly,
            true,
            held,
        )?;
        // What the source stores about itself, unless `params` say otherwise.
        let mut stored = vec![("lanes", from.inner.log.lanes.to_string())];
        if let Some(st) = from.stored() {
            stored.push(("compress", st.compress.name().to_string()));
            if st.bnum != 0 {
                stored.push(("bnum", st.bnum.to_string()));
            }
        }
        let params = crate::repair::copy_params(params, &stored)?;
        let res = copy_live(&from, dst, &params, vfs.clone());
        if res.is_err() {
            // Ours, and incomplete.
            crate::repair::remove_copy(&*vfs, dst, &[]);
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

/// Copy the live records of `from` into a new database at `dst`; the number copied.
pub(super) fn copy_live(
    from: &DiskHash,
    dst: &Path,
    params: &Params,
    vfs: Arc<dyn Vfs>,
) -> Result<u64> {
    let to = DiskHash::open_mode(dst, params, vfs, OpenMode::Create)?;
    let mut kept = copy_records(from, &to)?;
    if !from.is_space() {
        // Every keyspace the catalog names, into a keyspace of the same name.
        let mut named: Vec<(String, u64)> = from.inner.spaces.named();
        named.sort_by_key(|n| n.1);
        for (name, id) in named {
            if let Some(sp) = from.inner.spaces.get(id) {
                let into = to.keyspace(&name, "")?;
                kept += copy_records(&DiskHash::space_handle(sp), &*into)?;
            }
        }
    }
    to.close()?;
    Ok(kept)
}

/// Copy the live records of `from` into `to`; the number copied.
fn copy_records(from: &DiskHash, to: &dyn Store) -> Result<u64> {
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
    Ok(kept)
}
