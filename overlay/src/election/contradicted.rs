//! Successors whose `Coordinator` the coordinator they claimed to replace contradicted: the
//! bully family's defence of its `watched` exception against a successor that lies.
//!
//! A follower that does not hear every beat admits a `Coordinator` from one of its named
//! coordinator's successors (`bully::judge_claim`, `watched`): the successor hears every beat
//! and is the one that notices the coordinator's silence. If the coordinator was alive after
//! all, its next beat to everyone reaches the follower (at most `alive_all_every` beats later),
//! which takes it for its announcement: the successor's claim was stale, or a lie. A peer that
//! ranks just below the coordinator could otherwise take every such follower for up to five
//! beats, again after each correction (*ours*; hostile peers, `docs/DESIGN.md`, "Threat
//! model"). So the follower remembers the claimant for [`CONTRADICTED_FOR`], questions its next
//! such claim (holds an election, as for any lower claim over a named coordinator) and reports
//! it (`Effect::Rejected` with `Offence::FalseClaim`, which the node scores). An honest successor that was
//! only early costs one election if the coordinator does die within that time.
//!
//! Bounded: at most [`MAX_CONTRADICTED`] claimants, the oldest giving way.

use crate::id::NodeId;
use crate::time::Time;
use std::time::Duration;

/// How long a contradicted claimant's `Coordinator` is questioned.
pub const CONTRADICTED_FOR: Duration = Duration::from_secs(60);

/// Claimants remembered at once.
pub const MAX_CONTRADICTED: usize = 8;

/// The reason a contradicted claim is reported with.
pub const CONTRADICTED: &str = "Coordinator contradicted by the live coordinator's beat";

/// The coordinator admitted through the `watched` exception, and the claimants contradicted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Contradicted {
    admitted: Option<NodeId>,
    /// (claimant, end of its memory), oldest first.
    entries: Vec<(NodeId, Time)>,
}

impl Contradicted {
    /// The coordinator named from now on: `watched` when admitted through the exception.
    pub fn named(&mut self, id: NodeId, watched: bool) {
        self.admitted = watched.then_some(id);
    }

    /// A beat from above the named coordinator `named` was taken for an announcement at `now`:
    /// if `named` was admitted through the exception, it is remembered, and returned.
    pub fn beat_over(&mut self, named: NodeId, now: Time) -> Option<NodeId> {
        if self.admitted.take() != Some(named) {
            return None;
        }
        self.entries.retain(|(id, until)| *id != named && *until > now);
        if self.entries.len() >= MAX_CONTRADICTED {
            self.entries.remove(0);
        }
        self.entries.push((named, now + CONTRADICTED_FOR));
        Some(named)
    }

