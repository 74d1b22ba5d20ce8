//! `peerage-lab superpeers`: super-peer selection at scale (issue 4; seed 000, "Elections in
//! large-scale systems").
//!
//! For each population size N: build the Internet latency model and neighbour sets, run the
//! Vivaldi coordinate phase once ([`world`]), then run each selection method — reserved
//! prefix and repulsion tokens — as a message-level simulation of the sans-IO
//! [`overlay::superpeer::SuperPeerNode`] ([`protocol`]), optionally crash a share of the super
//! peers and let the clusters re-elect; compute the two baselines with global knowledge
//! (random and the centralised k-means yardstick, [`baseline`]); measure everything on the
//! TRUE model latency ([`measure`]); write CSV, JSON and plots ([`plot`]).
//!
//! Threads: the baselines run on their own thread while the protocols run, and `--jobs 2`
//! runs the two methods at once; the output is the same for any `--jobs` (each method seeds
//! its own RNG; everything is measured in order afterwards).
//!
//! Memory: per node, the latency model (~30 B), ids and index (~70 B), neighbour lists (64 B),
//! Vivaldi clients during the coordinate phase only, and each running method's protocol
//! nodes (~2.3 KB). The run samples the RSS and jemalloc's counters per phase ([`memory`]);
//! the peak comes in a method's first rounds (live data, not allocator overhead: session 4,
//! RESULTS.md), which `--stagger-rounds` keeps apart for the two methods.

pub mod baseline;
pub mod churn;
pub mod diagnose;
pub mod faults;
pub mod kmedian;
pub mod measure;
pub mod memory;
pub mod plot;
pub mod prefetch;
pub mod protocol;
pub mod world;

use anyhow::Context as _;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use measure::{measure, Measures};
use overlay::superpeer::{Method, SuperPeerConfig};
use overlay::Algorithm;
use protocol::{ProtoOutcome, ProtoParams, RoundStat};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

