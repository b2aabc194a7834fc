//! The connection and server commands: HELLO, AUTH, INFO, CLIENT, COMMAND, CONFIG, TIME.

use super::{arity_error, err, Call, Done, Kind, COMMANDS, REDIS_VERSION, SYNTAX};
use crate::context::Next;
use crate::out::Out;
use kura_proto::resp;
use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;

/// Log in as `name` with `pass` against the users file. `Err` is the error reply.
fn login(c: &mut Call<'_, '_, '_>, name: &[u8], pass: &[u8]) -> Result<(), super::Reply> {
    let Some(users) = c.shared.access.users() else {
        return Err(err(
            "ERR AUTH <password> called without any password configured for the default \
             user. Are you sure your configuration is correct?",
        ));
    };
    match users.login(name, pass) {
        Some(u) => {
            c.session.user = Some((u.name.clone(), u.denied));
            crate::auth::run_as(u.denied);
            Ok(())
        }
        None => {
            crate::net::login_failed(
                c.shared,
                c.session,
                "Redis AUTH",
                Some(crate::auth::shown(name)),
            );
            Err(err(
                "WRONGPASS invalid username-password pair or user is disabled.",
            ))
        }
    }
}

/// AUTH [username] password: a one-argument AUTH logs in as the user `default`.
pub(super) fn auth(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let (name, pass) = match c.args.len() {
        2 => (&b"default"[..], c.args[1]),
        3 => (c.args[1], c.args[2]),
        _ => return Err(err(SYNTAX)),
    };
    login(c, name, pass)?;
    resp::ok(out);
    Ok(Next::Continue)
}

/// HELLO [protover [AUTH username password] [SETNAME name]]: switch RESP versions, and
/// the server's description as a map.
pub(super) fn hello(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let mut ver = None;
    if let Some(v) = c.args.get(1) {
        let n = resp::parse_i64(v)
            .ok_or_else(|| err("ERR Protocol version is not an integer or out of range"))?;
        if !(2..=3).contains(&n) {
            return Err(err("NOPROTO unsupported protocol version"));
        }
        ver = Some(n);
    }
    let mut i = 2;
    let mut name = None;
    while i < c.args.len() {
        let o = c.args[i].to_ascii_uppercase();
        match o.as_slice() {
            b"AUTH" if i + 2 < c.args.len() => {
                let (u, p) = (c.args[i + 1], c.args[i + 2]);
                login(c, u, p)?;
                i += 3;
            }
            b"SETNAME" if i + 1 < c.args.len() => {
                name = Some(valid_name(c.args[i + 1], "Client names")?);
                i += 2;
            }
            _ => {
                return Err(err(format!(
                    "ERR Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(c.args[i])
                )))
            }
        }
    }
    if c.shared.access.has_users() && c.session.user.is_none() {
        return Err(err(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise \
             the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the \
             client and select the RESP protocol version at the same time",
        ));
    }
    if let Some(n) = name {
        c.conn.name = n;
    }
    if let Some(v) = ver {
        c.conn.resp3 = v == 3;
    }
    let r3 = c.resp3();
    resp::map(out, 7, r3);
    resp::bulk(out, b"server");
    resp::bulk(out, b"redis");
    resp::bulk(out, b"version");
    resp::bulk(out, REDIS_VERSION.as_bytes());
    resp::bulk(out, b"proto");
    resp::integer(out, if r3 { 3 } else { 2 });
    resp::bulk(out, b"id");
    resp::integer(out, c.conn.id as i64);
    resp::bulk(out, b"mode");
    resp::bulk(out, b"standalone");
    resp::bulk(out, b"role");
    resp::bulk(out, role(c).as_bytes());
    resp::bulk(out, b"modules");
    resp::array(out, 0);
    Ok(Next::Continue)
}

