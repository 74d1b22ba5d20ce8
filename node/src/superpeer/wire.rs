//! The super-peer protocol's wire format (`/peerage/superpeer/2.0.0`): a versioned postcard
//! envelope around `overlay::superpeer::SpMessage`, built like `overlay::wire`.
//!
//! Every request carries the sender's current coordinate ([`Point`]) and a small **address
//! book**: for every node id the message mentions (a head in a cache exchange, the members of
//! a cluster view, the target of a `Moved`, ...) the sender adds the libp2p `PeerId` and at
//! most [`MAX_ADDRS_PER_ENTRY`] addresses it knows for it. The state machine speaks in
//! `NodeId`s (SHA-256 of the `PeerId`); a receiver needs the `PeerId` to reach a node it never
//! met (a member of its cluster during a re-election, a head it heard of by gossip). A book
//! entry is only believed for the node id it hashes to, so a peer cannot redirect someone
//! else's id (addresses are hints, checked by the noise handshake when dialled).
//!
//! Every response is a [`SpReply`]: the responder's coordinate and whether it accepted the
//! frame. So each exchange teaches both ends each other's position; a [`SpBody::Hello`]
//! (no message) is used to learn a new peer's position and as a liveness probe.
//!
//! New message kinds are appended to `SpMessage` (postcard numbers the variants in order),
//! so the version stays 1: a build that predates a kind refuses only frames of that kind
//! (`SizeSamples`, which the sender's state machine takes for a courtesy, not a
//! sign of a dead peer).
//!
//! [`decode_request`] / [`decode_reply`] never panic: empty, oversized, truncated,
//! trailing-garbage, unknown-version and out-of-bounds input (bad coordinate, too many book
//! entries or addresses) come back as a [`SpWireError`]. Sizes are bounded by
//! [`MAX_SP_FRAME_BYTES`]; postcard never preallocates more than the bytes present justify.

use libp2p::{Multiaddr, PeerId};
use overlay::superpeer::{Point, SpMessage};
use overlay::NodeId;
use serde::{Deserialize, Serialize};

/// The request-response protocol name.
pub const SUPERPEER_PROTOCOL: &str = "/peerage/superpeer/2.0.0";
/// The version this build speaks (first field of every frame). Version 2:
/// the bytes are those of version 1, but the first id of a `ClusterView` and the first
/// member of a `Handover` now name the cluster's heir, which ranks above the other members in
/// a re-election (`overlay::superpeer::heir`); a version-1 node would rank them all alike and
/// could elect a second leader.
pub const SP_WIRE_VERSION: u16 = 2;
/// Largest request frame accepted or sent. A cluster view of 150 members with their book
/// entries is about 12 KiB; a handover of 150 members and 16 token entries about 20 KiB.
pub const MAX_SP_FRAME_BYTES: usize = 64 * 1024;
/// Largest book carried by one frame.
pub const MAX_BOOK_ENTRIES: usize = 512;
/// Addresses per book entry.
pub const MAX_ADDRS_PER_ENTRY: usize = 2;
/// Largest reply accepted (must fit `codec::MAX_RESPONSE_BYTES`).
pub const MAX_REPLY_BYTES: usize = 256;

/// One address-book entry: a peer id's bytes and up to two of its addresses' bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BookEntry {
    pub peer: Vec<u8>,
    pub addrs: Vec<Vec<u8>>,
}

impl BookEntry {
    /// An entry for `peer` with its first addresses.
    pub fn new(peer: &PeerId, addrs: &[Multiaddr]) -> BookEntry {
        BookEntry { peer: peer.to_bytes(), addrs: addrs.iter().take(MAX_ADDRS_PER_ENTRY).map(|a| a.to_vec()).collect() }
    }

    /// The entry's peer, node id and parseable addresses; `None` for a bad peer id.
    pub fn parse(&self) -> Option<(PeerId, NodeId, Vec<Multiaddr>)> {
        let peer = PeerId::from_bytes(&self.peer).ok()?;
        let id = crate::directory::members::node_id_of(&peer);
        let addrs = self.addrs.iter().filter_map(|a| Multiaddr::try_from(a.clone()).ok()).collect();
        Some((peer, id, addrs))
    }
}

/// What a request carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum SpBody {
    /// No message: learn the receiver's position, or check that it is alive.
    Hello,
    /// A super-peer selection message, with the address book for the ids it names.
    Message { msg: SpMessage, book: Vec<BookEntry> },
}

/// A request frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpRequest {
    pub version: u16,
    /// The sender's coordinate.
    pub point: Point,
    pub body: SpBody,
}

/// A reply frame.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SpReply {
    pub version: u16,
    /// The responder's coordinate.
    pub point: Point,
    /// False when the responder refused the request (malformed, wrong version).
    pub accepted: bool,
}

