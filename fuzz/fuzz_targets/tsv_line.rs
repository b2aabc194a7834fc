#![no_main]
//! TSV lines: parsing never panics, and whatever parses is written back to a line that parses to
//! the same key and value.
use kura_engine::tsv;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((k, v)) = tsv::parse_line(data) {
        let mut out = Vec::new();
        tsv::write_line(&mut out, &k, &v);
        let line = out
            .strip_suffix(b"\n")
            .expect("write_line ends with a newline");
        let (k2, v2) = tsv::parse_line(line).expect("a written line parses");
        assert_eq!((k, v), (k2, v2));
    }
});
