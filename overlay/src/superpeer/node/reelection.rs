//! A cluster's re-election when its head dies: joining it, running the configured algorithm
//! ([`crate::AnyElection`]), taking the role over, relays, and ending late elections (module
//! doc of [`super`], step 5, "Late elections end").

use super::*;

impl SuperPeerNode {
    pub(super) fn peer_down(&mut self, ctx: &mut SpContext<'_>, id: NodeId) {
        if id == self.me.id {
            return;
        }
        self.neighbours.retain(|n| n.id != id);
        // A head reported down is ignored in gossip for `cache_ttl` rounds, as one that said
        // it serves no cluster (module doc, step 5, "A dead head is not learned again",
        //): other nodes still pass its entry on until their entries age out.
        let known_head = self.cache.iter().any(|c| c.info.id == id)
            || self.attached.is_some_and(|a| a.id == id)
            || self.member_view.as_ref().is_some_and(|(h, _, _)| *h == id);
        if known_head {
            self.forget_head(id);
        }
        self.cache.retain(|c| c.info.id != id);
        if self.attaching.is_some_and(|(a, _)| a == id) {
            self.attaching = None;
        }
        if let Some(h) = self.head.as_mut() {
            let before = h.members.len();
            h.members.retain(|m| m.id != id);
            if h.members.len() != before {
                h.dirty = true;
            }
            let known = h.view.len();
            h.view.retain(|e| e.holder.id != id);
            if h.members.len() != before || h.view.len() != known {
                // A crash nearby: the cluster and its neighbours recover (no split for a while).
                h.disturbed = self.round;
            }
            if h.transit.as_ref().is_some_and(|(t, _, _)| *t == id) {
                h.end_transit();
            }
            let backup_down = h.backup == Some(id);
            if backup_down {
                h.backup = None;
            }
            if (before > 0 && h.members.is_empty()) || backup_down {
                // The last member or the backup is gone: name a (new) backup now, not at the
                // next round (module doc, step 6).
                self.send_view(ctx);
            }
        }
        while let Some(i) = self.relays.iter().position(|r| r.to == id) {
            // The neighbour asked to take a relayed token is down: the next one.
            self.relay_next(ctx, i);
        }
        if self.pending.as_ref().is_some_and(|p| p.backup == id) {
            // The neighbour asked to back the role we are about to take is down: the next one.
            self.pending_next(ctx);
        }
        self.doubt_failed(ctx, id);
        if let Some(a) = self.attached.filter(|a| a.id == id) {
            let rtt = self.head_rtt(&a);
            self.attached = None;
            ctx.push(SpEffect::Detached);
            self.start_election(ctx, id, rtt);
        } else if self.head.is_none()
            && self.attached.is_none()
            && self.member_view.as_ref().is_some_and(|(h, _, _)| *h == id)
            && self.election.as_ref().is_none_or(|e| e.dead != id)
        {
            // We handed our token to `id` a moment ago and hold the view the `Handover` made
            // (module doc, step 4), but are not attached to it yet: we are a member
            // of its cluster all the same (maybe its only one).
            self.start_election(ctx, id, 0.0);
        }
        if let Some((_, role, _, at)) = self.backup_view.take_if(|b| b.0 == id) {
            // Only a fresh backup view counts (the holder refreshes it every `view_every`
            // rounds while it has no member), and only if no election for it runs here.
            let fresh = self.round.wrapping_sub(at) <= VIEW_EVERY + 1;
            // (An election for `id` over another role, e.g. one it led a moment ago and that
            // we hold a stand-in view of, does not count: module doc, step 5.)
            let running = self.election.as_ref().is_some_and(|e| e.dead == id && same_role(&e.role, &role));
            if fresh && !running && self.head.is_none() {
                self.take_over_as_backup(ctx, role);
            }
        }
        if let Some(e) = self.election.as_mut() {
            let mut effects = Vec::new();
            let mut c = Context::new(ctx.now, ctx.rng, &mut effects);
            e.election.handle(&mut c, Input::PeerDown(id));
            self.apply_election_effects(ctx, effects);
        }
    }

