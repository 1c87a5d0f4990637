//! The KIP-932 share-group member: ShareGroupHeartbeat v1 with a client-generated member id
//! (KIP-1082), on the [`EpochMember`](crate::machine::epoch::EpochMember).
//!
//! ```text
//!               subscribe              answer (epoch > 0)
//! Unsubscribed ──────────► Joining ─────────────────────► Stable ◄──┐ target changed: released
//!                            ▲                              │       │ at once, then assigned
//!   FENCED_MEMBER_EPOCH /    │                              └───────┘
//!   UNKNOWN_MEMBER_ID ───────┘ (same id, epoch 0)
//!   close / unsubscribe / poll timeout ──► Leaving (epoch -1) ──► Closed | Unsubscribed | Stale
//! ```
//!
//! What a share group is not (GroupMetadataManager.shareGroupHeartbeat, Kafka 4.4): no static
//! membership (an instance id is a configuration error, so no -2 and no
//! UNRELEASED_INSTANCE_ID), no rebalance timeout, no owned partitions in the heartbeat, no
//! revocation step (the assignment is not exclusive: records are acquired per member, so a
//! partition is released as soon as the target drops it and taken as soon as the target names
//! it), no offset commits (records are acknowledged through share sessions instead).
//!
//! Rules this member keeps:
//! - one [`MemberId`](crate::MemberId) for the member's life, sent on the first heartbeat and
//!   every retry, kept through fencing, UNKNOWN_MEMBER_ID, leave and resubscribe; never empty;
//! - a heartbeat is full (the subscribed topic names) at epoch 0 and after any failure; the
//!   broker answers a full heartbeat with the member's whole assignment (`isFullRequest`), so an
//!   assignment carried by a lost answer is never stale for long;
//! - FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: partitions `Lost`, rejoin at epoch 0 with the same
//!   id; GROUP_ID_NOT_FOUND while in the group (the group went away under the member) is the
//!   same, but answering a join it is terminal ([`GroupError::GroupIdNotFound`](crate::GroupError::GroupIdNotFound): the id names a
//!   group of another type);
//! - the leave is epoch -1, also for a close before the first answer (behind the join on the
//!   same connection).

mod consumer;
mod member;
pub mod session;

pub use consumer::{ShareConsumer, ShareEvent};
pub use member::{ShareMember, ShareProtocol};
pub use session::{AckMode, AcknowledgeType, ShareFetchSettings, SharePartition, ShareSessions};

#[cfg(test)]
mod consumer_tests;
#[cfg(test)]
mod tests;
