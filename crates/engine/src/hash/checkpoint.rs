//! Index checkpoints: what a checkpoint records (lane positions, segments, each shard's
//! slots) and writing one atomically, by one or two threads (layout in docs/ARCHITECTURE.md,
//! "Checkpoint layout"; the section codec in `ckpt`).

use super::*;

/// Write an index checkpoint (layout in docs/ARCHITECTURE.md) to `dir` atomically, through
/// the log's checkpoint writer (`log::checkpoint::write_atomic_with`): stream it to a
/// temporary file shard by shard (`shard(i, v)` snapshots shard i into `v` and returns its
/// seq), call `before_commit` (which makes the data the snapshots point at durable), sync the
/// file, rename it over the old checkpoint, sync the directory.
///
/// With `parallel` (and two cores), a helper thread encodes shards beside this one, each
/// taking the next shard not yet taken. Each writes its sections to the file in chunks of about
/// 1 MiB from one buffer of its own, at offsets handed out in turn, so that neither holds more
/// than a chunk (fresh memory costs about a millisecond a megabyte on a virtual machine); the
/// checksum is combined from the chunks' own in file order.
#[allow(clippy::too_many_arguments)]
pub(super) fn write_checkpoint(
    vfs: &dyn Vfs,
    dir: &Path,
    hash_seed: u64,
    replay: &[(u32, u64)],
    segs: &[(u32, u64, u64, u32)],
    parallel: bool,
    shard: impl Fn(usize, &mut Vec<Slot>) -> u64 + Sync,
    spaces: &[SpaceSnapshot],
    before_commit: impl FnOnce() -> std::io::Result<()>,
) -> std::io::Result<()> {
    let fill = |f: &dyn crate::io::VFile| -> std::io::Result<(u64, u32)> {
        let mut head = Vec::new();
        head.extend_from_slice(CKPT_MAGIC);
        let version = if spaces.is_empty() {
            CKPT_VERSION
        } else {
            CKPT_VERSION_SPACES
        };
        head.extend_from_slice(&version.to_le_bytes());
        head.extend_from_slice(&(NSHARDS as u32).to_le_bytes());
        head.extend_from_slice(&hash_seed.to_le_bytes());
        crate::log::checkpoint::Places {
            replay: replay.to_vec(),
            segs: segs.to_vec(),
        }
        .encode(&mut head);
        // (offset, length, crc32c) of every chunk written; the next chunk goes at `end`.
        let chunks = Mutex::new((0u64, Vec::<(u64, usize, u32)>::new()));
        let write = |buf: &[u8]| -> std::io::Result<()> {
            let crc = crc32c::crc32c(buf);
            let at = {
                let mut c = chunks.lock();
                let at = c.0;
                c.0 += buf.len() as u64;
                c.1.push((at, buf.len(), crc));
                at
            };
            f.write_at(buf, at)?;
            // Written back while the rest is encoded, so that the final sync is short.
            f.start_writeback(at, buf.len() as u64);
            Ok(())
        };
        write(&head)?;
        // Each thread takes the next shard not yet taken (shards differ in size: their load
        // limits differ), encodes it, and writes a chunk whenever a megabyte is ready; the
        // slot and scratch buffers are reused from shard to shard.
        let next = AtomicUsize::new(0);
        let encode = || -> std::io::Result<()> {
            let (mut v, mut scratch) = (Vec::new(), ckpt::Scratch::default());
            let mut out = Vec::with_capacity(CKPT_CHUNK + (CKPT_CHUNK >> 2));
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= NSHARDS {
                    break;
                }
                v.clear();
                let seq = shard(i, &mut v);
                out.extend_from_slice(&(i as u32).to_le_bytes());
                ckpt::encode(seq, &mut v, &mut scratch, &mut out);
                if out.len() >= CKPT_CHUNK {
                    write(&out)?;
                    out.clear();
                }
            }
            if !out.is_empty() {
                write(&out)?;
            }
            Ok(())
        };
        let (mine, theirs) = side_by_side(parallel, encode);
        mine?;
        if let Some(theirs) = theirs {
            theirs.map_err(|_| std::io::Error::other("checkpoint encoder thread panicked"))??;
        }
        if !spaces.is_empty() {
            // Version 3: the keyspaces' indexes after the database's, each its id and its 64
            // shard sections.
            let mut out = Vec::new();
            let mut scratch = ckpt::Scratch::default();
            out.extend_from_slice(&(spaces.len() as u32).to_le_bytes());
            for (ks, shards) in spaces {
                out.extend_from_slice(&ks.to_le_bytes());
                for (i, (seq, slots)) in shards.iter().enumerate() {
                    let mut v = slots.clone();
                    out.extend_from_slice(&(i as u32).to_le_bytes());
                    ckpt::encode(*seq, &mut v, &mut scratch, &mut out);
                }
            }
            write(&out)?;
        }
        let (end, mut list) = chunks.into_inner();
        list.sort_unstable_by_key(|c| c.0);
        let crc = list.iter().fold(0u32, |crc, &(_, len, c)| {
            crc32c::crc32c_combine(crc, c, len)
        });
        Ok((end, crc))
    };
    crate::log::checkpoint::write_atomic_with(vfs, dir, CKPT_NAME, CKPT_TMP, fill, before_commit)
}

