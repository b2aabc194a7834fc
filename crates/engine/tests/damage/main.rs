//! The damage model of the on-disk kinds on the shared log, the hash (`.kh`) and the
//! fixed-length database (`.kf`): seeded trials that write a random workload (puts,
//! deletes, appends, batches, several lanes, compactions, checkpoints), close or crash, then
//! damage the files — flip 1–32 bytes, zero a 4 KiB-aligned page, or cut a segment short —
//! in segments only, the checkpoint only, or both, and hold the engine to what the damage
//! allows:
//!
//! - nothing panics;
//! - `check` reports damage whenever a byte of live data was damaged (the newest record of a
//!   key), and is healthy when no record was;
//! - a writable open either refuses with `Corrupt`, changing no byte, or serves every record
//!   whose bytes are untouched at its newest version (a record whose bytes were damaged behind
//!   a checkpoint reads as `Corrupt`, never as a wrong value, and so does one whose newest
//!   record is dropped with a torn tail when what it falls back to was damaged);
//! - `repair` yields a database that passes `check` and holds every record whose bytes were
//!   untouched, at its newest surviving version, with nothing resurrected past a surviving
//!   delete; its source is not changed.
//!
//! The expectations come from an oracle that reads the undamaged files itself: every record
//! that verifies, split into *units* (a record; a batch frame's header and each of its inner
//! records), each with the byte range damage is counted against.
//!
//! The fixed-length database runs the same trials with record ids for keys (its log records
//! carry the id as an 8-byte big-endian key), one lane, and its slot file (`data.kfd`) in the
//! place of the checkpoint: the oracle reads its header and pages (each page a unit: damage
//! anywhere in it touches every record it holds), after its double-write file as recovery
//! applies it; a slot's record counts as written at the header's seq.
//!
//! One case is undecidable from the files, and the oracle allows both outcomes: when every
//! unit from some point to the end of a segment is damaged, and no checkpoint knew those bytes
//! durable, the damage looks exactly like a write cut short by a crash (`Zone` below).

use kura_engine::fixed::FixedDb;
use kura_engine::hash::{format, DiskHash};
use kura_engine::io::{CrashMode, OsVfs, SimVfs, Vfs};
use kura_engine::TokyoOps;
use kura_engine::{compress, Error, OpenMode, Params, RepairReport, Store};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod oracle;
use oracle::*;

type Image = BTreeMap<PathBuf, Vec<u8>>;

/// The kind a trial runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Hash,
    Fixed,
}

/// The fixed-length database's width in the trials (values are cut to it): the slot file is
/// an array as long as its largest id, held whole in memory by `SimVfs`.
const KF_WIDTH: usize = 2000;
/// The slot file and its double-write file.
const KF_DATA: &str = "data.kfd";
const KF_DW: &str = "dw.kfd";
const KF_PAGE: usize = 4096;
const KF_HEAD_LEN: u64 = 2 * KF_PAGE as u64;

impl Kind {
    /// The database's directory on the simulated file system.
    fn dir(self) -> &'static str {
        match self {
            Kind::Hash => "/sim/d.kh",
            Kind::Fixed => "/sim/d.kf",
        }
    }
    fn suffix(self) -> &'static str {
        match self {
            Kind::Hash => "kh",
            Kind::Fixed => "kf",
        }
    }
    /// The checkpoint's file name, and where its salt and its lane count lie.
    fn ckpt(self) -> (&'static str, usize, usize) {
        match self {
            Kind::Hash => ("index.ki", 16, 24),
            Kind::Fixed => (KF_DATA, 12, 76),
        }
    }
    /// The key of the workload's key `n`, written by thread `t` (a batch's `i`-th key made
    /// from it with `i`): `k{n}.{t}` and `k{n}.{t}/{i}`, or ids on a fixed-length database.
    fn key(self, n: u64, t: usize, i: Option<u64>) -> Vec<u8> {
        match (self, i) {
            (Kind::Hash, None) => format!("k{n}.{t}").into_bytes(),
            (Kind::Hash, Some(i)) => format!("k{n}.{t}/{i}").into_bytes(),
            (Kind::Fixed, i) => ((n * 3 + t as u64) * 8 + i.map_or(0, |i| i + 1) + 1)
                .to_string()
                .into_bytes(),
        }
    }
    /// A record's key as the store shows it (an id's 8 big-endian bytes in decimal).
    fn shown_key(self, raw: &[u8]) -> Vec<u8> {
        match self {
            Kind::Hash => raw.to_vec(),
            Kind::Fixed => match <[u8; 8]>::try_from(raw) {
                Ok(b) => u64::from_be_bytes(b).to_string().into_bytes(),
                Err(_) => raw.to_vec(),
            },
        }
    }
    /// Open the database at `dir`.
    fn open(
        self,
        dir: &Path,
        params: &str,
        vfs: Arc<dyn Vfs>,
        mode: OpenMode,
    ) -> kura_engine::Result<Db> {
        let p = Params::parse(params).unwrap();
        match self {
            Kind::Hash => {
                DiskHash::open_with(dir, &p, vfs, mode == OpenMode::ReadOnly).map(Db::Hash)
            }
            Kind::Fixed => FixedDb::open_mode(dir, &p, vfs, mode).map(Db::Fixed),
        }
    }
    fn repair(
        self,
        src: &Path,
        dst: &Path,
        vfs: Arc<dyn Vfs>,
    ) -> kura_engine::Result<RepairReport> {
        match self {
            Kind::Hash => DiskHash::repair_with(src, dst, &Params::default(), vfs),
            Kind::Fixed => FixedDb::repair_with(src, dst, &Params::default(), vfs),
        }
    }
}

