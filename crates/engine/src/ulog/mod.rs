//! The update log: every change of a database, in order, with a microsecond time stamp and the
//! server id of its origin, in files under one directory. It is what replicas follow, what a
//! point-in-time restore replays onto a backup, and what a hot backup records its position in.
//!
//! Files are `NNNNNNNNNNNNNNNNNNNN.kul` (a 20-digit sequence number), each a 64-byte header
//! and then records (`record`). The header is `[magic "KURAULG2"][sid u32][0 u32][prev_ts
//! u64][0 u32][crc32c u32]` (`prev_ts` the time stamp of the last record before this file:
//! every record in it is newer) and two slots `[synced u64][n u32][crc32c u32]`: the length of
//! the file known durable, written after each fsync into the slot the last write did not use
//! (so a torn slot write leaves the other). Files of the format before (`KURAULG1`, a 32-byte
//! header without slots) are read as they are, and so is a file neither of whose slots
//! verifies; opening a log whose newest file is one seals it and starts a new file. A new file is started when the next record does not fit in
//! `file_size`; the old one is cut to its records and fsynced first, so only the newest file
//! can have a torn tail.
//!
//! Torn tails: a write-back need not go in file order, so a power loss can leave a hole (zeros)
//! before intact records past the last sync. Opening cuts the newest file at its first bad
//! record past the synced length its header records, and drops what follows, intact or not: it
//! was never covered by a finished sync, so never acknowledged as durable. A bad record before
//! that length is damage, and the log refuses to open. The recorded length is written only once
//! the fsync covering it has returned, so it never exceeds what is durable; it lags behind by
//! at most one sync, and damage in that last synced stretch is taken for a tail.
//! Every file access goes through the `io::Vfs` of the log's `Config` (the power-loss tests
//! give it a `SimVfs`).
//!
//! The newest file is made `file_size` long up front (its unwritten end reads as zeros, which
//! decode as "nothing yet") and mapped shared into memory; a record is appended by copying it
//! into the mapping under the writer's lock. That needs no system call, and what is copied is
//! in the operating system's page cache at once: a killed process loses nothing it appended.
//! The background thread keeps the pages ahead of the records filled with zeros and mapped
//! (`Ulog::prefault`), and unmaps the pages behind them, starts their write-back and, well
//! behind, drops them from the page cache (`Ulog::write_back`), so that sealing a full file
//! has little left to sync and new pages are recycled ones.
//!
//! Time stamps are positions: each is the later of the wall clock in microseconds and the
//! previous one plus one, so they increase strictly even across restarts and clock steps back.
//! A reader asks for the records after a time stamp; it skips those at or before it, and
//! reports a record not after the one before it (a file's first: not after its `prev_ts`) as
//! damage, in any file: only the newest is checked at open, and a record skipped there would
//! be a change a replica or a restore misses.
//!
//! Durability follows the log's sync mode (`kura serve` gives it the database name's: the log
//! is the commit point, see `logged`): `always` makes a write wait for the log's fsync (one
//! fsync for every writer waiting when it starts: `durability::GroupCommit`), or, for a server
//! thread that defers durability (`crate::durability`), owe a sync its commit thread makes;
//! an interval syncs in the background; `none` on `sync` and close. With `always`, zeros are
//! written and synced ahead of the records (`Ulog::fill_ahead`).
//!
//! Retention: files other than the newest are removed oldest first once every known replica
//! has confirmed them and they are older than `keep`, or at once when the log is over `limit`
//! bytes; never a file with records after [`Ulog::keep_after`] (what a `Logged` database has
//! not made durable yet). A reader that asks for records that were removed is told it is behind
//! ([`Start::Behind`]), and bootstraps from a snapshot instead.

pub mod apply;
pub mod logged;
pub mod record;

use crate::config::SyncMode;
use crate::durability::GroupCommit;
use crate::error::{Error, Result};
use crate::io::{MapMut, OsVfs, VFile, Vfs};
use crate::log::format::synced_slot;
use parking_lot::{Condvar, Mutex};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use record::{Op, Rec};

const MAGIC: &[u8; 8] = b"KURAULG2";
/// The magic of the format before: a 32-byte header without synced-length slots.
const MAGIC_V1: &[u8; 8] = b"KURAULG1";
const HEADER_V1: u64 = 32;
/// `Writer::fill_from` when no zeros are being written ahead.
const NO_FILL: u64 = u64::MAX;
/// With `sync=always`, how many bytes of zeros are written ahead of the records at a time, and
/// how close the records may come to their end before more are (`Ulog::fill_ahead`).
const FILL_STEP: u64 = 8 << 20;
const FILL_LOW: u64 = 4 << 20;
const FILE_HEADER: u64 = 64;
/// Where the two synced-length slots of a header are.
const SLOTS: [usize; 2] = [32, 48];

/// How an update log is set up.
#[derive(Clone)]
pub struct Config {
    pub dir: PathBuf,
    /// This server's id: the origin of the writes it takes from clients.
    pub sid: u32,
    pub sync: SyncMode,
    /// A new file is started past this many bytes.
    pub file_size: u64,
    /// The log's total size cap in bytes (0: none): oldest files are removed past it, even
    /// if a replica still needs them.
    pub limit: u64,
    /// Files younger than this are kept (for point-in-time restores), even once confirmed.
    pub keep: Duration,
    /// Added to every fsync of the log: a slow disk, for benchmarks of group commit (zero in
    /// servers).
    pub sync_delay: Duration,
    /// The file system the log's files are on: every file access goes through it (the real
    /// one, or a simulated one in the power-loss tests).
    pub vfs: Arc<dyn Vfs>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("dir", &self.dir)
            .field("sid", &self.sid)
            .field("sync", &self.sync)
            .field("file_size", &self.file_size)
            .field("limit", &self.limit)
            .field("keep", &self.keep)
            .field("sync_delay", &self.sync_delay)
            .finish_non_exhaustive()
    }
}

impl Config {
    pub fn new(dir: impl Into<PathBuf>, sid: u32) -> Config {
        Config {
            dir: dir.into(),
            sid,
            sync: SyncMode::DEFAULT,
            file_size: 64 << 20,
            limit: 1 << 30,
            keep: Duration::from_secs(24 * 3600),
            sync_delay: Duration::ZERO,
            vfs: Arc::new(OsVfs),
        }
    }
}

