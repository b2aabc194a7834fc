//! Scripts inside the server: Tokyo Tyrant's `ext` (`kura serve --ext FILE`) and Kyoto Tycoon's
//! `play_script` (`kura serve --scr FILE`), in Lua 5.1 (the language both originals embed),
//! built from the `mlua` crate's own copy of Lua, so no system library is needed.
//!
//! * [`Scripts`] holds the configuration and the source of each script; [`Scripts::reload`]
//!   reads the files again, keeps the old scripts when a new one does not compile, and bumps a
//!   generation number.
//! * Each worker thread has its own interpreter per flavour (as ttserver has one per worker),
//!   made on its first call and made again when the generation changes: no lock is shared
//!   between connections while a script runs. [`with_interp`] is the one way in.
//! * While a call runs, the built-ins reach the store and the server's state through
//!   [`ctx`]; outside a call they fail.
//! * A call is stopped once it runs past `--script-timeout` (a hook every
//!   [`HOOK_INSTRUCTIONS`] instructions; `pcall`, `xpcall` and `coroutine.resume` cannot catch
//!   that stop), and an interpreter cannot allocate past `--script-memory`.
//!
//! The flavours' built-ins live in [`tt`] (Tyrant: `_put`, `_get`, …) and [`kt`] (Kyoto
//! Tycoon: the `__kyototycoon__` module); helpers both share (pack, codec, hashes, …) in
//! [`util`].

pub mod kt;
pub mod tt;
pub mod tt_lock;
pub mod util;

use crate::context::Shared;
use crate::mask::Proto;
use kura_engine::Store;
use mlua::{HookTriggers, Lua, LuaOptions, StdLib, VmState};
use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often (in Lua VM instructions) a running call checks its time budget.
pub const HOOK_INSTRUCTIONS: u32 = 1000;

/// The default `--script-timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The default `--script-memory` (bytes per interpreter).
pub const DEFAULT_MEMORY: usize = 64 << 20;

/// Which interface a script is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// Tokyo Tyrant's `ext`: global functions `f(key, value)` returning a string or nil.
    Tyrant = 0,
    /// Kyoto Tycoon's `play_script`: global functions `f(inmap, outmap)` returning a status.
    Kyoto = 1,
}

impl Flavor {
    fn name(self) -> &'static str {
        match self {
            Flavor::Tyrant => "--ext",
            Flavor::Kyoto => "--scr",
        }
    }
}

/// The generations of every [`Scripts`] of the process: each load and reload takes a new one,
/// so a thread's interpreter is never taken for another `Scripts`' (tests make several).
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

/// What `kura serve` was told about scripts.
#[derive(Clone, Debug)]
pub struct ScriptConf {
    /// Tokyo Tyrant's script (`--ext`).
    pub ext: Option<PathBuf>,
    /// Kyoto Tycoon's script (`--scr`).
    pub scr: Option<PathBuf>,
    /// The longest a call may run (`--script-timeout`).
    pub timeout: Duration,
    /// The most memory one interpreter may hold (`--script-memory`).
    pub memory: usize,
}

impl Default for ScriptConf {
    fn default() -> ScriptConf {
        ScriptConf {
            ext: None,
            scr: None,
            timeout: DEFAULT_TIMEOUT,
            memory: DEFAULT_MEMORY,
        }
    }
}

/// A script's text and where it came from (its name in Lua's error messages).
#[derive(Debug)]
pub struct Source {
    pub path: PathBuf,
    pub text: Vec<u8>,
}

/// The server's scripts: their configuration, their current sources and generation.
#[derive(Debug)]
pub struct Scripts {
    pub conf: ScriptConf,
    generation: AtomicU64,
    sources: Mutex<[Option<Arc<Source>>; 2]>,
}

impl Scripts {
    /// Read and compile-check the configured scripts. An unreadable file or a syntax error is
    /// an error naming the file (and the line, for a syntax error).
    pub fn load(conf: ScriptConf) -> Result<Scripts, String> {
        let s = Scripts {
            conf,
            generation: AtomicU64::new(GENERATIONS.fetch_add(1, Ordering::SeqCst)),
            sources: Mutex::new([None, None]),
        };
        let fresh = s.read_all()?;
        *s.sources.lock().unwrap_or_else(|e| e.into_inner()) = fresh;
        Ok(s)
    }

    /// Read every configured script again. When one cannot be read or does not compile, the
    /// scripts in use stay and the error says why; otherwise every thread makes its
    /// interpreters again before its next call.
    pub fn reload(&self) -> Result<(), String> {
        let fresh = self.read_all()?;
        *self.sources.lock().unwrap_or_else(|e| e.into_inner()) = fresh;
        self.generation
            .store(GENERATIONS.fetch_add(1, Ordering::SeqCst), Ordering::SeqCst);
        Ok(())
    }

    /// Whether a script of this flavour is loaded.
    pub fn enabled(&self, flavor: Flavor) -> bool {
        self.sources.lock().unwrap_or_else(|e| e.into_inner())[flavor as usize].is_some()
    }