    // ----- messages -----

    /// A member of the dead head's cluster whose view we lack takes part in our election
    /// (module doc, step 5, "The group is the union of the views"): we add it to the group
    /// before its message is read, up to [`MAX_GROUP_FACTOR`] x the cap.
    pub(super) fn admit_to_election(&mut self, ctx: &mut SpContext<'_>, from: NodeId) {
        let limit = (self.cfg.cluster_cap as usize).saturating_mul(MAX_GROUP_FACTOR).saturating_add(2);
        let Some(e) = self.election.as_mut() else { return };
        if from == self.me.id || from == e.dead || e.group.contains(&from) || e.group.len() >= limit {
            return;
        }
        let ranks = e.group.ranks().iter().copied().chain(std::iter::once(Rank::new(0, from)));
        let group = Arc::new(Membership::new(ranks));
        e.group = group.clone();
        self.drive_election(ctx, Input::Membership(group));
    }

    /// Our check of the suspected head `id` failed (it is down, did not answer within the
    /// attach timeout, or is no head any more): the election goes on, and if it already made
    /// us the leader we take the role now (module doc, step 5, "A doubter wins only once its
    /// check failed").
    pub(super) fn doubt_failed(&mut self, ctx: &mut SpContext<'_>, id: NodeId) {
        if self.doubted.take_if(|d| d.head.id == id).is_none() {
            return;
        }
        let won = self.election.as_ref().is_some_and(|e| e.dead == id && e.won_in_doubt && !e.decided);
        if won && self.take_over(ctx) {
            if let Some(e) = self.election.as_mut() {
                e.decided = true;
            }
        }
    }

    /// Our check found the suspected head alive (module doc, step 5): those who asked hear
    /// `HeadAlive`, and our own re-election of it stops while it is undecided.
    /// If the election had made us its leader ("A doubter wins only once its check failed"),
    /// every member of its group hears it too: those that follow us drop it as well.
    #[expect(clippy::boxed_local, reason = "the doubt is taken out of the node's `Option<Box<Doubt>>` as it is")]
    pub(super) fn head_alive(&mut self, ctx: &mut SpContext<'_>, d: Box<Doubt>) {
        let won = self.election.as_ref().filter(|e| e.dead == d.head.id && e.won_in_doubt && !e.decided);
        let mut told: Vec<NodeId> = won.map_or_else(Vec::new, |e| e.group.ranks().iter().map(|r| r.id).collect());
        told.retain(|id| *id != self.me.id && *id != d.head.id && !d.askers.contains(id));
        for to in d.askers.iter().chain(told.iter()) {
            ctx.send(*to, SpMessage::HeadAlive { head: d.head });
        }
        if self.election.as_ref().is_some_and(|e| e.dead == d.head.id && !e.decided) {
            self.election = None;
        }
    }

    /// `head_rtt`: the RTT to `dead` while it was our head (0 if unknown), for the
    /// election's timeouts ([`Self::election_config`]).
    pub(super) fn start_election(&mut self, ctx: &mut SpContext<'_>, dead: NodeId, head_rtt: f64) {
        self.open_election(ctx, dead, false, head_rtt);
    }

