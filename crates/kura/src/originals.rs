//! The originals' command lines: `kura ttserver ARGS…`, `kura ktserver ARGS…` and `kura
//! memcached ARGS…` take Tokyo Tyrant's, Kyoto Tycoon's and memcached's flags as they are, map
//! each onto `kura serve`'s, and refuse (exit 2, the flag named, why) what has no meaning here.
//! `kura serve` given one of their flags says which of its own means the same ([`serve_hint`]).

use std::path::Path;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct OriginalArgs {
    /// The original's flags and database name; `--dry-run` prints the `kura serve` command
    /// they amount to, `--print-config` its effective configuration.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Program {
    Ttserver,
    Ktserver,
    Memcached,
}

impl Program {
    fn name(self) -> &'static str {
        match self {
            Program::Ttserver => "ttserver",
            Program::Ktserver => "ktserver",
            Program::Memcached => "memcached",
        }
    }
}

/// What an original's command line amounts to: `kura serve`'s words, and notes for the user
/// (flags accepted without effect, defaults that differ).
#[derive(Default, Debug)]
pub struct Plan {
    pub name: Option<String>,
    pub words: Vec<String>,
    pub notes: Vec<String>,
}

impl Plan {
    fn flag(&mut self, flag: &str, value: impl Into<String>) {
        self.words.push(flag.to_string());
        self.words.push(value.into());
    }

    /// The whole `kura serve` command line (without `kura serve`).
    pub fn argv(&self) -> Vec<String> {
        self.name
            .iter()
            .cloned()
            .chain(self.words.iter().cloned())
            .collect()
    }
}

/// Whether `kura serve` has the long flag `--long` (flags other work adds are used as soon
/// as they exist).
fn serve_has(long: &str) -> bool {
    crate::conf::serve_command()
        .get_arguments()
        .any(|a| a.get_long() == Some(long))
}

/// A log level flag of the originals: `--log-level LEVEL` where `kura serve` has it; without
/// it the flag is accepted and said to have no effect (the log is never silenced by it).
fn log_level(p: &mut Plan, flag: &str, level: &str) {
    let cmd = crate::conf::serve_command();
    let arg = cmd
        .get_arguments()
        .find(|a| a.get_long() == Some("log-level"));
    if let Some(arg) = arg {
        // Where the flag lists its levels, one of them (the originals' names differ).
        let known: Vec<String> = arg
            .get_possible_values()
            .iter()
            .map(|v| v.get_name().to_string())
            .collect();
        let alias: &[&str] = match level {
            "warn" => &["warn", "warning"],
            "off" => &["off", "none", "quiet"],
            other => &[other][..],
        };
        match alias
            .iter()
            .find(|a| known.is_empty() || known.iter().any(|k| k == *a))
        {
            Some(l) => p.flag("--log-level", *l),
            None => p.notes.push(format!(
                "{flag}: kura serve's --log-level has no {level} level ({}); ignored",
                known.join(", ")
            )),
        }
    } else {
        p.notes.push(format!(
            "{flag}: kura serve has no log levels yet; it logs as without {flag}"
        ));
    }
}

/// Shell quoting for a printed command.
fn quote(w: &str) -> String {
    let plain = !w.is_empty()
        && w.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_./:=@%+,-".contains(&b));
    if plain {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

/// The words of one command line being read: flags take their value from the next word.
struct Words<'a> {
    args: &'a [String],
    i: usize,
}

impl<'a> Words<'a> {
    fn value(&mut self, flag: &str) -> Result<&'a str, String> {
        let v = self
            .args
            .get(self.i)
            .ok_or_else(|| format!("{flag}: needs a value"))?;
        self.i += 1;
        Ok(v)
    }

    fn number(&mut self, flag: &str) -> Result<u64, String> {
        let v = self.value(flag)?;
        v.parse()
            .map_err(|_| format!("{flag} {v}: expected a whole number"))
    }
}

/// How one original's database name reads as Kura's: its kind's Kura name, the parameters
/// Kura's kind takes kept, the others noted as dropped.
fn database_name(
    prog: Program,
    db: &str,
    exts: &[(&str, &str)],
    renamed: &[(&str, &str)],
    p: &mut Plan,
) -> Result<String, String> {
    let (path, params) = db.split_once('#').map_or((db, ""), |(a, b)| (a, b));
    let lower = path.to_ascii_lowercase();
    let mapped = exts
        .iter()
        .find(|(from, _)| {
            if from.starts_with('.') {
                lower.ends_with(from) && lower.len() > from.len()
            } else {
                path == *from
            }
        })
        .map(|(from, to)| {
            if path == *from {
                to.to_string()
            } else {
                format!("{}{to}", &path[..path.len() - from.len()])
            }
        });
    let new_path = match mapped {
        Some(n) => n,
        None if kura_engine::registry::by_path(path).is_some() => path.to_string(),
        None => {
            return Err(format!(
                "{db}: not a database name {} or Kura serves (Kura's: {})",
                prog.name(),
                kura_engine::registry::usage()
            ))
        }
    };
    let kind = kura_engine::registry::by_path(&new_path)
        .ok_or_else(|| format!("{db}: no Kura kind for {new_path}"))?;
    if new_path != path && !kind.caps.persistent {
        p.notes.push(format!(
            "the database `{path}` is served as Kura's {} `{new_path}`",
            kind.about
        ));
    }
    if kind.caps.persistent && new_path != path {
        let (old, new) = (Path::new(path), Path::new(&new_path));
        if old.exists() && !new.exists() {
            let how = crate::db::migrate_hint(path)
                .map(|h| h.trim_start_matches("; ").to_string())
                .unwrap_or_else(|| {
                    format!(
                        "{path} is a file Kura does not open: move its records into {new_path} \
                         with `kura db import` (docs/MIGRATING.md)"
                    )
                });
            let timed = if prog == Program::Ktserver {
                " (but a file a ktserver wrote holds each value behind a 5-byte expiration \
                 time: list it through the running ktserver, `ktremotemgr list -pv -px`, \
                 docs/MIGRATING.md)"
            } else {
                ""
            };
            return Err(format!(
                "{how}{timed}; then run this again: it serves {new_path} in its place"
            ));
        }
        if new.exists() {
            p.notes
                .push(format!("{path}: serving {new_path} in its place"));
        } else {
            p.notes.push(format!(
                "{path}: serving {new_path} in its place (created when missing)"
            ));
        }
    }
    let mut name = new_path;
    let mut dropped = Vec::new();
    for kv in params.split('#').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let k = renamed
            .iter()
            .find(|(from, _)| *from == k)
            .map_or(k, |(_, to)| *to);
        if kind.params.contains(&k) {
            name.push_str(&format!("#{k}={v}"));
        } else {
            dropped.push(kv.to_string());
        }
    }
    if !dropped.is_empty() {
        p.notes.push(format!(
            "{db}: #{} ignored (Kura's {} takes {})",
            dropped.join("#"),
            kind.about,
            kind.params.join(", ")
        ));
    }
    Ok(name)
}

