//! The runner: a round on a new database, its log, restarts, copies and threads.

use super::*;

/// The last operations run, shown when one fails.
#[derive(Clone, Default)]
pub(crate) struct Log(pub(crate) Arc<Mutex<VecDeque<String>>>);

impl Log {
    pub(crate) const KEEP: usize = 40;
    pub(crate) fn push(&self, mut line: String) {
        if line.len() > 240 {
            let mut cut = 240;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            line.truncate(cut);
            line.push('…');
        }
        let mut l = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if l.len() == Self::KEEP {
            l.pop_front();
        }
        l.push_back(line);
    }
    pub(crate) fn tail(&self) -> String {
        let l = self.0.lock().unwrap_or_else(|e| e.into_inner());
        l.iter().map(|s| format!("  {s}\n")).collect()
    }
}

pub(crate) struct Runner {
    pub(crate) db: Db,
    pub(crate) m: Model,
    pub(crate) keys: Keys,
    pub(crate) log: Log,
}

impl Runner {
    pub(crate) fn apply(&mut self, op: &Op) {
        if let Op::Restart(seed) = op {
            // No handle may be held across a restart.
            self.db.restart(*seed);
            return self.verify_all();
        }
        let db = self.db.store();
        let db = &*db;
        match op {
            Op::Cursor { writes, seed } => {
                check_cursor(db, &mut self.m, &self.keys, *writes, *seed)
            }
            Op::Fwm { prefix, max } => {
                let got = db.fwmkeys(prefix, *max).unwrap();
                let want: Vec<&Bytes> = match self.db.kind.ids {
                    Some(_) => {
                        let ids: Vec<u64> = self.m.live.keys().filter_map(Bytes::number).collect();
                        let (lo, hi) = model_interval(prefix, &ids);
                        self.m
                            .live
                            .keys()
                            .filter(|k| k.number().is_some_and(|n| lo <= n && n <= hi))
                            .collect()
                    }
                    None => self
                        .m
                        .live
                        .keys()
                        .filter(|k| k.starts_with(prefix))
                        .collect(),
                };
                if db.kind().ordered() {
                    let want: Vec<&[u8]> = want.iter().take(*max).map(|k| &k[..]).collect();
                    let got: Vec<&[u8]> = got.iter().map(|k| &k[..]).collect();
                    assert_eq!(got, want, "fwmkeys {prefix:?} max {max}");
                } else {
                    let set: BTreeSet<&[u8]> = got.iter().map(|k| &k[..]).collect();
                    assert_eq!(set.len(), got.len(), "fwmkeys {prefix:?}: a key twice");
                    assert_eq!(
                        got.len(),
                        want.len().min(*max),
                        "fwmkeys {prefix:?} max {max}"
                    );
                    for k in &got {
                        assert!(
                            want.iter().any(|w| w[..] == k[..]),
                            "fwmkeys {prefix:?}: {:?} is not a live key with it",
                            Bytes(k.clone())
                        );
                    }
                    // The first matches in the kind's own order (that of `for_each_record`,
                    // which `kura db list` shows), as Tokyo Cabinet's hash answers them.
                    let mut first: Vec<Vec<u8>> = Vec::new();
                    db.for_each_record(&mut |k, _, _| {
                        if first.len() >= *max {
                            return Ok(false);
                        }
                        if k.starts_with(prefix) && !first.iter().any(|f| f[..] == *k) {
                            first.push(k.to_vec());
                        }
                        Ok(true)
                    })
                    .unwrap();
                    assert_eq!(
                        got.iter().map(|k| Bytes(k.clone())).collect::<Vec<_>>(),
                        first.into_iter().map(Bytes).collect::<Vec<_>>(),
                        "fwmkeys {prefix:?} max {max}: not the first matches in the kind's order"
                    );
                }
            }
            Op::Range { from, to, max } => {
                let r = db.range(from, to.as_deref(), *max);
                if db.kind().ordered() {
                    let want: Vec<Vec<u8>> = self
                        .m
                        .live
                        .keys()
                        .filter(|k| *k >= from && to.as_ref().is_none_or(|t| *k < t))
                        .take(*max)
                        .map(|k| k.to_vec())
                        .collect();
                    assert_eq!(r.unwrap(), want, "range {from:?}..{to:?} max {max}");
                } else {
                    assert!(
                        matches!(r, Err(Error::Unsupported(_))),
                        "range on an unordered kind: {r:?}"
                    );
                }
            }
            Op::Count => {
                check_count(db, &self.m);
                if !self.m.live.is_empty() {
                    assert!(db.size() > 0, "size 0 with {} records", self.m.live.len());
                }
            }
            Op::Sync => db.sync().unwrap(),
            Op::Check => healthy(db, &self.m),
            Op::Optimize(i) => {
                let retune = self.db.kind.retune;
                db.optimize(retune[usize::from(*i) % retune.len()]).unwrap();
            }
            Op::Vanish => {
                db.vanish().unwrap();
                self.m = Model {
                    width: self.m.width,
                    columns: self.m.columns,
                    ..Model::default()
                };
                assert_eq!(db.count(), 0, "count after vanish");
            }
            Op::CopyTo => self.copy_to(db),
            Op::Fill { from, n, seed } => {
                let mut rng = Rng::new(*seed);
                for i in *from..(*from + *n).min(self.keys.n) {
                    let k = self.keys.key(i);
                    let v = self.keys.small_value(&mut rng);
                    let meta = db.put(&k, &v).unwrap();
                    let stored = self.m.stored(&v, 0).expect("a value every kind takes");
                    self.m.wrote(&k, stored, 0, 0, meta);
                }
            }
            Op::Threads { threads, ops, seed } => self.threads(*threads, *ops, *seed),
            key_op => apply_key_op(db, &mut self.m, key_op),
        }
        check_count(db, &self.m);
    }

