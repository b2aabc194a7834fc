#![no_main]
//! The memcached text decoder on arbitrary bytes, decoded request after request as a server
//! would: never panics, always makes progress, and a stored data block lies inside the input.
use kura_proto::mc_text::{decode, Decoded, Limits, Request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_line: 256,
        max_key: 250,
        max_value: 4096,
    };
    let mut pos = 0;
    while pos < data.len() {
        match decode(&data[pos..], &limits) {
            Ok(Decoded::Complete { request, consumed }) => {
                assert!(consumed >= 1 && pos + consumed <= data.len());
                if let Request::Store { data: d, .. } = request {
                    assert!(d.len() <= limits.max_value);
                }
                pos += consumed;
            }
            Ok(Decoded::Incomplete) => break,
            Err(e) => {
                assert!(e.consumed >= 1);
                let mut out = Vec::new();
                e.encode(&mut out);
                assert!(out.ends_with(b"\r\n"));
                if e.close {
                    break;
                }
                pos = pos.saturating_add(e.consumed);
            }
        }
    }
});
