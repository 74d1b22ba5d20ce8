//! Leader liveness for the algorithms that have none of their own (the list ring,
//! Chang-Roberts, Villadangos): seed 002's heartbeat, wrapped around the algorithm.
//!
//! With heartbeats on (`cfg.alive_interval()`), a process that names itself leader sends
//! `Alive` to every member not reported down, each alive interval (also while its own
//! announcement lap is still out). A process that names another leader and is not in an
//! election arms T1 (alive interval x error factor, seed 002) and re-arms it on every message
//! from that leader. When T1 expires the leader is silent (crashed unreported, frozen, or cut
//! off): the algorithm holds a new election that skips it ([`LeaderSilence`]). Silence is not
//! a failure report: the skip lasts that one election, so a leader that was only frozen takes
//! part in the next one.
//!
//! A process that names no leader outside an election (it was never reached by one, or a
//! partition cut it off before the result came) holds an election after T1 too.
//!
//! `Alive` from a process this one does not follow, ranked above the leader it names (or
//! when it names none), means two leaders can see each other: after a heal, a thaw, or an
//! announcement that was lost. Outside an election the process then holds one (`Start`),
//! which the ring algorithms run over everyone reachable, so the components merge under the
//! best leader. `Alive` from a lower process is left alone: that process hears the higher
//! leader's `Alive` itself. Convergence after a heal therefore takes one alive interval, the
//! detector's delay, and one election.
//!
//! A partitioned minority elects its own leader (each side's T1 expires, or its
//! `PeerDown` reports arrive): the algorithms here favour availability, like Vasudevan et
//! al.'s echo election, and the heal merges the sides as above.
//!
//! The wrapped algorithm never sees `Alive`, T1 or `Heartbeat`; everything else passes
//! through unchanged. With heartbeats off the wrapper only forwards.

use crate::driver::{Context, Election, Input, Timer};
use crate::election::down::Down;
use crate::election::{ElectionConfig, Message};
use crate::id::NodeId;
use crate::membership::Membership;
use std::sync::Arc;
use std::time::Duration;

/// How an algorithm reacts to its leader's silence.
pub trait LeaderSilence: Election {
    /// The leader this process names (`leader`) was silent for T1: hold a new election that
    /// skips it, for that election only.
    fn leader_silent(&mut self, ctx: &mut Context<'_>, leader: NodeId);
}

/// What T1 is measuring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watch {
    /// Nothing (this process leads, is in an election, or heartbeats are off).
    Nothing,
    /// The silence of the leader this process follows.
    Leader(NodeId),
    /// How long this process has named no leader, outside any election.
    Orphan,
}

/// An election wrapped with the leader-liveness rule.
#[derive(Debug, Clone)]
pub struct Watched<E> {
    inner: E,
    me: NodeId,
    group: Arc<Membership>,
    /// The `Alive` period and T1; `None` when heartbeats are off.
    timing: Option<(Duration, Duration)>,
    /// What T1 is measuring.
    watch: Watch,
    /// This process sends `Alive` (it leads, and no election runs).
    beating: bool,
    /// Members the driver reported down (they get no `Alive`).
    down: Down,
}

impl<E: LeaderSilence> Watched<E> {
    pub fn new(inner: E, group: Arc<Membership>, cfg: &ElectionConfig) -> Self {
        let timing = cfg.alive_interval().zip(cfg.t1());
        Watched { me: inner.id(), inner, group, timing, watch: Watch::Nothing, beating: false, down: Down::default() }
    }

