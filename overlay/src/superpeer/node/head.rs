//! A head's own work: becoming and stopping being a head, its round (token force, moves,
//! promotion, the cluster view), draining and rehoming, members attaching, token gossip and
//! handovers (module doc of [`super`], steps 2-4).

use super::*;

impl SuperPeerNode {
    pub(super) fn become_head(
        &mut self,
        ctx: &mut SpContext<'_>,
        role: HeadRole,
        members: Vec<PeerInfo>,
        promote: bool,
    ) {
        let left = self.attached.take();
        if let Some(a) = left {
            ctx.send(a.id, SpMessage::Detach);
            ctx.push(SpEffect::Detached);
        }
        self.attaching = None;
        // The view of the head we just left is kept until our first round as head, in case
        // the `Detach` fails (see `SendFailed`); any other view goes.
        if self.member_view.as_ref().is_none_or(|(h, _, _)| left.is_none_or(|a| a.id != *h)) {
            self.member_view = None;
        }
        if let Some((b, _, _, _)) = &self.backup_view {
            // A head cannot take a second role: the member-less head that named us backup
            // names another one (module doc, step 6). The view is kept until our first round
            // as head, in case the `Refuse` fails (see `SendFailed`).
            ctx.send(*b, SpMessage::Refuse { full: false });
        }
        let super_peer = promote || matches!(role, HeadRole::Slot { .. });
        match role {
            HeadRole::Slot { key } => ctx.push(SpEffect::Provide { key }),
            HeadRole::Token { token, epoch } => {
                ctx.push(SpEffect::Provide { key: token_directory_key() });
                // The token's slot key too : a node that decides late and finds itself
                // closest to it does not mint the token a second time (its minter may have died
                // and its backup taken it over).
                ctx.push(SpEffect::Provide { key: token_slot_key(token) });
                ctx.push(SpEffect::TokenAcquired { token, epoch });
            }
        }
        if super_peer {
            ctx.push(SpEffect::BecomeSuperPeer);
        }
        self.head = Some(Box::new(Head {
            role,
            dirty: true,
            ids: None,
            members,
            last_view: 0,
            super_peer,
            promoted_at: self.round,
            since: self.round,
            became: self.round,
            view: Vec::new(),
            transit: None,
            drain: None,
            backup: None,
            refused_backups: Vec::new(),
            refused_targets: Vec::new(),
            access: Vec::new(),
            ack_to: None,
            disturbed: self.round,
            medoid: None,
            medoid_done: None,
            measured: false,
            recreated: promote && matches!(role, HeadRole::Token { .. }),
            heir: None,
            heir_at: self.round,
        }));
    }

    /// Stop serving: withdraw the record, tell the members where to go (`to`) or to look
    /// elsewhere.
    pub(super) fn stop_head(&mut self, ctx: &mut SpContext<'_>, to: Option<PeerInfo>) {
        let Some(h) = self.head.take() else { return };
        // What `become_head` kept for a failed `Detach` or `Refuse` goes with the role: a plain
        // node holding it would elect for, or take over, a cluster it left long ago (a
        // token held twice).
        self.member_view = None;
        self.backup_view = None;
        if let Some((r, token, epoch)) = h.ack_to {
            // The relayed token leaves us (handed on, or the duplicate safety net): the node that
            // relayed it to us is answered now, or it would hand it on a second time.
            ctx.send(r, SpMessage::HandoverAck { token, epoch, holder: self.me });
        }
        match h.role {
            HeadRole::Slot { key } => ctx.push(SpEffect::Unprovide { key }),
            HeadRole::Token { token, epoch } => {
                ctx.push(SpEffect::Unprovide { key: token_directory_key() });
                ctx.push(SpEffect::Unprovide { key: token_slot_key(token) });
                ctx.push(SpEffect::TokenReleased { token, epoch });
            }
        }
        if h.super_peer {
            ctx.push(SpEffect::StopSuperPeer);
        }
        if let Some(b) = h.backup {
            // Release the backup: a view that does not name it.
            ctx.send(b, SpMessage::ClusterView { role: h.role, members: Arc::from(vec![self.me.id]) });
        }
        for m in &h.members {
            match to {
                Some(t) if t.id != m.id => ctx.send(m.id, SpMessage::Moved { to: t }),
                Some(_) => {}
                None => ctx.send(m.id, SpMessage::StepDown),
            }
        }
        if let Some(t) = to {
            self.cache_insert(t, 0);
        }
    }

