//! Experiment: what prefix grinding buys an attacker, with and without the id puzzle.
//!
//! The reserved-prefix method (seed 000) gives slot `s < W` to the node whose id is closest
//! (XOR) to the slot's key: `s` in the top `k = ceil(log2 W)` bits, zeros below. Ids are the
//! SHA-256 of the peer id, so an attacker cannot choose one, but it can draw keys until one
//! lands where it wants. Each draw is a key generation; at id difficulty `d` only one draw in
//! `2^d` is a valid id (`NodeId::puzzle_bits`, S/Kademlia's static puzzle), so `T` draws give
//! `m ~ T / 2^d` valid ids. The attacker keeps, for every slot, the closest of its valid ids
//! and registers exactly the winners; a slot is won when that id is closer to the key than
//! every honest id.
//!
//! Per trial (seeded): `n` honest ids (uniform), the attacker's `T` draws. Reported per row:
//! valid ids, slots won and their share, the share of nodes the winners make, and the share
//! `m / (n + m)` expected if slots go to the closest of `n + m` uniform ids. A slot whose
//! reserved prefix holds no id at all is counted for neither side (none at these sizes).
//! The cost of a draw is measured with real ed25519 key generations (`--keygens`).
//!
//! Run: `cargo run --release -p overlay --example grinding -- --nodes 1000 --slots 100 --trials 20 --out grinding.csv`

use anyhow::{Context as _, Result};
use clap::Parser;
use overlay::NodeId;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::Write;
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(about = "Attacker's share of reserved-prefix slots from grinding ids, with and without the id puzzle")]
struct Args {
    /// Honest nodes.
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// Reserved slots (super peers wanted).
    #[arg(long, default_value_t = 100)]
    slots: u64,
    /// Id difficulties to try.
    #[arg(long, value_delimiter = ',', default_value = "0,8,16")]
    difficulty: Vec<u32>,
    /// Attacker draws (key generations), as powers of two.
    #[arg(long, value_delimiter = ',', default_value = "10,14,18,22")]
    log2_draws: Vec<u32>,
    /// Trials per setting (seeds `seed`, `seed + 1`, ...).
    #[arg(long, default_value_t = 10)]
    trials: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Real key generations timed to price a draw.
    #[arg(long, default_value_t = 20_000)]
    keygens: u32,
    /// Per-trial rows (CSV); the summary goes to stdout.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

fn random_id(rng: &mut ChaCha8Rng) -> NodeId {
    let mut b = [0u8; 32];
    rng.fill_bytes(&mut b);
    NodeId::hash_of(&b)
}

/// XOR distance as an id (big-endian order).
fn distance(a: &NodeId, b: &NodeId) -> NodeId {
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = a.0[i] ^ b.0[i];
    }
    NodeId(out)
}

fn slot_key(k: u32, s: u64) -> NodeId {
    let mut out = [0u8; 32];
    if k > 0 {
        out[..8].copy_from_slice(&(s << (64 - k)).to_be_bytes());
    }
    NodeId(out)
}

/// The closest id to each slot's key among `ids` that fall in a reserved prefix.
fn closest(ids: impl Iterator<Item = NodeId>, k: u32, w: u64) -> Vec<Option<NodeId>> {
    let mut best: Vec<Option<NodeId>> = vec![None; w as usize];
    for id in ids {
        let s = id.prefix(k);
        if s < w {
            let d = distance(&id, &slot_key(k, s));
            let slot = &mut best[s as usize];
            if slot.is_none_or(|b| d < b) {
                *slot = Some(d);
            }
        }
    }
    best
}

fn main() -> Result<()> {
    let a = Args::parse();
    let k = overlay::superpeer::prefix_bits(a.slots);
    let mut out = match &a.out {
        Some(p) => Some(std::fs::File::create(p).with_context(|| format!("cannot write {}", p.display()))?),
        None => None,
    };
    if let Some(f) = out.as_mut() {
        writeln!(f, "seed,nodes,slots,difficulty,draws,valid,won,slot_share,node_share,expected_share")?;
    }
    // The price of a draw: one ed25519 key, its peer id, its node id and the puzzle's hash.
    let t0 = Instant::now();
    let mut best_bits = 0;
    for _ in 0..a.keygens {
        let key = libp2p_identity::Keypair::generate_ed25519();
        let id = NodeId::hash_of(&key.public().to_peer_id().to_bytes());
        best_bits = best_bits.max(id.puzzle_bits());
    }
    let per_draw = t0.elapsed().as_secs_f64() / f64::from(a.keygens.max(1));
    println!(
        "one draw (ed25519 key, peer id, node id, puzzle hash): {:.1} us ({} draws timed, best {best_bits} bits)",
        per_draw * 1e6,
        a.keygens
    );
    println!(
        "| difficulty | draws | CPU (1 core) | valid ids m | slots won (mean) | slot share | node share | m/(n+m) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for &d in &a.difficulty {
        for &l in &a.log2_draws {
            let draws = 1u64 << l;
            let (mut valid_sum, mut won_sum, mut node_share_sum, mut expected_sum) = (0f64, 0f64, 0f64, 0f64);
            for t in 0..a.trials {
                let seed = a.seed + t;
                let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (u64::from(d) << 40) ^ (u64::from(l) << 48));
                let honest = closest((0..a.nodes).map(|_| random_id(&mut rng)), k, a.slots);
                let mut valid = 0u64;
                let mine = closest(
                    (0..draws).filter_map(|_| {
                        let id = random_id(&mut rng);
                        (id.puzzle_bits() >= d).then(|| {
                            valid += 1;
                            id
                        })
                    }),
                    k,
                    a.slots,
                );
                let won = honest
                    .iter()
                    .zip(&mine)
                    .filter(|(h, m)| match (h, m) {
                        (Some(h), Some(m)) => m < h,
                        (None, Some(_)) => true,
                        _ => false,
                    })
                    .count() as f64;
                let node_share = won / (a.nodes as f64 + won);
                let expected = valid as f64 / (a.nodes as f64 + valid as f64);
                if let Some(f) = out.as_mut() {
                    writeln!(
                        f,
                        "{seed},{},{},{d},{draws},{valid},{won},{:.4},{node_share:.4},{expected:.4}",
                        a.nodes,
                        a.slots,
                        won / a.slots as f64
                    )?;
                }
                valid_sum += valid as f64;
                won_sum += won;
                node_share_sum += node_share;
                expected_sum += expected;
            }
            let n = a.trials.max(1) as f64;
            let cpu = draws as f64 * per_draw;
            println!(
                "| {d} | 2^{l} | {} | {:.0} | {:.1} of {} | {:.1} % | {:.2} % | {:.1} % |",
                human(cpu),
                valid_sum / n,
                won_sum / n,
                a.slots,
                100.0 * won_sum / n / a.slots as f64,
                100.0 * node_share_sum / n,
                100.0 * expected_sum / n
            );
        }
    }
    Ok(())
}

fn human(secs: f64) -> String {
    if secs < 1.0 {
        format!("{:.0} ms", secs * 1e3)
    } else if secs < 3600.0 {
        format!("{secs:.1} s")
    } else if secs < 86_400.0 {
        format!("{:.1} h", secs / 3600.0)
    } else {
        format!("{:.1} days", secs / 86_400.0)
    }
}