/// `peerage-lab superpeers` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct SuperpeersArgs {
    /// Population sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = vec![1000usize, 10000])]
    pub nodes: Vec<usize>,
    /// Methods: prefix, tokens (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = vec!["prefix".to_string(), "tokens".to_string()])]
    pub methods: Vec<String>,
    /// Wanted share of super peers.
    #[arg(long, default_value_t = 0.01)]
    pub share: f64,
    /// Cluster cap; default 1.5 / share.
    #[arg(long)]
    pub cap: Option<u32>,
    /// Election algorithm for the cluster re-election.
    #[arg(long, default_value = "bully")]
    pub algorithm: String,
    /// Seed of everything (model, ids, protocol RNG).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Vivaldi rounds; in each, every node samples each of its neighbours and
    /// `--vivaldi-fresh` random peers (see `world::VivaldiPhase`).
    #[arg(long, default_value_t = 40)]
    pub vivaldi_rounds: usize,
    /// Fresh uniformly random peers each node samples per Vivaldi round (at most 16).
    #[arg(long, default_value_t = 2)]
    pub vivaldi_fresh: usize,
    /// Sequential Vivaldi rounds (one thread, each sample reads the peer's current
    /// coordinate) instead of synchronous ones.
    #[arg(long)]
    pub vivaldi_in_place: bool,
    /// Protocol rounds at most (1 round = 1 s).
    #[arg(long, default_value_t = 150)]
    pub max_rounds: u32,
    /// Rounds without any change that count as converged.
    #[arg(long, default_value_t = 5)]
    pub stable_rounds: u32,
    /// Share of super peers crashed after convergence (0 = no failure phase).
    #[arg(long, default_value_t = 0.05)]
    pub crash: f64,
    /// Rounds allowed for recovery after the crash.
    #[arg(long, default_value_t = 60)]
    pub recovery_rounds: u32,
    /// What hurt the real swarm, simulated ([`faults`]): `off`, or `swarm` (rough figures of
    /// the 200-node swarms, not calibrated).
    #[arg(long, value_enum, default_value = "off")]
    pub faults: FaultPreset,
    /// A TOML file of fault settings (the keys of [`faults::Faults`]); keys it leaves out take
    /// the preset's values.
    #[arg(long)]
    pub faults_config: Option<PathBuf>,
    /// Token force law (see `overlay::superpeer::token`); each defaults to
    /// `SuperPeerConfig::default()`. Weight of the members' pull (0 = repulsion only).
    #[arg(long)]
    pub attraction: Option<f64>,
    /// Net force above which a token is considered for a move.
    #[arg(long)]
    pub force_threshold: Option<f64>,
    /// Weight of the repulsion between tokens.
    #[arg(long)]
    pub repulsion: Option<f64>,
    /// Repulsion cut-off, x the holder's cluster radius.
    #[arg(long)]
    pub repulsion_range: Option<f64>,
    /// Longest step of a token move, x the holder's cluster radius.
    #[arg(long)]
    pub max_step: Option<f64>,
    /// Fraction by which a move must lower the token's cost.
    #[arg(long)]
    pub min_gain: Option<f64>,
    /// Moves after which a token needs twice the gain.
    #[arg(long)]
    pub cooling: Option<f64>,
    /// Rounds a token must stay put before its holder promotes itself.
    #[arg(long, default_value_t = 10)]
    pub hold_rounds: u32,
    /// A promoted holder's move needs the gain x (1 + rounds since promotion / this);
    /// 0 = off. Default: `SuperPeerConfig::default()`.
    #[arg(long)]
    pub promoted_aging: Option<f64>,

    /// A node switches super peer only to one this factor nearer (predicted); 0 = never.
    #[arg(long, default_value_t = 0.9)]
    pub switch_factor: f64,
    /// Super peers a node keeps in its cache.
    #[arg(long, default_value_t = 6)]
    pub cache_size: usize,
    /// RTT measurements (pings) a normal node starts per round at most; 0 = attach by
    /// predicted RTT only (before session 4). Default: `SuperPeerConfig::default()`.
    #[arg(long)]
    pub probes_per_round: Option<u32>,
    /// A cached head is measured only if predicted below this factor x the current head's RTT.
    #[arg(long)]
    pub probe_margin: Option<f64>,
    /// Candidates nearest to a token's wanted point whose cost is evaluated for a move.
    #[arg(long)]
    pub move_shortlist: Option<u32>,
    /// Weight of the measured access-delay estimate in a token's cost (0 = the session-4
    /// law, no `HeadRtt` reports). Default: `SuperPeerConfig::default()`.
    #[arg(long)]
    pub access_weight: Option<f64>,
    /// Shrinkage of one member's access estimate, in [0, 1].
    #[arg(long)]
    pub access_shrink: Option<f64>,
    /// Split offers: a settled token jumps to an offered point if its removal cost is below
    /// this fraction of the offered gain; 0 = off (the session-5 law). Default:
    /// `SuperPeerConfig::default()` (0.5).
    #[arg(long)]
    pub split_ratio: Option<f64>,
    /// A holder offers a split when its gain exceeds this fraction of its cluster's cost.
    #[arg(long)]
    pub split_min: Option<f64>,
    /// Rounds between two split offers of one holder.
    #[arg(long)]
    pub split_every: Option<u32>,
    /// Size-estimate lookups a node keeps running until it has its samples
    /// (`overlay::superpeer::estimate`, "Pooled samples"). Default: `SuperPeerConfig::default()`.
    #[arg(long)]
    pub estimate_parallel: Option<u32>,
    /// Peers a node pushes its pooled size-estimate samples to after each lookup; 0 = every
    /// node makes all its lookups itself (the law before session 17, with
    /// `--estimate-parallel 8`). Default: `SuperPeerConfig::default()`.
    #[arg(long)]
    pub estimate_push_peers: Option<u32>,
    /// The measured medoid step (`overlay::superpeer::medoid`): members a settled holder asks
    /// to measure its cluster as candidate heads; 0 = off (the session-7 law). Default:
    /// `SuperPeerConfig::default()`.
    #[arg(long)]
    pub medoid_candidates: Option<u32>,
    /// Members each candidate (and the holder) pings for the measured medoid step.
    #[arg(long)]
    pub medoid_sample: Option<u32>,
    /// Lloyd iterations of the k-means yardstick.
    #[arg(long, default_value_t = 15)]
    pub kmeans_iters: usize,
    /// Also search the strong yardstick on the TRUE RTT (capacitated k-median: exact
    /// assignment, k-medoids refinement, Lagrangian lower bound; [`kmedian`]); N <= 20,000.
    /// Adds the rows `random-x` (random heads, exact TRUE assignment) and `kmedian`.
    #[arg(long)]
    pub kmedian: bool,
    /// Also offer the random and k-means placements the protocol's attachment by measured
    /// RTT ([`baseline::assign_measured`]): rows `random-m` and `kmeans-m`.
    #[arg(long)]
    pub measured_baselines: bool,
    /// Subgradient iterations of the k-median lower bound.
    #[arg(long, default_value_t = 300)]
    pub kmedian_iters: usize,
    /// Print, for every protocol run without a failure phase, where its placement loses
    /// without the k-median search ([`diagnose::gap`]: own heads assigned exactly on the
    /// TRUE RTT, then k-medoids by TRUE and by predicted RTT; global knowledge, a diagnostic).
    #[arg(long)]
    pub diagnose: bool,
    /// Neighbours per node from its own city, and random ones.
    #[arg(long, default_value_t = 8)]
    pub near: usize,
    #[arg(long, default_value_t = 8)]
    pub random: usize,
    /// Output directory (CSV, JSON, PNG, SVG).
    #[arg(long, default_value = "target/superpeers")]
    pub out: PathBuf,
    /// Skip the plots.
    #[arg(long)]
    pub no_plots: bool,
    /// Threads: methods simulated at the same time, and the Vivaldi phase's threads (the
    /// results do not depend on it). Each running method holds its own copy of the protocol
    /// state.
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// With `--jobs` >= 2: a method starts only once the one before it in its batch has run
    /// this many rounds (0 = all at once). The first rounds hold the most memory (nodes
    /// attach and switch, and every attach carries its own copy of the cluster view), so
    /// staggering keeps two methods' start-up peaks apart. Results do not depend on it.
    #[arg(long, default_value_t = 0)]
    pub stagger_rounds: u32,
}