/// Add `#sync=MODE` to a name (the originals' sync flags), replacing one it has.
fn with_sync(name: &str, mode: &str) -> String {
    let kept: Vec<&str> = name
        .split('#')
        .filter(|kv| !kv.starts_with("sync="))
        .collect();
    format!("{}#sync={mode}", kept.join("#"))
}

/// `-mhost` and `-mport`, read separately, as `--master HOST:PORT`.
fn master(p: &mut Plan, host: Option<&str>, port: Option<u64>) -> Result<(), String> {
    match (host, port) {
        (Some(h), port) => {
            let h = if h.contains(':') {
                format!("[{h}]")
            } else {
                h.to_string()
            };
            p.flag("--master", format!("{h}:{}", port.unwrap_or(1978)));
            Ok(())
        }
        (None, Some(_)) => Err("-mport: given without -mhost, it names no master".into()),
        (None, None) => Ok(()),
    }
}

/// `-rts FILE`: the replication time stamp file of ttserver and ktserver. Its number, when
/// the file holds one, is where a new replica starts (`--master-ts`); Kura keeps its own
/// position beside the database.
fn rts(p: &mut Plan, file: &str) -> Result<(), String> {
    match std::fs::read_to_string(file) {
        Ok(text) => {
            let first = text.split_whitespace().next().unwrap_or("");
            let ts: u64 = first.parse().map_err(|_| {
                format!("-rts {file}: expected a time stamp in it, found {first:?}")
            })?;
            p.flag("--master-ts", ts.to_string());
            p.notes.push(format!(
                "-rts {file}: a new replica starts after {ts}; Kura keeps its position in \
                 NAME.replica beside the database, not in {file}"
            ));
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            p.notes.push(format!(
                "-rts {file}: no such file yet, so the replica starts from the master's \
                 beginning; Kura keeps its position in NAME.replica beside the database"
            ));
            Ok(())
        }
        Err(e) => Err(format!("-rts {file}: {e}")),
    }
}

fn timeout(p: &mut Plan, flag: &str, v: &str) -> Result<(), String> {
    let secs: f64 = v
        .parse()
        .ok()
        .filter(|s: &f64| s.is_finite() && *s >= 0.0)
        .ok_or_else(|| format!("{flag} {v}: expected seconds"))?;
    if secs > 0.0 {
        p.flag("--timeout", (secs.ceil() as u64).to_string());
    }
    Ok(())
}

const NO_LISTEN_DEFAULT: &str = "without -host, Kura listens on 127.0.0.1 only (the original: \
                                 every address); give -host 0.0.0.0 for that";

