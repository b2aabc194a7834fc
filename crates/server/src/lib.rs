//! Kura's server: accept connections, sniff the protocol, decode → execute on a `Store` →
//! encode. It never names a concrete database kind.
//!
//! Work in progress for issue 3: the memcached executor (requests of `kura_proto::mc_text` run
//! on a `Store`, replies written as memcached does) is here; the connection loop, `kura serve`,
//! the binary protocol and protocol sniffing come next.

pub mod mc_bin_exec;
pub mod mc_exec;
pub mod net;
