//! The member directory and its anti-entropy sync (frame version 4: versions before records).
//!
//! The election algorithms assume a-priori knowledge of the group (seed 001: "a process knows
//! all process numbers"). In a real swarm a node learns it: every node starts knowing itself;
//! the directories then converge by *push-pull anti-entropy with a compact digest* (Demers et
//! al., "Epidemic algorithms for replicated database maintenance", 1987, with a one-level
//! bucketed summary as in Dynamo-style Merkle comparisons, and Scuttlebutt's exchange of
//! versions before values: van Renesse et al., "Efficient reconciliation and flow control for
//! anti-entropy protocols", 2008):
//!
//! - Every entry has a 64-bit hash of `(peer, priority, incarnation)`; members fall into
//!   [`BUCKETS`] buckets by the top bits of their `NodeId`; a bucket's hash is the XOR of its
//!   entries' hashes (kept up to date on every change). The *digest* is the member count plus
//!   the bucket hashes.
//! - Once per sync period a node sends its digest to one random connected peer
//!   ([`SyncBody::Digest`]). Equal: the receiver says so ([`Handled::equal`]). Different: it
//!   answers with a [`SyncBody::Summary`]. For a differing bucket of at most six members whose
//!   digest hash is the XOR of a subset of its own entries, the sender holds exactly that
//!   subset: the summary carries the records it lacks. For every other differing bucket it
//!   carries the *version* (node id, incarnation) of each member it holds there. The first
//!   node admits the records, then sends one [`SyncBody::Push`] with its records of the
//!   versioned buckets that the summary lacks or holds older, and asks for the members it
//!   lacks or holds older; the answer is a `Push` of the records asked for. Only records that
//!   are news travel: a delta of whole buckets carried the whole directory each time while
//!   1,000 nodes joined (nearly every bucket differed), and decoding, checking and
//!   re-encoding records already known took a third of the swarm's CPU. A version is 40
//!   bytes, a record about 150. A joining node, whose buckets are mostly empty or subsets of
//!   its peer's, gets its news in the first answer, as with a delta; versions cost two more
//!   messages only where both sides hold something the other lacks.
//! - **One exchange of its own at a time**: a node sends no digest while its last one is
//!   unanswered (up to [`EXCHANGE_WAIT_US`]). Two open at once are answered against the same
//!   stale digest, and both answers carry the same records.
//! - **Rumours** (Demers et al.'s rumor mongering, infect-and-die): records that changed here
//!   are pushed once to a few peers ([`Directory::hot_frame`]); the digest repairs what they miss.
//! - **Settled** ([`Directory::settled`]): the group has not changed for a while and the last
//!   [`SETTLED_STREAK`] digest comparisons were equal: the node's local evidence that the
//!   directory has converged swarm-wide.
//!
//! Every entry is a [`SignedRecord`] of its subject (`record`), admitted under `admission`'s
//! rules; the sender of every frame is the authenticated peer that sent it, whose admission
//! budget pays for the new members it brings. A digest or a version is only a claim of what
//! its sender holds: it decides what is sent or asked for, never what is admitted. A refresh
//! (same priority and addresses, a newer incarnation and expiry) travels like any change but
//! does not count as a change of the group, so it does not unsettle elections. **Dead members
//! leave**: a record whose expiry passed is removed ([`Directory::expire`]) and leaves a
//! tombstone that refuses that incarnation or older until the tombstone expires; a live member
//! re-signs its record when half of its lifetime is over. The directory is capped at `Bounds::max_members`.
//!
//! Choices where nothing is prescribed: 1,024 buckets (with 64 a delta was nearly the whole
//! directory while 1,000 nodes joined); a summary carries at most [`MAX_ENTRIES_PER_FRAME`]
//! records and versions, whole buckets only, and a push at most as many records and asks;
//! versions name members by their whole node id (a shorter prefix lets two ids an attacker
//! ground to share it keep two digests different for good, and no directory would settle);
//! buckets of at most six members are matched against the digest by subset; the entry hash is
//! the top 64 bits of SHA-256 (stable across builds). Time is passed in as wall-clock microseconds
//! (records expire in wall-clock time, the same for every node up to clock skew).

