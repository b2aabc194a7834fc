//! Prometheus metrics through the real binary: `--metrics-port` and `GET /metrics` on the main
//! port, values that move after known operations on every protocol, the mask's `stat`, a
//! refused connection counted and logged, and every metric the Grafana dashboard
//! (deploy/grafana/kura.json) queries present in a scrape. (tests/clients/test_metrics.py
//! parses a scrape with Prometheus's own Python parser.)

mod common;
use common::*;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// `GET /metrics` from `addr`: the status code and the body.
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let text = String::from_utf8(all).expect("utf-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("head");
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(
        status != 200 || head.contains("text/plain; version=0.0.4"),
        "{head}"
    );
    (status, body.to_string())
}

/// Samples of a scrape: `name{labels}` (labels as written) → value. Checks the shape of every
/// line on the way: comments are HELP or TYPE, a sample is a name, optional labels and a number.
/// Family names are unique as a parser sees them, which takes `_total` off a counter's name
/// (a gauge `x` beside a counter `x_total` would clash).
fn samples(page: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let mut families = std::collections::BTreeSet::new();
    for l in page.lines() {
        if let Some(c) = l.strip_prefix("# ") {
            assert!(
                c.starts_with("HELP kura_") || c.starts_with("TYPE kura_"),
                "{l}"
            );
            if let Some(t) = c.strip_prefix("TYPE ") {
                let (name, kind) = t.split_once(' ').unwrap();
                let family = match kind {
                    "counter" => name
                        .strip_suffix("_total")
                        .expect("a counter ends in _total"),
                    _ => name,
                };
                assert!(families.insert(family.to_string()), "family twice: {l}");
            }
            continue;
        }
        let (key, v) = l.rsplit_once(' ').unwrap_or_else(|| panic!("sample: {l}"));
        let v: f64 = v.parse().unwrap_or_else(|_| panic!("value: {l}"));
        assert!(key.starts_with("kura_"), "{l}");
        assert!(out.insert(key.to_string(), v).is_none(), "twice: {l}");
    }
    out
}

fn metric_names(s: &BTreeMap<String, f64>) -> std::collections::BTreeSet<String> {
    s.keys()
        .map(|k| k.split('{').next().unwrap().to_string())
        .collect()
}

/// The address in the log line "metrics served on http://ADDR/metrics".
fn start_with_metrics(dir: &std::path::Path, args: &[&str]) -> (Server, String) {
    let log = dir.join("serve.log");
    let mut a = vec!["--log", log.to_str().unwrap(), "--metrics-port", "0"];
    a.extend_from_slice(args);
    // The log goes to the file: wait for its "listening on" line there.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kura"))
        .arg("serve")
        .args(&a)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start kura serve");
    let mut addr = None;
    let mut metrics = None;
    assert!(
        eventually(20, || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            for l in text.lines() {
                if let Some(r) = l.split("listening on ").nth(1) {
                    addr = r.split_whitespace().next().map(str::to_string);
                }
                if let Some(r) = l.split("metrics served on http://").nth(1) {
                    metrics = r.split('/').next().map(str::to_string);
                }
            }
            addr.is_some() && metrics.is_some()
        }),
        "the server did not start: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    if let Ok(Some(st)) = child.try_wait() {
        panic!("kura serve exited: {st}");
    }
    (
        Server {
            child,
            addr: addr.unwrap(),
        },
        metrics.unwrap(),
    )
}

#[test]
fn metrics_move_after_known_operations_on_every_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let (srv, maddr) = start_with_metrics(dir.path(), &["m.kh", "--port", "0", "--threads", "2"]);
    let before = samples(&get(&maddr, "/metrics").1);
    assert_eq!(before["kura_records"], 0.0);
    assert_eq!(before["kura_commands_total{command=\"set\"}"], 0.0);

    let mut s = srv.connect();
    assert_eq!(mc(&mut s, "set a 0 0 1\r\nx\r\n"), "STORED\r\n");
    assert_eq!(mc(&mut s, "get a\r\n"), "VALUE a 0 1\r\n");
    assert_eq!(mc(&mut s, ""), "x\r\n");
    assert_eq!(mc(&mut s, ""), "END\r\n");
    assert_eq!(mc(&mut s, "get nope\r\n"), "END\r\n");
    assert_eq!(mc(&mut s, "delete nope\r\n"), "NOT_FOUND\r\n");
    let mut t = Tt::new(&srv.addr);
    assert_eq!(t.put(b"tk", b"tv"), 0);
    assert_eq!(t.put(b"tk2", b"tv"), 0);
    assert_eq!(t.get(b"missing"), None);
    // The main port's HTTP interface serves the same page (and counts as an HTTP request).
    let (status, page) = get(&srv.addr, "/metrics");
    assert_eq!(status, 200);
    let m = samples(&page);
    let v = |k: &str| *m.get(k).unwrap_or_else(|| panic!("no {k} in\n{page}"));
    assert_eq!(v("kura_records"), 3.0);
    assert_eq!(v("kura_commands_total{command=\"set\"}"), 1.0);
    assert_eq!(v("kura_commands_total{command=\"get\"}"), 2.0);
    assert_eq!(v("kura_hits_total{command=\"get\"}"), 1.0);
    assert_eq!(v("kura_misses_total{command=\"get\"}"), 1.0);
    assert_eq!(v("kura_misses_total{command=\"delete\"}"), 1.0);
    assert_eq!(v("kura_tyrant_commands_total{command=\"put\"}"), 2.0);
    assert_eq!(v("kura_tyrant_commands_total{command=\"get\"}"), 1.0);
    assert_eq!(v("kura_tyrant_misses_total{command=\"get\"}"), 1.0);
    assert_eq!(
        v("kura_request_duration_seconds_count{protocol=\"memcached_text\"}"),
        4.0
    );
    assert_eq!(
        v("kura_request_duration_seconds_count{protocol=\"tyrant\"}"),
        3.0
    );
    // Buckets are cumulative and end with every request.
    assert_eq!(
        v("kura_request_duration_seconds_bucket{protocol=\"tyrant\",le=\"+Inf\"}"),
        3.0
    );
    assert!(v("kura_request_duration_seconds_sum{protocol=\"tyrant\"}") > 0.0);
    assert!(v("kura_received_bytes_total") >= 60.0);
    assert!(v("kura_sent_bytes_total") >= 30.0);
    assert_eq!(v("kura_current_connections"), 3.0);
    assert_eq!(v("kura_connections_total"), 3.0);
    assert_eq!(v("kura_connections_rejected_total"), 0.0);
    // The engine's counters, each a metric of its own.
    assert!(m.contains_key("kura_engine_syncs_total"), "{page}");
    assert!(m.contains_key("kura_engine_checkpoints_total"), "{page}");
    assert_eq!(v("kura_damaged_regions"), 0.0);
    assert!(page.contains("# TYPE kura_request_duration_seconds histogram"));
    assert!(page.contains("# TYPE kura_commands_total counter"));
    assert!(page.contains("# TYPE kura_current_connections gauge"));

    // The metrics port answers GET /metrics only.
    assert_eq!(get(&maddr, "/other").0, 404);
    let after = samples(&get(&maddr, "/metrics").1);
    assert_eq!(
        after["kura_request_duration_seconds_count{protocol=\"http\"}"],
        1.0
    );
}

