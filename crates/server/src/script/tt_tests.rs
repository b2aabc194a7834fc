use super::*;
use crate::mask::Mask;
use crate::script::tt_lock::{Locked, XO_LOCK_RECORD};
use crate::script::ScriptConf;
use kura_engine::name;
use std::io::Write;

struct Env {
    _file: tempfile::NamedTempFile,
    store: Arc<dyn Store>,
    shared: Shared,
}

impl Env {
    fn new(script: &str) -> Env {
        Env::on("*", script)
    }

    fn on(db: &str, script: &str) -> Env {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(script.as_bytes()).unwrap();
        let mut shared = Shared::new(0, 1 << 20);
        shared.threads = 2;
        shared.scripts = Some(Arc::new(
            Scripts::load(ScriptConf {
                ext: Some(f.path().to_path_buf()),
                timeout: Duration::from_millis(500),
                ..ScriptConf::default()
            })
            .unwrap(),
        ));
        let store: Arc<dyn Store> =
            Arc::new(Locked::new(name::open(db).unwrap(), shared.ext.clone()));
        Env {
            _file: f,
            store,
            shared,
        }
    }

    fn ext(&self, name: &str, k: &str, v: &str) -> Result<String, String> {
        self.ext_opts(name, 0, k, v)
    }

    fn ext_opts(&self, name: &str, opts: u32, k: &str, v: &str) -> Result<String, String> {
        ext(
            &*self.store,
            &self.shared,
            Proto::Tyrant,
            name.as_bytes(),
            opts,
            k.as_bytes(),
            v.as_bytes(),
        )
        .map(|b| String::from_utf8(b).unwrap())
    }

    fn ok(&self, name: &str, k: &str, v: &str) -> String {
        self.ext(name, k, v)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    }
}

