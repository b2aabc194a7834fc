//! Kyoto Tycoon's script interface: the `__kyototycoon__` module (`kt`) a `--scr` script uses,
//! and [`play`], the one way `play_script` runs a procedure (HTTP RPC and binary 0xB4).
//!
//! What a procedure sees and answers follows `ktserver.cc` and its Lua binding
//! (`myscript.cc`, Kyoto Tycoon 0.9.56):
//!
//! * A procedure is a global function `f(inmap, outmap)`; it returns one of `kt.RVSUCCESS`
//!   (0), `kt.RVENOIMPL` (1), `kt.RVEINVALID` (2), `kt.RVELOGIC` (3), `kt.RVETIMEOUT` (4),
//!   `kt.RVEINTERNAL` (5), `kt.RVENETWORK` (6), `kt.RVEMISC` (15), read as Lua's
//!   `lua_tointeger` reads it (nil or a non-number is 0: success).
//! * On success the output map's pairs are the reply (strings as they are, numbers as
//!   `%lld` when whole and `%f` otherwise, booleans as `true` / `false`; other values are
//!   left out). On any other status the reply carries only the error text.
//! * A Lua error is an internal error (500) whose text carries the script's message and
//!   line; it is logged as `[SCRIPT]: NAME: MESSAGE`, as ktserver logs it. A call stopped by
//!   `--script-timeout` answers 503 (Kyoto Tycoon's status for `RVETIMEOUT`).
//!
//! The database methods live in `kt_db.rs`, the cursor in `kt_cur.rs`.

#[path = "kt_cur.rs"]
mod cur;
#[path = "kt_db.rs"]
mod db;
#[cfg(test)]
#[path = "kt_tests.rs"]
mod tests;

use super::{with_interp, CallError, Ctx, Flavor};
use crate::context::Shared;
use crate::mask::Proto;
use kura_engine::Store;
use mlua::{Function, LightUserData, Lua, Table, Value};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};

/// Kyoto Tycoon's `RPCClient::ReturnValue`s.
pub const RVSUCCESS: i64 = 0;
pub const RVENOIMPL: i64 = 1;
pub const RVEINVALID: i64 = 2;
pub const RVELOGIC: i64 = 3;
pub const RVETIMEOUT: i64 = 4;
pub const RVEINTERNAL: i64 = 5;
pub const RVENETWORK: i64 = 6;
pub const RVEMISC: i64 = 15;

/// The HTTP status of a return value, as Kyoto Tycoon's RPC server maps it.
pub fn rv_status(rv: i64) -> u16 {
    match rv {
        RVSUCCESS => 200,
        RVENOIMPL => 501,
        RVEINVALID => 400,
        RVELOGIC => 450,
        RVETIMEOUT => 503,
        _ => 500,
    }
}

/// `kt.Visitor.NOP` and `kt.Visitor.REMOVE`: light userdata a visitor returns (Kyoto
/// Tycoon's are the addresses of its magic strings; these are two distinct tokens).
pub(crate) const NOP: usize = 1;
pub(crate) const REMOVE: usize = 2;

fn token(n: usize) -> LightUserData {
    LightUserData(n as *mut std::ffi::c_void)
}

/// The worker number a thread's interpreters report as `kt.thid` (Kyoto Tycoon's thread
/// id): the first thread to make one is 0, as ktscrex.lua's start-up log expects.
fn thid() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    thread_local! {
        static THID: Cell<Option<u32>> = const { Cell::new(None) };
    }
    THID.with(|t| {
        *t.get()
            .get_or_insert_with(|| NEXT.fetch_add(1, Ordering::Relaxed))
    })
}

/// Lua code for the parts of the module that are plain tables: `kt.Visitor:new()` and
/// `kt.FileProcessor:new()` make an object whose methods the script sets.
const MODULE_LUA: &str = r#"
local kt = __kyototycoon__
function kt.Visitor:new() return setmetatable({}, { __index = self }) end
function kt.FileProcessor:new() return setmetatable({}, { __index = self }) end
"#;