/// The fault model's presets (`--faults`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FaultPreset {
    Off,
    Swarm,
}

/// The fault settings of a run: the preset, then the file's keys.
pub fn faults_of(args: &SuperpeersArgs) -> anyhow::Result<faults::Faults> {
    let preset = match args.faults {
        FaultPreset::Off => faults::Faults::default(),
        FaultPreset::Swarm => faults::Faults::swarm(),
    };
    let f = match &args.faults_config {
        None => preset,
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let mut table: toml::Table =
                toml::to_string(&preset).ok().and_then(|t| t.parse().ok()).context("the preset as TOML")?;
            let over: toml::Table = text.parse().with_context(|| format!("{}: not TOML", path.display()))?;
            table.extend(over);
            toml::Value::Table(table).try_into().with_context(|| format!("{}: bad fault settings", path.display()))?
        }
    };
    f.validate().context("fault settings")?;
    Ok(f)
}

/// One row of the results table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub nodes: usize,
    pub method: String,
    #[serde(flatten)]
    pub m: Measures,
    pub rtt_vs_kmeans: f64,
    pub rtt_vs_random: f64,
    pub convergence_s: Option<f64>,
    pub messages_per_node: Option<f64>,
    pub lookup_messages_per_node: Option<f64>,
    pub token_moves: Option<u64>,
    pub max_members_seen: Option<u64>,
}

#[derive(Debug, Serialize)]
struct RunReport {
    nodes: usize,
    seed: u64,
    share: f64,
    cap: u32,
    algorithm: String,
    vivaldi_rounds: usize,
    coord_error_p50: f64,
    coord_error_p90: f64,
    /// Mean TRUE RTT from a sampled node to its nearest other node: a floor under any
    /// placement's mean latency ([`baseline::floor_nearest_node`]).
    floor_nearest_node_ms: f64,
    /// The strong yardstick and the bound (`--kmedian`).
    kmedian: Option<KMedianReport>,
    rows: Vec<Row>,
    protocols: Vec<(String, ProtoOutcome)>,
    seconds: f64,
    peak_rss_mib: Option<f64>,
    /// Memory sampled at phase boundaries and in protocol rounds 1-3 and every 10th ([`memory`]).
    memory: Vec<memory::MemSample>,
}

/// What `--kmedian` found ([`kmedian::solve`]).
#[derive(Debug, Clone, Serialize)]
pub struct KMedianReport {
    /// Lower bound on the mean TRUE RTT of any placement of k heads with the cap, ms.
    pub bound_mean_ms: f64,
    /// Mean TRUE RTT of the best placement found, ms.
    pub best_mean_ms: f64,
    pub best_start: String,
    /// (start, mean after exact assignment, mean after the k-medoids refinement), ms.
    pub starts: Vec<(String, f64, f64)>,
    pub seconds: f64,
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("{prefix:>28} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}") {
        pb.set_style(style);
    }
    pb.set_prefix(what.to_string());
    pb
}

