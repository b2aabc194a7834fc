//! Replication: the master's side (`feed`: a connection that asked for the update log becomes
//! a stream, served by a thread of its own) and the replica's (`follow`: one thread that
//! follows the master, applies its records and keeps its position). Both sides speak Kura's
//! own stream, Tokyo Tyrant's (0xA0) and Kyoto Tycoon's (0xB1).

pub mod acks;
pub mod feed;
pub mod follow;

use kura_engine::ulog::logged::Logged;
use kura_engine::Store;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

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

/// What a bootstrap from a Kura master's snapshot does with the records this database already
/// holds (`kura serve --bootstrap`). A replica that has followed the same master before (it has
/// a position in that master's log) holds a copy of it: a new snapshot of that master replaces
/// the copy in any mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Bootstrap {
    /// Do not follow: say why in the log and in `stat` (`repl_error`), keep serving the data.
    #[default]
    Refuse,
    /// Discard the records (their number is logged), then load the snapshot.
    Replace,
    /// Keep the records: the snapshot's records are applied over them, so keys only this
    /// database holds stay, and a key both hold takes the master's value unless this server
    /// changed the key after the snapshot's time stamp (last writer wins, as two masters
    /// order their writes).
    Merge,
}

impl Bootstrap {
    pub fn parse(s: &str) -> Option<Bootstrap> {
        Some(match s {
            "refuse" => Bootstrap::Refuse,
            "replace" => Bootstrap::Replace,
            "merge" => Bootstrap::Merge,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Bootstrap::Refuse => "refuse",
            Bootstrap::Replace => "replace",
            Bootstrap::Merge => "merge",
        }
    }
}

/// What the replica knows of its master and how far it got.
#[derive(Clone, Debug, Default)]
pub struct FollowStatus {
    pub connected: bool,
    /// When a record, a heartbeat or the handshake last came from the master.
    pub heard: Option<Instant>,
    /// When this master began to be followed.
    pub since: Option<Instant>,
    /// Following stopped until the master is changed (a bootstrap refused).
    pub halted: bool,
    /// The server id of the master whose copy this database holds (a position saved in its
    /// log, or a snapshot of it loaded): a new snapshot of that master replaces only it.
    pub copy_of: Option<u32>,
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

/// Silence from a connected master longer than this counts as delay (its heartbeats come
/// every second).
const SILENCE_US: u64 = 2_000_000;

impl FollowStatus {
    /// How far behind the master, in microseconds: how far its log is ahead of what was
    /// applied here, or, when the master is not connected (or has said nothing for over
    /// 2 s), the time since it was last heard from (since following began when it never
    /// was), whichever is more. So a replica whose master is gone reports a delay that grows.
    pub fn lag_us(&self) -> u64 {
        // Before any position, the master's time stamp says nothing of how far behind.
        let log = match self.position {
            0 => 0,
            p => self.master_last.saturating_sub(p) / self.units_per_us.max(1),
        };
        let silent = self
            .heard
            .or(self.since)
            .map_or(0, |t| t.elapsed().as_micros() as u64);
        if !self.connected || silent > SILENCE_US {
            log.max(silent)
        } else {
            log
        }
    }
}

/// Writes a line of a level to the server's log.
pub type LogFn = dyn Fn(crate::context::Level, &str) + Send + Sync;

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
    /// The protocol the master speaks, as given (`--master-protocol`); `None`: found out by a
    /// probe of the master ([`follow`]).
    pub protocol: Option<MasterProtocol>,
    /// The protocol a probe found the master to speak.
    pub(crate) detected: Mutex<Option<MasterProtocol>>,
    /// What a bootstrap does with the records this database holds (`--bootstrap`).
    pub bootstrap: Bootstrap,
    /// The next bootstrap replaces the records this database holds, whatever `bootstrap`
    /// says (Tyrant `setmst` with Kura's replace option).
    pub(crate) force_replace: AtomicBool,
    /// Why the last `setmst` was refused (empty after one that was taken).
    setmst_refused: Mutex<String>,
    /// Where a replica with no saved position starts: after this time stamp of the master's
    /// log (`--master-ts`: a replica seeded from a copy of the master's data).
    pub initial_ts: Option<u64>,
    /// A position to go on from, set at run time (Tyrant `setmst` with a time stamp).
    reset_ts: Mutex<Option<u64>>,
    /// Operations of keyspaces not sent to Tyrant and Kyoto Tycoon slaves (their streams name
    /// no keyspace).
    pub keyspace_skipped: AtomicU64,
    /// Client writes wait for replicas' acknowledgements (`--sync-replicas`).
    pub sync_acks: Option<Arc<acks::SyncAcks>>,
    pub stop: Arc<AtomicBool>,
    log: Box<LogFn>,
}

impl Replication {
    pub fn new(
        sid: u32,
        store: Arc<dyn Store>,
        logged: Option<Arc<Logged>>,
        pos_file: Option<PathBuf>,
        writable_replica: bool,
        log: Box<LogFn>,
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
            protocol: None,
            detected: Mutex::new(None),
            bootstrap: Bootstrap::Refuse,
            force_replace: AtomicBool::new(false),
            setmst_refused: Mutex::new(String::new()),
            initial_ts: None,
            reset_ts: Mutex::new(None),
            keyspace_skipped: AtomicU64::new(0),
            sync_acks: None,
            stop: Arc::new(AtomicBool::new(false)),
            log,
        }
    }

