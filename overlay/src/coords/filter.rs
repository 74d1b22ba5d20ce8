//! The latency filter: a moving median over the last few RTT samples of each peer.
//!
//! Ledlie et al. ("Network coordinates in the wild", NSDI 2007) found that raw RTT samples
//! have heavy-tailed outliers (queueing, scheduling) that throw Vivaldi coordinates around;
//! a per-peer moving-percentile filter over a short window removes most of them. Serf keeps
//! the last `LatencyFilterSize = 3` samples per node in an unbounded map and feeds Vivaldi
//! their median (for an even count, the upper median: `sorted[len / 2]`). We do the same with
//! two bounds of our own, so that a node's memory stays small when a simulator runs a million
//! of them or a real node pings thousands of peers over its lifetime:
//!
//! - at most `latency_filter_peers` peers are tracked; a new peer evicts the **least recently
//!   updated** one (it simply starts a fresh window, as a forgotten peer does in Serf);
//! - a peer is keyed by a 64-bit fold (XOR of the four 64-bit words) of its 256-bit
//!   [`NodeId`]. Ids are SHA-256 outputs, so two tracked peers collide with probability
//!   about `peers² / 2⁶⁵`; a collision only mixes two peers' windows, it cannot corrupt state;
//! - samples are stored as `f32` seconds (7 significant digits: sub-microsecond at 1 s).
//!
//! Memory: 16 bytes per tracked peer plus 4 bytes per sample, in two flat vectors.
//!
//! Sizing: `latency_filter_peers` should be at least the number of peers a node measures
//! regularly (its cluster members and routing neighbours plus the gossip partners of one
//! round). Below that, LRU degenerates the way it does under a scan larger than the cache:
//! each returning neighbour evicts the next one due, and no window ever fills, so the filter
//! silently turns into a pass-through. The default (32) covers the experiment's 16
//! neighbours + 2 random peers with room to spare.

use crate::id::NodeId;

/// One tracked peer: its key, when it was last updated, and its ring-buffer cursor.
#[derive(Clone, Copy, Debug)]
struct Slot {
    key: u64,
    last_used: u32,
    len: u8,
    head: u8,
}

/// Moving-median filter over the last `size` samples of up to `peers` peers.
#[derive(Clone, Debug)]
pub struct LatencyFilter {
    size: u8,
    peers: u16,
    tick: u32,
    slots: Vec<Slot>,
    samples: Vec<f32>,
}

/// Folds a 256-bit id into the 64-bit filter key.
fn key_of(id: &NodeId) -> u64 {
    id.0.chunks_exact(8).fold(0u64, |acc, w| {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        acc ^ u64::from_be_bytes(b)
    })
}

impl LatencyFilter {
    /// A filter keeping `size` samples (>= 1) for at most `peers` (>= 1) peers. A size of 1
    /// makes the filter a pass-through that stores nothing.
    pub fn new(size: u8, peers: u16) -> LatencyFilter {
        LatencyFilter { size: size.max(1), peers: peers.max(1), tick: 0, slots: Vec::new(), samples: Vec::new() }
    }

    /// Number of peers currently tracked.
    pub fn tracked(&self) -> usize {
        self.slots.len()
    }

    /// Adds a sample (seconds) for `peer` and returns the median of its window.
    pub fn push(&mut self, peer: &NodeId, rtt_secs: f64) -> f64 {
        if self.size <= 1 {
            return rtt_secs;
        }
        let key = key_of(peer);
        let size = self.size as usize;
        self.advance_tick();
        let idx = match self.slots.iter().position(|s| s.key == key) {
            Some(i) => i,
            None if self.slots.len() < self.peers as usize => {
                // Exact growth: a million clients must not each carry doubling slack.
                self.slots.reserve_exact(1);
                self.slots.push(Slot { key, last_used: 0, len: 0, head: 0 });
                self.samples.reserve_exact(size);
                self.samples.extend(std::iter::repeat_n(0.0, size));
                self.slots.len() - 1
            }
            None => {
                // Evict the least recently updated peer and reuse its slot.
                let (i, _) =
                    self.slots.iter().enumerate().min_by_key(|(_, s)| s.last_used).unwrap_or((0, &self.slots[0]));
                self.slots[i] = Slot { key, last_used: 0, len: 0, head: 0 };
                i
            }
        };
        let slot = &mut self.slots[idx];
        slot.last_used = self.tick;
        let window = &mut self.samples[idx * size..(idx + 1) * size];
        window[slot.head as usize] = rtt_secs as f32;
        slot.head = ((slot.head as usize + 1) % size) as u8;
        slot.len = (slot.len + 1).min(self.size);
        let n = slot.len as usize;
        // The filled part of the ring is the first `n` entries until it wraps, then all of it.
        let mut sorted = [0.0f32; super::config::MAX_LATENCY_FILTER_SIZE as usize];
        sorted[..n].copy_from_slice(&window[..n]);
        sorted[..n].sort_by(|a, b| a.total_cmp(b));
        sorted[n / 2] as f64
    }

