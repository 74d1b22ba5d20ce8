//! Claims in election and super-peer messages, checked against the authenticated sender and
//! the signed directory before a state machine sees them.
//!
//! The seam: the node knows who sent a frame (the noise-authenticated peer of the stream, or
//! the signed source of a gossipsub message) and holds the directory, so it calls
//! [`check_election`] / [`check_superpeer`] between decoding a frame and feeding the message
//! to the state machine. The state machines check what only they know (their own state,
//! epochs, phases); these checks cover what only the directory knows: who is a member, at
//! which rank, and who is speaking. The simulator, whose members are honest, does not need
//! them; a simulator of hostile peers calls them exactly as the node does.
//!
//! A refusal is a [`ClaimRefusal`] with a severity: [`Severity::Lie`] for what an honest
//! sender never says (a forged rank, a head claim made on someone else's behalf), reported to the reputation component; [`Severity::Unknown`]
//! for names this node has not learned yet (an honest message can race the directory), which
//! are refused but not held against the sender; [`Severity::Stale`] for announcements that
//! this node's own liveness contradicts.

use crate::election::Message;
use crate::id::{NodeId, Rank};
use crate::membership::Membership;
use crate::superpeer::SpMessage;

/// How a refused claim counts against its sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Something no honest sender says.
    Lie,
    /// A name this node does not know (yet).
    Unknown,
    /// Contradicted by this node's own state (it is alive and ranks higher).
    Stale,
}

/// A refused claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimRefusal {
    pub severity: Severity,
    pub reason: &'static str,
}

impl ClaimRefusal {
    fn lie(reason: &'static str) -> Self {
        ClaimRefusal { severity: Severity::Lie, reason }
    }
    fn unknown(reason: &'static str) -> Self {
        ClaimRefusal { severity: Severity::Unknown, reason }
    }
}

/// Who is a member, at which rank.
pub trait Ranks {
    fn rank_of(&self, id: &NodeId) -> Option<Rank>;
}

impl Ranks for Membership {
    fn rank_of(&self, id: &NodeId) -> Option<Rank> {
        Membership::rank_of(self, id)
    }
}

impl Ranks for super::Directory {
    fn rank_of(&self, id: &NodeId) -> Option<Rank> {
        super::Directory::rank_of(self, id)
    }
}

/// A rank named in a message must be the member's rank in the directory.
fn rank_ok(d: &impl Ranks, r: &Rank) -> Result<(), ClaimRefusal> {
    match d.rank_of(&r.id) {
        Some(known) if known == *r => Ok(()),
        Some(_) => Err(ClaimRefusal::lie("a rank that differs from the member's signed record")),
        None => Err(ClaimRefusal::unknown("names a process that is not a member")),
    }
}

