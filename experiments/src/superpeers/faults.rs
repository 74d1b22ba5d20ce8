//! What hurt the real swarm, drawn from seeded distributions: the simulator's fault model for
//! super-peer selection, so that every input a real node's driver produces is also produced
//! here, at scale and replayable by seed.
//!
//! Off by default. The lab's `--faults swarm` preset ([`Faults::swarm`]) takes its lookup,
//! start and coordinate figures from the 200-node real swarms, which report the same
//! measures (their lookups' waits, unusable lookups by reason, when the selection started,
//! the Vivaldi error over time; docs/results/calibration.md), and its other figures from
//! rough readings of those swarms' logs. Each fault, and the input it makes:
//! - **Lookups come back short or time out** (`SpInput::LookupResult` with statistics). A
//!   closest-peers or sample lookup asks the peers nearest its key; each fails to answer with
//!   probability `peer_failure`, and the answer is the K closest that answered (a thinned
//!   sample). With probability `lookup_short` the lookup runs out of candidates and returns
//!   2-19 peers; with `lookup_timeout` it times out with what it had. A sample lookup names
//!   another uniform key than the one drawn, as kad does. A provider lookup times out having
//!   found nobody with `lookup_timeout`. The node judges each (`overlay::superpeer::lookup`).
//! - **Lookups take time** (`lookup_ms`): each DHT lookup takes a drawn time (exponential of
//!   mean `lookup_ms`) and a node runs one at a time, as the node driver does
//!   (`MAX_LOOKUPS_IN_FLIGHT`), so lookups asked together wait for each other; the answer is
//!   drawn from the network as it is when the lookup ends. Reading the node's own routing
//!   table (`Query::Vicinity`) takes no time.
//! - **Nodes start at different times** (`SpInput::Start`): each node starts the selection a
//!   uniform draw of `[0, start_spread_s)` seconds after the first, as real nodes do once their
//!   routing tables are ready (the swarm report's `selection_started_s`); until then it
//!   ticks and answers messages without acting, as a real node's state machine does. The
//!   run's time counts from the first start.
//! - **Refused connections** (`SpInput::Refused`, resends), with `gates`: every node runs the
//!   node's connection gate over its simulated connections ([`super::gates`]), and a message,
//!   probe, RTT measurement or lookup contact that needs a connection the gates refuse fails as
//!   a real one does; the node's own rule (`overlay::detect::failure::after_failure`) says what
//!   follows (a re-election message is sent again after a wait, a first `Handover` is reported
//!   refused, the rest is dropped). A lookup's refused contacts are peers that failed to answer.
//! - **A late event loop** (`SpInput::Lateness`): a share `loaded` of the nodes runs late by an
//!   exponential lateness of mean `lateness_ms`, drawn each round and told as the node driver
//!   tells it; their timers fire that much later and their pings include it.
//! - **Pings measure latency plus queueing** (`SpInput::Rtt`): the model's jittered RTT plus an
//!   exponential queueing delay of mean `ping_queue_ms` plus both ends' lateness; a ping whose
//!   node's lateness exceeds what the sample tolerates (`overlay::detect::stall::tolerated`) is
//!   reported failed, as the node driver's stall gate does.
//! - **Coordinates start unfit and keep moving** (`SpInput::CoordinateFit`,
//!   `SpInput::Coordinate`): a node's coordinate is unfit for an exponential number of rounds
//!   of mean `unfit_rounds`; each round a share `drift_share` of the nodes sees its point move
//!   to its learned point plus a Gaussian deviation of `drift_ms` per component. The deviation
//!   is drawn afresh from the learned point each time, not added to the last one: a real
//!   node's Vivaldi updates keep pulling its coordinate back to where its measurements put it,
//!   so its error stays bounded (the swarm's median error stays at or below 0.10 once learned),
//!   while a random walk would grow it without end (sd 9 ms per component after 400 rounds).
//! - **Coordinates are learned while the selection runs** (`SpInput::Coordinate`, with
//!   `coord_noise_ms`): a node's point starts at its learned point plus a Gaussian error of
//!   `coord_noise_ms` per component, drawn once; the error stays whole for the first half of
//!   `coord_learn_s` and shrinks linearly to nothing at its end. Each node is told its point
//!   every [`LEARN_EVERY`] rounds meanwhile (its neighbours learn it from its messages, as
//!   from a real node's). A real node's Vivaldi error is highest while the swarm joins, right
//!   when the first clusters form; the drift below does not apply to a node still learning.
//! - **Members watch their heads** (`head_watch`: `SpInput::PeerDown`, `SpInput::HeadNotServing`):
//!   instead of the simulator telling a crashed head's members at once, each member runs the
//!   node's head watch (`overlay::detect::head_watch`, with the run's `[superpeer.head_watch]`)
//!   and one probe per round when due: a dead
//!   head has nothing listening, a live head answers unless the gates refuse the connection,
//!   and every message from the head counts as heard.
//!
//! Every draw comes from the fault model's own generator, seeded from the run's seed: with the
//! faults off the simulator draws exactly what it drew without them.

