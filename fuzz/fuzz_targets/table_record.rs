#![no_main]
//! A table record's stored form and wire form, and the index entries of a value: decoding
//! never panics; what decodes encodes to a form that decodes the same; every entry a value
//! makes decodes to its primary key.
use kura_engine::table::{record, terms, Columns, IndexType};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = record::decode(data) {
        assert_eq!(record::decode(&c.encode()).unwrap(), c);
        let mut w = Vec::new();
        record::stored_to_wire(data, &mut w).unwrap();
        assert_eq!(w, c.to_wire());
    }
    if let Ok(c) = Columns::from_wire(data) {
        let again = Columns::from_wire(&c.to_wire()).expect("a written wire form parses");
        assert_eq!(again, c);
        assert_eq!(record::decode(&c.encode()).unwrap(), c);
    }
    let (pk, value) = data.split_at(data.len() / 3);
    for typ in [
        IndexType::Lexical,
        IndexType::Decimal,
        IndexType::Token,
        IndexType::QGram,
    ] {
        let mut out = std::collections::BTreeMap::new();
        terms::entries_of(typ, pk, value, &mut out);
        for (k, v) in &out {
            let e = terms::decode_entry(typ, k, v).expect("an entry decodes");
            assert_eq!(e.pk, pk);
        }
        let _ = terms::decode_entry(typ, data, value);
    }
});
