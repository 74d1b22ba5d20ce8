//! Super-peer selection settings, with validation.
//!
//! The seed gives no numbers; the defaults are ours, each chosen by measurement with
//! `peerage-lab superpeers` (docs/RESULTS.md has the current figures): 1 % super peers, clusters
//! capped at 1.5x the mean cluster size (150), one round per second, a token still for 10
//! rounds promotes its holder (seed 000's "held for a given amount of time"). The token law
//! (`attraction` 1, `repulsion` 0.5 within 0.5 cluster radii, `force_threshold` 0.15,
//! `min_gain` 1 %, `cooling` 10 moves, steps of at most one radius, 32 candidates) places tokens
//! best among the variants tried at N = 10^3-10^4 while converging within the round budget;
//! the measured access delay (`access_weight` 1) and split offers (`split_ratio` 0.5) each lower
//! the mean latency; super peers age over 10 rounds (`promoted_aging`), which lets N = 10^5
//! converge; a move must beat the holder's coordinate drift halved every 10 rounds
//! (`drift_half_life`), which ends tokens going straight back in real swarms. The measured
//! medoid step is off (`medoid_candidates` 0): it lowers latency at 10^4 but slows convergence
//! at 10^5. The cluster election's answer timeout is at least 4 x the RTTs around a member
//! (`election_rtt_factor`): a first message to a member costs a dial and two round trips.

use crate::election::{ConfigError as ElectionConfigError, ElectionConfig};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The two selection methods of seed 000.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// The first k bits of the DHT key mark super peers.
    ReservedPrefix,
    /// Tokens repel each other in the coordinate space; a node that holds one long enough
    /// promotes itself.
    RepulsionTokens,
}

impl Method {
    pub const ALL: [Method; 2] = [Method::ReservedPrefix, Method::RepulsionTokens];
    pub fn name(self) -> &'static str {
        match self {
            Method::ReservedPrefix => "prefix",
            Method::RepulsionTokens => "tokens",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown method name.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown super-peer method {0:?}: expected prefix or tokens")]
pub struct UnknownMethod(pub String);

impl FromStr for Method {
    type Err = UnknownMethod;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "prefix" | "reserved-prefix" => Ok(Method::ReservedPrefix),
            "tokens" | "repulsion-tokens" | "repulsion" => Ok(Method::RepulsionTokens),
            _ => Err(UnknownMethod(s.to_string())),
        }
    }
}

/// A setting out of range.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SuperPeerConfigError {
    #[error("{field} must be in {range}, got {got}")]
    OutOfRange { field: &'static str, range: &'static str, got: f64 },
    #[error("election settings: {0}")]
    Election(#[from] ElectionConfigError),
}

