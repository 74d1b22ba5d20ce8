//! Where a protocol's placement loses against the capacitated k-median: a decomposition of
//! the gap, printed by `peerage-lab superpeers --diagnose` for every protocol run. Global
//! knowledge of the TRUE RTT, like [`super::kmedian`]; a diagnostic only, no protocol reads
//! it.
//!
//! For the protocol's heads `P` (with its own assignment) and the k-median's heads `K`:
//! - **assignment loss**: `P` assigned optimally on the TRUE RTT ([`assign::optimal`])
//!   against the protocol's own assignment;
//! - **local optimum**: `P` improved by the same capacitated k-medoids alternation the
//!   k-median uses ([`kmedian::refine`]): if that ends near `K`'s mean, the protocol's
//!   heads are merely not settled; if it ends far above it, they sit in a poorer basin and
//!   local moves cannot close the gap;
//! - **cost split** of the mean RTT (members only, heads not counted, as in
//!   [`super::measure`]): the member's own access delay, its head's access delay (member
//!   weighted, so big clusters count more) and the rest (propagation, inflation, detours);
//! - **geography**: per city (the latency model's cities), how many heads each puts there
//!   against the city's share of the nodes; the heads `P` would have to move between cities
//!   to have `K`'s counts (`Σ_c max(0, K_c - P_c)`), the share of members served from another
//!   city and what they pay, clusters at the cap, and the biggest cities row by row.
//!
//! Choices: cities are the model's (the unit in which a node's nearest peers live); "served
//! from another city" compares the member's and the head's city indices.

use super::assign::{self, Geometry};
use super::kmedian;
use super::world::World;

/// The decomposition for one placement (module doc). Times in ms.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Split {
    /// Heads placed.
    pub heads: usize,
    /// Members (attached non-heads).
    pub members: usize,
    /// Mean TRUE RTT of the members to their head.
    pub mean_ms: f64,
    /// Mean of the members' own access delay.
    pub member_access_ms: f64,
    /// Member-weighted mean of the heads' access delay.
    pub head_access_ms: f64,
    /// Mean of the rest (RTT minus both access delays).
    pub rest_ms: f64,
    /// Share of members whose head is in another city.
    pub cross_city_share: f64,
    /// Mean RTT of those members.
    pub cross_city_ms: f64,
    /// Mean RTT of the members served from their own city.
    pub same_city_ms: f64,
    /// Clusters with exactly `cap` members.
    pub at_cap: usize,
}

/// One city's row: nodes, heads by the protocol and by the k-median, and each one's mean RTT
/// for the city's members.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CityRow {
    pub city: usize,
    pub nodes: usize,
    pub heads_protocol: usize,
    pub heads_kmedian: usize,
    pub mean_protocol_ms: f64,
    pub mean_kmedian_ms: f64,
}

/// The whole diagnosis of a protocol's placement against the k-median's.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Diagnosis {
    pub protocol: Split,
    pub kmedian: Split,
    /// The protocol's heads with the exact TRUE assignment, mean ms.
    pub exact_mean_ms: f64,
    /// Those heads after capacitated k-medoids from there, mean ms.
    pub medoids_mean_ms: f64,
    /// Cities with any node, and with a head of the protocol / of the k-median.
    pub cities: usize,
    pub cities_with_protocol_head: usize,
    pub cities_with_kmedian_head: usize,
    /// Heads the protocol would have to move between cities to match the k-median's counts.
    pub heads_to_move: usize,
    /// Of those, how many the k-median wants in cities the protocol leaves without a head.
    pub missing_in_headless_cities: usize,
    /// The biggest cities by nodes (up to 12).
    pub biggest: Vec<CityRow>,
    /// Per region of the model: (nodes, heads by the protocol, heads by the k-median).
    pub regions: Vec<(usize, usize, usize)>,
}

