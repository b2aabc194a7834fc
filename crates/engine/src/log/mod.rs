//! The durable log every on-disk kind writes through: segment files of checksummed records,
//! read back in order with damage told from a torn tail.
//!
//! - `format`: the segment header and the record layout (put, delete, batch, clear, marker);
//! - `segment`: a segment file (its map, its length written, its live bytes) and the table of
//!   segments readers use without a lock;
//! - `scan`: reading a range of a segment's records back, resynchronising after a failure.

pub mod format;
pub(crate) mod scan;
pub mod segment;