const BASICS: &str = r#"
function put(k, v) return tostring(_put(k, v)) end
function putkeep(k, v) return tostring(_putkeep(k, v)) end
function putcat(k, v) return tostring(_putcat(k, v)) end
function out(k) return tostring(_out(k)) end
function get(k) return _get(k) end
function vsiz(k) return _vsiz(k) end
function addint(k, v) return _addint(k, tonumber(v)) or "nil" end
function adddouble(k, v) return _adddouble(k, tonumber(v)) or "nil" end
function rnum() return _rnum() end
function size() return _size() > 0 end
function fwm(p, n) return table.concat(_fwmkeys(p, tonumber(n)), ",") end
function iter()
  _iterinit()
  local ks = {}
  while true do
    local k = _iternext()
    if not k then break end
    ks[#ks + 1] = k
  end
  table.sort(ks)
  return table.concat(ks, ",")
end
function vanish() return tostring(_vanish()) end
function misc(name, arg)
  local r = _misc(name, arg, {"x"})
  if not r then return "nil" end
  return table.concat(r, ",")
end
function num() return 42 end
function yes() return true end
function no() return false end
function nothing() end
function first() return {"one", "two"} end
function boom() local t = nil; return t.x end
function echo(k, v) return k .. "=" .. v end
"#;

#[test]
fn the_database_built_ins_on_a_hash() {
    let e = Env::new(BASICS);
    assert_eq!(e.ok("put", "a", "1"), "true");
    assert_eq!(e.ok("putkeep", "a", "2"), "false");
    assert_eq!(e.ok("putkeep", "b", "2"), "true");
    assert_eq!(e.ok("putcat", "a", "x"), "true");
    assert_eq!(e.ok("get", "a", ""), "1x");
    assert!(e.ext("get", "zz", "").is_err());
    assert_eq!(e.ok("vsiz", "a", ""), "2");
    assert_eq!(e.ok("vsiz", "zz", ""), "-1");
    assert_eq!(e.ok("addint", "n", "5"), "5");
    assert_eq!(e.ok("addint", "n", "-2"), "3");
    // Not a 4-byte int: Tyrant's nil.
    assert_eq!(e.ok("addint", "a", "1"), "nil");
    assert_eq!(e.ok("adddouble", "d", "1.5"), "1.5");
    assert_eq!(e.ok("adddouble", "d", "1"), "2.5");
    assert_eq!(e.ok("rnum", "", ""), "4");
    assert_eq!(e.ok("size", "", ""), "true");
    assert_eq!(e.ok("fwm", "", "-1").split(',').count(), 4);
    assert_eq!(e.ok("fwm", "", "2").split(',').count(), 2);
    assert_eq!(e.ok("iter", "", ""), "a,b,d,n");
    assert_eq!(e.ok("out", "b", ""), "true");
    assert_eq!(e.ok("out", "b", ""), "false");
    // misc put with a list argument, then getlist.
    assert_eq!(e.ok("misc", "put", "m"), "");
    assert_eq!(e.ok("get", "m", ""), "x");
    assert_eq!(e.ok("misc", "nosuch", ""), "nil");
    assert_eq!(e.ok("vanish", "", ""), "true");
    assert_eq!(e.ok("rnum", "", ""), "0");
}

#[test]
fn results_as_tyrant_gives_them() {
    let e = Env::new(BASICS);
    assert_eq!(e.ok("num", "", ""), "42");
    assert_eq!(e.ok("yes", "", ""), "true");
    assert_eq!(e.ok("first", "", ""), "one");
    assert_eq!(e.ok("echo", "k", "v"), "k=v");
    assert!(e.ext("no", "", "").unwrap_err().contains("no result"));
    assert!(e.ext("nothing", "", "").unwrap_err().contains("no result"));
    let err = e.ext("boom", "", "").unwrap_err();
    assert!(err.contains("Lua error") && err.contains(":35:"), "{err}");
    assert!(e
        .ext("nosuch", "", "")
        .unwrap_err()
        .contains("no such function"));
    // Built-ins are not callable by name.
    assert!(e.ext("_put", "k", "v").is_err());
    assert!(e.store.get(b"k").unwrap().is_none());
    // Wrong argument types are Lua errors with the built-in's name.
    let e2 = Env::new("function f() return _put({}, 1) end");
    assert!(e2
        .ext("f", "", "")
        .unwrap_err()
        .contains("_put: invalid arguments"));
}

#[test]
fn masked_writes_fail_inside_the_script_with_their_reason() {
    let mut e = Env::new(BASICS);
    e.shared.mask.set(Mask::NONE.mask("put").unwrap());
    assert_eq!(e.ok("put", "a", "1"), "false");
    assert!(e.store.get(b"a").unwrap().is_none());
    // The reason is the call's, given when the function then fails.
    let e2 = {
        let e2 = Env::new("function f(k, v) if not _put(k, v) then return nil end return 'ok' end");
        e2.shared.mask.set(Mask::NONE.mask("put").unwrap());
        e2
    };
    let err = e2.ext("f", "a", "1").unwrap_err();
    assert!(err.contains("put refused by --mask"), "{err}");
    // A read-only replica refuses script writes too.
    let e3 = Env::new(BASICS);
    e3.shared.read_only.store(true, Ordering::Relaxed);
    assert_eq!(e3.ok("put", "a", "1"), "false");
    assert_eq!(e3.ok("addint", "n", "1"), "nil");
    assert!(e3.store.get(b"a").unwrap().is_none());
    // Over --max-value-size: refused.
    e.shared.mask.set(Mask::NONE);
    e.shared.max_value_size = 3;
    assert_eq!(e.ok("put", "a", "1234"), "false");
    assert_eq!(e.ok("put", "a", "123"), "true");
}

#[test]
fn an_expiry_sweep_on_a_table_and_on_a_hash() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.kt");
    // As Tyrant's spec: `_misc("search", {"addcond\0x\0NUMLE\0" .. now, "out"})`.
    let e = Env::on(
        db.to_str().unwrap(),
        r#"
function sweep(k, now)
  local r = _misc("search", {"addcond\0x\0NUMLE\0" .. now, "out"})
  return r and "swept" or nil
end
function add(k, x) return _misc("put", k, "x", x) and "ok" or nil end
function keys() local t = _fwmkeys("", -1) table.sort(t) return table.concat(t, ",") end
"#,
    );
    for (k, x) in [("a", "10"), ("b", "20"), ("c", "30")] {
        assert_eq!(e.ok("add", k, x), "ok");
    }
    assert_eq!(e.ok("sweep", "", "20"), "swept");
    assert_eq!(e.ok("keys", "", ""), "c");

    let h = Env::new(
        r#"
function sweep(k, now)
  local n = 0
  _foreach(function(k, v)
    if tonumber(v) <= tonumber(now) then _out(k) n = n + 1 end
    return true
  end)
  return n
end
"#,
    );
    for (k, v) in [("a", "10"), ("b", "20"), ("c", "30")] {
        h.store.put(k.as_bytes(), v.as_bytes()).unwrap();
    }
    assert_eq!(h.ok("sweep", "", "20"), "2");
    assert_eq!(h.store.count(), 1);
}

