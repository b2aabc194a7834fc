//! Kura's protocol codecs: pure functions from bytes to requests and from replies to bytes, with
//! no sockets, no runtime and no storage (see docs/ARCHITECTURE.md).
//!
//! Work in progress for issue 3: the memcached text protocol's classic commands are here; the
//! meta commands, the memcached binary protocol and protocol sniffing come next.

pub mod mc_bin;
pub mod mc_text;
