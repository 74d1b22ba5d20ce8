//! The super-peer state machine (`overlay::superpeer`) driven by hand and by small seeded
//! networks: one test binary, one module per topic, sharing the harness of `common`. Every
//! randomised test prints its seed; `PEERAGE_SEED=<seed>` replays it.

mod common;

mod aging;
mod drift;
mod estimate_pool;
mod fresh_holder;
mod handover;
mod handover_refusals;
mod lookups;
mod measure;
mod medoid;
mod member_positions;
mod neighbours;
mod reelection;
mod slot_check;
mod split;
mod unfit;
mod vicinity;
mod windows;
