//! The KIP-1071 streams-group member: StreamsGroupHeartbeat (API key 88) with a client-generated
//! member id (KIP-1082), static membership (Kafka 4.4, KAFKA-20169), and the per-process task
//! guard that keeps two members of one process from holding one task at once (KAFKA-21401).
//!
//! ```text
//!             join                  answer (epoch > 0)          target differs
//! Unsubscribed ────► Joining ──────────────────────────► Stable ──────────────► Reconciling
//!                      ▲                                   ▲                    │ standby/warm-up dropped: released at once
//!   FENCED_MEMBER_EPOCH│                                   │                    │ active dropped: revoke first (ticket)
//!   UNKNOWN_MEMBER_ID ─┘ (tasks lost, same id, epoch 0)    │                    │ then take the rest through the guard
//!                                                          └── Acknowledging ◄──┘ (report owned tasks)
//!                            Reconciling (tasks withheld by the guard, re-checked every ≤ 250 ms)
//!   close / unsubscribe / leave_group / poll timeout ──► Leaving (-1, or -2 static) ──► Closed | Unsubscribed | Stale
//! ```
//!
//! The member follows the KIP-848 consumer member ([`machine::consumer`](crate::machine::consumer))
//! wherever the protocols agree, and Kafka 4.4's Java client (`StreamsMembershipManager`,
//! `StreamsGroupHeartbeatRequestManager`) for what it sends when.
//!
//! # Identity rules, case by case
//!
//! | case | what this member does |
//! |---|---|
//! | member id | one `MemberId` per member instance (`GroupConfig::member_id`, else derived from `GroupConfig::seed`; the driver draws it from the OS CSPRNG), sent on the first heartbeat and every retry; kept through fencing, UNKNOWN_MEMBER_ID, leave and rejoin |
//! | lost answer to the join | the retry carries the same id and epoch 0: the broker has one member |
//! | close before the first answer | the leave (-1 dynamic, -2 static) still goes out with the member id, behind the join |
//! | epoch-0 join | topology (epoch, subtopologies with source topics or patterns, repartition sink topics, changelog and repartition source topics with partition count, replication factor and configs, copartition groups), process id, user endpoint, rack, client tags, rebalance timeout (`max.poll.interval.ms`), instance id, empty owned tasks, task offsets |
//! | later heartbeats | instance id and endpoint-information epoch always; owned active/standby/warm-up tasks only when they changed since last sent; task offsets and end offsets once `task_offset_interval_ms` passed (or a warm-up task caught up), each only when changed; after any failure everything again (HeartbeatState.reset) |
//! | UNRELEASED_INSTANCE_ID while this member's own join may be registered | leave with -2 under its own id, rejoin at epoch 0; at most [`UNRELEASED_RECOVERIES`] times (an accepted leave does not count), then as below; FENCED_INSTANCE_ID on that leave ends the recovery (the Java streams client stops at the first UNRELEASED_INSTANCE_ID) |
//! | UNRELEASED_INSTANCE_ID held by another member id (a crashed incarnation, a duplicate) | `StreamsEvent::InstanceHeld`, joins with backoff until the group session timeout + `unreleased_instance_margin` (10 s), then `GroupError::UnreleasedInstanceId`; a member id kept from the crashed run (`GroupConfig::kept_member_id`) is back at once instead |
//! | FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID | every task lost (those of a revocation ticket too), epoch 0, rejoin with the same id |
//! | leave epochs | `close` default: -2 static, -1 dynamic; `CloseOptions::LeaveGroup` and [`leave_group`](StreamsMember::leave_group): -1; `RemainInGroup`: -2 static, nothing dynamic; `unsubscribe`: as close default |
//! | reconciliation | standby and warm-up tasks the target drops are released at once (no ticket); active tasks it drops are revoked with a [`RevokeTicket`] first; then the new tasks are taken through the guard and reported at once; a role change of a task the member holds (promotion, demotion after its ticket, standby ⇄ warm-up) happens in place |
//! | taking tasks | never while a heartbeat that listed the owned tasks is in flight, nor after one failed in the transport until a later one is answered (as the consumer member) |
//! | fatal | STREAMS_INVALID_TOPOLOGY, STREAMS_INVALID_TOPOLOGY_EPOCH, STREAMS_TOPOLOGY_FENCED, FENCED_INSTANCE_ID, GROUP_AUTHORIZATION_FAILED, a broker without streams groups (UNSUPPORTED_VERSION or no API 88: `GroupError::StreamsProtocolUnsupported`): typed, every task lost |
//! | tasks of subtopologies the topology lacks | refused, not fatal: never taken nor reported owned, a `warn` naming the subtopology ids, [`StreamsEvent::TasksRefused`] when they change; the rest is reconciled as usual (the group keeps the topology its first member declared and accepts a member declaring a lower topology epoch with it, status STALE_TOPOLOGY: no other member may stop this one through the coordinator) |
//! | poll timeout | no `poll` within `max.poll.interval.ms`: tasks lost, leave (-1 / -2), the next `poll` rejoins |
//! | topology description (KIP-1331) | heartbeats negotiate v1; an answer with `TopologyDescriptionRequired` makes the member push [`StreamsConfig::topology_description`] (StreamsGroupTopologyDescriptionUpdate, API 93, at the topology's epoch) once, one push in flight; NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS / a transport failure: pushed again after the next heartbeat answer; UNSUPPORTED_VERSION, INVALID_REQUEST or no API 93: no more pushes at this topology epoch; anything else: pushed again when asked again; every end reaches the application as [`StreamsEvent::TopologyDescriptionPushed`]; without a description nothing is ever sent |
//!
//! # The task guard
//!
//! All members of one OS process share one [`StreamsProcess`] (process id, user endpoint), which
//! records, per task, which local member holds it in which role. The coordinator is meant to
//! keep one task off two members of one process, but its per-process ownership index can lose
//! track of a holder (KAFKA-21401: a static member rejoining with a new process id); the guard
//! does not rely on it.
//!
//! - **Safety.** A member hands a task to the application, and reports it owned, only once the
//!   guard granted it; the guard grants a task only when no other local member holds it, in any
//!   role (checked and recorded under one lock). Otherwise the member *withholds* it: not in
//!   [`StreamsEvent::TasksAssigned`], not in its heartbeats, listed in
//!   [`StreamsMember::withheld`]. A member's own role change is always granted.
//! - **Liveness.** An active assignment wins within one heartbeat round: a member withholding an
//!   active task reserves it, and the local member holding it as a standby or warm-up gives it
//!   up at its next input (its [`poll_timeout`](StreamsMember::poll_timeout) is due at once
//!   while another member waits): released without a ticket
//!   ([`StreamsEvent::TasksReleased`] with [`ReleaseReason::GivenUpToActive`]) and reported no
//!   longer held. The active member takes it at its next check: a withholding member re-asks
//!   the guard every `min(heartbeat interval, 250 ms)`, so a released task is never withheld
//!   for longer. A standby or warm-up assignment waits for the holder to release the task (the
//!   coordinator revokes it there); an active holder is never forced (its release needs a
//!   revocation ticket).
//! - **Visible.** Every intervention bumps [`StreamsProcess::interventions`] (withheld, given
//!   up), logs a `warn` naming the task, both roles and both member ids, and reaches the
//!   application as [`StreamsEvent::GuardIntervened`] (for a metric).
//! - **Off switch.** [`StreamsProcess::unguarded`] grants everything and only records holders
//!   ([`StreamsProcess::doubly_held`]), as the Java client behaves.
//! - A member that closes, is fenced, stops or is dropped releases everything it held or waited
//!   for.

