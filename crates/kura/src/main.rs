//! `kura`: the command-line tool. Parsing and wiring only; the logic lives in `kura-engine` and
//! `kura-server`.

mod bench;
mod db;
mod query;
mod remote;
mod serve;
mod transfer;
mod when;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Kura: a key-value database (successor of Tokyo Cabinet / Tokyo Tyrant).
#[derive(Parser)]
#[command(name = "kura", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Work on a database file directly (create, get, put, import, export, check, …).
    #[command(subcommand)]
    Db(db::DbCommand),
    /// Serve a database over the network: memcached text and binary, Tokyo Tyrant, HTTP (Tyrant's
    /// and Kyoto Tycoon's), all on one port.
    Serve(Box<serve::ServeArgs>),
    /// Manage a running server over the Tokyo Tyrant protocol (what tcrmgr was).
    Remote(remote::RemoteArgs),
    /// Load a memcached-protocol server (Kura or memcached) and report throughput and latency.
    Bench(bench::BenchArgs),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Db(cmd) => db::run(cmd),
        Command::Serve(args) => serve::run(*args),
        Command::Remote(args) => remote::run(args),
        Command::Bench(args) => bench::run(args),
    }
}
