#![no_main]
//! The update log's record decoder, and Kura's replication stream frames carrying records,
//! never panic: the input is sealed with a correct length and crc so the body parsers run.
use kura_engine::ulog::record;
use kura_proto::repl as wire;
use libfuzzer_sys::fuzz_target;

fn walk(buf: &[u8]) {
    let mut at = 0;
    while at < buf.len() {
        match record::decode(&buf[at..]) {
            Ok(record::Next::Record(r, n)) => {
                if let record::Op::Batch { body, .. } = r.op {
                    for op in record::batch_ops(body) {
                        let _ = op;
                    }
                }
                if let record::Op::Values { body, .. } = r.op {
                    for v in record::values_of(body) {
                        let _ = v;
                    }
                }
                at += n;
            }
            _ => break,
        }
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
});
