//! `kt.db`: Kyoto Tycoon's database object for scripts (`myscript.cc`'s `DB` methods).
//!
//! * The record methods run the RPC's own procedures (`http_exec::rpc::procedure`) with the
//!   method's arguments as the procedure's input: the same masking (as Kyoto Tycoon's
//!   protocols, `Proto::Http`), `--max-value-size`, counters, expiration and store operations
//!   as a client's call. A refused or failed method returns what Kyoto Tycoon's returns on
//!   failure (false, nil or -1) and `db:error()` says why: a refusal by `--mask` or a
//!   read-only replica is `NOPERM`.
//! * `accept` and `iterate` call the visitor outside any lock (it may use the database), then
//!   write its decision only if the record is still the one it saw (by version), and call it
//!   again otherwise: each record's visit is atomic; `iterate` as a whole is not (Kyoto
//!   Cabinet's blocks every other writer for the whole walk).
//! * `transaction(proc, hard)`: one script transaction at a time (a process-wide lock); every
//!   record the script writes inside it is first saved in an undo record, and when `proc`
//!   returns false or raises an error every saved record is put back in one atomic batch
//!   (through the same store, so the update log and replicas see the restore). Writers other
//!   than scripts are not held off: one that writes a key the transaction also wrote, while it
//!   runs, is overwritten by an abort. The undo record is bounded by `--script-memory`.
//! * `mapreduce(map, reduce, …)` keeps the emitted records in memory, bounded by
//!   `--script-memory`; `tmppath`, `opts`, `dbnum`, `clim`, `cbnum` and `log` are accepted
//!   and ignored.
//! * `copy(dest)` is a hot copy confined to `--backup-dir` (refused without it), as the
//!   network copies are (`crate::backup`).

use super::cur;
use super::{NOP, REMOVE};
use crate::backup;
use crate::context::Shared;
use crate::http_exec::{engine_error, rpc};
use crate::kt_common::{kt_expiry, Input, Output, XT_MAX};
use crate::kt_cursor::KtCursors;
use crate::mask::Op;
use crate::script::{ctx, one_line, Ctx, DEFAULT_MEMORY};
use kura_engine::{BatchOp, Decision, Record, Store, Value as Stored};
use mlua::{
    AnyUserData, Function, Lua, MetaMethod, MultiValue, Table, UserData, UserDataMethods, Value,
};
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Mutex;

/// Kyoto Cabinet's error codes: (code, `kt.Error` name, readable name).
pub(super) const ERRORS: &[(i64, &str, &str)] = &[
    (0, "SUCCESS", "success"),
    (1, "NOIMPL", "not implemented"),
    (2, "INVALID", "invalid operation"),
    (3, "NOREPOS", "no repository"),
    (4, "NOPERM", "no permission"),
    (5, "BROKEN", "broken file"),
    (6, "DUPREC", "record duplication"),
    (7, "NOREC", "no record"),
    (8, "LOGIC", "logical inconsistency"),
    (9, "SYSTEM", "system error"),
    (15, "MISC", "miscellaneous error"),
];

pub(super) const NOIMPL: i64 = 1;
pub(super) const INVALID: i64 = 2;
pub(super) const NOPERM: i64 = 4;
pub(super) const NOREC: i64 = 7;
pub(super) const LOGIC: i64 = 8;
pub(super) const SYSTEM: i64 = 9;

fn error_name(code: i64) -> &'static str {
    ERRORS
        .iter()
        .find(|e| e.0 == code)
        .map_or("miscellaneous error", |e| e.2)
}

/// An error object (`db:error()`, `cur:error()`).
#[derive(Clone, Debug)]
pub(super) struct KtError {
    pub code: i64,
    pub message: String,
}

impl UserData for KtError {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("code", |_, e, ()| Ok(e.code));
        m.add_method("name", |_, e, ()| Ok(error_name(e.code)));
        m.add_method("message", |_, e, ()| Ok(e.message.clone()));
        m.add_meta_method(MetaMethod::ToString, |_, e, ()| {
            Ok(format!("{}: {}", error_name(e.code), e.message))
        });
    }
}

/// The last error of a database or cursor object.
#[derive(Debug)]
pub(super) struct LastError(RefCell<KtError>);

impl Default for LastError {
    fn default() -> LastError {
        LastError(RefCell::new(KtError {
            code: 0,
            message: "no error".into(),
        }))
    }
}

impl LastError {
    pub fn set(&self, code: i64, message: impl Into<String>) {
        *self.0.borrow_mut() = KtError {
            code,
            message: message.into(),
        };
    }

    pub fn get(&self) -> KtError {
        self.0.borrow().clone()
    }

    /// A failed RPC procedure's status and `ERROR` text (`DB: code: name: message` when it
    /// is Kyoto Cabinet's).
    fn set_failed(&self, status: u16, text: Option<&[u8]>) {
        let text = text.map_or_else(String::new, |t| String::from_utf8_lossy(t).into_owned());
        if let Some(rest) = text.strip_prefix("DB: ") {
            let mut parts = rest.splitn(3, ": ");
            if let (Some(code), Some(_), Some(msg)) = (parts.next(), parts.next(), parts.next()) {
                if let Ok(code) = code.parse() {
                    return self.set(code, msg);
                }
            }
        }
        let code = match status {
            403 => NOPERM,
            400 => INVALID,
            450 => LOGIC,
            501 => NOIMPL,
            _ => SYSTEM,
        };
        self.set(code, text);
    }

