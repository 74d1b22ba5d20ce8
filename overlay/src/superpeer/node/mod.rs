//! One node's super-peer selection state machine: size estimate, role claim, token moves,
//! cluster membership and the cluster's re-election (seed 000, "Elections in large-scale
//! systems"). Sans-IO: the driver feeds [`SpInput`]s with an [`SpContext`] (time, seeded RNG)
//! and carries out the [`SpEffect`]s.
//!
//! The protocol, step by step and with every departure from the seed and why, is specified in
//! `docs/DESIGN.md`, section "Super peers"; the comments below name its steps:
//! 1. size estimate (DHT lookups of random keys, pooled samples, judged lookups);
//! 2. reserved slots and claims (one head per slot);
//! 3. discovery and attachment (cache gossip, seeds, measured RTT);
//! 4. token moves (force law, promotion, split offers, medoid step);
//! 5. views and re-election (heir, checks of a suspected head, late elections end);
//! 6. member-less heads (backup, pending role, relay).
//!
//! Files: this one holds the state ([`SuperPeerNode`] and the per-role parts: [`Head`], the
//! member's view and attachment, the [`ClusterElection`], the pending role and relays), the
//! inputs' dispatch and the round. The steps live in [`discovery`] (estimate, seeds, slot
//! claims and checks), [`member`] (a normal node attaching), [`cache`] (known heads and their
//! RTTs), [`head`] (a head's round, token moves, views, handovers), [`placement`] (the measured
//! medoid step, split offers), [`reelection`] (step 5) and [`messages`] (every message
//! received, by kind).
//!
//! Assumptions: messages between live nodes are reliable (crash-stop); a failure detector that
//! reports a live node down can duplicate a role, which the safety nets of step 5 resolve. The
//! driver judges nothing itself: what a failed send or a silent head means is decided in
//! [`crate::detect`], what a lookup's answer is worth in [`super::lookup`].

use super::config::{prefix_bits, Method, SuperPeerConfig};
use super::estimate::{SizeEstimator, SizeSample, MAX_SAMPLES_PER_MESSAGE, PARALLEL_LOOKUPS, PUSH_PEERS};
use super::heir;
use super::medoid;
use super::message::{
    HeadEntry, HeadRole, MovePrice, MoveRecord, PeerInfo, Query, SpEffect, SpInput, SpMessage, TokenEntry, TokenId,
};
use super::point::Point;
use super::promotion::aging;
use super::token::{
    awaiting_reports, choose_target, cooling, drift, net_force, removal_plan, split_gain, split_reserve, split_taker,
    AccessEstimate, CostParts, MoveBar, Removal, PROMOTED_FACTOR, SPLIT_EVERY, TOKEN_TTL, TOKEN_VIEW,
};
use crate::driver::{Context, Effect, Election, Input, Timer};
use crate::election::Message;
use crate::election::{AnyElection, ElectionConfig};
use crate::id::{NodeId, Rank};
use crate::membership::Membership;
use rand::Rng;
use smallvec::SmallVec;
use std::sync::Arc;

mod cache;
mod discovery;
mod head;
mod member;
mod messages;
mod placement;
mod reelection;

/// What a node may use while handling one input (the contract of [`crate::core`]).
pub type SpContext<'a> = crate::core::Context<'a, SpEffect>;

impl crate::core::Context<'_, SpEffect> {
    pub(crate) fn send(&mut self, to: NodeId, msg: SpMessage) {
        self.push(SpEffect::Send { to, msg });
    }
}

/// The same token (any epoch) or the same slot.
fn same_role(a: &HeadRole, b: &HeadRole) -> bool {
    match (a, b) {
        (HeadRole::Slot { key: x }, HeadRole::Slot { key: y }) => x == y,
        (HeadRole::Token { token: x, .. }, HeadRole::Token { token: y, .. }) => x == y,
        _ => false,
    }
}

/// The role as a re-election recreates it: a token at the next epoch, a slot as it is.
fn recreated(r: HeadRole) -> HeadRole {
    match r {
        HeadRole::Token { token, epoch } => HeadRole::Token { token, epoch: epoch.wrapping_add(1) },
        slot @ HeadRole::Slot { .. } => slot,
    }
}

/// A token role's epoch (a slot has none): two holders of one role compare (epoch, id).
fn role_epoch(r: &HeadRole) -> Option<u32> {
    match r {
        HeadRole::Token { epoch, .. } => Some(*epoch),
        HeadRole::Slot { .. } => None,
    }
}

/// The well-known DHT key that token holders provide.
pub fn token_directory_key() -> NodeId {
    NodeId::hash_of(b"peerage/superpeer/token-directory/v1")
}

/// The slot key a token was minted for: its id is that key's top 64 bits, and a slot key's
/// other bits are 0 ([`slot_key`], `k` <= 63).
pub fn token_slot_key(token: TokenId) -> NodeId {
    let mut out = [0u8; 32];
    out[..8].copy_from_slice(&token.0.to_be_bytes());
    NodeId(out)
}

/// The DHT key of reserved slot `slot` with `k` prefix bits.
pub fn slot_key(k: u32, slot: u64) -> NodeId {
    let mut out = [0u8; 32];
    if k > 0 {
        let v = if k >= 64 { slot } else { slot << (64 - k) };
        out[..8].copy_from_slice(&v.to_be_bytes());
    }
    NodeId(out)
}

/// What a lookup in flight is for (`SlotCheck`: a slot head's duplicate check, module doc,
/// step 2, "One head per slot").
#[derive(Clone, Copy, Debug)]
enum Pending {
    Estimate {
        key: NodeId,
    },
    ClaimClosest {
        key: NodeId,
    },
    ClaimProviders {
        key: NodeId,
    },
    SlotCheck {
        key: NodeId,
    },
    Seed,
    /// Our routing table, read for a size sample (not a lookup: no network traffic).
    Vicinity,
    /// Our routing table, read for the claim of slot `key`: are we its nearest node?
    ClaimVicinity {
        key: NodeId,
    },
}

/// Measured RTTs of heads that left the cache a node keeps (DESIGN.md "Super peers", step 3,
/// "Measurements outlive the cache entry"): as many as the default cache holds.
pub(crate) const REMEMBERED_RTTS: usize = 6;

/// The most providers one provider lookup returns (Kademlia's K, 20 in libp2p and in the
/// simulator's DHT): up to this many token holders, one lookup of the token directory finds
/// them all, and a seed makes just one (DESIGN.md "Super peers", step 3, "One directory lookup").
pub const PROVIDERS_PER_ANSWER: u64 = 20;

/// The purposes of a node's lookups, in the order of [`SuperPeerNode::lookups_by_purpose`].
pub const LOOKUP_PURPOSES: [&str; 5] = ["estimate", "claim-closest", "claim-providers", "slot-check", "seed"];

impl Pending {
    /// Index into [`LOOKUP_PURPOSES`]; `None` for a read of our own routing table.
    fn purpose(&self) -> Option<usize> {
        match self {
            Pending::Estimate { .. } => Some(0),
            Pending::ClaimClosest { .. } => Some(1),
            Pending::ClaimProviders { .. } => Some(2),
            Pending::SlotCheck { .. } => Some(3),
            Pending::Seed => Some(4),
            Pending::Vicinity | Pending::ClaimVicinity { .. } => None,
        }
    }
}

