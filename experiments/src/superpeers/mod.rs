//! `peerage-lab superpeers`: super-peer selection at scale (seed 000, "Elections in
//! large-scale systems"), judged against yardsticks at least as strong as the protocols.
//!
//! For each population size N and each seed: build the Internet latency model and neighbour
//! sets, run the Vivaldi coordinate phase once ([`world`]), then run each selection method,
//! reserved prefix and repulsion tokens, as a message-level simulation of the sans-IO
//! [`overlay::superpeer::SuperPeerNode`] ([`protocol`]), optionally crash a share of the super
//! peers and let the clusters re-elect. Meanwhile the yardsticks are computed with global
//! knowledge ([`yardstick`]): random placements (mean over many draws), k-means and the
//! capacitated k-median, every one attached by the optimal capacitated assignment on the TRUE
//! RTT ([`assign`]), and a lower bound on any placement. Everything is measured on the TRUE
//! RTT ([`measure`]); every placement is written node by node, and the summary rows can be
//! recomputed from those files ([`output`], `scripts/superpeers_check.py`); several seeds
//! give a summary over seeds and the share of seeds meeting each target ([`report`]); plots
//! ([`plot`]).
//!
//! Threads: the yardsticks run on their own thread while the protocols run, and `--jobs 2`
//! runs the two methods (and the random draws) two at a time; the output is the same for any
//! `--jobs` (each method and each draw seeds its own RNG).
//!
//! Memory: per node, the latency model (~30 B), ids and index (~70 B), neighbour lists (64 B),
//! Vivaldi clients during the coordinate phase only, and each running method's protocol
//! nodes (~2.7 KB). The run samples the RSS and jemalloc's counters per phase ([`memory`]);
//! the peak comes in a method's first rounds, which `--stagger-rounds` keeps apart for the
//! two methods.

pub mod assign;
pub mod baseline;
pub mod churn;
pub mod diagnose;
pub mod faults;
pub mod gates;
pub mod ids;
pub mod kmedian;
pub mod measure;
pub mod memory;
pub mod output;
pub mod plot;
pub mod prefetch;
pub mod protocol;
pub mod report;
pub mod world;
pub mod yardstick;