/// Make `file` `cap` bytes long (when shorter) and map it shared.
fn map_file(file: &dyn VFile, cap: u64) -> std::io::Result<Arc<MapMut>> {
    if file.len()? < cap {
        file.set_len(cap)?;
    }
    // The file is this log's own, written by this process only (a server holds the
    // database's lock); it is cut only after its mapping is replaced by the next file's.
    match file.map_mut(cap as usize)? {
        Some(m) => Ok(Arc::new(m)),
        None => Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "the update log needs a file system that maps files",
        )),
    }
}

/// Every byte of the file at `path`.
fn read_file(vfs: &dyn Vfs, path: &Path) -> std::io::Result<Vec<u8>> {
    let f = vfs.open(path, false)?;
    let mut data = vec![0u8; f.len()? as usize];
    f.read_at(&mut data, 0)?;
    Ok(data)
}

/// Write `text` to `path` through a temporary name, synced, then renamed over it and the
/// rename made durable: a crash leaves the old contents or the new.
fn replace_file(vfs: &dyn Vfs, path: &Path, text: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let f = vfs.open(&tmp, true)?;
    f.set_len(0)?;
    f.write_at(text, 0)?;
    f.sync()?;
    drop(f);
    vfs.rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        vfs.sync_dir(dir)?;
    }
    Ok(())
}

/// Microseconds since the epoch.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

#[derive(Clone, Debug)]
struct FileInfo {
    idx: u64,
    prev_ts: u64,
    /// Its length (of a sealed file: the newest's is the writer's `size`).
    len: u64,
    /// Where its records start (the header's length).
    hdr: u64,
    /// The length its header records as synced (`None`: a file of the format before).
    synced: Option<u64>,
}

struct Writer {
    file: Arc<dyn VFile>,
    /// The newest file, mapped.
    map: Arc<MapMut>,
    /// Bytes of `map` whose pages are known to be in memory (see `prefault`).
    populated: u64,
    /// Bytes of the newest file whose write-back was started, and below which its pages were
    /// dropped from the page cache (see `write_back`).
    written_back: u64,
    dropped: u64,
    /// With `sync=always`: bytes of the newest file below which zeros were written and synced
    /// ahead of the records (`fill_ahead`), and where the zeros being written start
    /// (`NO_FILL`: none under way; records must not reach it until they are done).
    zeroed: u64,
    fill_from: u64,
    idx: u64,
    /// Bytes of the newest file holding records (header included).
    size: u64,
    /// Where the next record is encoded before it is copied.
    buf: Vec<u8>,
    last_ts: u64,
    /// Bytes ever written to files by this handle: what a sync covers.
    written: u64,
    /// The synced length last written into the newest file's header, and how many slot
    /// writes it has had (the next goes to the other slot).
    marked: u64,
    slot_writes: u32,
    /// The first 32 bytes of the newest file's header (`None`: a file of the format before,
    /// which has no slots).
    head: Option<[u8; 32]>,
    files: Vec<FileInfo>,
    failed: Option<String>,
}

/// A replica the log knows of: the position it confirmed (every record up to it is applied
/// there), and when it was last heard from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replica {
    pub confirmed: u64,
    pub last_seen: u64,
    pub addr: String,
    pub connected: bool,
}

/// An open update log.
pub struct Ulog {
    cfg: Config,
    w: Mutex<Writer>,
    /// Readers waiting for records wait here (with `w`).
    cv: Condvar,
    /// Writers waiting for the zeros being written ahead of them (`fill_ahead`).
    fill_cv: Condvar,
    /// `written` that the last fsync covered.
    synced: AtomicU64,
    /// Group commit of the log's fsyncs ([`Ulog::sync`]).
    commit: GroupCommit,
    /// Retention keeps every record after this time stamp ([`Ulog::keep_after`]).
    keep_after: AtomicU64,
    last_ts: AtomicU64,
    /// fsyncs of the log's files so far.
    syncs: AtomicU64,
    replicas: Mutex<BTreeMap<u32, Replica>>,
    replicas_dirty: AtomicBool,
    stop: Arc<AtomicBool>,
    background: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Bytes dropped from the newest file's torn tail when the log was opened.
    pub torn_tail: u64,
}

/// Where a reader starts.
pub enum Start {
    Reader(Reader),
    /// The records after the asked position were removed: the oldest kept follow this one.
    Behind {
        first: u64,
    },
}

fn file_name(idx: u64) -> String {
    format!("{idx:020}.kul")
}

/// A new file's header: both slots say the header itself is synced (the file is synced once
/// written).
fn file_header(sid: u32, prev_ts: u64) -> [u8; FILE_HEADER as usize] {
    let mut h = [0u8; FILE_HEADER as usize];
    h[0..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&sid.to_le_bytes());
    h[16..24].copy_from_slice(&prev_ts.to_le_bytes());
    let crc = crc32c::crc32c(&h[0..28]);
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    for (n, at) in SLOTS.into_iter().enumerate() {
        let s = synced_slot(&h, FILE_HEADER, n as u32);
        h[at..at + 16].copy_from_slice(&s);
    }
    h
}

fn le64(b: &[u8]) -> u64 {
    let mut p = [0u8; 8];
    p.copy_from_slice(&b[..8]);
    u64::from_le_bytes(p)
}

/// What a file's header says.
struct Header {
    prev_ts: u64,
    /// Where the records start.
    hdr: u64,
    /// The largest synced length of a slot that verifies (`None`: the format before, or
    /// neither slot verifies).
    synced: Option<u64>,
    /// The slot writes so far (the larger `n` of the slots that verify).
    slot_writes: u32,
}

