//! The members a process's failure detector has reported down: a `PeerDown` report and no
//! `PeerUp` since.
//!
//! A report outlives the messages in flight: a message sent by a process before it crashed
//! can arrive after the report of its crash. So what a report says stays true for the
//! receiver until the detector takes it back (`PeerUp`), and each algorithm says what it
//! does with messages from a member reported down (the bully family admits no claim of
//! leadership from one; the ring family skips it on the ring and takes a message from it as a
//! sign of life, at the cost of one failed send when the message was stale).
//!
//! Expiry: an entry lasts until `PeerUp`, until the algorithm takes it back, or until a new
//! group ([`Down::retain_members`]) no longer has the member. Only members are entered, so
//! the set is bounded by the group; it is usually empty.

use crate::id::{NodeId, Rank};
use crate::membership::Membership;

/// Sorted ids of the members reported down.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Down(Vec<NodeId>);

impl Down {
    /// Record a report about `id` if it is a member of `group`; returns whether it was new.
    pub fn insert(&mut self, group: &Membership, id: NodeId) -> bool {
        if !group.contains(&id) {
            return false;
        }
        match self.0.binary_search(&id) {
            Ok(_) => false,
            Err(i) => {
                self.0.insert(i, id);
                true
            }
        }
    }

    /// `PeerUp` for `p`, in a set of members whose claims were refused while reported down
    /// (the bully family's `refused`): `p`'s rank if its claim was refused and it ranks above
    /// this process (`me`) and above the coordinator it names, so that it must be asked again.
    pub fn refused_and_above(
        &mut self,
        group: &Membership,
        me: Rank,
        leader: Option<Rank>,
        p: &NodeId,
    ) -> Option<Rank> {
        let refused = self.remove(p);
        group.rank_of(p).filter(|&r| refused && r > me && leader.is_none_or(|l| r > l))
    }

    /// Take back a report; returns whether there was one.
    pub fn remove(&mut self, id: &NodeId) -> bool {
        match self.0.binary_search(id) {
            Ok(i) => {
                self.0.remove(i);
                true
            }
            Err(_) => false,
        }
    }

    pub fn contains(&self, id: &NodeId) -> bool {
        !self.0.is_empty() && self.0.binary_search(id).is_ok()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// Forget members that left the group.
    pub fn retain_members(&mut self, group: &Membership) {
        self.0.retain(|id| group.contains(id));
    }

    pub fn iter(&self) -> impl Iterator<Item = &NodeId> {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::Rank;

    #[test]
    fn only_members_and_sorted() {
        let g = Membership::new((1..=4).map(|i| Rank::new(0, NodeId::from_u64(i))));
        let mut d = Down::default();
        assert!(d.insert(&g, NodeId::from_u64(3)));
        assert!(!d.insert(&g, NodeId::from_u64(3)));
        assert!(!d.insert(&g, NodeId::from_u64(9)), "not a member");
        assert!(d.insert(&g, NodeId::from_u64(1)));
        assert_eq!(d.iter().copied().collect::<Vec<_>>(), vec![NodeId::from_u64(1), NodeId::from_u64(3)]);
        assert!(d.contains(&NodeId::from_u64(1)));
        assert!(d.remove(&NodeId::from_u64(1)));
        assert!(!d.remove(&NodeId::from_u64(1)));
        let smaller = Membership::new((1..=2).map(|i| Rank::new(0, NodeId::from_u64(i))));
        d.retain_members(&smaller);
        assert!(d.is_empty());
    }
}
