//! The damage model's oracle (what the undamaged files hold, unit by unit) and its damage
//! (what a trial does to the files, and which units that touched).

use super::*;

// ------------------------------------------------------------------------------ the oracle

/// A unit of a segment: the smallest thing damage is counted against.
#[derive(Clone, Debug)]
pub(super) struct Unit {
    pub(super) file: PathBuf,
    pub(super) off: u64,
    pub(super) len: u64,
    /// The start of the top-level record it is (part of).
    pub(super) top: u64,
    /// A put or delete (`value` None): its key, seq and value.
    pub(super) rec: Option<(Vec<u8>, u64, Option<Vec<u8>>)>,
}

pub(super) struct Layout {
    pub(super) units: Vec<Unit>,
    pub(super) salt: Option<u64>,
    /// Segment files with a valid header, and their lane.
    pub(super) segs: BTreeMap<PathBuf, (u32, u16)>,
}

pub(super) fn seg_id(p: &Path) -> Option<u32> {
    let n = p.file_name()?.to_str()?;
    n.strip_prefix("seg-")?.strip_suffix(".kd")?.parse().ok()
}

/// Every unit of the undamaged image: each segment read from its header to its first record
/// that does not verify (a crash's torn tail, or its end).
pub(super) fn layout(img: &Image, kind: Kind) -> Layout {
    let mut out = Layout {
        units: Vec::new(),
        salt: None,
        segs: BTreeMap::new(),
    };
    for (path, data) in img {
        let Some(id) = seg_id(path) else { continue };
        let Ok(info) = format::parse_seg_header(data) else {
            continue;
        };
        out.salt = Some(info.salt);
        out.segs.insert(path.clone(), (id, info.lane));
        let seed = format::seed(info.salt);
        let mut off = format::seg_layout(data).data as usize;
        while off < data.len() {
            let Some(h) = format::parse_header(&data[off..]) else {
                break;
            };
            if off + h.len > data.len() || !format::verify(&data[off..off + h.len], seed) {
                break;
            }
            let unit = |o: usize, len: usize, rec| Unit {
                file: path.clone(),
                off: o as u64,
                len: len as u64,
                top: off as u64,
                rec,
            };
            if h.typ == format::T_BATCH {
                out.units.push(unit(off, h.key_off, None));
                let mut pos = off + h.key_off;
                for _ in 0..h.count {
                    let sh = format::parse_header(&data[pos..]).unwrap();
                    let rec = record(kind, &data[pos..pos + sh.len], &sh);
                    out.units.push(unit(pos, sh.len, rec));
                    pos += sh.len;
                }
            } else {
                let rec = record(kind, &data[off..off + h.len], &h);
                out.units.push(unit(off, h.len, rec));
            }
            off += h.len;
        }
    }
    if kind == Kind::Fixed {
        kf_slot_units(img, &mut out.units);
    }
    out
}

/// The newest header of a fixed-length database's slot file that verifies (its page).
pub(super) fn kf_head(data: &[u8]) -> Option<&[u8]> {
    (0..2)
        .filter_map(|c| data.get(c * KF_PAGE..(c + 1) * KF_PAGE))
        .filter(|b| {
            &b[..8] == b"KURAFXD1"
                && crc32c::crc32c(&b[..KF_PAGE - 4])
                    == u32::from_le_bytes(b[KF_PAGE - 4..].try_into().unwrap())
        })
        .max_by_key(|b| u64::from_le_bytes(b[20..28].try_into().unwrap()))
}

/// The salt a fixed-length database's slot file names in its newest header that verifies.
pub(super) fn kf_salt(img: &Image) -> Option<u64> {
    let data = img.get(&Path::new(Kind::Fixed.dir()).join(KF_DATA))?;
    kf_head(data).map(|h| u64::from_le_bytes(h[12..20].try_into().unwrap()))
}

