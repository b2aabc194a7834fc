#![no_main]
//! The memcached text decoder on arbitrary bytes, decoded request after request as a server
//! would, and each request executed on an in-memory database: never panics, always makes
//! progress, a stored data block lies inside the input, and every reply is whole lines.
use kura_proto::mc_text::{decode, Decoded, Limits, Request};
use kura_server::context::{Next, Shared};
use kura_server::mc_exec::execute;
use kura_server::out::Out;
use libfuzzer_sys::fuzz_target;

/// Random bytes rarely spell a command: most runs get one in front, so that the executor sees
/// keys, flags and numbers it would otherwise hardly ever get.
const PREFIXES: [&[u8]; 12] = [
    b"",
    b"set k 0 0 ",
    b"ms k ",
    b"mg k ",
    b"ma k ",
    b"md k ",
    b"incr k ",
    b"gat ",
    b"set n 0 0 2\r\n10\r\nma n ",
    b"set n 0 0 2\r\n10\r\nmg n ",
    b"ms a 1 b\r\nx\r\nmg ",
    b"cas k 0 0 1 ",
];

fuzz_target!(|data: &[u8]| {
    let store = kura_engine::open("*").expect("memory db");
    let shared = Shared::new(1_000_000, 4096);
    let limits = Limits {
        max_line: 256,
        max_key: 250,
        max_item: 4096,
        max_value: 2048,
    };
    let (sel, rest) = data.split_first().map_or((0, data), |(b, r)| (*b, r));
    let mut input = PREFIXES[usize::from(sel) % PREFIXES.len()].to_vec();
    input.extend_from_slice(rest);
    let mut out = Out::default();
    let mut pos = 0;
    while pos < input.len() {
        match decode(&input[pos..], &limits) {
            Ok(Decoded::Complete { request, consumed }) => {
                assert!(consumed >= 1 && pos + consumed <= input.len());
                if let Request::Store { data: d, .. } = request {
                    assert!(d.len() <= limits.max_item);
                }
                pos += consumed;
                if execute(&*store, &shared, &request, 1_000_000, &mut out) == Next::Close {
                    break;
                }
            }
            Ok(Decoded::Incomplete) => break,
            Err(e) => {
                assert!(e.consumed >= 1);
                let mut line = Vec::new();
                e.encode(&mut line);
                // Silent where memcached is: under `noreply`, and a hang-up (which closes).
                let silent = e.noreply || e.kind == kura_proto::mc_text::ErrorKind::Hangup;
                assert_eq!(line.is_empty(), silent, "{e:?}");
                assert!(silent || line.ends_with(b"\r\n"));
                assert!(e.kind != kura_proto::mc_text::ErrorKind::Hangup || e.close);
                out.extend_from_slice(&line);
                if e.close {
                    break;
                }
                pos = pos.saturating_add(e.consumed);
            }
        }
    }
    let replies = out.contiguous();
    assert!(
        replies.is_empty() || replies.ends_with(b"\r\n"),
        "{replies:?}"
    );
});
