//! Peer reputation: one place where every protocol reports misbehaviour, and which decides
//! when a peer is banned. Sans-IO: offences and time in, verdicts out; the node enforces a
//! ban (disconnect, block list) and logs the summaries.
//!
//! Policy (ours; the shape of gossipsub v1.1's peer score, Vyzovitis et al. 2020, whose
//! counters decay towards zero so that old faults are forgiven):
//! - every offence adds its weight ([`Offence::weight`]) to the peer's score;
//! - the score decays exponentially, halving every `half_life_us`;
//! - a score at or above `threshold` bans the peer for `ban_us`, doubled for every earlier
//!   ban of the same peer (at most `max_ban_us`); the verdict is returned by the very report
//!   that crossed the threshold, so the node bans at once;
//! - a banned peer's further offences are counted but change nothing.
//!
//! Weights: a lie that no honest peer can tell by accident (a bad signature, a forged rank, a
//! claim on someone else's behalf) weighs a fifth of the threshold, so five ban; a malformed
//! frame a tenth (a peer of another version sends them, and should go, but not at once);
//! refusals that an honest peer causes while its view lags (a record refused for pace) weigh
//! 1, enough only when sustained (about 100 frames a half-life); a flood, a peer past its
//! memory budget and a gossipsub message that fails validation ban at once (honest relays
//! validate before they forward, and gossipsub graylists the sender after its first invalid
//! message, so there would be no second report to add up).
//!
//! Summaries: offences are counted per peer and drained once per interval
//! ([`Reputation::drain_summary`]), so the node logs one line per offending peer per interval
//! instead of one per event.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// What a peer did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Offence {
    /// A frame that does not decode (wrong version, garbage, trailing bytes).
    MalformedFrame,
    /// A member record no honest relay forwards (bad signature or key, beyond the bounds).
    InvalidRecord,
    /// An election or super-peer claim the directory contradicts (a lie).
    FalseClaim,
    /// Records refused for pace: more new members than the sender's budget.
    Overrun,
    /// Far more new members than the directory holds in one frame.
    Flood,
    /// A gossipsub message that failed validation.
    InvalidGossip,
    /// Inbound frames beyond the peer's memory budget (bytes or streams in flight).
    OverBudget,
}

impl Offence {
    pub const ALL: [Offence; 7] = [
        Offence::MalformedFrame,
        Offence::InvalidRecord,
        Offence::FalseClaim,
        Offence::Overrun,
        Offence::Flood,
        Offence::InvalidGossip,
        Offence::OverBudget,
    ];

    /// Score added per offence (the threshold is [`ReputationConfig::threshold`], 100 by default).
    pub fn weight(self) -> f64 {
        match self {
            Offence::MalformedFrame => 10.0,
            Offence::InvalidRecord => 20.0,
            Offence::FalseClaim => 20.0,
            Offence::Overrun => 1.0,
            Offence::Flood => 100.0,
            Offence::InvalidGossip => 100.0,
            Offence::OverBudget => 100.0,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Offence::MalformedFrame => "malformed-frame",
            Offence::InvalidRecord => "invalid-record",
            Offence::FalseClaim => "false-claim",
            Offence::Overrun => "overrun",
            Offence::Flood => "flood",
            Offence::InvalidGossip => "invalid-gossip",
            Offence::OverBudget => "over-budget",
        }
    }

    fn index(self) -> usize {
        Offence::ALL.iter().position(|o| *o == self).unwrap_or(0)
    }
}

/// Offences counted by kind; written as a map from [`Offence::name`] to the count, zeros left
/// out (status lines, swarm reports).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "BTreeMap<String, u64>", from = "BTreeMap<String, u64>")]
pub struct OffenceCounts([u64; Offence::ALL.len()]);

impl OffenceCounts {
    pub fn add(&mut self, offence: Offence, n: u64) {
        let c = &mut self.0[offence.index()];
        *c = c.saturating_add(n);
    }
    pub fn get(&self, offence: Offence) -> u64 {
        self.0[offence.index()]
    }
    /// Add `other`'s counts to these.
    pub fn merge(&mut self, other: &OffenceCounts) {
        for o in Offence::ALL {
            self.add(o, other.get(o));
        }
    }
    pub fn total(&self) -> u64 {
        self.0.iter().fold(0u64, |a, b| a.saturating_add(*b))
    }
}

impl From<OffenceCounts> for BTreeMap<String, u64> {
    fn from(c: OffenceCounts) -> Self {
        Offence::ALL.iter().filter(|o| c.get(**o) > 0).map(|o| (o.name().to_string(), c.get(*o))).collect()
    }
}