/// The units of a fixed-length database's slot file: every record of every page that
/// verifies (after the double-write file of an interrupted checkpoint, as recovery applies
/// it), each counted against its whole page, at the header's seq.
pub(super) fn kf_slot_units(img: &Image, out: &mut Vec<Unit>) {
    let dir = Path::new(Kind::Fixed.dir());
    let path = dir.join(KF_DATA);
    let Some(data) = img.get(&path) else { return };
    let Some(head) = kf_head(data) else { return };
    let le = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let (salt, gen, seq, width) = (le(head, 12), le(head, 20), le(head, 28), le(head, 36));
    let lenw = if width <= 0xff {
        1
    } else if width <= 0xffff {
        2
    } else {
        4
    };
    let slot = 1 + lenw + width as usize;
    let (per_page, page_len) = if slot + 4 <= KF_PAGE {
        ((KF_PAGE - 4) / slot, KF_PAGE)
    } else {
        (1, slot + 4)
    };
    let seed = format::seed(salt);
    let crc_ok = |p: u64, img: &[u8]| {
        let c = crc32c::crc32c_append(seed, &p.to_le_bytes());
        crc32c::crc32c_append(c, &img[..img.len() - 4])
            == u32::from_le_bytes(img[img.len() - 4..].try_into().unwrap())
    };
    let mut data = data.clone();
    // The double-write file of the checkpoint after the header's.
    if let Some(dw) = img.get(&dir.join(KF_DW)) {
        let n = dw.len();
        let ok = n >= 44
            && crc32c::crc32c(&dw[..n - 4]) == u32::from_le_bytes(dw[n - 4..].try_into().unwrap())
            && &dw[..8] == b"KURAFXW1"
            && le(dw, 8) == salt
            && le(dw, 16) == gen + 1
            && le(dw, 24) == page_len as u64;
        if ok {
            let mut at = 40;
            for _ in 0..le(dw, 32) {
                let p = le(dw, at);
                at += 8;
                let (page, image) = if p & (1 << 63) != 0 {
                    (p & !(1 << 63), None)
                } else {
                    at += page_len;
                    (p, Some(&dw[at - page_len..at]))
                };
                let off = (KF_HEAD_LEN + page * page_len as u64) as usize;
                if data.len() < off + page_len {
                    data.resize(off + page_len, 0);
                }
                let cur = &mut data[off..off + page_len];
                match image {
                    Some(i) => cur.copy_from_slice(i),
                    None if cur.iter().all(|&b| b == 0) || crc_ok(page, cur) => {}
                    None => cur.fill(0),
                }
            }
        }
    }
    let mut page = 0u64;
    loop {
        let off = KF_HEAD_LEN as usize + page as usize * page_len;
        let Some(img) = data.get(off..off + page_len) else {
            break;
        };
        if !img.iter().all(|&b| b == 0) && crc_ok(page, img) {
            for k in 0..per_page {
                let s = &img[k * slot..(k + 1) * slot];
                if s[0] == 0 {
                    continue;
                }
                let mut lb = [0u8; 8];
                lb[..lenw].copy_from_slice(&s[1..1 + lenw]);
                let len = u64::from_le_bytes(lb) as usize;
                let id = page * per_page as u64 + k as u64 + 1;
                out.push(Unit {
                    file: path.clone(),
                    off: off as u64,
                    len: page_len as u64,
                    top: off as u64,
                    rec: Some((
                        id.to_string().into_bytes(),
                        seq,
                        Some(s[1 + lenw..1 + lenw + len].to_vec()),
                    )),
                });
            }
        }
        page += 1;
    }
}

pub(super) fn record(
    kind: Kind,
    rec: &[u8],
    h: &format::Header,
) -> Option<(Vec<u8>, u64, Option<Vec<u8>>)> {
    let key = kind.shown_key(&rec[h.key_off..h.key_off + h.klen]);
    match h.typ {
        format::T_PUT => {
            let stored = &rec[h.value_off()..h.len];
            let v = if h.fields.compression == 0 {
                stored.to_vec()
            } else {
                let c = format::codec(h).unwrap();
                compress::decompress(c, stored, h.fields.raw_len as usize).unwrap()
            };
            Some((key, h.fields.seq, Some(v)))
        }
        format::T_DELETE => Some((key, h.fields.seq, None)),
        _ => None,
    }
}

/// The values of records of one key (`None`: a delete).
pub(super) type Values = BTreeSet<Option<Vec<u8>>>;

