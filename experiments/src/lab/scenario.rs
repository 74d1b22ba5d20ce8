//! An election experiment: its configuration ([`Scenario`], from flags or a JSON/TOML file),
//! how a seed turns it into a concrete simulation, and the [`Outcome`] of one run.
//!
//! How a seed is used (everything from one `ChaCha8Rng::seed_from_u64(seed)`, in this order):
//! ranks (random 256-bit ids; for echo a random capacity in `0..capacities` as the priority;
//! process index `i` gets the `i`-th lowest rank), the echo topology, the latency model's
//! placement (matrix), the processes down from the start, the initiators, the crash-during
//! victims and times, the recovery times, the partition, the frozen process; the same RNG
//! then drives the run itself.
//!
//! Choices:
//! - `crash_before` processes are down from time zero and never reported (see the engine).
//! - `crash_during` crashes K distinct, initially live processes at times uniform in
//!   `[0, W]`, W being the *crash window*: unless given, the time of agreement of a dry run
//!   of the same seed without the faults (at least 1 ms).
//! - `recover`: every crashed process comes back at a uniform time in `(t, t + W]` after its
//!   crash time `t` (time 0 for `crash_before`).
//! - **Starting, as a node does.** A node's election first gets its group from the member
//!   directory, then its start policy (`overlay::detect::start`) starts elections: the
//!   highest member once the directory settled, any other that still names no leader after a
//!   fallback delay. Here every live process gets its group at time zero ([`Sim::boot`]) and
//!   the initiators get `Start` at time zero: they stand in for the policy's starts, any set
//!   of them rather than only the policy's choice, so that every start pattern is tested. The
//!   policy's other guarantee, that a process naming no leader acts by itself, is with
//!   heartbeats the algorithms' own orphan T1, which the boot arms; the policy's delays
//!   (seconds of directory settling, which the simulator has no directory for) are not run,
//!   and running them would add starts to every case. Without the boot, a highest process
//!   cut off before any message reaches it and healed before any detector report would
//!   handle no input at all and stay leaderless for good under a lower coordinator.
//! - Initiators are drawn among the processes live at the start. An election needs someone
//!   who wants it: for the complete-graph algorithms the first initiator never crashes; for
//!   echo, every connected component left after the crashes (without `recover`) keeps an
//!   initiator that does not crash. Otherwise "no leader" would be the right outcome.
//! - Timeouts: the ring lap timeout is raised to at least 4 x N x the largest one-way
//!   latency, the echo acknowledgement timeout to at least 8 x (eccentricity of process 0) x
//!   the largest latency. Explicit `timeouts` override these.
//! - **How a run ends.** Without heartbeats (`alive_interval_ms = 0`) at quiescence. With
//!   them nothing is ever quiet, so the run ends *settled*: no process is in an election and
//!   none decided or started one for a window of T1 + T2 + T3 + T4 + one alive interval
//!   after the last fault (longer than any timer of the bully family, so a wrong but quiet
//!   state shows up as one; an election still running is waited for, lap timers included).
//! - At least one process must stay up: `crash_before + crash_during <= N - 1`.

use crate::lab::spec::{Amount, Initiators};
use crate::sim::engine::{RunEnd, Sim, SimError, SimSetup};
use crate::sim::faults::{Fault, FaultPlan, NetworkFaults};
use crate::sim::latency::LatencySpec;
use crate::sim::metrics::Metrics;
use crate::sim::topology::TopologySpec;
use crate::sim::{check, Verdict};
use overlay::election::{Algorithm, ElectionConfig};
use overlay::{Election, NodeId, Rank, Time};
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Optional timeout overrides (milliseconds).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timeouts {
    pub answer_timeout_ms: Option<u64>,
    pub coordinator_timeout_ms: Option<u64>,
    pub nomination_timeout_ms: Option<u64>,
    pub lap_timeout_ms: Option<u64>,
    pub echo_ack_timeout_ms: Option<u64>,
}

/// A process frozen at `at_ms` for `for_ms` (a stopped process: it keeps its state and its
/// connections, and handles nothing meanwhile).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FreezeSpec {
    pub at_ms: u64,
    pub for_ms: u64,
    /// Freeze the highest process live at start (the leader-to-be) instead of a random one.
    #[serde(default)]
    pub leader: bool,
}

/// A partition of a random `fraction` of the processes at `at_ms`, optionally healed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionSpec {
    pub at_ms: u64,
    pub fraction: f64,
    #[serde(default)]
    pub heal_at_ms: Option<u64>,
}

