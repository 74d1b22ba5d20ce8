//! The node's DHT work: the size estimate, seed lookups for heads, reserved-slot claims and the
//! slot head's duplicate check (module doc of [`super`], steps 1 and 2).

use super::*;
use crate::superpeer::estimate::{VICINITY_PUSHES, VICINITY_WAIT_ROUNDS};
use crate::superpeer::lookup::{judge, Kind as LookupKind, LookupReport};
use crate::superpeer::vicinity::Vicinity;

impl SuperPeerNode {
    pub(super) fn lookup(&mut self, ctx: &mut SpContext<'_>, what: Query, pending: Pending) {
        let query = self.next_query;
        self.next_query = self.next_query.wrapping_add(1);
        if let Some(i) = pending.purpose() {
            self.lookups_by[i] = self.lookups_by[i].saturating_add(1);
        }
        self.queries.push((query, pending));
        ctx.push(SpEffect::Lookup { query, what });
    }

    /// The pending lookup `query` answers, removed; an unknown query is rejected with `reason`.
    fn take_query(&mut self, ctx: &mut SpContext<'_>, query: u32, reason: &'static str) -> Option<Pending> {
        let Some(pos) = self.queries.iter().position(|(q, _)| *q == query) else {
            ctx.push(SpEffect::Rejected { from: self.me.id, reason, offence: None });
            return None;
        };
        let (_, pending) = self.queries.swap_remove(pos);
        if self.queries.is_empty() {
            // Give back the start-up lookups' buffer (up to 16 entries a node, kept for ever).
            self.queries = Vec::new();
        }
        Some(pending)
    }

    pub(super) fn start(&mut self, ctx: &mut SpContext<'_>) {
        if self.started {
            return;
        }
        self.started = true;
        // Samples peers shared before we started may already be enough (`estimate` module
        // doc, "Pooled samples"); a node told the size needs none.
        if self.cfg.estimate.known_size > 0 || self.estimate_ready() {
            self.decide(ctx);
            return;
        }
        self.lookup(ctx, Query::Vicinity, Pending::Vicinity);
    }

    /// Once a round while undecided (`estimate` module doc, "Vicinity first"): push our pool
    /// to peers outside our vicinity again, up to [`VICINITY_PUSHES`] times; once
    /// [`VICINITY_WAIT_ROUNDS`] passed since our vicinity sample, or when the table gave none,
    /// look up what is still missing.
    pub(super) fn estimate_tick(&mut self, ctx: &mut SpContext<'_>) {
        let reading = self.queries.iter().any(|(_, p)| matches!(p, Pending::Vicinity));
        match self.vicinity_at {
            Some(at) if self.round.wrapping_sub(at) >= VICINITY_WAIT_ROUNDS => self.estimate_more(ctx),
            Some(_) if self.vicinity_pushes < VICINITY_PUSHES && !reading => {
                self.lookup(ctx, Query::Vicinity, Pending::Vicinity)
            }
            Some(_) => {}
            None if reading => {}
            None => self.estimate_more(ctx),
        }
    }

    /// Keeps [`PARALLEL_LOOKUPS`] size-estimate lookups of random keys running, but no more
    /// than samples are missing (`estimate` module doc, "Pooled samples"). At start and
    /// then once a round while undecided.
    pub(super) fn estimate_more(&mut self, ctx: &mut SpContext<'_>) {
        let running = self.est_pending;
        let want = PARALLEL_LOOKUPS.min(self.estimate_missing());
        for _ in running..want {
            let mut key = [0u8; 32];
            ctx.rng.fill_bytes(&mut key);
            let key = NodeId(key);
            self.est_pending += 1;
            self.lookup(ctx, Query::Sample { key }, Pending::Estimate { key });
        }
    }

    /// Whether the size estimate has what the decision needs: `estimate.samples` distinct
    /// samples, or as many usable answers of our own (in a network too small for some of
    /// them to give a sample).
    fn estimate_ready(&self) -> bool {
        let need = self.cfg.estimate.samples;
        self.est.samples() >= need || u32::from(self.est_answered) >= need
    }

    /// Samples still missing for the decision (at least 1 while undecided).
    fn estimate_missing(&self) -> u32 {
        let have = self.est.samples().max(u32::from(self.est_answered));
        self.cfg.estimate.samples.saturating_sub(have).max(1)
    }