fn split(w: &World, heads: &[u32], head_of: &[u32], cap: u64) -> Split {
    let m = &w.model;
    let (mut n, mut sum, mut acc_m, mut acc_h, mut cross, mut cross_sum) = (0usize, 0.0, 0.0, 0.0, 0usize, 0.0);
    let mut size = vec![0u64; w.len()];
    for (i, &h) in head_of.iter().enumerate() {
        if h == u32::MAX || h as usize == i {
            continue;
        }
        let r = w.rtt_ms(i as u32, h);
        n += 1;
        sum += r;
        acc_m += m.access_ms(i);
        acc_h += m.access_ms(h as usize);
        size[h as usize] += 1;
        if m.city_of(i) != m.city_of(h as usize) {
            cross += 1;
            cross_sum += r;
        }
    }
    let d = n.max(1) as f64;
    Split {
        heads: heads.len(),
        members: n,
        mean_ms: sum / d,
        member_access_ms: acc_m / d,
        head_access_ms: acc_h / d,
        rest_ms: (sum - acc_m - acc_h) / d,
        cross_city_share: cross as f64 / d,
        cross_city_ms: cross_sum / cross.max(1) as f64,
        same_city_ms: (sum - cross_sum) / (n - cross).max(1) as f64,
        at_cap: heads.iter().filter(|&&h| size[h as usize] >= cap).count(),
    }
}

/// Diagnoses `heads`/`head_of` (a protocol's placement, every node alive) against the
/// k-median's `km_heads`/`km_of`. Errors only if the exact assignment is infeasible.
pub fn diagnose(
    w: &World,
    geo: &Geometry,
    heads: &[u32],
    head_of: &[u32],
    km_heads: &[u32],
    km_of: &[u32],
    cap: u64,
) -> Result<Diagnosis, kmedian::KMedianError> {
    let exact = assign::optimal(w, geo, heads, cap)?.mean_ms();
    let medoids = kmedian::refine(w, geo, heads.to_vec(), cap)?.1.mean_ms();
    let m = &w.model;
    let cities = (0..w.len()).map(|i| m.city_of(i)).max().map_or(0, |c| c + 1);
    let mut nodes = vec![0usize; cities];
    let (mut hp, mut hk) = (vec![0usize; cities], vec![0usize; cities]);
    let (mut sp, mut sk, mut np, mut nk) =
        (vec![0.0; cities], vec![0.0; cities], vec![0usize; cities], vec![0usize; cities]);
    let mut regions = vec![(0usize, 0usize, 0usize); m.config().regions.len()];
    for i in 0..w.len() {
        nodes[m.city_of(i)] += 1;
        regions[m.region_of(i)].0 += 1;
    }
    for &h in heads {
        regions[m.region_of(h as usize)].1 += 1;
    }
    for &h in km_heads {
        regions[m.region_of(h as usize)].2 += 1;
    }
    for &h in heads {
        hp[m.city_of(h as usize)] += 1;
    }
    for &h in km_heads {
        hk[m.city_of(h as usize)] += 1;
    }
    for (of, s, c) in [(head_of, &mut sp, &mut np), (km_of, &mut sk, &mut nk)] {
        for (i, &h) in of.iter().enumerate() {
            if h != u32::MAX && h as usize != i {
                s[m.city_of(i)] += w.rtt_ms(i as u32, h);
                c[m.city_of(i)] += 1;
            }
        }
    }
    let mut order: Vec<usize> = (0..cities).filter(|&c| nodes[c] > 0).collect();
    order.sort_by(|a, b| nodes[*b].cmp(&nodes[*a]).then(a.cmp(b)));
    let biggest = order
        .iter()
        .take(12)
        .map(|&c| CityRow {
            city: c,
            nodes: nodes[c],
            heads_protocol: hp[c],
            heads_kmedian: hk[c],
            mean_protocol_ms: sp[c] / np[c].max(1) as f64,
            mean_kmedian_ms: sk[c] / nk[c].max(1) as f64,
        })
        .collect();
    Ok(Diagnosis {
        protocol: split(w, heads, head_of, cap),
        kmedian: split(w, km_heads, km_of, cap),
        exact_mean_ms: exact,
        medoids_mean_ms: medoids,
        cities: order.len(),
        cities_with_protocol_head: hp.iter().filter(|&&x| x > 0).count(),
        cities_with_kmedian_head: hk.iter().filter(|&&x| x > 0).count(),
        heads_to_move: (0..cities).map(|c| hk[c].saturating_sub(hp[c])).sum(),
        missing_in_headless_cities: (0..cities).filter(|&c| hp[c] == 0).map(|c| hk[c]).sum(),
        biggest,
        regions,
    })
}

