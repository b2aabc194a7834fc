//! Unit tests of the table kind: records through the table API and the plain key/value
//! interface, indexes of every type against the entries recomputed from the records (a model
//! test), online builds under writers, drops, unique ids, reopen, check and repair.

use super::*;
use crate::io::{CrashMode, SimVfs};
use crate::store::{Decision, Value};
use std::collections::BTreeMap;

const PARAMS_SMALL: &str = "segsiz=64k#bufsiz=4k#leafsiz=256";

fn open(fs: &SimVfs, mode: OpenMode) -> Result<TableDb> {
    TableDb::open_mode(
        Path::new("/sim/t.kt"),
        &Params::parse(PARAMS_SMALL).unwrap(),
        Arc::new(fs.clone()),
        mode,
    )
}

fn cols(pairs: &[(&str, &str)]) -> Columns {
    Columns::from_pairs(pairs).unwrap()
}

/// The entries of the index of `column`, read from its keyspace.
fn stored_entries(t: &TableDb, column: &[u8]) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let ix = t
        .schema()
        .iter()
        .find(|i| i.column == column)
        .cloned()
        .unwrap();
    let mut out = BTreeMap::new();
    ix.store
        .for_each_record(&mut |k, v, _| {
            if ix.chunked() {
                super::postings::expand(ix.typ, k, v, &mut out)?;
            } else {
                out.insert(k.to_vec(), v.to_vec());
            }
            Ok(true)
        })
        .unwrap();
    out
}

/// The entries an index of `typ` on `column` must hold for the records `model`.
fn model_entries(
    model: &BTreeMap<Vec<u8>, Columns>,
    column: &[u8],
    typ: IndexType,
) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut out = BTreeMap::new();
    for (pk, c) in model {
        let v = if column.is_empty() {
            Some(pk.as_slice())
        } else {
            c.get(column)
        };
        if let Some(v) = v {
            terms::entries_of(typ, pk, v, &mut out);
        }
    }
    out
}

#[test]
fn records_put_putkeep_putcat_get_out() {
    let fs = SimVfs::new();
    let t = open(&fs, OpenMode::Create).unwrap();
    assert!(t
        .put_row(
            b"1",
            &cols(&[("name", "alice"), ("age", "30")]),
            PutMode::Replace
        )
        .unwrap());
    assert!(!t
        .put_row(b"1", &cols(&[("name", "bob")]), PutMode::Keep)
        .unwrap());
    assert!(t
        .put_row(
            b"1",
            &cols(&[("age", "31"), ("city", "paris")]),
            PutMode::Cat
        )
        .unwrap());
    // Only the new column is added: the record's own keep their values (tctdbputcat).
    assert_eq!(
        t.get_row(b"1").unwrap().unwrap(),
        cols(&[("name", "alice"), ("age", "30"), ("city", "paris")])
    );
    assert_eq!(
        t.get_columns(b"1", &[b"city", b"name"]).unwrap().unwrap(),
        cols(&[("name", "alice"), ("city", "paris")])
    );
    // putcat of an absent record stores it.
    assert!(t.put_row(b"2", &cols(&[("x", "1")]), PutMode::Cat).unwrap());
    assert_eq!(t.rows(), 2);
    assert!(t.out_row(b"2").unwrap());
    assert!(!t.out_row(b"2").unwrap());
    assert_eq!(t.get_row(b"2").unwrap(), None);
    assert_eq!(t.rows(), 1);
    t.close().unwrap();
}

