//! `kura db …`: work on a database directly, the successor of Tokyo Cabinet's `tchmgr`.
//!
//! Exit status, for every subcommand:
//!
//! * `0` — success;
//! * `1` — a negative answer: the key is absent (`get`, `out`), the key or the file already
//!   exists (`put --keep`, `create`, `copy`), the database is unhealthy (`check`);
//! * `2` — an error: bad usage, a database that cannot be opened (unknown kind, bad parameter,
//!   locked by another process, corrupt), a malformed import line, an I/O error.
//!
//! Errors are one line on stderr starting with `kura: `. Every command closes the database
//! (which syncs it) before exiting, also when it fails.

mod health;
mod history;
mod table;

use health::{check, repair};
pub(crate) use health::{damage_note, Progress};
use history::{restore, ulog_list};

use crate::transfer::{self, Input, LineFormat};
use crate::when;
use clap::Subcommand;
use kura_engine::TokyoOps;
use kura_engine::{self as engine, tsv, Error, KeyRange, OpenMode, Outcome, Store};
use std::ffi::OsString;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

const NAME_HELP: &str = "Database name: PATH.kh (on-disk hash), PATH.kb (on-disk B+ tree), \
                         PATH.kf (fixed-length database: keys are record ids 1, 2, … and the \
                         key words min, max, prev, next), PATH.kt (table: records of named \
                         columns under a primary key, with indexes), `*` (memory hash) or `+` \
                         (memory tree), optionally followed by #param=value tuning, e.g. \
                         `casket.kh#sync=always`";

const KEYSPACE_HELP: &str = "Work on keyspace NAME of the database instead of the database \
                             itself (a kind with keyspaces: not a .kf); a command that reads \
                             refuses a keyspace the database does not have";

const KEYSPACE_MAKE_HELP: &str = "Work on keyspace NAME of the database instead of the database \
                                  itself (a kind with keyspaces: not a .kf), making it when \
                                  missing: `NAME#cmp=ORDER` gives a new keyspace of a .kb its \
                                  key order (lex, dec, int64, lexdesc)";

const AFTER_HELP: &str = "Exit status: 0 on success, 1 when the key is absent / already exists or \
                          the database is unhealthy, 2 on errors (usage, open, I/O).\n\
                          Keys and values are taken as raw bytes; put `--` before a key that \
                          starts with `-`.";