    /// Whether `id`'s claim was contradicted within [`CONTRADICTED_FOR`] before `now`.
    pub fn contains(&self, id: &NodeId, now: Time) -> bool {
        self.entries.iter().any(|(x, until)| x == id && *until > now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::{Context, Effect, Election, Input};
    use crate::election::{Algorithm, ElectionConfig, Message};
    use crate::id::Rank;
    use crate::membership::Membership;
    use crate::reputation::Offence;
    use rand::rngs::StdRng;
    use rand::SeedableRng;
    use std::sync::Arc;

    fn at<E: Election>(p: &mut E, t: Time, from: NodeId, msg: Message) -> Vec<Effect> {
        let mut rng = StdRng::seed_from_u64(0);
        let mut fx = Vec::new();
        let mut ctx = Context::new(t, &mut rng, &mut fx);
        p.handle(&mut ctx, Input::Message { from, msg });
        fx
    }

    fn started(fx: &[Effect]) -> bool {
        fx.iter().any(|e| matches!(e, Effect::ElectionStarted))
    }

    /// Eight processes, the coordinator 7 beating its two successors (6, 5) every beat and
    /// everyone every fifth; process 1 hears 7's beats one in five. Successor 6 claims 7's
    /// place while 7 lives: admitted (the exception), contradicted by 7's next beat (6 is
    /// reported), questioned next time (an election), admitted again once the memory ended.
    fn a_successor_that_lies_is_questioned<E: Election>(
        make: impl Fn(Rank, Arc<Membership>, &ElectionConfig) -> E,
        algorithm: Algorithm,
    ) {
        let ranks: Vec<Rank> = (0..8u64).map(|i| Rank::new(0, NodeId::from_u64(i + 1))).collect();
        let group = Arc::new(Membership::new(ranks.iter().copied()));
        let cfg = ElectionConfig { alive_interval_ms: 1_000, ..ElectionConfig::for_algorithm(algorithm) };
        let mut p = make(ranks[1], group, &cfg);
        let (c, liar) = (ranks[7].id, ranks[6].id);
        let t0 = Time::from_millis(1_000);
        at(&mut p, t0, c, Message::Coordinator);
        assert_eq!(p.leader(), Some(c));
        let fx = at(&mut p, t0, liar, Message::Coordinator);
        assert_eq!(p.leader(), Some(liar), "admitted by the exception: {fx:?}");
        assert!(!started(&fx));
        let fx = at(&mut p, t0 + Duration::from_secs(5), c, Message::Alive);
        assert_eq!(p.leader(), Some(c), "the beat from above is its announcement");
        assert!(
            fx.iter()
                .any(|e| matches!(e, Effect::Rejected { from, reason, offence: Some(Offence::FalseClaim) } if *from == liar && *reason == CONTRADICTED)),
            "the claimant is reported: {fx:?}"
        );
        let fx = at(&mut p, t0 + Duration::from_secs(6), liar, Message::Coordinator);
        assert!(started(&fx), "questioned: {fx:?}");
        assert_ne!(p.leader(), Some(liar));
        // 7 answers and announces again; a minute later 6's claim is admitted again.
        at(&mut p, t0 + Duration::from_secs(7), c, Message::Coordinator);
        assert_eq!(p.leader(), Some(c));
        let later = t0 + Duration::from_secs(5) + CONTRADICTED_FOR;
        let fx = at(&mut p, later, liar, Message::Coordinator);
        assert_eq!(p.leader(), Some(liar), "the memory ended: {fx:?}");
    }

    #[test]
    fn a_bully_follower_questions_a_successor_that_lied() {
        a_successor_that_lies_is_questioned(crate::election::bully::Bully::new, Algorithm::Bully);
    }

    #[test]
    fn a_fast_bully_follower_questions_a_successor_that_lied() {
        a_successor_that_lies_is_questioned(crate::election::fast_bully::FastBully::new, Algorithm::FastBully);
    }

    #[test]
    fn only_a_claim_admitted_through_the_exception_is_remembered_and_for_a_while() {
        let (a, b) = (NodeId::from_u64(1), NodeId::from_u64(2));
        let mut c = Contradicted::default();
        c.named(a, false);
        assert_eq!(c.beat_over(a, Time::ZERO), None, "admitted by the ordinary rules");
        c.named(a, true);
        assert_eq!(c.beat_over(b, Time::ZERO), None, "another coordinator is named");
        c.named(a, true);
        assert_eq!(c.beat_over(a, Time::ZERO), Some(a));
        assert!(c.contains(&a, Time::ZERO + (CONTRADICTED_FOR - Duration::from_millis(1))));
        assert!(!c.contains(&a, Time::ZERO + CONTRADICTED_FOR));
        assert_eq!(c.beat_over(a, Time::ZERO), None, "once per admission");
    }

    #[test]
    fn the_memory_is_bounded() {
        let mut c = Contradicted::default();
        for i in 0..(MAX_CONTRADICTED as u64 + 3) {
            c.named(NodeId::from_u64(i), true);
            c.beat_over(NodeId::from_u64(i), Time::ZERO);
        }
        assert_eq!(c.entries.len(), MAX_CONTRADICTED);
        assert!(!c.contains(&NodeId::from_u64(0), Time::ZERO), "the oldest gave way");
        assert!(c.contains(&NodeId::from_u64(MAX_CONTRADICTED as u64 + 2), Time::ZERO));
    }
}