use overlay::superpeer::{LookupReport, PeerInfo, Point};
use overlay::NodeId;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// The fault model's settings (module doc). Every rate is a probability in `[0, 1]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    /// A closest-peers or sample lookup runs out of candidates and comes back short.
    pub lookup_short: f64,
    /// A lookup times out.
    pub lookup_timeout: f64,
    /// An asked peer fails to answer a lookup.
    pub peer_failure: f64,
    /// Mean time one DHT lookup takes, ms (exponential); 0: answered at once.
    pub lookup_ms: f64,
    /// Nodes start the selection within this many seconds of the first (uniform).
    pub start_spread_s: f64,
    /// Every node runs the connection gate over simulated connections ([`super::gates`]).
    pub gates: bool,
    /// Share of the nodes whose event loop runs late.
    pub loaded: f64,
    /// Mean lateness of a loaded node's loop, ms (exponential, drawn each round).
    pub lateness_ms: f64,
    /// Mean queueing delay a ping measures on top of the path's RTT, ms (exponential).
    pub ping_queue_ms: f64,
    /// Mean number of rounds a node's coordinate is unfit at the start (exponential; 0: fit).
    pub unfit_rounds: f64,
    /// Share of the nodes whose point moves each round, and the step's standard deviation per
    /// component, ms.
    pub drift_share: f64,
    pub drift_ms: f64,
    /// Error of the coordinates at the start, ms per component (Gaussian), and how long they
    /// take to learn it away, seconds (module doc).
    pub coord_noise_ms: f64,
    pub coord_learn_s: f64,
    /// Members detect their head's crash with the head watch instead of being told.
    pub head_watch: bool,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            lookup_short: 0.0,
            lookup_timeout: 0.0,
            peer_failure: 0.0,
            lookup_ms: 0.0,
            start_spread_s: 0.0,
            gates: false,
            loaded: 0.0,
            lateness_ms: 0.0,
            ping_queue_ms: 0.0,
            unfit_rounds: 0.0,
            drift_share: 0.0,
            drift_ms: 0.0,
            coord_noise_ms: 0.0,
            coord_learn_s: 0.0,
            head_watch: false,
        }
    }
}

/// A fault setting out of range.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("faults.{field} must be in {range}, got {got}")]
pub struct FaultsError {
    pub field: &'static str,
    pub range: &'static str,
    pub got: f64,
}

impl Faults {
    /// The 200-node real swarms on a loaded 2-core machine. Calibrated on their reports
    /// (docs/results/calibration.md): lookups take 1.5-4.0 s at the median (here 2 s a
    /// query, plus the wait behind the node's earlier lookups), and 6-21 % of them are
    /// unusable (here 20 % short, 2 % timed out, 25 % of the asked peers not answering);
    /// nodes start the selection 7-19 s after the swarm (mean 13.0 s, p95 18.0 s: a uniform
    /// spread of 12 s); the coordinates' median error is 45-50 ms from the start to about
    /// 28 s and 12 ms by 56 s (Gaussian error of 50 ms per component, learned in 56 s).
    /// Rough readings of the logs: gates refuse dials (here the nodes' own gates), loops run
    /// up to seconds late while the lookups run, coordinates fit after about 20 s.
    pub fn swarm() -> Faults {
        Faults {
            lookup_short: 0.2,
            lookup_timeout: 0.02,
            peer_failure: 0.25,
            lookup_ms: 2000.0,
            start_spread_s: 12.0,
            gates: true,
            loaded: 0.2,
            lateness_ms: 300.0,
            ping_queue_ms: 5.0,
            unfit_rounds: 20.0,
            drift_share: 0.05,
            drift_ms: 2.0,
            coord_noise_ms: COORD_NOISE_MS,
            coord_learn_s: COORD_LEARN_S,
            head_watch: true,
        }
    }

    /// Whether any fault is on.
    pub fn any(&self) -> bool {
        *self != Faults::default()
    }