use super::admission::{AdmissionBudget, Bounds, Refusal, RefusalCounts};
use super::memo::VerifiedMemo;
use super::record::{node_id_of, Record, SignedRecord, MAX_RECORD_WIRE_BYTES};
use crate::id::{NodeId, Rank};
use crate::membership::Membership;
use libp2p_identity::PeerId;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Members-sync wire version (4: versions before records).
pub const MEMBERS_VERSION: u16 = 4;
/// Digest buckets.
pub const BUCKETS: usize = 1024;
/// Records, versions or asks per sync frame (4,096 records of ~150 bytes are ~600 KiB).
pub const MAX_ENTRIES_PER_FRAME: usize = 4096;
/// The largest `Push`: [`MAX_ENTRIES_PER_FRAME`] records at their largest and as many asks.
const MAX_PUSH_BYTES: usize = 16 + MAX_ENTRIES_PER_FRAME * (MAX_RECORD_WIRE_BYTES + 32);
/// The largest `Summary`: every bucket wanted (a bucket below 16,384 is a varint of at most 2
/// bytes) and [`MAX_ENTRIES_PER_FRAME`] records and versions, counted as records at their
/// largest (a version is at most 42 bytes).
const MAX_SUMMARY_BYTES: usize = 16 + BUCKETS * 2 + MAX_ENTRIES_PER_FRAME * MAX_RECORD_WIRE_BYTES;
/// Largest members frame: the larger of the largest `Push` and the largest `Summary`, plus the
/// frame's own varints. Every node reads exactly this much, so no frame an honest node builds
/// is refused for its size, and a longer one is malformed whoever sends it.
pub const MAX_MEMBERS_FRAME_BYTES: usize =
    if MAX_PUSH_BYTES > MAX_SUMMARY_BYTES { MAX_PUSH_BYTES } else { MAX_SUMMARY_BYTES };
/// How long a node waits for the answer to its digest before it sends another (module doc:
/// one exchange of its own at a time).
pub const EXCHANGE_WAIT_US: u64 = 2_000_000;
/// Equal digest comparisons in a row that count as "settled".
pub const SETTLED_STREAK: u32 = 3;
/// A frame whose records refused for pace exceed both this and the directory's size floods.
pub const FLOOD_MIN: usize = 64;
/// A directory judges floods only once its group has not changed for this long. While a large
/// swarm forms, a node can settle in a partial view (its neighbours as new as itself, equal to
/// it, the rest not heard of yet) and then get an honest frame of hundreds of newcomers from
/// one sender before a second vouches for them: in a 1,000-node swarm such a node called it a
/// flood and banned its sender, and 54 elections followed. Pacing holds every frame meanwhile;
/// only the ban waits.
pub const FLOOD_QUIET_US: u64 = 30_000_000;
/// Tombstones kept at most (the oldest are dropped first).
pub const MAX_TOMBSTONES: usize = 100_000;

/// What a sync frame says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SyncBody {
    /// The sender's member count and bucket hashes.
    Digest { count: u64, buckets: Vec<u64> },
    /// The answer to a differing `Digest`: the records its sender surely lacks (`entries`),
    /// and the buckets whose contents the receiver cannot tell from the digest (`want`) with
    /// the sender's versions of its members in them.
    Summary { want: Vec<u16>, versions: Vec<Version>, entries: Vec<SignedRecord> },
    /// Records the receiver lacks or holds older, and the members whose records the sender
    /// asks for (the answer to a `Summary`; the answer to the asks, with none; or rumours).
    Push { entries: Vec<SignedRecord>, ask: Vec<NodeId> },
}

/// Which record of a member a node holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    pub node: NodeId,
    pub incarnation: u64,
}

/// A sync frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncFrame {
    pub version: u16,
    pub body: SyncBody,
}

/// Why a sync frame was refused as a whole.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SyncError {
    #[error("malformed members frame: {0}")]
    Malformed(String),
    #[error("unsupported members version {0}")]
    Version(u16),
    #[error("members frame has {0} entries (limit {MAX_ENTRIES_PER_FRAME})")]
    TooMany(usize),
    #[error("members summary names a member outside the buckets it sends")]
    Unwanted,
    #[error("members digest has {0} buckets (expected {BUCKETS})")]
    Buckets(usize),
    #[error("members summary names bucket {0} (there are {BUCKETS})")]
    BadBucket(u16),
}

/// What handling one frame produced.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Handled {
    /// Records that were new or newer.
    pub changed: usize,
    /// Records refused, by reason.
    pub refused: RefusalCounts,
    /// The sender's frame overran its admission budget by more than a whole bucket.
    pub flood: bool,
    /// A digest that equalled ours.
    pub equal: bool,
    /// A frame to send back to the sender as a new request.
    pub reply: Option<Vec<u8>>,
}

