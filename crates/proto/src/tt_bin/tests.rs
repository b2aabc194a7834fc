use super::*;
use proptest::prelude::*;

fn enc(req: &Request<'_>) -> Vec<u8> {
    let mut v = Vec::new();
    encode_request(req, &mut v);
    v
}

/// One request of every command, with binary keys and values.
fn every_command() -> Vec<Request<'static>> {
    vec![
        Request::Put {
            key: b"k\0\r\n",
            value: b"v\xff",
        },
        Request::PutKeep {
            key: b"k",
            value: b"",
        },
        Request::PutCat {
            key: b"",
            value: b"vv",
        },
        Request::PutShl {
            key: b"k",
            value: b"abc",
            width: 7,
        },
        Request::PutNr {
            key: b"k",
            value: b"v",
        },
        Request::Out { key: b"k" },
        Request::Get { key: b"\xc8\x10" },
        Request::Mget {
            keys: vec![b"a", b"", b"ccc"],
        },
        Request::Mget { keys: vec![] },
        Request::Vsiz { key: b"k" },
        Request::IterInit,
        Request::IterNext,
        Request::Fwmkeys {
            prefix: b"pre",
            max: -1,
        },
        Request::AddInt { key: b"n", num: -5 },
        Request::AddDouble {
            key: b"d",
            integ: 3,
            fract: 500_000_000_000,
        },
        Request::Ext {
            name: b"fn",
            opts: 2,
            key: b"k",
            value: b"v",
        },
        Request::Sync,
        Request::Optimize { params: b"bnum=10" },
        Request::Vanish,
        Request::Copy { path: b"/tmp/x" },
        Request::Restore {
            path: b"ulog",
            ts: 123,
            opts: 1,
        },
        Request::SetMst {
            host: b"localhost",
            port: 1978,
            ts: 9,
            opts: 1,
        },
        Request::Rnum,
        Request::Size,
        Request::Stat,
        Request::Misc {
            name: b"putlist",
            opts: 1,
            args: vec![b"a", b"1", b"b", b""],
        },
        Request::Repl { ts: 1, sid: 2 },
    ]
}

#[test]
fn every_command_round_trips_and_splits_anywhere() {
    for req in every_command() {
        let wire = enc(&req);
        assert_eq!(wire[0], MAGIC);
        assert_eq!(wire[1], req.cmd());
        assert_ne!(req.name(), "?");
        for cut in 0..wire.len() {
            assert_eq!(
                decode(&wire[..cut], &Limits::default()),
                Ok(Decoded::Incomplete),
                "{} cut at {cut}",
                req.name()
            );
        }
        assert_eq!(
            decode(&wire, &Limits::default()),
            Ok(Decoded::Complete {
                request: req.clone(),
                consumed: wire.len()
            })
        );
    }
}

#[test]
fn wire_layouts_match_the_specification() {
    assert_eq!(
        enc(&Request::Put {
            key: b"ab",
            value: b"xyz"
        }),
        b"\xc8\x10\0\0\0\x02\0\0\0\x03abxyz"
    );
    assert_eq!(
        enc(&Request::PutShl {
            key: b"k",
            value: b"v",
            width: 4
        }),
        b"\xc8\x13\0\0\0\x01\0\0\0\x01\0\0\0\x04kv"
    );
    assert_eq!(
        enc(&Request::Fwmkeys {
            prefix: b"p",
            max: -1
        }),
        b"\xc8\x58\0\0\0\x01\xff\xff\xff\xffp"
    );
    assert_eq!(
        enc(&Request::Misc {
            name: b"get",
            opts: 0,
            args: vec![b"k"]
        }),
        b"\xc8\x90\0\0\0\x03\0\0\0\0\0\0\0\x01get\0\0\0\x01k"
    );
    assert_eq!(
        enc(&Request::Repl { ts: 1, sid: 2 }),
        b"\xc8\xa0\0\0\0\0\0\0\0\x01\0\0\0\x02"
    );
    assert_eq!(enc(&Request::Stat), b"\xc8\x88");
}

#[test]
fn pipelined_requests() {
    let reqs = every_command();
    let mut wire = Vec::new();
    for r in &reqs {
        encode_request(r, &mut wire);
    }
    let mut pos = 0;
    let mut got = Vec::new();
    while pos < wire.len() {
        match decode(&wire[pos..], &Limits::default()) {
            Ok(Decoded::Complete { request, consumed }) => {
                got.push(request);
                pos += consumed;
            }
            other => panic!("at {pos}: {other:?}"),
        }
    }
    assert_eq!(got, reqs);
}

