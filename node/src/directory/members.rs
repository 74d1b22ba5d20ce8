//! The member directory: who is in the election group, with what priority, at which
//! addresses, and its anti-entropy sync protocol (`/peerage/members/1.0.0`, frame version 2).
//!
//! The election algorithms assume a-priori knowledge of the group (seed 001: "a process knows
//! all process numbers"). In a real swarm a node learns it: every node starts knowing itself;
//! the directories then converge by *push-pull anti-entropy with a compact digest* (the
//! scheme of Demers et al., "Epidemic algorithms for replicated database maintenance", 1987,
//! with the bucketed summary used by Cassandra/Dynamo-style Merkle comparisons, one level
//! deep):
//!
//! - Every entry `(peer, priority, incarnation)` has a 64-bit hash; the members fall into
//!   [`BUCKETS`] buckets by the top bits of their `NodeId`; a bucket's hash is the XOR of its
//!   entries' hashes (kept up to date on every change, O(1)). The *digest* is the member count
//!   plus the bucket hashes: ~10 KiB whatever N is.
//! - Once per sync period a node sends its digest to **one random connected peer**
//!   ([`SyncBody::Digest`]). The receiver compares bucket by bucket. Equal: it answers
//!   [`ACK_EQUAL`] in the request's acknowledgement and nothing else moves. Different: it
//!   sends back a [`SyncBody::Delta`] with its own entries of the differing buckets and the
//!   list of those buckets (`want`); the first node merges them and pushes
//!   ([`SyncBody::Push`]) exactly its entries of those buckets that the delta did not contain
//!   at the same incarnation. One exchange makes both sides equal on those buckets.
//! - A joining node sends its digest to its first connection at once, so it pulls one
//!   snapshot of the directory (everything differs) and pushes its own entry in the same
//!   exchange; afterwards the new entry spreads epidemically, O(log N) periods.
//! - **Rumours** (session 3; Demers et al.'s "rumor mongering", in its infect-and-die form as
//!   in lpbcast/memberlist): every entry that changes here (learned from a peer, or this
//!   node's own) is *news*; once per sync period a node pushes all its news in one
//!   [`SyncBody::Push`] to `members_push_fanout` random connected peers (off by default; see
//!   `config.rs`: not faster in the CPU-starved 1,000-node swarm) and then
//!   forgets it ([`Directory::hot_frame`]). A receiver for whom an entry is new forwards it
//!   the same way, so an entry reaches most nodes in O(log N / log(fanout+1)) periods instead
//!   of the digest exchange's slower spread over a sparse connection graph; the nodes it
//!   misses (a fraction of about e^-fanout) are repaired by the digest exchange. Cost: each
//!   node forwards each entry once to `fanout` peers (fanout x N^2 entries in all while a
//!   swarm forms); nothing once it is quiet. Unit test `rumours_speed_up_convergence`: 300
//!   directories converge in ~4 rounds with fan-out 3 against ~9 with digests only.
//! - The period backs off: it doubles after every exchange that found the digests equal, up
//!   to [`SyncPacer`]'s maximum, and returns to the base period when the directory changes.
//!   A converged swarm therefore sends one digest per node per max period.
//! - **Settled** ([`Directory::settled`]): the local directory has not changed for a while
//!   *and* the last [`SETTLED_STREAK`] digest comparisons (sent or received) were equal. A
//!   comparison with a random peer is a sample of the whole swarm, so a streak of equal
//!   digests is the node's local evidence that the directory has converged swarm-wide; the
//!   node uses it to decide when an election may start (`node/src/runtime/node.rs`).
//!
//! Every node counts what its sync did ([`SyncStats`]: digests, deltas, pushes, entries
//! sent/received/new, failures, rumours); `peerage swarm` reports them per node
//! (`node/src/directory/report.rs`) to find where convergence lags.
//!
//! All three messages travel as requests (the codec's responses are one-byte
//! acknowledgements), so the protocol needs no large responses.
//!
//! Choices where nothing is prescribed: 1,024 buckets. While nodes join, two random nodes
//! differ by the few dozen members that have not spread yet; with 64 buckets (tried first)
//! those few dozen fall into almost every bucket and a delta was nearly the whole directory
//! (N entries per exchange, per node, per period: CPU-bound at N = 1,000); with 1,024
//! buckets a delta carries ~1 entry per differing member up to N ~ 1,000 (at N = 100,000 it
//! would be ~100 per bucket, and a second digest level would be the next step). A delta is capped at [`MAX_ENTRIES_PER_FRAME`] entries and
//! then covers only the first differing buckets that fit (the rest go in later rounds); the
//! entry hash is the top 64 bits of SHA-256 over peer id, priority and incarnation (stable
//! across builds and platforms); addresses are not hashed (they change only with a new
//! incarnation).
//!
//! A newer `incarnation` of the same peer (a restart, maybe with a new priority or address)
//! replaces the old entry. Members never leave the group: liveness is the elections'
//! business (timeouts, failed sends, `PeerDown`), as in the seeds. The `NodeId` of a member
//! is `NodeId::hash_of(peer_id.to_bytes())` and its rank `(priority, NodeId)`.

