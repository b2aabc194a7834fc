//! The README's migration pipelines, for real: records put into a Tokyo Cabinet hash (`.tch`)
//! and B+ tree (`.tcb`) and a Kyoto Cabinet hash (`.kch`) by their own tools, listed by those
//! tools and piped into `kura db import`, then back out of Kura into the peers' importers.
//!
//! Needs `tchmgr`, `tcbmgr`, `tcfmgr` (Debian's tokyocabinet-bin) and `kchashmgr`
//! (kyotocabinet-utils),
//! which scripts/test.sh installs and then sets KURA_PEER_TESTS=1: with it, missing tools fail
//! the test; without it (a bare `cargo test`), the test says so and passes.

mod common;
use common::tools_present;
use std::path::Path;
use std::process::Command;

const KURA: &str = env!("CARGO_BIN_EXE_kura");

/// Whether every peer tool is there; panics when they must be.
fn peers_present() -> bool {
    tools_present(&["tchmgr", "tcbmgr", "kchashmgr"])
}

/// Run a shell pipeline in `dir`; panics with its stderr when it fails.
fn sh(dir: &Path, script: &str) -> Vec<u8> {
    let o = Command::new("bash")
        .args(["-c", &format!("set -euo pipefail; {script}")])
        .current_dir(dir)
        .env("KURA", KURA)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{script}\nstatus {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Records no line format of the peers can carry raw, and some it can.
fn records() -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut v: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (b"win".to_vec(), b"C:\\temp\\new".to_vec()),
        (b"tabs".to_vec(), b"a\tb\tc".to_vec()),
        (b"utf8".to_vec(), "日本語".as_bytes().to_vec()),
        (b"nul\x00key".to_vec(), b"nul\x00value".to_vec()),
        (b"newline".to_vec(), b"line1\nline2\r\n".to_vec()),
        (b"\xff\xfe".to_vec(), b"\x01\x7f\\d".to_vec()),
        (b"empty".to_vec(), Vec::new()),
    ];
    for i in 0..200u32 {
        v.push((
            format!("key{i:05}").into_bytes(),
            format!("value {i} \\x").into_bytes(),
        ));
    }
    v
}

/// `kura db get` of every record equals what was put.
fn assert_holds(dir: &Path, db: &str, recs: &[(Vec<u8>, Vec<u8>)]) {
    use std::os::unix::ffi::OsStrExt;
    for (k, v) in recs {
        // Keys with NUL cannot be arguments: those are checked through the hex export.
        if k.contains(&0) {
            continue;
        }
        let o = Command::new(KURA)
            .args(["db", "get", db])
            .arg("--")
            .arg(std::ffi::OsStr::from_bytes(k))
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{db}: {k:?}: {o:?}");
        assert_eq!(o.stdout, *v, "{db}: {k:?}");
    }
}

fn sorted_lines(b: &[u8]) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = b
        .split(|&c| c == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    v.sort();
    v
}

#[test]
fn tokyo_and_kyoto_cabinet_files_move_to_kura_and_back() {
    if !peers_present() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let recs = records();
    // Each peer's own tool stores the records (hex arguments: any bytes).
    let mut puts = String::new();
    for (k, v) in &recs {
        let (k, v) = (hex(k), hex(v));
        puts.push_str(&format!(
            "tchmgr put -sx casket.tch '{k}' '{v}'\ntcbmgr put -sx casket.tcb '{k}' '{v}'\n\
             kchashmgr set -sx casket.kch '{k}' '{v}'\n"
        ));
    }
    sh(
        d,
        &format!("tchmgr create casket.tch; tcbmgr create casket.tcb; kchashmgr create casket.kch\n{puts}"),
    );
    let want_hex = sorted_lines(&sh(d, "kchashmgr list -pv -px casket.kch"));
    assert_eq!(want_hex.len(), recs.len());

    // The README's pipelines: any bytes, through the peers' hex listing.
    for (file, tool) in [
        ("casket.tch", "tchmgr"),
        ("casket.tcb", "tcbmgr"),
        ("casket.kch", "kchashmgr"),
    ] {
        let db = format!("{file}.kh");
        sh(
            d,
            &format!("{tool} list -pv -px {file} | \"$KURA\" db import --create --format hex {db}"),
        );
        assert_holds(d, &db, &recs);
        let back = sorted_lines(&sh(d, &format!("\"$KURA\" db export --format hex {db}")));
        assert_eq!(back, want_hex, "{file}: every record, byte for byte");
    }

    // Raw (`list -pv`, what the peers' importers read): records without a newline move
    // exactly, tabs and backslashes in values included.
    let rawable: Vec<(Vec<u8>, Vec<u8>)> = recs
        .iter()
        .filter(|(k, v)| !k.contains(&b'\n') && !k.contains(&b'\t') && !v.contains(&b'\n'))
        .filter(|(k, v)| !k.contains(&0) && !v.contains(&0)) // tchmgr list prints C strings
        .cloned()
        .collect();
    let mut script = String::from("tchmgr create raw.tch\n");
    for (k, v) in &rawable {
        script.push_str(&format!(
            "tchmgr put -sx raw.tch '{}' '{}'\n",
            hex(k),
            hex(v)
        ));
    }
    script.push_str("tchmgr list -pv raw.tch | \"$KURA\" db import --create --format raw raw.kh");
    sh(d, &script);
    assert_holds(d, "raw.kh", &rawable);
    let count = String::from_utf8(sh(d, "\"$KURA\" db inform raw.kh")).unwrap();
    assert!(
        count.contains(&format!("records: {}\n", rawable.len())),
        "{count}"
    );

    // And back: Kura's raw export into Tokyo Cabinet's importtsv, its hex export into Kyoto
    // Cabinet's import -sx; each peer then lists what Kura held.
    sh(
        d,
        "\"$KURA\" db export --format raw raw.kh back.tsv; tchmgr create back.tch; \
         tchmgr importtsv back.tch back.tsv; kchashmgr create back.kch; \
         \"$KURA\" db export --format hex casket.kch.kh | kchashmgr import -sx back.kch",
    );
    assert_eq!(
        sorted_lines(&sh(d, "tchmgr list -pv back.tch")),
        sorted_lines(&sh(d, "\"$KURA\" db export --format raw raw.kh"))
    );
    assert_eq!(
        sorted_lines(&sh(d, "kchashmgr list -pv -px back.kch")),
        want_hex
    );
}

