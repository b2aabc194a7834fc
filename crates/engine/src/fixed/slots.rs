//! The slot file of a fixed-length database (`data.kfd`): every id's record in place, at a
//! position its id gives, as Tokyo Cabinet's `.tcf` keeps them, with a checksum per page.
//!
//! ```text
//! 0      4096   header copy A   } the newer that verifies is current; a checkpoint writes
//! 4096   4096   header copy B   } the older one
//! 8192   ...    pages of slots: page p at 8192 + p × page_len
//! ```
//!
//! A page holds `per_page` slots and ends with the crc32c (seeded with the salt) of its page
//! number and every other byte of it; a page of zeros (a hole of a sparse file) is a valid
//! empty page. Pages are 4 KiB while a slot fits one (`(4096 - 4) / slot` slots a page), else
//! one slot and its checksum. A slot: a tag byte (0: no record; else the record's generation,
//! 1 to 63, plus 0x40 when its flags or expiry are not 0), the value's length (1 byte up to a
//! width of 255, 2 up to 65,535, else 4, little-endian), and `width` bytes of value.
//!
//! Pages change only at checkpoints (`write`): the new images of every page that changes are
//! first written to `dw.kfd` (the double-write file) and synced, then written in place and
//! synced, then the side file and the header. A page that held no record before needs no image
//! in `dw.kfd`: its number alone says it is zeroed by recovery, whose log replay brings its
//! records back. Recovery writes a `dw.kfd` that verifies and belongs to the next generation
//! over its pages again, so that a page torn by a power loss during a checkpoint is whole.
//!
//! Flags and expiry are rare: they live in the side file (`side.kfs`, written atomically at a
//! checkpoint, read whole at open) for the records that have them. A record's version is
//! derived from what the slot holds: a hash of its id, flags and value with the generation in
//! its low 6 bits, so that it is never 0, differs from the version it replaced, and survives
//! checkpoints and restarts.

use crate::error::{Error, Result};
use crate::io::{VFile, Vfs};
use crate::log::checkpoint::{self, le_u32, le_u64, Places};
use crate::store::Meta;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub(super) const DATA_NAME: &str = "data.kfd";
pub(super) const DATA_TMP: &str = "data.kfd.tmp";
pub(super) const DW_NAME: &str = "dw.kfd";
pub(super) const SIDE_NAME: &str = "side.kfs";
pub(super) const SIDE_TMP: &str = "side.kfs.tmp";
const PAGE: usize = 4096;
/// Bytes before the first page: two header copies.
pub(super) const HEAD_LEN: u64 = 2 * PAGE as u64;
const MAGIC: &[u8; 8] = b"KURAFXD1";
const DW_MAGIC: &[u8; 8] = b"KURAFXW1";
const SIDE_MAGIC: &[u8; 8] = b"KURAFXS1";
const VERSION: u32 = 1;
/// The tag bit of a slot whose record has flags or an expiry (in the side file).
const SIDE: u8 = 0x40;
const GEN_MASK: u8 = 0x3f;
/// The high bit of a page number in `dw.kfd`: the page held no record (no image follows).
const FRESH: u64 = 1 << 63;

/// Where slots and pages lie for a width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Geometry {
    pub width: u64,
    /// Bytes of the length field.
    pub lenw: usize,
    /// Bytes of a slot: tag, length, value.
    pub slot: usize,
    pub per_page: u64,
    pub page_len: usize,
}

impl Geometry {
    pub(super) fn new(width: u64) -> Geometry {
        let lenw = if width <= 0xff {
            1
        } else if width <= 0xffff {
            2
        } else {
            4
        };
        let slot = 1 + lenw + width as usize;
        let (per_page, page_len) = if slot + 4 <= PAGE {
            (((PAGE - 4) / slot) as u64, PAGE)
        } else {
            (1, slot + 4)
        };
        Geometry {
            width,
            lenw,
            slot,
            per_page,
            page_len,
        }
    }

    /// The page of `id` (from 1) and the slot's offset within it.
    #[inline]
    pub(super) fn place(&self, id: u64) -> (u64, usize) {
        let i = id - 1;
        (i / self.per_page, (i % self.per_page) as usize * self.slot)
    }

    #[inline]
    pub(super) fn page_off(&self, page: u64) -> u64 {
        HEAD_LEN + page * self.page_len as u64
    }

    /// The first id of `page`.
    pub(super) fn first_id(&self, page: u64) -> u64 {
        page * self.per_page + 1
    }
}

/// The header: what the pages hold and where the log's replay starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Head {
    pub salt: u64,
    /// The checkpoint's generation (0: the pages hold nothing yet; the whole log is replayed).
    pub gen: u64,
    /// The largest seq given out when it was taken.
    pub seq: u64,
    pub width: u64,
    pub limsiz: u64,
    /// Ids with a record in the pages, the smallest and the largest (0 when none).
    pub count: u64,
    pub min: u64,
    pub max: u64,
    /// Where the log's replay starts (`gen` 0: none, the whole log).
    pub places: Places,
}

impl Head {
    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = Vec::with_capacity(PAGE);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        for v in [
            self.salt,
            self.gen,
            self.seq,
            self.width,
            self.limsiz,
            self.count,
            self.min,
            self.max,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        self.places.encode(&mut b);
        if b.len() > PAGE - 4 {
            return Err(Error::Corrupt(
                "the fixed-length database's header outgrew its page (too many segments)".into(),
            ));
        }
        b.resize(PAGE - 4, 0);
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        Ok(b)
    }

    fn decode(b: &[u8]) -> Option<Head> {
        if b.len() != PAGE || &b[..8] != MAGIC || le_u32(b, 8)? != VERSION {
            return None;
        }
        if crc32c::crc32c(&b[..PAGE - 4]) != le_u32(b, PAGE - 4)? {
            return None;
        }
        let v = |i: usize| le_u64(b, 12 + i * 8);
        let mut pos = 12 + 8 * 8;
        Some(Head {
            salt: v(0)?,
            gen: v(1)?,
            seq: v(2)?,
            width: v(3)?,
            limsiz: v(4)?,
            count: v(5)?,
            min: v(6)?,
            max: v(7)?,
            places: Places::decode(&b[..PAGE - 4], &mut pos)?,
        })
    }
}

