//! Users, their rights and how a connection proves who it is (`kura serve --users FILE`).
//!
//! The users file has one user a line: `NAME RIGHTS SECRET...`, `#` starting a comment line.
//! `RIGHTS` is a comma-separated list of `read`, `write` and `admin` (or `all`); each grants
//! its own operations only (a `write`-only user cannot read). A `SECRET` is a password hash,
//! `pbkdf2-sha256$ITERATIONS$SALT$HASH` (salt and hash in unpadded base64), or a bearer token's
//! hash, `token-sha256$HEX`; `kura users add` / `kura users token` write them. A user may have
//! one password and any number of tokens.
//!
//! Rights map onto the operation mask ([`crate::mask`]): a user's rights become the mask of
//! the operations they do not grant ([`Rights::denied`]), and while a request of that user
//! runs, [`Shared::mask`](crate::context::Shared::mask) refuses them as well as `--mask` —
//! one check, on every protocol, in the protocol's own refusal form.
//!
//! Passwords are checked with PBKDF2-HMAC-SHA256 in constant time, and a name that is not a
//! user is checked against a stand-in hash, so a refusal takes as long and says the same
//! whether the user exists or not. A successful check is remembered (keyed by an HMAC of the
//! name and password under a key made at start) so that HTTP Basic, which sends the password
//! with every request, costs one PBKDF2 per user and password, not one per request.

use crate::mask::{Class, Mask, OPS};
use base64::engine::general_purpose::STANDARD_NO_PAD as B64;
use base64::Engine as _;
use ring::{digest, hmac, pbkdf2, rand};
use std::cell::Cell;
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, RwLock};

/// PBKDF2 iterations of a new password hash (OWASP's recommendation for PBKDF2-HMAC-SHA256).
pub const ITERATIONS: u32 = 600_000;
const SALT_LEN: usize = 16;
const HASH_LEN: usize = 32;
/// Remembered successful logins at most (the memory is cleared when full).
const REMEMBERED: usize = 4096;

/// What a user may do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rights {
    pub read: bool,
    pub write: bool,
    pub admin: bool,
}

impl Rights {
    pub const ALL: Rights = Rights {
        read: true,
        write: true,
        admin: true,
    };

    /// `read,write,admin` (any order; `all` for the three).
    pub fn parse(s: &str) -> Result<Rights, String> {
        let mut r = Rights::default();
        for name in s.split(',').filter(|n| !n.is_empty()) {
            match name.to_ascii_lowercase().as_str() {
                "read" => r.read = true,
                "write" => r.write = true,
                "admin" => r.admin = true,
                "all" => r = Rights::ALL,
                _ => {
                    return Err(format!(
                        "unknown right `{name}` (rights: read, write, admin, all)"
                    ))
                }
            }
        }
        Ok(r)
    }

    /// The right an operation takes: `admin` for flushing the database (`vanish`), scripts
    /// (`ext`), `optimize`, `copy`, `restore`, `setmst` and replication streams; `write` for
    /// the other changes and `sync`; `read` for the rest.
    fn grants(self, name: &str, class: Class) -> bool {
        match name {
            "vanish" | "ext" | "optimize" | "copy" | "restore" | "setmst" | "repl" => self.admin,
            "sync" => self.write,
            _ => match class {
                Class::Read => self.read,
                Class::Write => self.write,
                Class::Manage => self.admin,
            },
        }
    }

    /// The operations these rights do not grant, as a mask.
    pub fn denied(self) -> Mask {
        let names: Vec<&str> = OPS
            .iter()
            .filter(|o| !self.grants(o.1, o.2))
            .map(|o| o.1)
            .collect();
        Mask::NONE.mask(&names.join(",")).unwrap_or(Mask::NONE)
    }

    pub fn names(self) -> String {
        let mut v = Vec::new();
        for (on, n) in [
            (self.read, "read"),
            (self.write, "write"),
            (self.admin, "admin"),
        ] {
            if on {
                v.push(n);
            }
        }
        v.join(",")
    }
}

/// One user of the users file.
#[derive(Clone, Debug)]
pub struct User {
    pub name: String,
    pub rights: Rights,
    /// What the rights refuse ([`Rights::denied`]).
    pub denied: Mask,
    password: Option<PasswordHash>,
    tokens: Vec<[u8; 32]>,
}

