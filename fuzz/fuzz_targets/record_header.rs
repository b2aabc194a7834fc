#![no_main]
//! Record and segment-header parsing never panics and never reads past the input; and every
//! record the encoders write (puts, deletes and clears, with a dup, a keyspace, both or neither:
//! both forms of the extension) parses back to the fields it was written with, also inside a
//! batch frame whose records name different keyspaces.
use kura_engine::hash::format::{self, PutFields};
use libfuzzer_sys::fuzz_target;

/// Walk a batch frame's sub-records the way recovery does.
fn walk_batch(rec: &[u8], h: &format::Header) -> Vec<format::Header> {
    let mut subs = Vec::new();
    let mut pos = h.key_off;
    for _ in 0..h.count.min(1 << 16) {
        let Some(sub) = rec.get(pos..).and_then(format::parse_header) else {
            break;
        };
        pos = pos.saturating_add(sub.len);
        subs.push(sub);
    }
    subs
}

fn parse_any(data: &[u8]) {
    let _ = format::parse_seg_header(data);
    if let Some(h) = format::parse_header(data) {
        if h.len <= data.len() {
            let rec = &data[..h.len];
            let _ = format::verify(rec, 7);
            let _ = format::codec(&h);
            if h.typ == format::T_BATCH {
                walk_batch(rec, &h);
            }
        }
    }
}

/// A little reader of fuzz bytes: numbers of every size, biased to the edges.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
        self.0 = rest;
        b
    }
    fn num(&mut self) -> u64 {
        match self.byte() % 6 {
            0 => 0,
            1 => u64::from(self.byte()),
            2 => u64::MAX - u64::from(self.byte()),
            3 => 1 << (self.byte() % 64),
            _ => {
                let mut v = 0u64;
                for _ in 0..8 {
                    v = v << 8 | u64::from(self.byte());
                }
                v
            }
        }
    }
    fn slice(&mut self, max: usize) -> Vec<u8> {
        let n = (self.byte() as usize % (max + 1)).min(self.0.len());
        let (s, rest) = self.0.split_at(n);
        self.0 = rest;
        s.to_vec()
    }
}

/// Encode one record from the input; check it parses back. Returns it sealed with `seed`.
fn one(b: &mut Bytes<'_>, seed: u32) -> Vec<u8> {
    let ks = if b.byte().is_multiple_of(2) {
        0
    } else {
        b.num()
    };
    let mut out = Vec::new();
    match b.byte() % 3 {
        0 => {
            let f = PutFields {
                flags: b.num() as u32,
                expires: b.num(),
                seq: b.num(),
                compression: b.byte() % 4,
                raw_len: b.num(),
                version: b.num(),
                dup: b.num(),
            };
            let key = b.slice(40);
            let value = b.slice(80);
            let n = format::encode_put_in(&mut out, ks, &key, &value, &f);
            assert_eq!(n, out.len());
            // The header alone, as the append path writes it, is the record's first bytes.
            let hb = format::HeaderBuf::put_in(ks, key.len(), value.len(), &f);
            assert_eq!(hb.as_slice(), &out[..hb.as_slice().len()]);
            let h = format::parse_header(&out).expect("an encoded put parses");
            let mut want = f;
            if want.compression == 0 {
                want.raw_len = 0;
            }
            assert_eq!(
                (h.typ, h.fields, h.keyspace, h.klen, h.vlen, h.len),
                (format::T_PUT, want, ks, key.len(), value.len(), out.len())
            );
            assert_eq!(&out[h.key_off..h.key_off + h.klen], &key[..]);
            assert_eq!(&out[h.value_off()..], &value[..]);
            assert!(format::is_put_of(&h, &out, &key));
        }
        1 => {
            let (seq, dup) = (b.num(), b.num());
            let key = b.slice(40);
            format::encode_delete_in(&mut out, ks, &key, seq, dup);
            let hb = format::HeaderBuf::delete_in(ks, key.len(), seq, dup);
            assert_eq!(hb.as_slice(), &out[..hb.as_slice().len()]);
            let h = format::parse_header(&out).expect("an encoded delete parses");
            assert_eq!(
                (h.typ, h.fields.seq, h.fields.dup, h.keyspace, h.klen, h.len),
                (format::T_DELETE, seq, dup, ks, key.len(), out.len())
            );
        }
        _ => {
            let (id, lanes) = (b.num(), b.byte() as usize);
            format::encode_clear_in(&mut out, ks, id, lanes);
            let h = format::parse_header(&out).expect("an encoded clear parses");
            assert_eq!(
                (h.typ, h.fields.seq, h.count, h.keyspace, h.len),
                (format::T_CLEAR, id, lanes as u64, ks, out.len())
            );
        }
    }
    format::seal(&mut out, seed);
    assert!(format::verify(&out, seed), "a sealed record verifies");
    out
}

fuzz_target!(|data: &[u8]| {
    parse_any(data);
    if data.first().is_some_and(|b| b & 1 == 1) {
        // Structured: records from the input, alone and framed as a batch.
        let mut b = Bytes(&data[1..]);
        let seed = b.num() as u32;
        let inner = format::inner_seed(seed);
        let mut body = Vec::new();
        let mut records = Vec::new();
        for _ in 0..(b.byte() % 8) {
            let r = one(&mut b, inner);
            body.extend_from_slice(&r);
            records.push(r);
        }
        let mut frame = Vec::new();
        format::encode_batch_header(&mut frame, body.len(), records.len());
        frame.extend_from_slice(&body);
        format::seal(&mut frame, seed);
        assert!(format::verify(&frame, seed));
        let h = format::parse_header(&frame).expect("a batch frame parses");
        assert_eq!(
            (h.typ, h.count, h.len),
            (format::T_BATCH, records.len() as u64, frame.len())
        );
        let subs = walk_batch(&frame, &h);
        assert_eq!(
            subs.len(),
            records.len(),
            "every record of the batch is found"
        );
        for (s, r) in subs.iter().zip(&records) {
            assert_eq!(s.len, r.len());
            assert_eq!(Some(*s), format::parse_header(r));
            assert!(format::verify(r, inner));
        }
        // Any damage to a sealed record is seen (or it no longer parses).
        if !frame.is_empty() {
            let at = b.byte() as usize % frame.len();
            let flip = b.byte() | 1;
            frame[at] ^= flip;
            let _ = format::parse_header(&frame)
                .map(|h| format::verify(&frame[..h.len.min(frame.len())], seed));
        }
    }
});
