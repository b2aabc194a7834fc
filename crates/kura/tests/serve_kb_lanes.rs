//! A `.kb` served by `kura serve`: each server thread writes its own lane of the tree's
//! write-ahead log, and a key changed from connections served by different threads comes back
//! after a SIGKILL and a restart (the log replayed, not a checkpoint) at its last value.

mod common;

use common::{mc, Server};
use std::collections::BTreeMap;
use std::time::Duration;

#[test]
fn a_kb_killed_after_writes_from_several_connections_replays_each_key_to_its_last_value() {
    let dir = tempfile::tempdir().unwrap();
    let name = "t.kb";
    let mut srv = Server::start(dir.path(), name);
    let mut conns: Vec<_> = (0..4).map(|_| srv.connect()).collect();
    let mut model = BTreeMap::new();
    for round in 0..400usize {
        let key = format!("k{:02}", round % 25);
        // The key from one connection, then another, then the first again.
        for (c, tag) in [(round % 4, "a"), ((round + 1) % 4, "b"), (round % 4, "c")] {
            let value = format!("{tag}{round}");
            if round % 7 == 6 && tag == "c" {
                let r = mc(&mut conns[c], &format!("delete {key}\r\n"));
                assert!(r == "DELETED\r\n" || r == "NOT_FOUND\r\n", "{r}");
                model.remove(&key);
                continue;
            }
            let r = mc(
                &mut conns[c],
                &format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()),
            );
            assert_eq!(r, "STORED\r\n");
            model.insert(key.clone(), value);
        }
    }
    // The default sync mode hands each lane's buffer to the OS within a tick: a killed
    // process loses none of it after that.
    std::thread::sleep(Duration::from_millis(600));
    drop(conns);
    srv.signal(libc::SIGKILL);

    let srv = Server::start(dir.path(), name);
    let mut s = srv.connect();
    for round in 0..25usize {
        let key = format!("k{round:02}");
        let r = mc(&mut s, &format!("get {key}\r\n"));
        match model.get(&key) {
            Some(v) => {
                assert_eq!(r, format!("VALUE {key} 0 {}\r\n", v.len()), "{key}");
                assert_eq!(mc(&mut s, ""), format!("{v}\r\n"), "{key}");
                assert_eq!(mc(&mut s, ""), "END\r\n");
            }
            None => assert_eq!(r, "END\r\n", "{key} should be gone"),
        }
    }
}
