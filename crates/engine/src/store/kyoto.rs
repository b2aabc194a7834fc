//! Kyoto Cabinet's and Kyoto Tycoon's record operations, each with the meaning it has there. Provided for every
//! [`Store`] (built on [`Store::accept`]), so a kind implements none of them and every kind
//! behaves the same.

use super::*;
use crate::error::{Error, Result};

/// Kyoto Cabinet's (and Tycoon's) operations on any [`Store`]: `use kura_engine::KyotoOps` to call them.
pub trait KyotoOps: Store {
    /// Kyoto Cabinet's append: add `value` at the end of the record, creating it when absent.
    /// The record takes `expires` (Kyoto Tycoon's `xt`, 0: never) and keeps its flags.
    /// [`Error::TooLarge`] when the result would be over [`MAX_VALUE_LEN`].
    fn append_with(&self, key: &[u8], value: &[u8], expires: u64) -> Result<Meta> {
        check_sizes(key, value.len())?;
        let mut too_large = None;
        let meta = self.accept(key, &mut |cur| match cur {
            None => Decision::Put {
                value: Value::Lent(value),
                flags: 0,
                expires,
            },
            Some(c) => {
                let len = c.value.len() + value.len();
                if len > MAX_VALUE_LEN {
                    too_large = Some(len);
                    return Decision::Keep;
                }
                Decision::Put {
                    value: Value::Made(joined(c.value, value, false)),
                    flags: c.meta.flags,
                    expires,
                }
            }
        })?;
        if let Some(len) = too_large {
            return Err(Error::TooLarge(format!("appended value of {len} bytes")));
        }
        meta.ok_or_else(|| Error::Corrupt("append produced no record".into()))
    }

    /// Kyoto Cabinet's increment (`kcdb.h`, 0.9.56): add `num` to a record holding an 8-byte
    /// big-endian integer (the sum wraps around). An absent record is created with
    /// `orig + num`; `orig` is `i64::MIN`: an absent record is a failure; `i64::MAX`: the
    /// record is set to `num` whatever it holds. Adding 0 to an existing record reads it
    /// without writing. The record written takes `expires` (0: never) and keeps its flags.
    /// The new number; `None` when the record is absent with `orig` `i64::MIN`;
    /// [`Error::NotNumeric`] when it is not 8 bytes (left unchanged).
    fn increment(&self, key: &[u8], num: i64, orig: i64, expires: u64) -> Result<Option<i64>> {
        let mut result = None;
        let mut not_number = false;
        self.accept(key, &mut |cur| {
            result = None;
            not_number = false;
            let (n, flags) = match cur {
                Some(c) => {
                    let Ok(b) = <[u8; 8]>::try_from(c.value) else {
                        not_number = true;
                        return Decision::Keep;
                    };
                    if orig == i64::MAX {
                        (num, c.meta.flags)
                    } else {
                        let old = i64::from_be_bytes(b);
                        if num == 0 {
                            result = Some(old);
                            return Decision::Keep;
                        }
                        (num.wrapping_add(old), c.meta.flags)
                    }
                }
                None if orig == i64::MIN => return Decision::Keep,
                None if orig == i64::MAX => (num, 0),
                None => (num.wrapping_add(orig), 0),
            };
            result = Some(n);
            Decision::Put {
                value: Value::copied(&n.to_be_bytes()),
                flags,
                expires,
            }
        })?;
        if not_number {
            return Err(Error::NotNumeric);
        }
        Ok(result)
    }