/// Names that are not an offence's are left out (a status line of another version).
impl From<BTreeMap<String, u64>> for OffenceCounts {
    fn from(m: BTreeMap<String, u64>) -> Self {
        let mut c = OffenceCounts::default();
        for o in Offence::ALL {
            if let Some(n) = m.get(o.name()) {
                c.add(o, *n);
            }
        }
        c
    }
}

/// Thresholds and decay.
#[derive(Debug, Clone, PartialEq)]
pub struct ReputationConfig {
    pub threshold: f64,
    pub half_life_us: u64,
    pub ban_us: u64,
    pub max_ban_us: u64,
    /// Peers tracked at most (the one with the lowest score is forgotten first).
    pub max_peers: usize,
}

impl Default for ReputationConfig {
    fn default() -> Self {
        ReputationConfig {
            threshold: 100.0,
            half_life_us: 60_000_000,
            ban_us: 600_000_000,
            max_ban_us: 24 * 3_600_000_000,
            max_peers: 4096,
        }
    }
}

/// What a report decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing to do.
    Keep,
    /// Ban the peer until this time (wall-clock microseconds); disconnect it now.
    Ban { until_us: u64 },
}

#[derive(Debug, Clone, Default)]
struct Score {
    score: f64,
    at_us: u64,
    banned_until: Option<u64>,
    bans: u32,
    /// Offences since the last summary.
    counts: [u64; 7],
    /// When the peer crossed the threshold last.
    crossed_at_us: Option<u64>,
}

/// One peer's line in a summary.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary<K> {
    pub peer: K,
    pub offences: Vec<(&'static str, u64)>,
    pub score: f64,
    pub banned_until_us: Option<u64>,
}

/// Scores of the peers that misbehaved.
#[derive(Debug, Clone)]
pub struct Reputation<K> {
    cfg: ReputationConfig,
    peers: HashMap<K, Score>,
    bans_total: u64,
}

impl<K: Copy + Eq + Hash> Reputation<K> {
    pub fn new(cfg: ReputationConfig) -> Self {
        Reputation { cfg, peers: HashMap::new(), bans_total: 0 }
    }

    fn decayed(cfg: &ReputationConfig, s: &Score, now_us: u64) -> f64 {
        let dt = now_us.saturating_sub(s.at_us) as f64;
        s.score * 0.5f64.powf(dt / cfg.half_life_us.max(1) as f64)
    }

    /// Report one offence by `peer` at `now_us`.
    pub fn report(&mut self, peer: K, offence: Offence, now_us: u64) -> Verdict {
        self.report_n(peer, offence, 1, now_us)
    }

    /// Report `n` offences of one kind at once.
    pub fn report_n(&mut self, peer: K, offence: Offence, n: u64, now_us: u64) -> Verdict {
        if n == 0 {
            return Verdict::Keep;
        }
        if self.peers.len() >= self.cfg.max_peers && !self.peers.contains_key(&peer) {
            let cfg = &self.cfg;
            let low = self
                .peers
                .iter()
                .filter(|(_, s)| s.banned_until.is_none_or(|u| u <= now_us))
                .min_by(|a, b| Self::decayed(cfg, a.1, now_us).total_cmp(&Self::decayed(cfg, b.1, now_us)))
                .map(|(k, _)| *k);
            if let Some(k) = low {
                self.peers.remove(&k);
            }
        }
        let cfg = self.cfg.clone();
        let s = self.peers.entry(peer).or_default();
        s.counts[offence.index()] += n;
        if s.banned_until.is_some_and(|u| u > now_us) {
            return Verdict::Keep;
        }
        s.score = Self::decayed(&cfg, s, now_us) + offence.weight() * n as f64;
        s.at_us = now_us;
        if s.score >= cfg.threshold {
            let ban = cfg.ban_us.saturating_mul(1u64 << s.bans.min(20)).min(cfg.max_ban_us);
            let until_us = now_us.saturating_add(ban);
            s.banned_until = Some(until_us);
            s.bans += 1;
            s.score = 0.0;
            s.crossed_at_us = Some(now_us);
            self.bans_total += 1;
            return Verdict::Ban { until_us };
        }
        Verdict::Keep
    }

    /// Is `peer` banned at `now_us`?
    pub fn is_banned(&self, peer: &K, now_us: u64) -> bool {
        self.peers.get(peer).and_then(|s| s.banned_until).is_some_and(|u| u > now_us)
    }

    /// The peer's current score (0 for an unknown peer).
    pub fn score(&self, peer: &K, now_us: u64) -> f64 {
        self.peers.get(peer).map_or(0.0, |s| Self::decayed(&self.cfg, s, now_us))
    }