#[derive(Subcommand)]
#[command(after_help = AFTER_HELP)]
pub enum DbCommand {
    /// Create a new database (status 1 when a database is already there; an error when the
    /// path holds something else). Its parameters (lanes, compress, bnum) are stored in it.
    Create {
        #[arg(help = NAME_HELP)]
        name: String,
    },
    /// Print the kind, record count, size, the parameters the database stores (`stored.*`),
    /// those this open chose (`open.*`), counters, and each keyspace (`keyspace.NAME`: its
    /// records and parameters).
    Inform {
        #[arg(help = NAME_HELP)]
        name: String,
        #[arg(long, value_name = "NAME", help = KEYSPACE_HELP)]
        keyspace: Option<String>,
    },
    /// Store a record (replacing any existing value unless --keep, --cat, --dup or --dupback
    /// is given). On a table (PATH.kt) KEY is the primary key and VALUE… column names and
    /// values in turn (`put x.kt 1 name alice age 30`, as `tctmgr put`; --cat merges the
    /// columns into the record); an empty KEY takes a new unique id (printed).
    Put {
        #[arg(help = NAME_HELP)]
        name: String,
        #[arg(long, value_name = "NAME", help = KEYSPACE_MAKE_HELP)]
        keyspace: Option<String>,
        key: OsString,
        #[arg(value_name = "VALUE")]
        value: Vec<OsString>,
        /// Do not overwrite: fail with status 1 when the key already exists.
        #[arg(long, conflicts_with_all = ["cat", "dup", "dupback"])]
        keep: bool,
        /// Append VALUE to the existing value (creating the record when absent).
        #[arg(long, conflicts_with_all = ["dup", "dupback"])]
        cat: bool,
        /// Add VALUE as one more value of KEY, after those it has (Tokyo Cabinet's putdup;
        /// databases with duplicate keys: the B+ tree PATH.kb).
        #[arg(long, conflicts_with = "dupback")]
        dup: bool,
        /// Add VALUE as one more value of KEY, before those it has (putdupback: `get` then
        /// shows it).
        #[arg(long)]
        dupback: bool,
        /// Create the database when it does not exist (without it, a missing database is an
        /// error, so that a mistyped path creates nothing).
        #[arg(long)]
        create: bool,
    },
    /// Write the value of KEY to stdout, as raw bytes without an added newline. On a table
    /// (PATH.kt): a `NAME<TAB>VALUE` line per column, as `tctmgr get` prints them
    /// (TSV-escaped as `list` writes keys).
    Get {
        #[arg(help = NAME_HELP)]
        name: String,
        #[arg(long, value_name = "NAME", help = KEYSPACE_HELP)]
        keyspace: Option<String>,
        key: OsString,
        /// Every value of KEY (a key with duplicates), first to last, one per line,
        /// TSV-escaped as `list` writes keys.
        #[arg(long)]
        all: bool,
    },
    /// Query a table (PATH.kt), as `tctmgr search`: the primary keys of the records matching
    /// every condition, in the order asked; `--pv` / `--column` print records
    /// (`KEY<TAB>NAME<TAB>VALUE…`), `--count` how many, `--out` removes them, `--hint` prints
    /// the plan taken.
    Search {
        #[arg(help = NAME_HELP)]
        name: String,
        #[command(flatten)]
        search: crate::query::SearchArgs,
    },
    /// Make, drop or optimize the index of a column of a table (PATH.kt; `""` is the primary
    /// key), as `tctmgr setindex`: TYPE is lexical, decimal, token, qgram, opt or void (or
    /// Tokyo Cabinet's number), `+` before it to keep an existing index (status 1 then).
    Setindex {
        #[arg(help = NAME_HELP)]
        name: String,
        column: OsString,
        #[arg(value_name = "TYPE", allow_hyphen_values = true)]
        typ: String,
    },
    /// Remove a record (status 1 when it is absent).
    Out {
        #[arg(help = NAME_HELP)]
        name: String,
        #[arg(long, value_name = "NAME", help = KEYSPACE_HELP)]
        keyspace: Option<String>,
        key: OsString,
        /// Remove every value of KEY (a key with duplicates; without it, only the first).
        #[arg(long)]
        all: bool,
    },
    /// List keys, one per line, TSV-escaped (in key order for ordered kinds only; a key with
    /// several values once per value).
    List {
        #[arg(help = NAME_HELP)]
        name: String,
        #[arg(long, value_name = "NAME", help = KEYSPACE_HELP)]
        keyspace: Option<String>,
        /// Only keys starting with these bytes.
        #[arg(long)]
        prefix: Option<OsString>,
        /// At most this many records.
        #[arg(long)]
        limit: Option<usize>,
        /// Start the walk at this key (inclusive; ordered kinds): the keys from it up, or with
        /// --desc from it down (as `tcbmgr list -bk -j KEY`).
        #[arg(long)]
        from: Option<OsString>,
        /// End the walk before this key (exclusive; ordered kinds): with --desc the keys
        /// down to it, it left out.
        #[arg(long, conflicts_with = "through")]
        to: Option<OsString>,
        /// End the walk at this key, including it (ordered kinds; as `tcbmgr list -rb`
        /// includes its end).
        #[arg(long, value_name = "KEY")]
        through: Option<OsString>,
        /// In descending key order (ordered kinds): from --from (or the last key) down to
        /// --to / --through.
        #[arg(long)]
        desc: bool,
        /// Print `KEY<TAB>VALUE` lines (the `export` format) instead of keys only.
        #[arg(long)]
        values: bool,
    },
    /// Store every `KEY<TAB>VALUE` line of FILE (or stdin), in batches.
    ///
    /// Formats (--format): `escaped` (the default, what `export` writes): backslash escapes
    /// \\ \t \n \r \xHH, a trailing CR (CRLF files) ignored; `raw`: the bytes as they are, a
    /// line split at its first tab (what `tchmgr list -pv` and `kchashmgr list -pv` write);
    /// `hex`: hex byte pairs (their `-px` form). Empty lines are skipped.
    ///
    /// Every line is checked before the first record is written, against the format and the
    /// database's rules (a `.kf`'s width and ids): a line that fails stops the import with
    /// status 2, naming the line, and nothing is imported (stdin is kept in a temporary file
    /// meanwhile; a database --create made for it is removed). Prints how many records it
    /// stored. Only keys and values are carried (no flags or expiration
    /// times).
    ///
    /// On a table (PATH.kt), `--format raw` reads what `tctmgr list -pv` writes: the primary
    /// key, then column names and values, tab-separated (a record without columns: its key
    /// alone); the other formats carry a record's
    /// `NAME\0VALUE\0…` form (what `export` writes). `--index COLUMN:TYPE` (repeated) makes
    /// indexes once the records are in.
    Import {
        #[arg(help = NAME_HELP)]
        name: String,
        #[arg(long, value_name = "NAME", help = KEYSPACE_MAKE_HELP)]
        keyspace: Option<String>,
        /// Read from this file instead of stdin.
        file: Option<PathBuf>,
        /// The line format.
        #[arg(long, value_enum, default_value_t)]
        format: LineFormat,
        /// Create the database when it does not exist.
        #[arg(long)]
        create: bool,
        /// Keep every line of a key as one more value (a database with duplicate keys, the
        /// B+ tree PATH.kb: what `tcbmgr importtsv` does); without it the last line of a key
        /// wins.
        #[arg(long)]
        dup: bool,
        /// A table's index to make after the import, `COLUMN:TYPE` (types as `setindex`
        /// takes them), e.g. `--index name:lexical --index age:decimal`.
        #[arg(long, value_name = "COLUMN:TYPE")]
        index: Vec<String>,
    },
    /// Write every record as a `KEY<TAB>VALUE` line to FILE (or stdout), in key order on
    /// ordered kinds (a key with several values once per value); see `import`.
    ///
    /// A FILE is written under a temporary name and renamed at the end: a failed export leaves
    /// no partial FILE. `--format raw` refuses (status 2) a record it cannot carry.
    Export {
        #[arg(help = NAME_HELP)]
        name: String,
        #[arg(long, value_name = "NAME", help = KEYSPACE_HELP)]
        keyspace: Option<String>,
        /// Write to this file (replaced) instead of stdout.
        file: Option<PathBuf>,
        /// The line format.
        #[arg(long, value_enum, default_value_t)]
        format: LineFormat,
    },
    /// Compact / rebuild the database, optionally changing what it stores: `compress=` (applied
    /// to every record and stored for later writes) and `bnum=`, or on a `.kf` `width=` and
    /// `limsiz=`; any other parameter is an error.
    Optimize {
        #[arg(help = NAME_HELP)]
        name: String,
        params: Option<String>,
    },
    /// Verify every checksum and structure (changes nothing); status 0 only when healthy.
    Check {
        #[arg(help = NAME_HELP)]
        name: String,
    },
    /// Write a new database holding every record of a damaged one that verifies.
    ///
    /// SRC is only read. Each key gets its newest version that verifies; a delete that
    /// verifies keeps older versions of its key deleted; the inner records of a damaged batch
    /// that verify are kept. Prints the records kept and lost and the damaged bytes skipped.
    /// The new database is checked before this returns.
    Repair {
        /// The damaged database (PATH.kh, PATH.kb or PATH.kf).
        src: String,
        /// The new database (must not exist), optionally with #param=value tuning.
        #[arg(required_unless_present = "in_place")]
        dst: Option<String>,
        /// Repair SRC itself: through a temporary copy and a rename, keeping the damaged files
        /// as SRC.damaged-<unix time>.
        #[arg(long, conflicts_with = "dst")]
        in_place: bool,
    },
    /// Remove every record.
    Vanish {
        #[arg(help = NAME_HELP)]
        name: String,
    },
    /// Write a consistent copy of the database to DEST, a new database of the same kind (a
    /// memory kind's copy: the kind DEST's name selects). DEST must not exist: an existing
    /// one is never overwritten (status 1). `kura db check DEST` verifies the copy. A database
    /// a server holds is copied through the server: `kura remote copy`.
    Copy {
        #[arg(help = NAME_HELP)]
        name: String,
        dest: PathBuf,
    },
    /// Point-in-time restore: replay an update log onto a backup made by `kura remote copy` of
    /// a server with `--ulog` (the position file inside the backup, `kura.ulogpos`, says where
    /// the log takes over), up to `--until` (default: the end of the log). The backup's
    /// position is advanced, so a later restore goes on from there. A time before the
    /// backup's is refused (status 2), and so is a damaged log, before anything of it is
    /// applied. `kura db ulog DIR` lists the log's records, to find the moment.
    Restore {
        /// The backup (a database name).
        #[arg(help = NAME_HELP)]
        name: String,
        /// The update log directory (the server's `--ulog`, or a copy of it).
        #[arg(long, value_name = "DIR")]
        ulog: PathBuf,
        /// Stop after the last record at or before this time (inclusive): microseconds since
        /// the epoch, RFC 3339 (`2026-11-28T03:05:00Z`, `2026-11-28T04:05:00.5+01:00`) or a
        /// time before now (`-30s`, `-5m`, `-2h`, `-1d`).
        #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
        until: Option<String>,
    },
    /// List the records of an update log directory, one line each (a batch's records one
    /// each): `TIME<TAB>µs<TAB>ORIGIN<TAB>OPERATION<TAB>KEY` — the time in RFC 3339 (UTC) and
    /// in microseconds since the epoch (what `restore --until` takes), the server id the
    /// change came from, `put`, `out`, `touch`, `vanish`, `optimize` (its parameters in the
    /// KEY column), `values` (every value of a key with duplicates), `batch.put`, `batch.out`;
    /// the key TSV-escaped. Reads a copy of a log or the log of a running server.
    Ulog {
        /// The update log directory (a server's `--ulog`, or a copy of it).
        dir: PathBuf,
        /// Only records at or after this time (the forms of `restore --until`).
        #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
        from: Option<String>,
        /// Only records at or before this time.
        #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
        until: Option<String>,
    },
}