/// One election experiment (everything but the seed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Scenario {
    pub algorithm: Algorithm,
    pub nodes: usize,
    pub initiators: Initiators,
    pub crash_before: Amount,
    pub crash_during: usize,
    pub crash_window_ms: Option<u64>,
    pub recover: bool,
    pub latency: LatencySpec,
    pub loss: f64,
    pub dup: f64,
    pub reorder: f64,
    /// Largest extra delay of a reordered message.
    pub reorder_delay_ms: u64,
    /// Loss, duplication and reordering stop for messages sent from this time on (none:
    /// they last the whole run).
    pub net_faults_until_ms: Option<u64>,
    pub detect_delay_ms: u64,
    /// A send to an unreachable process fails after this (none: after a round trip).
    pub connect_timeout_ms: Option<u64>,
    /// A message waiting this long for a frozen process is reported failed to its sender
    /// (none: never).
    pub request_timeout_ms: Option<u64>,
    /// Heartbeat period: the leader's `Alive` (T1 = 3 x this) or, for echo, the probe period;
    /// 0 turns them off (runs then end at quiescence).
    pub alive_interval_ms: u64,
    /// Echo only.
    pub topology: TopologySpec,
    /// Echo only: capacities are drawn from `0..capacities` (0: all equal, ids decide).
    pub capacities: u64,
    pub partition: Option<PartitionSpec>,
    pub freeze: Option<FreezeSpec>,
    /// Virtual time limit.
    pub time_limit_ms: u64,
    /// Event budget (guards against runaway runs).
    pub max_events: u64,
    pub count_bytes: bool,
    pub timeouts: Timeouts,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            algorithm: Algorithm::ChangRoberts,
            nodes: 16,
            initiators: Initiators::All,
            crash_before: Amount::Count(0),
            crash_during: 0,
            crash_window_ms: None,
            recover: false,
            latency: LatencySpec::Constant(Duration::from_millis(5)),
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            reorder_delay_ms: 20,
            net_faults_until_ms: None,
            detect_delay_ms: 100,
            connect_timeout_ms: None,
            request_timeout_ms: None,
            alive_interval_ms: 0,
            topology: TopologySpec::RandomRegular { degree: 4 },
            capacities: 1_000,
            partition: None,
            freeze: None,
            time_limit_ms: 24 * 3_600_000,
            max_events: 2_000_000_000,
            count_bytes: false,
            timeouts: Timeouts::default(),
        }
    }
}

