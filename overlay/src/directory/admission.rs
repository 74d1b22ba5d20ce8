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
//! **Admission budget.** Once the directory has been settled once (the swarm has formed), a
//! member this node did not know is admitted (else refused as `Refusal::Rate`, not a lie; it
//! comes again with anti-entropy):
//! - only within the *growth budget*: a token bucket of `max(admit_burst, members / 4)` new
//!   members per `refill_us` for all senders together, so the directory grows by a quarter a
//!   period at most, however many identities an attacker connects with;
//! - and, within it, when the record is its sender's own (a node introduces itself), or a
//!   second sender has offered it within [`VOUCH_US`] (a record the swarm holds reaches a node
//!   from several peers), or else from the sender's own bucket of `admit_burst` a period.
//!
//! So one attacker that connects with one identity gets `admit_burst` phantoms a period into
//! each node it reaches, whatever the directory's size: the phantoms grow linearly with its
//! connections and time, where a sender's bucket that grew with the directory let one sender
//! grow it by a quarter a period, compounding. Honest bulk growth (partitions merging back)
//! is vouched for by the many peers that hold it and goes at the growth budget's pace. An
//! attacker with two identities at one node vouches for itself, and is held to the growth
//! budget: the id puzzle prices identities. Before the first settling (a forming swarm, a
//! joining node) only the size cap applies. A frame that brings more refused records than the
//! directory holds, to a directory settled and unchanged for `FLOOD_QUIET_US`, is a flood
//! (`Handled::flood`).

use libp2p_identity::PeerId;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};

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
    /// New members one sender alone may bring per `refill_us` (and the smallest growth
    /// budget).
    pub admit_burst: u32,
    /// The admission buckets refill once per this, microseconds.
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

/// Offers remembered for vouching: the subject and its first sender (the oldest is forgotten
/// beyond it).
pub const MAX_VOUCHES: usize = 8192;

/// How long a first offer waits for a second sender to vouch for it, microseconds.
pub const VOUCH_US: u64 = 60_000_000;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at_us: u64,
}

impl Bucket {
    /// Brought up to `now_us` for a bucket of `size` a `refill_us`.
    fn refill(&mut self, size: f64, refill_us: u64, now_us: u64) {
        let elapsed = now_us.saturating_sub(self.at_us) as f64;
        self.tokens = (self.tokens + size * elapsed / refill_us.max(1) as f64).min(size);
        self.at_us = now_us;
    }
}

/// The admission budget of a settled directory (module doc): the growth bucket, the senders'
/// buckets, and the first offers waiting for a second sender.
#[derive(Debug, Default, Clone)]
pub struct AdmissionBudget {
    growth: Option<Bucket>,
    buckets: HashMap<PeerId, Bucket>,
    /// Subject -> (first sender, when).
    offers: HashMap<PeerId, (PeerId, u64)>,
    /// Offer order, oldest first, for eviction (an entry whose time no longer matches the
    /// map's was renewed or removed).
    order: VecDeque<(PeerId, u64)>,
}

impl AdmissionBudget {
    /// Whether a new member `subject` offered by `sender` is admitted into a directory of
    /// `members`, spending the budget it takes.
    pub fn take(&mut self, b: &Bounds, sender: PeerId, subject: PeerId, members: usize, now_us: u64) -> bool {
        let growth_size = f64::from(b.admit_burst).max(members as f64 / 4.0);
        let growth = self.growth.get_or_insert(Bucket { tokens: growth_size, at_us: now_us });
        growth.refill(growth_size, b.refill_us, now_us);
        if growth.tokens < 1.0 {
            return false;
        }
        let vouched = self.offers.get(&subject).is_some_and(|(first, at)| *first != sender && now_us < at + VOUCH_US);
        let ok = sender == subject || vouched || self.take_own(b, sender, now_us);
        if ok {
            if let Some(g) = self.growth.as_mut() {
                g.tokens -= 1.0;
            }
            self.offers.remove(&subject);
        } else {
            self.offered(subject, sender, now_us);
        }
        ok
    }