    /// A request the mask refuses.
    pub fn refused(&self, shared: &Shared, by_mask: bool) {
        let why = shared.read_only_refusal(by_mask);
        self.set(NOPERM, why.unwrap_or_else(|| "forbidden by --mask".into()));
    }

    /// An engine error.
    pub fn engine(&self, e: &kura_engine::Error) {
        let (status, text) = engine_error(e);
        self.set_failed(status, Some(text.as_bytes()));
    }
}

/// The database object.
#[derive(Default)]
pub(super) struct KtDb {
    pub err: LastError,
}

pub(super) fn new(lua: &Lua) -> mlua::Result<AnyUserData> {
    lua.create_userdata(KtDb::default())
}

/// Unix seconds now.
pub(super) fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub(super) fn invalid(method: &str, what: &str) -> mlua::Error {
    mlua::Error::RuntimeError(format!("{method}: invalid arguments ({what})"))
}

/// A string argument (numbers as Lua writes them, as `lua_tolstring` takes them).
pub(super) fn bytes(lua: &Lua, v: Value, method: &str, what: &str) -> mlua::Result<Vec<u8>> {
    opt_bytes(lua, v, method, what)?.ok_or_else(|| invalid(method, &format!("{what} is missing")))
}

/// An optional string argument: nil is none.
pub(super) fn opt_bytes(
    lua: &Lua,
    v: Value,
    method: &str,
    what: &str,
) -> mlua::Result<Option<Vec<u8>>> {
    match v {
        Value::Nil => Ok(None),
        Value::String(s) => Ok(Some(s.as_bytes().to_vec())),
        Value::Integer(_) | Value::Number(_) => {
            Ok(lua.coerce_string(v)?.map(|s| s.as_bytes().to_vec()))
        }
        _ => Err(invalid(
            method,
            &format!("{what} must be a string, not {}", v.type_name()),
        )),
    }
}

/// An optional number argument: nil is none.
pub(super) fn opt_number(
    lua: &Lua,
    v: Value,
    method: &str,
    what: &str,
) -> mlua::Result<Option<f64>> {
    match v {
        Value::Nil => Ok(None),
        Value::Integer(i) => Ok(Some(i as f64)),
        Value::Number(n) => Ok(Some(n)),
        Value::String(_) => match lua.coerce_number(v)? {
            Some(n) => Ok(Some(n)),
            None => Err(invalid(method, &format!("{what} must be a number"))),
        },
        _ => Err(invalid(
            method,
            &format!("{what} must be a number, not {}", v.type_name()),
        )),
    }
}

/// An `xt` argument as the RPC's `xt` parameter: seconds from now, or (negative) an
/// absolute time; none: no expiration.
fn xt_param(lua: &Lua, v: Value, method: &str) -> mlua::Result<Option<Vec<u8>>> {
    Ok(opt_number(lua, v, method, "xt")?.map(|n| format!("{}", n as i64).into_bytes()))
}

/// Whether the mask refuses `op` from the calling protocol; the error is set when it does.
pub(super) fn denied(c: &Ctx<'_>, op: Op, err: &LastError) -> bool {
    match c.shared.verdict(|m| m.denies(op, c.proto)) {
        Some(by_mask) => {
            err.refused(c.shared, by_mask);
            true
        }
        None => false,
    }
}

/// The limit on what a script keeps outside Lua (mapreduce's records, an undo record).
fn memory_limit(shared: &Shared) -> usize {
    shared
        .scripts
        .as_ref()
        .map_or(DEFAULT_MEMORY, |s| s.conf.memory)
}

// ----- the transaction's undo record -----

/// The records a running transaction has written, as they were before its first write.
struct Undo {
    old: BTreeMap<Vec<u8>, Option<Record>>,
    bytes: usize,
    limit: usize,
}

thread_local! {
    static UNDO: RefCell<Option<Undo>> = const { RefCell::new(None) };
}

/// One script transaction at a time.
static TXN_LOCK: Mutex<()> = Mutex::new(());

/// Before a write of `key`: inside a transaction, save the record as it is unless it was
/// saved already. False when the undo record would pass its limit (the write must not
/// happen).
pub(super) fn note(store: &dyn Store, key: &[u8]) -> Result<bool, kura_engine::Error> {
    UNDO.with(|u| {
        let mut u = u.borrow_mut();
        let Some(u) = u.as_mut() else {
            return Ok(true);
        };
        if u.old.contains_key(key) {
            return Ok(true);
        }
        let old = store.get(key)?;
        u.bytes += key.len() + old.as_ref().map_or(0, |r| r.value.len()) + 64;
        if u.bytes > u.limit {
            return Ok(false);
        }
        u.old.insert(key.to_vec(), old);
        Ok(true)
    })
}