/// Settings of a [`SuperPeerNode`](super::SuperPeerNode). All nodes use the same values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SuperPeerConfig {
    pub method: Method,
    /// Wanted share of super peers, in (0, 0.5].
    pub share: f64,
    /// Most normal nodes one super peer serves (seed 000 requirement 4).
    pub cluster_cap: u32,
    /// Samples (single-lookup estimates, its own or shared) a node averages for its size
    /// estimate (`estimate` module doc, "Pooled samples").
    pub estimate_lookups: u32,
    /// Closest-peer lookups of random keys a node keeps running at once for its size
    /// estimate, until its own and its peers' samples are enough.
    pub estimate_parallel: u32,
    /// Peers of each such lookup's answer a node sends its pooled samples to (0: no sharing).
    pub estimate_push_peers: u32,
    /// Provider lookups a normal node makes to find super peers (random reserved slots for the
    /// prefix method, the token directory for the token method), and again whenever its
    /// cache runs empty.
    pub seed_lookups: u32,
    /// Known super peers a node keeps (nearest first).
    pub cache_size: usize,
    /// Rounds after which a known super peer nobody vouched for again is forgotten.
    pub cache_ttl: u32,
    /// Neighbours a node keeps (the driver reports them with `PeerUp`).
    pub neighbours: usize,
    /// Token entries a holder keeps in its view (nearest first).
    pub token_view: usize,
    /// Rounds between announcements of a super peer / holder to its neighbours.
    pub announce_every: u32,
    /// Rounds between cluster views sent to members (only when the cluster changed).
    pub view_every: u32,
    /// A better super peer must be at least this factor nearer before a node switches.
    pub switch_factor: f64,
    /// Rounds a node stays away from a super peer that refused it.
    pub refused_backoff: u32,
    /// Rounds a token must stay put before its holder promotes itself (hold time).
    pub hold_rounds: u32,
    /// Net force (dimensionless, see `token`) above which a token is considered for a move.
    pub force_threshold: f64,
    /// Weight of the members' pull (mass) on their holder's token (0 = repulsion only).
    pub attraction: f64,
    /// Weight of the repulsion between tokens.
    pub repulsion: f64,
    /// Repulsion cut-off, as a multiple of the holder's cluster radius.
    pub repulsion_range: f64,
    /// Longest step of one move, as a multiple of the holder's cluster radius.
    pub max_step: f64,
    /// Fraction by which a move must lower the token's cost (members' mean distance, the
    /// holder's height and the repulsion potential) before the token moves.
    pub min_gain: f64,
    /// Half-life, in rounds, of the holder's own coordinate drift that a move's gain must
    /// exceed besides `min_gain` (`token` module doc, "The coordinates' own drift"): a move is taken only if it gains more than the distance the holder's own point
    /// moved lately, decayed by half every `drift_half_life` rounds. 0 = off. Nodes whose
    /// point never moves after the start (the simulator) are not affected.
    pub drift_half_life: f64,
    /// Moves after which a token needs twice `min_gain` (cooling; see `token`).
    pub cooling: f64,
    /// Promoted super peers move only above `force_threshold x promoted_factor` and with
    /// `min_gain x promoted_factor`.
    pub promoted_factor: f64,
    /// Aging of a super peer (`node` module doc, step 4, "Settled super peers"): a promoted
    /// holder's move needs the gain x `1 + age / promoted_aging`, `age` the rounds since it
    /// became super peer. 0 = off.
    pub promoted_aging: f64,
    /// Rounds after which an un-refreshed token entry is dropped from a view.
    pub token_ttl: u32,
    /// RTT measurements (`SpEffect::MeasureRtt`) a normal node starts per round at most
    /// (0 = attach by predicted RTT only, as before).
    pub probes_per_round: u32,
    /// A cached head is measured only if its predicted RTT is below this factor times the
    /// RTT to the node's current head (measured if known, else predicted).
    pub probe_margin: f64,
    /// Candidates nearest to a token's wanted point whose cost is evaluated for a move.
    pub move_shortlist: u32,
    /// Weight of the measured access-delay estimate in a token's cost (`token`, "Measured
    /// access delay"; members report their nearest RTT to their token holder with
    /// `SpMessage::Access`). 0 = no reports, no estimate.
    pub access_weight: f64,
    /// Factor on the access excesses (nearest RTT minus the cluster's mean), in [0, 1].
    pub access_shrink: f64,
    /// Split offers (`token`, "Split offers"): a settled token jumps to a point another
    /// holder offers only if its own removal cost is below this fraction of the offered
    /// gain. 0 = no offers, no jumps. Default 0.5 (see the module doc).
    pub split_ratio: f64,
    /// A holder whose split gain exceeds this fraction of its cluster's total predicted RTT
    /// offers the split to the holders in its view.
    pub split_min: f64,
    /// Rounds between two split offers of one holder.
    pub split_every: u32,
    /// The measured medoid step (`medoid`): members a settled holder asks to
    /// measure its cluster at once, as candidate heads. 0 = off.
    /// Off by default: it lowers the mean latency at N = 10^4 but slows convergence at 10^5,
    /// and it has not run in a real swarm.
    pub medoid_candidates: u32,
    /// Members each candidate (and the holder) pings for the measured medoid step.
    pub medoid_sample: u32,
    /// The election run inside a cluster when its super peer dies.
    pub election: ElectionConfig,
    /// The cluster election's timeouts grow with the cluster's round trips: its answer
    /// timeout is at least this many times the largest RTT the member knows around it, and
    /// the other timeouts keep their ratio to it (`node` module doc, step 5, "Timeouts
    /// follow the RTT"). 0 = `election`'s fixed timeouts.
    pub election_rtt_factor: f64,
    /// Rounds a member that joined a re-election of the head it still took for alive waits
    /// for that head to answer its check before the check counts as failed (`node` module
    /// doc, step 5, "A doubter wins only once its check failed"). A head that is down fails
    /// the check at once wherever a send to it fails; this bounds the wait for a head that
    /// is connected but silent. At least the attach timeout (3 rounds).
    pub doubt_rounds: u32,
}