    /// Starts the re-election of `dead`'s cluster over our view of it; a head takes part only
    /// with `as_head` (it left that cluster a moment ago and its `Detach` failed), and then
    /// hands a won token on ([`Self::relay_role`]).
    pub(super) fn open_election(&mut self, ctx: &mut SpContext<'_>, dead: NodeId, as_head: bool, head_rtt: f64) {
        let Some((head, role, ids)) = self.member_view.clone() else { return };
        if head != dead || (self.head.is_some() && !as_head) {
            return;
        }
        // The heir, first in the view, ranks above the other members (module doc, step 5,
        // "The heir").
        let rank = |id: NodeId| Rank::new(heir::priority(&ids, dead, id), id);
        let group = Arc::new(Membership::new(ids.iter().filter(|id| **id != dead).map(|id| rank(*id))));
        if !group.contains(&self.me.id) {
            return;
        }
        let election = AnyElection::new(rank(self.me.id), group.clone(), &self.election_config(head_rtt));
        self.election = Some(Box::new(ClusterElection {
            dead,
            role,
            election,
            group,
            started: self.round,
            decided: false,
            won_in_doubt: false,
        }));
        self.drive_election(ctx, Input::Start);
        // `Election` messages for this cluster that came before we knew we belong to it are
        // handled now (a member whose old holder's `Moved` came after a lower
        // member's `Election` ignored it, and both won: the token recreated twice).
        if let Some(early) = self.early.take() {
            let round = self.round;
            let (now, rest): (Vec<_>, Vec<_>) = early
                .into_iter()
                .filter(|e| round.wrapping_sub(e.3) <= EARLY_ELECTION_ROUNDS)
                .partition(|e| e.0 == dead);
            if !rest.is_empty() {
                self.early = Some(Box::new(rest));
            }
            for (_, from, msg, _) in now {
                if self.election.as_ref().is_some_and(|e| e.dead == dead) {
                    self.drive_election(ctx, Input::Message { from, msg });
                }
            }
        }
    }

    /// The cluster election's settings with its timeouts scaled to the round trips around
    /// this node (module doc, step 5, "Timeouts follow the RTT"): the answer timeout is at
    /// least [`ELECTION_RTT_FACTOR`] x the largest of twice `head_rtt` (the RTT to the dead
    /// head) and the RTTs to its cached heads (measured where measured, else predicted),
    /// plus our own loop's lateness (`SpInput::Lateness`, "A late loop waits longer"); the
    /// other timeouts keep their ratio to it, at most [`MAX_TIMEOUT_SCALE`] times the
    /// configured ones.
    pub(super) fn election_config(&self, head_rtt: f64) -> ElectionConfig {
        let base = self.cfg.election.timeouts();
        if base.answer_timeout_ms == 0 {
            return base;
        }
        let mut span = if head_rtt.is_finite() { 2.0 * head_rtt.max(0.0) } else { 0.0 };
        for c in &self.cache {
            span = span.max(self.entry_rtt(c));
        }
        // Each of the four hops of an exchange (our send, its read, its reply, our read) may
        // wait in a run queue as long as our loop runs late, as each may take an RTT's part.
        let wanted_ms = ELECTION_RTT_FACTOR * (span + self.lateness as f64) * 1_000.0;
        let scale = wanted_ms / base.answer_timeout_ms as f64;
        if !scale.is_finite() || scale <= 1.0 {
            return base;
        }
        let scale = scale.min(MAX_TIMEOUT_SCALE);
        let up = |ms: u64| ((ms as f64) * scale).ceil() as u64;
        ElectionConfig {
            answer_timeout_ms: up(base.answer_timeout_ms),
            coordinator_timeout_ms: up(base.coordinator_timeout_ms),
            nomination_timeout_ms: up(base.nomination_timeout_ms),
            lap_timeout_ms: up(base.lap_timeout_ms),
            hop_delay_ms: up(base.hop_delay_ms),
            echo_ack_timeout_ms: up(base.echo_ack_timeout_ms),
            ..base
        }
    }

    pub(super) fn drive_election(&mut self, ctx: &mut SpContext<'_>, input: Input) {
        let Some(e) = self.election.as_mut() else { return };
        let mut effects = Vec::new();
        {
            let mut c = Context::new(ctx.now, ctx.rng, &mut effects);
            e.election.handle(&mut c, input);
        }
        self.apply_election_effects(ctx, effects);
    }

