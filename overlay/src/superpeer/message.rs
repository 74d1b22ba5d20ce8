//! Super-peer selection messages, the inputs a node reacts to and the effects it asks for.
//!
//! Vocabulary: a *head* is a node that serves a cluster: a prefix super peer, or a token
//! holder (provisional until its hold time is over, then a super peer). *Members* are the
//! normal nodes attached to it.

use super::estimate::SizeSample;
use super::lookup::LookupReport;
use super::point::Point;
use crate::election::Message as ElectionMessage;
use crate::id::NodeId;
use crate::Timer;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A peer and its position.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeerInfo {
    pub id: NodeId,
    pub point: Point,
}

/// A head as passed on by cache exchanges: `age` is the number of rounds since the head
/// itself (or a member that heard from it) vouched for it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeadEntry {
    pub head: PeerInfo,
    pub age: u16,
}

/// A token's identity: the top 64 bits of the DHT key whose closest node created it (see
/// `node`), so two creators never mint the same id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TokenId(pub u64);

/// What a head serves: the role a replacement takes over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HeadRole {
    /// Reserved-prefix super peer of the slot whose DHT key is `key`.
    Slot { key: NodeId },
    /// Holder of `token` at `epoch` (the epoch grows with every handover and recreation).
    Token { token: TokenId, epoch: u32 },
}

/// One token as gossiped between holders.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenEntry {
    pub token: TokenId,
    pub epoch: u32,
    pub holder: PeerInfo,
    /// Rounds since the holder itself sent this entry (grows as it is passed on).
    pub age: u32,
    /// The holder's member count when it sent this entry: what a jumping holder counts as the
    /// token's room for its members (`token` module doc, "Split offers").
    pub members: u32,
}

/// Messages between super-peer selection nodes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SpMessage {
    /// A head tells a neighbour that it serves a cluster (and whether it has room).
    Announce { head: PeerInfo, room: bool },
    /// Normal nodes swap the super peers they know (push; `reply` asks for a push back).
    CacheExchange { entries: Vec<HeadEntry>, reply: bool },
    /// Holders swap token positions (push; `reply` asks for a push back).
    TokenGossip { entries: Vec<TokenEntry>, reply: bool },
    /// A normal node asks to join the receiver's cluster.
    Attach { point: Point },
    /// The head accepts; the member now belongs to its cluster.
    Accept { role: HeadRole, head: PeerInfo },
    /// The head refuses: full (`full = true`) or not a head (any more).
    Refuse { full: bool },
    /// A member leaves the cluster.
    Detach,
    /// The head's token (and cluster) moved to `to`: attach there.
    Moved { to: PeerInfo },
    /// The head stopped serving; find another super peer.
    StepDown,
    /// The head's current member list and role, for the re-election if the head dies.
    ClusterView { role: HeadRole, members: Arc<[NodeId]> },
    /// A holder hands its token and cluster to the receiver. `promoted`: the receiver is
    /// super peer at once (a recreated token's first move, or its relay). Conservation does
    /// not depend on it.
    Handover { token: TokenId, epoch: u32, promoted: bool, members: Vec<PeerInfo>, view: Vec<TokenEntry> },
    /// The receiver took the token.
    HandoverAck { token: TokenId, epoch: u32, holder: PeerInfo },
    /// The receiver cannot take the token (it already holds one).
    HandoverRefuse { token: TokenId, epoch: u32 },
    /// The winner of a cluster's re-election took over the dead head's role and cluster.
    Takeover { dead: NodeId, role: HeadRole, head: PeerInfo },
    /// An election message of the re-election in the cluster of the dead head `dead`.
    Election { dead: NodeId, msg: ElectionMessage },
    /// A member tells its token holder its nearest RTT (`SpInput::NearestRtt`), seconds: the
    /// holder's access-delay estimate (`token` module doc, "Measured access delay").
    Access { nearest_rtt: f32 },
    /// A token holder offers a split of its cluster to the holders it knows: a second head
    /// at `at` (one of its members) would save its members `gain` seconds of predicted RTT in
    /// total (`token` module doc, "Split offers"). A settled holder whose own removal costs
    /// less jumps there with its token.
    Split { at: PeerInfo, gain: f32 },
    /// A member asked to re-elect `head`'s cluster found `head` alive (it answered the
    /// member's `Attach`): the receiver drops its undecided re-election and attaches to
    /// `head` again (`node` module doc, step 5, "A suspected head is checked").
    HeadAlive { head: PeerInfo },
    /// The head stopped serving because its token jumped (`token` module doc, "Split
    /// offers"): as `StepDown`, and `head` is where the member should attach (a
    /// known head that had room for it).
    StepDownTo { head: PeerInfo },
    /// A token holder asks a member, a candidate head, to ping the sampled members and
    /// answer with the RTTs (`medoid` module doc, the measured medoid step).
    MedoidProbe { sample: Vec<NodeId> },
    /// The answer to `MedoidProbe`: the measured RTT to each sampled member, seconds, in
    /// the sample's order (0 = no answer).
    MedoidCost { rtts: Vec<f32> },
    /// "I serve reserved slot `key`": a slot head's duplicate check (`node` module doc, step
    /// 2, "One head per slot"). The receiver, if it serves the same slot, keeps it
    /// when it is the nearer of the two to `key` (and answers with its own `SlotHeld`), else
    /// steps down and moves its members to `head`. Anyone else ignores it.
    SlotHeld { key: NodeId, head: PeerInfo },
    /// Single-lookup estimates of N the sender pooled, its own newest first (`estimate`
    /// module doc, "Pooled samples"; at most `MAX_SAMPLES_PER_MESSAGE`).
    SizeSamples { samples: Vec<SizeSample> },
    /// The receiver of a `Handover` did not take the token because the sender priced the
    /// move with a copy of the receiver's position that its own `point` has left by more than
    /// the smallest gain a move needs could absorb (`node` module doc, step 4, "A move priced
    /// on a stale position is refused"). Unlike `HandoverRefuse` the receiver may
    /// be asked again at once: the sender takes `point` and prices its next round with it.
    HandoverStale { token: TokenId, epoch: u32, point: Point },
}

