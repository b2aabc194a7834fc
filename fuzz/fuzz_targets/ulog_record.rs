#![no_main]
//! The update log's record decoder, and Kura's replication stream frames carrying records,
//! never panic: the input is sealed with a correct length and crc so the body parsers run.
//! Records the encoder writes from the input — keyspace (`In`) records of every operation,
//! batches whose elements are of several keyspaces, a keyspace's own batch — decode to the
//! operations they were made of.
use kura_engine::ulog::record::{self, Op};
use kura_proto::repl as wire;
use libfuzzer_sys::fuzz_target;

/// Walk one decoded operation the way replay does (an `In`'s operation, a batch's elements).
fn walk_op(op: &Op<'_>) {
    let (space, op) = op.space();
    if let Some(s) = space {
        let _ = s.text();
    }
    let _ = op.key();
    match op {
        Op::Batch { body, .. } => {
            // A broken element ends the iteration (batch_ops stops after an error).
            for op in record::batch_ops(body).flatten() {
                walk_op(&op);
            }
        }
        Op::Values { body, .. } => {
            for v in record::values_of(body) {
                let _ = v;
            }
        }
        Op::In { .. } => panic!("an In inside an In decoded"),
        _ => {}
    }
}

fn walk(buf: &[u8]) {
    let mut at = 0;
    while at < buf.len() {
        match record::decode(&buf[at..]) {
            Ok(record::Next::Record(r, n)) => {
                walk_op(&r.op);
                at += n;
            }
            _ => break,
        }
    }
}

struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    fn byte(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
        self.0 = rest;
        b
    }
    fn u64(&mut self) -> u64 {
        let mut v = 0u64;
        for _ in 0..(self.byte() % 9) {
            v = v << 8 | u64::from(self.byte());
        }
        v
    }
    fn slice(&mut self, max: usize) -> &'a [u8] {
        let n = (self.byte() as usize % (max + 1)).min(self.0.len());
        let (s, rest) = self.0.split_at(n);
        self.0 = rest;
        s
    }
}

/// A put or remove of the database's own keyspace.
fn plain<'a>(b: &mut Bytes<'a>) -> Op<'a> {
    if b.byte().is_multiple_of(2) {
        Op::Put {
            key: b.slice(24),
            value: b.slice(48),
            flags: b.u64() as u32,
            expires: b.u64(),
        }
    } else {
        Op::Remove { key: b.slice(24) }
    }
}

/// A batch element: a put or remove, in the database or in a keyspace.
fn element<'a>(b: &mut Bytes<'a>) -> Op<'a> {
    if b.byte().is_multiple_of(2) {
        plain(b)
    } else {
        Op::In {
            name: b.slice(12),
            params: b.slice(12),
            op: Box::new(plain(b)),
        }
    }
}

/// Build a record's operation from the input; `bodies` keeps the batch bodies it builds.
fn build<'a>(b: &mut Bytes<'a>, bodies: &mut Vec<Vec<u8>>) -> (Op<'a>, Vec<Op<'a>>) {
    // An element may itself be `In` (then `in_space` leaves it as it is: no `In` in an `In`).
    let op = match b.byte() % 6 {
        0 => plain(b),
        1 => Op::Touch {
            key: b.slice(24),
            expires: b.u64(),
        },
        2 => Op::Vanish,
        3 => Op::Optimize {
            params: b.slice(24),
        },
        4 => element(b),
        _ => {
            let n = b.byte() % 6;
            let elems: Vec<Op<'a>> = (0..n).map(|_| element(b)).collect();
            let mut body = Vec::new();
            for e in &elems {
                record::push_batch_op(&mut body, e);
            }
            bodies.push(body);
            return (Op::Vanish, elems);
        }
    };
    (op, Vec::new())
}

/// What a record should read back as: whether it is `In`, its keyspace (name, parameters) and
/// its key.
type Expected = (bool, Option<(Vec<u8>, Vec<u8>)>, Vec<u8>);

fn structured(data: &[u8]) {
    let mut b = Bytes(data);
    let mut out = Vec::new();
    let mut want: Vec<Expected> = Vec::new();
    for i in 0..(b.byte() % 6) {
        let mut bodies = Vec::new();
        let (op, elems) = build(&mut b, &mut bodies);
        let in_space = !b.byte().is_multiple_of(2);
        let (name, params) = (b.slice(12), b.slice(12));
        let body;
        let op = if let Some(bd) = bodies.pop() {
            body = bd;
            // A batch across keyspaces, or (in_space) a keyspace's own batch of plain ops.
            let plain_only = elems.iter().all(|e| !matches!(e, Op::In { .. }));
            let batch = Op::Batch {
                count: elems.len() as u32,
                body: &body,
            };
            let got: Vec<Op<'_>> = record::batch_ops(&body)
                .collect::<Result<_, _>>()
                .expect("a built batch body decodes");
            assert_eq!(got, elems, "batch elements round-trip");
            if in_space && plain_only {
                Op::In {
                    name,
                    params,
                    op: Box::new(batch),
                }
            } else {
                batch
            }
        } else if in_space && !matches!(op, Op::In { .. }) {
            Op::In {
                name,
                params,
                op: Box::new(op),
            }
        } else {
            op
        };
        let start = out.len();
        let ts = b.u64();
        record::encode(&mut out, ts, i as u32, ts, &op);
        match record::decode(&out[start..]).expect("an encoded record decodes") {
            record::Next::Record(r, n) => {
                assert_eq!(n, out.len() - start);
                assert_eq!((r.ts, r.origin_sid, r.origin_ts), (ts, i as u32, ts));
                assert_eq!(r.op, op, "the record decodes to what was encoded");
                walk_op(&r.op);
            }
            _ => panic!("a whole record is incomplete"),
        }
        want.push((
            matches!(op, Op::In { .. }),
            op.space().0.map(|s| (s.name.to_vec(), s.params.to_vec())),
            op.key().unwrap_or_default().to_vec(),
        ));
    }
    // The records read back in order from one buffer, and a cut one is incomplete or refused.
    let mut at = 0;
    for (is_in, space, key) in &want {
        let record::Next::Record(r, n) = record::decode(&out[at..]).expect("decode") else {
            panic!("incomplete");
        };
        assert_eq!(matches!(r.op, Op::In { .. }), *is_in);
        assert_eq!(
            r.op.space().0.map(|s| (s.name.to_vec(), s.params.to_vec())),
            *space
        );
        assert_eq!(r.op.key().unwrap_or_default(), &key[..]);
        at += n;
    }
    assert_eq!(at, out.len());
    if !out.is_empty() {
        let cut = b.u64() as usize % out.len();
        walk(&out[..cut]);
    }
}

fuzz_target!(|data: &[u8]| {
    walk(data);
    let mut sealed = vec![0u8; 8];
    sealed.extend_from_slice(data);
    record::seal(&mut sealed, 0);
    walk(&sealed);
    let mut at = 0;
    while let Ok(Some((tag, payload, n))) = wire::decode_frame(&data[at..]) {
        if tag == wire::RECORD {
            walk(payload);
        }
        at += n;
    }
    structured(data);
});
