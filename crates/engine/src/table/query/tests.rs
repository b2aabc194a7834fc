//! Tests of queries: the parser, each operator (with Tokyo Cabinet's edge cases), the planner's
//! choices as the hint shows them, and a model test of random queries on random tables against
//! an in-memory reference evaluator.

use super::*;
use crate::config::{OpenMode, Params};
use crate::io::SimVfs;
use crate::store::Store;
use crate::table::{Columns, IndexOp, IndexType, PutMode, Table, TableDb};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

fn open(fs: &SimVfs) -> TableDb {
    TableDb::open_mode(
        Path::new("/sim/q.kt"),
        &Params::parse("segsiz=64k#bufsiz=4k#leafsiz=256").unwrap(),
        Arc::new(fs.clone()),
        OpenMode::Create,
    )
    .unwrap()
}

fn cond(op: Op, expr: &str) -> Cond {
    Cond::new(b"c", op, expr.as_bytes(), false, false).unwrap()
}

fn hit(op: Op, expr: &str, v: &str) -> bool {
    cond(op, expr).hit(v.as_bytes())
}

#[test]
fn operators_parse_by_name_alias_and_number() {
    for &op in Op::all() {
        assert_eq!(Op::parse(op.name().as_bytes()).unwrap(), (op, false, false));
        let lower = op.name().to_ascii_lowercase();
        assert_eq!(Op::parse(lower.as_bytes()).unwrap(), (op, false, false));
        assert_eq!(
            Op::parse(op.code().to_string().as_bytes()).unwrap(),
            (op, false, false)
        );
        let n = op.code() | NEGATE | NOIDX;
        assert_eq!(
            Op::parse(n.to_string().as_bytes()).unwrap(),
            (op, true, true)
        );
    }
    assert_eq!(Op::parse(b"~+streq").unwrap(), (Op::StrEq, true, true));
    assert_eq!(Op::parse(b"!bw").unwrap(), (Op::StrBw, true, false));
    assert_eq!(Op::parse(b"+>=").unwrap(), (Op::NumGe, false, true));
    assert_eq!(Op::parse(b"==").unwrap(), (Op::NumEq, false, false));
    assert_eq!(Op::parse(b"FTS").unwrap(), (Op::FtsPh, false, false));
    assert_eq!(
        Op::parse(b"TDBQCSTROREQ").unwrap(),
        (Op::StrOrEq, false, false)
    );
    for bad in [&b""[..], b"19", b"nope", b"~", b"\xff", b"-1"] {
        assert!(Op::parse(bad).is_err(), "{bad:?}");
    }
    assert_eq!(OrderType::parse(b"numdesc").unwrap(), OrderType::NumDesc);
    assert_eq!(OrderType::parse(b"1").unwrap(), OrderType::StrDesc);
    assert_eq!(OrderType::parse(b"NUM").unwrap(), OrderType::NumAsc);
    assert!(OrderType::parse(b"4").is_err());
    assert_eq!(SetOp::parse(b"and").unwrap(), SetOp::Isect);
    assert_eq!(SetOp::parse(b"2").unwrap(), SetOp::Diff);
    assert!(SetOp::parse(b"xor").is_err());
}

#[test]
fn search_arguments_parse_and_bad_ones_are_refused() {
    let args: Vec<&[u8]> = vec![
        b"addcond\0name\0~STRBW\0ab",
        b"setorder\0age\0NUMDESC",
        b"setlimit\x0010\x005",
        b"get\0name\0age",
        b"hint",
        b"next",
        b"cond\0\0STREQ\0k1",
        b"mstype\0ISECT",
        b"out",
        b"count",
    ];
    let s = parse_search(&args).unwrap();
    assert_eq!(s.queries.len(), 2);
    let q = &s.queries[0];
    assert_eq!(q.conds.len(), 1);
    assert_eq!(q.conds[0].op, Op::StrBw);
    assert!(q.conds[0].negate);
    assert_eq!(q.order, Some((b"age".to_vec(), OrderType::NumDesc)));
    assert_eq!((q.limit, q.skip), (Some(10), 5));
    assert_eq!(s.queries[1].conds[0].column, b"");
    assert_eq!(s.set_op, SetOp::Isect);
    assert_eq!(s.columns, Some(vec![b"name".to_vec(), b"age".to_vec()]));
    assert!(s.remove && s.count && s.hint);
    let s = parse_search(&[b"setmax\0-1", b"get"]).unwrap();
    assert_eq!(s.queries[0].limit, None);
    assert_eq!(s.columns, Some(vec![]));
    for bad in [
        &[&b"addcond\0c\0STREQ"[..]][..],
        &[b"addcond\0c\0BOGUS\0x"],
        &[b"addcond\0c\0RX\0(unclosed"],
        &[b"setorder\0c"],
        &[b"setorder\0c\0sideways"],
        &[b"setlimit\0ten"],
        &[b"setlimit\x001\0x"],
        &[b"mstype\0xor"],
        &[b"frobnicate"],
        &[b""],
    ] {
        let e = parse_search(bad).unwrap_err();
        assert!(
            matches!(e, crate::error::Error::InvalidParam(_)),
            "{bad:?}: {e}"
        );
    }
}

