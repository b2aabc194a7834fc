//! Kura's protocol codecs: pure functions from bytes to requests and from replies to bytes, with
//! no sockets, no runtime and no storage (see docs/ARCHITECTURE.md).
//!
//! The memcached text protocol (`mc_text`, classic and meta commands), the memcached binary
//! protocol (`mc_bin`), the Tokyo Tyrant binary protocol (`tt_bin`, both directions), HTTP/1.1
//! (`http`), Kyoto Tycoon's TSV bodies (`kt_tsv`) and its binary protocol (`kt_bin`).

pub mod http;
pub mod kt_bin;
pub mod kt_tsv;
pub mod mc_bin;
pub mod mc_text;
pub mod tt_bin;