/// Per-node sync counters (`peerage swarm` reports them; the status JSON carries them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SyncStats {
    pub digests_sent: u64,
    /// Digests not sent because this node's last exchange was still open.
    #[serde(default)]
    pub digests_held: u64,
    pub digests_received: u64,
    /// Digest comparisons (sent or received) that found both directories equal.
    pub equal: u64,
    pub summaries_sent: u64,
    pub summaries_received: u64,
    /// Versions sent in summaries.
    pub versions_sent: u64,
    pub pushes_sent: u64,
    pub pushes_received: u64,
    /// Records sent in summaries and pushes.
    pub entries_sent: u64,
    /// Records received in summaries and pushes.
    pub entries_received: u64,
    /// Records asked for.
    pub asked: u64,
    /// Received records that were new or newer here.
    pub entries_new: u64,
    /// Sync requests that failed (timeout, closed connection, dial failure).
    pub failures: u64,
    /// Of those, by kind.
    #[serde(default)]
    pub failures_by: SyncFailures,
    /// Frames refused as malformed.
    pub malformed: u64,
    /// Rumour pushes built and the records in them.
    pub rumours_sent: u64,
    pub rumour_entries_sent: u64,
    /// Members that left (their records expired).
    pub expired: u64,
    /// Records refused, by reason.
    pub refused: RefusalCounts,
}

/// Why a sync request failed, as the transport tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncFailure {
    /// No response within the request timeout.
    Timeout,
    /// The connection closed while the request was out.
    Closed,
    /// The peer could not be dialled.
    Dial,
    /// Refused before it was sent: the connection already carried as many sync streams as
    /// one connection may (the sender's own cap).
    StreamCap,
    /// Anything else (the peer does not speak the protocol, an I/O error).
    Other,
}

/// Failed sync requests counted by [`SyncFailure`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SyncFailures {
    pub timeout: u64,
    pub closed: u64,
    pub dial: u64,
    pub stream_cap: u64,
    pub other: u64,
}

impl SyncFailures {
    pub fn add(&mut self, kind: SyncFailure) {
        match kind {
            SyncFailure::Timeout => self.timeout += 1,
            SyncFailure::Closed => self.closed += 1,
            SyncFailure::Dial => self.dial += 1,
            SyncFailure::StreamCap => self.stream_cap += 1,
            SyncFailure::Other => self.other += 1,
        }
    }

    pub fn merge(&mut self, o: &SyncFailures) {
        self.timeout += o.timeout;
        self.closed += o.closed;
        self.dial += o.dial;
        self.stream_cap += o.stream_cap;
        self.other += o.other;
    }
}

/// A known member: its verified record. Shared: the directories of one process that share a
/// memo hold one copy of each record between them (`memo`).
pub type Member = Arc<Record>;

/// A member held, with its entry hash (what its bucket's hash sums; kept so that a digest can be
/// matched against a bucket without hashing every record again).
#[derive(Debug)]
struct Held {
    rec: Member,
    hash: u64,
}

/// A departed member: records of it up to `incarnation` are refused until `until_us`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tombstone {
    incarnation: u64,
    until_us: u64,
}

/// The directory.
#[derive(Debug)]
pub struct Directory {
    me: PeerId,
    bounds: Bounds,
    /// Keyed by node id (32 bytes; a peer id is 80): a lookup by peer id hashes it once.
    members: HashMap<NodeId, Held>,
    me_node: NodeId,
    tombstones: HashMap<PeerId, Tombstone>,
    admission: AdmissionBudget,
    buckets: [u64; BUCKETS],
    version: u64,
    changed_at_us: u64,
    equal_streak: u32,
    exchanged: bool,
    /// The directory has been settled once: from then on new members are paced per sender.
    strict: bool,
    stats: SyncStats,
    /// Track changed records for rumours ([`Self::set_rumours`]).
    rumours: bool,
    /// When this node's last digest went out, while its exchange is open.
    exchange_since_us: Option<u64>,
    hot: Vec<NodeId>,
    hot_set: HashSet<NodeId>,
    /// Records already checked in this process (`memo`), if shared.
    memo: Option<Arc<VerifiedMemo>>,
    /// No member other than this node expires before this, and no tombstone ends before
    /// `tombstones_due_us`: [`Directory::expire`] scans only when one of them is due, so a
    /// housekeeping tick costs O(1) instead of O(members). Both may be early (a refreshed
    /// record, a revived tombstone), never late.
    expiry_due_us: u64,
    tombstones_due_us: u64,
}

/// The digest bucket of a member.
pub fn bucket_of(node: &NodeId) -> usize {
    (node.high_u64() >> (64 - BUCKETS.trailing_zeros())) as usize
}