use libp2p::{Multiaddr, PeerId};
use overlay::{Membership, NodeId, Rank};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Members-sync wire version (2: digest/delta/push anti-entropy).
pub const MEMBERS_VERSION: u16 = 2;
/// Digest buckets.
pub const BUCKETS: usize = 1024;
/// Entries per sync frame (4,096 entries with one address each are ~300 KiB, under the
/// default 1 MiB members-frame limit).
pub const MAX_ENTRIES_PER_FRAME: usize = 4096;
/// Addresses kept per member.
pub const MAX_ADDRS: usize = 4;
/// Equal digest comparisons in a row that count as "settled".
pub const SETTLED_STREAK: u32 = 3;
/// Acknowledgement of a `Digest` request that found the digests equal (the other codes are in
/// `node/src/net/codec.rs`).
pub const ACK_EQUAL: u8 = 2;

/// One member as it travels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireEntry {
    pub peer: Vec<u8>,
    pub priority: u64,
    pub incarnation: u64,
    pub addrs: Vec<Vec<u8>>,
}

/// What a sync frame says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SyncBody {
    /// The sender's member count and bucket hashes.
    Digest { count: u64, buckets: Vec<u64> },
    /// The sender's entries of the buckets in `want`, which differ from the receiver's digest.
    Delta { entries: Vec<WireEntry>, want: Vec<u16> },
    /// Entries the receiver lacks (the answer to a `Delta`).
    Push { entries: Vec<WireEntry> },
}

/// A sync frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncFrame {
    pub version: u16,
    pub body: SyncBody,
}

/// Why a sync frame was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SyncError {
    #[error("malformed members frame: {0}")]
    Malformed(String),
    #[error("unsupported members version {0}")]
    Version(u16),
    #[error("members frame has {0} entries (limit {MAX_ENTRIES_PER_FRAME})")]
    TooMany(usize),
    #[error("members digest has {0} buckets (expected {BUCKETS})")]
    Buckets(usize),
    #[error("members delta asks for bucket {0} (there are {BUCKETS})")]
    BadBucket(u16),
}

/// What handling one frame produced.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Handled {
    /// Entries that were new or newer.
    pub changed: usize,
    /// Entries of a well-formed frame that were skipped (bad peer id).
    pub bad: usize,
    /// A digest that equalled ours.
    pub equal: bool,
    /// A frame to send back to the sender as a new request.
    pub reply: Option<Vec<u8>>,
}

/// Per-node sync counters (what this node's anti-entropy did), to find the nodes and the
/// phases where convergence lags (`peerage swarm` reports them; status JSON carries them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SyncStats {
    /// Digests this node sent (periodic and at join).
    pub digests_sent: u64,
    /// Digests received from peers.
    pub digests_received: u64,
    /// Digest comparisons (sent or received) that found both directories equal.
    pub equal: u64,
    /// Deltas sent (answers to a differing digest) and received.
    pub deltas_sent: u64,
    pub deltas_received: u64,
    /// Pushes sent (answers to a delta) and received.
    pub pushes_sent: u64,
    pub pushes_received: u64,
    /// Entries sent in deltas and pushes.
    pub entries_sent: u64,
    /// Entries received in deltas and pushes.
    pub entries_received: u64,
    /// Received entries that were new or newer here.
    pub entries_new: u64,
    /// Sync requests that failed (timeout, closed connection, dial failure).
    pub failures: u64,
    /// Frames refused as malformed.
    pub malformed: u64,
    /// Rumour pushes built (each goes to a few peers) and the entries in them.
    pub rumours_sent: u64,
    pub rumour_entries_sent: u64,
}

/// A known member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub node: NodeId,
    pub priority: u64,
    pub incarnation: u64,
    pub addrs: Vec<Multiaddr>,
}

/// The directory.
#[derive(Debug)]
pub struct Directory {
    me: PeerId,
    members: HashMap<PeerId, Member>,
    by_node: HashMap<NodeId, PeerId>,
    buckets: [u64; BUCKETS],
    version: u64,
    changed_at: Instant,
    equal_streak: u32,
    exchanged: bool,
    stats: SyncStats,
    /// Entries that changed here since the last [`Directory::hot_frame`] (the rumours to
    /// push), and the same as a set.
    hot: Vec<PeerId>,
    hot_set: std::collections::HashSet<PeerId>,
}