#[test]
fn bad_magic_and_unknown_commands_hang_up() {
    let hang_up = Err(DecodeError::hang_up());
    assert_eq!(decode(b"get k\r\n", &Limits::default()), hang_up);
    assert_eq!(decode(b"\x80", &Limits::default()), hang_up);
    for c in [0x00, 0x14, 0x32, 0x91, 0xa1, 0xff] {
        assert_eq!(decode(&[MAGIC, c, 0, 0], &Limits::default()), hang_up);
    }
    assert_eq!(decode(b"", &Limits::default()), Ok(Decoded::Incomplete));
    assert_eq!(decode(b"\xc8", &Limits::default()), Ok(Decoded::Incomplete));
}

/// Sizes that are negative as Tyrant's signed integers, or above its 256 MiB limit, close
/// the connection (the stream cannot be resynchronised); no overflow in the sums.
#[test]
fn negative_and_huge_sizes_hang_up() {
    for bad in [0x8000_0000u32, u32::MAX, (MAX_ARG_SIZE + 1) as u32] {
        let b = bad.to_be_bytes();
        let mut put = vec![MAGIC, cmd::PUT];
        put.extend_from_slice(&b);
        put.extend_from_slice(&b);
        let mut get = vec![MAGIC, cmd::GET];
        get.extend_from_slice(&b);
        let mut mget = vec![MAGIC, cmd::MGET];
        mget.extend_from_slice(&b);
        let mut mget_elem = vec![MAGIC, cmd::MGET, 0, 0, 0, 1];
        mget_elem.extend_from_slice(&b);
        let mut misc = vec![MAGIC, cmd::MISC, 0, 0, 0, 1, 0, 0, 0, 0];
        misc.extend_from_slice(&b);
        for wire in [put, get, mget, mget_elem, misc] {
            let e = decode(&wire, &Limits::default()).unwrap_err();
            assert!(e.close && e.reply.is_none(), "{wire:?}");
        }
    }
    // Negative putshl width and setmst port: ttserver hangs up.
    let mut w = enc(&Request::PutShl {
        key: b"k",
        value: b"v",
        width: 0,
    });
    w[10..14].copy_from_slice(&(-1i32).to_be_bytes());
    assert!(decode(&w, &Limits::default()).unwrap_err().close);
    let w = enc(&Request::SetMst {
        host: b"h",
        port: -1,
        ts: 0,
        opts: 0,
    });
    assert!(decode(&w, &Limits::default()).unwrap_err().close);
    // A misc or ext function name over 1023 bytes.
    let long = vec![b'n'; 1024];
    let w = enc(&Request::Misc {
        name: &long,
        opts: 0,
        args: vec![],
    });
    assert!(decode(&w, &Limits::default()).unwrap_err().close);
    let w = enc(&Request::Ext {
        name: &long,
        opts: 0,
        key: b"",
        value: b"",
    });
    assert!(decode(&w, &Limits::default()).unwrap_err().close);
}

