//! The server's log: one line per event, with a level (`--log-level`), in text or JSON
//! (`--log-format`), to stderr, a file (`--log FILE`, reopened on SIGHUP) or the local syslog
//! socket (`--log syslog`, which journald reads).
//!
//! Text: `2026-11-28T14:05:06.123Z INFO kura[PID]: message key=value …`; JSON: one object a
//! line, `{"ts":…,"level":…,"pid":…,"msg":…,"fields":{…}}`.

use kura_server::context::Level;
use std::fmt::Write as _;
use std::io::Write as _;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

/// The local syslog socket.
pub const SYSLOG_SOCKET: &str = "/dev/log";
/// For tests only: the socket a daemon started without `--log` takes for the local syslog
/// socket (a test binds a datagram socket of its own there), in place of [`SYSLOG_SOCKET`].
pub const TEST_SYSLOG_ENV: &str = "KURA_TEST_SYSLOG_SOCKET";
/// syslog's daemon facility.
const FACILITY_DAEMON: u8 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

impl Format {
    pub fn parse(s: &str) -> Result<Format, String> {
        match s {
            "text" => Ok(Format::Text),
            "json" => Ok(Format::Json),
            _ => Err(format!("{s}: expected text or json")),
        }
    }
}

/// Where the lines go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dest {
    Stderr,
    File(PathBuf),
    /// A syslog socket: `--log syslog` (/dev/log), or `--log syslog:PATH`.
    Syslog(PathBuf),
}

impl Dest {
    /// `--log`'s value: `syslog`, `syslog:SOCKET`, or a file.
    pub fn parse(s: &str) -> Dest {
        match s.strip_prefix("syslog") {
            Some("") => Dest::Syslog(PathBuf::from(SYSLOG_SOCKET)),
            Some(p) if p.starts_with(':') && p.len() > 1 => Dest::Syslog(PathBuf::from(&p[1..])),
            _ => Dest::File(PathBuf::from(s)),
        }
    }
}

enum Sink {
    Stderr,
    File(Mutex<std::fs::File>),
    Syslog(Mutex<UnixDatagram>),
}

pub struct Log {
    dest: Dest,
    format: Format,
    level: AtomicU8,
    sink: Sink,
}

fn level_num(l: Level) -> u8 {
    match l {
        Level::Error => 0,
        Level::Warn => 1,
        Level::Info => 2,
        Level::Debug => 3,
    }
}

fn num_level(n: u8) -> Level {
    match n {
        0 => Level::Error,
        1 => Level::Warn,
        2 => Level::Info,
        _ => Level::Debug,
    }
}

/// The local syslog socket a daemon without `--log` logs to, when one answers there (else
/// `None`: it logs to a file).
pub fn local_syslog() -> Option<PathBuf> {
    let p = std::env::var_os(TEST_SYSLOG_ENV)
        .map_or_else(|| PathBuf::from(SYSLOG_SOCKET), PathBuf::from);
    open_syslog(&p).is_ok().then_some(p)
}

fn open_file(p: &PathBuf) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)
}

fn open_syslog(p: &PathBuf) -> std::io::Result<UnixDatagram> {
    let s = UnixDatagram::unbound()?;
    s.connect(p)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
    Ok(s)
}

impl Log {
    pub fn open(dest: Dest, format: Format, level: Level) -> std::io::Result<Log> {
        let sink = match &dest {
            Dest::Stderr => Sink::Stderr,
            Dest::File(p) => Sink::File(Mutex::new(open_file(p)?)),
            Dest::Syslog(p) => Sink::Syslog(Mutex::new(open_syslog(p)?)),
        };
        Ok(Log {
            dest,
            format,
            level: AtomicU8::new(level_num(level)),
            sink,
        })
    }

    /// The level in force (`--log-level`).
    pub fn level(&self) -> Level {
        num_level(self.level.load(Ordering::Relaxed))
    }