/// A Tokyo Cabinet B+ tree with duplicate keys (`tcbmgr put -dd`) into a Kura B+ tree with
/// `import --dup`: every value, in order, and `kura db export` lists exactly what
/// `tcbmgr list -pv` lists (key order, a line per value); back with `tcbmgr importtsv`.
#[test]
fn a_tokyo_b_plus_tree_with_duplicates_moves_to_a_kb_and_back() {
    if !peers_present() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    sh(
        d,
        "tcbmgr create dup.tcb; for k in m b z a; do tcbmgr put dup.tcb $k v$k; done; \
         tcbmgr put -dd dup.tcb b 2; tcbmgr put -dd dup.tcb b 3; tcbmgr put -dd dup.tcb z 0",
    );
    let listed = sh(d, "tcbmgr list -pv dup.tcb");
    assert_eq!(
        String::from_utf8_lossy(&listed),
        "a\tva\nb\tvb\nb\t2\nb\t3\nm\tvm\nz\tvz\nz\t0\n"
    );
    sh(
        d,
        "tcbmgr list -pv -px dup.tcb | \"$KURA\" db import --create --dup --format hex dup.kb",
    );
    assert_eq!(sh(d, "\"$KURA\" db export --format raw dup.kb"), listed);
    assert_eq!(sh(d, "\"$KURA\" db get --all dup.kb b"), b"vb\n2\n3\n");
    sh(
        d,
        "\"$KURA\" db export --format raw dup.kb back.tsv; tcbmgr create back.tcb; \
         tcbmgr importtsv back.tcb back.tsv",
    );
    assert_eq!(sh(d, "tcbmgr list -pv back.tcb"), listed);
}