/// Why a frame was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpWireError {
    #[error("empty super-peer frame")]
    Empty,
    #[error("super-peer frame of {len} bytes exceeds the limit of {max} bytes")]
    Oversized { len: usize, max: usize },
    #[error("unsupported super-peer wire version {got} (this node speaks {supported})")]
    UnknownVersion { got: u16, supported: u16 },
    #[error("malformed super-peer frame: {0}")]
    Malformed(String),
    #[error("{0} trailing bytes after the super-peer frame")]
    Trailing(usize),
    #[error("super-peer frame out of bounds: {0}")]
    OutOfBounds(&'static str),
}

fn encode_bounded<T: Serialize>(v: &T, max: usize) -> Result<Vec<u8>, SpWireError> {
    let bytes = postcard::to_stdvec(v).map_err(|e| SpWireError::Malformed(e.to_string()))?;
    if bytes.len() > max {
        return Err(SpWireError::Oversized { len: bytes.len(), max });
    }
    Ok(bytes)
}

fn decode_bounded<T: for<'de> Deserialize<'de>>(bytes: &[u8], max: usize) -> Result<T, SpWireError> {
    if bytes.is_empty() {
        return Err(SpWireError::Empty);
    }
    if bytes.len() > max {
        return Err(SpWireError::Oversized { len: bytes.len(), max });
    }
    let (version, _) =
        postcard::take_from_bytes::<u16>(bytes).map_err(|e| SpWireError::Malformed(format!("version: {e}")))?;
    if version != SP_WIRE_VERSION {
        return Err(SpWireError::UnknownVersion { got: version, supported: SP_WIRE_VERSION });
    }
    let (v, rest) = postcard::take_from_bytes::<T>(bytes).map_err(|e| SpWireError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(SpWireError::Trailing(rest.len()));
    }
    Ok(v)
}

/// Encode a request in the current version.
pub fn encode_request(point: Point, body: SpBody) -> Result<Vec<u8>, SpWireError> {
    encode_bounded(&SpRequest { version: SP_WIRE_VERSION, point, body }, MAX_SP_FRAME_BYTES)
}

/// Decode and bound-check a request. Never panics.
pub fn decode_request(bytes: &[u8]) -> Result<SpRequest, SpWireError> {
    let r: SpRequest = decode_bounded(bytes, MAX_SP_FRAME_BYTES)?;
    if !r.point.is_valid() {
        return Err(SpWireError::OutOfBounds("the sender's coordinate is not finite or has a negative height"));
    }
    if let SpBody::Message { book, .. } = &r.body {
        if book.len() > MAX_BOOK_ENTRIES {
            return Err(SpWireError::OutOfBounds("too many address-book entries"));
        }
        if book.iter().any(|e| e.addrs.len() > MAX_ADDRS_PER_ENTRY || e.peer.len() > 128) {
            return Err(SpWireError::OutOfBounds("address-book entry too large"));
        }
    }
    Ok(r)
}

/// Encode a reply.
pub fn encode_reply(point: Point, accepted: bool) -> Result<Vec<u8>, SpWireError> {
    encode_bounded(&SpReply { version: SP_WIRE_VERSION, point, accepted }, MAX_REPLY_BYTES)
}

/// Decode a reply. Never panics.
pub fn decode_reply(bytes: &[u8]) -> Result<SpReply, SpWireError> {
    let r: SpReply = decode_bounded(bytes, MAX_REPLY_BYTES)?;
    if !r.point.is_valid() {
        return Err(SpWireError::OutOfBounds("the responder's coordinate is not finite or has a negative height"));
    }
    Ok(r)
}