/// Through the plain key/value interface a record's value is Tokyo Cabinet's wire form; a
/// value that is not one, an expiration and a touch are refused and nothing is stored.
#[test]
fn the_store_interface_speaks_the_wire_form() {
    let fs = SimVfs::new();
    let t = open(&fs, OpenMode::Create).unwrap();
    let s: &dyn Store = &t;
    assert!(s.table().is_some());
    s.put(b"k", b"name\0alice\0age\x0030").unwrap();
    assert_eq!(
        t.get_row(b"k").unwrap().unwrap().get(b"age"),
        Some(&b"30"[..])
    );
    assert_eq!(
        s.get(b"k").unwrap().unwrap().value,
        b"name\0alice\0age\x0030"
    );
    let mut seen = Vec::new();
    assert!(s.view(b"k", &mut |v, _| seen = v.to_vec()).unwrap());
    assert_eq!(seen, b"name\0alice\0age\x0030");
    for bad in [&b"odd"[..], b"a\0b\0c", b"\0v"] {
        assert!(matches!(s.put(b"k", bad), Err(Error::InvalidParam(_))));
        assert!(matches!(s.put(b"new", bad), Err(Error::InvalidParam(_))));
    }
    assert_eq!(s.get(b"new").unwrap(), None);
    assert!(matches!(
        s.put_with(b"k", b"a\0b", 0, 99),
        Err(Error::Unsupported(_))
    ));
    assert!(matches!(
        s.accept(b"k", &mut |_| Decision::Touch { expires: 5 }),
        Err(Error::Unsupported(_))
    ));
    assert_eq!(
        s.get(b"k").unwrap().unwrap().value,
        b"name\0alice\0age\x0030"
    );
    // An empty value is a record of no columns; flags are kept.
    s.put_with(b"e", b"", 7, 0).unwrap();
    let r = s.get(b"e").unwrap().unwrap();
    assert_eq!((r.value.as_slice(), r.meta.flags), (&b""[..], 7));
    // A visitor sees the wire form.
    s.accept(b"k", &mut |cur| {
        assert_eq!(cur.unwrap().value, b"name\0alice\0age\x0030");
        Decision::Put {
            value: Value::Lent(b"name\0carol"),
            flags: 0,
            expires: 0,
        }
    })
    .unwrap();
    assert_eq!(s.get(b"k").unwrap().unwrap().value, b"name\0carol");
    // Batches, cursors and ranges in primary-key order.
    s.write_batch(&[
        BatchOp::Put {
            key: b"b".to_vec(),
            value: b"x\x001".to_vec(),
            flags: 0,
            expires: 0,
        },
        BatchOp::Remove { key: b"e".to_vec() },
        BatchOp::Put {
            key: b"a".to_vec(),
            value: b"x\x002".to_vec(),
            flags: 0,
            expires: 0,
        },
    ])
    .unwrap();
    assert!(s
        .write_batch(&[
            BatchOp::Put {
                key: b"c".to_vec(),
                value: b"x\x003".to_vec(),
                flags: 0,
                expires: 0,
            },
            BatchOp::Put {
                key: b"d".to_vec(),
                value: b"bad".to_vec(),
                flags: 0,
                expires: 0,
            },
        ])
        .is_err());
    assert_eq!(
        s.get(b"c").unwrap(),
        None,
        "a refused batch changes nothing"
    );
    let mut c = s.cursor().unwrap();
    let mut walked = Vec::new();
    while let Some((k, r)) = c.next().unwrap() {
        walked.push((k, r.value));
    }
    assert_eq!(
        walked,
        vec![
            (b"a".to_vec(), b"x\x002".to_vec()),
            (b"b".to_vec(), b"x\x001".to_vec()),
            (b"k".to_vec(), b"name\0carol".to_vec())
        ]
    );
    assert!(c.last().unwrap());
    assert_eq!(c.get().unwrap().unwrap().0, b"k");
    assert_eq!(
        s.range(b"b", None, 10).unwrap(),
        vec![b"b".to_vec(), b"k".to_vec()]
    );
    assert!(matches!(s.keyspace("x", ""), Err(Error::Unsupported(_))));
    assert!(s.keyspaces().is_empty());
    t.close().unwrap();
}