    pub fn validate(&self) -> Result<(), FaultsError> {
        let check = |field, got: f64, hi: f64, range| {
            if got.is_finite() && (0.0..=hi).contains(&got) {
                Ok(())
            } else {
                Err(FaultsError { field, range, got })
            }
        };
        check("lookup_short", self.lookup_short, 1.0, "[0, 1]")?;
        check("lookup_timeout", self.lookup_timeout, 1.0, "[0, 1]")?;
        check("peer_failure", self.peer_failure, 0.95, "[0, 0.95]")?;
        check("lookup_ms", self.lookup_ms, 600_000.0, "[0, 600000]")?;
        check("start_spread_s", self.start_spread_s, 3_600.0, "[0, 3600]")?;
        check("loaded", self.loaded, 1.0, "[0, 1]")?;
        check("lateness_ms", self.lateness_ms, 60_000.0, "[0, 60000]")?;
        check("ping_queue_ms", self.ping_queue_ms, 60_000.0, "[0, 60000]")?;
        check("unfit_rounds", self.unfit_rounds, 10_000.0, "[0, 10000]")?;
        check("drift_share", self.drift_share, 1.0, "[0, 1]")?;
        check("drift_ms", self.drift_ms, 1_000.0, "[0, 1000]")?;
        check("coord_noise_ms", self.coord_noise_ms, 1_000.0, "[0, 1000]")?;
        check("coord_learn_s", self.coord_learn_s, 3_600.0, "[0, 3600]")?;
        Ok(())
    }
}

/// An exponential draw of mean `mean`.
pub fn exp(rng: &mut ChaCha8Rng, mean: f64) -> f64 {
    if mean <= 0.0 {
        return 0.0;
    }
    let u: f64 = rng.gen::<f64>().max(1e-12);
    -mean * u.ln()
}

/// How long one DHT lookup takes under the model, µs (module doc, "Lookups take time").
pub fn lookup_us(f: &Faults, rng: &mut ChaCha8Rng) -> u64 {
    (exp(rng, f.lookup_ms) * 1000.0) as u64
}

/// A standard normal draw (Box-Muller).
fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u: f64 = rng.gen::<f64>().max(1e-12);
    let v: f64 = rng.gen();
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// The answer to a closest-peers or sample lookup under the model: `candidates` are the
/// peers nearest the key, nearest first (at least 2K of them where the network has them), `k`
/// the answer's size; `unreachable(i)` says whether the lookup cannot reach candidate `i`
/// (the gates, [`super::gates`]), which then fails like a peer that does not answer.
pub fn closest_report(
    f: &Faults,
    rng: &mut ChaCha8Rng,
    key: Option<NodeId>,
    candidates: &[PeerInfo],
    k: usize,
    mut unreachable: impl FnMut(usize) -> bool,
) -> LookupReport {
    let r: f64 = rng.gen();
    let timed_out = r < f.lookup_timeout;
    let short = !timed_out && r < f.lookup_timeout + f.lookup_short;
    // How many answers the lookup gets before it ends: K, or fewer when it runs out of
    // candidates or time.
    let want = if timed_out {
        rng.gen_range(0..=k)
    } else if short {
        rng.gen_range(2..k.max(3))
    } else {
        k
    };
    let mut peers = Vec::with_capacity(want);
    let mut failed = 0u32;
    for (i, p) in candidates.iter().enumerate() {
        if peers.len() >= want {
            break;
        }
        if rng.gen::<f64>() < f.peer_failure || unreachable(i) {
            failed += 1;
        } else {
            peers.push(*p);
        }
    }
    if short && failed == 0 {
        // Running out of candidates means some failed.
        failed = 1;
    }
    LookupReport { key, found: peers.len() as u32, answered: peers.len() as u32, failed, timed_out, peers, known: 0 }
}

/// The answer to a provider lookup under the model; `reached` whether the lookup reached any
/// of the peers nearest the key, where the provider records are stored.
pub fn providers_report(f: &Faults, rng: &mut ChaCha8Rng, providers: Vec<PeerInfo>, reached: bool) -> LookupReport {
    if !reached || rng.gen::<f64>() < f.lookup_timeout {
        let failed = rng.gen_range(1..8);
        return LookupReport { timed_out: true, failed, ..LookupReport::default() };
    }
    LookupReport::complete(providers)
}

/// Rounds between two points told to a node still learning its coordinate.
pub const LEARN_EVERY: u32 = 5;

/// The swarm preset's coordinate learning (calibration page).
const COORD_NOISE_MS: f64 = 50.0;
const COORD_LEARN_S: f64 = 56.0;

/// Coordinates learned while the selection runs (module doc): every node's learned point and
/// its error at the start.
pub struct Learning {
    base: Vec<Point>,
    error: Vec<Point>,
    rounds: u32,
}

