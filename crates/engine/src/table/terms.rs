//! Index types and the keys of index entries.
//!
//! Each index is an ordered keyspace (byte order). A LEX or DEC index holds an entry per
//! record; its key ends with the primary key of the record it stands for, so every entry is a
//! key of its own:
//!
//! ```text
//! LEX  esc(value)       00 00  pk     value: empty
//! DEC  num(value)              pk     value: empty       (num: 8 bytes, see `dec_term`)
//! ```
//!
//! A TOK or QGR index holds posting lists (`postings`): per term (a token; a gram, with its
//! offsets in the text) chunks keyed `esc(term) 00 00 first_pk`, each listing records.
//!
//! `esc` writes each 00 byte as 00 FF, so `esc(a) 00 00` sorts as `a` does and no term's
//! escape is a prefix of another term's with its terminator: a scan of one term (or of every
//! term starting with a prefix: `esc(prefix)` without the terminator) is one key range.
//! `num` is the IEEE-754 double of Tokyo Cabinet's `tctdbatof` of the value, made to sort as
//! the numbers do (sign bit flipped for positives, every bit for negatives; -0 as 0, NaN
//! above +inf).
//!
//! Tokens are what Tokyo Cabinet's token index takes: runs of bytes other than a comma and
//! bytes up to the space (controls included). Q-grams are its full-text units: the text as
//! UCS-2 characters, normalized (white space folded to one space and trimmed, lower case,
//! Latin accents removed, full-width ASCII made narrow), and at each character the up to three
//! characters starting there, with that character's offset.

use crate::error::{Error, Result};
use crate::log::format::{get_varint, put_varint};

/// The kinds of index (Tokyo Cabinet's `setindex` types).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IndexType {
    /// The whole value, in byte order (`TDBITLEXICAL`, 0).
    Lexical,
    /// The value as a decimal number, in numeric order (`TDBITDECIMAL`, 1).
    Decimal,
    /// Each token of the value (`TDBITTOKEN`, 2).
    Token,
    /// Q-grams of the value, for full-text search (`TDBITQGRAM`, 3).
    QGram,
}

/// What a `setindex` asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexOp {
    /// Make an index of this type (replacing the column's index of another type, or
    /// rebuilding one of the same type), unless `keep` and the column has an index.
    Make { typ: IndexType, keep: bool },
    /// Optimize the column's index (`TDBITOPT`, 9998).
    Optimize,
    /// Drop the column's index (`TDBITVOID`, 9999).
    Void,
}

/// Tokyo Cabinet's numeric codes.
pub const TC_OPT: i64 = 9998;
pub const TC_VOID: i64 = 9999;
pub const TC_KEEP: i64 = 1 << 24;

impl IndexType {
    /// Tokyo Cabinet's code.
    pub fn code(self) -> u8 {
        match self {
            IndexType::Lexical => 0,
            IndexType::Decimal => 1,
            IndexType::Token => 2,
            IndexType::QGram => 3,
        }
    }

    pub fn from_code(c: u8) -> Option<IndexType> {
        Some(match c {
            0 => IndexType::Lexical,
            1 => IndexType::Decimal,
            2 => IndexType::Token,
            3 => IndexType::QGram,
            _ => return None,
        })
    }

    /// Its short name: `lex`, `dec`, `tok`, `qgr` (Tokyo Cabinet's index file suffixes).
    pub fn name(self) -> &'static str {
        match self {
            IndexType::Lexical => "lex",
            IndexType::Decimal => "dec",
            IndexType::Token => "tok",
            IndexType::QGram => "qgr",
        }
    }
}

