//! What a node's own DHT routing table says about the ids around its own: a size sample and
//! the slot claim's "am I the nearest" check, with no lookup.
//!
//! Kademlia (Maymounkov and Mazières, IPTPS 2002) keeps one bucket of at most K contacts for
//! each distance range `[2^i, 2^(i+1))` from the node's id, i.e. for the peers that share
//! exactly `255 - i` leading bits with it. A bucket that holds fewer than K contacts had room
//! for every peer of its range that the node heard of. A node hears of its nearest peers when
//! it joins (its bootstrap looks up its own id), from every peer that talks to it, and, in our
//! node, from its member directory, which it offers to the routing table. So, walking out from
//! the node's id, the buckets before the first full one hold every live peer of their ranges:
//! the **complete region**, the `2^-c` of the id space whose ids share at least `c` leading
//! bits with ours (*ours*, an assumption: a peer the table missed makes the size sample low,
//! or lets two nodes claim one slot, which the slot check of step 2 settles).
//!
//! - **Size sample.** The `m` peers of a region of share `s` are Binomial(N - 1, s), so
//!   `N̂ = m / s + 1`, with a relative spread of about `1 / sqrt(m)`. The region is the
//!   complete one without its outermost bucket: that bucket is the largest and the one the
//!   stop conditions (it stayed below K because the walk went on past it), so counting it
//!   makes `m / s` run 3-5 % low, by an amount that depends on N; without it the sample is
//!   unbiased at every N (`tests::vicinity_samples_are_close_to_n`), with a spread of about
//!   0.27 (a complete region of fewer than [`MIN_VICINITY_PEERS`] says too little; leaving
//!   out only the samples whose smaller region is small would bias them upwards). A table
//!   with no full bucket gives no sample: it may list every peer of a network of a few dozen,
//!   or be a table still filling (a node that took a partial table for the network wants far
//!   too few super peers), and a network that small is cheap to look up.
//! - **Independence.** A peer outside our complete region shares fewer leading bits with us
//!   than the region's ids, so its own region is a disjoint subtree of the id space: its
//!   sample counts other ids. Samples are pushed to such peers ([`Vicinity::is_outside`]).
//! - **Nearest in a slot.** A reserved slot's key is our first `k` bits followed by zeros; of
//!   the ids that share those `k` bits, the nearest to the key is the smallest. When the
//!   slot's subtree lies in the complete region (`k >= c`), the node is the nearest iff no
//!   listed peer that shares `k` bits with it has a smaller id. A slot holds `1 / share` to
//!   `2 / share` ids, half of them in one bucket of ours, so this settles claims for shares
//!   from about 5 % (the swarm's default); with 1 % that bucket is full and the DHT is asked.
//!
//! **When a table can be read** ([`table_ready`]): in the node the routing table is filled from
//! the member directory, so it is read once the directory has settled (unchanged for a while
//! and equal to random peers'), or after [`UNSETTLED_START`] if it never does. Starting
//! during the swarm's join would put the selection's traffic on top of the join's
//! connections, and at 1,000 nodes in one process the join alone keeps both cores busy for
//! about 40 s.
//!
//! The simulator reads a table the same way: the Kademlia table of a node that heard of every
//! live node, listed whole out to its first full bucket, plus a few far-bucket nodes
//! (`experiments/src/superpeers/world.rs`, `Dht::table`).

use crate::id::NodeId;

/// Contacts a Kademlia bucket holds (K = 20 in libp2p's kad, as in the paper).
pub const BUCKET_SIZE: usize = 20;

/// The fewest peers of a complete region that make a size sample; the region of a network of
/// N >= 100 holds 15 to 40 of them.
pub const MIN_VICINITY_PEERS: usize = 8;

/// How long after its start delay a node whose member directory never settles starts anyway.
pub const UNSETTLED_START: std::time::Duration = std::time::Duration::from_secs(60);

/// Whether a node may start its super-peer selection (module doc, "When a table can be read"):
/// its routing table holds a peer, and its directory settled or `waited` reached
/// [`UNSETTLED_START`].
pub fn table_ready(entries: usize, directory_settled: bool, waited: std::time::Duration) -> bool {
    entries > 0 && (directory_settled || waited >= UNSETTLED_START)
}

/// A node's view of its id neighbourhood, from the peers its routing table lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vicinity {
    /// Every live peer that shares at least this many leading bits with us is listed (0:
    /// every peer there is).
    pub complete_from: u32,
    /// Listed peers in the complete region.
    pub inside: u32,
    /// Listed peers in it that share more than `complete_from` bits with us (the region
    /// without its outermost bucket: the size sample's).
    pub inner: u32,
    /// The most leading bits we share with a listed peer of smaller id (`None`: no such peer).
    pub lower_shared: Option<u32>,
}

