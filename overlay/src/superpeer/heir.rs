//! The heir a head names in its cluster view (*ours*).
//!
//! Seed 000 has a dead super peer's cluster elect a replacement among its members with the
//! classic algorithms; they elect the highest rank, and with every rank at priority 0 that is
//! the highest id: a member that stands anywhere in the cluster. Its members then measure it,
//! find it farther than other heads and leave, and the re-elected head's members keep moving
//! for rounds after the crash (at N = 10^5 with reserved prefixes, 13-17 rounds); a recreated token moves away from the winner at once.
//!
//! So the head names the member that would serve its cluster best: the **medoid** of its
//! members by predicted RTT (the member whose summed predicted RTT to the other members is
//! least). The `ClusterView` lists it first, and the re-election ranks the first member of the
//! view above the others (priority 1; `node` module doc, step 5, "The heir"). Every algorithm
//! elects the highest rank, so the heir wins when it is alive, and the highest id when it is not.
//!
//! What it assumes: the members' points are the ones they attached with or last reported
//! (`PeerInfo::point`); the head is dead when the heir matters, so the head's own RTT does not
//! count. Cost: only the [`HEIR_CANDIDATES`] members nearest to the head are tried (the head
//! stands near its cluster's centre, since members attach to the nearest head), each against
//! every member; at cap 150 that is 4,800 predicted RTTs.
//!
//! **All views of a cluster name the same heir**, or two members would each rank themselves
//! first and both win (the token recreated twice; the `superpeer_windows` tests found it at
//! once). So the heir is chosen only with the round's view that goes to every member, every
//! `view_every` rounds, and a named one is replaced only by a member at least [`HEIR_MARGIN`]
//! (20 %) cheaper, which keeps changes rare once a cluster has formed; a member that left is
//! dropped at once (the view then lists the head first: nobody ranks higher). A token's
//! `Handover` lists first what the old holder's views list first (its heir, or itself) and the
//! receiver keeps that member as its heir, so the views the members make up for their head's
//! successor, the old holder's and the new holder's agree; if the token goes to the heir
//! itself, the new holder names no heir until its first choice, and the made-up views list it,
//! the dead one, first. A winner of a re-election names no heir before its first choice either.
//!
//! What is left: in a swarm some views never arrive (sends dropped under load), and a member
//! whose last view names another heir, or none, takes another member for the highest. In one
//! of nine 200-node prefix swarms two members took a
//! killed slot for a moment; the later `Takeover`s left one (`node` module doc, step 5).

use super::message::PeerInfo;
use super::point::Point;
use crate::id::NodeId;

/// Members nearest to the head that are tried as heir.
pub const HEIR_CANDIDATES: usize = 32;

/// Fraction by which a new heir must be cheaper than the current one.
pub const HEIR_MARGIN: f64 = 0.2;

/// Summed predicted RTT (seconds) from every other member to `c`.
fn cost(c: &PeerInfo, members: &[PeerInfo]) -> f64 {
    members.iter().filter(|m| m.id != c.id && m.point.is_valid()).map(|m| m.point.rtt(&c.point)).sum()
}

/// The heir of a cluster with these `members`, served by a head at `head`: the medoid among
/// the [`HEIR_CANDIDATES`] members nearest to the head (ties: the lower id), or `current` if
/// it is still a member and the medoid is not [`HEIR_MARGIN`] cheaper. `None` without a
/// member with a valid point.
pub fn heir(head: &Point, members: &[PeerInfo], current: Option<NodeId>) -> Option<NodeId> {
    let mut near: Vec<(f64, &PeerInfo)> =
        members.iter().filter(|m| m.point.is_valid()).map(|m| (m.point.rtt(head), m)).collect();
    near.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.id.cmp(&b.1.id)));
    near.truncate(HEIR_CANDIDATES);
    let mut best: Option<(f64, &PeerInfo)> = None;
    for (_, c) in near {
        let x = cost(c, members);
        if x.is_finite() && best.is_none_or(|b| x < b.0 || (x == b.0 && c.id < b.1.id)) {
            best = Some((x, c));
        }
    }
    let (bx, b) = best?;
    let kept = current.and_then(|id| members.iter().find(|m| m.id == id && m.point.is_valid()));
    match kept {
        Some(k) if k.id == b.id || cost(k, members) * (1.0 - HEIR_MARGIN) <= bx => Some(k.id),
        _ => Some(b.id),
    }
}

