//! Kura's protocol codecs: pure functions from bytes to requests and from replies to bytes, with
//! no sockets, no runtime and no storage (see docs/ARCHITECTURE.md).
//!
//! So far: the memcached text protocol (`mc_text`, classic and meta commands) and the memcached
//! binary protocol (`mc_bin`). Tokyo Tyrant and HTTP come with issue 4.

pub mod http;
pub mod kt_tsv;
pub mod mc_bin;
pub mod mc_text;
pub mod tt_bin;
