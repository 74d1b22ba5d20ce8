//! Emulated link latency: every byte between node `a` and node `b` is delayed by the Internet
//! latency model's one-way delay (`overlay::latency`), in both directions, in order, with
//! tokio timers (no busy loop). This kernel has no `tc netem`, so the delay lives in our own
//! transport: libp2p pings then measure real, emulated delays and Vivaldi coordinates are
//! learned from them, in one process or across processes and hosts.
//!
//! # Where the pair (a, b) is known
//!
//! A raw memory/TCP stream does not know its remote node on the listening side. After the
//! noise handshake both sides know the remote `PeerId`, so the delay sits **between noise and
//! yamux**: [`DelayedUpgrade`] wraps the yamux upgrade and is built per connection by
//! `Authenticated::multiplex_ext`, which hands it the authenticated remote peer id. QUIC
//! brings its own muxer and authenticates in its handshake, so there [`DelayedMuxer`] wraps
//! the connection and delays every substream it opens or accepts.
//!
//! # Where a node sits in the model (its place)
//!
//! The local node's place is fixed when its transport is built ([`EmulatedLink`]); a remote's
//! comes from [`LatencyNet`]: first its registry (peer id -> place), which a swarm fills with
//! every node of the swarm (node `i`, key `node_key(seed, i, difficulty)`, sits at place `i`: a shard on
//! another host computes the same registry from the seed); then, for a net built with
//! [`LatencyNet::open`], the place derived from the model seed and the peer id
//! ([`derived_place`]), which every process computes alike. Two peers may derive the same
//! place (same city, RTT 0 between them); the registry avoids that for swarm nodes.
//!
//! # How both directions are delayed
//!
//! Each side delays what it **reads**: bytes that node `b` sent reach node `a`'s yamux one
//! one-way delay after they arrived from the wire. Both ends do the same, so a request and its
//! answer each pay one one-way delay and a ping measures one model RTT (plus jitter and local
//! scheduling). Writes are not delayed (that would count the delay twice). Across processes
//! the same holds, as long as both ends emulate: a peer that does not delays nothing, so a
//! ping between an emulating and a plain node measures half the model RTT.
//!
//! # What is and is not delayed (choices)
//!
//! - Delayed: everything yamux carries (every protocol's streams, stream opening, window
//!   updates, pings), i.e. all traffic after the connection is set up; over QUIC, the bytes
//!   of every substream (QUIC's own acknowledgements and stream opening are not delayed).
//! - Not delayed: the transport connect, the multistream-select of noise, the noise handshake
//!   and the multistream-select of yamux (the remote is not known yet). Connection set-up is
//!   therefore about 2-3 RTTs faster than on a real link; steady-state traffic is exact.
//! - Jitter: every chunk read from the wire gets its own jittered one-way delay
//!   (`LatencyModel::sample_one_way`: exponential queueing delay on top of the base delay),
//!   but a chunk is never released before an earlier one (order is preserved, as on a TCP
//!   connection, so a burst can only be delayed further by jitter, never reordered).
//! - Bandwidth is not modelled. A node reads ahead at most [`MAX_QUEUED`] bytes per
//!   connection before it stops reading the wire (back-pressure to yamux's flow control).
//! - A remote peer with no place (not registered, and the net is not open) is not delayed;
//!   it is logged once per connection (a node outside the emulated swarm, e.g. a test client).
//! - Accuracy is bounded by the process's scheduling: with both cores saturated, timers fire
//!   late and measured RTTs grow. The swarm report states the measured error.
//!
//! # Cost
//!
//! Per stream direction: one ring buffer for the pending bytes (no allocation per chunk while
//! bytes are pending; given back down to [`KEEP_CAPACITY`] once it drains, so that one burst
//! does not hold its size for the connection's life), a queue of small marks (due time, end
//! offset), and **one** tokio `Sleep` armed for the head mark only (bytes leave in order, so
//! only the head needs a deadline), re-armed only when the head's deadline changes. Reads that become due within [`BATCH`]
//! (1 ms, tokio's timer resolution) of the previous mark share it, and one read from yamux
//! takes every byte that is due, so a burst costs one wake-up.
//!
//! # Lateness (what the emulation adds on top of the model)
//!
//! Every mark's release is compared with its due time: a histogram (the swarm report's
//! `emulation_lateness`; a sharded swarm adds the other shards' histograms,
//! [`LatencyNet::add_remote_lateness`]) and, per link direction, the largest lateness of the
//! last 1-2 s ([`LatencyNet::recent_lateness`]), which `node/src/coords/driver.rs` uses to
//! drop RTT samples the emulation itself inflated. Not seen: the delay between bytes reaching
//! the wire and this reader's task being woken to time-stamp them (a loaded runtime adds it
//! before the due time is computed); the sender's bytes carry no send time (the noise stream
//! is opaque here), so that part cannot be measured without changing the wire.

use futures::future::Either;
use futures::{AsyncRead, AsyncWrite};
use libp2p::core::muxing::{StreamMuxer, StreamMuxerBox, StreamMuxerEvent};
use libp2p::core::transport::{Boxed, MemoryTransport};
use libp2p::core::upgrade::{InboundConnectionUpgrade, OutboundConnectionUpgrade, UpgradeInfo, Version};
use libp2p::core::Transport;
use libp2p::identity::Keypair;
use libp2p::{noise, quic, tcp, yamux, PeerId};
use overlay::latency::{LatencyError, LatencyModel, ModelConfig};
use rand::rngs::StdRng;
use rand::SeedableRng;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};
use tracing::debug;

