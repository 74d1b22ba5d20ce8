//! Property tests of every decoder in the protocol core: the election wire envelope, the
//! members-sync frames (through a live directory), signed member records and signed
//! broadcasts. Inputs are
//! arbitrary bytes and mutations (byte flips, cuts, insertions) of valid frames of every kind.
//! Each must be refused or decoded, never panic, and a refused members frame must leave the
//! directory as it was.
//!
//! Short run (CI): proptest's default of 256 cases per property. Long run:
//! `PROPTEST_CASES=200000 cargo nextest run -p overlay -p peerage-node -E 'binary(decoders)'`.

use libp2p_identity::{Keypair, PeerId};
use overlay::directory::{
    Bounds, Directory, RecordBody, SignedBroadcast, SignedRecord, SyncBody, SyncFrame, MEMBERS_VERSION,
};
use overlay::election::ElectionTag;
use overlay::wire::{self, Body};
use overlay::{Message, NodeId, Rank};
use proptest::prelude::*;

const NOW: u64 = 1_700_000_000_000_000;

fn r(i: u64) -> Rank {
    Rank::new(i, NodeId::from_u64(i))
}

/// One valid frame of every election message kind.
fn election_frames() -> Vec<Vec<u8>> {
    let tag = ElectionTag { round: 3, source: r(2) };
    let msgs = vec![
        Message::Election,
        Message::Answer,
        Message::Coordinator,
        Message::Alive,
        Message::IamUp,
        Message::View { up: vec![r(1), r(2)], coordinator: Some(r(2)) },
        Message::Nomination,
        Message::RingElection { epoch: 1, initiator: r(3), candidates: (0..20).map(r).collect() },
        Message::RingCoordinator { epoch: 2, initiator: r(1), leader: r(9), members: (0..9).map(r).collect() },
        Message::CrElection { epoch: 4, candidate: r(5) },
        Message::CrElected { epoch: 1 << 40, leader: r(5) },
        Message::Message1 { epoch: 1, candidate_predecessor: r(1) },
        Message::Message2 { epoch: 1, candidate_successor: r(2) },
        Message::Message3 { epoch: 1, candidate_predecessor: r(3) },
        Message::VillLeader { epoch: 1, leader: r(4) },
        Message::EchoElection { tag },
        Message::EchoAck { tag, best: Some(r(7)) },
        Message::EchoLeader { tag, leader: r(7) },
        Message::EchoProbe,
        Message::EchoReply { tag: Some(tag), leader: None },
        Message::EchoHeartbeat { tag: Some(tag), leader: r(7), seq: 12 },
    ];
    assert_eq!(msgs.len(), Message::KINDS.len(), "a frame of every kind");
    msgs.into_iter().map(|msg| wire::encode(&Body::Election { scope: 7, msg }).unwrap()).collect()
}

fn record(key: &Keypair, priority: u64) -> SignedRecord {
    let body =
        RecordBody { priority, incarnation: NOW, expires_us: NOW + 1_000_000_000, addrs: vec![vec![4, 127, 0, 0, 1]] };
    SignedRecord::sign(key, &body).unwrap()
}

/// One valid frame of every members-sync kind.
fn members_frames() -> Vec<Vec<u8>> {
    let recs: Vec<SignedRecord> = (0..3).map(|i| record(&Keypair::generate_ed25519(), i)).collect();
    let node = overlay::directory::node_id_of(&PeerId::random());
    let want = vec![overlay::directory::members::bucket_of(&node) as u16];
    let versions = vec![overlay::directory::members::Version { node, incarnation: 5 }];
    [
        SyncBody::Digest { count: 3, buckets: vec![0; overlay::directory::members::BUCKETS] },
        SyncBody::Summary { want: want.clone(), versions, entries: recs.clone() },
        SyncBody::Push { entries: recs, ask: vec![node] },
    ]
    .into_iter()
    .map(|body| postcard::to_stdvec(&SyncFrame { version: MEMBERS_VERSION, body }).unwrap())
    .collect()
}