    /// One admission from `sender`'s own bucket.
    fn take_own(&mut self, b: &Bounds, sender: PeerId, now_us: u64) -> bool {
        let size = f64::from(b.admit_burst);
        if self.buckets.len() >= MAX_BUDGETS && !self.buckets.contains_key(&sender) {
            // Forget the fullest bucket: it is the one that says least.
            if let Some(p) = self.buckets.iter().max_by(|x, y| x.1.tokens.total_cmp(&y.1.tokens)).map(|(p, _)| *p) {
                self.buckets.remove(&p);
            }
        }
        let bucket = self.buckets.entry(sender).or_insert(Bucket { tokens: size, at_us: now_us });
        bucket.refill(size, b.refill_us, now_us);
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Remembers `sender`'s refused offer of `subject` (the first sender stands until the
    /// offer is stale).
    fn offered(&mut self, subject: PeerId, sender: PeerId, now_us: u64) {
        if self.offers.get(&subject).is_some_and(|(_, at)| now_us < at + VOUCH_US) {
            return;
        }
        while self.offers.len() >= MAX_VOUCHES {
            let Some((p, at)) = self.order.pop_front() else { break };
            if self.offers.get(&p).is_some_and(|(_, t)| *t == at) {
                self.offers.remove(&p);
            }
        }
        self.offers.insert(subject, (sender, now_us));
        self.order.push_back((subject, now_us));
        if self.order.len() > 2 * MAX_VOUCHES {
            // Drop the order's entries the map no longer holds.
            let offers = &self.offers;
            self.order.retain(|(p, at)| offers.get(p).is_some_and(|(_, t)| t == at));
        }
    }

    /// Senders with a bucket.
    pub fn senders(&self) -> usize {
        self.buckets.len()
    }

    /// First offers waiting for a second sender.
    pub fn waiting(&self) -> usize {
        self.offers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peers(n: usize) -> Vec<PeerId> {
        (0..n).map(|_| PeerId::random()).collect()
    }

    #[test]
    fn a_senders_bucket_refills_with_time_and_does_not_grow_with_the_directory() {
        let b = Bounds { admit_burst: 4, refill_us: 1_000, ..Bounds::default() };
        let mut adm = AdmissionBudget::default();
        let p = PeerId::random();
        let subjects = peers(400);
        let mut s = subjects.iter();
        let mut take = |adm: &mut AdmissionBudget, members, now| adm.take(&b, p, *s.next().unwrap(), members, now);
        assert_eq!((0..10).filter(|_| take(&mut adm, 8, 0)).count(), 4);
        assert!(!take(&mut adm, 8, 100), "a tenth of a period brings less than one");
        assert!(take(&mut adm, 8, 300));
        assert_eq!((0..300).filter(|_| take(&mut adm, 80_000, 10_000)).count(), 4, "80,000 members: still 4 a period");
    }

    #[test]
    fn a_second_sender_vouches_and_the_growth_budget_holds_them_all() {
        let b = Bounds { admit_burst: 4, refill_us: 1_000, ..Bounds::default() };
        let mut adm = AdmissionBudget::default();
        let (x, y) = (PeerId::random(), PeerId::random());
        let subjects = peers(300);
        // x spends its own bucket on the first 4, then offers the rest in vain.
        assert_eq!(subjects.iter().filter(|s| adm.take(&b, x, **s, 800, 0)).count(), 4);
        assert_eq!(adm.waiting(), 296);
        // x offering them again vouches for nothing.
        assert_eq!(subjects[4..].iter().filter(|s| adm.take(&b, x, **s, 800, 0)).count(), 0);
        // y offers the same: vouched, up to the growth budget (800 / 4 = 200, 4 taken).
        assert_eq!(subjects[4..].iter().filter(|s| adm.take(&b, y, **s, 800, 0)).count(), 196);
        // A node introducing itself needs no vouch, only the growth budget (spent now).
        let z = PeerId::random();
        assert!(!adm.take(&b, z, z, 800, 0));
        assert!(adm.take(&b, z, z, 800, 100));
        // A vouch comes in time or not at all: x offers `late` past its bucket; y, its own
        // bucket spent too, offers it once the offer is stale.
        let (late, others) = (PeerId::random(), peers(8));
        assert_eq!(others[..4].iter().filter(|s| adm.take(&b, x, **s, 800, 1_000)).count(), 4);
        assert!(!adm.take(&b, x, late, 800, 1_000));
        let t = 1_000 + VOUCH_US;
        assert_eq!(others[4..].iter().filter(|s| adm.take(&b, y, **s, 800, t)).count(), 4);
        assert!(!adm.take(&b, y, late, 800, t), "a stale offer vouches for nothing");
        // Offered anew by y, x's offer within the time vouches.
        assert!(adm.take(&b, x, late, 800, t + 1));
    }

    #[test]
    fn the_offers_waiting_are_bounded() {
        let b = Bounds { admit_burst: 1, refill_us: 1_000_000, ..Bounds::default() };
        let mut adm = AdmissionBudget::default();
        let x = PeerId::random();
        for (i, s) in peers(MAX_VOUCHES + 100).into_iter().enumerate() {
            adm.take(&b, x, s, 1_000_000, i as u64);
        }
        assert_eq!(adm.waiting(), MAX_VOUCHES);
        assert!(adm.order.len() <= 2 * MAX_VOUCHES);
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