/// One entry of a node's cache of heads, for diagnostics ([`SuperPeerNode::cached_heads`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CachedHead {
    pub id: NodeId,
    /// Smallest measured RTT, seconds; `None` if not measured.
    pub rtt: Option<f64>,
    /// RTT predicted from this node's and the head's coordinates, seconds.
    pub predicted: f64,
    /// The head refused this node as full and is not asked again yet.
    pub backed_off: bool,
    /// A measurement was asked for and failed, and none succeeded yet.
    pub failed: bool,
    /// How often it was measured again as doubtful (DESIGN.md "Super peers", step 3, "A doubtful
    /// measurement is taken again").
    pub remeasured: u8,
}

/// Head-cache entries kept inside the node's state: the default `cache_size`.
const CACHE_INLINE: usize = 6;

#[derive(Clone, Copy, Debug)]
struct CacheEntry {
    info: PeerInfo,
    age: u16,
    /// Round (low 16 bits, never 0) a measurement of this head was last asked for; 0 = never.
    probed: u16,
    backoff_until: u32,
    /// Smallest measured RTT to this head, seconds; 0 = not measured (see the module doc,
    /// step 3, "measured RTT").
    rtt: f32,
    /// A measurement was asked for and failed, and none succeeded yet.
    failed: bool,
    /// How often this head was measured again because its measurement contradicts its
    /// prediction (DESIGN.md "Super peers", step 3, "A doubtful measurement is taken again"): the next
    /// one waits `PROBE_RETRY << min(remeasured, REMEASURE_MAX_SHIFT)` rounds.
    remeasured: u8,
}

impl CacheEntry {
    fn new(info: PeerInfo, age: u16) -> CacheEntry {
        CacheEntry { info, age, probed: 0, backoff_until: 0, rtt: 0.0, failed: false, remeasured: 0 }
    }

    /// The head refused this node as full within the last [`REFUSED_MEMORY`] rounds
    /// (`backoff_until` is 0 for a head that never refused it).
    fn refused_lately(&self, round: u32) -> bool {
        refused_lately(self.backoff_until, round)
    }
}

/// A split jump's token goes to `to` (`token` module doc, "Split offers"): the `Handover` of
/// the next epoch with the old holder `me` as its only member, kept in transit until
/// acknowledged. The old holder is so a member of the new holder's cluster from the
/// acknowledgement on, and never without a head while it looks for a nearer one.
fn send_jump(ctx: &mut SpContext<'_>, h: &mut Head, me: PeerInfo, to: NodeId, round: u32, token: TokenId, epoch: u32) {
    send_handover(ctx, h, to, round, token, epoch, false, vec![me]);
}

/// A move's token goes to `to` with the cluster (step 4; the predicted move and the measured
/// medoid step): the old holder `me` goes along as a member (first or last; the receiver
/// drops it if that would put the cluster over the cap), so that the receiver's first view,
/// sent at once, already names it. From the acknowledgement on it is the receiver's member,
/// like the members told `Moved`, and never without a head while every head it knows is full;
/// dropped, it looks for another head.
fn send_move(ctx: &mut SpContext<'_>, h: &mut Head, me: PeerInfo, to: NodeId, round: u32, token: TokenId, epoch: u32) {
    let mut members = h.members.clone();
    // First what our views list first, the heir or else us: the views our members make up
    // for our successor, ours after the handover and the new holder's then agree on it
    // (`heir` module doc).
    match h.heir.and_then(|x| members.iter().position(|m| m.id == x)) {
        Some(i) => {
            members[..=i].rotate_right(1);
            members.push(me);
        }
        None => members.insert(0, me),
    }
    // Only a recreated token's first move, within the hold time, hands the promotion on
    // (DESIGN.md "Super peers", step 5); any other move restarts the hold time.
    let promoted = h.super_peer && h.recreated;
    send_handover(ctx, h, to, round, token, epoch, promoted, members);
}

/// The `Handover` of the next epoch, kept in transit until acknowledged.
#[allow(clippy::too_many_arguments)]
fn send_handover(
    ctx: &mut SpContext<'_>,
    h: &mut Head,
    to: NodeId,
    round: u32,
    token: TokenId,
    epoch: u32,
    promoted: bool,
    members: Vec<PeerInfo>,
) {
    let msg = SpMessage::Handover { token, epoch: epoch.wrapping_add(1), promoted, members, view: h.view.clone() };
    h.transit = Some((to, round, msg.clone()));
    ctx.send(to, msg);
}

/// The measurement of a head whose entry left the cache (DESIGN.md "Super peers", step 3, "Measurements
/// outlive the cache entry"): the head's id's top 64 bits, its smallest measured RTT
/// (seconds) and its repeats so far ("A doubtful measurement is taken again").
#[derive(Clone, Copy, Debug)]
struct Remembered {
    key: u64,
    /// 0 = not measured (a head remembered for its refusal only).
    rtt: f32,
    remeasured: u8,
    /// The entry's `backoff_until`: a head that refused us lately and comes back through
    /// gossip is still known to be full.
    backoff_until: u32,
}

/// Rounds between a head's announcements to its neighbours: often enough that a newcomer
/// learns of a head within a few rounds, rarely enough to cost little.
const ANNOUNCE_EVERY: u32 = 2;

/// Rounds between a head's cluster views when its cluster did not change: the view is the
/// members' liveness signal and their heir's name, so members that heard none for three
/// (`3 x VIEW_EVERY`) ask their head again.
pub const VIEW_EVERY: u32 = 5;

/// Rounds after which a known head nobody vouched for again is forgotten, and a head reported
/// down is not learned again from gossip: heads are gossiped every round, so ten silent rounds
/// mean it is gone.
pub const CACHE_TTL: u32 = 10;

/// Rounds a node stays away from a head that refused it as full: members leave a cluster
/// rarely, so asking again sooner would only be refused again.
const REFUSED_BACKOFF: u32 = 10;

/// Rounds a refusal keeps its head counted as full for an unattached node, back-off or not:
/// twice the back-off. An unattached node asks its cached heads again one by one as their
/// back-offs end, so with each refusal renewed a round or two apart, its heads were never all
/// backed off at once, it never looked further, and it cycled through the same full heads for
/// good (one node in 10^5 left unattached, *ours*).
const REFUSED_MEMORY: u32 = 2 * REFUSED_BACKOFF;

/// Whether a head whose back-off ends at `backoff_until` (0: it never refused) refused within
/// the last [`REFUSED_MEMORY`] rounds before `round`.
fn refused_lately(backoff_until: u32, round: u32) -> bool {
    backoff_until != 0 && backoff_until.saturating_add(REFUSED_MEMORY - REFUSED_BACKOFF) > round
}

/// Provider lookups a normal node makes to find heads, and again whenever its cache runs
/// empty: random reserved slots of the prefix method (one token-directory lookup finds up to
/// [`PROVIDERS_PER_ANSWER`] holders). Four find a head with room nearly always.
pub const SEED_LOOKUPS: u32 = 4;