    pub(super) fn apply_election_effects(&mut self, ctx: &mut SpContext<'_>, effects: Vec<Effect>) {
        let Some(dead) = self.election.as_ref().map(|e| e.dead) else { return };
        for eff in effects {
            match eff {
                Effect::Send { to, msg } => ctx.send(to, SpMessage::Election { dead, msg }),
                Effect::SetTimer { timer, after } => ctx.push(SpEffect::SetTimer { timer, after }),
                Effect::CancelTimer { timer } => ctx.push(SpEffect::CancelTimer { timer }),
                Effect::Leader(l) => {
                    // One decision per election: a late `Election` (a member that learned of
                    // the crash late, or a restart after a timeout) makes the highest member
                    // announce itself again; it must not recreate a token it has since handed
                    // on, nor may a member that already knows the leader take over.
                    let Some(e) = self.election.as_mut() else { continue };
                    if e.decided {
                        continue;
                    }
                    if l != self.me.id {
                        self.follow_leader(l);
                    } else if self.doubted.as_ref().is_some_and(|d| d.head.id == dead) {
                        // Our check of the head is still out: the role waits for its
                        // failure (module doc, step 5, "A doubter wins only once its check
                        // failed"); `HeadAlive` or an `Accept` drops the election instead.
                        e.won_in_doubt = true;
                    } else if self.take_over(ctx) {
                        if let Some(e) = self.election.as_mut() {
                            e.decided = true;
                        }
                    }
                }
                Effect::ElectionStarted => {}
                Effect::Rejected { from, reason, offence } => ctx.push(SpEffect::Rejected { from, reason, offence }),
            }
        }
    }

    /// Our re-election's leader is `l`, not us: the election is decided for this node, and
    /// the leader's group stands in for its view until it comes (module doc, step 5):
    /// if the leader dies before we attached to it (its `Takeover` lost with it, or it
    /// relays the role), we re-elect over it.
    pub(super) fn follow_leader(&mut self, l: NodeId) {
        let Some(e) = self.election.as_mut() else { return };
        e.decided = true;
        let (dead, role) = (e.dead, e.role);
        if self.head.is_none() {
            self.member_view = self.member_view.take().map(|(h, r, ids)| {
                if h != dead {
                    return (h, r, ids);
                }
                // The leader first: it names no heir before its first choice (`heir` module
                // doc), and if it dies the view must rank nobody above the others.
                let ids: Vec<NodeId> =
                    std::iter::once(l).chain(ids.iter().copied().filter(|id| *id != dead && *id != l)).collect();
                (l, recreated(role), ids.into())
            });
        }
    }

    /// Leaves our re-election once its outcome holds (module doc, step 5, "Late elections
    /// end"): it is decided and we hold the role ourselves, or we are attached to the head
    /// whose view names that role. Called after every input.
    pub(super) fn retire_election(&mut self, ctx: &mut SpContext<'_>) {
        if self.retired.as_ref().is_some_and(|r| self.round.wrapping_sub(r.at) > RETIRED_ROUNDS) {
            self.retired = None;
        }
        let Some(e) = self.election.as_ref() else { return };
        if !e.decided {
            return;
        }
        let holder = match (&self.head, self.attached, &self.member_view) {
            (Some(h), _, _) if same_role(&h.role, &e.role) => Some((self.me, h.role)),
            (None, Some(a), Some((vh, vrole, _))) if *vh == a.id && same_role(vrole, &e.role) => Some((a, *vrole)),
            _ => None,
        };
        let Some((head, role)) = holder else { return };
        let dead = e.dead;
        self.election = None;
        self.retired = Some(Box::new(Retired { dead, head, role, at: self.round }));
        for timer in [Timer::T1, Timer::T2, Timer::T3, Timer::T4, Timer::Heartbeat, Timer::Lap] {
            ctx.push(SpEffect::CancelTimer { timer });
        }
    }