/// A well-delimited request over our limits is skipped whole (even before it has arrived)
/// and answered with the failure code; putnr is skipped silently.
#[test]
fn over_the_limits_skips_and_fails() {
    let limits = Limits {
        max_key: 4,
        max_value: 8,
        max_args: 2,
        max_frame: 64,
    };
    let wire = enc(&Request::Put {
        key: b"k",
        value: b"123456789",
    });
    assert_eq!(
        decode(&wire[..10], &limits),
        Err(DecodeError {
            consumed: wire.len(),
            close: false,
            reply: Some(FAIL),
            value_len: Some(9),
            then_elements: 0,
        })
    );
    let wire = enc(&Request::PutNr {
        key: b"12345",
        value: b"",
    });
    assert_eq!(
        decode(&wire, &limits),
        Err(DecodeError {
            consumed: wire.len(),
            close: false,
            reply: None,
            value_len: None,
            then_elements: 0,
        })
    );
    for req in [
        Request::Get { key: b"12345" },
        Request::Fwmkeys {
            prefix: b"12345",
            max: 1,
        },
        Request::AddDouble {
            key: b"12345",
            integ: 0,
            fract: 0,
        },
        Request::Copy { path: b"/a/b/c" },
        Request::Ext {
            name: b"f",
            opts: 0,
            key: b"k",
            value: b"123456789",
        },
    ] {
        let wire = enc(&req);
        let value_len = matches!(req, Request::Ext { .. }).then_some(9);
        assert_eq!(
            decode(&wire, &limits),
            Err(DecodeError {
                consumed: wire.len(),
                close: false,
                reply: Some(FAIL),
                value_len,
                then_elements: 0,
            }),
            "{}",
            req.name()
        );
    }
    // Lists: an element too long is refused, and the rest of the list is to be skipped
    // (its sizes have not all arrived: `then_elements` more after `consumed` bytes).
    let wire = enc(&Request::Misc {
        name: b"putlist",
        opts: 0,
        args: vec![b"k", b"123456789", b"k2", b"v2"],
    });
    // [magic cmd][nsiz][opts][count] putlist [1]k [4] — the element's 9 bytes follow.
    let head = 2 + 12 + 7 + 5 + 4;
    let four = Limits {
        max_args: 4,
        ..limits
    };
    assert_eq!(
        decode(&wire[..head], &four),
        Err(DecodeError {
            consumed: head + 9,
            close: false,
            reply: Some(FAIL),
            value_len: Some(9),
            then_elements: 2,
        })
    );
    let e = decode(
        &enc(&Request::Mget {
            keys: vec![b"a", b"12345"],
        }),
        &limits,
    )
    .unwrap_err();
    assert_eq!(
        (e.close, e.reply, e.value_len, e.then_elements),
        (false, Some(FAIL), None, 0)
    );
    // Too many elements, or too many bytes in all: hang up.
    let e = decode(
        &enc(&Request::Mget {
            keys: vec![b"a", b"b", b"c"],
        }),
        &limits,
    )
    .unwrap_err();
    assert!(e.close && e.reply.is_none());
    let big = [b'x'; 8];
    let wire = enc(&Request::Misc {
        name: b"putlist",
        opts: 0,
        args: vec![&big, &big],
    });
    let small = Limits {
        max_frame: 30,
        ..limits
    };
    assert!(decode(&wire, &small).unwrap_err().close);
    assert!(matches!(
        decode(&wire, &limits),
        Ok(Decoded::Complete { .. })
    ));
}

#[test]
fn reals_pack_like_tyrant() {
    assert_eq!(pack_double(1.5), (1, 500_000_000_000));
    assert_eq!(pack_double(-1.25), (-1, -250_000_000_000));
    assert_eq!(pack_double(0.0), (0, 0));
    assert_eq!(pack_double(f64::INFINITY), (i64::MAX, 0));
    assert_eq!(pack_double(f64::NEG_INFINITY), (i64::MIN, 0));
    assert_eq!(pack_double(f64::NAN), (i64::MIN, i64::MIN));
    assert_eq!(unpack_double(3, 250_000_000_000), 3.25);
    assert_eq!(unpack_double(-3, -250_000_000_000), -3.25);
    assert!(unpack_double(i64::MIN, i64::MIN).is_nan());
    assert_eq!(unpack_double(i64::MAX, 7), f64::INFINITY);
    assert_eq!(unpack_double(i64::MIN, 0), f64::NEG_INFINITY);
    for x in [0.1, 2.75, -1000.001, 123456.5] {
        let (i, f) = pack_double(x);
        assert!((unpack_double(i, f) - x).abs() < 1e-9, "{x}");
    }
}

