//! Every super-peer message a node receives, dispatched by kind (the wire types are in
//! `super::super::message`).

use super::*;

impl SuperPeerNode {
    pub(super) fn on_message(&mut self, ctx: &mut SpContext<'_>, from: NodeId, msg: SpMessage) {
        if from == self.me.id {
            ctx.push(SpEffect::Rejected { from, reason: "message from myself", offence: None });
            return;
        }
        match msg {
            SpMessage::Announce { head, room } => {
                if head.id != from || !head.point.is_valid() {
                    ctx.push(SpEffect::Rejected {
                        from,
                        reason: "announce for another peer or bad point",
                        offence: None,
                    });
                    return;
                }
                self.cache_insert(head, 0);
                if !room {
                    self.backoff(from);
                }
            }
            SpMessage::CacheExchange { entries, reply } => {
                if entries.len() > 4 * self.cfg.discovery.cache_size + 4 {
                    ctx.push(SpEffect::Rejected { from, reason: "oversized cache exchange", offence: None });
                    return;
                }
                if reply {
                    ctx.send(from, SpMessage::CacheExchange { entries: self.cache_entries(), reply: false });
                }
                for e in entries {
                    self.cache_insert(e.head, e.age.saturating_add(1));
                }
            }
            SpMessage::TokenGossip { entries, reply } => self.on_token_gossip(ctx, from, entries, reply),
            SpMessage::SizeSamples { samples } => self.on_size_samples(ctx, from, samples),
            SpMessage::Attach { point } => self.on_attach(ctx, from, point),
            SpMessage::Accept { role: _, head } => {
                // A late `Accept` (its `Attach` timed out after 3 rounds, a slow link, or we
                // asked another head since) is taken while we have no head and know this one
                // (a member whose round trip to the only head took longer refused
                // it for good with `Detach`, and members of a re-election chasing holders that
                // had moved the token on refused the one that held it).
                // The head we check while we take part in its re-election counts as known
                // (module doc, step 5, "A doubter wins only once its check failed").
                let late = self.attached.is_none()
                    && (self.cache.iter().any(|c| c.info.id == from)
                        || self.doubted.as_ref().is_some_and(|d| d.head.id == from));
                let wanted = self.attaching.is_some_and(|(a, _)| a == from) || late;
                if !wanted || self.head.is_some() || head.id != from || !head.point.is_valid() {
                    ctx.send(from, SpMessage::Detach);
                    return;
                }
                self.attaching = None;
                self.placing = None;
                let info = head;
                self.cache_insert(head, 0);
                let same = self.attached.is_some_and(|a| a.id == from);
                if let Some(old) = self.attached.replace(info) {
                    if old.id != from {
                        ctx.send(old.id, SpMessage::Detach);
                    }
                }
                if !same {
                    self.attached_rtt = self.known_rtt(from);
                    self.attached_probed = 0;
                    self.report_access(ctx);
                }
                // Keep the view this head sent with its `Accept` if it overtook it.
                if self.member_view.as_ref().is_none_or(|(h, _, _)| *h != from) {
                    self.member_view = None;
                }
                self.heard = self.round;
                ctx.push(SpEffect::AttachedTo(from));
                if let Some(d) = self.doubted.take_if(|d| d.head.id == from) {
                    self.head_alive(ctx, d);
                }
            }
            SpMessage::Refuse { .. } if self.pending.as_ref().is_some_and(|p| p.backup == from) => {
                // The neighbour we asked to back the role we are about to take serves a cluster
                // or backs another holder: the next one.
                self.pending_next(ctx);
            }
            SpMessage::Refuse { full: false } if self.head.as_ref().is_some_and(|h| h.backup == Some(from)) => {
                // Our backup serves a cluster itself (module doc, step 6): name another one now.
                if let Some(h) = self.head.as_mut() {
                    h.backup = None;
                    if h.refused_backups.len() >= MAX_REFUSED_BACKUPS {
                        h.refused_backups.remove(0);
                    }
                    h.refused_backups.push(from);
                }
                self.send_view(ctx);
            }
            SpMessage::Refuse { full } => {
                if self.attaching.is_some_and(|(a, _)| a == from) {
                    self.attaching = None;
                }
                if self.doubted.as_ref().is_some_and(|d| d.head.id == from) {
                    // Our check of a suspected head: "full" comes from a live head (a
                    // handover in flight), so the re-election stops; a node that is no head
                    // any more answers `Refuse { full: false }`, and the re-election goes on.
                    if full {
                        if let Some(d) = self.doubted.take() {
                            self.head_alive(ctx, d);
                        }
                    } else {
                        self.doubt_failed(ctx, from);
                    }
                }
                if full {
                    self.backoff(from);
                } else {
                    // Maybe our head, no longer a head (see `normal_tick`): look again.
                    self.leave_head(ctx, from);
                }
                self.try_attach(ctx);
            }
            SpMessage::Detach if self.pending.as_ref().is_some_and(|p| p.backup == from) => {
                // The backup of the role we are about to take holds its view (module doc, step
                // 6).
                self.confirm_pending(ctx);
            }
            SpMessage::Detach => {
                if let Some(h) = self.head.as_mut() {
                    // Our backup answers our backup view with `Detach`: it has the view now, so
                    // the node that relayed our token to us may let go (module doc, step 6).
                    if h.backup == Some(from) {
                        if let Some((to, token, epoch)) = h.ack_to.take() {
                            ctx.send(to, SpMessage::HandoverAck { token, epoch, holder: self.me });
                        }
                    }
                    let before = h.members.len();
                    h.members.retain(|m| m.id != from);
                    h.dirty |= h.members.len() != before;
                    if before > 0 && h.members.is_empty() {
                        // The last member left: name a backup now, not at the next round
                        // (module doc, step 6).
                        self.send_view(ctx);
                    }
                }
            }
            SpMessage::Moved { to } => {
                if self.attached.is_some_and(|a| a.id == from) && to.point.is_valid() {
                    if to.id == self.me.id {
                        return;
                    }
                    self.member_of(ctx, to);
                    if self.member_view.as_ref().is_none_or(|(h, _, _)| *h != to.id) {
                        // The new holder's view has not come yet (module doc, step 4):
                        // until it does, our old head's view stands for it, with the new
                        // holder added, at the next epoch (the group the new holder got with
                        // the `Handover`), so that its crash before its view arrived still
                        // finds us with a view.
                        self.member_view = self.member_view.take().and_then(|(h, role, ids)| {
                            let HeadRole::Token { token, epoch } = role else { return None };
                            if h != from {
                                return None;
                            }
                            let mut ids: Vec<NodeId> = ids.iter().copied().collect();
                            if !ids.contains(&to.id) {
                                ids.push(to.id);
                            }
                            Some((to.id, HeadRole::Token { token, epoch: epoch.wrapping_add(1) }, ids.into()))
                        });
                    }
                    self.cache.retain(|c| c.info.id != from);
                    self.cache_insert(to, 0);
                    ctx.push(SpEffect::AttachedTo(to.id));
                }
            }
            SpMessage::StepDown => {
                if self.leave_head(ctx, from) {
                    self.try_attach(ctx);
                }
            }
            SpMessage::StepDownTo { head } => {
                if !head.point.is_valid() || head.id == from {
                    ctx.push(SpEffect::Rejected { from, reason: "step-down to a bad head", offence: None });
                    return;
                }
                // Our head's token is about to jump (`token` module doc, "Split offers",
                //): we switch to the head its removal placed us at (it had room),
                // even when it is farther than heads we know (they may be full), and stay
                // our head's member until that head accepts us (then we `Detach`). A refusal
                // leaves us where we are; our head tells us again or gives the jump up.
                let ours = self.attached.is_some_and(|a| a.id == from);
                if ours && self.head.is_none() && self.attaching.is_none() && head.id != self.me.id {
                    self.cache_insert(head, 0);
                    self.attaching = Some((head.id, self.round));
                    ctx.send(head.id, SpMessage::Attach { point: self.me.point });
                }
            }
            SpMessage::ClusterView { role, members } => {
                if self.attaching.is_some_and(|(a, _)| a == from) && members.contains(&self.me.id) {
                    // The view that comes with an `Accept` (it may overtake the `Accept`):
                    // kept for when the `Accept` lands.
                    if members.len() <= self.cfg.cluster_cap as usize + 1 {
                        self.member_view = Some((from, role, members));
                    }
                    return;
                }
                if self.successor_view(from, &role, &members) {
                    // Kept for when our old head's `Moved` to `from` lands.
                    self.member_view = Some((from, role, members));
                    return;
                }
                if self.attached.is_none_or(|a| a.id != from) {
                    // A member-less holder naming us backup: [holder, us]. Any other view from
                    // it releases us.
                    let backup = members.len() == 2 && members.contains(&from) && members.contains(&self.me.id);
                    let fresh = VIEW_EVERY + 1;
                    let other = self
                        .backup_view
                        .as_ref()
                        .is_some_and(|(h, _, _, at)| *h != from && self.round.wrapping_sub(*at) <= fresh);
                    let free = self.head.is_none() && self.pending.is_none();
                    if backup && free && other {
                        // We are the backup of another member-less holder already and keep one
                        // backup view: this holder names another neighbour (with two,
                        // the first one's token was lost when it crashed).
                        ctx.send(from, SpMessage::Refuse { full: false });
                    } else if backup && free {
                        self.backup_view = Some((from, role, members, self.round));
                    } else if backup {
                        // We serve a cluster ourselves and cannot take a second role: the
                        // member-less head names another backup (module doc, step 6). A second
                        // `Refuse` would make a later failure ambiguous (the first may have
                        // arrived): the duty we handed back on becoming head is kept no longer.
                        if self.backup_view.as_ref().is_some_and(|(h, _, _, _)| *h == from) {
                            self.backup_view = None;
                        }
                        ctx.send(from, SpMessage::Refuse { full: false });
                    } else if self.backup_view.as_ref().is_some_and(|(h, _, _, _)| *h == from) {
                        self.backup_view = None;
                    }
                    // The head counts us as a member but we are not (a stale member list, e.g.
                    // one handed over with a token): tell it, so that its room is right (for a
                    // backup view this changes nothing). A head that left `from` a moment ago
                    // keeps its view only for the failure of that first `Detach` (module doc,
                    // step 6): the failure of this second one would say nothing about the first.
                    if self.head.is_some() && self.member_view.as_ref().is_some_and(|(h, _, _)| *h == from) {
                        self.member_view = None;
                    }
                    // Not while our `Attach` to `from` is on its way (a backup released
                    // by the head's first member, attaching itself at that moment, detached again
                    // and then took the late `Accept`: attached to a node that did not count it).
                    if self.attaching.is_none_or(|(a, _)| a != from) {
                        ctx.send(from, SpMessage::Detach);
                    }
                    return;
                }
                {
                    if members.len() > self.cfg.cluster_cap as usize + 1 {
                        ctx.push(SpEffect::Rejected { from, reason: "cluster view over the cap", offence: None });
                        return;
                    }
                    if !members.contains(&self.me.id) {
                        // The head does not count us (our `Attach` raced with a `Detach`, or
                        // it dropped us): attach again, so that its view and room are right.
                        self.attaching = Some((from, self.round));
                        ctx.send(from, SpMessage::Attach { point: self.me.point });
                    }
                    self.member_view = Some((from, role, members));
                    self.heard = self.round;
                }
            }
            SpMessage::Handover { token, epoch, promoted, members, view } => {
                self.on_handover(ctx, from, token, epoch, promoted, members, view)
            }
            SpMessage::HandoverAck { token, epoch, holder: _ }
                if self.relays.iter().any(|r| r.to == from && r.role == HeadRole::Token { token, epoch }) =>
            {
                // The relayed token arrived, and its new holder's backup has its view (module
                // doc, step 6, "relay").
                self.relays.retain(|r| !(r.to == from && r.role == HeadRole::Token { token, epoch }));
            }
            SpMessage::HandoverAck { token, epoch, holder } => {
                let ok = holder.id == from && holder.point.is_valid() && self.head.as_ref().is_some_and(|h| {
                    matches!(h.role, HeadRole::Token { token: t, epoch: e } if t == token && e.wrapping_add(1) == epoch)
                        && h.transit.as_ref().is_some_and(|(to, _, _)| *to == from)
                });
                if !ok {
                    ctx.push(SpEffect::Rejected {
                        from,
                        reason: "handover ack for no handover in flight",
                        offence: None,
                    });
                    return;
                }
                // We travel in the handed member list, so we belong to the new holder's cluster:
                // we keep its view as the `Handover` made it (module doc, step 4) until
                // its own view arrives, and take part in its re-election if it crashes first.
                // A move hands the members along (with us first or last); a split jump hands
                // only us (`on_split`: its members switched to the heads with room that the
                // removal placed them at, `StepDownTo`, before the token went).
                let jumped = self.head.as_ref().is_some_and(|h| h.drain.is_some());
                let handed = self.head.as_ref().and_then(|h| match &h.transit {
                    Some((_, _, SpMessage::Handover { members, .. })) => {
                        // In the handed order: the heir first, as in the views our members
                        // make up for our successor (`heir` module doc).
                        let mut ids: Vec<NodeId> = members.iter().map(|m| m.id).collect();
                        if !ids.contains(&holder.id) {
                            ids.push(holder.id);
                        }
                        Some(ids)
                    }
                    _ => None,
                });
                // The receiver keeps us unless we would put its cluster over the cap
                // (`on_handover`): it drops us then, and we find another head.
                let cap = self.cfg.cluster_cap as usize;
                let kept = handed.as_ref().is_some_and(|ids| {
                    ids.contains(&self.me.id) && ids.iter().filter(|m| **m != holder.id).count() <= cap
                });
                // Our own place after a jump: where the removal puts us, past the heads our
                // drain found full (members have left by now, see `drain_tick`).
                let own = if jumped {
                    self.removal().and_then(|r| self.head.as_ref().map(|h| h.view[r.me].holder))
                } else {
                    None
                };
                self.stop_head(ctx, Some(holder));
                if let Some(ids) = handed {
                    self.member_view = Some((holder.id, HeadRole::Token { token, epoch }, ids.into()));
                }
                // The new holder took us as its member (with the others of a move, alone after a
                // jump): we are its member now, like a member told `Moved`, and not without a
                // head while every head we know is full.
                if kept {
                    self.member_of(ctx, holder);
                    ctx.push(SpEffect::AttachedTo(holder.id));
                }
                if jumped && kept {
                    // And ask for our own place from there (a refusal leaves us where we are),
                    // looking for a nearer head by prediction meanwhile.
                    self.placing = Some(holder.id);
                    if let Some(t) = own.filter(|t| t.id != holder.id) {
                        self.cache_insert(t, 0);
                        self.attaching = Some((t.id, self.round));
                        ctx.send(t.id, SpMessage::Attach { point: self.me.point });
                    }
                }
                self.try_attach(ctx);
            }
            SpMessage::HandoverRefuse { token, .. }
                if self
                    .relays
                    .iter()
                    .any(|r| r.to == from && matches!(r.role, HeadRole::Token { token: t, .. } if t == token)) =>
            {
                if let Some(i) = self
                    .relays
                    .iter()
                    .position(|r| r.to == from && matches!(r.role, HeadRole::Token { token: t, .. } if t == token))
                {
                    self.relay_next(ctx, i);
                }
            }
            SpMessage::HandoverRefuse { token, .. } => {
                if let Some(h) = self.head.as_mut() {
                    if matches!(h.role, HeadRole::Token { token: t, .. } if t == token)
                        && h.transit.as_ref().is_some_and(|(to, _, _)| *to == from)
                    {
                        h.end_transit();
                        // Not asked again for `hold_rounds` (module doc, step 4, "A refused move").
                        h.refused_targets.retain(|(r, _)| *r != from);
                        if h.refused_targets.len() >= MAX_REFUSED_TARGETS {
                            h.refused_targets.remove(0);
                        }
                        h.refused_targets.push((from, self.round));
                        // A refused move is no move: a holder still for the hold time is promoted
                        // now, as its round would have done without the attempt (module doc,
                        // step 4, "A refused move").
                        h.promote_if_held(ctx, self.round, self.cfg.tokens.hold_rounds);
                    }
                }
            }
            SpMessage::HandoverStale { token, epoch, point } => {
                let ours = self.head.as_ref().is_some_and(|h| {
                    matches!(h.role, HeadRole::Token { token: t, epoch: e } if t == token && e.wrapping_add(1) == epoch)
                        && h.transit.as_ref().is_some_and(|(to, _, _)| *to == from)
                });
                if !ours || !point.is_valid() {
                    ctx.push(SpEffect::Rejected {
                        from,
                        reason: "stale-position refusal for no handover in flight",
                        offence: None,
                    });
                    return;
                }
                // The move was priced on a stale copy of the receiver's position (module doc,
                // step 4, "A move priced on a stale position is refused"): take its
                // position, and price again next round; the receiver is not passed over, and a
                // holder still for the hold time is promoted now, as after a refused move.
                self.learn_position(PeerInfo { id: from, point });
                let round = self.round;
                let hold = self.cfg.tokens.hold_rounds;
                if let Some(h) = self.head.as_mut() {
                    h.end_transit();
                    h.promote_if_held(ctx, round, hold);
                }
            }
            SpMessage::Takeover { dead, role, head } => {
                if !head.point.is_valid() || head.id == self.me.id {
                    ctx.push(SpEffect::Rejected { from, reason: "takeover with a bad head", offence: None });
                    return;
                }
                let retired = self.retired.as_ref().filter(|r| r.dead == dead).map(|r| (r.head, r.role));
                // A holder that left the election it won still resolves a second holder
                // (below).
                let holding = retired.is_some() && self.head.as_ref().is_some_and(|h| same_role(&h.role, &role));
                let mine = self.election.as_ref().is_some_and(|e| e.dead == dead)
                    || self.member_view.as_ref().is_some_and(|(h, _, _)| *h == dead)
                    || holding;
                if !mine {
                    if let Some((holder, known)) = retired {
                        // A second holder of a role whose re-election we left (module doc,
                        // step 5, "Late elections end"): tell it of the one we follow, so that
                        // the two resolve it between them (never of ourselves: a holder that
                        // stepped down relays nothing).
                        if head.id == from && holder.id != from && holder.id != self.me.id && same_role(&known, &role) {
                            ctx.send(from, SpMessage::Takeover { dead, role: known, head: holder });
                        }
                        return;
                    }
                    ctx.push(SpEffect::Rejected { from, reason: "takeover of a cluster I am not in", offence: None });
                    return;
                }
                if self.head.is_none() && self.known_epoch(&role).is_some_and(|e| role_epoch(&role) < Some(e)) {
                    // A claim older than the token we know (module doc, step 5, "Late
                    // elections end"): the token has moved on since (a member
                    // that left the election relays the holder it ended with). Following it
                    // sent this node after holders that had long handed the token on. The
                    // claimer itself hears of the holder we follow.
                    if head.id == from {
                        if let Some((known, holder)) = self.current_holder(&role) {
                            ctx.send(from, SpMessage::Takeover { dead, role: known, head: holder });
                        }
                    }
                    return;
                }
                self.cache_insert(head, 0);
                // The outcome of our re-election (module doc, step 5, "Late elections end"):
                // a member that has not decided yet follows the holder it is told of (from the
                // holder itself, or relayed by a member that knows it) instead of winning
                // later on a timeout of its own.
                if self.election.as_ref().is_some_and(|e| e.dead == dead && !e.decided) {
                    self.follow_leader(head.id);
                }
                // Only a holder's own claim makes us give a role up: a relayed one (module doc,
                // step 5, "Late elections end") may name a holder that has stepped down since,
                // so we send the named node our own claim and it resolves it with us directly.
                let relayed = head.id != from;
                if let Some(p) = self.pending.as_ref().filter(|p| same_role(&p.role, &role)) {
                    // Two winners, and we are about to take the role (module doc, step 6,
                    //): resolved as between two holders (below). The lower one gives
                    // the pending role up and releases its backup.
                    let (backup, my_role, me) = (p.backup, p.role, self.me);
                    if relayed {
                        ctx.send(head.id, SpMessage::Takeover { dead, role: my_role, head: me });
                        return;
                    }
                    if (role_epoch(&role), head.id) > (role_epoch(&my_role), me.id) {
                        self.pending = None;
                        ctx.send(backup, SpMessage::ClusterView { role: my_role, members: Arc::from(vec![me.id]) });
                    } else {
                        ctx.send(head.id, SpMessage::Takeover { dead, role: my_role, head: me });
                        return;
                    }
                }
                if let Some(h) = &self.head {
                    // Two winners of one re-election (members whose views differed, e.g. a
                    // crash in the round a member attached): the same role held twice. The
                    // higher (epoch, id) keeps it; the lower one steps down (its members look again)
                    // and attaches to the winner; the higher one answers with its own
                    // `Takeover` so that the lower one learns of it.
                    if !same_role(&h.role, &role) {
                        return;
                    }
                    if relayed {
                        let (me, my_role) = (self.me, h.role);
                        ctx.send(head.id, SpMessage::Takeover { dead, role: my_role, head: me });
                        return;
                    }
                    // The higher (epoch, id) keeps a token, as in the duplicate safety net
                    // (a claim sent before its sender stepped down, arriving late
                    // at a holder the token had since moved to, made that holder step down by
                    // the id alone, and the token was lost).
                    if (role_epoch(&role), head.id) > (role_epoch(&h.role), self.me.id) {
                        self.stop_head(ctx, None);
                    } else {
                        let me = self.me;
                        let my_role = h.role;
                        ctx.send(head.id, SpMessage::Takeover { dead, role: my_role, head: me });
                        return;
                    }
                }
                if self.head.is_none() && self.attached.is_none_or(|a| a.id != head.id) {
                    self.attaching = Some((head.id, self.round));
                    ctx.send(head.id, SpMessage::Attach { point: self.me.point });
                }
            }
            SpMessage::Access { nearest_rtt } => self.on_access(ctx, from, nearest_rtt),
            SpMessage::Split { at, gain } => self.on_split(ctx, from, at, gain),
            SpMessage::MedoidProbe { sample } => self.on_medoid_probe(ctx, from, sample),
            SpMessage::SlotHeld { key, head } => self.on_slot_held(ctx, from, key, head),
            SpMessage::MedoidCost { rtts } => self.on_medoid_cost(ctx, from, rtts),
            SpMessage::HeadAlive { head } => {
                let undecided = self.election.as_ref().is_some_and(|e| e.dead == head.id && !e.decided);
                // The leader we follow tells us so: it came out leader while it still
                // checked the head, which answered ("A doubter wins only once its check
                // failed"), so it takes no role and we drop the election too.
                let leader_retracts = self.election.as_ref().is_some_and(|e| e.dead == head.id && e.decided)
                    && self.member_view.as_ref().is_some_and(|(h, _, _)| *h == from);
                if !(undecided || leader_retracts) || self.head.is_some() || !head.point.is_valid() {
                    return;
                }
                // Our suspicion was wrong (a slow head, not a dead one): drop the election
                // and attach to the head again.
                self.election = None;
                if self.attached.is_none() && self.attaching.is_none() {
                    self.attaching = Some((head.id, self.round));
                    ctx.send(head.id, SpMessage::Attach { point: self.me.point });
                }
            }
            SpMessage::Election { dead, msg } => {
                let have = self.election.as_ref().is_some_and(|e| e.dead == dead);
                if !have && self.answer_retired(ctx, from, dead, &msg) {
                    return;
                }
                if !have {
                    let member = self.attached.is_some_and(|a| a.id == dead)
                        || self.member_view.as_ref().is_some_and(|(h, _, _)| *h == dead);
                    if !member {
                        // Kept a few rounds: the news that we belong to `dead`'s cluster (the
                        // `Moved` of a handover) may come after it (module doc, step 5).
                        let round = self.round;
                        let early = self.early.get_or_insert_with(|| Box::new(Vec::new()));
                        early.retain(|e| round.wrapping_sub(e.3) <= EARLY_ELECTION_ROUNDS);
                        if early.len() >= MAX_EARLY_ELECTIONS {
                            early.remove(0);
                        }
                        early.push((dead, from, msg, round));
                        ctx.push(SpEffect::Rejected {
                            from,
                            reason: "election for a cluster I am not in",
                            offence: None,
                        });
                        return;
                    }
                    let rtt = self.attached.filter(|a| a.id == dead).map_or(0.0, |a| self.head_rtt(&a));
                    if let Some(head) = self.attached.filter(|a| a.id == dead) {
                        // A suspected head is checked (module doc, step 5): we still took
                        // `dead` for alive, so we join at once (the election must not wait
                        // for us) and ask it (`Attach`) at the same time.
                        let since = self.round;
                        let d = self.doubted.get_or_insert_with(|| Box::new(Doubt { head, since, askers: Vec::new() }));
                        if d.head.id != dead {
                            **d = Doubt { head, since, askers: Vec::new() };
                        }
                        if !d.askers.contains(&from) && d.askers.len() < MAX_DOUBT {
                            d.askers.push(from);
                        }
                        self.attaching = Some((dead, self.round));
                        ctx.send(dead, SpMessage::Attach { point: self.me.point });
                        self.attached = None;
                        ctx.push(SpEffect::Detached);
                    }
                    self.start_election(ctx, dead, rtt);
                    if self.election.as_ref().is_none_or(|e| e.dead != dead) {
                        return;
                    }
                }
                self.admit_to_election(ctx, from);
                self.drive_election(ctx, Input::Message { from, msg });
            }
        }
    }
}
