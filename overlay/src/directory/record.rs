//! A member record: what a member says about itself, signed with its own libp2p key.
//!
//! Built as libp2p's signed peer records are (`SignedEnvelope` around a `PeerRecord`): the
//! envelope carries the signer's public key (protobuf encoding), the payload bytes and a
//! signature over `domain || payload type || payload`, each prefixed by its unsigned-varint
//! length. The subject is the peer id of that key, so nobody but the subject can write a
//! record about it. Our payload is a [`RecordBody`]: priority (capacity), incarnation,
//! expiry and addresses, postcard-encoded. The payload is kept as the bytes that were
//! signed, so a record is relayed byte for byte and never re-encoded.
//!
//! Departure from libp2p: its `PeerRecord` has no priority or expiry, and its sequence number
//! has no bound; ours has both (`admission`).
//!
//! **Cost.** Decoding an ed25519 key decompresses a curve point (a field exponentiation), as
//! costly as a good part of a signature check; a directory sync looks up the subject of every
//! record it receives, most of them known already. So [`SignedRecord::subject`] derives the
//! peer id from the key's bytes as libp2p does (the bytes inlined in an identity multihash
//! up to 42 bytes, their SHA-256 beyond) without decoding them, and [`SignedRecord::open`],
//! which decodes the key to check the signature, refuses a key whose encoding is not the
//! canonical one that id was derived from.

use super::admission::Refusal;
use crate::id::NodeId;
use libp2p_identity::{Keypair, PeerId, PublicKey};
use multiaddr::Multiaddr;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The signature domain of member records (no other signature can be replayed as one).
pub const RECORD_DOMAIN: &[u8] = b"peerage-member-record";
/// The payload type of member records.
pub const RECORD_PAYLOAD_TYPE: &[u8] = b"/peerage/member-record/1";
/// Largest encoded public key accepted (ed25519 is 36 bytes, secp256k1 37, ECDSA P-256 ~95).
pub const MAX_KEY_BYTES: usize = 128;
/// Largest payload accepted (four addresses of up to 64 bytes and the numbers).
pub const MAX_BODY_BYTES: usize = 384;
/// Largest signature accepted (ECDSA DER is at most 72 bytes).
pub const MAX_SIGNATURE_BYTES: usize = 96;
/// Addresses per record.
pub const MAX_ADDRS: usize = 4;
/// Largest address (bytes).
pub const MAX_ADDR_BYTES: usize = 64;
/// Largest record on the wire: its three byte strings at their limits, each behind its
/// postcard length (a varint of 2 bytes below 16,384).
pub const MAX_RECORD_WIRE_BYTES: usize = MAX_KEY_BYTES + MAX_BODY_BYTES + MAX_SIGNATURE_BYTES + 3 * 2;

/// What a member says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordBody {
    /// Election priority (capacity, for the echo election).
    pub priority: u64,
    /// Raised by the subject on every change: its wall clock in microseconds, or one more than
    /// the previous incarnation if that is later.
    pub incarnation: u64,
    /// Wall-clock microseconds after which the record is void.
    pub expires_us: u64,
    /// Addresses, as multiaddr bytes.
    pub addrs: Vec<Vec<u8>>,
}

/// A record as it travels: key, payload and signature.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SignedRecord {
    pub public_key: Vec<u8>,
    pub body: Vec<u8>,
    pub signature: Vec<u8>,
}

/// A verified record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub peer: PeerId,
    pub node: NodeId,
    pub priority: u64,
    pub incarnation: u64,
    pub expires_us: u64,
    pub addrs: Vec<Multiaddr>,
    pub signed: SignedRecord,
}

/// The signing key could not sign.
#[derive(Debug, thiserror::Error)]
#[error("cannot sign a member record: {0}")]
pub struct SignError(String);

impl From<Refusal> for SignError {
    fn from(r: Refusal) -> Self {
        SignError(format!("the record just signed does not open: {}", r.name()))
    }
}

fn varint(n: usize, out: &mut Vec<u8>) {
    out.extend_from_slice(unsigned_varint::encode::usize(n, &mut unsigned_varint::encode::usize_buffer()));
}

