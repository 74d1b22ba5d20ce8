//! A token move must beat the coordinates' drift (`token` module doc,
//! "The coordinates' own drift"; module doc of `overlay::superpeer::node`, step 4, "A move
//! must beat the coordinates' drift").
//!
//! In 200-node swarms tokens went straight back (A to B, and back to A) 10-43 times a run:
//! the coordinates were still learning, and each end priced the two nodes on positions that
//! had moved by more than the 1 % a move needs. Now a move must also gain more than how far
//! the holder's own point moved lately (summed, halved every `drift_half_life` rounds).
//!
//! The holder is B of `common::holder_beside`: by the positions it was handed, A is the
//! better head, so without drift B hands the token back at its first round. Its point then
//! goes out and back (the same position afterwards, so the gain is unchanged), and the move
//! waits until that drift has decayed below the gain. Deterministic; the ids come from a
//! seeded RNG (`PEERAGE_SEED` replays).

use overlay::superpeer::{Method, MoveRecord, SpEffect, SpInput, SuperPeerConfig};

use crate::common;

use crate::common::{handovers, holder_beside, Fed};

fn config(drift_half_life: f64) -> SuperPeerConfig {
    let cfg = common::with(SuperPeerConfig { method: Method::RepulsionTokens, ..SuperPeerConfig::default() }, |c| {
        c.tokens.drift_half_life = drift_half_life;
    });
    cfg.validate().unwrap();
    cfg
}

fn priced(fx: &[SpEffect]) -> Option<MoveRecord> {
    fx.iter().find_map(|e| match e {
        SpEffect::TokenMovePriced(r) => Some(**r),
        _ => None,
    })
}

/// The gain (s) of B's move back to A when B's point never moved: the control.
fn gain_without_drift(seed: u64) -> f64 {
    let (mut b, a) = holder_beside(seed, config(5.0));
    let fx = b.tick();
    assert_eq!(handovers(&fx).first().map(|m| m.0), Some(a.id), "control: no move to A (seed {seed})");
    let r = priced(&fx).expect("control: a move without its record");
    assert_eq!(r.floor, 0.0, "control: a floor without drift (seed {seed})");
    let gain = (r.here.total - r.there.total) as f64;
    assert!(gain > 0.0, "control: {r:?} (seed {seed})");
    gain
}

/// B's own point goes `d` seconds out and back: a drift of `2 d`, the same point after.
fn wobble(b: &mut Fed, d: f64) {
    let p = b.node.point();
    let mut out = p;
    out.x[1] += d as f32;
    b.feed(SpInput::Coordinate(out));
    b.feed(SpInput::Coordinate(p));
    assert_eq!(b.node.point(), p);
}

#[test]
fn a_holder_whose_point_just_moved_waits_until_the_drift_has_decayed() {
    let seed = common::seed(27);
    let gain = gain_without_drift(seed);
    let cfg = config(5.0);
    let (mut b, a) = holder_beside(seed, cfg.clone());
    // 2.2 times the gain: 1.1 g after one half-life (5 rounds), 0.96 g after 6, before the
    // hold time (10) would promote B and change the gain a move needs.
    wobble(&mut b, 1.1 * gain);
    let mut moved_at = None;
    for r in 1..=8u32 {
        let fx = b.tick();
        if let Some(m) = handovers(&fx).first() {
            assert_eq!(m.0, a.id, "round {r}: moved elsewhere (seed {seed})");
            let rec = priced(&fx).expect("a move without its record");
            assert!(rec.floor > 0.0 && (rec.floor as f64) < gain, "round {r}: {rec:?}, gain {gain} (seed {seed})");
            moved_at = Some(r);
            break;
        }
    }
    let r = moved_at.unwrap_or_else(|| panic!("no move within 8 rounds (seed {seed})"));
    assert_eq!(r, 6, "moved at round {r}, with a drift of {} s against a gain of {gain} s (seed {seed})", 2.2 * gain);
}

#[test]
fn drift_before_the_coordinate_is_fit_is_not_counted() {
    let seed = common::seed(27);
    let gain = gain_without_drift(seed);
    for (fit_first, what) in [(true, "drift after the fit"), (false, "drift before the fit")] {
        let (mut b, a) = holder_beside(seed, config(5.0));
        b.feed(SpInput::CoordinateFit { fit: false });
        if !fit_first {
            wobble(&mut b, 10.0 * gain);
        }
        b.feed(SpInput::CoordinateFit { fit: true });
        if fit_first {
            wobble(&mut b, 10.0 * gain);
        }
        let moved = handovers(&b.tick()).first().map(|m| m.0);
        if fit_first {
            assert_eq!(moved, None, "{what}: moved at once (seed {seed})");
        } else {
            assert_eq!(moved, Some(a.id), "{what}: not moved to A at once (seed {seed})");
        }
    }
}

#[test]
fn with_the_floor_off_drift_changes_nothing() {
    let seed = common::seed(27);
    let gain = gain_without_drift(seed);
    let (mut b, a) = holder_beside(seed, config(0.0));
    wobble(&mut b, 10.0 * gain);
    let fx = b.tick();
    assert_eq!(handovers(&fx).first().map(|m| m.0), Some(a.id), "no move to A (seed {seed})");
    assert_eq!(priced(&fx).map(|r| r.floor), Some(0.0), "a floor with the floor off (seed {seed})");
}

#[test]
fn a_point_thrown_far_away_still_counts_as_drift() {
    let seed = common::seed(27);
    gain_without_drift(seed);
    // 10^38 s out and back: the squared distance overflows f32; the drift is kept at its cap
    // (an hour), not lost as no floor at all.
    let (mut b, _) = holder_beside(seed, config(5.0));
    wobble(&mut b, 1e38);
    let fx = b.tick();
    assert!(handovers(&fx).is_empty(), "moved at once after a drift that overflowed: {fx:?} (seed {seed})");
}
