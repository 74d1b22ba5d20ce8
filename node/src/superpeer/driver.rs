//! Runs the sans-IO super-peer selection (`overlay::superpeer::SuperPeerNode`, issue 4) inside
//! a real libp2p node: the same state machine the simulator drives
//! (`experiments/src/superpeers/protocol.rs` is the reference driver), fed by the network.
//!
//! What goes in (`SpInput`) and where it comes from:
//! - `Start`, once `start_delay` plus a random delay of up to twice that (so that nodes
//!   started together spread their first lookups) has passed and the Kademlia routing table
//!   has an entry;
//!   `Tick` every `tick` (one protocol round; 1 s by default, as in the simulator).
//! - `Message` from the `/peerage/superpeer/1.0.0` request-response protocol (wire format in
//!   `node/src/superpeer/wire.rs`; a malformed frame is logged, counted, answered "refused" and
//!   otherwise ignored).
//! - `LookupResult` from Kademlia: `Query::Closest` runs `get_closest_peers`,
//!   `Query::Providers` runs `get_providers`; `Provide`/`Unprovide` are `start_providing` /
//!   `stop_providing` of the record key made of the key's 32 bytes.
//!   **Closest-peer targets (our choice):** kad places a lookup target at the SHA-256 of the
//!   bytes it is given, so it cannot aim at an arbitrary point of the id space; our node ids
//!   *are* kad's keys (SHA-256 of the `PeerId`). The driver therefore searches a preimage whose
//!   SHA-256 shares the first `lookup_bits` bits (default 16, about 65,000 hashes, a few ms)
//!   with the wanted key and looks that up. XOR distances to the target and to the key then
//!   differ by less than `2^-lookup_bits` of the id space, far below the gap between the
//!   closest nodes of a swarm of up to thousands, so the order of the returned peers is the
//!   order by distance to the key that the size estimate and the slot claim need.
//!   Provider results carry peer ids only: the driver learns each provider's coordinate with a
//!   `Hello` before it passes the result on (providers that do not answer within
//!   `HELLO_WAIT` are left out: they are most likely dead heads whose records outlive them).
//!   **Sample lookups** (`Query::Sample`, the size estimate's): no preimage search; the driver
//!   looks up the hash of a random preimage and names that key (`SpInput::SampleResult`),
//!   with the share of the peers kad asked that answered (`QueryStats`' successes over
//!   successes plus failures): kad returns the K closest peers *that answered*, so the node
//!   corrects its estimate by that share (`overlay::superpeer::estimate`, "Thinning"); a
//!   sample lookup in which fewer than `MIN_ANSWERED` answered is reported failed. *Ours*,
//!   session 11: a sample lookup that came back with fewer than K peers because some failed
//!   is used from `MIN_SAMPLE_PEERS` (10) peers on (the thinning keeps it unbiased); in the
//!   200-node prefix swarm such answers were 45 % of the estimate lookups, and retrying them
//!   after a back-off kept the last nodes from deciding for 360 s.
//!   Preimages of other targets (slot keys) are remembered. **At most
//!   [`MAX_LOOKUPS_IN_FLIGHT`] lookups run at once**; the others wait in a queue.
//!   While its lookups run the driver opens the connection gate for outbound dials
//!   (`Gate::open_outbound_until`), so that kad's iterative lookups reach the peers they
//!   discover instead of being refused before dialling.
//! - `LookupFailed` instead of `LookupResult` when a lookup is not fit to decide on (ours): a
//!   closest-peers lookup that timed out, or returned fewer than [`CLOSEST_K`] peers while
//!   some peers failed to answer (on a loaded machine kad's per-peer requests time out and
//!   the answer comes back short; a short answer made size estimates collapse); a provider
//!   lookup that timed out having found nobody. The state machine retries after a back-off.
//!   *Ours*, session 9: a slot claim's lookup (`Query::Closest`) that comes back short is
//!   still used when at least [`CLAIM_MIN_PEERS`] answered. The nodes nearest to a slot's key
//!   are that slot's claimants, they look each other up at once and fill each other's
//!   inbound slots, and in the 200-node prefix swarm nearly every claim lookup came back
//!   short (7-15 of 20 peers): no slot was claimed in 480 s. A claim on a short answer may
//!   be one of two; the state machine's slot check keeps the one nearer to the key
//!   (`overlay::superpeer::node` module doc, step 2, "One head per slot").
//! - `PeerUp` for a connected peer once its coordinate is known (learned from every request
//!   and reply, which carry the sender's coordinate), and again when it moved.
//! - `PeerDown` (failure detection, ours): the member probes its head with a `Hello` when it
//!   has not heard from it for `PROBE_AFTER_TICKS` rounds or its connection to the head closed
//!   with an error; probes are spaced a round apart and scored (unreachable 2, timed out or
//!   closed 1, refused by our own node 0), and a score of 4 reports the head down only once
//!   nothing was heard from it for `suspect_after` ([`crate::superpeer::head_watch`], session 8). A
//!   probe that failed while the node's own loop ran later than `probe_stall` counts nothing
//!   (session 19, "A stalled loop judges nobody"). Two probes in a row that found nothing
//!   listening at the head's addresses report it down at once (session 22, "Nothing
//!   listening is down": the failover no longer waits out `suspect_after`). The report
//!   starts the cluster's re-election inside the state machine.
//! - `SendFailed` (crash-stop's "not delivered, peer down", as in the simulator) only when a
//!   failure shows the peer unreachable ([`crate::net::send_failure`], *ours*, issue 4 session 6:
//!   timeouts reported as failed sends duplicated tokens on a loaded machine). A message that
//!   timed out is sent once more (every super-peer message is safe to receive twice); if that
//!   fails without an answer too, a `Hello` asks whether the peer is there, and only an
//!   unreachable peer turns it into `SendFailed` (not when that check's dial failed while our
//!   own loop stalled beyond `probe_stall`, unless it found nothing listening: the message is
//!   dropped). A dial our own gate or the
//!   peer refused drops the message, and the state machine's own timers ask again; an
//!   election message is sent again instead, up to four times in 2 s while its election
//!   runs ([`Resend`], session 21). A refused `Handover` is also reported as `Refused`
//!   (session 26): it was never sent, and the state machine passes its target over instead
//!   of sending it again every 3 rounds for as long as the peer refuses.
//! - `ElectionTimer` from a tokio deadline armed by `SetElectionTimer`; an answer timer is
//!   held while a message of its election is still on its way ([`waits_for_delivery`]).
//!   A member in a re-election keeps room at its gate for the election's group
//!   (`Gate::set_election_group`).
//! - `NearestRtt`: the smallest ping RTT the node has seen to any peer (its access delay
//!   plus a small rest), whenever it drops by 5 % or more.
//! - `Coordinate` when the node's own coordinate changes ([`SuperPeerDriver::set_point`]:
//!   the one function through which the node's coordinate source feeds super-peer selection).
//!
//! Status: [`SpStatus`] (role, head, cluster size, token, counters) goes into the node's
//! snapshot and the JSON status lines (`superpeer` events on every role change).
//!
//! Known limits: provider records are not republished (the node turns kad's republication off)
//! and `stop_providing` only drops the local record, so a key's remote records outlive their
//! provider until kad's record TTL; a stale record costs a refused `Hello` or `Attach`.

use crate::config::superpeer::SuperPeerSettings;
use crate::directory::members::{node_id_of, Directory};
use crate::net::behaviour::Behaviour;
use crate::net::gate::Gate;
use crate::net::send_failure::{classify, DialRefusal, SendFailure};
use crate::runtime::stall::StallMeter;
use crate::runtime::status::StatusSink;
use crate::superpeer::head_watch::{HeadWatch, Verdict, WatchConfig};
use crate::superpeer::wire::{
    decode_reply, decode_request, encode_reply, encode_request, mentioned_ids, BookEntry, SpBody, SpWireError,
    MAX_BOOK_ENTRIES,
};
use libp2p::swarm::ConnectionError;
use libp2p::{kad, request_response, Multiaddr, PeerId, Swarm};
use overlay::superpeer::estimate::{MIN_ANSWERED, MIN_SAMPLE_PEERS};
use overlay::superpeer::{
    HeadRole, PeerInfo, Point, Query, SpContext, SpEffect, SpInput, SpMessage, SuperPeerConfig, SuperPeerNode,
};
use overlay::{NodeId, Time, Timer};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::Serialize;
use serde_json::json;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// Rounds without a message from the head before a member probes it.
pub const PROBE_AFTER_TICKS: u32 = 2;
/// Kademlia's replication factor: a closest-peers lookup returns at most this many peers.
pub const CLOSEST_K: usize = 20;
/// A slot claim's closest-peers answer is used when at least this many peers answered, even
/// if others failed (see the module doc, `LookupFailed`).
pub const CLAIM_MIN_PEERS: usize = 4;
/// How long a provider result waits for the providers' `Hello` replies.
pub const HELLO_WAIT: Duration = Duration::from_secs(3);
/// How long a provider lookup runs once it found a provider.
pub const PROVIDERS_LINGER: Duration = Duration::from_secs(2);
/// How long the gate stays open for outbound dials after the driver's last lookup.
pub const GATE_OPEN_FOR: Duration = Duration::from_secs(15);
/// Peers whose coordinates / ids the driver remembers (cleared when exceeded).
const MAX_BOOK: usize = 20_000;
/// Inputs handled per call before the rest is dropped (a guard against loops).
const MAX_CHAINED: usize = 10_000;
/// DHT lookups one node runs at once; the rest wait in the driver's queue.
pub const MAX_LOOKUPS_IN_FLIGHT: usize = 1;
/// Dial errors remembered for probe logs (cleared when exceeded).
const MAX_DIAL_ERRORS: usize = 1_024;
/// Preimages remembered (cleared when exceeded).
const MAX_PREIMAGES: usize = 64;

