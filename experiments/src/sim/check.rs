//! The safety and liveness oracle, applied at the end of a run.
//!
//! Seed 003 defines correctness: *safety*, a participant's `elected` is unset or is the
//! non-crashed process with the largest id; *liveness*, every process eventually sets
//! `elected` or crashes. The check here, at quiescence:
//! - the live processes are split into *components*: processes that can still talk to each
//!   other. For the complete-graph algorithms that is the side of a partition (one component
//!   without partitions); for the echo election it is a connected component of the topology
//!   restricted to live processes and uncut edges (Vasudevan et al. elect one leader per
//!   connected partition);
//! - the expected leader of a component is its live process of highest rank (for echo the
//!   rank's priority is the node's capacity, so this is "the best capacity");
//! - **safety**: no live process names a leader other than its component's expected one;
//! - **agreement**: all live processes of a component name the same leader (implied by
//!   safety when everyone decided, reported separately for undecided runs);
//! - **liveness**: the run came to rest and every live process names a leader. At rest means
//!   quiescence, or, with heartbeats (which never stop), *settled*: nothing changed for the
//!   settle window and no live process is still in an election.

use crate::sim::engine::{RunEnd, Sim};
use overlay::{Election, NodeId};
use serde::Serialize;

/// The verdict on one finished run.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub live: usize,
    pub components: usize,
    /// Live processes naming no leader.
    pub undecided: usize,
    /// Live processes naming a leader other than their component's best.
    pub wrong: usize,
    /// Live processes still `in_election()` at the end (reported, not judged).
    pub still_in_election: usize,
    /// The run came to rest (quiescent, or settled with no election unfinished).
    pub quiescent: bool,
    pub safety: bool,
    pub agreement: bool,
    pub liveness: bool,
    /// The expected leader of each component, highest first.
    #[serde(serialize_with = "ser_ids")]
    pub expected: Vec<NodeId>,
    /// A human description of the first problems found (empty when all held).
    pub problems: Vec<String>,
}

fn ser_ids<S: serde::Serializer>(v: &[NodeId], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|id| id.to_string()))
}

impl Verdict {
    /// Safety, agreement and liveness all held.
    pub fn ok(&self) -> bool {
        self.safety && self.agreement && self.liveness
    }
}

/// Component label of every process (`u32::MAX` for crashed ones).
pub fn components(sim: &Sim) -> Vec<u32> {
    let n = sim.len() as u32;
    match sim.topology() {
        Some(t) => t.components(|i| sim.is_alive(i), |a, b| sim.reachable(a, b)),
        None => (0..n).map(|i| if sim.is_alive(i) { sim.side(i) as u32 } else { u32::MAX }).collect(),
    }
}

/// Judge the run that ended with `end`.
pub fn check(sim: &Sim, end: RunEnd) -> Verdict {
    let n = sim.len() as u32;
    let label = components(sim);
    let comps = label.iter().filter(|&&c| c != u32::MAX).max().map_or(0, |&m| m as usize + 1);
    let mut best: Vec<Option<u32>> = vec![None; comps];
    for i in 0..n {
        let c = label[i as usize];
        if c == u32::MAX {
            continue;
        }
        let b = &mut best[c as usize];
        if b.is_none_or(|j| sim.rank(i) > sim.rank(j)) {
            *b = Some(i);
        }
    }
    let mut named: Vec<Option<Option<NodeId>>> = vec![None; comps];
    let (mut live, mut undecided, mut wrong, mut still) = (0, 0, 0, 0);
    let mut agreement = true;
    let mut problems = Vec::new();
    for i in 0..n {
        let c = label[i as usize];
        let Some(p) = sim.process(i) else { continue };
        live += 1;
        if p.in_election() {
            still += 1;
        }
        let leader = p.leader();
        let expect = best[c as usize].map(|j| sim.rank(j).id);
        match leader {
            None => {
                undecided += 1;
                if problems.len() < 5 {
                    problems.push(format!(
                        "process {i} ({}) decided nothing (state {})",
                        sim.rank(i).id.short(),
                        p.state()
                    ));
                }
            }
            Some(l) if Some(l) != expect => {
                wrong += 1;
                if problems.len() < 5 {
                    problems.push(format!(
                        "process {i} ({}) names {} but the best live process of its component is {}",
                        sim.rank(i).id.short(),
                        l.short(),
                        expect.map_or("none".into(), |e| e.short())
                    ));
                }
            }
            Some(_) => {}
        }
        match &named[c as usize] {
            None => named[c as usize] = Some(leader),
            Some(prev) if *prev != leader => agreement = false,
            Some(_) => {}
        }
    }
    // A settled run (heartbeats on) must also have no election left unfinished.
    let quiescent = end == RunEnd::Quiescent || (end == RunEnd::Settled && still == 0);
    if !quiescent {
        problems.push(format!("run did not come to rest ({end:?}, {still} still in an election)"));
    }
    let mut expected: Vec<NodeId> = best.iter().flatten().map(|&j| sim.rank(j).id).collect();
    expected.sort_unstable_by(|a, b| b.cmp(a));
    Verdict {
        live,
        components: comps,
        undecided,
        wrong,
        still_in_election: still,
        quiescent,
        safety: wrong == 0,
        agreement,
        liveness: quiescent && undecided == 0,
        expected,
        problems,
    }
}
