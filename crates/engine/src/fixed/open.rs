//! Opening a fixed-length database: the open rules, the descriptor and its stored width and
//! limsiz, the lock, and recovery (the checkpoint loaded, the log after it replayed through
//! `log::replay`).

use super::rw::{id_of, split};
use super::stored::{self, Stored};
use super::*;
use crate::config::OpenMode;
use crate::io::Vfs;
use crate::log::checkpoint;
use crate::log::format::{Header, T_BATCH, T_DELETE, T_PUT};
use crate::log::recovery::{probe_segments, refusal, settle_probes, Finding, Probe};
use crate::log::replay::{self, Replayer};
use crate::log::segment::{seg_file_name, SegTable, Segment};
use crate::log::{for_each_sub, LogConfig};
use std::collections::HashMap;
use std::path::Path;

/// A random salt for a new database (never 0).
pub(super) fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most `b.len()` bytes into the valid buffer `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    let mut v = u64::from_le_bytes(b);
    if n != 8 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        v ^= xxhash_rust::xxh3::xxh3_64(&(t ^ u64::from(std::process::id())).to_le_bytes());
    }
    v | 1
}

impl FixedDb {
    /// Open the database directory at `path` on any file system under `mode`.
    pub fn open_mode(
        path: &Path,
        params: &Params,
        vfs: Arc<dyn Vfs>,
        mode: OpenMode,
    ) -> Result<FixedDb> {
        Self::open_full(path, params, vfs, mode, false, None)
    }

    /// `open_mode`; `salvage` (read-only only): rebuild the index from the log alone;
    /// `held`: the caller holds the database's lock, and this is what to keep in its place.
    pub(super) fn open_full(
        path: &Path,
        params: &Params,
        vfs: Arc<dyn Vfs>,
        mode: OpenMode,
        salvage: bool,
        held: Option<Box<dyn std::any::Any + Send + Sync>>,
    ) -> Result<FixedDb> {
        let readonly = mode == OpenMode::ReadOnly;
        let cfg = Config::from_params(params)?;
        let (want_width, want_limsiz) = (params.size("width")?, params.size("limsiz")?);
        if let Some(w) = want_width {
            id::tune(w, want_limsiz.unwrap_or(id::DEFAULT_LIMSIZ))?;
        }
        let created = crate::meta::prepare(&*vfs, path, mode, &stored::own_file, ABOUT)?;
        let lock = match held {
            Some(l) => l,
            None => crate::lock::take(&*vfs, path)?,
        };
        let (desc, bad_meta) = match crate::meta::read(&*vfs, path) {
            Err(Error::Corrupt(m)) if readonly => (None, Some(m)),
            r => (r?, None),
        };
        let had = match &desc {
            Some(d) => Some(Stored::from_descriptor(d, path)?),
            None => None,
        };
        let shape = match had {
            Some(s) => {
                if want_width.is_some_and(|w| w != s.width) {
                    return Err(Error::InvalidParam(format!(
                        "`width={}`: this database was created with width {}, fixed at \
                         creation (`optimize width=…` changes it)",
                        want_width.unwrap_or_default(),
                        s.width
                    )));
                }
                if let Some(l) = want_limsiz {
                    let tuned = id::tune(s.width, l)?.1;
                    if tuned != s.limsiz {
                        return Err(Error::InvalidParam(format!(
                            "`limsiz={l}`: this database was created with limsiz {}, fixed \
                             at creation (`optimize limsiz=…` changes it)",
                            s.limsiz
                        )));
                    }
                }
                s
            }
            None => {
                let (width, limsiz) = id::tune(
                    want_width.unwrap_or(id::DEFAULT_WIDTH),
                    want_limsiz.unwrap_or(id::DEFAULT_LIMSIZ),
                )?;
                Stored { width, limsiz }
            }
        };
        let how = match (readonly, salvage) {
            (false, _) => Mode::Write,
            (true, false) => Mode::Read,
            (true, true) => Mode::Salvage,
        };
        // A read-only open of a damaged descriptor does not know the limit: every id is read.
        let limid = if bad_meta.is_some() {
            id::MAX_ID
        } else {
            shape.limid()
        };
        let meta_bad = bad_meta.is_some();
        let inner = open_inner(path, cfg, shape, limid, vfs, how, lock)?;
        if let Some(m) = bad_meta {
            inner
                .findings
                .lock()
                .push(meta_damage(&*inner.log.vfs, path, m));
        }
        // `optimize width=…` puts the new slot file in place before it writes the descriptor:
        // the slot file's width and limsiz are the database's.
        let head = inner.slots.load().head.lock().clone();
        let mut had = had;
        if head.gen > 0 && !meta_bad {
            if let Some(s) = had.filter(|s| (s.width, s.limsiz) != (head.width, head.limsiz)) {
                let fixed = Stored {
                    width: head.width,
                    limsiz: head.limsiz,
                };
                if id::tune(fixed.width, fixed.limsiz).ok() == Some((fixed.width, fixed.limsiz)) {
                    inner.width.store(fixed.width, Ordering::Relaxed);
                    inner.limsiz.store(fixed.limsiz, Ordering::Relaxed);
                    inner.limid.store(fixed.limid(), Ordering::Relaxed);
                    if !readonly {
                        crate::meta::write(&*inner.log.vfs, path, &fixed.descriptor())?;
                    }
                    had = Some(fixed);
                } else {
                    let _ = s;
                }
            }
        }
        // A database of the format before the slot file: its log goes into the slot file now.
        let convert = !readonly
            && head.gen == 0
            && (inner.log.vfs.exists(&path.join(CKPT_NAME))
                || !inner.log.segs.load().segs.is_empty());
        let stored = match had {
            None if !readonly => {
                crate::meta::write(&*inner.log.vfs, path, &shape.descriptor())?;
                Some(shape)
            }
            None => None,
            had => had,
        };
        let db = FixedDb {
            inner: Arc::new(inner),
            bg: Mutex::new(Vec::new()),
            stored: Mutex::new(stored),
            created,
        };
        if convert {
            let _m = db.inner.maint.lock();
            db.inner.checkpoint()?;
        }
        if !readonly {
            db.start_background()?;
        }
        Ok(db)
    }

    /// Whether this open made the database.
    pub fn created(&self) -> bool {
        self.created
    }

    /// What the database stores about itself (`None` only in a read-only open of a database
    /// whose descriptor is damaged or missing).
    pub fn stored(&self) -> Option<Stored> {
        *self.stored.lock()
    }
}

/// The finding of a damaged descriptor: no record is lost, but the width and limsiz are
/// unknown.
pub(super) fn meta_damage(vfs: &dyn Vfs, dir: &Path, why: String) -> crate::store::Damaged {
    let name = crate::meta::META_NAME;
    let len = vfs
        .open(&dir.join(name), false)
        .and_then(|f| f.len())
        .unwrap_or(0);
    crate::store::Damaged {
        file: name.into(),
        off: 0,
        len,
        lost: 0,
        what: format!(
            "the database descriptor is damaged ({why}): its width and limsiz are unknown; \
             `repair` writes a new one (give `#width=` and `#limsiz=` to the new database if \
             they were not the defaults)"
        ),
    }
}

