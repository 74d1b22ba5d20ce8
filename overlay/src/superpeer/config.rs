//! The super-peer settings: one serde struct, read by the node (the `[superpeer]` table of its
//! TOML file) and by the lab (`peerage-lab superpeers --sp-config FILE`, the same table), so
//! that a file measured in the simulator runs unchanged on real nodes.
//!
//! A setting is here when a deployment has to choose it: what the seed leaves to the operator
//! (the method, the share, the cap, the hold time, the cluster's election), what depends on the
//! network the nodes run on (how long a silent head is given), what trades cost for quality
//! (estimate samples, neighbours, cache, the measured medoid step) and the token law's weights,
//! which the lab exists to study. Every other number of the protocol is a constant of the
//! module that uses it, with the reason for its value next to it.
//!
//! Sections, by concern: the top level (method, share, cap), `estimate` (the size estimate,
//! `super::estimate`), `discovery` (neighbours, cache of heads, switching), `tokens` (the force
//! law and the hold time, `super::token`, `super::promotion`), `split` (split offers,
//! `super::token`), `medoid` (the measured medoid step, `super::medoid`), `election` (the
//! election a cluster runs when its head dies) and `head_watch` (a member's failure detector
//! for its head, `crate::detect::head_watch`).
//!
//! The seed gives no numbers; the defaults are ours, each measured with `peerage-lab
//! superpeers` (docs/results/superpeers-lab.md). A protocol round lasts [`ROUND`].

use crate::detect::head_watch::WatchConfig;
use crate::election::{Algorithm, ElectionConfig};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// One protocol round: a `Tick` of the state machine. Every count of rounds in the protocol is
/// of these. One second: longer than nearly every Internet round trip, so a message sent in a
/// round is answered within it, and short enough that a cluster re-elects within seconds.
pub const ROUND: Duration = Duration::from_secs(1);

/// The two selection methods of seed 000.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Method {
    /// The first k bits of the DHT key mark super peers.
    #[serde(rename = "prefix", alias = "reserved-prefix")]
    ReservedPrefix,
    /// Tokens repel each other in the coordinate space; a node that holds one long enough
    /// promotes itself.
    #[serde(rename = "tokens", alias = "repulsion-tokens")]
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

/// A setting no node could work with.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SuperPeerConfigError {
    #[error("superpeer.{field} must be in {range}, got {got}")]
    OutOfRange { field: &'static str, range: &'static str, got: f64 },
    #[error("superpeer.election.algorithm echo needs the cluster's topology, which members do not know; use bully, fast-bully, ring, chang-roberts or villadangos")]
    EchoInCluster,
}

/// Settings of a [`SuperPeerNode`](super::SuperPeerNode). Every node of an overlay uses the
/// same values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SuperPeerConfig {
    /// Which of seed 000's two methods selects the super peers. Tokens by default: they place
    /// super peers by measured latency, which is the seed's first requirement; prefixes cost
    /// fewer messages and place super peers at random.
    pub method: Method,
    /// The share of nodes that are super peers, in (0, 0.5] (seed 000: "a predefined portion").
    /// 1 %: clusters of about 100 members, which one head serves over ordinary connections.
    pub share: f64,
    /// Most members one super peer serves (seed 000's fourth requirement). 150, 1.5 times the
    /// mean cluster at 1 %: dense regions get full clusters without a head taking more than
    /// half again its share.
    pub cluster_cap: u32,
    pub estimate: EstimateConfig,
    pub discovery: DiscoveryConfig,
    pub tokens: TokenConfig,
    pub split: SplitConfig,
    pub medoid: MedoidConfig,
    pub election: ClusterElectionConfig,
    pub head_watch: HeadWatchConfig,
}

/// The largest network size a node may be told (`EstimateConfig::known_size`).
pub const MAX_KNOWN_SIZE: u64 = 1 << 40;

/// The size estimate (`super::estimate`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EstimateConfig {
    /// Samples (one vicinity or lookup estimate each, the node's own or shared) a node
    /// averages before it decides how many super peers are wanted. Vicinity samples cost a
    /// push, not a lookup, so 16: at N = 1,000 and share 1 % over 20 seeds, the tokens
    /// numbered exactly the wanted 10 on average (9.7 with 8 samples), the estimates' p95
    /// error was 12 % (17 % with 8) and the mean RTT 27.7 ms (29.2 ms with 8).
    pub samples: u32,
    /// The network's size, when the operator knows it (a swarm of given size, a deployment
    /// whose membership is managed): every node takes it instead of estimating, makes no
    /// estimate lookups and wants exactly `share x known_size` super peers, so that with the
    /// reserved prefix the super-peer set depends on the ids alone. 0: estimate (the default).
    pub known_size: u64,
}

