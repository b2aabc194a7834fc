//! Every live record, fast (`Store::for_each_record`, used by `kura db export`).
//!
//! The cursor walks the log and asks the index about each record it meets: a cache miss per
//! record in a large index. Here the index is read instead, shard by shard: the locations of
//! the live records are collected, sorted, and the records read in file order, straight from
//! the segments' maps (1 MiB chunks where a segment is not mapped). Measured on 1M records:
//! docs/benchmarks/engine.md, "Export".
//!
//! Memory: 8 bytes per location, for at most `GROUP` locations at a time: the segments are
//! taken in groups (consecutive ids) whose slots add up to at most `GROUP` (a larger segment
//! is a group by itself), one pass over the index per group.
//!
//! Consistency, as for the cursor: every record live when the call starts and not written
//! during it is returned exactly once; a record written during the call may be missed. Each
//! shard's seq is noted first, and a record with a later seq is skipped (so a key rewritten
//! from one group's segments into a later group's is not returned twice). `maint` is held
//! throughout, so compaction neither moves nor removes a record meanwhile.

use super::format::{self, T_PUT};
use super::segment::{corrupt_at, Segment};
use super::{decode_value, meta_of, DiskHash, NSHARDS};
use crate::error::{Error, Result};
use crate::store::{is_expired, now_secs};
use std::sync::Arc;

/// Locations sorted at a time (32 MiB of them).
const GROUP: usize = if cfg!(test) { 1000 } else { 4 << 20 };
/// Bytes read at a time from a segment that is not mapped.
const CHUNK: usize = if cfg!(test) { 4096 } else { 1 << 20 };

/// Where the scan reads a segment from: its map, or a chunk read from its file.
struct Source {
    seg: Arc<Segment>,
    map: Option<Arc<crate::io::Map>>,
    chunk: Vec<u8>,
    chunk_at: u64,
}

impl Source {
    fn new(seg: Arc<Segment>) -> Source {
        let map = seg.map.load_full();
        Source {
            seg,
            map,
            chunk: Vec::new(),
            chunk_at: 0,
        }
    }

    /// The bytes from `off` on that are at hand, at least `want` of them when the segment
    /// has them below `flushed`; `None` when the record must be read by itself.
    fn at(&mut self, off: u64, want: usize, flushed: u64) -> Result<Option<&[u8]>> {
        let end = flushed.min(off + want as u64);
        if let Some(m) = &self.map {
            let m = m.as_slice();
            if end as usize <= m.len() {
                return Ok(m.get(off as usize..flushed.min(m.len() as u64) as usize));
            }
        }
        let held = self.chunk_at + self.chunk.len() as u64;
        if off < self.chunk_at || end > held {
            let n = ((flushed - off) as usize).min(CHUNK.max(want));
            self.seg.read_file(off, &mut self.chunk, n)?;
            self.chunk_at = off;
        }
        let rel = (off - self.chunk_at) as usize;
        Ok(self.chunk.get(rel..))
    }
}