impl SpMessage {
    /// A short stable name, for counting messages by type.
    pub fn kind(&self) -> &'static str {
        match self {
            SpMessage::Announce { .. } => "announce",
            SpMessage::CacheExchange { .. } => "cache-exchange",
            SpMessage::TokenGossip { .. } => "token-gossip",
            SpMessage::Attach { .. } => "attach",
            SpMessage::Accept { .. } => "accept",
            SpMessage::Refuse { full: true } => "refuse-full",
            SpMessage::Refuse { full: false } => "refuse-not-head",
            SpMessage::Detach => "detach",
            SpMessage::Moved { .. } => "moved",
            SpMessage::StepDown => "step-down",
            SpMessage::ClusterView { .. } => "cluster-view",
            SpMessage::Handover { .. } => "handover",
            SpMessage::HandoverAck { .. } => "handover-ack",
            SpMessage::HandoverRefuse { .. } => "handover-refuse",
            SpMessage::Takeover { .. } => "takeover",
            SpMessage::Election { .. } => "election",
            SpMessage::Access { .. } => "access",
            SpMessage::Split { .. } => "split",
            SpMessage::HeadAlive { .. } => "head-alive",
            SpMessage::StepDownTo { .. } => "step-down-to",
            SpMessage::MedoidProbe { .. } => "medoid-probe",
            SpMessage::MedoidCost { .. } => "medoid-cost",
            SpMessage::SlotHeld { .. } => "slot-held",
            SpMessage::SizeSamples { .. } => "size-samples",
            SpMessage::HandoverStale { .. } => "handover-stale",
        }
    }
}

/// What the driver asks the DHT (answered with [`SpInput::LookupResult`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Query {
    /// The K closest live peers to `key` (kad's closest-peers query).
    Closest { key: NodeId },
    /// Peers currently providing `key` (kad's provider records), a sample if there are many.
    Providers { key: NodeId },
    /// The K closest live peers to *a* uniformly random key (the size estimate's lookups):
    /// `key` is the one the node drew, and any key drawn as uniformly serves as well. A driver
    /// that cannot aim at `key` (kad hashes every target it is given, so aiming at a chosen key
    /// costs a preimage search) looks up another uniform key and names it in its
    /// [`LookupReport::key`].
    Sample { key: NodeId },
    /// The peers the node's own DHT routing table holds, answered from the table with no
    /// network traffic (`super::vicinity`): [`LookupReport::peers`] lists them, and a list
    /// shorter than [`LookupReport::known`] is the nearest part of the table.
    Vicinity,
}

