use super::*;
use proptest::prelude::*;

fn lim() -> Limits {
    Limits::default()
}

fn one(buf: &[u8]) -> (Request<'_>, usize) {
    match decode(buf, &lim()) {
        Ok(Decoded::Complete { request, consumed }) => (request, consumed),
        other => panic!("{:?} for {:?}", other, String::from_utf8_lossy(buf)),
    }
}

fn err(buf: &[u8]) -> DecodeError {
    match decode(buf, &lim()) {
        Err(e) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn storage_commands() {
    let (r, n) = one(b"set k 5 100 3\r\nabc\r\nget k\r\n");
    assert_eq!(n, 20);
    assert_eq!(
        r,
        Request::Store {
            mode: StoreMode::Set,
            key: b"k",
            flags: 5,
            exptime: 100,
            data: b"abc",
            cas: 0,
            noreply: false
        }
    );
    let (r, _) = one(b"cas k 0 -1 2 77 noreply\r\nxy\r\n");
    assert!(matches!(
        r,
        Request::Store {
            mode: StoreMode::Cas,
            cas: 77,
            exptime: -1,
            noreply: true,
            ..
        }
    ));
    // Binary-safe data, bare \n line ending.
    let (r, n) = one(b"append k 0 0 4\n\r\n\0x\r\n");
    assert_eq!(n, 21);
    assert!(matches!(
        r,
        Request::Store {
            data: b"\r\n\0x",
            ..
        }
    ));
    assert_eq!(
        decode(b"set k 0 0 3\r\nab", &lim()),
        Ok(Decoded::Incomplete)
    );
}

#[test]
fn retrieval_and_others() {
    let (r, _) = one(b"gets a bb ccc\r\n");
    match r {
        Request::Get { keys, cas, .. } => {
            assert!(cas);
            assert_eq!(
                keys.iter().collect::<Vec<_>>(),
                vec![&b"a"[..], b"bb", b"ccc"]
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        one(b"gat 10 a b\r\n").0,
        Request::Gat { exptime: 10, .. }
    ));
    assert!(matches!(
        one(b"delete k noreply\r\n").0,
        Request::Delete { noreply: true, .. }
    ));
    assert!(matches!(
        one(b"delete k 0\r\n").0,
        Request::Delete { noreply: false, .. }
    ));
    assert!(matches!(
        one(b"incr k 18446744073709551615\r\n").0,
        Request::Arith {
            delta: u64::MAX,
            decr: false,
            ..
        }
    ));
    assert!(matches!(
        one(b"decr k 1 noreply\r\n").0,
        Request::Arith {
            decr: true,
            noreply: true,
            ..
        }
    ));
    assert!(matches!(
        one(b"touch k -5\r\n").0,
        Request::Touch { exptime: -5, .. }
    ));
    assert!(matches!(
        one(b"flush_all 10 noreply\r\n").0,
        Request::FlushAll {
            delay: 10,
            noreply: true
        }
    ));
    assert!(matches!(
        one(b"flush_all\r\n").0,
        Request::FlushAll {
            delay: 0,
            noreply: false
        }
    ));
    match one(b"stats detail  on\r\n").0 {
        Request::Stats { args } => {
            assert_eq!(args.iter().collect::<Vec<_>>(), [&b"detail"[..], b"on"])
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        one(b"cache_memlimit 100 noreply\r\n").0,
        Request::CacheMemlimit {
            megabytes: 100,
            noreply: true
        }
    );
    assert_eq!(
        err(b"cache_memlimit -5\r\n").kind,
        ErrorKind::UnknownCommand
    );
    assert_eq!(
        one(b"slabs automove 2 extra\r\n").0,
        Request::SlabsAutomove {
            setting: Automove::Level(2),
            noreply: false
        }
    );
    assert_eq!(
        one(b"slabs automove ratio 0.5\r\n").0,
        Request::SlabsAutomove {
            setting: Automove::Ratio(b"0.5"),
            noreply: false
        }
    );
    assert_eq!(
        err(b"slabs automove invalid\r\n").kind,
        ErrorKind::Client("bad command line format")
    );
    assert_eq!(err(b"slabs automove 3\r\n").kind, ErrorKind::UnknownCommand);
    assert_eq!(
        one(b"slabs reassign 4294967297 -1\r\n").0,
        Request::SlabsReassign { src: 1, dst: -1 }
    );
    assert_eq!(
        err(b"slabs reassign 1 2 noreply\r\n").kind,
        ErrorKind::UnknownCommand
    );
    assert_eq!(one(b"version\r\n").0, Request::Version);
    assert_eq!(one(b"quit\r\n").0, Request::Quit);
    assert!(matches!(
        one(b"verbosity 1\r\n").0,
        Request::Verbosity {
            level: 1,
            noreply: false
        }
    ));
}

#[test]
fn errors_keep_the_stream_in_sync() {
    assert_eq!(err(b"bogus\r\n").kind, ErrorKind::UnknownCommand);
    assert_eq!(err(b"\r\n").kind, ErrorKind::UnknownCommand);
    assert_eq!(
        err(b"GET k\r\n").kind,
        ErrorKind::UnknownCommand,
        "commands are lower-case"
    );
    assert_eq!(err(b"get\r\n").kind, ErrorKind::UnknownCommand);
    let long_key = [b'k'; 251];
    let mut line = b"get ".to_vec();
    line.extend_from_slice(&long_key);
    line.extend_from_slice(b"\r\n");
    assert!(matches!(err(&line).kind, ErrorKind::Client(_)));
    // Any byte but space and newline is a key byte, as in memcached.
    assert!(matches!(
        one(b"get a\x01b\x7f\r\n").0,
        Request::Get { keys, .. } if keys.iter().next() == Some(&b"a\x01b\x7f"[..])
    ));
    assert!(matches!(err(b"incr k x\r\n").kind, ErrorKind::Client(_)));
    assert!(matches!(
        err(b"set k x 0 1\r\na\r\n").kind,
        ErrorKind::Client(_)
    ));
    // noreply silences the error, and the block is not skipped (memcached reads it as a
    // command).
    let e = err(b"set k x 0 1 noreply\r\na\r\n");
    assert_eq!((e.noreply, e.consumed), (true, 21));
    let mut out = Vec::new();
    e.encode(&mut out);
    assert!(out.is_empty());
    // Too large: the whole block is skipped, even before it arrived; a set names its key.
    let e = err(b"set k 0 0 2000000\r\n");
    assert_eq!(
        (e.kind.clone(), e.consumed, e.close),
        (ErrorKind::TooLarge, 19 + 2_000_002, false)
    );
    assert_eq!(
        e.unlink,
        Some(Unlink {
            start: 4,
            len: 1,
            base64: false
        })
    );
    assert_eq!(err(b"add k 0 0 2000000\r\n").unlink, None);
    // The limit counts the item as memcached does.
    let at = |n: usize| format!("set k 0 0 {n}\r\n{}\r\n", "v".repeat(n));
    assert!(decode(at(1_048_516).as_bytes(), &lim()).is_ok());
    assert_eq!(err(at(1_048_517).as_bytes()).kind, ErrorKind::TooLarge);
    // Numbers as C reads them: flags and lengths truncated to 32 bits.
    assert!(matches!(
        one(b"set k 4294967297 4294967296 1\r\nx\r\n").0,
        Request::Store {
            flags: 1,
            exptime: 0,
            ..
        }
    ));
    for line in [&b"set k 0 0 2147483646\r\n"[..], b"cas k 0 0 -1 5\r\n"] {
        let e = err(line);
        assert_eq!(
            (e.kind, e.consumed),
            (ErrorKind::Client("bad command line format"), line.len())
        );
    }
    assert_eq!(err(b"set k 0 0 2147483645\r\n").kind, ErrorKind::TooLarge);
    // Bad data chunk: the line, the announced bytes and two more are consumed.
    let e = err(b"set k 0 0 1\r\nabc\r\n");
    assert_eq!((e.kind, e.consumed), (ErrorKind::BadDataChunk, 16));
    // A line that never ends: hang up without a word.
    let e = decode(&[b'a'; 4096], &lim()).unwrap_err();
    assert!(e.close && e.kind == ErrorKind::Hangup);
    assert_eq!(decode(&[b'a'; 100], &lim()), Ok(Decoded::Incomplete));
    // A line that looks like HTTP: hang up.
    assert_eq!(err(b"GET / HTTP/1.0\r\n").kind, ErrorKind::Hangup);
    assert_eq!(err(b"DELETE HTTP/1.1\r\n").kind, ErrorKind::Hangup);
    let mut out = Vec::new();
    err(b"set k 0 0 2000000\r\n").encode(&mut out);
    assert_eq!(out, b"SERVER_ERROR object too large for cache\r\n");
}

/// Drive a stream as the connection loop does: first line by [`decode`], then the pieces
/// of a long retrieval line by [`decode_continued`]. The keys seen, whether an END is due
/// after each request, and the errors.
fn stream(input: &[u8], cut: usize) -> (Vec<Vec<u8>>, Vec<bool>, Vec<ErrorKind>) {
    let (mut keys, mut ends, mut errs) = (Vec::new(), Vec::new(), Vec::new());
    let mut buf: Vec<u8> = Vec::new();
    let mut more = None;
    let mut discard = false;
    let mut fed = 0;
    loop {
        if fed < input.len() {
            let n = cut.min(input.len() - fed);
            buf.extend_from_slice(&input[fed..fed + n]);
            fed += n;
        }
        if discard {
            match buf.iter().position(|&b| b == b'\n') {
                Some(nl) => {
                    buf.drain(..=nl);
                    discard = false;
                }
                None => buf.clear(),
            }
        }
        loop {
            let r = match more {
                Some(l) => decode_continued(&buf, &lim(), l),
                None => decode(&buf, &lim()),
            };
            match r {
                Ok(Decoded::Complete { request, consumed }) => {
                    more = continues(&request);
                    if let Request::Get {
                        keys: k, more: m, ..
                    } = &request
                    {
                        keys.extend(k.iter().map(|k| k.to_vec()));
                        ends.push(!m);
                    }
                    buf.drain(..consumed);
                }
                Ok(Decoded::Incomplete) => break,
                Err(e) => {
                    more = None;
                    errs.push(e.kind);
                    buf.drain(..e.consumed.min(buf.len()));
                    if e.discard_line {
                        match buf.iter().position(|&b| b == b'\n') {
                            Some(nl) => {
                                buf.drain(..=nl);
                            }
                            None => {
                                buf.clear();
                                discard = true;
                            }
                        }
                    }
                }
            }
        }
        if fed == input.len() {
            return (keys, ends, errs);
        }
    }
}

/// A get of 18,000 keys (a 128 KiB line) is served key by key in pieces of at most 2 KiB,
/// however it arrives; other lines keep the 2 KiB limit.
#[test]
fn long_retrieval_lines_are_taken_in_pieces() {
    let mut line = b"gets".to_vec();
    let want: Vec<Vec<u8>> = (0..18_000)
        .map(|i| format!("key{i}").into_bytes())
        .collect();
    for k in &want {
        line.push(b' ');
        line.extend_from_slice(k);
    }
    line.extend_from_slice(b"\r\nget tail\r\n");
    for cut in [1, 7, 100, 2047, 2048, 5000, 1 << 20] {
        let (keys, ends, errs) = stream(&line, cut);
        assert!(errs.is_empty(), "cut {cut}: {errs:?}");
        assert_eq!(keys.len(), 18_001, "cut {cut}");
        assert_eq!(&keys[..18_000], &want[..], "cut {cut}");
        assert_eq!(keys[18_000], b"tail");
        // END after the last piece of each line only.
        assert_eq!(ends.iter().filter(|e| **e).count(), 2, "cut {cut}");
        assert!(ends.len() > 60, "pieces of at most 2 KiB: {}", ends.len());
    }
    // A bad key in a long line: the error, the rest of the line skipped, the next served.
    let mut bad = b"get ".to_vec();
    bad.extend(b"a ".repeat(1500));
    bad.extend([b'x'; 300]);
    bad.extend(b" b b\r\nget c\r\n");
    for cut in [1, 64, 1 << 20] {
        let (keys, _, errs) = stream(&bad, cut);
        assert_eq!(
            errs,
            [ErrorKind::Client("bad command line format")],
            "cut {cut}"
        );
        assert_eq!(keys.last().map(Vec::as_slice), Some(&b"c"[..]));
        assert!(!keys.iter().any(|k| k == b"b"), "cut {cut}");
    }
    // gat: the exptime is carried into every piece.
    let mut gat = b"gat 100".to_vec();
    gat.extend(b" k".repeat(2000));
    gat.extend(b"\r\n");
    let r = decode(&gat, &lim()).unwrap();
    assert!(matches!(
        r,
        Decoded::Complete {
            request: Request::Gat {
                exptime: 100,
                more: true,
                ..
            },
            ..
        }
    ));
    // Not a retrieval command: hang up.
    let mut set = b"set ".to_vec();
    set.extend([b'k'; 3000]);
    set.extend(b" 0 0 1\r\n");
    assert_eq!(err(&set).kind, ErrorKind::Hangup);
}

#[test]
fn pipelined_and_split_at_every_offset() {
    let stream: &[u8] =
        b"set a 1 0 3\r\nxyz\r\nget a b\r\nincr n 5\r\ndelete a noreply\r\nversion\r\n";
    let mut whole = Vec::new();
    let mut pos = 0;
    while pos < stream.len() {
        let (r, n) = one(&stream[pos..]);
        whole.push(format!("{r:?}"));
        pos += n;
    }
    assert_eq!(whole.len(), 5);
    // Every prefix decodes to Incomplete or to the first request, never to something else.
    for cut in 0..stream.len() {
        match decode(&stream[..cut], &lim()) {
            Ok(Decoded::Incomplete) => {}
            Ok(Decoded::Complete { request, .. }) => {
                assert_eq!(format!("{request:?}"), whole[0])
            }
            Err(e) => panic!("cut {cut}: {e}"),
        }
    }
}

#[test]
fn meta_commands() {
    match one(b"mg key v c f O123 q\r\n").0 {
        Request::MetaGet { key, flags } => {
            assert_eq!(key, b"key");
            assert_eq!(
                flags.iter().collect::<Vec<_>>(),
                vec![&b"v"[..], b"c", b"f", b"O123", b"q"]
            );
        }
        other => panic!("{other:?}"),
    }
    let (r, n) = one(b"ms k 3 T60 F5 MA\r\nabc\r\nmn\r\n");
    assert_eq!(n, 23);
    assert!(matches!(r, Request::MetaSet { data: b"abc", .. }));
    assert_eq!(one(b"mn\r\n").0, Request::MetaNoop);
    assert!(matches!(one(b"md k q\r\n").0, Request::MetaDelete { .. }));
    assert!(matches!(
        one(b"ma k D5 MD v\r\n").0,
        Request::MetaArith { .. }
    ));
    assert!(matches!(
        one(b"me k\r\n").0,
        Request::MetaDebug { key: b"k" }
    ));
    // A base64 key (`b` flag) is an ordinary key token to the codec: `+`, `/`, `=` included.
    match one(b"mg a+b/Yw== b k v N30 R10\r\n").0 {
        Request::MetaGet { key, flags } => {
            assert_eq!(key, b"a+b/Yw==");
            assert_eq!(
                flags.iter().collect::<Vec<_>>(),
                vec![&b"b"[..], b"k", b"v", b"N30", b"R10"]
            );
        }
        other => panic!("{other:?}"),
    }
    match one(b"ms 44OG44K544OI 2 b I C5\r\npo\r\n").0 {
        Request::MetaSet { key, data, flags } => {
            assert_eq!((key, data), (&b"44OG44K544OI"[..], &b"po"[..]));
            assert_eq!(
                flags.iter().collect::<Vec<_>>(),
                vec![&b"b"[..], b"I", b"C5"]
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(err(b"mg\r\n").kind, ErrorKind::UnknownCommand);
    assert_eq!(err(b"ms k 2000000\r\n").kind, ErrorKind::TooLarge);
    assert_eq!(decode(b"ms k 3\r\nab", &lim()), Ok(Decoded::Incomplete));
}

#[test]
fn meta_flags_are_checked_as_memcached_checks_them() {
    let client = |m: &'static str| ErrorKind::Client(m);
    assert_eq!(err(b"mg k v Y\r\n").kind, client("invalid flag"));
    assert_eq!(err(b"mg k v v\r\n").kind, client("duplicate flag"));
    assert_eq!(err(b"mg k T1 T2\r\n").kind, client("duplicate flag"));
    assert_eq!(
        err(b"md k E1\r\n").kind,
        client("invalid or duplicate flag")
    );
    assert_eq!(
        err(b"ma k q q\r\n").kind,
        client("invalid or duplicate flag")
    );
    assert_eq!(err(b"mg k 1\r\n").kind, client("invalid flag"));
    // A refused ms takes its data block with it: the next command is read in sync.
    let e = err(b"ms k 2 Z\r\nhi\r\nmn\r\n");
    assert_eq!(
        (e.kind, e.consumed, e.close),
        (client("invalid flag"), 14, false)
    );
    // Every letter memcached accepts, once each, on each command.
    for cmd in ["mg k", "md k", "ma k"] {
        let line = format!("{cmd} b c f h k l q s t u v C1 D1 F1 I J1 L M1 N1 O1 P R1 T1\r\n");
        assert!(decode(line.as_bytes(), &lim()).is_ok(), "{line}");
    }
    // me takes no flags to check.
    assert!(matches!(one(b"me k zz\r\n").0, Request::MetaDebug { .. }));
}

#[test]
fn replies() {
    let mut out = Vec::new();
    encode_value(&mut out, b"k", 7, b"abc", Some(42));
    encode_number(&mut out, 18446744073709551615);
    encode_stat(&mut out, "pid", "12");
    out.extend_from_slice(reply::END);
    assert_eq!(
        out,
        b"VALUE k 7 3 42\r\nabc\r\n18446744073709551615\r\nSTAT pid 12\r\nEND\r\n"
    );
}

proptest! {
    /// Decoding never panics; a Complete consumes at least one byte and no more than it was
    /// given; an error consumes at least one byte.
    #[test]
    fn never_panics(buf in proptest::collection::vec(any::<u8>(), 0..300)) {
        match decode(&buf, &lim()) {
            Ok(Decoded::Complete { consumed, .. }) => prop_assert!(consumed >= 1 && consumed <= buf.len()),
            Ok(Decoded::Incomplete) => {}
            Err(e) => prop_assert!(e.consumed >= 1),
        }
    }

    /// With a short line limit, long lines and their pieces never panic, and every step
    /// makes progress.
    #[test]
    fn long_lines_never_panic(
        body in proptest::collection::vec(prop_oneof![Just(b' '), Just(b'k'), Just(b'\n'), any::<u8>()], 0..400),
        cmd in prop_oneof![Just(&b"get "[..]), Just(&b"gats 5 "[..]), Just(&b"set "[..]), Just(&b""[..])],
    ) {
        let limits = Limits { max_line: 32, max_key: 10, max_item: 1 << 20, max_value: 1 << 20 };
        let mut buf = cmd.to_vec();
        buf.extend_from_slice(&body);
        let mut pos = 0;
        let mut more = None;
        while pos < buf.len() {
            let r = match more {
                Some(l) => decode_continued(&buf[pos..], &limits, l),
                None => decode(&buf[pos..], &limits),
            };
            match r {
                Ok(Decoded::Complete { request, consumed }) => {
                    prop_assert!(consumed >= 1 && pos + consumed <= buf.len());
                    more = continues(&request);
                    pos += consumed;
                }
                Ok(Decoded::Incomplete) => break,
                Err(e) => {
                    prop_assert!(e.consumed >= 1);
                    if e.close {
                        break;
                    }
                    more = None;
                    pos += e.consumed;
                    if e.discard_line {
                        match buf[pos.min(buf.len())..].iter().position(|&b| b == b'\n') {
                            Some(nl) => pos += nl + 1,
                            None => break,
                        }
                    }
                }
            }
        }
    }

    /// Storage commands round-trip any data block.
    #[test]
    fn store_round_trip(data in proptest::collection::vec(any::<u8>(), 0..200), flags: u32) {
        let mut buf = format!("set key {flags} 0 {}\r\n", data.len()).into_bytes();
        buf.extend_from_slice(&data);
        buf.extend_from_slice(b"\r\n");
        let (r, n) = one(&buf);
        prop_assert_eq!(n, buf.len());
        match r {
            Request::Store { data: d, flags: f, .. } => { prop_assert_eq!(d, &data[..]); prop_assert_eq!(f, flags); }
            other => prop_assert!(false, "{:?}", other),
        }
    }
}
