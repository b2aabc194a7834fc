//! Randomness: the generator, keys, values, expiry times and versions the rounds draw.

use super::*;

/// splitmix64: one seed, one sequence, on every platform.
#[derive(Clone)]
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub(crate) fn upto(&mut self, n: usize) -> usize {
        self.below(n as u64 + 1) as usize
    }
    pub(crate) fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }
    pub(crate) fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len() as u64) as usize]
    }
}

/// Bytes that print short: keys and values in the operation log. Ordered as keys are: a
/// canonical decimal number (digits, no leading zero) by its value, before anything else,
/// which is ordered by its bytes (the order of an ordered kind's keys, record ids included).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Bytes(pub(crate) Vec<u8>);

impl Bytes {
    /// The value of a canonical decimal number.
    pub(crate) fn number(&self) -> Option<u64> {
        let b = &self.0;
        let digits = !b.is_empty() && b.iter().all(u8::is_ascii_digit);
        if !digits || (b.len() > 1 && b[0] == b'0') || b.len() > 19 {
            return None;
        }
        std::str::from_utf8(b).ok()?.parse().ok()
    }
}

impl Ord for Bytes {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (self.number(), other.number()) {
            (Some(a), Some(b)) => a.cmp(&b),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => self.0.cmp(&other.0),
        }
    }
}

impl PartialOrd for Bytes {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown: String = self
            .0
            .iter()
            .take(24)
            .flat_map(|&b| std::ascii::escape_default(b))
            .map(char::from)
            .collect();
        if self.0.len() > 24 {
            write!(f, "b\"{shown}\"…({} bytes)", self.0.len())
        } else {
            write!(f, "b\"{shown}\"")
        }
    }
}

/// The keys of a round (or of one thread's part of it): `prefix` alone, then `prefix` + `k1`,
/// `k2`, … (so that prefixes nest: `k1` is one of `k10`'s), every seventh one binary. With
/// `ids`, record ids instead: from 1 (a thread's from `THREAD_IDS` times its number plus one).
/// Ids each thread of a round on a fixed-length database has to itself (thread `t` from
/// `THREAD_IDS × (t + 1)`): few, since the database is an array as long as its largest id.
pub(crate) const THREAD_IDS: u64 = 10_000;

#[derive(Clone, Debug)]
pub(crate) struct Keys {
    pub(crate) prefix: Vec<u8>,
    pub(crate) n: usize,
    /// The id before the first (`None`: byte keys).
    pub(crate) ids: Option<u64>,
    /// The longest value generated (a fixed-length database's width).
    pub(crate) value_cap: Option<usize>,
    /// Values are a table's columns (`gen_columns`).
    pub(crate) columns: bool,
}