/// Why a command did not succeed.
pub(crate) enum Fail {
    /// A negative answer: exit status 1.
    No(String),
    /// An error: exit status 2.
    Err(String),
    /// stdout was closed by the reader (`kura db list x.kh | head`): stop quietly.
    BrokenPipe,
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail::Err(e.to_string())
    }
}

pub(crate) type Res = Result<(), Fail>;

/// Run one `kura db` command; returns the exit status.
pub fn run(cmd: DbCommand) -> ExitCode {
    match dispatch(cmd) {
        Ok(()) | Err(Fail::BrokenPipe) => ExitCode::SUCCESS,
        Err(Fail::No(m)) => {
            eprintln!("kura: {m}");
            ExitCode::from(1)
        }
        Err(Fail::Err(m)) => {
            eprintln!("kura: {m}");
            ExitCode::from(2)
        }
    }
}

/// What the running `kura db` command is over `kura remote` (the arguments after `kura remote
/// --port P`), for the message when a server holds the database.
static REMOTE_EQUIVALENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// An argument as a shell would need it: as it is when plain, else single-quoted.
pub(crate) fn shell_word(s: &std::ffi::OsStr) -> String {
    let t = s.to_string_lossy();
    let plain = !t.is_empty()
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_./:=@%+,-".contains(&b));
    if plain {
        t.into_owned()
    } else {
        format!("'{}'", t.replace('\'', "'\\''"))
    }
}

/// `cmd` as a `kura remote` command (its arguments), where there is one.
fn remote_equivalent(cmd: &DbCommand) -> Option<String> {
    let w = |s: &OsString| shell_word(s);
    // `kura remote` works on a server's database itself, never on one of its keyspaces.
    if matches!(
        cmd,
        DbCommand::Inform {
            keyspace: Some(_),
            ..
        } | DbCommand::Get {
            keyspace: Some(_),
            ..
        } | DbCommand::Out {
            keyspace: Some(_),
            ..
        } | DbCommand::List {
            keyspace: Some(_),
            ..
        } | DbCommand::Export {
            keyspace: Some(_),
            ..
        } | DbCommand::Put {
            keyspace: Some(_),
            ..
        } | DbCommand::Import {
            keyspace: Some(_),
            ..
        }
    ) {
        return None;
    }
    Some(match cmd {
        DbCommand::Inform { .. } => "inform".into(),
        DbCommand::Get {
            key, all: false, ..
        } => format!("get {}", w(key)),
        // misc get answers every value of a key, one escaped line each.
        DbCommand::Get { key, all: true, .. } => format!("misc get {}", w(key)),
        DbCommand::List {
            prefix,
            limit,
            from: None,
            to: None,
            through: None,
            desc: false,
            values,
            ..
        } => {
            let mut s = "list".to_string();
            if let Some(p) = prefix {
                s.push_str(&format!(" --prefix {}", w(p)));
            }
            if let Some(l) = limit {
                s.push_str(&format!(" --limit {l}"));
            }
            if *values {
                s.push_str(" --values");
            }
            s
        }
        DbCommand::Export {
            file,
            format: LineFormat::Escaped,
            ..
        } => match file {
            Some(f) => format!("list --values > {}", shell_word(f.as_os_str())),
            None => "list --values".into(),
        },
        DbCommand::Put {
            key,
            value,
            keep,
            cat,
            dup,
            dupback,
            ..
        } if value.len() != 1 => {
            let f = match (keep, cat) {
                (true, _) => "putkeep",
                (_, true) => "putcat",
                _ => "put",
            };
            let cols: Vec<String> = value.iter().map(&w).collect();
            format!("misc {f} {} {}", w(key), cols.join(" "))
        }
        DbCommand::Put {
            key,
            value,
            keep,
            cat,
            dup,
            dupback,
            ..
        } => match (keep, cat, dup, dupback) {
            (true, ..) => format!("put --keep {} {}", w(key), w(&value[0])),
            (_, true, ..) => format!("put --cat {} {}", w(key), w(&value[0])),
            (_, _, true, _) => format!("misc putdup {} {}", w(key), w(&value[0])),
            (.., true) => format!("misc putdupback {} {}", w(key), w(&value[0])),
            _ => format!("put {} {}", w(key), w(&value[0])),
        },
        DbCommand::Out {
            key, all: false, ..
        } => format!("out {}", w(key)),
        DbCommand::Out { key, all: true, .. } => format!("misc outlist {}", w(key)),
        DbCommand::Search { search, .. } => format!("search {}", search.remote_words())
            .trim_end()
            .to_string(),
        DbCommand::Setindex { column, typ, .. } => format!(
            "misc setindex {} {}",
            w(column),
            shell_word(std::ffi::OsStr::new(typ))
        ),
        DbCommand::Import {
            file,
            format,
            dup: false,
            ..
        } => {
            let mut s = "import".to_string();
            if *format != LineFormat::Escaped {
                s.push_str(&format!(
                    " --format {}",
                    if *format == LineFormat::Raw {
                        "raw"
                    } else {
                        "hex"
                    }
                ));
            }
            if let Some(f) = file {
                s.push_str(&format!(" {}", shell_word(f.as_os_str())));
            }
            s
        }
        DbCommand::Vanish { .. } => "vanish".into(),
        DbCommand::Optimize { params, .. } => {
            format!(
                "optimize {}",
                shell_word(params.as_deref().unwrap_or("").as_ref())
            )
        }
        _ => return None,
    })
}

