//! Election configuration: which algorithm, and its timeouts.
//!
//! Timeout names follow seed 002: T1 = `alive_interval` x `alive_error_factor` (coordinator
//! silence), T2 = `answer_timeout`, T3 = `coordinator_timeout`, T4 = `nomination_timeout`.
//! Times are whole milliseconds so that TOML files stay readable. `alive_interval_ms = 0`
//! turns the coordinator's heartbeat off; failures are then noticed only through `PeerDown`
//! reports and failed sends (the simulator uses this so that runs reach quiescence).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The six election algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    /// Garcia-Molina's bully algorithm (seeds 000, 001, 002).
    Bully,
    /// The fast bully algorithm (seed 002).
    FastBully,
    /// The list-based ring algorithm with dead successors skipped (seeds 000, 001, 003).
    Ring,
    /// Chang and Roberts' ring algorithm (seed 003).
    ChangRoberts,
    /// Villadangos et al., O(n) election in complete networks (seed 004).
    Villadangos,
    /// Vasudevan et al.'s echo election over an arbitrary topology (seed 000).
    Echo,
}

impl Algorithm {
    pub const ALL: [Algorithm; 6] = [
        Algorithm::Bully,
        Algorithm::FastBully,
        Algorithm::Ring,
        Algorithm::ChangRoberts,
        Algorithm::Villadangos,
        Algorithm::Echo,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Bully => "bully",
            Algorithm::FastBully => "fast-bully",
            Algorithm::Ring => "ring",
            Algorithm::ChangRoberts => "chang-roberts",
            Algorithm::Villadangos => "villadangos",
            Algorithm::Echo => "echo",
        }
    }

    /// True for the algorithms whose message count grows quadratically with N.
    pub fn is_quadratic(self) -> bool {
        matches!(self, Algorithm::Bully | Algorithm::FastBully)
    }

    /// True for the algorithms whose leader beats `Alive` to its successors and to everyone
    /// only now and then (`election::beats`): all but echo, which has heartbeats of its own.
    pub fn beats_to_successors(self) -> bool {
        !matches!(self, Algorithm::Echo)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown algorithm name.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown election algorithm {0:?}: expected one of bully, fast-bully, ring, chang-roberts, villadangos, echo")]
pub struct UnknownAlgorithm(pub String);

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm = s.trim().to_ascii_lowercase().replace('_', "-");
        Algorithm::ALL.into_iter().find(|a| a.name() == norm).ok_or_else(|| UnknownAlgorithm(s.to_string()))
    }
}

