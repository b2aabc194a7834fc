//! The command mask (`--mask` / `--unmask`): refuse chosen operations on every protocol.
//!
//! A mask names *operations* (Tokyo Tyrant's command names: `put`, `out`, `vanish`, …), not wire
//! commands, so `--mask out` refuses a Tyrant `out`, a memcached `delete` / `md`, an HTTP
//! `DELETE` and a Kyoto Tycoon `/rpc/remove` alike. Group names refuse whole sets: `all`,
//! `allorg` (the Tyrant binary protocol), `allmc` (both memcached protocols), `allhttp` (HTTP,
//! Tyrant's and Kyoto Tycoon's), `allredis` (the Redis protocol), `allread`, `allwrite` and `allmanage`. `--unmask` removes names
//! again, after every `--mask`, so `--mask all --unmask get,stat` leaves a read-only server that
//! only answers `get` and `stat`.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// An operation, whatever protocol asked for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    Put,
    PutKeep,
    PutCat,
    PutShl,
    PutNr,
    Out,
    Get,
    Mget,
    Vsiz,
    IterInit,
    IterNext,
    Fwmkeys,
    AddInt,
    AddDouble,
    Ext,
    Sync,
    Optimize,
    Vanish,
    Copy,
    Restore,
    SetMst,
    Rnum,
    Size,
    Stat,
    Misc,
    Repl,
}

/// The protocol family a request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proto {
    /// The Tokyo Tyrant binary protocol ("the original").
    Tyrant,
    /// memcached text or binary.
    Memcached,
    /// HTTP: Tyrant's REST, Kyoto Tycoon's RPC and REST.
    Http,
    /// The Redis protocol (RESP2 and RESP3).
    Redis,
}

/// What an operation does, for `allread` / `allwrite` / `allmanage`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Read,
    Write,
    Manage,
}

/// Every operation with its mask name and class.
pub const OPS: &[(Op, &str, Class)] = &[
    (Op::Put, "put", Class::Write),
    (Op::PutKeep, "putkeep", Class::Write),
    (Op::PutCat, "putcat", Class::Write),
    (Op::PutShl, "putshl", Class::Write),
    (Op::PutNr, "putnr", Class::Write),
    (Op::Out, "out", Class::Write),
    (Op::Get, "get", Class::Read),
    (Op::Mget, "mget", Class::Read),
    (Op::Vsiz, "vsiz", Class::Read),
    (Op::IterInit, "iterinit", Class::Read),
    (Op::IterNext, "iternext", Class::Read),
    (Op::Fwmkeys, "fwmkeys", Class::Read),
    (Op::AddInt, "addint", Class::Write),
    (Op::AddDouble, "adddouble", Class::Write),
    (Op::Ext, "ext", Class::Write),
    (Op::Sync, "sync", Class::Manage),
    (Op::Optimize, "optimize", Class::Manage),
    (Op::Vanish, "vanish", Class::Write),
    (Op::Copy, "copy", Class::Manage),
    (Op::Restore, "restore", Class::Manage),
    (Op::SetMst, "setmst", Class::Manage),
    (Op::Rnum, "rnum", Class::Read),
    (Op::Size, "size", Class::Read),
    (Op::Stat, "stat", Class::Read),
    (Op::Misc, "misc", Class::Write),
    (Op::Repl, "repl", Class::Manage),
];

impl Op {
    pub fn name(self) -> &'static str {
        OPS[self as usize].1
    }
    pub fn class(self) -> Class {
        OPS[self as usize].2
    }
}

/// One bit per (operation, protocol) pair: bit `op * 4 + proto`.
const PROTOS: [Proto; 4] = [Proto::Tyrant, Proto::Memcached, Proto::Http, Proto::Redis];

#[inline]
fn bit(op: Op, proto: Proto) -> u128 {
    1u128 << (op as u32 * PROTOS.len() as u32 + proto as u32)
}

/// A set of refused (operation, protocol) pairs. The default refuses nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mask(u128);

