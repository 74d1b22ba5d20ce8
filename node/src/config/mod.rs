//! Node configuration: the keys of a TOML `--config` file and the `peerage run` flags that
//! override them, validated into a [`NodeConfig`].
//!
//! Every limit is set on purpose rather than left at a library default: connection
//! counts (see `overlay/src/connections/` for why each number), frame sizes, timeouts.
//! The numbers follow measurements of rust-libp2p swarms on a 2-core machine: a node
//! refuses unwanted outbound dials before dialling once it has `outbound_gate` connections and
//! inbound connections before the handshake at `inbound_gate`; the peer manager keeps between
//! `target_low` and `target_high` peers.
//!
//! Why these defaults fit together (a quiet steady state): a node dials on
//! its own only below `target_low` (6), and unwanted (Kademlia) dials are refused from the
//! same count, so kad never pushes a node above what the peer manager wants; the peer manager
//! prunes only above `target_high` (24), far above the ~6-12 connections a node settles at,
//! so a prune (which can push the pruned peer below `target_low` and make it dial) is rare
//! and is not answered by a re-dial loop; inbound connections are admitted up to
//! `inbound_gate` (40), above `target_high`, because an inbound refusal of an on-demand
//! election dial would look like a crash to the sender; `max_established` (48) keeps every
//! node within a bound of 50 connections.
//!
//! With super peers on, a node talks to more peers on purpose: its head or members, its 16
//! overlay neighbours (kept, never pruned) and its gossipsub mesh. `target_high` then rises to
//! 24 + 16 + 8 = 48, the inbound gate rises to the same line and the hard cap makes room for a
//! full cluster (at 24 the peer manager pruned half of the connections the 200-node swarm
//! opened, and re-dialling them was its largest CPU cost). The inbound gate sits *at* the
//! prune line, not above it: other nodes' DHT lookups then never push a node into pruning. With
//! the gate 16 above it (the margin for on-demand election dials) the 200-node swarm's
//! coordinates stayed unfit for 3.5 minutes with both cores saturated, instead of about 55 s;
//! with the line at 40 and the gate at 48 the peer manager pruned what other nodes' lookups
//! had filled, and the swarm opened 79,000 connections instead of 34,000. Members at this
//! gate refused each other's election messages after a kill, and several of a killed
//! cluster's members won its re-election at once; the gate keeps room for a re-election's
//! group instead (`Gate::set_election_group`).
//!
//! Unknown keys are errors (`deny_unknown_fields`), so a typo in a config file is reported,
//! not ignored.
pub mod emulation;
pub mod superpeer;

use libp2p::{multiaddr::Protocol, Multiaddr, PeerId};
use overlay::{Algorithm, ElectionConfig};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Connection and message-size limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Hard cap on established connections (libp2p `connection_limits`).
    pub max_established: u32,
    /// Hard cap per peer (two allows a simultaneous dial from both ends).
    pub max_established_per_peer: u32,
    /// Cap on connections still in their handshake, each direction.
    pub max_pending_incoming: u32,
    pub max_pending_outgoing: u32,
    /// Refuse inbound connections *before the handshake* once this many are established.
    pub inbound_gate: u32,
    /// Refuse outbound dials we did not ask for (kad queries) *before dialling* once this many
    /// are established. Dials the node itself wants (bootstrap, peer manager, election
    /// messages) pass up to `max_established`.
    pub outbound_gate: u32,
    /// The peer manager dials routing-table peers while below this many peers...
    pub target_low: u32,
    /// ...and prunes random peers that are neither gossipsub mesh peers nor in recent election
    /// use while above this many.
    pub target_high: u32,
    /// Only connections older than this are pruned.
    pub prune_min_age_ms: u64,
    /// A connection that carried an election message is kept at least this long afterwards.
    pub election_keep_ms: u64,
    /// Between `target_low` and `target_high`, the peer manager replaces its oldest prunable
    /// connection by one to a random member about this often: a rotating sample of peers for
    /// the Vivaldi coordinate (`overlay/src/connections/manager.rs`). 0: never. Unset: three
    /// ping periods (`timing.ping_s`), so that a peer is measured a few times before it goes.
    pub rotate_ms: Option<u64>,
    /// libp2p idle connection timeout (connections with no open stream).
    pub idle_timeout_ms: u64,
    /// Bytes of inbound request frames the whole process reads or holds at once
    /// (`node/src/net/codec.rs`): a frame beyond it is refused before it is read.
    pub max_inbound_bytes: u64,
    /// Of those, the bytes one peer's frames may hold at once, over all its connections and
    /// protocols; a frame beyond it is refused and reported (`Offence::OverBudget`). At
    /// least the largest frame limit, at most `max_inbound_bytes`.
    pub max_inbound_bytes_per_peer: u64,
    /// Request-response timeout for election and membership requests.
    pub request_timeout_ms: u64,
}

