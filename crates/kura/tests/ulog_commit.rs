//! `kura serve DB --ulog DIR`: the update log is the commit point. A write is acknowledged once
//! its log record is durable; the database's own files are synced lazily (every 2 s, at its
//! checkpoints and close) and a restart redoes from the log what they did not hold.

mod common;
use common::*;
use std::collections::BTreeMap;

/// Sequential writes acknowledged under `sync=always`, then SIGKILL, three times, on a `.kh`
/// and a `.kb`: after each restart every acknowledged write is there, and the database was
/// not synced once a write (its `syncs` counter against the log's `ulog_syncs`).
#[test]
fn sigkill_with_the_update_log_as_commit_point_loses_no_acknowledged_write() {
    for db in ["c.kh#sync=always", "c.kb#sync=always"] {
        let dir = tempfile::tempdir().unwrap();
        let start = || {
            serve(
                dir.path(),
                &[db, "--port", "0", "--sid", "1", "--ulog", "ulog"],
            )
        };
        let mut server = start();
        let mut acked = BTreeMap::new();
        for round in 0..3u32 {
            let mut t = Tt::new(&server.addr);
            let stat0 = t.stat();
            let n = 300;
            for i in 0..n {
                let k = format!("k{}", (round * 97 + i) % 400);
                if i % 11 == 0 {
                    if t.out(k.as_bytes()) == 0 {
                        acked.remove(&k);
                    }
                } else {
                    let v = format!("r{round}-{i}");
                    assert_eq!(t.put(k.as_bytes(), v.as_bytes()), 0, "{db}");
                    acked.insert(k, v);
                }
            }
            let stat = t.stat();
            let count = |s: &BTreeMap<String, String>, name: &str| -> u64 {
                s.get(name)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("{db}: no {name} in stat"))
            };
            let syncs = count(&stat, "kura_syncs") - count(&stat0, "kura_syncs");
            let ulog_syncs = count(&stat, "kura_ulog_syncs") - count(&stat0, "kura_ulog_syncs");
            assert!(
                ulog_syncs * 2 >= n as u64,
                "{db}: {ulog_syncs} log syncs for {n} writes"
            );
            assert!(
                syncs * 10 <= n as u64,
                "{db}: the database synced {syncs} times for {n} writes"
            );
            server.signal(libc::SIGKILL);
            server = start();
            let got = Tt::new(&server.addr).digest();
            let want: BTreeMap<Vec<u8>, Vec<u8>> = acked
                .iter()
                .map(|(k, v)| (k.clone().into_bytes(), v.clone().into_bytes()))
                .collect();
            assert!(got == want, "{db}: round {round}: acknowledged writes lost");
        }
    }
}