    /// Sends our pooled samples (`own` first) to up to [`PUSH_PEERS`] random peers of
    /// `peers`: the answer of the lookup that made `own`, or the peers outside the vicinity
    /// that did.
    fn share_sample(&mut self, ctx: &mut SpContext<'_>, own: SizeSample, peers: &[NodeId]) {
        let mut to: Vec<NodeId> = peers.iter().copied().filter(|id| *id != self.me.id).collect();
        if to.is_empty() {
            return;
        }
        let mut samples = vec![own];
        samples.extend(
            self.est
                .newest(MAX_SAMPLES_PER_MESSAGE)
                .into_iter()
                .filter(|s| s.tag != own.tag)
                .take(MAX_SAMPLES_PER_MESSAGE - 1),
        );
        let count = PUSH_PEERS.min(to.len());
        for i in 0..count {
            let j = ctx.rng.gen_range(i..to.len());
            to.swap(i, j);
        }
        for id in &to[..count] {
            ctx.send(*id, SpMessage::SizeSamples { samples: samples.clone() });
        }
    }

    /// A peer's pooled samples: counted while we have not decided.
    pub(super) fn on_size_samples(&mut self, ctx: &mut SpContext<'_>, from: NodeId, samples: Vec<SizeSample>) {
        if samples.len() > MAX_SAMPLES_PER_MESSAGE {
            ctx.push(SpEffect::Rejected { from, reason: "oversized size samples", offence: None });
            return;
        }
        if samples.iter().any(|s| !s.is_valid()) {
            ctx.push(SpEffect::Rejected { from, reason: "size sample out of range", offence: None });
        }
        if self.wanted > 0 {
            return;
        }
        self.est.add_shared(&from, &samples);
        if self.started && self.estimate_ready() {
            self.decide(ctx);
        }
    }

    /// A lookup's report: judged first ([`crate::superpeer::lookup`]); an unusable one is asked
    /// again after a back-off, a usable one is decided on.
    pub(super) fn on_lookup_report(&mut self, ctx: &mut SpContext<'_>, query: u32, report: LookupReport) {
        let Some(pending) = self.queries.iter().find(|(q, _)| *q == query).map(|(_, p)| *p) else {
            ctx.push(SpEffect::Rejected {
                from: self.me.id,
                reason: "lookup result for no pending query",
                offence: None,
            });
            return;
        };
        if let Pending::Vicinity | Pending::ClaimVicinity { .. } = pending {
            let all_listed = report.peers.len() as u64 >= u64::from(report.known);
            let ids: Vec<NodeId> = report.peers.iter().map(|p| p.id).collect();
            self.on_vicinity(ctx, query, &ids, all_listed);
            return;
        }
        let kind = match pending {
            Pending::Vicinity | Pending::ClaimVicinity { .. } => LookupKind::Vicinity,
            Pending::Estimate { .. } => LookupKind::Sample,
            Pending::ClaimClosest { .. } => LookupKind::Claim,
            Pending::ClaimProviders { .. } | Pending::SlotCheck { .. } | Pending::Seed => LookupKind::Providers,
        };
        // Peers it knows of: its neighbours, or the peers its DHT routing table holds.
        let known = self.neighbours.len().max(report.known as usize);
        match judge(kind, &report, &self.me.id, known) {
            Ok(share) => {
                let sampled = match pending {
                    Pending::Estimate { key } => Some((report.key.unwrap_or(key), share)),
                    _ => None,
                };
                self.on_lookup(ctx, query, sampled, report.peers)
            }
            Err(reason) => {
                ctx.push(SpEffect::LookupUnusable { query, reason });
                self.on_lookup_failed(ctx, query)
            }
        }
    }