/// Largest number of bytes read ahead from the wire per connection and not yet released.
pub const MAX_QUEUED: usize = 1024 * 1024;
/// Size of one read from the wire (into one scratch buffer per thread, not per connection:
/// 16 KiB on both ends of every connection is 0.4 GiB in a 500-node swarm with 48
/// connections per node).
const READ_CHUNK: usize = 16 * 1024;
/// Capacity a drained ring buffer keeps; above it, the buffer is given back.
pub const KEEP_CAPACITY: usize = 4 * 1024;

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}
/// Bytes due within this long of each other are released together, the later ones up to
/// this early. Tokio's timer wheel has a 1 ms resolution (a sleep fires at the next whole
/// millisecond or later), so this gives back at most what the wheel's rounding adds, and a
/// burst of chunks costs one wake-up instead of one per chunk.
pub const BATCH: Duration = Duration::from_millis(1);
/// Length of one bucket of the per-link recent-lateness window ([`LatencyNet::recent_lateness`]
/// looks at the current and the previous bucket: the last 1-2 s).
pub const LATE_BUCKET: Duration = Duration::from_secs(1);

/// Why the latency emulation cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum NetemError {
    #[error("latency model: {0}")]
    Model(#[from] LatencyError),
    #[error("node index {index} is outside the latency model ({nodes} nodes)")]
    IndexOutOfRange { index: usize, nodes: usize },
    #[error("peer {0} is registered twice in the latency emulation")]
    Duplicate(PeerId),
}

/// The emulated network shared by every node of an in-process swarm: the latency model and
/// which model node each peer is.
pub struct LatencyNet {
    model: LatencyModel,
    seed: u64,
    index: RwLock<HashMap<PeerId, usize>>,
    /// Place peers that are not registered by [`derived_place`] ([`LatencyNet::open`]).
    open: bool,
    connections: AtomicU64,
    lateness: Lateness,
    counters: Counters,
    /// Recent lateness per direction (reader node, remote node), shared by every connection
    /// of that pair.
    links: RwLock<HashMap<(usize, usize), Arc<LinkLateness>>>,
    origin: Instant,
    /// The other shards' lateness histograms and counters, by shard (a sharded swarm's
    /// conductor adds them, [`LatencyNet::add_remote_lateness`]).
    remote: std::sync::Mutex<HashMap<usize, LatenessCounts>>,
}

/// A lateness histogram's raw counts and the work counters, as one shard sends them to
/// another (`node/src/swarm/shard.rs`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LatenessCounts {
    pub counts: Vec<u64>,
    pub timer_arms: u64,
    pub releases: u64,
}

/// The place in a model of `nodes` nodes (seeded with `model_seed`) of a peer that no registry
/// names: SHA-256 over a tag, the seed and the peer id, modulo `nodes`. Every process
/// computes the same place for the same peer.
pub fn derived_place(model_seed: u64, nodes: usize, peer: &PeerId) -> usize {
    let mut h = Sha256::new();
    h.update(b"peerage/latency-place/v1");
    h.update(model_seed.to_le_bytes());
    h.update(peer.to_bytes());
    let d = h.finalize();
    let mut x = [0u8; 8];
    x.copy_from_slice(&d[..8]);
    (u64::from_le_bytes(x) % nodes.max(1) as u64) as usize
}

/// Work counters of the emulation (for the cost measurements in docs/RESULTS.md).
#[derive(Default)]
struct Counters {
    timer_arms: AtomicU64,
    releases: AtomicU64,
}

/// The largest lateness of one link direction in the current and the previous
/// [`LATE_BUCKET`].
#[derive(Default)]
struct LinkLateness {
    window: std::sync::Mutex<LateWindow>,
}

#[derive(Default, Clone, Copy)]
struct LateWindow {
    bucket: u64,
    current: Duration,
    previous: Duration,
}

impl LateWindow {
    fn roll(&mut self, bucket: u64) {
        if bucket != self.bucket {
            self.previous = if bucket == self.bucket + 1 { self.current } else { Duration::ZERO };
            self.current = Duration::ZERO;
            self.bucket = bucket;
        }
    }
}

impl LinkLateness {
    fn record(&self, bucket: u64, late: Duration) {
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        w.roll(bucket);
        w.current = w.current.max(late);
    }

    fn recent(&self, bucket: u64) -> Duration {
        let mut w = *self.window.lock().unwrap_or_else(|p| p.into_inner());
        w.roll(bucket);
        w.current.max(w.previous)
    }
}

/// Upper bounds (ms) of the lateness histogram's buckets; the last bucket is open.
pub const LATENESS_BOUNDS_MS: [f64; 9] = [0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 500.0];

/// How late released bytes were against their due time (timer and scheduling delay: what the
/// emulation adds on top of the model), counted per released chunk.
#[derive(Default)]
struct Lateness {
    buckets: [AtomicU64; LATENESS_BOUNDS_MS.len() + 1],
}

impl Lateness {
    fn record(&self, late: Duration) {
        let ms = late.as_secs_f64() * 1000.0;
        let i = LATENESS_BOUNDS_MS.iter().position(|b| ms < *b).unwrap_or(LATENESS_BOUNDS_MS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
    }
}

/// A snapshot of the lateness histogram.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LatenessReport {
    /// Released chunks counted (a chunk: the bytes of the reads from the wire that became
    /// due within [`BATCH`] of each other; counted when its first byte is released).
    pub chunks: u64,
    /// Timer deadlines armed (one `Sleep` per stream, re-armed only when the head changes).
    pub timer_arms: u64,
    /// Reads that released bytes to yamux.
    pub releases: u64,
    /// Upper bound (ms) of the bucket holding the median / the 95th / 99th percentile
    /// (`null`: above the last bound).
    pub p50_below_ms: Option<f64>,
    pub p95_below_ms: Option<f64>,
    pub p99_below_ms: Option<f64>,
    /// Bucket upper bounds (ms) and counts (the last count is above the last bound).
    pub bounds_ms: Vec<f64>,
    pub counts: Vec<u64>,
}

