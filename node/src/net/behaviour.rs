//! The composed libp2p behaviour of a Peerage node and the swarm builder.
//!
//! Protocols: connection limits and the pre-handshake [`Gate`]; Kademlia in server mode
//! (protocol name configurable, default `/peerage/kad/1.0.0`; periodic bootstrap as
//! configured, record republication off since the node stores no records); gossipsub with
//! signed messages and strict validation (carries election broadcasts, see
//! `node/src/election/driver.rs`); identify; ping; and two request-response protocols over the raw
//! [`FrameCodec`]: `/peerage/election/1.0.0` (one `overlay::wire` frame per request) and
//! `/peerage/members/1.0.0` (membership sync, `node/src/directory/members.rs`).
//!
//! Transports: TCP + noise + yamux and QUIC for `peerage run`; libp2p's in-process memory
//! transport (+ noise + yamux) for big one-process swarms, where TCP would exhaust the file
//! descriptors (both ends of every loopback connection live in the process). Emulated link
//! latency (`peerage swarm --latency internet`) is inserted between noise and yamux, where
//! both sides know the remote peer id (`node/src/net/latency_transport.rs`): `build_swarm_with_latency`
//! is the one place that assembles transports. `/peerage/coords/1.0.0` exchanges Vivaldi
//! coordinates (`node/src/coords/driver.rs`).

use crate::config::NodeConfig;
use crate::net::codec::FrameCodec;
use crate::net::gate::Gate;
use crate::net::latency_transport::{self, EmulatedLink};
use crate::net::quiet_kad::QuietKad;
use libp2p::core::{transport::MemoryTransport, upgrade::Version, Transport};
use libp2p::identity::Keypair;
use libp2p::swarm::NetworkBehaviour;
use libp2p::{
    connection_limits, gossipsub, identify, kad, noise, ping, request_response, tcp, yamux, StreamProtocol, Swarm,
    SwarmBuilder,
};
use std::num::NonZeroUsize;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

/// The election request-response protocol.
pub const ELECTION_PROTOCOL: &str = "/peerage/election/1.0.0";
/// The membership sync protocol.
pub const MEMBERS_PROTOCOL: &str = "/peerage/members/1.0.0";
/// The identify protocol version string.
pub const IDENTIFY_PROTOCOL: &str = "/peerage/id/1.0.0";
/// The Vivaldi coordinate exchange protocol (`node/src/coords/driver.rs`).
pub const COORDS_PROTOCOL: &str = "/peerage/coords/1.0.0";

#[derive(NetworkBehaviour)]
pub struct Behaviour {
    pub limits: connection_limits::Behaviour,
    pub gate: Gate,
    /// Kademlia; its automatic bootstrap walks do not dial (`node/src/net/quiet_kad.rs`).
    pub kad: QuietKad,
    pub gossipsub: gossipsub::Behaviour,
    pub identify: identify::Behaviour,
    pub ping: ping::Behaviour,
    pub election: request_response::Behaviour<FrameCodec>,
    pub members: request_response::Behaviour<FrameCodec>,
    pub coords: request_response::Behaviour<FrameCodec>,
    /// `/peerage/superpeer/1.0.0` (`node/src/superpeer/wire.rs`, `node/src/superpeer/driver.rs`).
    pub superpeer: request_response::Behaviour<FrameCodec>,
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

fn make_behaviour(key: &Keypair, cfg: &NodeConfig, unreadable: &Arc<AtomicU64>) -> Result<Behaviour, BoxError> {
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
        .validation_mode(gossipsub::ValidationMode::Strict)
        .max_transmit_size(l.max_gossip_bytes)
        .heartbeat_interval(Duration::from_secs(1))
        .mesh_n(6)
        .mesh_n_low(4)
        .mesh_n_high(crate::config::GOSSIP_MESH_HIGH as usize)
        .mesh_outbound_min(2)
        .duplicate_cache_time(Duration::from_secs(60))
        .build()?;
    let gossipsub = gossipsub::Behaviour::new(gossipsub::MessageAuthenticity::Signed(key.clone()), gcfg)?;

    let identify = identify::Behaviour::new(
        identify::Config::new(IDENTIFY_PROTOCOL.into(), key.public())
            .with_agent_version(format!("peerage/{}", env!("CARGO_PKG_VERSION")))
            .with_interval(Duration::from_secs(300)),
    );
    let ping = ping::Behaviour::new(
        ping::Config::new()
            .with_interval(Duration::from_secs(cfg.timing.ping_s.max(1)))
            .with_timeout(Duration::from_secs(10)),
    );
    let rr_cfg =
        request_response::Config::default().with_request_timeout(cfg.request_timeout()).with_max_concurrent_streams(64);
    let election = request_response::Behaviour::with_codec(
        FrameCodec::with_counter(l.max_election_frame, unreadable.clone()),
        [(StreamProtocol::new(ELECTION_PROTOCOL), request_response::ProtocolSupport::Full)],
        rr_cfg.clone(),
    );
    let members = request_response::Behaviour::with_codec(
        FrameCodec::with_counter(l.max_members_frame, unreadable.clone()),
        [(StreamProtocol::new(MEMBERS_PROTOCOL), request_response::ProtocolSupport::Full)],
        rr_cfg.clone(),
    );
    let coords = request_response::Behaviour::with_codec(
        FrameCodec::with_counter(crate::coords::driver::MAX_COORDS_FRAME, unreadable.clone()),
        [(StreamProtocol::new(COORDS_PROTOCOL), request_response::ProtocolSupport::Full)],
        rr_cfg.clone(),
    );
    let superpeer = request_response::Behaviour::with_codec(
        FrameCodec::with_counter(crate::superpeer::wire::MAX_SP_FRAME_BYTES, unreadable.clone()),
        [(StreamProtocol::new(crate::superpeer::wire::SUPERPEER_PROTOCOL), request_response::ProtocolSupport::Full)],
        rr_cfg.with_request_timeout(Duration::from_secs(3)),
    );
    Ok(Behaviour { limits, gate, kad, gossipsub, identify, ping, election, members, coords, superpeer })
}

/// Build a swarm for `key` with the chosen transport. `unreadable` counts inbound requests
/// the codec refused (oversized, cut off).
pub fn build_swarm(
    key: Keypair,
    cfg: &NodeConfig,
    transport: TransportKind,
    unreadable: &Arc<AtomicU64>,
) -> anyhow::Result<Swarm<Behaviour>> {
    build_swarm_with_latency(key, cfg, transport, unreadable, None)
}

/// [`build_swarm`], optionally with emulated link latency (`node/src/net/latency_transport.rs`): the
/// delay sits between noise and yamux, and over QUIC on every substream.
pub fn build_swarm_with_latency(
    key: Keypair,
    cfg: &NodeConfig,
    transport: TransportKind,
    unreadable: &Arc<AtomicU64>,
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
                .with_behaviour(|key| make_behaviour(key, cfg, unreadable))?
                .with_swarm_config(|c| c.with_idle_connection_timeout(idle))
                .build(),
            TransportKind::Memory => base
                .with_other_transport(|key| -> Result<_, BoxError> {
                    Ok(latency_transport::memory_transport(key, link)?)
                })?
                .with_behaviour(|key| make_behaviour(key, cfg, unreadable))?
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
            .with_behaviour(|key| make_behaviour(key, cfg, unreadable))?
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
            .with_behaviour(|key| make_behaviour(key, cfg, unreadable))?
            .with_swarm_config(|c| c.with_idle_connection_timeout(idle))
            .build(),
    };
    Ok(swarm)
}
