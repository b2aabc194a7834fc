//! Memory of a database while records are written in key order: every 500,000 records, the
//! process's anonymous resident memory beside what the kind says it holds (`cached_bytes`,
//! `index_bytes`, `leaves` for a `.kb`). Values are 100 bytes (the key, then filler).
//!
//! `cargo run --release -p kura-bench --example tree_memory -- '/tmp/x.kb#cache=64m' 3000000`
fn rss() -> String {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .filter(|l| l.starts_with("RssAnon"))
        .collect::<Vec<_>>()
        .join(" ")
}
fn main() {
    let n: u64 = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .expect("usage: tree_memory NAME RECORDS");
    let name = std::env::args()
        .nth(1)
        .expect("usage: tree_memory NAME RECORDS");
    let db = kura_engine::open(&name).expect("open");
    let filler = vec![b'x'; 92];
    for i in 1..=n {
        let k = format!("{i:08}");
        let mut v = k.clone().into_bytes();
        v.extend_from_slice(&filler);
        db.put(k.as_bytes(), &v).unwrap();
        if i % 500_000 == 0 {
            let d = db.describe();
            let get = |n: &str| {
                d.iter()
                    .find(|(k, _)| k == n)
                    .map(|x| x.1.clone())
                    .unwrap_or_default()
            };
            eprintln!(
                "{i}: {} cached={} index={} leaves={}",
                rss(),
                get("cached_bytes"),
                get("index_bytes"),
                get("leaves")
            );
        }
    }
    db.close().unwrap();
}