#[test]
fn string_operators() {
    assert!(hit(Op::StrEq, "abc", "abc"));
    assert!(!hit(Op::StrEq, "abc", "abcd"));
    assert!(hit(Op::StrInc, "bc", "abcd"));
    assert!(hit(Op::StrInc, "", "x"));
    assert!(!hit(Op::StrInc, "ce", "abcd"));
    assert!(hit(Op::StrBw, "ab", "abcd") && !hit(Op::StrBw, "bc", "abcd"));
    assert!(hit(Op::StrEw, "cd", "abcd") && !hit(Op::StrEw, "bc", "abcd"));
    // Tokens split at spaces, commas and controls; whole tokens only.
    assert!(hit(Op::StrAnd, "b, a", "a b,c"));
    assert!(!hit(Op::StrAnd, "a d", "a b,c"));
    assert!(!hit(Op::StrAnd, "ab", "abc"));
    assert!(hit(Op::StrAnd, "", "anything"));
    assert!(hit(Op::StrOr, "x,c", "a b,c"));
    assert!(!hit(Op::StrOr, "x y", "a b,c"));
    assert!(!hit(Op::StrOr, "", "a"));
    assert!(hit(Op::StrOrEq, "x, a b", "b"));
    assert!(!hit(Op::StrOrEq, "x a", "a b"));
    assert!(hit(Op::StrRx, "^a.c$", "abc"));
    assert!(!hit(Op::StrRx, "^A", "abc"));
    assert!(hit(Op::StrRx, "*^A", "abc"));
    assert!(Cond::new(b"c", Op::StrRx, b"a(", false, false).is_err());
}

#[test]
fn numeric_operators_read_numbers_as_tokyo_cabinet() {
    assert!(hit(Op::NumEq, "12", "12abc"));
    assert!(hit(Op::NumEq, "0", "abc"));
    assert!(hit(Op::NumEq, "-0", "0"));
    assert!(hit(Op::NumGt, "1.5", " 2"));
    assert!(!hit(Op::NumGt, "2", "2"));
    assert!(hit(Op::NumGe, "2", "2.0"));
    assert!(hit(Op::NumLt, "-1", "-inf"));
    assert!(hit(Op::NumLe, "3", "+3"));
    assert!(!hit(Op::NumEq, "nan", "nan"));
    assert!(!hit(Op::NumLt, "1", "nan"));
    // NUMBT: two numbers in either order, bounds included; one number is between it and 0.
    assert!(hit(Op::NumBt, "10 5", "5") && hit(Op::NumBt, "5,10", "10"));
    assert!(!hit(Op::NumBt, "5 10", "10.5"));
    assert!(hit(Op::NumBt, "5", "3") && !hit(Op::NumBt, "5", "-1"));
    assert!(hit(Op::NumOrEq, "1, 2,3", "2.0"));
    assert!(!hit(Op::NumOrEq, "1 3", "2"));
}