mod guard;
mod member;
mod topology;

use std::collections::BTreeMap;

pub use super::epoch::UNRELEASED_RECOVERIES;
pub use guard::{Intervention, InterventionKind, Interventions, StreamsProcess};
pub use member::{GUARD_RECHECK, StreamsConfig, StreamsMember, StreamsProtocol};
pub use topology::{
    DescriptionStatus, EndpointPartitions, GlobalStoreDescription, InternalTopic, NodeDescription,
    NodeKind, RefusedTasks, StatusCode, StreamsStatus, StreamsTasks, StreamsTopology, Subtopology,
    SubtopologyDescription, TaskId, TaskRole, TopologyDescription, UserEndpoint,
};

use crate::error::GroupError;
use crate::machine::TopicPartition;
use crate::machine::events::{
    CommitError, CommitId, CommittedOffset, Event, FetchId, MemberState, Reason, RevokeTicket,
};

/// Why tasks were released without a ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseReason {
    /// The coordinator no longer assigns these standby or warm-up tasks here.
    Unassigned,
    /// Another member of this process was assigned them as active (the guard).
    GivenUpToActive,
    /// The member leaves (close, unsubscribe, leave_group).
    Leaving,
}

/// Why a topology description push ([`StreamsConfig::topology_description`], KIP-1331) did
/// not store the description. The member pushes only when the coordinator asks (its heartbeat
/// answer says `TopologyDescriptionRequired`); after these it waits for the next ask, except
/// where a variant says it stops.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DescriptionPushError {
    /// STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED: the broker's plugin did not store it. The
    /// broker asks again after a transient failure (with a back-off of 30 s up to 1 h), never
    /// after a permanent one at this topology epoch.
    #[error("the broker's topology description plugin did not store the description: {message:?}")]
    UpdateFailed {
        /// The broker's message.
        message: Option<String>,
    },
    /// UNSUPPORTED_VERSION (no topology description plugin, no streams groups) or no
    /// StreamsGroupTopologyDescriptionUpdate API at all: the member pushes no more at its
    /// topology epoch.
    #[error("the broker does not take topology descriptions: {message:?}")]
    Unsupported {
        /// The broker's message, or the transport's.
        message: Option<String>,
    },
    /// INVALID_REQUEST (a topology epoch that is not the group's, a malformed description): the
    /// same push would be refused again, so the member pushes no more at its topology epoch.
    #[error("the broker refused the topology description: {message:?}")]
    InvalidRequest {
        /// The broker's message.
        message: Option<String>,
    },
    /// UNKNOWN_MEMBER_ID or GROUP_ID_NOT_FOUND: the member is no longer in the group; its
    /// heartbeat rejoins.
    #[error("the member is not in the group ({}): {message:?}", crate::error::error_name(*code))]
    NotMember {
        /// The error code.
        code: i16,
        /// The broker's message.
        message: Option<String>,
    },
    /// GROUP_AUTHORIZATION_FAILED: the principal may not read the group.
    #[error("not authorized to read the group: {message:?}")]
    Authorization {
        /// The broker's message.
        message: Option<String>,
    },
    /// Any other error code, or an answer of another API.
    #[error("topology description push failed with {}: {message:?}", crate::error::error_name(*code))]
    Other {
        /// The error code.
        code: i16,
        /// The broker's message.
        message: Option<String>,
    },
}

