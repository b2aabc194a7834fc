//! Executes Tokyo Tyrant binary-protocol requests (`kura_proto::tt_bin`) on a [`Store`] and
//! writes Tyrant's replies, byte for byte as `ttserver` 1.1.41 answers them (see
//! docs/PROTOCOL-TYRANT.md for every place where Kura differs).
//!
//! Tyrant records carry no flags and no expiration: every write here stores flags 0 and
//! expiration 0 (putcat, putshl, addint and adddouble keep those of an existing record, which
//! only memcached can have set). Reads see only live records. Every record command maps onto
//! the `Store` operation of the same name, which has Tokyo Cabinet's / Tyrant's meaning.
//!
//! Replies: 0 on success, 1 on every failure (absent record, existing record, refused command,
//! engine error). An engine error is never a panic and never closes the connection: the
//! command answers its failure form (see [`tt_bin::reply_failure`]).

use crate::backup;
use crate::context::{self, Next, Shared};
use crate::mask::{Op, Proto};
use kura_engine::counter::Counter;
use kura_engine::TokyoOps;
use kura_engine::{Cursor, Error, Outcome, Record, Store};
use kura_proto::tt_bin::{self, cmd, Request, FAIL, OK};

mod misc;
mod stat;

pub use misc::{misc, RELOAD_SCRIPTS};
pub(crate) use misc::{misc_denied, prefix_keys, server_misc};

/// The Tyrant release whose protocol Kura speaks, reported by `stat` and by HTTP OPTIONS.
pub const TT_VERSION: &str = "1.1.41";
/// The library version of that release.
pub const TT_LIBVER: u32 = 324;
/// The protocol version of that release.
pub const TT_PROTVER: &str = "0.91";

/// The operating system as Tyrant's `TTSYSNAME` (its `stat`'s `os`) and Kyoto Cabinet's
/// `OSNAME` (Kyoto Tycoon's `conf_os_name`) spell it.
pub(crate) fn os_name() -> &'static str {
    match std::env::consts::OS {
        "linux" => "Linux",
        "macos" => "Mac OS X",
        "freebsd" => "FreeBSD",
        "netbsd" => "NetBSD",
        "openbsd" => "OpenBSD",
        "solaris" => "SunOS",
        other => other,
    }
}

/// Where the server's Tyrant iteration is: Tyrant keeps one iterator per server, so that
/// `tcrmgr misc … iterinit KEY` and then `tcrmgr misc … iternext`, each on a connection of
/// its own, go on from one another. Kura keeps the iteration of each connection to itself (two
/// clients iterating at once do not disturb each other) and notes here where the last one to
/// move is; a connection that has not begun an iteration of its own takes it up from there.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub enum IterPos {
    /// No iteration (none begun, or the last one ended).
    #[default]
    None,
    /// Begun at the first record.
    Start,
    /// Begun at a key (misc iterinit KEY).
    At(Vec<u8>),
    /// Past the first `n` records of this key (several on a key with duplicates).
    After(Vec<u8>, usize),
}

/// The server's [`IterPos`], shared by its connections.
pub type SharedIter = std::sync::Arc<std::sync::Mutex<IterPos>>;

/// What a server keeps for Tyrant alone (`Shared::tt`).
#[derive(Debug)]
pub struct TtShared {
    /// Commands received, by operation (`crate::mask::Op` order: Tyrant's `cnt_*`).
    pub counts: [Counter; crate::mask::OPS.len()],
    /// Tyrant's `cnt_put_miss`, `cnt_out_miss`, `cnt_get_miss`.
    pub misses: [Counter; 3],
    /// Where the server's iteration is (iterinit / iternext on any connection).
    pub iter: SharedIter,
}

impl Default for TtShared {
    fn default() -> Self {
        TtShared {
            counts: std::array::from_fn(|_| Counter::new()),
            misses: std::array::from_fn(|_| Counter::new()),
            iter: SharedIter::default(),
        }
    }
}

impl TtShared {
    /// `stats reset`: the counters back to zero.
    pub fn reset_stats(&self) {
        for c in self.counts.iter().chain(&self.misses) {
            c.reset();
        }
    }
}