impl Default for SuperPeerConfig {
    fn default() -> Self {
        SuperPeerConfig {
            method: Method::RepulsionTokens,
            share: 0.01,
            cluster_cap: 150,
            estimate_lookups: 8,
            estimate_parallel: 2,
            estimate_push_peers: 4,
            seed_lookups: 4,
            cache_size: 6,
            cache_ttl: 10,
            neighbours: 16,
            token_view: 16,
            announce_every: 2,
            view_every: 5,
            switch_factor: 0.9,
            refused_backoff: 10,
            hold_rounds: 10,
            force_threshold: 0.15,
            attraction: 1.0,
            repulsion: 0.5,
            repulsion_range: 0.5,
            max_step: 1.0,
            min_gain: 0.01,
            drift_half_life: 10.0,
            cooling: 10.0,
            promoted_factor: 2.0,
            promoted_aging: 10.0,
            token_ttl: 10,
            probes_per_round: 1,
            probe_margin: 1.5,
            move_shortlist: 32,
            access_weight: 1.0,
            access_shrink: 1.0,
            split_ratio: 0.5,
            split_min: 0.2,
            split_every: 10,
            medoid_candidates: 0,
            medoid_sample: 32,
            election: ElectionConfig { alive_interval_ms: 0, ..ElectionConfig::default() },
            election_rtt_factor: 4.0,
            doubt_rounds: 10,
        }
    }
}

