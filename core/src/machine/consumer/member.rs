//! The consumer member's state machine; its rules are the docs of the parent module.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, RequestKind,
    ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::config::GroupConfig;
use crate::error::ApiMisuse;
use crate::error::{ConfigError, ErrorAction, GroupError, TransportError, classify, codes};
use crate::machine::TopicPartition;
use crate::machine::events::{
    CloseOptions, CommitError, CommitId, CommitOffset, Event, FetchId, MemberState, Reason,
    RevokeTicket,
};
use crate::machine::metadata::ClusterMetadata;
use crate::machine::offsets::{Fence, Hint, Protocol, SentOffsets};
use crate::machine::session;
use crate::machine::shell::{
    PhaseName, Shell, Skeleton, epoch_lease_bound, millis, phases, skeleton,
};
use crate::machine::timer::Timer;
use crate::member_id::MemberId;
use crate::request::{
    Broker, Fit, Outbound, Reply, Request, RequestId, Response, ResponseBody, Target,
};

/// How often a static member recovers from UNRELEASED_INSTANCE_ID caused by its own earlier join
/// before it gives up.
pub const UNRELEASED_RECOVERIES: u32 = 3;
/// ConsumerGroupHeartbeat v1: client-generated member ids are mandatory (KIP-1082).
const HEARTBEAT_VERSIONS: std::ops::RangeInclusive<i16> = 1..=1;
/// OffsetCommit / OffsetFetch v9 are the first a consumer-protocol member may use (names, not ids).
const COMMIT_VERSIONS: std::ops::RangeInclusive<i16> = 9..=9;
const FETCH_VERSIONS: std::ops::RangeInclusive<i16> = 9..=9;
/// Epochs with a meaning of their own (ConsumerGroupHeartbeatRequest.json).
const LEAVE_EPOCH: i32 = -1;
const STATIC_LEAVE_EPOCH: i32 = -2;

#[derive(Debug, Clone)]
pub(crate) enum Phase {
    Unsubscribed,
    /// Sending epoch-0 heartbeats until the coordinator answers.
    Joining,
    /// Applying the target assignment (waiting for metadata to resolve topic ids).
    Reconciling,
    /// Revoked partitions are with the application; the rest of the reconciliation waits.
    AwaitRevoke {
        ticket: u64,
        /// Still reported as owned to the broker until the ticket comes back, so no heartbeat
        /// acknowledges the revocation before the application committed.
        revoking: BTreeSet<(Uuid, i32)>,
    },
    /// The next heartbeat acknowledges the new assignment, sent at once.
    Acknowledging,
    Stable,
    /// Left on poll timeout; the next poll rejoins.
    Stale,
    /// A leave heartbeat is due (`request` None) or in flight.
    Leaving {
        epoch: i32,
        request: Option<RequestId>,
        then: AfterLeave,
    },
    Closed,
    Fatal(GroupError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterLeave {
    Close,
    Unsubscribe,
    Stale,
    /// UNRELEASED_INSTANCE_ID recovery: rejoin at epoch 0.
    Rejoin,
}

phases!(
    Unsubscribed,
    Joining,
    Reconciling,
    AwaitRevoke { .. },
    Acknowledging,
    Stable,
    Stale,
    Leaving { .. },
    Closed,
    Fatal(_)
);

/// The fields a heartbeat carried; once answered they are what the broker knows, so later
/// heartbeats leave unchanged fields out (protocol.md §6.3).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct SentFields {
    topics: Option<Vec<String>>,
    regex: Option<String>,
    rebalance_timeout: i32,
    assignor: Option<String>,
    owned: BTreeSet<(Uuid, i32)>,
}

#[derive(Debug, Clone)]
pub(crate) enum Sent {
    Heartbeat {
        epoch: i32,
        fields: SentFields,
        /// The member's incarnation (leaves completed) when it went out.
        incarnation: u64,
        /// The request listed the owned partitions (full, or they changed).
        reported_owned: bool,
    },
    Leave,
    Metadata,
    Offsets(SentOffsets),
    /// A DescribeConfigs reading the group's session timeout.
    SessionRead(session::Step),
}

/// What the broker may know of a member: its registration state, which decides whether a leave
/// is due and whether UNRELEASED_INSTANCE_ID may be the member's own doing.
#[derive(Debug, Clone, Copy, Default)]
struct Registration {
    /// An epoch-0 heartbeat went out (the broker may know this member).
    join_sent: bool,
    /// This member may be registered under its instance id (lost join answer, or it held an
    /// epoch before): an UNRELEASED_INSTANCE_ID may be its own doing.
    may_be_registered: bool,
    /// UNRELEASED_INSTANCE_ID recoveries spent (at most [`UNRELEASED_RECOVERIES`]).
    unreleased_recoveries: u32,
}

/// A KIP-848 consumer-protocol member (sans-IO), with the same inputs, outputs and events as
/// [`ClassicMember`](crate::machine::classic::ClassicMember); its state diagram and identity
/// rules are the docs of [`machine::consumer`](crate::machine::consumer).
#[derive(Debug)]
pub struct ConsumerMember {
    shell: Shell<Sent>,
    /// Test only: the Java reset policy a classic member built by the `auto` fallback runs.
    #[cfg(feature = "sim")]
    pub(crate) java_reset_policy: bool,
    member_id: MemberId,
    epoch: i32,
    phase: Phase,
    topics: BTreeSet<String>,
    regex: Option<String>,
    /// Owned partitions by topic id (what acknowledgements carry).
    owned: BTreeSet<(Uuid, i32)>,
    /// The latest target assignment from the coordinator, sanitised (shared with a
    /// reconciliation rather than copied).
    target: Option<Arc<BTreeSet<(Uuid, i32)>>>,
    /// Topic names by id, each shared by the partitions named with it.
    names: BTreeMap<Uuid, Arc<str>>,
    /// The regular heartbeat in flight (at most one); only its answer frees the slot, also when
    /// it belongs to a membership the member left since.
    heartbeat_in_flight: Option<RequestId>,
    /// Leaves completed so far: answers to heartbeats of an earlier incarnation describe a
    /// membership the member left, and are ignored.
    incarnation: u64,
    heartbeat_failures: u32,
    interval: Duration,
    /// What the broker knows; `None` makes the next heartbeat full.
    known: Option<SentFields>,
    metadata_in_flight: bool,
    /// Ask for the subscribed topics' metadata right after the coordinator lookup: the broker
    /// assigns by topic id, and knowing the names before the first assignment arrives saves a
    /// round trip on the join and rejoin path.
    prefetch_metadata: bool,
    /// A heartbeat that listed the owned partitions failed in the transport: the broker may
    /// still process it (its bytes may have been read). Until a later heartbeat is answered, no
    /// partition is taken (see [`owned_report_in_flight`](Self::owned_report_in_flight)).
    owned_report_unsettled: bool,
    /// The owned partitions as of the last answered heartbeat (what the broker last read from
    /// this member). Unlike the other known fields it survives a failed heartbeat.
    acked_owned: Option<BTreeSet<(Uuid, i32)>>,
    /// What the broker may know of this member.
    registration: Registration,
    answered_once: bool,
    /// A close or unsubscribe that waits for the outstanding revocation ticket.
    deferred_leave: Option<(CloseOptions, AfterLeave, Reason)>,
    /// The read of the group's session timeout, when configured.
    session_read: session::SessionRead,
}

impl ConsumerMember {
    /// A member of `config.group_id`; not yet subscribed. Its KIP-1082 member id is
    /// `config.member_id`, else one derived from `config.seed` ([`MemberId::from_seed`]): the core
    /// reads no random source of its own. With neither, the configuration is refused (see
    /// [`GroupConfig::seed`]); `GroupMember::start` fills
    /// the member id from the OS CSPRNG.
    pub fn new(config: GroupConfig, now: Instant) -> Result<Self, ConfigError> {
        let member_id = match config.member_id {
            Some(id) => id,
            None => {
                config.validate()?;
                // No member id: the seed, or the error that names what is missing.
                MemberId::from_seed(config.jitter_seed()?)
            }
        };
        Self::with_member_id(config, member_id, now)
    }

