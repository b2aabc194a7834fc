use super::*;

fn lim() -> Limits {
    Limits {
        max_bulk: 100,
        max_args: 8,
        max_inline: 64,
        max_request: 200,
    }
}

fn args(buf: &[u8]) -> (Vec<Vec<u8>>, usize) {
    match decode(buf, &lim()) {
        Ok(Decoded::Complete { request, consumed }) => (request.to_owned_args(), consumed),
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
    }
}

fn err(buf: &[u8]) -> String {
    match decode(buf, &lim()) {
        Err(e) => e.message,
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
    }
}

fn v(words: &[&str]) -> Vec<Vec<u8>> {
    words.iter().map(|w| w.as_bytes().to_vec()).collect()
}

#[test]
fn multibulk_whole_and_split_at_every_offset() {
    let wire = b"*3\r\n$3\r\nSET\r\n$3\r\nk\r\n\r\n$0\r\n\r\n";
    let (a, n) = args(wire);
    assert_eq!(a, vec![b"SET".to_vec(), b"k\r\n".to_vec(), Vec::new()]);
    assert_eq!(n, wire.len());
    for cut in 0..wire.len() {
        assert_eq!(
            decode(&wire[..cut], &lim()),
            Ok(Decoded::Incomplete),
            "cut at {cut}"
        );
    }
}

#[test]
fn pipelined_requests_decode_one_by_one() {
    let wire = b"*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\na\r\nPING\r\n";
    let (a, n) = args(wire);
    assert_eq!(a, v(&["PING"]));
    let (b, m) = args(&wire[n..]);
    assert_eq!(b, v(&["GET", "a"]));
    let (c, k) = args(&wire[n + m..]);
    assert_eq!(c, v(&["PING"]));
    assert_eq!(n + m + k, wire.len());
}

#[test]
fn empty_multibulks_and_lines_are_requests_without_arguments() {
    assert_eq!(args(b"*0\r\n"), (vec![], 4));
    assert_eq!(args(b"*-1\r\n"), (vec![], 5));
    assert_eq!(args(b"\r\n"), (vec![], 2));
    assert_eq!(args(b"   \n"), (vec![], 4));
}

#[test]
fn malformed_multibulks_are_redis_protocol_errors() {
    assert_eq!(err(b"*x\r\n"), "invalid multibulk length");
    assert_eq!(err(b"*9\r\n"), "invalid multibulk length");
    assert_eq!(err(b"*1\r\n+a\r\n"), "expected '$', got '+'");
    assert_eq!(err(b"*1\r\n$-1\r\n"), "invalid bulk length");
    assert_eq!(err(b"*1\r\n$x\r\n"), "invalid bulk length");
    assert_eq!(err(b"*1\r\n$01\r\n"), "invalid bulk length");
    let e = decode(b"*1\r\n$101\r\n", &lim()).unwrap_err();
    assert_eq!(
        (e.message.as_str(), e.bulk_len),
        ("invalid bulk length", Some(101))
    );
    assert_eq!(err(&[b'*'; 70]), "too big mbulk count string");
    let mut long = b"*1\r\n$".to_vec();
    long.extend_from_slice(&[b'1'; 70]);
    assert_eq!(err(&long), "too big bulk count string");
    let mut out = Vec::new();
    decode(b"*x\r\n", &lim()).unwrap_err().encode(&mut out);
    assert_eq!(out, b"-ERR Protocol error: invalid multibulk length\r\n");
}

#[test]
fn a_bulk_at_the_limit_is_read() {
    let mut wire = b"*1\r\n$100\r\n".to_vec();
    wire.extend_from_slice(&[b'x'; 100]);
    wire.extend_from_slice(b"\r\n");
    assert_eq!(args(&wire).0[0].len(), 100);
}

#[test]
fn inline_commands_split_as_redis_does() {
    assert_eq!(args(b"PING\r\n"), (v(&["PING"]), 6));
    assert_eq!(args(b"set  a   b\n").0, v(&["set", "a", "b"]));
    assert_eq!(
        args(b"SET k \"a b\\n\\x41\" 'c\\'d'\r\n").0,
        vec![
            b"SET".to_vec(),
            b"k".to_vec(),
            b"a b\nA".to_vec(),
            b"c'd".to_vec()
        ]
    );
    assert_eq!(args(b"ECHO \"\"\r\n").0, vec![b"ECHO".to_vec(), Vec::new()]);
    assert_eq!(decode(b"PING", &lim()), Ok(Decoded::Incomplete));
    assert_eq!(err(b"SET \"a\r\n"), "unbalanced quotes in request");
    assert_eq!(err(b"SET \"a\"b\r\n"), "unbalanced quotes in request");
    assert_eq!(err(&[b'A'; 70]), "too big inline request");
    assert!(matches!(
        decode(b"PING\r\n", &lim()),
        Ok(Decoded::Complete {
            request: Request { inline: true, .. },
            ..
        })
    ));
}

#[test]
fn numbers_parse_as_string2ll() {
    assert_eq!(parse_i64(b"0"), Some(0));
    assert_eq!(parse_i64(b"-12"), Some(-12));
    assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
    assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
    for bad in [
        &b""[..],
        b"+1",
        b"01",
        b"1 ",
        b" 1",
        b"-",
        b"-0",
        b"9223372036854775808",
        b"1.0",
    ] {
        assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn replies_in_resp2_and_resp3() {
    let mut o = Vec::new();
    ok(&mut o);
    simple(&mut o, "PONG");
    error(&mut o, "ERR a\r\nb");
    integer(&mut o, -3);
    bulk(&mut o, b"hi");
    assert_eq!(o, b"+OK\r\n+PONG\r\n-ERR a  b\r\n:-3\r\n$2\r\nhi\r\n");
    for (resp3, want) in [
        (
            false,
            &b"$-1\r\n*-1\r\n*4\r\n*2\r\n$3\r\n1.5\r\n:1\r\n$2\r\nab\r\n"[..],
        ),
        (
            true,
            b"_\r\n_\r\n%2\r\n~2\r\n,1.5\r\n#t\r\n=6\r\ntxt:ab\r\n",
        ),
    ] {
        let mut o = Vec::new();
        null(&mut o, resp3);
        null_array(&mut o, resp3);
        map(&mut o, 2, resp3);
        set(&mut o, 2, resp3);
        double(&mut o, 1.5, resp3);
        boolean(&mut o, true, resp3);
        verbatim(&mut o, "txt", b"ab", resp3);
        assert_eq!(o, want, "resp3 {resp3}");
    }
    assert_eq!(format_double(10.6), "10.6");
    assert_eq!(format_double(3.0), "3");
    assert_eq!(format_double(-0.0), "0");
    assert_eq!(format_double(1e21), "1000000000000000000000");
}

#[test]
fn a_request_over_the_total_limit_is_refused_before_its_data() {
    // Two bulks of 100 bytes each are within the bulk limit, not within 200 bytes in all.
    let mut wire = b"*3\r\n$3\r\nSET\r\n$100\r\n".to_vec();
    wire.extend_from_slice(&[b'x'; 100]);
    wire.extend_from_slice(b"\r\n$100\r\n");
    assert_eq!(
        err(&wire),
        "request of more than 200 bytes (the server's limit)"
    );
    // Many small arguments count too.
    let mut many = b"*8\r\n".to_vec();
    for _ in 0..8 {
        many.extend_from_slice(b"$20\r\n");
        many.extend_from_slice(&[b'y'; 20]);
        many.extend_from_slice(b"\r\n");
    }
    assert_eq!(
        err(&many),
        "request of more than 200 bytes (the server's limit)"
    );
}