    /// A message of a re-election we left (module doc, step 5, "Late elections end"): one
    /// that says its sender still runs the election (bully's `Election`, a ring's or
    /// Villadangos' messages, ...) gets the outcome, a `Takeover` naming the head that holds
    /// the role; the rest (answers, announcements) is late traffic of the finished election
    /// and is dropped. Returns whether the message was ours to answer.
    pub(super) fn answer_retired(
        &mut self,
        ctx: &mut SpContext<'_>,
        from: NodeId,
        dead: NodeId,
        msg: &Message,
    ) -> bool {
        let Some(r) = self.retired.as_ref().filter(|r| r.dead == dead) else { return false };
        let running = matches!(
            msg,
            Message::Election
                | Message::IamUp
                | Message::Nomination
                | Message::RingElection { .. }
                | Message::CrElection { .. }
                | Message::Message1 { .. }
                | Message::Message2 { .. }
                | Message::Message3 { .. }
        );
        let (role, head) = self.current_holder(&r.role).unwrap_or((r.role, r.head));
        // A holder that has handed the role on and is not attached yet names nobody: naming
        // itself, it drew late members to a node that refuses them .
        let stale = head.id == self.me.id && !self.head.as_ref().is_some_and(|h| same_role(&h.role, &role));
        if running && from != head.id && !stale {
            ctx.send(from, SpMessage::Takeover { dead, role, head });
        }
        true
    }

    /// The holder of `role` as this node knows it now (module doc, step 5, "Late elections
    /// end"): ourselves if we hold it, else the head we are attached to if its
    /// view names it (a token at the epoch that view gives). The holder a re-election ended
    /// with may have moved the token on since; its members followed it, so their attachment
    /// is the fresher news.
    pub(super) fn current_holder(&self, role: &HeadRole) -> Option<(HeadRole, PeerInfo)> {
        if let Some(h) = self.head.as_ref().filter(|h| same_role(&h.role, role)) {
            return Some((h.role, self.me));
        }
        let a = self.attached?;
        let (vh, vrole, _) = self.member_view.as_ref()?;
        (*vh == a.id && same_role(vrole, role)).then_some((*vrole, a))
    }

    /// The highest epoch of token `role` this node knows of: the one it holds, or the one
    /// its member view names (its head's, or the leader's stand-in after
    /// [`Self::follow_leader`]). A slot has no epoch: `None`.
    pub(super) fn known_epoch(&self, role: &HeadRole) -> Option<u32> {
        let own = self.head.as_ref().filter(|h| same_role(&h.role, role)).and_then(|h| role_epoch(&h.role));
        let viewed =
            self.member_view.as_ref().filter(|(_, r, _)| same_role(r, role)).and_then(|(_, r, _)| role_epoch(r));
        own.max(viewed)
    }

    /// We are entitled to the recreated `role` (its epoch already counted up) but serve a
    /// cluster already, and a node holds one role: hand it to a neighbour that holds none,
    /// with a `Handover` that carries no member (module doc, step 6, "relay"). Tokens only
    /// (a slot cannot be handed over). Several relays may run at once , and a
    /// relay outlives our own role. Returns whether the role is on its way.
    pub(super) fn relay_role(&mut self, ctx: &mut SpContext<'_>, role: HeadRole) -> bool {
        let HeadRole::Token { token, .. } = role else { return false };
        let same = self.head.as_ref().is_some_and(|h| matches!(h.role, HeadRole::Token { token: t, .. } if t == token));
        let relaying = self.relays.iter().any(|r| matches!(r.role, HeadRole::Token { token: t, .. } if t == token));
        if same || relaying {
            // Our own token (two winners meet), or this token is on its way already.
            return true;
        }
        self.relays.push(Relay { role, to: self.me.id, sent: self.round, tried: Vec::new() });
        let i = self.relays.len() - 1;
        self.relay_next(ctx, i)
    }

