//! Queries on a table (Tokyo Cabinet's `tctdbqry*` and `tctdbmetasearch`): conditions with
//! every operator, order, limit and skip, and the planner that runs them (`exec`;
//! docs/architecture/kinds.md, "Queries and the planner").
//!
//! A condition is judged on a record as Tokyo Cabinet judges it: on the column's value
//! (`""`: the primary key); a record without the column matches only a negated condition.
//! Numbers are read by [`tc_atof`], tokens split by [`tokens`], full-text units normalized by
//! [`normalize`]: the same functions the indexes are keyed by, so a condition answered from
//! an index and the same condition checked on a record agree.

mod exec;
#[cfg(test)]
mod tests;

pub use exec::{fetch, metasearch, remove, run_search, search, still_matches, Found};

use super::terms::{normalize, tc_atof, tokens};
use crate::error::{Error, Result};

/// Tokyo Cabinet's negation flag of an operator's number.
pub const NEGATE: u32 = 1 << 24;
/// Tokyo Cabinet's no-index flag of an operator's number.
pub const NOIDX: u32 = 1 << 25;

/// The operators, in Tokyo Cabinet's numbering (`TDBQCSTREQ` 0 … `TDBQCFTSEX` 18).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    StrEq,
    StrInc,
    StrBw,
    StrEw,
    StrAnd,
    StrOr,
    StrOrEq,
    StrRx,
    NumEq,
    NumGt,
    NumGe,
    NumLt,
    NumLe,
    NumBt,
    NumOrEq,
    FtsPh,
    FtsAnd,
    FtsOr,
    FtsEx,
}

const OPS: [Op; 19] = [
    Op::StrEq,
    Op::StrInc,
    Op::StrBw,
    Op::StrEw,
    Op::StrAnd,
    Op::StrOr,
    Op::StrOrEq,
    Op::StrRx,
    Op::NumEq,
    Op::NumGt,
    Op::NumGe,
    Op::NumLt,
    Op::NumLe,
    Op::NumBt,
    Op::NumOrEq,
    Op::FtsPh,
    Op::FtsAnd,
    Op::FtsOr,
    Op::FtsEx,
];

impl Op {
    /// Every operator.
    pub fn all() -> &'static [Op] {
        &OPS
    }

    /// Tokyo Cabinet's number.
    pub fn code(self) -> u32 {
        OPS.iter().position(|&o| o == self).unwrap_or(0) as u32
    }

    pub fn from_code(c: u32) -> Option<Op> {
        OPS.get(c as usize).copied()
    }

    /// Tokyo Cabinet's name (`STREQ` …).
    pub fn name(self) -> &'static str {
        [
            "STREQ", "STRINC", "STRBW", "STREW", "STRAND", "STROR", "STROREQ", "STRRX", "NUMEQ",
            "NUMGT", "NUMGE", "NUMLT", "NUMLE", "NUMBT", "NUMOREQ", "FTSPH", "FTSAND", "FTSOR",
            "FTSEX",
        ][self.code() as usize]
    }

    /// An operator as Tyrant's `addcond` gives it: a number (with [`NEGATE`] and [`NOIDX`])
    /// or a name or alias, case-insensitive, after `~` or `!` (negate) and `+` (no index).
    /// Returns the operator, negate, no-index.
    pub fn parse(s: &[u8]) -> Result<(Op, bool, bool)> {
        let shown = String::from_utf8_lossy(s);
        let bad = || {
            Error::InvalidParam(format!(
                "condition operator `{shown}`: expected a name (streq strinc strbw strew strand \
                 stror stroreq strrx numeq numgt numge numlt numle numbt numoreq ftsph ftsand \
                 ftsor ftsex, or an alias) or Tokyo Cabinet's number, `~` before it to negate, \
                 `+` for no index"
            ))
        };
        let t = std::str::from_utf8(s).map_err(|_| bad())?.trim();
        if let Ok(n) = t.parse::<u32>() {
            let op = Op::from_code(n & !(NEGATE | NOIDX)).ok_or_else(bad)?;
            return Ok((op, n & NEGATE != 0, n & NOIDX != 0));
        }
        let (mut neg, mut noidx) = (false, false);
        let mut rest = t;
        loop {
            if let Some(r) = rest.strip_prefix(['~', '!']) {
                neg = true;
                rest = r;
            } else if let Some(r) = rest.strip_prefix('+') {
                noidx = true;
                rest = r;
            } else {
                break;
            }
        }
        let up = rest.to_ascii_uppercase();
        let name = up.strip_prefix("TDBQC").unwrap_or(&up);
        let op = match name {
            "STREQ" | "STR" | "EQ" => Op::StrEq,
            "STRINC" | "INC" => Op::StrInc,
            "STRBW" | "BW" => Op::StrBw,
            "STREW" | "EW" => Op::StrEw,
            "STRAND" | "AND" => Op::StrAnd,
            "STROR" | "OR" => Op::StrOr,
            "STROREQ" | "OREQ" => Op::StrOrEq,
            "STRRX" | "RX" => Op::StrRx,
            "NUMEQ" | "NUM" | "=" | "==" => Op::NumEq,
            "NUMGT" | ">" => Op::NumGt,
            "NUMGE" | ">=" => Op::NumGe,
            "NUMLT" | "<" => Op::NumLt,
            "NUMLE" | "<=" => Op::NumLe,
            "NUMBT" | "BT" => Op::NumBt,
            "NUMOREQ" => Op::NumOrEq,
            "FTSPH" | "FTS" => Op::FtsPh,
            "FTSAND" => Op::FtsAnd,
            "FTSOR" => Op::FtsOr,
            "FTSEX" => Op::FtsEx,
            _ => return Err(bad()),
        };
        Ok((op, neg, noidx))
    }
}

