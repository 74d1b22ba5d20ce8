//! Which member records a directory admits: bounds on what a record may claim, why one is
//! refused (each reason counted), and the admission budget of each sender.
//!
//! Order of the checks (cheap first, the signature last, so that a flood of junk costs a
//! decode, not an ed25519 verification per entry): size and shape, then the claims against
//! [`Bounds`] (priority ceiling, expiry, incarnation not ahead of the clock by more than the
//! skew, the id puzzle), then tombstones and staleness, then the budget, then the signature.
//!
//! **Incarnation bound.** An incarnation is the subject's wall clock in microseconds (or one
//! more than its previous one): a record whose incarnation is more than `max_skew_us` ahead of
//! the receiver's clock is refused. So nobody can jump to `u64::MAX` and freeze a member, and
//! a jump is bounded by real elapsed time plus the skew, as a hybrid logical clock bounds its
//! offset.
//!
//! **Admission budget.** Once the directory has been settled once (the swarm has formed),
//! each sender may introduce at most a bucket of members this node did not know per
//! `refill_us` (a token bucket of `max(admit_burst, members / 4)`): a sender can grow a
//! directory by a quarter a period, no faster. Before that (a forming swarm, a joining node)
//! only the size cap applies. Records beyond the budget are refused (`Refusal::Rate`, not a
//! lie) and come again with anti-entropy; a frame that brings more refused records than the
//! directory holds is a flood (`Handled::flood`).

use libp2p_identity::PeerId;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Why a record was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Refusal {
    /// Too large, or a body that does not decode.
    Malformed,
    /// The public key does not decode.
    BadKey,
    /// Missing or wrong signature.
    BadSignature,
    /// The record's expiry has passed.
    Expired,
    /// The incarnation is ahead of this node's clock by more than the skew.
    Future,
    /// The record would live longer than `max_ttl_us`.
    LongLived,
    /// The priority is above the scope's ceiling.
    Priority,
    /// The id does not solve the id puzzle (`NodeId::puzzle_bits`).
    Puzzle,
    /// The member left (its record expired) and this incarnation is not newer.
    Tombstoned,
    /// The directory is at its size cap.
    Full,
    /// The sender's admission budget is spent.
    Rate,
    /// A record about this node that it did not sign itself (or older than its own).
    NotMine,
}

impl Refusal {
    pub const ALL: [Refusal; 12] = [
        Refusal::Malformed,
        Refusal::BadKey,
        Refusal::BadSignature,
        Refusal::Expired,
        Refusal::Future,
        Refusal::LongLived,
        Refusal::Priority,
        Refusal::Puzzle,
        Refusal::Tombstoned,
        Refusal::Full,
        Refusal::Rate,
        Refusal::NotMine,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed",
            Refusal::BadKey => "bad-key",
            Refusal::BadSignature => "bad-signature",
            Refusal::Expired => "expired",
            Refusal::Future => "future-incarnation",
            Refusal::LongLived => "long-lived",
            Refusal::Priority => "priority-above-ceiling",
            Refusal::Puzzle => "id-puzzle",
            Refusal::Tombstoned => "tombstoned",
            Refusal::Full => "directory-full",
            Refusal::Rate => "admission-rate",
            Refusal::NotMine => "not-mine",
        }
    }

    /// A refusal that only a lying or broken sender causes (an honest relay never sends it:
    /// it admitted the record under the same rules). Expiry, tombstones, the cap and the
    /// budget can catch honest senders whose clocks or views differ a little.
    pub fn is_lie(self) -> bool {
        matches!(
            self,
            Refusal::Malformed
                | Refusal::BadKey
                | Refusal::BadSignature
                | Refusal::Future
                | Refusal::LongLived
                | Refusal::Priority
                | Refusal::Puzzle
                | Refusal::NotMine
        )
    }

    fn index(self) -> usize {
        Refusal::ALL.iter().position(|r| *r == self).unwrap_or(0)
    }
}

/// Refusals counted by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefusalCounts([u64; 12]);

impl RefusalCounts {
    pub fn add(&mut self, r: Refusal) {
        self.0[r.index()] += 1;
    }
    pub fn get(&self, r: Refusal) -> u64 {
        self.0[r.index()]
    }
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
    /// Refusals only a lying sender causes.
    pub fn lies(&self) -> u64 {
        Refusal::ALL.iter().filter(|r| r.is_lie()).map(|r| self.get(*r)).sum()
    }
    pub fn merge(&mut self, o: &RefusalCounts) {
        for (a, b) in self.0.iter_mut().zip(o.0.iter()) {
            *a += b;
        }
    }
    /// `(reason, count)` for every reason counted at least once.
    pub fn nonzero(&self) -> Vec<(&'static str, u64)> {
        Refusal::ALL.iter().filter(|r| self.get(**r) > 0).map(|r| (r.name(), self.get(*r))).collect()
    }
}

impl Serialize for RefusalCounts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        // The length is given: binary formats (the shards' control channel) need it.
        let counted = self.nonzero();
        let mut m = s.serialize_map(Some(counted.len()))?;
        for (name, n) in counted {
            m.serialize_entry(name, &n)?;
        }
        m.end()
    }
}