    /// The generation of the sources: it changes at every successful reload.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    fn source(&self, flavor: Flavor) -> Option<Arc<Source>> {
        self.sources.lock().unwrap_or_else(|e| e.into_inner())[flavor as usize].clone()
    }

    fn read_all(&self) -> Result<[Option<Arc<Source>>; 2], String> {
        let read = |path: &Option<PathBuf>, flavor: Flavor| -> Result<_, String> {
            let Some(path) = path else { return Ok(None) };
            let text = std::fs::read(path)
                .map_err(|e| format!("{} {}: {e}", flavor.name(), path.display()))?;
            // Compile only: the chunk runs in each thread's interpreter when it is made.
            let lua = Lua::new_with(StdLib::NONE, LuaOptions::default())
                .map_err(|e| format!("{} {}: {e}", flavor.name(), path.display()))?;
            lua.load(&text[..])
                .set_name(chunk_name(path))
                .into_function()
                .map_err(|e| format!("{} {}: {}", flavor.name(), path.display(), one_line(&e)))?;
            Ok(Some(Arc::new(Source {
                path: path.clone(),
                text,
            })))
        };
        Ok([
            read(&self.conf.ext, Flavor::Tyrant)?,
            read(&self.conf.scr, Flavor::Kyoto)?,
        ])
    }
}

/// The chunk name Lua puts before a line number in its messages: `@` and the file's name.
fn chunk_name(path: &std::path::Path) -> String {
    format!(
        "@{}",
        path.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default()
    )
}

/// A Lua error as one line of text (the message and its `file:line:`, without the traceback
/// mlua adds for errors raised inside Rust callbacks).
pub fn one_line(e: &mlua::Error) -> String {
    let s = match e {
        mlua::Error::CallbackError { cause, .. } => return one_line(cause),
        mlua::Error::RuntimeError(s) | mlua::Error::SyntaxError { message: s, .. } => s.clone(),
        mlua::Error::MemoryError(_) => "not enough memory (--script-memory)".to_string(),
        other => other.to_string(),
    };
    let s = s.split("\nstack traceback:").next().unwrap_or(&s);
    s.trim_end().replace('\n', " ")
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// No script of this flavour is loaded.
    NoScript,
    /// The script could not be started in this thread (its top level failed).
    Start(String),
    /// The call ran past `--script-timeout`.
    Timeout(Duration),
    /// A Lua error (a runtime error with its line, or a memory error).
    Lua(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::NoScript => write!(f, "no script is loaded"),
            CallError::Start(m) => write!(f, "the script failed to start: {m}"),
            CallError::Timeout(t) => {
                write!(
                    f,
                    "the script ran past --script-timeout ({} ms)",
                    t.as_millis()
                )
            }
            CallError::Lua(m) => write!(f, "{m}"),
        }
    }
}

/// What the built-ins reach while a call runs: set by [`with_interp`] for the duration of the
/// call, and gone before it returns.
pub struct Ctx<'a> {
    pub store: &'a dyn Store,
    pub shared: &'a Shared,
    /// The protocol the call came in on: the script's operations are masked as that
    /// protocol's would be.
    pub proto: Proto,
}

/// The call in progress, as the interpreter's app data: the context as pointers (valid only
/// while [`with_interp`] runs the call), its deadline, and whether it has passed.
struct Running {
    store: *const (dyn Store + 'static),
    shared: *const Shared,
    proto: Proto,
    deadline: Instant,
    expired: Cell<bool>,
}

/// The context of the call in progress, for a built-in. Fails outside a call.
pub fn ctx(lua: &Lua) -> mlua::Result<Ctx<'_>> {
    let r = lua
        .app_data_ref::<Running>()
        .ok_or_else(|| mlua::Error::RuntimeError("called outside a request".into()))?;
    // SAFETY: `Running` is only present while `with_interp` runs a call and holds the borrows
    // of `store` and `shared` it was given; it is removed before `with_interp` returns, even
    // on a panic (see `Guard`). Built-ins only run inside such a call, and the `Ctx` they get
    // cannot outlive their `&Lua`, which the call borrows.
    Ok(unsafe {
        Ctx {
            store: &*r.store,
            shared: &*r.shared,
            proto: r.proto,
        }
    })
}

/// The time left before the call in progress runs past its budget (`None` outside a call).
pub fn time_left(lua: &Lua) -> Option<Duration> {
    let r = lua.app_data_ref::<Running>()?;
    Some(r.deadline.saturating_duration_since(Instant::now()))
}

/// Stop the call in progress as past its budget (for a built-in that waits, such as
/// `_sleep`): the error to return, which the call ends with as [`CallError::Timeout`].
pub fn expire(lua: &Lua) -> mlua::Error {
    if let Some(r) = lua.app_data_ref::<Running>() {
        r.expired.set(true);
    }
    mlua::Error::RuntimeError("script timeout".into())
}

/// One thread's interpreter of one flavour.
struct Interp {
    generation: u64,
    lua: Lua,
}

impl Drop for Interp {
    fn drop(&mut self) {
        // Tyrant's `_end` hook (a no-op in other interpreters).
        tt::end(&self.lua);
    }
}