/// Flip, cut and insert bytes.
fn mutate(mut b: Vec<u8>, flips: &[(usize, u8)], cut: Option<usize>, insert: Option<(usize, u8)>) -> Vec<u8> {
    for (i, v) in flips {
        if !b.is_empty() {
            let n = b.len();
            b[i % n] ^= v;
        }
    }
    if let Some((i, v)) = insert {
        let n = b.len() + 1;
        b.insert(i % n, v);
    }
    if let Some(c) = cut {
        let n = b.len() + 1;
        b.truncate(c % n);
    }
    b
}

fn directory() -> Directory {
    let key = Keypair::generate_ed25519();
    let me = record(&key, 1).open().unwrap();
    Directory::new(me, Bounds::default(), NOW)
}

proptest! {
    #[test]
    fn election_frames_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let _ = wire::decode(&bytes);
    }

    #[test]
    fn mutated_election_frames_never_panic(
        which in 0usize..20,
        flips in proptest::collection::vec((any::<usize>(), 1u8..), 0..6),
        cut in proptest::option::of(any::<usize>()),
        insert in proptest::option::of((any::<usize>(), any::<u8>())),
    ) {
        let frames = election_frames();
        let f = mutate(frames[which].clone(), &flips, cut, insert);
        if let Ok(body) = wire::decode(&f) {
            // Whatever decodes encodes back to a frame that decodes to the same body.
            let again = wire::encode(&body).unwrap();
            prop_assert_eq!(wire::decode(&again).unwrap(), body);
        }
    }

    #[test]
    fn members_frames_never_panic_and_refusals_change_nothing(
        which in 0usize..3,
        flips in proptest::collection::vec((any::<usize>(), 1u8..), 0..6),
        cut in proptest::option::of(any::<usize>()),
        insert in proptest::option::of((any::<usize>(), any::<u8>())),
        raw in proptest::collection::vec(any::<u8>(), 0..512),
        use_raw in any::<bool>(),
    ) {
        let f = if use_raw { raw } else { mutate(members_frames()[which].clone(), &flips, cut, insert) };
        let mut d = directory();
        let before = (*d.bucket_hashes(), d.len());
        let from = libp2p_identity::PeerId::random();
        match d.handle(from, &f, NOW) {
            Err(_) => prop_assert_eq!(before, (*d.bucket_hashes(), d.len())),
            Ok(h) => prop_assert!(h.changed <= 3),
        }
    }

    #[test]
    fn records_never_panic_and_never_open_when_changed(
        flips in proptest::collection::vec((any::<usize>(), 1u8..), 1..4),
        part in 0usize..3,
    ) {
        let rec = record(&Keypair::generate_ed25519(), 5);
        let mut bad = rec.clone();
        let target = match part { 0 => &mut bad.public_key, 1 => &mut bad.body, _ => &mut bad.signature };
        *target = mutate(target.clone(), &flips, None, None);
        if bad != rec {
            prop_assert!(bad.open().is_err(), "a changed record must not verify");
        }
    }

    #[test]
    fn broadcasts_never_panic_and_never_open_when_changed(
        flips in proptest::collection::vec((any::<usize>(), 1u8..), 1..4),
        part in 0usize..4,
        bytes in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        if let Ok(b) = postcard::from_bytes::<SignedBroadcast>(&bytes) {
            let _ = b.open(NOW);
        }
        let key = Keypair::generate_ed25519();
        let b = SignedBroadcast::sign(&key, NOW, election_frames()[0].clone()).unwrap();
        let mut bad = b.clone();
        match part {
            0 => bad.public_key = mutate(bad.public_key, &flips, None, None),
            1 => bad.payload = mutate(bad.payload, &flips, None, None),
            2 => bad.signature = mutate(bad.signature, &flips, None, None),
            _ => bad.sent_us ^= 1 + flips[0].1 as u64,
        }
        if bad != b {
            prop_assert!(bad.open(NOW).is_err(), "a changed broadcast must not verify");
        }
    }
}
