//! memcached's record operations: versions (cas), touch, decimal counters, append / prepend of live records, each with the meaning it has there. Provided for every
//! [`Store`] (built on [`Store::accept`]), so a kind implements none of them and every kind
//! behaves the same.

use super::*;
use crate::error::{Error, Result};

/// memcached's operations on any [`Store`]: `use kura_engine::MemcachedOps` to call them.
pub trait MemcachedOps: Store {
    /// Store only if the record's version is still `version`.
    fn cas(
        &self,
        key: &[u8],
        version: u64,
        value: &[u8],
        flags: u32,
        expires: u64,
    ) -> Result<Outcome> {
        check_sizes(key, value.len())?;
        let mut result = None;
        let meta = self.accept(key, &mut |cur| match cur {
            None => {
                result = Some(Outcome::NotFound);
                Decision::Keep
            }
            Some(c) if c.meta.version != version => {
                result = Some(Outcome::VersionMismatch);
                Decision::Keep
            }
            Some(_) => Decision::Put {
                value: Value::Lent(value),
                flags,
                expires,
            },
        })?;
        Ok(match (result, meta) {
            (Some(r), _) => r,
            (None, Some(m)) => Outcome::Stored(m),
            (None, None) => Outcome::NotFound,
        })
    }

    /// Delete only if the record's version is still `version` (memcached delete with cas).
    fn out_if(&self, key: &[u8], version: u64) -> Result<Outcome> {
        let mut result = Outcome::NotFound;
        self.accept(key, &mut |cur| match cur {
            None => Decision::Keep,
            Some(c) if version != 0 && c.meta.version != version => {
                result = Outcome::VersionMismatch;
                Decision::Keep
            }
            Some(_) => {
                result = Outcome::Deleted;
                Decision::Remove
            }
        })?;
        Ok(result)
    }

    /// Set a new expiration time on a live record; `None` when absent.
    fn touch(&self, key: &[u8], expires: u64) -> Result<Option<Meta>> {
        let mut found = false;
        let meta = self.accept(key, &mut |cur| {
            if cur.is_some() {
                found = true;
                Decision::Touch { expires }
            } else {
                Decision::Keep
            }
        })?;
        Ok(if found { meta } else { None })
    }

    /// memcached's incr / decr: add `delta` to (or subtract it from) the number a live record
    /// holds in decimal text. `None` when absent; [`Error::NotNumeric`] when the value is not a
    /// number as memcached reads one ([`crate::numbers::memcached_number`]).
    fn incr_decimal(&self, key: &[u8], delta: u64, decr: bool) -> Result<Option<(u64, Meta)>> {
        match self.incr_decimal_if(key, delta, decr, 0)? {
            Counted::Done(n, m) => Ok(Some((n, m))),
            Counted::NotFound | Counted::VersionMismatch => Ok(None),
        }
    }

    /// memcached's incr / decr, as its text, binary and meta (`ma`) commands do them: the value
    /// read as [`crate::numbers::memcached_number`], incr wrapping around at 2^64, decr
    /// stopping at 0, and a result shorter than the value it replaces padded with spaces to the
    /// old length (memcached rewrites the item in place; a get shows the padding). Flags and
    /// expiry are kept; `cas` (not 0) must be the record's version. An absent record is not
    /// created (memcached's binary protocol and `ma … N` create it themselves).
    /// [`Error::NotNumeric`] when the value is not such a number (left unchanged).
    fn incr_decimal_if(&self, key: &[u8], delta: u64, decr: bool, cas: u64) -> Result<Counted> {
        let mut result = Counted::NotFound;
        let mut not_number = false;
        let meta = self.accept(key, &mut |cur| {
            not_number = false;
            let Some(c) = cur else {
                result = Counted::NotFound;
                return Decision::Keep;
            };
            if cas != 0 && cas != c.meta.version {
                result = Counted::VersionMismatch;
                return Decision::Keep;
            }
            let Some(n) = crate::numbers::memcached_number(c.value) else {
                not_number = true;
                return Decision::Keep;
            };
            let n = if decr {
                n.saturating_sub(delta)
            } else {
                n.wrapping_add(delta)
            };
            result = Counted::Done(n, c.meta);
            Decision::Put {
                value: crate::numbers::memcached_counter(n, c.value.len()),
                flags: c.meta.flags,
                expires: c.meta.expires,
            }
        })?;
        if not_number {
            return Err(Error::NotNumeric);
        }
        Ok(match (result, meta) {
            (Counted::Done(n, _), Some(m)) => Counted::Done(n, m),
            (Counted::Done(..), None) => Counted::NotFound,
            (other, _) => other,
        })
    }

    /// memcached's append / prepend: add `data` at the end (`front`: the front) of a live
    /// record, keeping its flags and expiry. An absent record is not created
    /// ([`Outcome::NotFound`]); `cas` (not 0) must be the record's version
    /// ([`Outcome::VersionMismatch`]); `fits(flags, len)` says whether a value of `len` bytes
    /// with the record's flags is within the caller's limit (memcached's item size, which
    /// counts the flags), and [`Outcome::TooLarge`] when it is not (or when `len` is over
    /// [`MAX_VALUE_LEN`]).
    fn concat_if(
        &self,
        key: &[u8],
        data: &[u8],
        front: bool,
        cas: u64,
        fits: &dyn Fn(u32, usize) -> bool,
    ) -> Result<Outcome> {
        let mut result = Outcome::NotFound;
        let meta = self.accept(key, &mut |cur| {
            let Some(c) = cur else {
                result = Outcome::NotFound;
                return Decision::Keep;
            };
            if cas != 0 && c.meta.version != cas {
                result = Outcome::VersionMismatch;
                return Decision::Keep;
            }
            let len = c.value.len() + data.len();
            if len > MAX_VALUE_LEN || !fits(c.meta.flags, len) {
                result = Outcome::TooLarge;
                return Decision::Keep;
            }
            result = Outcome::Stored(c.meta);
            Decision::Put {
                value: Value::Made(joined(c.value, data, front)),
                flags: c.meta.flags,
                expires: c.meta.expires,
            }
        })?;
        Ok(match (result, meta) {
            (Outcome::Stored(_), Some(m)) => Outcome::Stored(m),
            (Outcome::Stored(_), None) => Outcome::NotFound,
            (r, _) => r,
        })
    }
}

impl<S: Store + ?Sized> MemcachedOps for S {}

/// What [`MemcachedOps::incr_decimal_if`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    /// The new number, and the record's new metadata.
    Done(u64, Meta),
    NotFound,
    /// The record's version was not the one given.
    VersionMismatch,
}