/// Every index type holds exactly the entries the records make, through puts, putcats and
/// outs; TOK and QGR entries are found by their terms.
#[test]
fn indexes_follow_every_write() {
    let fs = SimVfs::new();
    let t = open(&fs, OpenMode::Create).unwrap();
    let specs: [(&[u8], IndexType); 5] = [
        (b"name", IndexType::Lexical),
        (b"age", IndexType::Decimal),
        (b"tags", IndexType::Token),
        (b"text", IndexType::QGram),
        (b"", IndexType::Decimal),
    ];
    for (c, typ) in specs {
        assert!(t.set_index(c, IndexOp::Make { typ, keep: false }).unwrap());
    }
    let mut model: BTreeMap<Vec<u8>, Columns> = BTreeMap::new();
    let mut put = |t: &TableDb, pk: &str, c: Columns, mode: PutMode| {
        t.put_row(pk.as_bytes(), &c, mode).unwrap();
        match (mode, model.get_mut(pk.as_bytes())) {
            (PutMode::Cat, Some(old)) => old.merge(&c),
            _ => {
                model.insert(pk.as_bytes().to_vec(), c);
            }
        }
        model.clone()
    };
    put(
        &t,
        "10",
        cols(&[
            ("name", "alice"),
            ("age", "30"),
            ("tags", "a,b c"),
            ("text", "Hello World"),
        ]),
        PutMode::Replace,
    );
    put(
        &t,
        "9",
        cols(&[("name", "bob"), ("age", "-2.5")]),
        PutMode::Replace,
    );
    put(
        &t,
        "10",
        cols(&[("tags", "b,d"), ("age", "7")]),
        PutMode::Cat,
    );
    let m = put(&t, "11", cols(&[("text", "hello")]), PutMode::Replace);
    for (c, typ) in specs {
        assert_eq!(stored_entries(&t, c), model_entries(&m, c, typ), "{c:?}");
    }
    t.out_row(b"10").unwrap();
    let mut m = m;
    m.remove(&b"10"[..]);
    for (c, typ) in specs {
        assert_eq!(stored_entries(&t, c), model_entries(&m, c, typ), "{c:?}");
    }
    // The decimal index is in numeric order: -2.5 (9) before 11 (the pk index).
    let (typ, dec) = t.index(b"age").unwrap();
    assert_eq!(typ, IndexType::Decimal);
    let mut pks = Vec::new();
    dec.for_each_record(&mut |k, v, _| {
        pks.push(terms::decode_entry(typ, k, v).unwrap().pk.to_vec());
        Ok(true)
    })
    .unwrap();
    assert_eq!(pks, vec![b"9".to_vec()]);
    let (_, pk_ix) = t.index(b"").unwrap();
    let mut nums = Vec::new();
    pk_ix
        .for_each_record(&mut |k, _, _| {
            nums.push(terms::dec_of_term(k[..8].try_into().unwrap()));
            Ok(true)
        })
        .unwrap();
    assert_eq!(nums, [9.0, 11.0]);
    assert!(t.check_indexes().unwrap().is_empty());
    assert!(t.check().unwrap().healthy());
    t.close().unwrap();
}

