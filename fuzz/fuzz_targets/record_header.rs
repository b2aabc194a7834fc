#![no_main]
//! Record and segment-header parsing never panics and never reads past the input.
use kura_engine::hash::format;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = format::parse_seg_header(data);
    if let Some(h) = format::parse_header(data) {
        if h.len <= data.len() {
            let rec = &data[..h.len];
            let _ = format::verify(rec, 7);
            if h.typ == format::T_BATCH {
                // Walk the sub-records the way recovery does.
                let mut pos = h.key_off;
                for _ in 0..h.count.min(1 << 16) {
                    let Some(sub) = rec.get(pos..).and_then(format::parse_header) else {
                        break;
                    };
                    pos = pos.saturating_add(sub.len);
                }
            }
        }
    }
});