/// Tokyo Tyrant's ttserver (ttserver.c's argument loop).
pub fn ttserver(args: &[String]) -> Result<Plan, String> {
    let mut p = Plan::default();
    let mut w = Words { args, i: 0 };
    let (mut mhost, mut mport, mut host, mut db) = (None, None, false, None);
    while let Some(t) = args.get(w.i) {
        w.i += 1;
        match t.as_str() {
            "-host" => {
                let h = w.value(t)?;
                if h.starts_with('/') {
                    return Err(format!(
                        "-host {h}: a UNIX domain socket; Kura listens on TCP only (not yet)"
                    ));
                }
                p.flag("--host", h);
                host = true;
            }
            "-port" => p.flag("--port", w.number(t)?.to_string()),
            "-thnum" => p.flag("--threads", w.number(t)?.max(1).to_string()),
            "-tout" => timeout(&mut p, t, w.value(t)?)?,
            "-dmn" => p.words.push("--daemon".into()),
            "-pid" => p.flag("--pid", w.value(t)?),
            "-kl" => {
                return Err(
                    "-kl: Kura does not kill the process a pid file names: stop it \
                            first (`kill $(cat PIDFILE)`); --pid refuses to start while it runs"
                        .into(),
                )
            }
            "-log" => p.flag("--log", w.value(t)?),
            "-ld" => log_level(&mut p, t, "debug"),
            "-le" => log_level(&mut p, t, "error"),
            "-ulog" => p.flag("--ulog", w.value(t)?),
            "-ulim" => {
                let v = w.value(t)?;
                p.notes.push(format!(
                    "-ulim {v}: ignored; Kura sizes its update log files itself, and \
                     --ulog-limit caps their total (default 1g; 0 = none)"
                ));
            }
            "-uas" => p.notes.push(
                "-uas: ignored; the update log is written as the database's sync mode says \
                 (NAME#sync=…)"
                    .into(),
            ),
            "-sid" => p.flag("--sid", w.number(t)?.to_string()),
            "-mhost" => mhost = Some(w.value(t)?),
            "-mport" => mport = Some(w.number(t)?),
            "-rts" => rts(&mut p, w.value(t)?)?,
            "-rcc" => p.notes.push(
                "-rcc: ignored; a Kura replica checks each record's origin and time stamp \
                 itself"
                    .into(),
            ),
            "-skel" => {
                let v = w.value(t)?;
                return Err(format!(
                    "-skel {v}: a skeleton database library has no meaning in Kura, whose \
                     kinds are chosen by the database name"
                ));
            }
            "-mul" => {
                let v = w.value(t)?;
                return Err(format!(
                    "-mul {v}: Kura serves one database, whose writers scale without \
                     splitting it"
                ));
            }
            "-ext" => p.flag("--ext", w.value(t)?),
            "-extpc" => {
                let (name, period) = (w.value(t)?, w.value(t)?);
                p.words
                    .extend(["--extpc".into(), name.into(), period.into()]);
            }
            "-mask" | "-unmask" => {
                // ttserver splits the names at spaces and commas; Kura at commas.
                let v = w.value(t)?;
                let names: Vec<&str> = v.split([' ', ',']).filter(|n| !n.is_empty()).collect();
                if let Some(n) = names
                    .iter()
                    .find(|n| n.to_ascii_lowercase().starts_with("0x"))
                {
                    return Err(format!(
                        "{t} {v}: a bit mask ({n}) has no meaning here: give the command names"
                    ));
                }
                p.flag(&format!("-{t}"), names.join(","));
            }
            s if s.starts_with('-') && s.len() > 1 => {
                return Err(format!(
                    "{s}: not a ttserver flag (ttserver.c has no such option)"
                ))
            }
            name => {
                if db.is_some() {
                    return Err(format!("{name}: ttserver serves one database"));
                }
                db = Some(name);
            }
        }
    }
    master(&mut p, mhost, mport)?;
    let has = |f: &str| p.words.iter().any(|w| w == f);
    if !has("--sid") && (has("--ulog") || has("--master")) {
        p.notes.push(
            "no -sid: ttserver would keep no update log and follow no master without one; \
             Kura takes the port as the server id (give -sid, unique in the replication set)"
                .into(),
        );
    }
    let exts = [
        (".tch", ".kh"),
        (".tcb", ".kb"),
        (".tcf", ".kf"),
        (".tct", ".kt"),
        ("*", "*"),
        ("+", "+"),
    ];
    // ttserver's default database is an in-memory hash.
    p.name = Some(database_name(
        Program::Ttserver,
        db.unwrap_or("*"),
        &exts,
        &[],
        &mut p,
    )?);
    if !host {
        p.notes.push(NO_LISTEN_DEFAULT.into());
    }
    Ok(p)
}

