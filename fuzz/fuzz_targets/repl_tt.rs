#![no_main]
//! Tokyo Tyrant's replication stream on arbitrary bytes, as a slave reads it: the frame
//! decoder never panics, always makes progress, and every frame re-encodes to the bytes it came
//! from; every record body that decodes re-encodes to itself (result bytes 0 and 1).
use kura_proto::repl_tt::{
    decode_body, decode_frame, decode_sid, encode_body, encode_frame, Frame, NOP, RECORD,
    RESULT_FAIL, RESULT_OK,
};
use kura_proto::tt_bin::{Limits, MAGIC};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_key: 250,
        max_value: 4096,
        max_args: 64,
        max_frame: 16 * 1024,
    };
    let _ = decode_sid(data);
    let mut input = data.to_vec();
    if let Some(b) = input.first_mut() {
        *b = if *b & 1 == 0 { RECORD } else { NOP };
    }
    let mut pos = 0;
    while let Ok(Some((frame, consumed))) = decode_frame(&input[pos..], 8192) {
        assert!(consumed >= 1 && consumed <= input.len() - pos);
        let mut again = Vec::new();
        encode_frame(&mut again, &frame);
        assert_eq!(again, &input[pos..pos + consumed]);
        if let Frame::Record { body, .. } = frame {
            // Also try the body with the binary protocol's magic in front, which the fuzzer
            // would otherwise rarely produce.
            let mut patched = body.to_vec();
            if let Some(b) = patched.first_mut() {
                *b = MAGIC;
            }
            for b in [body, &patched[..]] {
                if let Ok((req, result)) = decode_body(b, &limits) {
                    let mut again = Vec::new();
                    encode_body(&mut again, &req, result == RESULT_OK);
                    if result == RESULT_OK || result == RESULT_FAIL {
                        assert_eq!(again, b, "{req:?}");
                    }
                }
            }
        }
        pos += consumed;
    }
});
