//! Kyoto Tycoon's `Cursor` objects for scripts (`db:cursor()`, `db:pairs()`).
//!
//! A script's cursor may outlive the call that made it (a global), while the store is only
//! reachable during a call: so it keeps its place as the key of the record it is on and its
//! direction, and each method places a store cursor there (`jump`, or `jump_back` after a
//! backward move) before acting. When that record was removed meanwhile, the cursor is on the
//! next one in its direction (an ordered kind), or nowhere (an unordered kind), as a Kyoto
//! Cabinet cursor whose record goes. Moves and reads are masked as the RPC's cursor
//! procedures are (`iterinit`, `iternext`, `put`, `out`).

use super::db::{
    bytes, decided_expiry, decided_op, denied, kt_step_on, noted, opt_bytes, opt_number, shown_xt,
    visit, Decided, LastError, INVALID, NOREC,
};
use crate::kt_common::kt_expiry;
use crate::mask::Op;
use crate::script::{ctx, Ctx};
use kura_engine::{Cursor, Record};
use mlua::{AnyUserData, Lua, MetaMethod, UserData, UserDataMethods, Value};
use std::cell::{Cell, RefCell};

pub(super) struct KtCur {
    /// The key of the record the cursor is on; `None`: nowhere.
    at: RefCell<Option<Vec<u8>>>,
    /// Whether its last move went backward.
    backward: Cell<bool>,
    err: LastError,
    db: AnyUserData,
}

pub(super) fn new(lua: &Lua, db: AnyUserData) -> mlua::Result<AnyUserData> {
    lua.create_userdata(KtCur {
        at: RefCell::new(None),
        backward: Cell::new(false),
        err: LastError::default(),
        db,
    })
}

pub(super) fn disable(c: &AnyUserData) -> mlua::Result<()> {
    *c.borrow::<KtCur>()?.at.borrow_mut() = None;
    Ok(())
}

pub(super) fn jump_first(lua: &Lua, c: &AnyUserData) -> mlua::Result<()> {
    let c = c.borrow::<KtCur>()?;
    c.run(lua, Op::IterInit, false, |_, cur| Ok(cur.first()))?;
    Ok(())
}

type Step<R> = mlua::Result<Result<R, kura_engine::Error>>;