    /// Lift the bans that ran out; returns those peers. Forgets peers whose score decayed to
    /// nothing and who are not banned and have nothing left to summarise.
    pub fn expire(&mut self, now_us: u64) -> Vec<K> {
        let mut lifted = Vec::new();
        for (k, s) in self.peers.iter_mut() {
            if s.banned_until.is_some_and(|u| u <= now_us) {
                s.banned_until = None;
                lifted.push(*k);
            }
        }
        let cfg = self.cfg.clone();
        self.peers.retain(|_, s| {
            s.banned_until.is_some()
                || s.bans > 0
                || s.counts.iter().any(|c| *c > 0)
                || Self::decayed(&cfg, s, now_us) >= 0.5
        });
        lifted
    }

    /// One summary line per peer that offended since the last call, and reset their counts.
    pub fn drain_summary(&mut self, now_us: u64) -> Vec<Summary<K>> {
        let cfg = self.cfg.clone();
        let mut out = Vec::new();
        for (k, s) in self.peers.iter_mut() {
            if s.counts.iter().all(|c| *c == 0) {
                continue;
            }
            let offences = Offence::ALL
                .iter()
                .filter(|o| s.counts[o.index()] > 0)
                .map(|o| (o.name(), s.counts[o.index()]))
                .collect();
            out.push(Summary {
                peer: *k,
                offences,
                score: Self::decayed(&cfg, s, now_us),
                banned_until_us: s.banned_until.filter(|u| *u > now_us),
            });
            s.counts = [0; 7];
        }
        out
    }

    /// Bans decided so far.
    pub fn bans_total(&self) -> u64 {
        self.bans_total
    }

    /// Peers banned now.
    pub fn banned(&self, now_us: u64) -> Vec<K> {
        self.peers.iter().filter(|(_, s)| s.banned_until.is_some_and(|u| u > now_us)).map(|(k, _)| *k).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lies_add_up_to_a_ban_and_old_faults_fade() {
        let mut r: Reputation<u32> = Reputation::new(ReputationConfig::default());
        for _ in 0..4 {
            assert_eq!(r.report(1, Offence::FalseClaim, 0), Verdict::Keep);
        }
        assert!(matches!(r.report(1, Offence::FalseClaim, 0), Verdict::Ban { until_us: 600_000_000 }));
        assert!(r.is_banned(&1, 1));
        // Four lies, then a half-life twice over: the fifth does not ban.
        for _ in 0..4 {
            r.report(2, Offence::FalseClaim, 0);
        }
        assert_eq!(r.report(2, Offence::FalseClaim, 120_000_000), Verdict::Keep);
        assert!((r.score(&2, 120_000_000) - 40.0).abs() < 1e-6, "80 halved twice, plus 20");
        // Pace refusals alone: a hundred in one half-life.
        for _ in 0..99 {
            assert_eq!(r.report(3, Offence::Overrun, 0), Verdict::Keep);
        }
        assert!(matches!(r.report(3, Offence::Overrun, 0), Verdict::Ban { .. }));
    }

    #[test]
    fn repeated_bans_grow_and_expire() {
        let mut r: Reputation<u32> = Reputation::new(ReputationConfig::default());
        let Verdict::Ban { until_us: first } = r.report(7, Offence::Flood, 0) else { panic!("a flood bans") };
        assert_eq!(r.report(7, Offence::Flood, 10), Verdict::Keep, "already banned");
        assert_eq!(r.expire(first), vec![7]);
        let Verdict::Ban { until_us: second } = r.report(7, Offence::OverBudget, first) else { panic!() };
        assert_eq!(second - first, 2 * first, "the second ban lasts twice as long");
        let s = r.drain_summary(first);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].offences, vec![("flood", 2), ("over-budget", 1)]);
        assert!(r.drain_summary(first).is_empty(), "drained");
        assert_eq!(r.bans_total(), 2);
    }

    #[test]
    fn the_table_is_bounded() {
        let cfg = ReputationConfig { max_peers: 16, ..ReputationConfig::default() };
        let mut r: Reputation<u32> = Reputation::new(cfg);
        for p in 0..1000 {
            r.report(p, Offence::MalformedFrame, 0);
        }
        assert!(r.peers.len() <= 16);
    }

    #[test]
    fn offence_counts_round_trip_by_name_and_merge() {
        let mut a = OffenceCounts::default();
        a.add(Offence::FalseClaim, 3);
        a.add(Offence::Overrun, 2);
        let mut b = OffenceCounts::default();
        b.add(Offence::FalseClaim, 1);
        a.merge(&b);
        assert_eq!((a.get(Offence::FalseClaim), a.get(Offence::Overrun), a.total()), (4, 2, 6));
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(json, r#"{"false-claim":4,"overrun":2}"#);
        let back: OffenceCounts = serde_json::from_str(r#"{"false-claim":4,"overrun":2,"no-such-kind":9}"#).unwrap();
        assert_eq!(back, a, "an unknown name is left out");
    }
}
