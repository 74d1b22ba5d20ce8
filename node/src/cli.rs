//! The `peerage` command line (clap derive): `peerage run` (one node) and `peerage swarm`
//! (N nodes in one process). Every `run` flag has the same key in the TOML `--config` file;
//! a flag given on the command line wins over the file.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(name = "peerage", version, about = "Peerage: a libp2p overlay that elects leaders and super peers")]
pub struct Cli {
    /// Log filter (tracing env-filter syntax), logs go to stderr. Without it RUST_LOG is used,
    /// else `info` for `run` and `warn` for `swarm` (N nodes' info lines would bury its
    /// progress bar).
    #[arg(long, global = true)]
    pub log: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one node (status as JSON lines on stdout).
    Run(RunArgs),
    /// Run N nodes in this process (or one shard's slice of them) and print a JSON report.
    Swarm(SwarmArgs),
    /// Work on swarm reports (merge the parts of a sharded swarm).
    Report(ReportArgs),
    /// A local testbed of hosts in network namespaces (needs root and iproute2).
    Testbed(TestbedArgs),
    /// Write cluster manifests for a sharded swarm (Kubernetes, or compose on one host).
    Deploy(DeployArgs),
}

#[derive(Debug, Args)]
pub struct DeployArgs {
    #[command(subcommand)]
    pub target: DeployTarget,
}

#[derive(Debug, Subcommand)]
pub enum DeployTarget {
    /// A headless Service, a StatefulSet of shards (Prometheus annotations) and a Job that
    /// collects and merges the report (`kubectl logs job/NAME-collect`).
    K8s(DeployCommon),
    /// One service per shard on one Docker host (up to about 100), parts in ./out.
    Compose(DeployCommon),
}

#[derive(Debug, Args)]
pub struct DeployCommon {
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub nodes: u32,
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub shards: u32,
    #[arg(long)]
    pub seed: u64,
    /// The container image (built from deploy/Dockerfile).
    #[arg(long, default_value = "peerage:latest")]
    pub image: String,
    /// Name of the Service/StatefulSet/Job (and the pods' prefix).
    #[arg(long, default_value = "peerage")]
    pub name: String,
    #[arg(long, default_value = "default")]
    pub namespace: String,
    #[arg(long, default_value_t = 20_000)]
    pub port_base: u16,
    #[arg(long, default_value_t = 7070)]
    pub control_port: u16,
    /// Port of the shards' /metrics and /part.
    #[arg(long, default_value_t = 9100)]
    pub http_port: u16,
    #[arg(long, value_enum, default_value = "tcp")]
    pub shard_transport: ShardTransportArg,
    /// CPU request per shard (Kubernetes quantity).
    #[arg(long, default_value = "1")]
    pub cpu: String,
    /// Memory request and limit per shard (Kubernetes quantity).
    #[arg(long, default_value = "4Gi")]
    pub memory: String,
    /// Write the manifests here instead of stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// `peerage swarm` flags for every shard, after `--`.
    #[arg(last = true)]
    pub swarm_args: Vec<String>,
}

#[derive(Debug, Args)]
pub struct TestbedArgs {
    #[command(subcommand)]
    pub command: TestbedCommand,
}

#[derive(Debug, Subcommand)]
pub enum TestbedCommand {
    /// Run an N-node swarm as one shard per host; optionally cut the hosts in two halves and
    /// heal them; merge the shards' parts into DIR/report.json. Flags after `--` go to every
    /// `peerage swarm` (for example `-- --latency internet --superpeers prefix`).
    Swarm {
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=250))]
        hosts: u32,
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=20000))]
        nodes: u32,
        #[arg(long)]
        seed: u64,
        /// Output directory (parts, logs, events, the merged report).
        #[arg(long)]
        out: PathBuf,
        /// Cut the halves apart this many seconds after the swarm's measurements.
        #[arg(long)]
        partition_after_s: Option<f64>,
        /// How long the halves stay apart.
        #[arg(long, default_value_t = 30.0)]
        partition_s: f64,
        /// How long the swarm runs after the heal.
        #[arg(long, default_value_t = 60.0)]
        heal_settle_s: f64,
        /// Give up (and tear down) after this many seconds.
        #[arg(long, default_value_t = 1200)]
        timeout_s: u64,
        #[arg(long, default_value_t = 20_000)]
        port_base: u16,
        #[arg(last = true)]
        swarm_args: Vec<String>,
    },
    /// Run a command in every host (env PEERAGE_HOST = its index, PEERAGE_HOSTS = every
    /// host's address) until all end or Ctrl-C; then tear down.
    Exec {
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=250))]
        hosts: u32,
        /// Directory for the hosts' logs (`host-<h>.log`).
        #[arg(long, default_value = ".")]
        logs: PathBuf,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Remove every testbed namespace left on this machine (and stop what runs in them).
    Clean,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    #[command(subcommand)]
    pub command: ReportCommand,
}

