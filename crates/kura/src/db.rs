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

use clap::Subcommand;
use kura_engine::{self as engine, tsv, BatchOp, Error, Outcome, Store};
use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, IsTerminal, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const NAME_HELP: &str = "Database name: PATH.kh (on-disk hash), `*` (memory hash) or `+` \
                         (memory tree), optionally followed by #param=value tuning, e.g. \
                         `casket.kh#sync=always`";

const AFTER_HELP: &str = "Exit status: 0 on success, 1 when the key is absent / already exists or \
                          the database is unhealthy, 2 on errors (usage, open, I/O).\n\
                          Keys and values are taken as raw bytes; put `--` before a key that \
                          starts with `-`.";

#[derive(Subcommand)]
#[command(after_help = AFTER_HELP)]
pub enum DbCommand {
    /// Create a new database (fails with status 1 when the file already exists).
    Create {
        #[arg(help = NAME_HELP)]
        name: String,
    },
    /// Print the kind, record count, size, parameters and counters of a database.
    Inform {
        #[arg(help = NAME_HELP)]
        name: String,
    },
    /// Store a record (replacing any existing value unless --keep or --cat is given).
    Put {
        #[arg(help = NAME_HELP)]
        name: String,
        key: OsString,
        value: OsString,
        /// Do not overwrite: fail with status 1 when the key already exists.
        #[arg(long, conflicts_with = "cat")]
        keep: bool,
        /// Append VALUE to the existing value (creating the record when absent).
        #[arg(long)]
        cat: bool,
    },
    /// Write the value of KEY to stdout, as raw bytes without an added newline.
    Get {
        #[arg(help = NAME_HELP)]
        name: String,
        key: OsString,
    },
    /// Remove a record (status 1 when it is absent).
    Out {
        #[arg(help = NAME_HELP)]
        name: String,
        key: OsString,
    },
    /// List keys, one per line, TSV-escaped (in key order for ordered kinds only).
    List {
        #[arg(help = NAME_HELP)]
        name: String,
        /// Only keys starting with these bytes.
        #[arg(long)]
        prefix: Option<OsString>,
        /// At most this many records.
        #[arg(long)]
        limit: Option<usize>,
        /// Print `KEY<TAB>VALUE` lines (the `export` format) instead of keys only.
        #[arg(long)]
        values: bool,
    },
    /// Store every `KEY<TAB>VALUE` line of FILE (or stdin), in batches.
    ///
    /// The format is the one `export` writes: backslash escapes \\ \t \n \r \xHH; a trailing CR
    /// (CRLF files) is ignored; empty lines are skipped. Import is not all-or-nothing: on a
    /// malformed line it stops with status 2, naming the line, and every record before that line
    /// stays imported. Only keys and values are carried (no flags or expiration times).
    Import {
        #[arg(help = NAME_HELP)]
        name: String,
        /// Read from this file instead of stdin.
        file: Option<PathBuf>,
    },
    /// Write every record as a `KEY<TAB>VALUE` line to FILE (or stdout); see `import`.
    Export {
        #[arg(help = NAME_HELP)]
        name: String,
        /// Write to this file (created or truncated) instead of stdout.
        file: Option<PathBuf>,
    },
    /// Compact / rebuild the database, optionally retuning it (e.g. `bnum=1000000#compress=zstd`).
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
    /// Remove every record.
    Vanish {
        #[arg(help = NAME_HELP)]
        name: String,
    },
    /// Write a consistent copy of the database to DEST (which must not exist yet).
    Copy {
        #[arg(help = NAME_HELP)]
        name: String,
        dest: PathBuf,
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

fn dispatch(cmd: DbCommand) -> Res {
    match cmd {
        DbCommand::Create { name } => create(&name),
        DbCommand::Inform { name } => with_db_ro(&name, inform),
        DbCommand::Put {
            name,
            key,
            value,
            keep,
            cat,
        } => with_db(&name, |db| {
            put(db, key.as_bytes(), value.as_bytes(), keep, cat)
        }),
        DbCommand::Get { name, key } => with_db_ro(&name, |db| get(db, key.as_bytes())),
        DbCommand::Out { name, key } => with_db(&name, |db| {
            if db.out(key.as_bytes())? {
                Ok(())
            } else {
                Err(Fail::No(format!(
                    "no record for key `{}`",
                    show(key.as_bytes())
                )))
            }
        }),
        DbCommand::List {
            name,
            prefix,
            limit,
            values,
        } => with_db_ro(&name, |db| {
            let prefix = prefix.as_ref().map(|p| p.as_bytes()).unwrap_or_default();
            list(db, prefix, limit.unwrap_or(usize::MAX), values)
        }),
        DbCommand::Import { name, file } => {
            // Open the input first, so a missing file does not create an empty database.
            let input = Input::open(file.as_deref())?;
            with_db(&name, |db| import(db, input))
        }
        DbCommand::Export { name, file } => with_db_ro(&name, |db| export(db, file.as_deref())),
        DbCommand::Optimize { name, params } => {
            with_db(
                &name,
                |db| Ok(db.optimize(params.as_deref().unwrap_or(""))?),
            )
        }
        DbCommand::Check { name } => with_db_ro(&name, |db| check(db, &name)),
        DbCommand::Vanish { name } => with_db(&name, |db| Ok(db.vanish()?)),
        DbCommand::Copy { name, dest } => {
            if dest.exists() {
                return Err(Fail::No(format!(
                    "{} already exists; remove it first or choose another destination",
                    dest.display()
                )));
            }
            with_db(&name, |db| Ok(db.copy_to(&dest)?))
        }
    }
}

/// Open `name` for writing, run `f`, and close the database whatever `f` returned.
fn with_db(name: &str, f: impl FnOnce(&dyn Store) -> Res) -> Res {
    with_db_mode(name, false, f)
}

/// Open an existing `name` read-only (nothing on disk changes, not even the repair of a torn
/// tail), run `f`, close.
fn with_db_ro(name: &str, f: impl FnOnce(&dyn Store) -> Res) -> Res {
    with_db_mode(name, true, f)
}

fn with_db_mode(name: &str, readonly: bool, f: impl FnOnce(&dyn Store) -> Res) -> Res {
    let opened = if readonly {
        engine::open_readonly(name)
    } else {
        engine::open(name)
    };
    let db = opened.map_err(|e| match e {
        // The engine's message already names the database and says what is wrong.
        Error::Locked { .. } => Fail::Err(e.to_string()),
        e => Fail::Err(format!("cannot open {name}: {e}")),
    })?;
    let result = f(&*db);
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
    if path != "*" && path != "+" && Path::new(path).exists() {
        return Err(Fail::No(format!("{path} already exists")));
    }
    with_db(name, |_| Ok(()))
}

fn inform(db: &dyn Store) -> Res {
    let mut s = format!(
        "kind: {}\nrecords: {}\nfile_size: {}\n",
        db.kind().name(),
        db.count(),
        db.size()
    );
    let mut printed: Vec<String> = vec!["kind".into(), "records".into(), "file_size".into()];
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
    print(s.as_bytes())
}

fn put(db: &dyn Store, key: &[u8], value: &[u8], keep: bool, cat: bool) -> Res {
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

fn list(db: &dyn Store, prefix: &[u8], limit: usize, values: bool) -> Res {
    let ordered = db.kind().ordered();
    let mut cur = db.cursor()?;
    if ordered && !prefix.is_empty() {
        cur.jump(prefix)?;
    }
    let mut out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
    let mut line = Vec::new();
    let mut n = 0;
    while n < limit {
        let Some((key, rec)) = cur.next()? else { break };
        if !key.starts_with(prefix) {
            if ordered {
                break;
            }
            continue;
        }
        line.clear();
        if values {
            tsv::write_line(&mut line, &key, &rec.value);
        } else {
            tsv::escape_into(&mut line, &key);
            line.push(b'\n');
        }
        out.write_all(&line).map_err(stdout_err)?;
        n += 1;
    }
    out.flush().map_err(stdout_err)
}

/// A progress counter on stderr, shown only when stderr is a terminal.
pub(crate) struct Progress {
    enabled: bool,
    shown: bool,
    verb: &'static str,
    last: Instant,
}

impl Progress {
    const EVERY: Duration = Duration::from_millis(200);

    pub(crate) fn new(verb: &'static str, enabled: bool) -> Progress {
        Progress {
            enabled: enabled && io::stderr().is_terminal(),
            shown: false,
            verb,
            last: Instant::now(),
        }
    }

    /// Show `count` (and a percentage when `of` is known), at most every [`Self::EVERY`].
    pub(crate) fn tick(&mut self, count: u64, done: u64, of: Option<u64>) {
        if self.enabled && self.last.elapsed() >= Self::EVERY {
            self.last = Instant::now();
            self.show(count, done, of);
        }
    }

    fn show(&mut self, count: u64, done: u64, of: Option<u64>) {
        let pct = match of {
            Some(total) if total > 0 => format!(" ({}%)", (done.min(total) * 100) / total),
            _ => String::new(),
        };
        eprint!("\rkura: {} {count} records{pct}", self.verb);
        self.shown = true;
    }

    /// Show the final count when a progress line was shown at all.
    pub(crate) fn finish(&mut self, count: u64, done: u64, of: Option<u64>) {
        if self.shown {
            self.show(count, done, of);
            eprintln!();
            self.shown = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // End the progress line so that an error message starts on a line of its own.
        if self.shown {
            eprintln!();
        }
    }
}

/// Where `import` reads from.
pub(crate) struct Input {
    pub(crate) reader: Box<dyn BufRead>,
    pub(crate) label: String,
    pub(crate) size: Option<u64>,
}

impl Input {
    pub(crate) fn open(file: Option<&Path>) -> Result<Input, Fail> {
        Ok(match file {
            Some(p) => {
                let f = File::open(p)
                    .map_err(|e| Fail::Err(format!("cannot read {}: {e}", p.display())))?;
                let size = f.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
                Input {
                    reader: Box::new(BufReader::with_capacity(1 << 16, f)),
                    label: p.display().to_string(),
                    size,
                }
            }
            None => Input {
                reader: Box::new(BufReader::with_capacity(1 << 16, io::stdin())),
                label: "<stdin>".into(),
                size: None,
            },
        })
    }
}

/// Records per `write_batch` of `import`.
const BATCH_RECORDS: usize = 1000;
/// Bytes of keys and values after which an `import` batch is written early.
const BATCH_BYTES: usize = 16 << 20;

/// A batch of puts for `import`: never holds the same key twice, so the outcome does not depend
/// on how a kind orders operations within one batch.
struct Batch {
    ops: Vec<BatchOp>,
    keys: HashSet<Vec<u8>>,
    bytes: usize,
}

impl Batch {
    fn flush(&mut self, db: &dyn Store) -> Result<u64, Error> {
        if self.ops.is_empty() {
            return Ok(0);
        }
        db.write_batch(&self.ops)?;
        let n = self.ops.len() as u64;
        self.ops.clear();
        self.keys.clear();
        self.bytes = 0;
        Ok(n)
    }
}

/// Reads the records of a TSV import: `KEY<TAB>VALUE` lines in the `export` format; a trailing
/// CR is ignored and empty lines are skipped.
pub(crate) struct TsvReader {
    input: Input,
    line: Vec<u8>,
    /// The number of the last line read (from 1).
    pub(crate) lineno: u64,
    /// Bytes read so far (for the progress percentage).
    pub(crate) read: u64,
}

impl TsvReader {
    pub(crate) fn new(input: Input) -> TsvReader {
        TsvReader {
            input,
            line: Vec::new(),
            lineno: 0,
            read: 0,
        }
    }

    pub(crate) fn label(&self) -> &str {
        &self.input.label
    }

    pub(crate) fn size(&self) -> Option<u64> {
        self.input.size
    }

    /// The next record; `Ok(None)` at the end of the input; `Ok(Some(Err(msg)))` for a
    /// malformed line (`lineno` names it); `Err` when the input cannot be read.
    #[allow(clippy::type_complexity)]
    pub(crate) fn next(&mut self) -> Result<Option<Result<(Vec<u8>, Vec<u8>), String>>, Fail> {
        loop {
            self.line.clear();
            let n = self
                .input
                .reader
                .read_until(b'\n', &mut self.line)
                .map_err(|e| Fail::Err(format!("reading {}: {e}", self.input.label)))?;
            if n == 0 {
                return Ok(None);
            }
            self.lineno += 1;
            self.read += n as u64;
            let body = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
            if body.is_empty() || body == b"\r" {
                continue;
            }
            return Ok(Some(
                tsv::parse_line(body)
                    .map_err(|e| e.to_string())
                    .and_then(|(k, v)| {
                        engine::store::check_sizes(&k, v.len()).map_err(|e| e.to_string())?;
                        Ok((k, v))
                    }),
            ));
        }
    }
}

fn import(db: &dyn Store, input: Input) -> Res {
    let mut rd = TsvReader::new(input);
    let label = rd.label().to_string();
    let mut progress = Progress::new("imported", true);
    let mut batch = Batch {
        ops: Vec::with_capacity(BATCH_RECORDS),
        keys: HashSet::with_capacity(BATCH_RECORDS),
        bytes: 0,
    };
    let mut imported = 0u64;
    let write_err = |imported: u64, lineno: u64, e: Error| {
        Fail::Err(format!(
            "{label}: writing the records before line {}: {e} ({imported} records were \
             imported before that batch)",
            lineno + 1
        ))
    };
    while let Some(parsed) = rd.next()? {
        let lineno = rd.lineno;
        let (key, value) = match parsed {
            Ok(kv) => kv,
            Err(msg) => {
                imported += batch
                    .flush(db)
                    .map_err(|e| write_err(imported, lineno - 1, e))?;
                progress.finish(imported, rd.read, rd.size());
                return Err(Fail::Err(format!(
                    "{label}: line {lineno}: {msg}; stopped there ({imported} records before it were \
                     imported)"
                )));
            }
        };
        if batch.keys.contains(&key) {
            imported += batch
                .flush(db)
                .map_err(|e| write_err(imported, lineno - 1, e))?;
        }
        batch.bytes += key.len() + value.len();
        batch.keys.insert(key.clone());
        batch.ops.push(BatchOp::Put {
            key,
            value,
            flags: 0,
            expires: 0,
        });
        if batch.ops.len() >= BATCH_RECORDS || batch.bytes >= BATCH_BYTES {
            imported += batch
                .flush(db)
                .map_err(|e| write_err(imported, lineno, e))?;
            progress.tick(imported, rd.read, rd.size());
        }
    }
    imported += batch
        .flush(db)
        .map_err(|e| write_err(imported, rd.lineno, e))?;
    progress.finish(imported, rd.read, rd.size());
    Ok(())
}

fn export(db: &dyn Store, file: Option<&Path>) -> Res {
    let (out, synced): (Box<dyn Write>, Option<File>) = match file {
        Some(p) => {
            let f = File::create(p)
                .map_err(|e| Fail::Err(format!("cannot create {}: {e}", p.display())))?;
            let handle = f
                .try_clone()
                .map_err(|e| Fail::Err(format!("cannot create {}: {e}", p.display())))?;
            (Box::new(f), Some(handle))
        }
        None => (Box::new(io::stdout().lock()), None),
    };
    let to_stdout = synced.is_none();
    let label = file.map_or("stdout".to_string(), |p| p.display().to_string());
    let out_err = |e: io::Error| {
        if to_stdout {
            stdout_err(e)
        } else {
            Fail::Err(format!("writing {label}: {e}"))
        }
    };
    // No progress line when the records themselves go to the terminal.
    let mut progress = Progress::new("exported", !(to_stdout && io::stdout().is_terminal()));
    let total = db.count();
    let mut out = BufWriter::with_capacity(1 << 16, out);
    let mut cur = db.cursor()?;
    let mut line = Vec::new();
    let mut n = 0u64;
    while let Some((key, rec)) = cur.next()? {
        line.clear();
        tsv::write_line(&mut line, &key, &rec.value);
        out.write_all(&line).map_err(out_err)?;
        n += 1;
        if n & 1023 == 0 {
            progress.tick(n, n, Some(total));
        }
    }
    out.flush().map_err(out_err)?;
    if let Some(f) = synced {
        // Make the export file itself durable, like the database.
        f.sync_all().map_err(out_err)?;
    }
    progress.finish(n, n, Some(total));
    Ok(())
}

fn check(db: &dyn Store, name: &str) -> Res {
    let report = match db.check() {
        Ok(r) => r,
        Err(Error::Corrupt(m)) => return Err(Fail::No(format!("{name} is unhealthy: {m}"))),
        Err(e) => return Err(e.into()),
    };
    let mut s = format!("records: {}\n", report.records);
    for p in &report.problems {
        s.push_str(&format!("problem: {p}\n"));
    }
    if report.healthy() {
        s.push_str("healthy\n");
        print(s.as_bytes())
    } else {
        let n = report.problems.len();
        s.push_str(&format!("unhealthy: {n} problem(s)\n"));
        print(s.as_bytes())?;
        Err(Fail::No(format!("{name} is unhealthy: {n} problem(s)")))
    }
}
