//! Experiment: how well do Vivaldi coordinates predict RTTs of the Internet latency model?
//!
//! `n` nodes are placed by [`LatencyModel`]. Every node runs a [`VivaldiClient`]. In each
//! round every node measures (with jitter, through the model's `sample_rtt`) the RTT to each
//! of its fixed neighbours (a random view, as a gossip or DHT routing table gives; optionally
//! some of them in its own city, as a latency-aware overlay learns) and to a few fresh
//! random peers (as gossip partners), and updates its coordinate with the peer's current
//! coordinate. At checkpoints the median relative error `|predicted − true| / true` is taken
//! over random node pairs against the model's base (jitter-free) RTT.
//!
//! The same run is repeated with Serf's exact algorithm (`VivaldiConfig::serf`: no outlier
//! gate) and with plain Vivaldi (`VivaldiConfig::vanilla`: no adjustment, no latency filter,
//! no gravity, no gate) to show what each addition buys.
//!
//! Run: `cargo run --release -p overlay --example vivaldi_error -- --nodes 1000 --seed 1`

use anyhow::{bail, Context as _, Result};
use clap::Parser;
use overlay::coords::{VivaldiClient, VivaldiConfig};
use overlay::latency::{LatencyModel, ModelConfig};
use overlay::stats::Sample;
use overlay::NodeId;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(about = "Median relative error of Vivaldi coordinates over the Internet latency model")]
struct Args {
    /// Number of nodes.
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// Seed of the latency model and of the run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Rounds of measurements.
    #[arg(long, default_value_t = 200)]
    rounds: usize,
    /// Euclidean dimensions of the coordinates (plus a height).
    #[arg(long, default_value_t = 8)]
    dims: usize,
    /// Fixed neighbours per node, each measured every round.
    #[arg(long, default_value_t = 16)]
    neighbours: usize,
    /// Of the fixed neighbours, how many are picked from the node's own city when it has
    /// others there (a latency-aware overlay's near neighbours: in Peerage, the members of
    /// the node's low-latency super-peer cluster).
    #[arg(long, default_value_t = 4)]
    local: usize,
    /// Fresh uniformly random peers measured per node per round.
    #[arg(long, default_value_t = 2)]
    random: usize,
    /// Every this many rounds each node replaces its oldest non-local fixed neighbour with a
    /// fresh random peer (a rotating sample over a constant number of neighbours; 0 = never).
    #[arg(long, default_value_t = 0)]
    rotate_every: usize,
    /// Node pairs sampled for the error statistics.
    #[arg(long, default_value_t = 100_000)]
    pairs: usize,
    /// Also run plain Vivaldi (no adjustment, filter, gravity) for comparison.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    vanilla: bool,
    /// Override the default and Serf runs' adjustment window (0 = off).
    #[arg(long)]
    adjustment_window: Option<u16>,
    /// Override the default and Serf runs' latency-filter size (1 = off).
    #[arg(long)]
    filter_size: Option<u8>,
    /// Override the default and Serf runs' gravity rho, seconds (0 = off).
    #[arg(long)]
    gravity_rho: Option<f64>,
    /// Override the outlier gate's factor in the default run (0 = off).
    #[arg(long)]
    outlier_factor: Option<f64>,
    /// Override the outlier gate's floor in the default run.
    #[arg(long)]
    outlier_floor: Option<f64>,
    /// Also run Serf's exact algorithm (no outlier gate) for comparison.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    serf: bool,
    /// Override Vivaldi's cc (coordinate timestep factor) in all runs.
    #[arg(long)]
    cc: Option<f64>,
    /// Latency model configuration as JSON (fields of `ModelConfig`; missing ones default).
    #[arg(long)]
    model: Option<String>,
}

struct Errors {
    median: f64,
    p90: f64,
    mean: f64,
    /// Per pair class (same city, same region, other region): median relative error, pairs,
    /// median absolute error in ms.
    by_class: [(f64, usize, f64); 3],
}

/// The nearest-rank percentile ([`overlay::stats`]); NaN for an empty sample.
fn percentile(s: &Sample, p: f64) -> f64 {
    s.quantile(p).unwrap_or(f64::NAN)
}