#[test]
fn stash_user_locks_and_mapreduce() {
    let e = Env::new(
        r#"
function stash(k, v)
  _stashput(k, v)
  _stashputcat(k, "!")
  local kept = _stashputkeep(k, "no")
  local n = 0
  _stashforeach(function(k, v) n = n + 1 return true end)
  return _stashget(k) .. tostring(kept) .. n
end
function unstash(k) return tostring(_stashout(k)) .. tostring(_stashget(k)) end
function lock(k) return tostring(_lock(k)) end
function unlock(k) return tostring(_unlock(k)) end
function wc()
  local out = {}
  local ok = _mapreduce(
    function(k, v, emit) for w in string.gmatch(v, "%a+") do emit(w, "1") end return true end,
    function(k, vs) out[#out + 1] = k .. "=" .. #vs return true end)
  return tostring(ok) .. ":" .. table.concat(out, ",")
end
"#,
    );
    assert_eq!(e.ok("stash", "k", "v"), "v!false1");
    assert_eq!(e.ok("unstash", "k", ""), "truenil");
    assert_eq!(e.ok("lock", "L", ""), "true");
    // Held across calls: a second `_lock` waits out its budget, then fails.
    let t = Instant::now();
    assert_eq!(e.ok("lock", "L", ""), "false");
    assert!(t.elapsed() >= Duration::from_millis(400));
    assert_eq!(e.ok("unlock", "L", ""), "true");
    assert_eq!(e.ok("unlock", "L", ""), "false");
    assert_eq!(e.ok("lock", "L", ""), "true");
    e.store.put(b"1", b"a b a").unwrap();
    e.store.put(b"2", b"b c").unwrap();
    assert_eq!(e.ok("wc", "", ""), "true:a=2,b=2,c=1");
}

#[test]
fn a_record_locked_call_is_atomic_against_plain_writers() {
    // The call reads, spends time, then writes back: a plain putcat that came between would
    // be lost without the lock.
    let e = Arc::new(Env::new(
        r#"
function slowcat(k, v)
  local old = _get(k) or ""
  for i = 1, 20000 do end
  _put(k, old .. v)
  return "ok"
end
"#,
    ));
    const N: usize = 200;
    std::thread::scope(|s| {
        let a = e.clone();
        s.spawn(move || {
            for _ in 0..N {
                a.ext_opts("slowcat", XO_LOCK_RECORD, "k", "y").unwrap();
            }
        });
        let b = e.clone();
        s.spawn(move || {
            for _ in 0..N {
                b.store.putcat(b"k", b"x").unwrap();
            }
        });
    });
    let v = e.store.get(b"k").unwrap().unwrap().value;
    let xs = v.iter().filter(|&&c| c == b'x').count();
    let ys = v.iter().filter(|&&c| c == b'y').count();
    assert_eq!((xs, ys), (N, N));
}

// Env holds a NamedTempFile and a Shared: shareable between the threads above.
unsafe impl Sync for Env {}

#[test]
fn globals_begin_eval_and_end() {
    let e = Env::new(
        r#"
begun = 0
function _begin() _stashput("begun", "yes") begun = begun + 1 end
function _end() _stashput("ended", "yes") end
function g() return _version .. " " .. _sid .. " " .. _thnum .. " " .. tostring(_thid > 0) .. " " .. tostring(_pid > 0) end
function begun_n() return begun end
function set(k, v) return tostring(_eval("x = '" .. v .. "'")) end
function getx() return x or "nil" end
"#,
    );
    assert_eq!(e.ok("g", "", ""), "1.1.41 1 2 true true");
    assert_eq!(e.ok("begun_n", "", ""), "1");
    assert_eq!(
        e.shared
            .ext
            .stash
            .lock()
            .unwrap()
            .get(&b"begun"[..])
            .map(Vec::as_slice),
        Some(&b"yes"[..])
    );
    // `_eval` reaches an interpreter of another thread before its next call.
    std::thread::scope(|s| {
        s.spawn(|| assert_eq!(e.ok("getx", "", ""), "nil"));
    });
    assert_eq!(e.ok("set", "", "7"), "true");
    std::thread::scope(|s| {
        s.spawn(|| {
            assert_eq!(e.ok("getx", "", ""), "7");
            // Not the first interpreter: `_begin` ran once only.
            assert_eq!(e.ok("begun_n", "", ""), "0");
        });
    });
    // The thread's interpreter that ran `_begin` runs `_end` when a reload replaces it.
    e.shared.scripts.as_ref().unwrap().reload().unwrap();
    assert_eq!(e.ok("begun_n", "", ""), "1");
    assert!(e
        .shared
        .ext
        .stash
        .lock()
        .unwrap()
        .contains_key(&b"ended"[..]));
}

#[test]
fn the_built_ins_on_every_kind() {
    // Numeric keys and values in a table's wire form: valid on every kind (a fixed-length
    // database takes ids, a table `column\0value`).
    let script = r#"
function all()
  local r = {}
  local function add(x) r[#r + 1] = tostring(x) end
  add(_put("1", "c\0one"))
  add(_putkeep("1", "c\0two"))
  add(_putkeep("2", "c\0two"))
  add(_get("1") == "c\0one")
  add(_vsiz("1"))
  add(_rnum())
  add(#_fwmkeys("", -1))
  add(_iterinit())
  local n = 0
  while _iternext() do n = n + 1 end
  add(n)
  n = 0
  add(_foreach(function(k, v) n = n + 1 return true end))
  add(n)
  add(_misc("out", "2") ~= nil)
  add(_out("1"))
  add(_rnum())
  return table.concat(r, " ")
end
"#;
    let dir = tempfile::tempdir().unwrap();
    for name in ["*", "+", "h.kh", "b.kb", "f.kf", "t.kt"] {
        let path = if name.len() > 1 {
            dir.path().join(name).display().to_string()
        } else {
            name.to_string()
        };
        let e = Env::on(&path, script);
        // On a fixed-length database fwmkeys is the binary fwmkeys' (ids, not prefixes, as
        // Tokyo Cabinet's tcfdbrange4): "" matches none.
        let fwm = if name == "f.kf" { 0 } else { 2 };
        assert_eq!(
            e.ok("all", "", ""),
            format!("true false true true 5 2 {fwm} true 2 true 2 true true 0"),
            "{name}"
        );
    }
}
