//! Node identity and priority.
//!
//! A [`NodeId`] is 256 bits: the SHA-256 of a libp2p `PeerId`'s bytes (or of any other stable
//! identity bytes), so ids are uniform over the key space, which the reserved-prefix super-peer
//! method (seed 000, "Elections in large-scale systems") relies on. Ids compare as big-endian
//! unsigned integers, giving the total order that the seeds assume ("each process has a unique
//! identifier that can be sort-ordered").
//!
//! A [`Rank`] is what elections compare: a configurable `priority` first, then the id as the
//! tie-breaker. With the default priority (0 for everyone) the id alone decides, as in the
//! seeds; seed 002 allows a configured priority instead ("a higher priority is given to a
//! process with lowest CPU usage"), and Vasudevan's echo election uses the priority as the
//! node's *capacity* (seed 000: "the best leader can be elected").

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;
use std::str::FromStr;

/// A 256-bit node identifier, ordered as a big-endian unsigned integer.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct NodeId(pub [u8; 32]);

impl NodeId {
    /// The id as four big-endian 64-bit words, most significant first.
    #[inline]
    fn words(&self) -> [u64; 4] {
        let w = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&self.0[i * 8..i * 8 + 8]);
            u64::from_be_bytes(b)
        };
        [w(0), w(1), w(2), w(3)]
    }
}

/// Big-endian unsigned order, the same as comparing the bytes lexicographically, done on
/// four 64-bit words: the derived byte-array order calls `memcmp`, and elections compare
/// ids on every message (measured in the simulator's profile).
impl Ord for NodeId {
    #[inline]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.words().cmp(&other.words())
    }
}

impl PartialOrd for NodeId {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl NodeId {
    /// The number of bits in an id.
    pub const BITS: u32 = 256;
    /// The smallest id (all zero bits).
    pub const MIN: NodeId = NodeId([0; 32]);
    /// The largest id (all one bits).
    pub const MAX: NodeId = NodeId([0xff; 32]);

    /// Hash arbitrary identity bytes (for example `PeerId::to_bytes()`) into a node id.
    pub fn hash_of(bytes: &[u8]) -> NodeId {
        let digest = Sha256::digest(bytes);
        let mut out = [0u8; 32];
        out.copy_from_slice(&digest);
        NodeId(out)
    }

    /// An id whose top 64 bits are `n` and the rest zero. Handy for tests and for the
    /// simulator, where the order of ids must be easy to read.
    pub fn from_u64(n: u64) -> NodeId {
        let mut out = [0u8; 32];
        out[..8].copy_from_slice(&n.to_be_bytes());
        NodeId(out)
    }

    /// The top 64 bits as an integer (the first 8 bytes, big-endian).
    pub fn high_u64(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[..8]);
        u64::from_be_bytes(b)
    }

    /// Bit `i`, counting from the most significant bit (bit 0) of the id.
    pub fn bit(&self, i: u32) -> bool {
        if i >= Self::BITS {
            return false;
        }
        let byte = self.0[(i / 8) as usize];
        (byte >> (7 - (i % 8))) & 1 == 1
    }

    /// The first `k` bits (k <= 64) as an integer; `k = 0` gives 0.
    pub fn prefix(&self, k: u32) -> u64 {
        match k {
            0 => 0,
            k if k >= 64 => self.high_u64(),
            k => self.high_u64() >> (64 - k),
        }
    }

    /// Length of the common prefix of two ids, in bits (the XOR metric's bucket index).
    pub fn common_prefix_len(&self, other: &NodeId) -> u32 {
        for (i, (a, b)) in self.0.iter().zip(other.0.iter()).enumerate() {
            let x = a ^ b;
            if x != 0 {
                return i as u32 * 8 + x.leading_zeros();
            }
        }
        Self::BITS
    }

    /// The id puzzle's work: leading zero bits of SHA-256 of the id (S/Kademlia's static
    /// puzzle, Baumgart and Mies 2007: an id is valid at difficulty `c` when the hash of the id
    /// starts with `c` zero bits, so each valid id costs about `2^c` key generations and
    /// grinding ids for a chosen prefix costs that much per try; see `docs/DESIGN.md`,
    /// "Threat model").
    pub fn puzzle_bits(&self) -> u32 {
        let h = Sha256::digest(self.0);
        let mut n = 0;
        for b in h.iter() {
            if *b == 0 {
                n += 8;
            } else {
                return n + b.leading_zeros();
            }
        }
        n
    }

