//! What a member tells the application, and the tokens the application hands back.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::TopicPartition;
pub use crate::error::CommitError;
use crate::error::GroupError;

pub use super::state::{MemberState, Reason};

/// Proof that the application finished with partitions being revoked (stopped processing them and
/// tried to commit their positions; see [`Event::Revoking`]). Only the member creates tickets, and [`complete_revocation`] consumes one, so a member cannot
/// acknowledge or rejoin before the application said it is done.
///
/// [`complete_revocation`]: crate::machine::classic::ClassicMember::complete_revocation
#[derive(PartialEq, Eq)]
#[must_use = "hand the ticket back with complete_revocation once the commit was tried, even if it failed"]
pub struct RevokeTicket {
    pub(crate) id: u64,
}

impl fmt::Debug for RevokeTicket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RevokeTicket({})", self.id)
    }
}

/// Identifies a commit; its outcome arrives as [`Event::Committed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CommitId(pub(crate) u64);

impl CommitId {
    /// The id numbered `n`, for code that consumes commit ids without a machine to emit them
    /// (tests of a driver or a metrics recorder).
    pub const fn from_raw(n: u64) -> Self {
        Self(n)
    }
}

/// Identifies an offset fetch; its outcome arrives as [`Event::OffsetsFetched`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FetchId(pub(crate) u64);

/// An offset to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOffset {
    /// The partition.
    pub partition: TopicPartition,
    /// The next offset to consume.
    pub offset: i64,
    /// Optional metadata stored with the offset.
    pub metadata: Option<String>,
}

impl CommitOffset {
    /// `offset` (the next record to consume) for `partition`, without metadata.
    pub fn new(partition: TopicPartition, offset: i64) -> Self {
        Self {
            partition,
            offset,
            metadata: None,
        }
    }

    /// The same offset with `metadata` stored beside it.
    #[must_use]
    pub fn with_metadata(mut self, metadata: impl Into<String>) -> Self {
        self.metadata = Some(metadata.into());
        self
    }
}

/// A committed offset as the coordinator returned it.
///
/// An offset fetch (`committed()` of the driver, `fetch_offsets` of the sans-IO members) maps
/// each partition the coordinator answered for; Kafka's coordinator answers for every partition
/// asked, and one with no commit comes back as `offset: None` (the wire's -1), not absent. Treat
/// an absent partition as `None` too (`map.get(&tp).and_then(|c| c.offset)`): both mean "start
/// where `auto.offset.reset` says" ([`OffsetReset`](crate::config::OffsetReset)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    /// The committed offset (the next record to consume), `None` when nothing was committed.
    pub offset: Option<i64>,
    /// Its metadata.
    pub metadata: Option<String>,
}

/// How a member leaves when it closes (KIP-1092's `GroupMembershipOperation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CloseOptions {
    /// Static members stay in the group (no LeaveGroup); dynamic members leave.
    #[default]
    Default,
    /// Nobody sends a LeaveGroup: the member's session expires at the coordinator.
    RemainInGroup,
    /// Everyone sends a LeaveGroup (a static member names its instance id).
    LeaveGroup,
}

/// How a close ended: whether the coordinator heard the member leave. The members report it
/// themselves once stopped (`close_outcome()` on [`Member`](crate::machine::member::Member),
/// [`StreamsMember`](crate::machine::streams::StreamsMember) and the protocol members), so a
/// sans-IO program reads the same outcome the tokio driver's `close()` returns.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloseOutcome {
    /// The leave (LeaveGroup, or the KIP-848 or KIP-1071 heartbeat with epoch -1, or -2 for a
    /// static member that keeps its place) was answered.
    Left {
        /// The Kafka error code the coordinator answered with, if not 0 (the member is closed
        /// either way; [`error_name`](crate::error::error_name) names it).
        error: Option<i16>,
    },
    /// No leave was due: [`CloseOptions::RemainInGroup`], a classic static member with
    /// [`CloseOptions::Default`], a member that was not in the group, or one already stopped.
    NotDue,
    /// The leave went out but could not be delivered (the member is closed; the coordinator
    /// drops it when its session times out).
    Failed(crate::error::TransportError),
    /// The driver's close waited `request.timeout.ms` for the member to close (the member's
    /// task carries on closing). A sans-IO member never reports it.
    TimedOut,
}

