//! Placement steps judged by measured RTTs: the medoid step (`super::super::medoid`) and split
//! offers between cities (module doc of [`super`], step 4).

use super::*;

impl SuperPeerNode {
    /// The holder's side of the measured medoid step (`medoid` module doc):
    /// decides a step whose answers are in (or are late), or starts one. True if the token
    /// is now on its way to a candidate (a `Handover` went out).
    pub(super) fn medoid_tick(&mut self, ctx: &mut SpContext<'_>) -> bool {
        let cfg = self.cfg.clone();
        if cfg.medoid.candidates == 0 || cfg.method != Method::RepulsionTokens {
            return false;
        }
        let (round, me, busy) = (self.round, self.me, self.in_election());
        let Some(h) = self.head.as_mut() else { return false };
        let HeadRole::Token { token, epoch } = h.role else { return false };
        if h.transit.is_some() || h.drain.is_some() || busy {
            h.medoid = None;
            return false;
        }
        if let Some(m) = h.medoid.as_ref() {
            let answered = m.own_left == 0 && m.cands.iter().all(|c| c.1.is_some());
            if !answered && round.wrapping_sub(m.sent) < MEDOID_ROUNDS {
                return false;
            }
            let Some(m) = h.medoid.take() else { return false };
            let cands: Vec<(PeerInfo, Vec<f32>)> = m
                .cands
                .into_iter()
                .filter(|(c, _)| h.members.iter().any(|x| x.id == c.id))
                .filter_map(|(c, r)| r.map(|r| (c, r)))
                .collect();
            // As every move: the gain `min_gain` x the token's cooling (promoted factor
            // included) and a settled super peer's aging (`promotion`), at least MIN_GAIN.
            let age = aging(h.super_peer, round.wrapping_sub(h.promoted_at), &cfg.tokens);
            let needed = (cfg.tokens.min_gain * cooling(epoch, h.super_peer, &cfg.tokens) * age).max(medoid::MIN_GAIN);
            let Some((t, _)) = medoid::decide(&m.sample, &m.own, &cands, needed) else { return false };
            send_move(ctx, h, me, t.id, round, token, epoch);
            return true;
        }
        let settled = round.wrapping_sub(h.since) >= cfg.tokens.hold_rounds
            && round.wrapping_sub(h.disturbed) >= cfg.tokens.hold_rounds;
        let n = h.members.len();
        // A new series at a new epoch or once a quarter of the members changed, else a
        // retry of this one while it has retries left (`medoid` module doc, "Retries").
        let retries = match h.medoid_done {
            Some(d) if d.epoch == epoch && 4 * n.abs_diff(d.members) < d.members.max(1) => {
                if d.retries >= cfg.medoid.retries || round.wrapping_sub(d.at) < medoid::RETRY_ROUNDS {
                    return false;
                }
                d.retries + 1
            }
            _ => 0,
        };
        if !settled || n < medoid::MIN_MEMBERS {
            return false;
        }
        h.medoid_done = Some(MedoidDone { epoch, members: n, retries, at: round });
        let own = (self.nearest_rtt > 0.0).then_some(self.nearest_rtt as f64);
        let access = AccessEstimate::new(&me, own, &h.members, &h.access, &cfg.tokens);
        let k = cfg.medoid.candidates as usize;
        let cands = medoid::candidates(&h.members, &access, cfg.tokens.access_weight, k, retries > 0, &mut *ctx.rng);
        let sample = medoid::sample(&h.members, me.id, cfg.medoid.sample as usize, &mut *ctx.rng);
        if cands.is_empty() || sample.is_empty() {
            return false;
        }
        for c in &cands {
            ctx.send(c.id, SpMessage::MedoidProbe { sample: sample.clone() });
        }
        for id in &sample {
            ctx.push(SpEffect::MeasureRtt { peer: *id });
        }
        h.medoid = Some(Box::new(MedoidRound {
            own: vec![0.0; sample.len()],
            own_left: sample.len(),
            sample,
            cands: cands.into_iter().map(|c| (c, None)).collect(),
            sent: round,
        }));
        false
    }

    /// A measurement for the medoid step (`medoid` module doc): ours as a holder, or one of
    /// the pings our head asked of us as a candidate. A failed ping counts as answered (0).
    pub(super) fn medoid_rtt(&mut self, ctx: &mut SpContext<'_>, peer: NodeId, rtt: Option<f64>) {
        let v = rtt.filter(|r| r.is_finite() && *r > 0.0 && *r < 3600.0).map_or(0.0, |r| r as f32);
        if let Some(m) = self.head.as_mut().and_then(|h| h.medoid.as_mut()) {
            if let Some(i) = m.sample.iter().position(|x| *x == peer) {
                if m.own[i] == 0.0 && m.own_left > 0 {
                    m.own_left -= 1;
                }
                m.own[i] = if m.own[i] > 0.0 && v > 0.0 { m.own[i].min(v) } else { m.own[i].max(v) };
            }
        }
        if let Some(m) = self.measuring.as_mut().filter(|m| !m.answered) {
            if let Some(i) = m.sample.iter().position(|x| *x == peer) {
                if m.rtts[i] == 0.0 && m.left > 0 {
                    m.left -= 1;
                }
                m.rtts[i] = if m.rtts[i] > 0.0 && v > 0.0 { m.rtts[i].min(v) } else { m.rtts[i].max(v) };
                if m.left == 0 {
                    self.answer_medoid(ctx);
                }
            }
        }
    }

