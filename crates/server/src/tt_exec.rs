//! Executes Tokyo Tyrant binary-protocol requests (`kura_proto::tt_bin`) on a [`Store`] and
//! writes Tyrant's replies, byte for byte as `ttserver` 1.1.41 answers them (see
//! docs/PROTOCOL-TYRANT.md for every place where Kura differs).
//!
//! Tyrant records carry no flags and no expiration: every write here stores flags 0 and
//! expiration 0 (putcat, putshl, addint and adddouble keep those of an existing record, which
//! only memcached can have set). Reads see only live records.
//!
//! Replies: 0 on success, 1 on every failure (absent record, existing record, refused command,
//! engine error). An engine error is never a panic and never closes the connection: the
//! command answers its failure form (see [`tt_bin::reply_failure`]).

use crate::context::{flush_if_due, Next, Shared};
use crate::mask::{Op, Proto, OPS};
use kura_engine::{BatchOp, Cursor, Decision, Error, Outcome, Record, Store, Value};
use kura_proto::tt_bin::{self, cmd, Request, FAIL, OK};
use std::path::PathBuf;

/// The Tyrant release whose protocol Kura speaks, reported by `stat`.
pub const TT_VERSION: &str = "1.1.41";
/// Tyrant's library version and protocol version of that release.
pub const TT_LIBVER: u32 = 324;
pub const TT_PROTVER: &str = "0.91";

/// Per-connection state: the record iterator of iterinit / iternext (and misc iterinit /
/// iternext, which share it, as in Tyrant). Tyrant has one iterator per server, shared by every
/// client; Kura keeps one per connection so that clients cannot disturb each other.
pub struct TtState<'s> {
    /// `None` before iterinit and after the iteration has ended.
    cursor: Option<Box<dyn Cursor + 's>>,
    /// A record already taken from `cursor` to be returned first (misc iterinit with a start
    /// key on an unordered kind, which has to read up to that key).
    pending: Option<(Vec<u8>, Record)>,
    /// The connection's file descriptor, reported by `stat` as Tyrant does; -1 when unknown.
    pub fd: i32,
}

impl Default for TtState<'_> {
    fn default() -> Self {
        TtState {
            cursor: None,
            pending: None,
            fd: -1,
        }
    }
}

impl<'s> TtState<'s> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Start a new iteration, at the first record or at `from` (the record of that key on an
    /// unordered kind, which must exist; the first key >= `from` on an ordered kind).
    fn iter_init(&mut self, store: &'s dyn Store, from: Option<&[u8]>) -> Result<bool, Error> {
        self.cursor = None;
        self.pending = None;
        let mut cur = store.cursor()?;
        if let Some(from) = from {
            if store.kind().ordered() {
                cur.jump(from)?;
            } else {
                loop {
                    match cur.next()? {
                        Some((k, r)) if k == from => {
                            self.pending = Some((k, r));
                            break;
                        }
                        Some(_) => {}
                        None => return Ok(false),
                    }
                }
            }
        }
        self.cursor = Some(cur);
        Ok(true)
    }

    /// The next record of the iteration; `None` at its end (and before any iterinit).
    fn iter_next(&mut self) -> Result<Option<(Vec<u8>, Record)>, Error> {
        if let Some(p) = self.pending.take() {
            return Ok(Some(p));
        }
        let Some(cur) = self.cursor.as_mut() else {
            return Ok(None);
        };
        match cur.next() {
            Ok(Some(rec)) => Ok(Some(rec)),
            Ok(None) => {
                self.cursor = None;
                Ok(None)
            }
            Err(e) => {
                self.cursor = None;
                Err(e)
            }
        }
    }
}

/// The mask operation of a request.
pub fn op_of(req: &Request<'_>) -> Op {
    match req {
        Request::Put { .. } => Op::Put,
        Request::PutKeep { .. } => Op::PutKeep,
        Request::PutCat { .. } => Op::PutCat,
        Request::PutShl { .. } => Op::PutShl,
        Request::PutNr { .. } => Op::PutNr,
        Request::Out { .. } => Op::Out,
        Request::Get { .. } => Op::Get,
        Request::Mget { .. } => Op::Mget,
        Request::Vsiz { .. } => Op::Vsiz,
        Request::IterInit => Op::IterInit,
        Request::IterNext => Op::IterNext,
        Request::Fwmkeys { .. } => Op::Fwmkeys,
        Request::AddInt { .. } => Op::AddInt,
        Request::AddDouble { .. } => Op::AddDouble,
        Request::Ext { .. } => Op::Ext,
        Request::Sync => Op::Sync,
        Request::Optimize { .. } => Op::Optimize,
        Request::Vanish => Op::Vanish,
        Request::Copy { .. } => Op::Copy,
        Request::Restore { .. } => Op::Restore,
        Request::SetMst { .. } => Op::SetMst,
        Request::Rnum => Op::Rnum,
        Request::Size => Op::Size,
        Request::Stat => Op::Stat,
        Request::Misc { .. } => Op::Misc,
        Request::Repl { .. } => Op::Repl,
    }
}

/// Indexes of `Shared::tt_misses`.
const PUT_MISS: usize = 0;
const OUT_MISS: usize = 1;
const GET_MISS: usize = 2;

/// Execute one request, appending its reply (if any) to `out`.
///
/// Returns [`Next::Close`] only for `repl`: Kura has no update log to stream, so it hangs up
/// without a reply, as `ttserver` does when it cannot replicate (the slave retries later).
pub fn execute<'s>(
    store: &'s dyn Store,
    shared: &Shared,
    st: &mut TtState<'s>,
    req: &Request<'_>,
    now: u64,
    out: &mut Vec<u8>,
) -> Next {
    let c = req.cmd();
    let op = op_of(req);
    // Counted as ttserver counts: every command received, refused ones too.
    shared.tt_counts[op as usize].add(1);
    if shared.mask.denies(op, Proto::Tyrant) {
        return refuse(c, out);
    }
    let start = out.len();
    // A delayed memcached `flush_all` whose time has come applies to every protocol.
    let done = flush_if_due(store, shared, now);
    match done.and_then(|_| run(store, shared, st, req, now, out)) {
        Ok(next) => next,
        Err(_) => {
            if matches!(
                op,
                Op::Put | Op::PutKeep | Op::PutCat | Op::PutShl | Op::PutNr
            ) {
                shared.tt_misses[PUT_MISS].add(1);
            }
            // Nothing half-written goes out: the failure form replaces it.
            out.truncate(start);
            tt_bin::reply_failure(out, c);
            Next::Continue
        }
    }
}

