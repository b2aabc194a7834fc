//! The operations of a round and how they are drawn.

use super::*;

/// One step of a round. The operations on keys (`Get` to `TooLarge`) also run in threads;
/// the others act on the whole database.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    /// `get` and `vsiz`.
    Get(Bytes),
    /// `view`, and `view_shared` with `min`.
    View {
        key: Bytes,
        min: usize,
    },
    /// `put_with`, or `put` when `plain`.
    Put {
        key: Bytes,
        value: Bytes,
        flags: u32,
        exp: Exp,
        plain: bool,
    },
    PutKeep {
        key: Bytes,
        value: Bytes,
        flags: u32,
        exp: Exp,
    },
    Replace {
        key: Bytes,
        value: Bytes,
        flags: u32,
        exp: Exp,
    },
    Cas {
        key: Bytes,
        ver: Ver,
        value: Bytes,
        flags: u32,
        exp: Exp,
    },
    /// `putcat` or `prepend` (`front`) when `create`, else `concat` of an existing record.
    Cat {
        key: Bytes,
        value: Bytes,
        front: bool,
        create: bool,
    },
    /// `putshl`.
    Shl {
        key: Bytes,
        value: Bytes,
        width: usize,
    },
    Out(Bytes),
    OutIf {
        key: Bytes,
        ver: Ver,
    },
    Touch {
        key: Bytes,
        exp: Exp,
    },
    AddInt {
        key: Bytes,
        delta: i32,
    },
    AddDouble {
        key: Bytes,
        delta: f64,
    },
    /// `incr_decimal` when `plain`, else `incr_decimal_if` with the version `ver`.
    Incr {
        key: Bytes,
        delta: u64,
        decr: bool,
        ver: Ver,
        plain: bool,
    },
    GetMulti(Vec<Bytes>),
    /// `write_batch` of puts and removes (`None`); with `poison`, a put of a key too long
    /// is inserted there, and the batch must change nothing.
    Batch {
        items: Vec<(Bytes, Option<Put>)>,
        poison: Option<usize>,
    },
    /// `accept` with a visitor that keeps, touches or removes whatever it is shown.
    Accept {
        key: Bytes,
        decide: Decide,
    },
    /// A write with a key longer than every kind accepts.
    TooLarge(u8),
    // Whole-database operations (never in a thread).
    /// `check_cursor`.
    Cursor {
        writes: bool,
        seed: u64,
    },
    Fwm {
        prefix: Bytes,
        max: usize,
    },
    /// `range` (refused by unordered kinds).
    Range {
        from: Bytes,
        to: Option<Bytes>,
        max: usize,
    },
    Count,
    Sync,
    Check,
    /// `optimize` with one of the kind's `retune` parameters.
    Optimize(u8),
    Vanish,
    CopyTo,
    /// What the kind's `Restart` says; the number seeds a crash's torn writes.
    Restart(u64),
    /// `put` of `n` keys from the `from`-th on: grows the index.
    Fill {
        from: usize,
        n: usize,
        seed: u64,
    },
    /// `threads` threads run `ops` operations each on keys of their own.
    Threads {
        threads: u8,
        ops: u16,
        seed: u64,
    },
}

/// Append (`front`: prepend) to an existing record only, as memcached does: the new metadata,
/// `None` when the record is absent.
pub(crate) fn concat_existing(
    db: &dyn Store,
    k: &[u8],
    v: &[u8],
    front: bool,
) -> kura_engine::Result<Option<Meta>> {
    Ok(match db.concat_if(k, v, front, 0, &|_, _| true)? {
        Outcome::Stored(m) => Some(m),
        Outcome::NotFound => None,
        other => panic!("concat_if without cas or limit: {other:?}"),
    })
}

/// A put in a batch: value, flags, expiry.
pub(crate) type Put = (Bytes, u32, Exp);

#[derive(Clone, Copy, Debug)]
pub(crate) enum Decide {
    Keep,
    Touch(Exp),
    Remove,
}

pub(crate) fn gen_flags(rng: &mut Rng) -> u32 {
    if rng.chance(1, 2) {
        0
    } else {
        rng.next() as u32
    }
}