#[test]
fn replies_encode_and_decode() {
    let cases: Vec<(u8, Vec<u8>, Reply)> = vec![
        (cmd::PUT, vec![0], Reply::Code(0)),
        (cmd::PUTKEEP, vec![1], Reply::Code(1)),
        (cmd::PUTNR, vec![], Reply::None),
        (
            cmd::GET,
            {
                let mut v = Vec::new();
                reply_value(&mut v, b"val\0");
                v
            },
            Reply::Value(b"val\0".to_vec()),
        ),
        (cmd::GET, vec![1], Reply::Code(1)),
        (
            cmd::VSIZ,
            {
                let mut v = Vec::new();
                reply_i32(&mut v, 42);
                v
            },
            Reply::Int(42),
        ),
        (
            cmd::ADDINT,
            {
                let mut v = Vec::new();
                reply_i32(&mut v, -7);
                v
            },
            Reply::Int(-7),
        ),
        (
            cmd::ADDDOUBLE,
            {
                let mut v = Vec::new();
                reply_double(&mut v, 2.5);
                v
            },
            Reply::Double(2.5),
        ),
        (
            cmd::RNUM,
            {
                let mut v = Vec::new();
                reply_u64(&mut v, 1 << 40);
                v
            },
            Reply::U64(1 << 40),
        ),
        (
            cmd::FWMKEYS,
            {
                let mut v = Vec::new();
                reply_list(&mut v, [&b"a"[..], b"bc"]);
                v
            },
            Reply::List(vec![b"a".to_vec(), b"bc".to_vec()]),
        ),
        (
            cmd::MISC,
            {
                let mut v = Vec::new();
                reply_failure(&mut v, cmd::MISC);
                v
            },
            Reply::Code(1),
        ),
        (
            cmd::MGET,
            {
                let mut v = Vec::new();
                reply_pairs(&mut v, [(&b"k"[..], &b"v"[..]), (b"", b"")]);
                v
            },
            Reply::Pairs(vec![(b"k".to_vec(), b"v".to_vec()), (vec![], vec![])]),
        ),
        (
            cmd::STAT,
            {
                let mut v = Vec::new();
                reply_stat(&mut v, b"rnum\t1\n");
                v
            },
            Reply::Stat("rnum\t1\n".into()),
        ),
        (cmd::REPL, vec![0, 0, 0, 9], Reply::Sid(9)),
    ];
    for (c, wire, want) in cases {
        for cut in 0..wire.len() {
            assert_eq!(
                decode_reply(c, &wire[..cut]),
                Ok(DecodedReply::Incomplete),
                "{c:#x} cut {cut}"
            );
        }
        let mut piped = wire.clone();
        piped.extend_from_slice(b"\x00trailing");
        assert_eq!(
            decode_reply(c, &piped),
            Ok(DecodedReply::Complete {
                reply: want,
                consumed: wire.len()
            }),
            "{c:#x}"
        );
    }
    // Exact bytes of the common shapes.
    let mut v = Vec::new();
    reply_value(&mut v, b"xy");
    assert_eq!(v, b"\0\0\0\0\x02xy");
    let mut v = Vec::new();
    reply_double(&mut v, -0.5);
    assert_eq!(&v[..9], &[0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&v[9..], &(-500_000_000_000i64).to_be_bytes());
    let mut v = Vec::new();
    reply_failure(&mut v, cmd::PUTNR);
    reply_failure(&mut v, cmd::GET);
    reply_failure(&mut v, cmd::MGET);
    assert_eq!(v, [1, 1, 0, 0, 0, 0]);
    assert!(decode_reply(0x01, b"\0").is_err());
    assert!(decode_reply(cmd::GET, b"\0\xff\xff\xff\xff").is_err());
    // A huge announced count allocates nothing until the elements arrive.
    assert_eq!(
        decode_reply(cmd::FWMKEYS, b"\0\x7f\xff\xff\xff\0\0\0\0"),
        Ok(DecodedReply::Incomplete)
    );
}

/// An owned description of a request, for property tests.
#[derive(Clone, Debug)]
struct Owned {
    c: u8,
    a: Vec<u8>,
    b: Vec<u8>,
    n: Vec<u8>,
    list: Vec<Vec<u8>>,
    i32: i32,
    u32: u32,
    i64s: (i64, i64),
    u64: u64,
}

impl Owned {
    fn request(&self) -> Request<'_> {
        let (a, b, n) = (&self.a[..], &self.b[..], &self.n[..]);
        let w = self.i32.max(0);
        let list: Vec<&[u8]> = self.list.iter().map(|v| &v[..]).collect();
        match self.c {
            cmd::PUT => Request::Put { key: a, value: b },
            cmd::PUTKEEP => Request::PutKeep { key: a, value: b },
            cmd::PUTCAT => Request::PutCat { key: a, value: b },
            cmd::PUTSHL => Request::PutShl {
                key: a,
                value: b,
                width: w,
            },
            cmd::PUTNR => Request::PutNr { key: a, value: b },
            cmd::OUT => Request::Out { key: a },
            cmd::GET => Request::Get { key: a },
            cmd::MGET => Request::Mget { keys: list },
            cmd::VSIZ => Request::Vsiz { key: a },
            cmd::ITERINIT => Request::IterInit,
            cmd::ITERNEXT => Request::IterNext,
            cmd::FWMKEYS => Request::Fwmkeys {
                prefix: a,
                max: self.i32,
            },
            cmd::ADDINT => Request::AddInt {
                key: a,
                num: self.i32,
            },
            cmd::ADDDOUBLE => Request::AddDouble {
                key: a,
                integ: self.i64s.0,
                fract: self.i64s.1,
            },
            cmd::EXT => Request::Ext {
                name: n,
                opts: self.u32,
                key: a,
                value: b,
            },
            cmd::SYNC => Request::Sync,
            cmd::OPTIMIZE => Request::Optimize { params: a },
            cmd::VANISH => Request::Vanish,
            cmd::COPY => Request::Copy { path: a },
            cmd::RESTORE => Request::Restore {
                path: a,
                ts: self.u64,
                opts: self.u32,
            },
            cmd::SETMST => Request::SetMst {
                host: a,
                port: w,
                ts: self.u64,
                opts: self.u32,
            },
            cmd::RNUM => Request::Rnum,
            cmd::SIZE => Request::Size,
            cmd::STAT => Request::Stat,
            cmd::MISC => Request::Misc {
                name: n,
                opts: self.u32,
                args: list,
            },
            _ => Request::Repl {
                ts: self.u64,
                sid: self.u32,
            },
        }
    }
}