/// An unknown name in a mask expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownName(pub String);

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown command name `{}` in a mask (names: {}, all, allorg, allmc, allhttp, \
             allredis, allread, allwrite, allmanage)",
            self.0,
            OPS.iter().map(|o| o.1).collect::<Vec<_>>().join(", ")
        )
    }
}

impl std::error::Error for UnknownName {}

/// The pairs selected by `keep`.
fn select(keep: impl Fn(Op, Class, Proto) -> bool) -> u128 {
    let mut m = 0;
    for &(op, _, class) in OPS {
        for p in PROTOS {
            if keep(op, class, p) {
                m |= bit(op, p);
            }
        }
    }
    m
}

/// The pairs named by a comma- or space-separated list of names (case-insensitive). Group names
/// expand to their pairs, so a later `--unmask` of one operation takes it out of the group.
fn bits(expr: &str) -> Result<u128, UnknownName> {
    let mut m = 0;
    for name in expr.split([',', ' ']).filter(|n| !n.is_empty()) {
        let lower = name.to_ascii_lowercase();
        m |= match lower.as_str() {
            "all" => select(|_, _, _| true),
            "allorg" => select(|_, _, p| p == Proto::Tyrant),
            "allmc" => select(|_, _, p| p == Proto::Memcached),
            "allhttp" => select(|_, _, p| p == Proto::Http),
            "allredis" => select(|_, _, p| p == Proto::Redis),
            "allread" => select(|_, c, _| c == Class::Read),
            "allwrite" => select(|_, c, _| c == Class::Write),
            "allmanage" => select(|_, c, _| c == Class::Manage),
            n => match OPS.iter().find(|o| o.1 == n) {
                Some(o) => select(|op, _, _| op == o.0),
                None => return Err(UnknownName(name.to_string())),
            },
        };
    }
    Ok(m)
}

impl Mask {
    /// Nothing refused.
    pub const NONE: Mask = Mask(0);

    /// Refuse the named operations / groups too.
    pub fn mask(self, expr: &str) -> Result<Mask, UnknownName> {
        Ok(Mask(self.0 | bits(expr)?))
    }

    /// Allow the named operations / groups again.
    pub fn unmask(self, expr: &str) -> Result<Mask, UnknownName> {
        Ok(Mask(self.0 & !bits(expr)?))
    }

    /// Whether `op` asked for over `proto` is refused.
    #[inline]
    pub fn denies(self, op: Op, proto: Proto) -> bool {
        self.0 & bit(op, proto) != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Refused by either.
    pub fn union(self, other: Mask) -> Mask {
        Mask(self.0 | other.0)
    }

    /// The operation names refused over `proto`, for logs and `stat`.
    pub fn names(self, proto: Proto) -> Vec<&'static str> {
        OPS.iter()
            .filter(|o| self.denies(o.0, proto))
            .map(|o| o.1)
            .collect()
    }
}

/// The protocols' names in [`Mask::changes`].
const PROTO_NAMES: [&str; 4] = ["tyrant", "memcached", "http", "redis"];

impl Mask {
    /// What changed from `old` to `new`, for the log: `+out -get` (`+` newly refused, `-`
    /// allowed again), a name followed by its protocols where the change is not on all of
    /// them (`+get(memcached,http)`); empty when nothing changed.
    pub fn changes(old: Mask, new: Mask) -> String {
        let mut out = Vec::new();
        for (sign, from, to) in [('+', old, new), ('-', new, old)] {
            for &(op, name, _) in OPS {
                let on: Vec<&str> = PROTOS
                    .iter()
                    .zip(PROTO_NAMES)
                    .filter(|&(&p, _)| to.denies(op, p) && !from.denies(op, p))
                    .map(|(_, n)| n)
                    .collect();
                match on.len() {
                    0 => {}
                    n if n == PROTOS.len() => out.push(format!("{sign}{name}")),
                    _ => out.push(format!("{sign}{name}({})", on.join(","))),
                }
            }
        }
        out.join(" ")
    }
}

