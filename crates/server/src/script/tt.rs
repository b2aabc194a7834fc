//! Tokyo Tyrant's script interface (`kura serve --ext FILE`): the `ext` call ([`ext`], for the
//! binary protocol's 0xC8 0x68 and HTTP POST with `X-TT-XNAME`), the timer calls of `--extpc`
//! ([`extpc`]) and the built-ins a script calls (`_put`, `_get`, …, the globals `_version _pid
//! _sid _thnum _thid`, the hooks `_begin` and `_end`), as Tyrant's `scrext.c` gives them.
//!
//! Every database built-in goes through the server's store (so the update log and replicas see
//! its writes) and is masked as the same operation from the calling protocol: a refused one
//! fails as it fails in Tyrant (false, nil, 0), and its reason is the call's last error, which
//! a client reads with `misc error` (the reason of the last failure on its connection).
//! The locks of `ext`'s options, the user locks, the stash and `_eval`'s expressions are the
//! server's ([`super::tt_lock::ExtShared`]).

use super::tt_lock::{self, ExtShared};
use super::{ctx, with_interp, CallError, Ctx, Flavor, Scripts};
use crate::context::Shared;
use crate::mask::{Op, Proto};
use crate::tt_exec::{self, Applied, TtState};
use kura_engine::{Error, Store, TokyoOps};
use kura_proto::tt_bin::Request;
use mlua::{Function, Lua, Table, Value, Variadic};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What one interpreter keeps for Tyrant's built-ins (its app data).
struct TtInterp {
    /// Why the last built-in of the current call failed (a refusal, an engine error).
    last_error: RefCell<Option<String>>,
    /// How many of `_eval`'s expressions this interpreter has run (or skipped, being newer).
    evals_seen: Cell<usize>,
    /// `ExtShared::eval_stamp` when this interpreter last looked at the `_eval`s.
    eval_stamp: Cell<u64>,
    /// The first call has set this interpreter up (`_begin`, the `_eval`s to skip).
    prepared: Cell<bool>,
    /// This interpreter ran `_begin` and runs `_end` (Tyrant's first worker's role).
    primary: Cell<bool>,
    /// The budget of a call (for `_end`, run outside a call).
    timeout: Duration,
    log: crate::context::LogSink,
    /// The server's stash and user locks (reachable outside a call too: from `_end`).
    ext: Arc<ExtShared>,
}

static NEXT_THID: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    /// This thread's `_thid` (1, 2, … in the order threads first run a script).
    static THID: usize = NEXT_THID.fetch_add(1, Ordering::Relaxed);
}

fn state(lua: &Lua) -> mlua::Result<mlua::AppDataRef<'_, TtInterp>> {
    lua.app_data_ref::<TtInterp>()
        .ok_or_else(|| mlua::Error::RuntimeError("not a Tyrant interpreter".into()))
}

/// Note why a built-in failed (the call's last error).
fn set_error(lua: &Lua, why: String) {
    if let Some(s) = lua.app_data_ref::<TtInterp>() {
        *s.last_error.borrow_mut() = Some(why);
    }
}

/// Whether the mask refuses `op` on the calling protocol; the reason is noted.
fn denied(lua: &Lua, c: &Ctx<'_>, op: Op) -> bool {
    match c.shared.verdict(|m| m.denies(op, c.proto)) {
        None => false,
        Some(by_mask) => {
            let why = c
                .shared
                .read_only_refusal(by_mask)
                .unwrap_or_else(|| format!("{} refused by --mask", op.name()));
            set_error(lua, why);
            true
        }
    }
}

/// An engine result as Tyrant's built-ins see it: an error is a failure with its reason.
fn done<T>(lua: &Lua, r: Result<T, Error>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            set_error(lua, e.to_string());
            None
        }
    }
}

fn invalid(name: &str) -> mlua::Error {
    mlua::Error::RuntimeError(format!("{name}: invalid arguments"))
}

/// Argument `i` as bytes, as `lua_tolstring` takes it (a string or a number).
fn bytes(lua: &Lua, args: &[Value], i: usize, name: &str) -> mlua::Result<Vec<u8>> {
    match args.get(i) {
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(v @ (Value::Integer(_) | Value::Number(_))) => lua
            .coerce_string(v.clone())?
            .map(|s| s.as_bytes().to_vec())
            .ok_or_else(|| invalid(name)),
        _ => Err(invalid(name)),
    }
}