/// setindex: KEEP on an indexed column stores nothing, a make of another type replaces the
/// index, OPT and VOID need an index, VOID empties its keyspace; the indexes survive a
/// reopen.
#[test]
fn setindex_keep_replace_opt_void_and_reopen() {
    let fs = SimVfs::new();
    let t = open(&fs, OpenMode::Create).unwrap();
    for i in 0..600 {
        t.put_row(
            format!("k{i}").as_bytes(),
            &cols(&[("n", &i.to_string()), ("w", "x y")]),
            PutMode::Replace,
        )
        .unwrap();
    }
    let lex = IndexOp::Make {
        typ: IndexType::Lexical,
        keep: false,
    };
    assert!(t.set_index(b"n", lex).unwrap());
    assert_eq!(t.indexes()[0].entries, 600);
    assert!(!t
        .set_index(
            b"n",
            IndexOp::Make {
                typ: IndexType::Decimal,
                keep: true
            }
        )
        .unwrap());
    assert_eq!(t.indexes()[0].typ, IndexType::Lexical);
    assert!(t
        .set_index(
            b"n",
            IndexOp::Make {
                typ: IndexType::Decimal,
                keep: false
            }
        )
        .unwrap());
    assert_eq!(t.indexes()[0].typ, IndexType::Decimal);
    assert!(matches!(
        t.set_index(b"w", IndexOp::Void),
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        t.set_index(b"w", IndexOp::Optimize),
        Err(Error::NotFound(_))
    ));
    assert!(t.set_index(b"n", IndexOp::Optimize).unwrap());
    t.set_index(
        b"w",
        IndexOp::Make {
            typ: IndexType::Token,
            keep: false,
        },
    )
    .unwrap();
    assert_eq!(t.indexes()[1].entries, 1200);
    t.close().unwrap();
    let t = open(&fs, OpenMode::Existing).unwrap();
    let names: Vec<(Vec<u8>, IndexType, bool)> = t
        .indexes()
        .into_iter()
        .map(|i| (i.column, i.typ, i.ready))
        .collect();
    assert_eq!(
        names,
        vec![
            (b"n".to_vec(), IndexType::Decimal, true),
            (b"w".to_vec(), IndexType::Token, true)
        ]
    );
    let (_, w) = t.index(b"w").unwrap();
    assert!(t.set_index(b"w", IndexOp::Void).unwrap());
    assert_eq!(w.count(), 0, "a dropped index's keyspace is emptied");
    assert!(t.index(b"w").is_none());
    assert!(t.check_indexes().unwrap().is_empty());
    t.close().unwrap();
    let t = open(&fs, OpenMode::Existing).unwrap();
    assert_eq!(t.indexes().len(), 1);
    t.close().unwrap();
}

/// An index made while writers run is built online and agrees with the records after.
#[test]
fn an_index_built_while_writers_run_agrees_with_the_records() {
    let fs = SimVfs::new();
    let t = Arc::new(open(&fs, OpenMode::Create).unwrap());
    for i in 0..3000 {
        t.put_row(
            format!("{i:05}").as_bytes(),
            &cols(&[("v", &(i % 97).to_string())]),
            PutMode::Replace,
        )
        .unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let t = t.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) || n < 500 {
                    let k = format!("{:05}", (n * 7919 + w * 13) % 3500);
                    match n % 5 {
                        0 => {
                            t.out_row(k.as_bytes()).unwrap();
                        }
                        1 => {
                            t.put_row(k.as_bytes(), &cols(&[("o", "1")]), PutMode::Cat)
                                .unwrap();
                        }
                        _ => {
                            t.put_row(
                                k.as_bytes(),
                                &cols(&[("v", &(n % 89).to_string())]),
                                PutMode::Replace,
                            )
                            .unwrap();
                        }
                    }
                    n += 1;
                }
            })
        })
        .collect();
    t.set_index(
        b"v",
        IndexOp::Make {
            typ: IndexType::Decimal,
            keep: false,
        },
    )
    .unwrap();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let mut model = BTreeMap::new();
    t.for_each_row(&KeyRange::new(b"", None), &mut |k, c| {
        model.insert(k.to_vec(), c.clone());
        Ok(true)
    })
    .unwrap();
    assert_eq!(
        stored_entries(&t, b"v"),
        model_entries(&model, b"v", IndexType::Decimal)
    );
    assert!(t.check_indexes().unwrap().is_empty());
    t.close().unwrap();
}

/// check finds an index entry no record makes and a record whose entry is missing; rebuild
/// fixes both.
#[test]
fn check_finds_disagreements_and_rebuild_fixes_them() {
    let fs = SimVfs::new();
    let t = open(&fs, OpenMode::Create).unwrap();
    t.set_index(
        b"c",
        IndexOp::Make {
            typ: IndexType::Lexical,
            keep: false,
        },
    )
    .unwrap();
    t.put_row(b"a", &cols(&[("c", "1")]), PutMode::Replace)
        .unwrap();
    t.put_row(b"b", &cols(&[("c", "2")]), PutMode::Replace)
        .unwrap();
    let (_, ix) = t.index(b"c").unwrap();
    let mut stray = Vec::new();
    terms::put_term(&mut stray, b"9");
    stray.extend_from_slice(b"zz");
    ix.put(&stray, b"").unwrap();
    let mut b_entry = Vec::new();
    terms::put_term(&mut b_entry, b"2");
    b_entry.extend_from_slice(b"b");
    assert!(ix.out(&b_entry).unwrap());
    let problems = t.check_indexes().unwrap();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(!t.check().unwrap().healthy());
    t.rebuild_indexes().unwrap();
    assert!(t.check_indexes().unwrap().is_empty());
    assert_eq!(ix.count(), 2);
    t.close().unwrap();
}

