//! The strong yardstick of `peerage-lab superpeers --kmedian` against brute force on small
//! worlds: the exact assignment is optimal, the Lagrangian bound never exceeds the optimum,
//! and the placement found is feasible and never below it.

use peerage_experiments::superpeers::kmedian::{assign_exact, solve, Params};
use peerage_experiments::superpeers::world::World;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn seed() -> u64 {
    let s = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(11u64);
    eprintln!("seed {s} (replay with PEERAGE_SEED={s})");
    s
}

fn world(n: usize, s: u64) -> World {
    let mut rng = ChaCha8Rng::seed_from_u64(s);
    World::generate(n, 4, 2, s, &mut rng).expect("world")
}

/// The cheapest capacitated assignment of the non-heads, by enumeration.
fn brute_assign(w: &World, heads: &[u32], cap: u64) -> f64 {
    let clients: Vec<u32> = (0..w.len() as u32).filter(|i| !heads.contains(i)).collect();
    fn go(w: &World, heads: &[u32], cap: u64, clients: &[u32], load: &mut Vec<u64>, acc: f64, best: &mut f64) {
        if acc >= *best {
            return;
        }
        let Some((&c, rest)) = clients.split_first() else {
            *best = acc;
            return;
        };
        for s in 0..heads.len() {
            if load[s] < cap {
                load[s] += 1;
                go(w, heads, cap, rest, load, acc + w.rtt_ms(c, heads[s]), best);
                load[s] -= 1;
            }
        }
    }
    let mut best = f64::INFINITY;
    go(w, heads, cap, &clients, &mut vec![0; heads.len()], 0.0, &mut best);
    best
}

fn check_assignment(w: &World, heads: &[u32], head_of: &[u32], cap: u64) -> f64 {
    let mut load = vec![0u64; w.len()];
    let mut total = 0.0;
    for i in 0..w.len() as u32 {
        let h = head_of[i as usize];
        assert!(heads.contains(&h), "node {i} has no head");
        if heads.contains(&i) {
            assert_eq!(h, i, "a head is its own head");
            continue;
        }
        load[h as usize] += 1;
        total += w.rtt_ms(i, h);
    }
    assert!(heads.iter().all(|&h| load[h as usize] <= cap), "a cluster over the cap");
    total
}

#[test]
fn exact_assignment_is_optimal() {
    let s = seed();
    let mut r = ChaCha8Rng::seed_from_u64(s);
    for round in 0..20 {
        let n = 11;
        let w = world(n, s.wrapping_add(round));
        let k = 3;
        let cap = 3 + (round % 2);
        let mut all: Vec<u32> = (0..n as u32).collect();
        all.shuffle(&mut r);
        let heads = &all[..k];
        let (head_of, total) = assign_exact(&w, heads, cap).expect("feasible");
        let again = check_assignment(&w, heads, &head_of, cap);
        assert!((again - total).abs() < 1e-6);
        let opt = brute_assign(&w, heads, cap);
        assert!((total - opt).abs() < 1e-3, "round {round}: exact {total} vs brute force {opt}");
    }
    // Not enough room is an error, not a panic.
    let w = world(11, s);
    assert!(assign_exact(&w, &[0, 1], 3).is_err());
}

#[test]
fn bound_below_optimum_and_placement_feasible() {
    let s = seed();
    for round in 0..4 {
        let n = 10;
        let w = world(n, s.wrapping_add(100 + round));
        let (k, cap) = (3usize, 3u64);
        // The optimum over every set of k heads.
        let mut opt = f64::INFINITY;
        for a in 0..n as u32 {
            for b in a + 1..n as u32 {
                for c in b + 1..n as u32 {
                    opt = opt.min(brute_assign(&w, &[a, b, c], cap));
                }
            }
        }
        let rest = (n - k) as f64;
        let p = Params { k, cap, iterations: 200, seed: s };
        let out = solve(&w, &p, &[0, 1, 2], &[3, 4, 5], |_| {}).expect("solve");
        assert_eq!(out.heads.len(), k);
        let total = check_assignment(&w, &out.heads, &out.head_of, cap);
        assert!((total / rest - out.best_mean_ms).abs() < 1e-6);
        assert!(out.best_mean_ms >= opt / rest - 1e-6, "round {round}: below the optimum");
        assert!(
            out.bound_mean_ms <= opt / rest + 1e-6,
            "round {round}: bound {} above the optimum {}",
            out.bound_mean_ms,
            opt / rest
        );
        eprintln!(
            "round {round}: optimum {:.3} ms, found {:.3}, bound {:.3}",
            opt / rest,
            out.best_mean_ms,
            out.bound_mean_ms
        );
    }
}