impl Keys {
    pub(crate) fn new(prefix: &str, n: usize, ids: bool) -> Keys {
        Keys {
            prefix: prefix.as_bytes().to_vec(),
            n,
            ids: ids.then_some(0),
            value_cap: None,
            columns: false,
        }
    }
    /// The keys of thread `t` (disjoint from the round's and every other thread's).
    pub(crate) fn thread(&self, t: u8, n: usize) -> Keys {
        Keys {
            prefix: format!("t{t}/").into_bytes(),
            n,
            ids: self.ids.map(|_| THREAD_IDS * (u64::from(t) + 1)),
            value_cap: self.value_cap,
            columns: self.columns,
        }
    }
    /// A value of the kind's: `gen_value` within the width, or a table's columns.
    pub(crate) fn value(&self, rng: &mut Rng) -> Bytes {
        if self.columns {
            gen_columns(rng)
        } else {
            gen_value(rng, self.value_cap)
        }
    }
    /// A short value of the kind's (up to 40 random bytes, or a table's column of them).
    pub(crate) fn small_value(&self, rng: &mut Rng) -> Bytes {
        let mut v: Vec<u8> = (0..rng.upto(40)).map(|_| rng.next() as u8).collect();
        if self.columns {
            v = [&b"name\0"[..], &no_nul(v)].concat();
        }
        Bytes(v)
    }
    /// Whether `k` is one of these keys (a thread's part of the model).
    pub(crate) fn owns(&self, k: &Bytes) -> bool {
        match (self.ids, k.number()) {
            (Some(base), Some(n)) => n > base && n <= base + THREAD_IDS,
            (Some(_), None) => false,
            (None, _) => k.starts_with(&self.prefix),
        }
    }
    pub(crate) fn key(&self, i: usize) -> Bytes {
        if let Some(base) = self.ids {
            return Bytes((base + i as u64 + 1).to_string().into_bytes());
        }
        let mut k = self.prefix.clone();
        match i {
            0 => {}
            i if i % 7 == 3 => k.extend_from_slice(&[0xff, 0, i as u8, (i >> 8) as u8]),
            i => k.extend_from_slice(format!("k{i}").as_bytes()),
        }
        Bytes(k)
    }
    /// Half the time one of the first 16 keys, so that even a large key space sees
    /// overwrites.
    pub(crate) fn pick(&self, rng: &mut Rng) -> Bytes {
        let n = if rng.chance(1, 2) {
            self.n.min(16)
        } else {
            self.n
        };
        self.key(rng.below(n as u64) as usize)
    }
    /// A prefix of a key, or a key (for `fwmkeys`, `range`, `jump`); with ids, an id (0 and
    /// ids past the last key included).
    pub(crate) fn probe(&self, rng: &mut Rng) -> Bytes {
        if let Some(base) = self.ids {
            let n = base + rng.below(self.n as u64 + 3);
            return Bytes(n.to_string().into_bytes());
        }
        let k = self.pick(rng);
        let cut = rng.upto(k.len() + 1).min(k.len());
        Bytes(k[..cut].to_vec())
    }
    /// What `fwmkeys` takes: a prefix (`probe`), or with ids an interval of them (`[3,10]`,
    /// `(min,7]`, `[5,max)`).
    pub(crate) fn fwm(&self, rng: &mut Rng) -> Bytes {
        if self.ids.is_none() {
            return self.probe(rng);
        }
        let bound = |rng: &mut Rng| match rng.below(6) {
            0 => b"min".to_vec(),
            1 => b"max".to_vec(),
            _ => self.probe(rng).0,
        };
        let lo = bound(rng);
        let hi = bound(rng);
        let open = if rng.chance(1, 2) { b'[' } else { b'(' };
        let close = if rng.chance(1, 2) { b']' } else { b')' };
        let mut s = vec![open];
        s.extend_from_slice(&lo);
        s.push(b',');
        s.extend_from_slice(&hi);
        s.push(close);
        Bytes(s)
    }
}

/// An expiry time: never, far in the future, or long past — never near now, so that what
/// is expired does not depend on when the test runs.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Exp {
    Never,
    Future(u8),
    Past(u8),
}

/// The time the suite started, from which expiry times are set.
pub(crate) fn start() -> u64 {
    static START: OnceLock<u64> = OnceLock::new();
    *START.get_or_init(now_secs)
}

impl Exp {
    pub(crate) fn at(self) -> u64 {
        const YEAR: u64 = 365 * 86_400;
        match self {
            Exp::Never => 0,
            Exp::Future(i) => start() + 10 * YEAR + u64::from(i),
            Exp::Past(i) if i % 2 == 0 => 1 + u64::from(i),
            Exp::Past(i) => start() - 3_600 - u64::from(i),
        }
    }
    pub(crate) fn gen(rng: &mut Rng) -> Exp {
        match rng.below(10) {
            0 | 1 => Exp::Future(rng.below(4) as u8),
            2 => Exp::Past(rng.below(4) as u8),
            _ => Exp::Never,
        }
    }
}

/// Whether an expiry time (as `Exp::at` makes them) is past.
pub(crate) fn expired(expires: u64) -> bool {
    expires != 0 && expires < start()
}

/// A version to compare with: 0, the record's own, or one it does not have.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Ver {
    Zero,
    Current,
    Stale(u8),
}

impl Ver {
    pub(crate) fn gen(rng: &mut Rng) -> Ver {
        match rng.below(5) {
            0 => Ver::Zero,
            1 | 2 => Ver::Current,
            _ => Ver::Stale(1 + rng.below(3) as u8),
        }
    }
    pub(crate) fn resolve(self, cur: Option<&Rec>) -> u64 {
        match (self, cur) {
            (Ver::Zero, _) => 0,
            (Ver::Current, Some(c)) => c.version,
            (Ver::Current, None) => 1,
            (Ver::Stale(d), Some(c)) => c.version.wrapping_add(u64::from(d)),
            (Ver::Stale(d), None) => u64::from(d),
        }
    }
}

/// A value of at most `cap` bytes (`gen_any_value` cut short).
pub(crate) fn gen_value(rng: &mut Rng, cap: Option<usize>) -> Bytes {
    let mut v = gen_any_value(rng);
    if let Some(c) = cap {
        v.0.truncate(c);
    }
    v
}

