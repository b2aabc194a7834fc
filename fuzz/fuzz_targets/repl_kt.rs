#![no_main]
//! Kyoto Tycoon's replication stream on arbitrary bytes, as a master reads the request and a
//! slave reads the frames: the decoders never panic, always make progress, and every frame
//! re-encodes to the bytes it came from; every message that decodes re-encodes to one that
//! decodes to the same operation.
use kura_proto::repl_kt::{
    decode_accept, decode_ack, decode_frame, decode_msg, decode_request, encode_frame, encode_msg,
    encode_request, read_varnum, Frame, MAGIC, NOP,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((req, n))) = decode_request(data) {
        let mut again = Vec::new();
        encode_request(&mut again, &req);
        assert_eq!(again, &data[..n]);
    }
    let _ = decode_accept(data);
    let _ = decode_ack(data);
    let _ = read_varnum(data);
    let mut input = data.to_vec();
    if let Some(b) = input.first_mut() {
        *b = if *b & 1 == 0 { MAGIC } else { NOP };
    }
    let mut pos = 0;
    while let Ok(Some((frame, consumed))) = decode_frame(&input[pos..], 8192) {
        assert!(consumed >= 1 && consumed <= input.len() - pos);
        let mut again = Vec::new();
        encode_frame(&mut again, &frame);
        assert_eq!(again, &input[pos..pos + consumed]);
        if let Frame::Record { msg, .. } = frame {
            for xt_prefix in [false, true] {
                if let Ok(m) = decode_msg(msg, xt_prefix) {
                    let mut again = Vec::new();
                    encode_msg(&mut again, &m);
                    assert_eq!(decode_msg(&again, xt_prefix), Ok(m));
                }
            }
        }
        pos += consumed;
    }
});
