//! Databases written by the build before records named their keyspace (segment format 2,
//! tree checkpoint format 1: `crates/engine/tests/fixtures/before-v3.kh` and `.kb`, made by
//! `kura db import --create` of `key0001<TAB>value-1` … `key0300<TAB>value-300`, `kura db out
//! NAME key0007`, and on the `.kb` three `kura db put --dup NAME dupkey …`) through the real
//! binary: `check`, `export`, `put`, `get` and `check` again work on them unchanged.

mod common;

use common::{copy_dir, kura_db as run, ok_stdout as ok};
use std::path::Path;

#[test]
fn databases_of_the_build_before_keyspaces_open_through_kura_db() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/tests/fixtures");
    let dir = tempfile::tempdir().unwrap();
    for name in ["before-v3.kh", "before-v3.kb"] {
        copy_dir(&fixtures.join(name), &dir.path().join(name));
        ok(run(dir.path(), &["check", name]));
        let export = ok(run(dir.path(), &["export", name]));
        let lines: Vec<&str> = export.lines().collect();
        let kb = name.ends_with(".kb");
        assert_eq!(lines.len(), if kb { 302 } else { 299 }, "{name}");
        assert!(lines.contains(&"key0300\tvalue-300"), "{name}");
        assert!(!lines.iter().any(|l| l.starts_with("key0007\t")), "{name}");
        assert_eq!(ok(run(dir.path(), &["get", name, "key0042"])), "value-42");
        ok(run(dir.path(), &["put", name, "after", "the upgrade"]));
        assert_eq!(ok(run(dir.path(), &["get", name, "after"])), "the upgrade");
        ok(run(dir.path(), &["check", name]));
    }
}
