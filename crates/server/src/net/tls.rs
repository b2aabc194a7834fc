//! TLS on the listeners that ask for it (`--tls-cert`, `--tls-key`, `--tls-ca`), with rustls.
//!
//! A connection's I/O goes through a [`Link`]: `Plain` reads and writes the socket as it is;
//! `Tls` passes the socket's bytes through a rustls `ServerConnection` (`read_tls` /
//! `process_new_packets` / the plaintext reader on the way in, the plaintext writer /
//! `write_tls` on the way out), with the connection's own buffers on either side. What the
//! protocols see is the same: the first decrypted byte picks the protocol, as on a plain port.
//!
//! [`Tls`] holds the certificate and key in force; [`Tls::reload`] (SIGHUP) swaps them for new
//! connections, and keeps the old ones when the files do not load.

use crate::out::Out;
use mio::net::TcpStream;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection};
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

/// The PEM files of `--tls-cert`, `--tls-key` and `--tls-ca`.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The server's certificate chain (leaf first).
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// With it, clients must present a certificate signed by one of these.
    pub ca: Option<PathBuf>,
}

/// What a connection's TLS session tells about it, for authentication.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsInfo {
    /// The subject of the client's certificate (`CN=…,O=…`, in the certificate's order), once
    /// verified against `--tls-ca`; `None` without `--tls-ca` (none is asked for).
    pub client_cert_subject: Option<String>,
}

/// The TLS settings in force (swapped whole on reload).
pub struct Tls {
    files: TlsFiles,
    current: RwLock<Arc<ServerConfig>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("files", &self.files).finish()
    }
}

impl Tls {
    /// Load the files; the error names the file and what is wrong with it.
    pub fn load(files: TlsFiles) -> Result<Tls, String> {
        let cfg = server_config(&files)?;
        Ok(Tls {
            files,
            current: RwLock::new(Arc::new(cfg)),
        })
    }

    /// Load the files again: new connections get what they hold now. On an error the settings
    /// in force stay, and the error says why.
    pub fn reload(&self) -> Result<(), String> {
        let cfg = server_config(&self.files)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(cfg);
        Ok(())
    }

    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// A new server session with the settings in force.
    pub(super) fn session(&self) -> Result<ServerConnection, rustls::Error> {
        let cfg = self
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        ServerConnection::new(cfg)
    }
}

fn server_config(files: &TlsFiles) -> Result<ServerConfig, String> {
    let show = |p: &PathBuf| p.display().to_string();
    let certs =
        read_certs(&files.cert).map_err(|e| format!("--tls-cert {}: {e}", show(&files.cert)))?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| {
        format!(
            "--tls-key {}: {}",
            show(&files.key),
            pem_error(e, "no private key (-----BEGIN PRIVATE KEY-----) in it")
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match &files.ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in read_certs(ca).map_err(|e| format!("--tls-ca {}: {e}", show(ca)))? {
                roots
                    .add(c)
                    .map_err(|e| format!("--tls-ca {}: {e}", show(ca)))?;
            }
            let v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("--tls-ca {}: {e}", show(ca)))?;
            builder.with_client_cert_verifier(v)
        }
    };
    builder.with_single_cert(certs, key).map_err(|e| {
        let why = match e {
            rustls::Error::InconsistentKeys(_) => {
                "the key is not the certificate's (they do not match)".to_string()
            }
            e => e.to_string(),
        };
        format!(
            "--tls-cert {} with --tls-key {}: {why}",
            show(&files.cert),
            show(&files.key)
        )
    })
}

fn read_certs(path: &PathBuf) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| pem_error(e, "not a PEM file"))?;
    if certs.is_empty() {
        return Err("no certificate (-----BEGIN CERTIFICATE-----) in it".into());
    }
    Ok(certs)
}

fn pem_error(e: rustls::pki_types::pem::Error, none: &str) -> String {
    use rustls::pki_types::pem::Error;
    match e {
        Error::Io(e) => e.to_string(),
        Error::NoItemsFound => none.to_string(),
        e => format!("not valid PEM ({e:?})"),
    }
}