    pub(super) fn my_entry(&self) -> Option<TokenEntry> {
        let h = self.head.as_ref()?;
        match h.role {
            HeadRole::Token { token, epoch } => {
                Some(TokenEntry { token, epoch, holder: self.me, age: 0, members: h.advertised(self.cfg.cluster_cap) })
            }
            HeadRole::Slot { .. } => None,
        }
    }

    // ----- the round -----

    pub(super) fn head_tick(&mut self, ctx: &mut SpContext<'_>) {
        // What `become_head` kept for a failed `Detach` or `Refuse` is no longer needed once
        // the failure had time to come back (a real transport may report it rounds
        // later, not within the round as the simulator does).
        if self.head.as_ref().is_some_and(|h| self.round.wrapping_sub(h.became) >= KEPT_VIEW_ROUNDS) {
            self.member_view = None;
            self.backup_view = None;
        }
        let round = self.round;
        let cfg = self.cfg.clone();
        let me = self.me;
        let Some(h) = self.head.as_mut() else { return };
        if round % ANNOUNCE_EVERY == 0 {
            let room = (h.members.len() as u32) < cfg.cluster_cap;
            for n in &self.neighbours {
                ctx.send(n.id, SpMessage::Announce { head: me, room });
            }
        }
        // The cluster view goes out every `view_every` rounds (it doubles as the head's
        // liveness signal to its members), and at the next round after the member list
        // changed; the list is rebuilt only when it changed.
        if h.dirty || round.wrapping_sub(h.last_view) >= VIEW_EVERY {
            self.send_view(ctx);
        }
        let Some(h) = self.head.as_mut() else { return };
        if let HeadRole::Slot { key } = h.role {
            let age = round.wrapping_sub(h.became);
            let due = age >= SLOT_CHECK_FIRST && (age - SLOT_CHECK_FIRST) % SLOT_CHECK_EVERY == 0;
            if due && !self.queries.iter().any(|(_, p)| matches!(p, Pending::SlotCheck { .. })) {
                self.lookup(ctx, Query::Providers { key }, Pending::SlotCheck { key });
            }
            return;
        }
        let HeadRole::Token { .. } = h.role else { return };
        // Age and expire the view.
        for e in h.view.iter_mut() {
            e.age = e.age.saturating_add(1);
        }
        h.view.retain(|e| e.age <= TOKEN_TTL);
        if h.view.is_empty() && round.wrapping_sub(self.last_seed) >= 3 {
            // No other holder known (yet, or W = 1): look for some, and meanwhile let the
            // members' pull act alone.
            self.seed(ctx);
        }
        let Some(h) = self.head.as_mut() else { return };
        let HeadRole::Token { token, epoch } = h.role else { return };
        if h.recreated && round.wrapping_sub(h.became) >= cfg.tokens.hold_rounds {
            // A recreated token that stayed for the hold time: its later moves restart it.
            h.recreated = false;
        }
        if !h.view.is_empty() {
            // Gossip with the nearest and one random known holder.
            let mut entries = Vec::with_capacity(h.view.len() + 1);
            entries.push(TokenEntry { token, epoch, holder: me, age: 0, members: h.advertised(cfg.cluster_cap) });
            entries.extend(h.view.iter().copied());
            let nearest = h.view[0].holder.id;
            ctx.send(nearest, SpMessage::TokenGossip { entries: entries.clone(), reply: true });
            let r = h.view[ctx.rng.gen_range(0..h.view.len())].holder.id;
            if r != nearest {
                ctx.send(r, SpMessage::TokenGossip { entries, reply: true });
            }
        }
        // A handover in flight: re-send every `HANDOVER_RESEND_ROUNDS` without an answer
        // (`sent` stays the round of the first send: a refused dial counts only before any
        // re-send, see `SpInput::Refused`).
        if let Some((to, sent, msg)) = h.transit.as_ref() {
            let age = round.wrapping_sub(*sent);
            if age >= HANDOVER_RESEND_ROUNDS && age % HANDOVER_RESEND_ROUNDS == 0 {
                ctx.send(*to, msg.clone());
            }
            return;
        }
        if h.drain.is_some() {
            self.drain_tick(ctx);
            return;
        }
        if self.coordinate_fit == Fitness::Unfit {
            // Pinned (module doc, step 4, "An unfit coordinate pins the token"): no move, and
            // the hold time counts from when the coordinate is fit.
            h.since = round;
            return;
        }
        let others: Vec<Point> = h.view.iter().map(|e| e.holder.point).collect();
        let force = net_force(&me.point, &others, &h.members, &cfg.tokens);
        // Measured access delay (`token` module doc): the members' nearest RTTs and ours.
        let own = (self.nearest_rtt > 0.0).then_some(self.nearest_rtt as f64);
        let access = AccessEstimate::new(&me, own, &h.members, &h.access, &cfg.tokens);
        let promoted = if h.super_peer { PROMOTED_FACTOR } else { 1.0 };
        // A token placed by a measured medoid step is moved only by measured steps (`medoid`
        // module doc): the predicted law ranks nodes worse than the measurement did.
        let force = if h.measured { None } else { force };
        // A fresh holder prices no move before its members' access reports came, for at most
        // `ACCESS_WAIT_ROUNDS` (`token` module doc, "A fresh holder waits").
        let force =
            force.filter(|_| !awaiting_reports(round.wrapping_sub(h.became), &h.members, &h.access, &cfg.tokens));
        // A settled super peer stays put while its neighbourhood recovers from a crash (module
        // doc, step 4, "A settled super peer waits out a crash nearby"); a
        // recreated token's first move is the recovery itself.
        let recovering = h.super_peer && !h.recreated && round.wrapping_sub(h.disturbed) < cfg.tokens.hold_rounds;
        let force = force.filter(|_| !recovering);
        if let Some(f) = force.filter(|f| f.magnitude() > cfg.tokens.force_threshold * promoted) {
            let holders: Vec<NodeId> = h.view.iter().map(|e| e.holder.id).collect();
            let mut cands: Vec<PeerInfo> = self.neighbours.clone();
            cands.extend(h.members.iter().copied());
            // Cooling: the epoch counts the token's moves (and recreations); a super peer's
            // moves also age with it (module doc, step 4, "Settled super peers").
            let cool = cooling(epoch, h.super_peer, &cfg.tokens)
                * aging(h.super_peer, round.wrapping_sub(h.promoted_at), &cfg.tokens);
            let refused = |id: NodeId| {
                h.refused_targets.iter().any(|(r, at)| *r == id && round.wrapping_sub(*at) < cfg.tokens.hold_rounds)
            };
            let excluded = |c: &PeerInfo| holders.contains(&c.id) || refused(c.id);
            // The gain must also beat our own point's recent drift (`token` module doc, "The
            // coordinates' own drift").
            let floor = drift(self.drift as f64, round.wrapping_sub(self.drift_at), &cfg.tokens);
            let bar = MoveBar::new(cool, floor, &cfg.tokens);
            if let Some(m) = choose_target(&me, &f, &h.members, &others, &cands, excluded, &access, bar, &cfg.tokens) {
                let price = |p: &CostParts, point: Point| MovePrice {
                    rtt: p.rtt as f32,
                    access: p.access as f32,
                    repulsion: p.repulsion as f32,
                    total: p.total(&cfg.tokens) as f32,
                    point,
                };
                ctx.push(SpEffect::TokenMovePriced(Box::new(MoveRecord {
                    to: m.to.id,
                    here: price(&m.here, me.point),
                    there: price(&m.there, m.to.point),
                    radius: f.radius as f32,
                    members: h.members.len().min(u16::MAX as usize) as u16,
                    holders: others.len().min(u16::MAX as usize) as u16,
                    reports: h.access.len().min(u16::MAX as usize) as u16,
                    needed: m.bar.needed as f32,
                    floor: m.bar.floor as f32,
                })));
                send_move(ctx, h, me, m.to.id, round, token, epoch);
                return;
            }
        }
        // The measured medoid step (`medoid` module doc).
        if self.medoid_tick(ctx) {
            return;
        }
        let Some(h) = self.head.as_mut() else { return };
        // Split offers (`token` module doc): a settled holder whose cluster would gain
        // much from a second head offers that head's spot to the known holder whose token
        // looks cheapest to remove (one taker per offer).
        let still = round.wrapping_sub(h.since);
        let calm = round.wrapping_sub(h.disturbed) >= cfg.tokens.hold_rounds;
        if cfg.split.ratio > 0.0
            && calm
            && !h.view.is_empty()
            && still >= cfg.tokens.hold_rounds
            && still % SPLIT_EVERY == 0
        {
            if let Some((at, gain, cost)) = split_gain(&me, &h.members, cfg.cluster_cap as usize) {
                if gain > cfg.split.min_gain * cost {
                    let holders: Vec<(Point, u32)> = h.view.iter().map(|e| (e.holder.point, e.members)).collect();
                    // The holder's n-th offer since it settled goes to the n-th cheapest taker.
                    let turn = (still - cfg.tokens.hold_rounds) / SPLIT_EVERY;
                    if let Some(i) = split_taker(&me.point, &holders, cfg.cluster_cap, turn as usize) {
                        ctx.send(h.view[i].holder.id, SpMessage::Split { at, gain: gain as f32 });
                    }
                }
            }
        }
        h.promote_if_held(ctx, round, cfg.tokens.hold_rounds);
    }