/// What a super-peer selection node reacts to.
#[derive(Clone, Debug)]
pub enum SpInput {
    /// The node starts: it begins estimating N.
    Start,
    /// A protocol round passed (the driver calls this once per round, e.g. every second).
    Tick,
    /// A message from a peer.
    Message { from: NodeId, msg: SpMessage },
    /// The answer to the lookup the node asked for with `query`, with the lookup's statistics:
    /// the node judges whether it may decide on it ([`super::lookup`]).
    LookupResult { query: u32, report: LookupReport },
    /// A neighbour became reachable (or reports a new position).
    PeerUp(PeerInfo),
    /// The transport or failure detector reports a peer unreachable.
    PeerDown(NodeId),
    /// The failure detector finds the node's head alive but not serving it: the head refused
    /// every connection for a whole silence and sent nothing (module doc of
    /// `superpeer::node`, step 5, "A head that only refuses is left"). The node leaves that
    /// head and looks again, without a re-election; ignored unless `head` is its head.
    HeadNotServing(NodeId),
    /// A message could not be delivered.
    SendFailed { to: NodeId, msg: SpMessage },
    /// A message was never sent because the connection to `to` was refused (by `to`, alive
    /// but at its connection limit, or by our own limit): unlike `SendFailed` the peer is not
    /// down, and unlike a lost message `to` surely did not get it. Our token's first
    /// `Handover` refused so counts as refused by its target (`node` module doc, step 4, "A
    /// handover whose connection is refused"); other messages are left to their
    /// own timers. A driver reports only a first attempt, not its retry of a send that may
    /// have arrived.
    Refused { to: NodeId, msg: SpMessage },
    /// The node's own coordinate changed.
    Coordinate(Point),
    /// A timer armed earlier fired (the cluster election's).
    Timer(Timer),
    /// The answer to [`SpEffect::MeasureRtt`]: the round-trip time to `peer` in seconds as a
    /// ping would see it, or `None` when the measurement failed (timeout, unreachable).
    Rtt { peer: NodeId, rtt: Option<f64> },
    /// The smallest RTT the driver has measured from this node to any peer (its pings to its
    /// coordinate neighbours), seconds: the node's own access delay plus a small rest, used
    /// to place tokens on fast access links (`token` module doc). Optional: a node that never
    /// gets it reports nothing.
    NearestRtt { rtt: f64 },
    /// Whether this node's own coordinate is fit to place tokens by (module doc of
    /// `superpeer::node`, step 4, "An unfit coordinate pins the token"): false while the
    /// coordinate has learned too little to predict anything (a node that has just started,
    /// or whose RTT samples a saturated machine spoilt). Optional: a node that is never told
    /// counts as fit (the simulator's Vivaldi phase runs before selection).
    CoordinateFit { fit: bool },
    /// How late this node's own event loop runs, seconds: the worst lateness of its periodic
    /// tick over the last few rounds (a saturated machine makes every message wait in the run
    /// queues of both ends). The cluster election's timeouts add it (module doc of
    /// `superpeer::node`, step 5, "A late loop waits longer"). Optional: a node that is never
    /// told counts as on time (the simulator delivers on time).
    Lateness { secs: f64 },
}

/// Names every input variant once: [`SpInput::kind`] matches exhaustively, so a new variant
/// does not compile until it is named here, and then it is in [`SpInput::KINDS`] (the
/// simulator's test checks that it produces every kind).
macro_rules! input_kinds {
    ($($variant:ident => $name:literal),* $(,)?) => {
        /// The position of each variant in [`SpInput::KINDS`].
        #[allow(dead_code)]
        enum KindIndex {
            $($variant),*
        }
        impl SpInput {
            /// The name of every input variant.
            pub const KINDS: &'static [&'static str] = &[$($name),*];
            /// This input's variant name.
            pub fn kind(&self) -> &'static str {
                Self::KINDS[self.kind_index()]
            }
            /// This input's position in [`SpInput::KINDS`].
            pub fn kind_index(&self) -> usize {
                match self {
                    $(SpInput::$variant { .. } => KindIndex::$variant as usize),*
                }
            }
        }
    };
}

input_kinds! {
    Start => "start",
    Tick => "tick",
    Message => "message",
    LookupResult => "lookup-result",
    PeerUp => "peer-up",
    PeerDown => "peer-down",
    HeadNotServing => "head-not-serving",
    SendFailed => "send-failed",
    Refused => "refused",
    Coordinate => "coordinate",
    Timer => "timer",
    Rtt => "rtt",
    NearestRtt => "nearest-rtt",
    CoordinateFit => "coordinate-fit",
    Lateness => "lateness",
}

