//! Malformed and oversized bytes on the election protocol: the node logs an error (counted in
//! its `bad_frames`), refuses the frame, and goes on serving: it still answers a well-formed
//! frame afterwards and the swarm still agrees on its leader.

use futures::StreamExt;
use libp2p::core::{transport::MemoryTransport, upgrade::Version, Transport};
use libp2p::request_response::{self, Event, Message as RrMessage, ProtocolSupport};
use libp2p::swarm::SwarmEvent;
use libp2p::{noise, yamux, StreamProtocol, SwarmBuilder};
use overlay::wire::{self, Body};
use overlay::{Algorithm, ElectionConfig, Message};
use peerage_node::net::behaviour::ELECTION_PROTOCOL;
use peerage_node::net::codec::{FrameCodec, ACK_OK, ACK_REJECTED};
use peerage_node::{LocalSwarm, LocalSwarmConfig};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_frames_are_refused_and_the_node_keeps_serving() {
    let seed: u64 = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("seed {seed} (replay with PEERAGE_SEED={seed})");
    let mut cfg = LocalSwarmConfig::new(4, ElectionConfig::for_algorithm(Algorithm::Bully), seed);
    cfg.template.timing.settle_ms = 500;
    let swarm = LocalSwarm::start(&cfg).await.expect("swarm starts");
    let leader = swarm.wait_agreement(Duration::from_secs(60), None).await.expect("agreement");
    let target = 0;

    // A raw client that can send frames the node would never send: a 4 MiB limit on its side.
    let mut client = SwarmBuilder::with_new_identity()
        .with_tokio()
        .with_other_transport(|key| {
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
                MemoryTransport::default()
                    .upgrade(Version::V1)
                    .authenticate(noise::Config::new(key)?)
                    .multiplex(yamux::Config::default())
                    .boxed(),
            )
        })
        .unwrap()
        .with_behaviour(|_| {
            request_response::Behaviour::with_codec(
                FrameCodec::new(4 * 1024 * 1024),
                [(StreamProtocol::new(ELECTION_PROTOCOL), ProtocolSupport::Outbound)],
                request_response::Config::default().with_request_timeout(Duration::from_secs(10)),
            )
        })
        .unwrap()
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(30)))
        .build();
    let peer = swarm.peer_id(target);
    client.dial(swarm.addr(target).clone()).unwrap();

    let garbage = vec![0xff; 40];
    let mut wrong_version = wire::encode(&Body::Election { scope: 0, msg: Message::Alive }).unwrap();
    wrong_version[0] = 9;
    let oversized = vec![1u8; overlay::wire::MAX_FRAME_BYTES + 10];
    let good = wire::encode(&Body::Election { scope: 0, msg: Message::Answer }).unwrap();
    let frames = [("garbage", garbage), ("wrong version", wrong_version), ("oversized", oversized), ("good", good)];

    let mut outcomes = Vec::new();
    for (name, frame) in frames {
        let id = client.behaviour_mut().send_request(&peer, frame);
        let outcome = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                match client.select_next_some().await {
                    SwarmEvent::Behaviour(Event::Message {
                        message: RrMessage::Response { request_id, response },
                        ..
                    }) if request_id == id => return Ok(response),
                    SwarmEvent::Behaviour(Event::OutboundFailure { request_id, error, .. }) if request_id == id => {
                        return Err(error.to_string())
                    }
                    _ => {}
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no answer to the {name} frame"));
        println!("{name}: {outcome:?}");
        outcomes.push((name, outcome));
    }
    assert_eq!(outcomes[0].1, Ok(vec![ACK_REJECTED]), "garbage must be refused");
    assert_eq!(outcomes[1].1, Ok(vec![ACK_REJECTED]), "an unknown wire version must be refused");
    assert!(outcomes[2].1.is_err(), "an oversized frame must fail, got {:?}", outcomes[2].1);
    assert_eq!(outcomes[3].1, Ok(vec![ACK_OK]), "the node must still serve a good frame");

    // Give the node's loop a moment to count the oversized read failure.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let snap = swarm.snapshots().into_iter().find(|(i, _)| *i == target).unwrap().1;
    assert!(snap.bad_frames >= 3, "three bad frames must be counted, got {}", snap.bad_frames);
    let again = swarm.wait_agreement(Duration::from_secs(30), None).await;
    assert_eq!(again, Some(leader), "the swarm keeps its leader");
    swarm.shutdown().await;
}
