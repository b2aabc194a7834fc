//! Tyrant's `stat`: the status text, in ttserver's order, then Kura's own lines.

use super::{os_name, TtState, TT_LIBVER, TT_PROTVER, TT_VERSION};
use crate::context::Shared;
use crate::mask::{Proto, OPS};
use kura_engine::Store;

/// The first number of /proc/loadavg (0 where unavailable).
fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Virtual size and resident size of the process in bytes (Linux /proc/self/status).
fn memory() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line[name.len()..].split_whitespace().next()?.parse().ok()?;
        Some(kb * 1024)
    };
    Some((field("VmSize:")?, field("VmRSS:")?))
}

/// User and system CPU seconds of the process.
fn cpu_times() -> Option<(f64, f64)> {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a `struct rusage` into the valid, writable buffer it is given;
    // the buffer is read only when the call reports success.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: zero-initialised and filled in by the successful call above.
    let ru = unsafe { ru.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some((secs(ru.ru_utime), secs(ru.ru_stime)))
}

/// Tyrant's status text: `name\tvalue\n` lines in ttserver's order, then Kura's own.
pub(super) fn stat_text(store: &dyn Store, shared: &Shared, st: &TtState<'_>, now: u64) -> String {
    use std::fmt::Write;
    let time = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(now as f64, |d| d.as_secs_f64());
    let path = match shared.db_name.split('#').next() {
        Some(p) if !p.is_empty() => p.to_string(),
        _ => store
            .describe()
            .into_iter()
            .find(|(k, _)| k == "path")
            .map_or_else(String::new, |(_, v)| v),
    };
    let mut s = String::new();
    let mut line = |name: &str, value: &dyn std::fmt::Display| {
        // Values never contain tabs or newlines that would break the format.
        let value = value.to_string().replace(['\t', '\n'], " ");
        let _ = writeln!(s, "{name}\t{value}");
    };
    line("version", &TT_VERSION);
    line("libver", &TT_LIBVER);
    line("protver", &TT_PROTVER);
    line("os", &os_name());
    line("time", &format_args!("{time:.6}"));
    line("pid", &std::process::id());
    line("sid", &shared.sid);
    line("type", &store.kind().info().tt_type);
    line("path", &path);
    line("rnum", &store.count());
    line("size", &store.size());
    line("bigend", &u8::from(cfg!(target_endian = "big")));
    line("fd", &st.fd);
    line("loadavg", &format_args!("{:.6}", loadavg()));
    if let Some((size, rss)) = memory() {
        line("memsize", &size);
        line("memrss", &rss);
    }
    if let Some((user, sys)) = cpu_times() {
        line("ru_user", &format_args!("{user:.6}"));
        line("ru_sys", &format_args!("{sys:.6}"));
    }
    line(
        "ru_real",
        &format_args!("{:.6}", (time - shared.started as f64).max(0.0)),
    );
    for (i, (_, name, _)) in OPS.iter().enumerate() {
        line(&format!("cnt_{name}"), &shared.tt.counts[i].get());
    }
    for (i, name) in ["put", "out", "get"].iter().enumerate() {
        line(&format!("cnt_{name}_miss"), &shared.tt.misses[i].get());
    }
    line("kura_version", &env!("CARGO_PKG_VERSION"));
    line("port", &shared.port);
    line("max_value_size", &shared.max_value_size);
    let masked = shared.mask().names(Proto::Tyrant);
    if !masked.is_empty() {
        line("mask", &masked.join(","));
    }
    for (name, v) in store.counters() {
        line(&format!("kura_{name}"), &v);
    }
    // The last script error of the server (any connection, or an --extpc timer).
    if let Some(e) = shared.ext.last_error() {
        line("ext_error", &e);
    }
    for (name, v) in shared.repl_report() {
        if name != "sid" {
            line(&name, &v);
        }
    }
    s
}
