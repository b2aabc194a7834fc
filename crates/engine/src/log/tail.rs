//! One lane's end of the log: its active segment and the bytes not yet handed to the OS.

use super::format::{self, Header, MAX_HEADER_LEN};
use super::segment::{corrupt_at, Segment};
use crate::error::Result;
use parking_lot::Mutex;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Segments whose live-byte changes a lane collects before adding them to the counters.
pub(crate) const LIVE_PENDING: usize = 8;

/// With `sync=always`, how many bytes of zeros the filler writes ahead of a lane's records at a
/// time (`Inner::fill_lane`), and how close the records may come to the end of them before it
/// writes more.
pub(crate) const FILL_STEP: u64 = 8 << 20;

pub(crate) const FILL_LOW: u64 = 4 << 20;

/// `Tail::fill_from` when no fill is under way.
pub(crate) const NO_FILL: u64 = u64::MAX;

/// The end of one lane's log: the active segment and the bytes not yet handed to the OS.
pub(crate) struct Tail {
    pub(crate) seg: Arc<Segment>,
    /// Below this offset the active segment's file already has its blocks (records, or zeros
    /// written and synced ahead of them by the filler): writes there change no metadata.
    pub(crate) alloc: u64,
    /// Where the filler's zeros under way start (`NO_FILL`: none). Records must not reach it
    /// until the fill is settled (`Inner::settle_fill`).
    pub(crate) fill_from: u64,
    /// The filler was woken for this lane and has not looked yet.
    pub(crate) fill_asked: bool,
    /// Bytes after `seg.flushed`.
    pub(crate) buf: Vec<u8>,
    /// Bytes appended to this lane since the last checkpoint.
    pub(crate) appended: u64,
    /// The lane's log ends with a marker (`format::marker`): nothing was appended since.
    pub(crate) marked: bool,
    /// Live-byte changes made by this lane's puts and deletes, not yet added to the segments'
    /// counters: (segment id, delta) for up to `LIVE_PENDING` segments. Adding them on every
    /// write moved the counters' cache lines between the writing cores (a put that
    /// overwrites a record changes the counter of the segment the other thread appends to);
    /// collected here, they are added when the lane flushes (at least every `FLUSH_TICK`),
    /// when a ninth segment comes up, and before a checkpoint records them.
    pub(crate) live: [(u32, i64); LIVE_PENDING],
    pub(crate) nlive: usize,
    /// (segment, offset) of the records of large puts written to this lane whose slots are not
    /// installed yet (`DiskHash::put_large`): a checkpoint's replay of this lane must start no
    /// later than the first (`Inner::lane_positions`), since its snapshot may not have them.
    pub(crate) large: Vec<(u32, u64)>,
}

/// One lane: an independent log with its own active segment and buffer. Each thread writes to
/// its own lane (see `Inner::my_lane`), so writers on different threads share no log lock and
/// no buffer; the records of one key may be in several lanes, ordered by their shard seq.
///
/// The flag says that the buffer has reached `bufsiz`: a writer then flushes it after it has
/// released the shard lock (`Inner::after_write`), so that the other writers never wait
/// behind a `bufsiz` write to the file. `append` flushes by itself only at twice `bufsiz`.
#[repr(align(128))]
pub(crate) struct Lane(pub(crate) Mutex<Tail>, pub(crate) AtomicBool);

/// The last fill of a lane's active segment (`Inner::fill_lane`): zeros from `from` to `to` of
/// segment `seg` (`to` 0 when it failed).
#[derive(Clone, Copy, Default)]
pub(crate) struct Fill {
    pub(crate) seg: u32,
    pub(crate) from: u64,
    pub(crate) to: u64,
}

impl Tail {
    pub(crate) fn new(seg: Arc<Segment>) -> Tail {
        Tail {
            alloc: seg.flushed(),
            fill_from: NO_FILL,
            fill_asked: false,
            seg,
            buf: Vec::new(),
            appended: 0,
            marked: false,
            live: [(0, 0); LIVE_PENDING],
            nlive: 0,
            large: Vec::new(),
        }
    }

    pub(crate) fn end(&self) -> u64 {
        self.seg.flushed() + self.buf.len() as u64
    }

    /// The header and bytes of the record at `off` of the active segment, which lies in the
    /// buffer (`off` at or past the flushed end).
    pub(crate) fn buffered(&self, off: u64) -> Result<(Header, &[u8])> {
        let bad = |what| corrupt_at(self.seg.id, off, what);
        let avail = self
            .buf
            .get((off - self.seg.flushed()) as usize..)
            .ok_or_else(|| bad("read past the end of the log"))?;
        let h = format::parse_header(&avail[..avail.len().min(MAX_HEADER_LEN)])
            .ok_or_else(|| bad("bad record header"))?;
        let rec = avail
            .get(..h.len)
            .ok_or_else(|| bad("record runs past the end"))?;
        Ok((h, rec))
    }

    /// Take the result of the fill under way, if `done` is it (else a writer already did).
    pub(crate) fn apply_fill(&mut self, done: &Fill) {
        if self.fill_from == done.from && self.seg.id == done.seg {
            self.fill_from = NO_FILL;
            self.alloc = self.alloc.max(done.to);
        }
    }

    /// Make `seg` the lane's active segment (its file is as long as its records; no fill is
    /// under way; no marker known at its end).
    pub(crate) fn set_seg(&mut self, seg: Arc<Segment>) {
        debug_assert_eq!(self.fill_from, NO_FILL);
        self.alloc = seg.flushed();
        self.seg = seg;
        self.marked = false;
    }

    /// Note a live-byte change of segment `seg`; false when the list is full.
    #[inline]
    pub(crate) fn note_live(&mut self, seg: u32, delta: i64) -> bool {
        for e in &mut self.live[..self.nlive] {
            if e.0 == seg {
                e.1 += delta;
                return true;
            }
        }
        if self.nlive == LIVE_PENDING {
            return false;
        }
        self.live[self.nlive] = (seg, delta);
        self.nlive += 1;
        true
    }
}