/// The reply of a command refused by the mask, as ttserver gives it: the failure code for
/// commands that have one; the empty result for mget and fwmkeys and zero for rnum and size
/// (which cannot fail in Tyrant); an empty status for stat; nothing for putnr; a hang-up for
/// repl. misc answers its failure form `[1][0:4]` (ttserver answers an empty success there,
/// which would make a refused write look done).
fn refuse(c: u8, out: &mut Vec<u8>) -> Next {
    match c {
        cmd::MGET => tt_bin::reply_pairs(out, []),
        cmd::FWMKEYS => tt_bin::reply_list(out, []),
        cmd::RNUM | cmd::SIZE => tt_bin::reply_u64(out, 0),
        cmd::STAT => tt_bin::reply_stat(out, b""),
        cmd::REPL => return Next::Close,
        _ => tt_bin::reply_failure(out, c),
    }
    Next::Continue
}

fn code(out: &mut Vec<u8>, ok: bool) {
    tt_bin::reply_code(out, if ok { OK } else { FAIL });
}

fn run<'s>(
    store: &'s dyn Store,
    shared: &Shared,
    st: &mut TtState<'s>,
    req: &Request<'_>,
    now: u64,
    out: &mut Vec<u8>,
) -> Result<Next, Error> {
    match *req {
        Request::Put { key, value } => {
            store.put_with(key, value, 0, 0)?;
            code(out, true);
        }
        Request::PutKeep { key, value } => {
            let stored = matches!(store.putkeep(key, value, 0, 0)?, Outcome::Stored(_));
            if !stored {
                shared.tt_misses[PUT_MISS].add(1);
            }
            code(out, stored);
        }
        Request::PutCat { key, value } => {
            store.putcat(key, value)?;
            code(out, true);
        }
        Request::PutShl { key, value, width } => {
            // The codec refuses negative widths.
            put_shl(store, key, value, usize::try_from(width).unwrap_or(0))?;
            code(out, true);
        }
        Request::PutNr { key, value } => {
            // No reply, whatever happens: an error is swallowed here rather than answered.
            if store.put_with(key, value, 0, 0).is_err() {
                shared.tt_misses[PUT_MISS].add(1);
            }
        }
        Request::Out { key } => {
            let found = store.out(key)?;
            if !found {
                shared.tt_misses[OUT_MISS].add(1);
            }
            code(out, found);
        }
        Request::Get { key } => {
            // Encoded straight from the store's memory: no copy of the value.
            if !store.view(key, &mut |value, _| tt_bin::reply_value(out, value))? {
                shared.tt_misses[GET_MISS].add(1);
                code(out, false);
            }
        }
        Request::Mget { ref keys } => {
            let recs = store.get_multi(keys)?;
            tt_bin::reply_pairs(
                out,
                keys.iter()
                    .zip(&recs)
                    .filter_map(|(k, r)| r.as_ref().map(|r| (*k, r.value.as_slice()))),
            );
        }
        Request::Vsiz { key } => match store.vsiz(key)? {
            Some(n) => tt_bin::reply_i32(out, i32::try_from(n).unwrap_or(i32::MAX)),
            None => code(out, false),
        },
        Request::IterInit => code(out, st.iter_init(store, None)?),
        Request::IterNext => match st.iter_next()? {
            Some((k, _)) => tt_bin::reply_value(out, &k),
            None => code(out, false),
        },
        Request::Fwmkeys { prefix, max } => {
            let max = usize::try_from(max).unwrap_or(usize::MAX);
            let keys = store.fwmkeys(prefix, max)?;
            tt_bin::reply_list(out, keys.iter().map(Vec::as_slice));
        }
        Request::AddInt { key, num } => match store.addint(key, num) {
            // Tyrant's sum is an int with INT_MIN meaning failure: a sum of exactly INT_MIN
            // is stored but answered as a failure.
            Ok(n) if n != i32::MIN => tt_bin::reply_i32(out, n),
            Ok(_) | Err(Error::NotNumeric) => code(out, false),
            Err(e) => return Err(e),
        },
        Request::AddDouble { key, integ, fract } => {
            match add_double(store, key, tt_bin::unpack_double(integ, fract))? {
                Some(sum) if !sum.is_nan() => tt_bin::reply_double(out, sum),
                _ => code(out, false),
            }
        }
        // No script language: Tyrant without `-ext` answers every ext call with failure.
        Request::Ext { .. } => code(out, false),
        Request::Sync => {
            store.sync()?;
            code(out, true);
        }
        Request::Optimize { params } => {
            let Ok(params) = std::str::from_utf8(c_str(params)) else {
                code(out, false);
                return Ok(Next::Continue);
            };
            store.optimize(params)?;
            code(out, true);
        }
        Request::Vanish => {
            store.vanish()?;
            code(out, true);
        }
        Request::Copy { path } => {
            // Tyrant runs a path starting with `@` as a shell command: refused here.
            let path = c_str(path);
            if path.is_empty() || path[0] == b'@' {
                code(out, false);
            } else {
                store.copy_to(&path_of(path))?;
                code(out, true);
            }
        }
        // No update log and no replication yet.
        Request::Restore { .. } | Request::SetMst { .. } => code(out, false),
        Request::Repl { .. } => return Ok(Next::Close),
        Request::Rnum => tt_bin::reply_u64(out, store.count()),
        Request::Size => tt_bin::reply_u64(out, store.size()),
        Request::Stat => tt_bin::reply_stat(out, stat_text(store, shared, st, now).as_bytes()),
        Request::Misc { name, ref args, .. } => match misc(store, st, name, args)? {
            Some(items) => tt_bin::reply_list(out, items.iter().map(Vec::as_slice)),
            None => tt_bin::reply_failure(out, cmd::MISC),
        },
    }
    Ok(Next::Continue)
}

/// Tyrant's putshl: on an existing record, append and keep the last `width` bytes; an absent
/// record is created with the whole value, not cut to `width` (Tyrant stores it through
/// `tcadbputproc`, whose shift function only runs on an existing record). The engine's
/// `putshl` cuts a new value too, hence this one.
fn put_shl(store: &dyn Store, key: &[u8], value: &[u8], width: usize) -> Result<(), Error> {
    kura_engine::store::check_sizes(key, value.len())?;
    store.accept(key, &mut |cur| match cur {
        None => Decision::Put {
            value: Value::Lent(value),
            flags: 0,
            expires: 0,
        },
        Some(c) => {
            let keep = (c.value.len() + value.len()).min(width);
            // The last `keep` bytes of old ++ new.
            let from_new = keep.min(value.len());
            let from_old = keep - from_new;
            let mut v = Vec::with_capacity(keep);
            v.extend_from_slice(&c.value[c.value.len() - from_old..]);
            v.extend_from_slice(&value[value.len() - from_new..]);
            Decision::Put {
                value: v.into(),
                flags: c.meta.flags,
                expires: c.meta.expires,
            }
        }
    })?;
    Ok(())
}