/// Parse a file's header from its first bytes (at most `FILE_HEADER` of them).
fn parse_header(h: &[u8], path: &Path) -> Result<Header> {
    let bad = || {
        Error::Corrupt(format!(
            "{}: not an update log file (bad header)",
            path.display()
        ))
    };
    let v1 = h.get(0..8) == Some(&MAGIC_V1[..]);
    let need = if v1 { HEADER_V1 } else { FILE_HEADER } as usize;
    if h.len() < need {
        return Err(if h.len() >= 8 && (v1 || &h[0..8] == MAGIC) {
            Error::Corrupt(format!("{}: shorter than its header", path.display()))
        } else {
            bad()
        });
    }
    let crc = u32::from_le_bytes([h[28], h[29], h[30], h[31]]);
    if !(v1 || &h[0..8] == MAGIC) || crc32c::crc32c(&h[0..28]) != crc {
        return Err(bad());
    }
    let prev_ts = le64(&h[16..24]);
    if v1 {
        return Ok(Header {
            prev_ts,
            hdr: HEADER_V1,
            synced: None,
            slot_writes: 0,
        });
    }
    let mut synced = None;
    let mut slot_writes = 0;
    for at in SLOTS {
        let n = u32::from_le_bytes([h[at + 8], h[at + 9], h[at + 10], h[at + 11]]);
        let len = le64(&h[at..at + 8]);
        if h[at..at + 16] == synced_slot(h, len, n) {
            synced = synced.max(Some(len));
            slot_writes = slot_writes.max(n);
        }
    }
    // A crash tears one slot at most (one is written at a time). With both damaged, the file
    // is read as one of the format before: damage is what has intact records after it.
    Ok(Header {
        prev_ts,
        hdr: FILE_HEADER,
        synced,
        slot_writes,
    })
}

/// A file's header and length.
fn read_header(vfs: &dyn Vfs, path: &Path) -> Result<(Header, u64)> {
    let f = vfs.open(path, false)?;
    let len = f.len()?;
    let mut h = vec![0u8; len.min(FILE_HEADER) as usize];
    f.read_at(&mut h, 0)?;
    Ok((parse_header(&h, path)?, len))
}

/// The update log files of `dir`, oldest first.
fn list(vfs: &dyn Vfs, dir: &Path) -> Result<Vec<FileInfo>> {
    let mut out = Vec::new();
    for name in vfs.list(dir)? {
        let Some(stem) = name.strip_suffix(".kul") else {
            continue;
        };
        let Ok(idx) = stem.parse::<u64>() else {
            continue;
        };
        let (h, len) = read_header(vfs, &dir.join(&name))?;
        out.push(FileInfo {
            idx,
            prev_ts: h.prev_ts,
            len,
            hdr: h.hdr,
            synced: h.synced,
        });
    }
    out.sort_by_key(|f| f.idx);
    for w in out.windows(2) {
        if w[1].prev_ts < w[0].prev_ts {
            return Err(Error::Corrupt(format!(
                "update log: {} starts before {}",
                file_name(w[1].idx),
                file_name(w[0].idx)
            )));
        }
    }
    Ok(out)
}

/// Scan the newest file's records: the offset after the last good one, the last time stamp,
/// and whether bad bytes follow it. Past the synced length its header records (`fi.synced`) a
/// bad record is a torn tail, whatever follows it; before it, damage. A file of the format
/// before records none: a bad record with intact records after it is damage there.
fn scan_file(data: &[u8], path: &Path, fi: &FileInfo) -> Result<(u64, u64, bool)> {
    let mut off = fi.hdr as usize;
    let mut last = fi.prev_ts;
    let synced = fi.synced.map(|s| s as usize);
    if let Some(s) = synced.filter(|&s| s > data.len()) {
        return Err(Error::Corrupt(format!(
            "{}: {} bytes long, shorter than the {s} bytes synced",
            path.display(),
            data.len()
        )));
    }
    while off < data.len() {
        let out_of_order = match record::decode(&data[off..]) {
            Ok(record::Next::Record(r, n)) if r.ts > last => {
                last = r.ts;
                off += n;
                continue;
            }
            Ok(record::Next::Record(..)) => true,
            Ok(record::Next::Incomplete) | Err(_) => false,
        };
        let what = if out_of_order {
            "time stamps out of order"
        } else {
            "damaged record"
        };
        match synced {
            Some(s) if off < s => {
                return Err(Error::Corrupt(format!(
                    "{}: {what} at offset {off}, inside the {s} bytes synced",
                    path.display()
                )))
            }
            Some(_) => {}
            None if out_of_order => {
                return Err(Error::Corrupt(format!(
                    "{}: {what} at offset {off}",
                    path.display()
                )))
            }
            None => {
                // A torn tail holds no intact record after it; damage in the middle does.
                let last_set = data.iter().rposition(|&b| b != 0).unwrap_or(0);
                let later = last_set > off
                    && (off + 1..=last_set).any(|o| {
                    matches!(record::decode(&data[o..]), Ok(record::Next::Record(r, _)) if r.ts > last)
                });
                if later {
                    return Err(Error::Corrupt(format!(
                        "{}: {what} at offset {off} with intact records after it",
                        path.display()
                    )));
                }
            }
        }
        return Ok((off as u64, last, true));
    }
    Ok((off as u64, last, false))
}