    /// A member with the given id, whatever `config.member_id` says (the member's
    /// [`config`](Self::config) then names `member_id`). Without `config.seed`, the backoff
    /// jitter is seeded from the id's bytes.
    pub fn with_member_id(
        mut config: GroupConfig,
        member_id: MemberId,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        // Also what a classic member built from this config after an `auto` fallback seeds from.
        config.member_id = Some(member_id);
        let seed = config.jitter_seed()?;
        Ok(Self {
            #[cfg(feature = "sim")]
            java_reset_policy: false,
            member_id,
            epoch: 0,
            phase: Phase::Unsubscribed,
            topics: BTreeSet::new(),
            regex: None,
            owned: BTreeSet::new(),
            target: None,
            names: BTreeMap::new(),
            heartbeat_in_flight: None,
            incarnation: 0,
            heartbeat_failures: 0,
            interval: Duration::ZERO,
            known: None,
            metadata_in_flight: false,
            prefetch_metadata: false,
            owned_report_unsettled: false,
            acked_owned: None,
            registration: Registration::default(),
            answered_once: false,
            deferred_leave: None,
            session_read: session::SessionRead::default(),
            shell: Shell::new(config, now, seed),
        })
    }

    // ------------------------------------------------------------------ accessors

    /// The member id, the same for the member's whole life.
    pub fn member_id(&self) -> &str {
        self.member_id.as_str()
    }

    /// The member epoch (0 before the first answer and after fencing).
    pub fn epoch(&self) -> i32 {
        self.epoch
    }

    /// What the member may commit: what it owns (the partitions being revoked stay owned until
    /// the ticket is back).
    fn committable(&self) -> std::collections::BTreeSet<TopicPartition> {
        self.owned.iter().filter_map(|tp| self.named(tp)).collect()
    }

    /// Owned partitions, by name (partitions of topics not yet resolved are not owned yet).
    pub fn assignment(&self) -> Vec<TopicPartition> {
        let revoking = match &self.phase {
            Phase::AwaitRevoke { revoking, .. } => Some(revoking),
            _ => None,
        };
        let mut v: Vec<TopicPartition> = self
            .owned
            .iter()
            .filter(|tp| revoking.is_none_or(|r| !r.contains(tp)))
            .filter_map(|tp| self.named(tp))
            .collect();
        v.sort();
        v
    }

    /// Where the member stands.
    pub fn state(&self) -> MemberState {
        self.phase.state()
    }

    /// The coordinator, when known.
    pub fn coordinator(&self) -> Option<&Broker> {
        self.shell.coordinator()
    }

    /// The configuration.
    pub fn config(&self) -> &GroupConfig {
        &self.shell.config
    }

    /// The latest time the member was told.
    pub fn now(&self) -> Instant {
        self.shell.now
    }

    /// Whether the coordinator ever answered a heartbeat successfully.
    pub fn answered_once(&self) -> bool {
        self.answered_once
    }

    /// The subscription (topic names), for a fallback to the classic protocol.
    pub fn topics(&self) -> Vec<String> {
        self.topics.iter().cloned().collect()
    }

    /// The regex subscription (`subscribe_regex`), if that is how the member is subscribed.
    pub fn regex(&self) -> Option<&str> {
        self.regex.as_deref()
    }

    /// How the close ended, once the member is closed or stopped (`None` while it runs): the
    /// outcome the driver's `close()` returns ([`CloseOutcome`](crate::machine::events::CloseOutcome)).
    pub fn close_outcome(&self) -> Option<crate::machine::events::CloseOutcome> {
        self.shell.close_outcome(self.phase.stopped())
    }

    /// The terminal error, once stopped on one.
    pub fn fatal_error(&self) -> Option<&GroupError> {
        match &self.phase {
            Phase::Fatal(e) => Some(e),
            _ => None,
        }
    }

    fn is_static(&self) -> bool {
        self.shell.config.instance_id.is_some()
    }

    fn in_group(&self) -> bool {
        matches!(
            self.phase,
            Phase::Joining
                | Phase::Reconciling
                | Phase::AwaitRevoke { .. }
                | Phase::Acknowledging
                | Phase::Stable
        )
    }

    fn named(&self, (id, p): &(Uuid, i32)) -> Option<TopicPartition> {
        self.names.get(id).map(|n| TopicPartition::new(n, *p))
    }

    // ------------------------------------------------------------------ commands

    /// Subscribes to `topics` by name and joins (or tells the coordinator the new subscription).
    ///
    /// Errors with [`ApiMisuse::Stopped`] once [`close`](Self::close) was called (the close goes
    /// on) or the member stopped, and with [`ApiMisuse::EmptySubscription`] without topics.
    pub fn subscribe(
        &mut self,
        topics: impl IntoIterator<Item = String>,
        now: Instant,
    ) -> Result<(), ApiMisuse> {
        self.topics = self.subscription(topics, now)?;
        self.regex = None;
        // Joining: the names of the subscribed topics are needed as soon as the first
        // assignment arrives. (A member in the group resolves new ids when they come.)
        self.prefetch_metadata = matches!(self.phase, Phase::Unsubscribed | Phase::Stale)
            && self
                .topics
                .iter()
                .any(|t| !self.names.values().any(|n| **n == **t));
        self.start(now);
        Ok(())
    }