use crate::lab::spec::SeedRange;
use anyhow::Context as _;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use measure::measure;
use overlay::superpeer::{Method, SuperPeerConfig, SuperPeerFile};
use protocol::{ProtoOutcome, ProtoParams, RoundStat};
use report::{MeasuresF, SummaryRow, Verdict};
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
    /// Wanted share of super peers (default: `--sp-config`'s, 0.01 without one).
    #[arg(long)]
    pub share: Option<f64>,
    /// Cluster cap (default: 1.5 / `--share` with that flag, else `--sp-config`'s, 150
    /// without one).
    #[arg(long)]
    pub cap: Option<u32>,
    /// Tell every node the population size (each `--nodes` value) instead of letting it
    /// estimate it (`[superpeer.estimate] known_size`): the wanted number of super peers is
    /// then exact, which separates the placement from the size estimate's error.
    #[arg(long)]
    pub known_size: bool,
    /// Seeds: one (`7`) or a range `A..B` (A included, B not: `1..21` is seeds 1-20). Each
    /// seed is a new world, protocol run and set of yardsticks; with several, a summary over
    /// them follows each population size.
    #[arg(long, alias = "seed", default_value = "1")]
    pub seeds: SeedRange,
    /// The latency model's seed, for every seed of the run: the world a
    /// `peerage swarm --latency internet --seed S` of the same N runs on (node i at the same
    /// place), so that the lab and a real swarm can be compared on one world. Default: drawn
    /// from each seed and N.
    #[arg(long)]
    pub latency_seed: Option<u64>,
    /// The nodes' ids from a `peerage swarm --out` report of the same N (its `node_rows`), so
    /// that with the swarm's seed as `--latency-seed` node i is the swarm's node i: same
    /// place, same id, same reserved prefixes. Default: drawn from each seed.
    #[arg(long)]
    pub node_ids: Option<PathBuf>,
    /// Vivaldi rounds; in each, every node samples each of its neighbours and
    /// `--vivaldi-fresh` random peers.
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
    /// Rounds without change (at most N/1000 attachments or token moves a round) that count
    /// as converged. 25 is longer than two split-offer periods, so a placement whose settled
    /// holders are still offering splits is not called converged.
    #[arg(long, default_value_t = 25)]
    pub stable_rounds: u32,
    /// Share of super peers crashed after convergence (0 = no failure phase).
    #[arg(long, default_value_t = 0.05)]
    pub crash: f64,
    /// Rounds allowed for recovery after the crash.
    #[arg(long, default_value_t = 60)]
    pub recovery_rounds: u32,
    /// What hurt the real swarm, simulated: slow, short or failed DHT lookups, nodes that
    /// start late, coordinates learned while the selection runs, connections refused by the
    /// nodes' own connection gates, nodes whose event loop runs late, queueing in pings.
    /// `off`, or `swarm` (the 200-node swarms: lookups, starts and coordinates calibrated on
    /// their reports, the rest rough).
    #[arg(long, value_enum, default_value = "off")]
    pub faults: FaultPreset,
    /// A TOML file of fault settings (keys: lookup_short, lookup_timeout, peer_failure,
    /// lookup_ms, start_spread_s, gates, loaded, lateness_ms, ping_queue_ms, unfit_rounds,
    /// drift_share, drift_ms, coord_noise_ms, coord_learn_s, head_watch); keys it leaves out
    /// take the preset's values.
    #[arg(long)]
    pub faults_config: Option<PathBuf>,
    /// The super-peer settings: a TOML file whose `[superpeer]` table is read (the table a
    /// node's config file holds; the file's other tables are
    /// ignored, so a node's config file runs here unchanged). Keys it leaves out take their
    /// defaults; `--share` and `--cap` override it.
    #[arg(long)]
    pub sp_config: Option<PathBuf>,
    /// Random placements behind the `random` yardstick (its mean and confidence interval).
    #[arg(long, default_value_t = 100)]
    pub random_draws: u32,
    /// Lloyd iterations of the k-means yardstick.
    #[arg(long, default_value_t = 15)]
    pub kmeans_iters: usize,
    /// Subgradient iterations of the k-median's lower bound (N <= 20,000).
    #[arg(long, default_value_t = 300)]
    pub kmedian_iters: usize,
    /// Print, for every protocol run, where its placement loses against the k-median: its own
    /// heads assigned optimally on the TRUE RTT, then k-medoids by TRUE and by predicted RTT,
    /// and a per-city comparison (global knowledge, a diagnostic).
    #[arg(long)]
    pub diagnose: bool,
    /// Neighbours per node from its own and nearby cities.
    #[arg(long, default_value_t = 8)]
    pub near: usize,
    /// Neighbours per node drawn uniformly from the whole population.
    #[arg(long, default_value_t = 8)]
    pub random: usize,
    /// Output directory: per-node gzipped CSV, summary CSV, JSON, PNG and SVG, every file
    /// named with N and the seed.
    #[arg(long, default_value = "target/superpeers")]
    pub out: PathBuf,
    /// Skip the plots.
    #[arg(long)]
    pub no_plots: bool,
    /// Threads: methods simulated at the same time, and the threads of the Vivaldi phase and
    /// of the random draws (the results do not depend on it). Each running method holds its
    /// own copy of the protocol state.
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

