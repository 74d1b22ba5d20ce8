//! The measured medoid step: a settled token holder checks, with RTTs that nodes measure
//! (pings, `SpEffect::MeasureRtt`), whether one of its members would serve the cluster
//! better, and moves its token there (*ours*, engineer "placement"; the
//! seed's token law names no such step).
//!
//! Why: the token law ([`super::token`]) moves a token by the *predicted* RTT, and at the
//! scale of one cluster the coordinates cannot rank nodes. Measured at N = 10^4 (seeds 1-3,
//! `peerage-lab superpeers --diagnose`):
//! the members' predicted RTT to their head is 17.8-18.8 ms against a TRUE 10.0-11.7 ms
//! (mean |error| 7.9-8.6 ms, mostly the heights); capacitated k-medoids from the tokens'
//! own heads gains 0.9-1.5 ms when each medoid is chosen on the TRUE RTT and nothing at all
//! when it is chosen on the predicted RTT. So the step is judged by measured RTTs only.
//!
//! The step (by a holder still for the hold time, with no handover, drain or election under
//! way and no crash nearby for the hold time; a series of steps per token epoch, see
//! "Retries", and a new series at the same epoch once a quarter of its members changed):
//! - **Sample.** Up to `medoid.sample` members (32), drawn at random ([`sample`]).
//! - **Candidates.** The `medoid.candidates` members (6; `MedoidConfig`) best by a coarse score
//!   ([`candidates`]): the mean Euclidean distance to the other members (the coordinates
//!   place cities well; it is the heights, the per-node part, that they get wrong) plus
//!   `access_weight x` the member's access excess from its measured nearest RTT
//!   ([`super::token::AccessEstimate`]). The score only chooses who is measured; it
//!   decides nothing.
//! - **Measure.** Each candidate gets `MedoidProbe { sample }` (only its own head is
//!   answered), pings every sampled member and answers `MedoidCost { rtts }` (seconds, in
//!   the sample's order, 0 = no answer) once every ping came back or after
//!   `MEDOID_ROUNDS` (3, in `node`). The holder pings the same members itself.
//! - **Decide** ([`decide`]), once every answer is in or after 3 rounds. On the members both
//!   the holder and a candidate reached (the candidate itself left out: as head it pays
//!   nothing to itself, and the old holder then pays it about the RTT the candidate paid
//!   the holder), the sums of the measured RTTs are compared, paired. The token moves to the
//!   best candidate only if its sum is below the holder's by the fraction `min_gain x` the
//!   token's cooling ([`super::token::cooling`], `promoted_factor` once promoted) and the
//!   super peer's aging ([`super::promotion::aging`], so that settled swarms stay settled),
//!   at least [`MIN_GAIN`], and if at least half the sample answered both. The move is the ordinary
//!   `Handover` with the members, so tokens are conserved exactly as by every other move.
//! - **Measured, then not predicted.** A token that arrived by this step (the new holder
//!   had answered the old holder's probe) is no longer moved by the predicted law: in the
//!   first version it was, and it moved the measured medoids away again (N = 10^4, seed 3:
//!   11.28 -> 11.44 ms, and seeds 1 and 2 did not converge within 150 rounds). Split offers
//!   and further measured steps still move it.
//!
//! - **Retries.** A step that moved nothing is followed, [`RETRY_ROUNDS`] after it started,
//!   by another, up to `medoid.retries` (6) per series: the best `ceil(k / 2)` candidates are
//!   measured again on a fresh sample, the others are members drawn at random. This is the
//!   randomised medoid search of CLARANS (Ng and Han, "CLARANS: a method for clustering
//!   objects for spatial data mining", IEEE TKDE 14(5), 2002), which tries random swaps of a
//!   medoid with a non-medoid and keeps the first that lowers the cost, over one cluster
//!   and with measured costs; we keep the coarse best in every draw because the coordinates
//!   do place a cluster's city. Why: the coarse score cannot rank the nodes of one city (see
//!   "Why" above), so one step per epoch often left the exact medoid unmeasured. Measured at
//!   N = 1,000 (20 seeds, `peerage-lab superpeers --diagnose`): clusters whose exact medoid
//!   was more than 3 % cheaper than their head at the end, 52 of 200 with one step,
//!   28 with six retries. The search ends: a series is at most `1 + retries` steps, and a
//!   move needs a gain that grows with every epoch (cooling) and with the super peer's age.
//!
//! Choices where nothing guides us: the sample is random (the mean over a random sample is
//! an unbiased estimate of the cluster's mean; a paired difference cancels most of the
//! spread between near and far members); 32 members and 6 candidates cost 7 x 32 pings per
//! step (about 4.5 messages per node and step at 1 % super peers). A late answer (after the
//! holder decided) is dropped.