/// Kyoto Tycoon's ktserver (ktserver.cc's argument loop).
pub fn ktserver(args: &[String]) -> Result<Plan, String> {
    let mut p = Plan::default();
    let mut w = Words { args, i: 0 };
    let (mut mhost, mut mport, mut host) = (None, None, false);
    let mut dbs: Vec<&str> = Vec::new();
    let (mut sync, mut plsv, mut plex) = (None::<String>, None, None);
    while let Some(t) = args.get(w.i) {
        w.i += 1;
        match t.as_str() {
            // After `--`, every word is a database name.
            "--" => {
                dbs.extend(args[w.i..].iter().map(String::as_str));
                break;
            }
            "-host" => {
                p.flag("--host", w.value(t)?);
                host = true;
            }
            "-port" => p.flag("--port", w.number(t)?.to_string()),
            "-tout" => timeout(&mut p, t, w.value(t)?)?,
            "-th" => p.flag("--threads", w.number(t)?.max(1).to_string()),
            "-log" => p.flag("--log", w.value(t)?),
            "-li" => log_level(&mut p, t, "info"),
            "-ls" => log_level(&mut p, t, "warn"),
            "-le" => log_level(&mut p, t, "error"),
            "-lz" => log_level(&mut p, t, "off"),
            "-ulog" => p.flag("--ulog", w.value(t)?),
            "-ulim" => {
                let v = w.value(t)?;
                p.notes.push(format!(
                    "-ulim {v}: ignored; Kura sizes its update log files itself, and \
                     --ulog-limit caps their total (default 1g; 0 = none)"
                ));
            }
            "-uasi" => {
                let v = w.value(t)?;
                p.notes.push(format!(
                    "-uasi {v}: ignored; the update log is synced as the database's sync \
                     mode says (NAME#sync=…)"
                ));
            }
            "-sid" => p.flag("--sid", w.number(t)?.to_string()),
            "-ord" => {
                p.flag("--mask", "allwrite");
                p.notes
                    .push("-ord: the database is served read-only (--mask allwrite)".into());
            }
            "-oat" => p
                .notes
                .push("-oat: ignored; every Kura write is crash-safe without transactions".into()),
            "-oas" => sync = Some("always".into()),
            "-onl" | "-otl" => p.notes.push(format!(
                "{t}: ignored; Kura always locks its database files (a second opener is \
                 refused at once)"
            )),
            "-onr" => p.notes.push(
                "-onr: ignored; Kura's recovery at open always runs (it never rebuilds \
                 silently)"
                    .into(),
            ),
            "-asi" => {
                let v = w.value(t)?;
                let secs: f64 = v
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s > 0.0)
                    .ok_or_else(|| format!("-asi {v}: expected seconds"))?;
                sync = Some(format!(
                    "interval:{}",
                    ((secs * 1000.0).ceil() as u64).max(1)
                ));
            }
            "-ash" => p
                .notes
                .push("-ash: ignored; Kura's syncs are always to the disk (fsync)".into()),
            "-bgs" | "-bgsi" | "-bgsc" => {
                let v = w.value(t)?;
                return Err(format!(
                    "{t} {v}: Kura takes no periodic snapshots (not yet): keep an update log \
                     (-ulog) and take hot copies with `kura remote copy` or Kyoto Tycoon's \
                     `synchronize` (-cmd)"
                ));
            }
            "-dmn" => p.words.push("--daemon".into()),
            "-pid" => p.flag("--pid", w.value(t)?),
            "-cmd" => p.flag("--backup-dir", w.value(t)?),
            "-scr" => p.flag("--scr", w.value(t)?),
            "-mhost" => mhost = Some(w.value(t)?),
            "-mport" => mport = Some(w.number(t)?),
            "-rts" => rts(&mut p, w.value(t)?)?,
            "-riv" => {
                let v = w.value(t)?;
                p.notes.push(format!(
                    "-riv {v}: ignored; a Kura replica applies the master's changes as they come"
                ));
            }
            "-plsv" => plsv = Some(w.value(t)?),
            "-plex" => plex = Some(w.value(t)?),
            "-pldb" => {
                let v = w.value(t)?;
                return Err(format!(
                    "-pldb {v}: a pluggable database library has no meaning in Kura, whose \
                     kinds are chosen by the database name"
                ));
            }
            s if s.starts_with('-') && s.len() > 1 => {
                return Err(format!(
                    "{s}: not a ktserver flag (ktserver.cc has no such option)"
                ))
            }
            name => dbs.push(name),
        }
    }
    master(&mut p, mhost, mport)?;
    match (plsv, plex) {
        (Some(lib), ex) if lib.contains("memc") => {
            // The memcached plug-in: `-plex port=11211#opts=f#qtimeout=…`.
            let mut port = 11211;
            for kv in ex.unwrap_or("").split('#').filter(|s| !s.is_empty()) {
                match kv.split_once('=') {
                    Some(("port", v)) => {
                        port = v
                            .parse()
                            .map_err(|_| format!("-plex {kv}: expected a port number"))?
                    }
                    _ => p.notes.push(format!(
                        "-plex {kv}: ignored; Kura's memcached protocol keeps flags, and has \
                         no queue mode"
                    )),
                }
            }
            p.flag("--memcached-port", port.to_string());
        }
        (Some(lib), _) => {
            return Err(format!(
                "-plsv {lib}: only the memcached plug-in (libktplugservmemc) has a meaning \
                 here (--memcached-port)"
            ))
        }
        (None, Some(ex)) => return Err(format!("-plex {ex}: given without -plsv")),
        (None, None) => {}
    }
    if dbs.len() > 1 {
        return Err(format!(
            "{}: Kura serves one database per server (ktserver serves several)",
            dbs.join(" ")
        ));
    }
    let exts = [
        (".kch", ".kh"),
        (".kct", ".kb"),
        ("*", "*"),
        ("%", "+"),
        ("-", "*"),
        ("+", "+"),
        (":", "*"),
    ];
    for (ext, what) in [(".kcd", "directory hash"), (".kcf", "directory tree")] {
        if let Some(db) = dbs
            .first()
            .filter(|d| d.split('#').next().unwrap_or("").ends_with(ext))
        {
            return Err(format!(
                "{db}: Kura has no {what} kind; move the records into a `.kh` or `.kb` with \
                 `kura db import` (docs/MIGRATING.md)"
            ));
        }
    }
    // ktserver's default database is an in-memory one (`:`).
    let db = dbs.first().copied().unwrap_or(":");
    let mut name = database_name(
        Program::Ktserver,
        db,
        &exts,
        &[("capcnt", "capnum"), ("pccap", "cache")],
        &mut p,
    )?;
    if let Some(mode) = sync {
        let persistent = kura_engine::registry::by_path(name.split('#').next().unwrap_or(""))
            .is_some_and(|k| k.caps.persistent);
        if persistent {
            name = with_sync(&name, &mode);
        } else {
            p.notes
                .push("-oas/-asi: ignored for an in-memory database".to_string());
        }
    }
    p.name = Some(name);
    if !host {
        p.notes.push(NO_LISTEN_DEFAULT.into());
    }
    Ok(p)
}

/// memcached's long options, as its short ones.
const MC_LONG: &[(&str, char)] = &[
    ("port", 'p'),
    ("udp-port", 'U'),
    ("listen", 'l'),
    ("conn-limit", 'c'),
    ("threads", 't'),
    ("memory-limit", 'm'),
    ("disable-evictions", 'M'),
    ("max-item-size", 'I'),
    ("user", 'u'),
    ("daemon", 'd'),
    ("pidfile", 'P'),
    ("verbose", 'v'),
    ("protocol", 'B'),
    ("max-reqs-per-event", 'R'),
    ("auth-file", 'Y'),
    ("enable-sasl", 'S'),
    ("extended", 'o'),
    ("unix-socket", 's'),
    ("unix-mask", 'a'),
    ("enable-shutdown", 'A'),
    ("enable-coredumps", 'r'),
    ("lock-memory", 'k'),
    ("slab-growth-factor", 'f'),
    ("slab-min-size", 'n'),
    ("enable-largepages", 'L'),
    ("disable-cas", 'C'),
    ("listen-backlog", 'b'),
    ("disable-flush-all", 'F'),
    ("disable-dumping", 'X'),
    ("disable-watch", 'W'),
    ("memory-file", 'e'),
    ("enable-ssl", 'Z'),
];

