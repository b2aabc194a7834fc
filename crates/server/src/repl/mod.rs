//! Replication: the master's side (`feed`: a connection that asked for the update log becomes
//! a stream, served by a thread of its own) and the replica's (`follow`: one thread that
//! follows the master, applies its records and keeps its position). Both sides speak Kura's
//! own stream, Tokyo Tyrant's (0xA0) and Kyoto Tycoon's (0xB1).

pub mod feed;
pub mod follow;

use kura_engine::ulog::logged::Logged;
use kura_engine::Store;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A request that turns a connection into a replication stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamReq {
    /// Kura's own stream (`kura_proto::repl`).
    Kura { after: u64, sid: u32, flags: u32 },
    /// Tokyo Tyrant's `repl` (0xA0).
    Tyrant { ts: u64, sid: u32 },
    /// Kyoto Tycoon's binary replication (0xB1): `ts` in Kyoto Tycoon's units
    /// (`kura_proto::repl_kt`).
    Kyoto { flags: u32, ts: u64, sid: u16 },
}

/// The protocol the master followed speaks (`kura serve --master-protocol`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MasterProtocol {
    /// Kura's own stream: effects with flags and expiry, snapshots, acknowledgements.
    #[default]
    Kura,
    /// Tokyo Tyrant's `repl` (0xA0): commands, no snapshot.
    Tyrant,
    /// Kyoto Tycoon's binary replication (0xB1): sets with expiry, removes, clears.
    Kyoto,
}

impl MasterProtocol {
    pub fn parse(s: &str) -> Option<MasterProtocol> {
        Some(match s {
            "kura" => MasterProtocol::Kura,
            "tyrant" | "tt" => MasterProtocol::Tyrant,
            "kyoto" | "kt" => MasterProtocol::Kyoto,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            MasterProtocol::Kura => "kura",
            MasterProtocol::Tyrant => "tyrant",
            MasterProtocol::Kyoto => "kyoto",
        }
    }

    /// Units of the master's time stamps per microsecond (Kyoto Tycoon's count
    /// milliseconds × 10^6).
    pub fn units_per_us(self) -> u64 {
        match self {
            MasterProtocol::Kyoto => 1000,
            _ => 1,
        }
    }
}

/// What the replica knows of its master and how far it got.
#[derive(Clone, Debug, Default)]
pub struct FollowStatus {
    pub connected: bool,
    pub master_sid: u32,
    /// The newest time stamp the master reported.
    pub master_last: u64,
    /// The master's time stamp up to which every record is applied here.
    pub position: u64,
    /// Units of those time stamps per microsecond (0 taken as 1).
    pub units_per_us: u64,
    /// Records applied since the server started.
    pub applied: u64,
    pub bootstraps: u64,
    pub last_error: String,
}

impl FollowStatus {
    /// How far behind the master, in microseconds of its log (0 when caught up).
    pub fn lag_us(&self) -> u64 {
        if !self.connected && self.master_last == 0 {
            return 0;
        }
        self.master_last.saturating_sub(self.position) / self.units_per_us.max(1)
    }
}

/// The server's replication state, shared by the executors, the feeds and the follower.
pub struct Replication {
    pub sid: u32,
    /// What clients write to (with the update log when there is one).
    pub store: Arc<dyn Store>,
    pub logged: Option<Arc<Logged>>,
    /// The master being followed (`host`, `port`), if any.
    pub master: Mutex<Option<(String, u16)>>,
    /// Bumped when the master changes, so the follower reconnects.
    pub generation: AtomicU64,
    pub status: Mutex<FollowStatus>,
    /// Where a persistent replica keeps its position (beside its database).
    pub pos_file: Option<PathBuf>,
    /// A replica that still takes writes from clients (`--replica-writes`: dual master).
    pub writable_replica: bool,
    /// The protocol the master speaks.
    pub protocol: MasterProtocol,
    /// Where a replica with no saved position starts: after this time stamp of the master's
    /// log (`--master-ts`: a replica seeded from a copy of the master's data).
    pub initial_ts: Option<u64>,
    /// A position to go on from, set at run time (Tyrant `setmst` with a time stamp).
    reset_ts: Mutex<Option<u64>>,
    pub stop: Arc<AtomicBool>,
    log: Box<dyn Fn(&str) + Send + Sync>,
}

impl Replication {
    pub fn new(
        sid: u32,
        store: Arc<dyn Store>,
        logged: Option<Arc<Logged>>,
        pos_file: Option<PathBuf>,
        writable_replica: bool,
        log: Box<dyn Fn(&str) + Send + Sync>,
    ) -> Replication {
        Replication {
            sid,
            store,
            logged,
            master: Mutex::new(None),
            generation: AtomicU64::new(0),
            status: Mutex::new(FollowStatus::default()),
            pos_file,
            writable_replica,
            protocol: MasterProtocol::Kura,
            initial_ts: None,
            reset_ts: Mutex::new(None),
            stop: Arc::new(AtomicBool::new(false)),
            log,
        }
    }

    pub fn log(&self, msg: &str) {
        (self.log)(msg)
    }