/// The 64-bit hash of one entry (what the digest sums).
pub fn entry_hash(peer: &PeerId, priority: u64, incarnation: u64) -> u64 {
    let mut buf = peer.to_bytes();
    buf.extend_from_slice(&priority.to_le_bytes());
    buf.extend_from_slice(&incarnation.to_le_bytes());
    NodeId::hash_of(&buf).high_u64()
}

fn encode(body: SyncBody) -> Option<Vec<u8>> {
    postcard::to_stdvec(&SyncFrame { version: MEMBERS_VERSION, body }).ok()
}

/// Largest bucket whose subsets a digest is matched against (64 subsets of at most six
/// hashes; buckets hold about one member each at N = 1,000 and more than six only where
/// N is several thousands, and those go by versions).
const SUBSET_MAX: usize = 6;

/// The subset of `held` (as a bit mask) whose entry hashes XOR to `theirs`, if `held` is small
/// enough to search. The empty subset matches a hash of 0: the other node holds nothing there.
fn subset_of(held: &[(usize, &Held)], theirs: u64) -> Option<u32> {
    if held.len() > SUBSET_MAX {
        return None;
    }
    (0u32..1 << held.len()).find(|mask| {
        held.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).fold(0u64, |x, (_, (_, h))| x ^ h.hash) == theirs
    })
}

/// Refuse what a record claims beyond the bounds (no signature check).
pub fn check_claims(
    b: &Bounds,
    node: &NodeId,
    priority: u64,
    incarnation: u64,
    expires_us: u64,
    now_us: u64,
) -> Result<(), Refusal> {
    if priority > b.max_priority {
        return Err(Refusal::Priority);
    }
    if expires_us <= now_us {
        return Err(Refusal::Expired);
    }
    if incarnation > now_us.saturating_add(b.max_skew_us) {
        return Err(Refusal::Future);
    }
    if expires_us > incarnation.saturating_add(b.max_ttl_us) {
        return Err(Refusal::LongLived);
    }
    if node.puzzle_bits() < b.id_difficulty {
        return Err(Refusal::Puzzle);
    }
    Ok(())
}

impl Directory {
    /// A directory that knows only this node, from its own verified record.
    pub fn new(me: Record, bounds: Bounds, now_us: u64) -> Directory {
        let mut d = Directory {
            me: me.peer,
            bounds,
            members: HashMap::new(),
            me_node: me.node,
            tombstones: HashMap::new(),
            admission: AdmissionBudget::default(),
            buckets: [0; BUCKETS],
            version: 0,
            changed_at_us: now_us,
            equal_streak: 0,
            exchanged: false,
            strict: false,
            stats: SyncStats::default(),
            rumours: true,
            exchange_since_us: None,
            hot: Vec::new(),
            hot_set: HashSet::new(),
            memo: None,
            expiry_due_us: u64::MAX,
            tombstones_due_us: u64::MAX,
        };
        d.upsert(Arc::new(me), now_us);
        d
    }

    pub fn me(&self) -> PeerId {
        self.me
    }

    /// Open records through `memo`, shared with the other directories of this process.
    pub fn share_memo(&mut self, memo: Arc<VerifiedMemo>) {
        self.memo = Some(memo);
    }

    pub fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    /// Replace this node's own record (signed by the caller, with a newer incarnation).
    /// Returns false if it is not newer or not this node's.
    pub fn set_own(&mut self, rec: Record, now_us: u64) -> bool {
        if rec.peer != self.me || self.own().is_some_and(|m| m.incarnation >= rec.incarnation) {
            return false;
        }
        self.upsert(Arc::new(rec), now_us)
    }

    /// This node's own entry.
    pub fn own(&self) -> Option<&Member> {
        self.member_of(&self.me_node)
    }

    /// Insert or replace a member with a verified record if its incarnation is newer.
    fn upsert(&mut self, rec: Member, now_us: u64) -> bool {
        let peer = rec.peer;
        let mut group_change = true;
        match self.members.get(&rec.node) {
            Some(h) if h.rec.incarnation >= rec.incarnation => return false,
            Some(Held { rec: m, hash }) => {
                self.buckets[bucket_of(&m.node)] ^= hash;
                group_change = m.priority != rec.priority || m.addrs != rec.addrs;
            }
            None => {}
        }
        // `open` refuses longer address lists; this node's own record is the only other way in.
        let rec = if rec.addrs.len() > super::record::MAX_ADDRS {
            let mut r = Record::clone(&rec);
            r.addrs.truncate(super::record::MAX_ADDRS);
            Arc::new(r)
        } else {
            rec
        };
        let hash = entry_hash(&peer, rec.priority, rec.incarnation);
        self.buckets[bucket_of(&rec.node)] ^= hash;
        if peer != self.me {
            self.expiry_due_us = self.expiry_due_us.min(rec.expires_us);
        }
        let node = rec.node;
        self.members.insert(node, Held { rec, hash });
        self.tombstones.remove(&peer);
        if self.rumours && self.hot_set.insert(node) {
            self.hot.push(node);
        }
        if group_change {
            self.version += 1;
            self.changed_at_us = now_us;
            self.equal_streak = 0;
        }
        true
    }