/// A Tokyo Cabinet fixed-length database (`.tcf`) into a `.kf`: `tcfmgr list -pv -px` prints
/// the ids in decimal and only the values in hex, so the README's pipeline turns each id into
/// hex pairs first (one `perl -pe`); then any bytes move, and the width goes along as
/// `#width=`. `--format raw` takes `tcfmgr list -pv` as it is, for values without newlines.
#[test]
fn a_tokyo_fixed_length_file_moves_to_a_kf() {
    if !tools_present(&["tcfmgr", "perl"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let recs: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (b"1".to_vec(), b"one".to_vec()),
        (b"12".to_vec(), b"a\tb\\c".to_vec()),
        (b"300".to_vec(), b"line1\nline2".to_vec()),
        (b"7".to_vec(), b"\x00\xff\r".to_vec()),
        (b"8".to_vec(), Vec::new()),
    ];
    let mut script = String::from("tcfmgr create f.tcf 16\n");
    for (k, v) in &recs {
        script.push_str(&format!("tcfmgr put -sx f.tcf '{}' '{}'\n", hex(k), hex(v)));
    }
    sh(d, &script);
    // The README's pipeline, as it is written there.
    sh(
        d,
        "tcfmgr list -pv -px f.tcf | perl -pe 's/^(\\d+)/join \" \", map { sprintf \"%02X\", ord } split m{}, $1/e' \
         | \"$KURA\" db import --create --format hex 'f.kf#width=16'",
    );
    assert_holds(d, "f.kf", &recs);
    let inform = String::from_utf8(sh(d, "\"$KURA\" db inform f.kf")).unwrap();
    assert!(inform.contains("stored.width: 16\n"), "{inform}");
    // Raw: the records without a newline or NUL (tcfmgr list -pv prints C strings).
    let rawable: Vec<(Vec<u8>, Vec<u8>)> = recs
        .iter()
        .filter(|(_, v)| !v.contains(&b'\n') && !v.contains(&0))
        .cloned()
        .collect();
    let mut script = String::from("tcfmgr create r.tcf 16\n");
    for (k, v) in &rawable {
        script.push_str(&format!("tcfmgr put -sx r.tcf '{}' '{}'\n", hex(k), hex(v)));
    }
    script.push_str(
        "tcfmgr list -pv r.tcf | \"$KURA\" db import --create --format raw 'r.kf#width=16'",
    );
    sh(d, &script);
    assert_holds(d, "r.kf", &rawable);
}

/// The README's table pipeline against the real `tctmgr`: records put into a `.tct` by
/// `tctmgr put`, `tctmgr list -pv` piped into `kura db import --format raw --index …`; then
/// `kura db get` prints each record as `tctmgr get` does, byte for byte, and a putcat
/// (`tctmgr put -dc`, `kura db put --cat`) leaves the same record in both.
#[test]
fn a_tokyo_table_moves_to_a_kt_with_its_indexes() {
    if !tools_present(&["tctmgr"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let recs: &[(&str, &[&str])] = &[
        (
            "alice@example.com",
            &["sendDates", "2026-11-01,2026-11-02", "count", "2"],
        ),
        (
            "123456789",
            &["sendDates", "2026-11-03", "count", "1", "note", "a b c"],
        ),
        ("bob", &["count", "10"]),
        ("ünï", &["näme", "zoë"]),
        ("no columns", &[]),
    ];
    let mut script = String::from("tctmgr create casket.tct\n");
    for (pk, cols) in recs {
        let cols: String = cols.iter().map(|c| format!(" '{c}'")).collect();
        script.push_str(&format!("tctmgr put casket.tct '{pk}'{cols}\n"));
    }
    script.push_str(
        "tctmgr list -pv casket.tct \
         | \"$KURA\" db import --create --format raw --index count:decimal \
           --index sendDates:token casket.kt",
    );
    sh(d, &script);
    for (pk, _) in recs {
        let theirs = sh(d, &format!("tctmgr get casket.tct '{pk}'"));
        let ours = sh(d, &format!("\"$KURA\" db get casket.kt '{pk}'"));
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs),
            "{pk}"
        );
    }
    let inform = String::from_utf8(sh(d, "\"$KURA\" db inform casket.kt")).unwrap();
    assert!(inform.contains("records: 5\n"), "{inform}");
    assert!(
        inform.contains("indexes: count:dec,sendDates:tok\n"),
        "{inform}"
    );
    sh(d, "\"$KURA\" db check casket.kt");
    // putcat: a column the record has keeps its value, a new one is added, in both.
    sh(
        d,
        "tctmgr put -dc casket.tct bob count 11 city oslo; \
         \"$KURA\" db put --cat casket.kt bob count 11 city oslo",
    );
    assert_eq!(
        String::from_utf8_lossy(&sh(d, "\"$KURA\" db get casket.kt bob")),
        String::from_utf8_lossy(&sh(d, "tctmgr get casket.tct bob"))
    );
}

/// `kura db search` against `tctmgr search` on the same records (a `.tct` filled by `tctmgr
/// importtsv`, listed into a `.kt` with indexes): every operator family, negation, the primary
/// key as a column, order with limit and skip, a metasearch. Without an order Tokyo Cabinet
/// answers in its hash's order, Kura in primary-key order: those are compared as sets. The
/// order columns hold distinct values (ties are ordered differently: Kura by primary key in the
/// order's direction).
#[test]
fn kura_db_search_answers_as_tctmgr_search() {
    if !tools_present(&["tctmgr"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let words = [
        "apple", "banana", "cherry", "date", "elder", "fig", "grape", "honey", "iris", "jade",
    ];
    let mut seed: u64 = 7;
    let mut rnd = |n: usize| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((seed >> 33) as usize) % n
    };
    let mut tsv = String::new();
    let mut names = Vec::new();
    for i in 0..300usize {
        names.push(format!("{}{}", words[rnd(10)], i % 17));
        let mut cols = vec![format!("name\t{}", names[i])];
        if i % 11 != 0 {
            cols.push(format!("age\t{}", 1000 + i * 7 % 307));
        }
        let tags: Vec<&str> = (0..3).map(|_| words[rnd(10)]).collect();
        cols.push(format!("tags\t{}", tags.join(",")));
        let text: Vec<&str> = (0..5).map(|_| words[rnd(10)]).collect();
        cols.push(format!("text\t{}", text.join(" ")));
        cols.push(format!("score\t{}.{}", i as i64 - 150, i % 10));
        tsv.push_str(&format!("k{i:04}\t{}\n", cols.join("\t")));
    }
    std::fs::write(d.join("data.tsv"), tsv).unwrap();
    sh(
        d,
        "tctmgr create t.tct; tctmgr importtsv t.tct data.tsv >/dev/null; \
         tctmgr list -pv t.tct | \"$KURA\" db import --create --format raw \
         --index name:lexical --index age:decimal --index tags:token --index text:qgram t.kt",
    );
    let quote = |a: &[&str]| -> String {
        a.iter()
            .map(|w| format!("'{w}'"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let lines = |b: Vec<u8>| -> Vec<String> {
        String::from_utf8(b)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    };
    // (tctmgr options, kura options, conditions, ordered)
    let cases: &[(&str, &str, &[&str], bool)] = &[
        ("", "", &["name", "STREQ", &names[40]], false),
        ("", "", &["name", "STRINC", "an"], false),
        ("", "", &["name", "STRBW", "ch"], false),
        ("", "", &["name", "STREW", "5"], false),
        ("", "", &["tags", "STRAND", "apple,fig"], false),
        ("", "", &["tags", "STROR", "apple fig"], false),
        ("", "", &["name", "STROREQ", "apple3,fig4,date0"], false),
        ("", "", &["name", "STRRX", "^[a-c].*1$"], false),
        ("", "", &["age", "NUMEQ", "1100"], false),
        ("", "", &["age", "NUMGT", "1250"], false),
        ("", "", &["age", "NUMGE", "1250"], false),
        ("", "", &["score", "NUMLT", "-100"], false),
        ("", "", &["score", "NUMLE", "-100"], false),
        ("", "", &["age", "NUMBT", "1100 1150"], false),
        ("", "", &["age", "NUMOREQ", "1007,1014,1021"], false),
        ("", "", &["text", "FTSPH", "apple fig"], false),
        ("", "", &["text", "FTSAND", "apple fig"], false),
        ("", "", &["text", "FTSOR", "apple fig"], false),
        ("", "", &["text", "FTSEX", "apple && fig || jade"], false),
        ("", "", &["name", "!STRBW", "a"], false),
        ("", "", &["", "STRBW", "k02"], false),
        (
            "",
            "",
            &["name", "STRINC", "a", "age", "NUMGE", "1150"],
            false,
        ),
        (
            "-ord age NUMDESC -m 7",
            "--ord age NUMDESC -m 7",
            &["name", "STRINC", "an"],
            true,
        ),
        (
            "-ord age NUMASC -m 5 -sk 3",
            "--ord age NUMASC -m 5 --skip 3",
            &["tags", "STROR", "fig"],
            true,
        ),
        (
            "-ord name STRDESC -m 4",
            "--ord name STRDESC -m 4",
            &["", "STRBW", "k01"],
            true,
        ),
        (
            "-ord score NUMASC -m 6",
            "--ord score NUMASC -m 6",
            &[],
            true,
        ),
        (
            "-pv -ord age STRASC -m 3",
            "--pv --ord age STRASC -m 3",
            &["text", "FTSAND", "honey"],
            true,
        ),
        (
            "-ms UNION",
            "--ms UNION",
            &["name", "STRBW", "apple", "age", "NUMLT", "1020"],
            false,
        ),
        (
            "-ms DIFF",
            "--ms DIFF",
            &["name", "STRINC", "a", "age", "NUMLT", "1100"],
            false,
        ),
    ];
    for (topts, kopts, conds, ordered) in cases {
        let theirs = lines(sh(
            d,
            &format!("tctmgr search {topts} t.tct {}", quote(conds)),
        ));
        let ours = lines(sh(
            d,
            &format!("\"$KURA\" db search t.kt {kopts} -- {}", quote(conds)),
        ));
        let (mut theirs, mut ours) = (theirs, ours);
        if !ordered {
            theirs.sort();
            ours.sort();
        }
        assert!(
            !theirs.is_empty() || conds.is_empty(),
            "{conds:?}: nothing found"
        );
        assert_eq!(ours, theirs, "{topts} {conds:?}");
    }
    // Remove: both leave the same records.
    sh(
        d,
        "tctmgr search -rm t.tct age NUMGE 1200 >/dev/null; \
         \"$KURA\" db search t.kt --out -- age NUMGE 1200",
    );
    let mut theirs = lines(sh(d, "tctmgr list t.tct"));
    theirs.sort();
    let ours = lines(sh(d, "\"$KURA\" db list t.kt"));
    assert_eq!(ours, theirs);
    sh(d, "\"$KURA\" db check t.kt");
}
