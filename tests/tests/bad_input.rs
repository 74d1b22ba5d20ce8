//! Malformed and oversized bytes on the election protocol: the node refuses each frame (and
//! counts it in `bad_frames`), goes on serving, answers a well-formed frame from a member
//! afterwards, and the swarm still agrees on its leader. A few bad frames do not ban.

mod common;

use common::attacker::{election, push, Attacker, Outcome, Proto};
use overlay::{Algorithm, ElectionConfig, Message};
use peerage_node::net::codec::{ACK_OK, ACK_REJECTED};
use peerage_node::{LocalSwarm, LocalSwarmConfig};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_frames_are_refused_and_the_node_keeps_serving() {
    let seed = common::seed();
    let mut cfg = LocalSwarmConfig::new(4, ElectionConfig::for_algorithm(Algorithm::Bully), seed);
    cfg.template.timing.settle_ms = 500;
    let difficulty = cfg.template.directory.id_difficulty;
    let swarm = LocalSwarm::start(&cfg).await.expect("swarm starts");
    let leader = swarm.wait_agreement(Duration::from_secs(60), None).await.expect("agreement");
    let target = 0;
    let peer = swarm.peer_id(target);

    let mut client = Attacker::new(difficulty);
    assert!(client.connect(swarm.addr(target), peer).await);
    assert_eq!(
        client.request(Proto::Members, &peer, push(vec![client.own_record(0)])).await,
        Outcome::Ack(vec![ACK_OK])
    );
    // The new member reaches the election group on the node's next tick.
    client.pump(Duration::from_secs(1)).await;

    let garbage = vec![0xff; 40];
    let mut wrong_version = election(Message::Alive);
    wrong_version[0] = 9;
    let oversized = vec![1u8; overlay::wire::MAX_FRAME_BYTES + 10];
    let good = election(Message::Alive);
    let frames = [("garbage", garbage), ("wrong version", wrong_version), ("oversized", oversized), ("good", good)];
    let mut outcomes = Vec::new();
    for (name, frame) in frames {
        let outcome = client.request(Proto::Election, &peer, frame).await;
        println!("{name}: {outcome:?}");
        outcomes.push(outcome);
    }
    assert_eq!(outcomes[0], Outcome::Ack(vec![ACK_REJECTED]), "garbage must be refused");
    assert_eq!(outcomes[1], Outcome::Ack(vec![ACK_REJECTED]), "an unknown wire version must be refused");
    assert!(matches!(outcomes[2], Outcome::Failed(_)), "an oversized frame must fail, got {:?}", outcomes[2]);
    assert_eq!(outcomes[3], Outcome::Ack(vec![ACK_OK]), "the node must still serve a good frame");

    // Give the node's loop a moment to count the oversized read failure.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let snap = swarm.snapshots().into_iter().find(|(i, _)| *i == target).unwrap().1;
    assert!(snap.bad_frames >= 3, "three bad frames must be counted, got {}", snap.bad_frames);
    assert_eq!(snap.guard.bans, 0, "three bad frames do not ban");
    let again = swarm.wait_agreement(Duration::from_secs(30), None).await;
    assert_eq!(again, Some(leader), "the swarm keeps its leader");
    swarm.shutdown().await;
}