/// What a [`StreamsMember`] tells the application.
#[derive(Debug, PartialEq)]
#[non_exhaustive]
pub enum StreamsEvent {
    /// The member now holds `added` (a task promoted in place is in `added.active` and gone
    /// from `owned.standby` / `owned.warmup`); `owned` is everything held now.
    TasksAssigned {
        /// Newly held tasks, by role.
        added: StreamsTasks,
        /// Everything held now.
        owned: StreamsTasks,
        /// The member epoch.
        epoch: i32,
    },
    /// Active tasks are revoked: commit, stop processing them, then hand the ticket back with
    /// [`StreamsMember::complete_revocation`].
    TasksRevoking {
        /// The active tasks revoked.
        active: Vec<TaskId>,
        /// Hand back with `complete_revocation`.
        ticket: RevokeTicket,
    },
    /// Tasks released without a ticket: standby and warm-up tasks the target dropped or that
    /// another local member's active assignment needs, or everything when leaving.
    TasksReleased {
        /// The tasks released.
        tasks: StreamsTasks,
        /// Everything still held.
        owned: StreamsTasks,
        /// Why.
        reason: ReleaseReason,
    },
    /// Tasks lost without a chance to commit (fenced, stopped, poll timeout), those of an
    /// outstanding revocation ticket included.
    TasksLost {
        /// The tasks lost.
        tasks: StreamsTasks,
        /// Why.
        reason: Reason,
    },
    /// The coordinator assigned tasks of subtopologies this member's topology does not have:
    /// the group runs another topology (declared, with a higher topology epoch than this
    /// member's, by the member that joined the group first; the statuses then carry
    /// [`StatusCode::StaleTopology`]). The member
    /// cannot run them and does not take them: they are in no other event and never reported
    /// owned, and it goes on with the rest. The coordinator keeps them assigned here, so no
    /// member of the group runs them while this one stays: an application that must not run
    /// beside another topology closes the member. Emitted when the refused tasks change.
    TasksRefused {
        /// Every task of the latest assignment refused (empty once none is).
        refused: RefusedTasks,
    },
    /// The guard stepped in for this member (see the module docs).
    GuardIntervened(Intervention),
    /// The group's statuses changed (all of them now; empty when none holds any more).
    StatusChanged {
        /// The statuses, sorted.
        statuses: Vec<StreamsStatus>,
    },
    /// The endpoints-to-partitions map (Interactive Queries) of a new endpoint epoch.
    EndpointsChanged {
        /// The endpoint-information epoch.
        epoch: i32,
        /// The partitions per endpoint.
        endpoints: BTreeMap<UserEndpoint, EndpointPartitions>,
    },
    /// The member changed state.
    StateChanged {
        /// Previous state.
        from: MemberState,
        /// New state.
        to: MemberState,
        /// Why.
        reason: Reason,
        /// The member id.
        member_id: String,
        /// The member epoch now.
        epoch: i32,
    },
    /// A commit ([`StreamsMember::commit`]) finished: the streams form of
    /// [`Event::Committed`].
    Committed {
        /// Which commit.
        id: CommitId,
        /// Its outcome.
        result: Result<(), CommitError>,
    },
    /// An offset fetch ([`StreamsMember::fetch_offsets`]) finished: the streams form of
    /// [`Event::OffsetsFetched`].
    OffsetsFetched {
        /// Which fetch.
        id: FetchId,
        /// The committed offsets (`None` where nothing was committed), or why not.
        result: Result<BTreeMap<TopicPartition, CommittedOffset>, CommitError>,
    },
    /// A static member's join was answered UNRELEASED_INSTANCE_ID: another member id holds
    /// `instance_id` (a crashed earlier incarnation, until its session expires); the member
    /// keeps trying, and stops with [`GroupError::UnreleasedInstanceId`] once it stayed held for
    /// `limit`. As [`Event::InstanceHeld`].
    InstanceHeld {
        /// The instance id held.
        instance_id: String,
        /// How long the member waits in all.
        limit: std::time::Duration,
    },
    /// A topology description push (KIP-1331) the coordinator asked for ended: stored, or why
    /// not. Retriable failures (the coordinator moved or loading, the connection failed) are
    /// retried after the next heartbeat answer and reported only when the push ends.
    TopologyDescriptionPushed {
        /// The topology epoch pushed.
        topology_epoch: i32,
        /// Stored, or why not.
        result: Result<(), DescriptionPushError>,
    },
    /// The member stopped for good.
    Fatal(GroupError),
    /// The member closed (after its leave heartbeat, if one was due).
    Closed,
    /// Finding the coordinator fails in a way retrying will most likely not fix (see
    /// [`Event::ConnectionTrouble`]); the
    /// member keeps retrying with backoff.
    ConnectionTrouble {
        /// The broker (`host:port (bootstrap)`, or `(bootstrap)`).
        broker: String,
        /// The failure.
        error: crate::error::TransportError,
    },
    /// The member has tried for `default.api.timeout.ms` to get into the group and is not in
    /// yet (see [`Event::NotJoined`]); it keeps trying.
    NotJoined {
        /// What the member waited on, and why it is not in.
        error: GroupError,
    },
}

