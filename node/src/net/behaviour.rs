//! The composed libp2p behaviour of a Peerage node and the swarm builder.
//!
//! Protocols: the block list of banned peers (`node/src/net/guard.rs`), connection limits and
//! the pre-handshake [`Gate`]; Kademlia in server mode (protocol name configurable, default
//! `/peerage/kad/1.0.0`; periodic bootstrap as configured, record republication off since the
//! node stores no records); gossipsub (carries election broadcasts, see
//! `node/src/election/driver.rs`; hardened as below); identify; ping; and four request-response
//! protocols over the length-prefixed [`FrameCodec`]: `/peerage/election/2.0.0` (one
//! `overlay::wire` frame per request), `/peerage/members/2.0.0` (membership sync,
//! `node/src/directory/members.rs`), `/peerage/coords/2.0.0` and `/peerage/superpeer/2.0.0`.
//!
//! **Inbound memory.** Every request is read under one process-wide [`InboundBudget`]
//! (`max_inbound_bytes`) and charged to its sender, which holds at most its share
//! (`max_inbound_bytes_per_peer`, 8 MiB; the request-response behaviours are [`Accounted`] so
//! that each connection's codec knows its peer). Per connection, each protocol serves at most
//! a few streams at once ([`ELECTION_STREAMS`] and its neighbours), so one connection could
//! otherwise hold 8 x 1 MiB + 8 x 2.4 MiB + 4 x 256 B + 16 x 64 KiB, about 28 MiB of frames.
//!
//! **Frame limits are the protocol's, not the operator's.** Each protocol reads at most what
//! its largest well-formed message takes ([`ELECTION_FRAME_BYTES`], [`MEMBERS_FRAME_BYTES`],
//! [`MAX_GOSSIP_BYTES`] and the coordinate and super-peer limits), the same in every node, so
//! an honest peer's frame is never refused for its size and a longer one is malformed (the
//! codec reports it; `Offence::MalformedFrame`).
//!
//! **Gossipsub, as its v1.1 hardening guide intends.** `validate_messages`, so that a message
//! is forwarded only after the node has decoded it, checked its author's signature and
//! reported `Accept` (`Reject` for garbage and forgeries, `Ignore` for a foreign scope or a
//! stamp outside its window): an invalid message is never relayed. Gossipsub itself runs in
//! anonymous mode, message ids a SHA-256 of the bytes: its strict mode checks a signature on
//! every copy before dropping duplicates (six per message with a mesh of six), where ours
//! (`overlay::directory::broadcast`) is checked once per distinct message. In a 1,000-node
//! leader swarm those checks were a fifth of the steady CPU. A maximum transmit size of 64 KiB: an election
//! broadcast is one small `overlay::wire` frame plus its recipients, a list of 32-byte ids
//! only when it is neither "all", "above" nor "below" (a larger broadcast falls back to point
//! to point). Peer scores ([`score_params`]): on our one topic, invalid messages weigh -100
//! each (decaying by half in a minute), so two push a peer under the graylist threshold
//! (-80) and its messages are ignored; first deliveries earn a little (capped) and time in
//! the mesh a little more, so honest mesh peers sit above zero. Mesh delivery deficits are
//! not scored: the election topic is quiet for minutes when the leader holds, and a deficit
//! would punish honest peers for the silence. IP colocation is not scored: a local swarm runs
//! every node on one address. Thresholds: gossip -10, publish -50, graylist -80, peer
//! exchange accepted from +10, opportunistic grafting below a median of +1.
//!
//! **Lazy gossip to one peer.** Each heartbeat a node advertises the messages of its last three
//! heartbeats (IHAVE) to `max(gossip_lazy, gossip_factor x non-mesh peers)` peers. With
//! libp2p's `gossip_lazy` of 6 and about 10 connections per node, that is every non-mesh peer
//! every second while the leader's `Alive` (one broadcast a second) is in the window: a frame
//! to each, for a message the mesh has already delivered. We set `gossip_lazy` to 0, so a
//! quarter of the non-mesh peers (one or two) hear the IHAVE: in a 500-node leader swarm the
//! steady CPU fell from 83-87 % to 64 % of one core. A message the mesh
//! lost is still repaired, by fewer peers; the next `Alive` follows within a second anyway.
//!
//! Transports: TCP + noise + yamux and QUIC for `peerage run`; libp2p's in-process memory
//! transport (+ noise + yamux) for big one-process swarms, where TCP would exhaust the file
//! descriptors (both ends of every loopback connection live in the process). Emulated link
//! latency (`peerage swarm --latency internet`) is inserted between noise and yamux, where
//! both sides know the remote peer id (`node/src/net/latency_transport.rs`): `build_swarm_with_latency`
//! is the one place that assembles transports. `/peerage/coords/2.0.0` exchanges Vivaldi
//! coordinates (`node/src/coords/driver.rs`).