/// Read back from a report (`peerage report merge` joins shards' snapshots): names this
/// build does not count are skipped, so a newer node's report still merges.
impl<'de> Deserialize<'de> for RefusalCounts {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let named = std::collections::BTreeMap::<String, u64>::deserialize(d)?;
        let mut counts = RefusalCounts::default();
        for r in Refusal::ALL {
            if let Some(n) = named.get(r.name()) {
                counts.0[r.index()] = *n;
            }
        }
        Ok(counts)
    }
}

/// What a record may claim, and how fast a directory grows. Every node of a scope must use
/// the same values (a record one node admits and another refuses keeps their digests apart).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounds {
    /// The highest priority a member may claim.
    pub max_priority: u64,
    /// How far an incarnation may be ahead of this node's clock (clock skew), microseconds.
    pub max_skew_us: u64,
    /// The longest a record may live past its incarnation, microseconds.
    pub max_ttl_us: u64,
    /// The directory's size cap.
    pub max_members: usize,
    /// Leading zero bits the hash of a member's id must have (the id puzzle; 0: none).
    pub id_difficulty: u32,
    /// Smallest admission bucket per sender (new members per `refill_us`).
    pub admit_burst: u32,
    /// The admission bucket refills once per this, microseconds.
    pub refill_us: u64,
    /// How long a departed member's tombstone is kept, microseconds.
    pub tombstone_us: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            max_priority: u64::from(u32::MAX),
            max_skew_us: 60_000_000,
            max_ttl_us: 12 * 3_600_000_000,
            max_members: 100_000,
            id_difficulty: 0,
            admit_burst: 4,
            refill_us: 1_000_000,
            tombstone_us: 3_600_000_000,
        }
    }
}

/// Senders whose budgets are remembered (the least recently used is forgotten beyond it).
pub const MAX_BUDGETS: usize = 4096;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at_us: u64,
}

/// Admission budgets per sender: token buckets of new members.
#[derive(Debug, Default, Clone)]
pub struct Budgets {
    buckets: HashMap<PeerId, Bucket>,
}

impl Budgets {
    /// The bucket of `sender` brought up to `now_us`, for a directory of `members`.
    fn refill(&mut self, b: &Bounds, sender: PeerId, members: usize, now_us: u64) -> (&mut Bucket, f64) {
        let size = f64::from(b.admit_burst).max(members as f64 / 4.0);
        if self.buckets.len() >= MAX_BUDGETS && !self.buckets.contains_key(&sender) {
            // Forget the fullest bucket: it is the one that says least.
            if let Some(p) = self.buckets.iter().max_by(|x, y| x.1.tokens.total_cmp(&y.1.tokens)).map(|(p, _)| *p) {
                self.buckets.remove(&p);
            }
        }
        let bucket = self.buckets.entry(sender).or_insert(Bucket { tokens: size, at_us: now_us });
        let elapsed = now_us.saturating_sub(bucket.at_us) as f64;
        bucket.tokens = (bucket.tokens + size * elapsed / b.refill_us.max(1) as f64).min(size);
        bucket.at_us = now_us;
        (bucket, size)
    }

    /// Take one admission from `sender`'s bucket; false when it is empty.
    pub fn take(&mut self, b: &Bounds, sender: PeerId, members: usize, now_us: u64) -> bool {
        let (bucket, _) = self.refill(b, sender, members, now_us);
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// The size of `sender`'s bucket now.
    pub fn size(&mut self, b: &Bounds, sender: PeerId, members: usize, now_us: u64) -> f64 {
        self.refill(b, sender, members, now_us).1
    }

    pub fn len(&self) -> usize {
        self.buckets.len()
    }
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_refills_with_time_and_grows_with_the_directory() {
        let b = Bounds { admit_burst: 4, refill_us: 1_000, ..Bounds::default() };
        let mut budgets = Budgets::default();
        let p = PeerId::random();
        assert_eq!((0..10).filter(|_| budgets.take(&b, p, 8, 0)).count(), 4);
        assert!(!budgets.take(&b, p, 8, 100), "a tenth of a period brings less than one");
        assert!(budgets.take(&b, p, 8, 300));
        assert_eq!((0..300).filter(|_| budgets.take(&b, p, 800, 10_000)).count(), 200, "800 members: 200 a period");
        assert_eq!(budgets.size(&b, PeerId::random(), 80, 0), 20.0);
    }

    #[test]
    fn counts_read_back_what_they_wrote_and_skip_unknown_reasons() {
        let mut c = RefusalCounts::default();
        c.add(Refusal::Puzzle);
        c.add(Refusal::Rate);
        c.add(Refusal::Rate);
        let text = serde_json::to_string(&c).unwrap();
        assert_eq!(text, r#"{"id-puzzle":1,"admission-rate":2}"#);
        let back: RefusalCounts = serde_json::from_str(&text).unwrap();
        assert_eq!(back, c);
        let newer: RefusalCounts = serde_json::from_str(r#"{"rate":9,"id-puzzle":3}"#).unwrap();
        assert_eq!((newer.get(Refusal::Puzzle), newer.total()), (3, 3));
    }

    #[test]
    fn counts_by_reason() {
        let mut c = RefusalCounts::default();
        c.add(Refusal::BadSignature);
        c.add(Refusal::BadSignature);
        c.add(Refusal::Rate);
        assert_eq!(c.total(), 3);
        assert_eq!(c.lies(), 2);
        assert_eq!(c.nonzero(), vec![("bad-signature", 2), ("admission-rate", 1)]);
    }
}
