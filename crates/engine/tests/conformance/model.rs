//! The model: what a store must hold, and the reference forms of counters and intervals.

use super::*;

/// A record as the model knows it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Rec {
    pub(crate) value: Vec<u8>,
    pub(crate) flags: u32,
    pub(crate) expires: u64,
    pub(crate) version: u64,
}

impl Rec {
    pub(crate) fn of(value: &[u8], meta: Meta) -> Rec {
        Rec {
            value: value.to_vec(),
            flags: meta.flags,
            expires: meta.expires,
            version: meta.version,
        }
    }
    pub(crate) fn meta(&self) -> Meta {
        Meta {
            flags: self.flags,
            expires: self.expires,
            version: self.version,
        }
    }
}

/// What a store must hold.
#[derive(Default)]
pub(crate) struct Model {
    pub(crate) live: BTreeMap<Bytes, Rec>,
    /// Keys whose newest record was stored already expired (written or touched into the
    /// past): they read as absent, but a kind may count them until it reclaims them.
    pub(crate) expired: BTreeSet<Bytes>,
    /// The longest value the kind stores (a fixed-length database's width): a write of a
    /// longer one is refused with `TooLarge` and changes nothing.
    pub(crate) width: Option<usize>,
    /// A table's: values are columns in the wire form, records never expire
    /// (`Model::stored`).
    pub(crate) columns: bool,
}

/// Why a store refuses a write, which then changes nothing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Refusal {
    /// A value longer than the width (`TooLarge`).
    Width,
    /// An expiration time (or a touch) on a table's record (`Unsupported`: its records never
    /// expire).
    Expiry,
    /// A table's value that is not a wire form (`InvalidParam`).
    NotColumns,
}

impl Refusal {
    /// `r` is this refusal's error.
    pub(crate) fn check<T: std::fmt::Debug>(self, r: &kura_engine::Result<T>, what: &str) {
        let ok = match self {
            Refusal::Width => matches!(r, Err(Error::TooLarge(_))),
            Refusal::Expiry => matches!(r, Err(Error::Unsupported(_))),
            Refusal::NotColumns => matches!(r, Err(Error::InvalidParam(_))),
        };
        assert!(ok, "{what}: refused for {self:?}, but {r:?}");
    }
}

/// A table's columns in the wire form, `name1\0value1\0name2\0value2…` (the empty value: no
/// columns), as a table keeps them: a later column of a name replaces the earlier one's value
/// in its place. `None` when `v` is not a wire form: an odd number of fields, an empty name.
pub(crate) fn model_columns(v: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut cols: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    if v.is_empty() {
        return Some(cols);
    }
    let fields: Vec<&[u8]> = v.split(|&b| b == 0).collect();
    if fields.len() % 2 == 1 {
        return None;
    }
    for pair in fields.chunks(2) {
        if pair[0].is_empty() {
            return None;
        }
        match cols.iter_mut().find(|(n, _)| n == pair[0]) {
            Some(c) => c.1 = pair[1].to_vec(),
            None => cols.push((pair[0].to_vec(), pair[1].to_vec())),
        }
    }
    Some(cols)
}

/// Columns in the wire form.
pub(crate) fn model_wire(cols: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let fields: Vec<&[u8]> = cols.iter().flat_map(|(n, v)| [&n[..], &v[..]]).collect();
    fields.join(&0)
}

impl Model {
    pub(crate) fn get(&self, key: &[u8]) -> Option<&Rec> {
        self.live.get(&Bytes(key.to_vec()))
    }

    /// What a write of `value` that expires at `expires` stores: the value as it reads back
    /// (on a table its columns' wire form, `model_columns`), or why the kind refuses it.
    pub(crate) fn stored(&self, value: &[u8], expires: u64) -> Result<Vec<u8>, Refusal> {
        if self.width.is_some_and(|w| value.len() > w) {
            return Err(Refusal::Width);
        }
        if !self.columns {
            return Ok(value.to_vec());
        }
        if expires != 0 {
            return Err(Refusal::Expiry);
        }
        model_columns(value)
            .map(|c| model_wire(&c))
            .ok_or(Refusal::NotColumns)
    }