/// Neighbours a node's first seed asks for the heads they know (`discovery`, `seed`).
pub const PULL_PEERS: usize = 2;

/// RTT measurements a node starts per round: one keeps the pings a node sends in a swarm to
/// a trickle while a new head is measured within a few rounds.
const PROBES_PER_ROUND: u32 = 1;

/// A cached head is measured only if its predicted RTT is below this factor times the RTT to
/// the node's current head ([`probe_limit`]): the coordinates' median error is about 10 %, so
/// a head predicted 50 % farther is farther.
pub const PROBE_MARGIN: f64 = 1.5;

/// The predicted RTT (seconds) below which a member measures a cached head: [`PROBE_MARGIN`]
/// times the larger of its head's `measured` (none, or 0 while unmeasured) and `predicted`
/// RTT. A prediction is weighed against a prediction: within a region the coordinates
/// predict about twice the true RTT (the heights), so against the head's measured RTT alone
/// the nearest head was never measured (N = 10^4, seed 2: 1,161 of 9,899 members, 0.42 ms of
/// the mean RTT; DESIGN.md "Super peers", step 3).
pub fn probe_limit(measured: Option<f64>, predicted: f64) -> f64 {
    PROBE_MARGIN * measured.filter(|m| *m > 0.0).map_or(predicted, |m| m.max(predicted))
}

/// Rounds after which a measurement that got no usable answer is asked for again.
const PROBE_RETRY: u16 = 10;

/// The longest wait between two measurements of a head whose measurement contradicts its
/// prediction, as a shift of [`PROBE_RETRY`]: 10, 20, then every 40 rounds (module doc,
/// step 3, "A doubtful measurement is taken again").
const REMEASURE_MAX_SHIFT: u8 = 2;

/// A cluster election's group grows with members that took part although our view lacked
/// them up to this many times the cap ([`SuperPeerNode::admit_to_election`]).
const MAX_GROUP_FACTOR: usize = 2;

/// A cluster election's answer timeout is at least this many times the largest RTT a member
/// knows around it ([`SuperPeerNode::election_config`]): a first message to a member costs a
/// dial and two round trips, and the answer another.
pub const ELECTION_RTT_FACTOR: f64 = 4.0;

/// The largest factor by which a cluster election's timeouts grow with the RTT
/// ([`SuperPeerNode::election_config`]): 500 ms answers become at most 10 s.
const MAX_TIMEOUT_SCALE: f64 = 20.0;

/// Rounds a new head keeps the view of the head it left and the backup view it handed back,
/// in case its `Detach` or `Refuse` fails (DESIGN.md "Super peers", step 6, "relay").
const KEPT_VIEW_ROUNDS: u32 = 10;

/// Rounds a split jump waits for its members to switch away before it is given up (module
/// doc of `token`, "Split offers").
const DRAIN_ROUNDS: u32 = 3;

/// Neighbours a member-less head remembers as having refused to be its backup.
const MAX_REFUSED_BACKUPS: usize = 8;

/// Nodes a holder remembers as having refused its token's move (`Head::refused_targets`).
const MAX_REFUSED_TARGETS: usize = 8;
/// A slot head's first duplicate check, rounds after it took the slot (its provider record
/// needs a moment to reach the key's DHT neighbours), and the rounds between later ones
/// (DESIGN.md "Super peers", step 2, "One head per slot").
const SLOT_CHECK_FIRST: u32 = 3;
const SLOT_CHECK_EVERY: u32 = 20;
/// Other providers of its slot a head tells at most per check.
const MAX_SLOT_CHECK_SENDS: usize = 4;

#[derive(Clone, Debug)]
struct Claim {
    key: NodeId,
    closest: Option<bool>,
    provided: Option<bool>,
}

/// A split jump's drain: its members are sent to the heads the token's removal places them
/// at, and the token goes once none is left. It lasts until the jump is acknowledged or
/// refused: the old holder's own place is planned with what it found full.
#[derive(Clone, Debug)]
struct Drain {
    /// The offered spot.
    at: PeerInfo,
    /// The round the drain began.
    started: u32,
    /// The members told to go at the last round, each with the head it was sent to.
    sent: Vec<(NodeId, NodeId)>,
    /// Heads that had not taken a member sent to them a round later: full, whatever room
    /// their holders last gossiped (other drains and newcomers take that room too), so the
    /// removal places nobody there any more.
    full: Vec<NodeId>,
}

/// The state of a node that serves a cluster.
#[derive(Clone, Debug)]
struct Head {
    role: HeadRole,
    members: Vec<PeerInfo>,
    dirty: bool,
    ids: Option<Arc<[NodeId]>>,
    last_view: u32,
    super_peer: bool,
    /// Round this node became super peer (promoted after the hold time, or took the role
    /// over); its age ages its token's moves (DESIGN.md "Super peers", step 4, "Settled super peers").
    promoted_at: u32,
    /// Round the token arrived (or last stayed put after a refused move).
    since: u32,
    /// Round this node became head (with this role).
    became: u32,
    view: Vec<TokenEntry>,
    /// A handover in flight: target, round sent, the message (for re-sending).
    transit: Option<(NodeId, u32, SpMessage)>,
    /// A split jump waiting for its members to move (`StepDownTo`) before the token goes to
    /// the offered spot (`token` module doc, "Split offers").
    drain: Option<Drain>,
    /// The neighbour named backup while the cluster has no member (see the module doc).
    backup: Option<NodeId>,
    /// Neighbours that refused to be backup (they serve a cluster themselves), at most
    /// [`MAX_REFUSED_BACKUPS`], newest last.
    refused_backups: Vec<NodeId>,
    /// Nodes that refused our token's move (`HandoverRefuse`) and the round they did, at most
    /// [`MAX_REFUSED_TARGETS`]: no move goes to them for `hold_rounds` (module doc,
    /// step 4, "A refused move").
    refused_targets: Vec<(NodeId, u32)>,
    /// A relayed token we took without a member (DESIGN.md "Super peers", step 6, "relay"):
    /// the relaying node and what it handed, acknowledged only once our backup confirmed our
    /// view (its answer `Detach`), so that the relaying node stays responsible until then.
    ack_to: Option<(NodeId, TokenId, u32)>,
    /// Members' nearest RTTs (`Access`), seconds, sorted by id; entries of nodes that left
    /// are ignored and pruned (`token` module doc, "Measured access delay").
    access: Vec<(NodeId, f32)>,
    /// Round a member or a known holder was last reported down: split offers and jumps wait
    /// `hold_rounds` after it (`token` module doc, "Split offers"), and so do a
    /// super peer's moves by the force law (DESIGN.md "Super peers", step 4).
    disturbed: u32,
    /// The measured medoid step under way (`medoid` module doc).
    medoid: Option<Box<MedoidRound>>,
    /// Our last medoid step: the next one is a retry of its series, or waits for a new
    /// epoch or a quarter of the members changed (`medoid` module doc, "Retries").
    medoid_done: Option<MedoidDone>,
    /// The token came by a measured medoid step: the predicted law no longer moves it
    /// (`medoid` module doc, "Measured, then not predicted").
    measured: bool,
    /// We took the role over in a re-election (or its relay, or as a backup): the token's
    /// first move within `hold_rounds` keeps the promotion (DESIGN.md "Super peers", step 5, "A recreated
    /// token's first move keeps the promotion").
    recreated: bool,
    /// The member named to replace us, first in our views ([`super::heir`], module doc,
    /// step 5, "The heir"), and the round it was last chosen.
    heir: Option<NodeId>,
    heir_at: u32,
}