/// The address a `kura serve` command line listens on: `--host` (127.0.0.1; a wildcard
/// address is reached at 127.0.0.1) and `--port` (1978).
fn serve_address(command: &str) -> (String, Option<u16>) {
    let words: Vec<&str> = command.split_whitespace().collect();
    let opt = |name: &str| {
        words.iter().enumerate().find_map(|(i, w)| {
            w.strip_prefix(&format!("{name}="))
                .or_else(|| (*w == name).then(|| words.get(i + 1).copied()).flatten())
        })
    };
    let host = match opt("--host") {
        None | Some("0.0.0.0" | "::" | "[::]") => "127.0.0.1".to_string(),
        Some(h) => h.to_string(),
    };
    let port = match opt("--port") {
        None => Some(1978),
        Some(p) => p.parse().ok().filter(|&p| p != 0),
    };
    (host, port)
}

/// The message for a database another process holds: when that is a server, the same
/// command through it.
fn held_message(e: &Error, command: Option<&str>) -> String {
    let (Some(c), Some(eq)) = (
        command.filter(|c| c.split_whitespace().any(|w| w == "serve")),
        REMOTE_EQUIVALENT.get(),
    ) else {
        return e.to_string();
    };
    let (host, port) = serve_address(c);
    let host = if host == "127.0.0.1" {
        String::new()
    } else {
        format!("--host {host} ")
    };
    match port {
        Some(p) => format!("{e}: here `kura remote {host}--port {p} {eq}`"),
        None => format!(
            "{e}: here `kura remote {host}--port PORT {eq}`, PORT the one its log says it \
             listens on"
        ),
    }
}

fn dispatch(cmd: DbCommand) -> Res {
    if let Some(eq) = remote_equivalent(&cmd) {
        let _ = REMOTE_EQUIVALENT.set(eq);
    }
    match cmd {
        DbCommand::Create { name } => create(&name),
        DbCommand::Inform { name, keyspace } => with_db(&name, Open::ReadOnly, |db| {
            in_space(db, keyspace.as_deref(), false, &name, inform)
        }),
        DbCommand::Put {
            name,
            key,
            value,
            keep,
            cat,
            dup,
            dupback,
            create,
            keyspace,
        } => with_db(&name, Open::writable(create), |db| {
            in_space(db, keyspace.as_deref(), true, &name, |db| {
                if let Some(t) = db.table() {
                    if dup || dupback {
                        return Err(Fail::Err(
                            "--dup and --dupback need a database that keeps duplicate keys (a \
                             B+ tree, PATH.kb), not a table"
                                .into(),
                        ));
                    }
                    return table::put(t, key.as_bytes(), &value, keep, cat);
                }
                let [value] = &value[..] else {
                    return Err(Fail::Err(format!(
                        "one VALUE for a record of a {} (column names and values are for a \
                         table, PATH.kt)",
                        db.kind().name()
                    )));
                };
                let how = match (keep, cat, dup, dupback) {
                    (true, ..) => PutHow::Keep,
                    (_, true, ..) => PutHow::Cat,
                    (_, _, true, _) => PutHow::Dup { front: false },
                    (.., true) => PutHow::Dup { front: true },
                    _ => PutHow::Over,
                };
                put(db, key.as_bytes(), value.as_bytes(), how)
            })
        }),
        DbCommand::Get {
            name,
            key,
            all,
            keyspace,
        } => with_db(&name, Open::ReadOnly, |db| {
            in_space(db, keyspace.as_deref(), false, &name, |db| {
                if let Some(t) = db.table() {
                    table::get(t, key.as_bytes())
                } else if all {
                    get_all(db, key.as_bytes())
                } else {
                    get(db, key.as_bytes())
                }
            })
        }),
        DbCommand::Search { name, search } => {
            let cmds = search.commands()?;
            let open = if search.out {
                Open::Existing
            } else {
                Open::ReadOnly
            };
            with_db(&name, open, |db| {
                table::table_of(db, "search")?;
                let args: Vec<&[u8]> = cmds.iter().map(Vec::as_slice).collect();
                let s = engine::table::query::parse_search(&args)?;
                crate::query::print_reply(&engine::table::query::run_search(db, &s)?)
            })
        }
        DbCommand::Setindex { name, column, typ } => with_db(&name, Open::Existing, |db| {
            table::setindex(table::table_of(db, "setindex")?, column.as_bytes(), &typ)
        }),
        DbCommand::Out {
            name,
            key,
            all,
            keyspace,
        } => with_db(&name, Open::Existing, |db| {
            in_space(db, keyspace.as_deref(), false, &name, |db| {
                let found = if all {
                    db.remove_all(key.as_bytes())? > 0
                } else {
                    db.out(key.as_bytes())?
                };
                if found {
                    Ok(())
                } else {
                    Err(Fail::No(format!(
                        "no record for key `{}`",
                        show(key.as_bytes())
                    )))
                }
            })
        }),
        DbCommand::List {
            name,
            prefix,
            limit,
            from,
            to,
            through,
            desc,
            values,
            keyspace,
        } => with_db(&name, Open::ReadOnly, |db| {
            let bytes = |o: &Option<OsString>| o.as_ref().map(|p| p.as_bytes().to_vec());
            let sel = Selection {
                prefix: bytes(&prefix).unwrap_or_default(),
                from: bytes(&from),
                to: bytes(&to)
                    .map(|k| (k, false))
                    .or(bytes(&through).map(|k| (k, true))),
                desc,
                limit: limit.unwrap_or(usize::MAX),
            };
            in_space(db, keyspace.as_deref(), false, &name, |db| {
                list(db, &sel, values, &name)
            })
        }),
        DbCommand::Import {
            name,
            file,
            format,
            create,
            dup,
            keyspace,
            index,
        } => import(
            &name,
            file.as_deref(),
            format,
            create,
            dup,
            keyspace.as_deref(),
            &index,
        ),
        DbCommand::Export {
            name,
            file,
            format,
            keyspace,
        } => with_db(&name, Open::ReadOnly, |db| {
            in_space(db, keyspace.as_deref(), false, &name, |db| {
                transfer::export(db, file.as_deref(), format, &name)
            })
        }),
        DbCommand::Optimize { name, params } => with_db(&name, Open::Existing, |db| {
            Ok(db.optimize(params.as_deref().unwrap_or(""))?)
        }),
        DbCommand::Check { name } => with_db(&name, Open::Inspect, |db| check(db, &name)),
        DbCommand::Vanish { name } => with_db(&name, Open::Existing, |db| Ok(db.vanish()?)),
        DbCommand::Repair { src, dst, in_place } => repair(&src, dst.as_deref(), in_place),
        DbCommand::Copy { name, dest } => {
            if dest.exists() {
                return Err(Fail::No(format!(
                    "{} already exists; remove it first or choose another destination",
                    dest.display()
                )));
            }
            with_db(&name, Open::Existing, |db| Ok(db.copy_to(&dest)?))
        }
        DbCommand::Restore { name, ulog, until } => restore(&name, &ulog, until.as_deref()),
        DbCommand::Ulog { dir, from, until } => ulog_list(&dir, from.as_deref(), until.as_deref()),
    }
}