impl Learning {
    /// The learning of nodes whose learned points `base` gives (by slot); None, and `base`
    /// not called, when `f` has none.
    pub fn new(f: &Faults, rng: &mut ChaCha8Rng, base: impl FnOnce() -> Vec<Point>) -> Option<Learning> {
        if f.coord_noise_ms <= 0.0 || f.coord_learn_s <= 0.0 {
            return None;
        }
        let base = base();
        let error = base
            .iter()
            .map(|b| {
                let mut e = Point::default();
                for (x, y) in e.x.iter_mut().zip(b.x.iter()) {
                    if *y != 0.0 {
                        *x = (normal(rng) * f.coord_noise_ms / 1000.0) as f32;
                    }
                }
                e
            })
            .collect();
        Some(Learning { base, error, rounds: f.coord_learn_s.ceil() as u32 })
    }

    /// Share of the start's error left at `round`: whole for the first half, then shrinking
    /// linearly to 0 at the end.
    pub fn left(&self, round: u32) -> f64 {
        let t = f64::from(round) / f64::from(self.rounds.max(1));
        (2.0 * (1.0 - t)).clamp(0.0, 1.0)
    }

    /// Whether the nodes are still learning at `round`: up to the round that tells them their
    /// learned points.
    pub fn learning(&self, round: u32) -> bool {
        round <= self.rounds
    }

    /// The point node `slot` is told at `round` (0: the start), if one is due: every
    /// [`LEARN_EVERY`] rounds while learning, staggered by slot, and the learned point at the
    /// end.
    pub fn point(&self, slot: usize, round: u32) -> Option<Point> {
        let due =
            round == 0 || round == self.rounds || (round < self.rounds && (round + slot as u32) % LEARN_EVERY == 0);
        if !due {
            return None;
        }
        let (mut q, e) = (*self.base.get(slot)?, self.error.get(slot)?);
        let k = self.left(round) as f32;
        for (x, d) in q.x.iter_mut().zip(e.x.iter()) {
            *x += k * d;
        }
        Some(q)
    }
}

/// Coordinate drift (module doc): every node's learned point, from which each drift departs.
pub struct Drift {
    base: Vec<Point>,
    share: f64,
    sd_ms: f64,
}

impl Drift {
    /// The drift of nodes whose learned points `base` gives (by slot), with `f`'s share and
    /// size; None, and `base` not called, when `f` has no drift.
    pub fn new(f: &Faults, base: impl FnOnce() -> Vec<Point>) -> Option<Drift> {
        (f.drift_share > 0.0).then(|| Drift { base: base(), share: f.drift_share, sd_ms: f.drift_ms })
    }