/// [`note`] for a method: false (and the error set) when the write must not happen.
pub(super) fn noted(c: &Ctx<'_>, key: &[u8], err: &LastError) -> bool {
    match note(c.store, key) {
        Ok(true) => true,
        Ok(false) => {
            err.set(
                LOGIC,
                "the transaction's undo record is past --script-memory",
            );
            false
        }
        Err(e) => {
            err.engine(&e);
            false
        }
    }
}

fn in_transaction() -> bool {
    UNDO.with(|u| u.borrow().is_some())
}

/// Ends the transaction's undo record however the transaction ends.
struct UndoGuard;

impl Drop for UndoGuard {
    fn drop(&mut self) {
        UNDO.with(|u| u.borrow_mut().take());
    }
}

/// Put back every record an aborted transaction wrote, in one batch.
fn roll_back(store: &dyn Store, undo: Undo) -> Result<(), kura_engine::Error> {
    let ops: Vec<BatchOp> = undo
        .old
        .into_iter()
        .map(|(key, old)| match old {
            Some(r) => BatchOp::Put {
                key,
                value: r.value,
                flags: r.meta.flags,
                expires: r.meta.expires,
            },
            None => BatchOp::Remove { key },
        })
        .collect();
    if ops.is_empty() {
        return Ok(());
    }
    store.write_batch(&ops)
}

// ----- running an RPC procedure for a method -----

/// Run the RPC procedure `name` with `input` and the writes of `keys` noted; true on
/// success, else the error set from the procedure's answer.
fn procedure(
    lua: &Lua,
    err: &LastError,
    name: &str,
    input: &Input<'_>,
    keys: &[&[u8]],
    out: &mut Output,
) -> mlua::Result<bool> {
    let c = ctx(lua)?;
    for k in keys {
        if !noted(&c, k, err) {
            return Ok(false);
        }
    }
    let status = match rpc::procedure(
        c.store,
        c.shared,
        &mut KtCursors::new(),
        name.as_bytes(),
        input,
        now(),
        out,
    ) {
        Ok(status) => status,
        Err(e) => {
            err.engine(&e);
            return Ok(false);
        }
    };
    if status == 200 {
        return Ok(true);
    }
    err.set_failed(status, out.get(&b"ERROR"[..]).map(|v| &v[..]));
    Ok(false)
}

fn input(pairs: impl IntoIterator<Item = (&'static str, Option<Vec<u8>>)>) -> Input<'static> {
    pairs
        .into_iter()
        .filter_map(|(n, v)| v.map(|v| (Cow::Borrowed(n.as_bytes()), Cow::Owned(v))))
        .collect()
}

fn out_get<'o>(out: &'o Output, name: &str) -> Option<&'o [u8]> {
    out.get(name.as_bytes()).map(|v| &v[..])
}

/// A record's `xt` as the binding gives it: absolute, and `XT_MAX` for never.
pub(super) fn shown_xt(expires: u64) -> f64 {
    if expires == 0 {
        XT_MAX as f64
    } else {
        expires as f64
    }
}

/// The `_key` → index output of a match procedure as a Lua array, in the index's order.
fn matched(lua: &Lua, out: &Output) -> mlua::Result<Table> {
    let mut keys: Vec<(i64, &[u8])> = out
        .iter()
        .filter_map(|(n, v)| n.strip_prefix(b"_").map(|k| (crate::kt_common::atoi(v), k)))
        .collect();
    keys.sort();
    let t = lua.create_table()?;
    for (i, (_, k)) in keys.into_iter().enumerate() {
        t.raw_set(i + 1, lua.create_string(k)?)?;
    }
    Ok(t)
}

/// Keys of a table: an array's values, or a map's keys (Kyoto Tycoon's bulk methods take
/// arrays of keys; a map is accepted too).
fn key_list(lua: &Lua, t: &Table, method: &str) -> mlua::Result<Vec<Vec<u8>>> {
    let mut keys = Vec::new();
    if t.raw_len() > 0 {
        for v in t.sequence_values::<Value>() {
            keys.push(bytes(lua, v?, method, "a key")?);
        }
    } else {
        for pair in t.pairs::<Value, Value>() {
            keys.push(bytes(lua, pair?.0, method, "a key")?);
        }
    }
    Ok(keys)
}

// ----- visitors -----

/// What a visitor decided.
pub(super) enum Decided {
    Nop,
    Remove,
    /// A new value, and its `xt` when the visitor gave one.
    Set(Vec<u8>, Option<i64>),
}