impl IndexOp {
    /// A `setindex` type as Tokyo Cabinet's tools and Tyrant's `misc setindex` give it: a
    /// number (0–3, 9998, 9999, plus 1<<24 for KEEP) or a name (`lexical`/`lex`/`str`,
    /// `decimal`/`dec`/`num`, `token`/`tok`, `qgram`/`qgr`/`fts`, `opt`/`optimize`, `void`),
    /// case-insensitive, a leading `+` meaning KEEP.
    pub fn parse(s: &str) -> Result<IndexOp> {
        let bad = || {
            Error::InvalidParam(format!(
                "index type `{s}`: expected lexical, decimal, token, qgram, opt or void (or \
                 Tokyo Cabinet's number), `+` before it for keep"
            ))
        };
        let t = s.trim();
        if let Ok(n) = t.parse::<i64>() {
            return IndexOp::from_tc(n).ok_or_else(bad);
        }
        let (keep, name) = match t.strip_prefix('+') {
            Some(rest) => (true, rest),
            None => (false, t),
        };
        let typ = match name.to_ascii_lowercase().as_str() {
            "lexical" | "lex" | "str" => IndexType::Lexical,
            "decimal" | "dec" | "num" => IndexType::Decimal,
            "token" | "tok" => IndexType::Token,
            "qgram" | "qgr" | "fts" => IndexType::QGram,
            "opt" | "optimize" if !keep => return Ok(IndexOp::Optimize),
            "void" if !keep => return Ok(IndexOp::Void),
            _ => return Err(bad()),
        };
        Ok(IndexOp::Make { typ, keep })
    }

    /// Tokyo Cabinet's number.
    pub fn from_tc(n: i64) -> Option<IndexOp> {
        let keep = n & TC_KEEP != 0;
        let base = n & !TC_KEEP;
        Some(match base {
            TC_OPT => IndexOp::Optimize,
            TC_VOID => IndexOp::Void,
            0..=3 => IndexOp::Make {
                typ: IndexType::from_code(base as u8)?,
                keep,
            },
            _ => return None,
        })
    }
}

/// `esc(term) 00 00` appended to `out` (see the module's documentation).
pub fn put_term(out: &mut Vec<u8>, term: &[u8]) {
    put_prefix(out, term);
    out.extend_from_slice(&[0, 0]);
}

/// `esc(prefix)` appended to `out`: every entry of a term starting with `prefix` starts with
/// it.
pub fn put_prefix(out: &mut Vec<u8>, prefix: &[u8]) {
    for &b in prefix {
        out.push(b);
        if b == 0 {
            out.push(0xff);
        }
    }
}

/// The 8 bytes that sort as `x` does among doubles.
pub fn dec_term(x: f64) -> [u8; 8] {
    let x = if x == 0.0 {
        0.0
    } else if x.is_nan() {
        f64::NAN
    } else {
        x
    };
    let bits = x.to_bits();
    let ordered = if bits >> 63 == 1 {
        !bits
    } else {
        bits ^ (1 << 63)
    };
    ordered.to_be_bytes()
}

/// The double [`dec_term`] made.
pub fn dec_of_term(b: [u8; 8]) -> f64 {
    let o = u64::from_be_bytes(b);
    let bits = if o >> 63 == 1 { o ^ (1 << 63) } else { !o };
    f64::from_bits(bits)
}

/// Tokyo Cabinet's `tctdbatof`: leading white space, a sign, `inf` or `nan`, digits, a point
/// and at most 16 significant digits in all; anything else ends the number (`12abc` is 12,
/// `abc` is 0).
pub fn tc_atof(s: &[u8]) -> f64 {
    let mut i = 0;
    while i < s.len() && s[i] > 0 && s[i] <= b' ' {
        i += 1;
    }
    let mut sign = 1.0;
    if i < s.len() && s[i] == b'-' {
        sign = -1.0;
        i += 1;
    } else if i < s.len() && s[i] == b'+' {
        i += 1;
    }
    let rest = &s[i..];
    if rest.len() >= 3 && rest[..3].eq_ignore_ascii_case(b"inf") {
        return sign * f64::INFINITY;
    }
    if rest.len() >= 3 && rest[..3].eq_ignore_ascii_case(b"nan") {
        return f64::NAN;
    }
    let mut num = 0.0f64;
    let mut col = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        num = num * 10.0 + f64::from(s[i] - b'0');
        i += 1;
        if num > 0.0 {
            col += 1;
        }
    }
    if i < s.len() && s[i] == b'.' {
        i += 1;
        let mut fract = 0.0;
        let mut base = 10.0;
        while col < 16 && i < s.len() && s[i].is_ascii_digit() {
            fract += f64::from(s[i] - b'0') / base;
            i += 1;
            col += 1;
            base *= 10.0;
        }
        num += fract;
    }
    num * sign
}