#[derive(Clone, Debug)]
struct PasswordHash {
    iterations: NonZeroU32,
    salt: Vec<u8>,
    hash: Vec<u8>,
}

impl PasswordHash {
    fn parse(s: &str) -> Option<PasswordHash> {
        let mut p = s.strip_prefix("pbkdf2-sha256$")?.split('$');
        let iterations = NonZeroU32::new(p.next()?.parse().ok()?)?;
        let salt = B64.decode(p.next()?).ok()?;
        let hash = B64.decode(p.next()?).ok()?;
        (p.next().is_none() && !hash.is_empty()).then_some(PasswordHash {
            iterations,
            salt,
            hash,
        })
    }

    fn verify(&self, password: &[u8]) -> bool {
        pbkdf2::verify(
            pbkdf2::PBKDF2_HMAC_SHA256,
            self.iterations,
            &self.salt,
            password,
            &self.hash,
        )
        .is_ok()
    }
}

/// The hash of `password` to keep in a users file: `pbkdf2-sha256$ITERATIONS$SALT$HASH`, with
/// a fresh random salt.
pub fn hash_password(password: &[u8]) -> Result<String, String> {
    let salt: [u8; SALT_LEN] = rand::generate(&rand::SystemRandom::new())
        .map_err(|_| "no random numbers from the system".to_string())?
        .expose();
    let mut hash = [0u8; HASH_LEN];
    let n = NonZeroU32::new(ITERATIONS).expect("non-zero");
    pbkdf2::derive(pbkdf2::PBKDF2_HMAC_SHA256, n, &salt, password, &mut hash);
    Ok(format!(
        "pbkdf2-sha256${ITERATIONS}${}${}",
        B64.encode(salt),
        B64.encode(hash)
    ))
}

/// A new bearer token (printable, 256 random bits) and the hash to keep in a users file.
pub fn new_token() -> Result<(String, String), String> {
    let raw: [u8; 32] = rand::generate(&rand::SystemRandom::new())
        .map_err(|_| "no random numbers from the system".to_string())?
        .expose();
    let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw);
    let hash = format!("token-sha256${}", hex(&sha256(token.as_bytes())));
    Ok((token, hash))
}

fn sha256(b: &[u8]) -> [u8; 32] {
    let d = digest::digest(&digest::SHA256, b);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Equal without an early exit (the time does not depend on where they differ).
fn ct_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let mut d = 0u8;
    for i in 0..32 {
        d |= a[i] ^ b[i];
    }
    std::hint::black_box(d) == 0
}

/// The users of a server.
#[derive(Debug)]
pub struct Users {
    users: Vec<User>,
    /// Checked against when the name is not a user's (same cost as a real check).
    stand_in: PasswordHash,
    /// Successful logins remembered: HMAC(name NUL password) → the user's place.
    remembered: Mutex<HashMap<[u8; 32], usize>>,
    memo_key: hmac::Key,
}