    /// `sampled`: the uniform key a `Query::Sample` lookup actually ran for, when the driver
    /// chose another than the one asked for, and the share of the asked peers that answered.
    fn on_lookup(&mut self, ctx: &mut SpContext<'_>, query: u32, sampled: Option<(NodeId, f64)>, peers: Vec<PeerInfo>) {
        let Some(pending) = self.take_query(ctx, query, "lookup result for no pending query") else { return };
        self.lookup_failures = 0;
        match pending {
            Pending::Estimate { key } => {
                let ids: Vec<NodeId> = peers.iter().map(|p| p.id).collect();
                let (key, answered) = sampled.unwrap_or((key, 1.0));
                self.est_pending = self.est_pending.saturating_sub(1);
                self.est_answered = self.est_answered.saturating_add(1);
                if let Some(own) = self.est.add_thinned(&key, &ids, answered) {
                    self.share_sample(ctx, own, &ids);
                }
                // Not ready: the next round's tick starts the next lookup, so that the
                // samples peers push meanwhile can make it unneeded.
                if self.wanted == 0 && self.estimate_ready() {
                    self.decide(ctx);
                }
            }
            Pending::ClaimClosest { key } => {
                let mine = crate::superpeer::estimate::xor_fraction(&key, &self.me.id);
                let closest = peers
                    .iter()
                    .filter(|p| p.id != self.me.id)
                    .all(|p| crate::superpeer::estimate::xor_fraction(&key, &p.id) > mine);
                if let Some(c) = self.claim.as_mut().filter(|c| c.key == key) {
                    c.closest = Some(closest);
                }
                self.try_claim(ctx);
            }
            Pending::ClaimProviders { key } => {
                let provided = peers.iter().any(|p| p.id != self.me.id);
                if let Some(c) = self.claim.as_mut().filter(|c| c.key == key) {
                    c.provided = Some(provided);
                }
                self.try_claim(ctx);
            }
            Pending::SlotCheck { key } => {
                let serving =
                    self.head.as_ref().is_some_and(|h| matches!(h.role, HeadRole::Slot { key: k } if k == key));
                if serving {
                    let me = self.me;
                    for p in peers.iter().filter(|p| p.id != me.id).take(MAX_SLOT_CHECK_SENDS) {
                        ctx.send(p.id, SpMessage::SlotHeld { key, head: me });
                    }
                }
            }
            Pending::Seed => {
                // A holder introduces itself to the holders it found; so does a node about to
                // hold a token (its backup has not confirmed yet; the replies find it a holder).
                let pending = self.pending.as_ref().and_then(|p| match p.role {
                    HeadRole::Token { token, epoch } => {
                        Some(TokenEntry { token, epoch, holder: self.me, age: 0, members: 0 })
                    }
                    HeadRole::Slot { .. } => None,
                });
                if let Some(e) = self.my_entry().or(pending) {
                    for p in peers.iter().filter(|p| p.id != self.me.id) {
                        ctx.send(p.id, SpMessage::TokenGossip { entries: vec![e], reply: true });
                    }
                }
                for p in peers {
                    self.cache_insert(p, 0);
                }
                self.try_attach(ctx);
            }
            Pending::Vicinity | Pending::ClaimVicinity { .. } => {}
        }
    }

    /// Our routing table's peers (`listed`; all of them, or its nearest part): a size sample
    /// pushed to peers outside our vicinity, or the answer to a slot claim's "are we the
    /// nearest" (`super::super::vicinity`).
    fn on_vicinity(&mut self, ctx: &mut SpContext<'_>, query: u32, listed: &[NodeId], all_listed: bool) {
        let Some(pending) = self.take_query(ctx, query, "routing table read for no pending query") else { return };
        let me = self.me.id;
        let v = Vicinity::of(&me, listed, all_listed);
        match pending {
            Pending::Vicinity if self.wanted == 0 => {
                let Some(n) = v.size_estimate() else {
                    if self.vicinity_at.is_none() {
                        self.estimate_more(ctx);
                    }
                    return;
                };
                self.vicinity_at.get_or_insert(self.round);
                self.vicinity_pushes = self.vicinity_pushes.saturating_add(1);
                let own = self.est.add_vicinity(&me, n);
                // Neighbours outside our vicinity first: peers we talk to anyway (in a real
                // swarm, connected ones); else any peer of the table outside it.
                let near: Vec<NodeId> =
                    self.neighbours.iter().map(|p| p.id).filter(|id| v.is_outside(&me, id)).collect();
                let outside: Vec<NodeId> = if near.len() >= PUSH_PEERS {
                    near
                } else {
                    listed.iter().filter(|id| v.is_outside(&me, id)).copied().collect()
                };
                self.share_sample(ctx, own, &outside);
                if self.estimate_ready() {
                    self.decide(ctx);
                }
            }
            Pending::ClaimVicinity { key } if self.claim.as_ref().is_some_and(|c| c.key == key) => {
                match v.nearest_in_slot(self.k) {
                    // Another node of our slot is nearer its key: no claim, no lookup.
                    Some(false) => self.claim = None,
                    Some(true) => {
                        if let Some(c) = self.claim.as_mut() {
                            c.closest = Some(true);
                        }
                        self.lookup(ctx, Query::Providers { key }, Pending::ClaimProviders { key });
                    }
                    None => {
                        self.lookup(ctx, Query::Closest { key }, Pending::ClaimClosest { key });
                        self.lookup(ctx, Query::Providers { key }, Pending::ClaimProviders { key });
                    }
                }
            }
            _ => {}
        }
    }