/// A scenario that cannot be run.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("nodes must be at least 1 (got {0})")]
    NoNodes(usize),
    #[error("nodes must be at most 50,000,000 (got {0})")]
    TooManyNodes(usize),
    #[error("crash-before ({before}) plus crash-during ({during}) must leave at least one of {nodes} processes up")]
    TooManyCrashes { before: usize, during: usize, nodes: usize },
    #[error("{name} must be a probability in [0, 1], got {value}")]
    Rate { name: &'static str, value: f64 },
    #[error("partition fraction must be in [0, 1], got {0}")]
    PartitionFraction(f64),
    #[error("heal time {heal} ms is before the partition at {at} ms")]
    HealBeforePartition { at: u64, heal: u64 },
    #[error("a freeze must last at least 1 ms")]
    EmptyFreeze,
    #[error("time limit must be positive")]
    NoTime,
    #[error(transparent)]
    Latency(#[from] crate::sim::latency::MatrixError),
    #[error(transparent)]
    Sim(#[from] SimError),
}

/// The result of one seeded run.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub algorithm: Algorithm,
    pub nodes: usize,
    pub seed: u64,
    pub end: RunEnd,
    pub verdict: Verdict,
    pub metrics: Metrics,
    /// Total messages sent.
    pub messages: u64,
    /// Virtual time of the last leader decision of a process live at the end (µs).
    pub agreement_us: Option<u64>,
    /// Virtual time when the run stopped (µs).
    pub end_us: u64,
    /// The crash window used (µs).
    pub crash_window_us: u64,
    /// Time of the last scheduled fault (µs).
    pub last_fault_us: u64,
    /// Time from the last fault to the last decision or election start, if any came after it
    /// (µs): how long the system took to settle.
    pub settle_us: Option<u64>,
    pub crashed_during: usize,
    pub down_at_start: usize,
    /// Wall-clock seconds the run took (the measured run only, not the dry run).
    pub wall_secs: f64,
    /// `(process id, leader it names)` for every live process, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leaders: Option<Vec<(String, Option<String>)>>,
}

impl Outcome {
    /// Safety, agreement and liveness held.
    pub fn ok(&self) -> bool {
        self.verdict.ok()
    }
}

impl Scenario {
    /// Check the numbers before anything is built.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.nodes == 0 {
            return Err(ScenarioError::NoNodes(0));
        }
        if self.nodes > 50_000_000 {
            return Err(ScenarioError::TooManyNodes(self.nodes));
        }
        let before = self.crash_before.of(self.nodes);
        if before + self.crash_during >= self.nodes {
            return Err(ScenarioError::TooManyCrashes { before, during: self.crash_during, nodes: self.nodes });
        }
        for (name, value) in [("loss", self.loss), ("dup", self.dup), ("reorder", self.reorder)] {
            if !(0.0..=1.0).contains(&value) {
                return Err(ScenarioError::Rate { name, value });
            }
        }
        if let Some(p) = &self.partition {
            if !(0.0..=1.0).contains(&p.fraction) {
                return Err(ScenarioError::PartitionFraction(p.fraction));
            }
            if let Some(h) = p.heal_at_ms {
                if h < p.at_ms {
                    return Err(ScenarioError::HealBeforePartition { at: p.at_ms, heal: h });
                }
            }
        }
        if self.freeze.as_ref().is_some_and(|f| f.for_ms == 0) {
            return Err(ScenarioError::EmptyFreeze);
        }
        if self.time_limit_ms == 0 {
            return Err(ScenarioError::NoTime);
        }
        Ok(())
    }

    /// The election configuration this scenario runs with.
    pub fn election_config(&self, eccentricity: Option<u32>) -> ElectionConfig {
        let mut c = ElectionConfig::for_algorithm(self.algorithm);
        c.alive_interval_ms = self.alive_interval_ms;
        c.echo_probe_interval_ms = self.alive_interval_ms;
        let ub_ms = self.latency.upper_bound().map_or(500, |d| d.as_millis() as u64).max(1)
            + if self.reorder > 0.0 { self.reorder_delay_ms } else { 0 };
        // The ring algorithms' lap timers scale with the group over this bound
        // (`ElectionConfig::hop_delay_ms`).
        c.hop_delay_ms = ub_ms;
        if let Some(e) = eccentricity {
            c.echo_ack_timeout_ms = c.echo_ack_timeout_ms.max(8 * e as u64 * ub_ms);
        }
        let t = &self.timeouts;
        if let Some(v) = t.answer_timeout_ms {
            c.answer_timeout_ms = v;
        }
        if let Some(v) = t.coordinator_timeout_ms {
            c.coordinator_timeout_ms = v;
        }
        if let Some(v) = t.nomination_timeout_ms {
            c.nomination_timeout_ms = v;
        }
        if let Some(v) = t.lap_timeout_ms {
            // A lap timeout set by hand is the lap timer.
            c.lap_timeout_ms = v;
            c.hop_delay_ms = 0;
        }
        if let Some(v) = t.echo_ack_timeout_ms {
            c.echo_ack_timeout_ms = v;
        }
        c
    }

    /// Build the simulation of `seed`; `window` is the crash window (`None`: no
    /// during-election faults, the dry run). Returns the simulator, the count of processes
    /// down from the start and the time of the last scheduled fault.
    pub fn build(&self, seed: u64, window: Option<Duration>) -> Result<(Sim, usize, Time), ScenarioError> {
        self.validate()?;
        let n = self.nodes;
        let echo = self.algorithm == Algorithm::Echo;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut ranks: Vec<Rank> = (0..n)
            .map(|_| {
                let id = NodeId(rng.gen());
                let prio = if echo && self.capacities > 0 { rng.gen_range(0..self.capacities) } else { 0 };
                Rank::new(prio, id)
            })
            .collect();
        // Simulator index = rank order. Every later draw (topology, crashes, initiators) is
        // independent of rank, so this loses no randomness, and ring neighbours are adjacent
        // in memory (much faster at N = 100,000).
        ranks.sort_unstable();
        let topology = echo.then(|| self.topology.build(n, &mut rng));
        let ecc = topology.as_ref().map(|t| {
            let l = crate::sim::topology::eccentricity(t, 0);
            l.max(1)
        });
        let latency = self.latency.build(n, &mut rng)?;
        let before = self.crash_before.of(n);
        let down: Vec<u32> = sample(&mut rng, n, before).into_iter().map(|i| i as u32).collect();
        let mut is_down = vec![false; n];
        for &d in &down {
            is_down[d as usize] = true;
        }
        let live: Vec<u32> = (0..n as u32).filter(|&i| !is_down[i as usize]).collect();
        let mut starters: Vec<u32> = match self.initiators {
            Initiators::All => live.clone(),
            Initiators::Count(k) => {
                let k = k.min(live.len());
                let mut v: Vec<u32> = sample(&mut rng, live.len(), k).into_iter().map(|i| live[i]).collect();
                v.sort_unstable();
                v
            }
        };
        // An election needs someone who wants it (see the module doc). Complete-graph
        // algorithms: the first initiator never crashes during the election. Echo: every
        // connected component of the topology left after the during-election crashes gets an
        // initiator that does not crash (its lowest-index process, if none was drawn).
        let mut plan = FaultPlan::default();
        let mut victims: Vec<u32> = Vec::new();
        let w_us = window.map(|w| w.as_micros().max(1) as u64);
        if w_us.is_some() {
            let protected: Vec<u32> = match &topology {
                Some(_) => Vec::new(),
                None => starters.first().copied().into_iter().collect(),
            };
            let candidates: Vec<u32> = live.iter().copied().filter(|i| !protected.contains(i)).collect();
            let k = self.crash_during.min(candidates.len());
            victims = sample(&mut rng, candidates.len(), k).into_iter().map(|i| candidates[i]).collect();
        }
        if let Some(t) = &topology {
            let mut gone = is_down.clone();
            if !self.recover {
                for &v in &victims {
                    gone[v as usize] = true;
                }
            }
            let label = t.components(|i| !gone[i as usize], |_, _| true);
            let comps = label.iter().filter(|&&c| c != u32::MAX).max().map_or(0, |&m| m as usize + 1);
            let mut has: Vec<bool> = vec![false; comps];
            for &s in &starters {
                if !victims.contains(&s) && label[s as usize] != u32::MAX {
                    has[label[s as usize] as usize] = true;
                }
            }
            for &i in &live {
                let c = label[i as usize];
                if c != u32::MAX && !has[c as usize] && !victims.contains(&i) {
                    has[c as usize] = true;
                    if !starters.contains(&i) {
                        starters.push(i);
                    }
                }
            }
            starters.sort_unstable();
        }
        if let Some(w_us) = w_us {
            for v in victims {
                let t = rng.gen_range(0..=w_us);
                plan.push(Time::from_micros(t), Fault::Crash(v));
                if self.recover {
                    let r = t + rng.gen_range(1..=w_us);
                    plan.push(Time::from_micros(r), Fault::Recover(v));
                }
            }
            if self.recover {
                for &d in &down {
                    plan.push(Time::from_micros(rng.gen_range(1..=w_us)), Fault::Recover(d));
                }
            }
            if let Some(p) = &self.partition {
                let k = (p.fraction * n as f64).round() as usize;
                let mut sides = vec![0u16; n];
                for i in sample(&mut rng, n, k.min(n)) {
                    sides[i] = 1;
                }
                plan.push(Time::from_millis(p.at_ms), Fault::Partition(sides));
                if let Some(h) = p.heal_at_ms {
                    plan.push(Time::from_millis(h), Fault::Heal);
                }
            }
            if let Some(f) = &self.freeze {
                let who = if f.leader { live.last().copied() } else { Some(live[rng.gen_range(0..live.len())]) };
                if let Some(who) = who {
                    plan.push(Time::from_millis(f.at_ms), Fault::Freeze(who));
                    plan.push(Time::from_millis(f.at_ms + f.for_ms), Fault::Thaw(who));
                }
            }
        }
        let mut last_fault = plan.last();
        if let Some(u) = self.net_faults_until_ms.filter(|_| self.has_net_faults()) {
            last_fault = last_fault.max(Time::from_millis(u));
        }
        let setup = SimSetup {
            ranks,
            election: self.election_config(ecc),
            latency,
            faults: NetworkFaults {
                loss: self.loss,
                duplicate: self.dup,
                reorder: self.reorder,
                reorder_delay: Duration::from_millis(self.reorder_delay_ms),
                until: self.net_faults_until_ms.map(Time::from_millis),
            },
            detect_delay: Duration::from_millis(self.detect_delay_ms),
            connect_timeout: self.connect_timeout_ms.map(Duration::from_millis),
            request_timeout: self.request_timeout_ms.map(Duration::from_millis),
            topology,
            count_bytes: self.count_bytes,
        };
        let mut sim = Sim::new(setup, rng)?;
        for &d in &down {
            sim.down_from_start(d)?;
        }
        sim.announce_topology();
        sim.boot();
        for s in starters {
            sim.start_at(Time::ZERO, s)?;
        }
        sim.schedule(plan)?;
        Ok((sim, before, last_fault))
    }

    /// True if the scenario has faults that happen during the election.
    pub fn has_during_faults(&self) -> bool {
        self.crash_during > 0
            || self.partition.is_some()
            || self.freeze.is_some()
            || (self.recover && self.crash_before.of(self.nodes) > 0)
    }

    /// True if messages are lost, duplicated or reordered.
    pub fn has_net_faults(&self) -> bool {
        self.loss > 0.0 || self.dup > 0.0 || self.reorder > 0.0
    }

    /// How long nothing may change before a run with heartbeats counts as settled: longer
    /// than any timer that can still be pending (the longest T1, T2, T3, T4) plus one
    /// heartbeat.
    pub fn settle_window(&self) -> Duration {
        let c = self.election_config(None);
        let t1 = c.t1_longest().unwrap_or_default();
        t1 + c.t2() + c.t3() + c.t4() + Duration::from_millis(self.alive_interval_ms)
    }

    /// Run a built simulation to its end: quiescence without heartbeats; with them, until
    /// nothing has changed for [`Self::settle_window`] after `last_fault` (or the limits).
    pub fn run_to_end(&self, sim: &mut Sim, last_fault: Time) -> RunEnd {
        let limit = Time::from_millis(self.time_limit_ms);
        if self.alive_interval_ms == 0 {
            return sim.run_until(limit, self.max_events);
        }
        let window = self.settle_window();
        let mut target = last_fault + window;
        loop {
            let used = sim.metrics().events;
            let end = sim.run_until(target.min(limit), self.max_events.saturating_sub(used));
            if end != RunEnd::TimeLimit {
                return end;
            }
            let since = sim.last_change().max(last_fault);
            if target >= since + window && !sim.any_in_election() {
                return RunEnd::Settled;
            }
            if target >= limit {
                return RunEnd::TimeLimit;
            }
            // An election still running waits for its own timers (a ring lap), however long.
            target = (since + window).max(target + window);
        }
    }

    /// Run `seed` to quiescence (or the limits) and judge it.
    pub fn run(&self, seed: u64, keep_leaders: bool) -> Result<Outcome, ScenarioError> {
        let window = if self.has_during_faults() {
            Some(match self.crash_window_ms {
                Some(ms) => Duration::from_millis(ms.max(1)),
                None => {
                    let (mut dry, _, last) = self.build(seed, None)?;
                    self.run_to_end(&mut dry, last);
                    let t = agreement_time(&dry).unwrap_or(dry.now());
                    Duration::from_micros(t.as_micros().max(1_000))
                }
            })
        } else {
            None
        };
        let (mut sim, down, last_fault) = self.build(seed, window)?;
        let started = std::time::Instant::now();
        let end = self.run_to_end(&mut sim, last_fault);
        let wall_secs = started.elapsed().as_secs_f64();
        let verdict = check(&sim, end);
        let metrics = sim.metrics_snapshot();
        let leaders = keep_leaders.then(|| {
            (0..sim.len() as u32)
                .filter_map(|i| sim.process(i).map(|p| (sim.rank(i).id.to_string(), p.leader().map(|l| l.to_string()))))
                .collect()
        });
        Ok(Outcome {
            algorithm: self.algorithm,
            nodes: self.nodes,
            seed,
            end,
            messages: metrics.messages(),
            crashed_during: metrics.crashes as usize,
            metrics,
            agreement_us: agreement_time(&sim).map(|t| t.as_micros()),
            end_us: sim.now().as_micros(),
            crash_window_us: window.map_or(0, |w| w.as_micros() as u64),
            last_fault_us: last_fault.as_micros(),
            settle_us: (sim.last_change() > last_fault).then(|| sim.last_change().as_micros() - last_fault.as_micros()),
            down_at_start: down,
            wall_secs,
            verdict,
            leaders,
        })
    }
}

/// The last leader decision among processes live at the end.
pub fn agreement_time(sim: &Sim) -> Option<Time> {
    (0..sim.len() as u32).filter(|&i| sim.is_alive(i)).filter_map(|i| sim.decided_at(i)).max()
}
