//! `kura`: the command-line tool. Parsing and wiring only; the logic lives in `kura-engine` and
//! `kura-server`.

mod db;
mod serve;

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
    /// Serve a database over the network (memcached text protocol so far).
    Serve(serve::ServeArgs),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Db(cmd) => db::run(cmd),
        Command::Serve(args) => serve::run(args),
    }
}