thread_local! {
    static INTERPS: RefCell<[Option<Interp>; 2]> = const { RefCell::new([None, None]) };
}

/// Removes the call's context from the interpreter when the call ends, however it ends.
struct Guard<'l>(&'l Lua);

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.0.remove_app_data::<Running>();
    }
}

/// Run `f` in this thread's interpreter of `flavor`, with `call` reachable from the built-ins and the time budget armed. The interpreter is made (the script's top level
/// run) on the first call and after a reload.
pub fn with_interp<R>(
    scripts: &Scripts,
    flavor: Flavor,
    call: Ctx<'_>,
    f: impl FnOnce(&Lua) -> mlua::Result<R>,
) -> Result<R, CallError> {
    let generation = scripts.generation();
    INTERPS.with(|cell| {
        let mut slots = cell.borrow_mut();
        let slot = &mut slots[flavor as usize];
        if slot.as_ref().is_none_or(|i| i.generation != generation) {
            *slot = None;
            let source = scripts.source(flavor).ok_or(CallError::NoScript)?;
            let lua = new_interp(&scripts.conf).map_err(|e| CallError::Start(one_line(&e)))?;
            run(&lua, scripts, &call, |lua| {
                match flavor {
                    Flavor::Tyrant => tt::install(lua)?,
                    Flavor::Kyoto => kt::install(lua)?,
                }
                lua.load(&source.text[..])
                    .set_name(chunk_name(&source.path))
                    .exec()
            })
            .map_err(|e| match e {
                CallError::Lua(m) => CallError::Start(m),
                other => other,
            })?;
            *slot = Some(Interp { generation, lua });
        }
        let interp = slot.as_ref().ok_or(CallError::NoScript)?;
        run(&interp.lua, scripts, &call, f)
    })
}

/// Run `f` in `lua` as one call: context set, deadline armed, errors mapped.
fn run<R>(
    lua: &Lua,
    scripts: &Scripts,
    call: &Ctx<'_>,
    f: impl FnOnce(&Lua) -> mlua::Result<R>,
) -> Result<R, CallError> {
    // SAFETY: the pointers are only dereferenced by `ctx` while this call runs; `Guard`
    // removes them before this function returns (the lifetime is erased to store them).
    let store: *const (dyn Store + '_) = call.store;
    let store: *const (dyn Store + 'static) = unsafe { std::mem::transmute(store) };
    let timeout = scripts.conf.timeout;
    lua.set_app_data(Running {
        store,
        shared: call.shared,
        proto: call.proto,
        deadline: Instant::now() + timeout,
        expired: Cell::new(false),
    });
    let _guard = Guard(lua);
    let r = f(lua);
    let expired = lua
        .app_data_ref::<Running>()
        .is_some_and(|r| r.expired.get());
    match r {
        _ if expired => Err(CallError::Timeout(timeout)),
        Ok(v) => Ok(v),
        Err(e) => {
            if is_memory(&e) {
                // What the failed call allocated is garbage now: free it before the next
                // call meets the limit.
                let _ = lua.gc_collect();
            }
            Err(CallError::Lua(one_line(&e)))
        }
    }
}

fn is_memory(e: &mlua::Error) -> bool {
    match e {
        mlua::Error::MemoryError(_) => true,
        mlua::Error::CallbackError { cause, .. } => is_memory(cause),
        _ => false,
    }
}

/// Lua code run in every new interpreter before the built-ins and the script: once a call has
/// run past its budget, `pcall`, `xpcall` and `coroutine.resume` raise the stop again rather
/// than catch it, so a script cannot keep running by catching it.
const HARDEN: &str = r#"
local pcall, xpcall, resume, error, expired = pcall, xpcall, coroutine.resume, error, __kura_expired
__kura_expired = nil
local function check(...)
  if expired() then error("script timeout", 0) end
  return ...
end
_G.pcall = function(...) return check(pcall(...)) end
_G.xpcall = function(...) return check(xpcall(...)) end
coroutine.resume = function(...) return check(resume(...)) end
"#;

/// A fresh interpreter: Lua's safe standard libraries, the memory limit, the budget hook and
/// the hardening above.
fn new_interp(conf: &ScriptConf) -> mlua::Result<Lua> {
    let lua = Lua::new_with(StdLib::ALL_SAFE, LuaOptions::default())?;
    lua.set_memory_limit(conf.memory)?;
    lua.set_global_hook(
        HookTriggers::new().every_nth_instruction(HOOK_INSTRUCTIONS),
        |lua, _| {
            if let Some(r) = lua.app_data_ref::<Running>() {
                if r.expired.get() || Instant::now() >= r.deadline {
                    r.expired.set(true);
                    return Err(mlua::Error::RuntimeError("script timeout".into()));
                }
            }
            Ok(VmState::Continue)
        },
    )?;
    let expired = lua.create_function(|lua, ()| {
        Ok(lua
            .app_data_ref::<Running>()
            .is_some_and(|r| r.expired.get()))
    })?;
    lua.globals().set("__kura_expired", expired)?;
    lua.load(HARDEN).set_name("=kura").exec()?;
    Ok(lua)
}

#[cfg(test)]
mod tests;
