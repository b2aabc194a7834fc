//! Executes memcached binary-protocol requests on a [`Store`] (same semantics and counters as
//! the text protocol in [`crate::mc_exec`]).

use crate::context::{self, Next, Shared};
use crate::mask::{Mask, Op, Proto};
use crate::mc_common::{absolute_expiry, append, Did};
use crate::mc_exec::flush_all;
use crate::mc_stats::stat_pairs;
use crate::out::{Out, PIN_MIN};
use kura_engine::MemcachedOps;
use kura_engine::{Counted, Decision, Error, Meta, Outcome, Shown, Store, Value};
use kura_proto::mc_bin::{
    encode_error, encode_response, encode_response_header, op, status, Request,
};

/// Execute one request, appending its response packets (if any) to `out`.
pub fn execute(
    store: &dyn Store,
    shared: &Shared,
    req: &Request<'_>,
    now: u64,
    out: &mut Out,
) -> Next {
    context::execute(
        &mut Binary { store, shared, now },
        store,
        shared,
        req,
        now,
        out,
    )
}

/// The memcached binary protocol in the steps every request takes.
struct Binary<'x> {
    store: &'x dyn Store,
    shared: &'x Shared,
    now: u64,
}

impl context::Exec for Binary<'_> {
    type Req<'a> = Request<'a>;
    type Out = Out;
    fn denied(&self, shared: &Shared, req: &Request<'_>) -> Option<bool> {
        shared.verdict(|mask| masked(mask, req.opcode))
    }
    fn refuse(&mut self, req: &Request<'_>, why: Option<String>, out: &mut Out) -> Next {
        match why {
            Some(why) => encode_response(
                out,
                req.opcode,
                status::NOT_SUPPORTED,
                req.opaque,
                0,
                &[],
                &[],
                why.as_bytes(),
            ),
            None => encode_error(out, req.opcode, status::NOT_SUPPORTED, req.opaque),
        }
        Next::Continue
    }
    fn run(&mut self, req: &Request<'_>, out: &mut Out) -> Result<Next, Error> {
        run(self.store, self.shared, req, self.now, out)?;
        Ok(if matches!(req.opcode, op::QUIT | op::QUITQ) {
            Next::Close
        } else {
            Next::Continue
        })
    }
    fn failed(&mut self, req: &Request<'_>, e: Error, _start: usize, out: &mut Out) -> Next {
        let st = match e {
            Error::TooLarge(_) => status::TOO_LARGE,
            Error::NotNumeric => status::NON_NUMERIC,
            _ if e.from_request() => status::INVALID_ARGUMENTS,
            _ => status::OUT_OF_MEMORY,
        };
        encode_error(out, req.opcode, st, req.opaque);
        Next::Continue
    }
}

/// Whether the command mask refuses the opcode (checked as the Tyrant operation it performs,
/// like the text protocol).
fn masked(mask: Mask, opcode: u8) -> bool {
    let deny = |o| mask.denies(o, Proto::Memcached);
    match opcode {
        op::GET | op::GETQ | op::GETK | op::GETKQ => deny(Op::Get),
        op::GAT | op::GATQ | op::GATK | op::GATKQ => deny(Op::Get) || deny(Op::Put),
        op::SET | op::SETQ | op::REPLACE | op::REPLACEQ | op::TOUCH => deny(Op::Put),
        op::ADD | op::ADDQ => deny(Op::PutKeep),
        op::APPEND | op::APPENDQ | op::PREPEND | op::PREPENDQ => deny(Op::PutCat),
        op::DELETE | op::DELETEQ => deny(Op::Out),
        op::INCREMENT | op::INCREMENTQ | op::DECREMENT | op::DECREMENTQ => deny(Op::AddInt),
        op::FLUSH | op::FLUSHQ => deny(Op::Vanish),
        op::STAT => deny(Op::Stat),
        _ => false,
    }
}