/// One operation on the keys of `keys`; `whole` allows whole-database operations too.
pub(crate) fn gen_op(rng: &mut Rng, keys: &Keys, whole: bool) -> Op {
    let top = if whole { 1000 } else { 900 };
    let k = keys.pick(rng);
    match rng.below(top) {
        0..=79 => Op::Get(k),
        80..=109 => Op::View {
            key: k,
            min: rng.pick(&[0, 1, 64, 1 << 20]),
        },
        110..=219 => Op::Put {
            key: k,
            value: keys.value(rng),
            flags: gen_flags(rng),
            exp: Exp::gen(rng),
            plain: rng.chance(1, 4),
        },
        220..=259 => Op::PutKeep {
            key: k,
            value: keys.value(rng),
            flags: gen_flags(rng),
            exp: Exp::gen(rng),
        },
        260..=289 => Op::Replace {
            key: k,
            value: keys.value(rng),
            flags: gen_flags(rng),
            exp: Exp::gen(rng),
        },
        290..=339 => Op::Cas {
            key: k,
            ver: Ver::gen(rng),
            value: keys.value(rng),
            flags: gen_flags(rng),
            exp: Exp::gen(rng),
        },
        340..=399 => Op::Cat {
            key: k,
            value: keys.value(rng),
            front: rng.chance(1, 3),
            create: rng.chance(3, 4),
        },
        400..=419 => Op::Shl {
            key: k,
            value: keys.value(rng),
            width: rng
                .pick(&[0, 1, 3, 8, 100, 5000])
                .min(keys.value_cap.unwrap_or(usize::MAX)),
        },
        420..=479 => Op::Out(k),
        480..=509 => Op::OutIf {
            key: k,
            ver: Ver::gen(rng),
        },
        510..=549 => Op::Touch {
            key: k,
            exp: Exp::gen(rng),
        },
        550..=589 => Op::AddInt {
            key: k,
            delta: match rng.below(4) {
                0 => i32::MAX,
                1 => i32::MIN,
                _ => rng.below(200) as i32 - 100,
            },
        },
        590..=629 => Op::AddDouble {
            key: k,
            delta: match rng.below(8) {
                0 => f64::MAX,
                1 => f64::INFINITY,
                2 => f64::NAN,
                _ => (rng.below(400) as f64 - 200.0) / 8.0,
            },
        },
        630..=689 => Op::Incr {
            key: k,
            delta: match rng.below(4) {
                0 => u64::MAX - rng.below(3),
                1 => rng.next(),
                _ => rng.below(50),
            },
            decr: rng.chance(1, 3),
            ver: Ver::gen(rng),
            plain: rng.chance(1, 2),
        },
        690..=719 => Op::GetMulti((0..rng.upto(6)).map(|_| keys.pick(rng)).collect()),
        720..=789 => {
            let items = (0..rng.upto(8))
                .map(|_| {
                    let k = keys.pick(rng);
                    let v = rng
                        .chance(2, 3)
                        .then(|| (keys.value(rng), gen_flags(rng), Exp::gen(rng)));
                    (k, v)
                })
                .collect::<Vec<_>>();
            let poison = rng.chance(1, 8).then(|| rng.upto(items.len()));
            Op::Batch { items, poison }
        }
        790..=869 => Op::Accept {
            key: k,
            decide: match rng.below(3) {
                0 => Decide::Keep,
                1 => Decide::Touch(Exp::gen(rng)),
                _ => Decide::Remove,
            },
        },
        870..=899 => Op::TooLarge(rng.below(6) as u8),
        // Whole-database operations.
        900..=914 => Op::Cursor {
            writes: rng.chance(1, 2),
            seed: rng.next(),
        },
        915..=931 => Op::Fwm {
            prefix: keys.fwm(rng),
            max: rng.pick(&[0, 1, 2, 5, 1000]),
        },
        932..=948 => Op::Range {
            from: keys.probe(rng),
            to: rng.chance(2, 3).then(|| keys.probe(rng)),
            max: rng.pick(&[0, 1, 3, 1000]),
        },
        949..=953 => Op::Count,
        954..=958 => Op::Sync,
        959..=962 => Op::Check,
        963..=966 => Op::Optimize(rng.next() as u8),
        967..=968 => Op::Vanish,
        969..=970 => Op::CopyTo,
        971..=980 => Op::Restart(rng.next()),
        981..=989 => Op::Fill {
            from: rng.upto(keys.n),
            n: rng.upto(keys.n.min(600)),
            seed: rng.next(),
        },
        _ => Op::Threads {
            threads: 2 + rng.below(2) as u8,
            ops: 20 + rng.below(80) as u16,
            seed: rng.next(),
        },
    }
}