fn role(c: &Call<'_, '_, '_>) -> &'static str {
    if c.shared.read_only.load(Relaxed) {
        "replica"
    } else {
        "master"
    }
}

/// A client or library name as Redis takes one: printable, no spaces (empty: none).
fn valid_name(b: &[u8], what: &str) -> Result<Option<Vec<u8>>, super::Reply> {
    if b.iter().any(|&c| !(b'!'..=b'~').contains(&c)) {
        return Err(err(format!(
            "ERR {what} cannot contain spaces, newlines or special characters."
        )));
    }
    Ok((!b.is_empty()).then(|| b.to_vec()))
}

/// The durability of the store as Redis's `appendfsync` names it, and Kura's `sync=`
/// (`None`: an in-memory database, no log).
fn durability(c: &Call<'_, '_, '_>) -> Option<(&'static str, String)> {
    let sync = c
        .store
        .describe()
        .into_iter()
        .find(|(k, _)| k == "sync" || k == "open.sync")
        .map(|(_, v)| v)?;
    let like = match sync.as_str() {
        "always" => "always",
        "none" => "no",
        _ => "everysec",
    };
    Some((like, sync))
}

/// The resident memory of the process (bytes), from /proc.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn human(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.2}G", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.2}M", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.2}K", n as f64 / 1024.0),
        n => format!("{n}B"),
    }
}

/// INFO [section ...]: server, clients, memory, persistence, stats, replication, keyspace
/// (the default), commandstats (asked for by name, or `all` / `everything`).
pub(super) fn info(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let asked: Vec<String> = c.args[1..]
        .iter()
        .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
        .collect();
    let default = asked.is_empty() || asked.iter().any(|a| a == "default");
    let every = asked.iter().any(|a| a == "all" || a == "everything");
    let want = |s: &str| every || asked.iter().any(|a| a == s) || (default && s != "commandstats");
    let sh = c.shared;
    let now = c.now;
    let mut t = String::new();
    let section = |t: &mut String, name: &str| {
        if !t.is_empty() {
            t.push_str("\r\n");
        }
        let _ = write!(t, "# {name}\r\n");
    };
    if want("server") {
        section(&mut t, "Server");
        let up = now.saturating_sub(sh.started);
        let _ = write!(
            t,
            "redis_version:{REDIS_VERSION}\r\nredis_mode:standalone\r\nos:{} {}\r\n\
             arch_bits:64\r\nmultiplexing_api:epoll\r\nprocess_id:{}\r\ntcp_port:{}\r\n\
             server_time_usec:{}\r\nuptime_in_seconds:{up}\r\nuptime_in_days:{}\r\n\
             executable:kura\r\nkura_version:{}\r\nkura_database:{}\r\n",
            std::env::consts::OS,
            std::env::consts::ARCH,
            std::process::id(),
            sh.port,
            super::keys::now_ms() * 1000,
            up / 86400,
            env!("CARGO_PKG_VERSION"),
            sh.db_name,
        );
    }
    if want("clients") {
        section(&mut t, "Clients");
        let _ = write!(
            t,
            "connected_clients:{}\r\nmaxclients:{}\r\nblocked_clients:0\r\n",
            sh.curr_connections.load(Relaxed),
            sh.max_connections
        );
    }
    if want("memory") {
        section(&mut t, "Memory");
        let r = rss();
        let _ = write!(
            t,
            "used_memory:{r}\r\nused_memory_human:{}\r\nused_memory_rss:{r}\r\n\
             maxmemory:0\r\nmaxmemory_policy:noeviction\r\nmem_allocator:libc\r\n\
             kura_database_bytes:{}\r\n",
            human(r),
            c.store.size()
        );
    }
    if want("persistence") {
        section(&mut t, "Persistence");
        let d = durability(c);
        let _ = write!(
            t,
            "loading:0\r\nasync_loading:0\r\nrdb_changes_since_last_save:0\r\n\
             rdb_bgsave_in_progress:0\r\nrdb_last_save_time:{}\r\naof_enabled:{}\r\n\
             aof_rewrite_in_progress:0\r\nappendfsync:{}\r\nkura_sync:{}\r\n",
            sh.started,
            u8::from(d.is_some()),
            d.as_ref().map_or("no", |d| d.0),
            d.as_ref().map_or("memory", |d| d.1.as_str()),
        );
    }
    if want("stats") {
        section(&mut t, "Stats");
        let total: u64 = sh.redis.calls.iter().map(|c| c.get()).sum();
        let _ = write!(
            t,
            "total_connections_received:{}\r\ntotal_commands_processed:{total}\r\n\
             instantaneous_ops_per_sec:0\r\ntotal_net_input_bytes:{}\r\n\
             total_net_output_bytes:{}\r\nrejected_connections:{}\r\nexpired_keys:0\r\n\
             evicted_keys:0\r\nkeyspace_hits:{}\r\nkeyspace_misses:{}\r\n\
             total_error_replies:{}\r\n",
            sh.total_connections.load(Relaxed),
            sh.bytes_read.get(),
            sh.bytes_written.get(),
            sh.rejected_connections.load(Relaxed),
            sh.get_hits.get(),
            sh.get_misses.get(),
            sh.redis.errors.get(),
        );
    }
    if want("replication") {
        section(&mut t, "Replication");
        let _ = write!(
            t,
            "role:{}\r\nconnected_slaves:0\r\n",
            if role(c) == "master" {
                "master"
            } else {
                "slave"
            }
        );
    }
    if want("commandstats") {
        section(&mut t, "Commandstats");
        for (cmd, n) in COMMANDS.iter().zip(&sh.redis.calls) {
            let n = n.get();
            if n > 0 {
                let _ = write!(
                    t,
                    "cmdstat_{}:calls={n},usec=0,usec_per_call=0.00,rejected_calls=0,\
                     failed_calls=0\r\n",
                    cmd.name
                );
            }
        }
    }
    if want("cluster") {
        // Client libraries read cluster_enabled to tell a cluster from a single server.
        section(&mut t, "Cluster");
        t.push_str("cluster_enabled:0\r\n");
    }
    if want("keyspace") {
        section(&mut t, "Keyspace");
        let keys = c.store.count();
        if keys > 0 {
            // Counting the keys with an expiry walks the database: done up to a million.
            let mut expires = 0u64;
            if keys <= 1_000_000 {
                c.store.for_each_record(&mut |_, _, m| {
                    expires += u64::from(m.expires != 0);
                    Ok(true)
                })?;
            }
            let _ = write!(t, "db0:keys={keys},expires={expires},avg_ttl=0\r\n");
        }
    }
    resp::verbatim(out, "txt", t.as_bytes(), c.resp3());
    Ok(Next::Continue)
}