    /// Asks the next neighbour of relay `i` (nearest first, not known to serve a cluster, not
    /// asked yet, not asked to take another relayed token) to take the relayed token; gives
    /// up when none is left.
    pub(super) fn relay_next(&mut self, ctx: &mut SpContext<'_>, i: usize) -> bool {
        let round = self.round;
        let me = self.me.id;
        let Some(r) = self.relays.get(i) else { return false };
        let HeadRole::Token { token, epoch } = r.role else { return false };
        let view: &[TokenEntry] = self.head.as_ref().map_or(&[], |h| &h.view);
        let known_head =
            |id: &NodeId| self.cache.iter().any(|c| c.info.id == *id) || view.iter().any(|e| e.holder.id == *id);
        let busy = |id: &NodeId| self.relays.iter().enumerate().any(|(j, o)| j != i && o.to == *id);
        let next = self.neighbours.iter().find(|n| !r.tried.contains(&n.id) && !known_head(&n.id) && !busy(&n.id));
        let Some(n) = next.map(|n| n.id) else {
            self.relays.remove(i);
            ctx.push(SpEffect::Rejected {
                from: me,
                reason: "no neighbour left to hand a recreated token to",
                offence: None,
            });
            return false;
        };
        let msg = SpMessage::Handover { token, epoch, promoted: true, members: Vec::new(), view: view.to_vec() };
        let r = &mut self.relays[i];
        r.tried.push(n);
        r.to = n;
        r.sent = round;
        ctx.send(n, msg);
        true
    }

    /// Relayed tokens without an answer for 3 rounds are asked for again (a receiver that
    /// took one acknowledges again once its backup confirmed).
    pub(super) fn resend_relays(&mut self, ctx: &mut SpContext<'_>) {
        let round = self.round;
        let view: Vec<TokenEntry> = self.head.as_ref().map_or(Vec::new(), |h| h.view.clone());
        for r in self.relays.iter_mut() {
            if let HeadRole::Token { token, epoch } = r.role {
                if round.wrapping_sub(r.sent) >= 3 {
                    r.sent = round;
                    let msg =
                        SpMessage::Handover { token, epoch, promoted: true, members: Vec::new(), view: view.clone() };
                    ctx.send(r.to, msg);
                }
            }
        }
    }

    /// The member-less head that named us backup is down and its backup view is fresh: the
    /// re-election over the group `[backup]` has one candidate, so we take the role over at
    /// once (token at epoch + 1, or the slot; module doc, step 6). We do so even while we take
    /// part in the re-election of our own head's cluster (both heads crashed together),
    /// because nobody but us is entitled to this role. A slot election we leave (the other
    /// members' election takes our silence for a crash and goes on without us: a slot cannot
    /// be relayed); a token election we stay in : if we win it we relay that
    /// token, and we may be the last live member of that cluster (the windows harness lost
    /// the token in 18 of 200 seeds when we left).
    pub(super) fn take_over_as_backup(&mut self, ctx: &mut SpContext<'_>, role: HeadRole) {
        let role = recreated(role);
        if self.election.as_ref().is_some_and(|e| matches!(e.role, HeadRole::Slot { .. })) {
            self.election = None;
        }
        self.take_member_less(ctx, role, true);
    }

    /// Takes `role` (its epoch already counted) without a member (module doc, step 6):
    /// first a neighbour must hold the backup view of it, so that a crash of ours right
    /// after we took it does not take the role along; the role is taken when that backup
    /// confirms (`Detach`, [`Self::confirm_pending`]). With no neighbour to ask, at once. A
    /// node that holds or awaits a role already relays a token ([`Self::relay_role`]); a
    /// second slot is lost (module doc, "Known limits").
    pub(super) fn take_member_less(&mut self, ctx: &mut SpContext<'_>, role: HeadRole, promote: bool) {
        if self.head.is_some() || self.pending.is_some() {
            if !self.relay_role(ctx, role) {
                ctx.push(SpEffect::Rejected {
                    from: self.me.id,
                    reason: "a second role that cannot be relayed",
                    offence: None,
                });
            }
            return;
        }
        self.pending =
            Some(Box::new(PendingRole { role, promote, backup: self.me.id, sent: self.round, tried: Vec::new() }));
        self.pending_next(ctx);
    }

