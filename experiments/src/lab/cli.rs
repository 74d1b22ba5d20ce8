//! The `peerage-lab` command line (clap derive).
//!
//! Every subcommand is one variant of [`Command`] with its own argument struct and a `run`
//! function in its module: adding `peerage-lab superpeers` is one variant here and one arm in
//! [`Command::run`]. Flag values are parsed by the value types' `FromStr`, so a bad value is a
//! clap error that names the flag and says what was expected; experiment configs that parse
//! but cannot run (N = 0, too many crashes, ...) are reported by [`crate::lab::scenario`] and
//! exit non-zero.

use crate::lab::spec::{Amount, Initiators, SeedRange};
use crate::sim::latency::LatencySpec;
use crate::sim::topology::TopologySpec;
use clap::{Args, Parser, Subcommand};
use overlay::election::Algorithm;
use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;

/// Peerage's experiment lab: deterministic simulations of the election algorithms.
#[derive(Debug, Parser)]
#[command(name = "peerage-lab", version, about, long_about = None)]
pub struct Cli {
    /// More log output (-v: decisions and faults, -vv: every delivery).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run election experiments over seeds; print a table, write CSV and JSON.
    Elections(ElectionsArgs),
    /// Randomised safety/liveness sweep of small cases under every fault kind.
    Sweep(SweepArgs),
    /// Measure the simulator's throughput (delivered messages/s) and memory per process.
    Bench(BenchArgs),
    /// Super-peer selection at scale: both methods, baselines, CSV/JSON and plots.
    Superpeers(crate::superpeers::SuperpeersArgs),
    /// The echo election on mobile nodes (random waypoint) over a grid: time with a leader,
    /// leader changes and messages per node; CSV and plots.
    Mobility(MobilityArgs),
}

impl Command {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Command::Elections(a) => crate::lab::elections::run(a),
            Command::Sweep(a) => crate::lab::sweep::run(a),
            Command::Bench(a) => crate::lab::bench::run(a),
            Command::Superpeers(a) => crate::superpeers::run(a),
            Command::Mobility(a) => crate::lab::mobility::run(a),
        }
    }
}

/// A comma-separated list of algorithms, or `all`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlgorithmList(pub Vec<Algorithm>);

impl FromStr for AlgorithmList {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim().eq_ignore_ascii_case("all") {
            return Ok(AlgorithmList(Algorithm::ALL.to_vec()));
        }
        let v: Result<Vec<Algorithm>, _> = s.split(',').map(|a| a.parse::<Algorithm>()).collect();
        let v = v.map_err(|e| e.to_string())?;
        if v.is_empty() {
            return Err("no algorithm given".into());
        }
        Ok(AlgorithmList(v))
    }
}

/// A comma-separated list of group sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodesList(pub Vec<usize>);

impl FromStr for NodesList {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let v: Result<Vec<usize>, _> = s.split(',').map(|x| x.trim().replace('_', "").parse::<usize>()).collect();
        let v = v.map_err(|_| format!("bad node count list {s:?}: expected e.g. 16 or 16,64,256"))?;
        Ok(NodesList(v))
    }
}

fn duration_ms(s: &str) -> Result<u64, String> {
    crate::sim::units::parse_duration(s).map(|d| d.as_millis() as u64).map_err(|e| e.to_string())
}

fn probability(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("{s:?} is not a number"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not a probability in [0, 1]"))
    }
}