    // ----- discovery and attachment -----

    /// Sends the cluster view to every member (and names or releases the backup of a
    /// member-less head): from `head_tick`, and at once when a token arrives by handover.
    pub(super) fn send_view(&mut self, ctx: &mut SpContext<'_>) {
        let round = self.round;
        let me = self.me;
        let Some(h) = self.head.as_mut() else { return };
        h.last_view = round;
        let ids = h.view_ids(&me, round, VIEW_EVERY, true);
        h.dirty = false;
        for m in &h.members {
            ctx.send(m.id, SpMessage::ClusterView { role: h.role, members: ids.clone() });
        }
        // A head without members (token holder or slot owner) names its nearest
        // neighbour backup (the view [head, backup]), so that a crash of the head does
        // not lose its role; the backup is released (a view that does not name it) once
        // members come.
        if h.members.is_empty() {
            // The nearest neighbour that is not known to serve a cluster itself (a head
            // cannot take a second role; module doc, step 6), else the nearest that did not
            // refuse.
            let refused = |id: &NodeId| h.refused_backups.contains(id);
            let known_head =
                |id: &NodeId| self.cache.iter().any(|c| c.info.id == *id) || h.view.iter().any(|e| e.holder.id == *id);
            let pick = self
                .neighbours
                .iter()
                .find(|n| !refused(&n.id) && !known_head(&n.id))
                .or_else(|| self.neighbours.iter().find(|n| !refused(&n.id)));
            if let Some(b) = pick {
                if let Some(old) = h.backup.filter(|o| *o != b.id) {
                    // Another neighbour is backup now (a nearer one came): the old one is
                    // released (a view that does not name it), or both would take the role
                    // over if we crashed while its view is fresh (one token held
                    // twice in the 10^4 crash sweep).
                    ctx.send(old, SpMessage::ClusterView { role: h.role, members: Arc::from(vec![me.id]) });
                }
                h.backup = Some(b.id);
                ctx.send(b.id, SpMessage::ClusterView { role: h.role, members: Arc::from(vec![me.id, b.id]) });
            }
        } else if let Some(b) = h.backup.take() {
            ctx.send(b, SpMessage::ClusterView { role: h.role, members: ids });
        }
        if h.backup.is_none() {
            // A relayed token waits for its backup's confirmation (`ack_to`); with
            // no backup to wait for (members came, or no neighbour is left to name) the node
            // that handed it is answered now, or it would keep its copy in transit for good.
            if let Some((to, token, epoch)) = h.ack_to.take() {
                ctx.send(to, SpMessage::HandoverAck { token, epoch, holder: me });
            }
        }
    }