    fn remove(&mut self, peer: &PeerId, now_us: u64) {
        if let Some(Held { rec: m, hash }) = self.members.remove(&node_id_of(peer)) {
            self.buckets[bucket_of(&m.node)] ^= hash;
            if self.tombstones.len() >= MAX_TOMBSTONES {
                if let Some(p) = self.tombstones.iter().min_by_key(|(_, t)| t.until_us).map(|(p, _)| *p) {
                    self.tombstones.remove(&p);
                }
            }
            let until_us = now_us.saturating_add(self.bounds.tombstone_us);
            self.tombstones.insert(*peer, Tombstone { incarnation: m.incarnation, until_us });
            self.tombstones_due_us = self.tombstones_due_us.min(until_us);
            self.version += 1;
            self.changed_at_us = now_us;
            self.equal_streak = 0;
        }
    }

    /// Remove every member whose record expired (never this node) and drop tombstones past
    /// their time. Returns the members that left.
    pub fn expire(&mut self, now_us: u64) -> Vec<PeerId> {
        let mut gone = Vec::new();
        if now_us >= self.expiry_due_us {
            let mut due = u64::MAX;
            for m in self.members.values().map(|h| &h.rec) {
                if m.peer == self.me {
                    continue;
                }
                if m.expires_us <= now_us {
                    gone.push(m.peer);
                } else {
                    due = due.min(m.expires_us);
                }
            }
            self.expiry_due_us = due;
            for p in &gone {
                self.remove(p, now_us);
            }
            self.stats.expired += gone.len() as u64;
        }
        if now_us >= self.tombstones_due_us {
            let mut due = u64::MAX;
            self.tombstones.retain(|_, t| {
                let keep = t.until_us > now_us;
                if keep {
                    due = due.min(t.until_us);
                }
                keep
            });
            self.tombstones_due_us = due;
        }
        gone
    }

    /// Tombstones held.
    pub fn tombstones(&self) -> usize {
        self.tombstones.len()
    }

    /// A counter that changes whenever the group does (not on refreshes).
    pub fn version(&self) -> u64 {
        self.version
    }
    pub fn len(&self) -> usize {
        self.members.len()
    }
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
    pub fn get(&self, peer: &PeerId) -> Option<&Member> {
        self.member_of(&node_id_of(peer))
    }
    /// The member of node id `node` (no hashing: the table is keyed by node id).
    pub fn member_of(&self, node: &NodeId) -> Option<&Member> {
        self.members.get(node).map(|h| &h.rec)
    }
    pub fn peer_of(&self, node: &NodeId) -> Option<PeerId> {
        self.member_of(node).map(|m| m.peer)
    }
    /// The rank of a member.
    pub fn rank_of(&self, node: &NodeId) -> Option<Rank> {
        self.member_of(node).map(|m| Rank::new(m.priority, m.node))
    }
    pub fn iter(&self) -> impl Iterator<Item = (&PeerId, &Member)> {
        self.members.values().map(|h| (&h.rec.peer, &h.rec))
    }
    /// The bucket hashes (the digest without the count).
    pub fn bucket_hashes(&self) -> &[u64; BUCKETS] {
        &self.buckets
    }
    /// Has this node completed at least one exchange? A node that has not is still joining.
    pub fn has_exchanged(&self) -> bool {
        self.exchanged
    }
    /// Equal digest comparisons in a row since the last change or difference.
    pub fn equal_streak(&self) -> u32 {
        self.equal_streak
    }
    /// Unchanged for `quiet_us` and the last [`SETTLED_STREAK`] comparisons equal.
    pub fn settled(&mut self, now_us: u64, quiet_us: u64) -> bool {
        let settled = self.agrees_and_quiet(now_us, quiet_us);
        self.strict |= settled;
        settled
    }
    /// The last [`SETTLED_STREAK`] comparisons equal and the group unchanged for `quiet_us`.
    fn agrees_and_quiet(&self, now_us: u64, quiet_us: u64) -> bool {
        self.agrees_now() && now_us.saturating_sub(self.changed_at_us) >= quiet_us
    }
    /// The last [`SETTLED_STREAK`] digest comparisons were equal, with no change since.
    fn agrees_now(&self) -> bool {
        self.equal_streak >= SETTLED_STREAK
    }
    /// Has the directory been settled once (new members are paced per sender from then on)?
    pub fn is_strict(&self) -> bool {
        self.strict
    }
    /// When the group last changed (wall-clock microseconds).
    pub fn changed_at_us(&self) -> u64 {
        self.changed_at_us
    }