impl DiskHash {
    pub(super) fn each_live(&self, f: &mut crate::store::RecordVisitor<'_>) -> Result<u64> {
        let inner = &self.inner;
        inner.log.check_open()?;
        let _m = inner.maint.lock();
        inner.log.flush_all()?;
        let segs = inner.log.segs.load_full();
        let ids: Vec<u32> = segs.segs.keys().copied().collect();
        let newest = ids.last().copied();
        let missing = |seg: u32| Error::Corrupt(format!("index points into missing segment {seg}"));
        // Each shard's seq, and how many slots point into each segment.
        let mut seqs = [0u64; NSHARDS];
        let mut counts = vec![0usize; ids.len()];
        for (i, seq) in seqs.iter_mut().enumerate() {
            let g = inner.excl(i);
            *seq = g.seq;
            let mut last = (u32::MAX, 0);
            for s in g.iter() {
                if newest.is_none_or(|n| s.seg > n) {
                    // A segment a writer started after the table was read (the first one of
                    // a database that had none then): written during the call, so it may be
                    // missed.
                    continue;
                }
                if s.seg != last.0 {
                    last = (
                        s.seg,
                        ids.binary_search(&s.seg).map_err(|_| missing(s.seg))?,
                    );
                }
                counts[last.1] += 1;
            }
        }
        // Groups of consecutive segments: (first id, last id).
        let mut groups: Vec<(u32, u32)> = Vec::new();
        let mut n = 0;
        for (k, &id) in ids.iter().enumerate() {
            match groups.last_mut() {
                Some(g) if n + counts[k] <= GROUP => g.1 = id,
                _ => {
                    groups.push((id, id));
                    n = 0;
                }
            }
            n += counts[k];
        }
        let now = now_secs();
        let check_seq = !inner.log.readonly;
        let mut locs: Vec<u64> = Vec::new();
        let mut buf = Vec::new();
        // Records the index points at that no longer verify (damage behind the checkpoint of
        // a database opened despite it): passed over, counted.
        let mut damaged = 0u64;
        for (lo, hi) in groups {
            locs.clear();
            for i in 0..NSHARDS {
                let g = inner.excl(i);
                locs.extend(
                    g.iter()
                        .filter(|s| (lo..=hi).contains(&s.seg))
                        .map(|s| s.loc()),
                );
            }
            locs.sort_unstable();
            let mut src: Option<Source> = None;
            for &loc in &locs {
                let (id, off) = ((loc >> 32) as u32, loc & u32::MAX as u64);
                if src.as_ref().is_none_or(|s| s.seg.id != id) {
                    src = Some(Source::new(
                        segs.get(id).ok_or_else(|| missing(id))?.clone(),
                    ));
                }
                let Some(s) = src.as_mut() else { continue };
                let flushed = s.seg.flushed();
                let bad = |what| corrupt_at(id, off, what);
                let found = if off < flushed {
                    match s.at(off, format::MAX_HEADER_LEN, flushed)? {
                        Some(b) => {
                            let Some(h) = format::parse_header(b) else {
                                damaged += 1;
                                continue;
                            };
                            if h.len > b.len() {
                                match s.at(off, h.len, flushed)? {
                                    Some(b) if b.len() >= h.len => Some((h, &b[..h.len])),
                                    _ => None,
                                }
                            } else {
                                Some((h, &b[..h.len]))
                            }
                        }
                        None => None,
                    }
                } else {
                    None
                };
                let (h, rec) = match found {
                    Some(x) => x,
                    // Past the flushed end, or longer than what is at hand.
                    None => {
                        let seg = s.seg.clone();
                        let h = match inner.read_record(&seg, off, true, &mut buf) {
                            Ok(h) => h,
                            Err(Error::Corrupt(_)) => {
                                damaged += 1;
                                continue;
                            }
                            Err(e) => return Err(e),
                        };
                        (h, &buf[..h.len.min(buf.len())])
                    }
                };
                if !format::verify(rec, s_seed(&segs, id)) {
                    damaged += 1;
                    continue;
                }
                if h.typ != T_PUT || h.len > rec.len() {
                    return Err(bad("index points at a non-put record"));
                }
                let key = &rec[h.key_off..h.key_off + h.klen];
                if check_seq && h.fields.seq > seqs[inner.hash(key).0] {
                    continue; // written after the call began
                }
                if h.fields.expires != 0 && is_expired(h.fields.expires, now) {
                    continue;
                }
                let meta = meta_of(&h);
                let go = if h.fields.compression == 0 {
                    f(key, &rec[h.value_off()..h.len], meta)?
                } else {
                    f(key, &decode_value(&h, rec)?, meta)?
                };
                if !go {
                    return Ok(damaged);
                }
            }
        }
        Ok(damaged)
    }
}

fn s_seed(segs: &super::segment::SegTable, id: u32) -> u32 {
    segs.get(id).map_or(0, |s| s.seed)
}

#[cfg(test)]
mod tests {
    use crate::hash::DiskHash;
    use crate::io::{OsVfs, SimVfs, Vfs};
    use crate::name::Params;
    use crate::store::{BatchOp, Store};
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::sync::Arc;