/// A measured medoid step of a holder (`medoid` module doc): the sampled
/// members, our own RTTs to them (seconds, 0 = none yet) and each candidate's answer.
#[derive(Clone, Debug)]
struct MedoidRound {
    sample: Vec<NodeId>,
    own: Vec<f32>,
    own_left: usize,
    cands: Vec<(PeerInfo, Option<Vec<f32>>)>,
    sent: u32,
}

/// The last medoid step a holder started (`medoid` module doc, "Retries"): its token epoch,
/// the member count then, the retries of its series so far and the round it started.
#[derive(Clone, Copy, Debug)]
struct MedoidDone {
    epoch: u32,
    members: usize,
    retries: u32,
    at: u32,
}

/// A member measuring the sample its head sent with `MedoidProbe` (`medoid` module doc).
#[derive(Clone, Debug)]
struct Measuring {
    head: NodeId,
    sample: Vec<NodeId>,
    rtts: Vec<f32>,
    left: usize,
    started: u32,
    /// The answer went out; kept to recognise the head's `Handover` (then this node holds
    /// the token by a measured step) until [`MEDOID_KEEP_ROUNDS`].
    answered: bool,
}

/// Rounds a candidate remembers that it answered its head's `MedoidProbe`.
const MEDOID_KEEP_ROUNDS: u32 = 12;

/// Rounds a holder waits for its candidates' `MedoidCost`, and a candidate for its pings.
const MEDOID_ROUNDS: u32 = 3;

/// A role this node is entitled to and takes without a member (a minted token or claimed
/// slot, a backup's takeover, a re-election won alone): it takes it only once a neighbour
/// confirmed (`Detach`) that it holds the backup view of it (DESIGN.md "Super peers", step 6).
#[derive(Clone, Debug)]
struct PendingRole {
    role: HeadRole,
    promote: bool,
    /// The neighbour asked to be backup, and the round its view went out.
    backup: NodeId,
    sent: u32,
    /// Neighbours asked so far (they refused, or are down).
    tried: Vec<NodeId>,
}

impl Head {
    /// Promotes a holder that has held its token still for `hold_rounds` (seed 000: a node
    /// that holds a token for the hold time becomes super peer): at its round, and at once
    /// after a refused move, which is no move (DESIGN.md "Super peers", step 4, "A refused move").
    fn promote_if_held(&mut self, ctx: &mut SpContext<'_>, round: u32, hold_rounds: u32) {
        if !self.super_peer && round.wrapping_sub(self.since) >= hold_rounds {
            self.super_peer = true;
            self.promoted_at = round;
            ctx.push(SpEffect::BecomeSuperPeer);
        }
    }

    /// Our cluster view's member ids, rebuilt when the members or the heir changed, with the
    /// heir first (DESIGN.md "Super peers", step 5, "The heir"): the heir is chosen with `choose` (the
    /// round's view, which goes to every member), at most every `every` rounds; a heir that
    /// left is dropped at once (`heir` module doc).
    fn view_ids(&mut self, me: &PeerInfo, round: u32, every: u32, choose: bool) -> Arc<[NodeId]> {
        let mut changed = self.dirty;
        if self.heir.is_some_and(|x| !self.members.iter().any(|m| m.id == x)) {
            // The heir left: none until the next choice, which goes to every member at once.
            self.heir = None;
            changed = true;
        }
        // Also with no member change: a cluster that formed in its head's first rounds would
        // otherwise never name a heir, and members' positions drift.
        if choose && round.wrapping_sub(self.heir_at) >= every {
            let chosen = heir::heir(&me.point, &self.members, self.heir);
            changed |= chosen != self.heir;
            self.heir = chosen;
            self.heir_at = round;
        }
        if let Some(ids) = self.ids.as_ref().filter(|_| !changed) {
            return ids.clone();
        }
        let ids: Arc<[NodeId]> = heir::view_ids(&self.members, self.heir, me.id).into();
        self.ids = Some(ids.clone());
        ids
    }

    /// The handover in flight is over without the token leaving (refused, or its target
    /// died); a split jump's drain ends with it.
    fn end_transit(&mut self) {
        self.transit = None;
        self.drain = None;
    }

    /// The member count our token entries carry: the cap while a handover or a split jump's
    /// drain is under way (we refuse members then, and a jump leaves no room at all).
    fn advertised(&self, cap: u32) -> u32 {
        if self.transit.is_some() || self.drain.is_some() {
            cap
        } else {
            self.members.len() as u32
        }
    }
}

/// A recreated token on its way from a head entitled to it to a neighbour that holds none.
#[derive(Clone, Debug)]
struct Relay {
    role: HeadRole,
    /// The neighbour asked now, and the round the `Handover` went out.
    to: NodeId,
    sent: u32,
    /// Neighbours asked so far.
    tried: Vec<NodeId>,
}

#[derive(Debug)]
struct ClusterElection {
    dead: NodeId,
    role: HeadRole,
    election: AnyElection,
    /// The election's group: the live members of our view of the cluster, and every member
    /// that took part although our view lacked it (DESIGN.md "Super peers", step 5).
    group: Arc<Membership>,
    started: u32,
    /// A leader came out of this election (this node took the role over, or learned that
    /// another member leads): later `Leader` outputs of it are ignored (DESIGN.md "Super peers", step 5).
    decided: bool,
    /// We came out as leader while our check of the suspected head was still out: the role
    /// is taken only when the check fails (DESIGN.md "Super peers", step 5, "A doubter wins only once
    /// its check failed").
    won_in_doubt: bool,
}

/// A re-election this node has left because its outcome holds (DESIGN.md "Super peers", step 5, "Late
/// elections end"): the dead head, the head that holds its role now, that role, and the
/// round we left.
#[derive(Debug)]
struct Retired {
    dead: NodeId,
    head: PeerInfo,
    role: HeadRole,
    at: u32,
}

/// Rounds a left re-election is still answered (late `Election`s get the outcome).
const RETIRED_ROUNDS: u32 = 30;

/// A check of our head, which members asked us to re-elect while we still took it for alive
/// (DESIGN.md "Super peers", step 5, "A suspected head is checked").
#[derive(Debug)]
struct Doubt {
    head: PeerInfo,
    /// The round the check began (it fails after `doubt_rounds`).
    since: u32,
    /// Who asked (they hear `HeadAlive` if the head answers).
    askers: Vec<NodeId>,
}

/// Askers kept per check.
const MAX_DOUBT: usize = 64;

/// An `Election` for a cluster we were not (yet) a member of: (dead head, sender, message,
/// round) (`SuperPeerNode::early`).
type EarlyElection = (NodeId, NodeId, crate::election::Message, u32);