/// memcached's flags that take a value.
const MC_VALUED: &str = "pUlctmIuPBRYosafnDbe";

/// memcached (its `memcached -h`): an in-memory database bounded by `-m`, or with `-- NAME` a
/// durable one.
pub fn memcached(args: &[String]) -> Result<Plan, String> {
    let mut p = Plan::default();
    let (mut port, mut mem, mut host, mut verbose) = (11211u64, 64u64, false, 0);
    let mut db = None;
    let mut i = 0;
    while let Some(t) = args.get(i) {
        i += 1;
        if t == "--" {
            let rest = &args[i..];
            match rest {
                [name] => db = Some(name.clone()),
                [] => return Err("--: expected a database name after it".into()),
                _ => return Err(format!("{}: one database name after --", rest.join(" "))),
            }
            break;
        }
        // The flag, and its value: attached (`-p11211`, `--port=11211`) or the next word.
        let (c, attached, shown) = if let Some(long) = t.strip_prefix("--") {
            let (name, v) = long
                .split_once('=')
                .map_or((long, None), |(a, b)| (a, Some(b)));
            let c = MC_LONG
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, c)| *c)
                .ok_or_else(|| format!("{t}: not a memcached flag Kura knows"))?;
            (c, v.map(str::to_string), format!("--{name}"))
        } else if let Some(short) = t.strip_prefix('-').filter(|s| !s.is_empty()) {
            let c = short.chars().next().unwrap_or('-');
            let rest = &short[c.len_utf8()..];
            if c == 'v' && rest.chars().all(|x| x == 'v') {
                verbose += short.len();
                continue;
            }
            let v = (!rest.is_empty()).then(|| rest.to_string());
            if v.is_some() && !MC_VALUED.contains(c) {
                return Err(format!("{t}: not a memcached flag Kura knows"));
            }
            (c, v, format!("-{c}"))
        } else {
            return Err(format!(
                "{t}: memcached takes no database name; give one after `--` for a durable \
                 database (`kura memcached -p 11211 -- data.kh`)"
            ));
        };
        let value = if MC_VALUED.contains(c) {
            match attached {
                Some(v) => v,
                None => {
                    let v = args
                        .get(i)
                        .cloned()
                        .ok_or_else(|| format!("{shown}: needs a value"))?;
                    i += 1;
                    v
                }
            }
        } else {
            String::new()
        };
        let num = |v: &str| -> Result<u64, String> {
            v.parse()
                .map_err(|_| format!("{shown} {v}: expected a whole number"))
        };
        match c {
            'p' => port = num(&value)?,
            'U' => {
                if num(&value)? != 0 {
                    return Err(format!(
                        "{shown} {value}: Kura serves memcached over TCP only, not UDP (not yet)"
                    ));
                }
            }
            'l' => {
                if value.contains(',') {
                    return Err(format!(
                        "{shown} {value}: Kura listens on one address (not yet several)"
                    ));
                }
                // `ADDR`, `ADDR:PORT`, `[V6]:PORT` or `V6` (memcached's forms).
                let (h, lport) = if let Some(rest) = value.strip_prefix('[') {
                    match rest.split_once(']') {
                        Some((h, tail)) => (h.to_string(), tail.strip_prefix(':')),
                        None => return Err(format!("{shown} {value}: expected [ADDRESS]:PORT")),
                    }
                } else if value.matches(':').count() == 1 {
                    let (h, p) = value.split_once(':').unwrap_or((&value, ""));
                    (h.to_string(), Some(p))
                } else {
                    (value.clone(), None)
                };
                if let Some(lp) = lport {
                    port = num(lp)?;
                }
                p.flag("--host", h);
                host = true;
            }
            'c' => p.flag("--max-connections", num(&value)?.to_string()),
            't' => p.flag("--threads", num(&value)?.max(1).to_string()),
            'm' => mem = num(&value)?,
            'M' => {
                return Err(format!(
                    "{shown}: Kura's memory database evicts its least used items at its bound; \
                     it has no mode that refuses writes instead"
                ))
            }
            'I' => p.flag("--max-item-size", value.to_ascii_lowercase()),
            'u' => {
                if serve_has("user") {
                    p.flag("--user", value);
                } else if unsafe { libc::geteuid() } == 0 {
                    return Err(format!(
                        "{shown} {value}: not yet (kura serve does not drop root): run it as \
                         that user (systemd's User=)"
                    ));
                } else {
                    p.notes.push(format!(
                        "{shown} {value}: ignored, as memcached does when not run as root"
                    ));
                }
            }
            'd' => p.words.push("--daemon".into()),
            'P' => p.flag("--pid", value),
            'v' => verbose += 1,
            'B' => match value.as_str() {
                "auto" => {}
                "ascii" | "binary" => p.notes.push(format!(
                    "{shown} {value}: ignored; Kura serves both memcached protocols on its port"
                )),
                _ => return Err(format!("{shown} {value}: expected auto, ascii or binary")),
            },
            'R' => p.notes.push(format!(
                "{shown} {value}: ignored; Kura's event loops share time among connections \
                 themselves"
            )),
            'Y' => {
                return Err(format!(
                    "{shown} {value}: authentication takes Kura's users file, not memcached's \
                     plain passwords: write one (`kura users add FILE NAME`, the password on \
                     stdin) and serve with `--users FILE`"
                ))
            }
            'S' => {
                return Err(format!(
                    "{shown}: SASL authentication takes Kura's users file: `--users FILE` \
                     (written by `kura users add`)"
                ))
            }
            's' | 'a' => {
                return Err(format!(
                    "{shown} {value}: Kura listens on TCP only, not on a UNIX socket (not yet)"
                ))
            }
            'e' => {
                return Err(format!(
                    "{shown} {value}: Kura's memory database lives in its heap; for one that \
                     outlives a restart, serve a durable database (`-- data.kh`)"
                ))
            }
            'Z' => return Err(format!("{shown}: TLS is not yet in Kura")),
            'F' => {
                p.flag("--mask", "vanish");
                p.notes.push(format!(
                    "{shown}: flush_all refused by --mask vanish (which refuses Tyrant's vanish \
                     and Kyoto Tycoon's clear too)"
                ));
            }
            'k' | 'r' | 'A' | 'f' | 'n' | 'L' | 'D' | 'C' | 'b' | 'X' | 'W' => {
                let v = if value.is_empty() {
                    String::new()
                } else {
                    format!(" {value}")
                };
                p.notes.push(format!(
                    "{shown}{v}: ignored; memcached tuning Kura has no counterpart for"
                ));
            }
            'o' => {
                for opt in value.split(',').filter(|s| !s.is_empty()) {
                    let key = opt.split('=').next().unwrap_or(opt);
                    if key.starts_with("ssl") {
                        return Err(format!("{shown} {opt}: TLS is not yet in Kura"));
                    }
                    p.notes.push(format!(
                        "{shown} {opt}: ignored; memcached tuning Kura has no counterpart for"
                    ));
                }
            }
            _ => return Err(format!("{t}: not a memcached flag Kura knows")),
        }
    }
    p.flag("--port", port.to_string());
    match verbose {
        0 => {}
        1 => log_level(&mut p, "-v", "info"),
        _ => log_level(&mut p, "-vv", "debug"),
    }
    p.name = Some(match db {
        Some(name) => name,
        None => {
            if mem == 0 {
                "*".to_string()
            } else {
                format!("*#capsiz={mem}m")
            }
        }
    });
    if !host {
        p.notes.push(
            "without -l, Kura listens on 127.0.0.1 only (memcached: every address); give -l \
             0.0.0.0 for that"
                .into(),
        );
    }
    Ok(p)
}

