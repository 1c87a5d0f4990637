//! The classic-protocol member: JoinGroup / SyncGroup / Heartbeat / LeaveGroup, static
//! membership, client-side assignment, offset commit and fetch.
//!
//! ```text
//!               subscribe                       JoinGroup ok             SyncGroup ok
//! Unsubscribed ───────────► Rejoin ──► Joining ─────────────► Syncing ───────────────► Stable
//!                             ▲  (leader: Assigning = Metadata, then SyncGroup)           │
//!                             │                                                           │
//!                             └─ AwaitRevoke ◄── rebalance (eager: revoke all first) ─────┘
//!      close/unsubscribe ──► Leaving (LeaveGroup, when due) ──► Closed | Unsubscribed
//!      (in AwaitRevoke both wait for the ticket first, or max.poll.interval.ms without it)
//!      FENCED_INSTANCE_ID, fatal codes ──► Fatal
//! ```
//!
//! Identity rules (the reason this crate exists; KAFKA-20985):
//! - the member id survives every path that does not send LeaveGroup: unsubscribe, close with
//!   remain-in-group (or default, for a static member), poll timeout, session expiry, coordinator
//!   loss. Only UNKNOWN_MEMBER_ID answering the current generation, or a LeaveGroup that really
//!   went out, clears it;
//! - a JoinGroup with member id `""` and an instance id is not sent again while an earlier one
//!   may still reach the broker: after such a join failed in the transport (its fate unknown),
//!   the next empty-id join waits out the JoinGroup timeout of the first. If the first one still
//!   lands later and replaces this member, the FENCED_INSTANCE_ID that follows is recognised as
//!   self-inflicted (bounded by the number of such joins) and the member rejoins instead of
//!   stopping;
//! - a FENCED_INSTANCE_ID from a coordinator other than the one that registered the member id
//!   (the coordinator moved since the last successful JoinGroup) is forgiven once per
//!   coordinator: the member rejoins with `""` and its instance id. The broker writes no record
//!   for a static replacement made while the group rebalances, so a coordinator that takes over
//!   loads the older record and fences the live member with the previous process's member id
//!   in mind. A second one from that coordinator is terminal (a genuine duplicate);
//! - FENCED_INSTANCE_ID answering the current generation is otherwise terminal and typed.
//!
//! Every response passes one gate: it must answer a request this member sent, and join/sync
//! answers must answer the request the member is waiting for. Errors that reset state act only
//! when the request carried the current generation and member id (KAFKA-9823 semantics).
//!
//! # Identity rules, case by case
//!
//! | case | what this crate does | Java client |
//! |---|---|---|
//! | static member skips LeaveGroup (unsubscribe, close, poll timeout, session expiry, coordinator loss) | keeps its member id, rejoins with it | wipes it; rejoins with `""` and can be fenced by its own abandoned JoinGroup (KAFKA-20985) |
//! | member id cleared | only on UNKNOWN_MEMBER_ID answering the current generation, or after a LeaveGroup went out | also on every suppressed leave |
//! | empty-id JoinGroup whose fate is unknown (transport failure after it may have been written) | no second empty-id join until the first's JoinGroup timeout passed; a FENCED_INSTANCE_ID that follows it is recognised as self-inflicted once per such join, and the member rejoins. A join that never left (connection refused, no connection within the setup timeout) is not in doubt: rejoin after the retry backoff | retries at once |
//! | FENCED_INSTANCE_ID from a coordinator other than the one that registered this member id (the coordinator moved since the last successful JoinGroup), or from that one after it answered NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE since (it gave the group up and loaded it again from its log) | the first one per coordinator is not terminal: what it owned is `Lost`, and it rejoins with `""` and its instance id. The broker writes no record for a static replacement made during a rebalance (and none when a rebalance of a non-empty group completes), so a coordinator that takes over loads the older record, maps the instance id to the previous process's member id, and fences the live member (`validateMember`). A second one from the same coordinator, or one from the coordinator that registered the id, is terminal: a genuine duplicate still ends fenced | `FencedInstanceIdException`: a static member restarted during a rebalance exits after a coordinator failover |
//! | FENCED_INSTANCE_ID for the current generation, otherwise | terminal, typed `GroupError::FencedInstanceId { instance_id }` | `FencedInstanceIdException` |
//! | answers to an older generation | ignored (never reset current state) | same (KAFKA-9823) |
//! | rejoin that skipped generations (heartbeats stalled while the group rebalanced) | what it owned is reported `Lost`: a static member that did not rejoin stays in the group with its old subscription, so another member may have been given those partitions | keeps them (cooperative) |
//! | close / unsubscribe while a revocation ticket is out | partitions not under the ticket are released at once; a dynamic member's LeaveGroup waits for the ticket (or `max.poll.interval.ms`), heartbeats and commits go on meanwhile | `onPartitionsRevoked` runs inside the call |

mod member;

/// The assignors (at the crate root: the configuration names them too).
pub use crate::assignor;
/// The consumer-protocol bytes of JoinGroup and SyncGroup (part of the wire codec).
pub use crate::wire::subscription;

pub use member::ClassicMember;

#[cfg(test)]
mod tests;