    /// Drops the window of `peer` (for example when it leaves).
    pub fn forget(&mut self, peer: &NodeId) {
        let key = key_of(peer);
        if let Some(i) = self.slots.iter().position(|s| s.key == key) {
            let size = self.size as usize;
            let last = self.slots.len() - 1;
            self.slots.swap_remove(i);
            if i != last {
                self.samples.copy_within(last * size..(last + 1) * size, i * size);
            }
            self.samples.truncate(last * size);
        }
    }

    /// Bytes of heap memory held.
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>() + self.samples.capacity() * std::mem::size_of::<f32>()
    }

    fn advance_tick(&mut self) {
        if self.tick == u32::MAX {
            // Renumber by recency so the order survives the wrap (once per 4 billion samples).
            let mut order: Vec<usize> = (0..self.slots.len()).collect();
            order.sort_by_key(|&i| self.slots[i].last_used);
            for (rank, i) in order.into_iter().enumerate() {
                self.slots[i].last_used = rank as u32;
            }
            self.tick = self.slots.len() as u32;
        }
        self.tick += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u64) -> NodeId {
        NodeId::from_u64(n)
    }

    #[test]
    fn median_of_last_three() {
        let mut f = LatencyFilter::new(3, 4);
        assert_eq!(f.push(&id(1), 0.010), 0.010f32 as f64);
        // Two samples: upper median (Serf's sorted[len/2]).
        assert_eq!(f.push(&id(1), 0.030), 0.030f32 as f64);
        assert_eq!(f.push(&id(1), 0.500), 0.030f32 as f64, "outlier filtered");
        assert_eq!(f.push(&id(1), 0.020), 0.030f32 as f64); // window 0.030 0.500 0.020
        assert_eq!(f.push(&id(1), 0.020), 0.020f32 as f64); // window 0.500 0.020 0.020
                                                            // Other peers have their own windows.
        assert_eq!(f.push(&id(2), 0.100), 0.100f32 as f64);
        assert_eq!(f.tracked(), 2);
    }

    #[test]
    fn bounded_peers_evict_least_recent() {
        let mut f = LatencyFilter::new(3, 2);
        f.push(&id(1), 0.1);
        f.push(&id(2), 0.2);
        f.push(&id(1), 0.1); // peer 2 is now the least recent
        f.push(&id(3), 0.3); // evicts peer 2
        assert_eq!(f.tracked(), 2);
        // peer 1 kept its window (0.1, 0.1, then 0.9 -> median 0.1)
        assert_eq!(f.push(&id(1), 0.9), 0.1f32 as f64);
        // peer 2 starts afresh
        assert_eq!(f.push(&id(2), 0.05), 0.05f32 as f64);
        assert!(f.heap_bytes() <= 2 * 16 + 2 * 3 * 4 + 64);
    }

    #[test]
    fn recency_survives_the_tick_wrap() {
        let mut f = LatencyFilter::new(3, 2);
        f.push(&id(1), 0.1);
        f.push(&id(2), 0.2);
        f.tick = u32::MAX - 1;
        f.push(&id(1), 0.1); // tick MAX: peer 2 is the least recent
        f.push(&id(1), 0.1); // wraps: ticks renumbered by recency
        assert!(f.tick < 10, "renumbered: {}", f.tick);
        f.push(&id(3), 0.3); // must evict peer 2, not peer 1
        assert_eq!(f.push(&id(1), 0.9), 0.1f32 as f64, "peer 1 kept its window");
        assert_eq!(f.tracked(), 2);
    }

    #[test]
    fn forget_and_passthrough() {
        let mut f = LatencyFilter::new(3, 4);
        f.push(&id(1), 0.1);
        f.push(&id(2), 0.2);
        f.push(&id(2), 0.4);
        f.forget(&id(1));
        assert_eq!(f.tracked(), 1);
        // Peer 2's window moved into slot 0 intact: 0.2, 0.4, 0.3 -> 0.3
        assert_eq!(f.push(&id(2), 0.3), 0.3f32 as f64);
        f.forget(&id(99));
        let mut p = LatencyFilter::new(1, 4);
        assert_eq!(p.push(&id(1), 0.123), 0.123);
        assert_eq!(p.tracked(), 0);
    }
}