#[derive(Debug, Serialize)]
struct RunReport {
    nodes: usize,
    seed: u64,
    share: f64,
    cap: u32,
    wanted_super_peers: usize,
    /// The nodes were told N (`--known-size`) instead of estimating it.
    size_known: bool,
    algorithm: String,
    vivaldi_rounds: usize,
    vivaldi_err_p50: f64,
    vivaldi_err_p90: f64,
    bound_ms: f64,
    bound_floor_ms: f64,
    bound_lagrangian_ms: Option<f64>,
    random_draws: u32,
    kmedian_start: String,
    /// (start, mean after the optimal assignment, after k-medoids), ms.
    kmedian_starts: Vec<(String, f64, f64)>,
    seconds_random: f64,
    seconds_kmedian: f64,
    rows: Vec<SummaryRow>,
    verdicts: Vec<(String, Verdict)>,
    protocols: Vec<(String, ProtoOutcome)>,
    seconds: f64,
    peak_rss_mib: Option<f64>,
    /// Memory sampled at phase boundaries and in protocol rounds 1-3 and every 10th ([`memory`]).
    memory: Vec<memory::MemSample>,
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("{prefix:>30} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}") {
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
    if args.random_draws == 0 {
        anyhow::bail!("--random-draws must be at least 1");
    }
    if !(0.0..=1.0).contains(&args.crash) {
        anyhow::bail!("--crash must be in [0, 1]");
    }
    let methods: Vec<Method> = args.methods.iter().map(|m| m.parse::<Method>()).collect::<Result<_, _>>()?;
    let mut cfg = match &args.sp_config {
        Some(path) => read_sp_config(path)?,
        None => SuperPeerConfig::default(),
    };
    if let Some(share) = args.share {
        cfg.share = share;
        cfg.cluster_cap = (1.5 / share).round().max(1.0) as u32;
    }
    if let Some(cap) = args.cap {
        cfg.cluster_cap = cap;
    }
    cfg.validate().context("super-peer settings")?;
    Ok((methods, cfg))
}

/// The `[superpeer]` table of a TOML file (absent: the defaults); other tables are ignored.
pub fn read_sp_config(path: &std::path::Path) -> anyhow::Result<SuperPeerConfig> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let f: SuperPeerFile =
        toml::from_str(&text).with_context(|| format!("{}: bad [superpeer] table", path.display()))?;
    Ok(f.superpeer)
}

/// The seeds as text for file names and tables: `7`, or `1-20` (both ends included).
pub fn seeds_label(s: &SeedRange) -> String {
    if s.end - s.start == 1 {
        s.start.to_string()
    } else {
        format!("{}-{}", s.start, s.end - 1)
    }
}

