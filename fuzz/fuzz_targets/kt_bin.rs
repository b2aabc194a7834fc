#![no_main]
//! Kyoto Tycoon's binary decoder and executor on arbitrary bytes, as a server would run them
//! on an in-memory database: never panics, always makes progress, and every reply is exactly
//! one well-formed reply of the request it answers (or nothing, for no-reply requests).
use kura_proto::kt_bin::{decode, decode_reply, Decoded, DecodedReply, Limits};
use kura_server::context::{Next, Shared};
use kura_server::kt_bin_exec::execute;
use libfuzzer_sys::fuzz_target;

const MAGICS: [u8; 4] = [0xB8, 0xB9, 0xBA, 0xB4];

fuzz_target!(|data: &[u8]| {
    let store = kura_engine::open("*").expect("memory db");
    let shared = Shared::new(0, 4096);
    let limits = Limits {
        max_key: 250,
        max_value: 4096,
        max_records: 64,
        max_frame: 16 * 1024,
    };
    let mut input = data.to_vec();
    if let Some(b) = input.first_mut() {
        *b = MAGICS[(*b as usize) % MAGICS.len()];
    }
    let mut pos = 0;
    while pos < input.len() {
        match decode(&input[pos..], &limits) {
            Ok(Decoded::Complete { request, consumed }) => {
                assert!(consumed >= 1 && consumed <= input.len() - pos);
                pos += consumed;
                let mut out = Vec::new();
                let next = execute(&*store, &shared, &request, 1_000_000, &mut out);
                if request.no_reply() {
                    assert!(out.is_empty(), "{request:?}");
                } else {
                    match decode_reply(request.magic(), &out) {
                        Ok(DecodedReply::Complete { consumed, .. }) => {
                            assert_eq!(consumed, out.len(), "{request:?}")
                        }
                        other => panic!("{request:?}: {other:?} from {out:?}"),
                    }
                }
                if next == Next::Close {
                    break;
                }
            }
            Ok(Decoded::Incomplete) => break,
            Err(e) => {
                assert!(e.consumed >= 1 && e.close);
                break;
            }
        }
    }
});