/// Tokyo Cabinet's adddouble: add to a record holding one native 8-byte double, creating it
/// when absent. `None` when the record exists with another size (left unchanged). Like
/// Tyrant, the sum is stored even when it is not finite (an infinity is answered, NaN is
/// answered as failure).
fn add_double(store: &dyn Store, key: &[u8], delta: f64) -> Result<Option<f64>, Error> {
    let mut result = None;
    store.accept(key, &mut |cur| {
        let (sum, flags, expires) = match cur {
            None => (delta, 0, 0),
            Some(c) => match <[u8; 8]>::try_from(c.value) {
                Ok(b) => (f64::from_le_bytes(b) + delta, c.meta.flags, c.meta.expires),
                Err(_) => return Decision::Keep,
            },
        };
        result = Some(sum);
        Decision::Put {
            value: Value::copied(&sum.to_le_bytes()),
            flags,
            expires,
        }
    })?;
    Ok(result)
}

/// A string argument as Tyrant's C code sees it: up to the first NUL byte.
fn c_str(b: &[u8]) -> &[u8] {
    b.iter().position(|&x| x == 0).map_or(b, |n| &b[..n])
}

#[cfg(unix)]
fn path_of(b: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(std::ffi::OsStr::from_bytes(b))
}

#[cfg(not(unix))]
fn path_of(b: &[u8]) -> PathBuf {
    PathBuf::from(String::from_utf8_lossy(b).into_owned())
}

/// Tokyo Cabinet's `tcatoi` on a misc argument: leading white space, an optional sign, decimal
/// digits up to the first other byte; saturates instead of overflowing.
fn atoi(b: &[u8]) -> i64 {
    let b = c_str(b);
    let mut i = b
        .iter()
        .position(|c| !matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c))
        .unwrap_or(b.len());
    let neg = match b.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let mut n: i64 = 0;
    for &d in b[i..].iter().take_while(|d| d.is_ascii_digit()) {
        n = n.saturating_mul(10).saturating_add(i64::from(d - b'0'));
    }
    if neg {
        -n
    } else {
        n
    }
}

/// A `max` argument of misc regex / range: below 1 means no limit.
fn max_arg(args: &[&[u8]], i: usize) -> usize {
    match args.get(i).map(|a| atoi(a)) {
        Some(n) if n >= 1 => usize::try_from(n).unwrap_or(usize::MAX),
        _ => usize::MAX,
    }
}

/// The misc functions of Tokyo Cabinet's abstract database (`tcadbmisc`) that apply to Kura's
/// kinds. `Ok(None)` is Tyrant's failure (unknown function, missing arguments, absent record,
/// a condition not met); `Ok(Some(list))` the result elements.
pub fn misc<'s>(
    store: &'s dyn Store,
    st: &mut TtState<'s>,
    name: &[u8],
    args: &[&[u8]],
) -> Result<Option<Vec<Vec<u8>>>, Error> {
    let done = Some(Vec::new());
    Ok(match name {
        b"put" | b"putkeep" | b"putcat" => {
            let [key, value, ..] = args else {
                return Ok(None);
            };
            match name {
                b"put" => {
                    store.put_with(key, value, 0, 0)?;
                    done
                }
                b"putkeep" => match store.putkeep(key, value, 0, 0)? {
                    Outcome::Stored(_) => done,
                    _ => None,
                },
                _ => {
                    store.putcat(key, value)?;
                    done
                }
            }
        }
        b"out" => match args.first() {
            Some(key) if store.out(key)? => done,
            _ => None,
        },
        b"get" => match args.first() {
            Some(key) => store.get(key)?.map(|r| vec![r.value]),
            None => None,
        },
        b"putlist" => {
            // Key, value pairs; an odd last argument is ignored. A key given twice keeps its
            // last value, as Tyrant's one-by-one puts do: only that pair goes into the batch
            // (the order of a batch's operations on one key is not defined).
            let pairs: Vec<&[&[u8]]> = args.chunks_exact(2).collect();
            let mut last = std::collections::HashMap::with_capacity(pairs.len());
            for (i, p) in pairs.iter().enumerate() {
                last.insert(p[0], i);
            }
            let ops: Vec<BatchOp> = pairs
                .iter()
                .enumerate()
                .filter(|(i, p)| last.get(p[0]) == Some(i))
                .map(|(_, p)| BatchOp::Put {
                    key: p[0].to_vec(),
                    value: p[1].to_vec(),
                    flags: 0,
                    expires: 0,
                })
                .collect();
            store.write_batch(&ops)?;
            done
        }
        b"outlist" => {
            for key in args {
                store.out(key)?;
            }
            done
        }
        b"getlist" => {
            let recs = store.get_multi(args)?;
            let mut items = Vec::new();
            for (k, r) in args.iter().zip(recs) {
                if let Some(r) = r {
                    items.push(k.to_vec());
                    items.push(r.value);
                }
            }
            Some(items)
        }
        b"getpart" => {
            // Key, offset (default 0), length (default: to the end).
            let Some(key) = args.first() else {
                return Ok(None);
            };
            let off = args.get(1).map_or(0, |a| atoi(a)).max(0);
            let len = args.get(2).map_or(-1, |a| atoi(a));
            let len = if len < 0 || len > i64::from(i32::MAX / 2) {
                i64::from(i32::MAX / 2)
            } else {
                len
            };
            match store.get(key)? {
                Some(r) if (off as u64) < r.value.len() as u64 => {
                    let off = off as usize;
                    let end = off.saturating_add(len as usize).min(r.value.len());
                    Some(vec![r.value[off..end].to_vec()])
                }
                _ => None,
            }
        }
        b"iterinit" => st
            .iter_init(store, args.first().copied())?
            .then_some(Vec::new()),
        b"iternext" => st.iter_next()?.map(|(k, r)| vec![k, r.value]),
        b"sync" => {
            store.sync()?;
            done
        }
        b"optimize" => {
            let params = args.first().map_or(&b""[..], |a| c_str(a));
            match std::str::from_utf8(params) {
                Ok(p) => {
                    store.optimize(p)?;
                    done
                }
                Err(_) => None,
            }
        }
        b"vanish" => {
            store.vanish()?;
            done
        }
        // Tokyo Cabinet's error code and message: Kura reports errors per request, so the last
        // error is always "success".
        b"error" => Some(vec![b"0: success".to_vec()]),
        // No separate cache to clear and no fragmentation to repair in place: accepted.
        b"cacheclear" | b"defrag" => done,
        b"regex" => {
            let Some(pattern) = args.first() else {
                return Ok(None);
            };
            let Some(re) = compile_regex(c_str(pattern)) else {
                return Ok(None);
            };
            let max = max_arg(args, 1);
            let mut items = Vec::new();
            let mut found = 0;
            let mut cur = store.cursor()?;
            while found < max {
                let Some((k, r)) = cur.next()? else { break };
                // regexec sees the key as a C string.
                if re.is_match(c_str(&k)) {
                    items.push(k);
                    items.push(r.value);
                    found += 1;
                }
            }
            Some(items)
        }
        b"range" => {
            // Start key (default: the first), max (< 1: no limit), end key (exclusive).
            if !store.kind().ordered() {
                return Ok(None);
            }
            let max = max_arg(args, 1);
            let end = args.get(2);
            let mut cur = store.cursor()?;
            if let Some(from) = args.first() {
                cur.jump(from)?;
            }
            let mut items = Vec::new();
            let mut found = 0;
            while found < max {
                let Some((k, r)) = cur.next()? else { break };
                if end.is_some_and(|e| k.as_slice() >= *e) {
                    break;
                }
                items.push(k);
                items.push(r.value);
                found += 1;
            }
            Some(items)
        }
        // Table-database functions (setindex, search, genuid, …), B+ tree duplicates (putdup,
        // putdupback) and anything else: not a function of these kinds.
        _ => None,
    })
}