fn run(
    store: &dyn Store,
    shared: &Shared,
    req: &Request<'_>,
    now: u64,
    out: &mut Out,
) -> Result<(), Error> {
    let quiet = req.quiet();
    let (opc, opaque) = (req.opcode, req.opaque);
    let ok = |out: &mut Vec<u8>, cas: u64| {
        if !quiet {
            encode_response(out, opc, status::OK, opaque, cas, &[], &[], &[]);
        }
    };
    let fail = |out: &mut Vec<u8>, st: u16| encode_error(out, opc, st, opaque);
    match opc {
        op::GET | op::GETQ | op::GETK | op::GETKQ | op::GAT | op::GATQ | op::GATK | op::GATKQ => {
            let with_key = matches!(opc, op::GETK | op::GETKQ | op::GATK | op::GATKQ);
            let touch = matches!(opc, op::GAT | op::GATQ | op::GATK | op::GATKQ);
            // Counted as memcached counts them: a GAT is a touch, not a get.
            let (hits, misses) = if touch {
                (&shared.mc.touch_hits, &shared.mc.touch_misses)
            } else {
                shared.cmd_get.add(1);
                (&shared.get_hits, &shared.get_misses)
            };
            let key: &[u8] = if with_key { req.key } else { &[] };
            // A large value in a segment's mapping is queued by reference, not copied.
            let reply = |out: &mut Out, value: Shown<'_>, meta: Meta| {
                let flags = meta.flags.to_be_bytes();
                let len = value.bytes().len();
                encode_response_header(
                    out,
                    opc,
                    status::OK,
                    opaque,
                    meta.version,
                    &flags,
                    key,
                    len,
                );
                match value {
                    Shown::Bytes(v) => out.extend_from_slice(v),
                    Shown::Pinned(p) => out.push_pinned(p),
                }
            };
            let hit = if touch {
                shared.mc.cmd_touch.add(1);
                let Some(exp) = req.u32_extra() else {
                    fail(out, status::INVALID_ARGUMENTS);
                    return Ok(());
                };
                let expires = absolute_expiry(i64::from(exp), now);
                // A touch keeps the flags and the cas: the reply is encoded from the store's
                // memory as it is shown, and withdrawn if the touch fails.
                let mark = out.len();
                let mut hit = false;
                let touched = store.accept(req.key, &mut |cur| match cur {
                    Some(c) => {
                        hit = true;
                        reply(out, Shown::Bytes(c.value), c.meta);
                        Decision::Touch { expires }
                    }
                    None => Decision::Keep,
                });
                if let Err(e) = touched {
                    out.truncate(mark);
                    return Err(e);
                }
                hit
            } else {
                // Encoded straight from the store's memory.
                store.view_shared(req.key, PIN_MIN, &mut |value, meta| reply(out, value, meta))?
            };
            shared.mc.note_get(req.key, hit, now);
            if hit {
                hits.add(1);
            } else {
                misses.add(1);
                if !quiet {
                    // memcached: the key when asked for it, else the status text.
                    let body: &[u8] = if with_key { &[] } else { b"Not found" };
                    encode_response(out, opc, status::KEY_NOT_FOUND, opaque, 0, &[], key, body);
                }
            }
        }
        op::SET | op::SETQ | op::ADD | op::ADDQ | op::REPLACE | op::REPLACEQ => {
            shared.cmd_set.add(1);
            shared.mc.detail.record(req.key, Did::Set);
            let Some((flags, exp)) = req.store_extras() else {
                fail(out, status::INVALID_ARGUMENTS);
                return Ok(());
            };
            let expires = absolute_expiry(i64::from(exp), now);
            let outcome = match (opc, req.cas) {
                (op::SET | op::SETQ | op::REPLACE | op::REPLACEQ, cas) if cas != 0 => {
                    store.cas(req.key, cas, req.value, flags, expires)?
                }
                (op::SET | op::SETQ, _) => {
                    Outcome::Stored(store.put_with(req.key, req.value, flags, expires)?)
                }
                (op::ADD | op::ADDQ, _) => store.putkeep(req.key, req.value, flags, expires)?,
                _ => store.replace(req.key, req.value, flags, expires)?,
            };
            match outcome {
                Outcome::Stored(m) => {
                    shared.mc.total_items.add(1);
                    shared.mc.access.wrote(req.key, now);
                    ok(out, m.version)
                }
                Outcome::Exists | Outcome::VersionMismatch => fail(out, status::KEY_EXISTS),
                _ => fail(out, status::KEY_NOT_FOUND),
            }
        }
        op::APPEND | op::APPENDQ | op::PREPEND | op::PREPENDQ => {
            shared.cmd_set.add(1);
            shared.mc.detail.record(req.key, Did::Set);
            let front = matches!(opc, op::PREPEND | op::PREPENDQ);
            // With a cas: only while the record has it (KEY_EXISTS otherwise), as memcached.
            match append(
                store,
                (shared.max_item_size, shared.max_value_size),
                req.key,
                req.value,
                front,
                req.cas,
            )? {
                Outcome::Stored(m) => {
                    shared.mc.total_items.add(1);
                    shared.mc.access.wrote(req.key, now);
                    ok(out, m.version)
                }
                Outcome::VersionMismatch => fail(out, status::KEY_EXISTS),
                _ => fail(out, status::NOT_STORED),
            }
        }
        op::DELETE | op::DELETEQ => {
            shared.mc.detail.record(req.key, Did::Delete);
            match store.out_if(req.key, req.cas)? {
                Outcome::Deleted => {
                    shared.delete_hits.add(1);
                    ok(out, 0)
                }
                Outcome::VersionMismatch => fail(out, status::KEY_EXISTS),
                _ => {
                    shared.delete_misses.add(1);
                    fail(out, status::KEY_NOT_FOUND)
                }
            }
        }
        op::INCREMENT | op::INCREMENTQ | op::DECREMENT | op::DECREMENTQ => {
            let decr = matches!(opc, op::DECREMENT | op::DECREMENTQ);
            let Some((delta, initial, exp)) = req.arith_extras() else {
                fail(out, status::INVALID_ARGUMENTS);
                return Ok(());
            };
            let (hits, misses) = if decr {
                (&shared.mc.decr_hits, &shared.mc.decr_misses)
            } else {
                (&shared.mc.incr_hits, &shared.mc.incr_misses)
            };
            // A missing counter is created with `initial` unless the expiration is all ones.
            let result = loop {
                match store.incr_decimal_if(req.key, delta, decr, req.cas) {
                    Ok(Counted::Done(n, m)) => {
                        hits.add(1);
                        break Some((n, m.version));
                    }
                    Ok(Counted::VersionMismatch) => {
                        fail(out, status::KEY_EXISTS);
                        return Ok(());
                    }
                    Ok(Counted::NotFound) if exp == u32::MAX => {
                        misses.add(1);
                        break None;
                    }
                    Ok(Counted::NotFound) => {
                        misses.add(1);
                        let expires = absolute_expiry(i64::from(exp), now);
                        let v = Value::decimal(initial);
                        if let Outcome::Stored(m) = store.putkeep(req.key, &v, 0, expires)? {
                            break Some((initial, m.version));
                        }
                        // Created meanwhile by another client: count on it.
                    }
                    Err(Error::NotNumeric) => {
                        fail(out, status::NON_NUMERIC);
                        return Ok(());
                    }
                    Err(e) => return Err(e),
                }
            };
            if result.is_some() {
                shared.mc.access.wrote(req.key, now);
            }
            match result {
                Some((n, cas)) if !quiet => encode_response(
                    out,
                    opc,
                    status::OK,
                    opaque,
                    cas,
                    &[],
                    &[],
                    &n.to_be_bytes(),
                ),
                Some(_) => {}
                None => fail(out, status::KEY_NOT_FOUND),
            }
        }
        op::TOUCH => {
            shared.mc.cmd_touch.add(1);
            let Some(exp) = req.u32_extra() else {
                fail(out, status::INVALID_ARGUMENTS);
                return Ok(());
            };
            match store.touch(req.key, absolute_expiry(i64::from(exp), now))? {
                Some(m) => {
                    shared.mc.touch_hits.add(1);
                    shared.mc.access.fetched(req.key, now);
                    // memcached answers a touch with the item's flags.
                    let flags = m.flags.to_be_bytes();
                    encode_response(out, opc, status::OK, opaque, m.version, &flags, &[], &[]);
                }
                None => {
                    shared.mc.touch_misses.add(1);
                    fail(out, status::KEY_NOT_FOUND)
                }
            }
        }
        op::FLUSH | op::FLUSHQ => {
            flush_all(store, shared, i64::from(req.u32_extra().unwrap_or(0)), now)?;
            ok(out, 0)
        }
        op::NOOP => encode_response(out, opc, status::OK, opaque, 0, &[], &[], &[]),
        op::QUIT | op::QUITQ => ok(out, 0),
        op::VERSION => encode_response(
            out,
            opc,
            status::OK,
            opaque,
            0,
            &[],
            &[],
            shared.version.as_bytes(),
        ),
        op::STAT => {
            let group = (!req.key.is_empty()).then_some(req.key);
            let mut pairs = Vec::new();
            match group {
                // Then only the terminating packet, as memcached.
                Some(b"reset") => shared.reset_stats(),
                Some(b"detail on") => shared.mc.detail.enable(true),
                Some(b"detail off") => shared.mc.detail.enable(false),
                // memcached 1.6.18 names the dump "detailed".
                Some(b"detail dump") => pairs.push((
                    "detailed".to_string(),
                    String::from_utf8_lossy(&shared.mc.detail.dump_bytes()).into_owned(),
                )),
                _ => match stat_pairs(store, shared, group, now) {
                    Some(p) => pairs = p,
                    // An unknown group: "Not found", as memcached answers it.
                    None => {
                        fail(out, status::KEY_NOT_FOUND);
                        return Ok(());
                    }
                },
            }
            for (name, value) in pairs {
                encode_response(
                    out,
                    opc,
                    status::OK,
                    opaque,
                    0,
                    &[],
                    name.as_bytes(),
                    value.as_bytes(),
                );
            }
            encode_response(out, opc, status::OK, opaque, 0, &[], &[], &[]);
        }
        _ => fail(out, status::UNKNOWN_COMMAND),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kura_proto::mc_bin::{decode, Decoded};
    use kura_proto::mc_text::Limits;

    fn packet(
        opcode: u8,
        opaque: u32,
        cas: u64,
        extras: &[u8],
        key: &[u8],
        value: &[u8],
    ) -> Vec<u8> {
        let mut v = Vec::new();
        kura_proto::mc_bin::encode_request(&mut v, opcode, opaque, cas, extras, key, value);
        v
    }

    /// (opcode, status, opaque, cas, extras, key, value) of every response packet.
    type Resp = (u8, u16, u32, u64, Vec<u8>, Vec<u8>, Vec<u8>);

    fn run_all(db: &dyn Store, sh: &Shared, input: &[u8]) -> Vec<Resp> {
        let mut out = Out::default();
        let mut pos = 0;
        while let Ok(Decoded::Complete { request, consumed }) =
            decode(&input[pos..], &Limits::default())
        {
            pos += consumed;
            if execute(db, sh, &request, kura_engine::store::now_secs(), &mut out) == Next::Close {
                break;
            }
        }
        let out = out.contiguous();
        let mut res = Vec::new();
        let mut p = 0;
        while p < out.len() {
            let klen = u16::from_be_bytes([out[p + 2], out[p + 3]]) as usize;
            let elen = out[p + 4] as usize;
            let st = u16::from_be_bytes([out[p + 6], out[p + 7]]);
            let blen = u32::from_be_bytes(out[p + 8..p + 12].try_into().unwrap()) as usize;
            let opaque = u32::from_be_bytes(out[p + 12..p + 16].try_into().unwrap());
            let cas = u64::from_be_bytes(out[p + 16..p + 24].try_into().unwrap());
            let body = &out[p + 24..p + 24 + blen];
            res.push((
                out[p + 1],
                st,
                opaque,
                cas,
                body[..elen].to_vec(),
                body[elen..elen + klen].to_vec(),
                body[elen + klen..].to_vec(),
            ));
            p += 24 + blen;
        }
        res
    }

    fn se(flags: u32, exp: u32) -> Vec<u8> {
        let mut v = flags.to_be_bytes().to_vec();
        v.extend_from_slice(&exp.to_be_bytes());
        v
    }

    /// A GAT whose touch fails (a write error injected after the store showed the record)
    /// answers with the error alone: the value encoded before the touch is withdrawn.
    #[test]
    fn a_gat_whose_touch_fails_answers_only_the_error() {
        let db = crate::failing::FailingWrites(kura_engine::open("*").unwrap());
        db.0.put(b"k", b"v").unwrap();
        let sh = Shared::new(0, 1 << 20);
        let mut input = packet(op::GATK, 1, 0, &100u32.to_be_bytes(), b"k", b"");
        input.extend(packet(op::GETK, 2, 0, &[], b"k", b""));
        let r = run_all(&db, &sh, &input);
        assert_eq!(r.len(), 2, "one reply each");
        assert_ne!(r[0].1, status::OK);
        assert_eq!((r[1].1, &r[1].6[..]), (status::OK, &b"v"[..]));
    }

    #[test]
    fn the_mask_refuses_by_operation() {
        let db = kura_engine::open("*").unwrap();
        let sh = Shared::new(0, 1 << 20);
        sh.mask.set(Mask::NONE.mask("out").unwrap());
        let mut input = packet(op::SET, 1, 0, &se(0, 0), b"k", b"v");
        input.extend(packet(op::DELETEQ, 2, 0, &[], b"k", b""));
        input.extend(packet(op::GET, 3, 0, &[], b"k", b""));
        let r = run_all(&*db, &sh, &input);
        let st: Vec<(u8, u16)> = r.iter().map(|p| (p.0, p.1)).collect();
        assert_eq!(
            st,
            [
                (op::SET, status::OK),
                (op::DELETEQ, status::NOT_SUPPORTED),
                (op::GET, status::OK)
            ]
        );
        assert_eq!(r[2].6, b"v");
    }

    #[test]
    fn quiet_pipeline_terminated_by_noop() {
        let db = kura_engine::open("*").unwrap();
        let sh = Shared::new(0, 1 << 20);
        let mut input = packet(op::SETQ, 1, 0, &se(5, 0), b"a", b"one");
        input.extend(packet(op::SETQ, 2, 0, &se(0, 0), b"b", b"two"));
        input.extend(packet(op::GETKQ, 3, 0, &[], b"a", b""));
        input.extend(packet(op::GETKQ, 4, 0, &[], b"missing", b""));
        input.extend(packet(op::GETQ, 5, 0, &[], b"b", b""));
        input.extend(packet(op::NOOP, 6, 0, &[], b"", b""));
        let r = run_all(&*db, &sh, &input);
        assert_eq!(r.len(), 3, "{r:?}");
        assert_eq!(
            (r[0].2, r[0].4.clone(), r[0].5.clone(), r[0].6.clone()),
            (
                3,
                5u32.to_be_bytes().to_vec(),
                b"a".to_vec(),
                b"one".to_vec()
            )
        );
        assert_eq!(
            (r[1].2, r[1].5.clone(), r[1].6.clone()),
            (5, vec![], b"two".to_vec())
        );
        assert_eq!((r[2].0, r[2].2), (op::NOOP, 6));
    }

    /// GAT / GATQ / GATK, TOUCH (hit, miss, and an expiry in the past), FLUSH with a delay
    /// then without, VERBOSITY.
    #[test]
    fn touch_gat_flush_and_verbosity() {
        let db = kura_engine::open("*").unwrap();
        let sh = Shared::new(0, 1 << 20);
        let exp = |t: u32| t.to_be_bytes().to_vec();
        let mut input = packet(op::SET, 1, 0, &se(7, 0), b"k", b"val");
        input.extend(packet(op::GAT, 2, 0, &exp(100), b"k", b""));
        input.extend(packet(op::GATQ, 3, 0, &exp(100), b"absent", b""));
        input.extend(packet(op::GATK, 4, 0, &exp(100), b"k", b""));
        input.extend(packet(op::TOUCH, 5, 0, &exp(200), b"k", b""));
        input.extend(packet(op::TOUCH, 6, 0, &exp(200), b"absent", b""));
        input.extend(packet(op::GAT, 7, 0, &[], b"k", b""));
        input.extend(packet(op::VERBOSITY, 8, 0, &exp(1), b"", b""));
        input.extend(packet(op::NOOP, 9, 0, &[], b"", b""));
        let r = run_all(&*db, &sh, &input);
        let by = |o: u32| r.iter().find(|p| p.2 == o);
        let gat = by(2).expect("GAT hit answered");
        assert_eq!(
            (gat.1, &gat.4[..], &gat.6[..]),
            (0, &7u32.to_be_bytes()[..], &b"val"[..])
        );
        assert!(by(3).is_none(), "a GATQ miss is silent");
        let gatk = by(4).expect("GATK answered");
        assert_eq!((&gatk.5[..], &gatk.6[..]), (&b"k"[..], &b"val"[..]));
        assert_eq!(by(5).expect("TOUCH hit").1, status::OK);
        assert_eq!(by(6).expect("TOUCH miss").1, status::KEY_NOT_FOUND);
        // A GAT without extras is malformed: the decoder refuses it and the connection ends
        // there (memcached closes it), so nothing after it is answered.
        assert!(by(7).is_none() && by(8).is_none());
        // As memcached counts them: GATs and TOUCHes are touches, not gets.
        assert_eq!(
            (
                sh.mc.cmd_touch.get(),
                sh.mc.touch_hits.get(),
                sh.mc.touch_misses.get()
            ),
            (5, 3, 2)
        );
        assert_eq!((sh.cmd_get.get(), sh.get_hits.get()), (0, 0));
        // A touch to a time in the past (an absolute time, over 30 days) expires the item.
        let mut input = packet(op::TOUCH, 10, 0, &exp(1_000_000_000), b"k", b"");
        input.extend(packet(op::GET, 11, 0, &[], b"k", b""));
        let r = run_all(&*db, &sh, &input);
        assert_eq!((r[0].1, r[1].1), (status::OK, status::KEY_NOT_FOUND));
        // FLUSH with a delay keeps items until then; FLUSH without removes them at once.
        let mut input = packet(op::SET, 12, 0, &se(0, 0), b"f", b"1");
        input.extend(packet(op::FLUSH, 13, 0, &exp(3600), b"", b""));
        input.extend(packet(op::GET, 14, 0, &[], b"f", b""));
        input.extend(packet(op::FLUSH, 15, 0, &[], b"", b""));
        input.extend(packet(op::GET, 16, 0, &[], b"f", b""));
        let r = run_all(&*db, &sh, &input);
        let st: Vec<u16> = r.iter().map(|p| p.1).collect();
        assert_eq!(st, [0, 0, 0, 0, status::KEY_NOT_FOUND]);
        assert_eq!(&r[2].6, b"1");
    }

    #[test]
    fn stat_reset_zeroes_the_counters() {
        let db = kura_engine::open("*").unwrap();
        let sh = Shared::new(0, 1 << 20);
        let mut input = packet(op::GET, 1, 0, &[], b"nope", b"");
        input.extend(packet(op::SET, 2, 0, &se(0, 0), b"k", b"v"));
        input.extend(packet(op::ADD, 2, 0, &se(0, 0), b"k", b"v"));
        input.extend(packet(op::APPEND, 2, 0, &[], b"k", b"w"));
        run_all(&*db, &sh, &input);
        assert_eq!(
            (sh.cmd_get.get(), sh.get_misses.get(), sh.cmd_set.get()),
            (1, 1, 3)
        );
        assert_eq!(
            sh.mc.total_items.get(),
            2,
            "the set and the append, not the add"
        );
        let r = run_all(&*db, &sh, &packet(op::STAT, 3, 0, &[], b"reset", b""));
        assert_eq!(r.len(), 1, "only the terminating packet");
        assert_eq!((r[0].1, r[0].2), (status::OK, 3));
        assert_eq!(
            (sh.cmd_get.get(), sh.get_misses.get(), sh.cmd_set.get()),
            (0, 0, 0)
        );
        assert_eq!(sh.mc.total_items.get(), 0);
        assert_eq!(db.count(), 1, "records stay");
    }

    #[test]
    fn statuses_cas_counters() {
        let db = kura_engine::open("*").unwrap();
        let sh = Shared::new(0, 1 << 20);
        let r = run_all(&*db, &sh, &packet(op::SET, 1, 0, &se(0, 0), b"k", b"v"));
        let cas = r[0].3;
        assert_eq!(r[0].1, status::OK);
        let mut input = packet(op::ADD, 2, 0, &se(0, 0), b"k", b"x");
        input.extend(packet(op::REPLACE, 3, 0, &se(0, 0), b"nope", b"x"));
        input.extend(packet(op::SET, 4, cas + 100, &se(0, 0), b"k", b"x"));
        input.extend(packet(op::SET, 5, cas, &se(0, 0), b"k", b"x"));
        input.extend(packet(op::APPEND, 6, 0, &[], b"nope", b"x"));
        input.extend(packet(op::DELETE, 7, 0, &[], b"k", b""));
        input.extend(packet(op::DELETE, 8, 0, &[], b"k", b""));
        input.extend(packet(0x77, 9, 0, &[], b"", b""));
        input.extend(packet(op::SET, 10, 0, &[], b"k", b"no extras"));
        let st: Vec<(u32, u16)> = run_all(&*db, &sh, &input)
            .iter()
            .map(|r| (r.2, r.1))
            .collect();
        assert_eq!(
            st,
            vec![
                (2, status::KEY_EXISTS),
                (3, status::KEY_NOT_FOUND),
                (4, status::KEY_EXISTS),
                (5, status::OK),
                (6, status::NOT_STORED),
                (7, status::OK),
                (8, status::KEY_NOT_FOUND),
            ]
        );
        // incr: created with the initial value, then incremented; all-ones expiry: not found.
        let arith = |delta: u64, initial: u64, exp: u32| {
            let mut v = delta.to_be_bytes().to_vec();
            v.extend_from_slice(&initial.to_be_bytes());
            v.extend_from_slice(&exp.to_be_bytes());
            v
        };
        let mut input = packet(op::INCREMENT, 1, 0, &arith(5, 10, 0), b"n", b"");
        input.extend(packet(op::INCREMENT, 2, 0, &arith(5, 10, 0), b"n", b""));
        input.extend(packet(op::DECREMENT, 3, 0, &arith(100, 0, 0), b"n", b""));
        input.extend(packet(
            op::INCREMENT,
            4,
            0,
            &arith(1, 0, u32::MAX),
            b"absent",
            b"",
        ));
        let r = run_all(&*db, &sh, &input);
        assert_eq!(r[0].6, 10u64.to_be_bytes());
        assert_eq!(r[1].6, 15u64.to_be_bytes());
        assert_eq!(r[2].6, 0u64.to_be_bytes());
        assert_eq!(r[3].1, status::KEY_NOT_FOUND);
        // With a cas: only while the counter's version is that one; a missing counter is
        // created whatever the cas (memcached 1.6.18, checked live).
        let cas = r[2].3;
        let mut input = packet(op::INCREMENT, 5, cas + 1, &arith(1, 0, 0), b"n", b"");
        input.extend(packet(op::INCREMENT, 6, cas, &arith(7, 0, 0), b"n", b""));
        input.extend(packet(op::INCREMENT, 7, 99, &arith(1, 3, 0), b"m", b""));
        let r = run_all(&*db, &sh, &input);
        assert_eq!(r[0].1, status::KEY_EXISTS);
        assert_eq!((r[1].1, &r[1].6[..]), (status::OK, &7u64.to_be_bytes()[..]));
        assert_eq!((r[2].1, &r[2].6[..]), (status::OK, &3u64.to_be_bytes()[..]));
        // stat: pairs then an empty terminator; version; quit closes.
        let mut input = packet(op::STAT, 1, 0, &[], b"", b"");
        input.extend(packet(op::VERSION, 2, 0, &[], b"", b""));
        input.extend(packet(op::QUIT, 3, 0, &[], b"", b""));
        input.extend(packet(op::NOOP, 4, 0, &[], b"", b""));
        let r = run_all(&*db, &sh, &input);
        assert!(r.iter().any(|p| p.5 == b"curr_items"));
        let n = r.len();
        assert_eq!(
            (r[n - 3].5.len(), r[n - 3].6.len()),
            (0, 0),
            "stat terminator"
        );
        assert_eq!(r[n - 2].6, crate::context::MEMCACHED_VERSION.as_bytes());
        assert_eq!(r[n - 1].0, op::QUIT, "nothing is answered after quit");
        // A group memcached does not know: "Not found", and only that; a known one: pairs.
        let mut input = packet(op::STAT, 5, 0, &[], b"bogus", b"");
        input.extend(packet(op::STAT, 6, 0, &[], b"settings", b""));
        let r = run_all(&*db, &sh, &input);
        assert_eq!(r[0].1, status::KEY_NOT_FOUND);
        assert!(r[1..].iter().any(|p| p.5 == b"item_size_max"));
    }
}
