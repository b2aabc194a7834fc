//! The Redis protocol (`kura_proto::resp`) executed on a `Store` (docs/PROTOCOL-REDIS.md).
//!
//! Here: the command table ([`COMMANDS`]: name, arity, the operation the command mask and the
//! users' rights know it as), the connection's state ([`RedisConn`]: RESP version, name,
//! transaction, open SCAN cursors), the steps before a command runs (arity, login, MULTI's
//! queue) and the transactions. The commands themselves are in `strings` (values and
//! counters), `keys` (keys, expiry, SCAN, KEYS, flushes), `hashes` (hashes as table records)
//! and `admin` (HELLO, AUTH, INFO, CLIENT, COMMAND, CONFIG, TIME).
//!
//! * Keys are the store's keys, values its values: a key set over memcached reads over Redis
//!   and back. Expiry is the record's expiration time, in whole seconds: a time given in
//!   milliseconds (PX, PEXPIRE, PXAT) is rounded up to the next second, never down.
//! * Errors are worded as Redis words them; a request refused by `--mask` gets
//!   `-NOPERM` when the user's rights refuse it, `-READONLY` on a read-only replica, else
//!   `-ERR … refused by the server's --mask`.

mod admin;
mod hashes;
mod keys;
mod strings;

use crate::auth::Session;
use crate::context::{self, Next, Shared};
use crate::mask::{Op, Proto};
use crate::out::Out;
use kura_engine::counter::Counter;
use kura_engine::{BatchOp, Cursor, Error, Store};
use kura_proto::resp::{self, Request};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The Redis version reported (`HELLO`, `INFO server`): the release whose commands and
/// replies Kura follows (Debian's `redis-server`), as clients expect a Redis version there.
pub const REDIS_VERSION: &str = "7.0.15";

/// What a command may do, for `COMMAND INFO` and the login and MULTI rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
    /// Connection and server commands: no key.
    Admin,
}

/// One command: its lower-case name, Redis's arity (exact when positive, at least `-n` when
/// negative, the name counted), the operation `--mask` and the users' rights know it as
/// (`None`: always allowed), and its keys (`COMMAND INFO`'s first, last, step).
#[derive(Debug)]
pub struct Cmd {
    pub name: &'static str,
    pub arity: i32,
    pub op: Option<Op>,
    pub kind: Kind,
    pub keys: (i32, i32, i32),
}

const fn c(
    name: &'static str,
    arity: i32,
    op: Option<Op>,
    kind: Kind,
    keys: (i32, i32, i32),
) -> Cmd {
    Cmd {
        name,
        arity,
        op,
        kind,
        keys,
    }
}

use Kind::{Admin as A, Read as R, Write as W};
const K1: (i32, i32, i32) = (1, 1, 1);
const KN: (i32, i32, i32) = (1, -1, 1);
const K2: (i32, i32, i32) = (1, -1, 2);
const K0: (i32, i32, i32) = (0, 0, 0);