/// The bytes a signature covers in libp2p's envelope layout: the domain, the payload type and
/// each part of the payload, each prefixed by its unsigned-varint length.
pub(crate) fn envelope_bytes(domain: &[u8], payload_type: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let len = domain.len() + payload_type.len() + parts.iter().map(|p| p.len() + 3).sum::<usize>() + 6;
    let mut out = Vec::with_capacity(len);
    for part in [domain, payload_type].into_iter().chain(parts.iter().copied()) {
        varint(part.len(), &mut out);
        out.extend_from_slice(part);
    }
    out
}

/// The bytes a record's signature covers.
fn signed_bytes(body: &[u8]) -> Vec<u8> {
    envelope_bytes(RECORD_DOMAIN, RECORD_PAYLOAD_TYPE, &[body])
}

/// The signer of `message`: the peer id of the protobuf-encoded `public_key`, if the key is
/// the canonical encoding that id is derived from and `signature` checks under it.
pub(crate) fn verify_signer(public_key: &[u8], message: &[u8], signature: &[u8]) -> Result<PeerId, Refusal> {
    if public_key.len() > MAX_KEY_BYTES {
        return Err(Refusal::Malformed);
    }
    let signer = peer_id_of_key_bytes(public_key)?;
    let key = PublicKey::try_decode_protobuf(public_key).map_err(|_| Refusal::BadKey)?;
    if key.to_peer_id() != signer {
        return Err(Refusal::BadKey);
    }
    if !key.verify(message, signature) {
        return Err(Refusal::BadSignature);
    }
    Ok(signer)
}

/// Longest protobuf-encoded key that libp2p inlines in a peer id (identity multihash).
const MAX_INLINE_KEY_BYTES: usize = 42;

/// The peer id of a protobuf-encoded public key, from its bytes alone (libp2p's rule:
/// identity multihash up to [`MAX_INLINE_KEY_BYTES`], SHA-256 multihash beyond).
fn peer_id_of_key_bytes(key: &[u8]) -> Result<PeerId, Refusal> {
    let mut multihash = Vec::with_capacity(2 + key.len().max(32));
    if key.len() <= MAX_INLINE_KEY_BYTES {
        multihash.push(0x00);
        varint(key.len(), &mut multihash);
        multihash.extend_from_slice(key);
    } else {
        multihash.extend_from_slice(&[0x12, 0x20]);
        multihash.extend_from_slice(&Sha256::digest(key));
    }
    PeerId::from_bytes(&multihash).map_err(|_| Refusal::BadKey)
}

/// The node id of a peer: SHA-256 of its peer id bytes (Kademlia's key of the peer).
pub fn node_id_of(peer: &PeerId) -> NodeId {
    NodeId::hash_of(&peer.to_bytes())
}

impl SignedRecord {
    /// Sign `body` with `key`.
    pub fn sign(key: &Keypair, body: &RecordBody) -> Result<SignedRecord, SignError> {
        let bytes = postcard::to_stdvec(body).map_err(|e| SignError(e.to_string()))?;
        if bytes.len() > MAX_BODY_BYTES {
            return Err(SignError(format!("record body of {} bytes (limit {MAX_BODY_BYTES})", bytes.len())));
        }
        let signature = key.sign(&signed_bytes(&bytes)).map_err(|e| SignError(e.to_string()))?;
        Ok(SignedRecord { public_key: key.public().encode_protobuf(), body: bytes, signature })
    }

    /// The subject's peer id, from the key's bytes alone (cheap: the key is not decoded and
    /// the signature not checked; `open` does both).
    pub fn subject(&self) -> Result<PeerId, Refusal> {
        if self.public_key.len() > MAX_KEY_BYTES {
            return Err(Refusal::Malformed);
        }
        peer_id_of_key_bytes(&self.public_key)
    }

    /// The body, decoded but not verified (cheap checks run on it before the signature).
    pub fn peek(&self) -> Result<RecordBody, Refusal> {
        if self.body.len() > MAX_BODY_BYTES || self.signature.len() > MAX_SIGNATURE_BYTES {
            return Err(Refusal::Malformed);
        }
        let (body, rest) = postcard::take_from_bytes::<RecordBody>(&self.body).map_err(|_| Refusal::Malformed)?;
        if !rest.is_empty() || body.addrs.len() > MAX_ADDRS || body.addrs.iter().any(|a| a.len() > MAX_ADDR_BYTES) {
            return Err(Refusal::Malformed);
        }
        Ok(body)
    }