impl Vicinity {
    /// The view of `me` from `listed` (peers of its routing table, any order; `me` and
    /// repeats are ignored). `all_listed`: these are all the peers the table holds; false when
    /// the list is the nearest part of a longer one (module doc).
    pub fn of(me: &NodeId, listed: &[NodeId], all_listed: bool) -> Vicinity {
        let mut counts = [0u32; NodeId::BITS as usize + 1];
        let mut lower_shared: Option<u32> = None;
        let mut farthest = u32::MAX;
        // Sorted, so that a repeat is next to its first: one pass, not a scan per peer (a
        // simulated million nodes read their tables a few times each).
        let mut ids: Vec<&NodeId> = listed.iter().filter(|id| *id != me).collect();
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            let c = me.common_prefix_len(id);
            counts[c as usize] += 1;
            farthest = farthest.min(c);
            if id < me {
                lower_shared = Some(lower_shared.map_or(c, |l| l.max(c)));
            }
        }
        let mut complete_from = 0;
        for c in (0..NodeId::BITS).rev() {
            let full = counts[c as usize] as usize >= BUCKET_SIZE || (!all_listed && c == farthest);
            if full {
                complete_from = c + 1;
                break;
            }
        }
        let inside = counts[complete_from as usize..].iter().sum();
        let inner = counts[(complete_from as usize + 1).min(NodeId::BITS as usize)..].iter().sum();
        Vicinity { complete_from, inside, inner, lower_shared }
    }

    /// This view's estimate of N (module doc), `None` when the region holds too few peers.
    pub fn size_estimate(&self) -> Option<f64> {
        if self.complete_from == 0 || (self.inside as usize) < MIN_VICINITY_PEERS {
            return None;
        }
        Some(f64::from(self.inner) * 2f64.powi((self.complete_from + 1).min(1023) as i32) + 1.0)
    }

    /// Whether we are the nearest of our `k`-bit slot's ids to its key (module doc); `None`
    /// when the slot's subtree is not all in the complete region (the node asks the DHT).
    pub fn nearest_in_slot(&self, k: u32) -> Option<bool> {
        (self.complete_from > 0 && k >= self.complete_from).then(|| self.lower_shared.is_none_or(|l| l < k))
    }

    /// Whether `id` lies outside our complete region (its own region is then disjoint from
    /// ours: a peer to push our sample to).
    pub fn is_outside(&self, me: &NodeId, id: &NodeId) -> bool {
        id != me && me.common_prefix_len(id) < self.complete_from
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn id_with_prefix(bits: &[bool], rest: u8) -> NodeId {
        let mut b = [rest; 32];
        for (i, &on) in bits.iter().enumerate() {
            let (byte, bit) = (i / 8, 7 - (i % 8));
            if on {
                b[byte] |= 1 << bit;
            } else {
                b[byte] &= !(1 << bit);
            }
        }
        NodeId(b)
    }

    /// A Kademlia table of `me` over `ids`: each bucket keeps the first K peers it heard of.
    fn table(me: &NodeId, ids: &[NodeId]) -> Vec<NodeId> {
        let mut counts = [0usize; 257];
        let mut out = Vec::new();
        for id in ids {
            if id == me {
                continue;
            }
            let c = me.common_prefix_len(id) as usize;
            if counts[c] < BUCKET_SIZE {
                counts[c] += 1;
                out.push(*id);
            }
        }
        out
    }

    #[test]
    fn vicinity_samples_are_close_to_n() {
        for (seed, n) in [(11u64, 1_000usize), (12, 10_000)] {
            println!("seed {seed}, n {n}");
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let ids: Vec<NodeId> = (0..n).map(|_| NodeId(rng.gen())).collect();
            let (mut sum, mut sq, mut count) = (0.0, 0.0, 0usize);
            for me in ids.iter().take(300) {
                let v = Vicinity::of(me, &table(me, &ids), true);
                if let Some(e) = v.size_estimate() {
                    let r = e / n as f64;
                    sum += r;
                    sq += r * r;
                    count += 1;
                }
            }
            let mean = sum / count as f64;
            let sd = (sq / count as f64 - mean * mean).sqrt();
            println!("n {n}: {count} samples, mean {mean:.3} x n, sd {sd:.3}");
            assert!(count >= 290, "{count} of 300 nodes made a sample");
            // 300 samples of spread ~0.27 from overlapping regions: the mean moves by a few
            // percent from seed to seed.
            assert!((0.93..1.07).contains(&mean), "mean sample {mean} x n");
            assert!(sd < 0.4, "spread {sd}");
        }
    }

    #[test]
    fn a_table_with_room_everywhere_gives_no_sample() {
        // 19 peers: no bucket can be full.
        let me = NodeId::hash_of(b"me");
        let listed: Vec<NodeId> = (0u8..19).map(|i| NodeId::hash_of(&[i])).collect();
        let v = Vicinity::of(&me, &listed, true);
        assert_eq!(v.complete_from, 0);
        assert_eq!(v.size_estimate(), None, "a small network, or a table still filling");
        assert_eq!(Vicinity::of(&me, &[], true).size_estimate(), None, "an empty table says nothing");
    }

    #[test]
    fn the_region_ends_at_the_first_full_bucket() {
        let me = id_with_prefix(&[false, false, false], 0);
        // 20 peers share exactly 1 bit (a full bucket), 9 share 2 bits, 9 share 3 or more.
        let mut listed = Vec::new();
        for r in 0..20u8 {
            listed.push(id_with_prefix(&[false, true], r));
        }
        for r in 0..9u8 {
            listed.push(id_with_prefix(&[false, false, true], r));
        }
        for r in 1..10u8 {
            listed.push(id_with_prefix(&[false, false, false, true], r));
        }
        let v = Vicinity::of(&me, &listed, true);
        assert_eq!(v.complete_from, 2);
        assert_eq!((v.inside, v.inner), (18, 9));
        assert_eq!(v.size_estimate(), Some(9.0 * 8.0 + 1.0), "the 9 sharing 3 bits or more, in 1/8");
        // Only three sharing 3 bits or more: still a sample (the region holds 12).
        assert_eq!(Vicinity::of(&me, &listed[..32], true).size_estimate(), Some(3.0 * 8.0 + 1.0));
        // The same peers as the nearest part of a longer list: the farthest bucket listed
        // (1 shared bit) may miss peers, so the region is the same.
        assert_eq!(Vicinity::of(&me, &listed, false).complete_from, 2);
        // Without the full bucket but listed as a part: the 2-bit bucket is the farthest.
        assert_eq!(Vicinity::of(&me, &listed[20..], false).complete_from, 3);
        assert!(v.is_outside(&me, &listed[0]) && !v.is_outside(&me, &listed[25]));
        // A region of 7: too few for a sample.
        assert_eq!(Vicinity::of(&me, &listed[..20 + 7], true).size_estimate(), None);
    }

    #[test]
    fn a_table_is_read_once_the_directory_settled() {
        use std::time::Duration;
        assert!(!table_ready(0, true, Duration::ZERO), "no peer yet");
        assert!(!table_ready(5, false, Duration::from_secs(10)));
        assert!(table_ready(5, true, Duration::ZERO));
        assert!(table_ready(5, false, UNSETTLED_START));
    }

    #[test]
    fn nearest_in_slot_needs_the_slot_inside_the_region() {
        let me = id_with_prefix(&[true, false, true, true], 0x80);
        let bigger = id_with_prefix(&[true, false, true, true], 0xf0);
        let smaller_far = id_with_prefix(&[true, false, false], 0x10);
        let listed = [bigger, smaller_far];
        // A table with no full bucket may still be filling: it settles nothing.
        assert_eq!(Vicinity::of(&me, &listed, true).nearest_in_slot(3), None);
        // As a part of a longer list, the farthest bucket (2 shared bits) is not complete:
        // slots of 3 or more bits are.
        let part = Vicinity::of(&me, &listed, false);
        assert_eq!(part.complete_from, 3);
        assert_eq!(part.nearest_in_slot(2), None);
        assert_eq!(part.nearest_in_slot(4), Some(true));
        assert_eq!(part.nearest_in_slot(3), Some(true), "the smaller peer is in another 3-bit slot");
        // A smaller peer in our 3-bit slot, listed as part of a longer list whose farthest
        // bucket shares 1 bit: it is nearer to the slot's key.
        let smaller_near = id_with_prefix(&[true, false, true, false], 0x10);
        let far = id_with_prefix(&[true, true], 0x10);
        let v = Vicinity::of(&me, &[bigger, smaller_near, far], false);
        assert_eq!(v.complete_from, 2);
        assert_eq!(v.nearest_in_slot(3), Some(false));
        assert_eq!(v.nearest_in_slot(4), Some(true));
    }
}