/// The columns of a table's records in the rounds, each with values of its own shape, so that
/// each type of index sees what it indexes: `name` any bytes but NUL (a lexical index), `num`
/// a decimal number or not (decimal), `tags` words (token), `text` short text (q-gram), `blob`
/// the suite's values of every size (no index). Indexed columns get short values: an index
/// entry is a tree key (its term, then the primary key), so a write whose indexed value makes
/// one longer than a key may be (64 KiB) is refused whole with `TooLarge`.
pub(crate) const COLUMNS: &[&str] = &["name", "num", "tags", "text", "blob"];

/// `v` with its NUL bytes made 1 (a column's value in the wire form holds no NUL).
pub(crate) fn no_nul(mut v: Vec<u8>) -> Vec<u8> {
    for b in &mut v {
        if *b == 0 {
            *b = 1;
        }
    }
    v
}

/// A table's value in the wire form (`name\0value\0…`): up to six columns of `COLUMNS` (or
/// now and then another name), a name drawn twice now and then (the later value replaces the
/// earlier in its place), none being a record of no columns. One value in sixteen is not a
/// wire form, or may not be: an odd number of fields, an empty name, or bytes of any kind;
/// the table refuses those and stores nothing.
pub(crate) fn gen_columns(rng: &mut Rng) -> Bytes {
    if rng.chance(1, 16) {
        return match rng.below(3) {
            0 => Bytes(b"name\0a\0num".to_vec()),
            1 => Bytes(b"\0a\0num\x001".to_vec()),
            _ => gen_value(rng, Some(100)),
        };
    }
    let mut v = Vec::new();
    for i in 0..rng.upto(6) {
        if i > 0 {
            v.push(0);
        }
        // The shape of the column's value: its own, or any for another name.
        let shape = if rng.chance(1, 8) {
            let n = 1 + rng.upto(8);
            v.extend(no_nul((0..n).map(|_| rng.next() as u8).collect()));
            rng.below(COLUMNS.len() as u64)
        } else {
            let c = rng.below(COLUMNS.len() as u64);
            v.extend_from_slice(COLUMNS[c as usize].as_bytes());
            c
        };
        v.push(0);
        let words = ["a", "b", "2026-11-28", "kura", "x"];
        let value = match shape {
            0 => gen_value(rng, Some(64)).0,
            1 => match rng.below(4) {
                0 => (rng.below(2000) as i64 - 1000).to_string().into_bytes(),
                1 => format!("{}.{}", rng.below(100), rng.below(100)).into_bytes(),
                2 => b"x12".to_vec(),
                _ => rng.next().to_string().into_bytes(),
            },
            2 => (0..rng.upto(4))
                .map(|_| rng.pick(&words))
                .collect::<Vec<_>>()
                .join(if rng.chance(1, 2) { " " } else { "," })
                .into_bytes(),
            3 => (0..rng.upto(30))
                .map(|_| b"abc de"[rng.below(6) as usize])
                .collect(),
            _ => gen_any_value(rng).0,
        };
        v.extend(no_nul(value));
    }
    Bytes(v)
}

pub(crate) fn gen_any_value(rng: &mut Rng) -> Bytes {
    let random = |rng: &mut Rng, n: usize| {
        let mut v: Vec<u8> = (0..n.div_ceil(8))
            .flat_map(|_| rng.next().to_le_bytes())
            .collect();
        v.truncate(n);
        v
    };
    Bytes(match rng.below(200) {
        0..=59 => {
            let n = rng.upto(12);
            random(rng, n)
        }
        60..=79 => random(rng, 4),
        80..=94 => random(rng, 8),
        95..=104 => ((rng.below(2000) as f64 - 1000.0) / 4.0)
            .to_le_bytes()
            .to_vec(),
        105..=139 => {
            let n = match rng.below(4) {
                0 => rng.below(100),
                1 => rng.next(),
                2 => u64::MAX - rng.below(3),
                _ => rng.below(1 << 20),
            };
            let mut v = n.to_string().into_bytes();
            match rng.below(8) {
                0 => v.extend_from_slice(b"  "),
                1 => v.insert(0, b' '),
                2 => v.push(b'x'),
                3 => v.extend_from_slice(b"9999999999999999999999"),
                _ => {}
            }
            v
        }
        140..=179 => {
            let n = 100 + rng.upto(3000);
            random(rng, n)
        }
        180..=198 => {
            let n = 5_000 + rng.upto(65_000);
            random(rng, n)
        }
        // Past the on-disk hash's large-value path (256 KiB).
        _ => {
            let n = 260_000 + rng.upto(40_000);
            random(rng, n)
        }
    })
}