/// The cluster view's member list: the heir first (if it is a member), the other members in
/// their order, the head last. Without a heir the head comes first: it is the dead one when
/// its view is used, so nobody ranks above the others ([`priority`]).
pub fn view_ids(members: &[PeerInfo], heir: Option<NodeId>, head: NodeId) -> Vec<NodeId> {
    let mut ids = Vec::with_capacity(members.len() + 1);
    match heir.filter(|h| members.iter().any(|m| m.id == *h)) {
        Some(h) => {
            ids.push(h);
            ids.extend(members.iter().map(|m| m.id).filter(|id| *id != h));
            ids.push(head);
        }
        None => {
            ids.push(head);
            ids.extend(members.iter().map(|m| m.id));
        }
    }
    ids
}

/// The re-election's priority of `id` in a view `ids` of the dead head `dead`: 1 for the heir
/// (the view's first id, unless that is the dead head itself, as in a member-less head's
/// `[holder, backup]`), 0 for every other member.
pub fn priority(ids: &[NodeId], dead: NodeId, id: NodeId) -> u64 {
    u64::from(ids.first().is_some_and(|f| *f == id && *f != dead))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(i: u64, x: f64, y: f64) -> PeerInfo {
        PeerInfo { id: NodeId::from_u64(i), point: Point::new(&[x, y], 0.0) }
    }

    #[test]
    fn the_heir_is_the_medoid_not_the_highest_id() {
        // Five members in a row, 10 ms apart; the head stands off to one side. The middle one
        // (id 3) has the least summed RTT to the others; id 9 is the highest and at one end.
        let members = [at(9, 0.0, 0.0), at(2, 0.01, 0.0), at(3, 0.02, 0.0), at(4, 0.03, 0.0), at(5, 0.04, 0.0)];
        let head = Point::new(&[0.0, 0.005], 0.0);
        assert_eq!(heir(&head, &members, None), Some(NodeId::from_u64(3)));
        assert_eq!(heir(&head, &[], None), None);
    }

    #[test]
    fn the_heir_stays_unless_another_is_clearly_better() {
        // The row of five and a sixth member 2 ms off its middle: id 3 costs 62 ms, id 6
        // 62.6 ms (within the margin), id 2 80.2 ms (29 % more).
        let members = [
            at(9, 0.0, 0.0),
            at(2, 0.01, 0.0),
            at(3, 0.02, 0.0),
            at(4, 0.03, 0.0),
            at(5, 0.04, 0.0),
            at(6, 0.02, 0.002),
        ];
        let head = Point::new(&[0.02, 0.001], 0.0);
        assert_eq!(heir(&head, &members, None), Some(NodeId::from_u64(3)));
        // A heir within the margin stays ...
        assert_eq!(heir(&head, &members, Some(NodeId::from_u64(6))), Some(NodeId::from_u64(6)));
        // ... one clearly worse is replaced, and so is one that left.
        assert_eq!(heir(&head, &members, Some(NodeId::from_u64(2))), Some(NodeId::from_u64(3)));
        assert_eq!(heir(&head, &members, Some(NodeId::from_u64(42))), Some(NodeId::from_u64(3)));
    }

    #[test]
    fn the_view_lists_the_heir_first_and_ranks_it_alone() {
        let members = [at(9, 0.0, 0.0), at(2, 0.01, 0.0), at(3, 0.02, 0.0)];
        let head = NodeId::from_u64(100);
        let ids = view_ids(&members, Some(NodeId::from_u64(3)), head);
        assert_eq!(ids, [3, 9, 2, 100].map(NodeId::from_u64));
        assert_eq!(priority(&ids, head, NodeId::from_u64(3)), 1);
        assert_eq!(priority(&ids, head, NodeId::from_u64(9)), 0);
        // A heir that is no member is not listed: the head comes first, nobody ranks higher.
        let ids = view_ids(&members, Some(NodeId::from_u64(7)), head);
        assert_eq!(ids, [100, 9, 2, 3].map(NodeId::from_u64));
        assert!(ids.iter().all(|id| priority(&ids, head, *id) == 0));
        assert_eq!(view_ids(&members, None, head), ids);
        // A member-less head's [holder, backup]: the dead holder is first, nobody is heir.
        let pair = [head, NodeId::from_u64(5)];
        assert_eq!(priority(&pair, head, head), 0);
        assert_eq!(priority(&pair, head, NodeId::from_u64(5)), 0);
    }
}
