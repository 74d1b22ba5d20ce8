//! A message published to many peers at once (the gossipsub election topic), signed by its
//! author with the author's libp2p key and stamped with the author's wall clock.
//!
//! **Why not gossipsub's own signature.** libp2p's gossipsub checks the signature of every
//! copy a node receives, before it drops duplicates: with a mesh of six, a node checks about
//! six signatures per message, and a leader's `Alive` each second was the largest single cost
//! of a 1,000-node swarm.
//! Gossipsub therefore runs unsigned (anonymous mode, message ids are a hash of the bytes, so
//! duplicates are still dropped first), and the node opens each *distinct* message once, here.
//!
//! **Layout.** As the member records (`super::record`, libp2p's signed envelope): the
//! signature covers `domain || payload type || sent_us || payload`, each prefixed by its
//! unsigned-varint length, with a domain of its own so that no member record or other
//! signature can be replayed as a broadcast. The author is the peer id of the key.
//!
//! **Replays.** A copy replayed byte for byte has the same message id and is dropped by
//! gossipsub's duplicate cache while the cache remembers it; [`BROADCAST_WINDOW_US`] refuses
//! it afterwards, because a broadcast is accepted only within that window of its stamp, on
//! either side (clock skew), and the cache outlives both sides of the window (the node checks
//! `duplicate_cache_time >= 2 x window`). Departure from gossipsub's strict mode: no sequence
//! numbers; the stamp and the window play their part.

use super::admission::Refusal;
use super::record::{envelope_bytes, verify_signer, MAX_KEY_BYTES, MAX_SIGNATURE_BYTES};
use libp2p_identity::{Keypair, PeerId};
use serde::{Deserialize, Serialize};

/// Version of the signed broadcast envelope.
pub const SIGNED_BROADCAST_VERSION: u16 = 2;
/// The signature domain of broadcasts.
pub const BROADCAST_DOMAIN: &[u8] = b"peerage-broadcast";
/// The payload type of broadcasts.
pub const BROADCAST_PAYLOAD_TYPE: &[u8] = b"/peerage/broadcast/2";
/// A broadcast is accepted while its stamp is at most this far from the receiver's wall
/// clock, on either side.
pub const BROADCAST_WINDOW_US: u64 = 20_000_000;

/// A broadcast as it travels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedBroadcast {
    pub version: u16,
    pub public_key: Vec<u8>,
    /// The author's wall clock when it signed, microseconds since the Unix epoch.
    pub sent_us: u64,
    pub payload: Vec<u8>,
    pub signature: Vec<u8>,
}

/// The signing key could not sign.
#[derive(Debug, thiserror::Error)]
#[error("cannot sign a broadcast: {0}")]
pub struct BroadcastSignError(String);

fn signed_bytes(sent_us: u64, payload: &[u8]) -> Vec<u8> {
    envelope_bytes(BROADCAST_DOMAIN, BROADCAST_PAYLOAD_TYPE, &[&sent_us.to_le_bytes(), payload])
}

impl SignedBroadcast {
    /// Sign `payload` with `key`, stamped `sent_us`.
    pub fn sign(key: &Keypair, sent_us: u64, payload: Vec<u8>) -> Result<SignedBroadcast, BroadcastSignError> {
        let signature = key.sign(&signed_bytes(sent_us, &payload)).map_err(|e| BroadcastSignError(e.to_string()))?;
        Ok(SignedBroadcast {
            version: SIGNED_BROADCAST_VERSION,
            public_key: key.public().encode_protobuf(),
            sent_us,
            payload,
            signature,
        })
    }

    /// Check version, size, stamp, key and signature: the author and the payload, or why the
    /// broadcast is refused. `Expired`/`Future` say the stamp is outside the window (a replay
    /// or a clock too far off); every other refusal is a lie or a broken sender.
    pub fn open(&self, now_us: u64) -> Result<(PeerId, &[u8]), Refusal> {
        if self.version != SIGNED_BROADCAST_VERSION
            || self.public_key.len() > MAX_KEY_BYTES
            || self.signature.len() > MAX_SIGNATURE_BYTES
        {
            return Err(Refusal::Malformed);
        }
        if self.sent_us.saturating_add(BROADCAST_WINDOW_US) < now_us {
            return Err(Refusal::Expired);
        }
        if self.sent_us > now_us.saturating_add(BROADCAST_WINDOW_US) {
            return Err(Refusal::Future);
        }
        let author = verify_signer(&self.public_key, &signed_bytes(self.sent_us, &self.payload), &self.signature)?;
        Ok((author, &self.payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::record::{RecordBody, SignedRecord};

    const NOW: u64 = 1_700_000_000_000_000;

    #[test]
    fn opens_for_its_author_within_the_window_only() {
        let key = Keypair::generate_ed25519();
        let b = SignedBroadcast::sign(&key, NOW, b"alive".to_vec()).unwrap();
        assert_eq!(b.open(NOW).unwrap(), (key.public().to_peer_id(), &b"alive"[..]));
        assert!(b.open(NOW + BROADCAST_WINDOW_US).is_ok());
        assert!(b.open(NOW - BROADCAST_WINDOW_US).is_ok());
        assert_eq!(b.open(NOW + BROADCAST_WINDOW_US + 1), Err(Refusal::Expired), "a late replay");
        assert_eq!(b.open(NOW - BROADCAST_WINDOW_US - 1), Err(Refusal::Future));
    }

    #[test]
    fn any_change_is_refused() {
        let key = Keypair::generate_ed25519();
        let other = Keypair::generate_ed25519();
        let b = SignedBroadcast::sign(&key, NOW, b"alive".to_vec()).unwrap();
        let restamped = SignedBroadcast { sent_us: NOW + 1, ..b.clone() };
        assert_eq!(restamped.open(NOW), Err(Refusal::BadSignature), "the stamp is signed");
        let altered = SignedBroadcast { payload: b"coordinator".to_vec(), ..b.clone() };
        assert_eq!(altered.open(NOW), Err(Refusal::BadSignature));
        let claimed = SignedBroadcast { public_key: other.public().encode_protobuf(), ..b.clone() };
        assert_eq!(claimed.open(NOW), Err(Refusal::BadSignature), "another author's key");
        let newer = SignedBroadcast { version: SIGNED_BROADCAST_VERSION + 1, ..b.clone() };
        assert_eq!(newer.open(NOW), Err(Refusal::Malformed));
        let garbage_key = SignedBroadcast { public_key: vec![1, 2, 3], ..b };
        assert!(matches!(garbage_key.open(NOW), Err(Refusal::BadKey)));
    }

    /// A member record's signature does not open as a broadcast of the same bytes: the
    /// domains differ.
    #[test]
    fn a_member_record_signature_is_no_broadcast() {
        let key = Keypair::generate_ed25519();
        let body = RecordBody { priority: 1, incarnation: NOW, expires_us: NOW + 1, addrs: vec![] };
        let r = SignedRecord::sign(&key, &body).unwrap();
        let b = SignedBroadcast {
            version: SIGNED_BROADCAST_VERSION,
            public_key: r.public_key,
            sent_us: NOW,
            payload: r.body,
            signature: r.signature,
        };
        assert_eq!(b.open(NOW), Err(Refusal::BadSignature));
    }
}
