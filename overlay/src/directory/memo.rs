//! A memo of records whose signatures were checked, shared by the directories of one process.
//!
//! Checking a record opens it: the key decoded (a curve point decompressed) and the ed25519
//! signature verified, tens of microseconds. Every node checks every member's record once, so
//! a swarm of N nodes in one process checks N² records: at N = 1,000 a million checks, the
//! largest single cost of its start (a profile of the 500-node swarm put a third of the CPU
//! in curve arithmetic). The check is a pure function of the record's bytes, so its success
//! can be shared: a directory given a memo opens a record whose bytes it holds without
//! checking again. A node alone in its process gains nothing and loses nothing.
//!
//! The memo also keeps the record it opened, and hands out that one copy: the N directories
//! of a swarm in one process hold one decoded record per member between them, not N (at
//! N = 1,000 the copies were about a quarter of a gigabyte).
//!
//! Keyed by the SHA-256 of the record's three parts, each prefixed by its length, so no two
//! records share a key short of a hash collision. Only successes are kept; a record that
//! failed is checked again (and refused again) every time. Bounded: two generations of
//! `capacity` records each; when the newer is full the older is dropped, so the memo keeps
//! the most recently checked records and never more than twice `capacity`. A record asked
//! for again after its generation was dropped is checked again and kept anew.

use super::admission::Refusal;
use super::record::{Record, SignedRecord};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

type Generation = HashMap<[u8; 32], Arc<Record>>;

/// Records checked, shared across directories (module doc).
#[derive(Debug)]
pub struct VerifiedMemo {
    capacity: usize,
    generations: Mutex<[Generation; 2]>,
}

impl VerifiedMemo {
    /// A memo of at most `2 x capacity` records (at least one each).
    pub fn new(capacity: usize) -> VerifiedMemo {
        VerifiedMemo { capacity: capacity.max(1), generations: Mutex::new([Generation::new(), Generation::new()]) }
    }

    fn key(r: &SignedRecord) -> [u8; 32] {
        let mut h = Sha256::new();
        for part in [&r.public_key, &r.body, &r.signature] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
        h.finalize().into()
    }

    /// `r.open()`, without the signature check when the same bytes opened before, and then
    /// the copy opened before.
    pub fn open(&self, r: &SignedRecord) -> Result<Arc<Record>, Refusal> {
        let key = Self::key(r);
        // A poisoned lock only means another thread panicked mid-insert: the maps still hold
        // only records that opened.
        let known = {
            let g = self.generations.lock().unwrap_or_else(|p| p.into_inner());
            g[0].get(&key).or_else(|| g[1].get(&key)).cloned()
        };
        if let Some(rec) = known {
            return Ok(rec);
        }
        let rec = Arc::new(r.open()?);
        let mut g = self.generations.lock().unwrap_or_else(|p| p.into_inner());
        if g[0].len() >= self.capacity {
            g[1] = std::mem::take(&mut g[0]);
        }
        g[0].insert(key, rec.clone());
        Ok(rec)
    }

    /// Records held.
    pub fn len(&self) -> usize {
        let g = self.generations.lock().unwrap_or_else(|p| p.into_inner());
        g[0].len() + g[1].len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::RecordBody;
    use libp2p_identity::Keypair;

    fn record(key: &Keypair, incarnation: u64) -> SignedRecord {
        let body = RecordBody { priority: 1, incarnation, expires_us: incarnation + 10, addrs: vec![] };
        SignedRecord::sign(key, &body).unwrap()
    }

    /// What the memo opens is what `open` opens; a forgery of a remembered record (its body
    /// changed under the same signature) is still checked and refused.
    #[test]
    fn opens_as_open_does_and_refuses_forgeries_of_what_it_holds() {
        let key = Keypair::generate_ed25519();
        let memo = VerifiedMemo::new(16);
        let r = record(&key, 5);
        let first = memo.open(&r).unwrap();
        assert_eq!(*first, r.open().unwrap());
        assert_eq!(memo.len(), 1);
        let second = memo.open(&r).unwrap();
        assert_eq!(*second, r.open().unwrap(), "a second open, from the memo");
        assert!(Arc::ptr_eq(&first, &second), "the second open hands out the first copy");
        let mut forged = r.clone();
        forged.body = record(&key, 6).body;
        assert_eq!(memo.open(&forged), Err(Refusal::BadSignature));
        let mut other_key = r.clone();
        other_key.public_key = Keypair::generate_ed25519().public().encode_protobuf();
        assert_eq!(memo.open(&other_key), Err(Refusal::BadSignature));
        assert_eq!(memo.len(), 1, "failures are not kept");
    }

    /// Two generations of `capacity`: never more than twice it, and the newest kept.
    #[test]
    fn bounded_to_two_generations() {
        let key = Keypair::generate_ed25519();
        let memo = VerifiedMemo::new(4);
        let records: Vec<SignedRecord> = (1..=20).map(|i| record(&key, i)).collect();
        for r in &records {
            assert!(memo.open(r).is_ok());
            assert!(memo.len() <= 8, "{}", memo.len());
        }
        let g = memo.generations.lock().unwrap();
        assert!(g[0].contains_key(&VerifiedMemo::key(&records[19])));
    }
}