    /// Kyoto Cabinet's increment_double (`kcdb.h`, 0.9.56): add `num` to a record holding
    /// Kyoto Cabinet's 16-byte fixed-point decimal ([`crate::numbers::kc_fixed_point`]).
    /// `orig` as [`KyotoOps::increment`]'s, with negative infinity (or NaN) for failure on an
    /// absent record and positive infinity for "set to `num`". A record holding an infinity
    /// stays so; adding 0 reads without writing; adding an infinity stores it. The record
    /// written takes `expires` and keeps its flags. `None` when the record holds Kyoto
    /// Cabinet's NaN, or is absent with a failing `orig`, or when `num` is NaN;
    /// [`Error::NotNumeric`] when the record is not 16 bytes (left unchanged).
    fn increment_double(
        &self,
        key: &[u8],
        num: f64,
        orig: f64,
        expires: u64,
    ) -> Result<Option<f64>> {
        use crate::numbers::{kc_fixed_point, kc_join_double, kc_split_double, KC_DEC_UNIT};
        let mut result = None;
        let mut not_number = false;
        self.accept(key, &mut |cur| {
            result = None;
            not_number = false;
            match cur {
                Some(c) => {
                    let Some((mut integ, mut fract)) = crate::numbers::kc_read_fixed_point(c.value)
                    else {
                        not_number = true;
                        return Decision::Keep;
                    };
                    if orig == f64::INFINITY {
                        (integ, fract) = (0, 0);
                    }
                    if integ == i64::MIN && fract == i64::MIN {
                        return Decision::Keep;
                    }
                    if integ == i64::MAX {
                        result = Some(f64::INFINITY);
                        return Decision::Keep;
                    }
                    if integ == i64::MIN {
                        result = Some(f64::NEG_INFINITY);
                        return Decision::Keep;
                    }
                    if num == 0.0 && orig != f64::INFINITY {
                        result = Some(kc_join_double(integ, fract));
                        return Decision::Keep;
                    }
                    let Some((di, df)) = kc_split_double(num) else {
                        return Decision::Keep;
                    };
                    let value = if num.is_infinite() {
                        result = Some(num);
                        kc_fixed_point(di, 0)
                    } else {
                        integ = integ.wrapping_add(di);
                        fract = fract.wrapping_add(df);
                        if fract >= KC_DEC_UNIT {
                            integ = integ.wrapping_add(1);
                            fract -= KC_DEC_UNIT;
                        }
                        result = Some(kc_join_double(integ, fract));
                        kc_fixed_point(integ, fract)
                    };
                    Decision::Put {
                        value: Value::copied(&value),
                        flags: c.meta.flags,
                        expires,
                    }
                }
                None => {
                    if orig.is_nan() || orig == f64::NEG_INFINITY {
                        return Decision::Keep;
                    }
                    let n = if orig.is_finite() { num + orig } else { num };
                    let Some((integ, fract)) = kc_split_double(n) else {
                        return Decision::Keep;
                    };
                    result = Some(n);
                    Decision::Put {
                        value: Value::copied(&kc_fixed_point(integ, fract)),
                        flags: 0,
                        expires,
                    }
                }
            }
        })?;
        if not_number {
            return Err(Error::NotNumeric);
        }
        Ok(result)
    }

    /// Kyoto Cabinet's cas: compare the record's value with `old` (`None`: the record must be
    /// absent) and, when equal, store `new` (taking `expires`, with no flags) or, when `new`
    /// is `None`, remove the record. Whether the values matched.
    fn cas_value(
        &self,
        key: &[u8],
        old: Option<&[u8]>,
        new: Option<&[u8]>,
        expires: u64,
    ) -> Result<bool> {
        if let Some(n) = new {
            check_sizes(key, n.len())?;
        }
        let mut ok = false;
        self.accept(key, &mut |cur| {
            ok = match cur {
                Some(c) => old == Some(c.value),
                None => old.is_none(),
            };
            match (ok, cur, new) {
                (false, ..) => Decision::Keep,
                (true, Some(_), None) => Decision::Remove,
                (true, None, None) => Decision::Keep,
                (true, _, Some(n)) => Decision::Put {
                    value: Value::Lent(n),
                    flags: 0,
                    expires,
                },
            }
        })?;
        Ok(ok)
    }

    /// Kyoto Cabinet's seize: the live record of `key`, removed in the same step.
    fn seize(&self, key: &[u8]) -> Result<Option<Record>> {
        let mut taken = None;
        self.accept(key, &mut |cur| match cur {
            Some(c) => {
                taken = Some(Record {
                    value: c.value.to_vec(),
                    meta: c.meta,
                });
                Decision::Remove
            }
            None => Decision::Keep,
        })?;
        Ok(taken)
    }
}

impl<S: Store + ?Sized> KyotoOps for S {}