/// One `CLIENT LIST` / `CLIENT INFO` line of this connection.
fn client_line(c: &Call<'_, '_, '_>) -> String {
    let s = |v: &Option<Vec<u8>>| -> String {
        v.as_deref()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default()
    };
    format!(
        "id={} addr={} laddr=? fd=-1 name={} age={} idle=0 flags={} db=0 sub=0 psub=0 \
         ssub=0 multi={} qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 \
         omem=0 tot-mem=0 events=r cmd={} user={} redir=-1 resp={} lib-name={} lib-ver={}\n",
        c.conn.id,
        c.session.peer,
        s(&c.conn.name),
        c.now.saturating_sub(c.conn.since),
        if c.conn.multi.is_some() { "x" } else { "N" },
        c.conn.multi.as_ref().map_or(-1, |m| m.0.len() as i64),
        c.conn.last_cmd,
        c.session.user.as_ref().map_or("default", |u| u.0.as_str()),
        if c.resp3() { 3 } else { 2 },
        s(&c.conn.lib_name),
        s(&c.conn.lib_ver),
    )
}

/// CLIENT ID / SETNAME / GETNAME / LIST / INFO / SETINFO / NO-EVICT / NO-TOUCH / REPLY ON /
/// HELP. LIST shows the calling connection only: the server keeps no list of connections.
pub(super) fn client(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let sub = String::from_utf8_lossy(c.args[1]).to_ascii_lowercase();
    let n = c.args.len();
    let arity = |ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(arity_error(&format!("client|{sub}")))
        }
    };
    match sub.as_str() {
        "id" => {
            arity(n == 2)?;
            resp::integer(out, c.conn.id as i64);
        }
        "setname" => {
            arity(n == 3)?;
            c.conn.name = valid_name(c.args[2], "Client names")?;
            resp::ok(out);
        }
        "getname" => {
            arity(n == 2)?;
            match &c.conn.name {
                Some(v) => resp::bulk(out, v),
                None => resp::null(out, c.resp3()),
            }
        }
        "list" | "info" => {
            arity(if sub == "info" { n == 2 } else { n >= 2 })?;
            let line = client_line(c);
            resp::verbatim(out, "txt", line.as_bytes(), c.resp3());
        }
        "setinfo" => {
            arity(n == 4)?;
            let attr = c.args[2].to_ascii_lowercase();
            match attr.as_slice() {
                b"lib-name" => c.conn.lib_name = valid_name(c.args[3], "lib-name")?,
                b"lib-ver" => c.conn.lib_ver = valid_name(c.args[3], "lib-ver")?,
                _ => {
                    return Err(err(format!(
                        "ERR Unrecognized option '{}'",
                        String::from_utf8_lossy(c.args[2])
                    )))
                }
            }
            resp::ok(out);
        }
        "no-evict" | "no-touch" => {
            arity(n == 3)?;
            let v = c.args[2].to_ascii_lowercase();
            if v != b"on" && v != b"off" {
                return Err(err(SYNTAX));
            }
            resp::ok(out);
        }
        "reply" => {
            arity(n == 3)?;
            if !c.args[2].eq_ignore_ascii_case(b"on") {
                return Err(err(
                    "ERR CLIENT REPLY OFF and SKIP are not served here (every request is answered)",
                ));
            }
            resp::ok(out);
        }
        "help" => {
            let lines = [
                "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "ID",
                "GETNAME",
                "SETNAME <name>",
                "INFO",
                "LIST",
                "SETINFO <option> <value>",
                "NO-EVICT (ON|OFF)",
                "NO-TOUCH (ON|OFF)",
                "REPLY ON",
                "HELP",
            ];
            resp::array(out, lines.len());
            for l in lines {
                resp::simple(out, l);
            }
        }
        _ => return Err(unknown_sub(c.args[1], "CLIENT")),
    }
    Ok(Next::Continue)
}