    /// A short human form: the first 8 hex digits.
    pub fn short(&self) -> String {
        hex::encode(&self.0[..4])
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeId({})", self.short())
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

/// Error parsing a [`NodeId`] from text.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseNodeIdError {
    #[error("a node id is 64 hex digits, got {0} characters")]
    Length(usize),
    #[error("a node id is hex: {0}")]
    Hex(String),
}

impl FromStr for NodeId {
    type Err = ParseNodeIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 64 {
            return Err(ParseNodeIdError::Length(s.len()));
        }
        let bytes = hex::decode(s).map_err(|e| ParseNodeIdError::Hex(e.to_string()))?;
        let mut out = [0u8; 32];
        out.copy_from_slice(&bytes);
        Ok(NodeId(out))
    }
}

/// What elections compare: `(priority, id)`, lexicographically. The highest rank wins.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
pub struct Rank {
    /// Configured priority (or capacity, for the echo election). Defaults to 0, so that the id
    /// alone decides.
    pub priority: u64,
    /// The node's id, the tie-breaker.
    pub id: NodeId,
}

impl Rank {
    pub fn new(priority: u64, id: NodeId) -> Rank {
        Rank { priority, id }
    }
}

impl fmt::Debug for Rank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Rank({}, {})", self.priority, self.id.short())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_big_endian() {
        assert!(NodeId::from_u64(1) < NodeId::from_u64(2));
        assert!(NodeId::from_u64(u64::MAX) < NodeId::MAX);
        let mut a = [0u8; 32];
        a[31] = 1;
        assert!(NodeId::MIN < NodeId(a));
        assert!(NodeId(a) < NodeId::from_u64(1));
    }

    #[test]
    fn order_matches_byte_order() {
        // Ids that differ in one byte, at every position, with values around the sign bit,
        // on top of a few backgrounds: the word order must equal the bytes' lexicographic order.
        let values = [0u8, 1, 0x7f, 0x80, 0xfe, 0xff];
        let mut ids = Vec::new();
        for bg in [0u8, 0x5a, 0xff] {
            for pos in 0..32 {
                for &v in &values {
                    let mut b = [bg; 32];
                    b[pos] = v;
                    ids.push(NodeId(b));
                }
            }
        }
        for a in &ids {
            for b in &ids {
                assert_eq!(a.cmp(b), a.0.cmp(&b.0), "{a} vs {b}");
                assert_eq!(a.partial_cmp(b), Some(a.0.cmp(&b.0)));
            }
        }
    }

    #[test]
    fn prefix_bits() {
        let id = NodeId::from_u64(0b1011 << 60);
        assert_eq!(id.prefix(0), 0);
        assert_eq!(id.prefix(1), 1);
        assert_eq!(id.prefix(2), 0b10);
        assert_eq!(id.prefix(4), 0b1011);
        assert!(id.bit(0) && !id.bit(1) && id.bit(2) && id.bit(3) && !id.bit(4));
        assert!(!id.bit(300));
    }

    #[test]
    fn rank_orders_priority_first() {
        let low_id_high_prio = Rank::new(5, NodeId::from_u64(1));
        let high_id_low_prio = Rank::new(0, NodeId::from_u64(100));
        assert!(low_id_high_prio > high_id_low_prio);
        assert!(Rank::new(0, NodeId::from_u64(2)) > Rank::new(0, NodeId::from_u64(1)));
    }

    #[test]
    fn parse_round_trip_and_errors() {
        let id = NodeId::hash_of(b"peer");
        let back: NodeId = id.to_string().parse().unwrap();
        assert_eq!(id, back);
        assert!(matches!("abc".parse::<NodeId>(), Err(ParseNodeIdError::Length(3))));
        let bad = "z".repeat(64);
        assert!(matches!(bad.parse::<NodeId>(), Err(ParseNodeIdError::Hex(_))));
    }

    #[test]
    fn puzzle_bits_count_leading_zeros_of_the_hash() {
        // Over many ids about half meet difficulty 1 and a quarter difficulty 2.
        let ids: Vec<NodeId> = (0..4096u32).map(|i| NodeId::hash_of(&i.to_be_bytes())).collect();
        let at = |c| ids.iter().filter(|id| id.puzzle_bits() >= c).count();
        assert!((1800..2300).contains(&at(1)), "{}", at(1));
        assert!((850..1200).contains(&at(2)), "{}", at(2));
        let h = Sha256::digest(ids[0].0);
        assert_eq!(ids[0].puzzle_bits(), if h[0] == 0 { 8 + h[1].leading_zeros() } else { h[0].leading_zeros() });
    }

    #[test]
    fn common_prefix() {
        assert_eq!(NodeId::MIN.common_prefix_len(&NodeId::MIN), 256);
        assert_eq!(NodeId::MIN.common_prefix_len(&NodeId::MAX), 0);
        assert_eq!(NodeId::from_u64(1).common_prefix_len(&NodeId::from_u64(0)), 63);
    }
}
