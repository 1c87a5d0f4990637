//! The KIP-848 consumer-protocol member: ConsumerGroupHeartbeat v1 with a client-generated
//! member id (KIP-1082).
//!
//! ```text
//!               subscribe              answer (epoch > 0)        target differs
//! Unsubscribed ──────────► Joining ─────────────────────► Stable ─────────────► Reconciling
//!                            ▲                              ▲                       │ revoke first (ticket),
//!   FENCED_MEMBER_EPOCH /    │                              │                       │ then assign
//!   UNKNOWN_MEMBER_ID ───────┘ (same id, epoch 0)           └──── Acknowledging ◄───┘ (ack: owned partitions)
//!   close / unsubscribe / poll timeout ──► Leaving (epoch -1, or -2 for a static member) ──► Closed | Unsubscribed | Stale
//! ```
//!
//! Rules this member keeps (architecture "Identity rules"):
//! - one [`MemberId`](crate::MemberId) per member instance, drawn at construction, sent on the first heartbeat and
//!   on every retry, and kept through fencing, UNKNOWN_MEMBER_ID, leave and resubscribe;
//! - a close before the first answer still sends the leave carrying that id, on the same
//!   coordinator connection as the join (a broker reads a connection in order), so no ghost member
//!   stays behind;
//! - UNRELEASED_INSTANCE_ID answering a static member's epoch-0 join while this member's own
//!   earlier join may be registered (a lost answer, or after fencing): leave with -2 and the own
//!   id, rejoin at epoch 0, at most [`UNRELEASED_RECOVERIES`] times (a close or unsubscribe
//!   waiting for a revocation ticket ends the episode as it asked instead of the rejoin); a
//!   member id kept from an earlier run ([`GroupConfig::kept_member_id`](crate::config::GroupConfig::kept_member_id))
//!   counts as possibly registered from the start;
//! - UNRELEASED_INSTANCE_ID answering a join when nothing of this member holds the instance id
//!   (a fresh start after a crash, the recoveries spent, or FENCED_INSTANCE_ID answering the
//!   recovery's -2 leave): [`Event::InstanceHeld`](crate::machine::events::Event::InstanceHeld)
//!   once, the join retried with backoff until the group's session timeout plus
//!   [`GroupConfig::unreleased_instance_margin`](crate::config::GroupConfig::unreleased_instance_margin),
//!   then a typed fatal error; anywhere else (a dynamic member, a heartbeat that is not a join)
//!   the broker cannot mean this member's join, and the code is fatal as in the Java client;
//! - answers with a negative epoch are ignored; at most one regular heartbeat is in flight and
//!   only a leave may overlap it (a leave completed with a heartbeat still outstanding does not
//!   free its slot, and that heartbeat's late answer is ignored); after any failure the next
//!   heartbeat is full;
//! - once `close()` was called, `subscribe`, `subscribe_regex` and `unsubscribe` do not change
//!   the close (the first two answer [`ApiMisuse::Stopped`](crate::ApiMisuse::Stopped)).
//!
//! # Identity rules, case by case
//!
//! | case | what this crate does |
//! |---|---|
//! | member id | one `MemberId` per member instance (drawn from the OS CSPRNG by the driver; a member built on the core alone takes `GroupConfig::member_id` or derives it from `GroupConfig::seed`; 22 chars of `[A-Za-z0-9_]`), sent on the first heartbeat and every retry; kept through fencing, UNKNOWN_MEMBER_ID, leave and resubscribe |
//! | lost answer to the first heartbeat | the retry carries the same id and epoch 0: the broker has one member, no ghost (tested against Kafka 4.4 with ConsumerGroupDescribe) |
//! | close before the first answer | the leave (-1 dynamic, -2 static) still goes out with the member id, behind the join on the same connection |
//! | UNRELEASED_INSTANCE_ID while this member's own join may be registered (lost answer, after fencing, a kept member id) | leave with -2 under its own id, rejoin at epoch 0; at most 3 times (an accepted leave does not count), then as below (the Java client treats it as fatal at once) |
//! | UNRELEASED_INSTANCE_ID held by another member id (a crashed incarnation, a duplicate) | `Event::InstanceHeld`, joins with backoff until the group session timeout + `unreleased_instance_margin` (10 s), then `GroupError::UnreleasedInstanceId`; `None`: fatal at once |
//! | FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID | partitions `Lost`, epoch 0, rejoin with the same id |
//! | leave epochs | close default: -2 static, -1 dynamic; `LeaveGroup`: -1; `RemainInGroup`: -2 static, nothing dynamic |
//! | heartbeats | full when joining and after any failure, partial otherwise; the owned partitions only when joining or when they changed since the broker last read them (the Java client lists them in every full heartbeat: a retry processed late, at the previous epoch, would carry a stale list); one regular heartbeat in flight, only a leave may overlap; answers with a negative epoch ignored |
//! | reconciliation | revoke first (ticket), then assign, then acknowledge at once; topic ids resolved through Metadata (a join asks for the subscribed topics right behind FindCoordinator, so the first assignment needs no extra round trip), unresolved ids carried until metadata knows them |
//! | close / unsubscribe during a revocation | the leave waits for the ticket; calls after `close()` never undo it (`subscribe` is `ApiMisuse::Stopped`) |
//! | taking partitions | never while a heartbeat that listed the owned partitions is in flight, nor after one failed in the transport until a later one is answered: the broker reads a stale owned list as revocations done (`ownsRevokedPartitions`) and could hand the partitions to another member |
//! | UNRELEASED_INSTANCE_ID recovery | the -2 leave answered FENCED_INSTANCE_ID (another member id holds the instance id) ends the recovery: the member waits as for an instance id held elsewhere |
//! | commits | OffsetCommit/OffsetFetch v9 with member id and epoch; STALE_MEMBER_EPOCH retried with the latest epoch while still a member, else `CommitError::NotMember` |

mod member;

pub use super::epoch::UNRELEASED_RECOVERIES;
pub use member::{ConsumerMember, ConsumerProtocol};

#[cfg(test)]
mod tests;