/// Checkpoint chunk size: each encoding thread writes when it has this much.
pub(super) const CKPT_CHUNK: usize = 1 << 20;

/// Decode the checkpoint section of one shard, which starts at `at` of `body` (checked to
/// lie within it), and build the shard's table. `None` when it is damaged or points into a
/// segment not in `known` (sorted).
pub(super) fn decode_ckpt_shard(body: &[u8], at: usize, known: &[u32]) -> Option<(u64, Table)> {
    let (seq, n, mut slots) = ckpt::decode(body, at, known)?;
    // Built straight from the decoder; a table from a damaged section is thrown away.
    let t = Table::from_sorted(n, &mut slots);
    slots.intact().then_some((seq, t))
}

/// Checkpoints of at least this many slots are encoded, and loaded, by two threads
/// (`write_checkpoint`, `Inner::read_checkpoint`).
pub(super) const PARALLEL_CKPT: usize = 1 << 16;

/// Whether a second thread can run beside this one (two-thread checkpoints).
pub(super) fn more_than_one_core() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() > 1)
}

/// Run `work` on this thread and, when `parallel` and there is a second core, on a helper
/// thread at the same time (`work` shares the job out itself, e.g. through a counter). Returns
/// this thread's result and the helper's (`Err` if it panicked). One hand-off: every wait for
/// the other thread costs a wake-up (a quarter of a millisecond on a virtual machine).
pub(super) fn side_by_side<T: Send>(
    parallel: bool,
    work: impl Fn() -> T + Sync,
) -> (T, Option<std::thread::Result<T>>) {
    if !(parallel && more_than_one_core()) {
        return (work(), None);
    }
    std::thread::scope(|s| {
        let helper = s.spawn(&work);
        let mine = work();
        (mine, Some(helper.join()))
    })
}

impl Inner {
    /// Write an index checkpoint so that recovery replays only what follows it.
    /// Called with the `maint` lock held.
    pub(super) fn checkpoint(&self) -> Result<()> {
        if self.log.readonly {
            return Ok(());
        }
        for t in self.log.tails.iter() {
            self.log.mark(&mut t.0.lock());
        }
        if self.ks != 0 {
            // A keyspace's checkpoint is its database's.
            return match self.root() {
                Some(root) => root.checkpoint(),
                None => Ok(()),
            };
        }
        let replay = self.log.lane_positions(true);
        let segs = self.log.seg_infos();
        // Every keyspace's index (each shard consistent in itself, taken after the lanes'
        // positions, as the database's own shards are).
        let spaces: Vec<SpaceSnapshot> = self
            .spaces
            .all()
            .iter()
            .map(|s| (s.ks, s.snapshot_shards()))
            .collect();
        // Each shard is snapshotted and encoded in turn, straight to the file: memory holds
        // one shard at a time. Everything the snapshots point at is synced before the
        // checkpoint replaces the old one.
        let res = write_checkpoint(
            &*self.log.vfs,
            &self.log.dir,
            self.hash_seed.load(Ordering::Relaxed),
            &replay,
            &segs,
            // Not in the background: a second encoding thread there would take the core the
            // writers have (the maintenance thread itself runs at nice 10).
            self.count() as usize >= PARALLEL_CKPT && !BACKGROUND.with(std::cell::Cell::get),
            |i, v| self.snapshot_into(i, v),
            &spaces,
            || {
                self.log
                    .sync_now()
                    .map_err(|e| std::io::Error::other(e.to_string()))
            },
        );
        res.map_err(|e| self.log.poison(&e))?;
        self.appended.store(0, Ordering::Relaxed);
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Copy of every shard's slots (each shard consistent in itself).
    pub(super) fn snapshot_shard(&self, i: usize) -> (u64, Vec<Slot>) {
        let mut v = Vec::new();
        (self.snapshot_into(i, &mut v), v)
    }

    /// Append shard `i`'s slots to `v`; returns the shard's seq.
    pub(super) fn snapshot_into(&self, i: usize, v: &mut Vec<Slot>) -> u64 {
        let g = self.excl(i);
        g.copy_into(v);
        g.seq
    }

    pub(super) fn snapshot_shards(&self) -> Vec<(u64, Vec<Slot>)> {
        (0..NSHARDS).map(|i| self.snapshot_shard(i)).collect()
    }

    /// Bytes appended since the last checkpoint (or recovery work not yet checkpointed).
    pub(super) fn appended_total(&self) -> u64 {
        self.appended.load(Ordering::Relaxed)
            + self
                .log
                .tails
                .iter()
                .map(|t| t.0.lock().appended)
                .sum::<u64>()
    }

    pub(super) fn drop_segments(&self, ids: &[u32]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        self.log.set_segs(|t| {
            let mut t = SegTable::clone(t);
            for id in ids {
                t.segs.remove(id);
            }
            t
        });
        for &id in ids {
            let _ = self.log.vfs.remove(&self.log.dir.join(seg_file_name(id)));
        }
        self.log
            .vfs
            .sync_dir(&self.log.dir)
            .map_err(|e| self.log.poison(&e))?;
        // Close the removed segments' files and maps now (every caller holds no shard or lane
        // lock here).
        self.reclaim();
        Ok(())
    }
}