/// How a command opens its database.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    /// Writable, created when missing (`--create`).
    Create,
    /// Writable, existing only; `--create` would create it.
    ExistingOrFlag,
    /// Writable, existing only.
    Existing,
    /// Existing, read-only: nothing on disk changes, not even the repair of a torn tail. Damage
    /// the open found is noted on stderr.
    ReadOnly,
    /// `ReadOnly`, for `check`, which reports damage itself.
    Inspect,
}

impl Open {
    fn writable(create: bool) -> Open {
        if create {
            Open::Create
        } else {
            Open::ExistingOrFlag
        }
    }
}

/// `import`: every line is checked (its format, and the database's rules: a fixed-length
/// database's width and ids, …) before the first record is written; bad input changes
/// nothing, and a database this command created for it is removed again.
fn import(
    name: &str,
    file: Option<&Path>,
    format: LineFormat,
    create: bool,
    dup: bool,
    keyspace: Option<&str>,
    index: &[String],
) -> Res {
    let indexes = table::index_specs(index)?;
    let input = Input::open(file)?;
    // Made by this open, and nothing written to it yet.
    let mut untouched_new = false;
    let r = with_db_opened(name, Open::writable(create), |root, created| {
        untouched_new = created;
        if dup && !root.allows_dups() {
            return Err(Fail::Err(format!(
                "--dup needs a database that keeps duplicate keys (a B+ tree, PATH.kb), not a \
                 {}",
                root.kind().name()
            )));
        }
        if !indexes.is_empty() && (keyspace.is_some() || root.table().is_none()) {
            table::table_of(root, "--index")?;
            return Err(Fail::Err(
                "--index makes indexes of the table itself, not of a \
                                  keyspace"
                    .into(),
            ));
        }
        // An existing keyspace checks the lines by its own rules; a missing one is made only
        // once they passed (by the rules it is to have: `keyspace_rules`), so that refused
        // input makes no keyspace.
        let existing = match keyspace {
            Some(spec) if has_space(root, spec, name)? => Some(space(root, spec, false, name)?),
            _ => None,
        };
        let stand_in = match (keyspace, &existing) {
            (Some(spec), None) => {
                let (ks, params) = spec.split_once('#').unwrap_or((spec, ""));
                root.keyspace_rules(params)
                    .map_err(|e| Fail::Err(format!("keyspace `{ks}`: {e}")))?
            }
            _ => None,
        };
        let rules = existing.as_deref().or(stand_in.as_deref()).unwrap_or(root);
        let input = transfer::checked(input, format, Some(rules))?;
        untouched_new = false;
        let made = match (keyspace, &existing) {
            (Some(spec), None) => Some(space(root, spec, true, name)?),
            _ => None,
        };
        let db = existing.as_deref().or(made.as_deref()).unwrap_or(root);
        let n = transfer::import(db, input, dup)?;
        if let Some(t) = db.table() {
            table::make_indexes(t, &indexes)?;
        }
        let path = name.split('#').next().unwrap_or(name);
        let into = match keyspace {
            Some(spec) => format!(" (keyspace `{}`)", space_name(spec)),
            None => String::new(),
        };
        print(format!("{n} records stored in {path}{into}\n").as_bytes())
    });
    if r.is_err() && untouched_new {
        // Made by this command and refused before a record was written: nothing stays.
        if let Ok((path, _)) = engine::name::split_name(name) {
            let path = Path::new(path);
            if path.is_dir() {
                let _ = std::fs::remove_dir_all(path);
            }
        }
    }
    r
}

/// The keyspace name of a `--keyspace NAME[#PARAMS]`.
fn space_name(spec: &str) -> &str {
    spec.split_once('#').map_or(spec, |(n, _)| n)
}

/// Whether the database has the keyspace `--keyspace` names; an error for a kind without
/// keyspaces.
fn has_space(db: &dyn Store, spec: &str, name: &str) -> Result<bool, Fail> {
    // Every kind with keyspaces checks the name first (an empty one is refused as such); a
    // kind without them refuses whatever the name.
    if let Err(Error::Unsupported(_)) = db.keyspace("", "") {
        return Err(Fail::Err(format!(
            "--keyspace: {} is a {} database, which has no keyspaces",
            name.split('#').next().unwrap_or(name),
            db.kind().name()
        )));
    }
    let ks = space_name(spec);
    Ok(db.keyspaces().iter().any(|(n, _)| n == ks))
}