#[allow(clippy::too_many_arguments)]
fn open_inner(
    dir: &Path,
    cfg: Config,
    shape: Stored,
    limid: u64,
    vfs: Arc<dyn Vfs>,
    mode: Mode,
    lock: Box<dyn std::any::Any + Send + Sync>,
) -> Result<Inner> {
    let readonly = mode != Mode::Write;
    let mut probes = probe_segments(&*vfs, dir)?;
    let settled = settle_probes(&mut probes);
    let mut table = SegTable::default();
    let mut bad = Vec::new();
    for p in probes {
        match p.header {
            Ok(info) => {
                let seg = Segment::new(p.id, info.lane as usize, info.salt, p.path, p.file, p.len);
                table.segs.insert(p.id, Arc::new(seg));
            }
            Err(_) => bad.push(p),
        }
    }
    let salt = match settled {
        Some((_, lanes)) if lanes != 1 => {
            return Err(Error::NotADatabase(format!(
                "{}: its segments are of a database of {lanes} lanes (an on-disk hash?); a \
                 fixed-length database writes one",
                dir.display()
            )))
        }
        Some((salt, _)) => Some(salt),
        None => None,
    };
    // The slot file: made (empty, generation 0) for a new database and for one written before
    // it existed, whose whole log is then replayed and written into it by a checkpoint.
    let fresh = slots::Head {
        salt: salt
            .or_else(|| peek_salt(&*vfs, dir))
            .unwrap_or_else(random_u64),
        width: shape.width,
        limsiz: shape.limsiz,
        ..slots::Head::default()
    };
    let opened = slots::Slots::open(&*vfs, dir, readonly, Some(fresh))?;
    let salt = salt.unwrap_or_else(|| opened.slots.head.lock().salt);
    let log_cfg = LogConfig {
        sync: cfg.sync,
        segsiz: cfg.segsiz,
        bufsiz: cfg.bufsiz,
        msiz: cfg.msiz,
        lanes: 1,
    };
    let inner = Inner {
        log: Log::new(dir, vfs, readonly, log_cfg, salt, table),
        index: Index::new(),
        slots: arc_swap::ArcSwap::from_pointee(opened.slots),
        w: Mutex::new(W::default()),
        count: AtomicU64::new(0),
        min: AtomicU64::new(0),
        max: AtomicU64::new(0),
        width: AtomicU64::new(shape.width),
        limsiz: AtomicU64::new(shape.limsiz),
        limid: AtomicU64::new(limid),
        cfg: Mutex::new(cfg),
        mode,
        findings: Mutex::new(Vec::new()),
        appended: AtomicU64::new(0),
        expiring: AtomicU64::new(0),
        maint: Mutex::new(()),
        counters: Counters::default(),
        lock: Mutex::new(Some(lock)),
    };
    inner.recover(bad, opened.findings)?;
    Ok(inner)
}

