#![no_main]
//! Import lines in every format (escaped, raw, hex): parsing never panics, and whatever parses
//! is written back (when the format can carry it) to a line that parses to the same key and
//! value.
use kura_engine::tsv::{self, Format};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for f in [Format::Escaped, Format::Raw, Format::Hex] {
        if let Ok((k, v)) = f.parse_line(data) {
            let mut out = Vec::new();
            if f.write_line(&mut out, &k, &v).is_err() {
                assert_eq!(f, Format::Raw, "only raw can refuse a record");
                continue;
            }
            let line = out
                .strip_suffix(b"\n")
                .expect("write_line ends with a newline");
            let (k2, v2) = f.parse_line(line).expect("a written line parses");
            assert_eq!((k, v), (k2, v2));
        }
    }
    // The escaped module functions are the escaped format.
    if let Ok(kv) = tsv::parse_line(data) {
        assert_eq!(Format::Escaped.parse_line(data).ok(), Some(kv));
    }
});
