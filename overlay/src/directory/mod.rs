//! The member directory: who is in the group, with what rank, at which addresses, as signed
//! records of the members themselves, and the checks every claim about members goes through.
//!
//! - [`record`]: a member record signed with the member's libp2p key (libp2p's signed-envelope
//!   layout).
//! - [`admission`]: what a record may claim (priority ceiling, expiry, incarnation bound, id
//!   puzzle), why one is refused, and each sender's admission budget.
//! - [`broadcast`]: a message published to many, signed by its author (the election topic).
//! - [`members`]: the directory itself, its anti-entropy sync, expiry and tombstones.
//! - [`memo`]: records already checked, shared by the directories of one process.
//! - [`pacer`]: when the next digest of that sync is due.
//! - [`claims`]: election and super-peer claims checked against the authenticated sender and
//!   the directory.
//!
//! Sans-IO like the rest of the crate: the caller passes the sender of every frame and the
//! wall clock (microseconds since the Unix epoch, in which records expire).

pub mod admission;
pub mod broadcast;
pub mod claims;
pub mod members;
pub mod memo;
pub mod pacer;
pub mod record;

pub use admission::{Bounds, Refusal, RefusalCounts};
pub use broadcast::{SignedBroadcast, BROADCAST_WINDOW_US};
pub use claims::{check_election, check_superpeer, ClaimRefusal, Severity};
pub use members::{
    Directory, Handled, Member, SyncBody, SyncError, SyncFrame, SyncStats, MAX_MEMBERS_FRAME_BYTES, MEMBERS_VERSION,
};
pub use memo::VerifiedMemo;
pub use pacer::SyncPacer;
pub use record::{node_id_of, Record, RecordBody, SignError, SignedRecord};
