//! `kura remote …`: manage a running server over the Tokyo Tyrant binary protocol, the
//! successor of Tyrant's `tcrmgr` (it works against a real Tokyo Tyrant server too).
//!
//! Exit status, as for `kura db`: `0` success; `1` a negative answer (the key is absent, the
//! key exists for `put --keep`, the server refused the operation); `2` an error (cannot
//! connect, bad usage, a malformed reply, a malformed import line).

use crate::db::{print, show, stdout_err, Fail, Progress, Res};
use crate::transfer::{self, Checked, Input, LineFormat};
use clap::Subcommand;
use kura_engine::tsv;
use kura_proto::tt_bin::{decode_reply, encode_request, DecodedReply, Reply, Request};
use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args)]
#[command(
    after_help = "Exit status: 0 on success, 1 when the key is absent / already exists \
                        or the server refused the operation, 2 on errors (connection, usage, \
                        malformed reply or input)."
)]
pub struct RemoteArgs {
    /// Server address.
    #[arg(long, default_value = "127.0.0.1", global = true)]
    host: String,
    /// Server port.
    #[arg(long, default_value_t = 1978, global = true)]
    port: u16,
    /// Give up on a reply after this many seconds.
    #[arg(long, default_value_t = 60, global = true)]
    timeout: u64,
    #[command(subcommand)]
    cmd: RemoteCommand,
}

