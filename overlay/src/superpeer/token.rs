//! The repulsion-token force law and the choice of where a token moves.
//!
//! Seed 000: "each token represents a repelling force ... if a node discovers that the total
//! forces acting on it exceed a threshold, it will move the token in the direction of the
//! combined forces". The seed names no force law; ours (all in the Euclidean part of the
//! coordinate space, heights ignored):
//!
//! - **Scale.** `s` = mean distance from the holder to its three nearest known tokens. Forces
//!   are measured in units of `s`, so the law works the same in a dense city and on a sparse
//!   continent (a fixed length would spread tokens evenly in *space*, not over *nodes*).
//! - **Repulsion** from each known token `b` at distance `d`: magnitude `min(cap, (s/d)²)`
//!   (inverse square, capped for near-coincident tokens), along the unit vector from `b`; cut
//!   off beyond `3s`, so far tokens (whose forces would push every token to the rim of the
//!   populated space, as charges collect on a conductor's surface) do not act.
//! - **Pull** of the holder's own cluster (our addition; `attraction = 0` disables it):
//!   `attraction x (c - p) / s`, where `c` is the centroid of the members' positions. Without
//!   it, repulsion alone spreads tokens evenly but ignores where the nodes are; with it the
//!   equilibrium is that of a capacity-constrained k-means (Lloyd) iteration kept apart by
//!   repulsion.
//!
//! **Move.** When `|F|` exceeds the threshold the token goes to the known peer (neighbour or
//! member, not a known token holder) that lies furthest along `F` (largest projection on
//! `F/|F|`), among peers no further than a step of `s · min(|F|, 2)` and at least `s/10`
//! along `F` (with `attraction = 1` a pull alone steps exactly onto the centroid). No such peer: the token stays.

use super::config::SuperPeerConfig;
use super::message::PeerInfo;
use super::point::{Point, DIMS};

/// The net force on a token and the scale it was measured in.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Force {
    pub v: [f64; DIMS],
    pub scale: f64,
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

/// The force on a token held at `me`, from the other tokens at `others` and the cluster
/// centroid `centroid` (if the holder has members). `None` if no other token is known (no
/// scale to measure in).
pub fn net_force(me: &Point, others: &[Point], centroid: Option<Point>, cfg: &SuperPeerConfig) -> Option<Force> {
    if others.is_empty() {
        return None;
    }
    let mut near: Vec<f64> = others.iter().map(|o| me.euclid(o)).collect();
    near.sort_by(|a, b| a.total_cmp(b));
    let take = near.len().min(3);
    let s = near[..take].iter().sum::<f64>() / take as f64;
    if !(s.is_finite() && s > 1e-9) {
        return None;
    }
    let mut v = [0f64; DIMS];
    for o in others {
        let d = me.euclid(o);
        if d < 1e-9 || d > 3.0 * s {
            continue;
        }
        let mag = (s / d).powi(2).min(cfg.force_cap);
        let u = diff(me, o);
        for i in 0..DIMS {
            v[i] += mag * u[i] / d;
        }
    }
    if let Some(c) = centroid {
        let u = diff(&c, me);
        for i in 0..DIMS {
            v[i] += cfg.attraction * u[i] / s;
        }
    }
    Some(Force { v, scale: s })
}

/// The centroid of `members`' positions, if any.
pub fn centroid(members: &[PeerInfo]) -> Option<Point> {
    if members.is_empty() {
        return None;
    }
    let mut acc = [0f64; DIMS];
    let mut h = 0f64;
    for m in members {
        for (i, a) in acc.iter_mut().enumerate() {
            *a += m.point.x[i] as f64;
        }
        h += m.point.h as f64;
    }
    let n = members.len() as f64;
    let comps: Vec<f64> = acc.iter().map(|a| a / n).collect();
    Some(Point::new(&comps, h / n))
}

/// Where the token should go under `force`: the candidate furthest along it within one step
/// (see the module doc), skipping ids for which `excluded` is true.
pub fn choose_target(
    me: &Point,
    force: &Force,
    candidates: &[PeerInfo],
    excluded: impl Fn(&PeerInfo) -> bool,
) -> Option<PeerInfo> {
    let mag = force.magnitude();
    if !(mag.is_finite() && mag > 0.0) {
        return None;
    }
    let step = force.scale * mag.min(2.0);
    let min_proj = force.scale / 10.0;
    let mut best: Option<(f64, PeerInfo)> = None;
    for c in candidates {
        if excluded(c) {
            continue;
        }
        let d = me.euclid(&c.point);
        if d > step {
            continue;
        }
        let u = diff(&c.point, me);
        let proj: f64 = (0..DIMS).map(|i| u[i] * force.v[i] / mag).sum();
        if proj >= min_proj && best.as_ref().map_or(true, |(p, _)| proj > *p) {
            best = Some((proj, *c));
        }
    }
    best.map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::NodeId;

    fn p(x: f64, y: f64) -> Point {
        Point::new(&[x, y], 0.0)
    }

    #[test]
    fn repulsion_pushes_away_and_balances() {
        let cfg = SuperPeerConfig { attraction: 0.0, ..Default::default() };
        let f = net_force(&p(0.0, 0.0), &[p(0.01, 0.0)], None, &cfg).unwrap();
        assert!(f.v[0] < 0.0 && f.v[1].abs() < 1e-12);
        let f = net_force(&p(0.0, 0.0), &[p(0.01, 0.0), p(-0.01, 0.0)], None, &cfg).unwrap();
        assert!(f.magnitude() < 1e-9);
        assert!(net_force(&p(0.0, 0.0), &[], None, &cfg).is_none());
    }

    #[test]
    fn pull_toward_centroid_and_target_choice() {
        let cfg = SuperPeerConfig { attraction: 1.0, ..Default::default() };
        let me = p(0.0, 0.0);
        let members = [
            PeerInfo { id: NodeId::from_u64(1), point: p(0.004, 0.0) },
            PeerInfo { id: NodeId::from_u64(2), point: p(0.006, 0.0) },
        ];
        let c = centroid(&members).unwrap();
        let f = net_force(&me, &[p(0.0, 0.01), p(0.0, -0.01)], Some(c), &cfg).unwrap();
        assert!(f.v[0] > 0.4, "{f:?}");
        let t = choose_target(&me, &f, &members, |_| false).unwrap();
        assert_eq!(t.id, NodeId::from_u64(1));
        assert!(choose_target(&me, &f, &members, |_| true).is_none());
    }
}