/// The tokens of a value, as Tokyo Cabinet's token index splits it (at commas and at bytes up
/// to the space; a NUL ends the value, as it ends a C string).
pub fn tokens(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
    v[..end]
        .split(|&b| b <= b' ' || b == b',')
        .filter(|t| !t.is_empty())
}

/// The characters of a text after Tokyo Cabinet's full-text normalization (see the module's
/// documentation). Bytes that are not UTF-8 count as U+FFFD; characters above the 16-bit
/// range (which UCS-2 cannot hold) too.
pub fn normalize(text: &[u8]) -> Vec<char> {
    let s = String::from_utf8_lossy(text);
    let mut out: Vec<char> = Vec::with_capacity(s.len());
    for c in s.chars() {
        let c = if u32::from(c) > 0xffff { '\u{fffd}' } else { c };
        let c = narrow(c);
        if c <= ' ' || c == '\u{3000}' || c.is_whitespace() {
            if out.last().is_some_and(|&l| l != ' ') {
                out.push(' ');
            }
            continue;
        }
        for l in c.to_lowercase() {
            out.push(strip_accent(l));
        }
    }
    if out.last() == Some(&' ') {
        out.pop();
    }
    out
}

/// A full-width ASCII form as its ASCII character.
fn narrow(c: char) -> char {
    match u32::from(c) {
        x @ 0xff01..=0xff5e => char::from_u32(x - 0xff01 + 0x21).unwrap_or(c),
        _ => c,
    }
}

/// A Latin letter with an accent as the letter without it (Latin-1 and Latin Extended-A).
fn strip_accent(c: char) -> char {
    const LATIN1: &str = "aaaaaaaceeeeiiiidnooooo/ouuuuypy";
    match u32::from(c) {
        x @ 0xe0..=0xff => {
            let r = LATIN1.as_bytes()[(x - 0xe0) as usize] as char;
            if r == '/' || x == 0xe6 || x == 0xf0 || x == 0xfe {
                c
            } else {
                r
            }
        }
        x @ 0x100..=0x17f => {
            // Ā..ſ in order, each as its base letter (Ĳ, Œ as their first).
            const EXT_A: &str = concat!(
                "aaaaaa",
                "cccccccc",
                "dddd",
                "eeeeeeeeee",
                "gggggggg",
                "hhhh",
                "iiiiiiiiii",
                "ii",
                "jj",
                "kkk",
                "llllllllll",
                "nnnnnnnnn",
                "oooooo",
                "oo",
                "rrrrrr",
                "ssssssss",
                "tttttt",
                "uuuuuuuuuuuu",
                "ww",
                "yyy",
                "zzzzzz",
                "s"
            );
            EXT_A
                .as_bytes()
                .get((x - 0x100) as usize)
                .map_or(c, |&b| b as char)
        }
        _ => c,
    }
}

/// The q-grams of a text: each, with the offsets (in normalized characters) where it starts,
/// in ascending order.
pub fn qgrams(text: &[u8]) -> std::collections::BTreeMap<String, Vec<u32>> {
    let chars = normalize(text);
    let mut out: std::collections::BTreeMap<String, Vec<u32>> = Default::default();
    for i in 0..chars.len() {
        let g: String = chars[i..(i + QGRAM).min(chars.len())].iter().collect();
        out.entry(g).or_default().push(i as u32);
    }
    out
}

/// Characters in a q-gram.
pub const QGRAM: usize = 3;

/// One entry of an index, decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry<'a> {
    /// The term: the value (LEX), token (TOK) or gram (QGR), unescaped; for DEC, its 8 bytes.
    pub term: Vec<u8>,
    /// The record's primary key.
    pub pk: &'a [u8],
    /// The gram's offsets (QGR), else empty.
    pub offsets: Vec<u32>,
}