/// Per-connection state: the record iterator of iterinit / iternext (and misc iterinit /
/// iternext, which share it, as in Tyrant). Tyrant has one iterator per server, shared by every
/// client; Kura keeps one per connection so that clients cannot disturb each other, and a
/// connection without one takes up the server's last iteration ([`IterPos`]).
pub struct TtState<'s> {
    /// `None` before iterinit and after the iteration has ended.
    cursor: Option<Box<dyn Cursor + 's>>,
    /// A record already taken from `cursor` to be returned first (misc iterinit with a start
    /// key on an unordered kind, which has to read up to that key).
    pending: Option<(Vec<u8>, Record)>,
    /// This connection has begun an iteration of its own (iterinit, or one taken up).
    begun: bool,
    /// The server's iteration, noted at each move (none: this connection's only).
    server: Option<SharedIter>,
    /// The connection's file descriptor, reported by `stat` as Tyrant does; -1 when unknown.
    pub fd: i32,
    /// Why the last request refused on this connection failed (a value over the limit, an
    /// engine error, a `copy` that was refused or failed), which `misc error` reports as Tokyo
    /// Cabinet reports its last error: the one thing a Tyrant client can show beyond the
    /// failure code.
    pub last_error: Option<String>,
}

impl Default for TtState<'_> {
    fn default() -> Self {
        TtState {
            cursor: None,
            pending: None,
            begun: false,
            server: None,
            fd: -1,
            last_error: None,
        }
    }
}

impl<'s> TtState<'s> {
    pub fn new() -> Self {
        Self::default()
    }

    /// A connection's state that takes part in the server's iteration.
    pub fn of_server(shared: &Shared) -> Self {
        TtState {
            server: Some(shared.tt.iter.clone()),
            ..Self::default()
        }
    }

    /// Note the server's iteration.
    fn note(&self, f: impl FnOnce(&mut IterPos)) {
        if let Some(s) = &self.server {
            f(&mut s.lock().unwrap_or_else(|p| p.into_inner()));
        }
    }

    /// Start a new iteration, at the first record or at `from` (the record of that key on an
    /// unordered kind, which must exist; the first key >= `from` in the database's order on an
    /// ordered kind, which must exist too, as Tokyo Cabinet's B+ tree cursor jump).
    pub(crate) fn iter_init(
        &mut self,
        store: &'s dyn Store,
        from: Option<&[u8]>,
    ) -> Result<bool, Error> {
        self.begun = true;
        let ok = self.begin(store, from)?;
        self.note(|p| {
            *p = match (ok, from) {
                (false, _) => IterPos::None,
                (true, None) => IterPos::Start,
                (true, Some(k)) => IterPos::At(k.to_vec()),
            }
        });
        Ok(ok)
    }