    /// Verify the signature and decode: the record, or why it is refused. Addresses that do
    /// not parse are dropped (they are hints; the noise handshake checks whoever answers).
    pub fn open(&self) -> Result<Record, Refusal> {
        self.peek()?;
        // The subject is derived from the key's bytes: they must be its canonical encoding.
        verify_signer(&self.public_key, &signed_bytes(&self.body), &self.signature)?;
        self.assemble()
    }

    /// Decode the record whose signature `open` checked.
    fn assemble(&self) -> Result<Record, Refusal> {
        let body = self.peek()?;
        let peer = self.subject()?;
        let addrs = body.addrs.iter().filter_map(|a| Multiaddr::try_from(a.clone()).ok()).collect();
        Ok(Record {
            peer,
            node: node_id_of(&peer),
            priority: body.priority,
            incarnation: body.incarnation,
            expires_us: body.expires_us,
            addrs,
            signed: self.clone(),
        })
    }

    /// Bytes this record occupies (for memory accounting).
    pub fn size(&self) -> usize {
        self.public_key.len() + self.body.len() + self.signature.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body() -> RecordBody {
        RecordBody {
            priority: 7,
            incarnation: 1_000,
            expires_us: 2_000,
            addrs: vec!["/memory/42".parse::<Multiaddr>().unwrap().to_vec()],
        }
    }

    #[test]
    fn signed_by_its_subject_only() {
        let key = Keypair::generate_ed25519();
        let r = SignedRecord::sign(&key, &body()).unwrap();
        let open = r.open().unwrap();
        assert_eq!(open.peer, key.public().to_peer_id());
        assert_eq!(open.priority, 7);
        assert_eq!(open.addrs.len(), 1);
        assert_eq!(r.subject().unwrap(), open.peer);
        // Another key over the same body: a different subject, never the first one.
        let other = Keypair::generate_ed25519();
        let mut forged = r.clone();
        forged.public_key = other.public().encode_protobuf();
        assert_eq!(forged.open(), Err(Refusal::BadSignature));
        // A changed body under the old signature.
        let mut b = body();
        b.priority = u64::MAX;
        let mut tampered = r.clone();
        tampered.body = postcard::to_stdvec(&b).unwrap();
        assert_eq!(tampered.open(), Err(Refusal::BadSignature));
        // No signature, garbage key, oversized parts.
        let mut unsigned = r.clone();
        unsigned.signature.clear();
        assert_eq!(unsigned.open(), Err(Refusal::BadSignature));
        let mut badkey = r.clone();
        badkey.public_key = vec![1, 2, 3];
        assert_eq!(badkey.open(), Err(Refusal::BadKey));
        // The same key in a non-canonical encoding (a protobuf field repeated: the decoder
        // keeps the last) would claim another subject than the key's: refused.
        let mut padded = r.clone();
        padded.public_key = [key.public().encode_protobuf(), key.public().encode_protobuf()].concat();
        assert_ne!(padded.subject().ok(), Some(open.peer));
        assert_eq!(padded.open(), Err(Refusal::BadKey));
        let mut big = r.clone();
        big.body = vec![0; MAX_BODY_BYTES + 1];
        assert_eq!(big.open(), Err(Refusal::Malformed));
    }

    /// The subject from the key's bytes is libp2p's peer id of the key (ed25519, the only key
    /// type this build decodes).
    #[test]
    fn subject_from_bytes_is_the_keys_peer_id() {
        for key in (0..16).map(|_| Keypair::generate_ed25519()) {
            let r = SignedRecord::sign(&key, &body()).unwrap();
            assert_eq!(r.subject().unwrap(), key.public().to_peer_id());
            assert_eq!(r.open().unwrap().peer, key.public().to_peer_id());
        }
    }

    #[test]
    fn the_signature_covers_the_domain() {
        // A signature by the same key over the bare payload (another protocol's use of the
        // key) does not verify as a record.
        let key = Keypair::generate_ed25519();
        let mut r = SignedRecord::sign(&key, &body()).unwrap();
        r.signature = key.sign(&r.body).unwrap();
        assert_eq!(r.open(), Err(Refusal::BadSignature));
    }
}