/// One node's super-peer state, for status lines, the swarm report and tests.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct SpStatus {
    /// `starting`, `unattached`, `member`, `head` (token holder before its hold time) or
    /// `super-peer`.
    pub role: String,
    pub method: String,
    /// The head this node is attached to (node id), if a member.
    pub head: Option<String>,
    /// Members of this node's cluster, if it is a head.
    pub cluster_size: usize,
    /// `token:<id>@<epoch>` or `slot:<key>` while this node serves a cluster.
    pub role_key: Option<String>,
    /// Token id and epoch held.
    pub token: Option<u64>,
    pub token_epoch: Option<u32>,
    pub estimate: Option<f64>,
    pub wanted: u64,
    /// Last ping RTT to the head (ms), if a member.
    pub head_rtt_ms: Option<f64>,
    /// Super peers in this node's cache, and its neighbours (peers with a known coordinate).
    pub known_heads: usize,
    pub neighbours: usize,
    pub point: Vec<f32>,
    pub messages_sent: u64,
    /// `messages_sent` by message kind.
    pub messages_by_kind: BTreeMap<String, u64>,
    /// The cluster-election messages among them (`election`) by the election's own message
    /// kind (`Election`, `Answer`, `Coordinator`, ...).
    pub election_by_kind: BTreeMap<String, u64>,
    /// The dead head whose cluster this node is re-electing now (undecided or still
    /// answering), if any.
    pub election_for: Option<String>,
    /// Cluster elections this node has joined (each dead head it re-elected counts once per
    /// election).
    pub elections_joined: u64,
    pub messages_received: u64,
    /// `Hello` requests (coordinate learning and head probes), not counted in `messages_sent`.
    pub hellos_sent: u64,
    /// RTT measurements the state machine asked for (`SpEffect::MeasureRtt`), and how many
    /// of them failed (no peer id known, or the timed `Hello` failed).
    pub rtt_measurements: u64,
    pub rtt_failures: u64,
    /// RTT measurements dropped (reported failed) because the node's loop stalled during
    /// them (`node/src/runtime/stall.rs`).
    pub rtt_stalled: u64,
    /// Whether the node's coordinate is fit to place tokens by (`SpInput::CoordinateFit`).
    pub coordinate_fit: bool,
    pub lookups: u64,
    /// Lookups reported failed to the state machine (timed out, or short with failures).
    pub lookups_failed: u64,
    /// `lookups_failed` by why: `timeout-full` / `timeout-short` (the query timed out with
    /// K peers / fewer), `short` (fewer than K with failures), `thin` (too few of the asked
    /// peers answered), `providers-timeout` (a provider lookup timed out having found nobody).
    pub lookups_failed_by_reason: BTreeMap<String, u64>,
    /// Lookups the state machine asked for, by purpose (`estimate`, `claim-closest`,
    /// `claim-providers`, `slot-check`, `seed`; retries count again).
    pub lookups_by_purpose: BTreeMap<String, u64>,
    pub token_moves: u64,
    pub attach_changes: u64,
    pub rejected: u64,
    pub bad_frames: u64,
    pub send_failures: u64,
    /// Messages dropped after a failure that did not show the peer down (`node/src/net/send_failure.rs`):
    /// refused by our own gate, or undelivered-or-not while the peer still answers.
    pub sends_dropped: u64,
    /// Failed requests whose dial the peer refused before the handshake (it is alive;
    /// `node/src/net/send_failure.rs`).
    pub refused_by_peer: u64,
    /// Election messages sent again after the peer refused them ([`Resend`]).
    pub election_resends: u64,
    /// Times an election timer was held because a message of its election was on its way
    /// ([`waits_for_delivery`]; counted once per [`DEFER_STEP`]).
    pub election_timers_deferred: u64,
    pub heads_reported_down: u64,
    /// Of those, reported because probes found nothing listening at the head's addresses
    /// (`node/src/superpeer/head_watch.rs`, "Nothing listening is down").
    pub heads_found_gone: u64,
    /// Heads this member left because they refused it and served nothing for the whole
    /// silence (`node/src/superpeer/head_watch.rs`, "Refusing is not serving").
    pub heads_not_serving: u64,
    /// Failed head probes not counted because this node's own loop stalled beyond the
    /// watch's limit while they were out (`node/src/superpeer/head_watch.rs`, "A stalled loop judges nobody").
    pub probes_stalled: u64,
    /// Milliseconds since the driver started when the role or the head last changed.
    pub last_change_ms: u64,
    /// The head cache as the state machine judges it (`SuperPeerNode::cached_heads`): why a
    /// member did or did not switch (the swarm report's placement check).
    pub cache: Vec<CacheStatus>,
    /// The state machine's measured RTT to its head (ms), the one its switch rule compares.
    pub head_measured_ms: Option<f64>,
}

/// One cached head (see [`SpStatus::cache`]).
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct CacheStatus {
    pub head: String,
    /// Smallest measured RTT, ms, if measured.
    pub rtt_ms: Option<f64>,
    /// RTT predicted from the coordinates, ms.
    pub predicted_ms: f64,
    /// Refused this node as full; not asked again yet.
    pub backed_off: bool,
    /// Its measurement failed and none succeeded yet.
    pub failed: bool,
    /// How often it was measured again as doubtful (measured far above its prediction).
    pub remeasured: u8,
}

impl SpStatus {
    /// The role as a number, for the Prometheus gauge (see `metrics.rs`).
    pub fn role_code(&self) -> i64 {
        match self.role.as_str() {
            "unattached" => 1,
            "member" => 2,
            "head" => 3,
            "super-peer" => 4,
            _ => 0,
        }
    }
}

/// An election message the peer refused before the handshake (`SendFailure::RefusedByPeer`,
/// or our own gate: `RefusedLocally`), sent again at `at` if this node still takes part in
/// that election (*ours*, issue 4 session 21). The peer is alive, and bully's answer timeout
/// would otherwise take its silence for a crash: in the 200-node prefix swarm a member whose
/// `Election`s were all refused took the role beside the rightful winner. Its gate keeps room
/// for the election's group once it knows of the election (`Gate::set_election_group`), which
/// a peer that has not noticed its head's crash yet does not.
struct Resend {
    at: Instant,
    to: NodeId,
    msg: SpMessage,
    refusals: u8,
}

/// Times a refused election message is sent again, [`RESEND_STEP`] x its refusals after the
/// refusal: 0.2 + 0.4 + 0.6 + 0.8 = 2 s in all, about the cluster election's answer timeout.
const MAX_RESENDS: u8 = 4;
const RESEND_STEP: Duration = Duration::from_millis(200);

/// A cluster election's timer that waits for an answer (bully's T2 and T3, fast bully's T4,
/// a ring's lap, an algorithm's own) does not fire while a message of that election is still
/// on its way: sent less than [`MAX_DEFER`] ago and neither delivered (the request's
/// response) nor failed, or refused and waiting to be sent again ([`Resend`]). It is looked at
/// again every [`DEFER_STEP`] (*ours*, issue 4 session 21). The algorithms' timeouts assume a
/// bounded transmission time (Garcia-Molina's T = 2 T_trans + T_proc), and they scale with the
/// measured RTTs (`SuperPeerConfig::election_rtt_factor`); a message to a member not
/// connected yet first waits for a dial and two handshakes, which in the 200-node prefix swarm
/// took 2.3-3.5 s for a member that had dialled 14 others at once: its T2 of 1.5 s fired
/// before any `Answer` could come, and it took the role beside the rightful winner. The
/// timers of the coordinator's liveness (T1, heartbeat) are not held.
fn waits_for_delivery(t: Timer) -> bool {
    !matches!(t, Timer::T1 | Timer::Heartbeat)
}
const MAX_DEFER: Duration = Duration::from_secs(4);
const DEFER_STEP: Duration = Duration::from_millis(50);

/// When a message that failed as `class`, refused `refusals` times before, is sent again
/// ([`Resend`]): only a refusal (the peer or our own gate closed the door; no crash shown),
/// at most [`MAX_RESENDS`] times, each wait one [`RESEND_STEP`] longer.
fn resend_after(class: SendFailure, refusals: u8) -> Option<Duration> {
    let refused = matches!(class, SendFailure::RefusedByPeer | SendFailure::RefusedLocally);
    (refused && refusals < MAX_RESENDS).then(|| RESEND_STEP * (u32::from(refusals) + 1))
}

