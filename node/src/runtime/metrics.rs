//! Prometheus metrics: libp2p-metrics (swarm, kad, gossipsub, identify, ping) plus Peerage's
//! own: elections started and won, election messages by direction and type, the current
//! leader, peers and members. Served as the Prometheus text format over HTTP at the address
//! given by `--metrics` (any path), from a small `tiny_http` server on its own thread.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::{counter::Counter, family::Family, gauge::Gauge};
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MsgLabels {
    pub direction: String,
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaderLabels {
    pub leader: String,
}

/// Peerage's own metrics, plus libp2p's.
pub struct Metrics {
    pub libp2p: libp2p::metrics::Metrics,
    pub elections_started: Counter,
    pub elections_won: Counter,
    pub leader_changes: Counter,
    pub messages: Family<MsgLabels, Counter>,
    pub leader: Family<LeaderLabels, Gauge>,
    pub is_leader: Gauge,
    pub peers: Gauge,
    pub members: Gauge,
    pub bad_frames: Counter,
    /// This node's Vivaldi coordinate: error estimate, height (s), accepted RTT samples.
    pub vivaldi_error: Gauge<f64, AtomicU64>,
    pub vivaldi_height_seconds: Gauge<f64, AtomicU64>,
    pub vivaldi_samples: Gauge,
    /// Super-peer role (`node/src/superpeer/driver.rs`): 0 starting, 1 unattached, 2 member, 3 token
    /// holder before its hold time, 4 super peer.
    pub superpeer_role: Gauge,
    /// Members of this node's cluster (0 unless it serves one).
    pub superpeer_cluster_size: Gauge,
    /// Super-peer messages sent.
    pub superpeer_messages_sent: Gauge,
    /// Token moves this node made (tokens handed on).
    pub superpeer_token_moves: Gauge,
}

impl Metrics {
    /// Register everything in a new registry.
    pub fn new() -> (Arc<Metrics>, Registry) {
        let mut registry = Registry::default();
        let libp2p = libp2p::metrics::Metrics::new(&mut registry);
        let sub = registry.sub_registry_with_prefix("peerage");
        let m = Metrics {
            libp2p,
            elections_started: Counter::default(),
            elections_won: Counter::default(),
            leader_changes: Counter::default(),
            messages: Family::default(),
            leader: Family::default(),
            is_leader: Gauge::default(),
            peers: Gauge::default(),
            members: Gauge::default(),
            bad_frames: Counter::default(),
            vivaldi_error: Gauge::default(),
            vivaldi_height_seconds: Gauge::default(),
            vivaldi_samples: Gauge::default(),
            superpeer_role: Gauge::default(),
            superpeer_cluster_size: Gauge::default(),
            superpeer_messages_sent: Gauge::default(),
            superpeer_token_moves: Gauge::default(),
        };
        sub.register("elections_started", "Elections this node started", m.elections_started.clone());
        sub.register("elections_won", "Elections this node won", m.elections_won.clone());
        sub.register("leader_changes", "Times the named leader changed", m.leader_changes.clone());
        sub.register("election_messages", "Election messages by direction and type", m.messages.clone());
        sub.register("leader", "1 for the leader this node names (label: its node id)", m.leader.clone());
        sub.register("is_leader", "1 if this node is the leader", m.is_leader.clone());
        sub.register("peers", "Connected peers", m.peers.clone());
        sub.register("members", "Known election group members", m.members.clone());
        sub.register("bad_frames", "Malformed or oversized frames received", m.bad_frames.clone());
        sub.register("vivaldi_error", "Vivaldi error estimate of this node's coordinate", m.vivaldi_error.clone());
        sub.register(
            "vivaldi_height_seconds",
            "Height of this node's Vivaldi coordinate",
            m.vivaldi_height_seconds.clone(),
        );
        sub.register("vivaldi_samples", "RTT samples Vivaldi accepted", m.vivaldi_samples.clone());
        sub.register(
            "superpeer_role",
            "Super-peer role: 0 starting, 1 unattached, 2 member, 3 token holder, 4 super peer",
            m.superpeer_role.clone(),
        );
        sub.register("superpeer_cluster_size", "Members of this node's cluster", m.superpeer_cluster_size.clone());
        sub.register("superpeer_messages_sent", "Super-peer messages sent", m.superpeer_messages_sent.clone());
        sub.register("superpeer_token_moves", "Tokens this node handed on", m.superpeer_token_moves.clone());
        (Arc::new(m), registry)
    }

    pub fn message(&self, direction: &str, kind: &str) {
        self.messages.get_or_create(&MsgLabels { direction: direction.into(), kind: kind.into() }).inc();
    }

    pub fn set_leader(&self, old: Option<&str>, new: Option<&str>, is_me: bool) {
        if let Some(o) = old {
            self.leader.get_or_create(&LeaderLabels { leader: o.into() }).set(0);
        }
        if let Some(n) = new {
            self.leader.get_or_create(&LeaderLabels { leader: n.into() }).set(1);
        }
        self.is_leader.set(is_me as i64);
        self.leader_changes.inc();
    }
}

/// Serve `registry` at `addr` on a background thread. Returns the bound address.
pub fn serve(addr: SocketAddr, registry: Registry) -> anyhow::Result<SocketAddr> {
    let server = tiny_http::Server::http(addr).map_err(|e| anyhow::anyhow!("cannot serve metrics on {addr}: {e}"))?;
    let bound = server.server_addr().to_ip().unwrap_or(addr);
    let registry = Arc::new(registry);
    std::thread::Builder::new().name("metrics".into()).spawn(move || {
        for req in server.incoming_requests() {
            let mut body = String::new();
            let resp = match prometheus_client::encoding::text::encode(&mut body, &registry) {
                Ok(()) => {
                    let r = tiny_http::Response::from_string(body);
                    match tiny_http::Header::from_bytes(
                        &b"Content-Type"[..],
                        &b"application/openmetrics-text; version=1.0.0; charset=utf-8"[..],
                    ) {
                        Ok(h) => r.with_header(h),
                        Err(()) => r,
                    }
                }
                Err(e) => tiny_http::Response::from_string(format!("encoding error: {e}")).with_status_code(500),
            };
            let _ = req.respond(resp);
        }
    })?;
    Ok(bound)
}
