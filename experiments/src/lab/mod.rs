//! The `peerage-lab` experiments built on the simulator.
//!
//! - [`cli`]: the command line (clap derive); one enum variant per subcommand, so adding the
//!   super-peer experiments is one variant and one match arm.
//! - [`spec`]: small parsed value types (fractions or counts, seed ranges).
//! - [`cases`]: the sweep's random cases, one fault kind each, and their place inside or
//!   outside the algorithm's assumptions.
//! - [`scenario`]: an election experiment's configuration, its seeded construction and the
//!   outcome of one run.
//! - [`summary`]: best/worst/average over seeds.
//! - [`elections`]: `peerage-lab elections` (tables, CSV, JSON).
//! - [`sweep`]: `peerage-lab sweep`, the randomised safety/liveness check under faults.
//! - [`bench`]: `peerage-lab bench`, the simulator's throughput and memory.
//! - [`mobility`]: `peerage-lab mobility`, the echo election on mobile nodes.

pub mod bench;
pub mod cases;
pub mod cli;
pub mod elections;
pub mod mobility;
pub mod scenario;
pub mod spec;
pub mod summary;
pub mod sweep;
