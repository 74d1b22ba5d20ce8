//! Off-by-default churn diagnostic for the super-peer simulation (`PEERAGE_SP_CHURN=1`):
//! every round, the changes that the convergence rule
//! counts (`AttachedTo` effects and token moves) split by their KIND, printed to stderr as
//! one line per round, so that one can see which kind keeps a run above the rule's N/1000.
//!
//! The simulator ([`super::protocol`]) calls [`Churn::before`] before it hands a node an
//! input and [`Churn::effect`] for each effect that input produced. Kinds:
//! - `attach:<why>`: an unattached node attached; `<why>` is what left it unattached: `start`
//!   (never attached), `former-head` (it handed its token on or stepped down), or the input
//!   that produced its last `Detached` (`refuse-not-head`, `step-down`, `peer-down`, ...).
//! - `switch:<trigger>`: an attached node moved to another head (an `Accept` from it);
//!   `<trigger>` is the input during which it sent the `Attach` (`tick`, `rtt` = a new
//!   measurement, `refuse-full` = the next head after a refusal, ...). Also counted:
//!   `switch-true-worse` (the new head is not nearer by the model's TRUE RTT),
//!   `switch-true-gain<10%` (nearer, but by less than the 10 % a switch asks for) and
//!   `switch-again<10` (the node's previous attachment change was fewer than 10 rounds ago),
//!   `switch-to-full` (the new head is within 2 of the cap after the switch) and
//!   `switch-from-small` (the old head has fewer than 20 members).
//! - `same:<trigger>`: an `Accept` from the head the node is already attached to (a member
//!   whose head's view did not list it, or a silent head asked again): no change of head.
//! - `moved`: a member followed its token's `Moved` to the new holder; `moved-farther` counts
//!   those whose new head is not nearer by the TRUE RTT.
//! - `token-move` (also split: `token-move-promoted` by a promoted holder, and
//!   `token-move-epoch<E>` by the token's epoch in fives, 20 = 20 or more, and
//!   `token-move-members<M>` by the cluster's size: 0-3, 4 = 4-19, 20 = 20-99, 100 = 100+),
//!   `token-move-back` (the new holder is the node that handed this
//!   token on last: a move undone) and `token-move-revisit` (it is one of the token's last
//!   [`GIVERS`] givers), `promote`, and
//!   `refuse-full` (`Refuse { full: true }` messages sent).
//! - Split offers (what keeps changing at 10^5 with split offers
//!   on): `split-offer` (`Split` sent), `drain-start` (a holder that got an offer began to
//!   drain: its first `StepDownTo`s), `step-down-to` (`StepDownTo` messages sent),
//!   `jump-sent` (a split jump's `Handover` sent, re-sends included) and
//!   `token-move-jump` (a token that left by a split jump; also counted in `token-move`),
//!   `token-move-jump-promoted` (the jumping holder was a super peer); `handover-refuse`
//!   (`HandoverRefuse` sent: a move or jump refused by its target).
//!
//! It costs a few bytes per node and nothing when off; the simulated run is the same either
//! way (it only reads node state).

use overlay::superpeer::{SpEffect, SpInput, SpMessage, SuperPeerNode};
use overlay::NodeId;
use std::collections::BTreeMap;

/// The givers a token's `token-move-revisit` looks back on.
const GIVERS: usize = 4;