enum Sent {
    Msg {
        to: NodeId,
        msg: SpMessage,
        retried: bool,
        /// How often the peer refused this message before (see [`Resend`]).
        refusals: u8,
        at: Instant,
    },
    Hello {
        to: NodeId,
        probe: bool,
    },
    /// A `Hello` sent after a message to `to` failed twice without telling whether it was
    /// delivered (`SendFailure::Ambiguous`): if `to` turns out unreachable, the state machine
    /// gets `SendFailed { to, msg }`; if it answers, nothing (its own timers re-ask). A check
    /// that fails while our own loop stalls beyond the head watch's limit (sent at `at`)
    /// judges nobody either (`node/src/superpeer/head_watch.rs`, "A stalled loop judges nobody").
    Check {
        to: NodeId,
        msg: SpMessage,
        at: Instant,
    },
    /// A `Hello` timed for `SpEffect::MeasureRtt`, sent at `at`. `warm` is false when the
    /// connection had to be dialled first: that round trip includes the handshakes, so it
    /// is not reported and a second, timed `Hello` follows on the open connection.
    Measure {
        to: NodeId,
        at: Instant,
        warm: bool,
    },
}

struct LookupState {
    query: u32,
    /// For a `Query::Sample`: the uniform key actually looked up (the hash of a random
    /// preimage), named in the `SpInput::SampleResult`.
    sampled: Option<NodeId>,
    providers: bool,
    found: Vec<PeerId>,
    first_found: Option<Instant>,
    /// The provider lookup ended with an error (timeout).
    failed: bool,
    /// The key a `Query::Closest` or `Query::Providers` lookup is for (logged with its outcome).
    key: Option<NodeId>,
}

struct Hold {
    query: u32,
    peers: Vec<NodeId>,
    until: Instant,
}

/// The super-peer driver of one node.
pub struct SuperPeerDriver {
    sm: SuperPeerNode,
    cfg: Arc<SuperPeerConfig>,
    settings: SuperPeerSettings,
    me: PeerId,
    me_id: NodeId,
    rng: StdRng,
    t0: Instant,
    started: bool,
    next_tick: Instant,
    round: u32,
    timers: HashMap<Timer, Instant>,
    lookups: HashMap<kad::QueryId, LookupState>,
    /// Lookups asked for and not started yet (at most `MAX_LOOKUPS_IN_FLIGHT` run at once).
    queued: VecDeque<(u32, Query)>,
    /// Preimages found for closest-peer targets (slot keys recur; bounded by `MAX_PREIMAGES`).
    preimages: HashMap<NodeId, Vec<u8>>,
    holds: Vec<Hold>,
    sent: HashMap<request_response::OutboundRequestId, Sent>,
    peers: HashMap<NodeId, PeerId>,
    points: HashMap<NodeId, Point>,
    told: HashMap<NodeId, Point>,
    connected: HashSet<PeerId>,
    /// Refused election messages waiting to be sent again.
    resends: Vec<Resend>,
    /// The election (dead head, group size) whose group the gate keeps room for.
    gate_election: Option<(NodeId, usize)>,
    /// The member's failure detector for its head (`node/src/superpeer/head_watch.rs`).
    watch: HeadWatch,
    /// The last dial error per peer, for the log of a failed probe (bounded).
    dial_errors: HashMap<PeerId, String>,
    rtts: HashMap<PeerId, Duration>,
    /// The smallest ping RTT seen to any peer, and the value last told to the state machine.
    nearest: Option<Duration>,
    nearest_told: Option<Duration>,
    /// The loop lateness last told to the state machine (`SpInput::Lateness`), seconds.
    late_told: f64,
    /// The coordinate fitness last told to the state machine.
    fit_told: Option<bool>,
    last_use: HashMap<PeerId, Instant>,
    queue: VecDeque<SpInput>,
    status: SpStatus,
    sink: StatusSink,
    by_kind: BTreeMap<&'static str, u64>,
    salt: u64,
}

