//! Super-peer selection decides only on usable DHT answers (`overlay::superpeer::lookup`): a
//! lookup that timed out, or came back short while peers did not answer, is asked again after a
//! back-off, and neither the size estimate nor the slot claim is made from it. Short answers
//! make estimates collapse (a node that sees 5 peers of 200 wants a handful of super peers).
//!
//! The DHT is an oracle over a fixed set of random ids (seeded, `PEERAGE_SEED` replays).

use overlay::superpeer::SEED_LOOKUPS;
use overlay::superpeer::{
    LookupReport, Method, PeerInfo, Point, Query, SpEffect, SpInput, SuperPeerConfig, SuperPeerNode,
};
use overlay::NodeId;
use rand::Rng;
use std::sync::Arc;

use crate::common;
use crate::common::{lookups, xor, DhtWorld as World};

fn seed() -> u64 {
    common::seed(11)
}

const N: usize = 2_000;

fn cfg(method: Method, share: f64) -> Arc<SuperPeerConfig> {
    let mut c = SuperPeerConfig { method, share, ..Default::default() };
    // The lookups these tests count: a decision on eight samples.
    c.estimate.samples = 8;
    c.validate().unwrap();
    Arc::new(c)
}

/// A lookup that timed out with nothing found.
fn timed_out() -> LookupReport {
    LookupReport { timed_out: true, ..LookupReport::default() }
}

#[test]
fn failed_estimate_lookups_are_retried_and_never_decided_on() {
    let mut w = World::new(seed(), N);
    let me = w.ids[0];
    let mut node = SuperPeerNode::new(me, Point::new(&[0.0, 0.0], 0.001), cfg(Method::ReservedPrefix, 0.01));
    let fx = w.feed(&mut node, SpInput::Start);
    let first = lookups(&fx);
    assert_eq!(first.len(), 2, "estimate_parallel sample lookups at start");
    // Every one fails: no estimate, no decision, no new lookup at once.
    for (q, _) in &first {
        let fx = w.feed(&mut node, SpInput::LookupResult { query: *q, report: timed_out() });
        assert!(lookups(&fx).is_empty(), "retried without a back-off");
    }
    assert_eq!(node.estimate(), None);
    assert_eq!(node.wanted(), 0, "decided on failed lookups");
    // The retries come back over the following rounds (back-off 2, then 4 rounds), each a
    // sample lookup of a fresh key.
    let mut retried = Vec::new();
    for r in 1..=17 {
        let fx = w.tick(&mut node);
        let l = lookups(&fx);
        if r < 2 {
            assert!(l.is_empty(), "retry before its back-off (round {r})");
        }
        retried.extend(l);
    }
    assert_eq!(retried.len(), 2, "{retried:?}");
    for (_, q) in &retried {
        let Query::Sample { key } = q else { panic!("not a sample lookup: {q:?}") };
        assert!(first.iter().all(|(_, f)| f != &Query::Sample { key: *key }), "the same key again");
    }
    // Usable answers, nobody sharing: the node keeps two lookups running, topped up each
    // round, until it has eight samples; seven are not enough, the eighth decides, and
    // nothing more is asked.
    let mut running: std::collections::VecDeque<(u32, Query)> = retried.into();
    let mut answered = 0;
    for _ in 0..10 {
        while let Some((q, what)) = running.pop_front() {
            let Query::Sample { key } = what else { panic!("not a sample lookup: {what:?}") };
            let peers = w.closest(me, &key);
            let fx = w.feed(&mut node, SpInput::LookupResult { query: q, report: LookupReport::complete(peers) });
            answered += 1;
            assert!(lookups(&fx).iter().all(|(_, q)| !matches!(q, Query::Sample { .. })), "not at a round's tick");
            if answered < 8 {
                assert_eq!(node.wanted(), 0, "decided on {answered} samples");
            } else {
                assert!(node.wanted() > 0, "not decided on eight samples");
            }
        }
        let fx = w.tick(&mut node);
        running.extend(lookups(&fx).into_iter().filter(|(_, q)| matches!(q, Query::Sample { .. })));
        assert!(running.len() <= 2, "more than two estimate lookups at once: {running:?}");
        if node.wanted() > 0 {
            assert!(running.is_empty(), "an estimate lookup after the decision");
            break;
        }
    }
    assert_eq!(answered, 8, "sample lookups answered");
    let est = node.estimate().expect("an estimate");
    assert!(est > N as f64 * 0.6 && est < N as f64 * 1.6, "estimate {est} of {N}");
    assert_eq!(node.wanted(), (0.01 * est).round() as u64);
}