impl std::fmt::Debug for LatencyNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyNet").field("nodes", &self.model.len()).field("seed", &self.seed).finish()
    }
}

impl LatencyNet {
    /// The Internet latency model (`ModelConfig::default()`) for `nodes` nodes, from `seed`.
    pub fn internet(nodes: usize, seed: u64) -> Result<Arc<LatencyNet>, NetemError> {
        Self::with_config(nodes, &ModelConfig::default(), seed)
    }

    /// Any model configuration (validated by the model).
    pub fn with_config(nodes: usize, config: &ModelConfig, seed: u64) -> Result<Arc<LatencyNet>, NetemError> {
        let model = LatencyModel::generate(nodes, config, seed)?;
        Ok(Arc::new(LatencyNet {
            model,
            seed,
            index: RwLock::new(HashMap::new()),
            open: false,
            connections: AtomicU64::new(0),
            lateness: Lateness::default(),
            counters: Counters::default(),
            links: RwLock::new(HashMap::new()),
            origin: Instant::now(),
            remote: std::sync::Mutex::new(HashMap::new()),
        }))
    }

    /// [`LatencyNet::internet`] where every peer has a place: registered peers theirs, any
    /// other peer the one [`derived_place`] gives it (`peerage run` across processes).
    pub fn open(nodes: usize, seed: u64) -> Result<Arc<LatencyNet>, NetemError> {
        let mut net = Self::internet(nodes, seed)?;
        if let Some(n) = Arc::get_mut(&mut net) {
            n.open = true;
        }
        Ok(net)
    }

    /// Whether peers that are not registered get a derived place.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Say that `peer` is model node `index`. Call before the peer's node starts.
    pub fn register(&self, peer: PeerId, index: usize) -> Result<(), NetemError> {
        if index >= self.model.len() {
            return Err(NetemError::IndexOutOfRange { index, nodes: self.model.len() });
        }
        let mut map = self.index.write().unwrap_or_else(|p| p.into_inner());
        if map.contains_key(&peer) {
            return Err(NetemError::Duplicate(peer));
        }
        map.insert(peer, index);
        Ok(())
    }

    /// The model node of `peer`: registered, else derived when the net is open.
    pub fn index_of(&self, peer: &PeerId) -> Option<usize> {
        let registered = self.index.read().unwrap_or_else(|p| p.into_inner()).get(peer).copied();
        registered.or_else(|| self.open.then(|| derived_place(self.seed, self.model.len(), peer)))
    }

    /// Replace shard `shard`'s lateness counts (its histogram and counters so far).
    pub fn add_remote_lateness(&self, shard: usize, counts: LatenessCounts) {
        self.remote.lock().unwrap_or_else(|p| p.into_inner()).insert(shard, counts);
    }

    /// This process's own lateness counts (what a shard sends its conductor).
    pub fn local_lateness(&self) -> LatenessCounts {
        LatenessCounts {
            counts: self.lateness.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect(),
            timer_arms: self.counters.timer_arms.load(Ordering::Relaxed),
            releases: self.counters.releases.load(Ordering::Relaxed),
        }
    }

    pub fn model(&self) -> &LatencyModel {
        &self.model
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Connections (QUIC: substreams) delayed so far (both ends count).
    pub fn delayed_connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// How late the emulation released bytes against the model (all connections so far).
    pub fn lateness(&self) -> LatenessReport {
        let mut own = self.local_lateness();
        for r in self.remote.lock().unwrap_or_else(|p| p.into_inner()).values() {
            for (c, x) in own.counts.iter_mut().zip(&r.counts) {
                *c += x;
            }
            own.timer_arms += r.timer_arms;
            own.releases += r.releases;
        }
        let counts = own.counts;
        let chunks: u64 = counts.iter().sum();
        let quantile = |q: f64| -> Option<f64> {
            let want = (q * chunks as f64).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (i, c) in counts.iter().enumerate() {
                seen += c;
                if seen >= want {
                    return LATENESS_BOUNDS_MS.get(i).copied();
                }
            }
            None
        };
        LatenessReport {
            timer_arms: own.timer_arms,
            releases: own.releases,
            chunks,
            p50_below_ms: quantile(0.5),
            p95_below_ms: quantile(0.95),
            p99_below_ms: quantile(0.99),
            bounds_ms: LATENESS_BOUNDS_MS.to_vec(),
            counts,
        }
    }

    /// The per-connection delay source for reads at `local` from `remote`; `None` when the
    /// remote is not registered (not delayed).
    fn link(self: &Arc<Self>, local: usize, remote: &PeerId) -> Option<LinkDelay> {
        let r = self.index_of(remote)?;
        Some(self.link_to(local, r))
    }

    /// The delay source for reads at `local` from model node `r` (one per connection, or per
    /// QUIC substream).
    fn link_to(self: &Arc<Self>, local: usize, r: usize) -> LinkDelay {
        let n = self.connections.fetch_add(1, Ordering::Relaxed);
        let seed = overlay::latency::sample::mix64(self.seed ^ ((local as u64) << 32) ^ (r as u64) ^ n.rotate_left(17));
        LinkDelay {
            net: self.clone(),
            local,
            remote: r,
            rng: StdRng::seed_from_u64(seed),
            late: self.link_lateness(local, r),
        }
    }

    fn link_lateness(&self, local: usize, remote: usize) -> Arc<LinkLateness> {
        if let Some(l) = self.links.read().unwrap_or_else(|p| p.into_inner()).get(&(local, remote)) {
            return l.clone();
        }
        self.links.write().unwrap_or_else(|p| p.into_inner()).entry((local, remote)).or_default().clone()
    }

    fn bucket(&self, now: Instant) -> u64 {
        (now.saturating_duration_since(self.origin).as_millis() / LATE_BUCKET.as_millis()) as u64
    }

    /// How late the emulation recently (the last 1-2 s) released bytes on the link between
    /// model nodes `a` and `b`, summed over both directions: the most a round trip measured on
    /// that link just now can be inflated by the emulation's own timer and scheduling delay
    /// (bytes read from the wire late are not seen; see `node/src/coords/driver.rs`). `None` when no
    /// connection between them was ever delayed.
    pub fn recent_lateness(&self, a: usize, b: usize) -> Option<Duration> {
        let bucket = self.bucket(Instant::now());
        let links = self.links.read().unwrap_or_else(|p| p.into_inner());
        let ab = links.get(&(a, b)).map(|l| l.recent(bucket));
        let ba = links.get(&(b, a)).map(|l| l.recent(bucket));
        match (ab, ba) {
            (None, None) => None,
            (x, y) => Some(x.unwrap_or_default() + y.unwrap_or_default()),
        }
    }
}

/// What one node's transport needs: the shared network and its own model index.
#[derive(Clone, Debug)]
pub struct EmulatedLink {
    pub net: Arc<LatencyNet>,
    pub local: usize,
}

impl EmulatedLink {
    pub fn new(net: Arc<LatencyNet>, local: usize) -> Result<EmulatedLink, NetemError> {
        if local >= net.model().len() {
            return Err(NetemError::IndexOutOfRange { index: local, nodes: net.model().len() });
        }
        Ok(EmulatedLink { net, local })
    }

