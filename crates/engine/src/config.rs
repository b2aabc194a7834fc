//! Configuration shared by every kind: the tuning parameters of a name (`#key=value`), the
//! sync mode, the compression codec and how an open treats what is at the path. The kinds read
//! their tuning from here; `name` parses names and `registry` picks the kind.

use crate::error::{Error, Result};
use std::time::Duration;

/// The tuning parameters of a name, checked off as a kind reads them.
#[derive(Clone, Debug, Default)]
pub struct Params {
    items: Vec<(String, String)>,
}

impl Params {
    /// Parse `k=v#k=v` (without the leading path).
    pub fn parse(s: &str) -> Result<Params> {
        let mut items: Vec<(String, String)> = Vec::new();
        for part in s.split('#').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| {
                Error::InvalidParam(format!("`{part}` is not of the form key=value"))
            })?;
            let k = k.trim().to_ascii_lowercase();
            if k.is_empty() {
                return Err(Error::InvalidParam(format!("`{part}` has an empty key")));
            }
            if items.iter().any(|(x, _)| *x == k) {
                return Err(Error::InvalidParam(format!("`{k}` is given twice")));
            }
            items.push((k, v.trim().to_string()));
        }
        Ok(Params { items })
    }

    /// Every `key=value` pair, in the order given.
    pub fn items(&self) -> &[(String, String)] {
        &self.items
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    fn raw(&self, key: &str) -> Option<&str> {
        self.items
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Fail when a key is not in `allowed` (for the kind `kind`).
    pub fn allow_only(&self, kind: &str, allowed: &[&str]) -> Result<()> {
        for (k, _) in &self.items {
            if !allowed.contains(&k.as_str()) {
                return Err(Error::InvalidParam(format!(
                    "unknown parameter `{k}` for {kind} (known: {})",
                    allowed.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// A non-negative integer with an optional k / m / g / t suffix (powers of 1024).
    pub fn size(&self, key: &str) -> Result<Option<u64>> {
        self.raw(key)
            .map(|v| {
                parse_size(v).ok_or_else(|| {
                    Error::InvalidParam(format!(
                        "`{key}={v}`: expected a number with an optional k/m/g/t suffix"
                    ))
                })
            })
            .transpose()
    }

    /// A float in `[lo, hi]`.
    pub fn ratio(&self, key: &str, lo: f64, hi: f64) -> Result<Option<f64>> {
        self.raw(key)
            .map(|v| match v.parse::<f64>() {
                Ok(x) if (lo..=hi).contains(&x) => Ok(x),
                _ => Err(Error::InvalidParam(format!(
                    "`{key}={v}`: expected a number from {lo} to {hi}"
                ))),
            })
            .transpose()
    }

    pub fn sync(&self) -> Result<Option<SyncMode>> {
        self.raw("sync").map(SyncMode::parse).transpose()
    }

    pub fn compression(&self) -> Result<Option<Compression>> {
        self.raw("compress").map(Compression::parse).transpose()
    }
}

/// Parse `123`, `64k`, `10m`, `1g`, `2t` (powers of 1024; case-insensitive; `b` allowed after).
pub fn parse_size(v: &str) -> Option<u64> {
    let v = v.trim().to_ascii_lowercase();
    let v = v.strip_suffix('b').unwrap_or(&v);
    let (num, mult) = match v.chars().last()? {
        'k' => (&v[..v.len() - 1], 1u64 << 10),
        'm' => (&v[..v.len() - 1], 1 << 20),
        'g' => (&v[..v.len() - 1], 1 << 30),
        't' => (&v[..v.len() - 1], 1 << 40),
        _ => (v, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

/// When writes become durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// A write returns only once it is durable (concurrent writers share fsyncs).
    Always,
    /// Written data is synced by a background thread at this interval (bounded loss window).
    Interval(Duration),
    /// Synced only on `sync`, `close` and checkpoints.
    None,
}

impl SyncMode {
    pub const DEFAULT: SyncMode = SyncMode::Interval(Duration::from_millis(1000));

    pub fn parse(v: &str) -> Result<SyncMode> {
        let lower = v.to_ascii_lowercase();
        match lower.as_str() {
            "always" => Ok(SyncMode::Always),
            "none" | "never" => Ok(SyncMode::None),
            _ => match lower.strip_prefix("interval:").map(str::parse::<u64>) {
                Some(Ok(ms)) if ms > 0 => Ok(SyncMode::Interval(Duration::from_millis(ms))),
                _ => Err(Error::InvalidParam(format!(
                    "`sync={v}`: expected always, none or interval:MILLISECONDS (> 0)"
                ))),
            },
        }
    }

    pub fn describe(self) -> String {
        match self {
            SyncMode::Always => "always".into(),
            SyncMode::None => "none".into(),
            SyncMode::Interval(d) => format!("interval:{}", d.as_millis()),
        }
    }
}

/// Value compression codec. The numeric code is stored in record headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None = 0,
    Lz4 = 1,
    Zstd = 2,
    Deflate = 3,
}

impl Compression {
    pub fn parse(v: &str) -> Result<Compression> {
        match v.to_ascii_lowercase().as_str() {
            "none" | "off" => Ok(Compression::None),
            "lz4" => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::Zstd),
            "deflate" | "zlib" => Ok(Compression::Deflate),
            _ => Err(Error::InvalidParam(format!(
                "`compress={v}`: expected none, lz4, zstd or deflate"
            ))),
        }
    }
    pub fn from_code(c: u8) -> Option<Compression> {
        Some(match c {
            0 => Compression::None,
            1 => Compression::Lz4,
            2 => Compression::Zstd,
            3 => Compression::Deflate,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
            Compression::Deflate => "deflate",
        }
    }
}

/// How [`crate::open_as`] treats the path of an on-disk database (the memory kinds ignore it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Open for writing, creating the database when nothing is at the path (its parent
    /// directory must exist: it is never made) or the path is an empty directory.
    Create,
    /// Open an existing database for writing; anything else is an error
    /// ([`Error::NotFound`] when there is none).
    Existing,
    /// Open an existing database for inspection only: nothing is written, not even the
    /// repair of a torn tail that a writable open performs; writes fail.
    ReadOnly,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_params_and_rejects_junk() {
        let params = Params::parse("bnum=10#sync=always").unwrap();
        assert_eq!(params.size("bnum").unwrap(), Some(10));
        assert_eq!(params.sync().unwrap(), Some(SyncMode::Always));
        assert!(Params::parse("bnum").is_err());
        assert!(Params::parse("a=1#a=2").is_err());
        assert!(Params::parse("=1").is_err());
        assert!(params.allow_only("x", &["bnum"]).is_err());
        assert!(params.allow_only("x", &["bnum", "sync"]).is_ok());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64k"), Some(65536));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("10mb"), Some(10 << 20));
        assert_eq!(parse_size("12"), Some(12));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("99999999999999999999t"), None);
    }

    #[test]
    fn sync_modes() {
        assert_eq!(
            SyncMode::parse("interval:250").unwrap(),
            SyncMode::Interval(Duration::from_millis(250))
        );
        assert!(SyncMode::parse("interval:0").is_err());
        assert!(SyncMode::parse("sometimes").is_err());
        assert!(Compression::parse("bzip2").is_err());
    }
}