#[test]
fn full_text_operators() {
    let text = "The Quick  brown Fox, jumps";
    assert!(hit(Op::FtsPh, "quick brown", text));
    assert!(hit(Op::FtsPh, "QUICK   BROWN", text));
    assert!(!hit(Op::FtsPh, "brown quick", text));
    assert!(hit(Op::FtsPh, "Äpf", "äpfel"));
    assert!(hit(Op::FtsPh, "ａｂ", "xab"));
    assert!(hit(Op::FtsAnd, "fox quick", text));
    assert!(!hit(Op::FtsAnd, "fox cat", text));
    assert!(!hit(Op::FtsAnd, "", text));
    assert!(hit(Op::FtsOr, "cat,fox", text));
    assert!(!hit(Op::FtsOr, "cat dog", text));
    assert!(hit(Op::FtsEx, "fox && quick", text));
    assert!(hit(Op::FtsEx, "cat || fox", text));
    assert!(!hit(Op::FtsEx, "fox !! quick", text));
    assert!(hit(Op::FtsEx, "fox !! cat", text));
    assert!(hit(Op::FtsEx, "\"quick brown\" jumps", text));
    assert!(!hit(Op::FtsEx, "\"quick fox\"", text));
    // A first unit that is negative never matches (Tokyo Cabinet's rule).
    assert!(!hit(Op::FtsEx, "!! cat", text));
}

#[test]
fn a_missing_column_matches_only_a_negated_condition() {
    let c = cond(Op::StrInc, "");
    assert!(!c.check(None));
    let n = Cond::new(b"c", Op::StrInc, b"x", true, false).unwrap();
    assert!(n.check(None));
    assert!(n.check(Some(b"abc")));
    assert!(!n.check(Some(b"x")));
}

// ---- the model test ----

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
}

const WORDS: [&str; 16] = [
    "apple", "Äpfel", "pear", "12", "-3.5", "x,y", "", "ａｂ", "7", "0", "nan", "ple", "app",
    "1e3", "pearl", "b12",
];
const COLS: [&str; 4] = ["a", "b", "c", "d"];
const RX: [&str; 5] = ["^a", "p.e", "[0-9]+", "*^äP", "l$"];

fn random_value(rng: &mut Rng) -> String {
    (0..1 + rng.below(3))
        .map(|_| rng.pick(&WORDS))
        .collect::<Vec<_>>()
        .join(if rng.below(2) == 0 { " " } else { "," })
}

fn random_expr(rng: &mut Rng, op: Op) -> String {
    match op {
        Op::StrRx => rng.pick(&RX).to_string(),
        Op::NumBt | Op::NumOrEq | Op::StrAnd | Op::StrOr | Op::StrOrEq | Op::FtsAnd | Op::FtsOr => {
            let n = rng.below(3);
            (0..n)
                .map(|_| rng.pick(&WORDS))
                .collect::<Vec<_>>()
                .join(" ")
        }
        Op::FtsEx => {
            let mut s = rng.pick(&WORDS).to_string();
            for _ in 0..rng.below(3) {
                s.push_str([" && ", " || ", " !! ", " "][rng.below(4)]);
                s.push_str(rng.pick(&WORDS));
            }
            s
        }
        Op::StrBw | Op::StrEw | Op::StrInc | Op::FtsPh if rng.below(2) == 0 => {
            let w = random_value(rng);
            let cut = rng.below(w.len() + 1);
            w.get(..cut).unwrap_or(&w).to_string()
        }
        _ => random_value(rng),
    }
}