#[test]
fn a_claim_waits_for_usable_closest_and_provider_answers() {
    let mut w = World::new(seed() ^ 1, N);
    // A node whose own slot is reserved: with share 0.5 and N̂ about 2,000, W is about 1,000
    // and k = 10 or 11 bits; an id whose first 4 bits are 0 has a slot below 128 either way.
    let me = w.ids.iter().copied().find(|id| id.prefix(4) == 0).expect("a reserved id");
    let mut node = SuperPeerNode::new(me, Point::new(&[0.0, 0.0], 0.001), cfg(Method::ReservedPrefix, 0.5));
    let fx = w.feed(&mut node, SpInput::Start);
    // The decision's claim lookups: the slot key's closest peers and its providers.
    let (claim, _) = w.decide(&mut node, &fx);
    let k = node.prefix_bits();
    assert!(me.prefix(k) < node.wanted(), "this node's slot must be reserved for the test");
    let closest = claim.iter().find(|(_, q)| matches!(q, Query::Closest { .. })).expect("closest lookup");
    let providers = claim.iter().find(|(_, q)| matches!(q, Query::Providers { .. })).expect("provider lookup");
    let Query::Closest { key } = closest.1 else { unreachable!() };
    // The closest-peers answer fails; the (empty) provider answer is usable.
    w.feed(&mut node, SpInput::LookupResult { query: closest.0, report: timed_out() });
    let fx =
        w.feed(&mut node, SpInput::LookupResult { query: providers.0, report: LookupReport::complete(Vec::new()) });
    assert!(!node.is_head(), "claimed on a failed closest-peers lookup");
    assert!(!fx.iter().any(|e| matches!(e, SpEffect::Provide { .. })));
    // The retry comes after the back-off; answered usably with this node the closest
    // (the oracle's answer without it: every other id is farther than the slot key's
    // nearest, which we make this node by answering with peers farther than it).
    let mut retry = None;
    for _ in 0..3 {
        let fx = w.tick(&mut node);
        if let Some(r) = lookups(&fx).into_iter().find(|(_, q)| *q == Query::Closest { key }) {
            retry = Some(r.0);
            break;
        }
    }
    let retry = retry.expect("the failed claim lookup was not asked again");
    let mine = xor(&me, &key);
    let farther: Vec<PeerInfo> = w.closest(me, &key).into_iter().filter(|p| xor(&p.id, &key) > mine).take(20).collect();
    let fx = w.feed(&mut node, SpInput::LookupResult { query: retry, report: LookupReport::complete(farther) });
    assert!(node.is_super_peer(), "a usable answer that names this node closest must let it claim");
    assert!(fx.iter().any(|e| matches!(e, SpEffect::Provide { .. })));
}

/// A driver that cannot aim at the drawn key looks up another uniform key and names it
/// ([`LookupReport::key`]): the estimate must be made from the key named, not the one drawn
/// (measured from the drawn key, the named key's closest peers sit far away and the estimate
/// would collapse).
#[test]
fn a_sample_answered_for_another_key_is_estimated_from_that_key() {
    let mut w = World::new(seed() ^ 2, N);
    let me = w.ids[1];
    let mut node = SuperPeerNode::new(me, Point::new(&[0.0, 0.0], 0.001), cfg(Method::ReservedPrefix, 0.01));
    let fx = w.feed(&mut node, SpInput::Start);
    let mut asked = lookups(&fx);
    assert_eq!(asked.len(), 2, "estimate lookups at start");
    let mut answered = 0;
    for _ in 0..10 {
        while let Some((q, what)) = asked.pop() {
            let Query::Sample { key: drawn } = what else { continue };
            let other = NodeId(w.rng.gen());
            assert_ne!(other, drawn);
            let peers = w.closest(me, &other);
            w.feed(
                &mut node,
                SpInput::LookupResult {
                    query: q,
                    report: LookupReport { key: Some(other), ..LookupReport::complete(peers) },
                },
            );
            answered += 1;
        }
        if node.wanted() > 0 {
            break;
        }
        asked.extend(lookups(&w.tick(&mut node)));
    }
    assert_eq!(answered, 8, "sample lookups answered");
    let est = node.estimate().expect("an estimate from the named keys");
    assert!(est > N as f64 * 0.6 && est < N as f64 * 1.6, "estimate {est} of {N}");
}