/// Lua code making the function [`play`] calls a procedure through, so that a call costs one
/// string made from Rust (`blob`) instead of a protected Rust call for every table and string
/// of the input and output maps (with a memory limit set, mlua protects each with a closure of
/// its own). `blob` holds the procedure's name, then each input pair, each as a 4-byte
/// big-endian length and the bytes. It returns false when no global function has that name,
/// else true, the procedure's return value and the output pairs as one array (key, value, …).
/// Everything it uses is taken before the script runs, so a script cannot change it.
const PLAY_LUA: &str = r#"
local G, type, byte, sub, next = _G, type, string.byte, string.sub, next
return function(blob)
  local size = #blob
  local a, b, c, d = byte(blob, 1, 4)
  local p = 5 + ((a * 256 + b) * 256 + c) * 256 + d
  local f = G[sub(blob, 5, p - 1)]
  if type(f) ~= "function" then return false end
  local inmap = {}
  while p <= size do
    a, b, c, d = byte(blob, p, p + 3)
    local q = p + 4 + ((a * 256 + b) * 256 + c) * 256 + d
    local k = sub(blob, p + 4, q - 1)
    a, b, c, d = byte(blob, q, q + 3)
    p = q + 4 + ((a * 256 + b) * 256 + c) * 256 + d
    inmap[k] = sub(blob, q + 4, p - 1)
  end
  local outmap = {}
  local rv = f(inmap, outmap)
  local flat, n = {}, 0
  for k, v in next, outmap do
    flat[n + 1] = k
    flat[n + 2] = v
    n = n + 2
  end
  return true, rv, flat
end
"#;

/// The function made from [`PLAY_LUA`], kept in the interpreter's app data.
struct PlayFn(Function);

/// Append `bytes` to a [`PLAY_LUA`] blob: its length, then the bytes.
fn put_field(blob: &mut Vec<u8>, bytes: &[u8]) -> mlua::Result<()> {
    let n = u32::try_from(bytes.len())
        .map_err(|_| mlua::Error::RuntimeError("play_script: an input is too large".into()))?;
    blob.extend_from_slice(&n.to_be_bytes());
    blob.extend_from_slice(bytes);
    Ok(())
}

/// Install Kyoto Tycoon's module in a new interpreter (before the script's top level runs).
pub fn install(lua: &Lua) -> mlua::Result<()> {
    let kt = lua.create_table()?;
    for (name, rv) in [
        ("RVSUCCESS", RVSUCCESS),
        ("RVENOIMPL", RVENOIMPL),
        ("RVEINVALID", RVEINVALID),
        ("RVELOGIC", RVELOGIC),
        ("RVETIMEOUT", RVETIMEOUT),
        ("RVEINTERNAL", RVEINTERNAL),
        ("RVENETWORK", RVENETWORK),
        ("RVEMISC", RVEMISC),
    ] {
        kt.set(name, rv)?;
    }
    kt.set("VERSION", crate::http_exec::KT_VERSION)?;
    kt.set("thid", thid())?;
    // Kyoto Cabinet's error codes (`kt.Error`), the visitor's magic values, the open and
    // merge modes and mapreduce's options (`kt.DB`; accepted, Kura needs none of them).
    let error = lua.create_table()?;
    for (code, name, _) in db::ERRORS {
        error.set(*name, *code)?;
    }
    kt.set("Error", error)?;
    let visitor = lua.create_table()?;
    visitor.set("NOP", token(NOP))?;
    visitor.set("REMOVE", token(REMOVE))?;
    kt.set("Visitor", visitor)?;
    kt.set("FileProcessor", lua.create_table()?)?;
    let modes = lua.create_table()?;
    for (name, n) in [
        ("OREADER", 1),
        ("OWRITER", 2),
        ("OCREATE", 4),
        ("OTRUNCATE", 8),
        ("OAUTOTRAN", 16),
        ("OAUTOSYNC", 32),
        ("ONOLOCK", 64),
        ("OTRYLOCK", 128),
        ("ONOREPAIR", 256),
        ("MSET", 0),
        ("MADD", 1),
        ("MREPLACE", 2),
        ("MAPPEND", 3),
        ("XNOLOCK", 1),
        ("XPARAMAP", 2),
        ("XPARARED", 4),
        ("XPARAFLS", 8),
        ("XNOCOMP", 256),
    ] {
        modes.set(name, n)?;
    }
    kt.set("DB", modes)?;
    kt.set("Cursor", lua.create_table()?)?;
    // Kura serves one database: `kt.db`, and `kt.dbs` holding it by number and by its file
    // name (as ktserver names each database in `dbs`).
    let the_db = db::new(lua)?;
    kt.set("db", the_db.clone())?;
    let dbs = lua.create_table()?;
    dbs.raw_set(1, the_db.clone())?;
    // The interpreter is made inside a call, so the served database's name is known here.
    if let Ok(c) = super::ctx(lua) {
        let base = c.shared.db_name.rsplit('/').next().unwrap_or("");
        if !base.is_empty() {
            dbs.raw_set(base, the_db)?;
        }
    }
    kt.set("dbs", dbs)?;
    // log, atoi, atoix, atof, hash_murmur, hash_fnv, levdist, time, sleep, pack, unpack,
    // split, codec, bit, strstr, strfwm, strbwm, regex, arraydump, arrayload, mapdump,
    // mapload: the helpers both flavours share.
    super::util::install_kyoto(lua, &kt)?;
    lua.globals().set("__kyototycoon__", kt)?;
    lua.load(MODULE_LUA).set_name("=kura-kt").exec()?;
    let play: Function = lua.load(PLAY_LUA).set_name("=kura-kt-play").eval()?;
    lua.set_app_data(PlayFn(play));
    Ok(())
}

