//! The one narrow interface through which on-disk kinds touch files.
//!
//! [`OsVfs`] is the real file system. [`SimVfs`] keeps files in memory, remembers what was synced,
//! and can simulate a crash (drop everything not synced, optionally tearing the last write) or
//! fail operations with ENOSPC / EIO after a given count: the crash and fault tests run on it.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

/// An open file.
#[allow(clippy::len_without_is_empty)]
pub trait VFile: Send + Sync {
    /// Read exactly `buf.len()` bytes at `off` (an error if the file is shorter).
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()>;
    /// Write all of `buf` at `off`, extending the file as needed.
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()>;
    /// Make everything written so far durable (fdatasync).
    fn sync(&self) -> io::Result<()>;
    fn len(&self) -> io::Result<u64>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Ask the OS to start writing `len` bytes at `off` back to the device, without waiting
    /// and without any promise of durability: a hint, so that a later `sync` has less to wait
    /// for. Ignores errors (the later `sync` reports any that matter).
    fn start_writeback(&self, _off: u64, _len: u64) {}
    /// Ask the OS to drop `len` bytes at `off` from its page cache, those already written back
    /// (a hint: dirty pages stay; the bytes stay the file's and are read from the device next).
    fn drop_cached(&self, _off: u64, _len: u64) {}
    /// Write zeros to `len` bytes at `off` (past the records) and make them durable, so that
    /// records later written over them change no file metadata and their fdatasync has no
    /// size or block allocation to journal (docs/ARCHITECTURE.md, "Zeros ahead of the log").
    /// The zeros stay in the page cache, so those later partial-page writes need no read.
    fn zero_fill(&self, off: u64, len: u64) -> io::Result<()> {
        let zeros = [0u8; 64 << 10];
        let mut at = off;
        while at < off + len {
            let n = (off + len - at).min(zeros.len() as u64) as usize;
            self.write_at(&zeros[..n], at)?;
            at += n as u64;
        }
        self.sync()
    }
    /// A writable shared mapping of the file's first `len` bytes (the file must be at least
    /// that long: `set_len` first): bytes copied into it are the file's, as if written, with
    /// no call per write, and are as durable as a write once `sync` returns. `None` when the
    /// backend has none (the caller then writes).
    fn map_mut(&self, _len: usize) -> io::Result<Option<MapMut>> {
        Ok(None)
    }
}

/// A writable shared mapping of a file ([`VFile::map_mut`]). Writers copy into
/// `as_mut_ptr()` directly: an append through it is a memory copy, no call.
pub struct MapMut {
    ptr: *mut u8,
    len: usize,
    /// A real mapping of the operating system (which `populate` can fault in).
    os: bool,
    /// What keeps the memory alive: the mapping, or the simulated file's pages.
    _keep: Box<dyn std::any::Any + Send + Sync>,
}

// SAFETY: the pointer is into memory owned by `_keep` (a shared mapping, or a simulated file's
// pages), valid for `len` bytes as long as this value lives; writers synchronise among
// themselves (the update log writes under its writer's lock).
unsafe impl Send for MapMut {}
// SAFETY: as for `Send`: `&MapMut` hands out only the raw pointer.
unsafe impl Sync for MapMut {}

#[allow(clippy::len_without_is_empty)]
impl MapMut {
    pub fn len(&self) -> usize {
        self.len
    }

    /// The first byte of the mapping: `len()` bytes may be written from it by one writer at a
    /// time.
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Whether this is a mapping of the operating system's (not a simulated file's pages).
    pub fn is_os(&self) -> bool {
        self.os
    }

    /// Unmap the pages of `from..to` (whole pages within it) from this process
    /// (`MADV_DONTNEED`): their bytes stay the file's, dirty ones are written back as usual, and
    /// a later access faults them in again. Writing back a page still mapped write-protects it
    /// in every process that maps it, an interrupt to every core per page; an unmapped page
    /// needs none.
    pub fn unmap_pages(&self, from: usize, to: usize) {
        let from = from.next_multiple_of(4096);
        let to = to.min(self.len) & !4095;
        if !self.os || from >= to {
            return;
        }
        // SAFETY: the range lies within the mapping, which `self` keeps alive. On a shared file
        // mapping the advice changes no byte of the file: a later access reads the same bytes
        // back from the page cache.
        unsafe { libc::madvise(self.ptr.add(from).cast(), to - from, libc::MADV_DONTNEED) };
    }

    /// Fault in the pages of `from..to` as if written, changing no byte, off the writers' path
    /// (`MADV_POPULATE_WRITE`, Linux 5.14). Whether it was done (older kernels refuse; the
    /// writers then fault the pages in themselves).
    pub fn populate(&self, from: usize, to: usize) -> bool {
        if !self.os {
            return true;
        }
        let to = to.min(self.len);
        if from >= to {
            return true;
        }
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        // SAFETY: the range lies within the mapping, which `self` keeps alive; the advice
        // changes no data.
        let rc =
            unsafe { libc::madvise(self.ptr.add(from).cast(), to - from, MADV_POPULATE_WRITE) };
        rc == 0
    }
}