fn measure(model: &LatencyModel, clients: &[VivaldiClient], pairs: &[(usize, usize)]) -> Result<Errors> {
    let mut all = Vec::with_capacity(pairs.len());
    let mut classes: [Vec<f64>; 3] = [vec![], vec![], vec![]];
    let mut abs_ms: [Vec<f64>; 3] = [vec![], vec![], vec![]];
    for &(a, b) in pairs {
        let truth = model.rtt_ms(a, b) / 1000.0;
        let est = clients[a].coordinate().distance_secs(clients[b].coordinate()).unwrap_or(f64::INFINITY);
        let e = (est - truth).abs() / truth;
        all.push(e);
        let class = if model.city_of(a) == model.city_of(b) {
            0
        } else if model.region_of(a) == model.region_of(b) {
            1
        } else {
            2
        };
        classes[class].push(e);
        abs_ms[class].push((est - truth).abs() * 1000.0);
    }
    let all = Sample::new(all)?;
    let mut by_class = [(0.0, 0, 0.0); 3];
    for (k, (c, a)) in classes.into_iter().zip(abs_ms).enumerate() {
        let (c, a) = (Sample::new(c)?, Sample::new(a)?);
        by_class[k] = (percentile(&c, 0.5), c.len(), percentile(&a, 0.5));
    }
    Ok(Errors { median: percentile(&all, 0.5), p90: percentile(&all, 0.9), mean: all.mean().unwrap_or(0.0), by_class })
}

fn neighbour_lists(model: &LatencyModel, args: &Args, rng: &mut ChaCha8Rng) -> Vec<Vec<u32>> {
    let n = model.len();
    // Nodes grouped by city, for the local neighbours.
    let mut by_city: std::collections::HashMap<usize, Vec<u32>> = std::collections::HashMap::new();
    for a in 0..n {
        by_city.entry(model.city_of(a)).or_default().push(a as u32);
    }
    (0..n)
        .map(|a| {
            let mut list = Vec::with_capacity(args.neighbours);
            let same_city = &by_city[&model.city_of(a)];
            for _ in 0..args.local.min(args.neighbours) {
                if same_city.len() > 1 {
                    let b = same_city[rng.gen_range(0..same_city.len())];
                    if b as usize != a && !list.contains(&b) {
                        list.push(b);
                    }
                }
            }
            while list.len() < args.neighbours.min(n - 1) {
                let b = model.random_peer(a, rng).unwrap_or(0) as u32;
                if !list.contains(&b) {
                    list.push(b);
                }
            }
            list
        })
        .collect()
}