/// Each key's newest versions: the value of every record of the key at its largest seq. Keys
/// without one: never written.
pub(super) type Versions = BTreeMap<Vec<u8>, Values>;

/// Each key's newest versions among the units `keep` takes.
///
/// Usually one record holds a key's largest seq, but two records of a key can share a seq: a
/// fast put or delete of the hash takes its seq before it locks its key's bucket; when the
/// bucket then shows that seq or a later one (the key, or another of the bucket, was written
/// meanwhile by a thread whose clock ran ahead), it writes its record again with a later seq
/// and the first copy is dead (`hash/shard.rs`, `put_fast`, `out_fast`). That dead copy may
/// carry the seq of the key's record before it. Once the later copy is lost (damaged), the
/// two are equally newest by seq, and replay keeps whichever it meets first (lane by lane):
/// the key's version before that write, or the write's own value. Either is allowed.
pub(super) fn newest(units: &[Unit], keep: impl Fn(usize, &Unit) -> bool) -> Versions {
    let mut best: BTreeMap<&[u8], (u64, Values)> = BTreeMap::new();
    for (i, u) in units.iter().enumerate() {
        let Some((k, seq, v)) = &u.rec else { continue };
        if !keep(i, u) {
            continue;
        }
        match best.get_mut(k.as_slice()) {
            Some(b) if b.0 > *seq => {}
            Some(b) if b.0 == *seq => {
                b.1.insert(v.clone());
            }
            _ => {
                best.insert(k, (*seq, BTreeSet::from([v.clone()])));
            }
        }
    }
    best.into_iter()
        .map(|(k, (_, v))| (k.to_vec(), v))
        .collect()
}

/// Whether `got` is one of the newest versions of `k` in `v` (absent: a key never written,
/// or deleted).
pub(super) fn allows(v: &Versions, k: &[u8], got: Option<&Vec<u8>>) -> bool {
    match v.get(k) {
        Some(set) => set.contains(&got.cloned()),
        None => got.is_none(),
    }
}

/// The lengths of the newest versions of `k` in `v`, for messages.
pub(super) fn lens(v: &Versions, k: &[u8]) -> Vec<Option<usize>> {
    v.get(k).map_or(vec![None], |s| {
        s.iter().map(|v| v.as_ref().map(Vec::len)).collect()
    })
}

/// The newest unit of each key among the units `keep` takes (index into the units).
pub(super) fn newest_units(
    units: &[Unit],
    keep: impl Fn(usize) -> bool,
) -> BTreeMap<Vec<u8>, usize> {
    let mut best: BTreeMap<Vec<u8>, (u64, usize)> = BTreeMap::new();
    for (i, u) in units.iter().enumerate() {
        if !keep(i) {
            continue;
        }
        if let Some((k, seq, _)) = &u.rec {
            if best.get(k).is_none_or(|b| b.0 < *seq) {
                best.insert(k.clone(), (*seq, i));
            }
        }
    }
    best.into_iter().map(|(k, (_, i))| (k, i)).collect()
}

/// What a checkpoint that verifies knew durable.
#[derive(Default)]
pub(super) struct Knows {
    /// Per lane: (segment, offset) where its replay starts.
    pub(super) replay: Vec<(u32, u64)>,
    /// (id, recorded length) of every segment it lists.
    pub(super) lens: BTreeMap<u32, u64>,
    /// It verified and names the segments' salt (a fixed-length database's slot file does
    /// from its creation, before it lists any lane).
    pub(super) salt: bool,
}

