//! The update log with keyspaces through the real binary: a master whose log holds changes of
//! keyspaces and batches across them (written through `Logged`, as an embedder writes them)
//! is served by `kura serve --ulog`; a Kura replica ends equal in every keyspace, a Tyrant
//! stream's replica is sent none of them (counted), `kura db restore --until` is exact in
//! every keyspace, and `kura db ulog` names the keyspaces.

mod common;

use common::{converge, copy_dir, eventually, ok_stdout as ok, serve, Tt};
use kura_engine::store::{BatchOp, Store};
use kura_engine::ulog::logged::Logged;
use kura_engine::ulog::{Config, Ulog};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

type Digest = BTreeMap<Vec<u8>, Vec<u8>>;
/// A `.kb`'s own records, keyspace `idx`'s, and `idx`'s keys in its order.
type State = (Digest, Digest, Vec<String>);

fn digest(s: &dyn Store) -> Digest {
    let mut d = BTreeMap::new();
    s.for_each_record(&mut |k, v, _| {
        d.insert(k.to_vec(), v.to_vec());
        Ok(true)
    })
    .unwrap();
    d
}

/// The keys of a store in its order.
fn keys(s: &dyn Store) -> Vec<String> {
    let mut c = s.cursor().unwrap();
    let mut out = Vec::new();
    if c.first().unwrap() {
        while let Some((k, _)) = c.next().unwrap() {
            out.push(String::from_utf8(k).unwrap());
        }
    }
    out
}

fn put(key: &str, value: &str) -> BatchOp {
    BatchOp::Put {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        flags: 0,
        expires: 0,
    }
}

/// The state of a `.kb`: its own records and keyspace `idx`'s, with `idx`'s key order.
fn state_of(path: &Path) -> State {
    let db = kura_engine::open(&path.display().to_string()).unwrap();
    let idx = db.keyspace("idx", "").unwrap();
    let s = (digest(&*db), digest(&*idx), keys(&*idx));
    db.close().unwrap();
    s
}

/// `m.kb` and its update log `mlog` (server id 9), written through `Logged`: a backup
/// `bk.kb` taken half way, and the state after each later change with its time stamp.
fn seed(d: &Path) -> Vec<(u64, State)> {
    let inner = kura_engine::open(&d.join("m.kb").display().to_string()).unwrap();
    let log = Ulog::open(Config::new(d.join("mlog"), 9)).unwrap();
    let db = Logged::new(inner, log.clone()).unwrap();
    let idx = db.keyspace("idx", "cmp=decimal").unwrap();
    db.put(b"row0", b"zero").unwrap();
    idx.put(b"100", b"row0").unwrap();
    db.write_across(&[("", put("row1", "one")), ("idx", put("9", "row1"))])
        .unwrap();
    db.copy_to(&d.join("bk.kb")).unwrap();
    let mut states = Vec::new();
    let snap = |db: &Logged, idx: &dyn Store| (log.last_ts(), (digest(db), digest(idx), keys(idx)));
    for i in 2..8 {
        db.write_across(&[
            ("", put(&format!("row{i}"), &format!("v{i}"))),
            ("idx", put(&(i * 7).to_string(), &format!("row{i}"))),
            ("idx", BatchOp::Remove { key: b"9".to_vec() }),
        ])
        .unwrap();
        states.push(snap(&db, &*idx));
        idx.out(b"100").unwrap();
        idx.put(&(1000 + i).to_string().into_bytes(), b"single")
            .unwrap();
        states.push(snap(&db, &*idx));
    }
    db.close().unwrap();
    states
}

fn kura(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kura"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

#[test]
fn a_kura_replica_ends_equal_in_every_keyspace() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let states = seed(d);
    let want = states.last().unwrap().1.clone();
    // The replica's database holds keyspace records only (no records of its own): it counts
    // as empty and is replaced by the snapshot, keyspaces included.
    {
        let r = kura_engine::open(&d.join("r.kb").display().to_string()).unwrap();
        r.keyspace("idx", "cmp=decimal")
            .unwrap()
            .put(b"5000", b"stale")
            .unwrap();
        r.keyspace("old", "").unwrap().put(b"x", b"stale").unwrap();
        r.close().unwrap();
    }
    let master = serve(d, &["m.kb", "--port", "0", "--sid", "9", "--ulog", "mlog"]);
    let mut replica = serve(
        d,
        &[
            "r.kb",
            "--port",
            "0",
            "--sid",
            "2",
            "--ulog",
            "rlog",
            "--master",
            &master.addr,
        ],
    );
    // A write over the wire after the replica started.
    Tt::new(&master.addr).put(b"wire", b"w");
    converge(&master.addr, &replica.addr, 20);
    replica.signal(libc::SIGTERM);
    let (own, idx, order) = state_of(&d.join("r.kb"));
    let mut own_want = want.0.clone();
    own_want.insert(b"wire".to_vec(), b"w".to_vec());
    assert_eq!(own, own_want);
    assert_eq!(idx, want.1);
    let r = kura_engine::open(&d.join("r.kb").display().to_string()).unwrap();
    assert!(digest(&*r.keyspace("old", "").unwrap()).is_empty());
    r.close().unwrap();
    // Made with the master's `cmp=decimal`.
    assert_eq!(order, want.2);
    assert!(order
        .first()
        .is_some_and(|k| k.len() < order.last().unwrap().len()));
    // The replica bootstrapped from a snapshot holding every keyspace, which its own log
    // names; the master's log lists batches across keyspaces element by element.
    let listing = ok(kura(d, &["db", "ulog", "rlog"]));
    assert!(listing.contains("\tput@idx\t1007\n"), "{listing}");
    let listing = ok(kura(d, &["db", "ulog", "mlog"]));
    assert!(listing.contains("\tbatch.put\trow2\n"), "{listing}");
    assert!(listing.contains("\tbatch.put@idx\t14\n"), "{listing}");
    assert!(listing.contains("\tbatch.out@idx\t9\n"), "{listing}");
    assert!(listing.contains("\tout@idx\t100\n"), "{listing}");
}