/// A candidate's cost as a holder priced it for a move, seconds, term by term
/// ([`super::token::CostParts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MovePrice {
    /// Predicted mean RTT of the members to the candidate.
    pub rtt: f32,
    /// Estimated access excess.
    pub access: f32,
    /// Repulsion potential.
    pub repulsion: f32,
    /// The cost these make.
    pub total: f32,
    /// The candidate's point as the holder priced it (its own, for the holder).
    pub point: Point,
}

/// A move by the force law as its holder priced it ([`SpEffect::TokenMovePriced`]): the token
/// goes to `to`. `here` and `there` are the holder's own view of the cost of keeping the
/// token and of the target, term by term; `radius` (s) the cluster radius the repulsion
/// range scales with, `members` how many members it priced with, `holders` how many other
/// holders the view counts, `reports` how many members' access reports it has, `needed` the
/// fraction the move had to gain, `floor` (s) the gain it had to beat besides (the holder's
/// own drift). Two holders that pass a token back and forth show here
/// what they disagree on (module doc of `superpeer::node`, step 4, "A move's record").
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoveRecord {
    pub to: NodeId,
    pub here: MovePrice,
    pub there: MovePrice,
    pub radius: f32,
    pub members: u16,
    pub holders: u16,
    pub reports: u16,
    pub needed: f32,
    /// The gain, seconds, the move had to beat besides `needed`: the holder's own point's
    /// recent drift (`token` module doc, "The coordinates' own drift").
    pub floor: f32,
}

/// What a super-peer selection node asks its driver to do.
#[derive(Clone, Debug, PartialEq)]
pub enum SpEffect {
    Send {
        to: NodeId,
        msg: SpMessage,
    },
    /// Ask the DHT; answer with `SpInput::LookupResult { query, .. }`.
    Lookup {
        query: u32,
        what: Query,
    },
    /// Publish / withdraw a provider record for `key`.
    Provide {
        key: NodeId,
    },
    Unprovide {
        key: NodeId,
    },
    /// Arm / disarm a timer (the contract of [`crate::core`]).
    SetTimer {
        timer: Timer,
        after: std::time::Duration,
    },
    CancelTimer {
        timer: Timer,
    },
    BecomeSuperPeer,
    StopSuperPeer,
    /// The node now belongs to the cluster of this super peer / head.
    AttachedTo(NodeId),
    Detached,
    TokenAcquired {
        token: TokenId,
        epoch: u32,
    },
    TokenReleased {
        token: TokenId,
        epoch: u32,
    },
    /// A move by the force law was chosen: what it was priced on, for the driver's log
    /// (nothing to do). Boxed: it is rare and large, and effects are queued by the million in
    /// the simulator.
    TokenMovePriced(Box<MoveRecord>),
    /// Measure the round-trip time to `peer` (a ping, or a timed request/response) and answer
    /// with exactly one `SpInput::Rtt { peer, .. }` (`rtt: None` on failure). The node reads
    /// no clock: the driver times it.
    MeasureRtt {
        peer: NodeId,
    },
    /// The lookup `query` came back unusable for `reason` (one of
    /// [`super::lookup::UNUSABLE_REASONS`]): nothing was decided on it, it is asked again after
    /// a back-off (for the driver's counters and log).
    LookupUnusable {
        query: u32,
        reason: &'static str,
    },
    /// Bad input, ignored (logged and counted by the driver). `offence` names what the
    /// sender did when the input is a peer's misbehaviour the driver reports to its
    /// reputation (a cluster election's `Coordinator` the directory contradicts); `None` for
    /// input that is only unusable, or that an honest peer with another view may send.
    Rejected {
        from: NodeId,
        reason: &'static str,
        offence: Option<crate::reputation::Offence>,
    },
}

impl crate::core::TimerEffect for SpEffect {
    type Timer = Timer;
    fn from_cmd(cmd: crate::core::TimerCmd<Timer>) -> Self {
        match cmd {
            crate::core::TimerCmd::Set { timer, after } => SpEffect::SetTimer { timer, after },
            crate::core::TimerCmd::Cancel { timer } => SpEffect::CancelTimer { timer },
        }
    }
    fn as_cmd(&self) -> Option<crate::core::TimerCmd<Timer>> {
        match *self {
            SpEffect::SetTimer { timer, after } => Some(crate::core::TimerCmd::Set { timer, after }),
            SpEffect::CancelTimer { timer } => Some(crate::core::TimerCmd::Cancel { timer }),
            _ => None,
        }
    }
}
