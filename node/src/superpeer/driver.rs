//! Runs the sans-IO super-peer state machine (`overlay::superpeer::SuperPeerNode`) inside a
//! libp2p node: the same state machine the simulator drives
//! (`experiments/src/superpeers/protocol.rs`), fed by the network. Every rule that decides what
//! to send or whom to trust is the core's (`overlay::superpeer`, `overlay::detect`); this file
//! turns libp2p events into inputs and effects into requests, lookups and timers.
//!
//! Inputs (`SpInput`) and where they come from:
//! - `Start` once `start_delay` plus a random share of twice that has passed (nodes started
//!   together spread their first lookups), the routing table has an entry and the member
//!   directory that fills it has settled (`overlay::superpeer::vicinity::table_ready`); `Tick`
//!   every `overlay::superpeer::ROUND`.
//! - `Message` from `/peerage/superpeer/2.0.0` (wire format in `wire.rs`; a malformed frame is
//!   logged, counted and answered "refused").
//! - `LookupResult` from Kademlia, with the lookup's statistics (timed out, answered, failed);
//!   the state machine judges it (`overlay::superpeer::lookup`). `Query::Closest` runs
//!   `get_closest_peers` of a preimage whose SHA-256 shares the first [`LOOKUP_BITS`] bits with
//!   the key (kad hashes its targets; our node ids are kad's keys, so the order of the peers
//!   returned is their order by distance to the key); `Query::Sample` looks up the hash of a
//!   random preimage and names that key; `Query::Providers` runs `get_providers`, stops
//!   `PROVIDERS_LINGER` after the first provider, and learns each provider's position with a
//!   `Hello` (at most `HELLO_WAIT`) before it reports. At most [`MAX_LOOKUPS_IN_FLIGHT`]
//!   lookups run at once (a burst of iterative lookups, each dialling the peers it discovers,
//!   saturates a one-process swarm); the gate admits their dials meanwhile.
//! - `PeerUp` for a connected peer once its position is known (every request and reply carries
//!   the sender's), and again when it moved.
//! - `PeerDown` and `HeadNotServing` from the member's head watch (`overlay::detect::head_watch`):
//!   probes (`Hello`) after a silence or a broken connection, scored by the failure's kind.
//! - `SendFailed` and `Refused` after a failed request, by the core's rule
//!   (`overlay::detect::failure::after_failure`) on the kind `net/send_failure.rs` classifies;
//!   the rule also says when to send again, or to check whether the peer is there.
//! - `Timer` from the timer table; an answer timer waits while a message of its election is
//!   still on its way (`failure::holds_timer`). A member in a re-election keeps room at its gate
//!   for the election's group (`Gate::set_election_group`).
//! - `Rtt` for `MeasureRtt`: a timed `Hello` on an open connection (a cold one is dialled by a
//!   first `Hello`); a round trip our loop stalled in is reported failed
//!   (`overlay::detect::stall`).
//! - `NearestRtt` (the smallest ping RTT seen), `Coordinate` (the application coordinate),
//!   `CoordinateFit` and `Lateness` (the loop's worst lateness of the last 10 s) when they change.
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
use crate::runtime::clock::Clock;
use crate::runtime::status::StatusSink;
use crate::superpeer::wire::{
    decode_reply, decode_request, encode_reply, encode_request, mentioned_ids, BookEntry, SpBody, SpWireError,
    MAX_BOOK_ENTRIES,
};
use libp2p::swarm::ConnectionError;
use libp2p::{kad, request_response, Multiaddr, PeerId, Swarm};
use overlay::core::TimerTable;
use overlay::detect::failure::{self, after_check, after_failure, Next};
use overlay::detect::stall::{lateness_changed, StallMeter};
use overlay::detect::{Attempt, HeadWatch, Resends, Verdict};
use overlay::superpeer::vicinity::table_ready;
use overlay::superpeer::{
    HeadRole, LookupReport, PeerInfo, Point, Query, SpContext, SpEffect, SpInput, SpMessage, SuperPeerConfig,
    SuperPeerNode, ROUND,
};
use overlay::{NodeId, Time, Timer};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::Serialize;
use serde_json::json;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tracing::{debug, info, warn};