    /// This round's drift of node `slot`, with probability `share`: its learned point moved
    /// by a fresh Gaussian deviation of `sd_ms` per component (the height stays).
    pub fn step(&self, slot: usize, rng: &mut ChaCha8Rng) -> Option<Point> {
        if rng.gen::<f64>() >= self.share {
            return None;
        }
        let mut q = *self.base.get(slot)?;
        for x in q.x.iter_mut() {
            if *x != 0.0 {
                *x += (normal(rng) * self.sd_ms / 1000.0) as f32;
            }
        }
        Some(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn drift_stays_around_the_learned_point() {
        // Every node drifts every round for 2,000 rounds: the deviation from the learned point
        // keeps the drift's size (2 ms per component), where a random walk would reach
        // sqrt(2000) x 2 = 89 ms.
        let base: Vec<Point> = (0..20).map(|i| Point::new(&[0.010 * (i + 1) as f64, 0.020], 0.001)).collect();
        let f = Faults { drift_share: 1.0, drift_ms: 2.0, ..Faults::default() };
        let drift = Drift::new(&f, || base.clone()).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let (mut sum_sq, mut count) = (0.0, 0);
        for _ in 0..2000 {
            for (i, b) in base.iter().enumerate() {
                let p = drift.step(i, &mut rng).unwrap();
                assert_eq!(p.h, b.h, "the height drifted");
                for (x, y) in p.x.iter().zip(b.x.iter()).filter(|(_, y)| **y != 0.0) {
                    let d = (*x as f64 - *y as f64) * 1000.0;
                    sum_sq += d * d;
                    count += 1;
                }
            }
        }
        let sd = (sum_sq / count as f64).sqrt();
        assert!((1.8..2.2).contains(&sd), "deviation sd {sd} ms, want about 2");
        assert!(Drift::new(&Faults::default(), || unreachable!("no drift, no points")).is_none());
        let rare = Faults { drift_share: 0.1, drift_ms: 2.0, ..Faults::default() };
        let drift = Drift::new(&rare, || vec![Point::new(&[0.01], 0.0)]).unwrap();
        let moved = (0..10_000).filter(|_| drift.step(0, &mut rng).is_some()).count();
        assert!((800..1200).contains(&moved), "{moved} drifts in 10,000 rounds at share 0.1");
    }

    #[test]
    fn learning_coordinates_start_off_by_the_noise_and_end_at_the_learned_point() {
        let base: Vec<Point> = (0..40).map(|i| Point::new(&[0.010 * (i + 1) as f64, 0.020, 0.030], 0.001)).collect();
        let f = Faults { coord_noise_ms: 50.0, coord_learn_s: 40.0, ..Faults::default() };
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let l = Learning::new(&f, &mut rng, || base.clone()).unwrap();
        let off = |p: &Point, b: &Point| -> f64 {
            p.x.iter().zip(b.x.iter()).map(|(x, y)| ((x - y) as f64 * 1000.0).powi(2)).sum::<f64>().sqrt()
        };
        // At the start every node is told a point off by the noise (3 components of sd 50 ms:
        // about 80 ms on average), the height kept.
        let start: Vec<f64> = (0..40).map(|i| off(&l.point(i, 0).unwrap(), &base[i])).collect();
        let mean = start.iter().sum::<f64>() / 40.0;
        assert!((50.0..120.0).contains(&mean), "mean start error {mean} ms");
        assert!((0..40).all(|i| l.point(i, 0).unwrap().h == base[i].h));
        // Whole for the first half, half at three quarters, nothing at the end.
        assert_eq!((l.left(0), l.left(20), l.left(30), l.left(40), l.left(50)), (1.0, 1.0, 0.5, 0.0, 0.0));
        for (i, b) in base.iter().enumerate() {
            assert_eq!(l.point(i, 40).unwrap(), *b, "node {i} does not end at its learned point");
            let told = (1..40).filter(|&r| l.point(i, r).is_some()).count() as u32;
            // Rounds 1..=39, every LEARN_EVERY-th by slot: 7 or 8 of them.
            assert!((7..=8).contains(&told), "node {i} told {told} points while learning");
        }
        assert!(l.learning(40) && !l.learning(41));
        assert!(Learning::new(&Faults::default(), &mut rng, || unreachable!("no learning, no points")).is_none());
    }

    fn peers(n: usize) -> Vec<PeerInfo> {
        (0..n).map(|i| PeerInfo { id: NodeId::from_u64(i as u64 + 1), point: Point::default() }).collect()
    }

    #[test]
    fn lookups_thin_shorten_and_time_out_at_the_configured_rates() {
        let f = Faults { lookup_short: 0.3, lookup_timeout: 0.1, peer_failure: 0.2, ..Faults::default() };
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let cand = peers(40);
        let (mut short, mut timed_out, mut failed, mut asked) = (0, 0, 0u32, 0u32);
        for _ in 0..2000 {
            let r = closest_report(&f, &mut rng, None, &cand, 20, |_| false);
            timed_out += r.timed_out as u32;
            if !r.timed_out && r.peers.len() < 20 {
                short += 1;
                assert!(r.failed > 0, "a short answer has failures");
            }
            failed += r.failed;
            asked += r.failed + r.answered;
            assert!(r.peers.len() <= 20);
        }
        assert!((150..250).contains(&timed_out), "{timed_out} timeouts of 2000");
        assert!((500..700).contains(&short), "{short} short answers of 2000");
        let share = f64::from(failed) / f64::from(asked);
        assert!((0.15..0.26).contains(&share), "failed share {share}");
        let off = Faults::default();
        let r = closest_report(&off, &mut rng, None, &cand, 20, |_| false);
        assert_eq!((r.peers.len(), r.failed, r.timed_out), (20, 0, false), "off: the oracle's answer");
        assert_eq!(r.peers, cand[..20]);
        // Candidates the gates keep out fail like peers that do not answer.
        let r = closest_report(&off, &mut rng, None, &cand, 20, |i| i % 2 == 0);
        assert_eq!((r.peers.len(), r.failed), (20, 20));
        assert!(r.peers.iter().zip(cand.iter().skip(1).step_by(2)).all(|(a, b)| a == b), "the odd candidates answered");
    }

    #[test]
    fn the_swarm_preset_is_valid_and_bad_rates_are_refused() {
        assert!(Faults::swarm().validate().is_ok());
        assert!(Faults::swarm().any());
        assert!(!Faults::default().any());
        let bad = Faults { peer_failure: 1.5, ..Faults::default() };
        assert_eq!(bad.validate().unwrap_err().field, "peer_failure");
        let bad = Faults { lateness_ms: f64::NAN, ..Faults::default() };
        assert!(bad.validate().is_err());
    }
}