/// Neighbours, the cache of known heads and attachment (`super::node`, DESIGN.md step 3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiscoveryConfig {
    /// Peers with a known position a node keeps, nearest first: its partners for the
    /// exchange of known heads and a token's candidate holders. 16 finds the nearest heads
    /// within a few exchanges; each neighbour is a connection a real node keeps open.
    pub neighbours: usize,
    /// Known heads a node keeps, nearest first. 6: a node nearly always knows one with room,
    /// and the entries fit inside the node's state (a million simulated nodes). More placed
    /// the tokens no better (N = 1,000, seeds 1-40: 1.098 x the k-median with 10, 1.106 with
    /// 16, against 1.088).
    pub cache_size: usize,
    /// A member switches only to a head this factor nearer than its own (measured). 0.9:
    /// without the margin members swap between heads of nearly equal distance; 0.95 placed
    /// the tokens no better (N = 1,000, seeds 1-40: 1.106 x the k-median against 1.088).
    pub switch_factor: f64,
}

/// The token law and the hold time (`super::token`, `super::promotion`). The force law's
/// defaults place tokens best among the variants measured at N = 10^3-10^4 while converging
/// within the lab's round budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TokenConfig {
    /// Rounds a token must stay put before its holder promotes itself (seed 000: "held for a
    /// given amount of time"); also the wait after a crash nearby and after a refused move.
    /// 10: long enough for the members' switching after a move to settle.
    pub hold_rounds: u32,
    /// Net force (dimensionless, see `token`) above which a token is considered for a move.
    /// 0.15: a cluster whose members sit evenly around its head does not move.
    pub force_threshold: f64,
    /// Weight of the members' pull on their holder's token. 0 leaves the seed's pure
    /// repulsion, which drives tokens to the rim of the populated space; 1 makes the tokens
    /// run a capacitated k-medians step.
    pub attraction: f64,
    /// Weight of the repulsion between tokens. 0.5: tokens inside each other's core part.
    pub repulsion: f64,
    /// Repulsion cut-off, as a multiple of the holder's cluster radius. 0.5: dense cities
    /// keep several heads close together.
    pub repulsion_range: f64,
    /// Longest step of one move, as a multiple of the holder's cluster radius. 1: a move
    /// stays inside the cluster it serves.
    pub max_step: f64,
    /// Fraction by which a move must lower the token's cost before the token moves. 1 %: the
    /// coordinates' own error is larger, so smaller gains are noise.
    pub min_gain: f64,
    /// Moves after which a token needs twice `min_gain` (the cooling `1 + max(e, e²)`, `e` =
    /// moves / `cooling`). 10: oscillations between near-equal spots die out within tens of
    /// moves.
    pub cooling: f64,
    /// Weight of the members' measured access delay in a token's cost (members report their
    /// nearest RTT, `SpMessage::Access`; 0 prices by the coordinates alone). 1: the access
    /// delay counts as much as the predicted RTT; it lowers the mean RTT to the head.
    pub access_weight: f64,
    /// Rounds over which a super peer's moves double in price (`1 + age / aging`, `age` its
    /// rounds as super peer; 0: no aging). 10: old super peers move only for large gains,
    /// which lets N = 10^5 converge.
    pub aging: f64,
    /// Half-life, in rounds, of the holder's own coordinate drift that a move's gain must
    /// exceed (0: no drift floor). 10: on real nodes whose coordinates keep learning, tokens
    /// stop following the noise; the simulator's points do not move and are not affected.
    pub drift_half_life: f64,
}

/// Split offers (`super::token`, "Split offers").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SplitConfig {
    /// A settled token jumps to a point another holder offers only if its own removal cost,
    /// times its cooling, is below this fraction of the offered gain (0: no offers, no
    /// jumps). 1: a jump must gain more than it costs by the predicted RTT, with the cooling
    /// as margin; 0.5 left useful jumps untaken (N = 1,000, 20 seeds: 1.14 x the k-median's
    /// mean RTT against 1.10).
    pub ratio: f64,
    /// A holder offers a split when the split's gain exceeds this fraction of its cluster's
    /// total predicted RTT. 0.1: with drains that find room, more offers pay (N = 10^4, 20
    /// seeds: 8.77 ms against 9.03 with 0.2, better on 15; 0.05 gave the same as 0.1 on 6
    /// seeds; N = 1,000 unchanged).
    pub min_gain: f64,
}