use super::message::PeerInfo;
use super::token::AccessEstimate;
use crate::id::NodeId;
use rand::seq::SliceRandom;
use rand::RngCore;

/// Members a cluster needs before its holder takes the step (with fewer, the sample says
/// little and a move gains little).
pub const MIN_MEMBERS: usize = 3;

/// The smallest relative gain of the sampled members' measured RTT for which a token
/// moves by this step (a move re-attaches the whole cluster and restarts the hold time).
pub const MIN_GAIN: f64 = 0.03;

/// Rounds between the starts of two steps of one series (module doc, "Retries"): the
/// answers take up to `MEDOID_ROUNDS` (3, in `node`), so a retry starts a round after the
/// previous step was decided.
pub const RETRY_ROUNDS: u32 = 4;

/// Up to `n` members, at random (the holder itself is never among them).
pub fn sample(members: &[PeerInfo], me: NodeId, n: usize, rng: &mut dyn RngCore) -> Vec<NodeId> {
    let mut ids: Vec<NodeId> = members.iter().map(|m| m.id).filter(|id| *id != me).collect();
    ids.shuffle(rng);
    ids.truncate(n);
    ids
}

/// The `k` members to measure as the next head (module doc, "Candidates"). The first step
/// of a series takes the best `k` by the coarse score (mean Euclidean distance to the other
/// members plus `access_weight x` the access excess); a retry (module doc, "Retries") takes
/// the best `ceil(k / 2)` again and draws the rest at random from the other members.
pub fn candidates(
    members: &[PeerInfo],
    access: &AccessEstimate,
    access_weight: f64,
    k: usize,
    retry: bool,
    rng: &mut dyn RngCore,
) -> Vec<PeerInfo> {
    if members.len() < 2 {
        return Vec::new();
    }
    let mut scored: Vec<(f64, PeerInfo)> = members
        .iter()
        .filter(|c| c.point.is_valid())
        .map(|c| {
            let d: f64 = members.iter().filter(|m| m.id != c.id).map(|m| c.point.euclid(&m.point)).sum();
            (d / (members.len() - 1) as f64 + access_weight * access.of(c), *c)
        })
        .filter(|(s, _)| s.is_finite())
        .collect();
    scored.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.id.cmp(&b.1.id)));
    let mut ranked: Vec<PeerInfo> = scored.into_iter().map(|(_, c)| c).collect();
    if !retry {
        ranked.truncate(k);
        return ranked;
    }
    let keep = k.div_ceil(2).min(ranked.len());
    let mut rest = ranked.split_off(keep);
    rest.shuffle(rng);
    rest.truncate(k - keep);
    ranked.extend(rest);
    ranked
}

