//! The connection layer's rules, sans-IO: which connections a node lets in and dials
//! ([`admission`], the connection gate), and which established ones it keeps, closes and
//! opens ([`manager`]). The node's libp2p behaviours hold the connections and ask these rules;
//! the rules hold counts, marks and times, never a socket.

pub mod admission;
pub mod manager;

pub use admission::{Admission, DialFailed, DialRefusal, Limits, Refusal};
pub use manager::{Keep, PeerInfo, PeerManager, Plan, Policy};