    /// The election group.
    pub fn membership(&self) -> Arc<Membership> {
        Arc::new(Membership::new(self.members.values().map(|h| Rank::new(h.rec.priority, h.rec.node))))
    }

    /// This node's digest frame at wall-clock `now_us`; counted as sent. `None` while the last
    /// digest's exchange is open: no answer (a summary, "equal" or a failure) yet and sent less
    /// than [`EXCHANGE_WAIT_US`] ago.
    pub fn digest_frame(&mut self, now_us: u64) -> Option<Vec<u8>> {
        if self.exchange_since_us.is_some_and(|t| now_us < t.saturating_add(EXCHANGE_WAIT_US)) {
            self.stats.digests_held += 1;
            return None;
        }
        self.exchange_since_us = Some(now_us);
        let f = encode(SyncBody::Digest { count: self.members.len() as u64, buckets: self.buckets.to_vec() });
        if f.is_some() {
            self.stats.digests_sent += 1;
        }
        f
    }

    /// The answer to our `Digest` said "equal".
    pub fn digest_acknowledged_equal(&mut self) {
        self.exchange_since_us = None;
        self.equal_streak = self.equal_streak.saturating_add(1);
        self.exchanged = true;
        self.stats.equal += 1;
    }

    /// A sync request of ours failed.
    pub fn note_failure(&mut self, kind: SyncFailure) {
        self.exchange_since_us = None;
        self.stats.failures += 1;
        self.stats.failures_by.add(kind);
    }

    pub fn stats(&self) -> SyncStats {
        self.stats
    }

    /// Records changed here since the last [`Self::hot_frame`].
    pub fn hot_len(&self) -> usize {
        self.hot.len()
    }

    /// Track changed records for rumours, or not (then [`Self::hot_frame`] has none, and a
    /// joining node's every admitted record costs no set insert).
    pub fn set_rumours(&mut self, on: bool) {
        self.rumours = on;
        if !on {
            self.hot = Vec::new();
            self.hot_set = HashSet::new();
        }
    }

    /// The rumour push: the records changed here since the last call (at most
    /// [`MAX_ENTRIES_PER_FRAME`]), forgotten once built. `None` when nothing changed.
    pub fn hot_frame(&mut self) -> Option<Vec<u8>> {
        if self.hot.is_empty() {
            return None;
        }
        let take = self.hot.len().min(MAX_ENTRIES_PER_FRAME);
        let batch: Vec<NodeId> = self.hot.drain(..take).collect();
        let entries: Vec<SignedRecord> = batch
            .iter()
            .filter_map(|p| {
                self.hot_set.remove(p);
                self.member_of(p).map(|m| m.signed.clone())
            })
            .collect();
        if self.hot.is_empty() {
            self.hot.shrink_to(64);
            self.hot_set.shrink_to(64);
        }
        self.stats.rumours_sent += 1;
        self.stats.rumour_entries_sent += entries.len() as u64;
        encode(SyncBody::Push { entries, ask: Vec::new() })
    }

    /// This node's members in the `wanted` buckets, ordered by bucket.
    fn members_in(&self, wanted: &[bool; BUCKETS]) -> Vec<(usize, &Held)> {
        let mut v: Vec<(usize, &Held)> =
            self.members.values().map(|h| (bucket_of(&h.rec.node), h)).filter(|(b, _)| wanted[*b]).collect();
        v.sort_unstable_by_key(|(b, _)| *b);
        v
    }

    /// Handle one frame from the authenticated peer `from`. Refused records inside a
    /// well-formed frame are counted by reason; a malformed frame is an error and changes
    /// nothing.
    pub fn handle(&mut self, from: PeerId, bytes: &[u8], now_us: u64) -> Result<Handled, SyncError> {
        let r = self.handle_frame(from, bytes, now_us);
        match &r {
            Err(_) => self.stats.malformed += 1,
            Ok(h) => self.stats.refused.merge(&h.refused),
        }
        r
    }