#[test]
fn the_mask_refuses_metrics_as_stat() {
    let dir = tempfile::tempdir().unwrap();
    let (srv, maddr) = start_with_metrics(
        dir.path(),
        &["*", "--port", "0", "--threads", "1", "--mask", "stat"],
    );
    assert_eq!(get(&maddr, "/metrics").0, 403);
    assert_eq!(get(&srv.addr, "/metrics").0, 403);
}

#[test]
fn a_refused_connection_is_counted_and_logged_at_a_bounded_pace() {
    let dir = tempfile::tempdir().unwrap();
    let (srv, maddr) = start_with_metrics(
        dir.path(),
        &[
            "*",
            "--port",
            "0",
            "--threads",
            "1",
            "--max-connections",
            "1",
        ],
    );
    let mut first = srv.connect();
    assert!(mc(&mut first, "version\r\n").starts_with("VERSION"));
    for _ in 0..20 {
        let mut s = srv.connect();
        let mut got = String::new();
        let _ = s.read_to_string(&mut got);
        assert_eq!(got, "SERVER_ERROR too many open connections\r\n");
    }
    let m = samples(&get(&maddr, "/metrics").1);
    assert_eq!(m["kura_connections_rejected_total"], 20.0);
    let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap();
    let refused: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("refused a connection from 127.0.0.1:"))
        .collect();
    // The first of the burst at once, the rest counted in the next line (10 s later).
    assert_eq!(refused.len(), 1, "{log}");
    assert!(refused[0].contains(" WARN kura["), "{log}");
    assert!(refused[0].contains("--max-connections 1 reached"), "{log}");
}

/// Every `kura_*` name in the dashboard's queries.
fn dashboard_metrics() -> std::collections::BTreeSet<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/grafana/kura.json"
    );
    let text = std::fs::read_to_string(path).expect("deploy/grafana/kura.json");
    let mut names = std::collections::BTreeSet::new();
    for expr in text.split("\"expr\": \"").skip(1) {
        let expr = expr.split('"').next().unwrap();
        let mut rest = expr;
        while let Some(i) = rest.find("kura_") {
            let name: String = rest[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[i + name.len()..];
            names.insert(name);
        }
    }
    assert!(names.len() > 10, "{names:?}");
    names
}

#[test]
fn every_metric_the_dashboard_queries_is_in_a_scrape() {
    let dir = tempfile::tempdir().unwrap();
    // A master with an update log and a replica following it: the replication metrics too.
    let mdir = dir.path().join("m");
    let rdir = dir.path().join("r");
    std::fs::create_dir_all(&mdir).unwrap();
    std::fs::create_dir_all(&rdir).unwrap();
    let (master, mm) = start_with_metrics(
        &mdir,
        &[
            "m.kh",
            "--port",
            "0",
            "--threads",
            "1",
            "--sid",
            "1",
            "--ulog",
            "mlog",
        ],
    );
    let (_replica, rm) = start_with_metrics(
        &rdir,
        &[
            "*",
            "--port",
            "0",
            "--threads",
            "1",
            "--sid",
            "2",
            "--master",
            &master.addr,
        ],
    );
    let mut t = Tt::new(&master.addr);
    t.put(b"k", b"v");
    assert!(
        eventually(20, || get(&mm, "/metrics")
            .1
            .contains("kura_replica_lag_seconds{sid=\"2\"}")),
        "the master never reported its replica"
    );
    let mut have = metric_names(&samples(&get(&mm, "/metrics").1));
    have.extend(metric_names(&samples(&get(&rm, "/metrics").1)));
    let missing: Vec<String> = dashboard_metrics()
        .into_iter()
        .filter(|n| !have.contains(n))
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries {missing:?}, which no scrape has"
    );
}