/// Check an election message from the authenticated `from` at a node of rank `me`.
pub fn check_election(d: &impl Ranks, me: Rank, from: NodeId, msg: &Message) -> Result<(), ClaimRefusal> {
    if from == me.id {
        return Err(ClaimRefusal::lie("claims to come from the receiver itself"));
    }
    if d.rank_of(&from).is_none() {
        return Err(ClaimRefusal::unknown("sender is not a member"));
    }
    // A leader relayed on someone's behalf: the algorithms all elect the highest-ranked
    // live process, and this one is alive, so a leader ranked below it was not elected by
    // a run it took part in.
    let relayed_leader = |leader: &Rank| -> Result<(), ClaimRefusal> {
        rank_ok(d, leader)?;
        if *leader < me {
            return Err(ClaimRefusal { severity: Severity::Stale, reason: "names a leader ranked below the receiver" });
        }
        Ok(())
    };
    match msg {
        Message::Election
        | Message::Answer
        | Message::Coordinator
        | Message::Alive
        | Message::IamUp
        | Message::Nomination
        | Message::EchoProbe => Ok(()),
        Message::View { up, coordinator } => {
            up.iter().try_for_each(|r| rank_ok(d, r))?;
            coordinator.iter().try_for_each(|r| rank_ok(d, r))
        }
        Message::RingElection { initiator, candidates, .. } => {
            rank_ok(d, initiator)?;
            candidates.iter().try_for_each(|r| rank_ok(d, r))
        }
        Message::RingCoordinator { initiator, leader, members, .. } => {
            rank_ok(d, initiator)?;
            members.iter().try_for_each(|r| rank_ok(d, r))?;
            relayed_leader(leader)
        }
        Message::CrElection { candidate, .. } => rank_ok(d, candidate),
        Message::CrElected { leader, .. } => relayed_leader(leader),
        // A Villadangos process that receives a leader ranked below it starts the next epoch,
        // which it wins: the algorithm's way back for a restarted or thawed higher process
        // (it adopts the group's epoch from that announcement). Refusing it would leave such a
        // process out for good.
        Message::VillLeader { leader, .. } => rank_ok(d, leader),
        Message::Message1 { candidate_predecessor: r, .. }
        | Message::Message2 { candidate_successor: r, .. }
        | Message::Message3 { candidate_predecessor: r, .. } => rank_ok(d, r),
        Message::EchoElection { tag } => rank_ok(d, &tag.source),
        Message::EchoAck { tag, best } => {
            rank_ok(d, &tag.source)?;
            best.iter().try_for_each(|r| rank_ok(d, r))
        }
        Message::EchoLeader { tag, leader } => {
            rank_ok(d, &tag.source)?;
            relayed_leader(leader)
        }
        // A beat is relayed along whatever paths exist, and a component that meets a
        // better one adopts its leader's beats: the leader must be a member, but may rank
        // below the receiver until the receiver's own beats win.
        Message::EchoHeartbeat { tag, leader, .. } => {
            tag.iter().try_for_each(|t| rank_ok(d, &t.source))?;
            rank_ok(d, leader)
        }
        Message::EchoReply { tag, leader } => {
            tag.iter().try_for_each(|t| rank_ok(d, &t.source))?;
            leader.iter().try_for_each(|r| rank_ok(d, r))
        }
    }
}