/// Every command served, the most frequent first (looked up in order).
pub const COMMANDS: &[Cmd] = &[
    c("get", 2, Some(Op::Get), R, K1),
    c("set", -3, Some(Op::Put), W, K1),
    c("mget", -2, Some(Op::Mget), R, KN),
    c("mset", -3, Some(Op::Put), W, K2),
    c("del", -2, Some(Op::Out), W, KN),
    c("incr", 2, Some(Op::AddInt), W, K1),
    c("ping", -1, None, A, K0),
    c("exists", -2, Some(Op::Get), R, KN),
    c("expire", -3, Some(Op::Put), W, K1),
    c("ttl", 2, Some(Op::Get), R, K1),
    c("setnx", 3, Some(Op::PutKeep), W, K1),
    c("setex", 4, Some(Op::Put), W, K1),
    c("psetex", 4, Some(Op::Put), W, K1),
    c("getset", 3, Some(Op::Put), W, K1),
    c("getdel", 2, Some(Op::Out), W, K1),
    c("getex", -2, Some(Op::Put), W, K1),
    c("msetnx", -3, Some(Op::PutKeep), W, K2),
    c("unlink", -2, Some(Op::Out), W, KN),
    c("append", 3, Some(Op::PutCat), W, K1),
    c("strlen", 2, Some(Op::Vsiz), R, K1),
    c("incrby", 3, Some(Op::AddInt), W, K1),
    c("decr", 2, Some(Op::AddInt), W, K1),
    c("decrby", 3, Some(Op::AddInt), W, K1),
    c("incrbyfloat", 3, Some(Op::AddDouble), W, K1),
    c("pexpire", -3, Some(Op::Put), W, K1),
    c("expireat", -3, Some(Op::Put), W, K1),
    c("pexpireat", -3, Some(Op::Put), W, K1),
    c("pttl", 2, Some(Op::Get), R, K1),
    c("expiretime", 2, Some(Op::Get), R, K1),
    c("pexpiretime", 2, Some(Op::Get), R, K1),
    c("persist", 2, Some(Op::Put), W, K1),
    c("type", 2, Some(Op::Get), R, K1),
    c("keys", 2, Some(Op::Fwmkeys), R, K0),
    c("scan", -2, Some(Op::IterNext), R, K0),
    c("dbsize", 1, Some(Op::Rnum), R, K0),
    c("flushdb", -1, Some(Op::Vanish), W, K0),
    c("flushall", -1, Some(Op::Vanish), W, K0),
    c("echo", 2, None, A, K0),
    c("hello", -1, None, A, K0),
    c("auth", -2, None, A, K0),
    c("select", 2, None, A, K0),
    c("quit", -1, None, A, K0),
    c("info", -1, Some(Op::Stat), A, K0),
    c("client", -2, None, A, K0),
    c("command", -1, None, A, K0),
    c("config", -2, Some(Op::Stat), A, K0),
    c("multi", 1, None, A, K0),
    c("exec", 1, None, A, K0),
    c("discard", 1, None, A, K0),
    c("watch", -2, Some(Op::Get), R, KN),
    c("unwatch", 1, None, A, K0),
    c("time", 1, None, A, K0),
    c("hset", -4, Some(Op::Put), W, K1),
    c("hmset", -4, Some(Op::Put), W, K1),
    c("hget", 3, Some(Op::Get), R, K1),
    c("hmget", -3, Some(Op::Get), R, K1),
    c("hdel", -3, Some(Op::Out), W, K1),
    c("hgetall", 2, Some(Op::Get), R, K1),
    c("hexists", 3, Some(Op::Get), R, K1),
    c("hlen", 2, Some(Op::Get), R, K1),
    c("hkeys", 2, Some(Op::Get), R, K1),
    c("hvals", 2, Some(Op::Get), R, K1),
    c("hincrby", 4, Some(Op::AddInt), W, K1),
    c("replicaof", 3, Some(Op::SetMst), A, K0),
    c("slaveof", 3, Some(Op::SetMst), A, K0),
];

/// The command named `name` (any case).
pub fn lookup(name: &[u8]) -> Option<usize> {
    COMMANDS
        .iter()
        .position(|c| c.name.as_bytes().eq_ignore_ascii_case(name))
}

/// What the Redis protocol keeps for itself, server-wide.
#[derive(Debug)]
pub struct RedisShared {
    /// The next `CLIENT ID`.
    pub next_id: AtomicU64,
    /// Commands received, by [`COMMANDS`] place (Redis's `cmdstat_*` calls).
    pub calls: Vec<Counter>,
    /// Commands that failed or were refused (`rejected_calls` + `failed_calls`).
    pub errors: Counter,
}

impl Default for RedisShared {
    fn default() -> Self {
        RedisShared {
            next_id: AtomicU64::new(1),
            calls: COMMANDS.iter().map(|_| Counter::new()).collect(),
            errors: Counter::new(),
        }
    }
}

impl RedisShared {
    pub fn reset_stats(&self) {
        for c in &self.calls {
            c.reset();
        }
        self.errors.reset();
    }
}

