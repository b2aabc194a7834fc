#![no_main]
//! Tyrant's `search` arguments as a table query reads them: any bytes give a query or a clear
//! error, never a panic; every condition of a query that parses judges any value without
//! panicking, and an operator's name reads back as itself.
use kura_engine::table::query::{parse_search, Op};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Arguments separated by 0x01 (an argument's own parts by NUL, as on the wire); the last
    // argument doubles as a value to judge.
    let args: Vec<&[u8]> = data.split(|&b| b == 1).collect();
    let value = args.last().copied().unwrap_or_default();
    if let Ok(s) = parse_search(&args) {
        assert!(!s.queries.is_empty());
        for q in &s.queries {
            for c in &q.conds {
                let _ = c.hit(value);
                let _ = c.check(None);
                assert_eq!(Op::parse(c.op.name().as_bytes()).unwrap().0, c.op);
            }
        }
    }
});