    fn handle_frame(&mut self, from: PeerId, bytes: &[u8], now_us: u64) -> Result<Handled, SyncError> {
        let (frame, rest) =
            postcard::take_from_bytes::<SyncFrame>(bytes).map_err(|e| SyncError::Malformed(e.to_string()))?;
        if frame.version != MEMBERS_VERSION {
            return Err(SyncError::Version(frame.version));
        }
        if !rest.is_empty() {
            return Err(SyncError::Malformed(format!("{} trailing bytes", rest.len())));
        }
        match frame.body {
            SyncBody::Digest { count, buckets } => self.on_digest(count, &buckets),
            SyncBody::Summary { want, versions, entries } => self.on_summary(from, &want, &versions, entries, now_us),
            SyncBody::Push { entries, ask } => self.on_push(from, entries, &ask, now_us),
        }
    }

    fn on_digest(&mut self, count: u64, theirs: &[u64]) -> Result<Handled, SyncError> {
        if theirs.len() != BUCKETS {
            return Err(SyncError::Buckets(theirs.len()));
        }
        let mut differ = [false; BUCKETS];
        for (i, d) in differ.iter_mut().enumerate() {
            *d = self.buckets[i] != theirs[i];
        }
        self.stats.digests_received += 1;
        if !differ.iter().any(|d| *d) && count == self.members.len() as u64 {
            self.equal_streak = self.equal_streak.saturating_add(1);
            self.exchanged = true;
            self.stats.equal += 1;
            return Ok(Handled { equal: true, ..Default::default() });
        }
        self.equal_streak = 0;
        let mine = self.members_in(&differ);
        // Per differing bucket, in order, while the frame has room: the records the digest's
        // sender surely lacks when its bucket hash is that of a subset of ours (it holds that
        // subset and nothing else there), else our versions of the bucket.
        let (mut room, mut want, mut entries, mut versions) =
            (MAX_ENTRIES_PER_FRAME, Vec::new(), Vec::new(), Vec::new());
        let mut holds = [false; BUCKETS];
        for (b, _) in &mine {
            holds[*b] = true;
        }
        // Differing buckets where we hold nothing come last: the sender holds what we lack
        // there, and we have nothing to send.
        let empty = (0..BUCKETS).filter(|b| differ[*b] && !holds[*b]).map(|b| (b, &[][..]));
        for (b, held) in mine.chunk_by(|x, y| x.0 == y.0).map(|c| (c[0].0, c)).chain(empty) {
            match subset_of(held, theirs[b]) {
                Some(has) => {
                    let lacks = held.iter().enumerate().filter(|(i, _)| has & (1 << i) == 0);
                    let n = lacks.clone().count();
                    if n > room {
                        break;
                    }
                    room -= n;
                    entries.extend(lacks.map(|(_, (_, h))| h.rec.signed.clone()));
                }
                None => {
                    if held.len() > room {
                        break;
                    }
                    room -= held.len();
                    want.push(b as u16);
                    versions
                        .extend(held.iter().map(|(_, h)| Version { node: h.rec.node, incarnation: h.rec.incarnation }));
                }
            }
        }
        self.stats.summaries_sent += 1;
        self.stats.versions_sent += versions.len() as u64;
        self.stats.entries_sent += entries.len() as u64;
        Ok(Handled { reply: encode(SyncBody::Summary { want, versions, entries }), ..Default::default() })
    }

    /// The answer to our digest: admit the records it carries, push what the sender lacks or
    /// holds older in the buckets it sent versions of, ask for what it holds newer.
    fn on_summary(
        &mut self,
        from: PeerId,
        want: &[u16],
        versions: &[Version],
        records: Vec<SignedRecord>,
        now_us: u64,
    ) -> Result<Handled, SyncError> {
        if versions.len() + records.len() > MAX_ENTRIES_PER_FRAME {
            return Err(SyncError::TooMany(versions.len() + records.len()));
        }
        let mut wanted = [false; BUCKETS];
        for &b in want {
            let slot = wanted.get_mut(b as usize).ok_or(SyncError::BadBucket(b))?;
            *slot = true;
        }
        if versions.iter().any(|v| !wanted[bucket_of(&v.node)]) {
            return Err(SyncError::Unwanted);
        }
        self.stats.summaries_received += 1;
        self.exchange_since_us = None;
        let mut h = self.merge(from, records, now_us);
        self.exchanged = true;
        let theirs: HashMap<NodeId, u64> = versions.iter().map(|v| (v.node, v.incarnation)).collect();
        let entries: Vec<SignedRecord> = self
            .members
            .values()
            .filter(|h| wanted[bucket_of(&h.rec.node)])
            .filter(|h| theirs.get(&h.rec.node).is_none_or(|inc| *inc < h.rec.incarnation))
            .map(|h| h.rec.signed.clone())
            .take(MAX_ENTRIES_PER_FRAME)
            .collect();
        let ask: Vec<NodeId> = theirs
            .iter()
            .filter(|(node, inc)| **node != self.me_node && self.member_of(node).is_none_or(|m| m.incarnation < **inc))
            .map(|(node, _)| *node)
            .collect();
        if !entries.is_empty() || !ask.is_empty() {
            self.stats.pushes_sent += 1;
            self.stats.entries_sent += entries.len() as u64;
            self.stats.asked += ask.len() as u64;
            h.reply = encode(SyncBody::Push { entries, ask });
        }
        Ok(h)
    }

