//! A hostile peer we control: a real rust-libp2p swarm (memory transport, noise, yamux) that
//! speaks Peerage's protocols with crafted frames. It answers every request made to it with
//! "accepted" whatever it holds (a lying acknowledger), and can sign records with its own key
//! and with keys it generates (phantoms).
#![allow(dead_code)] // each test binary uses its own subset

use futures::StreamExt;
use libp2p::core::{transport::MemoryTransport, upgrade::Version, Transport};
use libp2p::identity::Keypair;
use libp2p::request_response::{self, Event, Message as RrMessage, OutboundRequestId, ProtocolSupport};
use libp2p::swarm::{NetworkBehaviour, SwarmEvent};
use libp2p::{gossipsub, noise, yamux, Multiaddr, PeerId, StreamProtocol, Swarm, SwarmBuilder};
use overlay::directory::{RecordBody, SignedRecord, SyncBody, SyncFrame, MEMBERS_VERSION};
use overlay::wire::{self, Body};
use overlay::Message;
use peerage_node::net::behaviour::{election_topic, ELECTION_PROTOCOL, MEMBERS_PROTOCOL};
use peerage_node::net::codec::{read_frame, varint, write_frame, InboundBudget, ACK_OK, MAX_RESPONSE_BYTES};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(NetworkBehaviour)]
pub struct AttackBehaviour {
    pub election: request_response::Behaviour<AttackCodec>,
    pub members: request_response::Behaviour<AttackCodec>,
    pub gossipsub: gossipsub::Behaviour,
}

/// What the attacker sends: a whole frame, or a frame's length and its first bytes, after
/// which the stream stalls (it holds the reader's reservation until a timeout ends it).
#[derive(Debug, Clone)]
pub enum Crafted {
    Whole(Vec<u8>),
    Stalled { announced: usize, sent: Vec<u8> },
}

/// The frame codec of `node/src/net/codec.rs` on the sending side, plus stalled frames.
#[derive(Debug, Clone)]
pub struct AttackCodec {
    budget: Arc<InboundBudget>,
}

impl Default for AttackCodec {
    fn default() -> Self {
        AttackCodec { budget: InboundBudget::new(u64::MAX / 2) }
    }
}

impl request_response::Codec for AttackCodec {
    type Protocol = StreamProtocol;
    type Request = Crafted;
    type Response = Vec<u8>;

    async fn read_request<T>(&mut self, _: &StreamProtocol, io: &mut T) -> std::io::Result<Crafted>
    where
        T: futures::AsyncRead + Unpin + Send,
    {
        Ok(Crafted::Whole(read_frame(io, 8 << 20, &self.budget, None).await?.bytes.clone()))
    }

    async fn read_response<T>(&mut self, _: &StreamProtocol, io: &mut T) -> std::io::Result<Vec<u8>>
    where
        T: futures::AsyncRead + Unpin + Send,
    {
        use futures::AsyncReadExt;
        let mut res = Vec::new();
        io.take(MAX_RESPONSE_BYTES).read_to_end(&mut res).await?;
        if res.is_empty() {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "no answer"));
        }
        Ok(res)
    }

    async fn write_request<T>(&mut self, _: &StreamProtocol, io: &mut T, req: Crafted) -> std::io::Result<()>
    where
        T: futures::AsyncWrite + Unpin + Send,
    {
        use futures::AsyncWriteExt;
        match req {
            Crafted::Whole(bytes) => write_frame(io, &bytes).await,
            Crafted::Stalled { announced, sent } => {
                let mut head = Vec::new();
                varint(announced as u64, &mut head);
                io.write_all(&head).await?;
                io.write_all(&sent).await?;
                io.flush().await?;
                futures::future::pending::<()>().await;
                Ok(())
            }
        }
    }

    async fn write_response<T>(&mut self, _: &StreamProtocol, io: &mut T, res: Vec<u8>) -> std::io::Result<()>
    where
        T: futures::AsyncWrite + Unpin + Send,
    {
        use futures::AsyncWriteExt;
        io.write_all(&res).await?;
        io.flush().await
    }
}

/// Which protocol a crafted frame goes over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Election,
    Members,
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ack(Vec<u8>),
    Failed(String),
}

pub struct Attacker {
    pub swarm: Swarm<AttackBehaviour>,
    pub key: Keypair,
    pub peer: PeerId,
    outcomes: HashMap<OutboundRequestId, Outcome>,
    connected: HashSet<PeerId>,
    /// When each peer last closed its connection to us.
    pub closed_at: HashMap<PeerId, Instant>,
    /// When the first crafted frame or message went out.
    pub first_sent: Option<Instant>,
}