fn unknown_sub(sub: &[u8], cmd: &str) -> super::Reply {
    err(format!(
        "ERR unknown subcommand '{}'. Try {cmd} HELP.",
        String::from_utf8_lossy(sub)
    ))
}

/// One command's `COMMAND INFO` entry.
fn command_info(out: &mut Out, cmd: &super::Cmd, resp3: bool) {
    resp::array(out, 10);
    resp::bulk(out, cmd.name.as_bytes());
    resp::integer(out, i64::from(cmd.arity));
    let (flags, cat): (&[&str], &str) = match cmd.kind {
        Kind::Read => (&["readonly", "fast"], "@read"),
        Kind::Write => (&["write", "denyoom"], "@write"),
        Kind::Admin => (&["fast"], "@connection"),
    };
    resp::set(out, flags.len(), resp3);
    for f in flags {
        resp::simple(out, f);
    }
    resp::integer(out, i64::from(cmd.keys.0));
    resp::integer(out, i64::from(cmd.keys.1));
    resp::integer(out, i64::from(cmd.keys.2));
    resp::set(out, 1, resp3);
    resp::simple(out, cat);
    resp::set(out, 0, resp3);
    resp::array(out, 0);
    resp::array(out, 0);
}

/// COMMAND [COUNT | LIST | INFO name... | DOCS name... | HELP].
pub(super) fn command(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let r3 = c.resp3();
    let Some(sub) = c.args.get(1) else {
        resp::array(out, COMMANDS.len());
        for cmd in COMMANDS {
            command_info(out, cmd, r3);
        }
        return Ok(Next::Continue);
    };
    let names = &c.args[2..];
    match sub.to_ascii_lowercase().as_slice() {
        b"count" => resp::integer(out, COMMANDS.len() as i64),
        b"list" => {
            resp::array(out, COMMANDS.len());
            for cmd in COMMANDS {
                resp::bulk(out, cmd.name.as_bytes());
            }
        }
        b"info" => {
            if names.is_empty() {
                resp::array(out, COMMANDS.len());
                for cmd in COMMANDS {
                    command_info(out, cmd, r3);
                }
            } else {
                resp::array(out, names.len());
                for n in names {
                    match super::lookup(n) {
                        Some(i) => command_info(out, &COMMANDS[i], r3),
                        None => resp::null_array(out, r3),
                    }
                }
            }
        }
        b"docs" => {
            let found: Vec<&super::Cmd> = if names.is_empty() {
                COMMANDS.iter().collect()
            } else {
                names
                    .iter()
                    .filter_map(|n| super::lookup(n).map(|i| &COMMANDS[i]))
                    .collect()
            };
            resp::map(out, found.len(), r3);
            for cmd in found {
                resp::bulk(out, cmd.name.as_bytes());
                resp::map(out, 3, r3);
                resp::bulk(out, b"summary");
                resp::bulk(
                    out,
                    format!(
                        "Redis's {} (docs/PROTOCOL-REDIS.md)",
                        cmd.name.to_uppercase()
                    )
                    .as_bytes(),
                );
                resp::bulk(out, b"since");
                resp::bulk(out, b"1.0.0");
                resp::bulk(out, b"group");
                resp::bulk(
                    out,
                    match cmd.kind {
                        Kind::Admin => &b"connection"[..],
                        _ => b"string",
                    },
                );
            }
        }
        b"help" => {
            let lines = [
                "COMMAND [<subcommand>]",
                "COUNT",
                "LIST",
                "INFO [<name> ...]",
                "DOCS [<name> ...]",
            ];
            resp::array(out, lines.len());
            for l in lines {
                resp::simple(out, l);
            }
        }
        _ => return Err(unknown_sub(sub, "COMMAND")),
    }
    Ok(Next::Continue)
}

