#![no_main]
//! The memcached binary decoder and executor on arbitrary packets, as a server would run them
//! on an in-memory database: never panics, always makes progress, always answers well-formed.
use kura_proto::mc_bin::{decode, Decoded, REQ_MAGIC};
use kura_proto::mc_text::Limits;
use kura_server::context::{Next, Shared};
use kura_server::mc_bin_exec::execute;
use kura_server::out::Out;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let store = kura_engine::open("*").expect("memory db");
    let shared = Shared::new(0, 4096);
    let limits = Limits {
        max_line: 256,
        max_key: 250,
        max_item: 4096,
        max_value: 2048,
    };
    let mut input = data.to_vec();
    if let Some(b) = input.first_mut() {
        *b = REQ_MAGIC;
    }
    let mut pos = 0;
    let mut out = Out::default();
    while pos < input.len() {
        match decode(&input[pos..], &limits) {
            Ok(Decoded::Complete { request, consumed }) => {
                assert!(consumed >= 24);
                pos += consumed;
                if execute(&*store, &shared, &request, 1_000_000, &mut out) == Next::Close {
                    break;
                }
            }
            Ok(Decoded::Incomplete) => break,
            Err(e) => {
                if e.close || e.consumed == 0 {
                    break;
                }
                pos = pos.saturating_add(e.consumed);
            }
        }
    }
    // Every response is a whole packet.
    let out = out.contiguous();
    let mut p = 0;
    while p < out.len() {
        assert!(out.len() - p >= 24 && out[p] == 0x81);
        let blen = u32::from_be_bytes([out[p + 8], out[p + 9], out[p + 10], out[p + 11]]) as usize;
        p += 24 + blen;
    }
    assert_eq!(p, out.len());
});
