#![no_main]
//! The Redis protocol's decoder and executor on arbitrary input, as a server would run them on
//! an in-memory database: never panics, always makes progress, and every reply is well-formed
//! RESP.
use kura_proto::resp::{decode, Limits};
use kura_proto::Decoded;
use kura_server::auth::Session;
use kura_server::context::{Next, Shared};
use kura_server::out::Out;
use kura_server::redis_exec::{execute, RedisConn, COMMANDS};
use libfuzzer_sys::fuzz_target;
use std::borrow::Cow;

/// The length of the whole reply at the start of `b`.
fn reply_len(b: &[u8]) -> usize {
    let nl = b.iter().position(|&c| c == b'\n').expect("a reply line") + 1;
    let line = &b[1..nl - 2];
    let n = || -> i64 { std::str::from_utf8(line).unwrap().parse().unwrap() };
    match b[0] {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' => nl,
        b'$' | b'=' => match n() {
            -1 => nl,
            len => nl + len as usize + 2,
        },
        b'*' | b'~' | b'%' => {
            let k = match n() {
                -1 => return nl,
                k if b[0] == b'%' => 2 * k as usize,
                k => k as usize,
            };
            let mut at = nl;
            for _ in 0..k {
                at += reply_len(&b[at..]);
            }
            at
        }
        other => panic!("not a reply: {other}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let store = kura_engine::open("+").expect("memory db");
    let shared = Shared::new(0, 4096);
    let limits = Limits {
        max_bulk: 2048,
        max_args: 64,
        max_inline: 256,
        max_request: 8192,
    };
    let mut conn = RedisConn::new(&shared, 0);
    let mut session = Session::default();
    let mut pos = 0;
    let mut out = Out::default();
    while pos < data.len() {
        match decode(&data[pos..], &limits) {
            Ok(Decoded::Complete {
                mut request,
                consumed,
            }) => {
                assert!(consumed > 0);
                // A one-byte command name stands for a command of the table, so that the
                // fuzzer reaches every command without guessing its name.
                if let Some(first) = request.args.first_mut() {
                    if first.len() == 1 {
                        *first = Cow::Borrowed(
                            COMMANDS[first[0] as usize % COMMANDS.len()].name.as_bytes(),
                        );
                    }
                }
                pos += consumed;
                let next = execute(
                    &*store,
                    &shared,
                    &mut conn,
                    &mut session,
                    &request,
                    1,
                    &mut out,
                );
                if next == Next::Close {
                    break;
                }
            }
            Ok(Decoded::Incomplete) => break,
            Err(e) => {
                e.encode(&mut out);
                break;
            }
        }
    }
    let out = out.contiguous();
    let mut p = 0;
    while p < out.len() {
        p += reply_len(&out[p..]);
    }
    assert_eq!(p, out.len());
});