/// The measured medoid step (`super::medoid`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MedoidConfig {
    /// Members a settled holder asks to measure its cluster, as candidate heads (0: no
    /// step). 6: the step is what places a head on a well-connected node of its city (the
    /// coordinates cannot rank nodes within a city); each step costs 7 x `sample` pings.
    pub candidates: u32,
    /// Members each candidate (and the holder) pings for the step. 32: a mean RTT to the
    /// cluster within a few per cent at the default cap.
    pub sample: u32,
    /// Further steps a holder takes at one epoch after a step that did not move its token,
    /// every [`super::medoid::RETRY_ROUNDS`] rounds, each with fresh candidates drawn partly
    /// at random (`super::medoid`, "Retries"; 0: one step per epoch). 6: at N = 1,000 over
    /// 20 seeds the tokens' mean RTT falls from 1.106 to 1.076 x the k-median, for about a
    /// third more messages per node.
    pub retries: u32,
}

/// The election a cluster runs when its head dies (DESIGN.md, "Super peers", step 5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterElectionConfig {
    /// The algorithm. Bully: the members know each other from the head's view, the complete
    /// network it assumes, and it elects the heir (ranked first) when it is alive. Echo is
    /// refused: it needs the cluster's topology.
    pub algorithm: Algorithm,
}

impl ClusterElectionConfig {
    /// The election's settings: the algorithm's default timeouts, which the cluster's round
    /// trips stretch (`super::node`, step 5), and no heartbeats (the head watch finds a dead
    /// head).
    pub fn timeouts(&self) -> ElectionConfig {
        ElectionConfig { algorithm: self.algorithm, alive_interval_ms: 0, ..ElectionConfig::default() }
    }
}

/// A member's failure detector for its head (`crate::detect::head_watch`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HeadWatchConfig {
    /// How long a member must have heard nothing from its head before failed probes report
    /// it down, and how long a head may refuse a member without serving it before the member
    /// leaves it. A member asked to re-elect a head it still takes for alive checks it as
    /// long. 10 s: a live head on a loaded machine can go silent for seconds, and every false
    /// report starts a re-election next to it.
    pub suspect_after_ms: u64,
}

impl HeadWatchConfig {
    pub fn suspect_after(&self) -> Duration {
        Duration::from_millis(self.suspect_after_ms)
    }

    /// The detector's settings for rounds of [`ROUND`].
    pub fn watch(&self) -> WatchConfig {
        WatchConfig::member(ROUND, self.suspect_after())
    }
}

/// A file that holds a `[superpeer]` table, its other tables ignored: the lab
/// (`--sp-config`) and `peerage swarm --sp-config` read a node's config file through it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct SuperPeerFile {
    #[serde(default)]
    pub superpeer: SuperPeerConfig,
}

impl Default for SuperPeerConfig {
    fn default() -> Self {
        SuperPeerConfig {
            method: Method::RepulsionTokens,
            share: 0.01,
            cluster_cap: 150,
            estimate: EstimateConfig::default(),
            discovery: DiscoveryConfig::default(),
            tokens: TokenConfig::default(),
            split: SplitConfig::default(),
            medoid: MedoidConfig::default(),
            election: ClusterElectionConfig::default(),
            head_watch: HeadWatchConfig::default(),
        }
    }
}

impl Default for EstimateConfig {
    fn default() -> Self {
        EstimateConfig { samples: 16, known_size: 0 }
    }
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        DiscoveryConfig { neighbours: 16, cache_size: 6, switch_factor: 0.9 }
    }
}

impl Default for TokenConfig {
    fn default() -> Self {
        TokenConfig {
            hold_rounds: 10,
            force_threshold: 0.15,
            attraction: 1.0,
            repulsion: 0.5,
            repulsion_range: 0.5,
            max_step: 1.0,
            min_gain: 0.01,
            cooling: 10.0,
            access_weight: 1.0,
            aging: 10.0,
            drift_half_life: 10.0,
        }
    }
}

impl Default for SplitConfig {
    fn default() -> Self {
        SplitConfig { ratio: 1.0, min_gain: 0.1 }
    }
}

impl Default for MedoidConfig {
    fn default() -> Self {
        MedoidConfig { candidates: 6, sample: 32, retries: 6 }
    }
}

impl Default for ClusterElectionConfig {
    fn default() -> Self {
        ClusterElectionConfig { algorithm: Algorithm::Bully }
    }
}

impl Default for HeadWatchConfig {
    fn default() -> Self {
        HeadWatchConfig { suspect_after_ms: 10_000 }
    }
}

