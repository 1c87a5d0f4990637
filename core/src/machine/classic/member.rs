//! The classic member's state machine; its rules are the docs of the parent module.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, HeartbeatRequest, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, RequestKind,
    ResponseKind, SyncGroupRequest,
};
use kafka_protocol::protocol::StrBytes;

use super::assignor::{Assignor, MemberMetadata, RebalanceProtocol};
use super::subscription::{Assignment, Subscription};
use crate::config::{GroupConfig, GroupProtocol};
use crate::error::{
    ApiMisuse, ConfigError, ErrorAction, GroupError, TransportError, classify, codes,
};
use crate::machine::TopicPartition;
use crate::machine::events::{
    CloseOptions, CommitError, CommitId, CommitOffset, Event, FetchId, MemberState, Reason,
    RevokeTicket,
};
use crate::machine::metadata::ClusterMetadata;
use crate::machine::offsets::{Fence, Hint, Protocol, SentOffsets};
use crate::machine::shell::{PhaseName, Shell, Skeleton, lease_bound, millis, phases, skeleton};
use crate::machine::timer::Timer;
use crate::request::{Broker, Fit, Outbound, Reply, RequestId, Response, ResponseBody};

/// `ConsumerProtocol.PROTOCOL_TYPE`.
const PROTOCOL_TYPE: &str = "consumer";
/// JoinGroup v5 is the first with `GroupInstanceId`; dynamic members could use v4, but every 4.x
/// broker has v9.
const JOIN_VERSIONS: std::ops::RangeInclusive<i16> = 5..=9;
/// SyncGroup v3+ and Heartbeat v3+ carry the instance id; SyncGroup v5 the protocol type and name.
const SYNC_VERSIONS: std::ops::RangeInclusive<i16> = 3..=5;
const HEARTBEAT_VERSIONS: std::ops::RangeInclusive<i16> = 3..=4;
/// LeaveGroup v3+ is batched (member id + instance id).
const LEAVE_VERSIONS: std::ops::RangeInclusive<i16> = 3..=5;
/// OffsetCommit v7+ carries the instance id; the classic Java client caps at v9 (names, not ids).
const COMMIT_VERSIONS: std::ops::RangeInclusive<i16> = 7..=9;
/// OffsetFetch v8+ is batched by group; capped at v9 (names) like the Java classic client.
const FETCH_VERSIONS: std::ops::RangeInclusive<i16> = 8..=9;

/// Fits a body this member built for the newest version of its group API to `version`, clearing
/// the fields that version does not carry (instead of failing with "field not available").
fn fit(body: RequestKind, version: i16) -> RequestKind {
    match body {
        // JoinGroup v8+ carries a reason.
        RequestKind::JoinGroup(r) if version < 8 => RequestKind::JoinGroup(r.with_reason(None)),
        // SyncGroup v5+ carries protocol type and name (KIP-559).
        RequestKind::SyncGroup(r) if version < 5 => {
            RequestKind::SyncGroup(r.with_protocol_type(None).with_protocol_name(None))
        }
        // LeaveGroup v5+ carries a reason per member.
        RequestKind::LeaveGroup(mut r) if version < 5 => {
            for m in &mut r.members {
                m.reason = None;
            }
            RequestKind::LeaveGroup(r)
        }
        other => other,
    }
}

/// Where the member stands. Each variant holds only its own data.
#[derive(Debug, Clone)]
pub(crate) enum Phase {
    /// No subscription; not trying to be in the group.
    Unsubscribed,
    /// Wants to join as soon as the coordinator is known and `not_before` passed.
    Rejoin { not_before: Option<Instant> },
    /// Waiting for the application's revocation ticket before rejoining — or, when `leave`
    /// is set, before the LeaveGroup of a close or unsubscribe that came meanwhile.
    AwaitRevoke {
        ticket: u64,
        leave: Option<DeferredLeave>,
        /// The partitions being revoked: still the application's to commit until the ticket
        /// is back.
        revoking: Vec<TopicPartition>,
    },
    /// JoinGroup in flight.
    Joining { request: RequestId },
    /// Leader: Metadata for the members' topics in flight.
    Assigning {
        request: RequestId,
        /// Shared, not copied, when the metadata answer arrives.
        members: Arc<[MemberMetadata]>,
        protocol: String,
    },
    /// SyncGroup in flight.
    Syncing { request: RequestId },
    /// In the group with an assignment.
    Stable,
    /// The application missed `max.poll.interval.ms`; waiting for its next poll.
    PollExpired,
    /// LeaveGroup in flight; then `Closed` (or `Unsubscribed`).
    Leaving {
        request: RequestId,
        then_close: bool,
    },
    /// Closed by the application.
    Closed,
    /// Stopped by a terminal error.
    Fatal(GroupError),
}

phases!(
    Unsubscribed,
    Rejoin { .. },
    AwaitRevoke { .. },
    Joining { .. },
    Assigning { .. },
    Syncing { .. },
    Stable,
    PollExpired,
    Leaving { .. },
    Closed,
    Fatal(_)
);

/// A close or unsubscribe issued while a revocation ticket was out: its LeaveGroup (or the
/// decision not to send one) waits for the ticket, `max.poll.interval.ms` after the first such
/// call, or an answer that voids the revocation, whichever comes first.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeferredLeave {
    options: CloseOptions,
    /// `close()` (then `Closed`) rather than `unsubscribe()` (then `Unsubscribed`).
    then_close: bool,
}

impl DeferredLeave {
    /// The reason logged and sent with the LeaveGroup, for `close` or `unsubscribe` and `why`.
    fn reason(self, why: Why) -> Reason {
        match (self.then_close, why) {
            (true, Why::Ticket) => Reason::ClosedAfterRevocation,
            (false, Why::Ticket) => Reason::UnsubscribedAfterRevocation,
            (true, Why::Deadline) => Reason::ClosedWithoutTicket,
            (false, Why::Deadline) => Reason::UnsubscribedWithoutTicket,
            (true, Why::Replaced) => Reason::ClosedAfterReplaced,
            (false, Why::Replaced) => Reason::UnsubscribedAfterReplaced,
        }
    }
}

/// Why a [`DeferredLeave`] goes on (the voided-revocation case logs the answer's reason).
#[derive(Debug, Clone, Copy)]
enum Why {
    Ticket,
    Deadline,
    Replaced,
}

/// What a request in flight was sent with: the gate compares it with the state on return.
#[derive(Debug, Clone)]
pub(crate) enum Sent {
    Join {
        member_id: String,
    },
    Metadata,
    /// The leader's periodic check for metadata changes.
    MetadataRefresh,
    Sync {
        generation: i32,
        member_id: String,
    },
    Heartbeat {
        generation: i32,
        member_id: String,
    },
    Leave,
    Offsets(SentOffsets),
}

/// A static member's joins with an empty member id: each may register a new member id under the
/// instance id and replace whichever one the member holds.
#[derive(Debug, Clone, Copy, Default)]
struct EmptyJoins {
    /// Empty-id joins whose fate is unknown (transport failure): each may still land and replace
    /// this member; counts the self-fences the member forgives.
    in_doubt: u32,
    /// No empty-id join before this instant.
    quarantine: Option<Instant>,
    /// An empty-id join is unanswered: no second one goes out meanwhile.
    in_flight: bool,
}

/// A classic-protocol group member (sans-IO). See [`machine::classic`](crate::machine::classic) for the state diagram and the
/// identity rules, and [`crate::machine`] for the drive contract.
#[derive(Debug)]
pub struct ClassicMember {
    shell: Shell<Sent>,
    assignors: Vec<Arc<dyn Assignor>>,
    /// Eager unless every configured assignor is cooperative (the Java client's rule).
    protocol: RebalanceProtocol,
    phase: Phase,
    topics: BTreeSet<String>,
    member_id: String,
    generation: i32,
    protocol_name: Option<String>,
    leader: bool,
    /// Leader: partition counts its last assignment was computed from (`None`: not the leader).
    assigned_metadata: Option<BTreeMap<String, i32>>,
    metadata_refresh_in_flight: bool,
    owned: BTreeSet<TopicPartition>,
    heartbeat_in_flight: bool,
    heartbeat_failures: u32,
    join_failures: u32,
    /// The member's empty-id joins (see the identity rules).
    empty_join: EmptyJoins,
    /// The coordinator (node id) that answered this member's last successful JoinGroup: the
    /// one that registered its member id.
    registered_by: Option<i32>,
    /// A coordinator whose FENCED_INSTANCE_ID was forgiven since that join (see `fenced`).
    failover_fence_forgiven: Option<i32>,
    /// The coordinator answered NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE since that join:
    /// the group's partition was unloaded, so whichever node leads it now (the registering one
    /// included, after a move away and back) loaded the group from its log.
    unloaded_since_join: bool,
    /// Simulation only: wipe the member id on a suppressed LeaveGroup, as the Java client does.
    #[cfg(feature = "sim")]
    java_reset_policy: bool,
    /// Simulation only: forgive the first FENCED_INSTANCE_ID from a coordinator that took over
    /// (off: the rule before the coordinator-failover issue, that fence is terminal).
    #[cfg(feature = "sim")]
    failover_fence_rule: bool,
    /// Reason a rejoin was requested while stable (for the JoinGroup `Reason`).
    rejoin_reason: Reason,
}