/// Leading bits of a closest-peers lookup's target that match the wanted key: finding such a
/// preimage costs about 2^16 hashes, and a match that close orders the peers returned as
/// their distance to the key orders them.
pub const LOOKUP_BITS: u32 = 16;
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
/// Lookups per node whose wait is kept (`SpStatus::lookup_wait_ms`).
const TIMED_LOOKUPS: usize = 32;

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
    /// them (`overlay::detect::stall`).
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
    /// How long the node's first [`TIMED_LOOKUPS`] DHT lookups took, ms: from the state
    /// machine's `Lookup` to its `LookupResult` (waiting in the queue, the Kademlia query, and
    /// the `Hello`s that learn the answer's coordinates), what the simulator's fault model
    /// draws its lookup delays to match.
    pub lookup_wait_ms: Vec<u32>,
    /// Lookups the state machine asked for, by purpose (`estimate`, `claim-closest`,
    /// `claim-providers`, `slot-check`, `seed`; retries count again).
    pub lookups_by_purpose: BTreeMap<String, u64>,
    pub token_moves: u64,
    pub attach_changes: u64,
    pub rejected: u64,
    pub bad_frames: u64,
    /// Messages whose claims the directory contradicted (`overlay::directory::claims`).
    pub claims_refused: u64,
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
    /// (`overlay::detect::failure::holds_timer`; counted once per look).
    pub election_timers_deferred: u64,
    pub heads_reported_down: u64,
    /// Of those, reported because probes found nothing listening at the head's addresses
    /// (`overlay::detect::head_watch`, "Nothing listening is down").
    pub heads_found_gone: u64,
    /// Heads this member left because they refused it and served nothing for the whole
    /// silence (`overlay::detect::head_watch`, "Refusing is not serving").
    pub heads_not_serving: u64,
    /// Peers taken for down because a message to them found nothing listening at their
    /// addresses (`overlay::detect::failure::after_failure`); a member that writes to its
    /// crashed head learns it this way as often as by its probes.
    pub peers_found_gone: u64,
    /// Failed head probes not counted because this node's own loop stalled beyond the
    /// watch's limit while they were out (`overlay::detect::head_watch`, "A stalled loop judges nobody").
    pub probes_stalled: u64,
    /// Milliseconds since the driver started when the role or the head last changed.
    pub last_change_ms: u64,
    /// When the state machine got `Start` (its routing table ready), Unix ms: the swarm
    /// report's `selection_started_s`.
    pub started_unix_ms: Option<u64>,
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

/// A refused election message waiting to be sent again (`overlay::detect::failure`).
struct Resend {
    to: NodeId,
    msg: SpMessage,
    attempt: Attempt,
}

enum Sent {
    Msg {
        to: NodeId,
        msg: SpMessage,
        attempt: Attempt,
        at: Time,
    },
    Hello {
        to: NodeId,
        probe: bool,
    },
    /// A `Hello` sent after a message to `to` failed twice without telling whether it was
    /// delivered (`SendFailure::Ambiguous`): if `to` turns out unreachable, the state machine
    /// gets `SendFailed { to, msg }`; if it answers, nothing (its own timers re-ask). A check
    /// that fails while our own loop stalls beyond the head watch's limit (sent at `at`)
    /// judges nobody either (`overlay::detect::failure::after_check`).
    Check {
        to: NodeId,
        msg: SpMessage,
        at: Time,
    },
    /// A `Hello` timed for `SpEffect::MeasureRtt`, sent at `at`. `warm` is false when the
    /// connection had to be dialled first: that round trip includes the handshakes, so it
    /// is not reported and a second, timed `Hello` follows on the open connection.
    Measure {
        to: NodeId,
        at: Time,
        warm: bool,
    },
}

struct LookupState {
    query: u32,
    /// For a `Query::Sample`: the uniform key actually looked up (the hash of a random
    /// preimage), named in the `LookupReport`.
    sampled: Option<NodeId>,
    providers: bool,
    found: Vec<PeerId>,
    first_found: Option<Instant>,
    /// The provider lookup ended with an error (timeout).
    timed_out: bool,
    /// The key a `Query::Closest` or `Query::Providers` lookup is for (logged with its outcome).
    key: Option<NodeId>,
}

struct Hold {
    query: u32,
    peers: Vec<NodeId>,
    until: Instant,
    /// The lookup's report, its peers filled in when the hold ends.
    report: LookupReport,
}

