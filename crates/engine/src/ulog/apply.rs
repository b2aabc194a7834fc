//! Applying update log records to a database: a replica following its master, a restore
//! replaying a log onto a backup, a master redoing its own log's tail after a crash.

use super::record::{batch_ops, values_of, Op, Space};
use crate::error::{Error, Result};
use crate::store::{BatchOp, Decision, Store};

/// Apply one operation to `store`. A database of another kind than the log's origin takes
/// what it can: `Values` on a kind without duplicate keys keeps the last value, an
/// `Optimize` whose parameters the kind does not take is skipped (`Ok(false)`). An operation
/// `In` a keyspace is applied to that keyspace, made first with the record's parameters where
/// it does not exist; a batch naming keyspaces is one `write_across` (a kind without
/// keyspaces refuses both).
pub fn apply(store: &dyn Store, op: &Op<'_>) -> Result<bool> {
    match op {
        Op::In { op, .. } if matches!(**op, Op::In { .. }) => {
            return Err(Error::Corrupt("a keyspace in a keyspace".into()));
        }
        Op::In { name, params, op } => {
            let (name, params) = Space { name, params }.text()?;
            let space = store.keyspace(name, params)?;
            return apply(&*space, op);
        }
        Op::Put {
            key,
            value,
            flags,
            expires,
        } => {
            store.put_with(key, value, *flags, *expires)?;
        }
        Op::Remove { key } => {
            store.out(key)?;
        }
        Op::Touch { key, expires } => {
            store.accept(key, &mut |cur| match cur {
                Some(_) => Decision::Touch { expires: *expires },
                None => Decision::Keep,
            })?;
        }
        Op::Vanish => store.vanish()?,
        Op::Optimize { params } => {
            let params = std::str::from_utf8(params).unwrap_or("");
            match store.optimize(params) {
                Ok(()) => {}
                Err(Error::InvalidParam(_) | Error::Unsupported(_)) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Op::Batch { body, .. } => {
            let mut ops = Vec::new();
            let mut across = false;
            for op in batch_ops(body) {
                let op = op?;
                let (space, op) = op.space();
                let name = match space {
                    Some(s) => {
                        let (name, params) = s.text()?;
                        // Made before the batch, as `write_across` asks.
                        store.keyspace(name, params)?;
                        across = true;
                        name.to_string()
                    }
                    None => String::new(),
                };
                let op = match op {
                    Op::Put {
                        key,
                        value,
                        flags,
                        expires,
                    } => BatchOp::Put {
                        key: key.to_vec(),
                        value: value.to_vec(),
                        flags: *flags,
                        expires: *expires,
                    },
                    Op::Remove { key } => BatchOp::Remove { key: key.to_vec() },
                    _ => return Err(Error::Corrupt("a batch holds only puts and removes".into())),
                };
                ops.push((name, op));
            }
            if across {
                let refs: Vec<(&str, BatchOp)> =
                    ops.iter().map(|(n, o)| (n.as_str(), o.clone())).collect();
                store.write_across(&refs)?;
            } else {
                let own: Vec<BatchOp> = ops.into_iter().map(|(_, o)| o).collect();
                store.write_batch(&own)?;
            }
        }
        Op::Values { key, body, .. } => {
            if store.allows_dups() {
                store.remove_all(key)?;
                for v in values_of(body) {
                    store.put_dup(key, v?, false)?;
                }
            } else {
                match values_of(body).last() {
                    Some(v) => {
                        store.put(key, v?)?;
                    }
                    None => {
                        store.out(key)?;
                    }
                }
            }
        }
    }
    Ok(true)
}

/// Run `f` with durability waits deferred on this thread (`crate::durability`): a database
/// with `sync=always` then applies a run of records without an fsync each, and the caller
/// syncs once at the end.
pub(crate) fn deferred<T>(f: impl FnOnce() -> T) -> T {
    let was = crate::durability::deferred();
    crate::durability::set_deferred(true);
    let r = f();
    crate::durability::set_deferred(was);
    if !was {
        crate::durability::take_pending();
    }
    r
}

/// Replay the records of the update log in `dir` after `after` and up to `until` (time stamps
/// in microseconds, inclusive) onto `store`: a point-in-time restore of a backup taken at
/// `after`. Returns how many records were applied and the time stamp of the last one (`after`
/// when none). Every record in the range is read and checked first: a damaged log is refused
/// before anything of it is applied.
pub fn replay(
    store: &dyn Store,
    dir: &std::path::Path,
    after: u64,
    until: u64,
) -> Result<(u64, u64)> {
    replay_in(store, &crate::io::OsVfs, dir, after, until)
}

/// [`replay`] of a log directory on `vfs`.
pub fn replay_in(
    store: &dyn Store,
    vfs: &dyn crate::io::Vfs,
    dir: &std::path::Path,
    after: u64,
    until: u64,
) -> Result<(u64, u64)> {
    // Every record is read and checked first: a damaged log is refused before anything of
    // it is applied.
    super::read_dir_in(vfs, dir, after, until, &mut |_| Ok(()))?;
    let mut last = after;
    // One sync at the end, not one a record.
    let r = deferred(|| {
        super::read_dir_in(vfs, dir, after, until, &mut |rec| {
            apply(store, &rec.op)?;
            last = rec.ts;
            Ok(())
        })
    });
    store.sync()?;
    let n = r?;
    Ok((n, last))
}