/// Decode an index entry (key and value) of an index of type `typ`.
pub fn decode_entry<'a>(typ: IndexType, key: &'a [u8], value: &[u8]) -> Result<Entry<'a>> {
    let bad = || Error::Corrupt(format!("a {} index entry that does not parse", typ.name()));
    let (term, pk) = match typ {
        IndexType::Decimal => {
            if key.len() < 8 {
                return Err(bad());
            }
            (key[..8].to_vec(), &key[8..])
        }
        _ => {
            let mut term = Vec::new();
            let mut i = 0;
            loop {
                let b = *key.get(i).ok_or_else(bad)?;
                if b == 0 {
                    match key.get(i + 1) {
                        Some(0xff) => term.push(0),
                        Some(0) => break,
                        _ => return Err(bad()),
                    }
                    i += 2;
                } else {
                    term.push(b);
                    i += 1;
                }
            }
            (term, &key[i + 2..])
        }
    };
    let mut offsets = Vec::new();
    if typ == IndexType::QGram {
        let mut pos = 0;
        while pos < value.len() {
            let o = get_varint(value, &mut pos).ok_or_else(bad)?;
            offsets.push(u32::try_from(o).map_err(|_| bad())?);
        }
    }
    Ok(Entry { term, pk, offsets })
}

/// The terms of a record's value in an index of type `typ` (token or q-gram), each with its
/// offsets (q-grams; empty for tokens).
pub fn postings_of(typ: IndexType, value: &[u8]) -> std::collections::BTreeMap<Vec<u8>, Vec<u32>> {
    match typ {
        IndexType::QGram => qgrams(value)
            .into_iter()
            .map(|(g, o)| (g.into_bytes(), o))
            .collect(),
        _ => tokens(value).map(|t| (t.to_vec(), Vec::new())).collect(),
    }
}

