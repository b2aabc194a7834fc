//! Kyoto Tycoon's named signals through the real `kura serve`: the RPC parameters `WAIT` /
//! `WAITTIME` (run the procedure once the signal comes; 503 `the condition timed out` after
//! `WAITTIME` seconds) and `SIGNAL` / `SIGNALBROAD` (sent after the procedure; `SIGNALED` is
//! how many were waiting), as ktserver.cc handles them. Queues are built on them: a consumer
//! waits on `get` or `seize` until a producer's `set` signals.

mod common;

use common::{eventually, Server};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// One keep-alive HTTP connection; parameters go in the query string.
struct Rpc {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

impl Rpc {
    fn new(srv: &Server) -> Rpc {
        let w = srv.connect();
        w.set_nodelay(true).unwrap();
        let r = BufReader::new(w.try_clone().unwrap());
        Rpc { w, r }
    }

    fn send(&mut self, proc_query: &str) {
        let req = format!("GET /rpc/{proc_query} HTTP/1.1\r\nHost: x\r\n\r\n");
        self.w.write_all(req.as_bytes()).unwrap();
    }

    /// The next answer: status and TSV columns.
    fn answer(&mut self) -> (u16, BTreeMap<String, String>) {
        let mut line = String::new();
        self.r.read_line(&mut line).unwrap();
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .expect(&line)
            .parse()
            .unwrap();
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            self.r.read_line(&mut h).unwrap();
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (name, value) = h.split_once(':').unwrap();
            if name.eq_ignore_ascii_case("content-length") {
                len = value.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; len];
        self.r.read_exact(&mut body).unwrap();
        let cols = String::from_utf8(body)
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        (status, cols)
    }

    fn call(&mut self, proc_query: &str) -> (u16, BTreeMap<String, String>) {
        self.send(proc_query);
        self.answer()
    }

    /// Whether an answer arrives within `d` (nothing is consumed when none does).
    fn answers_within(&mut self, d: Duration) -> bool {
        self.w.set_read_timeout(Some(d)).unwrap();
        let got = self.r.fill_buf().is_ok_and(|b| !b.is_empty());
        self.w
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        got
    }
}

/// Requests parked waiting for a signal (`serv_wait_count` of `report`).
fn waiting(rpc: &mut Rpc) -> usize {
    let (status, cols) = rpc.call("report");
    assert_eq!(status, 200);
    cols["serv_wait_count"].parse().unwrap()
}

fn col<'a>(cols: &'a BTreeMap<String, String>, name: &str) -> Option<&'a str> {
    cols.get(name).map(String::as_str)
}

#[test]
fn a_waiting_get_runs_when_a_set_signals() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "*");
    let mut consumer = Rpc::new(&srv);
    let mut producer = Rpc::new(&srv);
    let mut admin = Rpc::new(&srv);
    consumer.send("get?key=job&WAIT=jobs&WAITTIME=20");
    assert!(eventually(5, || waiting(&mut admin) == 1));
    // Nothing is answered before the signal.
    assert!(!consumer.answers_within(Duration::from_millis(200)));
    // A signal with another name wakes nobody.
    let (status, cols) = producer.call("void?SIGNAL=other");
    assert_eq!((status, col(&cols, "SIGNALED")), (200, Some("0")));
    assert!(!consumer.answers_within(Duration::from_millis(100)));
    // The producer's set, then its signal: the consumer's get runs after the set.
    let (status, cols) = producer.call("set?key=job&value=work1&SIGNAL=jobs");
    assert_eq!((status, col(&cols, "SIGNALED")), (200, Some("1")));
    let (status, cols) = consumer.answer();
    assert_eq!((status, col(&cols, "value")), (200, Some("work1")));
    assert!(!cols.contains_key("SIGNALED"));
    assert_eq!(waiting(&mut admin), 0);
    // The connection goes on: a seize waits the same way, and takes the record.
    consumer.send("seize?key=job&WAIT=jobs&WAITTIME=20");
    assert!(eventually(5, || waiting(&mut admin) == 1));
    let (_, cols) = producer.call("void?SIGNAL=jobs");
    assert_eq!(col(&cols, "SIGNALED"), Some("1"));
    let (status, cols) = consumer.answer();
    assert_eq!((status, col(&cols, "value")), (200, Some("work1")));
    assert_eq!(consumer.call("get?key=job").0, 450);
    // A signal no one waits for is lost: a wait after it is not woken by it.
    let (_, cols) = producer.call("void?SIGNAL=jobs");
    assert_eq!(col(&cols, "SIGNALED"), Some("0"));
    let (status, _) = consumer.call("get?key=job&WAIT=jobs&WAITTIME=0.3");
    assert_eq!(status, 503);
}