/// A connection's I/O: the socket as it is, or through a TLS session.
pub(super) enum Link {
    Plain,
    Tls(Box<ServerConnection>),
}

impl Link {
    /// Read plaintext: `Ok(0)` at the end of the stream (TLS: close_notify, or the socket's
    /// end without one). A TLS error (a failed handshake, a bad record) is `InvalidData`, after
    /// the alert is sent.
    pub(super) fn read(&mut self, sock: &mut TcpStream, buf: &mut [u8]) -> io::Result<usize> {
        let t = match self {
            Link::Plain => return sock.read(buf),
            Link::Tls(t) => t,
        };
        loop {
            match t.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The peer closed the socket without close_notify: an end all the same.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            let n = t.read_tls(sock)?;
            let processed = t.process_new_packets();
            // Handshake messages, or the alert of a failure.
            let sent = send_tls(t, sock);
            if let Err(e) = processed {
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            sent?;
            if n == 0 {
                // The socket's end: the reader says how (clean or not) on the next turn, or
                // the handshake was cut off.
                if t.is_handshaking() {
                    return Ok(0);
                }
            }
        }
    }

    /// Write pending replies (through the session) until done or the socket is full.
    pub(super) fn write(&mut self, sock: &mut TcpStream, out: &mut Out) -> io::Result<()> {
        let t = match self {
            Link::Plain => return out.write_to(sock).map(|_| ()),
            Link::Tls(t) => t,
        };
        loop {
            if !send_tls(t, sock)? {
                return Ok(()); // the socket is full
            }
            let before = out.pending();
            if before == 0 {
                out.write_to(&mut io::sink())?; // resets the drained buffer
                return Ok(());
            }
            // Into the session's buffer (bounded by rustls), then out on the next turn.
            out.write_to(&mut Plaintext(t))?;
            if out.pending() == before {
                return Ok(()); // the session takes nothing yet (handshake under way)
            }
        }
    }

    /// Encrypted bytes wait for the socket.
    pub(super) fn wants_write(&self) -> bool {
        match self {
            Link::Plain => false,
            Link::Tls(t) => t.wants_write(),
        }
    }

    pub(super) fn is_plain(&self) -> bool {
        matches!(self, Link::Plain)
    }

    /// Tell the client the session ends (close_notify), as far as the socket takes it now.
    pub(super) fn close_notify(&mut self, sock: &mut TcpStream) {
        if let Link::Tls(t) = self {
            t.send_close_notify();
            let _ = send_tls(t, sock);
        }
    }

    /// What the session says about the client: `None` on a plain connection.
    pub(super) fn info(&self) -> Option<TlsInfo> {
        match self {
            Link::Plain => None,
            Link::Tls(t) => Some(TlsInfo {
                client_cert_subject: t
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(|c| subject(c)),
            }),
        }
    }
}

/// Write the session's encrypted bytes; false when the socket is full.
fn send_tls(t: &mut ServerConnection, sock: &mut TcpStream) -> io::Result<bool> {
    while t.wants_write() {
        match t.write_tls(sock) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// The session's plaintext side as a writer: a full buffer is `WouldBlock`.
struct Plaintext<'a>(&'a mut ServerConnection);

impl Write for Plaintext<'_> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self.0.writer().write(b)? {
            0 if !b.is_empty() => Err(io::ErrorKind::WouldBlock.into()),
            n => Ok(n),
        }
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self.0.writer().write_vectored(bufs)? {
            0 if bufs.iter().any(|b| !b.is_empty()) => Err(io::ErrorKind::WouldBlock.into()),
            n => Ok(n),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One DER element: (tag, contents, what follows).
fn der(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = b.split_first()?;
    let (&l, rest) = rest.split_first()?;
    let (len, rest) = if l < 0x80 {
        (l as usize, rest)
    } else {
        let k = (l & 0x7f) as usize;
        if k == 0 || k > 4 || rest.len() < k {
            return None;
        }
        let len = rest[..k].iter().fold(0usize, |a, &x| (a << 8) | x as usize);
        (len, &rest[k..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The subject of an X.509 certificate, `KEY=value` joined by commas in the certificate's
/// order (CN, O, OU, C, ST, L, emailAddress by name, other attributes by their OID).
pub fn subject(cert: &[u8]) -> Option<String> {
    let (_, cert, _) = der(cert)?;
    let (_, mut tbs, _) = der(cert)?;
    if tbs.first() == Some(&0xA0) {
        tbs = der(tbs)?.2; // version
    }
    // serial number, signature algorithm, issuer, validity, then the subject.
    for _ in 0..4 {
        tbs = der(tbs)?.2;
    }
    let (_, mut name, _) = der(tbs)?;
    let mut parts = Vec::new();
    while !name.is_empty() {
        let (_, mut set, rest) = der(name)?;
        name = rest;
        while !set.is_empty() {
            let (_, atv, rest) = der(set)?;
            set = rest;
            let (_, oid, rest) = der(atv)?;
            let (_, value, _) = der(rest)?;
            let key = match oid {
                [0x55, 0x04, 0x03] => "CN".to_string(),
                [0x55, 0x04, 0x06] => "C".to_string(),
                [0x55, 0x04, 0x07] => "L".to_string(),
                [0x55, 0x04, 0x08] => "ST".to_string(),
                [0x55, 0x04, 0x0a] => "O".to_string(),
                [0x55, 0x04, 0x0b] => "OU".to_string(),
                [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01] => {
                    "emailAddress".to_string()
                }
                _ => dotted(oid),
            };
            parts.push(format!("{key}={}", String::from_utf8_lossy(value)));
        }
    }
    Some(parts.join(","))
}

fn dotted(oid: &[u8]) -> String {
    let mut out = Vec::new();
    let mut v: u64 = 0;
    for &b in oid {
        v = (v << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            if out.is_empty() {
                let first = (v / 40).min(2);
                out.push(first);
                out.push(v - first * 40);
            } else {
                out.push(v);
            }
            v = 0;
        }
    }
    out.iter().map(u64::to_string).collect::<Vec<_>>().join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_lengths_and_oids() {
        assert_eq!(
            der(&[0x04, 0x02, b'a', b'b', 9]),
            Some((4, &b"ab"[..], &[9][..]))
        );
        assert_eq!(
            der(&[0x04, 0x81, 0x01, b'a']),
            Some((4, &b"a"[..], &[][..]))
        );
        assert_eq!(der(&[0x04, 0x03, b'a']), None);
        assert_eq!(
            dotted(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d]),
            "1.2.840.113549"
        );
        assert_eq!(subject(&[0x30, 0x00]), None);
    }

    /// A certificate made by Debian's openssl: its subject as [`TlsInfo`] gives it.
    #[test]
    fn subject_of_a_real_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "k.pem",
            ])
            .args([
                "-out",
                "c.pem",
                "-days",
                "1",
                "-subj",
                "/CN=alice/O=Kura test/OU=ops",
            ])
            .current_dir(dir.path())
            .output()
            .expect("openssl")
            .status
            .success();
        assert!(ok);
        let cert = read_certs(&dir.path().join("c.pem")).unwrap();
        assert_eq!(
            subject(&cert[0]).as_deref(),
            Some("CN=alice,O=Kura test,OU=ops")
        );
        // The same files load as a server's certificate and key.
        let files = TlsFiles {
            cert: dir.path().join("c.pem"),
            key: dir.path().join("k.pem"),
            ca: Some(dir.path().join("c.pem")),
        };
        let tls = Tls::load(files).unwrap();
        assert!(tls.session().is_ok());
        assert!(Link::Plain.info().is_none());
    }

    #[test]
    fn bad_files_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not pem at all\n").unwrap();
        let e = Tls::load(TlsFiles {
            cert: missing.clone(),
            key: junk.clone(),
            ca: None,
        })
        .unwrap_err();
        assert!(
            e.starts_with("--tls-cert ") && e.contains("missing.pem"),
            "{e}"
        );
        let e = Tls::load(TlsFiles {
            cert: junk.clone(),
            key: junk.clone(),
            ca: None,
        })
        .unwrap_err();
        assert!(
            e.contains("junk.pem") && e.contains("no certificate"),
            "{e}"
        );
    }
}