/// Open SCAN cursors a connection keeps at most (the oldest is dropped first).
const MAX_SCANS: usize = 16;

/// A Redis connection's state.
pub struct RedisConn<'s> {
    pub resp3: bool,
    pub id: u64,
    /// When the connection was made (unix seconds), for `CLIENT LIST`.
    pub since: u64,
    pub name: Option<Vec<u8>>,
    pub lib_name: Option<Vec<u8>>,
    pub lib_ver: Option<Vec<u8>>,
    /// Inside MULTI: the commands queued, and whether one was refused (EXEC then aborts).
    multi: Option<(Vec<Vec<Vec<u8>>>, bool)>,
    /// WATCHed keys and the version of their record then (`None`: absent).
    watched: Vec<(Vec<u8>, Option<u64>)>,
    /// Open SCAN cursors by id; ids are never reused on a connection.
    scans: Vec<(u64, Box<dyn Cursor + 's>)>,
    next_scan: u64,
    /// The last command run, for `CLIENT LIST`'s `cmd=`.
    last_cmd: &'static str,
}

impl RedisConn<'_> {
    pub fn new(shared: &Shared, now: u64) -> Self {
        RedisConn {
            resp3: false,
            id: shared.redis.next_id.fetch_add(1, Relaxed),
            since: now,
            name: None,
            lib_name: None,
            lib_ver: None,
            multi: None,
            watched: Vec::new(),
            scans: Vec::new(),
            next_scan: 1,
            last_cmd: "NULL",
        }
    }
}

/// What a command runs with.
pub(crate) struct Call<'x, 's, 'r> {
    pub store: &'s dyn Store,
    pub shared: &'x Shared,
    pub conn: &'x mut RedisConn<'s>,
    pub session: &'x mut Session,
    pub now: u64,
    pub args: &'r [&'r [u8]],
}

impl Call<'_, '_, '_> {
    pub fn resp3(&self) -> bool {
        self.conn.resp3
    }
}

/// A command's outcome other than its reply: an error reply's text (without `-`), or done.
pub(crate) type Done = Result<Next, Reply>;

/// A failed command: an error reply, or the store's error.
#[derive(Debug)]
pub(crate) enum Reply {
    /// The whole error line after `-` (`ERR syntax error`).
    Err(String),
    Store(Error),
}

impl From<Error> for Reply {
    fn from(e: Error) -> Self {
        Reply::Store(e)
    }
}

pub(crate) fn err(s: impl Into<String>) -> Reply {
    Reply::Err(s.into())
}

pub(crate) const SYNTAX: &str = "ERR syntax error";
pub(crate) const NOT_INT: &str = "ERR value is not an integer or out of range";

/// Argument `i` as an integer, as Redis reads one.
pub(crate) fn int_arg(a: &[u8]) -> Result<i64, Reply> {
    resp::parse_i64(a).ok_or_else(|| err(NOT_INT))
}