    /// Subscribes by a server-side regular expression (RE2/J syntax, `SubscribedTopicRegex`, v1).
    /// Errors as [`subscribe`](Self::subscribe) does.
    ///
    /// Only the consumer protocol evaluates a regex: with `group.protocol=auto`, a broker that
    /// refuses the consumer protocol stops the member with
    /// [`GroupError::RegexNeedsConsumerProtocol`] instead of falling back to classic (see
    /// [`Member::poll_event`](crate::machine::member::Member::poll_event)).
    pub fn subscribe_regex(
        &mut self,
        pattern: impl Into<String>,
        now: Instant,
    ) -> Result<(), ApiMisuse> {
        self.shell.advance(now);
        if self.closing() {
            return Err(ApiMisuse::Stopped);
        }
        let pattern = pattern.into();
        if pattern.trim().is_empty() {
            return Err(ApiMisuse::EmptySubscription);
        }
        self.topics.clear();
        self.regex = Some(pattern);
        // By pattern the metadata would be every topic's: fetched only for ids assigned.
        self.prefetch_metadata = false;
        self.start(now);
        Ok(())
    }

    fn start(&mut self, now: Instant) {
        self.shell.timers.set(
            Timer::PollInterval,
            crate::machine::timer::after(now, self.shell.config.max_poll_interval),
        );
        match self.phase {
            Phase::Unsubscribed | Phase::Stale => self.join(Reason::Subscribed),
            // A member in the group sends the changed subscription with its next heartbeat
            // (the field differs from what the broker knows); send it now.
            _ if self.in_group() => self.shell.timers.stop(Timer::Heartbeat),
            _ => {}
        }
    }

    /// Leaves the subscription: the application releases its partitions ([`Event::Revoked`]) and
    /// the member leaves (-1; -2 for a static member, which keeps its partitions at the broker for
    /// a return within the session timeout).
    ///
    /// Does nothing once [`close`](Self::close) was called: the close goes on as asked (also a
    /// close waiting for a revocation ticket).
    pub fn unsubscribe(&mut self, now: Instant) {
        self.shell.advance(now);
        if self.closing() {
            return;
        }
        // The subscription goes in every state, so a later poll() does not rejoin.
        self.topics.clear();
        self.regex = None;
        self.shell.timers.stop(Timer::PollInterval);
        if matches!(self.phase, Phase::Stale) {
            return self.set_phase(Phase::Unsubscribed, Reason::Unsubscribed);
        }
        if !self.in_group() {
            return;
        }
        self.leave_when_revoked(
            CloseOptions::Default,
            AfterLeave::Unsubscribe,
            Reason::Unsubscribed,
        );
    }

    /// Releases what the application owns and leaves — but while a revocation ticket is out, the
    /// leave waits for it: a leave would let the broker hand the partitions being revoked to
    /// others before the application committed them (the ticket's promise).
    fn leave_when_revoked(&mut self, options: CloseOptions, then: AfterLeave, reason: Reason) {
        if let Phase::AwaitRevoke { revoking, .. } = &self.phase {
            let revoking = revoking.clone();
            let released: Vec<(Uuid, i32)> = self
                .owned
                .iter()
                .filter(|tp| !revoking.contains(tp))
                .cloned()
                .collect();
            if !released.is_empty() {
                let partitions = released.iter().filter_map(|tp| self.named(tp)).collect();
                for tp in &released {
                    self.owned.remove(tp);
                }
                self.shell.events.push_back(Event::Revoked { partitions });
            }
            self.deferred_leave = Some((options, then, reason));
            // Bounded: without the ticket within max.poll.interval.ms the member leaves anyway.
            self.shell.timers.set(
                Timer::PollInterval,
                crate::machine::timer::after(self.shell.now, self.shell.config.max_poll_interval),
            );
            return;
        }
        self.release_owned();
        self.leave(options, then, reason);
    }

    /// Records that the application is alive; after a poll timeout, rejoins.
    pub fn poll(&mut self, now: Instant) {
        self.shell.advance(now);
        self.check_lease();
        let subscribed = !self.topics.is_empty() || self.regex.is_some();
        if self.polled(now, subscribed) && matches!(self.phase, Phase::Stale) {
            self.join(Reason::PolledAfterPollTimeout);
        }
    }

    /// Hands back the ticket of an [`Event::Revoking`]; the reconciliation goes on (assign, then
    /// acknowledge).
    pub fn complete_revocation(
        &mut self,
        RevokeTicket { id }: RevokeTicket,
        now: Instant,
    ) -> Result<(), ApiMisuse> {
        self.shell.advance(now);
        match &self.phase {
            Phase::AwaitRevoke { ticket, revoking } if *ticket == id => {
                for tp in revoking.clone() {
                    self.owned.remove(&tp);
                }
                if let Some((options, then, reason)) = self.deferred_leave.take() {
                    self.release_owned();
                    self.leave(options, then, reason);
                    return Ok(());
                }
                self.set_phase(Phase::Reconciling, Reason::RevocationCompleted);
                self.reconcile();
                Ok(())
            }
            _ => Err(ApiMisuse::UnknownTicket),
        }
    }

    /// Fetches committed offsets (OffsetFetch v9 with member id and epoch while in the group).
    pub fn fetch_offsets(&mut self, partitions: Vec<TopicPartition>, now: Instant) -> FetchId {
        self.queue_fetch(partitions, now)
    }

    /// Commits `offsets` with the member id and epoch (OffsetCommit v9). Outside the group:
    /// [`CommitError::NotMember`] at once.
    pub fn commit(&mut self, offsets: Vec<CommitOffset>, now: Instant) -> CommitId {
        self.queue_commit(offsets, now, |m| {
            if m.stopped() {
                m.phase.stop_error()
            } else if m.epoch <= 0 || !m.in_group() {
                Some(CommitError::NotMember {
                    reason: "the member holds no epoch".into(),
                })
            } else {
                None
            }
        })
    }

    /// Closes the member: partitions released ([`Event::Revoked`]), the leave heartbeat sent as
    /// `options` ask (default: -2 static, -1 dynamic; leave-group: -1; remain-in-group: -2 static,
    /// nothing dynamic), then [`Event::Closed`]. A close before the first answer still sends the
    /// leave with the member id.
    pub fn close(&mut self, options: CloseOptions, now: Instant) {
        if !self.begin_close(now) {
            return;
        }
        self.topics.clear();
        self.regex = None;
        self.shell.timers.stop(Timer::PollInterval);
        if let Phase::Leaving { then, .. } = &mut self.phase {
            *then = AfterLeave::Close;
            return;
        }
        // A close takes an outstanding revocation ticket back (as the classic member's does):
        // the partitions being revoked are released with the rest.
        if let Phase::AwaitRevoke { .. } = &self.phase {
            self.deferred_leave = None;
            self.set_phase(Phase::Reconciling, Reason::Closed);
        }
        self.leave_when_revoked(options, AfterLeave::Close, Reason::Closed);
    }