    fn dump(db: &DiskHash) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut out = BTreeMap::new();
        let mut c = db.cursor().unwrap();
        while let Some((k, r)) = c.next().unwrap() {
            out.insert(k, r.value);
        }
        out
    }

    fn each(db: &DiskHash) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut out = BTreeMap::new();
        db.for_each_record(&mut |k, v, _| {
            assert!(out.insert(k.to_vec(), v.to_vec()).is_none(), "a key twice");
            Ok(true)
        })
        .unwrap();
        out
    }

    /// A workload with everything a scan meets: several segments and groups, overwrites,
    /// deletes, batches, compressed and large values, an expired record.
    fn fill(db: &DiskHash) {
        for i in 0..3000u32 {
            db.put(
                format!("k{i}").as_bytes(),
                &i.to_le_bytes().repeat(i as usize % 7),
            )
            .unwrap();
        }
        for i in (0..3000u32).step_by(3) {
            db.put(format!("k{i}").as_bytes(), b"again").unwrap();
        }
        for i in (0..3000u32).step_by(5) {
            db.out(format!("k{i}").as_bytes()).unwrap();
        }
        let ops: Vec<BatchOp> = (0..200u32)
            .map(|i| BatchOp::Put {
                key: format!("b{i}").into_bytes(),
                value: vec![b'z'; 300],
                flags: 0,
                expires: 0,
            })
            .collect();
        db.write_batch(&ops).unwrap();
        db.put(b"large", &vec![7u8; 100_000]).unwrap();
        db.put_with(b"expired", b"x", 0, 1).unwrap();
    }

    /// The same records as the cursor, each once, through maps (real files), chunks (the
    /// simulated files have no maps), unmapped segments (`msiz=1`) and with the lanes'
    /// buffers not yet flushed, before and after a reopen; read-only too.
    #[test]
    fn shows_what_the_cursor_shows() {
        let tmp = tempfile::tempdir().unwrap();
        let os: Arc<dyn Vfs> = Arc::new(OsVfs);
        let sim: Arc<dyn Vfs> = Arc::new(SimVfs::new());
        for (vfs, dir) in [
            (os, tmp.path().join("x.kh")),
            (sim, Path::new("/sim/x.kh").to_path_buf()),
        ] {
            for params in ["segsiz=64k#sync=none", "segsiz=64k#msiz=1#compress=lz4"] {
                let p = Params::parse(params).unwrap();
                let db = DiskHash::open_with(&dir, &p, vfs.clone(), false).unwrap();
                db.vanish().unwrap();
                fill(&db);
                let want = dump(&db);
                assert!(want.len() > 2000 && !want.contains_key(&b"expired"[..]));
                assert_eq!(each(&db), want, "{params}");
                db.close().unwrap();
                for readonly in [false, true] {
                    let db = DiskHash::open_with(&dir, &p, vfs.clone(), readonly).unwrap();
                    assert_eq!(each(&db), want, "{params} reopened, readonly {readonly}");
                }
            }
        }
    }

    #[test]
    fn stops_when_told() {
        let fs = SimVfs::new();
        let db = DiskHash::open_with(
            Path::new("/sim/x.kh"),
            &Params::default(),
            Arc::new(fs),
            false,
        )
        .unwrap();
        fill(&db);
        let mut n = 0;
        db.for_each_record(&mut |_, _, _| {
            n += 1;
            Ok(n < 10)
        })
        .unwrap();
        assert_eq!(n, 10);
    }

    /// Writers running beside the scan: a key not written during the call is shown once with
    /// its value; none is shown twice.
    #[test]
    fn writers_during_the_scan() {
        let fs = SimVfs::new();
        let p = Params::parse("segsiz=64k#sync=none").unwrap();
        let db =
            Arc::new(DiskHash::open_with(Path::new("/sim/x.kh"), &p, Arc::new(fs), false).unwrap());
        for i in 0..5000u32 {
            db.put(format!("still{i}").as_bytes(), &[1u8; 40]).unwrap();
            db.put(format!("moving{i}").as_bytes(), &[1u8; 40]).unwrap();
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let w = {
            let (db, stop) = (db.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut round = 0u8;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    round = round.wrapping_add(1);
                    for i in 0..5000u32 {
                        db.put(format!("moving{i}").as_bytes(), &[round; 40])
                            .unwrap();
                    }
                }
            })
        };
        for _ in 0..5 {
            let got = each(&db);
            for i in 0..5000u32 {
                assert_eq!(
                    got.get(format!("still{i}").as_bytes()),
                    Some(&vec![1u8; 40])
                );
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        w.join().unwrap();
    }

    /// A database with no segment yet when the scan reads the table, and a writer that makes
    /// the first one meanwhile: the records it writes are written during the call, never an
    /// index "into a missing segment" (seen through Tyrant's fwmkeys on a fresh replica).
    #[test]
    fn the_first_segment_written_during_the_scan() {
        let p = Params::parse("sync=none").unwrap();
        for round in 0..200 {
            let fs = SimVfs::new();
            let db = Arc::new(
                DiskHash::open_with(Path::new("/sim/x.kh"), &p, Arc::new(fs), false).unwrap(),
            );
            let w = {
                let db = db.clone();
                std::thread::spawn(move || {
                    for i in 0..50u32 {
                        db.put(format!("k{i}").as_bytes(), b"v").unwrap();
                    }
                })
            };
            for _ in 0..20 {
                if let Err(e) = db.for_each_record(&mut |_, _, _| Ok(true)) {
                    panic!("round {round}: {e}");
                }
            }
            w.join().unwrap();
        }
    }
}