    /// Our head asks us, as a candidate head, to ping `sample` (`medoid` module doc). Only
    /// our own head is answered (no one else gets pings out of us), at most
    /// `medoid.sample` peers.
    pub(super) fn on_medoid_probe(&mut self, ctx: &mut SpContext<'_>, from: NodeId, sample: Vec<NodeId>) {
        if sample.is_empty() || sample.len() > self.cfg.medoid.sample.max(1) as usize {
            ctx.push(SpEffect::Rejected { from, reason: "medoid probe with a bad sample size", offence: None });
            return;
        }
        if self.head.is_some() || self.attached.is_none_or(|a| a.id != from) {
            return;
        }
        for id in &sample {
            if *id != self.me.id {
                ctx.push(SpEffect::MeasureRtt { peer: *id });
            }
        }
        let n = sample.len();
        let left = sample.iter().filter(|id| **id != self.me.id).count();
        self.measuring = Some(Box::new(Measuring {
            head: from,
            sample,
            rtts: vec![0.0; n],
            left,
            started: self.round,
            answered: false,
        }));
        if left == 0 {
            self.answer_medoid(ctx);
        }
    }

    /// Sends our head the RTTs measured for its `MedoidProbe`; the job is kept, answered,
    /// to recognise a `Handover` that follows from it.
    pub(super) fn answer_medoid(&mut self, ctx: &mut SpContext<'_>) {
        if let Some(m) = self.measuring.as_mut().filter(|m| !m.answered) {
            m.answered = true;
            m.sample = Vec::new();
            ctx.send(m.head, SpMessage::MedoidCost { rtts: std::mem::take(&mut m.rtts) });
        }
    }

    /// A candidate's answer (`medoid` module doc); late or unasked answers are dropped.
    pub(super) fn on_medoid_cost(&mut self, ctx: &mut SpContext<'_>, from: NodeId, rtts: Vec<f32>) {
        let Some(m) = self.head.as_mut().and_then(|h| h.medoid.as_mut()) else { return };
        let Some(c) = m.cands.iter_mut().find(|c| c.0.id == from) else { return };
        if rtts.len() != m.sample.len() || rtts.iter().any(|r| !(r.is_finite() && *r >= 0.0 && *r < 3600.0)) {
            ctx.push(SpEffect::Rejected { from, reason: "medoid cost with bad RTTs", offence: None });
            return;
        }
        c.1 = Some(rtts);
    }

    /// A split offer (`token` module doc, "Split offers"): a settled holder (still for the
    /// hold time, no handover in flight, no election, no crash nearby for the hold time)
    /// whose token's removal (every member placed at a known token with room), times the
    /// token's cooling, costs less than `split.ratio x gain` jumps: it hands the token to `at`
    /// with itself as the only member (`send_jump`). Members first : a holder with members drains them
    /// (`StepDownTo` the heads the removal placed them at, `drain_tick`) and hands the token
    /// only once none is left.
    pub(super) fn on_split(&mut self, ctx: &mut SpContext<'_>, from: NodeId, at: PeerInfo, gain: f32) {
        if !gain.is_finite() || gain <= 0.0 || !at.point.is_valid() {
            ctx.push(SpEffect::Rejected { from, reason: "bad split offer", offence: None });
            return;
        }
        let (round, me, ratio, hold) = (self.round, self.me, self.cfg.split.ratio, self.cfg.tokens.hold_rounds);
        if ratio <= 0.0 || at.id == me.id || self.in_election() || self.cfg.method != Method::RepulsionTokens {
            return;
        }
        let Some(h) = self.head.as_ref() else { return };
        let HeadRole::Token { token, epoch } = h.role else { return };
        // Not while the neighbourhood recovers from a crash (jumps then left members
        // without a head with room).
        if h.transit.is_some()
            || h.drain.is_some()
            || round.wrapping_sub(h.since) < hold
            || round.wrapping_sub(h.disturbed) < hold
        {
            return;
        }
        if h.view.iter().any(|e| e.holder.id == at.id) || h.members.iter().any(|m| m.id == at.id) {
            return;
        }
        // The token's cooling (`1 + epoch / cooling`): every move and jump makes its next jump
        // dearer, so the jumps die out. Neither the promoted factor nor a super peer's aging
        // apply: with them, useful jumps were refused (N = 1,000, 20 seeds: 1.14 x the
        // k-median's mean RTT against 1.11; N = 10^5: 1.28 against 1.25).
        let cool = 1.0 + epoch as f64 / self.cfg.tokens.cooling;
        match self.removal() {
            Some(r) if r.cost * cool < ratio * gain as f64 => {}
            _ => return,
        }
        let Some(h) = self.head.as_mut() else { return };
        h.drain = Some(Drain { at, started: round, sent: Vec::new(), full: Vec::new() });
        if !h.members.is_empty() {
            // Members first : they switch to the heads the removal placed them at
            // while we still serve them; the token goes once they all left.
            self.rehome(ctx);
            return;
        }
        send_jump(ctx, h, me, at.id, round, token, epoch);
    }
}