    // ------------------------------------------------------------------ outputs

    /// The next request to send. Drain until `None` after every input.
    pub fn poll_request(&mut self) -> Option<Outbound> {
        if let Some(out) = self.shell.outbound.pop_front() {
            return Some(out);
        }
        let needed = !self.stopped()
            && (!matches!(self.phase, Phase::Unsubscribed | Phase::Stale)
                || !self.shell.offsets.is_empty());
        if needed && let Some(out) = self.shell.lookup.poll_request() {
            return Some(out);
        }
        if self.stopped() {
            return None;
        }
        if self.prefetch_metadata && needed {
            self.prefetch_metadata = false;
            self.request_metadata();
            if let Some(out) = self.shell.outbound.pop_front() {
                return Some(out);
            }
        }
        let Some(coordinator) = self.coordinator().cloned() else {
            // A leave that cannot be sent completes the leave (AbstractHeartbeatRequestManager).
            if let Phase::Leaving {
                request: None,
                then,
                ..
            } = self.phase
                && !self.registration.join_sent
            {
                self.finish_leave(then);
            }
            return None;
        };
        // A leave goes out at once, even with a heartbeat in flight.
        if let Phase::Leaving {
            epoch,
            request: None,
            then,
        } = self.phase
        {
            let id = self.build_leave(&coordinator, epoch);
            self.phase = Phase::Leaving {
                epoch,
                request: Some(id),
                then,
            };
            return self.shell.outbound.pop_front();
        }
        if matches!(self.phase, Phase::Leaving { .. }) {
            return None;
        }
        if let Some(out) = self.build_offsets(&coordinator) {
            return Some(out);
        }
        if self.in_group()
            && let Some(out) = session::poll(
                &mut self.shell,
                &mut self.session_read,
                &coordinator,
                session::CONSUMER,
                Sent::SessionRead,
            )
        {
            return Some(out);
        }
        if self.in_group() && self.heartbeat_in_flight.is_none() {
            let urgent = matches!(self.phase, Phase::Joining | Phase::Acknowledging);
            let due = self
                .shell
                .timers
                .get(Timer::Heartbeat)
                .is_none_or(|at| at <= self.shell.now);
            if urgent
                && self
                    .shell
                    .timers
                    .get(Timer::Rejoin)
                    .is_none_or(|at| at <= self.shell.now)
                || due
            {
                return Some(self.build_heartbeat(&coordinator));
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
            Timer::Heartbeat | Timer::Rejoin => {
                self.in_group() && self.heartbeat_in_flight.is_none()
            }
            Timer::MetadataRefresh => !self.metadata_in_flight,
            _ => true,
        })
    }

    // ------------------------------------------------------------------ inputs

    /// Advances the clock and fires due timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.shell.tick(now);
        self.check_lease();
        if self.shell.expired(Timer::MetadataRefresh)
            && matches!(
                self.phase,
                Phase::Reconciling | Phase::Stable | Phase::Acknowledging
            )
        {
            self.reconcile();
        }
        if self.shell.expired(Timer::PollInterval) && self.in_group() {
            tracing::warn!(group = %self.shell.config.group_id, "application did not poll within max.poll.interval.ms; leaving the group");
            self.lose_owned(Reason::PollTimeout);
            // A close that waited for a ticket the application never handed back ends here.
            let (options, then) = match self.deferred_leave.take() {
                Some((options, then, _)) => (options, then),
                None => (CloseOptions::Default, AfterLeave::Stale),
            };
            self.leave(options, then, Reason::PollTimeout);
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
            Sent::Heartbeat {
                epoch,
                fields,
                incarnation,
                reported_owned,
            } => {
                if reported_owned && result.is_err() {
                    self.owned_report_unsettled = true;
                }
                self.on_heartbeat(id, epoch, fields, incarnation, result)
            }
            Sent::Leave => self.on_leave(id, result),
            Sent::Metadata => self.on_metadata(result),
            Sent::Offsets(sent) => self.on_offsets(sent, result),
            Sent::SessionRead(step) => session::apply(
                &mut self.shell,
                &mut self.session_read,
                step,
                &result,
                session::CONSUMER,
                self.interval,
            ),
        }
    }

    // ------------------------------------------------------------------ transitions

    fn join(&mut self, reason: Reason) {
        self.shell.end_lease();
        self.epoch = 0;
        self.known = None;
        self.acked_owned = None;
        self.target = None;
        self.shell.timers.stop(Timer::Heartbeat);
        self.set_phase(Phase::Joining, reason);
    }

    /// Fenced (FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID): partitions lost, rejoin at epoch 0 with
    /// the same member id (AbstractMembershipManager.transitionToFenced).
    fn fenced(&mut self, reason: Reason) {
        if let Phase::Leaving { then, .. } = self.phase {
            // Fenced while leaving completes the leave.
            return self.finish_leave(then);
        }
        if let Some((_, then, _)) = self.deferred_leave.take() {
            // Fenced while a leave waited for a ticket: nothing is left to leave.
            self.lose_owned(reason);
            return self.finish_leave(then);
        }
        self.lose_owned(reason);
        self.registration.may_be_registered = true;
        self.join(reason);
    }

    /// Decides the leave epoch and starts leaving; without a leave due, finishes at once.
    fn leave(&mut self, options: CloseOptions, then: AfterLeave, reason: Reason) {
        // ConsumerMembershipManager.leaveGroupEpoch, and dynamic + remain-in-group sends nothing.
        let epoch = match options {
            CloseOptions::LeaveGroup => Some(LEAVE_EPOCH),
            _ if self.is_static() => Some(STATIC_LEAVE_EPOCH),
            CloseOptions::Default => Some(LEAVE_EPOCH),
            CloseOptions::RemainInGroup => None,
        };
        // The broker may know this member once an epoch-0 heartbeat went out, answered or not.
        let known = self.registration.join_sent || self.epoch > 0;
        match epoch {
            Some(epoch) if known => self.set_phase(
                Phase::Leaving {
                    epoch,
                    request: None,
                    then,
                },
                reason,
            ),
            _ => self.finish_leave(then),
        }
    }