    /// `putcat` on a table: the columns of `value` merged into `old`'s (Tokyo Cabinet's
    /// `tctdbputcat`: a column the record has keeps its value, the others are added at the
    /// end), or why it is refused.
    pub(crate) fn merged(&self, old: &[u8], value: &[u8]) -> Result<Vec<u8>, Refusal> {
        let mut cols = model_columns(old).expect("a table's record is columns");
        for (n, v) in model_columns(value).ok_or(Refusal::NotColumns)? {
            if !cols.iter().any(|(x, _)| *x == n) {
                cols.push((n, v));
            }
        }
        Ok(model_wire(&cols))
    }

    /// A write of `key` answered `r` and was refused for `why`: check the error, and that the
    /// record is as it was.
    pub(crate) fn refused<T: std::fmt::Debug>(
        &self,
        db: &dyn Store,
        key: &[u8],
        why: Refusal,
        r: kura_engine::Result<T>,
        what: &str,
    ) {
        let k = Bytes(key.to_vec());
        why.check(&r, &format!("{what} {k:?}"));
        let got = db.get(key).unwrap().map(|r| Rec::of(&r.value, r.meta));
        self.expect(key, got, &format!("after a refused {what}"));
    }

    /// The newest record of `key` is `rec` (live, or already expired).
    pub(crate) fn set(&mut self, key: &[u8], rec: Rec) {
        let key = Bytes(key.to_vec());
        if expired(rec.expires) {
            self.live.remove(&key);
            self.expired.insert(key);
        } else {
            self.expired.remove(&key);
            self.live.insert(key, rec);
        }
    }

    pub(crate) fn remove(&mut self, key: &[u8]) -> Option<Rec> {
        self.live.remove(&Bytes(key.to_vec()))
    }

    /// A write of `value`, `flags`, `expires` to `key` returned `meta`: check it and take it.
    pub(crate) fn wrote(
        &mut self,
        key: &[u8],
        value: Vec<u8>,
        flags: u32,
        expires: u64,
        meta: Meta,
    ) {
        let k = Bytes(key.to_vec());
        assert_eq!(
            (meta.flags, meta.expires),
            (flags, expires),
            "{k:?}: the metadata a write returned"
        );
        self.versioned(key, meta.version);
        self.set(
            key,
            Rec {
                value,
                flags,
                expires,
                version: meta.version,
            },
        );
    }

    /// Check a new version of `key`: never 0, not the one it replaced.
    pub(crate) fn versioned(&self, key: &[u8], version: u64) {
        assert_ne!(
            version,
            0,
            "{:?}: a stored record has version 0",
            Bytes(key.to_vec())
        );
        if let Some(old) = self.get(key) {
            assert_ne!(
                version,
                old.version,
                "{:?}: a write kept the version of the record it replaced",
                Bytes(key.to_vec())
            );
        }
    }

    /// After a write that returns no metadata: read `key` back, expect `value`, `flags`,
    /// `expires` under a new version, and take it.
    pub(crate) fn learn(
        &mut self,
        db: &dyn Store,
        key: &[u8],
        value: Vec<u8>,
        flags: u32,
        expires: u64,
    ) {
        let got = db.get(key).unwrap();
        if expired(expires) {
            assert_eq!(
                got,
                None,
                "{:?}: written already expired",
                Bytes(key.to_vec())
            );
            self.set(
                key,
                Rec {
                    value,
                    flags,
                    expires,
                    version: 1,
                },
            );
            return;
        }
        let got = got.unwrap_or_else(|| panic!("{:?}: written, then absent", Bytes(key.to_vec())));
        assert_eq!(
            (&got.value, got.meta.flags, got.meta.expires),
            (&value, flags, expires),
            "{:?}: read back after a write",
            Bytes(key.to_vec())
        );
        self.versioned(key, got.meta.version);
        self.set(
            key,
            Rec {
                value,
                flags,
                expires,
                version: got.meta.version,
            },
        );
    }

    /// `got` is what the store read for `key`: the model's live record, or nothing.
    pub(crate) fn expect(&self, key: &[u8], got: Option<Rec>, what: &str) {
        assert_eq!(
            got.as_ref(),
            self.get(key),
            "{what} {:?}",
            Bytes(key.to_vec())
        );
    }