impl SuperPeerConfig {
    /// Reject values no node could work with.
    pub fn validate(&self) -> Result<(), SuperPeerConfigError> {
        let range = |field, got: f64, lo: f64, hi: f64, text| {
            if got.is_finite() && got >= lo && got <= hi {
                Ok(())
            } else {
                Err(SuperPeerConfigError::OutOfRange { field, range: text, got })
            }
        };
        range("share", self.share, 1e-9, 0.5, "(0, 0.5]")?;
        if self.share <= 0.0 {
            return Err(SuperPeerConfigError::OutOfRange { field: "share", range: "(0, 0.5]", got: self.share });
        }
        range("cluster_cap", self.cluster_cap as f64, 1.0, 1e7, "[1, 10^7]")?;
        range("estimate_lookups", self.estimate_lookups as f64, 1.0, 1000.0, "[1, 1000]")?;
        range("estimate_parallel", self.estimate_parallel as f64, 1.0, 1000.0, "[1, 1000]")?;
        range("estimate_push_peers", self.estimate_push_peers as f64, 0.0, 64.0, "[0, 64]")?;
        range("seed_lookups", self.seed_lookups as f64, 1.0, 1000.0, "[1, 1000]")?;
        range("cache_size", self.cache_size as f64, 1.0, 1000.0, "[1, 1000]")?;
        range("cache_ttl", self.cache_ttl as f64, 1.0, 60_000.0, "[1, 60000]")?;
        range("neighbours", self.neighbours as f64, 1.0, 10_000.0, "[1, 10000]")?;
        range("token_view", self.token_view as f64, 1.0, 10_000.0, "[1, 10000]")?;
        range("announce_every", self.announce_every as f64, 1.0, 1e6, "[1, 10^6]")?;
        range("view_every", self.view_every as f64, 1.0, 1e6, "[1, 10^6]")?;
        range("switch_factor", self.switch_factor, 0.0, 1.0, "[0, 1]")?;
        range("hold_rounds", self.hold_rounds as f64, 1.0, 1e6, "[1, 10^6]")?;
        range("doubt_rounds", self.doubt_rounds as f64, 3.0, 1e6, "[3, 10^6]")?;
        range("force_threshold", self.force_threshold, 0.0, 1e6, "[0, 10^6]")?;
        range("attraction", self.attraction, 0.0, 1e3, "[0, 1000]")?;
        range("repulsion", self.repulsion, 0.0, 1e3, "[0, 1000]")?;
        range("repulsion_range", self.repulsion_range, 0.0, 1e3, "[0, 1000]")?;
        range("max_step", self.max_step, 1e-6, 1e3, "(0, 1000]")?;
        range("min_gain", self.min_gain, 0.0, 0.99, "[0, 0.99]")?;
        range("drift_half_life", self.drift_half_life, 0.0, 1e6, "[0, 10^6]")?;
        range("cooling", self.cooling, 1e-3, 1e9, "[0.001, 10^9]")?;
        range("promoted_factor", self.promoted_factor, 1.0, 1e6, "[1, 10^6]")?;
        range("promoted_aging", self.promoted_aging, 0.0, 1e9, "[0, 10^9]")?;
        range("token_ttl", self.token_ttl as f64, 1.0, 1e6, "[1, 10^6]")?;
        range("probes_per_round", self.probes_per_round as f64, 0.0, 1000.0, "[0, 1000]")?;
        range("probe_margin", self.probe_margin, 1.0, 100.0, "[1, 100]")?;
        range("move_shortlist", self.move_shortlist as f64, 1.0, 1000.0, "[1, 1000]")?;
        range("access_weight", self.access_weight, 0.0, 100.0, "[0, 100]")?;
        range("access_shrink", self.access_shrink, 0.0, 1.0, "[0, 1]")?;
        range("split_ratio", self.split_ratio, 0.0, 1.0, "[0, 1]")?;
        range("split_min", self.split_min, 0.0, 1.0, "[0, 1]")?;
        range("split_every", self.split_every as f64, 1.0, 1e6, "[1, 10^6]")?;
        range("medoid_candidates", self.medoid_candidates as f64, 0.0, 64.0, "[0, 64]")?;
        range("medoid_sample", self.medoid_sample as f64, 1.0, 256.0, "[1, 256]")?;
        range("election_rtt_factor", self.election_rtt_factor, 0.0, 100.0, "[0, 100]")?;
        self.election.validate()?;
        Ok(())
    }

    /// The number of super peers wanted for a network of (estimated) size `n`: at least 1.
    pub fn wanted(&self, n: f64) -> u64 {
        ((self.share * n).round() as u64).max(1)
    }
}

/// `k = ceil(log2(wanted))`: the prefix length that has room for `wanted` slots.
pub fn prefix_bits(wanted: u64) -> u32 {
    if wanted <= 1 {
        0
    } else {
        64 - (wanted - 1).leading_zeros()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn bits_and_validation() {
        assert_eq!(prefix_bits(1), 0);
        assert_eq!(prefix_bits(2), 1);
        assert_eq!(prefix_bits(3), 2);
        assert_eq!(prefix_bits(1024), 10);
        assert_eq!(prefix_bits(1025), 11);
        assert!(SuperPeerConfig::default().validate().is_ok());
        let bad = SuperPeerConfig { share: 0.0, ..Default::default() };
        assert!(bad.validate().is_err());
        let bad = SuperPeerConfig { share: f64::NAN, ..Default::default() };
        assert!(bad.validate().is_err());
        assert_eq!("tokens".parse::<Method>(), Ok(Method::RepulsionTokens));
        assert!("x".parse::<Method>().is_err());
    }
}