    fn finish_leave(&mut self, then: AfterLeave) {
        // A leave that was not confirmed leaves an earlier join registered: the broker may still
        // hold this member under its instance id.
        if self.registration.join_sent || self.epoch > 0 {
            self.registration.may_be_registered = true;
        }
        self.epoch = 0;
        self.known = None;
        self.acked_owned = None;
        self.target = None;
        self.registration.join_sent = false;
        // A regular heartbeat still outstanding keeps its slot until its answer (ignored then):
        // the next join must not overlap it.
        self.incarnation += 1;
        match then {
            AfterLeave::Close => {
                self.shell.fail_offsets(CommitError::Closed);
                self.set_phase(Phase::Closed, Reason::Left);
                self.shell.events.push_back(Event::Closed);
            }
            AfterLeave::Unsubscribe if !self.topics.is_empty() || self.regex.is_some() => {
                self.join(Reason::Resubscribed)
            }
            AfterLeave::Unsubscribe => self.set_phase(Phase::Unsubscribed, Reason::Left),
            AfterLeave::Stale => self.set_phase(Phase::Stale, Reason::LeftOnPollTimeout),
            AfterLeave::Rejoin => self.join(Reason::RejoinAfterInstanceRelease),
        }
    }

    // ------------------------------------------------------------------ requests

    fn push(
        &mut self,
        target: Target,
        body: RequestKind,
        (versions, fit): (std::ops::RangeInclusive<i16>, Option<Fit>),
        sent: Sent,
    ) -> RequestId {
        let request = Request::Raw {
            body: Box::new(body),
            versions,
            fit,
        };
        self.shell.send(target, request, sent)
    }

    fn base_heartbeat(&self, epoch: i32) -> ConsumerGroupHeartbeatRequest {
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(self.shell.group_id())
            .with_member_id(StrBytes::from_string(self.member_id.to_string()))
            .with_member_epoch(epoch)
            // The Java client always sends the instance id, though the schema allows leaving it out.
            .with_instance_id(
                self.shell
                    .config
                    .instance_id
                    .clone()
                    .map(StrBytes::from_string),
            )
            .with_rebalance_timeout_ms(-1)
    }

    /// Full when joining or after any failure (the known fields were reset), else only what
    /// changed since the broker last answered (HeartbeatState.buildRequestData).
    fn build_heartbeat(&mut self, coordinator: &Broker) -> Outbound {
        let full = self.epoch == 0 || self.known.is_none();
        let known = if full {
            SentFields::default()
        } else {
            self.known.clone().unwrap_or_default()
        };
        let fields = SentFields {
            topics: self
                .regex
                .is_none()
                .then(|| self.topics.iter().cloned().collect()),
            regex: self.regex.clone(),
            rebalance_timeout: millis(self.shell.config.max_poll_interval),
            assignor: self.shell.config.remote_assignor.clone(),
            owned: self.owned.clone(),
        };
        let mut r = self.base_heartbeat(self.epoch);
        if full || fields.rebalance_timeout != known.rebalance_timeout {
            r.rebalance_timeout_ms = fields.rebalance_timeout;
        }
        let names = |ts: &[String]| {
            ts.iter()
                .map(|t| TopicName(StrBytes::from_string(t.clone())))
                .collect()
        };
        if full {
            r.subscribed_topic_names = fields.topics.as_deref().map(names);
        } else if fields.topics != known.topics {
            // Null would mean "unchanged": an empty list clears names the broker knows when the
            // member switched to a pattern.
            r.subscribed_topic_names = Some(names(fields.topics.as_deref().unwrap_or_default()));
        }
        if full && fields.regex.is_some() || fields.regex != known.regex {
            // "" clears a pattern the broker knows when the member switched to names.
            r.subscribed_topic_regex = Some(StrBytes::from_string(
                fields.regex.clone().unwrap_or_default(),
            ));
        }
        if (full || fields.assignor != known.assignor) && fields.assignor.is_some() {
            r.server_assignor = fields.assignor.clone().map(StrBytes::from_string);
        }
        // The owned partitions go out when joining or when they differ from what the broker last
        // read from this member; unlike the Java client, not again in every full heartbeat after
        // a failure. A heartbeat that failed in the transport may still be processed late, after
        // newer ones, at the previous epoch, which the broker accepts as a retry; a stale owned
        // list in it would read as revocations done (CurrentAssignmentBuilder) and free
        // partitions this member has taken since. The broker already holds an unchanged list.
        let list_owned = self.epoch == 0 || self.acked_owned.as_ref() != Some(&fields.owned);
        if list_owned {
            let mut by_topic: BTreeMap<Uuid, Vec<i32>> = BTreeMap::new();
            for (id, p) in &fields.owned {
                by_topic.entry(*id).or_default().push(*p);
            }
            r.topic_partitions = Some(
                by_topic
                    .into_iter()
                    .map(|(id, ps)| {
                        TopicPartitions::default()
                            .with_topic_id(id)
                            .with_partitions(ps)
                    })
                    .collect(),
            );
        }
        if self.epoch == 0 {
            r.rack_id = self.shell.config.rack_id.clone().map(StrBytes::from_string);
            self.registration.join_sent = true;
        }
        let epoch = self.epoch;
        let incarnation = self.incarnation;
        let reported_owned = r.topic_partitions.is_some();
        let id = self.push(
            Target::Coordinator(coordinator.clone()),
            RequestKind::ConsumerGroupHeartbeat(r),
            (HEARTBEAT_VERSIONS, None),
            Sent::Heartbeat {
                epoch,
                fields,
                incarnation,
                reported_owned,
            },
        );
        self.heartbeat_in_flight = Some(id);
        self.shell.outbound.pop_front().expect("just pushed")
    }

    fn build_leave(&mut self, coordinator: &Broker, epoch: i32) -> RequestId {
        let r = self.base_heartbeat(epoch);
        self.push(
            Target::Coordinator(coordinator.clone()),
            RequestKind::ConsumerGroupHeartbeat(r),
            (HEARTBEAT_VERSIONS, None),
            Sent::Leave,
        )
    }

    /// The next queued commit or fetch, fenced by the member's epoch.
    fn build_offsets(&mut self, coordinator: &Broker) -> Option<Outbound> {
        if self.shell.offsets.is_empty() {
            return None;
        }
        let refusal = (self.epoch <= 0).then(|| CommitError::NotMember {
            reason: "the member lost its epoch".into(),
        });
        let fence = self.fence();
        let (owned, now) = (self.owned_partitions(), self.shell.now);
        let shell = &mut self.shell;
        let (body, versions, sent) =
            (shell.offsets).next(&fence, (refusal, &owned), now, &mut shell.events)?;
        let target = Target::Coordinator(coordinator.clone());
        self.push(target, body, versions, Sent::Offsets(sent));
        self.shell.outbound.pop_front()
    }