/// How results are ordered (Tokyo Cabinet's `TDBQOSTRASC` 0 … `TDBQONUMDESC` 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrderType {
    StrAsc,
    StrDesc,
    NumAsc,
    NumDesc,
}

impl OrderType {
    pub fn code(self) -> u32 {
        match self {
            OrderType::StrAsc => 0,
            OrderType::StrDesc => 1,
            OrderType::NumAsc => 2,
            OrderType::NumDesc => 3,
        }
    }

    pub fn numeric(self) -> bool {
        matches!(self, OrderType::NumAsc | OrderType::NumDesc)
    }

    pub fn desc(self) -> bool {
        matches!(self, OrderType::StrDesc | OrderType::NumDesc)
    }

    /// `STRASC`/`STR`/`ASC`, `STRDESC`/`DESC`, `NUMASC`/`NUM`, `NUMDESC` (case-insensitive)
    /// or 0–3.
    pub fn parse(s: &[u8]) -> Result<OrderType> {
        let shown = String::from_utf8_lossy(s);
        let up = shown.trim().to_ascii_uppercase();
        let name = up.strip_prefix("TDBQO").unwrap_or(&up);
        Ok(match name {
            "STRASC" | "STR" | "ASC" | "0" => OrderType::StrAsc,
            "STRDESC" | "DESC" | "1" => OrderType::StrDesc,
            "NUMASC" | "NUM" | "2" => OrderType::NumAsc,
            "NUMDESC" | "3" => OrderType::NumDesc,
            _ => {
                return Err(Error::InvalidParam(format!(
                    "order type `{shown}`: expected strasc, strdesc, numasc, numdesc or 0-3"
                )))
            }
        })
    }
}

/// How a metasearch combines its queries (`TDBMSUNION` 0, `TDBMSISECT` 1, `TDBMSDIFF` 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SetOp {
    #[default]
    Union,
    Isect,
    Diff,
}

impl SetOp {
    /// `UNION`/`OR`, `ISECT`/`AND`, `DIFF`/`ANDNOT`/`NOT` (case-insensitive) or 0–2.
    pub fn parse(s: &[u8]) -> Result<SetOp> {
        let shown = String::from_utf8_lossy(s);
        let up = shown.trim().to_ascii_uppercase();
        let name = up.strip_prefix("TDBMS").unwrap_or(&up);
        Ok(match name {
            "UNION" | "OR" | "0" => SetOp::Union,
            "ISECT" | "AND" | "1" => SetOp::Isect,
            "DIFF" | "ANDNOT" | "NOT" | "2" => SetOp::Diff,
            _ => {
                return Err(Error::InvalidParam(format!(
                    "metasearch type `{shown}`: expected union, isect, diff or 0-2"
                )))
            }
        })
    }
}

