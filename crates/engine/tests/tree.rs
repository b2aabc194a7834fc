//! The B+ tree's comparators end to end: keys written in a scrambled order come back from a
//! cursor in the order of the comparator chosen at creation, before and after a reopen (the
//! comparator is stored in the database), through many leaf splits.

use kura_engine::Store;
use std::sync::Arc;

/// Keys of one comparator and the number each stands for (the order to expect).
fn keys(cmp: &str) -> Vec<(Vec<u8>, i64)> {
    let nums: Vec<i64> = (0..3000i64).map(|i| (i * 7919) % 3001 - 1500).collect();
    nums.iter()
        .map(|&n| {
            let key = match cmp.trim_end_matches("desc") {
                "lex" => format!("{:08}", n + 1500).into_bytes(),
                "dec" => n.to_string().into_bytes(),
                "int32" => (n as i32).to_le_bytes().to_vec(),
                "int64" => (n * 1_000_000_007).to_le_bytes().to_vec(),
                other => panic!("{other}"),
            };
            (key, n)
        })
        .collect()
}

fn walk(db: &Arc<dyn Store>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut cur = db.cursor().unwrap();
    if cur.first().unwrap() {
        while let Some((k, _)) = cur.get().unwrap() {
            out.push(k);
            if !cur.step().unwrap() {
                break;
            }
        }
    }
    out
}

#[test]
fn cursors_follow_the_comparator_chosen_at_creation() {
    let dir = tempfile::tempdir().unwrap();
    for cmp in [
        "lex",
        "lexdesc",
        "dec",
        "decdesc",
        "int32",
        "int32desc",
        "int64",
        "int64desc",
    ] {
        let path = dir.path().join(format!("{cmp}.kb"));
        let ks = keys(cmp);
        let mut expect = ks.clone();
        expect.sort_by_key(|(_, n)| *n);
        if cmp.ends_with("desc") {
            expect.reverse();
        }
        let expect: Vec<Vec<u8>> = expect.into_iter().map(|(k, _)| k).collect();
        {
            let db = kura_engine::open(&format!("{}#cmp={cmp}#leafsiz=256", path.display()))
                .unwrap_or_else(|e| panic!("{cmp}: {e}"));
            for (k, n) in &ks {
                db.put(k, n.to_string().as_bytes()).unwrap();
            }
            assert_eq!(walk(&db), expect, "{cmp}");
            db.close().unwrap();
        }
        // Reopened without naming the comparator: the stored one applies.
        let db = kura_engine::open(&path.display().to_string()).unwrap();
        assert_eq!(walk(&db), expect, "{cmp} after a reopen");
        for (k, n) in &ks {
            assert_eq!(
                db.get(k).unwrap().map(|r| r.value),
                Some(n.to_string().into_bytes())
            );
        }
        let described = format!("{:?}", db.describe());
        assert!(described.contains(cmp), "{cmp}: {described}");
        db.close().unwrap();
        // A different comparator named at a reopen is refused, not silently used.
        let other = if cmp == "lex" { "dec" } else { "lex" };
        assert!(
            kura_engine::open(&format!("{}#cmp={other}", path.display())).is_err(),
            "{cmp} reopened as {other}"
        );
    }
}