const CMDS: [u8; 26] = [
    cmd::PUT,
    cmd::PUTKEEP,
    cmd::PUTCAT,
    cmd::PUTSHL,
    cmd::PUTNR,
    cmd::OUT,
    cmd::GET,
    cmd::MGET,
    cmd::VSIZ,
    cmd::ITERINIT,
    cmd::ITERNEXT,
    cmd::FWMKEYS,
    cmd::ADDINT,
    cmd::ADDDOUBLE,
    cmd::EXT,
    cmd::SYNC,
    cmd::OPTIMIZE,
    cmd::VANISH,
    cmd::COPY,
    cmd::RESTORE,
    cmd::SETMST,
    cmd::RNUM,
    cmd::SIZE,
    cmd::STAT,
    cmd::MISC,
    cmd::REPL,
];

fn owned() -> impl Strategy<Value = Owned> {
    let bytes = || proptest::collection::vec(any::<u8>(), 0..40);
    (
        proptest::sample::select(&CMDS[..]),
        bytes(),
        bytes(),
        proptest::collection::vec(any::<u8>(), 0..12),
        proptest::collection::vec(bytes(), 0..6),
        any::<i32>(),
        any::<u32>(),
        any::<(i64, i64)>(),
        any::<u64>(),
    )
        .prop_map(|(c, a, b, n, list, i32, u32, i64s, u64)| Owned {
            c,
            a,
            b,
            n,
            list,
            i32,
            u32,
            i64s,
            u64,
        })
}

proptest! {
    #[test]
    fn arbitrary_requests_round_trip(reqs in proptest::collection::vec(owned(), 1..5)) {
        let mut wire = Vec::new();
        for r in &reqs {
            encode_request(&r.request(), &mut wire);
        }
        let mut pos = 0;
        for r in &reqs {
            match decode(&wire[pos..], &Limits::default()) {
                Ok(Decoded::Complete { request, consumed }) => {
                    prop_assert_eq!(request, r.request());
                    pos += consumed;
                }
                other => prop_assert!(false, "{:?}", other),
            }
        }
        prop_assert_eq!(pos, wire.len());
    }

    #[test]
    fn arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut buf = buf;
        if let Some(b) = buf.first_mut() {
            *b = MAGIC;
        }
        let limits = Limits { max_key: 16, max_value: 32, max_args: 4, max_frame: 100 };
        match decode(&buf, &limits) {
            Ok(Decoded::Complete { consumed, request }) => {
                prop_assert!(consumed >= 2 && consumed <= buf.len());
                let mut again = Vec::new();
                encode_request(&request, &mut again);
                prop_assert_eq!(&again[..], &buf[..consumed]);
            }
            Ok(Decoded::Incomplete) => {}
            Err(e) => prop_assert!(e.close || e.consumed > 2),
        }
        for &c in &CMDS {
            let _ = decode_reply(c, &buf);
        }
    }
}