/// Unique ids increase, and never repeat after a reopen or a crash.
#[test]
fn genuid_never_repeats_across_reopen_and_crash() {
    let fs = SimVfs::new();
    let t = open(&fs, OpenMode::Create).unwrap();
    let a: Vec<u64> = (0..3).map(|_| t.genuid().unwrap()).collect();
    assert_eq!(a, [1, 2, 3]);
    t.close().unwrap();
    let t = open(&fs, OpenMode::Existing).unwrap();
    let b = t.genuid().unwrap();
    assert!(b > 3);
    for _ in 0..UID_BLOCK + 5 {
        t.genuid().unwrap();
    }
    let last = t.genuid().unwrap();
    t.abandon();
    let fs = SimVfs::from_image(&fs.crash_image(CrashMode::DropUnsynced));
    let t = open(&fs, OpenMode::Existing).unwrap();
    assert!(t.genuid().unwrap() > last);
    t.close().unwrap();
}

/// A tree database is not taken for a table; a vanish empties records and indexes.
#[test]
fn a_tree_is_not_a_table_and_vanish_empties_everything() {
    let fs = SimVfs::new();
    let tree = DiskTree::open_mode(
        Path::new("/sim/t.kt"),
        &Params::default(),
        Arc::new(fs.clone()),
        OpenMode::Create,
    )
    .unwrap();
    tree.put(b"k", b"v").unwrap();
    tree.close().unwrap();
    assert!(matches!(
        open(&fs, OpenMode::Existing),
        Err(Error::NotADatabase(_))
    ));
    let fs = SimVfs::new();
    let t = open(&fs, OpenMode::Create).unwrap();
    t.set_index(
        b"c",
        IndexOp::Make {
            typ: IndexType::Token,
            keep: false,
        },
    )
    .unwrap();
    for i in 0..50 {
        t.put_row(
            format!("{i}").as_bytes(),
            &cols(&[("c", "a b c")]),
            PutMode::Replace,
        )
        .unwrap();
    }
    t.vanish().unwrap();
    assert_eq!(t.rows(), 0);
    assert_eq!(t.indexes()[0].entries, 0);
    assert!(t.indexes()[0].ready);
    t.put_row(b"x", &cols(&[("c", "q")]), PutMode::Replace)
        .unwrap();
    assert_eq!(t.indexes()[0].entries, 1);
    t.close().unwrap();
}

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const WORDS: [&str; 8] = ["apple", "Äpfel", "pear", "12", "-3.5", "x,y z", "", "ａｂ"];

/// Random columns over `a` to `d`, values of random words.
fn random_cols(rng: &mut Rng) -> Columns {
    let mut c = Columns::new();
    for _ in 0..rng.below(4) {
        let name = ["a", "b", "c", "d"][rng.below(4) as usize];
        let words: Vec<&str> = (0..rng.below(3))
            .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
            .collect();
        c.set(name.as_bytes(), words.join(" ").as_bytes()).unwrap();
    }
    c
}