    /// The wrapped algorithm.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    fn rank_of(&self, id: &NodeId) -> Option<crate::id::Rank> {
        self.group.rank_of(id)
    }

    fn on_alive(&mut self, ctx: &mut Context<'_>, from: NodeId) {
        if from == self.me {
            ctx.reject(from, "Alive claims to come from this process");
            return;
        }
        let Some(sender) = self.rank_of(&from) else {
            ctx.reject(from, "Alive from a process outside the group");
            return;
        };
        if self.watch == Watch::Leader(from) {
            if let Some((_, t1)) = self.timing {
                ctx.set_timer(Timer::T1, t1);
            }
            return;
        }
        if self.inner.in_election() || self.inner.leader() == Some(from) {
            return;
        }
        let above = match self.inner.leader() {
            None => true,
            Some(l) => self.rank_of(&l).is_none_or(|l| sender > l),
        };
        if above {
            self.inner.handle(ctx, Input::Start);
        }
    }

    /// Arm or disarm the heartbeat and T1 after the algorithm handled an input.
    fn sync(&mut self, ctx: &mut Context<'_>) {
        let Some((alive, t1)) = self.timing else { return };
        let busy = self.inner.in_election();
        let leader = self.inner.leader();
        let leads = leader == Some(self.me);
        if leads != self.beating {
            self.beating = leads;
            if leads {
                ctx.set_timer(Timer::Heartbeat, alive);
            } else {
                ctx.cancel_timer(Timer::Heartbeat);
            }
        }
        let watch = match leader {
            _ if busy => Watch::Nothing,
            Some(l) if l == self.me => Watch::Nothing,
            Some(l) => Watch::Leader(l),
            None => Watch::Orphan,
        };
        if watch != self.watch {
            self.watch = watch;
            if watch == Watch::Nothing {
                ctx.cancel_timer(Timer::T1);
            } else {
                ctx.set_timer(Timer::T1, t1);
            }
        }
    }

    fn beat(&mut self, ctx: &mut Context<'_>) {
        let Some((alive, _)) = self.timing else { return };
        if !self.beating {
            return;
        }
        for r in self.group.ranks() {
            if r.id != self.me && !self.down.contains(&r.id) {
                ctx.send(r.id, Message::Alive);
            }
        }
        ctx.set_timer(Timer::Heartbeat, alive);
    }
}

impl<E> std::ops::Deref for Watched<E> {
    type Target = E;
    fn deref(&self) -> &E {
        &self.inner
    }
}

impl<E: LeaderSilence> Election for Watched<E> {
    fn id(&self) -> NodeId {
        self.me
    }

    fn handle(&mut self, ctx: &mut Context<'_>, input: Input) {
        match input {
            Input::Message { from, msg: Message::Alive } => self.on_alive(ctx, from),
            Input::Timer(Timer::T1) => match std::mem::replace(&mut self.watch, Watch::Nothing) {
                Watch::Leader(l) => self.inner.leader_silent(ctx, l),
                // No leader for T1 and no election: hold one.
                Watch::Orphan => self.inner.handle(ctx, Input::Start),
                Watch::Nothing => {}
            },
            Input::Timer(Timer::Heartbeat) => self.beat(ctx),
            Input::Message { from, msg } => {
                if self.watch == Watch::Leader(from) {
                    if let Some((_, t1)) = self.timing {
                        ctx.set_timer(Timer::T1, t1);
                    }
                }
                self.inner.handle(ctx, Input::Message { from, msg });
            }
            Input::PeerDown(p) => {
                if p != self.me {
                    self.down.insert(&self.group, p);
                }
                self.inner.handle(ctx, Input::PeerDown(p));
            }
            Input::PeerUp(p) => {
                self.down.remove(&p);
                self.inner.handle(ctx, Input::PeerUp(p));
            }
            Input::Membership(g) => {
                self.group = g.clone();
                self.down.retain_members(&self.group);
                self.inner.handle(ctx, Input::Membership(g));
            }
            Input::Recover => {
                self.down.clear();
                self.inner.handle(ctx, Input::Recover);
            }
            other => self.inner.handle(ctx, other),
        }
        self.sync(ctx);
    }

    fn leader(&self) -> Option<NodeId> {
        self.inner.leader()
    }

    fn state(&self) -> &'static str {
        self.inner.state()
    }

    fn in_election(&self) -> bool {
        self.inner.in_election()
    }
}