impl Knows {
    pub(super) fn read(img: &Image, salt: Option<u64>, kind: Kind) -> Knows {
        let (name, salt_at, lanes_at) = kind.ckpt();
        let Some(b) = img.get(&Path::new(kind.dir()).join(name)) else {
            return Knows::default();
        };
        let b: &[u8] = match kind {
            Kind::Hash => b,
            Kind::Fixed => match kf_head(b) {
                Some(h) => h,
                None => return Knows::default(),
            },
        };
        let le32 = |p: usize| u32::from_le_bytes(b[p..p + 4].try_into().unwrap());
        let le64 = |p: usize| u64::from_le_bytes(b[p..p + 8].try_into().unwrap());
        if kind == Kind::Hash
            && (b.len() < 40 || crc32c::crc32c(&b[..b.len() - 4]) != le32(b.len() - 4))
        {
            return Knows::default();
        }
        if Some(le64(salt_at)) != salt {
            return Knows::default();
        }
        let lanes = le32(lanes_at) as usize;
        let at = lanes_at + 4;
        let replay = (0..lanes)
            .map(|l| (le32(at + 8 * l), le32(at + 4 + 8 * l) as u64))
            .collect();
        let pos = at + 8 * lanes;
        let lens = (0..le32(pos) as usize)
            .map(|i| (le32(pos + 4 + 24 * i), le64(pos + 8 + 24 * i)))
            .collect();
        Knows {
            replay,
            lens,
            salt: true,
        }
    }

    pub(super) fn any(&self) -> bool {
        self.salt || !self.replay.is_empty()
    }

    /// Where segment `seg` of lane `lane` was known durable up to.
    pub(super) fn bound(&self, seg: u32, lane: u16) -> Option<u64> {
        let &(rseg, roff) = self.replay.get(lane as usize)?;
        if seg == rseg {
            Some(roff)
        } else if seg > rseg {
            None
        } else {
            self.lens.get(&seg).copied()
        }
    }
}

// ------------------------------------------------------------------------------ the damage

#[derive(Clone, Copy, Debug)]
pub(super) enum Target {
    Segments,
    Checkpoint,
    Both,
}

/// Damaged byte ranges per file (a cut counts everything it removed).
pub(super) type Hurt = BTreeMap<PathBuf, Vec<(u64, u64)>>;

pub(super) fn damage(img: &mut Image, r: &mut Rng, target: Target, kind: Kind) -> (Hurt, String) {
    let mut hurt: Hurt = BTreeMap::new();
    let mut what = Vec::new();
    let segs: Vec<PathBuf> = img
        .keys()
        .filter(|p| seg_id(p).is_some())
        .cloned()
        .collect();
    let ckpt = Path::new(kind.dir()).join(kind.ckpt().0);
    let mut files = Vec::new();
    if matches!(target, Target::Segments | Target::Both) && !segs.is_empty() {
        // Weighted by size: damage lands where the bytes are.
        let total: u64 = segs.iter().map(|p| img[p].len() as u64).sum();
        let mut at = r.below(total);
        for p in &segs {
            let n = img[p].len() as u64;
            if at < n {
                files.push(p.clone());
                break;
            }
            at -= n;
        }
    }
    if matches!(target, Target::Checkpoint | Target::Both) && img.contains_key(&ckpt) {
        files.push(ckpt);
    }
    for f in files {
        let data = img.get_mut(&f).unwrap();
        let len = data.len() as u64;
        if len == 0 {
            continue;
        }
        let ranges = hurt.entry(f.clone()).or_default();
        match r.below(3) {
            0 => {
                let n = 1 + r.below(32);
                let burst = r.below(2) == 0;
                let start = r.below(len);
                for i in 0..n {
                    let at = if burst {
                        (start + i).min(len - 1)
                    } else {
                        r.below(len)
                    };
                    data[at as usize] ^= 1 + r.below(255) as u8;
                    ranges.push((at, at + 1));
                }
                what.push(format!("{} bytes flipped in {}", n, f.display()));
            }
            1 => {
                let page = r.below(len.div_ceil(4096)) * 4096;
                let end = (page + 4096).min(len);
                data[page as usize..end as usize].fill(0);
                ranges.push((page, end));
                what.push(format!("page at {page} zeroed in {}", f.display()));
            }
            _ => {
                let cut = r.below(len);
                data.truncate(cut as usize);
                ranges.push((cut, len));
                what.push(format!("{} cut to {cut} of {len}", f.display()));
            }
        }
    }
    (hurt, what.join("; "))
}

pub(super) fn touched(h: &Hurt, file: &Path, lo: u64, hi: u64) -> bool {
    h.get(file)
        .is_some_and(|v| v.iter().any(|&(a, b)| a < hi && lo < b))
}