/// A configuration value out of range.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("{field} must be at least {min} ms, got {got} ms")]
    TooSmall { field: &'static str, min: u64, got: u64 },
    #[error("{field} must be at most {max}, got {got}")]
    TooLarge { field: &'static str, max: u64, got: u64 },
}

/// Election settings. The same values must be used by every process of a group (seed 002:
/// "T1, T2 and T3 values should be the same for all the processes").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ElectionConfig {
    pub algorithm: Algorithm,
    /// The coordinator's `Alive` period; 0 turns heartbeats off.
    pub alive_interval_ms: u64,
    /// T1 = alive interval x this factor.
    pub alive_error_factor: u64,
    /// Every algorithm but echo (`election::beats`): the leader's `Alive` reaches every member
    /// only every this many beats, and its [`alive_successors`](Self::alive_successors) every
    /// beat; a member that is not one of them waits T1 x this for its leader. 1 sends every
    /// beat to everyone, as seed 002 does.
    pub alive_all_every: u64,
    /// How many members ranked just below the leader hear every `Alive` (those that would
    /// succeed it, so a silent leader is noticed after T1 by them). Two
    /// keep these sends point to point in a node (a group of three or more mostly
    /// unconnected recipients is published on the broadcast topic).
    pub alive_successors: u64,
    /// T2: how long to wait for an `Answer` (or a `View`).
    pub answer_timeout_ms: u64,
    /// T3: how long to wait for `Coordinator` after an `Answer`.
    pub coordinator_timeout_ms: u64,
    /// T4 (fast bully): how long an answering process waits for `Nomination`/`Coordinator`.
    pub nomination_timeout_ms: u64,
    /// Ring algorithms: how long an initiator waits for its message to come round, at least
    /// (see [`hop_delay_ms`](Self::hop_delay_ms)).
    pub lap_timeout_ms: u64,
    /// Ring algorithms: a bound on one message's one-way delay, transport and handling. A lap
    /// is a chain of n messages (Villadangos': n `Message1` and up to 2(n - 1) more), so the
    /// lap timer lasts at least 4 x n x this, n the group's size ([`LapRule`]):
    /// a fixed lap timer fires before a lap of 1,000 processes over Internet delays (about two
    /// minutes) comes round, restarts the election, and never lets it end. 0: the lap timer is
    /// `lap_timeout_ms` whatever the size.
    pub hop_delay_ms: u64,
    /// Echo: how long a node waits for the acknowledgements of its children, and the probe
    /// period between neighbours (0 turns probes off).
    pub echo_ack_timeout_ms: u64,
    pub echo_probe_interval_ms: u64,
    /// Echo: the leader's heartbeat period (0 turns heartbeats off, so that runs on a fixed
    /// topology reach quiescence). With heartbeats a node elects again only when its leader's
    /// heartbeats stop, and merged components adopt the better leader as its heartbeats
    /// reach them: what a network whose links keep changing needs.
    pub echo_heartbeat_interval_ms: u64,
    /// When the orphan rule applies (with heartbeats, a process that names no leader outside
    /// an election holds one after T1: `watch`, and the bully family). Not a file setting: it
    /// says who starts the first election, which the program knows.
    #[serde(skip)]
    pub orphans: Orphans,
}

/// When the orphan rule applies ([`ElectionConfig::orphans`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Orphans {
    /// From the group's first arrival: a process no election reached holds one after T1.
    /// For the lab, where nothing else starts a leaderless process's election.
    #[default]
    FromGroup,
    /// Only in a process that has named a leader or taken part in an election: the first
    /// election is the application's (a node's start policy starts it once the member
    /// directory settled). A process that lost its leader, or that an election left
    /// without one (a partition that heals), still holds one after T1.
    AfterFirstElection,
}

impl Orphans {
    /// Whether the rule applies to a process that has (`reached`) or has not yet named a
    /// leader or taken part in an election.
    pub fn apply(self, reached: bool) -> bool {
        self == Orphans::FromGroup || reached
    }
}

/// `d` x `n`, saturating (a configured interval can be absurdly long; it must not overflow).
pub fn times(d: Duration, n: u64) -> Duration {
    d.checked_mul(u32::try_from(n).unwrap_or(u32::MAX)).unwrap_or(Duration::MAX)
}

/// The ring algorithms' lap timer, as each process keeps it: `lap_timeout_ms`, or 4 x n x
/// `hop_delay_ms` in a group of n if longer ([`ElectionConfig::hop_delay_ms`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LapRule {
    base_ms: u64,
    hop_ms: u64,
}

impl LapRule {
    pub fn of(cfg: &ElectionConfig) -> LapRule {
        LapRule { base_ms: cfg.lap_timeout_ms, hop_ms: cfg.hop_delay_ms }
    }
    /// The lap timer in a group of `n`.
    pub fn for_group(&self, n: usize) -> Duration {
        let chain = self.hop_ms.saturating_mul(4).saturating_mul(n as u64);
        Duration::from_millis(self.base_ms.max(chain))
    }
}