/// `wrong number of arguments for 'name' command` (`name` may be `client|setname`).
pub(crate) fn arity_error(name: &str) -> Reply {
    err(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

/// Execute one decoded request, appending its reply to `out`.
pub fn execute<'s>(
    store: &'s dyn Store,
    shared: &Shared,
    conn: &mut RedisConn<'s>,
    session: &mut Session,
    req: &Request<'_>,
    now: u64,
    out: &mut Out,
) -> Next {
    if req.args.is_empty() {
        return Next::Continue;
    }
    // The arguments as plain slices: on the stack for the usual few, no allocation.
    const FEW: usize = 8;
    if req.args.len() <= FEW {
        let mut few: [&[u8]; FEW] = [&[]; FEW];
        for (slot, a) in few.iter_mut().zip(&req.args) {
            *slot = a;
        }
        return run_args(
            store,
            shared,
            conn,
            session,
            &few[..req.args.len()],
            now,
            out,
        );
    }
    let args: Vec<&[u8]> = req.args.iter().map(|a| &a[..]).collect();
    run_args(store, shared, conn, session, &args, now, out)
}

/// [`execute`] on arguments (a request, or one queued by MULTI).
fn run_args<'s>(
    store: &'s dyn Store,
    shared: &Shared,
    conn: &mut RedisConn<'s>,
    session: &mut Session,
    args: &[&[u8]],
    now: u64,
    out: &mut Out,
) -> Next {
    let in_multi = conn.multi.is_some();
    let refuse = |conn: &mut RedisConn<'_>, out: &mut Out, msg: &str| {
        shared.redis.errors.add(1);
        if let Some((_, failed)) = conn.multi.as_mut() {
            *failed = true;
        }
        resp::error(out, msg);
        Next::Continue
    };
    let Some(i) = lookup(args[0]) else {
        return refuse(conn, out, &unknown_command(args));
    };
    let cmd = &COMMANDS[i];
    if !arity_ok(cmd.arity, args.len()) {
        return refuse(
            conn,
            out,
            &format!("ERR wrong number of arguments for '{}' command", cmd.name),
        );
    }
    if shared.access.has_users()
        && session.user.is_none()
        && !matches!(cmd.name, "auth" | "hello" | "quit")
    {
        return refuse(conn, out, "NOAUTH Authentication required.");
    }
    if in_multi && !matches!(cmd.name, "exec" | "discard" | "multi" | "watch" | "quit") {
        // Refused now when the mask refuses it, as Redis checks ACLs when queueing.
        if let Some(op) = cmd.op {
            if let Some(by_mask) = shared.verdict(|m| m.denies(op, Proto::Redis)) {
                let why = shared.read_only_refusal(by_mask);
                return refuse(conn, out, &refusal(cmd, session, why));
            }
        }
        if let Some((queue, _)) = conn.multi.as_mut() {
            queue.push(args.iter().map(|a| a.to_vec()).collect());
        }
        resp::simple(out, "QUEUED");
        return Next::Continue;
    }
    let mut e = Exec {
        call: Call {
            store,
            shared,
            conn,
            session,
            now,
            args,
        },
        cmd: i,
    };
    context::execute(&mut e, store, shared, &i, now, out)
}

fn arity_ok(arity: i32, n: usize) -> bool {
    if arity >= 0 {
        n == arity as usize
    } else {
        n >= arity.unsigned_abs() as usize
    }
}

/// Redis's reply to a command it does not have: `ERR unknown command 'x', with args
/// beginning with: 'a' 'b' ` (the arguments shown up to 128 bytes in all).
pub fn unknown_command(args: &[&[u8]]) -> String {
    let show = |b: &[u8], n: usize| String::from_utf8_lossy(&b[..b.len().min(n)]).into_owned();
    let mut s = format!(
        "ERR unknown command '{}', with args beginning with: ",
        show(args[0], 128)
    );
    let mut left = 128usize;
    for a in &args[1..] {
        if left == 0 {
            break;
        }
        let n = a.len().min(left);
        s.push_str(&format!("'{}' ", show(a, n)));
        left -= n;
    }
    s
}

/// The error a refused command gets: its user's rights, a read-only replica, or `--mask`.
fn refusal(cmd: &Cmd, session: &Session, why: Option<String>) -> String {
    if why.is_some() {
        return "READONLY You can't write against a read only replica.".into();
    }
    let by_rights = cmd
        .op
        .is_some_and(|op| crate::auth::denied().denies(op, Proto::Redis));
    match (&session.user, by_rights) {
        (Some((name, _)), true) => format!(
            "NOPERM User {name} has no permissions to run the '{}' command",
            cmd.name
        ),
        _ => format!("ERR '{}' is refused by the server's --mask", cmd.name),
    }
}

/// A command in the steps every request takes ([`context::execute`]).
struct Exec<'x, 's, 'r> {
    call: Call<'x, 's, 'r>,
    cmd: usize,
}

