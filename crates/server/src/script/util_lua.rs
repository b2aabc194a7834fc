//! The Lua bindings of the shared helpers: Tyrant's globals (`_pack`, `_codec`, …, as
//! scrext.c registers them) and Kyoto Tycoon's `kt` functions (`kt.pack`, `kt.codec`, …, as
//! ktscrex.cc defines them). Arguments are read as the originals read them (`lua_tostring`:
//! a number is taken as its text; `lua_tonumber`: what is not a number is 0); a call with the
//! wrong arguments is the originals' error, `NAME: invalid arguments`.

use super::{fs, Dialect};
use crate::script::{ctx, expire, time_left};
use mlua::{Lua, MultiValue, Table, Value};
use std::time::Duration;

fn invalid(name: &str) -> mlua::Error {
    mlua::Error::RuntimeError(format!("{name}: invalid arguments"))
}

fn too_large(name: &str) -> mlua::Error {
    mlua::Error::RuntimeError(format!(
        "{name}: the result would pass {} MiB",
        super::OUTPUT_LIMIT >> 20
    ))
}

/// `lua_tolstring`: a string's bytes, a number's text, else none.
fn text(lua: &Lua, v: Option<&Value>) -> mlua::Result<Option<Vec<u8>>> {
    Ok(match v {
        Some(Value::String(s)) => Some(s.as_bytes().to_vec()),
        Some(v @ (Value::Integer(_) | Value::Number(_))) => {
            lua.coerce_string(v.clone())?.map(|s| s.as_bytes().to_vec())
        }
        _ => None,
    })
}

/// `lua_tonumber`: a number, a string that reads as one, else 0.
fn number(lua: &Lua, v: Option<&Value>) -> f64 {
    match v {
        Some(Value::Integer(i)) => *i as f64,
        Some(Value::Number(n)) => *n,
        Some(v @ Value::String(_)) => lua.coerce_number(v.clone()).ok().flatten().unwrap_or(0.0),
        _ => 0.0,
    }
}

fn truthy(v: Option<&Value>) -> bool {
    !matches!(v, None | Some(Value::Nil) | Some(Value::Boolean(false)))
}

fn need_text(lua: &Lua, name: &str, v: Option<&Value>) -> mlua::Result<Vec<u8>> {
    text(lua, v)?.ok_or_else(|| invalid(name))
}

fn bytes(lua: &Lua, b: &[u8]) -> mlua::Result<Value> {
    Ok(Value::String(lua.create_string(b)?))
}

fn list<'a>(lua: &Lua, items: impl IntoIterator<Item = &'a [u8]>) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    for (i, s) in items.into_iter().enumerate() {
        t.raw_set(i + 1, lua.create_string(s)?)?;
    }
    Ok(t)
}

fn numbers(lua: &Lua, items: &[f64]) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, &n) in items.iter().enumerate() {
        t.raw_set(i + 1, n)?;
    }
    Ok(t)
}