/// Every entry a record's value of an indexed column makes (key → value), added to `out`: for
/// LEX and DEC the index's entries; for TOK and QGR one per (term, record), the key a chunk
/// starting at that record has and the offsets as varints (what `postings` lists).
pub fn entries_of(
    typ: IndexType,
    pk: &[u8],
    value: &[u8],
    out: &mut std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
) {
    let keyed = |term: &[u8]| {
        let mut k = Vec::with_capacity(term.len() + 2 + pk.len());
        put_term(&mut k, term);
        k.extend_from_slice(pk);
        k
    };
    match typ {
        IndexType::Lexical => {
            out.insert(keyed(value), Vec::new());
        }
        IndexType::Decimal => {
            let mut k = dec_term(tc_atof(value)).to_vec();
            k.extend_from_slice(pk);
            out.insert(k, Vec::new());
        }
        IndexType::Token => {
            for t in tokens(value) {
                out.insert(keyed(t), Vec::new());
            }
        }
        IndexType::QGram => {
            for (g, offs) in qgrams(value) {
                let mut v = Vec::with_capacity(offs.len() * 2);
                for o in offs {
                    put_varint(&mut v, u64::from(o));
                }
                out.insert(keyed(g.as_bytes()), v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn index_ops_parse_names_and_tokyo_numbers() {
        use IndexType::*;
        let make = |typ, keep| IndexOp::Make { typ, keep };
        assert_eq!(IndexOp::parse("lexical").unwrap(), make(Lexical, false));
        assert_eq!(IndexOp::parse("DEC").unwrap(), make(Decimal, false));
        assert_eq!(IndexOp::parse("+tok").unwrap(), make(Token, true));
        assert_eq!(IndexOp::parse("qgram").unwrap(), make(QGram, false));
        assert_eq!(IndexOp::parse("3").unwrap(), make(QGram, false));
        assert_eq!(
            IndexOp::parse(&(TC_KEEP + 1).to_string()).unwrap(),
            make(Decimal, true)
        );
        assert_eq!(IndexOp::parse("9998").unwrap(), IndexOp::Optimize);
        assert_eq!(IndexOp::parse("void").unwrap(), IndexOp::Void);
        for bad in ["", "4", "x", "+void", "-1"] {
            assert!(IndexOp::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn decimal_terms_sort_as_numbers() {
        let nums = [
            f64::NEG_INFINITY,
            -1e300,
            -2.5,
            -1.0,
            -1e-300,
            0.0,
            1e-300,
            1.0,
            2.0,
            10.0,
            1e300,
            f64::INFINITY,
        ];
        for w in nums.windows(2) {
            assert!(dec_term(w[0]) < dec_term(w[1]), "{} < {}", w[0], w[1]);
        }
        assert_eq!(dec_term(-0.0), dec_term(0.0));
        for x in nums {
            assert_eq!(dec_of_term(dec_term(x)), x);
        }
        assert!(dec_term(f64::NAN) > dec_term(f64::INFINITY));
    }

    #[test]
    fn tc_atof_reads_as_tokyo_cabinet() {
        let cases: &[(&[u8], f64)] = &[
            (b"12", 12.0),
            (b"  -3.5", -3.5),
            (b"+7", 7.0),
            (b"12abc", 12.0),
            (b"abc", 0.0),
            (b"", 0.0),
            (b"0.25", 0.25),
            (b"1e3", 1.0),
            (b"-inf", f64::NEG_INFINITY),
        ];
        for (s, want) in cases {
            assert_eq!(tc_atof(s), *want, "{:?}", String::from_utf8_lossy(s));
        }
        assert!(tc_atof(b"nan").is_nan());
    }

    #[test]
    fn tokens_split_at_commas_and_spaces() {
        let t: Vec<&[u8]> = tokens(b" a,b  c,,\td\0e").collect();
        assert_eq!(t, [&b"a"[..], b"b", b"c", b"d"]);
        assert_eq!(tokens(b"").count(), 0);
    }

    #[test]
    fn qgrams_of_normalized_text_with_offsets() {
        let g = qgrams("  Ab\u{00c9}  Ab ".as_bytes());
        // "abe ab": abe@0 "be "@1 "e a"@2 " ab"@3 ab@4 b@5
        let want: BTreeMap<String, Vec<u32>> = [
            ("abe", vec![0]),
            ("be ", vec![1]),
            ("e a", vec![2]),
            (" ab", vec![3]),
            ("ab", vec![4]),
            ("b", vec![5]),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(g, want);
        assert_eq!(normalize("ＡＢＣ".as_bytes()), ['a', 'b', 'c']);
        let rep = qgrams(b"aaaa");
        assert_eq!(rep["aaa"], [0, 1]);
    }

    #[test]
    fn entries_decode_to_their_term_and_primary_key() {
        for typ in [
            IndexType::Lexical,
            IndexType::Decimal,
            IndexType::Token,
            IndexType::QGram,
        ] {
            let mut out = BTreeMap::new();
            entries_of(typ, b"p\0k", b"a\0b 12 x,y", &mut out);
            assert!(!out.is_empty());
            for (k, v) in &out {
                let e = decode_entry(typ, k, v).unwrap();
                assert_eq!(e.pk, b"p\0k", "{typ:?}");
                if typ == IndexType::Lexical {
                    assert_eq!(e.term, b"a\0b 12 x,y");
                }
                if typ == IndexType::QGram {
                    assert!(!e.offsets.is_empty());
                }
            }
        }
        // Escaping keeps the order of the terms and no term is a prefix of another.
        let key = |t: &[u8]| {
            let mut k = Vec::new();
            put_term(&mut k, t);
            k
        };
        let terms: [&[u8]; 5] = [b"", b"\0", b"\0\0", b"a", b"a\0"];
        for w in terms.windows(2) {
            assert!(key(w[0]) < key(w[1]), "{:?}", w);
        }
        assert!(decode_entry(IndexType::Lexical, b"ab\0", b"").is_err());
        assert!(decode_entry(IndexType::Decimal, b"1234567", b"").is_err());
        assert!(decode_entry(IndexType::QGram, b"a\0\0p", b"\x80").is_err());
    }
}