impl Ulog {
    /// Open (or create) the update log in `cfg.dir`. A torn tail of the newest file (a crash
    /// during a write) is cut off and counted in `torn_tail`; damage anywhere else is an error.
    pub fn open(cfg: Config) -> Result<Arc<Ulog>> {
        let vfs = &*cfg.vfs;
        vfs.create_dir_all(&cfg.dir)?;
        let mut files = list(vfs, &cfg.dir)?;
        let mut torn = 0;
        let mut slot_writes = 0;
        let mut head = None;
        let (file, idx, size, last_ts) = match files.last() {
            Some(f) => {
                let path = cfg.dir.join(file_name(f.idx));
                let file = vfs.open(&path, false)?;
                let mut data = vec![0u8; file.len()? as usize];
                file.read_at(&mut data, 0)?;
                let (end, last, _) = scan_file(&data, &path, f)?;
                if f.synced.is_some() {
                    slot_writes = parse_header(&data, &path)?.slot_writes;
                    let mut h = [0u8; 32];
                    h.copy_from_slice(&data[..32]);
                    head = Some(h);
                }
                // Bytes of a record torn by a crash: up to the last one not zero.
                torn = data[end as usize..]
                    .iter()
                    .rposition(|&b| b != 0)
                    .map_or(0, |i| i as u64 + 1);
                if data.len() as u64 > end {
                    // The zeros of a preallocated end, or a torn tail: cut (and made again).
                    file.set_len(end)?;
                    file.sync()?;
                }
                (file, f.idx, end, last)
            }
            None => {
                let path = cfg.dir.join(file_name(1));
                let file = vfs.open(&path, true)?;
                file.set_len(0)?;
                let h = file_header(cfg.sid, 0);
                head = Some(h[..32].try_into().expect("32 bytes"));
                file.write_at(&h, 0)?;
                file.sync()?;
                vfs.sync_dir(&cfg.dir)?;
                files.push(FileInfo {
                    idx: 1,
                    prev_ts: 0,
                    len: FILE_HEADER,
                    hdr: FILE_HEADER,
                    synced: Some(FILE_HEADER),
                });
                (file, 1, FILE_HEADER, 0)
            }
        };
        let replicas = load_replicas(vfs, &cfg.dir);
        // A newest file of the format before is sealed, and the log goes on in a new file.
        let upgrade = files.last().is_some_and(|f| f.synced.is_none());
        let map = map_file(&*file, cfg.file_size.max(size))?;
        let log = Arc::new(Ulog {
            w: Mutex::new(Writer {
                file,
                map,
                populated: 0,
                written_back: 0,
                dropped: 0,
                zeroed: 0,
                fill_from: NO_FILL,
                idx,
                size,
                buf: Vec::with_capacity(64 << 10),
                last_ts,
                written: 0,
                marked: size,
                slot_writes,
                head,
                files,
                failed: None,
            }),
            cv: Condvar::new(),
            fill_cv: Condvar::new(),
            synced: AtomicU64::new(0),
            commit: GroupCommit::new(),
            keep_after: AtomicU64::new(u64::MAX),
            last_ts: AtomicU64::new(last_ts),
            syncs: AtomicU64::new(0),
            replicas: Mutex::new(replicas),
            replicas_dirty: AtomicBool::new(false),
            stop: Arc::new(AtomicBool::new(false)),
            background: Mutex::new(None),
            torn_tail: torn,
            cfg,
        });
        if upgrade {
            let mut w = log.w.lock();
            log.rotate(&mut w, 0)?;
        }
        log.start_background();
        Ok(log)
    }

