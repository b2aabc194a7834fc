//! Kura's server: accept connections, sniff the protocol, decode → execute on a `Store` →
//! encode. It never names a concrete database kind.
//!
//! Served so far: the memcached text (classic and meta commands) and binary protocols
//! (`mc_exec`, `mc_bin_exec`) over the connection loop in `net`. Tokyo Tyrant and HTTP come
//! with issue 4.

pub mod http_exec;
pub mod mask;
pub mod mc_bin_exec;
pub mod mc_exec;
pub mod net;
pub mod tt_exec;