/// A file system.
pub trait Vfs: Send + Sync {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn VFile>>;
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Atomically replace `to` with `from`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// File names (not paths) in a directory.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Create the directory `dir` itself: its parent must exist (`NotFound` otherwise), and
    /// `AlreadyExists` when something is there.
    fn create_dir(&self, dir: &Path) -> io::Result<()>;
    fn exists(&self, path: &Path) -> bool;
    /// Make renames, creations and removals in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Take an exclusive lock that lasts as long as the returned guard (and dies with the
    /// process); `WouldBlock` when another holder has it.
    fn lock(&self, path: &Path) -> io::Result<Box<dyn std::any::Any + Send + Sync>>;
    /// When the file at `path` was last written (retention ages files by it).
    fn modified(&self, path: &Path) -> io::Result<std::time::SystemTime>;
    /// A read-only memory map of `len` bytes of the file at `path` (which may be shorter now:
    /// only bytes below its written length are ever read). `None` when the backend has none.
    fn map(&self, _path: &Path, _len: usize) -> Option<Map> {
        None
    }
}

/// A read-only shared memory map of a file.
pub struct Map {
    map: memmap2::Mmap,
}

impl AsRef<[u8]> for Map {
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
}

impl Map {
    pub fn as_slice(&self) -> &[u8] {
        &self.map
    }

    /// Drop the pages this process has touched from its resident set (they stay in the OS
    /// page cache and come back on the next read).
    pub fn release(&self) {
        // SAFETY: a read-only shared file mapping: MADV_DONTNEED only unmaps the pages from this
        // process; the next access reads the same bytes back from the page cache. No reference
        // into the mapping observes a change of contents.
        let _ = unsafe {
            self.map
                .unchecked_advise(memmap2::UncheckedAdvice::DontNeed)
        };
    }
}

// ---------------------------------------------------------------------------------------------
// The real file system.

/// The operating system's files.
#[derive(Clone, Copy, Debug, Default)]
pub struct OsVfs;

struct OsFile(File);

impl VFile for OsFile {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.0.write_all_at(buf, off)
    }
    fn sync(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn start_writeback(&self, off: u64, len: u64) {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain system call on a descriptor this file owns.
        unsafe {
            libc::sync_file_range(
                self.0.as_raw_fd(),
                off as i64,
                len as i64,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
    }
    fn drop_cached(&self, off: u64, len: u64) {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain system call on a descriptor this file owns.
        unsafe {
            libc::posix_fadvise(
                self.0.as_raw_fd(),
                off as i64,
                len as i64,
                libc::POSIX_FADV_DONTNEED,
            );
        }
    }
    fn zero_fill(&self, off: u64, len: u64) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        // Written back a piece at a time as it goes, so that a concurrent fdatasync of the
        // records (which flushes every dirty page of the file) never waits behind more than one
        // piece of zeros.
        const PIECE: usize = 256 << 10;
        let zeros = vec![0u8; PIECE];
        let mut at = off;
        while at < off + len {
            let n = (off + len - at).min(PIECE as u64);
            self.0.write_all_at(&zeros[..n as usize], at)?;
            let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER;
            // SAFETY: a plain system call on a descriptor this file owns.
            let r =
                unsafe { libc::sync_file_range(self.0.as_raw_fd(), at as i64, n as i64, flags) };
            if r != 0 {
                let e = io::Error::last_os_error();
                // A file system that cannot write back a range (tmpfs) has no need to.
                if !matches!(
                    e.raw_os_error(),
                    Some(libc::EINVAL | libc::ENOSYS | libc::ESPIPE)
                ) {
                    return Err(e);
                }
            }
            at += n;
        }
        // The blocks' allocation and the new size.
        self.0.sync_data()
    }
    fn map_mut(&self, len: usize) -> io::Result<Option<MapMut>> {
        // The caller owns the file for writing (other processes are kept out by the
        // database's lock), writes only below `len`, which lies within the file (made that
        // long first), and cuts the file only after dropping the mapping.
        let map = memmap2::MmapOptions::new().len(len).map_raw(&self.0)?;
        // No read-ahead on a fault: the pages are written, and reading ahead into the file's
        // hole zeroes pages the caller fills itself (`MapMut::populate` after writing them).
        let _ = map.advise(memmap2::Advice::Random);
        Ok(Some(MapMut {
            ptr: map.as_mut_ptr(),
            len,
            os: true,
            _keep: Box::new(map),
        }))
    }
}

struct OsLock(#[allow(dead_code)] File);

impl Vfs for OsVfs {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn VFile>> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)?;
        Ok(Arc::new(OsFile(f)))
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut v = Vec::new();
        for e in std::fs::read_dir(dir)? {
            if let Some(n) = e?.file_name().to_str() {
                v.push(n.to_string());
            }
        }
        Ok(v)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }
    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn std::any::Any + Send + Sync>> {
        use std::os::fd::AsRawFd;
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        // SAFETY: flock on a valid, owned descriptor; the lock is released when the file (and so
        // the descriptor) is closed, including when the process dies.
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Box::new(OsLock(f)))
    }
    fn modified(&self, path: &Path) -> io::Result<std::time::SystemTime> {
        std::fs::metadata(path)?.modified()
    }
    fn map(&self, path: &Path, len: usize) -> Option<Map> {
        let f = File::open(path).ok()?;
        // SAFETY: the map is read-only and shared. The engine reads only bytes below a
        // segment's flushed length, which are never rewritten in place (segments are
        // append-only; a file is truncated or removed only when no reader can reach those
        // bytes); other processes are kept out by the database lock.
        let map = unsafe { memmap2::MmapOptions::new().len(len).map(&f) }.ok()?;
        Some(Map { map })
    }
}