/// Seed lookups a node started (and answered by the oracle of `common`) made, with the
/// token directory holding two heads.
fn seeds_at_start(method: Method, share: f64, seed: u64) -> (u16, u64) {
    let (mut rng, ids) = common::seeded_ids(seed, 500);
    let at = |x: f64| Point::new(&[x, 0.0], 0.001);
    let oracle = common::Oracle {
        found_at: at(0.05),
        directory: vec![PeerInfo { id: ids[1], point: at(0.01) }, PeerInfo { id: ids[2], point: at(0.02) }],
        provider_at: at(0.1),
    };
    let mut node = SuperPeerNode::new(ids[0], at(0.0), cfg(method, share));
    common::start_claiming_nothing(&mut node, &mut rng, 0, &ids, &oracle);
    let seeds = node.lookups_by_purpose().find(|(p, _)| *p == "seed").map_or(0, |(_, n)| n);
    (seeds, node.wanted())
}

#[test]
fn a_token_seed_looks_the_directory_up_once_while_one_answer_holds_every_holder() {
    // The seed's lookups all ask the token directory's key; with at most
    // PROVIDERS_PER_ANSWER tokens wanted one answer holds every holder.
    let seed = seed();
    let four = SEED_LOOKUPS as u16;
    assert_eq!(four, 4);
    let (seeds, wanted) = seeds_at_start(Method::RepulsionTokens, 0.01, seed);
    assert!(wanted <= overlay::superpeer::PROVIDERS_PER_ANSWER, "wanted {wanted}");
    assert_eq!(seeds, 1, "tokens, {wanted} wanted");
    // More tokens than one answer holds: the seed asks `seed_lookups` times (answers differ).
    let (seeds, wanted) = seeds_at_start(Method::RepulsionTokens, 0.1, seed);
    assert!(wanted > overlay::superpeer::PROVIDERS_PER_ANSWER, "wanted {wanted}");
    assert_eq!(seeds, four, "tokens, {wanted} wanted");
    // Prefix seeds look up `seed_lookups` random slots, whatever the number.
    let (seeds, wanted) = seeds_at_start(Method::ReservedPrefix, 0.01, seed);
    assert_eq!(seeds, four, "prefix, {wanted} wanted");
}

/// How the hand-fed heads of [`hunt`] answer: `full` refuses every `Attach` as full; `open`
/// (if any) accepts. Every seed (a provider lookup) finds `found`.
struct Heads {
    full: PeerInfo,
    open: Option<PeerInfo>,
    found: Vec<PeerInfo>,
}

/// Runs `node` for `rounds` rounds from round `*round` on, answering as `heads` says, and
/// returns the rounds in which it started seed lookups.
fn hunt(
    node: &mut SuperPeerNode,
    rng: &mut rand_chacha::ChaCha8Rng,
    round: &mut u64,
    rounds: u64,
    heads: &Heads,
) -> Vec<u64> {
    use overlay::superpeer::{HeadRole, SpMessage};
    let mut seeded = Vec::new();
    for _ in 0..rounds {
        *round += 1;
        let now = *round * 1_000_000;
        let mut queue = common::step(node, rng, now, SpInput::Tick);
        while let Some(e) = queue.pop() {
            let answer = match e {
                SpEffect::Lookup { query, what: Query::Providers { .. } } => {
                    if seeded.last() != Some(round) {
                        seeded.push(*round);
                    }
                    SpInput::LookupResult { query, report: LookupReport::complete(heads.found.clone()) }
                }
                SpEffect::Send { to, msg: SpMessage::Attach { .. } } => match heads.open.filter(|o| o.id == to) {
                    Some(head) => {
                        SpInput::Message { from: to, msg: SpMessage::Accept { role: HeadRole::Slot { key: to }, head } }
                    }
                    None if to == heads.full.id => SpInput::Message { from: to, msg: SpMessage::Refuse { full: true } },
                    None => continue,
                },
                _ => continue,
            };
            queue.extend(common::step(node, rng, now, answer));
        }
    }
    seeded
}