/// The model test: random puts, putkeeps, putcats and outs with random columns on indexed
/// columns (one of each type, and the primary key), index changes and reopens among them;
/// after each operation every index equals the index recomputed from the records, and the
/// records equal the model's.
#[test]
fn model_every_index_equals_the_one_recomputed_from_the_records() {
    let specs: [(&[u8], IndexType); 5] = [
        (b"a", IndexType::Lexical),
        (b"b", IndexType::Decimal),
        (b"c", IndexType::Token),
        (b"d", IndexType::QGram),
        (b"", IndexType::Lexical),
    ];
    for seed in 1..=3u64 {
        let mut rng = Rng(seed);
        let fs = SimVfs::new();
        let mut t = open(&fs, OpenMode::Create).unwrap();
        let mut model: BTreeMap<Vec<u8>, Columns> = BTreeMap::new();
        let mut live: Vec<(&[u8], IndexType)> = Vec::new();
        for step in 0..400 {
            let pk = format!("{}", rng.below(40)).into_bytes();
            match rng.below(20) {
                0..=6 => {
                    let c = random_cols(&mut rng);
                    t.put_row(&pk, &c, PutMode::Replace).unwrap();
                    model.insert(pk, c);
                }
                7..=8 => {
                    let c = random_cols(&mut rng);
                    let stored = t.put_row(&pk, &c, PutMode::Keep).unwrap();
                    assert_eq!(stored, !model.contains_key(&pk));
                    model.entry(pk).or_insert(c);
                }
                9..=12 => {
                    let c = random_cols(&mut rng);
                    t.put_row(&pk, &c, PutMode::Cat).unwrap();
                    model.entry(pk).or_default().merge(&c);
                }
                13..=15 => {
                    assert_eq!(t.out_row(&pk).unwrap(), model.remove(&pk).is_some());
                }
                16 => {
                    let (c, typ) = specs[rng.below(specs.len() as u64) as usize];
                    if live.iter().any(|(x, _)| *x == c) && rng.below(2) == 0 {
                        t.set_index(c, IndexOp::Void).unwrap();
                        live.retain(|(x, _)| *x != c);
                    } else {
                        t.set_index(c, IndexOp::Make { typ, keep: false }).unwrap();
                        live.retain(|(x, _)| *x != c);
                        live.push((c, typ));
                    }
                }
                17 => {
                    t.close().unwrap();
                    t = open(&fs, OpenMode::Existing).unwrap();
                }
                _ => {
                    let s: &dyn Store = &t;
                    let c = random_cols(&mut rng);
                    s.put(&pk, &c.to_wire()).unwrap();
                    model.insert(pk, c);
                }
            }
            for (c, typ) in &live {
                assert_eq!(
                    stored_entries(&t, c),
                    model_entries(&model, c, *typ),
                    "seed {seed} step {step}: index of {c:?}"
                );
            }
            if step % 50 == 0 {
                let mut got = BTreeMap::new();
                t.for_each_row(&KeyRange::new(b"", None), &mut |k, c| {
                    got.insert(k.to_vec(), c.clone());
                    Ok(true)
                })
                .unwrap();
                assert_eq!(got, model, "seed {seed} step {step}");
            }
        }
        assert!(t.check().unwrap().healthy());
        t.close().unwrap();
    }
}

/// The chunks of a posting-list index, in key order: (term, its records in order) each.
fn chunk_lists(t: &TableDb, column: &[u8]) -> Vec<(Vec<u8>, Vec<Vec<u8>>)> {
    let ix = t
        .schema()
        .iter()
        .find(|i| i.column == column)
        .cloned()
        .unwrap();
    let mut out = Vec::new();
    ix.store
        .for_each_record(&mut |k, v, _| {
            let term = terms::decode_entry(IndexType::Lexical, k, b"")?.term;
            let ps = postings::postings(ix.typ, k, v)?;
            assert!(!ps.is_empty(), "an empty chunk is kept");
            out.push((term, ps.into_iter().map(|p| p.pk).collect()));
            Ok(true)
        })
        .unwrap();
    out
}