fn usage(prog: Program) -> String {
    let flags = match prog {
        Program::Ttserver => {
            "[-host name] [-port num] [-thnum num] [-tout num] [-dmn] [-pid path] [-log path] \
             [-ld|-le] [-ulog path] [-ulim num] [-uas] [-sid num] [-mhost name] [-mport num] \
             [-rts path] [-rcc] [-ext path] [-extpc name period] [-mask expr] [-unmask expr] \
             [dbname]"
        }
        Program::Ktserver => {
            "[-host str] [-port num] [-tout num] [-th num] [-log file] [-li|-ls|-le|-lz] \
             [-ulog dir] [-ulim num] [-uasi num] [-sid num] [-ord] [-oat|-oas|-onl|-otl|-onr] \
             [-asi num] [-ash] [-dmn] [-pid file] [-cmd dir] [-scr file] [-mhost str] \
             [-mport num] [-rts file] [-riv num] [-plsv file -plex str] [db]"
        }
        Program::Memcached => {
            "[-p port] [-U 0] [-l addr] [-c conns] [-t threads] [-m MB] [-I size] [-u user] \
             [-d] [-P pidfile] [-v|-vv] [-B auto] [-R num] [-o opts] [-- dbname]"
        }
    };
    format!(
        "Usage: kura {} [--dry-run | --print-config] {flags}\n\nRuns the `kura serve` this \
         command line amounts to; --dry-run prints that command instead. Flags with no \
         meaning here are refused (exit 2) with the reason. docs/MIGRATING.md lists each \
         mapping.\n",
        prog.name()
    )
}

pub fn translate(prog: Program, args: &[String]) -> Result<Plan, String> {
    match prog {
        Program::Ttserver => ttserver(args),
        Program::Ktserver => ktserver(args),
        Program::Memcached => memcached(args),
    }
}

pub fn run(prog: Program, a: OriginalArgs) -> ExitCode {
    let (mut dry, mut print_config, mut rest) = (false, false, Vec::new());
    for w in a.args {
        match w.as_str() {
            "--dry-run" => dry = true,
            "--print-config" => print_config = true,
            "--help" => {
                print!("{}", usage(prog));
                return ExitCode::SUCCESS;
            }
            "-h" if prog == Program::Memcached => {
                print!("{}", usage(prog));
                return ExitCode::SUCCESS;
            }
            _ => rest.push(w),
        }
    }
    let plan = match translate(prog, &rest) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("kura {}: {e}", prog.name());
            return ExitCode::from(2);
        }
    };
    for n in &plan.notes {
        eprintln!("kura {}: note: {n}", prog.name());
    }
    let argv = plan.argv();
    if dry {
        let words: Vec<String> = argv.iter().map(|w| quote(w)).collect();
        println!("kura serve {}", words.join(" "));
        return ExitCode::SUCCESS;
    }
    let mut words: Vec<std::ffi::OsString> = argv.into_iter().map(Into::into).collect();
    if print_config {
        words.push("--print-config".into());
    }
    crate::serve::main(&words)
}