/// The experiment flags shared by `elections` and `bench`. Every flag overrides the config
/// file's value; unset flags keep it.
#[derive(Debug, Clone, Args)]
pub struct ExperimentArgs {
    /// A JSON or TOML experiment config file (the fields of a scenario; flags override it).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Algorithm(s): bully, fast-bully, ring, chang-roberts, villadangos, echo, a comma list, or all.
    #[arg(short, long)]
    pub algorithm: Option<AlgorithmList>,
    /// Number of processes (a comma list runs each size).
    #[arg(short, long, value_name = "N[,N...]")]
    pub nodes: Option<NodesList>,
    /// Processes that start an election at time 0: `all` or a count.
    #[arg(long, value_name = "K|all")]
    pub initiators: Option<Initiators>,
    /// Processes down from the start: a fraction (0.1) or a count (3).
    #[arg(long, value_name = "F|K")]
    pub crash_before: Option<Amount>,
    /// Processes that crash at random times within the election.
    #[arg(long, value_name = "K")]
    pub crash_during: Option<usize>,
    /// Window for the during-election crashes (default: the election's own duration, measured
    /// by a dry run of the same seed).
    #[arg(long, value_name = "DURATION", value_parser = duration_ms)]
    pub crash_window: Option<u64>,
    /// Crashed processes recover, with a fresh state, at a random later time.
    #[arg(long)]
    pub recover: bool,
    /// Message loss probability.
    #[arg(long, value_name = "P", value_parser = probability)]
    pub loss: Option<f64>,
    /// Message duplication probability.
    #[arg(long, value_name = "P", value_parser = probability)]
    pub dup: Option<f64>,
    /// Probability that a message is held back (and so reordered).
    #[arg(long, value_name = "P", value_parser = probability)]
    pub reorder: Option<f64>,
    /// Link latency: const:5ms, range:1ms..50ms, matrix:FILE[,jitter=0.1], internet, internet:metric.
    #[arg(long)]
    pub latency: Option<LatencySpec>,
    /// Failure-detector delay before PeerDown/PeerUp reports.
    #[arg(long, value_name = "DURATION", value_parser = duration_ms)]
    pub detect_delay: Option<u64>,
    /// Echo topology: regular:D, geometric:D or complete.
    #[arg(long)]
    pub topology: Option<TopologySpec>,
    /// Echo capacities drawn from 0..C (0: all equal).
    #[arg(long, value_name = "C")]
    pub capacities: Option<u64>,
    /// Partition a random fraction of processes at this time.
    #[arg(long, value_name = "DURATION", value_parser = duration_ms, requires = "partition_fraction")]
    pub partition_at: Option<u64>,
    /// Fraction of processes on the far side of the partition.
    #[arg(long, value_name = "F", value_parser = probability, requires = "partition_at")]
    pub partition_fraction: Option<f64>,
    /// Heal the partition at this time.
    #[arg(long, value_name = "DURATION", value_parser = duration_ms, requires = "partition_at")]
    pub heal_at: Option<u64>,
    /// Freeze a process (it handles nothing, nothing reports it) at this time.
    #[arg(long, value_name = "DURATION", value_parser = duration_ms, requires = "freeze_for")]
    pub freeze_at: Option<u64>,
    /// How long the frozen process stays frozen.
    #[arg(long, value_name = "DURATION", value_parser = duration_ms, requires = "freeze_at")]
    pub freeze_for: Option<u64>,
    /// Freeze the highest process (the leader-to-be) instead of a random one.
    #[arg(long, requires = "freeze_at")]
    pub freeze_leader: bool,
    /// Loss, duplication and reordering stop for messages sent after this time.
    #[arg(long, value_name = "DURATION", value_parser = duration_ms)]
    pub net_faults_until: Option<u64>,
    /// Heartbeat period (the leader's Alive, T1 = 3 x this; echo probes); 0 or unset: off.
    #[arg(long, value_name = "DURATION", value_parser = duration_ms)]
    pub heartbeat: Option<u64>,
    /// A send to an unreachable process fails after this (default: after a round trip).
    #[arg(long, value_name = "DURATION", value_parser = duration_ms)]
    pub connect_timeout: Option<u64>,
    /// A message waiting this long for a frozen process is reported failed to its sender.
    #[arg(long, value_name = "DURATION", value_parser = duration_ms)]
    pub request_timeout: Option<u64>,
    /// Virtual time limit.
    #[arg(long, value_name = "DURATION", value_parser = duration_ms)]
    pub time_limit: Option<u64>,
    /// Count serialised message bytes (postcard); costs O(message size) per message.
    #[arg(long)]
    pub count_bytes: bool,
    /// One seed.
    #[arg(long, conflicts_with = "seeds")]
    pub seed: Option<u64>,
    /// A seed range A..B (half-open).
    #[arg(long, value_name = "A..B")]
    pub seeds: Option<SeedRange>,
}

#[derive(Debug, Clone, Args)]
pub struct ElectionsArgs {
    #[command(flatten)]
    pub exp: ExperimentArgs,
    /// Write results.csv, runs.csv and results.json here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Leave the per-process leaders out of the JSON (large at N = 100,000).
    #[arg(long)]
    pub no_leaders: bool,
    /// Exit with status 2 if any run violated safety or liveness.
    #[arg(long)]
    pub strict: bool,
    /// Print the summary as a Markdown table (for docs/RESULTS.md) instead of a box table.
    #[arg(long)]
    pub markdown: bool,
}