/// The reference evaluator's own reading of an operator (a naive one; numbers by
/// `tc_atof`, full text by the normalization the index uses).
fn ref_hit(op: Op, expr: &[u8], v: &[u8]) -> bool {
    use crate::table::terms::tc_atof;
    let toks = |s: &[u8]| -> Vec<Vec<u8>> {
        s.split(|&b| b <= b' ' || b == b',')
            .filter(|t| !t.is_empty())
            .map(|t| t.to_vec())
            .collect()
    };
    fn nums(s: &[u8]) -> Vec<&[u8]> {
        s.split(|&b| b == b' ' || b == b',')
            .filter(|t| !t.is_empty())
            .collect()
    }
    let n = tc_atof(v);
    let x = tc_atof(expr);
    match op {
        Op::StrEq => v == expr,
        Op::StrInc => (0..=v.len()).any(|i| v[i..].starts_with(expr)),
        Op::StrBw => v.starts_with(expr),
        Op::StrEw => v.ends_with(expr),
        Op::StrAnd => toks(expr).iter().all(|t| toks(v).contains(t)),
        Op::StrOr => toks(expr).iter().any(|t| toks(v).contains(t)),
        Op::StrOrEq => toks(expr).iter().any(|t| t == v),
        Op::StrRx => {
            let (i, e) = match expr.strip_prefix(b"*") {
                Some(e) => (true, e),
                None => (false, expr),
            };
            regex::bytes::RegexBuilder::new(std::str::from_utf8(e).unwrap())
                .case_insensitive(i)
                .build()
                .unwrap()
                .is_match(v)
        }
        Op::NumEq => n == x,
        Op::NumGt => n > x,
        Op::NumGe => n >= x,
        Op::NumLt => n < x,
        Op::NumLe => n <= x,
        Op::NumBt => {
            let ns = nums(expr);
            let a = ns.first().map_or(0.0, |t| tc_atof(t));
            let b = ns.get(1).map_or(0.0, |t| tc_atof(t));
            // Swapped only when the first is greater (a NaN bound matches nothing).
            let (lo, hi) = if a > b { (b, a) } else { (a, b) };
            n >= lo && n <= hi
        }
        Op::NumOrEq => nums(expr).iter().any(|t| tc_atof(t) == n),
        _ => {
            let units = fts_units(op, expr);
            let text = norm_string(v);
            !units.is_empty()
                && units[0].positive
                && units
                    .iter()
                    .all(|u| u.phrases.iter().any(|p| text.contains(p.as_str())) == u.positive)
        }
    }
}

type Model = BTreeMap<Vec<u8>, Columns>;

fn ref_matches(model: &Model, q: &Query) -> Vec<Vec<u8>> {
    let mut res: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    for (pk, cols) in model {
        let ok = q.conds.iter().all(|c| {
            let v = if c.column.is_empty() {
                Some(pk.as_slice())
            } else {
                cols.get(&c.column)
            };
            match v {
                Some(v) => ref_hit(c.op, &c.expr, v) != c.negate,
                None => c.negate,
            }
        });
        if ok {
            let key = q.order.as_ref().and_then(|(oc, ot)| {
                let v = if oc.is_empty() {
                    Some(pk.as_slice())
                } else {
                    cols.get(oc)
                };
                v.map(|v| {
                    if ot.numeric() {
                        crate::table::terms::dec_term(crate::table::terms::tc_atof(v)).to_vec()
                    } else {
                        v.to_vec()
                    }
                })
            });
            res.push((pk.clone(), key));
        }
    }
    if let Some((_, ot)) = &q.order {
        // Reference order: present keys first (by key then pk; all reversed for desc), then
        // the rest by pk.
        let (mut with, without): (Vec<_>, Vec<_>) = res.into_iter().partition(|r| r.1.is_some());
        with.sort_by(|a, b| (&a.1, &a.0).cmp(&(&b.1, &b.0)));
        if ot.desc() {
            with.reverse();
        }
        res = with.into_iter().chain(without).collect();
    }
    res.into_iter().map(|r| r.0).collect()
}

fn ref_search(model: &Model, q: &Query) -> Vec<Vec<u8>> {
    ref_matches(model, q)
        .into_iter()
        .skip(q.skip)
        .take(q.limit.unwrap_or(usize::MAX))
        .collect()
}

fn random_query(rng: &mut Rng) -> Query {
    let mut q = Query::new();
    for _ in 0..rng.below(4) {
        let op = Op::all()[rng.below(19)];
        let col = if rng.below(6) == 0 {
            ""
        } else {
            rng.pick(&COLS)
        };
        let expr = random_expr(rng, op);
        let c = Cond::new(
            col.as_bytes(),
            op,
            expr.as_bytes(),
            rng.below(5) == 0,
            rng.below(6) == 0,
        )
        .unwrap();
        q.conds.push(c);
    }
    if rng.below(2) == 0 {
        let col = if rng.below(5) == 0 {
            ""
        } else {
            rng.pick(&COLS)
        };
        let ot = [
            OrderType::StrAsc,
            OrderType::StrDesc,
            OrderType::NumAsc,
            OrderType::NumDesc,
        ][rng.below(4)];
        q.order = Some((col.as_bytes().to_vec(), ot));
    }
    if rng.below(2) == 0 {
        q.limit = Some(rng.below(12));
    }
    if rng.below(3) == 0 {
        q.skip = rng.below(5);
    }
    q
}

