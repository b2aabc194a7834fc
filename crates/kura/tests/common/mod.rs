//! The harness shared by the integration tests that start the real `kura serve`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Server {
    pub child: Child,
    pub addr: String,
}

impl Server {
    /// Start `kura serve NAME --port 0` and wait for its "listening on" line (never sleep).
    pub fn start(dir: &std::path::Path, name: &str) -> Server {
        Server::start_with(dir, name, &[])
    }

    /// Start with extra `kura serve` options.
    pub fn start_with(dir: &std::path::Path, name: &str, extra: &[&str]) -> Server {
        let mut args = vec![name, "--port", "0", "--threads", "2"];
        args.extend_from_slice(extra);
        Server::start_args(dir, &args, 1).0
    }

    /// Start `kura serve ARGS…` and wait for `listeners` "listening on" lines; returns the
    /// server (its `addr` the first listener's) and every listener's address, in order.
    pub fn start_args(
        dir: &std::path::Path,
        args: &[&str],
        listeners: usize,
    ) -> (Server, Vec<String>) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kura"))
            .arg("serve")
            .args(args)
            .current_dir(dir)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("start kura serve");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let mut addrs = Vec::new();
        while addrs.len() < listeners {
            let line = lines
                .next()
                .expect("kura serve exited before listening")
                .expect("read stderr");
            if let Some(rest) = line.split("listening on ").nth(1) {
                addrs.push(rest.split_whitespace().next().expect("address").to_string());
            }
        }
        // Keep draining the log so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let addr = addrs[0].clone();
        (Server { child, addr }, addrs)
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(&self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    pub fn signal(&mut self, sig: libc::c_int) -> std::process::ExitStatus {
        // SAFETY: sending a signal to our own child process.
        unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        self.child.wait().expect("wait")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The port of a server address `host:port`.
pub fn port_of(addr: &str) -> &str {
    addr.rsplit(':').next().expect("port")
}
