//! What a DHT lookup's answer is worth: the acceptance rules a node applies before it decides
//! anything on a lookup.
//!
//! A Kademlia lookup returns the K closest peers *that answered it* (K = 20 in libp2p). On a
//! loaded or partitioned network some asked peers time out or refuse the connection: the
//! answer comes back short, or the whole lookup times out. A size estimate made from a short
//! answer collapses (a node that sees 5 peers where there are 200 wants a handful of super
//! peers) and a claim made on one may be one of two. So the driver reports every lookup with
//! its statistics ([`LookupReport`]) and the node judges it ([`judge`]):
//! - **Closest-peers and sample lookups** are unusable when they timed out, or came back with
//!   fewer than [`CLOSEST_K`] peers while some asked peers failed, unless at least a minimum
//!   answered: [`MIN_SAMPLE_PEERS`] for a size sample (a thinned uniform sample stays unbiased,
//!   `estimate` module doc, "Thinning"), [`CLAIM_MIN_PEERS`] for a slot claim (the nodes nearest
//!   a slot's key are its claimants, they fill each other's connection slots, and nearly every
//!   claim lookup came back short; the slot check settles a claim made on a short answer).
//! - A **sample** lookup is also unusable when fewer than [`MIN_ANSWERED`] of the asked peers
//!   answered: it says too little about N.
//! - **Incomplete** (*ours*): a closest-peers or sample answer that names fewer peers than the
//!   node already knows of (its neighbours, or the peers its routing table holds as the driver
//!   reports them in [`LookupReport::known`], up to the kind's minimum) is unusable even when
//!   no asked peer failed. In a DHT that works, the `K` peers closest to any key number
//!   `min(K, N - 1)`, at least as many as the live peers the node knows. An answer that asked
//!   nobody (a lookup over an empty routing table) reports no failure and would otherwise be
//!   taken for a network of one:
//!   in a 2,000-node swarm 342 nodes decided on such answers that they wanted 1 super peer and
//!   310 of them claimed the one slot, each "closest" to its key among nobody. Neighbours
//!   alone were not enough: a node has none until it knows peers' positions, and in the same
//!   swarm 429 nodes still decided on answers of fewer than two peers, though the driver
//!   starts a node's selection only once its routing table holds a peer. A node that knows no peer still decides on an empty answer: it is alone.
//! - A **provider** lookup is unusable when it timed out having found nobody.
//!
//! An unusable lookup decides nothing: the node asks again after a back-off (`node` module doc,
//! step 1). A complete answer (the simulator's DHT oracle) is always usable.

use super::estimate::{MIN_ANSWERED, MIN_SAMPLE_PEERS};
use super::message::{PeerInfo, Query};
use crate::id::NodeId;

/// Kademlia's replication factor: a closest-peers lookup returns at most this many peers.
pub const CLOSEST_K: usize = 20;

/// A slot claim's closest-peers answer is used when at least this many peers answered, even if
/// others failed.
pub const CLAIM_MIN_PEERS: usize = 4;

/// One lookup's answer with its statistics, as the DHT reports it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LookupReport {
    /// For a [`Query::Sample`]: the uniform key the lookup ran for, when the driver looked up
    /// another than the one drawn (kad cannot aim at an arbitrary key cheaply).
    pub key: Option<NodeId>,
    /// The peers found: the closest ones, or the providers whose position the driver learned.
    pub peers: Vec<PeerInfo>,
    /// How many peers (or providers) the lookup found, before the driver dropped any.
    pub found: u32,
    /// The lookup ran out of time.
    pub timed_out: bool,
    /// Asked peers that answered, and that failed to (kad's query statistics; both zero when
    /// unknown).
    pub answered: u32,
    pub failed: u32,
    /// Peers the node's DHT routing table held when the lookup ended (0 when not told): an
    /// answer naming fewer is incomplete (module doc).
    pub known: u32,
}

impl LookupReport {
    /// A complete, timely answer in which every asked peer answered.
    pub fn complete(peers: Vec<PeerInfo>) -> LookupReport {
        LookupReport { found: peers.len() as u32, peers, ..LookupReport::default() }
    }

    /// The share of the asked peers that answered (1 when none is known to have failed).
    pub fn answered_share(&self) -> f64 {
        let asked = self.answered + self.failed;
        if asked == 0 {
            1.0
        } else {
            f64::from(self.answered) / f64::from(asked)
        }
    }
}

/// The kind of lookup a report answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Sample,
    Claim,
    Providers,
    /// The node's own routing table: always usable, what it proves is `super::vicinity`'s.
    Vicinity,
}

impl Kind {
    pub fn of(q: &Query) -> Kind {
        match q {
            Query::Sample { .. } => Kind::Sample,
            Query::Closest { .. } => Kind::Claim,
            Query::Providers { .. } => Kind::Providers,
            Query::Vicinity => Kind::Vicinity,
        }
    }
}

/// Why a lookup is unusable (for the driver's counters and logs).
pub const UNUSABLE_REASONS: [&str; 6] =
    ["timeout-full", "timeout-short", "short", "thin", "providers-timeout", "incomplete"];

