//! What each election algorithm assumes of its environment, stated once in code.
//!
//! The simulator's sweep judges every random case against these: a case inside an
//! algorithm's assumptions must end with one leader per connected component, the best live
//! one, after its last fault; a case outside them is run and its failures are counted as
//! degradation, not hidden.
//!
//! Common to all six: crash-stop processes that may recover with fresh state; asynchronous
//! channels (no FIFO order, delays bounded only in that the timeouts exceed a round trip);
//! a failure detector that eventually tells each process the truth about each member (echo:
//! each neighbour), as `PeerDown` when it crashed or became unreachable and `PeerUp` when
//! it is back, its reports racing the messages sent around the change; and heartbeats
//! (`alive_interval_ms > 0`; echo: probes) to notice a leader nothing reports (a frozen or
//! cut-off process) and to merge the sides of a healed partition. A partitioned minority
//! elects its own leader (availability over a quorum); the heal merges the sides.
//!
//! Where they differ, per the papers: the bully family (seed 002's assumptions 4, 6 and 8:
//! "delivery of messages is guaranteed", "does not spontaneously generate messages", "no
//! transmission errors"), the list ring and Chang-Roberts (seed 003: "messages eventually are
//! delivered") and Villadangos et al. (a fault-free network) assume reliable channels;
//! Vasudevan et al.'s echo election, made for lossy wireless links, resends what is not
//! acknowledged and does not. Duplicates: see each algorithm's entry in [`assumptions`].

use crate::election::Algorithm;

/// An algorithm's assumptions about its environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Assumptions {
    /// Messages between live processes that can reach each other are never lost.
    pub reliable_channels: bool,
    /// No message is delivered twice.
    pub no_duplicates: bool,
    /// Any process can message any other (else only its topology neighbours).
    pub complete_network: bool,
    /// Heartbeats must be on to notice a leader that no failure report names (frozen or cut
    /// off) and to merge two leaders after a heal.
    pub heartbeats: bool,
}

/// The assumptions of `algorithm`.
pub const fn assumptions(algorithm: Algorithm) -> Assumptions {
    match algorithm {
        // Seed 002, assumptions 4, 6, 8.
        Algorithm::Bully | Algorithm::FastBully => {
            Assumptions { reliable_channels: true, no_duplicates: true, complete_network: true, heartbeats: true }
        }
        // Seeds 000, 001, 003: a lap is one message at a time; a copy would run a second lap.
        Algorithm::Ring | Algorithm::ChangRoberts => {
            Assumptions { reliable_channels: true, no_duplicates: true, complete_network: true, heartbeats: true }
        }
        // A fault-free complete network in the paper; a copy of `Message1/2/3` meets a
        // process whose status has moved on and is ignored, as the handlers ignore any
        // message in a state that does not expect it.
        Algorithm::Villadangos => {
            Assumptions { reliable_channels: true, no_duplicates: false, complete_network: true, heartbeats: true }
        }
        // Lossy wireless links: unacknowledged elections and acks are resent, and a copy is
        // answered like the original.
        Algorithm::Echo => {
            Assumptions { reliable_channels: false, no_duplicates: false, complete_network: false, heartbeats: true }
        }
    }
}

impl Algorithm {
    /// This algorithm's assumptions (see [`assumptions`]).
    pub const fn assumptions(self) -> Assumptions {
        assumptions(self)
    }
}