/// Wall clock, microseconds.
pub fn wall_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

/// A key solving the id puzzle at `difficulty`.
pub fn key(difficulty: u32) -> Keypair {
    peerage_node::identity::generate(difficulty)
}

/// A record of `key` (one hour of life from now).
pub fn record(key: &Keypair, priority: u64, incarnation: u64, addrs: &[Multiaddr]) -> SignedRecord {
    let body = RecordBody {
        priority,
        incarnation,
        expires_us: incarnation + 3_600_000_000,
        addrs: addrs.iter().map(|a| a.to_vec()).collect(),
    };
    SignedRecord::sign(key, &body).expect("sign")
}

/// A members `Push` frame.
pub fn push(entries: Vec<SignedRecord>) -> Vec<u8> {
    postcard::to_stdvec(&SyncFrame { version: MEMBERS_VERSION, body: SyncBody::Push { entries, ask: vec![] } })
        .expect("encode")
}

/// An election frame of scope 0.
pub fn election(msg: Message) -> Vec<u8> {
    wire::encode(&Body::Election { scope: 0, msg }).expect("encode")
}

impl Attacker {
    pub fn new(difficulty: u32) -> Attacker {
        let key = key(difficulty);
        let peer = key.public().to_peer_id();
        let swarm = SwarmBuilder::with_existing_identity(key.clone())
            .with_tokio()
            .with_other_transport(|key| {
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
                    MemoryTransport::default()
                        .upgrade(Version::V1)
                        .authenticate(noise::Config::new(key)?)
                        .multiplex(yamux::Config::default())
                        .boxed(),
                )
            })
            .expect("transport")
            .with_behaviour(|_key| {
                let cfg = request_response::Config::default()
                    .with_request_timeout(Duration::from_secs(20))
                    .with_max_concurrent_streams(1024);
                // Gossipsub as the nodes run it (anonymous, ids a hash of the bytes), so that
                // what the attacker publishes reaches the nodes' own validation.
                let gcfg = gossipsub::ConfigBuilder::default()
                    .validation_mode(gossipsub::ValidationMode::Anonymous)
                    .message_id_fn(peerage_node::net::behaviour::broadcast_message_id)
                    .max_transmit_size(1 << 20)
                    .heartbeat_interval(Duration::from_millis(200))
                    .build()
                    .expect("gossipsub config");
                let mut gossipsub =
                    gossipsub::Behaviour::new(gossipsub::MessageAuthenticity::Anonymous, gcfg).expect("gossipsub");
                gossipsub.subscribe(&election_topic(0)).expect("subscribe");
                AttackBehaviour {
                    election: request_response::Behaviour::with_codec(
                        AttackCodec::default(),
                        [(StreamProtocol::new(ELECTION_PROTOCOL), ProtocolSupport::Full)],
                        cfg.clone(),
                    ),
                    members: request_response::Behaviour::with_codec(
                        AttackCodec::default(),
                        [(StreamProtocol::new(MEMBERS_PROTOCOL), ProtocolSupport::Full)],
                        cfg,
                    ),
                    gossipsub,
                }
            })
            .expect("behaviour")
            .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(60)))
            .build();
        Attacker {
            swarm,
            key,
            peer,
            outcomes: HashMap::new(),
            connected: HashSet::new(),
            closed_at: HashMap::new(),
            first_sent: None,
        }
    }

    /// Our own record at `priority`.
    pub fn own_record(&self, priority: u64) -> SignedRecord {
        record(&self.key, priority, wall_us(), &[])
    }

    /// Dial `addr` and wait for the connection (false if it fails or times out).
    pub async fn connect(&mut self, addr: &Multiaddr, peer: PeerId) -> bool {
        if self.swarm.dial(addr.clone()).is_err() {
            return false;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.connected.contains(&peer) {
                return true;
            }
            if !self.step(Duration::from_millis(100)).await && self.closed_at.contains_key(&peer) {
                // A dial error for this peer was recorded.
                return false;
            }
        }
        self.connected.contains(&peer)
    }

    /// Listen on `addr` (a `/memory/N` address), so honest nodes can dial us.
    pub async fn listen(&mut self, addr: &Multiaddr) -> Result<(), String> {
        self.swarm.listen_on(addr.clone()).map_err(|e| e.to_string())?;
        // The listener is up once the swarm reports the address.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if self.swarm.listeners().next().is_some() {
                return Ok(());
            }
            self.step(Duration::from_millis(50)).await;
        }
        Err(format!("no listener on {addr} after 5 s"))
    }

    pub fn is_connected(&self, peer: &PeerId) -> bool {
        self.connected.contains(peer)
    }

    /// Send a frame without waiting.
    pub fn fire(&mut self, proto: Proto, peer: &PeerId, bytes: Vec<u8>) -> OutboundRequestId {
        self.fire_crafted(proto, peer, Crafted::Whole(bytes))
    }

    /// Send a frame's length `announced` and its first `sent` bytes, then stall the stream.
    pub fn fire_stalled(&mut self, proto: Proto, peer: &PeerId, announced: usize, sent: usize) -> OutboundRequestId {
        self.fire_crafted(proto, peer, Crafted::Stalled { announced, sent: vec![1; sent.min(announced)] })
    }

    fn fire_crafted(&mut self, proto: Proto, peer: &PeerId, frame: Crafted) -> OutboundRequestId {
        self.first_sent.get_or_insert_with(Instant::now);
        match proto {
            Proto::Election => self.swarm.behaviour_mut().election.send_request(peer, frame),
            Proto::Members => self.swarm.behaviour_mut().members.send_request(peer, frame),
        }
    }

    /// Send a frame and wait for its acknowledgement or failure.
    pub async fn request(&mut self, proto: Proto, peer: &PeerId, bytes: Vec<u8>) -> Outcome {
        let id = self.fire(proto, peer, bytes);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(o) = self.outcomes.remove(&id) {
                return o;
            }
            self.step(Duration::from_millis(100)).await;
        }
        Outcome::Failed("no answer in 20 s".into())
    }

    /// The outcome of a fired request, if it ended.
    pub fn outcome(&mut self, id: &OutboundRequestId) -> Option<Outcome> {
        self.outcomes.remove(id)
    }

    /// Publish on the election topic.
    pub fn publish(&mut self, data: Vec<u8>) -> Result<(), String> {
        self.first_sent.get_or_insert_with(Instant::now);
        self.swarm.behaviour_mut().gossipsub.publish(election_topic(0), data).map(|_| ()).map_err(|e| e.to_string())
    }

    /// Run the swarm for `d`.
    pub async fn pump(&mut self, d: Duration) {
        let deadline = Instant::now() + d;
        while Instant::now() < deadline {
            self.step(deadline - Instant::now()).await;
        }
    }

    /// Run until `peer` closes its connection to us, at most `d`; true if it did.
    pub async fn until_closed(&mut self, peer: &PeerId, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        while Instant::now() < deadline && self.connected.contains(peer) {
            self.step(Duration::from_millis(50)).await;
        }
        !self.connected.contains(peer)
    }

    /// Handle events for at most `d`; false when it timed out without an event.
    async fn step(&mut self, d: Duration) -> bool {
        let ev = match tokio::time::timeout(d, self.swarm.select_next_some()).await {
            Ok(ev) => ev,
            Err(_) => return false,
        };
        match ev {
            SwarmEvent::ConnectionEstablished { peer_id, .. } => {
                self.connected.insert(peer_id);
            }
            SwarmEvent::ConnectionClosed { peer_id, num_established: 0, .. } => {
                self.connected.remove(&peer_id);
                self.closed_at.insert(peer_id, Instant::now());
            }
            SwarmEvent::OutgoingConnectionError { peer_id: Some(p), .. } => {
                self.closed_at.insert(p, Instant::now());
            }
            SwarmEvent::Behaviour(AttackBehaviourEvent::Election(e)) => self.on_rr(Proto::Election, e),
            SwarmEvent::Behaviour(AttackBehaviourEvent::Members(e)) => self.on_rr(Proto::Members, e),
            _ => {}
        }
        true
    }

    fn on_rr(&mut self, proto: Proto, e: Event<Crafted, Vec<u8>>) {
        match e {
            Event::Message { message: RrMessage::Request { channel, .. }, .. } => {
                // The lying acknowledger: "accepted", whatever it was.
                let b = self.swarm.behaviour_mut();
                let _ = match proto {
                    Proto::Election => b.election.send_response(channel, vec![ACK_OK]),
                    Proto::Members => b.members.send_response(channel, vec![ACK_OK]),
                };
            }
            Event::Message { message: RrMessage::Response { request_id, response }, .. } => {
                self.outcomes.insert(request_id, Outcome::Ack(response));
            }
            Event::OutboundFailure { request_id, error, .. } => {
                self.outcomes.insert(request_id, Outcome::Failed(error.to_string()));
            }
            _ => {}
        }
    }
}
