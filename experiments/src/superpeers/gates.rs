//! Each simulated node's connections, its connection gate and its peer manager, so that a
//! refused message, probe, ping or lookup contact comes from the same rules a real node runs
//! (`overlay::connections::admission::Admission` and `overlay::connections::manager::PeerManager`),
//! fed with the same events, instead of a drawn probability.
//!
//! The model, under the fault model's `gates` (`super::faults`):
//! - A message, head probe or RTT measurement from `a` to `b` needs a connection. An open one
//!   is used; otherwise `a` marks `b` wanted and dials it, as the node driver does before every
//!   request: `a`'s gate may refuse the dial (`RefusedLocally`), then `b`'s gate may refuse the
//!   inbound connection, before and after the handshake (`RefusedByPeer`). Who refused is told
//!   to `a`'s gate (`on_dial_failed`) and the failure is classified by the node's own rule
//!   (`overlay::detect::dial_failure`).
//! - A closest-peers, sample or provider lookup opens `a`'s gate for its own dials for
//!   [`GATE_OPEN_FOR`] and contacts the peers nearest the key, in order, until K have answered:
//!   each contact needs a connection like a message does, but is not wanted, and a contact the
//!   gates refuse is a peer that failed to answer. This is where a real swarm's refusals come
//!   from: other nodes' lookups fill a node's inbound gate.
//! - Connections stay open: in a real node gossipsub holds a stream on every connection, so
//!   libp2p's idle timeout never closes one. What closes them is the peer manager, run every
//!   [`MANAGER_PERIOD_ROUNDS`] rounds as the node runs it: above `target_high` it prunes old
//!   connections that carry no structure and no recent super-peer message (the state
//!   machine's `talks_to` is the structure), below `target_low` it dials random members, and
//!   between the two it swaps its oldest prunable connection for a random member once a
//!   rotation period (three pings of a super-peer swarm, [`SWARM_PING_S`]). A crashed node's
//!   connections close at its peers.
//! - Both ends of a new connection learn each other's position (`PeerUp`, delivered by the
//!   simulator from [`Gates::opened`]), as a node learns it from the first request or `Hello`
//!   over any connection: the connections lookups and measurements open reach the state
//!   machine's neighbour list.
//! - Each node's gate is told after its tick whether it serves a cluster (and its members) and
//!   which re-election group it is in, as the node driver tells it.
//!
//! The limits and the manager's policy are a super-peer node's defaults ([`NodeSettings::of`];
//! a cross-crate test checks them against the node's resolved configuration), those of a node
//! on its own machine: a one-process `peerage swarm` of more than a few dozen nodes rotates
//! more slowly (`swarm_rotate_ms`), its nodes sharing one machine's CPU. Departures from
//! a real node, all on the side of fewer connections: gossipsub's mesh, identify, the
//! directory's syncs and the Vivaldi pings open none here, and a lookup contacts only the peers
//! nearest its key (a real iterative lookup also asks the peers on its way there).

use overlay::connections::admission::{Admission, DialFailed, Limits};
use overlay::connections::manager::{Keep, PeerInfo, PeerManager, Policy};
use overlay::detect::{dial_failure, SendFailure};
use overlay::superpeer::SuperPeerConfig;
use overlay::Time;
use rand::Rng;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// How long a node's gate stays open for its own dials after it starts a lookup (the node
/// driver's `GATE_OPEN_FOR`).
pub const GATE_OPEN_FOR: Duration = Duration::from_secs(15);
/// The node runs its peer manager every 2 s (`PEER_MANAGER_PERIOD`); a round is 1 s.
pub const MANAGER_PERIOD_ROUNDS: u32 = 2;
/// A node's default limits without super peers, and its gossipsub mesh's upper bound
/// (`node/src/config/mod.rs`).
const TARGET_LOW: usize = 6;
const TARGET_HIGH: usize = 24;
const OUTBOUND_GATE: usize = 6;
const INBOUND_GATE: usize = 40;
const MAX_ESTABLISHED: usize = 48;
const GOSSIP_MESH_HIGH: usize = 8;
const PRUNE_MIN_AGE: Duration = Duration::from_secs(10);
const ELECTION_KEEP: Duration = Duration::from_secs(5);
/// The ping period of a super-peer swarm (`peerage swarm --superpeers ... --ping-s 5`, the
/// README's command); the peer manager rotates a connection every three of them.
pub const SWARM_PING_S: u64 = 5;
const ROTATE_EVERY: Duration = Duration::from_secs(3 * SWARM_PING_S);