/// The diagnostic's state (one per run).
pub struct Churn {
    /// Per slot: what left the node unattached last (see the module doc).
    unattached_by: Vec<&'static str>,
    /// Per slot: the input during which the node last sent an `Attach`.
    attach_trigger: Vec<&'static str>,
    /// Per slot: the round of its last attachment change (0 = none).
    last_change: Vec<u32>,
    /// The node's state before the input being handled: attached head, head or not, input.
    pre: (Option<NodeId>, bool, &'static str),
    /// Whether the node was a promoted super peer, and its token's epoch, before the input.
    pre_super: bool,
    pre_epoch: u32,
    pre_members: usize,
    /// Per slot: the node's last `Handover` was a split jump's.
    jumping: Vec<bool>,
    /// The node was in a split jump (its drain) before the input.
    pre_jumping: bool,
    /// The input being handled already counted a `drain-start`.
    drain_counted: bool,
    /// Per token: its last givers, newest last (at most [`GIVERS`]).
    givers: BTreeMap<u64, Vec<NodeId>>,
    round: u32,
    /// The cluster cap.
    cap: usize,
    counts: BTreeMap<String, u64>,
}

/// A short name for an input (message inputs by their message kind).
pub fn input_kind(input: &SpInput) -> &'static str {
    match input {
        SpInput::Message { msg, .. } => msg.kind(),
        other => other.kind(),
    }
}

impl Churn {
    /// On when `PEERAGE_SP_CHURN` is set.
    pub fn from_env(n: usize, cap: usize) -> Option<Box<Churn>> {
        std::env::var_os("PEERAGE_SP_CHURN").map(|_| {
            Box::new(Churn {
                unattached_by: vec!["start"; n],
                attach_trigger: vec!["-"; n],
                last_change: vec![0; n],
                jumping: vec![false; n],
                pre_jumping: false,
                drain_counted: false,
                pre: (None, false, ""),
                pre_super: false,
                pre_epoch: 0,
                pre_members: 0,
                cap,
                round: 1,
                counts: BTreeMap::new(),
                givers: BTreeMap::new(),
            })
        })
    }

    fn add(&mut self, kind: impl Into<String>) {
        *self.counts.entry(kind.into()).or_default() += 1;
    }

    /// Before node `slot` handles `input`: its attached head and whether it is a head.
    pub fn before(&mut self, n: &SuperPeerNode, input: &SpInput) {
        self.pre = (n.attached_to(), n.is_head(), input_kind(input));
        self.pre_super = n.is_super_peer();
        self.pre_epoch = n.token().map_or(0, |t| t.1);
        self.pre_members = n.members().len();
        self.pre_jumping = n.is_jumping();
        self.drain_counted = false;
    }

    /// After the input: `head_now` tells whether the node is still a head.
    pub fn after(&mut self, slot: u32, head_now: bool) {
        if self.pre.1 && !head_now {
            self.unattached_by[slot as usize] = "former-head";
        }
        if self.pre.2 == "refuse-full" && self.pre.0.is_none() && self.unattached_by[slot as usize] == "step-down-to" {
            // A node sent to a head with room by a jumping holder was refused there (or later).
            self.add("step-down-to-refused");
        }
        if self.pre.2 == "refuse-full" && self.pre.0.is_some() && self.attach_trigger[slot as usize] == "step-down-to" {
            // A member draining from a jumping holder was refused by the head it was sent to.
            self.add("drain-refused");
        }
    }