/// A record's version, from what its slot holds (see the module documentation).
pub(super) fn version_of(id: u64, flags: u32, value: &[u8], gen: u8) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&id.to_le_bytes());
    h.update(&flags.to_le_bytes());
    h.update(value);
    (h.digest() & !u64::from(GEN_MASK)) | u64::from(gen_of(u64::from(gen)))
}

/// The generation a version carries (1 to 63).
pub(super) fn gen_of(version: u64) -> u8 {
    match (version & u64::from(GEN_MASK)) as u8 {
        0 => 1,
        g => g,
    }
}

/// The generation after `gen` (1 to 63, round).
pub(super) fn next_gen(version: Option<u64>) -> u8 {
    match version {
        None => 1,
        Some(v) => gen_of(v) % GEN_MASK + 1,
    }
}

/// What a checkpoint writes: `feed` calls its sink with every id that changed, ascending,
/// and its record (value and metadata) or none.
pub(super) type Sink<'a> = &'a mut dyn FnMut(u64, Option<(&[u8], Meta)>) -> Result<()>;
pub(super) type Feed<'a> = &'a mut dyn FnMut(Sink<'_>) -> Result<()>;

/// A page found damaged.
#[derive(Clone, Debug)]
pub(super) struct BadPage {
    pub page: u64,
    pub off: u64,
    pub len: u64,
}

/// The file's map, and which of its pages were verified since it was made.
#[derive(Default)]
struct Pages {
    map: Option<crate::io::Map>,
    verified: Box<[AtomicU64]>,
}

thread_local! {
    /// The page this thread read last: (slots' identity, epoch, page, image).
    static LAST: std::cell::RefCell<(u64, u64, u64, Vec<u8>)> =
        const { std::cell::RefCell::new((0, 0, u64::MAX, Vec::new())) };
}

static NEXT_IDENTITY: AtomicU64 = AtomicU64::new(1);

/// The open slot file.
pub(super) struct Slots {
    pub file: Option<Arc<dyn VFile>>,
    pub geo: Geometry,
    pub head: Mutex<Head>,
    seed: u32,
    /// Flags and expiry of the records that have them.
    side: RwLock<Side>,
    /// Pages a read-only open took from `dw.kfd` (not written in place).
    overlay: HashMap<u64, Vec<u8>>,
    /// The file's map (when the file system has maps), and the lock readers hold shared
    /// while they read pages, a checkpoint exclusively while it writes or remaps them.
    pages: RwLock<Pages>,
    /// The file's length (what the map covers).
    len: AtomicU64,
    path: std::path::PathBuf,
    /// Changed by every write of pages (readers' cached pages are then stale).
    epoch: AtomicU64,
    identity: u64,
    /// Every read finds nothing (a read-only open whose log holds a `vanish` after the
    /// pages were written).
    void: std::sync::atomic::AtomicBool,
    /// The header's bounds are not those of the pages: both copies of the header were damaged,
    /// or a checkpoint cut short wrote pages (from its double-write file) but not its header.
    /// Recovery counts the records by a walk.
    pub head_lost: bool,
}

/// What opening found.
pub(super) struct Opened {
    pub slots: Slots,
    /// Damage to report: the header, the side file.
    pub findings: Vec<crate::log::recovery::Finding>,
    /// What is not damage: a damaged copy of the header whose twin verifies.
    pub warnings: Vec<String>,
    /// The file did not exist (a new database, or one of the format before the slot file).
    pub absent: bool,
}

fn io(e: std::io::Error) -> Error {
    Error::Io(e)
}

impl Slots {
    /// Open `data.kfd` of `dir` (made, with an empty header of generation 0, when missing and
    /// `create`); `dw.kfd` applied when it belongs to the next generation; `side.kfs` read.
    pub(super) fn open(
        vfs: &dyn Vfs,
        dir: &Path,
        readonly: bool,
        create: Option<Head>,
    ) -> Result<Opened> {
        let path = dir.join(DATA_NAME);
        let mut findings = Vec::new();
        let finding = |off: u64, len: u64, what: &str| crate::log::recovery::Finding {
            file: DATA_NAME.into(),
            off,
            len,
            lost: 0,
            what: what.into(),
        };
        let exists = vfs.exists(&path);
        if !exists {
            let Some(head) = create.clone().filter(|_| !readonly) else {
                let head = create.unwrap_or_default();
                return Ok(Opened {
                    slots: Slots::new(None, head, Side::empty(), HashMap::new()),
                    findings,
                    warnings: Vec::new(),
                    absent: true,
                });
            };
            // Made whole under a temporary name, then renamed: a crash leaves no file.
            let tmp = dir.join(DATA_TMP);
            let f = vfs.open(&tmp, true).map_err(io)?;
            f.set_len(0).map_err(io)?;
            let b = head.encode()?;
            f.write_at(&b, 0).map_err(io)?;
            f.write_at(&b, PAGE as u64).map_err(io)?;
            f.sync().map_err(io)?;
            drop(f);
            // Its side file first: no record has flags, no page holds a record.
            let mut b = Vec::new();
            encode_side(&Side::empty(), &head, &mut b);
            checkpoint::write_atomic(vfs, dir, SIDE_NAME, SIDE_TMP, &[&b], || Ok(()))
                .map_err(io)?;
            // The double-write file, empty (it verifies only once a checkpoint wrote it):
            // made now, its name is durable with the others', and no checkpoint syncs the
            // directory for it.
            drop(vfs.open(&dir.join(DW_NAME), true).map_err(io)?);
            vfs.rename(&tmp, &path).map_err(io)?;
            vfs.sync_dir(dir).map_err(io)?;
        }
        let file = vfs.open(&path, false).map_err(io)?;
        let len = file.len().map_err(io)?;
        let mut heads = Vec::new();
        let mut warnings = Vec::new();
        for copy in 0..2u64 {
            let mut b = vec![0u8; PAGE];
            let read =
                len >= (copy + 1) * PAGE as u64 && file.read_at(&mut b, copy * PAGE as u64).is_ok();
            match Head::decode(&b).filter(|_| read) {
                Some(h) => heads.push(h),
                None => warnings.push(format!(
                    "{DATA_NAME}: header copy {} is damaged (the other holds the same; it is \
                     written again at the next checkpoint)",
                    copy + 1
                )),
            }
        }
        let Some(head) = heads.into_iter().max_by_key(|h| h.gen) else {
            findings.push(finding(
                0,
                HEAD_LEN.min(len),
                "both copies of the header are damaged",
            ));
            let mut slots = Slots::new(
                Some(file),
                create.unwrap_or_default(),
                Side::default(),
                HashMap::new(),
            );
            slots.head_lost = true;
            slots.path = path.clone();
            let mut pages = Pages::default();
            slots.remap(vfs, &mut pages);
            *slots.pages.get_mut() = pages;
            return Ok(Opened {
                slots,
                findings,
                warnings: Vec::new(),
                absent: false,
            });
        };
        let geo = Geometry::new(head.width);
        let seed = crate::log::format::seed(head.salt);
        // The double-write file of an interrupted checkpoint.
        let mut overlay = HashMap::new();
        let mut interrupted = false;
        if let checkpoint::Read::Verified(b) = checkpoint::read_verified(vfs, dir, DW_NAME, 44) {
            if let Some(pages) = decode_dw(&b, &head, &geo) {
                interrupted = true;
                let probe = Slots::new(
                    Some(file.clone()),
                    head.clone(),
                    Side::default(),
                    HashMap::new(),
                );
                probe.len.store(len, Ordering::Release);
                for (p, img) in pages {
                    let img = match img {
                        Some(img) => img,
                        None => {
                            // A page that held no record: whole (written in place before the
                            // crash) it stays; torn, it is emptied (the log holds its records).
                            let mut cur = Vec::new();
                            if probe.read_page_into(p, &mut cur).is_ok() {
                                continue;
                            }
                            vec![0u8; geo.page_len]
                        }
                    };
                    if readonly {
                        overlay.insert(p, img);
                    } else {
                        file.write_at(&img, geo.page_off(p)).map_err(io)?;
                    }
                }
                if !readonly {
                    file.sync().map_err(io)?;
                }
            }
        }
        let side = match checkpoint::read_verified(vfs, dir, SIDE_NAME, 28) {
            checkpoint::Read::Missing if head.gen == 0 => Side::empty(),
            checkpoint::Read::Missing => Side::default(),
            checkpoint::Read::Verified(b) => match decode_side(&b, &head) {
                Some(s) => s,
                None => {
                    findings.push(crate::log::recovery::Finding {
                        file: SIDE_NAME.into(),
                        off: 0,
                        len: b.len() as u64,
                        lost: 0,
                        what: "the flags and expiry of records belong to another checkpoint".into(),
                    });
                    Side::default()
                }
            },
            checkpoint::Read::Damaged(why) => {
                findings.push(crate::log::recovery::Finding {
                    file: SIDE_NAME.into(),
                    off: 0,
                    len: 0,
                    lost: 0,
                    what: format!("the flags and expiry of records are lost: {why}"),
                });
                Side::default()
            }
        };
        let mut s = Slots::new(Some(file), head, side, overlay);
        s.seed = seed;
        s.geo = geo;
        s.head_lost = interrupted;
        s.path = path.clone();
        let mut pages = Pages::default();
        s.remap(vfs, &mut pages);
        *s.pages.get_mut() = pages;
        Ok(Opened {
            slots: s,
            findings,
            warnings,
            absent: false,
        })
    }

    fn new(
        file: Option<Arc<dyn VFile>>,
        head: Head,
        side: Side,
        overlay: HashMap<u64, Vec<u8>>,
    ) -> Slots {
        Slots {
            file,
            geo: Geometry::new(head.width.max(1)),
            seed: crate::log::format::seed(head.salt),
            head: Mutex::new(head),
            side: RwLock::new(side),
            overlay,
            pages: RwLock::new(Pages::default()),
            len: AtomicU64::new(0),
            path: std::path::PathBuf::new(),
            epoch: AtomicU64::new(0),
            identity: NEXT_IDENTITY.fetch_add(1, Ordering::Relaxed),
            void: std::sync::atomic::AtomicBool::new(false),
            head_lost: false,
        }
    }

    /// Whether it is known which pages hold records (else walks and `check` read every page).
    #[cfg(test)]
    pub(super) fn pages_known(&self) -> bool {
        self.side.read().used.is_some()
    }

    /// Every read finds nothing from now on.
    pub(super) fn set_void(&self) {
        self.void.store(true, Ordering::Release);
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    pub(super) fn is_void(&self) -> bool {
        self.void.load(Ordering::Acquire)
    }

    /// The checksum of page `page`'s image.
    fn crc(&self, page: u64, img: &[u8]) -> u32 {
        let c = crc32c::crc32c_append(self.seed, &page.to_le_bytes());
        crc32c::crc32c_append(c, &img[..img.len() - 4])
    }

    fn seal(&self, page: u64, img: &mut [u8]) {
        let n = img.len();
        let c = self.crc(page, img);
        img[n - 4..].copy_from_slice(&c.to_le_bytes());
    }

    /// Map the file as it is now, and note its length (under the pages lock held
    /// exclusively, or before any reader).
    fn remap(&self, vfs: &dyn Vfs, pages: &mut Pages) {
        let len = self.file.as_ref().and_then(|f| f.len().ok()).unwrap_or(0);
        pages.map = None;
        if len > HEAD_LEN {
            pages.map = vfs.map(&self.path, len as usize);
        }
        let n = len
            .saturating_sub(HEAD_LEN)
            .div_ceil(self.geo.page_len as u64)
            .div_ceil(64);
        pages.verified = (0..n).map(|_| AtomicU64::new(0)).collect();
        self.len.store(len, Ordering::Release);
    }

    /// Read page `page` into `buf` and verify it; past the end of the file it is empty.
    /// `Err(Corrupt)` when its checksum fails.
    fn read_page_into(&self, page: u64, buf: &mut Vec<u8>) -> Result<()> {
        let pages = self.pages.read();
        self.read_page_with(page, buf, pages.map.as_ref())
    }

    /// `read_page_into` with the pages lock held (`map`: the file's map).
    fn read_page_with(
        &self,
        page: u64,
        buf: &mut Vec<u8>,
        map: Option<&crate::io::Map>,
    ) -> Result<()> {
        buf.clear();
        buf.resize(self.geo.page_len, 0);
        self.read_page_zeroed(page, buf, map).map(|_| ())
    }

    /// `read_page_with` into `buf`, `page_len` bytes of zeros; whether the page lies past the
    /// end of the file (left as zeros, with no checksum to compute).
    fn read_page_zeroed(
        &self,
        page: u64,
        buf: &mut [u8],
        map: Option<&crate::io::Map>,
    ) -> Result<bool> {
        let n = self.geo.page_len;
        let off = self.geo.page_off(page);
        let len = self.len.load(Ordering::Acquire);
        if let Some(img) = self.overlay.get(&page) {
            buf.copy_from_slice(img);
        } else if off < len {
            let avail = ((len - off) as usize).min(n);
            match map.and_then(|m| m.as_slice().get(off as usize..off as usize + avail)) {
                Some(b) => buf[..avail].copy_from_slice(b),
                None => {
                    if let Some(f) = &self.file {
                        f.read_at(&mut buf[..avail], off).map_err(io)?;
                    }
                }
            }
        } else {
            self.check_hole(page)?;
            return Ok(true);
        }
        self.verify(page, buf).map(|_| false)
    }

    /// Verify the image of `page`: its checksum, or all zeros where no record was written.
    fn verify(&self, page: u64, img: &[u8]) -> Result<()> {
        let n = img.len();
        let stored = u32::from_le_bytes(img[n - 4..].try_into().unwrap_or_default());
        if stored == self.crc(page, img) {
            return Ok(());
        }
        if stored == 0 && img.iter().all(|&b| b == 0) {
            return self.check_hole(page);
        }
        Err(Error::Corrupt(format!(
            "{DATA_NAME} offset {}: page {page} fails its checksum",
            self.geo.page_off(page)
        )))
    }

    /// A hole or a page never written (all zeros) is empty, unless records were written there.
    fn check_hole(&self, page: u64) -> Result<()> {
        let side = self.side.read();
        if side.used.is_some() && side.is_used(page) {
            return Err(Error::Corrupt(format!(
                "{DATA_NAME} offset {}: page {page} holds records but reads as zeros (cut \
                 short or zeroed)",
                self.geo.page_off(page)
            )));
        }
        Ok(())
    }

    /// Call `f` with the verified image of `page` (this thread's cached copy when current).
    pub(super) fn with_page<R>(&self, page: u64, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        LAST.with(|c| {
            let mut c = c.borrow_mut();
            let epoch = self.epoch.load(Ordering::Acquire);
            if !(c.0 == self.identity && c.1 == epoch && c.2 == page) {
                let pages = self.pages.read();
                let epoch = self.epoch.load(Ordering::Acquire);
                let mut buf = std::mem::take(&mut c.3);
                c.2 = u64::MAX;
                let r = self.read_page_with(page, &mut buf, pages.map.as_ref());
                c.3 = buf;
                r?;
                (c.0, c.1, c.2) = (self.identity, epoch, page);
            }
            Ok(f(&c.3))
        })
    }

    /// Call `f` with the record of `id` in its slot (value and metadata), if it has one.
    pub(super) fn with_rec<R>(
        &self,
        id: u64,
        f: &mut dyn FnMut(&[u8], Meta) -> Result<R>,
    ) -> Result<Option<R>> {
        if self.file.is_none() || self.is_void() {
            return Ok(None);
        }
        let (page, at) = self.geo.place(id);
        let geo = self.geo;
        let off = geo.page_off(page);
        if off >= self.len.load(Ordering::Acquire) && !self.overlay.contains_key(&page) {
            // Past the end of the file: no record, unless the file was cut short.
            let side = self.side.read();
            if side.used.is_none() || !side.is_used(page) {
                return Ok(None);
            }
        }
        // Straight from the map: each page verified once while no checkpoint writes.
        {
            let pages = self.pages.read();
            let img = pages
                .map
                .as_ref()
                .filter(|_| !self.overlay.contains_key(&page))
                .and_then(|m| m.as_slice().get(off as usize..off as usize + geo.page_len));
            if let Some(img) = img {
                let (w, bit) = ((page / 64) as usize, 1u64 << (page % 64));
                let seen = pages
                    .verified
                    .get(w)
                    .is_some_and(|v| v.load(Ordering::Relaxed) & bit != 0);
                if !seen {
                    self.verify(page, img)?;
                    if let Some(v) = pages.verified.get(w) {
                        v.fetch_or(bit, Ordering::Relaxed);
                    }
                }
                return self.slot_rec(id, &img[at..at + geo.slot], f);
            }
        }
        let got = self.with_page(page, |img| self.slot_rec(id, &img[at..at + geo.slot], f))??;
        Ok(got)
    }

    /// The record a slot holds, shown to `f`.
    fn slot_rec<R>(
        &self,
        id: u64,
        s: &[u8],
        f: &mut dyn FnMut(&[u8], Meta) -> Result<R>,
    ) -> Result<Option<R>> {
        let geo = self.geo;
        {
            let tag = s[0];
            if tag == 0 {
                return Ok(None);
            }
            let mut lb = [0u8; 4];
            lb[..geo.lenw].copy_from_slice(&s[1..1 + geo.lenw]);
            let len = u32::from_le_bytes(lb) as usize;
            if len as u64 > geo.width {
                return Err(Error::Corrupt(format!(
                    "{DATA_NAME}: id {id} holds a length past the width"
                )));
            }
            let value = &s[1 + geo.lenw..1 + geo.lenw + len];
            let (flags, expires) = if tag & SIDE != 0 {
                self.side.read().meta.get(&id).copied().unwrap_or((0, 0))
            } else {
                (0, 0)
            };
            let meta = Meta {
                flags,
                expires,
                version: version_of(id, flags, value, tag & GEN_MASK),
            };
            f(value, meta).map(Some)
        }
    }

    /// Whether `id` has a record in its slot (a damaged page: an error).
    pub(super) fn present(&self, id: u64) -> Result<bool> {
        Ok(self.with_rec(id, &mut |_, _| Ok(()))?.is_some())
    }

    /// The pages the file has room for.
    fn pages_in_file(&self) -> u64 {
        if self.file.is_none() {
            return 0;
        }
        let len = self.len.load(Ordering::Acquire);
        len.saturating_sub(HEAD_LEN)
            .div_ceil(self.geo.page_len as u64)
    }

    /// The first id in `from..=to` with a record in its slot; a damaged page is passed over
    /// (counted in `damaged`).
    pub(super) fn next_present(&self, from: u64, to: u64, damaged: &mut u64) -> Option<u64> {
        if self.file.is_none() || self.is_void() || from > to {
            return None;
        }
        let last_page = self
            .pages_in_file()
            .max(self.overlay.keys().max().map_or(0, |p| p + 1));
        let geo = self.geo;
        let mut id = from;
        while id <= to {
            let (page, _) = geo.place(id);
            let used = self.side.read().next_used(page, last_page)?;
            if used > page {
                id = geo.first_id(used);
                continue;
            }
            let end = (geo.first_id(page + 1) - 1).min(to);
            let got = self.with_page(page, |img| (id..=end).find(|&i| img[geo.place(i).1] != 0));
            match got {
                Ok(Some(i)) => return Some(i),
                Ok(None) => {}
                Err(_) => *damaged += 1,
            }
            id = end + 1;
        }
        None
    }

    /// The last id in `from..=to` with a record in its slot.
    pub(super) fn prev_present(&self, from: u64, to: u64, damaged: &mut u64) -> Option<u64> {
        if self.file.is_none() || self.is_void() || from > to {
            return None;
        }
        let last_page = self
            .pages_in_file()
            .max(self.overlay.keys().max().map_or(0, |p| p + 1));
        let geo = self.geo;
        let top = geo.first_id(last_page).saturating_sub(1);
        let mut id = to.min(top);
        while id >= from && id >= 1 {
            let (page, _) = geo.place(id);
            let used = self.side.read().prev_used(page)?;
            if used < page {
                id = geo.first_id(used + 1) - 1;
                continue;
            }
            let start = geo.first_id(page).max(from);
            let got = self.with_page(page, |img| {
                (start..=id).rev().find(|&i| img[geo.place(i).1] != 0)
            });
            match got {
                Ok(Some(i)) => return Some(i),
                Ok(None) => {}
                Err(_) => *damaged += 1,
            }
            if start <= 1 {
                return None;
            }
            id = start - 1;
        }
        None
    }

    /// Every page holding records that fails its checksum.
    pub(super) fn bad_pages(&self) -> Vec<BadPage> {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        let end = match &self.side.read().used {
            Some(v) => v.len() as u64 * 64,
            None => self.pages_in_file(),
        };
        let mut next = 0;
        // Pages that hold no record lose none when damaged.
        while let Some(p) = self.side.read().next_used(next, end) {
            next = p + 1;
            if self.read_page_into(p, &mut buf).is_err() {
                out.push(BadPage {
                    page: p,
                    off: self.geo.page_off(p),
                    len: self.geo.page_len as u64,
                });
            }
        }
        out
    }

    /// Ids with flags or an expiry, and them.
    pub(super) fn side_entries(&self) -> Vec<(u64, u32, u64)> {
        let mut v: Vec<_> = self
            .side
            .read()
            .meta
            .iter()
            .map(|(&i, &(f, e))| (i, f, e))
            .collect();
        v.sort_unstable();
        v
    }

    /// Write `changes` (ascending by id) into the pages and `head` as the new header, safe
    /// against a power loss at any point (see the module documentation). `vfs` and `dir` are
    /// the database's.
    pub(super) fn write(
        &self,
        vfs: &dyn Vfs,
        dir: &Path,
        feed: Feed<'_>,
        mut head: Head,
    ) -> Result<()> {
        let Some(file) = &self.file else {
            return Err(Error::Corrupt(format!("{DATA_NAME} is missing")));
        };
        let geo = self.geo;
        let old_gen = self.head.lock().gen;
        head.gen = old_gen + 1;
        head.width = geo.width;
        // New images, page by page, as the changes come (ascending by id): one buffer of
        // `page_len` bytes an image, and for each its page and whether it was empty before.
        let pl = geo.page_len;
        let mut imgs: Vec<u8> = Vec::new();
        let mut images: Vec<(u64, bool)> = Vec::new();
        let mut side = self.side.read().clone();
        let mut side_changed = false;
        // The page being filled (the last image of `imgs`) and whether it was empty.
        let mut cur: Option<(u64, bool)> = None;
        let mut finish = |cur: &mut Option<(u64, bool)>, imgs: &mut Vec<u8>, side: &mut Side| {
            let Some((page, fresh)) = cur.take() else {
                return false;
            };
            let at = imgs.len() - pl;
            let img = &mut imgs[at..];
            let used = (0..geo.per_page as usize).any(|k| img[k * geo.slot] != 0);
            let changed = side.set_used(page, used);
            self.seal(page, img);
            images.push((page, fresh));
            changed
        };
        feed(&mut |id, rec| {
            let (page, at) = geo.place(id);
            if cur.is_none_or(|c| c.0 != page) {
                side_changed |= finish(&mut cur, &mut imgs, &mut side);
                let start = imgs.len();
                imgs.resize(start + pl, 0);
                let buf = &mut imgs[start..];
                let pages = self.pages.read();
                let past_end = self.read_page_zeroed(page, buf, pages.map.as_ref())?;
                drop(pages);
                let fresh = past_end || buf.iter().all(|&b| b == 0);
                cur = Some((page, fresh));
            }
            let base = imgs.len() - pl;
            let s = &mut imgs[base + at..base + at + geo.slot];
            s.fill(0);
            if let Some((value, meta)) = rec {
                let has_side = meta.flags != 0 || meta.expires != 0;
                s[0] = gen_of(meta.version) | if has_side { SIDE } else { 0 };
                s[1..1 + geo.lenw].copy_from_slice(&(value.len() as u32).to_le_bytes()[..geo.lenw]);
                s[1 + geo.lenw..1 + geo.lenw + value.len()].copy_from_slice(value);
                if has_side {
                    side.meta.insert(id, (meta.flags, meta.expires));
                    side_changed = true;
                } else if side.meta.remove(&id).is_some() {
                    side_changed = true;
                }
            } else if side.meta.remove(&id).is_some() {
                side_changed = true;
            }
            Ok(())
        })?;
        side_changed |= finish(&mut cur, &mut imgs, &mut side);
        let img_of = |i: usize| &imgs[i * pl..(i + 1) * pl];
        // 1. The double-write file: every image of a page that held records.
        if !images.is_empty() {
            let mut dw = Vec::with_capacity(64);
            dw.extend_from_slice(DW_MAGIC);
            dw.extend_from_slice(&head.salt.to_le_bytes());
            dw.extend_from_slice(&head.gen.to_le_bytes());
            dw.extend_from_slice(&(geo.page_len as u64).to_le_bytes());
            dw.extend_from_slice(&(images.len() as u64).to_le_bytes());
            let dw_path = dir.join(DW_NAME);
            // Its name is durable once a directory sync followed its making (at creation, or
            // the checkpoint that made it).
            let named = vfs.exists(&dw_path);
            let f = vfs.open(&dw_path, true).map_err(io)?;
            f.set_len(0).map_err(io)?;
            let mut at = 0u64;
            let mut crc = 0u32;
            let mut put = |b: &[u8], at: &mut u64| -> Result<()> {
                f.write_at(b, *at).map_err(io)?;
                crc = crc32c::crc32c_append(crc, b);
                *at += b.len() as u64;
                Ok(())
            };
            put(&dw, &mut at)?;
            let mut chunk = Vec::new();
            for (i, &(p, fresh)) in images.iter().enumerate() {
                if fresh {
                    chunk.extend_from_slice(&(p | FRESH).to_le_bytes());
                } else {
                    chunk.extend_from_slice(&p.to_le_bytes());
                    chunk.extend_from_slice(img_of(i));
                }
                if chunk.len() >= 1 << 20 {
                    put(&chunk, &mut at)?;
                    chunk.clear();
                }
            }
            put(&chunk, &mut at)?;
            f.write_at(&crc.to_le_bytes(), at).map_err(io)?;
            f.sync().map_err(io)?;
            if !named {
                vfs.sync_dir(dir).map_err(io)?;
            }
        }
        // 2. The pages in place.
        {
            let mut map = self.pages.write();
            for (i, &(p, _)) in images.iter().enumerate() {
                file.write_at(img_of(i), geo.page_off(p)).map_err(io)?;
            }
            self.epoch.fetch_add(1, Ordering::AcqRel);
            *self.side.write() = side.clone();
            self.remap(vfs, &mut map);
        }
        file.sync().map_err(io)?;
        // 3. The side file, when it changed (it names the generation it belongs to), or when
        // it is not there.
        if side_changed || !vfs.exists(&dir.join(SIDE_NAME)) {
            let mut b = Vec::new();
            encode_side(&side, &head, &mut b);
            checkpoint::write_atomic(vfs, dir, SIDE_NAME, SIDE_TMP, &[&b], || Ok(()))
                .map_err(io)?;
        }
        // 4. The header, over the older copy, then over the other: at rest both copies are
        // the same, so damage to one loses nothing; a crash tears at most one.
        write_head(&**file, &head)?;
        *self.head.lock() = head;
        Ok(())
    }

    /// Write a new slot file for `head`'s width holding every record of `old` up to id
    /// `max`, and put it in place of `old`'s (`optimize width=…`): made whole under a
    /// temporary name, its side file written first (for the next generation, which `old`'s
    /// header accepts too), then renamed.
    pub(super) fn rebuild(
        vfs: &dyn Vfs,
        dir: &Path,
        mut head: Head,
        old: &Slots,
        max: u64,
    ) -> Result<()> {
        head.gen = old.head.lock().gen + 1;
        let tmp = dir.join(DATA_TMP);
        let f = vfs.open(&tmp, true).map_err(io)?;
        f.set_len(0).map_err(io)?;
        let new = Slots::new(Some(f.clone()), head.clone(), Side::empty(), HashMap::new());
        let geo = new.geo;
        let mut side = Side::empty();
        let mut page = u64::MAX;
        let mut img = vec![0u8; geo.page_len];
        let mut damaged = 0;
        let mut at = 1;
        let flush = |page: u64, img: &mut Vec<u8>| -> Result<()> {
            if page != u64::MAX {
                new.seal(page, img);
                f.write_at(img, geo.page_off(page)).map_err(io)?;
                img.fill(0);
            }
            Ok(())
        };
        while let Some(id) = old.next_present(at, max, &mut damaged) {
            let got = old.with_rec(id, &mut |v, m| Ok((v.to_vec(), m)))?;
            if let Some((value, meta)) = got {
                let (p, off) = geo.place(id);
                if p != page {
                    flush(page, &mut img)?;
                    page = p;
                }
                let s = &mut img[off..off + geo.slot];
                let has_side = meta.flags != 0 || meta.expires != 0;
                s[0] = gen_of(meta.version) | if has_side { SIDE } else { 0 };
                s[1..1 + geo.lenw].copy_from_slice(&(value.len() as u32).to_le_bytes()[..geo.lenw]);
                s[1 + geo.lenw..1 + geo.lenw + value.len()].copy_from_slice(&value);
                if has_side {
                    side.meta.insert(id, (meta.flags, meta.expires));
                }
                side.set_used(p, true);
            }
            at = id + 1;
        }
        flush(page, &mut img)?;
        if damaged > 0 {
            return Err(Error::Corrupt(format!(
                "{DATA_NAME}: {damaged} damaged pages; `repair` the database first"
            )));
        }
        f.sync().map_err(io)?;
        write_head(&*f, &head)?;
        drop(new);
        let mut b = Vec::new();
        encode_side(&side, &head, &mut b);
        checkpoint::write_atomic(vfs, dir, SIDE_NAME, SIDE_TMP, &[&b], || Ok(())).map_err(io)?;
        vfs.rename(&tmp, &dir.join(DATA_NAME)).map_err(io)?;
        vfs.sync_dir(dir).map_err(io)?;
        Ok(())
    }

    /// Forget every record: the pages cut off, the side file emptied, a new header.
    pub(super) fn clear(&self, vfs: &dyn Vfs, dir: &Path, mut head: Head) -> Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        head.gen = self.head.lock().gen + 1;
        head.width = self.geo.width;
        head.count = 0;
        head.min = 0;
        head.max = 0;
        {
            let mut map = self.pages.write();
            map.map = None;
            file.set_len(HEAD_LEN).map_err(io)?;
            self.remap(vfs, &mut map);
            self.epoch.fetch_add(1, Ordering::AcqRel);
            *self.side.write() = Side::empty();
        }
        file.sync().map_err(io)?;
        let mut b = Vec::new();
        encode_side(&Side::empty(), &head, &mut b);
        checkpoint::write_atomic(vfs, dir, SIDE_NAME, SIDE_TMP, &[&b], || Ok(())).map_err(io)?;
        write_head(&**file, &head)?;
        self.void.store(false, Ordering::Release);
        *self.head.lock() = head;
        Ok(())
    }
}

/// Write `head` over the copy of the older generation, then over the other, each synced.
fn write_head(file: &dyn VFile, head: &Head) -> Result<()> {
    let b = head.encode()?;
    for copy in [head.gen % 2, (head.gen + 1) % 2] {
        file.write_at(&b, copy * PAGE as u64).map_err(io)?;
        file.sync().map_err(io)?;
    }
    Ok(())
}

/// The side file: magic, salt, generation, count, then per record id (u64), flags (u32),
/// expiry (u64); then the words of the bitmap of used pages (u64 count, `u64::MAX` when not
/// known, then the words), all little-endian; a crc32c follows (`checkpoint::write_atomic`).
fn encode_side(side: &Side, head: &Head, out: &mut Vec<u8>) {
    let mut v: Vec<_> = side.meta.iter().collect();
    v.sort_unstable();
    out.extend_from_slice(SIDE_MAGIC);
    out.extend_from_slice(&head.salt.to_le_bytes());
    out.extend_from_slice(&head.gen.to_le_bytes());
    out.extend_from_slice(&(v.len() as u64).to_le_bytes());
    for (id, (f, e)) in v {
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&f.to_le_bytes());
        out.extend_from_slice(&e.to_le_bytes());
    }
    match &side.used {
        None => out.extend_from_slice(&u64::MAX.to_le_bytes()),
        Some(words) => {
            out.extend_from_slice(&(words.len() as u64).to_le_bytes());
            for w in words {
                out.extend_from_slice(&w.to_le_bytes());
            }
        }
    }
}

