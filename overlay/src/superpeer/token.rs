//! The repulsion-token force law and the choice of where a token moves.
//!
//! Seed 000: "each token represents a repelling force ... if a node discovers that the total
//! forces acting on it exceed a threshold, it will move the token in the direction of the
//! combined forces". The seed names no force law. The first version used pure inverse-square
//! repulsion between tokens and moved a token to the known peer *furthest* along the force;
//! measured, that drove tokens to the rim of the populated coordinate space (as charges gather
//! on a conductor's surface) and made large jumps: 2.6x to 5x the mean latency of the
//! centralised k-means yardstick. The law below keeps the seed's shape (holders gossip
//! positions, each sums the forces on its token, moves past a threshold, to a known peer,
//! along the force) and adds what a super peer is *for*: its members pull it.
//!
//! All forces live in the Euclidean part of the coordinate space (heights enter only the
//! choice of the new holder, below). Notation: `p` the holder's position, `m` its members'
//! positions (the points they sent with `Attach`), `n` how many, `b` the other known tokens.
//!
//! - **Pull of the members as masses** (weight `attraction`): `P = (1/n) Σ (m - p)/|m - p|`,
//!   the mean unit vector toward the members. This is minus the gradient of the members'
//!   mean distance to `p`, so a token comes to rest at the geometric median of its own
//!   cluster: with the members' "attach to the nearest head with room" as the assignment
//!   step, the tokens run a decentralised, capacity-constrained Lloyd / k-medians iteration.
//!   Tokens settle at density-weighted centres and never leave populated areas. `|P| <= 1`.
//! - **Repulsion** from each known token `b` at distance `d` below the cut-off `r`
//!   (weight `repulsion`): magnitude `repulsion x (1 - d/r)` along `(p - b)/d`, the gradient
//!   of the potential `U(d) = repulsion x r/2 x (1 - d/r)²` (seconds, the same unit as the
//!   members' mean distance, so the two can be added in one cost, below). The cut-off is tied
//!   to the expected distance between neighbouring super peers *where this token is*:
//!   `r = repulsion_range x R`, `R` the holder's cluster radius (members' mean distance; with
//!   no members, the distance to the nearest known token). A global length from the wanted
//!   count and N̂ would assume nodes spread evenly, which they are not (Zipf-sized cities):
//!   a dense city needs several super peers close together, and a fixed cut-off would push
//!   them out of it. So repulsion only separates tokens that sit inside each other's cluster
//!   core (two tokens on the same spot split the same members and one is wasted).
//! - **Threshold**: the token is considered for a move only when `|F| > force_threshold`
//!   (x `promoted_factor` once its holder is a super peer).
//! - **Bounded step** (not "the furthest peer along F"): the wanted point is
//!   `t = p + step x F` with `step` the harmonic mean of the member distances (for the pull
//!   alone this is exactly one Weiszfeld step toward the geometric median), and `|t - p|`
//!   limited to `max_step x R`. The candidates are the holder's members and neighbours (so a
//!   token only moves among peers of its own neighbourhood), not holders of other tokens;
//!   the `move_shortlist` nearest to `t` are scored.
//! - **Move only on a real gain**: each shortlisted candidate `c` and the holder itself are
//!   scored with the cost the forces derive from: the predicted mean RTT (distance plus both
//!   heights) from the cluster *after* the move (members and old holder, without `c`) to `c`,
//!   plus the repulsion potential `Σ U(|c - b|)`; the token moves to the cheapest candidate only if it beats the holder's cost
//!   by the fraction `min_gain x cool`. Every move therefore lowers the cost: together with
//!   the members' switching (which also only lowers their RTT) this is a descent, so tokens
//!   settle.
//! - **Cooling**: `cool = 1 + epoch / cooling`, where the token's epoch counts its moves
//!   (and recreations). A token that has moved `cooling` times needs twice the gain, so late
//!   oscillations between near-equal spots die out within the round budget.

use super::config::SuperPeerConfig;
use super::message::PeerInfo;
use super::point::{Point, DIMS};

