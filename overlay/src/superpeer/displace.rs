//! Displacement: a full head gives a member's place to a node that needs it more (*ours*: one
//! bid of Bertsekas' auction for the assignment problem, "The auction algorithm: a distributed
//! relaxation method for the assignment problem", Annals of Operations Research 14, 1988, the
//! auction the lab's yardsticks run to assign members optimally with the cap).
//!
//! First come, first served fills a full head with whoever asked first, and a node that asks
//! later is refused however much nearer it is than the members inside. The lab's diagnosis of
//! the tokens at N = 10^4 put the largest loss of the assignment there: members refused by a
//! full nearest head cost 0.5-0.6 ms of a 9 ms mean, about what the optimal capacitated
//! assignment of the same heads saves. So:
//!
//! - **A member's regret.** A member of a full cluster (its head's view lists `cap` members)
//!   tells its head what leaving would cost it (`Regret`): its measured RTT to the nearest
//!   other head it knows and that has not refused it lately, minus its measured RTT to its
//!   head ([`loss`]). Without a measured alternative it withdraws its report (`None`) and is
//!   never displaced. A report goes again once it moved by more than [`REPORT_CHANGE`] of
//!   itself or [`MARGIN`], at most every [`REPORT_EVERY`] rounds.
//! - **A bid.** An attached node that switches to a measured nearer head asks with `Bid`,
//!   naming the RTT it would save (its measured RTT to its head minus its measured RTT to the
//!   target). A head with room takes it as an `Attach`.
//! - **Displacement.** A full head whose least regretful reported member would lose less
//!   than the bid's gain minus [`MARGIN`] lets that member go (`Displaced`) and takes the
//!   bidder ([`displaced`]). The displaced member backs off the head as after a full head's
//!   refusal and attaches where its cache says.
//! - **The head's price.** A displacement sets the head's price to the winning gain, and only
//!   a bid that beats the price by [`MARGIN`] displaces again; the price halves every
//!   [`PRICE_HALF_LIFE`] rounds ([`price_now`]). Regrets are estimates (the alternative a
//!   member names may be full when it gets there): without a price a displaced member bid
//!   back with its true, larger regret and displaced another, for good (N = 1,000, 20 seeds:
//!   prefix converged on no seed, tokens on 10); with a price that never falls, the high
//!   gains of the first rounds (nodes still at far heads) stopped every later displacement.
//!
//! Departures from the auction: a bid competes with the members' reported regrets, not with
//! prices per place, and regrets and gains come from the nodes' own measurements.
//!
//! **Peers lie.** A gain or regret is a claim about the sender's own RTTs, which nobody else
//! measures; values outside 0-3600 s are refused. A liar that claims a large gain takes the
//! place of the member that reported the least regret: an honest member then pays at most its
//! own regret, and the liar holds one place, as it could by asking first; its gain is the
//! head's price, so it displaces once and stops the head's displacements until the price has
//! fallen. A liar that claims a large regret is never displaced, as before displacement
//! existed. The table of regrets holds members only.

use super::message::PeerInfo;
use crate::id::NodeId;

/// Seconds a bid's gain must exceed the displaced member's regret by: the smallest total
/// saving a displacement is worth (two nodes switch heads, every member gets a new view).
pub const MARGIN: f64 = 0.001;

/// Rounds between two regret reports of one member.
pub const REPORT_EVERY: u32 = 5;

/// A regret is reported again once it moved by more than this share of itself (or more than
/// [`MARGIN`]).
pub const REPORT_CHANGE: f64 = 0.2;

/// The largest gain or regret a node may claim, seconds (as every measured RTT).
pub const MAX_CLAIM: f32 = 3600.0;

/// Rounds in which a head's price halves.
pub const PRICE_HALF_LIFE: f64 = 20.0;

/// A head's price `rounds` after it was set to `price`: halved every [`PRICE_HALF_LIFE`].
pub fn price_now(price: f32, rounds: u32) -> f32 {
    (price as f64 * 0.5f64.powf(rounds as f64 / PRICE_HALF_LIFE)) as f32
}

/// A claimed gain or regret is usable: finite, not negative, below [`MAX_CLAIM`].
pub fn valid_claim(x: f32) -> bool {
    x.is_finite() && (0.0..MAX_CLAIM).contains(&x)
}