impl Default for ElectionConfig {
    fn default() -> Self {
        ElectionConfig {
            algorithm: Algorithm::Bully,
            alive_interval_ms: 1_000,
            alive_error_factor: 3,
            alive_all_every: 5,
            alive_successors: 2,
            answer_timeout_ms: 500,
            coordinator_timeout_ms: 1_500,
            nomination_timeout_ms: 1_500,
            lap_timeout_ms: 10_000,
            hop_delay_ms: 10,
            echo_ack_timeout_ms: 2_000,
            echo_probe_interval_ms: 1_000,
            echo_heartbeat_interval_ms: 0,
            orphans: Orphans::FromGroup,
        }
    }
}

impl ElectionConfig {
    /// The default timings with `algorithm`.
    pub fn for_algorithm(algorithm: Algorithm) -> Self {
        ElectionConfig { algorithm, ..Default::default() }
    }

    /// Reject values no process could work with.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let min = |field, got: u64, min: u64| {
            if got < min {
                Err(ConfigError::TooSmall { field, min, got })
            } else {
                Ok(())
            }
        };
        min("answer_timeout_ms", self.answer_timeout_ms, 1)?;
        min("coordinator_timeout_ms", self.coordinator_timeout_ms, 1)?;
        min("nomination_timeout_ms", self.nomination_timeout_ms, 1)?;
        min("lap_timeout_ms", self.lap_timeout_ms, 1)?;
        min("echo_ack_timeout_ms", self.echo_ack_timeout_ms, 1)?;
        if self.alive_interval_ms > 0 {
            min("alive_error_factor", self.alive_error_factor, 1)?;
        }
        if self.alive_interval_ms > 0 {
            min("alive_all_every", self.alive_all_every, 1)?;
            if self.alive_all_every > 1 {
                min("alive_successors", self.alive_successors, 1)?;
            }
        }
        if self.alive_interval_ms > 3_600_000 {
            return Err(ConfigError::TooLarge {
                field: "alive_interval_ms",
                max: 3_600_000,
                got: self.alive_interval_ms,
            });
        }
        for (field, got) in [
            ("alive_error_factor", self.alive_error_factor),
            ("alive_all_every", self.alive_all_every),
            ("alive_successors", self.alive_successors),
        ] {
            if got > 1_000 {
                return Err(ConfigError::TooLarge { field, max: 1_000, got });
            }
        }
        Ok(())
    }

    /// The configuration of a process that starts no election of its own and only answers
    /// the elections others start (a swarm that measures its clusters' elections, not a
    /// swarm-wide one): heartbeats off. With heartbeats, a process that names no leader
    /// holds an election after T1 (the orphan rule, `watch` and the bully family), which is
    /// starting one; and a leader it answered into office would send `Alive` to every member.
    pub fn answering_only(&self) -> ElectionConfig {
        ElectionConfig { alive_interval_ms: 0, echo_heartbeat_interval_ms: 0, ..self.clone() }
    }

    /// The configuration of a process whose application starts the first election (a node's
    /// start policy, `detect::start`): the orphan rule only after it
    /// ([`Orphans::AfterFirstElection`]). Counted from the group's first arrival, T1 runs out
    /// while a node's directory still learns the swarm, so the orphans of a forming swarm
    /// elect over partial groups that each change of the group restarts (7,000-9,000
    /// elections measured in a 500-node swarm). The policy starts one election once the
    /// directory settled.
    pub fn with_start_policy(&self) -> ElectionConfig {
        ElectionConfig { orphans: Orphans::AfterFirstElection, ..self.clone() }
    }

    /// The heartbeat period, if heartbeats are on.
    pub fn alive_interval(&self) -> Option<Duration> {
        (self.alive_interval_ms > 0).then(|| Duration::from_millis(self.alive_interval_ms))
    }
    /// T1: coordinator silence.
    pub fn t1(&self) -> Option<Duration> {
        self.alive_interval().map(|a| times(a, self.alive_error_factor))
    }
    /// The longest wait for a silent leader: T1 x `alive_all_every` for a member that does not
    /// hear every beat (`election::beats`).
    pub fn t1_longest(&self) -> Option<Duration> {
        let every = if self.algorithm.beats_to_successors() { self.alive_all_every.max(1) } else { 1 };
        self.t1().map(|t1| times(t1, every))
    }
    pub fn t2(&self) -> Duration {
        Duration::from_millis(self.answer_timeout_ms)
    }
    pub fn t3(&self) -> Duration {
        Duration::from_millis(self.coordinator_timeout_ms)
    }
    pub fn t4(&self) -> Duration {
        Duration::from_millis(self.nomination_timeout_ms)
    }
    pub fn echo_ack_timeout(&self) -> Duration {
        Duration::from_millis(self.echo_ack_timeout_ms)
    }
    pub fn echo_probe_interval(&self) -> Option<Duration> {
        (self.echo_probe_interval_ms > 0).then(|| Duration::from_millis(self.echo_probe_interval_ms))
    }
    pub fn echo_heartbeat_interval(&self) -> Option<Duration> {
        (self.echo_heartbeat_interval_ms > 0).then(|| Duration::from_millis(self.echo_heartbeat_interval_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for a in Algorithm::ALL {
            assert_eq!(a.name().parse::<Algorithm>(), Ok(a));
        }
        assert_eq!("Fast_Bully".parse::<Algorithm>(), Ok(Algorithm::FastBully));
        assert!("paxos".parse::<Algorithm>().is_err());
    }

    #[test]
    fn validation() {
        assert!(ElectionConfig::default().validate().is_ok());
        let bad = ElectionConfig { answer_timeout_ms: 0, ..Default::default() };
        assert!(matches!(bad.validate(), Err(ConfigError::TooSmall { field: "answer_timeout_ms", .. })));
        let c = ElectionConfig::default();
        assert_eq!(c.t1(), Some(Duration::from_secs(3)));
        let off = ElectionConfig { alive_interval_ms: 0, ..Default::default() };
        assert_eq!(off.t1(), None);
        let never = ElectionConfig { alive_all_every: 0, ..Default::default() };
        assert!(matches!(never.validate(), Err(ConfigError::TooSmall { field: "alive_all_every", .. })));
        let nobody = ElectionConfig { alive_successors: 0, ..Default::default() };
        assert!(matches!(nobody.validate(), Err(ConfigError::TooSmall { field: "alive_successors", .. })));
        let seed = ElectionConfig { alive_all_every: 1, alive_successors: 0, ..Default::default() };
        assert!(seed.validate().is_ok(), "every beat to everyone needs no successors");
        let hourly = ElectionConfig { alive_interval_ms: 3_600_001, ..Default::default() };
        assert!(matches!(hourly.validate(), Err(ConfigError::TooLarge { field: "alive_interval_ms", .. })));
        let huge = ElectionConfig { alive_all_every: 1_001, ..Default::default() };
        assert!(matches!(huge.validate(), Err(ConfigError::TooLarge { field: "alive_all_every", .. })));
    }
}

#[cfg(test)]
mod answering_only_tests {
    use super::*;
    use crate::driver::Input;
    use crate::membership::Membership;
    use crate::testkit::Net;
    use crate::time::Time;
    use std::sync::Arc;

    /// With a start policy (the orphan rule only after the first election) no algorithm
    /// starts one by itself, given only its group; an election one process starts still elects the
    /// highest, and a leader that then goes silent, with no failure report, is still replaced
    /// by the heartbeat watch.
    #[test]
    fn with_a_start_policy_no_orphan_starts_and_a_silent_leader_is_still_replaced() {
        for a in
            [Algorithm::Bully, Algorithm::FastBully, Algorithm::Ring, Algorithm::ChangRoberts, Algorithm::Villadangos]
        {
            let cfg =
                ElectionConfig { alive_interval_ms: 100, alive_error_factor: 3, ..ElectionConfig::for_algorithm(a) }
                    .with_start_policy();
            let mut net = Net::new(5, cfg);
            net.detector = false;
            for i in 0..net.len() {
                let g = net.group.clone();
                net.input(i, Input::Membership(g));
            }
            net.run_until_quiet(Time::from_millis(5_000));
            assert_eq!(net.started.iter().sum::<u64>(), 0, "{a:?}: nobody starts by itself");
            net.start_at(Time::from_millis(5_000), 0);
            net.run_until_quiet(Time::from_millis(10_000));
            assert!(net.all_agree_on(net.id(4)), "{a:?}: the highest is elected: {:?}", net.leaders());
            net.crash_at(Time::from_millis(10_000), 4);
            net.run_until_quiet(Time::from_millis(20_000));
            assert!(net.all_agree_on(net.id(3)), "{a:?}: the silent leader is replaced: {:?}", net.leaders());
        }
    }

    /// With a start policy, a process that an election has reached and that is then left
    /// without a leader (here: taken out of the group and put back, which makes Villadangos
    /// forget its leader) still holds an election after T1, and the group ends naming one
    /// leader again.
    #[test]
    fn with_a_start_policy_an_orphan_after_the_first_election_elects() {
        let a = Algorithm::Villadangos;
        let cfg = ElectionConfig { alive_interval_ms: 100, alive_error_factor: 3, ..ElectionConfig::for_algorithm(a) }
            .with_start_policy();
        let mut net = Net::new(5, cfg);
        for i in 0..net.len() {
            let g = net.group.clone();
            net.input(i, Input::Membership(g));
        }
        net.start_at(Time::ZERO, 0);
        net.run_until_quiet(Time::from_millis(5_000));
        assert!(net.all_agree_on(net.id(4)), "{a:?}: {:?}", net.leaders());
        let started = net.started.iter().sum::<u64>();
        let full = net.group.clone();
        let without = Arc::new(Membership::new(full.ranks().iter().copied().filter(|r| r.id != net.id(0))));
        net.input(0, Input::Membership(without));
        net.input(0, Input::Membership(full));
        assert_eq!(net.leaders()[0], None, "{a:?}: process 0 forgot its leader");
        net.run_until_quiet(Time::from_millis(10_000));
        assert!(net.started[0] > 0 && net.started.iter().sum::<u64>() > started, "{a:?}: the orphan elected");
        assert!(net.all_agree_on(net.id(4)), "{a:?}: {:?}", net.leaders());
    }

    /// Every algorithm with heartbeats starts an election by itself (the orphan rule) once
    /// each process knows the group; answering only, none does, and all of them still answer
    /// an election that one process starts, to a leader every process names.
    #[test]
    fn answering_only_processes_start_nothing_and_still_answer() {
        for a in
            [Algorithm::Bully, Algorithm::FastBully, Algorithm::Ring, Algorithm::ChangRoberts, Algorithm::Villadangos]
        {
            let base =
                ElectionConfig { alive_interval_ms: 100, alive_error_factor: 3, ..ElectionConfig::for_algorithm(a) };
            for (cfg, expect_start) in [(base.clone(), true), (base.answering_only(), false)] {
                let mut net = Net::new(5, cfg);
                for i in 0..net.len() {
                    let g = net.group.clone();
                    net.input(i, Input::Membership(g));
                }
                net.run_until_quiet(Time::from_millis(5_000));
                let started: u64 = net.started.iter().sum();
                assert_eq!(started > 0, expect_start, "{a:?}: elections started by themselves: {started}");
                if !expect_start {
                    assert!(net.leaders().iter().all(Option::is_none), "{a:?}: nobody names a leader");
                    net.start_at(Time::from_millis(5_000), 0);
                    net.run_until_quiet(Time::from_millis(20_000));
                    let top = net.id(net.highest_alive().unwrap_or(0));
                    assert!(
                        net.all_agree_on(top),
                        "{a:?}: answering-only processes elect when asked: {:?}",
                        net.leaders()
                    );
                }
            }
        }
    }
}