/// The keyspace `--keyspace NAME[#PARAMS]` names: made (with PARAMS) when missing if `make`,
/// else a missing one is an error (a command that reads makes nothing).
fn space(db: &dyn Store, spec: &str, make: bool, name: &str) -> Result<Arc<dyn Store>, Fail> {
    let (ks, params) = spec.split_once('#').unwrap_or((spec, ""));
    if !has_space(db, spec, name)? && !make {
        let names: Vec<String> = db.keyspaces().into_iter().map(|(n, _)| n).collect();
        let have = if names.is_empty() {
            "it has none".to_string()
        } else {
            format!("it has {}", names.join(", "))
        };
        return Err(Fail::Err(format!(
            "no keyspace `{ks}` in {} ({have}; `kura db put --keyspace` or `import \
             --keyspace` makes one)",
            name.split('#').next().unwrap_or(name)
        )));
    }
    db.keyspace(ks, params)
        .map_err(|e| Fail::Err(format!("keyspace `{ks}`: {e}")))
}

/// Run `f` on the database, or on its keyspace `spec` (see [`space`]).
fn in_space(
    db: &dyn Store,
    spec: Option<&str>,
    make: bool,
    name: &str,
    f: impl FnOnce(&dyn Store) -> Res,
) -> Res {
    match spec {
        None => f(db),
        Some(spec) => f(&*space(db, spec, make, name)?),
    }
}

/// Open `name`, run `f`, and close the database whatever `f` returned.
fn with_db(name: &str, how: Open, f: impl FnOnce(&dyn Store) -> Res) -> Res {
    with_db_opened(name, how, |db, _| f(db))
}

/// [`with_db`], telling `f` whether this open created the database.
fn with_db_opened(name: &str, how: Open, f: impl FnOnce(&dyn Store, bool) -> Res) -> Res {
    let mode = match how {
        Open::Create => OpenMode::Create,
        Open::ExistingOrFlag | Open::Existing => OpenMode::Existing,
        Open::ReadOnly | Open::Inspect => OpenMode::ReadOnly,
    };
    let db = engine::open_as(name, mode).map_err(|e| match e {
        // The engine's message already names the database and says what is wrong.
        Error::Locked { ref command, .. } => Fail::Err(held_message(&e, command.as_deref())),
        // Creating, a missing directory: the engine's message says which.
        Error::NotFound(_) if how == Open::Create => Fail::Err(open_error("create", name, &e)),
        Error::NotFound(_) if how == Open::ExistingOrFlag => Fail::Err(format!(
            "{} (add --create to create it)",
            open_error("open", name, &e)
        )),
        Error::NotFound(_) => Fail::Err(format!(
            "{} (`kura db create` makes one)",
            open_error("open", name, &e)
        )),
        e => Fail::Err(format!(
            "{}{}",
            open_error("open", name, &e),
            migrate_hint(name).unwrap_or_default()
        )),
    })?;
    let created = db.created;
    let db = db.store;
    let found = db.damage_found();
    if how == Open::ReadOnly && !found.is_empty() {
        let lost: u64 = found.iter().map(|d| d.lost).sum();
        eprintln!(
            "kura: warning: {name} is damaged ({} region(s), at least {lost} record(s) lost); \
             what verifies is served. `kura db check {name}` lists the damage, `kura db repair` \
             writes a new database of every record that verifies",
            found.len()
        );
    }
    let result = f(&*db, created);
    let closed = db
        .close()
        .map_err(|e| Fail::Err(format!("closing {name}: {e}")));
    match (result, closed) {
        (result, Ok(())) => result,
        (Ok(()), closed) => closed,
        // Both failed: report both; a failed close makes it an error (status 2).
        (Err(Fail::No(m) | Fail::Err(m)), closed) => {
            eprintln!("kura: {m}");
            closed
        }
        (Err(Fail::BrokenPipe), closed) => closed,
    }
}

/// For a name of a Tokyo or Kyoto Cabinet file, which Kura does not open: how to move its
/// records into a Kura database (the README's "Migrating" pipelines).
pub(crate) fn migrate_hint(name: &str) -> Option<String> {
    let path = name.split('#').next().unwrap_or(name);
    let (stem, ext) = path.rsplit_once('.')?;
    let ext = ext.to_ascii_lowercase();
    let (what, tool, kind) = match ext.as_str() {
        "tch" => ("a Tokyo Cabinet hash", "tchmgr list -pv -px", "kh"),
        "tcb" => ("a Tokyo Cabinet B+ tree", "tcbmgr list -pv -px", "kb"),
        "tcf" => (
            "a Tokyo Cabinet fixed-length database",
            "tcfmgr list -pv",
            "kf",
        ),
        "kch" => ("a Kyoto Cabinet hash", "kchashmgr list -pv -px", "kh"),
        "kct" => ("a Kyoto Cabinet B+ tree", "kctreemgr list -pv -px", "kb"),
        _ => return None,
    };
    let (format, dest, note) = if ext == "tcf" {
        (
            "raw",
            format!("'{stem}.kf#width=W'"),
            ", W the width `tcfmgr inform` shows; values holding newlines need the README's hex \
             pipeline",
        )
    } else {
        ("hex", format!("{stem}.{kind}"), "")
    };
    let dup = if ext == "tcb" { " --dup" } else { "" };
    Some(format!(
        "; {path} is {what}, which Kura does not open: move its records into a Kura database \
         with `{tool} {path} | kura db import --create{dup} --format {format} {dest}`{note} \
         (README: Migrating)"
    ))
}

/// `cannot VERB NAME: E`, unless the engine's message already names the database it could
/// not open or create (said once, not twice).
pub(crate) fn open_error(verb: &str, name: &str, e: &Error) -> String {
    let m = e.to_string();
    if m.starts_with("cannot create ") || m.starts_with("cannot open ") {
        m
    } else {
        format!("cannot {verb} {name}: {m}")
    }
}

