//! The six leader-election algorithms, one module each, behind one driver interface
//! ([`crate::driver::Election`]).
//!
//! - [`bully`]: Garcia-Molina's bully algorithm (seeds 000, 001, 002).
//! - [`fast_bully`]: the fast bully algorithm (seed 002).
//! - [`ring`]: the list-based ring algorithm, skipping dead successors (seeds 000, 001, 003).
//! - [`chang_roberts`]: Chang and Roberts (seed 003).
//! - [`villadangos`]: Villadangos et al., O(n) election in complete networks (seed 004).
//! - [`echo`]: Vasudevan et al.'s echo election over arbitrary topologies (seed 000).
//!
//! Shared by several: [`down`] (a failure report outlives the messages in flight),
//! [`watch`] (the leader-liveness rule of seed 002, heartbeats and T1, around the ring
//! algorithms and Villadangos; the bully family has its own), [`beats`] (who hears each
//! heartbeat and how long a follower waits, for both families), and [`assumptions`] (what each
//! algorithm assumes of its environment, which the simulator's sweep judges cases against).
//!
//! Every algorithm detects a dead, frozen or cut-off leader: through failure reports
//! (`PeerDown`) and, with heartbeats on, through T1 silence (echo: its probes). A partitioned
//! minority elects its own leader (availability, no quorum), so each side of a partition has
//! one; when it heals the higher leader's heartbeats reach the other side, which elects
//! again, and the sides merge under the best.
//!
//! [`AnyElection`] picks one by [`Algorithm`] (seed 002: "one configuration switch selects the
//! algorithm") and dispatches statically, so the simulator pays no virtual call.

pub mod assumptions;
pub mod beats;
pub mod bully;
pub mod chang_roberts;
pub mod config;
pub mod contradicted;
pub mod down;
pub mod echo;
pub mod fast_bully;
pub mod message;
pub mod ring;
pub mod villadangos;
pub mod watch;

pub use assumptions::Assumptions;
pub use config::{Algorithm, ConfigError, ElectionConfig, LapRule, Orphans, UnknownAlgorithm};
pub use message::{ElectionTag, Message};

use crate::driver::{Context, Election, Input};
use crate::id::{NodeId, Rank};
use crate::membership::Membership;
use std::sync::Arc;
use watch::Watched;

/// Any of the six algorithms, chosen at run time.
#[derive(Debug, Clone)]
pub enum AnyElection {
    Bully(bully::Bully),
    FastBully(fast_bully::FastBully),
    Ring(Watched<ring::Ring>),
    ChangRoberts(Watched<chang_roberts::ChangRoberts>),
    Villadangos(Watched<villadangos::Villadangos>),
    /// Boxed: the echo state is the largest by far, and every process of a simulation holds one.
    Echo(Box<echo::Echo>),
}

impl AnyElection {
    /// A fresh process `me` of `group` running `cfg.algorithm`. For the echo election the
    /// group is not used: neighbours arrive as `Input::PeerUp`.
    pub fn new(me: Rank, group: Arc<Membership>, cfg: &ElectionConfig) -> AnyElection {
        match cfg.algorithm {
            Algorithm::Bully => AnyElection::Bully(bully::Bully::new(me, group, cfg)),
            Algorithm::FastBully => AnyElection::FastBully(fast_bully::FastBully::new(me, group, cfg)),
            Algorithm::Ring => AnyElection::Ring(Watched::new(ring::Ring::new(me, group.clone(), cfg), group, cfg)),
            Algorithm::ChangRoberts => AnyElection::ChangRoberts(Watched::new(
                chang_roberts::ChangRoberts::new(me, group.clone(), cfg),
                group,
                cfg,
            )),
            Algorithm::Villadangos => AnyElection::Villadangos(Watched::new(
                villadangos::Villadangos::new(me, group.clone(), cfg),
                group,
                cfg,
            )),
            Algorithm::Echo => AnyElection::Echo(Box::new(echo::Echo::new(me, group, cfg))),
        }
    }

    pub fn algorithm(&self) -> Algorithm {
        match self {
            AnyElection::Bully(_) => Algorithm::Bully,
            AnyElection::FastBully(_) => Algorithm::FastBully,
            AnyElection::Ring(_) => Algorithm::Ring,
            AnyElection::ChangRoberts(_) => Algorithm::ChangRoberts,
            AnyElection::Villadangos(_) => Algorithm::Villadangos,
            AnyElection::Echo(_) => Algorithm::Echo,
        }
    }
}

macro_rules! dispatch {
    ($self:ident, $e:ident => $body:expr) => {
        match $self {
            AnyElection::Bully($e) => $body,
            AnyElection::FastBully($e) => $body,
            AnyElection::Ring($e) => $body,
            AnyElection::ChangRoberts($e) => $body,
            AnyElection::Villadangos($e) => $body,
            AnyElection::Echo($e) => $body,
        }
    };
}

impl Election for AnyElection {
    fn id(&self) -> NodeId {
        dispatch!(self, e => e.id())
    }
    fn handle(&mut self, ctx: &mut Context<'_>, input: Input) {
        dispatch!(self, e => e.handle(ctx, input))
    }
    fn leader(&self) -> Option<NodeId> {
        dispatch!(self, e => e.leader())
    }
    fn state(&self) -> &'static str {
        dispatch!(self, e => e.state())
    }
    fn in_election(&self) -> bool {
        dispatch!(self, e => e.in_election())
    }
}