/// Call a visitor (a function, or a table with `visit_full` / `visit_empty`) on a record or
/// on the empty space of `key`, and read its answer as myscript.cc's `SoftVisitor` does.
pub(super) fn visit(
    lua: &Lua,
    visitor: &Value,
    key: &[u8],
    rec: Option<&Record>,
) -> mlua::Result<Decided> {
    let k = lua.create_string(key)?;
    let (v, xt) = match rec {
        Some(r) => (
            Value::String(lua.create_string(&r.value)?),
            Value::Number(shown_xt(r.meta.expires)),
        ),
        None => (Value::Nil, Value::Nil),
    };
    let got: MultiValue = match visitor {
        Value::Function(f) => f.call((k, v, xt))?,
        Value::Table(t) => {
            let method = if rec.is_some() {
                "visit_full"
            } else {
                "visit_empty"
            };
            match t.get::<Value>(method)? {
                Value::Function(f) if rec.is_some() => f.call((t.clone(), k, v, xt))?,
                Value::Function(f) => f.call((t.clone(), k))?,
                _ => return Ok(Decided::Nop),
            }
        }
        _ => return Err(invalid("visitor", "a function or a table")),
    };
    let mut got = got.into_iter();
    let first = got.next().unwrap_or(Value::Nil);
    let second = got.next().unwrap_or(Value::Nil);
    Ok(match first {
        Value::LightUserData(p) if p.0 as usize == REMOVE => {
            if rec.is_some() {
                Decided::Remove
            } else {
                Decided::Nop
            }
        }
        Value::LightUserData(p) if p.0 as usize == NOP => Decided::Nop,
        Value::String(_) | Value::Integer(_) | Value::Number(_) => {
            let Some(s) = lua.coerce_string(first)? else {
                return Ok(Decided::Nop);
            };
            let xt = match second {
                Value::Integer(i) => Some(i),
                Value::Number(n) if n.is_finite() => Some(n as i64),
                _ => None,
            };
            Decided::Set(s.as_bytes().to_vec(), xt)
        }
        _ => Decided::Nop,
    })
}

/// The operation a decision is, for the mask.
pub(super) fn decided_op(d: &Decided) -> Option<Op> {
    match d {
        Decided::Nop => None,
        Decided::Remove => Some(Op::Out),
        Decided::Set(..) => Some(Op::Put),
    }
}

/// The absolute expiration of a visitor's new value: its `xt` as Kyoto Tycoon reads one,
/// else the record's own (a full visit) or never (an empty one).
pub(super) fn decided_expiry(xt: Option<i64>, old: Option<&Record>) -> u64 {
    match xt {
        Some(xt) => kt_expiry(xt, now()),
        None => old.map_or(0, |r| r.meta.expires),
    }
}

/// How many times a visit is made again when the record changed under it.
const VISIT_TRIES: usize = 64;

/// `accept` on one key: visit, then write the decision if the record is still the one
/// visited; visit again when it is not. Ok(false) with the error set on a refusal.
fn accept_key(
    lua: &Lua,
    err: &LastError,
    key: &[u8],
    visitor: &Value,
    writable: bool,
    mut seen: Option<Option<Record>>,
) -> mlua::Result<bool> {
    for _ in 0..VISIT_TRIES {
        let c = ctx(lua)?;
        let rec = match seen.take() {
            Some(r) => r,
            None => match c.store.get(key) {
                Ok(r) => r,
                Err(e) => {
                    err.engine(&e);
                    return Ok(false);
                }
            },
        };
        let d = visit(lua, visitor, key, rec.as_ref())?;
        let c = ctx(lua)?;
        let Some(op) = decided_op(&d).filter(|_| writable) else {
            return Ok(true);
        };
        if denied(&c, op, err) {
            return Ok(false);
        }
        if let Decided::Set(v, _) = &d {
            if let Err(e) = c.shared.check_value("Kyoto Tycoon script visitor", v.len()) {
                err.set(INVALID, e.to_string());
                return Ok(false);
            }
            if let Err(e) = kura_engine::store::check_sizes(key, v.len()) {
                err.engine(&e);
                return Ok(false);
            }
        }
        if !noted(&c, key, err) {
            return Ok(false);
        }
        let expect = rec.as_ref().map(|r| r.meta.version);
        let expires = match &d {
            Decided::Set(_, xt) => decided_expiry(*xt, rec.as_ref()),
            _ => 0,
        };
        let mut stale = false;
        let done = c.store.accept(key, &mut |cur| {
            if cur.as_ref().map(|c| c.meta.version) != expect {
                stale = true;
                return Decision::Keep;
            }
            match (&d, cur) {
                (Decided::Set(v, _), cur) => Decision::Put {
                    value: Stored::Lent(v),
                    flags: cur.map_or(0, |c| c.meta.flags),
                    expires,
                },
                (Decided::Remove, Some(_)) => Decision::Remove,
                _ => Decision::Keep,
            }
        });
        if let Err(e) = done {
            err.engine(&e);
            return Ok(false);
        }
        if !stale {
            if matches!(d, Decided::Set(..)) {
                c.shared.cmd_set.add(1);
            }
            return Ok(true);
        }
    }
    err.set(LOGIC, "the record kept changing while it was visited");
    Ok(false)
}

/// Call `visitor:visit_before()` / `visit_after()` when the visitor is a table that has it.
fn visit_hook(visitor: &Value, name: &str) -> mlua::Result<()> {
    if let Value::Table(t) = visitor {
        if let Value::Function(f) = t.get::<Value>(name)? {
            f.call::<()>(t.clone())?;
        }
    }
    Ok(())
}

