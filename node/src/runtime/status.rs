//! Status output: JSON lines on stdout for `peerage run`, and a shared snapshot for the
//! in-process swarm runner and tests.
//!
//! Every line is one JSON object with `ts` (Unix ms), `event` and `peer` (this node's peer
//! id). Events: `started`, `listening`, `peers` (count changed), `members` (count changed),
//! `election_started`, `leader` (the named leader changed), `rejected`, `status` (periodic),
//! `shutdown`. Lines are written whole and flushed, so a reader can parse them as they come.

use serde::Serialize;
use serde_json::{json, Value};
use std::io::Write;
use std::sync::Mutex;

/// A point-in-time view of one node, shared with the swarm runner.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct Snapshot {
    pub leader: Option<String>,
    pub state: String,
    pub in_election: bool,
    pub peers: usize,
    pub connections: usize,
    pub members: usize,
    /// The directory has settled once, so each sender's new members are paced.
    #[serde(default)]
    pub members_paced: bool,
    pub routing_table: usize,
    pub elections_started: u64,
    pub elections_won: u64,
    pub connections_opened: u64,
    pub refused_inbound: u64,
    pub refused_outbound: u64,
    pub messages_sent: u64,
    pub messages_received: u64,
    pub broadcasts_sent: u64,
    pub bad_frames: u64,
    /// Pings that failed; each closes its connection (`node/src/runtime/node.rs`).
    pub ping_failures: u64,
    /// Election requests unanswered for the request timeout; each closes its peer's
    /// connections (`node/src/runtime/node.rs`).
    pub requests_stalled: u64,
    /// Election messages whose claims the directory contradicted (`overlay::directory::claims`).
    pub claims_refused: u64,
    /// Misbehaviour reports and bans (`node/src/net/guard.rs`).
    pub guard: crate::net::guard::GuardStats,
    /// The most bytes of inbound frames held at once, process-wide (`node/src/net/codec.rs`).
    pub inbound_bytes_peak: u64,
    /// Inbound streams cut before their frame ended (closing connections; not bad frames).
    pub inbound_streams_cut: u64,
    /// Inbound frames refused because their sender held its whole share of the budget.
    pub inbound_over_share: u64,
    /// Failed reads the codec could not queue for the guard (its queue was full).
    pub inbound_reports_dropped: u64,
    /// Tombstones of departed members.
    pub tombstones: usize,
    /// Listen addresses (with `/p2p/<id>`).
    pub listen: Vec<String>,
    /// Why the node stopped on its own (for example: no bootstrap peer reachable).
    pub fatal: Option<String>,
    /// This node's Vivaldi coordinate (`node/src/coords/driver.rs`; distances in seconds).
    pub coordinate: Option<overlay::coords::Coordinate>,
    /// RTT samples Vivaldi accepted so far.
    pub vivaldi_samples: u64,
    /// RTT samples dropped because the emulated link was recently late (`node/src/coords/driver.rs`).
    pub vivaldi_dropped_late: u64,
    /// RTT samples dropped because the node's event loop ran late during them (`overlay::detect::stall`).
    pub vivaldi_dropped_stall: u64,
    /// Times the application-level coordinate (what super-peer selection sees) moved
    /// (`node/src/coords/driver.rs`, "Application coordinate").
    pub app_coordinate_updates: u64,
    /// How late the node's event loop ran its last periodic tick, ms (`overlay::detect::stall`).
    pub loop_lateness_ms: f64,
    /// The latest the node's event loop ever ran a periodic tick, ms (`overlay::detect::stall`).
    pub loop_lateness_worst_ms: f64,
    /// Super-peer role, cluster and token (`node/src/superpeer/driver.rs`), when super peers are on.
    pub superpeer: Option<crate::superpeer::driver::SpStatus>,
    /// Member-directory sync counters (`node/src/directory/members.rs`).
    pub sync: crate::directory::members::SyncStats,
    /// The current member-sync period (ms; grows while settled).
    pub sync_period_ms: u64,
    /// When the member directory last changed (for the swarm runner; not serialised).
    #[serde(skip)]
    pub members_changed_at: Option<std::time::Instant>,
}

/// The latest snapshot of a node.
#[derive(Debug, Default)]
pub struct Probe {
    snap: Mutex<Snapshot>,
}

impl Probe {
    pub fn set(&self, s: Snapshot) {
        if let Ok(mut g) = self.snap.lock() {
            *g = s;
        }
    }
    pub fn get(&self) -> Snapshot {
        self.snap.lock().map(|g| g.clone()).unwrap_or_default()
    }
    /// `f` of the latest snapshot, without copying it (the swarm's role log reads every
    /// node's four times a second).
    pub fn read<R>(&self, f: impl FnOnce(&Snapshot) -> R) -> R {
        match self.snap.lock() {
            Ok(g) => f(&g),
            Err(p) => f(&p.into_inner()),
        }
    }
}

/// Writes JSON status lines (to stdout, or nowhere).
#[derive(Debug, Clone)]
pub struct StatusSink {
    enabled: bool,
    peer: String,
}

impl StatusSink {
    pub fn stdout(peer: String) -> Self {
        StatusSink { enabled: true, peer }
    }
    pub fn silent() -> Self {
        StatusSink { enabled: false, peer: String::new() }
    }
    /// Does anything get written? A caller whose line is costly to build asks first (a
    /// swarm's thousand nodes are silent, and serialising each one's status every period
    /// for nothing was 1.5 % of a 1,000-node swarm's steady CPU).
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    pub fn emit(&self, event: &str, fields: Value) {
        if !self.enabled {
            return;
        }
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let mut obj = json!({ "ts": ts, "event": event, "peer": self.peer });
        if let (Some(o), Value::Object(extra)) = (obj.as_object_mut(), fields) {
            o.extend(extra);
        }
        let mut out = std::io::stdout().lock();
        // A closed stdout (reader gone) must not stop the node.
        let _ = writeln!(out, "{obj}");
        let _ = out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `read` sees what `set` last wrote, as `get` does, and a silent sink says so.
    #[test]
    fn a_probe_reads_the_latest_snapshot_in_place() {
        let p = Probe::default();
        p.set(Snapshot { members: 7, ..Snapshot::default() });
        p.set(Snapshot { members: 9, state: "leader".into(), ..Snapshot::default() });
        assert_eq!(p.read(|s| (s.members, s.state.clone())), (9, "leader".to_string()));
        assert_eq!(p.get().members, 9);
        assert!(!StatusSink::silent().is_enabled());
        assert!(StatusSink::stdout("x".into()).is_enabled());
    }
}
