//! PLACEHOLDER being replaced by its implementer in this session: ChangRoberts.

use crate::driver::{Context, Election, Input};
use crate::election::ElectionConfig;
use crate::id::{NodeId, Rank};
use crate::membership::Membership;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct ChangRoberts {
    me: Rank,
}

impl ChangRoberts {
    pub fn new(me: Rank, _group: Arc<Membership>, _cfg: &ElectionConfig) -> Self {
        ChangRoberts { me }
    }
}

impl Election for ChangRoberts {
    fn id(&self) -> NodeId {
        self.me.id
    }
    fn handle(&mut self, _ctx: &mut Context<'_>, _input: Input) {}
    fn leader(&self) -> Option<NodeId> {
        None
    }
    fn state(&self) -> &'static str {
        "Passive"
    }
    fn in_election(&self) -> bool {
        false
    }
}