fn truthy(v: &Value) -> bool {
    !matches!(v, Value::Nil | Value::Boolean(false))
}

// ----- mapreduce -----

/// The records a map emitted, by key, and the bytes they hold.
#[derive(Default)]
struct Emitted {
    recs: BTreeMap<Vec<u8>, Vec<Vec<u8>>>,
    bytes: usize,
    over: bool,
}

fn mapreduce(
    lua: &Lua,
    err: &LastError,
    map: Function,
    reduce: Function,
    proc_: Option<Function>,
) -> mlua::Result<bool> {
    let c = ctx(lua)?;
    if denied(&c, Op::IterNext, err) {
        return Ok(false);
    }
    let limit = memory_limit(c.shared);
    let emitted = Rc::new(RefCell::new(Emitted::default()));
    let sink = emitted.clone();
    let emit = lua.create_function(move |lua, (k, v): (Value, Value)| {
        let k = bytes(lua, k, "emit", "key")?;
        let v = bytes(lua, v, "emit", "value")?;
        let mut e = sink.borrow_mut();
        e.bytes += k.len() + v.len() + 32;
        if e.bytes > limit {
            e.over = true;
            return Ok(false);
        }
        e.recs.entry(k).or_default().push(v);
        Ok(true)
    })?;
    if let Some(p) = &proc_ {
        p.call::<()>(emit.clone())?;
    }
    let mut cur = match c.store.cursor() {
        Ok(cur) => cur,
        Err(e) => {
            err.engine(&e);
            return Ok(false);
        }
    };
    loop {
        let (k, r) = match cur.next() {
            Ok(Some(kr)) => kr,
            Ok(None) => break,
            Err(e) => {
                err.engine(&e);
                return Ok(false);
            }
        };
        let ok: Value = map.call((
            lua.create_string(&k)?,
            lua.create_string(&r.value)?,
            emit.clone(),
        ))?;
        if emitted.borrow().over {
            err.set(
                LOGIC,
                "mapreduce: the emitted records are past --script-memory",
            );
            return Ok(false);
        }
        if !truthy(&ok) {
            err.set(LOGIC, "mapreduce: the mapper failed");
            return Ok(false);
        }
    }
    if let Some(p) = &proc_ {
        p.call::<()>(emit.clone())?;
    }
    let recs = std::mem::take(&mut emitted.borrow_mut().recs);
    for (k, values) in recs {
        let values = RefCell::new(values.into_iter());
        let ok: Value = lua.scope(|scope| {
            let iter = scope.create_function(|lua, ()| match values.borrow_mut().next() {
                Some(v) => Ok(Value::String(lua.create_string(v)?)),
                None => Ok(Value::Nil),
            })?;
            reduce.call((lua.create_string(&k)?, iter))
        })?;
        if !truthy(&ok) {
            err.set(LOGIC, "mapreduce: the reducer failed");
            return Ok(false);
        }
    }
    if let Some(p) = &proc_ {
        p.call::<()>(())?;
    }
    Ok(true)
}

// ----- the methods -----