impl Users {
    /// Parse a users file's text; errors name the line.
    pub fn parse(text: &str) -> Result<Users, String> {
        let mut users: Vec<User> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = |m: String| format!("line {}: {m}", i + 1);
            let mut f = line.split_whitespace();
            let name = f.next().unwrap_or_default().to_string();
            let rights = Rights::parse(
                f.next()
                    .ok_or_else(|| at("a user line is `NAME RIGHTS SECRET...`".into()))?,
            )
            .map_err(at)?;
            if users.iter().any(|u| u.name == name) {
                return Err(at(format!("user `{name}` given twice")));
            }
            let mut user = User {
                name,
                rights,
                denied: rights.denied(),
                password: None,
                tokens: Vec::new(),
            };
            for secret in f {
                if let Some(h) = secret.strip_prefix("token-sha256$") {
                    let h = unhex32(h).ok_or_else(|| at("a token hash is 64 hex digits".into()))?;
                    user.tokens.push(h);
                } else if secret.starts_with("pbkdf2-sha256$") {
                    if user.password.is_some() {
                        return Err(at("more than one password".into()));
                    }
                    user.password = Some(PasswordHash::parse(secret).ok_or_else(|| {
                        at("a password hash is pbkdf2-sha256$ITERATIONS$SALT$HASH".into())
                    })?);
                } else {
                    return Err(at(
                        "a secret is pbkdf2-sha256$… or token-sha256$… (write them with \
                         `kura users add` / `kura users token`)"
                            .into(),
                    ));
                }
            }
            users.push(user);
        }
        let rng = rand::SystemRandom::new();
        let memo_key =
            hmac::Key::generate(hmac::HMAC_SHA256, &rng).map_err(|_| "no random numbers")?;
        Ok(Users {
            users,
            stand_in: PasswordHash {
                iterations: NonZeroU32::new(ITERATIONS).expect("non-zero"),
                salt: vec![0; SALT_LEN],
                hash: vec![0; HASH_LEN],
            },
            remembered: Mutex::new(HashMap::new()),
            memo_key,
        })
    }

    pub fn load(path: &std::path::Path) -> Result<Users, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("users file {}: {e}", path.display()))?;
        Users::parse(&text).map_err(|e| format!("users file {}: {e}", path.display()))
    }

    pub fn len(&self) -> usize {
        self.users.len()
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    pub fn get(&self, name: &str) -> Option<&User> {
        self.users.iter().find(|u| u.name == name)
    }

    /// The user whose name and password these are; `None` alike for an unknown name and a
    /// wrong password.
    pub fn login(&self, name: &[u8], password: &[u8]) -> Option<&User> {
        let mut m = hmac::Context::with_key(&self.memo_key);
        m.update(name);
        m.update(&[0]);
        m.update(password);
        let mut memo = [0u8; 32];
        memo.copy_from_slice(m.sign().as_ref());
        let lock = || self.remembered.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&i) = lock().get(&memo) {
            return self.users.get(i);
        }
        let found = self
            .users
            .iter()
            .position(|u| u.name.as_bytes() == name && u.password.is_some());
        let hash = found
            .and_then(|i| self.users[i].password.as_ref())
            .unwrap_or(&self.stand_in);
        let ok = hash.verify(password) && found.is_some();
        let i = found.filter(|_| ok)?;
        let mut r = lock();
        if r.len() >= REMEMBERED {
            r.clear();
        }
        r.insert(memo, i);
        Some(&self.users[i])
    }

    /// The user a bearer token belongs to.
    pub fn token(&self, token: &[u8]) -> Option<&User> {
        let h = sha256(token);
        let mut found = None;
        // Every hash is compared (no early exit).
        for u in &self.users {
            for t in &u.tokens {
                if ct_eq(t, &h) && found.is_none() {
                    found = Some(u);
                }
            }
        }
        found
    }
}

/// Who may connect and how (`--users`, `--allow-unauthenticated-binary`).
#[derive(Debug, Default)]
pub struct Access {
    /// `None`: no users file, every client has every right (`--mask` still applies). The
    /// users can be replaced while serving ([`Access::replace_users`]), not switched on or off.
    users: Option<RwLock<Arc<Users>>>,
    /// Serve the Tyrant and Kyoto Tycoon binary protocols to any peer.
    pub allow_unauthenticated_binary: bool,
    /// Count loopback peers as remote (a switch for tests of the remote rule only).
    pub loopback_is_remote: bool,
}

/// What a connection has proven.
#[derive(Clone, Debug, Default)]
pub struct Session {
    /// The peer, for the log.
    pub peer: String,
    /// The peer is not on a loopback address.
    pub remote: bool,
    /// The subject of the client certificate TLS verified (`None` on a plain connection).
    pub tls_client: Option<String>,
    /// The user logged in (memcached), with what their rights refuse.
    pub user: Option<(String, Mask)>,
}

/// The user a verified client certificate names: its subject's common name (`CN=alice,O=…`
/// → `alice`), or the whole subject when it has none.
pub fn cert_user(subject: &str) -> String {
    subject
        .split(',')
        .find_map(|part| part.trim().strip_prefix("CN="))
        .unwrap_or(subject)
        .to_string()
}