/// A super-peer node's gate limits and peer-manager policy.
#[derive(Debug, Clone, Copy)]
pub struct NodeSettings {
    pub limits: Limits,
    pub policy: Policy,
}

impl NodeSettings {
    /// What a node that runs super-peer selection with `cfg`, and otherwise default limits,
    /// resolves: the prune line rises by the overlay's neighbours and a gossipsub mesh, the
    /// inbound gate to the prune line, and the hard cap makes room for a full cluster on top.
    pub fn of(cfg: &SuperPeerConfig) -> NodeSettings {
        let target_high = TARGET_HIGH.max(TARGET_HIGH + cfg.discovery.neighbours.min(1_000) + GOSSIP_MESH_HIGH);
        let inbound_gate = INBOUND_GATE.max(target_high);
        let hard_cap = MAX_ESTABLISHED
            .max(inbound_gate + 8)
            .max(cfg.cluster_cap as usize + target_high + 8)
            .max(inbound_gate + 16);
        NodeSettings {
            limits: Limits { inbound_gate, outbound_gate: OUTBOUND_GATE, hard_cap },
            policy: Policy {
                target_low: TARGET_LOW,
                target_high,
                prune_min_age: PRUNE_MIN_AGE,
                election_keep: ELECTION_KEEP,
                rotate_every: Some(ROTATE_EVERY),
            },
        }
    }
}

/// What the gates and managers did over a run.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct GateStats {
    /// Connections established (both ends count one).
    pub established: u64,
    /// The same, by what opened them: a super-peer message's kind, `measure-rtt`, `head-probe`,
    /// `lookup` or `manager`.
    pub established_by: BTreeMap<&'static str, u64>,
    /// Dials refused by the dialling node's own gate, and by the dialled node's.
    pub refused_locally: u64,
    pub refused_by_peer: u64,
    /// Lookup contacts, and those the gates refused (the rest of the refusals are messages,
    /// probes, RTT measurements and the managers' dials).
    pub lookup_contacts: u64,
    pub lookup_contacts_refused: u64,
    /// Connections the peer managers closed, and dials they made.
    pub pruned: u64,
    pub manager_dials: u64,
    /// Connections per live node at the end, mean and max, and the most any node held at the
    /// end of its turn.
    pub per_node_mean: f64,
    pub per_node_max: u64,
    pub per_node_peak: u64,
}

/// One open connection, seen from one end.
#[derive(Debug, Clone, Copy)]
struct Conn {
    peer: u32,
    since: u64,
    /// The last super-peer message, probe or measurement over it (µs).
    last_use: Option<u64>,
}

/// Every node's gate and connections (module doc), by slot.
pub struct Gates {
    adm: Vec<Admission<u32>>,
    managers: Vec<PeerManager>,
    conns: Vec<Vec<Conn>>,
    /// Connections established since the simulator last took them (dialler, dialled): each
    /// end learns the other's position over a new connection, as a node does.
    pub opened: Vec<(u32, u32)>,
    pub stats: GateStats,
}

impl Gates {
    pub fn new(n: usize, settings: NodeSettings) -> Gates {
        Gates {
            adm: (0..n).map(|_| Admission::new(settings.limits)).collect(),
            managers: (0..n).map(|_| PeerManager::new(settings.policy)).collect(),
            conns: vec![Vec::new(); n],
            opened: Vec::new(),
            stats: GateStats::default(),
        }
    }

    /// Marks the open connection between `a` and `b` used (when `used`); false if none is open.
    fn touch(&mut self, a: u32, b: u32, now: u64, used: bool) -> bool {
        let Some(c) = self.conns[a as usize].iter_mut().find(|c| c.peer == b) else { return false };
        if used {
            c.last_use = Some(now);
            if let Some(c) = self.conns[b as usize].iter_mut().find(|c| c.peer == a) {
                c.last_use = Some(now);
            }
        }
        true
    }

    /// A connection from `a` to `b` at `now` (µs) for `cause` (a message's kind, a probe or a
    /// measurement): an open one, or a wanted dial both gates let through.
    pub fn reach(&mut self, a: u32, b: u32, now: u64, cause: &'static str) -> Result<(), SendFailure> {
        self.connect(a, b, now, true, cause)
    }