/// A key for messages: escaped like the TSV output, so control bytes are visible.
pub(crate) fn show(key: &[u8]) -> String {
    String::from_utf8_lossy(&tsv::escape(key)).into_owned()
}

pub(crate) fn stdout_err(e: io::Error) -> Fail {
    if e.kind() == io::ErrorKind::BrokenPipe {
        Fail::BrokenPipe
    } else {
        Fail::Err(format!("writing to stdout: {e}"))
    }
}

pub(crate) fn print(bytes: &[u8]) -> Res {
    let mut out = io::stdout().lock();
    out.write_all(bytes).map_err(stdout_err)?;
    out.flush().map_err(stdout_err)
}

fn create(name: &str) -> Res {
    let (path, _) = engine::name::split_name(name)
        .map_err(|e| Fail::Err(format!("cannot open {name}: {e}")))?;
    if path.ends_with(".kh") {
        use engine::meta::{inspect, DirState};
        let state = inspect(
            &engine::io::OsVfs,
            Path::new(path),
            &engine::hash::stored::own_file,
        )
        .map_err(|e| Fail::Err(open_error("create", name, &e)))?;
        if matches!(state, DirState::Database(_) | DirState::Unmarked) {
            return Err(Fail::No(format!("{path} already exists")));
        }
    }
    let opened = engine::open_as(name, OpenMode::Create).map_err(|e| {
        Fail::Err(format!(
            "{}{}",
            open_error("create", name, &e),
            migrate_hint(name).unwrap_or_default()
        ))
    })?;
    let created = opened.created;
    opened
        .store
        .close()
        .map_err(|e| Fail::Err(format!("closing {name}: {e}")))?;
    if !created && path != "*" && path != "+" {
        // Made by another process between the look and the open.
        return Err(Fail::No(format!("{path} already exists")));
    }
    Ok(())
}

fn inform(db: &dyn Store) -> Res {
    // `type`: what Tokyo Tyrant calls the counterpart database (its `stat`), from the
    // registry.
    let mut s = format!(
        "kind: {}\nrecords: {}\nfile_size: {}\ntype: {}\n",
        db.kind().name(),
        db.count(),
        db.size(),
        db.kind().info().tt_type
    );
    let mut printed: Vec<String> = vec![
        "kind".into(),
        "records".into(),
        "file_size".into(),
        "type".into(),
    ];
    for (k, v) in db.describe() {
        if !printed.contains(&k) {
            s.push_str(&format!("{k}: {v}\n"));
            printed.push(k);
        }
    }
    for (k, v) in db.counters() {
        if !printed.iter().any(|p| p == k) {
            s.push_str(&format!("{k}: {v}\n"));
        }
    }
    for (name, params) in db.keyspaces() {
        let records = db.keyspace(&name, &params).map(|s| s.count())?;
        let params = if params.is_empty() {
            String::new()
        } else {
            format!(" {params}")
        };
        s.push_str(&format!("keyspace.{name}: {records} records{params}\n"));
    }
    print(s.as_bytes())
}

/// What `put` does with an existing key.
#[derive(Clone, Copy)]
enum PutHow {
    Over,
    Keep,
    Cat,
    Dup { front: bool },
}

fn put(db: &dyn Store, key: &[u8], value: &[u8], how: PutHow) -> Res {
    if let PutHow::Dup { front } = how {
        if !db.allows_dups() {
            return Err(Fail::Err(format!(
                "--dup and --dupback need a database that keeps duplicate keys (a B+ tree, \
                 PATH.kb), not a {}",
                db.kind().name()
            )));
        }
        db.put_dup(key, value, front)?;
        return Ok(());
    }
    let (keep, cat) = (matches!(how, PutHow::Keep), matches!(how, PutHow::Cat));
    if keep {
        match db.putkeep(key, value, 0, 0)? {
            Outcome::Stored(_) => Ok(()),
            Outcome::Exists => Err(Fail::No(format!(
                "key `{}` already exists (not overwritten because of --keep)",
                show(key)
            ))),
            other => Err(Fail::Err(format!(
                "unexpected outcome of putkeep: {other:?}"
            ))),
        }
    } else if cat {
        db.putcat(key, value)?;
        Ok(())
    } else {
        db.put(key, value)?;
        Ok(())
    }
}

fn get(db: &dyn Store, key: &[u8]) -> Res {
    match db.get(key)? {
        Some(rec) => print(&rec.value),
        None => Err(Fail::No(format!("no record for key `{}`", show(key)))),
    }
}

/// Every value of `key`, one TSV-escaped line each.
fn get_all(db: &dyn Store, key: &[u8]) -> Res {
    let values = db.get_all(key)?;
    if values.is_empty() {
        return Err(Fail::No(format!("no record for key `{}`", show(key))));
    }
    let mut out = Vec::new();
    for v in values {
        tsv::escape_into(&mut out, &v);
        out.push(b'\n');
    }
    print(&out)
}

/// Whether an ordered database keeps its keys in lexical (byte) order, so that the keys of a
/// prefix lie together: a B+ tree made with another comparator (`#cmp=dec`, …) says so in its
/// description, and a kind keyed by ids orders them as numbers.
pub(crate) fn lexical(db: &dyn Store) -> bool {
    !db.kind().info().caps.integer_keys
        && !db.describe().iter().any(|(k, v)| k == "cmp" && v != "lex")
}

/// Which records `list` shows.
struct Selection {
    prefix: Vec<u8>,
    /// Where the walk starts, inclusive (ordered kinds): the lower bound, or the upper one
    /// with `desc`.
    from: Option<Vec<u8>>,
    /// Where the walk ends, and whether that key is included (ordered kinds).
    to: Option<(Vec<u8>, bool)>,
    desc: bool,
    limit: usize,
}

fn list(db: &dyn Store, sel: &Selection, values: bool, name: &str) -> Res {
    let mut out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
    let mut line = Vec::new();
    let mut write = |key: &[u8], value: &[u8]| -> Res {
        line.clear();
        if values {
            tsv::write_line(&mut line, key, value);
        } else {
            tsv::escape_into(&mut line, key);
            line.push(b'\n');
        }
        out.write_all(&line).map_err(stdout_err)
    };
    let damaged = select(db, sel, &mut write)?;
    out.flush().map_err(stdout_err)?;
    damage_note(damaged + db.damage_found().len() as u64, name)
}