    /// Follow `master` (or stop following with `None`).
    pub fn set_master(&self, master: Option<(String, u16)>) {
        *self.master.lock().unwrap_or_else(|p| p.into_inner()) = master;
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// Follow `master` and go on after its time stamp `ts` (Tyrant `setmst` with a time
    /// stamp, as ttserver writes it to its rts file).
    pub fn set_master_at(&self, master: (String, u16), ts: u64) {
        *self.reset_ts.lock().unwrap_or_else(|p| p.into_inner()) = Some(ts);
        self.set_master(Some(master));
    }

    pub(crate) fn take_reset(&self) -> Option<u64> {
        self.reset_ts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    pub fn master(&self) -> Option<(String, u16)> {
        self.master
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn status(&self) -> FollowStatus {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn with_status(&self, f: impl FnOnce(&mut FollowStatus)) {
        f(&mut self.status.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Lines for `inform` / `stat`: the replica's master and lag, and the log's replicas.
    pub fn report(&self) -> Vec<(String, String)> {
        let mut out = vec![("sid".to_string(), self.sid.to_string())];
        if let Some((h, p)) = self.master() {
            let st = self.status();
            out.push(("mhost".into(), h));
            out.push(("mport".into(), p.to_string()));
            out.push(("master_protocol".into(), self.protocol.name().into()));
            out.push(("rts".into(), st.position.to_string()));
            out.push(("master_sid".into(), st.master_sid.to_string()));
            out.push(("master_connected".into(), st.connected.to_string()));
            out.push(("delay".into(), format!("{:.6}", st.lag_us() as f64 / 1e6)));
            out.push(("repl_applied".into(), st.applied.to_string()));
            out.push(("repl_bootstraps".into(), st.bootstraps.to_string()));
            if !st.last_error.is_empty() {
                out.push(("repl_error".into(), st.last_error));
            }
        }
        if let Some(l) = &self.logged {
            let log = l.log();
            out.push(("ulog_last_ts".into(), log.last_ts().to_string()));
            let last = log.last_ts();
            for (sid, r) in log.replicas() {
                out.push((format!("replica_{sid}"), replica_line(last, &r)));
            }
        }
        out
    }

    /// Run one of Kura's replication functions of Tyrant `misc` ([`MISC_FUNCS`]); `None` is
    /// Tyrant's failure: no update log here (`--ulog`), a missing or bad argument, a replica
    /// the log does not know.
    ///
    /// - `ulogstat`: the log's state as name / value pairs (`sid`, `last_ts`, `first_ts` = the
    ///   time stamp the oldest kept record follows, `files`, `size`), then `replica_SID` and
    ///   its line (as in `stat`) for every replica known.
    /// - `ulogforget SID`: forget a replica, so that it no longer holds back retention; the
    ///   result is its line as it was. A replica still connected is known again at its next
    ///   acknowledgement (every 200 ms), one that comes back later bootstraps if the log has
    ///   left it behind.
    pub fn misc(&self, name: &[u8], args: &[&[u8]]) -> Option<Vec<Vec<u8>>> {
        let log = self.logged.as_ref()?.log();
        let last = log.last_ts();
        match name {
            b"ulogstat" => {
                let (files, first) = log.span();
                let mut out: Vec<(String, String)> = vec![
                    ("sid".into(), log.sid().to_string()),
                    ("last_ts".into(), last.to_string()),
                    ("first_ts".into(), first.to_string()),
                    ("files".into(), files.to_string()),
                    ("size".into(), log.size().to_string()),
                ];
                for (sid, r) in log.replicas() {
                    out.push((format!("replica_{sid}"), replica_line(last, &r)));
                }
                Some(
                    out.into_iter()
                        .flat_map(|(k, v)| [k.into_bytes(), v.into_bytes()])
                        .collect(),
                )
            }
            b"ulogforget" => {
                let sid: u32 = std::str::from_utf8(args.first()?)
                    .ok()?
                    .trim()
                    .parse()
                    .ok()?;
                let r = log.replicas().remove(&sid)?;
                log.forget(sid)
                    .then(|| vec![replica_line(last, &r).into_bytes()])
            }
            _ => None,
        }
    }
}

/// Kura's replication functions of Tyrant `misc` ([`Replication::misc`]). They change no
/// data: a read-only replica takes them as it takes `setmst`.
pub const MISC_FUNCS: [&[u8]; 2] = [b"ulogstat", b"ulogforget"];

/// Whether `name` is one of [`MISC_FUNCS`].
pub fn is_misc(name: &[u8]) -> bool {
    MISC_FUNCS.contains(&name)
}

/// A replica as `stat` and `ulogstat` show it: its confirmed position, its lag behind the
/// log's newest record `last` in seconds, whether it is connected, its address and when it
/// was last heard from (Unix seconds).
fn replica_line(last: u64, r: &kura_engine::ulog::Replica) -> String {
    format!(
        "confirmed={} lag={:.6} connected={} seen={} addr={}",
        r.confirmed,
        last.saturating_sub(r.confirmed) as f64 / 1e6,
        r.connected,
        r.last_seen,
        r.addr
    )
}

impl std::fmt::Debug for Replication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replication")
            .field("sid", &self.sid)
            .field("master", &self.master())
            .finish()
    }
}