/// One node's super-peer selection.
#[derive(Debug)]
pub struct SuperPeerNode {
    cfg: Arc<SuperPeerConfig>,
    me: PeerInfo,
    round: u32,
    started: bool,
    est: SizeEstimator,
    est_pending: u32,
    /// Our own estimate lookups answered usably (`estimate` module doc, "Pooled samples").
    est_answered: u16,
    /// The round of our first vicinity sample, and how often we pushed our pool to peers
    /// outside our vicinity since (`estimate` module doc, "Vicinity first").
    vicinity_at: Option<u32>,
    vicinity_pushes: u8,
    queries: Vec<(u32, Pending)>,
    /// Failed lookups waiting for their retry: (round due, what to look up again).
    retry: Vec<(u32, Pending)>,
    /// Lookups that failed in a row (the back-off doubles with each, see `on_lookup_failed`).
    lookup_failures: u8,
    next_query: u32,
    /// Lookups started, by purpose ([`LOOKUP_PURPOSES`]; saturating).
    lookups_by: [u16; LOOKUP_PURPOSES.len()],
    wanted: u64,
    k: u32,
    claim: Option<Claim>,
    neighbours: Vec<PeerInfo>,
    /// Inline for the default size (no heap pointer to chase on every gossip message: the
    /// simulator's rounds wait on memory); a larger `cache_size` spills to the heap.
    cache: SmallVec<[CacheEntry; CACHE_INLINE]>,
    /// Peers that said they serve no cluster, ignored in gossip until the given round.
    gone: Vec<(NodeId, u32)>,
    /// Measured RTTs (seconds) and recent refusals of heads whose entries left the cache, by
    /// the top 64 bits of their id, oldest first, at most [`REMEMBERED_RTTS`] (DESIGN.md
    /// "Super peers", step 3, "Measurements outlive the cache entry").
    remembered: SmallVec<[Remembered; REMEMBERED_RTTS]>,
    /// Round we last heard from the head we are attached to.
    heard: u32,
    /// Our head, which members asked us to re-elect while we still took it for alive: we
    /// check it with an `Attach` before we join (DESIGN.md "Super peers", step 5).
    doubted: Option<Box<Doubt>>,
    last_seed: u32,
    /// Seeds sent since the node was last attached or a head with a non-empty cache (the
    /// back-off of `seed_interval`; DESIGN.md "Super peers", step 3, "Seeds back off until the node
    /// attaches").
    seeds_unanswered: u8,
    /// Boxed (and `election` too): only about 1 % of nodes serve a cluster, and a million
    /// simulated nodes must not each carry the room for one inline.
    head: Option<Box<Head>>,
    attached: Option<PeerInfo>,
    /// Smallest measured RTT to the head we are attached to, seconds; 0 = not measured.
    attached_rtt: f32,
    /// This node's nearest RTT (`SpInput::NearestRtt`), seconds; 0 = not given.
    nearest_rtt: f32,
    /// How late this node's own loop runs (`SpInput::Lateness`), seconds; 0 = on time.
    lateness: f32,
    /// Whether this node's coordinate is fit to place tokens by (`SpInput::CoordinateFit`;
    /// true unless told otherwise).
    coordinate_fit: Fitness,
    /// Round (low 16 bits, never 0) we last asked to measure that head; 0 = never.
    attached_probed: u16,
    attaching: Option<(NodeId, u32)>,
    /// The new holder of the token our split jump handed on with us as its only member: while
    /// it is our head we look for our own place as an unattached node does (by prediction, not
    /// only measurement), it being the head we fall back on.
    placing: Option<NodeId>,
    member_view: Option<(NodeId, HeadRole, Arc<[NodeId]>)>,
    /// A member-less head named us its backup: its view and the round it came.
    backup_view: Option<(NodeId, HeadRole, Arc<[NodeId]>, u32)>,
    election: Option<Box<ClusterElection>>,
    /// The re-election we left once its outcome held (DESIGN.md "Super peers", step 5, "Late elections
    /// end"), answered for [`RETIRED_ROUNDS`].
    retired: Option<Box<Retired>>,
    /// Recreated tokens this node is entitled to but cannot hold, being handed on (module
    /// doc, step 6, "relay"); they outlive the node's own role.
    relays: Vec<Relay>,
    /// A member-less role waiting for its backup's confirmation (DESIGN.md "Super peers", step 6,
    ///); never set while the node is a head.
    pending: Option<Box<PendingRole>>,
    /// `Election` messages for clusters we were not (yet) a member of: (dead head, sender,
    /// message, round), at most [`MAX_EARLY_ELECTIONS`]; replayed if we join that election
    /// within [`EARLY_ELECTION_ROUNDS`] (DESIGN.md "Super peers", step 5).
    #[expect(
        clippy::box_collection,
        reason = "8 bytes per node while empty, against 24 for a bare `Vec` (10^6 nodes)"
    )]
    early: Option<Box<Vec<EarlyElection>>>,
    /// Our head's `MedoidProbe` being measured (`medoid` module doc).
    measuring: Option<Box<Measuring>>,
    /// The token and epoch of the last `Handover` we refused as priced on a stale copy of our
    /// position (`HandoverStale`, DESIGN.md "Super peers", step 4): the same handover sent
    /// again is taken, so that a sender that did not learn our position (a lost message, or
    /// a build that predates `HandoverStale`) still gets its token moved. The token id's low
    /// 32 bits stand for it (two tokens alike in those and in the epoch, one after the other,
    /// only cost a refusal), so the field fits the struct's padding (10^6 nodes).
    stale_refused: Option<(u32, u32)>,
    /// How far our own point moved lately, seconds (Euclidean plus height, summed over the
    /// changes since the coordinate became fit, halved every `drift_half_life` rounds), as
    /// of round `drift_at`: a token move must gain more than this ([`super::token::drift`],
    /// DESIGN.md "Super peers", step 4, "A move must beat the coordinates' drift").
    drift: f32,
    drift_at: u32,
}

/// Rounds without an answer after which a token's `Handover` in flight is sent again (module
/// doc, step 4); a refused dial ends the handover only before the first re-send.
const HANDOVER_RESEND_ROUNDS: u32 = 3;

/// Whether a node's coordinate is fit to place tokens by (`SpInput::CoordinateFit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fitness {
    /// Never told: counts as fit (the simulator's Vivaldi phase runs before selection).
    Assumed,
    Unfit,
    /// Told fit: stays fit.
    Fit,
}

/// A nearest RTT is taken only when it is below this share of the one the node has.
const NEAREST_RTT_STEP: f64 = 0.95;

/// The largest drift a node keeps, seconds (`SuperPeerNode::drift`).
const MAX_DRIFT: f64 = 3600.0;

/// `Election` messages kept for a cluster we may learn we belong to (DESIGN.md "Super peers", step 5).
const MAX_EARLY_ELECTIONS: usize = 8;
/// Rounds such a message is kept.
const EARLY_ELECTION_ROUNDS: u32 = 5;

