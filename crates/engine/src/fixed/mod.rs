//! The fixed-length database (`PATH.kf`): Tokyo Cabinet's `.tcf` on the shared log.
//!
//! Records are addressed by a positive integer id, from 1 to a limit that the database's two
//! stored parameters give as Tokyo Cabinet computes it (`width`, the longest value a record
//! may hold, and `limsiz`, the size of Tokyo Cabinet's file: `id::limid`). Keys at the
//! `Store` interface are the ids in decimal (`"1"`, `"00000042"` is 42) or the key words
//! `min`, `max`, `prev`, `next` where Tokyo Cabinet takes them (`id`); a value longer than
//! `width` is refused (Tokyo Cabinet cut it short).
//!
//! Records are the log's put and delete records (`log::format`) with the id as an 8-byte
//! big-endian key, in one lane: every write holds the database's writer lock, so one log
//! orders them (group commit still shares each fdatasync among the writers waiting).
//! The index is a dense array from id to the place of its newest record (`index`), read
//! without a lock; a checkpoint of it (`ckpt`) bounds recovery to the log written after it;
//! compaction copies the live records of segments that are mostly dead to the end of the log.
//! Recovery goes through `log::replay` with the hash's rules: a writable open refuses damage,
//! a read-only one serves what verifies, `check` reports and `repair` copies what verifies.
//!
//! Parts: `id` (keys, key words, intervals, the id limit), `index` (the id array), `ckpt`
//! (the checkpoint's layout), `stored` (the descriptor's parameters), `open` (opening and
//! recovery), `rw` (reading and writing records), `api` (the `Store` implementation),
//! `cursor` (the walk in id order), `maint` (checkpoints, compaction, the background threads,
//! vanish, optimize, copy), `check` (check and repair).

pub mod ckpt;
pub mod id;
mod index;
pub mod stored;

mod api;
mod check;
mod cursor;
mod maint;
mod open;
mod rw;
mod slots;

use self::index::Index;
use crate::config::{Params, SyncMode};
use crate::error::{Error, Result};
use crate::log::Log;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The parameters a `.kf` name takes (the registry lists them).
pub(crate) const PARAMS: &[&str] = &[
    "width", "limsiz", "sync", "segsiz", "bufsiz", "msiz", "compact", "ckptsiz",
];
/// The id array's checkpoint of the format before the slot file (removed once converted).
const CKPT_NAME: &str = "index.kfi";
/// Bytes of a record's key: the id, big-endian.
const KEY_LEN: usize = 8;
/// What the kind is called in messages.
const ABOUT: &str = "fixed-length database";

/// How one open is tuned (never stored).
#[derive(Clone, Debug)]
struct Config {
    sync: SyncMode,
    segsiz: u64,
    bufsiz: usize,
    msiz: u64,
    /// Compact a sealed segment once this fraction of it is dead.
    compact: f64,
    /// Write a checkpoint once this many bytes were appended since the last one.
    ckptsiz: u64,
}

impl Config {
    fn from_params(params: &Params) -> Result<Config> {
        params.allow_only("the fixed-length database (.kf)", PARAMS)?;
        let segsiz = params.size("segsiz")?.unwrap_or(64 << 20);
        if !(64 << 10..=2 << 30).contains(&segsiz) {
            return Err(Error::InvalidParam(format!(
                "`segsiz={segsiz}`: expected 64k to 2g"
            )));
        }
        let bufsiz = params.size("bufsiz")?.unwrap_or(1 << 20);
        if !(4 << 10..=64 << 20).contains(&bufsiz) {
            return Err(Error::InvalidParam(format!(
                "`bufsiz={bufsiz}`: expected 4k to 64m"
            )));
        }
        Ok(Config {
            sync: params.sync()?.unwrap_or(SyncMode::DEFAULT),
            segsiz,
            bufsiz: bufsiz as usize,
            msiz: params.size("msiz")?.unwrap_or(64 << 20),
            compact: params.ratio("compact", 0.05, 1.0)?.unwrap_or(0.5),
            ckptsiz: params.size("ckptsiz")?.unwrap_or(256 << 20).max(1 << 20),
        })
    }
}

/// What the writer lock guards: the seq and the bounds of the ids that have records.
#[derive(Default)]
struct W {
    /// The largest seq given out; the next write takes `seq + 1`. Every write of the database
    /// takes one, so a record's seq (its version) is never given to another.
    seq: u64,
    /// Ids with a record (records expired but not yet reclaimed included).
    count: u64,
    /// The smallest and largest of them (0 when there is none).
    min: u64,
    max: u64,
}

#[derive(Default)]
struct Counters {
    compactions: AtomicU64,
    relocated_bytes: AtomicU64,
    checkpoints: AtomicU64,
    expired_reclaimed: AtomicU64,
}

/// How a database is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Write,
    Read,
    /// Read-only, the index rebuilt from the log alone (for `repair`).
    Salvage,
}