    /// One effect of the input. `true_rtt(a, b)` is the model's TRUE RTT in ms between two
    /// nodes (None if either is not a node of the world); `me` is the node's id.
    pub fn effect(
        &mut self,
        slot: u32,
        me: NodeId,
        e: &SpEffect,
        true_rtt: impl Fn(NodeId, NodeId) -> Option<f64>,
        size: impl Fn(NodeId) -> Option<usize>,
    ) {
        let s = slot as usize;
        let (pre_head, _, input) = self.pre;
        match e {
            SpEffect::Send { msg: SpMessage::Attach { .. }, .. } => self.attach_trigger[s] = input,
            SpEffect::Send { msg: SpMessage::Refuse { full: true }, .. } => self.add("refuse-full"),
            SpEffect::Send { msg: SpMessage::Split { .. }, .. } => self.add("split-offer"),
            SpEffect::Send { msg: SpMessage::HandoverRefuse { .. }, .. } => self.add("handover-refuse"),
            SpEffect::Send { msg: SpMessage::StepDownTo { .. }, .. } => {
                self.add("step-down-to");
                if input == "split" && !self.drain_counted {
                    self.drain_counted = true;
                    self.add("drain-start");
                }
            }
            SpEffect::Send { to, msg: SpMessage::Handover { token, .. } } => {
                let givers = self.givers.entry(token.0).or_default();
                let (back, revisit) = (givers.last() == Some(to), givers.contains(to));
                givers.push(me);
                if givers.len() > GIVERS {
                    givers.remove(0);
                }
                if back {
                    self.add("token-move-back");
                }
                if revisit {
                    self.add("token-move-revisit");
                }
                // A drain's last round, or an offer taken by a holder without members.
                let jump = self.pre_jumping || input == "split";
                self.jumping[s] = jump;
                if jump {
                    self.add("jump-sent");
                }
            }
            SpEffect::Detached => self.unattached_by[s] = input,
            SpEffect::TokenReleased { .. } => {
                self.add("token-move");
                if self.pre_super {
                    self.add("token-move-promoted");
                }
                if std::mem::take(&mut self.jumping[s]) {
                    self.add("token-move-jump");
                    if self.pre_super {
                        self.add("token-move-jump-promoted");
                    }
                }
                self.add(format!("token-move-epoch{}", self.pre_epoch.min(20) / 5 * 5));
                let m = self.pre_members;
                let b = if m < 4 {
                    m
                } else if m < 20 {
                    4
                } else if m < 100 {
                    20
                } else {
                    100
                };
                self.add(format!("token-move-members{b}"));
            }
            SpEffect::BecomeSuperPeer => self.add("promote"),
            SpEffect::AttachedTo(to) => {
                let again = self.last_change[s] > 0 && self.round.saturating_sub(self.last_change[s]) < 10;
                let ratio = |old: NodeId| match (true_rtt(me, old), true_rtt(me, *to)) {
                    (Some(a), Some(b)) if a > 0.0 => Some(b / a),
                    _ => None,
                };
                let farther = |old: NodeId| ratio(old).is_some_and(|r| r >= 1.0);
                match pre_head {
                    None => {
                        let why = self.unattached_by[s];
                        self.add(format!("attach:{why}"));
                        self.last_change[s] = self.round;
                    }
                    Some(old) if old == *to => {
                        let t = self.attach_trigger[s];
                        self.add(format!("same:{t}"));
                    }
                    Some(old) if input == "moved" => {
                        self.add("moved");
                        if farther(old) {
                            self.add("moved-farther");
                        }
                        self.last_change[s] = self.round;
                    }
                    Some(old) => {
                        let t = self.attach_trigger[s];
                        self.add(format!("switch:{t}"));
                        if farther(old) {
                            self.add("switch-true-worse");
                        } else if ratio(old).is_some_and(|r| r > 0.9) {
                            self.add("switch-true-gain<10%");
                        }
                        if again {
                            self.add("switch-again<10");
                        }
                        if size(*to).is_some_and(|n| n + 2 >= self.cap) {
                            self.add("switch-to-full");
                        }
                        if size(old).is_some_and(|n| n < 20) {
                            self.add("switch-from-small");
                        }
                        self.last_change[s] = self.round;
                    }
                }
            }
            _ => {}
        }
    }

    /// Counts, as `unattached-now:<why>`, the nodes (slots) unattached at the end of a round
    /// by what left them unattached (what split jumps leave behind).
    pub fn unattached_now(&mut self, slots: impl Iterator<Item = u32>) {
        for s in slots {
            let why = self.unattached_by[s as usize];
            self.add(format!("unattached-now:{why}"));
        }
    }

    /// Ends round `round`: prints its counts (one line) and starts the next.
    pub fn end_round(&mut self, round: u32) {
        let parts: Vec<String> = self.counts.iter().map(|(k, v)| format!("{k}={v}")).collect();
        eprintln!("CHURN round {round}: {}", parts.join(" "));
        self.counts.clear();
        self.round = round + 1;
    }
}