use crate::config::NodeConfig;
use crate::net::accounted::Accounted;
use crate::net::codec::InboundBudget;
use crate::net::gate::Gate;
use crate::net::latency_transport::{self, EmulatedLink};
use crate::net::quiet_kad::QuietKad;
use libp2p::core::{transport::MemoryTransport, upgrade::Version, Transport};
use libp2p::identity::Keypair;
use libp2p::swarm::NetworkBehaviour;
use libp2p::{
    allow_block_list, connection_limits, gossipsub, identify, kad, noise, ping, request_response, tcp, yamux,
    StreamProtocol, Swarm, SwarmBuilder,
};
use sha2::{Digest, Sha256};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

/// The election request-response protocol.
pub const ELECTION_PROTOCOL: &str = "/peerage/election/2.0.0";
/// The membership sync protocol.
pub const MEMBERS_PROTOCOL: &str = "/peerage/members/2.0.0";
/// The identify protocol version string.
pub const IDENTIFY_PROTOCOL: &str = "/peerage/id/1.0.0";
/// The Vivaldi coordinate exchange protocol (`node/src/coords/driver.rs`).
pub const COORDS_PROTOCOL: &str = "/peerage/coords/2.0.0";
/// Inbound streams one connection may hold open per protocol (read or awaiting the answer).
pub const ELECTION_STREAMS: usize = 8;
/// Eight: while 1,000 directories fill, a node's replies to digests pile up behind a slow peer,
/// and with four, 981 of 1,330 failed syncs were requests refused by this cap before they
/// were sent; with eight, 1 of 59 and 7 of 93 in two runs.
pub const MEMBERS_STREAMS: usize = 8;
pub const COORDS_STREAMS: usize = 4;
pub const SUPERPEER_STREAMS: usize = 16;
/// Largest gossipsub message (module doc).
pub const MAX_GOSSIP_BYTES: usize = 64 * 1024;
/// Largest election frame: what `overlay::wire` decodes at most.
pub const ELECTION_FRAME_BYTES: usize = overlay::wire::MAX_FRAME_BYTES;
/// Largest members frame: the largest sync frame of the directory protocol.
pub const MEMBERS_FRAME_BYTES: usize = overlay::directory::MAX_MEMBERS_FRAME_BYTES;
/// The largest frame any request-response protocol reads: a peer's share of the inbound
/// budget holds at least one.
pub const LARGEST_FRAME: usize = max(
    max(ELECTION_FRAME_BYTES, MEMBERS_FRAME_BYTES),
    max(crate::coords::driver::MAX_COORDS_FRAME, crate::superpeer::wire::MAX_SP_FRAME_BYTES),
);

const fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

#[derive(NetworkBehaviour)]
pub struct Behaviour {
    /// Banned peers (`node/src/net/guard.rs`): refused before anything else sees them.
    pub blocked: allow_block_list::Behaviour<allow_block_list::BlockedPeers>,
    pub limits: connection_limits::Behaviour,
    pub gate: Gate,
    /// Kademlia; its automatic bootstrap walks do not dial (`node/src/net/quiet_kad.rs`).
    pub kad: QuietKad,
    pub gossipsub: gossipsub::Behaviour,
    pub identify: identify::Behaviour,
    pub ping: ping::Behaviour,
    pub election: Accounted,
    pub members: Accounted,
    pub coords: Accounted,
    /// `/peerage/superpeer/2.0.0` (`node/src/superpeer/wire.rs`, `node/src/superpeer/driver.rs`).
    pub superpeer: Accounted,
}

/// Which transport stack a node uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// TCP + noise + yamux, and QUIC.
    TcpQuic,
    /// In-process memory transport + noise + yamux.
    Memory,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Gossipsub peer-score parameters for the election topic `topic` (module doc).
pub fn score_params(topic: gossipsub::TopicHash) -> (gossipsub::PeerScoreParams, gossipsub::PeerScoreThresholds) {
    let topic_params = gossipsub::TopicScoreParams {
        topic_weight: 1.0,
        time_in_mesh_weight: 0.1,
        time_in_mesh_quantum: Duration::from_secs(1),
        time_in_mesh_cap: 30.0,
        first_message_deliveries_weight: 1.0,
        first_message_deliveries_decay: 0.9,
        first_message_deliveries_cap: 10.0,
        mesh_message_deliveries_weight: 0.0,
        mesh_failure_penalty_weight: 0.0,
        invalid_message_deliveries_weight: -100.0,
        // Per decay interval (1 s): halves in about a minute.
        invalid_message_deliveries_decay: 0.989,
        ..Default::default()
    };
    let mut params = gossipsub::PeerScoreParams {
        topic_score_cap: 50.0,
        app_specific_weight: 0.0,
        ip_colocation_factor_weight: 0.0,
        behaviour_penalty_weight: -10.0,
        behaviour_penalty_threshold: 6.0,
        behaviour_penalty_decay: 0.99,
        decay_interval: Duration::from_secs(1),
        decay_to_zero: 0.01,
        retain_score: Duration::from_secs(600),
        ..Default::default()
    };
    params.topics.insert(topic, topic_params);
    let thresholds = gossipsub::PeerScoreThresholds {
        gossip_threshold: -10.0,
        publish_threshold: -50.0,
        graylist_threshold: -80.0,
        accept_px_threshold: 10.0,
        opportunistic_graft_threshold: 1.0,
    };
    (params, thresholds)
}