/// The candidate the token should move to (module doc, "Decide"): `own[i]` and each
/// candidate's `rtts[i]` are the measured RTTs (seconds, 0 = none) to `sample[i]`. Returns
/// the best candidate and the relative gain of its paired sum, only if that gain is above
/// `needed` and at least half the sample was reached by both.
pub fn decide(sample: &[NodeId], own: &[f32], cands: &[(PeerInfo, Vec<f32>)], needed: f64) -> Option<(PeerInfo, f64)> {
    let mut best: Option<(PeerInfo, f64)> = None;
    for (c, rtts) in cands {
        if rtts.len() != sample.len() || own.len() != sample.len() {
            continue;
        }
        let (mut here, mut there, mut n) = (0f64, 0f64, 0usize);
        for i in 0..sample.len() {
            let (a, b) = (own[i], rtts[i]);
            if sample[i] == c.id || !(a > 0.0 && b > 0.0 && a.is_finite() && b.is_finite()) {
                continue;
            }
            here += a as f64;
            there += b as f64;
            n += 1;
        }
        if 2 * n < sample.len() || here <= 0.0 {
            continue;
        }
        let gain = 1.0 - there / here;
        if gain > needed && best.as_ref().is_none_or(|b| gain > b.1) {
            best = Some((*c, gain));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::superpeer::point::Point;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn peer(i: u8, x: f32) -> PeerInfo {
        let mut p = Point::default();
        p.x[0] = x;
        PeerInfo { id: NodeId([i; 32]), point: p }
    }

    #[test]
    fn the_sample_is_members_only_and_bounded() {
        let me = peer(0, 0.0);
        let members: Vec<PeerInfo> = (1..=10).map(|i| peer(i, i as f32 * 0.001)).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let s = sample(&members, me.id, 4, &mut rng);
        assert_eq!(s.len(), 4);
        assert!(s.iter().all(|id| members.iter().any(|m| m.id == *id)));
        assert_eq!(sample(&members, me.id, 32, &mut rng).len(), 10);
    }

    #[test]
    fn candidates_are_central() {
        // Nine members around 0.010 and one far out at 0.100: the far one is last.
        let mut members: Vec<PeerInfo> = (1..=9).map(|i| peer(i, 0.010 + i as f32 * 0.0001)).collect();
        members.push(peer(10, 0.100));
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let none = AccessEstimate::default();
        let c = candidates(&members, &none, 1.0, 9, false, &mut rng);
        assert_eq!(c.len(), 9);
        assert!(c.iter().all(|p| p.id != members[9].id));
        assert_eq!(candidates(&members, &none, 1.0, 20, false, &mut rng).len(), 10);
        assert!(candidates(&members[..1], &none, 1.0, 2, false, &mut rng).is_empty());
    }

    #[test]
    fn a_retry_keeps_the_best_half_and_draws_the_rest() {
        // Members on a line: the coarse score ranks the middle ones first.
        let members: Vec<PeerInfo> = (1..=40).map(|i| peer(i, i as f32 * 0.001)).collect();
        let none = AccessEstimate::default();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let first = candidates(&members, &none, 1.0, 6, false, &mut rng);
        let mut drawn = std::collections::BTreeSet::new();
        for _ in 0..20 {
            let again = candidates(&members, &none, 1.0, 6, true, &mut rng);
            assert_eq!(again.len(), 6);
            assert_eq!(again[..3], first[..3], "the best half is measured again");
            let ids: std::collections::BTreeSet<NodeId> = again.iter().map(|p| p.id).collect();
            assert_eq!(ids.len(), 6, "no candidate twice");
            drawn.extend(again[3..].iter().map(|p| p.id));
        }
        assert!(drawn.len() > 12, "the rest is drawn from the whole cluster: {} distinct", drawn.len());
        assert!(drawn.iter().all(|id| first[..3].iter().all(|f| f.id != *id)));
        // Fewer members than candidates: every member, once.
        assert_eq!(candidates(&members[..4], &none, 1.0, 6, true, &mut rng).len(), 4);
    }

    #[test]
    fn decide_moves_only_on_a_paired_measured_gain() {
        let s: Vec<NodeId> = (1..=4).map(|i| NodeId([i; 32])).collect();
        let own = vec![0.010, 0.010, 0.010, 0.010];
        let better = (peer(20, 0.0), vec![0.008, 0.008, 0.009, 0.0]);
        let worse = (peer(21, 0.0), vec![0.012, 0.011, 0.010, 0.010]);
        // The better one: 25 / 30 ms on the three answered pairs, a gain of 1/6.
        let (c, g) = decide(&s, &own, &[worse.clone(), better.clone()], 0.05).expect("a move");
        assert_eq!(c.id, better.0.id);
        assert!((g - 1.0 / 6.0).abs() < 1e-6, "{g}");
        assert!(decide(&s, &own, std::slice::from_ref(&better), 0.2).is_none(), "gain below the threshold");
        assert!(decide(&s, &own, &[worse], 0.0).is_none(), "no gain");
        // Too few answers: only one pair of four.
        let sparse = (peer(22, 0.0), vec![0.001, 0.0, 0.0, 0.0]);
        assert!(decide(&s, &own, &[sparse], 0.0).is_none());
        // The candidate's own entry does not count.
        let s2 = vec![s[0], s[1], better.0.id, s[3]];
        let (_, g2) = decide(&s2, &own, &[better], 0.0).expect("a move");
        assert!((g2 - (1.0 - 0.016 / 0.020)).abs() < 1e-6, "{g2}");
        // A length mismatch is ignored, not a panic.
        assert!(decide(&s, &own, &[(peer(23, 0.0), vec![0.001])], 0.0).is_none());
    }
}