    /// A lookup ended without a usable answer ([`crate::superpeer::lookup`]): nothing is
    /// decided on it. Estimate and claim lookups are asked again after `2^f` rounds (`f` the
    /// failures in a row, at most 16 rounds; an estimate lookup with a fresh random key); a
    /// failed seed lookup counts as an empty one (the node seeds again when its cache stays
    /// empty).
    fn on_lookup_failed(&mut self, ctx: &mut SpContext<'_>, query: u32) {
        let Some(pending) = self.take_query(ctx, query, "lookup failure for no pending query") else { return };
        if let Pending::SlotCheck { .. } = pending {
            // The next scheduled check asks again.
            return;
        }
        if let Pending::Seed = pending {
            // *Ours* (a real DHT's provider lookups of the token directory can keep failing
            // and leave a node unattached to the end): a
            // node whose cache is still empty after a failed seed lookup pulls a neighbour's
            // cache, since the push-pull gossip only runs once a node knows a head. The
            // simulator's DHT oracle never fails, so its runs do not change.
            if self.cache.is_empty() && !self.neighbours.is_empty() {
                let n = self.neighbours[ctx.rng.gen_range(0..self.neighbours.len())];
                ctx.send(n.id, SpMessage::CacheExchange { entries: Vec::new(), reply: true });
            }
            self.try_attach(ctx);
            return;
        }
        self.lookup_failures = self.lookup_failures.saturating_add(1);
        let wait = 1u32 << self.lookup_failures.min(4);
        self.retry.push((self.round.wrapping_add(wait), pending));
    }

    /// Asks again the failed lookups whose back-off is over.
    pub(super) fn run_retries(&mut self, ctx: &mut SpContext<'_>) {
        let round = self.round;
        let mut i = 0;
        while i < self.retry.len() {
            // Due when the round reached it (wrapping-safe: due at most 16 rounds ahead).
            if round.wrapping_sub(self.retry[i].0) >= u32::MAX / 2 {
                i += 1;
                continue;
            }
            let (_, pending) = self.retry.swap_remove(i);
            match pending {
                Pending::Estimate { .. } => {
                    if self.wanted > 0 {
                        // Decided meanwhile (on shared samples): nothing to ask.
                        self.est_pending = self.est_pending.saturating_sub(1);
                        continue;
                    }
                    let mut key = [0u8; 32];
                    ctx.rng.fill_bytes(&mut key);
                    let key = NodeId(key);
                    self.lookup(ctx, Query::Sample { key }, Pending::Estimate { key });
                }
                Pending::ClaimClosest { key } => {
                    if self.claim.as_ref().is_some_and(|c| c.key == key) {
                        self.lookup(ctx, Query::Closest { key }, Pending::ClaimClosest { key });
                    }
                }
                Pending::ClaimProviders { key } => {
                    if self.claim.as_ref().is_some_and(|c| c.key == key) {
                        self.lookup(ctx, Query::Providers { key }, Pending::ClaimProviders { key });
                    }
                }
                Pending::Seed | Pending::SlotCheck { .. } | Pending::Vicinity | Pending::ClaimVicinity { .. } => {}
            }
        }
        if self.retry.is_empty() {
            self.retry = Vec::new();
        }
    }

    /// After the estimate: how many super peers, and is my own slot reserved?
    pub(super) fn decide(&mut self, ctx: &mut SpContext<'_>) {
        let n = self.estimate().unwrap_or(1.0);
        self.est.freeze();
        self.wanted = self.cfg.wanted(n);
        self.k = prefix_bits(self.wanted).min(63);
        let slot = self.me.id.prefix(self.k);
        if slot < self.wanted {
            let key = slot_key(self.k, slot);
            self.claim = Some(Claim { key, closest: None, provided: None });
            // Our routing table may settle "are we the nearest" with no lookup.
            self.lookup(ctx, Query::Vicinity, Pending::ClaimVicinity { key });
        }
        // Seed only a node that knows no head yet (module doc, step 3, "Seeds on need").
        if self.cache.is_empty() {
            self.seed(ctx);
        }
    }