impl Limits {
    /// The peer manager's rotation period (`rotate_ms`, by default three pings of `ping_s`).
    pub fn rotate_every(&self, ping_s: u64) -> Option<Duration> {
        let ms = self.rotate_ms.unwrap_or(ping_s.max(1).saturating_mul(3_000));
        (ms > 0).then(|| Duration::from_millis(ms))
    }

    /// Sets the peer manager's `target_high` to `h` and keeps the gates at or above it:
    /// inbound connections are admitted at least up to the prune line, and the hard cap at
    /// least 8 above the inbound gate (the defaults' 48 - 40). Neither ever shrinks.
    pub fn set_target_high(&mut self, h: u32) {
        self.target_high = h;
        self.inbound_gate = self.inbound_gate.max(h);
        self.max_established = self.max_established.max(self.inbound_gate.saturating_add(8));
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_established: 48,
            max_established_per_peer: 2,
            max_pending_incoming: 32,
            max_pending_outgoing: 32,
            inbound_gate: 40,
            outbound_gate: 6,
            target_low: 6,
            target_high: 24,
            prune_min_age_ms: 10_000,
            election_keep_ms: 5_000,
            rotate_ms: None,
            idle_timeout_ms: 10_000,
            max_inbound_bytes: 64 * 1024 * 1024,
            max_inbound_bytes_per_peer: 8 * 1024 * 1024,
            request_timeout_ms: 5_000,
        }
    }
}

/// `[directory]`: what member records may claim and how large the directory may grow. Every
/// node of a scope must use the same values: a record one node admits and another refuses
/// keeps their directories apart (`overlay::directory::admission`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DirectoryConfig {
    /// The highest priority a member may claim (the operator's priority scale).
    pub max_priority: u64,
    /// Leading zero bits the hash of a member's id must have: each identity then costs about
    /// `2^id_difficulty` key generations (`docs/DESIGN.md`, "Threat model"). 0 turns the
    /// puzzle off (a closed swarm whose operator runs every node).
    pub id_difficulty: u32,
    /// How long a member record lives; a live member re-signs its own when half is over, and
    /// a member that stopped doing so leaves once it expired.
    pub record_ttl_s: u64,
    /// The directory's size cap.
    pub max_members: usize,
}

impl Default for DirectoryConfig {
    fn default() -> Self {
        let b = overlay::directory::Bounds::default();
        DirectoryConfig {
            max_priority: b.max_priority,
            id_difficulty: 8,
            record_ttl_s: b.max_ttl_us / 1_000_000,
            max_members: b.max_members,
        }
    }
}

impl DirectoryConfig {
    /// The admission bounds these settings give.
    pub fn bounds(&self) -> overlay::directory::Bounds {
        overlay::directory::Bounds {
            max_priority: self.max_priority,
            id_difficulty: self.id_difficulty,
            max_ttl_us: self.record_ttl_s.saturating_mul(1_000_000),
            max_members: self.max_members,
            ..overlay::directory::Bounds::default()
        }
    }
}

/// Most peers in a node's gossipsub mesh (`mesh_n_high`, `node/src/net/behaviour.rs`).
pub const GOSSIP_MESH_HIGH: u32 = 8;