impl context::Exec for Exec<'_, '_, '_> {
    type Req<'a> = usize;
    type Out = Out;
    fn received(&mut self, _req: &usize) {
        self.call.shared.redis.calls[self.cmd].add(1);
        self.call.conn.last_cmd = COMMANDS[self.cmd].name;
    }
    fn denied(&self, shared: &Shared, _req: &usize) -> Option<bool> {
        let op = COMMANDS[self.cmd].op?;
        shared.verdict(|m| m.denies(op, Proto::Redis))
    }
    fn refuse(&mut self, _req: &usize, why: Option<String>, out: &mut Out) -> Next {
        self.call.shared.redis.errors.add(1);
        resp::error(out, &refusal(&COMMANDS[self.cmd], self.call.session, why));
        Next::Continue
    }
    fn run(&mut self, _req: &usize, out: &mut Out) -> Result<Next, Error> {
        let start = out.len();
        match dispatch(&mut self.call, COMMANDS[self.cmd].name, out) {
            Ok(next) => Ok(next),
            Err(Reply::Store(e)) => Err(e),
            Err(Reply::Err(msg)) => {
                out.truncate(start);
                self.call.shared.redis.errors.add(1);
                resp::error(out, &msg);
                Ok(Next::Continue)
            }
        }
    }
    fn failed(&mut self, _req: &usize, e: Error, start: usize, out: &mut Out) -> Next {
        out.truncate(start);
        self.call.shared.redis.errors.add(1);
        resp::error(out, &store_error(&e));
        Next::Continue
    }
}

/// The error reply of a store error.
fn store_error(e: &Error) -> String {
    match e {
        Error::TooLarge(_) => "ERR string exceeds maximum allowed size (proto-max-bulk-len)".into(),
        e => format!("ERR {e}"),
    }
}

fn dispatch(c: &mut Call<'_, '_, '_>, name: &str, out: &mut Out) -> Done {
    match name {
        "get" => strings::get(c, out),
        "set" => strings::set(c, out),
        "mget" => strings::mget(c, out),
        "mset" => strings::mset(c, out),
        "msetnx" => strings::msetnx(c, out),
        "setnx" => strings::setnx(c, out),
        "setex" | "psetex" => strings::setex(c, name, out),
        "getset" => strings::getset(c, out),
        "getdel" => strings::getdel(c, out),
        "getex" => strings::getex(c, out),
        "append" => strings::append(c, out),
        "strlen" => strings::strlen(c, out),
        "incr" | "incrby" | "decr" | "decrby" => strings::incr(c, name, out),
        "incrbyfloat" => strings::incrbyfloat(c, out),
        "del" | "unlink" => keys::del(c, out),
        "exists" => keys::exists(c, out),
        "expire" | "pexpire" | "expireat" | "pexpireat" => keys::expire(c, name, out),
        "ttl" | "pttl" | "expiretime" | "pexpiretime" => keys::ttl(c, name, out),
        "persist" => keys::persist(c, out),
        "type" => keys::type_of(c, out),
        "keys" => keys::keys(c, out),
        "scan" => keys::scan(c, out),
        "dbsize" => {
            resp::integer(out, c.store.count() as i64);
            Ok(Next::Continue)
        }
        "flushdb" | "flushall" => keys::flush(c, out),
        "ping" => {
            match c.args.get(1) {
                None => resp::simple(out, "PONG"),
                Some(m) if c.args.len() == 2 => resp::bulk(out, m),
                Some(_) => return Err(arity_error("ping")),
            }
            Ok(Next::Continue)
        }
        "echo" => {
            resp::bulk(out, c.args[1]);
            Ok(Next::Continue)
        }
        "select" => {
            match int_arg(c.args[1])? {
                0 => resp::ok(out),
                _ => return Err(err("ERR DB index is out of range")),
            }
            Ok(Next::Continue)
        }
        "quit" => {
            resp::ok(out);
            Ok(Next::Close)
        }
        "hello" => admin::hello(c, out),
        "auth" => admin::auth(c, out),
        "info" => admin::info(c, out),
        "client" => admin::client(c, out),
        "command" => admin::command(c, out),
        "config" => admin::config(c, out),
        "time" => admin::time(out),
        "replicaof" | "slaveof" => Err(err(format!(
            "ERR {} is not served here: Kura replicates with its own protocol; start the \
             replica with kura serve --master HOST:PORT",
            name.to_uppercase()
        ))),
        "hset" | "hmset" | "hget" | "hmget" | "hdel" | "hgetall" | "hexists" | "hlen" | "hkeys"
        | "hvals" | "hincrby" => hashes::hash(c, name, out),
        "multi" => multi(c, out),
        "exec" => exec(c, out),
        "discard" => {
            if c.conn.multi.take().is_none() {
                return Err(err("ERR DISCARD without MULTI"));
            }
            c.conn.watched.clear();
            resp::ok(out);
            Ok(Next::Continue)
        }
        "watch" => watch(c, out),
        "unwatch" => {
            c.conn.watched.clear();
            resp::ok(out);
            Ok(Next::Continue)
        }
        _ => Err(err(unknown_command(c.args))),
    }
}