    /// Who the member is, for its commits and fetches.
    fn fence(&self) -> Fence {
        Fence {
            protocol: Protocol::Consumer,
            group: self.shell.config.group_id.clone(),
            member_id: self.member_id.to_string(),
            generation: self.epoch,
            instance_id: self.shell.config.instance_id.clone(),
            member: self.epoch > 0 && self.in_group(),
            rebalancing: false,
            commit_versions: COMMIT_VERSIONS,
            fetch_versions: FETCH_VERSIONS,
        }
    }

    // ------------------------------------------------------------------ answers

    fn backoff_heartbeat(&mut self) {
        let delay = self.shell.backoff(&mut self.heartbeat_failures);
        self.shell.timers.set(
            Timer::Heartbeat,
            crate::machine::timer::after(self.shell.now, delay),
        );
        self.shell.timers.set(
            Timer::Rejoin,
            crate::machine::timer::after(self.shell.now, delay),
        );
    }

    fn on_heartbeat(
        &mut self,
        id: RequestId,
        sent_epoch: i32,
        fields: SentFields,
        incarnation: u64,
        result: Result<Response, TransportError>,
    ) {
        self.on_heartbeat_answer(id, sent_epoch, fields, incarnation, result);
        // Partitions held back while this heartbeat was in flight are taken now, whatever its
        // answer was.
        if matches!(self.phase, Phase::Reconciling)
            && self.target.is_some()
            && self.heartbeat_in_flight.is_none()
        {
            self.reconcile();
        }
    }

    fn on_heartbeat_answer(
        &mut self,
        id: RequestId,
        sent_epoch: i32,
        fields: SentFields,
        incarnation: u64,
        result: Result<Response, TransportError>,
    ) {
        if self.heartbeat_in_flight == Some(id) {
            self.heartbeat_in_flight = None;
        }
        if incarnation != self.incarnation {
            // Sent before the member last left: it answers for a membership that is gone (the
            // broker may even have registered it after the leave's answer was written).
            tracing::debug!(%id, "ignoring the answer to a heartbeat sent before the last leave");
            return;
        }
        if !self.in_group() {
            // Answers after the member left (or stopped) change nothing.
            return;
        }
        let r: ConsumerGroupHeartbeatResponse = match result {
            Ok(Response {
                body: ResponseBody::Kafka(ResponseKind::ConsumerGroupHeartbeat(r)),
                ..
            }) => r,
            Ok(_) => {
                return self.fail(invalid(
                    "the answer is not a ConsumerGroupHeartbeat response",
                ));
            }
            Err(TransportError::UnsupportedApi { .. }) => {
                return self.fail(GroupError::ConsumerProtocolUnsupported);
            }
            Err(e) => {
                tracing::debug!(error = %e, "heartbeat failed in the transport");
                if sent_epoch == 0 {
                    // The join may have landed: the broker may know this member.
                    self.registration.may_be_registered = true;
                }
                self.known = None;
                self.shell.coordinator_failed();
                return self.backoff_heartbeat();
            }
        };
        if r.error_code != codes::NONE {
            // Every failed attempt makes the next heartbeat full (resetHeartbeatState).
            self.known = None;
        }
        if sent_epoch == 0
            && matches!(
                r.error_code,
                codes::COORDINATOR_NOT_AVAILABLE | codes::NOT_COORDINATOR
            )
        {
            // The join may have landed although it was answered with an error: a write that
            // timed out is answered COORDINATOR_NOT_AVAILABLE while its records still commit
            // (CoordinatorRuntime's OperationTimeout), and a coordinator that unloads answers its
            // pending writes NOT_COORDINATOR while the next leader may hold their records.
            self.registration.may_be_registered = true;
        }
        match classify(
            ApiKey::ConsumerGroupHeartbeat,
            r.error_code,
            &self.shell.config.group_id,
        ) {
            ErrorAction::Proceed => self.heartbeat_ok(sent_epoch, fields, r),
            ErrorAction::FencedMember => {
                tracing::info!(group = %self.shell.config.group_id, code = r.error_code, "fenced; rejoining with the same member id");
                self.fenced(if r.error_code == codes::FENCED_MEMBER_EPOCH {
                    Reason::FencedMemberEpoch
                } else {
                    Reason::UnknownMemberId
                });
                if sent_epoch == 0 && matches!(self.phase, Phase::Joining) {
                    // The join itself was fenced: a broker without KAFKA-19233 (4.0, 4.1)
                    // answers every epoch-0 rejoin of a member it still holds with
                    // FENCED_MEMBER_EPOCH until that session expires. Rejoining at once would
                    // send thousands of heartbeats a second; the KIP-580 backoff paces them.
                    self.backoff_heartbeat();
                }
            }
            ErrorAction::UnreleasedInstance => self.unreleased(sent_epoch),
            ErrorAction::Fenced => {
                let instance_id = self.shell.config.instance_id.clone().unwrap_or_default();
                self.fail(GroupError::FencedInstanceId {
                    group: self.shell.config.group_id.clone(),
                    instance_id,
                });
            }
            ErrorAction::UnsupportedProtocol => self.fail(GroupError::ConsumerProtocolUnsupported),
            ErrorAction::Rediscover => {
                self.shell.coordinator_failed();
                // Retry as soon as the coordinator is found again.
                self.heartbeat_failures = 0;
                self.shell.timers.stop(Timer::Heartbeat);
                self.shell.timers.stop(Timer::Rejoin);
            }
            ErrorAction::Report => {
                tracing::warn!(group = %self.shell.config.group_id, code = r.error_code, message = ?r.error_message, "heartbeat error reported, member carries on");
                self.backoff_heartbeat();
            }
            ErrorAction::Fatal(e) => self.fail(e),
            _ => self.backoff_heartbeat(),
        }
    }