/// A POSIX extended regular expression as Tokyo Cabinet compiles it for misc regex: a leading
/// `*` makes it case-insensitive; matched on bytes. `None` when it does not compile (or is
/// not UTF-8, or too large).
fn compile_regex(pattern: &[u8]) -> Option<regex::bytes::Regex> {
    let (pattern, icase) = match pattern.strip_prefix(b"*") {
        Some(p) => (p, true),
        None => (pattern, false),
    };
    regex::bytes::RegexBuilder::new(std::str::from_utf8(pattern).ok()?)
        .case_insensitive(icase)
        .unicode(false)
        .size_limit(1 << 20)
        .dfa_size_limit(1 << 20)
        .build()
        .ok()
}

/// Tyrant's `os` (its `TTSYSNAME`).
fn os_name() -> &'static str {
    match std::env::consts::OS {
        "linux" => "Linux",
        "freebsd" => "FreeBSD",
        "macos" => "Mac OS X",
        "solaris" => "SunOS",
        other => other,
    }
}

/// The first number of /proc/loadavg (0 where unavailable).
fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Virtual size and resident size of the process in bytes (Linux /proc/self/status).
fn memory() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line[name.len()..].split_whitespace().next()?.parse().ok()?;
        Some(kb * 1024)
    };
    Some((field("VmSize:")?, field("VmRSS:")?))
}