/// An open database of either kind.
enum Db {
    Hash(DiskHash),
    Fixed(FixedDb),
}

impl std::ops::Deref for Db {
    type Target = dyn Store;
    fn deref(&self) -> &(dyn Store + 'static) {
        match self {
            Db::Hash(d) => d,
            Db::Fixed(d) => d,
        }
    }
}

impl Db {
    /// Stop as a killed process would (no flush, no sync).
    fn abandon(self) {
        match self {
            Db::Hash(d) => d.abandon(),
            Db::Fixed(d) => d.abandon(),
        }
    }
}

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

// ------------------------------------------------------------------------------ the workload

/// What a trial wrote: its final image and, when every write was acknowledged durable
/// (`sync=always`), the state it must recover to.
struct Written {
    image: Image,
    model: Option<BTreeMap<Vec<u8>, Vec<u8>>>,
}

fn value(r: &mut Rng) -> Vec<u8> {
    let n = match r.below(10) {
        0 => r.below(9000) as usize,
        1..=2 => 0,
        _ => r.below(400) as usize,
    };
    // Half compressible, half not.
    if r.below(2) == 0 {
        vec![b'a' + r.below(26) as u8; n]
    } else {
        (0..n).map(|_| r.next() as u8).collect()
    }
}

fn open_sim(kind: Kind, fs: &SimVfs, params: &str) -> kura_engine::Result<Db> {
    kind.open(
        Path::new(kind.dir()),
        params,
        Arc::new(fs.clone()),
        OpenMode::Create,
    )
}

fn workload(seed: u64, kind: Kind) -> Written {
    let mut r = Rng::new(seed);
    let always = r.below(2) == 0;
    let sync = if always { "always" } else { "none" };
    let params = match kind {
        Kind::Hash => format!(
            "sync={sync}#segsiz=64k#bufsiz=4k#lanes={}{}",
            1 + r.below(4),
            if r.below(4) == 0 { "#compress=lz4" } else { "" },
        ),
        Kind::Fixed => format!("sync={sync}#segsiz=64k#bufsiz=4k#width={KF_WIDTH}#limsiz=16g"),
    };
    let fs = SimVfs::new();
    let mut db = open_sim(kind, &fs, &params).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let nkeys = 20 + r.below(150);
    let rounds = 2 + r.below(6);
    for _ in 0..rounds {
        // Each round from threads of its own: with `sync=none` each writes its own lane.
        let mut ops = Vec::new();
        for _ in 0..30 + r.below(120) {
            let mut v = value(&mut r);
            if kind == Kind::Fixed {
                v.truncate(KF_WIDTH);
            }
            ops.push((r.below(100), r.below(nkeys), v));
        }
        let threads = 1 + r.below(3) as usize;
        let chunk = ops.len().div_ceil(threads);
        std::thread::scope(|s| {
            let db = &db;
            // Each thread writes keys of its own (made with its number), so the model can
            // apply the threads' results one after the other.
            let handles: Vec<_> = ops
                .chunks(chunk)
                .enumerate()
                .map(|(t, part)| {
                    s.spawn(move || {
                        let mut done = Vec::new();
                        for (op, n, v) in part {
                            done.extend(apply(db, kind, *op, (*n, t), v));
                        }
                        done
                    })
                })
                .collect();
            for h in handles {
                for (k, v) in h.join().unwrap() {
                    match v {
                        Some(v) => model.insert(k, v),
                        None => model.remove(&k),
                    };
                }
            }
        });
        match r.below(6) {
            0 => db.optimize("").unwrap(),
            1 => {
                db.close().unwrap();
                db = open_sim(kind, &fs, &params).unwrap();
            }
            _ => {}
        }
    }
    let crash = always && r.below(3) != 0;
    if crash {
        db.abandon();
        if r.below(2) == 0 {
            fs.crash(CrashMode::Torn { seed });
        } else {
            fs.crash(CrashMode::DropUnsynced);
        }
    } else {
        db.close().unwrap();
    }
    // Every acknowledged write of a `sync=always` database is durable.
    Written {
        // Without the lock file: it holds the pid of whoever opened the database last.
        image: fs
            .image()
            .into_iter()
            .filter(|(p, _)| !p.ends_with("LOCK"))
            .collect(),
        model: always.then_some(model),
    }
}