/// Token and q-gram indexes as posting lists, with many records on few terms: chunks split
/// (in halves, and full on the left when filled in key order), lose records, empty and go;
/// rows written one by one and several in one batch, keys in random order, puts, putcats and
/// outs, reopens. The lists always equal those recomputed from the records, a term's chunks
/// hold its records in order without overlap, and check finds nothing; a damaged chunk is
/// found by check and rebuilt by rebuild.
#[test]
fn posting_lists_split_shrink_and_agree_with_the_records() {
    let fs = SimVfs::new();
    let mut t = open(&fs, OpenMode::Create).unwrap();
    for (c, typ) in [(b"c", IndexType::Token), (b"d", IndexType::QGram)] {
        t.set_index(c, IndexOp::Make { typ, keep: false }).unwrap();
    }
    let mut rng = Rng(7);
    let mut model: BTreeMap<Vec<u8>, Columns> = BTreeMap::new();
    let toks = ["t0", "t1", "t2", "t3", "t4"];
    let row = |rng: &mut Rng| {
        let tk: Vec<&str> = toks.iter().filter(|_| rng.below(3) > 0).copied().collect();
        let text = ["ab", "abc", "bca", "cab c", "a"][rng.below(5) as usize];
        cols(&[("c", &tk.join(",")), ("d", text)])
    };
    // In key order first (chunks filled at their end), then at random.
    for i in 0..600 {
        let c = row(&mut rng);
        let pk = format!("{i:05}").into_bytes();
        t.put_row(&pk, &c, PutMode::Replace).unwrap();
        model.insert(pk, c);
    }
    let full: usize = chunk_lists(&t, b"c").iter().map(|(_, l)| l.len()).sum();
    let chunks = chunk_lists(&t, b"c").len();
    assert!(
        chunks < 5 + full * 4 / postings::CHUNK_BYTES,
        "{chunks} chunks for {full} records: filled in order, chunks are full"
    );
    for step in 0..3000 {
        let pk = format!("{}", rng.below(2500)).into_bytes();
        match rng.below(10) {
            0..=4 => {
                let c = row(&mut rng);
                t.put_row(&pk, &c, PutMode::Replace).unwrap();
                model.insert(pk, c);
            }
            5 => {
                let c = cols(&[("c", toks[rng.below(5) as usize])]);
                t.put_row(&pk, &c, PutMode::Cat).unwrap();
                model.entry(pk).or_default().merge(&c);
            }
            6..=7 => {
                t.out_row(&pk).unwrap();
                model.remove(&pk);
            }
            8 => {
                let mut ops = Vec::new();
                for _ in 0..rng.below(40) {
                    let pk = format!("{}", rng.below(2500)).into_bytes();
                    if rng.below(3) == 0 {
                        ops.push(BatchOp::Remove { key: pk.clone() });
                        model.remove(&pk);
                    } else {
                        let c = row(&mut rng);
                        ops.push(put_op(pk.clone(), c.to_wire(), 0));
                        model.insert(pk, c);
                    }
                }
                let s: &dyn Store = &t;
                s.write_batch(&ops).unwrap();
            }
            _ if step % 500 == 9 => {
                t.close().unwrap();
                t = open(&fs, OpenMode::Existing).unwrap();
            }
            _ => {}
        }
        if step % 250 == 0 || step == 2999 {
            for (c, typ) in [(b"c", IndexType::Token), (b"d", IndexType::QGram)] {
                assert_eq!(
                    stored_entries(&t, c),
                    model_entries(&model, c, typ),
                    "step {step}: index of {c:?}"
                );
                let lists = chunk_lists(&t, c);
                for w in lists.windows(2) {
                    if w[0].0 == w[1].0 {
                        assert!(
                            w[0].1.last() < w[1].1.first(),
                            "step {step}: chunks overlap"
                        );
                    }
                }
            }
        }
    }
    // Half the records go: chunks shrink and empty ones are removed.
    let keys: Vec<Vec<u8>> = model.keys().step_by(2).cloned().collect();
    for k in keys {
        t.out_row(&k).unwrap();
        model.remove(&k);
    }
    assert_eq!(
        stored_entries(&t, b"c"),
        model_entries(&model, b"c", IndexType::Token)
    );
    let multi = chunk_lists(&t, b"c")
        .windows(2)
        .filter(|w| w[0].0 == w[1].0)
        .count();
    assert!(multi > 0, "some term has several chunks");
    assert!(t.check_indexes().unwrap().is_empty());
    let info: Vec<IndexInfo> = t.indexes();
    let want: usize = model_entries(&model, b"c", IndexType::Token).len();
    assert_eq!(info[0].entries, want as u64);
    // A damaged chunk: check says so; rebuild makes the lists again.
    let (_, ix) = t.index(b"d").unwrap();
    let mut first = None;
    ix.for_each_record(&mut |k, _, _| {
        first = Some(k.to_vec());
        Ok(false)
    })
    .unwrap();
    ix.put(&first.unwrap(), b"\x05\x01").unwrap();
    let problems = t.check_indexes().unwrap();
    assert!(!problems.is_empty());
    assert!(
        problems.iter().any(|p| p.contains("does not parse")),
        "{problems:?}"
    );
    t.rebuild_indexes().unwrap();
    assert!(t.check_indexes().unwrap().is_empty());
    assert_eq!(
        stored_entries(&t, b"d"),
        model_entries(&model, b"d", IndexType::QGram)
    );
    t.close().unwrap();
}