#[derive(Subcommand)]
pub enum RemoteCommand {
    /// Print the record count and size, then the server's `stat` fields.
    Inform,
    /// Store a record (replacing any existing value unless an option says otherwise).
    Put {
        key: OsString,
        value: OsString,
        /// Do not overwrite: status 1 when the key exists (Tyrant putkeep).
        #[arg(long, conflicts_with_all = ["cat", "shl", "nr"])]
        keep: bool,
        /// Append to the existing value (Tyrant putcat).
        #[arg(long, conflicts_with_all = ["shl", "nr"])]
        cat: bool,
        /// Append, then keep only the last WIDTH bytes (Tyrant putshl).
        #[arg(long, value_name = "WIDTH")]
        shl: Option<u32>,
        /// Do not wait for a reply (Tyrant putnr).
        #[arg(long)]
        nr: bool,
    },
    /// Remove a record (status 1 when it is absent).
    Out { key: OsString },
    /// Write the value of KEY to stdout as raw bytes (status 1 when absent).
    Get { key: OsString },
    /// Print `KEY<TAB>VALUE` (TSV-escaped) for every KEY that exists.
    Mget {
        #[arg(required = true)]
        keys: Vec<OsString>,
    },
    /// List keys, one per line, TSV-escaped (a key with several values once per value).
    List {
        /// Only keys starting with these bytes (Tyrant fwmkeys).
        #[arg(long)]
        prefix: Option<OsString>,
        /// At most this many lines.
        #[arg(long)]
        limit: Option<usize>,
        /// Print `KEY<TAB>VALUE` lines (the `import` format), each record with its own value
        /// (misc iternext / getlist).
        #[arg(long)]
        values: bool,
    },
    /// Call the function NAME(KEY, VALUE) of the server's --ext script (Tyrant ext, as
    /// `tcrmgr ext`) and print its result; a failure prints the server's reason (a Lua
    /// error with its line, a nil result, no such function).
    Ext {
        name: OsString,
        #[arg(default_value = "")]
        key: OsString,
        #[arg(default_value = "")]
        value: OsString,
        /// Run the function under a lock: `record` (no other writer of KEY meanwhile) or
        /// `global` (no other writer at all).
        #[arg(long, value_enum)]
        lock: Option<ExtLock>,
        /// The same as --lock record.
        #[arg(long, hide = true)]
        record_lock: bool,
        /// The same as --lock global.
        #[arg(long, hide = true)]
        global_lock: bool,
    },
    /// Reload the server's scripts (--ext, --scr) from their files, as SIGHUP does; a script
    /// that cannot be read or does not compile keeps the old ones, and the command fails
    /// with the reason.
    Reload,
    /// Make every acknowledged write durable on the server.
    Sync,
    /// Compact the server's database, optionally retuning it (e.g. `bnum=1000000`).
    Optimize {
        #[arg(default_value = "")]
        params: String,
    },
    /// Remove every record.
    Vanish,
    /// Hot-copy the server's database to PATH in the server's --backup-dir (relative to it),
    /// or with `@NAME` to a fresh copy DIR/NAME-<µs>.<ext> and run the executable DIR/NAME on
    /// it. Status 1 when the server refuses (no --backup-dir, a path leading out of it, an
    /// existing destination) or the command fails, with the server's reason (its `misc
    /// error`; from a server that does not keep one, what the failure may mean).
    Copy { path: PathBuf },
    /// Query a table server, as `tcrmgr search` (Tyrant's `misc search`; the arguments of
    /// `kura db search`).
    Search {
        #[command(flatten)]
        search: crate::query::SearchArgs,
        /// Do not write the update log (Tyrant's RDBMONOULOG).
        #[arg(long)]
        no_ulog: bool,
    },
    /// Call a `misc` function (putlist, outlist, getlist, getpart, iterinit, iternext, sync,
    /// optimize, vanish, error, cacheclear, regex, range, …, and Kura's ulogstat and
    /// ulogforget SID); prints the result list, one TSV-escaped element per line.
    Misc {
        func: String,
        args: Vec<OsString>,
        /// Do not write the update log (Tyrant's RDBMONOULOG).
        #[arg(long)]
        no_ulog: bool,
    },
    /// Store every `KEY<TAB>VALUE` line of FILE (or stdin), in batches; a progress bar on a
    /// terminal. Every line is checked before the first record is sent (see
    /// `kura db import`: the same formats; a table server, `stat` type `table`, reads a raw
    /// line as `tctmgr list -pv` writes it).
    Import {
        file: Option<PathBuf>,
        /// The line format.
        #[arg(long, value_enum, default_value_t)]
        format: LineFormat,
    },
    /// Print the server's version.
    Version,
    /// Make the server follow the master HOST:PORT (Tyrant setmst): it refuses client writes
    /// from then on (unless it runs with --replica-writes) and bootstraps from the new master
    /// when that is another server. With --none (or an empty HOST) it stops following: a
    /// promoted replica, taking writes.
    Setmst {
        #[arg(value_name = "HOST:PORT", required_unless_present = "none")]
        master: Option<String>,
        /// Stop following any master.
        #[arg(long, conflicts_with = "master")]
        none: bool,
        /// Let a bootstrap from the new master replace the records the server holds (without
        /// it, a server that holds records refuses a master whose snapshot would replace them).
        #[arg(long, conflicts_with = "none")]
        force: bool,
    },
    /// List the replicas a master knows (server id, confirmed position, lag, connected or
    /// when last seen, address), and the server's own master, position and delay when it is
    /// a replica (from `stat`).
    Replicas,
    /// Make a master forget replica SID, so that its confirmed position no longer holds back
    /// the removal of update log files (Kura's `misc ulogforget`). Status 1 when the server
    /// has no update log or knows no such replica.
    Forget { sid: u32 },
}

/// One connection to a Tyrant-protocol server: send a request, read its reply.
struct Remote {
    sock: TcpStream,
    out: Vec<u8>,
    buf: Vec<u8>,
}

impl Remote {
    fn connect(a: &RemoteArgs) -> Result<Remote, Fail> {
        let addr = format!("{}:{}", a.host, a.port);
        let sock = TcpStream::connect(&addr)
            .map_err(|e| Fail::Err(format!("cannot connect to {addr}: {e}")))?;
        let _ = sock.set_nodelay(true);
        let t = Some(Duration::from_secs(a.timeout.max(1)));
        let _ = sock.set_read_timeout(t);
        let _ = sock.set_write_timeout(t);
        Ok(Remote {
            sock,
            out: Vec::new(),
            buf: Vec::new(),
        })
    }