/// Apply one operation to the key `n` of thread `t` (a batch also to keys made from it); each
/// key written and the value it must have now (checked against the store).
fn apply(
    db: &Db,
    kind: Kind,
    op: u64,
    (n, t): (u64, usize),
    v: &[u8],
) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let key = &kind.key(n, t, None)[..];
    let mut done = Vec::new();
    // A concatenation past a fixed-length database's width is a put instead.
    let too_long = || {
        let before = db.get(key).unwrap().map_or(0, |r| r.value.len());
        before + v.len() > KF_WIDTH
    };
    let op = if kind == Kind::Fixed && (60..=74).contains(&op) && too_long() {
        0
    } else {
        op
    };
    match op {
        0..=44 => {
            db.put(key, v).unwrap();
            done.push((key.to_vec(), Some(v.to_vec())));
        }
        45..=59 => {
            db.out(key).unwrap();
            done.push((key.to_vec(), None));
        }
        60..=74 => {
            let before = db.get(key).unwrap().map(|r| r.value);
            db.putcat(key, v).unwrap();
            done.push((
                key.to_vec(),
                Some([before.unwrap_or_default(), v.to_vec()].concat()),
            ));
        }
        _ => {
            // A batch of puts and deletes of keys made from this one.
            let mut ops = Vec::new();
            for i in 0..1 + op % 7 {
                let k = kind.key(n, t, Some(i));
                if i % 3 == 2 {
                    ops.push(kura_engine::BatchOp::Remove { key: k.clone() });
                    done.push((k, None));
                } else {
                    ops.push(kura_engine::BatchOp::Put {
                        key: k.clone(),
                        value: v.to_vec(),
                        flags: 0,
                        expires: 0,
                    });
                    done.push((k, Some(v.to_vec())));
                }
            }
            db.write_batch(&ops).unwrap();
        }
    }
    for (k, want) in &done {
        assert_eq!(&db.get(k).unwrap().map(|r| r.value), want);
    }
    done
}

// ------------------------------------------------------------------------------ a trial

/// Where the trial's files are opened: in memory, or on real files.
enum Place {
    Sim(SimVfs),
    Real(tempfile::TempDir),
}

struct Disk {
    place: Place,
    kind: Kind,
}

impl Disk {
    fn new(real: bool, img: &Image, kind: Kind) -> Disk {
        if !real {
            return Disk {
                place: Place::Sim(SimVfs::from_image(img)),
                kind,
            };
        }
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join(format!("d.{}", kind.suffix()));
        std::fs::create_dir(&dir).unwrap();
        for (p, data) in img {
            std::fs::write(dir.join(p.file_name().unwrap()), data).unwrap();
        }
        Disk {
            place: Place::Real(t),
            kind,
        }
    }
    fn vfs(&self) -> Arc<dyn Vfs> {
        match &self.place {
            Place::Sim(fs) => Arc::new(fs.clone()),
            Place::Real(_) => Arc::new(OsVfs),
        }
    }
    fn dir(&self) -> PathBuf {
        match &self.place {
            Place::Sim(_) => PathBuf::from(self.kind.dir()),
            Place::Real(t) => t.path().join(format!("d.{}", self.kind.suffix())),
        }
    }
    fn repaired(&self) -> PathBuf {
        self.dir()
            .with_file_name(format!("r.{}", self.kind.suffix()))
    }
    /// The database's files, as the image names them (the lock file left out).
    fn files(&self) -> Image {
        let sim = self.kind.dir();
        match &self.place {
            Place::Sim(fs) => fs
                .image()
                .into_iter()
                .filter(|(p, _)| p.starts_with(sim) && !p.ends_with("LOCK"))
                .collect(),
            Place::Real(_) => std::fs::read_dir(self.dir())
                .unwrap()
                .map(|e| e.unwrap())
                .filter(|e| e.file_name() != "LOCK")
                .map(|e| {
                    (
                        Path::new(sim).join(e.file_name()),
                        std::fs::read(e.path()).unwrap(),
                    )
                })
                .collect(),
        }
    }
    fn open(&self, readonly: bool) -> kura_engine::Result<Db> {
        let mode = if readonly {
            OpenMode::ReadOnly
        } else {
            OpenMode::Existing
        };
        self.kind.open(&self.dir(), "sync=none", self.vfs(), mode)
    }
}