// ---------------------------------------------------------------------------------------------
// The simulated file system for crash and fault tests.

/// Which fault an armed [`SimVfs`] injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    NoSpace,
    Eio,
}

#[derive(Default)]
struct SimFileState {
    /// What a reader sees now.
    data: Vec<u8>,
    /// What survives a crash.
    durable: Vec<u8>,
    /// Writes since the last sync, in order (offset, bytes), and set_len calls as (len, empty).
    /// `durable` with these applied in order is `data`.
    pending: Vec<(u64, Vec<u8>, bool)>,
    /// How many entries have left `pending` since the file was created (the number of its
    /// first entry): a sync makes durable the entries written before it started, up to the
    /// number it read then.
    gone: u64,
    /// The pages of a writable mapping ([`VFile::map_mut`]), when the file has one.
    shadow: Option<Arc<Shadow>>,
    /// When the file was last changed.
    modified: Option<std::time::SystemTime>,
}

/// The memory a [`SimFile`]'s writable mapping writes to. What the writer copies into it
/// becomes the file's (a pending write of each changed page, in file order) whenever the file
/// is next looked at: read, written, synced, cut or imaged by a crash. Until a sync covers
/// them those pages may be lost or torn by a crash, as a mapping's dirty pages may be.
struct Shadow {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: `ptr` owns a leaked `Box<[u8]>` of `len` bytes, freed in `Drop` only.
unsafe impl Send for Shadow {}
// SAFETY: as above; concurrent access is described at `SimFileState::absorb`.
unsafe impl Sync for Shadow {}

impl Shadow {
    fn new(data: &[u8], len: usize) -> Shadow {
        let mut b = vec![0u8; len].into_boxed_slice();
        let n = data.len().min(len);
        b[..n].copy_from_slice(&data[..n]);
        let ptr = Box::into_raw(b) as *mut u8;
        Shadow { ptr, len }
    }
}

impl Drop for Shadow {
    fn drop(&mut self) {
        // SAFETY: made by `Box::into_raw` of a slice of `len` bytes in `new`, freed once here.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr, self.len)) });
    }
}

impl SimFileState {
    /// Take in what was written through the mapping since the last look: each 4 KiB page that
    /// differs from `data` becomes a pending write of that page (in file order, as write-back
    /// goes), so an unsynced mapped write is lost, kept, or torn by a crash like any write.
    fn absorb(&mut self) {
        let Some(sh) = self.shadow.clone() else {
            return;
        };
        // No mapping of it is left (only the file's reference and this one): once its pages
        // are taken in, the memory goes. (A new mapping needs the state's lock, held here.)
        let unmapped = Arc::strong_count(&sh) == 2;
        let n = sh.len.min(self.data.len());
        let mut page = vec![0u8; 4096];
        let mut at = 0;
        while at < n {
            let end = (at + 4096).min(n);
            let page = &mut page[..end - at];
            // SAFETY: within the shadow's `len` bytes, which `sh` keeps alive. A writer may be
            // copying into this page meanwhile (a test images a running engine): the copy then
            // holds part of its bytes, as a real write-back of a page being written would.
            unsafe { std::ptr::copy_nonoverlapping(sh.ptr.add(at), page.as_mut_ptr(), page.len()) };
            if page[..] != self.data[at..end] {
                self.data[at..end].copy_from_slice(page);
                self.pending.push((at as u64, page.to_vec(), false));
                self.modified = Some(std::time::SystemTime::now());
            }
            at = end;
        }
        if unmapped {
            self.shadow = None;
        }
    }

