//! A normal node's round: finding and attaching to the nearest head with room, and switching
//! when a better one has room (module doc of [`super`], step 3).
//!
//! A full head serves whoever asked first. Tried and not kept: displacement, one bid of
//! Bertsekas' auction (a full head gives the place of the member that reported the least
//! regret, its measured RTT to its next head minus to this one, to a node whose measured gain
//! is larger, under a price that halves every 20 rounds). N = 1,000, 40 seeds: 1.070 x the
//! k-median against 1.088, within the spread between seeds, but converged on 16 seeds against
//! 39; N = 10^4, 20 seeds: 1.155 against 1.166, and nodes left unattached on 4 seeds of the
//! tokens and 16 of the prefix method (a displaced member's next head was often full too: a
//! member knows no head's room). `docs/results/superpeers-lab.md`, "Tried and not kept".

use super::*;

impl SuperPeerNode {
    pub(super) fn normal_tick(&mut self, ctx: &mut SpContext<'_>) {
        if !self.neighbours.is_empty() && !self.cache.is_empty() {
            // Vicinity-style: three times in four with one of the nearer half of the
            // neighbours (their super peers are likely near us too), else with any.
            let len = self.neighbours.len();
            let pick =
                if ctx.rng.gen_bool(0.75) { ctx.rng.gen_range(0..len.div_ceil(2)) } else { ctx.rng.gen_range(0..len) };
            let n = self.neighbours[pick];
            ctx.send(n.id, SpMessage::CacheExchange { entries: self.cache_entries(), reply: true });
        }
        if self.cache.is_empty() && self.wanted > 0 && self.round.wrapping_sub(self.last_seed) >= self.seed_interval() {
            self.seed(ctx);
        }
        if let Some((id, r)) = self.attaching {
            if self.round.wrapping_sub(r) >= 3 {
                self.attaching = None;
                self.backoff(id);
            }
        }
        // A suspected head that left our check unanswered for `doubt_rounds`: the election
        // goes on (module doc, step 5, "A doubter wins only once its check failed"); its late
        // `Accept` until then still counts (a node takes an `Accept` from a head it knows).
        if let Some(d) = self.doubted.as_ref() {
            if self.round.wrapping_sub(d.since) >= self.cfg.doubt_rounds() {
                let id = d.head.id;
                self.doubt_failed(ctx, id);
            }
        }
        // A head sends its members its view at least every `view_every` rounds (its liveness
        // signal). A member that heard nothing from its head for 3 x `view_every` rounds asks
        // it again with `Attach`: a live head answers `Accept` and its view, a node that is no
        // longer a head refuses (the member then looks again, see `Refuse`), a dead one fails.
        // Without this a member whose `Moved` named a holder that had already handed the token
        // on (two moves within one message delay, seen in real swarms) stayed attached to a
        // non-head for good: the driver's probes only check that the node is alive.
        if let Some(a) = self.attached {
            if self.attaching.is_none() && self.round.wrapping_sub(self.heard) >= 3 * VIEW_EVERY {
                self.heard = self.round;
                self.attaching = Some((a.id, self.round));
                ctx.send(a.id, SpMessage::Attach { point: self.me.point });
            }
        }
        if let Some(e) = &self.election {
            // Give the cluster's re-election time before looking elsewhere; once it is decided
            // (another member leads) there is nothing to wait for (members that the new leader,
            // full, refused would otherwise sit unattached for the rest of the 10 rounds, with
            // heads with room in their caches).
            if !e.decided && self.round.wrapping_sub(e.started) < 10 && self.attached.is_none() {
                return;
            }
        }
        if self.hunting()
            && !self.cache.is_empty()
            && self.cache.iter().all(|c| c.refused_lately(self.round))
            && self.wanted > 0
            && self.round.wrapping_sub(self.last_seed) >= self.seed_interval()
        {
            // Unattached and every known head is full: look further (see the module doc,
            // step 3), the answers take the places of the full heads in the cache.
            self.seed(ctx);
        }
        self.probe(ctx);
        self.try_attach(ctx);
    }

    /// `id` is no head any more: forget it, and if it was our head, detach (without a
    /// view). Returns whether we were attached to it.
    pub(super) fn leave_head(&mut self, ctx: &mut SpContext<'_>, id: NodeId) -> bool {
        self.forget_head(id);
        if self.attached.is_none_or(|a| a.id != id) {
            return false;
        }
        self.attached = None;
        self.member_view = None;
        ctx.push(SpEffect::Detached);
        true
    }

    /// True while our head is the new holder our split jump handed us to (`placing`).
    pub(super) fn placing(&self) -> bool {
        self.attached.is_some_and(|a| self.placing == Some(a.id))
    }

    /// True while the node is neither a head nor attached nor waiting for an answer: it
    /// looks for a head with room.
    pub(super) fn hunting(&self) -> bool {
        self.head.is_none() && self.attached.is_none() && self.attaching.is_none()
    }

    /// We are a member of `head` by a handover, without an `Attach`: a `Moved`
    /// from our old head, or the new holder of the token our split jump handed on with us as
    /// its only member.
    pub(super) fn member_of(&mut self, ctx: &mut SpContext<'_>, head: PeerInfo) {
        self.attached = Some(head);
        self.attached_rtt = self.known_rtt(head.id);
        self.attached_probed = 0;
        self.heard = self.round;
        self.report_access(ctx);
    }

    pub(super) fn try_attach(&mut self, ctx: &mut SpContext<'_>) {
        if self.head.is_some() || self.attaching.is_some() {
            return;
        }
        let me = self.me.point;
        let round = self.round;
        // An attached node switches on a measured RTT only: a head that merely looks nearer
        // is measured first (`probe`). One whose measurement was asked for and failed is
        // passed over until it is measured (module doc, step 3, "A failed measurement does
        // not block").
        let placing = self.placing();
        let skip_failed = self.attached.is_some() && !placing;
        let best = self
            .cache
            .iter()
            .filter(|c| c.backoff_until <= round && !(skip_failed && c.rtt <= 0.0 && c.failed))
            .map(|c| (self.entry_rtt(c), c.rtt > 0.0, c.info))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let Some((d, measured, best)) = best else { return };
        let go = match self.attached {
            None => true,
            Some(a) if placing => a.id != best.id,
            Some(a) => a.id != best.id && measured && d < self.cfg.discovery.switch_factor * self.head_rtt(&a),
        };
        if go {
            self.attaching = Some((best.id, round));
            ctx.send(best.id, SpMessage::Attach { point: me });
        }
    }
}
