//! twemproxy (Debian's `nutcracker`) for the tests that put it in front of `kura serve`
//! shards: where its binary is (or why the test is skipped), twemproxy's ketama ring, one
//! request on a fresh connection, a deploy/ configuration rewritten for the test. Included by `#[path]` from those tests only.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// nutcracker's path; `None` (with a notice) when it is not installed, a failure under CI
/// unless `KURA_NO_NUTCRACKER` says its package cannot be installed there.
pub fn nutcracker_bin() -> Option<PathBuf> {
    let found = [
        "/usr/sbin/nutcracker",
        "/usr/bin/nutcracker",
        "/usr/local/sbin/nutcracker",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.exists());
    if found.is_none() {
        if std::env::var("CI").is_ok_and(|v| v == "true")
            && std::env::var_os("KURA_NO_NUTCRACKER").is_none()
        {
            panic!("nutcracker is not installed: scripts/test.sh installs it (apt-get install nutcracker)");
        }
        eprintln!(
            "NOTICE: nutcracker (twemproxy) is not installed; the twemproxy test is skipped \
             (apt-get install nutcracker, or run scripts/test.sh)"
        );
    }
    found
}

/// The ketama ring twemproxy builds (nc_ketama.c): per server of weight w out of a total W
/// among n servers, floor(w / W * 160 / 4 * n) * 4 points; the md5 of "NAME-i" gives four, each
/// four of its bytes little-endian; NAME is the server's name when the pool gives one, else
/// "host:port", or "host" when the port is 11211. A key goes to the first point at or past the
/// md5 hash of the key (its first four bytes little-endian), wrapping round.
pub struct Ring(Vec<(u32, usize)>);

impl Ring {
    /// The ring of servers named (or addressed) `servers`, all of weight 1.
    pub fn new(servers: &[String]) -> Ring {
        let mut points = Vec::new();
        for (i, s) in servers.iter().enumerate() {
            let name = s.strip_suffix(":11211").unwrap_or(s);
            for n in 0..160 / 4 {
                let d = kura_server::script::util::md5(format!("{name}-{n}").as_bytes());
                for four in d.chunks_exact(4) {
                    points.push((u32::from_le_bytes(four.try_into().unwrap()), i));
                }
            }
        }
        points.sort();
        Ring(points)
    }

    pub fn shard(&self, key: &str) -> usize {
        let d = kura_server::script::util::md5(key.as_bytes());
        let h = u32::from_le_bytes(d[..4].try_into().unwrap());
        let at = self.0.partition_point(|&(v, _)| v < h);
        self.0[at % self.0.len()].1
    }
}

/// One request on a fresh connection (twemproxy closes a client's connection on an error):
/// the reply up to `end`, or what came before the connection closed or went quiet.
pub fn ask(addr: &str, req: &str, end: &str) -> String {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return "<refused>".into();
    };
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s.write_all(req.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(end.as_bytes()) && !got.starts_with(b"SERVER_ERROR") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

pub fn get(addr: &str, key: &str) -> String {
    ask(addr, &format!("get {key}\r\n"), "END\r\n")
}

/// deploy/`file` with its listen address and its servers' addresses (in order) replaced; each
/// server's weight and name (`host:port:weight [name]`) kept.
pub fn rewrite_config(file: &str, listen: &str, shards: &[String]) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(file);
    let text = std::fs::read_to_string(path).expect(file);
    let mut next = shards.iter();
    let mut out = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        if trimmed.starts_with("listen:") {
            out.push_str(&format!("{indent}listen: {listen}\n"));
        } else if let Some(server) = trimmed.strip_prefix("- ") {
            let (addr_weight, name) = server.split_once(' ').unwrap_or((server, ""));
            let weight = addr_weight.split(':').nth(2).expect("host:port:weight");
            let addr = next.next().expect("as many servers as shards");
            let sep = if name.is_empty() { "" } else { " " };
            out.push_str(&format!("{indent}- {addr}:{weight}{sep}{name}\n"));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(
        next.next().is_none(),
        "deploy/{file} lists fewer servers than shards"
    );
    out
}