/// One unit of a full-text condition: it holds when one of its phrases is in the text
/// (`positive`) or none is (not `positive`).
#[derive(Clone, Debug, PartialEq)]
pub struct FtsUnit {
    pub phrases: Vec<String>,
    pub positive: bool,
}

/// A condition's expression, read once.
#[derive(Clone, Debug)]
pub(crate) enum Matcher {
    Bytes,
    Tokens(Vec<Vec<u8>>),
    Regex(regex::bytes::Regex),
    Num(f64),
    Between(f64, f64),
    Nums(Vec<f64>),
    Fts(Vec<FtsUnit>),
}

/// A condition.
#[derive(Clone, Debug)]
pub struct Cond {
    /// The column (`""`: the primary key).
    pub column: Vec<u8>,
    pub op: Op,
    pub expr: Vec<u8>,
    pub negate: bool,
    /// Checked on the record, never answered from an index.
    pub noidx: bool,
    pub(crate) m: Matcher,
}

/// Bytes that separate numbers in NUMBT and NUMOREQ.
fn num_sep(b: u8) -> bool {
    b == b' ' || b == b','
}

impl Cond {
    /// A condition; an expression that cannot be read (a bad regular expression) is an error.
    pub fn new(column: &[u8], op: Op, expr: &[u8], negate: bool, noidx: bool) -> Result<Cond> {
        let m = match op {
            Op::StrEq | Op::StrInc | Op::StrBw | Op::StrEw => Matcher::Bytes,
            Op::StrAnd | Op::StrOr | Op::StrOrEq => {
                Matcher::Tokens(tokens(expr).map(|t| t.to_vec()).collect())
            }
            Op::StrRx => {
                // Tokyo Cabinet: a leading `*` makes the expression case-insensitive.
                let (icase, rx) = match expr.strip_prefix(b"*") {
                    Some(r) => (true, r),
                    None => (false, expr),
                };
                let src = std::str::from_utf8(rx).map_err(|_| {
                    Error::InvalidParam("a regular expression that is not UTF-8".into())
                })?;
                let re = regex::bytes::RegexBuilder::new(src)
                    .case_insensitive(icase)
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|e| Error::InvalidParam(format!("regular expression `{src}`: {e}")))?;
                Matcher::Regex(re)
            }
            Op::NumEq | Op::NumGt | Op::NumGe | Op::NumLt | Op::NumLe => {
                Matcher::Num(tc_atof(expr))
            }
            Op::NumBt => {
                let mut i = 0;
                while i < expr.len() && num_sep(expr[i]) {
                    i += 1;
                }
                let start = i;
                while i < expr.len() && !num_sep(expr[i]) {
                    i += 1;
                }
                let lower = tc_atof(&expr[start..i]);
                while i < expr.len() && num_sep(expr[i]) {
                    i += 1;
                }
                let upper = tc_atof(&expr[i..]);
                if lower > upper {
                    Matcher::Between(upper, lower)
                } else {
                    Matcher::Between(lower, upper)
                }
            }
            Op::NumOrEq => Matcher::Nums(
                expr.split(|&b| num_sep(b))
                    .filter(|t| !t.is_empty())
                    .map(tc_atof)
                    .collect(),
            ),
            Op::FtsPh | Op::FtsAnd | Op::FtsOr | Op::FtsEx => Matcher::Fts(fts_units(op, expr)),
        };
        Ok(Cond {
            column: column.to_vec(),
            op,
            expr: expr.to_vec(),
            negate,
            noidx,
            m,
        })
    }

    /// Whether a value satisfies the operator (before negation).
    pub fn hit(&self, v: &[u8]) -> bool {
        let e = &self.expr[..];
        match (&self.m, self.op) {
            (_, Op::StrEq) => v == e,
            (_, Op::StrInc) => e.is_empty() || v.windows(e.len()).any(|w| w == e),
            (_, Op::StrBw) => v.starts_with(e),
            (_, Op::StrEw) => v.ends_with(e),
            (Matcher::Tokens(ts), Op::StrAnd) => ts.iter().all(|t| tokens(v).any(|x| x == &t[..])),
            (Matcher::Tokens(ts), Op::StrOr) => ts.iter().any(|t| tokens(v).any(|x| x == &t[..])),
            (Matcher::Tokens(ts), Op::StrOrEq) => ts.iter().any(|t| &t[..] == v),
            (Matcher::Regex(re), _) => re.is_match(v),
            (Matcher::Num(x), op) => {
                let n = tc_atof(v);
                match op {
                    Op::NumEq => n == *x,
                    Op::NumGt => n > *x,
                    Op::NumGe => n >= *x,
                    Op::NumLt => n < *x,
                    _ => n <= *x,
                }
            }
            (Matcher::Between(lo, hi), _) => {
                let n = tc_atof(v);
                n >= *lo && n <= *hi
            }
            (Matcher::Nums(xs), _) => {
                let n = tc_atof(v);
                xs.contains(&n)
            }
            (Matcher::Fts(units), _) => fts_hit(units, v),
            _ => false,
        }
    }

    /// Whether the record (`pk`, `value`: its value of the column, `None` when it has none)
    /// satisfies the condition.
    pub fn check(&self, value: Option<&[u8]>) -> bool {
        match value {
            Some(v) => self.hit(v) != self.negate,
            None => self.negate,
        }
    }

    /// The condition on the record of `pk` with columns `cols`.
    pub fn check_row(&self, pk: &[u8], cols: &super::Columns) -> bool {
        if self.column.is_empty() {
            self.check(Some(pk))
        } else {
            self.check(cols.get(&self.column))
        }
    }
}

