//! The random waypoint mobility model (Johnson and Maltz 1996; the set-up of Broch et al.,
//! MobiCom 1998, and of ns-2's `setdest`): a node picks a destination uniformly in the area,
//! walks to it in a straight line at a speed drawn for that leg, pauses there for `pause`,
//! and repeats.
//!
//! Departures from the textbook model, and why:
//! - **Speeds are drawn in `[v/2, 3v/2]`** (mean `v`), not in `[0, v_max]`: with a minimum of 0
//!   the nodes' average speed decays over the run instead of reaching a steady state (Yoon, Liu
//!   and Noble, "Random waypoint considered harmful", INFOCOM 2003). `v = 0` is a static
//!   network.
//! - **Burn-in.** Random waypoint starts far from its stationary distribution (nodes gather in
//!   the middle of the area as it runs). Every walker is advanced through `burn_in` of
//!   movement before time 0, so the protocol starts on the steady-state layout.
//! - **Stop.** With `stop_at`, every node stands still from then on: the static network the
//!   tests reach after movement.
//!
//! Each walker draws from its own RNG, seeded from the run's seed and its index, so a node's
//! path depends on nothing else (not on the protocol's events nor on other nodes). Positions
//! are exact at any time: a walker only keeps its current leg and is asked for times that
//! never go backwards.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::time::Duration;

/// A point in the area, metres.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Point {
    pub x: f64,
    pub y: f64,
}

impl Point {
    pub fn dist(self, o: Point) -> f64 {
        ((self.x - o.x).powi(2) + (self.y - o.y).powi(2)).sqrt()
    }
    fn lerp(self, o: Point, f: f64) -> Point {
        Point { x: self.x + (o.x - self.x) * f, y: self.y + (o.y - self.y) * f }
    }
}

/// How nodes move.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Waypoint {
    /// The area is `[0, width] x [0, height]`, metres.
    pub width: f64,
    pub height: f64,
    /// Mean speed, m/s; each leg's speed is uniform in `[speed/2, 3 speed/2]`.
    pub speed: f64,
    /// Pause at each waypoint.
    pub pause: Duration,
    /// Movement simulated before time 0.
    pub burn_in: Duration,
    /// Nodes stand still from this time on (seconds since time 0).
    pub stop_at: Option<Duration>,
}

/// One node's walk: its current leg from `from` (left at `t0`) to `to` (reached at `t1`),
/// then a pause until `t2`. Times are seconds since time 0 (negative during burn-in).
#[derive(Debug, Clone)]
pub struct Walker {
    rng: ChaCha8Rng,
    from: Point,
    to: Point,
    t0: f64,
    t1: f64,
    t2: f64,
    /// Where the node stands once movement stopped.
    frozen: Option<Point>,
}

impl Walker {
    /// Walker `index` of the run seeded `seed`, already advanced through the burn-in.
    pub fn new(model: &Waypoint, seed: u64, index: u32) -> Walker {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6d6f_6269_6c69_7479);
        rng.set_stream(index as u64 + 1);
        let start = random_point(model, &mut rng);
        let t = -model.burn_in.as_secs_f64();
        let mut w = Walker { rng, from: start, to: start, t0: t, t1: t, t2: t, frozen: None };
        w.next_leg(model);
        w
    }

    /// Draw the next leg, leaving from `to` at `t2`.
    fn next_leg(&mut self, model: &Waypoint) {
        self.from = self.to;
        self.t0 = self.t2;
        if model.speed <= 0.0 {
            // A static network: stand still for ever.
            self.t1 = f64::INFINITY;
            self.t2 = f64::INFINITY;
            return;
        }
        self.to = random_point(model, &mut self.rng);
        let v = self.rng.gen_range(0.5 * model.speed..=1.5 * model.speed);
        self.t1 = self.t0 + self.from.dist(self.to) / v;
        self.t2 = self.t1 + model.pause.as_secs_f64();
    }

    /// The position at `t` seconds. Calls must not go back in time.
    pub fn at(&mut self, model: &Waypoint, t: f64) -> Point {
        if let Some(p) = self.frozen {
            return p;
        }
        if let Some(stop) = model.stop_at {
            let stop = stop.as_secs_f64();
            if t >= stop {
                let p = self.at_moving(model, stop);
                self.frozen = Some(p);
                return p;
            }
        }
        self.at_moving(model, t)
    }

    fn at_moving(&mut self, model: &Waypoint, t: f64) -> Point {
        while t >= self.t2 {
            self.next_leg(model);
        }
        if t >= self.t1 {
            self.to
        } else if self.t1 > self.t0 {
            self.from.lerp(self.to, ((t - self.t0) / (self.t1 - self.t0)).clamp(0.0, 1.0))
        } else {
            self.from
        }
    }
}