    fn begin(&mut self, store: &'s dyn Store, from: Option<&[u8]>) -> Result<bool, Error> {
        self.cursor = None;
        self.pending = None;
        let mut cur = store.cursor()?;
        if let Some(from) = from {
            if store.kind().ordered() {
                if !cur.jump(from)? {
                    return Ok(false);
                }
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

    /// Take up the server's iteration where it is (false: there is none, or its place is
    /// gone).
    fn take_up(&mut self, store: &'s dyn Store) -> Result<bool, Error> {
        let Some(s) = &self.server else {
            return Ok(false);
        };
        let pos = s.lock().unwrap_or_else(|p| p.into_inner()).clone();
        self.begun = true;
        match pos {
            IterPos::None => Ok(false),
            IterPos::Start => self.begin(store, None),
            IterPos::At(k) => self.begin(store, Some(&k)),
            IterPos::After(k, n) => {
                // The record of the key (or, on an ordered kind, the first after it), then
                // past the `n` of that key already returned.
                let mut cur = store.cursor()?;
                if !cur.jump(&k)? {
                    return Ok(false);
                }
                for _ in 0..n {
                    match cur.get()? {
                        Some((at, _)) if at == k => {
                            cur.next()?;
                        }
                        _ => break,
                    }
                }
                self.cursor = Some(cur);
                self.pending = None;
                Ok(true)
            }
        }
    }

    /// The next record of the iteration; `None` at its end (and before any iterinit, when the
    /// server has no iteration to take up).
    pub(crate) fn iter_next(
        &mut self,
        store: &'s dyn Store,
    ) -> Result<Option<(Vec<u8>, Record)>, Error> {
        if !self.begun && !self.take_up(store)? {
            return Ok(None);
        }
        let got = self.step();
        match &got {
            Ok(Some((k, _))) => self.note(|p| {
                *p = match p {
                    IterPos::After(last, n) if last == k => IterPos::After(k.clone(), *n + 1),
                    _ => IterPos::After(k.clone(), 1),
                }
            }),
            _ => self.note(|p| *p = IterPos::None),
        }
        got
    }

    fn step(&mut self) -> Result<Option<(Vec<u8>, Record)>, Error> {
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
        Request::Repl { .. } | Request::KuraRepl { .. } => Op::Repl,
    }
}

/// Indexes of `TtShared::misses`.
const PUT_MISS: usize = 0;
const OUT_MISS: usize = 1;
const GET_MISS: usize = 2;

/// Execute one request, appending its reply (if any) to `out`.
///
/// Returns [`Next::Stream`] for `repl` (Tyrant's and Kura's): the connection becomes a
/// replication stream; [`Next::Close`] when `repl` is refused by the mask.
pub fn execute<'s>(
    store: &'s dyn Store,
    shared: &Shared,
    st: &mut TtState<'s>,
    req: &Request<'_>,
    now: u64,
    out: &mut Vec<u8>,
) -> Next {
    let mut e = Tyrant {
        store,
        shared,
        st,
        now,
    };
    context::execute(&mut e, store, shared, req, now, out)
}

/// Tokyo Tyrant's binary protocol in the steps every request takes.
struct Tyrant<'x, 's> {
    store: &'s dyn Store,
    shared: &'x Shared,
    st: &'x mut TtState<'s>,
    now: u64,
}

impl context::Exec for Tyrant<'_, '_> {
    type Req<'a> = Request<'a>;
    type Out = Vec<u8>;
    fn received(&mut self, req: &Request<'_>) {
        // Counted as ttserver counts: every command received, refused ones too.
        self.shared.tt.counts[op_of(req) as usize].add(1);
    }
    fn denied(&self, shared: &Shared, req: &Request<'_>) -> Option<bool> {
        match req {
            Request::Misc { name, args, .. } => misc_denied(shared, name, args, Proto::Tyrant)
                .then(|| shared.mask.get().denies(Op::Misc, Proto::Tyrant)),
            _ => shared.verdict(|mask| mask.denies(op_of(req), Proto::Tyrant)),
        }
    }
    fn refuse(&mut self, req: &Request<'_>, why: Option<String>, out: &mut Vec<u8>) -> Next {
        // A write on a read-only replica: Tyrant's replies carry no text; `stat` says why
        // (`read_only`), so does `misc error`, and the log counts them.
        if let Some(why) = why {
            self.st.last_error = Some(why);
        }
        refuse(req.cmd(), out)
    }
    fn run(&mut self, req: &Request<'_>, out: &mut Vec<u8>) -> Result<Next, Error> {
        run(self.store, self.shared, self.st, req, self.now, out)
    }
    fn failed(&mut self, req: &Request<'_>, e: Error, start: usize, out: &mut Vec<u8>) -> Next {
        self.st.last_error = Some(e.to_string());
        if matches!(
            op_of(req),
            Op::Put | Op::PutKeep | Op::PutCat | Op::PutShl | Op::PutNr
        ) {
            self.shared.tt.misses[PUT_MISS].add(1);
        }
        // Nothing half-written goes out: the failure form replaces it.
        out.truncate(start);
        tt_bin::reply_failure(out, req.cmd());
        Next::Continue
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
        cmd::REPL | cmd::KREPL => return Next::Close,
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
    if let Some(applied) = apply(store, req) {
        if let Request::PutNr { .. } = req {
            // No reply, whatever happens: an error is swallowed here rather than answered.
            if !matches!(applied, Ok(Applied::Done(true))) {
                shared.tt.misses[PUT_MISS].add(1);
            }
            return Ok(Next::Continue);
        }
        match applied? {
            Applied::Done(ok) => {
                match req {
                    Request::PutKeep { .. } if !ok => shared.tt.misses[PUT_MISS].add(1),
                    Request::Out { .. } if !ok => shared.tt.misses[OUT_MISS].add(1),
                    _ => {}
                }
                code(out, ok);
            }
            Applied::Int(n) => tt_bin::reply_i32(out, n),
            Applied::Double(n) => tt_bin::reply_double(out, n),
        }
        return Ok(Next::Continue);
    }
    match *req {
        Request::Get { key } => {
            // Encoded straight from the store's memory: no copy of the value.
            if !store.view(key, &mut |value, _| tt_bin::reply_value(out, value))? {
                shared.tt.misses[GET_MISS].add(1);
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
        Request::IterNext => match st.iter_next(store)? {
            Some((k, _)) => tt_bin::reply_value(out, &k),
            None => code(out, false),
        },
        Request::Fwmkeys { prefix, max } => {
            let max = usize::try_from(max).unwrap_or(usize::MAX);
            let keys = prefix_keys(store, prefix, max)?;
            tt_bin::reply_list(out, keys.iter().map(Vec::as_slice));
        }
        // The `--ext` script's function (crate::script::tt): its result, or the failure
        // code with the reason kept for `misc error` (no script: the failure, as ttserver
        // without `-ext`).
        Request::Ext {
            name,
            opts,
            key,
            value,
        } => match crate::script::tt::ext(store, shared, Proto::Tyrant, name, opts, key, value) {
            Ok(body) => tt_bin::reply_value(out, &body),
            Err(why) => {
                st.last_error = Some(why);
                code(out, false);
            }
        },
        // Confined to the backup directory; `@NAME` runs NAME of that directory on a fresh
        // copy (crate::backup).
        // The reason of a failure is kept for `misc error`.
        Request::Copy { path } => {
            let done = backup::copy_why(store, shared, path, "Tyrant copy");
            st.last_error = done.as_ref().err().cloned();
            code(out, done.is_ok())
        }
        Request::Restore { path, ts, .. } => {
            // Replays an update log directory (confined like copy's paths) from time stamp
            // `ts` on; the changes are logged here like any other.
            let mut ok = false;
            if let Some(dir) = backup::confined(shared, path, "Tyrant restore") {
                match kura_engine::ulog::apply::replay(store, &dir, ts.saturating_sub(1), u64::MAX)
                {
                    Ok((n, last)) => {
                        shared.log.line(&format!(
                            "Tyrant restore from {}: {n} records replayed, up to {last}",
                            dir.display()
                        ));
                        ok = true;
                    }
                    Err(e) => shared
                        .log
                        .warn(&format!("Tyrant restore from {}: {e}", dir.display())),
                }
            }
            code(out, ok);
        }
        Request::SetMst {
            host,
            port,
            ts,
            opts,
        } => match &shared.repl {
            Some(r) => {
                let host = String::from_utf8_lossy(c_str(host)).into_owned();
                match u16::try_from(port) {
                    // An empty host: stop following (promotion to master); writes allowed.
                    _ if host.is_empty() => {
                        let _ = r.change_master(&shared.read_only, None, 0, false);
                        code(out, true);
                    }
                    Ok(p) if p > 0 => {
                        // A bootstrap that would replace records is refused unless asked for;
                        // a time stamp: go on after it (ttserver writes it to its rts file).
                        let force = opts & tt_bin::SETMST_REPLACE != 0;
                        let ok = r
                            .change_master(&shared.read_only, Some((host, p)), ts, force)
                            .is_ok();
                        code(out, ok);
                    }
                    _ => code(out, false),
                }
            }
            None => code(out, false),
        },
        Request::Repl { ts, sid } => {
            // No update log to stream: hang up without a byte, as ttserver does.
            if shared.repl.as_ref().is_none_or(|r| r.logged.is_none()) {
                return Ok(Next::Close);
            }
            return Ok(Next::Stream(crate::repl::StreamReq::Tyrant { ts, sid }));
        }
        Request::KuraRepl { after, sid, flags } => {
            if shared.repl.is_none() {
                return Ok(Next::Close);
            }
            return Ok(Next::Stream(crate::repl::StreamReq::Kura {
                after,
                sid,
                flags,
            }));
        }
        Request::Rnum => tt_bin::reply_u64(out, store.count()),
        Request::Size => tt_bin::reply_u64(out, store.size()),
        Request::Stat => {
            tt_bin::reply_stat(out, stat::stat_text(store, shared, st, now).as_bytes())
        }
        Request::Misc { name, ref args, .. } => match server_misc(store, shared, st, name, args)? {
            Some(items) => {
                // Sized once: a search's reply can hold millions of keys, and a buffer grown by
                // doubling would hold up to twice their bytes beside them.
                out.reserve(5 + items.iter().map(|i| 4 + i.len()).sum::<usize>());
                tt_bin::reply_list(out, items.iter().map(Vec::as_slice))
            }
            None => tt_bin::reply_failure(out, cmd::MISC),
        },
        // Applied above.
        Request::Put { .. }
        | Request::PutKeep { .. }
        | Request::PutCat { .. }
        | Request::PutShl { .. }
        | Request::PutNr { .. }
        | Request::Out { .. }
        | Request::AddInt { .. }
        | Request::AddDouble { .. }
        | Request::Sync
        | Request::Optimize { .. }
        | Request::Vanish => {}
    }
    Ok(Next::Continue)
}

/// What a Tyrant write command did ([`apply`]).
pub(crate) enum Applied {
    /// Whether it succeeded (the reply's code).
    Done(bool),
    /// addint's sum.
    Int(i32),
    /// adddouble's sum.
    Double(f64),
}

/// The write commands of the database (those an update log holds, but misc) mapped onto the
/// store with their Tyrant meaning, once for the server ([`run`], which answers them) and for
/// a master's update log ([`redo`]); `None` for any other command.
pub(crate) fn apply(store: &dyn Store, req: &Request<'_>) -> Option<Result<Applied, Error>> {
    let done = |r: Result<bool, Error>| r.map(Applied::Done);
    Some(match *req {
        Request::Put { key, value } | Request::PutNr { key, value } => {
            done(put_or_genuid(store, key, value, 0).map(|_| true))
        }
        Request::PutKeep { key, value } => done(
            store
                .putkeep(key, value, 0, 0)
                .map(|o| matches!(o, Outcome::Stored(_))),
        ),
        Request::PutCat { key, value } => done(store.putcat(key, value).map(|_| true)),
        // The codec refuses negative widths.
        Request::PutShl { key, value, width } => done(
            store
                .putshl(key, value, usize::try_from(width).unwrap_or(0))
                .map(|_| true),
        ),
        Request::Out { key } => done(store.out(key)),
        // Tyrant's sum is an int with INT_MIN meaning failure: a sum of exactly INT_MIN is
        // stored but answered as a failure.
        Request::AddInt { key, num } => match store.addint(key, num) {
            Ok(n) if n != i32::MIN => Ok(Applied::Int(n)),
            Ok(_) | Err(Error::NotNumeric) => Ok(Applied::Done(false)),
            Err(e) => Err(e),
        },
        // Tyrant's sum is a double with NaN meaning failure: a NaN sum is stored but answered
        // as a failure.
        Request::AddDouble { key, integ, fract } => {
            match store.adddouble(key, tt_bin::unpack_double(integ, fract)) {
                Ok(sum) if !sum.is_nan() => Ok(Applied::Double(sum)),
                Ok(_) | Err(Error::NotNumeric) => Ok(Applied::Done(false)),
                Err(e) => Err(e),
            }
        }
        Request::Sync => done(store.sync().map(|_| true)),
        Request::Optimize { params } => match std::str::from_utf8(c_str(params)) {
            Ok(p) => done(store.optimize(p).map(|_| true)),
            Err(_) => Ok(Applied::Done(false)),
        },
        Request::Vanish => done(store.vanish().map(|_| true)),
        _ => return None,
    })
}

/// Tyrant's put (`tcadbput`), of the binary protocol and of REST's PUT: on a table an empty
/// key is a new unique id (`genuid`, in decimal), as Tokyo Cabinet's abstract database gives
/// it.
pub(crate) fn put_or_genuid(
    store: &dyn Store,
    key: &[u8],
    value: &[u8],
    expires: u64,
) -> Result<(), Error> {
    match store.table() {
        Some(t) if key.is_empty() => {
            let id = t.genuid()?.to_string();
            store.put_with(id.as_bytes(), value, 0, expires).map(|_| ())
        }
        _ => store.put_with(key, value, 0, expires).map(|_| ()),
    }
}

/// Redo one command of a Tokyo Tyrant update log (a record of a Tyrant master's `repl`
/// stream) on `store`, as `tculogadbredo` does: the command with its Tyrant meaning (putnr
/// as put; misc as [`misc`] runs it), whether it succeeded (compare with the record's
/// result byte to tell an inconsistency). A command that fails here for what it is (addint on
/// a value that is not a number, a value too large, parameters this kind does not take) is a
/// failure, not an error; an error (I/O, a damaged database) means it was not applied.
pub fn redo(store: &dyn Store, req: &Request<'_>) -> Result<bool, Error> {
    let done = match (apply(store, req), req) {
        (Some(applied), _) => applied.map(|a| !matches!(a, Applied::Done(false))),
        (None, Request::Misc { name, args, .. }) => {
            misc(store, &mut TtState::new(), name, args).map(|r| r.is_some())
        }
        // Never in an update log.
        (None, _) => Ok(false),
    };
    match done {
        Err(e) if e.from_request() => Ok(false),
        r => r,
    }
}

/// A string argument as Tyrant's C code sees it: up to the first NUL byte.
fn c_str(b: &[u8]) -> &[u8] {
    b.iter().position(|&x| x == 0).map_or(b, |n| &b[..n])
}

#[cfg(test)]
mod tests;