    /// An info line in the server's log.
    pub fn log(&self, msg: &str) {
        (self.log)(crate::context::Level::Info, msg)
    }

    /// A warning in the server's log: something went wrong with a peer or a record.
    pub fn warn(&self, msg: &str) {
        (self.log)(crate::context::Level::Warn, msg)
    }

    /// Follow `master` (or stop following with `None`).
    pub fn set_master(&self, master: Option<(String, u16)>) {
        *self.master.lock().unwrap_or_else(|p| p.into_inner()) = master;
        self.with_status(|s| {
            s.since = Some(Instant::now());
            s.heard = None;
            s.halted = false;
        });
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// Change the master at run time (Tyrant `setmst`, Kyoto Tycoon `tune_replication`):
    /// follow `master` (after its time stamp `ts` when above 0) and refuse client writes
    /// unless `--replica-writes` (`read_only`: the server's flag); `None` stops following and
    /// takes writes (a promotion). Refused as [`Replication::may_follow`] says, changing
    /// nothing.
    pub fn change_master(
        &self,
        read_only: &AtomicBool,
        master: Option<(String, u16)>,
        ts: u64,
        force: bool,
    ) -> Result<(), String> {
        let Some(m) = master else {
            self.set_master(None);
            read_only.store(false, Ordering::Relaxed);
            return Ok(());
        };
        self.may_follow(&m, force)?;
        if ts > 0 {
            self.set_master_at(m, ts);
        } else {
            self.set_master(Some(m));
        }
        read_only.store(!self.writable_replica, Ordering::Relaxed);
        Ok(())
    }

    /// The protocol of the master: as given, else as a probe found it (Kura's until then).
    pub fn protocol(&self) -> MasterProtocol {
        self.protocol
            .or(*self.detected.lock().unwrap_or_else(|p| p.into_inner()))
            .unwrap_or_default()
    }

    /// Whether this server may start following `master` (Tyrant `setmst`): refused, with the
    /// reason (also shown by `stat` as `setmst_refused`), when the database holds records and
    /// following would bootstrap from a snapshot that replaces them: the mode is `refuse`,
    /// `force` is not given, the master may speak Kura's protocol (the others send no
    /// snapshot), and it is not the master already followed. With `force`, the next
    /// bootstrap replaces the records.
    pub fn may_follow(&self, master: &(String, u16), force: bool) -> Result<(), String> {
        let held = self.store.count();
        let kura = self.protocol.is_none_or(|p| p == MasterProtocol::Kura);
        let same = self.master().as_ref() == Some(master) && self.status().position != 0;
        let refused = if force || self.bootstrap != Bootstrap::Refuse || held == 0 || !kura || same
        {
            String::new()
        } else {
            format!(
                "this server holds {held} records and following {}:{} would replace them \
                 with a snapshot of that master (kura remote setmst --force, or Tyrant setmst \
                 option 0x{:x}, replaces them; kura serve --bootstrap=merge keeps them)",
                master.0,
                master.1,
                kura_proto::tt_bin::SETMST_REPLACE
            )
        };
        *self
            .setmst_refused
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = refused.clone();
        if !refused.is_empty() {
            self.log(&format!("setmst refused: {refused}"));
            return Err(refused);
        }
        self.force_replace.store(force, Ordering::Relaxed);
        Ok(())
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

    /// The replication state as name / value pairs, the one source of what Tyrant `stat`,
    /// memcached `stats` and Kyoto Tycoon `report` / `status` show: the role (`repl_role`:
    /// `master` with an update log and no master, `replica` = read-only, `replica+writes` =
    /// one of two masters, `none`), `read_only` = the reason writes are refused, the
    /// master followed and its protocol, whether it is connected, the delay, the position,
    /// the last error; the log's newest time stamp and its replicas.
    pub fn report(&self, read_only: bool) -> Vec<(String, String)> {
        let master = self.master();
        let role = match (&master, &self.logged) {
            (Some(_), _) if read_only => "replica",
            (Some(_), _) => "replica+writes",
            (None, Some(_)) => "master",
            (None, None) => "none",
        };
        let mut out = vec![
            ("sid".to_string(), self.sid.to_string()),
            ("repl_role".to_string(), role.to_string()),
        ];
        if read_only {
            out.push(("read_only".into(), read_only_text(master.as_ref())));
        }
        let refused = self
            .setmst_refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if !refused.is_empty() {
            out.push(("setmst_refused".into(), refused));
        }
        let skipped = self.keyspace_skipped.load(Ordering::Relaxed);
        if skipped > 0 {
            out.push(("repl_keyspace_skipped".into(), skipped.to_string()));
        }
        if let Some(sa) = &self.sync_acks {
            out.push(("sync_replicas".into(), sa.need.to_string()));
            out.push(("sync_replicas_connected".into(), sa.connected().to_string()));
            out.push(("repl_sync_reached".into(), sa.reached().to_string()));
            let waits = sa.waits.load(Ordering::Relaxed);
            out.push(("repl_sync_waits".into(), waits.to_string()));
            let timeouts = sa.timeouts.load(Ordering::Relaxed);
            out.push(("repl_sync_timeouts".into(), timeouts.to_string()));
        }
        if let Some((h, p)) = master {
            let st = self.status();
            let proto = match (
                self.protocol,
                *self.detected.lock().unwrap_or_else(|p| p.into_inner()),
            ) {
                (Some(p), _) => p.name().to_string(),
                (None, Some(p)) => format!("{} (detected)", p.name()),
                (None, None) => "unknown (not yet detected)".to_string(),
            };
            out.push(("mhost".into(), h));
            out.push(("mport".into(), p.to_string()));
            out.push(("master_protocol".into(), proto));
            out.push(("rts".into(), st.position.to_string()));
            out.push(("master_sid".into(), st.master_sid.to_string()));
            out.push(("master_connected".into(), st.connected.to_string()));
            out.push(("delay".into(), format!("{:.6}", st.lag_us() as f64 / 1e6)));
            let heard = st.heard.map_or_else(
                || "never".to_string(),
                |t| format!("{:.3}", t.elapsed().as_secs_f64()),
            );
            out.push(("master_heard_ago".into(), heard));
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

/// Why a read-only replica refuses a write, as every protocol says it.
pub fn read_only_text(master: Option<&(String, u16)>) -> String {
    match master {
        Some((h, p)) if h.contains(':') => {
            format!("this server is a replica of [{h}]:{p} (read-only)")
        }
        Some((h, p)) => format!("this server is a replica of {h}:{p} (read-only)"),
        None => "this server is read-only".to_string(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn repl_on(store: Arc<dyn Store>) -> Replication {
        Replication::new(7, store, None, None, false, Box::new(|_, _| {}))
    }

    #[test]
    fn the_delay_grows_while_the_master_is_not_heard_from() {
        let ago = |ms| Instant::now().checked_sub(Duration::from_millis(ms));
        let mut st = FollowStatus {
            connected: true,
            heard: ago(100),
            master_last: 5_000_000,
            position: 4_000_000,
            units_per_us: 1,
            ..FollowStatus::default()
        };
        // Connected and heard from: the log's lag.
        assert_eq!(st.lag_us(), 1_000_000);
        // Gone: the time since it was last heard from, when that is more.
        st.connected = false;
        st.heard = ago(3000);
        assert!(st.lag_us() >= 3_000_000, "{}", st.lag_us());
        // Connected but silent past the heartbeats: the silence too.
        st.connected = true;
        assert!(st.lag_us() >= 3_000_000);
        // Never heard from: since following began. No position: no lag from time stamps.
        st = FollowStatus {
            since: ago(2000),
            master_last: 1_795_000_000_000_000,
            ..FollowStatus::default()
        };
        let lag = st.lag_us();
        assert!((2_000_000..60_000_000).contains(&lag), "{lag}");
    }

    #[test]
    fn setmst_on_a_server_that_holds_records_is_refused_unless_forced() {
        let db = kura_engine::open("*").unwrap();
        let r = repl_on(db.clone());
        let m = ("127.0.0.1".to_string(), 1978);
        // Empty: nothing to lose.
        assert!(r.may_follow(&m, false).is_ok());
        db.put_with(b"k", b"v", 0, 0).unwrap();
        let why = r.may_follow(&m, false).unwrap_err();
        assert!(why.contains("holds 1 records"), "{why}");
        assert!(r
            .report(false)
            .iter()
            .any(|(k, v)| k == "setmst_refused" && *v == why));
        // Forced: the next bootstrap replaces, and the refusal is gone from stat.
        assert!(r.may_follow(&m, true).is_ok());
        assert!(r.force_replace.load(Ordering::Relaxed));
        assert!(!r.report(false).iter().any(|(k, _)| k == "setmst_refused"));
        // A master of another protocol sends no snapshot; merge loses nothing.
        let mut r = repl_on(db.clone());
        r.protocol = Some(MasterProtocol::Tyrant);
        assert!(r.may_follow(&m, false).is_ok());
        let mut r = repl_on(db);
        r.bootstrap = Bootstrap::Merge;
        assert!(r.may_follow(&m, false).is_ok());
    }

    #[test]
    fn bootstrap_modes_by_name() {
        for b in [Bootstrap::Refuse, Bootstrap::Replace, Bootstrap::Merge] {
            assert_eq!(Bootstrap::parse(b.name()), Some(b));
        }
        assert_eq!(Bootstrap::parse("wipe"), None);
    }

    #[test]
    fn a_read_only_replica_says_whose_replica_it_is() {
        let m = ("10.0.0.1".to_string(), 1978);
        assert_eq!(
            read_only_text(Some(&m)),
            "this server is a replica of 10.0.0.1:1978 (read-only)"
        );
        let v6 = ("::1".to_string(), 1978);
        assert_eq!(
            read_only_text(Some(&v6)),
            "this server is a replica of [::1]:1978 (read-only)"
        );
    }
}