/// A prefix node at the origin that has decided its estimate and claimed nothing (every
/// slot's provider is `ids[3]`, at `oracle.provider_at`), with its RNG, the ids and the oracle.
fn hunter() -> (SuperPeerNode, rand_chacha::ChaCha8Rng, Vec<NodeId>, common::Oracle) {
    let (mut rng, ids) = common::seeded_ids(seed(), 500);
    let at = |x: f64| Point::new(&[x, 0.0], 0.001);
    let oracle = common::Oracle { found_at: at(0.05), directory: Vec::new(), provider_at: at(0.1) };
    let mut node = SuperPeerNode::new(ids[0], at(0.0), cfg(Method::ReservedPrefix, 0.01));
    common::start_claiming_nothing(&mut node, &mut rng, 0, &ids, &oracle);
    (node, rng, ids, oracle)
}

/// Seeds back off (a 200-node prefix swarm made 26.6 seed lookups per node, ten a second for
/// the whole run, while the first heads refused nodes as full): an unattached node whose
/// known heads all refused it as full seeds again after 5, 10, 20, then every 40 rounds, not
/// every 5; once it was attached, or a head, the next wait is 5 again.
#[test]
fn hunting_seeds_back_off_while_every_known_head_is_full() {
    let (mut node, mut rng, ids, oracle) = hunter();
    let at = |x: f64| Point::new(&[x, 0.0], 0.001);
    assert!(node.wanted() > 0, "the node decided");
    // ids[3] provides every slot (the oracle) and is full.
    let full = PeerInfo { id: ids[3], point: oracle.provider_at };
    let mut round = 0;
    let only_full = Heads { full, open: None, found: vec![full] };
    let seeded = hunt(&mut node, &mut rng, &mut round, 120, &only_full);
    let gaps: Vec<u64> = seeded.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(seeded.len() >= 3, "an unattached node must keep looking: seeds in rounds {seeded:?}");
    assert!(gaps.windows(2).all(|g| g[1] >= g[0]), "the waits must not shrink: rounds {seeded:?}");
    assert!(gaps.iter().any(|&g| g >= 40), "the waits must grow to 40 rounds: rounds {seeded:?}");
    assert!(seeded.len() <= 6, "{} seeds in 120 rounds (rounds {seeded:?})", seeded.len());
    // A head with room turns up: the node attaches to it, stays 10 rounds, and is let go.
    let open = PeerInfo { id: ids[4], point: at(0.2) };
    let found_open = Heads { full, open: Some(open), found: vec![full, open] };
    let last = *seeded.last().unwrap_or(&0);
    while node.attached_to().is_none_or(|a| a != open.id) {
        assert!(round < last + 80, "never attached to the head with room");
        hunt(&mut node, &mut rng, &mut round, 1, &found_open);
    }
    hunt(&mut node, &mut rng, &mut round, 10, &only_full);
    assert_eq!(node.attached_to(), Some(open.id));
    let now = round * 1_000_000;
    common::step(
        &mut node,
        &mut rng,
        now,
        SpInput::Message { from: open.id, msg: overlay::superpeer::SpMessage::StepDown },
    );
    assert_eq!(node.attached_to(), None);
    let again = hunt(&mut node, &mut rng, &mut round, 10, &only_full);
    assert!(
        again.first().is_some_and(|&r| r <= round - 10 + 5),
        "after being attached the first hunting seed waits 5 rounds at most: rounds {again:?} (step-down after round {})",
        round - 10
    );
}

/// A node with no neighbours yet, whose driver reports a routing table of 3 peers: answers
/// naming fewer than 3 peers are incomplete and decide nothing (in an overloaded swarm such
/// answers made nodes take themselves for alone and claim the one slot of a network of one),
/// while answers naming 3 are decided on.
#[test]
fn answers_naming_fewer_peers_than_the_routing_table_holds_decide_nothing() {
    let mut w = World::new(seed(), N);
    let me = w.ids[0];
    let mut node = SuperPeerNode::new(me, Point::new(&[0.0, 0.0], 0.001), cfg(Method::ReservedPrefix, 0.01));
    let mut running = lookups(&w.feed(&mut node, SpInput::Start));
    let mut unusable = 0;
    for round in 0..60 {
        while let Some((q, what)) = running.pop() {
            let Query::Sample { key } = what else { panic!("not a sample lookup: {what:?}") };
            let peers = w.closest(me, &key);
            let n = if round < 20 { 2 } else { 3 };
            let report = LookupReport { known: 3, ..LookupReport::complete(peers[..n].to_vec()) };
            let fx = w.feed(&mut node, SpInput::LookupResult { query: q, report });
            if fx.iter().any(|e| matches!(e, SpEffect::LookupUnusable { reason: "incomplete", .. })) {
                unusable += 1;
            }
            if round < 20 {
                assert_eq!(node.wanted(), 0, "decided on an answer of 2 peers with 3 in the routing table");
            }
        }
        running.extend(lookups(&w.tick(&mut node)).into_iter().filter(|(_, q)| matches!(q, Query::Sample { .. })));
        if node.wanted() > 0 {
            break;
        }
    }
    assert!(unusable >= 2, "only {unusable} answers judged incomplete");
    assert!(node.wanted() > 0, "never decided on answers naming as many peers as it knows");
}