/// Distances below this (seconds) count as this much, so a member on the holder's own spot
/// does not dominate the Weiszfeld step.
const MIN_DIST: f64 = 1e-4;

/// The net force on a token, the step length it is scaled by and the cluster radius.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Force {
    /// Net force (dimensionless: the pull is a mean of unit vectors).
    pub v: [f64; DIMS],
    /// Seconds per unit of force (harmonic mean of the member distances, or `radius`).
    pub step: f64,
    /// The holder's cluster radius `R`, seconds.
    pub radius: f64,
}

impl Force {
    pub fn magnitude(&self) -> f64 {
        self.v.iter().map(|x| x * x).sum::<f64>().sqrt()
    }
}

fn diff(a: &Point, b: &Point) -> [f64; DIMS] {
    let mut d = [0f64; DIMS];
    for (i, v) in d.iter_mut().enumerate() {
        *v = a.x[i] as f64 - b.x[i] as f64;
    }
    d
}

/// The holder's cluster radius `R` (see the module doc); `None` when it has neither members
/// nor known tokens at a distance.
pub fn radius(me: &Point, others: &[Point], members: &[PeerInfo]) -> Option<f64> {
    let r = if members.is_empty() {
        others.iter().map(|o| me.euclid(o)).fold(f64::INFINITY, f64::min)
    } else {
        members.iter().map(|m| me.euclid(&m.point)).sum::<f64>() / members.len() as f64
    };
    (r.is_finite() && r > MIN_DIST).then_some(r)
}

/// The repulsion potential at `at` from the tokens at `others`, seconds (see the module doc).
pub fn repulsion_potential(at: &Point, others: &[Point], radius: f64, cfg: &SuperPeerConfig) -> f64 {
    let r = cfg.repulsion_range * radius;
    if cfg.repulsion <= 0.0 || r <= 0.0 {
        return 0.0;
    }
    others
        .iter()
        .map(|o| at.euclid(o))
        .filter(|d| *d < r)
        .map(|d| cfg.repulsion * r / 2.0 * (1.0 - d / r).powi(2))
        .sum()
}

/// The cost of the token at candidate `c` when held now by `me` with `members` (seconds):
/// the predicted mean RTT of the cluster's members to `c`, plus the repulsion potential at
/// `c`. After a move the old holder becomes a member and `c` stops being one, so the
/// members counted are the cluster `members ∪ {me}` without `c`; predicted RTT is distance
/// plus both heights ([`Point::rtt`]). With no member left the cost is the potential alone.
pub fn cost(
    c: &PeerInfo,
    me: &PeerInfo,
    members: &[PeerInfo],
    others: &[Point],
    radius: f64,
    cfg: &SuperPeerConfig,
) -> f64 {
    let mut sum = 0.0;
    let mut n = 0usize;
    for x in members.iter().chain(std::iter::once(me)) {
        if x.id == c.id {
            continue;
        }
        sum += c.point.rtt(&x.point);
        n += 1;
    }
    let pull = if n == 0 { 0.0 } else { cfg.attraction * sum / n as f64 };
    pull + repulsion_potential(&c.point, others, radius, cfg)
}

/// The force on a token held at `me`, from the other tokens at `others` and the holder's
/// `members`. `None` when there is nothing to measure it against (no members and no other
/// token at a distance).
pub fn net_force(me: &Point, others: &[Point], members: &[PeerInfo], cfg: &SuperPeerConfig) -> Option<Force> {
    let radius = radius(me, others, members)?;
    let mut v = [0f64; DIMS];
    let mut inv = 0f64;
    if !members.is_empty() && cfg.attraction > 0.0 {
        let w = cfg.attraction / members.len() as f64;
        for m in members {
            let d = me.euclid(&m.point);
            inv += 1.0 / d.max(MIN_DIST);
            if d < 1e-12 {
                continue;
            }
            let u = diff(&m.point, me);
            for i in 0..DIMS {
                v[i] += w * u[i] / d;
            }
        }
    }
    let r = cfg.repulsion_range * radius;
    if cfg.repulsion > 0.0 && r > 0.0 {
        for o in others {
            let d = me.euclid(o);
            if d < 1e-12 || d >= r {
                continue;
            }
            let mag = cfg.repulsion * (1.0 - d / r);
            let u = diff(me, o);
            for i in 0..DIMS {
                v[i] += mag * u[i] / d;
            }
        }
    }
    let step = if inv > 0.0 { members.len() as f64 / inv } else { radius };
    Some(Force { v, step, radius })
}