#[derive(Debug, Clone, Args)]
pub struct SweepArgs {
    /// Algorithm(s) to sweep (comma list or all).
    #[arg(short, long, default_value = "all")]
    pub algorithm: AlgorithmList,
    /// Seeds A..B (half-open) or one seed.
    #[arg(long, value_name = "A..B", default_value = "0..1000")]
    pub seeds: SeedRange,
    /// Give every case this fault kind (default: each seed draws its kind).
    #[arg(long)]
    pub kind: Option<crate::lab::cases::FaultKind>,
    /// Worker threads.
    #[arg(short, long, default_value_t = 1)]
    pub jobs: usize,
    /// Also print the cases outside the assumptions that degraded.
    #[arg(long)]
    pub details: bool,
    /// Write one CSV row per case to this file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Print the table as Markdown (for docs/RESULTS.md).
    #[arg(long)]
    pub markdown: bool,
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub exp: ExperimentArgs,
}

#[derive(Debug, Clone, Args)]
pub struct MobilityArgs {
    /// Node counts.
    #[arg(short, long, value_name = "N[,N...]", default_value = "20,50,100")]
    pub nodes: NodesList,
    /// Mean node speeds, m/s (each leg's speed is uniform in [v/2, 3v/2]; 0 is static).
    #[arg(long, value_name = "V[,V...]", default_value = "1,5,10,20")]
    pub speeds: crate::lab::mobility::FloatList,
    /// Pause at each waypoint.
    #[arg(long, value_name = "D[,D...]", default_value = "0s,60s")]
    pub pauses: crate::lab::mobility::DurationList,
    /// Radio ranges, metres.
    #[arg(long, value_name = "R[,R...]", default_value = "150,250")]
    pub ranges: crate::lab::mobility::FloatList,
    /// The area, metres.
    #[arg(long, value_name = "WxH", default_value = "1000x1000")]
    pub area: crate::lab::mobility::Area,
    /// Measured virtual time per run.
    #[arg(long, value_name = "DURATION", default_value = "900s", value_parser = crate::lab::mobility::duration)]
    pub duration: std::time::Duration,
    /// Virtual time before measurement starts (every node starts at time 0).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = crate::lab::mobility::duration)]
    pub warmup: std::time::Duration,
    /// Seeds A..B (half-open) or one seed.
    #[arg(long, value_name = "A..B", default_value = "0..3")]
    pub seeds: SeedRange,
    /// Capacities drawn from 0..C (0: all equal, ids decide).
    #[arg(long, value_name = "C", default_value_t = 1000)]
    pub capacities: u64,
    /// Probability that one transmission attempt fails at the edge of the range.
    #[arg(long, value_name = "P", default_value = "0.5", value_parser = probability)]
    pub edge_loss: f64,
    /// How often positions and the radio graph are updated.
    #[arg(long, value_name = "DURATION", default_value = "100ms", value_parser = crate::lab::mobility::duration)]
    pub tick: std::time::Duration,
    /// Neighbour-discovery hello interval.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = crate::lab::mobility::duration)]
    pub hello: std::time::Duration,
    /// The echo leader's heartbeat interval (0s: no heartbeats).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = crate::lab::mobility::duration)]
    pub heartbeat: std::time::Duration,
    /// How long an echo node waits for its neighbours' acknowledgements before it sends its
    /// election to the silent ones again (a neighbour that moved away is then found by the
    /// failed send, instead of by the hellos 2-3 s later).
    #[arg(long, value_name = "DURATION", default_value = "500ms", value_parser = crate::lab::mobility::duration)]
    pub ack_timeout: std::time::Duration,
    /// The echo probe interval between neighbours (0s: no probes).
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = crate::lab::mobility::duration)]
    pub probe: std::time::Duration,
    /// Runs in parallel (results do not depend on it).
    #[arg(short, long, default_value_t = 1)]
    pub jobs: usize,
    /// Write nodes.csv, runs.csv and points.csv here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Also draw the figures (PNG and SVG) into the --out directory.
    #[arg(long, requires = "out")]
    pub plots: bool,
    /// Print the table as Markdown.
    #[arg(long)]
    pub markdown: bool,
    /// Exit with status 2 if a grid point's fraction of time with a leader is below F.
    #[arg(long, value_name = "F", value_parser = probability)]
    pub min_leader: Option<f64>,
}