fn number(args: &[Value], i: usize, name: &str) -> mlua::Result<f64> {
    match args.get(i) {
        Some(Value::Integer(n)) => Ok(*n as f64),
        Some(Value::Number(n)) => Ok(*n),
        Some(Value::String(s)) => std::str::from_utf8(&s.as_bytes())
            .ok()
            .and_then(|t| t.trim().parse::<f64>().ok())
            .ok_or_else(|| invalid(name)),
        _ => Err(invalid(name)),
    }
}

fn argc(args: &[Value], n: usize, name: &str) -> mlua::Result<()> {
    if args.len() == n {
        Ok(())
    } else {
        Err(invalid(name))
    }
}

fn function(args: &[Value], i: usize, name: &str) -> mlua::Result<Function> {
    match args.get(i) {
        Some(Value::Function(f)) => Ok(f.clone()),
        _ => Err(invalid(name)),
    }
}

/// Strings and numbers among `args[from..]`, a table's elements in order (as `_misc` and
/// `_mapreduce` take a list).
fn flat(lua: &Lua, args: &[Value], from: usize) -> mlua::Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut push = |v: Value| -> mlua::Result<()> {
        match v {
            Value::String(s) => out.push(s.as_bytes().to_vec()),
            v @ (Value::Integer(_) | Value::Number(_)) => {
                if let Some(s) = lua.coerce_string(v)? {
                    out.push(s.as_bytes().to_vec());
                }
            }
            _ => {}
        }
        Ok(())
    };
    for a in args.iter().skip(from) {
        match a {
            Value::Table(t) => {
                for i in 1..=t.raw_len() {
                    push(t.raw_get::<Value>(i)?)?;
                }
            }
            v => push(v.clone())?,
        }
    }
    Ok(out)
}

fn list(lua: &Lua, items: impl IntoIterator<Item = Vec<u8>>) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    for (i, v) in items.into_iter().enumerate() {
        t.raw_set(i + 1, lua.create_string(v)?)?;
    }
    Ok(t)
}

fn string(lua: &Lua, b: &[u8]) -> mlua::Result<Value> {
    Ok(Value::String(lua.create_string(b)?))
}

/// Register a built-in taking its arguments as a list.
fn reg<F>(lua: &Lua, name: &str, f: F) -> mlua::Result<()>
where
    F: Fn(&Lua, &[Value]) -> mlua::Result<Value> + Send + 'static,
{
    let func = lua.create_function(move |lua, args: Variadic<Value>| f(lua, &args))?;
    lua.globals().set(name, func)
}

/// A Tyrant write through the executors' own mapping ([`tt_exec::apply`]): masked as `op`,
/// its value checked against `--max-value-size`; Tyrant's boolean.
fn write(lua: &Lua, op: Op, value_len: usize, req: Request<'_>) -> mlua::Result<Option<Applied>> {
    let c = ctx(lua)?;
    if denied(lua, &c, op) {
        return Ok(None);
    }
    if let Err(e) = c
        .shared
        .check_value(format_args!("ext _{}", op.name()), value_len)
    {
        set_error(lua, e.to_string());
        return Ok(None);
    }
    let r = tt_exec::apply(c.store, &req).unwrap_or(Ok(Applied::Done(false)));
    Ok(done(lua, r))
}

fn boolean(a: Option<Applied>) -> Value {
    Value::Boolean(matches!(a, Some(Applied::Done(true))))
}