    /// UNRELEASED_INSTANCE_ID answering a static member's epoch-0 join: our own earlier
    /// registration may hold the instance id; release it with a -2 leave under our id and
    /// rejoin, a bounded number of times. The broker sends the code only there
    /// (`throwIfInstanceIdIsUnreleased`); anywhere else it cannot be this member's own join, and
    /// it is fatal as in the Java client (`handleFatalFailure`).
    fn unreleased(&mut self, sent_epoch: i32) {
        let Some(instance_id) = self.shell.config.instance_id.clone() else {
            // A member without an instance id holds none to release.
            return self.fail(GroupError::Fatal {
                api: ApiKey::ConsumerGroupHeartbeat.into(),
                code: codes::UNRELEASED_INSTANCE_ID,
            });
        };
        let own_join = sent_epoch == 0;
        if own_join
            && self.registration.may_be_registered
            && self.registration.unreleased_recoveries < UNRELEASED_RECOVERIES
        {
            self.registration.unreleased_recoveries += 1;
            tracing::warn!(group = %self.shell.config.group_id, %instance_id, attempt = self.registration.unreleased_recoveries, "UNRELEASED_INSTANCE_ID after this member's own join may have landed; leaving with -2 and rejoining");
            self.lose_owned(Reason::UnreleasedInstanceId);
            if let Some((options, then, reason)) = self.deferred_leave.take() {
                // A close or unsubscribe waited for a revocation this error voids: its leave
                // releases the instance id too (-2, or -1 for close(LeaveGroup)), and the member
                // ends as that call asked instead of rejoining.
                return self.leave(options, then, reason);
            }
            self.set_phase(
                Phase::Leaving {
                    epoch: STATIC_LEAVE_EPOCH,
                    request: None,
                    then: AfterLeave::Rejoin,
                },
                Reason::UnreleasedInstanceIdRecovery,
            );
        } else {
            self.fail(GroupError::UnreleasedInstanceId {
                group: self.shell.config.group_id.clone(),
                instance_id,
            });
        }
    }

