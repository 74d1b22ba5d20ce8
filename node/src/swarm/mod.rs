//! Many nodes as one swarm: in one process (`peerage swarm`, the integration tests'
//! `LocalSwarm`) or as M shards on one or many hosts, and the swarm's report.

pub mod control;
pub mod heal;
pub mod keys;
pub mod merge;
pub mod rows;
pub mod runner;
pub mod serve;
pub mod shard;
pub mod worker;