    /// Keep the mapping's pages equal to `data` at `off..off + len` after a write or a cut.
    fn mirror(&mut self, off: usize, len: usize) {
        let Some(sh) = &self.shadow else { return };
        let end = (off + len).min(sh.len);
        if off >= end {
            return;
        }
        for (i, at) in (off..end).enumerate() {
            let b = self.data.get(at).copied().unwrap_or(0);
            // SAFETY: `at < sh.len`; the mapping's writer does not write while the file is
            // written or cut (the update log does both under its writer's lock).
            unsafe { *sh.ptr.add(off + i) = b };
        }
    }

    /// Everything pending is durable now (the file was changed behind the log's back).
    fn settle(&mut self) {
        self.absorb();
        self.durable = self.data.clone();
        self.gone += self.pending.len() as u64;
        self.pending.clear();
    }
}

struct SimFile {
    state: Mutex<SimFileState>,
    fs: Arc<SimShared>,
}

#[derive(Default)]
struct SimShared {
    /// Operations left before the armed fault fires; negative = disarmed.
    fail_after: AtomicI64,
    fault: Mutex<Option<Fault>>,
    writes: AtomicU64,
    /// Microseconds each sync takes (to model a real disk's fdatasync latency).
    sync_delay_us: AtomicU64,
    /// File syncs started.
    syncs: AtomicU64,
}

impl SimShared {
    fn tick(&self) -> io::Result<()> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        let left = self.fail_after.load(Ordering::Relaxed);
        if left < 0 {
            return Ok(());
        }
        if left == 0 {
            let fault = self.fault.lock().unwrap_or(Fault::Eio);
            return Err(match fault {
                Fault::NoSpace => io::Error::from_raw_os_error(libc::ENOSPC),
                Fault::Eio => io::Error::from_raw_os_error(libc::EIO),
            });
        }
        self.fail_after.fetch_sub(1, Ordering::Relaxed);
        Ok(())
    }
}

fn apply_write(data: &mut Vec<u8>, off: u64, buf: &[u8]) {
    let off = off as usize;
    if data.len() < off + buf.len() {
        data.resize(off + buf.len(), 0);
    }
    data[off..off + buf.len()].copy_from_slice(buf);
}

impl VFile for SimFile {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let mut st = self.state.lock();
        st.absorb();
        let off = off as usize;
        if off + buf.len() > st.data.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past end",
            ));
        }
        buf.copy_from_slice(&st.data[off..off + buf.len()]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.fs.tick()?;
        let mut st = self.state.lock();
        st.absorb();
        apply_write(&mut st.data, off, buf);
        st.pending.push((off, buf.to_vec(), false));
        st.mirror(off as usize, buf.len());
        st.modified = Some(std::time::SystemTime::now());
        Ok(())
    }
    /// Makes durable what was written before the call; a write made while a slow sync runs
    /// stays pending (as a real fdatasync promises nothing for it).
    fn sync(&self) -> io::Result<()> {
        self.fs.tick()?;
        let upto = {
            let mut st = self.state.lock();
            st.absorb();
            st.gone + st.pending.len() as u64
        };
        self.fs.syncs.fetch_add(1, Ordering::Release);
        let delay = self.fs.sync_delay_us.load(Ordering::Relaxed);
        if delay > 0 {
            std::thread::sleep(std::time::Duration::from_micros(delay));
        }
        let mut st = self.state.lock();
        let n = (upto.saturating_sub(st.gone) as usize).min(st.pending.len());
        let SimFileState {
            durable,
            pending,
            gone,
            ..
        } = &mut *st;
        for (off, bytes, is_len) in pending.drain(..n) {
            if is_len {
                durable.resize(off as usize, 0);
            } else {
                apply_write(durable, off, &bytes);
            }
        }
        *gone += n as u64;
        Ok(())
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.state.lock().data.len() as u64)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.fs.tick()?;
        let mut st = self.state.lock();
        st.absorb();
        let old = st.data.len();
        st.data.resize(len as usize, 0);
        st.pending.push((len, Vec::new(), true));
        if (len as usize) < old {
            st.mirror(len as usize, old - len as usize);
        }
        st.modified = Some(std::time::SystemTime::now());
        Ok(())
    }
    fn map_mut(&self, len: usize) -> io::Result<Option<MapMut>> {
        let mut st = self.state.lock();
        if st.data.len() < len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "mapping past the end of the file",
            ));
        }
        st.absorb();
        let sh = match &st.shadow {
            Some(sh) if sh.len >= len => sh.clone(),
            // Two mappings share their pages only when the second fits in the first (one no
            // longer in use went in `absorb` above).
            Some(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "SimVfs: a mapping larger than one still in use",
                ))
            }
            _ => {
                let sh = Arc::new(Shadow::new(&st.data, len));
                st.shadow = Some(sh.clone());
                sh
            }
        };
        Ok(Some(MapMut {
            ptr: sh.ptr,
            len,
            os: false,
            _keep: Box::new(sh),
        }))
    }
}