fn run(label: &str, model: &LatencyModel, config: VivaldiConfig, args: &Args, pairs: &[(usize, usize)]) -> Result<()> {
    let n = model.len();
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed ^ 0x5eed);
    let mut neighbours = neighbour_lists(model, args, &mut rng);
    // The next non-local neighbour each node replaces when it rotates (oldest first).
    let mut next_out = vec![args.local.min(args.neighbours); n];
    let config = Arc::new(config);
    let mut clients: Vec<VivaldiClient> =
        (0..n).map(|_| VivaldiClient::new(config.clone())).collect::<Result<_, _>>().context("bad Vivaldi config")?;
    let ids: Vec<NodeId> = (0..n).map(|i| NodeId::from_u64(i as u64)).collect();
    let started = Instant::now();
    let mut updates = 0u64;
    let mut refused = 0u64;
    let checkpoints: Vec<usize> = {
        let mut c: Vec<usize> =
            [1, 5, 10, 20, 50, 100, 200, 500, 1000].into_iter().filter(|&r| r < args.rounds).collect();
        c.push(args.rounds);
        c
    };
    println!(
        "\n[{label}] dims={} rounds={} neighbours={} (local {}) random/round={} rotate every {} rounds",
        config.dimensionality, args.rounds, args.neighbours, args.local, args.random, args.rotate_every
    );
    println!("{:>6} {:>9} {:>9} {:>9}", "round", "median", "p90", "mean");
    for round in 1..=args.rounds {
        if args.rotate_every > 0 && round % args.rotate_every == 0 {
            for (a, list) in neighbours.iter_mut().enumerate() {
                let from = args.local.min(list.len());
                if from == list.len() {
                    continue;
                }
                let b = model.random_peer(a, &mut rng).unwrap_or(a) as u32;
                if b as usize != a && !list.contains(&b) {
                    list[next_out[a]] = b;
                }
                next_out[a] = if next_out[a] + 1 >= list.len() { from } else { next_out[a] + 1 };
            }
        }
        for a in 0..n {
            let fixed = neighbours[a].iter().map(|&b| b as usize);
            let peers: Vec<usize> =
                fixed.chain((0..args.random).map(|_| model.random_peer(a, &mut rng).unwrap_or(a))).collect();
            for b in peers {
                if b == a {
                    continue;
                }
                let rtt = model.sample_rtt(a, b, &mut rng);
                let theirs = *clients[b].coordinate();
                match clients[a].update(&ids[b], &theirs, rtt, &mut rng) {
                    Ok(_) => updates += 1,
                    Err(_) => refused += 1,
                }
            }
        }
        if checkpoints.contains(&round) {
            let e = measure(model, &clients, pairs)?;
            println!("{round:>6} {:>9.4} {:>9.4} {:>9.4}", e.median, e.p90, e.mean);
        }
    }
    let elapsed = started.elapsed();
    let e = measure(model, &clients, pairs)?;
    let resets: u64 = clients.iter().map(|c| c.stats().resets as u64).sum();
    let outliers: u64 = clients.iter().map(|c| c.stats().outliers).sum();
    let mem = clients.iter().map(|c| c.memory_bytes()).sum::<usize>() as f64 / n as f64;
    println!("[{label}] final: median relative error {:.4}, p90 {:.4}, mean {:.4}", e.median, e.p90, e.mean);
    for (name, (rel, pairs, abs)) in ["same city", "same region", "other region"].iter().zip(e.by_class) {
        println!("[{label}]   {name:>12}: {pairs:>6} pairs, median relative error {rel:.4}, median absolute error {abs:.2} ms");
    }
    println!(
        "[{label}] {updates} updates ({refused} refused, {resets} resets, {outliers} gated as outliers) in {:.2} s ({:.2} M updates/s); client memory {mem:.0} B/node",
        elapsed.as_secs_f64(),
        updates as f64 / elapsed.as_secs_f64() / 1e6
    );
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.nodes < 2 {
        bail!("--nodes must be at least 2");
    }
    if args.rounds == 0 || args.pairs == 0 {
        bail!("--rounds and --pairs must be positive");
    }
    if args.neighbours > 1024 || args.random > 1024 || args.local > args.neighbours {
        bail!("--neighbours and --random must be at most 1024, and --local at most --neighbours");
    }
    let model_config: ModelConfig = match &args.model {
        Some(json) => serde_json::from_str(json).context("--model is not a valid ModelConfig JSON")?,
        None => ModelConfig::default(),
    };
    let mut config = VivaldiConfig { dimensionality: args.dims, ..VivaldiConfig::default() };
    let mut vanilla = VivaldiConfig::vanilla(args.dims);
    let mut serf = VivaldiConfig::serf(args.dims);
    if let Some(f) = args.outlier_factor {
        config.outlier_factor = f;
    }
    if let Some(f) = args.outlier_floor {
        config.outlier_floor = f;
    }
    for c in [&mut config, &mut serf] {
        if let Some(w) = args.adjustment_window {
            c.adjustment_window = w;
        }
        if let Some(f) = args.filter_size {
            c.latency_filter_size = f;
        }
        if let Some(g) = args.gravity_rho {
            c.gravity_rho = g;
        }
    }
    if let Some(cc) = args.cc {
        for c in [&mut config, &mut serf, &mut vanilla] {
            c.vivaldi_cc = cc;
        }
    }
    config.validate().context(
        "Vivaldi configuration (--dims, --adjustment-window, --filter-size, --gravity-rho, --outlier-factor, --cc)",
    )?;
    let started = Instant::now();
    let model = LatencyModel::generate(args.nodes, &model_config, args.seed).context("latency model")?;
    println!(
        "latency model: {} nodes generated in {:.3} s ({} B/node), seed {}",
        model.len(),
        started.elapsed().as_secs_f64(),
        LatencyModel::BYTES_PER_NODE,
        args.seed
    );
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed ^ 0xe7a1);
    let pairs: Vec<(usize, usize)> = (0..args.pairs)
        .filter_map(|_| {
            let a = rng.gen_range(0..model.len());
            model.random_peer(a, &mut rng).map(|b| (a, b))
        })
        .collect();
    let rtts = Sample::collect(pairs.iter().map(|&(a, b)| model.rtt_ms(a, b)))?;
    println!(
        "true RTT over sampled pairs, ms: p10 {:.1}, median {:.1}, p90 {:.1}",
        percentile(&rtts, 0.1),
        percentile(&rtts, 0.5),
        percentile(&rtts, 0.9)
    );
    run("peerage", &model, config, &args, &pairs)?;
    if args.serf {
        run("serf", &model, serf, &args, &pairs)?;
    }
    if args.vanilla {
        run("vanilla", &model, vanilla, &args, &pairs)?;
    }
    Ok(())
}