fn multi(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    if c.conn.multi.is_some() {
        return Err(err("ERR MULTI calls can not be nested"));
    }
    c.conn.multi = Some((Vec::new(), false));
    resp::ok(out);
    Ok(Next::Continue)
}

fn watch(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    if c.conn.multi.is_some() {
        return Err(err("ERR WATCH inside MULTI is not allowed"));
    }
    for k in &c.args[1..] {
        let version = version_of(c.store, k)?;
        c.conn.watched.push((k.to_vec(), version));
    }
    resp::ok(out);
    Ok(Next::Continue)
}

/// The version of the live record of `key` (`None`: absent).
fn version_of(store: &dyn Store, key: &[u8]) -> Result<Option<u64>, Error> {
    let mut v = None;
    store.view(key, &mut |_, m| v = Some(m.version))?;
    Ok(v)
}

/// EXEC: nothing when a queued command was refused (`EXECABORT`) or a WATCHed key changed
/// (a null array); the queued `SET key value` and `MSET` of a transaction of only those as
/// one atomic batch; else every queued command in turn, their replies in one array.
fn exec(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let Some((queue, failed)) = c.conn.multi.take() else {
        return Err(err("ERR EXEC without MULTI"));
    };
    let watched = std::mem::take(&mut c.conn.watched);
    if failed {
        return Err(err(
            "EXECABORT Transaction discarded because of previous errors.",
        ));
    }
    for (k, v) in &watched {
        if version_of(c.store, k)? != *v {
            resp::null_array(out, c.resp3());
            return Ok(Next::Continue);
        }
    }
    let batch = !queue.is_empty()
        && queue.iter().all(|q| {
            let n = lookup(&q[0]).map(|i| COMMANDS[i].name);
            (n == Some("set") && q.len() == 3) || (n == Some("mset") && !q.len().is_multiple_of(2))
        });
    if batch {
        let mut ops = Vec::new();
        for q in &queue {
            for kv in q[1..].chunks(2) {
                if let Err(e) = c.shared.check_value("Redis EXEC", kv[1].len()) {
                    return Err(err(format!("ERR {e}")));
                }
                ops.push(BatchOp::Put {
                    key: kv[0].clone(),
                    value: kv[1].clone(),
                    flags: 0,
                    expires: 0,
                });
            }
        }
        c.store.write_batch(&ops)?;
        c.shared.cmd_set.add(ops.len() as u64);
        resp::array(out, queue.len());
        for _ in &queue {
            resp::ok(out);
        }
        return Ok(Next::Continue);
    }
    resp::array(out, queue.len());
    let mut next = Next::Continue;
    for q in &queue {
        let args: Vec<&[u8]> = q.iter().map(|a| &a[..]).collect();
        let (store, shared, now) = (c.store, c.shared, c.now);
        if run_args(store, shared, c.conn, c.session, &args, now, out) == Next::Close {
            next = Next::Close;
        }
    }
    Ok(next)
}

/// Drop a connection's open SCAN cursors beyond [`MAX_SCANS`], the oldest first.
fn keep_scans(conn: &mut RedisConn<'_>) {
    while conn.scans.len() > MAX_SCANS {
        conn.scans.remove(0);
    }
}

#[cfg(test)]
mod tests;