/// Check a super-peer message from the authenticated `from`. A slot claim is not checked
/// against the slot's reserved prefix: a slot moves by re-election to a member of the dead
/// head's cluster, whose id lies anywhere (`overlay::superpeer::node`, step 5); what is
/// checked is that every head or holder claim is the sender's own. A `Takeover` is the one
/// exception: a member that left a re-election, or knows a newer holder than the claimer's,
/// relays the holder it follows (step 5, "Late elections end"), so its head need only be a
/// member; the receiver attaches to that holder only through the holder's own `Accept`.
/// Checking it as a claim made honest relays lies (108 in one 200-node prefix swarm).
pub fn check_superpeer(d: &impl Ranks, from: NodeId, msg: &SpMessage) -> Result<(), ClaimRefusal> {
    let member = |id: &NodeId| -> Result<(), ClaimRefusal> {
        d.rank_of(id).map(|_| ()).ok_or(ClaimRefusal::unknown("names a head that is not a member"))
    };
    let own_claim = |id: &NodeId| -> Result<(), ClaimRefusal> {
        if *id != from {
            return Err(ClaimRefusal::lie("a head or holder claim made on someone else's behalf"));
        }
        Ok(())
    };
    if d.rank_of(&from).is_none() {
        return Err(ClaimRefusal::unknown("sender is not a member"));
    }
    match msg {
        SpMessage::Announce { head, .. } => own_claim(&head.id),
        SpMessage::Accept { head, .. } | SpMessage::SlotHeld { head, .. } => own_claim(&head.id),
        SpMessage::Takeover { dead, head, .. } => {
            if *dead == from {
                return Err(ClaimRefusal::lie("a takeover of the sender's own cluster"));
            }
            member(&head.id)
        }
        SpMessage::HandoverAck { holder, .. } => own_claim(&holder.id),
        SpMessage::CacheExchange { entries, .. } => entries.iter().try_for_each(|e| member(&e.head.id)),
        SpMessage::TokenGossip { entries, .. } => entries.iter().try_for_each(|e| member(&e.holder.id)),
        SpMessage::Moved { to } => member(&to.id),
        SpMessage::Split { at, .. } => member(&at.id),
        SpMessage::HeadAlive { head } | SpMessage::StepDownTo { head } => member(&head.id),
        SpMessage::Election { msg, .. } => match msg {
            // The cluster's re-election ranks its members by the head's view, not by the
            // directory's priorities: only the speaker is checked.
            Message::CrElected { leader, .. } | Message::VillLeader { leader, .. } => member(&leader.id),
            _ => Ok(()),
        },
        SpMessage::Attach { .. }
        | SpMessage::ClusterView { .. }
        | SpMessage::Refuse { .. }
        | SpMessage::Detach
        | SpMessage::StepDown
        | SpMessage::Handover { .. }
        | SpMessage::HandoverRefuse { .. }
        | SpMessage::HandoverStale { .. }
        | SpMessage::Access { .. }
        | SpMessage::MedoidProbe { .. }
        | SpMessage::MedoidCost { .. }
        | SpMessage::SizeSamples { .. } => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::ElectionTag;
    use crate::superpeer::{HeadRole, PeerInfo, Point};

    fn r(p: u64, i: u64) -> Rank {
        Rank::new(p, NodeId::from_u64(i))
    }

    fn group() -> Membership {
        Membership::new([r(1, 1), r(2, 2), r(3, 3)])
    }

    #[test]
    fn election_claims() {
        let g = group();
        let me = r(2, 2);
        let from = NodeId::from_u64(1);
        assert!(check_election(&g, me, from, &Message::Coordinator).is_ok());
        let stranger = NodeId::from_u64(9);
        assert_eq!(check_election(&g, me, stranger, &Message::Coordinator).unwrap_err().severity, Severity::Unknown);
        assert_eq!(check_election(&g, me, me.id, &Message::Alive).unwrap_err().severity, Severity::Lie);
        // A forged priority for a member.
        let forged = Message::CrElection { epoch: 1, candidate: r(u64::MAX, 1) };
        assert_eq!(check_election(&g, me, from, &forged).unwrap_err().severity, Severity::Lie);
        // A phantom leader, and a real one ranked below the receiver.
        let phantom = Message::CrElected { epoch: 1 << 40, leader: r(0, 77) };
        assert_eq!(check_election(&g, me, from, &phantom).unwrap_err().severity, Severity::Unknown);
        let low = Message::CrElected { epoch: 3, leader: r(1, 1) };
        assert_eq!(check_election(&g, me, from, &low).unwrap_err().severity, Severity::Stale);
        assert!(check_election(&g, me, from, &Message::CrElected { epoch: 3, leader: r(3, 3) }).is_ok());
        // ...but a Villadangos announcement of a lower leader is how a higher process learns
        // the epoch it must overtake.
        assert!(check_election(&g, me, from, &Message::VillLeader { epoch: 3, leader: r(1, 1) }).is_ok());
        let view = Message::View { up: vec![r(1, 1), r(3, 3)], coordinator: Some(r(3, 4)) };
        assert!(check_election(&g, me, from, &view).is_err());
        let tag = ElectionTag { round: 1, source: r(1, 1) };
        assert!(check_election(&g, me, from, &Message::EchoAck { tag, best: Some(r(3, 3)) }).is_ok());
        assert!(check_election(&g, me, from, &Message::EchoLeader { tag, leader: r(9, 3) }).is_err());
    }

    #[test]
    fn superpeer_claims() {
        let g = group();
        let from = NodeId::from_u64(1);
        let info = |i| PeerInfo { id: NodeId::from_u64(i), point: Point::default() };
        assert!(check_superpeer(&g, from, &SpMessage::Announce { head: info(1), room: true }).is_ok());
        let other = SpMessage::Announce { head: info(3), room: true };
        assert_eq!(check_superpeer(&g, from, &other).unwrap_err().severity, Severity::Lie);
        let moved = SpMessage::Moved { to: info(42) };
        assert_eq!(check_superpeer(&g, from, &moved).unwrap_err().severity, Severity::Unknown);
        let takeover_self =
            SpMessage::Takeover { dead: from, role: HeadRole::Slot { key: NodeId::MIN }, head: info(1) };
        assert!(check_superpeer(&g, from, &takeover_self).is_err());
        // A relayed takeover names the holder the sender follows: a member, not a lie.
        let role = HeadRole::Slot { key: NodeId::MIN };
        let relayed = SpMessage::Takeover { dead: NodeId::from_u64(2), role, head: info(3) };
        assert!(check_superpeer(&g, from, &relayed).is_ok());
        let phantom = SpMessage::Takeover { dead: NodeId::from_u64(2), role, head: info(42) };
        assert_eq!(check_superpeer(&g, from, &phantom).unwrap_err().severity, Severity::Unknown);
    }
}