/// Checks and turns the flags into the protocol settings.
pub fn config_of(args: &SuperpeersArgs) -> anyhow::Result<(Vec<Method>, SuperPeerConfig)> {
    if args.nodes.is_empty() || args.nodes.iter().any(|&n| n < 10) {
        anyhow::bail!("--nodes: every size must be at least 10");
    }
    if args.near + args.random == 0 {
        anyhow::bail!("--near + --random must be at least 1");
    }
    if args.jobs == 0 {
        anyhow::bail!("--jobs must be at least 1");
    }
    if args.vivaldi_fresh > world::MAX_FRESH {
        anyhow::bail!("--vivaldi-fresh must be at most {}", world::MAX_FRESH);
    }
    if args.kmeans_iters == 0 {
        anyhow::bail!("--kmeans-iters must be at least 1");
    }
    if !(0.0..=1.0).contains(&args.crash) {
        anyhow::bail!("--crash must be in [0, 1]");
    }
    let methods: Vec<Method> = args.methods.iter().map(|m| m.parse::<Method>()).collect::<Result<_, _>>()?;
    let algorithm: Algorithm = args.algorithm.parse()?;
    let d = SuperPeerConfig::default();
    let mut cfg = SuperPeerConfig {
        share: args.share,
        attraction: args.attraction.unwrap_or(d.attraction),
        repulsion: args.repulsion.unwrap_or(d.repulsion),
        repulsion_range: args.repulsion_range.unwrap_or(d.repulsion_range),
        max_step: args.max_step.unwrap_or(d.max_step),
        min_gain: args.min_gain.unwrap_or(d.min_gain),
        cooling: args.cooling.unwrap_or(d.cooling),
        switch_factor: args.switch_factor,
        cache_size: args.cache_size,
        force_threshold: args.force_threshold.unwrap_or(d.force_threshold),
        hold_rounds: args.hold_rounds,
        promoted_aging: args.promoted_aging.unwrap_or(d.promoted_aging),
        probes_per_round: args.probes_per_round.unwrap_or(d.probes_per_round),
        probe_margin: args.probe_margin.unwrap_or(d.probe_margin),
        move_shortlist: args.move_shortlist.unwrap_or(d.move_shortlist),
        access_weight: args.access_weight.unwrap_or(d.access_weight),
        access_shrink: args.access_shrink.unwrap_or(d.access_shrink),
        split_ratio: args.split_ratio.unwrap_or(d.split_ratio),
        split_min: args.split_min.unwrap_or(d.split_min),
        split_every: args.split_every.unwrap_or(d.split_every),
        estimate_parallel: args.estimate_parallel.unwrap_or(d.estimate_parallel),
        estimate_push_peers: args.estimate_push_peers.unwrap_or(d.estimate_push_peers),
        medoid_candidates: args.medoid_candidates.unwrap_or(d.medoid_candidates),
        medoid_sample: args.medoid_sample.unwrap_or(d.medoid_sample),
        ..d
    };
    cfg.cluster_cap = args.cap.unwrap_or_else(|| (1.5 / args.share).round().max(1.0) as u32);
    cfg.election.algorithm = algorithm;
    cfg.validate().context("super-peer settings")?;
    Ok((methods, cfg))
}

