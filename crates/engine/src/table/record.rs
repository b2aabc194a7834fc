//! A table record's columns and their two byte forms.
//!
//! **Stored form** (the value of a record in the records keyspace):
//!
//! ```text
//! 0x01                          format
//! { varint nlen, name, varint vlen, value }   each column, in the record's order
//! ```
//!
//! Varints are the log's (7 bits a byte, low first). Names are unique within a record and
//! never empty (the empty name stands for the primary key in queries, as in Tokyo Cabinet).
//! [`decode`] checks every length against what is left and never panics: anything else is
//! [`Error::Corrupt`].
//!
//! **Wire form** (what the plain key/value interface gives and takes for a table, as Tokyo
//! Cabinet's `tcadb` does): `name1\0value1\0name2\0value2…`, no trailing NUL; the empty value
//! is a record of no columns. A wire form with an odd number of fields or an empty name is
//! refused ([`Error::InvalidParam`]) and nothing is stored.

use crate::error::{Error, Result};
use crate::log::format::{get_varint, put_varint};

/// The stored form's format byte.
pub const FORMAT: u8 = 1;

/// A record's columns, in order; names unique and not empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Columns(pub Vec<(Vec<u8>, Vec<u8>)>);

impl Columns {
    pub fn new() -> Columns {
        Columns(Vec::new())
    }

    /// Columns from pairs; a later pair of a name replaces the earlier one's value in its place
    /// (Tokyo Cabinet's map). An empty name is refused.
    pub fn from_pairs<N: AsRef<[u8]>, V: AsRef<[u8]>>(pairs: &[(N, V)]) -> Result<Columns> {
        let mut c = Columns::new();
        for (n, v) in pairs {
            c.set(n.as_ref(), v.as_ref())?;
        }
        Ok(c)
    }

    /// The value of column `name`.
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }

    /// Set column `name` (in its place when present, else at the end).
    pub fn set(&mut self, name: &[u8], value: &[u8]) -> Result<()> {
        if name.is_empty() {
            return Err(Error::InvalidParam(
                "a column with an empty name (the empty name stands for the primary key)".into(),
            ));
        }
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => *v = value.to_vec(),
            None => self.0.push((name.to_vec(), value.to_vec())),
        }
        Ok(())
    }

    /// Merge `other` into these columns as Tokyo Cabinet's `putcat` does (`tctdbputimpl`,
    /// `tcmapputkeep`): its columns these do not have are added at the end; a column these
    /// have keeps its value.
    pub fn merge(&mut self, other: &Columns) {
        for (n, v) in &other.0 {
            if !self.0.iter().any(|(x, _)| x == n) {
                self.0.push((n.clone(), v.clone()));
            }
        }
    }

    /// Only the columns named in `names` (in the record's order).
    pub fn only(&self, names: &[&[u8]]) -> Columns {
        Columns(
            self.0
                .iter()
                .filter(|(n, _)| names.contains(&n.as_slice()))
                .cloned()
                .collect(),
        )
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.0.iter().map(|(n, v)| (n.as_slice(), v.as_slice()))
    }

    /// The stored form.
    pub fn encode(&self) -> Vec<u8> {
        let len: usize = self.0.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
        let mut out = Vec::with_capacity(1 + len);
        out.push(FORMAT);
        for (n, v) in &self.0 {
            put_varint(&mut out, n.len() as u64);
            out.extend_from_slice(n);
            put_varint(&mut out, v.len() as u64);
            out.extend_from_slice(v);
        }
        out
    }

    /// The wire form `n1\0v1\0n2\0v2…`.
    pub fn to_wire(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_wire(&mut out);
        out
    }

    /// Append the wire form to `out`.
    pub fn write_wire(&self, out: &mut Vec<u8>) {
        for (i, (n, v)) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(0);
            }
            out.extend_from_slice(n);
            out.push(0);
            out.extend_from_slice(v);
        }
    }

    /// Columns from the wire form (see the module's documentation).
    pub fn from_wire(wire: &[u8]) -> Result<Columns> {
        let mut c = Columns::new();
        if wire.is_empty() {
            return Ok(c);
        }
        let fields: Vec<&[u8]> = wire.split(|&b| b == 0).collect();
        if !fields.len().is_multiple_of(2) {
            return Err(Error::InvalidParam(format!(
                "a table record is name\\0value pairs separated by NUL bytes: this value has {} \
                 fields, an odd number",
                fields.len()
            )));
        }
        for pair in fields.chunks_exact(2) {
            c.set(pair[0], pair[1])?;
        }
        Ok(c)
    }
}

