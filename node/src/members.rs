//! The member directory: who is in the election group, with what priority, at which
//! addresses, and its sync protocol (`/peerage/members/1.0.0`).
//!
//! The election algorithms assume a-priori knowledge of the group (seed 001: "a process knows
//! all process numbers"). In a real swarm a node learns it: every node starts knowing itself
//! and its bootstrap peers' ids; it then pushes the entries it knows to each connected peer,
//! and merges what it receives (anti-entropy over the connection graph). An entry crosses each
//! connection about once: every node keeps an append-only log of entries and, per connected
//! peer, a cursor into that log; each sync sends the log's tail after the cursor. A newer
//! `incarnation` of the same peer (a restart, maybe with a new priority or address) replaces
//! the old entry and is appended again so that it spreads.
//!
//! Why not a gossipsub announcement per node: the probe measured ~1 ms CPU per node per
//! delivered gossip message, so N announcements cost N^2 ms (1,000 s of CPU at N = 1,000).
//! Direct sync costs one small frame per connection per change batch, no signatures.
//!
//! Members never leave the group: liveness is the elections' business (timeouts, failed
//! sends, `PeerDown`), as in the seeds. The `NodeId` of a member is
//! `NodeId::hash_of(peer_id.to_bytes())` and its rank `(priority, NodeId)`.

use libp2p::{Multiaddr, PeerId};
use overlay::{Membership, NodeId, Rank};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

/// Members-sync wire version.
pub const MEMBERS_VERSION: u16 = 1;
/// Entries per sync frame (a frame of 512 entries with two addresses is ~60 KiB).
pub const MAX_ENTRIES_PER_FRAME: usize = 512;
/// Addresses kept per member.
pub const MAX_ADDRS: usize = 4;

/// One member as it travels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireEntry {
    pub peer: Vec<u8>,
    pub priority: u64,
    pub incarnation: u64,
    pub addrs: Vec<Vec<u8>>,
}

/// A sync frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncFrame {
    pub version: u16,
    pub entries: Vec<WireEntry>,
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
#[derive(Debug, Default)]
pub struct Directory {
    me: Option<PeerId>,
    members: HashMap<PeerId, Member>,
    by_node: HashMap<NodeId, PeerId>,
    log: Vec<PeerId>,
    cursors: HashMap<PeerId, usize>,
    version: u64,
}

pub fn node_id_of(peer: &PeerId) -> NodeId {
    NodeId::hash_of(&peer.to_bytes())
}

impl Directory {
    /// A directory that knows only this node.
    pub fn new(me: PeerId, priority: u64, incarnation: u64, addrs: Vec<Multiaddr>) -> Directory {
        let mut d = Directory { me: Some(me), ..Default::default() };
        d.upsert(me, priority, incarnation, addrs);
        d
    }

    /// Update this node's own addresses (new listen address).
    pub fn set_my_addrs(&mut self, mut addrs: Vec<Multiaddr>) {
        addrs.sort();
        addrs.dedup();
        addrs.truncate(MAX_ADDRS);
        let Some(me) = self.me else { return };
        if let Some(m) = self.members.get(&me).cloned() {
            if m.addrs != addrs {
                self.upsert(me, m.priority, m.incarnation + 1, addrs);
            }
        }
    }