    /// The lowest and highest `count` allowed.
    pub(crate) fn bounds(&self) -> (u64, u64) {
        let live = self.live.len() as u64;
        (live, live + self.expired.len() as u64)
    }

    /// Take out the records of `owned` keys (one thread's part).
    pub(crate) fn take_part(&mut self, owned: &Keys) -> Model {
        let mut part = Model {
            width: self.width,
            columns: self.columns,
            ..Model::default()
        };
        let keys: Vec<Bytes> = self
            .live
            .keys()
            .filter(|k| owned.owns(k))
            .cloned()
            .collect();
        for k in keys {
            let r = self.live.remove(&k).unwrap();
            part.live.insert(k, r);
        }
        let keys: Vec<Bytes> = self
            .expired
            .iter()
            .filter(|k| owned.owns(k))
            .cloned()
            .collect();
        for k in keys {
            self.expired.remove(&k);
            part.expired.insert(k);
        }
        part
    }

    pub(crate) fn absorb(&mut self, part: Model) {
        self.live.extend(part.live);
        self.expired.extend(part.expired);
    }
}

pub(crate) fn check_count(db: &dyn Store, m: &Model) {
    let (lo, hi) = m.bounds();
    let n = db.count();
    assert!(
        (lo..=hi).contains(&n),
        "count {n}: {lo} live records, {} written already expired",
        hi - lo
    );
}

pub(crate) fn too_large(r: kura_engine::Result<impl std::fmt::Debug>, what: &str) {
    assert!(
        matches!(r, Err(Error::TooLarge(_))),
        "{what} with a key of {} bytes: {r:?}",
        MAX_KEY_LEN + 1
    );
}

/// The ids `fwmkeys` with the interval `s` covers (inclusive; empty when `lo > hi`) in a
/// database whose ids with records are `ids` (ascending), as Tokyo Cabinet's `tcfdbrange4`
/// reads an interval and Kura cuts it to the ids there are.
pub(crate) fn model_interval(s: &[u8], ids: &[u64]) -> (u64, u64) {
    let (min, max) = (
        ids.first().copied().unwrap_or(0),
        ids.last().copied().unwrap_or(0),
    );
    let s = std::str::from_utf8(s).expect("intervals the suite makes are text");
    let (lo, hi) = s[1..s.len() - 1].split_once(',').expect("an interval");
    let val = |b: &str| -> i128 {
        match b {
            "min" => i128::from(min),
            "max" => i128::from(max),
            n => n.parse().expect("an id"),
        }
    };
    let lo = val(lo) + i128::from(s.starts_with('('));
    let hi = val(hi) - i128::from(s.ends_with(')'));
    if max == 0 {
        return (1, 0);
    }
    let lo = lo.max(i128::from(min)).max(1);
    let hi = hi.min(i128::from(max));
    if lo > hi {
        (1, 0)
    } else {
        (lo as u64, hi as u64)
    }
}

/// memcached's decimal counter form, written from the trait's documentation: digits (1 to 20,
/// no overflow), then optionally spaces.
pub(crate) fn model_decimal(v: &[u8]) -> Option<u64> {
    // memcached reads a counter with `strtoull` (on the value and its "\r\n"): white space,
    // a sign, digits, then the end or white space; a result that reads as negative is not a
    // number ("-0" is 0).
    let space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let mut i = v.iter().take_while(|&&b| space(b)).count();
    let neg = match v.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let start = i;
    let mut n = 0u64;
    while let Some(&d) = v.get(i).filter(|b| b.is_ascii_digit()) {
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        i += 1;
    }
    if i == start || v.get(i).is_some_and(|&b| !space(b)) {
        return None;
    }
    if !neg {
        return Some(n);
    }
    let n = n.wrapping_neg();
    ((n as i64) >= 0).then_some(n)
}

/// What memcached stores for a counter `n` over `old_len` bytes: padded with spaces.
pub(crate) fn model_counter(n: u64, old_len: usize) -> Vec<u8> {
    let mut v = n.to_string().into_bytes();
    if v.len() < old_len {
        v.resize(old_len, b' ');
    }
    v
}