    fn call(&mut self, req: &Request<'_>) -> Result<Reply, Fail> {
        self.out.clear();
        encode_request(req, &mut self.out);
        self.sock.write_all(&self.out).map_err(net_err)?;
        if matches!(req, Request::PutNr { .. }) {
            return Ok(Reply::None);
        }
        let c = req.cmd();
        loop {
            match decode_reply(c, &self.buf).map_err(|e| Fail::Err(e.to_string()))? {
                DecodedReply::Complete { reply, consumed } => {
                    self.buf.drain(..consumed);
                    return Ok(reply);
                }
                DecodedReply::Incomplete => {
                    let mut chunk = [0u8; 64 << 10];
                    let n = self.sock.read(&mut chunk).map_err(net_err)?;
                    if n == 0 {
                        return Err(Fail::Err("the server closed the connection".into()));
                    }
                    self.buf.extend_from_slice(&chunk[..n]);
                }
            }
        }
    }

    /// A request whose success is a bare code 0; anything else is `fail`.
    fn ok(&mut self, req: &Request<'_>, fail: impl FnOnce(u8) -> Fail) -> Res {
        match self.call(req)? {
            Reply::Code(0) | Reply::None => Ok(()),
            Reply::Code(c) => Err(fail(c)),
            other => Err(unexpected(req, &other)),
        }
    }
}

fn net_err(e: io::Error) -> Fail {
    Fail::Err(format!("talking to the server: {e}"))
}

fn unexpected(req: &Request<'_>, r: &Reply) -> Fail {
    Fail::Err(format!("unexpected reply to {}: {r:?}", req.name()))
}

fn refused(what: &str) -> impl FnOnce(u8) -> Fail + '_ {
    move |c| Fail::No(format!("{what} failed (the server answered code {c})"))
}

