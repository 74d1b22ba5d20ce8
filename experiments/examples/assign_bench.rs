//! Times the yardsticks' capacitated assignment (`superpeers::assign::optimal`) on random
//! heads: the cost of one `random` draw of `peerage-lab superpeers`, without the protocols.
//!
//!     cargo run --release -p peerage-experiments --example assign_bench -- --nodes 1000000 --draws 1

use clap::Parser;
use peerage_experiments::superpeers::{assign, baseline, world::World};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::time::Instant;

#[derive(Parser)]
struct Args {
    /// Nodes of the world.
    #[arg(long, default_value_t = 100_000)]
    nodes: usize,
    /// Share of heads (the lab's default 1 %).
    #[arg(long, default_value_t = 0.01)]
    share: f64,
    /// Cluster cap.
    #[arg(long, default_value_t = 150)]
    cap: u64,
    /// Random draws of heads, each timed.
    #[arg(long, default_value_t = 1)]
    draws: u32,
    /// Seed of the world and of the draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let mut rng = ChaCha8Rng::seed_from_u64(a.seed);
    let t = Instant::now();
    let w = World::generate(a.nodes, 8, 8, a.seed, &mut rng)?;
    let geo = assign::Geometry::new(&w);
    println!("world of {} nodes in {:.1} s", a.nodes, t.elapsed().as_secs_f64());
    let k = ((a.nodes as f64 * a.share).round() as usize).max(1);
    for d in 0..a.draws {
        let heads = baseline::random_heads(a.nodes, k, &mut rng);
        let t = Instant::now();
        let r = assign::optimal(&w, &geo, &heads, a.cap)?;
        println!(
            "draw {d}: {k} heads, {:.2} s, mean {:.4} ms, gap {:.5} ms, bids {}, lists extended {}",
            t.elapsed().as_secs_f64(),
            r.mean_ms(),
            r.gap_ms(),
            r.bids,
            r.extended
        );
    }
    Ok(())
}