/// The largest accepted `members_push_fanout` (more only multiplies the traffic).
pub const MAX_PUSH_FANOUT: u32 = 16;

/// Pacing of the node's own periodic work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timing {
    /// The membership must be quiet this long before the start-up election.
    pub settle_ms: u64,
    /// A node that still names no leader this long (plus up to the same again, random) after
    /// settling starts an election itself.
    pub fallback_ms: u64,
    /// Base period of the member-directory anti-entropy: one digest to one random connected
    /// peer per period (`node/src/directory/members.rs`); also the node's housekeeping tick.
    pub members_sync_ms: u64,
    /// The digest period doubles after each equal comparison up to this (a converged swarm is
    /// quiet: one small digest per node per this period).
    pub members_sync_max_ms: u64,
    /// Rumour fan-out of the member directory: once per `members_sync_ms`, the entries that
    /// changed since the last time are pushed to this many random connected peers, once
    /// (`node/src/directory/members.rs`); 0 (the default) turns it off: digest anti-entropy only. Off by default
    /// because at N = 1,000 on the loaded 2-core machine fan-out 3 did not converge faster
    /// (it multiplies the sync requests, and the swarm was CPU-starved; docs/RESULTS.md).
    pub members_push_fanout: u32,
    /// Period of the `status` JSON line.
    pub status_ms: u64,
    /// Period of Kademlia bootstrap (random walk); 0 (the default) turns periodic bootstrap
    /// off: the routing table is filled from the member directory without dialling (see
    /// `node/src/runtime/node.rs`), so a periodic walk would only dial peers the gate then refuses.
    pub kad_bootstrap_s: u64,
    /// Ping period: RTT samples for the Vivaldi coordinates, and the liveness check of every
    /// connection.
    pub ping_s: u64,
    /// A ping unanswered this long fails, and the node closes that connection (libp2p leaves
    /// it open): a frozen or cut-off peer's connection goes quiet without an error, and only
    /// a closed one is redialled and, when the redial fails, reported down.
    pub ping_timeout_ms: u64,
    /// Whether the node starts swarm-wide leader elections itself (at start-up, after the
    /// fallback delay, when the leader is reported down). `false`: it only answers others'
    /// election messages. A super-peer swarm (`peerage swarm --superpeers ...
    /// --no-leader-election`) measures the elections inside its clusters, which super-peer
    /// selection runs, and a 200-node election storm on a loaded machine otherwise competes
    /// with them for the CPU.
    pub leader_election: bool,
    /// With a `[superpeer]` table: how long after start-up the node waits before its first
    /// super-peer lookups (plus a random share of twice that, so that nodes started together
    /// spread them), so that its routing table has entries.
    pub superpeer_start_ms: u64,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            settle_ms: 2_000,
            fallback_ms: 4_000,
            members_sync_ms: 500,
            members_sync_max_ms: 8_000,
            members_push_fanout: 0,
            status_ms: 2_000,
            kad_bootstrap_s: 0,
            ping_s: 15,
            ping_timeout_ms: 10_000,
            leader_election: true,
            superpeer_start_ms: 3_000,
        }
    }
}

/// The TOML file (and the flags' target): everything optional, defaults filled in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Vec<String>,
    pub bootstrap: Vec<String>,
    pub algorithm: Option<String>,
    pub priority: u64,
    pub identity: Option<PathBuf>,
    pub metrics: Option<String>,
    pub kad_protocol: String,
    /// Election group scope (0 = the whole swarm).
    pub scope: u64,
    pub election: ElectionConfig,
    pub limits: Limits,
    pub timing: Timing,
    /// `[directory]`: member-record bounds.
    pub directory: DirectoryConfig,
    /// `[superpeer]`: super-peer selection and clusters (`overlay::superpeer::config`); a node
    /// without the table runs none (`node/src/config/superpeer.rs`).
    pub superpeer: Option<overlay::superpeer::SuperPeerConfig>,
    /// `[emulation]`: emulated Internet latency and seed-derived identity (`node/src/config/emulation.rs`).
    pub emulation: crate::config::emulation::EmulationFileConfig,
}