/// Columns from their stored form.
pub fn decode(b: &[u8]) -> Result<Columns> {
    let mut c = Columns::new();
    for_each_column(b, &mut |n, v| {
        c.0.push((n.to_vec(), v.to_vec()));
        true
    })?;
    Ok(c)
}

/// Show each column of a stored form to `f` until it returns false, without copying.
pub fn for_each_column(b: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
    let bad = |what: &str| Error::Corrupt(format!("a table record {what}"));
    match b.first() {
        Some(&FORMAT) => {}
        Some(x) => return Err(bad(&format!("of unknown format {x}"))),
        None => return Err(bad("of no bytes")),
    }
    let mut pos = 1;
    let take = |pos: &mut usize| -> Result<&[u8]> {
        let len = get_varint(b, pos).ok_or_else(|| bad("with a cut length"))?;
        let len = usize::try_from(len).map_err(|_| bad("with a length too large"))?;
        let end = pos
            .checked_add(len)
            .filter(|&e| e <= b.len())
            .ok_or_else(|| bad("with a length past its end"))?;
        let s = &b[*pos..end];
        *pos = end;
        Ok(s)
    };
    while pos < b.len() {
        let n = take(&mut pos)?;
        let v = take(&mut pos)?;
        if n.is_empty() {
            return Err(bad("with a column of no name"));
        }
        if !f(n, v) {
            break;
        }
    }
    Ok(())
}

/// The wire form of a stored form, appended to `out`.
pub fn stored_to_wire(b: &[u8], out: &mut Vec<u8>) -> Result<()> {
    let mut first = true;
    for_each_column(b, &mut |n, v| {
        if !first {
            out.push(0);
        }
        first = false;
        out.extend_from_slice(n);
        out.push(0);
        out.extend_from_slice(v);
        true
    })
}

/// The value of column `name` in a stored form.
pub fn column_of(b: &[u8], name: &[u8]) -> Result<Option<Vec<u8>>> {
    let mut out = None;
    for_each_column(b, &mut |n, v| {
        if n == name {
            out = Some(v.to_vec());
            false
        } else {
            true
        }
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_form_round_trips_and_keeps_order() {
        let c = Columns::from_pairs(&[("b", "2"), ("a", ""), ("b", "3"), ("\0x", "v\0w")]).unwrap();
        assert_eq!(
            c.0,
            vec![
                (b"b".to_vec(), b"3".to_vec()),
                (b"a".to_vec(), b"".to_vec()),
                (b"\0x".to_vec(), b"v\0w".to_vec())
            ]
        );
        let e = c.encode();
        assert_eq!(e[0], FORMAT);
        assert_eq!(decode(&e).unwrap(), c);
        assert_eq!(column_of(&e, b"a").unwrap(), Some(Vec::new()));
        assert_eq!(column_of(&e, b"z").unwrap(), None);
        assert_eq!(decode(&Columns::new().encode()).unwrap(), Columns::new());
    }

    #[test]
    fn the_wire_form_round_trips_and_bad_ones_are_refused() {
        let c = Columns::from_wire(b"name\0alice\0age\x0030").unwrap();
        assert_eq!(c.get(b"age"), Some(&b"30"[..]));
        assert_eq!(c.to_wire(), b"name\0alice\0age\x0030");
        let mut w = Vec::new();
        stored_to_wire(&c.encode(), &mut w).unwrap();
        assert_eq!(w, c.to_wire());
        assert!(Columns::from_wire(b"").unwrap().is_empty());
        assert_eq!(
            Columns::from_wire(b"a\0").unwrap().get(b"a"),
            Some(&b""[..])
        );
        for bad in [&b"a"[..], b"a\0b\0c", b"\0v"] {
            assert!(
                matches!(Columns::from_wire(bad), Err(Error::InvalidParam(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn damaged_stored_forms_are_errors_never_panics() {
        let good = Columns::from_pairs(&[("name", "alice"), ("age", "30")])
            .unwrap()
            .encode();
        // Every cut and every single-byte change decodes or fails cleanly.
        for cut in 0..good.len() {
            let _ = decode(&good[..cut]);
        }
        for i in 0..good.len() {
            for x in [0u8, 0x7f, 0x80, 0xff] {
                let mut b = good.clone();
                b[i] = x;
                let _ = decode(&b);
            }
        }
        assert!(decode(&[]).is_err());
        assert!(decode(&[2]).is_err());
        assert!(decode(&[1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]).is_err());
        assert!(decode(&[1, 0, 0]).is_err(), "a column of no name");
    }
}
