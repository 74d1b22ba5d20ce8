//! Election messages: one enum for all six algorithms, so that one wire type and one driver
//! carry them all.
//!
//! Names follow the seeds: `Election`, `Answer`, `Coordinator` (seeds 000, 001, 002);
//! `IamUp`, `View`, `Nomination` (seed 002's fast bully); `Message1/2/3` (seed 004);
//! Chang-Roberts' `elected` (seed 003). An algorithm that receives a message of another
//! algorithm rejects it (`Effect::Rejected`) and keeps its state.
//!
//! Each algorithm owns its section of this enum: change a section only together with the
//! algorithm that uses it.

use crate::id::Rank;
use serde::{Deserialize, Serialize};

/// Identifies one echo election (Vasudevan et al.): ranked by `(round, source)`; a node takes
/// part only in the highest election it has heard of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ElectionTag {
    pub round: u64,
    pub source: Rank,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Message {
    // ---- bully and fast bully (seeds 000, 001, 002) ----
    /// Sent to every higher-priority process: "I am holding an election".
    Election,
    /// Reply to `Election` from a higher process: "I am alive and will take over".
    Answer,
    /// The sender announces itself coordinator.
    Coordinator,
    /// The coordinator's periodic heartbeat (seed 002: alive.interval); silence for T1 starts
    /// an election. The ring algorithms and Villadangos use it too (`watch.rs`).
    Alive,
    /// Fast bully: a recovering process announces itself to every process.
    IamUp,
    /// Fast bully: reply to `IamUp` with the processes the sender knows to be up (its view),
    /// and the coordinator it names, if any.
    View { up: Vec<Rank>, coordinator: Option<Rank> },
    /// Fast bully: the election manager nominates the receiver as coordinator.
    Nomination,

    // ---- list-based ring (seeds 000, 001, 003 "modified version") ----
    // `epoch` (not in the seeds) is for crashes and restarts (see `ring.rs`): a restarted election
    // has a higher epoch, and messages of older epochs never set a leader.
    /// `Election` on the ring, collecting the ranks of every live process it passes.
    RingElection { epoch: u64, initiator: Rank, candidates: Vec<Rank> },
    /// `Coordinator` on the ring: the elected process and the members of the new ring; it goes
    /// round once.
    RingCoordinator { epoch: u64, initiator: Rank, leader: Rank, members: Vec<Rank> },

    // ---- Chang-Roberts (seed 003) ----
    // `epoch` (not in the seed) is for crashes (see `chang_roberts.rs`), as for the ring.
    /// The election message carrying the best candidate seen so far.
    CrElection { epoch: u64, candidate: Rank },
    /// The `elected` message carrying the winner.
    CrElected { epoch: u64, leader: Rank },

    // ---- Villadangos et al. (seed 004) ----
    // `epoch` (not in the paper) is for crashes (see `villadangos.rs`): a restarted election has a
    // higher epoch, and messages of older epochs are ignored.
    /// Goes down the virtual ring from a candidate to the next candidate below it.
    Message1 { epoch: u64, candidate_predecessor: Rank },
    /// From a waiting candidate to a lower candidate: "I am your candidate successor".
    Message2 { epoch: u64, candidate_successor: Rank },
    /// Hands the sender's candidate predecessor on to its candidate successor.
    Message3 { epoch: u64, candidate_predecessor: Rank },
    /// The leader announced to all.
    VillLeader { epoch: u64, leader: Rank },

    // ---- Vasudevan et al. echo election (seed 000) ----
    /// Sent down the spanning tree of election `tag`.
    EchoElection { tag: ElectionTag },
    /// Acknowledgement to the parent (or to a non-parent, `best = None`) carrying the best
    /// (capacity, id) found in the sender's subtree.
    EchoAck { tag: ElectionTag, best: Option<Rank> },
    /// The source announces the winner of election `tag`.
    EchoLeader { tag: ElectionTag, leader: Rank },
    /// Periodic liveness probe between neighbours (detects lost leaders and partitions).
    EchoProbe,
    /// Reply to a probe (also sent unprompted to a new neighbour, and to neighbours waiting
    /// for the sender's result): the latest election the sender joined and the leader it
    /// names (`None` while that election is unfinished or before any). Neighbours compare
    /// these to find merged components that disagree.
    EchoReply { tag: Option<ElectionTag>, leader: Option<Rank> },
    /// The leader's periodic heartbeat, flooded through its component; `seq` grows with each
    /// beat of that leader, `tag` is the sender's latest election.
    EchoHeartbeat { tag: Option<ElectionTag>, leader: Rank, seq: u64 },
}

impl Message {
    /// A short, stable name for counting messages by type.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Election => "Election",
            Message::Answer => "Answer",
            Message::Coordinator => "Coordinator",
            Message::Alive => "Alive",
            Message::IamUp => "IamUp",
            Message::View { .. } => "View",
            Message::Nomination => "Nomination",
            Message::RingElection { .. } => "RingElection",
            Message::RingCoordinator { .. } => "RingCoordinator",
            Message::CrElection { .. } => "CrElection",
            Message::CrElected { .. } => "CrElected",
            Message::Message1 { .. } => "Message1",
            Message::Message2 { .. } => "Message2",
            Message::Message3 { .. } => "Message3",
            Message::VillLeader { .. } => "VillLeader",
            Message::EchoElection { .. } => "EchoElection",
            Message::EchoAck { .. } => "EchoAck",
            Message::EchoLeader { .. } => "EchoLeader",
            Message::EchoProbe => "EchoProbe",
            Message::EchoReply { .. } => "EchoReply",
            Message::EchoHeartbeat { .. } => "EchoHeartbeat",
        }
    }

    /// All kinds, in declaration order (for tables and metrics).
    pub const KINDS: [&'static str; 21] = [
        "Election",
        "Answer",
        "Coordinator",
        "Alive",
        "IamUp",
        "View",
        "Nomination",
        "RingElection",
        "RingCoordinator",
        "CrElection",
        "CrElected",
        "Message1",
        "Message2",
        "Message3",
        "VillLeader",
        "EchoElection",
        "EchoAck",
        "EchoLeader",
        "EchoProbe",
        "EchoReply",
        "EchoHeartbeat",
    ];
}
