//! Settled super peers: a token holder's moves age with its time as super peer.
//!
//! Seed 000: "when a token is held by a node for a given amount of time, the node promotes
//! itself to super peer". The seed says nothing about what a super peer's token does after
//! that. It may still move ([`super::token`]), with `promoted_factor` x the threshold and the
//! gain, and every move restarts the hold time at the new holder.
//!
//! **Aging** (*ours*, [`aging`]): late moves of old super peers are mostly on predicted gains of
//! a few per cent, within the coordinates' error (median relative error ~0.1): noise that
//! costs a cluster its head, and members that end farther by the TRUE RTT. So a super peer's
//! move needs the gain x `1 + age / aging` on top of the cooling, `age` the rounds
//! since it became super peer (promoted, or took the role over). A young super peer still
//! follows its cluster; an old one moves only for a large predicted gain. Its members still
//! switch to heads measured nearer, so the clustering keeps improving around a head that
//! stays. A recreated token starts young. 0 turns aging off.
//!
//! Split jumps do not age (`super::token`, "Split offers"): a jump must gain more than the
//! removal of its token costs, and only the token's cooling raises that bar.
//!
//! Tried and not kept: a small move keeping the promotion (the receiver started young and moved
//! again on ordinary gains).

use super::config::TokenConfig;

/// The factor by which a holder's move needs more gain because it has been a super peer for
/// `age` rounds (module doc): `1 + age / aging`; 1 when it is not (yet) promoted or
/// `aging` is 0.
pub fn aging(promoted: bool, age: u32, cfg: &TokenConfig) -> f64 {
    if !promoted || cfg.aging <= 0.0 {
        return 1.0;
    }
    1.0 + age as f64 / cfg.aging
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_super_peer_needs_more_gain_the_longer_it_served() {
        let cfg = TokenConfig { aging: 10.0, ..Default::default() };
        assert_eq!(aging(false, 50, &cfg), 1.0, "not promoted: no aging");
        assert_eq!(aging(true, 0, &cfg), 1.0);
        assert!((aging(true, 10, &cfg) - 2.0).abs() < 1e-12);
        assert!((aging(true, 45, &cfg) - 5.5).abs() < 1e-12);
        assert!(aging(true, 60, &cfg) > aging(true, 30, &cfg));
        let off = TokenConfig { aging: 0.0, ..cfg };
        assert_eq!(aging(true, 1000, &off), 1.0);
    }
}