    /// Tells the head we are attached to our nearest RTT (`Access`), for its access-delay
    /// estimate (`token` module doc); only in the token method with `access_weight > 0`, and
    /// only if the driver gave us one.
    pub(super) fn report_access(&self, ctx: &mut SpContext<'_>) {
        if self.cfg.method != Method::RepulsionTokens || self.cfg.tokens.access_weight <= 0.0 || self.nearest_rtt <= 0.0
        {
            return;
        }
        if let Some(a) = self.attached {
            ctx.send(a.id, SpMessage::Access { nearest_rtt: self.nearest_rtt });
        }
    }

    /// A round of a split jump's drain (`token` module doc, "Split offers"): the token goes to
    /// the offered spot once every member switched away (the drain stays until the jump is
    /// answered); a head that has not taken a member sent to it last round (the member is
    /// still ours) is full and is left out of the removal, and the members still here are sent
    /// where the removal places them now; with no room left anywhere, or after
    /// [`DRAIN_ROUNDS`] with members left, the jump is given up and the token stays.
    pub(super) fn drain_tick(&mut self, ctx: &mut SpContext<'_>) {
        let round = self.round;
        let Some(h) = self.head.as_mut() else { return };
        let Some(d) = h.drain.as_mut() else { return };
        let HeadRole::Token { token, epoch } = h.role else {
            h.drain = None;
            return;
        };
        if h.members.is_empty() {
            let at = d.at.id;
            send_jump(ctx, h, self.me, at, round, token, epoch);
            return;
        }
        if round.wrapping_sub(d.started) >= DRAIN_ROUNDS {
            h.drain = None;
            return;
        }
        let members = &h.members;
        for &(m, to) in &d.sent {
            if members.iter().any(|p| p.id == m) && !d.full.contains(&to) {
                d.full.push(to);
            }
        }
        if !self.rehome(ctx) {
            if let Some(h) = self.head.as_mut() {
                h.drain = None;
            }
        }
    }