/// User and system CPU seconds of the process.
fn cpu_times() -> Option<(f64, f64)> {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a `struct rusage` into the valid, writable buffer it is given;
    // the buffer is read only when the call reports success.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: zero-initialised and filled in by the successful call above.
    let ru = unsafe { ru.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some((secs(ru.ru_utime), secs(ru.ru_stime)))
}

/// Tyrant's status text: `name\tvalue\n` lines in ttserver's order, then Kura's own.
fn stat_text(store: &dyn Store, shared: &Shared, st: &TtState<'_>, now: u64) -> String {
    use std::fmt::Write;
    let time = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(now as f64, |d| d.as_secs_f64());
    let path = match shared.db_name.split('#').next() {
        Some(p) if !p.is_empty() => p.to_string(),
        _ => store
            .describe()
            .into_iter()
            .find(|(k, _)| k == "path")
            .map_or_else(String::new, |(_, v)| v),
    };
    let mut s = String::new();
    let mut line = |name: &str, value: &dyn std::fmt::Display| {
        // Values never contain tabs or newlines that would break the format.
        let value = value.to_string().replace(['\t', '\n'], " ");
        let _ = writeln!(s, "{name}\t{value}");
    };
    line("version", &TT_VERSION);
    line("libver", &TT_LIBVER);
    line("protver", &TT_PROTVER);
    line("os", &os_name());
    line("time", &format_args!("{time:.6}"));
    line("pid", &std::process::id());
    line("sid", &shared.sid);
    line("type", &store.kind().info().tt_type);
    line("path", &path);
    line("rnum", &store.count());
    line("size", &store.size());
    line("bigend", &u8::from(cfg!(target_endian = "big")));
    line("fd", &st.fd);
    line("loadavg", &format_args!("{:.6}", loadavg()));
    if let Some((size, rss)) = memory() {
        line("memsize", &size);
        line("memrss", &rss);
    }
    if let Some((user, sys)) = cpu_times() {
        line("ru_user", &format_args!("{user:.6}"));
        line("ru_sys", &format_args!("{sys:.6}"));
    }
    line(
        "ru_real",
        &format_args!("{:.6}", (time - shared.started as f64).max(0.0)),
    );
    for (i, (_, name, _)) in OPS.iter().enumerate() {
        line(&format!("cnt_{name}"), &shared.tt_counts[i].get());
    }
    for (i, name) in ["put", "out", "get"].iter().enumerate() {
        line(&format!("cnt_{name}_miss"), &shared.tt_misses[i].get());
    }
    line("kura_version", &env!("CARGO_PKG_VERSION"));
    line("port", &shared.port);
    let masked = shared.mask.names(Proto::Tyrant);
    if !masked.is_empty() {
        line("mask", &masked.join(","));
    }
    for (name, v) in store.counters() {
        line(&format!("kura_{name}"), &v);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mask::Mask;
    use kura_proto::tt_bin::{
        decode, decode_reply, encode_request, Decoded, DecodedReply, Limits, Reply,
    };

    /// A client of one connection: every request goes through the codec both ways.
    struct Client<'s> {
        db: &'s dyn Store,
        sh: Shared,
        st: TtState<'s>,
    }

    impl<'s> Client<'s> {
        fn new(db: &'s dyn Store) -> Client<'s> {
            Client {
                db,
                sh: Shared::new(0, 1 << 20),
                st: TtState::new(),
            }
        }

        /// The raw reply bytes and what the connection does next.
        fn raw(&mut self, req: &Request<'_>) -> (Vec<u8>, Next) {
            let mut wire = Vec::new();
            encode_request(req, &mut wire);
            let Ok(Decoded::Complete { request, consumed }) = decode(&wire, &Limits::default())
            else {
                panic!("{req:?} does not decode");
            };
            assert_eq!(consumed, wire.len());
            let mut out = Vec::new();
            let next = execute(
                self.db,
                &self.sh,
                &mut self.st,
                &request,
                1_000_000,
                &mut out,
            );
            (out, next)
        }

        /// Exactly one well-formed reply of the request's command, decoded.
        fn call(&mut self, req: &Request<'_>) -> (Reply, Next) {
            let (out, next) = self.raw(req);
            if next == Next::Close {
                assert!(out.is_empty());
                return (Reply::None, next);
            }
            match decode_reply(req.cmd(), &out) {
                Ok(DecodedReply::Complete { reply, consumed }) => {
                    assert_eq!(consumed, out.len(), "{req:?}: trailing bytes in {out:?}");
                    (reply, next)
                }
                other => panic!("{req:?}: {other:?} from {out:?}"),
            }
        }

        fn r(&mut self, req: Request<'_>) -> Reply {
            let (reply, next) = self.call(&req);
            assert_eq!(next, Next::Continue);
            reply
        }

        fn misc(&mut self, name: &[u8], args: &[&[u8]]) -> Reply {
            self.r(Request::Misc {
                name,
                opts: 1,
                args: args.to_vec(),
            })
        }

        fn int(&mut self, key: &[u8], num: i32) -> Reply {
            self.r(Request::AddInt { key, num })
        }

        fn dbl(&mut self, key: &[u8], x: f64) -> Reply {
            let (integ, fract) = tt_bin::pack_double(x);
            self.r(Request::AddDouble { key, integ, fract })
        }
    }

    fn list(items: &[&[u8]]) -> Reply {
        Reply::List(items.iter().map(|i| i.to_vec()).collect())
    }

    const OK_: Reply = Reply::Code(0);
    const FAIL_: Reply = Reply::Code(1);

    struct TempDir(PathBuf);
    impl TempDir {
        fn new(tag: &str) -> TempDir {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "kura-tt-exec-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Run `f` on every kind: memory hash, memory tree, and a disk hash in a temporary
    /// directory.
    fn each_kind(f: impl Fn(&dyn Store, &str)) {
        for name in ["*", "+"] {
            let db = kura_engine::open(name).unwrap();
            f(&*db, name);
        }
        let dir = TempDir::new("kind");
        let name = dir.0.join("t.kh");
        let db = kura_engine::open(name.to_str().unwrap()).unwrap();
        f(&*db, ".kh");
        db.close().unwrap();
    }

    #[test]
    fn record_commands_on_every_kind() {
        each_kind(|db, kind| {
            let mut c = Client::new(db);
            macro_rules! is {
                ($req:expr, $want:expr) => {
                    assert_eq!(c.r($req), $want, "{kind}: {}", stringify!($req))
                };
            }
            is!(
                Request::Put {
                    key: b"a\0b",
                    value: b"1"
                },
                OK_
            );
            is!(
                Request::Put {
                    key: b"a\0b",
                    value: b"v\r\n"
                },
                OK_
            );
            is!(
                Request::Get { key: b"a\0b" },
                Reply::Value(b"v\r\n".to_vec())
            );
            is!(Request::Get { key: b"a" }, FAIL_);
            is!(
                Request::PutKeep {
                    key: b"a\0b",
                    value: b"x"
                },
                FAIL_
            );
            is!(
                Request::PutKeep {
                    key: b"k",
                    value: b"x"
                },
                OK_
            );
            is!(
                Request::PutCat {
                    key: b"k",
                    value: b"yz"
                },
                OK_
            );
            is!(
                Request::PutCat {
                    key: b"new",
                    value: b"n"
                },
                OK_
            );
            is!(Request::Get { key: b"k" }, Reply::Value(b"xyz".to_vec()));
            is!(
                Request::PutShl {
                    key: b"k",
                    value: b"1234",
                    width: 5
                },
                OK_
            );
            is!(Request::Get { key: b"k" }, Reply::Value(b"z1234".to_vec()));
            is!(
                Request::PutShl {
                    key: b"s",
                    value: b"abcdef",
                    width: 2
                },
                OK_
            );
            // An absent record gets the whole value, as in Tyrant; then the shift applies.
            is!(Request::Get { key: b"s" }, Reply::Value(b"abcdef".to_vec()));
            is!(
                Request::PutShl {
                    key: b"s",
                    value: b"g",
                    width: 3
                },
                OK_
            );
            is!(Request::Get { key: b"s" }, Reply::Value(b"efg".to_vec()));
            is!(
                Request::PutShl {
                    key: b"s",
                    value: b"123456",
                    width: 4
                },
                OK_
            );
            is!(Request::Get { key: b"s" }, Reply::Value(b"3456".to_vec()));
            is!(
                Request::PutShl {
                    key: b"s",
                    value: b"",
                    width: 0
                },
                OK_
            );
            is!(Request::Get { key: b"s" }, Reply::Value(b"".to_vec()));
            is!(Request::Vsiz { key: b"k" }, Reply::Int(5));
            is!(Request::Vsiz { key: b"none" }, FAIL_);
            is!(Request::Out { key: b"s" }, OK_);
            is!(Request::Out { key: b"s" }, FAIL_);
            is!(
                Request::Mget {
                    keys: vec![b"k", b"none", b"new", b"k"]
                },
                Reply::Pairs(vec![
                    (b"k".to_vec(), b"z1234".to_vec()),
                    (b"new".to_vec(), b"n".to_vec()),
                    (b"k".to_vec(), b"z1234".to_vec()),
                ])
            );
            is!(Request::Mget { keys: vec![] }, Reply::Pairs(vec![]));
            is!(Request::Rnum, Reply::U64(3));
            assert!(matches!(c.r(Request::Size), Reply::U64(_)));
            // putnr: stored, and not one byte of reply.
            let (out, next) = c.raw(&Request::PutNr {
                key: b"nr",
                value: b"quiet",
            });
            assert_eq!((out.len(), next), (0, Next::Continue));
            is!(Request::Get { key: b"nr" }, Reply::Value(b"quiet".to_vec()));
            // fwmkeys: every key with the prefix; max < 0 is no limit, 0 is none.
            for k in [&b"pre1"[..], b"pre2", b"pr"] {
                is!(Request::Put { key: k, value: b"" }, OK_);
            }
            let Reply::List(mut keys) = c.r(Request::Fwmkeys {
                prefix: b"pre",
                max: -1,
            }) else {
                panic!()
            };
            keys.sort();
            assert_eq!(keys, vec![b"pre1".to_vec(), b"pre2".to_vec()]);
            let Reply::List(keys) = c.r(Request::Fwmkeys {
                prefix: b"pre",
                max: 1,
            }) else {
                panic!()
            };
            assert_eq!(keys.len(), 1);
            is!(
                Request::Fwmkeys {
                    prefix: b"pre",
                    max: 0
                },
                list(&[])
            );
            // Whole-database commands.
            is!(Request::Sync, OK_);
            is!(Request::Optimize { params: b"" }, OK_);
            is!(
                Request::Optimize {
                    params: b"nonsense=1"
                },
                FAIL_
            );
            is!(
                Request::Ext {
                    name: b"f",
                    opts: 0,
                    key: b"k",
                    value: b"v"
                },
                FAIL_
            );
            is!(
                Request::Restore {
                    path: b"/x",
                    ts: 0,
                    opts: 0
                },
                FAIL_
            );
            is!(
                Request::SetMst {
                    host: b"h",
                    port: 1,
                    ts: 0,
                    opts: 0
                },
                FAIL_
            );
            is!(Request::Vanish, OK_);
            is!(Request::Rnum, Reply::U64(0));
            is!(Request::Get { key: b"k" }, FAIL_);
        });
    }

    /// addint / adddouble follow Tokyo Cabinet: a missing record is created, a record of
    /// another size is a failure and stays as it was, sums wrap (addint) or go infinite.
    #[test]
    fn addint_and_adddouble_edge_cases() {
        each_kind(|db, kind| {
            let mut c = Client::new(db);
            assert_eq!(c.int(b"i", 5), Reply::Int(5), "{kind}");
            assert_eq!(c.int(b"i", -7), Reply::Int(-2));
            assert_eq!(db.get(b"i").unwrap().unwrap().value, (-2i32).to_le_bytes());
            assert_eq!(c.int(b"i", 0), Reply::Int(-2));
            // Wraps around like Tyrant's C int.
            db.put(b"w", &i32::MAX.to_le_bytes()).unwrap();
            assert_eq!(c.int(b"w", 2), Reply::Int(i32::MIN + 1));
            // A sum of exactly INT_MIN is Tyrant's failure value: stored, answered 1.
            assert_eq!(c.int(b"w", -1), FAIL_);
            assert_eq!(db.get(b"w").unwrap().unwrap().value, i32::MIN.to_le_bytes());
            // Not a 4-byte record: failure, unchanged.
            db.put(b"s", b"12345").unwrap();
            assert_eq!(c.int(b"s", 1), FAIL_);
            assert_eq!(db.get(b"s").unwrap().unwrap().value, b"12345");

            assert_eq!(c.dbl(b"d", 1.5), Reply::Double(1.5));
            assert_eq!(c.dbl(b"d", -0.25), Reply::Double(1.25));
            assert_eq!(db.get(b"d").unwrap().unwrap().value, 1.25f64.to_le_bytes());
            assert_eq!(c.dbl(b"d", -3.0), Reply::Double(-1.75));
            assert_eq!(c.dbl(b"s", 1.0), FAIL_);
            assert_eq!(c.dbl(b"i", 1.0), FAIL_, "4 bytes is not a double");
            assert_eq!(c.int(b"d", 1), FAIL_, "8 bytes is not an int");
            assert_eq!(c.dbl(b"inf", f64::INFINITY), Reply::Double(f64::INFINITY));
            assert_eq!(c.dbl(b"nan", f64::NAN), FAIL_);
            // Exact wire form of the sum: integral and trillionfold fractional parts.
            let (out, _) = c.raw(&Request::AddDouble {
                key: b"x",
                integ: 2,
                fract: 500_000_000_000,
            });
            let mut want = vec![0];
            want.extend_from_slice(&2i64.to_be_bytes());
            want.extend_from_slice(&500_000_000_000i64.to_be_bytes());
            assert_eq!(out, want);
        });
    }

    #[test]
    fn iteration_sees_every_unchanged_record_once_while_others_change() {
        each_kind(|db, kind| {
            let mut c = Client::new(db);
            // Before iterinit there is nothing to iterate (Tyrant's fresh iterator).
            assert_eq!(c.r(Request::IterNext), FAIL_);
            for i in 0..200u32 {
                db.put(format!("k{i:03}").as_bytes(), b"v").unwrap();
            }
            assert_eq!(c.r(Request::IterInit), OK_);
            let mut seen = std::collections::BTreeMap::new();
            let mut n = 0;
            loop {
                match c.r(Request::IterNext) {
                    Reply::Value(k) => *seen.entry(k).or_insert(0) += 1,
                    Reply::Code(1) => break,
                    other => panic!("{other:?}"),
                }
                // Writers keep going for a while: new keys, removals of odd keys above 100.
                n += 1;
                assert!(n < 1000, "{kind}: the iteration does not end");
                if n <= 300 {
                    db.put(format!("new{n}").as_bytes(), b"x").unwrap();
                }
                if n % 2 == 1 && n > 100 && n < 200 {
                    db.out(format!("k{n:03}").as_bytes()).unwrap();
                }
            }
            for i in 0..=100u32 {
                let k = format!("k{i:03}").into_bytes();
                assert_eq!(seen.get(&k), Some(&1), "{kind}: {i}");
            }
            assert!(seen.values().all(|&c| c == 1), "{kind}: a key seen twice");
            // The end stays the end; a new iterinit starts over.
            assert_eq!(c.r(Request::IterNext), FAIL_);
            assert_eq!(c.r(Request::IterInit), OK_);
            assert!(matches!(c.r(Request::IterNext), Reply::Value(_)));
        });
    }

    #[test]
    fn misc_functions() {
        each_kind(|db, kind| {
            let mut c = Client::new(db);
            assert_eq!(c.misc(b"put", &[b"a", b"1"]), list(&[]), "{kind}");
            assert_eq!(c.misc(b"put", &[b"a"]), FAIL_);
            assert_eq!(c.misc(b"putkeep", &[b"a", b"2"]), FAIL_);
            assert_eq!(c.misc(b"putkeep", &[b"b", b"2"]), list(&[]));
            assert_eq!(c.misc(b"putcat", &[b"b", b"3"]), list(&[]));
            assert_eq!(c.misc(b"get", &[b"b"]), list(&[b"23"]));
            assert_eq!(c.misc(b"get", &[b"zz"]), FAIL_);
            assert_eq!(c.misc(b"get", &[]), FAIL_);
            assert_eq!(c.misc(b"out", &[b"b"]), list(&[]));
            assert_eq!(c.misc(b"out", &[b"b"]), FAIL_);
            // putlist takes pairs (an odd last argument is ignored), getlist answers pairs.
            assert_eq!(
                c.misc(b"putlist", &[b"x", b"0", b"y", b"2", b"x", b"1", b"odd"]),
                list(&[])
            );
            assert_eq!(
                c.misc(b"getlist", &[b"x", b"missing", b"y", b"odd"]),
                list(&[b"x", b"1", b"y", b"2"])
            );
            assert_eq!(c.misc(b"outlist", &[b"x", b"missing"]), list(&[]));
            assert_eq!(c.misc(b"getlist", &[b"x", b"y"]), list(&[b"y", b"2"]));
            // getpart: offset and length as decimal text.
            c.misc(b"put", &[b"p", b"0123456789"]);
            assert_eq!(c.misc(b"getpart", &[b"p", b"3", b"4"]), list(&[b"3456"]));
            assert_eq!(c.misc(b"getpart", &[b"p", b"8"]), list(&[b"89"]));
            assert_eq!(c.misc(b"getpart", &[b"p"]), list(&[b"0123456789"]));
            assert_eq!(c.misc(b"getpart", &[b"p", b"-5", b"2"]), list(&[b"01"]));
            assert_eq!(c.misc(b"getpart", &[b"p", b"10"]), FAIL_);
            assert_eq!(c.misc(b"getpart", &[b"none"]), FAIL_);
            // iterinit / iternext: key and value; the iterator is the binary commands' one.
            c.misc(b"vanish", &[]);
            c.misc(b"putlist", &[b"i1", b"v1", b"i2", b"v2", b"i3", b"v3"]);
            assert_eq!(c.misc(b"iterinit", &[]), list(&[]));
            let mut got = Vec::new();
            while let Reply::List(kv) = c.misc(b"iternext", &[]) {
                assert_eq!(kv.len(), 2);
                got.push(kv);
            }
            got.sort();
            assert_eq!(got.len(), 3);
            assert_eq!(got[0], vec![b"i1".to_vec(), b"v1".to_vec()]);
            assert_eq!(c.misc(b"iterinit", &[b"i2"]), list(&[]));
            let Reply::List(first) = c.misc(b"iternext", &[]) else {
                panic!()
            };
            assert_eq!(first[0], b"i2", "{kind}: starts at the record of the key");
            if kind == "+" {
                assert_eq!(c.r(Request::IterNext), Reply::Value(b"i3".to_vec()));
            } else {
                assert_eq!(c.misc(b"iterinit", &[b"absent"]), FAIL_);
            }
            // regex on the keys, `*` for case-insensitive, max < 1 for no limit.
            c.misc(b"put", &[b"Apple", b"red"]);
            c.misc(b"put", &[b"apricot", b"orange"]);
            let pairs = |x: Reply| match x {
                Reply::List(v) => {
                    let mut p: Vec<Vec<Vec<u8>>> = v.chunks(2).map(|c| c.to_vec()).collect();
                    p.sort();
                    p
                }
                other => panic!("{other:?}"),
            };
            assert_eq!(
                pairs(c.misc(b"regex", &[b"^ap"])),
                vec![vec![b"apricot".to_vec(), b"orange".to_vec()]]
            );
            assert_eq!(pairs(c.misc(b"regex", &[b"*^AP", b"0"])).len(), 2);
            assert_eq!(pairs(c.misc(b"regex", &[b"*^AP", b"1"])).len(), 1);
            assert_eq!(pairs(c.misc(b"regex", &[b"^i[0-9]$"])).len(), 3);
            assert_eq!(c.misc(b"regex", &[b"(unclosed"]), FAIL_);
            assert_eq!(c.misc(b"regex", &[]), FAIL_);
            // range: ordered kinds only; start, max, exclusive end.
            let range = c.misc(b"range", &[b"i1", b"0", b"i3"]);
            if kind == "+" {
                assert_eq!(range, list(&[b"i1", b"v1", b"i2", b"v2"]));
                assert_eq!(c.misc(b"range", &[b"i", b"1"]), list(&[b"i1", b"v1"]));
                let all = c.misc(b"range", &[]);
                assert_eq!(all, c.misc(b"range", &[b"", b"-1"]));
                assert_eq!(pairs(all).len(), 5);
            } else {
                assert_eq!(range, FAIL_);
            }
            // Maintenance and error.
            assert_eq!(c.misc(b"sync", &[]), list(&[]));
            assert_eq!(c.misc(b"optimize", &[]), list(&[]));
            assert_eq!(c.misc(b"optimize", &[b"bogus=1"]), FAIL_);
            assert_eq!(c.misc(b"cacheclear", &[]), list(&[]));
            assert_eq!(c.misc(b"error", &[]), list(&[b"0: success"]));
            // Table-database functions and anything unknown: failure [1][0:4].
            for name in [
                &b"setindex"[..],
                b"search",
                b"genuid",
                b"putdup",
                b"",
                b"PUT",
            ] {
                assert_eq!(c.misc(name, &[b"a", b"b"]), FAIL_);
            }
            let (out, _) = c.raw(&Request::Misc {
                name: b"nope",
                opts: 0,
                args: vec![],
            });
            assert_eq!(out, [1, 0, 0, 0, 0]);
            assert_eq!(c.misc(b"vanish", &[]), list(&[]));
            assert_eq!(db.count(), 0);
        });
    }

    #[test]
    fn the_mask_refuses_and_changes_nothing() {
        let db = kura_engine::open("*").unwrap();
        db.put(b"k", b"v").unwrap();
        let mut c = Client::new(&*db);
        c.sh.mask = Mask::NONE.mask("allorg").unwrap();
        let one = (vec![1u8], Next::Continue);
        let empty_list = (vec![0u8, 0, 0, 0, 0], Next::Continue);
        assert_eq!(
            c.raw(&Request::Put {
                key: b"k",
                value: b"x"
            }),
            one
        );
        assert_eq!(c.raw(&Request::Get { key: b"k" }), one);
        assert_eq!(c.raw(&Request::Out { key: b"k" }), one);
        assert_eq!(c.raw(&Request::Vanish), one);
        assert_eq!(c.raw(&Request::AddInt { key: b"n", num: 1 }), one);
        assert_eq!(c.raw(&Request::IterInit), one);
        assert_eq!(
            c.raw(&Request::Copy {
                path: b"/tmp/never"
            }),
            one
        );
        assert_eq!(
            c.raw(&Request::PutNr {
                key: b"k",
                value: b"x"
            }),
            (vec![], Next::Continue)
        );
        // As ttserver: empty results for mget and fwmkeys, zero for rnum, empty stat.
        assert_eq!(c.raw(&Request::Mget { keys: vec![b"k"] }), empty_list);
        assert_eq!(
            c.raw(&Request::Fwmkeys {
                prefix: b"",
                max: -1
            }),
            empty_list
        );
        assert_eq!(c.raw(&Request::Rnum), (vec![0; 9], Next::Continue));
        assert_eq!(c.raw(&Request::Stat), (vec![0; 5], Next::Continue));
        // misc: the failure form, not ttserver's empty success.
        let put = Request::Misc {
            name: b"put",
            opts: 0,
            args: vec![b"k", b"x"],
        };
        assert_eq!(c.raw(&put), (vec![1, 0, 0, 0, 0], Next::Continue));
        assert_eq!(
            c.raw(&Request::Repl { ts: 1, sid: 2 }),
            (vec![], Next::Close)
        );
        assert_eq!(db.get(b"k").unwrap().unwrap().value, b"v");
        assert_eq!(db.count(), 1);
        // One operation masked, the others served; other protocols' masks do not apply.
        c.sh.mask = Mask::NONE.mask("out").unwrap();
        assert_eq!(c.raw(&Request::Out { key: b"k" }), one);
        assert_eq!(c.raw(&Request::Get { key: b"k" }).0, b"\0\0\0\0\x01v");
        c.sh.mask = Mask::NONE.mask("allmc,allhttp").unwrap();
        assert_eq!(
            c.raw(&Request::Out { key: b"k" }),
            (vec![0], Next::Continue)
        );
    }

    #[test]
    fn stat_reports_tyrant_fields() {
        each_kind(|db, kind| {
            let mut c = Client::new(db);
            c.sh.started = kura_engine::store::now_secs();
            c.sh.db_name = format!("{kind}#bnum=1");
            c.sh.sid = 7;
            c.st.fd = 12;
            db.put(b"a", b"1").unwrap();
            // Counted per command, with ttserver's three misses.
            c.r(Request::Put {
                key: b"p",
                value: b"1",
            });
            c.r(Request::PutKeep {
                key: b"p",
                value: b"2",
            });
            c.r(Request::Get { key: b"p" });
            c.r(Request::Get { key: b"nothing" });
            c.r(Request::Out { key: b"nothing" });
            c.r(Request::Out { key: b"p" });
            let Reply::Stat(text) = c.r(Request::Stat) else {
                panic!()
            };
            let fields: std::collections::HashMap<&str, &str> =
                text.lines().map(|l| l.split_once('\t').expect(l)).collect();
            for name in [
                "version", "libver", "protver", "os", "time", "pid", "sid", "type", "path", "rnum",
                "size", "bigend", "fd", "loadavg", "ru_real",
            ] {
                assert!(
                    fields.contains_key(name),
                    "{kind}: {name} missing in {text}"
                );
            }
            if cfg!(target_os = "linux") {
                for name in ["memsize", "memrss", "ru_user", "ru_sys"] {
                    assert!(fields.contains_key(name), "{name}");
                }
            }
            for (name, want) in [
                ("cnt_put", "1"),
                ("cnt_putkeep", "1"),
                ("cnt_get", "2"),
                ("cnt_out", "2"),
                ("cnt_stat", "1"),
                ("cnt_vanish", "0"),
                ("cnt_repl", "0"),
                ("cnt_put_miss", "1"),
                ("cnt_out_miss", "1"),
                ("cnt_get_miss", "1"),
            ] {
                assert_eq!(fields.get(name), Some(&want), "{kind}: {name} in {text}");
            }
            let names: Vec<&str> = text.lines().filter_map(|l| l.split('\t').next()).collect();
            let cnt: Vec<&str> = names
                .iter()
                .copied()
                .filter(|n| n.starts_with("cnt_"))
                .collect();
            assert_eq!(cnt.len(), 29, "ttserver's 26 counters and 3 misses");
            assert_eq!(
                (cnt[0], cnt[25]),
                ("cnt_put", "cnt_repl"),
                "in ttserver's order"
            );
            assert_eq!(fields["version"], "1.1.41");
            assert_eq!(fields["sid"], "7");
            assert_eq!(fields["rnum"], "1");
            assert_eq!(fields["fd"], "12");
            assert_eq!(fields["path"], kind);
            let want_type = match kind {
                "*" => "on-memory hash",
                "+" => "on-memory tree",
                _ => "hash",
            };
            assert_eq!(fields["type"], want_type);
            assert!(text.ends_with('\n'));
        });
    }

    #[test]
    fn copy_repl_and_engine_errors() {
        let dir = TempDir::new("copy");
        let db = kura_engine::open("+").unwrap();
        let mut c = Client::new(&*db);
        db.put(b"k", b"v").unwrap();
        let dest = dir.0.join("copy.kh");
        let dest_s = dest.to_str().unwrap().as_bytes().to_vec();
        assert_eq!(c.r(Request::Copy { path: &dest_s }), OK_);
        let copy = kura_engine::open(dest.to_str().unwrap()).unwrap();
        assert_eq!(copy.get(b"k").unwrap().unwrap().value, b"v");
        copy.close().unwrap();
        // `@command` is never run; an empty path fails.
        let cmd_path = dir.0.join("pwned");
        let at = format!("@touch {}", cmd_path.display());
        assert_eq!(
            c.r(Request::Copy {
                path: at.as_bytes()
            }),
            FAIL_
        );
        assert!(!cmd_path.exists());
        assert_eq!(c.r(Request::Copy { path: b"" }), FAIL_);
        // repl: no update log to stream, hang up without a byte.
        assert_eq!(
            c.raw(&Request::Repl { ts: 1, sid: 9 }),
            (vec![], Next::Close)
        );
        // A closed database: every command answers its failure form, nothing panics.
        db.close().unwrap();
        for req in [
            Request::Put {
                key: b"k",
                value: b"v",
            },
            Request::PutKeep {
                key: b"k",
                value: b"v",
            },
            Request::PutCat {
                key: b"k",
                value: b"v",
            },
            Request::PutShl {
                key: b"k",
                value: b"v",
                width: 1,
            },
            Request::Out { key: b"k" },
            Request::Get { key: b"k" },
            Request::Mget { keys: vec![b"k"] },
            Request::Vsiz { key: b"k" },
            Request::IterInit,
            Request::IterNext,
            Request::Fwmkeys {
                prefix: b"",
                max: -1,
            },
            Request::AddInt { key: b"k", num: 1 },
            Request::AddDouble {
                key: b"k",
                integ: 1,
                fract: 0,
            },
            Request::Sync,
            Request::Vanish,
            Request::Copy { path: &dest_s },
            Request::Misc {
                name: b"get",
                opts: 0,
                args: vec![b"k"],
            },
            Request::Misc {
                name: b"regex",
                opts: 0,
                args: vec![b"."],
            },
        ] {
            assert_eq!(c.call(&req), (FAIL_, Next::Continue), "{req:?}");
        }
        let (out, _) = c.raw(&Request::PutNr {
            key: b"k",
            value: b"v",
        });
        assert!(out.is_empty());
        assert!(matches!(c.r(Request::Rnum), Reply::U64(_)));
        assert!(matches!(c.r(Request::Stat), Reply::Stat(_)));
    }

    #[test]
    fn tcatoi() {
        assert_eq!(atoi(b"12"), 12);
        assert_eq!(atoi(b"  -7x"), -7);
        assert_eq!(atoi(b"+3"), 3);
        assert_eq!(atoi(b"x1"), 0);
        assert_eq!(atoi(b""), 0);
        assert_eq!(atoi(b"5\09"), 5);
        assert_eq!(atoi(b"99999999999999999999999"), i64::MAX);
    }
}