/// The random numbers a crash under `mode` tears writes by.
fn crash_rng(mode: CrashMode) -> impl FnMut() -> u64 {
    let mut rng = match mode {
        CrashMode::DropUnsynced => 0,
        CrashMode::Torn { seed } | CrashMode::Scattered { seed } => seed | 1,
    };
    move || {
        // xorshift64*
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    }
}

/// What of a file survives a crash under `mode`: its durable bytes, and when torn, a prefix of
/// the writes since its last sync, the last of them cut at a random byte.
fn survivor(st: &SimFileState, mode: CrashMode, next: &mut impl FnMut() -> u64) -> Vec<u8> {
    let mut img = st.durable.clone();
    if let CrashMode::Scattered { .. } = mode {
        for (off, bytes, is_len) in &st.pending {
            if next().is_multiple_of(2) {
                continue;
            }
            if *is_len {
                img.resize(*off as usize, 0);
            } else {
                apply_write(&mut img, *off, bytes);
            }
        }
    }
    if let CrashMode::Torn { .. } = mode {
        let n = st.pending.len();
        if n > 0 {
            let keep = (next() % (n as u64 + 1)) as usize;
            for (i, (off, bytes, is_len)) in st.pending.iter().enumerate().take(keep + 1) {
                if *is_len {
                    if i < keep {
                        img.resize(*off as usize, 0);
                    }
                    continue;
                }
                let part = if i < keep {
                    bytes.len()
                } else {
                    (next() % (bytes.len() as u64 + 1)) as usize
                };
                apply_write(&mut img, *off, &bytes[..part]);
            }
        }
    }
    img
}

/// An in-memory file system that can crash and fail on demand.
#[derive(Clone, Default)]
pub struct SimVfs {
    files: Arc<Mutex<HashMap<PathBuf, Arc<SimFile>>>>,
    /// The directory entries as of each directory's last `sync_dir`: what a crash leaves.
    /// Files created, removed or renamed since then come back to this state.
    names: Arc<Mutex<HashMap<PathBuf, Arc<SimFile>>>>,
    locks: Arc<Mutex<std::collections::HashSet<PathBuf>>>,
    shared: Arc<SimShared>,
}

struct SimLock {
    path: PathBuf,
    locks: Arc<Mutex<std::collections::HashSet<PathBuf>>>,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        self.locks.lock().remove(&self.path);
    }
}

/// How a simulated crash treats writes that were not synced.
#[derive(Clone, Copy, Debug)]
pub enum CrashMode {
    /// Every unsynced write is lost.
    DropUnsynced,
    /// A prefix of the unsynced writes (chosen by `seed`) reaches the disk, the next one torn at
    /// a random byte: what a power loss during write-back can leave.
    Torn { seed: u64 },
    /// Each unsynced write reaches the disk whole or not at all, independently of the others
    /// (chosen by `seed`): what a write-back that does not go in file order can leave.
    Scattered { seed: u64 },
}

impl SimVfs {
    pub fn new() -> SimVfs {
        let v = SimVfs::default();
        v.shared.fail_after.store(-1, Ordering::Relaxed);
        v
    }

    /// Fail the `n`-th mutating operation from now (0 = the next one) and every one after it.
    pub fn fail_after(&self, n: u64, fault: Fault) {
        *self.shared.fault.lock() = Some(fault);
        self.shared.fail_after.store(n as i64, Ordering::Relaxed);
    }