fn random_point(model: &Waypoint, rng: &mut ChaCha8Rng) -> Point {
    Point { x: rng.gen_range(0.0..=model.width), y: rng.gen_range(0.0..=model.height) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(speed: f64, pause_s: u64) -> Waypoint {
        Waypoint {
            width: 1000.0,
            height: 500.0,
            speed,
            pause: Duration::from_secs(pause_s),
            burn_in: Duration::from_secs(600),
            stop_at: None,
        }
    }

    #[test]
    fn walkers_stay_in_the_area_and_respect_the_speed_bounds() {
        let m = model(10.0, 5);
        for i in 0..20 {
            let mut w = Walker::new(&m, 7, i);
            let mut last = w.at(&m, 0.0);
            let mut moved = 0.0;
            for k in 1..=2000 {
                let p = w.at(&m, k as f64 * 0.5);
                assert!((0.0..=m.width).contains(&p.x) && (0.0..=m.height).contains(&p.y), "{p:?}");
                let step = p.dist(last);
                // At most 1.5 v over half a second (plus rounding).
                assert!(step <= 0.75 * m.speed + 1e-9, "node {i} moved {step} m in 0.5 s");
                moved += step;
                last = p;
            }
            assert!(moved > 1000.0, "node {i} hardly moved: {moved} m in 1000 s");
        }
    }

    #[test]
    fn a_walk_depends_only_on_the_seed_and_the_index() {
        let m = model(5.0, 0);
        let path = |seed, i| {
            let mut w = Walker::new(&m, seed, i);
            (0..100).map(|k| w.at(&m, k as f64 * 3.7)).collect::<Vec<_>>()
        };
        assert_eq!(path(1, 3), path(1, 3));
        assert_ne!(path(1, 3), path(1, 4));
        assert_ne!(path(1, 3), path(2, 3));
        // Asking at other times in between does not change where the walker is later.
        let mut w = Walker::new(&m, 1, 3);
        let dense: Vec<Point> = (0..100)
            .map(|k| {
                let t = k as f64 * 3.7;
                w.at(&m, (t - 1.3).max(0.0));
                w.at(&m, t)
            })
            .collect();
        assert_eq!(dense, path(1, 3));
    }

    #[test]
    fn pauses_hold_the_node_and_stop_freezes_it() {
        let mut m = model(20.0, 1000);
        m.burn_in = Duration::ZERO;
        let mut w = Walker::new(&m, 3, 0);
        // The first leg is at most ~1118 m at >= 10 m/s: arrived by 112 s, then 1000 s of pause.
        let a = w.at(&m, 120.0);
        assert_eq!(w.at(&m, 500.0), a);
        m.stop_at = Some(Duration::from_secs(2000));
        let mut w = Walker::new(&m, 3, 1);
        let p = w.at(&m, 2000.0);
        assert_eq!(w.at(&m, 5000.0), p);
        let mut still = Walker::new(&model(0.0, 0), 3, 2);
        let p = still.at(&model(0.0, 0), 0.0);
        assert_eq!(still.at(&model(0.0, 0), 1e6), p);
    }
}