/// The election topic of scope `scope`.
pub fn election_topic(scope: u64) -> gossipsub::IdentTopic {
    gossipsub::IdentTopic::new(format!("peerage/election/{scope}"))
}

/// A gossipsub message's id: the first 20 bytes of the SHA-256 of its bytes (gossipsub runs
/// anonymous, with neither source nor sequence number to name a message by).
pub fn broadcast_message_id(m: &gossipsub::Message) -> gossipsub::MessageId {
    gossipsub::MessageId::new(&Sha256::digest(&m.data)[..20])
}

/// How long gossipsub remembers a message id. A replayed broadcast is dropped by this cache
/// until its stamp leaves the window on both sides, and refused by the window afterwards
/// (`overlay::directory::broadcast`).
const DUPLICATE_CACHE: Duration = Duration::from_secs(60);
const _: () = assert!(DUPLICATE_CACHE.as_micros() >= 2 * overlay::directory::BROADCAST_WINDOW_US as u128);

fn make_behaviour(key: &Keypair, cfg: &NodeConfig, budget: &Arc<InboundBudget>) -> Result<Behaviour, BoxError> {
    let peer = key.public().to_peer_id();
    let l = &cfg.limits;
    let limits = connection_limits::Behaviour::new(
        connection_limits::ConnectionLimits::default()
            .with_max_established(Some(l.max_established))
            .with_max_established_per_peer(Some(l.max_established_per_peer))
            .with_max_pending_incoming(Some(l.max_pending_incoming))
            .with_max_pending_outgoing(Some(l.max_pending_outgoing)),
    );
    let gate = Gate::new(l.inbound_gate as usize, l.outbound_gate as usize, l.max_established as usize);

    let mut kcfg = kad::Config::new(StreamProtocol::try_from_owned(cfg.kad_protocol.clone())?);
    kcfg.set_periodic_bootstrap_interval(
        (cfg.timing.kad_bootstrap_s > 0).then(|| Duration::from_secs(cfg.timing.kad_bootstrap_s)),
    );
    kcfg.set_query_timeout(Duration::from_secs(20));
    kcfg.set_max_packet_size(16 * 1024);
    kcfg.set_record_ttl(None);
    kcfg.set_replication_interval(None);
    kcfg.set_publication_interval(None);
    kcfg.set_provider_publication_interval(None);
    kcfg.set_kbucket_size(NonZeroUsize::new(crate::runtime::node::KAD_K).ok_or("bucket size")?);
    // Entries come from the member directory (`node/src/runtime/node.rs`, `fill_routing_table`), never from
    // connections: with automatic inserts a new connection to a peer whose bucket is full
    // makes kad dial the bucket's oldest disconnected entry to test it, a dial per
    // connection that the gate then refuses.
    kcfg.set_kbucket_inserts(kad::BucketInserts::Manual);
    let mut kad = kad::Behaviour::with_config(peer, kad::store::MemoryStore::new(peer), kcfg);
    // On loopback no external address is ever confirmed: be a server explicitly.
    kad.set_mode(Some(kad::Mode::Server));
    // The automatic walk kad starts on inserts into a small table cannot be configured
    // away in libp2p-kad 0.49; `QuietKad` keeps it from dialling unless walks were asked for.
    let kad = QuietKad::new(kad, cfg.timing.kad_bootstrap_s > 0);

    let gcfg = gossipsub::ConfigBuilder::default()
        .validation_mode(gossipsub::ValidationMode::Anonymous)
        .message_id_fn(broadcast_message_id)
        .validate_messages()
        .max_transmit_size(MAX_GOSSIP_BYTES)
        .heartbeat_interval(Duration::from_secs(1))
        .mesh_n(6)
        .mesh_n_low(4)
        .mesh_n_high(crate::config::GOSSIP_MESH_HIGH as usize)
        .mesh_outbound_min(2)
        .gossip_lazy(0)
        .duplicate_cache_time(DUPLICATE_CACHE)
        .build()?;
    let mut gossipsub = gossipsub::Behaviour::new(gossipsub::MessageAuthenticity::Anonymous, gcfg)?;
    let (params, thresholds) = score_params(election_topic(cfg.scope).hash());
    gossipsub.with_peer_score(params, thresholds)?;

    let identify = identify::Behaviour::new(
        identify::Config::new(IDENTIFY_PROTOCOL.into(), key.public())
            .with_agent_version(format!("peerage/{}", env!("CARGO_PKG_VERSION")))
            .with_interval(Duration::from_secs(300)),
    );
    let ping = ping::Behaviour::new(
        ping::Config::new()
            .with_interval(Duration::from_secs(cfg.timing.ping_s.max(1)))
            .with_timeout(Duration::from_millis(cfg.timing.ping_timeout_ms.max(100))),
    );
    let rr_cfg = request_response::Config::default().with_request_timeout(cfg.request_timeout());
    let election = Accounted::new(
        ELECTION_PROTOCOL,
        ELECTION_FRAME_BYTES,
        budget,
        rr_cfg.clone().with_max_concurrent_streams(ELECTION_STREAMS),
    );
    let members = Accounted::new(
        MEMBERS_PROTOCOL,
        MEMBERS_FRAME_BYTES,
        budget,
        rr_cfg.clone().with_max_concurrent_streams(MEMBERS_STREAMS),
    );
    let coords = Accounted::new(
        COORDS_PROTOCOL,
        crate::coords::driver::MAX_COORDS_FRAME,
        budget,
        rr_cfg.clone().with_max_concurrent_streams(COORDS_STREAMS),
    );
    let superpeer = Accounted::new(
        crate::superpeer::wire::SUPERPEER_PROTOCOL,
        crate::superpeer::wire::MAX_SP_FRAME_BYTES,
        budget,
        rr_cfg.with_request_timeout(Duration::from_secs(3)).with_max_concurrent_streams(SUPERPEER_STREAMS),
    );
    let blocked = allow_block_list::Behaviour::default();
    Ok(Behaviour { blocked, limits, gate, kad, gossipsub, identify, ping, election, members, coords, superpeer })
}

