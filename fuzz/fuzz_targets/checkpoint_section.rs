#![no_main]
//! Index checkpoint sections: any bytes decode without panicking, and whatever decodes intact
//! is in tag order and points only into known segments; any slots round-trip through `encode`.
use kura_engine::hash::ckpt;
use kura_engine::hash::index::Slot;
use libfuzzer_sys::fuzz_target;

const KNOWN: [u32; 4] = [1, 2, 7, 1 << 20];

fuzz_target!(|data: &[u8]| {
    if let Some((_, n, mut slots)) = ckpt::decode(data, 0, &KNOWN) {
        let mut prev = 0u32;
        let mut got = 0;
        for s in slots.by_ref() {
            assert!(s.tag >= prev, "out of tag order");
            assert!(KNOWN.contains(&s.seg), "unknown segment");
            prev = s.tag;
            got += 1;
        }
        assert!(got <= n);
        if slots.intact() {
            assert_eq!(got, n);
        }
    }
    // The same bytes read as slots (12 bytes each) round-trip.
    let mut v: Vec<Slot> = data
        .chunks_exact(12)
        .map(|c| Slot {
            tag: u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
            seg: KNOWN[c[4] as usize % KNOWN.len()],
            off: u32::from_le_bytes([c[8], c[9], c[10], c[11]]),
        })
        .collect();
    let mut want = v.clone();
    want.sort_by_key(|s| (s.tag, s.seg, s.off));
    let mut out = Vec::new();
    ckpt::encode(5, &mut v, &mut ckpt::Scratch::default(), &mut out);
    let (seq, n, mut slots) = ckpt::decode(&out, 0, &KNOWN).expect("own encoding decodes");
    let mut got: Vec<Slot> = slots.by_ref().collect();
    assert!(slots.intact() && seq == 5 && n == want.len());
    got.sort_by_key(|s| (s.tag, s.seg, s.off));
    assert_eq!(got, want);
});