/// Where the token should go: the cheapest of the `move_shortlist` candidates nearest to the
/// wanted point `me + step x F` (step bounded by `max_step x R`), if it beats staying by the
/// fraction `min_gain x cool` (see the module doc). Candidates for which `excluded` is true,
/// or with an invalid point, are skipped.
#[allow(clippy::too_many_arguments)]
pub fn choose_target(
    me: &PeerInfo,
    force: &Force,
    members: &[PeerInfo],
    others: &[Point],
    candidates: &[PeerInfo],
    excluded: impl Fn(&PeerInfo) -> bool,
    cool: f64,
    cfg: &SuperPeerConfig,
) -> Option<PeerInfo> {
    let mag = force.magnitude();
    if !(mag.is_finite() && mag > 0.0 && force.step.is_finite()) {
        return None;
    }
    let len = (force.step * mag).min(cfg.max_step * force.radius);
    let mut t = me.point;
    for i in 0..DIMS {
        t.x[i] = (me.point.x[i] as f64 + len * force.v[i] / mag) as f32;
    }
    let mut near: Vec<(f64, &PeerInfo)> = candidates
        .iter()
        .filter(|c| c.id != me.id && c.point.is_valid() && !excluded(c))
        .map(|c| (c.point.euclid(&t), c))
        .collect();
    near.sort_by(|a, b| a.0.total_cmp(&b.0));
    near.dedup_by(|a, b| a.1.id == b.1.id);
    near.truncate(cfg.move_shortlist as usize);
    let here = cost(me, me, members, others, force.radius, cfg);
    let best = near
        .into_iter()
        .map(|(_, c)| (cost(c, me, members, others, force.radius, cfg), *c))
        .min_by(|a, b| a.0.total_cmp(&b.0))?;
    let needed = cfg.min_gain * cool.max(1.0);
    (best.0.is_finite() && best.0 < here * (1.0 - needed)).then_some(best.1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::NodeId;

    fn p(x: f64, y: f64) -> Point {
        Point::new(&[x, y], 0.0)
    }
    fn peer(i: u64, x: f64, y: f64) -> PeerInfo {
        PeerInfo { id: NodeId::from_u64(i), point: p(x, y) }
    }

    #[test]
    fn repulsion_pushes_away_within_the_cut_off_only() {
        let cfg = SuperPeerConfig { repulsion: 1.0, repulsion_range: 1.0, ..Default::default() };
        // No members: R is the distance to the nearest token, so it sits exactly at the
        // cut-off and does not push; a second, nearer token does.
        let f = net_force(&p(0.0, 0.0), &[p(0.01, 0.0)], &[], &cfg).unwrap();
        assert!(f.magnitude() < 1e-12, "{f:?}");
        let members = [peer(1, 0.0, 0.02), peer(2, 0.0, -0.02)];
        let f = net_force(&p(0.0, 0.0), &[p(0.01, 0.0)], &members, &cfg).unwrap();
        assert!(f.v[0] < -0.4 && f.v[1].abs() < 1e-9, "{f:?}");
        let f = net_force(&p(0.0, 0.0), &[p(0.01, 0.0), p(-0.01, 0.0)], &members, &cfg).unwrap();
        assert!(f.magnitude() < 1e-9);
        let f = net_force(&p(0.0, 0.0), &[p(0.05, 0.0)], &members, &cfg).unwrap();
        assert!(f.magnitude() < 1e-9, "beyond the cut-off: {f:?}");
        assert!(net_force(&p(0.0, 0.0), &[], &[], &cfg).is_none());
    }

    #[test]
    fn members_pull_toward_their_median_and_the_token_settles_there() {
        let cfg = SuperPeerConfig { repulsion: 0.0, ..Default::default() };
        // Members around (0.05, 0); the holder sits at the rim, at (0, 0).
        let mut members: Vec<PeerInfo> =
            (0..9).map(|i| peer(i + 1, 0.05 + 0.002 * (i as f64 - 4.0), 0.001 * ((i % 3) as f64 - 1.0))).collect();
        let me = peer(100, 0.0, 0.0);
        let f = net_force(&me.point, &[], &members, &cfg).unwrap();
        assert!(f.v[0] > 0.9, "{f:?}");
        let t = choose_target(&me, &f, &members, &[], &members, |_| false, 1.0, &cfg).unwrap();
        assert!((t.point.x[0] - 0.05).abs() < 0.0045, "{t:?}");
        // After the move the old holder is a member and the new one is not. At the median
        // no candidate gains enough: the token stays.
        members.retain(|m| m.id != t.id);
        members.push(me);
        let f = net_force(&t.point, &[], &members, &cfg).unwrap();
        let again = choose_target(&t, &f, &members, &[], &members, |_| false, 1.0, &cfg);
        assert!(again.is_none(), "{again:?}");
        // Everyone excluded: no move.
        let f = net_force(&me.point, &[], &members, &cfg).unwrap();
        assert!(choose_target(&me, &f, &members, &[], &members, |_| true, 1.0, &cfg).is_none());
    }

    #[test]
    fn two_peers_do_not_trade_the_token() {
        // A one-member cluster: moving the token to the member makes the holder the member,
        // which costs the same, so it stays (without counting the old holder as a member after
        // the move, two such peers traded the token every round).
        let cfg = SuperPeerConfig { repulsion: 0.0, min_gain: 0.0, ..Default::default() };
        let a = peer(1, 0.0, 0.0);
        let mut b = peer(2, 0.03, 0.0);
        b.point.h = 0.001;
        let f = net_force(&a.point, &[], &[b], &cfg).unwrap();
        assert!(choose_target(&a, &f, &[b], &[], &[b], |_| false, 1.0, &cfg).is_none());
        let f = net_force(&b.point, &[], &[a], &cfg).unwrap();
        assert!(choose_target(&b, &f, &[a], &[], &[a], |_| false, 1.0, &cfg).is_none());
    }

    #[test]
    fn step_is_bounded_and_height_counts() {
        let cfg = SuperPeerConfig { repulsion: 0.0, max_step: 1.0, ..Default::default() };
        // Members far away at x = 1.0, one near candidate at 0.2 and one on the cluster.
        let members: Vec<PeerInfo> = (0..5).map(|i| peer(i + 1, 1.0, 0.001 * i as f64)).collect();
        let me = peer(100, 0.0, 0.0);
        let f = net_force(&me.point, &[], &members, &cfg).unwrap();
        let cands = [peer(10, 0.2, 0.0), peer(11, 0.99, 0.0)];
        // R = 1.0, so both are within reach; the nearer to the wanted point wins.
        let t = choose_target(&me, &f, &members, &[], &cands, |_| false, 1.0, &cfg).unwrap();
        assert_eq!(t.id, NodeId::from_u64(11));
        // A high access delay (height) makes a spot worse than a slightly further one.
        let mut slow = peer(12, 1.0, 0.002);
        slow.point.h = 0.2;
        let cands = [slow, peer(13, 0.9, 0.0)];
        let t = choose_target(&me, &f, &members, &[], &cands, |_| false, 1.0, &cfg).unwrap();
        assert_eq!(t.id, NodeId::from_u64(13));
        // Cooling: a token that moved many times needs a larger gain. Here staying costs
        // 1.0 and the candidate (with the old holder as a sixth member) 0.5.
        let cfg = SuperPeerConfig { min_gain: 0.3, ..cfg };
        let near = [peer(14, 0.5, 0.0)];
        assert!(choose_target(&me, &f, &members, &[], &near, |_| false, 1.0, &cfg).is_some());
        assert!(choose_target(&me, &f, &members, &[], &near, |_| false, 2.0, &cfg).is_none());
    }
}
