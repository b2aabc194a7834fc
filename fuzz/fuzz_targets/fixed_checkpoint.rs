#![no_main]
//! Checkpoints of a fixed-length database (`index.kfi`, checksum cut off): any bytes decode
//! without panicking, and whatever decodes has ascending ids and no segment 0; the decoded
//! entries round-trip through `write_entries`.
use kura_engine::fixed::ckpt;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Half the inputs start with a valid magic and version, so the fuzzer works on the body.
    let owned;
    let b = match data.split_first() {
        Some((&x, rest)) if x & 1 == 1 => {
            owned = [&b"KURAFIX1"[..], &1u32.to_le_bytes(), rest].concat();
            &owned[..]
        }
        _ => data,
    };
    let Ok((seq, entries)) = ckpt::read_entries(b) else {
        return;
    };
    let mut prev = 0u64;
    for &(id, seg, _) in &entries {
        assert!(id > prev, "ids out of order: {id} after {prev}");
        assert_ne!(seg, 0, "segment 0");
        prev = id;
    }
    let again = ckpt::write_entries(1, seq, &entries);
    let (seq2, entries2) = ckpt::read_entries(&again).expect("own encoding decodes");
    assert_eq!(seq2, seq);
    assert_eq!(entries2, entries);
});