impl ClassicMember {
    /// A member of `config.group_id`, not yet subscribed.
    pub fn new(config: GroupConfig, now: Instant) -> Result<Self, ConfigError> {
        config.validate()?;
        let assignors = config.assignors.clone();
        let protocol = if assignors
            .iter()
            .all(|a| a.protocol() == RebalanceProtocol::Cooperative)
        {
            RebalanceProtocol::Cooperative
        } else {
            RebalanceProtocol::Eager
        };
        let seed = config.jitter_seed()?;
        Ok(Self {
            assignors,
            protocol,
            phase: Phase::Unsubscribed,
            topics: BTreeSet::new(),
            member_id: String::new(),
            generation: -1,
            protocol_name: None,
            leader: false,
            assigned_metadata: None,
            metadata_refresh_in_flight: false,
            owned: BTreeSet::new(),
            heartbeat_in_flight: false,
            heartbeat_failures: 0,
            join_failures: 0,
            empty_join: EmptyJoins::default(),
            registered_by: None,
            failover_fence_forgiven: None,
            unloaded_since_join: false,
            rejoin_reason: Reason::Subscribed,
            #[cfg(feature = "sim")]
            java_reset_policy: false,
            #[cfg(feature = "sim")]
            failover_fence_rule: true,
            shell: Shell::new(config, now, seed),
        })
    }

    // ------------------------------------------------------------------ accessors

    /// The member id (`""` before the coordinator assigned one).
    pub fn member_id(&self) -> &str {
        &self.member_id
    }

    /// The generation the member is in, -1 when none.
    pub fn generation(&self) -> i32 {
        self.generation
    }

    /// Whether the member led the last rebalance it joined.
    pub fn is_leader(&self) -> bool {
        self.leader
    }