/// What an original's flag NAME (without its dashes) is in `kura serve`, if it is one of
/// theirs: for `kura serve -thnum 8` and a configuration file's `thnum = 8`.
pub fn hint(name: &str) -> Option<String> {
    let log = if serve_has("log-level") {
        "--log-level"
    } else {
        "kura serve has no log levels yet"
    };
    let text = match name {
        "thnum" | "th" | "t" => "--threads".to_string(),
        "tout" => "--timeout (idle seconds)".into(),
        "dmn" | "d" => "--daemon".into(),
        "mhost" | "mport" => "--master HOST:PORT".into(),
        "ld" | "le" | "li" | "ls" | "lz" | "v" | "vv" => log.into(),
        "ulim" => {
            "no counterpart: Kura sizes update log files itself; --ulog-limit caps their total"
                .into()
        }
        "uas" | "uasi" => {
            "no counterpart: the update log follows the database's sync mode (NAME#sync=…)".into()
        }
        "rts" => "--master-ts TS (Kura keeps a replica's position in NAME.replica)".into(),
        "rcc" | "riv" => "no counterpart: a Kura replica needs none".into(),
        "skel" | "mul" | "pldb" => "no meaning in Kura".into(),
        "extpc" => "--extpc NAME PERIOD".into(),
        "cmd" => "--backup-dir".into(),
        "ord" => "--mask allwrite".into(),
        "oas" => "NAME#sync=always".into(),
        "asi" => "NAME#sync=interval:MS".into(),
        "oat" | "onl" | "otl" | "onr" | "ash" => "no counterpart: Kura needs none".into(),
        "bgs" | "bgsi" | "bgsc" => {
            "no periodic snapshots in Kura: --ulog, and hot copies by `kura remote copy`".into()
        }
        "plsv" | "plex" => "--memcached-port PORT".into(),
        "kl" => "no counterpart: stop the running server first".into(),
        "p" => "--port".into(),
        "l" => "--host".into(),
        "c" => "--max-connections".into(),
        "m" => "a bounded memory database, e.g. '*#capsiz=64m'".into(),
        "I" => "--max-item-size".into(),
        "P" => "--pid".into(),
        "U" => "no UDP in Kura".into(),
        "M" | "B" | "R" => "no counterpart in Kura".into(),
        "u" => "--user".into(),
        "Y" | "S" => "--users FILE (a users file written by `kura users add`)".into(),
        _ => {
            let long = crate::conf::serve_command()
                .get_arguments()
                .find_map(|a| a.get_long().filter(|l| *l == name).map(str::to_string))?;
            // A flag of the originals that Kura has under the same name, with two dashes.
            if [
                "host", "port", "pid", "log", "ulog", "sid", "ext", "scr", "mask", "unmask",
            ]
            .contains(&name)
            {
                format!("--{long}")
            } else {
                return None;
            }
        }
    };
    Some(text)
}