#[derive(Debug, Subcommand)]
pub enum ReportCommand {
    /// Merge the parts a sharded swarm's shards wrote into the one report a single-process
    /// swarm writes (with every node's row).
    Merge {
        /// Part files (every shard's, any order), or directories holding them (`*.json`).
        #[arg(required = true)]
        parts: Vec<PathBuf>,
        /// The testbed's event log (JSON lines): judge each cut and its heal.
        #[arg(long)]
        events: Option<PathBuf>,
        /// Also write the merged report to this file.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

/// How shards' nodes reach each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ShardTransportArg {
    Tcp,
    /// One UDP socket per node whatever its connections (TCP costs a descriptor each).
    Quic,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// TOML config file (keys: listen, bootstrap, algorithm, priority, identity, metrics,
    /// kad_protocol, scope, [election], [limits], [timing]).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Listen multiaddr (repeatable), e.g. /ip4/127.0.0.1/tcp/4001 or /ip4/0.0.0.0/udp/0/quic-v1.
    #[arg(long)]
    pub listen: Vec<String>,
    /// Bootstrap multiaddr (repeatable), ideally ending in /p2p/<peer id>.
    #[arg(long)]
    pub bootstrap: Vec<String>,
    /// Election algorithm: bully, fast-bully, ring, chang-roberts, villadangos, echo.
    #[arg(long)]
    pub algorithm: Option<String>,
    /// Election priority (for the echo election: the capacity). Higher wins.
    #[arg(long, visible_alias = "capacity")]
    pub priority: Option<u64>,
    /// Identity key file; created if missing. Without it the node gets a fresh id each run.
    #[arg(long)]
    pub identity: Option<PathBuf>,
    /// Serve Prometheus metrics on this host:port.
    #[arg(long)]
    pub metrics: Option<String>,
    /// Kademlia protocol name.
    #[arg(long)]
    pub kad_protocol: Option<String>,
    /// Election scope (group) number.
    #[arg(long)]
    pub scope: Option<u64>,
    /// Coordinator heartbeat period in ms (0 = off).
    #[arg(long)]
    pub alive_interval_ms: Option<u64>,
    /// Super-peer selection: off, prefix (reserved-prefix ids) or tokens (repulsion tokens).
    /// TOML: a [superpeer] table turns it on, its `method` chooses.
    #[arg(long)]
    pub superpeers: Option<String>,
    /// Wanted share of super peers, in (0, 0.5] (needs super peers on). TOML: [superpeer] share.
    #[arg(long)]
    pub sp_share: Option<f64>,
    /// Most members one super peer serves (needs super peers on). TOML: [superpeer] cluster_cap.
    #[arg(long)]
    pub sp_cap: Option<u32>,
    /// Emulate link latency with the seeded Internet model (needs --model-nodes and a seed);
    /// peers that emulate too see the model's RTT to this node. TOML: [emulation] latency.
    #[arg(long, value_enum)]
    pub latency: Option<SwarmLatency>,
    /// Places in the latency model (for a swarm: its node count). TOML: [emulation] model_nodes.
    #[arg(long)]
    pub model_nodes: Option<usize>,
    /// Seed of the latency model (default: --swarm-seed). TOML: [emulation] model_seed.
    #[arg(long)]
    pub model_seed: Option<u64>,
    /// With --node-index: be that node of the swarm with this seed (its key, and its place in
    /// the model), instead of an --identity file. TOML: [emulation] swarm_seed.
    #[arg(long)]
    pub swarm_seed: Option<u64>,
    /// The node's index in the swarm of --swarm-seed. TOML: [emulation] node_index.
    #[arg(long)]
    pub node_index: Option<usize>,
}

/// Emulated link latency between the in-process nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SwarmLatency {
    /// No added latency (loopback speed).
    None,
    /// The seeded Internet latency model: regions, cities, access delay, detours, jitter.
    Internet,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum SwarmTransport {
    Memory,
    Tcp,
}

#[derive(Debug, Args)]
pub struct SwarmArgs {
    /// Number of nodes (at most 5,000 in one process; with --shard, in each shard).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub nodes: u32,
    /// Election algorithm.
    #[arg(long, default_value = "bully")]
    pub algorithm: String,
    /// Transport between the in-process nodes.
    #[arg(long, value_enum, default_value = "memory")]
    pub transport: SwarmTransport,
    /// Give up waiting for convergence (and for each re-election) after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_s: u64,
    /// Seconds to wait after agreement before measuring the steady state.
    #[arg(long, default_value_t = 10)]
    pub settle_s: u64,
    /// Length of the steady-state measurement window in seconds.
    #[arg(long, default_value_t = 10)]
    pub measure_s: u64,
    /// Crash the leader this many seconds after the steady-state window (repeatable).
    #[arg(long)]
    pub kill_leader_at: Vec<f64>,
    /// Crash this fraction of the nodes (0..1) at --kill-fraction-at seconds after the window.
    #[arg(long)]
    pub kill_fraction: Option<f64>,
    #[arg(long, default_value_t = 0.0)]
    pub kill_fraction_at: f64,
    /// Coordinator heartbeat period in ms (0 = off); T1 = this x alive_error_factor.
    #[arg(long)]
    pub alive_interval_ms: Option<u64>,
    /// Random seed (node ports, bootstrap choices, kills). Default: random, printed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Give node i priority i (so the last node should win) instead of all 0.
    #[arg(long)]
    pub ranked: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Also write the report to this file. With --superpeers, the per-node rows and Vivaldi
    /// pairs go beside it: STEM_nN_sS_{nodes,pairs}[_after_kill].csv.gz.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Emulate link latency: every byte between two nodes is delayed by the model's one-way
    /// delay; ping measures it and Vivaldi coordinates are learned from it (report: `coords`).
    #[arg(long, value_enum, default_value = "none")]
    pub latency: SwarmLatency,
    /// Seed of the latency model (default: the swarm's --seed).
    #[arg(long)]
    pub latency_seed: Option<u64>,
    /// Keep at least this many connections per node (the peer manager's `target_low`; its
    /// `target_high` becomes at least twice that), so that each node measures RTTs to this
    /// many peers for its coordinate. Default: the node's own (6; nodes settle at ~12). With
    /// ~12 fixed peers even the simulator's Vivaldi stops near 0.17 median relative error,
    /// with 20 at 0.086; more connections cost CPU (--rotate-s changes the peers instead).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=24))]
    pub coord_peers: Option<u32>,
    /// The peer manager prunes idle connections above this many per node (its
    /// `target_high`; default 24, or twice --coord-peers; without emulated latency and
    /// without --superpeers 12: a gossipsub mesh of up to 8, a ring's two neighbours and two
    /// more, as loopback RTTs teach the coordinates nothing). With --superpeers it is at least
    /// 48: room for the overlay's 16 neighbours and a gossipsub mesh of up to 8 on top of 24.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub prune_above: Option<u32>,
    /// Close a connection with no open stream after this many milliseconds (libp2p's idle
    /// connection timeout; default from the node config, 10000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub idle_timeout_ms: Option<u64>,
    /// Ping period in seconds (RTT samples for the coordinates, and each connection's
    /// liveness check). Default with --latency internet: 2, longer above 400 nodes so that the
    /// whole swarm runs at most 200 ping rounds a second (its nodes share this machine's CPU;
    /// 5 s at 1,000 nodes); without emulated latency 60, as every RTT is loopback's.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub ping_s: Option<u64>,
    /// Every node swaps its oldest prunable connection for one to a random member about this
    /// often, so that its coordinate learns from a rotating sample of peers (0 = never).
    /// Default with --latency internet: three ping periods, or longer so that the whole swarm
    /// opens at most 10 connections a second for it (its nodes share this machine's CPU);
    /// without emulated latency never, as every RTT is loopback's and there is nothing to learn.
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub rotate_s: Option<u64>,
    /// Member-directory rumour fan-out: changed entries are pushed once to this many random
    /// peers (0 = digest anti-entropy only; default from the node config, 0).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=16))]
    pub members_push_fanout: Option<u32>,
    /// Run super-peer selection (off, prefix or tokens) and report its measures instead of
    /// the leader milestones.
    #[arg(long, default_value = "off")]
    pub superpeers: String,
    /// Wanted share of super peers, in (0, 0.5] (default 0.05 in a swarm).
    #[arg(long)]
    pub sp_share: Option<f64>,
    /// Most members one super peer serves (default: twice the mean cluster size).
    #[arg(long)]
    pub sp_cap: Option<u32>,
    /// The nodes' super-peer settings: a TOML file whose `[superpeer]` table is read (a node's
    /// config file, or the file `peerage-lab superpeers --sp-config` reads; its other tables
    /// are ignored). --superpeers chooses the method; --sp-share and --sp-cap override it.
    #[arg(long)]
    pub sp_config: Option<std::path::PathBuf>,
    /// Tell every node the swarm's size (--nodes, all shards together) instead of letting it
    /// estimate it (`[superpeer.estimate] known_size`): no estimate lookups, exactly
    /// share x nodes super peers, and with --superpeers prefix a set that depends on the
    /// seed's keys alone.
    #[arg(long)]
    pub sp_known_size: bool,
    /// Super peers count as converged after this many seconds without a change.
    #[arg(long, default_value_t = 10.0)]
    pub sp_stable_s: f64,
    /// Seconds after start-up before a node's first super-peer lookups (default: 2 + 0.02 x
    /// nodes, at most 30): lookups that start while the swarm is still joining time out on a
    /// busy machine.
    #[arg(long)]
    pub sp_start_delay_s: Option<f64>,
    /// Start no swarm-wide leader election (nodes only answer election messages): with
    /// --superpeers the swarm measures its clusters' elections instead.
    #[arg(long)]
    pub no_leader_election: bool,
    /// Crash this fraction of the super peers (at least one) after convergence.
    #[arg(long)]
    pub kill_superpeers: Option<f64>,
    /// Seconds after convergence at which --kill-superpeers strikes.
    #[arg(long, default_value_t = 5.0)]
    pub kill_superpeers_at: f64,
    /// Run shard i of M (`i/M`): nodes g with g mod M = i, in one swarm with the other shards
    /// (same seed, keys and latency model), over real sockets. Shard 0 measures the swarm;
    /// every shard writes its part of the report (`peerage report merge` joins them).
    #[arg(long)]
    pub shard: Option<String>,
    /// The shards' hosts (names or IPs, comma-separated; one entry: every shard on it). Node g
    /// listens at host(g mod M):(--port-base + g).
    #[arg(long, value_delimiter = ',', default_value = "127.0.0.1")]
    pub shard_hosts: Vec<String>,
    /// Node g of a sharded swarm listens on port --port-base + g.
    #[arg(long, default_value_t = 20_000)]
    pub port_base: u16,
    /// Transport between the shards' nodes.
    #[arg(long, value_enum, default_value = "tcp")]
    pub shard_transport: ShardTransportArg,
    /// Shard 0's control address, `host:port` or `unix:/path` (out of band: the testbed uses
    /// a Unix socket, which cutting links between hosts does not cut).
    #[arg(long, default_value = "127.0.0.1:7070")]
    pub control: String,
    /// How long shards wait for each other to join.
    #[arg(long, default_value_t = 120)]
    pub join_timeout_s: u64,
    /// Keep the swarm running this many seconds after its measurements (faults from outside,
    /// such as a testbed partition, land in the per-node role logs meanwhile).
    #[arg(long, default_value_t = 0.0)]
    pub hold_s: f64,
    /// Serve `/metrics` (gauges of this process's nodes) and, once written, `/part` (this
    /// process's report part) on this host:port.
    #[arg(long)]
    pub http: Option<std::net::SocketAddr>,
    /// After the run, keep serving --http until stopped (SIGTERM), so a collector can fetch
    /// `/part` (a cluster pod that ended would be restarted).
    #[arg(long, requires = "http")]
    pub linger: bool,
}