    /// Names the next neighbour backup of the pending role (nearest first, not known to serve
    /// a cluster, else any not asked yet), or takes the role at once when none is left.
    pub(super) fn pending_next(&mut self, ctx: &mut SpContext<'_>) {
        let Some(p) = self.pending.as_ref() else { return };
        let known_head = |id: &NodeId| self.cache.iter().any(|c| c.info.id == *id);
        let next = self
            .neighbours
            .iter()
            .find(|n| !p.tried.contains(&n.id) && !known_head(&n.id))
            .or_else(|| self.neighbours.iter().find(|n| !p.tried.contains(&n.id)))
            .map(|n| n.id);
        let Some(b) = next else {
            if let Some(p) = self.pending.take() {
                self.become_head(ctx, p.role, Vec::new(), p.promote);
            }
            return;
        };
        let (me, round) = (self.me.id, self.round);
        if let Some(p) = self.pending.as_mut() {
            p.tried.push(b);
            p.backup = b;
            p.sent = round;
            ctx.send(b, SpMessage::ClusterView { role: p.role, members: Arc::from(vec![me, b]) });
        }
    }

    /// The pending role's backup holds its view (its answer `Detach`): take the role, with
    /// that backup named.
    pub(super) fn confirm_pending(&mut self, ctx: &mut SpContext<'_>) {
        let Some(p) = self.pending.take() else { return };
        self.become_head(ctx, p.role, Vec::new(), p.promote);
        if let Some(h) = self.head.as_mut() {
            h.backup = Some(p.backup);
        }
    }

    /// This node won its cluster's re-election: take over the dead head's role and cluster.
    pub(super) fn take_over(&mut self, ctx: &mut SpContext<'_>) -> bool {
        let Some(e) = self.election.as_ref() else { return false };
        let dead = e.dead;
        let role = recreated(e.role);
        if self.head.is_some() || self.pending.is_some() {
            // We hold a role already (e.g. we took a crashed member-less holder's token as its
            // backup a moment ago), or are about to: hand this one on.
            return self.relay_role(ctx, role);
        }
        let members: Vec<NodeId> = self
            .member_view
            .as_ref()
            .filter(|(h, _, _)| *h == dead)
            .map(|(_, _, ids)| ids.iter().copied().filter(|id| *id != dead && *id != self.me.id).collect())
            .unwrap_or_default();
        if members.is_empty() {
            // Won alone: nobody else knows that we lead (module doc, step 6).
            self.take_member_less(ctx, role, true);
            return true;
        }
        self.become_head(ctx, role, Vec::new(), true);
        let me = self.me;
        for m in members {
            ctx.send(m, SpMessage::Takeover { dead, role, head: me });
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reputation::Offence;
    use crate::Time;
    use rand::SeedableRng;

    /// A cluster election's typed rejection keeps its offence on the way out of the
    /// super-peer state machine, so that the driver can score the sender; an untyped one
    /// stays untyped.
    #[test]
    fn an_election_offence_reaches_the_super_peer_effect() {
        let id = |s: &str| NodeId::hash_of(s.as_bytes());
        let (me, dead, liar) = (id("me"), id("dead head"), id("liar"));
        let mut node = SuperPeerNode::new(me, Point::new(&[1.0, 0.0], 0.001), Arc::new(SuperPeerConfig::default()));
        node.member_view =
            Some((dead, HeadRole::Token { token: TokenId(3), epoch: 1 }, Arc::from(vec![dead, me, liar])));
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let mut fx = Vec::new();
        let mut ctx = SpContext::new(Time(0), &mut rng, &mut fx);
        node.open_election(&mut ctx, dead, false, 0.01);
        assert!(node.election.is_some(), "no election opened");
        let lie = Effect::Rejected { from: liar, reason: "a lie", offence: Some(Offence::FalseClaim) };
        let odd = Effect::Rejected { from: liar, reason: "unusable", offence: None };
        node.apply_election_effects(&mut ctx, vec![lie, odd]);
        let rejected: Vec<_> = fx
            .iter()
            .filter_map(|e| match e {
                SpEffect::Rejected { from, reason, offence } => Some((*from, *reason, *offence)),
                _ => None,
            })
            .collect();
        assert_eq!(rejected, vec![(liar, "a lie", Some(Offence::FalseClaim)), (liar, "unusable", None)]);
    }
}