/// For `kura serve` words clap refused: the first original's flag among them, said in Kura's
/// terms.
pub fn serve_hint(words: &[std::ffi::OsString]) -> Option<String> {
    let cmd = crate::conf::serve_command();
    let kura_long = |n: &str| cmd.get_arguments().any(|a| a.get_long() == Some(n));
    for w in words {
        let w = w.to_string_lossy();
        if w == "--" {
            break;
        }
        let name = if let Some(long) = w.strip_prefix("--") {
            let long = long.split('=').next().unwrap_or(long);
            if kura_long(long) {
                continue;
            }
            long
        } else if let Some(short) = w.strip_prefix('-') {
            short
        } else {
            continue;
        };
        if name.is_empty() || name == "h" {
            continue;
        }
        if let Some(h) = hint(name) {
            return Some(format!(
                "{w} is an option of the originals (ttserver, ktserver, memcached); in kura \
                 serve: {h} (`kura ttserver`, `kura ktserver` and `kura memcached` take their \
                 flags as they are)"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn ttserver_flags_map_onto_kura_serve() {
        let p = ttserver(&words(
            "-host 0.0.0.0 -port 1979 -thnum 8 -tout 2.5 -dmn -pid t.pid -log t.log -ulog u \
             -sid 3 -mhost m.example -mport 1980 -ext x.lua -mask out -unmask get +",
        ))
        .unwrap();
        assert_eq!(
            p.argv().join(" "),
            "+ --host 0.0.0.0 --port 1979 --threads 8 --timeout 3 --daemon --pid t.pid --log \
             t.log --ulog u --sid 3 --ext x.lua --mask out --unmask get --master m.example:1980"
        );
        assert_eq!(ttserver(&[]).unwrap().name.as_deref(), Some("*"));
        let p = ttserver(&words("-mask put,out -unmask out")).unwrap();
        assert_eq!(p.words.join(" "), "--mask put,out --unmask out");
        let p = ttserver(&["-mask".to_string(), "put out".to_string()]).unwrap();
        assert_eq!(p.words.join(" "), "--mask put,out");
        assert!(ttserver(&words("-mask 0x10"))
            .unwrap_err()
            .contains("bit mask"));
        let p = ttserver(&words(
            "-port 1978 /nonexistent/casket.tch#bnum=1000#opts=l",
        ))
        .unwrap();
        assert_eq!(p.name.as_deref(), Some("/nonexistent/casket.kh#bnum=1000"));
        assert!(
            p.notes.iter().any(|n| n.contains("opts=l")),
            "{:?}",
            p.notes
        );
    }

    #[test]
    fn refused_flags_say_why() {
        for (args, want) in [
            ("-skel x.so", "-skel"),
            ("-mul 4", "-mul"),
            ("-kl", "-kl"),
            ("-mport 1", "without -mhost"),
            ("-bogus", "not a ttserver flag"),
            ("a.tch b.tch", "one database"),
            ("-host /tmp/sock", "UNIX"),
        ] {
            let e = ttserver(&words(args)).unwrap_err();
            assert!(e.contains(want), "{args}: {e}");
        }
        for (args, want) in [
            ("-bgs snap", "periodic snapshots"),
            ("-pldb x.so", "-pldb"),
            ("-plsv libfoo.so", "-plsv"),
            ("a.kch b.kch", "one database"),
            ("c.kcd", "directory hash"),
        ] {
            let e = ktserver(&words(args)).unwrap_err();
            assert!(e.contains(want), "{args}: {e}");
        }
        for (args, want) in [
            ("-U 11211", "UDP"),
            ("-M", "-M"),
            ("-Y auth", "authentication"),
            ("-S", "SASL"),
            ("-o ssl_chain_cert=x", "TLS"),
            ("-l 1.2.3.4,5.6.7.8", "one address"),
            ("-Q", "not a memcached flag"),
            ("data.kh", "after `--`"),
        ] {
            let e = memcached(&words(args)).unwrap_err();
            assert!(e.contains(want), "{args}: {e}");
        }
    }

    #[test]
    fn ktserver_and_memcached_flags_map_onto_kura_serve() {
        let p = ktserver(&words(
            "-port 1978 -th 4 -oas -cmd bk -scr s.lua -ord -plsv /usr/lib/libktplugservmemc.so \
             -plex port=11212#opts=f /nonexistent/c.kch#bnum=100#capcnt=5",
        ))
        .unwrap();
        assert_eq!(
            p.argv().join(" "),
            "/nonexistent/c.kh#bnum=100#sync=always --port 1978 --threads 4 --backup-dir bk \
             --scr s.lua --mask allwrite --memcached-port 11212"
        );
        assert_eq!(
            ktserver(&words("%#capcnt=10")).unwrap().name.as_deref(),
            Some("+#capnum=10")
        );
        // A command line found in the wild (a container's).
        let p = ktserver(&words(
            "-ls -th 16 -port 3000 -pid /data/kyoto.pid -oat -uasi 10 -asi 10 -ash -sid 1001 \
             -ulog /data/db -ulim 104857600 /nonexistent/db.kct#opts=c#pccap=256m#dfunit=8",
        ))
        .unwrap();
        assert_eq!(
            p.argv().join(" "),
            "/nonexistent/db.kb#cache=256m#sync=interval:10000 --log-level warn --threads 16 \
             --port 3000 --pid /data/kyoto.pid --sid 1001 --ulog /data/db"
        );
        let e = ktserver(&words("-port 1 -- -x")).unwrap_err();
        assert!(e.starts_with("-x: not a database name"), "{e}");
        let p = memcached(&words("-p 11311 -m 64 -t 2 -c1024 -I 2m -B auto -U 0")).unwrap();
        assert_eq!(
            p.argv().join(" "),
            "*#capsiz=64m --threads 2 --max-connections 1024 --max-item-size 2m --port 11311"
        );
        // Debian's /etc/memcached.conf, but -u (which drops root).
        let p = memcached(&words(
            "-d -m 64 -p 11211 -l 127.0.0.1 -P /var/run/memcached/memcached.pid -k -F",
        ))
        .unwrap();
        assert_eq!(
            p.argv().join(" "),
            "*#capsiz=64m --daemon --host 127.0.0.1 --pid /var/run/memcached/memcached.pid \
             --mask vanish --port 11211"
        );
        assert!(
            p.notes.iter().any(|n| n.starts_with("-k: ignored")),
            "{:?}",
            p.notes
        );
        let p = memcached(&words("-l 10.0.0.1:11300")).unwrap();
        assert_eq!(
            p.argv().join(" "),
            "*#capsiz=64m --host 10.0.0.1 --port 11300"
        );
        let p = memcached(&words("-p 1 -l [::1]:11301")).unwrap();
        assert_eq!(p.argv().join(" "), "*#capsiz=64m --host ::1 --port 11301");
        let p = memcached(&words("-l ::1")).unwrap();
        assert_eq!(p.argv().join(" "), "*#capsiz=64m --host ::1 --port 11211");
        for (args, want) in [
            ("-s /tmp/mc.sock", "UNIX socket"),
            ("-Z", "TLS"),
            ("-e f", "heap"),
        ] {
            assert!(
                memcached(&words(args)).unwrap_err().contains(want),
                "{args}"
            );
        }
        let p = memcached(&words("--port=11400 -d -P m.pid -- data.kh")).unwrap();
        assert_eq!(
            p.argv().join(" "),
            "data.kh --daemon --pid m.pid --port 11400"
        );
    }

    #[test]
    fn serve_names_the_kura_flag_for_an_original_one() {
        let os =
            |s: &str| -> Vec<std::ffi::OsString> { s.split_whitespace().map(Into::into).collect() };
        let h = serve_hint(&os("-port 1978")).unwrap();
        assert!(h.contains("--port"), "{h}");
        let h = serve_hint(&os("--mhost m")).unwrap();
        assert!(h.contains("--master HOST:PORT"), "{h}");
        assert!(serve_hint(&os("-thnum 8")).unwrap().contains("--threads"));
        assert!(serve_hint(&os("-dmn")).unwrap().contains("--daemon"));
        assert!(serve_hint(&os("--port 1 --bogus")).is_none());
    }

    #[test]
    fn quoting_keeps_a_command_runnable() {
        assert_eq!(quote("*#capsiz=64m"), "'*#capsiz=64m'");
        assert_eq!(quote("a'b"), "'a'\\''b'");
        assert_eq!(quote("data.kh"), "data.kh");
    }
}
