//! The node's member directory: `overlay::directory` (signed records, their bounds, the
//! anti-entropy sync, expiry) with this node's own key and clock, over
//! `/peerage/members/2.0.0`.
//!
//! What is decided lives in the overlay crate; this wrapper only does what needs the key or
//! the clock: it signs this node's own record (at start, when its addresses change, and again
//! when half of the record's lifetime is over, with an incarnation that is its wall clock in
//! microseconds), expires the records of members that stopped refreshing theirs, and converts
//! between `Instant` and the wall clock in which records expire. The wall clock is read once;
//! later times are that reading plus the monotonic clock's progress, so a jump of the system
//! clock moves no deadline. The directories of one process share one memo of records already
//! checked (`overlay::directory::memo`): the nodes of a swarm check each record once between
//! them.
//!
//! All four sync messages travel as requests; the codec's responses are one-byte
//! acknowledgements ([`ACK_EQUAL`] answers a digest that was equal).

use libp2p::identity::Keypair;
use libp2p::{Multiaddr, PeerId};
use overlay::directory::members::Directory as Inner;
pub use overlay::directory::members::{
    bucket_of, entry_hash, Handled, Member, SyncBody, SyncError, SyncFrame, SyncStats, BUCKETS, MAX_ENTRIES_PER_FRAME,
    MEMBERS_VERSION, SETTLED_STREAK,
};
pub use overlay::directory::node_id_of;
use overlay::directory::{Bounds, RecordBody, SignError, SignedRecord, VerifiedMemo};
use overlay::{Membership, NodeId, Rank};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Acknowledgement of a `Digest` request that found the digests equal (the other codes are in
/// `node/src/net/codec.rs`).
pub const ACK_EQUAL: u8 = 2;
/// Addresses kept per member.
pub const MAX_ADDRS: usize = overlay::directory::record::MAX_ADDRS;

/// Records the process's memo keeps per generation (two generations at most): 16,384 holds
/// every current record of a swarm of several thousand nodes, and at most about 20 MiB of
/// records that no directory holds any more.
const MEMO_CAPACITY: usize = 1 << 14;

/// The memo of checked records shared by every directory of this process.
fn process_memo() -> Arc<VerifiedMemo> {
    static MEMO: OnceLock<Arc<VerifiedMemo>> = OnceLock::new();
    MEMO.get_or_init(|| Arc::new(VerifiedMemo::new(MEMO_CAPACITY))).clone()
}

/// The directory with this node's key and clock.
pub struct Directory {
    inner: Inner,
    key: Keypair,
    priority: u64,
    ttl_us: u64,
    wall0_us: u64,
    mono0: Instant,
}

impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Directory").field("me", &self.inner.me()).field("members", &self.inner.len()).finish()
    }
}

fn sign(
    key: &Keypair,
    priority: u64,
    incarnation: u64,
    ttl_us: u64,
    addrs: &[Multiaddr],
) -> Result<overlay::directory::Record, SignError> {
    let body = RecordBody {
        priority,
        incarnation,
        expires_us: incarnation.saturating_add(ttl_us),
        addrs: addrs.iter().take(MAX_ADDRS).map(|a| a.to_vec()).collect(),
    };
    Ok(SignedRecord::sign(key, &body)?.open()?)
}

impl Directory {
    /// A directory that knows only this node, whose record it signs with `key`.
    pub fn new(key: Keypair, priority: u64, bounds: Bounds, addrs: Vec<Multiaddr>) -> Result<Directory, SignError> {
        let wall0_us = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(1);
        let ttl_us = bounds.max_ttl_us;
        let me = sign(&key, priority, wall0_us, ttl_us, &addrs)?;
        let mut inner = Inner::new(me, bounds, wall0_us);
        inner.share_memo(process_memo());
        Ok(Directory { inner, key, priority, ttl_us, wall0_us, mono0: Instant::now() })
    }

    /// Wall-clock microseconds at `t`.
    pub fn wall_us(&self, t: Instant) -> u64 {
        self.wall0_us.saturating_add(t.saturating_duration_since(self.mono0).as_micros() as u64)
    }
    fn now_us(&self) -> u64 {
        self.wall_us(Instant::now())
    }
    fn instant_of(&self, us: u64) -> Instant {
        self.mono0 + Duration::from_micros(us.saturating_sub(self.wall0_us))
    }

    /// Sign and install a new own record with `addrs`.
    /// Signs our own record again at wall time `now` (µs): the time the caller works at, so a
    /// record re-signed by `upkeep(t)` lives a full lifetime from `t`.
    fn resign(&mut self, addrs: Vec<Multiaddr>, now: u64) {
        let inc = self.inner.own().map_or(now, |m| now.max(m.incarnation + 1));
        match sign(&self.key, self.priority, inc, self.ttl_us, &addrs) {
            Ok(rec) => {
                self.inner.set_own(rec, now);
            }
            Err(e) => tracing::error!("{e}"),
        }
    }

    /// Update this node's own addresses (new listen address).
    pub fn set_my_addrs(&mut self, mut addrs: Vec<Multiaddr>) {
        addrs.sort();
        addrs.dedup();
        addrs.truncate(MAX_ADDRS);
        if self.inner.own().is_some_and(|m| m.addrs != addrs) {
            let now = self.now_us();
            self.resign(addrs, now);
        }
    }