/// Show `emit` the records `sel` selects; the damaged records passed over.
fn select(
    db: &dyn Store,
    sel: &Selection,
    emit: &mut dyn FnMut(&[u8], &[u8]) -> Res,
) -> Result<u64, Fail> {
    use std::ops::Bound::{Excluded, Included, Unbounded};
    let mut n = 0;
    let mut failed = None;
    let prefix = sel.prefix.as_slice();
    if !db.kind().ordered() {
        if sel.from.is_some() || sel.to.is_some() || sel.desc {
            return Err(Fail::Err(format!(
                "--from, --to and --desc need an ordered database, not a {}",
                db.kind().name()
            )));
        }
        // In no order anyway: the kind's fastest way through every record.
        let damaged = db.for_each_record(&mut |key, value, _| {
            if n >= sel.limit {
                return Ok(false);
            }
            if key.starts_with(prefix) {
                if let Err(e) = emit(key, value) {
                    failed = Some(e);
                    return Ok(false);
                }
                n += 1;
            }
            Ok(true)
        })?;
        return failed.map_or(Ok(damaged), Err);
    }
    // Key order: from the prefix (or --from) up, or from --to down; keys outside the prefix
    // end the walk once it has passed the prefix's keys. In another order than the bytes'
    // (a B+ tree's `#cmp=dec`, …) a prefix's keys are not together: all are looked at.
    let together = prefix.is_empty() || lexical(db);
    let start = sel.from.as_deref().map(Included);
    let end = sel.to.as_ref().map(|(k, incl)| {
        if *incl {
            Included(k.as_slice())
        } else {
            Excluded(k.as_slice())
        }
    });
    let (lower, upper) = if sel.desc { (end, start) } else { (start, end) };
    let lower = match lower {
        Some(b) => b,
        None if together && !prefix.is_empty() => Included(prefix),
        None => Unbounded,
    };
    let range = KeyRange {
        from: lower,
        to: upper.unwrap_or(Unbounded),
        desc: sel.desc,
        max: usize::MAX,
    };
    if sel.limit == 0 {
        return Ok(0);
    }
    db.for_each_in_range(&range, &mut |key, value, _| {
        if !key.starts_with(prefix) {
            // Past the prefix's keys in the walk's direction: done; before them: on.
            return Ok(!together || (key < prefix) != sel.desc);
        }
        if let Err(e) = emit(key, value) {
            failed = Some(e);
            return Ok(false);
        }
        n += 1;
        Ok(n < sel.limit)
    })?;
    failed.map_or(Ok(0), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys `select` shows on a tree holding a0..a9, b0..b9.
    fn keys(
        prefix: &str,
        from: Option<&str>,
        to: Option<&str>,
        desc: bool,
        limit: usize,
    ) -> String {
        keys_to(prefix, from, to.map(|t| (t, false)), desc, limit)
    }

    /// `keys` with the end's inclusion given.
    fn keys_to(
        prefix: &str,
        from: Option<&str>,
        to: Option<(&str, bool)>,
        desc: bool,
        limit: usize,
    ) -> String {
        let db = engine::open("+").unwrap();
        for c in ["a", "b"] {
            for i in 0..10 {
                db.put(format!("{c}{i}").as_bytes(), b"v").unwrap();
            }
        }
        let sel = Selection {
            prefix: prefix.as_bytes().to_vec(),
            from: from.map(|f| f.as_bytes().to_vec()),
            to: to.map(|(t, incl)| (t.as_bytes().to_vec(), incl)),
            desc,
            limit,
        };
        let mut out = Vec::new();
        let r = select(&*db, &sel, &mut |k, _| {
            out.push(String::from_utf8_lossy(k).into_owned());
            Ok(())
        });
        assert!(r.is_ok());
        out.join(" ")
    }

    #[test]
    fn ranges_prefixes_directions_and_limits_on_a_tree() {
        let m = usize::MAX;
        assert_eq!(keys("", Some("a8"), Some("b2"), false, m), "a8 a9 b0 b1");
        // Descending: from --from down to --to (as `tcbmgr list -bk -j`).
        assert_eq!(keys("", Some("b1"), Some("a7"), true, m), "b1 b0 a9 a8");
        assert_eq!(keys("", Some("a8"), Some("b2"), true, m), "");
        assert_eq!(keys("", Some("a2"), None, true, m), "a2 a1 a0");
        assert_eq!(keys("", Some("a8"), None, false, 3), "a8 a9 b0");
        assert_eq!(keys("", None, Some("b7"), true, m), "b9 b8");
        // An inclusive end (--through), both ways.
        assert_eq!(
            keys_to("", Some("a8"), Some(("b1", true)), false, m),
            "a8 a9 b0 b1"
        );
        assert_eq!(
            keys_to("", Some("b1"), Some(("a9", true)), true, m),
            "b1 b0 a9"
        );
        assert_eq!(keys_to("", None, Some(("a1", true)), false, m), "a0 a1");
        assert_eq!(keys("", None, None, true, 2), "b9 b8");
        assert_eq!(keys("b", None, None, false, 3), "b0 b1 b2");
        assert_eq!(keys("a", None, None, true, 2), "a9 a8");
        assert_eq!(keys("a", Some("a7"), Some("b5"), false, m), "a7 a8 a9");
        assert_eq!(keys("b", Some("b1"), Some("a7"), true, m), "b1 b0");
        assert_eq!(keys("a", Some("b1"), None, true, 2), "a9 a8");
        assert_eq!(keys("", Some("b"), Some("a"), false, m), "");
        assert_eq!(keys("", None, None, false, 0), "");
    }

    #[test]
    fn ranges_need_an_ordered_kind() {
        let db = engine::open("*").unwrap();
        db.put(b"k", b"v").unwrap();
        for (from, desc) in [(Some(b"a".to_vec()), false), (None, true)] {
            let sel = Selection {
                prefix: Vec::new(),
                from,
                to: None,
                desc,
                limit: usize::MAX,
            };
            match select(&*db, &sel, &mut |_, _| Ok(())) {
                Err(Fail::Err(m)) => assert!(m.contains("ordered"), "{m}"),
                _ => panic!("an unordered kind took a range"),
            }
        }
    }
}