    /// Tells each member where our token's removal places it (`StepDownTo`): a known token
    /// with room; it switches there and stays our member until that head accepts it. `false`
    /// when the removal places nobody (no room left among the known tokens).
    pub(super) fn rehome(&mut self, ctx: &mut SpContext<'_>) -> bool {
        let Some(r) = self.removal() else { return false };
        let Some(h) = self.head.as_mut() else { return false };
        let mut sent = Vec::with_capacity(h.members.len());
        for (m, &j) in h.members.iter().zip(&r.to) {
            let to = h.view[j].holder.id;
            ctx.send(m.id, SpMessage::StepDownTo { head: h.view[j].holder });
            sent.push((m.id, to));
        }
        if let Some(d) = h.drain.as_mut() {
            d.sent = sent;
        }
        true
    }

    /// Where our members and we would go if our token left ([`removal_plan`]): the other
    /// known tokens with the room their holders last gossiped, none at a head our drain found
    /// full (`token` module doc, "Split offers"). The returned indices are into our token
    /// view.
    pub(super) fn removal(&self) -> Option<Removal> {
        let h = self.head.as_ref()?;
        let cap = self.cfg.cluster_cap as usize;
        let fresh = VIEW_EVERY;
        let full = h.drain.as_ref().map_or(&[][..], |d| &d.full[..]);
        let others: Vec<(Point, usize)> = h
            .view
            .iter()
            .map(|e| {
                let room = cap.saturating_sub(e.members as usize).saturating_sub(split_reserve(cap));
                let known = e.age <= fresh && !full.contains(&e.holder.id);
                (e.holder.point, if known { room } else { 0 })
            })
            .collect();
        removal_plan(&self.me, &h.members, &others)
    }