impl SuperPeerDriver {
    pub fn new(me: PeerId, settings: SuperPeerSettings, seed: u64, sink: StatusSink) -> SuperPeerDriver {
        let me_id = node_id_of(&me);
        let cfg = settings.protocol.clone();
        let now = Instant::now();
        let sm = SuperPeerNode::new(me_id, Point::default(), cfg.clone());
        let status = SpStatus { role: "starting".into(), method: cfg.method.name().into(), ..Default::default() };
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5e5e_5e5e_0004);
        // Nodes started together do not all start their lookups in the same second.
        let spread = settings.start_delay.mul_f64(2.0 * rand::Rng::gen::<f64>(&mut rng));
        SuperPeerDriver {
            sm,
            cfg,
            me,
            me_id,
            rng,
            t0: now,
            started: false,
            next_tick: now + settings.start_delay + spread,
            round: 0,
            timers: HashMap::new(),
            lookups: HashMap::new(),
            queued: VecDeque::new(),
            preimages: HashMap::new(),
            holds: Vec::new(),
            sent: HashMap::new(),
            peers: HashMap::new(),
            points: HashMap::new(),
            told: HashMap::new(),
            connected: HashSet::new(),
            resends: Vec::new(),
            gate_election: None,
            watch: HeadWatch::new(WatchConfig {
                probe_after: settings.tick * PROBE_AFTER_TICKS,
                spacing: settings.tick,
                min_silence: settings.suspect_after,
                down_score: 4,
                max_stall: settings.probe_stall,
                gone_after: settings.gone_after_probes,
            }),
            dial_errors: HashMap::new(),
            rtts: HashMap::new(),
            nearest: None,
            nearest_told: None,
            late_told: 0.0,
            fit_told: None,
            last_use: HashMap::new(),
            queue: VecDeque::new(),
            status,
            sink,
            by_kind: BTreeMap::new(),
            salt: seed,
            settings,
        }
    }

    /// The earliest moment the driver needs to run again.
    pub fn next_deadline(&self) -> Instant {
        let t = self.timers.values().min().copied().unwrap_or(self.next_tick);
        let r = self.resends.iter().map(|r| r.at).min().unwrap_or(self.next_tick);
        t.min(r).min(self.next_tick)
    }

    pub fn status(&self) -> &SpStatus {
        &self.status
    }

    /// Messages sent by type.
    pub fn messages_by_kind(&self) -> &BTreeMap<&'static str, u64> {
        &self.by_kind
    }

    /// Whether the connection to `peer` carries this node's overlay: our head, a member of
    /// the cluster we serve, or one of the state machine's neighbours (its cache-exchange
    /// and announcement partners). The peer manager never prunes it.
    /// - Cluster (*ours*, session 8): a head with more members than `target_high` had its
    ///   members' idle connections pruned, and their next probe had to dial again into a
    ///   full head.
    /// - Neighbours (*ours*, session 20): a node talks to one of its neighbours every round,
    ///   yet they were pruned like the DHT lookups' passing connections, and each next
    ///   exchange dialled again: in the 200-node prefix swarm the peer manager pruned
    ///   34,505 connections in 190 s, half of all that were opened, and the noise
    ///   handshakes of the re-dials were the largest single CPU cost.
    /// - The group of the re-election this node takes part in (*ours*, session 21), whose
    ///   members the gate lets in above the inbound gate (`Gate::set_election_group`).
    pub fn keeps(&self, peer: &PeerId) -> bool {
        let id = node_id_of(peer);
        self.sm.attached_to() == Some(id)
            || self.sm.members().iter().any(|m| m.id == id)
            || self.sm.neighbours().iter().any(|n| n.id == id)
            || self.sm.election_group().any(|m| m == id)
    }

    /// When the connection to `peer` last carried super-peer traffic (the peer manager keeps
    /// such connections like ones in election use).
    pub fn last_use(&self, peer: &PeerId) -> Option<Instant> {
        self.last_use.get(peer).copied()
    }

    /// The node's own coordinate changed (the one entry point for the coordinate source).
    pub fn set_point(&mut self, sw: &mut Swarm<Behaviour>, dir: &Directory, p: Point) {
        if p.is_valid() {
            self.run(sw, dir, SpInput::Coordinate(p));
        }
    }

    fn now_time(&self) -> Time {
        Time::from_micros(self.t0.elapsed().as_micros() as u64)
    }

    // ------------------------------------------------------------------ periodic work

    /// Timers, rounds, probes and lookup deadlines. Call whenever `next_deadline` passed (and
    /// harmlessly more often).
    /// `point` is the node's current coordinate (`node/src/coords/driver.rs`).
    /// `late` is the worst lateness of the node's own loop over the last seconds
    /// (`node/src/runtime/stall.rs`), told to the state machine when it changed (`SpInput::Lateness`).
    pub fn poll(
        &mut self,
        sw: &mut Swarm<Behaviour>,
        dir: &Directory,
        now: Instant,
        point: Point,
        fit: bool,
        late: Duration,
    ) {
        let _span = tracing::debug_span!("sp", me = %self.me_id.short()).entered();
        if point.is_valid() && point != self.sm.point() {
            self.run(sw, dir, SpInput::Coordinate(point));
        }
        // Whether the coordinate is fit to place tokens by (`CoordsDriver::is_fit`), told on
        // change. Sticky: a coordinate that was fit once stays fit (its error estimate can
        // rise again for a while, and each unfit report would restart the holder's hold).
        let fit = fit || self.fit_told == Some(true);
        if self.fit_told != Some(fit) {
            self.fit_told = Some(fit);
            self.status.coordinate_fit = fit;
            info!(me = %self.me_id.short(), fit, "coordinate fitness changed");
            self.run(sw, dir, SpInput::CoordinateFit { fit });
        }
        // The nearest RTT (placement by access delay, `overlay::superpeer::token`), when it
        // dropped by 5 % or more since it was last told.
        if let Some(n) =
            self.nearest.filter(|n| self.nearest_told.is_none_or(|t| n.as_secs_f64() < 0.95 * t.as_secs_f64()))
        {
            self.nearest_told = Some(n);
            self.run(sw, dir, SpInput::NearestRtt { rtt: n.as_secs_f64() });
        }
        // The loop's lateness (`SpInput::Lateness`), told when it moved by a tenth of a
        // second or a fifth of itself: it stretches the cluster election's timeouts.
        let late = late.as_secs_f64();
        if (late - self.late_told).abs() > (0.2 * self.late_told).max(0.1) {
            self.late_told = late;
            self.run(sw, dir, SpInput::Lateness { secs: late });
        }
        let due: Vec<Timer> = self.timers.iter().filter(|(_, t)| **t <= now).map(|(k, _)| *k).collect();
        let in_flight = !due.is_empty() && self.election_in_flight(now);
        for t in due {
            if in_flight && waits_for_delivery(t) {
                self.status.election_timers_deferred += 1;
                self.timers.insert(t, now + DEFER_STEP);
                continue;
            }
            self.timers.remove(&t);
            debug!(me = %self.me_id.short(), timer = ?t, "election timer fired");
            self.run(sw, dir, SpInput::ElectionTimer(t));
        }
        if self.resends.iter().any(|r| r.at <= now) {
            let (due, wait): (Vec<Resend>, Vec<Resend>) =
                std::mem::take(&mut self.resends).into_iter().partition(|r| r.at <= now);
            self.resends = wait;
            for r in due {
                if self.election_runs(&r.msg) {
                    self.status.election_resends += 1;
                    self.send_msg_n(sw, dir, r.to, r.msg, false, r.refusals);
                } else {
                    self.status.sends_dropped += 1;
                }
            }
        }
        // Provider lookups that found someone stop after a short linger.
        let linger: Vec<kad::QueryId> = self
            .lookups
            .iter()
            .filter(|(_, l)| l.providers && l.first_found.is_some_and(|f| now.duration_since(f) >= PROVIDERS_LINGER))
            .map(|(id, _)| *id)
            .collect();
        for id in linger {
            if let Some(mut q) = sw.behaviour_mut().kad.query_mut(&id) {
                q.finish();
            }
        }
        // Provider results whose Hello replies are overdue.
        let overdue: Vec<usize> = (0..self.holds.len()).filter(|&i| self.holds[i].until <= now).collect();
        for i in overdue.into_iter().rev() {
            let h = self.holds.swap_remove(i);
            self.deliver_hold(sw, dir, h);
        }
        if now < self.next_tick {
            return;
        }
        self.next_tick = now + self.settings.tick;
        if !self.started {
            let rt: usize = sw.behaviour_mut().kad.kbuckets().map(|b| b.num_entries()).sum();
            if rt == 0 {
                return;
            }
            self.started = true;
            info!(method = self.cfg.method.name(), "super-peer selection starting");
            self.run(sw, dir, SpInput::Start);
            self.refresh(now);
            return;
        }
        self.round = self.round.wrapping_add(1);
        self.run(sw, dir, SpInput::Tick);
        let members: Vec<PeerId> = self.sm.members().iter().filter_map(|m| self.peers.get(&m.id).copied()).collect();
        sw.behaviour_mut().gate.set_serving(self.sm.is_head(), members);
        self.probe_head(sw, dir);
        self.refresh(now);
        self.refresh_cache();
    }

    /// The cache part of the status, once a round (it allocates: not after every input).
    fn refresh_cache(&mut self) {
        let s = &mut self.status;
        s.cache.clear();
        s.cache.extend(self.sm.cached_heads().into_iter().map(|c| CacheStatus {
            head: c.id.to_string(),
            rtt_ms: c.rtt.map(|r| r * 1000.0),
            predicted_ms: c.predicted * 1000.0,
            backed_off: c.backed_off,
            failed: c.failed,
            remeasured: c.remeasured,
        }));
        s.head_measured_ms = self.sm.attached_rtt().map(|r| r * 1000.0);
    }

    fn probe_head(&mut self, sw: &mut Swarm<Behaviour>, dir: &Directory) {
        let head = self.sm.attached_to();
        if let Some(h) = head.filter(|_| self.watch.due(head, Instant::now())) {
            self.send_hello(sw, dir, h, true);
        }
    }

    // ------------------------------------------------------------------ swarm events

    pub fn on_connection_established(
        &mut self,
        sw: &mut Swarm<Behaviour>,
        dir: &Directory,
        peer: PeerId,
        addr: Option<Multiaddr>,
    ) {
        let id = node_id_of(&peer);
        self.remember_peer(id, peer);
        if let Some(a) = addr {
            sw.behaviour_mut().gate.add_addresses(peer, [a]);
        }
        self.connected.insert(peer);
        match self.points.get(&id).copied() {
            Some(p) => self.tell_neighbour(sw, dir, id, p),
            None => self.send_hello(sw, dir, id, false),
        }
    }

    pub fn on_connection_closed(
        &mut self,
        sw: &mut Swarm<Behaviour>,
        dir: &Directory,
        peer: PeerId,
        cause: Option<&ConnectionError>,
    ) {
        let _span = tracing::debug_span!("sp", me = %self.me_id.short()).entered();
        self.connected.remove(&peer);
        let id = node_id_of(&peer);
        let broke = !matches!(cause, None | Some(ConnectionError::KeepAliveTimeout));
        if broke && self.sm.attached_to() == Some(id) {
            debug!(%peer, "connection to the super peer broke; probing it");
            self.watch.broke(Some(id), id, Instant::now());
            self.probe_head(sw, dir);
        }
    }

    /// A dial to `peer` failed: its cause goes into the log line of a failed head probe
    /// (`request_response` reports only "failed to dial").
    pub fn on_dial_error(&mut self, peer: PeerId, error: &libp2p::swarm::DialError) {
        if self.dial_errors.len() >= MAX_DIAL_ERRORS {
            self.dial_errors.clear();
        }
        let mut text = error.to_string();
        text.truncate(200);
        self.dial_errors.insert(peer, text);
    }

    pub fn on_ping(&mut self, peer: PeerId, rtt: Duration) {
        self.rtts.insert(peer, rtt);
        if self.nearest.is_none_or(|n| rtt < n) {
            self.nearest = Some(rtt);
        }
    }

    /// Kademlia events: the results of the driver's own queries. A finished lookup makes room
    /// for a queued one.
    pub fn on_kad(&mut self, sw: &mut Swarm<Behaviour>, dir: &Directory, ev: &kad::Event) {
        self.on_kad_result(sw, dir, ev);
        self.start_lookups(sw);
    }

    fn on_kad_result(&mut self, sw: &mut Swarm<Behaviour>, dir: &Directory, ev: &kad::Event) {
        let kad::Event::OutboundQueryProgressed { id, result, step, stats } = ev else { return };
        let Some(l) = self.lookups.get_mut(id) else { return };
        let mut done = step.last;
        match result {
            kad::QueryResult::GetClosestPeers(r) => {
                let (peers, timed_out) = match r {
                    Ok(ok) => (&ok.peers, false),
                    Err(kad::GetClosestPeersError::Timeout { peers, .. }) => (peers, true),
                };
                // Usable: finished in time with K peers, or with fewer and no peer failing to
                // answer (a network smaller than K + 1). Anything else the state machine
                // must not decide on (see `SpInput::LookupFailed`).
                // A short sample answer is still a thinned uniform sample (its estimate is
                // corrected below) from `MIN_SAMPLE_PEERS` peers on; a claim's from
                // `CLAIM_MIN_PEERS` (see the module doc).
                let min_peers = if l.sampled.is_some() { MIN_SAMPLE_PEERS } else { CLAIM_MIN_PEERS };
                let short = peers.len() < CLOSEST_K && stats.num_failures() > 0 && peers.len() < min_peers;
                // The share of the asked peers that answered: a sample lookup's estimate is
                // corrected by it (`overlay::superpeer::estimate`, "Thinning"), and one
                // with too few answers is not used.
                let asked = stats.num_successes() + stats.num_failures();
                let answered = if asked == 0 { 1.0 } else { f64::from(stats.num_successes()) / f64::from(asked) };
                let thin = l.sampled.is_some() && answered < MIN_ANSWERED;
                if timed_out || short || thin {
                    let query = l.query;
                    self.lookups.remove(id);
                    self.status.lookups_failed += 1;
                    let reason = match (timed_out, short) {
                        (true, _) if peers.len() >= CLOSEST_K => "timeout-full",
                        (true, _) => "timeout-short",
                        (false, true) => "short",
                        (false, false) => "thin",
                    };
                    *self.status.lookups_failed_by_reason.entry(reason.to_string()).or_default() += 1;
                    debug!(
                        query,
                        peers = peers.len(),
                        failures = stats.num_failures(),
                        timed_out,
                        answered,
                        "closest-peers lookup unusable; the state machine retries it"
                    );
                    self.run(sw, dir, SpInput::LookupFailed { query });
                    return;
                }
                let infos: Vec<(PeerId, Vec<Multiaddr>)> = peers.iter().map(|p| (p.peer_id, p.addrs.clone())).collect();
                let (query, sampled, key) = (l.query, l.sampled, l.key);
                self.lookups.remove(id);
                if let Some(key) = key {
                    let mine = overlay::superpeer::estimate::xor_fraction(&key, &self.me_id);
                    let nearest = infos
                        .iter()
                        .map(|(p, _)| overlay::superpeer::estimate::xor_fraction(&key, &node_id_of(p)))
                        .fold(f64::INFINITY, f64::min);
                    debug!(%key, peers = infos.len(), failures = stats.num_failures(), me_nearest = mine < nearest, mine, nearest, "closest-peers lookup");
                }
                for (p, addrs) in &infos {
                    self.remember_peer(node_id_of(p), *p);
                    if !addrs.is_empty() {
                        sw.behaviour_mut().gate.add_addresses(*p, addrs.iter().take(2).cloned());
                    }
                }
                let out: Vec<PeerInfo> = infos
                    .iter()
                    .map(|(p, _)| {
                        let id = node_id_of(p);
                        PeerInfo { id, point: self.points.get(&id).copied().unwrap_or_default() }
                    })
                    .collect();
                match sampled {
                    Some(key) => {
                        debug!(
                            me = %self.me_id,
                            %key,
                            peers = ?out.iter().map(|p| p.id.to_string()).collect::<Vec<_>>(),
                            requests = stats.num_requests(),
                            successes = stats.num_successes(),
                            failures = stats.num_failures(),
                            "sample lookup"
                        );
                        self.run(sw, dir, SpInput::SampleResult { query, key, peers: out, answered })
                    }
                    None => self.run(sw, dir, SpInput::LookupResult { query, peers: out }),
                }
                return;
            }
            kad::QueryResult::GetProviders(r) => match r {
                Ok(kad::GetProvidersOk::FoundProviders { providers, .. }) => {
                    for p in providers {
                        if !l.found.contains(p) && l.found.len() < 64 {
                            l.found.push(*p);
                        }
                    }
                    if !l.found.is_empty() && l.first_found.is_none() {
                        l.first_found = Some(Instant::now());
                    }
                }
                Ok(kad::GetProvidersOk::FinishedWithNoAdditionalRecord { .. }) => done = true,
                Err(e) => {
                    debug!("provider lookup ended: {e}");
                    l.failed = true;
                    done = true;
                }
            },
            _ => return,
        }
        if !done {
            return;
        }
        let Some(l) = self.lookups.remove(id) else { return };
        if let Some(key) = l.key {
            debug!(%key, found = l.found.len(), failed = l.failed, "provider lookup");
        }
        if l.failed && l.found.is_empty() {
            // A timed-out provider lookup that found nobody says nothing about the key.
            self.status.lookups_failed += 1;
            *self.status.lookups_failed_by_reason.entry("providers-timeout".to_string()).or_default() += 1;
            self.run(sw, dir, SpInput::LookupFailed { query: l.query });
            return;
        }
        let mut ids = Vec::with_capacity(l.found.len());
        for p in &l.found {
            let nid = node_id_of(p);
            self.remember_peer(nid, *p);
            if nid != self.me_id {
                ids.push(nid);
            }
        }
        // Learn unknown providers' coordinates first.
        let unknown: Vec<NodeId> = ids.iter().filter(|i| !self.points.contains_key(*i)).copied().collect();
        for u in &unknown {
            self.send_hello(sw, dir, *u, false);
        }
        let h = Hold { query: l.query, peers: ids, until: Instant::now() + HELLO_WAIT };
        if unknown.is_empty() {
            self.deliver_hold(sw, dir, h);
        } else {
            self.holds.push(h);
        }
    }

    fn deliver_hold(&mut self, sw: &mut Swarm<Behaviour>, dir: &Directory, h: Hold) {
        let peers: Vec<PeerInfo> =
            h.peers.iter().filter_map(|id| self.points.get(id).map(|p| PeerInfo { id: *id, point: *p })).collect();
        self.run(sw, dir, SpInput::LookupResult { query: h.query, peers });
    }

    fn check_holds(&mut self, sw: &mut Swarm<Behaviour>, dir: &Directory) {
        let ready: Vec<usize> = (0..self.holds.len())
            .filter(|&i| self.holds[i].peers.iter().all(|p| self.points.contains_key(p)))
            .collect();
        for i in ready.into_iter().rev() {
            let h = self.holds.swap_remove(i);
            self.deliver_hold(sw, dir, h);
        }
    }

    /// Events of the `/peerage/superpeer/1.0.0` request-response behaviour.
    pub fn on_rr(
        &mut self,
        sw: &mut Swarm<Behaviour>,
        dir: &Directory,
        stall: &StallMeter,
        ev: request_response::Event<Vec<u8>, Vec<u8>>,
    ) {
        let _span = tracing::debug_span!("sp", me = %self.me_id.short()).entered();
        use request_response::{Event, Message as RrMessage, OutboundFailure};
        match ev {
            Event::Message { peer, message: RrMessage::Request { request, channel, .. }, .. } => {
                self.last_use.insert(peer, Instant::now());
                let from = node_id_of(&peer);
                self.remember_peer(from, peer);
                let accepted = match decode_request(&request) {
                    Ok(req) => {
                        self.learn_point(sw, dir, from, req.point);
                        self.watch.heard(from, Instant::now());
                        if let SpBody::Message { msg, book } = req.body {
                            if let SpMessage::Election { dead, msg: inner } = &msg {
                                debug!(me = %self.me_id.short(), from = %from.short(), dead = %dead.short(), kind = inner.kind(), "election message received");
                            } else {
                                tracing::trace!(from = %from.short(), kind = msg.kind(), "super-peer message");
                            }
                            self.learn_book(sw, &book);
                            self.status.messages_received += 1;
                            self.run(sw, dir, SpInput::Message { from, msg });
                        }
                        true
                    }
                    Err(SpWireError::Empty) => {
                        // Not a peer's bad input: a sender whose request timed out closes the
                        // stream, and the request arrives empty. Counted, logged quietly.
                        debug!(%peer, "empty super-peer request (the sender gave up on it)");
                        self.status.bad_frames += 1;
                        false
                    }
                    Err(e) => {
                        warn!(%peer, len = request.len(), "malformed super-peer frame: {e}");
                        self.status.bad_frames += 1;
                        false
                    }
                };
                let reply = encode_reply(self.sm.point(), accepted).unwrap_or_default();
                let _ = sw.behaviour_mut().superpeer.send_response(channel, reply);
            }
            Event::Message { peer, message: RrMessage::Response { request_id, response }, .. } => {
                self.last_use.insert(peer, Instant::now());
                let from = node_id_of(&peer);
                let sent = self.sent.remove(&request_id);
                match decode_reply(&response) {
                    Ok(r) => {
                        self.watch.heard(from, Instant::now());
                        self.learn_point(sw, dir, from, r.point);
                        if !r.accepted {
                            debug!(%peer, "peer refused our super-peer frame");
                        }
                    }
                    Err(e) => {
                        warn!(%peer, "malformed super-peer reply: {e}");
                        self.status.bad_frames += 1;
                    }
                }
                if let Some(Sent::Check { .. }) = sent {
                    // The peer is there: the message was delivered or lost, not failed.
                    self.status.sends_dropped += 1;
                }
                if let Some(Sent::Hello { to, probe: true }) = sent {
                    self.watch.answered(to, Instant::now());
                }
                if let Some(Sent::Measure { to, at, warm }) = sent {
                    if warm {
                        let rtt = at.elapsed();
                        // A round trip the node's loop stalled in is not this path's delay
                        // (`node/src/runtime/stall.rs`): reported as failed, so the state machine asks again
                        // later instead of keeping an inflated minimum for good.
                        let rtt = if stall.spoils(at, rtt) {
                            self.status.rtt_stalled += 1;
                            None
                        } else {
                            Some(rtt.as_secs_f64())
                        };
                        self.run(sw, dir, SpInput::Rtt { peer: to, rtt });
                    } else {
                        self.send_measure(sw, dir, to, true);
                        // A failure to send it was queued as `SpInput::Rtt { rtt: None }`.
                        if let Some(i) = self.queue.pop_front() {
                            self.run(sw, dir, i);
                        }
                    }
                }
                self.check_holds(sw, dir);
            }
            Event::OutboundFailure { peer, request_id, error, .. } => {
                let Some(sent) = self.sent.remove(&request_id) else { return };
                self.status.send_failures += 1;
                let refusal = if matches!(error, OutboundFailure::DialFailure) {
                    sw.behaviour_mut().gate.dial_refusal(&peer)
                } else {
                    DialRefusal::None
                };
                let class = classify(&error, sw.is_connected(&peer), refusal);
                if class == SendFailure::RefusedByPeer {
                    self.status.refused_by_peer += 1;
                }
                match sent {
                    Sent::Msg { to, msg, retried, refusals, .. } => {
                        debug!(%peer, kind = msg.kind(), ?class, "super-peer send failed: {error}");
                        if Some(to) == self.sm.attached_to() {
                            // Never give up the head on one failure: probe it.
                            self.watch.broke(Some(to), to, Instant::now());
                            self.probe_head(sw, dir);
                        } else {
                            match class {
                                // Crash-stop's "not delivered, peer down" (`node/src/net/send_failure.rs`).
                                SendFailure::Unreachable | SendFailure::NoListener => {
                                    info!(me = %self.me_id.short(), to = %to.short(), kind = msg.kind(), "super-peer message undeliverable, the peer is taken for down: {error}");
                                    self.run(sw, dir, SpInput::SendFailed { to, msg })
                                }
                                // Never sent, and nothing known about the peer (or the peer
                                // is alive and refused the connection: no crash to report,
                                // `node/src/net/send_failure.rs`): the message is dropped, the state
                                // machine's own timers ask again.
                                // An election message is sent again while its election runs
                                // ([`Resend`]).
                                // A refused handover is the state machine's to decide on
                                // (`SpInput::Refused`): its target is passed over.
                                SendFailure::RefusedLocally | SendFailure::RefusedByPeer => {
                                    match resend_after(class, refusals).filter(|_| self.election_runs(&msg)) {
                                        Some(wait) => {
                                            let at = Instant::now() + wait;
                                            self.resends.push(Resend { at, to, msg, refusals: refusals + 1 })
                                        }
                                        // Not our retry: its first copy may have arrived.
                                        None if !retried && matches!(msg, SpMessage::Handover { .. }) => {
                                            self.status.sends_dropped += 1;
                                            self.run(sw, dir, SpInput::Refused { to, msg })
                                        }
                                        None => self.status.sends_dropped += 1,
                                    }
                                }
                                // Maybe delivered: send it once more (every super-peer message
                                // is safe to receive twice), then ask whether the peer is there.
                                SendFailure::Ambiguous if !retried => self.send_msg(sw, dir, to, msg, true),
                                SendFailure::Ambiguous => self.send_check(sw, dir, to, msg),
                            }
                        }
                    }
                    Sent::Check { to, msg, at } => {
                        let stalled = stall.worst_during(at);
                        // A stall excuses a failed dial, not one that found nothing listening
                        // (no timeout is involved: `node/src/superpeer/head_watch.rs`, "Nothing listening is down").
                        if class == SendFailure::Unreachable && self.watch.stalled(stalled) {
                            self.status.sends_dropped += 1;
                            info!(me = %self.me_id.short(), to = %to.short(), kind = msg.kind(), stall_ms = stalled.as_millis() as u64, "super-peer message undeliverable after a check while our own loop stalled: dropped, the peer is not taken for down ({error})");
                        } else if class.unreachable() {
                            info!(me = %self.me_id.short(), to = %to.short(), kind = msg.kind(), "super-peer message undeliverable after a check, the peer is taken for down: {error}");
                            self.run(sw, dir, SpInput::SendFailed { to, msg });
                        } else {
                            self.status.sends_dropped += 1;
                        }
                    }
                    Sent::Hello { to, probe } => {
                        // Scored, spaced, and down only after a silence, or after probes in a row
                        // that found nothing listening (`node/src/superpeer/head_watch.rs`); the next probe goes out
                        // from `probe_head` once a round has passed.
                        if probe && Some(to) == self.sm.attached_to() {
                            let dial = self.dial_errors.remove(&peer).unwrap_or_default();
                            let now = Instant::now();
                            let stalled = self.watch.probe_started().map_or(Duration::ZERO, |s| stall.worst_during(s));
                            let stall_ms = stalled.as_millis() as u64;
                            let verdict = self.watch.failed(to, class, now, stalled);
                            match verdict {
                                Verdict::Uncounted => {}
                                Verdict::Alive => {
                                    debug!(me = %self.me_id.short(), head = %to.short(), "probe refused by the super peer: it is alive");
                                }
                                Verdict::NotServing => {
                                    info!(me = %self.me_id.short(), head = %to.short(), silence_ms = self.settings.suspect_after.as_millis() as u64, "super peer refused us and served nothing for the whole silence: leaving it");
                                    self.status.heads_not_serving += 1;
                                    self.run(sw, dir, SpInput::HeadNotServing(to));
                                }
                                Verdict::Stalled => {
                                    self.status.probes_stalled += 1;
                                    info!(me = %self.me_id.short(), head = %to.short(), ?class, stall_ms, "probe of the super peer failed while our own loop stalled: not counted ({error})");
                                }
                                Verdict::Again => {
                                    info!(me = %self.me_id.short(), head = %to.short(), ?class, dial, stall_ms, "probe of the super peer failed: {error}");
                                }
                                Verdict::Down | Verdict::Gone => {
                                    let why = if verdict == Verdict::Gone { "nothing listens" } else { "silent" };
                                    info!(me = %self.me_id.short(), head = %to.short(), ?class, dial, stall_ms, why, "super peer unreachable: reporting it down ({error})");
                                    self.status.heads_reported_down += 1;
                                    if verdict == Verdict::Gone {
                                        self.status.heads_found_gone += 1;
                                    }
                                    self.run(sw, dir, SpInput::PeerDown(to));
                                }
                            }
                        }
                        self.check_holds(sw, dir);
                    }
                    Sent::Measure { to, .. } => {
                        debug!(%peer, "RTT measurement failed: {error}");
                        self.status.rtt_failures += 1;
                        self.run(sw, dir, SpInput::Rtt { peer: to, rtt: None });
                    }
                }
            }
            Event::InboundFailure { peer, error, .. } => debug!(%peer, "super-peer request from peer failed: {error}"),
            Event::ResponseSent { .. } => {}
        }
    }

    // ------------------------------------------------------------------ learning

    fn remember_peer(&mut self, id: NodeId, peer: PeerId) {
        if self.peers.len() >= MAX_BOOK && !self.peers.contains_key(&id) {
            self.peers.clear();
        }
        self.peers.insert(id, peer);
    }

    fn learn_book(&mut self, sw: &mut Swarm<Behaviour>, book: &[BookEntry]) {
        for e in book {
            if let Some((peer, id, addrs)) = e.parse() {
                if peer == self.me {
                    continue;
                }
                self.remember_peer(id, peer);
                if !addrs.is_empty() {
                    sw.behaviour_mut().gate.add_addresses(peer, addrs);
                }
            }
        }
    }

    fn learn_point(&mut self, sw: &mut Swarm<Behaviour>, dir: &Directory, id: NodeId, p: Point) {
        if !p.is_valid() || id == self.me_id {
            return;
        }
        if self.points.len() >= MAX_BOOK && !self.points.contains_key(&id) {
            self.points.clear();
        }
        self.points.insert(id, p);
        let connected = self.peers.get(&id).is_some_and(|peer| self.connected.contains(peer));
        if connected {
            self.tell_neighbour(sw, dir, id, p);
        }
    }

    fn tell_neighbour(&mut self, sw: &mut Swarm<Behaviour>, dir: &Directory, id: NodeId, p: Point) {
        if self.told.get(&id) == Some(&p) {
            return;
        }
        self.told.insert(id, p);
        self.run(sw, dir, SpInput::PeerUp(PeerInfo { id, point: p }));
    }

    // ------------------------------------------------------------------ the state machine

    /// Feed one input and everything it causes.
    fn run(&mut self, sw: &mut Swarm<Behaviour>, dir: &Directory, input: SpInput) {
        self.queue.push_back(input);
        let mut n = 0;
        while let Some(i) = self.queue.pop_front() {
            n += 1;
            if n > MAX_CHAINED {
                warn!("more than {MAX_CHAINED} chained super-peer inputs; dropping the rest");
                self.queue.clear();
                break;
            }
            // What a rejection was a reaction to (the log names the input's kind).
            let what = match &i {
                SpInput::Message { msg: SpMessage::Election { dead, msg }, .. } => Some((msg.kind(), Some(*dead))),
                SpInput::Message { msg, .. } => Some((msg.kind(), None)),
                _ => None,
            };
            let mut effects = Vec::new();
            {
                let now = self.now_time();
                let mut ctx = SpContext::new(now, &mut self.rng, &mut effects);
                self.sm.handle(&mut ctx, i);
            }
            for e in effects {
                self.effect(sw, dir, e, what);
            }
        }
        self.keep_room_for_election(sw, dir);
        self.refresh(Instant::now());
    }

    /// Whether a message of the re-election this node takes part in, sent less than
    /// [`MAX_DEFER`] ago, is neither delivered nor failed yet, or waits to be sent again
    /// ([`waits_for_delivery`]).
    fn election_in_flight(&self, now: Instant) -> bool {
        self.resends.iter().any(|r| self.election_runs(&r.msg))
            || self.sent.values().any(|s| {
                matches!(s, Sent::Msg { msg, at, .. }
                    if now.saturating_duration_since(*at) < MAX_DEFER && self.election_runs(msg))
            })
    }

    /// Whether `msg` belongs to the cluster re-election this node takes part in now.
    fn election_runs(&self, msg: &SpMessage) -> bool {
        matches!(msg, SpMessage::Election { dead, .. } if self.sm.election_for() == Some(*dead))
    }

    /// Tells the gate the group of the re-election this node takes part in, when it changed
    /// (`Gate::set_election_group`).
    fn keep_room_for_election(&mut self, sw: &mut Swarm<Behaviour>, dir: &Directory) {
        let now = self.sm.election_for().map(|d| (d, self.sm.election_group().count()));
        if now == self.gate_election {
            return;
        }
        self.gate_election = now;
        let me = self.me;
        let group: Vec<PeerId> =
            self.sm.election_group().filter_map(|id| self.resolve(dir, &id)).filter(|p| *p != me).collect();
        sw.behaviour_mut().gate.set_election_group(group);
    }

    /// Carries out one effect; `what` names the input it came from (its kind, and the dead
    /// head for an election message), for the log of a rejection.
    fn effect(
        &mut self,
        sw: &mut Swarm<Behaviour>,
        dir: &Directory,
        e: SpEffect,
        what: Option<(&str, Option<NodeId>)>,
    ) {
        match e {
            SpEffect::Send { to, msg } => self.send_msg(sw, dir, to, msg, false),
            SpEffect::Lookup { query, what } => {
                self.queued.push_back((query, what));
                self.start_lookups(sw);
            }
            SpEffect::Provide { key } => {
                let b = sw.behaviour_mut();
                b.gate.open_outbound_until(Instant::now() + GATE_OPEN_FOR);
                if let Err(e) = b.kad.start_providing(kad::RecordKey::new(&key.0)) {
                    warn!("cannot provide a super-peer key: {e}");
                }
            }
            SpEffect::Unprovide { key } => sw.behaviour_mut().kad.stop_providing(&kad::RecordKey::new(&key.0)),
            SpEffect::SetElectionTimer { timer, after } => {
                self.timers.insert(timer, Instant::now() + after);
            }
            SpEffect::CancelElectionTimer { timer } => {
                self.timers.remove(&timer);
            }
            SpEffect::BecomeSuperPeer => info!(me = %self.me_id.short(), "became a super peer"),
            SpEffect::StopSuperPeer => info!(me = %self.me_id.short(), "no longer a super peer"),
            SpEffect::AttachedTo(h) => {
                debug!(head = %h.short(), "attached to a super peer");
                self.status.attach_changes += 1;
                let now = Instant::now();
                self.watch.follow(Some(h), now);
                self.watch.heard(h, now);
            }
            SpEffect::Detached => debug!("detached from the super peer"),
            SpEffect::TokenAcquired { token, epoch } => debug!(token = token.0, epoch, "token acquired"),
            SpEffect::TokenMovePriced(r) => {
                // What the move was priced on (ms), for the record: two holders that pass a
                // token back and forth show which term they disagree on.
                let overlay::superpeer::MoveRecord {
                    to,
                    here,
                    there,
                    radius,
                    members,
                    holders,
                    reports,
                    needed,
                    floor,
                } = *r;
                debug!(
                    to = %to.short(),
                    here_ms = ms(here.total),
                    there_ms = ms(there.total),
                    here_rtt = ms(here.rtt),
                    there_rtt = ms(there.rtt),
                    here_access = ms(here.access),
                    there_access = ms(there.access),
                    here_repulsion = ms(here.repulsion),
                    there_repulsion = ms(there.repulsion),
                    here_point = %point_ms(&here.point),
                    there_point = %point_ms(&there.point),
                    radius_ms = ms(radius),
                    members,
                    holders,
                    reports,
                    needed = (needed as f64 * 1e3).round() / 1e3,
                    floor_ms = ms(floor),
                    "token move priced"
                );
            }
            SpEffect::TokenReleased { token, epoch } => {
                debug!(token = token.0, epoch, "token released");
                self.status.token_moves += 1;
            }
            SpEffect::MeasureRtt { peer } => {
                self.status.rtt_measurements += 1;
                self.send_measure(sw, dir, peer, false);
            }
            SpEffect::Rejected { from, reason } => {
                self.status.rejected += 1;
                let (kind, dead) = what.unwrap_or(("timer or local input", None));
                let dead = dead.map(|d| d.short());
                warn!(me = %self.me_id.short(), from = %from.short(), reason, kind, ?dead, "super-peer input rejected");
            }
        }
    }

    /// Starts queued lookups while fewer than [`MAX_LOOKUPS_IN_FLIGHT`] run. *Ours* (issue
    /// 4's 200-node swarm): every node used to start its 8 estimate lookups at once, and
    /// kad's iterative lookups dial the peers they discover: 1,600 lookups and thousands of
    /// handshakes in the same seconds left the latency emulation half a second late, the
    /// lookups timed out, and their retries kept the swarm overloaded.
    fn start_lookups(&mut self, sw: &mut Swarm<Behaviour>) {
        while self.lookups.len() < MAX_LOOKUPS_IN_FLIGHT {
            let Some((query, what)) = self.queued.pop_front() else { return };
            self.status.lookups += 1;
            sw.behaviour_mut().gate.open_outbound_until(Instant::now() + GATE_OPEN_FOR);
            let key = match what {
                Query::Providers { key } | Query::Closest { key } => Some(key),
                Query::Sample { .. } => None,
            };
            let (qid, providers, sampled) = match what {
                Query::Providers { key } => {
                    (sw.behaviour_mut().kad.get_providers(kad::RecordKey::new(&key.0)), true, None)
                }
                Query::Closest { key } => {
                    let pre = self.preimage_of(&key);
                    (sw.behaviour_mut().kad.get_closest_peers(pre), false, None)
                }
                Query::Sample { .. } => {
                    // Any uniform key serves: a random preimage's hash, which kad aims at
                    // exactly, instead of a 2^lookup_bits search for the drawn key.
                    let pre: [u8; 8] = rand::Rng::gen(&mut self.rng);
                    (sw.behaviour_mut().kad.get_closest_peers(pre.to_vec()), false, Some(NodeId::hash_of(&pre)))
                }
            };
            self.lookups.insert(
                qid,
                LookupState { query, sampled, providers, found: Vec::new(), first_found: None, failed: false, key },
            );
        }
    }

    /// A preimage whose hash shares the first `lookup_bits` bits with `key` (remembered).
    fn preimage_of(&mut self, key: &NodeId) -> Vec<u8> {
        if let Some(p) = self.preimages.get(key) {
            return p.clone();
        }
        self.salt = self.salt.wrapping_add(0x1_0000_0000);
        let pre = lookup_preimage(key, self.settings.lookup_bits, self.salt);
        if self.preimages.len() >= MAX_PREIMAGES {
            self.preimages.clear();
        }
        self.preimages.insert(*key, pre.clone());
        pre
    }

    fn resolve(&self, dir: &Directory, id: &NodeId) -> Option<PeerId> {
        self.peers.get(id).copied().or_else(|| dir.peer_of(id))
    }

    fn addrs(gate: &Gate, dir: &Directory, peer: &PeerId) -> Vec<Multiaddr> {
        let mut a: Vec<Multiaddr> = gate.addresses_of(peer).to_vec();
        if let Some(m) = dir.get(peer) {
            for x in &m.addrs {
                if !a.contains(x) {
                    a.push(x.clone());
                }
            }
        }
        a
    }

    fn send_msg(&mut self, sw: &mut Swarm<Behaviour>, dir: &Directory, to: NodeId, msg: SpMessage, retried: bool) {
        self.send_msg_n(sw, dir, to, msg, retried, 0);
    }

    /// [`Self::send_msg`] of a message the peer refused `refusals` times before ([`Resend`]).
    fn send_msg_n(
        &mut self,
        sw: &mut Swarm<Behaviour>,
        dir: &Directory,
        to: NodeId,
        msg: SpMessage,
        retried: bool,
        refusals: u8,
    ) {
        if !retried && refusals == 0 {
            self.status.messages_sent += 1;
            *self.by_kind.entry(msg.kind()).or_default() += 1;
            *self.status.messages_by_kind.entry(msg.kind().to_string()).or_default() += 1;
            if let SpMessage::Election { msg: inner, .. } = &msg {
                *self.status.election_by_kind.entry(inner.kind().to_string()).or_default() += 1;
            }
        }
        if to == self.me_id {
            self.queue.push_back(SpInput::Message { from: self.me_id, msg });
            return;
        }
        let Some(peer) = self.resolve(dir, &to) else {
            info!(me = %self.me_id.short(), to = %to.short(), kind = msg.kind(), "super-peer message to a peer with no known peer id: taken for down");
            self.status.send_failures += 1;
            self.queue.push_back(SpInput::SendFailed { to, msg });
            return;
        };
        let mut book = Vec::new();
        for id in mentioned_ids(&msg).into_iter().take(MAX_BOOK_ENTRIES) {
            if id == to {
                continue;
            }
            let p = if id == self.me_id { Some(self.me) } else { self.resolve(dir, &id) };
            if let Some(p) = p {
                let addrs = if p == self.me {
                    sw.listeners().cloned().collect::<Vec<_>>()
                } else {
                    Self::addrs(&sw.behaviour().gate, dir, &p)
                };
                book.push(BookEntry::new(&p, &addrs));
            }
        }
        let bytes = match encode_request(self.sm.point(), SpBody::Message { msg: msg.clone(), book }) {
            Ok(b) => b,
            Err(e) => {
                warn!(kind = msg.kind(), "cannot encode a super-peer message: {e}");
                self.queue.push_back(SpInput::SendFailed { to, msg });
                return;
            }
        };
        if let SpMessage::Election { dead, msg: inner } = &msg {
            let warm = self.connected.contains(&peer);
            debug!(me = %self.me_id.short(), to = %to.short(), dead = %dead.short(), kind = inner.kind(), warm, retried, refusals, "election message sent");
        }
        let addrs = Self::addrs(&sw.behaviour().gate, dir, &peer);
        let b = sw.behaviour_mut();
        b.gate.want(peer);
        let rid = b.superpeer.send_request_with_addresses(&peer, bytes, addrs);
        self.last_use.insert(peer, Instant::now());
        self.sent.insert(rid, Sent::Msg { to, msg, retried, refusals, at: Instant::now() });
    }

    /// Measures the RTT to `to` for the state machine (`SpEffect::MeasureRtt`): times a
    /// `Hello` request/response on an open connection (the emulated latency applies to it as
    /// to every stream); when no connection is open, the first `Hello` dials and a second
    /// one is timed. Answers with exactly one `SpInput::Rtt` (`None` when no peer id is
    /// known, encoding fails or the request fails).
    fn send_measure(&mut self, sw: &mut Swarm<Behaviour>, dir: &Directory, to: NodeId, again: bool) {
        let peer = self.resolve(dir, &to);
        let bytes = encode_request(self.sm.point(), SpBody::Hello).ok();
        let (Some(peer), Some(bytes)) = (peer, bytes) else {
            self.status.rtt_failures += 1;
            self.queue.push_back(SpInput::Rtt { peer: to, rtt: None });
            return;
        };
        let warm = again || self.connected.contains(&peer);
        self.status.hellos_sent += 1;
        let addrs = Self::addrs(&sw.behaviour().gate, dir, &peer);
        let b = sw.behaviour_mut();
        b.gate.want(peer);
        let rid = b.superpeer.send_request_with_addresses(&peer, bytes, addrs);
        self.last_use.insert(peer, Instant::now());
        self.sent.insert(rid, Sent::Measure { to, at: Instant::now(), warm });
    }

    /// See [`Sent::Check`].
    fn send_check(&mut self, sw: &mut Swarm<Behaviour>, dir: &Directory, to: NodeId, msg: SpMessage) {
        if self.resolve(dir, &to).is_none() {
            self.run(sw, dir, SpInput::SendFailed { to, msg });
            return;
        }
        self.send_bare_hello(sw, dir, to, Sent::Check { to, msg, at: Instant::now() });
    }

    fn send_hello(&mut self, sw: &mut Swarm<Behaviour>, dir: &Directory, to: NodeId, probe: bool) {
        if self.send_bare_hello(sw, dir, to, Sent::Hello { to, probe }) && probe {
            self.watch.probe_sent(Instant::now());
        }
    }

    /// Sends `to` a `Hello` and records it as `sent` (a position query, a head probe or the
    /// check after an ambiguous failure). False when `to` has no known peer id or the frame
    /// could not be built.
    fn send_bare_hello(&mut self, sw: &mut Swarm<Behaviour>, dir: &Directory, to: NodeId, sent: Sent) -> bool {
        let Some(peer) = self.resolve(dir, &to) else { return false };
        let Ok(bytes) = encode_request(self.sm.point(), SpBody::Hello) else { return false };
        self.status.hellos_sent += 1;
        let addrs = Self::addrs(&sw.behaviour().gate, dir, &peer);
        let b = sw.behaviour_mut();
        b.gate.want(peer);
        let rid = b.superpeer.send_request_with_addresses(&peer, bytes, addrs);
        self.sent.insert(rid, sent);
        true
    }

    // ------------------------------------------------------------------ status

    fn refresh(&mut self, now: Instant) {
        let sm = &self.sm;
        let role = if !self.started {
            "starting"
        } else if sm.is_super_peer() {
            "super-peer"
        } else if sm.is_head() {
            "head"
        } else if sm.attached_to().is_some() {
            "member"
        } else {
            "unattached"
        };
        let head = sm.attached_to().map(|h| h.to_string());
        let role_key = sm.role().map(|r| match r {
            HeadRole::Slot { key } => format!("slot:{key}"),
            HeadRole::Token { token, .. } => format!("token:{:016x}", token.0),
        });
        let token = sm.token();
        let election = sm.election_for().filter(|_| sm.in_election()).map(|d| d.short());
        if election != self.status.election_for {
            match &election {
                Some(dead) => {
                    self.status.elections_joined += 1;
                    info!(me = %self.me_id.short(), %dead, "cluster re-election joined");
                }
                None => debug!(me = %self.me_id.short(), "cluster re-election over"),
            }
            self.status.election_for = election;
        }
        // Refreshed on every status update, so only a changed count allocates.
        for (purpose, n) in sm.lookups_by_purpose() {
            let n = u64::from(n);
            if n > 0 && self.status.lookups_by_purpose.get(purpose) != Some(&n) {
                self.status.lookups_by_purpose.insert(purpose.to_string(), n);
            }
        }
        let changed = self.status.role != role || self.status.head != head || self.status.role_key != role_key;
        let s = &mut self.status;
        if changed {
            s.last_change_ms = now.saturating_duration_since(self.t0).as_millis() as u64;
            s.role = role.to_string();
            s.head = head;
            s.role_key = role_key;
        }
        s.cluster_size = sm.members().len();
        s.known_heads = sm.known_head_count();
        s.neighbours = sm.neighbour_count();
        s.token = token.map(|t| t.0 .0);
        s.token_epoch = token.map(|t| t.1);
        s.estimate = sm.estimate();
        s.wanted = sm.wanted();
        s.point = {
            let p = sm.point();
            let mut v: Vec<f32> = p.x.to_vec();
            v.push(p.h);
            v
        };
        s.head_rtt_ms = sm
            .attached_to()
            .and_then(|h| self.peers.get(&h))
            .and_then(|p| self.rtts.get(p))
            .map(|d| d.as_secs_f64() * 1000.0);
        if changed {
            self.sink.emit(
                "superpeer",
                json!({ "role": s.role, "head": s.head, "role_key": s.role_key, "cluster_size": s.cluster_size,
                        "token": s.token, "token_epoch": s.token_epoch }),
            );
        }
    }
}