    /// Threads write at once, each on keys of its own (`t0/…`, `t1/…`) with a model of its own.
    pub(crate) fn threads(&mut self, threads: u8, ops: u16, seed: u64) {
        let db = self.db.store();
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let keys = self.keys.thread(t, 12);
                let mut part = self.m.take_part(&keys);
                let db = db.clone();
                let log = self.log.clone();
                std::thread::spawn(move || {
                    let mut rng =
                        Rng::new(seed ^ u64::from(t + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
                    for i in 0..ops {
                        let op = gen_op(&mut rng, &keys, false);
                        log.push(format!("thread {t} #{i}: {op:?}"));
                        apply_key_op(&*db, &mut part, &op);
                    }
                    part
                })
            })
            .collect();
        let mut failed = None;
        for h in handles {
            match h.join() {
                Ok(part) => self.m.absorb(part),
                Err(p) => failed = failed.or(Some(p)),
            }
        }
        if let Some(p) = failed {
            resume_unwind(p);
        }
    }

    pub(crate) fn copy_to(&mut self, db: &dyn Store) {
        self.db.copies += 1;
        let dest = self
            .db
            .dir
            .path()
            .join(format!("copy{}{}", self.db.copies, self.db.kind.copy_as));
        db.copy_to(&dest).unwrap();
        let copy = kura_engine::open_as(dest.to_str().unwrap(), OpenMode::Existing)
            .unwrap()
            .store;
        let mut got = BTreeMap::new();
        let mut cur = copy.cursor().unwrap();
        while let Some((k, r)) = cur.next().unwrap() {
            let k = Bytes(k);
            assert!(!got.contains_key(&k), "the copy shows {k:?} twice");
            got.insert(k, (r.value, r.meta.flags, r.meta.expires));
        }
        drop(cur);
        // Versions are the copy's own.
        let want: BTreeMap<Bytes, (Vec<u8>, u32, u64)> = self
            .m
            .live
            .iter()
            .map(|(k, r)| (k.clone(), (r.value.clone(), r.flags, r.expires)))
            .collect();
        assert_eq!(got, want, "the copy's records");
        check_count(&*copy, &self.m);
        let rep = copy.check().unwrap();
        assert!(rep.healthy(), "the copy: {rep:?}");
        copy.close().unwrap();
        drop(copy);
        std::fs::remove_dir_all(&dest).unwrap_or_else(|_| std::fs::remove_file(&dest).unwrap());
    }

    /// Everything the store holds, against the model.
    pub(crate) fn verify_all(&mut self) {
        let db = self.db.store();
        let db = &*db;
        check_cursor(db, &mut self.m, &self.keys, false, 0);
        for (k, r) in &self.m.live {
            let got = db.get(k).unwrap().map(|r| Rec::of(&r.value, r.meta));
            assert_eq!(got.as_ref(), Some(r), "get {k:?}");
        }
        for k in &self.m.expired {
            assert_eq!(
                db.get(k).unwrap(),
                None,
                "{k:?} was written already expired"
            );
        }
        check_count(db, &self.m);
        if !self.m.live.is_empty() {
            assert!(db.size() > 0, "size 0 with {} records", self.m.live.len());
        }
        healthy(db, &self.m);
    }

    /// Close, after which every call fails with `Closed`.
    pub(crate) fn close(self) {
        let db = self.db.store();
        db.close().unwrap();
        assert!(
            matches!(db.get(b"k1"), Err(Error::Closed)),
            "get after close"
        );
        assert!(
            matches!(db.put(b"k1", b"v"), Err(Error::Closed)),
            "put after close"
        );
        assert!(
            matches!(
                db.write_batch(&[BatchOp::Remove {
                    key: b"k1".to_vec()
                }]),
                Err(Error::Closed)
            ),
            "write_batch after close"
        );
        assert!(
            matches!(db.cursor().map(|_| ()), Err(Error::Closed)),
            "cursor after close"
        );
    }
}

pub(crate) fn healthy(db: &dyn Store, m: &Model) {
    let rep = db.check().unwrap();
    assert!(rep.healthy(), "check: {rep:?}");
    let (lo, hi) = m.bounds();
    assert!(
        (lo..=hi).contains(&rep.records),
        "check counted {} records: {lo} live, {} written already expired",
        rep.records,
        hi - lo
    );
}

/// Run `ops` on a new database of `kind`; on failure, what failed and the operations before it.
pub(crate) fn run(kind: &'static KindUnderTest, keys: &Keys, ops: &[Op]) -> Result<(), String> {
    let log = Log::default();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut r = Runner {
            db: Db::open(kind),
            m: Model {
                width: kind.ids,
                columns: kind.columns(),
                ..Model::default()
            },
            keys: keys.clone(),
            log: log.clone(),
        };
        for (i, op) in ops.iter().enumerate() {
            log.push(format!("#{i}: {op:?}"));
            r.apply(op);
        }
        log.push("at the end: verify, close".into());
        r.verify_all();
        r.close();
    }));
    outcome.map_err(|p| {
        let why = panic_message(&*p);
        format!(
            "{why}\nthe last operations ({} in all, keys {keys:?}):\n{}",
            ops.len(),
            log.tail()
        )
    })
}

pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Run `test` on every kind; fail naming each kind it failed on.
pub(crate) fn every_kind(test: impl Fn(&'static KindUnderTest)) {
    let failed: Vec<String> = kinds()
        .into_iter()
        .filter_map(|kind| {
            let outcome = catch_unwind(AssertUnwindSafe(|| test(kind)));
            outcome
                .err()
                .map(|p| format!("kind {:?}: {}", kind.label, panic_message(&*p)))
        })
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