    /// A member's `Access`: kept (sorted by id) while the sender is a member of our token's
    /// cluster; from anyone else it is stale (the member left or the token moved) and dropped.
    pub(super) fn on_access(&mut self, ctx: &mut SpContext<'_>, from: NodeId, nearest_rtt: f32) {
        if !(nearest_rtt.is_finite() && nearest_rtt > 0.0 && nearest_rtt < 3600.0) {
            ctx.push(SpEffect::Rejected { from, reason: "reported nearest RTT out of range", offence: None });
            return;
        }
        let Some(h) = self.head.as_mut() else { return };
        if !matches!(h.role, HeadRole::Token { .. }) || !h.members.iter().any(|m| m.id == from) {
            return;
        }
        match h.access.binary_search_by(|r| r.0.cmp(&from)) {
            Ok(i) => h.access[i].1 = nearest_rtt,
            Err(i) => h.access.insert(i, (from, nearest_rtt)),
        }
        if h.access.len() > h.members.len() + 16 {
            // Prune the reports of nodes that left.
            let members = &h.members;
            h.access.retain(|r| members.iter().any(|m| m.id == r.0));
        }
    }

    pub(super) fn on_attach(&mut self, ctx: &mut SpContext<'_>, from: NodeId, point: Point) {
        if !point.is_valid() {
            ctx.push(SpEffect::Rejected { from, reason: "attach with a bad point", offence: None });
            return;
        }
        let cap = self.cfg.cluster_cap as usize;
        let Some(h) = self.head.as_mut() else {
            ctx.send(from, SpMessage::Refuse { full: false });
            return;
        };
        if h.transit.is_some() || h.drain.is_some() {
            ctx.send(from, SpMessage::Refuse { full: true });
            return;
        }
        if let Some(m) = h.members.iter_mut().find(|m| m.id == from) {
            m.point = point;
        } else if h.members.len() < cap {
            h.members.push(PeerInfo { id: from, point });
            h.dirty = true;
        } else {
            ctx.send(from, SpMessage::Refuse { full: true });
            return;
        }
        let head = self.me;
        ctx.send(from, SpMessage::Accept { role: h.role, head });
        // The member learns the cluster view as part of attaching (module doc, step 5): a
        // crash right after the attach must not find it without a view. The other members
        // get the changed view at the next round (`head_tick`).
        // (`dirty` stays set: the other members get the changed view at the next round.)
        let ids = h.view_ids(&head, self.round, VIEW_EVERY, false);
        ctx.send(from, SpMessage::ClusterView { role: h.role, members: ids.clone() });
        // The first member releases the backup at once (a view that does not name it),
        // so that member and backup never both hold a fresh view.
        if let Some(b) = h.backup.take() {
            ctx.send(b, SpMessage::ClusterView { role: h.role, members: ids });
        }
        // A member has our view now: the node that relayed our token may let go.
        if let Some((to, token, epoch)) = h.ack_to.take() {
            ctx.send(to, SpMessage::HandoverAck { token, epoch, holder: head });
        }
    }

