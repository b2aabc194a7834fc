#![no_main]
//! The Tokyo Tyrant binary decoder and executor on arbitrary bytes, as a server would run them
//! on an in-memory database: never panics, always makes progress, and every reply is exactly
//! one well-formed reply of the command it answers.
//!
//! `copy` and `optimize` are masked (and misc optimize skipped): copy would write files at
//! arbitrary paths, and optimize retunes the database to whatever sizes the input names.
use kura_proto::tt_bin::{decode, decode_reply, Decoded, DecodedReply, Limits, Request, MAGIC};
use kura_server::context::{Next, Shared};
use kura_server::mask::Mask;
use kura_server::tt_exec::{execute, TtState};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let store = kura_engine::open("*").expect("memory db");
    let shared = Shared::new(0, 4096);
    shared
        .mask
        .set(Mask::NONE.mask("copy,optimize").expect("mask names"));
    let limits = Limits {
        max_key: 250,
        max_value: 4096,
        max_args: 64,
        max_frame: 16 * 1024,
    };
    let mut input = data.to_vec();
    if let Some(b) = input.first_mut() {
        *b = MAGIC;
    }
    let mut st = TtState::new();
    let mut pos = 0;
    while pos < input.len() {
        match decode(&input[pos..], &limits) {
            Ok(Decoded::Complete { request, consumed }) => {
                assert!(consumed >= 2 && consumed <= input.len() - pos);
                pos += consumed;
                if matches!(
                    request,
                    Request::Misc {
                        name: b"optimize",
                        ..
                    }
                ) {
                    continue;
                }
                let mut out = Vec::new();
                let next = execute(&*store, &shared, &mut st, &request, 1_000_000, &mut out);
                // A hang-up, or a replication stream the connection loop hands to its own
                // thread: nothing is written here.
                if matches!(next, Next::Close | Next::Stream(_)) {
                    assert!(out.is_empty());
                    break;
                }
                match decode_reply(request.cmd(), &out) {
                    Ok(DecodedReply::Complete { consumed, .. }) => {
                        assert_eq!(consumed, out.len(), "{request:?}")
                    }
                    other => panic!("{request:?}: {other:?} from {out:?}"),
                }
            }
            Ok(Decoded::Incomplete) => break,
            Err(e) => {
                if e.close {
                    break;
                }
                assert!(e.consumed > 2, "a skip makes progress");
                pos = pos.saturating_add(e.consumed);
                // The rest of a refused list: `[size:4][bytes]` elements, as the server skips.
                for _ in 0..e.then_elements {
                    let Some(size) = input.get(pos..pos.saturating_add(4)) else {
                        break;
                    };
                    let n = u32::from_be_bytes([size[0], size[1], size[2], size[3]]) as usize;
                    pos = pos.saturating_add(4).saturating_add(n);
                }
            }
        }
    }
});
