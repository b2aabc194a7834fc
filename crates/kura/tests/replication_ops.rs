//! Replication as an operator runs it, between real `kura serve` processes on loopback:
//! `kura remote setmst`, `replicas` and `forget` (with Kura's `misc ulogstat` and
//! `ulogforget`), a chain of three servers that survives a restart of the middle one, and
//! SIGKILL of master and replica at once under a writer that counts its acknowledged writes.

mod common;

use common::{port_of, Server};
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A port free right now (the server binds it next).
fn free_port() -> String {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string()
}

fn serve(dir: &Path, args: &[&str]) -> Server {
    let mut a = vec!["--threads", "2"];
    a.extend_from_slice(args);
    Server::start_args(dir, &a, 1).0
}

/// `kura ARGS…` in `dir`.
fn kura(dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A minimal Tokyo Tyrant client whose calls report I/O errors (the server may be killed).
struct Tt(TcpStream);

impl Tt {
    fn connect(addr: &str) -> io::Result<Tt> {
        let s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        Ok(Tt(s))
    }
    fn new(addr: &str) -> Tt {
        Tt::connect(addr).unwrap()
    }
    fn read_n(&mut self, n: usize) -> io::Result<Vec<u8>> {
        let mut b = vec![0u8; n];
        self.0.read_exact(&mut b)?;
        Ok(b)
    }
    fn u32(&mut self) -> io::Result<u32> {
        let b = self.read_n(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn try_put(&mut self, k: &[u8], v: &[u8]) -> io::Result<u8> {
        let mut m = vec![0xC8, 0x10];
        m.extend_from_slice(&(k.len() as u32).to_be_bytes());
        m.extend_from_slice(&(v.len() as u32).to_be_bytes());
        m.extend_from_slice(k);
        m.extend_from_slice(v);
        self.0.write_all(&m)?;
        Ok(self.read_n(1)?[0])
    }
    fn put(&mut self, k: &[u8], v: &[u8]) -> u8 {
        self.try_put(k, v).unwrap()
    }
    fn out(&mut self, k: &[u8]) -> u8 {
        let mut m = vec![0xC8, 0x20];
        m.extend_from_slice(&(k.len() as u32).to_be_bytes());
        m.extend_from_slice(k);
        self.0.write_all(&m).unwrap();
        self.read_n(1).unwrap()[0]
    }
    fn get(&mut self, k: &[u8]) -> Option<Vec<u8>> {
        let mut m = vec![0xC8, 0x30];
        m.extend_from_slice(&(k.len() as u32).to_be_bytes());
        m.extend_from_slice(k);
        self.0.write_all(&m).unwrap();
        if self.read_n(1).unwrap()[0] != 0 {
            return None;
        }
        let n = self.u32().unwrap() as usize;
        Some(self.read_n(n).unwrap())
    }
    /// Every key (fwmkeys with an empty prefix).
    fn keys(&mut self) -> Vec<Vec<u8>> {
        let mut m = vec![0xC8, 0x58];
        m.extend_from_slice(&0u32.to_be_bytes());
        m.extend_from_slice(&(-1i32).to_be_bytes());
        self.0.write_all(&m).unwrap();
        assert_eq!(self.read_n(1).unwrap()[0], 0);
        let n = self.u32().unwrap();
        (0..n)
            .map(|_| {
                let l = self.u32().unwrap() as usize;
                self.read_n(l).unwrap()
            })
            .collect()
    }
    fn stat(&mut self) -> BTreeMap<String, String> {
        self.0.write_all(&[0xC8, 0x88]).unwrap();
        assert_eq!(self.read_n(1).unwrap()[0], 0);
        let n = self.u32().unwrap() as usize;
        let text = String::from_utf8(self.read_n(n).unwrap()).unwrap();
        text.lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }
    fn digest(&mut self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let keys = self.keys();
        keys.into_iter()
            .filter_map(|k| self.get(&k).map(|v| (k, v)))
            .collect()
    }
}

/// Wait until `f` holds (at most `secs`).
fn eventually(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

fn converge(master: &str, replica: &str, secs: u64) {
    let (mut m, mut r) = (Tt::new(master), Tt::new(replica));
    let mut last = (BTreeMap::new(), BTreeMap::new());
    let ok = eventually(secs, || {
        last = (m.digest(), r.digest());
        last.0 == last.1
    });
    assert!(
        ok,
        "no convergence: master {} keys, replica {} keys",
        last.0.len(),
        last.1.len()
    );
}

/// The update log files in `dir`.
fn log_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "kul"))
        .count()
}

#[test]
fn kura_remote_setmst_replicas_and_forget() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mp = free_port();
    let master_at = format!("127.0.0.1:{mp}");
    // 2 MiB log files (a quarter of the cap), kept only as long as a replica needs them.
    let master = serve(
        d,
        &[
            "m.kh",
            "--port",
            &mp,
            "--sid",
            "1",
            "--ulog",
            "mlog",
            "--ulog-limit",
            "8m",
            "--ulog-keep",
            "0",
        ],
    );
    let replica = serve(d, &["r.kh", "--port", "0", "--sid", "2"]);
    let rp = port_of(&replica.addr).to_string();
    let mut t = Tt::new(&master.addr);
    t.put(b"before", b"1");

    // setmst: the server becomes a replica of the master.
    let o = kura(d, &["remote", "--port", &rp, "setmst", &master_at]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stdout(&o), format!("following {master_at}\n"));
    t.put(b"after", b"2");
    converge(&master.addr, &replica.addr, 20);
    assert_eq!(
        Tt::new(&replica.addr).put(b"x", b"y"),
        1,
        "a replica refuses"
    );
    let o = kura(d, &["remote", "--port", &rp, "setmst", "nocolon"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");

    // replicas, on the master and on the replica.
    let mut text = String::new();
    assert!(
        eventually(10, || {
            text = stdout(&kura(d, &["remote", "--port", &mp, "replicas"]));
            text.contains("replica 2: confirmed ") && text.contains(", connected, 127.0.0.1:")
        }),
        "{text}"
    );
    assert!(text.starts_with("server 1: update log up to "), "{text}");
    assert!(!text.contains("master "), "{text}");
    let o = kura(d, &["remote", "--port", &rp, "replicas"]);
    let text = stdout(&o);
    assert!(o.status.success(), "{o:?}");
    assert!(
        text.contains("server 2: no update log (--ulog): it feeds no replicas"),
        "{text}"
    );
    assert!(
        text.contains(&format!("master {master_at} (server 1): position ")),
        "{text}"
    );
    assert!(text.contains(" s, connected"), "{text}");

    // misc ulogstat: name / value pairs.
    let o = kura(d, &["remote", "--port", &mp, "misc", "ulogstat"]);
    assert!(o.status.success(), "{o:?}");
    let items: Vec<String> = stdout(&o).lines().map(str::to_string).collect();
    let pairs: BTreeMap<&str, &str> = items
        .chunks(2)
        .map(|p| (p[0].as_str(), p[1].as_str()))
        .collect();
    assert_eq!(pairs.get("sid"), Some(&"1"), "{items:?}");
    assert!(pairs["last_ts"].parse::<u64>().unwrap() > 0, "{items:?}");
    assert_eq!(pairs.get("files"), Some(&"1"), "{items:?}");
    assert!(pairs["replica_2"].contains("connected=true"), "{items:?}");

    // A server without an update log refuses them with the failure code.
    let o = kura(d, &["remote", "--port", &rp, "misc", "ulogforget", "2"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let o = kura(d, &["remote", "--port", &rp, "forget", "2"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no update log"),
        "{o:?}"
    );

    // Promotion: setmst --none; the server takes writes; the master sees it go.
    let o = kura(d, &["remote", "--port", &rp, "setmst", "--none"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(Tt::new(&replica.addr).put(b"x", b"y"), 0, "promoted");
    let st = Tt::new(&replica.addr).stat();
    assert!(!st.contains_key("mhost"), "{st:?}");
    assert!(
        !stdout(&kura(d, &["remote", "--port", &rp, "replicas"])).contains("master "),
        "no master any more"
    );
    let mut text = String::new();
    assert!(
        eventually(10, || {
            text = stdout(&kura(d, &["remote", "--port", &mp, "replicas"]));
            text.contains("replica 2: confirmed ") && text.contains("not connected, last seen")
        }),
        "{text}"
    );

    // The replica that went away holds back retention until it is forgotten.
    let v = vec![b'v'; 4000];
    for i in 0..1500 {
        t.put(format!("k{}", i % 100).as_bytes(), &v);
    }
    std::thread::sleep(Duration::from_millis(1500));
    let held = log_files(&d.join("mlog"));
    assert!(held >= 3, "{held} log files");
    let o = kura(d, &["remote", "--port", &mp, "forget", "2"]);
    assert!(o.status.success(), "{o:?}");
    assert!(
        stdout(&o).starts_with("replica 2 forgotten (it was: confirmed="),
        "{o:?}"
    );
    assert!(
        eventually(10, || log_files(&d.join("mlog")) == 1),
        "retention after forget: {} files",
        log_files(&d.join("mlog"))
    );
    let text = stdout(&kura(d, &["remote", "--port", &mp, "replicas"]));
    assert!(text.contains("no replicas known"), "{text}");
    let o = kura(d, &["remote", "--port", &mp, "forget", "2"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("knows no replica 2"),
        "{o:?}"
    );
    // --mask setmst refuses the replication functions of misc too.
    drop(master);
    let masked = serve(
        d,
        &[
            "m.kh", "--port", "0", "--sid", "1", "--ulog", "mlog", "--mask", "setmst",
        ],
    );
    let o = kura(
        d,
        &[
            "remote",
            "--port",
            port_of(&masked.addr),
            "misc",
            "ulogstat",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{o:?}");
}

#[test]
fn a_chain_of_three_converges_and_the_last_keeps_following_across_a_restart_of_the_middle() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (ap, bp) = (free_port(), free_port());
    let (a_at, b_at) = (format!("127.0.0.1:{ap}"), format!("127.0.0.1:{bp}"));
    let a = serve(d, &["a.kh", "--port", &ap, "--sid", "1", "--ulog", "alog"]);
    let start_b = || {
        serve(
            d,
            &[
                "b.kh", "--port", &bp, "--sid", "2", "--ulog", "blog", "--master", &a_at,
            ],
        )
    };
    let mut b = start_b();
    let c = serve(d, &["c.kh", "--port", "0", "--sid", "3", "--master", &b_at]);
    let mut t = Tt::new(&a.addr);
    for i in 0..500 {
        t.put(
            format!("k{}", i % 200).as_bytes(),
            format!("v{i}").as_bytes(),
        );
        if i % 7 == 0 {
            t.out(format!("k{}", (i * 3) % 200).as_bytes());
        }
    }
    converge(&a.addr, &c.addr, 20);
    // The middle server is read-only and still answers the replication functions; it knows
    // both its master and its replica.
    let o = kura(d, &["remote", "--port", &bp, "misc", "ulogstat"]);
    assert!(o.status.success(), "{o:?}");
    assert!(stdout(&o).contains("replica_3"), "{o:?}");
    let text = stdout(&kura(d, &["remote", "--port", &bp, "replicas"]));
    assert!(text.contains("replica 3: confirmed "), "{text}");
    assert!(
        text.contains(&format!("master {a_at} (server 1)")),
        "{text}"
    );

    // The middle one is killed; writes go on at the head, then it comes back.
    b.signal(libc::SIGKILL);
    for i in 0..300 {
        t.put(format!("gap{i}").as_bytes(), b"while B was down");
    }
    b = start_b();
    for i in 0..300 {
        t.put(
            format!("k{}", i % 50).as_bytes(),
            format!("late{i}").as_bytes(),
        );
    }
    converge(&a.addr, &b.addr, 20);
    converge(&a.addr, &c.addr, 20);
    // The last one followed on from its position in the middle one's log: no snapshot but
    // the first.
    let st = Tt::new(&c.addr).stat();
    assert_eq!(
        st.get("repl_bootstraps").map(String::as_str),
        Some("1"),
        "{st:?}"
    );
    drop(b);
}

/// Key -> (its newest acknowledged write, its newest write sent).
type Writes = BTreeMap<String, (Option<u64>, u64)>;

#[test]
fn sigkill_of_master_and_replica_at_once_under_a_writer_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (mp, rp) = (free_port(), free_port());
    let master_at = format!("127.0.0.1:{mp}");
    let start_master = || {
        serve(
            d,
            &[
                "m.kh#sync=always",
                "--port",
                &mp,
                "--sid",
                "1",
                "--ulog",
                "mlog",
            ],
        )
    };
    let start_replica = || {
        serve(
            d,
            &["r.kh", "--port", &rp, "--sid", "2", "--master", &master_at],
        )
    };
    let mut master = start_master();
    let mut replica = start_replica();
    let writes: Arc<Mutex<Writes>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (addr, writes, stop) = (master.addr.clone(), writes.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut conn: Option<Tt> = None;
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let Some(t) = conn.as_mut() else {
                    conn = Tt::connect(&addr).ok();
                    if conn.is_none() {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    continue;
                };
                i += 1;
                let k = format!("k{}", i % 700);
                writes.lock().unwrap().entry(k.clone()).or_default().1 = i;
                match t.try_put(k.as_bytes(), i.to_string().as_bytes()) {
                    Ok(0) => writes.lock().unwrap().get_mut(&k).unwrap().0 = Some(i),
                    Ok(c) => panic!("put answered {c}"),
                    Err(_) => conn = None,
                }
            }
            i
        })
    };
    for round in 0..3 {
        std::thread::sleep(Duration::from_millis(600 + 200 * round));
        // Both at once.
        for s in [&master, &replica] {
            // SAFETY: sending a signal to our own child process.
            unsafe { libc::kill(s.child.id() as libc::pid_t, libc::SIGKILL) };
        }
        master.child.wait().unwrap();
        replica.child.wait().unwrap();
        master = start_master();
        replica = start_replica();
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let sent = writer.join().unwrap();
    let writes = writes.lock().unwrap().clone();
    let acked = writes.values().filter(|w| w.0.is_some()).count();
    assert!(
        acked > 100 && sent > 300,
        "{acked} keys acknowledged, {sent} writes sent"
    );
    // Each key holds its newest acknowledged write or a later one that was sent.
    let got = Tt::new(&master.addr).digest();
    for (k, (ack, last)) in &writes {
        let v = got
            .get(k.as_bytes())
            .map(|v| String::from_utf8_lossy(v).parse::<u64>().unwrap());
        match (ack, v) {
            (Some(a), Some(v)) => assert!(
                *a <= v && v <= *last,
                "{k}: acknowledged {a}, sent up to {last}, the master holds {v}"
            ),
            (Some(a), None) => panic!("{k}: acknowledged {a}, the master lost it"),
            (None, Some(v)) => assert!(v <= *last, "{k}: {v} was never sent"),
            (None, None) => {}
        }
    }
    converge(&master.addr, &replica.addr, 30);
}