/// What a `play_script` call answered.
#[derive(Debug, PartialEq, Eq)]
pub struct Played {
    /// Kyoto Tycoon's status as its RPC sends it (200, 400, 450, 500, 501, 503).
    pub status: u16,
    /// The procedure's output on success (sorted by name, as Kyoto Tycoon's map is).
    pub out: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Why it failed (the RPC's `ERROR`), on any other status.
    pub error: Option<String>,
}

impl Played {
    fn failed(status: u16, error: impl Into<String>) -> Played {
        Played {
            status,
            out: BTreeMap::new(),
            error: Some(error.into()),
        }
    }
}

/// Run the `--scr` procedure `name` with `input` (names without the RPC's `_`), as ktserver's
/// `ScriptProcessor::call`: the status, the output and the error text as described in the
/// module's documentation. Failures are logged.
pub fn play<'i>(
    store: &dyn Store,
    shared: &Shared,
    proto: Proto,
    name: &[u8],
    input: impl Iterator<Item = (&'i [u8], &'i [u8])>,
) -> Played {
    let Some(scripts) = shared
        .scripts
        .as_deref()
        .filter(|s| s.enabled(Flavor::Kyoto))
    else {
        return Played::failed(501, "the scripting extention is disabled");
    };
    let called = with_interp(
        scripts,
        Flavor::Kyoto,
        Ctx {
            store,
            shared,
            proto,
        },
        |lua| {
            let play = match lua.app_data_ref::<PlayFn>() {
                Some(p) => p.0.clone(),
                None => return Err(mlua::Error::RuntimeError("kt is not installed".into())),
            };
            let mut blob = Vec::with_capacity(64);
            put_field(&mut blob, name)?;
            for (k, v) in input {
                put_field(&mut blob, k)?;
                put_field(&mut blob, v)?;
            }
            let (found, rv, flat): (bool, Value, Option<Table>) =
                play.call(lua.create_string(&blob)?)?;
            let Some(flat) = flat.filter(|_| found) else {
                return Ok(None);
            };
            let mut out = BTreeMap::new();
            for i in (1..=flat.raw_len()).step_by(2) {
                let k: Value = flat.raw_get(i)?;
                let v: Value = flat.raw_get(i + 1)?;
                if let (Some(k), Some(v)) = (out_bytes(&k), out_bytes(&v)) {
                    out.insert(k, v);
                }
            }
            Ok(Some((rv_of(lua, rv), out)))
        },
    );
    let shown = String::from_utf8_lossy(name);
    match called {
        Ok(Some((RVSUCCESS, out))) => Played {
            status: 200,
            out,
            error: None,
        },
        Ok(None) | Ok(Some((RVENOIMPL, _))) => Played::failed(501, "no such scripting procedure"),
        Ok(Some((rv, _))) => Played::failed(rv_status(rv), "the scripting procedure failed"),
        Err(CallError::NoScript) => Played::failed(501, "the scripting extention is disabled"),
        Err(e) => {
            shared.log.line(&format!("[SCRIPT]: {shown}: {e}"));
            let status = if matches!(e, CallError::Timeout(_)) {
                503
            } else {
                500
            };
            Played::failed(status, format!("the scripting procedure failed: {e}"))
        }
    }
}

/// A procedure's return value as `lua_tointeger` reads it: a number (truncated) or a string
/// holding one; anything else is 0.
fn rv_of(lua: &Lua, v: Value) -> i64 {
    match v {
        Value::Integer(i) => i,
        Value::Number(n) if n.is_finite() => n as i64,
        Value::String(_) => lua
            .coerce_number(v)
            .ok()
            .flatten()
            .filter(|n| n.is_finite())
            .map_or(0, |n| n as i64),
        _ => 0,
    }
}

/// An output map's key or value as ktserver writes it (`StringBuilder` in myscript.cc).
fn out_bytes(v: &Value) -> Option<Vec<u8>> {
    Some(match v {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Integer(i) => i.to_string().into_bytes(),
        Value::Number(n) => number_text(*n).into_bytes(),
        Value::Boolean(b) => (if *b { "true" } else { "false" }).as_bytes().to_vec(),
        _ => return None,
    })
}

/// A Lua number as Kyoto Tycoon's binding writes it: `%lld` when whole, else `%f`.
pub(crate) fn number_text(n: f64) -> String {
    if n == n.floor() && n.abs() < 9.2e18 {
        format!("{}", n as i64)
    } else {
        format!("{n:.6}")
    }
}