/// Where two images differ (file names and lengths; empty when they are the same).
fn differ(a: &Image, b: &Image) -> String {
    let mut out = Vec::new();
    for p in a.keys().chain(b.keys()).collect::<BTreeSet<_>>() {
        match (a.get(p), b.get(p)) {
            (Some(x), Some(y)) if x == y => {}
            (x, y) => out.push(format!(
                "{}: {:?} vs {:?} bytes",
                p.display(),
                x.map(Vec::len),
                y.map(Vec::len)
            )),
        }
    }
    out.join(", ")
}

/// The keys whose values differ between two states (empty when none).
fn keys_differ(a: &BTreeMap<Vec<u8>, Vec<u8>>, b: &BTreeMap<Vec<u8>, Vec<u8>>) -> String {
    let keys: BTreeSet<&Vec<u8>> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| {
            format!(
                "{}: {:?} vs {:?} bytes",
                String::from_utf8_lossy(k),
                a.get(k).map(Vec::len),
                b.get(k).map(Vec::len)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The keys of `got` that do not hold one of their newest versions in `v` (empty when none).
fn keys_not_allowed(got: &BTreeMap<Vec<u8>, Vec<u8>>, v: &Versions) -> String {
    let keys: BTreeSet<&Vec<u8>> = got.keys().chain(v.keys()).collect();
    keys.into_iter()
        .filter(|k| !allows(v, k, got.get(*k)))
        .map(|k| {
            format!(
                "{}: {:?} vs {:?} bytes",
                String::from_utf8_lossy(k),
                got.get(k).map(Vec::len),
                lens(v, k)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn dump(db: &dyn Store) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut c = db.cursor().unwrap();
    let mut out = BTreeMap::new();
    while let Some((k, r)) = c.next().unwrap() {
        out.insert(k, r.value);
    }
    out
}

fn trial(seed: u64, real: bool, kind: Kind) {
    let w = workload(seed, kind);
    let ctx = format!(
        "{kind:?} seed {seed} ({})",
        if real { "real files" } else { "SimVfs" }
    );
    let mut r = Rng::new(seed ^ 0xdead_beef);
    let target = match r.below(3) {
        0 => Target::Segments,
        1 => Target::Checkpoint,
        _ => Target::Both,
    };
    let mut img = w.image.clone();
    let (hurt, what) = damage(&mut img, &mut r, target, kind);
    judge(&ctx, real, kind, &w, img, &hurt, &what);
}

/// Hold the engine to what the damage allows: `w` was written, `img` is its image damaged as
/// `hurt` says (`what`, for messages).
fn judge(ctx: &str, real: bool, kind: Kind, w: &Written, img: Image, hurt: &Hurt, what: &str) {
    let lay = layout(&w.image, kind);
    let all = newest(&lay.units, |_, _| true);

    // The undamaged files: the oracle and the engine agree, and with the model.
    {
        let disk = Disk::new(real, &w.image, kind);
        let db = disk
            .open(false)
            .unwrap_or_else(|e| panic!("{ctx}: undamaged: {e}"));
        let got = dump(&*db);
        assert_eq!(
            keys_not_allowed(&got, &all),
            "",
            "{ctx}: the oracle disagrees with the undamaged database"
        );
        if let Some(m) = &w.model {
            assert_eq!(
                keys_differ(&got, m),
                "",
                "{ctx}: an acknowledged write was lost"
            );
        }
        let rep = db.check().unwrap();
        assert!(rep.healthy(), "{ctx}: undamaged: {rep:?}");
    }

    let ctx = format!("{ctx}, {what}");
    let knows = Knows::read(&img, lay.salt, kind);

    // What the damage did to the units.
    let hit: Vec<bool> = lay
        .units
        .iter()
        .map(|u| touched(hurt, &u.file, u.off, u.off + u.len))
        .collect();
    // (A segment of format 4 cut inside its synced-length slots is shorter than its header.)
    let header_hit: BTreeSet<&PathBuf> = lay
        .segs
        .keys()
        .filter(|p| {
            touched(hurt, p, 0, format::SEG_HEADER_LEN as u64)
                || img_len(&img, p) < format::seg_layout(&w.image[*p]).data
        })
        .collect();
    // What the damaged header of each segment records as synced.
    let synced = |p: &PathBuf| {
        img.get(p)
            .filter(|_| !header_hit.contains(p))
            .and_then(|d| format::seg_layout(d).synced)
    };
    // A segment whose header is damaged is read with the salt of the others (or the
    // checkpoint's: a fixed-length database's slot file names it in its header from its
    // creation on, before any checkpoint); with neither, nothing of it can be verified.
    let salt_known = lay.segs.keys().any(|p| !header_hit.contains(p))
        || knows.any()
        || (kind == Kind::Fixed && kf_salt(&img) == lay.salt);
    // Both copies of a slot file's header damaged: its pages are read with the segments' salt
    // (with none, nothing of them verifies).
    let kf_data = Path::new(kind.dir()).join(KF_DATA);
    let data_head_hit = kind == Kind::Fixed
        && touched(hurt, &kf_data, 0, KF_PAGE as u64)
        && touched(hurt, &kf_data, KF_PAGE as u64, KF_HEAD_LEN);
    let seg_salt_known = lay.segs.keys().any(|p| !header_hit.contains(p));
    let lost = |u: &Unit, i: usize| {
        hit[i]
            || (!salt_known && header_hit.contains(&u.file))
            || (data_head_hit && !seg_salt_known && u.file == kf_data)
    };
    // Per segment, the zone that may pass for a torn tail: from the top-level record of the
    // first damaged unit after which every unit is damaged — unless a checkpoint knew it
    // durable, or the segment's header records it as synced (not for a segment whose header is
    // damaged: its lane is unknown); and from the first damaged unit past the synced length,
    // whatever follows (a hole a write-back out of file order left). A lane's log ends there:
    // its later segments (from the replay position on) may go with it, unless one of them
    // records records of its own as synced.
    let mut zone = vec![false; lay.units.len()];
    let mut ends: BTreeSet<(u16, u32)> = BTreeSet::new();
    for (file, &(id, lane)) in &lay.segs {
        let idx: Vec<usize> = (0..lay.units.len())
            .filter(|&i| &lay.units[i].file == file)
            .collect();
        let first = idx.iter().rposition(|&i| !hit[i]).map_or(0, |p| p + 1);
        let mut from = None;
        if first < idx.len() {
            let q = &lay.units[idx[first]];
            let d = knows.bound(id, lane).max(synced(file));
            let known = !header_hit.contains(file)
                && d.is_some_and(|d| q.off < d || img_len(&img, file) < d);
            if !known {
                from = Some(q.top);
            }
        }
        if let Some(s) = synced(file) {
            if let Some(&i) = idx.iter().find(|&&i| hit[i] && lay.units[i].top >= s) {
                let top = lay.units[i].top;
                from = Some(from.map_or(top, |f: u64| f.min(top)));
            }
        }
        if let Some(top) = from {
            for &i in &idx {
                zone[i] = lay.units[i].off >= top;
            }
            let scanned = knows.replay.get(lane as usize).is_none_or(|r| id >= r.0);
            if !header_hit.contains(file) && scanned {
                ends.insert((lane, id));
            }
        }
    }
    for &(lane, id) in &ends {
        let later: Vec<&PathBuf> = lay
            .segs
            .iter()
            .filter(|(_, &(i, l))| l == lane && i > id)
            .map(|(p, _)| p)
            .collect();
        let synced_later = later
            .iter()
            .any(|p| synced(p).is_some_and(|s| s > format::seg_layout(&w.image[*p]).data));
        if !synced_later {
            for (i, u) in lay.units.iter().enumerate() {
                if later.contains(&&u.file) {
                    zone[i] = true;
                }
            }
        }
    }
    let surv_all = newest(&lay.units, |i, u| !lost(u, i));
    let surv_nozone = newest(&lay.units, |i, u| !lost(u, i) && !zone[i]);
    let newest_of = newest_units(&lay.units, |_| true);
    // What a read falls back to when a key's newest record is taken for a torn tail.
    let newest_outside_zone = newest_units(&lay.units, |i| !zone[i]);
    // A segment whose header is damaged is damage if anything of it survives or a checkpoint
    // listed it with records; else it looks like a segment being created at a crash.
    let data_start = |p: &PathBuf| format::seg_layout(&w.image[p]).data as usize;
    let header_damage = header_hit.iter().any(|p| {
        let (id, _) = lay.segs[*p];
        lay.units
            .iter()
            .enumerate()
            .any(|(i, u)| &u.file == *p && !hit[i])
            || img[*p].iter().skip(data_start(p)).any(|&b| b != 0)
            || (img_len(&img, p) < data_start(p) as u64
                && format::read_slots(&img[*p], format::SEG_SLOTS)
                    .is_some_and(|(s, _)| s > data_start(p) as u64))
            || knows
                .lens
                .get(&id)
                .is_some_and(|&l| l > format::SEG_HEADER_LEN as u64)
    });
    let any_unit_hit = hit.iter().any(|&h| h) || !header_hit.is_empty() || data_head_hit;
    let live_hit_outside_zone =
        newest_of.values().any(|&i| hit[i] && !zone[i]) || header_damage || data_head_hit;

    let disk = Disk::new(real, &img, kind);

    // check, read-only.
    match disk.open(true) {
        Ok(db) => {
            let rep = db.check().unwrap_or_else(|e| panic!("{ctx}: check: {e}"));
            if live_hit_outside_zone {
                assert!(
                    !rep.healthy(),
                    "{ctx}: live data damaged, check healthy: {rep:?}"
                );
            }
            if !any_unit_hit {
                assert!(
                    rep.healthy(),
                    "{ctx}: no record damaged, check unhealthy: {rep:?}"
                );
            }
        }
        Err(e) => panic!("{ctx}: a read-only open failed: {e}"),
    }
    assert_eq!(
        differ(&disk.files(), &img),
        "",
        "{ctx}: a read-only open changed the files"
    );

    // repair, then a writable open of the damaged files.
    let rep = kind
        .repair(&disk.dir(), &disk.repaired(), disk.vfs())
        .unwrap_or_else(|e| panic!("{ctx}: repair: {e}"));
    assert_eq!(
        differ(&disk.files(), &img),
        "",
        "{ctx}: repair changed its source"
    );
    {
        let fixed = kind
            .open(&disk.repaired(), "", disk.vfs(), OpenMode::ReadOnly)
            .unwrap();
        let c = fixed.check().unwrap();
        assert!(c.healthy(), "{ctx}: the repaired database: {c:?}");
        let got = dump(&*fixed);
        let keys: BTreeSet<&Vec<u8>> = surv_all
            .keys()
            .chain(surv_nozone.keys())
            .chain(got.keys())
            .collect();
        for k in keys {
            let g = got.get(k);
            assert!(
                allows(&surv_all, k, g) || allows(&surv_nozone, k, g),
                "{ctx}: repaired key {:?}: {:?}, expected one of {:?} or of {:?} (kept {}, lost {})",
                String::from_utf8_lossy(k),
                g.map(|v| v.len()),
                lens(&surv_all, k),
                lens(&surv_nozone, k),
                rep.kept,
                rep.lost,
            );
        }
        assert_eq!(rep.kept, got.len() as u64, "{ctx}");
    }

    match disk.open(false) {
        Err(Error::Corrupt(m)) => {
            assert!(any_unit_hit, "{ctx}: refused without damage: {m}");
            assert!(m.contains("kura db repair"), "{ctx}: {m}");
            assert_eq!(
                differ(&disk.files(), &img),
                "",
                "{ctx}: a refused open changed the files"
            );
        }
        Err(e) => panic!("{ctx}: a writable open failed otherwise: {e}"),
        Ok(db) => {
            for (k, &i) in &newest_of {
                let got = db.get(k);
                let u = &lay.units[i];
                let is_delete = matches!(&u.rec, Some((_, _, None)));
                match got {
                    Ok(v) => {
                        let v = v.map(|r| r.value);
                        let ok = if !hit[i] && !zone[i] {
                            allows(&all, k, v.as_ref())
                        } else {
                            allows(&surv_all, k, v.as_ref())
                                || allows(&surv_nozone, k, v.as_ref())
                                || (is_delete && v.is_none())
                        };
                        assert!(
                            ok,
                            "{ctx}: key {:?} reads {:?} after a writable open",
                            String::from_utf8_lossy(k),
                            v.map(|v| v.len())
                        );
                    }
                    // A damaged record reads as `Corrupt`: the newest, or what the read
                    // falls back to when the newest may pass for a torn tail and is dropped
                    // as one: the version before it, or on a fixed-length database the id's
                    // page (a page cut off behind a batch cut short).
                    Err(Error::Corrupt(_))
                        if hit[i]
                            || (zone[i]
                                && match newest_outside_zone.get(k) {
                                    Some(&j) => hit[j],
                                    None => kind == Kind::Fixed && kf_page_hit(hurt, k),
                                }) => {}
                    Err(Error::Corrupt(m)) => {
                        assert!(hit[i], "{ctx}: key {:?}: an intact record read as corrupt ({m}); its newest at {:?} {}", String::from_utf8_lossy(k), u.file, u.off)
                    }
                    Err(e) => panic!("{ctx}: get: {e}"),
                }
            }
        }
    }
}

/// Whether the damage touched the page of the slot file that holds id `key` (in decimal).
fn kf_page_hit(hurt: &Hurt, key: &[u8]) -> bool {
    let Some(id) = std::str::from_utf8(key)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        return false;
    };
    let slot = 1 + 2 + KF_WIDTH;
    let per_page = ((KF_PAGE - 4) / slot) as u64;
    let off = KF_HEAD_LEN + (id - 1) / per_page * KF_PAGE as u64;
    touched(
        hurt,
        &Path::new(Kind::Fixed.dir()).join(KF_DATA),
        off,
        off + KF_PAGE as u64,
    )
}

fn img_len(img: &Image, file: &Path) -> u64 {
    img.get(file).map_or(0, |d| d.len() as u64)
}

/// Seeds `from..to`; `KURA_DAMAGE_SEED=N` runs seed N alone (with `--exact` on one test).
fn trials(from: u64, to: u64, real: bool) {
    trials_of(Kind::Hash, from, to, real);
}

fn trials_of(kind: Kind, from: u64, to: u64, real: bool) {
    if let Some(n) = std::env::var("KURA_DAMAGE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return trial(n, real, kind);
    }
    for seed in from..to {
        trial(seed, real, kind);
    }
}

#[test]
fn damage_model_sim_0() {
    trials(0, 250, false);
}

#[test]
fn damage_model_sim_1() {
    trials(250, 500, false);
}

#[test]
fn damage_model_sim_2() {
    trials(500, 750, false);
}

#[test]
fn damage_model_sim_3() {
    trials(750, 1000, false);
}

#[test]
fn damage_model_real_files() {
    trials(10_000, 10_100, true);
}

#[test]
fn damage_model_kf_sim_0() {
    trials_of(Kind::Fixed, 0, 200, false);
}

#[test]
fn damage_model_kf_sim_1() {
    trials_of(Kind::Fixed, 200, 400, false);
}

#[test]
fn damage_model_kf_real_files() {
    trials_of(Kind::Fixed, 10_000, 10_060, true);
}

/// Two records of a key with one seq (see `newest`), made on purpose: a put of a key from a
/// fresh thread, then another from a fresh thread on the other lane, whose clock and shard
/// seq are behind the key's bucket: it is written with the seq the first put took, finds
/// that seq in the bucket, and is written again with the next one, its first copy dead. The
/// later copy is then damaged: the first put and the dead copy are equally newest, and
/// repair keeps whichever its replay meets first (lane 0's segments before lane 1's), where
/// the oracle expected the one first in file order: what seed 781 of `damage_model_sim_3`
/// failed on now and then (a round's fresh threads start behind the buckets the last round's
/// threads left). Both lane orders.
#[test]
fn damage_tied_seqs() {
    use kura_engine::counter::thread_number;
    let key = b"k1.0";
    let (old, new) = (vec![b'a'; 10], vec![b'b'; 20]);
    for first_lane in [1, 0] {
        // A background tick that takes the key's shard between the two puts folds the first
        // put's seq into the shard's, and the second put is then not behind: try again.
        let mut tied = None;
        for _ in 0..20 {
            let fs = SimVfs::new();
            let params = "sync=none#segsiz=64k#bufsiz=4k#lanes=2";
            let db = open_sim(Kind::Hash, &fs, params).unwrap();
            // Put `v` from a fresh thread (its clock at zero) on lane `lane`.
            let put_on = |lane: usize, v: &[u8]| loop {
                let done = std::thread::scope(|s| {
                    s.spawn(|| {
                        let mine = thread_number() % 2 == lane;
                        if mine {
                            db.put(key, v).unwrap();
                        }
                        mine
                    })
                    .join()
                    .unwrap()
                });
                if done {
                    break;
                }
            };
            put_on(first_lane, &old);
            put_on(1 - first_lane, &new);
            db.close().unwrap();
            let image: Image = fs
                .image()
                .into_iter()
                .filter(|(p, _)| !p.ends_with("LOCK"))
                .collect();
            let lay = layout(&image, Kind::Hash);
            let mut recs: Vec<(u64, Option<Vec<u8>>)> = lay
                .units
                .iter()
                .filter_map(|u| u.rec.as_ref().map(|r| (r.1, r.2.clone())))
                .collect();
            recs.sort();
            // The first put and the dead copy with one seq, the copy that superseded it.
            if let [(s0, v0), (s1, v1), (s2, v2)] = &recs[..] {
                assert_eq!(
                    (v0, v1, v2),
                    (&Some(old.clone()), &Some(new.clone()), &Some(new.clone()))
                );
                assert!(s0 <= s1 && s1 < s2);
            }
            if recs.len() == 3 && recs[0].0 == recs[1].0 {
                tied = Some((image, lay));
                break;
            }
        }
        let (image, lay) = tied.expect("the second put never took the first one's seq");
        let newest = lay
            .units
            .iter()
            .filter(|u| u.rec.is_some())
            .max_by_key(|u| u.rec.as_ref().unwrap().1)
            .unwrap();
        assert_eq!(newest.rec.as_ref().unwrap().2.as_ref(), Some(&new));
        let mut img = image.clone();
        let at = newest.off + newest.len / 2;
        img.get_mut(&newest.file).unwrap()[at as usize] ^= 0x5a;
        let hurt: Hurt = BTreeMap::from([(newest.file.clone(), vec![(at, at + 1)])]);
        let w = Written {
            image,
            model: Some(BTreeMap::from([(key.to_vec(), new.clone())])),
        };
        let what = format!(
            "the byte at {at} flipped in {} (the newest record)",
            newest.file.display()
        );
        let ctx = format!("Hash, tied seqs, first put on lane {first_lane} (SimVfs)");
        judge(&ctx, false, Kind::Hash, &w, img, &hurt, &what);
    }
}

/// A fixed-length database written, acknowledged durable, and stopped as a killed process
/// would: `write` makes its records (`sync=always`, one thread), the image is what a power
/// loss then leaves.
fn kf_written(write: impl FnOnce(&Db)) -> Written {
    let fs = SimVfs::new();
    let params = format!("sync=always#segsiz=64k#bufsiz=4k#width={KF_WIDTH}#limsiz=16g");
    let db = open_sim(Kind::Fixed, &fs, &params).unwrap();
    write(&db);
    let model = dump(&*db);
    db.abandon();
    fs.crash(CrashMode::DropUnsynced);
    Written {
        image: fs
            .image()
            .into_iter()
            .filter(|(p, _)| !p.ends_with("LOCK"))
            .collect(),
        model: Some(model),
    }
}

/// The only segment's header zeroed, no checkpoint ever written: the slot file's header,
/// written at creation, names the salt, and the segment's records past the zeroed page still
/// verify with it, so that `repair` keeps them, where the oracle took them for unverifiable
/// (it looked for the salt only in a checkpoint with replay positions): what seed 117 of
/// `damage_model_kf_sim_0` failed on when the filler's zeros had not reached the segment's
/// end at the crash (a shorter file, and the damage drawn then zeroed its first page).
#[test]
fn damage_kf_segment_header_salt_from_the_slot_file() {
    let w = kf_written(|db| {
        for id in 1..=20u64 {
            db.put(id.to_string().as_bytes(), &vec![b'a' + id as u8; 400])
                .unwrap();
        }
    });
    let seg = Path::new(Kind::Fixed.dir()).join("seg-00000001.kd");
    assert!(
        w.image[&seg].len() > 2 * KF_PAGE,
        "records past the first page"
    );
    let head = kf_head(&w.image[&Path::new(Kind::Fixed.dir()).join(KF_DATA)]).unwrap();
    assert_eq!(
        u64::from_le_bytes(head[20..28].try_into().unwrap()),
        0,
        "no checkpoint"
    );
    let mut img = w.image.clone();
    img.get_mut(&seg).unwrap()[..KF_PAGE].fill(0);
    let hurt: Hurt = BTreeMap::from([(seg.clone(), vec![(0, KF_PAGE as u64)])]);
    let ctx = "Fixed, the only segment's header zeroed, no checkpoint (SimVfs)";
    judge(
        ctx,
        false,
        Kind::Fixed,
        &w,
        img,
        &hurt,
        "page at 0 zeroed in the segment",
    );
}

/// A batch cut short at the end of the log (taken for a torn tail, dropped) over ids whose
/// pages in the slot file are zeroed: a read of them falls back to their page, and reads
/// as `Corrupt`: id 3, whose older version is in page 1, and id 2, which had no record
/// before, from page 0, which holds id 1's record. The oracle required the newest record itself to be
/// damaged: what seed 56 of `damage_model_kf_sim_0` failed on when the threads' batches
/// landed last in a segment ("page 1308 holds records but reads as zeros").
#[test]
fn damage_kf_torn_batch_over_damaged_pages() {
    let w = kf_written(|db| {
        db.put(b"1", &[b'x'; 100]).unwrap();
        db.put(b"3", &[b'y'; 100]).unwrap();
        db.optimize("").unwrap();
        let put = |id: &str| kura_engine::BatchOp::Put {
            key: id.as_bytes().to_vec(),
            value: vec![b'z'; 1500],
            flags: 0,
            expires: 0,
        };
        db.write_batch(&[put("3"), put("2"), put("4")]).unwrap();
    });
    let lay = layout(&w.image, Kind::Fixed);
    // The batch's last record (id 4's), cut in its middle: the batch is the log's last.
    let last = lay
        .units
        .iter()
        .find(|u| u.rec.as_ref().is_some_and(|r| r.0 == b"4"))
        .unwrap();
    let cut = last.off + last.len / 2;
    let seg = last.file.clone();
    let data = Path::new(Kind::Fixed.dir()).join(KF_DATA);
    let mut img = w.image.clone();
    let seg_len = img[&seg].len() as u64;
    img.get_mut(&seg).unwrap().truncate(cut as usize);
    let pages = KF_HEAD_LEN as usize..KF_HEAD_LEN as usize + 2 * KF_PAGE;
    img.get_mut(&data).unwrap()[pages.clone()].fill(0);
    let hurt: Hurt = BTreeMap::from([
        (seg.clone(), vec![(cut, seg_len)]),
        (data, vec![(pages.start as u64, pages.end as u64)]),
    ]);
    let ctx = "Fixed, a torn batch over zeroed pages (SimVfs)";
    judge(
        ctx,
        false,
        Kind::Fixed,
        &w,
        img,
        &hurt,
        "the last batch cut short, pages 0 and 1 zeroed",
    );
}