/// Prints a diagnosis (indented, under the k-median's lines).
pub fn print(name: &str, d: &Diagnosis) {
    for (who, s) in [(name, &d.protocol), ("kmedian", &d.kmedian)] {
        println!(
            "  diag {who}: {} heads, {} members, mean {:.2} ms = member access {:.2} + head access {:.2} + rest {:.2}; from another city {:.1} % at {:.2} ms (own city {:.2} ms); {} clusters at the cap",
            s.heads,
            s.members,
            s.mean_ms,
            s.member_access_ms,
            s.head_access_ms,
            s.rest_ms,
            100.0 * s.cross_city_share,
            s.cross_city_ms,
            s.same_city_ms,
            s.at_cap
        );
    }
    println!(
        "  diag {name}: own heads exact {:.2} ms, then k-medoids {:.2} ms; cities {} (with a head: {name} {}, kmedian {}); heads to move between cities {} ({} of them to cities {name} leaves headless)",
        d.exact_mean_ms,
        d.medoids_mean_ms,
        d.cities,
        d.cities_with_protocol_head,
        d.cities_with_kmedian_head,
        d.heads_to_move,
        d.missing_in_headless_cities
    );
    let regions: Vec<String> = d.regions.iter().map(|(n, p, k)| format!("{n}:{p}/{k}")).collect();
    println!("  diag {name}: per region nodes:heads {name}/kmedian {}", regions.join(" "));
    for c in &d.biggest {
        println!(
            "    city {:>4}: {:>5} nodes, heads {name} {:>3} / kmedian {:>3}, members' mean {:.2} / {:.2} ms",
            c.city, c.nodes, c.heads_protocol, c.heads_kmedian, c.mean_protocol_ms, c.mean_kmedian_ms
        );
    }
}

/// The gap split without the k-median search (`peerage-lab superpeers --diagnose`). Times in ms, means over the
/// members (heads not counted).
///
/// - `mean_ms`: the protocol's own placement and assignment;
/// - `exact_ms`: its heads, assigned optimally on the TRUE RTT (`mean - exact` = what the
///   assignment loses);
/// - `medoids_true_ms`: from there, capacitated k-medoids with each medoid chosen on the
///   TRUE RTT (what a local medoid step could still gain if nodes knew the true RTTs, e.g.
///   by measuring them);
/// - `medoids_pred_ms`: the same with each medoid chosen on the *predicted* RTT (the
///   coordinates, heights included; the assignment stays exact on the TRUE RTT): what the
///   same step gains when judged by the coordinates. `medoids_pred - medoids_true` is what
///   the coordinates' error costs the placement;
/// - `pred_ms` / `abs_err_ms`: the members' mean predicted RTT to their own head and the
///   mean |predicted - TRUE| over those pairs (the heads chosen, as the protocol saw them);
/// - `clusters` / `clusters_off`: the protocol's clusters, and those whose exact medoid on the
///   TRUE RTT over their own members (the head included) costs over 3 % less than their head
///   (what the measured medoid step, `overlay::superpeer::medoid`, left to find).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Gap {
    pub mean_ms: f64,
    pub exact_ms: f64,
    pub medoids_true_ms: f64,
    pub medoids_pred_ms: f64,
    pub pred_ms: f64,
    pub abs_err_ms: f64,
    pub clusters: usize,
    pub clusters_off: usize,
}

