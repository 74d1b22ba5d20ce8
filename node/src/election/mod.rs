//! The election layer: runs one `overlay` election state machine inside the node.

pub mod driver;