struct Inner {
    log: Log,
    /// The records written since the last checkpoint: id → the place of its newest record in
    /// the log, `rw::DEL` when it was removed, 0 when it was not written (see `slots`).
    index: Index,
    /// Every record as of the last checkpoint, in place (replaced by `optimize width=…`).
    slots: arc_swap::ArcSwap<slots::Slots>,
    /// The writer lock: every write of a record holds it from choosing its id to pointing the
    /// index at its record (so `next` and `max` name ids no other write is taking).
    w: Mutex<W>,
    /// Copies of `W`'s bounds, for readers (changed only under `w`).
    count: AtomicU64,
    min: AtomicU64,
    max: AtomicU64,
    /// The stored width and limsiz, and the id limit they give (changed only by `optimize`,
    /// under `w` and `maint`).
    width: AtomicU64,
    limsiz: AtomicU64,
    limid: AtomicU64,
    cfg: Mutex<Config>,
    mode: Mode,
    /// The damage a read-only open found.
    findings: Mutex<Vec<crate::store::Damaged>>,
    /// Recovery work not yet checkpointed (the lane counts what was appended since).
    appended: AtomicU64,
    /// Records written with an expiry (an upper bound; the sweep runs while it is not 0).
    expiring: AtomicU64,
    /// Serialises checkpoints, compaction, vanish, optimize, copy and check.
    maint: Mutex<()>,
    counters: Counters,
    lock: Mutex<Option<Box<dyn std::any::Any + Send + Sync>>>,
}

/// A fixed-length database. See the module documentation.
pub struct FixedDb {
    inner: Arc<Inner>,
    bg: Mutex<Vec<JoinHandle<()>>>,
    /// What the database stores about itself; `None` only in a read-only open of a database
    /// whose descriptor is damaged.
    stored: Mutex<Option<stored::Stored>>,
    created: bool,
}

impl Inner {
    fn width(&self) -> u64 {
        self.width.load(Ordering::Relaxed)
    }

    fn limid(&self) -> u64 {
        self.limid.load(Ordering::Relaxed)
    }

    /// Take the bounds of `w` into the readers' copies.
    fn publish(&self, w: &W) {
        self.count.store(w.count, Ordering::Release);
        self.min.store(w.min, Ordering::Release);
        self.max.store(w.max, Ordering::Release);
    }

    /// `id` got a record where it had none (under `w`).
    fn bounds_insert(&self, w: &mut W, id: u64) {
        w.count += 1;
        if w.min == 0 || id < w.min {
            w.min = id;
        }
        if id > w.max {
            w.max = id;
        }
        self.publish(w);
    }

    /// `id` lost its record (under `w`).
    fn bounds_remove(&self, w: &mut W, id: u64) {
        w.count = w.count.saturating_sub(1);
        if w.count == 0 {
            w.min = 0;
            w.max = 0;
        } else {
            if id == w.min {
                w.min = self.next_live(id, w.max).unwrap_or(0);
            }
            if id == w.max {
                w.max = self.prev_live(w.min.max(1), id).unwrap_or(0);
            }
        }
        self.publish(w);
    }

    /// The bounds after recovery: the header's (the pages'), changed by every id the log
    /// replay wrote; a search only when the smallest or largest lost its record.
    fn recount(&self, w: &mut W) {
        let slots = self.slots.load();
        let head = slots.head.lock().clone();
        let void = slots.is_void() || slots.file.is_none();
        let (mut count, mut min, mut max) = if void {
            (0, 0, 0)
        } else {
            (head.count, head.min, head.max)
        };
        let mut lost_edge = false;
        self.index.each_from(1, |id, place| {
            let was = !void && slots.present(id).unwrap_or(false);
            let now = place != rw::DEL;
            if now && !was {
                count += 1;
                if min == 0 || id < min {
                    min = id;
                }
                max = max.max(id);
            } else if was && !now {
                count = count.saturating_sub(1);
                lost_edge |= id == min || id == max;
            }
            true
        });
        if slots.head_lost {
            // The header's bounds are lost with it: every record counted.
            (count, min, max) = (0, 0, 0);
            let mut at = 1;
            while let Some(id) = self.next_live(at, id::MAX_ID) {
                count += 1;
                if min == 0 {
                    min = id;
                }
                max = id;
                at = id + 1;
            }
        } else if count == 0 {
            (min, max) = (0, 0);
        } else if lost_edge {
            min = self.next_live(1, id::MAX_ID).unwrap_or(0);
            max = self.prev_live(1, id::MAX_ID).unwrap_or(0);
        }
        (w.count, w.min, w.max) = (count, min, max);
        self.publish(w);
    }

    /// An id checked against the database's limit.
    fn check_id(&self, id: u64) -> Result<u64> {
        let lim = self.limid();
        if (1..=lim).contains(&id) {
            Ok(id)
        } else {
            Err(Error::InvalidKey(format!(
                "id {id} is outside this fixed-length database's ids, 1 to {lim} (its limsiz \
                 divided by its width, as Tokyo Cabinet counts them)"
            )))
        }
    }
}

#[cfg(test)]
mod tests;
