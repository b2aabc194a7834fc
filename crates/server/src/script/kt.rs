//! Kyoto Tycoon's script interface: the `__kyototycoon__` module (`kt`) a `--scr` script uses.

use mlua::Lua;

/// Install Kyoto Tycoon's module in a new interpreter (before the script's top level runs).
pub fn install(lua: &Lua) -> mlua::Result<()> {
    let _ = lua;
    Ok(())
}