    pub(super) fn on_token_gossip(
        &mut self,
        ctx: &mut SpContext<'_>,
        from: NodeId,
        entries: Vec<TokenEntry>,
        reply: bool,
    ) {
        if entries.len() > 4 * TOKEN_VIEW + 4 {
            ctx.push(SpEffect::Rejected { from, reason: "oversized token gossip", offence: None });
            return;
        }
        let Some(mine) = self.my_entry() else { return };
        let me = self.me;
        let mut duplicate_of: Option<PeerInfo> = None;
        {
            let Some(h) = self.head.as_mut() else { return };
            for e in entries {
                if !e.holder.point.is_valid() || e.holder.id == me.id {
                    continue;
                }
                if e.token == mine.token {
                    // The same token at another holder: the lower (epoch, id) gives it up.
                    if (e.epoch, e.holder.id) > (mine.epoch, me.id) {
                        duplicate_of = Some(e.holder);
                    }
                    continue;
                }
                if let Some(x) = h.view.iter_mut().find(|x| x.token == e.token) {
                    if e.epoch > x.epoch || (e.epoch == x.epoch && e.age < x.age) {
                        *x = e;
                    }
                } else {
                    h.view.retain(|x| x.holder.id != e.holder.id || x.epoch > e.epoch);
                    h.view.push(e);
                }
            }
            h.view.sort_by(|a, b| me.point.euclid(&a.holder.point).total_cmp(&me.point.euclid(&b.holder.point)));
            h.view.truncate(TOKEN_VIEW);
        }
        if let Some(other) = duplicate_of {
            self.stop_head(ctx, Some(other));
            self.try_attach(ctx);
            return;
        }
        if reply {
            if let Some(h) = self.head.as_ref() {
                let mut out = Vec::with_capacity(h.view.len() + 1);
                out.push(mine);
                out.extend(h.view.iter().copied());
                ctx.send(from, SpMessage::TokenGossip { entries: out, reply: false });
            }
        }
    }

    #[expect(clippy::too_many_arguments, reason = "the fields of the `Handover` message, as received")]
    pub(super) fn on_handover(
        &mut self,
        ctx: &mut SpContext<'_>,
        from: NodeId,
        token: TokenId,
        epoch: u32,
        promoted: bool,
        members: Vec<PeerInfo>,
        view: Vec<TokenEntry>,
    ) {
        if members.len() > self.cfg.cluster_cap as usize + 1 || view.len() > 4 * TOKEN_VIEW + 4 {
            ctx.push(SpEffect::Rejected { from, reason: "oversized handover", offence: None });
            return;
        }
        if let Some(h) = &self.head {
            if matches!(h.role, HeadRole::Token { token: t, epoch: e } if t == token && e >= epoch) {
                // A re-sent handover we already took: acknowledged again, unless it is a relayed
                // token whose backup has not confirmed our view yet (then the `Detach` that
                // confirms it sends the acknowledgement; a member that came since stands in).
                let waiting = h.ack_to.is_some_and(|(a, _, _)| a == from) && h.members.is_empty();
                if !waiting {
                    if let Some(h) = self.head.as_mut() {
                        h.ack_to = None;
                    }
                    ctx.send(from, SpMessage::HandoverAck { token, epoch, holder: self.me });
                }
            } else {
                ctx.send(from, SpMessage::HandoverRefuse { token, epoch });
            }
            return;
        }
        if self.in_election() || self.pending.is_some() || self.cfg.method != Method::RepulsionTokens {
            ctx.send(from, SpMessage::HandoverRefuse { token, epoch });
            return;
        }
        if self.priced_on_stale_position(from, token, epoch, &members) {
            ctx.send(from, SpMessage::HandoverStale { token, epoch, point: self.me.point });
            return;
        }
        let me = self.me.id;
        // What the old holder's views listed first comes first, its heir or itself: we keep it
        // as our heir (`heir` module doc), unless it is us.
        let inherited = members.first().map(|m| m.id).filter(|h| *h != me);
        let mut members: Vec<PeerInfo> = members.into_iter().filter(|m| m.id != me && m.point.is_valid()).collect();
        if members.len() > self.cfg.cluster_cap as usize {
            // Over the cap only with the old holder in it (the size check above): it finds
            // another head.
            members.retain(|m| m.id != from);
            members.truncate(self.cfg.cluster_cap as usize);
        }
        // A recreated token's first move (or its relay) keeps the promotion (module doc, step
        // 5); the promotion goes no further.
        self.become_head(ctx, HeadRole::Token { token, epoch }, members, promoted);
        // A token our head moved here after we measured its cluster (`medoid` module doc).
        let measured = self.measuring.take().is_some_and(|m| m.answered && m.head == from);
        if let Some(h) = self.head.as_mut() {
            h.view = view.into_iter().filter(|e| e.holder.id != me && e.holder.point.is_valid()).collect();
            h.measured = measured;
            h.recreated = false;
            h.heir = inherited.filter(|x| h.members.iter().any(|m| m.id == *x));
        }
        let relayed = self.head.as_ref().is_some_and(|h| h.members.is_empty());
        if !relayed {
            ctx.send(from, SpMessage::HandoverAck { token, epoch, holder: self.me });
        }
        // The cluster view goes out at once, not at this node's next round: a crash before
        // that round would find the members without a view and lose the token (module doc,
        // step 4). The members take it as their head's successor's view (`successor_view`).
        self.send_view(ctx);
        if relayed {
            // A relayed token, no member: the backup view just went out, and the relaying node
            // stays responsible for the token until our backup confirmed it (module doc, step
            // 6, "relay"); with no neighbour to name, acknowledge at once.
            let Some(h) = self.head.as_mut() else { return };
            if h.backup.is_some() {
                h.ack_to = Some((from, token, epoch));
            } else {
                ctx.send(from, SpMessage::HandoverAck { token, epoch, holder: self.me });
            }
        }
    }