/// The events a streams member shares with the other members, in one list mapped both ways (the
/// streams form names the generation `epoch`).
macro_rules! shared_events {
    ($($variant:ident { $($field:ident),* }),* $(,)?) => {
        impl StreamsEvent {
            /// The streams form of a member event; the event back when it has none.
            pub(crate) fn from_shared(e: Event) -> Result<Self, Event> {
                Ok(match e {
                    Event::StateChanged { from, to, reason, member_id, generation } => {
                        Self::StateChanged { from, to, reason, member_id, epoch: generation }
                    }
                    Event::Fatal(e) => Self::Fatal(e),
                    Event::Closed => Self::Closed,
                    $(Event::$variant { $($field),* } => Self::$variant { $($field),* },)*
                    other => return Err(other),
                })
            }

            /// The member event this is the streams form of; itself back when it is the
            /// streams member's own (the simulation reads streams members so).
            #[cfg(feature = "sim")]
            #[allow(clippy::result_large_err, reason = "a move back to the caller, once per event")]
            pub(crate) fn into_shared(self) -> Result<Event, Self> {
                Ok(match self {
                    Self::StateChanged { from, to, reason, member_id, epoch } => {
                        Event::StateChanged { from, to, reason, member_id, generation: epoch }
                    }
                    Self::Fatal(e) => Event::Fatal(e),
                    Self::Closed => Event::Closed,
                    $(Self::$variant { $($field),* } => Event::$variant { $($field),* },)*
                    other => return Err(other),
                })
            }
        }
    };
}

shared_events!(
    InstanceHeld { instance_id, limit },
    ConnectionTrouble { broker, error },
    NotJoined { error },
    Committed { id, result },
    OffsetsFetched { id, result },
);

#[cfg(test)]
mod tests;