/// A member's regret (seconds): `alternative - own`, floored at 0, where `own` is its measured
/// RTT to its head and `alternative` the smallest measured RTT among the other heads it knows
/// that have not refused it lately; `None` without both measurements.
pub fn loss(own: f32, alternatives: impl IntoIterator<Item = f32>) -> Option<f32> {
    if own.is_nan() || own <= 0.0 {
        return None;
    }
    let alt = alternatives.into_iter().filter(|r| *r > 0.0).min_by(f32::total_cmp)?;
    Some((alt - own).max(0.0))
}

/// Whether a new report is due: none sent to this head yet, or the regret moved by more than
/// [`REPORT_CHANGE`] of itself or [`MARGIN`] (a withdrawal, `None`, is a change), no sooner
/// than [`REPORT_EVERY`] rounds after the last one.
pub fn report_due(last: Option<(Option<f32>, u32)>, now: Option<f32>, round: u32) -> bool {
    let Some((sent, at)) = last else { return now.is_some() };
    if round.wrapping_sub(at) < REPORT_EVERY {
        return false;
    }
    match (sent, now) {
        (Some(a), Some(b)) => {
            let d = (a - b).abs() as f64;
            d > MARGIN || d > REPORT_CHANGE * a as f64
        }
        (None, None) => false,
        _ => true,
    }
}

/// The member a full head whose price is `price` lets go for a bid of `gain` seconds: the
/// member with the least reported regret among `members` (`regrets` sorted by id; reports of
/// non-members are ignored), if it is below `gain - MARGIN`, and only if `gain` beats the
/// price by [`MARGIN`].
pub fn displaced(members: &[PeerInfo], regrets: &[(NodeId, f32)], gain: f32, price: f32) -> Option<NodeId> {
    if (gain as f64) <= price as f64 + MARGIN {
        return None;
    }
    let (id, r) = regrets
        .iter()
        .filter(|(id, _)| members.iter().any(|m| m.id == *id))
        .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))?;
    ((*r as f64) + MARGIN < gain as f64).then_some(*id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::superpeer::Point;

    fn info(i: u64) -> PeerInfo {
        PeerInfo { id: NodeId::from_u64(i), point: Point::new(&[0.0, 0.0], 0.0) }
    }

    #[test]
    fn the_least_regretful_member_goes_for_a_gain_above_its_regret_and_the_margin() {
        let members = [info(1), info(2), info(3)];
        let mut regrets = vec![(NodeId::from_u64(1), 0.004), (NodeId::from_u64(2), 0.002), (NodeId::from_u64(9), 0.0)];
        regrets.sort_by_key(|r| r.0);
        // Node 9 left: its report does not count. Node 3 reported nothing: never displaced.
        assert_eq!(displaced(&members, &regrets, 0.0035, 0.0), Some(NodeId::from_u64(2)));
        assert_eq!(displaced(&members, &regrets, 0.0029, 0.0), None, "within the margin");
        assert_eq!(displaced(&members, &[], 1.0, 0.0), None, "nobody reported");
    }

    #[test]
    fn a_bid_must_beat_the_heads_price() {
        let members = [info(1)];
        let regrets = [(NodeId::from_u64(1), 0.001)];
        assert_eq!(displaced(&members, &regrets, 0.010, 0.0085), Some(NodeId::from_u64(1)));
        assert_eq!(displaced(&members, &regrets, 0.010, 0.0095), None);
    }

    #[test]
    fn a_regret_needs_both_measurements_and_is_never_negative() {
        assert_eq!(loss(0.010, [0.0, 0.030, 0.020]), Some(0.010));
        assert_eq!(loss(0.010, [0.005]), Some(0.0));
        assert_eq!(loss(0.0, [0.020]), None);
        assert_eq!(loss(0.010, [0.0]), None);
        assert_eq!(loss(f32::NAN, [0.020]), None);
    }

    #[test]
    fn reports_go_on_change_and_not_too_often() {
        assert!(report_due(None, Some(0.01), 7));
        assert!(!report_due(None, None, 7));
        assert!(!report_due(Some((Some(0.01), 5)), Some(0.05), 6), "too soon");
        assert!(!report_due(Some((Some(0.010), 0)), Some(0.0105), 20), "a small change");
        assert!(report_due(Some((Some(0.010), 0)), Some(0.013), 20));
        assert!(report_due(Some((Some(0.010), 0)), None, 20), "a withdrawal");
        assert!(!report_due(Some((None, 0)), None, 20));
    }

    #[test]
    fn claims_outside_any_measured_rtt_are_refused() {
        for bad in [f32::NAN, f32::INFINITY, -0.001, MAX_CLAIM] {
            assert!(!valid_claim(bad), "{bad}");
        }
        assert!(valid_claim(0.0) && valid_claim(0.5));
    }
}