/// Install Tyrant's built-ins in a new interpreter (before the script's top level runs).
pub fn install(lua: &Lua) -> mlua::Result<()> {
    let c = ctx(lua)?;
    let timeout = c
        .shared
        .scripts
        .as_ref()
        .map_or(super::DEFAULT_TIMEOUT, |s| s.conf.timeout);
    lua.set_app_data(TtInterp {
        last_error: RefCell::new(None),
        evals_seen: Cell::new(0),
        eval_stamp: Cell::new(u64::MAX),
        prepared: Cell::new(false),
        primary: Cell::new(false),
        timeout,
        log: c.shared.log.clone(),
        ext: c.shared.ext.clone(),
    });
    let g = lua.globals();
    g.set("_version", tt_exec::TT_VERSION)?;
    g.set("_pid", std::process::id())?;
    g.set("_sid", c.shared.sid)?;
    g.set("_thnum", c.shared.threads.max(1))?;
    g.set("_thid", THID.with(|t| *t))?;
    super::util::install_tyrant(lua)?;

    reg(lua, "_put", |lua, a| {
        argc(a, 2, "_put")?;
        let (k, v) = (bytes(lua, a, 0, "_put")?, bytes(lua, a, 1, "_put")?);
        let r = write(lua, Op::Put, v.len(), Request::Put { key: &k, value: &v })?;
        Ok(boolean(r))
    })?;
    reg(lua, "_putkeep", |lua, a| {
        argc(a, 2, "_putkeep")?;
        let (k, v) = (bytes(lua, a, 0, "_putkeep")?, bytes(lua, a, 1, "_putkeep")?);
        let req = Request::PutKeep { key: &k, value: &v };
        Ok(boolean(write(lua, Op::PutKeep, v.len(), req)?))
    })?;
    reg(lua, "_putcat", |lua, a| {
        argc(a, 2, "_putcat")?;
        let (k, v) = (bytes(lua, a, 0, "_putcat")?, bytes(lua, a, 1, "_putcat")?);
        let req = Request::PutCat { key: &k, value: &v };
        Ok(boolean(write(lua, Op::PutCat, v.len(), req)?))
    })?;
    reg(lua, "_out", |lua, a| {
        argc(a, 1, "_out")?;
        let k = bytes(lua, a, 0, "_out")?;
        Ok(boolean(write(lua, Op::Out, 0, Request::Out { key: &k })?))
    })?;
    reg(lua, "_vanish", |lua, a| {
        argc(a, 0, "_vanish")?;
        Ok(boolean(write(lua, Op::Vanish, 0, Request::Vanish)?))
    })?;
    reg(lua, "_addint", |lua, a| {
        argc(a, 2, "_addint")?;
        let k = bytes(lua, a, 0, "_addint")?;
        let n = number(a, 1, "_addint")?;
        // Lua's number to C's int, as `(int)lua_tonumber` (saturated here, not undefined).
        let req = Request::AddInt {
            key: &k,
            num: n as i32,
        };
        Ok(match write(lua, Op::AddInt, 0, req)? {
            Some(Applied::Int(n)) => Value::Number(f64::from(n)),
            _ => Value::Nil,
        })
    })?;
    reg(lua, "_adddouble", |lua, a| {
        argc(a, 2, "_adddouble")?;
        let k = bytes(lua, a, 0, "_adddouble")?;
        let n = number(a, 1, "_adddouble")?;
        let c = ctx(lua)?;
        if denied(lua, &c, Op::AddDouble) {
            return Ok(Value::Nil);
        }
        // As the executors: a NaN sum (Tyrant's failure value) is a failure.
        Ok(match c.store.adddouble(&k, n) {
            Ok(sum) if !sum.is_nan() => Value::Number(sum),
            Ok(_) => Value::Nil,
            Err(e) => {
                set_error(lua, e.to_string());
                Value::Nil
            }
        })
    })?;
    reg(lua, "_get", |lua, a| {
        argc(a, 1, "_get")?;
        let k = bytes(lua, a, 0, "_get")?;
        let c = ctx(lua)?;
        if denied(lua, &c, Op::Get) {
            return Ok(Value::Nil);
        }
        match done(lua, c.store.get(&k)).flatten() {
            Some(r) => string(lua, &r.value),
            None => Ok(Value::Nil),
        }
    })?;
    reg(lua, "_vsiz", |lua, a| {
        argc(a, 1, "_vsiz")?;
        let k = bytes(lua, a, 0, "_vsiz")?;
        let c = ctx(lua)?;
        if denied(lua, &c, Op::Vsiz) {
            return Ok(Value::Number(-1.0));
        }
        Ok(Value::Number(
            done(lua, c.store.vsiz(&k))
                .flatten()
                .map_or(-1.0, |n| n as f64),
        ))
    })?;
    reg(lua, "_iterinit", |lua, a| {
        argc(a, 0, "_iterinit")?;
        let c = ctx(lua)?;
        if denied(lua, &c, Op::IterInit) {
            return Ok(Value::Boolean(false));
        }
        // The server's iteration, as Tyrant's (one per server, shared with `iterinit`).
        let mut st = TtState::of_server(c.shared);
        Ok(Value::Boolean(
            done(lua, st.iter_init(c.store, None)).unwrap_or(false),
        ))
    })?;
    reg(lua, "_iternext", |lua, a| {
        argc(a, 0, "_iternext")?;
        let c = ctx(lua)?;
        if denied(lua, &c, Op::IterNext) {
            return Ok(Value::Nil);
        }
        let mut st = TtState::of_server(c.shared);
        match done(lua, st.iter_next(c.store)).flatten() {
            Some((k, _)) => string(lua, &k),
            None => Ok(Value::Nil),
        }
    })?;
    reg(lua, "_fwmkeys", |lua, a| {
        if a.is_empty() {
            return Err(invalid("_fwmkeys"));
        }
        let p = bytes(lua, a, 0, "_fwmkeys")?;
        let max = match a.get(1) {
            Some(Value::Integer(n)) if *n >= 0 => *n as usize,
            Some(Value::Number(n)) if *n >= 0.0 => *n as usize,
            _ => usize::MAX,
        };
        let c = ctx(lua)?;
        if denied(lua, &c, Op::Fwmkeys) {
            return Ok(Value::Table(lua.create_table()?));
        }
        let keys = done(lua, tt_exec::prefix_keys(c.store, &p, max)).unwrap_or_default();
        Ok(Value::Table(list(lua, keys)?))
    })?;
    reg(lua, "_rnum", |lua, a| {
        argc(a, 0, "_rnum")?;
        let c = ctx(lua)?;
        let n = if denied(lua, &c, Op::Rnum) {
            0
        } else {
            c.store.count()
        };
        Ok(Value::Number(n as f64))
    })?;
    reg(lua, "_size", |lua, a| {
        argc(a, 0, "_size")?;
        let c = ctx(lua)?;
        let n = if denied(lua, &c, Op::Size) {
            0
        } else {
            c.store.size()
        };
        Ok(Value::Number(n as f64))
    })?;
    reg(lua, "_misc", misc)?;
    reg(lua, "_foreach", foreach)?;
    reg(lua, "_mapreduce", mapreduce)?;
    install_stash(lua)?;
    install_locks(lua)?;
    reg(lua, "_eval", |lua, a| {
        argc(a, 1, "_eval")?;
        let expr = bytes(lua, a, 0, "_eval")?;
        let expr = String::from_utf8_lossy(&expr).into_owned();
        let c = ctx(lua)?;
        let ok = run_logged(lua, &c.shared.log, &expr, "_eval");
        // Every other interpreter of this script runs it before its next call.
        let generation = c.shared.scripts.as_ref().map_or(0, |s| s.generation());
        let mut evals = c.shared.ext.evals.lock().unwrap_or_else(|p| p.into_inner());
        if evals.0 != generation {
            *evals = (generation, Vec::new());
        }
        evals.1.push(expr);
        let st = state(lua)?;
        st.evals_seen.set(evals.1.len());
        st.eval_stamp
            .set(c.shared.ext.eval_stamp.fetch_add(1, Ordering::AcqRel) + 1);
        Ok(Value::Boolean(ok))
    })?;
    reg(lua, "_log", |lua, a| {
        if a.is_empty() {
            return Err(invalid("_log"));
        }
        let msg = bytes(lua, a, 0, "_log")?;
        // The interpreter's own sink: `_end` logs outside a call.
        state(lua)?
            .log
            .line(&format!("ext: {}", String::from_utf8_lossy(&msg)));
        Ok(Value::Nil)
    })?;
    Ok(())
}

