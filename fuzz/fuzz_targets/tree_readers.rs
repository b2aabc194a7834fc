#![no_main]
//! The B+ tree's file readers on arbitrary bytes: a leaf image and a checkpoint (`tree.ki`)
//! decode or are refused, never panic, and whatever decodes round-trips.
use kura_engine::tree::fuzzing;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fuzzing::image(data);
    fuzzing::checkpoint(data);
});