/// Runs the experiment.
pub fn run(args: SuperpeersArgs) -> anyhow::Result<ExitCode> {
    let (methods, base_cfg) = config_of(&args)?;
    let faults = faults_of(&args)?;
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let mut all_rows: Vec<Row> = Vec::new();
    let mut conv_rows: Vec<(usize, String, RoundStat)> = Vec::new();
    let mut targets_ok = true;
    for &n in &args.nodes {
        let t0 = Instant::now();
        let mem = memory::MemLog::new();
        let seed = args.seed ^ (n as u64).rotate_left(17);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let pb = bar(args.vivaldi_rounds as u64, &format!("N={n} coordinates"));
        let mut w = world::World::generate(n, args.near, args.random, seed, &mut rng)?;
        let phase = world::VivaldiPhase {
            rounds: args.vivaldi_rounds,
            fresh: args.vivaldi_fresh,
            jobs: args.jobs,
            in_place: args.vivaldi_in_place,
        };
        mem.sample("world");
        w.run_vivaldi(&phase, &mut rng, || pb.inc(1))?;
        mem.sample("coordinates");
        pb.finish_with_message(format!("median rel. error {:.2}", w.coord_error_p50));
        let cap = base_cfg.cluster_cap as u64;
        let k = base_cfg.wanted(n as f64) as usize;

        let mut results: Vec<(String, Measures, Option<ProtoOutcome>)> = Vec::new();
        let mut assignments: Vec<(String, Vec<u32>, Vec<u32>)> = Vec::new();
        // The baselines need only the world: they run on a second thread while the protocols
        // run. Their RNG is the run's RNG as it would be after the protocols' measurements
        // (one draw each), so the numbers are exactly those of running everything in turn.
        let mut brng = rng.clone();
        for _ in 0..methods.len() {
            brng.next_u64();
        }
        let multi = MultiProgress::new();
        let mut floor = f64::NAN;
        let baselines = std::thread::scope(|scope| -> anyhow::Result<_> {
            let w = &w;
            let kmeans_iters = args.kmeans_iters;
            let (want_kmedian, kmedian_iters) = (args.kmedian, args.kmedian_iters);
            let want_measured = args.measured_baselines;
            let bpb = multi.add(bar(kmeans_iters as u64, &format!("N={n} baselines")));
            let handle = scope.spawn(move || {
                let r = baseline::random(w, k, cap, &mut brng);
                let km = baseline::kmeans(w, k, cap, kmeans_iters, &mut brng, || bpb.inc(1));
                bpb.finish();
                let mr = measure(w, &r.heads, &r.head_of, cap, &mut brng);
                let mk = measure(w, &km.heads, &km.head_of, cap, &mut brng);
                // The strong yardstick draws from its own generators, so the rows above do
                // not depend on `--kmedian`.
                let strong = want_kmedian.then(|| -> anyhow::Result<_> {
                    let t = Instant::now();
                    let mut mrng = ChaCha8Rng::seed_from_u64(seed ^ 0x6b6d_6564);
                    let (rx_of, _) = kmedian::assign_exact(w, &r.heads, cap)?;
                    let p = kmedian::Params { k, cap, iterations: kmedian_iters, seed: seed ^ 0x6b6d };
                    let out = kmedian::solve(w, &p, &km.heads, &r.heads, |_| {})?;
                    let mrx = measure(w, &r.heads, &rx_of, cap, &mut mrng);
                    let mkm = measure(w, &out.heads, &out.head_of, cap, &mut mrng);
                    let rep = KMedianReport {
                        bound_mean_ms: out.bound_mean_ms,
                        best_mean_ms: out.best_mean_ms,
                        best_start: out.best_start.clone(),
                        starts: out.starts.clone(),
                        seconds: t.elapsed().as_secs_f64(),
                    };
                    Ok((mrx, rx_of, mkm, out, rep))
                });
                // Same attachment rule as the protocol (own generator: the rows above do not
                // depend on `--measured-baselines`).
                let measured = want_measured.then(|| {
                    let mut arng = ChaCha8Rng::seed_from_u64(seed ^ 0x6d65_6173);
                    let rm_of = baseline::assign_measured(w, &r.heads, cap, &mut arng);
                    let km_of = baseline::assign_measured(w, &km.heads, cap, &mut arng);
                    let mrm = measure(w, &r.heads, &rm_of, cap, &mut arng);
                    let mkmm = measure(w, &km.heads, &km_of, cap, &mut arng);
                    (mrm, rm_of, mkmm, km_of)
                });
                (r, km, mr, mk, strong, measured)
            });
            // The floor scans all N nodes for each of 2,000 sampled ones (2 x 10^9 model RTTs
            // at N = 10^6): on its own thread it fills the CPU the protocols leave idle (a
            // staggered method's wait, the other's tail) instead of running at the end.
            let floor_handle = scope.spawn(move || baseline::floor_nearest_node(w, 2000, seed ^ 0xf1_0012));
            // The methods' runs are independent (each seeds its own RNG from `seed`): with
            // `--jobs 2` they run at the same time; they are measured in order afterwards, so
            // the output does not depend on `--jobs`.
            let run_method = |method: Method, wait_for: Option<&AtomicU32>, done: &AtomicU32| {
                // Marks this method's progress for the next one in the batch (`--stagger-rounds`),
                // finished (u32::MAX) however the run ends.
                struct Finished<'a>(&'a AtomicU32);
                impl Drop for Finished<'_> {
                    fn drop(&mut self) {
                        self.0.store(u32::MAX, Ordering::Release);
                    }
                }
                let _finished = Finished(done);
                if let Some(before) = wait_for {
                    while before.load(Ordering::Acquire) < args.stagger_rounds {
                        std::thread::sleep(std::time::Duration::from_millis(50));
                    }
                }
                let cfg = SuperPeerConfig { method, ..base_cfg.clone() };
                let pb = multi.add(bar(args.max_rounds as u64, &format!("N={n} {method}")));
                let params = ProtoParams {
                    cfg,
                    max_rounds: args.max_rounds,
                    stable_rounds: args.stable_rounds,
                    crash_fraction: args.crash,
                    recovery_rounds: args.recovery_rounds,
                    seed,
                    faults: faults.clone(),
                };
                let mem = &mem;
                let out = protocol::run(w, &params, |r, st| {
                    done.store(r, Ordering::Release);
                    if r <= 3 || r % 10 == 0 {
                        mem.sample(&format!("{method} round {r}"));
                    }
                    pb.set_position(r as u64);
                    pb.set_message(format!(
                        "heads {} attached {:.3} rtt {:.1} ms moves {}",
                        st.heads, st.attached_fraction, st.sample_rtt_ms, st.token_moves
                    ));
                })?;
                pb.finish();
                mem.sample(&format!("{method} done"));
                anyhow::Ok(out)
            };
            let mut outs: Vec<anyhow::Result<ProtoOutcome>> = Vec::with_capacity(methods.len());
            for batch in methods.chunks(args.jobs) {
                let run_method = &run_method;
                let rounds_done: Vec<AtomicU32> = batch.iter().map(|_| AtomicU32::new(0)).collect();
                let rounds_done = &rounds_done;
                std::thread::scope(|batch_scope| -> anyhow::Result<()> {
                    let handles: Vec<_> = batch
                        .iter()
                        .enumerate()
                        .map(|(k, &m)| {
                            let wait_for = (k > 0 && args.stagger_rounds > 0).then(|| &rounds_done[k - 1]);
                            batch_scope.spawn(move || run_method(m, wait_for, &rounds_done[k]))
                        })
                        .collect();
                    for h in handles {
                        outs.push(h.join().map_err(|_| anyhow::anyhow!("a protocol thread panicked"))?);
                    }
                    Ok(())
                })?;
            }
            for (&method, out) in methods.iter().zip(outs) {
                let out = out?;
                let m = measure(w, &out.heads, &out.head_of, cap, &mut rng);
                for st in &out.rounds {
                    conv_rows.push((n, method.name().to_string(), st.clone()));
                }
                assignments.push((method.name().to_string(), out.heads.clone(), out.head_of.clone()));
                results.push((method.name().to_string(), m, Some(out)));
            }
            floor = floor_handle.join().map_err(|_| anyhow::anyhow!("the floor thread panicked"))?;
            let b = handle.join().map_err(|_| anyhow::anyhow!("the baseline thread panicked"));
            mem.sample("protocols and baselines measured");
            b
        })?;
        let (r, km, mr, mk, strong, measured) = baselines;
        let strong = strong.transpose()?;
        results.push(("random".into(), mr.clone(), None));
        results.push(("kmeans".into(), mk.clone(), None));
        assignments.push(("random".into(), r.heads.clone(), r.head_of));
        assignments.push(("kmeans".into(), km.heads.clone(), km.head_of));
        if let Some((mrm, rm_of, mkmm, km_of)) = measured {
            results.push(("random-m".into(), mrm, None));
            results.push(("kmeans-m".into(), mkmm, None));
            assignments.push(("random-m".into(), r.heads.clone(), rm_of));
            assignments.push(("kmeans-m".into(), km.heads, km_of));
        }
        let mut kmedian_report = None;
        if let Some((mrx, rx_of, mkm, out, rep)) = strong {
            results.push(("random-x".into(), mrx, None));
            results.push(("kmedian".into(), mkm, None));
            assignments.push(("random-x".into(), r.heads, rx_of));
            assignments.push(("kmedian".into(), out.heads, out.head_of));
            kmedian_report = Some(rep);
        }

        let mut rows = Vec::new();
        for (name, m, out) in &results {
            let row = Row {
                nodes: n,
                method: name.clone(),
                m: m.clone(),
                rtt_vs_kmeans: m.rtt_mean_ms / mk.rtt_mean_ms,
                rtt_vs_random: m.rtt_mean_ms / mr.rtt_mean_ms,
                convergence_s: out.as_ref().and_then(|o| o.convergence_s),
                messages_per_node: out.as_ref().map(|o| o.messages_per_node),
                lookup_messages_per_node: out.as_ref().map(|o| o.lookup_messages_per_node),
                token_moves: out.as_ref().map(|o| o.token_moves),
                max_members_seen: out.as_ref().map(|o| o.max_members_seen),
            };
            if name == "tokens" {
                let ok = row.rtt_vs_kmeans <= 1.15 && row.rtt_vs_random <= 0.6 && m.clusters_over_cap == 0;
                targets_ok &= ok;
            }
            rows.push(row);
        }
        print_table(n, &rows);
        if !args.no_plots {
            let pca = plot::Pca::fit(&w);
            let panels: Vec<plot::MapPanel> = assignments
                .iter()
                .map(|(name, heads, head_of)| plot::MapPanel {
                    title: format!("{name}: {} super peers", heads.len()),
                    heads,
                    head_of,
                })
                .collect();
            plot::map(&args.out, &format!("superpeers_map_{n}"), &w, &pca, &panels)?;
            let series: Vec<plot::Series> = results
                .iter()
                .filter_map(|(name, _, o)| o.as_ref().map(|o| plot::Series { name: name.clone(), rounds: &o.rounds }))
                .collect();
            let baselines = vec![("random".to_string(), mr.rtt_mean_ms), ("k-means".to_string(), mk.rtt_mean_ms)];
            plot::convergence(&args.out, &format!("superpeers_convergence_{n}"), &series, &baselines)?;
        }
        mem.sample("plots");
        let report = RunReport {
            floor_nearest_node_ms: floor,
            kmedian: kmedian_report.clone(),
            nodes: n,
            seed: args.seed,
            share: args.share,
            cap: base_cfg.cluster_cap,
            algorithm: base_cfg.election.algorithm.to_string(),
            vivaldi_rounds: args.vivaldi_rounds,
            coord_error_p50: w.coord_error_p50,
            coord_error_p90: w.coord_error_p90,
            rows: rows.clone(),
            protocols: results.into_iter().filter_map(|(name, _, o)| o.map(|o| (name, o))).collect(),
            seconds: t0.elapsed().as_secs_f64(),
            peak_rss_mib: memory::peak_rss_mib(),
            memory: {
                mem.sample("report");
                mem.samples()
            },
        };
        let path = args.out.join(format!("superpeers_{n}.json"));
        std::fs::write(&path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!(
            "N={n}: floor under any placement (mean RTT to the nearest other node, 2,000 sampled nodes): {floor:.1} ms = {:.3} x random, {:.3} x k-means",
            floor / mr.rtt_mean_ms,
            floor / mk.rtt_mean_ms
        );
        println!(
            "N={n}: {:.1} s, peak RSS {:.0} MiB, coordinates median rel. error {:.3} (p90 {:.3}); wrote {}",
            report.seconds,
            report.peak_rss_mib.unwrap_or(f64::NAN),
            w.coord_error_p50,
            w.coord_error_p90,
            path.display()
        );
        for m in &report.memory {
            println!(
                "  memory at {:>7.1} s {:<32} RSS {:>7.0} MiB (peak {:>7.0}), jemalloc allocated {:>7.0} MiB, resident {:>7.0} MiB",
                m.secs, m.phase, m.rss_mib, m.peak_rss_mib, m.allocated_mib, m.resident_mib
            );
        }
        if let Some(km) = &kmedian_report {
            let tokens = rows.iter().find(|r| r.method == "tokens").map(|r| r.m.rtt_mean_ms);
            println!(
                "N={n}: capacitated k-median on the TRUE RTT: best {:.2} ms (start {}), lower bound {:.2} ms (gap {:.1} %); best = {:.3} x random, bound = {:.3} x random; tokens = {} x best; {:.1} s",
                km.best_mean_ms,
                km.best_start,
                km.bound_mean_ms,
                100.0 * (km.best_mean_ms / km.bound_mean_ms - 1.0),
                km.best_mean_ms / mr.rtt_mean_ms,
                km.bound_mean_ms / mr.rtt_mean_ms,
                tokens.map_or("-".into(), |t| format!("{:.3}", t / km.best_mean_ms)),
                km.seconds
            );
            for (name, before, after) in &km.starts {
                println!(
                    "  k-median start {name}: {before:.2} ms after exact assignment, {after:.2} ms after k-medoids"
                );
            }
            // Placement against assignment: a protocol's own heads, assigned exactly on the
            // TRUE RTT (only without a failure phase, where every node is alive).
            for (name, o) in &report.protocols {
                if o.failure.is_none() {
                    if let Ok((_, total)) = kmedian::assign_exact(&w, &o.heads, cap) {
                        let mean = total / (n - o.heads.len()).max(1) as f64;
                        println!(
                            "  {name} heads with the exact TRUE assignment: {mean:.2} ms = {:.3} x random, {:.3} x best",
                            mean / mr.rtt_mean_ms,
                            mean / km.best_mean_ms
                        );
                    }
                }
            }
            // Where each protocol's placement loses against the k-median (session 6).
            if let Some((_, km_heads, km_of)) = assignments.iter().find(|a| a.0 == "kmedian") {
                for (name, o) in &report.protocols {
                    if o.failure.is_none() {
                        match diagnose::diagnose(&w, &o.heads, &o.head_of, km_heads, km_of, cap) {
                            Ok(d) => diagnose::print(name, &d),
                            Err(e) => println!("  diag {name}: {e}"),
                        }
                    }
                }
            }
            // The heads' own access delay (paid by every member), against all nodes'.
            let access =
                |hs: &[u32]| hs.iter().map(|&h| w.model.access_ms(h as usize)).sum::<f64>() / hs.len().max(1) as f64;
            let all: Vec<u32> = (0..n as u32).collect();
            let mut line = format!("  heads' mean access delay: all nodes {:.2} ms", access(&all));
            for (name, heads, _) in &assignments {
                line.push_str(&format!(", {name} {:.2}", access(heads)));
            }
            println!("{line}");
        }
        if args.diagnose {
            for (name, o) in &report.protocols {
                if o.failure.is_none() {
                    match diagnose::gap(&w, &o.heads, &o.head_of, cap) {
                        Ok(g) => diagnose::print_gap(name, &g),
                        Err(e) => println!("  gap {name}: {e}"),
                    }
                }
            }
        }
        for (name, o) in &report.protocols {
            println!(
                "  {name}: protocol state {:.0} B/node ({} B struct + heap), size estimate error mean {:.3}",
                o.state_bytes_per_node, o.node_struct_bytes, o.estimate_error_mean
            );
            if let Some(f) = &o.failure {
                println!(
                    "  {name} after crashing {} super peers: recovered in {:?} rounds, unattached {}, roles {} -> {} (lost {}, duplicated {}), re-elected {} of which highest-ranked {}",
                    f.crashed, f.recovery_rounds, f.unattached_after, f.roles_before, f.roles_after, f.roles_lost,
                    f.roles_duplicated, f.reelected, f.reelected_highest_rank
                );
            }
        }
        all_rows.extend(rows);
    }
    write_csv(&args.out.join("superpeers.csv"), all_rows.iter())?;
    #[derive(Serialize)]
    struct C<'a> {
        nodes: usize,
        method: &'a str,
        #[serde(flatten)]
        st: &'a RoundStat,
    }
    write_csv(
        &args.out.join("superpeers_convergence.csv"),
        conv_rows.iter().map(|(n, m, st)| C { nodes: *n, method: m, st }),
    )?;
    println!(
        "targets (tokens mean RTT <= 1.15 x k-means and <= 0.6 x random, no cluster over cap): {}",
        if targets_ok { "met" } else { "NOT met" }
    );
    Ok(ExitCode::SUCCESS)
}