/// Run `expr` in `lua`; a failure is logged. Whether it ran.
fn run_logged(lua: &Lua, log: &crate::context::LogSink, expr: &str, what: &str) -> bool {
    match lua.load(expr).set_name(format!("={what}")).exec() {
        Ok(()) => true,
        Err(e) => {
            log.line(&format!("ext {what}: Lua error: {}", super::one_line(&e)));
            false
        }
    }
}

/// `_misc(name, args…)`: Tyrant's misc function on the database (tt_exec's), masked as
/// `misc` is (a function that only reads is refused by `--mask misc` alone, never by a
/// read-only replica). A name starting with `$` does not go to the update log, as in
/// Tyrant (its change then reaches no replica).
fn misc(lua: &Lua, a: &[Value]) -> mlua::Result<Value> {
    if a.is_empty() {
        return Err(invalid("_misc"));
    }
    let name = bytes(lua, a, 0, "_misc")?;
    let (name, unlogged) = match name.strip_prefix(b"$") {
        Some(n) => (n.to_vec(), true),
        None => (name, false),
    };
    let args = flat(lua, a, 1)?;
    let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    let c = ctx(lua)?;
    if tt_exec::misc_denied(c.shared, &name, &args, c.proto) {
        let by_mask = c.shared.mask.get().denies(Op::Misc, c.proto);
        let why = c.shared.read_only_refusal(by_mask).unwrap_or_else(|| {
            format!("misc {} refused by --mask", String::from_utf8_lossy(&name))
        });
        set_error(lua, why);
        return Ok(Value::Nil);
    }
    // Beneath the update log: the logged store's own database, still under the record locks.
    let raw: Option<Arc<dyn Store>> = if unlogged {
        c.shared
            .repl
            .as_ref()
            .and_then(|r| r.logged.as_ref())
            .map(|l| {
                Arc::new(tt_lock::Locked::new(
                    l.inner().clone(),
                    c.shared.ext.clone(),
                )) as Arc<dyn Store>
            })
    } else {
        None
    };
    let store: &dyn Store = raw.as_deref().unwrap_or(c.store);
    let mut st = TtState::of_server(c.shared);
    match done(
        lua,
        tt_exec::server_misc(store, c.shared, &mut st, &name, &args),
    )
    .flatten()
    {
        Some(items) => Ok(Value::Table(list(lua, items)?)),
        None => Ok(Value::Nil),
    }
}

