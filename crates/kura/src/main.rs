//! `kura`: the command-line tool. Parsing and wiring only; the logic lives in `kura-engine` and
//! `kura-server`.

mod bench;
mod conf;
mod db;
mod originals;
mod query;
mod remote;
mod sd_notify;
mod serve;
mod transfer;
mod users;
mod when;

use clap::{Parser, Subcommand};
use std::ffi::OsString;
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
    /// and Kyoto Tycoon's), Redis, all on one port.
    Serve(Box<serve::ServeArgs>),
    /// Manage a running server over the Tokyo Tyrant protocol (what tcrmgr was).
    Remote(remote::RemoteArgs),
    /// Load a memcached-protocol server (Kura or memcached) and report throughput and latency.
    Bench(bench::BenchArgs),
    /// Write a users file for `kura serve --users`: add users, set passwords (read from
    /// stdin) and rights, make bearer tokens.
    #[command(subcommand)]
    Users(users::UsersCommand),
    /// Tokyo Tyrant's `ttserver` command line, its flags as they are (`-port 1978 -thnum 8
    /// casket.tch`), run as the `kura serve` it amounts to (`--dry-run` prints that command).
    #[command(disable_help_flag = true)]
    Ttserver(originals::OriginalArgs),
    /// Kyoto Tycoon's `ktserver` command line (`-port 1978 -th 8 casket.kch`), run as `kura
    /// serve` (`--dry-run` prints that command).
    #[command(disable_help_flag = true)]
    Ktserver(originals::OriginalArgs),
    /// memcached's command line (`-p 11211 -m 64 -t 2`: an in-memory database bounded by -m;
    /// `-- NAME` serves a durable database), run as `kura serve` (`--dry-run` prints it).
    #[command(disable_help_flag = true)]
    Memcached(originals::OriginalArgs),
}

fn main() -> ExitCode {
    let raw: Vec<OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&raw) {
        Ok(c) => c,
        Err(e) => {
            // `kura serve -port 1978`: say which Kura flag means what the original's does,
            // before clap's guess (which offers --host for --mhost).
            if raw.get(1).is_some_and(|s| s == "serve") {
                if let Some(msg) = originals::serve_hint(&raw[2..]) {
                    eprintln!("kura serve: {msg}");
                    return ExitCode::from(2);
                }
            }
            e.exit()
        }
    };
    match cli.command {
        Command::Db(cmd) => db::run(cmd),
        // Parsed again with the configuration file, if any (the command line over it).
        Command::Serve(_) => serve::main(&raw[2..]),
        Command::Remote(args) => remote::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Users(cmd) => users::run(cmd),
        Command::Ttserver(a) => originals::run(originals::Program::Ttserver, a),
        Command::Ktserver(a) => originals::run(originals::Program::Ktserver, a),
        Command::Memcached(a) => originals::run(originals::Program::Memcached, a),
    }
}
