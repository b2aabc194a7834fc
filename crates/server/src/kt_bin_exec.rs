//! Kyoto Tycoon's binary protocol (`kura_proto::kt_bin`) executed on a `Store`.
//!
//! * We serve one database: records addressed to a database index other than 0 are skipped,
//!   like Kyoto Tycoon skips an index it does not have (not stored, not found, not removed).
//! * `xt` follows Kyoto Tycoon: positive = seconds from now, negative = the absolute unix time
//!   `-xt`; a result at or beyond 2^40 − 1 (what `ukt` sends for "no expiration":
//!   `0x7fffffffffffffff`) means never. get_bulk reports a never-expiring record's xt as
//!   2^40 − 1, the value Kyoto Tycoon stores for it.
//! * set_bulk is one atomic batch (a key sent twice keeps its last value); its count is the
//!   number of records addressed to database 0, duplicates included, as Kyoto Tycoon counts.
//! * play_script runs the `--scr` procedure (`crate::script::kt::play`): its output pairs on
//!   success, else the error byte (no script, no such procedure, a failure or a status other
//!   than success), as ktserver's `do_bin_play_script`.
//! * replication (`0xB1`): the connection becomes a stream of the update log in Kyoto
//!   Tycoon's format (`repl::feed`); the mask's `repl` refuses it with the error byte and a
//!   hang-up.
//! * The command mask is checked with `Proto::Http`: `allhttp` covers Kyoto Tycoon's binary
//!   protocol too (set_bulk = `put`, remove_bulk = `out`, get_bulk = `mget`,
//!   play_script = `ext`). A refused request gets the error byte.
//! * Every failure answers the error byte, except for requests sent with the no-reply flag,
//!   which never get an answer (as in Kyoto Tycoon).

use crate::context::{self, Next, Shared};
use crate::kt_common::{kt_expiry, XT_MAX};

use crate::mask::{Op, Proto};
use kura_engine::{BatchOp, Error, Store};
use kura_proto::kt_bin::{self, Request};

/// Execute one decoded request, appending its reply (if any) to `out`. Replication answers
/// [`Next::Stream`], or the error byte and [`Next::Close`] when it is masked or there is no
/// replication here.
pub fn execute(
    store: &dyn Store,
    shared: &Shared,
    req: &Request<'_>,
    now: u64,
    out: &mut Vec<u8>,
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

/// The operation a request is, for the command mask.
fn op_of(req: &Request<'_>) -> Op {
    match req {
        Request::SetBulk { .. } => Op::Put,
        Request::RemoveBulk { .. } => Op::Out,
        Request::GetBulk { .. } => Op::Mget,
        Request::PlayScript { .. } => Op::Ext,
        Request::Replication { .. } => Op::Repl,
    }
}

/// Kyoto Tycoon's binary protocol in the steps every request takes.
struct Binary<'x> {
    store: &'x dyn Store,
    shared: &'x Shared,
    now: u64,
}

impl context::Exec for Binary<'_> {
    type Req<'a> = Request<'a>;
    type Out = Vec<u8>;
    fn denied(&self, shared: &Shared, req: &Request<'_>) -> Option<bool> {
        shared.verdict(|mask| mask.denies(op_of(req), Proto::Http))
    }
    fn refuse(&mut self, req: &Request<'_>, _why: Option<String>, out: &mut Vec<u8>) -> Next {
        // Kyoto Tycoon's binary errors carry no text: the refusal is counted and logged.
        if let Request::Replication { .. } = req {
            kt_bin::reply_error(out);
            return Next::Close;
        }
        if !req.no_reply() {
            kt_bin::reply_error(out);
        }
        Next::Continue
    }
    fn run(&mut self, req: &Request<'_>, out: &mut Vec<u8>) -> Result<Next, Error> {
        if let &Request::Replication { flags, ts, sid } = req {
            if self.shared.repl.is_none() {
                kt_bin::reply_error(out);
                return Ok(Next::Close);
            }
            return Ok(Next::Stream(crate::repl::StreamReq::Kyoto {
                flags,
                ts,
                sid,
            }));
        }
        // Encoded in place; taken back when no reply was asked for.
        let start = out.len();
        run(self.store, self.shared, req, self.now, out)?;
        if req.no_reply() {
            out.truncate(start);
        }
        Ok(Next::Continue)
    }
    fn failed(&mut self, req: &Request<'_>, _e: Error, start: usize, out: &mut Vec<u8>) -> Next {
        out.truncate(start);
        if !req.no_reply() {
            kt_bin::reply_error(out);
        }
        Next::Continue
    }
}