/// `_foreach(f)`: `f(key, value)` for every record until it returns a false value; true
/// unless the database failed. `f` may write (an expiry sweep removes records as it goes):
/// the records are read with a cursor, not under a lock.
fn foreach(lua: &Lua, a: &[Value]) -> mlua::Result<Value> {
    argc(a, 1, "_foreach")?;
    let f = function(a, 0, "_foreach")?;
    let c = ctx(lua)?;
    if denied(lua, &c, Op::IterNext) {
        return Ok(Value::Boolean(false));
    }
    let Some(mut cur) = done(lua, c.store.cursor()) else {
        return Ok(Value::Boolean(false));
    };
    loop {
        let Some(next) = done(lua, cur.next()) else {
            return Ok(Value::Boolean(false));
        };
        let Some((k, r)) = next else { break };
        let go: Value = f.call((lua.create_string(&k)?, lua.create_string(&r.value)?))?;
        if matches!(go, Value::Nil | Value::Boolean(false)) {
            break;
        }
    }
    Ok(Value::Boolean(true))
}

/// `_mapreduce(map, reduce[, keys])`: `map(key, value, emit)` for every record (or those of
/// `keys`), where `emit(k, v)` collects a pair; then `reduce(k, values)` for each key emitted,
/// in byte order, until one returns a false value (then false). The pairs are held in memory,
/// at most `--script-memory` bytes of them.
fn mapreduce(lua: &Lua, a: &[Value]) -> mlua::Result<Value> {
    if a.len() < 2 {
        return Err(invalid("_mapreduce"));
    }
    let map = function(a, 0, "_mapreduce")?;
    let reduce = function(a, 1, "_mapreduce")?;
    let keys = if a.len() > 2 {
        Some(flat(lua, a, 2)?)
    } else {
        None
    };
    let c = ctx(lua)?;
    if denied(lua, &c, Op::IterNext) {
        return Ok(Value::Boolean(false));
    }
    let limit = c
        .shared
        .scripts
        .as_ref()
        .map_or(super::DEFAULT_MEMORY, |s| s.conf.memory);
    let pool: Arc<std::sync::Mutex<Emitted>> = Arc::default();
    let emit = {
        let pool = pool.clone();
        lua.create_function(move |_, (k, v): (mlua::LuaString, mlua::LuaString)| {
            let mut p = pool.lock().unwrap_or_else(|e| e.into_inner());
            let (k, v) = (k.as_bytes().to_vec(), v.as_bytes().to_vec());
            p.1 += k.len() + v.len() + 32;
            if p.1 > limit {
                return Err(mlua::Error::RuntimeError(
                    "_mapreduce: the emitted pairs passed --script-memory".into(),
                ));
            }
            p.0.entry(k).or_default().push(v);
            Ok(true)
        })?
    };
    let visit = |k: &[u8], v: &[u8]| -> mlua::Result<()> {
        map.call::<Value>((lua.create_string(k)?, lua.create_string(v)?, emit.clone()))?;
        Ok(())
    };
    match keys {
        Some(keys) => {
            for k in keys {
                if let Some(Some(r)) = done(lua, c.store.get(&k)) {
                    visit(&k, &r.value)?;
                }
            }
        }
        None => {
            let Some(mut cur) = done(lua, c.store.cursor()) else {
                return Ok(Value::Boolean(false));
            };
            while let Some(Some((k, r))) = done(lua, cur.next()) {
                visit(&k, &r.value)?;
            }
        }
    }
    let pairs = std::mem::take(&mut pool.lock().unwrap_or_else(|e| e.into_inner()).0);
    for (k, vs) in pairs {
        let ok: Value = reduce.call((lua.create_string(&k)?, list(lua, vs)?))?;
        if matches!(ok, Value::Nil | Value::Boolean(false)) {
            return Ok(Value::Boolean(false));
        }
    }
    Ok(Value::Boolean(true))
}

