//! Super-peer selection (seed 000, "Elections in large-scale systems"), sans-IO.
//!
//! Seed 000 lists four requirements: normal nodes have low-latency access to super peers;
//! super peers are evenly distributed; there is a predefined portion of super peers; each
//! super peer serves at most a fixed number of normal nodes. It gives two methods, both here:
//! **reserved-prefix ids** in the DHT and **repulsion tokens** in an m-dimensional
//! (latency-coordinate) space. Every normal node joins the **cluster** of a nearby super peer
//! with room; when a super peer dies its cluster elects a replacement with one of the classic
//! algorithms ([`crate::AnyElection`]).
//!
//! Like every protocol in this crate the state machine ([`SuperPeerNode`]) does no I/O, reads
//! no clock and owns no randomness: the driver feeds [`SpInput`]s (rounds, messages, lookup
//! answers, peers up/down, coordinate updates, election timers) with an [`SpContext`] (time,
//! seeded RNG) and carries out the [`SpEffect`]s (send, DHT lookup, provide a key, become or
//! stop being super peer, attached to X).
//!
//! Files: [`config`] (settings), [`point`] (compact coordinate), [`estimate`] (each node's
//! estimate of N), [`token`] (force law and move choice), [`promotion`] (settled super
//! peers: their moves age), [`heir`] (the member a head names to replace it), [`vicinity`] (what the node's own routing
//! table says about its id neighbourhood), [`message`] (wire messages, inputs,
//! effects), [`node`] (the state machine, one file per part; its doc describes the protocol step by
//! step).

pub mod config;
pub mod estimate;
pub mod heir;
pub mod lookup;
pub mod medoid;
pub mod message;
pub mod node;
pub mod point;
pub mod promotion;
pub mod record;
pub mod token;
pub mod vicinity;

pub use config::{
    prefix_bits, ClusterElectionConfig, DiscoveryConfig, EstimateConfig, HeadWatchConfig, MedoidConfig, Method,
    SplitConfig, SuperPeerConfig, SuperPeerConfigError, SuperPeerFile, TokenConfig, ROUND,
};
pub use estimate::{SizeEstimator, SizeSample};
pub use lookup::LookupReport;
pub use message::{
    HeadEntry, HeadRole, MovePrice, MoveRecord, PeerInfo, Query, SpEffect, SpInput, SpMessage, TokenEntry, TokenId,
};
pub use node::{
    probe_limit, slot_key, token_directory_key, CachedHead, SpContext, SuperPeerNode, CACHE_TTL, ELECTION_RTT_FACTOR,
    PROBE_MARGIN, PROVIDERS_PER_ANSWER, SEED_LOOKUPS, VIEW_EVERY,
};
pub use point::Point;
