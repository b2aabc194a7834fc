//! Executes memcached requests on a [`Store`] and writes memcached replies: the storage adapter
//! between the codec (`kura_proto::mc_text`) and the database. No sockets here: the connection
//! loop (`crate::net`) feeds decoded requests in and writes the bytes out.
//!
//! The classic text commands are here, with what every memcached executor shares (the
//! counters, expiry, memcached's arithmetic and appends); the meta commands are in
//! [`crate::mc_meta`], the statistics in [`crate::mc_stats`], the binary protocol in
//! [`crate::mc_bin_exec`].

use crate::context::{self, Next, Shared};
use crate::mask::{Mask, Op, Proto};
use crate::mc_common::{absolute_expiry, append, server_error, Did};
use crate::mc_meta;
use crate::mc_stats::{self, Crawler};
use crate::out::{Out, PIN_MIN};
use kura_engine::MemcachedOps;
use kura_engine::{Counted, Decision, Error, Outcome, Shown, Store};
use kura_proto::mc_text::{self, reply, Automove, Request, StoreMode};
use std::sync::atomic::Ordering::Relaxed;

/// `flush_all [delay]` in either protocol: at once when the delay is 0 or less, else when it
/// has passed.
pub fn flush_all(store: &dyn Store, shared: &Shared, delay: i64, now: u64) -> Result<(), Error> {
    shared.mc.cmd_flush.add(1);
    if delay <= 0 {
        shared.flush_at.store(0, Relaxed);
        store.vanish()
    } else {
        shared
            .flush_at
            .store(absolute_expiry(delay, now).max(1), Relaxed);
        Ok(())
    }
}

/// A set refused as too large (its block never stored): the key's old value goes too, as
/// memcached removes it so that no reader sees stale data. `base64`: the key is as an
/// `ms … b` sent it (one that does not decode names nothing to remove).
pub fn unlink_key(
    store: &dyn Store,
    shared: &Shared,
    key: &[u8],
    base64: bool,
) -> Result<(), Error> {
    use base64::Engine;
    shared.mc.store_too_large.add(1);
    if base64 {
        return match base64::engine::general_purpose::STANDARD.decode(key) {
            Ok(k) if !k.is_empty() => store.out(&k).map(|_| ()),
            _ => Ok(()),
        };
    }
    store.out(key).map(|_| ())
}

/// The largest slab class id memcached 1.6.18 makes for an item size limit (`slabs_init`
/// with its defaults: 48-byte chunks after a 48-byte header, growth factor 1.25, 8-byte
/// alignment, chunks up to half the limit): 39 for 1 MiB.
fn largest_slab_class(max_item_size: u64) -> i32 {
    let chunk_max = (max_item_size / 2) as f64;
    let (mut size, mut class) = (96u64, 0);
    loop {
        class += 1;
        if class >= 63 || size as f64 >= chunk_max / 1.25 {
            return class;
        }
        size = size.next_multiple_of(8);
        size = (size as f64 * 1.25) as u64;
    }
}

/// `slabs reassign <src> <dst>` as memcached answers it with no page to spare (Kura has no
/// slabs): the same class, an id out of range (`-1`, "any class", finds none), else no spare
/// page in the source.
fn slabs_reassign(shared: &Shared, src: i32, dst: i32) -> &'static [u8] {
    let classes = 0..=largest_slab_class(shared.max_item_size);
    if src == dst {
        b"SAME src and dst class are identical\r\n"
    } else if !classes.contains(&src) || !classes.contains(&dst) {
        b"BADCLASS invalid src or dst class id\r\n"
    } else {
        b"NOSPARE source class has no spare pages\r\n"
    }
}

/// The reply to a request the command mask refuses.
pub const REFUSED: &[u8] = b"SERVER_ERROR command refused by the server's mask\r\n";