/// Every node id a message names that the receiver may have to reach (the book covers them).
pub fn mentioned_ids(msg: &SpMessage) -> Vec<NodeId> {
    match msg {
        SpMessage::Announce { head, .. } | SpMessage::Accept { head, .. } | SpMessage::Takeover { head, .. } => {
            vec![head.id]
        }
        SpMessage::CacheExchange { entries, .. } => entries.iter().map(|e| e.head.id).collect(),
        SpMessage::TokenGossip { entries, .. } => entries.iter().map(|e| e.holder.id).collect(),
        SpMessage::Moved { to } => vec![to.id],
        SpMessage::ClusterView { members, .. } => members.to_vec(),
        SpMessage::Handover { members, view, .. } => {
            members.iter().map(|m| m.id).chain(view.iter().map(|e| e.holder.id)).collect()
        }
        SpMessage::HandoverAck { holder, .. } => vec![holder.id],
        SpMessage::Split { at, .. } => vec![at.id],
        SpMessage::HeadAlive { head } | SpMessage::StepDownTo { head } | SpMessage::SlotHeld { head, .. } => {
            vec![head.id]
        }
        SpMessage::MedoidProbe { sample } => sample.clone(),
        SpMessage::Attach { .. }
        | SpMessage::Refuse { .. }
        | SpMessage::Detach
        | SpMessage::StepDown
        | SpMessage::HandoverRefuse { .. }
        | SpMessage::HandoverStale { .. }
        | SpMessage::Access { .. }
        | SpMessage::MedoidCost { .. }
        | SpMessage::SizeSamples { .. }
        | SpMessage::Election { .. } => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use overlay::superpeer::{HeadRole, PeerInfo, SizeSample};
    use rand::{Rng, SeedableRng};
    use std::sync::Arc;

    fn view() -> SpMessage {
        let ids: Vec<NodeId> = (0..150u64).map(NodeId::from_u64).collect();
        SpMessage::ClusterView { role: HeadRole::Slot { key: NodeId::from_u64(7) }, members: Arc::from(ids) }
    }

    #[test]
    fn round_trip_and_book() {
        let key = libp2p::identity::Keypair::generate_ed25519();
        let peer = key.public().to_peer_id();
        let addr: Multiaddr = "/memory/1234".parse().unwrap();
        let book: Vec<BookEntry> = (0..150).map(|_| BookEntry::new(&peer, std::slice::from_ref(&addr))).collect();
        let p = Point::new(&[0.01, 0.02], 0.001);
        let bytes = encode_request(p, SpBody::Message { msg: view(), book }).unwrap();
        assert!(bytes.len() < MAX_SP_FRAME_BYTES / 2, "a capped cluster view fits: {} bytes", bytes.len());
        let r = decode_request(&bytes).unwrap();
        assert_eq!(r.point, p);
        let SpBody::Message { msg, book } = r.body else { panic!("not a message") };
        assert_eq!(msg, view());
        let (pp, id, addrs) = book[0].parse().unwrap();
        assert_eq!(pp, peer);
        assert_eq!(id, crate::directory::members::node_id_of(&peer));
        assert_eq!(addrs, vec![addr]);
        let rep = encode_reply(p, true).unwrap();
        assert!(rep.len() <= crate::net::codec::MAX_RESPONSE_BYTES as usize);
        assert_eq!(decode_reply(&rep).unwrap(), SpReply { version: SP_WIRE_VERSION, point: p, accepted: true });
        let attach = SpMessage::Attach { point: p };
        assert!(mentioned_ids(&attach).is_empty());
        let moved = SpMessage::Moved { to: PeerInfo { id: NodeId::from_u64(3), point: p } };
        assert_eq!(mentioned_ids(&moved), vec![NodeId::from_u64(3)]);
        // Pooled size samples travel as they are and mention nobody.
        let samples = SpMessage::SizeSamples {
            samples: vec![SizeSample { tag: 7, n: 201.5 }, SizeSample { tag: u64::MAX, n: 1e6 }],
        };
        assert!(mentioned_ids(&samples).is_empty());
        let f = encode_request(p, SpBody::Message { msg: samples.clone(), book: Vec::new() }).unwrap();
        let SpBody::Message { msg, .. } = decode_request(&f).unwrap().body else { panic!("not a message") };
        assert_eq!(msg, samples);
    }

    #[test]
    fn bad_frames_are_errors() {
        assert_eq!(decode_request(&[]), Err(SpWireError::Empty));
        assert!(matches!(decode_request(&vec![1u8; MAX_SP_FRAME_BYTES + 1]), Err(SpWireError::Oversized { .. })));
        let good = encode_request(Point::default(), SpBody::Hello).unwrap();
        let mut other = good.clone();
        other[0] = 9;
        assert!(matches!(decode_request(&other), Err(SpWireError::UnknownVersion { got: 9, .. })));
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(decode_request(&trailing), Err(SpWireError::Trailing(1)));
        assert!(decode_request(&good[..good.len() - 1]).is_err());
        let bad_point = Point { h: -1.0, ..Point::default() };
        let b = encode_request(bad_point, SpBody::Hello).unwrap();
        assert!(matches!(decode_request(&b), Err(SpWireError::OutOfBounds(_))));
        let too_many = SpBody::Message {
            msg: SpMessage::Detach,
            book: vec![BookEntry { peer: vec![0; 4], addrs: vec![] }; MAX_BOOK_ENTRIES + 1],
        };
        let b = encode_request(Point::default(), too_many).unwrap();
        assert!(matches!(decode_request(&b), Err(SpWireError::OutOfBounds(_))));
        assert!(decode_reply(&[1, 0, 0]).is_err());
    }

    #[test]
    fn random_bytes_never_panic() {
        let seed: u64 = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
        println!("superpeer_wire fuzz seed {seed} (replay with PEERAGE_SEED={seed})");
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let good = encode_request(Point::new(&[0.1], 0.01), SpBody::Message { msg: view(), book: vec![] }).unwrap();
        for _ in 0..20_000 {
            let mut b =
                if rng.gen_bool(0.5) { good.clone() } else { (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect() };
            for _ in 0..rng.gen_range(0..4) {
                if !b.is_empty() {
                    let i = rng.gen_range(0..b.len());
                    b[i] = rng.gen();
                }
            }
            if rng.gen_bool(0.2) && !b.is_empty() {
                b.truncate(rng.gen_range(0..b.len()));
            }
            let _ = decode_request(&b);
            let _ = decode_reply(&b);
        }
    }
}