    /// Make every sync take this long, like a real disk's fdatasync.
    pub fn set_sync_delay(&self, d: std::time::Duration) {
        self.shared
            .sync_delay_us
            .store(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// Stop injecting faults.
    pub fn heal(&self) {
        self.shared.fail_after.store(-1, Ordering::Relaxed);
    }

    /// File syncs (`VFile::sync`, the filler's included) started so far.
    pub fn sync_count(&self) -> u64 {
        self.shared.syncs.load(Ordering::Acquire)
    }

    /// Mutating operations performed so far.
    pub fn op_count(&self) -> u64 {
        self.shared.writes.load(Ordering::Relaxed)
    }

    /// Simulate a crash: every file keeps only what survives under `mode`. Handles opened before
    /// the crash must not be used afterwards (the engine under test is dropped first).
    pub fn crash(&self, mode: CrashMode) {
        let mut next = crash_rng(mode);
        let files = self.files.lock();
        let mut names: Vec<_> = files.keys().cloned().collect();
        names.sort();
        for name in names {
            let f = &files[&name];
            let mut st = f.state.lock();
            st.absorb();
            st.data = survivor(&st, mode, &mut next);
            st.settle();
            // Mappings do not survive a crash: the engine under test is gone.
            st.shadow = None;
        }
        drop(files);
        // Directory entries not made durable by a `sync_dir` are lost (created files vanish,
        // removed ones come back), as on a real file system after a power loss.
        *self.files.lock() = self.names.lock().clone();
        self.locks.lock().clear();
    }

    /// What a crash now would leave (`crash` under `mode`), without crashing: every file under a
    /// name made durable, with its bytes that survive, all taken at one instant, so that the
    /// engine under test may go on writing meanwhile. `SimVfs::from_image` opens it.
    pub fn crash_image(&self, mode: CrashMode) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
        self.crash_image_under(mode, mode, Path::new("/"))
    }

    /// `crash_image` with the files under `under` crashed by `inside`, the others by `mode`
    /// (drawing from one sequence of random numbers, `mode`'s, else `inside`'s): for a
    /// write-back out of file order in some files only.
    pub fn crash_image_under(
        &self,
        mode: CrashMode,
        inside: CrashMode,
        under: &Path,
    ) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
        let mut next = match mode {
            CrashMode::DropUnsynced => crash_rng(inside),
            _ => crash_rng(mode),
        };
        // Held throughout, so that no name changes (`sync_dir` takes both).
        let _files = self.files.lock();
        let names = self.names.lock();
        let mut named: Vec<(&PathBuf, &Arc<SimFile>)> = names.iter().collect();
        named.sort_by(|a, b| a.0.cmp(b.0));
        // Every file locked at once (each once), so that no sync lands between two of them.
        let mut held: Vec<(*const SimFile, parking_lot::MutexGuard<'_, SimFileState>)> = Vec::new();
        for (_, f) in &named {
            let at = Arc::as_ptr(f);
            if !held.iter().any(|h| h.0 == at) {
                let mut st = f.state.lock();
                st.absorb();
                held.push((at, st));
            }
        }
        named
            .iter()
            .map(|(p, f)| {
                let at = Arc::as_ptr(f);
                let st = &held.iter().find(|h| h.0 == at).unwrap().1;
                let m = if p.starts_with(under) { inside } else { mode };
                ((*p).clone(), survivor(st, m, &mut next))
            })
            .collect()
    }

    /// Overwrite bytes of a file directly (to test corruption detection).
    pub fn corrupt(&self, path: &Path, off: u64, bytes: &[u8]) -> bool {
        let files = self.files.lock();
        match files.get(path) {
            Some(f) => {
                let mut st = f.state.lock();
                st.absorb();
                if off as usize + bytes.len() > st.data.len() {
                    return false;
                }
                apply_write(&mut st.data, off, bytes);
                st.mirror(off as usize, bytes.len());
                st.settle();
                true
            }
            None => false,
        }
    }

    /// Cut a file to `len` bytes directly, as if its end had been lost (to test damage).
    pub fn cut(&self, path: &Path, len: u64) -> bool {
        let files = self.files.lock();
        match files.get(path) {
            Some(f) => {
                let mut st = f.state.lock();
                st.absorb();
                let old = st.data.len();
                st.data.truncate(len as usize);
                st.mirror(len as usize, old.saturating_sub(len as usize));
                st.settle();
                true
            }
            None => false,
        }
    }

    /// Delete a file outright (to test recovery without it).
    pub fn remove_file(&self, path: &Path) -> bool {
        self.names.lock().remove(path);
        self.files.lock().remove(path).is_some()
    }

    /// Current length of a file (0 when absent).
    pub fn open_len(&self, path: &Path) -> u64 {
        self.files
            .lock()
            .get(path)
            .map_or(0, |f| f.state.lock().data.len() as u64)
    }

    /// Every file and what a reader sees in it now (a crash first makes that what survived).
    pub fn image(&self) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
        self.files
            .lock()
            .iter()
            .map(|(p, f)| {
                let mut st = f.state.lock();
                st.absorb();
                (p.clone(), st.data.clone())
            })
            .collect()
    }

    /// A file system holding exactly `image`, every byte and name durable.
    pub fn from_image(image: &std::collections::BTreeMap<PathBuf, Vec<u8>>) -> SimVfs {
        let v = SimVfs::new();
        for (p, data) in image {
            let f = Arc::new(SimFile {
                state: Mutex::new(SimFileState {
                    data: data.clone(),
                    durable: data.clone(),
                    pending: Vec::new(),
                    gone: 0,
                    shadow: None,
                    modified: None,
                }),
                fs: v.shared.clone(),
            });
            v.files.lock().insert(p.clone(), f.clone());
            v.names.lock().insert(p.clone(), f);
        }
        v
    }