/// Whether the command mask refuses `req` (see [`crate::mask`]): memcached commands are
/// checked as the Tyrant operations they perform (`delete` is `out`, `add` is `putkeep`, …).
fn masked(mask: Mask, req: &Request<'_>) -> bool {
    let deny = |op| mask.denies(op, Proto::Memcached);
    match req {
        Request::Get { .. } | Request::MetaGet { .. } | Request::MetaDebug { .. } => deny(Op::Get),
        Request::Gat { .. } => deny(Op::Get) || deny(Op::Put),
        Request::Store { mode, .. } => deny(match mode {
            StoreMode::Add => Op::PutKeep,
            StoreMode::Append | StoreMode::Prepend => Op::PutCat,
            StoreMode::Set | StoreMode::Replace | StoreMode::Cas => Op::Put,
        }),
        Request::MetaSet { flags, .. } => {
            deny(match flags.iter().find(|f| f.first() == Some(&b'M')) {
                Some([_, b'E' | b'e', ..]) => Op::PutKeep,
                Some([_, b'A' | b'a' | b'P' | b'p', ..]) => Op::PutCat,
                _ => Op::Put,
            })
        }
        Request::Touch { .. } => deny(Op::Put),
        Request::Delete { .. } | Request::MetaDelete { .. } => deny(Op::Out),
        Request::Arith { .. } | Request::MetaArith { .. } => deny(Op::AddInt),
        Request::FlushAll { .. } => deny(Op::Vanish),
        Request::Stats { .. } | Request::LruCrawler { .. } => deny(Op::Stat),
        Request::Version
        | Request::Verbosity { .. }
        | Request::CacheMemlimit { .. }
        | Request::SlabsAutomove { .. }
        | Request::SlabsReassign { .. }
        | Request::Quit
        | Request::MetaNoop => false,
    }
}

/// Whether the client asked for no reply (`noreply`, or the meta `q` flag).
fn noreply(req: &Request<'_>) -> bool {
    match req {
        Request::Store { noreply, .. }
        | Request::Delete { noreply, .. }
        | Request::Arith { noreply, .. }
        | Request::Touch { noreply, .. }
        | Request::FlushAll { noreply, .. }
        | Request::Verbosity { noreply, .. }
        | Request::CacheMemlimit { noreply, .. }
        | Request::SlabsAutomove { noreply, .. } => *noreply,
        _ => false,
    }
}

/// Execute one request, appending its reply (if any) to `out`.
pub fn execute(
    store: &dyn Store,
    shared: &Shared,
    req: &Request<'_>,
    now: u64,
    out: &mut Out,
) -> Next {
    context::execute(
        &mut Text { store, shared, now },
        store,
        shared,
        req,
        now,
        out,
    )
}

/// The memcached text protocol in the steps every request takes.
struct Text<'x> {
    store: &'x dyn Store,
    shared: &'x Shared,
    now: u64,
}

impl context::Exec for Text<'_> {
    type Req<'a> = Request<'a>;
    type Out = Out;
    fn denied(&self, shared: &Shared, req: &Request<'_>) -> Option<bool> {
        shared.verdict(|mask| masked(mask, req))
    }
    fn refuse(&mut self, req: &Request<'_>, why: Option<String>, out: &mut Out) -> Next {
        if !noreply(req) {
            match why {
                Some(why) => {
                    out.extend_from_slice(b"SERVER_ERROR ");
                    out.extend_from_slice(why.as_bytes());
                    out.extend_from_slice(b"\r\n");
                }
                None => out.extend_from_slice(REFUSED),
            }
        }
        Next::Continue
    }
    fn run(&mut self, req: &Request<'_>, out: &mut Out) -> Result<Next, Error> {
        run(self.store, self.shared, req, self.now, out)
    }
    fn failed(&mut self, _req: &Request<'_>, e: Error, _start: usize, out: &mut Out) -> Next {
        server_error(out, &e);
        Next::Continue
    }
}