/// The side file's contents when it belongs to `head`: it is written (with the generation of
/// the checkpoint) whenever it changes, before that checkpoint's header, so one of an earlier
/// generation is current, and one of the next was written by a checkpoint cut short, whose
/// changes the log replay redoes (a page it marks used that is not holds nothing; one it
/// marks unused that is was empty before and holds only records the replay brings back).
fn decode_side(b: &[u8], head: &Head) -> Option<Side> {
    if b.get(..8)? != SIDE_MAGIC || le_u64(b, 8)? != head.salt {
        return None;
    }
    if le_u64(b, 16)? > head.gen + 1 {
        return None;
    }
    let n = le_u64(b, 24)? as usize;
    if n > b.len() / 20 {
        return None;
    }
    let mut meta = HashMap::with_capacity(n);
    for i in 0..n {
        let at = 32 + i * 20;
        meta.insert(le_u64(b, at)?, (le_u32(b, at + 8)?, le_u64(b, at + 12)?));
    }
    let at = 32 + n * 20;
    let words = le_u64(b, at)?;
    let used = if words == u64::MAX {
        None
    } else {
        let words = usize::try_from(words).ok().filter(|&w| w <= b.len() / 8)?;
        let mut v = Vec::with_capacity(words);
        for i in 0..words {
            v.push(le_u64(b, at + 8 + i * 8)?);
        }
        Some(v)
    };
    Some(Side { meta, used })
}