/// The mask in force, which SIGHUP may replace while requests read it: the two halves of the
/// bit set in two atomics, each read with a relaxed load (as cheap as a plain read). A reader
/// that races a replacement may see one half old and the other new; every bit is then still
/// either its old or its new value, so what both masks refuse (or allow) stays refused (or
/// allowed) throughout, and only what the replacement changes may be seen either way.
#[derive(Debug, Default)]
pub struct MaskCell {
    lo: AtomicU64,
    hi: AtomicU64,
}

impl MaskCell {
    pub fn new(m: Mask) -> MaskCell {
        let c = MaskCell::default();
        c.set(m);
        c
    }

    #[inline]
    pub fn get(&self) -> Mask {
        let (lo, hi) = (self.lo.load(Relaxed), self.hi.load(Relaxed));
        Mask((u128::from(hi) << 64) | u128::from(lo))
    }

    /// Replace the mask: requests that start after it see `m`.
    pub fn set(&self, m: Mask) {
        self.lo.store(m.0 as u64, Relaxed);
        self.hi.store((m.0 >> 64) as u64, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_table_is_in_enum_order() {
        for (i, o) in OPS.iter().enumerate() {
            assert_eq!(o.0 as usize, i, "{}", o.1);
        }
    }

    #[test]
    fn names_groups_and_unmask() {
        let m = Mask::NONE.mask("out,vanish").unwrap();
        for p in [Proto::Tyrant, Proto::Memcached, Proto::Http] {
            assert!(m.denies(Op::Out, p));
            assert!(m.denies(Op::Vanish, p));
            assert!(!m.denies(Op::Put, p));
            assert!(!m.denies(Op::Get, p));
        }
        let m = Mask::NONE.mask("allmc").unwrap();
        assert!(m.denies(Op::Get, Proto::Memcached));
        assert!(!m.denies(Op::Get, Proto::Tyrant));
        let m = Mask::NONE.mask("allwrite").unwrap();
        assert!(m.denies(Op::PutNr, Proto::Http));
        assert!(!m.denies(Op::Get, Proto::Http));
        assert!(!m.denies(Op::Sync, Proto::Http));
        let m = Mask::NONE.mask("ALL").unwrap().unmask("get stat").unwrap();
        assert!(!m.denies(Op::Get, Proto::Tyrant));
        assert!(!m.denies(Op::Stat, Proto::Memcached));
        assert!(m.denies(Op::Mget, Proto::Tyrant));
        assert_eq!(m.names(Proto::Tyrant).len(), OPS.len() - 2);
        assert!(Mask::NONE.mask("put,bogus").is_err());
        assert!(Mask::default().is_empty());
        assert!(!Mask::default().denies(Op::Put, Proto::Tyrant));
    }

    #[test]
    fn a_cell_holds_every_bit_and_changes_name_what_moved() {
        let m = Mask::NONE.mask("all").unwrap().unmask("get").unwrap();
        let c = MaskCell::new(m);
        assert_eq!(c.get(), m);
        // The highest operation's bits lie past the first 64.
        assert!(c.get().denies(Op::Repl, Proto::Http));
        c.set(Mask::NONE.mask("out").unwrap());
        assert!(c.get().denies(Op::Out, Proto::Memcached));
        assert!(!c.get().denies(Op::Repl, Proto::Http));
        // `get` refused over memcached only.
        let mc_get = Mask::NONE
            .mask("allmc")
            .unwrap()
            .unmask("allwrite,allmanage,mget,vsiz,iterinit,iternext,fwmkeys,rnum,size,stat")
            .unwrap();
        assert_eq!(Mask::changes(Mask::NONE, mc_get), "+get(memcached)");
        let old = Mask::NONE.mask("vanish,get").unwrap();
        assert_eq!(
            Mask::changes(old, mc_get),
            "-get(tyrant,http,redis) -vanish"
        );
        assert_eq!(
            Mask::changes(
                Mask::NONE.mask("vanish").unwrap(),
                Mask::NONE.mask("out").unwrap()
            ),
            "+out -vanish"
        );
        assert_eq!(Mask::changes(old, old), "");
    }
}