/// The super-peer driver of one node.
pub struct SuperPeerDriver {
    /// Misbehaviour seen here, for the node's guard (`take_offences`).
    offences: Vec<(PeerId, overlay::reputation::Offence)>,
    sm: SuperPeerNode,
    cfg: Arc<SuperPeerConfig>,
    settings: SuperPeerSettings,
    me: PeerId,
    me_id: NodeId,
    rng: StdRng,
    clock: Clock,
    t0: Instant,
    started: bool,
    next_tick: Instant,
    /// When the start delay ends (`overlay::superpeer::vicinity::table_ready` counts from it).
    start_at: Instant,
    round: u32,
    timers: TimerTable<Timer>,
    lookups: HashMap<kad::QueryId, LookupState>,
    /// When the state machine asked each pending DHT lookup (for `SpStatus::lookup_wait_ms`;
    /// at most [`TIMED_LOOKUPS`] entries, as the timed lookups are the first ones).
    asked: HashMap<u32, Instant>,
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
    resends: Resends<Resend>,
    /// The election (dead head, group size) whose group the gate keeps room for.
    gate_election: Option<(NodeId, usize)>,
    /// The member's failure detector for its head (`overlay::detect::head_watch`).
    watch: HeadWatch,
    /// The last dial error per peer, for the log of a failed probe (bounded).
    dial_errors: HashMap<PeerId, String>,
    rtts: HashMap<PeerId, Duration>,
    /// The smallest ping RTT seen to any peer, and the value last given to the state machine.
    nearest: Option<Duration>,
    nearest_told: Option<Duration>,
    /// The loop lateness last told to the state machine (`SpInput::Lateness`).
    late_told: Duration,
    /// The coordinate fitness last given to the state machine.
    fit_told: Option<bool>,
    last_use: HashMap<PeerId, Instant>,
    queue: VecDeque<SpInput>,
    status: SpStatus,
    sink: StatusSink,
    by_kind: BTreeMap<&'static str, u64>,
    salt: u64,
}

impl SuperPeerDriver {
    pub fn new(me: PeerId, settings: SuperPeerSettings, seed: u64, sink: StatusSink, clock: Clock) -> SuperPeerDriver {
        let me_id = node_id_of(&me);
        let cfg = settings.protocol.clone();
        let now = Instant::now();
        let sm = SuperPeerNode::new(me_id, Point::default(), cfg.clone());
        let status = SpStatus { role: "starting".into(), method: cfg.method.name().into(), ..Default::default() };
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5e5e_5e5e_0004);
        // Nodes started together do not all start their lookups in the same second.
        let spread = settings.start_delay.mul_f64(2.0 * rand::Rng::gen::<f64>(&mut rng));
        SuperPeerDriver {
            offences: Vec::new(),
            sm,
            cfg,
            me,
            me_id,
            rng,
            clock,
            t0: now,
            started: false,
            next_tick: now + settings.start_delay + spread,
            start_at: now + settings.start_delay + spread,
            round: 0,
            timers: TimerTable::new(),
            lookups: HashMap::new(),
            asked: HashMap::new(),
            queued: VecDeque::new(),
            preimages: HashMap::new(),
            holds: Vec::new(),
            sent: HashMap::new(),
            peers: HashMap::new(),
            points: HashMap::new(),
            told: HashMap::new(),
            connected: HashSet::new(),
            resends: Resends::default(),
            gate_election: None,
            watch: HeadWatch::new(settings.protocol.head_watch.watch()),
            dial_errors: HashMap::new(),
            rtts: HashMap::new(),
            nearest: None,
            nearest_told: None,
            late_told: Duration::ZERO,
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
        let t = self.timers.next_deadline().map_or(self.next_tick, |t| self.clock.instant(t));
        let r = self.resends.next_due().map_or(self.next_tick, |t| self.clock.instant(t));
        t.min(r).min(self.next_tick)
    }

    /// Whether the state machine got its `Start`.
    pub fn is_started(&self) -> bool {
        self.started
    }

    pub fn status(&self) -> &SpStatus {
        &self.status
    }