impl SuperPeerNode {
    /// A fresh node `id` at `point`. `cfg` must have passed [`SuperPeerConfig::validate`].
    pub fn new(id: NodeId, point: Point, cfg: Arc<SuperPeerConfig>) -> SuperPeerNode {
        SuperPeerNode {
            cfg,
            me: PeerInfo { id, point },
            round: 0,
            started: false,
            est: SizeEstimator::default(),
            est_pending: 0,
            est_answered: 0,
            vicinity_at: None,
            vicinity_pushes: 0,
            queries: Vec::new(),
            retry: Vec::new(),
            lookup_failures: 0,
            next_query: 0,
            lookups_by: [0; LOOKUP_PURPOSES.len()],
            wanted: 0,
            k: 0,
            claim: None,
            neighbours: Vec::new(),
            cache: SmallVec::new(),
            gone: Vec::new(),
            remembered: SmallVec::new(),
            heard: 0,
            doubted: None,
            last_seed: 0,
            seeds_unanswered: 0,
            head: None,
            attached: None,
            attached_rtt: 0.0,
            nearest_rtt: 0.0,
            lateness: 0.0,
            coordinate_fit: Fitness::Assumed,
            attached_probed: 0,
            attaching: None,
            placing: None,
            member_view: None,
            backup_view: None,
            election: None,
            retired: None,
            relays: Vec::new(),
            pending: None,
            early: None,
            measuring: None,
            stale_refused: None,
            drift: 0.0,
            drift_at: 0,
        }
    }

    /// A peer's current position (`SpInput::PeerUp`, or the one a `HandoverStale` carries):
    /// it refreshes the copy in our member list if it is our member (DESIGN.md "Super peers", step 4,
    /// "Members' positions are kept fresh") and our neighbour list.
    fn learn_position(&mut self, info: PeerInfo) {
        if info.id == self.me.id || !info.point.is_valid() {
            return;
        }
        if let Some(m) = self.head.as_mut().and_then(|h| h.members.iter_mut().find(|m| m.id == info.id)) {
            m.point = info.point;
        }
        self.neighbours.retain(|n| n.id != info.id);
        let me = self.me.point;
        if self.neighbours.len() < self.cfg.discovery.neighbours {
            self.neighbours.push(info);
        } else if self.neighbours.last().is_some_and(|far| me.rtt(&info.point) < me.rtt(&far.point)) {
            // Full: a nearer newcomer takes the farthest one's place (see the module doc,
            // step 3, "Nearest neighbours").
            self.neighbours.pop();
            self.neighbours.push(info);
        }
        // Nearest first (by predicted RTT), for the Vicinity-style exchange choice.
        self.neighbours.sort_by(|a, b| me.rtt(&a.point).total_cmp(&me.rtt(&b.point)));
    }

    // ----- read-only views for drivers, tests and measurements -----

    /// Where the buffers this node reads on nearly every tick live, as (address, bytes): its
    /// neighbours (on the heap), its head cache and RTT memory (inside the node's state
    /// unless a `cache_size` above the inline size spilled them). For a simulator that
    /// prefetches the state of nodes whose turn is coming (`experiments`'
    /// `superpeers::prefetch`); the node itself never uses it, and reading the addresses
    /// changes nothing.
    pub fn hot_buffers(&self) -> [(*const u8, usize); 3] {
        fn span<T>(v: &[T]) -> (*const u8, usize) {
            (v.as_ptr() as *const u8, std::mem::size_of_val(v))
        }
        [span(&self.cache), span(&self.remembered), span(&self.neighbours)]
    }