impl Default for FileConfig {
    fn default() -> Self {
        FileConfig {
            listen: vec!["/ip4/0.0.0.0/tcp/0".into(), "/ip4/0.0.0.0/udp/0/quic-v1".into()],
            bootstrap: vec![],
            algorithm: None,
            priority: 0,
            identity: None,
            metrics: None,
            kad_protocol: DEFAULT_KAD_PROTOCOL.into(),
            scope: 0,
            election: ElectionConfig::default(),
            limits: Limits::default(),
            timing: Timing::default(),
            directory: DirectoryConfig::default(),
            superpeer: None,
            emulation: Default::default(),
        }
    }
}

/// The default Kademlia protocol name.
pub const DEFAULT_KAD_PROTOCOL: &str = "/peerage/kad/1.0.0";

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path}: {source}")]
    Toml { path: PathBuf, source: toml::de::Error },
    #[error("bad listen address {addr:?}: {reason}")]
    Listen { addr: String, reason: String },
    #[error("bad bootstrap address {addr:?}: {reason}")]
    Bootstrap { addr: String, reason: String },
    #[error(transparent)]
    Algorithm(#[from] overlay::election::UnknownAlgorithm),
    #[error("bad election settings: {0}")]
    Election(#[from] overlay::election::ConfigError),
    #[error("bad metrics address {addr:?}: {reason}")]
    Metrics { addr: String, reason: String },
    #[error("bad kad protocol name {name:?}: it must start with '/'")]
    KadProtocol { name: String },
    #[error("bad limits: {0}")]
    Limits(String),
    #[error(transparent)]
    SuperPeer(#[from] crate::config::superpeer::SuperPeerSettingsError),
}

/// A bootstrap peer: an address, with the peer id if the address ends in `/p2p/<id>`.
#[derive(Debug, Clone, PartialEq)]
pub struct BootstrapPeer {
    pub addr: Multiaddr,
    pub peer: Option<PeerId>,
}

/// The validated configuration a node runs with.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub listen: Vec<Multiaddr>,
    pub bootstrap: Vec<BootstrapPeer>,
    pub priority: u64,
    pub identity: Option<PathBuf>,
    pub metrics: Option<std::net::SocketAddr>,
    pub kad_protocol: String,
    pub scope: u64,
    pub election: ElectionConfig,
    pub limits: Limits,
    pub timing: Timing,
    pub directory: DirectoryConfig,
    /// Super-peer selection (`node/src/config/superpeer.rs`); `None` when off.
    pub superpeer: Option<crate::config::superpeer::SuperPeerSettings>,
}

impl FileConfig {
    /// Read a TOML file.
    pub fn load(path: &Path) -> Result<FileConfig, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        toml::from_str(&text).map_err(|source| ConfigError::Toml { path: path.to_path_buf(), source })
    }

    /// Validate into a [`NodeConfig`].
    pub fn resolve(&self) -> Result<NodeConfig, ConfigError> {
        let listen = self
            .listen
            .iter()
            .map(|a| a.parse::<Multiaddr>().map_err(|e| ConfigError::Listen { addr: a.clone(), reason: e.to_string() }))
            .collect::<Result<Vec<_>, _>>()?;
        let bootstrap = self.bootstrap.iter().map(|a| parse_bootstrap(a)).collect::<Result<Vec<_>, _>>()?;
        let mut election = self.election.clone();
        if let Some(a) = &self.algorithm {
            election.algorithm = a.parse::<Algorithm>()?;
        }
        election.validate()?;
        let metrics = match &self.metrics {
            None => None,
            Some(s) => Some(s.parse().map_err(|e: std::net::AddrParseError| ConfigError::Metrics {
                addr: s.clone(),
                reason: format!("{e} (expected host:port, e.g. 127.0.0.1:9100)"),
            })?),
        };
        if !self.kad_protocol.starts_with('/') {
            return Err(ConfigError::KadProtocol { name: self.kad_protocol.clone() });
        }
        let l = &self.limits;
        if l.max_established == 0 || l.max_established_per_peer == 0 {
            return Err(ConfigError::Limits("max_established and max_established_per_peer must be positive".into()));
        }
        if l.target_low > l.target_high || l.target_high > l.max_established {
            return Err(ConfigError::Limits(format!(
                "need target_low <= target_high <= max_established, got {} / {} / {}",
                l.target_low, l.target_high, l.max_established
            )));
        }
        let largest = crate::net::behaviour::LARGEST_FRAME as u64;
        if l.max_inbound_bytes_per_peer < largest || l.max_inbound_bytes_per_peer > l.max_inbound_bytes {
            return Err(ConfigError::Limits(format!(
                "max_inbound_bytes_per_peer must be between the largest frame limit ({largest}) and max_inbound_bytes ({}), got {}",
                l.max_inbound_bytes, l.max_inbound_bytes_per_peer
            )));
        }
        if l.request_timeout_ms == 0 {
            return Err(ConfigError::Limits("request_timeout_ms must be positive".into()));
        }
        if self.timing.members_push_fanout > MAX_PUSH_FANOUT {
            return Err(ConfigError::Limits(format!(
                "members_push_fanout is {}, at most {MAX_PUSH_FANOUT}",
                self.timing.members_push_fanout
            )));
        }
        let d = &self.directory;
        if d.record_ttl_s < 60 || d.max_members < 2 || d.id_difficulty > 32 {
            return Err(ConfigError::Limits(format!(
                "directory: need record_ttl_s >= 60, max_members >= 2, id_difficulty <= 32; got {} / {} / {}",
                d.record_ttl_s, d.max_members, d.id_difficulty
            )));
        }
        if self.priority > d.max_priority {
            return Err(ConfigError::Limits(format!(
                "priority {} is above the directory's max_priority {}",
                self.priority, d.max_priority
            )));
        }
        let superpeer = crate::config::superpeer::resolve(self.superpeer.as_ref(), self.timing.superpeer_start_ms)?;
        let mut limits = self.limits.clone();
        if let Some(sp) = &superpeer {
            // A super peer keeps one connection per member: make room for a full cluster on
            // top of the node's usual peers (documented in `node/src/config/superpeer.rs`). Only a
            // node that serves a cluster takes inbound connections up to that hard cap
            // (`Gate::set_serving`); the others keep the inbound gate, below the cap to
            // which their own lookups dial (`overlay/src/connections/admission.rs`).
            //
            // The peer manager keeps the state machine's neighbours (`SuperPeerDriver::keeps`),
            // so it prunes above room for them and a gossipsub mesh on top of the usual
            // `target_high` (at 24 the 200-node prefix swarm pruned half of the connections it
            // opened and dialled them again).
            let overlay = (sp.protocol.discovery.neighbours.min(1_000) as u32).saturating_add(GOSSIP_MESH_HIGH);
            limits.set_target_high(limits.target_high.max(Limits::default().target_high.saturating_add(overlay)));
            let cap = sp.protocol.cluster_cap;
            let room = cap.saturating_add(limits.target_high).saturating_add(8);
            limits.max_established = limits.max_established.max(room).max(limits.inbound_gate.saturating_add(16));
        }
        Ok(NodeConfig {
            listen,
            bootstrap,
            priority: self.priority,
            identity: self.identity.clone(),
            metrics,
            kad_protocol: self.kad_protocol.clone(),
            scope: self.scope,
            election,
            limits,
            timing: self.timing.clone(),
            directory: self.directory.clone(),
            superpeer,
        })
    }
}

