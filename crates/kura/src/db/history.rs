//! `kura db restore` and `kura db ulog`: a database's history from its update log.

use super::*;

/// A time of `--until` / `--from` (see [`crate::when`]).
pub(super) fn time_arg(flag: &str, s: Option<&str>) -> Result<Option<u64>, Fail> {
    s.map(|s| when::parse(s, when::now_us()).map_err(|e| Fail::Err(format!("{flag} {e}"))))
        .transpose()
}

pub(super) fn restore(name: &str, ulog: &Path, until: Option<&str>) -> Res {
    let until = time_arg("--until", until)?;
    let path = PathBuf::from(name.split('#').next().unwrap_or(name));
    let (after, sid) =
        engine::ulog::logged::read_position(&path).map_err(|e| Fail::Err(e.to_string()))?;
    if let Some(u) = until.filter(|&u| u < after) {
        return Err(Fail::Err(format!(
            "--until {} ({u}) is before the backup's time: {} holds every change up to {} \
             ({after}); a restore goes forward from there only (an earlier moment needs an \
             earlier backup)",
            when::show(u),
            path.display(),
            when::show(after)
        )));
    }
    with_db(name, Open::Existing, |db| {
        let (n, last) = engine::ulog::apply::replay(db, ulog, after, until.unwrap_or(u64::MAX))?;
        engine::ulog::logged::write_position(&path, last, sid)?;
        print(
            format!(
                "{n} records replayed; the backup now holds every change up to {} ({last})\n",
                when::show(last)
            )
            .as_bytes(),
        )
    })
}

/// `kura db ulog DIR`: one line per record (a batch's records one each).
pub(super) fn ulog_list(dir: &Path, from: Option<&str>, until: Option<&str>) -> Res {
    use engine::ulog::record::{batch_ops, Op};
    let from = time_arg("--from", from)?;
    let until = time_arg("--until", until)?.unwrap_or(u64::MAX);
    let start = engine::ulog::dir_start(dir)?;
    let after = from.map_or(start, |f| f.saturating_sub(1).max(start));
    let mut out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
    let mut failed = None;
    let mut line = Vec::new();
    let read = engine::ulog::read_dir(dir, after, until, &mut |rec| {
        let time = when::show(rec.ts);
        let mut one = |op: &str, key: &[u8]| {
            line.clear();
            line.extend_from_slice(
                format!("{time}\t{}\t{}\t{op}\t", rec.ts, rec.origin_sid).as_bytes(),
            );
            tsv::escape_into(&mut line, key);
            line.push(b'\n');
            out.write_all(&line)
        };
        // An operation of a keyspace is named `op@keyspace`.
        let name = |op: &Op<'_>| -> (String, Vec<u8>) {
            let (space, op) = op.space();
            let (what, key): (&str, &[u8]) = match op {
                Op::Put { key, .. } => ("put", key),
                Op::Remove { key } => ("out", key),
                Op::Touch { key, .. } => ("touch", key),
                Op::Vanish => ("vanish", b""),
                Op::Optimize { params } => ("optimize", params),
                Op::Values { key, .. } => ("values", key),
                Op::Batch { .. } => ("batch", b""),
                Op::In { .. } => ("?", b""),
            };
            match space {
                Some(s) => (
                    format!("{what}@{}", String::from_utf8_lossy(s.name)),
                    key.to_vec(),
                ),
                None => (what.to_string(), key.to_vec()),
            }
        };
        let r = match rec.op.space().1 {
            Op::Batch { body, .. } => {
                let mut r = Ok(());
                // A keyspace's own batch: its elements are of the keyspace.
                let outer = match rec.op.space().0 {
                    Some(s) => format!("@{}", String::from_utf8_lossy(s.name)),
                    None => String::new(),
                };
                for op in batch_ops(body) {
                    let op = op?;
                    let (what, key) = name(&op);
                    let at = if op.space().0.is_none() {
                        &outer[..]
                    } else {
                        ""
                    };
                    r = one(&format!("batch.{what}{at}"), &key);
                    if r.is_err() {
                        break;
                    }
                }
                r
            }
            _ => {
                let (what, key) = name(&rec.op);
                one(&what, &key)
            }
        };
        if let Err(e) = r {
            failed = Some(stdout_err(e));
            // Stop reading: an error the caller replaces with `failed`.
            return Err(Error::Unsupported("stdout failed"));
        }
        Ok(())
    });
    if let Some(f) = failed {
        return Err(f);
    }
    read?;
    out.flush().map_err(stdout_err)
}