/// `Ok(answered share)` when the lookup may be decided on, else `Err(reason)` (one of
/// [`UNUSABLE_REASONS`]; module doc). `me` is the asking node (not counted among the peers
/// found), `known` how many live peers it knows of.
pub fn judge(kind: Kind, r: &LookupReport, me: &NodeId, known: usize) -> Result<f64, &'static str> {
    let share = r.answered_share();
    match kind {
        Kind::Vicinity => Ok(1.0),
        Kind::Providers => {
            if r.timed_out && r.found == 0 {
                Err("providers-timeout")
            } else {
                Ok(share)
            }
        }
        Kind::Sample | Kind::Claim => {
            let n = r.peers.len();
            let others = r.peers.iter().filter(|p| p.id != *me).count();
            let min_peers = if kind == Kind::Sample { MIN_SAMPLE_PEERS } else { CLAIM_MIN_PEERS };
            let short = n < CLOSEST_K && r.failed > 0 && n < min_peers;
            let incomplete = others < known.min(min_peers);
            let thin = kind == Kind::Sample && share < MIN_ANSWERED;
            match (r.timed_out, short, incomplete, thin) {
                (true, ..) if n >= CLOSEST_K => Err("timeout-full"),
                (true, ..) => Err("timeout-short"),
                (false, true, ..) => Err("short"),
                (false, false, true, _) => Err("incomplete"),
                (false, false, false, true) => Err("thin"),
                (false, false, false, false) => Ok(share),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::superpeer::Point;

    fn peers(n: usize) -> Vec<PeerInfo> {
        (0..n).map(|i| PeerInfo { id: NodeId::from_u64(i as u64 + 1), point: Point::default() }).collect()
    }

    const ME: NodeId = NodeId([0xff; 32]);

    #[test]
    fn an_answer_with_fewer_peers_than_the_node_knows_is_incomplete() {
        let complete = |n| LookupReport::complete(peers(n));
        assert_eq!(judge(Kind::Sample, &complete(0), &ME, 5), Err("incomplete"), "asked nobody, knows 5");
        assert_eq!(judge(Kind::Claim, &complete(0), &ME, 1), Err("incomplete"), "not the closest among nobody");
        assert_eq!(judge(Kind::Claim, &complete(3), &ME, 16), Err("incomplete"), "3 of at least 4");
        assert_eq!(judge(Kind::Claim, &complete(4), &ME, 16), Ok(1.0), "the claim's minimum caps what is asked");
        assert_eq!(judge(Kind::Sample, &complete(9), &ME, 16), Err("incomplete"));
        assert_eq!(judge(Kind::Sample, &complete(10), &ME, 16), Ok(1.0), "the sample's minimum caps it");
        assert_eq!(judge(Kind::Sample, &complete(2), &ME, 2), Ok(1.0), "a network of 3 names the 2 others");
        assert_eq!(judge(Kind::Sample, &complete(0), &ME, 0), Ok(1.0), "a node that knows nobody is alone");
        let mut with_me = complete(2);
        with_me.peers.push(PeerInfo { id: ME, point: Point::default() });
        assert_eq!(judge(Kind::Claim, &with_me, &ME, 3), Err("incomplete"), "the node itself does not count");
        assert!(judge(Kind::Providers, &complete(0), &ME, 16).is_ok(), "nobody provides it: an answer");
    }

    #[test]
    fn short_timed_out_and_thin_lookups_are_unusable() {
        let report = |n, timed_out, answered, failed| LookupReport {
            peers: peers(n),
            found: n as u32,
            timed_out,
            answered,
            failed,
            ..LookupReport::default()
        };
        assert_eq!(judge(Kind::Sample, &LookupReport::complete(peers(20)), &ME, 16), Ok(1.0));
        assert_eq!(judge(Kind::Sample, &report(20, true, 20, 0), &ME, 0), Err("timeout-full"));
        assert_eq!(judge(Kind::Claim, &report(7, true, 7, 3), &ME, 0), Err("timeout-short"));
        assert_eq!(judge(Kind::Sample, &report(9, false, 9, 3), &ME, 0), Err("short"), "fewer than 10 with failures");
        assert_eq!(judge(Kind::Sample, &report(10, false, 10, 3), &ME, 0), Ok(10.0 / 13.0), "10 are enough");
        assert_eq!(judge(Kind::Claim, &report(4, false, 4, 9), &ME, 0), Ok(4.0 / 13.0), "a claim from 4 on");
        assert_eq!(judge(Kind::Claim, &report(3, false, 3, 9), &ME, 0), Err("short"));
        assert_eq!(judge(Kind::Sample, &report(5, false, 5, 0), &ME, 0), Ok(1.0), "a small network: no failure");
        assert_eq!(judge(Kind::Sample, &report(20, false, 10, 16), &ME, 0), Err("thin"), "under 40 % answered");
        assert_eq!(
            judge(Kind::Claim, &report(20, false, 10, 16), &ME, 0),
            Ok(10.0 / 26.0),
            "thinness matters to samples"
        );
        assert_eq!(judge(Kind::Providers, &report(0, true, 0, 4), &ME, 0), Err("providers-timeout"));
        let found_then_lost = LookupReport { found: 2, timed_out: true, ..LookupReport::default() };
        assert!(judge(Kind::Providers, &found_then_lost, &ME, 0).is_ok(), "it found someone");
        assert!(judge(Kind::Providers, &report(0, false, 3, 0), &ME, 0).is_ok(), "nobody provides it: an answer");
    }
}