impl Session {
    pub fn new(peer: Option<std::net::SocketAddr>, access: &Access) -> Session {
        Session {
            peer: peer.map_or_else(|| "?".into(), |p| p.to_string()),
            remote: access.loopback_is_remote || !peer.is_some_and(|p| p.ip().is_loopback()),
            tls_client: None,
            user: None,
        }
    }
}

impl Access {
    pub fn new(
        users: Option<Users>,
        allow_unauthenticated_binary: bool,
        loopback_is_remote: bool,
    ) -> Access {
        Access {
            users: users.map(|u| RwLock::new(Arc::new(u))),
            allow_unauthenticated_binary,
            loopback_is_remote,
        }
    }

    /// Whether the server has a users file (clients must log in).
    #[inline]
    pub fn has_users(&self) -> bool {
        self.users.is_some()
    }

    /// The users now.
    pub fn users(&self) -> Option<Arc<Users>> {
        self.users
            .as_ref()
            .map(|u| u.read().unwrap_or_else(|p| p.into_inner()).clone())
    }

    /// Replace the users (the users file read again, on SIGHUP). Connections logged in
    /// keep the rights they logged in with; HTTP requests are checked against the new users.
    pub fn replace_users(&self, new: Users) -> Result<(), &'static str> {
        let u = self
            .users
            .as_ref()
            .ok_or("the server was started without --users")?;
        *u.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(new);
        Ok(())
    }

    /// Whether a connection may speak the Tyrant or Kyoto Tycoon binary protocol, which have
    /// no authentication of their own: over TLS with a verified client certificate (whose
    /// subject's common name must be a user's name when there is a users file), with
    /// `--allow-unauthenticated-binary`, or from a loopback peer when there is no users file.
    /// `Ok` carries the user it runs as (`None`: every right); `Err` why it is refused.
    pub fn binary(&self, s: &Session) -> Result<Option<(String, Mask)>, &'static str> {
        if let Some(subject) = &s.tls_client {
            return match self.users() {
                None => Ok(None),
                Some(us) => us
                    .get(subject)
                    .map(|u| Some((u.name.clone(), u.denied)))
                    .ok_or("the client certificate's subject is not a user"),
            };
        }
        if self.allow_unauthenticated_binary {
            return Ok(None);
        }
        match (self.has_users(), s.remote) {
            (false, false) => Ok(None),
            (false, true) => Err(
                "binary protocol from a non-loopback peer without a TLS client \
                                 certificate (see --allow-unauthenticated-binary)",
            ),
            (true, _) => Err("binary protocol without a TLS client certificate while \
                                 --users is set (see --allow-unauthenticated-binary)"),
        }
    }
}

/// Why an HTTP request did not authenticate.
#[derive(Debug, PartialEq, Eq)]
pub enum HttpRefusal {
    /// No `Authorization` header.
    Missing,
    /// Credentials that are not a user's: the name given (Basic), or `None` for a token or an
    /// unreadable header.
    Wrong(Option<String>),
}

/// The user of an HTTP request, from its `Authorization` header: `Basic` (name and password)
/// or `Bearer` (a token).
pub fn http_login<'u>(users: &'u Users, auth: Option<&[u8]>) -> Result<&'u User, HttpRefusal> {
    let auth = auth.ok_or(HttpRefusal::Missing)?;
    let text = std::str::from_utf8(auth)
        .map_err(|_| HttpRefusal::Wrong(None))?
        .trim();
    let (scheme, rest) = text.split_once(' ').ok_or(HttpRefusal::Wrong(None))?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("basic") {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .map_err(|_| HttpRefusal::Wrong(None))?;
        let colon = raw
            .iter()
            .position(|&b| b == b':')
            .ok_or(HttpRefusal::Wrong(None))?;
        let (name, pass) = (&raw[..colon], &raw[colon + 1..]);
        users
            .login(name, pass)
            .ok_or_else(|| HttpRefusal::Wrong(Some(shown(name))))
    } else if scheme.eq_ignore_ascii_case("bearer") {
        users.token(rest.as_bytes()).ok_or(HttpRefusal::Wrong(None))
    } else {
        Err(HttpRefusal::Wrong(None))
    }
}

thread_local! {
    /// What the rights of the user whose request runs on this thread refuse.
    static DENIED: Cell<Mask> = const { Cell::new(Mask::NONE) };
}