impl KtCur {
    /// Run `f` on a store cursor (placed where this one is when `place`), then remember where
    /// it is. `None` when the mask refuses `op` or the store fails (the error is set).
    fn run<R>(
        &self,
        lua: &Lua,
        op: Op,
        place: bool,
        f: impl FnOnce(&Ctx<'_>, &mut dyn Cursor) -> Step<R>,
    ) -> mlua::Result<Option<R>> {
        let c = ctx(lua)?;
        if denied(&c, op, &self.err) {
            return Ok(None);
        }
        let mut cur = match c.store.cursor() {
            Ok(cur) => cur,
            Err(e) => {
                self.err.engine(&e);
                return Ok(None);
            }
        };
        let at = self.at.borrow().clone();
        if let (true, Some(k)) = (place, at) {
            let placed = if self.backward.get() {
                cur.jump_back(&k)
            } else {
                cur.jump(&k)
            };
            if let Err(e) = placed {
                self.err.engine(&e);
                return Ok(None);
            }
        }
        let r = f(&c, &mut *cur)?;
        *self.at.borrow_mut() = cur.get().ok().flatten().map(|(k, _)| k);
        self.backward.set(cur.backward());
        match r {
            Ok(v) => Ok(Some(v)),
            Err(e) => {
                self.err.engine(&e);
                Ok(None)
            }
        }
    }

    /// A move: true, or false with the error set (`NOREC` when there is no record there).
    fn moved(&self, r: Option<bool>) -> bool {
        match r {
            Some(true) => true,
            Some(false) => {
                self.err.set(NOREC, "no record");
                false
            }
            None => false,
        }
    }

    /// The record the cursor is on, stepping on after it when `step`.
    fn read(&self, lua: &Lua, step: bool) -> mlua::Result<Option<(Vec<u8>, Record)>> {
        let got = self.run(lua, Op::IterNext, true, |_, cur| {
            Ok((|| {
                let r = cur.get()?;
                if r.is_some() && step {
                    kt_step_on(cur)?;
                }
                Ok(r)
            })())
        })?;
        let got = got.flatten();
        if got.is_none() {
            self.err.set(NOREC, "no record");
        }
        Ok(got)
    }
}

/// A record as `get` and `seize` give it: key, value and xt; three nils when none.
fn trio(lua: &Lua, rec: Option<(Vec<u8>, Record)>) -> mlua::Result<(Value, Value, Value)> {
    Ok(match rec {
        Some((k, r)) => (
            Value::String(lua.create_string(k)?),
            Value::String(lua.create_string(r.value)?),
            Value::Number(shown_xt(r.meta.expires)),
        ),
        None => (Value::Nil, Value::Nil, Value::Nil),
    })
}

impl UserData for KtCur {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("jump", |lua, c, k: Value| {
            let key = opt_bytes(lua, k, "cur:jump", "key")?;
            let r = c.run(lua, Op::IterInit, false, |_, cur| {
                Ok(match &key {
                    Some(k) => cur.jump(k),
                    None => cur.first(),
                })
            })?;
            Ok(c.moved(r))
        });
        m.add_method("jump_back", |lua, c, k: Value| {
            let key = opt_bytes(lua, k, "cur:jump_back", "key")?;
            let r = c.run(lua, Op::IterInit, false, |_, cur| {
                Ok(match &key {
                    Some(k) => cur.jump_back(k),
                    None => cur.last(),
                })
            })?;
            Ok(c.moved(r))
        });
        m.add_method("step", |lua, c, ()| {
            let r = c.run(lua, Op::IterNext, true, |_, cur| Ok(cur.step()))?;
            Ok(c.moved(r))
        });
        m.add_method("step_back", |lua, c, ()| {
            let r = c.run(lua, Op::IterNext, true, |_, cur| Ok(cur.step_back()))?;
            Ok(c.moved(r))
        });
        m.add_method("get_key", |lua, c, step: Option<bool>| {
            Ok(match c.read(lua, step == Some(true))? {
                Some((k, _)) => Value::String(lua.create_string(k)?),
                None => Value::Nil,
            })
        });
        m.add_method("get_value", |lua, c, step: Option<bool>| {
            Ok(match c.read(lua, step == Some(true))? {
                Some((_, r)) => Value::String(lua.create_string(r.value)?),
                None => Value::Nil,
            })
        });
        m.add_method("get", |lua, c, step: Option<bool>| {
            trio(lua, c.read(lua, step == Some(true))?)
        });
        m.add_method("seize", |lua, c, ()| {
            let r = c.run(lua, Op::Out, true, |c2, cur| {
                Ok((|| {
                    let Some((k, _)) = cur.get()? else {
                        return Ok(None);
                    };
                    if !noted(c2, &k, &c.err) {
                        return Ok(None);
                    }
                    cur.seize()
                })())
            })?;
            trio(lua, r.flatten())
        });
        m.add_method(
            "set_value",
            |lua, c, (v, xt, step): (Value, Value, Option<bool>)| {
                let value = bytes(lua, v, "cur:set_value", "value")?;
                let xt = opt_number(lua, xt, "cur:set_value", "xt")?;
                let expires = xt.map_or(0, |x| kt_expiry(x as i64, super::db::now()));
                let r = c.run(lua, Op::Put, true, |c2, cur| {
                    if let Err(e) = c2.shared.check_value("Kyoto Tycoon script", value.len()) {
                        c.err.set(INVALID, e.to_string());
                        return Ok(Ok(false));
                    }
                    Ok((|| {
                        let Some((k, _)) = cur.get()? else {
                            return Ok(false);
                        };
                        if !noted(c2, &k, &c.err) {
                            return Ok(false);
                        }
                        let done = cur.set_value(&value, Some(expires))?;
                        if done && step == Some(true) {
                            kt_step_on(cur)?;
                        }
                        Ok(done)
                    })())
                })?;
                Ok(r == Some(true))
            },
        );
        m.add_method("remove", |lua, c, ()| {
            let r = c.run(lua, Op::Out, true, |c2, cur| {
                Ok((|| {
                    let Some((k, _)) = cur.get()? else {
                        return Ok(false);
                    };
                    if !noted(c2, &k, &c.err) {
                        return Ok(false);
                    }
                    cur.remove()
                })())
            })?;
            Ok(c.moved(r))
        });
        m.add_method(
            "accept",
            |lua, c, (visitor, writable, step): (Value, Option<bool>, Option<bool>)| {
                let writable = writable != Some(false);
                let r = c.run(lua, Op::IterNext, true, |c2, cur| {
                    let (k, rec) = match cur.get() {
                        Ok(Some(kr)) => kr,
                        Ok(None) => return Ok(Ok(false)),
                        Err(e) => return Ok(Err(e)),
                    };
                    let d = visit(lua, &visitor, &k, Some(&rec))?;
                    let op = decided_op(&d).filter(|_| writable);
                    if let Some(op) = op {
                        if denied(c2, op, &c.err) || !noted(c2, &k, &c.err) {
                            return Ok(Ok(false));
                        }
                    }
                    Ok((|| {
                        let removed = match (&d, op) {
                            (Decided::Set(v, xt), Some(_)) => {
                                cur.set_value(v, Some(decided_expiry(*xt, Some(&rec))))?;
                                false
                            }
                            (Decided::Remove, Some(_)) => cur.remove()?,
                            _ => false,
                        };
                        if step == Some(true) && !removed {
                            kt_step_on(cur)?;
                        }
                        Ok(true)
                    })())
                })?;
                Ok(r == Some(true))
            },
        );
        m.add_method("db", |_, c, ()| Ok(c.db.clone()));
        m.add_method("error", |_, c, ()| Ok(c.err.get()));
        m.add_method("disable", |_, c, ()| {
            *c.at.borrow_mut() = None;
            Ok(())
        });
        // for k, v in db:pairs() do … end: each call gives the record and steps on.
        m.add_meta_method(MetaMethod::Call, |lua, c, _args: mlua::Variadic<Value>| {
            Ok(match c.read(lua, true)? {
                Some((k, r)) => (
                    Value::String(lua.create_string(k)?),
                    Value::String(lua.create_string(r.value)?),
                ),
                None => (Value::Nil, Value::Nil),
            })
        });
        m.add_meta_method(MetaMethod::ToString, |_, c, ()| {
            Ok(match &*c.at.borrow() {
                Some(k) => format!("cursor: {}", String::from_utf8_lossy(k)),
                None => "cursor: (nowhere)".to_string(),
            })
        });
    }
}