    /// Insert or replace a member if `incarnation` is newer. Returns true if it changed.
    pub fn upsert(&mut self, peer: PeerId, priority: u64, incarnation: u64, mut addrs: Vec<Multiaddr>) -> bool {
        addrs.truncate(MAX_ADDRS);
        if let Some(m) = self.members.get(&peer) {
            if m.incarnation >= incarnation {
                return false;
            }
        }
        let node = node_id_of(&peer);
        self.members.insert(peer, Member { node, priority, incarnation, addrs });
        self.by_node.insert(node, peer);
        self.log.push(peer);
        self.version += 1;
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

    /// The election group.
    pub fn membership(&self) -> Arc<Membership> {
        Arc::new(Membership::new(self.members.values().map(|m| Rank::new(m.priority, m.node))))
    }

    /// A new connection to `peer`: it will get the whole log on the next sync.
    pub fn peer_connected(&mut self, peer: PeerId) {
        self.cursors.entry(peer).or_insert(0);
    }
    pub fn peer_disconnected(&mut self, peer: &PeerId) {
        self.cursors.remove(peer);
    }
    /// A sync to `peer` failed: send everything again next time.
    pub fn sync_failed(&mut self, peer: &PeerId) {
        if let Some(c) = self.cursors.get_mut(peer) {
            *c = 0;
        }
    }

    /// The next frame for `peer`, if it is behind; advances its cursor.
    pub fn next_frame_for(&mut self, peer: &PeerId) -> Option<Vec<u8>> {
        let cursor = *self.cursors.get(peer)?;
        if cursor >= self.log.len() {
            return None;
        }
        let end = (cursor + MAX_ENTRIES_PER_FRAME).min(self.log.len());
        let mut seen = std::collections::HashSet::new();
        let entries: Vec<WireEntry> = self.log[cursor..end]
            .iter()
            .filter(|p| *p != peer && seen.insert(**p))
            .filter_map(|p| {
                self.members.get(p).map(|m| WireEntry {
                    peer: p.to_bytes(),
                    priority: m.priority,
                    incarnation: m.incarnation,
                    addrs: m.addrs.iter().map(|a| a.to_vec()).collect(),
                })
            })
            .collect();
        self.cursors.insert(*peer, end);
        if entries.is_empty() {
            return None;
        }
        postcard::to_stdvec(&SyncFrame { version: MEMBERS_VERSION, entries }).ok()
    }

    /// Merge a received frame. Returns how many entries were new or newer. Bad entries inside
    /// a well-formed frame are skipped (counted in the second value).
    pub fn merge(&mut self, bytes: &[u8]) -> Result<(usize, usize), SyncError> {
        let frame: SyncFrame = postcard::from_bytes(bytes).map_err(|e| SyncError::Malformed(e.to_string()))?;
        if frame.version != MEMBERS_VERSION {
            return Err(SyncError::Version(frame.version));
        }
        if frame.entries.len() > MAX_ENTRIES_PER_FRAME {
            return Err(SyncError::TooMany(frame.entries.len()));
        }
        let (mut changed, mut bad) = (0, 0);
        for e in frame.entries {
            let Ok(peer) = PeerId::from_bytes(&e.peer) else {
                bad += 1;
                continue;
            };
            if Some(peer) == self.me {
                continue;
            }
            let addrs: Vec<Multiaddr> =
                e.addrs.into_iter().filter_map(|a| Multiaddr::try_from(a).ok()).take(MAX_ADDRS).collect();
            if self.upsert(peer, e.priority, e.incarnation, addrs) {
                changed += 1;
            }
        }
        Ok((changed, bad))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pid() -> PeerId {
        libp2p::identity::Keypair::generate_ed25519().public().to_peer_id()
    }

    #[test]
    fn sync_spreads_entries_once() {
        let (a, b, c) = (pid(), pid(), pid());
        let mut da = Directory::new(a, 1, 1, vec!["/memory/1".parse().unwrap()]);
        let mut db = Directory::new(b, 2, 1, vec![]);
        let mut dc = Directory::new(c, 3, 1, vec![]);
        db.peer_connected(c);
        dc.peer_connected(b);
        da.peer_connected(b);
        db.peer_connected(a);
        let f = dc.next_frame_for(&b).unwrap();
        assert_eq!(db.merge(&f).unwrap(), (1, 0));
        let f = db.next_frame_for(&a).unwrap();
        assert_eq!(da.merge(&f).unwrap(), (2, 0));
        assert_eq!(da.len(), 3);
        assert!(da.next_frame_for(&b).is_some());
        assert!(da.next_frame_for(&b).is_none(), "cursor advanced");
        let m = da.membership();
        assert_eq!(m.highest().unwrap().priority, 3);
        assert_eq!(da.peer_of(&node_id_of(&c)), Some(c));
        assert_eq!(da.get(&a).unwrap().addrs.len(), 1);
    }

    #[test]
    fn newer_incarnation_wins_and_bad_frames_are_errors() {
        let (a, b) = (pid(), pid());
        let mut da = Directory::new(a, 0, 1, vec![]);
        assert!(da.upsert(b, 1, 5, vec![]));
        assert!(!da.upsert(b, 9, 4, vec![]));
        assert!(da.upsert(b, 9, 6, vec![]));
        assert_eq!(da.get(&b).unwrap().priority, 9);
        assert!(da.merge(&[1, 2, 3]).is_err());
        assert!(da.merge(&[]).is_err());
        let bad = postcard::to_stdvec(&SyncFrame {
            version: 1,
            entries: vec![WireEntry { peer: vec![1, 2], priority: 0, incarnation: 1, addrs: vec![] }],
        })
        .unwrap();
        assert_eq!(da.merge(&bad).unwrap(), (0, 1));
        let v2 = postcard::to_stdvec(&SyncFrame { version: 2, entries: vec![] }).unwrap();
        assert_eq!(da.merge(&v2), Err(SyncError::Version(2)));
    }
}
