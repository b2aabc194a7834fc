//! systemd's readiness protocol (`Type=notify`), without libsystemd: one datagram per state
//! (`READY=1`, `STOPPING=1`, `STATUS=…`) to the Unix socket named by `$NOTIFY_SOCKET` (a path,
//! or `@name` in the abstract namespace).

use std::os::unix::net::UnixDatagram;

pub struct Notify {
    path: String,
}

impl Notify {
    /// The socket systemd gave, if any. The variable is removed so that the programs the
    /// server runs (backup commands) do not speak for it; call before any thread starts.
    pub fn from_env() -> Option<Notify> {
        let path = std::env::var("NOTIFY_SOCKET").ok()?;
        // At start-up, before the server starts any thread.
        std::env::remove_var("NOTIFY_SOCKET");
        (!path.is_empty()).then_some(Notify { path })
    }

    /// Send `state` (newline-separated `KEY=value` lines).
    pub fn send(&self, state: &str) -> std::io::Result<()> {
        let sock = UnixDatagram::unbound()?;
        if let Some(name) = self.path.strip_prefix('@') {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            sock.send_to_addr(state.as_bytes(), &addr)?;
        } else {
            sock.send_to(state.as_bytes(), &self.path)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_to_a_path_and_to_an_abstract_name() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("notify");
        let rx = UnixDatagram::bind(&p).unwrap();
        let n = Notify {
            path: p.to_string_lossy().into_owned(),
        };
        n.send("READY=1").unwrap();
        let mut buf = [0u8; 64];
        let len = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"READY=1");

        use std::os::linux::net::SocketAddrExt;
        let name = format!("kura-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let rx = UnixDatagram::bind_addr(&addr).unwrap();
        Notify {
            path: format!("@{name}"),
        }
        .send("STOPPING=1")
        .unwrap();
        let len = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"STOPPING=1");
    }
}
