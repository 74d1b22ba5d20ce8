//! The yardsticks of `peerage-lab superpeers` against brute force on small worlds: the exact
//! assignment is optimal, the auction's is within its certified gap, the nearest search and
//! the medoid are exact, the Lagrangian bound never exceeds the optimum, and the placement
//! found is feasible and never below it.

use peerage_experiments::superpeers::assign::{self, Geometry, Nearest};
use peerage_experiments::superpeers::kmedian::{assign_exact, medoid, solve, Params};
use peerage_experiments::superpeers::world::World;
use rand::seq::SliceRandom;
use rand::Rng;
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
        let geo = Geometry::new(&w);
        let starts = vec![("a".to_string(), vec![0, 1, 2]), ("b".to_string(), vec![3, 4, 5])];
        let out = solve(&w, &geo, &p, starts, |_| {}).expect("solve");
        assert_eq!(out.heads.len(), k);
        let total = check_assignment(&w, &out.heads, &out.head_of, cap);
        assert!((total / rest - out.best_mean_ms).abs() < 1e-6);
        assert!(out.best_mean_ms >= opt / rest - 1e-6, "round {round}: below the optimum");
        let bound = out.bound_mean_ms.expect("small world: a bound");
        assert!(bound <= opt / rest + 1e-6, "round {round}: bound {bound} above the optimum {}", opt / rest);
        eprintln!("round {round}: optimum {:.3} ms, found {:.3}, bound {:.3}", opt / rest, out.best_mean_ms, bound);
    }
}

/// The auction's assignment ([`assign::optimal`]) against the exact cycle-cancelling one:
/// feasible, within its certified gap of the optimum, and the certificate never above it.
#[test]
fn auction_assignment_is_certified_against_the_exact_one() {
    let s = seed();
    let mut r = ChaCha8Rng::seed_from_u64(s);
    for round in 0..12u64 {
        let n = 80 + 40 * (round as usize % 4);
        let w = world(n, s.wrapping_add(300 + round));
        let geo = Geometry::new(&w);
        let k = 3 + (round as usize % 5);
        // Caps from tight (every slot needed) to loose.
        let cap = ((n - k).div_ceil(k) + (round as usize % 3) * 5) as u64;
        let mut all: Vec<u32> = (0..n as u32).collect();
        all.shuffle(&mut r);
        let heads = &all[..k];
        let (_, exact) = assign_exact(&w, heads, cap).expect("feasible");
        let a = assign::optimal(&w, &geo, heads, cap).expect("feasible");
        let again = check_assignment(&w, heads, &a.head_of, cap);
        assert!((again - a.total_ms).abs() < 1e-6);
        assert!(a.bound_ms <= exact + 1e-6, "round {round}: certificate {} above the optimum {exact}", a.bound_ms);
        assert!(a.total_ms >= exact - 1e-6, "round {round}: below the optimum");
        assert!(a.total_ms - a.bound_ms <= assign::EPS_MS * (n - k) as f64 + 1e-6, "round {round}: gap {}", a.gap_ms());
        eprintln!(
            "round {round}: n {n} k {k} cap {cap}: exact {exact:.4}, auction {:.4}, bound {:.4}",
            a.total_ms, a.bound_ms
        );
    }
    let w = world(30, s);
    assert!(assign::optimal(&w, &Geometry::new(&w), &[0, 1], 3).is_err(), "no room is an error");
}

/// The exact nearest search ([`Nearest`]) returns the brute-force nearest targets by TRUE
/// RTT, and every target it leaves out is at least its threshold away.
#[test]
fn nearest_targets_match_brute_force() {
    let s = seed();
    let mut r = ChaCha8Rng::seed_from_u64(s ^ 7);
    for (round, n) in [50usize, 400, 3000].into_iter().enumerate() {
        let mut rng = ChaCha8Rng::seed_from_u64(s ^ round as u64);
        let w = World::generate(n, 8, 8, s ^ round as u64, &mut rng).expect("world");
        let geo = Geometry::new(&w);
        let mut all: Vec<u32> = (0..n as u32).collect();
        all.shuffle(&mut r);
        let targets = &all[..n / 5];
        let index = Nearest::new(&geo, targets);
        let mut out = Vec::new();
        for q in 0..200u32 {
            let i = (q * 7919) % n as u32;
            let l = 1 + (q as usize % 9);
            let t = index.query(&w, i, l, &mut out);
            let mut brute: Vec<(u32, f64)> =
                targets.iter().filter(|&&j| j != i).map(|&j| (j, w.rtt_ms(i, j))).collect();
            brute.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
            let want: Vec<f64> = brute.iter().take(l).map(|x| x.1).collect();
            let got: Vec<f64> = out.iter().map(|x| x.1).collect();
            assert_eq!(got, want, "n {n} node {i} l {l}");
            for &(j, d) in &brute {
                assert!(
                    out.iter().any(|x| x.0 == j) || d >= t,
                    "n {n} node {i}: target {j} at {d} below the threshold {t}"
                );
            }
            for &(j, d) in &out {
                assert!(geo.lower_bound(i, j) <= d, "the model's bound above its RTT");
            }
        }
    }
}

/// The pruned medoid is the brute-force one, and the nearest-node floor is a bound.
#[test]
fn medoid_and_floor_match_brute_force() {
    let s = seed();
    let w = world(300, s);
    let geo = Geometry::new(&w);
    let mut r = ChaCha8Rng::seed_from_u64(s);
    for _ in 0..20 {
        let mut all: Vec<u32> = (0..300).collect();
        all.shuffle(&mut r);
        let cluster = &all[..1 + r.gen_range(0..60)];
        let cost = |c: u32| cluster.iter().map(|&m| w.rtt_ms(m, c)).sum::<f64>();
        let best = cluster.iter().map(|&c| cost(c)).fold(f64::INFINITY, f64::min);
        assert_eq!(cost(medoid(&w, &geo, cluster)), best);
    }
    let nearest = assign::nearest_other(&w, &geo, 2);
    for i in 0..300u32 {
        let brute = (0..300u32).filter(|&j| j != i).map(|j| w.rtt_ms(i, j)).fold(f64::INFINITY, f64::min);
        assert_eq!(nearest[i as usize], brute, "node {i}");
    }
    // Any placement of 3 heads pays at least the floor.
    let floor = assign::floor_bound(&nearest, 3);
    let a = assign::optimal(&w, &geo, &[0, 1, 2], 300).expect("room");
    assert!(a.mean_ms() >= floor);
}