/// `_mapreduce`'s emitted pairs by key, and their bytes.
type Emitted = (BTreeMap<Vec<u8>, Vec<Vec<u8>>>, usize);

fn stash(lua: &Lua) -> mlua::Result<Arc<ExtShared>> {
    Ok(state(lua)?.ext.clone())
}

/// The stash: a map of the server's, in memory (Tyrant's `_stash*`).
fn install_stash(lua: &Lua) -> mlua::Result<()> {
    fn put(lua: &Lua, a: &[Value], name: &str, how: u8) -> mlua::Result<Value> {
        argc(a, 2, name)?;
        let (k, v) = (bytes(lua, a, 0, name)?, bytes(lua, a, 1, name)?);
        let ext = stash(lua)?;
        let mut m = ext.stash.lock().unwrap_or_else(|p| p.into_inner());
        let stored = match how {
            b'p' => {
                m.insert(k, v);
                true
            }
            b'k' => match m.entry(k) {
                std::collections::hash_map::Entry::Occupied(_) => false,
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(v);
                    true
                }
            },
            _ => {
                m.entry(k).or_default().extend_from_slice(&v);
                true
            }
        };
        Ok(Value::Boolean(stored))
    }
    reg(lua, "_stashput", |lua, a| put(lua, a, "_stashput", b'p'))?;
    reg(lua, "_stashputkeep", |lua, a| {
        put(lua, a, "_stashputkeep", b'k')
    })?;
    reg(lua, "_stashputcat", |lua, a| {
        put(lua, a, "_stashputcat", b'c')
    })?;
    reg(lua, "_stashout", |lua, a| {
        argc(a, 1, "_stashout")?;
        let k = bytes(lua, a, 0, "_stashout")?;
        let ext = stash(lua)?;
        let gone = ext
            .stash
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&k)
            .is_some();
        Ok(Value::Boolean(gone))
    })?;
    reg(lua, "_stashget", |lua, a| {
        argc(a, 1, "_stashget")?;
        let k = bytes(lua, a, 0, "_stashget")?;
        let ext = stash(lua)?;
        let v = ext
            .stash
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&k)
            .cloned();
        match v {
            Some(v) => string(lua, &v),
            None => Ok(Value::Nil),
        }
    })?;
    reg(lua, "_stashvanish", |lua, a| {
        argc(a, 0, "_stashvanish")?;
        stash(lua)?
            .stash
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        Ok(Value::Nil)
    })?;
    reg(lua, "_stashforeach", |lua, a| {
        argc(a, 1, "_stashforeach")?;
        let f = function(a, 0, "_stashforeach")?;
        // A copy: `f` may change the stash.
        let all: Vec<(Vec<u8>, Vec<u8>)> = stash(lua)?
            .stash
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (k, v) in all {
            let go: Value = f.call((lua.create_string(&k)?, lua.create_string(&v)?))?;
            if matches!(go, Value::Nil | Value::Boolean(false)) {
                break;
            }
        }
        Ok(Value::Nil)
    })
}