    fn heartbeat_ok(
        &mut self,
        sent_epoch: i32,
        fields: SentFields,
        r: ConsumerGroupHeartbeatResponse,
    ) {
        self.owned_report_unsettled = false;
        // Every error-free answer restarts the interval (HeartbeatRequestState.resetTimer)...
        self.interval = Duration::from_millis(r.heartbeat_interval_ms.max(0) as u64);
        self.shell.timers.set(
            Timer::Heartbeat,
            crate::machine::timer::after(self.shell.now, self.interval),
        );
        // ...but one with a negative epoch is otherwise ignored (it only completes leaves).
        if r.member_epoch < 0 {
            return;
        }
        if let Some(id) = r.member_id.as_deref()
            && id != self.member_id.as_str()
        {
            return self.fail(invalid(&format!(
                "the coordinator answered for member {id:?}, not {}",
                self.member_id
            )));
        }
        self.answered_once = true;
        self.heartbeat_failures = 0;
        self.shell.timers.stop(Timer::Rejoin);
        if r.member_epoch > 0 {
            // The coordinator restarted the member's session when it read this heartbeat.
            let bound = epoch_lease_bound(&self.shell.config, self.interval);
            self.shell.confirm_membership(bound);
            self.registration.may_be_registered = true;
            // A successful join ends an UNRELEASED_INSTANCE_ID episode: the bound is per episode.
            self.registration.unreleased_recoveries = 0;
        }
        self.epoch = r.member_epoch;
        // What this heartbeat carried is what the broker knows now.
        let mut known = self.known.take().unwrap_or_default();
        if sent_epoch == 0 {
            known = fields;
        } else {
            known.rebalance_timeout = fields.rebalance_timeout;
            known.topics = fields.topics;
            known.regex = fields.regex;
            known.assignor = fields.assignor;
            known.owned = fields.owned;
        }
        self.acked_owned = Some(known.owned.clone());
        self.known = Some(known);
        if let Some(a) = r.assignment {
            // Sanitised: sorted, no duplicates, no negative partitions.
            let target: BTreeSet<(Uuid, i32)> = a
                .topic_partitions
                .iter()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .filter(|p| **p >= 0)
                        .map(move |p| (t.topic_id, *p))
                })
                .collect();
            self.target = Some(Arc::new(target));
        }
        match self.phase {
            Phase::Joining | Phase::Acknowledging | Phase::Stable | Phase::Reconciling => {
                self.reconcile()
            }
            _ => {}
        }
    }

    /// The lease ran out: the coordinator may have expired the member after the group's session
    /// timeout and given its partitions to others, so they are lost now, as when fenced. The
    /// member keeps its member id, looks the coordinator up again and rejoins at epoch 0; answers
    /// to heartbeats sent before are ignored (they cannot vouch for the membership now).
    /// Commits are refused until a heartbeat answer confirms a membership again.
    fn on_lease_expired(&mut self) {
        if self.epoch <= 0 || !self.in_group() {
            return;
        }
        self.incarnation += 1;
        self.shell.fail_commits(CommitError::LeaseExpired);
        self.shell.lookup.rediscover(&self.shell.config.group_id);
        self.fenced(Reason::LeaseExpired);
    }

    /// Revoke first, then assign, then acknowledge (AbstractMembershipManager.maybeReconcile).
    fn reconcile(&mut self) {
        let Some(target) = self.target.clone() else {
            if matches!(self.phase, Phase::Joining) {
                self.set_phase(Phase::Stable, Reason::Joined);
            }
            return;
        };
        let unresolved: BTreeSet<Uuid> = target
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| !self.names.contains_key(id))
            .collect();
        if !unresolved.is_empty() && self.shell.timers.get(Timer::MetadataRefresh).is_none() {
            self.request_metadata();
        }
        let resolved: BTreeSet<(Uuid, i32)> = target
            .iter()
            .filter(|(id, _)| self.names.contains_key(id))
            .cloned()
            .collect();
        let revoked: Vec<(Uuid, i32)> = self.owned.difference(&target).cloned().collect();
        let added: Vec<(Uuid, i32)> = resolved.difference(&self.owned).cloned().collect();
        if !revoked.is_empty() {
            let partitions = revoked.iter().filter_map(|tp| self.named(tp)).collect();
            let ticket = self.shell.next_ticket();
            self.shell.events.push_back(Event::Revoking {
                partitions,
                ticket: RevokeTicket { id: ticket },
            });
            let revoking = revoked.into_iter().collect();
            return self.set_phase(Phase::AwaitRevoke { ticket, revoking }, Reason::Revoking);
        }
        if !added.is_empty() && (self.owned_report_in_flight() || self.owned_report_unsettled) {
            // A heartbeat on its way lists what this member owned when it went out. Were the
            // member to take more now, the broker could read that list as "the revocations are
            // done" (CurrentAssignmentBuilder.ownsRevokedPartitions) and hand partitions this
            // member is still taking under an older epoch to another member. Take them once
            // that heartbeat is answered; if it failed in the transport the broker may still
            // process it, so once a later one is answered (the coordinator reads a group's
            // requests in order: a request it read before is processed before).
            return self.set_phase(Phase::Reconciling, Reason::AwaitingHeartbeat);
        }
        if !added.is_empty() {
            self.owned.extend(added.iter().cloned());
            let added = added.iter().filter_map(|tp| self.named(tp)).collect();
            self.shell.events.push_back(Event::Assigned {
                added,
                owned: self.assignment(),
                generation: self.epoch,
            });
        } else if matches!(self.phase, Phase::Joining) {
            self.shell.events.push_back(Event::Assigned {
                added: Vec::new(),
                owned: self.assignment(),
                generation: self.epoch,
            });
        }
        let acked = self.known.as_ref().is_some_and(|k| k.owned == self.owned);
        if !acked {
            self.set_phase(Phase::Acknowledging, Reason::AcknowledgingAssignment);
        } else if unresolved.is_empty() {
            self.set_phase(Phase::Stable, Reason::AssignmentReconciled);
        } else {
            self.set_phase(Phase::Reconciling, Reason::AwaitingTopicMetadata);
        }
    }

    /// Whether the regular heartbeat in flight listed the owned partitions.
    fn owned_report_in_flight(&self) -> bool {
        self.heartbeat_in_flight
            .and_then(|id| self.shell.in_flight(id))
            .is_some_and(|s| {
                matches!(
                    s,
                    Sent::Heartbeat {
                        reported_owned: true,
                        ..
                    }
                )
            })
    }

    fn request_metadata(&mut self) {
        if self.metadata_in_flight {
            return;
        }
        self.metadata_in_flight = true;
        // Subscribed by names: those topics; by pattern: every topic.
        let topics = self
            .regex
            .is_none()
            .then(|| self.topics.iter().cloned().collect());
        self.shell.send_metadata(topics, Sent::Metadata);
    }

    fn on_metadata(&mut self, result: Result<Response, TransportError>) {
        self.metadata_in_flight = false;
        match result
            .map_err(|e| e.to_string())
            .and_then(|r| ClusterMetadata::from_response(&r).map_err(|e| e.to_string()))
        {
            Ok(m) => {
                for (name, t) in m.topics {
                    if !t.id.is_nil() {
                        // A name already known stays shared with the partitions named with it.
                        if self.names.get(&t.id).is_none_or(|n| **n != *name) {
                            self.names.insert(t.id, name.into());
                        }
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "metadata for topic ids failed"),
        }
        // Ids still unknown are carried until metadata catches up.
        let unresolved = self
            .target
            .as_ref()
            .is_some_and(|t| t.iter().any(|(id, _)| !self.names.contains_key(id)));
        if unresolved {
            self.shell.timers.set(
                Timer::MetadataRefresh,
                crate::machine::timer::after(self.shell.now, self.shell.config.retry_backoff_max),
            );
        }
        if matches!(
            self.phase,
            Phase::Reconciling | Phase::Stable | Phase::Acknowledging
        ) {
            self.reconcile();
        }
    }

    fn on_leave(&mut self, id: RequestId, result: Result<Response, TransportError>) {
        let Phase::Leaving {
            request: Some(r),
            then,
            ..
        } = self.phase
        else {
            return;
        };
        if r != id {
            return;
        }
        let code = match &result {
            Ok(Response {
                body: ResponseBody::Kafka(ResponseKind::ConsumerGroupHeartbeat(r)),
                ..
            }) => r.error_code,
            _ => 0,
        };
        if code != codes::NONE {
            tracing::info!(code, "leave heartbeat answered with an error");
        }
        self.shell.leave_answered(&result, code);
        // The -2 leave of an UNRELEASED_INSTANCE_ID recovery answered FENCED_INSTANCE_ID: the
        // instance id is held by another member id (consumerGroupStaticMemberGroupLeave ->
        // throwIfInstanceIdIsFenced), i.e. another process's, not this member's own earlier
        // join. Rejoining cannot succeed before that member leaves or its session expires:
        // stop as the Java client does on UNRELEASED_INSTANCE_ID, rather than spend the
        // recovery budget on it.
        if then == AfterLeave::Rejoin
            && code == codes::FENCED_INSTANCE_ID
            && let Some(instance_id) = self.shell.config.instance_id.clone()
        {
            return self.fail(GroupError::UnreleasedInstanceId {
                group: self.shell.config.group_id.clone(),
                instance_id,
            });
        }
        let failed = result.is_err()
            || matches!(
                code,
                codes::COORDINATOR_NOT_AVAILABLE
                    | codes::NOT_COORDINATOR
                    | codes::COORDINATOR_LOAD_IN_PROGRESS
            );
        if then == AfterLeave::Rejoin && code == codes::NONE && result.is_ok() {
            // The -2 leave under this member's id was accepted: the broker found the instance id
            // held by this very member id (consumerGroupStaticMemberGroupLeave answers
            // UNKNOWN_MEMBER_ID when nobody holds it, throwIfInstanceIdIsFenced
            // FENCED_INSTANCE_ID when another id does), so the UNRELEASED_INSTANCE_ID was this
            // member's own lost join, not a sign of another holder: it does not count against
            // the bound either (tests/sim_random.rs seed 788016: three joins in a row whose
            // answers outlived the request timeout).
            self.registration.unreleased_recoveries =
                self.registration.unreleased_recoveries.saturating_sub(1);
        }
        if then == AfterLeave::Rejoin && failed {
            // The release may not have happened (the coordinator was unavailable, its append
            // failed or is still pending): the UNRELEASED_INSTANCE_ID that may follow is not a
            // sign of another holder, so this attempt does not count against the bound.
            self.registration.unreleased_recoveries =
                self.registration.unreleased_recoveries.saturating_sub(1);
            if result.is_err() || code != codes::COORDINATOR_LOAD_IN_PROGRESS {
                self.shell.coordinator_failed();
            }
        }
        // Fire once: the leave completes whatever the answer.
        self.finish_leave(then);
    }

    fn on_offsets(&mut self, sent: SentOffsets, result: Result<Response, TransportError>) {
        let (fence, now) = (self.fence(), self.shell.now);
        let (event, hint) = self.shell.offsets.answer(sent, result, &fence, now);
        // Only Rediscover comes back for the consumer protocol (the fencing answers of a
        // commit are read as NotMember/Retriable; the heartbeat does the fencing).
        if hint == Some(Hint::Rediscover) {
            self.shell.coordinator_failed();
        }
        self.shell.events.extend(event);
    }
}

fn invalid(reason: &str) -> GroupError {
    GroupError::InvalidResponse {
        api: ApiKey::ConsumerGroupHeartbeat.into(),
        reason: reason.to_owned(),
    }
}

// Everything the application holds, the partitions of an outstanding revocation ticket
// included: a member that is fenced or leaves on a poll timeout while the application still
// revokes them has lost those too (the broker drops their pending revocation), as the Java
// client's onPartitionsLost covers them. Released partitions leave `owned` before this runs
// (`complete_revocation`, `leave_when_revoked`), so a release never names a ticket's partitions.
skeleton!(ConsumerMember, epoch, |m| {
    let mut partitions: Vec<TopicPartition> = m.owned.iter().filter_map(|tp| m.named(tp)).collect();
    partitions.sort();
    m.owned.clear();
    partitions
});