    /// Write the lines of `level` and above from now on (SIGHUP's reload of the level).
    pub fn set_level(&self, level: Level) {
        self.level.store(level_num(level), Ordering::Relaxed);
    }

    pub fn enabled(&self, level: Level) -> bool {
        level_num(level) <= self.level.load(Ordering::Relaxed)
    }

    /// Open the file (or socket) again: logrotate moved it away.
    pub fn reopen(&self) {
        match (&self.sink, &self.dest) {
            (Sink::File(f), Dest::File(p)) => {
                if let Ok(n) = open_file(p) {
                    *f.lock().unwrap_or_else(|e| e.into_inner()) = n;
                }
            }
            (Sink::Syslog(s), Dest::Syslog(p)) => {
                if let Ok(n) = open_syslog(p) {
                    *s.lock().unwrap_or_else(|e| e.into_inner()) = n;
                }
            }
            _ => {}
        }
    }

    /// An info line.
    pub fn line(&self, msg: &str) {
        self.write(Level::Info, msg, &[]);
    }

    pub fn warn(&self, msg: &str) {
        self.write(Level::Warn, msg, &[]);
    }

    pub fn error(&self, msg: &str) {
        self.write(Level::Error, msg, &[]);
    }

    /// One line of `level`: `msg`, then `fields` as key=value (JSON: an object).
    pub fn write(&self, level: Level, msg: &str, fields: &[(&str, String)]) {
        if !self.enabled(level) {
            return;
        }
        let pid = std::process::id();
        match &self.sink {
            Sink::Syslog(s) => {
                let pri = FACILITY_DAEMON * 8 + severity(level);
                let mut text = format!("<{pri}>{} kura[{pid}]: ", syslog_time(now_ms()));
                push_text(&mut text, msg, fields);
                let s = s.lock().unwrap_or_else(|e| e.into_inner());
                if s.send(text.as_bytes()).is_err() {
                    // The syslog daemon restarted: connect again, once.
                    if let Dest::Syslog(p) = &self.dest {
                        if let Ok(n) = open_syslog(p) {
                            let _ = n.send(text.as_bytes());
                        }
                    }
                }
            }
            sink => {
                let text = format_line(self.format, now_ms(), level, pid, msg, fields);
                match sink {
                    Sink::File(f) => {
                        let _ = f
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .write_all(text.as_bytes());
                    }
                    _ => {
                        let _ = std::io::stderr().lock().write_all(text.as_bytes());
                    }
                }
            }
        }
    }
}

/// syslog's severity of a level.
fn severity(l: Level) -> u8 {
    match l {
        Level::Error => 3,
        Level::Warn => 4,
        Level::Info => 6,
        Level::Debug => 7,
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `2026-11-28T14:05:06.123Z` (RFC 3339, UTC, milliseconds).
pub fn rfc3339_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let (y, mo, d) = kura_proto::http::civil_from_days((secs / 86400) as i64);
    let t = secs % 86400;
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        t / 3600,
        t / 60 % 60,
        t % 60,
        ms % 1000
    )
}

/// syslog's (RFC 3164) time stamp, `Nov 28 14:05:06`, in UTC.
fn syslog_time(ms: u64) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = ms / 1000;
    let (_, mo, d) = kura_proto::http::civil_from_days((secs / 86400) as i64);
    let t = secs % 86400;
    format!(
        "{} {d:>2} {:02}:{:02}:{:02}",
        MONTHS[(mo as usize + 11) % 12],
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

/// `msg key=value …`: a value with a space, `"`, `=` or a control character is quoted, with
/// `\` escapes.
fn push_text(out: &mut String, msg: &str, fields: &[(&str, String)]) {
    out.push_str(msg);
    for (k, v) in fields {
        let _ = write!(out, " {k}=");
        if !v.is_empty()
            && !v
                .chars()
                .any(|c| c == ' ' || c == '"' || c == '=' || c == '\\' || c.is_control())
        {
            out.push_str(v);
        } else {
            out.push('"');
            for c in v.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    c if c.is_control() => {
                        let _ = write!(out, "\\u{{{:x}}}", c as u32);
                    }
                    c => out.push(c),
                }
            }
            out.push('"');
        }
    }
}