/// Tyrant's user locks: `_lock(key)` waits until no other call holds `key`, then holds it
/// (false when the call's time budget runs out first); `_unlock(key)` lets it go (false when
/// it was not held). Held across calls until unlocked, server-wide, as in Tyrant.
fn install_locks(lua: &Lua) -> mlua::Result<()> {
    reg(lua, "_lock", |lua, a| {
        argc(a, 1, "_lock")?;
        let k = bytes(lua, a, 0, "_lock")?;
        let ext = stash(lua)?;
        let deadline = Instant::now() + super::time_left(lua).unwrap_or(state(lua)?.timeout);
        loop {
            if ext
                .user_locks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(k.clone())
            {
                return Ok(Value::Boolean(true));
            }
            if Instant::now() >= deadline {
                set_error(lua, "_lock: still held by another call".into());
                return Ok(Value::Boolean(false));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    })?;
    reg(lua, "_unlock", |lua, a| {
        argc(a, 1, "_unlock")?;
        let k = bytes(lua, a, 0, "_unlock")?;
        let held = stash(lua)?
            .user_locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&k);
        Ok(Value::Boolean(held))
    })
}

/// Set up an interpreter at its first call (it runs `_begin` when it is the first of its
/// script's generation), then run the `_eval`s of its script it has not run.
fn prepare(lua: &Lua, scripts: &Scripts) -> mlua::Result<()> {
    let c = ctx(lua)?;
    let st = state(lua)?;
    let mut pending = Vec::new();
    // Only when an `_eval` came since this interpreter last looked (no lock otherwise).
    let stamp = c.shared.ext.eval_stamp.load(Ordering::Acquire);
    if stamp != st.eval_stamp.get() {
        st.eval_stamp.set(stamp);
        // A new interpreter runs every `_eval` of its script made so far, as if it had been
        // there (ttserver's interpreters all exist from the start).
        let evals = c.shared.ext.evals.lock().unwrap_or_else(|p| p.into_inner());
        if evals.0 == scripts.generation() && st.evals_seen.get() < evals.1.len() {
            pending.extend(evals.1[st.evals_seen.get()..].iter().cloned());
            st.evals_seen.set(evals.1.len());
        }
    }
    if !st.prepared.get() {
        st.prepared.set(true);
        let generation = scripts.generation();
        if c.shared.ext.begun.swap(generation, Ordering::SeqCst) != generation {
            st.primary.set(true);
            drop(st);
            if let Value::Function(f) = lua.globals().get::<Value>("_begin")? {
                f.call::<()>(())?;
            }
        }
    }
    for expr in pending {
        run_logged(lua, &c.shared.log, &expr, "_eval");
    }
    Ok(())
}

/// Run `_end` in an interpreter being dropped (replaced after a reload, or its thread ending)
/// when it is the one that ran `_begin`. It runs outside a call: the database built-ins fail
/// there; it is stopped past `--script-timeout`.
pub fn end(lua: &Lua) {
    let Some((timeout, log)) = lua
        .app_data_ref::<TtInterp>()
        .filter(|s| s.primary.get())
        .map(|s| (s.timeout, s.log.clone()))
    else {
        return;
    };
    let Ok(Value::Function(f)) = lua.globals().get::<Value>("_end") else {
        return;
    };
    let deadline = Instant::now() + timeout;
    let _ = lua.set_global_hook(
        mlua::HookTriggers::new().every_nth_instruction(super::HOOK_INSTRUCTIONS),
        move |_, _| {
            if Instant::now() >= deadline {
                return Err(mlua::Error::RuntimeError("script timeout".into()));
            }
            Ok(mlua::VmState::Continue)
        },
    );
    if let Err(e) = f.call::<()>(()) {
        log.line(&format!("ext _end: Lua error: {}", super::one_line(&e)));
    }
}

/// A function's result as Tyrant's reply body (`scrextcallmethod`): a string or a number as
/// its text, `true` as "true", a table by its first element; anything else (nil, false) is
/// no result.
fn result_bytes(lua: &Lua, v: &Value, nested: bool) -> mlua::Result<Option<Vec<u8>>> {
    Ok(match v {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Integer(_) | Value::Number(_) => {
            lua.coerce_string(v.clone())?.map(|s| s.as_bytes().to_vec())
        }
        Value::Boolean(true) => Some(b"true".to_vec()),
        Value::Table(t) if !nested => result_bytes(lua, &t.raw_get::<Value>(1)?, true)?,
        _ => None,
    })
}

/// A string argument as Tyrant's C code sees it: up to the first NUL byte.
fn c_str(b: &[u8]) -> &[u8] {
    b.iter().position(|&x| x == 0).map_or(b, |n| &b[..n])
}

/// Tyrant's `ext`: call the script's global function `name(key, value)` under the locks of
/// `opts` (1: the record of `key`, 2: every record). `Ok(body)`: its result; `Err(reason)`:
/// Tyrant's failure reply, with why (no script, no such function, a nil result, a Lua
/// error with its line, the time budget), for `misc error`. Lua errors and timeouts are also
/// logged (at a bounded pace).
pub fn ext(
    store: &dyn Store,
    shared: &Shared,
    proto: Proto,
    name: &[u8],
    opts: u32,
    key: &[u8],
    value: &[u8],
) -> Result<Vec<u8>, String> {
    let name = c_str(name);
    let shown = String::from_utf8_lossy(name);
    let Some(scripts) = shared.scripts.as_ref() else {
        return Err("no --ext script is loaded".into());
    };
    if name.is_empty() || name[0] == b'_' {
        // The built-ins and the hooks are not functions a client calls.
        return Err(format!("ext `{shown}`: not a function a client may call"));
    }
    let _hold = tt_lock::hold(&shared.ext, opts, key);
    let call = Ctx {
        store,
        shared,
        proto,
    };
    let r = with_interp(scripts, Flavor::Tyrant, call, |lua| {
        prepare(lua, scripts)?;
        state(lua)?.last_error.replace(None);
        let f = match lua.globals().raw_get::<Value>(lua.create_string(name)?)? {
            Value::Function(f) => f,
            _ => {
                return Ok(Err(format!(
                    "ext `{shown}`: no such function in the --ext script"
                )))
            }
        };
        let out: Value = f.call((lua.create_string(key)?, lua.create_string(value)?))?;
        let st = state(lua)?;
        Ok(match result_bytes(lua, &out, false)? {
            Some(b) => Ok(b),
            None => Err(match st.last_error.take() {
                Some(why) => format!("ext `{shown}` returned no result (last failure: {why})"),
                None => format!("ext `{shown}` returned no result"),
            }),
        })
    });
    match r {
        Ok(r) => r,
        Err(CallError::NoScript) => Err("no --ext script is loaded".into()),
        Err(e) => {
            let why = match &e {
                CallError::Lua(m) => format!("ext `{shown}`: Lua error: {m}"),
                other => format!("ext `{shown}`: {other}"),
            };
            shared.log.limited("ext error", &why);
            shared.ext.note_error(&why);
            Err(why)
        }
    }
}

/// `--extpc NAME PERIOD`: call `NAME("", "")` every `period` until `stop`, in this thread's
/// own interpreter (as ttserver's timer threads do). Failures other than a nil result are
/// logged ([`ext`]).
pub fn extpc(
    store: Arc<dyn Store>,
    shared: Arc<Shared>,
    name: String,
    period: Duration,
    stop: Arc<AtomicBool>,
) {
    let mut next = Instant::now() + period;
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        if now < next {
            std::thread::sleep((next - now).min(Duration::from_millis(50)));
            continue;
        }
        next = now + period;
        let _ = ext(
            &*store,
            &shared,
            Proto::Tyrant,
            name.as_bytes(),
            0,
            b"",
            b"",
        );
    }
}

#[cfg(test)]
#[path = "tt_tests.rs"]
mod tests;