    /// Paths of every file.
    pub fn paths(&self) -> Vec<PathBuf> {
        let mut v: Vec<_> = self.files.lock().keys().cloned().collect();
        v.sort();
        v
    }
}

impl Vfs for SimVfs {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn VFile>> {
        let mut files = self.files.lock();
        if let Some(f) = files.get(path) {
            return Ok(f.clone());
        }
        if !create {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no such file"));
        }
        self.shared.tick()?;
        let f = Arc::new(SimFile {
            state: Mutex::new(SimFileState::default()),
            fs: self.shared.clone(),
        });
        files.insert(path.to_path_buf(), f.clone());
        Ok(f)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.shared.tick()?;
        self.files
            .lock()
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.shared.tick()?;
        let mut files = self.files.lock();
        let f = files
            .remove(from)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))?;
        files.insert(to.to_path_buf(), f);
        Ok(())
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let files = self.files.lock();
        if files.contains_key(dir) {
            return Err(io::Error::other("not a directory"));
        }
        Ok(files
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect())
    }
    fn create_dir_all(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
    /// Directories are not modelled: every directory exists once a file is in it.
    fn create_dir(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
    fn exists(&self, path: &Path) -> bool {
        let files = self.files.lock();
        files.contains_key(path) || files.keys().any(|p| p.starts_with(path))
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.shared.tick()?;
        let files = self.files.lock();
        let mut names = self.names.lock();
        names.retain(|p, _| p.parent() != Some(dir));
        for (p, f) in files.iter().filter(|(p, _)| p.parent() == Some(dir)) {
            names.insert(p.clone(), f.clone());
        }
        Ok(())
    }
    fn modified(&self, path: &Path) -> io::Result<std::time::SystemTime> {
        let files = self.files.lock();
        let f = files
            .get(path)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))?;
        let m = f.state.lock().modified;
        // A file not written since it was made or imaged counts as new.
        Ok(m.unwrap_or_else(std::time::SystemTime::now))
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn std::any::Any + Send + Sync>> {
        let mut locks = self.locks.lock();
        if !locks.insert(path.to_path_buf()) {
            return Err(io::Error::new(io::ErrorKind::WouldBlock, "locked"));
        }
        Ok(Box::new(SimLock {
            path: path.to_path_buf(),
            locks: self.locks.clone(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sim_crash_drops_unsynced() {
        let fs = SimVfs::new();
        let f = fs.open(Path::new("/d/a"), true).unwrap();
        fs.sync_dir(Path::new("/d")).unwrap();
        f.write_at(b"hello", 0).unwrap();
        f.sync().unwrap();
        f.write_at(b"world", 5).unwrap();
        assert_eq!(f.len().unwrap(), 10);
        drop(f);
        fs.crash(CrashMode::DropUnsynced);
        let f = fs.open(Path::new("/d/a"), false).unwrap();
        assert_eq!(f.len().unwrap(), 5);
    }

    /// A sync makes durable what was written before it started, not what is written while it
    /// sleeps (the sync delay).
    #[test]
    fn sim_sync_covers_writes_before_it_only() {
        let fs = SimVfs::new();
        fs.set_sync_delay(std::time::Duration::from_millis(20));
        let f = fs.open(Path::new("/d/a"), true).unwrap();
        fs.sync_dir(Path::new("/d")).unwrap();
        f.write_at(b"hello", 0).unwrap();
        let g = f.clone();
        let t = std::thread::spawn(move || g.sync().unwrap());
        while fs.sync_count() == 0 {
            std::thread::yield_now();
        }
        f.write_at(b"world", 5).unwrap();
        t.join().unwrap();
        assert_eq!(fs.sync_count(), 1);
        drop(f);
        fs.crash(CrashMode::DropUnsynced);
        let f = fs.open(Path::new("/d/a"), false).unwrap();
        assert_eq!(f.len().unwrap(), 5);
        f.sync().unwrap();
    }

    #[test]
    fn sim_crash_forgets_names_not_synced() {
        let fs = SimVfs::new();
        let d = Path::new("/d");
        let a = fs.open(&d.join("a"), true).unwrap();
        a.write_at(b"a", 0).unwrap();
        a.sync().unwrap();
        fs.sync_dir(d).unwrap();
        let b = fs.open(&d.join("b"), true).unwrap();
        b.write_at(b"b", 0).unwrap();
        b.sync().unwrap();
        fs.rename(&d.join("a"), &d.join("c")).unwrap();
        fs.crash(CrashMode::DropUnsynced);
        // `b` was synced but its name was not; the rename was not either.
        assert_eq!(fs.list(d).unwrap(), vec!["a".to_string()]);
        let b = fs.open(&d.join("b"), true).unwrap();
        b.write_at(b"b", 0).unwrap();
        fs.sync_dir(d).unwrap();
        fs.remove(&d.join("a")).unwrap();
        fs.crash(CrashMode::DropUnsynced);
        let mut names = fs.list(d).unwrap();
        names.sort();
        assert_eq!(names, vec!["a".to_string(), "b".to_string()]);
        // The data of `b` was never synced: only its name survived.
        assert_eq!(fs.open(&d.join("b"), false).unwrap().len().unwrap(), 0);
    }

    /// What is copied into a writable mapping is read back at once, survives a crash once
    /// synced, and before that is lost, kept or torn like any unsynced write.
    #[test]
    fn sim_mapped_writes_are_pending_until_synced() {
        let fs = SimVfs::new();
        let d = Path::new("/d");
        let a = d.join("a");
        let f = fs.open(&a, true).unwrap();
        f.set_len(3 * 4096).unwrap();
        f.sync().unwrap();
        fs.sync_dir(d).unwrap();
        let m = f.map_mut(3 * 4096).unwrap().unwrap();
        let put = |off: usize, b: &[u8]| {
            assert!(off + b.len() <= m.len());
            // SAFETY: within the mapping, one writer.
            unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), m.as_mut_ptr().add(off), b.len()) }
        };
        put(0, b"synced");
        f.sync().unwrap();
        put(4096, &[b'L'; 4096]);
        let mut buf = [0u8; 5];
        f.read_at(&mut buf, 4096).unwrap();
        assert_eq!(&buf, b"LLLLL");
        let img = fs.crash_image(CrashMode::DropUnsynced);
        assert_eq!(&img[&a][..6], b"synced");
        assert_eq!(&img[&a][4096..4101], &[0u8; 5]);
        // Torn: the page written back whole or cut at some byte (zeros after the cut).
        let mut cuts = std::collections::BTreeSet::new();
        for i in 1..64u64 {
            let seed = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let img = fs.crash_image(CrashMode::Torn { seed });
            let page = &img[&a][4096..8192];
            let cut = page.iter().position(|&b| b == 0).unwrap_or(4096);
            assert!(page[cut..].iter().all(|&b| b == 0));
            assert!(page[..cut].iter().all(|&b| b == b'L'));
            cuts.insert(cut);
        }
        assert!(cuts.len() > 1, "never torn: {cuts:?}");
        // A write through the file shows in the mapping (one page cache).
        f.write_at(b"W", 4096).unwrap();
        // SAFETY: within the mapping.
        assert_eq!(unsafe { *m.as_mut_ptr().add(4096) }, b'W');
        f.sync().unwrap();
        drop(m);
        drop(f);
        fs.crash(CrashMode::DropUnsynced);
        let f = fs.open(&a, false).unwrap();
        f.read_at(&mut buf, 4096).unwrap();
        assert_eq!(&buf, b"WLLLL");
    }

    /// A scattered crash keeps each unsynced write whole or drops it, independently of order.
    #[test]
    fn sim_scattered_crash_keeps_writes_out_of_order() {
        let fs = SimVfs::new();
        let a = Path::new("/d/a");
        let f = fs.open(a, true).unwrap();
        fs.sync_dir(Path::new("/d")).unwrap();
        for i in 0..8u8 {
            f.write_at(&[i + 1; 4], u64::from(i) * 4).unwrap();
        }
        let mut out_of_order = false;
        for i in 1..32u64 {
            let img = fs.crash_image(CrashMode::Scattered {
                seed: i.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            });
            let kept: Vec<bool> = (0..8)
                .map(|w| {
                    let b = img[a].get(w * 4..w * 4 + 4);
                    assert!(b.is_none_or(|b| b == [0; 4] || b == [w as u8 + 1; 4]));
                    b.is_some_and(|b| b[0] != 0)
                })
                .collect();
            out_of_order |= kept.windows(2).any(|p| !p[0] && p[1]);
        }
        assert!(out_of_order);
    }

    #[test]
    fn sim_faults_fire() {
        let fs = SimVfs::new();
        let f = fs.open(Path::new("/d/a"), true).unwrap();
        fs.fail_after(1, Fault::NoSpace);
        f.write_at(b"x", 0).unwrap();
        let e = f.write_at(b"y", 1).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        fs.heal();
        f.write_at(b"y", 1).unwrap();
    }

    #[test]
    fn os_lock_is_exclusive() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("LOCK");
        let g = OsVfs.lock(&p).unwrap();
        assert!(OsVfs.lock(&p).is_err());
        drop(g);
        assert!(OsVfs.lock(&p).is_ok());
    }
}
