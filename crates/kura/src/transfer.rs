//! Records in and out as lines: `kura db import` / `export` (and `kura remote import`).
//!
//! An import reads its whole input once and checks every line before it writes the first
//! record, so a malformed line never leaves an import half-done; input from stdin or a pipe is
//! kept in an unlinked temporary file meanwhile (in `$TMPDIR`) and read again from there. Only
//! a failure of the database itself (a full disk) can stop the writing part way; the message
//! then says which lines were stored and that running the same import again finishes it.

use crate::db::{stdout_err, Fail, Progress, Res};
use kura_engine::tsv::{Format, TsvError};
use kura_engine::{self as engine, BatchOp, Error, KeyRange, Store};
use std::collections::HashSet;
use std::fs::File;
use std::hash::BuildHasherDefault;
use std::io::{self, BufRead, BufReader, BufWriter, IsTerminal, Seek, Write};
use std::path::{Path, PathBuf};

/// The `--format` of import and export.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LineFormat {
    /// Backslash escapes (\\ \t \n \r \xHH): any bytes, readable text.
    #[default]
    Escaped,
    /// The bytes as they are, what `tchmgr list -pv` / `kchashmgr list -pv` write and
    /// `tchmgr importtsv` / `kchashmgr import` read: no tab or newline in keys, no newline in
    /// values.
    Raw,
    /// Hex byte pairs separated by spaces, what `list -pv -px` of both tools writes and
    /// `kchashmgr import -sx` reads: any bytes.
    Hex,
}

impl LineFormat {
    pub fn engine(self) -> Format {
        match self {
            LineFormat::Escaped => Format::Escaped,
            LineFormat::Raw => Format::Raw,
            LineFormat::Hex => Format::Hex,
        }
    }
}

/// Where an import reads from.
pub(crate) struct Input {
    pub(crate) reader: Box<dyn BufRead>,
    pub(crate) label: String,
    pub(crate) size: Option<u64>,
    /// A regular file that can be read again.
    path: Option<PathBuf>,
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
                    path: size.is_some().then(|| p.to_path_buf()),
                }
            }
            None => Input {
                reader: Box::new(BufReader::with_capacity(1 << 16, io::stdin())),
                label: "<stdin>".into(),
                size: None,
                path: None,
            },
        })
    }
}

/// Reads the records of an import, one line each (the LF removed); empty lines are skipped
/// (a CR alone too, except in the raw format, where a CR is data).
pub(crate) struct LineReader {
    input: Input,
    format: Format,
    line: Vec<u8>,
    /// The number of the last line read (from 1).
    pub(crate) lineno: u64,
    /// Bytes read so far (for the progress percentage).
    pub(crate) read: u64,
    /// Every line read is copied here (the spool of `checked`).
    copy: Option<BufWriter<File>>,
    /// The lines are records of a table: a raw line's value is column names and values
    /// separated by tabs (`tctmgr list -pv`), made the record's `NAME\0VALUE…` form; every
    /// value must be one.
    table: bool,
}

impl LineReader {
    pub(crate) fn new(input: Input, format: LineFormat) -> LineReader {
        LineReader {
            input,
            format: format.engine(),
            line: Vec::new(),
            lineno: 0,
            read: 0,
            copy: None,
            table: false,
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
        let (mut key, mut value) = (Vec::new(), Vec::new());
        Ok(self
            .next_into(&mut key, &mut value)?
            .map(|r| r.map(|()| (key, value))))
    }

    /// [`LineReader::next`] into buffers the caller keeps (see [`Format::parse_line_into`]):
    /// what a loop over many lines uses, allocating nothing per line.
    pub(crate) fn next_into(
        &mut self,
        key: &mut Vec<u8>,
        value: &mut Vec<u8>,
    ) -> Result<Option<Result<(), String>>, Fail> {
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
            if let Some(c) = &mut self.copy {
                c.write_all(&self.line).map_err(spool_err)?;
            }
            self.lineno += 1;
            self.read += n as u64;
            let body = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
            if body.is_empty() || (body == b"\r" && self.format != Format::Raw) {
                continue;
            }
            if self.table && self.format == Format::Raw && !body.contains(&b'\t') {
                // `tctmgr list -pv` prints a record without columns as its key alone.
                key.clear();
                key.extend_from_slice(body);
                value.clear();
                return Ok(Some(
                    engine::store::check_sizes(key, 0).map_err(|e| e.to_string()),
                ));
            }
            return Ok(Some(
                self.format
                    .parse_line_into(body, key, value)
                    .map_err(|e: TsvError| e.to_string())
                    .and_then(|()| {
                        if self.table {
                            table_value(self.format, value)?;
                        }
                        engine::store::check_sizes(key, value.len()).map_err(|e| e.to_string())
                    }),
            ));
        }
    }
}