    /// Records and asks: admit the records, answer the asks with the records held.
    fn on_push(
        &mut self,
        from: PeerId,
        entries: Vec<SignedRecord>,
        ask: &[NodeId],
        now_us: u64,
    ) -> Result<Handled, SyncError> {
        if entries.len() > MAX_ENTRIES_PER_FRAME || ask.len() > MAX_ENTRIES_PER_FRAME {
            return Err(SyncError::TooMany(entries.len().max(ask.len())));
        }
        self.stats.pushes_received += 1;
        let mut h = self.merge(from, entries, now_us);
        self.exchanged = true;
        if !ask.is_empty() {
            let mut seen = HashSet::with_capacity(ask.len());
            let answer: Vec<SignedRecord> = ask
                .iter()
                .filter(|n| seen.insert(**n))
                .filter_map(|n| self.member_of(n))
                .map(|m| m.signed.clone())
                .collect();
            if !answer.is_empty() {
                self.stats.pushes_sent += 1;
                self.stats.entries_sent += answer.len() as u64;
                h.reply = encode(SyncBody::Push { entries: answer, ask: Vec::new() });
            }
        }
        Ok(h)
    }

    /// Admit what can be admitted of `entries` from `from` (`admission` module doc). The
    /// first bad signature ends the frame: its sender lies, and checking the rest would only
    /// spend CPU on its behalf.
    fn merge(&mut self, from: PeerId, entries: Vec<SignedRecord>, now_us: u64) -> Handled {
        self.stats.entries_received += entries.len() as u64;
        let paced = self.strict;
        // Judged before this frame's own changes reset the streak and the quiet.
        let judges_floods = self.agrees_and_quiet(now_us, FLOOD_QUIET_US);
        let mut h = Handled::default();
        let mut rate = 0usize;
        for e in entries {
            match self.admit(from, &e, paced, now_us) {
                Ok(Some(rec)) => {
                    if self.upsert(rec, now_us) {
                        h.changed += 1;
                    }
                }
                Ok(None) => {}
                Err(r) => {
                    h.refused.add(r);
                    if r == Refusal::Rate {
                        rate += 1;
                    }
                    if r == Refusal::BadSignature {
                        break;
                    }
                }
            }
        }
        // More refused for pace in one frame than the directory holds (and at least
        // `FLOOD_MIN`), while this node's last digest comparisons were all equal and its group
        // has been quiet for `FLOOD_QUIET_US`: not a partition merging back, not a swarm still
        // growing, a flood. A directory that has changed since it last settled, or settled
        // only lately, judges no flood: the nodes of a 1,000-node swarm that settled among
        // the first arrivals got honest frames of hundreds of newcomers, and banned their
        // senders.
        h.flood = judges_floods && rate > FLOOD_MIN.max(self.members.len());
        self.stats.entries_new += h.changed as u64;
        h
    }

    /// One record: `Ok(Some)` to insert, `Ok(None)` when it is not news (ours, stale).
    fn admit(&mut self, from: PeerId, e: &SignedRecord, paced: bool, now_us: u64) -> Result<Option<Member>, Refusal> {
        let body = e.peek()?;
        let peer = e.subject()?;
        if peer == self.me {
            return Ok(None);
        }
        let node = node_id_of(&peer);
        check_claims(&self.bounds, &node, body.priority, body.incarnation, body.expires_us, now_us)?;
        let known = self.member_of(&node);
        if known.is_some_and(|m| m.incarnation >= body.incarnation) {
            return Ok(None);
        }
        if self.tombstones.get(&peer).is_some_and(|t| t.incarnation >= body.incarnation) {
            return Err(Refusal::Tombstoned);
        }
        if known.is_none() {
            if self.members.len() >= self.bounds.max_members {
                return Err(Refusal::Full);
            }
            if paced && !self.admission.take(&self.bounds, from, peer, self.members.len(), now_us) {
                return Err(Refusal::Rate);
            }
        }
        let rec = match &self.memo {
            Some(m) => m.open(e)?,
            None => Arc::new(e.open()?),
        };
        Ok(Some(rec))
    }
}

#[cfg(test)]
mod tests;