/// Register `f` as `name` in `target` (the globals, or the `kt` table).
fn set<F>(lua: &Lua, target: &Table, name: &'static str, f: F) -> mlua::Result<()>
where
    F: Fn(&Lua, &'static str, MultiValue) -> mlua::Result<MultiValue> + Send + 'static,
{
    let func = lua.create_function(move |lua, args: MultiValue| f(lua, name, args))?;
    target.set(name, func)
}

fn one(v: impl mlua::IntoLua, lua: &Lua) -> mlua::Result<MultiValue> {
    Ok(MultiValue::from_vec(vec![v.into_lua(lua)?]))
}

fn none() -> mlua::Result<MultiValue> {
    Ok(MultiValue::new())
}

// ---------------------------------------------------------------------------------------------
// the helpers both interfaces give

fn pack(lua: &Lua, name: &str, args: MultiValue) -> mlua::Result<MultiValue> {
    let args: Vec<Value> = args.into_iter().collect();
    let format = need_text(lua, name, args.first())?;
    let mut nums = Vec::new();
    for v in &args[1..] {
        match v {
            Value::Table(t) => {
                for i in 1..=t.raw_len() {
                    nums.push(number(lua, Some(&t.raw_get::<Value>(i)?)));
                }
            }
            v => nums.push(number(lua, Some(v))),
        }
    }
    one(bytes(lua, &super::pack(&format, &nums))?, lua)
}

fn unpack(lua: &Lua, name: &str, args: MultiValue) -> mlua::Result<MultiValue> {
    if args.len() != 2 {
        return Err(invalid(name));
    }
    let format = need_text(lua, name, args.front())?;
    let data = text(lua, args.get(1))?.unwrap_or_default();
    one(numbers(lua, &super::unpack(&format, &data))?, lua)
}

fn split(lua: &Lua, name: &str, args: MultiValue) -> mlua::Result<MultiValue> {
    let input = need_text(lua, name, args.front())?;
    let delims = text(lua, args.get(1))?;
    one(list(lua, super::split(&input, delims.as_deref()))?, lua)
}

fn codec(lua: &Lua, name: &str, dialect: Dialect, args: MultiValue) -> mlua::Result<MultiValue> {
    if args.len() != 2 {
        return Err(invalid(name));
    }
    let mode = need_text(lua, name, args.front())?;
    let input = need_text(lua, name, args.get(1))?;
    let (decode, mode) = match mode.strip_prefix(b"~") {
        Some(m) => (true, m),
        None => (false, &mode[..]),
    };
    let codec = super::codec_named(dialect, mode)
        .map_err(|e| mlua::Error::RuntimeError(format!("{name}: {e}")))?;
    match codec.and_then(|c| super::codec(dialect, c, decode, &input)) {
        Some(out) => one(bytes(lua, &out)?, lua),
        None => one(Value::Nil, lua),
    }
}

fn bit(lua: &Lua, name: &str, dialect: Dialect, args: MultiValue) -> mlua::Result<MultiValue> {
    if args.len() < 2 {
        return Err(invalid(name));
    }
    let mode = need_text(lua, name, args.front())?;
    let num = super::to_u32(number(lua, args.get(1)));
    let aux = super::to_u32(number(lua, args.get(2)));
    match super::bit(&mode, num, aux) {
        Some(n) => one(f64::from(n), lua),
        // Kyoto Tycoon returns the number as it is; Tyrant refuses the mode.
        None if dialect == Dialect::Kyoto => one(f64::from(num), lua),
        None => Err(invalid(name)),
    }
}

fn strstr(lua: &Lua, name: &str, args: MultiValue) -> mlua::Result<MultiValue> {
    if args.len() < 2 {
        return Err(invalid(name));
    }
    let s = need_text(lua, name, args.front())?;
    let pat = need_text(lua, name, args.get(1))?;
    match text(lua, args.get(2))? {
        Some(alt) => match super::strstr_replace(&s, &pat, &alt) {
            Some(out) => one(bytes(lua, &out)?, lua),
            None => Err(too_large(name)),
        },
        None => one(super::strstr(&s, &pat) as f64, lua),
    }
}

fn regex(lua: &Lua, name: &str, dialect: Dialect, args: MultiValue) -> mlua::Result<MultiValue> {
    if args.len() < 2 {
        return Err(invalid(name));
    }
    let s = need_text(lua, name, args.front())?;
    let pat = need_text(lua, name, args.get(1))?;
    match text(lua, args.get(2))? {
        Some(alt) => match super::regex_replace(dialect, &s, &pat, &alt) {
            Some(out) => one(bytes(lua, &out)?, lua),
            None => Err(too_large(name)),
        },
        None => one(super::regex_match(dialect, &s, &pat), lua),
    }
}

fn dist(lua: &Lua, name: &str, dialect: Dialect, args: MultiValue) -> mlua::Result<MultiValue> {
    if args.len() < 2 {
        return Err(invalid(name));
    }
    let a = need_text(lua, name, args.front())?;
    let b = need_text(lua, name, args.get(1))?;
    let utf = truthy(args.get(2));
    let d = match (dialect, utf) {
        (Dialect::Tyrant, false) => super::edit_distance(super::cstr(&a), super::cstr(&b)),
        (Dialect::Tyrant, true) => {
            super::edit_distance(&super::utf8_to_ucs2(&a), &super::utf8_to_ucs2(&b))
        }
        (Dialect::Kyoto, false) => super::edit_distance(&a, &b),
        (Dialect::Kyoto, true) => {
            super::edit_distance(&super::utf8_to_ucs4(&a), &super::utf8_to_ucs4(&b))
        }
    };
    let d = d.ok_or_else(|| {
        mlua::Error::RuntimeError(format!(
            "{name}: the strings are too long (their lengths' product passes {})",
            super::DIST_LIMIT
        ))
    })?;
    one(d as f64, lua)
}

fn time(lua: &Lua, name: &str, args: MultiValue) -> mlua::Result<MultiValue> {
    if !args.is_empty() {
        return Err(invalid(name));
    }
    one(super::now(), lua)
}

/// Sleep `secs` inside the call's time budget: a sleep that would pass the budget sleeps to
/// its end and stops the call as a timeout.
fn sleep_in_budget(lua: &Lua, secs: f64) -> mlua::Result<()> {
    let left = time_left(lua)
        .ok_or_else(|| mlua::Error::RuntimeError("called outside a request".into()))?;
    if secs.is_nan() || secs <= 0.0 {
        std::thread::yield_now();
        return Ok(());
    }
    let want = Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX);
    if want >= left {
        std::thread::sleep(left);
        return Err(expire(lua));
    }
    std::thread::sleep(want);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Tyrant

fn hash(lua: &Lua, name: &str, args: MultiValue) -> mlua::Result<MultiValue> {
    if args.len() != 2 {
        return Err(invalid(name));
    }
    let mode = need_text(lua, name, args.front())?;
    let input = need_text(lua, name, args.get(1))?;
    match String::from_utf8_lossy(super::cstr(&mode))
        .to_ascii_lowercase()
        .as_str()
    {
        "md5" => one(bytes(lua, &super::hex_encode(&super::md5(&input)))?, lua),
        "md5raw" => one(bytes(lua, &super::md5(&input))?, lua),
        "crc32" => one(f64::from(super::crc32(&input)), lua),
        _ => one(Value::Nil, lua),
    }
}

fn ucs(lua: &Lua, name: &str, args: MultiValue) -> mlua::Result<MultiValue> {
    if args.len() != 1 {
        return Err(invalid(name));
    }
    if let Some(Value::Table(t)) = args.front() {
        let mut units = Vec::with_capacity(t.raw_len());
        for i in 1..=t.raw_len() {
            units.push(super::to_u64(number(lua, Some(&t.raw_get::<Value>(i)?))) as u16);
        }
        return one(bytes(lua, &super::ucs2_to_utf8(&units))?, lua);
    }
    let s = need_text(lua, name, args.front())?;
    let units: Vec<f64> = super::utf8_to_ucs2(&s).into_iter().map(f64::from).collect();
    one(numbers(lua, &units)?, lua)
}

/// The lists `_isect` / `_union` work on: their table arguments, or the tables inside a single
/// table argument; a list's strings and numbers (as text), other values skipped.
fn lists(lua: &Lua, args: MultiValue) -> mlua::Result<Vec<Vec<Vec<u8>>>> {
    let mut tables: Vec<Table> = Vec::new();
    if let (1, Some(Value::Table(t))) = (args.len(), args.front()) {
        for i in 1..=t.raw_len() {
            match t.raw_get::<Value>(i)? {
                Value::Table(inner) => tables.push(inner),
                _ => break,
            }
        }
        if tables.is_empty() {
            tables.push(t.clone());
        }
    } else {
        tables.extend(args.iter().filter_map(|v| match v {
            Value::Table(t) => Some(t.clone()),
            _ => None,
        }));
    }
    let mut out = Vec::with_capacity(tables.len());
    for t in tables {
        let mut items = Vec::with_capacity(t.raw_len());
        for i in 1..=t.raw_len() {
            if let Some(s) = text(lua, Some(&t.raw_get::<Value>(i)?))? {
                items.push(s);
            }
        }
        out.push(items);
    }
    Ok(out)
}

fn fs_path(lua: &Lua, name: &str, args: &MultiValue) -> mlua::Result<Vec<u8>> {
    if args.len() != 1 {
        return Err(invalid(name));
    }
    need_text(lua, name, args.front())
}

fn refused(name: &str, e: fs::FsError) -> mlua::Error {
    mlua::Error::RuntimeError(format!("{name}: {e}"))
}

fn stat_table(lua: &Lua, s: &fs::Stat) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    for (k, v) in [
        ("dev", s.dev as f64),
        ("ino", s.ino as f64),
        ("mode", f64::from(s.mode)),
        ("nlink", s.nlink as f64),
        ("uid", f64::from(s.uid)),
        ("gid", f64::from(s.gid)),
        ("rdev", s.rdev as f64),
        ("size", s.size as f64),
        ("blksize", s.blksize as f64),
        ("blocks", s.blocks as f64),
        ("atime", s.atime as f64),
        ("mtime", s.mtime as f64),
        ("ctime", s.ctime as f64),
    ] {
        t.set(k, v)?;
    }
    t.set("_regular", s.regular)?;
    t.set("_directory", s.directory)?;
    t.set("_readable", s.readable)?;
    t.set("_writable", s.writable)?;
    t.set("_executable", s.executable)?;
    if let Some(r) = &s.realpath {
        t.set("_realpath", lua.create_string(r)?)?;
    }
    Ok(t)
}

/// Install Tyrant's shared helpers as globals: `_pack _unpack _split _codec _hash _bit
/// _strstr _regex _ucs _dist _isect _union _time _sleep _stat _glob _remove _mkdir`.
pub fn install_tyrant(lua: &Lua) -> mlua::Result<()> {
    let g = lua.globals();
    const T: Dialect = Dialect::Tyrant;
    set(lua, &g, "_pack", pack)?;
    set(lua, &g, "_unpack", unpack)?;
    set(lua, &g, "_split", split)?;
    set(lua, &g, "_codec", |l, n, a| codec(l, n, T, a))?;
    set(lua, &g, "_hash", hash)?;
    set(lua, &g, "_bit", |l, n, a| bit(l, n, T, a))?;
    set(lua, &g, "_strstr", strstr)?;
    set(lua, &g, "_regex", |l, n, a| regex(l, n, T, a))?;
    set(lua, &g, "_ucs", ucs)?;
    set(lua, &g, "_dist", |l, n, a| dist(l, n, T, a))?;
    set(lua, &g, "_isect", |l, _, a| {
        one(
            list(l, super::isect(&lists(l, a)?).iter().map(Vec::as_slice))?,
            l,
        )
    })?;
    set(lua, &g, "_union", |l, _, a| {
        one(
            list(l, super::union(&lists(l, a)?).iter().map(Vec::as_slice))?,
            l,
        )
    })?;
    set(lua, &g, "_time", time)?;
    set(lua, &g, "_sleep", |l, n, a| {
        if a.len() != 1 || !matches!(a.front(), Some(Value::Integer(_) | Value::Number(_))) {
            return Err(invalid(n));
        }
        sleep_in_budget(l, number(l, a.front()))?;
        one(true, l)
    })?;
    set(lua, &g, "_stat", |l, n, a| {
        let p = fs_path(l, n, &a)?;
        let bd = ctx(l)?.shared.backup_dir.as_ref();
        match fs::stat(bd, &p).map_err(|e| refused(n, e))? {
            Some(s) => one(stat_table(l, &s)?, l),
            None => one(Value::Nil, l),
        }
    })?;
    set(lua, &g, "_glob", |l, n, a| {
        let p = fs_path(l, n, &a)?;
        let bd = ctx(l)?.shared.backup_dir.as_ref();
        let paths = fs::glob(bd, &p).map_err(|e| refused(n, e))?;
        one(list(l, paths.iter().map(Vec::as_slice))?, l)
    })?;
    set(lua, &g, "_remove", |l, n, a| {
        let p = fs_path(l, n, &a)?;
        let bd = ctx(l)?.shared.backup_dir.as_ref();
        one(fs::remove(bd, &p).map_err(|e| refused(n, e))?, l)
    })?;
    set(lua, &g, "_mkdir", |l, n, a| {
        let p = fs_path(l, n, &a)?;
        let bd = ctx(l)?.shared.backup_dir.as_ref();
        one(fs::make_dir(bd, &p).map_err(|e| refused(n, e))?, l)
    })?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Kyoto Tycoon

fn dump_text(lua: &Lua, v: &Value) -> mlua::Result<Option<Vec<u8>>> {
    Ok(match v {
        Value::Integer(i) => Some(super::number_text(*i as f64).into_bytes()),
        Value::Number(n) => Some(super::number_text(*n).into_bytes()),
        Value::String(_) => text(lua, Some(v))?,
        _ => None,
    })
}

/// Install Kyoto Tycoon's helpers on the `kt` module table: `log atoi atoix atof hash_murmur
/// hash_fnv levdist time sleep pack unpack split codec bit strstr strfwm strbwm regex
/// arraydump arrayload mapdump mapload`.
pub fn install_kyoto(lua: &Lua, kt: &Table) -> mlua::Result<()> {
    const K: Dialect = Dialect::Kyoto;
    set(lua, kt, "log", |l, n, a| {
        if a.len() != 2
            || !matches!(
                a.front(),
                Some(Value::String(_) | Value::Integer(_) | Value::Number(_))
            )
        {
            return Err(invalid(n));
        }
        let kind = text(l, a.front())?.unwrap_or_default();
        let message = text(l, a.get(1))?;
        if let Some(message) = message {
            let kind = match String::from_utf8_lossy(&kind).to_ascii_lowercase().as_str() {
                "info" => "info",
                "system" => "system",
                "error" => "error",
                _ => "debug",
            };
            ctx(l)?.shared.log.line(&format!(
                "[SCRIPT] {kind}: {}",
                String::from_utf8_lossy(super::cstr(&message))
            ));
        }
        none()
    })?;
    fn conv(
        f: fn(&[u8]) -> f64,
    ) -> impl Fn(&Lua, &'static str, MultiValue) -> mlua::Result<MultiValue> + Send + 'static {
        move |l, n, a| {
            if a.len() != 1 {
                return Err(invalid(n));
            }
            match text(l, a.front())? {
                Some(s) => one(f(&s), l),
                None => none(),
            }
        }
    }
    set(lua, kt, "atoi", conv(|s| super::atoi(s) as f64))?;
    set(lua, kt, "atoix", conv(|s| super::atoix(s) as f64))?;
    set(lua, kt, "atof", conv(super::atof))?;
    set(
        lua,
        kt,
        "hash_murmur",
        conv(|s| (super::hash_murmur(s) & super::KT_HASH_MASK) as f64),
    )?;
    set(
        lua,
        kt,
        "hash_fnv",
        conv(|s| (super::hash_fnv(s) & super::KT_HASH_MASK) as f64),
    )?;
    set(lua, kt, "levdist", |l, n, a| dist(l, n, K, a))?;
    set(lua, kt, "time", time)?;
    set(lua, kt, "sleep", |l, n, a| {
        if a.len() > 1 {
            return Err(invalid(n));
        }
        sleep_in_budget(l, number(l, a.front()))?;
        none()
    })?;
    set(lua, kt, "pack", pack)?;
    set(lua, kt, "unpack", unpack)?;
    set(lua, kt, "split", split)?;
    set(lua, kt, "codec", |l, n, a| codec(l, n, K, a))?;
    set(lua, kt, "bit", |l, n, a| bit(l, n, K, a))?;
    set(lua, kt, "strstr", strstr)?;
    set(lua, kt, "strfwm", |l, n, a| {
        if a.len() < 2 {
            return Err(invalid(n));
        }
        let s = need_text(l, n, a.front())?;
        let k = need_text(l, n, a.get(1))?;
        one(super::strfwm(&s, &k), l)
    })?;
    set(lua, kt, "strbwm", |l, n, a| {
        if a.len() < 2 {
            return Err(invalid(n));
        }
        let s = need_text(l, n, a.front())?;
        let k = need_text(l, n, a.get(1))?;
        one(super::strbwm(&s, &k), l)
    })?;
    set(lua, kt, "regex", |l, n, a| regex(l, n, K, a))?;
    set(lua, kt, "arraydump", |l, n, a| {
        let (1, Some(Value::Table(t))) = (a.len(), a.front()) else {
            return Err(invalid(n));
        };
        let mut items = Vec::with_capacity(t.raw_len());
        for i in 1..=t.raw_len() {
            if let Some(s) = dump_text(l, &t.raw_get::<Value>(i)?)? {
                items.push(s);
            }
        }
        one(
            bytes(l, &super::array_dump(items.iter().map(Vec::as_slice)))?,
            l,
        )
    })?;
    set(lua, kt, "arrayload", |l, n, a| {
        if a.len() != 1 {
            return Err(invalid(n));
        }
        let buf = need_text(l, n, a.front())?;
        one(list(l, super::array_load(&buf))?, l)
    })?;
    set(lua, kt, "mapdump", |l, n, a| {
        let (1, Some(Value::Table(t))) = (a.len(), a.front()) else {
            return Err(invalid(n));
        };
        let mut pairs = Vec::new();
        for pair in t.pairs::<Value, Value>() {
            let (k, v) = pair?;
            if let (Some(k), Some(v)) = (dump_text(l, &k)?, dump_text(l, &v)?) {
                pairs.push((k, v));
            }
        }
        let dump = super::map_dump(pairs.iter().map(|(k, v)| (k.as_slice(), v.as_slice())));
        one(bytes(l, &dump)?, l)
    })?;
    set(lua, kt, "mapload", |l, n, a| {
        if a.len() != 1 {
            return Err(invalid(n));
        }
        let buf = need_text(l, n, a.front())?;
        let t = l.create_table()?;
        for (k, v) in super::map_load(&buf) {
            t.raw_set(l.create_string(k)?, l.create_string(v)?)?;
        }
        one(t, l)
    })?;
    Ok(())
}