/// Computes [`Gap`] for `heads`/`head_of` (every node alive). Errors only if the exact
/// assignment is infeasible.
pub fn gap(w: &World, geo: &Geometry, heads: &[u32], head_of: &[u32], cap: u64) -> Result<Gap, kmedian::KMedianError> {
    let exact = assign::optimal(w, geo, heads, cap)?.mean_ms();
    let medoids_true = kmedian::refine(w, geo, heads.to_vec(), cap)?.1.mean_ms();
    let pred = |x: u32, c: u32| if x == c { 0.0 } else { 1000.0 * w.points[x as usize].rtt(&w.points[c as usize]) };
    let pred_medoid = |cluster: &[u32]| {
        let cost = |c: u32| cluster.iter().map(|&x| pred(x, c)).sum::<f64>();
        cluster.iter().copied().min_by(|&a, &b| cost(a).total_cmp(&cost(b))).unwrap_or(cluster[0])
    };
    let medoids_pred = kmedian::refine_by(w, geo, heads.to_vec(), cap, pred_medoid)?.1.mean_ms();
    let (mut n, mut sum, mut psum, mut err) = (0usize, 0.0, 0.0, 0.0);
    for (i, &h) in head_of.iter().enumerate() {
        if h == u32::MAX || h as usize == i {
            continue;
        }
        let (t, p) = (w.rtt_ms(i as u32, h), pred(i as u32, h));
        n += 1;
        sum += t;
        psum += p;
        err += (p - t).abs();
    }
    let d = n.max(1) as f64;
    let mut clusters: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
    for (i, &h) in head_of.iter().enumerate() {
        if h != u32::MAX {
            clusters.entry(h).or_default().push(i as u32);
        }
    }
    let clusters_off = clusters
        .iter()
        .filter(|(&h, c)| {
            let cost = |x: u32| c.iter().filter(|&&m| m != x).map(|&m| w.rtt_ms(m, x)).sum::<f64>();
            cost(kmedian::medoid(w, geo, c)) < 0.97 * cost(h)
        })
        .count();
    Ok(Gap {
        mean_ms: sum / d,
        exact_ms: exact,
        medoids_true_ms: medoids_true,
        medoids_pred_ms: medoids_pred,
        pred_ms: psum / d,
        abs_err_ms: err / d,
        clusters: clusters.len(),
        clusters_off,
    })
}

/// Prints a [`Gap`] (one indented line).
pub fn print_gap(name: &str, g: &Gap) {
    println!(
        "  gap {name}: mean {:.2} ms; own heads exact TRUE assignment {:.2} ms; then k-medoids by TRUE RTT {:.2} ms, by predicted RTT {:.2} ms; members' predicted RTT to their head {:.2} ms, mean |error| {:.2} ms; clusters whose exact medoid is over 3 % cheaper than their head {} of {}",
        g.mean_ms, g.exact_ms, g.medoids_true_ms, g.medoids_pred_ms, g.pred_ms, g.abs_err_ms, g.clusters_off, g.clusters
    );
}

/// Prints a [`super::protocol::FarMembers`] (a line for the nearest head, then one a class).
pub fn print_far(name: &str, f: &super::protocol::FarMembers) {
    let far: usize = f.classes.iter().filter(|(c, _)| !c.starts_with("near")).map(|(_, v)| v.0).sum();
    println!(
        "  far {name}: members' TRUE RTT to the nearest head, no cap, {:.2} ms; {:.1} % of the members more than 1/{} x as far as it",
        f.nearest_ms,
        100.0 * far as f64 / f.members.max(1) as f64,
        f.switch_factor
    );
    for (class, (count, excess)) in &f.classes {
        println!(
            "  far {name}: {class}: {count} of {} members, {excess:.3} ms of the mean RTT over the nearest head",
            f.members
        );
    }
}