    /// Messages sent by type.
    pub fn messages_by_kind(&self) -> &BTreeMap<&'static str, u64> {
        &self.by_kind
    }

    /// Whether the connection to `peer` carries this node's overlay
    /// (`SuperPeerNode::talks_to`): the peer manager never prunes it, since the node talks to
    /// that peer every few rounds and a pruned connection would be dialled again.
    pub fn keeps(&self, peer: &PeerId) -> bool {
        self.sm.talks_to(&node_id_of(peer))
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
        self.clock.now()
    }

    // ------------------------------------------------------------------ periodic work

    /// Timers, rounds, probes and lookup deadlines. Call whenever `next_deadline` passed (and
    /// harmlessly more often).
    /// `point` is the node's current coordinate (`node/src/coords/driver.rs`).
    /// `late` is the worst lateness of the node's own loop over the last seconds
    /// (`overlay::detect::stall`), told to the state machine when it changed (`SpInput::Lateness`).
    /// `settled`: the member directory has settled (read before the start only).
    #[allow(clippy::too_many_arguments)]
    pub fn poll(
        &mut self,
        sw: &mut Swarm<Behaviour>,
        dir: &Directory,
        now: Instant,
        point: Point,
        fit: bool,
        late: Duration,
        settled: bool,
    ) {
        let _span = tracing::debug_span!("sp", me = %self.me_id.short()).entered();
        if point.is_valid() && point != self.sm.point() {
            self.run(sw, dir, SpInput::Coordinate(point));
        }
        // Whether the coordinate is fit to place tokens by, when it changed (the state machine
        // keeps a coordinate fit once fit).
        if self.fit_told != Some(fit) {
            self.fit_told = Some(fit);
            self.run(sw, dir, SpInput::CoordinateFit { fit });
            let fit = self.sm.coordinate_fit();
            if self.status.coordinate_fit != fit {
                info!(me = %self.me_id.short(), fit, "coordinate fitness changed");
                self.status.coordinate_fit = fit;
            }
        }
        // The nearest RTT (placement by access delay, `overlay::superpeer::token`), when it
        // dropped (the state machine takes real drops only).
        if let Some(n) = self.nearest.filter(|n| self.nearest_told != Some(*n)) {
            self.nearest_told = Some(n);
            self.run(sw, dir, SpInput::NearestRtt { rtt: n.as_secs_f64() });
        }
        // The loop's lateness (`SpInput::Lateness`: it stretches the cluster election's
        // timeouts), when it moved enough.
        if lateness_changed(self.late_told, late) {
            self.late_told = late;
            self.run(sw, dir, SpInput::Lateness { secs: late.as_secs_f64() });
        }
        let now_t = self.clock.at(now);
        let due = self.timers.take_due(now_t);
        if !due.is_empty() {
            let (undelivered, resend_waiting) = self.election_in_flight(now_t);
            for t in due {
                if let Some(wait) = failure::holds_timer(t, undelivered, resend_waiting) {
                    self.status.election_timers_deferred += 1;
                    self.timers.arm(t, now_t + wait);
                    continue;
                }
                debug!(me = %self.me_id.short(), timer = ?t, "election timer fired");
                self.run(sw, dir, SpInput::Timer(t));
            }
        }
        for r in self.resends.take_due(now_t) {
            if self.election_runs(&r.msg) {
                self.status.election_resends += 1;
                self.send_msg(sw, dir, r.to, r.msg, r.attempt);
            } else {
                self.status.sends_dropped += 1;
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
        self.next_tick = now + ROUND;
        if !self.started {
            let rt: usize = sw.behaviour_mut().kad.kbuckets().map(|b| b.num_entries()).sum();
            if !table_ready(rt, settled, now.saturating_duration_since(self.start_at)) {
                return;
            }
            self.started = true;
            self.status.started_unix_ms =
                SystemTime::now().duration_since(UNIX_EPOCH).ok().map(|d| d.as_millis() as u64);
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
        if let Some(h) = head.filter(|_| self.watch.due(head, self.clock.now())) {
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
            self.watch.broke(Some(id), id, self.clock.now());
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
                let infos: Vec<(PeerId, Vec<Multiaddr>)> = peers.iter().map(|p| (p.peer_id, p.addrs.clone())).collect();
                let (query, sampled, key) = (l.query, l.sampled, l.key);
                self.lookups.remove(id);
                if let Some(key) = key {
                    let mine = overlay::superpeer::estimate::xor_fraction(&key, &self.me_id);
                    let nearest = infos
                        .iter()
                        .map(|(p, _)| overlay::superpeer::estimate::xor_fraction(&key, &node_id_of(p)))
                        .fold(f64::INFINITY, f64::min);
                    debug!(%key, peers = infos.len(), failures = stats.num_failures(), timed_out, me_nearest = mine < nearest, mine, nearest, "closest-peers lookup");
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
                if let Some(key) = sampled {
                    debug!(
                        me = %self.me_id,
                        %key,
                        peers = ?out.iter().map(|p| p.id.to_string()).collect::<Vec<_>>(),
                        requests = stats.num_requests(),
                        successes = stats.num_successes(),
                        failures = stats.num_failures(),
                        timed_out,
                        "sample lookup"
                    );
                }
                // The state machine judges the answer (`overlay::superpeer::lookup`), knowing
                // how many peers the routing table holds.
                let known: usize = sw.behaviour_mut().kad.kbuckets().map(|b| b.num_entries()).sum();
                let report = LookupReport {
                    key: sampled,
                    found: out.len() as u32,
                    peers: out,
                    timed_out,
                    answered: stats.num_successes(),
                    failed: stats.num_failures(),
                    known: known.min(u32::MAX as usize) as u32,
                };
                self.run(sw, dir, SpInput::LookupResult { query, report });
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
                    l.timed_out = true;
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
            debug!(%key, found = l.found.len(), timed_out = l.timed_out, "provider lookup");
        }
        let mut ids = Vec::with_capacity(l.found.len());
        for p in &l.found {
            let nid = node_id_of(p);
            self.remember_peer(nid, *p);
            if nid != self.me_id {
                ids.push(nid);
            }
        }
        let report = LookupReport {
            found: l.found.len() as u32,
            timed_out: l.timed_out,
            answered: stats.num_successes(),
            failed: stats.num_failures(),
            ..LookupReport::default()
        };
        // Learn unknown providers' coordinates first.
        let unknown: Vec<NodeId> = ids.iter().filter(|i| !self.points.contains_key(*i)).copied().collect();
        for u in &unknown {
            self.send_hello(sw, dir, *u, false);
        }
        let h = Hold { query: l.query, peers: ids, until: Instant::now() + HELLO_WAIT, report };
        if unknown.is_empty() {
            self.deliver_hold(sw, dir, h);
        } else {
            self.holds.push(h);
        }
    }

    fn deliver_hold(&mut self, sw: &mut Swarm<Behaviour>, dir: &Directory, h: Hold) {
        let peers: Vec<PeerInfo> =
            h.peers.iter().filter_map(|id| self.points.get(id).map(|p| PeerInfo { id: *id, point: *p })).collect();
        let report = LookupReport { peers, ..h.report };
        self.run(sw, dir, SpInput::LookupResult { query: h.query, report });
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

    /// Misbehaviour seen since the last call, for the node's guard.
    pub fn take_offences(&mut self) -> Vec<(PeerId, overlay::reputation::Offence)> {
        std::mem::take(&mut self.offences)
    }

    /// Events of the `/peerage/superpeer/2.0.0` request-response behaviour. Every message's
    /// claims are checked against the sender and the directory first
    /// (`overlay::directory::claims`): a refused one is answered "not accepted", and a lie is
    /// reported to the guard.
    pub fn on_rr(
        &mut self,
        sw: &mut Swarm<Behaviour>,
        dir: &Directory,
        stall: &StallMeter,
        ev: request_response::Event<crate::net::codec::Frame, Vec<u8>>,
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
                        self.watch.heard(from, self.clock.now());
                        let claim = match &req.body {
                            SpBody::Message { msg, .. } => overlay::directory::check_superpeer(dir.inner(), from, msg),
                            SpBody::Hello => Ok(()),
                        };
                        if let Err(refusal) = claim {
                            debug!(%peer, reason = refusal.reason, "super-peer claim refused");
                            self.status.claims_refused += 1;
                            if refusal.severity == overlay::directory::Severity::Lie {
                                self.offences.push((peer, overlay::reputation::Offence::FalseClaim));
                            }
                            false
                        } else if let SpBody::Message { msg, book } = req.body {
                            if let SpMessage::Election { dead, msg: inner } = &msg {
                                debug!(me = %self.me_id.short(), from = %from.short(), dead = %dead.short(), kind = inner.kind(), "election message received");
                            } else {
                                tracing::trace!(from = %from.short(), kind = msg.kind(), "super-peer message");
                            }
                            self.learn_book(sw, &book);
                            self.status.messages_received += 1;
                            self.run(sw, dir, SpInput::Message { from, msg });
                            true
                        } else {
                            true
                        }
                    }
                    Err(SpWireError::Empty) => {
                        // Not a peer's bad input: a sender whose request timed out closes the
                        // stream, and the request arrives empty. Counted, logged quietly.
                        debug!(%peer, "empty super-peer request (the sender gave up on it)");
                        self.status.bad_frames += 1;
                        false
                    }
                    Err(e) => {
                        debug!(%peer, len = request.len(), "malformed super-peer frame: {e}");
                        self.status.bad_frames += 1;
                        self.offences.push((peer, overlay::reputation::Offence::MalformedFrame));
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
                        self.watch.heard(from, self.clock.now());
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
                    self.watch.answered(to, self.clock.now());
                }
                if let Some(Sent::Measure { to, at, warm }) = sent {
                    if warm {
                        let rtt = self.clock.now() - at;
                        // A round trip the node's loop stalled in is not this path's delay
                        // (`overlay::detect::stall`): reported as failed, so the state machine
                        // asks again later instead of keeping an inflated minimum for good.
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
                    Sent::Msg { to, msg, attempt, .. } => {
                        debug!(%peer, kind = msg.kind(), ?class, "super-peer send failed: {error}");
                        let what = failure::Sent {
                            to_head: Some(to) == self.sm.attached_to(),
                            election_runs: self.election_runs(&msg),
                            handover: matches!(msg, SpMessage::Handover { .. }),
                        };
                        match after_failure(class, attempt, what) {
                            Next::ProbeHead => {
                                self.watch.broke(Some(to), to, self.clock.now());
                                self.probe_head(sw, dir);
                            }
                            Next::Report => {
                                if class == SendFailure::NoListener {
                                    self.status.peers_found_gone += 1;
                                }
                                info!(me = %self.me_id.short(), to = %to.short(), kind = msg.kind(), "super-peer message undeliverable, the peer is taken for down: {error}");
                                self.run(sw, dir, SpInput::SendFailed { to, msg })
                            }
                            Next::Refused => {
                                self.status.sends_dropped += 1;
                                self.run(sw, dir, SpInput::Refused { to, msg })
                            }
                            Next::ResendAfter(wait) => {
                                let attempt = Attempt { refusals: attempt.refusals + 1, ..attempt };
                                let at = self.clock.now() + wait;
                                self.resends.push(at, Resend { to, msg, attempt });
                            }
                            Next::SendAgain => self.send_msg(sw, dir, to, msg, Attempt { retried: true, ..attempt }),
                            Next::Check => self.send_check(sw, dir, to, msg),
                            Next::Drop => self.status.sends_dropped += 1,
                        }
                    }
                    Sent::Check { to, msg, at } => {
                        let stalled = stall.worst_during(at);
                        if after_check(class, self.watch.stalled(stalled)) {
                            if class == SendFailure::NoListener {
                                self.status.peers_found_gone += 1;
                            }
                            info!(me = %self.me_id.short(), to = %to.short(), kind = msg.kind(), "super-peer message undeliverable after a check, the peer is taken for down: {error}");
                            self.run(sw, dir, SpInput::SendFailed { to, msg });
                        } else {
                            self.status.sends_dropped += 1;
                            if class.unreachable() {
                                info!(me = %self.me_id.short(), to = %to.short(), kind = msg.kind(), stall_ms = stalled.as_millis() as u64, "super-peer message undeliverable after a check while our own loop stalled: dropped, the peer is not taken for down ({error})");
                            }
                        }
                    }
                    Sent::Hello { to, probe } => {
                        // Scored, spaced, and down only after a silence, or after probes in a row
                        // that found nothing listening (`overlay::detect::head_watch`); the next
                        // probe goes out from `probe_head` once a round has passed.
                        if probe && Some(to) == self.sm.attached_to() {
                            let dial = self.dial_errors.remove(&peer).unwrap_or_default();
                            let now = self.clock.now();
                            let stalled = self.watch.probe_started().map_or(Duration::ZERO, |s| stall.worst_during(s));
                            let stall_ms = stalled.as_millis() as u64;
                            let verdict = self.watch.failed(to, class, now, stalled);
                            match verdict {
                                Verdict::Uncounted => {}
                                Verdict::Alive => {
                                    debug!(me = %self.me_id.short(), head = %to.short(), "probe refused by the super peer: it is alive");
                                }
                                Verdict::NotServing => {
                                    info!(me = %self.me_id.short(), head = %to.short(), silence_ms = self.settings.protocol.head_watch.suspect_after_ms, "super peer refused us and served nothing for the whole silence: leaving it");
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
            if let SpInput::LookupResult { query, .. } = &i {
                if let Some(at) = self.asked.remove(query) {
                    let ms = at.elapsed().as_millis().min(u128::from(u32::MAX)) as u32;
                    self.status.lookup_wait_ms.push(ms);
                }
            }
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

    /// The age of the youngest message of the re-election this node takes part in that is
    /// neither delivered nor failed yet, and whether one waits to be sent again
    /// (`overlay::detect::failure::holds_timer`).
    fn election_in_flight(&self, now: Time) -> (Option<Duration>, bool) {
        let resend_waiting = self.resends.iter().any(|r| self.election_runs(&r.msg));
        let youngest = self
            .sent
            .values()
            .filter_map(|s| match s {
                Sent::Msg { msg, at, .. } if self.election_runs(msg) => Some(now.since(*at)),
                _ => None,
            })
            .min();
        (youngest, resend_waiting)
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
            SpEffect::Send { to, msg } => self.send_msg(sw, dir, to, msg, Attempt::FIRST),
            SpEffect::Lookup { query, what: Query::Vicinity } => {
                let report = self.routing_table(sw);
                self.queue.push_back(SpInput::LookupResult { query, report });
            }
            SpEffect::Lookup { query, what } => {
                if self.status.lookup_wait_ms.len() + self.asked.len() < TIMED_LOOKUPS {
                    self.asked.insert(query, Instant::now());
                }
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
            SpEffect::SetTimer { timer, after } => self.timers.arm(timer, self.clock.now() + after),
            SpEffect::CancelTimer { timer } => self.timers.cancel(timer),
            SpEffect::LookupUnusable { query, reason } => {
                debug!(query, reason, "lookup unusable; the state machine asks again");
                self.status.lookups_failed += 1;
                *self.status.lookups_failed_by_reason.entry(reason.to_string()).or_default() += 1;
            }
            SpEffect::BecomeSuperPeer => info!(me = %self.me_id.short(), "became a super peer"),
            SpEffect::StopSuperPeer => info!(me = %self.me_id.short(), "no longer a super peer"),
            SpEffect::AttachedTo(h) => {
                debug!(head = %h.short(), "attached to a super peer");
                self.status.attach_changes += 1;
                let now = self.clock.now();
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
            SpEffect::Rejected { from, reason, offence } => {
                self.status.rejected += 1;
                let (kind, dead) = what.unwrap_or(("timer or local input", None));
                let dead = dead.map(|d| d.short());
                warn!(me = %self.me_id.short(), from = %from.short(), reason, kind, ?dead, ?offence, "super-peer input rejected");
                // The state machine names the offence of an authenticated sender; the guard
                // scores it (`take_offences`).
                if let Some(offence) = offence.filter(|_| from != self.me_id) {
                    match self.peers.get(&from) {
                        Some(&peer) => self.offences.push((peer, offence)),
                        None => debug!(from = %from.short(), ?offence, "offence of a peer no longer in the book"),
                    }
                }
            }
        }
    }

    /// Starts queued lookups while fewer than [`MAX_LOOKUPS_IN_FLIGHT`] run: kad's iterative
    /// lookups dial the peers they discover, and a burst of them (a 200-node swarm's 1,600 at
    /// once) leaves the emulation late, the lookups time out, and their retries keep the swarm
    /// overloaded.
    fn start_lookups(&mut self, sw: &mut Swarm<Behaviour>) {
        while self.lookups.len() < MAX_LOOKUPS_IN_FLIGHT {
            let Some((query, what)) = self.queued.pop_front() else { return };
            let (qid, providers, sampled, key) = match what {
                // Read from the table where the effect is handled; never queued.
                Query::Vicinity => continue,
                Query::Providers { key } => {
                    (sw.behaviour_mut().kad.get_providers(kad::RecordKey::new(&key.0)), true, None, Some(key))
                }
                Query::Closest { key } => {
                    let pre = self.preimage_of(&key);
                    (sw.behaviour_mut().kad.get_closest_peers(pre), false, None, Some(key))
                }
                Query::Sample { .. } => {
                    // Any uniform key serves: a random preimage's hash, which kad aims at
                    // exactly, instead of a 2^LOOKUP_BITS search for the drawn key.
                    let pre: [u8; 8] = rand::Rng::gen(&mut self.rng);
                    let sampled = Some(NodeId::hash_of(&pre));
                    (sw.behaviour_mut().kad.get_closest_peers(pre.to_vec()), false, sampled, None)
                }
            };
            // The query dials once the swarm is polled: the gate opens for its dials first.
            self.status.lookups += 1;
            sw.behaviour_mut().gate.open_outbound_until(Instant::now() + GATE_OPEN_FOR);
            self.lookups.insert(
                qid,
                LookupState { query, sampled, providers, found: Vec::new(), first_found: None, timed_out: false, key },
            );
        }
    }

    /// Every peer our Kademlia routing table holds, for `Query::Vicinity`: read locally, no
    /// lookup (what the list proves is `overlay::superpeer::vicinity`'s).
    fn routing_table(&self, sw: &mut Swarm<Behaviour>) -> LookupReport {
        let mut peers = Vec::new();
        for bucket in sw.behaviour_mut().kad.kbuckets() {
            for e in bucket.iter() {
                let id = node_id_of(e.node.key.preimage());
                peers.push(PeerInfo { id, point: self.points.get(&id).copied().unwrap_or_default() });
            }
        }
        let n = peers.len().min(u32::MAX as usize) as u32;
        LookupReport { found: n, known: n, ..LookupReport::complete(peers) }
    }

    /// A preimage whose hash shares the first [`LOOKUP_BITS`] bits with `key` (remembered).
    fn preimage_of(&mut self, key: &NodeId) -> Vec<u8> {
        if let Some(p) = self.preimages.get(key) {
            return p.clone();
        }
        self.salt = self.salt.wrapping_add(0x1_0000_0000);
        let pre = lookup_preimage(key, LOOKUP_BITS, self.salt);
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

    /// Sends `msg` to `to` as `attempt` (the first, or a resend after a failure).
    fn send_msg(&mut self, sw: &mut Swarm<Behaviour>, dir: &Directory, to: NodeId, msg: SpMessage, attempt: Attempt) {
        if attempt.is_first() {
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
            let (retried, refusals) = (attempt.retried, attempt.refusals);
            debug!(me = %self.me_id.short(), to = %to.short(), dead = %dead.short(), kind = inner.kind(), warm, retried, refusals, "election message sent");
        }
        let addrs = Self::addrs(&sw.behaviour().gate, dir, &peer);
        let b = sw.behaviour_mut();
        b.gate.want(peer);
        let rid = b.superpeer.send_request_with_addresses(&peer, bytes.into(), addrs);
        self.last_use.insert(peer, Instant::now());
        let at = self.clock.now();
        self.sent.insert(rid, Sent::Msg { to, msg, attempt, at });
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
        let rid = b.superpeer.send_request_with_addresses(&peer, bytes.into(), addrs);
        self.last_use.insert(peer, Instant::now());
        let at = self.clock.now();
        self.sent.insert(rid, Sent::Measure { to, at, warm });
    }

    /// See [`Sent::Check`].
    fn send_check(&mut self, sw: &mut Swarm<Behaviour>, dir: &Directory, to: NodeId, msg: SpMessage) {
        if self.resolve(dir, &to).is_none() {
            self.run(sw, dir, SpInput::SendFailed { to, msg });
            return;
        }
        let at = self.clock.now();
        self.send_bare_hello(sw, dir, to, Sent::Check { to, msg, at });
    }

    fn send_hello(&mut self, sw: &mut Swarm<Behaviour>, dir: &Directory, to: NodeId, probe: bool) {
        if self.send_bare_hello(sw, dir, to, Sent::Hello { to, probe }) && probe {
            self.watch.probe_sent(self.clock.now());
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
        let rid = b.superpeer.send_request_with_addresses(&peer, bytes.into(), addrs);
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
    fn an_election_message_is_held_for_less_than_a_request_lives() {
        // A timer held for a message on its way must not wait for longer than the request can
        // take to fail: the failure then ends the hold.
        assert!(
            overlay::detect::failure::MAX_DEFER
                < Duration::from_millis(crate::config::Limits::default().request_timeout_ms)
        );
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
