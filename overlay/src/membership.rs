//! The process group an election runs over.
//!
//! The seeds assume a-priori knowledge: "every process knows the ID of every other process"
//! (seed 000) and "a process knows all process numbers, but not which are alive" (seed 001).
//! A [`Membership`] is that knowledge: the ranks of all processes, sorted ascending, shared
//! behind an `Arc` so that a simulator with 100,000 processes keeps one copy, not one per
//! process. Liveness is *not* part of it: processes learn who is down from timeouts, failed
//! sends and `PeerDown` reports.
//!
//! The logical ring of the ring algorithms is this order: a process's *successor* is the
//! process with the next higher rank, wrapping from the highest to the lowest.
//!
//! The id index is a `hashbrown::HashTable<u32>` of positions into the rank list, hashed with
//! `FxHash` (ids are uniform hashes already). It stores 4 bytes per slot instead of a whole
//! `(NodeId, u32)` pair (36 bytes), so at 100,000 members it is about 0.6 MiB instead of 5 MiB
//! and stays in cache; a lookup confirms the candidate by comparing `ranks[pos].id`, the line
//! callers usually read next anyway. This lookup is on every delivered message's path in the
//! simulator (see `docs/results/elections.md`, "Throughput and memory").

use crate::id::{NodeId, Rank};
use hashbrown::HashTable;
use rustc_hash::{FxBuildHasher, FxHashSet};
use std::hash::BuildHasher;

/// The known process group, sorted by rank (ascending), with an index by id.
#[derive(Debug, Clone, Default)]
pub struct Membership {
    ranks: Vec<Rank>,
    /// Id -> position: positions into `ranks`, hashed by their rank's id (see the module doc).
    index: HashTable<u32>,
}

#[inline]
fn hash_id(id: &NodeId) -> u64 {
    FxBuildHasher.hash_one(id)
}

impl Membership {
    /// Build a group. Duplicate ids keep the first rank seen.
    pub fn new(ranks: impl IntoIterator<Item = Rank>) -> Membership {
        let ranks = ranks.into_iter();
        // Sized up front: a node rebuilds its group of N members every feed while it joins.
        let n = ranks.size_hint().0;
        let mut seen = FxHashSet::with_capacity_and_hasher(n, Default::default());
        let mut v: Vec<Rank> = Vec::with_capacity(n);
        for r in ranks {
            if seen.insert(r.id) {
                v.push(r);
            }
        }
        v.sort_unstable();
        let mut index = HashTable::with_capacity(v.len());
        for (i, r) in v.iter().enumerate() {
            index.insert_unique(hash_id(&r.id), i as u32, |&p| hash_id(&v[p as usize].id));
        }
        Membership { ranks: v, index }
    }

    pub fn len(&self) -> usize {
        self.ranks.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ranks.is_empty()
    }
    /// All ranks, ascending.
    pub fn ranks(&self) -> &[Rank] {
        &self.ranks
    }
    pub fn contains(&self, id: &NodeId) -> bool {
        self.position(id).is_some()
    }
    /// Position of `id` in rank order.
    #[inline]
    pub fn position(&self, id: &NodeId) -> Option<usize> {
        self.index.find(hash_id(id), |&p| self.ranks[p as usize].id == *id).map(|&p| p as usize)
    }
    pub fn rank_of(&self, id: &NodeId) -> Option<Rank> {
        self.position(id).map(|i| self.ranks[i])
    }
    /// Heap bytes of the rank list and the id index (hashbrown keeps about 8/7 slots per
    /// entry of capacity, each a 4-byte position plus one control byte).
    pub fn heap_bytes(&self) -> usize {
        let slots = self.index.capacity() * 8 / 7;
        self.ranks.capacity() * std::mem::size_of::<Rank>() + slots * (std::mem::size_of::<u32>() + 1)
    }
    /// The highest-ranked process.
    pub fn highest(&self) -> Option<Rank> {
        self.ranks.last().copied()
    }
    /// Processes ranked strictly above `r`, ascending.
    pub fn higher(&self, r: &Rank) -> &[Rank] {
        let i = self.ranks.partition_point(|x| x <= r);
        &self.ranks[i..]
    }
    /// Processes ranked strictly below `r`, ascending.
    pub fn lower(&self, r: &Rank) -> &[Rank] {
        let i = self.ranks.partition_point(|x| x < r);
        &self.ranks[..i]
    }
    /// The `k`-th process after `id` on the ring (k = 1 is the successor), wrapping around.
    /// `None` if `id` is not a member.
    pub fn successor_n(&self, id: &NodeId, k: usize) -> Option<Rank> {
        let i = self.position(id)?;
        Some(self.ranks[(i + k) % self.ranks.len()])
    }
    /// The next process on the ring (next higher rank, wrapping).
    pub fn successor(&self, id: &NodeId) -> Option<Rank> {
        self.successor_n(id, 1)
    }
    /// The previous process on the ring (next lower rank, wrapping).
    pub fn predecessor(&self, id: &NodeId) -> Option<Rank> {
        let i = self.position(id)?;
        let n = self.ranks.len();
        Some(self.ranks[(i + n - 1) % n])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(ids: &[u64]) -> Membership {
        Membership::new(ids.iter().map(|&i| Rank::new(0, NodeId::from_u64(i))))
    }

    #[test]
    fn sorted_and_indexed() {
        let g = group(&[5, 1, 3, 3]);
        assert_eq!(g.len(), 3);
        let ids: Vec<u64> = g.ranks().iter().map(|r| r.id.high_u64()).collect();
        assert_eq!(ids, vec![1, 3, 5]);
        assert_eq!(g.position(&NodeId::from_u64(5)), Some(2));
        assert!(!g.contains(&NodeId::from_u64(4)));
    }

    #[test]
    fn index_tells_apart_ids_that_share_their_high_bits() {
        // Ids equal but for their last byte: the index must compare whole ids.
        let id = |b: u8| {
            let mut x = [7u8; 32];
            x[31] = b;
            NodeId(x)
        };
        let g = Membership::new([9u8, 3, 200, 0].iter().map(|&b| Rank::new(0, id(b))));
        assert_eq!(g.position(&id(0)), Some(0));
        assert_eq!(g.position(&id(3)), Some(1));
        assert_eq!(g.position(&id(9)), Some(2));
        assert_eq!(g.position(&id(200)), Some(3));
        assert!(!g.contains(&id(4)));
        assert!(!g.contains(&NodeId::MIN));
        assert_eq!(Membership::default().position(&id(0)), None);
    }

    #[test]
    fn higher_lower_ring() {
        let g = group(&[1, 2, 3, 4]);
        let r2 = g.rank_of(&NodeId::from_u64(2)).unwrap();
        assert_eq!(g.higher(&r2).len(), 2);
        assert_eq!(g.lower(&r2).len(), 1);
        assert_eq!(g.successor(&NodeId::from_u64(4)).unwrap().id, NodeId::from_u64(1));
        assert_eq!(g.predecessor(&NodeId::from_u64(1)).unwrap().id, NodeId::from_u64(4));
        assert_eq!(g.successor_n(&NodeId::from_u64(3), 2).unwrap().id, NodeId::from_u64(1));
        assert_eq!(g.successor(&NodeId::from_u64(9)), None);
    }
}
