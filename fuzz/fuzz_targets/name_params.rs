#![no_main]
//! Database names and `#key=value` parameters: parsing never panics; a name that parses names a
//! kind `open` knows or is refused with an error.
use kura_engine::name::{parse_size, split_name, Compression, Params, SyncMode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_size(s);
    let _ = SyncMode::parse(s);
    let _ = Compression::parse(s);
    if let Ok((_path, params)) = split_name(s) {
        let _ = params.size("bnum");
        let _ = params.ratio("compact", 0.0, 1.0);
        let _ = params.sync();
        let _ = params.compression();
        let _ = params.allow_only("fuzz", &["bnum", "sync"]);
    }
    let _ = Params::parse(s);
    // In-memory kinds only: never touch the file system from the fuzzer. (`bnum` pre-sizes
    // memory on purpose, so huge values are legitimately large allocations: left out.)
    if (s.starts_with('*') || s.starts_with('+')) && !s.to_ascii_lowercase().contains("bnum") {
        let _ = kura_engine::open(s);
    }
});