/// An unattached node whose cached heads all refused it as full, one round apart, so that
/// their back-offs end one at a time and one of them is always being asked again: a seed's
/// answer that comes then still takes the place of the farthest full head, and the node
/// attaches to the head with room it names. (Counting only heads backed off at that moment,
/// the answer was dropped as farther than all of them, and one node of 10^5 kept asking the
/// same six full heads for good.)
#[test]
fn a_seed_answer_replaces_full_heads_whose_back_offs_end_one_at_a_time() {
    use overlay::superpeer::{HeadEntry, HeadRole, SpMessage};
    let (mut node, mut rng, ids, _) = hunter();
    let at = |x: f64| Point::new(&[x, 0.0], 0.001);
    let full: Vec<PeerInfo> =
        (0..6).map(|i| PeerInfo { id: ids[10 + i], point: at(0.010 + 0.001 * i as f64) }).collect();
    for h in &full {
        common::step(
            &mut node,
            &mut rng,
            0,
            SpInput::Message { from: h.id, msg: SpMessage::Announce { head: *h, room: true } },
        );
    }
    let open = PeerInfo { id: ids[20], point: at(0.2) };
    let is_full = |id: &NodeId| *id == ids[3] || full.iter().any(|h| h.id == *id);
    // Refusals come a round after the `Attach`; seed answers are held until an `Attach` to a
    // head that refused before is in flight.
    let mut refusals: Vec<NodeId> = Vec::new();
    let mut held: Vec<u32> = Vec::new();
    let mut refused: std::collections::HashSet<NodeId> = Default::default();
    let mut answered_at = None;
    for round in 1..=200u64 {
        let now = round * 1_000_000;
        let mut fx = common::step(&mut node, &mut rng, now, SpInput::Tick);
        // A neighbour's cache gossip keeps the full heads known (cached heads age out).
        let entries = full.iter().map(|h| HeadEntry { head: *h, age: 0 }).collect();
        let gossip = SpMessage::CacheExchange { entries, reply: false };
        fx.extend(common::step(&mut node, &mut rng, now, SpInput::Message { from: ids[30], msg: gossip }));
        for from in std::mem::take(&mut refusals) {
            refused.insert(from);
            fx.extend(common::step(
                &mut node,
                &mut rng,
                now,
                SpInput::Message { from, msg: SpMessage::Refuse { full: true } },
            ));
        }
        let mut queue = fx;
        while let Some(e) = queue.pop() {
            match e {
                SpEffect::Lookup { query, what: Query::Providers { .. } } => held.push(query),
                SpEffect::Send { to, msg: SpMessage::Attach { .. } } if to == open.id => {
                    let accept = SpMessage::Accept { role: HeadRole::Slot { key: to }, head: open };
                    queue.extend(common::step(&mut node, &mut rng, now, SpInput::Message { from: to, msg: accept }));
                }
                SpEffect::Send { to, msg: SpMessage::Attach { .. } } if is_full(&to) => {
                    refusals.push(to);
                    if answered_at.is_none() && refused.len() >= full.len() && refused.contains(&to) && !held.is_empty()
                    {
                        // One of them is being asked again: the seed's answer comes now.
                        answered_at = Some(round);
                        for query in std::mem::take(&mut held) {
                            let report = LookupReport::complete(vec![open]);
                            queue.extend(common::step(
                                &mut node,
                                &mut rng,
                                now,
                                SpInput::LookupResult { query, report },
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
        if node.attached_to() == Some(open.id) {
            let answered = answered_at.expect("attached before the answer naming the head");
            // Full heads whose back-offs end first are nearer and asked first, one a round.
            assert!(round <= answered + 10, "attached {} rounds after the answer", round - answered);
            println!("attached {} rounds after the answer (round {answered})", round - answered);
            return;
        }
    }
    panic!(
        "never attached to the head with room (answer in round {answered_at:?}; refused by {} heads): {}",
        refused.len(),
        node.attach_summary()
    );
}