    /// Periodic upkeep: re-sign this node's record when half of its lifetime is over, and
    /// remove the members whose records expired. Returns those members.
    pub fn upkeep(&mut self, now: Instant) -> Vec<PeerId> {
        let now_us = self.wall_us(now);
        if let Some(m) = self.inner.own() {
            if m.expires_us.saturating_sub(now_us) < self.ttl_us / 2 {
                let addrs = m.addrs.clone();
                self.resign(addrs, now_us);
            }
        }
        self.inner.expire(now_us)
    }

    /// Handle a frame from the authenticated peer `from`.
    pub fn handle(&mut self, from: PeerId, bytes: &[u8]) -> Result<Handled, SyncError> {
        let now = self.now_us();
        self.inner.handle(from, bytes, now)
    }

    /// The overlay directory (claims are checked against it).
    pub fn inner(&self) -> &Inner {
        &self.inner
    }
    pub fn version(&self) -> u64 {
        self.inner.version()
    }
    pub fn len(&self) -> usize {
        self.inner.len()
    }
    /// Has the directory settled once? From then on each sender's new members are paced
    /// (`overlay::directory::admission`).
    pub fn is_paced(&self) -> bool {
        self.inner.is_strict()
    }
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }
    pub fn get(&self, peer: &PeerId) -> Option<&Member> {
        self.inner.get(peer)
    }
    pub fn member_of(&self, node: &NodeId) -> Option<&Member> {
        self.inner.member_of(node)
    }
    pub fn peer_of(&self, node: &NodeId) -> Option<PeerId> {
        self.inner.peer_of(node)
    }
    pub fn rank_of(&self, node: &NodeId) -> Option<Rank> {
        self.inner.rank_of(node)
    }
    pub fn iter(&self) -> impl Iterator<Item = (&PeerId, &Member)> {
        self.inner.iter()
    }
    pub fn bucket_hashes(&self) -> &[u64; BUCKETS] {
        self.inner.bucket_hashes()
    }
    pub fn has_exchanged(&self) -> bool {
        self.inner.has_exchanged()
    }
    pub fn equal_streak(&self) -> u32 {
        self.inner.equal_streak()
    }
    /// The local evidence that the directory has converged swarm-wide.
    pub fn settled(&mut self, now: Instant, quiet: Duration) -> bool {
        let now_us = self.wall_us(now);
        self.inner.settled(now_us, quiet.as_micros() as u64)
    }
    /// When the group last changed.
    pub fn changed_at(&self) -> Instant {
        self.instant_of(self.inner.changed_at_us())
    }
    pub fn membership(&self) -> Arc<Membership> {
        self.inner.membership()
    }
    pub fn digest_frame(&mut self) -> Option<Vec<u8>> {
        let now = self.now_us();
        self.inner.digest_frame(now)
    }
    pub fn digest_acknowledged_equal(&mut self) {
        self.inner.digest_acknowledged_equal()
    }
    pub fn note_failure(&mut self, kind: overlay::directory::members::SyncFailure) {
        self.inner.note_failure(kind)
    }
    pub fn stats(&self) -> SyncStats {
        self.inner.stats()
    }
    pub fn hot_len(&self) -> usize {
        self.inner.hot_len()
    }
    pub fn set_rumours(&mut self, on: bool) {
        self.inner.set_rumours(on)
    }
    pub fn hot_frame(&mut self) -> Option<Vec<u8>> {
        self.inner.hot_frame()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_record_is_signed_refreshed_and_survives_expiry() {
        let bounds = Bounds { max_ttl_us: 10_000_000, ..Bounds::default() };
        let mut a = Directory::new(Keypair::generate_ed25519(), 3, bounds.clone(), vec![]).unwrap();
        let mut b = Directory::new(Keypair::generate_ed25519(), 4, bounds, vec![]).unwrap();
        // Digest, then b's summary (with its own record) and a's push of its own.
        let digest = a.digest_frame().unwrap();
        let summary = b.handle(a.inner.me(), &digest).unwrap().reply.unwrap();
        let push = a.handle(b.inner.me(), &summary).unwrap().reply.unwrap();
        assert!(b.handle(a.inner.me(), &push).unwrap().reply.is_none(), "nothing was asked for");
        assert_eq!((a.len(), b.len()), (2, 2));
        let inc = a.inner.own().unwrap().incarnation;
        a.set_my_addrs(vec!["/memory/7".parse().unwrap()]);
        assert!(a.inner.own().unwrap().incarnation > inc, "a new address is a new incarnation");
        // Six seconds on: past half of a ten-second lifetime, a re-signs; b has not heard of
        // it and, eleven seconds on, lets a go.
        let later = Instant::now() + Duration::from_secs(6);
        assert!(a.upkeep(later).is_empty());
        assert_eq!(a.inner.own().unwrap().expires_us, a.wall_us(later) + 10_000_000, "a full lifetime from then");
        assert_eq!(b.upkeep(Instant::now() + Duration::from_secs(11)), vec![a.inner.me()]);
        assert_eq!(b.len(), 1);
    }
}