/// A table whose token index is in the form of an older build (an entry per term and record,
/// no `posting_form` in its metadata) is refused with a message naming repair, read-only too;
/// repair rebuilds it as posting lists; a table of an older build with only lexical and
/// decimal indexes opens and is marked.
#[test]
fn an_old_form_token_index_is_refused_until_repair_rebuilds_it() {
    let fs = SimVfs::new();
    let t = open(&fs, OpenMode::Create).unwrap();
    t.set_index(
        b"c",
        IndexOp::Make {
            typ: IndexType::Token,
            keep: false,
        },
    )
    .unwrap();
    let mut model = BTreeMap::new();
    for i in 0..300 {
        let c = cols(&[("c", &format!("a b{}", i % 7))]);
        t.put_row(format!("{i}").as_bytes(), &c, PutMode::Replace)
            .unwrap();
        model.insert(format!("{i}").into_bytes(), c);
    }
    // Make it what an older build wrote.
    let (_, ix) = t.index(b"c").unwrap();
    ix.vanish().unwrap();
    let old = model_entries(&model, b"c", IndexType::Token);
    let ops: Vec<BatchOp> = old
        .iter()
        .map(|(k, v)| put_op(k.clone(), v.clone(), 0))
        .collect();
    ix.write_batch(&ops).unwrap();
    t.meta
        .write_batch(&[BatchOp::Remove {
            key: K_IXFORM.to_vec(),
        }])
        .unwrap();
    drop(ix);
    t.close().unwrap();
    for mode in [OpenMode::Existing, OpenMode::ReadOnly] {
        match open(&fs, mode) {
            Err(Error::NotADatabase(m)) => {
                assert!(m.contains("kura db repair") && m.contains("`c`"), "{m}")
            }
            Err(e) => panic!("{mode:?}: {e}"),
            Ok(_) => panic!("{mode:?}: an old-form index opened"),
        }
    }
    let params = Params::parse(PARAMS_SMALL).unwrap();
    let dst = Path::new("/sim/fixed.kt");
    TableDb::repair_with(Path::new("/sim/t.kt"), dst, &params, Arc::new(fs.clone())).unwrap();
    let t = TableDb::open_mode(dst, &params, Arc::new(fs.clone()), OpenMode::Existing).unwrap();
    assert_eq!(stored_entries(&t, b"c"), old);
    assert!(t.check_indexes().unwrap().is_empty());
    assert_eq!(t.indexes()[0].entries, old.len() as u64);
    t.close().unwrap();
    // Without a token or q-gram index an older table opens, and is marked at once.
    let fs = SimVfs::new();
    let t = open(&fs, OpenMode::Create).unwrap();
    t.set_index(
        b"n",
        IndexOp::Make {
            typ: IndexType::Decimal,
            keep: false,
        },
    )
    .unwrap();
    t.meta
        .write_batch(&[BatchOp::Remove {
            key: K_IXFORM.to_vec(),
        }])
        .unwrap();
    t.close().unwrap();
    let t = open(&fs, OpenMode::Existing).unwrap();
    assert!(t.meta.get(K_IXFORM).unwrap().is_some());
    t.close().unwrap();
}
