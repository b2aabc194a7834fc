//! Value compression: lz4, zstd and deflate, chosen by the `compress=` parameter.

use crate::config::Compression;
use crate::error::{Error, Result};
use std::io::{Read, Write};

/// Compress `data`; `None` when compression would not make it smaller (stored raw then).
pub fn compress(c: Compression, data: &[u8]) -> Option<Vec<u8>> {
    if data.len() < 32 {
        return None;
    }
    let out = match c {
        Compression::None => return None,
        Compression::Lz4 => lz4_flex::compress_prepend_size(data),
        Compression::Zstd => zstd::bulk::compress(data, 3).ok()?,
        Compression::Deflate => {
            let mut e = flate2::write::DeflateEncoder::new(
                Vec::with_capacity(data.len() / 2),
                flate2::Compression::fast(),
            );
            e.write_all(data).ok()?;
            e.finish().ok()?
        }
    };
    (out.len() < data.len()).then_some(out)
}

/// Decompress a stored value; `raw_len` is the original length recorded beside it.
pub fn decompress(c: Compression, data: &[u8], raw_len: usize) -> Result<Vec<u8>> {
    let bad =
        |what: &str| Error::Corrupt(format!("{} value does not decompress: {what}", c.name()));
    let out = match c {
        Compression::None => data.to_vec(),
        Compression::Lz4 => {
            lz4_flex::decompress_size_prepended(data).map_err(|e| bad(&e.to_string()))?
        }
        Compression::Zstd => {
            zstd::bulk::decompress(data, raw_len).map_err(|e| bad(&e.to_string()))?
        }
        Compression::Deflate => {
            let mut out = Vec::new();
            flate2::read::DeflateDecoder::new(data)
                .take(raw_len as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| bad(&e.to_string()))?;
            out
        }
    };
    if out.len() != raw_len {
        return Err(bad("length differs from the record header"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let data: Vec<u8> = (0..10_000u32)
            .flat_map(|i| (i % 13).to_le_bytes())
            .collect();
        for c in [Compression::Lz4, Compression::Zstd, Compression::Deflate] {
            let z = compress(c, &data).expect("compressible");
            assert!(z.len() < data.len());
            assert_eq!(decompress(c, &z, data.len()).unwrap(), data);
            assert!(decompress(c, &z[..z.len() / 2], data.len()).is_err());
        }
        assert!(compress(Compression::Zstd, b"short").is_none());
    }
}