    /// True when the move `from` hands us was priced on a copy of our position that ours has
    /// left by more than the smallest gain a move needs could absorb (module doc, step 4, "A
    /// move priced on a stale position is refused"): the copy is our entry in the
    /// handed member list, and the shift (Euclidean plus height) is compared with `min_gain`
    /// times our mean predicted RTT to the other members. Records the refusal: the same
    /// handover sent again is taken. A token a measured medoid step sends us (we answered its
    /// `MedoidProbe`) was chosen by measurement, not positions, and is never refused here.
    fn priced_on_stale_position(&mut self, from: NodeId, token: TokenId, epoch: u32, members: &[PeerInfo]) -> bool {
        if self.stale_refused == Some((token.0 as u32, epoch)) {
            return false;
        }
        if self.measuring.as_ref().is_some_and(|m| m.answered && m.head == from) {
            return false;
        }
        let me = self.me;
        let Some(copy) = members.iter().find(|m| m.id == me.id && m.point.is_valid()) else { return false };
        let shift = copy.point.shift(&me.point);
        let (mut sum, mut n) = (0.0, 0usize);
        for m in members.iter().filter(|m| m.id != me.id && m.point.is_valid()) {
            sum += me.point.rtt(&m.point);
            n += 1;
        }
        if n == 0 || shift <= self.cfg.tokens.min_gain * sum / n as f64 {
            return false;
        }
        self.stale_refused = Some((token.0 as u32, epoch));
        true
    }

    /// A view from `from` for the next epoch of the token our head holds, naming us: the
    /// holder the token was handed to, whose view can arrive before our old head's `Moved`.
    pub(super) fn successor_view(&self, from: NodeId, role: &HeadRole, members: &[NodeId]) -> bool {
        let HeadRole::Token { token, epoch } = *role else { return false };
        let Some((h, HeadRole::Token { token: t, epoch: e }, _)) = self.member_view.as_ref() else { return false };
        self.head.is_none()
            && self.attached.is_some_and(|a| a.id == *h)
            && *h != from
            && *t == token
            && epoch > *e
            && members.len() <= self.cfg.cluster_cap as usize + 1
            && members.contains(&self.me.id)
    }

    // ----- re-election inside a cluster -----
}