    /// The partitions the member owns.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.owned.iter().cloned().collect()
    }

    /// What the member may commit: what it owns, and what it is revoking until the ticket is
    /// back.
    fn committable(&self) -> std::collections::BTreeSet<TopicPartition> {
        let revoking = match &self.phase {
            Phase::AwaitRevoke { revoking, .. } => revoking.as_slice(),
            _ => &[],
        };
        self.owned.iter().chain(revoking).cloned().collect()
    }

    /// Where the member stands.
    pub fn state(&self) -> MemberState {
        self.phase.state()
    }

    /// The coordinator, when known.
    pub fn coordinator(&self) -> Option<&Broker> {
        self.shell.coordinator()
    }

    /// How the close ended, once the member is closed or stopped (`None` while it runs): the
    /// outcome the driver's `close()` returns ([`CloseOutcome`](crate::machine::events::CloseOutcome)).
    pub fn close_outcome(&self) -> Option<crate::machine::events::CloseOutcome> {
        self.shell.close_outcome(self.phase.stopped())
    }

    /// The terminal error, once the member stopped on one.
    pub fn fatal_error(&self) -> Option<&GroupError> {
        self.phase.error()
    }

    /// The protocol: [`GroupProtocol::Classic`].
    pub fn protocol(&self) -> GroupProtocol {
        GroupProtocol::Classic
    }

    /// The configuration.
    pub fn config(&self) -> &GroupConfig {
        &self.shell.config
    }

    /// **Test only** (feature `sim`): behave like the Java client (KAFKA-20985) and wipe the
    /// member id whenever a LeaveGroup is suppressed (a static member's unsubscribe, close or
    /// poll timeout, Java's `resetGenerationOnLeaveGroup`), with no quarantine of an empty-id
    /// JoinGroup in doubt and no forgiveness of the self-fence that follows. A static member with
    /// this policy rejoins with `""` and can be fenced by its own abandoned JoinGroup; it exists
    /// so simulations and tests can show the difference. Off unless set (this crate's policy:
    /// the member id is kept); never for production. See also
    /// [`Member::set_java_reset_policy`](crate::machine::member::Member::set_java_reset_policy)
    /// and `GroupMember::start_member` (the driver).
    #[cfg(feature = "sim")]
    pub fn set_java_reset_policy(&mut self, on: bool) {
        self.java_reset_policy = on;
    }

    /// **Test only** (feature `sim`): whether the Java reset policy is on.
    #[cfg(feature = "sim")]
    pub fn java_reset_policy(&self) -> bool {
        self.java_reset_policy
    }

    /// **Test only** (feature `sim`): whether the first FENCED_INSTANCE_ID from a coordinator
    /// other than the one that registered the member id is forgiven (on by default; see the
    /// identity rules). Off restores the earlier rule, where that fence is terminal, so
    /// simulations can show the self-fence a coordinator failover causes without it. Never for
    /// production.
    #[cfg(feature = "sim")]
    pub fn set_failover_fence_rule(&mut self, on: bool) {
        self.failover_fence_rule = on;
    }

    /// Simulation only: whether the failover fence rule applies (always outside the simulation).
    fn failover_rule(&self) -> bool {
        #[cfg(feature = "sim")]
        {
            self.failover_fence_rule
        }
        #[cfg(not(feature = "sim"))]
        {
            true
        }
    }

    /// Hands out request ids from `offset` on (and lookup ids from `LOOKUP_IDS + offset`): a
    /// member that takes over from another one (the `auto` fallback) must not reuse the ids of
    /// requests the other still has in flight, or their late answers would pass for its own.
    pub(crate) fn offset_request_ids(&mut self, offset: u64) {
        self.shell.offset_request_ids(offset);
    }

    #[cfg(test)]
    pub(crate) fn generation_for_tests(&mut self, generation: i32) {
        self.generation = generation;
    }

    /// Simulation only: the Java client's policy (id wiped on a suppressed leave, no quarantine,
    /// no forgiveness of a self-fence).
    fn java_policy(&self) -> bool {
        #[cfg(feature = "sim")]
        {
            self.java_reset_policy
        }
        #[cfg(not(feature = "sim"))]
        {
            false
        }
    }

    fn is_static(&self) -> bool {
        self.shell.config.instance_id.is_some()
    }

    /// In the group: heartbeats are due.
    fn heartbeating(&self) -> bool {
        self.generation >= 0
            && !self.member_id.is_empty()
            && matches!(
                self.phase,
                Phase::Assigning { .. }
                    | Phase::Syncing { .. }
                    | Phase::Stable
                    | Phase::AwaitRevoke { .. }
                    | Phase::Rejoin { .. }
            )
    }

    // ------------------------------------------------------------------ commands

    /// Subscribes to `topics` (replacing an earlier subscription) and starts joining.
    ///
    /// After an [`unsubscribe`](Self::unsubscribe) whose LeaveGroup still waits for a revocation
    /// ticket, the deferred leave is cancelled: the member stays in its generation and, once the
    /// ticket is back, rejoins with the new topics, as a subscribe during any revocation does
    /// (partitions the unsubscribe released stay released). Once that LeaveGroup went out, the
    /// member rejoins after its answer.
    ///
    /// Errors with [`ApiMisuse::Stopped`] once [`close`](Self::close) was called (also while the
    /// close's LeaveGroup or revocation ticket is still outstanding: the close is not undone) or
    /// the member stopped, and with [`ApiMisuse::EmptySubscription`] without topics.
    pub fn subscribe(
        &mut self,
        topics: impl IntoIterator<Item = String>,
        now: Instant,
    ) -> Result<(), ApiMisuse> {
        let topics = self.subscription(topics, now)?;
        let changed = topics != self.topics;
        self.topics = topics;
        // Not a close (that refused above): an unsubscribe whose LeaveGroup has not gone out.
        // The member never left; the ticket's return rejoins with the new topics.
        if self.take_deferred_leave().is_some() {
            tracing::info!(group = %self.shell.config.group_id, "subscribed again while an unsubscribe waited for the revocation ticket; staying in the group");
        }
        // Also replaces the deadline of that unsubscribe.
        self.shell.timers.set(
            Timer::PollInterval,
            crate::machine::timer::after(now, self.shell.config.max_poll_interval),
        );
        match self.phase {
            Phase::Unsubscribed | Phase::PollExpired => self.request_rejoin(Reason::Subscribed),
            Phase::Stable if changed => self.request_rejoin(Reason::SubscriptionChanged),
            // A rebalance under way picks the new topics up at its next JoinGroup; a LeaveGroup in
            // flight rejoins when it is answered.
            _ => {}
        }
        Ok(())
    }

    /// Leaves the subscription. The application releases its partitions ([`Event::Revoked`]);
    /// a dynamic member sends LeaveGroup, a static one does not and keeps its member id.
    ///
    /// While a revocation ticket is out, the leave waits for it as [`close`](Self::close)'s
    /// does: what is not under the ticket is released at once, the member stays in its
    /// generation (heartbeats, commits), and the LeaveGroup goes out once the ticket is back,
    /// `max.poll.interval.ms` after the unsubscribe without it, or when an answer voids the
    /// revocation. A [`subscribe`](Self::subscribe) before then cancels it; a `close` takes it
    /// over (same deadline).
    ///
    /// Does nothing once [`close`](Self::close) was called: the close goes on as asked.
    pub fn unsubscribe(&mut self, now: Instant) {
        self.shell.advance(now);
        if self.closing() || matches!(self.phase, Phase::Unsubscribed) {
            return;
        }
        self.topics.clear();
        self.release_owned();
        if self.defer_leave(CloseOptions::Default, false) {
            return;
        }
        self.shell.timers.stop(Timer::PollInterval);
        self.leave(CloseOptions::Default, false, Reason::Unsubscribed);
    }

    /// In `AwaitRevoke`: records a close (`then_close`) or unsubscribe whose leave waits for
    /// the ticket and returns true. A second call only changes how the member leaves, not when:
    /// the deadline is `max.poll.interval.ms` after the first (the rebalance timeout: a
    /// coordinator waiting for this member's JoinGroup drops it after that anyway).
    fn defer_leave(&mut self, options: CloseOptions, then_close: bool) -> bool {
        let Phase::AwaitRevoke { leave, .. } = &mut self.phase else {
            return false;
        };
        let first = leave
            .replace(DeferredLeave {
                options,
                then_close,
            })
            .is_none();
        if first {
            self.shell.timers.set(
                Timer::PollInterval,
                crate::machine::timer::after(self.shell.now, self.shell.config.max_poll_interval),
            );
        }
        true
    }

    /// Takes the close or unsubscribe waiting for the revocation ticket, if any.
    fn take_deferred_leave(&mut self) -> Option<DeferredLeave> {
        match &mut self.phase {
            Phase::AwaitRevoke { leave, .. } => leave.take(),
            _ => None,
        }
    }

    /// Records that the application is alive (its poll loop ran). Missing `max.poll.interval.ms`
    /// makes the member leave as the Java client does on poll timeout (a static member keeps its id
    /// and sends nothing); the next poll rejoins.
    pub fn poll(&mut self, now: Instant) {
        self.shell.advance(now);
        self.check_lease();
        if self.polled(now, !self.topics.is_empty()) && matches!(self.phase, Phase::PollExpired) {
            self.request_rejoin(Reason::PolledAfterPollTimeout);
        }
    }

    /// Hands back the ticket of an [`Event::Revoking`]: the application committed and stopped
    /// using those partitions. The member then rejoins — or, when [`close`](Self::close) or
    /// [`unsubscribe`](Self::unsubscribe) was called meanwhile, leaves as it waited to (the
    /// LeaveGroup when due) and closes or ends unsubscribed.
    ///
    /// Errors with [`ApiMisuse::UnknownTicket`] when the ticket is not the one awaited (the
    /// member has since lost the partitions, or the ticket is stale).
    pub fn complete_revocation(
        &mut self,
        ticket: RevokeTicket,
        now: Instant,
    ) -> Result<(), ApiMisuse> {
        self.shell.advance(now);
        match self.phase {
            Phase::AwaitRevoke { ticket: t, .. } if t == ticket.id => {
                if let Some(d) = self.take_deferred_leave() {
                    self.leave(d.options, d.then_close, d.reason(Why::Ticket));
                    return Ok(());
                }
                self.set_phase(
                    Phase::Rejoin { not_before: None },
                    Reason::RevocationCompleted,
                );
                Ok(())
            }
            _ => Err(ApiMisuse::UnknownTicket),
        }
    }

    /// Commits `offsets` with the member's generation, member id and instance id. The outcome
    /// arrives as [`Event::Committed`]; during a rebalance it is [`CommitError::RebalanceInProgress`]
    /// at once, outside the group [`CommitError::NotMember`].
    pub fn commit(&mut self, offsets: Vec<CommitOffset>, now: Instant) -> CommitId {
        self.queue_commit(offsets, now, Self::commit_refusal)
    }

    /// Why a commit cannot go out now, if it cannot.
    fn commit_refusal(&self) -> Option<CommitError> {
        match &self.phase {
            Phase::Closed | Phase::Fatal(_) => self.phase.stop_error(),
            // The Java client commits only with a stable generation (generationIfStable); while
            // revoking the member still holds its generation, so commits go through.
            Phase::Stable | Phase::AwaitRevoke { .. } if self.generation >= 0 => None,
            Phase::Rejoin { .. }
            | Phase::Joining { .. }
            | Phase::Assigning { .. }
            | Phase::Syncing { .. } => Some(CommitError::RebalanceInProgress),
            _ => Some(CommitError::NotMember {
                reason: "the member has no generation".into(),
            }),
        }
    }

    /// Fetches the committed offsets of `partitions` (RequireStable, so pending transactional
    /// offsets are waited for). The outcome arrives as [`Event::OffsetsFetched`].
    pub fn fetch_offsets(&mut self, partitions: Vec<TopicPartition>, now: Instant) -> FetchId {
        self.queue_fetch(partitions, now)
    }

    /// Closes the member. Owned partitions are released ([`Event::Revoked`]); a LeaveGroup is
    /// sent when `options` ask for it (see [`CloseOptions`]); then [`Event::Closed`].
    ///
    /// A revocation ticket still out ([`Event::Revoking`] not yet handed back, or not even read)
    /// is taken back: the close leaves at once, so the group's rebalance does not wait for a
    /// ticket the application may never see. Commit what was processed before closing.
    /// ([`unsubscribe`](Self::unsubscribe) waits for the ticket instead, bounded by
    /// `max.poll.interval.ms`.) The consumer and streams members close the same way.
    pub fn close(&mut self, options: CloseOptions, now: Instant) {
        if !self.begin_close(now) {
            return;
        }
        self.topics.clear();
        if let Phase::Leaving { then_close, .. } = &mut self.phase {
            // A LeaveGroup is already out: close when it is answered.
            self.shell.timers.stop(Timer::PollInterval);
            *then_close = true;
            return;
        }
        // A close takes an outstanding revocation ticket back (the application commits what it
        // processed before it closes): waiting for it would hold the group's rebalance, and the
        // close, until max.poll.interval.ms whenever the Revoking event is still unread.
        // The partitions being revoked are released with the rest (Event::Revoked), so an
        // application that reads the Revoking event late still learns they are gone.
        if let Phase::AwaitRevoke {
            leave, revoking, ..
        } = &mut self.phase
        {
            leave.take();
            self.owned.extend(std::mem::take(revoking));
            tracing::info!(group = %self.shell.config.group_id, "close takes the revocation ticket back");
        }
        self.release_owned();
        self.shell.timers.stop(Timer::PollInterval);
        self.leave(options, true, Reason::Closed);
    }

    // ------------------------------------------------------------------ outputs

    /// The next request to send. Drain until `None` after every input.
    pub fn poll_request(&mut self) -> Option<Outbound> {
        if let Some(out) = self.shell.outbound.pop_front() {
            return Some(out);
        }
        // The coordinator is looked up only when something needs it.
        let needed = !self.stopped()
            && (!matches!(self.phase, Phase::Unsubscribed) || !self.shell.offsets.is_empty());
        if needed && let Some(out) = self.shell.lookup.poll_request() {
            return Some(out);
        }
        let coordinator = self.coordinator()?.clone();
        if self.stopped() || matches!(self.phase, Phase::Leaving { .. }) {
            return None;
        }
        if let Some(out) = self.build_offsets(&coordinator) {
            return Some(out);
        }
        if let Phase::Rejoin { not_before, .. } = self.phase {
            let empty_static = self.member_id.is_empty() && self.is_static() && !self.java_policy();
            let quarantine = if empty_static {
                self.empty_join.quarantine.filter(|q| *q > self.shell.now)
            } else {
                None
            };
            if empty_static && self.empty_join.in_flight {
                // An earlier empty-id join is still unanswered: a second one could be read after
                // it and replace it (or be replaced). Its answer wakes the member.
            } else {
                match not_before.filter(|t| *t > self.shell.now).or(quarantine) {
                    Some(at) => self.shell.timers.set(Timer::Rejoin, at),
                    None => return Some(self.build_join(&coordinator)),
                }
            }
        }
        if self.metadata_refresh_due_when_expired()
            && self
                .shell
                .timers
                .get(Timer::MetadataRefresh)
                .is_some_and(|at| at <= self.shell.now)
            && let Some(out) = self.build_metadata_refresh()
        {
            return Some(out);
        }
        if self.heartbeating() && !self.heartbeat_in_flight {
            match self.shell.timers.get(Timer::Heartbeat) {
                Some(at) if at > self.shell.now => {}
                _ => return Some(self.build_heartbeat(&coordinator)),
            }
        }
        None
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.next_event()
    }

    /// The earliest deadline and its timer.
    pub fn poll_timeout(&self) -> Option<(Instant, Timer)> {
        self.shell.poll_timeout(|t| match t {
            Timer::Heartbeat => self.heartbeating() && !self.heartbeat_in_flight,
            Timer::Session => self.heartbeating(),
            Timer::Rejoin => matches!(self.phase, Phase::Rejoin { .. }),
            // Exactly when `poll_request` acts on it (a deadline nobody acts on makes a driver
            // spin).
            Timer::MetadataRefresh => self.metadata_refresh_due_when_expired(),
            _ => true,
        })
    }

    // ------------------------------------------------------------------ inputs

    /// Advances the clock to `now` and fires due timers. Early or repeated calls are harmless.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.shell.tick(now);
        self.check_lease();
        if self.shell.expired(Timer::Session) && self.heartbeating() {
            // No heartbeat answered within the session timeout: the coordinator is treated as
            // unknown (Heartbeat.sessionTimeoutExpired -> markCoordinatorUnknown); the member
            // keeps id and generation and finds out at the next answer whether it is still in.
            tracing::info!(group = %self.shell.config.group_id, "no heartbeat answered within session.timeout.ms; looking up the coordinator again");
            self.shell.lookup.rediscover(&self.shell.config.group_id);
            self.shell.timers.set(
                Timer::Session,
                crate::machine::timer::after(self.shell.now, self.shell.config.session_timeout),
            );
        }
        let poll_expired = self.shell.expired(Timer::PollInterval);
        if poll_expired && let Some(d) = self.take_deferred_leave() {
            // A close or unsubscribe that waited for a ticket the application never handed
            // back goes on.
            tracing::warn!(group = %self.shell.config.group_id, close = d.then_close, "revocation ticket not handed back within max.poll.interval.ms after close/unsubscribe; leaving");
            self.lose_owned(Reason::RevocationTicketNotHandedBack);
            self.leave(d.options, d.then_close, d.reason(Why::Deadline));
        } else if poll_expired
            && !self.topics.is_empty()
            && !matches!(self.phase, Phase::PollExpired | Phase::Unsubscribed)
            && !self.stopped()
        {
            tracing::warn!(group = %self.shell.config.group_id, "application did not poll within max.poll.interval.ms; leaving the group");
            self.lose_owned(Reason::PollTimeout);
            self.leave(CloseOptions::Default, false, Reason::PollTimeout);
            if !matches!(self.phase, Phase::Leaving { .. }) {
                self.set_phase(Phase::PollExpired, Reason::PollTimeout);
            }
        }
    }

    /// Feeds the outcome of a request this member emitted.
    pub fn handle_response(&mut self, id: RequestId, result: Reply, now: Instant) {
        let Some((sent, result)) = self.shell.route(id, result, now) else {
            return;
        };
        // A lease that ran out while the answer was on its way is lost first: the answer was
        // sent before it ran out and cannot vouch for the membership now.
        self.check_lease();
        match sent {
            Sent::Join { member_id } => self.on_join(id, member_id, result),
            Sent::Metadata => self.on_metadata(id, result),
            Sent::MetadataRefresh => self.on_metadata_refresh(result),
            Sent::Sync {
                generation,
                member_id,
            } => self.on_sync(id, generation, member_id, result),
            Sent::Heartbeat {
                generation,
                member_id,
            } => self.on_heartbeat(generation, member_id, result),
            Sent::Leave => self.on_leave(id, result),
            Sent::Offsets(sent) => self.on_offsets(sent, result),
        }
    }

    // ------------------------------------------------------------------ transitions

    /// Asks for a (re)join. Eager: every owned partition is revoked first (with a ticket);
    /// cooperative: only partitions of topics no longer subscribed.
    fn request_rejoin(&mut self, reason: Reason) {
        self.rejoin_reason = reason;
        let revoke: Vec<TopicPartition> = match self.protocol {
            RebalanceProtocol::Eager => self.owned.iter().cloned().collect(),
            RebalanceProtocol::Cooperative => self
                .owned
                .iter()
                .filter(|tp| !self.topics.contains(tp.topic()))
                .cloned()
                .collect(),
        };
        if revoke.is_empty() {
            self.set_phase(Phase::Rejoin { not_before: None }, reason);
        } else {
            self.revoke(revoke, reason);
        }
    }

    /// Gives up `partitions` with a ticket, then rejoins once it is handed back.
    fn revoke(&mut self, partitions: Vec<TopicPartition>, reason: Reason) {
        for tp in &partitions {
            self.owned.remove(tp);
        }
        let ticket = self.shell.next_ticket();
        self.shell.events.push_back(Event::Revoking {
            partitions: partitions.clone(),
            ticket: RevokeTicket { id: ticket },
        });
        self.set_phase(
            Phase::AwaitRevoke {
                ticket,
                leave: None,
                revoking: partitions,
            },
            reason,
        );
    }

    fn rejoin_after_backoff(&mut self, reason: Reason) {
        let delay = self.shell.backoff(&mut self.join_failures);
        self.set_phase(
            Phase::Rejoin {
                not_before: Some(crate::machine::timer::after(self.shell.now, delay)),
            },
            reason,
        );
    }

    /// Forgets the generation; keeps the member id.
    fn reset_generation(&mut self) {
        self.shell.end_lease();
        self.generation = -1;
        self.protocol_name = None;
        self.leader = false;
        self.assigned_metadata = None;
        // The leader's metadata watch ends with its generation; a later leadership arms its own.
        self.shell.timers.stop(Timer::MetadataRefresh);
        self.heartbeat_failures = 0;
    }

    /// Forgets member id and generation. Only for UNKNOWN_MEMBER_ID answering the current
    /// generation, and after a LeaveGroup really went out.
    fn reset_member_id(&mut self) {
        self.reset_generation();
        self.member_id.clear();
    }

    /// `maybeLeaveGroup`, with this crate's identity rule: a LeaveGroup goes out when the
    /// member is in the group and `options` ask for it (static: only `LeaveGroup`; dynamic:
    /// `Default` or `LeaveGroup`). Without one, the member id is kept.
    fn leave(&mut self, options: CloseOptions, then_close: bool, reason: Reason) {
        let send = self.coordinator().is_some()
            && !self.member_id.is_empty()
            && !matches!(self.phase, Phase::Unsubscribed | Phase::PollExpired)
            && match options {
                CloseOptions::LeaveGroup => true,
                CloseOptions::Default => !self.is_static(),
                CloseOptions::RemainInGroup => false,
            };
        if send {
            let coordinator = self.coordinator().expect("checked").clone();
            let member = MemberIdentity::default()
                .with_member_id(StrBytes::from_string(self.member_id.clone()))
                .with_group_instance_id(
                    self.shell
                        .config
                        .instance_id
                        .clone()
                        .map(StrBytes::from_string),
                )
                .with_reason(Some(StrBytes::from_static_str(reason.as_str())));
            let body = LeaveGroupRequest::default()
                .with_group_id(self.shell.group_id())
                .with_members(vec![member]);
            let request = self.push(
                &coordinator,
                RequestKind::LeaveGroup(body),
                (LEAVE_VERSIONS, Some(Fit(fit))),
                Sent::Leave,
                self.shell.config.request_timeout,
            );
            self.set_phase(
                Phase::Leaving {
                    request,
                    then_close,
                },
                reason,
            );
        } else {
            // No LeaveGroup: keep the member id (KAFKA-20985); only the generation goes.
            #[cfg(feature = "sim")]
            if self.java_reset_policy {
                // What the Java client does (resetGenerationOnLeaveGroup): for simulations that
                // show why this crate does not.
                self.member_id.clear();
            }
            self.reset_generation();
            self.finish_leave(then_close, reason);
        }
    }

    fn finish_leave(&mut self, then_close: bool, reason: Reason) {
        if then_close {
            self.shell.fail_offsets(CommitError::Closed);
            self.set_phase(Phase::Closed, reason);
            self.shell.events.push_back(Event::Closed);
        } else if !self.topics.is_empty() {
            self.request_rejoin(Reason::Resubscribed);
        } else {
            self.set_phase(Phase::Unsubscribed, reason);
        }
    }

    // ------------------------------------------------------------------ requests

    fn instance_id(&self) -> Option<StrBytes> {
        self.shell
            .config
            .instance_id
            .clone()
            .map(StrBytes::from_string)
    }

    fn push(
        &mut self,
        coordinator: &Broker,
        body: RequestKind,
        versions: (std::ops::RangeInclusive<i16>, Option<Fit>),
        sent: Sent,
        timeout: Duration,
    ) -> RequestId {
        self.shell
            .send_to_coordinator(coordinator, body, versions, sent, timeout)
    }

    fn take(&mut self) -> Outbound {
        self.shell
            .outbound
            .pop_front()
            .expect("a request was just pushed")
    }

    fn subscription_bytes(&self) -> Bytes {
        Subscription {
            topics: self.topics.iter().cloned().collect(),
            user_data: None,
            owned_partitions: self.owned.iter().cloned().collect(),
            generation_id: self.generation,
            rack_id: self.shell.config.rack_id.clone(),
        }
        .encode()
    }

    fn build_join(&mut self, coordinator: &Broker) -> Outbound {
        let metadata = self.subscription_bytes();
        let protocols = self
            .assignors
            .iter()
            .map(|a| {
                JoinGroupRequestProtocol::default()
                    .with_name(StrBytes::from_string(a.name().to_owned()))
                    .with_metadata(metadata.clone())
            })
            .collect();
        let reason: String = self.rejoin_reason.as_str().chars().take(255).collect();
        let body = JoinGroupRequest::default()
            .with_group_id(self.shell.group_id())
            .with_session_timeout_ms(millis(self.shell.config.session_timeout))
            .with_rebalance_timeout_ms(millis(self.shell.config.max_poll_interval))
            .with_member_id(StrBytes::from_string(self.member_id.clone()))
            .with_group_instance_id(self.instance_id())
            .with_protocol_type(StrBytes::from_static_str(PROTOCOL_TYPE))
            .with_protocols(protocols)
            .with_reason(Some(StrBytes::from_string(reason)));
        // The broker may park a JoinGroup for the whole rebalance timeout
        // (AbstractCoordinator: max(request.timeout.ms, rebalanceTimeout + 5 s)).
        let timeout = self.shell.config.request_timeout.max(
            self.shell
                .config
                .max_poll_interval
                .saturating_add(Duration::from_secs(5)),
        );
        let sent = Sent::Join {
            member_id: self.member_id.clone(),
        };
        if self.member_id.is_empty() && self.is_static() {
            self.empty_join.in_flight = true;
        }
        let request = self.push(
            coordinator,
            RequestKind::JoinGroup(body),
            (JOIN_VERSIONS, Some(Fit(fit))),
            sent,
            timeout,
        );
        self.set_phase(Phase::Joining { request }, Reason::SendingJoinGroup);
        self.take()
    }

    fn build_heartbeat(&mut self, coordinator: &Broker) -> Outbound {
        let body = HeartbeatRequest::default()
            .with_group_id(self.shell.group_id())
            .with_generation_id(self.generation)
            .with_member_id(StrBytes::from_string(self.member_id.clone()))
            .with_group_instance_id(self.instance_id());
        let sent = Sent::Heartbeat {
            generation: self.generation,
            member_id: self.member_id.clone(),
        };
        self.heartbeat_in_flight = true;
        self.shell.timers.set(
            Timer::Heartbeat,
            crate::machine::timer::after(self.shell.now, self.shell.config.heartbeat_interval),
        );
        self.push(
            coordinator,
            RequestKind::Heartbeat(body),
            (HEARTBEAT_VERSIONS, None),
            sent,
            self.shell.config.request_timeout,
        );
        self.take()
    }

    fn build_sync(&mut self, coordinator: &Broker, assignments: Vec<SyncGroupRequestAssignment>) {
        let body = SyncGroupRequest::default()
            .with_group_id(self.shell.group_id())
            .with_generation_id(self.generation)
            .with_member_id(StrBytes::from_string(self.member_id.clone()))
            .with_group_instance_id(self.instance_id())
            .with_protocol_type(Some(StrBytes::from_static_str(PROTOCOL_TYPE)))
            .with_protocol_name(self.protocol_name.clone().map(StrBytes::from_string))
            .with_assignments(assignments);
        let sent = Sent::Sync {
            generation: self.generation,
            member_id: self.member_id.clone(),
        };
        let request = self.push(
            coordinator,
            RequestKind::SyncGroup(body),
            (SYNC_VERSIONS, Some(Fit(fit))),
            sent,
            self.shell.config.request_timeout,
        );
        self.set_phase(Phase::Syncing { request }, Reason::SendingSyncGroup);
    }

    /// The next queued commit or fetch, fenced by the member's generation.
    fn build_offsets(&mut self, coordinator: &Broker) -> Option<Outbound> {
        if self.shell.offsets.is_empty() {
            return None;
        }
        let (fence, refusal) = (self.fence(), self.commit_refusal());
        let (owned, now) = (self.owned_partitions(), self.shell.now);
        let shell = &mut self.shell;
        let (body, versions, sent) =
            (shell.offsets).next(&fence, (refusal, &owned), now, &mut shell.events)?;
        let timeout = self.shell.config.request_timeout;
        self.push(coordinator, body, versions, Sent::Offsets(sent), timeout);
        Some(self.take())
    }

    /// Who the member is, for its commits and fetches.
    fn fence(&self) -> Fence {
        Fence {
            protocol: Protocol::Classic,
            group: self.shell.config.group_id.clone(),
            member_id: self.member_id.clone(),
            generation: self.generation,
            instance_id: self.shell.config.instance_id.clone(),
            member: false,
            rebalancing: matches!(
                self.phase,
                Phase::Rejoin { .. }
                    | Phase::Joining { .. }
                    | Phase::Assigning { .. }
                    | Phase::Syncing { .. }
            ),
            commit_versions: COMMIT_VERSIONS,
            fetch_versions: FETCH_VERSIONS,
        }
    }

    // ------------------------------------------------------------------ answers

    fn on_join(
        &mut self,
        id: RequestId,
        sent_member_id: String,
        result: Result<Response, TransportError>,
    ) {
        let waiting = matches!(self.phase, Phase::Joining { request } if request == id);
        let empty_static = sent_member_id.is_empty() && self.is_static();
        if empty_static {
            self.empty_join.in_flight = false;
        }
        let r = match result {
            Ok(Response {
                body: ResponseBody::Kafka(ResponseKind::JoinGroup(r)),
                ..
            }) => r,
            Ok(_) => {
                return self.fail(invalid(
                    ApiKey::JoinGroup,
                    "the answer is not a JoinGroup response",
                ));
            }
            Err(e) => {
                if empty_static && !self.java_policy() && !e.never_sent() {
                    // Its fate is unknown: it may still land and register a member for our
                    // instance id. Hold further empty-id joins until it cannot be parked any more.
                    // (A join that never left, e.g. its coordinator refused the connection, is
                    // not in doubt: quarantining it would stall a restart for the rebalance
                    // timeout while the coordinator fails over.)
                    self.empty_join.in_doubt += 1;
                    let quarantine = self.shell.config.request_timeout.max(
                        self.shell
                            .config
                            .max_poll_interval
                            .saturating_add(Duration::from_secs(5)),
                    );
                    self.empty_join.quarantine =
                        Some(crate::machine::timer::after(self.shell.now, quarantine));
                }
                if waiting {
                    tracing::info!(error = %e, "JoinGroup failed in the transport");
                    self.shell.coordinator_failed();
                    self.rejoin_after_backoff(Reason::JoinGroupTransportFailure);
                }
                return;
            }
        };
        if !waiting {
            if r.error_code == codes::NONE
                && !self.member_id.is_empty()
                && r.member_id.as_str() == self.member_id
            {
                // A late success for the member id it holds (e.g. a join answered after an
                // unsubscribe): the coordinator that answered registered that id after anything
                // it unloaded, so a later FENCED_INSTANCE_ID from it is not the stale
                // registration of a failover (see `fenced`).
                self.registered(self.shell.answered_by);
            }
            tracing::debug!(%id, code = r.error_code, "ignoring a stale JoinGroup answer");
            return;
        }
        if empty_static {
            // Answered: this empty-id join is no longer in doubt.
            self.empty_join.quarantine = None;
        }
        match classify(ApiKey::JoinGroup, r.error_code, &self.shell.config.group_id) {
            ErrorAction::Proceed => self.joined(r),
            ErrorAction::AdoptMemberId => {
                // KIP-394: the broker names the member; join again at once with that id.
                self.member_id = r.member_id.to_string();
                self.set_phase(Phase::Rejoin { not_before: None }, Reason::MemberIdRequired);
            }
            ErrorAction::ResetMemberId => {
                self.lose_owned(Reason::UnknownMemberId);
                self.reset_member_id();
                self.set_phase(Phase::Rejoin { not_before: None }, Reason::UnknownMemberId);
            }
            ErrorAction::ResetGeneration => {
                self.lose_owned(Reason::IllegalGeneration);
                self.reset_generation();
                self.set_phase(
                    Phase::Rejoin { not_before: None },
                    Reason::IllegalGeneration,
                );
            }
            ErrorAction::RejoinNow => self.set_phase(
                Phase::Rejoin { not_before: None },
                Reason::RebalanceInProgress,
            ),
            ErrorAction::Rediscover => {
                self.coordinator_unloaded();
                self.rejoin_after_backoff(Reason::CoordinatorMoved);
            }
            ErrorAction::RetryBackoff => self.rejoin_after_backoff(Reason::RetriableJoinGroupError),
            ErrorAction::Fenced => self.fenced(),
            ErrorAction::Fatal(e) => self.fail(e),
            // Consumer-protocol actions never come out of `classify` for JoinGroup.
            _ => self.fail(GroupError::Fatal {
                api: ApiKey::JoinGroup.into(),
                code: r.error_code,
            }),
        }
    }

    /// FENCED_INSTANCE_ID for the current generation: terminal, unless
    /// - an empty-id join of this very member may have landed late and replaced it; then rejoin
    ///   with `""` (bounded by the number of such joins); or
    /// - it is the first one from a coordinator other than the one that registered this member
    ///   id (the coordinator moved since the member's last successful join), or from the
    ///   registering one after it answered NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE since
    ///   that join (it gave the group up and loaded it again from its log). A static
    ///   replacement made while the group rebalances writes no record
    ///   (`GroupMetadataManager.updateStaticMemberThenRebalanceOrCompleteJoin` outside Stable,
    ///   and `completeClassicGroupJoin` writes none for a non-empty group), so a coordinator that
    ///   takes over before the next record loads the older record, which maps the instance id to
    ///   the previous process's member id, and fences the live member. Rejoining with `""` and
    ///   the instance id replaces that stale registration. A second FENCED_INSTANCE_ID from the
    ///   same coordinator is terminal, so a genuine duplicate (another live process with the
    ///   instance id) still ends fenced.
    fn fenced(&mut self) {
        let by = self.shell.answered_by;
        let moved = self.registered_by.is_some()
            && by.is_some()
            && (by != self.registered_by || self.unloaded_since_join);
        if moved
            && self.failover_fence_forgiven != by
            && self.is_static()
            && !self.java_policy()
            && self.failover_rule()
        {
            self.failover_fence_forgiven = by;
            tracing::warn!(group = %self.shell.config.group_id, coordinator = ?by, registered_by = ?self.registered_by, "FENCED_INSTANCE_ID from a coordinator that did not register this member id (it loaded an older registration after a failover); rejoining with the instance id");
            return self.replaced(Reason::FencedByOlderRegistration);
        }
        if self.empty_join.in_doubt > 0 && !self.java_policy() {
            self.empty_join.in_doubt -= 1;
            tracing::warn!(group = %self.shell.config.group_id, "FENCED_INSTANCE_ID after an earlier JoinGroup of this member may have landed late; rejoining");
            return self.replaced(Reason::ReplacedByOwnJoin);
        }
        let instance_id = self.shell.config.instance_id.clone().unwrap_or_default();
        self.fail(GroupError::FencedInstanceId {
            group: self.shell.config.group_id.clone(),
            instance_id,
        });
    }

    /// The coordinator answered NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE: it gave the
    /// group's partition up (`CoordinatorRuntime.unload`), or has none loaded yet; look it up
    /// again, and remember that the next leader loads the group from its log.
    fn coordinator_unloaded(&mut self) {
        self.unloaded_since_join = true;
        self.shell.coordinator_failed();
    }

    /// Coordinator `by` answered a JoinGroup with the member id this member holds: it is the one
    /// whose registration is current.
    fn registered(&mut self, by: Option<i32>) {
        self.registered_by = by;
        self.failover_fence_forgiven = None;
        self.unloaded_since_join = false;
    }

    /// A forgiven FENCED_INSTANCE_ID: what the member owned is lost, and it rejoins with `""`
    /// and its instance id (or goes on with a close or unsubscribe that waited for a revocation
    /// this voids). A member already leaving (its LeaveGroup in flight, e.g. when a commit sent
    /// before the close is answered so) stays on its way out: the LeaveGroup's answer ends it.
    fn replaced(&mut self, reason: Reason) {
        self.lose_owned(reason);
        self.reset_member_id();
        self.empty_join.quarantine = None;
        if let Some(d) = self.take_deferred_leave() {
            // The revocation the close or unsubscribe waited for is void; nothing is left
            // to leave.
            return self.leave(d.options, d.then_close, d.reason(Why::Replaced));
        }
        self.interrupt_for_rejoin(Reason::SelfFenced);
    }

    fn joined(&mut self, r: JoinGroupResponse) {
        if r.protocol_type
            .as_deref()
            .is_some_and(|t| t != PROTOCOL_TYPE)
        {
            return self.fail(GroupError::Fatal {
                api: ApiKey::JoinGroup.into(),
                code: codes::INCONSISTENT_GROUP_PROTOCOL,
            });
        }
        let Some(protocol) = r.protocol_name.as_ref().map(|p| p.to_string()) else {
            return self.fail(invalid(
                ApiKey::JoinGroup,
                "no protocol name in a successful JoinGroup",
            ));
        };
        if !self.assignors.iter().any(|a| a.name() == protocol) {
            return self.fail(invalid(
                ApiKey::JoinGroup,
                &format!("the group chose assignor {protocol:?}, which this member did not offer"),
            ));
        }
        if r.generation_id < 0 || r.member_id.is_empty() {
            return self.fail(invalid(
                ApiKey::JoinGroup,
                "successful JoinGroup without generation or member id",
            ));
        }
        self.join_failures = 0;
        // This coordinator registered the member id now; a later move may be forgiven again.
        self.registered(self.shell.answered_by);
        if self.generation >= 0 && i64::from(r.generation_id) > i64::from(self.generation) + 1 {
            // Generations went by without this member: one of their assignments may have given
            // what it still owns to another member (a static member that did not rejoin stays
            // in the group with its old subscription, which claims nothing it took since:
            // completeClassicGroupJoin removes only dynamic members that did not rejoin).
            self.lose_owned(Reason::MissedGenerations);
        }
        self.member_id = r.member_id.to_string();
        self.generation = r.generation_id;
        self.protocol_name = Some(protocol.clone());
        self.confirm_membership();
        self.shell.timers.set(
            Timer::Session,
            crate::machine::timer::after(self.shell.now, self.shell.config.session_timeout),
        );
        self.shell.timers.set(
            Timer::Heartbeat,
            crate::machine::timer::after(self.shell.now, self.shell.config.heartbeat_interval),
        );
        let Some(coordinator) = self.coordinator().cloned() else {
            return self.rejoin_after_backoff(Reason::CoordinatorLost);
        };
        let leader = r.leader == r.member_id;
        self.leader = leader;
        // KIP-814: a returning static leader keeps its assignment; it sends an empty one.
        if !leader || r.skip_assignment {
            return self.build_sync(&coordinator, Vec::new());
        }
        // Metadata any member wrote: one that does not decode, names a topic Kafka cannot have
        // or a negative partition is ignored (logged): that member counts as subscribing to
        // nothing and owning nothing, so it gets an empty assignment and the others are assigned
        // as if it had no subscription. What a valid one decodes to is in proportion to its
        // bytes (`Subscription::decode`).
        let members: Arc<[MemberMetadata]> = r
            .members
            .iter()
            .map(|m| {
                let subscription = Subscription::decode(&m.metadata).unwrap_or_else(|e| {
                    tracing::warn!(member = %m.member_id, error = %e, "invalid subscription ignored; the member gets nothing");
                    Subscription::default()
                });
                MemberMetadata {
                    member_id: m.member_id.to_string(),
                    instance_id: m.group_instance_id.as_ref().map(|s| s.to_string()),
                    subscription,
                }
            })
            .collect();
        let topics: BTreeSet<String> = members
            .iter()
            .flat_map(|m| m.subscription.topics.iter().cloned())
            .collect();
        let id = self
            .shell
            .send_metadata(Some(topics.into_iter().collect()), Sent::Metadata);
        self.set_phase(
            Phase::Assigning {
                request: id,
                members,
                protocol,
            },
            Reason::LeaderAssigning,
        );
    }

    fn on_metadata(&mut self, id: RequestId, result: Result<Response, TransportError>) {
        let (members, protocol) = match &self.phase {
            Phase::Assigning {
                request,
                members,
                protocol,
            } if *request == id => (Arc::clone(members), protocol.clone()),
            _ => return,
        };
        let metadata = match result
            .map_err(|e| e.to_string())
            .and_then(|r| ClusterMetadata::from_response(&r).map_err(|e| e.to_string()))
        {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "leader could not read metadata; rejoining");
                return self.rejoin_after_backoff(Reason::LeaderMetadataFailed);
            }
        };
        // Topics that do not exist (yet) get no partitions; members subscribed only to them get
        // an empty assignment, as in the Java client.
        let partitions: BTreeMap<String, i32> = metadata
            .topics
            .iter()
            .filter(|(_, t)| t.error_code == codes::NONE)
            .map(|(n, t)| (n.clone(), t.partitions.len() as i32))
            .collect();
        let assignor = self
            .assignors
            .iter()
            .find(|a| a.name() == protocol)
            .expect("checked at join")
            .clone();
        let plan = assignor.assign(&partitions, &members);
        // The leader watches these topics: a topic created or grown later triggers a rebalance
        // (ConsumerCoordinator: assignmentSnapshot vs metadataSnapshot).
        let mut watched: BTreeMap<String, i32> = members
            .iter()
            .flat_map(|m| m.subscription.topics.iter().map(|t| (t.clone(), 0)))
            .collect();
        watched.extend(partitions.iter().map(|(t, n)| (t.clone(), *n)));
        self.arm_metadata_refresh(&watched);
        self.assigned_metadata = Some(watched);
        let assignments = members
            .iter()
            .map(|m| {
                let partitions = plan.get(&m.member_id).cloned().unwrap_or_default();
                SyncGroupRequestAssignment::default()
                    .with_member_id(StrBytes::from_string(m.member_id.clone()))
                    .with_assignment(
                        Assignment {
                            partitions,
                            user_data: None,
                        }
                        .encode(),
                    )
            })
            .collect();
        let Some(coordinator) = self.coordinator().cloned() else {
            return self.rejoin_after_backoff(Reason::CoordinatorLost);
        };
        self.build_sync(&coordinator, assignments);
    }

    /// Leader: check metadata again soon when a watched topic had no partitions, else after
    /// `metadata.max.age.ms`.
    fn arm_metadata_refresh(&mut self, watched: &BTreeMap<String, i32>) {
        let after = if watched.values().any(|n| *n == 0) {
            self.shell.config.retry_backoff_max
        } else {
            self.shell.config.metadata_max_age
        };
        self.shell.timers.set(
            Timer::MetadataRefresh,
            crate::machine::timer::after(self.shell.now, after),
        );
    }

    /// Leader: whether `poll_request` sends the metadata re-check once its timer expired. The
    /// same condition gates the timer in `poll_timeout`.
    fn metadata_refresh_due_when_expired(&self) -> bool {
        matches!(self.phase, Phase::Stable)
            && self.leader
            && !self.metadata_refresh_in_flight
            && self.assigned_metadata.is_some()
            && self.coordinator().is_some()
    }

    fn build_metadata_refresh(&mut self) -> Option<Outbound> {
        let Some(watched) = self.assigned_metadata.as_ref() else {
            // Nothing to watch (a KIP-814 leader that skipped the assignment): no re-check.
            self.shell.timers.stop(Timer::MetadataRefresh);
            return None;
        };
        let topics = watched.keys().cloned().collect();
        self.metadata_refresh_in_flight = true;
        self.shell.timers.stop(Timer::MetadataRefresh);
        self.shell
            .send_metadata(Some(topics), Sent::MetadataRefresh);
        self.shell.outbound.pop_front()
    }

    fn on_metadata_refresh(&mut self, result: Result<Response, TransportError>) {
        self.metadata_refresh_in_flight = false;
        let Some(watched) = self.assigned_metadata.clone() else {
            return;
        };
        let metadata = match result
            .map_err(|e| e.to_string())
            .and_then(|r| ClusterMetadata::from_response(&r).map_err(|e| e.to_string()))
        {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!(error = %e, "metadata refresh failed");
                self.shell.timers.set(
                    Timer::MetadataRefresh,
                    crate::machine::timer::after(
                        self.shell.now,
                        self.shell.config.retry_backoff_max,
                    ),
                );
                return;
            }
        };
        let now: BTreeMap<String, i32> = watched
            .keys()
            .map(|t| {
                let n = metadata
                    .topics
                    .get(t)
                    .filter(|m| m.error_code == codes::NONE)
                    .map_or(0, |m| m.partitions.len() as i32);
                (t.clone(), n)
            })
            .collect();
        if now != watched && matches!(self.phase, Phase::Stable) {
            tracing::info!(group = %self.shell.config.group_id, ?watched, ?now, "partitions of subscribed topics changed; rebalancing");
            self.request_rejoin(Reason::MetadataChanged);
        } else {
            self.arm_metadata_refresh(&watched);
        }
    }

    fn on_sync(
        &mut self,
        id: RequestId,
        generation: i32,
        member_id: String,
        result: Result<Response, TransportError>,
    ) {
        if !matches!(self.phase, Phase::Syncing { request } if request == id) {
            return;
        }
        let r = match result {
            Ok(Response {
                body: ResponseBody::Kafka(ResponseKind::SyncGroup(r)),
                ..
            }) => r,
            Ok(_) => {
                return self.fail(invalid(
                    ApiKey::SyncGroup,
                    "the answer is not a SyncGroup response",
                ));
            }
            Err(e) => {
                tracing::info!(error = %e, "SyncGroup failed in the transport");
                self.shell.coordinator_failed();
                return self.rejoin_after_backoff(Reason::SyncGroupTransportFailure);
            }
        };
        let current = generation == self.generation && member_id == self.member_id;
        match classify(ApiKey::SyncGroup, r.error_code, &self.shell.config.group_id) {
            ErrorAction::Proceed => {
                // KIP-559: the answer must name the protocol the member joined with.
                let type_ok = r
                    .protocol_type
                    .as_deref()
                    .is_none_or(|t| t == PROTOCOL_TYPE);
                let name_ok = r
                    .protocol_name
                    .as_deref()
                    .is_none_or(|n| Some(n) == self.protocol_name.as_deref());
                if !type_ok || !name_ok {
                    return self.fail(GroupError::Fatal {
                        api: ApiKey::SyncGroup.into(),
                        code: codes::INCONSISTENT_GROUP_PROTOCOL,
                    });
                }
                // The leader wrote these bytes (any group member can be the leader): an
                // assignment that does not read, names a topic Kafka cannot have or a negative
                // partition is refused with a warning, and the member rejoins after a backoff.
                // What it owned is reported lost: the generation moved on, and the leader's
                // assignment for it is unknown.
                match Assignment::decode(&r.assignment) {
                    Ok(a) => self.synced(a.partitions),
                    Err(e) => {
                        tracing::warn!(group = %self.shell.config.group_id, error = %e, "invalid assignment from the leader refused; rejoining");
                        self.lose_owned(Reason::InvalidAssignment);
                        self.rejoin_after_backoff(Reason::InvalidAssignment);
                    }
                }
            }
            ErrorAction::ResetMemberId if current => {
                self.lose_owned(Reason::UnknownMemberId);
                self.reset_member_id();
                self.set_phase(Phase::Rejoin { not_before: None }, Reason::UnknownMemberId);
            }
            ErrorAction::ResetGeneration if current => {
                self.lose_owned(Reason::IllegalGeneration);
                self.reset_generation();
                self.set_phase(
                    Phase::Rejoin { not_before: None },
                    Reason::IllegalGeneration,
                );
            }
            ErrorAction::Fenced if current => self.fenced(),
            ErrorAction::Rediscover => {
                self.coordinator_unloaded();
                self.rejoin_after_backoff(Reason::CoordinatorMoved);
            }
            ErrorAction::RetryBackoff => self.rejoin_after_backoff(Reason::RetriableSyncGroupError),
            ErrorAction::Fatal(e) => self.fail(e),
            // REBALANCE_IN_PROGRESS, and resets answering an older generation: rejoin now.
            _ => self.set_phase(Phase::Rejoin { not_before: None }, Reason::SyncGroupRejoin),
        }
    }

    fn synced(&mut self, partitions: Vec<TopicPartition>) {
        self.confirm_membership();
        let target: BTreeSet<TopicPartition> = partitions.into_iter().collect();
        let revoked: Vec<TopicPartition> = self.owned.difference(&target).cloned().collect();
        let added: Vec<TopicPartition> = target.difference(&self.owned).cloned().collect();
        self.owned = target;
        self.heartbeat_failures = 0;
        self.set_phase(Phase::Stable, Reason::SyncGroupAnswered);
        // Revoke first, then assign (KIP-429): the revoked partitions left `owned` already.
        if !added.is_empty() || revoked.is_empty() {
            self.shell.events.push_back(Event::Assigned {
                added,
                owned: self.owned.iter().cloned().collect(),
                generation: self.generation,
            });
        }
        if !revoked.is_empty() {
            // Cooperative: partitions moving to another member are given up now and handed over
            // in a follow-up rebalance, after the application's ticket (KIP-429).
            self.revoke(revoked, Reason::CooperativeRevocation);
        }
    }

    fn on_heartbeat(
        &mut self,
        generation: i32,
        member_id: String,
        result: Result<Response, TransportError>,
    ) {
        self.heartbeat_in_flight = false;
        let current =
            generation == self.generation && member_id == self.member_id && self.generation >= 0;
        let r = match result {
            Ok(Response {
                body: ResponseBody::Kafka(ResponseKind::Heartbeat(r)),
                ..
            }) => r,
            Ok(_) => {
                return self.fail(invalid(
                    ApiKey::Heartbeat,
                    "the answer is not a Heartbeat response",
                ));
            }
            Err(e) => {
                tracing::debug!(error = %e, "heartbeat failed in the transport");
                self.shell.coordinator_failed();
                return self.heartbeat_backoff();
            }
        };
        let action = classify(ApiKey::Heartbeat, r.error_code, &self.shell.config.group_id);
        if !current {
            // An answer for an older generation or member id says nothing about the member now,
            // but a coordinator that moved has moved for everyone (markCoordinatorUnknown).
            if action == ErrorAction::Rediscover {
                self.coordinator_unloaded();
            }
            return;
        }
        match action {
            ErrorAction::Proceed => self.heartbeat_ok(),
            ErrorAction::RejoinNow => {
                // The member is alive; a rebalance started. Only a stable member reacts.
                self.heartbeat_ok();
                if matches!(self.phase, Phase::Stable) {
                    self.request_rejoin(Reason::RebalanceInProgress);
                }
            }
            ErrorAction::ResetMemberId => {
                self.lose_owned(Reason::UnknownMemberId);
                self.reset_member_id();
                self.interrupt_for_rejoin(Reason::UnknownMemberId);
            }
            ErrorAction::ResetGeneration => {
                self.lose_owned(Reason::IllegalGeneration);
                self.reset_generation();
                self.interrupt_for_rejoin(Reason::IllegalGeneration);
            }
            ErrorAction::Fenced => self.fenced(),
            ErrorAction::Rediscover => {
                self.coordinator_unloaded();
                self.heartbeat_backoff();
            }
            ErrorAction::Fatal(e) => self.fail(e),
            // MEMBER_ID_REQUIRED and consumer-protocol actions do not come out of `classify`
            // for Heartbeat; back off like any other retriable failure.
            _ => self.heartbeat_backoff(),
        }
    }

    /// A reset while a rebalance step or a revocation is under way: whatever was awaited is void.
    /// A close or unsubscribe that waited for the revocation goes on instead of the rejoin.
    fn interrupt_for_rejoin(&mut self, reason: Reason) {
        if let Some(d) = self.take_deferred_leave() {
            return self.leave(d.options, d.then_close, reason);
        }
        // A stopped member stays stopped whatever late answers say.
        if !matches!(
            self.phase,
            Phase::Leaving { .. }
                | Phase::Unsubscribed
                | Phase::PollExpired
                | Phase::Closed
                | Phase::Fatal(_)
        ) {
            self.set_phase(Phase::Rejoin { not_before: None }, reason);
        }
    }

    fn heartbeat_ok(&mut self) {
        self.confirm_membership();
        self.heartbeat_failures = 0;
        self.shell.timers.set(
            Timer::Session,
            crate::machine::timer::after(self.shell.now, self.shell.config.session_timeout),
        );
    }

    /// The answer being handled confirmed the membership (a JoinGroup, a SyncGroup, or a
    /// heartbeat answered without error or with REBALANCE_IN_PROGRESS: each restarts the
    /// member's session at the coordinator, `completeAndScheduleNextHeartbeatExpiration`).
    fn confirm_membership(&mut self) {
        let config = &self.shell.config;
        let bound = lease_bound(config.session_timeout, config.heartbeat_interval);
        self.shell.confirm_membership(bound);
    }

    /// The lease ran out: the coordinator may have expired the member after `session.timeout.ms`
    /// and given its partitions to others, so they are lost now. The member keeps its member id
    /// (and instance id), looks the coordinator up again and rejoins; a JoinGroup in flight goes
    /// on (its answer decides). Commits are refused until a membership is confirmed again.
    fn on_lease_expired(&mut self) {
        if self.stopped() || matches!(self.phase, Phase::Leaving { .. }) {
            return;
        }
        self.lose_owned(Reason::LeaseExpired);
        self.shell.fail_commits(CommitError::LeaseExpired);
        self.shell.lookup.rediscover(&self.shell.config.group_id);
        if matches!(self.phase, Phase::Joining { .. }) {
            return;
        }
        self.reset_generation();
        self.interrupt_for_rejoin(Reason::LeaseExpired);
    }

    fn heartbeat_backoff(&mut self) {
        let delay = self.shell.backoff(&mut self.heartbeat_failures);
        self.shell.timers.set(
            Timer::Heartbeat,
            crate::machine::timer::after(self.shell.now, delay),
        );
    }

    fn on_leave(&mut self, id: RequestId, result: Result<Response, TransportError>) {
        let Phase::Leaving {
            request,
            then_close,
        } = self.phase
        else {
            return;
        };
        if request != id {
            return;
        }
        // Fire once: whatever the answer, the LeaveGroup went out, so the member id goes.
        let code = match &result {
            Ok(Response {
                body: ResponseBody::Kafka(ResponseKind::LeaveGroup(r)),
                ..
            }) => {
                let code = if r.error_code != codes::NONE {
                    r.error_code
                } else {
                    r.members
                        .iter()
                        .map(|m| m.error_code)
                        .find(|c| *c != 0)
                        .unwrap_or(0)
                };
                if code != codes::NONE {
                    tracing::info!(code, name = %crate::error::error_name(code), "LeaveGroup answered with an error");
                }
                code
            }
            other => {
                tracing::info!(answer = ?other.as_ref().err(), "LeaveGroup not answered");
                codes::NONE
            }
        };
        self.shell.leave_answered(&result, code);
        self.reset_member_id();
        self.finish_leave(then_close, Reason::LeaveGroupSent);
    }

    fn on_offsets(&mut self, sent: SentOffsets, result: Result<Response, TransportError>) {
        let (fence, now) = (self.fence(), self.shell.now);
        let (event, hint) = self.shell.offsets.answer(sent, result, &fence, now);
        match hint {
            None => {}
            Some(Hint::Rediscover) => self.shell.coordinator_failed(),
            Some(Hint::Rejoin) => {
                if matches!(self.phase, Phase::Stable) {
                    self.request_rejoin(Reason::CommitRebalanceInProgress);
                }
            }
            Some(Hint::ResetMemberId) => {
                self.lose_owned(Reason::UnknownMemberId);
                self.reset_member_id();
                self.interrupt_for_rejoin(Reason::UnknownMemberId);
            }
            Some(Hint::ResetGeneration) => {
                self.lose_owned(Reason::IllegalGeneration);
                self.reset_generation();
                self.interrupt_for_rejoin(Reason::IllegalGeneration);
            }
            Some(Hint::Fenced) => self.fenced(),
            Some(Hint::Fatal(error)) => self.fail(error),
        }
        self.shell.events.extend(event);
    }
}

fn invalid(api: ApiKey, reason: &str) -> GroupError {
    GroupError::InvalidResponse {
        api: api.into(),
        reason: reason.to_owned(),
    }
}

skeleton!(ClassicMember, generation, |m| std::mem::take(&mut m.owned)
    .into_iter()
    .collect());
