#![no_main]
//! The script helpers that read bytes a client sent (an `ext` key or value, a `play_script`
//! argument) on arbitrary bytes: `_unpack`, `kt.arrayload`, `kt.mapload`, the decoding
//! directions of `_codec` / `kt.codec`, `_split`, `_regex`, `_ucs`, `kt.levdist`, both as
//! plain functions and through the Lua bindings of a running interpreter. Never panics; what
//! a loader returns fits in the input; an interpreter stays usable.
//!
//! The wire decoders of the calls themselves are covered by `tt_bin` (Tyrant's `ext`, 0x68),
//! `kt_bin` (0xB4 play_script) and `http` (`/rpc/play_script` arguments).
use kura_engine::Store;
use kura_server::context::Shared;
use kura_server::mask::Proto;
use kura_server::script::util::{self, Codec, Dialect};
use kura_server::script::{with_interp, Ctx, Flavor, ScriptConf, Scripts};
use libfuzzer_sys::fuzz_target;
use std::io::Write;
use std::sync::OnceLock;

/// A script that hands the bytes to every helper that decodes client bytes.
const SCRIPT: &str = r#"
function f(data, fmt)
  local n = 0
  for _, mode in ipairs({"~url", "~base", "~quote", "~hex", "~deflate", "~gzip", "~xml"}) do
    if _codec(mode, data) then n = n + 1 end
  end
  for _, mode in ipairs({"~url", "~base", "~quote", "~hex", "~zlib", "~deflate", "~gzip"}) do
    if kt.codec(mode, data) then n = n + 1 end
  end
  n = n + #_unpack(fmt, data) + #kt.unpack(fmt, data)
  n = n + #kt.arrayload(data) + #_split(data) + #_split(data, fmt) + #_ucs(data)
  for _ in pairs(kt.mapload(data)) do n = n + 1 end
  pcall(_regex, data, fmt)
  pcall(kt.regex, data, fmt, "$1")
  pcall(kt.levdist, data, fmt, true)
  return n
end
"#;

struct World {
    _file: tempfile::NamedTempFile,
    scripts: Scripts,
    store: std::sync::Arc<dyn Store>,
    shared: Shared,
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        let mut file = tempfile::NamedTempFile::new().expect("temp file");
        file.write_all(SCRIPT.as_bytes()).expect("write script");
        let scripts = Scripts::load(ScriptConf {
            ext: Some(file.path().to_path_buf()),
            ..ScriptConf::default()
        })
        .expect("script loads");
        World {
            _file: file,
            scripts,
            store: kura_engine::open("*").expect("memory db"),
            shared: Shared::new(0, 4096),
        }
    })
}

fuzz_target!(|input: &[u8]| {
    let (fmt, data) = match input.iter().position(|&b| b == b'|') {
        Some(n) if n <= 16 => (&input[..n], &input[n + 1..]),
        _ => (&b"w*"[..], input),
    };

    let total: usize = util::array_load(data).iter().map(|v| v.len()).sum();
    assert!(total <= data.len());
    let total: usize = util::map_load(data)
        .iter()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    assert!(total <= data.len());
    assert!(util::unpack(fmt, data).len() <= data.len());
    for dialect in [Dialect::Tyrant, Dialect::Kyoto] {
        for c in [
            Codec::Url,
            Codec::Base64,
            Codec::Quote,
            Codec::Hex,
            Codec::Xml,
            Codec::Deflate,
            Codec::RawDeflate,
            Codec::Gzip,
        ] {
            let _ = util::codec(dialect, c, true, data);
        }
    }

    let w = world();
    let r = with_interp(
        &w.scripts,
        Flavor::Tyrant,
        Ctx {
            store: &*w.store,
            shared: &w.shared,
            proto: Proto::Tyrant,
        },
        |lua| {
            if lua.globals().get::<Option<mlua::Table>>("kt")?.is_none() {
                util::install_tyrant(lua)?;
                let kt = lua.create_table()?;
                util::install_kyoto(lua, &kt)?;
                lua.globals().set("kt", kt)?;
            }
            let f: mlua::Function = lua.globals().get("f")?;
            f.call::<f64>((lua.create_string(data)?, lua.create_string(fmt)?))
        },
    );
    if let Err(e) = r {
        panic!("the helpers failed on client bytes: {e}");
    }
});
