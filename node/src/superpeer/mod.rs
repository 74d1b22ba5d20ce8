//! Super peers in the node: the driver of `overlay::superpeer`, its wire format, the
//! member's watch on its head, and the swarm's super-peer report and timeline.

pub mod driver;
pub mod head_watch;
pub mod report;
pub mod timeline;
pub mod wire;