/// The salt the checkpoint of the format before the slot file was written for: what a
/// database whose segment headers are all unusable is read with.
fn peek_salt(vfs: &dyn Vfs, dir: &Path) -> Option<u64> {
    match checkpoint::read_verified(vfs, dir, CKPT_NAME, ckpt::MIN_LEN) {
        checkpoint::Read::Verified(b) if b.get(..8) == Some(ckpt::MAGIC) => {
            crate::log::checkpoint::le_u64(&b, 12)
        }
        _ => None,
    }
}

impl Inner {
    /// Replay the log written since the slot file's checkpoint into the index (all of it when
    /// the slot file holds nothing yet). Refuses (writable) or reports (read-only) damage.
    fn recover(&self, bad: Vec<Probe>, mut found: Vec<Finding>) -> Result<()> {
        let table = self.log.segs.load_full();
        let slots = self.slots.load_full();
        let head = slots.head.lock().clone();
        if !found.is_empty() && self.mode == Mode::Write {
            return Err(refusal(&self.log.dir, &found));
        }
        let mut w = self.w.lock();
        let (places, from) = if head.gen > 0 {
            found.extend(head.places.findings(&table, &[]));
            if found.is_empty() {
                replay::restore_places(&self.log, &head.places);
            }
            w.seq = head.seq;
            (Some(head.places.clone()), Some(head.places.replay.clone()))
        } else {
            // Nothing checkpointed: saved at the next close (a database of the format before
            // the slot file is converted then).
            self.appended.fetch_add(1, Ordering::Relaxed);
            (None, None)
        };
        let segsiz = self.cfg.lock().segsiz as usize;
        let mut r = Replay {
            inner: self,
            w: &mut w,
            tombs: HashMap::new(),
        };
        let done = replay::replay(
            &self.log,
            bad,
            places.as_ref(),
            from.as_deref(),
            found,
            segsiz,
            &mut r,
        )?;
        if done.applied > 0 {
            self.appended.fetch_add(done.applied, Ordering::Relaxed);
        }
        self.recount(&mut w);
        if !slots.side_entries().is_empty() {
            self.expiring.fetch_add(1, Ordering::Relaxed);
        }
        *self.findings.lock() = done.findings;
        Ok(())
    }
}

/// Recovery's view of the records (`log::replay`): each id's records applied in seq order.
struct Replay<'a> {
    inner: &'a Inner,
    w: &'a mut W,
    /// The seq of the newest delete applied for each id.
    tombs: HashMap<u64, u64>,
}

impl Replayer for Replay<'_> {
    fn forget_before(
        &mut self,
        cut: &[Option<u64>],
        lane_of: &dyn Fn(u32) -> Option<usize>,
    ) -> Result<()> {
        // A vanish: every record of the pages goes too.
        self.inner.slots.load().set_void();
        let mut gone = Vec::new();
        self.inner.index.each_from(1, |id, place| {
            if place == super::rw::DEL {
                return true;
            }
            let lane = lane_of(split(place).0);
            if lane
                .and_then(|l| cut.get(l).copied().flatten())
                .is_none_or(|c| place < c)
            {
                gone.push(id);
            }
            true
        });
        for id in gone {
            self.inner.index.set(id, 0);
        }
        Ok(())
    }

    fn apply(&mut self, seg: u32, off: u64, h: &Header, rec: &[u8]) -> Result<()> {
        let inner = self.inner;
        match h.typ {
            T_PUT | T_DELETE => {
                let id = id_of(h, rec)
                    .filter(|&id| id >= 1 && id <= inner.limid())
                    .ok_or_else(|| {
                        Error::Corrupt(format!(
                            "{} offset {off}: a record whose key is not an id of this database \
                             (a record of another kind of database?)",
                            seg_file_name(seg)
                        ))
                    })?;
                let seq = h.fields.seq;
                self.w.seq = self.w.seq.max(seq);
                let cur = inner.index.get(id);
                let cur_head = match cur {
                    0 | super::rw::DEL => None,
                    p => match inner.header_at(p) {
                        Some(x) => Some(x),
                        // A record the checkpoint's index points at that cannot be read.
                        None if inner.log.readonly => None,
                        None => {
                            let (s, o) = split(p);
                            let f = Finding {
                                file: seg_file_name(s),
                                off: o,
                                len: 0,
                                lost: 1,
                                what: "a damaged record the index points at".into(),
                            };
                            return Err(refusal(&inner.log.dir, &[f]));
                        }
                    },
                };
                if cur_head.is_some_and(|(_, s)| s >= seq)
                    || self.tombs.get(&id).is_some_and(|&t| t >= seq)
                {
                    return Ok(()); // a newer write of the id is applied already
                }
                if h.typ == T_PUT {
                    if h.fields.expires != 0 {
                        inner.expiring.fetch_add(1, Ordering::Relaxed);
                    }
                    inner.index.set(id, replay::loc_of(seg, off));
                } else {
                    inner.index.set(id, super::rw::DEL);
                    self.tombs.insert(id, seq);
                }
            }
            T_BATCH => {
                for_each_sub(rec, h, |pos, sh, srec| {
                    self.apply(seg, off + pos as u64, sh, srec)
                })?;
            }
            _ => {}
        }
        Ok(())
    }
}
