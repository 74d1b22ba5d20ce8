//! The one driver interface shared by every election.
//!
//! Modelled on rust-libp2p's `NetworkBehaviour` poll model and on quinn-proto / raft-rs
//! `Ready`: the caller feeds an [`Input`] together with a [`Context`] that carries the current
//! time, a seeded RNG and an effect buffer; the state machine appends [`Effect`]s; the caller
//! carries them out (sends over libp2p or enqueues in the simulator, arms tokio or virtual
//! timers, reports the leader).
//!
//! Timer semantics, which every driver implements: arming a [`Timer`] replaces any armed timer
//! of the same value; cancelling an unarmed timer is a no-op; a timer fires at most once per
//! arming; after a crash (the state machine is dropped) none of its timers fire.

use crate::election::Message;
use crate::id::NodeId;
use crate::membership::Membership;
use crate::reputation::Offence;
use crate::time::Time;
use rand::RngCore;
use std::sync::Arc;
use std::time::Duration;

/// What a state machine reacts to.
#[derive(Debug, Clone)]
pub enum Input {
    /// The process starts (start-up, or the driver decided an election is needed, for example
    /// because the application saw the coordinator stop answering). Bully-family algorithms
    /// hold an election; ring algorithms initiate one.
    Start,
    /// The process has recovered from a crash with fresh state (seed 002: "a recovering
    /// process holds an election"; the fast bully sends `IamUp`).
    Recover,
    /// A message from a peer.
    Message { from: NodeId, msg: Message },
    /// A timer armed earlier fired.
    Timer(Timer),
    /// The transport reports that a peer became reachable (a new neighbour, for the echo
    /// election; for the others a peer reported down that is back: recovered, or across a
    /// healed partition).
    PeerUp(NodeId),
    /// The transport or failure detector reports a peer unreachable. The report stands until
    /// `PeerUp`: messages the peer sent before it crashed may still arrive after it.
    PeerDown(NodeId),
    /// A message could not be delivered (connection refused, request timed out). Ring
    /// algorithms skip the dead successor and resend to the next one.
    SendFailed { to: NodeId, msg: Message },
    /// The known group changed (a node learned of new members through the DHT).
    Membership(Arc<Membership>),
}

/// Timers an election may arm. The names follow seed 002.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Timer {
    /// T1: silence from the coordinator (alive interval x error factor).
    T1,
    /// T2: waiting for `Answer` (or `View`, for the fast bully's recovery).
    T2,
    /// T3: waiting for `Coordinator` after an `Answer`.
    T3,
    /// T4: fast bully, the answering side waiting for `Nomination` or `Coordinator`.
    T4,
    /// The coordinator's period for sending `Alive`.
    Heartbeat,
    /// A ring election lap that never came back.
    Lap,
    /// An algorithm-specific timer.
    Custom(u32),
}

/// What a state machine asks its driver to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Send `msg` to `to`.
    Send { to: NodeId, msg: Message },
    /// Arm `timer` to fire `after` from now (replacing an armed timer of the same value).
    SetTimer { timer: Timer, after: Duration },
    /// Disarm `timer`.
    CancelTimer { timer: Timer },
    /// This process now names `leader` as the coordinator (it may be itself).
    Leader(NodeId),
    /// This process started (or restarted) an election.
    ElectionStarted,
    /// A message was refused as invalid for this algorithm or state (bad input from the
    /// network). The driver logs it and counts it; the state machine's state is unchanged.
    /// `offence` is set when the message was a lie of its sender (a claim the protocol's own
    /// evidence contradicts), which the driver reports to its peer reputation.
    Rejected { from: NodeId, reason: &'static str, offence: Option<Offence> },
}

/// Everything a state machine may use while handling one input: the time, a seeded RNG and
/// the effect buffer.
pub struct Context<'a> {
    pub now: Time,
    pub rng: &'a mut dyn RngCore,
    effects: &'a mut Vec<Effect>,
}

impl<'a> Context<'a> {
    pub fn new(now: Time, rng: &'a mut dyn RngCore, effects: &'a mut Vec<Effect>) -> Self {
        Context { now, rng, effects }
    }
    pub fn send(&mut self, to: NodeId, msg: Message) {
        self.effects.push(Effect::Send { to, msg });
    }
    pub fn set_timer(&mut self, timer: Timer, after: Duration) {
        self.effects.push(Effect::SetTimer { timer, after });
    }
    pub fn cancel_timer(&mut self, timer: Timer) {
        self.effects.push(Effect::CancelTimer { timer });
    }
    pub fn decide(&mut self, leader: NodeId) {
        self.effects.push(Effect::Leader(leader));
    }
    pub fn started(&mut self) {
        self.effects.push(Effect::ElectionStarted);
    }
    pub fn reject(&mut self, from: NodeId, reason: &'static str) {
        self.push_rejected(from, reason, None);
    }
    /// Rejects a message that was a lie of `from` ([`Offence::FalseClaim`]).
    pub fn reject_lie(&mut self, from: NodeId, reason: &'static str) {
        self.push_rejected(from, reason, Some(Offence::FalseClaim));
    }
    /// Pushes a rejection, with the offence it was if any (also what a wrapper forwards).
    pub fn push_rejected(&mut self, from: NodeId, reason: &'static str, offence: Option<Offence>) {
        self.effects.push(Effect::Rejected { from, reason, offence });
    }
    /// Effects pushed so far during this input.
    pub fn effects(&self) -> &[Effect] {
        self.effects
    }
}

/// A leader-election state machine.
pub trait Election {
    /// This process's id.
    fn id(&self) -> NodeId;
    /// React to one input, appending effects to `ctx`.
    fn handle(&mut self, ctx: &mut Context<'_>, input: Input);
    /// The leader this process currently names, if it has decided.
    fn leader(&self) -> Option<NodeId>;
    /// A short name of the current state, in the seeds' vocabulary (`Passive`, `Candidate`,
    /// `Dummy`, `Waiting`, `Leader`, ...), for logs and status output.
    fn state(&self) -> &'static str;
    /// True while this process takes part in an unfinished election.
    fn in_election(&self) -> bool;
}