/// A table's record read from a line: a raw line's tabs between columns become the NUL bytes
/// of its `NAME\0VALUE…` form; the value must then be one.
fn table_value(format: Format, value: &mut [u8]) -> Result<(), String> {
    if format == Format::Raw {
        for b in value.iter_mut().filter(|b| **b == b'\t') {
            *b = 0;
        }
    }
    engine::table::Columns::from_wire(value)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn spool_err(e: io::Error) -> Fail {
    Fail::Err(format!(
        "cannot keep a copy of the input in {} while it is checked: {e} (give the input as a \
         file instead)",
        std::env::temp_dir().display()
    ))
}

/// An input whose every line was checked: read it again with `reader`.
pub(crate) struct Checked {
    input: Input,
    format: LineFormat,
    table: bool,
    /// Records (lines holding one).
    pub(crate) records: u64,
    /// The size of the longest value and its line (the first such; (0, 0) when none).
    pub(crate) longest: (u64, u64),
}

impl Checked {
    pub(crate) fn label(&self) -> &str {
        &self.input.label
    }

    pub(crate) fn reader(self) -> LineReader {
        let mut rd = LineReader::new(self.input, self.format);
        rd.table = self.table;
        rd
    }
}

/// An unlinked file in the temporary directory (gone when closed).
fn anonymous_file() -> io::Result<File> {
    let dir = std::env::temp_dir();
    for attempt in 0..100u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = dir.join(format!(
            ".kura-import-{}-{nanos}-{attempt}",
            std::process::id()
        ));
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(f) => {
                std::fs::remove_file(&path)?;
                return Ok(f);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free temporary name",
    ))
}

/// Read all of `input`, checking every line (against the rules of `db`, the database it is
/// for, when given: [`Store::check_put`]); nothing is written to any database. Input that
/// cannot be read twice (stdin, a pipe) is copied to an unlinked temporary file on the way.
pub(crate) fn checked(
    input: Input,
    format: LineFormat,
    db: Option<&dyn Store>,
) -> Result<Checked, Fail> {
    checked_as(input, format, db, db.is_some_and(|d| d.table().is_some()))
}

/// [`checked`], the lines being records of a table when `table` (a raw line: the key, then
/// column names and values, tab-separated, as `tctmgr list -pv` writes them), read as the
/// record's `NAME\0VALUE…` form.
pub(crate) fn checked_as(
    input: Input,
    format: LineFormat,
    db: Option<&dyn Store>,
    table: bool,
) -> Result<Checked, Fail> {
    let label = input.label.clone();
    let size = input.size;
    let path = input.path.clone();
    let mut rd = LineReader::new(input, format);
    rd.table = table;
    if path.is_none() {
        rd.copy = Some(BufWriter::with_capacity(
            1 << 16,
            anonymous_file().map_err(spool_err)?,
        ));
    }
    let mut records = 0u64;
    let mut longest = (0u64, 0u64);
    let mut progress = Progress::new("checked", true);
    let (mut k, mut v) = (Vec::new(), Vec::new());
    while let Some(parsed) = rd.next_into(&mut k, &mut v)? {
        let parsed = match (parsed, db) {
            (Ok(()), Some(db)) => db
                .check_put(&k, v.len())
                .map(|()| v.len())
                .map_err(|e| e.to_string()),
            (p, _) => p.map(|()| v.len()),
        };
        let len = match parsed {
            Ok(len) => len as u64,
            Err(msg) => {
                progress.finish(records, rd.read, size);
                return Err(Fail::Err(format!(
                    "{label}: line {}: {msg}; nothing was imported (every line is checked before \
                 the first record is written)",
                    rd.lineno
                )));
            }
        };
        if len > longest.0 {
            longest = (len, rd.lineno);
        }
        records += 1;
        if records & 1023 == 0 {
            progress.tick(records, rd.read, size);
        }
    }
    progress.finish(records, rd.read, size);
    let input = match (path, rd.copy.take()) {
        (Some(p), _) => Input::open(Some(&p))?,
        (None, Some(copy)) => {
            let mut f = copy.into_inner().map_err(|e| spool_err(e.into_error()))?;
            f.rewind().map_err(spool_err)?;
            Input {
                reader: Box::new(BufReader::with_capacity(1 << 16, f)),
                label,
                size: Some(rd.read),
                path: None,
            }
        }
        (None, None) => unreachable!("an input without a path is copied"),
    };
    Ok(Checked {
        input,
        format,
        table,
        records,
        longest,
    })
}

/// Records per `write_batch` of `import`.
const BATCH_RECORDS: usize = 4096;
/// Bytes of keys and values after which an `import` batch is written early.
const BATCH_BYTES: usize = 16 << 20;

