//! Opening a database directory: the open modes, the descriptor, the lock, and building the
//! in-memory state before recovery (`recover`).

use super::*;

/// A random odd 64-bit number (a new database's salt).
pub(crate) fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most `b.len()` bytes into the valid buffer `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    let mut v = u64::from_le_bytes(b);
    if n != 8 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        v ^= xxhash_rust::xxh3::xxh3_64(&(t ^ std::process::id() as u64).to_le_bytes());
    }
    v | 1
}

impl DiskHash {
    /// How many shards the index has (`shard_of` is below it).
    pub const SHARDS: usize = NSHARDS;

    /// The index shard `key` belongs to, in `0..DiskHash::SHARDS`; the same for the life of
    /// this open database (the hash seed is the database's own).
    ///
    /// Each shard has one lock, and two threads writing keys of the same shards hand that
    /// lock's cache line back and forth. A bulk loader that splits its keys between threads
    /// by shard (thread `t` of `T` taking the keys with `shard_of(key) * T / SHARDS == t`)
    /// avoids that: see `kura-bench write --by-shard` and docs/BENCHMARKS.md.
    pub fn shard_of(&self, key: &[u8]) -> usize {
        self.inner.hash(key).0
    }

    /// Open (creating when missing) the database directory at `path` on the real file system.
    pub fn open(path: &Path, params: &Params) -> Result<DiskHash> {
        Self::open_with(path, params, Arc::new(OsVfs), false)
    }

    /// Open on any file system: `readonly` is [`OpenMode::ReadOnly`], else
    /// [`OpenMode::Create`].
    pub fn open_with(
        path: &Path,
        params: &Params,
        vfs: Arc<dyn Vfs>,
        readonly: bool,
    ) -> Result<DiskHash> {
        let mode = if readonly {
            OpenMode::ReadOnly
        } else {
            OpenMode::Create
        };
        Self::open_mode(path, params, vfs, mode)
    }

    /// Open on any file system under `mode` (the rules: `stored`). A read-only open writes
    /// nothing but the lock file, not even recovery's truncation of a torn tail.
    pub fn open_mode(
        path: &Path,
        params: &Params,
        vfs: Arc<dyn Vfs>,
        mode: OpenMode,
    ) -> Result<DiskHash> {
        Self::open_full(path, params, vfs, mode, false, None)
    }

    /// `open_mode`; `salvage` (read-only only): rebuild the index from the log alone
    /// (`Mode::Salvage`); `held`: the caller holds the database's lock, and this is what to
    /// keep in its place.
    pub(super) fn open_full(
        path: &Path,
        params: &Params,
        vfs: Arc<dyn Vfs>,
        mode: OpenMode,
        salvage: bool,
        held: Option<Box<dyn std::any::Any + Send + Sync>>,
    ) -> Result<DiskHash> {
        let readonly = mode == OpenMode::ReadOnly;
        let mut cfg = Config::from_params(params, None)?;
        let found = stored::prepare(&*vfs, path, mode)?;
        let lock = match held {
            Some(l) => l,
            None => crate::lock::take(&*vfs, path)?,
        };
        // Read under the lock: what the database stores decides what this open did not. A
        // damaged descriptor refuses a writable open; a read-only one goes on without it (its
        // stored parameters unknown) and reports it.
        let (desc, bad_meta) = match crate::meta::read(&*vfs, path) {
            Err(Error::Corrupt(m)) if readonly => (None, Some(m)),
            r => (r?, None),
        };
        let had = match &desc {
            Some(d) => Some(stored::Stored::from_descriptor(d, path, MAX_LANES)?),
            None => None,
        };
        if let Some(had) = had {
            if cfg.lanes.is_some_and(|want| want != had.lanes) {
                return Err(Error::InvalidParam(format!(
                    "`lanes={}`: this database was created with {} lanes, fixed at creation",
                    cfg.lanes.unwrap_or_default(),
                    had.lanes
                )));
            }
            cfg.lanes = Some(had.lanes);
            if params.size("bnum")?.is_none() {
                cfg.bnum = had.bnum;
            }
        }
        let compression = match params.compression()? {
            Some(c) => c,
            None => had.map_or(Compression::None, |h| h.compress),
        };
        let bnum = cfg.bnum;
        let how = match (readonly, salvage) {
            (false, _) => Mode::Write,
            (true, false) => Mode::Read,
            (true, true) => Mode::Salvage,
        };
        let inner = open_inner(path, cfg, compression, vfs, how, lock)?;
        if let Some(m) = bad_meta {
            inner
                .findings
                .lock()
                .push(meta_damage(&*inner.log.vfs, path, m));
        }
        // A new database, or one made before descriptors, stores this open's choices.
        let stored = match had {
            None if !readonly => {
                let s = stored::Stored {
                    lanes: inner.log.lanes,
                    compress: compression,
                    bnum,
                };
                crate::meta::write(&*inner.log.vfs, path, &s.descriptor())?;
                Some(s)
            }
            had => had,
        };
        inner.note_tables();
        let inner = Arc::new(inner);
        inner.spaces.set_root(&inner);
        let db = DiskHash {
            inner,
            bg: Mutex::new(Vec::new()),
            stored: Mutex::new(stored),
            created: found.created,
        };
        let mut threads: Vec<(&str, BgThread)> = Vec::new();
        if !readonly {
            threads.push(("kura-kh-bg", Inner::background));
            threads.push(("kura-kh-gc", Inner::compactor));
            if db.inner.log.sync == SyncMode::Always {
                threads.push(("kura-kh-fill", |w| w.log.fill_loop()));
            }
        }
        for (name, run) in threads {
            let w = db.inner.clone();
            let h = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || run(w))
                .map_err(Error::Io)?; // dropping `db` stops the threads already started
            db.bg.lock().push(h);
        }
        Ok(db)
    }

    /// Whether this open made the database.
    pub fn created(&self) -> bool {
        self.created
    }

    /// What the database stores about itself (see `stored`); `None` only in a read-only open
    /// of a database made before descriptors.
    pub fn stored(&self) -> Option<stored::Stored> {
        *self.stored.lock()
    }
}

pub(super) fn open_inner(
    dir: &Path,
    cfg: Config,
    compression: Compression,
    vfs: Arc<dyn Vfs>,
    mode: Mode,
    lock: Box<dyn std::any::Any + Send + Sync>,
) -> Result<Inner> {
    let readonly = mode != Mode::Write;
    // Find the segments; those whose header is not one of this database's go to recovery.
    let mut probes = crate::log::recovery::probe_segments(&*vfs, dir)?;
    let settled = crate::log::recovery::settle_probes(&mut probes);
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
    // With no segment header to go by, the checkpoint's (the same salt seeds the key hash).
    let (salt, lanes) = match settled {
        Some((salt, lanes)) => (Some(salt), Some(lanes)),
        None if !bad.is_empty() => match recover::peek_checkpoint(&*vfs, dir) {
            Some((salt, lanes)) => (Some(salt), Some(lanes)),
            None => (None, None),
        },
        None => (None, None),
    };
    let salt = salt.unwrap_or_else(random_u64);
    let lanes = match (lanes, cfg.lanes) {
        (Some(have), Some(want)) if have != want => {
            return Err(Error::InvalidParam(format!(
                "`lanes={want}`: this database was created with {have} lanes, fixed at creation"
            )))
        }
        (Some(have), _) => have,
        (None, want) => want.unwrap_or(DEFAULT_LANES),
    };
    let shards: Box<[Shard]> = (0..NSHARDS)
        .map(|i| {
            let mut table = Table::with_capacity((cfg.bnum.min(MAX_PRESIZE) as usize) / NSHARDS);
            table.set_max_load(shard_max_load(i));
            Shard(RwLock::new(ShardState {
                table,
                seq: 0,
                inflight: Vec::new(),
            }))
        })
        .collect();
    let msiz = cfg.msiz;
    let log_cfg = crate::log::LogConfig {
        sync: cfg.sync,
        segsiz: cfg.segsiz,
        bufsiz: cfg.bufsiz,
        msiz,
        lanes,
    };
    let inner = Inner {
        log: Arc::new(Log::new(dir, vfs, readonly, log_cfg, salt, table)),
        ks: 0,
        spaces: Arc::new(space::Spaces::default()),
        full_replay: mode == Mode::Salvage,
        findings: Mutex::new(Vec::new()),
        cfg: Mutex::new(cfg),
        compression: AtomicU8::new(compression as u8),
        hash_seed: AtomicU64::new(salt),
        shards,
        brl: Brl::new(),
        hints: Box::new(TableHints(std::array::from_fn(|_| TableHint::default()))),
        appended: AtomicU64::new(0),
        expiring: AtomicU64::new(0),
        damaged: Mutex::new(Vec::new()),
        maint: Arc::new(Mutex::new(())),
        counters: Counters::default(),
        lock: Mutex::new(Some(lock)),
    };
    if let Err(e) = inner.recover(bad) {
        inner.spaces.clear(); // the keyspaces made by replay hold the log
        return Err(e);
    }
    Ok(inner)
}

/// The finding of a database descriptor that fails its checks (`why`): no record is lost, but
/// what the database stores about itself (its compression, its bnum hint) is unknown.
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
            "the database descriptor is damaged ({why}): its stored parameters (compression, \
             bnum) are unknown; `repair` writes a new one (give `#compress=` to the new \
             database if it was compressed)"
        ),
    }
}