/// Run one `kura remote` command; returns the exit status.
pub fn run(a: RemoteArgs) -> ExitCode {
    match dispatch(&a) {
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

fn dispatch(a: &RemoteArgs) -> Res {
    let mut r = Remote::connect(a)?;
    let b = |s: &OsString| s.as_bytes().to_vec();
    match &a.cmd {
        RemoteCommand::Inform => inform(&mut r),
        RemoteCommand::Put {
            key,
            value,
            keep,
            cat,
            shl,
            nr,
        } => {
            let (key, value) = (b(key), b(value));
            let (key, value) = (key.as_slice(), value.as_slice());
            let req = if *keep {
                Request::PutKeep { key, value }
            } else if *cat {
                Request::PutCat { key, value }
            } else if let Some(w) = shl {
                let width =
                    i32::try_from(*w).map_err(|_| Fail::Err(format!("--shl {w}: too large")))?;
                Request::PutShl { key, value, width }
            } else if *nr {
                Request::PutNr { key, value }
            } else {
                Request::Put { key, value }
            };
            let what = if *keep {
                format!("{}: the key already exists", show(key))
            } else {
                format!("put {}", show(key))
            };
            // putnr has no reply to refuse with: an oversized value is stopped here.
            let over = |r: &mut Remote| {
                over_limit(r, value.len()).map(|m| Fail::No(format!("put {}: {m}", show(key))))
            };
            if *nr {
                if let Some(f) = over(&mut r) {
                    return Err(f);
                }
            }
            let done = r.ok(&req, |c| {
                if *keep {
                    Fail::No(what)
                } else {
                    Fail::No(format!("{what} failed (code {c})"))
                }
            });
            if let Err(Fail::No(m)) = done {
                if let Some(f) = over(&mut r) {
                    return Err(f);
                }
                return explained(&mut r, &format!("put {}", show(key)), Err(Fail::No(m)));
            }
            done?;
            if *nr {
                // putnr has no reply: a round trip tells that it was read and executed.
                count(&mut r, Request::Rnum)?;
            }
            Ok(())
        }
        RemoteCommand::Out { key } => {
            let key = b(key);
            let res = r.ok(&Request::Out { key: &key }, |_| {
                Fail::No(format!("{}: no such record", show(&key)))
            });
            explained(&mut r, &format!("out {}", show(&key)), res)
        }
        RemoteCommand::Get { key } => {
            let key = b(key);
            let req = Request::Get { key: &key };
            match r.call(&req)? {
                Reply::Value(v) => print(&v),
                Reply::Code(_) => Err(Fail::No(format!("{}: no such record", show(&key)))),
                other => Err(unexpected(&req, &other)),
            }
        }
        RemoteCommand::Mget { keys } => {
            let keys: Vec<Vec<u8>> = keys.iter().map(b).collect();
            let req = Request::Mget {
                keys: keys.iter().map(Vec::as_slice).collect(),
            };
            match r.call(&req)? {
                Reply::Pairs(pairs) => {
                    let mut out = Vec::new();
                    for (k, v) in &pairs {
                        tsv::write_line(&mut out, k, v);
                    }
                    print(&out)
                }
                Reply::Code(c) => Err(refused("mget")(c)),
                other => Err(unexpected(&req, &other)),
            }
        }
        RemoteCommand::List {
            prefix,
            limit,
            values,
        } => list(&mut r, prefix.as_ref().map(b), *limit, *values),
        RemoteCommand::Ext {
            name,
            key,
            value,
            lock,
            record_lock,
            global_lock,
        } => {
            let (name, key, value) = (b(name), b(key), b(value));
            let record = *record_lock || *lock == Some(ExtLock::Record);
            let global = *global_lock || *lock == Some(ExtLock::Global);
            let opts = u32::from(record) | (u32::from(global) << 1);
            let req = Request::Ext {
                name: &name,
                opts,
                key: &key,
                value: &value,
            };
            match r.call(&req)? {
                Reply::Value(v) => print(&v),
                Reply::Code(c) => Err(match server_reason(&mut r) {
                    Some(why) => Fail::No(why),
                    None => refused("ext")(c),
                }),
                other => Err(unexpected(&req, &other)),
            }
        }
        RemoteCommand::Reload => {
            let req = Request::Misc {
                name: kura_server::tt_exec::RELOAD_SCRIPTS,
                opts: 0,
                args: Vec::new(),
            };
            match r.call(&req)? {
                Reply::List(_) => {
                    println!("scripts reloaded");
                    Ok(())
                }
                Reply::Code(c) => Err(match server_reason(&mut r) {
                    Some(why) => Fail::No(why),
                    None => refused("reload")(c),
                }),
                other => Err(unexpected(&req, &other)),
            }
        }
        RemoteCommand::Sync => r.ok(&Request::Sync, refused("sync")),
        RemoteCommand::Optimize { params } => r.ok(
            &Request::Optimize {
                params: params.as_bytes(),
            },
            refused("optimize"),
        ),
        RemoteCommand::Vanish => {
            let res = r.ok(&Request::Vanish, refused("vanish"));
            explained(&mut r, "vanish", res)
        }
        RemoteCommand::Copy { path } => {
            let req = Request::Copy {
                path: path.as_os_str().as_bytes(),
            };
            match r.call(&req)? {
                Reply::Code(0) => Ok(()),
                Reply::Code(c) => Err(copy_failed(&mut r, path, c)),
                other => Err(unexpected(&req, &other)),
            }
        }
        RemoteCommand::Misc {
            func,
            args,
            no_ulog,
        } => {
            let args: Vec<Vec<u8>> = args.iter().map(b).collect();
            let req = Request::Misc {
                name: func.as_bytes(),
                opts: u32::from(*no_ulog),
                args: args.iter().map(Vec::as_slice).collect(),
            };
            match r.call(&req)? {
                Reply::List(items) => {
                    let mut out = Vec::new();
                    for it in &items {
                        tsv::escape_into(&mut out, it);
                        out.push(b'\n');
                    }
                    print(&out)
                }
                Reply::Code(c) => {
                    let res = Err(refused(&format!("misc {func}"))(c));
                    explained(&mut r, &format!("misc {func}"), res)
                }
                other => Err(unexpected(&req, &other)),
            }
        }
        RemoteCommand::Search { search, no_ulog } => {
            let cmds = search.commands()?;
            let name = if search.ms.is_some() {
                "metasearch"
            } else {
                "search"
            };
            let req = Request::Misc {
                name: name.as_bytes(),
                opts: u32::from(*no_ulog),
                args: cmds.iter().map(Vec::as_slice).collect(),
            };
            match r.call(&req)? {
                Reply::List(items) => crate::query::print_reply(&items),
                Reply::Code(c) => {
                    let res = match server_reason(&mut r) {
                        Some(m) => Err(Fail::No(format!("{name} failed: {m}"))),
                        None => Err(refused(&format!("misc {name}"))(c)),
                    };
                    explained(&mut r, &format!("misc {name}"), res)
                }
                other => Err(unexpected(&req, &other)),
            }
        }
        RemoteCommand::Import { file, format } => {
            // A table server's lines are records of columns (`stat` says `type table`).
            let table = stat_field(&mut r, "type").as_deref() == Some("table");
            let input = transfer::checked_as(Input::open(file.as_deref())?, *format, None, table)?;
            let res = import(&mut r, input);
            explained(&mut r, "import", res)
        }
        RemoteCommand::Setmst {
            master,
            none,
            force,
        } => setmst(&mut r, master.as_deref(), *none, *force),
        RemoteCommand::Replicas => replicas(&mut r),
        RemoteCommand::Forget { sid } => forget(&mut r, *sid),
        RemoteCommand::Version => {
            let stat = stat(&mut r)?;
            let v = stat
                .iter()
                .find(|(k, _)| k == "version")
                .map_or("unknown", |(_, v)| v.as_str());
            print(format!("{v}\n").as_bytes())
        }
    }
}

/// The server's reason for this connection's last failure (its `misc error`, without the
/// `9999: ` code), when it keeps one.
fn server_reason(r: &mut Remote) -> Option<String> {
    let req = Request::Misc {
        name: b"error",
        opts: 0,
        args: Vec::new(),
    };
    match r.call(&req) {
        Ok(Reply::List(items)) => items
            .first()
            .map(|m| String::from_utf8_lossy(m).into_owned())
            .filter(|m| !m.starts_with("0:"))
            .map(|m| {
                m.split_once(": ")
                    .map_or(m.clone(), |(_, rest)| rest.to_string())
            }),
        _ => None,
    }
}

/// A lock of `kura remote ext --lock`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExtLock {
    Record,
    Global,
}

/// A refused or failed `copy`: the server's reason (its `misc error`, which Kura answers
/// with the reason of the connection's last failed copy), or what the failure may mean.
fn copy_failed(r: &mut Remote, path: &std::path::Path, c: u8) -> Fail {
    let p = path.display();
    let what = if path.as_os_str().as_bytes().starts_with(b"@") {
        format!("copy {p}")
    } else {
        format!("copy to {p}")
    };
    Fail::No(match server_reason(r) {
        // `9999: refused: …` → `refused: …`
        Some(m) => format!("{what} {m}"),
        None if path.as_os_str().as_bytes().starts_with(b"@") => format!(
            "{what} failed (the server answered code {c}): the command was refused or \
             failed; the server's log says why"
        ),
        None => format!(
            "{what} failed (the server answered code {c}): the server needs --backup-dir, and \
             the path must stay inside it and not exist yet; the server's log says why"
        ),
    })
}

/// A field of the server's `stat`, if it has it.
fn stat_field(r: &mut Remote, name: &str) -> Option<String> {
    stat(r)
        .ok()?
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

/// `res` of a write, with the server's reason when it refused it as a read-only replica
/// (Tyrant's replies carry no text: `stat` says it as `read_only`).
fn explained(r: &mut Remote, what: &str, res: Res) -> Res {
    match res {
        Err(Fail::No(m)) => Err(Fail::No(match stat_field(r, "read_only") {
            Some(why) => format!("{what} refused: {why}"),
            None => m,
        })),
        other => other,
    }
}

fn stat(r: &mut Remote) -> Result<Vec<(String, String)>, Fail> {
    match r.call(&Request::Stat)? {
        Reply::Stat(text) => Ok(text
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()),
        Reply::Code(c) => Err(refused("stat")(c)),
        other => Err(unexpected(&Request::Stat, &other)),
    }
}

/// The server's `--max-value-size`, from its `stat` (`None` from a server that does not
/// report one, such as ttserver).
fn max_value_size(r: &mut Remote) -> Option<u64> {
    let stat = stat(r).ok()?;
    let (_, max) = stat.iter().find(|(k, _)| k == "max_value_size")?;
    max.parse().ok()
}

/// Why a value of `len` bytes is refused, when it is over the server's `--max-value-size`.
fn over_limit(r: &mut Remote, len: usize) -> Option<String> {
    let max = max_value_size(r)?;
    (len as u64 > max)
        .then(|| format!("value of {len} bytes over the server's --max-value-size {max}"))
}

fn count(r: &mut Remote, req: Request<'_>) -> Result<u64, Fail> {
    match r.call(&req)? {
        Reply::U64(n) => Ok(n),
        Reply::Code(c) => Err(refused(req.name())(c)),
        other => Err(unexpected(&req, &other)),
    }
}

fn inform(r: &mut Remote) -> Res {
    let records = count(r, Request::Rnum)?;
    let size = count(r, Request::Size)?;
    let mut out = format!("records: {records}\nsize: {size}\n");
    for (k, v) in stat(r)?.iter().filter(|(k, _)| k != "rnum" && k != "size") {
        out.push_str(&format!("{k}: {v}\n"));
    }
    print(out.as_bytes())
}

/// Keys per `misc getlist` of `list --prefix --values`.
const GETLIST_KEYS: usize = 500;

/// `list`: keys (or records) in the server's iteration order. Values travel with their
/// records (`misc iternext`, `misc getlist`), never by a `get` of each key: on a database with
/// duplicate keys a `get` answers the first value, and every record shows its own.
fn list(r: &mut Remote, prefix: Option<Vec<u8>>, limit: Option<usize>, values: bool) -> Res {
    let limit = limit.unwrap_or(usize::MAX);
    let mut out = io::BufWriter::new(io::stdout().lock());
    // Lines written (a Cell: the loops below read it while `emit` is alive).
    let n = std::cell::Cell::new(0usize);
    let mut line = Vec::new();
    let mut emit = |key: &[u8], value: Option<&[u8]>| -> Res {
        line.clear();
        match value {
            Some(v) => tsv::write_line(&mut line, key, v),
            None => {
                tsv::escape_into(&mut line, key);
                line.push(b'\n');
            }
        }
        n.set(n.get() + 1);
        out.write_all(&line).map_err(stdout_err)
    };
    if limit == 0 {
        return Ok(());
    }
    if let Some(prefix) = prefix {
        let max = i32::try_from(limit).unwrap_or(-1);
        let req = Request::Fwmkeys {
            prefix: &prefix,
            max,
        };
        let keys = match r.call(&req)? {
            Reply::List(keys) => keys,
            Reply::Code(c) => return Err(refused("fwmkeys")(c)),
            other => return Err(unexpected(&req, &other)),
        };
        let keys = &keys[..keys.len().min(limit)];
        if !values {
            for k in keys {
                emit(k, None)?;
            }
        } else {
            // Each key's records with their values: every value of a key with duplicates.
            'chunks: for chunk in keys.chunks(GETLIST_KEYS) {
                let req = Request::Misc {
                    name: b"getlist",
                    opts: 0,
                    args: chunk.iter().map(Vec::as_slice).collect(),
                };
                let items = match r.call(&req)? {
                    Reply::List(items) => items,
                    Reply::Code(c) => return Err(refused("misc getlist")(c)),
                    other => return Err(unexpected(&req, &other)),
                };
                for pair in items.chunks_exact(2) {
                    if n.get() >= limit {
                        break 'chunks;
                    }
                    emit(&pair[0], Some(&pair[1]))?;
                }
            }
        }
    } else if values {
        // misc iternext answers the record at the iterator: key and its own value.
        let init = Request::Misc {
            name: b"iterinit",
            opts: 0,
            args: Vec::new(),
        };
        match r.call(&init)? {
            Reply::List(_) => {}
            Reply::Code(c) => return Err(refused("misc iterinit")(c)),
            other => return Err(unexpected(&init, &other)),
        }
        let next = Request::Misc {
            name: b"iternext",
            opts: 0,
            args: Vec::new(),
        };
        while n.get() < limit {
            match r.call(&next)? {
                Reply::List(kv) if kv.len() == 2 => emit(&kv[0], Some(&kv[1]))?,
                Reply::Code(_) => break, // the end
                other => return Err(unexpected(&next, &other)),
            }
        }
    } else {
        r.ok(&Request::IterInit, refused("iterinit"))?;
        while n.get() < limit {
            match r.call(&Request::IterNext)? {
                Reply::Value(k) => emit(&k, None)?,
                Reply::Code(_) => break, // the end
                other => return Err(unexpected(&Request::IterNext, &other)),
            }
        }
    }
    out.flush().map_err(stdout_err)
}

/// Records per `misc putlist` of `import`.
const BATCH_RECORDS: usize = 1000;
/// Bytes after which an `import` batch is sent early.
const BATCH_BYTES: usize = 8 << 20;

fn import(r: &mut Remote, input: Checked) -> Res {
    if let Some(max) = max_value_size(r) {
        let (len, line) = input.longest;
        if len > max {
            return Err(Fail::Err(format!(
                "{}: line {line}: value of {len} bytes over the server's --max-value-size \
                 {max}; nothing was imported",
                input.label()
            )));
        }
    }
    let mut rd = input.reader();
    let label = rd.label().to_string();
    let mut progress = Progress::new("imported", true);
    let mut batch: Vec<Vec<u8>> = Vec::new();
    let mut bytes = 0usize;
    let mut imported = 0u64;
    let send = |r: &mut Remote, batch: &mut Vec<Vec<u8>>| -> Result<u64, Fail> {
        if batch.is_empty() {
            return Ok(0);
        }
        let req = Request::Misc {
            name: b"putlist",
            opts: 0,
            args: batch.iter().map(Vec::as_slice).collect(),
        };
        match r.call(&req)? {
            Reply::List(_) => {}
            Reply::Code(c) => return Err(refused("misc putlist")(c)),
            other => return Err(unexpected(&req, &other)),
        }
        let n = batch.len() as u64 / 2;
        batch.clear();
        Ok(n)
    };
    while let Some(parsed) = rd.next()? {
        let (key, value) = match parsed {
            Ok(kv) => kv,
            Err(e) => {
                imported += send(r, &mut batch)?;
                progress.finish(imported, rd.read, rd.size());
                return Err(Fail::Err(format!(
                    "{label}: line {} changed after it was checked: {e}; stopped there \
                     ({imported} records before it were imported)",
                    rd.lineno
                )));
            }
        };
        bytes += key.len() + value.len();
        batch.push(key);
        batch.push(value);
        if batch.len() >= 2 * BATCH_RECORDS || bytes >= BATCH_BYTES {
            imported += send(r, &mut batch)?;
            bytes = 0;
            progress.tick(imported, rd.read, rd.size());
        }
    }
    imported += send(r, &mut batch)?;
    progress.finish(imported, rd.read, rd.size());
    Ok(())
}

/// `setmst`: follow `master` (`HOST:PORT`), or none (`--none`, an empty host).
fn setmst(r: &mut Remote, master: Option<&str>, none: bool, force: bool) -> Res {
    let (host, port) = match master.filter(|m| !none && !m.is_empty()) {
        None => (String::new(), 0),
        Some(m) => {
            let (h, p) = m
                .rsplit_once(':')
                .ok_or_else(|| Fail::Err(format!("{m}: expected HOST:PORT")))?;
            let port: u16 = p
                .parse()
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| Fail::Err(format!("{m}: bad port")))?;
            let h = h.trim_matches(|c| c == '[' || c == ']');
            if h.is_empty() {
                return Err(Fail::Err(format!("{m}: no host")));
            }
            (h.to_string(), port)
        }
    };
    let req = Request::SetMst {
        host: host.as_bytes(),
        port: i32::from(port),
        ts: 0,
        opts: if force {
            kura_proto::tt_bin::SETMST_REPLACE
        } else {
            0
        },
    };
    let res = r.ok(&req, |c| {
        Fail::No(format!(
            "setmst failed (the server answered code {c}): masked (--mask setmst), or a server \
             that cannot replicate"
        ))
    });
    if let Err(Fail::No(m)) = res {
        return Err(Fail::No(match stat_field(r, "setmst_refused") {
            Some(why) => format!("setmst refused: {why}"),
            None => m,
        }));
    }
    res?;
    let text = if host.is_empty() {
        "following no master: the server takes writes\n".to_string()
    } else {
        format!("following {host}:{port}\n")
    };
    print(text.as_bytes())
}