    /// The upgrade for one connection to `remote`: `inner` (yamux) behind a delayed reader.
    pub fn upgrade<U>(&self, remote: &PeerId, inner: U) -> DelayedUpgrade<U> {
        let delay = self.net.link(self.local, remote);
        if delay.is_none() {
            debug!(%remote, "remote peer is not in the latency emulation; its traffic is not delayed");
        }
        DelayedUpgrade { inner, delay }
    }

    /// [`LatencyNet::recent_lateness`] of the link between this node and `remote`.
    pub fn recent_lateness(&self, remote: &PeerId) -> Option<Duration> {
        let r = self.net.index_of(remote)?;
        self.net.recent_lateness(self.local, r)
    }
}

/// Memory transport + noise + (delayed) yamux, for one node of an emulated swarm.
pub fn memory_transport(key: &Keypair, link: EmulatedLink) -> Result<Boxed<(PeerId, StreamMuxerBox)>, noise::Error> {
    Ok(MemoryTransport::default()
        .upgrade(Version::V1)
        .authenticate(noise::Config::new(key)?)
        .multiplex_ext(move |peer, _| link.upgrade(peer, yamux::Config::default()))
        .boxed())
}

/// TCP + noise + (delayed) yamux, for one node of an emulated swarm on loopback.
pub fn tcp_transport(key: &Keypair, link: EmulatedLink) -> Result<Boxed<(PeerId, StreamMuxerBox)>, noise::Error> {
    Ok(tcp::tokio::Transport::new(tcp::Config::default().nodelay(true))
        .upgrade(Version::V1)
        .authenticate(noise::Config::new(key)?)
        .multiplex_ext(move |peer, _| link.upgrade(peer, yamux::Config::default()))
        .boxed())
}

/// TCP + noise + (delayed) yamux, and QUIC with every substream delayed: what `peerage run`
/// and a swarm shard use with emulated latency.
pub fn tcp_quic_transport(key: &Keypair, link: EmulatedLink) -> Result<Boxed<(PeerId, StreamMuxerBox)>, noise::Error> {
    let quic_link = link.clone();
    let quic = quic::tokio::Transport::new(quic::Config::new(key)).map(move |(peer, conn), _| {
        let muxer = DelayedMuxer::new(conn, quic_link.net.index_of(&peer).map(|r| (quic_link.clone(), r)));
        (peer, StreamMuxerBox::new(muxer))
    });
    Ok(tcp_transport(key, link)?
        .or_transport(quic)
        .map(|either, _| match either {
            Either::Left(out) | Either::Right(out) => out,
        })
        .boxed())
}

/// A muxer (QUIC's connection) whose substreams are each read through a [`DelayedRead`]
/// with their own jitter; `None`: the remote has no place, nothing is delayed.
pub struct DelayedMuxer<M> {
    inner: M,
    link: Option<(EmulatedLink, usize)>,
}

impl<M> DelayedMuxer<M> {
    pub fn new(inner: M, link: Option<(EmulatedLink, usize)>) -> Self {
        if link.is_none() {
            debug!("remote peer has no place in the latency emulation; its QUIC traffic is not delayed");
        }
        DelayedMuxer { inner, link }
    }