/// A batch of puts for `import`: never holds the same key twice, so the outcome does not depend
/// on how a kind orders operations within one batch.
struct Batch {
    ops: Vec<BatchOp>,
    /// A hash of each key in `ops` (`key_hash`): a key seen again ends the batch. Two keys of
    /// one hash end it too, early and harmlessly.
    keys: HashSet<u64, BuildHasherDefault<Prehashed>>,
    bytes: usize,
    /// The line of its first record.
    first_line: u64,
    /// The buffers of written records, filled again by the next lines.
    spare: Vec<Vec<u8>>,
}

impl Batch {
    fn flush(&mut self, db: &dyn Store) -> Result<u64, Error> {
        if self.ops.is_empty() {
            return Ok(0);
        }
        db.write_batch(&self.ops)?;
        let n = self.ops.len() as u64;
        for op in self.ops.drain(..) {
            if let BatchOp::Put { key, value, .. } = op {
                self.spare.push(key);
                self.spare.push(value);
            }
        }
        self.keys.clear();
        self.bytes = 0;
        Ok(n)
    }

    fn buffer(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_default()
    }
}

/// A 64-bit hash of a key for [`Batch::keys`] (any spread hash does; no attacker chooses which
/// of their own lines share a batch).
fn key_hash(key: &[u8]) -> u64 {
    const M: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = (key.len() as u64).wrapping_mul(M);
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().unwrap_or_default());
        h = (h ^ w).wrapping_mul(M).rotate_left(29);
    }
    let mut last = [0u8; 8];
    last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    h = (h ^ u64::from_le_bytes(last)).wrapping_mul(M);
    h ^ (h >> 32)
}

/// The hasher of a set of values that are hashes already.
#[derive(Default)]
struct Prehashed(u64);

impl std::hash::Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Store every record of a checked input, in batches (each atomic); with `dup`, each line as
/// one more value of its key (`put_dup`, one by one, in the input's order). Returns how many
/// records were stored.
pub(crate) fn import(db: &dyn Store, input: Checked, dup: bool) -> Result<u64, Fail> {
    if dup {
        return import_dups(db, input);
    }
    let total = input.records;
    let mut rd = input.reader();
    let label = rd.label().to_string();
    let mut progress = Progress::new("imported", true);
    let mut batch = Batch {
        ops: Vec::with_capacity(BATCH_RECORDS),
        keys: HashSet::with_capacity_and_hasher(BATCH_RECORDS, Default::default()),
        bytes: 0,
        first_line: 1,
        spare: Vec::with_capacity(2 * BATCH_RECORDS),
    };
    let mut imported = 0u64;
    // What a failure part way says: exactly what is stored, and how to finish.
    let stopped = |imported: u64, first_line: u64, why: String| {
        Fail::Err(format!(
            "{label}: {why}; the records of the lines before line {first_line} ({imported} of \
             {total}) are stored, none from there on. Running the same import again finishes \
             it (records already stored are written again with the same values)"
        ))
    };
    loop {
        let (mut key, mut value) = (batch.buffer(), batch.buffer());
        let parsed = rd.next_into(&mut key, &mut value)?;
        let lineno = rd.lineno;
        match parsed {
            None => break,
            Some(Ok(())) => {}
            Some(Err(msg)) => {
                // Only when the file changed after it was checked.
                imported += batch
                    .flush(db)
                    .map_err(|e| stopped(imported, batch.first_line, format!("writing: {e}")))?;
                return Err(stopped(
                    imported,
                    lineno,
                    format!("line {lineno} changed after it was checked: {msg}"),
                ));
            }
        }
        let h = key_hash(&key);
        if batch.keys.contains(&h) {
            imported += batch
                .flush(db)
                .map_err(|e| stopped(imported, batch.first_line, format!("writing: {e}")))?;
        }
        if batch.ops.is_empty() {
            batch.first_line = lineno;
        }
        batch.bytes += key.len() + value.len();
        batch.keys.insert(h);
        batch.ops.push(BatchOp::Put {
            key,
            value,
            flags: 0,
            expires: 0,
        });
        if batch.ops.len() >= BATCH_RECORDS || batch.bytes >= BATCH_BYTES {
            imported += batch
                .flush(db)
                .map_err(|e| stopped(imported, batch.first_line, format!("writing: {e}")))?;
            progress.tick(imported, rd.read, rd.size());
        }
    }
    imported += batch
        .flush(db)
        .map_err(|e| stopped(imported, batch.first_line, format!("writing: {e}")))?;
    progress.finish(imported, rd.read, rd.size());
    Ok(imported)
}