    /// A thread that syncs on the interval (when the sync mode has one), flushes buffered
    /// records for readers, saves replica positions and applies retention.
    fn start_background(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let stop = self.stop.clone();
        let every = match self.cfg.sync {
            SyncMode::Interval(d) => d.min(Duration::from_secs(1)),
            _ => Duration::from_secs(1),
        };
        let h = std::thread::Builder::new()
            .name("kura-ulog".into())
            .spawn(move || {
                let mut since_sync = Duration::ZERO;
                let tick = Duration::from_millis(20).min(every);
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    since_sync += tick;
                    let Some(log) = weak.upgrade() else { return };
                    log.prefault();
                    log.write_back();
                    log.fill_ahead();
                    if since_sync >= every {
                        since_sync = Duration::ZERO;
                        if matches!(log.cfg.sync, SyncMode::Interval(_)) {
                            let _ = log.sync();
                        }
                        let _ = log.save_replicas();
                        let _ = log.purge();
                    }
                }
            })
            .ok();
        *self.background.lock() = h;
    }

    /// Keep every record after `ts` whatever retention says: they are not yet durable
    /// elsewhere (`Logged`: the database holds them only once it is synced, and redoes them
    /// from here after a crash until then). `u64::MAX` (the default): no such records.
    pub fn keep_after(&self, ts: u64) {
        self.keep_after.store(ts, Ordering::Release);
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn sid(&self) -> u32 {
        self.cfg.sid
    }

    /// fsyncs of the log's files since it was opened.
    pub fn sync_count(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Group commit leaders that waited for the writers they expected, and how many of those
    /// waits ran out ([`GroupCommit`]).
    pub fn commit_waits(&self) -> (u64, u64) {
        (
            self.commit.waits.load(Ordering::Relaxed),
            self.commit.wait_misses.load(Ordering::Relaxed),
        )
    }

    /// The time stamp of the newest record (0: none yet).
    pub fn last_ts(&self) -> u64 {
        self.last_ts.load(Ordering::Acquire)
    }

    /// Append one record written by this server (origin: its own sid, the new time stamp).
    pub fn append(&self, op: &Op<'_>) -> Result<u64> {
        self.append_from(None, op)
    }

    /// Append one record; `origin` is `(sid, ts)` of a replicated write (kept), `None` for a
    /// local one.
    pub fn append_from(&self, origin: Option<(u32, u64)>, op: &Op<'_>) -> Result<u64> {
        let mut w = self.w.lock();
        let mut buf = std::mem::take(&mut w.buf);
        let ts = loop {
            if let Some(e) = &w.failed {
                let e = Error::Poisoned(e.clone());
                w.buf = buf;
                return Err(e);
            }
            let ts = now_us().max(w.last_ts + 1);
            let (osid, ots) = origin.unwrap_or((self.cfg.sid, ts));
            buf.clear();
            record::encode(&mut buf, ts, osid, ots, op);
            // The zeros being written ahead must not overwrite the record, nor extend a file
            // that the record's rotation cuts to its records.
            let blocked = |w: &Writer| {
                let end = w.size + buf.len() as u64;
                w.fill_from != NO_FILL && (end > w.fill_from || end > w.map.len() as u64)
            };
            if !blocked(&w) {
                break ts;
            }
            while blocked(&w) {
                self.fill_cv.wait(&mut w);
            }
            // The wait let other writers append (a record that fits below the zeros): the
            // time stamp is taken again, or this record would follow one stamped later, which
            // readers take for damage.
        };
        let r = self.copy_in(&mut w, &buf);
        w.buf = buf;
        r?;
        w.last_ts = ts;
        self.last_ts.store(ts, Ordering::Release);
        drop(w);
        self.cv.notify_all();
        crate::durability::note_logged(ts);
        Ok(ts)
    }

    fn fail(&self, w: &mut Writer, e: std::io::Error) -> Error {
        let msg = format!("update log write failed: {e}");
        w.failed = Some(msg);
        Error::Io(e)
    }

    /// Copy an encoded record into the newest file (a new one first when it does not fit).
    fn copy_in(&self, w: &mut Writer, rec: &[u8]) -> Result<()> {
        let n = rec.len() as u64;
        if w.size + n > w.map.len() as u64 {
            self.rotate(w, n)?;
        }
        let at = w.size as usize;
        if self.cfg.sync == SyncMode::Always {
            // Synced after nearly every write: through the mapping, each fsync would
            // write-protect the page being filled (an interrupt to every core) and the next
            // append would fault on it. A write costs less.
            if let Err(e) = w.file.write_at(rec, at as u64) {
                return Err(self.fail(w, e));
            }
        } else {
            // SAFETY: `at + rec.len()` is within the mapping (checked above, a new file is
            // made large enough), and only the writer, holding the lock, writes to it.
            unsafe {
                std::ptr::copy_nonoverlapping(rec.as_ptr(), w.map.as_mut_ptr().add(at), rec.len())
            };
        }
        w.size += n;
        w.written += n;
        Ok(())
    }

    /// Seal the newest file (synced, cut to its records) and start the next, large enough for
    /// a record of `need` bytes.
    fn rotate(&self, w: &mut Writer, need: u64) -> Result<()> {
        // Cut to its records, then synced: the cut must be durable before the next file's
        // name is, or a crash leaves a sealed file ending in preallocated zeros. (The
        // mapping is not written past `size` again: it is replaced below.)
        if let Err(e) = w.file.set_len(w.size).and_then(|_| w.file.sync()) {
            return Err(self.fail(w, e));
        }
        if let Some(f) = w.files.last_mut().filter(|f| f.idx == w.idx) {
            f.len = w.size;
        }
        let idx = w.idx + 1;
        let path = self.cfg.dir.join(file_name(idx));
        let cap = self.cfg.file_size.max(FILE_HEADER + need);
        let vfs = &*self.cfg.vfs;
        let h = file_header(self.cfg.sid, w.last_ts);
        let made = (|| -> std::io::Result<(Arc<dyn VFile>, Arc<MapMut>)> {
            let f = vfs.open(&path, true)?;
            f.set_len(0)?;
            f.write_at(&h, 0)?;
            f.sync()?;
            vfs.sync_dir(&self.cfg.dir)?;
            let m = map_file(&*f, cap)?;
            Ok((f, m))
        })();
        let (f, m) = match made {
            Ok(x) => x,
            Err(e) => return Err(self.fail(w, e)),
        };
        w.files.push(FileInfo {
            idx,
            prev_ts: w.last_ts,
            len: FILE_HEADER,
            hdr: FILE_HEADER,
            synced: Some(FILE_HEADER),
        });
        w.file = f;
        w.map = m;
        w.populated = 0;
        w.written_back = 0;
        w.dropped = 0;
        w.zeroed = 0;
        w.idx = idx;
        w.size = FILE_HEADER;
        w.marked = FILE_HEADER;
        w.slot_writes = 0;
        w.head = Some(h[..32].try_into().expect("32 bytes"));
        Ok(())
    }

    /// With `sync=always`, write zeros ahead of the records when they come within `FILL_LOW`
    /// of the last zeros' end (`VFile::zero_fill`, which syncs them): an fdatasync after a
    /// record written over blocks already written and synced journals no block allocation,
    /// where one into the preallocated file's holes does (as the database's log does,
    /// docs/ARCHITECTURE.md, "Zeros ahead of the log"). Runs on the background thread; the
    /// writers go on meanwhile below the zeros being written.
    fn fill_ahead(&self) {
        if self.cfg.sync != SyncMode::Always {
            return;
        }
        let (file, idx, from, to) = {
            let mut w = self.w.lock();
            if w.failed.is_some() || w.fill_from != NO_FILL || w.size + FILL_LOW <= w.zeroed {
                return;
            }
            // Records that outran the zeros get a gap to write into meanwhile.
            let gap = if w.size > w.zeroed { FILL_LOW / 4 } else { 0 };
            let from = w.zeroed.max(w.size + gap).next_multiple_of(4096);
            let to = (from + FILL_STEP).min(w.map.len() as u64);
            if from >= to {
                return;
            }
            w.fill_from = from;
            (w.file.clone(), w.idx, from, to)
        };
        // Out of space, say: records are written as before, into the holes.
        let ok = file.zero_fill(from, to - from).is_ok();
        let mut w = self.w.lock();
        w.fill_from = NO_FILL;
        if ok && w.idx == idx {
            w.zeroed = to;
        }
        drop(w);
        self.fill_cv.notify_all();
    }

    /// Bring the pages the next appends will write into memory, off the writers' path, from
    /// the background thread: zeros are written over them (into the page cache, not synced),
    /// then they are faulted into the mapping (`MapMut::populate`). A page of a file's hole
    /// faulted in through the mapping is read as zeros first, which cost the writers (or this
    /// thread) several times what writing the zeros does; faulting in pages already in the cache
    /// only maps them. The writers go on meanwhile below the range being filled (`fill_from`),
    /// as with `fill_ahead`.
    fn prefault(&self) {
        const AHEAD: u64 = 16 << 20;
        const STEP: u64 = 4 << 20;
        // Records that outran the filled pages get a gap to fault into meanwhile.
        const GAP: u64 = 1 << 20;
        if self.cfg.sync == SyncMode::Always {
            return; // appended with writes, not through the mapping
        }
        for _ in 0..AHEAD / STEP {
            let (file, map, from, to) = {
                let mut w = self.w.lock();
                if w.failed.is_some() || w.fill_from != NO_FILL {
                    return;
                }
                let gap = if w.size >= w.populated { GAP } else { 0 };
                // Never the page the records end in: zeros would overwrite them.
                let from = w.populated.max(w.size + gap).next_multiple_of(4096);
                let to = (from + STEP).min(w.size + AHEAD).min(w.map.len() as u64);
                if from >= to {
                    return;
                }
                w.fill_from = from;
                (w.file.clone(), w.map.clone(), from, to)
            };
            // Out of space, say: the pages are faulted in from the file's hole instead.
            let zeros = vec![0u8; 1 << 20];
            let mut at = from;
            while map.is_os() && at < to {
                let n = (to - at).min(zeros.len() as u64);
                if file.write_at(&zeros[..n as usize], at).is_err() {
                    break;
                }
                at += n;
            }
            // Older kernels refuse it; the writers then fault the pages in themselves.
            let done = map.populate(from as usize, to as usize);
            let mut w = self.w.lock();
            w.fill_from = NO_FILL;
            if done && Arc::ptr_eq(&w.map, &map) {
                w.populated = w.populated.max(to);
            }
            drop(w);
            self.fill_cv.notify_all();
            if !done {
                return;
            }
        }
    }

    /// Start the write-back of the newest file's pages the records have filled, from the
    /// background thread (`VFile::start_writeback`), so that the fsync that seals the file
    /// (`rotate`, under the writer's lock) has little left to write. Without it, that fsync
    /// wrote up to the whole file's records while every writer waited (30–70 ms at 64 MiB).
    /// The pages are unmapped first (`MapMut::unmap_pages`; the writers are past them), so
    /// their write-back interrupts no core to write-protect them. Pages written back a tick
    /// ago and more than `KEEP_CACHED` behind the records are dropped from the page cache
    /// (`VFile::drop_cached`): the pages the zeros ahead are written into (and the database's
    /// own appends) are then ones just freed rather than memory the kernel must find, which
    /// cost about four times as much to fill. A replica that follows closely still reads
    /// records from the cache; one further behind reads them from the device.
    fn write_back(&self) {
        const MIN: u64 = 1 << 20;
        const KEEP_CACHED: u64 = 32 << 20;
        if self.cfg.sync == SyncMode::Always {
            return; // synced after nearly every write
        }
        let (file, map, from, to, drop) = {
            let mut w = self.w.lock();
            let to = w.size & !4095;
            let from = w.written_back.max(FILE_HEADER) & !4095;
            if w.failed.is_some() || to < from + MIN {
                return;
            }
            // Written back a tick ago at least, and far enough behind for a replica that
            // follows closely to read them from the cache.
            let keep = KEEP_CACHED.min(self.cfg.file_size / 2);
            let drop_to = from.min(to.saturating_sub(keep)) & !4095;
            let drop = (drop_to > w.dropped + MIN).then_some((w.dropped, drop_to));
            if let Some((_, t)) = drop {
                w.dropped = t;
            }
            w.written_back = to;
            (w.file.clone(), w.map.clone(), from, to, drop)
        };
        map.unmap_pages(from as usize, to as usize);
        file.start_writeback(from, to - from);
        if let Some((a, b)) = drop {
            file.drop_cached(a, b - a);
        }
    }

    /// Make every record appended so far durable: one fsync for every caller waiting when it
    /// starts (group commit, [`GroupCommit`]). A failed fsync poisons the log.
    pub fn sync(&self) -> Result<()> {
        let target = self.w.lock().written;
        if self.synced.load(Ordering::Acquire) >= target {
            // Nothing new (and a failed sync poisoned the writer: nothing new after it).
            return Ok(());
        }
        self.commit.commit(|| self.sync_file())
    }

    /// fsync the newest file: every record appended before the call is then durable (older
    /// files were synced when they were sealed).
    fn sync_file(&self) -> Result<()> {
        let (file, end, idx, size) = {
            let w = self.w.lock();
            (w.file.clone(), w.written, w.idx, w.size)
        };
        if !self.cfg.sync_delay.is_zero() {
            std::thread::sleep(self.cfg.sync_delay);
        }
        self.syncs.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = file.sync() {
            let mut w = self.w.lock();
            return Err(self.fail(&mut w, e));
        }
        self.synced.fetch_max(end, Ordering::AcqRel);
        let mut w = self.w.lock();
        self.mark_synced(&mut w, idx, size)
    }

    /// Record in the newest file's header that its first `size` bytes are durable (the fsync
    /// covering them has returned), if it is still file `idx`. Not synced itself: the next
    /// fsync makes it durable, and until then the other slot says less. Under the writer's
    /// lock: a write to the header's page while the writer copies into it through the
    /// mapping is safe, as the bytes differ.
    fn mark_synced(&self, w: &mut Writer, idx: u64, size: u64) -> Result<()> {
        let Some(head) = w.head else { return Ok(()) };
        if w.idx != idx || size <= w.marked || w.failed.is_some() {
            return Ok(());
        }
        w.slot_writes = w.slot_writes.wrapping_add(1);
        let at = SLOTS[(w.slot_writes % 2) as usize];
        let slot = synced_slot(&head, size, w.slot_writes);
        if let Err(e) = w.file.write_at(&slot, at as u64) {
            return Err(self.fail(w, e));
        }
        w.marked = size;
        Ok(())
    }

    /// After a write made through this log: wait for durability when the sync mode says so
    /// (or note that the calling server thread owes a sync, when it defers).
    pub fn settle(&self) -> Result<()> {
        if self.cfg.sync == SyncMode::Always {
            if crate::durability::deferred() {
                crate::durability::note_pending();
            } else {
                self.sync()?;
            }
        }
        Ok(())
    }

    /// Total bytes of the log's files.
    pub fn size(&self) -> u64 {
        let w = self.w.lock();
        w.files
            .iter()
            .filter(|f| f.idx != w.idx)
            .map(|f| f.len)
            .sum::<u64>()
            + w.size
    }

    /// The number of files and the time stamp the oldest kept record follows.
    pub fn span(&self) -> (usize, u64) {
        let w = self.w.lock();
        (w.files.len(), w.files.first().map_or(0, |f| f.prev_ts))
    }

    /// Read the records after `after`, from the oldest file that may hold them.
    pub fn reader(self: &Arc<Self>, after: u64) -> Result<Start> {
        let w = self.w.lock();
        let first = w.files.first().map_or(0, |f| f.prev_ts);
        if after < first {
            return Ok(Start::Behind { first });
        }
        // The newest file whose records all follow a time stamp at most `after`.
        let f = w
            .files
            .iter()
            .rev()
            .find(|f| f.prev_ts <= after)
            .cloned()
            .unwrap_or_else(|| w.files[0].clone());
        drop(w);
        let file = self
            .cfg
            .vfs
            .open(&self.cfg.dir.join(file_name(f.idx)), false)?;
        Ok(Start::Reader(Reader {
            log: self.clone(),
            idx: f.idx,
            file,
            off: f.hdr,
            buf: Vec::new(),
            start: 0,
            after,
            last: f.prev_ts,
        }))
    }

    /// Note a replica's confirmed position (and that it is connected or not).
    pub fn confirm(&self, sid: u32, confirmed: u64, addr: &str, connected: bool) {
        let mut r = self.replicas.lock();
        let e = r.entry(sid).or_default();
        if confirmed > e.confirmed {
            e.confirmed = confirmed;
        }
        e.last_seen = crate::store::now_secs();
        e.addr = addr.to_string();
        e.connected = connected;
        self.replicas_dirty.store(true, Ordering::Relaxed);
    }

    /// Forget a replica (it no longer holds back retention).
    pub fn forget(&self, sid: u32) -> bool {
        let gone = self.replicas.lock().remove(&sid).is_some();
        self.replicas_dirty.store(true, Ordering::Relaxed);
        gone
    }

    /// The replicas known, by server id.
    pub fn replicas(&self) -> BTreeMap<u32, Replica> {
        self.replicas.lock().clone()
    }

    fn save_replicas(&self) -> Result<()> {
        if !self.replicas_dirty.swap(false, Ordering::Relaxed) {
            return Ok(());
        }
        let mut text = String::new();
        for (sid, r) in self.replicas.lock().iter() {
            text.push_str(&format!("{sid} {} {}\n", r.confirmed, r.last_seen));
        }
        let crc = crc32c::crc32c(text.as_bytes());
        text.push_str(&format!("crc {crc}\n"));
        replace_file(
            &*self.cfg.vfs,
            &self.cfg.dir.join("replicas"),
            text.as_bytes(),
        )?;
        Ok(())
    }

    /// Remove the files retention lets go (see the module's comment). Returns how many.
    pub fn purge(&self) -> Result<usize> {
        let replicas = self.replicas.lock().clone();
        let mut removed = 0;
        loop {
            let (victim, next_prev) = {
                let w = self.w.lock();
                if w.files.len() < 2 {
                    break;
                }
                (w.files[0].clone(), w.files[1].prev_ts)
            };
            let path = self.cfg.dir.join(file_name(victim.idx));
            if next_prev > self.keep_after.load(Ordering::Acquire) {
                break; // holds records not yet durable elsewhere
            }
            let over = self.cfg.limit > 0 && self.size() > self.cfg.limit;
            let confirmed = replicas.values().all(|r| r.confirmed >= next_prev);
            let old = self
                .cfg
                .vfs
                .modified(&path)
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age >= self.cfg.keep);
            if !(over || (confirmed && old)) {
                break;
            }
            {
                let mut w = self.w.lock();
                if w.files.first().map(|f| f.idx) != Some(victim.idx) {
                    break;
                }
                w.files.remove(0);
            }
            self.cfg.vfs.remove(&path)?;
            removed += 1;
        }
        Ok(removed)
    }

    /// Flush, sync and stop the background thread.
    pub fn close(&self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.background.lock().take() {
            let _ = h.join();
        }
        self.sync()?;
        // The synced length in the header made durable too: a clean close leaves it exact.
        let mut w = self.w.lock();
        let (idx, size) = (w.idx, w.size);
        if size > w.marked {
            self.mark_synced(&mut w, idx, size)?;
            if let Err(e) = w.file.sync() {
                return Err(self.fail(&mut w, e));
            }
        }
        drop(w);
        self.save_replicas()
    }
}