type DwPages = Vec<(u64, Option<Vec<u8>>)>;

/// What the side file holds: the flags and expiry of the records that have them, and which
/// pages hold any record (`None`: not known, every page is looked at).
#[derive(Clone, Debug, Default)]
pub(super) struct Side {
    pub meta: HashMap<u64, (u32, u64)>,
    pub used: Option<Vec<u64>>,
}

impl Side {
    fn empty() -> Side {
        Side {
            meta: HashMap::new(),
            used: Some(Vec::new()),
        }
    }

    fn is_used(&self, page: u64) -> bool {
        match &self.used {
            None => true,
            Some(v) => v
                .get((page / 64) as usize)
                .is_some_and(|w| w & (1 << (page % 64)) != 0),
        }
    }

    /// Mark `page` used or not; whether that changed anything.
    fn set_used(&mut self, page: u64, used: bool) -> bool {
        let Some(v) = &mut self.used else {
            return false;
        };
        let i = (page / 64) as usize;
        if v.len() <= i {
            if !used {
                return false;
            }
            v.resize(i + 1, 0);
        }
        let bit = 1u64 << (page % 64);
        let was = v[i] & bit != 0;
        if used {
            v[i] |= bit;
        } else {
            v[i] &= !bit;
        }
        was != used
    }