/// `import --dup`: every line one more value of its key. Running it again would add every
/// value again, so a failure part way says where to go on from.
fn import_dups(db: &dyn Store, input: Checked) -> Result<u64, Fail> {
    let total = input.records;
    let mut rd = input.reader();
    let label = rd.label().to_string();
    let mut progress = Progress::new("imported", true);
    let mut imported = 0u64;
    while let Some(parsed) = rd.next()? {
        let lineno = rd.lineno;
        let stopped = |why: String| {
            Fail::Err(format!(
                "{label}: {why}; the records of the lines before line {lineno} ({imported} of \
                 {total}) are stored, none from there on. Running the same import again would \
                 add them twice: import the lines from {lineno} on"
            ))
        };
        let (key, value) = match parsed {
            Ok(kv) => kv,
            Err(msg) => {
                return Err(stopped(format!(
                    "line {lineno} changed after it was checked: {msg}"
                )))
            }
        };
        db.put_dup(&key, &value, false)
            .map_err(|e| stopped(format!("writing: {e}")))?;
        imported += 1;
        if imported & 1023 == 0 {
            progress.tick(imported, rd.read, rd.size());
        }
    }
    progress.finish(imported, rd.read, rd.size());
    Ok(imported)
}

/// Bytes gathered before each write of `export`.
const OUT_CHUNK: usize = 1 << 20;

/// Write every record to FILE (through a temporary file renamed over it at the end, so a
/// failed export leaves no partial FILE and the old one intact) or stdout.
pub(crate) fn export(db: &dyn Store, file: Option<&Path>, format: LineFormat, name: &str) -> Res {
    let format = format.engine();
    let tmp = file.map(|p| {
        let mut name = p.as_os_str().to_owned();
        name.push(".kura-tmp");
        PathBuf::from(name)
    });
    let label = file.map_or("stdout".to_string(), |p| p.display().to_string());
    let mut out: File = match &tmp {
        Some(t) => {
            File::create(t).map_err(|e| Fail::Err(format!("cannot create {}: {e}", t.display())))?
        }
        None => {
            use std::os::fd::AsFd;
            // Straight to the descriptor: the records are gathered in chunks here already.
            io::stdout()
                .as_fd()
                .try_clone_to_owned()
                .map(File::from)
                .map_err(|e| Fail::Err(format!("writing to stdout: {e}")))?
        }
    };
    let to_stdout = file.is_none();
    let out_err = |e: io::Error| {
        if to_stdout {
            stdout_err(e)
        } else {
            Fail::Err(format!("writing {label}: {e}"))
        }
    };
    let result = (|| {
        // No progress line when the records themselves go to the terminal.
        let mut progress = Progress::new("exported", !(to_stdout && io::stdout().is_terminal()));
        let total = db.count();
        let mut buf = Vec::with_capacity(OUT_CHUNK + (64 << 10));
        let mut n = 0u64;
        let mut failed: Option<Fail> = None;
        let mut each = |key: &[u8], value: &[u8], _: kura_engine::Meta| {
            if let Err(e) = format.write_line(&mut buf, key, value) {
                failed = Some(Fail::Err(format!(
                    "record `{}`: {e}; the export stops there ({n} records written{})",
                    crate::db::show(key),
                    if to_stdout { "" } else { ", none kept" }
                )));
                return Ok(false);
            }
            n += 1;
            if buf.len() >= OUT_CHUNK {
                if let Err(e) = out.write_all(&buf) {
                    failed = Some(out_err(e));
                    return Ok(false);
                }
                buf.clear();
                progress.tick(n, n, Some(total));
            }
            Ok(true)
        };
        // In key order where the kind has one (as `tcbmgr list` writes a B+ tree), else in
        // the kind's fastest order.
        let damaged = if db.kind().ordered() {
            let all = KeyRange {
                from: std::ops::Bound::Unbounded,
                to: std::ops::Bound::Unbounded,
                desc: false,
                max: usize::MAX,
            };
            db.for_each_in_range(&all, &mut each)?;
            0
        } else {
            db.for_each_record(&mut each)?
        };
        if let Some(f) = failed {
            return Err(f);
        }
        out.write_all(&buf).map_err(out_err)?;
        progress.finish(n, n, Some(total));
        Ok(damaged)
    })();
    // Records passed over as damaged leave the export complete otherwise: it is kept, and the
    // command ends with a note and status 1.
    let damaged = *result.as_ref().unwrap_or(&0);
    let result = result.map(|_| ());
    let done = match (result, file, tmp) {
        (Ok(()), Some(p), Some(t)) => {
            // Durable, like the database, then in place.
            out.sync_all().map_err(out_err)?;
            std::fs::rename(&t, p).map_err(|e| {
                let _ = std::fs::remove_file(&t);
                Fail::Err(format!("renaming {} to {}: {e}", t.display(), p.display()))
            })?;
            let dir = p
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| Fail::Err(format!("syncing {}: {e}", dir.display())))
        }
        (Err(e), _, Some(t)) => {
            let _ = std::fs::remove_file(&t);
            Err(e)
        }
        (r, _, _) => r,
    };
    done?;
    crate::db::damage_note(damaged + db.damage_found().len() as u64, name)
}