/// The `key=value` fields of a `replica_N` line of `stat`.
fn fields(line: &str) -> Vec<(&str, &str)> {
    line.split_whitespace()
        .filter_map(|f| f.split_once('='))
        .collect()
}

/// `replicas`: the replicas of a master and the master of a replica, from `stat`.
fn replicas(r: &mut Remote) -> Res {
    let stat = stat(r)?;
    let get = |k: &str| stat.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let mut out = String::new();
    let sid = get("sid").unwrap_or("?");
    match get("ulog_last_ts") {
        None => out.push_str(&format!(
            "server {sid}: no update log (--ulog): it feeds no replicas\n"
        )),
        Some(last) => {
            out.push_str(&format!("server {sid}: update log up to {last}\n"));
            let mut reps: Vec<(u32, &str)> = stat
                .iter()
                .filter_map(|(k, v)| Some((k.strip_prefix("replica_")?.parse().ok()?, v.as_str())))
                .collect();
            reps.sort_unstable_by_key(|(sid, _)| *sid);
            if reps.is_empty() {
                out.push_str("no replicas known\n");
            }
            let now = kura_engine::store::now_secs();
            for (rsid, line) in reps {
                let f = fields(line);
                let field = |k: &str| f.iter().find(|(n, _)| *n == k).map_or("", |(_, v)| *v);
                let state = if field("connected") == "true" {
                    "connected".to_string()
                } else {
                    match field("seen").parse::<u64>() {
                        Ok(t) if t > 0 => {
                            format!("not connected, last seen {} s ago", now.saturating_sub(t))
                        }
                        _ => "not connected".to_string(),
                    }
                };
                let addr = field("addr");
                out.push_str(&format!(
                    "replica {rsid}: confirmed {}, lag {} s, {state}{}{addr}\n",
                    field("confirmed"),
                    field("lag"),
                    if addr.is_empty() { "" } else { ", " },
                ));
            }
        }
    }
    if let (Some(h), Some(p)) = (get("mhost"), get("mport")) {
        let mut line = format!("master {h}:{p}");
        if let Some(s) = get("master_sid").filter(|s| *s != "0") {
            line.push_str(&format!(" (server {s})"));
        }
        if let Some(ts) = get("rts") {
            line.push_str(&format!(": position {ts}"));
        }
        if let Some(d) = get("delay") {
            line.push_str(&format!(", delay {d} s"));
        }
        match get("master_connected") {
            Some("true") => line.push_str(", connected"),
            Some(_) => line.push_str(", not connected"),
            None => {}
        }
        if let Some(e) = get("repl_error") {
            line.push_str(&format!(" (last error: {e})"));
        }
        out.push_str(&line);
        out.push('\n');
    }
    print(out.as_bytes())
}