/// Runs the experiment: every size, every seed; the exit code is 0 whatever the targets say
/// (they are experiment results, printed and written).
pub fn run(args: SuperpeersArgs) -> anyhow::Result<ExitCode> {
    let (methods, base_cfg) = config_of(&args)?;
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let label = seeds_label(&args.seeds);
    for &n in &args.nodes {
        let mut rows: Vec<SummaryRow> = Vec::new();
        let mut ratio_points: Vec<(u64, String, f64, f64)> = Vec::new();
        for seed in args.seeds.start..args.seeds.end {
            let seed_rows = run_one(&args, &methods, &base_cfg, n, seed)?;
            for r in seed_rows.iter().filter(|r| r.kind == "protocol") {
                ratio_points.push((seed, r.method.clone(), r.x_kmedian, r.x_random));
            }
            rows.extend(seed_rows);
        }
        let over = report::over_seeds(n, &label, &rows);
        report::print_seeds(&over);
        let stem = format!("superpeers_n{n}_seeds{label}");
        output::write_csv(&args.out.join(format!("{stem}.csv")), over.iter())?;
        if !args.no_plots && args.seeds.end - args.seeds.start > 1 {
            let bound_ok: Vec<(u64, bool)> = rows
                .iter()
                .filter(|r| r.method == "kmedian")
                .map(|r| (r.seed, r.bound_x_random <= report::TARGET_X_RANDOM))
                .collect();
            plot::ratios(&args.out, &format!("{stem}_ratios"), n, &ratio_points, &bound_ok)?;
        }
        for r in over.iter().filter(|r| r.kmedian_met.is_some()) {
            println!(
                "N={n} {}: mean RTT <= {:.2} x k-median on {} of {} seeds; <= {:.1} x random on {} of the {} seeds where the bound allows it; no cluster over the cap and no node unattached on {} of {}",
                r.method,
                report::TARGET_X_KMEDIAN,
                r.kmedian_met.unwrap_or(0),
                r.runs,
                report::TARGET_X_RANDOM,
                r.random_met.unwrap_or(0),
                r.random_eligible.unwrap_or(0),
                r.load_met.unwrap_or(0),
                r.runs
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One population size and seed: world, protocols, yardsticks, files; the summary rows.
fn run_one(
    args: &SuperpeersArgs,
    methods: &[Method],
    base_cfg: &SuperPeerConfig,
    n: usize,
    seed: u64,
) -> anyhow::Result<Vec<SummaryRow>> {
    use rand::SeedableRng;
    let t0 = Instant::now();
    let mem = memory::MemLog::new();
    let faults = faults_of(args)?;
    let run_seed = seed ^ (n as u64).rotate_left(17);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(run_seed);
    let multi = MultiProgress::new();
    let pb = multi.add(bar(args.vivaldi_rounds as u64, &format!("N={n} s{seed} coordinates")));
    let model_seed = args.latency_seed.unwrap_or(run_seed);
    let mut w = world::World::generate(n, args.near, args.random, model_seed, &mut rng)?;
    if let Some(path) = &args.node_ids {
        w.set_ids(ids::from_report(path, n)?)?;
    }
    let phase = world::VivaldiPhase {
        rounds: args.vivaldi_rounds,
        fresh: args.vivaldi_fresh,
        jobs: args.jobs,
        in_place: args.vivaldi_in_place,
    };
    mem.sample("world");
    w.run_vivaldi(&phase, &mut rng, || pb.inc(1))?;
    mem.sample("coordinates");
    let (err_p50, err_p90) =
        output::write_pairs(&output::path(&args.out, n, seed, "pairs.csv.gz"), &w, 20_000, run_seed)?;
    pb.finish_with_message(format!("median relative error {err_p50:.3}"));
    let geo = assign::Geometry::new(&w);
    let cap = base_cfg.cluster_cap as u64;
    let k = base_cfg.wanted(n as f64) as usize;

    let ys = yardstick::Params {
        k,
        cap,
        draws: args.random_draws,
        kmeans_iters: args.kmeans_iters,
        kmedian_iters: args.kmedian_iters,
        seed: run_seed,
        jobs: args.jobs,
    };
    let (outs, mut yard) = std::thread::scope(|scope| -> anyhow::Result<_> {
        let (w, geo, mem, multi) = (&w, &geo, &mem, &multi);
        let ybar = multi.add(bar(args.random_draws as u64, &format!("N={n} s{seed} random draws")));
        let yard_handle = scope.spawn(move || {
            let progress = |step: yardstick::Step| match step {
                yardstick::Step::Draw => ybar.inc(1),
                yardstick::Step::Stage(s) => ybar.set_message(format!("then {s}")),
            };
            let y = yardstick::compute(w, geo, &ys, &progress);
            ybar.finish_with_message("yardsticks done");
            mem.sample("yardsticks");
            y
        });
        // The methods' runs are independent (each seeds its own RNG from the run's seed):
        // with `--jobs 2` they run at the same time; the output does not depend on `--jobs`.
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
            let mut cfg = SuperPeerConfig { method, ..base_cfg.clone() };
            if args.known_size {
                cfg.estimate.known_size = n as u64;
            }
            let most = args.max_rounds + if args.crash > 0.0 { args.recovery_rounds } else { 0 };
            let pb = multi.add(bar(most as u64, &format!("N={n} s{seed} {method} rounds")));
            let params = ProtoParams {
                cfg,
                max_rounds: args.max_rounds,
                stable_rounds: args.stable_rounds,
                crash_fraction: args.crash,
                recovery_rounds: args.recovery_rounds,
                seed: run_seed,
                faults: faults.clone(),
                diagnose: args.diagnose,
            };
            let out = protocol::run(w, &params, |r, st| {
                done.store(r, Ordering::Release);
                if r <= 3 || r % 10 == 0 {
                    mem.sample(&format!("{method} round {r}"));
                }
                pb.set_position(r as u64);
                pb.set_message(format!(
                    "{} heads, {:.1} % attached, {:.1} ms, {} token moves",
                    st.heads,
                    100.0 * st.attached_fraction,
                    st.sample_rtt_ms,
                    st.token_moves
                ));
            })?;
            // The bar ends at the rounds that ran (the run stops once it is stable).
            pb.set_length(out.rounds.len() as u64);
            pb.set_position(out.rounds.len() as u64);
            pb.finish();
            mem.sample(&format!("{method} done"));
            anyhow::Ok(out)
        };
        let mut outs: Vec<ProtoOutcome> = Vec::with_capacity(methods.len());
        for batch in methods.chunks(args.jobs) {
            let run_method = &run_method;
            let rounds_done: Vec<AtomicU32> = batch.iter().map(|_| AtomicU32::new(0)).collect();
            let rounds_done = &rounds_done;
            let results = std::thread::scope(|batch_scope| {
                let handles: Vec<_> = batch
                    .iter()
                    .enumerate()
                    .map(|(k, &m)| {
                        let wait_for = (k > 0 && args.stagger_rounds > 0).then(|| &rounds_done[k - 1]);
                        batch_scope.spawn(move || run_method(m, wait_for, &rounds_done[k]))
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().map_err(|_| anyhow::anyhow!("a protocol thread panicked"))?)
                    .collect::<Vec<_>>()
            });
            for r in results {
                outs.push(r?);
            }
        }
        let yard = yard_handle.join().map_err(|_| anyhow::anyhow!("the yardstick thread panicked"))??;
        Ok((outs, yard))
    })?;
    mem.sample("protocols and yardsticks");
    for d in &mut yard.draws {
        d.seed = seed;
    }

    // Measures, rows and per-node files.
    let bound = yard.bound_ms();
    let random_mean: Vec<f64> = yard.draws.iter().map(|d| d.m.rtt_mean_ms).collect();
    let (rand_mean, _, rand_lo, rand_hi) = yardstick::ci95(&random_mean);
    let kmedian_mean = yard.kmedian.measured.m.rtt_mean_ms;
    let row = |method: &str, kind: &str, m: MeasuresF| SummaryRow {
        nodes: n,
        seed,
        method: method.to_string(),
        kind: kind.to_string(),
        x_kmedian: m.rtt_mean_ms / kmedian_mean,
        x_random: m.rtt_mean_ms / rand_mean,
        m,
        draws: None,
        rtt_mean_ci95_lo: None,
        rtt_mean_ci95_hi: None,
        assign_gap_ms: None,
        bound_ms: bound,
        bound_floor_ms: yard.bound_floor_ms,
        bound_lagrangian_ms: yard.bound_lagrangian_ms,
        bound_x_random: bound / rand_mean,
        vivaldi_err_p50: err_p50,
        vivaldi_err_p90: err_p90,
        convergence_s: None,
        messages_per_node: None,
        lookup_messages_per_node: None,
        token_moves: None,
        max_members_seen: None,
    };
    let mut rows = Vec::new();
    let mut placements: Vec<(String, &[u32], &[u32])> = Vec::new();
    for (method, out) in methods.iter().zip(&outs) {
        let m = measure(&w, &geo, &out.heads, &out.head_of, cap);
        let name = method.name();
        output::write_nodes(
            &output::path(&args.out, n, seed, &format!("nodes_{name}.csv.gz")),
            &w,
            &out.heads,
            &out.head_of,
            &m,
        )?;
        let mut r = row(name, "protocol", MeasuresF::from(&m.m));
        r.convergence_s = out.convergence_s;
        r.messages_per_node = Some(out.messages_per_node);
        r.lookup_messages_per_node = Some(out.lookup_messages_per_node);
        r.token_moves = Some(out.token_moves);
        r.max_members_seen = Some(out.max_members_seen);
        rows.push(r);
    }
    let draw_measures: Vec<&measure::Measures> = yard.draws.iter().map(|d| &d.m).collect();
    let mut r = row("random", "yardstick", report::over_draws(&draw_measures));
    r.draws = Some(yard.draws.len() as u32);
    r.rtt_mean_ci95_lo = Some(rand_lo).filter(|x| x.is_finite());
    r.rtt_mean_ci95_hi = Some(rand_hi).filter(|x| x.is_finite());
    r.assign_gap_ms = Some(yard.draws.iter().map(|d| d.assign_gap_ms).fold(0.0, f64::max));
    rows.push(r);
    for (name, p) in [("kmeans", &yard.kmeans), ("kmedian", &yard.kmedian)] {
        let mut r = row(name, "yardstick", MeasuresF::from(&p.measured.m));
        r.assign_gap_ms = Some(p.gap_ms);
        rows.push(r);
    }
    for (name, p) in [("random", &yard.random_first), ("kmeans", &yard.kmeans), ("kmedian", &yard.kmedian)] {
        output::write_nodes(
            &output::path(&args.out, n, seed, &format!("nodes_{name}.csv.gz")),
            &w,
            &p.heads,
            &p.head_of,
            &p.measured,
        )?;
    }
    output::write_world(&output::path(&args.out, n, seed, "world.csv.gz"), &w, &yard.nearest_other)?;
    output::write_csv(&output::path(&args.out, n, seed, "random_draws.csv"), yard.draws.iter())?;
    output::write_csv(&output::path(&args.out, n, seed, "summary.csv"), rows.iter())?;
    #[derive(Serialize)]
    struct C<'a> {
        nodes: usize,
        seed: u64,
        method: &'a str,
        #[serde(flatten)]
        st: &'a RoundStat,
    }
    output::write_csv(
        &output::path(&args.out, n, seed, "convergence.csv"),
        methods
            .iter()
            .zip(&outs)
            .flat_map(|(m, o)| o.rounds.iter().map(move |st| C { nodes: n, seed, method: m.name(), st })),
    )?;
    mem.sample("files");
    report::print_rows(n, seed, &rows);
    println!(
        "N={n} s{seed}: random = mean of {} draws; lower bound on any placement {bound:.2} ms = {:.3} x random (nearest-node floor {:.2} ms{}); k-median {kmedian_mean:.2} ms from the {} start, its assignment within {:.4} ms of optimal; Vivaldi median relative error {err_p50:.3} (p90 {err_p90:.3})",
        yard.draws.len(),
        bound / rand_mean,
        yard.bound_floor_ms,
        yard.bound_lagrangian_ms.map_or(String::new(), |b| format!(", Lagrangian {b:.2} ms")),
        yard.kmedian_start,
        yard.kmedian.gap_ms,
    );
    let verdicts: Vec<(String, Verdict)> =
        rows.iter().filter(|r| r.kind == "protocol").map(|r| (r.method.clone(), Verdict::of(r))).collect();
    for (name, v) in &verdicts {
        let yes = |b: bool| if b { "met" } else { "missed" };
        println!(
            "N={n} s{seed} {name} targets: <= {:.2} x k-median {}; <= {:.1} x random {}; no cluster over the cap and no node unattached {}",
            report::TARGET_X_KMEDIAN,
            yes(v.kmedian_met),
            report::TARGET_X_RANDOM,
            if v.random_eligible { yes(v.random_met) } else { "not reachable (bound above it)" },
            yes(v.load_met),
        );
    }
    if args.diagnose {
        for (method, out) in methods.iter().zip(&outs) {
            let name = method.name();
            match diagnose::gap(&w, &geo, &out.heads, &out.head_of, cap) {
                Ok(g) => diagnose::print_gap(name, &g),
                Err(e) => println!("  gap {name}: {e}"),
            }
            if let Some(f) = &out.far {
                diagnose::print_far(name, f);
            }
            match diagnose::diagnose(
                &w,
                &geo,
                &out.heads,
                &out.head_of,
                &yard.kmedian.heads,
                &yard.kmedian.head_of,
                cap,
            ) {
                Ok(d) => diagnose::print(name, &d),
                Err(e) => println!("  diag {name}: {e}"),
            }
        }
    }
    for (method, o) in methods.iter().zip(&outs) {
        let name = method.name();
        println!(
            "  {name}: protocol state {:.0} B/node ({} B struct + heap), size estimate error mean {:.3}",
            o.state_bytes_per_node, o.node_struct_bytes, o.estimate_error_mean
        );
        if let Some(f) = &o.failure {
            println!(
                "  {name} after crashing {} super peers: {}, unattached {}, roles {} -> {} (lost {}, duplicated {}), re-elected {} of which highest-ranked {}",
                f.crashed,
                f.recovery_rounds.map_or(format!("not recovered in {} rounds", args.recovery_rounds), |r| format!("recovered in {r} rounds")),
                f.unattached_after,
                f.roles_before,
                f.roles_after,
                f.roles_lost,
                f.roles_duplicated,
                f.reelected,
                f.reelected_highest_rank
            );
        }
        if let Some(c) = &o.connections {
            println!(
                "  {name} connections: {} established, {} pruned, {} dialled by the peer managers; per node {:.1} mean, {} max at the end, {} peak; dials refused {} by the dialler's gate, {} by the peer's; lookup contacts refused {} of {}",
                c.established,
                c.pruned,
                c.manager_dials,
                c.per_node_mean,
                c.per_node_max,
                c.per_node_peak,
                c.refused_locally,
                c.refused_by_peer,
                c.lookup_contacts_refused,
                c.lookup_contacts
            );
            let mut by: Vec<(&&str, &u64)> = c.established_by.iter().collect();
            by.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let by: Vec<String> = by.into_iter().map(|(k, v)| format!("{k} {v}")).collect();
            println!("  {name} connections opened by: {}", by.join(", "));
        }
    }
    if !args.no_plots {
        for (method, out) in methods.iter().zip(&outs) {
            placements.push((method.name().to_string(), &out.heads, &out.head_of));
        }
        placements.push(("random (first draw)".into(), &yard.random_first.heads, &yard.random_first.head_of));
        placements.push(("kmeans".into(), &yard.kmeans.heads, &yard.kmeans.head_of));
        placements.push(("kmedian".into(), &yard.kmedian.heads, &yard.kmedian.head_of));
        let stem = output::stem(n, seed);
        let pca = plot::Pca::fit(&w);
        let panels: Vec<plot::MapPanel> = placements
            .iter()
            .map(|(name, heads, head_of)| plot::MapPanel {
                title: format!("{name}: {} super peers", heads.len()),
                heads,
                head_of,
            })
            .collect();
        plot::map(&args.out, &format!("{stem}_map"), &w, &pca, &panels)?;
        let series: Vec<plot::Series> = methods
            .iter()
            .zip(&outs)
            .map(|(m, o)| plot::Series { name: m.name().to_string(), rounds: &o.rounds })
            .collect();
        let lines = vec![("random (mean of draws)".to_string(), rand_mean), ("k-median".to_string(), kmedian_mean)];
        plot::convergence(&args.out, &format!("{stem}_convergence"), &series, &lines)?;
        let cdf: Vec<(String, Vec<f64>)> = placements
            .iter()
            .map(|(name, _, head_of)| {
                let v = head_of
                    .iter()
                    .enumerate()
                    .filter(|&(i, &h)| h != u32::MAX && h as usize != i)
                    .map(|(i, &h)| w.rtt_ms(i as u32, h))
                    .collect();
                (name.clone(), v)
            })
            .collect();
        plot::cdf(&args.out, &format!("{stem}_cdf"), n, &cdf)?;
        mem.sample("plots");
    }
    let report = RunReport {
        nodes: n,
        seed,
        share: base_cfg.share,
        cap: base_cfg.cluster_cap,
        wanted_super_peers: k,
        size_known: args.known_size,
        algorithm: base_cfg.election.algorithm.to_string(),
        vivaldi_rounds: args.vivaldi_rounds,
        vivaldi_err_p50: err_p50,
        vivaldi_err_p90: err_p90,
        bound_ms: bound,
        bound_floor_ms: yard.bound_floor_ms,
        bound_lagrangian_ms: yard.bound_lagrangian_ms,
        random_draws: args.random_draws,
        kmedian_start: yard.kmedian_start.clone(),
        kmedian_starts: yard.kmedian_starts.clone(),
        seconds_random: yard.seconds_random,
        seconds_kmedian: yard.seconds_kmedian,
        rows: rows.clone(),
        verdicts,
        protocols: methods.iter().map(|m| m.name().to_string()).zip(outs).collect(),
        seconds: t0.elapsed().as_secs_f64(),
        peak_rss_mib: memory::peak_rss_mib(),
        memory: {
            mem.sample("report");
            mem.samples()
        },
    };
    let path = args.out.join(format!("{}.json", output::stem(n, seed)));
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)
        .with_context(|| format!("writing {}", path.display()))?;
    println!(
        "N={n} s{seed}: {:.1} s (random draws {:.1} s, k-median {:.1} s), peak RSS {}; wrote {}",
        report.seconds,
        report.seconds_random,
        report.seconds_kmedian,
        report.peak_rss_mib.map_or("unknown".into(), |m| format!("{m:.0} MiB")),
        path.display()
    );
    for m in &report.memory {
        println!(
            "  memory at {:>7.1} s {:<32} RSS {:>7.0} MiB (peak {:>7.0}), jemalloc allocated {:>7.0} MiB, resident {:>7.0} MiB",
            m.secs, m.phase, m.rss_mib, m.peak_rss_mib, m.allocated_mib, m.resident_mib
        );
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use overlay::Algorithm;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SuperpeersArgs,
    }

    fn config(flags: &[&str]) -> anyhow::Result<SuperPeerConfig> {
        let cli = Cli::try_parse_from(std::iter::once("lab").chain(flags.iter().copied()))?;
        Ok(config_of(&cli.args)?.1)
    }

    /// `--sp-config` reads a node's config file: its `[superpeer]` table, nested sections
    /// included, other tables ignored; `--share` and `--cap` override it; a bad table is an
    /// error that names the file.
    #[test]
    fn the_lab_reads_the_nodes_superpeer_table() {
        let dir = tempfile::tempdir().unwrap();
        let node = dir.path().join("node.toml");
        std::fs::write(
            &node,
            "listen = [\"/ip4/0.0.0.0/tcp/0\"]\n[timing]\nsettle_ms = 1000\n[superpeer]\nshare = 0.02\ncluster_cap = 90\n\
             [superpeer.tokens]\nhold_rounds = 4\n[superpeer.election]\nalgorithm = \"ring\"\n",
        )
        .unwrap();
        let path = node.to_str().unwrap();
        let c = config(&["--sp-config", path]).unwrap();
        assert_eq!((c.share, c.cluster_cap, c.tokens.hold_rounds), (0.02, 90, 4));
        assert_eq!(c.election.algorithm, Algorithm::Ring);
        let c = config(&["--sp-config", path, "--share", "0.05"]).unwrap();
        assert_eq!((c.share, c.cluster_cap, c.tokens.hold_rounds), (0.05, 30, 4), "the cap follows --share");
        let c = config(&["--sp-config", path, "--cap", "12"]).unwrap();
        assert_eq!((c.share, c.cluster_cap), (0.02, 12));
        assert_eq!(config(&[]).unwrap(), SuperPeerConfig::default());

        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "[superpeer.split]\nratio = 2.0\n").unwrap();
        let err = format!("{:#}", config(&["--sp-config", bad.to_str().unwrap()]).unwrap_err());
        assert!(err.contains("split.ratio"), "{err}");
        std::fs::write(&bad, "[superpeer]\nsharee = 0.1\n").unwrap();
        let err = format!("{:#}", config(&["--sp-config", bad.to_str().unwrap()]).unwrap_err());
        assert!(err.contains("bad.toml") && err.contains("sharee"), "{err}");
    }
}