/// A preimage whose SHA-256 (the point kad looks up) shares the first `bits` bits with `key`
/// (see the module doc). Tries at most `2^(bits + 8)` candidates and returns the best one
/// found if none matched (probability below e^-256).
pub fn lookup_preimage(key: &NodeId, bits: u32, salt: u64) -> Vec<u8> {
    let bits = bits.min(24);
    let limit: u64 = 1u64 << (bits + 8);
    let mut best = (0u32, salt);
    for i in 0..limit {
        let n = salt.wrapping_add(i);
        let cpl = NodeId::hash_of(&n.to_be_bytes()).common_prefix_len(key);
        if cpl >= bits {
            return n.to_be_bytes().to_vec();
        }
        if cpl > best.0 {
            best = (cpl, n);
        }
    }
    best.1.to_be_bytes().to_vec()
}

/// Seconds as ms with one decimal, for the log (`+ 0.0`: no "-0").
fn ms(x: f32) -> f64 {
    (x as f64 * 1e4).round() / 10.0 + 0.0
}

/// A point for the log, in ms: the components up to the last non-zero one, then the height
/// (`1.2,-3.4/0.5`).
fn point_ms(p: &overlay::superpeer::Point) -> String {
    let n = p.x.iter().rposition(|c| *c != 0.0).map_or(0, |i| i + 1);
    let xs: Vec<String> = p.x[..n].iter().map(|c| ms(*c).to_string()).collect();
    format!("{}/{}", xs.join(","), ms(p.h))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_messages_are_sent_again_four_times_with_growing_waits() {
        let waits: Vec<Option<Duration>> =
            (0..=MAX_RESENDS).map(|n| resend_after(SendFailure::RefusedByPeer, n)).collect();
        let ms = |m: u64| Some(Duration::from_millis(m));
        assert_eq!(waits, vec![ms(200), ms(400), ms(600), ms(800), None]);
        let total: Duration = waits.iter().flatten().sum();
        assert_eq!(total, Duration::from_secs(2), "about the cluster election's answer timeout");
        assert_eq!(resend_after(SendFailure::RefusedLocally, 0), ms(200), "our own gate's refusal too");
        for class in [SendFailure::Unreachable, SendFailure::NoListener, SendFailure::Ambiguous] {
            assert_eq!(resend_after(class, 0), None, "{class:?} is not a refusal: its own rules apply");
        }
    }

    #[test]
    fn answer_timers_wait_for_delivery_liveness_timers_do_not() {
        for t in [Timer::T2, Timer::T3, Timer::T4, Timer::Lap, Timer::Custom(1)] {
            assert!(waits_for_delivery(t), "{t:?} waits for an answer");
        }
        for t in [Timer::T1, Timer::Heartbeat] {
            assert!(!waits_for_delivery(t), "{t:?} watches the coordinator or paces it");
        }
        assert!(MAX_DEFER < Duration::from_millis(crate::config::Limits::default().request_timeout_ms));
    }

    #[test]
    fn preimage_shares_the_prefix() {
        for (i, bits) in [0u32, 4, 12, 16].into_iter().enumerate() {
            let key = NodeId::hash_of(&[i as u8, 7]);
            let pre = lookup_preimage(&key, bits, 99 + i as u64);
            assert!(NodeId::hash_of(&pre).common_prefix_len(&key) >= bits);
        }
    }
}
