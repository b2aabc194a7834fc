//! Tokyo Cabinet's and Tokyo Tyrant's record operations, each with the meaning it has there. Provided for every
//! [`Store`] (built on [`Store::accept`]), so a kind implements none of them and every kind
//! behaves the same.

use super::*;
use crate::error::{Error, Result};

/// Tokyo Cabinet's (and Tyrant's) operations on any [`Store`]: `use kura_engine::TokyoOps` to call them.
pub trait TokyoOps: Store {
    /// Append to the value, creating the record when absent (Tyrant putcat). Flags and
    /// expiration of an existing record are kept.
    /// On a table (`.kt`), `value` is a wire form whose columns are merged into the record
    /// (Tokyo Cabinet's `tctdbputcat`), as Tyrant's putcat of a table does.
    fn putcat(&self, key: &[u8], value: &[u8]) -> Result<Meta> {
        if let Some(t) = self.table() {
            let cols = crate::table::Columns::from_wire(value)?;
            t.put_row(key, &cols, crate::table::PutMode::Cat)?;
            return self
                .get(key)?
                .map(|r| r.meta)
                .ok_or_else(|| Error::Corrupt("putcat produced no record".into()));
        }
        concat_creating(self, key, value, false)
    }

    /// Prepend to the value, creating the record when absent.
    fn prepend(&self, key: &[u8], value: &[u8]) -> Result<Meta> {
        concat_creating(self, key, value, true)
    }

    /// Tokyo Tyrant's putshl: append `value` to the record and keep only its last `width`
    /// bytes. An absent record is created with the whole of `value`, not cut to `width`
    /// (Tyrant stores it through `tcadbputproc`, whose shift runs only on an existing record),
    /// with no flags and no expiry; an existing record keeps its flags and expiry.
    fn putshl(&self, key: &[u8], value: &[u8], width: usize) -> Result<Meta> {
        check_sizes(key, value.len())?;
        let meta = self.accept(key, &mut |cur| match cur {
            None => Decision::Put {
                value: Value::Lent(value),
                flags: 0,
                expires: 0,
            },
            Some(c) => {
                // The last `keep` bytes of old ++ new.
                let keep = (c.value.len() + value.len()).min(width);
                let from_new = keep.min(value.len());
                let from_old = keep - from_new;
                let mut v = Vec::with_capacity(keep);
                v.extend_from_slice(&c.value[c.value.len() - from_old..]);
                v.extend_from_slice(&value[value.len() - from_new..]);
                Decision::Put {
                    value: Value::Made(v),
                    flags: c.meta.flags,
                    expires: c.meta.expires,
                }
            }
        })?;
        meta.ok_or_else(|| Error::Corrupt("putshl produced no record".into()))
    }

    /// Tokyo Cabinet's addint: add `delta` to a record holding one native (little-endian)
    /// 4-byte int, creating it with `delta` when absent; the sum wraps around as C's int does.
    /// [`Error::NotNumeric`] when the record has another size (left unchanged). Flags and
    /// expiry of an existing record are kept. (Tyrant answers a sum of `i32::MIN`, its failure
    /// value, as a failure.)
    fn addint(&self, key: &[u8], delta: i32) -> Result<i32> {
        let mut result = Err(Error::NotNumeric);
        self.accept(key, &mut |cur| {
            let (n, flags, expires) = match cur {
                None => (delta, 0, 0),
                Some(c) => match <[u8; 4]>::try_from(c.value) {
                    Ok(b) => (
                        i32::from_le_bytes(b).wrapping_add(delta),
                        c.meta.flags,
                        c.meta.expires,
                    ),
                    Err(_) => return Decision::Keep,
                },
            };
            result = Ok(n);
            Decision::Put {
                value: Value::copied(&n.to_le_bytes()),
                flags,
                expires,
            }
        })?;
        result
    }

    /// Tokyo Cabinet's adddouble: add `delta` to a record holding one native (little-endian)
    /// 8-byte double, creating it with `delta` when absent. [`Error::NotNumeric`] when the
    /// record has another size (left unchanged). The sum is stored and returned whatever it
    /// is, an infinity or NaN included, as Tokyo Cabinet does (Tyrant answers NaN as a
    /// failure). Flags and expiry of an existing record are kept.
    fn adddouble(&self, key: &[u8], delta: f64) -> Result<f64> {
        let mut result = Err(Error::NotNumeric);
        self.accept(key, &mut |cur| {
            let (n, flags, expires) = match cur {
                None => (delta, 0, 0),
                Some(c) => match <[u8; 8]>::try_from(c.value) {
                    Ok(b) => (f64::from_le_bytes(b) + delta, c.meta.flags, c.meta.expires),
                    Err(_) => return Decision::Keep,
                },
            };
            result = Ok(n);
            Decision::Put {
                value: Value::copied(&n.to_le_bytes()),
                flags,
                expires,
            }
        })?;
        result
    }
}

impl<S: Store + ?Sized> TokyoOps for S {}

/// Append (`front`: prepend) `value` to the record of `key`, creating it when absent (Tokyo
/// Cabinet's putcat); the joined record keeps its flags and expiry. [`Error::TooLarge`] when
/// the result would be over [`MAX_VALUE_LEN`] (left unchanged). memcached's form, which never
/// creates, is [`MemcachedOps::concat_if`].
fn concat_creating<S: Store + ?Sized>(
    store: &S,
    key: &[u8],
    value: &[u8],
    front: bool,
) -> Result<Meta> {
    let mut too_large = None;
    let meta = store.accept(key, &mut |cur| match cur {
        None => Decision::Put {
            value: Value::Lent(value),
            flags: 0,
            expires: 0,
        },
        Some(c) => {
            let len = c.value.len() + value.len();
            if len > MAX_VALUE_LEN {
                too_large = Some(len);
                return Decision::Keep;
            }
            Decision::Put {
                value: Value::Made(joined(c.value, value, front)),
                flags: c.meta.flags,
                expires: c.meta.expires,
            }
        }
    })?;
    if let Some(len) = too_large {
        return Err(Error::TooLarge(format!(
            "concatenated value of {len} bytes"
        )));
    }
    meta.ok_or_else(|| Error::Corrupt("a concatenation produced no record".into()))
}