/// The operations the current request's user may not run (see [`run_as`]).
#[inline]
pub fn denied() -> Mask {
    DENIED.with(Cell::get)
}

/// Run the requests that follow on this thread as a user whose rights refuse `denied`
/// (`Mask::NONE`: every right). The connection loop sets it before each connection's requests.
pub fn run_as(denied: Mask) {
    DENIED.with(|d| d.set(denied));
}

/// A client-given name as the log shows it: printable, at most 64 characters.
pub fn shown(name: &[u8]) -> String {
    let s: String = String::from_utf8_lossy(name).chars().take(64).collect();
    format!("{s:?}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mask::{Op, Proto};

    #[test]
    fn rights_map_onto_the_mask() {
        let r = Rights::parse("read").unwrap().denied();
        assert!(!r.denies(Op::Get, Proto::Http));
        assert!(r.denies(Op::Put, Proto::Memcached));
        assert!(r.denies(Op::Vanish, Proto::Tyrant));
        let w = Rights::parse("read,write").unwrap().denied();
        assert!(!w.denies(Op::Put, Proto::Tyrant));
        assert!(!w.denies(Op::Sync, Proto::Tyrant));
        for op in [
            Op::Vanish,
            Op::Ext,
            Op::Copy,
            Op::Restore,
            Op::SetMst,
            Op::Optimize,
        ] {
            assert!(w.denies(op, Proto::Http), "{op:?}");
        }
        let a = Rights::parse("admin").unwrap().denied();
        assert!(!a.denies(Op::Vanish, Proto::Http));
        assert!(a.denies(Op::Get, Proto::Http));
        assert!(Rights::parse("all").unwrap().denied().is_empty());
        assert!(Rights::parse("root").is_err());
    }

    #[test]
    fn passwords_and_tokens() {
        let h = hash_password(b"s3cret").unwrap();
        let (tok, th) = new_token().unwrap();
        let text = format!("# users\nalice read,write {h} {th}\nbob read\n");
        let us = Users::parse(&text).unwrap();
        assert_eq!(us.login(b"alice", b"s3cret").unwrap().name, "alice");
        // Remembered: the second check does not derive again, and says the same.
        assert_eq!(us.login(b"alice", b"s3cret").unwrap().name, "alice");
        assert!(us.login(b"alice", b"wrong").is_none());
        assert!(us.login(b"nobody", b"s3cret").is_none());
        assert!(us.login(b"bob", b"").is_none(), "no password: no login");
        assert_eq!(us.token(tok.as_bytes()).unwrap().name, "alice");
        assert!(us.token(b"not-a-token").is_none());
        assert!(Users::parse("alice read plain").is_err());
        assert!(Users::parse("alice").is_err());
        assert!(Users::parse("a read\na write").is_err());
    }

    #[test]
    fn a_certificate_names_its_user_by_its_common_name() {
        assert_eq!(cert_user("CN=alice,O=Kura test"), "alice");
        assert_eq!(cert_user("O=Kura test, CN=bob"), "bob");
        assert_eq!(cert_user("O=no name"), "O=no name");
    }

    #[test]
    fn the_binary_rule() {
        let s = |remote, tls: Option<&str>| Session {
            remote,
            tls_client: tls.map(String::from),
            ..Session::default()
        };
        let mut a = Access::default();
        assert!(a.binary(&s(false, None)).is_ok());
        assert!(a.binary(&s(true, None)).is_err());
        assert!(a.binary(&s(true, Some("CN=x"))).is_ok());
        a = Access::new(Some(Users::parse("alice read").unwrap()), false, false);
        assert!(a.binary(&s(false, None)).is_err());
        assert!(a.binary(&s(true, Some("bob"))).is_err());
        assert_eq!(
            a.binary(&s(true, Some("alice"))).unwrap().unwrap().0,
            "alice"
        );
        a.allow_unauthenticated_binary = true;
        assert!(a.binary(&s(true, None)).is_ok());
        a.replace_users(Users::parse("bob read").unwrap()).unwrap();
        assert!(a.binary(&s(true, Some("bob"))).unwrap().is_some());
        assert!(Access::default()
            .replace_users(Users::parse("").unwrap())
            .is_err());
    }
}
