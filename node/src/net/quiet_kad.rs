//! Kademlia without the automatic bootstrap walk's dials.
//!
//! libp2p-kad 0.49 starts a bootstrap walk (a lookup of the node's own key, then one
//! bucket-refresh lookup per bucket) 500 ms after an entry is inserted into a routing table
//! that holds fewer than `K_VALUE` (20) entries. The throttle that controls this
//! (`Config::set_automatic_bootstrap_throttle`) is `pub(crate)` and compiled only for kad's
//! own tests; `set_periodic_bootstrap_interval(None)` (set in `node/src/net/behaviour.rs`) turns off only
//! the periodic walk. A walk asks every table entry it is not connected to by dialling it,
//! and in a Peerage node those dials are all unwanted (the routing table is filled from the
//! member directory, `node/src/runtime/node.rs`; the gate refused them before any handshake, ~5 per node at
//! N = 200-1,000 and ~20 per node at N = 50, because kad starts the walk and
//! yields its first dials inside one `poll` call, before the node's event loop can finish it).
//!
//! [`QuietKad`] wraps `kad::Behaviour` and, unless periodic walks were asked for
//! (`kad_bootstrap_s` > 0):
//! - finishes every running `Bootstrap` query (each walk step) before polling kad, so a
//!   refresh step that kad continued in the previous poll ends before it asks anyone;
//! - when kad yields `ToSwarm::Dial` and no query other than a walk is running, the dial is
//!   the walk's (kad's only other dial, the liveness probe of a full bucket's oldest entry,
//!   does not happen here: `node/src/runtime/node.rs` inserts only into buckets with room): it finishes the
//!   walk and drops the dial (counted in [`QuietKad::walk_dials_dropped`]). A dial while another query (a super-peer lookup,
//!   `node/src/superpeer/driver.rs`) runs is passed to the swarm as before, since it cannot be told
//!   apart; the gate decides it.
//!
//! A dropped dial leaves nothing behind in kad: the only state a dial leaves is the query's
//! pending request for that peer, and the query is finished. Requests the walk sends to
//! peers it is already connected to go out as usual (no dial, a few hundred bytes).
//! Everything else is kad unchanged; `Deref`/`DerefMut` give the node kad's own API.

use libp2p::core::{transport::PortUse, Endpoint, Multiaddr};
use libp2p::swarm::{ConnectionDenied, ConnectionId, NetworkBehaviour, THandler, THandlerInEvent, ToSwarm};
use libp2p::{kad, PeerId};
use std::ops::{Deref, DerefMut};
use std::task::{Context, Poll};

type Kad = kad::Behaviour<kad::store::MemoryStore>;

/// `kad::Behaviour` whose automatic bootstrap walks never dial (see the module doc).
pub struct QuietKad {
    inner: Kad,
    /// Let walks run and dial (periodic walks were configured).
    walks: bool,
    walk_dials_dropped: u64,
}

impl QuietKad {
    /// Wrap `inner`; `walks = true` leaves kad's walks untouched.
    pub fn new(inner: Kad, walks: bool) -> Self {
        QuietKad { inner, walks, walk_dials_dropped: 0 }
    }

    /// Dials of bootstrap walks that were dropped before reaching the swarm.
    pub fn walk_dials_dropped(&self) -> u64 {
        self.walk_dials_dropped
    }

    /// Finish every running bootstrap walk step.
    fn finish_walks(&mut self) {
        for mut q in self.inner.iter_queries_mut() {
            if matches!(q.info(), kad::QueryInfo::Bootstrap { .. }) {
                q.finish();
            }
        }
    }

    /// Is a query other than a bootstrap walk running?
    fn lookup_running(&self) -> bool {
        self.inner.iter_queries().any(|q| !matches!(q.info(), kad::QueryInfo::Bootstrap { .. }))
    }
}

impl Deref for QuietKad {
    type Target = Kad;
    fn deref(&self) -> &Kad {
        &self.inner
    }
}

impl DerefMut for QuietKad {
    fn deref_mut(&mut self) -> &mut Kad {
        &mut self.inner
    }
}

impl NetworkBehaviour for QuietKad {
    type ConnectionHandler = <Kad as NetworkBehaviour>::ConnectionHandler;
    type ToSwarm = kad::Event;

    forward_to_inner!();

    fn handle_established_inbound_connection(
        &mut self,
        connection_id: ConnectionId,
        peer: PeerId,
        local_addr: &Multiaddr,
        remote_addr: &Multiaddr,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        self.inner.handle_established_inbound_connection(connection_id, peer, local_addr, remote_addr)
    }

    fn handle_established_outbound_connection(
        &mut self,
        connection_id: ConnectionId,
        peer: PeerId,
        addr: &Multiaddr,
        role_override: Endpoint,
        port_use: PortUse,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        self.inner.handle_established_outbound_connection(connection_id, peer, addr, role_override, port_use)
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<ToSwarm<Self::ToSwarm, THandlerInEvent<Self>>> {
        if self.walks {
            return self.inner.poll(cx);
        }
        loop {
            self.finish_walks();
            match self.inner.poll(cx) {
                Poll::Ready(ToSwarm::Dial { .. }) if !self.lookup_running() => {
                    // Only a walk can have asked for this dial; it is finished above or here.
                    self.finish_walks();
                    self.walk_dials_dropped += 1;
                }
                other => return other,
            }
        }
    }
}