impl Drop for Ulog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn load_replicas(vfs: &dyn Vfs, dir: &Path) -> BTreeMap<u32, Replica> {
    let mut out = BTreeMap::new();
    let Some(text) = read_file(vfs, &dir.join("replicas"))
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
    else {
        return out;
    };
    let Some(at) = text.rfind("crc ") else {
        return out;
    };
    let (body, tail) = text.split_at(at);
    let ok = tail
        .trim()
        .strip_prefix("crc ")
        .and_then(|c| c.parse::<u32>().ok())
        == Some(crc32c::crc32c(body.as_bytes()));
    if !ok {
        return out;
    }
    for line in body.lines() {
        let f: Vec<u64> = line
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if let [sid, confirmed, last_seen] = f[..] {
            out.insert(
                sid as u32,
                Replica {
                    confirmed,
                    last_seen,
                    addr: String::new(),
                    connected: false,
                },
            );
        }
    }
    out
}

/// Damage a reader met in `file` (the records of a file follow one another in time stamp
/// order, its first its header's `prev_ts`): the record at `off` is stamped `ts`, not after
/// the `last` before it. Never skipped: a reader that skipped it would miss a change.
fn out_of_order(file: &dyn std::fmt::Display, off: u64, ts: u64, last: u64) -> Error {
    Error::Corrupt(format!(
        "{file}: time stamps out of order at offset {off} ({ts} is not after {last})"
    ))
}