impl UserData for KtDb {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        // set / add / replace / append (key, value, xt): true or false.
        for (name, method) in [
            ("set", "db:set"),
            ("add", "db:add"),
            ("replace", "db:replace"),
            ("append", "db:append"),
        ] {
            m.add_method(name, move |lua, db, (k, v, xt): (Value, Value, Value)| {
                let key = bytes(lua, k, method, "key")?;
                let value = bytes(lua, v, method, "value")?;
                let xt = xt_param(lua, xt, method)?;
                let inp = input([
                    ("key", Some(key.clone())),
                    ("value", Some(value)),
                    ("xt", xt),
                ]);
                procedure(lua, &db.err, name, &inp, &[&key], &mut Output::new())
            });
        }
        // increment / increment_double (key, num, orig, xt): the new number, or nil.
        for (name, method) in [
            ("increment", "db:increment"),
            ("increment_double", "db:increment_double"),
        ] {
            m.add_method(
                name,
                move |lua, db, (k, num, orig, xt): (Value, Value, Value, Value)| {
                    let key = bytes(lua, k, method, "key")?;
                    let num = opt_number(lua, num, method, "num")?.unwrap_or(0.0);
                    let orig = opt_number(lua, orig, method, "orig")?;
                    let xt = xt_param(lua, xt, method)?;
                    let text = |n: f64| {
                        if name == "increment" {
                            format!("{}", n as i64)
                        } else {
                            format!("{n}")
                        }
                    };
                    let orig = orig.map(|o| {
                        if o == f64::NEG_INFINITY {
                            "try".to_string()
                        } else if o == f64::INFINITY {
                            "set".to_string()
                        } else {
                            text(o)
                        }
                    });
                    let inp = input([
                        ("key", Some(key.clone())),
                        ("num", Some(text(num).into_bytes())),
                        ("orig", orig.map(String::into_bytes)),
                        ("xt", xt),
                    ]);
                    let mut out = Output::new();
                    if !procedure(lua, &db.err, name, &inp, &[&key], &mut out)? {
                        return Ok(Value::Nil);
                    }
                    let n = out_get(&out, "num").unwrap_or(b"0");
                    Ok(if name == "increment" {
                        Value::Number(crate::kt_common::atoi(n) as f64)
                    } else {
                        Value::Number(crate::kt_common::atof(n))
                    })
                },
            );
        }
        m.add_method(
            "cas",
            |lua, db, (k, ov, nv, xt): (Value, Value, Value, Value)| {
                let key = bytes(lua, k, "db:cas", "key")?;
                let inp = input([
                    ("key", Some(key.clone())),
                    ("oval", opt_bytes(lua, ov, "db:cas", "oval")?),
                    ("nval", opt_bytes(lua, nv, "db:cas", "nval")?),
                    ("xt", xt_param(lua, xt, "db:cas")?),
                ]);
                procedure(lua, &db.err, "cas", &inp, &[&key], &mut Output::new())
            },
        );
        m.add_method("remove", |lua, db, k: Value| {
            let key = bytes(lua, k, "db:remove", "key")?;
            let inp = input([("key", Some(key.clone()))]);
            procedure(lua, &db.err, "remove", &inp, &[&key], &mut Output::new())
        });
        // get / seize (key): the value and its xt, or nil.
        for (name, method) in [("get", "db:get"), ("seize", "db:seize")] {
            m.add_method(name, move |lua, db, k: Value| {
                let key = bytes(lua, k, method, "key")?;
                let inp = input([("key", Some(key.clone()))]);
                let mut out = Output::new();
                let keys: &[&[u8]] = if name == "seize" { &[&key] } else { &[] };
                if !procedure(lua, &db.err, name, &inp, keys, &mut out)? {
                    return Ok((Value::Nil, Value::Nil));
                }
                let v = out_get(&out, "value").unwrap_or_default();
                let xt =
                    out_get(&out, "xt").map_or(XT_MAX as f64, |x| crate::kt_common::atoi(x) as f64);
                Ok((Value::String(lua.create_string(v)?), Value::Number(xt)))
            });
        }
        m.add_method("check", |lua, db, k: Value| {
            let key = bytes(lua, k, "db:check", "key")?;
            let inp = input([("key", Some(key))]);
            let mut out = Output::new();
            if !procedure(lua, &db.err, "check", &inp, &[], &mut out)? {
                return Ok(-1);
            }
            Ok(crate::kt_common::atoi(
                out_get(&out, "vsiz").unwrap_or(b"-1"),
            ))
        });
        m.add_method(
            "set_bulk",
            |lua, db, (recs, xt, _atomic): (Table, Value, Value)| {
                let mut pairs = Vec::new();
                for pair in recs.pairs::<Value, Value>() {
                    let (k, v) = pair?;
                    let k = bytes(lua, k, "db:set_bulk", "a key")?;
                    let v = bytes(lua, v, "db:set_bulk", "a value")?;
                    pairs.push((k, v));
                }
                let mut inp = input([("xt", xt_param(lua, xt, "db:set_bulk")?)]);
                for (k, v) in &pairs {
                    let mut n = vec![b'_'];
                    n.extend_from_slice(k);
                    inp.insert(Cow::Owned(n), Cow::Owned(v.clone()));
                }
                let keys: Vec<&[u8]> = pairs.iter().map(|p| &p.0[..]).collect();
                let mut out = Output::new();
                if !procedure(lua, &db.err, "set_bulk", &inp, &keys, &mut out)? {
                    return Ok(-1);
                }
                Ok(crate::kt_common::atoi(out_get(&out, "num").unwrap_or(b"0")))
            },
        );
        for name in ["remove_bulk", "get_bulk"] {
            m.add_method(name, move |lua, db, (keys, _atomic): (Table, Value)| {
                let keys = key_list(lua, &keys, &format!("db:{name}"))?;
                let mut inp = Input::new();
                for k in &keys {
                    let mut n = vec![b'_'];
                    n.extend_from_slice(k);
                    inp.insert(Cow::Owned(n), Cow::Owned(Vec::new()));
                }
                let noted: Vec<&[u8]> = if name == "remove_bulk" {
                    keys.iter().map(|k| &k[..]).collect()
                } else {
                    Vec::new()
                };
                let mut out = Output::new();
                if !procedure(lua, &db.err, name, &inp, &noted, &mut out)? {
                    return Ok(if name == "remove_bulk" {
                        Value::Integer(-1)
                    } else {
                        Value::Nil
                    });
                }
                if name == "remove_bulk" {
                    let n = crate::kt_common::atoi(out_get(&out, "num").unwrap_or(b"0"));
                    return Ok(Value::Integer(n));
                }
                let t = lua.create_table()?;
                for (n, v) in &out {
                    if let Some(k) = n.strip_prefix(b"_") {
                        t.raw_set(lua.create_string(k)?, lua.create_string(v)?)?;
                    }
                }
                Ok(Value::Table(t))
            });
        }
        m.add_method("clear", |lua, db, ()| {
            let c = ctx(lua)?;
            if in_transaction() {
                // Every record is saved before the clear, so an abort can restore them.
                let mut keys = Vec::new();
                let walked = c.store.cursor().and_then(|mut cur| {
                    while let Some((k, _)) = cur.next()? {
                        keys.push(k);
                    }
                    Ok(())
                });
                if let Err(e) = walked {
                    db.err.engine(&e);
                    return Ok(false);
                }
                let keys: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
                return procedure(
                    lua,
                    &db.err,
                    "clear",
                    &Input::new(),
                    &keys,
                    &mut Output::new(),
                );
            }
            procedure(
                lua,
                &db.err,
                "clear",
                &Input::new(),
                &[],
                &mut Output::new(),
            )
        });
        // synchronize(hard, proc): proc(path, count, size) after the database is synchronized.
        m.add_method("synchronize", |lua, db, (_hard, proc_): (Value, Value)| {
            if !procedure(
                lua,
                &db.err,
                "synchronize",
                &Input::new(),
                &[],
                &mut Output::new(),
            )? {
                return Ok(false);
            }
            let c = ctx(lua)?;
            let args = (c.shared.db_name.clone(), c.store.count(), c.store.size());
            let ok = match proc_ {
                Value::Nil => true,
                Value::Function(f) => truthy(&f.call::<Value>(args)?),
                Value::Table(t) => {
                    let f: Function = t.get("process")?;
                    truthy(&f.call::<Value>((t.clone(), args.0, args.1, args.2))?)
                }
                _ => return Err(invalid("db:synchronize", "proc must be a function")),
            };
            if !ok {
                db.err.set(LOGIC, "postprocessing failed");
            }
            Ok(ok)
        });
        m.add_method("copy", |lua, db, dest: Value| {
            let dest = bytes(lua, dest, "db:copy", "dest")?;
            let c = ctx(lua)?;
            if denied(&c, Op::Copy, &db.err) {
                return Ok(false);
            }
            match backup::copy_why(c.store, c.shared, &dest, "KT script copy") {
                Ok(()) => Ok(true),
                Err(why) => {
                    db.err.set(NOPERM, why);
                    Ok(false)
                }
            }
        });
        m.add_method(
            "transaction",
            |lua, db, (proc_, hard): (Function, Option<bool>)| {
                if in_transaction() {
                    db.err.set(LOGIC, "a transaction is already running");
                    return Ok(false);
                }
                let limit = memory_limit(ctx(lua)?.shared);
                let _lock = TXN_LOCK.lock().unwrap_or_else(|e| e.into_inner());
                let _undo = UndoGuard;
                UNDO.with(|u| {
                    *u.borrow_mut() = Some(Undo {
                        old: BTreeMap::new(),
                        bytes: 0,
                        limit,
                    })
                });
                let r = proc_.call::<Value>(());
                let undo = UNDO.with(|u| u.borrow_mut().take());
                let c = ctx(lua)?;
                let commit = matches!(&r, Ok(v) if truthy(v));
                let ended = if commit {
                    if hard == Some(true) {
                        c.store.sync()
                    } else {
                        Ok(())
                    }
                } else {
                    undo.map_or(Ok(()), |u| roll_back(c.store, u))
                };
                if let Err(e) = &ended {
                    db.err.engine(e);
                }
                match r {
                    Err(e) => {
                        if let Err(re) = &ended {
                            c.shared.log.line(&format!(
                                "[SCRIPT]: a transaction's abort failed: {re} (after {})",
                                one_line(&e)
                            ));
                        }
                        Err(e)
                    }
                    Ok(_) => Ok(ended.is_ok()),
                }
            },
        );
        // match_prefix(prefix, max) / match_regex(regex, max): an array of keys, or nil.
        for (name, what) in [("match_prefix", "prefix"), ("match_regex", "regex")] {
            m.add_method(name, move |lua, db, (pattern, max): (Value, Value)| {
                let method = format!("db:{name}");
                let pattern = bytes(lua, pattern, &method, what)?;
                let max = opt_number(lua, max, &method, "max")?;
                let inp = input([
                    (what, Some(pattern)),
                    ("max", max.map(|m| format!("{}", m as i64).into_bytes())),
                ]);
                let mut out = Output::new();
                if !procedure(lua, &db.err, name, &inp, &[], &mut out)? {
                    return Ok(Value::Nil);
                }
                Ok(Value::Table(matched(lua, &out)?))
            });
        }
        m.add_method(
            "match_similar",
            |lua, db, (origin, range, utf, max): (Value, Value, Value, Value)| {
                let origin = bytes(lua, origin, "db:match_similar", "origin")?;
                let range = opt_number(lua, range, "db:match_similar", "range")?;
                let max = opt_number(lua, max, "db:match_similar", "max")?;
                let inp = input([
                    ("origin", Some(origin)),
                    ("range", range.map(|r| format!("{}", r as i64).into_bytes())),
                    ("utf", truthy(&utf).then(Vec::new)),
                    ("max", max.map(|m| format!("{}", m as i64).into_bytes())),
                ]);
                let mut out = Output::new();
                if !procedure(lua, &db.err, "match_similar", &inp, &[], &mut out)? {
                    return Ok(Value::Nil);
                }
                Ok(Value::Table(matched(lua, &out)?))
            },
        );
        m.add_method(
            "accept",
            |lua, db, (k, visitor, writable): (Value, Value, Option<bool>)| {
                let key = bytes(lua, k, "db:accept", "key")?;
                let c = ctx(lua)?;
                if denied(&c, Op::Get, &db.err) {
                    return Ok(false);
                }
                visit_hook(&visitor, "visit_before")?;
                let done = accept_key(lua, &db.err, &key, &visitor, writable != Some(false), None)?;
                visit_hook(&visitor, "visit_after")?;
                Ok(done)
            },
        );
        m.add_method(
            "iterate",
            |lua, db, (visitor, writable): (Value, Option<bool>)| {
                let c = ctx(lua)?;
                if denied(&c, Op::IterNext, &db.err) {
                    return Ok(false);
                }
                let writable = writable != Some(false);
                visit_hook(&visitor, "visit_before")?;
                let mut cur = match c.store.cursor() {
                    Ok(cur) => cur,
                    Err(e) => {
                        db.err.engine(&e);
                        return Ok(false);
                    }
                };
                loop {
                    let (k, r) = match cur.next() {
                        Ok(Some(kr)) => kr,
                        Ok(None) => break,
                        Err(e) => {
                            db.err.engine(&e);
                            return Ok(false);
                        }
                    };
                    if !accept_key(lua, &db.err, &k, &visitor, writable, Some(Some(r)))? {
                        return Ok(false);
                    }
                }
                visit_hook(&visitor, "visit_after")?;
                Ok(true)
            },
        );
        m.add_method("mapreduce", |lua, db, args: mlua::Variadic<Value>| {
            let (Some(Value::Function(map)), Some(Value::Function(reduce))) =
                (args.first().cloned(), args.get(1).cloned())
            else {
                return Err(invalid("db:mapreduce", "map and reduce are functions"));
            };
            let proc_ = match args.get(8) {
                Some(Value::Function(f)) => Some(f.clone()),
                _ => None,
            };
            mapreduce(lua, &db.err, map, reduce, proc_)
        });
        m.add_function("cursor", |lua, this: AnyUserData| cur::new(lua, this));
        m.add_function(
            "cursor_process",
            |lua, (this, proc_): (AnyUserData, Function)| {
                let c = cur::new(lua, this)?;
                let r = proc_.call::<()>(c.clone());
                cur::disable(&c)?;
                r
            },
        );
        m.add_function("pairs", |lua, this: AnyUserData| {
            let c = cur::new(lua, this.clone())?;
            cur::jump_first(lua, &c)?;
            Ok((c, this, Value::Nil))
        });
        m.add_method("count", |lua, _, ()| Ok(ctx(lua)?.store.count()));
        m.add_method("size", |lua, _, ()| Ok(ctx(lua)?.store.size()));
        m.add_method("path", |lua, _, ()| Ok(ctx(lua)?.shared.db_name.clone()));
        m.add_method("status", |lua, db, ()| {
            let mut out = Output::new();
            if !procedure(lua, &db.err, "status", &Input::new(), &[], &mut out)? {
                return Ok(Value::Nil);
            }
            let t = lua.create_table()?;
            for (n, v) in &out {
                t.raw_set(lua.create_string(n)?, lua.create_string(v)?)?;
            }
            Ok(Value::Table(t))
        });
        m.add_method("error", |_, db, ()| Ok(db.err.get()));
        m.add_meta_method(MetaMethod::ToString, |lua, _, ()| {
            let c = ctx(lua)?;
            Ok(format!(
                "{}: {}: {}",
                c.shared.db_name,
                c.store.count(),
                c.store.size()
            ))
        });
        // db[key] and db[key] = value (nil removes), as Kyoto Tycoon's binding allows.
        m.add_meta_method(MetaMethod::Index, |lua, db, k: Value| {
            let key = bytes(lua, k, "db[key]", "key")?;
            let inp = input([("key", Some(key))]);
            let mut out = Output::new();
            if !procedure(lua, &db.err, "get", &inp, &[], &mut out)? {
                return Ok(Value::Nil);
            }
            Ok(Value::String(lua.create_string(
                out_get(&out, "value").unwrap_or_default(),
            )?))
        });
        m.add_meta_method(MetaMethod::NewIndex, |lua, db, (k, v): (Value, Value)| {
            let key = bytes(lua, k, "db[key] = value", "key")?;
            let value = opt_bytes(lua, v, "db[key] = value", "value")?;
            let name = if value.is_some() { "set" } else { "remove" };
            let inp = input([("key", Some(key.clone())), ("value", value)]);
            procedure(lua, &db.err, name, &inp, &[&key], &mut Output::new())
        });
    }
}

/// Kyoto Cabinet's step after a visit, in the cursor's direction (`kt_cursor`'s).
pub(super) use crate::kt_cursor::step_on as kt_step_on;