    fn wrap<S>(&self, s: S) -> DelayedRead<S> {
        DelayedRead::new(s, self.link.as_ref().map(|(l, r)| l.net.link_to(l.local, *r)))
    }
}

impl<M> StreamMuxer for DelayedMuxer<M>
where
    M: StreamMuxer + Unpin,
    M::Substream: Unpin,
{
    type Substream = DelayedRead<M::Substream>;
    type Error = M::Error;

    fn poll_inbound(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Self::Substream, Self::Error>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_inbound(cx) {
            Poll::Ready(Ok(s)) => Poll::Ready(Ok(this.wrap(s))),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_outbound(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Self::Substream, Self::Error>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_outbound(cx) {
            Poll::Ready(Ok(s)) => Poll::Ready(Ok(this.wrap(s))),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut self.get_mut().inner).poll_close(cx)
    }

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<StreamMuxerEvent, Self::Error>> {
        Pin::new(&mut self.get_mut().inner).poll(cx)
    }
}

/// The one-way delay source of one direction of one connection.
pub struct LinkDelay {
    net: Arc<LatencyNet>,
    local: usize,
    remote: usize,
    rng: StdRng,
    late: Arc<LinkLateness>,
}

impl LinkDelay {
    /// A jittered one-way delay.
    fn sample(&mut self) -> Duration {
        self.net.model.sample_one_way(self.local, self.remote, &mut self.rng)
    }

    fn record_lateness(&self, now: Instant, late: Duration) {
        self.net.lateness.record(late);
        self.late.record(self.net.bucket(now), late);
    }
}

/// A connection upgrade (yamux) whose socket is first wrapped in a [`DelayedRead`].
pub struct DelayedUpgrade<U> {
    inner: U,
    delay: Option<LinkDelay>,
}

impl<U: Clone> Clone for DelayedUpgrade<U> {
    fn clone(&self) -> Self {
        // A clone is a new connection's upgrade: it draws its own jitter.
        let delay = self.delay.as_ref().map(|d| LinkDelay {
            net: d.net.clone(),
            local: d.local,
            remote: d.remote,
            rng: StdRng::seed_from_u64(overlay::latency::sample::mix64(
                d.net.seed ^ d.net.connections.fetch_add(1, Ordering::Relaxed),
            )),
            late: d.late.clone(),
        });
        DelayedUpgrade { inner: self.inner.clone(), delay }
    }
}

impl<U: UpgradeInfo> UpgradeInfo for DelayedUpgrade<U> {
    type Info = U::Info;
    type InfoIter = U::InfoIter;
    fn protocol_info(&self) -> Self::InfoIter {
        self.inner.protocol_info()
    }
}

impl<C, U> InboundConnectionUpgrade<C> for DelayedUpgrade<U>
where
    U: InboundConnectionUpgrade<DelayedRead<C>>,
{
    type Output = U::Output;
    type Error = U::Error;
    type Future = U::Future;
    fn upgrade_inbound(self, socket: C, info: Self::Info) -> Self::Future {
        self.inner.upgrade_inbound(DelayedRead::new(socket, self.delay), info)
    }
}

impl<C, U> OutboundConnectionUpgrade<C> for DelayedUpgrade<U>
where
    U: OutboundConnectionUpgrade<DelayedRead<C>>,
{
    type Output = U::Output;
    type Error = U::Error;
    type Future = U::Future;
    fn upgrade_outbound(self, socket: C, info: Self::Info) -> Self::Future {
        self.inner.upgrade_outbound(DelayedRead::new(socket, self.delay), info)
    }
}

/// One delayed chunk: the bytes up to `end` (a running byte count of this stream) are
/// released at `due`. Chunks that become due within [`BATCH`] of the previous one share its
/// mark, so a burst costs one timer deadline, not one per read.
struct Mark {
    due: Instant,
    end: u64,
}

/// How the wire ended: released like data, after every earlier byte and at its own due time.
enum End {
    Eof,
    Error(io::Error),
}

/// A byte stream whose reads are released one (jittered) one-way delay after the bytes came
/// off the wire, in order. Writes pass through. Without a delay source it is a plain
/// pass-through.
///
/// Cost: the bytes of all pending chunks sit in one ring buffer (no allocation
/// per chunk once it has grown); one `Sleep` per stream is armed for the head's deadline only
/// (bytes are released in order, so only the head needs one), and re-armed only when that
/// deadline changes; every byte that is due (up to [`BATCH`] early) is released in one read.
pub struct DelayedRead<C> {
    inner: C,
    delay: Option<LinkDelay>,
    bytes: VecDeque<u8>,
    marks: VecDeque<Mark>,
    /// Bytes taken from the wire / released to the reader so far.
    received: u64,
    released: u64,
    /// Where the head mark starts, and whether its lateness was counted.
    head_start: u64,
    head_counted: bool,
    end: Option<(Instant, End)>,
    inner_done: bool,
    // Created on first use, inside the tokio runtime that polls us.
    sleep: Option<Pin<Box<Sleep>>>,
    armed: Option<Instant>,
}

impl<C> DelayedRead<C> {
    pub fn new(inner: C, delay: Option<LinkDelay>) -> Self {
        DelayedRead {
            inner,
            delay,
            bytes: VecDeque::new(),
            marks: VecDeque::new(),
            received: 0,
            released: 0,
            head_start: 0,
            head_counted: false,
            end: None,
            inner_done: false,
            sleep: None,
            armed: None,
        }
    }

    /// Bytes read from the wire and not yet released.
    pub fn queued_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// The due time of bytes (or the end of stream) that came off the wire now: one sampled
    /// one-way delay, but never before anything earlier (order is kept).
    fn due_now(&mut self) -> Instant {
        let now = Instant::now();
        let mut due = now + self.delay.as_mut().map_or(Duration::ZERO, LinkDelay::sample);
        if let Some(last) = self.marks.back() {
            due = due.max(last.due);
        }
        due
    }

    fn push_bytes(&mut self, chunk: &[u8]) {
        let n = chunk.len();
        let due = self.due_now();
        self.bytes.extend(chunk);
        self.received += n as u64;
        match self.marks.back_mut() {
            // Due within BATCH of the previous chunk: released with it (at most BATCH early).
            Some(last) if due <= last.due + BATCH => last.end = self.received,
            _ => self.marks.push_back(Mark { due, end: self.received }),
        }
    }

    /// Arm the one timer for `due` (only if the deadline changed) and poll it.
    fn wait_until(&mut self, due: Instant, cx: &mut Context<'_>) -> Poll<()> {
        let sleep = self.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
        if self.armed != Some(due) {
            sleep.as_mut().reset(due);
            self.armed = Some(due);
            if let Some(d) = &self.delay {
                d.net.counters.timer_arms.fetch_add(1, Ordering::Relaxed);
            }
        }
        sleep.as_mut().poll(cx)
    }

    /// Copy up to `buf.len()` due bytes (every chunk due by `release_by`) and count the
    /// lateness of each chunk whose first byte goes out. Returns 0 when nothing is due.
    fn release(&mut self, buf: &mut [u8], now: Instant, release_by: Instant) -> usize {
        let mut due_end = self.released;
        for m in &self.marks {
            if m.due > release_by {
                break;
            }
            due_end = m.end;
        }
        if due_end <= self.released {
            return 0;
        }
        let n = buf.len().min((due_end - self.released) as usize);
        let (a, b) = self.bytes.as_slices();
        let from_a = n.min(a.len());
        buf[..from_a].copy_from_slice(&a[..from_a]);
        buf[from_a..n].copy_from_slice(&b[..n - from_a]);
        self.bytes.drain(..n);
        if self.bytes.is_empty() && self.bytes.capacity() > KEEP_CAPACITY {
            self.bytes.shrink_to(KEEP_CAPACITY);
        }
        self.released += n as u64;
        while let Some(m) = self.marks.front() {
            if !self.head_counted && self.head_start < self.released {
                self.head_counted = true;
                if let Some(d) = &self.delay {
                    d.record_lateness(now, now.saturating_duration_since(m.due));
                }
            }
            if m.end > self.released {
                break;
            }
            self.head_start = m.end;
            self.head_counted = false;
            self.marks.pop_front();
        }
        if let Some(d) = &self.delay {
            d.net.counters.releases.fetch_add(1, Ordering::Relaxed);
        }
        n
    }
}

impl<C: AsyncRead + Unpin> DelayedRead<C> {
    /// Read everything the wire has (up to [`MAX_QUEUED`]) and time-stamp it.
    fn fill(&mut self, cx: &mut Context<'_>) {
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut scratch) => self.fill_with(cx, &mut scratch),
            // Not reached (no read of one connection polls another's), but never a panic.
            Err(_) => self.fill_with(cx, &mut Vec::new()),
        })
    }