fn run(
    store: &dyn Store,
    shared: &Shared,
    req: &Request<'_>,
    now: u64,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    match req {
        Request::SetBulk { records, .. } => {
            let mine: Vec<_> = records.iter().filter(|r| r.0 == 0).collect();
            // In order: a key given twice keeps its last value, as Kyoto Tycoon's one-by-one
            // sets leave it and as a batch applies its operations.
            let ops: Vec<BatchOp> = mine
                .iter()
                .map(|&&(_, k, v, xt)| BatchOp::Put {
                    key: k.to_vec(),
                    value: v.to_vec(),
                    flags: 0,
                    expires: kt_expiry(xt, now),
                })
                .collect();
            store.write_batch(&ops)?;
            shared.cmd_set.add(mine.len() as u64);
            kt_bin::reply_count(out, kt_bin::SET_BULK, mine.len() as u32);
        }
        Request::RemoveBulk { keys, .. } => {
            let mut n = 0u32;
            for &(db, k) in keys {
                if db == 0 && store.out(k)? {
                    n += 1;
                    shared.delete_hits.add(1);
                } else {
                    shared.delete_misses.add(1);
                }
            }
            kt_bin::reply_count(out, kt_bin::REMOVE_BULK, n);
        }
        Request::GetBulk { keys } => {
            let mut found = Vec::new();
            for &(db, k) in keys {
                shared.cmd_get.add(1);
                let rec = if db == 0 { store.get(k)? } else { None };
                match rec {
                    Some(r) => {
                        shared.get_hits.add(1);
                        let xt = if r.meta.expires == 0 {
                            XT_MAX
                        } else {
                            r.meta.expires
                        };
                        found.push((db, k, r.value, xt as i64));
                    }
                    None => {
                        shared.get_misses.add(1);
                    }
                }
            }
            let refs: Vec<_> = found
                .iter()
                .map(|(db, k, v, xt)| (*db, *k, &v[..], *xt))
                .collect();
            kt_bin::reply_records(out, &refs);
        }
        Request::PlayScript { name, args, .. } => {
            let args = args.iter().map(|&(k, v)| (k, v));
            let played = crate::script::kt::play(store, shared, Proto::Http, name, args);
            if played.error.is_some() {
                kt_bin::reply_error(out);
            } else {
                let pairs: Vec<(&[u8], &[u8])> =
                    played.out.iter().map(|(k, v)| (&k[..], &v[..])).collect();
                kt_bin::reply_pairs(out, &pairs);
            }
        }
        Request::Replication { .. } => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mask::Mask;
    use kura_proto::kt_bin::{decode, decode_reply, Decoded, DecodedReply, Limits, Reply};

    /// The store judges expiry by the wall clock: run the requests "now", too.
    static NOW: std::sync::LazyLock<u64> = std::sync::LazyLock::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    });

    /// Encode `req`, decode it as the server would, execute it and decode the reply.
    fn call(store: &dyn Store, sh: &Shared, req: &Request<'_>) -> (Option<Reply>, Next) {
        let mut wire = Vec::new();
        kt_bin::encode_request(req, &mut wire);
        let Ok(Decoded::Complete { request, consumed }) = decode(&wire, &Limits::default()) else {
            panic!("decode {req:?}")
        };
        assert_eq!(consumed, wire.len());
        let mut out = Vec::new();
        let next = execute(store, sh, &request, *NOW, &mut out);
        if out.is_empty() {
            return (None, next);
        }
        match decode_reply(req.magic(), &out).unwrap() {
            DecodedReply::Complete { reply, consumed } => {
                assert_eq!(consumed, out.len());
                (Some(reply), next)
            }
            DecodedReply::Incomplete => panic!("incomplete reply {out:?}"),
        }
    }

    fn get(store: &dyn Store, sh: &Shared, keys: &[(u16, &[u8])]) -> Reply {
        call(
            store,
            sh,
            &Request::GetBulk {
                keys: keys.to_vec(),
            },
        )
        .0
        .unwrap()
    }

    #[test]
    fn bulk_operations_on_every_kind() {
        for name in ["*", "+"] {
            let db = kura_engine::open(name).unwrap();
            let sh = Shared::new(*NOW, 1 << 20);
            let set = Request::SetBulk {
                no_reply: false,
                records: vec![
                    (0, b"a", b"1", i64::MAX),
                    (0, b"b", b"2", 60),
                    (0, b"a", b"3", i64::MAX),
                    (1, b"c", b"4", i64::MAX),
                    (0, b"d", b"5", -((*NOW + 500) as i64)),
                ],
            };
            assert_eq!(call(&*db, &sh, &set).0, Some(Reply::Count(4)), "{name}");
            assert_eq!(
                get(
                    &*db,
                    &sh,
                    &[(0, b"a"), (0, b"b"), (1, b"c"), (0, b"c"), (0, b"d")]
                ),
                Reply::Records(vec![
                    (0, b"a".to_vec(), b"3".to_vec(), XT_MAX as i64),
                    (0, b"b".to_vec(), b"2".to_vec(), (*NOW + 60) as i64),
                    (0, b"d".to_vec(), b"5".to_vec(), (*NOW + 500) as i64),
                ])
            );
            assert_eq!(sh.get_hits.get(), 3);
            assert_eq!(sh.get_misses.get(), 2);
            let rm = Request::RemoveBulk {
                no_reply: false,
                keys: vec![(0, b"a"), (0, b"zz"), (1, b"b")],
            };
            assert_eq!(call(&*db, &sh, &rm).0, Some(Reply::Count(1)));
            assert_eq!(
                get(&*db, &sh, &[(0, b"a"), (0, b"b")]),
                Reply::Records(vec![(0, b"b".to_vec(), b"2".to_vec(), (*NOW + 60) as i64)])
            );
            // No reply: nothing is written, the operation still happens.
            let rm = Request::RemoveBulk {
                no_reply: true,
                keys: vec![(0, b"b")],
            };
            assert_eq!(call(&*db, &sh, &rm), (None, Next::Continue));
            assert_eq!(get(&*db, &sh, &[(0, b"b")]), Reply::Records(vec![]));
        }
    }

    #[test]
    fn script_replication_and_mask() {
        let db = kura_engine::open("*").unwrap();
        let mut sh = Shared::new(*NOW, 1 << 20);
        let script = Request::PlayScript {
            no_reply: false,
            name: b"f",
            args: vec![],
        };
        assert_eq!(
            call(&*db, &sh, &script),
            (Some(Reply::Error), Next::Continue)
        );
        let quiet = Request::PlayScript {
            no_reply: true,
            name: b"f",
            args: vec![],
        };
        assert_eq!(call(&*db, &sh, &quiet), (None, Next::Continue));
        // No replication here: refused.
        let repl = Request::Replication {
            flags: 0,
            ts: 5,
            sid: 2,
        };
        assert_eq!(call(&*db, &sh, &repl), (Some(Reply::Error), Next::Close));
        // With replication: the connection becomes a stream, unless `repl` is masked.
        sh.repl = Some(std::sync::Arc::new(crate::repl::Replication::new(
            1,
            db.clone(),
            None,
            None,
            false,
            Box::new(|_, _: &str| {}),
        )));
        assert_eq!(
            call(&*db, &sh, &repl),
            (
                None,
                Next::Stream(crate::repl::StreamReq::Kyoto {
                    flags: 0,
                    ts: 5,
                    sid: 2
                })
            )
        );
        sh.mask.set(Mask::NONE.mask("repl").unwrap());
        assert_eq!(call(&*db, &sh, &repl), (Some(Reply::Error), Next::Close));
        sh.mask.set(Mask::NONE);
        sh.repl = None;
        sh.mask.set(Mask::NONE.mask("allhttp").unwrap());
        let set = Request::SetBulk {
            no_reply: false,
            records: vec![(0, b"a", b"1", 0)],
        };
        assert_eq!(call(&*db, &sh, &set).0, Some(Reply::Error));
        sh.mask.set(Mask::NONE);
        assert_eq!(get(&*db, &sh, &[(0, b"a")]), Reply::Records(vec![]));
    }

    #[test]
    fn expiry_conversion() {
        assert_eq!(kt_expiry(i64::MAX, *NOW), 0);
        assert_eq!(kt_expiry(60, *NOW), *NOW + 60);
        assert_eq!(kt_expiry(-12345, *NOW), 12345);
        assert_eq!(kt_expiry(i64::MIN, *NOW), 0);
        assert_eq!(kt_expiry(-(XT_MAX as i64), *NOW), 0);
        assert_eq!(kt_expiry(0, 0), 1);
    }
}