    fn connect(&mut self, a: u32, b: u32, now: u64, wanted: bool, cause: &'static str) -> Result<(), SendFailure> {
        if a == b || self.touch(a, b, now, wanted) {
            return Ok(());
        }
        let t = Time(now);
        if wanted {
            self.adm[a as usize].want(b, t);
        }
        let how = if self.adm[a as usize].outbound(Some(b), t).is_err() {
            self.stats.refused_locally += 1;
            DialFailed::Denied
        } else if self.adm[b as usize].inbound().is_err() || self.adm[b as usize].inbound_from(&a).is_err() {
            self.stats.refused_by_peer += 1;
            DialFailed::ClosedBeforeHandshake
        } else {
            let last_use = wanted.then_some(now);
            self.adm[a as usize].on_established(b);
            self.adm[b as usize].on_established(a);
            self.conns[a as usize].push(Conn { peer: b, since: now, last_use });
            self.conns[b as usize].push(Conn { peer: a, since: now, last_use });
            self.stats.established += 1;
            *self.stats.established_by.entry(cause).or_default() += 1;
            self.opened.push((a, b));
            return Ok(());
        };
        let adm = &mut self.adm[a as usize];
        adm.on_dial_failed(b, how, t);
        Err(dial_failure(false, adm.dial_refusal(&b, t)))
    }

    /// Node `a` starts a lookup at `now`: its gate opens for its own dials.
    pub fn lookup_started(&mut self, a: u32, now: u64) {
        self.adm[a as usize].open_outbound_until(Time(now) + GATE_OPEN_FOR);
    }

    /// A lookup of `a` contacts `b`: whether `b` can answer (a connection both gates allow;
    /// a lookup's dial is not wanted and is no super-peer use).
    pub fn contact(&mut self, a: u32, b: u32, now: u64) -> bool {
        self.stats.lookup_contacts += 1;
        let ok = self.connect(a, b, now, false, "lookup").is_ok();
        self.stats.lookup_contacts_refused += u64::from(!ok);
        ok
    }

    /// What node `a` tells its gate after its tick: whether it serves a cluster and its
    /// members, and its re-election group (slots).
    pub fn tell(&mut self, a: u32, serving: bool, members: &[u32], group: &[u32], now: u64) {
        let adm = &mut self.adm[a as usize];
        adm.set_serving(serving, members.iter().copied());
        adm.set_election_group(group.iter().copied());
        adm.expire(Time(now));
        self.stats.per_node_peak = self.stats.per_node_peak.max(self.conns[a as usize].len() as u64);
    }

    /// Node `a`'s peer manager at `now`: `keep(peer)` whether the super-peer state machine
    /// talks to that peer, `candidates` members it may dial below `target_low` or rotate in
    /// (a uniform sample of the live nodes).
    pub fn manage(&mut self, a: u32, now: u64, keep: impl Fn(u32) -> bool, candidates: &[u32], rng: &mut impl Rng) {
        let infos: Vec<PeerInfo<u32>> = self.conns[a as usize]
            .iter()
            .map(|c| PeerInfo {
                peer: c.peer,
                connected_since: Time(c.since),
                last_use: c.last_use.map(Time),
                keep: Keep { superpeer: keep(c.peer), ..Keep::default() },
            })
            .collect();
        let m = &mut self.managers[a as usize];
        let cand: &[u32] = if m.wants_candidates(infos.len(), Time(now)) { candidates } else { &[] };
        let p = m.plan(&infos, cand, None, Time(now), rng);
        for b in p.close {
            self.close(a, b);
            self.stats.pruned += 1;
        }
        for b in p.dial.into_iter().filter(|&b| b != a) {
            self.stats.manager_dials += 1;
            // A failed dial tells the gate; nothing else follows from it.
            let _ = self.reach(a, b, now, "manager");
        }
    }

    fn close(&mut self, a: u32, b: u32) {
        self.conns[a as usize].retain(|c| c.peer != b);
        self.conns[b as usize].retain(|c| c.peer != a);
        self.adm[a as usize].on_closed(&b);
        self.adm[b as usize].on_closed(&a);
    }

    /// Node `a` crashed: its connections close at its peers.
    pub fn crash(&mut self, a: u32) {
        let peers: Vec<u32> = self.conns[a as usize].iter().map(|c| c.peer).collect();
        for p in peers {
            self.close(a, p);
        }
    }

    /// The end-of-run counts over the live nodes.
    pub fn finish(&mut self, alive: &[bool]) -> GateStats {
        let live: Vec<usize> = (0..self.conns.len()).filter(|&i| alive[i]).map(|i| self.conns[i].len()).collect();
        self.stats.per_node_mean = live.iter().sum::<usize>() as f64 / live.len().max(1) as f64;
        self.stats.per_node_max = live.iter().copied().max().unwrap_or(0) as u64;
        self.stats.clone()
    }

