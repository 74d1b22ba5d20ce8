//! The JSON status lines of `peerage run` (`node/src/runtime/status.rs`), read from two real processes on
//! 127.0.0.1 and parsed with serde into typed events: every stdout line is a status object;
//! `started` comes first and carries the node id, priority and algorithm; `listening` gives a
//! dialable address ending in the node's own `/p2p/<peer id>`; `peers` and `members` follow
//! the join; the higher node reports `election_started`; both report the same `leader` (with
//! its peer id, `is_me` true only at the leader); periodic `status` lines carry the same
//! leader, peers and members; Ctrl-C (SIGINT) ends with a `shutdown` line and exit code 0.

mod common;

use common::{fast_config, run_node, Event, Peerage, Scratch};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(40);

fn started(p: &Peerage) -> Option<(String, u64, String)> {
    p.find(|e| match e {
        Event::Started { node_id, priority, algorithm } => Some((node_id.clone(), *priority, algorithm.clone())),
        _ => None,
    })
}

/// The latest `leader` line: (leader, leader_peer, is_me).
fn leader_line(p: &Peerage) -> Option<(Option<String>, Option<String>, bool)> {
    p.find_last(|e| match e {
        Event::Leader { leader, leader_peer, is_me, .. } => Some((leader.clone(), leader_peer.clone(), *is_me)),
        _ => None,
    })
}

#[test]
fn status_lines_report_peers_leader_changes_and_elections() {
    let dir = Scratch::new("status");
    let cfg = dir.write("node.toml", &fast_config("algorithm = \"fast-bully\""));
    let a = run_node(&["--config", &cfg, "--priority", "3"]);
    let a_addr = a.wait_for("A's address", WAIT, Peerage::tcp_addr);
    let b = run_node(&["--config", &cfg, "--priority", "8", "--bootstrap", &a_addr]);
    let (a_id, a_prio, a_alg) = a.wait_for("A's started line", WAIT, started);
    let (b_id, b_prio, _) = b.wait_for("B's started line", WAIT, started);
    assert_eq!((a_prio, b_prio), (3, 8));
    assert_eq!(a_alg, "fast-bully");
    assert_ne!(a_id, b_id);

    // The first line is `started`, and every line names its node.
    let first = &a.lines()[0];
    assert!(matches!(first.event, Event::Started { .. }), "first line: {first:?}");
    let a_peer = first.peer.clone();
    assert!(a_addr.ends_with(&format!("/p2p/{a_peer}")), "{a_addr} does not end in A's peer id {a_peer}");
    assert!(a.lines().iter().all(|l| l.peer == a_peer && l.ts > 1_600_000_000_000));

    // Both name B, the higher priority; B knows it is the leader.
    let (leader, leader_peer, is_me) =
        a.wait_for("A to name B", WAIT, |p| leader_line(p).filter(|(l, _, _)| l.as_deref() == Some(b_id.as_str())));
    assert_eq!(leader.as_deref(), Some(b_id.as_str()));
    assert!(!is_me);
    let b_peer = b.lines()[0].peer.clone();
    assert_eq!(leader_peer.as_deref(), Some(b_peer.as_str()), "leader_peer is B's peer id");
    let (_, _, b_is_me) = b
        .wait_for("B to name itself", WAIT, |p| leader_line(p).filter(|(l, _, _)| l.as_deref() == Some(b_id.as_str())));
    assert!(b_is_me);
    assert!(
        b.find(|e| matches!(e, Event::ElectionStarted { .. }).then_some(())).is_some(),
        "B, the highest member, started an election"
    );

    // The join shows up as peers and members events.
    for (p, name) in [(&a, "A"), (&b, "B")] {
        p.wait_for(&format!("{name}'s peers line"), WAIT, |p| {
            p.find(|e| matches!(e, Event::Peers { peers } if *peers >= 1).then_some(()))
        });
        p.wait_for(&format!("{name}'s members line"), WAIT, |p| {
            p.find(|e| matches!(e, Event::Members { members: 2 }).then_some(()))
        });
    }

    // A periodic status line that has caught up says the same.
    let s = a.wait_for("a status line naming B", WAIT, |p| {
        p.find_last(|e| match e {
            Event::Status(s) if s.leader.as_deref() == Some(b_id.as_str()) => Some(s.clone()),
            _ => None,
        })
    });
    assert!(s.peers >= 1 && s.connections >= 1, "{s:?}");
    assert_eq!(s.members, 2, "{s:?}");
    assert!(s.messages_received >= 1, "A received election messages: {s:?}");
    assert!(s.listen.contains(&a_addr), "{s:?}");

    // Ctrl-C: a clean shutdown line and exit code 0.
    let mut a = a;
    a.interrupt();
    let code = a.wait_exit(WAIT);
    assert!(code.success(), "exit status after SIGINT: {code:?}; stderr:\n{}", a.stderr());
    let last = a.lines().last().cloned().expect("lines");
    assert!(matches!(last.event, Event::Shutdown {}), "last line after SIGINT: {last:?}");
    for p in [&a, &b] {
        assert!(p.bad_lines().is_empty(), "stdout lines that are not status objects: {:?}", p.bad_lines());
        assert!(!p.stderr().contains("panicked"), "{}", p.stderr());
    }
}
