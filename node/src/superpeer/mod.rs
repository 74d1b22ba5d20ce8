//! Super peers in the node: the driver of `overlay::superpeer` (with the member's watch on its
//! head, `overlay::detect`), its wire format, and the swarm's super-peer report, its per-node
//! rows and its timeline.

pub mod driver;
pub mod report;
pub mod rows;
pub mod timeline;
pub mod wire;