/// The normalized text of a value, as a string (full-text conditions compare these).
pub(crate) fn norm_string(v: &[u8]) -> String {
    normalize(v).into_iter().collect()
}

/// Tokyo Cabinet's full-text units of an expression (`tctdbftsparseexpr`): FTSPH one phrase;
/// FTSAND one unit per word; FTSOR one unit of every word; FTSEX words joined by `&&` (and,
/// the default), `||` (or) and `!!` (and not), `"…"` quoting a phrase with spaces. Words are
/// normalized as the q-gram index normalizes text.
pub(crate) fn fts_units(op: Op, expr: &[u8]) -> Vec<FtsUnit> {
    let words = || {
        expr.split(|&b| matches!(b, b'\t' | b'\n' | b'\r' | b' ' | b','))
            .map(norm_string)
            .filter(|w| !w.is_empty())
    };
    match op {
        Op::FtsPh => vec![FtsUnit {
            phrases: vec![norm_string(expr)],
            positive: true,
        }],
        Op::FtsAnd => words()
            .map(|w| FtsUnit {
                phrases: vec![w],
                positive: true,
            })
            .collect(),
        Op::FtsOr => vec![FtsUnit {
            phrases: words().collect(),
            positive: true,
        }],
        _ => {
            let mut units: Vec<FtsUnit> = Vec::new();
            let mut mode = 0;
            for tok in fts_tokenize(&norm_string(expr)) {
                match tok.as_str() {
                    "&&" => mode = 0,
                    "||" => mode = 1,
                    "!!" => mode = 2,
                    _ => {
                        if mode == 1 {
                            match units.last_mut() {
                                Some(u) => u.phrases.push(tok),
                                None => units.push(FtsUnit {
                                    phrases: vec![tok],
                                    positive: false,
                                }),
                            }
                        } else {
                            units.push(FtsUnit {
                                phrases: vec![tok],
                                positive: mode == 0,
                            });
                        }
                        mode = 0;
                    }
                }
            }
            units
        }
    }
}

/// Words separated by spaces, a `"…"` word keeping its spaces (`tcstrtokenize`).
fn fts_tokenize(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = s.chars().peekable();
    loop {
        while it.peek() == Some(&' ') {
            it.next();
        }
        let Some(&c) = it.peek() else { break };
        let mut w = String::new();
        if c == '"' {
            it.next();
            for c in it.by_ref() {
                if c == '"' {
                    break;
                }
                w.push(c);
            }
        } else {
            while let Some(&c) = it.peek() {
                if c == ' ' {
                    break;
                }
                w.push(c);
                it.next();
            }
        }
        out.push(w);
    }
    out
}

