use super::*;
use crate::context::Shared;
use crate::mask::Proto;
use crate::script::{with_interp, Ctx, Flavor, ScriptConf, Scripts};
use kura_engine::name;
use std::io::Write as _;

/// Run `code` (a Lua chunk returning a value) in a call of a Tyrant interpreter with the
/// shared helpers installed (`kt` is a table with Kyoto Tycoon's), on a server with `shared`.
fn eval_with<R: mlua::FromLua>(shared: &Shared, code: &str) -> Result<R, String> {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(b"-- empty\n").unwrap();
    let s = Scripts::load(ScriptConf {
        ext: Some(f.path().to_path_buf()),
        timeout: std::time::Duration::from_millis(300),
        ..ScriptConf::default()
    })
    .unwrap();
    let db = name::open("*").unwrap();
    with_interp(
        &s,
        Flavor::Tyrant,
        Ctx {
            store: &*db,
            shared,
            proto: Proto::Tyrant,
        },
        |lua| {
            install_tyrant(lua)?;
            let kt = lua.create_table()?;
            install_kyoto(lua, &kt)?;
            lua.globals().set("kt", kt)?;
            lua.load(code).eval::<R>()
        },
    )
    .map_err(|e| e.to_string())
}

fn eval<R: mlua::FromLua>(code: &str) -> Result<R, String> {
    eval_with(&Shared::new(0, 1 << 20), code)
}

#[test]
fn lua_smoke() {
    assert_eq!(
        eval::<String>("return _codec('hex', 'ab')").unwrap(),
        "6162"
    );
    assert_eq!(
        eval::<String>("return table.concat(_unpack('n*', _pack('n*', 1, {2, 3})), ',')").unwrap(),
        "1,2,3"
    );
    assert_eq!(
        eval::<String>("return kt.codec('~base', kt.codec('base', 'hello'))").unwrap(),
        "hello"
    );
    assert_eq!(
        eval::<String>("return _hash('md5', 'abc')").unwrap(),
        "900150983cd24fb0d6963f7d28e17f72"
    );
    assert_eq!(
        eval::<f64>("return _hash('crc32', '123456789')").unwrap(),
        3421780262.0
    );
    assert_eq!(
        eval::<String>("return _regex('hello world', 'o', '[&]')").unwrap(),
        "hell[o] w[o]rld"
    );
    assert_eq!(
        eval::<String>("return kt.regex('hello world', '(o)', '<$1>')").unwrap(),
        "hell<o> w<o>rld"
    );
    let e = eval::<bool>("return _remove('x')").unwrap_err();
    assert!(
        e.contains("_remove: refused: the server has no --backup-dir"),
        "{e}"
    );
    let e = eval::<String>("return _codec('tcbs', 'x')").unwrap_err();
    assert!(e.contains("not supported"), "{e}");
}