/// CONFIG GET pattern...: the settings a client reads, from the server's; CONFIG
/// RESETSTAT; CONFIG SET and REWRITE are refused (Kura is configured by its command line).
pub(super) fn config(c: &mut Call<'_, '_, '_>, out: &mut Out) -> Done {
    let sub = String::from_utf8_lossy(c.args[1]).to_ascii_lowercase();
    match sub.as_str() {
        "get" => {
            if c.args.len() < 3 {
                return Err(arity_error("config|get"));
            }
            let d = durability(c);
            let sh = c.shared;
            let params: Vec<(&str, String)> = vec![
                ("appendonly", if d.is_some() { "yes" } else { "no" }.into()),
                ("appendfsync", d.as_ref().map_or("no", |d| d.0).into()),
                ("save", String::new()),
                ("databases", "1".into()),
                ("maxmemory", "0".into()),
                ("maxmemory-policy", "noeviction".into()),
                ("maxclients", sh.max_connections.to_string()),
                ("timeout", sh.idle_timeout.to_string()),
                ("port", sh.port.to_string()),
                ("bind", sh.host.clone()),
                ("proto-max-bulk-len", sh.max_value_size.to_string()),
                ("tcp-keepalive", "0".into()),
                ("replica-read-only", "yes".into()),
                ("slave-read-only", "yes".into()),
            ];
            let pats = &c.args[2..];
            let hits: Vec<&(&str, String)> = params
                .iter()
                .filter(|(k, _)| {
                    pats.iter()
                        .any(|p| super::keys::glob(&p.to_ascii_lowercase(), k.as_bytes()))
                })
                .collect();
            resp::map(out, hits.len(), c.resp3());
            for (k, v) in hits {
                resp::bulk(out, k.as_bytes());
                resp::bulk(out, v.as_bytes());
            }
        }
        "resetstat" => {
            c.shared.reset_stats();
            resp::ok(out);
        }
        "set" => {
            return Err(err(format!(
                "ERR Unknown option or number of arguments for CONFIG SET - '{}' (Kura is \
                 configured by kura serve's options)",
                c.args
                    .get(2)
                    .map(|a| String::from_utf8_lossy(a))
                    .unwrap_or_default()
            )))
        }
        "rewrite" => return Err(err("ERR The server is running without a config file")),
        _ => return Err(unknown_sub(c.args[1], "CONFIG")),
    }
    Ok(Next::Continue)
}

/// TIME: unix seconds and microseconds, as two bulk strings.
pub(super) fn time(out: &mut Out) -> Done {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    resp::array(out, 2);
    resp::bulk(out, d.as_secs().to_string().as_bytes());
    resp::bulk(out, d.subsec_micros().to_string().as_bytes());
    Ok(Next::Continue)
}