    /// Finds heads for a node whose cache is empty. *Ours*, with the reserved prefix: the first
    /// seed since the node was last attached asks [`PULL_PEERS`] neighbours for the heads they
    /// know instead of [`SEED_LOOKUPS`] lookups (heads announce themselves to their neighbours
    /// and caches spread by gossip, so a neighbour often knows one); the DHT is asked from the
    /// next seed on, `seed_interval` rounds later, or at once by a node with no neighbour. A
    /// token seed is one lookup, whose answer also introduces holders to each other (two
    /// holders of one token learn of each other that way), so it is always made.
    pub(super) fn seed(&mut self, ctx: &mut SpContext<'_>) {
        self.last_seed = self.round;
        let first = self.seeds_unanswered == 0;
        self.seeds_unanswered = self.seeds_unanswered.saturating_add(1);
        if first && self.cfg.method == Method::ReservedPrefix && !self.neighbours.is_empty() {
            let mut to: Vec<NodeId> = self.neighbours.iter().map(|n| n.id).collect();
            let count = PULL_PEERS.min(to.len());
            for i in 0..count {
                let j = ctx.rng.gen_range(i..to.len());
                to.swap(i, j);
            }
            for id in &to[..count] {
                ctx.send(*id, SpMessage::CacheExchange { entries: Vec::new(), reply: true });
            }
            return;
        }
        // Every token seed asks the same key: while the wanted number of tokens fits in one
        // answer, one lookup returns every holder (module doc, step 3, "One directory lookup").
        let lookups = match self.cfg.method {
            Method::RepulsionTokens if self.wanted <= PROVIDERS_PER_ANSWER => 1,
            _ => SEED_LOOKUPS,
        };
        for _ in 0..lookups {
            let key = match self.cfg.method {
                Method::ReservedPrefix => slot_key(self.k, ctx.rng.gen_range(0..self.wanted.max(1))),
                Method::RepulsionTokens => token_directory_key(),
            };
            self.lookup(ctx, Query::Providers { key }, Pending::Seed);
        }
    }

    /// Rounds between the seed lookups of a node that is not attached: 5, doubled for every
    /// seed since it was last attached (or a head), at most 40 (*ours*: while no
    /// head existed yet in the 200-node swarms, every node looked up the token directory
    /// key, or a random slot, four times every 5 rounds, and the 20 nodes nearest to that key
    /// took the lookups of the whole swarm; the heads' announcements and the nodes' cache
    /// gossip still reach a node that waits. Also while its known heads are all
    /// full, module doc, step 3, "Seeds back off until the node attaches").
    pub(super) fn seed_interval(&self) -> u32 {
        5 << u32::from(self.seeds_unanswered.saturating_sub(1).min(3))
    }

    pub(super) fn try_claim(&mut self, ctx: &mut SpContext<'_>) {
        let Some(c) = &self.claim else { return };
        let (Some(closest), Some(provided)) = (c.closest, c.provided) else { return };
        let key = c.key;
        self.claim = None;
        if !closest || provided || self.head.is_some() || self.pending.is_some() {
            return;
        }
        let role = match self.cfg.method {
            Method::ReservedPrefix => HeadRole::Slot { key },
            Method::RepulsionTokens => HeadRole::Token { token: TokenId(key.high_u64()), epoch: 0 },
        };
        // The claimer has no member yet: it takes the role once a backup holds its view.
        self.take_member_less(ctx, role, false);
    }

    /// Another head of our slot (module doc, step 2, "One head per slot"): the one nearer to
    /// the key keeps it.
    pub(super) fn on_slot_held(&mut self, ctx: &mut SpContext<'_>, from: NodeId, key: NodeId, head: PeerInfo) {
        if head.id != from || from == self.me.id || !head.point.is_valid() {
            ctx.push(SpEffect::Rejected { from, reason: "slot claim from a bad head", offence: None });
            return;
        }
        let serving = self.head.as_ref().is_some_and(|h| matches!(h.role, HeadRole::Slot { key: k } if k == key));
        if !serving {
            return;
        }
        let mine = crate::superpeer::estimate::xor_fraction(&key, &self.me.id);
        if crate::superpeer::estimate::xor_fraction(&key, &from) < mine {
            self.stop_head(ctx, Some(head));
            self.try_attach(ctx);
        } else {
            ctx.send(from, SpMessage::SlotHeld { key, head: self.me });
        }
    }
}