    pub fn id(&self) -> NodeId {
        self.me.id
    }
    pub fn point(&self) -> Point {
        self.me.point
    }
    /// True once the node is a super peer (a prefix slot owner, or a promoted token holder).
    pub fn is_super_peer(&self) -> bool {
        self.head.as_ref().is_some_and(|h| h.super_peer)
    }
    /// True while the node serves a cluster (super peer or provisional token holder).
    pub fn is_head(&self) -> bool {
        self.head.is_some()
    }
    /// A holder in a split jump: draining its members, or its token on the way to the offered
    /// spot (`token` module doc, "Split offers").
    pub fn is_jumping(&self) -> bool {
        self.head.as_ref().is_some_and(|h| h.drain.is_some())
    }
    /// The member a head names to replace it, first in its views (DESIGN.md "Super peers", step 5, "The
    /// heir"); `None` for a node that serves no cluster or has no member.
    pub fn heir(&self) -> Option<NodeId> {
        self.head.as_ref().and_then(|h| h.heir)
    }
    pub fn role(&self) -> Option<HeadRole> {
        self.head.as_ref().map(|h| h.role)
    }
    /// The token this node holds, if any (also while a handover is in flight).
    pub fn token(&self) -> Option<(TokenId, u32)> {
        match self.head.as_ref()?.role {
            HeadRole::Token { token, epoch } => Some((token, epoch)),
            HeadRole::Slot { .. } => None,
        }
    }
    pub fn members(&self) -> &[PeerInfo] {
        self.head.as_ref().map_or(&[], |h| &h.members)
    }
    pub fn attached_to(&self) -> Option<NodeId> {
        self.attached.map(|a| a.id)
    }
    /// The neighbour this head named backup while it has no member (see the module doc).
    pub fn backup(&self) -> Option<NodeId> {
        self.head.as_ref().and_then(|h| h.backup)
    }
    /// Whether this node talks to `peer` every few rounds: its head, a member of its cluster,
    /// one of its neighbours (cache-exchange and announcement partners), or a member of the
    /// re-election it takes part in. A transport keeps such connections open.
    pub fn talks_to(&self, peer: &NodeId) -> bool {
        self.attached_to() == Some(*peer)
            || self.members().iter().any(|m| m.id == *peer)
            || self.neighbours.iter().any(|n| n.id == *peer)
            || self.election_group().any(|m| m == *peer)
    }
    /// Whether this node's coordinate counts as fit to place tokens by (`SpInput::CoordinateFit`).
    pub fn coordinate_fit(&self) -> bool {
        self.coordinate_fit != Fitness::Unfit
    }
    /// How many super peers this node knows (its cache).
    pub fn known_head_count(&self) -> usize {
        self.cache.len()
    }
    /// How many neighbours (peers with a known coordinate) this node keeps.
    pub fn neighbour_count(&self) -> usize {
        self.neighbours.len()
    }
    /// The neighbours this node keeps, nearest first (DESIGN.md "Super peers", step 3, "Nearest
    /// neighbours").
    pub fn neighbours(&self) -> &[PeerInfo] {
        &self.neighbours
    }
    /// The cache as this node judges it (diagnostics: why a member did not switch): every
    /// known head with its measured RTT (seconds, if measured), its RTT predicted from the
    /// coordinates, and whether it is backed off (it refused this node as full).
    pub fn cached_heads(&self) -> Vec<CachedHead> {
        let me = self.me.point;
        self.cache
            .iter()
            .map(|c| CachedHead {
                id: c.info.id,
                rtt: (c.rtt > 0.0).then_some(c.rtt as f64),
                predicted: me.rtt(&c.info.point),
                backed_off: c.backoff_until > self.round,
                failed: c.failed,
                remeasured: c.remeasured,
            })
            .collect()
    }
    /// The measured RTT to the head this node is attached to (seconds), if measured.
    pub fn attached_rtt(&self) -> Option<f64> {
        (self.attached.is_some() && self.attached_rtt > 0.0).then_some(self.attached_rtt as f64)
    }
    /// The super peers this node knows (its cache), nearest first.
    pub fn known_heads(&self) -> Vec<PeerInfo> {
        let mut v: Vec<PeerInfo> = self.cache.iter().map(|c| c.info).collect();
        let me = self.me.point;
        v.sort_by(|a, b| me.rtt(&a.point).total_cmp(&me.rtt(&b.point)));
        v
    }
    /// The network size this node takes: the known size when it was told one
    /// (`estimate.known_size`), else its estimate (`None` before any sample).
    pub fn estimate(&self) -> Option<f64> {
        match self.cfg.estimate.known_size {
            0 => self.est.estimate(),
            n => Some(n as f64),
        }
    }
    pub fn wanted(&self) -> u64 {
        self.wanted
    }
    /// The settings this node runs with.
    pub fn config(&self) -> &SuperPeerConfig {
        &self.cfg
    }
    pub fn prefix_bits(&self) -> u32 {
        self.k
    }
    pub fn in_election(&self) -> bool {
        self.election.as_ref().is_some_and(|e| e.election.in_election())
    }
    /// The head whose cluster view this node holds for a re-election, if any (diagnostics).
    pub fn view_head(&self) -> Option<NodeId> {
        self.member_view.as_ref().map(|(h, _, _)| *h)
    }
    /// The member-less head that named this node its backup, and the round its view came
    /// (diagnostics).
    pub fn backup_for(&self) -> Option<(NodeId, u32)> {
        self.backup_view.as_ref().map(|(h, _, _, at)| (*h, *at))
    }
    /// The dead head whose cluster re-election this node takes part in, if any (diagnostics).
    pub fn election_for(&self) -> Option<NodeId> {
        self.election.as_ref().map(|e| e.dead)
    }
    /// The group of the cluster re-election this node takes part in (this node included;
    /// empty when it takes part in none), from its start until the node leaves it (module
    /// doc, step 5, "Late elections end"). A transport keeps room for these peers while the
    /// election runs (the swarm's connection gate).
    pub fn election_group(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.election.iter().flat_map(|e| e.group.ranks().iter().map(|r| r.id))
    }
    /// Lookups this node started, by purpose: `(name, count)` in the order of
    /// [`LOOKUP_PURPOSES`]; a retried lookup counts again (diagnostics: where a swarm's DHT
    /// traffic goes).
    pub fn lookups_by_purpose(&self) -> impl Iterator<Item = (&'static str, u16)> + '_ {
        LOOKUP_PURPOSES.iter().copied().zip(self.lookups_by.iter().copied())
    }
    /// This node's protocol round counter.
    pub fn round(&self) -> u32 {
        self.round
    }
    /// A non-head's attachment state in one line (diagnostics: the simulator's
    /// `PEERAGE_SP_CHURN` prints it for nodes still unattached during recovery): the head it
    /// is attaching to, its cluster election (rounds since it started, decided), a pending
    /// role, relays, and its cache (entries, backed off).
    pub fn attach_summary(&self) -> String {
        let r = self.round;
        format!(
            "attached={} attaching={:?} election={:?} pending={} relays={} cache={} backed_off={} backup_for={}",
            self.attached.is_some(),
            self.attaching.map(|(a, at)| (a.short(), r.wrapping_sub(at))),
            self.election.as_ref().map(|e| (e.dead.short(), r.wrapping_sub(e.started), e.decided)),
            self.pending.is_some(),
            self.relays.len(),
            self.cache.len(),
            self.cache.iter().filter(|c| c.backoff_until > r).count(),
            self.backup_view.is_some(),
        )
    }
    /// A head's state in one line (diagnostics: the simulator's `PEERAGE_SP_CHURN` prints it for
    /// holders still not promoted at the end of the run): rounds since the token arrived, the
    /// handover in flight (target, rounds since sent, members handed), the drain, members.
    pub fn head_summary(&self) -> Option<String> {
        let h = self.head.as_ref()?;
        let r = self.round;
        let transit = h.transit.as_ref().map(|(to, sent, msg)| {
            let handed = match msg {
                SpMessage::Handover { members, .. } => members.len(),
                _ => 0,
            };
            format!("{}:{}r:{}m", to.short(), r.wrapping_sub(*sent), handed)
        });
        Some(format!(
            "role={:?} super={} still={} became={} members={} view={} transit={:?} drain={:?} backup={} ack_to={} disturbed={}",
            h.role,
            h.super_peer,
            r.wrapping_sub(h.since),
            r.wrapping_sub(h.became),
            h.members.len(),
            h.view.len(),
            transit,
            h.drain.as_ref().map(|d| (d.at.id.short(), r.wrapping_sub(d.started), d.full.len())),
            h.backup.is_some(),
            h.ack_to.is_some(),
            r.wrapping_sub(h.disturbed),
        ))
    }
    /// Approximate heap bytes held (for the simulator's memory report).
    pub fn heap_bytes(&self) -> usize {
        let mut b = self.neighbours.capacity() * std::mem::size_of::<PeerInfo>()
            + if self.cache.spilled() { self.cache.capacity() * std::mem::size_of::<CacheEntry>() } else { 0 }
            + if self.remembered.spilled() {
                self.remembered.capacity() * std::mem::size_of::<Remembered>()
            } else {
                0
            }
            + self.queries.capacity() * std::mem::size_of::<(u32, Pending)>()
            + self.retry.capacity() * std::mem::size_of::<(u32, Pending)>();
        if self.election.is_some() {
            b += std::mem::size_of::<ClusterElection>();
        }
        if self.retired.is_some() {
            b += std::mem::size_of::<Retired>();
        }
        if let Some(h) = &self.head {
            b += std::mem::size_of::<Head>();
            b += h.members.capacity() * std::mem::size_of::<PeerInfo>()
                + h.view.capacity() * std::mem::size_of::<TokenEntry>()
                + h.access.capacity() * std::mem::size_of::<(NodeId, f32)>();
            if let Some(m) = &h.medoid {
                b += std::mem::size_of::<MedoidRound>()
                    + m.sample.capacity() * (std::mem::size_of::<NodeId>() + 4)
                    + m.cands.len() * (std::mem::size_of::<(PeerInfo, Option<Vec<f32>>)>() + 4 * m.sample.len());
            }
        }
        if let Some(m) = &self.measuring {
            b += std::mem::size_of::<Measuring>() + m.sample.capacity() * (std::mem::size_of::<NodeId>() + 4);
        }
        b
    }

    /// React to one input.
    pub fn handle(&mut self, ctx: &mut SpContext<'_>, input: SpInput) {
        self.dispatch(ctx, input);
        self.retire_election(ctx);
    }

    fn dispatch(&mut self, ctx: &mut SpContext<'_>, input: SpInput) {
        match input {
            SpInput::Start => self.start(ctx),
            SpInput::Tick => self.tick(ctx),
            SpInput::Message { from, msg } => self.on_message(ctx, from, msg),
            SpInput::Refused { to, msg: SpMessage::Handover { token, epoch, .. } } => {
                // Never delivered: as if `to` refused it (DESIGN.md "Super peers", step 4, "A handover whose
                // connection is refused"), if it is our handover in flight and was not sent
                // again yet (an earlier copy may have arrived); the answer's handler checks
                // the token.
                let round = self.round;
                let first = self.head.as_ref().is_some_and(|h| {
                    h.transit
                        .as_ref()
                        .is_some_and(|(t, sent, _)| *t == to && round.wrapping_sub(*sent) < HANDOVER_RESEND_ROUNDS)
                });
                if first {
                    self.on_message(ctx, to, SpMessage::HandoverRefuse { token, epoch });
                }
            }
            SpInput::Refused { .. } => {}
            SpInput::LookupResult { query, report } => self.on_lookup_report(ctx, query, report),
            SpInput::PeerUp(info) => self.learn_position(info),
            SpInput::PeerDown(id) => self.peer_down(ctx, id),
            SpInput::HeadNotServing(id) => {
                // As a node that is no head answering `Refuse { full: false }` (step 5, "A head
                // that only refuses is left").
                if self.head.is_none() && self.leave_head(ctx, id) {
                    self.try_attach(ctx);
                }
            }
            SpInput::SendFailed { msg: SpMessage::SizeSamples { .. }, .. } => {
                // Shared samples are a courtesy to peers we just reached; one that failed
                // says too little about the peer to call it down (`estimate` module doc).
            }
            SpInput::SendFailed { to, msg } => {
                // We just took a role over and left the head we were attached to (`Detach`),
                // or handed a backup duty back (`Refuse`), and that message failed: the peer
                // was already down and never learned that we left. Its other members (if any)
                // elect with a view that names us, or nobody but us may recreate its role. We
                // still do our part, as a head, and hand a won token on (DESIGN.md "Super peers", step 6,
                // "relay").
                let head = self.head.is_some();
                let left_dead_head = head
                    && matches!(msg, SpMessage::Detach)
                    && self.member_view.as_ref().is_some_and(|(h, _, _)| *h == to);
                let released = match (&self.backup_view, &msg) {
                    (Some((b, role, _, at)), SpMessage::Refuse { full: false }) if head && *b == to => {
                        Some((*role, *at))
                    }
                    _ => None,
                };
                self.peer_down(ctx, to);
                if left_dead_head {
                    self.open_election(ctx, to, true, 0.0);
                }
                if let Some((HeadRole::Token { token, epoch }, at)) = released {
                    if self.round.wrapping_sub(at) <= VIEW_EVERY + 1 {
                        self.relay_role(ctx, HeadRole::Token { token, epoch: epoch.wrapping_add(1) });
                    }
                }
            }
            SpInput::Coordinate(p) => {
                if p.is_valid() {
                    // Our own drift (DESIGN.md "Super peers", step 4, "A move must beat the coordinates'
                    // drift"): counted once the coordinate is fit; what it learned before
                    // that is no drift the token's moves could have followed.
                    if self.coordinate_fit() && self.me.point.is_valid() {
                        let shift = self.me.point.shift(&p);
                        let now = drift(self.drift as f64, self.round.wrapping_sub(self.drift_at), &self.cfg.tokens);
                        // At most an hour: a point thrown far away must not overflow into
                        // no floor at all.
                        let sum = now + shift;
                        self.drift = if sum.is_finite() { sum.min(MAX_DRIFT) } else { MAX_DRIFT } as f32;
                        self.drift_at = self.round;
                    }
                    self.me.point = p;
                }
            }
            SpInput::Timer(t) => self.drive_election(ctx, Input::Timer(t)),
            SpInput::Rtt { peer, rtt } => self.on_rtt(ctx, peer, rtt),
            SpInput::NearestRtt { rtt } => {
                if !(rtt.is_finite() && rtt > 0.0 && rtt < 3600.0) {
                    ctx.push(SpEffect::Rejected {
                        from: self.me.id,
                        reason: "nearest RTT out of range",
                        offence: None,
                    });
                    return;
                }
                // Taken when it dropped by 5 % or more: the access estimate moves on real
                // changes, not on every better ping.
                if self.nearest_rtt > 0.0 && rtt >= NEAREST_RTT_STEP * self.nearest_rtt as f64 {
                    return;
                }
                self.nearest_rtt = rtt as f32;
                self.report_access(ctx);
            }
            SpInput::Lateness { secs } => {
                if !(secs.is_finite() && (0.0..3600.0).contains(&secs)) {
                    ctx.push(SpEffect::Rejected {
                        from: self.me.id,
                        reason: "loop lateness out of range",
                        offence: None,
                    });
                    return;
                }
                self.lateness = secs as f32;
            }
            SpInput::CoordinateFit { fit } => {
                // Sticky: a coordinate fit once stays fit (its error estimate can rise again
                // for a while, and every unfit report would restart a holder's hold).
                if self.coordinate_fit == Fitness::Fit && !fit {
                    return;
                }
                if fit && self.coordinate_fit == Fitness::Unfit {
                    self.forget_measurements();
                }
                self.coordinate_fit = if fit { Fitness::Fit } else { Fitness::Unfit };
            }
        }
    }

    /// The coordinate became fit: measurements taken before are forgotten and taken again
    /// (DESIGN.md "Super peers", step 4, "An unfit coordinate pins the token": the same load that kept the
    /// coordinate unfit inflated them, and a head measured once keeps that minimum).
    fn forget_measurements(&mut self) {
        for c in self.cache.iter_mut() {
            c.rtt = 0.0;
            c.probed = 0;
            c.failed = false;
            c.remeasured = 0;
        }
        self.remembered.clear();
        self.attached_rtt = 0.0;
        self.attached_probed = 0;
    }

    fn tick(&mut self, ctx: &mut SpContext<'_>) {
        self.round = self.round.wrapping_add(1);
        if !self.started {
            return;
        }
        if !self.retry.is_empty() {
            self.run_retries(ctx);
        }
        self.age_cache();
        if !self.relays.is_empty() {
            self.resend_relays(ctx);
        }
        let round = self.round;
        if self.early.as_ref().is_some_and(|e| e.iter().all(|x| round.wrapping_sub(x.3) > EARLY_ELECTION_ROUNDS)) {
            self.early = None;
        }
        if self.pending.as_ref().is_some_and(|p| round.wrapping_sub(p.sent) >= 3) {
            // The pending role's backup view got no answer for 3 rounds (the neighbour may take
            // us for its head and the view for a member's): the next neighbour.
            self.pending_next(ctx);
        }
        if let Some(m) = self.measuring.as_ref() {
            let age = round.wrapping_sub(m.started);
            if age >= MEDOID_KEEP_ROUNDS {
                self.measuring = None;
            } else if !m.answered && age >= MEDOID_ROUNDS {
                // Pings that never came back: answer with what we have.
                self.answer_medoid(ctx);
            }
        }
        if (self.head.is_some() || self.attached.is_some()) && !self.cache.is_empty() {
            self.seeds_unanswered = 0;
        }
        if self.wanted == 0 {
            self.estimate_tick(ctx);
        }
        if self.head.is_some() {
            self.head_tick(ctx);
        } else {
            self.normal_tick(ctx);
        }
    }
}
