//! Property tests of the node's decoders: the super-peer wire (requests and replies), the
//! gossipsub broadcast envelope, coordinate frames and the length-prefixed request framing.
//! Arbitrary bytes and mutations of valid frames are refused or decoded, never a panic.
//!
//! Short run (CI): proptest's default of 256 cases per property. Long run:
//! `PROPTEST_CASES=200000 cargo nextest run -p overlay -p peerage-node -E 'binary(decoders)'`.

use overlay::superpeer::{HeadRole, PeerInfo, Point, SpMessage};
use overlay::NodeId;
use peerage_node::coords::driver::CoordsFrame;
use peerage_node::election::driver::{BroadcastFrame, Recipients, BROADCAST_VERSION};
use peerage_node::net::codec::{read_frame, InboundBudget};
use peerage_node::superpeer::wire::{decode_reply, decode_request, encode_reply, encode_request, SpBody};
use proptest::prelude::*;
use std::sync::Arc;

fn sp_frames() -> Vec<Vec<u8>> {
    let p = Point::new(&[0.01, 0.02], 0.001);
    let info = PeerInfo { id: NodeId::from_u64(3), point: p };
    let msgs = vec![
        SpMessage::Announce { head: info, room: true },
        SpMessage::Accept { role: HeadRole::Slot { key: NodeId::from_u64(1 << 60) }, head: info },
        SpMessage::Moved { to: info },
        SpMessage::ClusterView {
            role: HeadRole::Slot { key: NodeId::MIN },
            members: Arc::from(vec![NodeId::from_u64(9)]),
        },
        SpMessage::SlotHeld { key: NodeId::MIN, head: info },
        SpMessage::Attach { point: p },
        SpMessage::Detach,
    ];
    let mut v: Vec<Vec<u8>> =
        msgs.into_iter().map(|msg| encode_request(p, SpBody::Message { msg, book: vec![] }).unwrap()).collect();
    v.push(encode_request(p, SpBody::Hello).unwrap());
    v.push(encode_reply(p, true).unwrap());
    v
}

fn mutate(mut b: Vec<u8>, flips: &[(usize, u8)], cut: Option<usize>) -> Vec<u8> {
    for (i, x) in flips {
        if !b.is_empty() {
            let n = b.len();
            b[i % n] ^= x;
        }
    }
    if let Some(c) = cut {
        let n = b.len() + 1;
        b.truncate(c % n);
    }
    b
}

proptest! {
    #[test]
    fn superpeer_frames_never_panic(
        which in 0usize..9,
        flips in proptest::collection::vec((any::<usize>(), 1u8..), 0..6),
        cut in proptest::option::of(any::<usize>()),
        raw in proptest::collection::vec(any::<u8>(), 0..512),
        use_raw in any::<bool>(),
    ) {
        let f = if use_raw { raw } else { mutate(sp_frames()[which].clone(), &flips, cut) };
        let _ = decode_request(&f);
        let _ = decode_reply(&f);
    }

    #[test]
    fn broadcast_and_coordinate_frames_never_panic(
        raw in proptest::collection::vec(any::<u8>(), 0..512),
        flips in proptest::collection::vec((any::<usize>(), 1u8..), 0..6),
        cut in proptest::option::of(any::<usize>()),
    ) {
        let valid = postcard::to_stdvec(&BroadcastFrame {
            version: BROADCAST_VERSION,
            to: Recipients::List(vec![NodeId::from_u64(1)]),
            frame: vec![1, 0, 2],
        })
        .unwrap();
        for f in [raw.clone(), mutate(valid, &flips, cut)] {
            let _ = postcard::from_bytes::<BroadcastFrame>(&f);
            let _ = CoordsFrame::decode(&f);
        }
    }

    #[test]
    fn request_framing_never_panics_and_never_holds_budget(
        raw in proptest::collection::vec(any::<u8>(), 0..256),
        limit in 0u64..300,
    ) {
        let budget = InboundBudget::new(1 << 20);
        futures::executor::block_on(async {
            let r = read_frame(&mut futures::io::Cursor::new(raw), limit, &budget, None).await;
            if let Ok(f) = r {
                assert!(f.len() as u64 <= limit);
            }
        });
        prop_assert_eq!(budget.in_flight(), 0);
    }
}
