#![no_main]
//! The HTTP decoder and executor on arbitrary bytes, as a server would run them on an
//! in-memory database: never panics, always makes progress, and every answer is one whole
//! HTTP/1.1 response whose length matches its Content-Length.
use kura_proto::http::{decode, Decoded, Limits, CONTINUE};
use kura_server::context::{Next, Shared};
use kura_server::http_exec::execute;
use libfuzzer_sys::fuzz_target;

/// Most inputs would fail on the first byte; most runs get a request line in front.
const PREFIXES: [&[u8]; 5] = [
    b"",
    b"GET /rpc/",
    b"POST /rpc/set_bulk HTTP/1.1\r\nContent-Type: text/tab-separated-values; colenc=",
    b"PUT /",
    // play_script's arguments (`_`-prefixed names, the rest the procedure's input).
    b"GET /rpc/play_script?name=",
];

fuzz_target!(|data: &[u8]| {
    let store = kura_engine::open("*").expect("memory db");
    let shared = Shared::new(1_000_000, 4096);
    let limits = Limits {
        max_head: 1024,
        max_headers: 16,
        max_body: 4096,
    };
    let (sel, rest) = data.split_first().map_or((0, data), |(b, r)| (*b, r));
    let mut input = PREFIXES[usize::from(sel) % PREFIXES.len()].to_vec();
    input.extend_from_slice(rest);
    let mut pos = 0;
    let mut out = Vec::new();
    let mut heads = Vec::new();
    while pos < input.len() {
        match decode(&input[pos..], &limits) {
            Ok(Decoded::Complete { request, consumed }) => {
                assert!(consumed >= 1 && consumed <= input.len() - pos);
                pos += consumed;
                heads.push(request.method == kura_proto::http::Method::Head);
                if execute(&*store, &shared, &request, 1_000_000, &mut out) == Next::Close {
                    break;
                }
            }
            Ok(Decoded::Incomplete) => break,
            Ok(Decoded::Continue) => {
                out.extend_from_slice(CONTINUE);
                heads.push(false);
                break;
            }
            Err(e) => {
                assert!(e.consumed >= 1 && (400..=505).contains(&e.status));
                e.write(&mut out);
                heads.push(false);
                break;
            }
        }
    }
    // Every response is whole: a status line, headers, and exactly Content-Length bytes.
    let mut p = 0;
    for head in heads {
        let rest = &out[p..];
        assert!(rest.starts_with(b"HTTP/1.1 "));
        let end = rest
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("end of head")
            + 4;
        // Header values may echo request bytes (Location from Host): not always UTF-8.
        let text = String::from_utf8_lossy(&rest[..end]);
        let len: usize = text
            .split("\r\n")
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .map_or(0, |v| v.parse().expect("length"));
        p += end + if head { 0 } else { len };
        assert!(p <= out.len());
    }
    assert_eq!(p, out.len());
});