    /// Whether node `a`'s peer manager reads candidates at `now` (µs): below `target_low`,
    /// or a rotation due.
    pub fn wants_candidates(&self, a: u32, now: u64) -> bool {
        self.managers[a as usize].wants_candidates(self.conns[a as usize].len(), Time(now))
    }

    /// Established connections of node `a` (its gate's count).
    pub fn established(&self, a: u32) -> usize {
        self.adm[a as usize].established()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    const S: u64 = 1_000_000;

    fn settings() -> NodeSettings {
        NodeSettings {
            limits: Limits { inbound_gate: 3, outbound_gate: 1, hard_cap: 12 },
            policy: Policy {
                target_low: 1,
                target_high: 2,
                prune_min_age: Duration::from_secs(10),
                election_keep: Duration::from_secs(5),
                rotate_every: None,
            },
        }
    }

    #[test]
    fn a_full_inbound_gate_refuses_and_the_dialler_hears_it_from_the_peer() {
        let mut g = Gates::new(8, settings());
        for a in 1..=3 {
            assert_eq!(g.reach(a, 0, 0, "test"), Ok(()), "node {a}");
        }
        assert_eq!(g.established(0), 3);
        assert_eq!(g.reach(4, 0, 0, "test"), Err(SendFailure::RefusedByPeer), "node 0's inbound gate is full");
        // An open connection is used whatever the gates say.
        assert_eq!(g.reach(0, 1, 0, "test"), Ok(()));
        // A node serving a cluster takes inbound connections up to the hard cap.
        g.tell(0, true, &[4, 5], &[], 0);
        assert_eq!(g.reach(4, 0, 0, "test"), Ok(()));
        assert_eq!(g.stats.refused_by_peer, 1);
        assert_eq!(g.stats.established, 4);
        assert_eq!(g.stats.established_by.get("test"), Some(&4), "counted by cause");
    }

    #[test]
    fn unwanted_dials_stop_at_the_outbound_gate_unless_a_lookup_opened_it() {
        let mut g = Gates::new(8, settings());
        assert_eq!(g.reach(0, 1, 0, "test"), Ok(()));
        assert!(!g.contact(0, 2, 0), "an unwanted dial above the outbound gate");
        g.lookup_started(0, 0);
        assert!(g.contact(0, 2, 1), "the node's own lookup opened its gate");
        // A wanted dial passes up to the hard cap.
        assert_eq!(g.reach(0, 3, 2, "test"), Ok(()));
        assert_eq!((g.stats.lookup_contacts, g.stats.lookup_contacts_refused), (2, 1));
        assert_eq!(g.stats.refused_locally, 1);
    }

    #[test]
    fn the_manager_prunes_old_unkept_unused_connections_and_a_crash_closes_them_at_the_peers() {
        let mut g = Gates::new(8, settings());
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        g.lookup_started(0, 0);
        for b in 1..=4 {
            assert!(g.contact(0, b, 0));
        }
        g.reach(0, 4, 20 * S, "test").unwrap();
        // Four connections, target_high 2: 1 is kept, 4 was used 1 s ago, 2 and 3 go.
        g.manage(0, 21 * S, |p| p == 1, &[], &mut rng);
        let mut left: Vec<u32> = g.conns[0].iter().map(|c| c.peer).collect();
        left.sort();
        assert_eq!(left, [1, 4]);
        assert_eq!((g.established(2), g.established(3), g.stats.pruned), (0, 0, 2), "closed at both ends");
        g.crash(1);
        assert_eq!((g.established(0), g.established(1)), (1, 0));
        // Below target_low the manager dials a candidate.
        g.crash(4);
        g.manage(0, 22 * S, |_| false, &[6], &mut rng);
        assert_eq!((g.established(0), g.stats.manager_dials), (1, 1));
        let stats = g.finish(&[true, false, true, true, false, true, true, true]);
        assert_eq!((stats.per_node_max, stats.established), (1, 5));
    }

    #[test]
    fn the_default_super_peer_settings() {
        let s = NodeSettings::of(&SuperPeerConfig::default());
        assert_eq!((s.limits.inbound_gate, s.limits.outbound_gate, s.policy.target_high), (48, 6, 48));
        assert_eq!(s.limits.hard_cap, SuperPeerConfig::default().cluster_cap as usize + 56);
    }
}