/// Something the member tells the application.
#[derive(Debug, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// The member now owns `added` (its whole assignment is `owned`).
    Assigned {
        /// Newly owned partitions.
        added: Vec<TopicPartition>,
        /// Everything owned now.
        owned: Vec<TopicPartition>,
        /// The generation the assignment belongs to.
        generation: i32,
    },
    /// The member gives up `partitions` in a rebalance; it rejoins only once the ticket is
    /// back. In this order, so that no record is processed twice nor skipped:
    ///
    /// 1. stop processing `partitions` and wait until their processing stopped (a record still
    ///    in flight after the commit would be processed again by the next owner);
    /// 2. commit, for each, the position after the last record processed (the offset of that
    ///    record plus one; nothing for a partition with no record processed since its start);
    /// 3. hand the ticket back with `complete_revocation`, **whether the commit succeeded or
    ///    not**. A failed commit (the group moved on, the coordinator is unreachable,
    ///    `default.api.timeout.ms` ran out) costs only reprocessing from the last commit that
    ///    went through; keeping the ticket stalls the member: it neither acknowledges nor
    ///    rejoins, and loses its partitions when `max.poll.interval.ms` runs out.
    Revoking {
        /// The partitions given up.
        partitions: Vec<TopicPartition>,
        /// Hand back with `complete_revocation`.
        ticket: RevokeTicket,
    },
    /// The application gave up `partitions` itself (unsubscribe or close); no ticket is needed.
    Revoked {
        /// The partitions released.
        partitions: Vec<TopicPartition>,
    },
    /// The member lost `partitions` without a chance to commit (fenced, expired, poll timeout):
    /// another member may own them already, so do not commit them.
    Lost {
        /// The partitions lost.
        partitions: Vec<TopicPartition>,
        /// Why.
        reason: Reason,
    },
    /// The member changed state (logged once as `from -> to (reason)`).
    StateChanged {
        /// Previous state.
        from: MemberState,
        /// New state.
        to: MemberState,
        /// Why.
        reason: Reason,
        /// The member id now.
        member_id: String,
        /// The generation (classic) or member epoch now.
        generation: i32,
    },
    /// A commit finished. An event of the sans-IO members (the answer to
    /// `commit(offsets, now)`, matched by its [`CommitId`]): a
    /// `GroupMember` never yields it, its `commit()` returns this
    /// outcome instead.
    Committed {
        /// Which commit.
        id: CommitId,
        /// Its outcome.
        result: Result<(), CommitError>,
    },
    /// An offset fetch finished. An event of the sans-IO members (the answer to
    /// `fetch_offsets(partitions, now)`, matched by its [`FetchId`]): a
    /// `GroupMember` never yields it, its `committed()` returns
    /// this outcome instead.
    OffsetsFetched {
        /// Which fetch.
        id: FetchId,
        /// The committed offsets, or why not.
        result: Result<BTreeMap<TopicPartition, CommittedOffset>, CommitError>,
    },
    /// A static member's join was answered UNRELEASED_INSTANCE_ID: another member id holds
    /// `instance_id`, most likely an earlier incarnation of this member that crashed, until the
    /// coordinator expires its session. The member keeps trying to join, with backoff, and
    /// stops with [`GroupError::UnreleasedInstanceId`] once the instance id stayed held for
    /// `limit` (a live duplicate keeps it held). Reported once per wait. Keeping the member id
    /// across restarts avoids the wait
    /// ([`GroupConfig::kept_member_id`](crate::config::GroupConfig::kept_member_id)).
    InstanceHeld {
        /// The instance id held.
        instance_id: String,
        /// How long the member waits in all: the group's session timeout plus
        /// [`GroupConfig::unreleased_instance_margin`](crate::config::GroupConfig::unreleased_instance_margin).
        limit: Duration,
    },
    /// The member stopped for good.
    Fatal(GroupError),
    /// The member closed (after its LeaveGroup, if one was due).
    Closed,
    /// Subscribed topics that do not exist (the member never creates topics): nothing is
    /// assigned from them until they are created. Reported once per topic, and again, as
    /// [`TopicsAppeared`](Event::TopicsAppeared), when it exists
    /// ([`TopicWatch`](crate::machine::topics::TopicWatch)).
    TopicsMissing {
        /// The topics, sorted.
        topics: Vec<String>,
    },
    /// Subscribed topics reported missing exist now.
    TopicsAppeared {
        /// The topics, sorted.
        topics: Vec<String>,
    },
    /// Finding the coordinator failed in a way retrying will most likely not fix: the broker's
    /// answer is not Kafka's or does not decode, TLS or SASL fails
    /// ([`TransportError::is_persistent`](crate::error::TransportError::is_persistent)); a
    /// wrong `bootstrap.servers` or `security.protocol`, say. The member keeps retrying with
    /// backoff. Reported at the first such failure, and again only when the broker or the kind
    /// of failure changes, or after the coordinator was found in between.
    ConnectionTrouble {
        /// The broker (`host:port (bootstrap)`, or `(bootstrap)` when the error names none).
        broker: String,
        /// The failure.
        error: crate::error::TransportError,
    },
    /// The member has tried for `default.api.timeout.ms` to get into the group (after it
    /// subscribed, or since it last fell out) and is not in yet: the error is a
    /// [`GroupError::TimedOut`] naming what it waits on (the
    /// coordinator lookup, or the coordinator's answer to its join), the broker and the latest
    /// failure. Nothing stops: the member keeps trying (a broker that starts later is let in),
    /// and says so once per wait; the application decides whether to wait on or close.
    NotJoined {
        /// What the member waited on, and why it is not in.
        error: crate::error::GroupError,
    },
}