/// Parse one bootstrap multiaddr (optionally ending in `/p2p/<peer id>`).
pub fn parse_bootstrap(s: &str) -> Result<BootstrapPeer, ConfigError> {
    let bad = |reason: String| ConfigError::Bootstrap { addr: s.to_string(), reason };
    let addr: Multiaddr = s.parse().map_err(|e: libp2p::multiaddr::Error| bad(e.to_string()))?;
    let peer = match addr.iter().last() {
        Some(Protocol::P2p(p)) => Some(p),
        _ => None,
    };
    if addr.iter().next().is_none() {
        return Err(bad("empty address".into()));
    }
    Ok(BootstrapPeer { addr, peer })
}

impl NodeConfig {
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.limits.request_timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_resolve() {
        let c = FileConfig::default().resolve().unwrap();
        assert_eq!(c.kad_protocol, "/peerage/kad/1.0.0");
        assert_eq!(c.listen.len(), 2);
    }

    #[test]
    fn toml_keys_and_errors() {
        let c: FileConfig = toml::from_str(
            "listen = [\"/ip4/127.0.0.1/tcp/0\"]\nalgorithm = \"ring\"\npriority = 4\n[election]\nanswer_timeout_ms = 300\n",
        )
        .unwrap();
        let r = c.resolve().unwrap();
        assert_eq!(r.election.algorithm, Algorithm::Ring);
        assert_eq!(r.election.answer_timeout_ms, 300);
        assert_eq!(r.priority, 4);
        assert!(toml::from_str::<FileConfig>("lisen = []").is_err());
        let bad = FileConfig { algorithm: Some("paxos".into()), ..Default::default() };
        assert!(bad.resolve().unwrap_err().to_string().contains("paxos"));
        let bad = FileConfig { bootstrap: vec!["not-an-addr".into()], ..Default::default() };
        assert!(bad.resolve().unwrap_err().to_string().contains("bootstrap"));
        let bad = FileConfig { metrics: Some("nowhere".into()), ..Default::default() };
        assert!(bad.resolve().is_err());
    }