fn run(
    store: &dyn Store,
    shared: &Shared,
    req: &Request<'_>,
    now: u64,
    out: &mut Out,
) -> Result<Next, Error> {
    let quiet = |noreply: bool, out: &mut Vec<u8>, line: &[u8]| {
        if !noreply {
            out.extend_from_slice(line);
        }
    };
    match *req {
        Request::Get { keys, cas, more } => {
            for key in keys.iter() {
                shared.cmd_get.add(1);
                // Encoded straight from the store's memory, no allocation; a large value in a
                // segment's mapping is not even copied: it is queued for writev by reference.
                let hit = store.view_shared(key, PIN_MIN, &mut |value, meta| {
                    let cas = cas.then_some(meta.version);
                    match value {
                        Shown::Bytes(v) => mc_text::encode_value(out, key, meta.flags, v, cas),
                        Shown::Pinned(p) => {
                            mc_text::encode_value_header(out, key, meta.flags, p.len(), cas);
                            out.push_pinned(p);
                            out.extend_from_slice(b"\r\n");
                        }
                    }
                })?;
                if hit {
                    shared.get_hits.add(1);
                } else {
                    shared.get_misses.add(1);
                }
                shared.mc.note_get(key, hit, now);
            }
            if !more {
                out.extend_from_slice(reply::END);
            }
        }
        Request::Gat {
            exptime,
            keys,
            cas,
            more,
        } => {
            let expires = absolute_expiry(exptime, now);
            for key in keys.iter() {
                // Counted as memcached counts gat: a touch, not a get.
                shared.mc.cmd_touch.add(1);
                // A touch keeps the flags and the cas: the value is encoded from the store's
                // memory as it is shown, not copied out first, and withdrawn if the touch
                // fails.
                let mark = out.len();
                let mut hit = false;
                let touched = store.accept(key, &mut |cur| match cur {
                    Some(c) => {
                        hit = true;
                        let m = c.meta;
                        mc_text::encode_value(out, key, m.flags, c.value, cas.then_some(m.version));
                        Decision::Touch { expires }
                    }
                    None => Decision::Keep,
                });
                if let Err(e) = touched {
                    out.truncate(mark);
                    return Err(e);
                }
                if hit {
                    shared.mc.touch_hits.add(1);
                } else {
                    shared.mc.touch_misses.add(1);
                }
                shared.mc.note_get(key, hit, now);
            }
            if !more {
                out.extend_from_slice(reply::END);
            }
        }
        Request::Store {
            mode,
            key,
            flags,
            exptime,
            data,
            cas,
            noreply,
        } => {
            shared.cmd_set.add(1);
            shared.mc.detail.record(key, Did::Set);
            let expires = absolute_expiry(exptime, now);
            let line: &[u8] = match mode {
                StoreMode::Set => {
                    store.put_with(key, data, flags, expires)?;
                    reply::STORED
                }
                StoreMode::Add => match store.putkeep(key, data, flags, expires)? {
                    Outcome::Stored(_) => reply::STORED,
                    _ => reply::NOT_STORED,
                },
                StoreMode::Replace => match store.replace(key, data, flags, expires)? {
                    Outcome::Stored(_) => reply::STORED,
                    _ => reply::NOT_STORED,
                },
                StoreMode::Append | StoreMode::Prepend => {
                    let front = mode == StoreMode::Prepend;
                    match append(
                        store,
                        (shared.max_item_size, shared.max_value_size),
                        key,
                        data,
                        front,
                        0,
                    )? {
                        Outcome::Stored(_) => reply::STORED,
                        _ => reply::NOT_STORED,
                    }
                }
                StoreMode::Cas => match store.cas(key, cas, data, flags, expires)? {
                    Outcome::Stored(_) => {
                        shared.mc.cas_hits.add(1);
                        reply::STORED
                    }
                    Outcome::VersionMismatch => {
                        shared.mc.cas_badval.add(1);
                        reply::EXISTS
                    }
                    _ => {
                        shared.mc.cas_misses.add(1);
                        reply::NOT_FOUND
                    }
                },
            };
            if line == reply::STORED {
                shared.mc.total_items.add(1);
                shared.mc.access.wrote(key, now);
            }
            quiet(noreply, out, line);
        }
        Request::Delete { key, noreply } => {
            shared.mc.detail.record(key, Did::Delete);
            let line = if store.out(key)? {
                shared.delete_hits.add(1);
                reply::DELETED
            } else {
                shared.delete_misses.add(1);
                reply::NOT_FOUND
            };
            quiet(noreply, out, line);
        }
        Request::Arith {
            key,
            delta,
            decr,
            noreply,
        } => {
            let (hits, misses) = if decr {
                (&shared.mc.decr_hits, &shared.mc.decr_misses)
            } else {
                (&shared.mc.incr_hits, &shared.mc.incr_misses)
            };
            match store.incr_decimal_if(key, delta, decr, 0) {
                Ok(Counted::Done(n, _)) => {
                    hits.add(1);
                    shared.mc.access.wrote(key, now);
                    if !noreply {
                        mc_text::encode_number(out, n);
                    }
                }
                Ok(Counted::NotFound | Counted::VersionMismatch) => {
                    misses.add(1);
                    quiet(noreply, out, reply::NOT_FOUND);
                }
                Err(Error::NotNumeric) => quiet(noreply, out, reply::NON_NUMERIC),
                Err(e) => return Err(e),
            }
        }
        Request::Touch {
            key,
            exptime,
            noreply,
        } => {
            shared.mc.cmd_touch.add(1);
            let line = match store.touch(key, absolute_expiry(exptime, now))? {
                Some(_) => {
                    shared.mc.touch_hits.add(1);
                    shared.mc.access.fetched(key, now);
                    reply::TOUCHED
                }
                None => {
                    shared.mc.touch_misses.add(1);
                    reply::NOT_FOUND
                }
            };
            quiet(noreply, out, line);
        }
        Request::FlushAll { delay, noreply } => {
            flush_all(store, shared, delay, now)?;
            quiet(noreply, out, reply::OK);
        }
        Request::Stats { args } => mc_stats::stats(store, shared, args, now, out),
        Request::LruCrawler { args } => {
            if let Crawler::Metadump(all) = mc_stats::lru_crawler(args, out) {
                return Ok(Next::Dump(all));
            }
        }
        Request::Version => {
            out.extend_from_slice(b"VERSION ");
            out.extend_from_slice(shared.version.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Request::Verbosity { level, noreply } => {
            shared.mc.verbosity.store(level.min(2), Relaxed);
            quiet(noreply, out, reply::OK)
        }
        // Kura's memory is the database kind's: the limit is checked as memcached checks it
        // and changes nothing.
        Request::CacheMemlimit { megabytes, noreply } => quiet(
            noreply,
            out,
            if megabytes < 8 {
                b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n"
            } else if megabytes > 1_000_000_000 {
                b"MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n"
            } else {
                reply::OK
            },
        ),
        // Kept for `stats settings`; Kura has no slabs to move.
        Request::SlabsAutomove { setting, noreply } => {
            match setting {
                Automove::Level(level) => shared.mc.slab_automove.store(level, Relaxed),
                Automove::Ratio(r) => {
                    let r = mc_text::c_strtod(r).unwrap_or_default();
                    shared.mc.slab_automove_ratio.store(r.to_bits(), Relaxed);
                }
            }
            quiet(noreply, out, reply::OK)
        }
        Request::SlabsReassign { src, dst } => {
            out.extend_from_slice(slabs_reassign(shared, src, dst))
        }
        Request::Quit => return Ok(Next::Close),
        Request::MetaNoop => out.extend_from_slice(b"MN\r\n"),
        Request::MetaGet { key, flags } => mc_meta::meta_get(store, shared, key, flags, now, out)?,
        Request::MetaSet { key, data, flags } => {
            mc_meta::meta_set(store, shared, key, data, flags, now, out)?
        }
        Request::MetaDelete { key, flags } => {
            mc_meta::meta_delete(store, shared, key, flags, now, out)?
        }
        Request::MetaArith { key, flags } => {
            mc_meta::meta_arith(store, shared, key, flags, now, out)?
        }
        Request::MetaDebug { key } => mc_meta::meta_debug(store, shared, key, now, out)?,
    }
    Ok(Next::Continue)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use kura_proto::mc_text::{decode, Decoded, Limits};

    /// Run a whole client transcript through the codec and the executor.
    pub(crate) fn session(store: &dyn Store, shared: &Shared, input: &[u8], now: u64) -> String {
        let mut out = Out::default();
        let mut pos = 0;
        let limits = Limits::default();
        while pos < input.len() {
            match decode(&input[pos..], &limits) {
                Ok(Decoded::Complete { request, consumed }) => {
                    pos += consumed;
                    if execute(store, shared, &request, now, &mut out) == Next::Close {
                        break;
                    }
                }
                Ok(Decoded::Incomplete) => break,
                Err(e) => {
                    e.encode(&mut out);
                    pos += e.consumed;
                }
            }
        }
        String::from_utf8_lossy(&out.contiguous()).into_owned()
    }

    pub(crate) fn kinds() -> Vec<std::sync::Arc<dyn Store>> {
        vec![
            kura_engine::open("*").unwrap(),
            kura_engine::open("+").unwrap(),
        ]
    }

    /// A write on a read-only replica said "refused by the server's mask" though no mask was
    /// given; it says whose replica the server is, and `--mask` keeps its own message.
    #[test]
    fn a_read_only_replica_says_so_and_the_mask_keeps_its_message() {
        let db = kura_engine::open("*").unwrap();
        let mut sh = Shared::new(1000, 1 << 20);
        let repl =
            crate::repl::Replication::new(2, db.clone(), None, None, false, Box::new(|_, _| {}));
        repl.set_master(Some(("10.0.0.1".into(), 1978)));
        sh.repl = Some(std::sync::Arc::new(repl));
        sh.read_only
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let r = session(&*db, &sh, b"set a 0 0 1\r\nx\r\nget a\r\n", 1000);
        assert_eq!(
            r,
            "SERVER_ERROR this server is a replica of 10.0.0.1:1978 (read-only)\r\nEND\r\n"
        );
        sh.mask.set(Mask::NONE.mask("put").unwrap());
        let r = session(&*db, &sh, b"set a 0 0 1\r\nx\r\n", 1000);
        assert_eq!(r, std::str::from_utf8(REFUSED).unwrap());
    }

    #[test]
    fn the_mask_refuses_by_operation() {
        let db = kura_engine::open("*").unwrap();
        let sh = Shared::new(1000, 1 << 20);
        sh.mask.set(Mask::NONE.mask("out,vanish").unwrap());
        let r = session(
            &*db,
            &sh,
            b"set a 0 0 1\r\nx\r\ndelete a\r\ndelete a noreply\r\nmd a\r\nflush_all\r\nget a\r\n",
            1000,
        );
        let refused = std::str::from_utf8(REFUSED).unwrap();
        assert_eq!(
            r,
            format!("STORED\r\n{refused}{refused}{refused}VALUE a 0 1\r\nx\r\nEND\r\n")
        );
        sh.mask.set(Mask::NONE.mask("allwrite").unwrap());
        let r = session(
            &*db,
            &sh,
            b"set b 0 0 1\r\ny\r\nincr a 1\r\nms b 1 MA\r\nz\r\nget a b\r\nversion\r\n",
            1000,
        );
        assert!(
            r.starts_with(&format!(
                "{refused}{refused}{refused}VALUE a 0 1\r\nx\r\nEND\r\nVERSION "
            )),
            "{r}"
        );
        sh.mask.set(Mask::NONE.mask("allmc").unwrap());
        assert_eq!(session(&*db, &sh, b"get a\r\n", 1000), refused);
        // Another protocol's group leaves memcached alone.
        sh.mask.set(Mask::NONE.mask("allorg,allhttp").unwrap());
        assert_eq!(
            session(&*db, &sh, b"get a\r\n", 1000),
            "VALUE a 0 1\r\nx\r\nEND\r\n"
        );
    }

    #[test]
    fn storage_retrieval_and_cas() {
        for db in kinds() {
            let sh = Shared::new(1000, 1 << 20);
            let r = session(&*db, &sh, b"set a 5 0 3\r\nabc\r\nget a b\r\nadd a 0 0 1\r\nx\r\nadd b 0 0 1\r\ny\r\nreplace c 0 0 1\r\nz\r\nappend a 0 0 2\r\nde\r\nprepend a 0 0 1\r\n_\r\nappend nope 0 0 1\r\nx\r\nget a\r\n", 1000);
            assert_eq!(
                r,
                "STORED\r\nVALUE a 5 3\r\nabc\r\nEND\r\nNOT_STORED\r\nSTORED\r\nNOT_STORED\r\nSTORED\r\nSTORED\r\nNOT_STORED\r\nVALUE a 5 6\r\n_abcde\r\nEND\r\n"
            );
            // gets → cas
            let r = session(&*db, &sh, b"gets b\r\n", 1000);
            let cas: u64 = r.split_whitespace().nth(4).unwrap().parse().unwrap();
            let r = session(
                &*db,
                &sh,
                format!(
                    "cas b 0 0 1 {}\r\nZ\r\ncas b 0 0 1 {cas}\r\nW\r\ncas nope 0 0 1 1\r\nW\r\n",
                    cas + 1000
                )
                .as_bytes(),
                1000,
            );
            assert_eq!(r, "EXISTS\r\nSTORED\r\nNOT_FOUND\r\n");
        }
    }

    #[test]
    fn arithmetic_delete_touch_and_noreply() {
        for db in kinds() {
            let sh = Shared::new(0, 1 << 20);
            let r = session(&*db, &sh, b"set n 0 0 20\r\n18446744073709551615\r\nincr n 2\r\ndecr n 5\r\nincr nope 1\r\nset s 0 0 1\r\nx\r\nincr s 1\r\ndelete n\r\ndelete n\r\ntouch s 100\r\ntouch nope 1\r\nset q 0 0 1 noreply\r\nq\r\ndelete q noreply\r\nget q\r\n", 50);
            assert_eq!(r, "STORED\r\n1\r\n0\r\nNOT_FOUND\r\nSTORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\nDELETED\r\nNOT_FOUND\r\nTOUCHED\r\nNOT_FOUND\r\nEND\r\n");
        }
    }

    #[test]
    fn expiration_and_flush() {
        for db in kinds() {
            let sh = Shared::new(0, 1 << 20);
            // Relative exptime 10 at t=1000 expires at 1010; negative is already expired.
            session(
                &*db,
                &sh,
                b"set e 0 10 1\r\nx\r\nset g 0 -1 1\r\nx\r\n",
                1000,
            );
            let now = kura_engine::store::now_secs();
            assert_eq!(absolute_expiry(10, now), now + 10);
            assert_eq!(
                absolute_expiry(crate::mc_common::RELATIVE_LIMIT + 1, now),
                crate::mc_common::RELATIVE_LIMIT as u64 + 1
            );
            let r = session(&*db, &sh, b"get g\r\n", now);
            assert_eq!(r, "END\r\n");
            // gat returns the value and sets the new expiry.
            session(&*db, &sh, b"set t 3 0 2\r\nhi\r\n", now);
            let r = session(&*db, &sh, b"gat 100 t\r\n", now);
            assert_eq!(r, "VALUE t 3 2\r\nhi\r\nEND\r\n");
            assert_eq!(db.get(b"t").unwrap().unwrap().meta.expires, now + 100);
            // flush_all with a delay takes effect when due.
            let r = session(&*db, &sh, b"flush_all 5\r\nget t\r\n", now);
            assert_eq!(r, "OK\r\nVALUE t 3 2\r\nhi\r\nEND\r\n");
            let r = session(&*db, &sh, b"get t\r\n", now + 6);
            assert_eq!(r, "END\r\n");
            let r = session(
                &*db,
                &sh,
                b"set u 0 0 1\r\nx\r\nflush_all\r\nget u\r\n",
                now + 7,
            );
            assert_eq!(r, "STORED\r\nOK\r\nEND\r\n");
        }
    }

    /// touch, gat and gats keep an item's cas unique, as memcached does: a `cas` with the
    /// unique read before them still stores.
    #[test]
    fn touch_and_gat_keep_the_cas_unique() {
        for name in ["*", "+"] {
            let db = kura_engine::open(name).unwrap();
            let now = kura_engine::store::now_secs();
            let sh = Shared::new(now, 1 << 20);
            let r = session(&*db, &sh, b"set k 0 0 1\r\na\r\ngets k\r\n", now);
            let unique = r
                .trim_end()
                .lines()
                .nth(1)
                .unwrap()
                .rsplit(' ')
                .next()
                .unwrap();
            let unique = unique.to_string();
            let r = session(
                &*db,
                &sh,
                b"touch k 100\r\ngat 200 k\r\ngats 300 k\r\n",
                now,
            );
            assert!(r.contains(&format!("VALUE k 0 1 {unique}\r\n")), "{r}");
            let cas = format!("cas k 0 0 1 {unique}\r\nb\r\n");
            assert_eq!(session(&*db, &sh, cas.as_bytes(), 10), "STORED\r\n");
        }
    }

    /// gat encodes the value before the touch is written: when the touch fails (a write error
    /// injected after the store showed the record), the client gets the error alone.
    #[test]
    fn a_gat_whose_touch_fails_sends_only_the_error() {
        let db = crate::failing::FailingWrites(kura_engine::open("*").unwrap());
        db.0.put(b"k", b"v").unwrap();
        let sh = Shared::new(0, 1 << 20);
        let r = session(&db, &sh, b"gat 100 k\r\nget k\r\n", 10);
        let (first, rest) = r.split_once("\r\n").unwrap();
        assert!(first.starts_with("SERVER_ERROR "), "{r}");
        assert_eq!(rest, "VALUE k 0 1\r\nv\r\nEND\r\n");
    }

    #[test]
    fn stats_version_quit_and_errors() {
        let db = kura_engine::open("*").unwrap();
        let mut sh = Shared::new(0, 1 << 20);
        (sh.threads, sh.max_connections, sh.port) = (3, 77, 1978);
        sh.bytes_read.add(5);
        let r = session(
            &*db,
            &sh,
            b"set a 0 0 1\r\nx\r\nadd a 0 0 1\r\ny\r\nappend a 0 0 1\r\nz\r\nms b 1\r\nw\r\nmd b\r\nget a zz\r\nset a 0 0 1\r\nx\r\nstats\r\n",
            10,
        );
        for field in [
            // set, append, ms, set: the refused add is not an item.
            "STAT total_items 4\r\n",
            "STAT limit_maxbytes 0\r\n",
            "STAT threads 3\r\n",
            "STAT max_connections 77\r\n",
            "STAT bytes_read 5\r\n",
            "STAT bytes_written 0\r\n",
            "STAT rejected_connections 0\r\n",
            "STAT rusage_user ",
            "STAT rusage_system ",
        ] {
            assert!(r.contains(field), "{field} missing: {r}");
        }
        assert!(
            r.contains("STAT get_hits 1\r\n") && r.contains("STAT get_misses 1\r\n"),
            "{r}"
        );
        assert!(
            r.contains("STAT curr_items 1\r\n") && r.ends_with("END\r\n"),
            "{r}"
        );
        let r = session(
            &*db,
            &sh,
            b"stats settings\r\nstats items\r\nversion\r\nverbosity 1\r\n",
            10,
        );
        assert!(r.contains("STAT item_size_max 1048576\r\n"), "{r}");
        for field in [
            "STAT maxconns 77\r\n",
            "STAT tcpport 1978\r\n",
            "STAT num_threads 3\r\n",
        ] {
            assert!(r.contains(field), "{field} missing: {r}");
        }
        assert!(r.contains("STAT items:1:number 1\r\n"), "{r}");
        assert!(r.contains("END\r\nVERSION 1.6.21\r\n"), "{r}");
        assert!(r.ends_with("OK\r\n"));
        let r = session(&*db, &sh, b"stats reset\r\nget a\r\nstats\r\n", 10);
        assert!(r.starts_with("RESET\r\nVALUE a 0 1\r\nx\r\nEND\r\n"), "{r}");
        assert!(
            r.contains("STAT cmd_get 1\r\n")
                && r.contains("STAT get_hits 1\r\n")
                && r.contains("STAT get_misses 0\r\n")
                && r.contains("STAT curr_items 1\r\n"),
            "{r}"
        );
        let r = session(
            &*db,
            &sh,
            b"bogus\r\nset k 0 0 2000000\r\nquit\r\nget a\r\n",
            10,
        );
        assert_eq!(r, "ERROR\r\nSERVER_ERROR object too large for cache\r\n");
        // A bounded cache reports its byte limit as memcached reports `-m`.
        let db = kura_engine::open("*#capsiz=1000000").unwrap();
        let r = session(&*db, &sh, b"stats\r\n", 10);
        assert!(r.contains("STAT limit_maxbytes 1000000\r\n"), "{r}");
    }
}