/// Build a swarm for `key` with the chosen transport; every inbound request is read under
/// `budget`.
pub fn build_swarm(
    key: Keypair,
    cfg: &NodeConfig,
    transport: TransportKind,
    budget: &Arc<InboundBudget>,
) -> anyhow::Result<Swarm<Behaviour>> {
    build_swarm_with_latency(key, cfg, transport, budget, None)
}

/// [`build_swarm`], optionally with emulated link latency (`node/src/net/latency_transport.rs`): the
/// delay sits between noise and yamux, and over QUIC on every substream.
pub fn build_swarm_with_latency(
    key: Keypair,
    cfg: &NodeConfig,
    transport: TransportKind,
    budget: &Arc<InboundBudget>,
    latency: Option<&EmulatedLink>,
) -> anyhow::Result<Swarm<Behaviour>> {
    let idle = Duration::from_millis(cfg.limits.idle_timeout_ms);
    if let Some(link) = latency {
        let link = link.clone();
        let base = SwarmBuilder::with_existing_identity(key).with_tokio();
        let swarm = match transport {
            TransportKind::TcpQuic => base
                .with_other_transport(|key| -> Result<_, BoxError> {
                    Ok(latency_transport::tcp_quic_transport(key, link)?)
                })?
                .with_behaviour(|key| make_behaviour(key, cfg, budget))?
                .with_swarm_config(|c| c.with_idle_connection_timeout(idle))
                .build(),
            TransportKind::Memory => base
                .with_other_transport(|key| -> Result<_, BoxError> {
                    Ok(latency_transport::memory_transport(key, link)?)
                })?
                .with_behaviour(|key| make_behaviour(key, cfg, budget))?
                .with_swarm_config(|c| c.with_idle_connection_timeout(idle))
                .build(),
        };
        return Ok(swarm);
    }
    let swarm = match transport {
        TransportKind::TcpQuic => SwarmBuilder::with_existing_identity(key)
            .with_tokio()
            .with_tcp(tcp::Config::default().nodelay(true), noise::Config::new, yamux::Config::default)?
            .with_quic()
            .with_behaviour(|key| make_behaviour(key, cfg, budget))?
            .with_swarm_config(|c| c.with_idle_connection_timeout(idle))
            .build(),
        TransportKind::Memory => SwarmBuilder::with_existing_identity(key)
            .with_tokio()
            .with_other_transport(|key| -> Result<_, BoxError> {
                Ok(MemoryTransport::default()
                    .upgrade(Version::V1)
                    .authenticate(noise::Config::new(key)?)
                    .multiplex(yamux::Config::default())
                    .boxed())
            })?
            .with_behaviour(|key| make_behaviour(key, cfg, budget))?
            .with_swarm_config(|c| c.with_idle_connection_timeout(idle))
            .build(),
    };
    Ok(swarm)
}