#[test]
fn a_wait_times_out_with_503_and_the_connection_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "c.kh");
    let mut rpc = Rpc::new(&srv);
    assert_eq!(rpc.call("set?key=a&value=1").0, 200);
    let t = Instant::now();
    let (status, cols) = rpc.call("get?key=a&WAIT=never&WAITTIME=0.4&SIGNAL=x");
    let took = t.elapsed();
    assert_eq!(status, 503);
    assert_eq!(col(&cols, "ERROR"), Some("the condition timed out"));
    // The procedure did not run, and no signal was sent.
    assert!(!cols.contains_key("value") && !cols.contains_key("SIGNALED"));
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(5),
        "{took:?}"
    );
    // Keep-alive: the same connection answers the next request at once.
    let (status, cols) = rpc.call("get?key=a");
    assert_eq!((status, col(&cols, "value")), (200, Some("1")));
    // Requests sent behind a waiting one are answered after it, in order.
    rpc.send("get?key=a&WAIT=never&WAITTIME=0.2");
    rpc.send("set?key=a&value=2");
    assert_eq!(rpc.answer().0, 503);
    assert_eq!(rpc.answer().0, 200);
    assert_eq!(col(&rpc.call("get?key=a").1, "value"), Some("2"));
}

#[test]
fn signalbroad_wakes_every_waiter_and_signal_one() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "+");
    let mut admin = Rpc::new(&srv);
    let mut waiters: Vec<Rpc> = (0..2).map(|_| Rpc::new(&srv)).collect();
    for w in &mut waiters {
        w.send("void?WAIT=go&WAITTIME=20");
    }
    assert!(eventually(5, || waiting(&mut admin) == 2));
    let (status, cols) = admin.call("void?SIGNAL=go&SIGNALBROAD=1");
    assert_eq!((status, col(&cols, "SIGNALED")), (200, Some("2")));
    for w in &mut waiters {
        assert_eq!(w.answer().0, 200);
    }
    // SIGNAL alone: SIGNALED is how many were waiting (Kyoto Cabinet's count), one is woken.
    for w in &mut waiters {
        w.send("void?WAIT=go&WAITTIME=1.5");
    }
    assert!(eventually(5, || waiting(&mut admin) == 2));
    let (_, cols) = admin.call("void?SIGNAL=go");
    assert_eq!(col(&cols, "SIGNALED"), Some("2"));
    let t = Instant::now();
    let mut statuses: Vec<u16> = waiters.iter_mut().map(|w| w.answer().0).collect();
    statuses.sort();
    assert_eq!(statuses, [200, 503], "the other one timed out");
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_wait_ends_when_its_connection_closes() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), "*");
    let mut admin = Rpc::new(&srv);
    let mut gone = Rpc::new(&srv);
    gone.send("get?key=a&WAIT=q&WAITTIME=60");
    assert!(eventually(5, || waiting(&mut admin) == 1));
    drop(gone);
    assert!(eventually(5, || waiting(&mut admin) == 0));
    // Nobody is left to wake.
    let (_, cols) = admin.call("void?SIGNAL=q&SIGNALBROAD=1");
    assert_eq!(col(&cols, "SIGNALED"), Some("0"));
}