/// Random records with random columns, random indexes of every type, random queries with
/// every operator, negation, the no-index flag, order, limit and skip: the engine's result
/// (whatever plan it takes) equals the reference's, order included. Metasearches too.
#[test]
fn model_random_queries_equal_the_reference_evaluator() {
    let types = [
        IndexType::Lexical,
        IndexType::Decimal,
        IndexType::Token,
        IndexType::QGram,
    ];
    // How often each plan was taken (each must be, for the test to cover it).
    let mut plans: BTreeMap<&str, u32> = BTreeMap::new();
    for seed in 0..12u64 {
        let mut rng = Rng(seed);
        let fs = SimVfs::new();
        let t = open(&fs);
        let mut model = Model::new();
        let n = [5, 40, 300][seed as usize % 3];
        for i in 0..n {
            let pk = if rng.below(3) == 0 {
                format!("{}", rng.below(1000))
            } else {
                format!("k{i}")
            };
            let mut c = Columns::new();
            for col in COLS {
                if rng.below(4) != 0 {
                    c.set(col.as_bytes(), random_value(&mut rng).as_bytes())
                        .unwrap();
                }
            }
            t.put_row(pk.as_bytes(), &c, PutMode::Replace).unwrap();
            model.insert(pk.into_bytes(), c);
        }
        for col in COLS.iter().chain([&""]) {
            if rng.below(3) != 0 {
                let typ = types[rng.below(4)];
                t.set_index(col.as_bytes(), IndexOp::Make { typ, keep: false })
                    .unwrap();
            }
        }
        for qi in 0..150 {
            let q = random_query(&mut rng);
            let got = search(&t, &q).unwrap();
            let want = ref_search(&model, &q);
            for p in [
                "driving by index",
                "intersecting index",
                "walking index",
                "filtering by index",
                "walking the records",
                "scanning the whole table",
                "FTS",
                "\" STRAND",
                "NUMBT on dec",
                "STRBW on lex",
            ] {
                if got.hint.contains(p) {
                    *plans.entry(p).or_default() += 1;
                }
            }
            assert_eq!(
                got.keys,
                want,
                "seed {seed} query {qi}: {q:?}\nindexes {:?}\nhint:\n{}",
                t.indexes(),
                got.hint
            );
        }
        for mi in 0..40 {
            let qs: Vec<Query> = (0..2 + rng.below(2))
                .map(|_| random_query(&mut rng))
                .collect();
            let op = [SetOp::Union, SetOp::Isect, SetOp::Diff][rng.below(3)];
            let got = metasearch(&t, &qs, op).unwrap();
            // Reference: each query's matches (a union's with its own limit + skip), combined,
            // ordered as the first asks (else by pk), then its skip and limit.
            let mut set: std::collections::BTreeSet<Vec<u8>> = Default::default();
            for (i, q) in qs.iter().enumerate() {
                let mut sub = q.clone();
                sub.skip = 0;
                sub.limit = match op {
                    SetOp::Union => q.limit.map(|l| l + q.skip),
                    _ => None,
                };
                let keys: std::collections::BTreeSet<Vec<u8>> =
                    ref_search(&model, &sub).into_iter().collect();
                match (op, i) {
                    (_, 0) | (SetOp::Union, _) => set.extend(keys),
                    (SetOp::Isect, _) => set.retain(|k| keys.contains(k)),
                    (SetOp::Diff, _) => set.retain(|k| !keys.contains(k)),
                }
            }
            let sub_model: Model = model
                .iter()
                .filter(|(k, _)| set.contains(*k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let whole = Query {
                conds: Vec::new(),
                ..qs[0].clone()
            };
            let want = ref_search(&sub_model, &whole);
            assert_eq!(
                got.keys, want,
                "seed {seed} meta {mi} {op:?}: {qs:?}\n{}",
                got.hint
            );
        }
    }
    eprintln!("plans taken: {plans:?}");
    assert_eq!(plans.len(), 10, "{plans:?}");
}

// ---- the planner ----

/// 2,000 records: `id` unique (lexical index), `grp` one of 10 (decimal index), `tag` one of
/// 2 tokens (token index), `text` (q-gram index), `free` (no index).
fn planner_table(fs: &SimVfs) -> TableDb {
    let t = open(fs);
    for i in 0..2000u32 {
        let c = Columns::from_pairs(&[
            ("id", format!("id{i:05}")),
            ("grp", format!("{}", i % 10)),
            (
                "tag",
                if i % 2 == 0 {
                    "even".into()
                } else {
                    "odd".into()
                },
            ),
            ("text", format!("record number {i} of many")),
            ("free", format!("{}", i % 7)),
        ])
        .unwrap();
        t.put_row(format!("k{i:05}").as_bytes(), &c, PutMode::Replace)
            .unwrap();
    }
    for (col, typ) in [
        ("id", IndexType::Lexical),
        ("grp", IndexType::Decimal),
        ("tag", IndexType::Token),
        ("text", IndexType::QGram),
    ] {
        t.set_index(col.as_bytes(), IndexOp::Make { typ, keep: false })
            .unwrap();
    }
    t
}

fn records_read(hint: &str) -> u64 {
    hint.lines()
        .find_map(|l| l.strip_prefix("records read: "))
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn the_planner_drives_by_the_most_selective_index_whatever_the_order_given() {
    let fs = SimVfs::new();
    let t = planner_table(&fs);
    // TC would drive by the first condition (grp: 200 records); the id condition is one.
    let q = Query::new()
        .cond(b"grp", Op::NumEq, b"3")
        .unwrap()
        .cond(b"tag", Op::StrOr, b"odd")
        .unwrap()
        .cond(b"id", Op::StrEq, b"id00013")
        .unwrap();
    let f = search(&t, &q).unwrap();
    assert_eq!(f.keys, vec![b"k00013".to_vec()]);
    assert!(
        f.hint.contains("driving by index: \"id\" STREQ"),
        "{}",
        f.hint
    );
    // The other indexes were cheap enough to intersect, or checked on one record.
    assert!(records_read(&f.hint) <= 1, "{}", f.hint);
}

#[test]
fn the_planner_intersects_indexes_and_reads_no_record_it_can_rule_out() {
    let fs = SimVfs::new();
    let t = planner_table(&fs);
    // grp 3 (200) ∩ id starting "id001" (100) → grp 3 among ids 100..199: 10 records.
    let q = Query::new()
        .cond(b"grp", Op::NumEq, b"3")
        .unwrap()
        .cond(b"id", Op::StrBw, b"id001")
        .unwrap();
    let f = search(&t, &q).unwrap();
    assert_eq!(f.keys.len(), 10);
    assert!(
        f.hint.contains("driving by index: \"id\" STRBW"),
        "{}",
        f.hint
    );
    assert!(
        f.hint.contains("intersecting index: \"grp\" NUMEQ"),
        "{}",
        f.hint
    );
    // Both conditions answered by indexes: no record read.
    assert_eq!(records_read(&f.hint), 0, "{}", f.hint);
    // A no-index condition is checked on the record; only the intersected ones are read.
    let q = q.clone();
    let mut q2 = q;
    q2.conds
        .push(Cond::new(b"free", Op::NumEq, b"1", false, false).unwrap());
    let f = search(&t, &q2).unwrap();
    assert!(
        f.hint.contains("checking on the record: \"free\" NUMEQ"),
        "{}",
        f.hint
    );
    assert_eq!(records_read(&f.hint), 10, "{}", f.hint);
    // Full text through the q-gram index, exact by offsets.
    let q = Query::new()
        .cond(b"text", Op::FtsPh, b"number 1999 of")
        .unwrap();
    let f = search(&t, &q).unwrap();
    assert_eq!(f.keys, vec![b"k01999".to_vec()]);
    assert!(
        f.hint.contains("driving by index: \"text\" FTSPH"),
        "{}",
        f.hint
    );
}

#[test]
fn the_planner_answers_order_and_limit_from_an_ordered_index() {
    let fs = SimVfs::new();
    let t = planner_table(&fs);
    let mut q = Query::new().cond(b"tag", Op::StrOr, b"odd").unwrap();
    q.order = Some((b"id".to_vec(), OrderType::StrDesc));
    q.limit = Some(3);
    let f = search(&t, &q).unwrap();
    assert_eq!(
        f.keys,
        vec![b"k01999".to_vec(), b"k01997".to_vec(), b"k01995".to_vec()]
    );
    assert!(
        f.hint.contains("walking index \"id\" (lex) desc"),
        "{}",
        f.hint
    );
    assert!(records_read(&f.hint) <= 6, "{}", f.hint);
    // A cheap index filters the walk: no record it rules out is read (here none at all).
    let mut q = Query::new().cond(b"grp", Op::NumEq, b"3").unwrap();
    q.order = Some((b"id".to_vec(), OrderType::StrDesc));
    q.limit = Some(3);
    let f = search(&t, &q).unwrap();
    assert_eq!(
        f.keys,
        vec![b"k01993".to_vec(), b"k01983".to_vec(), b"k01973".to_vec()]
    );
    assert!(
        f.hint.contains("walking index \"id\" (lex) desc"),
        "{}",
        f.hint
    );
    assert!(
        f.hint.contains("filtering by index: \"grp\" NUMEQ"),
        "{}",
        f.hint
    );
    assert_eq!(records_read(&f.hint), 0, "{}", f.hint);
    // Numeric order on a decimal index, no condition.
    let mut q = Query::new();
    q.order = Some((b"grp".to_vec(), OrderType::NumDesc));
    q.limit = Some(2);
    let f = search(&t, &q).unwrap();
    assert_eq!(f.keys, vec![b"k01999".to_vec(), b"k01989".to_vec()]);
    assert!(
        f.hint.contains("walking index \"grp\" (dec) desc"),
        "{}",
        f.hint
    );
    // Without an ordered index on the column: a scan and a sort.
    let mut q = Query::new();
    q.order = Some((b"free".to_vec(), OrderType::NumAsc));
    q.limit = Some(2);
    let f = search(&t, &q).unwrap();
    assert_eq!(f.keys, vec![b"k00000".to_vec(), b"k00007".to_vec()]);
    assert!(f.hint.contains("scanning the whole table"), "{}", f.hint);
}

#[test]
fn run_search_replies_as_tyrant_and_removes_with_the_index_entries() {
    let fs = SimVfs::new();
    let t = planner_table(&fs);
    let s = parse_search(&[b"addcond\0grp\0NUMEQ\x003", b"setlimit\x002", b"get\0id"]).unwrap();
    let r = run_search(&t, &s).unwrap();
    // Chosen columns in the order named, `""` the primary key (as `tcadbmisc` replies).
    assert_eq!(r, vec![b"id\0id00003".to_vec(), b"id\0id00013".to_vec()]);
    let s = parse_search(&[b"addcond\0id\0STREQ\0id00005", b"get\0nope\0grp\0"]).unwrap();
    assert_eq!(
        run_search(&t, &s).unwrap(),
        vec![b"grp\x005\0\0k00005".to_vec()]
    );
    let s = parse_search(&[b"addcond\0id\0STREQ\0id00005", b"get"]).unwrap();
    let all =
        b"\0k00005\0id\0id00005\0grp\x005\0tag\0odd\0text\0record number 5 of many\0free\x005";
    assert_eq!(run_search(&t, &s).unwrap(), vec![all.to_vec()]);
    let s = parse_search(&[b"addcond\0grp\0NUMEQ\x003", b"count", b"hint"]).unwrap();
    let r = run_search(&t, &s).unwrap();
    assert_eq!(r[0], b"200");
    assert!(r[1].starts_with(b"\0\0[[HINT]]\n"));
    let s = parse_search(&[b"addcond\0grp\0NUMEQ\x003", b"out"]).unwrap();
    assert!(run_search(&t, &s).unwrap().is_empty());
    assert_eq!(t.rows(), 1800);
    assert!(t.check_indexes().unwrap().is_empty());
    let s = parse_search(&[b"addcond\0grp\0NUMEQ\x003"]).unwrap();
    assert!(run_search(&t, &s).unwrap().is_empty());
    // A metasearch: grp 1 or 2, limited as a whole, ordered by the first query's order.
    let s = parse_search(&[
        b"addcond\0grp\0NUMEQ\x001",
        b"setorder\0id\0STRDESC",
        b"setlimit\x003\x001",
        b"next",
        b"addcond\0grp\0NUMEQ\x002",
        b"mstype\0UNION",
    ])
    .unwrap();
    let r = run_search(&t, &s).unwrap();
    assert_eq!(
        r,
        vec![b"k01991".to_vec(), b"k01982".to_vec(), b"k01981".to_vec()]
    );
    let plain: &dyn Store = &t;
    assert!(plain.table().is_some());
}

#[test]
fn remove_keeps_a_record_changed_since_the_search() {
    let fs = SimVfs::new();
    let t = open(&fs);
    for i in 0..10 {
        let cols = Columns(vec![(b"state".to_vec(), b"drop".to_vec())]);
        t.put_row(format!("k{i}").as_bytes(), &cols, PutMode::Replace)
            .unwrap();
    }
    let q = Query::new().cond(b"state", Op::StrEq, b"drop").unwrap();
    let found = search(&t, &q).unwrap();
    assert_eq!(found.keys.len(), 10);
    // A writer changes two of them (so they no longer match) and removes a third.
    let keep = Columns(vec![(b"state".to_vec(), b"keep".to_vec())]);
    t.put_row(b"k3", &keep, PutMode::Replace).unwrap();
    t.put_row(b"k7", &keep, PutMode::Replace).unwrap();
    t.out_row(b"k5").unwrap();
    let n = remove(&t, &found.keys, std::slice::from_ref(&q), SetOp::Union).unwrap();
    assert_eq!(n, 7);
    assert_eq!(t.rows(), 2);
    assert_eq!(t.get_row(b"k3").unwrap(), Some(keep.clone()));
    assert_eq!(t.get_row(b"k7").unwrap(), Some(keep));
    // A difference re-checks every query: a record now also in the second set stays.
    let q2 = Query::new().cond(b"state", Op::StrEq, b"keep").unwrap();
    let n = remove(&t, &[b"k3".to_vec()], &[Query::new(), q2], SetOp::Diff).unwrap();
    assert_eq!(n, 0);
    assert!(t.check_indexes().unwrap().is_empty());
}

#[test]
fn search_out_never_removes_a_record_a_concurrent_writer_made_unmatching() {
    let fs = SimVfs::new();
    let t = Arc::new(open(&fs));
    t.set_index(
        b"state",
        IndexOp::Make {
            typ: IndexType::Lexical,
            keep: false,
        },
    )
    .unwrap();
    const N: usize = 400;
    let drop = Columns(vec![(b"state".to_vec(), b"drop".to_vec())]);
    for i in 0..N {
        t.put_row(format!("k{i:04}").as_bytes(), &drop, PutMode::Replace)
            .unwrap();
    }
    let q = Query::new().cond(b"state", Op::StrEq, b"drop").unwrap();
    let found = search(&*t, &q).unwrap();
    assert_eq!(found.keys.len(), N);
    // The removal walks the found keys forward while a writer changes them from the other end
    // so that they no longer match: they meet in the middle.
    let go = Arc::new(std::sync::Barrier::new(2));
    let writer = {
        let (t, go) = (t.clone(), go.clone());
        std::thread::spawn(move || {
            let keep = Columns(vec![(b"state".to_vec(), b"keep".to_vec())]);
            go.wait();
            for i in (0..N).rev() {
                t.put_row(format!("k{i:04}").as_bytes(), &keep, PutMode::Replace)
                    .unwrap();
            }
        })
    };
    go.wait();
    let removed = remove(&*t, &found.keys, std::slice::from_ref(&q), SetOp::Union).unwrap();
    writer.join().unwrap();
    // A key removed before the writer reached it was put again; one the writer had reached no
    // longer matched and was kept: every key ends as the writer left it.
    let mut kept = 0;
    for i in 0..N {
        if let Some(c) = t.get_row(format!("k{i:04}").as_bytes()).unwrap() {
            assert_eq!(c.get(b"state"), Some(&b"keep"[..]), "k{i:04}");
            kept += 1;
        }
    }
    assert_eq!(kept, N, "{removed} removed");
    assert!(t.check_indexes().unwrap().is_empty());
}