/// Writes records as CSV; nested (flattened) structs become columns, in key order.
fn write_csv<T: Serialize>(path: &std::path::Path, rows: impl Iterator<Item = T>) -> anyhow::Result<()> {
    let mut wtr = csv::Writer::from_path(path).with_context(|| format!("writing {}", path.display()))?;
    let mut header: Option<Vec<String>> = None;
    for r in rows {
        let serde_json::Value::Object(map) = serde_json::to_value(&r)? else {
            anyhow::bail!("a CSV row must be a struct");
        };
        if header.is_none() {
            let h: Vec<String> = map.keys().cloned().collect();
            wtr.write_record(&h)?;
            header = Some(h);
        }
        let cells: Vec<String> = header
            .iter()
            .flatten()
            .map(|k| match map.get(k) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Null) | None => String::new(),
                Some(v) => v.to_string(),
            })
            .collect();
        wtr.write_record(&cells)?;
    }
    wtr.flush()?;
    Ok(())
}

fn print_table(n: usize, rows: &[Row]) {
    println!("\nN = {n}");
    println!(
        "{:<8} {:>6} {:>7} {:>8} {:>8} {:>8} {:>8} {:>6} {:>7} {:>5} {:>5} {:>8} {:>7} {:>7} {:>9} {:>8}",
        "method",
        "SPs",
        "share",
        "mean ms",
        "p50",
        "p95",
        "max",
        "CV",
        "nnSP ms",
        "min",
        "max",
        "overcap",
        "xkmeans",
        "xrandom",
        "conv s",
        "msg/node"
    );
    for r in rows {
        println!(
            "{:<8} {:>6} {:>7.4} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>6.2} {:>7.1} {:>5} {:>5} {:>8} {:>7.3} {:>7.3} {:>9} {:>8}",
            r.method,
            r.m.super_peers,
            r.m.share,
            r.m.rtt_mean_ms,
            r.m.rtt_p50_ms,
            r.m.rtt_p95_ms,
            r.m.rtt_max_ms,
            r.m.cluster_cv,
            r.m.nearest_sp_mean_ms,
            r.m.cluster_min,
            r.m.cluster_max,
            r.m.clusters_over_cap,
            r.rtt_vs_kmeans,
            r.rtt_vs_random,
            r.convergence_s.map_or("-".into(), |c| format!("{c:.0}")),
            r.messages_per_node.map_or("-".into(), |c| format!("{c:.1}")),
        );
    }
}