/// A JSON string.
fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// One whole line (with its newline) of a file or stderr.
pub fn format_line(
    format: Format,
    ms: u64,
    level: Level,
    pid: u32,
    msg: &str,
    fields: &[(&str, String)],
) -> String {
    let ts = rfc3339_ms(ms);
    let mut out = String::with_capacity(64 + msg.len());
    match format {
        Format::Text => {
            let _ = write!(out, "{ts} {} kura[{pid}]: ", level.name());
            push_text(&mut out, msg, fields);
        }
        Format::Json => {
            let _ = write!(
                out,
                "{{\"ts\":\"{ts}\",\"level\":\"{}\",\"pid\":{pid},\"msg\":",
                level.name().to_ascii_lowercase()
            );
            json_str(&mut out, msg);
            out.push_str(",\"fields\":{");
            for (i, (k, v)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_str(&mut out, k);
                out.push(':');
                json_str(&mut out, v);
            }
            out.push_str("}}");
        }
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_lines_carry_an_rfc3339_time_the_level_and_fields() {
        // 2026-11-28T14:05:06.123Z
        let ms = 1_795_874_706_123;
        let f = [("path", "a b.kh".to_string()), ("records", "3".to_string())];
        let l = format_line(Format::Text, ms, Level::Warn, 42, "opened", &f);
        assert_eq!(
            l,
            "2026-11-28T14:05:06.123Z WARN kura[42]: opened path=\"a b.kh\" records=3\n"
        );
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(syslog_time(ms), "Nov 28 14:05:06");
    }

    #[test]
    fn json_lines_escape_what_json_needs() {
        let f = [("k", "v\"1".to_string())];
        let l = format_line(Format::Json, 0, Level::Info, 7, "a\tb\u{1}", &f);
        assert_eq!(
            l,
            "{\"ts\":\"1970-01-01T00:00:00.000Z\",\"level\":\"info\",\"pid\":7,\
             \"msg\":\"a\\tb\\u0001\",\"fields\":{\"k\":\"v\\\"1\"}}\n"
        );
    }

    #[test]
    fn destinations_parse() {
        assert_eq!(Dest::parse("syslog"), Dest::Syslog(SYSLOG_SOCKET.into()));
        assert_eq!(Dest::parse("syslog:/tmp/s"), Dest::Syslog("/tmp/s".into()));
        assert_eq!(Dest::parse("k.log"), Dest::File("k.log".into()));
        assert_eq!(Dest::parse("syslogs"), Dest::File("syslogs".into()));
    }

    #[test]
    fn syslog_gets_the_daemon_facility_and_the_severity() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.sock");
        let rx = UnixDatagram::bind(&p).unwrap();
        let log = Log::open(Dest::Syslog(p), Format::Text, Level::Info).unwrap();
        log.warn("careful");
        log.write(Level::Debug, "not sent", &[]);
        log.write(Level::Error, "bad", &[("k", "v".into())]);
        log.set_level(Level::Debug);
        assert_eq!(log.level(), Level::Debug);
        log.write(Level::Debug, "sent", &[]);
        let mut buf = [0u8; 512];
        let n = rx.recv(&mut buf).unwrap();
        let a = String::from_utf8_lossy(&buf[..n]).to_string();
        let n = rx.recv(&mut buf).unwrap();
        let b = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(a.starts_with("<28>"), "{a}");
        assert!(a.ends_with(&format!(" kura[{}]: careful", std::process::id())));
        assert!(b.starts_with("<27>") && b.ends_with(": bad k=v"), "{b}");
        let n = rx.recv(&mut buf).unwrap();
        let c = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(c.starts_with("<31>") && c.ends_with(": sent"), "{c}");
    }
}