#[test]
fn a_tyrant_stream_sends_no_keyspace_change_and_counts_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let states = seed(d);
    let want = states.last().unwrap().1.clone();
    let master = serve(d, &["m.kb", "--port", "0", "--sid", "9", "--ulog", "mlog"]);
    let mut replica = serve(
        d,
        &[
            "t.kb",
            "--port",
            "0",
            "--sid",
            "3",
            "--master",
            &master.addr,
            "--master-protocol",
            "tyrant",
        ],
    );
    converge(&master.addr, &replica.addr, 20);
    let skipped = |addr: &str| {
        Tt::new(addr)
            .stat()
            .get("repl_keyspace_skipped")
            .and_then(|v| v.parse::<u64>().ok())
    };
    // Every change of `idx` the log holds, each a line of the listing.
    let listing = ok(kura(d, &["db", "ulog", "mlog"]));
    let of_idx = listing.lines().filter(|l| l.contains("@idx\t")).count() as u64;
    assert!(of_idx >= 20, "{listing}");
    assert!(
        eventually(10, || skipped(&master.addr) == Some(of_idx)),
        "{:?} of {of_idx}",
        skipped(&master.addr)
    );
    replica.signal(libc::SIGTERM);
    let (own, idx, _) = state_of(&d.join("t.kb"));
    // The database's own records all arrived; no change of `idx` reached them.
    assert_eq!(own, want.0);
    assert!(idx.is_empty(), "{idx:?}");
}

#[test]
fn a_restore_until_a_time_is_exact_in_every_keyspace() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let states = seed(d);
    for (i, (ts, want)) in states.iter().enumerate().step_by(3) {
        let bk = format!("bk{i}.kb");
        copy_dir(&d.join("bk.kb"), &d.join(&bk));
        let o = ok(kura(
            d,
            &[
                "db",
                "restore",
                &bk,
                "--ulog",
                "mlog",
                "--until",
                &ts.to_string(),
            ],
        ));
        assert!(o.contains("records replayed"), "{o}");
        assert_eq!(&state_of(&d.join(&bk)), want, "restore up to state {i}");
    }
}

/// A `.kh` with keyspaces: a new Kura replica bootstraps every keyspace from the snapshot
/// (`Store::keyspaces` of the hash) and follows later changes of them.
#[test]
fn a_kura_replica_of_a_kh_ends_equal_in_every_keyspace() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    {
        let inner = kura_engine::open(&d.join("m.kh").display().to_string()).unwrap();
        let log = Ulog::open(Config::new(d.join("mlog"), 9)).unwrap();
        let db = Logged::new(inner, log).unwrap();
        let idx = db.keyspace("idx", "").unwrap();
        for i in 0..50 {
            db.write_across(&[
                ("", put(&format!("row{i}"), &format!("v{i}"))),
                ("idx", put(&format!("k{i}"), &format!("row{i}"))),
            ])
            .unwrap();
        }
        idx.out(b"k7").unwrap();
        db.close().unwrap();
    }
    let master = serve(d, &["m.kh", "--port", "0", "--sid", "9", "--ulog", "mlog"]);
    let mut replica = serve(
        d,
        &[
            "r.kh",
            "--port",
            "0",
            "--sid",
            "2",
            "--ulog",
            "rlog",
            "--master",
            &master.addr,
        ],
    );
    Tt::new(&master.addr).put(b"wire", b"w");
    converge(&master.addr, &replica.addr, 20);
    replica.signal(libc::SIGTERM);
    let mut master = master;
    master.signal(libc::SIGTERM);
    let both = |name: &str| {
        let db = kura_engine::open(&d.join(name).display().to_string()).unwrap();
        let s = (digest(&*db), digest(&*db.keyspace("idx", "").unwrap()));
        db.close().unwrap();
        s
    };
    let (m_own, m_idx) = both("m.kh");
    let (r_own, r_idx) = both("r.kh");
    assert_eq!(m_idx.len(), 49);
    assert!(!m_idx.contains_key(b"k7".as_slice()));
    assert_eq!(r_own, m_own);
    assert_eq!(r_idx, m_idx);
}