/// Tokyo Cabinet's `tctdbqrycondcheckfts`: no units, or a first unit that is not positive,
/// never match; else every unit holds.
fn fts_hit(units: &[FtsUnit], v: &[u8]) -> bool {
    if !units.first().is_some_and(|u| u.positive) {
        return false;
    }
    let text = norm_string(v);
    units
        .iter()
        .all(|u| u.phrases.iter().any(|p| text.contains(p.as_str())) == u.positive)
}

/// One query: conditions (all must hold), order, limit and skip.
#[derive(Clone, Debug, Default)]
pub struct Query {
    pub conds: Vec<Cond>,
    /// Column and how (`None`: primary-key order).
    pub order: Option<(Vec<u8>, OrderType)>,
    /// At most this many results (`None`: all).
    pub limit: Option<usize>,
    /// Leave out this many first results.
    pub skip: usize,
}

impl Query {
    pub fn new() -> Query {
        Query::default()
    }

    /// Add a condition.
    pub fn cond(mut self, column: &[u8], op: Op, expr: &[u8]) -> Result<Query> {
        self.conds.push(Cond::new(column, op, expr, false, false)?);
        Ok(self)
    }
}

/// A search as Tyrant's `misc search`/`metasearch` asks it.
#[derive(Clone, Debug, Default)]
pub struct Search {
    /// One query, or several joined by `next` (a metasearch).
    pub queries: Vec<Query>,
    pub set_op: SetOp,
    /// `get`: return records with these columns (`""`: the primary key; none named: the
    /// primary key and every column).
    pub columns: Option<Vec<Vec<u8>>>,
    /// `out`: remove the matching records.
    pub remove: bool,
    /// `count`: return only how many.
    pub count: bool,
    /// `hint`: add the plan taken.
    pub hint: bool,
}

fn parse_int(what: &str, s: &[u8]) -> Result<i64> {
    std::str::from_utf8(s)
        .ok()
        .and_then(|t| t.trim().parse::<i64>().ok())
        .ok_or_else(|| {
            Error::InvalidParam(format!(
                "{what} `{}`: expected an integer",
                String::from_utf8_lossy(s)
            ))
        })
}

/// Read Tyrant's `search` arguments: each one command, its parts separated by NUL bytes.
pub fn parse_search(args: &[&[u8]]) -> Result<Search> {
    let mut s = Search::default();
    let mut q = Query::default();
    for arg in args {
        let parts: Vec<&[u8]> = arg.split(|&b| b == 0).collect();
        let name = parts[0];
        let want = |n: usize, form: &str| -> Result<()> {
            if parts.len() < n {
                return Err(Error::InvalidParam(format!(
                    "search command `{}`: expected {form}",
                    String::from_utf8_lossy(name)
                )));
            }
            Ok(())
        };
        match name {
            b"addcond" | b"cond" => {
                want(4, "addcond\\0column\\0operator\\0expression")?;
                let (op, neg, noidx) = Op::parse(parts[2])?;
                q.conds.push(Cond::new(parts[1], op, parts[3], neg, noidx)?);
            }
            b"setorder" | b"order" => {
                want(3, "setorder\\0column\\0type")?;
                q.order = Some((parts[1].to_vec(), OrderType::parse(parts[2])?));
            }
            b"setlimit" | b"limit" | b"setmax" | b"max" => {
                want(2, "setlimit\\0max[\\0skip]")?;
                let max = parse_int("limit", parts[1])?;
                q.limit = usize::try_from(max).ok();
                if let Some(sk) = parts.get(2) {
                    q.skip = usize::try_from(parse_int("skip", sk)?).unwrap_or(0);
                }
            }
            b"get" | b"columns" => {
                s.columns = Some(parts[1..].iter().map(|c| c.to_vec()).collect());
            }
            b"out" | b"remove" => s.remove = true,
            b"count" => s.count = true,
            b"hint" => s.hint = true,
            b"next" => s.queries.push(std::mem::take(&mut q)),
            b"mstype" => {
                want(2, "mstype\\0type")?;
                s.set_op = SetOp::parse(parts[1])?;
            }
            _ => {
                return Err(Error::InvalidParam(format!(
                    "search command `{}`: expected addcond, setorder, setlimit, get, out, \
                     count, hint, next or mstype",
                    String::from_utf8_lossy(name)
                )))
            }
        }
    }
    s.queries.push(q);
    Ok(s)
}