impl SuperPeerConfig {
    /// Rejects values no node could work with.
    pub fn validate(&self) -> Result<(), SuperPeerConfigError> {
        let range = |field, got: f64, lo: f64, hi: f64, text| {
            if got.is_finite() && got >= lo && got <= hi {
                Ok(())
            } else {
                Err(SuperPeerConfigError::OutOfRange { field, range: text, got })
            }
        };
        range("share", self.share, 1e-9, 0.5, "(0, 0.5]")?;
        range("cluster_cap", self.cluster_cap as f64, 1.0, 1e7, "[1, 10^7]")?;
        let e = &self.estimate;
        range("estimate.samples", e.samples as f64, 1.0, 1000.0, "[1, 1000]")?;
        range("estimate.known_size", e.known_size as f64, 0.0, MAX_KNOWN_SIZE as f64, "[0, 2^40]")?;
        let d = &self.discovery;
        range("discovery.neighbours", d.neighbours as f64, 1.0, 10_000.0, "[1, 10000]")?;
        range("discovery.cache_size", d.cache_size as f64, 1.0, 1000.0, "[1, 1000]")?;
        range("discovery.switch_factor", d.switch_factor, 0.0, 1.0, "[0, 1]")?;
        let t = &self.tokens;
        range("tokens.hold_rounds", t.hold_rounds as f64, 1.0, 1e6, "[1, 10^6]")?;
        range("tokens.force_threshold", t.force_threshold, 0.0, 1e6, "[0, 10^6]")?;
        range("tokens.attraction", t.attraction, 0.0, 1e3, "[0, 1000]")?;
        range("tokens.repulsion", t.repulsion, 0.0, 1e3, "[0, 1000]")?;
        range("tokens.repulsion_range", t.repulsion_range, 0.0, 1e3, "[0, 1000]")?;
        range("tokens.max_step", t.max_step, 1e-6, 1e3, "(0, 1000]")?;
        range("tokens.min_gain", t.min_gain, 0.0, 0.99, "[0, 0.99]")?;
        range("tokens.cooling", t.cooling, 1e-3, 1e9, "[0.001, 10^9]")?;
        range("tokens.access_weight", t.access_weight, 0.0, 100.0, "[0, 100]")?;
        range("tokens.aging", t.aging, 0.0, 1e9, "[0, 10^9]")?;
        range("tokens.drift_half_life", t.drift_half_life, 0.0, 1e6, "[0, 10^6]")?;
        let s = &self.split;
        range("split.ratio", s.ratio, 0.0, 1.0, "[0, 1]")?;
        range("split.min_gain", s.min_gain, 0.0, 1.0, "[0, 1]")?;
        let m = &self.medoid;
        range("medoid.candidates", m.candidates as f64, 0.0, 64.0, "[0, 64]")?;
        range("medoid.sample", m.sample as f64, 1.0, 256.0, "[1, 256]")?;
        range("medoid.retries", m.retries as f64, 0.0, 1000.0, "[0, 1000]")?;
        if self.election.algorithm == Algorithm::Echo {
            return Err(SuperPeerConfigError::EchoInCluster);
        }
        let w = &self.head_watch;
        range("head_watch.suspect_after_ms", w.suspect_after_ms as f64, 0.0, 600_000.0, "[0, 600000]")?;
        Ok(())
    }

    /// The number of super peers wanted for a network of (estimated) size `n`: at least 1.
    pub fn wanted(&self, n: f64) -> u64 {
        ((self.share * n).round() as u64).max(1)
    }

    /// Rounds a member that joined a re-election of the head it still took for alive waits for
    /// that head to answer its check before the check counts as failed (`super::node`, step 5,
    /// "A doubter wins only once its check failed"): as long as its own head watch would give
    /// the head, and at least the attach timeout (3 rounds).
    pub fn doubt_rounds(&self) -> u32 {
        let rounds = self.head_watch.suspect_after_ms.div_ceil(ROUND.as_millis() as u64);
        (rounds.min(1_000_000) as u32).max(3)
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
        let mut bad = SuperPeerConfig::default();
        bad.election.algorithm = Algorithm::Echo;
        assert_eq!(bad.validate(), Err(SuperPeerConfigError::EchoInCluster));
        let mut bad = SuperPeerConfig::default();
        bad.tokens.max_step = 0.0;
        assert!(bad.validate().unwrap_err().to_string().contains("tokens.max_step"));
        assert_eq!("tokens".parse::<Method>(), Ok(Method::RepulsionTokens));
        assert!("x".parse::<Method>().is_err());
    }

    #[test]
    fn a_check_waits_as_long_as_the_head_watch() {
        let mut c = SuperPeerConfig::default();
        assert_eq!(c.doubt_rounds(), 10);
        c.head_watch.suspect_after_ms = 4_000;
        assert_eq!(c.doubt_rounds(), 4);
        c.head_watch.suspect_after_ms = 2_500;
        assert_eq!(c.doubt_rounds(), 3, "at least the attach timeout");
        c.head_watch.suspect_after_ms = 0;
        assert_eq!(c.doubt_rounds(), 3);
    }
}
