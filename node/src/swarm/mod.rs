//! Many nodes in one process: `peerage swarm` and the integration tests' `LocalSwarm`.

pub mod keys;
pub mod runner;