    fn fill_with(&mut self, cx: &mut Context<'_>, scratch: &mut Vec<u8>) {
        if scratch.len() != READ_CHUNK {
            scratch.resize(READ_CHUNK, 0);
        }
        while !self.inner_done && self.bytes.len() < MAX_QUEUED {
            match Pin::new(&mut self.inner).poll_read(cx, scratch) {
                Poll::Ready(Ok(0)) => {
                    self.inner_done = true;
                    self.end = Some((self.due_now(), End::Eof));
                }
                Poll::Ready(Ok(n)) => self.push_bytes(&scratch[..n]),
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Poll::Ready(Err(e)) => {
                    self.inner_done = true;
                    self.end = Some((self.due_now(), End::Error(e)));
                }
                Poll::Pending => break,
            }
        }
    }
}

impl<C: AsyncRead + Unpin> AsyncRead for DelayedRead<C> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.delay.is_none() && this.marks.is_empty() && this.end.is_none() {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        this.fill(cx);
        loop {
            let now = Instant::now();
            let release_by = now + BATCH;
            let n = this.release(buf, now, release_by);
            if n > 0 {
                return Poll::Ready(Ok(n));
            }
            let end_due = this.end.as_ref().map(|(due, _)| *due);
            let due = match (this.marks.front(), end_due) {
                (Some(head), _) => head.due,
                (None, Some(due)) if due <= release_by => {
                    // Keep the end-of-stream mark: every later read returns 0 as well.
                    return match this.end.replace((due, End::Eof)) {
                        Some((_, End::Error(e))) => Poll::Ready(Err(e)),
                        _ => Poll::Ready(Ok(0)),
                    };
                }
                (None, Some(due)) => due,
                // Nothing queued: `fill` left the waker with the wire.
                (None, None) => return Poll::Pending,
            };
            match this.wait_until(due, cx) {
                Poll::Ready(()) => continue,
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<C: AsyncWrite + Unpin> AsyncWrite for DelayedRead<C> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_close(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::{AsyncReadExt, StreamExt, TryStreamExt};

    fn net_and_pair(seed: u64) -> (Arc<LatencyNet>, usize, usize) {
        let net = LatencyNet::internet(40, seed).unwrap();
        // A pair with a long RTT so the delay dominates scheduling noise.
        let mut best = (0, 1);
        for a in 0..40 {
            for b in 0..40 {
                if a != b && net.model().rtt_ms(a, b) > net.model().rtt_ms(best.0, best.1) {
                    best = (a, b);
                }
            }
        }
        (net, best.0, best.1)
    }

    #[tokio::test]
    async fn reads_are_delayed_by_one_way_and_kept_in_order() {
        let seed = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(11u64);
        eprintln!("seed {seed} (replay with PEERAGE_SEED={seed})");
        let (net, a, b) = net_and_pair(seed);
        let peer_b = PeerId::random();
        net.register(peer_b, b).unwrap();
        let link = EmulatedLink::new(net.clone(), a).unwrap();
        let delay = net.link(link.local, &peer_b);
        assert!(delay.is_some());
        let one_way = net.model().one_way(a, b);
        let (tx, rx) = futures::channel::mpsc::unbounded::<Vec<u8>>();
        let mut reader = DelayedRead::new(rx.map(Ok::<Vec<u8>, io::Error>).into_async_read(), delay);
        let t0 = Instant::now();
        let writes = tokio::spawn(async move {
            for i in 0u32..50 {
                tx.unbounded_send(i.to_be_bytes().to_vec()).unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            // Dropping the sender ends the stream.
        });
        let mut got = Vec::new();
        let mut first_at = None;
        let mut buf = [0u8; 64];
        loop {
            let n = reader.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            first_at.get_or_insert_with(|| t0.elapsed());
            got.extend_from_slice(&buf[..n]);
        }
        writes.await.unwrap();
        let want: Vec<u8> = (0u32..50).flat_map(|i| i.to_be_bytes()).collect();
        assert_eq!(got, want, "bytes must arrive complete and in order");
        let first = first_at.unwrap();
        assert!(first >= one_way, "first byte after {first:?}, one-way delay is {one_way:?}");
        assert!(
            first < one_way + one_way / 2 + Duration::from_millis(30),
            "first byte after {first:?}, one-way {one_way:?}"
        );
    }

    /// Two libp2p nodes on the emulated memory transport: ping measures about the model RTT.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ping_between_emulated_nodes_measures_the_model_rtt() {
        use futures::StreamExt;
        use libp2p::swarm::SwarmEvent;
        use libp2p::{ping, Multiaddr, SwarmBuilder};
        let seed = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(5u64);
        eprintln!("seed {seed} (replay with PEERAGE_SEED={seed})");
        let (net, a, b) = net_and_pair(seed);
        let model_rtt = net.model().rtt(a, b);
        let build = |idx: usize| {
            let link = EmulatedLink::new(net.clone(), idx).unwrap();
            let swarm = SwarmBuilder::with_new_identity()
                .with_tokio()
                .with_other_transport(|key| -> Result<_, Box<dyn std::error::Error + Send + Sync>> {
                    Ok(memory_transport(key, link)?)
                })
                .unwrap()
                .with_behaviour(|_| ping::Behaviour::new(ping::Config::new().with_interval(Duration::from_millis(100))))
                .unwrap()
                .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(30)))
                .build();
            net.register(*swarm.local_peer_id(), idx).unwrap();
            swarm
        };
        let mut sa = build(a);
        let mut sb = build(b);
        let port = 1 + seed % 1_000_000 + 7_000_000;
        let addr: Multiaddr = format!("/memory/{port}").parse().unwrap();
        sb.listen_on(addr.clone()).unwrap();
        tokio::spawn(async move {
            loop {
                sb.select_next_some().await;
            }
        });
        sa.dial(addr).unwrap();
        let mut rtts = Vec::new();
        let until = tokio::time::Instant::now() + Duration::from_secs(30);
        while rtts.len() < 8 {
            let ev = tokio::time::timeout_at(until, sa.select_next_some()).await.expect("no ping results in 30 s");
            if let SwarmEvent::Behaviour(ping::Event { result, .. }) = ev {
                rtts.push(result.expect("ping failed"));
            }
        }
        // The first ping may include stream set-up; use the rest.
        let mut later: Vec<Duration> = rtts[1..].to_vec();
        later.sort();
        let median = later[later.len() / 2];
        eprintln!("model RTT {model_rtt:?}, measured {rtts:?}, median {median:?}");
        assert!(median >= model_rtt, "median {median:?} below the model RTT {model_rtt:?}");
        // Jitter adds 3 % + 0.1 ms on average; allow 10 % + 15 ms for scheduling.
        let high = model_rtt + model_rtt / 10 + Duration::from_millis(15);
        assert!(median <= high, "median {median:?} above {high:?} (model RTT {model_rtt:?})");
        assert!(net.delayed_connections() >= 2, "both ends must delay their reads");
        assert!(net.lateness().chunks > 0);
    }

    /// A burst of small writes costs a few timer deadlines (not one per chunk), comes out
    /// complete and in order, then an error from the wire is delivered after the data.
    #[tokio::test]
    async fn bursts_share_one_deadline_and_errors_follow_the_data() {
        let seed = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(12u64);
        eprintln!("seed {seed} (replay with PEERAGE_SEED={seed})");
        let (net, a, b) = net_and_pair(seed);
        let peer_b = PeerId::random();
        net.register(peer_b, b).unwrap();
        let delay = net.link(a, &peer_b);
        let one_way = net.model().one_way(a, b);
        let (tx, rx) = futures::channel::mpsc::unbounded::<io::Result<Vec<u8>>>();
        for i in 0u32..500 {
            tx.unbounded_send(Ok(i.to_be_bytes().to_vec())).unwrap();
        }
        tx.unbounded_send(Err(io::Error::new(io::ErrorKind::ConnectionReset, "reset"))).unwrap();
        drop(tx);
        let mut reader = DelayedRead::new(rx.into_async_read(), delay);
        let t0 = Instant::now();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let err = loop {
            match reader.read(&mut buf).await {
                Ok(0) => panic!("end of stream before the error"),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
        assert!(t0.elapsed() >= one_way, "released after {:?}, one-way {one_way:?}", t0.elapsed());
        let want: Vec<u8> = (0u32..500).flat_map(|i| i.to_be_bytes()).collect();
        assert_eq!(got, want);
        assert_eq!(reader.read(&mut buf).await.unwrap(), 0, "after the error the stream stays ended");
        let report = net.lateness();
        // 500 reads of the wire, but jitter keeps most of them in order within BATCH of the
        // previous: far fewer chunks and timer deadlines than reads.
        eprintln!("{report:?}");
        assert!(report.timer_arms < 100, "{} timer deadlines for a 500-chunk burst", report.timer_arms);
        assert!(report.chunks < 100, "{} chunks", report.chunks);
        assert!(net.recent_lateness(a, b).is_some(), "the link's lateness is tracked");
        assert!(net.recent_lateness(b, a).is_some(), "either order names the same link");
    }

    /// Two nodes with *separate* emulated nets of the same seeds, as two processes on two
    /// hosts have: each knows the other's place from the seed alone, and ping measures the
    /// model RTT over TCP and over QUIC.
    async fn ping_across_separate_nets(quic: bool) {
        use futures::StreamExt;
        use libp2p::swarm::SwarmEvent;
        use libp2p::{ping, Multiaddr, SwarmBuilder};
        let seed = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(21u64);
        eprintln!("seed {seed} (replay with PEERAGE_SEED={seed})");
        let (probe, a, b) = net_and_pair(seed);
        let model_rtt = probe.model().rtt(a, b);
        let keys: Vec<Keypair> = (0..40).map(|i| crate::swarm::keys::node_key(seed, i, 0)).collect();
        let build = |idx: usize| {
            // A process's own view: the open net of 40 places, every swarm key registered.
            let net = LatencyNet::open(40, seed).unwrap();
            for (i, k) in keys.iter().enumerate() {
                net.register(k.public().to_peer_id(), i).unwrap();
            }
            let link = EmulatedLink::new(net.clone(), idx).unwrap();
            let swarm = SwarmBuilder::with_existing_identity(keys[idx].clone())
                .with_tokio()
                .with_other_transport(|key| -> Result<_, Box<dyn std::error::Error + Send + Sync>> {
                    Ok(tcp_quic_transport(key, link)?)
                })
                .unwrap()
                .with_behaviour(|_| ping::Behaviour::new(ping::Config::new().with_interval(Duration::from_millis(100))))
                .unwrap()
                .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(30)))
                .build();
            (swarm, net)
        };
        let (mut sa, net_a) = build(a);
        let (mut sb, net_b) = build(b);
        let listen: Multiaddr = if quic {
            "/ip4/127.0.0.1/udp/0/quic-v1".parse().unwrap()
        } else {
            "/ip4/127.0.0.1/tcp/0".parse().unwrap()
        };
        sb.listen_on(listen).unwrap();
        let addr = loop {
            if let SwarmEvent::NewListenAddr { address, .. } = sb.select_next_some().await {
                break address;
            }
        };
        tokio::spawn(async move {
            loop {
                sb.select_next_some().await;
            }
        });
        sa.dial(addr).unwrap();
        let mut rtts = Vec::new();
        let until = tokio::time::Instant::now() + Duration::from_secs(30);
        while rtts.len() < 6 {
            let ev = tokio::time::timeout_at(until, sa.select_next_some()).await.expect("no ping results in 30 s");
            if let SwarmEvent::Behaviour(ping::Event { result, .. }) = ev {
                rtts.push(result.expect("ping failed"));
            }
        }
        let mut later: Vec<Duration> = rtts[1..].to_vec();
        later.sort();
        let median = later[later.len() / 2];
        eprintln!("quic {quic}: model RTT {model_rtt:?}, measured {rtts:?}");
        assert!(median >= model_rtt, "median {median:?} below the model RTT {model_rtt:?}");
        let high = model_rtt + model_rtt / 10 + Duration::from_millis(15);
        assert!(median <= high, "median {median:?} above {high:?} (model RTT {model_rtt:?})");
        assert!(net_a.delayed_connections() >= 1 && net_b.delayed_connections() >= 1, "both ends delay their reads");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn separate_processes_see_the_model_rtt_over_tcp() {
        ping_across_separate_nets(false).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn separate_processes_see_the_model_rtt_over_quic() {
        ping_across_separate_nets(true).await;
    }

    #[test]
    fn open_nets_place_unknown_peers_alike() {
        let a = LatencyNet::open(100, 4).unwrap();
        let b = LatencyNet::open(100, 4).unwrap();
        let p = PeerId::random();
        assert_eq!(a.index_of(&p), b.index_of(&p));
        assert_eq!(a.index_of(&p), Some(derived_place(4, 100, &p)));
        assert!(a.is_open());
        let closed = LatencyNet::internet(100, 4).unwrap();
        assert_eq!(closed.index_of(&p), None);
        // A registered place wins over the derived one.
        let q = PeerId::random();
        let other = (derived_place(4, 100, &q) + 1) % 100;
        a.register(q, other).unwrap();
        assert_eq!(a.index_of(&q), Some(other));
    }

    #[test]
    fn lateness_window_keeps_the_last_two_buckets() {
        let l = LinkLateness::default();
        l.record(5, Duration::from_millis(7));
        l.record(5, Duration::from_millis(3));
        assert_eq!(l.recent(5), Duration::from_millis(7));
        assert_eq!(l.recent(6), Duration::from_millis(7), "the previous bucket still counts");
        l.record(6, Duration::from_millis(1));
        assert_eq!(l.recent(7), Duration::from_millis(1));
        assert_eq!(l.recent(9), Duration::ZERO, "old lateness is forgotten");
    }

    #[test]
    fn registry_refuses_bad_input() {
        let net = LatencyNet::internet(3, 1).unwrap();
        let p = PeerId::random();
        assert!(matches!(net.register(p, 3), Err(NetemError::IndexOutOfRange { index: 3, nodes: 3 })));
        net.register(p, 2).unwrap();
        assert!(matches!(net.register(p, 1), Err(NetemError::Duplicate(_))));
        assert_eq!(net.index_of(&p), Some(2));
        assert!(EmulatedLink::new(net.clone(), 5).is_err());
        // An unregistered remote gets no delay source (traffic passes undelayed).
        assert!(net.link(0, &PeerId::random()).is_none());
    }
}
