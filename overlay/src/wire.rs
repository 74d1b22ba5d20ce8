//! The wire format: a versioned envelope around every message Peerage nodes exchange.
//!
//! Encoding is `postcard` (compact, serde-based). The envelope's first field is the wire
//! version, so a decoder can refuse a frame from an incompatible peer before it reads the
//! body. [`decode`] never panics: malformed, truncated, trailing-garbage, oversized and
//! unknown-version input each come back as a [`WireError`]. Allocation is bounded by the
//! frame size limit, because serde's sequence decoding never preallocates more than the
//! bytes present justify.

use crate::election::Message;
use serde::{Deserialize, Serialize};

/// The wire version this build speaks.
pub const WIRE_VERSION: u16 = 1;

/// The largest frame accepted (and produced). A ring `Election` message listing 10,000
/// members is about 420 KiB.
pub const MAX_FRAME_BYTES: usize = 1024 * 1024;

/// What travels between nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Body {
    /// An election message. `scope` names the group the election runs in: 0 for the whole
    /// swarm, otherwise a cluster.
    Election { scope: u64, msg: Message },
}

/// The envelope: version first, then the body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub version: u16,
    pub body: Body,
}

/// Why a frame was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    Oversized { len: usize, max: usize },
    #[error("empty frame")]
    Empty,
    #[error("unsupported wire version {got} (this node speaks {supported})")]
    UnknownVersion { got: u16, supported: u16 },
    #[error("malformed frame: {0}")]
    Malformed(String),
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
}

/// Encode a body in the current version.
pub fn encode(body: &Body) -> Result<Vec<u8>, WireError> {
    let env = Envelope { version: WIRE_VERSION, body: body.clone() };
    let bytes = postcard::to_stdvec(&env).map_err(|e| WireError::Malformed(e.to_string()))?;
    if bytes.len() > MAX_FRAME_BYTES {
        return Err(WireError::Oversized { len: bytes.len(), max: MAX_FRAME_BYTES });
    }
    Ok(bytes)
}

/// Decode one frame. Never panics.
pub fn decode(bytes: &[u8]) -> Result<Body, WireError> {
    if bytes.is_empty() {
        return Err(WireError::Empty);
    }
    if bytes.len() > MAX_FRAME_BYTES {
        return Err(WireError::Oversized { len: bytes.len(), max: MAX_FRAME_BYTES });
    }
    let (version, _) =
        postcard::take_from_bytes::<u16>(bytes).map_err(|e| WireError::Malformed(format!("version: {e}")))?;
    if version != WIRE_VERSION {
        return Err(WireError::UnknownVersion { got: version, supported: WIRE_VERSION });
    }
    let (env, rest) = postcard::take_from_bytes::<Envelope>(bytes).map_err(|e| WireError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(WireError::Trailing(rest.len()));
    }
    Ok(env.body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::{NodeId, Rank};
    use rand::{Rng, SeedableRng};

    fn sample() -> Vec<Body> {
        let r = |i| Rank::new(i, NodeId::from_u64(i));
        vec![
            Body::Election { scope: 0, msg: Message::Election },
            Body::Election { scope: 7, msg: Message::View { up: vec![r(1), r(2)], coordinator: Some(r(2)) } },
            Body::Election {
                scope: 1,
                msg: Message::RingElection { epoch: 1, initiator: r(3), candidates: (0..50).map(r).collect() },
            },
        ]
    }

    #[test]
    fn round_trip() {
        for b in sample() {
            let bytes = encode(&b).unwrap();
            assert_eq!(decode(&bytes).unwrap(), b);
        }
    }

    #[test]
    fn refuses_bad_frames() {
        assert_eq!(decode(&[]), Err(WireError::Empty));
        let big = vec![0u8; MAX_FRAME_BYTES + 1];
        assert!(matches!(decode(&big), Err(WireError::Oversized { .. })));
        // Version 2 (postcard varint 0x02).
        let mut v2 = encode(&sample()[0]).unwrap();
        v2[0] = 2;
        assert_eq!(decode(&v2), Err(WireError::UnknownVersion { got: 2, supported: 1 }));
        let mut trailing = encode(&sample()[0]).unwrap();
        trailing.push(0);
        assert_eq!(decode(&trailing), Err(WireError::Trailing(1)));
        // Truncations of a long frame are all refused, never a panic.
        let long = encode(&sample()[2]).unwrap();
        for cut in 1..long.len() {
            assert!(decode(&long[..cut]).is_err(), "truncated at {cut} decoded");
        }
        // A sequence claiming 2^60 elements.
        let huge_len = [1u8, 0, 0, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(decode(&huge_len).is_err());
    }

    #[test]
    fn random_bytes_never_panic() {
        let seed: u64 = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(7);
        println!("seed {seed} (replay with PEERAGE_SEED={seed})");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        for _ in 0..20_000 {
            let len = rng.gen_range(0..64);
            let mut bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            if !bytes.is_empty() {
                bytes[0] = 1; // mostly the right version, to reach the body decoder
            }
            let _ = decode(&bytes);
        }
    }
}
