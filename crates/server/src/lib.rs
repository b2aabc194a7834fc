//! Kura's server: accept connections, sniff the protocol, decode → execute on a `Store` →
//! encode. It never names a concrete database kind.
//!
//! The server-wide context every executor shares: `context`. Executors: memcached text and binary (`mc_exec`, `mc_bin_exec`), Tokyo Tyrant (`tt_exec`),
//! HTTP — Tyrant's REST, Kyoto Tycoon's RPC and REST (`http_exec`), Kyoto Tycoon's binary
//! protocol (`kt_bin_exec`), the Redis protocol (`redis_exec`), Kyoto Tycoon's cursors and `match_similar` (`kt_cursor`) and its
//! named signals (`kt_signal`); the command mask every one
//! of them checks (`mask`); the connection loop (`net`) and its output queue (`out`). Copies
//! asked for over the network, confined to the backup directory: `backup`.

pub mod auth;
pub mod backup;
pub mod context;
pub mod http_exec;
pub mod kt_bin_exec;
pub mod kt_common;
pub mod kt_cursor;
pub mod kt_signal;
pub mod mask;
pub mod mc_access;
pub mod mc_bin_exec;
pub mod mc_common;
pub mod mc_exec;
pub mod mc_meta;
pub mod mc_stats;
pub mod metrics;
pub mod net;
pub mod out;
pub mod redis_exec;
pub mod repl;
pub mod script;
pub mod tt_exec;

#[cfg(test)]
mod failing;