/// Damage at a file boundary: `file`'s last record, stamped `last`, is after the `prev_ts`
/// that the next file `next`'s header says its records follow.
fn ends_after(file: &dyn std::fmt::Display, last: u64, next: &FileInfo) -> Error {
    Error::Corrupt(format!(
        "{file}: time stamps out of order: its last record ({last}) is after {}, which the \
         records of {} follow",
        next.prev_ts,
        file_name(next.idx)
    ))
}

/// A reader of the records after a time stamp, following the log as it grows.
pub struct Reader {
    log: Arc<Ulog>,
    idx: u64,
    file: Arc<dyn VFile>,
    off: u64,
    buf: Vec<u8>,
    start: usize,
    after: u64,
    /// The time stamp of the record before the next one in this file (its header's `prev_ts`
    /// before the first): the next must be later, or the file is damaged.
    last: u64,
}

impl Reader {
    /// The next record's bytes (as stored: `record::decode` reads them), waiting up to `wait`
    /// for one to be written; `None` when none came.
    pub fn next(&mut self, wait: Duration) -> Result<Option<&[u8]>> {
        let deadline = std::time::Instant::now() + wait;
        loop {
            match record::decode(&self.buf[self.start..]) {
                Ok(record::Next::Record(r, n)) => {
                    let at = self.start;
                    if r.ts <= self.last {
                        let off = self.off - (self.buf.len() - at) as u64;
                        return Err(out_of_order(&file_name(self.idx), off, r.ts, self.last));
                    }
                    self.start += n;
                    self.last = r.ts;
                    // At or before the position asked for: already had.
                    if r.ts <= self.after {
                        continue;
                    }
                    self.after = r.ts;
                    return Ok(Some(&self.buf[at..at + n]));
                }
                Ok(record::Next::Incomplete) => {}
                Err(e) => {
                    return Err(Error::Corrupt(format!(
                        "{} near offset {}: {e}",
                        file_name(self.idx),
                        self.off - (self.buf.len() - self.start) as u64
                    )))
                }
            }
            if self.fill()? {
                continue;
            }
            // At the end of this file: on to the next one, or wait for more.
            let next = {
                let w = self.log.w.lock();
                w.files.iter().find(|f| f.idx > self.idx).cloned()
            };
            if let Some(f) = next {
                if self.start < self.buf.len() {
                    return Err(Error::Corrupt(format!(
                        "{}: ends inside a record",
                        file_name(self.idx)
                    )));
                }
                if f.idx != self.idx + 1 && f.prev_ts > self.after {
                    return Err(Error::NotFound("update log records removed".into()));
                }
                if self.last > f.prev_ts {
                    return Err(ends_after(&file_name(self.idx), self.last, &f));
                }
                self.file = (self.log.cfg.vfs)
                    .open(&self.log.cfg.dir.join(file_name(f.idx)), false)
                    .map_err(|_| Error::NotFound("update log file removed".into()))?;
                self.idx = f.idx;
                self.off = f.hdr;
                self.last = f.prev_ts;
                self.buf.clear();
                self.start = 0;
                continue;
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let mut w = self.log.w.lock();
            if w.idx == self.idx && w.size <= self.off {
                self.log.cv.wait_for(&mut w, deadline - now);
            }
        }
    }

    /// Read more of the current file; whether anything came.
    fn fill(&mut self) -> Result<bool> {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let have = self.buf.len();
        let mut want = (1 << 20).max(have) as u64;
        let newest = {
            // In the newest file, only what was appended: the rest is zeros, or a record
            // being copied.
            let w = self.log.w.lock();
            if w.idx == self.idx {
                want = want.min(w.size.saturating_sub(self.off));
            }
            w.idx == self.idx
        };
        if !newest {
            // A sealed file: what it holds past the offset.
            want = want.min(self.file.len()?.saturating_sub(self.off));
        }
        if want == 0 {
            return Ok(false);
        }
        self.buf.resize(have + want as usize, 0);
        self.file.read_at(&mut self.buf[have..], self.off)?;
        self.off += want;
        Ok(true)
    }

    /// The time stamp of the last record returned (or the start position).
    pub fn position(&self) -> u64 {
        self.after
    }
}

/// The time stamp the oldest records kept in a log directory follow: [`read_dir`] reads from
/// any point at or after it.
pub fn dir_start(dir: &Path) -> Result<u64> {
    dir_start_in(&OsVfs, dir)
}

/// [`dir_start`] of a log directory on `vfs`.
pub fn dir_start_in(vfs: &dyn Vfs, dir: &Path) -> Result<u64> {
    list(vfs, dir)?
        .first()
        .map(|f| f.prev_ts)
        .ok_or_else(|| Error::NotFound(format!("{}: no update log files", dir.display())))
}

/// Read every record of a log directory after `after` and up to `until` (inclusive), in
/// order, without opening it for writing (a restore reads a copy of another server's log).
pub fn read_dir(
    dir: &Path,
    after: u64,
    until: u64,
    f: &mut dyn FnMut(&Rec<'_>) -> Result<()>,
) -> Result<u64> {
    read_dir_in(&OsVfs, dir, after, until, f)
}

/// [`read_dir`] of a log directory on `vfs`.
pub fn read_dir_in(
    vfs: &dyn Vfs,
    dir: &Path,
    after: u64,
    until: u64,
    f: &mut dyn FnMut(&Rec<'_>) -> Result<()>,
) -> Result<u64> {
    let files = list(vfs, dir)?;
    if files.is_empty() {
        return Err(Error::NotFound(format!(
            "{}: no update log files",
            dir.display()
        )));
    }
    if after < files[0].prev_ts {
        return Err(Error::NotFound(format!(
            "{}: the records after {after} were removed (the oldest kept follow {})",
            dir.display(),
            files[0].prev_ts
        )));
    }
    let mut n = 0;
    // The time stamp of the record before (of the file before, then of this file's): the next
    // must be later, or the log is damaged.
    let mut last = None;
    let mut prev_path = PathBuf::new();
    let newest = files.last().map(|f| f.idx);
    for fi in files.iter().filter(|f| {
        // Files whose records all lie at or before `after` are skipped.
        files
            .iter()
            .find(|g| g.idx > f.idx)
            .is_none_or(|g| g.prev_ts > after)
    }) {
        let path = dir.join(file_name(fi.idx));
        if let Some(l) = last.filter(|&l| l > fi.prev_ts) {
            return Err(ends_after(&prev_path.display(), l, fi));
        }
        let mut last_ts = fi.prev_ts;
        let whole = read_file(vfs, &path)?;
        let hdr = fi.hdr;
        let data = whole.get(hdr as usize..).unwrap_or_default();
        // In the newest file, what ends inside a record ends the log, unless it lies inside
        // what the header records as synced (a log read here was not opened since a crash, so
        // a record that fails its check is damage wherever it is).
        let synced = fi.synced.unwrap_or(0).saturating_sub(hdr) as usize;
        if Some(fi.idx) == newest && synced > data.len() {
            return Err(Error::Corrupt(format!(
                "{}: shorter than the {} bytes synced",
                path.display(),
                synced as u64 + hdr
            )));
        }
        let mut off = 0;
        while off < data.len() {
            match record::decode(&data[off..]) {
                Ok(record::Next::Record(r, len)) => {
                    if r.ts <= last_ts {
                        return Err(out_of_order(
                            &path.display(),
                            off as u64 + hdr,
                            r.ts,
                            last_ts,
                        ));
                    }
                    last_ts = r.ts;
                    // At or before `after`: not asked for.
                    if r.ts > after {
                        if r.ts > until {
                            return Ok(n);
                        }
                        f(&r)?;
                        n += 1;
                    }
                    off += len;
                }
                Ok(record::Next::Incomplete) if Some(fi.idx) == newest && off >= synced => break,
                Ok(record::Next::Incomplete) => {
                    return Err(Error::Corrupt(format!(
                        "{}: ends inside a record at offset {}",
                        path.display(),
                        off as u64 + hdr
                    )))
                }
                Err(e) => {
                    return Err(Error::Corrupt(format!(
                        "{} at offset {}: {e}",
                        path.display(),
                        off as u64 + hdr
                    )))
                }
            }
        }
        last = Some(last_ts);
        prev_path = path;
    }
    Ok(n)
}

#[cfg(test)]
mod keyspace_tests;
#[cfg(test)]
mod tests;