    /// The first used page in `from..end`.
    fn next_used(&self, from: u64, end: u64) -> Option<u64> {
        let Some(v) = &self.used else {
            return (from < end).then_some(from);
        };
        let mut p = from;
        while p < end {
            let i = (p / 64) as usize;
            let w = *v.get(i)? >> (p % 64);
            if w != 0 {
                let q = p + u64::from(w.trailing_zeros());
                return (q < end).then_some(q);
            }
            p = (i as u64 + 1) * 64;
        }
        None
    }

    /// The last used page in `..=from`.
    fn prev_used(&self, from: u64) -> Option<u64> {
        let Some(v) = &self.used else {
            return Some(from);
        };
        let mut p = from.min((v.len() as u64 * 64).checked_sub(1)?);
        loop {
            let i = (p / 64) as usize;
            let w = v[i] << (63 - p % 64);
            if w != 0 {
                return Some(p - u64::from(w.leading_zeros()));
            }
            if i == 0 {
                return None;
            }
            p = i as u64 * 64 - 1;
        }
    }
}

/// The pages of a double-write file that verified, when it belongs to the checkpoint after
/// `head` (an older one was written in place already).
fn decode_dw(b: &[u8], head: &Head, geo: &Geometry) -> Option<DwPages> {
    if b.get(..8)? != DW_MAGIC
        || le_u64(b, 8)? != head.salt
        || le_u64(b, 16)? != head.gen + 1
        || le_u64(b, 24)? != geo.page_len as u64
    {
        return None;
    }
    let n = le_u64(b, 32)?;
    let mut at = 40usize;
    let mut out = Vec::new();
    for _ in 0..n {
        let p = le_u64(b, at)?;
        at += 8;
        if p & FRESH != 0 {
            out.push((p & !FRESH, None));
        } else {
            out.push((p, Some(b.get(at..at + geo.page_len)?.to_vec())));
            at += geo.page_len;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{CrashMode, SimVfs};

    fn head(width: u64) -> Head {
        Head {
            salt: 7,
            width,
            limsiz: 1 << 30,
            ..Head::default()
        }
    }

    /// A change: an id and its record.
    type Change = (u64, Vec<u8>, Meta);

    fn rec(id: u64, v: &[u8], flags: u32, gen: u8) -> Change {
        let meta = Meta {
            flags,
            expires: 0,
            version: version_of(id, flags, v, gen),
        };
        (id, v.to_vec(), meta)
    }

    fn write(s: &Slots, fs: &SimVfs, dir: &Path, ch: &[Change], h: Head) -> Result<()> {
        s.write(
            fs,
            dir,
            &mut |sink| {
                for (id, v, m) in ch {
                    sink(*id, Some((v, *m)))?;
                }
                Ok(())
            },
            h,
        )
    }

    fn get(s: &Slots, id: u64) -> Option<(Vec<u8>, Meta)> {
        s.with_rec(id, &mut |v, m| Ok((v.to_vec(), m))).unwrap()
    }

    #[test]
    fn geometry_of_small_and_large_slots() {
        let g = Geometry::new(8);
        assert_eq!((g.lenw, g.slot, g.per_page, g.page_len), (1, 10, 409, 4096));
        assert_eq!(g.place(1), (0, 0));
        assert_eq!(g.place(410), (1, 0));
        let g = Geometry::new(300_000);
        assert_eq!((g.lenw, g.per_page, g.page_len), (4, 1, 300_009));
    }

    #[test]
    fn records_survive_a_checkpoint_and_reopen() {
        let fs = SimVfs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let o = Slots::open(&fs, dir, false, Some(head(8))).unwrap();
        assert!(o.findings.is_empty());
        let s = o.slots;
        let ch = vec![
            rec(1, b"a", 0, 1),
            rec(500, b"12345678", 9, 2),
            rec(9000, b"", 0, 3),
        ];
        write(&s, &fs, dir, &ch, head(8)).unwrap();
        drop(s);
        let s = Slots::open(&fs, dir, true, None).unwrap().slots;
        let (v, m) = get(&s, 500).unwrap();
        assert_eq!((v.as_slice(), m.flags), (&b"12345678"[..], 9));
        assert_eq!(m.version, version_of(500, 9, b"12345678", 2));
        assert_eq!(get(&s, 9000).unwrap().0, b"");
        assert!(get(&s, 2).is_none());
        let mut d = 0;
        assert_eq!(s.next_present(2, 100_000, &mut d), Some(500));
        assert_eq!(s.prev_present(1, 8999, &mut d), Some(500));
        assert_eq!(s.prev_present(1, 100_000, &mut d), Some(9000));
        assert_eq!(d, 0);
    }

    #[test]
    fn a_damaged_page_is_reported() {
        let fs = SimVfs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let s = Slots::open(&fs, dir, false, Some(head(8))).unwrap().slots;
        write(&s, &fs, dir, &[rec(3, b"x", 0, 1)], head(8)).unwrap();
        let f = fs.open(&dir.join(DATA_NAME), false).unwrap();
        f.write_at(b"\xff", HEAD_LEN + 25).unwrap();
        drop((s, f));
        let s = Slots::open(&fs, dir, true, None).unwrap().slots;
        assert!(matches!(
            s.with_rec(3, &mut |_, _| Ok(())),
            Err(Error::Corrupt(_))
        ));
        assert_eq!(s.bad_pages().len(), 1);
    }

    /// A power loss at every point of a checkpoint that rewrites a page holding records
    /// (torn writes included) leaves either the old records or the new, never a torn page.
    #[test]
    fn torn_page_writes_are_repaired_from_the_double_write_file() {
        let setup = || {
            let fs = SimVfs::new();
            let dir = Path::new("/d");
            fs.create_dir_all(dir).unwrap();
            let s = Slots::open(&fs, dir, false, Some(head(8))).unwrap().slots;
            let first: Vec<Change> = (1..=800).map(|i| rec(i, b"old", 0, 1)).collect();
            write(&s, &fs, dir, &first, head(8)).unwrap();
            (fs, s)
        };
        let second: Vec<Change> = (1..=1200)
            .filter(|i| i % 3 == 0)
            .map(|i| rec(i, b"new", 0, 2))
            .collect();
        let dir = Path::new("/d");
        let (fs, s) = setup();
        let before = fs.op_count();
        write(&s, &fs, dir, &second, head(8)).unwrap();
        let ops = fs.op_count() - before;
        assert!(ops > 3);
        for seed in 0..(ops + 1) * 3 {
            let (fs, s) = setup();
            fs.fail_after(seed / 3, crate::io::Fault::Eio);
            let _ = write(&s, &fs, dir, &second, head(8));
            let img = fs.crash_image(CrashMode::Torn { seed });
            drop(s);
            let fs2 = SimVfs::from_image(&img);
            let o = Slots::open(&fs2, dir, false, Some(head(8))).unwrap();
            let s2 = o.slots;
            let gen = s2.head.lock().gen;
            for i in 1..=1200u64 {
                let got = get(&s2, i).map(|r| r.0);
                if i > 800 {
                    let ok = got.is_none() || (gen == 2 && got.as_deref() == Some(&b"new"[..]));
                    assert!(
                        ok || (gen == 1 && got.as_deref() == Some(&b"new"[..])),
                        "seed {seed} id {i}"
                    );
                    continue;
                }
                let v = got.unwrap_or_else(|| panic!("seed {seed} id {i}"));
                let want: &[u8] = if i % 3 == 0 && gen == 2 {
                    b"new"
                } else {
                    b"old"
                };
                // Before the header of generation 2, a page may hold either (the log replay
                // redoes the new ones); after it, only the new.
                if gen == 2 || i % 3 != 0 {
                    assert_eq!(v, want, "seed {seed} id {i} gen {gen}");
                } else {
                    assert!(v == b"old" || v == b"new", "seed {seed} id {i}");
                }
            }
            assert!(s2.bad_pages().is_empty(), "seed {seed}");
        }
    }
}