pub fn node_id_of(peer: &PeerId) -> NodeId {
    NodeId::hash_of(&peer.to_bytes())
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

impl Directory {
    /// A directory that knows only this node.
    pub fn new(me: PeerId, priority: u64, incarnation: u64, addrs: Vec<Multiaddr>) -> Directory {
        let mut d = Directory {
            me,
            members: HashMap::new(),
            by_node: HashMap::new(),
            buckets: [0; BUCKETS],
            version: 0,
            changed_at: Instant::now(),
            equal_streak: 0,
            exchanged: false,
            stats: SyncStats::default(),
            hot: Vec::new(),
            hot_set: std::collections::HashSet::new(),
        };
        d.upsert(me, priority, incarnation, addrs);
        d
    }

    /// Update this node's own addresses (new listen address).
    pub fn set_my_addrs(&mut self, mut addrs: Vec<Multiaddr>) {
        addrs.sort();
        addrs.dedup();
        addrs.truncate(MAX_ADDRS);
        if let Some(m) = self.members.get(&self.me).cloned() {
            if m.addrs != addrs {
                self.upsert(self.me, m.priority, m.incarnation + 1, addrs);
            }
        }
    }

    /// Insert or replace a member if `incarnation` is newer. Returns true if it changed.
    pub fn upsert(&mut self, peer: PeerId, priority: u64, incarnation: u64, mut addrs: Vec<Multiaddr>) -> bool {
        addrs.truncate(MAX_ADDRS);
        let node = match self.members.get(&peer) {
            Some(m) if m.incarnation >= incarnation => return false,
            Some(m) => {
                self.buckets[bucket_of(&m.node)] ^= entry_hash(&peer, m.priority, m.incarnation);
                m.node
            }
            None => node_id_of(&peer),
        };
        self.buckets[bucket_of(&node)] ^= entry_hash(&peer, priority, incarnation);
        self.members.insert(peer, Member { node, priority, incarnation, addrs });
        self.by_node.insert(node, peer);
        if self.hot_set.insert(peer) {
            self.hot.push(peer);
        }
        self.version += 1;
        self.changed_at = Instant::now();
        self.equal_streak = 0;
        true
    }

    /// A counter that changes whenever the directory does.
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
        self.members.get(peer)
    }
    pub fn peer_of(&self, node: &NodeId) -> Option<PeerId> {
        self.by_node.get(node).copied()
    }
    pub fn iter(&self) -> impl Iterator<Item = (&PeerId, &Member)> {
        self.members.iter()
    }
    /// The bucket hashes (the digest without the count).
    pub fn bucket_hashes(&self) -> &[u64; BUCKETS] {
        &self.buckets
    }
    /// Has this node completed at least one exchange (sent or received a delta or push, or
    /// found a peer's digest equal)? A node that has not is still joining.
    pub fn has_exchanged(&self) -> bool {
        self.exchanged
    }
    /// Equal digest comparisons in a row since the last change or difference.
    pub fn equal_streak(&self) -> u32 {
        self.equal_streak
    }
    /// The local evidence that the directory has converged swarm-wide: unchanged for `quiet`
    /// and the last [`SETTLED_STREAK`] comparisons with random peers found equal digests.
    pub fn settled(&self, now: Instant, quiet: Duration) -> bool {
        self.equal_streak >= SETTLED_STREAK && now.saturating_duration_since(self.changed_at) >= quiet
    }
    /// When the directory last changed.
    pub fn changed_at(&self) -> Instant {
        self.changed_at
    }

    /// The election group.
    pub fn membership(&self) -> Arc<Membership> {
        Arc::new(Membership::new(self.members.values().map(|m| Rank::new(m.priority, m.node))))
    }

    /// This node's digest frame (to send to one random connected peer); counted as sent.
    pub fn digest_frame(&mut self) -> Option<Vec<u8>> {
        let f = encode(SyncBody::Digest { count: self.members.len() as u64, buckets: self.buckets.to_vec() });
        if f.is_some() {
            self.stats.digests_sent += 1;
        }
        f
    }

    /// The answer to a `Digest` request said "equal" ([`ACK_EQUAL`]).
    pub fn digest_acknowledged_equal(&mut self) {
        self.equal_streak = self.equal_streak.saturating_add(1);
        self.exchanged = true;
        self.stats.equal += 1;
    }

    /// A sync request of ours failed (the transport reported it).
    pub fn note_failure(&mut self) {
        self.stats.failures += 1;
    }

    /// This node's sync counters.
    pub fn stats(&self) -> SyncStats {
        self.stats
    }

    /// Entries changed here since the last [`Self::hot_frame`].
    pub fn hot_len(&self) -> usize {
        self.hot.len()
    }

    /// Forget the changed entries without pushing them (rumours off).
    pub fn forget_hot(&mut self) {
        self.hot.clear();
        self.hot_set.clear();
        self.hot.shrink_to(64);
        self.hot_set.shrink_to(64);
    }

    /// The rumour push: a [`SyncBody::Push`] of the entries that changed here since the last
    /// call (at most [`MAX_ENTRIES_PER_FRAME`]; the rest stay for the next call), and forgets
    /// them. `None` when nothing changed. The caller sends the same frame to a few random
    /// peers once (infect-and-die); the digest exchange repairs whatever it misses.
    pub fn hot_frame(&mut self) -> Option<Vec<u8>> {
        if self.hot.is_empty() {
            return None;
        }
        let take = self.hot.len().min(MAX_ENTRIES_PER_FRAME);
        let batch: Vec<PeerId> = self.hot.drain(..take).collect();
        let entries: Vec<WireEntry> = batch
            .iter()
            .filter_map(|p| {
                self.hot_set.remove(p);
                self.members.get(p).map(|m| Self::wire_entry(p, m))
            })
            .collect();
        if self.hot.is_empty() {
            // A joiner's snapshot makes the whole directory news once; do not keep that much
            // room per node for the rest of the run.
            self.hot.shrink_to(64);
            self.hot_set.shrink_to(64);
        }
        self.stats.rumours_sent += 1;
        self.stats.rumour_entries_sent += entries.len() as u64;
        encode(SyncBody::Push { entries })
    }

    fn wire_entry(peer: &PeerId, m: &Member) -> WireEntry {
        WireEntry {
            peer: peer.to_bytes(),
            priority: m.priority,
            incarnation: m.incarnation,
            addrs: m.addrs.iter().map(|a| a.to_vec()).collect(),
        }
    }

    /// Our entries of the buckets marked in `wanted` (indexed by bucket).
    fn entries_in(&self, wanted: &[bool; BUCKETS]) -> Vec<(usize, WireEntry)> {
        self.members
            .iter()
            .filter(|(_, m)| wanted[bucket_of(&m.node)])
            .map(|(p, m)| (bucket_of(&m.node), Self::wire_entry(p, m)))
            .collect()
    }

    /// Handle one received frame. Bad entries inside a well-formed frame are skipped and
    /// counted; a malformed frame is an error and changes nothing.
    pub fn handle(&mut self, bytes: &[u8]) -> Result<Handled, SyncError> {
        let r = self.handle_frame(bytes);
        if r.is_err() {
            self.stats.malformed += 1;
        }
        r
    }

    fn handle_frame(&mut self, bytes: &[u8]) -> Result<Handled, SyncError> {
        let frame: SyncFrame = postcard::from_bytes(bytes).map_err(|e| SyncError::Malformed(e.to_string()))?;
        if frame.version != MEMBERS_VERSION {
            return Err(SyncError::Version(frame.version));
        }
        match frame.body {
            SyncBody::Digest { count, buckets } => self.on_digest(count, &buckets),
            SyncBody::Delta { entries, want } => self.on_delta(entries, &want),
            SyncBody::Push { entries } => {
                if entries.len() > MAX_ENTRIES_PER_FRAME {
                    return Err(SyncError::TooMany(entries.len()));
                }
                self.exchanged = true;
                self.stats.pushes_received += 1;
                let (changed, bad) = self.merge_entries(entries);
                Ok(Handled { changed, bad, ..Default::default() })
            }
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
        // Our entries of the differing buckets, whole buckets only, up to the frame cap.
        let mut mine = self.entries_in(&differ);
        mine.sort_unstable_by_key(|(b, _)| *b);
        let mut count_in = [0usize; BUCKETS];
        for (b, _) in &mine {
            count_in[*b] += 1;
        }
        let (mut take, mut want) = (0usize, Vec::new());
        for b in (0..BUCKETS).filter(|b| differ[*b]) {
            if take + count_in[b] > MAX_ENTRIES_PER_FRAME {
                break;
            }
            take += count_in[b];
            want.push(b as u16);
        }
        let last = want.last().map_or(0, |b| *b as usize);
        let entries: Vec<WireEntry> =
            mine.into_iter().take_while(|(b, _)| *b <= last).map(|(_, e)| e).take(take).collect();
        self.stats.deltas_sent += 1;
        self.stats.entries_sent += entries.len() as u64;
        Ok(Handled { reply: encode(SyncBody::Delta { entries, want }), ..Default::default() })
    }

    fn on_delta(&mut self, entries: Vec<WireEntry>, want: &[u16]) -> Result<Handled, SyncError> {
        if entries.len() > MAX_ENTRIES_PER_FRAME {
            return Err(SyncError::TooMany(entries.len()));
        }
        let mut wanted = [false; BUCKETS];
        for &b in want {
            let slot = wanted.get_mut(b as usize).ok_or(SyncError::BadBucket(b))?;
            *slot = true;
        }
        // What the sender has, to push back exactly what it lacks.
        let theirs: HashMap<Vec<u8>, u64> = entries.iter().map(|e| (e.peer.clone(), e.incarnation)).collect();
        self.exchanged = true;
        self.stats.deltas_received += 1;
        let (changed, bad) = self.merge_entries(entries);
        let push: Vec<WireEntry> = self
            .entries_in(&wanted)
            .into_iter()
            .map(|(_, e)| e)
            .filter(|e| theirs.get(&e.peer).is_none_or(|inc| *inc < e.incarnation))
            .take(MAX_ENTRIES_PER_FRAME)
            .collect();
        if !push.is_empty() {
            self.stats.pushes_sent += 1;
            self.stats.entries_sent += push.len() as u64;
        }
        let reply = if push.is_empty() { None } else { encode(SyncBody::Push { entries: push }) };
        Ok(Handled { changed, bad, equal: false, reply })
    }

    fn merge_entries(&mut self, entries: Vec<WireEntry>) -> (usize, usize) {
        self.stats.entries_received += entries.len() as u64;
        let (mut changed, mut bad) = (0, 0);
        for e in entries {
            let Ok(peer) = PeerId::from_bytes(&e.peer) else {
                bad += 1;
                continue;
            };
            if peer == self.me || self.members.get(&peer).is_some_and(|m| m.incarnation >= e.incarnation) {
                continue;
            }
            let addrs: Vec<Multiaddr> =
                e.addrs.into_iter().filter_map(|a| Multiaddr::try_from(a).ok()).take(MAX_ADDRS).collect();
            if self.upsert(peer, e.priority, e.incarnation, addrs) {
                changed += 1;
            }
        }
        self.stats.entries_new += changed as u64;
        (changed, bad)
    }
}

/// When to send the next digest: every `base`, doubling after each equal comparison up to
/// `max`, back to `base` after a change.
#[derive(Debug, Clone)]
pub struct SyncPacer {
    base: Duration,
    max: Duration,
    current: Duration,
    next_at: Instant,
}

impl SyncPacer {
    pub fn new(base: Duration, max: Duration, now: Instant) -> Self {
        let base = base.max(Duration::from_millis(10));
        SyncPacer { base, max: max.max(base), current: base, next_at: now + base }
    }
    /// Is a digest due? If so, schedules the next one.
    pub fn due(&mut self, now: Instant) -> bool {
        if now < self.next_at {
            return false;
        }
        self.next_at = now + self.current;
        true
    }
    /// The last comparison was equal: slow down.
    pub fn on_equal(&mut self) {
        self.current = (self.current * 2).min(self.max);
    }
    /// Something changed: back to the base period (the next digest within one base period).
    pub fn on_change(&mut self, now: Instant) {
        if self.current != self.base {
            self.current = self.base;
            self.next_at = self.next_at.min(now + self.base);
        }
    }
    pub fn period(&self) -> Duration {
        self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};

    fn pid() -> PeerId {
        libp2p::identity::Keypair::generate_ed25519().public().to_peer_id()
    }

    fn dir(priority: u64) -> Directory {
        Directory::new(pid(), priority, 1, vec![format!("/memory/{}", priority + 1).parse().unwrap()])
    }

    /// One push-pull exchange from `a` to `b`; returns the frames moved.
    fn exchange(a: &mut Directory, b: &mut Directory) -> usize {
        let mut frames = 1;
        let digest = a.digest_frame().unwrap();
        let h = b.handle(&digest).unwrap();
        if h.equal {
            a.digest_acknowledged_equal();
            return frames;
        }
        if let Some(delta) = h.reply {
            frames += 1;
            let h2 = a.handle(&delta).unwrap();
            if let Some(push) = h2.reply {
                frames += 1;
                b.handle(&push).unwrap();
            }
        }
        frames
    }

    /// Two distinct elements of one slice, both mutable (`i != j`).
    fn two_mut<T>(v: &mut [T], i: usize, j: usize) -> (&mut T, &mut T) {
        assert_ne!(i, j);
        if i < j {
            let (l, r) = v.split_at_mut(j);
            (&mut l[i], &mut r[0])
        } else {
            let (l, r) = v.split_at_mut(i);
            (&mut r[0], &mut l[j])
        }
    }

    fn same(a: &Directory, b: &Directory) -> bool {
        a.bucket_hashes() == b.bucket_hashes() && a.len() == b.len()
    }

    #[test]
    fn digest_equality_follows_content_not_history() {
        let (a, b, c) = (pid(), pid(), pid());
        let mut d1 = Directory::new(a, 0, 1, vec![]);
        let mut d2 = Directory::new(b, 0, 1, vec![]);
        assert!(!same(&d1, &d2));
        // Same set of entries, inserted in different orders: equal digests.
        d1.upsert(b, 0, 1, vec![]);
        d1.upsert(c, 5, 3, vec![]);
        d2.upsert(c, 5, 2, vec![]);
        d2.upsert(a, 0, 1, vec![]);
        assert!(!same(&d1, &d2), "an older incarnation of c differs");
        d2.upsert(c, 5, 3, vec![]);
        assert!(same(&d1, &d2));
        // Equal digests: the receiver says so and sends nothing.
        let h = d2.handle(&d1.digest_frame().unwrap()).unwrap();
        assert!(h.equal && h.reply.is_none() && h.changed == 0);
        assert_eq!(d2.equal_streak(), 1);
        // A newer incarnation changes exactly one bucket.
        d1.upsert(c, 5, 4, vec![]);
        let diff = (0..BUCKETS).filter(|&i| d1.bucket_hashes()[i] != d2.bucket_hashes()[i]).count();
        assert_eq!(diff, 1);
        assert_eq!(d1.equal_streak(), 0, "a change resets the streak");
    }

    #[test]
    fn delta_exchange_moves_only_what_differs() {
        // Two directories sharing 300 members; each has 2 members the other lacks and one
        // member differs in incarnation.
        let shared: Vec<PeerId> = (0..300).map(|_| pid()).collect();
        let mut a = dir(1);
        let mut b = dir(2);
        for (i, p) in shared.iter().enumerate() {
            a.upsert(*p, i as u64, 1, vec![]);
            b.upsert(*p, i as u64, 1, vec![]);
        }
        let (only_a, only_b) = ((pid(), pid()), (pid(), pid()));
        a.upsert(only_a.0, 7, 1, vec![]);
        a.upsert(only_a.1, 7, 1, vec![]);
        b.upsert(only_b.0, 8, 1, vec![]);
        b.upsert(only_b.1, 8, 1, vec![]);
        b.upsert(shared[0], 0, 9, vec![]);
        let digest = a.digest_frame().unwrap();
        let h = b.handle(&digest).unwrap();
        assert!(!h.equal);
        let delta_bytes = h.reply.unwrap();
        let SyncFrame { body: SyncBody::Delta { entries, want }, .. } = postcard::from_bytes(&delta_bytes).unwrap()
        else {
            panic!("expected a delta");
        };
        // Only the differing buckets travel: at most 7 buckets differ (a, b, the 4 extra
        // members and the newer incarnation), holding ~1 entry each at this size.
        assert!(want.len() <= 7, "{} buckets", want.len());
        assert!(entries.len() < 30, "{} entries in the delta of 306", entries.len());
        let h2 = a.handle(&delta_bytes).unwrap();
        assert!(h2.changed >= 3, "b's two extra members, its own entry and the newer incarnation");
        let push = h2.reply.expect("a has members b lacks");
        let SyncFrame { body: SyncBody::Push { entries: pushed }, .. } = postcard::from_bytes(&push).unwrap() else {
            panic!("expected a push");
        };
        assert_eq!(pushed.len(), 3, "a's two extra members and a's own entry, nothing else");
        b.handle(&push).unwrap();
        assert!(same(&a, &b));
        assert_eq!(a.get(&shared[0]).unwrap().incarnation, 9);
        assert_eq!(a.len(), 306, "300 shared, a, b and two extra members each");
        // Now a second exchange is just the digest.
        assert_eq!(exchange(&mut a, &mut b), 1);
    }

    #[test]
    fn joining_node_pulls_a_snapshot_in_one_exchange() {
        let mut big = dir(1);
        for i in 0..500 {
            big.upsert(pid(), i, 1, vec![format!("/memory/{}", 1000 + i).parse().unwrap()]);
        }
        let mut joiner = dir(2);
        assert!(!joiner.has_exchanged());
        assert_eq!(exchange(&mut joiner, &mut big), 3);
        assert!(same(&joiner, &big));
        assert_eq!(joiner.len(), 502);
        assert!(joiner.has_exchanged());
        let some = *big.iter().find(|(_, m)| m.priority == 17).unwrap().0;
        assert_eq!(joiner.get(&some).unwrap().addrs.len(), 1, "addresses travel");
    }

    /// Push-pull with one random connected peer per round converges on a random sparse
    /// graph in O(log N) rounds, and then only digests move.
    #[test]
    fn converges_on_a_simulated_swarm() {
        let seed: u64 = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
        println!("converges_on_a_simulated_swarm: PEERAGE_SEED={seed}");
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let n = 200;
        let mut dirs: Vec<Directory> = (0..n).map(|i| dir(i as u64)).collect();
        // Each node connected to node i-1 (a path, so the graph is connected) and 4 random others.
        let mut adj: Vec<Vec<usize>> = vec![Vec::new(); n];
        for i in 1..n {
            adj[i].push(i - 1);
            adj[i - 1].push(i);
            for _ in 0..2 {
                let j = rng.gen_range(0..n);
                if j != i {
                    adj[i].push(j);
                    adj[j].push(i);
                }
            }
        }
        let mut rounds = 0;
        loop {
            rounds += 1;
            assert!(rounds <= 40, "no convergence after 40 rounds (seed {seed})");
            let mut order: Vec<usize> = (0..n).collect();
            order.shuffle(&mut rng);
            let mut frames = 0;
            for i in order {
                let j = *adj[i].choose(&mut rng).unwrap();
                let (x, y) = two_mut(&mut dirs, i, j);
                frames += exchange(x, y);
            }
            if dirs.iter().all(|d| d.len() == n && same(d, &dirs[0])) {
                println!("converged in {rounds} rounds; {frames} frames in the last round");
                break;
            }
        }
        assert!(rounds <= 25, "took {rounds} rounds (seed {seed})");
        // Once converged every exchange is one digest and the streaks grow.
        for _ in 0..SETTLED_STREAK {
            for (i, a) in adj.iter().enumerate() {
                let j = a[0];
                let (x, y) = two_mut(&mut dirs, i, j);
                assert_eq!(exchange(x, y), 1);
            }
        }
        assert!(dirs.iter().all(|d| d.equal_streak() >= SETTLED_STREAK));
        assert!(dirs[0].settled(Instant::now() + Duration::from_secs(10), Duration::from_secs(1)));
        assert!(!dirs[0].settled(Instant::now(), Duration::from_secs(60)));
    }

    /// Rounds until every directory on a random sparse graph holds all `n` members, with one
    /// digest exchange per node per round and, with `fanout` > 0, each node's changed
    /// entries pushed to `fanout` random neighbours once per round (as `node/src/runtime/node.rs` does per tick).
    fn rounds_to_converge(n: usize, fanout: usize, seed: u64) -> (usize, u64) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut dirs: Vec<Directory> = (0..n).map(|i| dir(i as u64)).collect();
        let mut adj: Vec<Vec<usize>> = vec![Vec::new(); n];
        for i in 1..n {
            adj[i].push(i - 1);
            adj[i - 1].push(i);
            for _ in 0..4 {
                let j = rng.gen_range(0..n);
                if j != i && !adj[i].contains(&j) {
                    adj[i].push(j);
                    adj[j].push(i);
                }
            }
        }
        let mut rounds = 0;
        loop {
            rounds += 1;
            assert!(rounds <= 60, "no convergence after 60 rounds (fanout {fanout}, seed {seed})");
            let mut order: Vec<usize> = (0..n).collect();
            order.shuffle(&mut rng);
            for &i in &order {
                let j = *adj[i].choose(&mut rng).unwrap();
                let (x, y) = two_mut(&mut dirs, i, j);
                exchange(x, y);
            }
            for &i in &order {
                if fanout == 0 {
                    dirs[i].forget_hot();
                    continue;
                }
                let Some(frame) = dirs[i].hot_frame() else { continue };
                let targets: Vec<usize> = adj[i].choose_multiple(&mut rng, fanout).copied().collect();
                for j in targets {
                    dirs[j].handle(&frame).unwrap();
                }
            }
            if dirs.iter().all(|d| d.len() == n && same(d, &dirs[0])) {
                let moved = dirs.iter().map(|d| d.stats().entries_received).sum();
                return (rounds, moved);
            }
        }
    }

    /// Rumours (changed entries pushed once to a few neighbours) spread in fewer rounds than
    /// the digest exchange alone, on the same graphs and schedules; once converged nothing is
    /// hot and an exchange is one digest.
    #[test]
    fn rumours_speed_up_convergence() {
        let seed: u64 = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
        println!("rumours_speed_up_convergence: PEERAGE_SEED={seed}");
        let n = 300;
        let (ae, ae_moved) = rounds_to_converge(n, 0, seed);
        let (rumour, rumour_moved) = rounds_to_converge(n, 3, seed);
        println!("digest only: {ae} rounds, {ae_moved} entries; fan-out 3: {rumour} rounds, {rumour_moved} entries");
        assert!(rumour < ae, "fan-out 3 took {rumour} rounds, digest only {ae} (seed {seed})");
        assert!(rumour <= 6, "fan-out 3 took {rumour} rounds (seed {seed})");
        // Each node forwards each entry at most once to 3 peers, plus the digest exchanges.
        assert!(rumour_moved <= 6 * (n * n) as u64, "{rumour_moved} entries moved (seed {seed})");
    }

    #[test]
    fn hot_frame_pushes_changes_once() {
        let mut a = dir(1);
        assert_eq!(a.hot_len(), 1, "its own entry is news");
        let (p, q) = (pid(), pid());
        a.upsert(p, 3, 1, vec![]);
        a.upsert(q, 4, 1, vec![]);
        a.upsert(p, 3, 2, vec![]);
        assert_eq!(a.hot_len(), 3, "p once, at its newest incarnation");
        let frame = a.hot_frame().unwrap();
        assert!(a.hot_frame().is_none(), "pushed once");
        let mut b = dir(2);
        let h = b.handle(&frame).unwrap();
        assert_eq!(h.changed, 3);
        assert!(h.reply.is_none());
        assert_eq!(b.get(&p).unwrap().incarnation, 2);
        // b learned them: they are news at b now (it forwards them once), not at a again.
        assert_eq!(b.hot_len(), 4);
        assert!(b.handle(&frame).unwrap().changed == 0);
        a.forget_hot();
        assert_eq!(a.hot_len(), 0);
        assert_eq!(a.stats().rumours_sent, 1);
        assert_eq!(a.stats().rumour_entries_sent, 3);
    }

    #[test]
    fn malformed_frames_are_errors_and_change_nothing() {
        let mut d = dir(1);
        let before = *d.bucket_hashes();
        assert!(matches!(d.handle(&[1, 2, 3]), Err(SyncError::Malformed(_)) | Err(SyncError::Version(_))));
        assert!(matches!(d.handle(&[]), Err(SyncError::Malformed(_))));
        let v1 = postcard::to_stdvec(&SyncFrame { version: 1, body: SyncBody::Push { entries: vec![] } }).unwrap();
        assert_eq!(d.handle(&v1), Err(SyncError::Version(1)));
        let short = encode(SyncBody::Digest { count: 1, buckets: vec![0; 3] }).unwrap();
        assert_eq!(d.handle(&short), Err(SyncError::Buckets(3)));
        let bad_bucket = encode(SyncBody::Delta { entries: vec![], want: vec![BUCKETS as u16] }).unwrap();
        assert_eq!(d.handle(&bad_bucket), Err(SyncError::BadBucket(BUCKETS as u16)));
        let bad_peer = encode(SyncBody::Push {
            entries: vec![WireEntry { peer: vec![1, 2], priority: 0, incarnation: 1, addrs: vec![vec![255, 0]] }],
        })
        .unwrap();
        assert_eq!(d.handle(&bad_peer).unwrap().bad, 1);
        let too_many = encode(SyncBody::Push {
            entries: vec![
                WireEntry { peer: vec![], priority: 0, incarnation: 0, addrs: vec![] };
                MAX_ENTRIES_PER_FRAME + 1
            ],
        })
        .unwrap();
        assert_eq!(d.handle(&too_many), Err(SyncError::TooMany(MAX_ENTRIES_PER_FRAME + 1)));
        // A bad address inside a good entry is dropped, the entry kept.
        let p = pid();
        let ok = encode(SyncBody::Push {
            entries: vec![WireEntry { peer: p.to_bytes(), priority: 3, incarnation: 1, addrs: vec![vec![255, 0]] }],
        })
        .unwrap();
        assert_eq!(d.handle(&ok).unwrap().changed, 1);
        assert!(d.get(&p).unwrap().addrs.is_empty());
        assert_ne!(*d.bucket_hashes(), before);
        // Our own entry from someone else never replaces ours.
        let me_entry = encode(SyncBody::Push {
            entries: vec![WireEntry { peer: d.me.to_bytes(), priority: 99, incarnation: 99, addrs: vec![] }],
        })
        .unwrap();
        assert_eq!(d.handle(&me_entry).unwrap().changed, 0);
    }

    #[test]
    fn sync_counters_follow_the_exchange() {
        let mut big = dir(1);
        for i in 0..50 {
            big.upsert(pid(), i, 1, vec![]);
        }
        let mut joiner = dir(2);
        assert_eq!(exchange(&mut joiner, &mut big), 3);
        let (j, b) = (joiner.stats(), big.stats());
        assert_eq!((j.digests_sent, b.digests_received), (1, 1));
        assert_eq!((b.deltas_sent, j.deltas_received), (1, 1));
        assert_eq!((j.pushes_sent, b.pushes_received), (1, 1));
        assert_eq!(j.entries_received, b.entries_sent, "the delta is all big sent");
        assert_eq!(j.entries_new, 51, "big's 50 members and big itself");
        assert_eq!(b.entries_new, 1, "the joiner's own entry");
        assert_eq!(b.entries_received, j.entries_sent);
        // Equal digests: counted on both sides, nothing else moves.
        assert_eq!(exchange(&mut joiner, &mut big), 1);
        assert_eq!((joiner.stats().equal, big.stats().equal), (1, 1));
        assert_eq!(big.stats().deltas_sent, 1);
        // Failures and malformed frames.
        joiner.note_failure();
        assert!(joiner.handle(&[9, 9, 9]).is_err());
        assert_eq!((joiner.stats().failures, joiner.stats().malformed), (1, 1));
    }

    #[test]
    fn newer_incarnation_wins() {
        let (a, b) = (pid(), pid());
        let mut da = Directory::new(a, 0, 1, vec![]);
        assert!(da.upsert(b, 1, 5, vec![]));
        assert!(!da.upsert(b, 9, 4, vec![]));
        assert!(da.upsert(b, 9, 6, vec![]));
        assert_eq!(da.get(&b).unwrap().priority, 9);
        assert_eq!(da.peer_of(&node_id_of(&b)), Some(b));
        assert_eq!(da.membership().highest().unwrap().priority, 9);
    }

    #[test]
    fn pacer_backs_off_and_resets() {
        let t0 = Instant::now();
        let mut p = SyncPacer::new(Duration::from_millis(100), Duration::from_millis(800), t0);
        assert!(!p.due(t0));
        assert!(p.due(t0 + Duration::from_millis(100)));
        for _ in 0..10 {
            p.on_equal();
        }
        assert_eq!(p.period(), Duration::from_millis(800));
        p.on_change(t0);
        assert_eq!(p.period(), Duration::from_millis(100));
    }
}