    #[test]
    fn super_peers_make_room_for_the_overlay() {
        let plain = FileConfig::default().resolve().unwrap().limits;
        let mut c: FileConfig = toml::from_str("[superpeer]\nmethod = \"prefix\"\ncluster_cap = 40\n").unwrap();
        let sp = c.clone().resolve().unwrap();
        let neighbours = sp.superpeer.as_ref().unwrap().protocol.discovery.neighbours as u32;
        let l = &sp.limits;
        assert_eq!(l.target_high, plain.target_high + neighbours + GOSSIP_MESH_HIGH, "neighbours and mesh on top");
        assert_eq!(l.inbound_gate, l.target_high, "other nodes' lookups never push a node into pruning");
        assert_eq!(l.max_established, 40 + l.target_high + 8, "a full cluster on top of the usual peers");
        // A larger target set by the user stays; a smaller one is raised.
        c.limits.target_high = 70;
        c.limits.inbound_gate = 70;
        c.limits.max_established = 80;
        assert_eq!(c.clone().resolve().unwrap().limits.inbound_gate, 70);
        assert_eq!(c.clone().resolve().unwrap().limits.target_high, 70);
        c.limits.target_high = 10;
        assert_eq!(c.resolve().unwrap().limits.target_high, l.target_high);
        assert_eq!(plain.target_high, Limits::default().target_high, "without super peers nothing moves");
    }

    #[test]
    fn the_gates_stay_above_the_prune_line() {
        let mut l = Limits::default();
        l.set_target_high(l.target_high);
        assert_eq!(l, Limits::default(), "the defaults already keep the margins");
        l.set_target_high(50);
        assert_eq!((l.target_high, l.inbound_gate, l.max_established), (50, 50, 58));
        l.set_target_high(8);
        assert_eq!((l.target_high, l.inbound_gate, l.max_established), (8, 50, 58), "gates never shrink");
    }

    #[test]
    fn bootstrap_peer_id_is_taken_from_p2p() {
        let id = libp2p::identity::Keypair::generate_ed25519().public().to_peer_id();
        let b = parse_bootstrap(&format!("/ip4/127.0.0.1/tcp/4001/p2p/{id}")).unwrap();
        assert_eq!(b.peer, Some(id));
        assert_eq!(parse_bootstrap("/ip4/127.0.0.1/tcp/4001").unwrap().peer, None);
    }
}
