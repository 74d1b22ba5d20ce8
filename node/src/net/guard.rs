//! Enforcement of peer reputation: the node's one place to report a misbehaving peer.
//!
//! The policy (weights, decay, threshold, ban length) is `overlay::reputation`; this file
//! carries out its verdicts on the swarm. A ban puts the peer on libp2p's block list
//! (`allow_block_list`: its connections close at once and new ones, inbound or outbound, are
//! denied before anything else sees them) and on gossipsub's blacklist (its messages are
//! neither accepted nor forwarded). A ban that runs out lifts both. The verdict comes with the
//! report that crossed the threshold, so a peer is disconnected in the same turn of the event
//! loop, microseconds after crossing it.
//!
//! Logs: one warning line per offending peer per [`SUMMARY_EVERY`] (its offences counted by
//! kind, its score, whether it is banned) and one per ban, instead of one line per event.

use crate::net::behaviour::Behaviour;
use libp2p::{PeerId, Swarm};
use overlay::reputation::{Offence, OffenceCounts, Reputation, ReputationConfig, Verdict};
use serde::Serialize;
use std::time::{Duration, Instant};
use tracing::warn;

/// How often offences are summarised in the log.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// What the guard did (status JSON, tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct GuardStats {
    /// Offences reported, and by kind.
    pub offences: u64,
    #[serde(default)]
    pub by_kind: OffenceCounts,
    /// Bans decided.
    pub bans: u64,
    /// Peers banned now.
    pub banned_now: u64,
}

/// Reputation and its enforcement.
pub struct Guard {
    rep: Reputation<PeerId>,
    epoch: Instant,
    next_summary: Instant,
    stats: GuardStats,
}

impl Default for Guard {
    fn default() -> Self {
        Guard::new(ReputationConfig::default())
    }
}

impl Guard {
    pub fn new(cfg: ReputationConfig) -> Guard {
        let now = Instant::now();
        Guard { rep: Reputation::new(cfg), epoch: now, next_summary: now + SUMMARY_EVERY, stats: GuardStats::default() }
    }

    fn us(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_micros() as u64
    }

    /// Report `n` offences of one kind by `peer`; bans it when its score crosses the
    /// threshold. Returns true when this report banned it.
    pub fn report_n(&mut self, swarm: &mut Swarm<Behaviour>, peer: PeerId, offence: Offence, n: u64) -> bool {
        if n == 0 || peer == *swarm.local_peer_id() {
            return false;
        }
        self.stats.offences += n;
        self.stats.by_kind.add(offence, n);
        let now = self.us(Instant::now());
        match self.rep.report_n(peer, offence, n, now) {
            Verdict::Keep => false,
            Verdict::Ban { until_us } => {
                self.stats.bans += 1;
                let secs = until_us.saturating_sub(now) / 1_000_000;
                warn!(%peer, offence = offence.name(), ban_s = secs, "peer banned");
                let b = swarm.behaviour_mut();
                b.blocked.block_peer(peer);
                b.gossipsub.blacklist_peer(&peer);
                let _ = swarm.disconnect_peer_id(peer);
                true
            }
        }
    }

    /// Report one offence.
    pub fn report(&mut self, swarm: &mut Swarm<Behaviour>, peer: PeerId, offence: Offence) -> bool {
        self.report_n(swarm, peer, offence, 1)
    }

    /// Is `peer` banned now?
    pub fn is_banned(&self, peer: &PeerId) -> bool {
        self.rep.is_banned(peer, self.us(Instant::now()))
    }

    /// Lift the bans that ran out and write the periodic summary.
    pub fn tick(&mut self, swarm: &mut Swarm<Behaviour>, now: Instant) {
        let t = self.us(now);
        for peer in self.rep.expire(t) {
            let b = swarm.behaviour_mut();
            b.blocked.unblock_peer(peer);
            b.gossipsub.remove_blacklisted_peer(&peer);
        }
        self.stats.banned_now = self.rep.banned(t).len() as u64;
        if now >= self.next_summary {
            self.next_summary = now + SUMMARY_EVERY;
            for s in self.rep.drain_summary(t) {
                let offences: Vec<String> = s.offences.iter().map(|(k, n)| format!("{k}={n}")).collect();
                warn!(
                    peer = %s.peer,
                    offences = offences.join(","),
                    score = format!("{:.0}", s.score),
                    banned = s.banned_until_us.is_some(),
                    "misbehaviour in the last {}s",
                    SUMMARY_EVERY.as_secs()
                );
            }
        }
    }

    pub fn stats(&self) -> GuardStats {
        self.stats
    }
}
