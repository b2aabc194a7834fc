use super::*;
use kura_engine::name;
use std::io::Write;

fn scripts(text: &str, conf: ScriptConf) -> (tempfile::NamedTempFile, Scripts) {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    let s = Scripts::load(ScriptConf {
        ext: Some(f.path().to_path_buf()),
        ..conf
    })
    .unwrap();
    (f, s)
}

fn call(s: &Scripts, name: &str) -> Result<String, CallError> {
    let db = name::open("*").unwrap();
    let sh = Shared::new(0, 1 << 20);
    with_interp(
        s,
        Flavor::Tyrant,
        Ctx {
            store: &*db,
            shared: &sh,
            proto: Proto::Tyrant,
        },
        |lua| {
            let f: mlua::Function = lua.globals().get(name)?;
            f.call::<String>(())
        },
    )
}

#[test]
fn a_function_runs_and_the_top_level_runs_once_per_interpreter() {
    let (_f, s) = scripts(
        "n = 0\nfunction f() n = n + 1 return tostring(n) end",
        ScriptConf::default(),
    );
    assert_eq!(call(&s, "f").unwrap(), "1");
    assert_eq!(call(&s, "f").unwrap(), "2");
    s.reload().unwrap();
    assert_eq!(call(&s, "f").unwrap(), "1");
}

#[test]
fn a_runaway_loop_stops_even_under_pcall() {
    let conf = ScriptConf {
        timeout: Duration::from_millis(100),
        ..ScriptConf::default()
    };
    let (_f, s) = scripts(
        "function f() while true do end end\n\
         function g() while true do pcall(function() while true do end end) end end\n\
         function h() local co = coroutine.create(function() while true do end end)\n\
           while true do coroutine.resume(co) end end\n\
         function ok() return 'fine' end",
        conf,
    );
    for name in ["f", "g", "h"] {
        let t = Instant::now();
        assert_eq!(
            call(&s, name),
            Err(CallError::Timeout(Duration::from_millis(100))),
            "{name}"
        );
        assert!(t.elapsed() < Duration::from_secs(3), "{name}");
    }
    // The interpreter serves the next call.
    assert_eq!(call(&s, "ok").unwrap(), "fine");
}

#[test]
fn memory_is_bounded_and_errors_carry_their_line() {
    let conf = ScriptConf {
        memory: 4 << 20,
        ..ScriptConf::default()
    };
    let (_f, s) = scripts(
        "function big() local t = {} for i = 1, 1e8 do t[i] = string.rep('x', 100) .. i end end\n\
         function bad() error('no such thing') end\n\
         function ok() return 'fine' end",
        conf,
    );
    let e = call(&s, "big").unwrap_err();
    assert!(e.to_string().contains("memory"), "{e}");
    let e = call(&s, "bad").unwrap_err().to_string();
    assert!(e.contains(":2:") && e.contains("no such thing"), "{e}");
    assert_eq!(call(&s, "ok").unwrap(), "fine");
}

#[test]
fn a_reload_that_fails_keeps_the_old_script() {
    let (f, s) = scripts("function f() return 'one' end", ScriptConf::default());
    assert_eq!(call(&s, "f").unwrap(), "one");
    std::fs::write(f.path(), "function f( return 'two' end").unwrap();
    let e = s.reload().unwrap_err();
    assert!(e.contains(":1:"), "{e}");
    assert_eq!(call(&s, "f").unwrap(), "one");
    std::fs::write(f.path(), "function f() return 'two' end").unwrap();
    s.reload().unwrap();
    assert_eq!(call(&s, "f").unwrap(), "two");
}

#[test]
fn built_ins_reach_the_store_only_inside_a_call() {
    let (_f, s) = scripts("function f() return 'x' end", ScriptConf::default());
    let db = name::open("*").unwrap();
    let sh = Shared::new(0, 1 << 20);
    let lua = with_interp(
        &s,
        Flavor::Tyrant,
        Ctx {
            store: &*db,
            shared: &sh,
            proto: Proto::Tyrant,
        },
        |lua| {
            assert!(ctx(lua).is_ok());
            Ok(())
        },
    );
    assert!(lua.is_ok());
    INTERPS.with(|c| {
        let slots = c.borrow();
        let lua = &slots[0].as_ref().unwrap().lua;
        assert!(ctx(lua).is_err());
    });
}