/// `forget SID`: Kura's `misc ulogforget SID` on a master.
fn forget(r: &mut Remote, sid: u32) -> Res {
    let arg = sid.to_string();
    let req = Request::Misc {
        name: b"ulogforget",
        opts: 0,
        args: vec![arg.as_bytes()],
    };
    match r.call(&req)? {
        Reply::List(items) => {
            let was = items
                .first()
                .map(|l| String::from_utf8_lossy(l).into_owned())
                .unwrap_or_default();
            let mut text = format!("replica {sid} forgotten (it was: {was})\n");
            if fields(&was).contains(&("connected", "true")) {
                text.push_str(
                    "it is connected: it will be known again at its next acknowledgement; stop \
                     it (or point it elsewhere with setmst) first\n",
                );
            }
            print(text.as_bytes())
        }
        Reply::Code(c) => {
            // Say why, from what `stat` shows.
            let why = match stat(r) {
                Ok(st) if !st.iter().any(|(k, _)| k == "ulog_last_ts") => {
                    "the server has no update log (--ulog)".to_string()
                }
                Ok(st) if !st.iter().any(|(k, _)| *k == format!("replica_{sid}")) => {
                    format!("the server knows no replica {sid}")
                }
                _ => format!("the server answered code {c} (masked, or not a Kura server)"),
            };
            Err(Fail::No(format!("forget {sid} failed: {why}")))
        }
        other => Err(unexpected(&req, &other)),
    }
}
